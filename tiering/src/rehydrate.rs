//! Rehydration (Strata only): bringing remote segments back to the broker's disk.
//!
//! A topic with `strata.remote.rehydrate.enable=true` asks each replica, at the end of its
//! tiering pass, for the remote segment that ends where its local log starts and that its local
//! retention would keep if it were local ([`LocalLog::rehydration_candidate`]): raising
//! `local.retention.ms` / `.bytes` then brings old data back, one segment at a time from the
//! newest down, until local retention would delete the next one. Reads of that range stop
//! paying object-store latency.
//!
//! # Steps and crash consistency
//! 1. The segment's `.log` part (and its `.txnindex`) is downloaded in ranged chunks (a few
//!    in flight, written in order),
//!    bypassing the read cache, into a staging directory inside the partition directory
//!    (named `.tmp`, which opening a log removes) and fsynced. A crash here leaves only the
//!    staging directory.
//! 2. [`LocalLog::install_rehydrated`] checks the staged files (every batch's CRC, offsets
//!    from the segment's base to exactly its end) and builds the segment's indexes, outside
//!    the log lock; then, under it, checks that the log still starts where the segment ends,
//!    renames the files into place (the `.log` last) and opens the segment. A crash after the
//!    rename leaves a whole, checked segment in front of the log, which the next start opens
//!    like any other.
//!
//! Nothing here deletes anything but the temporary files: the bucket and the manifest are only
//! read, so a failed or corrupt download costs a retry at the next pass and nothing else.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;

use crate::backoff::{self, Backoff};
use crate::error::TieringError;
use crate::local_log::{DurableStep, LocalLog};
use crate::manifest::{Part, RemoteSegment};
use crate::partition::TieredPartition;
use crate::store::RemoteStore;
use crate::upload_queue::QueueContext;

/// Ranged GETs of a rehydration are this large.
pub const CHUNK_BYTES: u64 = 8 << 20;

/// Ranged GETs of one rehydration in flight at once.
const GETS_IN_FLIGHT: usize = 4;

/// The most bytes a `.txnindex` part may have (34 bytes per aborted transaction): more is a
/// corrupt manifest, not an index.
pub const MAX_TXN_INDEX_BYTES: u64 = 64 << 20;

/// A remote segment to bring back, and where its files are staged.
#[derive(Debug, Clone)]
pub struct RehydrateTarget {
    pub segment: RemoteSegment,
    /// The staging directory (created by the download, removed after the attempt).
    pub staging: PathBuf,
    /// Where the `.log` is downloaded to, in `staging`.
    pub log_tmp: PathBuf,
    /// Where the `.txnindex` is downloaded to (when the segment has one), in `staging`.
    pub txn_index_tmp: PathBuf,
}

impl RehydrateTarget {
    async fn remove_temp_files(&self) {
        let _ = tokio::fs::remove_dir_all(&self.staging).await;
    }
}

/// Rehydrates segments until the log wants no more (or one fails). Returns how many were
/// installed.
pub(crate) async fn run<L: LocalLog>(
    ctx: &QueueContext,
    cancel: &CancellationToken,
    tp: &TieredPartition,
    log: &Arc<L>,
) -> Result<usize, TieringError> {
    let mut installed = 0;
    loop {
        if cancel.is_cancelled() {
            return Err(TieringError::Cancelled);
        }
        let manifest = tp.manifest();
        let now = crate::upload_queue::now_ms();
        let l = log.clone();
        let Some(target) =
            tokio::task::spawn_blocking(move || l.rehydration_candidate(&manifest, now)).await?
        else {
            return Ok(installed);
        };
        let downloaded = download(ctx, cancel, tp, &target).await;
        if let Err(e) = downloaded {
            target.remove_temp_files().await;
            ctx.metrics
                .rehydration_failures
                .fetch_add(1, Ordering::Relaxed);
            return Err(e);
        }
        log.reached(DurableStep::RehydrateDownloaded);
        let l = log.clone();
        let t = target.clone();
        let done = tokio::task::spawn_blocking(move || l.install_rehydrated(&t)).await;
        // Whatever happened, no temporary file outlives the attempt (after a rename there is
        // none left to remove).
        target.remove_temp_files().await;
        let done = match done {
            Ok(Ok(done)) => done,
            Ok(Err(e)) => {
                ctx.metrics
                    .rehydration_failures
                    .fetch_add(1, Ordering::Relaxed);
                tracing::warn!(partition = %tp.id.dir(), base = target.segment.base_offset, key = %target.segment.key, error = %e, "cannot rehydrate a remote segment");
                return Err(e.into());
            }
            Err(e) => return Err(e.into()),
        };
        if !done {
            // The local log moved on while the segment downloaded; the next pass looks again.
            return Ok(installed);
        }
        log.reached(DurableStep::Rehydrated);
        installed += 1;
        let s = &target.segment;
        ctx.metrics
            .segments_rehydrated
            .fetch_add(1, Ordering::Relaxed);
        ctx.metrics
            .bytes_rehydrated
            .fetch_add(s.size(), Ordering::Relaxed);
        tracing::info!(partition = %tp.id.dir(), base = s.base_offset, next = s.next_offset, bytes = s.size(), "rehydrated a remote segment to local disk");
    }
}

/// Downloads the segment's `.log` (and `.txnindex`) parts to the target's staging directory.
async fn download(
    ctx: &QueueContext,
    cancel: &CancellationToken,
    tp: &TieredPartition,
    t: &RehydrateTarget,
) -> Result<(), TieringError> {
    // Not create_dir_all: a partition directory deleted meanwhile (its topic deleted) must
    // not be created again by a download.
    let _ = tokio::fs::remove_dir_all(&t.staging).await;
    tokio::fs::create_dir(&t.staging).await?;
    let (store, backoff) = (ctx.store.as_ref(), ctx.config.backoff);
    download_segment(
        store,
        backoff,
        cancel,
        &tp.id.topic,
        &t.segment,
        &t.log_tmp,
        &t.txn_index_tmp,
    )
    .await
}

/// Downloads one remote segment's `.log` part to `log` and, when it has one, its `.txnindex`
/// part (at most [`MAX_TXN_INDEX_BYTES`]) to `txn_index`, and fsyncs them: ranged GETs of
/// [`CHUNK_BYTES`], a few in flight and written in order, each retried with `backoff`.
/// Rehydration and a restore from the bucket both download this way.
pub async fn download_segment(
    store: &RemoteStore,
    backoff: Backoff,
    cancel: &CancellationToken,
    topic: &str,
    s: &RemoteSegment,
    log: &Path,
    txn_index: &Path,
) -> Result<(), TieringError> {
    write_part(store, backoff, cancel, topic, s, s.log, log).await?;
    if let Some(part) = s.txn_index {
        if part.len() > MAX_TXN_INDEX_BYTES {
            return Err(invalid(format!(
                "the manifest gives segment {} a transaction index of {} bytes",
                s.key,
                part.len()
            )));
        }
        write_part(store, backoff, cancel, topic, s, part, txn_index).await?;
    }
    Ok(())
}

async fn write_part(
    store: &RemoteStore,
    backoff: Backoff,
    cancel: &CancellationToken,
    topic: &str,
    s: &RemoteSegment,
    part: Part,
    path: &Path,
) -> Result<(), TieringError> {
    use futures::{StreamExt, TryStreamExt};
    let mut file = tokio::fs::File::create(path).await?;
    let ranges = (part.start..part.end)
        .step_by(CHUNK_BYTES as usize)
        .map(|at| (at, part.end.min(at.saturating_add(CHUNK_BYTES))));
    // GETS_IN_FLIGHT ranged GETs at a time, written in order: memory stays bounded by
    // GETS_IN_FLIGHT chunks.
    let mut chunks = futures::stream::iter(ranges)
        .map(|(at, end)| async move {
            let bytes = backoff::retry(cancel, backoff, "download segment", || async {
                Ok(store.get_range(topic, &s.key, at..end).await?)
            })
            .await?;
            if bytes.len() as u64 != end - at {
                return Err(invalid(format!(
                    "object {} returned {} bytes for range {at}..{end}",
                    s.key,
                    bytes.len()
                )));
            }
            Ok(bytes)
        })
        .buffered(GETS_IN_FLIGHT);
    while let Some(bytes) = chunks.try_next().await? {
        file.write_all(&bytes).await?;
    }
    file.sync_all().await?;
    Ok(())
}

fn invalid(message: String) -> TieringError {
    TieringError::LocalLog(std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        message,
    ))
}
