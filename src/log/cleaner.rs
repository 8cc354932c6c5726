//! The broker side of `strata-compaction`: a [`SegmentSource`] over a partition log's segment
//! files ([`LogSegmentSource`]), a [`BatchSink`] that writes cleaned segments aside and swaps
//! them in with Kafka's crash-safe protocol ([`CleanedSegmentSink`]) and the start-up recovery of
//! interrupted swaps ([`recover_interrupted_swaps`]). Compacted topics' null-key check is part
//! of produce validation (`strata_records::validate`).
//!
//! Concurrency: the cleaner reads and writes outside the partition lock and takes it only
//! briefly: to list the segments, to look up a segment's file, and to swap a cleaned group in
//! ([`Log::replace_segments`], renames only: the cleaned data was fsynced before). Sealed
//! segments never change, so a file handle taken under the lock reads a stable byte range. A
//! fetch holding a [`super::segment::FileSlice`] of a replaced segment keeps reading valid
//! (old) data: the slice holds the open file, which stays readable after it is renamed and
//! unlinked. The swap checks that the replaced segments are still those the pass read
//! (retention, DeleteRecords or a topic deletion may have removed them); if not, the group is
//! abandoned and its `.cleaned` files deleted.
//!
//! Crash consistency (Kafka's `LocalLog.replaceSegments` and `LogLoader`):
//! 1. the cleaned segment is written as `<base>.log.cleaned` (with `.index.cleaned`,
//!    `.timeindex.cleaned`, and `.txnindex.cleaned` holding the replaced segments' aborted
//!    transactions, since transactional batches are kept whole) and fsynced;
//! 2. under the lock its files are renamed `.swap` (the `.log` first) and the directory
//!    fsynced;
//! 3. each replaced segment's files are renamed `.deleted`;
//! 4. the `.swap` suffix is dropped; after the lock is released the directory is fsynced and
//!    the `.deleted` files removed.
//!
//! On open, [`recover_interrupted_swaps`] removes `.deleted` and `.cleaned` files (and any
//! `.swap` at or above the lowest `.cleaned` base: Kafka's rule for an interrupted split),
//! deletes the live segment files whose base offset lies in [lowest `.log.swap` base, highest
//! `.log.swap` next offset) (they were replaced), then drops every `.swap` suffix. A crash
//! before step 2 therefore recovers the old segments, one after it the new ones. Unlike Kafka,
//! producer `.snapshot` files in that range are kept: they are not part of a segment and only
//! shorten the producer-state replay.
//!
//! Errors: a swap that fails half-way (an I/O error after step 2) leaves the old segments
//! serving from their open files and returns an error wrapping [`SwapIncomplete`]; the
//! directory is completed by the next start, and the partition should not be cleaned again
//! until then.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use strata_compaction::{
    BatchSink, CompactionConfig, LastRecord, RetainedBatch, SegmentInfo, SegmentSource,
};

use super::batch::{BatchHeader, BATCH_HEADER_LEN};
use super::segment::{Segment, SEGMENT_FILE_EXTENSIONS};
use super::{limits, Log};
use crate::config::TopicConfig;

/// Suffix of a cleaned segment being written (Kafka's `CleanedFileSuffix`).
pub const CLEANED_SUFFIX: &str = ".cleaned";
/// Suffix of a cleaned segment being swapped in (Kafka's `SwapFileSuffix`).
pub const SWAP_SUFFIX: &str = ".swap";
/// Suffix of a replaced segment about to be removed (Kafka's `DeletedFileSuffix`).
pub const DELETED_SUFFIX: &str = ".deleted";

/// Kafka's `log.cleaner.io.buffer.size` default: how much of a segment one read fetches.
const READ_BUFFER_BYTES: usize = 512 * 1024;

/// Access to a partition log under its lock (the broker's partition, or a bare mutex in
/// tests). Implementations must not hold the lock longer than `f` runs.
pub trait LogHandle {
    fn with_log<R>(&self, f: impl FnOnce(&mut Log) -> R) -> R;
}

impl LogHandle for Mutex<Log> {
    fn with_log<R>(&self, f: impl FnOnce(&mut Log) -> R) -> R {
        f(&mut self.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// A swap failed after the cleaned segment was renamed `.swap`: the directory holds a
/// half-done swap that the next start completes. Do not clean the partition again until then.
#[derive(Debug, thiserror::Error)]
#[error("swapping in a cleaned segment failed half-way; the next start completes it")]
pub struct SwapIncomplete {
    #[source]
    pub source: io::Error,
}

/// Why [`Log::replace_segments`] did not swap.
pub enum SwapError {
    /// Nothing was replaced; the cleaned segment is handed back (to be deleted).
    Refused {
        cleaned: Box<Segment>,
        reason: io::Error,
    },
    /// Nothing was replaced and the cleaned files are already gone.
    Failed(io::Error),
    /// Half-done: see [`SwapIncomplete`].
    Incomplete(io::Error),
}

fn invalid_data(message: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message.into())
}

/// Makes renames and removals in `dir` durable.
pub(super) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

fn segment_info(segment: &Segment) -> io::Result<SegmentInfo> {
    let (offset_index_bytes, time_index_bytes) = segment.index_bytes();
    Ok(SegmentInfo {
        base_offset: segment.base_offset(),
        next_offset: segment.next_offset(),
        size_bytes: segment.size(),
        offset_index_bytes,
        time_index_bytes,
        largest_timestamp_ms: segment.max_timestamp(),
        first_batch_timestamp_ms: segment.first_batch_timestamp(),
        last_modified_ms: segment.last_modified_ms()?,
    })
}

impl Log {
    /// The segments as the cleaner sees them, in offset order, the active one last.
    pub fn cleaner_segments(&self) -> io::Result<Vec<SegmentInfo>> {
        self.segments.values().map(segment_info).collect()
    }

    /// The `.log` file and size of the sealed segment at `base_offset`.
    fn sealed_segment_file(&self, base_offset: i64) -> Option<(Arc<File>, u64)> {
        if base_offset == self.active_base() {
            return None;
        }
        self.segments
            .get(&base_offset)
            .map(|s| (s.file(), s.size()))
    }

    /// Kafka's `lastRecordsOfActiveProducers`: the last data offset and epoch of every
    /// producer still in the producer state.
    pub fn last_records_of_active_producers(&self) -> HashMap<i64, LastRecord> {
        self.producers
            .entries()
            .map(|(id, entry)| {
                (
                    id,
                    LastRecord {
                        last_data_offset: entry.batches.back().map(|b| b.last_offset),
                        producer_epoch: entry.epoch,
                    },
                )
            })
            .collect()
    }

    /// Swaps `cleaned` (written aside as `.cleaned`, flushed) in for the consecutive sealed
    /// segments `replaces`, if they are still exactly those (same base, next offset and size).
    /// Renames only; returns the replaced segments, already renamed `.deleted`, for the caller
    /// to delete outside the lock.
    pub fn replace_segments(
        &mut self,
        mut cleaned: Segment,
        replaces: &[SegmentInfo],
    ) -> Result<Vec<Segment>, SwapError> {
        self.rewrites += 1;
        let refused = |cleaned, reason: &str| SwapError::Refused {
            cleaned: Box::new(cleaned),
            reason: io::Error::other(format!("cannot swap the cleaned segment in: {reason}")),
        };
        let (Some(first), Some(last)) = (replaces.first(), replaces.last()) else {
            return Err(refused(cleaned, "no segment to replace"));
        };
        if cleaned.base_offset() != first.base_offset {
            return Err(refused(cleaned, "base offsets differ"));
        }
        if last.base_offset >= self.active_base() {
            return Err(refused(cleaned, "the active segment is never replaced"));
        }
        let current: Vec<&Segment> = self
            .segments
            .range(first.base_offset..=last.base_offset)
            .map(|(_, s)| s)
            .collect();
        let unchanged = current.len() == replaces.len()
            && current.iter().zip(replaces).all(|(s, r)| {
                s.base_offset() == r.base_offset
                    && s.next_offset() == r.next_offset
                    && s.size() == r.size_bytes
            });
        if !unchanged {
            return Err(refused(
                cleaned,
                "the replaced segments changed during cleaning",
            ));
        }

        if let Err(error) = cleaned
            .change_suffix(SWAP_SUFFIX)
            .and_then(|()| sync_dir(&self.dir))
        {
            // Nothing is replaced yet: removing what was written aside restores the old state.
            remove_segment_files(&self.dir, first.base_offset, CLEANED_SUFFIX);
            remove_segment_files(&self.dir, first.base_offset, SWAP_SUFFIX);
            return Err(SwapError::Failed(error));
        }

        let mut old: Vec<Segment> = replaces
            .iter()
            .filter_map(|r| self.segments.remove(&r.base_offset))
            .collect();
        let mut renamed = Ok(());
        for segment in &mut old {
            renamed = segment.change_suffix(DELETED_SUFFIX);
            if renamed.is_err() {
                break;
            }
        }
        let renamed = renamed.and_then(|()| cleaned.change_suffix(""));
        if let Err(error) = renamed {
            // The old segments keep serving from their open files; the next start finishes
            // the swap from the `.swap` files.
            for segment in old {
                self.segments.insert(segment.base_offset(), segment);
            }
            return Err(SwapError::Incomplete(error));
        }
        self.segments.insert(cleaned.base_offset(), cleaned);
        Ok(old)
    }
}

/// The cleaner keeps transactional batches and markers whole, so the cleaned segment inherits
/// every aborted-transaction entry (`.txnindex`, fixed-size entries in marker order) of the
/// segments it replaces, written aside with the rest of it.
fn carry_over_txn_indexes(
    dir: &Path,
    base_offset: i64,
    replaces: &[SegmentInfo],
) -> io::Result<()> {
    let mut merged = Vec::new();
    for segment in replaces {
        match fs::read(Segment::file_path(dir, segment.base_offset, "txnindex", "")) {
            Ok(bytes) => merged.extend_from_slice(&bytes),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    let path = Segment::file_path(dir, base_offset, "txnindex", CLEANED_SUFFIX);
    if merged.is_empty() {
        return remove_if_present(&path);
    }
    let file = File::create(&path)?;
    file.write_all_at(&merged, 0)?;
    file.sync_all()
}

/// Removes the files of segment `base_offset` carrying `suffix`, ignoring missing ones.
fn remove_segment_files(dir: &Path, base_offset: i64, suffix: &str) {
    for ext in SEGMENT_FILE_EXTENSIONS {
        let _ = fs::remove_file(Segment::file_path(dir, base_offset, ext, suffix));
    }
}

/// [`SegmentSource`] over a partition log: segment metadata under the lock, batch reads
/// outside it.
pub struct LogSegmentSource<'a, H: LogHandle> {
    log: &'a H,
}

impl<'a, H: LogHandle> LogSegmentSource<'a, H> {
    pub fn new(log: &'a H) -> Self {
        LogSegmentSource { log }
    }
}

impl<H: LogHandle> SegmentSource for LogSegmentSource<'_, H> {
    fn segments(&self) -> io::Result<Vec<SegmentInfo>> {
        self.log.with_log(|log| log.cleaner_segments())
    }

    fn read_batches(
        &self,
        base_offset: i64,
        from_offset: i64,
    ) -> io::Result<Box<dyn Iterator<Item = io::Result<Bytes>> + '_>> {
        let (file, size) = self
            .log
            .with_log(|log| log.sealed_segment_file(base_offset))
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("no sealed segment at offset {base_offset}"),
                )
            })?;
        Ok(Box::new(BatchReader {
            file,
            size,
            position: 0,
            from_offset,
            buffer: Bytes::new(),
            buffer_start: 0,
        }))
    }

    fn last_records_of_active_producers(&self) -> HashMap<i64, LastRecord> {
        self.log
            .with_log(|log| log.last_records_of_active_producers())
    }
}

/// Reads the whole batches of a sealed segment file in order, in chunks of
/// [`READ_BUFFER_BYTES`], skipping (by header) those that end before `from_offset`.
struct BatchReader {
    file: Arc<File>,
    size: u64,
    position: u64,
    from_offset: i64,
    buffer: Bytes,
    buffer_start: u64,
}

impl BatchReader {
    /// `len` bytes at `at`, from the buffer or a fresh read.
    fn bytes_at(&mut self, at: u64, len: usize) -> io::Result<Bytes> {
        let end = at + len as u64;
        let buffer_end = self.buffer_start + self.buffer.len() as u64;
        if at < self.buffer_start || end > buffer_end {
            let read_len = (len.max(READ_BUFFER_BYTES) as u64).min(self.size - at) as usize;
            let mut chunk = vec![0u8; read_len];
            self.file.read_exact_at(&mut chunk, at)?;
            self.buffer = Bytes::from(chunk);
            self.buffer_start = at;
        }
        let from = (at - self.buffer_start) as usize;
        Ok(self.buffer.slice(from..from + len))
    }

    fn next_batch(&mut self) -> io::Result<Option<Bytes>> {
        loop {
            if self.position + BATCH_HEADER_LEN as u64 > self.size {
                return Ok(None);
            }
            let header_bytes = self.bytes_at(self.position, BATCH_HEADER_LEN)?;
            let header = BatchHeader::parse(&header_bytes).map_err(|e| {
                invalid_data(format!(
                    "bad batch header at position {}: {e}",
                    self.position
                ))
            })?;
            let total = header.total_size() as u64;
            if self.position + total > self.size {
                return Err(invalid_data(format!(
                    "batch at position {} runs past the end of the segment",
                    self.position
                )));
            }
            let at = self.position;
            self.position += total;
            if header.last_offset() < self.from_offset {
                continue;
            }
            return self.bytes_at(at, total as usize).map(Some);
        }
    }
}

impl Iterator for BatchReader {
    type Item = io::Result<Bytes>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.next_batch() {
            Ok(batch) => batch.map(Ok),
            Err(error) => {
                self.position = self.size;
                Some(Err(error))
            }
        }
    }
}

struct Pending {
    dir: PathBuf,
    replaces: Vec<SegmentInfo>,
    segment: Segment,
    /// Offsets below this were appended already.
    next_offset: i64,
}

/// [`BatchSink`] writing each cleaned segment aside as `.cleaned` and swapping it in under the
/// partition lock (see the module docs for the protocol).
pub struct CleanedSegmentSink<'a, H: LogHandle> {
    log: &'a H,
    pending: Option<Pending>,
}

impl<'a, H: LogHandle> CleanedSegmentSink<'a, H> {
    pub fn new(log: &'a H) -> Self {
        CleanedSegmentSink { log, pending: None }
    }
}

impl<H: LogHandle> BatchSink for CleanedSegmentSink<'_, H> {
    fn begin(&mut self, replaces: &[SegmentInfo]) -> io::Result<()> {
        if self.pending.is_some() {
            return Err(io::Error::other("begin while a cleaned segment is open"));
        }
        let first = replaces
            .first()
            .ok_or_else(|| io::Error::other("begin without segments to replace"))?;
        let (dir, limits) = self
            .log
            .with_log(|log| (log.dir.clone(), limits(&log.config)));
        let segment = Segment::create_aside(
            &dir,
            first.base_offset,
            limits,
            crate::clock::now_ms(),
            CLEANED_SUFFIX,
        )?;
        self.pending = Some(Pending {
            dir,
            replaces: replaces.to_vec(),
            segment,
            next_offset: first.base_offset,
        });
        Ok(())
    }

    fn append(&mut self, batch: RetainedBatch) -> io::Result<()> {
        let pending = self
            .pending
            .as_mut()
            .ok_or_else(|| io::Error::other("append without begin"))?;
        let header = BatchHeader::parse(&batch.bytes)
            .map_err(|e| invalid_data(format!("cleaned batch: {e}")))?;
        if header.total_size() != batch.bytes.len() {
            return Err(invalid_data(
                "cleaned batch length disagrees with its header",
            ));
        }
        let end = pending
            .replaces
            .last()
            .map_or(pending.next_offset, |s| s.next_offset);
        if header.base_offset < pending.next_offset || header.last_offset() >= end {
            return Err(invalid_data(format!(
                "cleaned batch at offset {} is out of order or outside [{}, {end})",
                header.base_offset, pending.next_offset
            )));
        }
        pending.segment.append(&header, &batch.bytes)?;
        pending.next_offset = header.last_offset() + 1;
        Ok(())
    }

    fn commit(&mut self, last_modified_ms: i64) -> io::Result<()> {
        let mut pending = self
            .pending
            .take()
            .ok_or_else(|| io::Error::other("commit without begin"))?;
        // Sealed segments' `.txnindex` files no longer change, so this is done outside the
        // lock too.
        let flushed = pending
            .segment
            .flush()
            .and_then(|()| pending.segment.set_last_modified(last_modified_ms))
            .and_then(|()| {
                let base = pending.segment.base_offset();
                carry_over_txn_indexes(&pending.dir, base, &pending.replaces)
            });
        if let Err(error) = flushed {
            let _ = pending.segment.delete();
            return Err(error);
        }
        let replaces = pending.replaces;
        let segment = pending.segment;
        let (dir, swapped) = self.log.with_log(|log| {
            let dir = log.dir.clone();
            (dir, log.replace_segments(segment, &replaces))
        });
        match swapped {
            Ok(old) => {
                if let Err(error) = sync_dir(&dir) {
                    tracing::warn!(dir = %dir.display(), %error, "fsync of the log dir after a swap failed");
                }
                for segment in old {
                    let base = segment.base_offset();
                    if let Err(error) = segment.delete() {
                        // Removed on the next start.
                        tracing::warn!(dir = %dir.display(), base, %error, "removing a replaced segment failed");
                    }
                }
                Ok(())
            }
            Err(SwapError::Refused { cleaned, reason }) => {
                let _ = cleaned.delete();
                Err(reason)
            }
            Err(SwapError::Failed(error)) => Err(error),
            Err(SwapError::Incomplete(source)) => {
                Err(io::Error::new(source.kind(), SwapIncomplete { source }))
            }
        }
    }

    fn abandon(&mut self) -> io::Result<()> {
        match self.pending.take() {
            Some(pending) => pending.segment.delete(),
            None => Ok(()),
        }
    }
}

impl<H: LogHandle> Drop for CleanedSegmentSink<'_, H> {
    fn drop(&mut self) {
        if let Err(error) = self.abandon() {
            tracing::warn!(%error, "removing an abandoned cleaned segment failed; the next start removes it");
        }
    }
}

/// True if an I/O error from the sink means a swap was left half-done.
pub fn is_swap_incomplete(error: &io::Error) -> bool {
    error
        .get_ref()
        .is_some_and(|inner| inner.downcast_ref::<SwapIncomplete>().is_some())
}

/// Kafka's `offsetFromFile`: the number before the first dot of a file name.
fn offset_from_name(name: &str) -> Option<i64> {
    name.split('.').next()?.parse().ok()
}

/// Next offset of a segment file written by the cleaner: one past the last whole batch.
fn scan_next_offset(path: &Path, base_offset: i64) -> io::Result<i64> {
    let file = File::open(path)?;
    let size = file.metadata()?.len();
    let mut header = [0u8; BATCH_HEADER_LEN];
    let (mut position, mut next) = (0u64, base_offset);
    while position + BATCH_HEADER_LEN as u64 <= size {
        file.read_exact_at(&mut header, position)?;
        let Ok(h) = BatchHeader::parse(&header) else {
            break;
        };
        if position + h.total_size() as u64 > size {
            break;
        }
        next = h.last_offset() + 1;
        position += h.total_size() as u64;
    }
    Ok(next)
}

fn remove_if_present(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Finishes or undoes a cleaner swap interrupted by a crash, exactly as Kafka's `LogLoader`
/// does (see the module docs). Call before loading the segments of `dir`.
pub fn recover_interrupted_swaps(dir: &Path) -> io::Result<()> {
    let mut swaps = Vec::new();
    let mut cleaned = Vec::new();
    let mut min_cleaned_offset = i64::MAX;
    let mut changed = false;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if !entry.file_type()?.is_file() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(DELETED_SUFFIX) {
            tracing::info!(dir = %dir.display(), file = %name, "deleting a replaced segment file left by a crash");
            remove_if_present(&entry.path())?;
            changed = true;
        } else if name.ends_with(CLEANED_SUFFIX) {
            if let Some(offset) = offset_from_name(&name) {
                min_cleaned_offset = min_cleaned_offset.min(offset);
            }
            cleaned.push(entry.path());
        } else if name.ends_with(SWAP_SUFFIX) {
            swaps.push((name, entry.path()));
        }
    }
    let (invalid, swaps): (Vec<_>, Vec<_>) = swaps
        .into_iter()
        .partition(|(name, _)| offset_from_name(name).is_some_and(|o| o >= min_cleaned_offset));
    for (_, path) in &invalid {
        remove_if_present(path)?;
        changed = true;
    }
    for path in &cleaned {
        tracing::info!(dir = %dir.display(), file = %path.display(), "deleting a cleaned segment file left by a crash");
        remove_if_present(path)?;
        changed = true;
    }

    let (mut min_swap, mut max_swap) = (i64::MAX, i64::MIN);
    for (name, path) in &swaps {
        let live = &name[..name.len() - SWAP_SUFFIX.len()];
        let (Some(base), true) = (offset_from_name(live), live.ends_with(".log")) else {
            continue;
        };
        tracing::info!(dir = %dir.display(), file = %name, "completing a segment swap interrupted by a crash");
        min_swap = min_swap.min(base);
        max_swap = max_swap.max(scan_next_offset(path, base)?);
    }
    if min_swap < max_swap {
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let is_segment_file = SEGMENT_FILE_EXTENSIONS
                .iter()
                .any(|ext| name.ends_with(&format!(".{ext}")));
            if !entry.file_type()?.is_file() || !is_segment_file {
                continue;
            }
            if offset_from_name(&name).is_some_and(|o| o >= min_swap && o < max_swap) {
                tracing::info!(dir = %dir.display(), file = %name, "deleting a segment file replaced by an interrupted swap");
                remove_if_present(&entry.path())?;
            }
        }
    }
    for (name, path) in &swaps {
        let live = &name[..name.len() - SWAP_SUFFIX.len()];
        fs::rename(path, dir.join(live))?;
        changed = true;
    }
    if changed {
        sync_dir(dir)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;

/// The topic settings that drive compaction, under the crate's names.
pub fn compaction_config(config: &TopicConfig) -> CompactionConfig {
    CompactionConfig {
        min_cleanable_dirty_ratio: config.min_cleanable_dirty_ratio,
        min_compaction_lag_ms: config.min_compaction_lag_ms,
        max_compaction_lag_ms: config.max_compaction_lag_ms,
        delete_retention_ms: config.delete_retention_ms,
        segment_bytes: config.segment_bytes,
        segment_index_bytes: config.segment_index_bytes as u64,
        max_decompressed_batch_bytes: config.max_decompressed_batch_bytes,
    }
}
