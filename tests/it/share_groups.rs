//! Share groups (KIP-932) across crashes of the real binary: a record whose acknowledgement
//! was answered is never delivered again, and every other record is delivered again, once,
//! after `kill -9` or an abort between persisting an acknowledgement and answering it.

use std::collections::BTreeSet;
use std::time::Duration;

use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::share_acknowledge_request::{
    AcknowledgePartition, AcknowledgeTopic, AcknowledgementBatch as AckBatch,
};
use kafka_protocol::messages::share_fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{
    IncrementalAlterConfigsRequest, ShareAcknowledgeRequest, ShareFetchRequest,
    ShareGroupHeartbeatRequest,
};

use crate::client::Client;
use crate::crash::BrokerProcess;
use crate::groups::group_id;
use crate::harness::*;

const TOPIC: &str = "jobs";
const GROUP: &str = "workers";
const RECORDS: i64 = 100;
const ACCEPT: i8 = 1;
const RELEASE: i8 = 2;

async fn earliest(c: &mut Client) {
    let mut r = AlterConfigsResource::default();
    r.resource_type = 32;
    r.resource_name = str_bytes(GROUP);
    let mut a = AlterableConfig::default();
    a.name = str_bytes("share.auto.offset.reset");
    a.value = Some(str_bytes("earliest"));
    r.configs = vec![a];
    let mut req = IncrementalAlterConfigsRequest::default();
    req.resources = vec![r];
    let resp = c.call(1, &req).await;
    assert_eq!(
        resp.responses[0].error_code, 0,
        "{:?}",
        resp.responses[0].error_message
    );
}

/// Joins `member` to the group; returns its epoch once it is assigned the partition.
async fn join(c: &mut Client, member: &str) -> i32 {
    let mut hb = ShareGroupHeartbeatRequest::default();
    hb.group_id = group_id(GROUP);
    hb.member_id = str_bytes(member);
    hb.member_epoch = 0;
    hb.subscribed_topic_names = Some(vec![name(TOPIC)]);
    let resp = c.call(1, &hb).await;
    assert_eq!(resp.error_code, 0, "{:?}", resp.error_message);
    let assigned = resp.assignment.expect("an assignment");
    assert_eq!(assigned.topic_partitions[0].partitions, vec![0]);
    resp.member_epoch
}

/// Every offset acquired by one ShareFetch of `member` at `epoch`, with delivery counts.
async fn fetch_all(
    c: &mut Client,
    member: &str,
    epoch: i32,
    topic_id: uuid::Uuid,
) -> Vec<(i64, i16)> {
    let mut req = ShareFetchRequest::default();
    req.group_id = Some(group_id(GROUP));
    req.member_id = Some(str_bytes(member));
    req.share_session_epoch = epoch;
    req.max_wait_ms = 2000;
    req.min_bytes = 1;
    req.max_bytes = 1 << 20;
    req.max_records = 1000;
    req.batch_size = 1000;
    let mut p = FetchPartition::default();
    p.partition_index = 0;
    p.partition_max_bytes = 1 << 20;
    let mut t = FetchTopic::default();
    t.topic_id = topic_id;
    t.partitions = vec![p];
    req.topics = vec![t];
    let resp = c.call(1, &req).await;
    assert_eq!(resp.error_code, 0, "{:?}", resp.error_message);
    let mut out = Vec::new();
    for t in resp.responses {
        for p in t.partitions {
            assert_eq!(p.error_code, 0);
            let present: BTreeSet<i64> = record_offsets(&p.records).into_iter().collect();
            for a in p.acquired_records {
                for o in a.first_offset..=a.last_offset {
                    assert!(
                        present.contains(&o),
                        "offset {o} acquired without its record"
                    );
                    out.push((o, a.delivery_count));
                }
            }
        }
    }
    out
}

fn ack_request(
    member: &str,
    epoch: i32,
    topic_id: uuid::Uuid,
    batches: &[(i64, i64, i8)],
) -> ShareAcknowledgeRequest {
    let mut req = ShareAcknowledgeRequest::default();
    req.group_id = Some(group_id(GROUP));
    req.member_id = Some(str_bytes(member));
    req.share_session_epoch = epoch;
    let mut p = AcknowledgePartition::default();
    p.partition_index = 0;
    p.acknowledgement_batches = batches
        .iter()
        .map(|&(first, last, t)| {
            let mut b = AckBatch::default();
            b.first_offset = first;
            b.last_offset = last;
            b.acknowledge_types = vec![t];
            b
        })
        .collect();
    let mut t = AcknowledgeTopic::default();
    t.topic_id = topic_id;
    t.partitions = vec![p];
    req.topics = vec![t];
    req
}

/// A topic of [`RECORDS`] records and a member that acquired all of them.
async fn acquired_everything(c: &mut Client, member: &str) -> uuid::Uuid {
    let topic_id = create_topic(c, TOPIC, 1).await;
    for _ in 0..RECORDS / 10 {
        assert_eq!(produce(c, TOPIC, 0, batch(10)).await.error_code, 0);
    }
    earliest(c).await;
    join(c, member).await;
    let got = fetch_all(c, member, 0, topic_id).await;
    let offsets: Vec<i64> = got.iter().map(|g| g.0).collect();
    assert_eq!(offsets, (0..RECORDS).collect::<Vec<_>>());
    assert!(got.iter().all(|g| g.1 == 1));
    topic_id
}

/// After the restart, a new member gets exactly `expected`, each once.
async fn redelivered(addr: std::net::SocketAddr, topic_id: uuid::Uuid, expected: BTreeSet<i64>) {
    let mut c = Client::connect(addr).await;
    join(&mut c, "after-restart").await;
    let mut got = Vec::new();
    let mut epoch = 0;
    // Acquired records come back in one or more fetches; stop once a fetch finds nothing.
    loop {
        let more = fetch_all(&mut c, "after-restart", epoch, topic_id).await;
        epoch += 1;
        if more.is_empty() {
            break;
        }
        got.extend(more.into_iter().map(|g| g.0));
    }
    let unique: BTreeSet<i64> = got.iter().copied().collect();
    assert_eq!(
        unique.len(),
        got.len(),
        "a record was delivered twice: {got:?}"
    );
    assert_eq!(unique, expected);
}

#[tokio::test]
async fn acknowledged_share_records_are_not_redelivered_after_kill_9() {
    let root = tempfile::tempdir().unwrap();
    let mut broker = BrokerProcess::start(root.path(), 0, None).await;
    let mut c = Client::connect(broker.kafka_addr).await;
    let topic_id = acquired_everything(&mut c, "m1").await;
    let ack = ack_request("m1", 1, topic_id, &[(0, 49, ACCEPT), (50, 59, RELEASE)]);
    let resp = c.call(1, &ack).await;
    assert_eq!(resp.error_code, 0);
    assert_eq!(resp.responses[0].partitions[0].error_code, 0);
    broker.kill_9();
    let broker = BrokerProcess::start(root.path(), 1, None).await;
    // 50..59 were released, 60..99 were acquired and never acknowledged.
    redelivered(broker.kafka_addr, topic_id, (50..RECORDS).collect()).await;
}

#[tokio::test]
async fn an_acknowledgement_persisted_but_not_answered_is_kept_whole() {
    let root = tempfile::tempdir().unwrap();
    let mut broker = BrokerProcess::start(
        root.path(),
        0,
        Some(strata::failpoint::SHARE_ACKNOWLEDGED_PERSISTED),
    )
    .await;
    let mut c = Client::connect(broker.kafka_addr).await;
    let topic_id = acquired_everything(&mut c, "m1").await;
    let ack = ack_request("m1", 1, topic_id, &[(0, 29, ACCEPT)]);
    c.send(1, &ack).await;
    let status = broker.wait_exit(Duration::from_secs(30)).await;
    assert!(!status.success(), "the crash point aborts: {status}");
    assert!(
        c.is_closed_by_peer(Duration::from_secs(5)).await,
        "no answer was sent"
    );
    let broker = BrokerProcess::start(root.path(), 1, None).await;
    // The write was durable: the accepted records are done; the rest come back.
    redelivered(broker.kafka_addr, topic_id, (30..RECORDS).collect()).await;
    let _ = broker;
}

#[tokio::test]
async fn a_share_partition_start_persisted_before_a_crash_is_kept() {
    // The group keeps share.auto.offset.reset=latest: its share-partition starts at the log
    // end the first time it is fetched (5), and that start is persisted before the fetch is
    // answered. Records produced after it (5..9) are never delivered before the crash; after
    // it they must be, not skipped by a restart that starts again at the new log end (10).
    let root = tempfile::tempdir().unwrap();
    let mut broker = BrokerProcess::start(root.path(), 0, None).await;
    let mut c = Client::connect(broker.kafka_addr).await;
    let topic_id = create_topic(&mut c, TOPIC, 1).await;
    assert_eq!(produce(&mut c, TOPIC, 0, batch(5)).await.error_code, 0);
    join(&mut c, "m1").await;
    assert!(fetch_all(&mut c, "m1", 0, topic_id).await.is_empty());
    assert_eq!(produce(&mut c, TOPIC, 0, batch(5)).await.error_code, 0);
    broker.kill_9();
    let broker = BrokerProcess::start(root.path(), 1, None).await;
    redelivered(broker.kafka_addr, topic_id, (5..10).collect()).await;
}
