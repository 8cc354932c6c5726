//! Metadata-changing admin operations in cluster mode: topics, partitions, topic configs and
//! producer ids go through the quorum. Each is validated as on a single node, proposed, and
//! answered once the committed change has reached the local broker (so the client's next
//! request to this broker sees it).
//!
//! These are called from the blocking pool (the API handlers run catalog changes there); they
//! wait for the async proposal through a channel, bounded by the propose timeout plus the sync
//! wait.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use strata_metadata::command::{ConfigResource, PartitionAssignment};
use strata_metadata::ids::Uuid128;
use strata_metadata::placement::{self, PlacementError, PlacementSeed};
use strata_metadata::{Command, MetadataState};
use uuid::Uuid;

use super::{records, ClusterControl, ClusterError};
use crate::broker::{Broker, MetadataQuorum, Topic, TopicError};
use crate::coordinator::internal_topics::InternalTopicSpec;
use crate::quota::QuotaRecord;
use crate::security::acl::AclBinding;
use crate::security::scram::{Credential, Mechanism};

/// How long an admin request waits for a committed change to reach this broker.
const SYNC_WAIT: Duration = Duration::from_secs(15);

/// Runs `future` on the runtime and waits for it from a blocking-pool thread.
pub(super) fn wait_for<T: Send + 'static>(
    future: impl Future<Output = Result<T, ClusterError>> + Send + 'static,
) -> Result<T, ClusterError> {
    let handle = tokio::runtime::Handle::try_current().map_err(|_| ClusterError::Stopped)?;
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    // Bounded by the propose timeout and SYNC_WAIT; the caller waits for it.
    handle.spawn(async move {
        let _ = tx.send(future.await);
    });
    rx.recv().unwrap_or(Err(ClusterError::Stopped))
}

fn placement_error(e: PlacementError, unfenced: usize) -> TopicError {
    match e {
        PlacementError::InvalidReplicationFactor { requested, .. } => {
            TopicError::InvalidReplicationFactor(format!(
                "Unable to replicate the partition {requested} time(s): The target replication factor of {requested} cannot be reached because only {unfenced} broker(s) are registered."
            ))
        }
        PlacementError::InvalidPartitions => TopicError::InvalidPartitions(
            "Number of partitions must be larger than 0.".into(),
        ),
        PlacementError::NoEligibleBroker { partition } => TopicError::InvalidReplicaAssignment(
            format!("No eligible broker for partition {partition}."),
        ),
    }
}

/// The replicas of `partitions` new partitions numbered from `first`.
pub(super) fn place(
    state: &MetadataState,
    topic_id: Uuid128,
    partitions: u32,
    replication_factor: u16,
    first: u32,
) -> Result<Vec<PartitionAssignment>, TopicError> {
    let brokers = placement::usable_brokers(state);
    placement::place_replicas(
        &brokers,
        partitions,
        replication_factor,
        first,
        PlacementSeed::from_topic_id(topic_id),
    )
    .map_err(|e| placement_error(e, brokers.len()))
}

/// How long an admin request naming a topic this node does not know yet waits for it (the
/// topic may have just been created through another broker, a few entries ahead).
const TOPIC_CATCH_UP: Duration = Duration::from_millis(1000);

/// The metadata state, once it has topic `name` (bounded by [`TOPIC_CATCH_UP`]).
pub(super) fn state_with_topic(
    control: &Arc<ClusterControl>,
    name: &str,
) -> Result<Arc<MetadataState>, TopicError> {
    let node = control.node()?;
    let state = node.state();
    if state.topic_by_name(name).is_some() {
        return Ok(state);
    }
    let mut images = node.subscribe();
    let name = name.to_string();
    let found = wait_for(async move {
        let waited = tokio::time::timeout(
            TOPIC_CATCH_UP,
            images.wait_for(|i| i.state.topic_by_name(&name).is_some()),
        )
        .await;
        let state = match waited {
            Ok(Ok(image)) => Some(image.state.clone()),
            _ => None,
        };
        Ok(state)
    })?;
    found.ok_or(TopicError::Unknown)
}

/// The number of unfenced brokers (the most replicas a new partition can have).
pub fn unfenced_brokers(control: &ClusterControl) -> usize {
    control
        .node()
        .map(|n| placement::usable_brokers(&n.state()).len())
        .unwrap_or(0)
}

/// Whether the metadata has a topic of that name (the local catalog may lag behind).
pub fn topic_exists(control: &ClusterControl, name: &str) -> bool {
    control
        .node()
        .is_ok_and(|n| n.state().topic_by_name(name).is_some())
}

/// Checks explicit replica assignments (CreateTopics `assignments`): every partition names
/// the same number of distinct, registered brokers.
pub fn check_assignments(control: &ClusterControl, assignments: &[Vec<i32>]) -> Result<(), String> {
    let node = control.node().map_err(|e| e.to_string())?;
    let state = node.state();
    let size = assignments.first().map_or(0, Vec::len);
    for (partition, replicas) in assignments.iter().enumerate() {
        if replicas.is_empty() || replicas.len() != size {
            return Err(format!(
                "All partitions should have the same number of replicas; partition {partition} has {}.",
                replicas.len()
            ));
        }
        let mut seen = replicas.clone();
        seen.sort_unstable();
        seen.dedup();
        if seen.len() != replicas.len() {
            return Err(format!(
                "Duplicate brokers not allowed in replica assignment: {replicas:?} for partition {partition}."
            ));
        }
        if let Some(unknown) = replicas
            .iter()
            .find(|id| state.broker(strata_metadata::ids::BrokerId(**id)).is_none())
        {
            return Err(format!(
                "Unknown broker {unknown} in the replica assignment of partition {partition}."
            ));
        }
    }
    Ok(())
}

/// Creates a coordinator topic in the quorum unless it exists: returns whether this call
/// created it. Refused with INVALID_REPLICATION_FACTOR while fewer brokers than its
/// replication factor are unfenced.
pub async fn create_internal_topic(
    control: &ClusterControl,
    spec: InternalTopicSpec,
) -> Result<bool, TopicError> {
    let node = control.node()?;
    let state = node.state();
    if state.topic_by_name(spec.name).is_some() {
        return Ok(false);
    }
    let id = Uuid128::from_bytes(*Uuid::new_v4().as_bytes());
    let partitions = place(
        &state,
        id,
        u32::try_from(spec.partitions).unwrap_or(0),
        u16::try_from(spec.replication_factor).unwrap_or(0),
        0,
    )?;
    let command = Command::CreateTopic {
        name: spec.name.to_string(),
        id,
        partitions,
        configs: spec.configs,
    };
    match control.propose(command).await {
        Ok(_) => Ok(true),
        // Another broker created it first.
        Err(ClusterError::Propose(strata_metadata::ProposeError::Rejected(
            strata_metadata::ApplyError::TopicAlreadyExists { .. },
        ))) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// CreateTopic through the quorum; the broker validated the request. `assignments` are the
/// client's explicit replicas (checked with [`check_assignments`]), else placement computes
/// them. Blocking.
pub fn create_topic(
    broker: &Broker,
    control: &Arc<ClusterControl>,
    name: &str,
    partitions: i32,
    replication_factor: i16,
    configs: BTreeMap<String, String>,
    assignments: Option<Vec<Vec<i32>>>,
) -> Result<Arc<Topic>, TopicError> {
    let node = control.node()?;
    let state = node.state();
    if state.topic_by_name(name).is_some() {
        return Err(TopicError::AlreadyExists(name.to_string()));
    }
    if super::restore::pending(control.restores_from_bucket(), &state) {
        // A topic created first would make the quorum refuse the restore.
        return Err(TopicError::Quorum {
            code: strata_metadata::command::kafka_codes::REQUEST_TIMED_OUT,
            message: "the cluster is restoring its topics from the bucket; retry shortly".into(),
        });
    }
    let id = Uuid128::from_bytes(*Uuid::new_v4().as_bytes());
    let assignments = match assignments {
        Some(explicit) => explicit
            .into_iter()
            .map(|replicas| PartitionAssignment {
                replicas: replicas
                    .into_iter()
                    .map(strata_metadata::ids::BrokerId)
                    .collect(),
            })
            .collect(),
        None => place(
            &state,
            id,
            u32::try_from(partitions).unwrap_or(0),
            u16::try_from(replication_factor).unwrap_or(0),
            0,
        )?,
    };
    let command = Command::CreateTopic {
        name: name.to_string(),
        id,
        partitions: assignments,
        configs,
    };
    let c = control.clone();
    wait_for(async move {
        let (_, index) = c.propose(command).await?;
        c.wait_synced(index, SYNC_WAIT).await
    })?;
    broker
        .topic(name)
        .filter(|t| t.id == Uuid::from_bytes(*id.as_bytes()))
        .ok_or_else(|| ClusterError::NotSynced(SYNC_WAIT).into())
}

/// DeleteTopic through the quorum. Blocking.
pub fn delete_topic(control: &Arc<ClusterControl>, name: &str) -> Result<Uuid, TopicError> {
    let id = state_with_topic(control, name)?
        .topic_by_name(name)
        .map(|t| t.id)
        .ok_or(TopicError::Unknown)?;
    let c = control.clone();
    wait_for(async move {
        let (_, index) = c.propose(Command::DeleteTopic { id }).await?;
        c.wait_synced(index, SYNC_WAIT).await
    })?;
    Ok(Uuid::from_bytes(*id.as_bytes()))
}

/// CreatePartitions through the quorum: the new partitions get the client's explicit
/// replicas (`assignments`, one list per new partition), else as many replicas as the topic's
/// first partition, placed round robin. Blocking.
pub fn create_partitions(
    control: &Arc<ClusterControl>,
    name: &str,
    count: i32,
    validate_only: bool,
    assignments: Option<Vec<Vec<i32>>>,
) -> Result<(), TopicError> {
    let state = state_with_topic(control, name)?;
    let topic = state.topic_by_name(name).ok_or(TopicError::Unknown)?;
    let current = topic.partitions.len() as i32;
    if count < current {
        return Err(TopicError::InvalidPartitions(format!(
            "Topic currently has {current} partitions, which is higher than the requested {count}."
        )));
    }
    if count == current {
        return Err(TopicError::InvalidPartitions(format!(
            "Topic already has {current} partitions."
        )));
    }
    // Before placement, which sizes its work by the count.
    crate::broker::check_partition_count(count)?;
    let replication_factor = topic
        .partitions
        .first()
        .map(|p| p.replicas.len())
        .unwrap_or(1);
    let assignments = match assignments {
        Some(explicit) => {
            if explicit.len() as i32 != count - current {
                return Err(TopicError::InvalidReplicaAssignment(format!(
                    "Increasing the number of partitions by {} but {} assignments provided.",
                    count - current,
                    explicit.len()
                )));
            }
            if explicit.iter().any(|r| r.len() != replication_factor) {
                return Err(TopicError::InvalidReplicaAssignment(format!(
                    "Inconsistent replication factor between partitions, partition 0 has {replication_factor}."
                )));
            }
            check_assignments(control, &explicit).map_err(TopicError::InvalidReplicaAssignment)?;
            explicit
                .into_iter()
                .map(|replicas| PartitionAssignment {
                    replicas: replicas
                        .into_iter()
                        .map(strata_metadata::ids::BrokerId)
                        .collect(),
                })
                .collect()
        }
        None => place(
            &state,
            topic.id,
            (count - current) as u32,
            u16::try_from(replication_factor).unwrap_or(u16::MAX),
            current as u32,
        )?,
    };
    if validate_only {
        return Ok(());
    }
    let command = Command::CreatePartitions {
        topic_id: topic.id,
        partitions: assignments,
    };
    let c = control.clone();
    wait_for(async move {
        let (_, index) = c.propose(command).await?;
        c.wait_synced(index, SYNC_WAIT).await
    })?;
    Ok(())
}

/// Replaces the dynamic configs of a broker resource (`""`: the cluster-wide default, else a
/// node id) through the quorum (validated by the caller). Every broker applies them. Blocking.
pub fn set_broker_configs(
    control: &Arc<ClusterControl>,
    resource: &str,
    configs: BTreeMap<String, String>,
) -> Result<(), ClusterError> {
    let resource = if resource.is_empty() {
        ConfigResource::ClusterDefault
    } else {
        let id = resource.parse::<i32>().map_err(|_| {
            ClusterError::UnexpectedResponse(format!("invalid broker resource {resource:?}"))
        })?;
        ConfigResource::Broker(strata_metadata::ids::BrokerId(id))
    };
    let current = control.node()?.state().configs(&resource).cloned();
    replace_configs(control, resource, &current.unwrap_or_default(), configs)
}

/// Replaces a group's configs through the quorum (validated by the caller). Every broker
/// applies them. Blocking.
pub fn set_group_configs(
    control: &Arc<ClusterControl>,
    group: &str,
    configs: BTreeMap<String, String>,
) -> Result<(), ClusterError> {
    let resource = ConfigResource::Group(group.to_string());
    let current = control.node()?.state().configs(&resource).cloned();
    replace_configs(control, resource, &current.unwrap_or_default(), configs)
}

/// Makes `resource`'s configs `configs` where the quorum holds `current`: one SetConfigs
/// with the keys that change or go (nothing when none do), then waits until this broker
/// has synced it. Blocking.
fn replace_configs(
    control: &Arc<ClusterControl>,
    resource: ConfigResource,
    current: &BTreeMap<String, String>,
    configs: BTreeMap<String, String>,
) -> Result<(), ClusterError> {
    let mut changes: BTreeMap<String, Option<String>> = current
        .keys()
        .filter(|k| !configs.contains_key(*k))
        .map(|k| (k.clone(), None))
        .collect();
    for (k, v) in configs {
        if current.get(&k) != Some(&v) {
            changes.insert(k, Some(v));
        }
    }
    if changes.is_empty() {
        return Ok(());
    }
    let command = Command::SetConfigs { resource, changes };
    let c = control.clone();
    wait_for(async move {
        let (_, index) = c.propose(command).await?;
        c.wait_synced(index, SYNC_WAIT).await
    })
}

/// Replaces a topic's config overrides through the quorum (validated by the caller). Every
/// broker applies them to its local topic. Blocking.
pub fn set_topic_configs(
    control: &Arc<ClusterControl>,
    name: &str,
    overrides: BTreeMap<String, String>,
) -> Result<(), TopicError> {
    let state = state_with_topic(control, name)?;
    let topic = state.topic_by_name(name).ok_or(TopicError::Unknown)?;
    let resource = ConfigResource::Topic(name.to_string());
    replace_configs(control, resource, &topic.configs, overrides)?;
    Ok(())
}

/// A producer id from this broker's committed block. Blocking.
pub fn allocate_producer_id(control: &Arc<ClusterControl>) -> Result<i64, ClusterError> {
    let c = control.clone();
    wait_for(async move { ClusterControl::allocate_producer_id(&c).await })
}

/// The broker's catalog changes, proposed to the quorum (cluster mode).
impl MetadataQuorum for Arc<ClusterControl> {
    fn topic_exists(&self, name: &str) -> bool {
        topic_exists(self, name)
    }

    fn unfenced_brokers(&self) -> usize {
        unfenced_brokers(self)
    }

    fn active_controller(&self) -> Option<i32> {
        ClusterControl::active_controller(self)
    }

    fn create_topic(
        &self,
        broker: &Broker,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        configs: BTreeMap<String, String>,
    ) -> Result<Arc<Topic>, TopicError> {
        create_topic(
            broker,
            self,
            name,
            partitions,
            replication_factor,
            configs,
            None,
        )
    }

    fn delete_topic(&self, name: &str) -> Result<Uuid, TopicError> {
        delete_topic(self, name)
    }

    fn create_partitions(
        &self,
        name: &str,
        count: i32,
        validate_only: bool,
    ) -> Result<(), TopicError> {
        create_partitions(self, name, count, validate_only, None)
    }

    fn set_topic_configs(
        &self,
        name: &str,
        overrides: BTreeMap<String, String>,
    ) -> Result<(), TopicError> {
        set_topic_configs(self, name, overrides)
    }

    fn set_broker_configs(
        &self,
        resource: &str,
        configs: BTreeMap<String, String>,
    ) -> std::io::Result<()> {
        set_broker_configs(self, resource, configs).map_err(std::io::Error::other)
    }

    fn set_group_configs(
        &self,
        group: &str,
        configs: BTreeMap<String, String>,
    ) -> std::io::Result<()> {
        set_group_configs(self, group, configs).map_err(std::io::Error::other)
    }

    fn allocate_producer_id(&self) -> std::io::Result<i64> {
        allocate_producer_id(self).map_err(std::io::Error::other)
    }

    fn alter_scram(
        &self,
        changes: &[(String, Mechanism, Option<Credential>)],
    ) -> std::io::Result<()> {
        let commands = changes
            .iter()
            .map(|(user, m, cred)| records::scram(user, m.name(), cred.as_ref()))
            .collect();
        records::write(self, commands).map_err(std::io::Error::other)
    }

    fn create_acls(&self, acls: &[AclBinding]) -> std::io::Result<()> {
        let commands = acls.iter().map(records::put_acl).collect();
        records::write(self, commands).map_err(std::io::Error::other)
    }

    fn delete_acls(&self, acls: &[&AclBinding]) -> std::io::Result<()> {
        let commands = acls.iter().map(|a| records::delete_acl(a)).collect();
        records::write(self, commands).map_err(std::io::Error::other)
    }

    fn delegation_token(&self, change: &crate::broker::TokenChange) -> std::io::Result<()> {
        records::write(self, vec![records::delegation_token(change)]).map_err(std::io::Error::other)
    }

    fn set_features(&self, levels: &crate::features::FinalizedLevels) -> std::io::Result<()> {
        records::write(self, vec![records::features(levels)]).map_err(std::io::Error::other)
    }

    fn alter_client_quotas(
        &self,
        set: &[QuotaRecord],
        removed: &[QuotaRecord],
    ) -> std::io::Result<()> {
        let commands = set
            .iter()
            .map(|r| records::quota(&r.entity, &r.values))
            .chain(
                removed
                    .iter()
                    .map(|r| records::quota(&r.entity, &BTreeMap::new())),
            )
            .collect();
        records::write(self, commands).map_err(std::io::Error::other)
    }
}
