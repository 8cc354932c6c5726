//! The metadata-sync task: makes the local broker follow every applied metadata image.
//!
//! For each image it sets the cluster view (registered brokers that are unfenced, and this
//! broker), deletes local topics the metadata no longer has (or has under another id),
//! applies the partition states that changed since the previous image (creating local logs
//! for new topics and partitions), the ACLs, SCRAM credentials and client quotas, the dynamic
//! broker configs and the topic config overrides.
//!
//! Invariant: nothing is synced before this broker's own registration (this incarnation) is
//! applied locally. The registration is committed after everything this broker saw before a
//! restart, so an image holding it is never older than the local catalog: a topic is never
//! deleted locally because of a stale image. Coordinator topics are never deleted here: the
//! quorum creates them and refuses their deletion, and one it does not have may hold a single
//! node's coordinator state from before cluster mode.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use strata_metadata::command::ConfigResource;
use strata_metadata::state::PartitionState;
use strata_metadata::MetadataState;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::records::{RawRecords, SecurityRecords};
use super::ClusterControl;
use crate::broker::{is_internal_topic, Broker};
use crate::replication::{BrokerEndpoint, ClusterBroker, PartitionLeadership};
use crate::tiering::Tiering;

/// What was last applied to the local broker.
#[derive(Default)]
struct Applied {
    brokers: Vec<ClusterBroker>,
    partitions: HashMap<(Uuid, u32), PartitionState>,
    /// ACL, SCRAM and quota records (`None` before the first sync).
    security: Option<RawRecords>,
    /// Dynamic broker configs by resource name (`None` before the first sync).
    dynamic_configs: Option<BTreeMap<String, BTreeMap<String, String>>>,
    /// The finalized feature levels (`None` before the first sync).
    features: Option<crate::features::FinalizedLevels>,
    /// Group configs by group id (`None` before the first sync).
    group_configs: Option<BTreeMap<String, BTreeMap<String, String>>>,
    /// A partition state was held back (its seed from the bucket failed): sync again soon.
    retry: bool,
}

/// How soon a sync that held a partition state back runs again.
const RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// Follows the metadata images until `cancel`.
pub async fn run(
    control: Arc<ClusterControl>,
    broker: Arc<Broker>,
    tiering: Option<Arc<Tiering>>,
    cancel: CancellationToken,
) {
    let Ok(node) = control.node() else { return };
    let mut images = node.subscribe();
    drop(node);
    let mut applied = Applied::default();
    loop {
        let image = images.borrow_and_update().clone();
        let registered = image
            .state
            .broker(control.broker_id)
            .is_some_and(|b| b.incarnation == control.incarnation);
        if registered {
            let b = broker.clone();
            let c = control.clone();
            let state = image.state.clone();
            let t = tiering.clone();
            match tokio::task::spawn_blocking(move || {
                sync_once(&b, &c, t.as_deref(), &state, &mut applied);
                applied
            })
            .await
            {
                Ok(a) => applied = a,
                Err(e) => {
                    tracing::error!(error = %e, "metadata sync task failed");
                    applied = Applied::default();
                }
            }
            control.mark_synced(image.applied_index.unwrap_or(0));
        }
        let retry = std::mem::take(&mut applied.retry);
        tokio::select! {
            _ = cancel.cancelled() => return,
            changed = images.changed() => if changed.is_err() { return },
            _ = tokio::time::sleep(RETRY_AFTER), if retry => {}
        }
    }
}

fn uuid(id: strata_metadata::ids::TopicId) -> Uuid {
    Uuid::from_bytes(*id.as_bytes())
}

/// Brings the local broker in line with `state`. Blocking.
fn sync_once(
    broker: &Broker,
    control: &ClusterControl,
    tiering: Option<&Tiering>,
    state: &MetadataState,
    applied: &mut Applied,
) {
    // 1. The cluster view: Kafka's Metadata lists unfenced brokers; this broker is always in
    //    its own view.
    let brokers: Vec<ClusterBroker> = state
        .brokers()
        .filter(|b| !b.fenced || b.id == control.broker_id)
        .map(|b| ClusterBroker {
            id: b.id.0,
            rack: b.rack.clone(),
            endpoints: b
                .endpoints
                .iter()
                .map(|e| BrokerEndpoint {
                    listener: e.listener.clone(),
                    host: e.host.clone(),
                    port: e.port,
                })
                .collect(),
        })
        .collect();
    if brokers != applied.brokers {
        broker.set_cluster_brokers(brokers.clone());
        applied.brokers = brokers;
    }

    // 1b. The producer-id high-water mark, for the bucket catalog.
    broker.note_quorum_producer_ids(state.next_producer_id().0);

    // 2. Topics deleted (or re-created under a new id) in the metadata.
    for topic in broker.topics() {
        if is_internal_topic(&topic.name) {
            continue;
        }
        let current = state.topic_by_name(&topic.name).map(|t| uuid(t.id));
        if current != Some(topic.id) {
            match broker.delete_topic_local(&topic.name) {
                Ok(_) => {
                    tracing::info!(topic = %topic.name, "deleted a topic the metadata no longer has")
                }
                Err(e) => {
                    tracing::error!(topic = %topic.name, error = %e, "cannot delete a local topic")
                }
            }
            applied.partitions.retain(|(id, _), _| *id != topic.id);
        }
    }

    // 3. Partition states that changed.
    let mut changed = Vec::new();
    let mut keys = Vec::new();
    for topic in state.topics() {
        let topic_id = uuid(topic.id);
        for (index, p) in topic.partitions.iter().enumerate() {
            let key = (topic_id, index as u32);
            if applied.partitions.get(&key) == Some(p) {
                continue;
            }
            changed.push(PartitionLeadership {
                topic: topic.name.clone(),
                topic_id,
                partition: index as i32,
                leader: p.leader.map(|b| b.0),
                leader_epoch: p.leader_epoch,
                replicas: p.replicas.iter().map(|b| b.0).collect(),
                isr: p.isr.iter().map(|b| b.0).collect(),
                partition_epoch: p.partition_epoch.0,
            });
            keys.push((key, p.clone()));
        }
    }
    // New topics are created with their configs before their partitions are seeded and
    // led: brokers answer DescribeConfigs from them.
    let mut new_topics: Vec<&str> = changed
        .iter()
        .map(|c| c.topic.as_str())
        .filter(|t| broker.topic(t).is_none())
        .collect();
    new_topics.dedup();
    for name in new_topics {
        let Some(record) = state.topic_by_name(name) else {
            continue;
        };
        let created = broker
            .ensure_topic(name, uuid(record.id), record.partitions.len() as i32)
            .and_then(|_| {
                broker
                    .set_topic_configs_local(name, record.configs.clone())
                    .map_err(Into::into)
            });
        if let Err(e) = created {
            tracing::error!(topic = %name, error = %e, "cannot create a local topic");
        }
    }
    if let Some(t) = tiering {
        seed_new_leaders(broker, control, t, state, &mut changed, &mut keys, applied);
    }
    if !changed.is_empty() {
        match broker.apply_partition_states(changed) {
            Ok(()) => applied.partitions.extend(keys),
            // Applied again with the next image.
            Err(e) => tracing::error!(error = %e, "applying partition states failed"),
        }
    }

    // 4. ACLs, SCRAM credentials and client quotas, replaced whenever they change.
    if !applied.security.as_ref().is_some_and(|r| r.matches(state)) {
        let security = RawRecords::of(state);
        match broker.apply_security_records(SecurityRecords::decode(&security)) {
            Ok(()) => applied.security = Some(security),
            Err(e) => tracing::error!(error = %e, "applying ACLs, credentials and quotas failed"),
        }
    }

    // 4b. Finalized feature levels.
    let features = super::records::decode_features(state);
    if applied.features.as_ref() != Some(&features) {
        match broker.apply_feature_levels(features.clone()) {
            Ok(()) => applied.features = Some(features),
            Err(e) => tracing::error!(error = %e, "applying finalized feature levels failed"),
        }
    }

    // 5. Dynamic broker configs ("" = the cluster-wide default, else a node id).
    let mut dynamic: BTreeMap<String, BTreeMap<String, String>> = state
        .brokers()
        .filter_map(|b| {
            let configs = state.configs(&ConfigResource::Broker(b.id))?;
            (!configs.is_empty()).then(|| (b.id.0.to_string(), configs.clone()))
        })
        .collect();
    if let Some(cluster) = state
        .configs(&ConfigResource::ClusterDefault)
        .filter(|c| !c.is_empty())
    {
        dynamic.insert(String::new(), cluster.clone());
    }
    if applied.dynamic_configs.as_ref() != Some(&dynamic) {
        match broker.replace_dynamic_broker_configs(dynamic.clone()) {
            Ok(()) => applied.dynamic_configs = Some(dynamic),
            Err(e) => tracing::error!(error = %e, "applying dynamic broker configs failed"),
        }
    }

    // 5b. Group configs, replaced whenever they change.
    let groups = state.group_configs();
    if applied.group_configs.as_ref() != Some(groups) {
        match broker.replace_group_configs(groups.clone()) {
            Ok(()) => applied.group_configs = Some(groups.clone()),
            Err(e) => tracing::error!(error = %e, "applying group configs failed"),
        }
    }

    // 6. Topic config overrides.
    for topic in state.topics() {
        let Some(local) = broker.topic(&topic.name) else {
            continue;
        };
        if local.overrides != topic.configs {
            if let Err(e) = broker.set_topic_configs_local(&topic.name, topic.configs.clone()) {
                tracing::error!(topic = %topic.name, error = %e, "cannot apply topic configs");
            }
        }
    }
}

/// Seeds whose bucket reads run at once.
const SEED_READS: usize = 8;

/// Before this broker leads a tiered partition whose local log is empty (a cluster rebuilt
/// from its bucket, or a leader elected with no data), its log restarts at the remote log's
/// end with the partition's leader epochs and producer state ([`Tiering::seed`]), so the
/// leader never appends at offsets the bucket already holds. Only partitions past their first
/// leader epoch: a new partition has nothing in the bucket. A state whose seed fails is held
/// back (not applied, and retried soon), never applied over an empty log.
fn seed_new_leaders(
    broker: &Broker,
    control: &ClusterControl,
    tiering: &Tiering,
    state: &MetadataState,
    changed: &mut Vec<PartitionLeadership>,
    keys: &mut Vec<((Uuid, u32), PartitionState)>,
    applied: &mut Applied,
) {
    let me = control.broker_id();
    let mut held = Vec::new();
    let mut wanted = Vec::new();
    for (i, s) in changed.iter().enumerate() {
        if s.leader != Some(me) || s.leader_epoch.0 <= 0 {
            continue;
        }
        let Some(record) = state.topic_by_name(&s.topic) else {
            continue;
        };
        if !broker.topic_config(&record.configs).remote_storage_enable {
            continue;
        }
        let count = record.partitions.len() as i32;
        let partition = match broker.ensure_topic(&s.topic, s.topic_id, count) {
            Ok(t) => t.partitions.get(s.partition as usize).cloned(),
            Err(e) => {
                tracing::warn!(topic = %s.topic, error = %e, "cannot create a local topic to seed");
                None
            }
        };
        let Some(p) = partition else { continue };
        // A partition this broker already leads has been served from its log as it is.
        if (p.is_replicated() && p.is_leader()) || !p.wants_seed() {
            continue;
        }
        wanted.push((i, s, p));
    }
    // What each seed needs from the bucket is read SEED_READS partitions at a time (a
    // rebuilt cluster's leaders all seed at once); each log is then seeded in turn.
    use futures::StreamExt;
    let fetched = tokio::runtime::Handle::current().block_on(
        futures::stream::iter(wanted)
            .map(|(i, s, p)| async move {
                let dir = p.dir();
                let seed = tiering.seed(&s.topic, s.topic_id, s.partition, &dir).await;
                (i, s, p, seed)
            })
            .buffer_unordered(SEED_READS)
            .collect::<Vec<_>>(),
    );
    for (i, s, p, seed) in fetched {
        let seeded = seed.and_then(|seed| match seed {
            Some(seed) => Ok(p.seed_from_remote(&seed)?),
            None => Ok(false),
        });
        if let Err(e) = seeded {
            tracing::warn!(topic = %s.topic, partition = s.partition, error = %e, "cannot seed the local log from the bucket before leading; will retry");
            held.push(i);
        }
    }
    held.sort_unstable();
    if !held.is_empty() {
        applied.retry = true;
        for i in held.into_iter().rev() {
            changed.remove(i);
            keys.remove(i);
        }
    }
}
