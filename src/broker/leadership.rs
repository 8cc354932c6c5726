//! Partition leadership as the control plane decides it, and what a leader proposes back
//! (Kafka's PartitionRegistration, AlterPartition and BrokerRegistration, the parts the data
//! plane needs). See [`crate::replication`] for how they flow.

use futures::future::BoxFuture;
use uuid::Uuid;

use super::{LeaderEpoch, TopicError};

/// One partition's leadership as decided by the control plane (Kafka's PartitionRecord /
/// PartitionChangeRecord applied to a `PartitionRegistration`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionLeadership {
    pub topic: String,
    pub topic_id: Uuid,
    pub partition: i32,
    /// `None` while no replica can lead (offline partition).
    pub leader: Option<i32>,
    pub leader_epoch: LeaderEpoch,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    /// Bumped on every change of the partition (leader or ISR); fences stale ISR updates.
    pub partition_epoch: i32,
}

/// A listener of a broker as clients and followers reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerEndpoint {
    pub listener: String,
    pub host: String,
    pub port: u16,
}

/// A registered broker (Kafka's BrokerRegistration, the part the data plane needs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterBroker {
    pub id: i32,
    pub rack: Option<String>,
    pub endpoints: Vec<BrokerEndpoint>,
}

impl ClusterBroker {
    pub fn endpoint(&self, listener: &str) -> Option<&BrokerEndpoint> {
        self.endpoints.iter().find(|e| e.listener == listener)
    }
}

/// Kafka's AlterPartition request for one partition: the leader proposes a new ISR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterPartitionRequest {
    pub topic_id: Uuid,
    pub partition: i32,
    /// The proposer's leader epoch.
    pub leader_epoch: LeaderEpoch,
    pub new_isr: Vec<i32>,
    /// The partition epoch the proposal is based on.
    pub partition_epoch: i32,
}

/// The committed state after an ISR change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderAndIsr {
    pub leader: Option<i32>,
    pub leader_epoch: LeaderEpoch,
    pub isr: Vec<i32>,
    pub partition_epoch: i32,
}

/// Why an ISR change was refused (Kafka's AlterPartition error codes).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AlterPartitionError {
    #[error("the proposer's leader epoch is stale (FENCED_LEADER_EPOCH)")]
    FencedLeaderEpoch,
    #[error("the partition epoch is stale (INVALID_UPDATE_VERSION)")]
    InvalidUpdateVersion,
    #[error("unknown topic or partition")]
    UnknownTopicOrPartition,
    #[error("the proposed ISR is not a subset of the replicas (INVALID_REQUEST)")]
    InvalidRequest,
    /// Transient: the quorum could not be reached. The leader proposes again later.
    #[error("the controller is not available: {0}")]
    Unavailable(String),
}

impl AlterPartitionError {
    pub fn is_retriable(&self) -> bool {
        matches!(self, AlterPartitionError::Unavailable(_))
    }
}

/// Where a leader sends ISR changes: the control plane implements it through the quorum.
pub trait IsrChangeSink: Send + Sync {
    fn alter_partition(
        &self,
        request: AlterPartitionRequest,
    ) -> BoxFuture<'static, Result<LeaderAndIsr, AlterPartitionError>>;
}

/// Errors of applying control-plane state.
#[derive(Debug, thiserror::Error)]
pub enum ReplicationError {
    #[error("topic {topic} exists here with id {local}, not {given}")]
    TopicIdMismatch {
        topic: String,
        local: Uuid,
        given: Uuid,
    },
    #[error("invalid partition state for {topic}-{partition}: {reason}")]
    InvalidState {
        topic: String,
        partition: i32,
        reason: &'static str,
    },
    #[error(transparent)]
    Topic(#[from] TopicError),
    #[error("storage error: {0}")]
    Io(#[from] std::io::Error),
}
