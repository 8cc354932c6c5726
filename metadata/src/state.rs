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
//! - A restore from the bucket ([`Command::RestoreFromBucket`]) is decided at most once, and
//!   creates topics only in a quorum that holds none.
//! - The cluster id is set at most once ([`Command::SetClusterId`]) and never changes after;
//!   it travels in snapshots with the rest of the state.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::command::{
    validate_cluster_id, ApplyError, Command, CommandResult, ConfigResource, ElectionType,
    Endpoint, PartitionAssignment, ProducerIdBlock, RecordKind, Response, RestoredTopic,
    MAX_PRODUCER_ID_BLOCK,
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
    /// The time of its registration (or of a heartbeat in a log written before heartbeats
    /// moved to the controller's memory, see [`crate::sessions`]).
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
    /// Group configs by group id; absent in states (and snapshots) from before groups had them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    group_configs: BTreeMap<String, BTreeMap<String, String>>,
    records: BTreeMap<RecordKind, BTreeMap<String, Vec<u8>>>,
    next_producer_id: i64,
    /// Set once by [`Command::SetClusterId`]; absent in states (and snapshots) from before
    /// the quorum held it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cluster_id: Option<String>,
    /// Set once by [`Command::RestoreFromBucket`]: whether the topics came from a bucket
    /// (`Some(true)`) or the quorum refused to (`Some(false)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    restored_from_bucket: Option<bool>,
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

    /// Unfenced brokers last heard from more than `session_timeout_ms` before `now_ms`: the
    /// controller fences them (and then re-elects their partitions). A broker was last heard
    /// from at the newest of its registration and `last_contact_ms` (the active controller's
    /// record of its heartbeats, see [`crate::sessions`]).
    pub fn brokers_with_expired_session(
        &self,
        now_ms: i64,
        session_timeout_ms: i64,
        last_contact_ms: impl Fn(BrokerId) -> Option<i64>,
    ) -> Vec<BrokerId> {
        self.brokers
            .values()
            .filter(|b| {
                let last = last_contact_ms(b.id).map_or(b.last_heartbeat_ms, |contact| {
                    contact.max(b.last_heartbeat_ms)
                });
                !b.fenced && now_ms.saturating_sub(last) > session_timeout_ms
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

    /// The partition, or the error a command naming it gets.
    fn existing_partition(
        &self,
        topic_id: TopicId,
        partition: u32,
    ) -> Result<&PartitionState, ApplyError> {
        self.topics
            .get(&topic_id)
            .ok_or(ApplyError::UnknownTopicId(topic_id))?
            .partitions
            .get(partition as usize)
            .ok_or(ApplyError::UnknownPartition {
                topic_id,
                partition,
            })
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
        let current = self.existing_partition(topic_id, partition)?;
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
            ConfigResource::Group(id) => self.group_configs.get(id),
        }
    }

    /// Every group's configs, by group id (groups without any are absent).
    pub fn group_configs(&self) -> &BTreeMap<String, BTreeMap<String, String>> {
        &self.group_configs
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

    /// The cluster id, once a [`Command::SetClusterId`] has been applied. Set once: a value
    /// seen here is final.
    pub fn cluster_id(&self) -> Option<&str> {
        self.cluster_id.as_deref()
    }

    /// Whether the quorum's [`Command::RestoreFromBucket`] has been decided (`Some(true)`:
    /// it created the topics; `Some(false)`: it refused).
    pub fn restored_from_bucket(&self) -> Option<bool> {
        self.restored_from_bucket
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
            Command::UnregisterBroker { id } => {
                self.brokers
                    .remove(id)
                    .ok_or(ApplyError::BrokerNotRegistered(*id))?;
                Ok(Response::BrokerUnregistered)
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
            Command::SetClusterId { cluster_id } => {
                if let Some(current) = &self.cluster_id {
                    return Ok(Response::ClusterId {
                        cluster_id: current.clone(),
                        newly_set: false,
                    });
                }
                validate_cluster_id(cluster_id)?;
                self.cluster_id = Some(cluster_id.clone());
                Ok(Response::ClusterId {
                    cluster_id: cluster_id.clone(),
                    newly_set: true,
                })
            }
            Command::RestoreFromBucket {
                topics,
                next_producer_id,
            } => self.restore_from_bucket(topics, *next_producer_id),
        }
    }

    fn restore_from_bucket(
        &mut self,
        topics: &[RestoredTopic],
        next_producer_id: i64,
    ) -> CommandResult {
        if self.restored_from_bucket.is_some() {
            return Ok(Response::BucketRestore {
                created: Vec::new(),
                refused: Some("an earlier restore from the bucket decided already".into()),
                newly_decided: false,
            });
        }
        if let Some(existing) = self.topic_ids.keys().next() {
            let refused = format!(
                "the quorum already holds topics ({existing:?}): it, not the bucket, says which topics exist"
            );
            self.restored_from_bucket = Some(false);
            return Ok(Response::BucketRestore {
                created: Vec::new(),
                refused: Some(refused),
                newly_decided: true,
            });
        }
        // Validate on a copy: all or nothing.
        let mut next = self.clone();
        for t in topics {
            if t.leader_epochs.len() != t.partitions.len() {
                return Err(ApplyError::InvalidPartitions(format!(
                    "topic {:?}: {} leader epochs for {} partitions",
                    t.name,
                    t.leader_epochs.len(),
                    t.partitions.len()
                )));
            }
            if let Some(bad) = t.leader_epochs.iter().find(|e| e.0 < 0) {
                return Err(ApplyError::InvalidPartitions(format!(
                    "topic {:?}: negative leader epoch {}",
                    t.name, bad.0
                )));
            }
            next.create_topic(&t.name, t.id, &t.partitions, &t.configs)?;
            if let Some(topic) = next.topics.get_mut(&t.id) {
                for (p, epoch) in topic.partitions.iter_mut().zip(&t.leader_epochs) {
                    p.leader_epoch = *epoch;
                }
            }
        }
        next.next_producer_id = next.next_producer_id.max(next_producer_id);
        next.restored_from_bucket = Some(true);
        *self = next;
        Ok(Response::BucketRestore {
            created: topics.iter().map(|t| t.name.clone()).collect(),
            refused: None,
            newly_decided: true,
        })
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
        self.broker_checked(id, epoch)?;
        self.brokers
            .get_mut(&id)
            .ok_or(ApplyError::BrokerNotRegistered(id))
    }

    /// The registration of broker `id` if its epoch is `epoch`; else why not (what a
    /// heartbeat or an unfence request with that epoch is answered).
    pub fn broker_checked(
        &self,
        id: BrokerId,
        epoch: BrokerEpoch,
    ) -> Result<&BrokerRegistration, ApplyError> {
        let broker = self
            .brokers
            .get(&id)
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
        let current = self.existing_partition(topic_id, partition)?;
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
        let current = self.existing_partition(topic_id, partition)?;
        let topic = &self.topics[&topic_id];
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
            ConfigResource::Group(id) => {
                if id.is_empty() {
                    return Err(ApplyError::InvalidConfig("empty group id".into()));
                }
                self.group_configs.entry(id.clone()).or_default()
            }
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
        if let ConfigResource::Group(id) = resource {
            if self.group_configs.get(id).is_some_and(BTreeMap::is_empty) {
                self.group_configs.remove(id);
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
mod tests;
