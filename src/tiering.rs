//! The broker side of tiered storage: drives [`strata_tiering`] for every partition of a
//! topic with `remote.storage.enable=true`.
//!
//! Each such partition has an upload queue ([`strata_tiering::upload_queue`]) run by one
//! worker at a time, over a [`LocalLog`] the broker implements for it ([`BrokerLog`]).
//! Events ([`Tiering::notify`]: a segment rolled, the high watermark advanced, leadership or
//! config changed) ask for a pass, and every `remote.log.manager.task.interval.ms` the
//! fallback [`Tiering::tick`] asks every partition for one (`remote.log.manager.copier.
//! thread.pool.size` partitions at once). A leader's pass uploads the sealed segments below
//! the high watermark that the manifest does not cover yet (oldest first), commits each to
//! the manifest, then lets local retention delete what is covered; applies remote retention
//! (retention.ms / retention.bytes across both tiers, and DeleteRecords) to the manifest and
//! then the objects. A follower's pass follows the manifest for local retention. Each pass
//! also keeps the bucket's catalog of topics current (in cluster mode with the quorum's
//! producer-id counter and each topic's replication factor) so a single broker on an empty
//! disk can restore them ([`restore_if_empty`]), and a new cluster can rebuild a lost one
//! from the bucket alone ([`crate::controller::restore`]; each partition's first leader then
//! seeds its empty log with [`Tiering::seed`]). What comes back is what the bucket held: the
//! topics with remote storage (ids, partition counts, replication factors, configs), every
//! uploaded record at its offset with each partition's log start, producer state and leader
//! epochs as of its last upload, the producer-id high-water mark, and, with
//! `strata.remote.internal.topics.enable`, the coordinators' topics (committed offsets,
//! transaction and share-group state). Records not uploaded yet, topics without remote
//! storage, and what only the quorum or a broker's disk held (ACLs, credentials, quotas,
//! dynamic configs) do not. Failed operations are retried with backoff within the pass
//! ([`strata_tiering::backoff`]); a pass that still fails is retried by the next event or
//! tick; a fenced one ([`TieringError::Fenced`]) stops.
//!
//! Fetch and ListOffsets below the local log start come here ([`Tiering::read`],
//! [`Tiering::offset_for_timestamp`]) and go through the reader's cache.
//!
//! # Recovery: what survives a crash, and what each file means
//!
//! Each piece of state is rebuilt from the most authoritative source that survived. A
//! checkpoint that is missing or older than the data is a hint, never a reason to delete.
//!
//! | state | authority | missing | older than the data |
//! |---|---|---|---|
//! | local offsets and bytes | the `.log` files, CRC-checked from the recovery point on | - | - |
//! | `recovery-point-offset-checkpoint` | offset below which the log was flushed | rescan every segment | rescan more |
//! | `log-start-offset-checkpoint` | the log start as last checkpointed | tiered: 0 until the manifest is read; else the first local segment | the manifest (tiered) or the first local segment raises it |
//! | `replication-offset-checkpoint` | high watermark (cluster mode lowers the recovered one to it) | the log end offset | lower than needed: followers re-confirm |
//! | `leader-epoch-checkpoint` | epoch start offsets, cut at the recovered log end | empty cache (the next leader epoch starts one) | entries past the end are dropped |
//! | `<offset>.snapshot` producer state | newest readable at or below the log end, then replay | replay from the log start (local segments only) | replay the rest |
//! | `manifest.json` in the bucket | what is remote, and the remote log start | nothing is remote | cannot be: commits are compare-and-swap, read at start-up |
//!
//! Rules for a partition of a remote topic (`remote.storage.enable=true`):
//! 1. Its log start offset is `max(log-start checkpoint or 0, manifest log_start_offset)`
//!    ([`crate::log::Log::apply_manifest`]), taken at start-up before the broker serves
//!    ([`Tiering::recover`]) and again on every pass. The first local segment counts only
//!    when the manifest holds no segment (then the local log is the whole log): otherwise it
//!    is wherever local retention happened to stop, and a log-start checkpoint not yet
//!    written (it is written every `log.flush.offset.checkpoint.interval.ms`) must not turn
//!    it into the log start. ListOffsets EARLIEST and Fetch answer from that start.
//! 2. Remote retention ([`TieredPartition::apply_retention`]) is evaluated on the committed
//!    manifest: `retention.ms`, `retention.bytes` over both tiers (the local bytes not yet
//!    uploaded count), and the offset of an explicit DeleteRecords handled by this process
//!    ([`crate::log::Log::delete_records_offset`]). The local log start offset is not an
//!    input, so no local file a crash can lose or leave stale can delete remote data. The
//!    manifest's `log_start_offset` moves only there (or with a compacted snapshot).
//! 3. Local retention deletes a local segment only below the end of a committed manifest
//!    that this process has read (the remote end is unknown, -1, until then).
//!
//! Crash consistency of one upload (invariant 3): upload the bundle, commit the manifest,
//! then delete the local segment. A crash after the upload leaves an orphan (the scrubber
//! removes it, the segment is uploaded again); after the commit, the local copy is deleted by
//! the next pass. A DeleteRecords acknowledged less than one pass before a crash survives
//! through the log-start checkpoint (when written) as the visible log start, but its remote
//! segments then stay in the bucket until retention.ms / retention.bytes removes them: a
//! checkpoint alone never deletes remote data. Crash points: [`crate::failpoint`].

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use strata_tiering::catalog::{self, CatalogTopic};
use strata_tiering::local_log::{
    CompactedSegments, DurableStep, LocalRetentionInput, PreparedSegment, TieringPolicy,
};
use strata_tiering::rehydrate::RehydrateTarget;
use strata_tiering::upload_queue::{QueueConfig, QueueContext};
use strata_tiering::{
    Backoff, Event, LocalLog, PartitionId, PartitionManifest, PartitionWorker, RemoteReader,
    RemoteStore, ReplicaRole, StoreError, TieredPartition, TieringError,
};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::broker::{now_ms, Broker, Partition, Topic};
use crate::config::{BrokerConfig, TieringConfig};
use crate::failpoint;
use crate::log::TimestampAndOffset;

pub use strata_tiering::TieringMetrics;

pub struct Tiering {
    pub store: Arc<RemoteStore>,
    pub reader: RemoteReader,
    config: TieringConfig,
    partitions: Mutex<HashMap<(Uuid, i32), Arc<TieredPartition>>>,
    /// Each remote partition's upload queue (one worker at a time runs it).
    workers: Mutex<HashMap<(Uuid, i32), Arc<PartitionWorker>>>,
    /// What the workers share: the store, their settings and the metrics.
    queue: QueueContext,
    /// Partitions named by [`Tiering::notify`] since the last dispatch, with their events.
    pending: Mutex<HashMap<(String, i32), Vec<Event>>>,
    /// Wakes [`Tiering::run`] for `pending` (and deleted topics).
    wake: tokio::sync::Notify,
    /// The catalog as last written by this broker (topic name -> entry).
    synced: tokio::sync::Mutex<(BTreeMap<String, CatalogTopic>, i64)>,
    /// Topics deleted while this process ran whose remote data still has to go.
    deleted: Mutex<Vec<(String, Uuid, i32)>>,
    last_scrub: Mutex<Option<Instant>>,
    pub metrics: Arc<TieringMetrics>,
    /// Continuous Parquet export of topics with strata.export.parquet=true.
    pub exporter: strata_tiering::export::ContinuousExporter,
}

/// Why a remote read produced no data.
#[derive(Debug, thiserror::Error)]
pub enum RemoteReadError {
    #[error("offset {0} is not in remote storage")]
    OutOfRange(i64),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// How long a final upload waits for led partitions' high watermarks to cover what it rolled.
const DRAIN_HIGH_WATERMARK_WAIT: Duration = Duration::from_secs(2);

fn partition_id(topic: &Topic, index: i32) -> PartitionId {
    PartitionId {
        topic: topic.name.clone(),
        topic_id: topic.id,
        partition: index,
    }
}

impl Tiering {
    pub async fn open(config: &TieringConfig) -> anyhow::Result<Arc<Tiering>> {
        let store = Arc::new(RemoteStore::open(&config.store)?);
        let reader = RemoteReader::new(store.clone(), &config.cache).await?;
        let synced = match catalog::load(&store).await {
            Ok(Some((c, _))) => (c.topics, c.producer_id_block_end),
            Ok(None) => (BTreeMap::new(), 0),
            Err(e) => {
                tracing::warn!(store = %store, error = %e, "cannot read the bucket catalog yet");
                (BTreeMap::new(), 0)
            }
        };
        tracing::info!(store = %store, "tiered storage enabled");
        let metrics = Arc::new(TieringMetrics::default());
        Ok(Arc::new(Tiering {
            store: store.clone(),
            reader,
            config: config.clone(),
            partitions: Mutex::new(HashMap::new()),
            workers: Mutex::new(HashMap::new()),
            queue: QueueContext {
                store: store.clone(),
                config: QueueConfig {
                    upload: config.upload,
                    upload_bytes_per_second: config.upload_bytes_per_second,
                    compacted_snapshot_interval_ms: config.compacted_snapshot_interval_ms,
                    backoff: Backoff::default(),
                },
                metrics: metrics.clone(),
            },
            pending: Mutex::new(HashMap::new()),
            wake: tokio::sync::Notify::new(),
            synced: tokio::sync::Mutex::new(synced),
            deleted: Mutex::new(Vec::new()),
            last_scrub: Mutex::new(None),
            metrics,
            exporter: strata_tiering::export::ContinuousExporter::new(
                store.clone(),
                config.store.clone(),
                1,
            )
            .with_catalog(config.export_catalog.clone()),
        }))
    }

    pub fn fetch_max_wait(&self) -> Duration {
        Duration::from_millis(self.config.fetch_max_wait_ms)
    }

    /// The partition's remote state, loading its manifest on first use.
    pub async fn partition(
        &self,
        topic: &Topic,
        index: i32,
    ) -> Result<Arc<TieredPartition>, StoreError> {
        let key = (topic.id, index);
        if let Some(p) = self.loaded(&key) {
            return Ok(p);
        }
        let loaded =
            Arc::new(TieredPartition::load(&self.store, partition_id(topic, index)).await?);
        let mut map = self.partitions.lock().unwrap_or_else(|e| e.into_inner());
        Ok(map.entry(key).or_insert(loaded).clone())
    }

    fn loaded(&self, key: &(Uuid, i32)) -> Option<Arc<TieredPartition>> {
        self.partitions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned()
    }

    /// Called when a topic's config no longer has remote storage on: if the bucket's catalog
    /// lists it (this incarnation), it leaves the catalog and its remote data is deleted, as
    /// for a deleted topic (KIP-950's `remote.log.delete.on.disable`). Only records the work
    /// (a listener does no I/O).
    pub fn remote_storage_disabled(&self, topic: &Topic) {
        let listed = match self.synced.try_lock() {
            Ok(synced) => synced
                .0
                .get(&topic.name)
                .is_some_and(|e| e.topic_id == topic.id),
            // A catalog write is under way: let the next pass decide.
            Err(_) => true,
        };
        if listed {
            self.topic_deleted(&topic.name, topic.id, topic.partitions.len() as i32);
        }
    }

    /// Called when a topic is deleted: its remote data goes at the next tick.
    pub fn topic_deleted(&self, name: &str, id: Uuid, partitions: i32) {
        self.deleted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((name.to_string(), id, partitions));
        self.wake.notify_one();
    }

    /// Start-up, before the broker serves: every partition of a remote topic takes its log
    /// start offset and remote end from its manifest ([`crate::log::Log::apply_manifest`]),
    /// so ListOffsets EARLIEST and Fetch answer from the manifest's start at once and local
    /// retention knows what the bucket covers. A manifest that cannot be read now is left to
    /// the first tiering pass (which cannot run remote retention without it either); until
    /// then the partition keeps the start offset its checkpoint gave it.
    pub async fn recover(&self, broker: &Arc<Broker>) {
        let all: Vec<(Arc<Topic>, Arc<Partition>)> = broker
            .topics()
            .into_iter()
            .filter(|t| t.config.remote_storage_enable)
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| (t.clone(), p.clone()))
                    .collect::<Vec<_>>()
            })
            .collect();
        futures::stream::iter(all)
            .for_each_concurrent(self.config.upload_concurrency.max(1), |(t, p)| async move {
                let tp = match self.partition(&t, p.index).await {
                    Ok(tp) => tp,
                    Err(e) => {
                        tracing::warn!(topic = %t.name, partition = p.index, error = %e, "cannot read the manifest at start-up; the log start offset stays at its checkpoint until the first tiering pass");
                        return;
                    }
                };
                let m = tp.manifest();
                let (start, end) = (m.log_start_offset, m.end_offset());
                let part = p.clone();
                let applied = tokio::task::spawn_blocking(move || {
                    part.apply_manifest(start, end)
                })
                .await
                .map_err(io::Error::other)
                .and_then(|r| r);
                match applied {
                    Ok((before, after)) if after != before => {
                        tracing::info!(topic = %t.name, partition = p.index, checkpointed = before, log_start_offset = after, remote_end = end.unwrap_or(-1), "log start offset recovered from the manifest");
                    }
                    Ok(_) => {
                        tracing::debug!(topic = %t.name, partition = p.index, log_start_offset = start, remote_end = end.unwrap_or(-1), "log start offset agrees with the manifest");
                    }
                    Err(e) => {
                        tracing::warn!(topic = %t.name, partition = p.index, error = %e, "cannot apply the manifest at start-up");
                    }
                }
            })
            .await;
    }

    /// The tiering task, for the runtime to spawn: a pass over every remote partition every
    /// `remote.log.manager.task.interval.ms` ([`Tiering::tick`], the fallback that reconciles
    /// whatever events missed), and in between a pass for each partition named by
    /// [`Tiering::notify`] as its events arrive. Returns when `stop` fires; an operation in
    /// flight stops at its next await.
    pub async fn run(self: &Arc<Self>, broker: &Arc<Broker>, stop: CancellationToken) {
        let every = Duration::from_millis(self.config.task_interval_ms.max(1));
        let mut ticker = tokio::time::interval(every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = ticker.tick() => {
                    tokio::select! {
                        _ = stop.cancelled() => break,
                        _ = self.pass(broker, &stop) => {}
                    }
                }
                _ = self.wake.notified() => {
                    tokio::select! {
                        _ = stop.cancelled() => break,
                        _ = self.dispatch(broker, &stop) => {}
                    }
                }
            }
        }
    }

    /// An event for one partition of a remote topic (see [`Event`]): cheap, never blocks,
    /// callable from any thread. The partition's worker runs a pass soon after when
    /// [`Tiering::run`] drives the tiering task, and at the next [`Tiering::tick`] anyway.
    pub fn notify(&self, topic: &str, partition: i32, event: Event) {
        {
            let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            let events = pending.entry((topic.to_string(), partition)).or_default();
            if !events.contains(&event) {
                events.push(event);
            }
        }
        self.wake.notify_one();
    }

    /// One pass of the tiering task: enqueues a reconcile for every remote partition and
    /// runs each partition's queue until it is idle.
    pub async fn tick(self: &Arc<Self>, broker: &Arc<Broker>) {
        // Dropping this future cancels the pass as well as the token would.
        self.pass(broker, &CancellationToken::new()).await;
    }

    async fn pass(self: &Arc<Self>, broker: &Arc<Broker>, cancel: &CancellationToken) {
        self.sync_catalog(broker).await;
        let all: Vec<(Arc<Topic>, Arc<Partition>)> = broker
            .topics()
            .into_iter()
            .filter(|t| t.config.remote_storage_enable)
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| (t.clone(), p.clone()))
                    .collect::<Vec<_>>()
            })
            .collect();
        // Only a partition's leader uploads (as Kafka's RemoteLogManager); its followers
        // follow the manifest to apply local retention. Leaders go first.
        let (work, followed): (Vec<_>, Vec<_>) = all.into_iter().partition(|(_, p)| p.is_leader());
        futures::stream::iter(work)
            .for_each_concurrent(self.config.upload_concurrency, |(t, p)| async move {
                self.reconcile(broker, &t, &p, &[Event::Reconcile], cancel)
                    .await;
            })
            .await;
        futures::stream::iter(
            followed
                .into_iter()
                .filter(|(_, p)| p.is_replicated() && p.role() == crate::broker::Role::Follower),
        )
        .for_each_concurrent(self.config.upload_concurrency, |(t, p)| async move {
            self.reconcile(broker, &t, &p, &[Event::Reconcile], cancel)
                .await;
        })
        .await;
        let scrub_due = {
            let mut last = self.last_scrub.lock().unwrap_or_else(|e| e.into_inner());
            let due = last.is_none_or(|t| {
                t.elapsed() >= Duration::from_millis(self.config.scrub_interval_ms)
            });
            if due {
                *last = Some(Instant::now());
            }
            due
        };
        if scrub_due {
            self.scrub(broker).await;
        }
    }

    /// Runs the passes asked for by [`Tiering::notify`] (and deletes the remote data of topics
    /// deleted since the last pass).
    async fn dispatch(self: &Arc<Self>, broker: &Arc<Broker>, cancel: &CancellationToken) {
        let pending = std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()));
        let deleted = !self
            .deleted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty();
        if deleted {
            self.sync_catalog(broker).await;
        }
        let work: Vec<(Arc<Topic>, Arc<Partition>, Vec<Event>)> = pending
            .into_iter()
            .filter_map(|((name, index), events)| {
                let t = broker
                    .topic(&name)
                    .filter(|t| t.config.remote_storage_enable)?;
                let p = t.partitions.iter().find(|p| p.index == index)?.clone();
                Some((t, p, events))
            })
            .collect();
        futures::stream::iter(work)
            .for_each_concurrent(
                self.config.upload_concurrency,
                |(t, p, events)| async move {
                    self.reconcile(broker, &t, &p, &events, cancel).await;
                },
            )
            .await;
    }

    /// Feeds `events` to the partition's queue and runs it until idle; logs how the pass ended.
    async fn reconcile(
        self: &Arc<Self>,
        broker: &Arc<Broker>,
        topic: &Arc<Topic>,
        p: &Arc<Partition>,
        events: &[Event],
        cancel: &CancellationToken,
    ) {
        let leader = p.is_leader();
        if !self.in_catalog(broker, topic, p.index).await {
            // Restore and export find a topic's data through the catalog: nothing of a topic
            // the catalog does not list is uploaded (nor then deleted locally).
            tracing::debug!(topic = %topic.name, partition = p.index, "the bucket's catalog does not list this partition yet; tiering waits for it");
            return;
        }
        let result = async {
            let tp = self.partition(topic, p.index).await?;
            let worker = self.worker(topic, p.index);
            for &e in events {
                worker.event(e);
            }
            let log = Arc::new(BrokerLog {
                broker: broker.clone(),
                tiering: self.clone(),
                topic: topic.clone(),
                partition: p.clone(),
            });
            worker.run_until_idle(&self.queue, cancel, &tp, &log).await
        }
        .await;
        match result {
            Ok(()) | Err(TieringError::Cancelled) => {}
            Err(e) if e.is_fenced() => {
                // A newer leader claimed the manifest: this broker has been deposed and learns
                // so from the metadata shortly.
                tracing::info!(topic = %topic.name, partition = p.index, error = %e, "tiering pass fenced by a newer leader epoch");
            }
            Err(e) if leader => {
                tracing::warn!(topic = %topic.name, partition = p.index, error = %e, "tiering pass failed; will retry");
            }
            Err(e) => {
                tracing::debug!(topic = %topic.name, partition = p.index, error = %e, "cannot read the manifest as a follower; will retry");
            }
        }
    }

    fn worker(&self, topic: &Topic, index: i32) -> Arc<PartitionWorker> {
        self.workers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry((topic.id, index))
            .or_default()
            .clone()
    }

    /// Rolls the active segment of every remote partition and runs one pass, so everything
    /// acknowledged so far is in the bucket (clean shutdown). Only what is below a leader's
    /// high watermark may be uploaded, so the pass first waits (at most
    /// [`DRAIN_HIGH_WATERMARK_WAIT`]) until each led partition's high watermark covers what
    /// was rolled: the followers' next fetch.
    pub async fn drain(self: &Arc<Self>, broker: &Arc<Broker>) {
        let b = broker.clone();
        let rolled = tokio::task::spawn_blocking(move || {
            let now = now_ms();
            let mut led = Vec::new();
            for t in b.topics() {
                if !t.config.remote_storage_enable {
                    continue;
                }
                for p in &t.partitions {
                    if let Err(e) = p.roll(now) {
                        tracing::warn!(topic = %t.name, partition = p.index, error = %e, "cannot roll before the final upload");
                    } else if p.is_leader() {
                        led.push((p.clone(), p.offsets().log_end_offset));
                    }
                }
            }
            led
        })
        .await;
        let Ok(led) = rolled else { return };
        let deadline = Instant::now() + DRAIN_HIGH_WATERMARK_WAIT;
        while Instant::now() < deadline
            && led
                .iter()
                .any(|(p, end)| p.is_leader() && p.offsets().high_watermark < *end)
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.tick(broker).await;
    }

    /// Whether the bucket's catalog lists `topic` (this incarnation of it) with partition
    /// `index`; writes the catalog first when it does not yet.
    async fn in_catalog(&self, broker: &Arc<Broker>, topic: &Topic, index: i32) -> bool {
        let listed = |synced: &BTreeMap<String, CatalogTopic>| {
            synced
                .get(&topic.name)
                .is_some_and(|e| e.topic_id == topic.id && e.partitions > index)
        };
        if listed(&self.synced.lock().await.0) {
            return true;
        }
        self.sync_catalog(broker).await;
        listed(&self.synced.lock().await.0)
    }

    /// Writes the catalog when remote topics changed, and deletes the remote data of topics
    /// deleted since the last pass.
    async fn sync_catalog(&self, broker: &Arc<Broker>) {
        let mut guard = self.synced.lock().await;
        let (synced, synced_pids) = &mut *guard;
        let pids = broker.producer_id_block_end();
        let mut want: BTreeMap<String, CatalogTopic> = BTreeMap::new();
        for t in broker.topics() {
            if t.config.remote_storage_enable {
                want.insert(
                    t.name.clone(),
                    CatalogTopic {
                        topic_id: t.id,
                        partitions: t.partitions.len() as i32,
                        // The first partition's replica count (1 on a single node).
                        replication_factor: broker
                            .replication()
                            .leadership(&t.name, 0)
                            .map_or(1, |s| s.replicas.len().max(1) as i16),
                        configs: t.overrides.clone(),
                    },
                );
            }
        }
        let deleted: Vec<(String, Uuid, i32)> =
            std::mem::take(&mut *self.deleted.lock().unwrap_or_else(|e| e.into_inner()));
        let changed = pids > *synced_pids
            || want
                .iter()
                .any(|(name, entry)| synced.get(name) != Some(entry))
            || deleted
                .iter()
                .any(|(name, id, _)| synced.get(name).is_some_and(|e| e.topic_id == *id));
        if changed {
            let result = catalog::update(&self.store, |c| {
                c.producer_id_block_end = c.producer_id_block_end.max(pids);
                for (name, entry) in &want {
                    c.topics.insert(name.clone(), entry.clone());
                }
                for (name, id, _) in &deleted {
                    if c.topics.get(name).is_some_and(|e| e.topic_id == *id)
                        && !want.contains_key(name)
                    {
                        c.topics.remove(name);
                    }
                }
                true
            })
            .await;
            match result {
                Ok(()) => {
                    *synced_pids = pids;
                    for (name, id, _) in &deleted {
                        if synced.get(name).is_some_and(|e| e.topic_id == *id) {
                            synced.remove(name);
                        }
                    }
                    for (name, entry) in want {
                        synced.insert(name, entry);
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot update the bucket catalog; will retry");
                    self.deleted
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .extend(deleted);
                    return;
                }
            }
        }
        for (name, id, partitions) in deleted {
            if broker
                .topic(&name)
                .is_some_and(|t| t.id == id && t.config.remote_storage_enable)
            {
                // Remote storage was turned off and on again before this pass: the topic's
                // remote data is its again (and new uploads may have joined it).
                continue;
            }
            for index in 0..partitions {
                let pid = PartitionId {
                    topic: name.clone(),
                    topic_id: id,
                    partition: index,
                };
                let tp = match TieredPartition::load(&self.store, pid).await {
                    Ok(tp) => tp,
                    Err(e) => {
                        tracing::warn!(topic = %name, partition = index, error = %e, "cannot delete remote data of a deleted topic");
                        continue;
                    }
                };
                if let Err(e) = tp.delete_all(&self.store).await {
                    tracing::warn!(topic = %name, partition = index, error = %e, "cannot delete remote data of a deleted topic");
                }
                self.partitions
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&(id, index));
                self.workers
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&(id, index));
            }
            tracing::info!(topic = %name, "deleted remote data of a deleted topic");
        }
    }

    /// Removes uploads that were never committed (older than the grace period).
    async fn scrub(&self, broker: &Arc<Broker>) {
        for t in broker.topics() {
            if !t.config.remote_storage_enable {
                continue;
            }
            for p in t.partitions.iter().filter(|p| p.is_leader()) {
                let Ok(tp) = self.partition(&t, p.index).await else {
                    continue;
                };
                match tp
                    .scrub(&self.store, now_ms(), self.config.orphan_grace_ms)
                    .await
                {
                    Ok(0) => {}
                    Ok(n) => {
                        self.metrics
                            .orphans_removed
                            .fetch_add(n as u64, Ordering::Relaxed);
                        tracing::info!(topic = %t.name, partition = p.index, objects = n, "removed orphaned remote objects");
                    }
                    Err(e) => {
                        tracing::warn!(topic = %t.name, partition = p.index, error = %e, "scrub failed")
                    }
                }
            }
        }
    }

    /// Whole batches from `offset` out of remote storage.
    pub async fn read(
        &self,
        topic: &Topic,
        index: i32,
        offset: i64,
        max_bytes: usize,
        min_one: bool,
    ) -> Result<strata_tiering::RemoteRecords, RemoteReadError> {
        self.metrics.remote_fetches.fetch_add(1, Ordering::Relaxed);
        let tp = self.partition(topic, index).await?;
        let manifest = tp.manifest();
        let mut seg = manifest
            .segment_for(offset)
            .or_else(|| {
                // The offset may fall in a gap left by compaction or by data deleted before
                // it was uploaded: continue at the next segment.
                manifest.segment_after(offset)
            })
            .ok_or(RemoteReadError::OutOfRange(offset))?;
        // Read-ahead may go on into the next remote segment, not into one read locally.
        let local_start = topic
            .partitions
            .get(index as usize)
            .map(|p| p.local_start_offset().0);
        loop {
            let next = manifest
                .segment_after(seg.base_offset)
                .filter(|n| local_start.is_some_and(|l| n.base_offset < l));
            let result = self
                .reader
                .read(
                    &topic.name,
                    seg,
                    offset.max(seg.base_offset),
                    max_bytes,
                    min_one,
                    next,
                )
                .await;
            match result {
                // Compaction removed the rest of this segment: the next one continues.
                // (Only when a batch would have been returned however large: otherwise an empty
                // answer may just mean the first batch did not fit.)
                Ok(b) if b.is_empty() && min_one => match manifest.segment_after(seg.base_offset) {
                    Some(next) => seg = next,
                    None => return Ok(b),
                },
                Ok(b) => return Ok(b),
                Err(e) => {
                    self.metrics
                        .remote_fetch_errors
                        .fetch_add(1, Ordering::Relaxed);
                    return Err(e.into());
                }
            }
        }
    }

    /// Aborted transactions (producer id, first offset) overlapping `[from, upper)` from the
    /// remote segments' transaction indexes, scanning on from the segment holding `from` until
    /// an entry ends at or past `upper` (Kafka's collectAbortedTransactions).
    pub async fn aborted_transactions(
        &self,
        topic: &Topic,
        index: i32,
        from: i64,
        upper: i64,
    ) -> Result<Vec<(i64, i64)>, RemoteReadError> {
        let tp = self.partition(topic, index).await?;
        let manifest = tp.manifest();
        let mut out = Vec::new();
        for seg in manifest.segments.iter().filter(|s| s.next_offset > from) {
            let raw = self.reader.txn_index(&topic.name, seg).await?;
            let entries = crate::log::txn_index::parse(&raw).map_err(|m| {
                RemoteReadError::Store(StoreError::Request(format!("{}: {m}", seg.key)))
            })?;
            let mut complete = false;
            for t in entries {
                if t.last_offset >= from && t.first_offset < upper {
                    out.push((t.producer_id, t.first_offset));
                }
                complete |= t.last_offset >= upper;
            }
            if complete {
                break;
            }
        }
        Ok(out)
    }

    /// offsetsForTimes over the remote segments below `local_start`: the first record with a
    /// timestamp >= `timestamp`, or None when the answer is in the local log.
    pub async fn offset_for_timestamp(
        &self,
        topic: &Topic,
        index: i32,
        timestamp: i64,
        log_start: i64,
        local_start: i64,
    ) -> Result<Option<TimestampAndOffset>, RemoteReadError> {
        let tp = self.partition(topic, index).await?;
        let manifest = tp.manifest();
        for seg in &manifest.segments {
            if seg.next_offset <= log_start || seg.max_timestamp < timestamp {
                continue;
            }
            if seg.base_offset >= local_start {
                return Ok(None);
            }
            let Some(batch) = self
                .reader
                .batch_for_timestamp(&topic.name, seg, timestamp, log_start)
                .await?
            else {
                continue;
            };
            if let Some(found) = crate::log::first_record_at_or_after(
                &batch,
                timestamp,
                log_start,
                topic.config.max_decompressed_batch_bytes,
            )
            .map_err(|e| RemoteReadError::Store(StoreError::Request(e.to_string())))?
            {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    /// Prometheus lines for tiered storage.
    pub fn render_metrics(&self, out: &mut String, lag: &[(String, i32, u64)]) {
        use std::fmt::Write;
        let m = &self.metrics;
        let s = &self.store.metrics;
        let r = &self.reader.metrics;
        let counters = [
            (
                "strata_remote_segments_uploaded_total",
                "Segments uploaded to remote storage.",
                m.segments_uploaded.load(Ordering::Relaxed),
            ),
            (
                "strata_remote_upload_failures_total",
                "Failed segment uploads or manifest commits (retried).",
                m.upload_failures.load(Ordering::Relaxed),
            ),
            (
                "strata_remote_segments_deleted_total",
                "Remote segments deleted by retention.",
                m.segments_deleted_remote.load(Ordering::Relaxed),
            ),
            (
                "strata_remote_orphans_removed_total",
                "Uncommitted remote objects removed by the scrubber.",
                m.orphans_removed.load(Ordering::Relaxed),
            ),
            (
                "strata_remote_compacted_snapshots_total",
                "Compacted snapshots committed (compacted topics).",
                m.compacted_snapshots.load(Ordering::Relaxed),
            ),
            (
                "strata_remote_segments_rehydrated_total",
                "Remote segments brought back to local disk (strata.remote.rehydrate.enable).",
                m.segments_rehydrated.load(Ordering::Relaxed),
            ),
            (
                "strata_remote_rehydrated_bytes_total",
                "Bytes of the remote segments brought back to local disk.",
                m.bytes_rehydrated.load(Ordering::Relaxed),
            ),
            (
                "strata_remote_rehydration_failures_total",
                "Rehydrations that failed (download or check); retried at the next pass.",
                m.rehydration_failures.load(Ordering::Relaxed),
            ),
            (
                "strata_remote_uploaded_bytes_total",
                "Bytes written to the object store.",
                s.bytes_uploaded.load(Ordering::Relaxed),
            ),
            (
                "strata_remote_downloaded_bytes_total",
                "Bytes read from the object store.",
                s.bytes_downloaded.load(Ordering::Relaxed),
            ),
            (
                "strata_remote_store_errors_total",
                "Failed object store requests.",
                s.errors.load(Ordering::Relaxed),
            ),
            (
                "strata_remote_fetches_total",
                "Fetches served from remote storage.",
                m.remote_fetches.load(Ordering::Relaxed),
            ),
            (
                "strata_remote_fetch_errors_total",
                "Remote fetches that failed.",
                m.remote_fetch_errors.load(Ordering::Relaxed),
            ),
            (
                "strata_remote_cache_hits_total",
                "Remote chunk reads served by the cache (or by a GET already in flight).",
                r.chunk_hits.load(Ordering::Relaxed),
            ),
            (
                "strata_remote_cache_misses_total",
                "Remote chunk reads that went to the object store themselves.",
                r.chunk_misses.load(Ordering::Relaxed),
            ),
            (
                "strata_remote_readahead_gets_total",
                "Chunk GETs started by read-ahead, before any read asked for the chunk.",
                r.readahead_gets.load(Ordering::Relaxed),
            ),
            (
                "strata_remote_read_seconds_total",
                "Time spent in remote reads.",
                0,
            ),
        ];
        let disk = self.reader.disk_tier().map(|d| &d.metrics);
        let disk_counter = |f: fn(&strata_tiering::disk_tier::DiskTierMetrics) -> &AtomicU64| {
            disk.map_or(0, |m| f(m).load(Ordering::Relaxed))
        };
        let disk_counters = [
            (
                "strata_remote_cache_disk_written_bytes_total",
                "Bytes written to the remote read cache's disk tier.",
                disk_counter(|m| &m.bytes_written),
            ),
            (
                "strata_remote_cache_disk_evictions_total",
                "Chunk files evicted from the disk tier (least recently used first).",
                disk_counter(|m| &m.files_evicted),
            ),
            (
                "strata_remote_cache_disk_write_errors_total",
                "Chunks the disk tier could not write (kept in memory instead).",
                disk_counter(|m| &m.write_errors),
            ),
            (
                "strata_remote_cache_disk_skipped_total",
                "Chunks not written to the disk tier to keep its file system's free share.",
                disk_counter(|m| &m.skipped_for_space),
            ),
            (
                "strata_remote_cache_disk_unwritten_total",
                "Chunks fetched but not written to the disk tier: evicted from memory before the background writer reached them (a machine too busy to fill the cache).",
                disk_counter(|m| &m.unwritten),
            ),
            (
                "strata_remote_cache_disk_rejected_total",
                "Chunk files found damaged (short, bad CRC) and deleted.",
                disk_counter(|m| &m.files_rejected),
            ),
        ];
        for (name, help, v) in disk_counters {
            write_counter(out, name, help, v);
        }
        let _ = writeln!(out, "# HELP strata_remote_cache_disk_bytes Bytes in the remote read cache's disk tier.\n# TYPE strata_remote_cache_disk_bytes gauge\nstrata_remote_cache_disk_bytes {}", disk_counter(|m| &m.bytes));
        for (name, help, v) in counters {
            if name == "strata_remote_read_seconds_total" {
                let secs = r.read_micros_total.load(Ordering::Relaxed) as f64 / 1e6;
                write_counter(out, name, help, secs);
                let reads = r.reads.load(Ordering::Relaxed);
                write_counter(
                    out,
                    "strata_remote_reads_total",
                    "Remote reads (for the mean latency with strata_remote_read_seconds_total).",
                    reads,
                );
                continue;
            }
            write_counter(out, name, help, v);
        }
        let _ = writeln!(out, "# HELP strata_remote_requests_total Object store requests, by topic (\"\" = cluster objects) and operation.\n# TYPE strata_remote_requests_total counter");
        for (topic, op, n) in s.requests() {
            let _ = writeln!(
                out,
                "strata_remote_requests_total{{topic=\"{topic}\",op=\"{}\"}} {n}",
                op.name()
            );
        }
        let _ = writeln!(out, "# HELP strata_remote_upload_lag_bytes Local bytes of remote-enabled partitions not yet in remote storage.\n# TYPE strata_remote_upload_lag_bytes gauge");
        for (topic, partition, bytes) in lag {
            let _ = writeln!(
                out,
                "strata_remote_upload_lag_bytes{{topic=\"{topic}\",partition=\"{partition}\"}} {bytes}"
            );
        }
        self.render_export_metrics(out);
    }

    /// Prometheus lines for continuous Parquet export.
    fn render_export_metrics(&self, out: &mut String) {
        use std::fmt::Write;
        let p = &self.exporter.progress;
        let counters = [
            (
                "strata_export_records_total",
                "Records written to Parquet files by continuous export.",
                p.records.load(Ordering::Relaxed),
            ),
            (
                "strata_export_files_total",
                "Parquet files landed by continuous export.",
                p.files.load(Ordering::Relaxed),
            ),
            (
                "strata_export_bytes_total",
                "Bytes of Parquet files landed by continuous export.",
                p.bytes_out.load(Ordering::Relaxed),
            ),
            (
                "strata_export_errors_total",
                "Continuous exports that failed (each is retried after the next upload).",
                self.exporter.errors.load(Ordering::Relaxed),
            ),
        ];
        for (name, help, v) in counters {
            write_counter(out, name, help, v);
        }
        let lag = self.exporter.lag();
        let _ = writeln!(out, "# HELP strata_export_lag_records Uploaded records not exported yet, by partition.\n# TYPE strata_export_lag_records gauge");
        for l in &lag {
            let _ = writeln!(
                out,
                "strata_export_lag_records{{topic=\"{}\",partition=\"{}\"}} {}",
                l.topic, l.partition, l.records
            );
        }
        let _ = writeln!(out, "# HELP strata_export_lag_seconds How long the export of a partition has been behind its uploads (0: caught up).\n# TYPE strata_export_lag_seconds gauge");
        for l in &lag {
            let _ = writeln!(
                out,
                "strata_export_lag_seconds{{topic=\"{}\",partition=\"{}\"}} {:.3}",
                l.topic,
                l.partition,
                l.behind.as_secs_f64()
            );
        }
    }
}

/// One Prometheus counter with its HELP and TYPE lines.
fn write_counter(out: &mut String, name: &str, help: &str, value: impl std::fmt::Display) {
    use std::fmt::Write;
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
    );
}

/// `strata tier status`: what the bucket holds, per partition, from the catalog and the
/// manifests (no listing).
pub async fn status_report(
    config: &BrokerConfig,
    only_topic: Option<&str>,
) -> anyhow::Result<String> {
    use std::fmt::Write;
    let store = RemoteStore::open(&config.tiering.store)?;
    let mut out = String::new();
    let Some((cat, _)) = catalog::load(&store).await? else {
        writeln!(
            out,
            "{store}: no catalog (no topic has uploaded anything yet)"
        )?;
        return Ok(out);
    };
    writeln!(
        out,
        "{store}: catalog version {}, {} topic(s), producer-id block end {}",
        cat.version,
        cat.topics.len(),
        cat.producer_id_block_end
    )?;
    writeln!(
        out,
        "{:<32} {:>5} {:>9} {:>14} {:>14} {:>14} {:>8} {:>6}",
        "TOPIC", "PART", "SEGMENTS", "BYTES", "START", "END", "VERSION", "EPOCH"
    )?;
    let (mut segments, mut bytes) = (0usize, 0u64);
    for (name, entry) in &cat.topics {
        if only_topic.is_some_and(|t| t != name) {
            continue;
        }
        for index in 0..entry.partitions {
            let id = PartitionId {
                topic: name.clone(),
                topic_id: entry.topic_id,
                partition: index,
            };
            let tp = TieredPartition::load(&store, id).await?;
            let m = tp.manifest();
            segments += m.segments.len();
            bytes += m.size();
            writeln!(
                out,
                "{:<32} {:>5} {:>9} {:>14} {:>14} {:>14} {:>8} {:>6}",
                name,
                index,
                m.segments.len(),
                m.size(),
                m.start_offset().unwrap_or(m.log_start_offset),
                m.end_offset().unwrap_or(m.log_start_offset),
                m.version,
                m.leader_epoch
            )?;
        }
    }
    writeln!(out, "total: {segments} segment(s), {bytes} bytes")?;
    Ok(out)
}

/// A partition restored from the bucket: what its local directory must hold.
struct RestoredPartition {
    index: i32,
    log_start_offset: i64,
    next_offset: i64,
    producer_snapshot: Option<Bytes>,
    leader_epoch_checkpoint: Option<Bytes>,
}

/// Rebuilds topics from the bucket when the broker starts on an empty data directory
/// (invariant 7). Returns the number of topics restored.
///
/// Single-node mode only. In cluster mode the metadata quorum, not the bucket, says which
/// topics exist (with which ids, replicas and leaders): the metadata sync deletes local topics
/// the quorum does not have, so a restore here would be undone. A cluster is rebuilt from the
/// bucket through its quorum instead ([`crate::controller::restore`], with
/// `strata.remote.cluster.restore.enable`): the quorum takes the catalog's topics, and each
/// partition's first leader seeds its empty local log from the bucket.
pub async fn restore_if_empty(tiering: &Tiering, config: &BrokerConfig) -> anyhow::Result<usize> {
    if !crate::broker::is_fresh_data_dir(config) {
        return Ok(0);
    }
    let Some((cat, _)) = catalog::load(&tiering.store).await? else {
        return Ok(0);
    };
    if config.cluster.is_some() {
        if !cat.topics.is_empty() {
            tracing::info!(topics = cat.topics.len(), "cluster mode: the metadata quorum decides which topics exist (a new cluster takes the bucket's with strata.remote.cluster.restore.enable)");
        }
        return Ok(0);
    }
    let producer_id_block_end = cat.producer_id_block_end;
    let mut topics = Vec::new();
    for (name, entry) in &cat.topics {
        let mut parts = Vec::new();
        for index in 0..entry.partitions {
            let id = PartitionId {
                topic: name.clone(),
                topic_id: entry.topic_id,
                partition: index,
            };
            let tp = TieredPartition::load(&tiering.store, id).await?;
            let m = tp.manifest();
            let Some(last) = m.segments.last() else {
                parts.push(RestoredPartition {
                    index,
                    log_start_offset: m.log_start_offset,
                    next_offset: m.log_start_offset,
                    producer_snapshot: None,
                    leader_epoch_checkpoint: None,
                });
                continue;
            };
            let snapshot = match last.producer_snapshot {
                Some(part) => Some(tiering.reader.part(name, last, part).await?),
                None => None,
            };
            let epochs = match last.leader_epoch_checkpoint {
                Some(part) => Some(tiering.reader.part(name, last, part).await?),
                None => None,
            };
            if is_coordinator_topic(name) {
                let pdir = config.log_dirs[0].join(format!("{name}-{index}"));
                download_segments(tiering, &m, &pdir).await?;
            }
            parts.push(RestoredPartition {
                index,
                // The manifest's log start (a compacted log may have nothing at it: reads
                // continue at the first segment after it).
                log_start_offset: m.log_start_offset,
                next_offset: last.next_offset,
                producer_snapshot: snapshot,
                leader_epoch_checkpoint: epochs,
            });
        }
        topics.push((name.clone(), entry.clone(), parts));
    }
    let n = topics.len();
    let config = config.clone();
    tokio::task::spawn_blocking(move || write_restored(&config, topics, producer_id_block_end))
        .await??;
    Ok(n)
}

/// The coordinators' topics: a restore brings their segments back to local disk, since the
/// coordinators load their state from the local log.
fn is_coordinator_topic(name: &str) -> bool {
    use crate::coordinator::internal_topics::SHARE_STATE_TOPIC;
    use crate::coordinator::txn::TRANSACTION_STATE_TOPIC;
    use crate::coordinator::OFFSETS_TOPIC;
    [OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, SHARE_STATE_TOPIC].contains(&name)
}

/// Downloads every remote segment of `m` at or past its log start into `pdir` as local
/// segments (`.log`, and `.txnindex` when it has one; as rehydration downloads, with
/// [`strata_tiering::rehydrate::download_segment`]), each checked (whole, CRC-valid batches
/// with offsets inside the segment) before it is renamed into place. Where a segment overlaps
/// the next one (a new leader's first upload), it is cut where the next one starts.
async fn download_segments(
    tiering: &Tiering,
    m: &PartitionManifest,
    pdir: &Path,
) -> anyhow::Result<()> {
    tokio::fs::create_dir_all(pdir).await?;
    let live = m
        .segments
        .iter()
        .filter(|s| s.next_offset > m.log_start_offset);
    let bases: Vec<i64> = live.clone().map(|s| s.base_offset).collect();
    let cancel = CancellationToken::new();
    for (i, s) in live.enumerate() {
        let stem = crate::log::segment::file_stem(s.base_offset);
        let tmp = pdir.join(format!("{stem}.log.restore.tmp"));
        let txn_tmp = pdir.join(format!("{stem}.txnindex.restore.tmp"));
        strata_tiering::rehydrate::download_segment(
            &tiering.store,
            Backoff::default(),
            &cancel,
            &m.topic,
            s,
            &tmp,
            &txn_tmp,
        )
        .await?;
        let txn = s.txn_index.map(|_| txn_tmp);
        let upto = bases
            .get(i + 1)
            .copied()
            .unwrap_or(i64::MAX)
            .min(s.next_offset);
        let (log, base, pdir) = (tmp, s.base_offset, pdir.to_path_buf());
        tokio::task::spawn_blocking(move || {
            crate::log::rehydrate::check_restored(&log, txn.as_deref(), base, upto)?;
            if let Some(t) = &txn {
                std::fs::rename(t, crate::log::txn_index::path(&pdir, base))?;
            }
            std::fs::rename(&log, crate::log::segment::Segment::log_path(&pdir, base))
        })
        .await??;
    }
    Ok(())
}

impl Tiering {
    /// What a leader of `topic`-`index` with an empty local log in `pdir` takes from the
    /// bucket before it serves (see [`crate::log::Log::seed_from_remote`]): the remote log's
    /// end, leader epochs and producer state from its last segment, and, for the
    /// coordinators' topics, every segment (checked, staged in `pdir`). `None` when the
    /// partition never had remote data.
    pub async fn seed(
        &self,
        topic: &str,
        topic_id: Uuid,
        index: i32,
        pdir: &Path,
    ) -> anyhow::Result<Option<crate::log::LogSeed>> {
        let id = PartitionId {
            topic: topic.to_string(),
            topic_id,
            partition: index,
        };
        let Some(loaded) = strata_tiering::manifest::load(&self.store, &id).await? else {
            return Ok(None);
        };
        let m = loaded.manifest;
        let Some(last) = m.segments.last() else {
            // Remote retention removed every segment: the log still continues at the
            // manifest's log start, never at offsets handed out before.
            return Ok((m.log_start_offset > 0).then(|| crate::log::LogSeed {
                log_start_offset: m.log_start_offset,
                local_start_offset: m.log_start_offset,
                epochs: Vec::new(),
                producer_snapshot: None,
                segments: None,
            }));
        };
        let epochs = match last.leader_epoch_checkpoint {
            Some(part) => crate::log::leader_epoch::parse_checkpoint(
                &self.reader.part(topic, last, part).await?,
            ),
            None => Vec::new(),
        };
        let producer_snapshot = match last.producer_snapshot {
            Some(part) => Some(self.reader.part(topic, last, part).await?),
            None => None,
        };
        let segments = if is_coordinator_topic(topic) {
            let staging = pdir.join("bucket-seed.tmp");
            let _ = tokio::fs::remove_dir_all(&staging).await;
            download_segments(self, &m, &staging).await?;
            Some(staging)
        } else {
            None
        };
        Ok(Some(crate::log::LogSeed {
            log_start_offset: m.log_start_offset.min(last.next_offset),
            local_start_offset: last.next_offset,
            epochs,
            producer_snapshot,
            segments,
        }))
    }
}

fn write_restored(
    config: &BrokerConfig,
    topics: Vec<(String, CatalogTopic, Vec<RestoredPartition>)>,
    producer_id_block_end: i64,
) -> io::Result<()> {
    let dir = &config.log_dirs[0];
    let mut records = Vec::new();
    let mut log_starts = Vec::new();
    for (name, entry, parts) in topics {
        for p in parts {
            let pdir = dir.join(format!("{name}-{}", p.index));
            std::fs::create_dir_all(&pdir)?;
            let stem = crate::log::segment::file_stem(p.next_offset);
            std::fs::write(pdir.join(format!("{stem}.log")), b"")?;
            if let Some(s) = &p.producer_snapshot {
                write_file(&pdir.join(format!("{stem}.snapshot")), s)?;
            }
            if let Some(c) = &p.leader_epoch_checkpoint {
                write_file(&pdir.join(crate::log::leader_epoch::FILE_NAME), c)?;
            }
            log_starts.push((name.clone(), p.index, p.log_start_offset));
        }
        tracing::info!(topic = %name, partitions = entry.partitions, "restored topic from the bucket");
        records.push((name, entry.topic_id, entry.partitions, entry.configs));
    }
    crate::broker::write_restored_metadata(config, &records, &log_starts, producer_id_block_end)
}

fn write_file(path: &Path, data: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("restore.tmp");
    std::fs::write(&tmp, data)?;
    std::fs::rename(tmp, path)
}

/// Continuous export: once a partition's uploads are committed, brings its Parquet export up
/// to the manifest's end in the background (the first poke after the topic turns
/// strata.export.parquet on backfills what is already remote).
fn export_parquet_after_upload(
    tiering: &Tiering,
    topic: &Topic,
    index: i32,
    manifest: &PartitionManifest,
) {
    use crate::config::topic::{
        EXPORT_ICEBERG, EXPORT_PARQUET, EXPORT_PARQUET_FILE_BYTES, EXPORT_PARQUET_TARGET,
    };
    let flag = |name: &str| {
        topic
            .overrides
            .get(name)
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
    };
    let enabled = flag(EXPORT_PARQUET);
    if !enabled || manifest.segments.is_empty() {
        return;
    }
    let target_url = topic
        .overrides
        .get(EXPORT_PARQUET_TARGET)
        .filter(|v| !v.trim().is_empty())
        .cloned()
        .unwrap_or_else(|| {
            strata_tiering::export::ContinuousExporter::default_target(&tiering.config.store.url)
        });
    let file_bytes = topic
        .overrides
        .get(EXPORT_PARQUET_FILE_BYTES)
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(256 << 20);
    tiering.exporter.poke(strata_tiering::export::ExportJob {
        id: partition_id(topic, index),
        target_url,
        file_bytes,
        remote_end: manifest.end_offset().unwrap_or(0),
        iceberg: flag(EXPORT_ICEBERG),
    });
}

/// A broker partition as the tiering orchestration sees it ([`LocalLog`]).
struct BrokerLog {
    broker: Arc<Broker>,
    tiering: Arc<Tiering>,
    topic: Arc<Topic>,
    partition: Arc<Partition>,
}

impl LocalLog for BrokerLog {
    fn role(&self) -> ReplicaRole {
        let p = &self.partition;
        if p.is_leader() {
            ReplicaRole::Leader {
                leader_epoch: p.leader_epoch().0,
            }
        } else if p.is_replicated() && p.role() == crate::broker::Role::Follower {
            ReplicaRole::Follower
        } else {
            ReplicaRole::None
        }
    }

    fn policy(&self) -> TieringPolicy {
        let c = &self.topic.config;
        TieringPolicy {
            retention_ms: if c.cleanup_policy_delete {
                c.retention_ms
            } else {
                -1
            },
            retention_bytes: if c.cleanup_policy_delete {
                c.retention_bytes
            } else {
                -1
            },
            compact: c.cleanup_policy_compact,
        }
    }

    fn apply_manifest(
        &self,
        log_start_offset: i64,
        remote_end: Option<i64>,
    ) -> io::Result<(i64, i64)> {
        self.partition.apply_manifest(log_start_offset, remote_end)
    }

    fn next_uploadable(&self, from: i64) -> io::Result<Option<PreparedSegment>> {
        self.partition.next_uploadable(from)
    }

    fn allow_local_retention(&self, remote_end: i64, now_ms: i64) -> io::Result<usize> {
        self.partition.allow_local_retention(remote_end, now_ms)
    }

    fn retention_input(&self) -> LocalRetentionInput {
        self.partition.retention_input()
    }

    fn advance_log_start_offset(&self, log_start_offset: i64) -> io::Result<()> {
        self.partition.advance_log_start_offset(log_start_offset)
    }

    fn cleaned_upto(&self) -> Option<i64> {
        self.broker
            .log_cleaner()
            .checkpoint(&self.topic.name, self.partition.index)
    }

    fn compacted_segments(&self, limit: i64) -> io::Result<Option<CompactedSegments>> {
        self.partition.compacted_segments(limit)
    }

    fn roll(&self, now_ms: i64) -> io::Result<()> {
        self.partition.roll(now_ms)
    }

    fn reached(&self, step: DurableStep) {
        match step {
            DurableStep::Uploaded => failpoint::hit(failpoint::TIERING_UPLOADED),
            DurableStep::ManifestCommitted => failpoint::hit(failpoint::TIERING_MANIFEST_COMMITTED),
            DurableStep::RehydrateDownloaded => {
                failpoint::hit(failpoint::TIERING_REHYDRATE_DOWNLOADED)
            }
            DurableStep::Rehydrated => failpoint::hit(failpoint::TIERING_REHYDRATED),
        }
    }

    fn uploads_committed(&self, manifest: &PartitionManifest) {
        export_parquet_after_upload(&self.tiering, &self.topic, self.partition.index, manifest);
    }

    fn rehydration_candidate(
        &self,
        manifest: &PartitionManifest,
        now_ms: i64,
    ) -> Option<RehydrateTarget> {
        self.partition.rehydration_candidate(manifest, now_ms)
    }

    fn install_rehydrated(&self, target: &RehydrateTarget) -> io::Result<bool> {
        self.partition.install_rehydrated(target)
    }
}
