//! The upload queue: one partition's tiering work as typed operations, run by one worker at a
//! time, fed by events.
//!
//! Events ([`Event`]: a segment rolled, the high watermark advanced, leadership or topic
//! config changed, or the broker's fallback timer) ask for a pass. A pass is a sequence of
//! [`Operation`]s that [`UploadQueue`] (pure state, no I/O) hands out one at a time and
//! advances from their [`Completion`]s; [`PartitionWorker`] executes them against the
//! [`RemoteStore`], the [`TieredPartition`] and the broker's [`LocalLog`].
//!
//! A leader's pass: claim the manifest when its epoch is new, apply the manifest to the local
//! log, then per sealed segment below the high watermark (oldest first) upload, commit,
//! apply local retention; then a compacted snapshot (compacted topics), remote retention and
//! rehydration ([`crate::rehydrate`]). A follower's pass reloads the manifest, applies local
//! retention up to it, and rehydrates.
//!
//! # Consistency
//! The queue only creates a commit from a finished upload, and local retention from a
//! finished commit: a segment's bundle is in the bucket before a manifest names it, and a
//! local segment is deleted only below the end of a committed manifest (design invariants 3
//! and 5; the broker hands out only sealed segments below the high watermark and last stable
//! offset). Remote retention removes segments from the manifest before deleting their objects
//! ([`TieredPartition::apply_retention`]). Every commit is fenced by the pass's leader epoch.
//!
//! # Retries
//! Each operation is retried in place with [`backoff::retry`] while its error is retriable,
//! except a manifest commit: one whose answer was lost may have succeeded, and committing the
//! same object again would find it covered and delete it, so after a failed commit the
//! segment is uploaded again under a new key, after the same backoff (the failed attempt's
//! object is an orphan). A pass whose operation still fails ends, and the next event or the
//! fallback tick starts a new one. A fenced pass also forgets the claimed epoch.
//!
//! # Cancellation
//! The worker's [`CancellationToken`] stops an operation at its next await (also mid-backoff)
//! with [`TieringError::Cancelled`]; dropping the worker's future is equally safe. What was
//! not committed is redone by the next process: nothing here is durable but the bucket.
//!
//! # Crash consistency
//! A crash after an upload leaves an orphan that the scrubber removes (the segment is
//! uploaded again under a new key); after a commit, the local copy is deleted by the next
//! pass; after a remote-retention commit, the unreferenced objects are orphans as well. The
//! broker's crash points sit right after those durable steps ([`LocalLog::reached`]).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::backoff::{self, Backoff};
use crate::error::TieringError;
use crate::local_log::{DurableStep, LocalLog, PreparedSegment, ReplicaRole};
use crate::manifest::RemoteSegment;
use crate::partition::{RetentionInput, TieredPartition};
use crate::store::RemoteStore;
use crate::upload::{self, UploadOptions};

/// Counters of the tiering task (rendered by the broker in Prometheus format).
#[derive(Debug, Default)]
pub struct TieringMetrics {
    pub segments_uploaded: AtomicU64,
    pub upload_failures: AtomicU64,
    pub segments_deleted_remote: AtomicU64,
    pub orphans_removed: AtomicU64,
    pub compacted_snapshots: AtomicU64,
    pub remote_fetches: AtomicU64,
    pub remote_fetch_errors: AtomicU64,
    pub segments_rehydrated: AtomicU64,
    pub bytes_rehydrated: AtomicU64,
    pub rehydration_failures: AtomicU64,
}

/// Why a partition needs a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The active segment was rolled: a sealed segment may be uploadable.
    SegmentRolled,
    /// The high watermark (or last stable offset) advanced past a sealed segment.
    HighWatermarkAdvanced,
    /// This replica became leader or follower, or its leader epoch changed.
    LeadershipChanged,
    /// The topic's configuration changed (retention, cleanup policy).
    ConfigChanged,
    /// The fallback timer: reconcile whatever the events missed.
    Reconcile,
}

/// One step of a pass.
#[derive(Debug)]
pub enum Operation {
    /// A new leader reloads the manifest and writes its epoch into it (fencing older ones).
    Claim { leader_epoch: i32 },
    /// The local log takes the manifest's log start offset and remote end.
    ApplyManifest,
    /// Upload the oldest sealed segment past the manifest's end. `attempt` counts from 1;
    /// a later attempt (after a failed commit) waits its backoff first.
    UploadSegment { leader_epoch: i32, attempt: u32 },
    /// Add an uploaded segment to the manifest.
    CommitManifest {
        leader_epoch: i32,
        attempt: u32,
        segment: Box<RemoteSegment>,
        /// The manifest's end when the segment was chosen.
        from: i64,
        bytes: u64,
        started: Instant,
    },
    /// Local retention may delete what the committed manifest covers.
    ApplyLocalRetention {
        remote_end: i64,
        bytes: u64,
        started: Instant,
    },
    /// Compacted topics: replace cleaned remote ranges with a compacted snapshot.
    UploadCompactedSnapshot { leader_epoch: i32 },
    /// Remote retention: remove expired segments from the manifest, then their objects.
    DeleteRemote { leader_epoch: i32 },
    /// A follower reloads the manifest and applies local retention up to it.
    FollowManifest,
    /// Bring back the remote segments local retention would keep ([`crate::rehydrate`]).
    Rehydrate,
    /// Everything queued before it is done.
    Barrier,
}

impl Operation {
    pub fn name(&self) -> &'static str {
        match self {
            Operation::Claim { .. } => "claim manifest",
            Operation::ApplyManifest => "apply manifest",
            Operation::UploadSegment { .. } => "upload segment",
            Operation::CommitManifest { .. } => "commit manifest",
            Operation::ApplyLocalRetention { .. } => "apply local retention",
            Operation::UploadCompactedSnapshot { .. } => "upload compacted snapshot",
            Operation::DeleteRemote { .. } => "delete remote",
            Operation::FollowManifest => "follow manifest",
            Operation::Rehydrate => "rehydrate",
            Operation::Barrier => "barrier",
        }
    }
}

/// How an operation ended.
#[derive(Debug)]
pub enum Completion {
    Claimed {
        leader_epoch: i32,
    },
    /// The operation is done and implies no follow-up of its own.
    Done,
    Uploaded {
        leader_epoch: i32,
        attempt: u32,
        segment: Box<RemoteSegment>,
        from: i64,
        bytes: u64,
        started: Instant,
    },
    /// No sealed segment past the manifest's end (or the last one overlapped what is remote).
    NothingToUpload {
        leader_epoch: i32,
    },
    Committed {
        leader_epoch: i32,
        remote_end: i64,
        bytes: u64,
        started: Instant,
    },
    /// A commit failed in a way that may pass if the segment is uploaded again (under a
    /// new key: the failed commit may have succeeded, see [`Operation::CommitManifest`]).
    CommitFailed {
        leader_epoch: i32,
        attempt: u32,
    },
    Failed {
        fenced: bool,
    },
}

/// One partition's queue (pure state).
#[derive(Debug, Default)]
pub struct UploadQueue {
    ops: VecDeque<Operation>,
    pass_requested: bool,
    /// An operation was handed out and has not completed: nothing else is handed out until
    /// it has (so an upload and the commit or local delete after it never overlap).
    in_flight: bool,
    /// The epoch at which this broker last claimed the manifest as leader.
    claimed_epoch: Option<i32>,
}

impl UploadQueue {
    pub fn new() -> UploadQueue {
        UploadQueue::default()
    }

    /// Records an event: a pass is due (a leadership change makes the next one re-claim).
    pub fn event(&mut self, event: Event) {
        if event == Event::LeadershipChanged {
            self.claimed_epoch = None;
        }
        self.pass_requested = true;
    }

    /// Queues a barrier behind a due pass and whatever it leads to.
    pub fn barrier(&mut self, role: ReplicaRole) {
        self.start_pass_if_due(role);
        self.ops.push_back(Operation::Barrier);
    }

    pub fn is_idle(&self) -> bool {
        self.ops.is_empty() && !self.pass_requested && !self.in_flight
    }

    /// The next operation for a replica in `role`, or None when there is nothing to do or
    /// the operation handed out last has not completed. A barrier needs no completion.
    pub fn next(&mut self, role: ReplicaRole) -> Option<Operation> {
        if self.in_flight {
            return None;
        }
        if self.ops.is_empty() {
            self.start_pass_if_due(role);
        }
        let op = self.ops.pop_front()?;
        self.in_flight = !matches!(op, Operation::Barrier);
        Some(op)
    }

    /// A worker was dropped with an operation in flight (its owner cancelled it): that pass
    /// ends as if the operation had failed.
    pub fn interrupted(&mut self) {
        if self.in_flight {
            self.complete(Completion::Failed { fenced: false });
        }
    }

    fn start_pass_if_due(&mut self, role: ReplicaRole) {
        if !std::mem::take(&mut self.pass_requested) {
            return;
        }
        match role {
            ReplicaRole::Leader { leader_epoch } => {
                if self.claimed_epoch != Some(leader_epoch) {
                    self.ops.push_back(Operation::Claim { leader_epoch });
                }
                self.ops.push_back(Operation::ApplyManifest);
                self.ops.push_back(Operation::UploadSegment {
                    leader_epoch,
                    attempt: 1,
                });
            }
            ReplicaRole::Follower => {
                self.ops.push_back(Operation::FollowManifest);
                self.ops.push_back(Operation::Rehydrate);
            }
            ReplicaRole::None => {}
        }
    }

    /// Advances the pass from how the operation just handed out ended. Follow-ups go to the
    /// front, so a barrier queued behind the pass waits for all of it.
    pub fn complete(&mut self, done: Completion) {
        self.in_flight = false;
        match done {
            Completion::Claimed { leader_epoch } => self.claimed_epoch = Some(leader_epoch),
            Completion::Done => {}
            Completion::Uploaded {
                leader_epoch,
                attempt,
                segment,
                from,
                bytes,
                started,
            } => self.ops.push_front(Operation::CommitManifest {
                leader_epoch,
                attempt,
                segment,
                from,
                bytes,
                started,
            }),
            Completion::Committed {
                leader_epoch,
                remote_end,
                bytes,
                started,
            } => {
                self.ops.push_front(Operation::UploadSegment {
                    leader_epoch,
                    attempt: 1,
                });
                self.ops.push_front(Operation::ApplyLocalRetention {
                    remote_end,
                    bytes,
                    started,
                });
            }
            Completion::NothingToUpload { leader_epoch } => {
                self.ops.push_front(Operation::Rehydrate);
                self.ops
                    .push_front(Operation::DeleteRemote { leader_epoch });
                self.ops
                    .push_front(Operation::UploadCompactedSnapshot { leader_epoch });
            }
            Completion::CommitFailed {
                leader_epoch,
                attempt,
            } => self.ops.push_front(Operation::UploadSegment {
                leader_epoch,
                attempt: attempt + 1,
            }),
            Completion::Failed { fenced } => {
                // The pass ends; barriers stay so their waiters learn it ended.
                self.ops.retain(|op| matches!(op, Operation::Barrier));
                if fenced {
                    self.claimed_epoch = None;
                }
            }
        }
    }
}

/// Settings of the workers.
#[derive(Debug, Clone, Copy)]
pub struct QueueConfig {
    pub upload: UploadOptions,
    /// remote.log.manager.copy.max.bytes.per.second (<= 0 or i64::MAX: unlimited).
    pub upload_bytes_per_second: i64,
    pub compacted_snapshot_interval_ms: u64,
    pub backoff: Backoff,
}

/// What every worker shares.
pub struct QueueContext {
    pub store: Arc<RemoteStore>,
    pub config: QueueConfig,
    pub metrics: Arc<TieringMetrics>,
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

async fn blocking<L: LocalLog, T: Send + 'static>(
    log: &Arc<L>,
    f: impl FnOnce(&L) -> std::io::Result<T> + Send + 'static,
) -> Result<T, TieringError> {
    let log = log.clone();
    Ok(tokio::task::spawn_blocking(move || f(&log)).await??)
}

/// One partition's queue and the right to run it: one worker at a time.
#[derive(Default)]
pub struct PartitionWorker {
    queue: std::sync::Mutex<UploadQueue>,
    running: tokio::sync::Mutex<()>,
}

impl PartitionWorker {
    pub fn new() -> PartitionWorker {
        PartitionWorker::default()
    }

    pub fn event(&self, event: Event) {
        self.queue().event(event);
    }

    /// Nothing queued and no pass due.
    pub fn is_idle(&self) -> bool {
        self.queue().is_idle()
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, UploadQueue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs queued operations until the queue is idle (after waiting for another worker of
    /// this partition to finish). Returns the first error of a pass that failed, if any.
    pub async fn run_until_idle<L: LocalLog>(
        &self,
        ctx: &QueueContext,
        cancel: &CancellationToken,
        tp: &TieredPartition,
        log: &Arc<L>,
    ) -> Result<(), TieringError> {
        let _running = self.running.lock().await;
        self.queue().interrupted();
        let mut first_error = None;
        loop {
            let role = log.role();
            let Some(op) = self.queue().next(role) else {
                break;
            };
            if matches!(op, Operation::Barrier) {
                continue;
            }
            let what = op.name();
            let done = match execute(ctx, cancel, tp, log, op).await {
                Ok(done) => done,
                Err(e) => {
                    let fenced = e.is_fenced();
                    self.queue().complete(Completion::Failed { fenced });
                    if matches!(e, TieringError::Cancelled) {
                        return Err(e);
                    }
                    tracing::debug!(partition = %tp.id.dir(), operation = what, error = %e, "tiering pass ended");
                    first_error.get_or_insert(e);
                    continue;
                }
            };
            self.queue().complete(done);
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// Executes one operation (with retries).
async fn execute<L: LocalLog>(
    ctx: &QueueContext,
    cancel: &CancellationToken,
    tp: &TieredPartition,
    log: &Arc<L>,
    op: Operation,
) -> Result<Completion, TieringError> {
    let policy = ctx.config.backoff;
    let store = &ctx.store;
    match op {
        Operation::Claim { leader_epoch } => {
            backoff::retry(cancel, policy, "claim manifest", || async {
                Ok(tp.claim(store, leader_epoch).await?)
            })
            .await?;
            Ok(Completion::Claimed { leader_epoch })
        }
        Operation::ApplyManifest => {
            let m = tp.manifest();
            let (start, end) = (m.log_start_offset, m.end_offset());
            blocking(log, move |l| l.apply_manifest(start, end)).await?;
            Ok(Completion::Done)
        }
        Operation::UploadSegment {
            leader_epoch,
            attempt,
        } => {
            if attempt > 1 {
                let pause = policy.delay(attempt - 1);
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => return Err(TieringError::Cancelled),
                    _ = tokio::time::sleep(pause) => {}
                }
            }
            let started = Instant::now();
            let from = tp.manifest().end_offset().unwrap_or(-1);
            let Some(prepared) = blocking(log, move |l| l.next_uploadable(from)).await? else {
                log.uploads_committed(&tp.manifest());
                return Ok(Completion::NothingToUpload { leader_epoch });
            };
            let bytes = prepared.bytes();
            let segment = upload_one(ctx, cancel, tp, &prepared, leader_epoch, now_ms()).await?;
            log.reached(DurableStep::Uploaded);
            Ok(Completion::Uploaded {
                leader_epoch,
                attempt,
                segment: Box::new(segment),
                from,
                bytes,
                started,
            })
        }
        Operation::CommitManifest {
            leader_epoch,
            attempt,
            segment,
            from,
            bytes,
            started,
        } => {
            let base = segment.base_offset;
            // Not retried in place: a commit whose answer was lost may have succeeded, and
            // committing the same object again would then find it covered and delete it. The
            // segment is uploaded again under a new key instead (after a backoff), and the
            // object of the failed attempt is an orphan for the scrubber.
            let added = match tp.commit_segment(store, *segment, leader_epoch).await {
                Ok(added) => added,
                Err(e) => {
                    ctx.metrics.upload_failures.fetch_add(1, Ordering::Relaxed);
                    let e = TieringError::from(e);
                    if !e.is_retriable() || attempt >= policy.max_attempts.max(1) {
                        return Err(e);
                    }
                    if attempt >= policy.warn_after {
                        tracing::warn!(partition = %tp.id.dir(), base, attempt, error = %e, "manifest commit failed; uploading the segment again");
                    } else {
                        tracing::debug!(partition = %tp.id.dir(), base, attempt, error = %e, "manifest commit failed; uploading the segment again");
                    }
                    return Ok(Completion::CommitFailed {
                        leader_epoch,
                        attempt,
                    });
                }
            };
            log.reached(DurableStep::ManifestCommitted);
            let Some(next) = tp.manifest().end_offset().filter(|&end| end > from) else {
                // Nothing was added (the segment overlaps what is remote): end the uploads of
                // this pass rather than upload it again.
                tracing::warn!(partition = %tp.id.dir(), base, "segment overlaps the remote log; not uploaded");
                log.uploads_committed(&tp.manifest());
                return Ok(Completion::NothingToUpload { leader_epoch });
            };
            if added {
                ctx.metrics
                    .segments_uploaded
                    .fetch_add(1, Ordering::Relaxed);
                tracing::debug!(partition = %tp.id.dir(), base, next, bytes, "segment uploaded");
            } else {
                tracing::debug!(partition = %tp.id.dir(), base, remote_end = next, "segment already covered by the manifest");
            }
            Ok(Completion::Committed {
                leader_epoch,
                remote_end: next,
                bytes,
                started,
            })
        }
        Operation::ApplyLocalRetention {
            remote_end,
            bytes,
            started,
        } => {
            let now = now_ms();
            blocking(log, move |l| l.allow_local_retention(remote_end, now)).await?;
            throttle(&ctx.config, bytes, started.elapsed()).await;
            Ok(Completion::Done)
        }
        Operation::UploadCompactedSnapshot { leader_epoch } => {
            if log.policy().compact {
                compacted_snapshot(ctx, cancel, tp, log, leader_epoch).await?;
            }
            Ok(Completion::Done)
        }
        Operation::DeleteRemote { leader_epoch } => {
            delete_remote(ctx, cancel, tp, log, leader_epoch).await?;
            Ok(Completion::Done)
        }
        Operation::FollowManifest => {
            follow_manifest(store, tp, log).await?;
            Ok(Completion::Done)
        }
        Operation::Rehydrate => {
            crate::rehydrate::run(ctx, cancel, tp, log).await?;
            Ok(Completion::Done)
        }
        Operation::Barrier => Ok(Completion::Done),
    }
}

/// A follower reloads the manifest, takes its log start and lets local retention delete what
/// it covers.
async fn follow_manifest<L: LocalLog>(
    store: &RemoteStore,
    tp: &TieredPartition,
    log: &Arc<L>,
) -> Result<(), TieringError> {
    let manifest = tp.refresh(store).await?;
    let Some(remote_end) = manifest.end_offset() else {
        return Ok(());
    };
    let remote_start = manifest.log_start_offset;
    let now = now_ms();
    let deleted = blocking(log, move |l| {
        l.apply_manifest(remote_start, Some(remote_end))?;
        l.allow_local_retention(remote_end, now)
    })
    .await?;
    if deleted > 0 {
        tracing::debug!(partition = %tp.id.dir(), segments = deleted, remote_end, "follower deleted local segments covered by the manifest");
    }
    Ok(())
}

/// Uploads one prepared segment under a fresh key, retrying failed requests.
async fn upload_one(
    ctx: &QueueContext,
    cancel: &CancellationToken,
    tp: &TieredPartition,
    prepared: &PreparedSegment,
    leader_epoch: i32,
    now_ms: i64,
) -> Result<RemoteSegment, TieringError> {
    backoff::retry(cancel, ctx.config.backoff, "upload segment", || async {
        upload::upload(
            &ctx.store,
            &tp.id,
            &prepared.files,
            prepared.parts.clone(),
            leader_epoch,
            ctx.config.upload,
            now_ms,
        )
        .await
        .map_err(|e| {
            ctx.metrics.upload_failures.fetch_add(1, Ordering::Relaxed);
            TieringError::from(e)
        })
    })
    .await
}

/// Keeps the average upload rate under remote.log.manager.copy.max.bytes.per.second.
async fn throttle(config: &QueueConfig, bytes: u64, took: Duration) {
    let rate = config.upload_bytes_per_second;
    if rate <= 0 || rate == i64::MAX {
        return;
    }
    let should_take = Duration::from_secs_f64(bytes as f64 / rate as f64);
    if should_take > took {
        tokio::time::sleep(should_take - took).await;
    }
}

/// Compacted topics: once the cleaner has cleaned past the last snapshot (and the snapshot
/// interval has passed), uploads the cleaned local segments below the cleaner's checkpoint
/// and swaps them into the manifest in place of the segments uploaded as they were written.
/// The bucket then holds the compacted state instead of the full history, and a restore from
/// it rebuilds the compacted log.
async fn compacted_snapshot<L: LocalLog>(
    ctx: &QueueContext,
    cancel: &CancellationToken,
    tp: &TieredPartition,
    log: &Arc<L>,
    leader_epoch: i32,
) -> Result<(), TieringError> {
    let Some(cleaned) = log.cleaned_upto() else {
        return Ok(());
    };
    let m = tp.manifest();
    let Some(remote_end) = m.end_offset() else {
        return Ok(());
    };
    let upto_limit = cleaned.min(remote_end);
    if upto_limit <= m.compacted_upto.unwrap_or(i64::MIN) {
        return Ok(());
    }
    let now = now_ms();
    if m.compacted_at_ms
        .is_some_and(|at| now - at < ctx.config.compacted_snapshot_interval_ms as i64)
    {
        return Ok(());
    }
    // The snapshot covers [first local offset, end of the last cleaned segment); segments the
    // cleaner emptied have no bundle but are covered all the same.
    let Some(cleaned) = blocking(log, move |l| l.compacted_segments(upto_limit)).await? else {
        return Ok(());
    };
    let (from, upto) = (cleaned.from, cleaned.upto);
    if upto <= from || upto <= m.compacted_upto.unwrap_or(i64::MIN) {
        return Ok(());
    }
    let mut snapshot = Vec::with_capacity(cleaned.segments.len());
    let mut bytes = 0u64;
    for prepared in &cleaned.segments {
        bytes += prepared.bytes();
        match upload_one(ctx, cancel, tp, prepared, leader_epoch, now).await {
            Ok(s) => snapshot.push(s),
            Err(e) => {
                for s in &snapshot {
                    let _ = ctx.store.delete(&tp.id.topic, &s.key).await;
                }
                return Err(e);
            }
        }
    }
    let segments = snapshot.len();
    if tp
        .commit_snapshot(&ctx.store, snapshot, from, upto, leader_epoch, now)
        .await?
    {
        ctx.metrics
            .compacted_snapshots
            .fetch_add(1, Ordering::Relaxed);
        tracing::info!(partition = %tp.id.dir(), from, upto, segments, bytes, "uploaded a compacted snapshot");
    } else {
        tracing::debug!(partition = %tp.id.dir(), from, upto, "compacted snapshot does not align with the remote segments; skipped");
    }
    Ok(())
}

/// Remote retention, then the log start offset it moved. Its only local inputs are the bytes
/// not yet uploaded (retention.bytes counts both tiers) and an explicit DeleteRecords; never
/// the local log start (see [`RetentionInput::delete_records_offset`]).
async fn delete_remote<L: LocalLog>(
    ctx: &QueueContext,
    cancel: &CancellationToken,
    tp: &TieredPartition,
    log: &Arc<L>,
    leader_epoch: i32,
) -> Result<(), TieringError> {
    let local = blocking(log, |l| Ok(l.retention_input())).await?;
    if tp.manifest().segments.is_empty() {
        return Ok(());
    }
    let policy = log.policy();
    let outcome = backoff::retry(cancel, ctx.config.backoff, "delete remote", || async {
        Ok(tp
            .apply_retention(
                &ctx.store,
                RetentionInput {
                    now_ms: now_ms(),
                    retention_ms: policy.retention_ms,
                    retention_bytes: policy.retention_bytes,
                    local_only_bytes: local.local_only_bytes,
                    delete_records_offset: local.delete_records_offset,
                    leader_epoch,
                },
            )
            .await?)
    })
    .await?;
    if outcome.deleted_segments > 0 {
        ctx.metrics
            .segments_deleted_remote
            .fetch_add(outcome.deleted_segments as u64, Ordering::Relaxed);
        tracing::info!(partition = %tp.id.dir(), segments = outcome.deleted_segments, "deleted remote segments past retention");
    }
    if let Some(start) = outcome.log_start_offset {
        blocking(log, move |l| l.advance_log_start_offset(start)).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::Mutex;

    use super::*;
    use crate::local_log::{CompactedSegments, LocalRetentionInput, TieringPolicy};
    use crate::manifest::{PartitionId, PartitionManifest};
    use crate::store::Op;
    use crate::upload::SegmentFiles;

    const EPOCH: i32 = 3;

    fn leader() -> ReplicaRole {
        ReplicaRole::Leader {
            leader_epoch: EPOCH,
        }
    }

    /// Hands out operations until idle, completing each with [`Completion::Done`].
    fn names(q: &mut UploadQueue, role: ReplicaRole) -> Vec<&'static str> {
        std::iter::from_fn(|| {
            let op = q.next(role)?;
            if !matches!(op, Operation::Barrier) {
                q.complete(Completion::Done);
            }
            Some(op.name())
        })
        .collect()
    }

    fn remote_segment(base: i64, next: i64) -> RemoteSegment {
        let p = crate::manifest::Part { start: 0, end: 0 };
        RemoteSegment {
            key: format!("k{base}"),
            base_offset: base,
            next_offset: next,
            max_timestamp: 0,
            leader_epoch: EPOCH,
            epochs: vec![],
            log: p,
            offset_index: p,
            time_index: p,
            producer_snapshot: None,
            leader_epoch_checkpoint: None,
            txn_index: None,
            uploaded_at_ms: 0,
        }
    }

    #[test]
    fn a_leaders_pass_uploads_then_commits_then_applies_local_retention() {
        let mut q = UploadQueue::new();
        assert!(q.next(leader()).is_none(), "no event, no pass");
        q.event(Event::SegmentRolled);
        assert_eq!(q.next(leader()).map(|o| o.name()), Some("claim manifest"));
        assert!(
            q.next(leader()).is_none(),
            "nothing follows an operation until it completes"
        );
        q.complete(Completion::Claimed {
            leader_epoch: EPOCH,
        });
        assert_eq!(q.next(leader()).map(|o| o.name()), Some("apply manifest"));
        q.complete(Completion::Done);
        assert!(matches!(
            q.next(leader()),
            Some(Operation::UploadSegment {
                leader_epoch: EPOCH,
                attempt: 1
            })
        ));
        assert!(
            q.next(leader()).is_none(),
            "the commit waits for the upload"
        );
        q.complete(Completion::Uploaded {
            leader_epoch: EPOCH,
            attempt: 1,
            segment: Box::new(remote_segment(0, 10)),
            from: -1,
            bytes: 1,
            started: Instant::now(),
        });
        assert!(matches!(
            q.next(leader()),
            Some(Operation::CommitManifest { ref segment, .. }) if segment.base_offset == 0
        ));
        assert!(
            q.next(leader()).is_none(),
            "local retention waits for the commit"
        );
        q.complete(Completion::Committed {
            leader_epoch: EPOCH,
            remote_end: 10,
            bytes: 1,
            started: Instant::now(),
        });
        assert!(matches!(
            q.next(leader()),
            Some(Operation::ApplyLocalRetention { remote_end: 10, .. })
        ));
        q.complete(Completion::Done);
        assert!(matches!(
            q.next(leader()),
            Some(Operation::UploadSegment { .. })
        ));
        q.complete(Completion::NothingToUpload {
            leader_epoch: EPOCH,
        });
        assert_eq!(
            names(&mut q, leader()),
            ["upload compacted snapshot", "delete remote", "rehydrate"]
        );
        assert!(q.is_idle());
        // The next pass at the same epoch does not claim again; a new leadership does.
        q.event(Event::HighWatermarkAdvanced);
        assert_eq!(q.next(leader()).map(|o| o.name()), Some("apply manifest"));
        q.complete(Completion::Failed { fenced: false });
        assert!(q.is_idle(), "a failed pass ends");
        q.event(Event::LeadershipChanged);
        assert_eq!(q.next(leader()).map(|o| o.name()), Some("claim manifest"));
    }

    #[test]
    fn a_failed_commit_uploads_the_segment_again() {
        let mut q = UploadQueue::new();
        q.complete(Completion::Claimed {
            leader_epoch: EPOCH,
        });
        q.event(Event::Reconcile);
        assert_eq!(q.next(leader()).map(|o| o.name()), Some("apply manifest"));
        q.complete(Completion::Done);
        assert!(matches!(
            q.next(leader()),
            Some(Operation::UploadSegment { attempt: 1, .. })
        ));
        q.complete(Completion::Uploaded {
            leader_epoch: EPOCH,
            attempt: 1,
            segment: Box::new(remote_segment(0, 10)),
            from: -1,
            bytes: 1,
            started: Instant::now(),
        });
        assert!(matches!(
            q.next(leader()),
            Some(Operation::CommitManifest { attempt: 1, .. })
        ));
        q.complete(Completion::CommitFailed {
            leader_epoch: EPOCH,
            attempt: 1,
        });
        assert!(matches!(
            q.next(leader()),
            Some(Operation::UploadSegment { attempt: 2, .. })
        ));
    }

    #[test]
    fn an_interrupted_operation_ends_its_pass() {
        let mut q = UploadQueue::new();
        q.event(Event::Reconcile);
        assert_eq!(q.next(leader()).map(|o| o.name()), Some("claim manifest"));
        assert!(!q.is_idle());
        q.interrupted();
        assert!(q.is_idle());
        q.interrupted();
        q.event(Event::Reconcile);
        assert_eq!(q.next(leader()).map(|o| o.name()), Some("claim manifest"));
    }

    #[test]
    fn followers_follow_the_manifest_and_others_do_nothing() {
        let mut q = UploadQueue::new();
        q.event(Event::Reconcile);
        assert_eq!(
            names(&mut q, ReplicaRole::Follower),
            ["follow manifest", "rehydrate"]
        );
        q.event(Event::Reconcile);
        assert!(names(&mut q, ReplicaRole::None).is_empty());
        assert!(q.is_idle());
    }

    #[test]
    fn a_barrier_waits_for_the_whole_pass_and_survives_its_failure() {
        let mut q = UploadQueue::new();
        q.event(Event::ConfigChanged);
        q.barrier(leader());
        assert_eq!(q.next(leader()).map(|o| o.name()), Some("claim manifest"));
        q.complete(Completion::Claimed {
            leader_epoch: EPOCH,
        });
        assert_eq!(q.next(leader()).map(|o| o.name()), Some("apply manifest"));
        q.complete(Completion::Done);
        assert_eq!(q.next(leader()).map(|o| o.name()), Some("upload segment"));
        q.complete(Completion::Uploaded {
            leader_epoch: EPOCH,
            attempt: 1,
            segment: Box::new(remote_segment(0, 10)),
            from: -1,
            bytes: 1,
            started: Instant::now(),
        });
        assert_eq!(q.next(leader()).map(|o| o.name()), Some("commit manifest"));
        q.complete(Completion::Failed { fenced: true });
        assert_eq!(names(&mut q, leader()), ["barrier"]);
        q.event(Event::Reconcile);
        assert_eq!(
            q.next(leader()).map(|o| o.name()),
            Some("claim manifest"),
            "a fenced pass forgets its claim"
        );
    }

    /// A partition with sealed segments on disk; records the order of durable steps.
    struct FakeLog {
        dir: tempfile::TempDir,
        /// Sealed segments still local, as (base, next).
        segments: Mutex<Vec<(i64, i64)>>,
        journal: Mutex<Vec<String>>,
        role: ReplicaRole,
    }

    impl FakeLog {
        fn new(bounds: &[(i64, i64)]) -> Arc<FakeLog> {
            let dir = tempfile::tempdir().unwrap();
            for (base, _) in bounds {
                for ext in ["log", "index", "timeindex"] {
                    std::fs::write(dir.path().join(format!("{base}.{ext}")), vec![7u8; 64])
                        .unwrap();
                }
            }
            Arc::new(FakeLog {
                dir,
                segments: Mutex::new(bounds.to_vec()),
                journal: Mutex::new(Vec::new()),
                role: leader(),
            })
        }

        fn note(&self, s: String) {
            self.journal.lock().unwrap().push(s);
        }

        fn journal(&self) -> Vec<String> {
            self.journal.lock().unwrap().clone()
        }

        fn path(&self, base: i64, ext: &str) -> PathBuf {
            self.dir.path().join(format!("{base}.{ext}"))
        }
    }

    impl LocalLog for FakeLog {
        fn role(&self) -> ReplicaRole {
            self.role
        }
        fn policy(&self) -> TieringPolicy {
            TieringPolicy {
                retention_ms: -1,
                retention_bytes: -1,
                compact: false,
            }
        }
        fn apply_manifest(&self, start: i64, _end: Option<i64>) -> std::io::Result<(i64, i64)> {
            Ok((start, start))
        }
        fn next_uploadable(&self, from: i64) -> std::io::Result<Option<PreparedSegment>> {
            let segs = self.segments.lock().unwrap();
            let Some(&(base, next)) = segs.iter().find(|(_, next)| *next > from) else {
                return Ok(None);
            };
            let files = SegmentFiles {
                base_offset: base,
                next_offset: next,
                max_timestamp: base,
                log: self.path(base, "log"),
                offset_index: self.path(base, "index"),
                time_index: self.path(base, "timeindex"),
                producer_snapshot: None,
                leader_epoch_checkpoint: None,
                epochs: vec![],
                txn_index: None,
            };
            let parts = upload::prepare(&files).map_err(std::io::Error::other)?;
            Ok(Some(PreparedSegment { files, parts }))
        }
        fn allow_local_retention(&self, remote_end: i64, _now: i64) -> std::io::Result<usize> {
            let mut segs = self.segments.lock().unwrap();
            let before = segs.len();
            segs.retain(|(_, next)| *next > remote_end);
            let n = before - segs.len();
            drop(segs);
            self.note(format!("local retention to {remote_end}"));
            Ok(n)
        }
        fn retention_input(&self) -> LocalRetentionInput {
            LocalRetentionInput {
                delete_records_offset: -1,
                local_only_bytes: 0,
            }
        }
        fn advance_log_start_offset(&self, _start: i64) -> std::io::Result<()> {
            Ok(())
        }
        fn cleaned_upto(&self) -> Option<i64> {
            None
        }
        fn compacted_segments(&self, _limit: i64) -> std::io::Result<Option<CompactedSegments>> {
            Ok(None)
        }
        fn roll(&self, _now: i64) -> std::io::Result<()> {
            Ok(())
        }
        fn reached(&self, step: DurableStep) {
            self.note(format!("{step:?}"));
        }
        fn uploads_committed(&self, manifest: &PartitionManifest) {
            self.note(format!("committed to {:?}", manifest.end_offset()));
        }
        fn rehydration_candidate(
            &self,
            _manifest: &PartitionManifest,
            _now_ms: i64,
        ) -> Option<crate::rehydrate::RehydrateTarget> {
            None
        }
        fn install_rehydrated(
            &self,
            _target: &crate::rehydrate::RehydrateTarget,
        ) -> std::io::Result<bool> {
            Ok(false)
        }
    }

    fn context(store: Arc<RemoteStore>) -> QueueContext {
        QueueContext {
            store,
            config: QueueConfig {
                upload: UploadOptions::default(),
                upload_bytes_per_second: -1,
                compacted_snapshot_interval_ms: 0,
                backoff: Backoff {
                    initial: Duration::from_millis(100),
                    max: Duration::from_secs(1),
                    max_attempts: 4,
                    warn_after: 2,
                },
            },
            metrics: Arc::new(TieringMetrics::default()),
        }
    }

    fn pid() -> PartitionId {
        PartitionId {
            topic: "t".into(),
            topic_id: uuid::Uuid::new_v4(),
            partition: 0,
        }
    }

    async fn remote_objects(store: &RemoteStore, id: &PartitionId) -> usize {
        store
            .list(&id.topic, &format!("{}/", id.dir()))
            .await
            .unwrap()
            .into_iter()
            .filter(|o| o.key != id.manifest_key())
            .count()
    }

    #[tokio::test]
    async fn each_segment_is_uploaded_committed_then_deleted_locally_in_order() {
        let store = Arc::new(RemoteStore::in_memory());
        let ctx = context(store.clone());
        let tp = TieredPartition::load(&store, pid()).await.unwrap();
        let log = FakeLog::new(&[(0, 10), (10, 25)]);
        let worker = PartitionWorker::new();
        worker.event(Event::SegmentRolled);
        worker
            .run_until_idle(&ctx, &CancellationToken::new(), &tp, &log)
            .await
            .unwrap();
        assert_eq!(
            log.journal(),
            [
                "Uploaded",
                "ManifestCommitted",
                "local retention to 10",
                "Uploaded",
                "ManifestCommitted",
                "local retention to 25",
                "committed to Some(25)",
            ]
        );
        let m = tp.refresh(&store).await.unwrap();
        assert_eq!(m.end_offset(), Some(25));
        assert_eq!(m.leader_epoch, EPOCH);
        assert!(log.segments.lock().unwrap().is_empty());
        assert_eq!(ctx.metrics.segments_uploaded.load(Ordering::Relaxed), 2);
        assert!(worker.is_idle());
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_upload_is_retried_after_backoff_within_the_pass() {
        let store = Arc::new(RemoteStore::in_memory());
        let ctx = context(store.clone());
        let id = pid();
        let tp = TieredPartition::load(&store, id.clone()).await.unwrap();
        tp.claim(&store, EPOCH).await.unwrap();
        let log = FakeLog::new(&[(0, 10)]);
        let worker = PartitionWorker::new();
        // The segment's PUTs fail until 250 ms.
        store.faults.fail_op_on_keys_containing(Op::Put, ".seg");
        let started = tokio::time::Instant::now();
        let faults = store.faults.clone();
        let heal = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(250)).await;
            faults.clear();
        });
        worker.event(Event::SegmentRolled);
        worker
            .run_until_idle(&ctx, &CancellationToken::new(), &tp, &log)
            .await
            .unwrap();
        heal.await.unwrap();
        // Attempts at 0, 100 and 300 ms: the first two fail, the faults clear at 250 ms.
        assert_eq!(ctx.metrics.upload_failures.load(Ordering::Relaxed), 2);
        assert_eq!(started.elapsed(), Duration::from_millis(300));
        assert_eq!(tp.refresh(&store).await.unwrap().end_offset(), Some(10));
        assert_eq!(remote_objects(&store, &id).await, 1);
        assert!(log.segments.lock().unwrap().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn no_local_delete_while_the_manifest_commit_fails() {
        let store = Arc::new(RemoteStore::in_memory());
        let ctx = context(store.clone());
        let id = pid();
        let tp = TieredPartition::load(&store, id.clone()).await.unwrap();
        tp.claim(&store, EPOCH).await.unwrap();
        let log = FakeLog::new(&[(0, 10)]);
        let worker = PartitionWorker::new();
        store.faults.fail_op_on_keys_containing(Op::Put, "manifest");
        worker.event(Event::SegmentRolled);
        let started = tokio::time::Instant::now();
        let err = worker
            .run_until_idle(&ctx, &CancellationToken::new(), &tp, &log)
            .await
            .unwrap_err();
        assert!(err.is_retriable(), "{err}");
        // Every commit attempt failed, each after an upload under a new key (at 0, 100, 300
        // and 700 ms); the segment stays local and the uploads are orphans.
        assert_eq!(log.journal(), ["Uploaded"; 4]);
        assert_eq!(started.elapsed(), Duration::from_millis(700));
        assert_eq!(ctx.metrics.upload_failures.load(Ordering::Relaxed), 4);
        assert_eq!(log.segments.lock().unwrap().len(), 1);
        assert_eq!(remote_objects(&store, &id).await, 4);
        assert!(worker.is_idle(), "the failed pass ended");
        // The store heals: the next event's pass uploads again and commits.
        store.faults.clear();
        worker.event(Event::Reconcile);
        worker
            .run_until_idle(&ctx, &CancellationToken::new(), &tp, &log)
            .await
            .unwrap();
        assert_eq!(tp.refresh(&store).await.unwrap().end_offset(), Some(10));
        assert!(log.segments.lock().unwrap().is_empty());
        assert_eq!(
            remote_objects(&store, &id).await,
            5,
            "one committed, four orphans"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_fenced_leader_stops_without_retrying_or_uploading() {
        let store = Arc::new(RemoteStore::in_memory());
        let ctx = context(store.clone());
        let id = pid();
        let newer = TieredPartition::load(&store, id.clone()).await.unwrap();
        newer.claim(&store, EPOCH + 1).await.unwrap();
        let tp = TieredPartition::load(&store, id.clone()).await.unwrap();
        let log = FakeLog::new(&[(0, 10)]);
        let worker = PartitionWorker::new();
        worker.event(Event::LeadershipChanged);
        let started = tokio::time::Instant::now();
        let err = worker
            .run_until_idle(&ctx, &CancellationToken::new(), &tp, &log)
            .await
            .unwrap_err();
        assert!(err.is_fenced(), "{err}");
        assert_eq!(started.elapsed(), Duration::ZERO, "no backoff");
        assert!(log.journal().is_empty());
        assert_eq!(remote_objects(&store, &id).await, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn cancellation_stops_a_pass_in_its_backoff() {
        let store = Arc::new(RemoteStore::in_memory());
        let ctx = context(store.clone());
        let id = pid();
        let tp = TieredPartition::load(&store, id.clone()).await.unwrap();
        let log = FakeLog::new(&[(0, 10)]);
        let worker = PartitionWorker::new();
        store.faults.set_outage(true);
        let cancel = CancellationToken::new();
        let c = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            c.cancel();
        });
        worker.event(Event::SegmentRolled);
        let started = tokio::time::Instant::now();
        let err = worker
            .run_until_idle(&ctx, &cancel, &tp, &log)
            .await
            .unwrap_err();
        assert!(matches!(err, TieringError::Cancelled), "{err}");
        assert_eq!(started.elapsed(), Duration::from_millis(50));
        assert!(log.journal().is_empty());
    }
}
