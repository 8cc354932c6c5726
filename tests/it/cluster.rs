//! Cluster mode: three in-process brokers form a metadata quorum (`controller.quorum.voters`)
//! and replicate a topic created through it; the controller moves leadership off a broker
//! that stops, and the broker rejoins the ISR after a restart; leadership goes back to the
//! preferred replica with ElectLeaders or by the controller's automatic rebalance.

use std::time::{Duration, Instant};

use kafka_protocol::messages::create_partitions_request::{
    CreatePartitionsAssignment, CreatePartitionsTopic,
};
use kafka_protocol::messages::create_topics_request::{CreatableReplicaAssignment, CreatableTopic};
use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{BrokerId, CreatePartitionsRequest};
use kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse};
use kafka_protocol::messages::{MetadataRequest, MetadataResponse};
use kafka_protocol::ResponseError;

use strata::broker::Offset;
use strata_metadata::ids::BrokerId as MetadataBrokerId;

use crate::harness::*;

const TOPIC: &str = "quorum-replicated";
const METADATA_V: i16 = 12;

pub(crate) struct QuorumCluster {
    /// Brokers 1..=3 at index id - 1.
    brokers: Vec<TestBroker>,
}

/// A port free right now on 127.0.0.1 (voters need fixed metadata RPC addresses). Taken
/// below Linux's ephemeral range (32768+), so the listeners other tests bind on port 0
/// cannot take it between this check and the broker's bind.
pub(crate) fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let seed = (std::process::id() as u16).wrapping_mul(7919) % 12_000;
    loop {
        let port = 20_000 + (seed + NEXT.fetch_add(1, Ordering::Relaxed)) % 12_000;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

impl QuorumCluster {
    pub(crate) async fn start() -> QuorumCluster {
        QuorumCluster::start_with(&[]).await
    }

    /// Three brokers with `extra` settings on each.
    pub(crate) async fn start_with(extra: &[(&str, &str)]) -> QuorumCluster {
        QuorumCluster::start_custom("", extra, |_| Vec::new()).await
    }

    /// Three brokers with `extra_listeners` after the first (PLAINTEXT) listener, `extra`
    /// settings on each and then `per_broker(id)` on broker `id`.
    pub(crate) async fn start_custom(
        extra_listeners: &str,
        extra: &[(&str, &str)],
        per_broker: impl Fn(i32) -> Vec<(String, String)>,
    ) -> QuorumCluster {
        let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let voters = ports
            .iter()
            .enumerate()
            .map(|(i, p)| format!("{}@127.0.0.1:{p}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let configs: Vec<Vec<(String, String)>> = ports
            .iter()
            .enumerate()
            .map(|(i, port)| {
                vec![
                    // No cluster.id: the quorum settles one for all three.
                    ("node.id".into(), (i + 1).to_string()),
                    (
                        "listeners".into(),
                        format!(
                            "PLAINTEXT://127.0.0.1:0,{extra_listeners}{}CONTROLLER://127.0.0.1:{port}",
                            if extra_listeners.is_empty() { "" } else { "," }
                        ),
                    ),
                    ("controller.listener.names".into(), "CONTROLLER".into()),
                    ("controller.quorum.voters".into(), voters.clone()),
                    ("broker.session.timeout.ms".into(), "2000".into()),
                    ("broker.heartbeat.interval.ms".into(), "250".into()),
                ]
                .into_iter()
                .chain(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())))
                .chain(per_broker(i as i32 + 1))
                .collect()
            })
            .collect();
        // Registration needs a quorum: the three start together.
        let starts = configs.iter().map(|cfg| async move {
            let cfg: Vec<(&str, &str)> =
                cfg.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            TestBroker::start_with(&cfg).await
        });
        let brokers = futures::future::join_all(starts).await;
        // Every broker sees all three unfenced (a topic with RF=3 can be placed).
        for b in &brokers {
            eventually("three unfenced brokers", || async move {
                b.services()
                    .cluster
                    .as_ref()
                    .map(|c| strata::controller::admin::unfenced_brokers(c))
                    == Some(3)
            })
            .await;
        }
        QuorumCluster { brokers }
    }

    pub(crate) fn broker(&self, id: i32) -> &TestBroker {
        &self.brokers[(id - 1) as usize]
    }

    pub(crate) fn broker_mut(&mut self, id: i32) -> &mut TestBroker {
        &mut self.brokers[(id - 1) as usize]
    }

    /// The partition's (leader, sorted ISR) as the metadata on broker `id` has it.
    fn partition_state(&self, id: i32) -> Option<(Option<i32>, Vec<i32>)> {
        let control = self.broker(id).services().cluster.as_ref()?;
        let state = control.node().ok()?.state();
        let p = state.topic_by_name(TOPIC)?.partitions.first()?.clone();
        let mut isr: Vec<i32> = p.isr.iter().map(|b| b.0).collect();
        isr.sort_unstable();
        Some((p.leader.map(|b| b.0), isr))
    }

    pub(crate) async fn shutdown(self) {
        for b in self.brokers {
            b.shutdown().await;
        }
    }
}

async fn metadata(b: &TestBroker) -> MetadataResponse {
    let mut req = MetadataRequest::default();
    let mut t = MetadataRequestTopic::default();
    t.name = Some(name(TOPIC));
    req.topics = Some(vec![t]);
    req.allow_auto_topic_creation = false;
    b.client().await.call(METADATA_V, &req).await
}

/// (broker ids, leader of partition 0) in broker `b`'s Metadata answer.
async fn view(b: &TestBroker) -> (Vec<i32>, i32) {
    let m = metadata(b).await;
    let mut ids: Vec<i32> = m.brokers.iter().map(|x| x.node_id.0).collect();
    ids.sort_unstable();
    let leader = m
        .topics
        .first()
        .filter(|t| t.error_code == 0)
        .and_then(|t| t.partitions.first())
        .filter(|p| p.error_code == 0)
        .map_or(-1, |p| p.leader_id.0);
    (ids, leader)
}

/// Waits up to 20 s for `cond`.
pub(crate) async fn eventually<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !cond().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Produces `count` batches of 5 records with acks=all to `leader`; returns their offsets.
async fn produce_all(b: &TestBroker, count: usize) -> Vec<i64> {
    let mut c = b.client().await;
    let mut offsets = Vec::new();
    for _ in 0..count {
        let r = produce(&mut c, TOPIC, 0, batch(5)).await;
        assert_eq!(r.error_code, 0, "acks=all produce to the leader: {r:?}");
        offsets.push(r.base_offset);
    }
    offsets
}

/// Every record of partition 0 that `b` serves, up to its high watermark.
async fn read_all(b: &TestBroker) -> Vec<i64> {
    let mut c = b.client().await;
    let mut offsets = Vec::new();
    loop {
        let a = FetchArgs {
            offset: offsets.last().map_or(0, |o| o + 1),
            ..FetchArgs::default()
        };
        let data = fetch(&mut c, TOPIC, 0, a).await;
        assert_eq!(data.error_code, 0, "fetch from the leader");
        let got = record_offsets(&data.records);
        if got.is_empty() {
            return offsets;
        }
        offsets.extend(got);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn quorum_replicates_a_topic_and_moves_leadership_off_a_stopped_broker() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("strata=info,strata::replication=debug,strata_metadata=info,openraft=warn")
        .with_test_writer()
        .try_init();
    let mut c = QuorumCluster::start().await;

    // Every broker sees the three brokers unfenced.
    for id in 1..=3 {
        let b = c.broker(id);
        eventually("every broker lists 3 brokers", || async {
            view(b).await.0 == vec![1, 2, 3]
        })
        .await;
    }

    // CreateTopics with RF=3 on any broker goes through the quorum.
    let mut t = CreatableTopic::default();
    t.name = name(TOPIC);
    t.num_partitions = 1;
    t.replication_factor = 3;
    let mut admin = c.broker(2).client().await;
    let r = create_topics(&mut admin, vec![t]).await.remove(0);
    assert_eq!(r.error_code, 0, "create: {:?}", r.error_message);
    assert!(!r.topic_id.is_nil());
    // RF above the number of unfenced brokers is refused as Kafka does.
    let mut too_many = CreatableTopic::default();
    too_many.name = name("too-many-replicas");
    too_many.num_partitions = 1;
    too_many.replication_factor = 4;
    let r = create_topics(&mut admin, vec![too_many]).await.remove(0);
    assert_eq!(r.error_code, ResponseError::InvalidReplicationFactor.code());

    // Explicit replicas, topic configs and deletion go through the quorum to every broker.
    let mut assigned = CreatableTopic::default();
    assigned.name = name("assigned");
    assigned.num_partitions = -1;
    assigned.replication_factor = -1;
    let mut a = CreatableReplicaAssignment::default();
    a.partition_index = 0;
    a.broker_ids = vec![BrokerId(3), BrokerId(1)];
    assigned.assignments = vec![a];
    let r = create_topics(&mut admin, vec![assigned]).await.remove(0);
    assert_eq!(
        r.error_code, 0,
        "create with assignments: {:?}",
        r.error_message
    );
    let mut unknown = CreatableTopic::default();
    unknown.name = name("assigned-to-nobody");
    unknown.num_partitions = -1;
    unknown.replication_factor = -1;
    let mut a = CreatableReplicaAssignment::default();
    a.partition_index = 0;
    a.broker_ids = vec![BrokerId(7)];
    unknown.assignments = vec![a];
    let r = create_topics(&mut admin, vec![unknown]).await.remove(0);
    assert_eq!(r.error_code, ResponseError::InvalidReplicaAssignment.code());
    let b1 = c.broker(1).broker().clone();
    tokio::task::spawn_blocking(move || {
        b1.set_topic_configs(
            "assigned",
            [("retention.ms".to_string(), "123456".to_string())].into(),
        )
    })
    .await
    .unwrap()
    .expect("topic configs through the quorum");
    for id in 1..=3 {
        let b = c.broker(id).broker().clone();
        eventually("the topic config on every broker", || {
            let b = b.clone();
            async move {
                b.topic("assigned").is_some_and(|t| {
                    t.config.retention_ms == 123456
                        && t.partitions[0].replica_set().replicas == vec![3, 1]
                })
            }
        })
        .await;
    }
    // CreatePartitions with explicit replicas, checked against the registered brokers.
    for (replicas, code) in [
        (vec![7, 1], ResponseError::InvalidReplicaAssignment.code()),
        (vec![2], ResponseError::InvalidReplicaAssignment.code()),
        (vec![2, 3], 0),
    ] {
        let mut t = CreatePartitionsTopic::default();
        t.name = name("assigned");
        t.count = 2;
        let mut a = CreatePartitionsAssignment::default();
        a.broker_ids = replicas.iter().map(|id| BrokerId(*id)).collect();
        t.assignments = Some(vec![a]);
        let mut req = CreatePartitionsRequest::default();
        req.topics = vec![t];
        req.timeout_ms = 10_000;
        let r = c.broker(3).client().await.call(3, &req).await;
        assert_eq!(
            r.results[0].error_code, code,
            "{replicas:?}: {:?}",
            r.results[0].error_message
        );
    }
    for id in 1..=3 {
        let b = c.broker(id).broker().clone();
        eventually("the new partition on every broker", || {
            let b = b.clone();
            async move {
                b.topic("assigned").is_some_and(|t| {
                    t.partitions.len() == 2 && t.partitions[1].replica_set().replicas == vec![2, 3]
                })
            }
        })
        .await;
    }
    // A count no controller should size its placement by, validated or not.
    for validate_only in [true, false] {
        let mut t = CreatePartitionsTopic::default();
        t.name = name("assigned");
        t.count = i32::MAX;
        let mut req = CreatePartitionsRequest::default();
        req.topics = vec![t];
        req.timeout_ms = 10_000;
        req.validate_only = validate_only;
        let r = c.broker(2).client().await.call(3, &req).await;
        assert_eq!(
            r.results[0].error_code,
            ResponseError::InvalidPartitions.code(),
            "{:?}",
            r.results[0].error_message
        );
    }
    let b2 = c.broker(2).broker().clone();
    tokio::task::spawn_blocking(move || b2.delete_topic("assigned"))
        .await
        .unwrap()
        .expect("delete through the quorum");
    for id in 1..=3 {
        let b = c.broker(id).broker().clone();
        eventually("the topic deleted on every broker", || {
            let b = b.clone();
            async move { b.topic("assigned").is_none() }
        })
        .await;
    }

    // Every broker lists the three brokers and the same leader.
    let mut leader = -1;
    for id in 1..=3 {
        let b = c.broker(id);
        eventually(
            "every broker's metadata shows 3 brokers and a leader",
            || async {
                let (ids, l) = view(b).await;
                ids == vec![1, 2, 3] && l > 0
            },
        )
        .await;
        let (_, l) = view(b).await;
        assert!(
            leader == -1 || leader == l,
            "brokers disagree on the leader"
        );
        leader = l;
    }

    // acks=all to the leader, read back from it.
    let first = produce_all(c.broker(leader), 10).await;
    assert_eq!(first, (0..10).map(|i| i * 5).collect::<Vec<i64>>());
    assert_eq!(
        read_all(c.broker(leader)).await,
        (0..50).collect::<Vec<i64>>()
    );

    // Stop the leader: the controller moves leadership to another ISR member.
    let stopped_at = Instant::now();
    c.broker_mut(leader).stop().await;
    let survivor = if leader == 1 { 2 } else { 1 };
    let old = leader;
    {
        let c = &c;
        eventually("a new leader from the ISR", || async move {
            c.partition_state(survivor)
                .is_some_and(|(l, isr)| l.is_some_and(|l| l != old) && !isr.contains(&old))
        })
        .await;
    }
    let (new_leader, isr) = c.partition_state(survivor).expect("partition state");
    let new_leader = new_leader.expect("a leader");
    println!(
        "new leader {new_leader} (ISR {isr:?}) {:?} after stopping broker {old}",
        stopped_at.elapsed()
    );
    {
        let b = c.broker(new_leader);
        eventually("the new leader serves the partition", || async move {
            view(b).await.1 == new_leader
        })
        .await;
    }

    // acks=all continues on the new leader; no acknowledged record is lost.
    let second = produce_all(c.broker(new_leader), 10).await;
    assert_eq!(second, (10..20).map(|i| i * 5).collect::<Vec<i64>>());
    assert_eq!(
        read_all(c.broker(new_leader)).await,
        (0..100).collect::<Vec<i64>>()
    );

    // The stopped broker rejoins, catches up and re-enters the ISR.
    c.broker_mut(old).resume().await;
    {
        let c = &c;
        eventually("the restarted broker re-enters the ISR", || async move {
            c.partition_state(survivor)
                .is_some_and(|(_, isr)| isr == vec![1, 2, 3])
        })
        .await;
    }
    let rejoined = c
        .broker(old)
        .broker()
        .partition(TOPIC, 0)
        .expect("the restarted broker has the partition");
    assert_eq!(rejoined.offsets().log_end_offset, Offset(100));
    assert_eq!(view(c.broker(old)).await, (vec![1, 2, 3], new_leader));

    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn controller_fences_a_crashed_leader_after_its_session_expires() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("strata=info,strata::replication=debug,strata_metadata=info,openraft=warn")
        .with_test_writer()
        .try_init();
    let mut c = QuorumCluster::start().await;
    for id in 1..=3 {
        let b = c.broker(id);
        eventually("every broker lists 3 brokers", || async {
            view(b).await.0 == vec![1, 2, 3]
        })
        .await;
    }
    let mut t = CreatableTopic::default();
    t.name = name(TOPIC);
    t.num_partitions = 1;
    t.replication_factor = 3;
    let r = create_topics(&mut c.broker(1).client().await, vec![t])
        .await
        .remove(0);
    assert_eq!(r.error_code, 0, "create: {:?}", r.error_message);
    {
        let c = &c;
        eventually("a leader with a full ISR", || async move {
            c.partition_state(1)
                .is_some_and(|(l, isr)| l.is_some() && isr == vec![1, 2, 3])
        })
        .await;
    }
    let (leader, _) = c.partition_state(1).expect("partition state");
    let old = leader.expect("a leader");
    {
        let b = c.broker(old);
        eventually("the leader serves the partition", || async move {
            view(b).await.1 == old
        })
        .await;
    }
    assert_eq!(produce_all(c.broker(old), 4).await, vec![0, 5, 10, 15]);

    // A crash: no controlled shutdown, the heartbeats just stop.
    let crashed_at = Instant::now();
    c.broker_mut(old).crash().await;
    let survivor = if old == 1 { 2 } else { 1 };
    {
        let c = &c;
        eventually("the crashed leader fenced and replaced", || async move {
            c.partition_state(survivor)
                .is_some_and(|(l, isr)| l.is_some_and(|l| l != old) && !isr.contains(&old))
        })
        .await;
    }
    let elapsed = crashed_at.elapsed();
    let fenced = c
        .broker(survivor)
        .services()
        .cluster
        .as_ref()
        .and_then(|control| control.node().ok())
        .and_then(|node| node.state().broker(MetadataBrokerId(old)).map(|b| b.fenced));
    assert_eq!(
        fenced,
        Some(true),
        "the controller fenced the crashed broker"
    );
    let new_leader = c
        .partition_state(survivor)
        .and_then(|(l, _)| l)
        .expect("a new leader");
    println!("broker {old} crashed: fenced and replaced by {new_leader} after {elapsed:?}");
    {
        let b = c.broker(new_leader);
        eventually("the new leader serves the partition", || async move {
            view(b).await.1 == new_leader
        })
        .await;
    }
    assert_eq!(
        produce_all(c.broker(new_leader), 4).await,
        vec![20, 25, 30, 35]
    );
    assert_eq!(
        read_all(c.broker(new_leader)).await,
        (0..40).collect::<Vec<i64>>()
    );

    // After a restart the broker registers again and rejoins the ISR.
    c.broker_mut(old).resume().await;
    {
        let c = &c;
        eventually("the restarted broker re-enters the ISR", || async move {
            c.partition_state(survivor)
                .is_some_and(|(_, isr)| isr == vec![1, 2, 3])
        })
        .await;
    }
    c.shutdown().await;
}

/// Creates [`TOPIC`] (RF 3) on a fresh cluster, stops the leader of its partition (its
/// preferred replica), waits for the failover, restarts it and waits until it is back in the
/// ISR. Returns (preferred replica, the leader that took over); 20 records are written.
async fn fail_over_and_rejoin(c: &mut QuorumCluster) -> (i32, i32) {
    for id in 1..=3 {
        let b = c.broker(id);
        eventually("every broker lists 3 brokers", || async {
            view(b).await.0 == vec![1, 2, 3]
        })
        .await;
    }
    let mut t = CreatableTopic::default();
    t.name = name(TOPIC);
    t.num_partitions = 1;
    t.replication_factor = 3;
    let r = create_topics(&mut c.broker(1).client().await, vec![t])
        .await
        .remove(0);
    assert_eq!(r.error_code, 0, "create: {:?}", r.error_message);
    {
        let c = &*c;
        eventually("a leader with a full ISR", || async move {
            c.partition_state(1)
                .is_some_and(|(l, isr)| l.is_some() && isr == vec![1, 2, 3])
        })
        .await;
    }
    let preferred = {
        let control = c
            .broker(1)
            .services()
            .cluster
            .as_ref()
            .expect("cluster mode");
        let state = control.node().expect("metadata node").state();
        let p = &state.topic_by_name(TOPIC).expect("topic").partitions[0];
        assert_eq!(
            p.leader,
            p.replicas.first().copied(),
            "the first replica leads"
        );
        p.replicas[0].0
    };
    {
        let b = c.broker(preferred);
        eventually("the leader serves the partition", || async move {
            view(b).await.1 == preferred
        })
        .await;
    }
    assert_eq!(produce_all(c.broker(preferred), 2).await, vec![0, 5]);

    c.broker_mut(preferred).stop().await;
    let survivor = if preferred == 1 { 2 } else { 1 };
    {
        let c = &*c;
        eventually("a new leader from the ISR", || async move {
            c.partition_state(survivor).is_some_and(|(l, isr)| {
                l.is_some_and(|l| l != preferred) && !isr.contains(&preferred)
            })
        })
        .await;
    }
    let new_leader = c
        .partition_state(survivor)
        .and_then(|(l, _)| l)
        .expect("a new leader");
    {
        let b = c.broker(new_leader);
        eventually("the new leader serves the partition", || async move {
            view(b).await.1 == new_leader
        })
        .await;
    }
    assert_eq!(produce_all(c.broker(new_leader), 2).await, vec![10, 15]);

    c.broker_mut(preferred).resume().await;
    {
        let c = &*c;
        eventually("the restarted broker back in the ISR", || async move {
            c.partition_state(survivor)
                .is_some_and(|(_, isr)| isr == vec![1, 2, 3])
        })
        .await;
    }
    (preferred, new_leader)
}

async fn elect_leaders(
    b: &TestBroker,
    version: i16,
    election_type: i8,
    partitions: Option<Vec<(&str, Vec<i32>)>>,
) -> ElectLeadersResponse {
    let mut req = ElectLeadersRequest::default();
    req.election_type = election_type;
    req.timeout_ms = 15_000;
    req.topic_partitions = partitions.map(|topics| {
        topics
            .into_iter()
            .map(|(topic, partitions)| {
                let mut t = TopicPartitions::default();
                t.topic = name(topic);
                t.partitions = partitions;
                t
            })
            .collect()
    });
    b.client().await.call(version, &req).await
}

/// (topic, partition, error code, error message) of every partition result.
fn election_results(r: &ElectLeadersResponse) -> Vec<(String, i32, i16, Option<String>)> {
    r.replica_election_results
        .iter()
        .flat_map(|t| {
            t.partition_result.iter().map(|p| {
                (
                    t.topic.0.to_string(),
                    p.partition_id,
                    p.error_code,
                    p.error_message.as_ref().map(|m| m.to_string()),
                )
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn elect_leaders_moves_leadership_back_to_the_preferred_replica() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("strata=info,strata_metadata=info,openraft=warn")
        .with_test_writer()
        .try_init();
    let mut c = QuorumCluster::start().await;
    let (preferred, new_leader) = fail_over_and_rejoin(&mut c).await;
    let admin = c.broker(new_leader);
    assert_eq!(
        c.partition_state(preferred).map(|(l, _)| l),
        Some(Some(new_leader)),
        "no rebalance within the default 300 s check interval"
    );

    // UNCLEAN is not needed while the partition has a leader; the leader stays.
    let r = elect_leaders(admin, 2, 1, Some(vec![(TOPIC, vec![0])])).await;
    assert_eq!(
        election_results(&r),
        vec![(
            TOPIC.to_string(),
            0,
            ResponseError::ElectionNotNeeded.code(),
            Some("Leader election not needed for topic partition.".to_string())
        )]
    );
    assert_eq!(
        c.partition_state(preferred).map(|(l, _)| l),
        Some(Some(new_leader))
    );
    let r = elect_leaders(admin, 2, 1, None).await;
    assert!(
        election_results(&r).is_empty(),
        "every partition has a leader: {r:?}"
    );

    // PREFERRED moves leadership back; the answering broker's Metadata shows it at once.
    let r = elect_leaders(admin, 2, 0, Some(vec![(TOPIC, vec![0])])).await;
    assert_eq!(r.error_code, 0);
    assert_eq!(election_results(&r), vec![(TOPIC.to_string(), 0, 0, None)]);
    assert_eq!(view(admin).await.1, preferred);
    for id in 1..=3 {
        let b = c.broker(id);
        eventually(
            "every broker's metadata shows the preferred leader",
            || async move { view(b).await.1 == preferred },
        )
        .await;
    }
    // The preferred replica leads with every acknowledged record.
    assert_eq!(produce_all(c.broker(preferred), 2).await, vec![20, 25]);
    assert_eq!(
        read_all(c.broker(preferred)).await,
        (0..30).collect::<Vec<i64>>()
    );

    // Again (v0, no election type: PREFERRED): not needed; unknown partitions and topics.
    let r = elect_leaders(
        admin,
        0,
        0,
        Some(vec![(TOPIC, vec![0, 7]), ("no-such-topic", vec![0])]),
    )
    .await;
    let unknown = ResponseError::UnknownTopicOrPartition.code();
    assert_eq!(
        election_results(&r),
        vec![
            (
                TOPIC.to_string(),
                0,
                ResponseError::ElectionNotNeeded.code(),
                Some("Leader election not needed for topic partition.".to_string())
            ),
            (
                TOPIC.to_string(),
                7,
                unknown,
                Some(format!("No such partition as {TOPIC}-7"))
            ),
            (
                "no-such-topic".to_string(),
                0,
                unknown,
                Some("No such topic as no-such-topic".to_string())
            ),
        ]
    );
    // Every partition (null): those needing no election are left out.
    let r = elect_leaders(admin, 1, 0, None).await;
    assert_eq!(r.error_code, 0);
    assert!(election_results(&r).is_empty(), "{r:?}");
    assert!(r
        .replica_election_results
        .iter()
        .any(|t| t.topic.0.as_str() == TOPIC));
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn controller_moves_leadership_back_to_the_preferred_replica_by_itself() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("strata=info,strata_metadata=info,openraft=warn")
        .with_test_writer()
        .try_init();
    let mut c =
        QuorumCluster::start_with(&[("leader.imbalance.check.interval.seconds", "1")]).await;
    let started = Instant::now();
    let (preferred, _) = fail_over_and_rejoin(&mut c).await;
    // fail_over_and_rejoin waited for the full ISR; now for leadership, without ElectLeaders.
    {
        let c = &c;
        eventually("the rebalance gives leadership back", || async move {
            c.partition_state(preferred)
                .is_some_and(|(l, isr)| l == Some(preferred) && isr == vec![1, 2, 3])
        })
        .await;
    }
    for id in 1..=3 {
        let b = c.broker(id);
        eventually(
            "every broker's metadata shows the preferred leader",
            || async move { view(b).await.1 == preferred },
        )
        .await;
    }
    println!(
        "leadership back on {preferred} {:?} after the start",
        started.elapsed()
    );
    assert_eq!(produce_all(c.broker(preferred), 2).await, vec![20, 25]);
    c.shutdown().await;
}
