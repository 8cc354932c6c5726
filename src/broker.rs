//! Broker state: the topic catalog, the partitions it hosts, and producer-id allocation.
//!
//! Concurrency: the catalog is behind a `RwLock` that is held only to look up or swap
//! `Arc<Topic>` values (never across `.await` or I/O). Each partition owns its log behind a
//! mutex; appends, reads of segment metadata, retention and flushes take it from blocking
//! threads. Long-polling fetches park on a `Notify` that the partition wakes after each append.
//!
//! Persistence: the topic catalog (names, ids, partition counts, config overrides) and the
//! producer-id block live in `strata-metadata.toml` in the first log dir, written atomically on
//! every change; each partition dir also carries Kafka's `partition.metadata` (its topic id).
//! Per-dir checkpoints (recovery point, log start offset, high watermark) and the clean-shutdown
//! marker follow Kafka's names. The Raft metadata quorum will replace the catalog file.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use uuid::Uuid;

use crate::config::{BrokerConfig, BrokerDefaults, ConfigSource, TopicConfig};
use crate::fetch_session::FetchSessionCache;
use crate::log::checkpoint;
use crate::log::segment::FileSlice;
use crate::log::{AppendError, AppendInfo, LoadOptions, Log, ReadError};
use crate::metrics::{Metrics, PartitionGauges};
use crate::replication::state::ReplicaSet;

const METADATA_FILE: &str = "strata-metadata.toml";
const CLEAN_SHUTDOWN_FILE: &str = ".kafka_cleanshutdown";
const RECOVERY_POINT_FILE: &str = "recovery-point-offset-checkpoint";
const LOG_START_FILE: &str = "log-start-offset-checkpoint";
const HIGH_WATERMARK_FILE: &str = "replication-offset-checkpoint";
const PRODUCER_ID_BLOCK: i64 = 1000;
/// Kafka's `max.incremental.fetch.session.cache.slots` default.
const FETCH_SESSION_SLOTS: usize = 1000;

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Errors of catalog operations, mapped to Kafka codes by the API layer.
#[derive(Debug, thiserror::Error)]
pub enum TopicError {
    #[error("Topic '{0}' already exists.")]
    AlreadyExists(String),
    #[error("{0}")]
    InvalidName(String),
    #[error("This server does not host this topic-partition.")]
    Unknown,
    #[error("{0}")]
    InvalidPartitions(String),
    #[error("{0}")]
    InvalidReplicationFactor(String),
    #[error("{0}")]
    InvalidReplicaAssignment(String),
    #[error("{0}")]
    InvalidConfig(String),
    #[error("Topic deletion is disabled.")]
    DeletionDisabled,
    #[error("storage error: {0}")]
    Io(#[from] io::Error),
    /// Cluster mode: the metadata quorum refused or could not commit the change.
    #[error("{0}")]
    Cluster(#[from] crate::controller::ClusterError),
}

/// Kafka's internal topics: only the broker writes them.
pub fn is_internal_topic(name: &str) -> bool {
    matches!(name, "__consumer_offsets" | "__transaction_state")
}

/// Kafka's topic name rules.
pub fn validate_topic_name(name: &str) -> Result<(), TopicError> {
    if name.is_empty() {
        return Err(TopicError::InvalidName(
            "Topic name is illegal, it can't be empty".into(),
        ));
    }
    if name == "." || name == ".." {
        return Err(TopicError::InvalidName(
            "Topic name cannot be \".\" or \"..\"".into(),
        ));
    }
    if name.len() > 249 {
        return Err(TopicError::InvalidName(format!(
            "Topic name is illegal, it can't be longer than 249 characters, topic name: {name}"
        )));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-')
    {
        return Err(TopicError::InvalidName(format!(
            "Topic name {name} is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
        )));
    }
    Ok(())
}

pub struct Partition {
    pub topic: String,
    pub topic_id: Uuid,
    pub index: i32,
    log: Mutex<Log>,
    local_id: i32,
    leader_epoch: AtomicI32,
    /// The leader as last applied (-1: none).
    leader_id: AtomicI32,
    /// The high watermark checkpointed before the last shutdown (-1: none). A single node
    /// takes the log end as its high watermark on start; a replica starts from this instead
    /// once the control plane applies its first state (Kafka's replication-offset-checkpoint).
    checkpointed_high_watermark: AtomicI64,
    /// One of `ROLE_*`; written under both the replica set and the log lock.
    role: AtomicU8,
    /// Set once the control plane applied a state: the high watermark then follows the ISR.
    /// While unset this broker leads alone and the append path takes no other lock.
    replicated: AtomicBool,
    /// Leadership, ISR and follower progress (see [`crate::replication::state`]). Lock order:
    /// this before the log, never the reverse.
    replica_set: Mutex<ReplicaSet>,
    /// Sizes of the committed ISR, the maximal ISR and the replica set, readable without the
    /// replica set lock (acks=all checks on the async workers).
    isr_len: AtomicUsize,
    maximal_isr_len: AtomicUsize,
    replica_count: AtomicUsize,
    waiters: Mutex<Vec<Arc<Notify>>>,
    high_watermark: AtomicI64,
    log_end_offset: AtomicI64,
    log_start_offset: AtomicI64,
    last_stable_offset: AtomicI64,
}

const ROLE_LEADER: u8 = 0;
const ROLE_FOLLOWER: u8 = 1;
/// This broker is not among the partition's replicas.
const ROLE_NONE: u8 = 2;

/// This broker's part in a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Leader,
    Follower,
    None,
}

/// Offsets of a partition without taking its log lock.
#[derive(Debug, Clone, Copy)]
pub struct PartitionOffsets {
    pub log_start_offset: i64,
    pub high_watermark: i64,
    pub log_end_offset: i64,
    /// No record at or above it belongs to an undecided transaction (<= high watermark).
    pub last_stable_offset: i64,
}

/// Why a follower's fetch state could not be recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FollowerFetchError {
    NotLeaderOrFollower,
}

impl Partition {
    fn new(topic: &str, topic_id: Uuid, index: i32, log: Log, config: &BrokerConfig) -> Partition {
        let epoch = log.latest_epoch().unwrap_or(0).max(0);
        let local_id = config.node_id;
        let replica_lag_time_max_ms = config.replication.replica_lag_time_max.as_millis() as i64;
        Partition {
            topic: topic.to_string(),
            topic_id,
            index,
            local_id,
            leader_epoch: AtomicI32::new(epoch),
            leader_id: AtomicI32::new(local_id),
            checkpointed_high_watermark: AtomicI64::new(-1),
            role: AtomicU8::new(ROLE_LEADER),
            replicated: AtomicBool::new(false),
            replica_set: Mutex::new(ReplicaSet::sole_leader(
                local_id,
                epoch,
                replica_lag_time_max_ms,
            )),
            isr_len: AtomicUsize::new(1),
            maximal_isr_len: AtomicUsize::new(1),
            replica_count: AtomicUsize::new(1),
            high_watermark: AtomicI64::new(log.high_watermark()),
            log_end_offset: AtomicI64::new(log.log_end_offset()),
            log_start_offset: AtomicI64::new(log.log_start_offset()),
            last_stable_offset: AtomicI64::new(log.last_stable_offset()),
            log: Mutex::new(log),
            waiters: Mutex::new(Vec::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Log> {
        // A panic while holding the lock would poison it; the log's state is still the
        // on-disk truth, so keep serving rather than cascade the panic.
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_replicas(&self) -> std::sync::MutexGuard<'_, ReplicaSet> {
        self.replica_set.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn publish_isr(&self, set: &ReplicaSet) {
        self.isr_len.store(set.isr.len(), Ordering::Release);
        self.maximal_isr_len
            .store(set.maximal_isr().len(), Ordering::Release);
        self.replica_count
            .store(set.replicas.len().max(1), Ordering::Release);
    }

    /// Kafka's `effectiveMinIsr`: min.insync.replicas capped by the replication factor.
    fn effective_min_isr(&self, min_insync_replicas: i32) -> usize {
        (min_insync_replicas.max(1) as usize).min(self.replica_count.load(Ordering::Acquire))
    }

    fn publish(&self, log: &Log) {
        self.log_start_offset
            .store(log.log_start_offset(), Ordering::Release);
        self.log_end_offset
            .store(log.log_end_offset(), Ordering::Release);
        self.high_watermark
            .store(log.high_watermark(), Ordering::Release);
        self.last_stable_offset
            .store(log.last_stable_offset(), Ordering::Release);
    }

    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch.load(Ordering::Acquire)
    }

    pub fn offsets(&self) -> PartitionOffsets {
        PartitionOffsets {
            log_start_offset: self.log_start_offset.load(Ordering::Acquire),
            high_watermark: self.high_watermark.load(Ordering::Acquire),
            log_end_offset: self.log_end_offset.load(Ordering::Acquire),
            last_stable_offset: self.last_stable_offset.load(Ordering::Acquire),
        }
    }

    pub fn role(&self) -> Role {
        match self.role.load(Ordering::Acquire) {
            ROLE_LEADER => Role::Leader,
            ROLE_FOLLOWER => Role::Follower,
            _ => Role::None,
        }
    }

    pub fn is_leader(&self) -> bool {
        self.role.load(Ordering::Acquire) == ROLE_LEADER
    }

    /// Whether the control plane has applied a state to this partition.
    pub fn is_replicated(&self) -> bool {
        self.replicated.load(Ordering::Acquire)
    }

    /// The current leader and its epoch as this broker knows them.
    pub fn leader_and_epoch(&self) -> (Option<i32>, i32) {
        let leader = self.leader_id.load(Ordering::Acquire);
        ((leader >= 0).then_some(leader), self.leader_epoch())
    }

    /// A snapshot of the replica set (leadership, ISR, follower progress).
    pub fn replica_set(&self) -> ReplicaSet {
        self.lock_replicas().clone()
    }

    /// The committed ISR's size (1 until the control plane applies a state).
    pub fn isr_len(&self) -> usize {
        self.isr_len.load(Ordering::Acquire)
    }

    /// Kafka's acks=all checks: the committed ISR size and the effective min ISR (capped by the
    /// replication factor) before an append.
    pub fn has_enough_in_sync_replicas(&self, min_insync_replicas: i32) -> bool {
        self.isr_len.load(Ordering::Acquire) >= self.effective_min_isr(min_insync_replicas)
    }

    /// Kafka's `checkEnoughReplicasReachOffset` for a waiting acks=all produce: `Ok(true)` once
    /// the high watermark reached `required_offset` with the maximal ISR at least min ISR.
    pub fn check_enough_replicas_reach_offset(
        &self,
        required_offset: i64,
        min_insync_replicas: i32,
    ) -> Result<bool, kafka_protocol::ResponseError> {
        use kafka_protocol::ResponseError;
        if !self.is_leader() {
            return Err(ResponseError::NotLeaderOrFollower);
        }
        if self.offsets().high_watermark < required_offset {
            return Ok(false);
        }
        if self.maximal_isr_len.load(Ordering::Acquire)
            >= self.effective_min_isr(min_insync_replicas)
        {
            Ok(true)
        } else {
            Err(ResponseError::NotEnoughReplicasAfterAppend)
        }
    }

    /// Appends a COMMIT or ABORT marker ending the producer's transaction on this partition
    /// (WriteTxnMarkers). Blocking. Returns the marker's offset.
    pub fn write_txn_marker(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
        commit: bool,
    ) -> Result<i64, AppendError> {
        let offset = {
            let mut log = self.lock();
            if !self.is_leader() {
                return Err(AppendError::NotLeaderOrFollower);
            }
            let offset = log.append_txn_marker(
                producer_id,
                producer_epoch,
                coordinator_epoch,
                commit,
                self.leader_epoch(),
                now_ms(),
            )?;
            self.after_leader_append(&mut log);
            offset
        };
        self.after_append_unlocked();
        Ok(offset)
    }

    /// Appends a produce batch as leader. Blocking: call from a blocking thread.
    pub fn append(&self, records: &[u8]) -> Result<AppendInfo, AppendError> {
        let info = {
            let mut log = self.lock();
            // Checked under the log lock: a role change takes it too.
            if !self.is_leader() {
                return Err(AppendError::NotLeaderOrFollower);
            }
            let info = log.append_as_leader(records, self.leader_epoch(), now_ms())?;
            self.after_leader_append(&mut log);
            info
        };
        if !info.duplicate {
            self.after_append_unlocked();
        }
        Ok(info)
    }

    /// A single replica is the whole ISR: the high watermark follows the log end.
    fn after_leader_append(&self, log: &mut Log) {
        if !self.is_replicated() {
            let leo = log.log_end_offset();
            log.update_high_watermark(leo);
        }
        self.publish(log);
    }

    fn after_append_unlocked(&self) {
        if self.is_replicated() {
            self.maybe_increment_high_watermark(now_ms());
        }
        self.wake_waiters();
    }

    /// Kafka's `maybeIncrementLeaderHW`: moves the high watermark up to the smallest log end
    /// offset of the (maximal) ISR and wakes waiters. Blocking (takes the log lock).
    pub fn maybe_increment_high_watermark(&self, now: i64) -> bool {
        let set = self.lock_replicas();
        if !set.is_leader() {
            return false;
        }
        let mut log = self.lock();
        let candidate =
            set.high_watermark(log.log_end_offset(), now, log.config().min_insync_replicas);
        drop(set);
        let moved = candidate.is_some_and(|hw| hw > log.high_watermark());
        if let Some(hw) = candidate.filter(|_| moved) {
            log.update_high_watermark(hw);
            self.publish(&log);
        }
        drop(log);
        if moved {
            self.wake_waiters();
        }
        moved
    }

    /// Records a follower's fetch at `fetch_offset` (Kafka's `updateFollowerFetchState`),
    /// moves the high watermark, and returns an ISR expansion to propose, if any. Blocking.
    pub fn update_follower_fetch_state(
        &self,
        replica_id: i32,
        fetch_offset: i64,
        follower_log_start_offset: i64,
        leader_log_end_offset: i64,
        now: i64,
    ) -> Result<Option<crate::replication::AlterPartitionRequest>, FollowerFetchError> {
        let (moved_end, expansion) = {
            let mut set = self.lock_replicas();
            if !set.is_leader() {
                return Err(FollowerFetchError::NotLeaderOrFollower);
            }
            let Some(f) = set.followers.get_mut(&replica_id) else {
                return Err(FollowerFetchError::NotLeaderOrFollower);
            };
            let before = f.log_end_offset;
            f.record_fetch(
                fetch_offset,
                follower_log_start_offset,
                now,
                leader_log_end_offset,
            );
            let hw = self.offsets().high_watermark;
            let expansion = set.expansion(replica_id, hw).map(|new_isr| {
                set.pending_isr = Some(new_isr.clone());
                self.publish_isr(&set);
                crate::replication::AlterPartitionRequest {
                    topic_id: self.topic_id,
                    partition: self.index,
                    leader_epoch: set.leader_epoch,
                    new_isr,
                    partition_epoch: set.partition_epoch,
                }
            });
            (before != fetch_offset, expansion)
        };
        if moved_end {
            self.maybe_increment_high_watermark(now);
        }
        Ok(expansion)
    }

    /// Sets which brokers' replicas may join the ISR. Blocking.
    pub fn set_isr_eligible(&self, eligible: Option<std::collections::BTreeSet<i32>>, now: i64) {
        let leader = {
            let mut set = self.lock_replicas();
            set.isr_eligible = eligible;
            set.is_leader()
        };
        if leader && self.is_replicated() {
            self.maybe_increment_high_watermark(now);
        }
    }

    /// The ISR shrink to propose when followers lag (Kafka's `maybeShrinkIsr`).
    pub fn maybe_shrink_isr(&self, now: i64) -> Option<crate::replication::AlterPartitionRequest> {
        if !self.is_replicated() {
            return None;
        }
        let mut set = self.lock_replicas();
        let new_isr = set.shrink(self.offsets().log_end_offset, now)?;
        tracing::info!(topic = %self.topic, partition = self.index, isr = ?set.isr, new_isr = ?new_isr, "shrinking ISR: followers out of sync");
        set.pending_isr = Some(new_isr.clone());
        self.publish_isr(&set);
        Some(crate::replication::AlterPartitionRequest {
            topic_id: self.topic_id,
            partition: self.index,
            leader_epoch: set.leader_epoch,
            new_isr,
            partition_epoch: set.partition_epoch,
        })
    }

    /// The controller committed an ISR change. Blocking.
    pub fn isr_change_committed(&self, committed: &crate::replication::LeaderAndIsr, now: i64) {
        {
            let mut set = self.lock_replicas();
            if committed.leader_epoch != set.leader_epoch
                || committed.partition_epoch < set.partition_epoch
            {
                set.pending_isr = None;
                self.publish_isr(&set);
                return;
            }
            set.isr = committed.isr.clone();
            set.partition_epoch = committed.partition_epoch;
            set.pending_isr = None;
            self.publish_isr(&set);
        }
        self.maybe_increment_high_watermark(now);
        self.wake_waiters();
    }

    /// The controller refused or did not answer an ISR change: propose again later.
    pub fn isr_change_failed(&self, request: &crate::replication::AlterPartitionRequest) {
        let mut set = self.lock_replicas();
        if set.pending_isr.as_ref() == Some(&request.new_isr) {
            set.pending_isr = None;
            self.publish_isr(&set);
        }
    }

    /// Applies a control-plane state (Kafka's `makeLeader` / `makeFollower`). Returns whether
    /// fetching must (re)start for it: this broker follows and the leader epoch changed.
    /// Stale states (older partition epoch) are ignored. Blocking.
    pub fn apply_state(
        &self,
        state: &crate::replication::PartitionLeadership,
        replica_lag_time_max_ms: i64,
        isr_eligible: Option<std::collections::BTreeSet<i32>>,
        now: i64,
    ) -> io::Result<bool> {
        let mut set = self.lock_replicas();
        let first = !self.is_replicated();
        if !first && state.partition_epoch < set.partition_epoch {
            tracing::info!(topic = %self.topic, partition = self.index, partition_epoch = state.partition_epoch, current = set.partition_epoch, "skipped a stale partition state");
            return Ok(false);
        }
        let was_leader = set.is_leader() && !first;
        let new_epoch = first || state.leader_epoch > set.leader_epoch;
        set.replica_lag_time_max_ms = replica_lag_time_max_ms;
        set.isr_eligible = isr_eligible;
        set.replicas = state.replicas.clone();
        set.isr = state.isr.clone();
        set.pending_isr = None;
        set.partition_epoch = state.partition_epoch;
        set.leader = state.leader;
        let role = if state.leader == Some(self.local_id) {
            ROLE_LEADER
        } else if state.replicas.contains(&self.local_id) {
            ROLE_FOLLOWER
        } else {
            ROLE_NONE
        };
        let mut log = self.lock();
        let checkpointed = self.checkpointed_high_watermark.swap(-1, Ordering::AcqRel);
        if first && checkpointed >= 0 && checkpointed < log.high_watermark() {
            log.update_high_watermark(checkpointed);
            self.publish(&log);
        }
        if role == ROLE_LEADER {
            if new_epoch {
                let leo = log.log_end_offset();
                log.assign_epoch_start_offset(state.leader_epoch, leo)?;
                set.leader_epoch = state.leader_epoch;
                set.start_leader_epoch(was_leader, leo, now);
                tracing::info!(topic = %self.topic, partition = self.index, leader_epoch = state.leader_epoch, start_offset = leo, high_watermark = log.high_watermark(), isr = ?state.isr, "became leader");
            } else {
                set.sync_followers();
            }
        } else {
            if new_epoch {
                tracing::info!(topic = %self.topic, partition = self.index, leader = ?state.leader, leader_epoch = state.leader_epoch, "became follower");
            }
            set.leader_epoch = state.leader_epoch.max(set.leader_epoch);
            set.leader_epoch_start_offset = None;
            set.followers.clear();
        }
        self.publish_isr(&set);
        self.leader_epoch.store(set.leader_epoch, Ordering::Release);
        self.leader_id
            .store(state.leader.unwrap_or(-1), Ordering::Release);
        self.role.store(role, Ordering::Release);
        self.replicated.store(true, Ordering::Release);
        drop(log);
        drop(set);
        if role == ROLE_LEADER {
            // The ISR may be down to this broker alone.
            self.maybe_increment_high_watermark(now);
        }
        // Waiting produces and fetches re-check their partition (leadership may be gone).
        self.wake_waiters();
        Ok(role == ROLE_FOLLOWER && new_epoch)
    }

    /// Appends batches fetched from the leader (offsets and epochs kept) and takes the
    /// leader's high watermark and log start offset, as Kafka's follower does after each
    /// fetch. Refused unless this broker follows at `leader_epoch`. Blocking.
    pub fn append_as_follower(
        &self,
        leader_epoch: i32,
        records: &[u8],
        leader_high_watermark: i64,
        leader_log_start_offset: i64,
    ) -> Result<usize, AppendError> {
        let appended = {
            let mut log = self.lock();
            if self.role() != Role::Follower || self.leader_epoch() != leader_epoch {
                return Err(AppendError::NotLeaderOrFollower);
            }
            let appended = log.append_as_follower(records, now_ms())?;
            let hw = leader_high_watermark.min(log.log_end_offset());
            if hw > log.high_watermark() {
                log.update_high_watermark(hw);
            }
            // The leader's log start moved (retention, DeleteRecords): follow it. Without
            // remote storage the segments wholly below it go now, as on the leader.
            if leader_log_start_offset > log.log_start_offset() {
                if log.config().remote_storage_enable {
                    log.advance_log_start_offset(leader_log_start_offset)?;
                } else {
                    log.delete_records_before(leader_log_start_offset)?;
                }
            }
            self.publish(&log);
            appended
        };
        self.wake_waiters();
        Ok(appended)
    }

    /// Truncates a follower's log to `offset` (divergence after a leader change). Blocking.
    pub fn truncate_to(&self, leader_epoch: i32, offset: i64) -> Result<bool, AppendError> {
        let mut log = self.lock();
        if self.role() != Role::Follower || self.leader_epoch() != leader_epoch {
            return Err(AppendError::NotLeaderOrFollower);
        }
        let removed = log.truncate_to(offset, now_ms())?;
        if removed {
            tracing::info!(topic = %self.topic, partition = self.index, offset, log_end_offset = log.log_end_offset(), "truncated divergent log suffix");
        }
        self.publish(&log);
        Ok(removed)
    }

    /// Empties a follower's log and restarts it at `offset` (the leader's log start is past
    /// this follower's end). Blocking.
    pub fn truncate_fully_and_start_at(
        &self,
        leader_epoch: i32,
        offset: i64,
    ) -> Result<(), AppendError> {
        let mut log = self.lock();
        if self.role() != Role::Follower || self.leader_epoch() != leader_epoch {
            return Err(AppendError::NotLeaderOrFollower);
        }
        log.truncate_fully_and_start_at(offset, now_ms())?;
        tracing::info!(topic = %self.topic, partition = self.index, offset, "restarted follower log at the leader's log start");
        self.publish(&log);
        Ok(())
    }

    /// Finds the file range to serve for a fetch. Blocking (may read segment headers).
    pub fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        max_offset: i64,
        min_one: bool,
    ) -> Result<Option<FileSlice>, ReadError> {
        self.lock().read(offset, max_bytes, max_offset, min_one)
    }

    pub fn with_log<R>(&self, f: impl FnOnce(&mut Log) -> R) -> R {
        let mut log = self.lock();
        let r = f(&mut log);
        self.publish(&log);
        r
    }

    /// Registers a fetch waiting for data; it is woken (once) by the next append.
    pub fn add_waiter(&self, n: Arc<Notify>) {
        if let Ok(mut w) = self.waiters.lock() {
            w.retain(|x| Arc::strong_count(x) > 1);
            w.push(n);
        }
    }

    fn wake_waiters(&self) {
        let waiters = match self.waiters.lock() {
            Ok(mut w) => std::mem::take(&mut *w),
            Err(_) => return,
        };
        for w in waiters {
            w.notify_one();
        }
    }

    fn gauges(&self) -> PartitionGauges {
        let leader = self.is_leader();
        let under_replicated = leader
            && self.isr_len.load(Ordering::Acquire) < self.replica_count.load(Ordering::Acquire);
        let log = self.lock();
        PartitionGauges {
            topic: self.topic.clone(),
            partition: self.index,
            log_start_offset: log.log_start_offset(),
            log_end_offset: log.log_end_offset(),
            high_watermark: log.high_watermark(),
            size_bytes: log.size_bytes(),
            segments: log.segment_count(),
            cleaner_dirty_ratio: None,
            leader,
            under_replicated,
        }
    }
}

impl crate::log::cleaner::LogHandle for Partition {
    fn with_log<R>(&self, f: impl FnOnce(&mut Log) -> R) -> R {
        Partition::with_log(self, f)
    }
}

pub struct Topic {
    pub name: String,
    pub id: Uuid,
    pub overrides: BTreeMap<String, String>,
    pub config: TopicConfig,
    pub partitions: Vec<Arc<Partition>>,
}

impl Topic {
    pub fn is_internal(&self) -> bool {
        is_internal_topic(&self.name)
    }
}

#[derive(Serialize, Deserialize, Default)]
struct MetadataFile {
    cluster_id: String,
    next_producer_id_block: i64,
    #[serde(default)]
    topics: Vec<TopicRecord>,
    /// Dynamic broker configs set with (Incremental)AlterConfigs, keyed by resource name
    /// ("" = cluster-wide default, else a node id) and then by setting.
    #[serde(default)]
    broker_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// SCRAM credentials: user -> mechanism name -> salted keys (never the password).
    #[serde(default)]
    scram_credentials: ScramStore,
    /// ACLs created with CreateAcls.
    #[serde(default)]
    acls: Vec<crate::acl::AclBinding>,
    /// Client quotas set with AlterClientQuotas (entity and values).
    #[serde(default)]
    client_quotas: Vec<crate::quota::QuotaRecord>,
}

type ScramStore = BTreeMap<String, BTreeMap<String, crate::auth::scram::Credential>>;

/// Adds or replaces a SCRAM credential in a data dir before the broker starts (`strata scram
/// add`, like `kafka-storage format --add-scram`). Blocking.
pub fn add_scram_credential_offline(
    config: &BrokerConfig,
    user: &str,
    mechanism: crate::auth::scram::Mechanism,
    credential: crate::auth::scram::Credential,
) -> io::Result<()> {
    let dir = &config.log_dirs[0];
    fs::create_dir_all(dir)?;
    let path = dir.join(METADATA_FILE);
    let mut meta: MetadataFile = match fs::read_to_string(&path) {
        Ok(text) => toml::from_str(&text).map_err(|e| io::Error::other(e.to_string()))?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => MetadataFile::default(),
        Err(e) => return Err(e),
    };
    meta.scram_credentials
        .entry(user.to_string())
        .or_default()
        .insert(mechanism.name().to_string(), credential);
    let text = toml::to_string(&meta).map_err(|e| io::Error::other(e.to_string()))?;
    let tmp = path.with_extension("toml.tmp");
    fs::write(&tmp, text)?;
    fs::rename(&tmp, &path)
}

#[derive(Serialize, Deserialize, Clone)]
struct TopicRecord {
    name: String,
    id: String,
    partitions: i32,
    #[serde(default)]
    configs: BTreeMap<String, String>,
}

struct ProducerIds {
    next: i64,
    block_end: i64,
}

#[derive(Default)]
struct Catalog {
    by_name: HashMap<String, Arc<Topic>>,
    by_id: HashMap<Uuid, Arc<Topic>>,
}

pub struct Broker {
    pub config: BrokerConfig,
    pub cluster_id: String,
    pub metrics: Metrics,
    catalog: RwLock<Catalog>,
    /// Serializes catalog changes and writes of the metadata file.
    catalog_writes: Mutex<()>,
    producer_ids: Mutex<ProducerIds>,
    fetch_sessions: Mutex<FetchSessionCache>,
    /// See [`MetadataFile::broker_configs`].
    dynamic_configs: RwLock<BTreeMap<String, BTreeMap<String, String>>>,
    scram: RwLock<ScramStore>,
    /// ACLs and the settings that decide with them (see [`crate::acl`]).
    pub authorizer: crate::acl::Authorizer,
    /// Client quotas and connection limits.
    pub quotas: crate::quota::Quotas,
    /// Set once at start-up, after the logs are open (the coordinator replays its topic).
    groups: std::sync::OnceLock<Arc<crate::coordinator::GroupCoordinator>>,
    /// Tiered storage, when remote.log.storage.system.enable is set.
    tiering: std::sync::OnceLock<Arc<crate::tiering::Tiering>>,
    /// Set once at start-up, after the group coordinator (markers complete its offsets).
    txns: std::sync::OnceLock<Arc<crate::coordinator::txn::TransactionCoordinator>>,
    /// The `__consumer_offsets` and `__transaction_state` partitions this broker serves as
    /// coordinator, following leadership (kept here so a state applied before the
    /// coordinators start is not lost).
    group_ownership: Arc<crate::coordinator::ownership::Ownership>,
    txn_ownership: Arc<crate::coordinator::ownership::Ownership>,
    /// Log cleaner state (checkpoints, which partitions are being cleaned); its tasks are
    /// spawned by the runtime.
    log_cleaner: crate::log_cleaner::LogCleaner,
    /// Cluster view, partition leadership and ISR proposals; its tasks are spawned by the
    /// runtime.
    replication: crate::replication::ReplicaManager,
    /// Cluster mode: the metadata quorum membership (set once at start-up).
    cluster: std::sync::OnceLock<Arc<crate::controller::ClusterControl>>,
}

/// True when the broker has never run on these log dirs (no meta.properties, and no topics in
/// the catalog: `strata scram add` may have written credentials before the first start).
pub fn is_fresh_data_dir(config: &BrokerConfig) -> bool {
    config.log_dirs.iter().all(|d| {
        let no_topics = fs::read_to_string(d.join(METADATA_FILE))
            .ok()
            .and_then(|t| toml::from_str::<MetadataFile>(&t).ok())
            .is_none_or(|m| m.topics.is_empty());
        no_topics && !d.join("meta.properties").exists()
    })
}

/// Writes the catalog and log start offsets of topics restored from the bucket, before the
/// broker opens (see [`crate::tiering::restore_if_empty`]).
pub fn write_restored_metadata(
    config: &BrokerConfig,
    topics: &[(String, Uuid, i32, BTreeMap<String, String>)],
    log_starts: &[(String, i32, i64)],
    next_producer_id_block: i64,
) -> io::Result<()> {
    let dir = &config.log_dirs[0];
    fs::create_dir_all(dir)?;
    let lines: Vec<String> = log_starts
        .iter()
        .map(|(t, p, o)| format!("{t} {p} {o}"))
        .collect();
    checkpoint::write(&dir.join(LOG_START_FILE), &lines)?;
    let existing = fs::read_to_string(dir.join(METADATA_FILE))
        .ok()
        .and_then(|t| toml::from_str::<MetadataFile>(&t).ok())
        .unwrap_or_default();
    let file = MetadataFile {
        cluster_id: config.cluster_id.clone().unwrap_or_default(),
        next_producer_id_block,
        topics: topics
            .iter()
            .map(|(name, id, partitions, configs)| TopicRecord {
                name: name.clone(),
                id: id.to_string(),
                partitions: *partitions,
                configs: configs.clone(),
            })
            .collect(),
        broker_configs: BTreeMap::new(),
        // Keep credentials added with `strata scram add` before this first start.
        scram_credentials: existing.scram_credentials,
        acls: existing.acls,
        client_quotas: existing.client_quotas,
    };
    let text = toml::to_string(&file).map_err(|e| io::Error::other(e.to_string()))?;
    let path = dir.join(METADATA_FILE);
    let tmp = path.with_extension("toml.tmp");
    fs::write(&tmp, text)?;
    fs::rename(&tmp, &path)
}

fn partition_dir_name(topic: &str, partition: i32) -> String {
    format!("{topic}-{partition}")
}

/// Whether a coordinator topic this broker created for itself (the transaction coordinator
/// creates `__transaction_state` at start-up, the group coordinator `__consumer_offsets` on
/// first use) may take the control plane's topic id: it was never replicated and holds
/// nothing. With data in it the ids conflict and the control plane's state is refused.
fn adoptable_internal_topic(t: &Topic) -> bool {
    use crate::coordinator::{txn::TRANSACTION_STATE_TOPIC, OFFSETS_TOPIC};
    (t.name == OFFSETS_TOPIC || t.name == TRANSACTION_STATE_TOPIC)
        && t.partitions.iter().all(|p| {
            let o = p.offsets();
            !p.is_replicated() && o.log_end_offset == 0 && o.log_start_offset == 0
        })
}

/// Kafka's `partition.metadata`: the topic id, base64url without padding... Kafka writes the
/// id with `Uuid.toString()`, which is exactly that encoding.
fn write_partition_metadata(dir: &Path, id: Uuid) -> io::Result<()> {
    let text = format!("version: 0\ntopic_id: {}\n", kafka_uuid_string(id));
    let tmp = dir.join("partition.metadata.tmp");
    fs::write(&tmp, text)?;
    fs::rename(tmp, dir.join("partition.metadata"))
}

/// Kafka's textual topic id (URL-safe base64 of the 16 bytes, no padding).
pub fn kafka_uuid_string(id: Uuid) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = id.as_bytes();
    let mut out = String::with_capacity(22);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = ((b[0] as u32) << 16) | ((b[1] as u32) << 8) | b[2] as u32;
        let chars = chunk.len() + 1;
        for i in 0..chars {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

impl Broker {
    /// Opens every log dir, loads the catalog and all partitions (recovering after a crash).
    pub fn open(config: BrokerConfig) -> anyhow::Result<Arc<Broker>> {
        for d in &config.log_dirs {
            fs::create_dir_all(d)
                .map_err(|e| anyhow::anyhow!("cannot create log dir {}: {e}", d.display()))?;
        }
        let primary = &config.log_dirs[0];
        let meta_path = primary.join(METADATA_FILE);
        let mut meta: MetadataFile = match fs::read_to_string(&meta_path) {
            Ok(text) => toml::from_str(&text)
                .map_err(|e| anyhow::anyhow!("{}: {e}", meta_path.display()))?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => MetadataFile::default(),
            Err(e) => return Err(anyhow::anyhow!("cannot read {}: {e}", meta_path.display())),
        };
        if meta.cluster_id.is_empty() {
            meta.cluster_id = config
                .cluster_id
                .clone()
                .unwrap_or_else(|| kafka_uuid_string(Uuid::new_v4()));
        }
        let clean = config
            .log_dirs
            .iter()
            .all(|d| d.join(CLEAN_SHUTDOWN_FILE).exists());
        if clean {
            tracing::info!("clean shutdown marker found: skipping log recovery");
        } else {
            tracing::info!("no clean shutdown marker: recovering logs from their recovery points");
        }
        let mut recovery_points = HashMap::new();
        let mut log_starts = HashMap::new();
        let mut high_watermarks = HashMap::new();
        for d in &config.log_dirs {
            for (t, p, o) in
                checkpoint::read_offsets(&d.join(RECOVERY_POINT_FILE)).unwrap_or_default()
            {
                recovery_points.insert((t, p), o);
            }
            for (t, p, o) in checkpoint::read_offsets(&d.join(LOG_START_FILE)).unwrap_or_default() {
                log_starts.insert((t, p), o);
            }
            for (t, p, o) in
                checkpoint::read_offsets(&d.join(HIGH_WATERMARK_FILE)).unwrap_or_default()
            {
                high_watermarks.insert((t, p), o);
            }
        }
        // Finish deletions interrupted by a crash.
        for d in &config.log_dirs {
            if let Ok(entries) = fs::read_dir(d) {
                for e in entries.flatten() {
                    if e.file_name().to_string_lossy().ends_with("-delete") {
                        let _ = fs::remove_dir_all(e.path());
                    }
                }
            }
        }
        // Next producer id: start a fresh block so ids are never reused after a crash.
        let next_pid = meta.next_producer_id_block.max(0);
        meta.next_producer_id_block = next_pid + PRODUCER_ID_BLOCK;
        let broker = Broker {
            cluster_id: meta.cluster_id.clone(),
            metrics: Metrics::default(),
            catalog: RwLock::new(Catalog::default()),
            catalog_writes: Mutex::new(()),
            producer_ids: Mutex::new(ProducerIds {
                next: next_pid,
                block_end: next_pid + PRODUCER_ID_BLOCK,
            }),
            fetch_sessions: Mutex::new(FetchSessionCache::new(FETCH_SESSION_SLOTS)),
            dynamic_configs: RwLock::new(meta.broker_configs.clone()),
            scram: RwLock::new(meta.scram_credentials.clone()),
            authorizer: crate::acl::Authorizer::new(
                config.security.authorizer_enabled,
                config.security.super_users.iter().cloned(),
                config.security.allow_everyone_if_no_acl_found,
                meta.acls.clone(),
            ),
            quotas: crate::quota::Quotas::open(
                config.quota_sample,
                config.connection_limits.clone(),
                &meta.client_quotas,
            ),
            groups: std::sync::OnceLock::new(),
            tiering: std::sync::OnceLock::new(),
            txns: std::sync::OnceLock::new(),
            group_ownership: Arc::default(),
            txn_ownership: Arc::default(),
            log_cleaner: crate::log_cleaner::LogCleaner::open(
                config.log_cleaner.clone(),
                &config.log_dirs,
            ),
            replication: crate::replication::ReplicaManager::default(),
            cluster: std::sync::OnceLock::new(),
            config,
        };
        let now = now_ms();
        let mut catalog = Catalog::default();
        for rec in &meta.topics {
            let id = Uuid::parse_str(&rec.id)
                .map_err(|e| anyhow::anyhow!("bad topic id for {}: {e}", rec.name))?;
            let config = broker.topic_config(&rec.configs);
            let mut partitions = Vec::new();
            for p in 0..rec.partitions {
                let dir = broker.find_or_place_partition_dir(&rec.name, p);
                let key = (rec.name.clone(), p);
                let opts = LoadOptions {
                    clean_shutdown: clean,
                    recovery_point: recovery_points.get(&key).copied(),
                    log_start_offset: log_starts.get(&key).copied(),
                    now_ms: now,
                };
                let log = Log::open(&dir, config.clone(), opts)
                    .map_err(|e| anyhow::anyhow!("cannot open log {}: {e}", dir.display()))?;
                write_partition_metadata(&dir, id)?;
                let partition = Partition::new(&rec.name, id, p, log, &broker.config);
                if let Some(&hw) = high_watermarks.get(&key) {
                    partition
                        .checkpointed_high_watermark
                        .store(hw, Ordering::Release);
                }
                partitions.push(Arc::new(partition));
            }
            let topic = Arc::new(Topic {
                name: rec.name.clone(),
                id,
                overrides: rec.configs.clone(),
                config,
                partitions,
            });
            catalog.by_id.insert(id, topic.clone());
            catalog.by_name.insert(rec.name.clone(), topic);
        }
        *broker.catalog.write().unwrap_or_else(|e| e.into_inner()) = catalog;
        broker.save_metadata_with(meta.next_producer_id_block)?;
        for d in &broker.config.log_dirs {
            write_meta_properties(d, &broker.cluster_id, broker.config.node_id)?;
            let _ = fs::remove_file(d.join(CLEAN_SHUTDOWN_FILE));
        }
        Ok(Arc::new(broker))
    }

    fn find_or_place_partition_dir(&self, topic: &str, partition: i32) -> PathBuf {
        let name = partition_dir_name(topic, partition);
        for d in &self.config.log_dirs {
            if d.join(&name).is_dir() {
                return d.join(name);
            }
        }
        // New partition: the dir hosting the fewest partitions.
        let least = self
            .config
            .log_dirs
            .iter()
            .min_by_key(|d| {
                fs::read_dir(d)
                    .map(|r| r.flatten().filter(|e| e.path().is_dir()).count())
                    .unwrap_or(0)
            })
            .unwrap_or(&self.config.log_dirs[0]);
        least.join(name)
    }

    fn save_metadata_with(&self, next_producer_id_block: i64) -> io::Result<()> {
        let catalog = self.catalog.read().unwrap_or_else(|e| e.into_inner());
        let mut topics: Vec<TopicRecord> = catalog
            .by_name
            .values()
            .map(|t| TopicRecord {
                name: t.name.clone(),
                id: t.id.to_string(),
                partitions: t.partitions.len() as i32,
                configs: t.overrides.clone(),
            })
            .collect();
        drop(catalog);
        topics.sort_by(|a, b| a.name.cmp(&b.name));
        let broker_configs = self
            .dynamic_configs
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let scram_credentials = self.scram.read().unwrap_or_else(|e| e.into_inner()).clone();
        let file = MetadataFile {
            cluster_id: self.cluster_id.clone(),
            next_producer_id_block,
            topics,
            broker_configs,
            scram_credentials,
            acls: self.authorizer.acls(),
            client_quotas: self.quotas.records(),
        };
        let text = toml::to_string(&file).map_err(|e| io::Error::other(e.to_string()))?;
        let path = self.config.log_dirs[0].join(METADATA_FILE);
        let tmp = path.with_extension("toml.tmp");
        {
            let f = fs::File::create(&tmp)?;
            io::Write::write_all(&mut &f, text.as_bytes())?;
            f.sync_all()?;
        }
        fs::rename(&tmp, &path)
    }

    fn save_metadata(&self) -> io::Result<()> {
        let block_end = self
            .producer_ids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .block_end;
        self.save_metadata_with(block_end)
    }

    /// Broker-level defaults for topic configs: static settings overlaid with the dynamic
    /// cluster-wide defaults, then this broker's dynamic settings.
    pub fn topic_defaults(&self) -> BrokerDefaults {
        let mut d = self.config.topic_defaults.clone();
        let dynamic = self
            .dynamic_configs
            .read()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(cluster) = dynamic.get("") {
            for (k, v) in cluster {
                d.insert(k.clone(), (v.clone(), ConfigSource::DynamicDefaultBroker));
            }
        }
        if let Some(mine) = dynamic.get(&self.config.node_id.to_string()) {
            for (k, v) in mine {
                d.insert(k.clone(), (v.clone(), ConfigSource::DynamicBroker));
            }
        }
        d
    }

    /// The effective config of a topic with the given overrides.
    pub fn topic_config(&self, overrides: &BTreeMap<String, String>) -> TopicConfig {
        TopicConfig::resolve(overrides, &self.topic_defaults())
    }

    /// The dynamic configs set on a broker resource ("" = cluster default).
    pub fn dynamic_broker_configs(&self, resource: &str) -> BTreeMap<String, String> {
        self.dynamic_configs
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(resource)
            .cloned()
            .unwrap_or_default()
    }

    /// Replaces the dynamic configs of a broker resource (validated by the caller), persists
    /// them and re-resolves every topic's config. Blocking.
    pub fn set_dynamic_broker_configs(
        &self,
        resource: &str,
        configs: BTreeMap<String, String>,
    ) -> io::Result<()> {
        let _w = self
            .catalog_writes
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        {
            let mut d = self
                .dynamic_configs
                .write()
                .unwrap_or_else(|e| e.into_inner());
            if configs.is_empty() {
                d.remove(resource);
            } else {
                d.insert(resource.to_string(), configs);
            }
        }
        for t in self.topics() {
            let config = self.topic_config(&t.overrides);
            for p in &t.partitions {
                p.with_log(|l| l.set_config(config.clone()));
            }
            self.replace_topic(Topic {
                name: t.name.clone(),
                id: t.id,
                overrides: t.overrides.clone(),
                config,
                partitions: t.partitions.clone(),
            });
        }
        self.save_metadata()
    }

    /// The group coordinator (present once start-up has loaded it).
    pub fn group_coordinator(&self) -> Option<&Arc<crate::coordinator::GroupCoordinator>> {
        self.groups.get()
    }

    /// Creates the group coordinator and replays `__consumer_offsets`. Blocking.
    pub fn start_group_coordinator(self: &Arc<Self>) -> io::Result<()> {
        use crate::coordinator::{offsets_log::BrokerOffsetsLog, GroupConfig, GroupCoordinator};
        use std::time::Duration;
        let c = &self.config;
        let log = BrokerOffsetsLog::new(
            Arc::downgrade(self),
            c.offsets_topic_num_partitions,
            c.offsets_topic_segment_bytes,
        );
        let coordinator = GroupCoordinator::with_ownership(
            GroupConfig {
                initial_rebalance_delay: Duration::from_millis(c.group_initial_rebalance_delay_ms),
                min_session_timeout: Duration::from_millis(c.group_min_session_timeout_ms),
                max_session_timeout: Duration::from_millis(c.group_max_session_timeout_ms),
                offsets_retention: Duration::from_millis(c.offsets_retention_ms as u64),
                offset_metadata_max_bytes: c.offset_metadata_max_bytes,
                consumer_session_timeout: Duration::from_millis(
                    c.group_consumer_session_timeout_ms,
                ),
                consumer_heartbeat_interval: Duration::from_millis(
                    c.group_consumer_heartbeat_interval_ms,
                ),
            },
            Arc::new(log),
            self.group_ownership.clone(),
        );
        let records = coordinator.load()?;
        tracing::info!(records, "group coordinator loaded __consumer_offsets");
        let _ = self.groups.set(Arc::new(coordinator));
        Ok(())
    }

    /// The transaction coordinator (present once start-up has loaded it).
    pub fn txn_coordinator(&self) -> Option<&Arc<crate::coordinator::txn::TransactionCoordinator>> {
        self.txns.get()
    }

    /// Creates the transaction coordinator: creates `__transaction_state` if needed and
    /// replays it. Call after [`Self::start_group_coordinator`]. Blocking.
    pub fn start_txn_coordinator(self: &Arc<Self>) -> io::Result<()> {
        use crate::coordinator::txn::state_log::{BrokerParticipants, BrokerTransactionLog};
        use crate::coordinator::txn::{TransactionCoordinator, TxnConfig};
        use std::time::Duration;
        let c = &self.config;
        let log = BrokerTransactionLog::new(
            Arc::downgrade(self),
            c.transaction_state_log_num_partitions,
            c.transaction_state_log_segment_bytes,
        );
        log.ensure_topic()?;
        let coordinator = TransactionCoordinator::with_ownership(
            TxnConfig {
                max_timeout_ms: c.transaction_max_timeout_ms,
                transactional_id_expiration_ms: c.transactional_id_expiration_ms,
                abort_timed_out_interval: Duration::from_millis(
                    c.transaction_abort_timed_out_transaction_cleanup_interval_ms,
                ),
                remove_expired_interval: Duration::from_millis(
                    c.transaction_remove_expired_transaction_cleanup_interval_ms,
                ),
            },
            Arc::new(log),
            Arc::new(BrokerParticipants::new(Arc::downgrade(self))),
            self.txn_ownership.clone(),
        );
        let records = coordinator.load()?;
        tracing::info!(
            records,
            "transaction coordinator loaded __transaction_state"
        );
        let _ = self.txns.set(Arc::new(coordinator));
        Ok(())
    }

    /// Producer state of this partition for DescribeProducers: (producer id, epoch, last
    /// sequence, last timestamp, coordinator epoch, current transaction start offset or -1).
    /// Blocking (takes the log lock).
    pub fn describe_producers(partition: &Partition) -> Vec<(i64, i16, i32, i64, i32, i64)> {
        partition.with_log(|l| l.producer_states())
    }

    /// The incremental fetch session cache; hold the guard only briefly.
    /// A user's SCRAM credential for `mechanism`.
    pub fn scram_credential(
        &self,
        user: &str,
        mechanism: crate::auth::scram::Mechanism,
    ) -> Option<crate::auth::scram::Credential> {
        self.scram
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(user)
            .and_then(|m| m.get(mechanism.name()))
            .cloned()
    }

    /// (user, [(mechanism, iterations)]) for DescribeUserScramCredentials.
    pub fn scram_users(&self) -> Vec<(String, Vec<(crate::auth::scram::Mechanism, i32)>)> {
        self.scram
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(u, m)| {
                (
                    u.clone(),
                    m.iter()
                        .filter_map(|(name, c)| {
                            crate::auth::scram::Mechanism::parse(name).map(|m| (m, c.iterations))
                        })
                        .collect(),
                )
            })
            .collect()
    }

    /// Sets (Some) or deletes (None) credentials and persists them. Blocking.
    pub fn alter_scram(
        &self,
        changes: Vec<(
            String,
            crate::auth::scram::Mechanism,
            Option<crate::auth::scram::Credential>,
        )>,
    ) -> io::Result<()> {
        {
            let mut store = self.scram.write().unwrap_or_else(|e| e.into_inner());
            for (user, m, cred) in changes {
                match cred {
                    Some(c) => {
                        store
                            .entry(user)
                            .or_default()
                            .insert(m.name().to_string(), c);
                    }
                    None => {
                        if let Some(per_user) = store.get_mut(&user) {
                            per_user.remove(m.name());
                            if per_user.is_empty() {
                                store.remove(&user);
                            }
                        }
                    }
                }
            }
        }
        let _w = self
            .catalog_writes
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        self.save_metadata()
    }

    /// Adds ACLs and persists them; on failure nothing changes. Blocking.
    pub fn create_acls(&self, new: &[crate::acl::AclBinding]) -> io::Result<()> {
        let _w = self
            .catalog_writes
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let before = self.authorizer.acls();
        self.authorizer.add(new);
        self.save_metadata()
            .inspect_err(|_| self.authorizer.replace(before))
    }

    /// Deletes the ACLs matching each filter and persists the rest; returns what each filter
    /// deleted. On failure nothing changes. Blocking.
    pub fn delete_acls(
        &self,
        filters: &[crate::acl::AclFilter],
    ) -> io::Result<Vec<Vec<crate::acl::AclBinding>>> {
        let _w = self
            .catalog_writes
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let before = self.authorizer.acls();
        let (removed, _) = self.authorizer.remove(filters);
        self.save_metadata()
            .inspect_err(|_| self.authorizer.replace(before))?;
        Ok(removed)
    }

    /// Applies validated client quota changes and persists them. Blocking.
    pub fn alter_client_quotas(&self, changes: &[crate::quota::Change]) -> io::Result<()> {
        let _w = self
            .catalog_writes
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if self.quotas.apply(changes) {
            self.save_metadata()?;
        }
        Ok(())
    }

    pub fn tiering(&self) -> Option<&Arc<crate::tiering::Tiering>> {
        self.tiering.get()
    }

    pub fn set_tiering(&self, tiering: Arc<crate::tiering::Tiering>) {
        let _ = self.tiering.set(tiering);
    }

    pub fn producer_id_block_end(&self) -> i64 {
        self.producer_ids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .block_end
    }

    /// Local bytes of remote-enabled partitions not uploaded yet (for metrics).
    pub fn remote_upload_lag(&self) -> Vec<(String, i32, u64)> {
        self.topics()
            .iter()
            .filter(|t| t.config.remote_storage_enable)
            .flat_map(|t| t.partitions.iter())
            .map(|p| {
                (
                    p.topic.clone(),
                    p.index,
                    p.with_log(|l| l.local_only_bytes()),
                )
            })
            .collect()
    }

    pub fn fetch_sessions(&self) -> std::sync::MutexGuard<'_, FetchSessionCache> {
        self.fetch_sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    pub fn topic(&self, name: &str) -> Option<Arc<Topic>> {
        self.catalog
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .by_name
            .get(name)
            .cloned()
    }

    pub fn topic_by_id(&self, id: &Uuid) -> Option<Arc<Topic>> {
        self.catalog
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .by_id
            .get(id)
            .cloned()
    }

    pub fn topics(&self) -> Vec<Arc<Topic>> {
        let mut v: Vec<_> = self
            .catalog
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .by_name
            .values()
            .cloned()
            .collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    pub fn partition(&self, topic: &str, partition: i32) -> Option<Arc<Partition>> {
        self.topic(topic)
            .and_then(|t| t.partitions.get(usize::try_from(partition).ok()?).cloned())
    }

    /// Validates a new topic without creating it (CreateTopics validate_only, and the first
    /// step of creation).
    pub fn check_new_topic(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        configs: &BTreeMap<String, String>,
    ) -> Result<(), TopicError> {
        validate_topic_name(name)?;
        let cluster = self.cluster().filter(|_| !is_internal_topic(name));
        if self.topic(name).is_some()
            || cluster.is_some_and(|c| crate::controller::admin::topic_exists(c, name))
        {
            return Err(TopicError::AlreadyExists(name.to_string()));
        }
        if partitions < 1 {
            return Err(TopicError::InvalidPartitions(
                "Number of partitions must be larger than 0.".into(),
            ));
        }
        if partitions > 100_000 {
            return Err(TopicError::InvalidPartitions(format!(
                "Number of partitions {partitions} is too large."
            )));
        }
        if replication_factor < 1 {
            return Err(TopicError::InvalidReplicationFactor(
                "Replication factor must be larger than 0.".into(),
            ));
        }
        let available = cluster.map_or(1, |c| crate::controller::admin::unfenced_brokers(c));
        if replication_factor as usize > available {
            return Err(TopicError::InvalidReplicationFactor(format!(
                "Unable to replicate the partition {replication_factor} time(s): The target replication factor of {replication_factor} cannot be reached because only {available} broker(s) are registered."
            )));
        }
        for (k, v) in configs {
            crate::config::topic::validate(k, v)
                .map_err(|e| TopicError::InvalidConfig(e.to_string()))?;
        }
        crate::config::topic::check_combination(
            &self.topic_config(configs),
            self.config.tiering.enabled,
            None,
        )
        .map_err(TopicError::InvalidConfig)?;
        Ok(())
    }

    /// Creates a topic. Blocking (creates directories and files).
    pub fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        configs: BTreeMap<String, String>,
    ) -> Result<Arc<Topic>, TopicError> {
        if let Some(c) = self.cluster().filter(|_| !is_internal_topic(name)) {
            self.check_new_topic(name, partitions, replication_factor, &configs)?;
            return crate::controller::admin::create_topic(
                self,
                c,
                name,
                partitions,
                replication_factor,
                configs,
                None,
            );
        }
        let _w = self
            .catalog_writes
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        self.check_new_topic(name, partitions, replication_factor, &configs)?;
        let id = Uuid::new_v4();
        let config = self.topic_config(&configs);
        let mut parts = Vec::with_capacity(partitions as usize);
        for p in 0..partitions {
            parts.push(Arc::new(self.open_new_partition(name, p, id, &config)?));
        }
        let topic = Arc::new(Topic {
            name: name.to_string(),
            id,
            overrides: configs,
            config,
            partitions: parts,
        });
        {
            let mut c = self.catalog.write().unwrap_or_else(|e| e.into_inner());
            c.by_name.insert(name.to_string(), topic.clone());
            c.by_id.insert(id, topic.clone());
        }
        self.save_metadata()?;
        tracing::info!(topic = name, partitions, "created topic");
        Ok(topic)
    }

    fn open_new_partition(
        &self,
        topic: &str,
        p: i32,
        id: Uuid,
        config: &TopicConfig,
    ) -> io::Result<Partition> {
        let dir = self.find_or_place_partition_dir(topic, p);
        if dir.exists() {
            // Leftover from a topic of the same name whose deletion did not finish.
            fs::remove_dir_all(&dir)?;
        }
        let log = Log::open(
            &dir,
            config.clone(),
            LoadOptions {
                clean_shutdown: true,
                recovery_point: None,
                log_start_offset: None,
                now_ms: now_ms(),
            },
        )?;
        write_partition_metadata(&dir, id)?;
        Ok(Partition::new(topic, id, p, log, &self.config))
    }

    /// Deletes a topic and its data (in cluster mode: on every broker, through the quorum).
    /// Blocking.
    pub fn delete_topic(&self, name: &str) -> Result<Uuid, TopicError> {
        if !self.config.delete_topic_enable {
            return Err(TopicError::DeletionDisabled);
        }
        if let Some(c) = self.cluster().filter(|_| !is_internal_topic(name)) {
            return crate::controller::admin::delete_topic(c, name);
        }
        self.delete_topic_local(name)
    }

    /// Deletes this broker's copy of a topic and its data. Blocking.
    pub fn delete_topic_local(&self, name: &str) -> Result<Uuid, TopicError> {
        let _w = self
            .catalog_writes
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let topic = {
            let mut c = self.catalog.write().unwrap_or_else(|e| e.into_inner());
            let t = c.by_name.remove(name).ok_or(TopicError::Unknown)?;
            c.by_id.remove(&t.id);
            t
        };
        self.save_metadata()?;
        self.replication.forget_topic(&topic.name);
        // Fetchers drop its partitions.
        self.replication.follow_changed.notify_one();
        // A cleaner pass on one of its partitions stops first (Kafka's abortCleaning).
        self.log_cleaner.abort_topic(
            &topic.name,
            topic.partitions.len() as i32,
            || -> io::Result<()> {
                for p in &topic.partitions {
                    let dir = p.with_log(|l| l.dir().to_path_buf());
                    let doomed = dir.with_file_name(format!(
                        "{}.{}-delete",
                        dir.file_name()
                            .map(|f| f.to_string_lossy().to_string())
                            .unwrap_or_default(),
                        topic.id.simple()
                    ));
                    fs::rename(&dir, &doomed)?;
                    fs::remove_dir_all(&doomed)?;
                }
                Ok(())
            },
        )?;
        if let Some(t) = self.tiering() {
            if topic.config.remote_storage_enable {
                t.topic_deleted(&topic.name, topic.id, topic.partitions.len() as i32);
            }
        }
        tracing::info!(topic = name, "deleted topic");
        Ok(topic.id)
    }

    /// Grows a topic to `count` partitions. Blocking.
    pub fn create_partitions(
        &self,
        name: &str,
        count: i32,
        validate_only: bool,
    ) -> Result<(), TopicError> {
        if let Some(c) = self.cluster().filter(|_| !is_internal_topic(name)) {
            return crate::controller::admin::create_partitions(
                c,
                name,
                count,
                validate_only,
                None,
            );
        }
        let _w = self
            .catalog_writes
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let topic = self.topic(name).ok_or(TopicError::Unknown)?;
        let current = topic.partitions.len() as i32;
        if count < current {
            return Err(TopicError::InvalidPartitions(format!("Topic currently has {current} partitions, which is higher than the requested {count}.")));
        }
        if count == current {
            return Err(TopicError::InvalidPartitions(format!(
                "Topic already has {current} partitions."
            )));
        }
        if validate_only {
            return Ok(());
        }
        let mut parts = topic.partitions.clone();
        for p in current..count {
            parts.push(Arc::new(self.open_new_partition(
                name,
                p,
                topic.id,
                &topic.config,
            )?));
        }
        self.replace_topic(Topic {
            name: topic.name.clone(),
            id: topic.id,
            overrides: topic.overrides.clone(),
            config: topic.config.clone(),
            partitions: parts,
        });
        self.save_metadata()?;
        Ok(())
    }

    /// Replaces a topic's config overrides (validated by the caller; in cluster mode on every
    /// broker, through the quorum). Blocking.
    pub fn set_topic_configs(
        &self,
        name: &str,
        overrides: BTreeMap<String, String>,
    ) -> Result<(), TopicError> {
        if let Some(c) = self.cluster().filter(|_| !is_internal_topic(name)) {
            return crate::controller::admin::set_topic_configs(c, name, overrides);
        }
        self.set_topic_configs_local(name, overrides)
    }

    /// Replaces this broker's config overrides of a topic. Blocking.
    pub fn set_topic_configs_local(
        &self,
        name: &str,
        overrides: BTreeMap<String, String>,
    ) -> Result<(), TopicError> {
        let _w = self
            .catalog_writes
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let topic = self.topic(name).ok_or(TopicError::Unknown)?;
        let config = self.topic_config(&overrides);
        for p in &topic.partitions {
            p.with_log(|l| l.set_config(config.clone()));
        }
        self.replace_topic(Topic {
            name: topic.name.clone(),
            id: topic.id,
            overrides,
            config,
            partitions: topic.partitions.clone(),
        });
        self.save_metadata()?;
        Ok(())
    }

    fn replace_topic(&self, topic: Topic) {
        let topic = Arc::new(topic);
        let mut c = self.catalog.write().unwrap_or_else(|e| e.into_inner());
        c.by_id.insert(topic.id, topic.clone());
        c.by_name.insert(topic.name.clone(), topic);
    }

    /// Cluster mode's metadata quorum membership; `None` on a single node.
    pub fn cluster(&self) -> Option<&Arc<crate::controller::ClusterControl>> {
        self.cluster.get()
    }

    /// Enters cluster mode (once, at start-up, before serving clients).
    pub fn set_cluster(&self, control: Arc<crate::controller::ClusterControl>) {
        let _ = self.cluster.set(control);
    }

    /// The replication state: cluster view, leadership, ISR proposals.
    pub fn replication(&self) -> &crate::replication::ReplicaManager {
        &self.replication
    }

    /// Control plane: the registered brokers and their listeners. Metadata, DescribeCluster
    /// and FindCoordinator answer from this view once set, and fetchers connect through it.
    /// Blocking (updates every partition's ISR eligibility; a leader's high watermark may
    /// move once a fenced follower no longer holds it back).
    pub fn set_cluster_brokers(&self, brokers: Vec<crate::replication::ClusterBroker>) {
        self.replication.set_cluster(brokers);
        let eligible = self.isr_eligible();
        let now = now_ms();
        for p in self.all_partitions() {
            p.set_isr_eligible(eligible.clone(), now);
        }
    }

    /// The brokers whose replicas may join an ISR: those of the cluster view (the unfenced
    /// brokers), or every broker before there is one.
    fn isr_eligible(&self) -> Option<std::collections::BTreeSet<i32>> {
        self.replication
            .cluster()
            .map(|brokers| brokers.iter().map(|b| b.id).collect())
    }

    /// (id, host, port, rack) of broker `id` on the listener the request came in on (the
    /// listener of the same name on that broker): from the cluster view, or this broker's own
    /// listener on a single node.
    pub fn broker_endpoint(
        &self,
        id: i32,
        listener: usize,
    ) -> Option<(i32, String, u16, Option<String>)> {
        let l = self.config.listeners.get(listener)?;
        match self.replication.cluster() {
            Some(brokers) => {
                let b = brokers.iter().find(|b| b.id == id)?;
                let e = b.endpoint(&l.name)?;
                Some((id, e.host.clone(), e.port, b.rack.clone()))
            }
            None if id == self.config.node_id => Some((
                id,
                l.advertised_host.clone(),
                l.advertised_port,
                self.config.rack.clone(),
            )),
            None => None,
        }
    }

    /// (id, host, port, rack) of every broker reachable on the request's listener: the
    /// cluster view's brokers that have a listener of that name, or this broker alone.
    pub fn cluster_endpoints(&self, listener: usize) -> Vec<(i32, String, u16, Option<String>)> {
        let ids: Vec<i32> = match self.replication.cluster() {
            Some(brokers) => brokers.iter().map(|b| b.id).collect(),
            None => vec![self.config.node_id],
        };
        ids.into_iter()
            .filter_map(|id| self.broker_endpoint(id, listener))
            .collect()
    }

    /// Control plane: where this broker sends ISR changes as a partition leader.
    pub fn set_isr_change_sink(&self, sink: Arc<dyn crate::replication::IsrChangeSink>) {
        self.replication.set_sink(sink);
    }

    /// Control plane: applies partition leadership (Kafka's `ReplicaManager.applyDelta`).
    /// Creates the topic and partition logs that do not exist yet, then makes this broker
    /// leader or follower of each partition as Kafka's `Partition.makeLeader` /
    /// `makeFollower` do, and restarts the fetchers of partitions whose leader epoch changed.
    /// States for other partitions are applied even when one fails; the first error is
    /// returned. Blocking (creates directories, writes leader epoch checkpoints).
    pub fn apply_partition_states(
        &self,
        states: Vec<crate::replication::PartitionLeadership>,
    ) -> Result<(), crate::replication::ReplicationError> {
        use crate::replication::ReplicationError;
        let mut first_error = None;
        let mut by_topic: BTreeMap<String, Vec<crate::replication::PartitionLeadership>> =
            BTreeMap::new();
        for s in states {
            by_topic.entry(s.topic.clone()).or_default().push(s);
        }
        let lag_ms = self.config.replication.replica_lag_time_max.as_millis() as i64;
        let now = now_ms();
        let mut follow_changed = false;
        for (name, states) in by_topic {
            let topic_id = states[0].topic_id;
            // Out-of-range partitions are refused below; they do not size the topic.
            let count = states
                .iter()
                .filter(|s| (0..100_000).contains(&s.partition))
                .map(|s| s.partition + 1)
                .max()
                .unwrap_or(1);
            let topic = match self.ensure_topic(&name, topic_id, count) {
                Ok(t) => t,
                Err(e) => {
                    tracing::error!(topic = %name, error = %e, "cannot apply partition states");
                    first_error.get_or_insert(e);
                    continue;
                }
            };
            for state in states {
                if state.topic_id != topic.id {
                    first_error.get_or_insert(ReplicationError::TopicIdMismatch {
                        topic: name.clone(),
                        local: topic.id,
                        given: state.topic_id,
                    });
                    continue;
                }
                let invalid = if !(0..100_000).contains(&state.partition) {
                    Some("partition out of range")
                } else if state.leader_epoch < 0 || state.partition_epoch < 0 {
                    Some("negative epoch")
                } else if state.replicas.is_empty() {
                    Some("no replicas")
                } else if state.leader.is_some_and(|l| !state.replicas.contains(&l)) {
                    Some("the leader is not a replica")
                } else if state.isr.iter().any(|r| !state.replicas.contains(r)) {
                    Some("the ISR is not a subset of the replicas")
                } else {
                    None
                };
                if let Some(reason) = invalid {
                    first_error.get_or_insert(ReplicationError::InvalidState {
                        topic: name.clone(),
                        partition: state.partition,
                        reason,
                    });
                    continue;
                }
                let Some(p) = topic.partitions.get(state.partition as usize) else {
                    continue;
                };
                let was_follower = p.is_replicated() && p.role() == Role::Follower;
                match p.apply_state(&state, lag_ms, self.isr_eligible(), now) {
                    Ok(restart) => {
                        follow_changed |= restart || was_follower != (p.role() == Role::Follower);
                        self.follow_coordinator_partition(&state, p.role() == Role::Leader);
                        self.replication.record_leadership(state);
                    }
                    Err(e) => {
                        tracing::error!(topic = %name, partition = state.partition, error = %e, "cannot apply partition state");
                        first_error.get_or_insert(e.into());
                    }
                }
            }
        }
        if follow_changed {
            self.replication.follow_changed.notify_one();
        }
        match first_error {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }

    /// A coordinator partition's leadership changed: its coordinator loads it (this broker
    /// leads it) or unloads it (Kafka's `onElection` / `onResignation`). The coordinator
    /// epoch is the partition's leader epoch.
    fn follow_coordinator_partition(
        &self,
        state: &crate::replication::PartitionLeadership,
        leader: bool,
    ) {
        use crate::coordinator::{txn::TRANSACTION_STATE_TOPIC, OFFSETS_TOPIC};
        let (ownership, groups, txns) = match state.topic.as_str() {
            OFFSETS_TOPIC => (&self.group_ownership, self.groups.get(), None),
            TRANSACTION_STATE_TOPIC => (&self.txn_ownership, None, self.txns.get()),
            _ => return,
        };
        let p = state.partition;
        match (groups, txns, leader) {
            (Some(g), _, true) => g.on_election(p, state.leader_epoch),
            (Some(g), _, false) => g.on_resignation(p),
            (_, Some(t), true) => t.on_election(p, state.leader_epoch),
            (_, Some(t), false) => t.on_resignation(p),
            // The coordinator starts later: it loads what the ownership says it serves.
            (None, None, true) => {
                ownership.elect(p, state.leader_epoch, || {});
            }
            (None, None, false) => {
                ownership.resign(p, || {});
            }
        }
    }

    /// Replaces a coordinator topic this broker created on its own (empty, never replicated)
    /// with the control plane's: same name and configs, the cluster's id. Call with
    /// `catalog_writes` held. Blocking.
    fn adopt_internal_topic(
        &self,
        local: &Topic,
        id: Uuid,
        partitions: i32,
    ) -> Result<Arc<Topic>, crate::replication::ReplicationError> {
        let count = partitions.max(local.partitions.len() as i32);
        let mut parts = Vec::with_capacity(count as usize);
        for p in 0..count {
            // Reopens the (empty) directory fresh with the new topic id.
            parts.push(Arc::new(self.open_new_partition(
                &local.name,
                p,
                id,
                &local.config,
            )?));
        }
        let topic = Arc::new(Topic {
            name: local.name.clone(),
            id,
            overrides: local.overrides.clone(),
            config: local.config.clone(),
            partitions: parts,
        });
        {
            let mut c = self.catalog.write().unwrap_or_else(|e| e.into_inner());
            c.by_id.remove(&local.id);
            c.by_id.insert(id, topic.clone());
            c.by_name.insert(local.name.clone(), topic.clone());
        }
        self.save_metadata()?;
        tracing::info!(topic = %local.name, local_id = %local.id, %id, "adopted the control plane's id for an empty internal topic");
        Ok(topic)
    }

    /// The topic `name` with at least `partitions` partitions and id `id`, created or grown
    /// as needed (a replica learns topics from the control plane). Blocking.
    fn ensure_topic(
        &self,
        name: &str,
        id: Uuid,
        partitions: i32,
    ) -> Result<Arc<Topic>, crate::replication::ReplicationError> {
        let _w = self
            .catalog_writes
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(t) = self.topic(name) {
            if t.id != id && adoptable_internal_topic(&t) {
                return self.adopt_internal_topic(&t, id, partitions);
            }
            if t.id != id {
                return Err(crate::replication::ReplicationError::TopicIdMismatch {
                    topic: name.to_string(),
                    local: t.id,
                    given: id,
                });
            }
            if t.partitions.len() as i32 >= partitions {
                return Ok(t);
            }
            let mut parts = t.partitions.clone();
            for p in t.partitions.len() as i32..partitions {
                parts.push(Arc::new(self.open_new_partition(name, p, id, &t.config)?));
            }
            self.replace_topic(Topic {
                name: t.name.clone(),
                id,
                overrides: t.overrides.clone(),
                config: t.config.clone(),
                partitions: parts,
            });
            self.save_metadata()?;
            return self.topic(name).ok_or(TopicError::Unknown.into());
        }
        validate_topic_name(name)?;
        let config = self.topic_config(&BTreeMap::new());
        let mut parts = Vec::with_capacity(partitions as usize);
        for p in 0..partitions {
            parts.push(Arc::new(self.open_new_partition(name, p, id, &config)?));
        }
        let topic = Arc::new(Topic {
            name: name.to_string(),
            id,
            overrides: BTreeMap::new(),
            config,
            partitions: parts,
        });
        {
            let mut c = self.catalog.write().unwrap_or_else(|e| e.into_inner());
            c.by_name.insert(name.to_string(), topic.clone());
            c.by_id.insert(id, topic.clone());
        }
        self.save_metadata()?;
        tracing::info!(
            topic = name,
            partitions,
            "created topic from the control plane"
        );
        Ok(topic)
    }

    /// Allocates a producer id for an idempotent producer. Blocking (may persist a new block;
    /// in cluster mode, may commit a new block through the quorum).
    pub fn allocate_producer_id(&self) -> io::Result<i64> {
        if let Some(c) = self.cluster() {
            return crate::controller::admin::allocate_producer_id(c).map_err(io::Error::other);
        }
        let mut ids = self.producer_ids.lock().unwrap_or_else(|e| e.into_inner());
        if ids.next >= ids.block_end {
            ids.block_end = ids.next + PRODUCER_ID_BLOCK;
            let end = ids.block_end;
            drop(ids);
            self.save_metadata_with(end)?;
            ids = self.producer_ids.lock().unwrap_or_else(|e| e.into_inner());
        }
        let id = ids.next;
        ids.next += 1;
        Ok(id)
    }

    pub fn all_partitions(&self) -> Vec<Arc<Partition>> {
        self.topics()
            .iter()
            .flat_map(|t| t.partitions.iter().cloned())
            .collect()
    }

    pub fn partition_gauges(&self) -> Vec<PartitionGauges> {
        let mut out = Vec::new();
        for topic in self.topics() {
            for p in &topic.partitions {
                let mut gauges = p.gauges();
                if topic.config.cleanup_policy_compact {
                    gauges.cleaner_dirty_ratio = self.log_cleaner.dirty_ratio(&topic, p);
                }
                out.push(gauges);
            }
        }
        out
    }

    /// The log cleaner's shared state.
    pub fn log_cleaner(&self) -> &crate::log_cleaner::LogCleaner {
        &self.log_cleaner
    }

    /// Applies retention and expires idle producers on every partition. Blocking.
    pub fn enforce_retention(&self) {
        let now = now_ms();
        for p in self.all_partitions() {
            let deleted = p.with_log(|log| {
                log.expire_producers(now, self.config.producer_id_expiration_ms);
                log.apply_retention(now)
            });
            match deleted {
                Ok(0) => {}
                Ok(n) => {
                    self.metrics
                        .segments_deleted
                        .fetch_add(n as u64, Ordering::Relaxed);
                    tracing::info!(topic = %p.topic, partition = p.index, segments = n, "deleted segments past retention");
                }
                Err(e) => {
                    tracing::error!(topic = %p.topic, partition = p.index, error = %e, "retention failed")
                }
            }
        }
    }

    /// Flushes partitions whose flush.ms has elapsed. Blocking.
    pub fn flush_on_time(&self) {
        let now = now_ms();
        for p in self.all_partitions() {
            if let Err(e) = p.with_log(|log| log.maybe_flush_on_time(now)) {
                tracing::error!(topic = %p.topic, partition = p.index, error = %e, "flush failed");
            }
        }
    }

    /// Writes the per-dir recovery point, log start and high watermark checkpoints. Blocking.
    pub fn write_checkpoints(&self) -> io::Result<()> {
        // log dir -> (recovery points, log start offsets, high watermarks), one line each.
        type Lines = (Vec<String>, Vec<String>, Vec<String>);
        let mut per_dir: HashMap<PathBuf, Lines> = HashMap::new();
        for p in self.all_partitions() {
            let (dir, rp, lso, hw) = p.with_log(|l| {
                (
                    l.dir().parent().map(Path::to_path_buf).unwrap_or_default(),
                    l.recovery_point(),
                    l.log_start_offset(),
                    l.high_watermark(),
                )
            });
            let e = per_dir.entry(dir).or_default();
            e.0.push(format!("{} {} {rp}", p.topic, p.index));
            e.1.push(format!("{} {} {lso}", p.topic, p.index));
            e.2.push(format!("{} {} {hw}", p.topic, p.index));
        }
        for d in &self.config.log_dirs {
            let (rp, lso, hw) = per_dir.remove(d).unwrap_or_default();
            checkpoint::write(&d.join(RECOVERY_POINT_FILE), &rp)?;
            checkpoint::write(&d.join(LOG_START_FILE), &lso)?;
            checkpoint::write(&d.join(HIGH_WATERMARK_FILE), &hw)?;
        }
        Ok(())
    }

    /// Clean shutdown: flush every log, write producer snapshots and checkpoints, then the
    /// marker that lets the next start skip recovery. Blocking.
    pub fn close(&self) -> io::Result<()> {
        let now = now_ms();
        let mut result = Ok(());
        for p in self.all_partitions() {
            if let Err(e) = p.with_log(|l| l.close(now)) {
                tracing::error!(topic = %p.topic, partition = p.index, error = %e, "failed to close log");
                result = Err(e);
            }
        }
        result?;
        self.write_checkpoints()?;
        self.save_metadata()?;
        for d in &self.config.log_dirs {
            fs::write(d.join(CLEAN_SHUTDOWN_FILE), b"")?;
            fs::File::open(d)?.sync_all()?;
        }
        Ok(())
    }
}

/// Kafka's `meta.properties` in each log dir.
fn write_meta_properties(dir: &Path, cluster_id: &str, node_id: i32) -> io::Result<()> {
    let path = dir.join("meta.properties");
    let directory_id = match fs::read_to_string(&path) {
        Ok(t) => t
            .lines()
            .find_map(|l| l.strip_prefix("directory.id=").map(str::to_string)),
        Err(_) => None,
    }
    .unwrap_or_else(|| kafka_uuid_string(Uuid::new_v4()));
    let text = format!("#Written by Strata\ncluster.id={cluster_id}\ndirectory.id={directory_id}\nnode.id={node_id}\nversion=1\n");
    fs::write(path, text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_ids_print_like_kafka() {
        let id = Uuid::from_bytes([0; 16]);
        assert_eq!(kafka_uuid_string(id), "AAAAAAAAAAAAAAAAAAAAAA");
        assert_eq!(kafka_uuid_string(Uuid::new_v4()).len(), 22);
    }

    #[test]
    fn topic_names_follow_kafka_rules() {
        assert!(validate_topic_name("orders.v1_x-2").is_ok());
        assert!(validate_topic_name("").is_err());
        assert!(validate_topic_name("..").is_err());
        assert!(validate_topic_name("a b").is_err());
        assert!(validate_topic_name(&"x".repeat(250)).is_err());
    }
}
