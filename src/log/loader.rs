//! Opening a log (Kafka's `LogLoader`): the segments found in the directory are opened in
//! offset order; after an unclean shutdown those from the recovery point on are rescanned
//! (CRCs checked, a torn tail truncated, indexes rebuilt) and every segment after a corrupt one
//! is deleted. The log start offset, the leader epochs, the aborted transactions and the
//! producer state (the newest usable snapshot, then a replay of the batches after it) follow
//! from what survived. An offline log is repaired the same way ([`Log::ensure_online`]).

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::Path;

use super::leader_epoch::LeaderEpochCache;
use super::marker::{marker_type, MARKER_ABORT};
use super::producer_state::ProducerStateManager;
use super::segment::{Segment, SegmentLimits};
use super::{cleaner, limits, txn_index, LoadOptions, Log, REPAIR_BACKOFF_MS};
use crate::config::TopicConfig;

impl Log {
    /// Opens (creating if needed) the log in `dir`.
    pub fn open(dir: &Path, config: TopicConfig, opts: LoadOptions) -> io::Result<Log> {
        fs::create_dir_all(dir)?;
        cleaner::recover_interrupted_swaps(dir)?;
        let limits = limits(&config);
        let mut segments = load_segments(dir, segment_bases(dir)?, limits, &opts)?;
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
        let log_start_offset =
            initial_log_start_offset(&config, &opts, first_base).min(log_end_offset);
        let mut epochs = LeaderEpochCache::load(dir)?;
        epochs.truncate_from_end(log_end_offset)?;
        let mut log = Log {
            dir: dir.to_path_buf(),
            config,
            segments,
            log_start_offset,
            log_end_offset,
            high_watermark: log_end_offset,
            // After a crash, what was rescanned above the recovery point is in the page
            // cache, not necessarily on disk: nothing became more durable by being reread.
            recovery_point: if opts.clean_shutdown {
                log_end_offset
            } else {
                opts.recovery_point.unwrap_or(0).min(log_end_offset)
            },
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
            rewrites: 0,
            hot: Default::default(),
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

    /// Loads the newest usable snapshot at or below the log end and replays the rest.
    pub(super) fn load_producer_state(&mut self) -> io::Result<()> {
        let replay_from = self.restore_producer_snapshot()?;
        self.replay_producer_state(replay_from)
    }

    /// Takes the newest readable producer snapshot at or below the log end (removing those
    /// above it) and returns the offset to replay the log from.
    fn restore_producer_snapshot(&mut self) -> io::Result<i64> {
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
        Ok(replay_from)
    }

    /// Replays the batches from `replay_from` into the producer state, and indexes the
    /// aborted transactions whose markers it meets.
    fn replay_producer_state(&mut self, replay_from: i64) -> io::Result<()> {
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
                            .last_stable_offset_after_abort(h.producer_id, h.base_offset);
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
        // Remote retention's only local input: a DeleteRecords not yet tiered must survive the
        // repair, or the records it deleted would stay in the bucket.
        fresh.delete_records_offset = self.delete_records_offset;
        fresh.last_flush_ms = self.last_flush_ms;
        fresh.last_repair_ms = self.last_repair_ms;
        fresh.rewrites = self.rewrites + 1;
        *self = fresh;
        Ok(())
    }
}

/// The base offsets of the segments in `dir`, ascending. Removes the temp files and
/// directories (`.tmp`) a crash left behind.
fn segment_bases(dir: &Path) -> io::Result<Vec<i64>> {
    let mut bases = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().to_string();
        if name.ends_with(".tmp") {
            // A rehydration's staging directory is a `.tmp` too.
            let _ = if entry.file_type().is_ok_and(|t| t.is_dir()) {
                fs::remove_dir_all(entry.path())
            } else {
                fs::remove_file(entry.path())
            };
            continue;
        }
        if let Some(stem) = name.strip_suffix(".log") {
            if let Ok(base) = stem.parse::<i64>() {
                bases.push(base);
            }
        }
    }
    bases.sort_unstable();
    Ok(bases)
}

/// Opens the segments at `bases` (ascending). After an unclean shutdown the segments from the
/// one holding the recovery point on are rescanned; once one had a torn or corrupt tail cut
/// off, every later segment is deleted.
fn load_segments(
    dir: &Path,
    bases: Vec<i64>,
    limits: SegmentLimits,
    opts: &LoadOptions,
) -> io::Result<BTreeMap<i64, Segment>> {
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
    Ok(segments)
}

/// The log start offset at open, before it is capped at the log end offset.
fn initial_log_start_offset(config: &TopicConfig, opts: &LoadOptions, first_base: i64) -> i64 {
    // With remote storage the log starts below the first local segment as soon as a
    // segment has been tiered: the first local segment says nothing about the log start,
    // and a missing checkpoint means "not known yet" (0), never "the local start". The
    // manifest raises it before the broker serves ([`Log::apply_manifest`]).
    if config.remote_storage_enable {
        opts.log_start_offset.unwrap_or(0).max(0)
    } else {
        opts.log_start_offset.unwrap_or(first_base).max(first_base)
    }
}
