//! Rebuilding a lost cluster from its bucket (`strata.remote.cluster.restore.enable`).
//!
//! A new cluster (empty disks, empty metadata quorum) pointed at the bucket of a lost one
//! takes the topics of the bucket's catalog ([`strata_tiering::catalog`]): names, ids,
//! partition counts, replication factors and configs. The active controller waits until
//! enough brokers are registered and unfenced to place the largest replication factor, reads
//! every catalog partition's manifest for the leader epochs its remote data was written in,
//! places the replicas and proposes one [`Command::RestoreFromBucket`]. The quorum decides it
//! once: it creates the topics only while it holds none, each partition at a leader epoch
//! above its remote data's, and raises the producer-id counter to the catalog's high-water
//! mark, so no restored producer snapshot ever meets a reused producer id. Every later restore
//! changes nothing, so a catalog that lags behind deletions never brings a topic back.
//!
//! The records follow as each partition gets a leader: the leader's empty local log restarts
//! at the remote log's end with the partition's epochs and producer state
//! ([`super::sync`], [`crate::log::Log::seed_from_remote`]); the coordinators' topics bring
//! their segments back to local disk, so committed offsets and transaction state load. Reads
//! below the local log come from the bucket as for any tiered partition.
//!
//! Until the quorum has decided, this broker creates no coordinator topic: one created first
//! would make the quorum non-empty and the restore refused.
//!
//! Retries: a failed catalog or manifest read or a failed proposal is retried every
//! [`RETRY_EVERY`]; the task ends once the quorum has decided.

use std::sync::Arc;
use std::time::Duration;

use strata_metadata::command::{PartitionAssignment, RestoredTopic};
use strata_metadata::ids::{LeaderEpoch, Uuid128};
use strata_metadata::{Command, MetadataState, Response};
use strata_tiering::catalog;
use strata_tiering::{PartitionId, PartitionManifest};
use tokio_util::sync::CancellationToken;

use super::ClusterControl;
use crate::tiering::Tiering;

/// Manifests read at once while a restore is prepared (each is one GET of a small object:
/// the time is the store's latency, not its bandwidth).
const MANIFEST_READS: usize = 16;

/// How often an undecided restore is tried again.
const RETRY_EVERY: Duration = Duration::from_secs(1);

/// Runs until the quorum has decided the restore (or `cancel`).
pub async fn run(control: Arc<ClusterControl>, tiering: Arc<Tiering>, cancel: CancellationToken) {
    // Each distinct wait or failure is logged once, not every second.
    let mut last = String::new();
    loop {
        match try_restore(&control, &tiering).await {
            Ok(Outcome::Decided) => return,
            Ok(Outcome::NotController) => {}
            Ok(Outcome::Waiting(why)) => {
                if why != last {
                    tracing::info!("cluster restore from the bucket: {why}");
                    last = why;
                }
            }
            Err(e) => {
                let why = e.to_string();
                if why != last {
                    tracing::warn!(error = %why, "cluster restore from the bucket failed; retrying every second");
                    last = why;
                }
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(RETRY_EVERY) => {}
        }
    }
}

enum Outcome {
    Decided,
    NotController,
    Waiting(String),
}

async fn try_restore(control: &ClusterControl, tiering: &Tiering) -> anyhow::Result<Outcome> {
    let node = control.node()?;
    let state = node.state();
    if state.restored_from_bucket().is_some() {
        return Ok(Outcome::Decided);
    }
    if control.active_controller() != Some(control.broker_id()) {
        return Ok(Outcome::NotController);
    }
    let catalog = catalog::load(&tiering.store)
        .await?
        .map(|(c, _)| c)
        .unwrap_or_default();
    let needed = catalog
        .topics
        .values()
        .map(|t| t.replication_factor.max(1) as usize)
        .max()
        .unwrap_or(0);
    let usable = strata_metadata::placement::usable_brokers(&state).len();
    if usable < needed {
        return Ok(Outcome::Waiting(format!(
            "waiting for {needed} unfenced brokers to place the catalog's {} topics ({usable} so far)",
            catalog.topics.len()
        )));
    }
    let mut topics = Vec::with_capacity(catalog.topics.len());
    for (name, entry) in &catalog.topics {
        let id = Uuid128::from_bytes(*entry.topic_id.as_bytes());
        let count = u32::try_from(entry.partitions).unwrap_or(0);
        let rf = u16::try_from(entry.replication_factor.max(1)).unwrap_or(1);
        let partitions: Vec<PartitionAssignment> = super::admin::place(&state, id, count, rf, 0)?;
        // The manifests are read MANIFEST_READS at a time (one GET each, in order).
        use futures::{StreamExt, TryStreamExt};
        let leader_epochs: Vec<LeaderEpoch> = futures::stream::iter(0..entry.partitions)
            .map(|index| {
                let pid = PartitionId {
                    topic: name.clone(),
                    topic_id: entry.topic_id,
                    partition: index,
                };
                async move { strata_tiering::manifest::load(&tiering.store, &pid).await }
            })
            .buffered(MANIFEST_READS)
            .map(|loaded| {
                loaded.map(|m| LeaderEpoch(m.map_or(0, |m| next_leader_epoch(&m.manifest))))
            })
            .try_collect()
            .await?;
        topics.push(RestoredTopic {
            name: name.clone(),
            id,
            partitions,
            leader_epochs,
            configs: entry.configs.clone(),
        });
    }
    let command = Command::RestoreFromBucket {
        topics,
        next_producer_id: catalog.producer_id_block_end,
    };
    match control.propose(command).await?.0 {
        Response::BucketRestore {
            created,
            refused,
            newly_decided,
        } => {
            match (refused, newly_decided) {
                (None, _) => tracing::info!(
                    topics = created.len(),
                    next_producer_id = catalog.producer_id_block_end,
                    "restored the cluster's topics from the bucket catalog"
                ),
                (Some(why), true) => {
                    tracing::warn!("not restoring the cluster from the bucket: {why}")
                }
                (Some(_), false) => {}
            }
            Ok(Outcome::Decided)
        }
        other => anyhow::bail!("unexpected metadata response {other:?}"),
    }
}

/// The first leader epoch of a restored partition: above every epoch its remote data was
/// written in (the manifest's writers and the epochs inside its segments).
pub fn next_leader_epoch(m: &PartitionManifest) -> i32 {
    let written = m
        .segments
        .iter()
        .flat_map(|s| std::iter::once(s.leader_epoch).chain(s.epochs.iter().map(|e| e.0)))
        .chain(std::iter::once(m.leader_epoch))
        .max()
        .unwrap_or(-1);
    written.saturating_add(1).max(0)
}

/// Whether this broker must not create coordinator topics yet: the restore is enabled and the
/// quorum has not decided it.
pub fn pending(enabled: bool, state: &MetadataState) -> bool {
    enabled && state.restored_from_bucket().is_none()
}
