//! The share coordinator (Kafka's `ShareCoordinatorShard`): the durable state of the
//! share-partitions whose key (`group:topic_id:partition`) falls in a `__share_group_state`
//! partition this broker leads, served to share-partition leaders through
//! InitializeShareGroupState, ReadShareGroupState, WriteShareGroupState,
//! DeleteShareGroupState and ReadShareGroupStateSummary (locally when the leader is this
//! broker, [`super::persister`]).
//!
//! It follows the leadership of `__share_group_state` as the group coordinator follows
//! `__consumer_offsets` ([`Ownership`]): elected, a partition loads (requests for its keys get
//! COORDINATOR_LOAD_IN_PROGRESS) until the runtime's timer has replayed it; resigned, its keys
//! are dropped and answered NOT_COORDINATOR. Without a metadata quorum every partition is
//! loaded at start-up.
//!
//! # Consistency
//! A write is applied to a copy of the key's state under the key's own lock, appended to the
//! log as one `ShareSnapshot` record and replicated (acks=all), and only then installed and
//! answered. Writes are fenced as in Kafka: a leader epoch older than the latest one read or
//! written (a deposed share-partition leader) gets FENCED_LEADER_EPOCH, a state epoch older
//! than the stored one (the group's offsets were reset since) FENCED_STATE_EPOCH.
//!
//! A write's state batches overwrite the stored ones where they overlap (Kafka's
//! `PersisterStateBatchCombiner`), and batches below the start offset are dropped.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use kafka_protocol::ResponseError;

use super::partition::{Snapshot, StateBatch};
use super::state_log::ShareStateLog;
use super::state_record::StateKey;
use crate::broker::Broker;
use crate::clock::now_ms;
use crate::coordinator::ownership::{self, Ownership};
use crate::coordinator::LogWriteError;

/// What a share-partition leader writes (WriteShareGroupState): its epochs (checked against
/// the fences), a start offset (-1: unchanged), its count of completed offsets from that
/// start (-1: not known) and the state batches that changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateWrite {
    pub state_epoch: i32,
    pub leader_epoch: i32,
    pub start_offset: i64,
    pub delivery_complete_count: i32,
    pub batches: Vec<StateBatch>,
}

#[derive(Default)]
struct Entry {
    /// `None`: never initialized (or deleted). Its `leader_epoch` is the last reader's, as
    /// the summary reports it (0 after InitializeShareGroupState).
    state: Option<Snapshot>,
    /// The newest leader epoch that read the state (Kafka's `leaderEpochMap`): older leaders
    /// are fenced.
    fence: Option<i32>,
}

type Shared = Arc<Mutex<Entry>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub struct ShareCoordinator {
    log: ShareStateLog,
    ownership: Ownership,
    entries: Mutex<HashMap<StateKey, Shared>>,
    /// Deleted topics whose share-partitions' state is still to be tombstoned (by the timer:
    /// the catalog's listeners must not wait for the log).
    deleted_topics: Mutex<Vec<uuid::Uuid>>,
}

/// A failed append, as the caller's error.
fn write_error(e: LogWriteError) -> ResponseError {
    match e {
        LogWriteError::NotLeader => ResponseError::NotCoordinator,
        LogWriteError::TooLarge(_) => ResponseError::RecordListTooLarge,
        other => {
            tracing::warn!(error = %other, "share state write failed");
            ResponseError::CoordinatorNotAvailable
        }
    }
}

impl ShareCoordinator {
    /// The coordinator; without a metadata quorum with every partition's state read back.
    /// Blocking.
    pub fn open(broker: Arc<Broker>) -> std::io::Result<ShareCoordinator> {
        let cluster = broker.config.cluster.is_some();
        let log = ShareStateLog::new(broker);
        let mut entries = HashMap::new();
        if !cluster {
            let loaded = log.load()?;
            if !loaded.is_empty() {
                tracing::info!(
                    share_partitions = loaded.len(),
                    "share state loaded from __share_group_state"
                );
            }
            for (k, s) in loaded {
                let e = Entry {
                    fence: Some(s.leader_epoch),
                    state: Some(s),
                };
                entries.insert(k, Arc::new(Mutex::new(e)));
            }
        }
        Ok(ShareCoordinator {
            log,
            ownership: Ownership::new(cluster),
            entries: Mutex::new(entries),
            deleted_topics: Mutex::new(Vec::new()),
        })
    }

    /// Whether this broker serves `key` now: NOT_COORDINATOR when another broker leads its
    /// partition (or the topic does not exist yet in cluster mode), COORDINATOR_LOAD_IN_PROGRESS
    /// while the partition loads.
    pub fn check(&self, key: &StateKey) -> Result<i32, ResponseError> {
        let index = self
            .log
            .index_of(key)
            .ok_or(ResponseError::CoordinatorNotAvailable)?;
        self.ownership.check(index)?;
        Ok(index)
    }

    /// The `__share_group_state` partition of `key`, once the topic exists.
    pub fn index_of(&self, key: &StateKey) -> Option<i32> {
        self.log.index_of(key)
    }

    fn existing(&self, key: &StateKey) -> Option<Shared> {
        lock(&self.entries).get(key).cloned()
    }

    fn entry(&self, key: &StateKey) -> Shared {
        lock(&self.entries).entry(key.clone()).or_default().clone()
    }

    fn persist(&self, key: &StateKey, state: Option<&Snapshot>) -> Result<(), ResponseError> {
        self.log.write(key, state).map_err(write_error)
    }

    /// InitializeShareGroupState: the share-partition starts over at `start_offset` (-1: the
    /// leader decides on its first read) with `state_epoch`; nothing is in flight, and the
    /// delivery-complete count is 0. The leader-epoch fence stays (as in Kafka).
    pub fn initialize(
        &self,
        key: &StateKey,
        state_epoch: i32,
        start_offset: i64,
    ) -> Result<(), ResponseError> {
        self.check(key)?;
        let entry = self.entry(key);
        let mut e = lock(&entry);
        if e.state
            .as_ref()
            .is_some_and(|s| s.state_epoch > state_epoch)
        {
            return Err(ResponseError::FencedStateEpoch);
        }
        let now = now_ms();
        let next = Snapshot {
            snapshot_epoch: e
                .state
                .as_ref()
                .map_or(0, |s| s.snapshot_epoch.wrapping_add(1)),
            state_epoch,
            leader_epoch: 0,
            start_offset,
            delivery_complete_count: 0,
            create_timestamp: now,
            write_timestamp: now,
            state_batches: Vec::new(),
        };
        self.persist(key, Some(&next))?;
        e.state = Some(next);
        Ok(())
    }

    /// ReadShareGroupState from the share-partition leader at `leader_epoch`: the state, or
    /// `None` when it was never initialized. Leaders older than `leader_epoch` are fenced from
    /// then on.
    pub fn read(
        &self,
        key: &StateKey,
        leader_epoch: i32,
    ) -> Result<Option<Snapshot>, ResponseError> {
        self.check(key)?;
        // A key never initialized gets no entry: reads of any number of keys hold no memory.
        let Some(entry) = self.existing(key) else {
            return Ok(None);
        };
        let mut e = lock(&entry);
        if e.state.is_none() {
            return Ok(None);
        }
        match e.fence {
            Some(f) if f > leader_epoch => return Err(ResponseError::FencedLeaderEpoch),
            Some(f) if f == leader_epoch => {}
            // A newer leader: its epoch is written with the state, so that it fences older
            // leaders after a coordinator failover too (Kafka's
            // `readStateAndMaybeUpdateLeaderEpoch`).
            _ => {
                let mut next = e.state.clone().expect("checked");
                next.leader_epoch = leader_epoch;
                next.snapshot_epoch = next.snapshot_epoch.wrapping_add(1);
                next.write_timestamp = now_ms();
                self.persist(key, Some(&next))?;
                e.state = Some(next);
                e.fence = Some(leader_epoch);
            }
        }
        Ok(e.state.clone())
    }

    /// ReadShareGroupStateSummary: the state without fencing anyone.
    pub fn summary(&self, key: &StateKey) -> Result<Option<Snapshot>, ResponseError> {
        self.check(key)?;
        let entry = lock(&self.entries).get(key).cloned();
        Ok(entry.and_then(|e| lock(&e).state.clone()))
    }

    /// WriteShareGroupState: merges `w` into the initialized state (INVALID_REQUEST when there
    /// is none), persists it and only then installs it. As in Kafka a write never raises the
    /// leader-epoch fence or the state epoch (reads and InitializeShareGroupState do), and
    /// never moves the start offset back.
    pub fn write(&self, key: &StateKey, w: &StateWrite) -> Result<(), ResponseError> {
        self.check(key)?;
        let entry = self.existing(key).ok_or(ResponseError::InvalidRequest)?;
        let mut e = lock(&entry);
        let Some(old) = &e.state else {
            return Err(ResponseError::InvalidRequest);
        };
        if e.fence.is_some_and(|f| f > w.leader_epoch) {
            return Err(ResponseError::FencedLeaderEpoch);
        }
        if old.state_epoch > w.state_epoch {
            return Err(ResponseError::FencedStateEpoch);
        }
        let start = if w.start_offset == -1 {
            old.start_offset
        } else {
            w.start_offset.max(old.start_offset)
        };
        // The writer's count is of offsets from its start offset on: taken when that start is
        // the new one, the larger one kept when the start stays.
        let count = match w.start_offset.cmp(&old.start_offset) {
            std::cmp::Ordering::Greater => w.delivery_complete_count,
            std::cmp::Ordering::Equal => old.delivery_complete_count.max(w.delivery_complete_count),
            std::cmp::Ordering::Less if w.start_offset == -1 => {
                old.delivery_complete_count.max(w.delivery_complete_count)
            }
            std::cmp::Ordering::Less => old.delivery_complete_count,
        };
        let next = Snapshot {
            snapshot_epoch: old.snapshot_epoch.wrapping_add(1),
            state_epoch: old.state_epoch,
            leader_epoch: old.leader_epoch,
            start_offset: start,
            delivery_complete_count: count,
            create_timestamp: old.create_timestamp,
            write_timestamp: now_ms(),
            state_batches: merge_batches(&old.state_batches, &w.batches, start),
        };
        self.persist(key, Some(&next))?;
        e.state = Some(next);
        Ok(())
    }

    /// DeleteShareGroupState: the key's state is tombstoned and forgotten, epochs included.
    pub fn delete(&self, key: &StateKey) -> Result<(), ResponseError> {
        self.check(key)?;
        let Some(entry) = self.existing(key) else {
            return Ok(());
        };
        let mut e = lock(&entry);
        if e.state.is_some() {
            self.persist(key, None)?;
        }
        e.state = None;
        e.fence = None;
        drop(e);
        lock(&self.entries).remove(key);
        Ok(())
    }

    /// The keys with state on this broker, for a group (or every group: `None`).
    pub fn keys(&self, group: Option<&str>) -> Vec<StateKey> {
        let entries: Vec<(StateKey, Shared)> = lock(&self.entries)
            .iter()
            .filter(|(k, _)| group.is_none_or(|g| k.group == g))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        // Never waits for a write in progress (ListGroups calls this on an async worker): a
        // key being written counts as having state.
        entries
            .into_iter()
            .filter(|(_, e)| e.try_lock().map_or(true, |e| e.state.is_some()))
            .map(|(k, _)| k)
            .collect()
    }

    /// This broker became leader of `__share_group_state` partition `partition` at `epoch`.
    pub fn on_election(&self, partition: i32, epoch: i32) {
        let t = self
            .ownership
            .elect(partition, epoch, || self.unload(partition));
        if t != ownership::Transition::None {
            tracing::info!(partition, epoch, "loading __share_group_state partition");
        }
    }

    /// This broker stopped leading `partition`: its keys are dropped.
    pub fn on_resignation(&self, partition: i32) {
        let t = self.ownership.resign(partition, || self.unload(partition));
        if t != ownership::Transition::None {
            tracing::info!(partition, "unloaded __share_group_state partition");
        }
    }

    fn unload(&self, partition: i32) {
        lock(&self.entries).retain(|k, _| self.log.index_of(k) != Some(partition));
    }

    /// Whether a partition waits for its load, or a deleted topic's state for its tombstones.
    pub fn needs_load(&self) -> bool {
        self.ownership.any_loading() || !lock(&self.deleted_topics).is_empty()
    }

    /// A topic was deleted: the state of its share-partitions kept here goes too (as Kafka's
    /// group coordinator deletes it), written by [`forget_deleted_topics`](Self::forget_deleted_topics).
    pub fn topic_deleted(&self, topic_id: uuid::Uuid) {
        lock(&self.deleted_topics).push(topic_id);
    }

    /// Tombstones the state of deleted topics' share-partitions. Blocking.
    pub fn forget_deleted_topics(&self) {
        let topics = std::mem::take(&mut *lock(&self.deleted_topics));
        if topics.is_empty() {
            return;
        }
        let keys: Vec<StateKey> = lock(&self.entries)
            .keys()
            .filter(|k| topics.contains(&k.topic_id))
            .cloned()
            .collect();
        for key in keys {
            if let Err(e) = self.delete(&key) {
                // Another broker serves it now (it tombstones it itself), or the log is
                // unavailable: the state stays, unused, as a deleted topic's is never read.
                tracing::debug!(group = %key.group, partition = key.partition, error = ?e, "share state of a deleted topic kept");
            }
        }
    }

    /// Replays the partitions waiting for their load, each installed only if this broker
    /// still leads it at the same epoch. Blocking.
    pub fn load_elected(&self) {
        self.forget_deleted_topics();
        for (partition, epoch) in self.ownership.loading() {
            let loaded = match self.log.load_partition(partition) {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(partition, epoch, error = %e, "cannot load __share_group_state partition; will retry");
                    continue;
                }
            };
            let count = loaded.len();
            let installed = self.ownership.complete_load(partition, epoch, || {
                self.unload(partition);
                let mut entries = lock(&self.entries);
                for (k, s) in loaded {
                    let e = Entry {
                        fence: Some(s.leader_epoch),
                        state: Some(s),
                    };
                    entries.insert(k, Arc::new(Mutex::new(e)));
                }
            });
            if installed {
                tracing::info!(
                    partition,
                    epoch,
                    share_partitions = count,
                    "__share_group_state partition loaded"
                );
            }
        }
    }
}

/// `old` overwritten by `new` where they overlap (later batches of `new` win among
/// themselves), without what lies below `start`; adjacent batches of one state and count are
/// joined.
pub fn merge_batches(old: &[StateBatch], new: &[StateBatch], start: i64) -> Vec<StateBatch> {
    // Keyed by first offset; non-overlapping at all times.
    let mut map: BTreeMap<i64, StateBatch> = BTreeMap::new();
    for b in old.iter().chain(new) {
        if b.last_offset < b.first_offset {
            continue;
        }
        // Cut every stored batch that overlaps `b`.
        let overlapping: Vec<i64> = map
            .range(..=b.last_offset)
            .rev()
            .take_while(|(_, s)| s.last_offset >= b.first_offset)
            .map(|(k, _)| *k)
            .collect();
        for k in overlapping {
            let s = map.remove(&k).expect("present");
            if s.first_offset < b.first_offset {
                map.insert(
                    s.first_offset,
                    StateBatch {
                        last_offset: b.first_offset - 1,
                        ..s
                    },
                );
            }
            if s.last_offset > b.last_offset {
                map.insert(
                    b.last_offset + 1,
                    StateBatch {
                        first_offset: b.last_offset + 1,
                        ..s
                    },
                );
            }
        }
        map.insert(b.first_offset, *b);
    }
    let mut out: Vec<StateBatch> = Vec::with_capacity(map.len());
    for mut b in map.into_values() {
        if b.last_offset < start {
            continue;
        }
        b.first_offset = b.first_offset.max(start);
        match out.last_mut() {
            Some(p)
                if p.last_offset + 1 == b.first_offset
                    && p.delivery_state == b.delivery_state
                    && p.delivery_count == b.delivery_count =>
            {
                p.last_offset = b.last_offset;
            }
            _ => out.push(b),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn b(first: i64, last: i64, state: i8, count: i16) -> StateBatch {
        StateBatch {
            first_offset: first,
            last_offset: last,
            delivery_state: state,
            delivery_count: count,
        }
    }

    #[test]
    fn new_batches_overwrite_where_they_overlap_and_the_start_prunes() {
        let old = [b(0, 9, 0, 1), b(10, 19, 2, 1)];
        let new = [b(5, 12, 4, 2)];
        assert_eq!(
            merge_batches(&old, &new, 0),
            vec![b(0, 4, 0, 1), b(5, 12, 4, 2), b(13, 19, 2, 1)]
        );
        assert_eq!(
            merge_batches(&old, &new, 7),
            vec![b(7, 12, 4, 2), b(13, 19, 2, 1)]
        );
        // Joined where state and count agree.
        assert_eq!(
            merge_batches(&[b(0, 4, 2, 1)], &[b(5, 9, 2, 1)], 0),
            vec![b(0, 9, 2, 1)]
        );
    }

    fn key() -> StateKey {
        StateKey {
            group: "g".into(),
            topic_id: uuid::Uuid::new_v4(),
            partition: 0,
        }
    }

    fn write(
        leader_epoch: i32,
        state_epoch: i32,
        start: i64,
        batches: &[StateBatch],
    ) -> StateWrite {
        StateWrite {
            state_epoch,
            leader_epoch,
            start_offset: start,
            delivery_complete_count: -1,
            batches: batches.to_vec(),
        }
    }

    #[test]
    fn deposed_leaders_and_reset_offsets_fence_writes_and_the_state_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let broker = crate::api::test_support::broker_with_acls(dir.path(), &[]);
        let c = ShareCoordinator::open(broker.clone()).unwrap();
        let k = key();
        assert_eq!(c.read(&k, 0), Ok(None), "never initialized");
        assert_eq!(
            c.write(&k, &write(0, 0, 10, &[])),
            Err(ResponseError::InvalidRequest),
            "a write needs an initialized share-partition"
        );
        c.initialize(&k, 0, 10).unwrap();
        assert_eq!(c.read(&k, 0).unwrap().map(|s| s.start_offset), Some(10));
        c.write(&k, &write(0, 0, 10, &[b(10, 14, 2, 1)])).unwrap();
        // A new leader (epoch 1) reads: the old one (epoch 0) can no longer write or read.
        let s = c.read(&k, 1).unwrap().expect("state");
        assert_eq!(
            (s.start_offset, s.state_batches.clone()),
            (10, vec![b(10, 14, 2, 1)])
        );
        assert_eq!(
            c.write(&k, &write(0, 0, 12, &[])),
            Err(ResponseError::FencedLeaderEpoch)
        );
        assert_eq!(c.read(&k, 0), Err(ResponseError::FencedLeaderEpoch));
        // The new leader's write merges: start 12 prunes, 15..16 archived added.
        c.write(&k, &write(1, 0, 12, &[b(15, 16, 4, 2)])).unwrap();
        // A start offset behind the stored one does not move it back.
        c.write(&k, &write(1, 0, 11, &[])).unwrap();
        assert_eq!(c.summary(&k).unwrap().map(|s| s.start_offset), Some(12));
        // AlterShareGroupOffsets: state epoch 1; a write at state epoch 0 is fenced, and so
        // is an initialization at an older state epoch.
        c.initialize(&k, 1, 20).unwrap();
        assert_eq!(
            c.write(&k, &write(1, 0, 21, &[])),
            Err(ResponseError::FencedStateEpoch)
        );
        assert_eq!(c.initialize(&k, 0, 5), Err(ResponseError::FencedStateEpoch));
        // The leader-epoch fence outlives the initialization.
        assert_eq!(c.read(&k, 0), Err(ResponseError::FencedLeaderEpoch));
        c.write(&k, &write(1, 1, 21, &[b(21, 21, 2, 1)])).unwrap();
        c.read(&k, 1).unwrap();
        c.write(&k, &write(1, 1, 21, &[])).unwrap();

        // Read back from the log after a restart.
        drop(c);
        let c = ShareCoordinator::open(broker).unwrap();
        let s = c.summary(&k).unwrap().expect("state");
        assert_eq!(
            (
                s.state_epoch,
                s.leader_epoch,
                s.start_offset,
                s.state_batches
            ),
            // The leader epoch the initialization wrote: a read at the fence's epoch does not
            // raise it (as in Kafka).
            (1, 0, 21, vec![b(21, 21, 2, 1)])
        );
        c.delete(&k).unwrap();
        assert_eq!(c.summary(&k), Ok(None));
        assert_eq!(c.keys(Some("g")), Vec::<StateKey>::new());
        // The epochs went with the state.
        c.initialize(&k, 0, 2).unwrap();
        assert!(c.read(&k, 0).is_ok());
    }

    #[test]
    fn a_fence_raised_by_a_read_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let broker = crate::api::test_support::broker_with_acls(dir.path(), &[]);
        let c = ShareCoordinator::open(broker.clone()).unwrap();
        let k = key();
        c.initialize(&k, 0, 0).unwrap();
        c.read(&k, 2).unwrap();
        // The raise is written before the read is answered: a coordinator that restarts (or
        // takes over) right after still fences the older leader.
        drop(c);
        let c = ShareCoordinator::open(broker).unwrap();
        assert_eq!(c.read(&k, 1), Err(ResponseError::FencedLeaderEpoch));
        assert_eq!(
            c.write(&k, &write(1, 0, 0, &[])),
            Err(ResponseError::FencedLeaderEpoch)
        );
        assert!(c.read(&k, 2).is_ok());
    }

    #[test]
    fn the_delivery_complete_count_follows_the_writers_start_offset() {
        let dir = tempfile::tempdir().unwrap();
        let broker = crate::api::test_support::broker_with_acls(dir.path(), &[]);
        let c = ShareCoordinator::open(broker).unwrap();
        let k = key();
        c.initialize(&k, 0, 5).unwrap();
        let count = |c: &ShareCoordinator| c.summary(&k).unwrap().unwrap().delivery_complete_count;
        assert_eq!(count(&c), 0);
        let w = |start, n| StateWrite {
            delivery_complete_count: n,
            ..write(0, 0, start, &[])
        };
        c.write(&k, &w(6, 4)).unwrap();
        assert_eq!(count(&c), 4, "a new start takes the writer's count");
        c.write(&k, &w(6, 2)).unwrap();
        assert_eq!(count(&c), 4, "the same start keeps the larger");
        c.write(&k, &w(6, 7)).unwrap();
        assert_eq!(count(&c), 7);
        c.write(&k, &w(3, 9)).unwrap();
        assert_eq!(count(&c), 7, "a start behind keeps the stored count");
    }

    #[test]
    fn a_deleted_topics_share_state_is_tombstoned() {
        let dir = tempfile::tempdir().unwrap();
        let broker = crate::api::test_support::broker_with_acls(dir.path(), &[]);
        let c = ShareCoordinator::open(broker.clone()).unwrap();
        let (gone, kept) = (key(), key());
        c.initialize(&gone, 0, 3).unwrap();
        c.initialize(&kept, 0, 4).unwrap();
        c.topic_deleted(gone.topic_id);
        assert!(c.needs_load(), "the timer has tombstones to write");
        c.load_elected();
        assert!(!c.needs_load());
        assert_eq!(c.summary(&gone), Ok(None));
        // Not read back after a restart either; the other topic's state is.
        drop(c);
        let c = ShareCoordinator::open(broker).unwrap();
        assert_eq!(c.summary(&gone), Ok(None));
        assert_eq!(c.summary(&kept).unwrap().map(|s| s.start_offset), Some(4));
    }

    proptest! {
        /// Offset by offset, the merge says what the last batch covering it said.
        #[test]
        fn merge_is_last_writer_wins_per_offset(
            batches in prop::collection::vec((0i64..60, 0i64..8, 0i8..3, 1i16..4), 0..12),
            split in 0usize..12,
            start in 0i64..40,
        ) {
            let all: Vec<StateBatch> = batches
                .iter()
                .map(|&(f, len, s, c)| b(f, f + len, s * 2, c))
                .collect();
            let split = split.min(all.len());
            let merged = merge_batches(&all[..split], &all[split..], start);
            for o in 0..80i64 {
                let want = all
                    .iter()
                    .rev()
                    .find(|x| x.first_offset <= o && o <= x.last_offset && o >= start)
                    .map(|x| (x.delivery_state, x.delivery_count));
                let got = merged
                    .iter()
                    .find(|x| x.first_offset <= o && o <= x.last_offset)
                    .map(|x| (x.delivery_state, x.delivery_count));
                prop_assert_eq!(got, want, "offset {}", o);
            }
            for w in merged.windows(2) {
                prop_assert!(w[0].last_offset < w[1].first_offset);
            }
        }
    }
}
