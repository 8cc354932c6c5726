//! A transactional id's state and its transitions (Kafka's `TransactionMetadata`), free of I/O.
//!
//! A transition is prepared from the current metadata (`prepare_*` returns the would-be
//! metadata), persisted to `__transaction_state`, and only then applied; while it is in flight
//! the coordinator marks the id as pending so concurrent requests get CONCURRENT_TRANSACTIONS.

use std::collections::BTreeSet;

pub const NO_PRODUCER_ID: i64 = -1;
pub const NO_PRODUCER_EPOCH: i16 = -1;

/// Kafka's `TransactionState`, with its on-disk ids and names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i8)]
pub enum TxnState {
    Empty = 0,
    Ongoing = 1,
    PrepareCommit = 2,
    PrepareAbort = 3,
    CompleteCommit = 4,
    CompleteAbort = 5,
    Dead = 6,
    PrepareEpochFence = 7,
}

impl TxnState {
    pub const ALL: [TxnState; 8] = [
        TxnState::Empty,
        TxnState::Ongoing,
        TxnState::PrepareCommit,
        TxnState::PrepareAbort,
        TxnState::CompleteCommit,
        TxnState::CompleteAbort,
        TxnState::Dead,
        TxnState::PrepareEpochFence,
    ];

    pub fn from_id(id: i8) -> Option<TxnState> {
        TxnState::ALL.into_iter().find(|s| *s as i8 == id)
    }

    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::Dead => "Dead",
            TxnState::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    pub fn from_name(name: &str) -> Option<TxnState> {
        TxnState::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Kafka's `validPreviousStates`.
    fn valid_previous(self) -> &'static [TxnState] {
        use TxnState::*;
        match self {
            Empty => &[Empty, CompleteCommit, CompleteAbort],
            Ongoing => &[Ongoing, Empty, CompleteCommit, CompleteAbort],
            PrepareCommit => &[Ongoing],
            // TV2 aborts a transaction nothing was added to (its client may have sent a
            // write that never reached the partition) to fence that write.
            PrepareAbort => &[
                Ongoing,
                PrepareEpochFence,
                Empty,
                CompleteCommit,
                CompleteAbort,
            ],
            CompleteCommit => &[PrepareCommit],
            CompleteAbort => &[PrepareAbort],
            Dead => &[Empty, CompleteAbort, CompleteCommit],
            PrepareEpochFence => &[Ongoing],
        }
    }

    /// A transactional id in this state may expire (transactional.id.expiration.ms).
    pub fn expiration_allowed(self) -> bool {
        matches!(
            self,
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
        )
    }

    pub fn is_prepare(self) -> bool {
        matches!(self, TxnState::PrepareCommit | TxnState::PrepareAbort)
    }
}

/// Kafka's `TransactionMetadata.isEpochExhausted`.
pub fn is_epoch_exhausted(epoch: i16) -> bool {
    epoch >= i16::MAX - 1
}

/// The persisted part of a transactional id's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMetadata {
    pub transactional_id: String,
    pub producer_id: i64,
    pub previous_producer_id: i64,
    /// TV2: the producer id the next completion rotates to (epoch exhaustion).
    pub next_producer_id: i64,
    pub producer_epoch: i16,
    /// The epoch before the last bump (KIP-360 retries); not persisted.
    pub last_producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    pub partitions: BTreeSet<(String, i32)>,
    pub start_ms: i64,
    pub last_update_ms: i64,
    /// 0 (or 1) for classic clients, 2 for KIP-890 part 2 clients (EndTxn v5+).
    pub client_transaction_version: i16,
}

/// Why a transition cannot be prepared: a bug in the caller (Kafka throws
/// IllegalStateException), reported as UNKNOWN_SERVER_ERROR.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("illegal transaction state transition from {from:?} to {to:?}")]
pub struct IllegalTransition {
    pub from: TxnState,
    pub to: TxnState,
}

impl TxnMetadata {
    /// A new transactional id: Empty, no epoch yet.
    pub fn new(transactional_id: &str, producer_id: i64, timeout_ms: i32, now_ms: i64) -> Self {
        TxnMetadata {
            transactional_id: transactional_id.to_string(),
            producer_id,
            previous_producer_id: NO_PRODUCER_ID,
            next_producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            last_producer_epoch: NO_PRODUCER_EPOCH,
            timeout_ms,
            state: TxnState::Empty,
            partitions: BTreeSet::new(),
            start_ms: -1,
            last_update_ms: now_ms,
            client_transaction_version: 0,
        }
    }

    pub fn is_epoch_exhausted(&self) -> bool {
        is_epoch_exhausted(self.producer_epoch)
    }

    pub fn supports_epoch_bump(&self) -> bool {
        self.client_transaction_version >= 2
    }

    #[allow(clippy::too_many_arguments)]
    fn transit(
        &self,
        state: TxnState,
        producer_id: i64,
        next_producer_id: i64,
        epoch: i16,
        last_epoch: i16,
        timeout_ms: i32,
        partitions: BTreeSet<(String, i32)>,
        start_ms: i64,
        now_ms: i64,
        client_transaction_version: i16,
    ) -> Result<TxnMetadata, IllegalTransition> {
        if !state.valid_previous().contains(&self.state)
            || producer_id < 0
            || (state != TxnState::Dead && epoch < 0)
        {
            return Err(IllegalTransition {
                from: self.state,
                to: state,
            });
        }
        Ok(TxnMetadata {
            transactional_id: self.transactional_id.clone(),
            producer_id,
            previous_producer_id: self.producer_id,
            next_producer_id,
            producer_epoch: epoch,
            last_producer_epoch: last_epoch,
            timeout_ms,
            state,
            partitions,
            start_ms,
            last_update_ms: now_ms,
            client_transaction_version,
        })
    }

    /// Ongoing → PrepareEpochFence with the epoch bumped (never persisted as such: the abort
    /// that follows writes PrepareAbort with this epoch). `failed_fence`: a previous fence was
    /// not persisted, its bump is already in memory.
    pub fn prepare_fence_epoch(
        &self,
        failed_fence: bool,
    ) -> Result<TxnMetadata, IllegalTransition> {
        if self.producer_epoch == i16::MAX {
            return Err(IllegalTransition {
                from: self.state,
                to: TxnState::PrepareEpochFence,
            });
        }
        let epoch = if failed_fence {
            self.producer_epoch
        } else {
            self.producer_epoch + 1
        };
        let mut t = self.transit(
            TxnState::PrepareEpochFence,
            self.producer_id,
            NO_PRODUCER_ID,
            epoch,
            NO_PRODUCER_EPOCH,
            self.timeout_ms,
            self.partitions.clone(),
            self.start_ms,
            self.last_update_ms,
            0,
        )?;
        t.previous_producer_id = self.previous_producer_id;
        Ok(t)
    }

    /// InitProducerId on a completed transaction: bump the epoch (KIP-360: a retry with the
    /// previous epoch gets the current one again). Err(PRODUCER_FENCED) for any other epoch.
    pub fn prepare_increment_epoch(
        &self,
        timeout_ms: i32,
        expected_epoch: Option<i16>,
        now_ms: i64,
    ) -> Result<Result<TxnMetadata, IllegalTransition>, kafka_protocol::ResponseError> {
        let bumped = self.producer_epoch.wrapping_add(1);
        let (epoch, last) = match expected_epoch {
            None => (bumped, NO_PRODUCER_EPOCH),
            Some(e) if self.producer_epoch == NO_PRODUCER_EPOCH || e == self.producer_epoch => {
                (bumped, self.producer_epoch)
            }
            Some(e) if e == self.last_producer_epoch => {
                (self.producer_epoch, self.last_producer_epoch)
            }
            Some(_) => return Err(kafka_protocol::ResponseError::ProducerFenced),
        };
        let mut t = self.transit(
            TxnState::Empty,
            self.producer_id,
            NO_PRODUCER_ID,
            epoch,
            last,
            timeout_ms,
            BTreeSet::new(),
            -1,
            now_ms,
            0,
        );
        if let Ok(t) = t.as_mut() {
            t.previous_producer_id = self.previous_producer_id;
        }
        Ok(t)
    }

    /// InitProducerId with the epoch exhausted: a new producer id at epoch 0.
    pub fn prepare_producer_id_rotation(
        &self,
        new_producer_id: i64,
        timeout_ms: i32,
        now_ms: i64,
        record_last_epoch: bool,
    ) -> Result<TxnMetadata, IllegalTransition> {
        self.transit(
            TxnState::Empty,
            new_producer_id,
            NO_PRODUCER_ID,
            0,
            if record_last_epoch {
                self.producer_epoch
            } else {
                NO_PRODUCER_EPOCH
            },
            timeout_ms,
            BTreeSet::new(),
            -1,
            now_ms,
            0,
        )
    }

    /// AddPartitionsToTxn / AddOffsetsToTxn, or a TV2 write adding its partition implicitly:
    /// Ongoing with the partitions added; a new transaction starts its clock. The transaction
    /// takes the adding client's transaction version, as in Kafka.
    pub fn prepare_add_partitions(
        &self,
        added: impl IntoIterator<Item = (String, i32)>,
        client_transaction_version: i16,
        now_ms: i64,
    ) -> Result<TxnMetadata, IllegalTransition> {
        let start = match self.state {
            TxnState::Empty | TxnState::CompleteAbort | TxnState::CompleteCommit => now_ms,
            _ => self.start_ms,
        };
        let mut partitions = self.partitions.clone();
        partitions.extend(added);
        let mut t = self.transit(
            TxnState::Ongoing,
            self.producer_id,
            NO_PRODUCER_ID,
            self.producer_epoch,
            self.last_producer_epoch,
            self.timeout_ms,
            partitions,
            start,
            now_ms,
            client_transaction_version,
        )?;
        t.previous_producer_id = self.previous_producer_id;
        Ok(t)
    }

    /// EndTxn: PrepareCommit or PrepareAbort. TV2 clients bump the epoch here (never past
    /// `i16::MAX`: an exhausted epoch moves to `next_producer_id` on completion). A TV2 abort
    /// of a transaction no partition was added to starts its clock now.
    pub fn prepare_abort_or_commit(
        &self,
        state: TxnState,
        client_transaction_version: i16,
        next_producer_id: i64,
        now_ms: i64,
        no_partition_added: bool,
    ) -> Result<TxnMetadata, IllegalTransition> {
        let (epoch, last) = if client_transaction_version >= 2 {
            (self.producer_epoch.saturating_add(1), self.producer_epoch)
        } else {
            (self.producer_epoch, self.last_producer_epoch)
        };
        let start_ms = if no_partition_added {
            now_ms
        } else {
            self.start_ms
        };
        let mut t = self.transit(
            state,
            self.producer_id,
            next_producer_id,
            epoch,
            last,
            self.timeout_ms,
            self.partitions.clone(),
            start_ms,
            now_ms,
            client_transaction_version,
        )?;
        t.previous_producer_id = self.previous_producer_id;
        Ok(t)
    }

    /// After every marker is written: CompleteCommit or CompleteAbort, partitions cleared.
    pub fn prepare_complete(&self, now_ms: i64) -> Result<TxnMetadata, IllegalTransition> {
        let state = if self.state == TxnState::PrepareCommit {
            TxnState::CompleteCommit
        } else {
            TxnState::CompleteAbort
        };
        let (pid, epoch) = if self.supports_epoch_bump() && self.next_producer_id != NO_PRODUCER_ID
        {
            (self.next_producer_id, 0)
        } else {
            (self.producer_id, self.producer_epoch)
        };
        let mut t = self.transit(
            state,
            pid,
            NO_PRODUCER_ID,
            epoch,
            self.producer_epoch,
            self.timeout_ms,
            BTreeSet::new(),
            self.start_ms,
            now_ms,
            self.client_transaction_version,
        )?;
        if pid == self.producer_id {
            t.previous_producer_id = self.previous_producer_id;
        }
        Ok(t)
    }

    /// Expiration of the transactional id (a tombstone follows).
    pub fn prepare_dead(&self) -> Result<TxnMetadata, IllegalTransition> {
        self.transit(
            TxnState::Dead,
            self.producer_id,
            NO_PRODUCER_ID,
            self.producer_epoch,
            self.last_producer_epoch,
            self.timeout_ms,
            BTreeSet::new(),
            self.start_ms,
            self.last_update_ms,
            self.client_transaction_version,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn initialized() -> TxnMetadata {
        let m = TxnMetadata::new("tx", 10, 60_000, 0);
        m.prepare_increment_epoch(60_000, None, 1).unwrap().unwrap()
    }

    #[test]
    fn a_transaction_goes_through_kafkas_states() {
        let m = initialized();
        assert_eq!((m.state, m.producer_epoch), (TxnState::Empty, 0));
        let m = m
            .prepare_add_partitions([("t".to_string(), 0)], 0, 5)
            .unwrap();
        assert_eq!((m.state, m.start_ms), (TxnState::Ongoing, 5));
        let m = m
            .prepare_add_partitions([("t".to_string(), 1)], 0, 9)
            .unwrap();
        assert_eq!((m.partitions.len(), m.start_ms), (2, 5));
        let p = m
            .prepare_abort_or_commit(TxnState::PrepareCommit, 0, NO_PRODUCER_ID, 10, false)
            .unwrap();
        assert_eq!((p.state, p.producer_epoch), (TxnState::PrepareCommit, 0));
        let c = p.prepare_complete(11).unwrap();
        assert_eq!(c.state, TxnState::CompleteCommit);
        assert!(c.partitions.is_empty());
        // A committed transaction cannot be committed again; a new one can start.
        assert!(c
            .prepare_abort_or_commit(TxnState::PrepareCommit, 0, NO_PRODUCER_ID, 12, false)
            .is_err());
        let n = c
            .prepare_add_partitions([("t".to_string(), 0)], 0, 20)
            .unwrap();
        assert_eq!(n.start_ms, 20);
    }

    #[test]
    fn tv2_bumps_the_epoch_at_every_end() {
        let m = initialized()
            .prepare_add_partitions([("t".to_string(), 0)], 0, 5)
            .unwrap();
        let p = m
            .prepare_abort_or_commit(TxnState::PrepareAbort, 2, NO_PRODUCER_ID, 6, false)
            .unwrap();
        assert_eq!((p.producer_epoch, p.last_producer_epoch), (1, 0));
        let c = p.prepare_complete(7).unwrap();
        assert_eq!((c.state, c.producer_epoch), (TxnState::CompleteAbort, 1));
        // An abort with nothing added bumps again and starts its clock at the abort.
        let a = c
            .prepare_abort_or_commit(TxnState::PrepareAbort, 2, NO_PRODUCER_ID, 8, true)
            .unwrap();
        assert_eq!((a.producer_epoch, a.start_ms), (2, 8));
        // An exhausted epoch completes on the next producer id, at epoch 0.
        let mut x = m.clone();
        x.producer_epoch = i16::MAX - 1;
        let p = x
            .prepare_abort_or_commit(TxnState::PrepareCommit, 2, 77, 9, false)
            .unwrap();
        assert_eq!(p.producer_epoch, i16::MAX);
        let c = p.prepare_complete(10).unwrap();
        assert_eq!((c.producer_id, c.producer_epoch), (77, 0));
        assert_eq!(c.previous_producer_id, 10);
    }

    #[test]
    fn reinit_fences_and_kip360_retries_get_the_same_epoch() {
        let m = initialized();
        let bumped = m
            .prepare_increment_epoch(1000, Some(0), 2)
            .unwrap()
            .unwrap();
        assert_eq!((bumped.producer_epoch, bumped.last_producer_epoch), (1, 0));
        // The producer retries with its old epoch (it lost the answer): same epoch again.
        let retry = bumped
            .prepare_increment_epoch(1000, Some(0), 3)
            .unwrap()
            .unwrap();
        assert_eq!(retry.producer_epoch, 1);
        // Any other epoch is a zombie.
        assert_eq!(
            bumped.prepare_increment_epoch(1000, Some(7), 3).err(),
            Some(kafka_protocol::ResponseError::ProducerFenced)
        );
    }

    #[test]
    fn fencing_an_ongoing_transaction_bumps_once_even_after_a_failed_fence() {
        let m = initialized()
            .prepare_add_partitions([("t".to_string(), 0)], 0, 5)
            .unwrap();
        let f = m.prepare_fence_epoch(false).unwrap();
        assert_eq!(
            (f.state, f.producer_epoch),
            (TxnState::PrepareEpochFence, 1)
        );
        assert_eq!(m.prepare_fence_epoch(true).unwrap().producer_epoch, 0);
        assert!(initialized().prepare_fence_epoch(false).is_err());
    }

    #[test]
    fn exhausted_epochs_rotate_the_producer_id() {
        let mut m = initialized();
        m.producer_epoch = i16::MAX - 1;
        assert!(m.is_epoch_exhausted());
        let r = m.prepare_producer_id_rotation(11, 1000, 5, true).unwrap();
        assert_eq!(
            (r.producer_id, r.producer_epoch, r.previous_producer_id),
            (11, 0, 10)
        );
        assert_eq!(r.last_producer_epoch, i16::MAX - 1);
    }

    #[test]
    fn states_have_kafkas_ids_and_names() {
        for s in TxnState::ALL {
            assert_eq!(TxnState::from_id(s as i8), Some(s));
            assert_eq!(TxnState::from_name(s.name()), Some(s));
        }
        assert_eq!(TxnState::PrepareEpochFence as i8, 7);
    }
}
