//! One partition of a topic: its log behind a mutex, its replica set (leadership, ISR,
//! follower progress) and the published offsets and role that readers take without the lock.
//! Appends, reads of segment metadata, truncation and ISR changes take the log lock from
//! blocking threads; the `try_` forms (a small produce, a follower's append and the leader's
//! read for it) run on async workers and hand back what would wait on the disk or on a taken
//! lock. Long-polling fetches park on the waiters the partition wakes after each append or
//! high-watermark move.

use super::*;

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
    pub(super) checkpointed_high_watermark: AtomicI64,
    /// One of `ROLE_*`; written under both the replica set and the log lock.
    role: AtomicU8,
    /// Set once the control plane applied a state: the high watermark then follows the ISR.
    /// While unset this broker leads alone and the append path takes no other lock.
    replicated: AtomicBool,
    /// Leadership, ISR and follower progress (see [`super::replica_set`]). Lock order:
    /// this before the log, never the reverse.
    replica_set: Mutex<ReplicaSet>,
    /// Sizes of the committed ISR, the maximal ISR and the replica set, readable without the
    /// replica set lock (acks=all checks on the async workers).
    isr_len: AtomicUsize,
    maximal_isr_len: AtomicUsize,
    replica_count: AtomicUsize,
    /// Fetches and acks=all appends waiting for the next append or high watermark move, held
    /// weakly: a waiter that gives up leaves a dead entry, not a live one.
    waiters: Mutex<Vec<std::sync::Weak<Notify>>>,
    /// Set when the broker shuts down: appends still waiting for the followers fail rather
    /// than hold the shutdown (see [`Partition::release_replication_waiters`]).
    closing: std::sync::atomic::AtomicBool,
    high_watermark: AtomicI64,
    log_end_offset: AtomicI64,
    log_start_offset: AtomicI64,
    last_stable_offset: AtomicI64,
    /// The end of the newest sealed segment announced to the listeners as committed (below
    /// the last stable offset), for remote-storage topics.
    announced_sealed_end: AtomicI64,
    listeners: Arc<super::listener::Listeners>,
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
    pub log_start_offset: Offset,
    pub high_watermark: Offset,
    pub log_end_offset: Offset,
    /// No record at or above it belongs to an undecided transaction (<= high watermark).
    pub last_stable_offset: Offset,
}

/// Why a follower's fetch state could not be recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FollowerFetchError {
    NotLeaderOrFollower,
}

impl Partition {
    pub(super) fn new(
        topic: &str,
        topic_id: Uuid,
        index: i32,
        log: Log,
        config: &BrokerConfig,
        listeners: Arc<super::listener::Listeners>,
    ) -> Partition {
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
            // A single node leads its partitions; in cluster mode a partition is nobody's
            // until the control plane's state is applied (a new partition's log may first be
            // seeded from the bucket, and must not take appends before).
            role: AtomicU8::new(if config.cluster.is_some() {
                ROLE_NONE
            } else {
                ROLE_LEADER
            }),
            replicated: AtomicBool::new(false),
            replica_set: Mutex::new(ReplicaSet::sole_leader(
                local_id,
                LeaderEpoch(epoch),
                replica_lag_time_max_ms,
            )),
            isr_len: AtomicUsize::new(1),
            maximal_isr_len: AtomicUsize::new(1),
            replica_count: AtomicUsize::new(1),
            high_watermark: AtomicI64::new(log.high_watermark()),
            log_end_offset: AtomicI64::new(log.log_end_offset()),
            log_start_offset: AtomicI64::new(log.log_start_offset()),
            last_stable_offset: AtomicI64::new(log.last_stable_offset()),
            announced_sealed_end: AtomicI64::new(-1),
            log: Mutex::new(log),
            waiters: Mutex::new(Vec::new()),
            closing: std::sync::atomic::AtomicBool::new(false),
            listeners,
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
        self.announce_committed_segment(log);
    }

    /// Tiered storage uploads a sealed segment once all of it is below the last stable
    /// offset: tell the listeners when that first holds for a segment (after a roll, or when
    /// the high watermark or last stable offset passes the active segment's base).
    fn announce_committed_segment(&self, log: &Log) {
        if !log.config().remote_storage_enable {
            return;
        }
        let sealed_end = log.active_segment_base_offset();
        if sealed_end <= log.log_start_offset() || sealed_end > log.last_stable_offset() {
            return;
        }
        if self
            .announced_sealed_end
            .fetch_max(sealed_end, Ordering::AcqRel)
            < sealed_end
        {
            self.listeners
                .each(|l| l.segment_committed(&self.topic, self.index));
        }
    }

    pub fn leader_epoch(&self) -> LeaderEpoch {
        LeaderEpoch(self.leader_epoch.load(Ordering::Acquire))
    }

    pub fn offsets(&self) -> PartitionOffsets {
        PartitionOffsets {
            log_start_offset: Offset(self.log_start_offset.load(Ordering::Acquire)),
            high_watermark: Offset(self.high_watermark.load(Ordering::Acquire)),
            log_end_offset: Offset(self.log_end_offset.load(Ordering::Acquire)),
            last_stable_offset: Offset(self.last_stable_offset.load(Ordering::Acquire)),
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
    pub fn leader_and_epoch(&self) -> (Option<i32>, LeaderEpoch) {
        let leader = self.leader_id.load(Ordering::Acquire);
        ((leader >= 0).then_some(leader), self.leader_epoch())
    }

    /// A snapshot of the replica set (leadership, ISR, follower progress).
    pub fn replica_set(&self) -> ReplicaSet {
        self.lock_replicas().clone()
    }

    /// Whether `replica` is in the committed ISR.
    pub fn in_isr(&self, replica: i32) -> bool {
        self.lock_replicas().isr.contains(&replica)
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
        required_offset: Offset,
        min_insync_replicas: i32,
    ) -> Result<bool, kafka_protocol::ResponseError> {
        use kafka_protocol::ResponseError;
        if !self.is_leader() {
            return Err(ResponseError::NotLeaderOrFollower);
        }
        if self.offsets().high_watermark < required_offset {
            // A broker shutting down does not wait for followers that may never fetch again
            // (the append is not acknowledged; the client retries with the next leader).
            return if self.closing.load(Ordering::Acquire) {
                Err(ResponseError::NotLeaderOrFollower)
            } else {
                Ok(false)
            };
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
    pub fn write_txn_marker(&self, marker: &crate::log::TxnMarker) -> Result<Offset, AppendError> {
        let offset = {
            let mut log = self.lock();
            if !self.is_leader() {
                return Err(AppendError::NotLeaderOrFollower);
            }
            let offset = match log.append_txn_marker(marker, self.leader_epoch().0, now_ms()) {
                Ok(offset) => Offset(offset),
                Err(e) => {
                    // The marker may be in (its `.txnindex` entry failed) or a repair may have
                    // reopened the log.
                    self.after_leader_append(&mut log);
                    return Err(e);
                }
            };
            self.after_leader_append(&mut log);
            offset
        };
        self.after_append_unlocked();
        Ok(offset)
    }

    /// Appends a produce batch as leader. Blocking: call from a blocking thread.
    pub fn append(&self, records: &[u8]) -> Result<AppendInfo, AppendError> {
        self.append_from(crate::log::AppendOrigin::Client, records)
    }

    /// Appends a batch as leader for `origin` (a client, or this broker's coordinators).
    pub fn append_from(
        &self,
        origin: crate::log::AppendOrigin,
        records: &[u8],
    ) -> Result<AppendInfo, AppendError> {
        let info = {
            let mut log = self.lock();
            // Checked under the log lock: a role change takes it too.
            if !self.is_leader() {
                return Err(AppendError::NotLeaderOrFollower);
            }
            let info =
                match log.append_as_leader_from(origin, records, self.leader_epoch().0, now_ms()) {
                    Ok(info) => info,
                    Err(e) => {
                        // A storage error may have repaired (reopened) the log first.
                        self.publish(&log);
                        return Err(e);
                    }
                };
            self.after_leader_append(&mut log);
            info
        };
        if !info.duplicate {
            self.after_append_unlocked();
        }
        Ok(info)
    }

    /// [`Partition::append`] on an async worker, which must not wait on the disk or on a lock
    /// held across it: `None`, with nothing appended, when the log lock is taken or the append
    /// would block ([`Log::try_append_as_leader`]); the caller then appends with
    /// [`Partition::append`] on the blocking pool.
    pub fn try_append(self: &Arc<Self>, records: &[u8]) -> Option<Result<AppendInfo, AppendError>> {
        let info = {
            let mut log = try_lock(&self.log)?;
            if !self.is_leader() {
                return Some(Err(AppendError::NotLeaderOrFollower));
            }
            let info = match log.try_append_as_leader(records, self.leader_epoch().0, now_ms()) {
                Ok(None) => return None,
                Ok(Some(info)) => info,
                Err(e) => return Some(Err(e)),
            };
            self.after_leader_append(&mut log);
            info
        };
        if !info.duplicate {
            if self.is_replicated() {
                self.increment_high_watermark_without_waiting(now_ms());
            }
            self.wake_waiters();
        }
        Some(Ok(info))
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
        self.increment_high_watermark(self.lock_replicas(), || Some(self.lock()), now)
            .unwrap_or(false)
    }

    /// [`Partition::maybe_increment_high_watermark`] without waiting for a lock: `None` when
    /// the replica set or the log is locked by another thread.
    fn try_increment_high_watermark(&self, now: i64) -> Option<bool> {
        self.increment_high_watermark(try_lock(&self.replica_set)?, || try_lock(&self.log), now)
    }

    /// [`Partition::maybe_increment_high_watermark`] from an async worker: where another
    /// thread holds a lock it needs, it moves on a blocking thread.
    fn increment_high_watermark_without_waiting(self: &Arc<Self>, now: i64) {
        if self.try_increment_high_watermark(now).is_none() {
            let partition = self.clone();
            tokio::task::spawn_blocking(move || partition.maybe_increment_high_watermark(now_ms()));
        }
    }

    fn increment_high_watermark<'a>(
        &'a self,
        set: std::sync::MutexGuard<'a, ReplicaSet>,
        lock_log: impl FnOnce() -> Option<std::sync::MutexGuard<'a, Log>>,
        now: i64,
    ) -> Option<bool> {
        if !set.is_leader() {
            return Some(false);
        }
        let mut log = lock_log()?;
        let candidate = set.high_watermark(
            Offset(log.log_end_offset()),
            now,
            log.config().min_insync_replicas,
        );
        drop(set);
        let moved = candidate.is_some_and(|hw| hw > Offset(log.high_watermark()));
        if let Some(hw) = candidate.filter(|_| moved) {
            log.update_high_watermark(hw.0);
            self.publish(&log);
        }
        drop(log);
        if moved {
            self.wake_waiters();
        }
        Some(moved)
    }

    /// Records a follower's fetch at `fetch_offset` (Kafka's `updateFollowerFetchState`),
    /// moves the high watermark, and returns an ISR expansion to propose, if any. Blocking.
    pub fn update_follower_fetch_state(
        &self,
        replica_id: i32,
        fetch_offset: Offset,
        follower_log_start_offset: Offset,
        leader_log_end_offset: Offset,
        now: i64,
    ) -> Result<Option<super::leadership::AlterPartitionRequest>, FollowerFetchError> {
        let (moved_end, expansion) = self.record_follower_fetch(
            self.lock_replicas(),
            replica_id,
            fetch_offset,
            follower_log_start_offset,
            leader_log_end_offset,
            now,
        )?;
        if moved_end {
            self.maybe_increment_high_watermark(now);
        }
        Ok(expansion)
    }

    /// [`Partition::update_follower_fetch_state`] where the caller must not wait on a lock (an
    /// async worker): `None`, with nothing changed, when another thread holds the replica
    /// set. A high watermark move that finds the log locked goes to a blocking thread.
    pub fn try_update_follower_fetch_state(
        self: &Arc<Self>,
        replica_id: i32,
        fetch_offset: Offset,
        follower_log_start_offset: Offset,
        leader_log_end_offset: Offset,
        now: i64,
    ) -> Option<Result<Option<super::leadership::AlterPartitionRequest>, FollowerFetchError>> {
        let recorded = self.record_follower_fetch(
            try_lock(&self.replica_set)?,
            replica_id,
            fetch_offset,
            follower_log_start_offset,
            leader_log_end_offset,
            now,
        );
        Some(recorded.map(|(moved_end, expansion)| {
            if moved_end {
                self.increment_high_watermark_without_waiting(now);
            }
            expansion
        }))
    }

    /// The part of a follower fetch under the replica set lock: its progress, and the ISR
    /// expansion it earns. Also whether its log end moved (the high watermark may follow).
    fn record_follower_fetch(
        &self,
        mut set: std::sync::MutexGuard<'_, ReplicaSet>,
        replica_id: i32,
        fetch_offset: Offset,
        follower_log_start_offset: Offset,
        leader_log_end_offset: Offset,
        now: i64,
    ) -> Result<(bool, Option<super::leadership::AlterPartitionRequest>), FollowerFetchError> {
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
            super::leadership::AlterPartitionRequest {
                topic_id: self.topic_id,
                partition: self.index,
                leader_epoch: set.leader_epoch,
                new_isr,
                partition_epoch: set.partition_epoch,
            }
        });
        Ok((before != fetch_offset, expansion))
    }

    /// The ISR shrink to propose when followers lag (Kafka's `maybeShrinkIsr`).
    pub fn maybe_shrink_isr(&self, now: i64) -> Option<super::leadership::AlterPartitionRequest> {
        if !self.is_replicated() {
            return None;
        }
        let mut set = self.lock_replicas();
        let new_isr = set.shrink(self.offsets().log_end_offset, now)?;
        tracing::info!(topic = %self.topic, partition = self.index, isr = ?set.isr, new_isr = ?new_isr, "shrinking ISR: followers out of sync");
        set.pending_isr = Some(new_isr.clone());
        self.publish_isr(&set);
        Some(super::leadership::AlterPartitionRequest {
            topic_id: self.topic_id,
            partition: self.index,
            leader_epoch: set.leader_epoch,
            new_isr,
            partition_epoch: set.partition_epoch,
        })
    }

    /// Sets which replicas' brokers are fenced or unregistered (see
    /// [`super::replica_set::ReplicaSet::ineligible`]); a leader may then move its high
    /// watermark past one of them. Blocking.
    pub fn set_ineligible_replicas(&self, ineligible: std::collections::BTreeSet<i32>, now: i64) {
        {
            let mut set = self.lock_replicas();
            if set.ineligible == ineligible {
                return;
            }
            set.ineligible = ineligible;
        }
        self.maybe_increment_high_watermark(now);
    }

    /// The controller committed an ISR change. Blocking.
    pub fn isr_change_committed(&self, committed: &super::leadership::LeaderAndIsr, now: i64) {
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
    pub fn isr_change_failed(&self, request: &super::leadership::AlterPartitionRequest) {
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
        state: &super::leadership::PartitionLeadership,
        replica_lag_time_max_ms: i64,
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
                log.assign_epoch_start_offset(state.leader_epoch.0, leo)?;
                set.leader_epoch = state.leader_epoch;
                set.start_leader_epoch(was_leader, Offset(leo), now);
                tracing::info!(topic = %self.topic, partition = self.index, leader_epoch = %state.leader_epoch, start_offset = leo, high_watermark = log.high_watermark(), isr = ?state.isr, "became leader");
            } else {
                set.sync_followers();
            }
        } else {
            if new_epoch {
                tracing::info!(topic = %self.topic, partition = self.index, leader = ?state.leader, leader_epoch = %state.leader_epoch, "became follower");
            }
            set.leader_epoch = state.leader_epoch.max(set.leader_epoch);
            set.leader_epoch_start_offset = None;
            set.followers.clear();
        }
        self.publish_isr(&set);
        self.leader_epoch
            .store(set.leader_epoch.0, Ordering::Release);
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

    /// Kafka's StopReplica with `deletePartition`: once this broker is no longer a replica
    /// (a reassignment moved the partition away), its copy goes. The log restarts empty at
    /// offset 0, so a later reassignment back here re-fetches everything from the leader.
    /// Does nothing while this broker is a replica or the log is already empty. Returns
    /// whether data was dropped. Blocking.
    pub fn delete_local_replica(&self) -> io::Result<bool> {
        let _set = self.lock_replicas();
        let mut log = self.lock();
        if self.role() != Role::None || (log.log_start_offset() == 0 && log.log_end_offset() == 0) {
            return Ok(false);
        }
        log.truncate_fully_and_start_at(0, now_ms())?;
        tracing::info!(topic = %self.topic, partition = self.index, "deleted the local copy of a partition this broker no longer replicates");
        self.publish(&log);
        Ok(true)
    }

    /// Appends batches fetched from the leader (offsets and epochs kept) and takes the
    /// leader's high watermark and log start offset, as Kafka's follower does after each
    /// fetch. Refused unless this broker follows at `leader_epoch`. Blocking.
    pub fn append_as_follower(
        &self,
        leader_epoch: LeaderEpoch,
        records: &[u8],
        leader_high_watermark: Offset,
        leader_log_start_offset: Offset,
    ) -> Result<usize, AppendError> {
        let (leader_high_watermark, leader_log_start_offset) =
            (leader_high_watermark.0, leader_log_start_offset.0);
        let appended = {
            let mut log = self.lock();
            let appended = self.append_following(&mut log, leader_epoch, |log| {
                log.append_as_follower(records, now_ms())
            })?;
            follow_high_watermark(&mut log, leader_high_watermark);
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

    /// [`Partition::append_as_follower`] where the caller must not wait on the disk or on a
    /// lock (an async worker). Appends the batches that only write the page cache and returns
    /// where in `records` the rest begins, for [`Partition::append_as_follower`] where blocking
    /// is allowed: a batch that rolls, flushes, starts an epoch or aborts a transaction, an
    /// offline log, a log locked by another thread (`Some(0)`, nothing changed), or the
    /// leader's log start moving (`Some(records.len())`: only that is left). `None` when
    /// everything, the leader's high watermark included, was taken.
    pub fn try_append_as_follower(
        &self,
        leader_epoch: LeaderEpoch,
        records: &[u8],
        leader_high_watermark: Offset,
        leader_log_start_offset: Offset,
    ) -> Result<Option<usize>, AppendError> {
        let rest = {
            let Some(mut log) = try_lock(&self.log) else {
                return Ok(Some(0));
            };
            let appended = self.append_following(&mut log, leader_epoch, |log| {
                log.try_append_as_follower(records, now_ms())
            })?;
            let rest = appended.rest.or_else(|| {
                (leader_log_start_offset.0 > log.log_start_offset()).then_some(records.len())
            });
            if rest.is_none() {
                follow_high_watermark(&mut log, leader_high_watermark.0);
            }
            self.publish(&log);
            rest
        };
        self.wake_waiters();
        Ok(rest)
    }

    /// A follower's append under the log lock: refused unless this broker follows at
    /// `leader_epoch`. A failed append still publishes the log: whole batches before the
    /// failed one are in (each append is all or nothing), or a repair reopened it.
    fn append_following<T>(
        &self,
        log: &mut Log,
        leader_epoch: LeaderEpoch,
        append: impl FnOnce(&mut Log) -> Result<T, AppendError>,
    ) -> Result<T, AppendError> {
        if self.role() != Role::Follower || self.leader_epoch() != leader_epoch {
            return Err(AppendError::NotLeaderOrFollower);
        }
        let appended = append(log);
        if appended.is_err() {
            self.publish(log);
        }
        appended
    }

    /// Truncates a follower's log to `offset` (divergence after a leader change). Blocking.
    pub fn truncate_to(
        &self,
        leader_epoch: LeaderEpoch,
        offset: Offset,
    ) -> Result<bool, AppendError> {
        let mut log = self.lock();
        if self.role() != Role::Follower || self.leader_epoch() != leader_epoch {
            return Err(AppendError::NotLeaderOrFollower);
        }
        let removed = log.truncate_to(offset.0, now_ms())?;
        if removed {
            tracing::info!(topic = %self.topic, partition = self.index, %offset, log_end_offset = log.log_end_offset(), "truncated divergent log suffix");
        }
        self.publish(&log);
        Ok(removed)
    }

    /// Empties a follower's log and restarts it at `offset` (the leader's log start is past
    /// this follower's end). Blocking.
    pub fn truncate_fully_and_start_at(
        &self,
        leader_epoch: LeaderEpoch,
        offset: Offset,
    ) -> Result<(), AppendError> {
        let mut log = self.lock();
        if self.role() != Role::Follower || self.leader_epoch() != leader_epoch {
            return Err(AppendError::NotLeaderOrFollower);
        }
        log.truncate_fully_and_start_at(offset.0, now_ms())?;
        tracing::info!(topic = %self.topic, partition = self.index, %offset, "restarted follower log at the leader's log start");
        self.publish(&log);
        Ok(())
    }

    /// Restarts a follower's log at the leader's local log start of a tiered partition, with
    /// leader epochs and producer state from remote storage (see [`Log::start_at_tiered`]).
    /// Refused unless this broker follows at `leader_epoch`. Blocking.
    pub fn start_at_tiered(
        &self,
        leader_epoch: LeaderEpoch,
        log_start_offset: Offset,
        local_start_offset: Offset,
        epochs: &[(i32, i64)],
        producer_snapshot: Option<&[u8]>,
    ) -> Result<(), AppendError> {
        let mut log = self.lock();
        if self.role() != Role::Follower || self.leader_epoch() != leader_epoch {
            return Err(AppendError::NotLeaderOrFollower);
        }
        log.start_at_tiered(
            log_start_offset.0,
            local_start_offset.0,
            epochs,
            producer_snapshot,
            now_ms(),
        )?;
        tracing::info!(topic = %self.topic, partition = self.index, %log_start_offset, %local_start_offset, "restarted follower log at the leader's local log start (the rest is in remote storage)");
        self.publish(&log);
        Ok(())
    }

    /// The partition's directory. Blocking.
    pub fn dir(&self) -> PathBuf {
        self.lock().dir().to_path_buf()
    }

    /// Whether a seed from the bucket may start (see [`Log::wants_seed`]). Blocking.
    pub fn wants_seed(&self) -> bool {
        self.lock().wants_seed()
    }

    /// Restarts an empty local log at the remote log's end before this broker leads the
    /// partition (see [`Log::seed_from_remote`]). False when the log is no longer empty or
    /// this broker already leads. Blocking.
    pub fn seed_from_remote(&self, seed: &crate::log::LogSeed) -> io::Result<bool> {
        let mut log = self.lock();
        if (self.is_replicated() && self.is_leader()) || !log.wants_seed() {
            return Ok(false);
        }
        log.seed_from_remote(seed, now_ms())?;
        tracing::info!(topic = %self.topic, partition = self.index, log_start_offset = seed.log_start_offset, local_start_offset = seed.local_start_offset, segments = seed.segments.is_some(), "seeded an empty local log from the bucket");
        self.publish(&log);
        Ok(true)
    }

    /// Finds the file range to serve for a fetch. Blocking (may read segment headers).
    pub fn read(
        &self,
        offset: Offset,
        max_bytes: usize,
        max_offset: Offset,
        min_one: bool,
    ) -> Result<Option<FileSlice>, ReadError> {
        let mut log = self.lock();
        if log.is_offline() && log.ensure_online(now_ms()).is_ok() {
            self.publish(&log);
        }
        log.read(offset.0, max_bytes, max_offset.0, min_one)
    }

    /// [`Partition::read`] where the caller must not wait on a lock or a repair (an async
    /// worker): `None` when another thread holds the log or the log is offline. The read
    /// itself takes batch headers from the page cache, where the log end's are.
    pub fn try_read(
        &self,
        offset: Offset,
        max_bytes: usize,
        max_offset: Offset,
        min_one: bool,
    ) -> Option<Result<Option<FileSlice>, ReadError>> {
        let log = try_lock(&self.log)?;
        if log.is_offline() {
            return None;
        }
        Some(log.read(offset.0, max_bytes, max_offset.0, min_one))
    }

    /// Aborted transactions overlapping `[from, upper)` (for read_committed fetches).
    pub fn aborted_transactions(
        &self,
        from: Offset,
        upper: Offset,
    ) -> Vec<crate::log::txn_index::AbortedTxn> {
        self.lock().aborted_transactions(from.0, upper.0)
    }

    /// Whether the producer has a transaction open on this partition (KIP-890 verification).
    pub fn has_ongoing_transaction(&self, producer_id: ProducerId, producer_epoch: i16) -> bool {
        self.lock()
            .has_ongoing_transaction(producer_id.0, producer_epoch)
    }

    /// The largest epoch at or below `epoch` and the end offset of that epoch (Kafka's
    /// `endOffsetForEpoch`).
    pub fn end_offset_for_epoch(&self, epoch: LeaderEpoch) -> (LeaderEpoch, Offset) {
        let (epoch, end_offset) = self.lock().end_offset_for_epoch(epoch.0);
        (LeaderEpoch(epoch), Offset(end_offset))
    }

    /// The base offset of the first local segment.
    pub fn local_start_offset(&self) -> Offset {
        Offset(self.lock().local_start_offset())
    }

    /// The end of what remote storage holds (-1 until a manifest is read).
    pub fn remote_end_offset(&self) -> Offset {
        Offset(self.lock().remote_end_offset())
    }

    /// ListOffsets' EARLIEST (-2): the log start offset, with the epoch of the earliest
    /// leader epoch entry when that starts at or before it (Kafka's rule; none otherwise).
    pub fn earliest_offset(&self) -> (Offset, Option<LeaderEpoch>) {
        earliest_in(&self.lock())
    }

    /// ListOffsets' EARLIEST_LOCAL (-4, KIP-405): the first local offset and its epoch.
    pub fn earliest_local_offset(&self) -> (Offset, Option<LeaderEpoch>) {
        let log = self.lock();
        let start = log.local_start_offset();
        (Offset(start), log.epoch_for_offset(start).map(LeaderEpoch))
    }

    /// ListOffsets' LATEST_TIERED (-5, KIP-1005): the highest offset remote storage holds
    /// and its epoch; -1 when it holds nothing or the topic is not tiered.
    pub fn latest_tiered_offset(&self) -> (Offset, Option<LeaderEpoch>) {
        let log = self.lock();
        match log.remote_end_offset() {
            end if end > 0 && log.config().remote_storage_enable => (
                Offset(end - 1),
                log.epoch_for_offset(end - 1).map(LeaderEpoch),
            ),
            _ => (Offset(-1), None),
        }
    }

    /// ListOffsets' EARLIEST_PENDING_UPLOAD (-6, KIP-1023): the first offset not yet in
    /// remote storage. As in Kafka: -1 for a topic that is not tiered, and when nothing is
    /// known to be uploaded while the local log no longer starts at the log start (the
    /// remote part is not known yet); the earliest offset when nothing was uploaded.
    pub fn earliest_pending_upload_offset(&self) -> (Offset, Option<LeaderEpoch>) {
        let log = self.lock();
        if !log.config().remote_storage_enable {
            return (Offset(-1), None);
        }
        let remote_end = log.remote_end_offset();
        if remote_end <= 0 {
            return if log.local_start_offset() == log.log_start_offset() {
                earliest_in(&log)
            } else {
                (Offset(-1), None)
            };
        }
        let offset = remote_end.max(log.log_start_offset());
        (
            Offset(offset),
            log.epoch_for_offset(offset).map(LeaderEpoch),
        )
    }

    /// The record with the largest timestamp among the local segments.
    pub fn max_timestamp_offset(&self) -> io::Result<Option<crate::log::TimestampAndOffset>> {
        self.lock().max_timestamp_offset()
    }

    /// Moves the log start offset up to `offset` (DeleteRecords); returns the new low
    /// watermark. Blocking.
    pub fn delete_records_before(&self, offset: Offset) -> io::Result<Offset> {
        self.with_log(|l| l.delete_records_before(offset.0))
            .map(Offset)
    }

    /// The log dir holding this partition and the bytes of its local segments.
    pub fn log_dir_and_size(&self) -> (PathBuf, u64) {
        let log = self.lock();
        (
            log.dir()
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_default(),
            log.size_bytes(),
        )
    }

    /// The partition's topic config (as its log applies it).
    pub fn config(&self) -> TopicConfig {
        self.lock().config().clone()
    }

    /// Runs `f` on the log under its lock and publishes the offsets after. The broker's own
    /// modules (and tests) reach the log this way; the services above it use the named
    /// methods (here, in [`super::fetch`], [`super::append`] and [`super::tiered`]).
    pub fn with_log<R>(&self, f: impl FnOnce(&mut Log) -> R) -> R {
        let mut log = self.lock();
        let r = f(&mut log);
        self.publish(&log);
        r
    }

    /// Shutdown: appends waiting for the followers to reach them (acks=all produces,
    /// coordinator writes, transaction markers) fail with NOT_LEADER_OR_FOLLOWER now, and
    /// later ones at once, unless the high watermark already covers them.
    pub fn release_replication_waiters(&self) {
        self.closing.store(true, Ordering::Release);
        self.wake_waiters();
    }

    /// Registers a fetch waiting for data, or an append waiting for replication; it is woken
    /// (once) by the next append or high watermark move. The partition holds it weakly: a
    /// fetch that watches several partitions and is answered by one (or times out) drops its
    /// `Notify`, and the next registration here removes the dead entry. (Held strongly, such
    /// an entry stayed in every quiet partition the fetch had watched, one per fetch, until
    /// the partition's next append.)
    pub fn add_waiter(&self, n: &Arc<Notify>) {
        if let Ok(mut w) = self.waiters.lock() {
            w.retain(|x| x.strong_count() > 0);
            w.push(Arc::downgrade(n));
        }
    }

    /// The registered waiters, dead entries included (what registrations and wakes bound).
    pub fn waiter_count(&self) -> usize {
        self.waiters.lock().map_or(0, |w| w.len())
    }

    fn wake_waiters(&self) {
        let waiters = match self.waiters.lock() {
            Ok(mut w) => std::mem::take(&mut *w),
            Err(_) => return,
        };
        for w in waiters.iter().filter_map(std::sync::Weak::upgrade) {
            w.notify_one();
        }
    }

    pub(super) fn gauges(&self) -> PartitionGauges {
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

/// Reads for the services above the broker (coordinators, fetchers, handlers), each under
/// one short hold of the log lock.
impl Partition {
    /// The topic's min.insync.replicas, as the log applies it.
    pub fn min_insync_replicas(&self) -> i32 {
        self.lock().config().min_insync_replicas
    }

    /// The most a batch may decompress to, as the log applies it (replays of internal topics
    /// decode under this bound).
    pub fn max_decompressed_batch_bytes(&self) -> u64 {
        self.lock().config().max_decompressed_batch_bytes
    }

    /// The epoch of the last batch in the log, if any (a follower's `last_fetched_epoch`).
    pub fn latest_epoch(&self) -> Option<i32> {
        self.lock().latest_epoch()
    }

    /// What a follower needs to truncate to a diverging epoch (KIP-320), read at one instant:
    /// its log end offset, its high watermark, and [`Partition::end_offset_for_epoch`] of
    /// `epoch`.
    pub fn divergence_view(&self, epoch: i32) -> (i64, i64, (i32, i64)) {
        let log = self.lock();
        (
            log.log_end_offset(),
            log.high_watermark(),
            log.end_offset_for_epoch(epoch),
        )
    }

    /// The first offset with a timestamp at or after `timestamp` in the local log, with the
    /// (log start, local log start) read at the same instant: below the local start the answer
    /// may be in remote storage.
    pub fn offset_for_timestamp(
        &self,
        timestamp: i64,
    ) -> (
        (i64, i64),
        io::Result<Option<crate::log::TimestampAndOffset>>,
    ) {
        let log = self.lock();
        let range = (log.log_start_offset(), log.local_start_offset());
        (range, log.offset_for_timestamp(timestamp))
    }
}

impl crate::log::cleaner::LogHandle for Partition {
    fn with_log<R>(&self, f: impl FnOnce(&mut Log) -> R) -> R {
        Partition::with_log(self, f)
    }
}

fn earliest_in(log: &Log) -> (Offset, Option<LeaderEpoch>) {
    let start = log.log_start_offset();
    let epoch = log
        .earliest_epoch()
        .filter(|&(_, epoch_start)| epoch_start <= start)
        .map(|(epoch, _)| LeaderEpoch(epoch));
    (Offset(start), epoch)
}

/// A lock without waiting for it (`None` when another thread holds it); a poisoned lock is
/// taken as [`Partition::lock`] takes it.
/// A follower takes the leader's high watermark, up to its own log end.
fn follow_high_watermark(log: &mut Log, leader_high_watermark: i64) {
    let hw = leader_high_watermark.min(log.log_end_offset());
    if hw > log.high_watermark() {
        log.update_high_watermark(hw);
    }
}

fn try_lock<T>(m: &std::sync::Mutex<T>) -> Option<std::sync::MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}
