//! Replication between in-process brokers whose roles the tests set through the in-process
//! controller (the stand-in for the Raft metadata quorum): acks=all and the high watermark,
//! byte-identical follower logs, ISR shrink and expansion, and truncation of an old leader's
//! unreplicated suffix after a leader change.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafka_protocol::messages::produce_response::PartitionProduceResponse;
use kafka_protocol::messages::{
    DescribeClusterRequest, MetadataRequest, OffsetForLeaderEpochRequest, ProduceResponse,
};
use kafka_protocol::records::Compression;
use kafka_protocol::ResponseError;
use strata::broker::{LeaderEpoch, Offset};
use strata::replication::in_process::InProcessController;
use strata::replication::{BrokerEndpoint, ClusterBroker, PartitionLeadership};
use uuid::Uuid;

use crate::harness::*;

const TOPIC: &str = "replicated";

struct Cluster {
    /// Brokers 1..=n at index id - 1.
    brokers: Vec<TestBroker>,
    controller: Arc<InProcessController>,
    topic_id: Uuid,
}

fn endpoint(id: i32, b: &TestBroker) -> ClusterBroker {
    ClusterBroker {
        id,
        rack: None,
        endpoints: vec![BrokerEndpoint {
            listener: "PLAINTEXT".into(),
            host: "127.0.0.1".into(),
            port: b.kafka_addr.port(),
        }],
    }
}

impl Cluster {
    async fn start(n: i32, extra: &[(&str, &str)]) -> Cluster {
        let mut brokers = Vec::new();
        for id in 1..=n {
            let node = id.to_string();
            let mut cfg = vec![("node.id", node.as_str()), ("cluster.id", "repl-test")];
            cfg.extend_from_slice(extra);
            brokers.push(TestBroker::start_with(&cfg).await);
        }
        Cluster {
            brokers,
            controller: InProcessController::new(),
            topic_id: Uuid::new_v4(),
        }
    }

    fn broker(&self, id: i32) -> &TestBroker {
        &self.brokers[(id - 1) as usize]
    }

    /// Registers broker `id` with the controller (cluster view, ISR sink, partition states).
    async fn register(&self, id: i32) {
        let controller = self.controller.clone();
        let broker = self.broker(id).broker().clone();
        let endpoint = endpoint(id, self.broker(id));
        tokio::task::spawn_blocking(move || controller.register(&broker, endpoint))
            .await
            .unwrap();
    }

    fn state(
        &self,
        leader: i32,
        leader_epoch: i32,
        isr: &[i32],
        epoch: i32,
    ) -> PartitionLeadership {
        PartitionLeadership {
            topic: TOPIC.into(),
            topic_id: self.topic_id,
            partition: 0,
            leader: Some(leader),
            leader_epoch: LeaderEpoch(leader_epoch),
            replicas: vec![1, 2, 3],
            isr: isr.to_vec(),
            partition_epoch: epoch,
        }
    }

    async fn set_partition(&self, state: PartitionLeadership) {
        let controller = self.controller.clone();
        tokio::task::spawn_blocking(move || controller.set_partitions(vec![state]))
            .await
            .unwrap();
    }

    fn isr(&self) -> Vec<i32> {
        let mut isr = self
            .controller
            .partition(self.topic_id, 0)
            .expect("partition state")
            .isr;
        isr.sort_unstable();
        isr
    }

    fn partition(&self, id: i32) -> Arc<strata::broker::Partition> {
        self.broker(id)
            .broker()
            .partition(TOPIC, 0)
            .expect("partition exists")
    }

    async fn shutdown(self) {
        for b in self.brokers {
            b.shutdown().await;
        }
    }
}

/// Waits up to 15 s for `cond`.
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The stored bytes of the partition on broker `id`, from offset 0 to its log end.
fn log_bytes(c: &Cluster, id: i32) -> Bytes {
    let p = c.partition(id);
    let end = p.offsets().log_end_offset;
    p.read(Offset(0), 64 << 20, end, true)
        .expect("read log")
        .map(|s| s.read().expect("read slice"))
        .unwrap_or_default()
}

async fn produce_with(
    b: &TestBroker,
    acks: i16,
    timeout_ms: i32,
    version: i16,
    records: Bytes,
) -> ProduceResponse {
    let mut req = produce_request(TOPIC, 0, records, acks);
    req.timeout_ms = timeout_ms;
    b.client().await.call(version, &req).await
}

fn only_partition(r: ProduceResponse) -> PartitionProduceResponse {
    r.responses
        .into_iter()
        .next()
        .expect("one topic")
        .partition_responses
        .remove(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_shutting_down_leader_fails_the_appends_still_waiting_for_followers() {
    let c = Cluster::start(3, &[]).await;
    c.set_partition(c.state(1, 0, &[1, 2, 3], 0)).await;
    c.register(1).await;
    // The followers never fetch: this acks=all produce would wait its whole 30 s.
    let mut client = c.broker(1).client().await;
    let waiting = tokio::spawn(async move {
        let mut req = produce_request(TOPIC, 0, batch(3), -1);
        req.timeout_ms = 30_000;
        let r: ProduceResponse = client.call(PRODUCE_V, &req).await;
        only_partition(r)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished());
    let started = std::time::Instant::now();
    c.broker(1).broker().release_replication_waiters();
    let r = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("answered once the shutdown releases it")
        .unwrap();
    assert_eq!(r.error_code, ResponseError::NotLeaderOrFollower.code());
    assert!(started.elapsed() < Duration::from_secs(2));
    // Not acknowledged, and not visible either: the high watermark did not move.
    assert_eq!(c.partition(1).offsets().high_watermark, Offset(0));
    // Later acks=all appends fail at once; acks=1 still appends locally.
    let r = only_partition(produce_with(c.broker(1), -1, 30_000, PRODUCE_V, batch(1)).await);
    assert_eq!(r.error_code, ResponseError::NotLeaderOrFollower.code());
    let r = only_partition(produce_with(c.broker(1), 1, 5_000, PRODUCE_V, batch(1)).await);
    assert_eq!(r.error_code, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acks_all_waits_for_the_isr_and_followers_store_identical_bytes() {
    let c = Cluster::start(3, &[]).await;
    c.set_partition(c.state(1, 0, &[1, 2, 3], 0)).await;
    // Only the leader knows its state: the followers do not fetch yet.
    c.register(1).await;

    // acks=all cannot complete while the ISR has not fetched: REQUEST_TIMED_OUT.
    let r = only_partition(produce_with(c.broker(1), -1, 300, PRODUCE_V, batch(3)).await);
    assert_eq!(r.error_code, ResponseError::RequestTimedOut.code());
    // acks=1 is answered after the local append, but consumers do not see it yet.
    let r = only_partition(produce_with(c.broker(1), 1, 5_000, PRODUCE_V, batch(2)).await);
    assert_eq!((r.error_code, r.base_offset), (0, 3));
    let leader = c.partition(1);
    assert_eq!(leader.offsets().log_end_offset, Offset(5));
    assert_eq!(leader.offsets().high_watermark, Offset(0));
    let mut consumer = c.broker(1).client().await;
    let data = fetch(&mut consumer, TOPIC, 0, FetchArgs::default()).await;
    assert_eq!((data.high_watermark, count_records(&data.records)), (0, 0));

    // A follower's produce is refused with the leader's identity (KIP-951, Produce v10+).
    c.register(2).await;
    c.register(3).await;
    let r = produce_with(c.broker(2), 1, 5_000, 11, batch(1)).await;
    let endpoints = r.node_endpoints.clone();
    let r = only_partition(r);
    assert_eq!(r.error_code, ResponseError::NotLeaderOrFollower.code());
    assert_eq!(
        (r.current_leader.leader_id.0, r.current_leader.leader_epoch),
        (1, 0)
    );
    assert_eq!(endpoints.len(), 1);
    assert_eq!(
        (endpoints[0].node_id.0, endpoints[0].port),
        (1, c.broker(1).kafka_addr.port() as i32)
    );

    // Once the followers fetch, the high watermark reaches the log end and acks=all works.
    eventually("the high watermark to reach the log end", || {
        leader.offsets().high_watermark == Offset(5)
    })
    .await;
    for i in 0..5 {
        let r =
            only_partition(produce_with(c.broker(1), -1, 10_000, PRODUCE_V, batch(i + 1)).await);
        assert_eq!(r.error_code, 0, "acks=all produce {i}");
        // Acknowledged means replicated to the whole ISR.
        assert!(leader.offsets().high_watermark > Offset(r.base_offset + i as i64));
        for id in [2, 3] {
            assert!(c.partition(id).offsets().log_end_offset >= leader.offsets().high_watermark);
        }
    }
    let end = leader.offsets().log_end_offset;
    assert_eq!(end, Offset(20));
    for id in [2, 3] {
        let p = c.partition(id);
        eventually("a follower's high watermark to follow the leader's", || {
            p.offsets().high_watermark == end
        })
        .await;
        assert_eq!(log_bytes(&c, id), log_bytes(&c, 1), "broker {id}'s log");
        assert_eq!(p.with_log(|l| l.latest_epoch()), Some(0));
    }

    // A follower's fetch sent to another follower names the leader (Fetch v16, KIP-951).
    let mut req = fetch_request(TOPIC, 0, &FetchArgs::default());
    req.topics[0].topic_id = c.topic_id;
    req.replica_state.replica_id = 3.into();
    let r = c.broker(2).client().await.call(16, &req).await;
    let p = &r.responses[0].partitions[0];
    assert_eq!(p.error_code, ResponseError::NotLeaderOrFollower.code());
    assert_eq!(
        (p.current_leader.leader_id.0, p.current_leader.leader_epoch),
        (1, 0)
    );
    assert_eq!(
        r.node_endpoints
            .iter()
            .map(|e| (e.node_id.0, e.port))
            .collect::<Vec<_>>(),
        vec![(1, c.broker(1).kafka_addr.port() as i32)]
    );
    // So does a consumer's before KIP-392 (Fetch v10); from v11 it may read a follower.
    let r = c
        .broker(2)
        .client()
        .await
        .call(10, &fetch_request(TOPIC, 0, &FetchArgs::default()))
        .await;
    assert_eq!(
        r.responses[0].partitions[0].error_code,
        ResponseError::NotLeaderOrFollower.code()
    );

    // Malformed control-plane states are refused with a reason, and change nothing.
    let mut bad = c.state(4, 1, &[1, 2, 3], 1);
    bad.replicas = vec![1, 2, 3];
    let b = c.broker(1).broker().clone();
    let refused = tokio::task::spawn_blocking(move || {
        let mut huge = bad.clone();
        huge.leader = Some(1);
        huge.partition = 1 << 30;
        (
            b.apply_partition_states(vec![bad])
                .map_err(|e| e.to_string()),
            b.apply_partition_states(vec![huge])
                .map_err(|e| e.to_string()),
        )
    })
    .await
    .unwrap();
    assert!(
        refused
            .0
            .as_ref()
            .is_err_and(|e| e.contains("leader is not a replica")),
        "{refused:?}"
    );
    assert!(
        refused
            .1
            .as_ref()
            .is_err_and(|e| e.contains("out of range")),
        "{refused:?}"
    );
    assert!(leader.is_leader());
    assert_eq!(leader.leader_and_epoch(), (Some(1), LeaderEpoch(0)));

    // Every broker describes the same cluster and partition.
    for id in 1..=3 {
        let mut client = c.broker(id).client().await;
        let md = client
            .call(12, &MetadataRequest::default().with_topics(None))
            .await;
        let mut ids: Vec<i32> = md.brokers.iter().map(|b| b.node_id.0).collect();
        ids.sort_unstable();
        assert_eq!(ids, vec![1, 2, 3]);
        let t = md
            .topics
            .iter()
            .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == TOPIC))
            .expect("topic in metadata");
        let p = &t.partitions[0];
        assert_eq!((p.leader_id.0, p.leader_epoch), (1, 0));
        let mut isr: Vec<i32> = p.isr_nodes.iter().map(|n| n.0).collect();
        isr.sort_unstable();
        assert_eq!(isr, vec![1, 2, 3]);
        assert!(p.offline_replicas.is_empty());
        let dc = client.call(0, &DescribeClusterRequest::default()).await;
        assert_eq!(dc.brokers.len(), 3);
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stopped_follower_leaves_the_isr_and_rejoins_after_catching_up() {
    let mut c = Cluster::start(
        3,
        &[
            ("replica.lag.time.max.ms", "1000"),
            ("min.insync.replicas", "2"),
            ("replica.fetch.backoff.ms", "100"),
        ],
    )
    .await;
    c.set_partition(c.state(1, 0, &[1, 2, 3], 0)).await;
    for id in 1..=3 {
        c.register(id).await;
    }
    let r = only_partition(produce_with(c.broker(1), -1, 10_000, PRODUCE_V, batch(4)).await);
    assert_eq!(r.error_code, 0);

    // Broker 3 stops and falls behind: after replica.lag.time.max.ms without catching up the
    // leader drops it from the ISR. (A stopped follower that has everything stays in sync.)
    c.brokers[2].stop().await;
    let r = only_partition(produce_with(c.broker(1), 1, 10_000, PRODUCE_V, batch(1)).await);
    assert_eq!((r.error_code, r.base_offset), (0, 4));
    // The controller commits the shrink before the leader applies it: wait for both.
    let leader = c.partition(1);
    eventually("the ISR to shrink to [1, 2]", || {
        c.isr() == vec![1, 2] && leader.isr_len() == 2
    })
    .await;
    let r = only_partition(produce_with(c.broker(1), -1, 10_000, PRODUCE_V, batch(3)).await);
    assert_eq!(
        (r.error_code, r.base_offset),
        (0, 5),
        "ISR of 2 meets min.insync.replicas=2"
    );

    // Broker 2 stops too: only the leader is left, below min.insync.replicas.
    c.brokers[1].stop().await;
    let r = only_partition(produce_with(c.broker(1), 1, 10_000, PRODUCE_V, batch(1)).await);
    assert_eq!((r.error_code, r.base_offset), (0, 8));
    eventually("the ISR to shrink to [1]", || {
        c.isr() == vec![1] && leader.isr_len() == 1
    })
    .await;
    let r = only_partition(produce_with(c.broker(1), -1, 10_000, PRODUCE_V, batch(1)).await);
    assert_eq!(r.error_code, ResponseError::NotEnoughReplicas.code());
    assert_eq!(
        leader.offsets().log_end_offset,
        Offset(9),
        "nothing appended"
    );
    // acks=1 still appends, but under min ISR the high watermark stays (Kafka 4).
    let r = only_partition(produce_with(c.broker(1), 1, 10_000, PRODUCE_V, batch(2)).await);
    assert_eq!((r.error_code, r.base_offset), (0, 9));
    assert_eq!(leader.offsets().high_watermark, Offset(8));

    // Both come back, catch up and rejoin the ISR; the high watermark moves on.
    for i in [1, 2] {
        c.brokers[i].resume().await;
        c.register(i as i32 + 1).await;
    }
    eventually("the ISR to grow back to [1, 2, 3]", || {
        c.isr() == vec![1, 2, 3]
    })
    .await;
    eventually("the high watermark to reach the log end", || {
        leader.offsets().high_watermark == Offset(11)
    })
    .await;
    for id in [2, 3] {
        let p = c.partition(id);
        eventually("the follower to catch up", || {
            p.offsets().log_end_offset == Offset(11)
        })
        .await;
        assert_eq!(log_bytes(&c, id), log_bytes(&c, 1), "broker {id}'s log");
    }
    let r = only_partition(produce_with(c.broker(1), -1, 10_000, PRODUCE_V, batch(1)).await);
    assert_eq!((r.error_code, r.base_offset), (0, 11));
    let m = &c.broker(1).broker().metrics;
    assert_eq!(
        (
            m.isr_shrinks.load(std::sync::atomic::Ordering::Relaxed),
            m.isr_expands.load(std::sync::atomic::Ordering::Relaxed)
        ),
        (2, 2)
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_leader_makes_the_old_leader_truncate_its_unreplicated_suffix() {
    let c = Cluster::start(3, &[("replica.fetch.backoff.ms", "100")]).await;
    c.set_partition(c.state(1, 0, &[1, 2, 3], 0)).await;
    for id in 1..=3 {
        c.register(id).await;
    }
    let mut acknowledged = Vec::new();
    for i in 0..3 {
        let r = only_partition(produce_with(c.broker(1), -1, 10_000, PRODUCE_V, batch(2)).await);
        assert_eq!(r.error_code, 0, "acks=all produce {i}");
        acknowledged.push(r.base_offset);
    }
    let replicated = c.partition(1).offsets().high_watermark;
    assert_eq!(replicated, Offset(6));
    let acked_bytes = log_bytes(&c, 1);

    // The followers lose the leader (its address no longer answers)...
    let unreachable: Vec<ClusterBroker> = (1..=3)
        .map(|id| {
            let mut e = endpoint(id, c.broker(id));
            if id == 1 {
                e.endpoints[0].port = 1;
            }
            e
        })
        .collect();
    for id in [2, 3] {
        c.broker(id)
            .broker()
            .set_cluster_brokers(unreachable.clone());
    }
    // ...while the old leader still takes acks=1 writes that nobody replicates.
    for _ in 0..2 {
        let r = only_partition(produce_with(c.broker(1), 1, 10_000, PRODUCE_V, batch(3)).await);
        assert_eq!(r.error_code, 0);
    }
    assert_eq!(c.partition(1).offsets().log_end_offset, Offset(12));
    assert_eq!(c.partition(2).offsets().log_end_offset, Offset(6));

    // The controller elects broker 2 with a new epoch; everyone learns it.
    c.set_partition(c.state(2, 1, &[1, 2, 3], 1)).await;
    let good: Vec<ClusterBroker> = (1..=3).map(|id| endpoint(id, c.broker(id))).collect();
    for id in [2, 3] {
        c.broker(id).broker().set_cluster_brokers(good.clone());
    }
    let new_leader = c.partition(2);
    assert!(new_leader.is_leader());
    assert_eq!(new_leader.with_log(|l| l.end_offset_for_epoch(0)), (0, 6));

    // The old leader refuses produce now and names the new leader.
    let r = only_partition(produce_with(c.broker(1), 1, 10_000, 11, batch(1)).await);
    assert_eq!(r.error_code, ResponseError::NotLeaderOrFollower.code());
    assert_eq!(
        (r.current_leader.leader_id.0, r.current_leader.leader_epoch),
        (2, 1)
    );

    // It truncates its divergent suffix (offsets 6..12 of epoch 0) and follows broker 2.
    let old = c.partition(1);
    eventually("the old leader to truncate to the new leader's log", || {
        old.offsets().log_end_offset == Offset(6)
    })
    .await;
    let r = only_partition(produce_with(c.broker(2), -1, 10_000, PRODUCE_V, batch(4)).await);
    assert_eq!((r.error_code, r.base_offset), (0, 6));
    for id in [1, 3] {
        let p = c.partition(id);
        eventually("the followers to replicate the new epoch", || {
            p.offsets().log_end_offset == Offset(10)
        })
        .await;
        assert_eq!(log_bytes(&c, id), log_bytes(&c, 2), "broker {id}'s log");
        assert_eq!(p.with_log(|l| l.end_offset_for_epoch(0)), (0, 6));
        assert_eq!(p.with_log(|l| l.latest_epoch()), Some(1));
    }
    // OffsetForLeaderEpoch is answered by the leader only, with Kafka's end offsets.
    let epoch_end = |client_broker: i32, epoch: i32| {
        let mut p = OffsetForLeaderPartition::default();
        p.partition = 0;
        p.current_leader_epoch = 1;
        p.leader_epoch = epoch;
        let mut t = OffsetForLeaderTopic::default();
        t.topic = name(TOPIC);
        t.partitions = vec![p];
        let mut req = OffsetForLeaderEpochRequest::default();
        req.replica_id = (-1).into();
        req.topics = vec![t];
        let addr = c.broker(client_broker).kafka_addr;
        async move {
            let mut client = crate::client::Client::connect(addr).await;
            let r = client.call(4, &req).await;
            let p = &r.topics[0].partitions[0];
            (p.error_code, p.leader_epoch, p.end_offset)
        }
    };
    assert_eq!(epoch_end(2, 0).await, (0, 0, 6));
    assert_eq!(epoch_end(2, 1).await, (0, 1, 10));
    assert_eq!(epoch_end(2, 5).await, (0, -1, -1), "an unknown newer epoch");
    assert_eq!(
        epoch_end(1, 0).await.0,
        ResponseError::NotLeaderOrFollower.code()
    );
    // A consumer positioned in the truncated suffix learns of the divergence (KIP-320).
    let mut req = fetch_request(
        TOPIC,
        0,
        &FetchArgs {
            offset: 9,
            ..FetchArgs::default()
        },
    );
    req.topics[0].partitions[0].last_fetched_epoch = 0;
    req.topics[0].partitions[0].current_leader_epoch = 1;
    let r = c.broker(2).client().await.call(FETCH_V, &req).await;
    let p = &r.responses[0].partitions[0];
    assert_eq!(p.error_code, 0);
    assert_eq!(
        (p.diverging_epoch.epoch, p.diverging_epoch.end_offset),
        (0, 6)
    );
    // Consumers (Fetch v11+) may read from a follower, up to its high watermark.
    let data = fetch(
        &mut c.broker(3).client().await,
        TOPIC,
        0,
        FetchArgs::default(),
    )
    .await;
    assert_eq!(data.error_code, 0);
    assert_eq!(
        record_offsets(&data.records).len() as i64,
        data.high_watermark
    );

    // No acknowledged record was lost: the first 6 offsets are the bytes acknowledged.
    assert_eq!(&log_bytes(&c, 2)[..acked_bytes.len()], &acked_bytes[..]);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_behind_the_leaders_log_start_restarts_its_log_there() {
    use kafka_protocol::messages::delete_records_request::{
        DeleteRecordsPartition, DeleteRecordsTopic,
    };
    use kafka_protocol::messages::DeleteRecordsRequest;
    let mut c = Cluster::start(
        3,
        &[
            ("replica.lag.time.max.ms", "500"),
            ("replica.fetch.backoff.ms", "100"),
        ],
    )
    .await;
    c.set_partition(c.state(1, 0, &[1, 2, 3], 0)).await;
    for id in 1..=3 {
        c.register(id).await;
    }
    let r = only_partition(produce_with(c.broker(1), -1, 10_000, PRODUCE_V, batch(5)).await);
    assert_eq!(r.error_code, 0);
    c.brokers[2].stop().await;
    for _ in 0..3 {
        let r = only_partition(produce_with(c.broker(1), 1, 10_000, PRODUCE_V, batch(2)).await);
        assert_eq!(r.error_code, 0);
    }
    // The controller commits the shrink before the leader applies it: wait for both.
    let leader = c.partition(1);
    eventually("the ISR to shrink to [1, 2]", || {
        c.isr() == vec![1, 2] && leader.isr_len() == 2
    })
    .await;
    let leader = c.partition(1);
    eventually("the high watermark to reach the log end", || {
        leader.offsets().high_watermark == Offset(11)
    })
    .await;
    // DeleteRecords moves the log start past everything broker 3 has.
    let mut p = DeleteRecordsPartition::default();
    p.partition_index = 0;
    p.offset = 9;
    let mut t = DeleteRecordsTopic::default();
    t.name = name(TOPIC);
    t.partitions = vec![p];
    let mut req = DeleteRecordsRequest::default();
    req.topics = vec![t];
    req.timeout_ms = 10_000;
    let r = c.broker(1).client().await.call(2, &req).await;
    let p = &r.topics[0].partitions[0];
    assert_eq!((p.error_code, p.low_watermark), (0, 9));
    // The in-sync follower follows the leader's log start.
    let follower = c.partition(2);
    eventually("broker 2's log start to follow the leader's", || {
        follower.offsets().log_start_offset == Offset(9)
    })
    .await;

    // Broker 3 comes back with offsets 0..5: out of range, it restarts its log at 9.
    c.brokers[2].resume().await;
    c.register(3).await;
    let lagging = c.partition(3);
    eventually(
        "broker 3 to restart at the leader's log start and catch up",
        || {
            let o = lagging.offsets();
            o.log_start_offset == Offset(9) && o.log_end_offset == Offset(11)
        },
    )
    .await;
    eventually("broker 3 to rejoin the ISR", || c.isr() == vec![1, 2, 3]).await;
    let from_nine = |id: i32| {
        let p = c.partition(id);
        p.read(Offset(9), 1 << 20, Offset(11), true)
            .expect("read")
            .map(|s| s.read().expect("slice"))
            .unwrap_or_default()
    };
    assert_eq!(from_nine(3), from_nine(1));
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_demoted_before_appending_drops_its_empty_epoch_and_replicates_on() {
    let c = Cluster::start(3, &[("replica.fetch.backoff.ms", "100")]).await;
    c.set_partition(c.state(1, 0, &[1, 2, 3], 0)).await;
    for id in 1..=3 {
        c.register(id).await;
    }
    let r = only_partition(produce_with(c.broker(1), -1, 10_000, PRODUCE_V, batch(3)).await);
    assert_eq!(r.error_code, 0);
    // Broker 2 leads epoch 1 without appending anything, then broker 1 is back for epoch 2.
    c.set_partition(c.state(2, 1, &[1, 2, 3], 1)).await;
    assert_eq!(c.partition(2).with_log(|l| l.latest_epoch()), Some(1));
    c.set_partition(c.state(1, 2, &[1, 2, 3], 2)).await;
    let r = only_partition(produce_with(c.broker(1), -1, 10_000, PRODUCE_V, batch(2)).await);
    assert_eq!((r.error_code, r.base_offset), (0, 3));
    for id in [2, 3] {
        let p = c.partition(id);
        eventually("the follower to replicate epoch 2", || {
            p.offsets().log_end_offset == Offset(5)
        })
        .await;
        assert_eq!(log_bytes(&c, id), log_bytes(&c, 1), "broker {id}'s log");
        // Broker 2's empty epoch 1 is gone: its epochs are the leader's.
        assert_eq!(p.with_log(|l| l.end_offset_for_epoch(1)), (0, 3));
        assert_eq!(p.with_log(|l| l.latest_epoch()), Some(2));
    }
    c.shutdown().await;
}

/// A real client (librdkafka through confluent-kafka, when its Python venv is present:
/// `STRATA_PYTHON`, default `/root/.cache/strata/venv/bin/python`): an idempotent acks=all
/// producer keeps producing across a leader change (NOT_LEADER_OR_FOLLOWER, metadata refresh,
/// the new leader's producer state), and a consumer reads every record once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_librdkafka_producer_and_consumer_follow_a_leader_change() {
    use std::process::Stdio;
    let python = std::env::var("STRATA_PYTHON")
        .unwrap_or_else(|_| "/root/.cache/strata/venv/bin/python".to_string());
    let usable = std::process::Command::new(&python)
        .args(["-c", "import confluent_kafka"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !usable {
        eprintln!("skipped: no Python with confluent-kafka at {python}");
        return;
    }
    let c = Cluster::start(3, &[("replica.fetch.backoff.ms", "100")]).await;
    c.set_partition(c.state(1, 0, &[1, 2, 3], 0)).await;
    for id in 1..=3 {
        c.register(id).await;
    }
    let bootstrap = (1..=3)
        .map(|id| format!("127.0.0.1:{}", c.broker(id).kafka_addr.port()))
        .collect::<Vec<_>>()
        .join(",");
    let mut child = std::process::Command::new(&python)
        .args(["-c", LIBRDKAFKA_SCRIPT, &bootstrap, TOPIC])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start python");
    let mut stdin = child.stdin.take().expect("stdin");
    // The client's lines, read on a thread of their own.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let stdout = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut next_line = async || {
        tokio::time::timeout(Duration::from_secs(60), rx.recv())
            .await
            .expect("the client answers in time")
            .expect("client output line")
    };
    assert_eq!(next_line().await, "produced 100");
    // Broker 2 takes over with a new epoch while the client is connected to broker 1.
    c.set_partition(c.state(2, 1, &[1, 2, 3], 1)).await;
    {
        use std::io::Write;
        stdin.write_all(b"go\n").expect("signal the client");
        stdin.flush().expect("signal the client");
    }
    assert_eq!(next_line().await, "produced 200");
    assert_eq!(next_line().await, "consumed 200 in order");
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .expect("wait task")
        .expect("client status");
    assert!(status.success());
    reader.join().expect("reader thread");
    assert_eq!(c.partition(2).offsets().high_watermark, Offset(200));
    for id in [1, 3] {
        let p = c.partition(id);
        eventually("followers to hold every record", || {
            p.offsets().log_end_offset == Offset(200)
        })
        .await;
        assert_eq!(log_bytes(&c, id), log_bytes(&c, 2));
    }
    c.shutdown().await;
}

const LIBRDKAFKA_SCRIPT: &str = r#"
import sys
from confluent_kafka import Consumer, Producer, TopicPartition

bootstrap, topic = sys.argv[1], sys.argv[2]
errors = []
def report(err, msg):
    if err is not None:
        errors.append(str(err))

p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
              "linger.ms": 5, "message.timeout.ms": 30000})
def produce(prefix):
    for i in range(100):
        p.produce(topic, value=f"{prefix}-{i}".encode(), partition=0, on_delivery=report)
        p.poll(0)
    left = p.flush(30)
    assert left == 0 and not errors, (left, errors)

produce("a")
print("produced 100", flush=True)
assert sys.stdin.readline().strip() == "go"
produce("b")
print("produced 200", flush=True)

c = Consumer({"bootstrap.servers": bootstrap, "group.id": "repl-interop",
              "enable.auto.commit": False, "auto.offset.reset": "earliest"})
c.assign([TopicPartition(topic, 0, 0)])
values = []
while len(values) < 200:
    m = c.poll(30)
    assert m is not None, f"no record after {len(values)}"
    assert m.error() is None, m.error()
    values.append(m.value().decode())
c.close()
expected = [f"a-{i}" for i in range(100)] + [f"b-{i}" for i in range(100)]
assert values == expected, values[:10]
print("consumed 200 in order", flush=True)
"#;

/// Every stored byte of the partition on broker `id`, segment after segment.
fn all_log_bytes(c: &Cluster, id: i32) -> Vec<u8> {
    let p = c.partition(id);
    let end = p.offsets().log_end_offset;
    let mut out = Vec::new();
    let mut offset = 0;
    while let Some(slice) = p
        .read(Offset(offset), 1 << 20, end, true)
        .expect("read log")
    {
        let bytes = slice.read().expect("read slice");
        if bytes.is_empty() {
            break;
        }
        let offsets = record_offsets(&Some(bytes.clone()));
        offset = offsets.last().expect("records") + 1;
        out.extend_from_slice(&bytes);
    }
    out
}

/// acks=all producers on broker `leader`, `PRODUCERS` at once: each acknowledged value with
/// its offset.
async fn produce_concurrently(c: &Cluster, leader: i32, tag: &str) -> Vec<(i64, Vec<u8>)> {
    const PRODUCERS: usize = 4;
    const BATCHES: usize = 60;
    const PER_BATCH: usize = 3;
    let mut tasks = Vec::new();
    for p in 0..PRODUCERS {
        let mut client = c.broker(leader).client().await;
        let tag = tag.to_string();
        tasks.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            for n in 0..BATCHES {
                let values: Vec<Vec<u8>> = (0..PER_BATCH)
                    .map(|i| format!("{tag}-p{p}-{:04}", n * PER_BATCH + i).into_bytes())
                    .collect();
                let refs: Vec<&[u8]> = values.iter().map(|v| v.as_slice()).collect();
                let records = batch_with(&refs, &[now_ms(); PER_BATCH], Compression::None, None);
                let mut req = produce_request(TOPIC, 0, records, -1);
                req.timeout_ms = 10_000;
                let r = only_partition(client.call(PRODUCE_V, &req).await);
                assert_eq!(r.error_code, 0, "{tag} producer {p} batch {n}");
                for (i, v) in values.into_iter().enumerate() {
                    acked.push((r.base_offset + i as i64, v));
                }
            }
            acked
        }));
    }
    let mut acked = Vec::new();
    for t in tasks {
        acked.extend(t.await.unwrap());
    }
    acked
}

/// Followers append on the async worker until a batch would roll (`log.roll.ms` here), fsync
/// (`flush.messages`) or start an epoch, which goes to the blocking pool; the leader serves
/// their fetches there too. Under concurrent acks=all producers and a leader change, every
/// acknowledged record is on all three brokers once, at the offset it was acknowledged at,
/// and the three logs are the same bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn followers_keep_every_acknowledged_record_through_rolls_flushes_and_a_leader_change() {
    let c = Cluster::start(
        3,
        &[("log.roll.ms", "40"), ("log.flush.interval.messages", "7")],
    )
    .await;
    c.set_partition(c.state(1, 0, &[1, 2, 3], 0)).await;
    for id in 1..=3 {
        c.register(id).await;
    }
    let mut acked = produce_concurrently(&c, 1, "epoch0").await;
    c.set_partition(c.state(2, 1, &[1, 2, 3], 1)).await;
    let new_leader = c.partition(2);
    eventually("broker 2 to lead", || new_leader.is_leader()).await;
    acked.extend(produce_concurrently(&c, 2, "epoch1").await);

    let end = new_leader.offsets().log_end_offset;
    assert_eq!(end, Offset(acked.len() as i64));
    for id in [1, 3] {
        let p = c.partition(id);
        eventually("a follower to reach the leader's end", || {
            p.offsets().log_end_offset == end && p.offsets().high_watermark == end
        })
        .await;
    }
    let leader_log = all_log_bytes(&c, 2);
    for id in [1, 3] {
        assert!(
            all_log_bytes(&c, id) == leader_log,
            "broker {id}'s log differs from the leader's"
        );
        assert_eq!(c.partition(id).with_log(|l| l.latest_epoch()), Some(1));
    }
    let mut stored = Vec::new();
    let mut bytes = Bytes::from(leader_log);
    for set in kafka_protocol::records::RecordBatchDecoder::decode_all(&mut bytes).unwrap() {
        for r in set.records {
            stored.push((r.offset, r.value.expect("value").to_vec()));
        }
    }
    acked.sort();
    assert_eq!(
        stored, acked,
        "each acknowledged record once, at its offset, and nothing else"
    );
    for id in 1..=3 {
        let segments = c.partition(id).with_log(|l| l.segment_count());
        assert!(segments > 5, "broker {id} rolled {segments} segments");
    }
    c.shutdown().await;
}
