//! Group and transaction coordinators across three in-process brokers whose partition
//! leadership the tests set through the in-process controller: committed offsets survive a
//! move of their `__consumer_offsets` partition, transactions spanning partitions led by
//! other brokers end with markers on every partition, and a new transaction coordinator
//! completes or aborts a transaction its predecessor left open.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::{FindCoordinatorRequest, ProduceResponse};
use strata::broker::LeaderEpoch;
use strata::replication::in_process::InProcessController;
use strata::replication::{BrokerEndpoint, ClusterBroker, PartitionLeadership};
use uuid::Uuid;

use crate::client::Client;
use crate::groups::{commit, offset_fetch_request, NONE};
use crate::harness::*;
use crate::transactions::{add_partitions, end_txn, init_txn, try_init, txn_batch, txn_id};

const OFFSETS: &str = "__consumer_offsets";
const TXN_STATE: &str = "__transaction_state";
const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
const COORDINATOR_NOT_AVAILABLE: i16 = 15;
const NOT_COORDINATOR: i16 = 16;

/// One partition per internal topic, so every group and transactional id lands on
/// partition 0; a fast abort of timed-out transactions.
const SETTINGS: [(&str, &str); 4] = [
    ("offsets.topic.num.partitions", "1"),
    ("transaction.state.log.num.partitions", "1"),
    (
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        "100",
    ),
    ("cluster.id", "coordinator-test"),
];

struct Cluster {
    /// Brokers 1..=3 at index id - 1.
    brokers: Vec<TestBroker>,
    controller: Arc<InProcessController>,
    topic_ids: std::collections::HashMap<String, Uuid>,
}

impl Cluster {
    async fn start() -> Cluster {
        let mut brokers = Vec::new();
        for id in 1..=3 {
            let node = id.to_string();
            let mut cfg = vec![("node.id", node.as_str())];
            cfg.extend_from_slice(&SETTINGS);
            brokers.push(TestBroker::start_with(&cfg).await);
        }
        // Every broker creates its own empty `__transaction_state` at start-up; all take the
        // control plane's id for it when its partition states arrive.
        let c = Cluster {
            brokers,
            controller: InProcessController::new(),
            topic_ids: std::collections::HashMap::new(),
        };
        for id in 1..=3 {
            let controller = c.controller.clone();
            let broker = c.broker(id).broker().clone();
            let endpoint = ClusterBroker {
                id,
                rack: None,
                endpoints: vec![BrokerEndpoint {
                    listener: "PLAINTEXT".into(),
                    host: "127.0.0.1".into(),
                    port: c.broker(id).kafka_addr.port(),
                }],
            };
            tokio::task::spawn_blocking(move || controller.register(&broker, endpoint))
                .await
                .unwrap();
        }
        c
    }

    fn broker(&self, id: i32) -> &TestBroker {
        &self.brokers[(id - 1) as usize]
    }

    async fn client(&self, id: i32) -> Client {
        self.broker(id).client().await
    }

    /// Makes `leader` lead `topic`-`partition` at `leader_epoch`, all three brokers in sync.
    async fn lead(&mut self, topic: &str, partition: i32, leader: i32, leader_epoch: i32) {
        let topic_id = *self
            .topic_ids
            .entry(topic.to_string())
            .or_insert_with(Uuid::new_v4);
        let state = PartitionLeadership {
            topic: topic.into(),
            topic_id,
            partition,
            leader: Some(leader),
            leader_epoch: LeaderEpoch(leader_epoch),
            replicas: vec![1, 2, 3],
            isr: vec![1, 2, 3],
            partition_epoch: leader_epoch,
        };
        let controller = self.controller.clone();
        tokio::task::spawn_blocking(move || controller.set_partitions(vec![state]))
            .await
            .unwrap();
    }

    /// Leaves `topic`-`partition` without a leader at `leader_epoch` (all replicas offline).
    async fn offline(&self, topic: &str, partition: i32, leader_epoch: i32) {
        let state = PartitionLeadership {
            topic: topic.into(),
            topic_id: self.topic_ids[topic],
            partition,
            leader: None,
            leader_epoch: LeaderEpoch(leader_epoch),
            replicas: vec![1, 2, 3],
            isr: vec![],
            partition_epoch: leader_epoch,
        };
        let controller = self.controller.clone();
        tokio::task::spawn_blocking(move || controller.set_partitions(vec![state]))
            .await
            .unwrap();
    }

    async fn shutdown(self) {
        for b in self.brokers {
            b.shutdown().await;
        }
    }
}

/// How long a test waits for a coordinator move or a marker.
const PATIENCE: Duration = Duration::from_secs(15);

/// Sleeps briefly before the next try; fails the test once `since + PATIENCE` passed.
async fn retry(since: tokio::time::Instant, what: &str) {
    assert!(since.elapsed() < PATIENCE, "timed out waiting for {what}");
    tokio::time::sleep(Duration::from_millis(20)).await;
}

/// The node FindCoordinator names for a group (key type 0) or transactional id (1).
async fn coordinator_of(c: &mut Client, key_type: i8, key: &str) -> i32 {
    let mut r = FindCoordinatorRequest::default();
    r.key_type = key_type;
    r.coordinator_keys = vec![str_bytes(key)];
    let resp = c.call(4, &r).await;
    assert_eq!(resp.coordinators[0].error_code, NONE, "{resp:?}");
    resp.coordinators[0].node_id.0
}

/// OffsetFetch v8 of one partition: (group error, committed offset).
async fn fetch_committed(c: &mut Client, group: &str, topic: &str) -> (i16, i64) {
    let parts = [0];
    let r = offset_fetch_request(8, &[(group, Some((topic, &parts[..])))]);
    let resp = c.call(8, &r).await;
    let g = &resp.groups[0];
    let offset = g
        .topics
        .first()
        .and_then(|t| t.partitions.first())
        .map_or(-1, |p| p.committed_offset);
    (g.error_code, offset)
}

async fn produce_txn(
    c: &mut Client,
    id: &str,
    topic: &str,
    partition: i32,
    records: Bytes,
) -> ProduceResponse {
    let mut req = produce_request(topic, partition, records, -1);
    req.transactional_id = Some(txn_id(id));
    c.call(PRODUCE_V, &req).await
}

fn produce_error(r: &ProduceResponse) -> i16 {
    r.responses[0].partition_responses[0].error_code
}

/// A read_committed fetch of one partition from offset 0.
async fn fetch_committed_records(c: &mut Client, topic: &str, partition: i32) -> PartitionData {
    let mut req = fetch_request(topic, partition, &FetchArgs::default());
    req.isolation_level = 1;
    let mut resp = c.call(FETCH_V, &req).await;
    resp.responses.remove(0).partitions.remove(0)
}

/// Waits until a read_committed consumer of the partition's leader reads up to the log end
/// (the transaction's marker is written and replicated) and returns what it read.
async fn await_decided(c: &Cluster, leader: i32, topic: &str, partition: i32) -> PartitionData {
    let mut client = c.client(leader).await;
    let p = c
        .broker(leader)
        .broker()
        .partition(topic, partition)
        .expect("partition");
    let since = tokio::time::Instant::now();
    loop {
        let end = p.offsets().log_end_offset.0;
        let d = fetch_committed_records(&mut client, topic, partition).await;
        if d.error_code == NONE && end > 0 && d.last_stable_offset == end {
            return d;
        }
        retry(
            since,
            &format!("{topic}-{partition} decided on broker {leader}"),
        )
        .await;
    }
}

/// Record values of the data (non-control) batches in a fetched blob.
fn data_values(records: &Option<Bytes>) -> Vec<String> {
    let Some(b) = records else { return vec![] };
    let mut b = b.clone();
    kafka_protocol::records::RecordBatchDecoder::decode_all(&mut b)
        .expect("decode fetched batches")
        .iter()
        .flat_map(|s| s.records.iter())
        .filter(|r| !r.control)
        .filter_map(|r| r.value.as_ref())
        .map(|v| String::from_utf8_lossy(v).to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn committed_offsets_survive_moving_the_offsets_partition_to_another_broker() {
    let mut c = Cluster::start().await;
    c.lead(OFFSETS, 0, 1, 0).await;
    c.lead("events", 0, 1, 0).await;
    let mut c1 = c.client(1).await;
    assert_eq!(coordinator_of(&mut c1, 0, "g1").await, 1);
    assert_eq!(
        commit(&mut c1, "g1", -1, "", "events", &[(0, 42, -1, "")]).await,
        vec![NONE]
    );
    assert_eq!(fetch_committed(&mut c1, "g1", "events").await, (NONE, 42));

    c.lead(OFFSETS, 0, 2, 1).await;
    let mut c2 = c.client(2).await;
    assert_eq!(coordinator_of(&mut c1, 0, "g1").await, 2);
    // The new coordinator loads the partition (COORDINATOR_LOAD_IN_PROGRESS meanwhile) and
    // then answers with the offsets committed on broker 1.
    let since = tokio::time::Instant::now();
    loop {
        let (error, offset) = fetch_committed(&mut c2, "g1", "events").await;
        assert!(
            error == NONE || error == COORDINATOR_LOAD_IN_PROGRESS,
            "OffsetFetch on the new coordinator: error {error}"
        );
        if error == NONE {
            assert_eq!(offset, 42);
            break;
        }
        retry(since, "broker 2 to load g1").await;
    }
    // The old coordinator refuses the group.
    assert_eq!(
        fetch_committed(&mut c1, "g1", "events").await.0,
        NOT_COORDINATOR
    );
    let resp = c1
        .call(
            crate::groups::COMMIT_V,
            &crate::groups::commit_request(
                crate::groups::COMMIT_V,
                "g1",
                -1,
                "",
                None,
                "events",
                &[(0, 99, -1, "")],
            ),
        )
        .await;
    assert_eq!(resp.topics[0].partitions[0].error_code, NOT_COORDINATOR);
    // Commits continue on the new coordinator and move back with the partition.
    assert_eq!(
        commit(&mut c2, "g1", -1, "", "events", &[(0, 50, -1, "")]).await,
        vec![NONE]
    );
    c.lead(OFFSETS, 0, 1, 2).await;
    let since = tokio::time::Instant::now();
    while fetch_committed(&mut c1, "g1", "events").await != (NONE, 50) {
        retry(since, "broker 1 to serve g1 again").await;
    }
    assert_eq!(
        fetch_committed(&mut c2, "g1", "events").await.0,
        NOT_COORDINATOR
    );
    // Without a leader there is no coordinator to find, and none serves the group.
    c.offline(OFFSETS, 0, 3).await;
    let mut r = FindCoordinatorRequest::default();
    r.key_type = 0;
    r.coordinator_keys = vec![str_bytes("g1")];
    let found = c1.call(4, &r).await;
    assert_eq!(
        found.coordinators[0].error_code, COORDINATOR_NOT_AVAILABLE,
        "{found:?}"
    );
    assert_eq!(
        fetch_committed(&mut c1, "g1", "events").await.0,
        NOT_COORDINATOR
    );
    c.shutdown().await;
}

/// Produces a transactional batch to `topic`-`partition` through its leader, which verifies
/// it with the (remote) transaction coordinator.
async fn produce_to_leader(
    c: &Cluster,
    leader: i32,
    id: &str,
    (topic, partition): (&str, i32),
    records: Bytes,
) {
    let mut client = c.client(leader).await;
    let r = produce_txn(&mut client, id, topic, partition, records).await;
    assert_eq!(produce_error(&r), NONE, "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn transactions_across_leaders_commit_and_abort_with_markers_on_every_partition() {
    let mut c = Cluster::start().await;
    c.lead(TXN_STATE, 0, 1, 0).await;
    c.lead("spread", 0, 2, 0).await;
    c.lead("spread", 1, 3, 0).await;
    for id in 1..=3 {
        let local = c.broker(id).broker().topic(TXN_STATE).expect("topic").id;
        assert_eq!(
            local, c.topic_ids[TXN_STATE],
            "broker {id} took the cluster's id"
        );
    }
    let mut c1 = c.client(1).await;
    assert_eq!(coordinator_of(&mut c1, 1, "app").await, 1);
    let producer = init_txn(&mut c1, "app").await;
    assert_eq!(
        add_partitions(&mut c1, "app", producer, "spread", &[0, 1]).await,
        vec![NONE, NONE]
    );
    produce_to_leader(&c, 2, "app", ("spread", 0), txn_batch(3, producer, 0)).await;
    produce_to_leader(&c, 3, "app", ("spread", 1), txn_batch(2, producer, 0)).await;
    assert_eq!(end_txn(&mut c1, "app", producer, true).await, NONE);
    // Each leader holds the COMMIT marker (sent to it as WriteTxnMarkers) and its
    // read_committed consumers see the records.
    let d = await_decided(&c, 2, "spread", 0).await;
    assert_eq!(data_values(&d.records), vec!["txn-0", "txn-1", "txn-2"]);
    assert_eq!(d.last_stable_offset, 4, "3 records and the marker");
    assert!(d.aborted_transactions.as_ref().is_none_or(|a| a.is_empty()));
    let d = await_decided(&c, 3, "spread", 1).await;
    assert_eq!(data_values(&d.records), vec!["txn-0", "txn-1"]);
    assert_eq!(d.last_stable_offset, 3);

    // Broker 2 verifies a transactional write with the coordinator on broker 1: a partition
    // not added to the (new) transaction is refused (INVALID_TXN_STATE at Produce v9).
    let mut c2 = c.client(2).await;
    let r = produce_txn(&mut c2, "app", "spread", 0, txn_batch(1, producer, 3)).await;
    assert_eq!(produce_error(&r), crate::transactions::INVALID_TXN_STATE);

    // The next transaction aborts: ABORT markers, and read_committed consumers are told to
    // skip its records.
    assert_eq!(
        add_partitions(&mut c1, "app", producer, "spread", &[0, 1]).await,
        vec![NONE, NONE]
    );
    produce_to_leader(&c, 2, "app", ("spread", 0), txn_batch(2, producer, 3)).await;
    produce_to_leader(&c, 3, "app", ("spread", 1), txn_batch(1, producer, 2)).await;
    assert_eq!(end_txn(&mut c1, "app", producer, false).await, NONE);
    for (leader, partition, first, end) in [(2, 0, 4, 7), (3, 1, 3, 5)] {
        let d = await_decided(&c, leader, "spread", partition).await;
        assert_eq!(d.last_stable_offset, end);
        let aborted = d.aborted_transactions.unwrap_or_default();
        assert_eq!(aborted.len(), 1, "{aborted:?}");
        assert_eq!(
            (aborted[0].producer_id.0, aborted[0].first_offset),
            (producer.0, first)
        );
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_transaction_coordinator_completes_or_aborts_what_its_predecessor_left_open() {
    let mut c = Cluster::start().await;
    c.lead(TXN_STATE, 0, 1, 0).await;
    c.lead("moved", 0, 2, 0).await;
    c.lead("moved", 1, 3, 0).await;
    let mut c1 = c.client(1).await;
    // "kept" will be committed by its producer through the new coordinator; "left" has a
    // 4 s timeout and is never ended, so the new coordinator aborts it. (With 1 s, a loaded
    // CI machine let it expire before its own produce, which then got INVALID_PRODUCER_EPOCH.)
    let kept = init_txn(&mut c1, "kept").await;
    let r = try_init(&mut c1, "left", 4_000, None).await;
    assert_eq!(r.error_code, NONE, "{r:?}");
    let left = (r.producer_id.0, r.producer_epoch);
    assert_eq!(
        add_partitions(&mut c1, "kept", kept, "moved", &[0, 1]).await,
        vec![NONE, NONE]
    );
    assert_eq!(
        add_partitions(&mut c1, "left", left, "moved", &[1]).await,
        vec![NONE]
    );
    produce_to_leader(&c, 2, "kept", ("moved", 0), txn_batch(2, kept, 0)).await;
    produce_to_leader(&c, 3, "kept", ("moved", 1), txn_batch(1, kept, 0)).await;
    produce_to_leader(&c, 3, "left", ("moved", 1), txn_batch(1, left, 0)).await;

    // Broker 2 takes over __transaction_state between AddPartitions and EndTxn.
    c.lead(TXN_STATE, 0, 2, 1).await;
    assert_eq!(coordinator_of(&mut c1, 1, "kept").await, 2);
    assert_eq!(end_txn(&mut c1, "kept", kept, true).await, NOT_COORDINATOR);
    let mut c2 = c.client(2).await;
    let since = tokio::time::Instant::now();
    loop {
        let e = end_txn(&mut c2, "kept", kept, true).await;
        assert!(
            e == NONE || e == COORDINATOR_LOAD_IN_PROGRESS,
            "EndTxn on the new coordinator: error {e}"
        );
        if e == NONE {
            break;
        }
        retry(since, "the new coordinator to load").await;
    }
    let d = await_decided(&c, 2, "moved", 0).await;
    assert_eq!(data_values(&d.records), vec!["txn-0", "txn-1"]);
    // Partition 1 ends with both markers: "kept" committed, "left" aborted on timeout.
    // "kept" wrote offset 0 and "left" offset 1; the consumer is told to skip the latter.
    let d = await_decided(&c, 3, "moved", 1).await;
    assert_eq!(data_values(&d.records), vec!["txn-0", "txn-0"]);
    let aborted = d.aborted_transactions.unwrap_or_default();
    assert_eq!(aborted.len(), 1, "{aborted:?}");
    assert_eq!(
        (aborted[0].producer_id.0, aborted[0].first_offset),
        (left.0, 1)
    );
    // The aborted producer is fenced: its epoch was bumped by the abort.
    assert_eq!(
        end_txn(&mut c2, "left", left, true).await,
        crate::transactions::PRODUCER_FENCED
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_internal_topic_holding_state_keeps_its_id_and_refuses_another() {
    let mut cfg = vec![("node.id", "1")];
    cfg.extend_from_slice(&SETTINGS);
    let b = TestBroker::start_with(&cfg).await;
    let mut c = b.client().await;
    let producer = init_txn(&mut c, "used").await;
    let local = b.broker().topic(TXN_STATE).expect("topic").id;
    let state = PartitionLeadership {
        topic: TXN_STATE.into(),
        topic_id: Uuid::new_v4(),
        partition: 0,
        leader: Some(1),
        leader_epoch: LeaderEpoch(0),
        replicas: vec![1],
        isr: vec![1],
        partition_epoch: 0,
    };
    let broker = b.broker().clone();
    let applied = tokio::task::spawn_blocking(move || broker.apply_partition_states(vec![state]))
        .await
        .unwrap();
    assert!(
        matches!(
            applied,
            Err(strata::replication::ReplicationError::TopicIdMismatch { .. })
        ),
        "{applied:?}"
    );
    assert_eq!(b.broker().topic(TXN_STATE).expect("topic").id, local);
    // The transactional id is still served from the local topic.
    assert_eq!(init_txn(&mut c, "used").await.0, producer.0);
    b.shutdown().await;
}
