//! The partition log: an ordered set of segments in Kafka's on-disk layout.
//!
//! Invariants:
//! - `log_start_offset <= high_watermark <= log_end_offset`; offsets never go backwards except
//!   by an explicit truncation (replica divergence), and batches are stored byte-for-byte as
//!   produced except for base offset, partition leader epoch and (LogAppendTime) max timestamp.
//! - Only the last segment (the active one) is appended to; a segment is sealed when rolled.
//! - One writer: the owning partition holds the log behind a mutex and calls it from a blocking
//!   thread; readers receive file slices and read them outside the lock.
//!
//! Crash consistency: appends go to the page cache and are fsynced per `flush.messages` /
//! `flush.ms` (by default never: durability comes from replication, as in Kafka). After an
//! unclean shutdown every segment from the recovery point on is rescanned: CRCs validated, a
//! torn tail truncated, indexes rebuilt, producer state replayed from the last snapshot.
//! Before that, a log cleaner swap interrupted by the crash is completed or undone
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

pub mod batch;
pub mod checkpoint;
pub mod cleaner;
pub mod index;
pub mod io_fault;
pub mod leader_epoch;
pub mod producer_state;
pub mod segment;
pub mod txn_index;

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{Compression, RecordBatchEncoder, RecordEncodeOptions};

use crate::config::TopicConfig;
use batch::{BatchError, BatchHeader, BatchIter, Codec};
use leader_epoch::LeaderEpochCache;
use producer_state::{ProducerError, ProducerStateManager, SequenceCheck};
use segment::{FileSlice, Segment, SegmentLimits};

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
}

/// How often an offline log retries its repair.
pub const REPAIR_BACKOFF_MS: i64 = 1_000;

fn limits(config: &TopicConfig) -> SegmentLimits {
    SegmentLimits {
        index_interval_bytes: config.index_interval_bytes,
        max_index_bytes: config.segment_index_bytes,
    }
}

fn compression_for(name: &str) -> Option<Compression> {
    match name {
        "uncompressed" => Some(Compression::None),
        "gzip" => Some(Compression::Gzip),
        "snappy" => Some(Compression::Snappy),
        "lz4" => Some(Compression::Lz4),
        "zstd" => Some(Compression::Zstd),
        _ => None,
    }
}

fn codec_matches(codec: Codec, target: Compression) -> bool {
    matches!(
        (codec, target),
        (Codec::None, Compression::None)
            | (Codec::Gzip, Compression::Gzip)
            | (Codec::Snappy, Compression::Snappy)
            | (Codec::Lz4, Compression::Lz4)
            | (Codec::Zstd, Compression::Zstd)
    )
}

impl Log {
    /// Opens (creating if needed) the log in `dir`.
    pub fn open(dir: &Path, config: TopicConfig, opts: LoadOptions) -> io::Result<Log> {
        fs::create_dir_all(dir)?;
        cleaner::recover_interrupted_swaps(dir)?;
        let mut bases = Vec::new();
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().to_string();
            if name.ends_with(".tmp") {
                let _ = fs::remove_file(entry.path());
                continue;
            }
            if let Some(stem) = name.strip_suffix(".log") {
                if let Ok(base) = stem.parse::<i64>() {
                    bases.push(base);
                }
            }
        }
        bases.sort_unstable();
        let limits = limits(&config);
        let recovery_point = opts.recovery_point.unwrap_or(0);
        // Segments from the one holding the recovery point on are rescanned after a crash.
        let recover_from = bases
            .iter()
            .rev()
            .find(|&&b| b <= recovery_point)
            .copied()
            .unwrap_or(i64::MIN);
        let mut segments = BTreeMap::new();
        let mut truncated = false;
        for base in bases {
            if truncated {
                // Everything after a corrupt segment is unreachable: Kafka deletes it too.
                tracing::warn!(dir = %dir.display(), base, "deleting segment after a corrupt one");
                let (seg, _) = Segment::open(dir, base, limits, false)?;
                seg.delete()?;
                continue;
            }
            let recover = !opts.clean_shutdown && base >= recover_from;
            let (seg, result) = Segment::open(dir, base, limits, recover)?;
            if let Some(r) = result {
                if r.truncated_bytes > 0 {
                    tracing::warn!(dir = %dir.display(), base, truncated = r.truncated_bytes, "truncated a torn or corrupt segment tail");
                    truncated = true;
                }
            }
            segments.insert(base, seg);
        }
        let initial = opts.log_start_offset.unwrap_or(0).max(0);
        if segments.is_empty() {
            segments.insert(initial, Segment::create(dir, initial, limits, opts.now_ms)?);
        }
        let first_base = *segments.keys().next().unwrap_or(&0);
        let log_end_offset = segments
            .values()
            .next_back()
            .map(|s| s.next_offset())
            .unwrap_or(initial);
        // With remote storage the log starts below the first local segment as soon as a
        // segment has been tiered: the first local segment says nothing about the log start,
        // and a missing checkpoint means "not known yet" (0), never "the local start". The
        // manifest raises it before the broker serves ([`Log::apply_manifest`]).
        let log_start_offset = if config.remote_storage_enable {
            opts.log_start_offset.unwrap_or(0).max(0)
        } else {
            opts.log_start_offset.unwrap_or(first_base).max(first_base)
        }
        .min(log_end_offset);
        let mut epochs = LeaderEpochCache::load(dir)?;
        epochs.truncate_from_end(log_end_offset)?;
        let mut log = Log {
            dir: dir.to_path_buf(),
            config,
            segments,
            log_start_offset,
            log_end_offset,
            high_watermark: log_end_offset,
            recovery_point: log_end_offset,
            epochs,
            producers: ProducerStateManager::new(),
            unflushed_messages: 0,
            last_flush_ms: opts.now_ms,
            remote_end_offset: -1,
            delete_records_offset: -1,
            aborted: Vec::new(),
            offline: None,
            last_repair_ms: i64::MIN,
            scratch: strata_records::Scratch::new(),
        };
        log.load_aborted_txns()?;
        log.load_producer_state()?;
        Ok(log)
    }

    /// Reads the segments' `.txnindex` files, dropping entries past the log end (a torn tail
    /// truncated by recovery).
    fn load_aborted_txns(&mut self) -> io::Result<()> {
        for &base in self.segments.keys() {
            let path = txn_index::path(&self.dir, base);
            let entries = txn_index::read(&path)?;
            let keep: Vec<_> = entries
                .iter()
                .copied()
                .filter(|t| t.last_offset < self.log_end_offset)
                .collect();
            if keep.len() != entries.len() {
                txn_index::rewrite(&path, &keep)?;
            }
            self.aborted.extend(keep);
        }
        Ok(())
    }

    /// [`Log::index_aborted_txn`] for a marker already in the log: the marker cannot be taken
    /// back, so a failure takes the log offline; the repair replays the marker from the log
    /// (the producer snapshot is older) and writes the entry again.
    fn index_aborted_txn_after_commit(&mut self, t: txn_index::AbortedTxn) -> io::Result<()> {
        if let Err(e) = self.index_aborted_txn(t) {
            self.take_offline(format!(
                "cannot index the aborted transaction of the marker at {}: {e}",
                t.last_offset
            ));
            return Err(e);
        }
        Ok(())
    }

    /// Records an aborted transaction in the index of the segment holding its marker.
    fn index_aborted_txn(&mut self, t: txn_index::AbortedTxn) -> io::Result<()> {
        if self.aborted.iter().any(|a| a.last_offset == t.last_offset) {
            return Ok(());
        }
        let base = self
            .segments
            .range(..=t.last_offset)
            .next_back()
            .map(|(b, _)| *b)
            .unwrap_or(0);
        txn_index::append(&txn_index::path(&self.dir, base), &t)?;
        self.aborted.push(t);
        Ok(())
    }

    /// Loads the newest usable snapshot at or below the log end and replays the rest.
    fn load_producer_state(&mut self) -> io::Result<()> {
        let snapshots = ProducerStateManager::list_snapshots(&self.dir)?;
        let mut replay_from = self.log_start_offset;
        for &offset in snapshots.iter().rev() {
            if offset > self.log_end_offset {
                let _ = fs::remove_file(ProducerStateManager::snapshot_path(&self.dir, offset));
                continue;
            }
            match ProducerStateManager::read_snapshot(&ProducerStateManager::snapshot_path(
                &self.dir, offset,
            )) {
                Ok(state) => {
                    self.producers = state;
                    replay_from = offset.max(self.log_start_offset);
                    break;
                }
                Err(e) => {
                    tracing::warn!(dir = %self.dir.display(), offset, error = %e, "ignoring unreadable producer snapshot")
                }
            }
        }
        let mut aborted = Vec::new();
        for seg in self.segments.values() {
            if seg.next_offset() <= replay_from {
                continue;
            }
            for (pos, h) in seg.headers_from(replay_from)? {
                if h.base_offset < replay_from {
                    continue;
                }
                if h.is_control() && h.is_transactional() && h.has_producer_id() {
                    // Rebuild index entries a crash may have lost between the marker and its
                    // `.txnindex` append.
                    let raw = seg.read_batch_at(pos, &h)?;
                    let completed = self.producers.complete_txn(&h, -1);
                    if marker_type(&raw) == Some(MARKER_ABORT) {
                        let lso = self
                            .producers
                            .first_unstable_offset_excluding(h.producer_id)
                            .unwrap_or(h.base_offset + 1);
                        aborted.push(txn_index::AbortedTxn {
                            producer_id: completed.producer_id,
                            first_offset: completed.first_offset,
                            last_offset: completed.last_offset,
                            last_stable_offset: lso,
                        });
                    }
                } else {
                    self.producers.update(&h);
                }
            }
        }
        for t in aborted {
            self.index_aborted_txn(t)?;
        }
        Ok(())
    }

    /// Forgets aborted transactions whose marker is below the first local segment.
    fn prune_aborted_txns(&mut self) {
        if let Some(&first) = self.segments.keys().next() {
            self.aborted.retain(|t| t.last_offset >= first);
        }
    }

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

    /// Appends a COMMIT or ABORT marker for the producer's transaction (WriteTxnMarkers).
    /// Returns the marker's offset.
    pub fn append_txn_marker(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
        commit: bool,
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<i64, AppendError> {
        self.ensure_online(now_ms)?;
        self.producers
            .check_marker(producer_id, producer_epoch, coordinator_epoch)?;
        let offset = self.log_end_offset;
        let mut owned = control_batch(
            producer_id,
            producer_epoch,
            coordinator_epoch,
            commit,
            now_ms,
        )
        .map_err(AppendError::InvalidRecord)?;
        batch::assign_offset_and_epoch(&mut owned, offset, leader_epoch);
        let header = BatchHeader::parse(&owned).map_err(AppendError::Corrupt)?;
        let first = self.producers.ongoing_txn(producer_id).unwrap_or(offset);
        // append_batch updates the producer state, which closes the transaction.
        self.append_batch(&header, &owned, leader_epoch, now_ms)?;
        self.producers
            .set_coordinator_epoch(producer_id, coordinator_epoch);
        if !commit {
            let lso = self
                .producers
                .first_unstable_offset_excluding(producer_id)
                .unwrap_or(offset + 1);
            self.index_aborted_txn_after_commit(txn_index::AbortedTxn {
                producer_id,
                first_offset: first,
                last_offset: offset,
                last_stable_offset: lso,
            })?;
        }
        Ok(offset)
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

    /// Repairs an offline log (at most every [`REPAIR_BACKOFF_MS`]): reopens it from its files
    /// with a recovery scan from the recovery point, and cuts it back to the last log end
    /// offset this log acknowledged, so bytes of a failed append that reached a file are never
    /// served. Fails (the log stays offline) while that is impossible, e.g. the disk is still
    /// full and the indexes cannot be rebuilt.
    pub fn ensure_online(&mut self, now_ms: i64) -> io::Result<()> {
        if self.offline.is_none() {
            return Ok(());
        }
        if now_ms.saturating_sub(self.last_repair_ms) < REPAIR_BACKOFF_MS {
            return Err(self.offline_error());
        }
        self.last_repair_ms = now_ms;
        match self.reopen(now_ms) {
            Ok(()) => {
                tracing::warn!(dir = %self.dir.display(), log_end_offset = self.log_end_offset, "log repaired by a recovery scan: back online");
                Ok(())
            }
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), error = %e, "offline log not repaired yet");
                Err(self.offline_error())
            }
        }
    }

    fn reopen(&mut self, now_ms: i64) -> io::Result<()> {
        let good_end = self.log_end_offset;
        let opts = LoadOptions {
            clean_shutdown: false,
            recovery_point: Some(self.recovery_point),
            log_start_offset: Some(self.log_start_offset),
            now_ms,
        };
        let mut fresh = Log::open(&self.dir, self.config.clone(), opts)?;
        if fresh.log_end_offset > good_end {
            fresh.truncate_to(good_end, now_ms)?;
        }
        if fresh.log_end_offset < good_end {
            tracing::error!(dir = %self.dir.display(), log_end_offset = good_end, recovered_end_offset = fresh.log_end_offset, "the repaired log ends before its acknowledged end: records were lost by the storage error");
        }
        fresh.high_watermark = self.high_watermark.min(fresh.log_end_offset);
        // Nothing became more durable by being reread.
        fresh.recovery_point = self.recovery_point.min(fresh.log_end_offset);
        fresh.remote_end_offset = self.remote_end_offset;
        fresh.last_flush_ms = self.last_flush_ms;
        fresh.last_repair_ms = self.last_repair_ms;
        *self = fresh;
        Ok(())
    }

    fn active(&mut self) -> &mut Segment {
        self.segments
            .values_mut()
            .next_back()
            .expect("a log always has an active segment")
    }

    /// Validates, assigns offsets to, and appends the batch(es) of one produce request
    /// partition.
    pub fn append_as_leader(
        &mut self,
        records: &[u8],
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<AppendInfo, AppendError> {
        self.append_as_leader_from(AppendOrigin::Client, records, leader_epoch, now_ms)
    }

    /// [`Log::append_as_leader`] for a given origin (a client or the broker's coordinators).
    pub fn append_as_leader_from(
        &mut self,
        origin: AppendOrigin,
        records: &[u8],
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<AppendInfo, AppendError> {
        self.ensure_online(now_ms)?;
        let mut batches = Vec::new();
        for item in BatchIter::new(records) {
            let (_, h, bytes) = item.map_err(|e| match e {
                BatchError::UnsupportedMagic(m) => AppendError::InvalidRecord(format!(
                    "Produce requests are only allowed to contain record batches with magic version 2, got {m}"
                )),
                other => AppendError::Corrupt(other),
            })?;
            batches.push((h, bytes));
        }
        let [(header, bytes)] = batches.as_slice() else {
            return Err(AppendError::InvalidRecord(if batches.is_empty() {
                "Produce requests must have at least one record batch per partition".into()
            } else {
                "Produce requests are only allowed to contain exactly one record batch per partition".into()
            }));
        };
        let (header, bytes) = (*header, *bytes);
        if bytes.len() > self.config.max_message_bytes {
            return Err(AppendError::MessageTooLarge {
                size: bytes.len(),
                max: self.config.max_message_bytes,
            });
        }
        let validated = self.validate_produced(bytes, origin, now_ms)?;
        if header.is_transactional() && !header.has_producer_id() {
            return Err(AppendError::InvalidRecord(
                "transactional batches need a producer id".into(),
            ));
        }
        if let SequenceCheck::Duplicate(dup) = self.producers.check(&header)? {
            return Ok(AppendInfo {
                base_offset: dup.first_offset,
                last_offset: dup.last_offset,
                log_append_time: if self.config.log_append_time {
                    dup.timestamp
                } else {
                    -1
                },
                duplicate: true,
                records: header.records_count,
                bytes: 0,
            });
        }
        // Recompress only when the topic pins a codec the batch does not use.
        let mut owned = match compression_for(&self.config.compression_type) {
            Some(target) if !codec_matches(validated.codec, target) => {
                recompress(bytes, target, self.config.max_decompressed_batch_bytes)?
            }
            _ => bytes.to_vec(),
        };
        // As Kafka, the batch's max timestamp is the largest record timestamp, whatever the
        // producer wrote (the CRC covers it).
        if !self.config.log_append_time && validated.max_timestamp != header.max_timestamp {
            batch::set_max_timestamp(&mut owned, validated.max_timestamp);
        }
        let base_offset = self.log_end_offset;
        batch::assign_offset_and_epoch(&mut owned, base_offset, leader_epoch);
        let log_append_time = if self.config.log_append_time {
            batch::set_log_append_time(&mut owned, now_ms);
            now_ms
        } else {
            -1
        };
        let header = BatchHeader::parse(&owned).map_err(AppendError::Corrupt)?;
        self.append_batch(&header, &owned, leader_epoch, now_ms)?;
        Ok(AppendInfo {
            base_offset,
            last_offset: header.last_offset(),
            log_append_time,
            duplicate: false,
            records: header.records_count,
            bytes: owned.len(),
        })
    }

    /// Kafka's `LogValidator` for a client's batch, through the record codec: an uncompressed
    /// batch is walked in place, a compressed one streamed through the log's scratch buffer
    /// under `strata.max.decompressed.batch.bytes` (nothing decompressed is kept).
    fn validate_produced(
        &mut self,
        bytes: &[u8],
        origin: AppendOrigin,
        now_ms: i64,
    ) -> Result<strata_records::ValidatedBatch, AppendError> {
        let topic_partition = self
            .dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let opts = strata_records::ValidationOptions {
            topic_partition: &topic_partition,
            origin_client: origin == AppendOrigin::Client,
            compacted_topic: self.config.cleanup_policy_compact,
            log_append_time: self.config.log_append_time,
            now_ms,
            timestamp_before_max_ms: self.config.message_timestamp_before_max_ms,
            timestamp_after_max_ms: self.config.message_timestamp_after_max_ms,
            max_decompressed_message_bytes: self.config.max_decompressed_message_bytes,
            max_decompressed_batch_bytes: self.config.max_decompressed_batch_bytes,
        };
        strata_records::validate(bytes, &opts, &mut self.scratch).map_err(|e| match e {
            strata_records::ValidateError::Batch(e) => AppendError::Records(e),
            strata_records::ValidateError::Records {
                invalid_timestamp,
                message,
                record_errors,
            } => AppendError::RecordErrors {
                invalid_timestamp,
                message,
                record_errors: record_errors
                    .into_iter()
                    .map(|e| (e.batch_index, e.message))
                    .collect(),
            },
        })
    }

    /// Appends batches fetched from the leader as they are: offsets, partition leader epochs
    /// and producer ids are the leader's (Kafka's `appendAsFollower`). Whole batches only; a
    /// partial batch at the end of a fetch response is left for the next fetch. Each batch's
    /// epoch enters the leader epoch cache, producer state and aborted transactions follow the
    /// markers. Returns the number of bytes appended.
    pub fn append_as_follower(
        &mut self,
        records: &[u8],
        now_ms: i64,
    ) -> Result<usize, AppendError> {
        self.ensure_online(now_ms)?;
        let mut appended = 0;
        for item in BatchIter::new(records) {
            let (_, header, bytes) = match item {
                Ok(b) => b,
                // A fetch response may end with a partial batch: the next fetch gets it whole.
                Err(BatchError::Truncated { .. }) => break,
                Err(e) => return Err(AppendError::Corrupt(e)),
            };
            header.validate(bytes).map_err(AppendError::Corrupt)?;
            if header.base_offset < self.log_end_offset {
                return Err(AppendError::UnexpectedOffset {
                    base_offset: header.base_offset,
                    log_end_offset: self.log_end_offset,
                });
            }
            let abort = header.is_control()
                && header.is_transactional()
                && header.has_producer_id()
                && marker_type(bytes) == Some(MARKER_ABORT);
            let first = self
                .producers
                .ongoing_txn(header.producer_id)
                .unwrap_or(header.base_offset);
            self.append_batch(&header, bytes, header.partition_leader_epoch, now_ms)?;
            // Producer state changes only once the batch is in (a failed append changes none).
            if header.is_control() && header.has_producer_id() {
                let coordinator_epoch = marker_coordinator_epoch(bytes).unwrap_or(-1);
                self.producers
                    .set_coordinator_epoch(header.producer_id, coordinator_epoch);
            }
            if abort {
                let lso = self
                    .producers
                    .first_unstable_offset_excluding(header.producer_id)
                    .unwrap_or(header.base_offset + 1);
                self.index_aborted_txn_after_commit(txn_index::AbortedTxn {
                    producer_id: header.producer_id,
                    first_offset: first,
                    last_offset: header.base_offset,
                    last_stable_offset: lso,
                })?;
            }
            appended += bytes.len();
        }
        Ok(appended)
    }

    /// Records that `epoch` starts at `start_offset` (a new leader starts its epoch at its log
    /// end offset, Kafka's `assignEpochStartOffset`).
    pub fn assign_epoch_start_offset(&mut self, epoch: i32, start_offset: i64) -> io::Result<()> {
        self.epochs.assign(epoch, start_offset)
    }

    /// Removes everything at or above `offset` (a follower's divergent suffix). The log end
    /// offset becomes `offset` or less (a batch straddling it goes whole); the high watermark,
    /// recovery point, leader epochs, producer state and aborted transactions follow. Below
    /// the log start offset the log is emptied and restarted at `offset`. Returns whether
    /// anything was removed.
    pub fn truncate_to(&mut self, offset: i64, now_ms: i64) -> io::Result<bool> {
        self.check_online()?;
        if offset >= self.log_end_offset {
            // Still drop an epoch that starts at the log end: this broker led that epoch
            // without appending, and the entry would make every fetch diverge (as Kafka does).
            self.epochs.truncate_from_end(self.log_end_offset)?;
            return Ok(false);
        }
        if offset < self.log_start_offset {
            self.truncate_fully_and_start_at(offset, now_ms)?;
            return Ok(true);
        }
        let doomed: Vec<i64> = self.segments.range(offset + 1..).map(|(b, _)| *b).collect();
        if doomed.len() == self.segments.len() {
            // Keep a segment to append to.
            self.segments.insert(
                offset,
                Segment::create(&self.dir, offset, limits(&self.config), now_ms)?,
            );
        }
        for base in doomed {
            if base == offset {
                continue;
            }
            if let Some(seg) = self.segments.remove(&base) {
                seg.delete()?;
            }
        }
        if let Some(seg) = self.segments.values_mut().next_back() {
            seg.truncate_to(offset)?;
        }
        self.log_end_offset = self
            .segments
            .values()
            .next_back()
            .map(|s| s.next_offset())
            .unwrap_or(offset);
        let end = self.log_end_offset;
        self.epochs.truncate_from_end(end)?;
        self.high_watermark = self.high_watermark.min(end);
        self.recovery_point = self.recovery_point.min(end);
        // Aborted transactions whose marker is gone leave the indexes.
        let before = self.aborted.len();
        self.aborted.retain(|t| t.last_offset < end);
        if self.aborted.len() != before {
            for &base in self.segments.keys() {
                let path = txn_index::path(&self.dir, base);
                let keep: Vec<_> = txn_index::read(&path)?
                    .into_iter()
                    .filter(|t| t.last_offset < end)
                    .collect();
                txn_index::rewrite(&path, &keep)?;
            }
        }
        // Producer state: the newest snapshot at or below the new end, replayed forward.
        for snapshot in ProducerStateManager::list_snapshots(&self.dir)? {
            if snapshot > end {
                let _ = fs::remove_file(ProducerStateManager::snapshot_path(&self.dir, snapshot));
            }
        }
        self.producers = ProducerStateManager::new();
        self.load_producer_state()?;
        Ok(true)
    }

    /// Deletes every segment and restarts the log empty at `offset` (Kafka's
    /// `truncateFullyAndStartAt`: a follower far behind the leader's log start).
    pub fn truncate_fully_and_start_at(&mut self, offset: i64, now_ms: i64) -> io::Result<()> {
        let bases: Vec<i64> = self.segments.keys().copied().collect();
        for base in bases {
            if let Some(seg) = self.segments.remove(&base) {
                seg.delete()?;
            }
        }
        self.segments.insert(
            offset,
            Segment::create(&self.dir, offset, limits(&self.config), now_ms)?,
        );
        for snapshot in ProducerStateManager::list_snapshots(&self.dir)? {
            let _ = fs::remove_file(ProducerStateManager::snapshot_path(&self.dir, snapshot));
        }
        self.producers = ProducerStateManager::new();
        self.aborted.clear();
        self.epochs.clear()?;
        self.log_start_offset = offset;
        self.log_end_offset = offset;
        self.high_watermark = offset;
        self.recovery_point = offset;
        Ok(())
    }

    /// A follower behind the leader's local log start of a tiered partition (Kafka's
    /// `ReplicaFetcherTierStateMachine` after OFFSET_MOVED_TO_TIERED_STORAGE): empties the
    /// local log and restarts it at the leader's `local_start_offset`, with the partition's
    /// `log_start_offset` below it (the rest lives in remote storage), the leader epochs that
    /// start below `local_start_offset` and the producer state, both taken from the remote
    /// segment that ends there. Local retention may not delete anything at or below the new
    /// start until the manifest says so, but everything below it is remote already.
    pub fn start_at_tiered(
        &mut self,
        log_start_offset: i64,
        local_start_offset: i64,
        epochs: &[(i32, i64)],
        producer_snapshot: Option<&[u8]>,
        now_ms: i64,
    ) -> io::Result<()> {
        self.truncate_fully_and_start_at(local_start_offset, now_ms)?;
        self.log_start_offset = log_start_offset.clamp(0, local_start_offset);
        for &(epoch, start) in epochs {
            if start < local_start_offset {
                self.epochs.assign(epoch, start)?;
            }
        }
        self.epochs.truncate_from_start(self.log_start_offset)?;
        if let Some(snapshot) = producer_snapshot {
            let path = ProducerStateManager::snapshot_path(&self.dir, local_start_offset);
            let tmp = path.with_extension("snapshot.tmp");
            fs::write(&tmp, snapshot)?;
            fs::rename(&tmp, &path)?;
            self.producers = ProducerStateManager::new();
            self.load_producer_state()?;
        }
        self.remote_end_offset = self.remote_end_offset.max(local_start_offset);
        Ok(())
    }

    /// Appends a batch whose offsets are final (leader path after assignment, or replication).
    ///
    /// All or nothing: when a write, index write, leader epoch checkpoint or fsync fails, the
    /// active segment and its indexes are cut back to where they were and nothing in memory
    /// moved (log end offset, producer state, epochs), so the next append reuses the offset
    /// and no read or recovery sees the failed batch. If that rollback fails too the log goes
    /// offline. The producer state changes only after every fallible step.
    fn append_batch(
        &mut self,
        header: &BatchHeader,
        bytes: &[u8],
        leader_epoch: i32,
        now_ms: i64,
    ) -> io::Result<()> {
        self.check_online()?;
        let roll_ms = self.config.segment_ms.saturating_sub(
            self.config
                .segment_jitter_ms
                .min(self.config.segment_ms / 2),
        );
        let segment_bytes = self.config.segment_bytes;
        if self.active().should_roll(
            bytes.len(),
            segment_bytes,
            roll_ms,
            now_ms,
            header.max_timestamp,
        ) {
            self.roll(now_ms)?;
        }
        let mark = self.active().mark();
        let epochs_len = self.epochs.entries().len();
        let flush = self
            .unflushed_messages
            .saturating_add(header.records_count as i64)
            >= self.config.flush_messages;
        if let Err(e) = self.write_batch(header, bytes, leader_epoch, flush) {
            self.roll_back_append(&mark, epochs_len, &e);
            return Err(e);
        }
        // Committed: nothing below can fail.
        self.producers.update(header);
        self.log_end_offset = header.last_offset() + 1;
        if flush {
            self.recovery_point = self.log_end_offset;
            self.unflushed_messages = 0;
            self.last_flush_ms = now_ms;
        } else {
            self.unflushed_messages += header.records_count as i64;
        }
        Ok(())
    }

    /// The fallible part of an append: the bytes, their index entries, a new leader epoch and
    /// (per `flush.messages`) the fsync.
    fn write_batch(
        &mut self,
        header: &BatchHeader,
        bytes: &[u8],
        leader_epoch: i32,
        flush: bool,
    ) -> io::Result<()> {
        self.active().append(header, bytes)?;
        self.epochs.assign(leader_epoch, header.base_offset)?;
        if flush {
            self.active().flush()?;
        }
        Ok(())
    }

    /// Undoes a failed [`Log::write_batch`]; takes the log offline when the files cannot be
    /// cut back.
    fn roll_back_append(
        &mut self,
        mark: &segment::SegmentMark,
        epochs_len: usize,
        cause: &io::Error,
    ) {
        self.epochs.restore_len(epochs_len);
        match self.active().restore(mark) {
            // The caller logs the failure itself (the produce handler, once).
            Ok(()) => {
                tracing::debug!(dir = %self.dir.display(), log_end_offset = self.log_end_offset, error = %cause, "append failed; rolled the segment back to the log end offset");
            }
            Err(e) => self.take_offline(format!(
                "append failed ({cause}) and the segment could not be cut back to offset {}: {e}",
                self.log_end_offset
            )),
        }
    }

    /// Seals the active segment and starts a new one at the log end offset. A failure leaves
    /// the log as it was: the flush and the producer snapshot change nothing in memory and a
    /// half-created segment removes its files.
    pub fn roll(&mut self, now_ms: i64) -> io::Result<()> {
        self.check_online()?;
        let base = self.log_end_offset;
        if self.segments.contains_key(&base) {
            return Ok(());
        }
        // The sealed segment's data must be durable before a later flush moves the recovery
        // point past it, so flush it now (Kafka does this asynchronously).
        self.active().flush()?;
        self.producers.write_snapshot(&self.dir, base)?;
        self.prune_snapshots()?;
        let limits = limits(&self.config);
        self.segments
            .insert(base, Segment::create(&self.dir, base, limits, now_ms)?);
        Ok(())
    }

    fn prune_snapshots(&self) -> io::Result<()> {
        let snapshots = ProducerStateManager::list_snapshots(&self.dir)?;
        // Keep two snapshots, and with remote storage those of segments not uploaded yet
        // (each uploaded segment carries the snapshot at its end).
        if snapshots.len() > 2 {
            for &o in &snapshots[..snapshots.len() - 2] {
                if self.config.remote_storage_enable && o > self.remote_end_offset {
                    continue;
                }
                let _ = fs::remove_file(ProducerStateManager::snapshot_path(&self.dir, o));
            }
        }
        Ok(())
    }

    /// fsyncs the active segment and moves the recovery point to the log end (not on an
    /// error: the recovery point only moves over data known to be durable).
    pub fn flush(&mut self, now_ms: i64) -> io::Result<()> {
        self.check_online()?;
        if self.recovery_point < self.log_end_offset {
            // Segments below the active one were flushed when they were rolled.
            self.active().flush()?;
            self.recovery_point = self.log_end_offset;
        }
        self.unflushed_messages = 0;
        self.last_flush_ms = now_ms;
        Ok(())
    }

    /// Flushes when `flush.ms` has elapsed since the last flush.
    pub fn maybe_flush_on_time(&mut self, now_ms: i64) -> io::Result<()> {
        if self.offline.is_some() {
            return Ok(());
        }
        if self.recovery_point < self.log_end_offset
            && now_ms - self.last_flush_ms >= self.config.flush_ms
        {
            self.flush(now_ms)?;
        }
        Ok(())
    }

    /// Reads batches from `offset`, never past `max_offset` (the high watermark for consumers).
    pub fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        max_offset: i64,
        min_one: bool,
    ) -> Result<Option<FileSlice>, ReadError> {
        self.check_online()?;
        if offset < self.log_start_offset || offset > self.log_end_offset {
            return Err(ReadError::OffsetOutOfRange {
                offset,
                log_start_offset: self.log_start_offset,
                log_end_offset: self.log_end_offset,
            });
        }
        if offset >= max_offset {
            return Ok(None);
        }
        let local_start_offset = self.local_start_offset();
        if offset < local_start_offset {
            return Err(ReadError::Remote {
                offset,
                local_start_offset,
            });
        }
        let start_base = self
            .segments
            .range(..=offset)
            .next_back()
            .map(|(b, _)| *b)
            .unwrap_or(i64::MIN);
        for (_, seg) in self.segments.range(start_base..) {
            let max_position =
                if max_offset >= self.log_end_offset || max_offset >= seg.next_offset() {
                    u64::MAX
                } else {
                    seg.position_of(max_offset)?
                };
            if let Some(slice) = seg.read(offset, max_bytes, max_position, min_one)? {
                return Ok(Some(slice).filter(|s| s.len > 0));
            }
        }
        Ok(None)
    }

    /// Kafka's offsetsForTimes: the first record with timestamp >= `timestamp`, below the high
    /// watermark. Decompresses only the one batch that holds the answer.
    pub fn offset_for_timestamp(&self, timestamp: i64) -> io::Result<Option<TimestampAndOffset>> {
        for seg in self.segments.values() {
            if seg.max_timestamp() < timestamp || seg.base_offset() >= self.high_watermark {
                continue;
            }
            let start = seg.time_lookup_offset(timestamp).max(self.log_start_offset);
            for (pos, h) in seg.headers_from(start)? {
                if h.base_offset >= self.high_watermark {
                    return Ok(None);
                }
                if h.max_timestamp < timestamp {
                    continue;
                }
                if h.is_log_append_time() || h.is_control() {
                    return Ok(Some(TimestampAndOffset {
                        timestamp: h.max_timestamp,
                        offset: h.base_offset,
                        leader_epoch: h.partition_leader_epoch,
                    }));
                }
                let raw = seg.read_batch_at(pos, &h)?;
                let log_start = self.log_start_offset;
                let limit = self.config.max_decompressed_batch_bytes;
                if let Some((offset, ts)) =
                    find_record(&raw, limit, |o, t| t >= timestamp && o >= log_start)?
                {
                    return Ok(Some(TimestampAndOffset {
                        timestamp: ts,
                        offset,
                        leader_epoch: h.partition_leader_epoch,
                    }));
                }
            }
        }
        Ok(None)
    }

    /// ListOffsets MAX_TIMESTAMP: the record with the largest timestamp (first one on ties).
    pub fn max_timestamp_offset(&self) -> io::Result<Option<TimestampAndOffset>> {
        let Some(seg) = self
            .segments
            .values()
            .filter(|s| s.max_timestamp() >= 0)
            .fold(None::<&Segment>, |best, s| match best {
                Some(b) if b.max_timestamp() >= s.max_timestamp() => Some(b),
                _ => Some(s),
            })
        else {
            return Ok(None);
        };
        let target = seg.max_timestamp();
        for (pos, h) in seg.headers_from(seg.base_offset())? {
            if h.max_timestamp != target {
                continue;
            }
            if h.is_log_append_time() || h.is_control() {
                return Ok(Some(TimestampAndOffset {
                    timestamp: target,
                    offset: h.base_offset,
                    leader_epoch: h.partition_leader_epoch,
                }));
            }
            let raw = seg.read_batch_at(pos, &h)?;
            let limit = self.config.max_decompressed_batch_bytes;
            if let Some((offset, _)) = find_record(&raw, limit, |_, t| t == target)? {
                return Ok(Some(TimestampAndOffset {
                    timestamp: target,
                    offset,
                    leader_epoch: h.partition_leader_epoch,
                }));
            }
        }
        Ok(None)
    }

    /// Deletes whole segments past retention.ms / retention.bytes (never above the high
    /// watermark). Returns the number of segments deleted.
    pub fn apply_retention(&mut self, now_ms: i64) -> io::Result<usize> {
        if !self.config.cleanup_policy_delete || self.offline.is_some() {
            return Ok(0);
        }
        // With remote storage, local retention applies (local.retention.*), and only to
        // segments the remote manifest already covers; total retention is applied remotely.
        let remote = self.config.remote_storage_enable;
        let (retention_ms, retention_bytes) = if remote {
            (
                self.config.local_retention_ms,
                self.config.local_retention_bytes,
            )
        } else {
            (self.config.retention_ms, self.config.retention_bytes)
        };
        let mut total: i64 = self.segments.values().map(|s| s.size() as i64).sum();
        let mut doomed = Vec::new();
        let active = self.active_base();
        for seg in self.segments.values() {
            // A sealed segment may be empty once the cleaner removed all its records.
            if seg.next_offset() > self.high_watermark
                || (seg.size() == 0 && seg.base_offset() == active)
            {
                break;
            }
            if remote && seg.next_offset() > self.remote_end_offset {
                break;
            }
            let by_time = retention_ms >= 0 && now_ms - seg.retention_timestamp() > retention_ms;
            let by_size = retention_bytes >= 0 && total - seg.size() as i64 >= retention_bytes;
            if !(by_time || by_size) {
                break;
            }
            total -= seg.size() as i64;
            doomed.push(seg.base_offset());
        }
        if doomed.is_empty() {
            return Ok(0);
        }
        if doomed.len() == self.segments.len() {
            // The active segment is expiring too: roll so the log keeps a segment to append to.
            self.roll(now_ms)?;
        }
        let (n, failed) = self.delete_segments(&doomed);
        if n > 0 {
            self.prune_aborted_txns();
            if !remote {
                let new_start = *self.segments.keys().next().unwrap_or(&self.log_end_offset);
                self.set_log_start_offset(new_start.max(self.log_start_offset))?;
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(n),
        }
    }

    /// Deletes the oldest segments `doomed` (in offset order), Kafka's way: renaming a
    /// segment's `.log` to `.log.deleted` is the commit point (the next open removes
    /// `.deleted` files, so a crash after it completes the deletion), then its files are
    /// removed. A failed rename stops there and leaves that segment and every later one in
    /// the log, so the log stays contiguous. Returns how many went, and the error that stopped
    /// it. Failing to remove a renamed file is only logged: it frees no space until the next
    /// open, but the segment is gone either way.
    fn delete_segments(&mut self, doomed: &[i64]) -> (usize, Option<io::Error>) {
        let mut deleted = 0;
        for &base in doomed {
            let log = Segment::file_path(&self.dir, base, "log", "");
            let renamed = Segment::file_path(&self.dir, base, "log", cleaner::DELETED_SUFFIX);
            if let Err(e) = io_fault::rename(&log, &renamed) {
                tracing::warn!(dir = %self.dir.display(), base, error = %e, "cannot delete a segment; it stays in the log");
                return (deleted, Some(e));
            }
            if let Some(seg) = self.segments.remove(&base) {
                let removed = seg.delete().and_then(|()| fs::remove_file(&renamed));
                if let Err(e) = removed {
                    tracing::warn!(dir = %self.dir.display(), base, error = %e, "segment deleted but its files not removed yet (the next open removes them)");
                }
            }
            deleted += 1;
        }
        (deleted, None)
    }

    /// DeleteRecords: moves the log start offset to `offset` (<= high watermark) and deletes
    /// segments wholly below it.
    pub fn delete_records_before(&mut self, offset: i64) -> io::Result<i64> {
        self.check_online()?;
        let new_start = offset.min(self.high_watermark);
        if new_start <= self.log_start_offset {
            return Ok(self.log_start_offset);
        }
        let doomed: Vec<i64> = self
            .segments
            .values()
            .filter(|s| s.next_offset() <= new_start && s.base_offset() != self.active_base())
            .map(|s| s.base_offset())
            .collect();
        let (_, failed) = self.delete_segments(&doomed);
        if let Some(e) = failed {
            // The log start stays where the remaining segments allow: nothing moved past a
            // segment that is still here.
            self.prune_aborted_txns();
            let first = *self.segments.keys().next().unwrap_or(&self.log_end_offset);
            if first > self.log_start_offset {
                self.set_log_start_offset(first)?;
            }
            return Err(e);
        }
        self.prune_aborted_txns();
        self.set_log_start_offset(new_start)?;
        self.delete_records_offset = self.delete_records_offset.max(new_start);
        Ok(self.log_start_offset)
    }

    /// The offset an explicit DeleteRecords moved the log start to in this process, or -1.
    /// Remote retention deletes below this, never below [`Log::log_start_offset`], which after
    /// a restart may come from a checkpoint or a follower's truncation.
    pub fn delete_records_offset(&self) -> i64 {
        self.delete_records_offset
    }

    fn active_base(&self) -> i64 {
        *self.segments.keys().next_back().unwrap_or(&0)
    }

    fn set_log_start_offset(&mut self, offset: i64) -> io::Result<()> {
        self.log_start_offset = offset;
        self.epochs.truncate_from_start(offset)
    }

    /// Writes the producer snapshot and flushes everything (clean shutdown). An offline log
    /// that cannot be repaired fails, so the broker does not mark the shutdown clean and the
    /// next start rescans the segments.
    pub fn close(&mut self, now_ms: i64) -> io::Result<()> {
        self.last_repair_ms = i64::MIN;
        self.ensure_online(now_ms)?;
        self.flush(now_ms)?;
        for seg in self.segments.values() {
            seg.flush()?;
        }
        self.producers
            .write_snapshot(&self.dir, self.log_end_offset)?;
        self.prune_snapshots()
    }

    pub fn expire_producers(&mut self, now_ms: i64, expiration_ms: i64) {
        self.producers.expire(now_ms, expiration_ms);
    }

    pub fn set_config(&mut self, config: TopicConfig) {
        self.config = config;
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

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The first offset held locally (the log start offset without remote storage).
    pub fn local_start_offset(&self) -> i64 {
        self.segments
            .keys()
            .next()
            .copied()
            .unwrap_or(self.log_end_offset)
            .max(self.log_start_offset)
    }

    pub fn remote_end_offset(&self) -> i64 {
        self.remote_end_offset
    }

    /// Records that the remote manifest covers the log below `offset`.
    pub fn set_remote_end_offset(&mut self, offset: i64) {
        self.remote_end_offset = self.remote_end_offset.max(offset);
    }

    /// A tiered log takes what the committed manifest says: the remote log covers everything
    /// below `end_offset` (None when the manifest has no segment), and the partition's log
    /// start offset is at least the manifest's `log_start_offset`. Called at start-up before
    /// the broker serves and on every tiering pass, leader or follower.
    ///
    /// The log start only moves forward. With nothing remote the local log is the whole log,
    /// so the first local offset is the start (a topic whose early segments were deleted
    /// before remote storage was enabled); otherwise the first local segment is ignored: it
    /// is wherever local retention happened to stop.
    pub fn apply_manifest(
        &mut self,
        log_start_offset: i64,
        end_offset: Option<i64>,
    ) -> io::Result<()> {
        let start = match end_offset {
            Some(end) => {
                self.set_remote_end_offset(end);
                log_start_offset
            }
            None => {
                let first_local = self
                    .segments
                    .keys()
                    .next()
                    .copied()
                    .unwrap_or(self.log_end_offset);
                log_start_offset.max(first_local)
            }
        };
        self.advance_log_start_offset(start)
    }

    /// Moves the log start offset forward (remote retention, or the manifest after a restart).
    pub fn advance_log_start_offset(&mut self, offset: i64) -> io::Result<()> {
        let offset = offset.min(self.high_watermark);
        if offset > self.log_start_offset {
            self.set_log_start_offset(offset)?;
        }
        Ok(())
    }

    /// Bytes of local segments the remote manifest does not cover yet (upload lag).
    pub fn local_only_bytes(&self) -> u64 {
        self.segments
            .values()
            .filter(|s| s.next_offset() > self.remote_end_offset)
            .map(|s| s.size())
            .sum()
    }

    /// Sealed segments wholly below the last stable offset that end after `from`, with what
    /// the tiering service uploads for each.
    pub fn uploadable_segments(&self, from: i64) -> Vec<strata_tiering::SegmentFiles> {
        self.segment_files(from, i64::MAX)
    }

    /// The end of the last sealed segment below the last stable offset that ends at or below
    /// `limit` (segments emptied by the cleaner included).
    pub fn sealed_end_at_or_below(&self, limit: i64) -> Option<i64> {
        let active = self.active_base();
        self.segments
            .values()
            .take_while(|s| {
                s.base_offset() != active && s.next_offset() <= self.last_stable_offset()
            })
            .map(|s| s.next_offset())
            .filter(|&n| n <= limit)
            .max()
    }

    /// Sealed, non-empty segments below the last stable offset with `from < next offset <=
    /// upto` (a compacted snapshot takes the cleaned ones).
    pub fn segment_files(&self, from: i64, upto: i64) -> Vec<strata_tiering::SegmentFiles> {
        let active = self.active_base();
        let mut out = Vec::new();
        for seg in self.segments.values() {
            let base = seg.base_offset();
            // Only data below the last stable offset: an undecided transaction must not
            // reach the bucket before its marker.
            if base == active || seg.next_offset() > self.last_stable_offset() {
                break;
            }
            if seg.next_offset() > upto {
                break;
            }
            if seg.next_offset() <= from || seg.size() == 0 {
                continue;
            }
            let stem = segment::file_stem(base);
            let snapshot = ProducerStateManager::snapshot_path(&self.dir, seg.next_offset());
            let entries: Vec<_> = self
                .epochs
                .entries()
                .iter()
                .filter(|e| e.start_offset < seg.next_offset())
                .copied()
                .collect();
            let mut checkpoint = format!("0\n{}\n", entries.len());
            for e in &entries {
                checkpoint.push_str(&format!("{} {}\n", e.epoch, e.start_offset));
            }
            out.push(strata_tiering::SegmentFiles {
                base_offset: base,
                next_offset: seg.next_offset(),
                max_timestamp: seg.max_timestamp(),
                log: self.dir.join(format!("{stem}.log")),
                offset_index: self.dir.join(format!("{stem}.index")),
                time_index: self.dir.join(format!("{stem}.timeindex")),
                producer_snapshot: snapshot.exists().then_some(snapshot),
                leader_epoch_checkpoint: Some(checkpoint.into_bytes()),
                txn_index: {
                    let p = txn_index::path(&self.dir, base);
                    p.exists().then_some(p)
                },
                epochs: entries
                    .iter()
                    .filter(|e| e.start_offset >= base)
                    .map(|e| (e.epoch, e.start_offset))
                    .collect(),
            });
        }
        out
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
    pub fn size_bytes(&self) -> u64 {
        self.segments.values().map(|s| s.size()).sum()
    }
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }
}

/// The first record of `batch` (one RecordBatch) at or after `min_offset` whose timestamp is
/// >= `timestamp` (offsetsForTimes over a batch read from remote storage).
pub fn first_record_at_or_after(
    batch: &[u8],
    timestamp: i64,
    min_offset: i64,
    max_decompressed_batch_bytes: u64,
) -> io::Result<Option<TimestampAndOffset>> {
    let header = BatchHeader::parse(batch)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
    if header.is_log_append_time() || header.is_control() {
        return Ok(
            (header.max_timestamp >= timestamp).then_some(TimestampAndOffset {
                timestamp: header.max_timestamp,
                offset: header.base_offset.max(min_offset),
                leader_epoch: header.partition_leader_epoch,
            }),
        );
    }
    Ok(find_record(batch, max_decompressed_batch_bytes, |o, t| {
        t >= timestamp && o >= min_offset
    })?
    .map(|(offset, ts)| TimestampAndOffset {
        timestamp: ts,
        offset,
        leader_epoch: header.partition_leader_epoch,
    }))
}

const MARKER_ABORT: i16 = 0;
const MARKER_COMMIT: i16 = 1;

/// The type of the COMMIT/ABORT marker in a control batch (key: version i16, type i16).
fn marker_type(raw: &[u8]) -> Option<i16> {
    let key = first_record_field(raw, |r| r.key)?;
    (key.len() >= 4).then(|| i16::from_be_bytes([key[2], key[3]]))
}

/// The coordinator epoch in a COMMIT/ABORT marker's value (version i16, epoch i32).
fn marker_coordinator_epoch(raw: &[u8]) -> Option<i32> {
    let value = first_record_field(raw, |r| r.value)?;
    (value.len() >= 6).then(|| i32::from_be_bytes([value[2], value[3], value[4], value[5]]))
}

/// Largest control batch read for its marker (a marker record is a few bytes).
const MAX_MARKER_BATCH_BYTES: u64 = 1 << 20;

/// A field of the first record of a control batch, copied out (a few bytes).
fn first_record_field(
    raw: &[u8],
    field: impl for<'a> Fn(&strata_records::Record<&'a [u8]>) -> Option<&'a [u8]>,
) -> Option<Vec<u8>> {
    let header = strata_records::BatchHeader::parse(raw).ok()?;
    let mut buf = Vec::new();
    let mut records =
        strata_records::records_of(raw, &header, MAX_MARKER_BATCH_BYTES, &mut buf).ok()?;
    let (_, first) = records.next()?.ok()?;
    field(&first).map(<[u8]>::to_vec)
}

/// A control batch holding one COMMIT or ABORT marker, as Kafka writes it (uncompressed,
/// transactional, no sequence; value: version 0 and the coordinator epoch).
fn control_batch(
    producer_id: i64,
    producer_epoch: i16,
    coordinator_epoch: i32,
    commit: bool,
    now_ms: i64,
) -> Result<Vec<u8>, String> {
    let kind = if commit { MARKER_COMMIT } else { MARKER_ABORT };
    let mut key = Vec::with_capacity(4);
    key.extend_from_slice(&0i16.to_be_bytes());
    key.extend_from_slice(&kind.to_be_bytes());
    let mut value = Vec::with_capacity(6);
    value.extend_from_slice(&0i16.to_be_bytes());
    value.extend_from_slice(&coordinator_epoch.to_be_bytes());
    let record = kafka_protocol::records::Record {
        transactional: true,
        control: true,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id,
        producer_epoch,
        timestamp_type: kafka_protocol::records::TimestampType::Creation,
        offset: 0,
        sequence: -1,
        timestamp: now_ms,
        key: Some(Bytes::from(key)),
        value: Some(Bytes::from(value)),
        headers: Default::default(),
    };
    let mut out = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut out,
        std::iter::once(&record),
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .map_err(|e| format!("cannot encode a transaction marker: {e}"))?;
    Ok(out.to_vec())
}

/// The first record of one stored batch, as (offset, timestamp), for which `pred` holds.
/// Decompresses under `limit` bytes (off the hot path: timestamp lookups).
fn find_record(
    raw: &[u8],
    limit: u64,
    pred: impl Fn(i64, i64) -> bool,
) -> io::Result<Option<(i64, i64)>> {
    let invalid = |e: strata_records::RecordsError| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("cannot read batch: {e}"),
        )
    };
    let header = strata_records::BatchHeader::parse(raw).map_err(invalid)?;
    let mut buf = Vec::new();
    for item in strata_records::records_of(raw, &header, limit, &mut buf).map_err(invalid)? {
        let (_, r) = item.map_err(invalid)?;
        let offset = header.base_offset + i64::from(r.offset_delta);
        let timestamp = if header.is_log_append_time() {
            header.max_timestamp
        } else {
            header.base_timestamp.wrapping_add(r.timestamp_delta)
        };
        if pred(offset, timestamp) {
            return Ok(Some((offset, timestamp)));
        }
    }
    Ok(None)
}

/// Re-encodes a validated batch with another codec (topic compression.type differs from the
/// producer's). The records section does not depend on the codec, so it is decompressed
/// (under `limit` bytes) and compressed again as it is; the header keeps every field but the
/// codec bits, length and CRC.
fn recompress(bytes: &[u8], target: Compression, limit: u64) -> Result<Vec<u8>, AppendError> {
    use kafka_protocol::compression::{Compressor, Gzip, Lz4, Snappy, Zstd};
    let header = strata_records::BatchHeader::parse(bytes).map_err(AppendError::Records)?;
    let codec = header.codec().map_err(AppendError::Records)?;
    let payload = &bytes[batch::BATCH_HEADER_LEN..];
    let mut plain = Vec::new();
    let records: &[u8] = if codec == Codec::None {
        payload
    } else {
        strata_records::decompress_into(codec, payload, limit, &mut plain)
            .map_err(AppendError::Records)?;
        &plain
    };
    let mut out = BytesMut::with_capacity(batch::BATCH_HEADER_LEN + records.len() / 2);
    out.extend_from_slice(&bytes[..batch::BATCH_HEADER_LEN]);
    let fill = |b: &mut BytesMut| {
        b.extend_from_slice(records);
        Ok(())
    };
    let (id, result) = match target {
        Compression::None => {
            out.extend_from_slice(records);
            (0, Ok(()))
        }
        Compression::Gzip => (1, Gzip::compress(&mut out, fill)),
        Compression::Snappy => (2, Snappy::compress(&mut out, fill)),
        Compression::Lz4 => (3, Lz4::compress(&mut out, fill)),
        Compression::Zstd => (4, Zstd::compress(&mut out, fill)),
    };
    result.map_err(|e| AppendError::InvalidRecord(format!("cannot re-encode batch: {e}")))?;
    drop(plain);
    let mut out = out.to_vec();
    batch::set_codec_and_length(&mut out, id);
    Ok(out)
}

#[cfg(test)]
mod replica_tests;
#[cfg(test)]
mod storage_error_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod txn_tests;
