//! [`TransactionLog`] and [`Participants`] on top of the broker: `__transaction_state`
//! partitions of its own log (appends acknowledged like acks=all), producer ids from its
//! block, and markers: written straight to a partition this broker leads (or that the control
//! plane never assigned), else sent as WriteTxnMarkers to the partition's leader through the
//! cluster view (Kafka's `TransactionMarkerChannelManager`). A marker that is not written
//! (NOT_LEADER_OR_FOLLOWER, an unreachable leader, ...) is retried by the coordinator's timer,
//! towards the leader known then.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{ProducerId, TopicName, WriteTxnMarkersRequest};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Compression;
use kafka_protocol::ResponseError;

use super::{
    MarkerError, Participants, TransactionCoordinator, TransactionLog, TxnConfig,
    TRANSACTION_STATE_TOPIC,
};
use crate::broker::CatalogListener;
use crate::broker::{Broker, Partition, Topic, TopicError};
use crate::clock::now_ms;
use crate::coordinator::offsets_log::{append_replicated, await_replicated, scan_batches};
use crate::coordinator::offsets_topic::partition_for;
use crate::coordinator::ownership::Ownership;
use crate::coordinator::GroupCoordinator;
use crate::coordinator::{LogWriteError, OFFSETS_TOPIC};
use crate::log::batch::build_batch;
use crate::log::TxnMarker;
use crate::replication::PartitionLeadership;

/// How long a transaction state write or a marker waits for the in-sync replicas (Kafka
/// uses `request.timeout.ms` for both).
const REPLICATION_TIMEOUT: Duration = Duration::from_secs(30);
/// WriteTxnMarkers v1 (flexible), which every Strata broker serves: a rolling upgrade keeps
/// brokers that do not know v2 yet, and this request is not version-negotiated. v1 carries
/// no transaction version, so a remote leader checks the marker's epoch with the older rule
/// (not below the producer's); markers this broker writes itself use the transaction's
/// version (see [`crate::log::TxnMarker`]).
const WRITE_TXN_MARKERS_VERSION: i16 = 1;

impl TransactionCoordinator {
    /// The broker's transaction coordinator: creates `__transaction_state` if needed and
    /// replays it. Markers on `__consumer_offsets` complete `groups`' pending offsets.
    /// Blocking.
    pub fn open(
        broker: &Arc<Broker>,
        groups: Arc<GroupCoordinator>,
    ) -> io::Result<Arc<TransactionCoordinator>> {
        let c = &broker.config;
        let log = BrokerTransactionLog::new(broker.clone(), c.transaction_state_log_num_partitions);
        log.ensure_topic()?;
        let coordinator = TransactionCoordinator::with_ownership(
            TxnConfig {
                max_timeout_ms: c.transaction_max_timeout_ms,
                transactional_id_expiration_ms: c.transactional_id_expiration_ms,
                abort_timed_out_interval: Duration::from_millis(
                    c.transaction_abort_timed_out_transaction_cleanup_interval_ms,
                ),
                remove_expired_interval: Duration::from_millis(
                    c.transaction_remove_expired_transaction_cleanup_interval_ms,
                ),
            },
            Arc::new(log),
            Arc::new(BrokerParticipants::new(broker.clone(), groups)),
            Arc::new(Ownership::new(c.cluster.is_some())),
        );
        let records = coordinator.load()?;
        tracing::info!(
            records,
            "transaction coordinator loaded __transaction_state"
        );
        Ok(Arc::new(coordinator))
    }
}

/// The coordinator follows the leadership of the `__transaction_state` partitions.
impl CatalogListener for TransactionCoordinator {
    fn leadership_applied(&self, state: &PartitionLeadership, leader: bool) {
        if state.topic != TRANSACTION_STATE_TOPIC {
            return;
        }
        if leader {
            self.on_election(state.partition, state.leader_epoch.0);
        } else {
            self.on_resignation(state.partition);
        }
    }
}

pub struct BrokerTransactionLog {
    broker: Arc<Broker>,
    partitions: i32,
}

impl BrokerTransactionLog {
    pub fn new(broker: Arc<Broker>, partitions: i32) -> Self {
        BrokerTransactionLog { broker, partitions }
    }

    /// The topic, created (compacted, uncompressed, as Kafka enforces) on first use.
    fn topic(&self, create: bool) -> io::Result<Option<Arc<Topic>>> {
        let broker = &self.broker;
        if let Some(t) = broker.topic(TRANSACTION_STATE_TOPIC) {
            return Ok(Some(t));
        }
        // In cluster mode the quorum creates it (on the first FindCoordinator), never a broker.
        if !create || broker.config.cluster.is_some() {
            return Ok(None);
        }
        let spec = crate::coordinator::internal_topics::spec(
            &broker.config,
            TRANSACTION_STATE_TOPIC,
            false,
        )
        .ok_or_else(|| io::Error::other("no spec for the transaction state topic"))?;
        match broker.create_topic(TRANSACTION_STATE_TOPIC, spec.partitions, 1, spec.configs) {
            Ok(t) => Ok(Some(t)),
            Err(TopicError::AlreadyExists(_)) => Ok(broker.topic(TRANSACTION_STATE_TOPIC)),
            Err(e) => Err(io::Error::other(e.to_string())),
        }
    }

    /// Creates the topic if it does not exist yet (at coordinator start, as Kafka does).
    pub fn ensure_topic(&self) -> io::Result<()> {
        self.topic(true).map(drop)
    }
}

impl TransactionLog for BrokerTransactionLog {
    fn append(
        &self,
        transactional_id: &str,
        key: Bytes,
        value: Option<Bytes>,
    ) -> Result<(), LogWriteError> {
        let unavailable = |e: String| LogWriteError::Unavailable(e);
        let topic = self
            .topic(true)
            .map_err(|e| unavailable(e.to_string()))?
            .ok_or_else(|| unavailable("no transaction state topic".into()))?;
        let index = partition_for(transactional_id, topic.partitions.len() as i32) as usize;
        let partition = topic
            .partitions
            .get(index)
            .ok_or_else(|| unavailable("transaction state partition missing".into()))?;
        let buf = build_batch(
            std::iter::once((now_ms(), Some(key), value)),
            Compression::None,
        )
        .map_err(|e| LogWriteError::Storage(format!("cannot encode transaction state: {e}")))?;
        append_replicated(partition, &buf, REPLICATION_TIMEOUT)
    }

    fn partition_for(&self, transactional_id: &str) -> i32 {
        let count = self
            .broker
            .topic(TRANSACTION_STATE_TOPIC)
            .map(|t| t.partitions.len() as i32)
            .unwrap_or(self.partitions);
        partition_for(transactional_id, count)
    }

    fn replay(&self) -> io::Result<Vec<(Bytes, Option<Bytes>)>> {
        let Some(topic) = self.topic(false)? else {
            return Ok(Vec::new());
        };
        replay_partitions(&topic.partitions)
    }

    fn replay_partition(&self, partition: i32) -> io::Result<Vec<(Bytes, Option<Bytes>)>> {
        let Some(topic) = self.topic(false)? else {
            return Ok(Vec::new());
        };
        match topic.partitions.get(partition as usize) {
            Some(p) => replay_partitions(std::slice::from_ref(p)),
            None => Ok(Vec::new()),
        }
    }

    fn coordinator_epoch(&self, transactional_id: &str) -> i32 {
        let Ok(Some(topic)) = self.topic(false) else {
            return 0;
        };
        let index = partition_for(transactional_id, topic.partitions.len() as i32) as usize;
        topic
            .partitions
            .get(index)
            .map(|p| p.leader_epoch().0.max(0))
            .unwrap_or(0)
    }
}

/// The records of `partitions` up to their log ends, in log order.
fn replay_partitions(partitions: &[Arc<Partition>]) -> io::Result<Vec<(Bytes, Option<Bytes>)>> {
    let mut out = Vec::new();
    for p in partitions {
        let start = p.offsets().log_start_offset.0;
        let limit = p.max_decompressed_batch_bytes();
        scan_batches(p, |h, mut batch| {
            if h.is_control() {
                return Ok(());
            }
            let set = crate::coordinator::offsets_log::decode_bounded(&mut batch, limit)?;
            for r in set.records {
                if r.offset < start {
                    continue;
                }
                if let Some(k) = r.key {
                    out.push((k, r.value));
                }
            }
            Ok(())
        })?;
    }
    Ok(out)
}

/// Producer ids and transaction markers, from the broker.
pub struct BrokerParticipants {
    broker: Arc<Broker>,
    groups: Arc<GroupCoordinator>,
}

impl BrokerParticipants {
    pub fn new(broker: Arc<Broker>, groups: Arc<GroupCoordinator>) -> Self {
        BrokerParticipants { broker, groups }
    }
}

impl Participants for BrokerParticipants {
    fn allocate_producer_id(&self) -> io::Result<i64> {
        self.broker.allocate_producer_id()
    }

    fn write_marker(
        &self,
        topic: &str,
        partition: i32,
        marker: &TxnMarker,
    ) -> Result<(), MarkerError> {
        let broker = &self.broker;
        // A partition the control plane never assigned is led here, as on a single node.
        let remote_leader = match broker.replication().leadership(topic, partition) {
            None => None,
            Some(state) => match state.leader {
                Some(id) if id == broker.config.node_id => None,
                Some(id) => Some(id),
                None => {
                    return Err(MarkerError::Failed(format!(
                        "{topic}-{partition} has no leader"
                    )))
                }
            },
        };
        match remote_leader {
            None => write_txn_marker(broker, &self.groups, topic, partition, marker),
            Some(leader) => send_marker(broker, leader, topic, partition, marker),
        }
    }
}

/// Where a transactional id's coordinator is, from the leadership of its
/// `__transaction_state` partition in the cluster view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoordinatorLocation {
    /// This broker (also when the control plane never assigned the partition).
    Local,
    /// Another broker, by id.
    Remote(i32),
    /// The partition has no leader.
    Unavailable,
}

pub fn coordinator_location(broker: &Broker, transactional_id: &str) -> CoordinatorLocation {
    let count = broker
        .topic(TRANSACTION_STATE_TOPIC)
        .map(|t| t.partitions.len() as i32)
        .unwrap_or(broker.config.transaction_state_log_num_partitions);
    let partition = partition_for(transactional_id, count);
    match broker
        .replication()
        .leadership(TRANSACTION_STATE_TOPIC, partition)
    {
        None => CoordinatorLocation::Local,
        Some(state) => match state.leader {
            None => CoordinatorLocation::Unavailable,
            Some(id) if id == broker.config.node_id => CoordinatorLocation::Local,
            Some(id) => CoordinatorLocation::Remote(id),
        },
    }
}

/// What a transactional write needs of its transaction coordinator before it is appended
/// (Kafka's `TransactionSupportedOperation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnCheck {
    /// The partition must already be in the transaction (KIP-890 part 1: TV1 clients add
    /// their partitions with AddPartitionsToTxn before writing).
    Verify,
    /// The write adds its partition to the transaction (KIP-890 part 2: TV2 clients do not
    /// send AddPartitionsToTxn or AddOffsetsToTxn).
    Add,
}

impl TxnCheck {
    /// For a Produce request of `version`: v12+ is sent only by TV2 clients.
    pub fn for_produce(version: i16) -> TxnCheck {
        if version > 11 {
            TxnCheck::Add
        } else {
            TxnCheck::Verify
        }
    }

    /// For a TxnOffsetCommit request of `version`: v5+ is sent only by TV2 clients.
    pub fn for_txn_offset_commit(version: i16) -> TxnCheck {
        if version > 4 {
            TxnCheck::Add
        } else {
            TxnCheck::Verify
        }
    }
}

/// Makes sure the producer's transaction covers `partition` before a transactional write to
/// it, as Kafka's `AddPartitionsToTxnManager` does: this broker's coordinator is asked
/// directly (in memory to verify; an add is persisted), the coordinator on another broker
/// with AddPartitionsToTxn (v4 verify-only, or v5 adding). As in Kafka, only a producer's
/// first write of a transaction to the partition asks: later ones continue a transaction
/// the coordinator already vouched for. Returns the coordinator's error. Blocking.
pub fn ensure_in_transaction(
    broker: &Broker,
    txns: &TransactionCoordinator,
    transactional_id: &str,
    producer_id: i64,
    producer_epoch: i16,
    (topic, index): (&str, i32),
    check: TxnCheck,
) -> Result<(), ResponseError> {
    let ongoing = broker.partition(topic, index).is_some_and(|p| {
        p.has_ongoing_transaction(crate::broker::ProducerId(producer_id), producer_epoch)
    });
    if ongoing {
        return Ok(());
    }
    let tp = (topic.to_string(), index);
    match (coordinator_location(broker, transactional_id), check) {
        (CoordinatorLocation::Local, TxnCheck::Verify) => {
            let found = txns.verify_partitions(
                transactional_id,
                producer_id,
                producer_epoch,
                std::slice::from_ref(&tp),
            )?;
            match found.into_iter().next().flatten() {
                None => Ok(()),
                Some(e) => Err(e),
            }
        }
        (CoordinatorLocation::Local, TxnCheck::Add) => {
            txns.add_partitions(transactional_id, producer_id, producer_epoch, vec![tp], 2)
        }
        (CoordinatorLocation::Remote(coordinator), check) => ask_remote_coordinator(
            broker,
            coordinator,
            transactional_id,
            producer_id,
            producer_epoch,
            tp,
            check,
        ),
        (CoordinatorLocation::Unavailable, _) => Err(ResponseError::CoordinatorNotAvailable),
    }
}

/// AddPartitionsToTxn for one partition to the transaction coordinator on broker
/// `coordinator`, as Kafka's brokers send it. Blocking.
fn ask_remote_coordinator(
    broker: &Broker,
    coordinator: i32,
    transactional_id: &str,
    producer_id: i64,
    producer_epoch: i16,
    (topic, partition): (String, i32),
    check: TxnCheck,
) -> Result<(), ResponseError> {
    use kafka_protocol::messages::add_partitions_to_txn_request::{
        AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
    };
    use kafka_protocol::messages::{AddPartitionsToTxnRequest, TransactionalId};
    let (host, port) = crate::replication::fetcher::leader_address(broker, coordinator)
        .ok_or(ResponseError::CoordinatorNotAvailable)?;
    let request = AddPartitionsToTxnRequest::default().with_transactions(vec![
        AddPartitionsToTxnTransaction::default()
            .with_transactional_id(TransactionalId(StrBytes::from_string(
                transactional_id.to_string(),
            )))
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(producer_epoch)
            .with_verify_only(check == TxnCheck::Verify)
            .with_topics(vec![AddPartitionsToTxnTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic)))
                .with_partitions(vec![partition])]),
    ]);
    let version = match check {
        TxnCheck::Verify => 4,
        TxnCheck::Add => 5,
    };
    let response = crate::broker::replica_manager::call_broker(broker, (&host, port), "txn-verifier", version, &request)
        .map_err(|e| {
            if e.is_authentication() {
                tracing::error!(coordinator, transactional_id, error = %e, "cannot authenticate to the transaction coordinator to check a transactional write: check the inter-broker listener's TLS and SASL settings");
            } else {
                tracing::debug!(coordinator, transactional_id, error = %e, "cannot check a transactional write with its coordinator");
            }
            ResponseError::NetworkException
        })?;
    if let Some(e) = ResponseError::try_from_code(response.error_code) {
        return Err(e);
    }
    let code = response
        .results_by_transaction
        .first()
        .and_then(|t| t.topic_results.first())
        .and_then(|t| t.results_by_partition.first())
        .map(|p| p.partition_error_code)
        .ok_or(ResponseError::UnknownServerError)?;
    match ResponseError::try_from_code(code) {
        None => Ok(()),
        Some(e) => Err(e),
    }
}

/// Sends WriteTxnMarkers for one partition to its leader `leader` and waits for the answer
/// (the leader answers once the marker is replicated). Blocking: call from a blocking thread
/// of the runtime.
fn send_marker(
    broker: &Broker,
    leader: i32,
    topic: &str,
    partition: i32,
    m: &TxnMarker,
) -> Result<(), MarkerError> {
    let (host, port) = crate::replication::fetcher::leader_address(broker, leader)
        .ok_or_else(|| MarkerError::Failed(format!("no endpoint known for broker {leader}")))?;
    let request =
        WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
            .with_producer_id(ProducerId(m.producer_id))
            .with_producer_epoch(m.producer_epoch)
            .with_transaction_result(m.commit)
            .with_coordinator_epoch(m.coordinator_epoch)
            .with_topics(vec![WritableTxnMarkerTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                .with_partition_indexes(vec![partition])])]);
    let response = crate::broker::replica_manager::call_broker(
        broker,
        (&host, port),
        "txn-marker-sender",
        WRITE_TXN_MARKERS_VERSION,
        &request,
    )
    .map_err(|e| MarkerError::Failed(format!("WriteTxnMarkers to broker {leader}: {e}")))?;
    let code = response
        .markers
        .first()
        .and_then(|r| r.topics.first())
        .and_then(|t| t.partitions.first())
        .map(|p| p.error_code)
        .ok_or_else(|| {
            MarkerError::Failed(format!(
                "broker {leader} answered WriteTxnMarkers without the partition"
            ))
        })?;
    match ResponseError::try_from_code(code) {
        None => Ok(()),
        // Retried, as Kafka's marker channel does: the leader may not know the partition yet.
        Some(e) => Err(MarkerError::Failed(format!(
            "broker {leader} answered {e:?} for {}-{}",
            topic, partition
        ))),
    }
}

/// Writes one marker to a local partition and, for a `__consumer_offsets` partition, lets the
/// group coordinator materialize or drop the producer's pending offsets (Kafka's
/// `onTransactionCompleted`). Shared by the coordinator and the WriteTxnMarkers API. Blocking.
pub fn write_txn_marker(
    broker: &Broker,
    groups: &GroupCoordinator,
    topic: &str,
    partition: i32,
    marker: &TxnMarker,
) -> Result<(), MarkerError> {
    let p = broker
        .partition(topic, partition)
        .ok_or(MarkerError::UnknownPartition)?;
    let offset = p
        .write_txn_marker(marker)
        .map_err(|e| MarkerError::Failed(e.to_string()))?;
    await_replicated(&p, offset.next(), REPLICATION_TIMEOUT)
        .map_err(|e| MarkerError::Failed(format!("marker not replicated: {e}")))?;
    if topic == OFFSETS_TOPIC {
        groups.complete_txn_offsets(marker.producer_id, partition, marker.commit);
    }
    Ok(())
}
