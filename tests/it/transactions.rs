//! The transaction coordinator over the raw protocol: init/add/end flows, fencing with the
//! error codes Kafka returns, timeouts, restarts mid-transaction and TxnOffsetCommit
//! visibility.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use crate::client::Client;
use crate::groups::{self, group_id, offset_fetch_request};
use crate::harness::*;

pub const INIT_V: i16 = 5;
pub const ADD_PARTITIONS_V: i16 = 3;
pub const ADD_OFFSETS_V: i16 = 3;
pub const TXN_COMMIT_V: i16 = 3;
pub const END_V: i16 = 4;

pub const INVALID_PRODUCER_EPOCH: i16 = 47;
pub const INVALID_TXN_STATE: i16 = 48;
pub const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
pub const INVALID_TRANSACTION_TIMEOUT: i16 = 50;
pub const CONCURRENT_TRANSACTIONS: i16 = 51;
pub const UNSTABLE_OFFSET_COMMIT: i16 = 88;
pub const PRODUCER_FENCED: i16 = 90;
pub const TRANSACTIONAL_ID_NOT_FOUND: i16 = 105;
pub const TRANSACTION_ABORTABLE: i16 = 120;

/// Fast timeout checks for the tests that need them.
const SETTINGS: [(&str, &str); 2] = [
    (
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        "100",
    ),
    ("transaction.state.log.num.partitions", "3"),
];

pub fn txn_id(s: &str) -> TransactionalId {
    TransactionalId(str_bytes(s))
}

pub async fn try_init(
    c: &mut Client,
    id: &str,
    timeout_ms: i32,
    current: Option<(i64, i16)>,
) -> InitProducerIdResponse {
    let mut r = InitProducerIdRequest::default();
    r.transactional_id = Some(txn_id(id));
    r.transaction_timeout_ms = timeout_ms;
    let (pid, epoch) = current.unwrap_or((-1, -1));
    r.producer_id = pid.into();
    r.producer_epoch = epoch;
    c.call(INIT_V, &r).await
}

/// InitProducerId for a transactional id, retried while an old transaction is aborted.
pub async fn init_txn(c: &mut Client, id: &str) -> (i64, i16) {
    for _ in 0..50 {
        let r = try_init(c, id, 60_000, None).await;
        if r.error_code == CONCURRENT_TRANSACTIONS {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        assert_eq!(r.error_code, 0, "InitProducerId {id}: {r:?}");
        return (r.producer_id.0, r.producer_epoch);
    }
    panic!("InitProducerId {id} kept answering CONCURRENT_TRANSACTIONS");
}

pub fn add_partitions_request(
    id: &str,
    (pid, epoch): (i64, i16),
    topic: &str,
    partitions: &[i32],
) -> AddPartitionsToTxnRequest {
    let mut t = AddPartitionsToTxnTopic::default();
    t.name = name(topic);
    t.partitions = partitions.to_vec();
    let mut r = AddPartitionsToTxnRequest::default();
    r.v3_and_below_transactional_id = txn_id(id);
    r.v3_and_below_producer_id = pid.into();
    r.v3_and_below_producer_epoch = epoch;
    r.v3_and_below_topics = vec![t];
    r
}

/// AddPartitionsToTxn v0-3: the error code of each partition.
pub async fn add_partitions_v(
    c: &mut Client,
    v: i16,
    id: &str,
    producer: (i64, i16),
    topic: &str,
    partitions: &[i32],
) -> Vec<i16> {
    let r = c
        .call(v, &add_partitions_request(id, producer, topic, partitions))
        .await;
    r.results_by_topic_v3_and_below
        .iter()
        .flat_map(|t| {
            t.results_by_partition
                .iter()
                .map(|p| p.partition_error_code)
        })
        .collect()
}

pub async fn add_partitions(
    c: &mut Client,
    id: &str,
    producer: (i64, i16),
    topic: &str,
    partitions: &[i32],
) -> Vec<i16> {
    add_partitions_v(c, ADD_PARTITIONS_V, id, producer, topic, partitions).await
}

pub fn end_request(id: &str, (pid, epoch): (i64, i16), commit: bool) -> EndTxnRequest {
    let mut r = EndTxnRequest::default();
    r.transactional_id = txn_id(id);
    r.producer_id = pid.into();
    r.producer_epoch = epoch;
    r.committed = commit;
    r
}

pub async fn end_txn(c: &mut Client, id: &str, producer: (i64, i16), commit: bool) -> i16 {
    c.call(END_V, &end_request(id, producer, commit))
        .await
        .error_code
}

pub fn add_offsets_request(
    id: &str,
    (pid, epoch): (i64, i16),
    group: &str,
) -> AddOffsetsToTxnRequest {
    let mut r = AddOffsetsToTxnRequest::default();
    r.transactional_id = txn_id(id);
    r.producer_id = pid.into();
    r.producer_epoch = epoch;
    r.group_id = group_id(group);
    r
}

pub fn txn_offset_commit_request(
    id: &str,
    (pid, epoch): (i64, i16),
    group: &str,
    topic: &str,
    offsets: &[(i32, i64)],
) -> TxnOffsetCommitRequest {
    let mut t = TxnOffsetCommitRequestTopic::default();
    t.name = name(topic);
    t.partitions = offsets
        .iter()
        .map(|&(p, o)| {
            let mut x = TxnOffsetCommitRequestPartition::default();
            x.partition_index = p;
            x.committed_offset = o;
            x.committed_leader_epoch = -1;
            x.committed_metadata = Some(str_bytes(""));
            x
        })
        .collect();
    let mut r = TxnOffsetCommitRequest::default();
    r.transactional_id = txn_id(id);
    r.group_id = group_id(group);
    r.producer_id = pid.into();
    r.producer_epoch = epoch;
    r.generation_id = -1;
    r.member_id = str_bytes("");
    r.topics = vec![t];
    r
}

/// A transactional batch of `n` records of the producer starting at `base_sequence`.
pub fn txn_batch(n: usize, (pid, epoch): (i64, i16), base_sequence: i32) -> Bytes {
    let now = now_ms();
    let records: Vec<Record> = (0..n)
        .map(|i| Record {
            transactional: true,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: pid,
            producer_epoch: epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: base_sequence + i as i32,
            timestamp: now,
            key: Some(Bytes::from(format!("k{i}"))),
            value: Some(Bytes::from(format!("txn-{i}"))),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        records.iter(),
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .expect("encode batch");
    buf.freeze()
}

async fn describe(c: &mut Client, id: &str) -> describe_transactions_response::TransactionState {
    let mut r = DescribeTransactionsRequest::default();
    r.transactional_ids = vec![txn_id(id)];
    c.call(0, &r).await.transaction_states.remove(0)
}

/// (offset, error) of one partition from OffsetFetch v7 (require_stable).
async fn fetch_offset(
    c: &mut Client,
    group: &str,
    topic: &str,
    require_stable: bool,
) -> (i64, i16) {
    let parts = [0];
    let mut r = offset_fetch_request(7, &[(group, Some((topic, &parts[..])))]);
    r.require_stable = require_stable;
    let resp = c.call(7, &r).await;
    assert_eq!(resp.error_code, 0, "{resp:?}");
    let p = &resp.topics[0].partitions[0];
    (p.committed_offset, p.error_code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_transaction_ends_with_a_marker_and_the_coordinator_is_found() {
    let b = TestBroker::start_with(&SETTINGS).await;
    let mut c = b.client().await;
    create_topic(&mut c, "txn-out", 2).await;
    let mut fc = FindCoordinatorRequest::default();
    fc.key_type = 1;
    fc.coordinator_keys = vec![str_bytes("app-1")];
    let f = c.call(4, &fc).await;
    assert_eq!(f.coordinators[0].error_code, 0, "{f:?}");
    assert_eq!(f.coordinators[0].port as u16, b.kafka_addr.port());
    assert!(b.broker().topic("__transaction_state").is_some());

    let producer = init_txn(&mut c, "app-1").await;
    assert_eq!(producer.1, 0);
    assert_eq!(
        add_partitions(&mut c, "app-1", producer, "txn-out", &[0, 1]).await,
        vec![0, 0]
    );
    let r = produce_txn(&mut c, "app-1", "txn-out", 0, txn_batch(3, producer, 0)).await;
    assert_eq!(r.error_code, 0, "{r:?}");
    let d = describe(&mut c, "app-1").await;
    assert_eq!((d.error_code, d.transaction_state.as_str()), (0, "Ongoing"));
    assert_eq!(d.topics[0].partitions, vec![0, 1]);
    assert_eq!(end_txn(&mut c, "app-1", producer, true).await, 0);
    let d = describe(&mut c, "app-1").await;
    assert_eq!(d.transaction_state.as_str(), "CompleteCommit");
    assert!(d.topics.is_empty());
    // Three records and a COMMIT marker on partition 0, a marker alone on partition 1.
    assert_eq!(list_offset(&mut c, "txn-out", 0, -1).await.offset, 4);
    assert_eq!(list_offset(&mut c, "txn-out", 1, -1).await.offset, 1);
    // A retried commit succeeds; an abort of the committed transaction does not.
    assert_eq!(end_txn(&mut c, "app-1", producer, true).await, 0);
    assert_eq!(
        end_txn(&mut c, "app-1", producer, false).await,
        INVALID_TXN_STATE
    );
    // The next transaction aborts: its records are followed by an ABORT marker.
    add_partitions(&mut c, "app-1", producer, "txn-out", &[0]).await;
    produce_txn(&mut c, "app-1", "txn-out", 0, txn_batch(2, producer, 3)).await;
    assert_eq!(end_txn(&mut c, "app-1", producer, false).await, 0);
    assert_eq!(
        describe(&mut c, "app-1").await.transaction_state.as_str(),
        "CompleteAbort"
    );
    assert_eq!(list_offset(&mut c, "txn-out", 0, -1).await.offset, 7);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_producer_instance_fences_the_zombie_with_kafkas_error_codes() {
    let b = TestBroker::start_with(&SETTINGS).await;
    let mut c = b.client().await;
    create_topic(&mut c, "fence", 1).await;
    let old = init_txn(&mut c, "fenced").await;
    assert_eq!(
        add_partitions(&mut c, "fenced", old, "fence", &[0]).await,
        vec![0]
    );
    // The new instance aborts the open transaction first (CONCURRENT_TRANSACTIONS), then gets
    // the epoch bumped twice.
    let r = try_init(&mut c, "fenced", 60_000, None).await;
    assert_eq!(r.error_code, CONCURRENT_TRANSACTIONS);
    let new = init_txn(&mut c, "fenced").await;
    assert_eq!(new, (old.0, old.1 + 2));
    assert_eq!(
        add_partitions(&mut c, "fenced", old, "fence", &[0]).await,
        vec![PRODUCER_FENCED]
    );
    // Clients older than AddPartitionsToTxn v2 / EndTxn v2 get INVALID_PRODUCER_EPOCH.
    assert_eq!(
        add_partitions_v(&mut c, 1, "fenced", old, "fence", &[0]).await,
        vec![INVALID_PRODUCER_EPOCH]
    );
    assert_eq!(end_txn(&mut c, "fenced", old, true).await, PRODUCER_FENCED);
    let r = c.call(1, &end_request("fenced", old, true)).await;
    assert_eq!(r.error_code, INVALID_PRODUCER_EPOCH);
    // KIP-360: the old instance cannot re-initialize with its stale epoch.
    let r = try_init(&mut c, "fenced", 60_000, Some((old.0, old.1))).await;
    assert_eq!(r.error_code, PRODUCER_FENCED);
    let r = try_init(&mut c, "fenced", 60_000, Some((new.0 + 1000, new.1))).await;
    assert_eq!(r.error_code, PRODUCER_FENCED);
    // Unknown ids and wrong producer ids.
    assert_eq!(
        add_partitions(&mut c, "never-initialized", new, "fence", &[0]).await,
        vec![INVALID_PRODUCER_ID_MAPPING]
    );
    // A partition that does not exist fails the whole request.
    assert_eq!(
        add_partitions(&mut c, "fenced", new, "fence", &[0, 7]).await,
        vec![55, 3]
    );
    let d = describe(&mut c, "never-initialized").await;
    assert_eq!(d.error_code, TRANSACTIONAL_ID_NOT_FOUND);
    let r = try_init(&mut c, "too-long", 900_001, None).await;
    assert_eq!(r.error_code, INVALID_TRANSACTION_TIMEOUT);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_open_past_its_timeout_is_aborted_and_its_producer_fenced() {
    let b = TestBroker::start_with(&SETTINGS).await;
    let mut c = b.client().await;
    create_topic(&mut c, "slow", 1).await;
    let r = try_init(&mut c, "slow-app", 300, None).await;
    assert_eq!(r.error_code, 0);
    let producer = (r.producer_id.0, r.producer_epoch);
    add_partitions(&mut c, "slow-app", producer, "slow", &[0]).await;
    produce_txn(&mut c, "slow-app", "slow", 0, txn_batch(2, producer, 0)).await;
    let mut state = String::new();
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        state = describe(&mut c, "slow-app")
            .await
            .transaction_state
            .to_string();
        if state == "CompleteAbort" {
            break;
        }
    }
    assert_eq!(state, "CompleteAbort");
    assert_eq!(
        describe(&mut c, "slow-app").await.producer_epoch,
        producer.1 + 1
    );
    assert_eq!(
        list_offset(&mut c, "slow", 0, -1).await.offset,
        3,
        "ABORT marker"
    );
    assert_eq!(
        end_txn(&mut c, "slow-app", producer, true).await,
        PRODUCER_FENCED
    );
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_transaction_survives_a_restart_and_a_crash_and_then_commits() {
    let b = TestBroker::start_with(&SETTINGS).await;
    let mut c = b.client().await;
    create_topic(&mut c, "durable", 1).await;
    let producer = init_txn(&mut c, "durable-app").await;
    add_partitions(&mut c, "durable-app", producer, "durable", &[0]).await;
    produce_txn(
        &mut c,
        "durable-app",
        "durable",
        0,
        txn_batch(2, producer, 0),
    )
    .await;
    let b = b.restart().await;
    let mut c = b.client().await;
    let d = describe(&mut c, "durable-app").await;
    assert_eq!(
        (d.transaction_state.as_str(), d.producer_epoch),
        ("Ongoing", producer.1)
    );
    let b = b.crash_and_restart(|_| {}).await;
    let mut c = b.client().await;
    assert_eq!(
        describe(&mut c, "durable-app")
            .await
            .transaction_state
            .as_str(),
        "Ongoing"
    );
    assert_eq!(end_txn(&mut c, "durable-app", producer, true).await, 0);
    assert_eq!(
        describe(&mut c, "durable-app")
            .await
            .transaction_state
            .as_str(),
        "CompleteCommit"
    );
    assert_eq!(list_offset(&mut c, "durable", 0, -1).await.offset, 3);
    // The producer id and epoch stay the coordinator's after another restart.
    let b = b.restart().await;
    let mut c = b.client().await;
    assert_eq!(
        init_txn(&mut c, "durable-app").await,
        (producer.0, producer.1 + 1)
    );
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactional_offsets_become_visible_only_when_the_transaction_commits() {
    let b = TestBroker::start_with(&SETTINGS).await;
    let mut c = b.client().await;
    create_topic(&mut c, "in", 1).await;
    let producer = init_txn(&mut c, "ctp").await;
    // TxnOffsetCommit before AddOffsetsToTxn: the offsets partition is not in the transaction.
    let r = c
        .call(
            TXN_COMMIT_V,
            &txn_offset_commit_request("ctp", producer, "ctp-group", "in", &[(0, 5)]),
        )
        .await;
    assert_eq!(r.topics[0].partitions[0].error_code, INVALID_TXN_STATE);
    let r = c
        .call(
            4,
            &txn_offset_commit_request("ctp", producer, "ctp-group", "in", &[(0, 5)]),
        )
        .await;
    assert_eq!(r.topics[0].partitions[0].error_code, TRANSACTION_ABORTABLE);
    let r = c
        .call(
            ADD_OFFSETS_V,
            &add_offsets_request("ctp", producer, "ctp-group"),
        )
        .await;
    assert_eq!(r.error_code, 0);
    let r = c
        .call(
            TXN_COMMIT_V,
            &txn_offset_commit_request("ctp", producer, "ctp-group", "in", &[(0, 5)]),
        )
        .await;
    assert_eq!(r.topics[0].partitions[0].error_code, 0, "{r:?}");
    assert_eq!(
        fetch_offset(&mut c, "ctp-group", "in", true).await,
        (-1, UNSTABLE_OFFSET_COMMIT)
    );
    assert_eq!(
        fetch_offset(&mut c, "ctp-group", "in", false).await,
        (-1, 0)
    );
    assert_eq!(end_txn(&mut c, "ctp", producer, true).await, 0);
    assert_eq!(fetch_offset(&mut c, "ctp-group", "in", true).await, (5, 0));
    // An aborted commit leaves the previous offset.
    c.call(
        ADD_OFFSETS_V,
        &add_offsets_request("ctp", producer, "ctp-group"),
    )
    .await;
    let r = c
        .call(
            TXN_COMMIT_V,
            &txn_offset_commit_request("ctp", producer, "ctp-group", "in", &[(0, 9)]),
        )
        .await;
    assert_eq!(r.topics[0].partitions[0].error_code, 0);
    assert_eq!(end_txn(&mut c, "ctp", producer, false).await, 0);
    assert_eq!(fetch_offset(&mut c, "ctp-group", "in", true).await, (5, 0));
    // One still pending when the broker crashes is replayed as pending, then aborted by the
    // new producer instance.
    c.call(
        ADD_OFFSETS_V,
        &add_offsets_request("ctp", producer, "ctp-group"),
    )
    .await;
    c.call(
        TXN_COMMIT_V,
        &txn_offset_commit_request("ctp", producer, "ctp-group", "in", &[(0, 11)]),
    )
    .await;
    let b = b.crash_and_restart(|_| {}).await;
    let mut c = b.client().await;
    assert_eq!(
        fetch_offset(&mut c, "ctp-group", "in", true).await,
        (-1, UNSTABLE_OFFSET_COMMIT)
    );
    init_txn(&mut c, "ctp").await;
    assert_eq!(fetch_offset(&mut c, "ctp-group", "in", true).await, (5, 0));
    let b = b.restart().await;
    let mut c = b.client().await;
    assert_eq!(fetch_offset(&mut c, "ctp-group", "in", true).await, (5, 0));
    let _ = groups::NONE;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_transactions_and_describe_producers_show_the_open_transaction() {
    let b = TestBroker::start_with(&SETTINGS).await;
    let mut c = b.client().await;
    create_topic(&mut c, "listed", 1).await;
    let producer = init_txn(&mut c, "listed-app").await;
    init_txn(&mut c, "idle-app").await;
    add_partitions(&mut c, "listed-app", producer, "listed", &[0]).await;
    produce_txn(&mut c, "listed-app", "listed", 0, txn_batch(1, producer, 0)).await;
    let mut r = ListTransactionsRequest::default();
    r.state_filters = vec![str_bytes("Ongoing"), str_bytes("Nope")];
    r.duration_filter = -1;
    let l = c.call(1, &r).await;
    assert_eq!(l.error_code, 0);
    assert_eq!(l.unknown_state_filters, vec![str_bytes("Nope")]);
    let ids: Vec<&str> = l
        .transaction_states
        .iter()
        .map(|t| t.transactional_id.0.as_str())
        .collect();
    assert_eq!(ids, vec!["listed-app"]);
    let mut r = ListTransactionsRequest::default();
    r.duration_filter = -1;
    r.transactional_id_pattern = Some(str_bytes("idle-.*"));
    let l = c.call(2, &r).await;
    let ids: Vec<&str> = l
        .transaction_states
        .iter()
        .map(|t| t.transactional_id.0.as_str())
        .collect();
    assert_eq!(ids, vec!["idle-app"]);
    let mut t = describe_producers_request::TopicRequest::default();
    t.name = name("listed");
    t.partition_indexes = vec![0];
    let mut r = DescribeProducersRequest::default();
    r.topics = vec![t];
    let d = c.call(0, &r).await;
    let p = &d.topics[0].partitions[0];
    assert_eq!(p.error_code, 0);
    assert_eq!(p.active_producers.len(), 1, "{p:?}");
    assert_eq!(p.active_producers[0].producer_id.0, producer.0);
    assert_eq!(p.active_producers[0].current_txn_start_offset, 0);
    b.shutdown().await;
}

/// Produce with the request's transactional id set, as transactional producers send it.
pub(crate) async fn produce_txn(
    c: &mut Client,
    id: &str,
    topic: &str,
    partition: i32,
    records: Bytes,
) -> kafka_protocol::messages::produce_response::PartitionProduceResponse {
    let mut req = produce_request(topic, partition, records, -1);
    req.transactional_id = Some(txn_id(id));
    let resp = c.call(PRODUCE_V, &req).await;
    resp.responses
        .into_iter()
        .next()
        .expect("one topic")
        .partition_responses
        .remove(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactional_writes_are_verified_against_the_transaction() {
    let b = TestBroker::start_with(&SETTINGS).await;
    let mut c = b.client().await;
    create_topic(&mut c, "verified", 2).await;
    let producer = init_txn(&mut c, "app-v").await;
    assert_eq!(
        add_partitions(&mut c, "app-v", producer, "verified", &[0]).await,
        vec![0]
    );
    // Partition 1 was never added to the transaction: INVALID_TXN_STATE (Produce v9).
    let r = produce_txn(&mut c, "app-v", "verified", 1, txn_batch(1, producer, 0)).await;
    assert_eq!(r.error_code, 48, "{r:?}");
    // No transactional id on the request: TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka.
    let r = produce(&mut c, "verified", 0, txn_batch(1, producer, 0)).await;
    assert_eq!(r.error_code, 53, "{r:?}");
    let r = produce_txn(&mut c, "app-v", "verified", 0, txn_batch(1, producer, 0)).await;
    assert_eq!(r.error_code, 0, "{r:?}");
    b.shutdown().await;
}

fn marker_request(
    (pid, epoch): (i64, i16),
    topic: &str,
    commit: bool,
    transaction_version: i8,
) -> WriteTxnMarkersRequest {
    use kafka_protocol::messages::write_txn_markers_request::{
        WritableTxnMarker, WritableTxnMarkerTopic,
    };
    let mut marker = WritableTxnMarker::default()
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_transaction_result(commit)
        .with_topics(vec![WritableTxnMarkerTopic::default()
            .with_name(TopicName(str_bytes(topic)))
            .with_partition_indexes(vec![0])]);
    marker.transaction_version = transaction_version;
    WriteTxnMarkersRequest::default().with_markers(vec![marker])
}

fn marker_error(r: &WriteTxnMarkersResponse) -> i16 {
    r.markers[0].topics[0].partitions[0].error_code
}

/// WriteTxnMarkers v2 (Kafka 4.4): a transaction-version-2 marker that ends an ongoing
/// transaction carries the epoch its coordinator bumped, so one at the epoch of the
/// transaction's records is late (INVALID_PRODUCER_EPOCH); other markers may not go below
/// the producer's epoch. The same sequence against Kafka 4.4.0:
/// test_transaction_version.py.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_txn_markers_v2_apply_the_epoch_rule_of_the_transaction_version() {
    let b = TestBroker::start_with(&SETTINGS).await;
    let mut c = b.client().await;
    create_topic(&mut c, "tv2-markers", 1).await;
    let (pid, epoch) = init_txn(&mut c, "tv2-app").await;
    assert_eq!(
        add_partitions(&mut c, "tv2-app", (pid, epoch), "tv2-markers", &[0]).await,
        vec![0]
    );
    let r = produce_txn(
        &mut c,
        "tv2-app",
        "tv2-markers",
        0,
        txn_batch(2, (pid, epoch), 0),
    )
    .await;
    assert_eq!(r.error_code, 0, "{r:?}");

    let at_epoch = marker_request((pid, epoch), "tv2-markers", true, 2);
    assert_eq!(
        marker_error(&c.call(2, &at_epoch).await),
        INVALID_PRODUCER_EPOCH
    );
    assert_eq!(list_offset(&mut c, "tv2-markers", 0, -1).await.offset, 2);
    let bumped = marker_request((pid, epoch + 1), "tv2-markers", true, 2);
    assert_eq!(marker_error(&c.call(2, &bumped).await), 0);
    assert_eq!(list_offset(&mut c, "tv2-markers", 0, -1).await.offset, 3);
    // With no transaction ongoing, markers at the producer's epoch are written (as Kafka
    // 4.4 does), one below it is not.
    assert_eq!(marker_error(&c.call(2, &bumped).await), 0);
    let legacy = marker_request((pid, epoch + 1), "tv2-markers", false, 1);
    assert_eq!(marker_error(&c.call(2, &legacy).await), 0);
    assert_eq!(marker_error(&c.call(1, &legacy).await), 0);
    let below = marker_request((pid, epoch), "tv2-markers", false, 1);
    assert_eq!(
        marker_error(&c.call(2, &below).await),
        INVALID_PRODUCER_EPOCH
    );
    assert_eq!(list_offset(&mut c, "tv2-markers", 0, -1).await.offset, 6);

    // DescribeLogDirs v5 says whether a directory is cordoned: none is.
    let dirs = c.call(5, &DescribeLogDirsRequest::default()).await;
    assert_eq!(dirs.error_code, 0);
    assert!(!dirs.results.is_empty());
    assert!(dirs
        .results
        .iter()
        .all(|d| d.error_code == 0 && !d.is_cordoned));
    b.shutdown().await;
}
