//! What tiered storage does to a partition's local log: the steps of the upload queue
//! ([`strata_tiering::local_log::LocalLog`], implemented in [`crate::tiering`]) that read or
//! change the log, each under one hold of the log lock, so the cleaner, retention and appends
//! see them as one step.

use std::io;

use strata_tiering::local_log::{CompactedSegments, LocalRetentionInput, PreparedSegment};

use super::Partition;

impl Partition {
    /// Applies the manifest's log start offset and remote end (at start-up and after each
    /// commit); returns the log start offset (before, after).
    pub fn apply_manifest(
        &self,
        log_start_offset: i64,
        remote_end: Option<i64>,
    ) -> io::Result<(i64, i64)> {
        self.with_log(|l| {
            let before = l.log_start_offset();
            l.apply_manifest(log_start_offset, remote_end)?;
            Ok((before, l.log_start_offset()))
        })
    }

    /// The first sealed segment at or after `from` that may be uploaded, read for upload.
    pub fn next_uploadable(&self, from: i64) -> io::Result<Option<PreparedSegment>> {
        // Listed and mapped under the log lock, so the cleaner cannot swap the files in
        // between (the map keeps the old inode readable afterwards).
        self.with_log(|l| {
            let now = crate::clock::now_ms();
            let Some(files) = l.uploadable_segments(from, now).into_iter().next() else {
                return Ok(None);
            };
            let parts = strata_tiering::upload::prepare(&files).map_err(io::Error::other)?;
            Ok(Some(PreparedSegment { files, parts }))
        })
    }

    /// Lets local retention delete what remote storage holds below `remote_end`, and applies
    /// it; returns the segments deleted.
    pub fn allow_local_retention(&self, remote_end: i64, now_ms: i64) -> io::Result<usize> {
        self.with_log(|l| {
            l.set_remote_end_offset(remote_end);
            l.apply_retention(now_ms)
        })
    }

    /// The local inputs of remote retention.
    pub fn retention_input(&self) -> LocalRetentionInput {
        self.with_log(|l| LocalRetentionInput {
            delete_records_offset: l.delete_records_offset(),
            local_only_bytes: l.local_only_bytes(),
        })
    }

    /// Moves the log start offset up to what remote retention kept.
    pub fn advance_log_start_offset(&self, log_start_offset: i64) -> io::Result<()> {
        self.with_log(|l| l.advance_log_start_offset(log_start_offset))
    }

    /// The sealed, cleaned segments up to the last sealed end at or below `limit`, read for
    /// a compacted snapshot.
    pub fn compacted_segments(&self, limit: i64) -> io::Result<Option<CompactedSegments>> {
        self.with_log(|l| {
            let Some(upto) = l.sealed_end_at_or_below(limit) else {
                return Ok(None);
            };
            let segments = l
                .segment_files(-1, upto)
                .into_iter()
                .map(|files| {
                    let parts =
                        strata_tiering::upload::prepare(&files).map_err(io::Error::other)?;
                    Ok(PreparedSegment { files, parts })
                })
                .collect::<io::Result<Vec<_>>>()?;
            Ok(Some(CompactedSegments {
                from: l.local_start_offset(),
                upto,
                segments,
            }))
        })
    }

    /// Rehydration: the remote segment of `manifest` to bring back next, if any.
    pub fn rehydration_candidate(
        &self,
        manifest: &strata_tiering::PartitionManifest,
        now_ms: i64,
    ) -> Option<strata_tiering::rehydrate::RehydrateTarget> {
        self.with_log(|l| l.rehydration_candidate(manifest, now_ms))
    }

    /// Rehydration: checks a downloaded segment and builds its indexes without the log lock,
    /// then puts it in front of the local log under it.
    pub fn install_rehydrated(
        &self,
        target: &strata_tiering::rehydrate::RehydrateTarget,
    ) -> io::Result<bool> {
        let limits = self.with_log(|l| l.segment_limits());
        let staged = crate::log::rehydrate::stage_rehydrated(target, limits)?;
        self.with_log(|l| l.install_rehydrated(target, staged))
    }

    /// Seals the active segment (if it has records), so it can be uploaded.
    pub fn roll(&self, now_ms: i64) -> io::Result<()> {
        self.with_log(|l| l.roll(now_ms))
    }
}
