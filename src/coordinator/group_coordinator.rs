//! The group coordinator (classic protocol) and its durable state in `__consumer_offsets`.
//!
//! Concurrency: all groups live behind one std mutex, held only for in-memory state changes
//! (never across `.await` or I/O). JoinGroup and SyncGroup calls that must wait are parked as
//! oneshot channels inside their member and woken by the state machine, by another member's
//! call, or by the timer ([`GroupCoordinator::tick`], run every 50 ms by the broker runtime
//! when [`GroupCoordinator::needs_tick`] says a group or a partition has work).
//!
//! Durability: offset commits and group metadata are appended to the group's
//! `__consumer_offsets` partition through the normal log and acknowledged like acks=all (the
//! high watermark covers them); on start the topic is replayed (last record per key wins,
//! null values delete).
//!
//! Leadership ([`ownership`]): in a cluster this broker coordinates only the groups of the
//! partitions it leads. Becoming leader (Kafka's `onElection`) loads a partition on the timer
//! at the leader epoch (requests get COORDINATOR_LOAD_IN_PROGRESS meanwhile); losing it
//! (`onResignation`) drops its groups, answers their parked joins and syncs NOT_COORDINATOR,
//! and a write that finishes after the change answers NOT_COORDINATOR. Partitions the control
//! plane never assigned are served as on a single node.
//!
//! Transactional offsets (TxnOffsetCommit) are appended as a transactional batch with the
//! producer's id and epoch and kept pending per producer until the producer's COMMIT or ABORT
//! marker reaches the group's partition (live: [`GroupCoordinator::complete_txn_offsets`]; on
//! replay: the marker in the log), which materializes or drops them.

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::ResponseError;
use tokio::sync::oneshot;

use super::group::{Group, GroupState, JoinRequest, JoinResult, SyncResult};
use super::offsets_topic::{GroupValue, OffsetValue, RecordKey};
use super::{consumer_group, offsets_topic, ownership};
use txn_offsets::take_pending;

pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// Where the coordinator keeps its records. The broker implements it on top of the
/// `__consumer_offsets` partitions; both methods block.
pub trait OffsetsLog: Send + Sync {
    /// Appends (key, value-or-tombstone) records to the group's partition, durably enough to
    /// acknowledge (the partition's high watermark covers them when this returns).
    fn append(
        &self,
        group: &str,
        records: Vec<(Bytes, Option<Bytes>)>,
    ) -> Result<(), LogWriteError>;
    /// Appends records as one transactional batch of the producer (TxnOffsetCommit); returns
    /// the `__consumer_offsets` partition written.
    fn append_transactional(
        &self,
        group: &str,
        producer_id: i64,
        producer_epoch: i16,
        records: Vec<(Bytes, Option<Bytes>)>,
    ) -> Result<i32, LogWriteError>;
    /// Every record and transaction marker of the topic, in log order per partition.
    fn replay(&self) -> io::Result<Vec<LogEntry>>;
    /// The records and markers of one partition (a superset is fine: the coordinator keeps
    /// only the groups of `partition`).
    fn replay_partition(&self, partition: i32) -> io::Result<Vec<LogEntry>> {
        let _ = partition;
        self.replay()
    }
    /// The `__consumer_offsets` partition of a group.
    fn partition_for(&self, group: &str) -> i32 {
        let _ = group;
        0
    }
    /// A topic's id and partition count (for server-side assignment).
    fn resolve_topic(&self, name: &str) -> Option<(uuid::Uuid, i32)>;
    /// A topic's name by id (to encode a classic member's assignment).
    fn topic_name(&self, id: &uuid::Uuid) -> Option<String>;
}

/// Why a coordinator's append was not acknowledged.
#[derive(Debug, thiserror::Error)]
pub enum LogWriteError {
    /// This broker no longer leads the coordinator partition.
    #[error("this broker does not lead the coordinator partition")]
    NotLeader,
    /// The ISR is smaller than min.insync.replicas (before or after the append).
    #[error("not enough in-sync replicas")]
    NotEnoughReplicas,
    /// The in-sync replicas did not acknowledge within the commit timeout.
    #[error("the in-sync replicas did not acknowledge in time")]
    Timeout,
    #[error("records too large: {0}")]
    TooLarge(String),
    /// The coordinator topic or partition is missing, or the broker is stopping.
    #[error("coordinator partition unavailable: {0}")]
    Unavailable(String),
    #[error("storage error: {0}")]
    Storage(String),
}

impl LogWriteError {
    /// The error an offset commit answers (Kafka's `GroupMetadataManager.storeOffsets`).
    pub fn offset_commit_error(&self) -> ResponseError {
        match self {
            LogWriteError::TooLarge(_) => ResponseError::InvalidCommitOffsetSize,
            other => other.state_error(),
        }
    }

    /// The error a group metadata or transaction state write answers (Kafka's
    /// `GroupMetadataManager.storeGroup` and `TransactionStateManager.appendTransactionToLog`).
    pub fn state_error(&self) -> ResponseError {
        match self {
            LogWriteError::NotLeader | LogWriteError::Storage(_) => ResponseError::NotCoordinator,
            LogWriteError::NotEnoughReplicas
            | LogWriteError::Timeout
            | LogWriteError::Unavailable(_) => ResponseError::CoordinatorNotAvailable,
            LogWriteError::TooLarge(_) => ResponseError::UnknownServerError,
        }
    }
}

/// One item of a `__consumer_offsets` replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogEntry {
    Record {
        key: Bytes,
        value: Option<Bytes>,
    },
    /// A record of a transactional batch: it counts once its producer's COMMIT marker follows
    /// in the same partition.
    Transactional {
        partition: i32,
        producer_id: i64,
        key: Bytes,
        value: Option<Bytes>,
    },
    Marker {
        partition: i32,
        producer_id: i64,
        commit: bool,
    },
}

/// Transactional offsets awaiting their producer's marker: producer id → group →
/// (`__consumer_offsets` partition, offsets).
type PendingTxnOffsets = HashMap<i64, HashMap<String, (i32, HashMap<(String, i32), OffsetValue>)>>;

#[derive(Debug, Clone)]
pub struct GroupConfig {
    pub initial_rebalance_delay: Duration,
    pub min_session_timeout: Duration,
    pub max_session_timeout: Duration,
    pub offsets_retention: Duration,
    pub offset_metadata_max_bytes: usize,
    /// KIP-848 groups: `group.consumer.session.timeout.ms` / `heartbeat.interval.ms`.
    pub consumer_session_timeout: Duration,
    pub consumer_heartbeat_interval: Duration,
    /// `group.consumer.migration.policy`: which conversions between the protocols run.
    pub migration: consumer_group::classic::MigrationPolicy,
}

/// A KIP-848 group's own session timeout and heartbeat interval: its GROUP configs
/// (`consumer.session.timeout.ms`, `consumer.heartbeat.interval.ms`) within the broker's
/// bounds, else the broker's settings.
pub trait ConsumerGroupTimeouts: Send + Sync {
    /// (session timeout, heartbeat interval) of the group.
    fn consumer_timeouts(&self, group_id: &str) -> (Duration, Duration);
}

/// A committed offset for the OffsetFetch answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
}

/// DescribeGroups' view of a group.
pub struct GroupDescription {
    pub state: &'static str,
    pub protocol_type: String,
    pub protocol: String,
    /// (member id, instance id, client id, client host, metadata, assignment)
    pub members: Vec<(String, Option<String>, String, String, Bytes, Bytes)>,
}

pub struct GroupCoordinator {
    groups: Mutex<HashMap<String, Group>>,
    config: GroupConfig,
    log: Arc<dyn OffsetsLog>,
    /// When empty groups without offsets were last removed.
    last_cleanup: Mutex<Instant>,
    /// Rebalances of groups that no longer exist, so the metric never goes backwards.
    removed_rebalances: std::sync::atomic::AtomicU64,
    pending_txn: Mutex<PendingTxnOffsets>,
    /// The `__consumer_offsets` partitions this broker serves.
    ownership: Arc<ownership::Ownership>,
    /// Topics deleted from the catalog and when (wall-clock ms): the timer deletes the
    /// offsets committed to them before then.
    deleted_topics: Mutex<Vec<(String, i64)>>,
    /// Per-group KIP-848 timeouts; without it every group uses `config`'s.
    timeouts: Option<Arc<dyn ConsumerGroupTimeouts>>,
}

/// Kafka's `offsets.retention.check.interval.ms` default: how often empty groups without
/// offsets are removed (so DescribeGroups keeps showing a just-emptied group for a while).
const CLEANUP_INTERVAL: Duration = Duration::from_secs(600);

/// The group named `id`, created Empty if it does not exist.
fn group_entry(
    groups: &mut HashMap<String, Group>,
    id: impl Into<String>,
    initial_delay: Duration,
) -> &mut Group {
    let id = id.into();
    groups
        .entry(id.clone())
        .or_insert_with(|| Group::new(&id, Instant::now(), now_ms(), initial_delay))
}

fn now_ms() -> i64 {
    crate::clock::now_ms()
}

impl GroupCoordinator {
    pub fn new(config: GroupConfig, log: Arc<dyn OffsetsLog>) -> Self {
        Self::with_ownership(config, log, Arc::default())
    }

    /// A coordinator serving the `__consumer_offsets` partitions `ownership` says it owns.
    pub fn with_ownership(
        config: GroupConfig,
        log: Arc<dyn OffsetsLog>,
        ownership: Arc<ownership::Ownership>,
    ) -> Self {
        GroupCoordinator {
            groups: Mutex::new(HashMap::new()),
            config,
            log,
            last_cleanup: Mutex::new(Instant::now()),
            removed_rebalances: std::sync::atomic::AtomicU64::new(0),
            pending_txn: Mutex::new(HashMap::new()),
            ownership,
            deleted_topics: Mutex::new(Vec::new()),
            timeouts: None,
        }
    }

    /// Takes each KIP-848 group's session timeout and heartbeat interval from `timeouts`.
    pub fn with_group_timeouts(mut self, timeouts: Arc<dyn ConsumerGroupTimeouts>) -> Self {
        self.timeouts = Some(timeouts);
        self
    }

    /// The session timeout and heartbeat interval a KIP-848 group runs with now.
    fn consumer_timeouts(&self, group_id: &str) -> (Duration, Duration) {
        match &self.timeouts {
            Some(t) => t.consumer_timeouts(group_id),
            None => (
                self.config.consumer_session_timeout,
                self.config.consumer_heartbeat_interval,
            ),
        }
    }

    /// Whether this broker coordinates the group now: NOT_COORDINATOR when another broker
    /// leads its partition, COORDINATOR_LOAD_IN_PROGRESS while the partition loads.
    pub fn check_coordinator(&self, group_id: &str) -> Result<(), ResponseError> {
        self.ownership.check(self.log.partition_for(group_id))
    }

    /// This broker became leader of `__consumer_offsets` partition `partition` at `epoch`
    /// (Kafka's `onElection`): its groups are loaded by the timer.
    pub fn on_election(&self, partition: i32, epoch: i32) {
        let t = self
            .ownership
            .elect(partition, epoch, || self.unload(partition));
        if t != ownership::Transition::None {
            tracing::info!(partition, epoch, "loading __consumer_offsets partition");
        }
    }

    /// This broker stopped leading `partition` (Kafka's `onResignation`): its groups are
    /// dropped and their waiting members answered NOT_COORDINATOR.
    pub fn on_resignation(&self, partition: i32) {
        let t = self.ownership.resign(partition, || self.unload(partition));
        if t != ownership::Transition::None {
            tracing::info!(partition, "unloaded __consumer_offsets partition");
        }
    }

    fn unload(&self, partition: i32) {
        let removed: Vec<Group> = {
            let mut groups = self.groups();
            let ids: Vec<String> = groups
                .keys()
                .filter(|g| self.log.partition_for(g) == partition)
                .cloned()
                .collect();
            ids.iter().filter_map(|id| groups.remove(id)).collect()
        };
        for mut g in removed {
            for (id, m) in g.members.iter_mut() {
                if let Some(tx) = m.awaiting_join.take() {
                    let _ = tx.send(JoinResult::error(ResponseError::NotCoordinator, id));
                }
                if let Some(tx) = m.awaiting_sync.take() {
                    let _ = tx.send(SyncResult::error(ResponseError::NotCoordinator));
                }
            }
            self.count_removed(&g);
        }
        self.pending_txn().retain(|_, groups| {
            groups.retain(|_, (p, _)| *p != partition);
            !groups.is_empty()
        });
    }

    /// Replays the partitions waiting for their load (Kafka's `loadGroupsForPartition`), each
    /// installed only if this broker still leads it at the same epoch. Blocking.
    pub fn load_elected(&self) {
        for (partition, epoch) in self.ownership.loading() {
            let entries = match self.log.replay_partition(partition) {
                Ok(e) => e,
                Err(e) => {
                    tracing::warn!(partition, epoch, error = %e, "cannot load __consumer_offsets partition; will retry");
                    continue;
                }
            };
            let (mut loaded, mut pending) = self.rebuild(entries);
            loaded.retain(|id, _| self.log.partition_for(id) == partition);
            pending.retain(|_, groups| {
                groups.retain(|_, (p, _)| *p == partition);
                !groups.is_empty()
            });
            let count = loaded.len();
            let installed = self.ownership.complete_load(partition, epoch, || {
                self.unload(partition);
                self.groups().extend(loaded);
                let mut all = self.pending_txn();
                for (pid, groups) in pending {
                    all.entry(pid).or_default().extend(groups);
                }
            });
            if installed {
                tracing::info!(
                    partition,
                    epoch,
                    groups = count,
                    "loaded __consumer_offsets partition"
                );
            }
        }
    }

    fn pending_txn(&self) -> std::sync::MutexGuard<'_, PendingTxnOffsets> {
        self.pending_txn.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn groups(&self) -> std::sync::MutexGuard<'_, HashMap<String, Group>> {
        self.groups.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Rebuilds groups and offsets from the log. Blocking.
    /// Partitions the control plane has assigned elsewhere (or that still wait for their
    /// load) are left out.
    pub fn load(&self) -> io::Result<usize> {
        let entries = self.log.replay()?;
        let n = entries.len();
        let (mut groups, mut pending) = self.rebuild(entries);
        groups.retain(|id, _| self.ownership.is_served(self.log.partition_for(id)));
        pending.retain(|_, groups| {
            groups.retain(|_, (p, _)| self.ownership.is_served(*p));
            !groups.is_empty()
        });
        *self.groups() = groups;
        *self.pending_txn() = pending;
        Ok(n)
    }

    /// Groups and pending transactional offsets from replayed entries (last record per key
    /// wins, null values delete).
    fn rebuild(&self, entries: Vec<LogEntry>) -> (HashMap<String, Group>, PendingTxnOffsets) {
        let now = Instant::now();
        let mut groups: HashMap<String, Group> = HashMap::new();
        let mut pending: PendingTxnOffsets = HashMap::new();
        let n = entries.len();
        let mut records = Vec::with_capacity(n);
        for entry in entries {
            match entry {
                LogEntry::Record { key, value } => records.push((key, value)),
                LogEntry::Transactional {
                    partition,
                    producer_id,
                    key,
                    value: Some(value),
                } => {
                    if let (
                        Ok(RecordKey::Offset {
                            group,
                            topic,
                            partition: p,
                        }),
                        Ok(v),
                    ) = (
                        offsets_topic::decode_key(key),
                        offsets_topic::decode_offset(value),
                    ) {
                        pending
                            .entry(producer_id)
                            .or_default()
                            .entry(group)
                            .or_insert_with(|| (partition, HashMap::new()))
                            .1
                            .insert((topic, p), v);
                    }
                }
                LogEntry::Transactional { .. } => {}
                LogEntry::Marker {
                    partition,
                    producer_id,
                    commit,
                } => {
                    for (group, offsets) in take_pending(&mut pending, producer_id, partition) {
                        if commit {
                            // Records before the marker in log order: replay them first.
                            for ((topic, p), v) in offsets {
                                records.push((
                                    offsets_topic::encode_key(&RecordKey::Offset {
                                        group: group.clone(),
                                        topic,
                                        partition: p,
                                    }),
                                    Some(offsets_topic::encode_offset(&v)),
                                ));
                            }
                        }
                    }
                }
            }
        }
        let mut consumer_images: HashMap<String, consumer_group::records::Image> = HashMap::new();
        for (key, value) in records {
            let raw_key = key.clone();
            let key = match offsets_topic::decode_key(key) {
                Ok(k) => k,
                Err(e) => {
                    tracing::warn!(error = %e, "skipping undecodable __consumer_offsets key");
                    continue;
                }
            };
            match key {
                RecordKey::Offset {
                    group,
                    topic,
                    partition,
                } => match value {
                    None => {
                        if let Some(g) = groups.get_mut(&group) {
                            g.offsets.remove(&(topic, partition));
                        }
                    }
                    Some(v) => match offsets_topic::decode_offset(v) {
                        Ok(v) => {
                            let g = group_entry(
                                &mut groups,
                                group.clone(),
                                self.config.initial_rebalance_delay,
                            );
                            g.offsets.insert((topic, partition), v);
                        }
                        Err(e) => tracing::warn!(%group, error = %e, "skipping undecodable offset"),
                    },
                },
                RecordKey::Group { group } => match value {
                    None => {
                        // The classic group is gone; its offsets are their own records (a
                        // conversion to the consumer protocol keeps them).
                        if let Some(g) = groups.get_mut(&group) {
                            if g.offsets.is_empty() {
                                groups.remove(&group);
                            } else {
                                g.clear_classic();
                                g.protocol_type = None;
                            }
                        }
                    }
                    Some(v) => match offsets_topic::decode_group(v) {
                        Ok(v) => {
                            let g = group_entry(
                                &mut groups,
                                group.clone(),
                                self.config.initial_rebalance_delay,
                            );
                            g.restore(v, now);
                        }
                        Err(e) => {
                            tracing::warn!(%group, error = %e, "skipping undecodable group metadata")
                        }
                    },
                },
                RecordKey::Consumer { group, .. } => {
                    let image = consumer_images.entry(group).or_default();
                    match value {
                        Some(v) => image.insert(raw_key, v),
                        None => image.remove(&raw_key),
                    };
                }
            }
        }
        for (group, image) in consumer_images {
            if image.is_empty() {
                continue;
            }
            let g = group_entry(
                &mut groups,
                group.clone(),
                self.config.initial_rebalance_delay,
            );
            if !g.members.is_empty() || g.share.is_some() {
                tracing::warn!(%group, "consumer group records for a group of another protocol; ignored");
                continue;
            }
            let (session_timeout, _) = self.consumer_timeouts(&group);
            let state = consumer_group::ConsumerState::restore(&group, image, session_timeout, now);
            g.protocol_type = Some("consumer".into());
            g.consumer = Some(state);
        }
        (groups, pending)
    }

    /// Runs one write for the group; NOT_COORDINATOR when the leadership of its partition
    /// changed while the write waited (Kafka compares the coordinator epoch after appending).
    fn fenced_write<R>(
        &self,
        group_id: &str,
        write: impl FnOnce() -> Result<R, ResponseError>,
    ) -> Result<R, ResponseError> {
        let partition = self.log.partition_for(group_id);
        let before = self.ownership.status(partition);
        let r = write()?;
        if self.ownership.status(partition) != before {
            return Err(ResponseError::NotCoordinator);
        }
        Ok(r)
    }

    fn persist_group(
        &self,
        group_id: &str,
        value: Option<GroupValue>,
    ) -> Result<(), ResponseError> {
        let key = offsets_topic::encode_key(&RecordKey::Group {
            group: group_id.to_string(),
        });
        let value = value.map(|v| offsets_topic::encode_group(&v));
        self.fenced_write(group_id, || {
            self.log.append(group_id, vec![(key, value)]).map_err(|e| {
                tracing::warn!(group = group_id, error = %e, "cannot persist group metadata");
                e.state_error()
            })
        })
    }

    /// [`Self::persist_group`] on the blocking pool, for the async handlers.
    async fn persist_group_off_worker(
        self: &Arc<Self>,
        group_id: &str,
        value: GroupValue,
    ) -> Result<(), ResponseError> {
        let me = self.clone();
        let gid = group_id.to_string();
        tokio::task::spawn_blocking(move || me.persist_group(&gid, Some(value)))
            .await
            .unwrap_or(Err(ResponseError::UnknownServerError))
    }

    fn check_session_timeout(&self, t: Duration) -> bool {
        t >= self.config.min_session_timeout && t <= self.config.max_session_timeout
    }

    pub async fn join(self: &Arc<Self>, group_id: &str, req: JoinRequest) -> JoinResult {
        if group_id.is_empty() {
            return JoinResult::error(ResponseError::InvalidGroupId, &req.member_id);
        }
        if let Err(e) = self.check_coordinator(group_id) {
            return JoinResult::error(e, &req.member_id);
        }
        if !self.check_session_timeout(req.session_timeout) {
            return JoinResult::error(ResponseError::InvalidSessionTimeout, &req.member_id);
        }
        let wait = req.rebalance_timeout.max(req.session_timeout) + Duration::from_secs(5);
        let member_id = req.member_id.clone();
        let static_rejoin = member_id.is_empty() && req.group_instance_id.is_some();
        if self.drop_empty_consumer_group(group_id) {
            if let Err(e) = self.write_group_off_worker(group_id).await {
                return JoinResult::error(e, &member_id);
            }
        }
        // A consumer group with members takes classic members itself.
        let taken = self
            .groups()
            .get_mut(group_id)
            .and_then(|g| self.classic_join_to_consumer_group(g, &req));
        if let Some(joined) = taken {
            return self.answer_classic_join(group_id, joined).await;
        }
        let (tx, rx) = oneshot::channel();
        let persist = {
            let mut groups = self.groups();
            // Only a member without an id may create a group (Kafka's rule).
            if !member_id.is_empty() && !groups.contains_key(group_id) {
                return JoinResult::error(ResponseError::UnknownMemberId, &member_id);
            }
            let g = group_entry(
                &mut groups,
                group_id.to_string(),
                self.config.initial_rebalance_delay,
            );
            if g.share.is_some() {
                return JoinResult::error(ResponseError::InconsistentGroupProtocol, &member_id);
            }
            if g.consumer.is_some() {
                // Emptied and taken by a consumer-protocol member meanwhile.
                return JoinResult::error(ResponseError::InconsistentGroupProtocol, &member_id);
            }
            match g.join(req, tx, Instant::now(), now_ms()) {
                // A static member that took over its old id without a rebalance: the new
                // member id must be durable before the member uses it (Kafka stores the group
                // first), or a restart would fence it.
                Some((_, result)) if static_rejoin && result.error.is_none() => {
                    Some((result, g.to_value()))
                }
                Some((_, result)) => {
                    tracing::debug!(group = group_id, member = %result.member_id,
                        generation = result.generation, error = ?result.error,
                        "JoinGroup answered at once");
                    return result;
                }
                None => None,
            }
        };
        if let Some((result, value)) = persist {
            return match self.persist_group_off_worker(group_id, value).await {
                Ok(()) => result,
                Err(e) => JoinResult::error(e, &result.member_id),
            };
        }
        let result = match tokio::time::timeout(wait, rx).await {
            Ok(Ok(result)) => result,
            _ => JoinResult::error(ResponseError::RebalanceInProgress, &member_id),
        };
        tracing::debug!(group = group_id, member = %result.member_id, generation = result.generation,
            leader = %result.leader, error = ?result.error, "JoinGroup answered");
        result
    }

    #[allow(clippy::too_many_arguments)]
    pub async fn sync(
        self: &Arc<Self>,
        group_id: &str,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation: i32,
        protocol_type: Option<&str>,
        protocol_name: Option<&str>,
        assignments: Vec<(String, Bytes)>,
    ) -> SyncResult {
        if group_id.is_empty() {
            return SyncResult::error(ResponseError::InvalidGroupId);
        }
        if let Err(e) = self.check_coordinator(group_id) {
            return SyncResult::error(e);
        }
        let (tx, rx) = oneshot::channel();
        let (immediate, persist, wait) = {
            let mut groups = self.groups();
            let Some(g) = groups.get_mut(group_id) else {
                return SyncResult::error(ResponseError::UnknownMemberId);
            };
            if let Some(result) = self.classic_sync_to_consumer_group(
                g,
                member_id,
                group_instance_id,
                generation,
                protocol_type,
                protocol_name,
            ) {
                tracing::debug!(group = group_id, member = member_id, generation,
                    error = ?result.error, "SyncGroup answered by the consumer group");
                return result;
            }
            let wait = g
                .members
                .get(member_id)
                .map(|m| m.rebalance_timeout.max(m.session_timeout))
                .unwrap_or_default()
                + Duration::from_secs(5);
            let (immediate, changed) = g.sync(
                member_id,
                group_instance_id,
                generation,
                protocol_type,
                protocol_name,
                assignments,
                tx,
                Instant::now(),
            );
            (immediate, changed.then(|| g.to_value()), wait)
        };
        if let Some((_, result)) = immediate {
            tracing::debug!(group = group_id, member = member_id, generation,
                error = ?result.error, "SyncGroup answered at once");
            return result;
        }
        if let Some(value) = persist {
            if let Err(e) = self.persist_group_off_worker(group_id, value).await {
                return SyncResult::error(e);
            }
        }
        let result = match tokio::time::timeout(wait, rx).await {
            Ok(Ok(result)) => result,
            _ => SyncResult::error(ResponseError::RebalanceInProgress),
        };
        tracing::debug!(group = group_id, member = member_id, generation, error = ?result.error,
            "SyncGroup answered");
        result
    }

    /// What every KIP-848 and KIP-932 heartbeat does first: refuses an empty group id, a
    /// group this broker does not coordinate, and a member epoch other than 0 for a group it
    /// does not know (UNKNOWN_MEMBER_ID); then runs `f` on the group, created if new, under
    /// the groups' lock.
    pub(super) fn on_heartbeat_group<R>(
        &self,
        group_id: &str,
        member_epoch: i32,
        f: impl FnOnce(&mut Group) -> Result<R, ResponseError>,
    ) -> Result<R, ResponseError> {
        if group_id.is_empty() {
            return Err(ResponseError::InvalidGroupId);
        }
        self.check_coordinator(group_id)?;
        let mut groups = self.groups();
        if member_epoch != 0 && !groups.contains_key(group_id) {
            return Err(ResponseError::UnknownMemberId);
        }
        f(group_entry(
            &mut groups,
            group_id.to_string(),
            self.config.initial_rebalance_delay,
        ))
    }

    pub fn heartbeat(
        &self,
        group_id: &str,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation: i32,
    ) -> Option<ResponseError> {
        if group_id.is_empty() {
            return Some(ResponseError::InvalidGroupId);
        }
        if let Err(e) = self.check_coordinator(group_id) {
            return Some(e);
        }
        let error = match self.groups().get_mut(group_id) {
            Some(g) => match g.consumer.as_mut().filter(|c| !c.is_empty()) {
                Some(c) => {
                    c.classic_heartbeat(member_id, group_instance_id, generation, Instant::now())
                }
                None => g.heartbeat(member_id, group_instance_id, generation, Instant::now()),
            },
            None => Some(ResponseError::UnknownMemberId),
        };
        tracing::debug!(
            group = group_id,
            member = member_id,
            generation,
            ?error,
            "Heartbeat"
        );
        error
    }

    /// LeaveGroup for several identities; returns each one's error. Blocking (may persist).
    pub fn leave(
        &self,
        group_id: &str,
        identities: &[(String, Option<String>)],
    ) -> Result<Vec<Option<ResponseError>>, ResponseError> {
        self.check_coordinator(group_id)?;
        let (results, persist) = {
            let mut groups = self.groups();
            let Some(g) = groups.get_mut(group_id) else {
                return Ok(vec![Some(ResponseError::UnknownMemberId); identities.len()]);
            };
            if let Some(c) = g.consumer.as_mut().filter(|c| !c.is_empty()) {
                let resolve = |name: &str| self.log.resolve_topic(name);
                let results = c.classic_leave(identities, &resolve);
                drop(groups);
                self.write_consumer_group(group_id)?;
                return Ok(results);
            }
            let before = (g.state, g.generation);
            let results: Vec<_> = identities
                .iter()
                .map(|(m, i)| g.leave(m, i.as_deref(), Instant::now(), now_ms()))
                .collect();
            let persist = (g.state == GroupState::Empty && before != (g.state, g.generation))
                .then(|| g.to_value());
            (results, persist)
        };
        if let Some(v) = persist {
            self.persist_group(group_id, Some(v))?;
        }
        Ok(results)
    }

    /// Validates and durably stores offset commits; returns per-partition errors in order.
    /// Blocking.
    pub fn commit_offsets(
        &self,
        group_id: &str,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation: i32,
        offsets: Vec<(String, i32, i64, i32, Option<String>)>,
        unknown_group: ResponseError,
    ) -> Result<Vec<Option<ResponseError>>, ResponseError> {
        if group_id.is_empty() {
            return Err(ResponseError::InvalidGroupId);
        }
        self.check_coordinator(group_id)?;
        {
            let mut groups = self.groups();
            let check = match groups.get(group_id) {
                Some(g) => g.check_commit(member_id, group_instance_id, generation),
                None if generation < 0 => None,
                None => Some(unknown_group),
            };
            if let Some(e) = check {
                return Err(e);
            }
            group_entry(
                &mut groups,
                group_id.to_string(),
                self.config.initial_rebalance_delay,
            );
        }
        let now = now_ms();
        let mut results = Vec::with_capacity(offsets.len());
        let mut records = Vec::new();
        let mut accepted = Vec::new();
        for (topic, partition, offset, leader_epoch, metadata) in offsets {
            let metadata = metadata.unwrap_or_default();
            if metadata.len() > self.config.offset_metadata_max_bytes {
                results.push(Some(ResponseError::OffsetMetadataTooLarge));
                continue;
            }
            let value = OffsetValue {
                offset,
                leader_epoch,
                metadata,
                commit_timestamp: now,
            };
            records.push((
                offsets_topic::encode_key(&RecordKey::Offset {
                    group: group_id.to_string(),
                    topic: topic.clone(),
                    partition,
                }),
                Some(offsets_topic::encode_offset(&value)),
            ));
            accepted.push(((topic, partition), value));
            results.push(None);
        }
        if !records.is_empty() {
            self.fenced_write(group_id, || {
                self.log.append(group_id, records).map_err(|e| {
                    tracing::warn!(group = group_id, error = %e, "cannot persist offsets");
                    e.offset_commit_error()
                })
            })?;
            let mut groups = self.groups();
            if let Some(g) = groups.get_mut(group_id) {
                for (k, v) in accepted {
                    g.offsets.insert(k, v);
                }
            }
        }
        Ok(results)
    }

    /// Committed offsets of a group: for the given partitions, or all when `None`.
    pub fn fetch_offsets(
        &self,
        group_id: &str,
        partitions: Option<&[(String, i32)]>,
    ) -> Vec<((String, i32), Option<Committed>)> {
        let groups = self.groups();
        let g = groups.get(group_id);
        let committed = |k: &(String, i32)| {
            g.and_then(|g| g.offsets.get(k)).map(|v| Committed {
                offset: v.offset,
                leader_epoch: v.leader_epoch,
                metadata: v.metadata.clone(),
            })
        };
        match partitions {
            Some(ps) => ps.iter().map(|k| (k.clone(), committed(k))).collect(),
            None => g
                .map(|g| {
                    g.offsets
                        .keys()
                        .map(|k| (k.clone(), committed(k)))
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    pub fn describe(&self, group_id: &str) -> Option<GroupDescription> {
        let groups = self.groups();
        let g = groups.get(group_id)?;
        if let Some(c) = &g.consumer {
            return Some(GroupDescription {
                state: c.state_name(),
                protocol_type: "consumer".into(),
                protocol: c.assignor.clone(),
                members: Vec::new(),
            });
        }
        let stable = g.state == GroupState::Stable;
        let protocol = g.protocol_name.clone().unwrap_or_default();
        Some(GroupDescription {
            state: g.state.name(),
            protocol_type: g.protocol_type.clone().unwrap_or_default(),
            protocol: if stable {
                protocol.clone()
            } else {
                String::new()
            },
            members: g
                .members
                .values()
                .map(|m| {
                    let metadata = if stable {
                        m.protocols
                            .iter()
                            .find(|(n, _)| *n == protocol)
                            .map(|(_, b)| b.clone())
                            .unwrap_or_default()
                    } else {
                        Bytes::new()
                    };
                    let assignment = if stable {
                        m.assignment.clone()
                    } else {
                        Bytes::new()
                    };
                    (
                        m.member_id.clone(),
                        m.group_instance_id.clone(),
                        m.client_id.clone(),
                        m.client_host.clone(),
                        metadata,
                        assignment,
                    )
                })
                .collect(),
        })
    }

    /// Deletes an empty group and its offsets. Blocking.
    pub fn delete_group(&self, group_id: &str) -> Option<ResponseError> {
        if let Err(e) = self.check_coordinator(group_id) {
            return Some(e);
        }
        let (offsets, consumer_records): (Vec<(String, i32)>, Vec<_>) = {
            let groups = self.groups();
            let Some(g) = groups.get(group_id) else {
                return Some(ResponseError::GroupIdNotFound);
            };
            if !g.members.is_empty()
                || g.consumer.as_ref().is_some_and(|c| !c.is_empty())
                || g.share.as_ref().is_some_and(|s| !s.is_empty())
            {
                return Some(ResponseError::NonEmptyGroup);
            }
            let consumer = g.consumer.as_ref().map(|c| c.tombstones());
            (
                g.offsets.keys().cloned().collect(),
                consumer.unwrap_or_default(),
            )
        };
        let mut records: Vec<(Bytes, Option<Bytes>)> = offsets
            .into_iter()
            .map(|(topic, partition)| {
                (
                    offsets_topic::encode_key(&RecordKey::Offset {
                        group: group_id.to_string(),
                        topic,
                        partition,
                    }),
                    None,
                )
            })
            .collect();
        records.extend(consumer_records);
        records.push((
            offsets_topic::encode_key(&RecordKey::Group {
                group: group_id.to_string(),
            }),
            None,
        ));
        let deleted = self.fenced_write(group_id, || {
            self.log.append(group_id, records).map_err(|e| {
                tracing::warn!(group = group_id, error = %e, "cannot persist group deletion");
                e.state_error()
            })
        });
        if let Err(e) = deleted {
            return Some(e);
        }
        if let Some(g) = self.groups().remove(group_id) {
            self.count_removed(&g);
        }
        None
    }

    /// OffsetDelete: removes committed offsets of partitions the group is not consuming.
    /// Blocking. `subscribed(topic)` says whether an active member subscribes to the topic.
    pub fn delete_offsets(
        &self,
        group_id: &str,
        partitions: &[(String, i32)],
    ) -> Result<Vec<Option<ResponseError>>, ResponseError> {
        self.check_coordinator(group_id)?;
        let subscribed_topics: Vec<String> = {
            let groups = self.groups();
            let g = groups.get(group_id).ok_or(ResponseError::GroupIdNotFound)?;
            if let Some(c) = &g.consumer {
                // A consumer-protocol group (Kafka's ConsumerGroup.isSubscribedToTopic): the
                // topics its members subscribe to, by name or through their regexes.
                let topics = c
                    .members
                    .values()
                    .flat_map(|m| m.subscribed_topics.iter().chain(m.regex_topics.iter()));
                topics.cloned().collect()
            } else if g.protocol_type.as_deref() != Some("consumer") && !g.members.is_empty() {
                // Kafka can only tell which topics a consumer-protocol group uses.
                return Err(ResponseError::NonEmptyGroup);
            } else if !g.members.is_empty() {
                g.members
                    .values()
                    .flat_map(|m| {
                        m.protocols
                            .iter()
                            .filter_map(|(_, meta)| {
                                consumer_group::classic::decode_subscription(meta)
                            })
                            .flat_map(|s| s.topics)
                    })
                    .collect()
            } else {
                Vec::new()
            }
        };
        let mut results = Vec::new();
        let mut records = Vec::new();
        for (topic, partition) in partitions {
            if subscribed_topics.contains(topic) {
                results.push(Some(ResponseError::GroupSubscribedToTopic));
                continue;
            }
            records.push((
                offsets_topic::encode_key(&RecordKey::Offset {
                    group: group_id.to_string(),
                    topic: topic.clone(),
                    partition: *partition,
                }),
                None,
            ));
            results.push(None);
        }
        if !records.is_empty() {
            self.fenced_write(group_id, || {
                self.log
                    .append(group_id, records)
                    .map_err(|e| e.offset_commit_error())
            })?;
            let mut groups = self.groups();
            if let Some(g) = groups.get_mut(group_id) {
                for ((topic, partition), r) in partitions.iter().zip(&results) {
                    if r.is_none() {
                        g.offsets.remove(&(topic.clone(), *partition));
                    }
                }
            }
        }
        Ok(results)
    }

    /// A topic left the catalog: its committed offsets go at the next timer pass.
    pub fn topic_deleted(&self, topic: &str) {
        self.deleted_topics
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((topic.to_string(), now_ms()));
    }

    /// Deletes the offsets committed to deleted topics, as Kafka's group coordinator does when
    /// partitions are deleted, so a topic re-created under the same name starts with no
    /// committed offsets instead of its predecessor's. Only offsets committed before the
    /// deletion go; a commit to the re-created topic stays. A deletion that cannot be written
    /// (this broker lost the group's partition, a write failed) is retried at the next pass
    /// while the group is still here. Blocking.
    fn forget_deleted_topics(&self) {
        let deleted = std::mem::take(
            &mut *self
                .deleted_topics
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        if deleted.is_empty() {
            return;
        }
        let stale = |topic: &str, committed_at: i64| {
            deleted
                .iter()
                .any(|(name, at)| name == topic && committed_at <= *at)
        };
        let doomed: Vec<(String, Vec<(String, i32)>)> = self
            .groups()
            .values()
            .filter_map(|g| {
                let keys: Vec<(String, i32)> = g
                    .offsets
                    .iter()
                    .filter(|((topic, _), v)| stale(topic, v.commit_timestamp))
                    .map(|(k, _)| k.clone())
                    .collect();
                (!keys.is_empty()).then(|| (g.id.clone(), keys))
            })
            .collect();
        let mut failed = false;
        for (group, keys) in doomed {
            match self.remove_offsets(&group, &keys) {
                Ok(()) => {
                    tracing::info!(group = %group, offsets = keys.len(), "deleted the offsets of deleted topics")
                }
                Err(ResponseError::NotCoordinator) => {}
                Err(e) => {
                    tracing::warn!(group = %group, error = ?e, "cannot delete the offsets of deleted topics; will retry");
                    failed = true;
                }
            }
        }
        if failed {
            self.deleted_topics
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(deleted);
        }
    }

    /// Writes tombstones for `keys` of a group this broker coordinates and forgets them.
    fn remove_offsets(&self, group_id: &str, keys: &[(String, i32)]) -> Result<(), ResponseError> {
        self.check_coordinator(group_id)?;
        let records = keys
            .iter()
            .map(|(topic, partition)| {
                let key = offsets_topic::encode_key(&RecordKey::Offset {
                    group: group_id.to_string(),
                    topic: topic.clone(),
                    partition: *partition,
                });
                (key, None)
            })
            .collect();
        self.fenced_write(group_id, || {
            self.log
                .append(group_id, records)
                .map_err(|e| e.offset_commit_error())
        })?;
        if let Some(g) = self.groups().get_mut(group_id) {
            for k in keys {
                g.offsets.remove(k);
            }
        }
        Ok(())
    }

    /// Timer work: completes joins, expires members, persists changed groups, expires
    /// offsets of groups empty for longer than the retention. Blocking.
    /// Whether [`tick`](Self::tick) has work now: a partition to load, a deleted topic to
    /// forget, a group whose timers run (with members, pending members or mid-rebalance), an
    /// empty group whose offsets outlived `offsets.retention.minutes`, or the periodic
    /// cleanup. Cheap and non-blocking: the runtime asks it every tick period and hands
    /// `tick` to the blocking pool only when it holds, so an idle coordinator costs a timer
    /// check instead of a thread handoff twenty times a second.
    pub fn needs_tick(&self) -> bool {
        if self.ownership.any_loading()
            || !self
                .deleted_topics
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_empty()
        {
            return true;
        }
        let now = Instant::now();
        let last_cleanup = *self.last_cleanup.lock().unwrap_or_else(|e| e.into_inner());
        if now.duration_since(last_cleanup) >= CLEANUP_INTERVAL {
            return true;
        }
        let now_wall = now_ms();
        let retention = self.config.offsets_retention.as_millis() as i64;
        self.groups().values().any(|g| {
            !g.unwritten.is_empty()
                || match (&g.consumer, &g.share) {
                    (Some(c), _) => !c.members.is_empty(),
                    (_, Some(s)) => !s.members.is_empty(),
                    (None, None) => {
                        !g.members.is_empty()
                            || !g.pending_members.is_empty()
                            || g.state != GroupState::Empty
                            || (!g.offsets.is_empty() && now_wall - g.state_since_ms > retention)
                    }
                }
        })
    }

    pub fn tick(&self) {
        self.load_elected();
        self.forget_deleted_topics();
        let now = Instant::now();
        let now_wall = now_ms();
        let mut persist = Vec::new();
        let mut consumer_writes = Vec::new();
        let mut expire: Vec<(String, Vec<(String, i32)>)> = Vec::new();
        {
            let mut groups = self.groups();
            let resolve = |name: &str| self.log.resolve_topic(name);
            for g in groups.values_mut() {
                if let Some(c) = g.consumer.as_mut() {
                    c.tick(&resolve, now);
                    let downgraded = self.maybe_downgrade(g, true);
                    if downgraded || g.consumer.as_mut().is_some_and(|c| c.drop_unchanged(&g.id)) {
                        consumer_writes.push(g.id.clone());
                    }
                    continue;
                }
                if !g.unwritten.is_empty() {
                    consumer_writes.push(g.id.clone());
                }
                if let Some(s) = g.share.as_mut() {
                    s.tick(&resolve, now);
                    continue;
                }
                if g.tick(now, now_wall) && g.state == GroupState::Empty {
                    persist.push((g.id.clone(), g.to_value()));
                }
                if g.state == GroupState::Empty
                    && g.members.is_empty()
                    && now_wall - g.state_since_ms
                        > self.config.offsets_retention.as_millis() as i64
                {
                    let keys: Vec<_> = g.offsets.keys().cloned().collect();
                    if !keys.is_empty() {
                        expire.push((g.id.clone(), keys));
                    }
                }
            }
        }
        for (id, v) in persist {
            let _ = self.persist_group(&id, Some(v));
        }
        for id in consumer_writes {
            // A failed write is taken again by the next tick or heartbeat.
            let _ = self.write_consumer_group(&id);
        }
        for (id, keys) in expire {
            tracing::info!(group = %id, offsets = keys.len(), "expiring offsets of an empty group");
            let _ = self.delete_offsets(&id, &keys);
        }
        let due = {
            let mut last = self.last_cleanup.lock().unwrap_or_else(|e| e.into_inner());
            let due = now.duration_since(*last) >= CLEANUP_INTERVAL;
            if due {
                *last = now;
            }
            due
        };
        if due {
            self.remove_dead_groups();
        }
    }

    fn count_removed(&self, g: &Group) {
        let n = g.rebalances
            + g.consumer.as_ref().map(|c| c.rebalances).unwrap_or(0)
            + g.share.as_ref().map(|s| s.rebalances).unwrap_or(0);
        self.removed_rebalances
            .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }

    /// Removes groups with no members and no offsets (Kafka's transition to Dead), writing a
    /// tombstone so a restart does not bring them back. Blocking.
    pub fn remove_dead_groups(&self) -> usize {
        let dead: Vec<String> = self
            .groups()
            .values()
            .filter(|g| {
                // A share group stays until DeleteGroups, as in Kafka.
                g.members.is_empty()
                    && g.offsets.is_empty()
                    && g.consumer.as_ref().is_none_or(|c| c.is_empty())
                    && g.share.is_none()
            })
            .map(|g| g.id.clone())
            .collect();
        let mut removed = 0;
        for id in &dead {
            // The group's tombstone, after those of the consumer-group records it wrote.
            let mut records = self
                .groups()
                .get(id)
                .and_then(|g| g.consumer.as_ref())
                .map(|c| c.tombstones())
                .unwrap_or_default();
            records.push((
                offsets_topic::encode_key(&RecordKey::Group { group: id.clone() }),
                None,
            ));
            let written = self.fenced_write(id, || {
                self.log.append(id, records).map_err(|e| {
                    tracing::warn!(group = %id, error = %e, "cannot persist group metadata");
                    e.state_error()
                })
            });
            if written.is_ok() {
                let mut groups = self.groups();
                // Still dead? A member may have joined since the scan.
                if groups.get(id).is_some_and(|g| {
                    g.members.is_empty()
                        && g.offsets.is_empty()
                        && g.consumer.as_ref().is_none_or(|c| c.is_empty())
                        && g.share.is_none()
                }) {
                    if let Some(g) = groups.remove(id) {
                        self.count_removed(&g);
                    }
                    removed += 1;
                }
            }
        }
        removed
    }
}

mod consumer;
mod mixed;
mod reports;
mod share;
#[cfg(test)]
mod tests;
mod txn_offsets;
