//! Replication data plane: partition leadership as decided by the control plane, the leader's
//! follower tracking (high watermark, ISR), and the followers' replica fetchers.
//!
//! Interface with the control plane (the Raft metadata quorum, see [`crate::controller`]), in
//! this order after start-up and again after every change it commits:
//! 1. [`crate::broker::Broker::set_cluster_brokers`]: every registered broker with its
//!    listeners (followers connect to `inter.broker.listener.name`, else the first listener);
//! 2. [`crate::broker::Broker::set_isr_change_sink`]: where this broker, as a leader, proposes
//!    ISR changes (Kafka's AlterPartition). The sink answers the committed [`LeaderAndIsr`]
//!    (with the bumped partition epoch) or an [`AlterPartitionError`]; the leader then applies
//!    it, and the control plane should also publish it as a new partition state;
//! 3. [`crate::broker::Broker::apply_partition_states`] (blocking): leader, leader epoch,
//!    replicas, ISR and partition epoch per partition. This broker becomes leader or follower
//!    exactly as Kafka's `Partition.makeLeader` / `makeFollower` do; states older than the
//!    partition epoch already applied are ignored; fetchers are (re)started; the group and
//!    transaction coordinators load or unload the `__consumer_offsets` /
//!    `__transaction_state` partitions this broker starts or stops leading. Nothing of it is
//!    persisted: after a restart the control plane applies the states again, and until then
//!    the broker behaves as a single node.
//!
//! [`in_process::InProcessController`] implements this for brokers in one process (tests).
//!
//! Until a state is applied a partition behaves as on a single node: this broker leads it with
//! ISR = {itself} and the high watermark follows the log end offset, with no extra lock on the
//! append path.
//!
//! Concurrency: per partition, the replica set (`state::ReplicaSet`) is behind its own mutex,
//! taken before the log lock and never the other way round; role, leader, epoch and ISR sizes
//! are atomics written under both, so the produce and fetch paths read them without locking.
//! Fetchers and the ISR updater are tasks owned by [`run`], which the runtime spawns and
//! cancels; they ask the partition to change rather than share its locks.
//!
//! Crash consistency: leader epochs live in the log's `leader-epoch-checkpoint`; a replica
//! restarts from its `replication-offset-checkpoint` high watermark once a state is applied.
//! Retries: fetch errors back off by `replica.fetch.backoff.ms`; a refused or unanswered ISR
//! change is proposed again by the next fetch or expiration check.

pub mod fetcher;
pub mod in_process;
pub mod peer;
pub mod state;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use futures::future::BoxFuture;
use tokio::sync::{mpsc, Notify};
use uuid::Uuid;

use crate::broker::Partition;

/// One partition's leadership as decided by the control plane (Kafka's PartitionRecord /
/// PartitionChangeRecord applied to a `PartitionRegistration`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionLeadership {
    pub topic: String,
    pub topic_id: Uuid,
    pub partition: i32,
    /// `None` while no replica can lead (offline partition).
    pub leader: Option<i32>,
    pub leader_epoch: i32,
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
    pub leader_epoch: i32,
    pub new_isr: Vec<i32>,
    /// The partition epoch the proposal is based on.
    pub partition_epoch: i32,
}

/// The committed state after an ISR change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderAndIsr {
    pub leader: Option<i32>,
    pub leader_epoch: i32,
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
    Topic(#[from] crate::broker::TopicError),
    #[error("storage error: {0}")]
    Io(#[from] std::io::Error),
}

/// An ISR change for the updater task to send.
pub(crate) struct IsrJob {
    pub partition: Arc<Partition>,
    pub request: AlterPartitionRequest,
    /// The committed ISR's size when the change was proposed.
    pub isr_len_before: usize,
}

/// The broker's replication state shared by the API handlers, the fetchers and the control
/// plane's calls.
pub struct ReplicaManager {
    cluster: RwLock<Option<Arc<Vec<ClusterBroker>>>>,
    /// Every partition's leadership as last applied (for Metadata), by (topic, partition).
    leadership: RwLock<HashMap<(String, i32), PartitionLeadership>>,
    sink: RwLock<Option<Arc<dyn IsrChangeSink>>>,
    /// Woken when the set of followed partitions or the cluster changes.
    pub(crate) follow_changed: Notify,
    isr_jobs: mpsc::UnboundedSender<IsrJob>,
    isr_receiver: Mutex<Option<mpsc::UnboundedReceiver<IsrJob>>>,
    /// Connections to other brokers (with the inter-broker listener's TLS and SASL): the
    /// coordinators' requests and the replica fetchers' connections.
    pub(crate) peers: peer::PeerPool,
}

impl Default for ReplicaManager {
    fn default() -> Self {
        ReplicaManager::new(peer::PeerSecurity::plaintext())
    }
}

impl ReplicaManager {
    /// With `security` for the connections to other brokers.
    pub fn new(security: peer::PeerSecurity) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        ReplicaManager {
            cluster: RwLock::new(None),
            leadership: RwLock::new(HashMap::new()),
            sink: RwLock::new(None),
            follow_changed: Notify::new(),
            isr_jobs: tx,
            isr_receiver: Mutex::new(Some(rx)),
            peers: peer::PeerPool::new(security),
        }
    }
}

impl ReplicaManager {
    /// The registered brokers, when the control plane has set them.
    pub fn cluster(&self) -> Option<Arc<Vec<ClusterBroker>>> {
        self.cluster
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(crate) fn set_cluster(&self, brokers: Vec<ClusterBroker>) {
        *self.cluster.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(brokers));
        self.follow_changed.notify_one();
    }

    /// The replicas whose broker is not in the cluster view (fenced or unregistered); none
    /// before the control plane sets a view.
    pub fn ineligible_among(&self, replicas: &[i32]) -> std::collections::BTreeSet<i32> {
        let Some(view) = self.cluster() else {
            return Default::default();
        };
        replicas
            .iter()
            .copied()
            .filter(|id| !view.iter().any(|b| b.id == *id))
            .collect()
    }

    pub fn cluster_broker(&self, id: i32) -> Option<ClusterBroker> {
        self.cluster()?.iter().find(|b| b.id == id).cloned()
    }

    /// The leadership of a partition as last applied (`None` on a single node).
    pub fn leadership(&self, topic: &str, partition: i32) -> Option<PartitionLeadership> {
        self.leadership
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(topic.to_string(), partition))
            .cloned()
    }

    pub(crate) fn record_leadership(&self, state: PartitionLeadership) {
        let mut map = self.leadership.write().unwrap_or_else(|e| e.into_inner());
        let key = (state.topic.clone(), state.partition);
        match map.get(&key) {
            Some(old)
                if old.topic_id == state.topic_id
                    && (old.leader_epoch, old.partition_epoch)
                        > (state.leader_epoch, state.partition_epoch) => {}
            _ => {
                map.insert(key, state);
            }
        }
    }

    pub(crate) fn forget_topic(&self, topic: &str) {
        self.leadership
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(t, _), _| t != topic);
    }

    pub(crate) fn set_sink(&self, sink: Arc<dyn IsrChangeSink>) {
        *self.sink.write().unwrap_or_else(|e| e.into_inner()) = Some(sink);
    }

    fn sink(&self) -> Option<Arc<dyn IsrChangeSink>> {
        self.sink.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Queues an ISR change proposed by a partition leader.
    pub(crate) fn propose(&self, partition: Arc<Partition>, request: AlterPartitionRequest) {
        let isr_len_before = partition.isr_len();
        let job = IsrJob {
            partition,
            request,
            isr_len_before,
        };
        if self.isr_jobs.send(job).is_err() {
            tracing::debug!("ISR updater stopped; proposal dropped");
        }
    }

    fn take_isr_receiver(&self) -> Option<mpsc::UnboundedReceiver<IsrJob>> {
        self.isr_receiver
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }
}

/// Runs the replication services until `shutdown`: the replica fetchers, the ISR updater
/// (sends proposals through the sink) and the ISR expiration check (every half
/// `replica.lag.time.max.ms`, as in Kafka).
pub async fn run(
    broker: Arc<crate::broker::Broker>,
    tiering: Option<Arc<crate::tiering::Tiering>>,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let tasks = tokio_util::task::TaskTracker::new();
    tasks.spawn(fetcher::manage(broker.clone(), tiering, shutdown.clone()));
    if let Some(rx) = broker.replication().take_isr_receiver() {
        tasks.spawn(update_isr(broker.clone(), rx, shutdown.clone()));
    }
    tasks.spawn(expire_isr(broker.clone(), shutdown.clone()));
    tasks.close();
    tasks.wait().await;
}

async fn update_isr(
    broker: Arc<crate::broker::Broker>,
    mut rx: mpsc::UnboundedReceiver<IsrJob>,
    shutdown: tokio_util::sync::CancellationToken,
) {
    loop {
        let job = tokio::select! {
            _ = shutdown.cancelled() => return,
            job = rx.recv() => match job { Some(j) => j, None => return },
        };
        let Some(sink) = broker.replication().sink() else {
            tracing::debug!(topic = %job.partition.topic, partition = job.partition.index, "no ISR change sink: ISR stays");
            job.partition.isr_change_failed(&job.request);
            continue;
        };
        let request = job.request.clone();
        let answer = tokio::select! {
            _ = shutdown.cancelled() => return,
            a = sink.alter_partition(request) => a,
        };
        match answer {
            Ok(committed) => {
                let before = job.isr_len_before;
                let counter = if committed.isr.len() < before {
                    Some(&broker.metrics.isr_shrinks)
                } else if committed.isr.len() > before {
                    Some(&broker.metrics.isr_expands)
                } else {
                    None
                };
                if let Some(c) = counter {
                    c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                tracing::info!(topic = %job.partition.topic, partition = job.partition.index, isr = ?committed.isr, partition_epoch = committed.partition_epoch, "ISR updated");
                let p = job.partition.clone();
                let now = crate::clock::now_ms();
                let _ = crate::blocking::run(move || p.isr_change_committed(&committed, now)).await;
            }
            Err(e) => {
                if e.is_retriable() {
                    tracing::info!(topic = %job.partition.topic, partition = job.partition.index, error = %e, "ISR change not committed; will propose again");
                } else {
                    tracing::debug!(topic = %job.partition.topic, partition = job.partition.index, error = %e, "ISR change refused");
                }
                job.partition.isr_change_failed(&job.request);
            }
        }
    }
}

async fn expire_isr(
    broker: Arc<crate::broker::Broker>,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let every = (broker.config.replication.replica_lag_time_max / 2)
        .max(std::time::Duration::from_millis(10));
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let b = broker.clone();
        let shrink = move || {
            let now = crate::clock::now_ms();
            for p in b.all_partitions() {
                if let Some(request) = p.maybe_shrink_isr(now) {
                    b.replication().propose(p, request);
                }
            }
        };
        if crate::blocking::run(shrink).await.is_err() {
            tracing::error!("ISR expiration check panicked");
        }
    }
}
