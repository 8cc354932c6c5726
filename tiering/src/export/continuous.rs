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
//!
//! With [`ExportJob::iceberg`] the target's `topic=T` is an Iceberg table
//! ([`super::iceberg`]): each partition's export is followed by a table commit (one at a time
//! per table in this process), and the export counts as caught up only once committed. The
//! table's metadata is kept in the filesystem layout next to the files, or, with
//! [`ContinuousExporter::with_catalog`], in a REST catalog (connected at the first commit,
//! and again after a failed connection).
//!
//! Lag ([`ContinuousExporter::lag`]): per partition, the remote records not exported yet and
//! how long the export has been behind the uploads (since the first upload it had not
//! caught up with).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::{
    export_partition, iceberg, plan_partition, ExportOptions, ExportRange, PlanInput, Progress,
    Target,
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
    /// The topic's export directory is an Iceberg table, committed after each export.
    pub iceberg: bool,
}

/// (target url, topic, partition)
type ExportKey = (String, String, i32);

/// Held while a table is committed.
type CommitLock = Arc<tokio::sync::Mutex<()>>;

/// How far one partition's export is.
#[derive(Debug, Clone, Copy, Default)]
struct Position {
    /// Where the export ended last (`None` before the first export ended).
    exported_to: Option<i64>,
    /// The manifest's end when last poked.
    remote_end: i64,
    /// Since when the export has been behind `remote_end`.
    behind_since: Option<Instant>,
}

/// One partition's export lag.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportLag {
    pub topic: String,
    pub partition: i32,
    /// Offsets uploaded but not exported.
    pub records: i64,
    /// How long the export has been behind the uploads (zero when caught up).
    pub behind: Duration,
}

pub struct ContinuousExporter {
    store: Arc<RemoteStore>,
    /// Endpoint, region and credentials for `s3://` targets.
    s3: StoreConfig,
    targets: Mutex<HashMap<String, Arc<Target>>>,
    running: Arc<Mutex<HashSet<(String, i32)>>>,
    /// Where each partition's export is (so idle partitions cost no requests).
    positions: Arc<Mutex<HashMap<ExportKey, Position>>>,
    tasks: Mutex<JoinSet<()>>,
    /// One Iceberg commit at a time per table (target url, topic) in this process.
    commits: Mutex<HashMap<(String, String), CommitLock>>,
    limit: Arc<Semaphore>,
    cancel: CancellationToken,
    pub progress: Arc<Progress>,
    /// Exports that failed (each is retried at the next poke).
    pub errors: Arc<AtomicU64>,
    /// The REST catalog of the Iceberg tables (`None`: the filesystem layout).
    catalog_settings: Option<CatalogSettings>,
    catalog: Arc<tokio::sync::OnceCell<iceberg::Catalog>>,
}

/// A REST catalog for the continuous export's Iceberg tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogSettings {
    pub uri: String,
    pub namespace: String,
    pub auth: iceberg::rest::CatalogAuth,
}

impl ContinuousExporter {
    pub fn new(store: Arc<RemoteStore>, s3: StoreConfig, concurrency: usize) -> Self {
        ContinuousExporter {
            store,
            s3,
            targets: Mutex::new(HashMap::new()),
            running: Arc::new(Mutex::new(HashSet::new())),
            positions: Arc::new(Mutex::new(HashMap::new())),
            tasks: Mutex::new(JoinSet::new()),
            commits: Mutex::new(HashMap::new()),
            limit: Arc::new(Semaphore::new(concurrency.max(1))),
            cancel: CancellationToken::new(),
            progress: Arc::new(Progress::default()),
            errors: Arc::new(AtomicU64::new(0)),
            catalog_settings: None,
            catalog: Arc::new(tokio::sync::OnceCell::new()),
        }
    }

    /// Commits the Iceberg tables through this REST catalog.
    pub fn with_catalog(mut self, settings: Option<CatalogSettings>) -> Self {
        self.catalog_settings = settings;
        self
    }

    /// Every partition's lag, by topic and partition.
    pub fn lag(&self) -> Vec<ExportLag> {
        let now = Instant::now();
        let positions = self.positions.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<ExportLag> = positions
            .iter()
            .map(|((_, topic, partition), p)| ExportLag {
                topic: topic.clone(),
                partition: *partition,
                records: (p.remote_end - p.exported_to.unwrap_or(0)).max(0),
                behind: p.behind_since.map_or(Duration::ZERO, |t| now - t),
            })
            .collect();
        out.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        out
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
        let done = {
            let mut positions = self.positions.lock().unwrap_or_else(|e| e.into_inner());
            let p = positions
                .entry((job.target_url.clone(), key.0.clone(), key.1))
                .or_default();
            p.remote_end = p.remote_end.max(job.remote_end);
            let done = p.exported_to.is_some_and(|end| end >= p.remote_end);
            if !done && p.behind_since.is_none() {
                p.behind_since = Some(Instant::now());
            }
            done
        };
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
        let commit_lock = job.iceberg.then(|| {
            self.commits
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry((job.target_url.clone(), job.id.topic.clone()))
                .or_default()
                .clone()
        });
        let (catalog_settings, catalog) = (self.catalog_settings.clone(), self.catalog.clone());
        let (store, running, positions, limit, cancel, progress, errors) = (
            self.store.clone(),
            self.running.clone(),
            self.positions.clone(),
            self.limit.clone(),
            self.cancel.clone(),
            self.progress.clone(),
            self.errors.clone(),
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
                let mut options = ExportOptions {
                    file_bytes: job.file_bytes.max(1),
                    ..Default::default()
                };
                let (topic, p) = (job.id.topic.as_str(), job.id.partition);
                let catalog = match (&catalog_settings, job.iceberg) {
                    (Some(c), true) => catalog
                        .get_or_try_init(|| async {
                            let r = iceberg::rest::RestCatalog::connect(
                                &c.uri,
                                &c.namespace,
                                c.auth.clone(),
                            )
                            .await?;
                            Ok::<_, super::ExportError>(iceberg::Catalog::Rest(Arc::new(r)))
                        })
                        .await?
                        .clone(),
                    _ => iceberg::Catalog::Files,
                };
                if job.iceberg {
                    iceberg::prepare_in(&catalog, &target, topic, &[p], &mut options.convert)
                        .await?;
                }
                let summary = export_partition(
                    Arc::new(plan),
                    target.clone(),
                    ExportRange::default(),
                    options.clone(),
                    progress,
                    cancel,
                )
                .await?;
                // The export counts as done only once its files are in the table, so a
                // failed commit is tried again at the next poke.
                if let Some(lock) = &commit_lock {
                    let _one_at_a_time = lock.lock().await;
                    iceberg::commit_in(&catalog, &target, topic, &[p], &options.convert, &|_| {})
                        .await?;
                }
                Ok(summary)
            }
            .await;
            match result {
                Ok(s) => {
                    if !s.files.is_empty() {
                        tracing::debug!(topic = %job.id.topic, partition = job.id.partition, files = s.files.len(), records = s.records, next = s.end_offset, "exported to Parquet");
                    }
                    let mut positions = positions.lock().unwrap_or_else(|e| e.into_inner());
                    let p = positions
                        .entry((job.target_url.clone(), job.id.topic.clone(), job.id.partition))
                        .or_default();
                    p.exported_to = Some(s.end_offset);
                    if s.end_offset >= p.remote_end {
                        p.behind_since = None;
                    }
                }
                Err(super::ExportError::Cancelled) => {}
                Err(e) => {
                    errors.fetch_add(1, Ordering::Relaxed);
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
