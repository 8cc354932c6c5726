//! Partition reassignment in cluster mode, over the raw protocol: AlterPartitionReassignments
//! copies a partition's data to its new replicas, then switches leadership and replicas to
//! them with offsets and bytes unchanged; ListPartitionReassignments reports it in between;
//! a reassignment under acks=all load loses no acknowledged record.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use kafka_protocol::messages::create_topics_request::{CreatableReplicaAssignment, CreatableTopic};
use kafka_protocol::messages::list_partition_reassignments_request::ListPartitionReassignmentsTopics;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, BrokerId,
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, MetadataRequest,
};
use kafka_protocol::records::RecordBatchDecoder;
use kafka_protocol::ResponseError;
use strata::broker::Offset;

use crate::client::Client;
use crate::cluster::{eventually, QuorumCluster};
use crate::harness::*;

const METADATA_V: i16 = 12;

/// (leader, replicas, ISR) of partition 0 of `topic` in broker `b`'s Metadata answer.
async fn partition_view(b: &TestBroker, topic: &str) -> Option<(i32, Vec<i32>, Vec<i32>)> {
    let mut req = MetadataRequest::default();
    let mut t = MetadataRequestTopic::default();
    t.name = Some(name(topic));
    req.topics = Some(vec![t]);
    let m = b.client().await.call(METADATA_V, &req).await;
    let t = m.topics.first().filter(|t| t.error_code == 0)?;
    let p = t.partitions.first().filter(|p| p.error_code == 0)?;
    Some((
        p.leader_id.0,
        p.replica_nodes.iter().map(|b| b.0).collect(),
        p.isr_nodes.iter().map(|b| b.0).collect(),
    ))
}

async fn broker_count(b: &TestBroker) -> usize {
    let mut req = MetadataRequest::default();
    req.topics = Some(vec![]);
    b.client().await.call(METADATA_V, &req).await.brokers.len()
}

async fn create_on(c: &QuorumCluster, topic: &str, replicas: &[i32]) {
    let mut t = CreatableTopic::default();
    t.name = name(topic);
    t.num_partitions = -1;
    t.replication_factor = -1;
    let mut a = CreatableReplicaAssignment::default();
    a.partition_index = 0;
    a.broker_ids = replicas.iter().map(|id| BrokerId(*id)).collect();
    t.assignments = vec![a];
    let r = create_topics(&mut c.broker(1).client().await, vec![t])
        .await
        .remove(0);
    assert_eq!(r.error_code, 0, "create {topic}: {:?}", r.error_message);
}

async fn reassign(
    client: &mut Client,
    topic: &str,
    replicas: Option<&[i32]>,
) -> AlterPartitionReassignmentsResponse {
    let mut p = ReassignablePartition::default();
    p.partition_index = 0;
    p.replicas = replicas.map(|r| r.iter().map(|id| BrokerId(*id)).collect());
    let mut t = ReassignableTopic::default();
    t.name = name(topic);
    t.partitions = vec![p];
    let mut req = AlterPartitionReassignmentsRequest::default();
    req.timeout_ms = 30_000;
    req.topics = vec![t];
    client.call(1, &req).await
}

fn partition_error(r: &AlterPartitionReassignmentsResponse) -> i16 {
    assert_eq!(r.error_code, 0, "{r:?}");
    r.responses[0].partitions[0].error_code
}

async fn list(client: &mut Client, topic: Option<&str>) -> ListPartitionReassignmentsResponse {
    let mut req = ListPartitionReassignmentsRequest::default();
    req.timeout_ms = 10_000;
    req.topics = topic.map(|t| {
        let mut x = ListPartitionReassignmentsTopics::default();
        x.name = name(t);
        x.partition_indexes = vec![0];
        vec![x]
    });
    client.call(0, &req).await
}

/// The raw record bytes of partition 0 up to the high watermark, fetched from `b`.
async fn read_bytes(b: &TestBroker, topic: &str) -> Vec<u8> {
    let mut c = b.client().await;
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let data = fetch(
            &mut c,
            topic,
            0,
            FetchArgs {
                offset,
                ..FetchArgs::default()
            },
        )
        .await;
        assert_eq!(data.error_code, 0, "fetch {topic} at {offset}");
        let Some(bytes) = data.records.filter(|b| !b.is_empty()) else {
            return out;
        };
        let mut cursor = bytes.clone();
        let sets = RecordBatchDecoder::decode_all(&mut cursor).expect("decode");
        offset = sets
            .iter()
            .flat_map(|s| s.records.iter().map(|r| r.offset))
            .max()
            .expect("records")
            + 1;
        out.extend_from_slice(&bytes);
    }
}

/// offset -> value of every record of partition 0 that `b` serves.
async fn read_values(b: &TestBroker, topic: &str) -> BTreeMap<i64, Bytes> {
    let mut bytes = Bytes::from(read_bytes(b, topic).await);
    RecordBatchDecoder::decode_all(&mut bytes)
        .expect("decode")
        .into_iter()
        .flat_map(|s| s.records)
        .map(|r| (r.offset, r.value.unwrap_or_default()))
        .collect()
}

fn values_batch(values: &[String]) -> Bytes {
    let refs: Vec<&[u8]> = values.iter().map(|v| v.as_bytes()).collect();
    let ts = vec![now_ms(); values.len()];
    batch_with(&refs, &ts, kafka_protocol::records::Compression::None, None)
}

/// The partition's replicas and whether a reassignment is in progress, in broker `id`'s
/// metadata image.
fn image(c: &QuorumCluster, id: i32, topic: &str) -> Option<(Vec<i32>, bool, Option<i32>)> {
    let state = c
        .broker(id)
        .services()
        .cluster
        .as_ref()?
        .node()
        .ok()?
        .state();
    let p = state.topic_by_name(topic)?.partitions.first()?.clone();
    Some((
        p.replicas.iter().map(|b| b.0).collect(),
        p.is_reassigning(),
        p.leader.map(|b| b.0),
    ))
}

async fn started() -> QuorumCluster {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("strata=info,strata_metadata=info,openraft=warn")
        .with_test_writer()
        .try_init();
    let c = QuorumCluster::start().await;
    for id in 1..=3 {
        let b = c.broker(id);
        eventually("3 unfenced brokers", || async move {
            broker_count(b).await == 3
        })
        .await;
    }
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reassignment_copies_the_data_then_switches_to_the_new_replicas() {
    const TOPIC: &str = "moving";
    let c = started().await;
    create_on(&c, TOPIC, &[1]).await;
    {
        let b = c.broker(1);
        eventually("broker 1 leads", || async move {
            partition_view(b, TOPIC).await.is_some_and(|v| v.0 == 1)
        })
        .await;
    }
    let mut producer = c.broker(1).client().await;
    for i in 0..20 {
        let values: Vec<String> = (0..5).map(|j| format!("before-{i}-{j}")).collect();
        let r = produce(&mut producer, TOPIC, 0, values_batch(&values)).await;
        assert_eq!((r.error_code, r.base_offset), (0, i * 5));
    }
    let before = read_bytes(c.broker(1), TOPIC).await;
    assert!(!before.is_empty());

    // Refusals carry Kafka's codes and change nothing.
    let mut admin = c.broker(3).client().await;
    for (topic, target, code) in [
        (TOPIC, None, ResponseError::NoReassignmentInProgress.code()),
        (
            "no-such-topic",
            Some(&[2][..]),
            ResponseError::UnknownTopicOrPartition.code(),
        ),
        (
            TOPIC,
            Some(&[9][..]),
            ResponseError::InvalidReplicaAssignment.code(),
        ),
        (
            TOPIC,
            Some(&[2, 2][..]),
            ResponseError::InvalidReplicaAssignment.code(),
        ),
        (
            TOPIC,
            Some(&[][..]),
            ResponseError::InvalidReplicaAssignment.code(),
        ),
    ] {
        let r = reassign(&mut admin, topic, target).await;
        assert_eq!(partition_error(&r), code, "{topic} {target:?}: {r:?}");
    }
    assert_eq!(image(&c, 3, TOPIC), Some((vec![1], false, Some(1))));

    let started_at = Instant::now();
    let r = reassign(&mut admin, TOPIC, Some(&[2, 3])).await;
    assert_eq!(partition_error(&r), 0, "{r:?}");
    // Answered after commit and sync: this broker's image has the reassignment (or its end).
    let (replicas, reassigning, _) = image(&c, 3, TOPIC).expect("partition");
    if reassigning {
        assert_eq!(replicas, vec![2, 3, 1]);
        let l = list(&mut admin, Some(TOPIC)).await;
        assert_eq!(l.error_code, 0);
        // Possibly finished in between; if listed, it is listed with Kafka's fields.
        if let Some(p) = l.topics.first().map(|t| &t.partitions[0]) {
            let ids = |v: &Vec<BrokerId>| v.iter().map(|b| b.0).collect::<Vec<_>>();
            assert_eq!(
                (
                    ids(&p.replicas),
                    ids(&p.adding_replicas),
                    ids(&p.removing_replicas)
                ),
                (vec![2, 3, 1], vec![2, 3], vec![1])
            );
            let all = list(&mut admin, None).await;
            assert_eq!(all.topics.len(), 1, "{all:?}");
        }
    } else {
        assert_eq!(replicas, vec![2, 3]);
    }

    // The new replicas copy the log, join the ISR, and the reassignment completes.
    for id in 1..=3 {
        let c = &c;
        eventually(
            "the reassignment completes on every broker",
            || async move {
                image(c, id, TOPIC).is_some_and(|(r, busy, l)| {
                    r == vec![2, 3] && !busy && l.is_some_and(|l| l == 2 || l == 3)
                })
            },
        )
        .await;
    }
    println!("reassigned [1] -> [2, 3] in {:?}", started_at.elapsed());
    let (_, _, leader) = image(&c, 2, TOPIC).unwrap();
    let leader = leader.unwrap();
    for id in 1..=3 {
        let b = c.broker(id);
        eventually(
            "Metadata shows the new replicas and leader",
            || async move {
                partition_view(b, TOPIC)
                    .await
                    .is_some_and(|(l, mut r, mut isr)| {
                        r.sort_unstable();
                        isr.sort_unstable();
                        l == leader && r == vec![2, 3] && isr == vec![2, 3]
                    })
            },
        )
        .await;
    }
    let l = list(&mut admin, None).await;
    assert!(l.topics.is_empty(), "nothing in progress: {l:?}");

    // Same offsets, same bytes, from the new leader.
    assert_eq!(read_bytes(c.broker(leader), TOPIC).await, before);
    // The old replica stopped fetching and dropped its copy.
    {
        let b = c.broker(1).broker().clone();
        eventually("broker 1 deleted its copy", || {
            let b = b.clone();
            async move {
                b.partition(TOPIC, 0)
                    .is_some_and(|p| p.offsets().log_end_offset == Offset(0))
            }
        })
        .await;
    }
    // The partition keeps working on its new replicas.
    let mut producer = c.broker(leader).client().await;
    let r = produce(&mut producer, TOPIC, 0, batch(5)).await;
    assert_eq!((r.error_code, r.base_offset), (0, 100));
    let other = if leader == 2 { 3 } else { 2 };
    {
        let b = c.broker(other).broker().clone();
        eventually("the follower replicates the new records", || {
            let b = b.clone();
            async move {
                b.partition(TOPIC, 0)
                    .is_some_and(|p| p.offsets().log_end_offset == Offset(105))
            }
        })
        .await;
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reassignment_under_acks_all_load_loses_no_acknowledged_record() {
    const TOPIC: &str = "moving-under-load";
    let c = Arc::new(started().await);
    create_on(&c, TOPIC, &[1, 2]).await;
    {
        let b = c.broker(1);
        eventually("broker 1 leads with a full ISR", || async move {
            partition_view(b, TOPIC)
                .await
                .is_some_and(|(l, _, isr)| l == 1 && isr.len() == 2)
        })
        .await;
    }

    // A producer that follows the leader and retries a batch until it is acknowledged.
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let producer = {
        let c = c.clone();
        let stop = stop.clone();
        let count = count.clone();
        tokio::spawn(async move {
            let mut acked: Vec<(i64, Vec<String>)> = Vec::new();
            let mut errors = 0u32;
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let Some((leader, _, _)) = partition_view(c.broker(1), TOPIC).await else {
                    continue;
                };
                if !(1..=3).contains(&leader) {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
                let values: Vec<String> = (0..3).map(|j| format!("load-{i}-{j}")).collect();
                let mut client = c.broker(leader).client().await;
                let r = produce(&mut client, TOPIC, 0, values_batch(&values)).await;
                if r.error_code == 0 {
                    acked.push((r.base_offset, values));
                    count.store(acked.len(), Ordering::Relaxed);
                    i += 1;
                } else {
                    errors += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            (acked, errors)
        })
    };
    // Under load before and after the move (however fast it completes).
    let acked_at_least = |n: usize| {
        let count = count.clone();
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            while count.load(Ordering::Relaxed) < n {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the producer stalled at {} acknowledged batches",
                    count.load(Ordering::Relaxed)
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    acked_at_least(5).await;
    let mut admin = c.broker(2).client().await;
    let r = reassign(&mut admin, TOPIC, Some(&[3, 2])).await;
    assert_eq!(partition_error(&r), 0, "{r:?}");
    for id in 1..=3 {
        let c = &c;
        eventually("the reassignment completes", || async move {
            image(c, id, TOPIC)
                .is_some_and(|(r, busy, l)| r == vec![3, 2] && !busy && l.is_some_and(|l| l != 1))
        })
        .await;
    }
    let moved_at = count.load(Ordering::Relaxed);
    acked_at_least(moved_at + 6).await;
    stop.store(true, Ordering::Relaxed);
    let (acked, errors) = producer.await.expect("producer task");
    let (_, _, leader) = image(&c, 3, TOPIC).unwrap();
    let leader = leader.unwrap();
    {
        let c = &c;
        eventually("the new leader serves the partition", || async move {
            partition_view(c.broker(leader), TOPIC)
                .await
                .is_some_and(|v| v.0 == leader)
        })
        .await;
    }
    let log = read_values(c.broker(leader), TOPIC).await;
    assert!(
        acked.len() > 10,
        "only {} batches acknowledged ({errors} errors)",
        acked.len()
    );
    let last = *log.keys().last().expect("records");
    assert_eq!(
        log.keys().copied().collect::<Vec<_>>(),
        (0..=last).collect::<Vec<_>>(),
        "offsets are contiguous"
    );
    for (base, values) in &acked {
        for (j, v) in values.iter().enumerate() {
            let at = base + j as i64;
            assert_eq!(
                log.get(&at).map(|b| b.as_ref()),
                Some(v.as_bytes()),
                "acknowledged record at {at} lost or changed"
            );
        }
    }
    println!(
        "{} acknowledged batches survived the move to {leader}; {errors} retried errors",
        acked.len()
    );
    match Arc::try_unwrap(c) {
        Ok(c) => c.shutdown().await,
        Err(_) => panic!("cluster still shared"),
    }
}
