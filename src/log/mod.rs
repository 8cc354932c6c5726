//! The partition log: an ordered set of segments in Kafka's on-disk layout.
//!
//! Invariants:
//! - `log_start_offset <= high_watermark <= log_end_offset`; offsets never go backwards except
//!   by an explicit truncation (replica divergence), and batches are stored byte-for-byte as
//!   produced except for base offset, partition leader epoch, max timestamp (LogAppendTime, or
//!   the largest record timestamp) and, when the topic's `compression.type` pins another
//!   codec, the compression.
//! - Only the last segment (the active one) is appended to; a segment is sealed when rolled.
//! - One writer: the owning partition holds the log behind a mutex and calls it from a blocking
//!   thread; readers receive file slices and read them outside the lock.
//!
//! Crash consistency: appends go to the page cache and are fsynced per `flush.messages` /
//! `flush.ms` (by default never: durability comes from replication, as in Kafka). After an
//! unclean shutdown every segment from the recovery point on is rescanned (`loader`): CRCs
//! validated, a torn tail truncated, indexes rebuilt, producer state replayed from the last
//! snapshot. Before that, a log cleaner swap interrupted by the crash is completed or undone
//! ([`cleaner::recover_interrupted_swaps`]).
//!
//! Log start offset at open: `max(log-start checkpoint, first local segment)` without remote
//! storage; with it, the checkpoint alone (0 when missing), raised to the remote manifest's
//! start by [`Log::apply_manifest`] before the broker serves. The first local segment of a
//! tiered log is only where local retention stopped. The table of every checkpoint, what it
//! means and what happens when it is missing or stale is in [`crate::tiering`].
//!
//! Storage errors (a full disk, EIO), Kafka's log dir failure handling scoped to one log:
//! - An append is all or nothing and is acknowledged only once every step succeeded. Its
//!   fallible steps (a roll, the `.log` write, index entries, a new leader epoch's checkpoint,
//!   the `flush.messages` fsync) run before anything in memory moves; on an error the active
//!   segment and its indexes are cut back to their length before the append
//!   ([`segment::Segment::restore`]; shrinking a file needs no space) and the epoch cache is
//!   restored, so the producer gets KAFKA_STORAGE_ERROR, the next append reuses the offset and
//!   no read, recovery or replica ever sees the failed batch. Producer state changes last.
//! - When that cut-back fails too (or a step after an append's commit fails: the `.txnindex`
//!   entry of an abort marker) the log goes offline: appends, reads, truncation, retention and
//!   DeleteRecords answer a storage error, and [`Log::close`] fails, so the broker writes no
//!   clean-shutdown marker and the next start rescans. At most every [`REPAIR_BACKOFF_MS`] a
//!   produce or fetch tries [`Log::ensure_online`]: reopen from the files with a recovery scan
//!   from the recovery point, then cut back to the last acknowledged log end offset. Known
//!   gap: a restart while offline trusts a whole, CRC-valid batch whose cut-back failed.
//! - A failed roll leaves the log as it was and no file of the new segment; a failed fsync in
//!   [`Log::flush`] does not move the recovery point.
//! - Checkpoints, producer snapshots and the broker catalog are written to a temp file,
//!   fsynced and renamed; a failure removes the temp file and leaves the previous file whole.
//! - Retention and DeleteRecords rename a segment's `.log` to `.log.deleted` first (the commit
//!   point; the next open removes `.deleted` files); a failed rename keeps that segment and
//!   every later one, and the log start offset moves only past what is gone.
//! - Tests inject these errors with [`io_fault`].
//!
//! Module map (Kafka's units of `storage/internals/log` in parentheses):
//! - this file: the [`Log`] type, its errors and answers, its accessors and offline state.
//! - `loader` (`LogLoader`): [`Log::open`], the recovery scan, aborted transactions and
//!   producer state replayed from the segments, and the repair of an offline log.
//! - `validation` (`LogValidator`): the append-time checks of a produced batch, then
//!   recompression, max timestamp, offset and LogAppendTime assignment.
//! - `append` (`UnifiedLog`'s appends, `LocalLog`'s roll and flush): appends as leader or
//!   follower, transaction markers, all-or-nothing writes, rolls, flushes and a clean close.
//! - `truncation`: a replica's divergent suffix cut off, a log restarted empty or at a tiered
//!   offset.
//! - `retention`: time and size retention, DeleteRecords and every move of the log start
//!   offset (remote manifest included).
//! - `segments` (`LogSegments`): the ordered set of segments and lookups in it: reads by
//!   offset, offsets by timestamp, sizes, the sealed segments the tiering service uploads.
//! - `rehydrate`: a remote segment brought back in front of the local log (Strata only).
//! - `marker`: COMMIT/ABORT control batches, encoded and decoded (no I/O).
//! - [`segment`] (`LogSegment`) one `.log` and its indexes; [`index`] (`OffsetIndex`,
//!   `TimeIndex`) the sparse indexes; [`txn_index`], [`producer_state`]
//!   (`ProducerStateManager`), [`leader_epoch`] (`LeaderEpochFileCache`), [`checkpoint`],
//!   [`batch`], [`cleaner`] (`LogCleaner`) and [`io_fault`] (fault injection for tests).

pub mod batch;
pub mod checkpoint;
pub mod cleaner;
pub mod index;
pub mod io_fault;
pub mod leader_epoch;
pub mod producer_state;
pub mod segment;
pub mod txn_index;

mod append;
mod loader;
mod marker;
pub mod rehydrate;
mod retention;
mod segments;
mod truncation;
mod validation;

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use kafka_protocol::ResponseError;

use crate::config::TopicConfig;
use batch::BatchError;
use leader_epoch::LeaderEpochCache;
use producer_state::{ProducerError, ProducerStateManager};
use segment::{Segment, SegmentLimits};

pub use append::FollowerAppend;
pub use marker::TxnMarker;
pub use segments::first_record_at_or_after;
pub use truncation::{LogSeed, SEED_MARKER};

/// Where an append came from; clients are validated, replicas are not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendOrigin {
    Client,
    /// The broker's own coordinators (Kafka's `AppendOrigin.COORDINATOR`): Kafka's
    /// client-only batch checks (offset range, sequence, control) do not apply.
    Coordinator,
    Replication,
}

#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    #[error("corrupt record batch: {0}")]
    Corrupt(BatchError),
    /// Refused by the record codec's validation (Kafka's `LogValidator`): CORRUPT_MESSAGE or
    /// INVALID_RECORD as [`strata_records::RecordsError::kafka_error`] says.
    #[error("{0}")]
    Records(strata_records::RecordsError),
    #[error("invalid record: {0}")]
    InvalidRecord(String),
    /// Records refused one by one (Kafka's `RecordValidationException`): INVALID_RECORD with
    /// the produce response's per-record errors (index in the batch, message).
    #[error("{message}")]
    RecordErrors {
        /// INVALID_TIMESTAMP rather than INVALID_RECORD (a record's timestamp is out of
        /// range), as Kafka's `processRecordErrors` decides.
        invalid_timestamp: bool,
        message: String,
        record_errors: Vec<(i32, String)>,
    },
    #[error("record batch of {size} bytes exceeds max.message.bytes {max}")]
    MessageTooLarge { size: usize, max: usize },
    #[error("timestamp {timestamp} of the batch is out of range (now {now})")]
    InvalidTimestamp { timestamp: i64, now: i64 },
    #[error(transparent)]
    Producer(#[from] ProducerError),
    /// The partition is not led by this broker (Kafka's NOT_LEADER_OR_FOLLOWER).
    #[error("this broker is not the leader of the partition")]
    NotLeaderOrFollower,
    /// A replicated batch does not continue the log (Kafka's UnexpectedAppendOffsetException).
    #[error("replicated batch at offset {base_offset} does not follow the log end offset {log_end_offset}")]
    UnexpectedOffset {
        base_offset: i64,
        log_end_offset: i64,
    },
    #[error("storage error: {0}")]
    Io(#[from] io::Error),
}

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("offset {offset} is out of range [{log_start_offset}, {log_end_offset}]")]
    OffsetOutOfRange {
        offset: i64,
        log_start_offset: i64,
        log_end_offset: i64,
    },
    #[error("storage error: {0}")]
    Io(#[from] io::Error),
    /// The offset is in the log but below the local log start: it is served from remote
    /// storage.
    #[error("offset {offset} is in remote storage (local log starts at {local_start_offset})")]
    Remote {
        offset: i64,
        local_start_offset: i64,
    },
}

impl AppendError {
    /// The Kafka error a produce answers with.
    pub fn code(&self) -> ResponseError {
        match self {
            AppendError::Corrupt(_) => ResponseError::CorruptMessage,
            AppendError::Records(e) => match e.kafka_error() {
                strata_records::KafkaError::CorruptMessage => ResponseError::CorruptMessage,
                strata_records::KafkaError::InvalidRecord => ResponseError::InvalidRecord,
                strata_records::KafkaError::InvalidTimestamp => ResponseError::InvalidTimestamp,
            },
            AppendError::RecordErrors {
                invalid_timestamp: true,
                ..
            } => ResponseError::InvalidTimestamp,
            AppendError::InvalidRecord(_) | AppendError::RecordErrors { .. } => {
                ResponseError::InvalidRecord
            }
            AppendError::MessageTooLarge { .. } => ResponseError::MessageTooLarge,
            AppendError::InvalidTimestamp { .. } => ResponseError::InvalidTimestamp,
            AppendError::Producer(ProducerError::InvalidProducerEpoch { .. }) => {
                ResponseError::InvalidProducerEpoch
            }
            AppendError::Producer(ProducerError::OutOfOrderSequence { .. }) => {
                ResponseError::OutOfOrderSequenceNumber
            }
            AppendError::Producer(ProducerError::CoordinatorFenced { .. }) => {
                ResponseError::TransactionCoordinatorFenced
            }
            AppendError::NotLeaderOrFollower => ResponseError::NotLeaderOrFollower,
            AppendError::UnexpectedOffset { .. } => ResponseError::UnknownServerError,
            AppendError::Io(_) => ResponseError::KafkaStorageError,
        }
    }
}

impl ReadError {
    /// The Kafka error a fetch answers with.
    pub fn code(&self) -> ResponseError {
        match self {
            ReadError::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange,
            ReadError::Io(_) => ResponseError::KafkaStorageError,
            ReadError::Remote { .. } => ResponseError::OffsetOutOfRange,
        }
    }
}

/// Result of a successful append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    pub base_offset: i64,
    pub last_offset: i64,
    /// The broker time stamped on the batch for LogAppendTime topics, else -1.
    pub log_append_time: i64,
    /// The batch was a retry of one already in the log; nothing was written.
    pub duplicate: bool,
    pub records: i32,
    pub bytes: usize,
}

/// A (timestamp, offset, leader epoch) answer to ListOffsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampAndOffset {
    pub timestamp: i64,
    pub offset: i64,
    pub leader_epoch: i32,
}

/// Options that come from the broker rather than the topic.
#[derive(Debug, Clone, Copy)]
pub struct LoadOptions {
    pub clean_shutdown: bool,
    pub recovery_point: Option<i64>,
    pub log_start_offset: Option<i64>,
    pub now_ms: i64,
}

pub struct Log {
    dir: PathBuf,
    config: TopicConfig,
    segments: BTreeMap<i64, Segment>,
    log_start_offset: i64,
    log_end_offset: i64,
    high_watermark: i64,
    recovery_point: i64,
    epochs: LeaderEpochCache,
    producers: ProducerStateManager,
    unflushed_messages: i64,
    last_flush_ms: i64,
    /// With remote storage: the offset below which the remote manifest covers the log (-1
    /// until known). Local segments below it may be deleted by local retention.
    remote_end_offset: i64,
    /// The highest offset a DeleteRecords request moved the log start to in this process (-1
    /// for none): with the bytes not yet uploaded, the only local input remote retention
    /// takes (rules in [`crate::tiering`]). In memory only: once a tiering pass applied it,
    /// the manifest carries it.
    delete_records_offset: i64,
    /// Aborted transactions of the local segments (from their `.txnindex` files), in marker
    /// order.
    aborted: Vec<txn_index::AbortedTxn>,
    /// Set when a failed append could not be rolled back (or a step after an append's commit
    /// failed): the files may hold bytes the in-memory state does not describe. Appends,
    /// reads and retention answer a storage error until [`Log::ensure_online`] repairs the
    /// log from its files (Kafka takes the log dir offline).
    offline: Option<String>,
    /// When the last repair of an offline log was tried (ms), to retry at most every
    /// [`REPAIR_BACKOFF_MS`].
    last_repair_ms: i64,
    /// Reused buffers for validating produced batches (one writer per log).
    scratch: strata_records::Scratch,
    /// Counts the operations that may rewrite sealed segments (truncation, a cleaned
    /// segment swapped in, a repair): a replica move copies sealed segments without the
    /// log's lock only while this does not change (see [`Log::rewrites`]).
    rewrites: u64,
    /// Remote reads and the range they made hot (rehydration).
    hot: rehydrate::HotReads,
}

/// How often an offline log retries its repair.
pub const REPAIR_BACKOFF_MS: i64 = 1_000;

/// The total and usable bytes of the file system holding `dir` (Kafka's
/// `FileStore.getTotalSpace` / `getUsableSpace`: usable is what an unprivileged writer may
/// still use).
pub fn disk_space(dir: &Path) -> Option<(i64, i64)> {
    let (total, usable) = strata_tiering::disk_tier::free_space(dir)?;
    Some((
        i64::try_from(total).unwrap_or(i64::MAX),
        i64::try_from(usable).unwrap_or(i64::MAX),
    ))
}

fn limits(config: &TopicConfig) -> SegmentLimits {
    SegmentLimits {
        index_interval_bytes: config.index_interval_bytes,
        max_index_bytes: config.segment_index_bytes,
    }
}

impl Log {
    /// The last stable offset: no record at or above it belongs to an undecided transaction.
    pub fn last_stable_offset(&self) -> i64 {
        self.producers
            .first_unstable_offset()
            .map_or(self.high_watermark, |o| o.min(self.high_watermark))
    }

    /// Aborted transactions overlapping `[from, upper)`, for a read_committed fetch.
    pub fn aborted_transactions(&self, from: i64, upper: i64) -> Vec<txn_index::AbortedTxn> {
        self.aborted
            .iter()
            .filter(|t| t.last_offset >= from && t.first_offset < upper)
            .copied()
            .collect()
    }

    /// Producer state for DescribeProducers: (producer id, epoch, last sequence, last
    /// timestamp, coordinator epoch, current transaction start offset or -1).
    pub fn producer_states(&self) -> Vec<(i64, i16, i32, i64, i32, i64)> {
        self.producers.describe()
    }

    /// Whether the producer has a transaction in progress here at `producer_epoch` (Kafka's
    /// `hasOngoingTransaction`: its later batches need no verification with the coordinator).
    pub fn has_ongoing_transaction(&self, producer_id: i64, producer_epoch: i16) -> bool {
        self.producers
            .get(producer_id)
            .is_some_and(|e| e.current_txn_first_offset.is_some() && e.epoch == producer_epoch)
    }

    /// Whether a storage error left the log offline (see [`Log::ensure_online`]).
    pub fn is_offline(&self) -> bool {
        self.offline.is_some()
    }

    fn offline_error(&self) -> io::Error {
        io::Error::other(format!(
            "log {} is offline after a storage error: {}",
            self.dir.display(),
            self.offline.as_deref().unwrap_or("")
        ))
    }

    /// Fails with a storage error while the log is offline, without trying to repair it.
    fn check_online(&self) -> io::Result<()> {
        match self.offline {
            Some(_) => Err(self.offline_error()),
            None => Ok(()),
        }
    }

    fn take_offline(&mut self, reason: String) {
        tracing::error!(dir = %self.dir.display(), log_end_offset = self.log_end_offset, reason = %reason, "log offline: appends and reads answer KAFKA_STORAGE_ERROR until a recovery scan repairs it");
        self.offline = Some(reason);
    }

    /// Records that `epoch` starts at `start_offset` (a new leader starts its epoch at its log
    /// end offset, Kafka's `assignEpochStartOffset`).
    pub fn assign_epoch_start_offset(&mut self, epoch: i32, start_offset: i64) -> io::Result<()> {
        self.epochs.assign(epoch, start_offset)
    }

    pub fn expire_producers(&mut self, now_ms: i64, expiration_ms: i64) {
        self.producers.expire(now_ms, expiration_ms);
    }

    /// Takes a topic's new config. Remote storage turned off (with its data deleted,
    /// KIP-950) leaves the local log as the whole log: the log start moves to the first local
    /// offset and nothing is remote any more.
    pub fn set_config(&mut self, config: TopicConfig) -> io::Result<()> {
        let remote_off = self.config.remote_storage_enable && !config.remote_storage_enable;
        self.config = config;
        if remote_off {
            self.remote_end_offset = -1;
            self.advance_log_start_offset(self.local_start_offset())?;
        }
        Ok(())
    }

    pub fn update_high_watermark(&mut self, hw: i64) {
        self.high_watermark = hw.clamp(self.log_start_offset, self.log_end_offset);
    }

    /// OffsetForLeaderEpoch: (epoch, end offset) for the largest epoch <= `epoch`.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> (i32, i64) {
        self.epochs.end_offset_for(epoch, self.log_end_offset)
    }

    pub fn latest_epoch(&self) -> Option<i32> {
        self.epochs.latest_epoch()
    }

    /// The epoch of the record at `offset` (Kafka's `epochForOffset`).
    pub fn epoch_for_offset(&self, offset: i64) -> Option<i32> {
        self.epochs.epoch_for_offset(offset)
    }

    /// The earliest leader epoch entry: (epoch, start offset).
    pub fn earliest_epoch(&self) -> Option<(i32, i64)> {
        self.epochs.earliest()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Changes when sealed segments may have been rewritten; between two equal readings
    /// only the active segment changed and whole segments may have been deleted.
    pub fn rewrites(&self) -> u64 {
        self.rewrites
    }

    /// Reopens the log from `dir`, a byte-identical copy of its files made after
    /// [`Log::close`] (a replica moved to another log dir), keeping what lives only in
    /// memory: the high watermark, the remote end offset, a DeleteRecords offset not yet
    /// tiered. On error the log is unchanged (its files are still where they were).
    pub fn reopen_in(&mut self, dir: &Path, now_ms: i64) -> io::Result<()> {
        let opts = LoadOptions {
            clean_shutdown: true,
            recovery_point: Some(self.recovery_point),
            log_start_offset: Some(self.log_start_offset),
            now_ms,
        };
        let mut moved = Log::open(dir, self.config.clone(), opts)?;
        if moved.log_end_offset != self.log_end_offset {
            return Err(io::Error::other(format!(
                "the copy in {} ends at {}, the log at {}",
                dir.display(),
                moved.log_end_offset,
                self.log_end_offset
            )));
        }
        moved.high_watermark = self.high_watermark;
        moved.remote_end_offset = self.remote_end_offset;
        moved.delete_records_offset = self.delete_records_offset;
        moved.last_flush_ms = self.last_flush_ms;
        moved.rewrites = self.rewrites + 1;
        *self = moved;
        Ok(())
    }

    pub fn remote_end_offset(&self) -> i64 {
        self.remote_end_offset
    }

    /// Records that the remote manifest covers the log below `offset`.
    pub fn set_remote_end_offset(&mut self, offset: i64) {
        self.remote_end_offset = self.remote_end_offset.max(offset);
    }

    pub fn config(&self) -> &TopicConfig {
        &self.config
    }

    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset
    }

    pub fn log_end_offset(&self) -> i64 {
        self.log_end_offset
    }

    pub fn high_watermark(&self) -> i64 {
        self.high_watermark
    }

    pub fn recovery_point(&self) -> i64 {
        self.recovery_point
    }
}

#[cfg(test)]
mod replica_tests;
#[cfg(test)]
mod storage_error_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod txn_tests;
