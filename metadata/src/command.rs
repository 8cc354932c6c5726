//! The commands of the metadata log, their responses and their typed rejections.
//!
//! A command is what the controller (the Raft leader) or a forwarding node proposes; once
//! committed it is applied on every node by [`MetadataState::apply`](crate::MetadataState::apply)
//! in log order. Commands carry everything apply needs, timestamps included, so apply is a
//! pure function of the state and the command: no clock, no randomness, no I/O.
//!
//! A rejected command is still a committed log entry; it changes nothing and every node
//! computes the same [`ApplyError`]. Each error maps to a Kafka error code in
//! [`ApplyError::kafka_error_code`], the one place the broker needs for that mapping.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ids::{
    BrokerEpoch, BrokerId, LeaderEpoch, PartitionEpoch, ProducerId, TopicId, Uuid128,
};

/// One entry of the metadata log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// A broker (re)joins the cluster. It starts fenced: it leads nothing until an
    /// [`Command::UnfenceBroker`] once it has caught up with the metadata log. The broker
    /// epoch it gets is the log index of this command.
    RegisterBroker {
        id: BrokerId,
        /// Changes on every broker process start; a different incarnation for a registered,
        /// unfenced id means two processes claim the same `node.id`.
        incarnation: Uuid128,
        rack: Option<String>,
        endpoints: Vec<Endpoint>,
        now_ms: i64,
    },
    /// A broker heartbeat as a log entry, which older versions wrote every heartbeat
    /// interval; still applied when a log holds one. Heartbeats now go to the active
    /// controller's memory instead ([`crate::sessions`]) and nothing proposes this.
    BrokerHeartbeat {
        id: BrokerId,
        broker_epoch: BrokerEpoch,
        now_ms: i64,
    },
    /// The controller fences a broker whose session expired (or which shuts down): it may not
    /// lead partitions nor join ISRs until unfenced.
    FenceBroker { id: BrokerId },
    /// A registered broker has caught up and may lead partitions again.
    UnfenceBroker {
        id: BrokerId,
        broker_epoch: BrokerEpoch,
    },
    /// Forgets a broker's registration (Kafka's UnregisterBroker, for a broker taken out of
    /// the cluster). Propose it after fencing the broker and moving its partitions away; a
    /// broker still running registers again at its next heartbeat.
    UnregisterBroker { id: BrokerId },
    /// Creates a topic with explicit assignments (see [`crate::placement`] to compute them).
    /// Each partition's leader is its first unfenced replica and its ISR its unfenced replicas.
    CreateTopic {
        name: String,
        id: TopicId,
        partitions: Vec<PartitionAssignment>,
        configs: BTreeMap<String, String>,
    },
    /// Deletes a topic, its partitions and its configs.
    DeleteTopic { id: TopicId },
    /// Appends partitions to a topic; the new ones get ids after the existing ones.
    CreatePartitions {
        topic_id: TopicId,
        partitions: Vec<PartitionAssignment>,
    },
    /// Changes a partition's leader and ISR, with Kafka's `AlterPartition` checks; see
    /// [`ApplyError`] for the rejections. `partition_epoch` is the epoch the change was
    /// computed from (compare-and-set); the partition's epoch becomes `partition_epoch + 1`.
    AlterPartition {
        topic_id: TopicId,
        partition: u32,
        leader: Option<BrokerId>,
        leader_epoch: LeaderEpoch,
        isr: Vec<BrokerId>,
        partition_epoch: PartitionEpoch,
    },
    /// Starts or changes a partition's reassignment to `replicas`, or cancels the ongoing one
    /// (`None`); Kafka's AlterPartitionReassignments for one partition. Completes at once
    /// when the ISR already covers the target, else with the `AlterPartition` that makes it
    /// (see [`crate::reassignment`]). Answers [`Response::PartitionAltered`].
    AlterPartitionReassignment {
        topic_id: TopicId,
        partition: u32,
        replicas: Option<Vec<BrokerId>>,
        /// Kafka's `AllowReplicationFactorChange` (v1): false refuses a target whose length
        /// differs from the replicas before the reassignment.
        allow_replication_factor_change: bool,
    },
    /// Kafka's `ElectLeaders` for one partition, decided at apply time from the committed
    /// state (see [`ElectionType`]); on success the leader epoch and the partition epoch grow
    /// by one and the response is [`Response::PartitionAltered`].
    ElectLeader {
        topic_id: TopicId,
        partition: u32,
        election: ElectionType,
    },
    /// Sets (`Some`) or removes (`None`) config keys of one resource, all or nothing. Values
    /// are validated by the broker, which knows the config schema.
    SetConfigs {
        resource: ConfigResource,
        changes: BTreeMap<String, Option<String>>,
    },
    /// Hands a broker the next block of producer ids.
    AllocateProducerIds {
        broker: BrokerId,
        broker_epoch: BrokerEpoch,
        count: u32,
    },
    /// Stores an opaque record (ACL binding, SCRAM credential, client quota) under a key.
    PutRecord {
        kind: RecordKind,
        key: String,
        value: Vec<u8>,
    },
    /// Removes an opaque record; removing an absent key is not an error.
    DeleteRecord { kind: RecordKind, key: String },
    /// Sets the cluster id (what Kafka's `kafka-storage format --cluster-id` writes into every
    /// node's `meta.properties`) once: the first such command of a quorum sets it, every later
    /// one changes nothing. Both answer [`Response::ClusterId`] with the id in force, so a
    /// broker proposes its candidate (its configured `cluster.id`, the one its log dirs
    /// carry, or a fresh one) and adopts, or refuses, whatever the quorum holds.
    SetClusterId { cluster_id: String },
    /// Recreates the topics of a lost cluster from its bucket's catalog, once per quorum: the
    /// first such command decides ([`Response::BucketRestore`]), and every later one changes
    /// nothing, so a catalog read after the cluster has lived on never brings back a topic
    /// deleted since. The topics are created (with their ids, configs and assignments; each
    /// partition at its given leader epoch) only when the quorum holds no topic yet; the
    /// producer-id counter moves up to `next_producer_id`. All or nothing: one invalid topic
    /// rejects the command, and the marker stays unset.
    RestoreFromBucket {
        topics: Vec<RestoredTopic>,
        next_producer_id: i64,
    },
}

/// A topic of a [`Command::RestoreFromBucket`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoredTopic {
    pub name: String,
    pub id: TopicId,
    pub partitions: Vec<PartitionAssignment>,
    /// Each partition's first leader epoch: above every epoch its remote data was written in,
    /// so the new leaders' appends and uploads are never fenced by the old ones.
    pub leader_epochs: Vec<LeaderEpoch>,
    pub configs: BTreeMap<String, String>,
}

impl Command {
    /// A short name for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Command::RegisterBroker { .. } => "register_broker",
            Command::BrokerHeartbeat { .. } => "broker_heartbeat",
            Command::FenceBroker { .. } => "fence_broker",
            Command::UnfenceBroker { .. } => "unfence_broker",
            Command::UnregisterBroker { .. } => "unregister_broker",
            Command::CreateTopic { .. } => "create_topic",
            Command::DeleteTopic { .. } => "delete_topic",
            Command::CreatePartitions { .. } => "create_partitions",
            Command::AlterPartition { .. } => "alter_partition",
            Command::AlterPartitionReassignment { .. } => "alter_partition_reassignment",
            Command::ElectLeader { .. } => "elect_leader",
            Command::SetConfigs { .. } => "set_configs",
            Command::AllocateProducerIds { .. } => "allocate_producer_ids",
            Command::RestoreFromBucket { .. } => "restore_from_bucket",
            Command::PutRecord { .. } => "put_record",
            Command::DeleteRecord { .. } => "delete_record",
            Command::SetClusterId { .. } => "set_cluster_id",
        }
    }
}

/// A listener a broker advertises.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    pub listener: String,
    pub host: String,
    pub port: u16,
    pub security_protocol: String,
}

/// The replicas of one partition; the first is the preferred leader.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionAssignment {
    pub replicas: Vec<BrokerId>,
}

/// The election types of Kafka's `ElectLeaders` (KIP-460), as its `PartitionChangeBuilder`
/// runs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ElectionType {
    /// Move leadership to the preferred replica (the first in the replica list) when it is in
    /// the ISR and unfenced; a leaderless partition gets its first usable ISR member instead.
    /// Not needed when the preferred replica already leads.
    Preferred,
    /// Give a leaderless partition a leader: the first usable ISR member, else the first
    /// usable replica, which becomes the whole ISR (records only the old ISR had may be
    /// lost). Ignores `unclean.leader.election.enable`. Not needed while there is a leader.
    Unclean,
}

/// What a config change applies to.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ConfigResource {
    /// A topic, by name (as Kafka's config records do).
    Topic(String),
    /// One broker's dynamic config.
    Broker(BrokerId),
    /// The cluster-wide dynamic broker default (Kafka's broker resource with an empty name).
    ClusterDefault,
    /// A consumer/share/streams group, by id (Kafka's GROUP config resource); it need not
    /// exist, and deleting the group keeps its configs.
    Group(String),
}

/// The kinds of opaque records the metadata log stores for the broker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum RecordKind {
    Acl,
    ScramCredential,
    ClientQuota,
    /// The finalized feature levels (one record).
    Features,
    /// A delegation token's information, keyed by token id.
    DelegationToken,
}

/// A block of producer ids owned by one broker: `[first, first + count)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerIdBlock {
    pub broker: BrokerId,
    pub first: ProducerId,
    pub count: u32,
}

/// What an applied command returns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// Log entries that are not commands (Raft's blank and membership entries).
    Noop,
    BrokerRegistered {
        broker_epoch: BrokerEpoch,
    },
    /// Whether the broker is (still) fenced after the heartbeat.
    HeartbeatAccepted {
        fenced: bool,
    },
    /// Fence/unfence; `changed` is false when the broker already was in that state.
    BrokerFencing {
        fenced: bool,
        changed: bool,
    },
    BrokerUnregistered,
    TopicCreated {
        id: TopicId,
        partitions: u32,
    },
    TopicDeleted {
        name: String,
    },
    PartitionsCreated {
        total: u32,
    },
    PartitionAltered {
        leader: Option<BrokerId>,
        leader_epoch: LeaderEpoch,
        partition_epoch: PartitionEpoch,
    },
    ConfigsSet,
    ProducerIdsAllocated(ProducerIdBlock),
    RecordPut,
    /// Whether a record with that key existed.
    RecordDeleted {
        existed: bool,
    },
    /// The quorum's cluster id after a [`Command::SetClusterId`]; `newly_set` is true when
    /// this command set it, false when an earlier one had (the proposed id may differ).
    ClusterId {
        cluster_id: String,
        newly_set: bool,
    },
    /// What the quorum's one [`Command::RestoreFromBucket`] decided: `created` topics, or
    /// `refused` with the reason (the quorum already held topics, or an earlier restore
    /// decided); `newly_decided` is false when an earlier command had decided.
    BucketRestore {
        created: Vec<String>,
        refused: Option<String>,
        newly_decided: bool,
    },
}

/// The result every node computes for a committed command.
pub type CommandResult = Result<Response, ApplyError>;

/// The largest producer-id block one command may take (Kafka hands out blocks of 1000).
pub const MAX_PRODUCER_ID_BLOCK: u32 = 1_000_000;

/// Why a committed command changed nothing.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum ApplyError {
    #[error("broker id {0} is invalid: broker ids are non-negative")]
    InvalidBrokerId(i32),
    #[error("broker {0} is not registered")]
    BrokerNotRegistered(BrokerId),
    #[error("broker {id} is already registered by another live incarnation {incarnation}")]
    DuplicateBrokerRegistration { id: BrokerId, incarnation: Uuid128 },
    #[error("broker {id} epoch {requested} is stale: the current epoch is {current}")]
    StaleBrokerEpoch {
        id: BrokerId,
        requested: BrokerEpoch,
        current: BrokerEpoch,
    },
    #[error("invalid topic name {name:?}: {reason}")]
    InvalidTopicName { name: String, reason: String },
    #[error("topic {name:?} already exists")]
    TopicAlreadyExists { name: String },
    #[error("topic id {0} is already in use")]
    TopicIdInUse(TopicId),
    #[error("the all-zero topic id is reserved")]
    ZeroTopicId,
    #[error("unknown topic id {0}")]
    UnknownTopicId(TopicId),
    #[error("unknown topic {0:?}")]
    UnknownTopic(String),
    #[error("topic {topic_id} has no partition {partition}")]
    UnknownPartition { topic_id: TopicId, partition: u32 },
    #[error("invalid partition count: {0}")]
    InvalidPartitions(String),
    #[error("invalid replica assignment: {0}")]
    InvalidReplicaAssignment(String),
    #[error("partition {topic_id}-{partition}: partition epoch {requested} does not match the current {current}")]
    InvalidUpdateVersion {
        topic_id: TopicId,
        partition: u32,
        requested: PartitionEpoch,
        current: PartitionEpoch,
    },
    #[error("partition {topic_id}-{partition}: leader epoch {requested} is older than the current {current} (or the leader changed without a newer epoch)")]
    FencedLeaderEpoch {
        topic_id: TopicId,
        partition: u32,
        requested: LeaderEpoch,
        current: LeaderEpoch,
    },
    #[error("partition {topic_id}-{partition}: invalid ISR or leader: {reason}")]
    InvalidIsr {
        topic_id: TopicId,
        partition: u32,
        reason: String,
    },
    #[error("partition {topic_id}-{partition}: broker {broker} is fenced or not registered and cannot lead or join the ISR")]
    IneligibleReplica {
        topic_id: TopicId,
        partition: u32,
        broker: BrokerId,
    },
    #[error("partition {topic_id}-{partition}: leader election not needed")]
    ElectionNotNeeded { topic_id: TopicId, partition: u32 },
    #[error(
        "partition {topic_id}-{partition}: the preferred leader is not in the ISR or is fenced"
    )]
    PreferredLeaderNotAvailable { topic_id: TopicId, partition: u32 },
    #[error("partition {topic_id}-{partition}: no replica is unfenced")]
    EligibleLeadersNotAvailable { topic_id: TopicId, partition: u32 },
    #[error("invalid config: {0}")]
    InvalidConfig(String),
    #[error("{0}")]
    InvalidReplicationFactor(String),
    #[error("partition {topic_id}-{partition}: no partition reassignment is in progress")]
    NoReassignmentInProgress { topic_id: TopicId, partition: u32 },
    #[error("invalid producer id block size {0}: must be between 1 and {MAX_PRODUCER_ID_BLOCK}")]
    InvalidProducerIdCount(u32),
    #[error("producer ids are exhausted")]
    ProducerIdsExhausted,
    #[error("invalid record key: {0}")]
    InvalidRecordKey(String),
    #[error("invalid cluster id {cluster_id:?}: {reason}")]
    InvalidClusterId { cluster_id: String, reason: String },
}

impl ApplyError {
    /// The Kafka protocol error code a broker returns for this rejection.
    pub fn kafka_error_code(&self) -> i16 {
        match self {
            ApplyError::InvalidBrokerId(_) => kafka_codes::INVALID_REQUEST,
            ApplyError::BrokerNotRegistered(_) => kafka_codes::BROKER_ID_NOT_REGISTERED,
            ApplyError::DuplicateBrokerRegistration { .. } => {
                kafka_codes::DUPLICATE_BROKER_REGISTRATION
            }
            ApplyError::StaleBrokerEpoch { .. } => kafka_codes::STALE_BROKER_EPOCH,
            ApplyError::InvalidTopicName { .. } | ApplyError::ZeroTopicId => {
                kafka_codes::INVALID_TOPIC_EXCEPTION
            }
            ApplyError::TopicAlreadyExists { .. } | ApplyError::TopicIdInUse(_) => {
                kafka_codes::TOPIC_ALREADY_EXISTS
            }
            ApplyError::UnknownTopicId(_) => kafka_codes::UNKNOWN_TOPIC_ID,
            ApplyError::UnknownTopic(_) | ApplyError::UnknownPartition { .. } => {
                kafka_codes::UNKNOWN_TOPIC_OR_PARTITION
            }
            ApplyError::InvalidPartitions(_) => kafka_codes::INVALID_PARTITIONS,
            ApplyError::InvalidReplicaAssignment(_) => kafka_codes::INVALID_REPLICA_ASSIGNMENT,
            ApplyError::InvalidUpdateVersion { .. } => kafka_codes::INVALID_UPDATE_VERSION,
            ApplyError::FencedLeaderEpoch { .. } => kafka_codes::FENCED_LEADER_EPOCH,
            ApplyError::InvalidIsr { .. } => kafka_codes::INVALID_REQUEST,
            ApplyError::IneligibleReplica { .. } => kafka_codes::INELIGIBLE_REPLICA,
            ApplyError::ElectionNotNeeded { .. } => kafka_codes::ELECTION_NOT_NEEDED,
            ApplyError::PreferredLeaderNotAvailable { .. } => {
                kafka_codes::PREFERRED_LEADER_NOT_AVAILABLE
            }
            ApplyError::EligibleLeadersNotAvailable { .. } => {
                kafka_codes::ELIGIBLE_LEADERS_NOT_AVAILABLE
            }
            ApplyError::InvalidConfig(_) => kafka_codes::INVALID_CONFIG,
            ApplyError::InvalidReplicationFactor(_) => kafka_codes::INVALID_REPLICATION_FACTOR,
            ApplyError::NoReassignmentInProgress { .. } => kafka_codes::NO_REASSIGNMENT_IN_PROGRESS,
            ApplyError::InvalidProducerIdCount(_)
            | ApplyError::InvalidRecordKey(_)
            | ApplyError::InvalidClusterId { .. } => kafka_codes::INVALID_REQUEST,
            ApplyError::ProducerIdsExhausted => kafka_codes::UNKNOWN_SERVER_ERROR,
        }
    }
}

/// The longest cluster id accepted (Kafka's are 22 characters; a configured one may be a name).
pub const MAX_CLUSTER_ID_LEN: usize = 255;

/// Checks a cluster id: 1 to [`MAX_CLUSTER_ID_LEN`] ASCII letters, digits, `-`, `_` or `.`
/// (Kafka's base64 UUIDs, and names such as `prod-eu-1`), so that it reads back unchanged
/// from `meta.properties` and cannot be mistaken for another id. The broker checks its
/// `cluster.id` setting with it too.
pub fn validate_cluster_id(cluster_id: &str) -> Result<(), ApplyError> {
    let invalid = |reason: &str| {
        Err(ApplyError::InvalidClusterId {
            cluster_id: cluster_id.chars().take(MAX_CLUSTER_ID_LEN + 1).collect(),
            reason: reason.into(),
        })
    };
    if cluster_id.is_empty() {
        return invalid("it is empty");
    }
    if cluster_id.len() > MAX_CLUSTER_ID_LEN {
        return invalid("it is longer than 255 characters");
    }
    if !cluster_id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return invalid("only ASCII letters, digits, '-', '_' and '.' are allowed");
    }
    Ok(())
}

/// The Kafka error codes this crate's errors map to (from Kafka's `Errors` enum).
pub mod kafka_codes {
    pub const UNKNOWN_SERVER_ERROR: i16 = -1;
    pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
    pub const REQUEST_TIMED_OUT: i16 = 7;
    pub const INVALID_TOPIC_EXCEPTION: i16 = 17;
    pub const TOPIC_ALREADY_EXISTS: i16 = 36;
    pub const INVALID_PARTITIONS: i16 = 37;
    pub const INVALID_REPLICATION_FACTOR: i16 = 38;
    pub const INVALID_REPLICA_ASSIGNMENT: i16 = 39;
    pub const INVALID_CONFIG: i16 = 40;
    pub const NOT_CONTROLLER: i16 = 41;
    pub const INVALID_REQUEST: i16 = 42;
    pub const FENCED_LEADER_EPOCH: i16 = 74;
    pub const NO_REASSIGNMENT_IN_PROGRESS: i16 = 85;
    pub const STALE_BROKER_EPOCH: i16 = 77;
    pub const PREFERRED_LEADER_NOT_AVAILABLE: i16 = 80;
    pub const ELIGIBLE_LEADERS_NOT_AVAILABLE: i16 = 83;
    pub const ELECTION_NOT_NEEDED: i16 = 84;
    pub const INVALID_UPDATE_VERSION: i16 = 95;
    pub const UNKNOWN_TOPIC_ID: i16 = 100;
    pub const DUPLICATE_BROKER_REGISTRATION: i16 = 101;
    pub const BROKER_ID_NOT_REGISTERED: i16 = 102;
    pub const INELIGIBLE_REPLICA: i16 = 107;
}
