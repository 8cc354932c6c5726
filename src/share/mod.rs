//! Share groups (KIP-932) on the partition leader: the share-partitions of this broker's
//! partitions, their share sessions, and their durable state in `__share_group_state`.
//!
//! Membership and assignment are the group coordinator's
//! ([`crate::coordinator::share_group`]); this service decides which records a member gets.
//! A ShareFetch reads a partition from its share-partition's next fetch offset through the
//! ordinary fetch path and acquires, in [`partition::SharePartition`], the available records
//! of what it read, locked for `share.record.lock.duration.ms`.
//!
//! # Consistency
//! One share-partition is changed under its own lock, on blocking threads only (persisting
//! waits for the log). An acknowledgement is applied to a copy, the copy's snapshot is
//! appended to `__share_group_state` and replicated, and only then does the copy replace the
//! state and the member hear success: an acknowledged record is never redelivered, even after
//! a crash. Acquisition is not persisted (as in Kafka): after a restart, acquired records are
//! available again.
//!
//! # Crash consistency
//! At start-up the latest snapshot of every share-partition is read back
//! ([`state_log::ShareStateLog::load`]); a share-partition without one starts where
//! `share.auto.offset.reset` says, and that start is persisted before anything is delivered,
//! so a restart never skips records that were never delivered.
//!
//! # Limits
//! Share sessions are bounded (`SHARE_SESSIONS`), and so are the records in flight per
//! share-partition (`share.partition.max.record.locks`). Cluster mode is not served yet: the
//! share-partition leader writes its state to `__share_group_state` partitions it leads, which
//! only a single node guarantees.

pub mod coordinator;
pub mod dead_letter;
pub mod partition;
pub mod persister;
pub mod session;
pub mod state_log;
pub mod state_record;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::ResponseError;
use uuid::Uuid;

pub use crate::coordinator::internal_topics::SHARE_STATE_TOPIC;

use self::coordinator::{ShareCoordinator, StateWrite};
use self::partition::{Acquired, BatchKind, Limits, SharePartition};
use self::persister::{Persister, Summary};
use self::session::ShareSessions;
use self::state_record::StateKey;
use crate::broker::{Broker, Offset, Topic};
use crate::clock::now_ms;
use crate::config::group::{share_settings, BrokerGroupSettings, ShareSettings};
use crate::log::batch::BatchIter;
use crate::log::txn_index::AbortedTxn;

/// How long asking every share coordinator about a group may take (cluster mode).
const GROUP_STATE_TIMEOUT: Duration = Duration::from_secs(5);

/// Kafka's `group.share.max.share.sessions` default.
const SHARE_SESSIONS: usize = 2000;

type Shared = Arc<Mutex<SharePartition>>;

pub struct ShareService {
    broker: Arc<Broker>,
    /// The durable state, through the share coordinator of each key.
    pub persister: Persister,
    /// The share-partitions in memory, each at the leader epoch it was read back at.
    ///
    /// Locks: this map's lock and a share-partition's are never held together, except to
    /// `try_lock` a share-partition (clone the `Arc` out, release the map, then lock it). A
    /// share-partition stays locked through its state write, which waits for
    /// `__share_group_state`'s replicas, and the timers read this map on the async workers.
    /// A write that was fenced by a new leader and then forgot its share-partition (taking
    /// this map) while a fetch held this map waiting for that share-partition deadlocked a
    /// broker: every async worker ended up waiting for this map.
    partitions: Mutex<HashMap<StateKey, Shared>>,
    /// Held while a share-partition is read back or started (see `share_partition`).
    init: Mutex<()>,
    pub sessions: Mutex<ShareSessions>,
    /// Woken when records become available again (released, expired), for waiting fetches.
    pub available: tokio::sync::Notify,
    counters: Counters,
    /// Copies of archived records for groups with a dead-letter topic.
    pub dead_letters: Arc<dead_letter::DeadLetters>,
}

/// Totals since start-up, for /metrics.
#[derive(Default)]
struct Counters {
    acquired: AtomicU64,
    redelivered: AtomicU64,
    acknowledged: AtomicU64,
    lock_expiries: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A share-partition's limits under `s`.
pub fn limits(s: &ShareSettings) -> Limits {
    Limits {
        delivery_count_limit: s.delivery_count_limit.clamp(1, i16::MAX as i64) as i16,
        max_record_locks: s.max_record_locks.max(1) as usize,
    }
}

/// What a share-partition leader writes of `sp`: all of its state.
fn state_write(sp: &SharePartition) -> StateWrite {
    let s = sp.snapshot(now_ms());
    StateWrite {
        state_epoch: s.state_epoch,
        leader_epoch: s.leader_epoch,
        start_offset: s.start_offset,
        delivery_complete_count: s.delivery_complete_count,
        batches: s.state_batches,
    }
}

impl ShareService {
    /// The service, with its share coordinator (on a single node holding every
    /// share-partition's state, read back from `__share_group_state`). Blocking.
    pub fn open(broker: Arc<Broker>) -> std::io::Result<Arc<ShareService>> {
        let coordinator = Arc::new(ShareCoordinator::open(broker.clone())?);
        Ok(Arc::new(ShareService {
            persister: Persister::new(broker.clone(), coordinator),
            broker,
            partitions: Mutex::new(HashMap::new()),
            init: Mutex::new(()),
            sessions: Mutex::new(ShareSessions::new(SHARE_SESSIONS)),
            available: tokio::sync::Notify::new(),
            counters: Counters::default(),
            dead_letters: Arc::default(),
        }))
    }

    /// The settings `group` runs with now.
    pub fn settings(&self, group: &str) -> ShareSettings {
        let broker = BrokerGroupSettings::new(&self.broker.config.explicit);
        share_settings(&self.broker.group_configs(group), &broker)
    }

    /// The share-partition of `group` on `topic`'s `partition`, read back from its share
    /// coordinator or started as `share.auto.offset.reset` says (and that start persisted).
    /// State kept from an older leader epoch (this broker lost and regained the leadership) is
    /// read back again. Blocking.
    fn share_partition(
        &self,
        group: &str,
        topic: &Topic,
        partition: i32,
        settings: &ShareSettings,
    ) -> Result<Shared, ResponseError> {
        let key = StateKey {
            group: group.to_string(),
            topic_id: topic.id,
            partition,
        };
        let p = topic
            .partitions
            .get(usize::try_from(partition).map_err(|_| ResponseError::UnknownTopicOrPartition)?)
            .ok_or(ResponseError::UnknownTopicOrPartition)?;
        if !p.is_leader() {
            return Err(ResponseError::NotLeaderOrFollower);
        }
        let leader_epoch = p.leader_epoch().0;
        // The map's lock is never held while a share-partition's is taken (a share-partition
        // stays locked through its state write, which waits for the state's replicas).
        let current = || {
            let sp = lock(&self.partitions).get(&key).cloned()?;
            let epoch = lock(&sp).leader_epoch;
            (epoch == leader_epoch).then_some(sp)
        };
        if let Some(sp) = current() {
            return Ok(sp);
        }
        // One share-partition is read back or started by one thread: two first fetches at
        // once must not both read, or both write a start.
        let _init = lock(&self.init);
        if let Some(sp) = current() {
            return Ok(sp);
        }
        let offsets = p.offsets();
        let stored = self
            .persister
            .read(&key, leader_epoch)
            .map_err(|e| self.write_failed(&key, e))?;
        let sp = match stored {
            Some(s) if s.start_offset >= 0 => {
                let mut sp = SharePartition::from_snapshot(&s);
                sp.leader_epoch = leader_epoch;
                sp
            }
            // Initialized without a start (-1): the start is decided here and written.
            Some(s) => {
                let start = self.initial_offset(p, settings)?;
                let mut sp = SharePartition::new(start, leader_epoch, now_ms());
                sp.state_epoch = s.state_epoch;
                self.persister
                    .write(&key, &state_write(&sp))
                    .map_err(|e| self.write_failed(&key, e))?;
                sp
            }
            // Never initialized: initialized here at the start decided, then read (which
            // fences older leaders).
            None => {
                let start = self.initial_offset(p, settings)?;
                self.persister
                    .initialize(&key, 0, start)
                    .map_err(|e| self.write_failed(&key, e))?;
                let s = self
                    .persister
                    .read(&key, leader_epoch)
                    .map_err(|e| self.write_failed(&key, e))?
                    .ok_or(ResponseError::CoordinatorNotAvailable)?;
                tracing::info!(group, topic = %topic.name, partition, start_offset = s.start_offset, "share-partition initialized");
                let mut sp = SharePartition::from_snapshot(&s);
                sp.leader_epoch = leader_epoch;
                sp
            }
        };
        let shared = Arc::new(Mutex::new(sp));
        lock(&shared).move_start_to(offsets.log_start_offset.0);
        lock(&self.partitions).insert(key, shared.clone());
        Ok(shared)
    }

    /// Where a new share-partition starts (`share.auto.offset.reset`).
    fn initial_offset(
        &self,
        p: &crate::broker::Partition,
        settings: &ShareSettings,
    ) -> Result<i64, ResponseError> {
        let offsets = p.offsets();
        let reset = settings.auto_offset_reset.as_str();
        if reset == "earliest" {
            return Ok(offsets.log_start_offset.0);
        }
        if let Some(d) = reset.strip_prefix("by_duration:") {
            let nanos = crate::config::group::parse_iso_duration_nanos(d)
                .ok_or(ResponseError::InvalidConfig)?;
            let since = now_ms() - (nanos / 1_000_000).min(i64::MAX as i128) as i64;
            let (_, found) = p.offset_for_timestamp(since);
            return Ok(match found {
                Ok(Some(t)) => t.offset.max(offsets.log_start_offset.0),
                Ok(None) => offsets.high_watermark.0,
                Err(_) => return Err(ResponseError::KafkaStorageError),
            });
        }
        Ok(offsets.high_watermark.0)
    }

    /// Where to read `partition` for `group`, or `None` when nothing can be acquired there
    /// now. Blocking.
    pub fn fetch_offset(
        &self,
        group: &str,
        topic: &Topic,
        partition: i32,
        settings: &ShareSettings,
    ) -> Result<Option<Offset>, ResponseError> {
        let sp = self.share_partition(group, topic, partition, settings)?;
        let mut sp = lock(&sp);
        if let Some(p) = topic.partitions.get(partition as usize) {
            sp.move_start_to(p.offsets().log_start_offset.0);
        }
        Ok(sp.next_fetch_offset(limits(settings)).map(Offset))
    }

    /// Acquires for `member` the records of `records` (read from `topic`'s `partition` at
    /// its fetch offset) that are available, at most `max_records`; returns the acquired
    /// ranges and the batches that hold them. `aborted` (read_committed) names the aborted
    /// transactions among the records: their records are archived, never delivered.
    /// Blocking.
    #[allow(clippy::too_many_arguments)]
    pub fn acquire(
        &self,
        group: &str,
        member: &Arc<str>,
        topic: &Topic,
        partition: i32,
        records: &Bytes,
        aborted: Option<&[AbortedTxn]>,
        max_records: usize,
        whole_batches: bool,
        settings: &ShareSettings,
    ) -> Result<(Vec<Acquired>, Bytes), ResponseError> {
        let batches = classify(records, aborted);
        if batches.is_empty() {
            return Ok((Vec::new(), Bytes::new()));
        }
        let sp = self.share_partition(group, topic, partition, settings)?;
        let deadline =
            Instant::now() + Duration::from_millis(settings.record_lock_duration_ms.max(0) as u64);
        let acquired = {
            let mut sp = lock(&sp);
            let spans: Vec<_> = batches.iter().map(|b| (b.first, b.last, b.kind)).collect();
            sp.acquire(
                member,
                &spans,
                max_records,
                whole_batches,
                limits(settings),
                deadline,
            )
        };
        for a in &acquired {
            let n = (a.last_offset - a.first_offset + 1) as u64;
            self.counters.acquired.fetch_add(n, Ordering::Relaxed);
            if a.delivery_count > 1 {
                self.counters.redelivered.fetch_add(n, Ordering::Relaxed);
            }
        }
        // Only the batches that hold acquired records go back.
        let keep = |b: &&FetchedBatch| {
            acquired
                .iter()
                .any(|a| a.first_offset <= b.last && b.first <= a.last_offset)
        };
        let kept: Vec<&FetchedBatch> = batches.iter().filter(keep).collect();
        let bytes = match (kept.first(), kept.last()) {
            (Some(first), Some(last)) if kept.len() == last.index - first.index + 1 => {
                records.slice(first.range.start..last.range.end)
            }
            _ => {
                let mut buf = bytes::BytesMut::new();
                for b in kept {
                    buf.extend_from_slice(&records[b.range.clone()]);
                }
                buf.freeze()
            }
        };
        Ok((acquired, bytes))
    }

    /// Applies `member`'s acknowledgements on one share-partition and persists the result
    /// before returning: all of them, or none. RENEW (type 4) is accepted when `renew` (a v2
    /// request) and the group's `share.renew.acknowledge.enable` allow it. Blocking.
    pub fn acknowledge(
        &self,
        group: &str,
        member: &str,
        topic: &Topic,
        partition: i32,
        batches: &[(i64, i64, Vec<i8>)],
        renew: bool,
    ) -> Result<(), ResponseError> {
        let settings = self.settings(group);
        let renew_until = (renew && settings.renew_acknowledge_enable).then(|| {
            Instant::now() + Duration::from_millis(settings.record_lock_duration_ms.max(0) as u64)
        });
        let key = StateKey {
            group: group.to_string(),
            topic_id: topic.id,
            partition,
        };
        let Some(sp) = lock(&self.partitions).get(&key).cloned() else {
            // Nothing was ever acquired here since this broker started.
            return Err(ResponseError::InvalidRecordState);
        };
        let mut sp = lock(&sp);
        let mut next = sp.clone();
        for (first, last, types) in batches {
            next.acknowledge(member, *first, *last, types, limits(&settings), renew_until)
                .map_err(|e| match e {
                    partition::AckError::InvalidRecordState => ResponseError::InvalidRecordState,
                    partition::AckError::InvalidRequest => ResponseError::InvalidRequest,
                })?;
        }
        next.snapshot_epoch = next.snapshot_epoch.wrapping_add(1);
        if let Err(e) = self.persister.write(&key, &state_write(&next)) {
            drop(sp);
            return Err(self.write_failed(&key, e));
        }
        crate::failpoint::hit(crate::failpoint::SHARE_ACKNOWLEDGED_PERSISTED);
        let n: i64 = batches
            .iter()
            .map(|(f, l, _)| l.saturating_sub(*f).saturating_add(1))
            .sum();
        self.counters
            .acknowledged
            .fetch_add(n.max(0) as u64, Ordering::Relaxed);
        let released =
            next.next_fetch_offset(limits(&settings)) != sp.next_fetch_offset(limits(&settings));
        let dead = next.take_dead_letters();
        *sp = next;
        drop(sp);
        self.dead_letters.enqueue(group, topic.id, partition, dead);
        if released {
            self.available.notify_waiters();
        }
        Ok(())
    }

    /// Releases what `member` of `group` holds anywhere on this broker (its share session
    /// closed), persisting the share-partitions that changed. Blocking.
    pub fn release_member(&self, group: &str, member: &str) {
        let settings = self.settings(group);
        let mine: Vec<(StateKey, Shared)> = lock(&self.partitions)
            .iter()
            .filter(|(k, _)| k.group == group)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut any = false;
        for (key, sp) in mine {
            let mut sp = lock(&sp);
            if sp.release_member(member, limits(&settings)) {
                any = true;
                self.persist_quietly(&key, sp);
            }
        }
        if any {
            self.available.notify_waiters();
        }
    }

    /// A client connection closed: its share sessions end and what their members hold is
    /// released. Blocking.
    pub fn connection_closed(&self, connection: std::net::SocketAddr) {
        let ended = lock(&self.sessions).connection_closed(connection);
        for (group, member) in ended {
            tracing::debug!(%group, %member, "share session ended with its connection");
            self.release_member(&group, &member);
        }
    }

    /// Writes a share-partition's state after a change that needs no answer (a release, an
    /// expired lock); a failure only means a record may be delivered once more after a crash.
    /// Takes the share-partition's guard and releases it after the write: a fenced write
    /// then forgets the share-partition, which takes the map's lock (never while a
    /// share-partition's is held).
    fn persist_quietly(&self, key: &StateKey, mut sp: std::sync::MutexGuard<'_, SharePartition>) {
        sp.snapshot_epoch = sp.snapshot_epoch.wrapping_add(1);
        let dead = sp.take_dead_letters();
        let written = self.persister.write(key, &state_write(&sp));
        drop(sp);
        if written.is_ok() {
            self.dead_letters
                .enqueue(&key.group, key.topic_id, key.partition, dead);
        }
        if let Err(e) = written {
            tracing::warn!(group = %key.group, topic_id = %key.topic_id, partition = key.partition, error = ?e, "cannot persist released share records");
            if matches!(
                e,
                ResponseError::FencedLeaderEpoch
                    | ResponseError::FencedStateEpoch
                    | ResponseError::InvalidRequest
            ) {
                self.forget(key);
            }
        }
    }

    /// A write of `key`'s state failed: a fenced share-partition (a newer leader read it, or
    /// its offsets were reset) is forgotten here, to be read back on its next fetch; the
    /// member hears an error it handles.
    fn write_failed(&self, key: &StateKey, e: ResponseError) -> ResponseError {
        tracing::warn!(group = %key.group, topic_id = %key.topic_id, partition = key.partition, error = ?e, "share state write failed");
        match e {
            ResponseError::FencedLeaderEpoch => {
                self.forget(key);
                ResponseError::NotLeaderOrFollower
            }
            // Reset (a newer state epoch) or deleted (INVALID_REQUEST: no longer initialized)
            // since this broker read it.
            ResponseError::FencedStateEpoch | ResponseError::InvalidRequest => {
                self.forget(key);
                ResponseError::InvalidRecordState
            }
            ResponseError::NotCoordinator
            | ResponseError::CoordinatorLoadInProgress
            | ResponseError::NotLeaderOrFollower => ResponseError::CoordinatorNotAvailable,
            other => other,
        }
    }

    /// Drops a share-partition from memory (its records' locks go with it: they are
    /// available again when it is read back).
    fn forget(&self, key: &StateKey) {
        lock(&self.partitions).remove(key);
        self.available.notify_waiters();
    }

    /// Whether any acquisition lock may have expired. Called on an async worker: a
    /// share-partition busy with a write counts as maybe expired rather than being waited for.
    pub fn needs_tick(&self) -> bool {
        if self.persister.coordinator().needs_load() {
            return true;
        }
        let now = Instant::now();
        let idle = self.idle_groups();
        lock(&self.partitions)
            .iter()
            .any(|(k, sp)| match sp.try_lock() {
                Ok(sp) => {
                    sp.next_lock_deadline().is_some_and(|d| d <= now)
                        || (idle.contains(&k.group) && sp.acquired_count() == 0)
                }
                Err(_) => true,
            })
    }

    /// Groups with share-partitions here and no share session here.
    fn idle_groups(&self) -> std::collections::HashSet<String> {
        let groups: std::collections::HashSet<String> = lock(&self.partitions)
            .keys()
            .map(|k| k.group.clone())
            .collect();
        let sessions = lock(&self.sessions);
        groups
            .into_iter()
            .filter(|g| !sessions.has_group(g))
            .collect()
    }

    /// Drops the share-partitions of groups without a share session here and with nothing
    /// acquired: their state is durable, and reading it back on the next fetch sees what
    /// another broker changed meanwhile (AlterShareGroupOffsets, DeleteShareGroupOffsets).
    fn evict_idle(&self) {
        let idle = self.idle_groups();
        if idle.is_empty() {
            return;
        }
        lock(&self.partitions).retain(|k, sp| {
            !idle.contains(&k.group) || sp.try_lock().map_or(true, |sp| sp.acquired_count() > 0)
        });
    }

    /// Releases the records whose acquisition lock expired. Blocking.
    pub fn tick(&self) {
        self.persister.coordinator().load_elected();
        let now = Instant::now();
        let all: Vec<(StateKey, Shared)> = lock(&self.partitions)
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut any = false;
        for (key, sp) in all {
            let mut sp = lock(&sp);
            if sp.next_lock_deadline().is_none_or(|d| d > now) {
                continue;
            }
            let settings = self.settings(&key.group);
            let before = sp.acquired_count();
            if sp.expire_locks(now, limits(&settings)) {
                any = true;
                let expired = before - sp.acquired_count();
                self.counters
                    .lock_expiries
                    .fetch_add(expired as u64, Ordering::Relaxed);
                tracing::debug!(group = %key.group, partition = key.partition, "acquisition locks expired");
                self.persist_quietly(&key, sp);
            }
        }
        if any {
            self.available.notify_waiters();
        }
        self.evict_idle();
    }

    /// The keys of `group`'s share-partitions that have durable state. On a single node this
    /// broker's coordinator holds them all; in cluster mode every partition of every topic is
    /// asked of its coordinator (an admin operation's cost). Blocking.
    fn group_keys(&self, group: &str) -> Result<Vec<(StateKey, Summary)>, ResponseError> {
        let local = self.persister.coordinator();
        if self.broker.config.cluster.is_none() {
            return Ok(local
                .keys(Some(group))
                .into_iter()
                .filter_map(|k| Some((k.clone(), local.summary(&k).ok()??)))
                .map(|(k, s)| (k, Summary::of(&s)))
                .collect());
        }
        let keys: Vec<StateKey> = self
            .broker
            .topics()
            .into_iter()
            .filter(|t| !t.is_internal())
            .flat_map(|t| {
                (0..t.partitions.len() as i32).map(move |partition| StateKey {
                    group: group.to_string(),
                    topic_id: t.id,
                    partition,
                })
            })
            .collect();
        let deadline = Instant::now() + GROUP_STATE_TIMEOUT;
        Ok(self
            .persister
            .summaries(keys, deadline)?
            .into_iter()
            .filter_map(|(k, s)| Some((k, s?)))
            .collect())
    }

    /// Forgets and deletes the durable state of `group` (DeleteGroups on an empty share
    /// group). Blocking.
    pub fn delete_group(&self, group: &str) -> Result<(), ResponseError> {
        let mut keys: Vec<StateKey> = self
            .group_keys(group)?
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        keys.extend(
            lock(&self.partitions)
                .keys()
                .filter(|k| k.group == group)
                .cloned(),
        );
        keys.sort_by_key(|a| (a.topic_id, a.partition));
        keys.dedup();
        for key in keys {
            self.persister.delete(&key)?;
            lock(&self.partitions).remove(&key);
        }
        Ok(())
    }

    /// Whether `group` has durable share-partition state (it exists as a share group even
    /// with no member). Blocking.
    pub fn knows_group(&self, group: &str) -> bool {
        lock(&self.partitions).keys().any(|k| k.group == group)
            || self.group_keys(group).is_ok_and(|k| !k.is_empty())
    }

    /// The groups with share-partition state on this broker (led here, or kept by its share
    /// coordinator).
    pub fn group_ids(&self) -> Vec<String> {
        let stored = self.persister.coordinator().keys(None);
        let mut ids: Vec<String> = lock(&self.partitions)
            .keys()
            .map(|k| k.group.clone())
            .chain(stored.into_iter().map(|k| k.group))
            .collect();
        ids.sort();
        ids.dedup();
        ids
    }

    /// `group`'s share-partitions by (topic id, partition): start offset, leader epoch, and
    /// the records in flight already done (Kafka's delivery-complete count, for the lag).
    /// Blocking.
    pub fn start_offsets(&self, group: &str) -> HashMap<(Uuid, i32), (i64, i32, i64)> {
        let mut out: HashMap<(Uuid, i32), (i64, i32, i64)> = self
            .group_keys(group)
            .unwrap_or_default()
            .into_iter()
            .map(|(k, s)| {
                (
                    (k.topic_id, k.partition),
                    (s.start_offset, s.leader_epoch, s.delivery_complete),
                )
            })
            .collect();
        // What this broker leads is newer than what its coordinator answered.
        let held: Vec<(StateKey, Shared)> = lock(&self.partitions)
            .iter()
            .filter(|(k, _)| k.group == group)
            .map(|(k, sp)| (k.clone(), sp.clone()))
            .collect();
        for (k, sp) in held {
            let sp = lock(&sp);
            let done = sp.done_in_flight() as i64;
            out.insert(
                (k.topic_id, k.partition),
                (sp.start_offset(), sp.leader_epoch, done),
            );
        }
        out
    }

    /// Starts `group`'s share-partition over at `offset` (AlterShareGroupOffsets on a group
    /// with no members): nothing in flight, every record from `offset` on to be delivered.
    /// The state epoch goes up, so a share-partition leader that still holds the old state is
    /// fenced at its next write. Persisted before it takes effect. Blocking.
    pub fn reset_start_offset(
        &self,
        group: &str,
        topic: &Topic,
        partition: i32,
        offset: i64,
    ) -> Result<(), ResponseError> {
        let p = topic
            .partitions
            .get(usize::try_from(partition).map_err(|_| ResponseError::UnknownTopicOrPartition)?)
            .ok_or(ResponseError::UnknownTopicOrPartition)?;
        let key = StateKey {
            group: group.to_string(),
            topic_id: topic.id,
            partition,
        };
        let offsets = p.offsets();
        let start = offset.clamp(offsets.log_start_offset.0, offsets.log_end_offset.0);
        let stored = self.persister.summary(&key)?.map(|s| s.state_epoch);
        let held = lock(&self.partitions).get(&key).cloned();
        let held = held.map(|sp| lock(&sp).state_epoch);
        let state_epoch = stored.max(held).unwrap_or(0).wrapping_add(1);
        self.persister.initialize(&key, state_epoch, start)?;
        lock(&self.partitions).remove(&key);
        Ok(())
    }

    /// Deletes `group`'s state of `topic_id`'s share-partitions (DeleteShareGroupOffsets):
    /// the next member to fetch starts where `share.auto.offset.reset` says. Blocking.
    pub fn delete_topic_state(&self, group: &str, topic_id: Uuid) -> Result<(), ResponseError> {
        let mut keys: Vec<StateKey> = self
            .group_keys(group)?
            .into_iter()
            .map(|(k, _)| k)
            .filter(|k| k.topic_id == topic_id)
            .collect();
        keys.extend(
            lock(&self.partitions)
                .keys()
                .filter(|k| k.group == group && k.topic_id == topic_id)
                .cloned(),
        );
        keys.sort_by_key(|k| k.partition);
        keys.dedup();
        for key in keys {
            self.persister.delete(&key)?;
            lock(&self.partitions).remove(&key);
        }
        Ok(())
    }

    /// Prometheus lines: share-partitions, records in flight and acquired by members now, and
    /// totals of acquisitions, redeliveries, acknowledgements and expired locks.
    pub fn render_metrics(&self, out: &mut String) {
        let (mut partitions, mut in_flight, mut acquired) = (0usize, 0usize, 0usize);
        let all: Vec<Shared> = lock(&self.partitions).values().cloned().collect();
        for sp in all {
            let sp = lock(&sp);
            partitions += 1;
            in_flight += sp.in_flight();
            acquired += sp.acquired_count();
        }
        let c = &self.counters;
        let rows: [(&str, &str, &str, u64); 9] = [
            (
                "strata_share_partitions",
                "gauge",
                "Share-partitions served by this broker.",
                partitions as u64,
            ),
            (
                "strata_share_records_in_flight",
                "gauge",
                "Records between a share-partition's start and end offsets.",
                in_flight as u64,
            ),
            (
                "strata_share_records_acquired",
                "gauge",
                "Records acquired by a member and not yet acknowledged or released.",
                acquired as u64,
            ),
            (
                "strata_share_acquisitions_total",
                "counter",
                "Records acquired (each delivery counts).",
                c.acquired.load(Ordering::Relaxed),
            ),
            (
                "strata_share_redeliveries_total",
                "counter",
                "Records acquired again after a release or an expired lock.",
                c.redelivered.load(Ordering::Relaxed),
            ),
            (
                "strata_share_acknowledged_total",
                "counter",
                "Records acknowledged (accepted, released, rejected) and persisted.",
                c.acknowledged.load(Ordering::Relaxed),
            ),
            (
                "strata_share_lock_expiries_total",
                "counter",
                "Acquisition locks that expired before an acknowledgement.",
                c.lock_expiries.load(Ordering::Relaxed),
            ),
            (
                "strata_share_dead_letters_total",
                "counter",
                "Archived records copied to their group's dead-letter topic.",
                self.dead_letters.written.load(Ordering::Relaxed),
            ),
            (
                "strata_share_dead_letter_failures_total",
                "counter",
                "Copies to a dead-letter topic dropped (queue full) or not written.",
                self.dead_letters.failed.load(Ordering::Relaxed),
            ),
        ];
        for (name, kind, help, value) in rows {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        }
    }

    /// Share-partitions of a deleted topic are forgotten (their records are gone).
    pub fn topic_deleted(&self, topic_id: Uuid) {
        lock(&self.partitions).retain(|k, _| k.topic_id != topic_id);
        self.persister.coordinator().topic_deleted(topic_id);
    }

    /// This broker no longer leads `topic`'s `partition`: its share-partitions are dropped
    /// (the new leader reads their state back; what was acquired here is available there).
    pub fn leadership_lost(&self, topic_id: Uuid, partition: i32) {
        lock(&self.partitions).retain(|k, _| !(k.topic_id == topic_id && k.partition == partition));
    }
}

/// One batch of a fetched record set.
struct FetchedBatch {
    index: usize,
    range: std::ops::Range<usize>,
    first: i64,
    last: i64,
    kind: BatchKind,
}

/// The batches of `records` in order: control batches, and under read_committed the batches
/// of aborted transactions, are to be skipped (Kafka's consumer logic: a producer's batches
/// from an aborted transaction's first offset up to its abort marker).
fn classify(records: &Bytes, aborted: Option<&[AbortedTxn]>) -> Vec<FetchedBatch> {
    let mut pending: Vec<&AbortedTxn> = aborted.map(|a| a.iter().collect()).unwrap_or_default();
    pending.sort_by_key(|a| a.first_offset);
    let mut pending = pending.into_iter().peekable();
    let mut aborting: std::collections::HashSet<i64> = Default::default();
    let mut out = Vec::new();
    let base = records.as_ptr() as usize;
    for (index, item) in BatchIter::new(records).enumerate() {
        let Ok((_, h, raw)) = item else { break };
        while let Some(a) = pending.next_if(|a| a.first_offset <= h.last_offset()) {
            aborting.insert(a.producer_id);
        }
        let kind = if h.is_control() {
            aborting.remove(&h.producer_id);
            BatchKind::Skip
        } else if h.is_transactional() && aborting.contains(&h.producer_id) {
            BatchKind::Skip
        } else {
            BatchKind::Data
        };
        let start = raw.as_ptr() as usize - base;
        out.push(FetchedBatch {
            index,
            range: start..start + raw.len(),
            first: h.base_offset,
            last: h.last_offset(),
            kind,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// A single-node broker with topic `jobs` holding `n` records, and its share service.
    fn broker_with_records(dir: &std::path::Path, n: usize) -> (Arc<Broker>, Arc<Topic>) {
        let broker = crate::api::test_support::broker_with_acls(dir, &[]);
        let topic = broker
            .create_topic("jobs", 1, 1, BTreeMap::new())
            .expect("topic");
        let batch = crate::log::batch::build_batch(
            (0..n).map(|i| (now_ms(), None, Some(Bytes::from(format!("job-{i}"))))),
            kafka_protocol::records::Compression::None,
        )
        .expect("batch");
        topic.partitions[0].append(&batch).expect("append");
        // A single replica: the high watermark follows the append.
        topic.partitions[0].maybe_increment_high_watermark(now_ms());
        (broker, topic)
    }

    fn earliest(shares: &ShareService) -> ShareSettings {
        let mut s = shares.settings("g");
        s.auto_offset_reset = "earliest".into();
        s
    }

    #[test]
    fn first_fetches_racing_after_a_restart_all_take_the_persisted_state() {
        let dir = tempfile::tempdir().unwrap();
        let (broker, topic) = broker_with_records(dir.path(), 10);
        let shares = ShareService::open(broker.clone()).unwrap();
        let settings = earliest(&shares);
        assert_eq!(
            shares.fetch_offset("g", &topic, 0, &settings).unwrap(),
            Some(Offset(0))
        );
        let records = topic.partitions[0]
            .read(Offset(0), 1 << 20, Offset(10), true)
            .unwrap()
            .unwrap()
            .read()
            .unwrap();
        let member: Arc<str> = Arc::from("m");
        let (acquired, _) = shares
            .acquire(
                "g", &member, &topic, 0, &records, None, 100, true, &settings,
            )
            .unwrap();
        assert_eq!(acquired[0].last_offset, 9);
        shares
            .acknowledge("g", "m", &topic, 0, &[(0, 3, vec![1])], false)
            .unwrap();

        // Restarted: the snapshot says start 4. Eight first fetches at once, with `latest`
        // as the reset (which would start at 10 if any of them started the share-partition
        // afresh instead of reading the snapshot back).
        let shares = ShareService::open(broker.clone()).unwrap();
        let latest = shares.settings("g");
        let start = std::sync::Barrier::new(8);
        let got: Vec<_> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        start.wait();
                        shares.fetch_offset("g", &topic, 0, &latest)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(got.iter().all(|g| *g == Ok(Some(Offset(4)))), "{got:?}");
        let reloaded = ShareService::open(broker).unwrap();
        assert_eq!(reloaded.start_offsets("g")[&(topic.id, 0)].0, 4);
    }
}

#[cfg(test)]
mod lock_order_tests {
    use std::collections::BTreeMap;
    use std::sync::atomic::AtomicBool;

    use super::*;

    /// A release whose write a newer leader fenced forgets its share-partition while other
    /// threads read the map (metrics, lookups). Forgetting used to take the map's lock while
    /// holding the share-partition's, and a reader holding the map waited for that
    /// share-partition: the broker deadlocked (and, through the timers on the async
    /// workers, stopped). Both sides run many times here and must finish.
    #[test]
    fn a_fenced_release_and_readers_of_the_map_never_deadlock() {
        let dir = tempfile::tempdir().unwrap();
        let broker = crate::api::test_support::broker_with_acls(dir.path(), &[]);
        let topic = broker
            .create_topic("jobs", 1, 1, BTreeMap::new())
            .expect("topic");
        let batch = crate::log::batch::build_batch(
            (0..20).map(|i| (now_ms(), None, Some(Bytes::from(format!("job-{i}"))))),
            kafka_protocol::records::Compression::None,
        )
        .expect("batch");
        topic.partitions[0].append(&batch).expect("append");
        topic.partitions[0].maybe_increment_high_watermark(now_ms());
        let shares = Arc::new(ShareService::open(broker.clone()).unwrap());
        let mut settings = shares.settings("g");
        settings.auto_offset_reset = "earliest".into();
        let records = topic.partitions[0]
            .read(Offset(0), 1 << 20, Offset(20), true)
            .unwrap()
            .unwrap()
            .read()
            .unwrap();
        let key = StateKey {
            group: "g".into(),
            topic_id: topic.id,
            partition: 0,
        };
        let leader_epoch = topic.partitions[0].leader_epoch().0;
        let stop = Arc::new(AtomicBool::new(false));
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let readers: Vec<_> = (0..2)
            .map(|n| {
                let (shares, stop, topic, settings) = (
                    shares.clone(),
                    stop.clone(),
                    topic.clone(),
                    settings.clone(),
                );
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        if n == 0 {
                            let mut out = String::new();
                            shares.render_metrics(&mut out);
                        } else {
                            let _ = shares.fetch_offset("g", &topic, 0, &settings);
                        }
                    }
                })
            })
            .collect();
        let writer = {
            let (shares, topic) = (shares.clone(), topic.clone());
            std::thread::spawn(move || {
                let member: Arc<str> = Arc::from("m");
                for round in 0..200 {
                    let _ = shares.fetch_offset("g", &topic, 0, &settings);
                    let _ = shares.acquire(
                        "g", &member, &topic, 0, &records, None, 100, true, &settings,
                    );
                    // A newer leader reads the state: this broker's next write is fenced.
                    let _ = shares.persister.read(&key, leader_epoch + 1 + round);
                    shares.release_member("g", "m");
                }
                let _ = done_tx.send(());
            })
        };
        let finished = done_rx.recv_timeout(std::time::Duration::from_secs(30));
        stop.store(true, Ordering::Relaxed);
        assert!(
            finished.is_ok(),
            "the releases deadlocked with the map's readers"
        );
        writer.join().unwrap();
        for r in readers {
            r.join().unwrap();
        }
    }
}
