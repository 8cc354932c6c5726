//! The metadata state machine: brokers, topics and their ids, partition assignments with
//! leader, leader epoch, ISR and partition epoch, dynamic configs, the producer-id counter,
//! and opaque ACL/SCRAM/quota records.
//!
//! Invariants, kept by [`MetadataState::apply`]:
//! - Apply is deterministic: the same state and command give the same result and state on
//!   every node. Iteration orders are those of `BTreeMap`s; time only comes in commands.
//! - A rejected command changes nothing: every branch validates fully before it mutates.
//! - Topic names and ids are unique; `topic_ids` is exactly the inverse of `topics`.
//! - A partition's ISR is a non-empty subset of its replicas without duplicates; its leader,
//!   when there is one, is in the ISR; its partition epoch grows by one on every change and
//!   its leader epoch grows whenever the leader changes.
//! - Producer-id blocks never overlap: the counter only moves forward.
//! - A partition's `adding_replicas` and `removing_replicas` are disjoint subsets of its
//!   replicas, both empty when no reassignment is in progress ([`crate::reassignment`]).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::command::{
    ApplyError, Command, CommandResult, ConfigResource, ElectionType, Endpoint,
    PartitionAssignment, ProducerIdBlock, RecordKind, Response, MAX_PRODUCER_ID_BLOCK,
};
use crate::ids::{
    BrokerEpoch, BrokerId, LeaderEpoch, PartitionEpoch, ProducerId, TopicId, Uuid128,
};
use crate::placement::{self, Election};
use crate::reassignment::{self, PartitionChange, ReassignmentReplicas};

/// Kafka's limit on topic name length.
const MAX_TOPIC_NAME_LEN: usize = 249;
/// Kafka partition ids are `int32`.
const MAX_PARTITIONS_PER_TOPIC: usize = i32::MAX as usize;

/// A registered broker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerRegistration {
    pub id: BrokerId,
    pub incarnation: Uuid128,
    pub epoch: BrokerEpoch,
    pub rack: Option<String>,
    pub endpoints: Vec<Endpoint>,
    /// A fenced broker leads no partition and may not join an ISR.
    pub fenced: bool,
    /// The newest timestamp from its registration or heartbeats.
    pub last_heartbeat_ms: i64,
}

/// One partition's replicas and leadership.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionState {
    pub replicas: Vec<BrokerId>,
    pub isr: Vec<BrokerId>,
    /// `None` while the partition is offline (Kafka's leader `-1`).
    pub leader: Option<BrokerId>,
    pub leader_epoch: LeaderEpoch,
    pub partition_epoch: PartitionEpoch,
    /// Replicas an ongoing reassignment adds (Kafka's `addingReplicas`); empty when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub adding_replicas: Vec<BrokerId>,
    /// Replicas an ongoing reassignment removes (Kafka's `removingReplicas`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removing_replicas: Vec<BrokerId>,
}

impl PartitionState {
    /// Whether a reassignment is in progress.
    pub fn is_reassigning(&self) -> bool {
        !self.adding_replicas.is_empty() || !self.removing_replicas.is_empty()
    }
}

/// A topic: partition `i` is `partitions[i]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicRecord {
    pub id: TopicId,
    pub name: String,
    pub partitions: Vec<PartitionState>,
    /// Topic-level config overrides (Kafka names: `retention.ms`, `cleanup.policy`, ...).
    pub configs: BTreeMap<String, String>,
}

/// The replicated cluster metadata. Every node holds an identical copy at each applied index.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetadataState {
    brokers: BTreeMap<BrokerId, BrokerRegistration>,
    topics: BTreeMap<TopicId, TopicRecord>,
    topic_ids: BTreeMap<String, TopicId>,
    broker_configs: BTreeMap<BrokerId, BTreeMap<String, String>>,
    cluster_configs: BTreeMap<String, String>,
    records: BTreeMap<RecordKind, BTreeMap<String, Vec<u8>>>,
    next_producer_id: i64,
}

impl MetadataState {
    pub fn new() -> Self {
        Self::default()
    }

    // ----- reads -----

    pub fn broker(&self, id: BrokerId) -> Option<&BrokerRegistration> {
        self.brokers.get(&id)
    }

    /// All registered brokers, by id.
    pub fn brokers(&self) -> impl Iterator<Item = &BrokerRegistration> {
        self.brokers.values()
    }

    /// Registered and not fenced: may lead partitions and join ISRs.
    pub fn is_usable(&self, id: BrokerId) -> bool {
        self.brokers.get(&id).is_some_and(|b| !b.fenced)
    }

    /// Unfenced brokers whose newest heartbeat is more than `session_timeout_ms` before
    /// `now_ms`: the controller fences them (and then re-elects their partitions).
    pub fn brokers_with_expired_session(
        &self,
        now_ms: i64,
        session_timeout_ms: i64,
    ) -> Vec<BrokerId> {
        self.brokers
            .values()
            .filter(|b| {
                !b.fenced && now_ms.saturating_sub(b.last_heartbeat_ms) > session_timeout_ms
            })
            .map(|b| b.id)
            .collect()
    }

    pub fn topic(&self, id: TopicId) -> Option<&TopicRecord> {
        self.topics.get(&id)
    }

    pub fn topic_by_name(&self, name: &str) -> Option<&TopicRecord> {
        self.topic_ids.get(name).and_then(|id| self.topics.get(id))
    }

    /// All topics, by id.
    pub fn topics(&self) -> impl Iterator<Item = &TopicRecord> {
        self.topics.values()
    }

    pub fn partition(&self, topic_id: TopicId, partition: u32) -> Option<&PartitionState> {
        self.topics
            .get(&topic_id)
            .and_then(|t| t.partitions.get(partition as usize))
    }

    /// What an `election` of the partition would decide now (the new leader, and whether it
    /// comes from outside the ISR), or why there is none: Kafka's `electLeader`. Apply runs it
    /// for [`Command::ElectLeader`]; the broker runs it to skip partitions needing no election.
    pub fn leader_election(
        &self,
        topic_id: TopicId,
        partition: u32,
        election: ElectionType,
    ) -> Result<Election, ApplyError> {
        let topic = self
            .topics
            .get(&topic_id)
            .ok_or(ApplyError::UnknownTopicId(topic_id))?;
        let current =
            topic
                .partitions
                .get(partition as usize)
                .ok_or(ApplyError::UnknownPartition {
                    topic_id,
                    partition,
                })?;
        let usable = |b: BrokerId| self.is_usable(b);
        let (replicas, isr) = (&current.replicas, &current.isr);
        let chosen = match election {
            ElectionType::Preferred => {
                let preferred = replicas.first().copied();
                if current.leader.is_some() && current.leader == preferred {
                    return Err(ApplyError::ElectionNotNeeded {
                        topic_id,
                        partition,
                    });
                }
                match preferred.filter(|p| isr.contains(p) && usable(*p)) {
                    Some(p) => Election {
                        leader: Some(p),
                        unclean: false,
                    },
                    None => placement::elect_leader(replicas, isr, current.leader, usable, false),
                }
            }
            ElectionType::Unclean => {
                if current.leader.is_some() {
                    return Err(ApplyError::ElectionNotNeeded {
                        topic_id,
                        partition,
                    });
                }
                placement::elect_leader(replicas, isr, None, usable, true)
            }
        };
        if chosen.leader.is_none() || chosen.leader == current.leader {
            return Err(match election {
                ElectionType::Preferred => ApplyError::PreferredLeaderNotAvailable {
                    topic_id,
                    partition,
                },
                ElectionType::Unclean => ApplyError::EligibleLeadersNotAvailable {
                    topic_id,
                    partition,
                },
            });
        }
        Ok(chosen)
    }

    /// The dynamic config entries set on a resource (empty when none).
    pub fn configs(&self, resource: &ConfigResource) -> Option<&BTreeMap<String, String>> {
        match resource {
            ConfigResource::Topic(name) => self.topic_by_name(name).map(|t| &t.configs),
            ConfigResource::Broker(id) => self.broker_configs.get(id),
            ConfigResource::ClusterDefault => Some(&self.cluster_configs),
        }
    }

    pub fn record(&self, kind: RecordKind, key: &str) -> Option<&[u8]> {
        self.records
            .get(&kind)
            .and_then(|r| r.get(key))
            .map(Vec::as_slice)
    }

    /// All records of one kind, by key.
    pub fn records(&self, kind: RecordKind) -> impl Iterator<Item = (&str, &[u8])> {
        self.records
            .get(&kind)
            .into_iter()
            .flat_map(|r| r.iter().map(|(k, v)| (k.as_str(), v.as_slice())))
    }

    /// The first producer id the next block will start at.
    pub fn next_producer_id(&self) -> ProducerId {
        ProducerId(self.next_producer_id)
    }

    // ----- apply -----

    /// Applies one committed command. `log_index` is the command's index in the metadata log
    /// (used as the broker epoch of a registration).
    pub fn apply(&mut self, log_index: u64, command: &Command) -> CommandResult {
        match command {
            Command::RegisterBroker {
                id,
                incarnation,
                rack,
                endpoints,
                now_ms,
            } => self.register_broker(log_index, *id, *incarnation, rack, endpoints, *now_ms),
            Command::BrokerHeartbeat {
                id,
                broker_epoch,
                now_ms,
            } => {
                let broker = self.broker_with_epoch(*id, *broker_epoch)?;
                broker.last_heartbeat_ms = broker.last_heartbeat_ms.max(*now_ms);
                Ok(Response::HeartbeatAccepted {
                    fenced: broker.fenced,
                })
            }
            Command::FenceBroker { id } => {
                let broker = self
                    .brokers
                    .get_mut(id)
                    .ok_or(ApplyError::BrokerNotRegistered(*id))?;
                let changed = !broker.fenced;
                broker.fenced = true;
                Ok(Response::BrokerFencing {
                    fenced: true,
                    changed,
                })
            }
            Command::UnfenceBroker { id, broker_epoch } => {
                let broker = self.broker_with_epoch(*id, *broker_epoch)?;
                let changed = broker.fenced;
                broker.fenced = false;
                Ok(Response::BrokerFencing {
                    fenced: false,
                    changed,
                })
            }
            Command::CreateTopic {
                name,
                id,
                partitions,
                configs,
            } => self.create_topic(name, *id, partitions, configs),
            Command::DeleteTopic { id } => {
                let topic = self
                    .topics
                    .remove(id)
                    .ok_or(ApplyError::UnknownTopicId(*id))?;
                self.topic_ids.remove(&topic.name);
                Ok(Response::TopicDeleted { name: topic.name })
            }
            Command::CreatePartitions {
                topic_id,
                partitions,
            } => self.create_partitions(*topic_id, partitions),
            Command::AlterPartition {
                topic_id,
                partition,
                leader,
                leader_epoch,
                isr,
                partition_epoch,
            } => self.alter_partition(
                *topic_id,
                *partition,
                *leader,
                *leader_epoch,
                isr,
                *partition_epoch,
            ),
            Command::AlterPartitionReassignment {
                topic_id,
                partition,
                replicas,
                allow_replication_factor_change,
            } => self.alter_partition_reassignment(
                *topic_id,
                *partition,
                replicas.as_deref(),
                *allow_replication_factor_change,
            ),
            Command::ElectLeader {
                topic_id,
                partition,
                election,
            } => self.elect_leader(*topic_id, *partition, *election),
            Command::SetConfigs { resource, changes } => self.set_configs(resource, changes),
            Command::AllocateProducerIds {
                broker,
                broker_epoch,
                count,
            } => {
                if *count == 0 || *count > MAX_PRODUCER_ID_BLOCK {
                    return Err(ApplyError::InvalidProducerIdCount(*count));
                }
                self.broker_with_epoch(*broker, *broker_epoch)?;
                let first = self.next_producer_id;
                self.next_producer_id = first
                    .checked_add(i64::from(*count))
                    .ok_or(ApplyError::ProducerIdsExhausted)?;
                Ok(Response::ProducerIdsAllocated(ProducerIdBlock {
                    broker: *broker,
                    first: ProducerId(first),
                    count: *count,
                }))
            }
            Command::PutRecord { kind, key, value } => {
                if key.is_empty() {
                    return Err(ApplyError::InvalidRecordKey("the key is empty".into()));
                }
                self.records
                    .entry(*kind)
                    .or_default()
                    .insert(key.clone(), value.clone());
                Ok(Response::RecordPut)
            }
            Command::DeleteRecord { kind, key } => {
                let existed = self
                    .records
                    .get_mut(kind)
                    .is_some_and(|r| r.remove(key).is_some());
                Ok(Response::RecordDeleted { existed })
            }
        }
    }

    fn register_broker(
        &mut self,
        log_index: u64,
        id: BrokerId,
        incarnation: Uuid128,
        rack: &Option<String>,
        endpoints: &[Endpoint],
        now_ms: i64,
    ) -> CommandResult {
        if id.0 < 0 {
            return Err(ApplyError::InvalidBrokerId(id.0));
        }
        if let Some(existing) = self.brokers.get(&id) {
            if existing.incarnation != incarnation && !existing.fenced {
                return Err(ApplyError::DuplicateBrokerRegistration {
                    id,
                    incarnation: existing.incarnation,
                });
            }
        }
        // Log indexes stay far below i64::MAX; saturate rather than wrap if one ever did not.
        let epoch = BrokerEpoch(i64::try_from(log_index).unwrap_or(i64::MAX));
        self.brokers.insert(
            id,
            BrokerRegistration {
                id,
                incarnation,
                epoch,
                rack: rack.clone(),
                endpoints: endpoints.to_vec(),
                fenced: true,
                last_heartbeat_ms: now_ms,
            },
        );
        Ok(Response::BrokerRegistered {
            broker_epoch: epoch,
        })
    }

    fn broker_with_epoch(
        &mut self,
        id: BrokerId,
        epoch: BrokerEpoch,
    ) -> Result<&mut BrokerRegistration, ApplyError> {
        let broker = self
            .brokers
            .get_mut(&id)
            .ok_or(ApplyError::BrokerNotRegistered(id))?;
        if broker.epoch != epoch {
            return Err(ApplyError::StaleBrokerEpoch {
                id,
                requested: epoch,
                current: broker.epoch,
            });
        }
        Ok(broker)
    }

    fn create_topic(
        &mut self,
        name: &str,
        id: TopicId,
        assignments: &[PartitionAssignment],
        configs: &BTreeMap<String, String>,
    ) -> CommandResult {
        validate_topic_name(name)?;
        if id.is_zero() {
            return Err(ApplyError::ZeroTopicId);
        }
        if self.topic_ids.contains_key(name) {
            return Err(ApplyError::TopicAlreadyExists { name: name.into() });
        }
        if self.topics.contains_key(&id) {
            return Err(ApplyError::TopicIdInUse(id));
        }
        let unified = unify_collision_chars(name);
        if let Some(existing) = self
            .topic_ids
            .keys()
            .find(|existing| unify_collision_chars(existing) == unified)
        {
            return Err(ApplyError::InvalidTopicName {
                name: name.into(),
                reason: format!(
                    "collides with existing topic {existing:?} ('.' and '_' are interchangeable in metric names)"
                ),
            });
        }
        if assignments.is_empty() {
            return Err(ApplyError::InvalidPartitions(
                "a topic needs at least one partition".into(),
            ));
        }
        if let Some(key) = configs.keys().find(|k| k.is_empty()) {
            return Err(ApplyError::InvalidConfig(format!(
                "empty config name {key:?}"
            )));
        }
        let partitions = self.new_partitions(assignments, None, 0)?;
        let count = partitions.len() as u32;
        self.topic_ids.insert(name.to_owned(), id);
        self.topics.insert(
            id,
            TopicRecord {
                id,
                name: name.to_owned(),
                partitions,
                configs: configs.clone(),
            },
        );
        Ok(Response::TopicCreated {
            id,
            partitions: count,
        })
    }

    fn create_partitions(
        &mut self,
        topic_id: TopicId,
        assignments: &[PartitionAssignment],
    ) -> CommandResult {
        let topic = self
            .topics
            .get(&topic_id)
            .ok_or(ApplyError::UnknownTopicId(topic_id))?;
        if assignments.is_empty() {
            return Err(ApplyError::InvalidPartitions(format!(
                "no partitions to add to topic {:?}",
                topic.name
            )));
        }
        let existing = topic.partitions.len();
        let replication_factor = topic.partitions.first().map(|p| p.replicas.len());
        let partitions = self.new_partitions(assignments, replication_factor, existing)?;
        let topic = self
            .topics
            .get_mut(&topic_id)
            .ok_or(ApplyError::UnknownTopicId(topic_id))?;
        topic.partitions.extend(partitions);
        Ok(Response::PartitionsCreated {
            total: topic.partitions.len() as u32,
        })
    }

    /// Validates assignments for new partitions numbered from `first_partition` and builds
    /// their initial state: ISR = unfenced replicas in replica order, leader = first of them.
    fn new_partitions(
        &self,
        assignments: &[PartitionAssignment],
        replication_factor: Option<usize>,
        first_partition: usize,
    ) -> Result<Vec<PartitionState>, ApplyError> {
        if first_partition.saturating_add(assignments.len()) > MAX_PARTITIONS_PER_TOPIC {
            return Err(ApplyError::InvalidPartitions(format!(
                "a topic has at most {MAX_PARTITIONS_PER_TOPIC} partitions"
            )));
        }
        let replication_factor =
            replication_factor.unwrap_or_else(|| assignments[0].replicas.len());
        let mut partitions = Vec::with_capacity(assignments.len());
        for (offset, assignment) in assignments.iter().enumerate() {
            let partition = first_partition + offset;
            let replicas = &assignment.replicas;
            if replicas.is_empty() {
                return Err(ApplyError::InvalidReplicaAssignment(format!(
                    "partition {partition} has no replicas"
                )));
            }
            if replicas.len() != replication_factor {
                return Err(ApplyError::InvalidReplicaAssignment(format!(
                    "inconsistent replication factor: partition {partition} has {} replicas, expected {replication_factor}",
                    replicas.len()
                )));
            }
            let mut seen = BTreeSet::new();
            for replica in replicas {
                if !seen.insert(*replica) {
                    return Err(ApplyError::InvalidReplicaAssignment(format!(
                        "partition {partition} lists broker {replica} twice"
                    )));
                }
                if !self.brokers.contains_key(replica) {
                    return Err(ApplyError::InvalidReplicaAssignment(format!(
                        "partition {partition}: broker {replica} is not registered"
                    )));
                }
            }
            let isr: Vec<BrokerId> = replicas
                .iter()
                .copied()
                .filter(|b| self.is_usable(*b))
                .collect();
            let Some(leader) = isr.first().copied() else {
                return Err(ApplyError::InvalidReplicaAssignment(format!(
                    "all replicas of partition {partition} are fenced"
                )));
            };
            partitions.push(PartitionState {
                replicas: replicas.clone(),
                isr,
                leader: Some(leader),
                leader_epoch: LeaderEpoch(0),
                partition_epoch: PartitionEpoch(0),
                adding_replicas: Vec::new(),
                removing_replicas: Vec::new(),
            });
        }
        Ok(partitions)
    }

    fn alter_partition(
        &mut self,
        topic_id: TopicId,
        partition: u32,
        leader: Option<BrokerId>,
        leader_epoch: LeaderEpoch,
        isr: &[BrokerId],
        partition_epoch: PartitionEpoch,
    ) -> CommandResult {
        let current = self
            .topics
            .get(&topic_id)
            .ok_or(ApplyError::UnknownTopicId(topic_id))?
            .partitions
            .get(partition as usize)
            .ok_or(ApplyError::UnknownPartition {
                topic_id,
                partition,
            })?;
        if partition_epoch != current.partition_epoch {
            return Err(ApplyError::InvalidUpdateVersion {
                topic_id,
                partition,
                requested: partition_epoch,
                current: current.partition_epoch,
            });
        }
        let leader_changed = leader != current.leader;
        if leader_epoch < current.leader_epoch
            || (leader_changed && leader_epoch == current.leader_epoch)
        {
            return Err(ApplyError::FencedLeaderEpoch {
                topic_id,
                partition,
                requested: leader_epoch,
                current: current.leader_epoch,
            });
        }
        let invalid = |reason: String| ApplyError::InvalidIsr {
            topic_id,
            partition,
            reason,
        };
        if isr.is_empty() {
            return Err(invalid("the ISR is empty".into()));
        }
        let mut seen = BTreeSet::new();
        for member in isr {
            if !seen.insert(*member) {
                return Err(invalid(format!("broker {member} is listed twice")));
            }
            if !current.replicas.contains(member) {
                return Err(invalid(format!("broker {member} is not a replica")));
            }
            if !current.isr.contains(member) && !self.is_usable(*member) {
                return Err(ApplyError::IneligibleReplica {
                    topic_id,
                    partition,
                    broker: *member,
                });
            }
        }
        if let Some(leader) = leader {
            if !isr.contains(&leader) {
                return Err(invalid(format!("the leader {leader} is not in the ISR")));
            }
            if !self.is_usable(leader) {
                return Err(ApplyError::IneligibleReplica {
                    topic_id,
                    partition,
                    broker: leader,
                });
            }
        }
        let next_epoch = current
            .partition_epoch
            .0
            .checked_add(1)
            .ok_or_else(|| invalid("the partition epoch is exhausted".into()))?;
        // An ISR that covers a reassignment's target completes it in this same change, as in
        // Kafka's AlterPartition handling (see `crate::reassignment`).
        let mut change = PartitionChange::of(current);
        change.leader = leader;
        change.leader_epoch = leader_epoch;
        change.isr = isr.to_vec();
        let mut next = change
            .build(current, |id| self.is_usable(id))
            .unwrap_or_else(|| current.clone());
        next.partition_epoch = PartitionEpoch(next_epoch);
        let response = Response::PartitionAltered {
            leader: next.leader,
            leader_epoch: next.leader_epoch,
            partition_epoch: next.partition_epoch,
        };
        self.replace_partition(topic_id, partition, next)?;
        Ok(response)
    }

    fn replace_partition(
        &mut self,
        topic_id: TopicId,
        partition: u32,
        next: PartitionState,
    ) -> Result<(), ApplyError> {
        let state = self
            .topics
            .get_mut(&topic_id)
            .and_then(|t| t.partitions.get_mut(partition as usize))
            .ok_or(ApplyError::UnknownPartition {
                topic_id,
                partition,
            })?;
        *state = next;
        Ok(())
    }

    /// Starts, changes or cancels (`target: None`) a partition's reassignment, as Kafka's
    /// `ReplicationControlManager.alterPartitionReassignment`; see [`crate::reassignment`].
    fn alter_partition_reassignment(
        &mut self,
        topic_id: TopicId,
        partition: u32,
        target: Option<&[BrokerId]>,
        allow_replication_factor_change: bool,
    ) -> CommandResult {
        let topic = self
            .topics
            .get(&topic_id)
            .ok_or(ApplyError::UnknownTopicId(topic_id))?;
        let current =
            topic
                .partitions
                .get(partition as usize)
                .ok_or(ApplyError::UnknownPartition {
                    topic_id,
                    partition,
                })?;
        let mut change = PartitionChange::of(current);
        match target {
            None => {
                if !current.is_reassigning() {
                    return Err(ApplyError::NoReassignmentInProgress {
                        topic_id,
                        partition,
                    });
                }
                let revert = reassignment::revert(current).ok_or_else(|| {
                    ApplyError::InvalidReplicaAssignment(format!(
                        "partition {partition}: every replica is being added; nothing to revert to"
                    ))
                })?;
                // The broker's static default is not in the log: apply sees the topic's
                // config and the cluster-wide dynamic default only.
                if revert.unclean && !crate::placement::unclean_allowed(self, topic, false) {
                    return Err(ApplyError::InvalidReplicaAssignment(format!(
                        "Unable to revert partition assignment for {}:{partition} because it would require an unclean leader election.",
                        topic.name
                    )));
                }
                change.replicas = revert.replicas;
                change.isr = revert.isr;
                change.adding.clear();
                change.removing.clear();
                let valid = |id: &BrokerId| change.isr.contains(id) && self.is_usable(*id);
                if !change.leader.as_ref().is_some_and(valid) {
                    change.leader = change.replicas.iter().copied().find(valid);
                }
            }
            Some(target) => {
                self.validate_reassignment_target(partition, target)?;
                let original = reassignment::original_replicas(current);
                if !allow_replication_factor_change && target.len() != original.len() {
                    return Err(ApplyError::InvalidReplicationFactor(format!(
                        "The replication factor is changed from {} to {} but allowReplicationFactorChange is false.",
                        original.len(),
                        target.len()
                    )));
                }
                let r = ReassignmentReplicas::new(&current.replicas, target);
                change.replicas = r.replicas;
                change.adding = r.adding;
                change.removing = r.removing;
            }
        }
        let Some(mut next) = change.build(current, |id| self.is_usable(id)) else {
            return Ok(Response::PartitionAltered {
                leader: current.leader,
                leader_epoch: current.leader_epoch,
                partition_epoch: current.partition_epoch,
            });
        };
        next.partition_epoch =
            PartitionEpoch(current.partition_epoch.0.checked_add(1).ok_or_else(|| {
                ApplyError::InvalidIsr {
                    topic_id,
                    partition,
                    reason: "the partition epoch is exhausted".into(),
                }
            })?);
        let response = Response::PartitionAltered {
            leader: next.leader,
            leader_epoch: next.leader_epoch,
            partition_epoch: next.partition_epoch,
        };
        self.replace_partition(topic_id, partition, next)?;
        Ok(response)
    }

    /// Kafka's `validateManualPartitionAssignment`: a non-empty list of distinct, registered
    /// brokers (fenced ones included: they join the ISR once unfenced and caught up).
    fn validate_reassignment_target(
        &self,
        partition: u32,
        target: &[BrokerId],
    ) -> Result<(), ApplyError> {
        if target.is_empty() {
            return Err(ApplyError::InvalidReplicaAssignment(format!(
                "The manual partition assignment of partition {partition} includes an empty replica list."
            )));
        }
        let mut seen = BTreeSet::new();
        for id in target {
            if !self.brokers.contains_key(id) {
                return Err(ApplyError::InvalidReplicaAssignment(format!(
                    "The manual partition assignment of partition {partition} includes broker {id}, but no such broker is registered."
                )));
            }
            if !seen.insert(*id) {
                return Err(ApplyError::InvalidReplicaAssignment(format!(
                    "The manual partition assignment of partition {partition} includes the broker {id} more than once."
                )));
            }
        }
        Ok(())
    }

    fn elect_leader(
        &mut self,
        topic_id: TopicId,
        partition: u32,
        election: ElectionType,
    ) -> CommandResult {
        let chosen = self.leader_election(topic_id, partition, election)?;
        let unknown = ApplyError::UnknownPartition {
            topic_id,
            partition,
        };
        let current = self.partition(topic_id, partition).ok_or(unknown.clone())?;
        let exhausted = |what: &str| ApplyError::InvalidIsr {
            topic_id,
            partition,
            reason: format!("the {what} epoch is exhausted"),
        };
        let leader_epoch = current
            .leader_epoch
            .0
            .checked_add(1)
            .ok_or_else(|| exhausted("leader"))?;
        let partition_epoch = current
            .partition_epoch
            .0
            .checked_add(1)
            .ok_or_else(|| exhausted("partition"))?;

        let state = self
            .topics
            .get_mut(&topic_id)
            .and_then(|t| t.partitions.get_mut(partition as usize))
            .ok_or(unknown)?;
        if let (true, Some(leader)) = (chosen.unclean, chosen.leader) {
            state.isr = vec![leader];
        }
        state.leader = chosen.leader;
        state.leader_epoch = LeaderEpoch(leader_epoch);
        state.partition_epoch = PartitionEpoch(partition_epoch);
        Ok(Response::PartitionAltered {
            leader: state.leader,
            leader_epoch: state.leader_epoch,
            partition_epoch: state.partition_epoch,
        })
    }

    fn set_configs(
        &mut self,
        resource: &ConfigResource,
        changes: &BTreeMap<String, Option<String>>,
    ) -> CommandResult {
        if let Some(key) = changes.keys().find(|k| k.is_empty()) {
            return Err(ApplyError::InvalidConfig(format!(
                "empty config name {key:?}"
            )));
        }
        let configs = match resource {
            ConfigResource::Topic(name) => {
                let id = self
                    .topic_ids
                    .get(name)
                    .ok_or_else(|| ApplyError::UnknownTopic(name.clone()))?;
                &mut self
                    .topics
                    .get_mut(id)
                    .ok_or_else(|| ApplyError::UnknownTopic(name.clone()))?
                    .configs
            }
            ConfigResource::Broker(id) => {
                if id.0 < 0 {
                    return Err(ApplyError::InvalidBrokerId(id.0));
                }
                self.broker_configs.entry(*id).or_default()
            }
            ConfigResource::ClusterDefault => &mut self.cluster_configs,
        };
        for (key, value) in changes {
            match value {
                Some(value) => configs.insert(key.clone(), value.clone()),
                None => configs.remove(key),
            };
        }
        if let ConfigResource::Broker(id) = resource {
            if self.broker_configs.get(id).is_some_and(BTreeMap::is_empty) {
                self.broker_configs.remove(id);
            }
        }
        Ok(Response::ConfigsSet)
    }
}

/// Kafka's topic name rules: 1 to 249 characters from `[a-zA-Z0-9._-]`, not `.` or `..`.
pub fn validate_topic_name(name: &str) -> Result<(), ApplyError> {
    let invalid = |reason: &str| {
        Err(ApplyError::InvalidTopicName {
            name: name.chars().take(300).collect(),
            reason: reason.into(),
        })
    };
    if name.is_empty() {
        return invalid("the name is empty");
    }
    if name == "." || name == ".." {
        return invalid("'.' and '..' are not allowed");
    }
    if name.len() > MAX_TOPIC_NAME_LEN {
        return invalid("the name is longer than 249 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return invalid("only ASCII alphanumerics, '.', '_' and '-' are allowed");
    }
    Ok(())
}

fn unify_collision_chars(name: &str) -> String {
    name.replace('.', "_")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uuid(n: u8) -> Uuid128 {
        let mut bytes = [0u8; 16];
        bytes[15] = n;
        Uuid128(bytes)
    }

    fn register(state: &mut MetadataState, index: u64, id: i32, rack: Option<&str>) -> BrokerEpoch {
        let response = state
            .apply(
                index,
                &Command::RegisterBroker {
                    id: BrokerId(id),
                    incarnation: uuid(id as u8 + 100),
                    rack: rack.map(str::to_owned),
                    endpoints: vec![Endpoint {
                        listener: "PLAINTEXT".into(),
                        host: "localhost".into(),
                        port: 9092,
                        security_protocol: "PLAINTEXT".into(),
                    }],
                    now_ms: 1_000,
                },
            )
            .unwrap();
        match response {
            Response::BrokerRegistered { broker_epoch } => broker_epoch,
            other => panic!("unexpected {other:?}"),
        }
    }

    /// Three registered, unfenced brokers 1, 2, 3.
    fn three_brokers() -> MetadataState {
        let mut state = MetadataState::new();
        for id in 1..=3 {
            let epoch = register(&mut state, id as u64 * 10, id, None);
            state
                .apply(
                    id as u64 * 10 + 1,
                    &Command::UnfenceBroker {
                        id: BrokerId(id),
                        broker_epoch: epoch,
                    },
                )
                .unwrap();
        }
        state
    }

    fn replicas(ids: &[i32]) -> PartitionAssignment {
        PartitionAssignment {
            replicas: ids.iter().map(|id| BrokerId(*id)).collect(),
        }
    }

    fn create_topic(
        state: &mut MetadataState,
        name: &str,
        id: TopicId,
        parts: &[&[i32]],
    ) -> CommandResult {
        state.apply(
            100,
            &Command::CreateTopic {
                name: name.into(),
                id,
                partitions: parts.iter().map(|p| replicas(p)).collect(),
                configs: BTreeMap::new(),
            },
        )
    }

    #[test]
    fn registration_starts_fenced_with_the_log_index_as_epoch() {
        let mut state = MetadataState::new();
        let epoch = register(&mut state, 42, 7, Some("rack-a"));
        assert_eq!(epoch, BrokerEpoch(42));
        let broker = state.broker(BrokerId(7)).unwrap();
        assert!(broker.fenced);
        assert_eq!(broker.rack.as_deref(), Some("rack-a"));
        assert!(!state.is_usable(BrokerId(7)));
    }

    #[test]
    fn a_second_live_incarnation_of_a_broker_id_is_rejected_until_fenced() {
        let mut state = three_brokers();
        let other = Command::RegisterBroker {
            id: BrokerId(1),
            incarnation: uuid(1),
            rack: None,
            endpoints: vec![],
            now_ms: 5_000,
        };
        let err = state.apply(200, &other).unwrap_err();
        assert!(matches!(
            err,
            ApplyError::DuplicateBrokerRegistration { .. }
        ));
        assert_eq!(err.kafka_error_code(), 101);

        state
            .apply(201, &Command::FenceBroker { id: BrokerId(1) })
            .unwrap();
        assert_eq!(
            state.apply(202, &other),
            Ok(Response::BrokerRegistered {
                broker_epoch: BrokerEpoch(202)
            })
        );
    }

    #[test]
    fn heartbeats_check_the_broker_epoch_and_keep_the_newest_time() {
        let mut state = three_brokers();
        let epoch = state.broker(BrokerId(2)).unwrap().epoch;
        let stale = Command::BrokerHeartbeat {
            id: BrokerId(2),
            broker_epoch: BrokerEpoch(epoch.0 - 1),
            now_ms: 9_000,
        };
        assert!(matches!(
            state.apply(300, &stale),
            Err(ApplyError::StaleBrokerEpoch { .. })
        ));
        for now_ms in [9_000, 8_000] {
            let beat = Command::BrokerHeartbeat {
                id: BrokerId(2),
                broker_epoch: epoch,
                now_ms,
            };
            assert_eq!(
                state.apply(301, &beat),
                Ok(Response::HeartbeatAccepted { fenced: false })
            );
        }
        assert_eq!(state.broker(BrokerId(2)).unwrap().last_heartbeat_ms, 9_000);
        assert_eq!(
            state.brokers_with_expired_session(10_000, 5_000),
            vec![BrokerId(1), BrokerId(3)]
        );
        let unknown = Command::BrokerHeartbeat {
            id: BrokerId(9),
            broker_epoch: epoch,
            now_ms: 1,
        };
        assert_eq!(
            state.apply(302, &unknown),
            Err(ApplyError::BrokerNotRegistered(BrokerId(9)))
        );
    }

    #[test]
    fn create_topic_leads_on_the_first_unfenced_replica() {
        let mut state = three_brokers();
        state
            .apply(99, &Command::FenceBroker { id: BrokerId(2) })
            .unwrap();
        let result = create_topic(&mut state, "orders", uuid(1), &[&[2, 3, 1], &[1, 2, 3]]);
        assert_eq!(
            result,
            Ok(Response::TopicCreated {
                id: uuid(1),
                partitions: 2
            })
        );
        let p0 = state.partition(uuid(1), 0).unwrap();
        assert_eq!(p0.leader, Some(BrokerId(3)));
        assert_eq!(p0.isr, vec![BrokerId(3), BrokerId(1)]);
        assert_eq!(p0.replicas, vec![BrokerId(2), BrokerId(3), BrokerId(1)]);
        assert_eq!(state.topic_by_name("orders").unwrap().id, uuid(1));
    }

    #[test]
    fn create_topic_rejects_bad_input_without_changing_state() {
        let mut state = three_brokers();
        create_topic(&mut state, "a.b", uuid(1), &[&[1]]).unwrap();
        let before = state.clone();
        let cases: Vec<(&str, TopicId, Vec<&[i32]>, i16)> = vec![
            ("", uuid(2), vec![&[1]], 17),
            ("..", uuid(2), vec![&[1]], 17),
            ("bad name", uuid(2), vec![&[1]], 17),
            ("a_b", uuid(2), vec![&[1]], 17),
            ("ok", Uuid128::ZERO, vec![&[1]], 17),
            ("a.b", uuid(2), vec![&[1]], 36),
            ("ok", uuid(1), vec![&[1]], 36),
            ("ok", uuid(2), vec![], 37),
            ("ok", uuid(2), vec![&[]], 39),
            ("ok", uuid(2), vec![&[1, 1]], 39),
            ("ok", uuid(2), vec![&[1, 9]], 39),
            ("ok", uuid(2), vec![&[1, 2], &[3]], 39),
        ];
        for (name, id, parts, code) in cases {
            let err = create_topic(&mut state, name, id, &parts).unwrap_err();
            assert_eq!(err.kafka_error_code(), code, "{name:?}: {err}");
            assert_eq!(state, before, "{name:?} changed the state");
        }
        let long = "x".repeat(250);
        assert!(create_topic(&mut state, &long, uuid(3), &[&[1]]).is_err());
        for id in 1..=3 {
            state
                .apply(120, &Command::FenceBroker { id: BrokerId(id) })
                .unwrap();
        }
        let err = create_topic(&mut state, "fenced", uuid(4), &[&[1, 2]]).unwrap_err();
        assert!(err.to_string().contains("fenced"), "{err}");
    }

    #[test]
    fn delete_topic_frees_its_name_and_configs() {
        let mut state = three_brokers();
        create_topic(&mut state, "t", uuid(1), &[&[1]]).unwrap();
        let set = Command::SetConfigs {
            resource: ConfigResource::Topic("t".into()),
            changes: BTreeMap::from([("retention.ms".to_owned(), Some("1000".to_owned()))]),
        };
        state.apply(101, &set).unwrap();
        assert_eq!(
            state.apply(102, &Command::DeleteTopic { id: uuid(1) }),
            Ok(Response::TopicDeleted { name: "t".into() })
        );
        assert!(state.topic_by_name("t").is_none());
        assert!(state.configs(&ConfigResource::Topic("t".into())).is_none());
        assert_eq!(
            state.apply(103, &Command::DeleteTopic { id: uuid(1) }),
            Err(ApplyError::UnknownTopicId(uuid(1)))
        );
        create_topic(&mut state, "t", uuid(2), &[&[2]]).unwrap();
        assert!(state
            .configs(&ConfigResource::Topic("t".into()))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn create_partitions_keeps_the_replication_factor() {
        let mut state = three_brokers();
        create_topic(&mut state, "t", uuid(1), &[&[1, 2]]).unwrap();
        let add = |parts: &[&[i32]]| Command::CreatePartitions {
            topic_id: uuid(1),
            partitions: parts.iter().map(|p| replicas(p)).collect(),
        };
        assert!(matches!(
            state.apply(110, &add(&[&[3]])),
            Err(ApplyError::InvalidReplicaAssignment(_))
        ));
        assert!(matches!(
            state.apply(110, &add(&[])),
            Err(ApplyError::InvalidPartitions(_))
        ));
        assert_eq!(
            state.apply(111, &add(&[&[2, 3], &[3, 1]])),
            Ok(Response::PartitionsCreated { total: 3 })
        );
        assert_eq!(
            state.partition(uuid(1), 2).unwrap().leader,
            Some(BrokerId(3))
        );
    }

    fn alter(leader: Option<i32>, leader_epoch: i32, isr: &[i32], partition_epoch: i32) -> Command {
        Command::AlterPartition {
            topic_id: uuid(1),
            partition: 0,
            leader: leader.map(BrokerId),
            leader_epoch: LeaderEpoch(leader_epoch),
            isr: isr.iter().map(|b| BrokerId(*b)).collect(),
            partition_epoch: PartitionEpoch(partition_epoch),
        }
    }

    #[test]
    fn alter_partition_applies_kafka_checks() {
        let mut state = three_brokers();
        create_topic(&mut state, "t", uuid(1), &[&[1, 2, 3]]).unwrap();
        let before = state.clone();
        let rejected: Vec<(Command, i16)> = vec![
            (alter(Some(1), 0, &[1, 2], 1), 95), // stale/future partition epoch
            (alter(Some(2), 0, &[1, 2], 0), 74), // leader changed, same epoch
            (alter(Some(1), -1, &[1, 2], 0), 74), // older leader epoch
            (alter(Some(1), 0, &[], 0), 42),     // empty ISR
            (alter(Some(1), 0, &[1, 1], 0), 42), // duplicate
            (alter(Some(1), 0, &[1, 4], 0), 42), // not a replica
            (alter(Some(3), 1, &[1, 2], 0), 42), // leader outside the ISR
        ];
        for (command, code) in rejected {
            let err = state.apply(200, &command).unwrap_err();
            assert_eq!(err.kafka_error_code(), code, "{command:?}: {err}");
            assert_eq!(state, before);
        }
        let shrink = alter(Some(1), 0, &[1, 2], 0);
        assert_eq!(
            state.apply(201, &shrink),
            Ok(Response::PartitionAltered {
                leader: Some(BrokerId(1)),
                leader_epoch: LeaderEpoch(0),
                partition_epoch: PartitionEpoch(1),
            })
        );
        // The same change again is now stale.
        assert!(matches!(
            state.apply(202, &shrink),
            Err(ApplyError::InvalidUpdateVersion { .. })
        ));
        // A fenced broker cannot rejoin the ISR nor lead.
        state
            .apply(203, &Command::FenceBroker { id: BrokerId(3) })
            .unwrap();
        assert!(matches!(
            state.apply(204, &alter(Some(1), 0, &[1, 2, 3], 1)),
            Err(ApplyError::IneligibleReplica {
                broker: BrokerId(3),
                ..
            })
        ));
        state
            .apply(205, &Command::FenceBroker { id: BrokerId(1) })
            .unwrap();
        assert!(matches!(
            state.apply(206, &alter(Some(1), 0, &[1, 2], 1)),
            Err(ApplyError::IneligibleReplica {
                broker: BrokerId(1),
                ..
            })
        ));
        // Moving leadership to 2 with a new epoch works; 1 may stay in the ISR while fenced.
        assert!(state.apply(207, &alter(Some(2), 1, &[1, 2], 1)).is_ok());
        let p = state.partition(uuid(1), 0).unwrap();
        assert_eq!(
            (p.leader, p.leader_epoch, p.partition_epoch),
            (Some(BrokerId(2)), LeaderEpoch(1), PartitionEpoch(2))
        );
        let mut unknown = alter(Some(2), 1, &[2], 2);
        if let Command::AlterPartition { partition, .. } = &mut unknown {
            *partition = 5;
        }
        assert!(matches!(
            state.apply(208, &unknown),
            Err(ApplyError::UnknownPartition { partition: 5, .. })
        ));
    }

    fn reassign(target: Option<&[i32]>, allow_rf_change: bool) -> Command {
        Command::AlterPartitionReassignment {
            topic_id: uuid(1),
            partition: 0,
            replicas: target.map(|t| t.iter().map(|b| BrokerId(*b)).collect()),
            allow_replication_factor_change: allow_rf_change,
        }
    }

    fn ids(v: &[i32]) -> Vec<BrokerId> {
        v.iter().map(|b| BrokerId(*b)).collect()
    }

    #[test]
    fn reassignment_adds_replicas_then_completes_when_the_isr_covers_the_target() {
        let mut state = three_brokers();
        create_topic(&mut state, "t", uuid(1), &[&[1]]).unwrap();
        assert_eq!(
            state.apply(200, &reassign(Some(&[2, 3]), true)),
            Ok(Response::PartitionAltered {
                leader: Some(BrokerId(1)),
                leader_epoch: LeaderEpoch(0),
                partition_epoch: PartitionEpoch(1),
            })
        );
        let p = state.partition(uuid(1), 0).unwrap().clone();
        assert_eq!(p.replicas, ids(&[2, 3, 1]));
        assert_eq!(
            (p.adding_replicas.clone(), p.removing_replicas.clone()),
            (ids(&[2, 3]), ids(&[1]))
        );
        assert_eq!(p.isr, ids(&[1]));
        assert!(p.is_reassigning());

        // The leader adds 2: still in progress.
        state.apply(201, &alter(Some(1), 0, &[1, 2], 1)).unwrap();
        assert!(state.partition(uuid(1), 0).unwrap().is_reassigning());
        // Adding 3 completes it in the same apply: broker 1 leaves, 2 leads at a new epoch.
        assert_eq!(
            state.apply(202, &alter(Some(1), 0, &[1, 2, 3], 2)),
            Ok(Response::PartitionAltered {
                leader: Some(BrokerId(2)),
                leader_epoch: LeaderEpoch(1),
                partition_epoch: PartitionEpoch(3),
            })
        );
        let p = state.partition(uuid(1), 0).unwrap();
        assert_eq!(
            (p.replicas.clone(), p.isr.clone()),
            (ids(&[2, 3]), ids(&[2, 3]))
        );
        assert!(!p.is_reassigning());
        // The old leader's next ISR change is fenced.
        assert!(matches!(
            state.apply(203, &alter(Some(1), 0, &[1, 2, 3], 3)),
            Err(ApplyError::FencedLeaderEpoch { .. })
        ));
    }

    #[test]
    fn a_target_the_isr_already_covers_completes_at_once() {
        let mut state = three_brokers();
        create_topic(&mut state, "t", uuid(1), &[&[1, 2, 3]]).unwrap();
        // Reordering: same set, new preferred leader; the leader stays, no epoch bump.
        state
            .apply(200, &reassign(Some(&[3, 1, 2]), false))
            .unwrap();
        let p = state.partition(uuid(1), 0).unwrap().clone();
        assert_eq!(p.replicas, ids(&[3, 1, 2]));
        assert_eq!(
            (p.leader, p.leader_epoch),
            (Some(BrokerId(1)), LeaderEpoch(0))
        );
        assert!(!p.is_reassigning());
        // Shrinking off the leader: done at once, leadership moves to the first target replica.
        state.apply(201, &reassign(Some(&[2, 3]), true)).unwrap();
        let p = state.partition(uuid(1), 0).unwrap().clone();
        assert_eq!(
            (p.replicas.clone(), p.isr.clone()),
            (ids(&[2, 3]), ids(&[2, 3]))
        );
        assert_eq!(
            (p.leader, p.leader_epoch),
            (Some(BrokerId(2)), LeaderEpoch(1))
        );
        assert_eq!(p.partition_epoch, PartitionEpoch(2));
        // The same target again changes nothing, not even the partition epoch.
        let before = state.clone();
        assert_eq!(
            state.apply(202, &reassign(Some(&[2, 3]), false)),
            Ok(Response::PartitionAltered {
                leader: Some(BrokerId(2)),
                leader_epoch: LeaderEpoch(1),
                partition_epoch: PartitionEpoch(2),
            })
        );
        assert_eq!(state, before);
    }

    #[test]
    fn cancelling_a_reassignment_reverts_to_the_original_replicas() {
        let mut state = three_brokers();
        create_topic(&mut state, "t", uuid(1), &[&[1, 2]]).unwrap();
        state.apply(200, &reassign(Some(&[3, 2]), true)).unwrap();
        let p = state.partition(uuid(1), 0).unwrap();
        assert_eq!(p.replicas, ids(&[3, 2, 1]));
        assert_eq!(p.leader_epoch, LeaderEpoch(0));
        state.apply(201, &reassign(None, true)).unwrap();
        // As in Kafka, the reverted replicas keep their order in the reassigning list.
        let p = state.partition(uuid(1), 0).unwrap();
        assert_eq!(
            (p.replicas.clone(), p.isr.clone()),
            (ids(&[2, 1]), ids(&[1, 2]))
        );
        assert!(!p.is_reassigning());
        assert_eq!(p.leader, Some(BrokerId(1)));
        assert_eq!(p.leader_epoch, LeaderEpoch(1), "broker 3 left the replicas");
        let before = state.clone();
        let err = state.apply(202, &reassign(None, true)).unwrap_err();
        assert_eq!(err.kafka_error_code(), 85, "{err}");
        assert_eq!(state, before);
    }

    #[test]
    fn reassignment_rejects_bad_targets_without_changing_state() {
        let mut state = three_brokers();
        create_topic(&mut state, "t", uuid(1), &[&[1, 2]]).unwrap();
        let before = state.clone();
        let cases: Vec<(Command, i16)> = vec![
            (reassign(Some(&[]), true), 39),
            (reassign(Some(&[1, 1]), true), 39),
            (reassign(Some(&[1, 9]), true), 39),
            (reassign(Some(&[3]), false), 38),
            (reassign(Some(&[1, 2, 3]), false), 38),
            (reassign(None, true), 85),
        ];
        for (command, code) in cases {
            let err = state.apply(300, &command).unwrap_err();
            assert_eq!(err.kafka_error_code(), code, "{command:?}: {err}");
            assert_eq!(state, before);
        }
        let mut unknown = reassign(Some(&[1]), true);
        if let Command::AlterPartitionReassignment { partition, .. } = &mut unknown {
            *partition = 4;
        }
        assert_eq!(
            state.apply(301, &unknown).unwrap_err().kafka_error_code(),
            3
        );
        // A fenced but registered broker is a valid target: it joins once unfenced.
        state
            .apply(302, &Command::FenceBroker { id: BrokerId(3) })
            .unwrap();
        state.apply(303, &reassign(Some(&[1, 3]), false)).unwrap();
        assert_eq!(
            state.partition(uuid(1), 0).unwrap().adding_replicas,
            ids(&[3])
        );
        assert!(matches!(
            state.apply(304, &alter(Some(1), 0, &[1, 2, 3], 1)),
            Err(ApplyError::IneligibleReplica { .. })
        ));
    }

    #[test]
    fn partition_state_without_reassignment_fields_still_loads() {
        let old = r#"{"replicas":[1,2],"isr":[1],"leader":1,"leader_epoch":4,"partition_epoch":9}"#;
        let p: PartitionState = serde_json::from_str(old).unwrap();
        assert!(p.adding_replicas.is_empty() && p.removing_replicas.is_empty());
        assert_eq!(serde_json::to_string(&p).unwrap(), old);
    }

    fn elect(election: ElectionType) -> Command {
        Command::ElectLeader {
            topic_id: uuid(1),
            partition: 0,
            election,
        }
    }

    fn leadership(state: &MetadataState) -> (Option<i32>, Vec<i32>, i32, i32) {
        let p = state.partition(uuid(1), 0).unwrap();
        (
            p.leader.map(|b| b.0),
            p.isr.iter().map(|b| b.0).collect(),
            p.leader_epoch.0,
            p.partition_epoch.0,
        )
    }

    #[test]
    fn preferred_election_moves_leadership_back_to_the_first_replica() {
        let mut state = three_brokers();
        create_topic(&mut state, "t", uuid(1), &[&[1, 2, 3]]).unwrap();
        let preferred = elect(ElectionType::Preferred);
        let err = state.apply(200, &preferred).unwrap_err();
        assert_eq!(err.kafka_error_code(), 84, "{err}");

        // Broker 1 drops out of the ISR and loses leadership to 2.
        state.apply(201, &alter(Some(2), 1, &[2, 3], 0)).unwrap();
        let before = state.clone();
        let err = state.apply(202, &preferred).unwrap_err();
        assert_eq!(err.kafka_error_code(), 80, "not in the ISR: {err}");
        assert_eq!(state, before);

        // Back in the ISR but fenced: still not available.
        state.apply(203, &alter(Some(2), 1, &[2, 3, 1], 1)).unwrap();
        state
            .apply(204, &Command::FenceBroker { id: BrokerId(1) })
            .unwrap();
        let before = state.clone();
        let err = state.apply(205, &preferred).unwrap_err();
        assert_eq!(err.kafka_error_code(), 80, "fenced: {err}");
        assert_eq!(state, before);

        let epoch = state.broker(BrokerId(1)).unwrap().epoch;
        state
            .apply(
                206,
                &Command::UnfenceBroker {
                    id: BrokerId(1),
                    broker_epoch: epoch,
                },
            )
            .unwrap();
        assert_eq!(
            state.apply(207, &preferred),
            Ok(Response::PartitionAltered {
                leader: Some(BrokerId(1)),
                leader_epoch: LeaderEpoch(2),
                partition_epoch: PartitionEpoch(3),
            })
        );
        assert_eq!(leadership(&state), (Some(1), vec![2, 3, 1], 2, 3));
        let err = state.apply(208, &preferred).unwrap_err();
        assert_eq!(err.kafka_error_code(), 84, "{err}");
    }

    #[test]
    fn preferred_election_of_a_leaderless_partition_takes_a_usable_isr_member() {
        let mut state = three_brokers();
        create_topic(&mut state, "t", uuid(1), &[&[1, 2, 3]]).unwrap();
        state.apply(200, &alter(None, 1, &[2, 3], 0)).unwrap();
        state
            .apply(201, &Command::FenceBroker { id: BrokerId(1) })
            .unwrap();
        assert!(state.apply(202, &elect(ElectionType::Preferred)).is_ok());
        assert_eq!(leadership(&state), (Some(2), vec![2, 3], 2, 2));
    }

    #[test]
    fn unclean_election_only_for_leaderless_partitions_and_it_may_leave_the_isr() {
        let mut state = three_brokers();
        create_topic(&mut state, "t", uuid(1), &[&[1, 2, 3]]).unwrap();
        let unclean = elect(ElectionType::Unclean);
        let err = state.apply(200, &unclean).unwrap_err();
        assert_eq!(err.kafka_error_code(), 84, "there is a leader: {err}");

        // Offline with only broker 3 in the ISR, and 3 fenced.
        state.apply(201, &alter(None, 1, &[3], 0)).unwrap();
        for id in 1..=3 {
            state
                .apply(202, &Command::FenceBroker { id: BrokerId(id) })
                .unwrap();
        }
        let before = state.clone();
        let err = state.apply(203, &unclean).unwrap_err();
        assert_eq!(err.kafka_error_code(), 83, "no live replica: {err}");
        assert_eq!(state, before);

        // Broker 2 comes back: outside the ISR, it becomes leader and the whole ISR.
        let epoch = state.broker(BrokerId(2)).unwrap().epoch;
        state
            .apply(
                204,
                &Command::UnfenceBroker {
                    id: BrokerId(2),
                    broker_epoch: epoch,
                },
            )
            .unwrap();
        assert!(state.apply(205, &unclean).is_ok());
        assert_eq!(leadership(&state), (Some(2), vec![2], 2, 2));
    }

    #[test]
    fn elections_of_unknown_partitions_are_rejected() {
        let mut state = three_brokers();
        create_topic(&mut state, "t", uuid(1), &[&[1]]).unwrap();
        let missing = Command::ElectLeader {
            topic_id: uuid(1),
            partition: 1,
            election: ElectionType::Preferred,
        };
        let err = state.apply(200, &missing).unwrap_err();
        assert_eq!(err.kafka_error_code(), 3, "{err}");
        let unknown_topic = Command::ElectLeader {
            topic_id: uuid(9),
            partition: 0,
            election: ElectionType::Unclean,
        };
        assert_eq!(
            state.apply(201, &unknown_topic),
            Err(ApplyError::UnknownTopicId(uuid(9)))
        );
    }

    #[test]
    fn configs_are_set_and_removed_per_resource() {
        let mut state = three_brokers();
        let set = |resource: ConfigResource, key: &str, value: Option<&str>| Command::SetConfigs {
            resource,
            changes: BTreeMap::from([(key.to_owned(), value.map(str::to_owned))]),
        };
        state
            .apply(
                1,
                &set(
                    ConfigResource::Broker(BrokerId(1)),
                    "log.retention.ms",
                    Some("5"),
                ),
            )
            .unwrap();
        state
            .apply(
                2,
                &set(
                    ConfigResource::ClusterDefault,
                    "log.cleaner.threads",
                    Some("2"),
                ),
            )
            .unwrap();
        assert_eq!(
            state.configs(&ConfigResource::Broker(BrokerId(1))).unwrap()["log.retention.ms"],
            "5"
        );
        state
            .apply(
                3,
                &set(
                    ConfigResource::Broker(BrokerId(1)),
                    "log.retention.ms",
                    None,
                ),
            )
            .unwrap();
        assert!(state
            .configs(&ConfigResource::Broker(BrokerId(1)))
            .is_none());
        assert_eq!(
            state.apply(
                4,
                &set(ConfigResource::Topic("nope".into()), "a", Some("b"))
            ),
            Err(ApplyError::UnknownTopic("nope".into()))
        );
        assert!(matches!(
            state.apply(5, &set(ConfigResource::ClusterDefault, "", Some("b"))),
            Err(ApplyError::InvalidConfig(_))
        ));
    }

    #[test]
    fn producer_id_blocks_never_overlap() {
        let mut state = three_brokers();
        let epoch = |state: &MetadataState, id| state.broker(BrokerId(id)).unwrap().epoch;
        let allocate = |broker, broker_epoch, count| Command::AllocateProducerIds {
            broker: BrokerId(broker),
            broker_epoch,
            count,
        };
        let first = state
            .apply(1, &allocate(1, epoch(&state, 1), 1000))
            .unwrap();
        let second = state
            .apply(2, &allocate(2, epoch(&state, 2), 1000))
            .unwrap();
        assert_eq!(
            (first, second),
            (
                Response::ProducerIdsAllocated(ProducerIdBlock {
                    broker: BrokerId(1),
                    first: ProducerId(0),
                    count: 1000
                }),
                Response::ProducerIdsAllocated(ProducerIdBlock {
                    broker: BrokerId(2),
                    first: ProducerId(1000),
                    count: 1000
                })
            )
        );
        assert!(matches!(
            state.apply(3, &allocate(1, BrokerEpoch(0), 1)),
            Err(ApplyError::StaleBrokerEpoch { .. })
        ));
        assert_eq!(
            state.apply(4, &allocate(1, epoch(&state, 1), 0)),
            Err(ApplyError::InvalidProducerIdCount(0))
        );
        state.next_producer_id = i64::MAX - 10;
        assert_eq!(
            state.apply(5, &allocate(1, epoch(&state, 1), 1000)),
            Err(ApplyError::ProducerIdsExhausted)
        );
        assert_eq!(state.next_producer_id(), ProducerId(i64::MAX - 10));
    }

    #[test]
    fn opaque_records_are_kept_per_kind_and_key() {
        let mut state = MetadataState::new();
        let put = Command::PutRecord {
            kind: RecordKind::ScramCredential,
            key: "alice/SCRAM-SHA-256".into(),
            value: vec![1, 2, 3],
        };
        assert_eq!(state.apply(1, &put), Ok(Response::RecordPut));
        assert_eq!(
            state.record(RecordKind::ScramCredential, "alice/SCRAM-SHA-256"),
            Some(&[1u8, 2, 3][..])
        );
        assert_eq!(state.record(RecordKind::Acl, "alice/SCRAM-SHA-256"), None);
        let delete = Command::DeleteRecord {
            kind: RecordKind::ScramCredential,
            key: "alice/SCRAM-SHA-256".into(),
        };
        assert_eq!(
            state.apply(2, &delete),
            Ok(Response::RecordDeleted { existed: true })
        );
        assert_eq!(
            state.apply(3, &delete),
            Ok(Response::RecordDeleted { existed: false })
        );
        let empty_key = Command::PutRecord {
            kind: RecordKind::Acl,
            key: String::new(),
            value: vec![],
        };
        assert!(matches!(
            state.apply(4, &empty_key),
            Err(ApplyError::InvalidRecordKey(_))
        ));
    }

    #[test]
    fn state_round_trips_through_json() {
        let mut state = three_brokers();
        create_topic(&mut state, "t", uuid(1), &[&[1, 2], &[2, 3]]).unwrap();
        state
            .apply(
                5,
                &Command::PutRecord {
                    kind: RecordKind::Acl,
                    key: "k".into(),
                    value: vec![9],
                },
            )
            .unwrap();
        state
            .apply(
                6,
                &Command::SetConfigs {
                    resource: ConfigResource::Broker(BrokerId(2)),
                    changes: BTreeMap::from([("a".to_owned(), Some("b".to_owned()))]),
                },
            )
            .unwrap();
        let json = serde_json::to_vec(&state).unwrap();
        let back: MetadataState = serde_json::from_slice(&json).unwrap();
        assert_eq!(back, state);
    }
}
