//! The broker's replication state: the cluster view, every partition's leadership as last
//! applied, where ISR changes go and the queue of proposals; the replica fetchers and the ISR
//! updater ([`crate::replication`]) act on it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use tokio::sync::{mpsc, Notify};

use super::leadership::{AlterPartitionRequest, ClusterBroker, IsrChangeSink, PartitionLeadership};
use super::Partition;
use crate::peer;
use crate::quota::replication::ReplicationThrottles;

/// An ISR change for the updater task to send.
pub struct IsrJob {
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
    /// `leader.` / `follower.replication.throttled.rate`, measured.
    pub(crate) throttles: ReplicationThrottles,
}

impl Default for ReplicaManager {
    fn default() -> Self {
        ReplicaManager::new(
            peer::PeerSecurity::plaintext(),
            ReplicationThrottles::default(),
        )
    }
}

impl ReplicaManager {
    /// With `security` for the connections to other brokers, and the replication throttles.
    pub fn new(security: peer::PeerSecurity, throttles: ReplicationThrottles) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        ReplicaManager {
            cluster: RwLock::new(None),
            leadership: RwLock::new(HashMap::new()),
            sink: RwLock::new(None),
            follow_changed: Notify::new(),
            isr_jobs: tx,
            isr_receiver: Mutex::new(Some(rx)),
            peers: peer::PeerPool::new(security),
            throttles,
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

    pub(crate) fn sink(&self) -> Option<Arc<dyn IsrChangeSink>> {
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

    pub(crate) fn take_isr_receiver(&self) -> Option<mpsc::UnboundedReceiver<IsrJob>> {
        self.isr_receiver
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }
}

/// How long a one-off request to another broker may take.
const PEER_REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Sends one request to another broker's inter-broker listener and waits for its response.
/// Blocking: call from a blocking thread of the runtime (its workers drive the socket).
pub(crate) fn call_broker<R: kafka_protocol::protocol::Request>(
    broker: &super::Broker,
    (host, port): (&str, u16),
    role: &str,
    version: i16,
    request: &R,
) -> Result<R::Response, crate::peer::PeerError> {
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(crate::peer::PeerError::Io(std::io::Error::other(
            "no runtime to reach the broker",
        )));
    }
    let client_id = format!("broker-{}-{role}", broker.config.node_id);
    let socket_timeout = broker.config.replication.socket_timeout;
    futures::executor::block_on(broker.replication().peers.call(
        host,
        port,
        &client_id,
        socket_timeout,
        version,
        request,
        PEER_REQUEST_TIMEOUT,
    ))
}
