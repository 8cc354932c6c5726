//! Coordinators in cluster mode: the quorum creates `__consumer_offsets` and
//! `__transaction_state` on the first FindCoordinator for them, replicated on every broker;
//! a group's committed offsets and a transactional id's producer epoch live in the leader of
//! their partition and move with its leadership when that broker stops. A group's
//! coordinator asks the transactional id's coordinator, on another broker, whether its offsets
//! partition is in the transaction.

use std::time::Duration;

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::FindCoordinatorRequest;

use crate::client::Client;
use crate::cluster::{eventually, QuorumCluster};
use crate::groups::{commit, offset_fetch_request};
use crate::harness::*;
use crate::transactions::{
    add_offsets_request, end_txn, try_init, txn_offset_commit_request, ADD_OFFSETS_V,
    INVALID_TXN_STATE, TXN_COMMIT_V,
};

const OFFSETS: &str = "__consumer_offsets";
const TXN_STATE: &str = "__transaction_state";
const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
const COORDINATOR_NOT_AVAILABLE: i16 = 15;
const NOT_COORDINATOR: i16 = 16;
const CONCURRENT_TRANSACTIONS: i16 = 51;

const SETTINGS: [(&str, &str); 2] = [
    ("offsets.topic.num.partitions", "3"),
    ("transaction.state.log.num.partitions", "3"),
];

/// FindCoordinator v4 for one key: (error code, node id).
async fn find(c: &mut Client, key_type: i8, key: &str) -> (i16, i32) {
    let mut r = FindCoordinatorRequest::default();
    r.key_type = key_type;
    r.coordinator_keys = vec![str_bytes(key)];
    let resp = c.call(4, &r).await;
    (
        resp.coordinators[0].error_code,
        resp.coordinators[0].node_id.0,
    )
}

/// Asks `b` for the coordinator of `key` until one is named (at most 20 s); returns every
/// error seen before and the coordinator.
pub(crate) async fn coordinator(
    b: &crate::harness::TestBroker,
    key_type: i8,
    key: &str,
) -> (Vec<i16>, i32) {
    let mut c = b.client().await;
    let mut errors = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        match find(&mut c, key_type, key).await {
            (0, node) => return (errors, node),
            (e, _) => errors.push(e),
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no coordinator for {key}: {errors:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// OffsetFetch v8 of `events`-0: (group error, committed offset or -1).
async fn committed(c: &mut Client, group: &str) -> (i16, i64) {
    let parts = [0];
    let r = offset_fetch_request(8, &[(group, Some(("events", &parts[..])))]);
    let resp = c.call(8, &r).await;
    let g = &resp.groups[0];
    let offset = g
        .topics
        .first()
        .and_then(|t| t.partitions.first())
        .map_or(-1, |p| p.committed_offset);
    (g.error_code, offset)
}

/// The committed offset once broker `b` (the coordinator) has loaded the group.
async fn committed_when_loaded(b: &crate::harness::TestBroker, group: &str) -> i64 {
    let mut c = b.client().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        match committed(&mut c, group).await {
            (0, offset) => return offset,
            (COORDINATOR_LOAD_IN_PROGRESS, _) => {}
            other => panic!("OffsetFetch on the coordinator: {other:?}"),
        }
        assert!(tokio::time::Instant::now() < deadline, "group never loaded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The internal topic's (partition count, replicas of each partition) in broker `b`'s image.
fn internal_topic(b: &crate::harness::TestBroker, name: &str) -> Option<(usize, Vec<usize>)> {
    let state = b.services().cluster.as_ref()?.node().ok()?.state();
    let t = state.topic_by_name(name)?;
    Some((
        t.partitions.len(),
        t.partitions.iter().map(|p| p.replicas.len()).collect(),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn group_offsets_live_in_the_quorum_and_follow_their_partition_leader() {
    let mut c = QuorumCluster::start_with(&SETTINGS).await;
    let mut t = CreatableTopic::default();
    t.name = name("events");
    t.num_partitions = 1;
    t.replication_factor = 3;
    let mut admin = c.broker(1).client().await;
    assert!(
        internal_topic(c.broker(1), OFFSETS).is_none(),
        "no offsets topic before the first FindCoordinator"
    );
    let r = create_topics(&mut admin, vec![t]).await.remove(0);
    assert_eq!(r.error_code, 0, "create: {:?}", r.error_message);

    // The first FindCoordinator creates the topic in the quorum; clients retry meanwhile.
    let (errors, first) = coordinator(c.broker(2), 0, "g1").await;
    assert_eq!(
        errors.first(),
        Some(&COORDINATOR_NOT_AVAILABLE),
        "answered while the topic is created"
    );
    for id in 1..=3 {
        let b = c.broker(id);
        eventually("the offsets topic on every broker", || async move {
            internal_topic(b, OFFSETS) == Some((3, vec![3, 3, 3]))
                && b.broker()
                    .topic(OFFSETS)
                    .is_some_and(|t| t.config.cleanup_policy_compact)
        })
        .await;
        assert_eq!(coordinator(b, 0, "g1").await.1, first, "brokers agree");
    }

    // A simple commit on the coordinator; the others are not its coordinator.
    let mut cc = c.broker(first).client().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let e = commit(&mut cc, "g1", -1, "", "events", &[(0, 42, -1, "")]).await;
        if e == [0] {
            break;
        }
        assert_eq!(e, [COORDINATOR_LOAD_IN_PROGRESS], "commit");
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(committed_when_loaded(c.broker(first), "g1").await, 42);
    let other = if first == 1 { 2 } else { 1 };
    let mut co = c.broker(other).client().await;
    assert_eq!(committed(&mut co, "g1").await.0, NOT_COORDINATOR);

    // Stop the coordinator: its partition's new leader serves the group with the offsets.
    c.broker_mut(first).stop().await;
    let survivor = if first == 3 { 2 } else { 3 };
    let second = {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let (_, node) = coordinator(c.broker(survivor), 0, "g1").await;
            if node != first {
                break node;
            }
            assert!(tokio::time::Instant::now() < deadline, "coordinator moved");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    assert_eq!(committed_when_loaded(c.broker(second), "g1").await, 42);
    let mut c2 = c.broker(second).client().await;
    assert_eq!(
        commit(&mut c2, "g1", -1, "", "events", &[(0, 43, -1, "")]).await,
        [0]
    );

    // The stopped broker comes back as a follower of the offsets topic, without stale state.
    c.broker_mut(first).resume().await;
    let (_, now) = coordinator(c.broker(first), 0, "g1").await;
    assert_eq!(committed_when_loaded(c.broker(now), "g1").await, 43);
    c.shutdown().await;
}

/// InitProducerId on broker `b` until it is not busy or loading: (error, producer id, epoch).
async fn init(b: &crate::harness::TestBroker, id: &str) -> (i16, i64, i16) {
    let mut c = b.client().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let r = try_init(&mut c, id, 60_000, None).await;
        if ![CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS].contains(&r.error_code)
            || tokio::time::Instant::now() >= deadline
        {
            return (r.error_code, r.producer_id.0, r.producer_epoch);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn transactional_ids_live_in_the_quorum_and_follow_their_partition_leader() {
    let mut c = QuorumCluster::start_with(&SETTINGS).await;
    let (errors, first) = coordinator(c.broker(1), 1, "tx1").await;
    assert_eq!(errors.first(), Some(&COORDINATOR_NOT_AVAILABLE));
    for id in 1..=3 {
        let b = c.broker(id);
        eventually(
            "the transaction state topic on every broker",
            || async move {
                internal_topic(b, TXN_STATE) == Some((3, vec![3, 3, 3]))
                    && b.broker().topic(TXN_STATE).is_some_and(|t| {
                        t.overrides.get("min.insync.replicas").map(String::as_str) == Some("2")
                    })
            },
        )
        .await;
    }
    let (e, pid, epoch) = init(c.broker(first), "tx1").await;
    assert_eq!(e, 0, "InitProducerId on the coordinator");
    let other = if first == 1 { 2 } else { 1 };
    assert_eq!(init(c.broker(other), "tx1").await.0, NOT_COORDINATOR);

    // The next coordinator has the id's producer id and bumps its epoch.
    c.broker_mut(first).stop().await;
    let survivor = if first == 3 { 2 } else { 3 };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let second = loop {
        let (_, node) = coordinator(c.broker(survivor), 1, "tx1").await;
        if node != first {
            break node;
        }
        assert!(tokio::time::Instant::now() < deadline, "coordinator moved");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let (e, pid2, epoch2) = init(c.broker(second), "tx1").await;
    assert_eq!(e, 0, "InitProducerId on the new coordinator");
    assert_eq!(pid2, pid, "the same producer id");
    assert!(epoch2 > epoch, "epoch bumped: {epoch} then {epoch2}");
    c.broker_mut(first).resume().await;
    c.shutdown().await;
}

/// TxnOffsetCommit v3 of `events`-0 at `offset` to `c`: the partition's error code.
async fn txn_offset_commit(c: &mut Client, id: &str, producer: (i64, i16), offset: i64) -> i16 {
    let r = txn_offset_commit_request(id, producer, "g-eos", "events", &[(0, offset)]);
    let resp = c.call(TXN_COMMIT_V, &r).await;
    resp.topics[0].partitions[0].error_code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn txn_offset_commit_is_verified_by_the_transaction_coordinator_on_another_broker() {
    let c = QuorumCluster::start_with(&SETTINGS).await;
    let mut t = CreatableTopic::default();
    t.name = name("events");
    t.num_partitions = 1;
    t.replication_factor = 3;
    let mut admin = c.broker(1).client().await;
    let r = create_topics(&mut admin, vec![t]).await.remove(0);
    assert_eq!(r.error_code, 0, "create: {:?}", r.error_message);

    // A transactional id whose coordinator is not the group's.
    let (_, group_node) = coordinator(c.broker(1), 0, "g-eos").await;
    let mut found = None;
    for i in 0..100 {
        let id = format!("tx-eos-{i}");
        let (_, node) = coordinator(c.broker(1), 1, &id).await;
        if node != group_node {
            found = Some((id, node));
            break;
        }
    }
    let (id, txn_node) = found.expect("a transactional id coordinated by another broker");
    // The broker named before it has applied its leadership of the transaction state
    // partition answers NOT_COORDINATOR; a client asks again, as here.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let (e, pid, epoch) = loop {
        let r = init(c.broker(txn_node), &id).await;
        if r.0 != NOT_COORDINATOR || tokio::time::Instant::now() >= deadline {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(e, 0, "InitProducerId");
    let producer = (pid, epoch);
    let mut tc = c.broker(txn_node).client().await;
    let mut gc = c.broker(group_node).client().await;

    // Until the group's offsets partition is in the transaction, the commit is refused.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let before = loop {
        let e = txn_offset_commit(&mut gc, &id, producer, 5).await;
        if e != COORDINATOR_LOAD_IN_PROGRESS || tokio::time::Instant::now() >= deadline {
            break e;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        before, INVALID_TXN_STATE,
        "TxnOffsetCommit before AddOffsetsToTxn"
    );

    let r = tc
        .call(ADD_OFFSETS_V, &add_offsets_request(&id, producer, "g-eos"))
        .await;
    assert_eq!(r.error_code, 0, "AddOffsetsToTxn");
    assert_eq!(
        txn_offset_commit(&mut gc, &id, producer, 5).await,
        0,
        "TxnOffsetCommit verified by broker {txn_node}"
    );
    // A second commit in the same transaction (the transaction already wrote there).
    assert_eq!(txn_offset_commit(&mut gc, &id, producer, 7).await, 0);
    assert_eq!(end_txn(&mut tc, &id, producer, true).await, 0, "EndTxn");
    assert_eq!(
        committed_when_loaded(c.broker(group_node), "g-eos").await,
        7
    );
    c.shutdown().await;
}
