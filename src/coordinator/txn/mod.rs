//! The transaction coordinator (Kafka's `TransactionCoordinator` and `TransactionStateManager`)
//! and its durable state in `__transaction_state`.
//!
//! Concurrency: every transactional id lives behind one std mutex, held only for in-memory
//! checks and state changes, never across I/O. A transition is prepared under the lock (the id
//! is then *pending*: other requests for it get CONCURRENT_TRANSACTIONS), persisted without the
//! lock, then applied. Marker writing for one id is claimed by one thread at a time
//! (`markers_busy`), either the EndTxn request or the timer.
//!
//! Durability and crash consistency: a transition is acknowledged only after its record is in
//! `__transaction_state` (the partition's high watermark covers it). EndTxn persists
//! PrepareCommit/PrepareAbort, writes a COMMIT/ABORT marker to every partition of the
//! transaction, then persists CompleteCommit/CompleteAbort. On start the topic is replayed (the
//! last record per transactional id wins, a null value deletes it); a transaction found in a
//! Prepare state has its markers written again by the timer, and an Ongoing one times out as
//! usual (its start time is persisted).
//!
//! Leadership ([`super::ownership`]): in a cluster this broker coordinates only the
//! transactional ids of the `__transaction_state` partitions it leads, loaded on the timer
//! when it becomes leader (COORDINATOR_LOAD_IN_PROGRESS meanwhile; the coordinator epoch is
//! the leader epoch) and dropped when it stops (NOT_COORDINATOR, also for a write that
//! finishes after the change). The new coordinator finishes a loaded Prepare transaction's
//! markers and lets an Ongoing one end or time out, as Kafka does. Markers for partitions
//! led by other brokers are sent to them as WriteTxnMarkers (see [`state_log`]).
//!
//! Retries: a marker that cannot be written is retried by the timer every
//! [`MARKER_RETRY`]; a partition that no longer exists is skipped, as Kafka does.

pub mod metadata;
pub mod state_log;
pub mod transaction_log;

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::ResponseError;

use metadata::{TxnMetadata, TxnState, NO_PRODUCER_ID};

use super::ownership::{Ownership, Transition};
use super::LogWriteError;
use crate::clock::Clock;

pub const TRANSACTION_STATE_TOPIC: &str = "__transaction_state";

/// How long a failed marker write waits before the timer tries again.
pub const MARKER_RETRY: Duration = Duration::from_millis(500);

/// Where the coordinator keeps its records: the broker implements it on top of the
/// `__transaction_state` partitions. Blocking.
pub trait TransactionLog: Send + Sync {
    /// Appends one record to the transactional id's partition, durably enough to acknowledge.
    fn append(
        &self,
        transactional_id: &str,
        key: Bytes,
        value: Option<Bytes>,
    ) -> Result<(), LogWriteError>;
    /// Every record of the topic, in log order per partition.
    fn replay(&self) -> io::Result<Vec<(Bytes, Option<Bytes>)>>;
    /// The records of one partition (a superset is fine: the coordinator keeps only the ids
    /// of `partition`).
    fn replay_partition(&self, partition: i32) -> io::Result<Vec<(Bytes, Option<Bytes>)>> {
        let _ = partition;
        self.replay()
    }
    /// The `__transaction_state` partition of a transactional id.
    fn partition_for(&self, transactional_id: &str) -> i32 {
        let _ = transactional_id;
        0
    }
    /// The coordinator epoch for the id's partition (the partition's leader epoch).
    fn coordinator_epoch(&self, transactional_id: &str) -> i32;
}

/// Why a marker was not written.
#[derive(Debug, thiserror::Error)]
pub enum MarkerError {
    /// The partition no longer exists (its topic was deleted): nothing to mark.
    #[error("unknown topic partition")]
    UnknownPartition,
    #[error("{0}")]
    Failed(String),
}

/// The rest of the broker, as the coordinator sees it. Blocking.
pub trait Participants: Send + Sync {
    fn allocate_producer_id(&self) -> io::Result<i64>;
    /// Writes a COMMIT or ABORT control batch for the producer to one partition.
    fn write_marker(
        &self,
        topic: &str,
        partition: i32,
        marker: &crate::log::TxnMarker,
    ) -> Result<(), MarkerError>;
}

/// Kafka's transaction settings.
#[derive(Debug, Clone)]
pub struct TxnConfig {
    /// transaction.max.timeout.ms
    pub max_timeout_ms: i32,
    /// transactional.id.expiration.ms
    pub transactional_id_expiration_ms: i64,
    /// transaction.abort.timed.out.transaction.cleanup.interval.ms
    pub abort_timed_out_interval: Duration,
    /// transaction.remove.expired.transaction.cleanup.interval.ms
    pub remove_expired_interval: Duration,
}

/// One transactional id: its metadata and what is in flight for it.
struct Entry {
    meta: TxnMetadata,
    /// The state a transition in flight moves to (Kafka's `pendingState`).
    pending: Option<TxnState>,
    /// A fence bumped the epoch in memory but could not persist it.
    failed_fence: bool,
    markers_busy: bool,
    marker_retry_at: Option<Instant>,
}

impl Entry {
    fn new(meta: TxnMetadata) -> Self {
        Entry {
            meta,
            pending: None,
            failed_fence: false,
            markers_busy: false,
            marker_retry_at: None,
        }
    }
}

/// DescribeTransactions' and ListTransactions' view of a transactional id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnDescription {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub state: &'static str,
    pub timeout_ms: i32,
    pub start_ms: i64,
    pub partitions: Vec<(String, i32)>,
}

pub struct TransactionCoordinator {
    txns: Mutex<HashMap<String, Entry>>,
    config: TxnConfig,
    log: Arc<dyn TransactionLog>,
    participants: Arc<dyn Participants>,
    last_abort_scan: Mutex<Instant>,
    last_expire_scan: Mutex<Instant>,
    /// The `__transaction_state` partitions this broker serves.
    ownership: Arc<Ownership>,
    /// Transaction timeouts and transactional-id expiry are measured on it.
    clock: Clock,
}

fn illegal(e: metadata::IllegalTransition) -> ResponseError {
    tracing::error!(error = %e, "transaction coordinator bug");
    ResponseError::UnknownServerError
}

/// The error a produce request of `version` gets for a failed KIP-890 verification (Kafka's
/// `AddPartitionsToTxnManager` and `ReplicaManager` translations of the coordinator's answer).
pub fn produce_error(e: ResponseError, produce_version: i16) -> ResponseError {
    match e {
        ResponseError::ProducerFenced => ResponseError::InvalidProducerEpoch,
        ResponseError::TransactionAbortable if produce_version <= 10 => {
            ResponseError::InvalidTxnState
        }
        ResponseError::ConcurrentTransactions
        | ResponseError::NetworkException
        | ResponseError::CoordinatorLoadInProgress
        | ResponseError::CoordinatorNotAvailable
        | ResponseError::NotCoordinator => ResponseError::NotEnoughReplicas,
        other => other,
    }
}

/// How an EndTxn's producer id and epoch relate to the transaction (Kafka's checks in
/// `endTransaction`). With TV2 the epoch is bumped at every end, so the same epoch in a
/// completed state is a new transaction's end, and the epoch just below it is a retry.
struct EndCheck {
    valid_epoch: bool,
    retry_on_overflow: bool,
    is_retry: bool,
}

impl EndCheck {
    fn of(
        m: &TxnMetadata,
        producer_id: i64,
        producer_epoch: i16,
        fence: bool,
        from_client: bool,
        v2: bool,
    ) -> EndCheck {
        let bump = v2 && !fence;
        // The client retried an end that rotated an exhausted epoch to a new producer id.
        let retry_on_overflow = bump
            && m.previous_producer_id == producer_id
            && producer_epoch == i16::MAX - 1
            && m.producer_epoch == 0;
        // The client retried an end whose bumped epoch is now the transaction's.
        let retry_on_bump = bump && m.producer_epoch as i32 == producer_epoch as i32 + 1;
        let same = producer_epoch == m.producer_epoch;
        let valid_epoch = if bump {
            match m.state {
                TxnState::Ongoing
                | TxnState::Empty
                | TxnState::Dead
                | TxnState::PrepareEpochFence => same,
                TxnState::PrepareCommit | TxnState::PrepareAbort => retry_on_bump,
                TxnState::CompleteCommit | TxnState::CompleteAbort => {
                    retry_on_bump || retry_on_overflow || same
                }
            }
        } else {
            (!from_client || same) && producer_epoch >= m.producer_epoch
        };
        EndCheck {
            valid_epoch,
            retry_on_overflow,
            is_retry: retry_on_bump || retry_on_overflow,
        }
    }
}

impl TransactionCoordinator {
    pub fn new(
        config: TxnConfig,
        log: Arc<dyn TransactionLog>,
        participants: Arc<dyn Participants>,
    ) -> Self {
        Self::with_ownership(config, log, participants, Arc::default())
    }

    /// A coordinator serving the `__transaction_state` partitions `ownership` says it owns.
    pub fn with_ownership(
        config: TxnConfig,
        log: Arc<dyn TransactionLog>,
        participants: Arc<dyn Participants>,
        ownership: Arc<Ownership>,
    ) -> Self {
        TransactionCoordinator {
            txns: Mutex::new(HashMap::new()),
            log,
            participants,
            last_abort_scan: Mutex::new(Instant::now()),
            last_expire_scan: Mutex::new(Instant::now()),
            config,
            ownership,
            clock: Clock::System,
        }
    }

    /// The same coordinator reading time from `clock` (tests move a manual one).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Whether this broker coordinates the transactional id now: NOT_COORDINATOR when another
    /// broker leads its partition, COORDINATOR_LOAD_IN_PROGRESS while the partition loads.
    pub fn check_coordinator(&self, transactional_id: &str) -> Result<(), ResponseError> {
        self.ownership
            .check(self.log.partition_for(transactional_id))
    }

    /// This broker became leader of `__transaction_state` partition `partition` at `epoch`
    /// (the coordinator epoch): its transactional ids are loaded by the timer.
    pub fn on_election(&self, partition: i32, epoch: i32) {
        let t = self
            .ownership
            .elect(partition, epoch, || self.unload(partition));
        if t != Transition::None {
            tracing::info!(partition, epoch, "loading __transaction_state partition");
        }
    }

    /// This broker stopped leading `partition`: its transactional ids are dropped; writes in
    /// flight for them end with NOT_COORDINATOR.
    pub fn on_resignation(&self, partition: i32) {
        let t = self.ownership.resign(partition, || self.unload(partition));
        if t != Transition::None {
            tracing::info!(partition, "unloaded __transaction_state partition");
        }
    }

    fn unload(&self, partition: i32) {
        self.txns()
            .retain(|id, _| self.log.partition_for(id) != partition);
    }

    /// Replays the partitions waiting for their load (Kafka's
    /// `loadTransactionsForTxnTopicPartition`), each installed only if this broker still
    /// leads it at the same epoch. Prepared transactions have their markers written by the
    /// timer; Ongoing ones time out as usual. Blocking.
    pub fn load_elected(&self) {
        for (partition, epoch) in self.ownership.loading() {
            let records = match self.log.replay_partition(partition) {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(partition, epoch, error = %e, "cannot load __transaction_state partition; will retry");
                    continue;
                }
            };
            let mut loaded = latest_metadata(records);
            loaded.retain(|id, _| self.log.partition_for(id) == partition);
            let count = loaded.len();
            let installed = self.ownership.complete_load(partition, epoch, || {
                let mut txns = self.txns();
                txns.retain(|id, _| self.log.partition_for(id) != partition);
                txns.extend(loaded.into_iter().map(|(id, m)| (id, Entry::new(m))));
            });
            if installed {
                tracing::info!(
                    partition,
                    epoch,
                    transactional_ids = count,
                    "loaded __transaction_state partition"
                );
            }
        }
    }

    fn txns(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        self.txns.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Rebuilds every transactional id from the log. Blocking.
    /// Partitions the control plane has assigned elsewhere (or that still wait for their
    /// load) are left out.
    pub fn load(&self) -> io::Result<usize> {
        let records = self.log.replay()?;
        let n = records.len();
        let mut latest = latest_metadata(records);
        latest.retain(|id, _| self.ownership.is_served(self.log.partition_for(id)));
        let mut txns = self.txns();
        txns.clear();
        txns.extend(latest.into_iter().map(|(id, m)| (id, Entry::new(m))));
        Ok(n)
    }

    fn persist(&self, m: &TxnMetadata) -> Result<(), ResponseError> {
        let id = &m.transactional_id;
        let value = (m.state != TxnState::Dead).then(|| transaction_log::encode_value(m));
        let partition = self.log.partition_for(id);
        let before = self.ownership.status(partition);
        self.log
            .append(id, transaction_log::encode_key(id), value)
            .map_err(|e| {
                tracing::warn!(transactional_id = %id, error = %e, "cannot persist transaction state");
                e.state_error()
            })?;
        // The partition moved (or was reloaded at a new coordinator epoch) meanwhile: the
        // state in memory is not this write's to change, as Kafka checks the epoch.
        if self.ownership.status(partition) != before {
            return Err(ResponseError::NotCoordinator);
        }
        Ok(())
    }

    /// Persists a prepared transition and applies it (or only clears the pending mark).
    fn persist_and_apply(&self, transit: TxnMetadata) -> Result<(), ResponseError> {
        let result = self.persist(&transit);
        let mut txns = self.txns();
        match txns.get_mut(&transit.transactional_id) {
            Some(e) => {
                e.pending = None;
                if result.is_ok() {
                    e.meta = transit;
                }
                result
            }
            // Unloaded while the write was in flight: another broker coordinates it now.
            None => Err(ResponseError::NotCoordinator),
        }
    }

    pub fn validate_timeout(&self, timeout_ms: i32) -> bool {
        timeout_ms > 0 && timeout_ms <= self.config.max_timeout_ms
    }

    /// InitProducerId with a transactional id. Blocking.
    pub fn init_producer_id(
        &self,
        transactional_id: &str,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
    ) -> Result<(i64, i16), ResponseError> {
        if transactional_id.is_empty() {
            return Err(ResponseError::InvalidRequest);
        }
        self.check_coordinator(transactional_id)?;
        if !self.validate_timeout(timeout_ms) {
            return Err(ResponseError::InvalidTransactionTimeout);
        }
        if !self.txns().contains_key(transactional_id) {
            let pid = self.allocate()?;
            self.txns()
                .entry(transactional_id.to_string())
                .or_insert_with(|| {
                    Entry::new(TxnMetadata::new(
                        transactional_id,
                        pid,
                        timeout_ms,
                        self.clock.now_ms(),
                    ))
                });
        }
        let now = self.clock.now_ms();
        enum Next {
            Persist(TxnMetadata),
            Fence(i64, i16),
        }
        let next = {
            let mut txns = self.txns();
            let e = txns
                .get_mut(transactional_id)
                .ok_or(ResponseError::ConcurrentTransactions)?;
            let m = &e.meta;
            let valid_pid = |(pid, epoch): (i64, i16)| {
                m.producer_epoch == metadata::NO_PRODUCER_EPOCH
                    || pid == m.producer_id
                    || (pid == m.previous_producer_id && metadata::is_epoch_exhausted(epoch))
            };
            if e.pending.is_some() {
                return Err(ResponseError::ConcurrentTransactions);
            }
            if !expected.is_none_or(valid_pid) {
                return Err(ResponseError::ProducerFenced);
            }
            match m.state {
                TxnState::PrepareAbort | TxnState::PrepareCommit => {
                    return Err(ResponseError::ConcurrentTransactions)
                }
                TxnState::CompleteAbort | TxnState::CompleteCommit | TxnState::Empty => {
                    let t = if m.is_epoch_exhausted()
                        && expected.is_none_or(|(_, epoch)| epoch == m.producer_epoch)
                    {
                        let pid = self.allocate()?;
                        m.prepare_producer_id_rotation(pid, timeout_ms, now, expected.is_some())
                            .map_err(illegal)?
                    } else {
                        m.prepare_increment_epoch(timeout_ms, expected.map(|e| e.1), now)?
                            .map_err(illegal)?
                    };
                    e.pending = Some(TxnState::Empty);
                    Next::Persist(t)
                }
                TxnState::Ongoing => {
                    // Abort the ongoing transaction first; the client retries and gets the
                    // epoch bumped a second time (a new producer id if that exhausts it).
                    let t = m.prepare_fence_epoch(e.failed_fence).map_err(illegal)?;
                    e.pending = Some(TxnState::PrepareEpochFence);
                    Next::Fence(t.producer_id, t.producer_epoch)
                }
                TxnState::Dead | TxnState::PrepareEpochFence => {
                    return Err(ResponseError::UnknownServerError)
                }
            }
        };
        match next {
            Next::Persist(t) => {
                let answer = (t.producer_id, t.producer_epoch);
                self.persist_and_apply(t)?;
                tracing::info!(
                    transactional_id,
                    producer_id = answer.0,
                    epoch = answer.1,
                    "initialized transactional id"
                );
                Ok(answer)
            }
            Next::Fence(pid, epoch) => {
                self.fenced_abort(transactional_id, pid, epoch)?;
                Err(ResponseError::ConcurrentTransactions)
            }
        }
    }

    /// Aborts a transaction whose epoch was just fenced (pending PrepareEpochFence). The
    /// fence is the only bump, whatever the transaction version: Kafka 4.4 answers a
    /// timed-out or re-initialized transaction, TV1 or TV2, with the epoch one above (checked
    /// against the reference broker).
    fn fenced_abort(&self, id: &str, pid: i64, epoch: i16) -> Result<(i64, i16), ResponseError> {
        let r = self.end_transaction(id, pid, epoch, false, false, 0);
        if r.is_err() {
            let mut txns = self.txns();
            if let Some(e) = txns.get_mut(id) {
                if e.pending == Some(TxnState::PrepareEpochFence) {
                    e.pending = None;
                }
            }
        }
        r
    }

    fn allocate(&self) -> Result<i64, ResponseError> {
        self.participants.allocate_producer_id().map_err(|e| {
            tracing::error!(error = %e, "cannot allocate a producer id");
            ResponseError::KafkaStorageError
        })
    }

    /// AddPartitionsToTxn (and AddOffsetsToTxn with the group's offsets partition), or a
    /// TV2 client's write adding its partition implicitly (`client_tv` 2: AddPartitionsToTxn
    /// v4+ from the partition's leader). Blocking.
    pub fn add_partitions(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: Vec<(String, i32)>,
        client_tv: i16,
    ) -> Result<(), ResponseError> {
        if transactional_id.is_empty() {
            return Err(ResponseError::InvalidRequest);
        }
        self.check_coordinator(transactional_id)?;
        let transit = {
            let mut txns = self.txns();
            let e = txns
                .get_mut(transactional_id)
                .ok_or(ResponseError::InvalidProducerIdMapping)?;
            let m = &e.meta;
            if m.producer_id != producer_id {
                return Err(ResponseError::InvalidProducerIdMapping);
            }
            if m.producer_epoch != producer_epoch {
                return Err(ResponseError::ProducerFenced);
            }
            if e.pending.is_some() || m.state.is_prepare() {
                return Err(ResponseError::ConcurrentTransactions);
            }
            if m.state == TxnState::Ongoing && partitions.iter().all(|p| m.partitions.contains(p)) {
                return Ok(());
            }
            let t = m
                .prepare_add_partitions(partitions, client_tv, self.clock.now_ms())
                .map_err(illegal)?;
            e.pending = Some(TxnState::Ongoing);
            t
        };
        self.persist_and_apply(transit)
    }

    /// The verify-only form of AddPartitionsToTxn (KIP-890 part 1): per partition, NONE if it
    /// is in the transaction, TRANSACTION_ABORTABLE if not. Cheap: no I/O.
    pub fn verify_partitions(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[(String, i32)],
    ) -> Result<Vec<Option<ResponseError>>, ResponseError> {
        if transactional_id.is_empty() {
            return Err(ResponseError::InvalidRequest);
        }
        self.check_coordinator(transactional_id)?;
        let txns = self.txns();
        let e = txns
            .get(transactional_id)
            .ok_or(ResponseError::InvalidProducerIdMapping)?;
        let m = &e.meta;
        if m.producer_id != producer_id {
            return Err(ResponseError::InvalidProducerIdMapping);
        }
        if m.producer_epoch != producer_epoch {
            return Err(ResponseError::ProducerFenced);
        }
        if m.state.is_prepare() {
            return Err(ResponseError::ConcurrentTransactions);
        }
        Ok(partitions
            .iter()
            .map(|p| (!m.partitions.contains(p)).then_some(ResponseError::TransactionAbortable))
            .collect())
    }

    /// EndTxn from a client. `client_transaction_version` is 2 for EndTxn v5+ (KIP-890 part 2:
    /// the epoch is bumped at every end). Returns the producer id and epoch to answer with.
    /// Blocking: persists, writes the markers and completes the transaction before returning.
    pub fn end_txn(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        client_transaction_version: i16,
    ) -> Result<(i64, i16), ResponseError> {
        self.end_transaction(
            transactional_id,
            producer_id,
            producer_epoch,
            commit,
            true,
            client_transaction_version,
        )
    }

    fn end_transaction(
        &self,
        id: &str,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        from_client: bool,
        client_tv: i16,
    ) -> Result<(i64, i16), ResponseError> {
        if id.is_empty() {
            return Err(ResponseError::InvalidRequest);
        }
        self.check_coordinator(id)?;
        let now = self.clock.now_ms();
        let v2 = client_tv >= 2;
        let (transit, is_fence) = {
            let mut txns = self.txns();
            let e = txns
                .get_mut(id)
                .ok_or(ResponseError::InvalidProducerIdMapping)?;
            let fence = e.pending == Some(TxnState::PrepareEpochFence);
            let m = &e.meta;
            let check = EndCheck::of(m, producer_id, producer_epoch, fence, from_client, v2);
            if m.producer_id != producer_id && !check.retry_on_overflow {
                return Err(ResponseError::InvalidProducerIdMapping);
            }
            if !check.valid_epoch {
                return Err(ResponseError::ProducerFenced);
            }
            if e.pending.is_some() && !fence {
                return Err(ResponseError::ConcurrentTransactions);
            }
            let current = (m.producer_id, m.producer_epoch);
            use TxnState::*;
            // Kafka's table for TV2 (TV1 differs where noted): a retry of a completed end is
            // answered with the epoch it got; a new abort bumps the epoch even when nothing
            // was added, to fence a write that may still be on its way.
            let no_partition_added = match (m.state, commit) {
                (Ongoing, _) => false,
                (CompleteCommit, true) | (CompleteAbort, false) if check.is_retry || !v2 => {
                    return Ok(current)
                }
                (CompleteAbort | CompleteCommit | Empty, false) if v2 && !check.is_retry => true,
                (PrepareCommit, true) | (PrepareAbort, false) => {
                    return Err(ResponseError::ConcurrentTransactions)
                }
                (Dead | PrepareEpochFence, _) => return Err(ResponseError::UnknownServerError),
                _ => return Err(ResponseError::InvalidTxnState),
            };
            let next = if commit { PrepareCommit } else { PrepareAbort };
            let is_fence = next == PrepareAbort && fence;
            if is_fence {
                // The fence's bumped epoch becomes the transaction's; TV2 bumps once more
                // for the abort itself.
                e.pending = None;
                e.meta.producer_epoch = producer_epoch;
                e.meta.last_producer_epoch = metadata::NO_PRODUCER_EPOCH;
            }
            let next_pid = if v2 && e.meta.is_epoch_exhausted() {
                self.allocate()?
            } else {
                NO_PRODUCER_ID
            };
            let t = e
                .meta
                .prepare_abort_or_commit(next, client_tv, next_pid, now, no_partition_added)
                .map_err(illegal)?;
            e.pending = Some(next);
            (t, is_fence)
        };
        let state = transit.state;
        if let Err(err) = self.persist(&transit) {
            let mut txns = self.txns();
            if let Some(e) = txns.get_mut(id) {
                e.pending = None;
                if is_fence {
                    e.failed_fence = true;
                }
            }
            return Err(err);
        }
        let answer = {
            let mut txns = self.txns();
            match txns.get_mut(id) {
                Some(e) => {
                    e.pending = None;
                    e.failed_fence = false;
                    e.meta = transit;
                    // What the transaction completes with (Kafka answers with the completed
                    // state): the bumped epoch, or the next producer id at epoch 0.
                    if e.meta.next_producer_id != NO_PRODUCER_ID {
                        (e.meta.next_producer_id, 0)
                    } else {
                        (e.meta.producer_id, e.meta.producer_epoch)
                    }
                }
                None => return Err(ResponseError::NotCoordinator),
            }
        };
        tracing::debug!(transactional_id = id, ?state, "transaction prepared");
        self.write_markers(id);
        Ok(answer)
    }

    /// Writes the markers of a prepared transaction, then completes it. Returns whether the
    /// transaction is complete. Blocking.
    fn write_markers(&self, id: &str) -> bool {
        let (pid, epoch, commit, partitions, transaction_version) = {
            let mut txns = self.txns();
            let Some(e) = txns.get_mut(id) else {
                return false;
            };
            if !e.meta.state.is_prepare() || e.markers_busy || e.pending.is_some() {
                return false;
            }
            e.markers_busy = true;
            (
                e.meta.producer_id,
                e.meta.producer_epoch,
                e.meta.state == TxnState::PrepareCommit,
                e.meta.partitions.iter().cloned().collect::<Vec<_>>(),
                e.meta.client_transaction_version,
            )
        };
        let coordinator_epoch = self.log.coordinator_epoch(id);
        let mut done = Vec::with_capacity(partitions.len());
        let mut failed = false;
        for (topic, partition) in partitions {
            let marker = crate::log::TxnMarker {
                producer_id: pid,
                producer_epoch: epoch,
                coordinator_epoch,
                commit,
                transaction_version,
            };
            match self.participants.write_marker(&topic, partition, &marker) {
                Ok(()) => done.push((topic, partition)),
                Err(MarkerError::UnknownPartition) => {
                    tracing::info!(transactional_id = id, %topic, partition, "skipping the marker of a partition that no longer exists");
                    done.push((topic, partition));
                }
                Err(e) => {
                    tracing::warn!(transactional_id = id, %topic, partition, error = %e, "cannot write transaction marker; will retry");
                    failed = true;
                }
            }
        }
        let transit = {
            let mut txns = self.txns();
            let Some(e) = txns.get_mut(id) else {
                return false;
            };
            e.markers_busy = false;
            for d in &done {
                e.meta.partitions.remove(d);
            }
            if failed || !e.meta.partitions.is_empty() {
                e.marker_retry_at = Some(Instant::now() + MARKER_RETRY);
                return false;
            }
            e.marker_retry_at = None;
            match e.meta.prepare_complete(self.clock.now_ms()) {
                Ok(t) => {
                    e.pending = Some(t.state);
                    t
                }
                Err(err) => {
                    illegal(err);
                    return false;
                }
            }
        };
        if self.persist_and_apply(transit).is_err() {
            let mut txns = self.txns();
            if let Some(e) = txns.get_mut(id) {
                e.marker_retry_at = Some(Instant::now() + MARKER_RETRY);
            }
            return false;
        }
        true
    }

    pub fn describe(&self, transactional_id: &str) -> Result<TxnDescription, ResponseError> {
        if transactional_id.is_empty() {
            return Err(ResponseError::InvalidRequest);
        }
        self.check_coordinator(transactional_id)?;
        let txns = self.txns();
        let e = txns
            .get(transactional_id)
            .filter(|e| e.meta.state != TxnState::Dead)
            .ok_or(ResponseError::TransactionalIdNotFound)?;
        Ok(describe(&e.meta))
    }

    /// ListTransactions: ids matching every given filter (empty = any), and the state names
    /// that are not states. `min_duration_ms` >= 0 keeps transactions open longer than that.
    pub fn list(
        &self,
        states: &[String],
        producer_ids: &[i64],
        min_duration_ms: i64,
        pattern: Option<&regex::Regex>,
    ) -> (Vec<TxnDescription>, Vec<String>) {
        let mut wanted = Vec::new();
        let mut unknown = Vec::new();
        for s in states {
            match TxnState::from_name(s) {
                Some(st) => wanted.push(st),
                None => unknown.push(s.clone()),
            }
        }
        let now = self.clock.now_ms();
        let txns = self.txns();
        let mut out: Vec<TxnDescription> = txns
            .values()
            .map(|e| &e.meta)
            .filter(|m| m.state != TxnState::Dead)
            .filter(|m| producer_ids.is_empty() || producer_ids.contains(&m.producer_id))
            .filter(|m| states.is_empty() || wanted.contains(&m.state))
            .filter(|m| min_duration_ms < 0 || now - m.start_ms > min_duration_ms)
            .filter(|m| pattern.is_none_or(|p| p.is_match(&m.transactional_id)))
            .map(describe)
            .collect();
        out.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        (out, unknown)
    }

    /// Transactions in progress (Ongoing or completing), for the metrics gauge.
    pub fn ongoing_count(&self) -> usize {
        self.txns()
            .values()
            .filter(|e| e.meta.state == TxnState::Ongoing || e.meta.state.is_prepare())
            .count()
    }

    /// Transactional ids per state, for the metrics.
    pub fn count_by_state(&self) -> Vec<(&'static str, usize)> {
        let txns = self.txns();
        TxnState::ALL
            .iter()
            .filter(|s| **s != TxnState::Dead && **s != TxnState::PrepareEpochFence)
            .map(|s| {
                (
                    s.name(),
                    txns.values().filter(|e| e.meta.state == *s).count(),
                )
            })
            .collect()
    }

    /// Timer work: finishes prepared transactions (after a restart or a failed marker),
    /// aborts transactions open longer than their timeout (fencing their producer), and
    /// expires idle transactional ids. Blocking.
    /// Whether [`tick`](Self::tick) has work now: a partition to load, a transaction whose
    /// markers are to be written, or a due scan for timed-out transactions or expired ids.
    /// Cheap and non-blocking: the runtime hands `tick` to the blocking pool only when it
    /// holds, so an idle coordinator costs a timer check, not a thread handoff.
    pub fn needs_tick(&self) -> bool {
        let now = Instant::now();
        self.ownership.any_loading()
            || is_due(
                &self.last_abort_scan,
                self.config.abort_timed_out_interval,
                now,
            )
            || is_due(
                &self.last_expire_scan,
                self.config.remove_expired_interval,
                now,
            )
            || self.txns().values().any(|e| e.meta.state.is_prepare())
    }

    pub fn tick(&self) {
        self.load_elected();
        let now = Instant::now();
        let prepared: Vec<String> = self
            .txns()
            .iter()
            .filter(|(_, e)| {
                e.meta.state.is_prepare()
                    && e.pending.is_none()
                    && !e.markers_busy
                    && e.marker_retry_at.is_none_or(|t| t <= now)
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in prepared {
            self.write_markers(&id);
        }
        if due(
            &self.last_abort_scan,
            self.config.abort_timed_out_interval,
            now,
        ) {
            self.abort_timed_out();
        }
        if due(
            &self.last_expire_scan,
            self.config.remove_expired_interval,
            now,
        ) {
            self.expire_transactional_ids();
        }
    }

    /// Aborts Ongoing transactions older than their timeout, bumping the epoch so the
    /// producer is fenced (Kafka's `abortTimedOutTransactions`).
    pub fn abort_timed_out(&self) {
        let now = self.clock.now_ms();
        let fenced: Vec<(String, i64, i16)> = {
            let mut txns = self.txns();
            txns.iter_mut()
                .filter(|(_, e)| {
                    e.pending.is_none()
                        && e.meta.state == TxnState::Ongoing
                        && e.meta.start_ms + e.meta.timeout_ms as i64 <= now
                })
                .filter_map(|(id, e)| {
                    let t = e.meta.prepare_fence_epoch(e.failed_fence).ok()?;
                    e.pending = Some(TxnState::PrepareEpochFence);
                    Some((id.clone(), t.producer_id, t.producer_epoch))
                })
                .collect()
        };
        for (id, pid, epoch) in fenced {
            match self.fenced_abort(&id, pid, epoch) {
                Ok(_) => {
                    tracing::info!(transactional_id = %id, "aborted a transaction that exceeded its timeout")
                }
                Err(e) => {
                    tracing::debug!(transactional_id = %id, error = ?e, "abort of a timed out transaction did not complete")
                }
            }
        }
    }

    /// Removes transactional ids idle for transactional.id.expiration.ms (a tombstone each).
    pub fn expire_transactional_ids(&self) {
        let cutoff = self.clock.now_ms() - self.config.transactional_id_expiration_ms;
        let dead: Vec<TxnMetadata> = {
            let mut txns = self.txns();
            txns.values_mut()
                .filter(|e| {
                    e.pending.is_none()
                        && e.meta.state.expiration_allowed()
                        && e.meta.last_update_ms <= cutoff
                })
                .filter_map(|e| {
                    let t = e.meta.prepare_dead().ok()?;
                    e.pending = Some(TxnState::Dead);
                    Some(t)
                })
                .collect()
        };
        for t in dead {
            let id = t.transactional_id.clone();
            let ok = self.persist(&t).is_ok();
            let mut txns = self.txns();
            if ok {
                txns.remove(&id);
                tracing::info!(transactional_id = %id, "expired transactional id");
            } else if let Some(e) = txns.get_mut(&id) {
                e.pending = None;
            }
        }
    }
}

/// The live metadata per transactional id after replaying `records` (the last record per id
/// wins; a null value or a Dead state deletes it).
fn latest_metadata(records: Vec<(Bytes, Option<Bytes>)>) -> HashMap<String, TxnMetadata> {
    let mut latest: HashMap<String, Option<TxnMetadata>> = HashMap::new();
    for (key, value) in records {
        let id = match transaction_log::decode_key(key) {
            Ok(id) => id,
            Err(e) => {
                tracing::warn!(error = %e, "skipping undecodable __transaction_state key");
                continue;
            }
        };
        match value {
            None => {
                latest.insert(id, None);
            }
            Some(v) => match transaction_log::decode_value(&id, v) {
                Ok(m) => {
                    latest.insert(id, Some(m));
                }
                Err(e) => {
                    tracing::warn!(transactional_id = %id, error = %e, "skipping undecodable transaction state")
                }
            },
        }
    }
    latest
        .into_iter()
        .filter_map(|(id, m)| Some((id, m.filter(|m| m.state != TxnState::Dead)?)))
        .collect()
}

fn describe(m: &TxnMetadata) -> TxnDescription {
    TxnDescription {
        transactional_id: m.transactional_id.clone(),
        producer_id: m.producer_id,
        producer_epoch: m.producer_epoch,
        state: m.state.name(),
        timeout_ms: m.timeout_ms,
        start_ms: m.start_ms,
        partitions: m.partitions.iter().cloned().collect(),
    }
}

/// Whether `every` has passed since `last` (without claiming the run, unlike [`due`]).
fn is_due(last: &Mutex<Instant>, every: Duration, now: Instant) -> bool {
    let last = *last.lock().unwrap_or_else(|e| e.into_inner());
    now.duration_since(last) >= every
}

fn due(last: &Mutex<Instant>, every: Duration, now: Instant) -> bool {
    let mut last = last.lock().unwrap_or_else(|e| e.into_inner());
    if now.duration_since(*last) >= every {
        *last = now;
        true
    } else {
        false
    }
}

#[cfg(test)]
mod tests;
