//! The write path (Kafka's `UnifiedLog` appends, `LocalLog`'s roll and flush): appends as
//! leader (validated, see `validation`) or follower (as the leader wrote them), transaction
//! markers, and the all-or-nothing write of one batch to the active segment; rolls, flushes and
//! a clean close.
//!
//! An append is acknowledged only once every fallible step succeeded: the segment is cut back
//! on an error and nothing in memory moves ([`Log::append_batch`]); producer state changes
//! last.

use std::fs;
use std::io;

use super::batch::{self, BatchError, BatchHeader, BatchIter};
use super::marker::{
    control_batch, marker_coordinator_epoch, marker_type, TxnMarker, MARKER_ABORT,
};
use super::producer_state::{ProducerStateManager, SequenceCheck};
use super::segment::{self, Segment};
use super::{limits, txn_index, AppendError, AppendInfo, AppendOrigin, Log};

impl Log {
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
        let prepared = self.prepare_leader_append(origin, records, leader_epoch, now_ms)?;
        self.commit_leader_append(prepared, leader_epoch, now_ms)
    }

    /// [`Log::append_as_leader`] where the caller must not wait on the disk (an async worker):
    /// `Ok(None)`, with nothing changed, when the append would do more than write the page
    /// cache: roll the segment (its fsync and the producer snapshot), fsync for
    /// `flush.messages`, write the leader epoch checkpoint of a new epoch, or repair an offline
    /// log. The caller then appends with [`Log::append_as_leader`] where blocking is allowed.
    /// Records the log refuses are refused here too, with the same error.
    pub fn try_append_as_leader(
        &mut self,
        records: &[u8],
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<Option<AppendInfo>, AppendError> {
        if self.offline.is_some() {
            return Ok(None);
        }
        let prepared =
            self.prepare_leader_append(AppendOrigin::Client, records, leader_epoch, now_ms)?;
        if let LeaderAppend::Batch { header, owned, .. } = &prepared {
            let blocks = self.needs_roll(header, owned.len(), now_ms)
                || self.needs_flush(header)
                || self.epochs.would_assign(leader_epoch);
            if blocks {
                return Ok(None);
            }
        }
        self.commit_leader_append(prepared, leader_epoch, now_ms)
            .map(Some)
    }

    /// The part of a leader append that writes no file: validation, the producer's sequence
    /// and the batch as it will be written (offsets, epoch, timestamps, codec).
    fn prepare_leader_append(
        &mut self,
        origin: AppendOrigin,
        records: &[u8],
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<LeaderAppend, AppendError> {
        let (header, bytes, validated) = self.validate_produce_request(records, origin, now_ms)?;
        if let SequenceCheck::Duplicate(dup) = self.producers.check(&header)? {
            return Ok(LeaderAppend::Duplicate(AppendInfo {
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
            }));
        }
        let (owned, log_append_time) = self.prepare_batch(
            &header,
            bytes,
            &validated,
            self.log_end_offset,
            leader_epoch,
            now_ms,
        )?;
        let header = BatchHeader::parse(&owned).map_err(AppendError::Corrupt)?;
        Ok(LeaderAppend::Batch {
            header,
            owned,
            log_append_time,
        })
    }

    fn commit_leader_append(
        &mut self,
        prepared: LeaderAppend,
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<AppendInfo, AppendError> {
        let (header, owned, log_append_time) = match prepared {
            LeaderAppend::Duplicate(info) => return Ok(info),
            LeaderAppend::Batch {
                header,
                owned,
                log_append_time,
            } => (header, owned, log_append_time),
        };
        self.append_batch(&header, &owned, leader_epoch, now_ms)?;
        Ok(AppendInfo {
            base_offset: header.base_offset,
            last_offset: header.last_offset(),
            log_append_time,
            duplicate: false,
            records: header.records_count,
            bytes: owned.len(),
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
        self.append_follower_batches(records, now_ms, true)
            .map(|a| a.bytes)
    }

    /// [`Log::append_as_follower`] where the caller must not wait on the disk (an async
    /// worker): appends batches until one would do more than write the page cache (roll the
    /// segment, fsync for `flush.messages`, write the checkpoint of a new leader epoch, or
    /// index an aborted transaction) and reports where it stopped, so the caller appends the
    /// rest where blocking is allowed. An offline log appends nothing. Records the log
    /// refuses are refused here too, with the same error.
    pub fn try_append_as_follower(
        &mut self,
        records: &[u8],
        now_ms: i64,
    ) -> Result<FollowerAppend, AppendError> {
        if self.offline.is_some() {
            return Ok(FollowerAppend {
                bytes: 0,
                rest: Some(0),
            });
        }
        self.append_follower_batches(records, now_ms, false)
    }

    fn append_follower_batches(
        &mut self,
        records: &[u8],
        now_ms: i64,
        may_block: bool,
    ) -> Result<FollowerAppend, AppendError> {
        let mut appended = 0;
        for item in BatchIter::new(records) {
            let (position, header, bytes) = match item {
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
            let blocks = || {
                abort
                    || self.needs_roll(&header, bytes.len(), now_ms)
                    || self.needs_flush(&header)
                    || self.epochs.would_assign(header.partition_leader_epoch)
            };
            if !may_block && blocks() {
                return Ok(FollowerAppend {
                    bytes: appended,
                    rest: Some(position),
                });
            }
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
                    .last_stable_offset_after_abort(header.producer_id, header.base_offset);
                self.index_aborted_txn_after_commit(txn_index::AbortedTxn {
                    producer_id: header.producer_id,
                    first_offset: first,
                    last_offset: header.base_offset,
                    last_stable_offset: lso,
                })?;
            }
            appended += bytes.len();
        }
        Ok(FollowerAppend {
            bytes: appended,
            rest: None,
        })
    }

    /// Appends a COMMIT or ABORT marker for the producer's transaction (WriteTxnMarkers).
    /// Returns the marker's offset.
    pub fn append_txn_marker(
        &mut self,
        marker: &TxnMarker,
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<i64, AppendError> {
        self.ensure_online(now_ms)?;
        self.producers.check_marker(marker)?;
        let TxnMarker {
            producer_id,
            producer_epoch,
            coordinator_epoch,
            commit,
            ..
        } = *marker;
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
                .last_stable_offset_after_abort(producer_id, offset);
            self.index_aborted_txn_after_commit(txn_index::AbortedTxn {
                producer_id,
                first_offset: first,
                last_offset: offset,
                last_stable_offset: lso,
            })?;
        }
        Ok(offset)
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
    pub(super) fn index_aborted_txn(&mut self, t: txn_index::AbortedTxn) -> io::Result<()> {
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
        if self.needs_roll(header, bytes.len(), now_ms) {
            self.roll(now_ms)?;
        }
        let mark = self.active().mark();
        let epochs_len = self.epochs.entries().len();
        let flush = self.needs_flush(header);
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

    /// Whether the active segment must be sealed before a batch of `len` bytes goes in: full,
    /// old enough (`segment.ms` less its jitter), or its indexes full.
    fn needs_roll(&self, header: &BatchHeader, len: usize, now_ms: i64) -> bool {
        let roll_ms = self.config.segment_ms.saturating_sub(
            self.config
                .segment_jitter_ms
                .min(self.config.segment_ms / 2),
        );
        let active = self.segments.values().next_back();
        active.is_some_and(|a| {
            a.should_roll(
                len,
                self.config.segment_bytes,
                roll_ms,
                now_ms,
                header.max_timestamp,
            )
        })
    }

    /// Whether the batch brings the unflushed records to `flush.messages` (an fsync).
    fn needs_flush(&self, header: &BatchHeader) -> bool {
        self.unflushed_messages
            .saturating_add(header.records_count as i64)
            >= self.config.flush_messages
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
            self.flush_above_recovery_point()?;
        }
        Ok(())
    }

    /// fsyncs every segment that may hold records at or above the recovery point, the active
    /// one included (those wholly below it are durable already). Segments rescanned after a
    /// crash are among them until a flush or a roll has synced them.
    fn flush_above_recovery_point(&self) -> io::Result<()> {
        let active = self.active_base();
        for seg in self.segments.values() {
            if seg.next_offset() > self.recovery_point || seg.base_offset() == active {
                seg.flush()?;
            }
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
        // Everything below the new segment is made durable, so the recovery point moves to
        // it and a crash rescans only the segments after (Kafka flushes asynchronously and
        // then moves its recovery point the same way).
        self.flush_above_recovery_point()?;
        self.producers.write_snapshot(&self.dir, base)?;
        self.prune_snapshots()?;
        let limits = limits(&self.config);
        self.segments
            .insert(base, Segment::create(&self.dir, base, limits, now_ms)?);
        self.recovery_point = self.recovery_point.max(base);
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
            self.flush_above_recovery_point()?;
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
}

/// What [`Log::try_append_as_follower`] appended: the bytes, and where in the records the
/// batches left for a caller that may block begin (`None`: every whole batch went in).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerAppend {
    pub bytes: usize,
    pub rest: Option<usize>,
}

/// A leader append validated and ready to write: a retry of a batch already in the log, or
/// the batch as it will be written.
enum LeaderAppend {
    Duplicate(AppendInfo),
    Batch {
        header: BatchHeader,
        owned: Vec<u8>,
        log_append_time: i64,
    },
}
