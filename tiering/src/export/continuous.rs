//! Continuous export: the tiering task pokes [`ContinuousExporter`] after each upload pass of
//! a partition whose topic sets `strata.export.parquet=true`, and the exporter brings that
//! partition's Parquet export up to the end of its remote manifest in the background.
//!
//! Only remote segments are exported (below the last stable offset by construction), from the
//! partition's export checkpoint, so switching export on for a topic that already has remote
//! data backfills it, and a crash or restart resumes where the checkpoint says. One export per
//! partition runs at a time, `concurrency` partitions at once; a failed export is logged and
//! retried at the next poke. Shutdown cancels the running exports between batches; their
//! checkpoints stay where they were.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::{
    export_partition, plan_partition, ExportOptions, ExportRange, PlanInput, Progress, Target,
};
use crate::manifest::PartitionId;
use crate::store::{RemoteStore, StoreConfig};

/// One partition to bring up to date.
#[derive(Debug, Clone)]
pub struct ExportJob {
    pub id: PartitionId,
    /// Output: a directory, `file:///dir` or `s3://bucket/prefix`.
    pub target_url: String,
    pub file_bytes: usize,
    /// The manifest's end offset: nothing to do when the export already reached it.
    pub remote_end: i64,
}

pub struct ContinuousExporter {
    store: Arc<RemoteStore>,
    /// Endpoint, region and credentials for `s3://` targets.
    s3: StoreConfig,
    targets: Mutex<HashMap<String, Arc<Target>>>,
    running: Arc<Mutex<HashSet<(String, i32)>>>,
    /// Where each partition's export ended last (so idle partitions cost no requests).
    exported_to: Arc<Mutex<HashMap<(String, String, i32), i64>>>,
    tasks: Mutex<JoinSet<()>>,
    limit: Arc<Semaphore>,
    cancel: CancellationToken,
    pub progress: Arc<Progress>,
}

impl ContinuousExporter {
    pub fn new(store: Arc<RemoteStore>, s3: StoreConfig, concurrency: usize) -> Self {
        ContinuousExporter {
            store,
            s3,
            targets: Mutex::new(HashMap::new()),
            running: Arc::new(Mutex::new(HashSet::new())),
            exported_to: Arc::new(Mutex::new(HashMap::new())),
            tasks: Mutex::new(JoinSet::new()),
            limit: Arc::new(Semaphore::new(concurrency.max(1))),
            cancel: CancellationToken::new(),
            progress: Arc::new(Progress::default()),
        }
    }

    /// `<store url>/export`, the default target.
    pub fn default_target(store_url: &str) -> String {
        format!("{}/export", store_url.trim_end_matches('/'))
    }

    fn target(&self, url: &str) -> Result<Arc<Target>, super::ExportError> {
        let mut targets = self.targets.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = targets.get(url) {
            return Ok(t.clone());
        }
        let t = Arc::new(Target::open(url, &self.s3)?);
        targets.insert(url.to_string(), t.clone());
        Ok(t)
    }

    /// Starts an export of `job`'s partition unless one is running. Never blocks.
    pub fn poke(&self, job: ExportJob) {
        if self.cancel.is_cancelled() {
            return;
        }
        let key = (job.id.topic.clone(), job.id.partition);
        let done = self
            .exported_to
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(job.target_url.clone(), key.0.clone(), key.1))
            .is_some_and(|&end| end >= job.remote_end);
        if done {
            return;
        }
        {
            let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
            if !running.insert(key.clone()) {
                return;
            }
        }
        let target = match self.target(&job.target_url) {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(topic = %job.id.topic, target = %job.target_url, error = %e, "cannot open the Parquet export target");
                self.running
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&key);
                return;
            }
        };
        let (store, running, exported_to, limit, cancel, progress) = (
            self.store.clone(),
            self.running.clone(),
            self.exported_to.clone(),
            self.limit.clone(),
            self.cancel.clone(),
            self.progress.clone(),
        );
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        // Reap finished exports so the set does not grow.
        while tasks.try_join_next().is_some() {}
        tasks.spawn(async move {
            let result = async {
                let _permit = limit.acquire_owned().await;
                let (checkpoint, _) = target
                    .read_checkpoint(&job.id.topic, job.id.partition)
                    .await?;
                let plan = plan_partition(PlanInput {
                    topic: &job.id.topic,
                    partition: job.id.partition,
                    remote: Some((store, job.id.clone())),
                    local_dir: None,
                    high_watermark: None,
                    from: checkpoint.map_or(0, |c| c.next_offset),
                })
                .await?;
                let options = ExportOptions {
                    file_bytes: job.file_bytes.max(1),
                    ..Default::default()
                };
                export_partition(
                    Arc::new(plan),
                    target,
                    ExportRange::default(),
                    options,
                    progress,
                    cancel,
                )
                .await
            }
            .await;
            match result {
                Ok(s) => {
                    if !s.files.is_empty() {
                        tracing::debug!(topic = %job.id.topic, partition = job.id.partition, files = s.files.len(), records = s.records, next = s.end_offset, "exported to Parquet");
                    }
                    exported_to
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(
                            (job.target_url.clone(), job.id.topic.clone(), job.id.partition),
                            s.end_offset,
                        );
                }
                Err(super::ExportError::Cancelled) => {}
                Err(e) => {
                    tracing::warn!(topic = %job.id.topic, partition = job.id.partition, error = %e, "Parquet export failed; will retry");
                }
            }
            running
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&(job.id.topic.clone(), job.id.partition));
        });
    }

    /// Cancels running exports and waits for them (each stops at its next batch).
    pub async fn shutdown(&self) {
        self.cancel.cancel();
        let mut tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        while tasks.join_next().await.is_some() {}
    }
}

impl Drop for ContinuousExporter {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}
