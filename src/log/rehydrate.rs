//! Rehydration (Strata only, `strata.remote.rehydrate.enable`): a remote segment brought back
//! in front of the local log when local retention would keep it, or when consumers read its
//! range again ([`strata_tiering::rehydrate`] downloads it; this module chooses it and
//! installs it).
//!
//! The choice follows [`Log::apply_retention`]'s rule exactly, so what comes back is never
//! deleted by the next retention pass and nothing is downloaded twice: the segment that ends
//! where the local log starts is wanted while its newest record is within the local
//! retention time and the local log is below the local retention size.
//!
//! A remote range read again is *hot*: a remote fetch that starts below the highest offset a
//! remote fetch of this partition started at within `strata.remote.rehydrate.hot.ms` (a
//! second consumer, or one starting over; a single sequential reader never is). From the
//! lowest such offset up, segments come back even though local retention would delete them,
//! up to `strata.remote.rehydrate.hot.bytes` beyond what local retention keeps, and local
//! retention leaves them while the range is read (remotely or locally) within
//! `strata.remote.rehydrate.hot.ms`; then it deletes them as usual.
//!
//! Either way the free space of the log dir's file system must stay above
//! [`MIN_FREE_PERCENT`] after a segment comes back: appends come first.
//!
//! Installing is two steps. [`stage_rehydrated`] runs without the log lock (the staged files
//! are the rehydrating task's alone): it checks the download (every batch whole and
//! CRC-valid, offsets from the segment's base to exactly its end) and builds the segment's
//! indexes next to it. [`Log::install_rehydrated`] then renames the files into place under
//! the lock (the `.txnindex` before the `.log`, so the segment never exists without its
//! aborted transactions) and opens the segment with its indexes trusted: the lock is held for
//! renames and an fsync, never for a scan of the segment.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};

use strata_tiering::rehydrate::RehydrateTarget;
use strata_tiering::PartitionManifest;

use super::batch::{self, BatchHeader, BATCH_HEADER_LEN};
use super::segment::{file_stem, Segment, SegmentLimits};
use super::{io_fault, limits, txn_index, Log};

/// The least free space, in percent of the file system, a rehydration leaves.
pub const MIN_FREE_PERCENT: i64 = 10;

/// Remote reads of a rehydrating partition, and the hot range they found (in memory only:
/// after a restart a range is hot again once it is read again).
#[derive(Debug)]
pub(super) struct HotReads {
    /// The highest offset a remote fetch started at, and when.
    highest_start: i64,
    highest_at_ms: i64,
    /// The hot range `[floor, ceiling)` (`floor == i64::MAX`: none).
    floor: i64,
    ceiling: i64,
    /// When the hot range was last read (a local read under the log lock updates it too,
    /// through a shared reference).
    last_read_ms: AtomicI64,
}

impl Default for HotReads {
    fn default() -> Self {
        HotReads {
            highest_start: i64::MIN,
            highest_at_ms: i64::MIN,
            floor: i64::MAX,
            ceiling: i64::MIN,
            last_read_ms: AtomicI64::new(i64::MIN),
        }
    }
}

impl Log {
    /// A fetch at `offset` was served from remote storage: a read below the highest remote
    /// read of the window makes the range from `offset` up hot (see the module docs). True
    /// when the hot range became hot or grew (a tiering pass can bring it back now).
    pub fn note_remote_read(&mut self, offset: i64, now_ms: i64) -> bool {
        let c = &self.config;
        if !c.remote_rehydrate || c.remote_rehydrate_hot_bytes <= 0 {
            return false;
        }
        let window = c.remote_rehydrate_hot_ms;
        let active = self.hot_floor(now_ms).is_some();
        let local_start = self.local_start_offset();
        let h = &mut self.hot;
        if now_ms.saturating_sub(h.highest_at_ms) > window {
            h.highest_start = i64::MIN;
        }
        let mut grew = false;
        if offset < h.highest_start {
            if active {
                grew = offset < h.floor;
                h.floor = h.floor.min(offset);
                h.ceiling = h.ceiling.max(local_start);
            } else {
                grew = true;
                h.floor = offset;
                h.ceiling = local_start;
            }
            h.last_read_ms.store(now_ms, Ordering::Relaxed);
        }
        if offset >= h.highest_start {
            h.highest_start = offset;
            h.highest_at_ms = now_ms;
        }
        grew
    }

    /// A local read at `offset`: keeps the hot range hot while it is read.
    pub(super) fn note_local_read(&self, offset: i64) {
        let h = &self.hot;
        if offset >= h.floor && offset < h.ceiling {
            h.last_read_ms
                .store(crate::clock::now_ms(), Ordering::Relaxed);
        }
    }

    /// The floor of the hot range while it is hot.
    pub(super) fn hot_floor(&self, now_ms: i64) -> Option<i64> {
        let c = &self.config;
        let h = &self.hot;
        let last = h.last_read_ms.load(Ordering::Relaxed);
        (c.remote_rehydrate
            && h.floor != i64::MAX
            && now_ms.saturating_sub(last) <= c.remote_rehydrate_hot_ms)
            .then_some(h.floor)
    }

    /// The remote segment to bring back next (see the module docs), with the temporary
    /// paths it is downloaded to.
    pub fn rehydration_candidate(
        &self,
        manifest: &PartitionManifest,
        now_ms: i64,
    ) -> Option<RehydrateTarget> {
        let c = &self.config;
        if !c.remote_rehydrate
            || !c.remote_storage_enable
            || c.cleanup_policy_compact
            || self.offline.is_some()
        {
            return None;
        }
        let first = *self.segments.keys().next()?;
        let log_start = self.log_start_offset.max(manifest.log_start_offset);
        if first <= log_start {
            return None;
        }
        let i = manifest.segments.partition_point(|s| s.next_offset < first);
        let s = manifest
            .segments
            .get(i)
            .filter(|s| s.next_offset == first)?;
        if s.log.is_empty() || s.next_offset <= log_start {
            return None;
        }
        let (retention_ms, retention_bytes) = self.local_retention_limits();
        // What the remote segment's retention time is once local: its newest record, or the
        // upload time (the file's mtime is set to it) when it has no timestamps.
        let timestamp = if s.max_timestamp >= 0 {
            s.max_timestamp
        } else {
            s.uploaded_at_ms
        };
        let by_time = retention_ms >= 0 && now_ms - timestamp > retention_ms;
        let by_size = retention_bytes >= 0 && self.size_bytes() as i64 >= retention_bytes;
        if (by_time || by_size) && !self.hot_wants(s.next_offset, s.size(), now_ms) {
            return None;
        }
        if !room_for(&self.dir, s.size()) {
            tracing::debug!(dir = %self.dir.display(), base = s.base_offset, bytes = s.size(), "not rehydrating: the log dir is short of space");
            return None;
        }
        let stem = file_stem(s.base_offset);
        let staging = self.dir.join(format!("{stem}.rehydrate.tmp"));
        Some(RehydrateTarget {
            segment: s.clone(),
            log_tmp: Segment::log_path(&staging, s.base_offset),
            txn_index_tmp: txn_index::path(&staging, s.base_offset),
            staging,
        })
    }

    /// Whether the hot range wants a segment ending at `next` of `size` bytes back: it holds
    /// offsets of the range, and the bytes kept beyond local retention stay within
    /// `strata.remote.rehydrate.hot.bytes` with it.
    fn hot_wants(&self, next: i64, size: u64, now_ms: i64) -> bool {
        let Some(floor) = self.hot_floor(now_ms) else {
            return false;
        };
        let beyond: u64 = self
            .expired_segments(now_ms, None)
            .iter()
            .map(|(_, size)| size)
            .sum();
        next > floor && beyond.saturating_add(size) <= self.config.remote_rehydrate_hot_bytes as u64
    }

    /// Local retention's (ms, bytes) as [`Log::apply_retention`] chooses them; (-1, -1) when
    /// it deletes nothing by rule (no `delete` in cleanup.policy).
    fn local_retention_limits(&self) -> (i64, i64) {
        let c = &self.config;
        if !c.cleanup_policy_delete {
            (-1, -1)
        } else if c.remote_storage_enable && !c.remote_log_copy_disable {
            (c.local_retention_ms, c.local_retention_bytes)
        } else {
            (c.retention_ms, c.retention_bytes)
        }
    }

    /// Puts the segment staged by [`stage_rehydrated`] in front of the local log. False when
    /// the log no longer starts where the segment ends. The staging directory is the
    /// caller's to remove.
    pub fn install_rehydrated(&mut self, t: &RehydrateTarget, staged: Staged) -> io::Result<bool> {
        self.check_online()?;
        let s = &t.segment;
        if self.segments.keys().next() != Some(&s.next_offset)
            || s.next_offset <= self.log_start_offset
        {
            return Ok(false);
        }
        let base = s.base_offset;
        let into = |ext: &str| Segment::file_path(&self.dir, base, ext, "");
        let from = |ext: &str| Segment::file_path(&t.staging, base, ext, "");
        if s.txn_index.is_some() {
            io_fault::rename(&t.txn_index_tmp, &txn_index::path(&self.dir, base))?;
        } else {
            // A stale index of an earlier segment at this base must not be taken for this one.
            match fs::remove_file(txn_index::path(&self.dir, base)) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        io_fault::rename(&from("index"), &into("index"))?;
        io_fault::rename(&from("timeindex"), &into("timeindex"))?;
        io_fault::rename(&t.log_tmp, &Segment::log_path(&self.dir, base))?;
        File::open(&self.dir)?.sync_all()?;
        let (mut seg, _) = Segment::open(&self.dir, base, limits(&self.config), false)?;
        if seg.next_offset() != s.next_offset {
            // Checked when staged; a file that changed under us is not served.
            let end = seg.next_offset();
            let _ = seg.delete();
            return Err(invalid(format!(
                "rehydrated segment {base} ends at {end}, not {}",
                s.next_offset
            )));
        }
        if s.max_timestamp < 0 {
            seg.set_last_modified(s.uploaded_at_ms)?;
        }
        self.segments.insert(base, seg);
        self.aborted.splice(0..0, staged.aborted);
        Ok(true)
    }

    /// The segment limits [`stage_rehydrated`] builds indexes with.
    pub fn segment_limits(&self) -> SegmentLimits {
        limits(&self.config)
    }
}

/// A checked download with its indexes built, ready for [`Log::install_rehydrated`].
#[derive(Debug)]
pub struct Staged {
    aborted: Vec<txn_index::AbortedTxn>,
}

/// Checks the downloaded files of `t` and builds the segment's offset and time indexes in
/// its staging directory. Takes no lock: the staged files belong to the rehydrating task.
pub fn stage_rehydrated(t: &RehydrateTarget, limits: SegmentLimits) -> io::Result<Staged> {
    let s = &t.segment;
    check_segment_file(&t.log_tmp, s.base_offset, s.next_offset, s.log.len())?;
    let aborted = if s.txn_index.is_some() {
        let entries = txn_index::read(&t.txn_index_tmp)?;
        if let Some(bad) = entries
            .iter()
            .find(|a| a.last_offset < s.base_offset || a.last_offset >= s.next_offset)
        {
            return Err(invalid(format!(
                "the transaction index of {} names a marker at {}, outside the segment",
                s.key, bad.last_offset
            )));
        }
        entries
    } else {
        Vec::new()
    };
    // Opening with recovery builds both indexes from the (checked) bytes.
    let (seg, result) = Segment::open(&t.staging, s.base_offset, limits, true)?;
    if result.is_some_and(|r| r.truncated_bytes > 0) || seg.next_offset() != s.next_offset {
        return Err(invalid(format!(
            "staged segment {} does not end at {}",
            s.base_offset, s.next_offset
        )));
    }
    seg.flush()?;
    drop(seg);
    Ok(Staged { aborted })
}

/// Checks a segment downloaded by a restore from the bucket (a compacted log's: offsets may
/// have gaps): whole, CRC-valid batches with increasing offsets from `base`, cut before the
/// first batch at or past `upto` (where the next segment starts); the `.txnindex` at `txn`
/// keeps only the markers the segment still holds.
pub fn check_restored(log: &Path, txn: Option<&Path>, base: i64, upto: i64) -> io::Result<()> {
    let file = fs::OpenOptions::new().read(true).write(true).open(log)?;
    let size = file.metadata()?.len();
    let (pos, end) = check_batches(&file, log, size, base, upto)?;
    if pos < size {
        file.set_len(pos)?;
        file.sync_all()?;
    }
    if let Some(txn) = txn {
        let entries = txn_index::read(txn)?;
        let keep: Vec<_> = entries
            .iter()
            .copied()
            .filter(|a| a.last_offset >= base && a.last_offset < end)
            .collect();
        if keep.len() != entries.len() {
            txn_index::rewrite(txn, &keep)?;
        }
    }
    Ok(())
}

/// Checks a downloaded segment: `len` bytes of whole, CRC-valid batches whose offsets
/// increase from `base` and end exactly at `next`.
fn check_segment_file(path: &Path, base: i64, next: i64, len: u64) -> io::Result<()> {
    let file = File::open(path)?;
    let size = file.metadata()?.len();
    if size != len {
        return Err(invalid(format!(
            "{}: {size} bytes downloaded, the manifest says {len}",
            path.display()
        )));
    }
    let (pos, end) = check_batches(&file, path, size, base, next)?;
    if pos < size || end != next {
        return Err(invalid(format!(
            "{}: the batches end at {end} (byte {pos} of {size}), the manifest says {next}",
            path.display()
        )));
    }
    Ok(())
}

/// Walks the first `size` bytes of `file` (at `path`) batch by batch, up to the first batch
/// at or past offset `upto`: each must be whole, pass its CRC, and hold offsets increasing
/// from `base` and below `upto`. Returns the byte position where the walk stopped and the
/// offset after the last batch checked. A buffer holds one batch at a time, bounded by the
/// file.
fn check_batches(
    file: &File,
    path: &Path,
    size: u64,
    base: i64,
    upto: i64,
) -> io::Result<(u64, i64)> {
    let mut header = [0u8; BATCH_HEADER_LEN];
    let mut body = Vec::new();
    let (mut pos, mut expected) = (0u64, base);
    while pos < size {
        if pos + BATCH_HEADER_LEN as u64 > size {
            return Err(invalid(format!("{}: torn batch at {pos}", path.display())));
        }
        file.read_exact_at(&mut header, pos)?;
        let h = BatchHeader::parse(&header)
            .map_err(|e| invalid(format!("{}: batch at {pos}: {e}", path.display())))?;
        if h.base_offset >= upto {
            break;
        }
        let total = h.total_size() as u64;
        if pos + total > size {
            return Err(invalid(format!("{}: torn batch at {pos}", path.display())));
        }
        if h.base_offset < expected || h.last_offset() >= upto {
            return Err(invalid(format!(
                "{}: batch at {pos} holds offsets {}..={}, expected from {expected} below {upto}",
                path.display(),
                h.base_offset,
                h.last_offset()
            )));
        }
        body.resize(total as usize, 0);
        file.read_exact_at(&mut body, pos)?;
        if !batch::crc_matches(&body) {
            return Err(invalid(format!(
                "{}: batch at {pos} fails its CRC",
                path.display()
            )));
        }
        expected = h.last_offset() + 1;
        pos += total;
    }
    Ok((pos, expected))
}

/// Whether `dir`'s file system keeps [`MIN_FREE_PERCENT`] free after `bytes` more.
fn room_for(dir: &Path, bytes: u64) -> bool {
    let Some((total, usable)) = super::disk_space(dir) else {
        return false;
    };
    usable.saturating_sub(bytes as i64) >= total / 100 * MIN_FREE_PERCENT
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use kafka_protocol::records::Compression;

    use super::*;
    use crate::config::TopicConfig;
    use crate::log::batch::tests::encode_batch;
    use crate::log::LoadOptions;

    /// A segment file of three batches of two records (offsets 0..6) and its path.
    fn three_batches(dir: &Path) -> (std::path::PathBuf, Vec<u8>) {
        let now = crate::clock::now_ms();
        let mut log = Log::open(
            &dir.join("src-0"),
            TopicConfig::resolve(&BTreeMap::new(), &Default::default()),
            LoadOptions {
                clean_shutdown: true,
                recovery_point: None,
                log_start_offset: None,
                now_ms: now,
            },
        )
        .unwrap();
        for _ in 0..3 {
            let b = encode_batch(&[b"a", b"b"], Compression::None, now);
            log.append_as_leader(&b, 0, now).unwrap();
        }
        log.flush(now).unwrap();
        let bytes = fs::read(Segment::log_path(&dir.join("src-0"), 0)).unwrap();
        let path = dir.join("copy.log");
        fs::write(&path, &bytes).unwrap();
        (path, bytes)
    }

    #[test]
    fn a_restored_segment_is_checked_and_cut_where_the_next_one_starts() {
        let tmp = tempfile::tempdir().unwrap();
        let (path, bytes) = three_batches(tmp.path());
        check_restored(&path, None, 0, i64::MAX).unwrap();
        assert_eq!(fs::read(&path).unwrap(), bytes, "a whole segment is kept");

        // The next segment starts at offset 4: the third batch goes, and so does the marker
        // of the transaction index that it held.
        let txn = tmp.path().join("copy.txnindex");
        let entry = |last_offset| txn_index::AbortedTxn {
            producer_id: 7,
            first_offset: 0,
            last_offset,
            last_stable_offset: 0,
        };
        txn_index::rewrite(&txn, &[entry(1), entry(5)]).unwrap();
        check_restored(&path, Some(&txn), 0, 4).unwrap();
        assert_eq!(fs::read(&path).unwrap().len(), bytes.len() / 3 * 2);
        assert_eq!(txn_index::read(&txn).unwrap(), vec![entry(1)]);

        // A flipped byte fails the CRC; offsets below the segment's base are out of place.
        let mut bad = bytes.clone();
        bad[bytes.len() - 3] ^= 1;
        fs::write(&path, &bad).unwrap();
        assert!(check_restored(&path, None, 0, i64::MAX).is_err());
        fs::write(&path, &bytes).unwrap();
        assert!(check_restored(&path, None, 2, i64::MAX).is_err());
        // A torn tail is refused, not cut.
        fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
        assert!(check_restored(&path, None, 0, i64::MAX).is_err());
    }
}
