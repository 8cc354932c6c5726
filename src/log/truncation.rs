//! Truncation (Kafka's `UnifiedLog.truncateTo` and `truncateFullyAndStartAt`): a follower cuts
//! off its divergent suffix, or restarts its log empty at the leader's start, or at the local
//! start of a tiered partition. Everything derived from the removed batches follows: leader
//! epochs, the high watermark and recovery point, aborted transactions and producer state.

use std::fs;
use std::io;

use super::cleaner::sync_dir;
use super::producer_state::ProducerStateManager;
use super::segment::Segment;
use super::{limits, txn_index, Log};

impl Log {
    /// Removes everything at or above `offset` (a follower's divergent suffix). The log end
    /// offset becomes `offset` or less (a batch straddling it goes whole); the high watermark,
    /// recovery point, leader epochs, producer state and aborted transactions follow. Below
    /// the log start offset the log is emptied and restarted at `offset`. Returns whether
    /// anything was removed.
    pub fn truncate_to(&mut self, offset: i64, now_ms: i64) -> io::Result<bool> {
        self.check_online()?;
        self.rewrites += 1;
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
        self.truncate_segments_to(offset, now_ms)?;
        let end = self.log_end_offset;
        self.epochs.truncate_from_end(end)?;
        self.high_watermark = self.high_watermark.min(end);
        self.recovery_point = self.recovery_point.min(end);
        self.truncate_aborted_txns(end)?;
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

    /// Deletes the segments above `offset`, cuts the one holding it and sets the log end
    /// offset.
    fn truncate_segments_to(&mut self, offset: i64, now_ms: i64) -> io::Result<()> {
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
        Ok(())
    }

    /// Aborted transactions whose marker is gone (at or above `end`) leave the indexes.
    fn truncate_aborted_txns(&mut self, end: i64) -> io::Result<()> {
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
        Ok(())
    }

    /// Deletes every segment and restarts the log empty at `offset` (Kafka's
    /// `truncateFullyAndStartAt`: a follower far behind the leader's log start).
    pub fn truncate_fully_and_start_at(&mut self, offset: i64, now_ms: i64) -> io::Result<()> {
        self.rewrites += 1;
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
        self.rewrites += 1;
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
}

/// The file a seed from the bucket keeps in the partition directory until it completes: a
/// log that has it is treated as empty and seeded again (see [`Log::seed_from_remote`]).
pub const SEED_MARKER: &str = "bucket-seed-pending";

/// What a leader with an empty local log of a tiered partition takes from the bucket.
#[derive(Debug)]
pub struct LogSeed {
    /// The partition's log start offset (the manifest's).
    pub log_start_offset: i64,
    /// The remote log's end, where the local log starts.
    pub local_start_offset: i64,
    /// The leader epochs that start below `local_start_offset`.
    pub epochs: Vec<(i32, i64)>,
    pub producer_snapshot: Option<bytes::Bytes>,
    /// Checked segments below `local_start_offset` to bring back too (the coordinators'
    /// topics), in a staging directory inside the partition directory.
    pub segments: Option<std::path::PathBuf>,
}

impl Log {
    /// Whether a seed from the bucket may start here: the log is empty, or an earlier seed
    /// did not complete.
    pub fn wants_seed(&self) -> bool {
        (self.log_start_offset == 0 && self.log_end_offset == 0)
            || self.dir.join(SEED_MARKER).exists()
    }

    /// A tiered partition led from an empty local log (a cluster rebuilt from its bucket, or
    /// a leader elected with no data): the log restarts at the remote log's end with the
    /// partition's leader epochs and producer state, as a follower does with
    /// [`Log::start_at_tiered`], and with `seed.segments` moved in front of it, so that the
    /// leader appends after what the bucket holds instead of reusing its offsets.
    ///
    /// Crash consistency: [`SEED_MARKER`] is written (and the directory fsynced) first and
    /// removed last; a log that still has it is empty for [`Log::wants_seed`] and is seeded
    /// again from scratch.
    pub fn seed_from_remote(&mut self, seed: &LogSeed, now_ms: i64) -> io::Result<()> {
        self.check_online()?;
        let marker = self.dir.join(SEED_MARKER);
        fs::write(&marker, b"")?;
        sync_dir(&self.dir)?;
        self.start_at_tiered(
            seed.log_start_offset,
            seed.local_start_offset,
            &seed.epochs,
            seed.producer_snapshot.as_deref(),
            now_ms,
        )?;
        if let Some(staged) = &seed.segments {
            let mut files: Vec<_> = fs::read_dir(staged)?
                .map(|e| e.map(|e| e.path()))
                .collect::<io::Result<_>>()?;
            // Each segment's `.log` last: a `.txnindex` without its log is never opened.
            files.sort_by_key(|p| p.extension().is_some_and(|e| e == "log"));
            for f in files {
                if let Some(name) = f.file_name() {
                    super::io_fault::rename(&f, &self.dir.join(name))?;
                }
            }
            let _ = fs::remove_dir(staged);
            sync_dir(&self.dir)?;
            let opts = super::LoadOptions {
                clean_shutdown: false,
                recovery_point: Some(self.log_start_offset),
                log_start_offset: Some(self.log_start_offset),
                now_ms,
            };
            let mut fresh = Log::open(&self.dir, self.config.clone(), opts)?;
            if fresh.log_end_offset != seed.local_start_offset {
                return Err(io::Error::other(format!(
                    "the seeded log in {} ends at {}, not at the remote end {}",
                    self.dir.display(),
                    fresh.log_end_offset,
                    seed.local_start_offset
                )));
            }
            fresh.high_watermark = fresh.log_end_offset;
            fresh.remote_end_offset = seed.local_start_offset;
            fresh.rewrites = self.rewrites + 1;
            *self = fresh;
        }
        fs::remove_file(&marker)?;
        sync_dir(&self.dir)
    }
}
