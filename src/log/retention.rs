//! Retention and the log start offset: whole segments past `retention.ms` / `retention.bytes`
//! (with remote storage `local.retention.*`, and only what the remote manifest covers) are
//! deleted, DeleteRecords moves the log start offset, and so do the remote manifest and remote
//! retention. The log start offset only moves forward here and never past the high watermark.
//!
//! A segment is deleted Kafka's way: renaming its `.log` to `.log.deleted` is the commit point
//! ([`Log::delete_segments`]); a failed rename keeps that segment and every later one.

use std::fs;
use std::io;

use super::segment::Segment;
use super::{cleaner, io_fault, Log};

impl Log {
    /// Deletes whole segments past retention.ms / retention.bytes (never above the high
    /// watermark). Returns the number of segments deleted.
    pub fn apply_retention(&mut self, now_ms: i64) -> io::Result<usize> {
        if !self.config.cleanup_policy_delete || self.offline.is_some() {
            return Ok(0);
        }
        let remote = self.config.remote_storage_enable && !self.config.remote_log_copy_disable;
        let doomed: Vec<i64> = self
            .expired_segments(now_ms, self.hot_floor(now_ms))
            .into_iter()
            .map(|(base, _)| base)
            .collect();
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
                self.set_log_start_offset(self.local_start_offset())?;
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(n),
        }
    }

    /// The oldest segments retention deletes now, as (base offset, size): past retention.ms /
    /// retention.bytes, never above the high watermark. With remote storage, local retention
    /// applies (local.retention.*), only to segments the remote manifest already covers, and
    /// not to those holding offsets at or above `hot_floor` (a range consumers read again,
    /// see `rehydrate`); total retention is applied remotely. With uploads off
    /// (remote.log.copy.disable, KIP-950) the local log is retained as an untiered one:
    /// nothing more will be uploaded to wait for.
    pub(super) fn expired_segments(&self, now_ms: i64, hot_floor: Option<i64>) -> Vec<(i64, u64)> {
        if !self.config.cleanup_policy_delete {
            return Vec::new();
        }
        let remote = self.config.remote_storage_enable && !self.config.remote_log_copy_disable;
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
            if remote
                && (seg.next_offset() > self.remote_end_offset
                    || hot_floor.is_some_and(|floor| seg.next_offset() > floor))
            {
                break;
            }
            let by_time = retention_ms >= 0 && now_ms - seg.retention_timestamp() > retention_ms;
            let by_size = retention_bytes >= 0 && total - seg.size() as i64 >= retention_bytes;
            if !(by_time || by_size) {
                break;
            }
            total -= seg.size() as i64;
            doomed.push((seg.base_offset(), seg.size()));
        }
        doomed
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
            let first = self.local_start_offset();
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
            None => log_start_offset.max(self.local_start_offset()),
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

    fn set_log_start_offset(&mut self, offset: i64) -> io::Result<()> {
        self.log_start_offset = offset;
        self.epochs.truncate_from_start(offset)
    }

    /// Forgets aborted transactions whose marker is below the first local segment.
    fn prune_aborted_txns(&mut self) {
        if let Some(&first) = self.segments.keys().next() {
            self.aborted.retain(|t| t.last_offset >= first);
        }
    }
}
