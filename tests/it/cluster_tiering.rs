//! Tiered storage in cluster mode: three in-process brokers share one bucket (the filesystem
//! store) and replicate a tiered RF=3 topic with small segments and a tiny local retention.
//! Only the leader uploads; followers delete what the manifest covers; a follower that
//! returns after the leader deleted its local copy restarts at the leader's local log start
//! with the leader epochs and producer state from remote storage; a new leader continues the
//! manifest; a consumer from offset 0 gets every record once, in order.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use strata_tiering::PartitionManifest;

use crate::cluster::{eventually, QuorumCluster};
use crate::harness::*;

const TOPIC: &str = "tiered-rf3";

/// (log start, local start, log end, high watermark, segment bases) of broker `b`'s replica.
fn replica(b: &TestBroker) -> (i64, i64, i64, i64, usize) {
    let p = b.broker().partition(TOPIC, 0).expect("replica");
    p.with_log(|l| {
        (
            l.log_start_offset(),
            l.local_start_offset(),
            l.log_end_offset(),
            l.high_watermark(),
            l.segment_count(),
        )
    })
}

/// The manifest as committed in the bucket, read through broker `b`.
async fn manifest(b: &TestBroker) -> Arc<PartitionManifest> {
    let t = b.services().tiering.as_ref().expect("tiering on");
    let topic = b.broker().topic(TOPIC).expect("topic");
    let tp = t.partition(&topic, 0).await.expect("manifest loads");
    tp.refresh(&t.store).await.expect("manifest refresh")
}

fn leader_of(c: &QuorumCluster, id: i32) -> Option<i32> {
    let control = c.broker(id).services().cluster.as_ref()?;
    let state = control.node().ok()?.state();
    state
        .topic_by_name(TOPIC)?
        .partitions
        .first()?
        .leader
        .map(|b| b.0)
}

fn isr_of(c: &QuorumCluster, id: i32) -> Vec<i32> {
    let Some(control) = c.broker(id).services().cluster.as_ref() else {
        return Vec::new();
    };
    let Ok(node) = control.node() else {
        return Vec::new();
    };
    let state = node.state();
    let mut isr: Vec<i32> = state
        .topic_by_name(TOPIC)
        .and_then(|t| t.partitions.first().cloned())
        .map(|p| p.isr.iter().map(|b| b.0).collect())
        .unwrap_or_default();
    isr.sort_unstable();
    isr
}

/// Produces `batches` idempotent batches of 20 records with acks=all, continuing `seq`.
async fn produce_idempotent(b: &TestBroker, pid: (i64, i16), seq: &mut i32, batches: usize) {
    let mut c = b.client().await;
    for _ in 0..batches {
        let r = produce(&mut c, TOPIC, 0, idempotent_batch(20, (pid.0, pid.1, *seq))).await;
        assert_eq!(r.error_code, 0, "acks=all produce to the leader");
        *seq += 20;
    }
}

/// Every record offset a consumer reading the test topic from 0 gets from `b`, until `end`.
async fn consume_from_zero(b: &TestBroker, end: i64) -> Vec<i64> {
    consume_partition(b, TOPIC, 0, end).await
}

/// Remote segments are ordered, without gaps, and overlap only where a new leader's first
/// segment straddles the previous leader's last one.
fn assert_manifest_well_formed(m: &PartitionManifest) {
    for w in m.segments.windows(2) {
        assert!(
            w[1].base_offset <= w[0].next_offset,
            "gap in the remote log: {} .. {}",
            w[0].next_offset,
            w[1].base_offset
        );
        assert!(
            w[1].base_offset > w[0].base_offset && w[1].next_offset > w[0].next_offset,
            "remote segments out of order or one inside another: {:?} then {:?}",
            (w[0].base_offset, w[0].next_offset),
            (w[1].base_offset, w[1].next_offset)
        );
    }
}

/// A tiered RF=3 topic with 4 KiB segments and a one-byte local retention, plus `extra`
/// configs.
fn tiered_rf3_topic(topic: &str, partitions: i32, extra: &[(&str, &str)]) -> CreatableTopic {
    let mut t = CreatableTopic::default();
    t.name = name(topic);
    t.num_partitions = partitions;
    t.replication_factor = 3;
    t.configs = [
        ("remote.storage.enable", "true"),
        ("local.retention.bytes", "1"),
        ("internal.segment.bytes", "4096"),
        ("retention.ms", "-1"),
    ]
    .iter()
    .chain(extra)
    .map(|(k, v)| {
        let mut x = CreatableTopicConfig::default();
        x.name = str_bytes(k);
        x.value = Some(str_bytes(v));
        x
    })
    .collect();
    t
}

/// Three brokers sharing the `file://` bucket under `bucket` (with `extra` settings) and the
/// tiered RF=3 topic with 4 KiB segments and a one-byte local retention; the leader once it
/// serves the partition with a full ISR.
async fn tiered_rf3_cluster(
    bucket: &std::path::Path,
    extra: &[(&str, &str)],
) -> (QuorumCluster, i32) {
    let url = format!("file://{}", bucket.join("objects").display());
    let mut settings = vec![
        ("strata.remote.store.url", url.as_str()),
        ("remote.log.manager.task.interval.ms", "50"),
        ("log.retention.check.interval.ms", "50"),
        ("strata.remote.cache.disk.bytes", "0"),
    ];
    settings.extend_from_slice(extra);
    let c = QuorumCluster::start_with(&settings).await;
    let t = tiered_rf3_topic(TOPIC, 1, &[]);
    let r = create_topics(&mut c.broker(1).client().await, vec![t])
        .await
        .remove(0);
    assert_eq!(r.error_code, 0, "create: {:?}", r.error_message);
    {
        let c = &c;
        eventually("a leader and a full ISR", || async move {
            leader_of(c, 1).is_some() && isr_of(c, 1) == vec![1, 2, 3]
        })
        .await;
    }
    let leader = leader_of(&c, 1).expect("leader");
    {
        let b = c.broker(leader);
        eventually("the leader serves the partition", || async move {
            b.broker()
                .partition(TOPIC, 0)
                .is_some_and(|p| p.is_leader())
        })
        .await;
    }
    (c, leader)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tiered_rf3_topic_followers_retain_locally_catch_up_from_tiered_state_and_survive_failover()
{
    let _ = tracing_subscriber::fmt()
        .with_env_filter("strata=info,strata_tiering=info,strata_metadata=warn,openraft=off")
        .with_test_writer()
        .try_init();
    let bucket = tempfile::tempdir().expect("bucket dir");
    // A stopped follower that was caught up holds the high watermark back until it lags this
    // long and another fetch moves it (the leader does not yet exclude fenced or shut-down
    // brokers, as Kafka's isReplicaIsrEligible does).
    let (mut c, leader) =
        tiered_rf3_cluster(bucket.path(), &[("replica.lag.time.max.ms", "1500")]).await;
    let followers: Vec<i32> = (1..=3).filter(|&b| b != leader).collect();

    // Producer A writes only now: its state must survive in remote snapshots alone.
    let a = init_producer_id(&mut c.broker(leader).client().await).await;
    let mut seq_a = 0;
    produce_idempotent(c.broker(leader), a, &mut seq_a, 40).await;
    let b_pid = init_producer_id(&mut c.broker(leader).client().await).await;
    let mut seq_b = 0;
    produce_idempotent(c.broker(leader), b_pid, &mut seq_b, 20).await;
    let end1 = 60 * 20;

    // 1. The leader uploads and deletes locally; so do the followers, but never past the
    //    manifest.
    for id in std::iter::once(leader).chain(followers.iter().copied()) {
        let c = &c;
        eventually(
            "local segments covered by the manifest deleted",
            || async move {
                let m = manifest(c.broker(leader)).await;
                let (_, local_start, _, _, _) = replica(c.broker(id));
                local_start > 0 && m.end_offset().is_some_and(|e| local_start <= e)
            },
        )
        .await;
    }
    let m = manifest(c.broker(leader)).await;
    assert_manifest_well_formed(&m);
    assert_eq!(m.log_start_offset, 0);
    assert_eq!(m.segments.first().map(|s| s.base_offset), Some(0));
    for id in 1..=3 {
        let (log_start, local_start, end, _, segments) = replica(c.broker(id));
        println!("broker {id}: log start {log_start}, local start {local_start}, end {end}, {segments} local segment(s); remote end {:?}", m.end_offset());
        assert_eq!(
            log_start, 0,
            "broker {id}: the log still starts at 0 (remote)"
        );
        assert!(
            local_start <= m.end_offset().unwrap_or(0),
            "broker {id} deleted past the manifest"
        );
        assert_eq!(end, end1);
    }

    // 2. A follower stops; the leader moves on and deletes locally past the follower's end.
    let lagging = followers[0];
    let (_, _, lagging_end, _, _) = replica(c.broker(lagging));
    c.broker_mut(lagging).stop().await;
    {
        let c = &c;
        eventually("the stopped follower out of the ISR", || async move {
            !isr_of(c, leader).contains(&lagging)
        })
        .await;
    }
    // Past replica.lag.time.max.ms, so the stopped follower no longer holds the high
    // watermark back (see the setting above).
    tokio::time::sleep(Duration::from_millis(2000)).await;
    produce_idempotent(c.broker(leader), b_pid, &mut seq_b, 40).await;
    let end2 = end1 + 40 * 20;
    {
        let c = &c;
        eventually(
            "the leader deleted past the stopped follower's end",
            || async move { replica(c.broker(leader)).1 > lagging_end },
        )
        .await;
    }
    let leader_local_start = replica(c.broker(leader)).1;
    c.broker_mut(lagging).resume().await;
    {
        let c = &c;
        eventually("the returning follower back in the ISR", || async move {
            isr_of(c, leader) == vec![1, 2, 3] && replica(c.broker(lagging)).2 == end2
        })
        .await;
    }
    let (log_start, local_start, end, _, _) = replica(c.broker(lagging));
    assert_eq!(log_start, 0, "the follower's log start is the leader's");
    assert!(
        local_start >= leader_local_start,
        "the follower restarted at the leader's local start ({leader_local_start}), not below: {local_start}"
    );
    assert_eq!(end, end2);
    let states = |id: i32| {
        let p = c.broker(id).broker().partition(TOPIC, 0).expect("replica");
        let mut s: Vec<(i64, i16, i32)> = p.with_log(|l| {
            l.producer_states()
                .into_iter()
                .map(|(pid, epoch, seq, ..)| (pid, epoch, seq))
                .collect()
        });
        s.sort_unstable();
        s
    };
    assert!(
        states(lagging).contains(&(a.0, a.1, seq_a - 1)),
        "producer A (only in remote segments) is known to the returning follower: {:?}",
        states(lagging)
    );
    assert_eq!(states(lagging), states(leader));
    let epochs = |id: i32| {
        let p = c.broker(id).broker().partition(TOPIC, 0).expect("replica");
        p.with_log(|l| {
            (0..=l.latest_epoch().unwrap_or(0))
                .map(|e| l.end_offset_for_epoch(e))
                .collect::<Vec<_>>()
        })
    };
    assert_eq!(
        epochs(lagging),
        epochs(leader),
        "leader epochs of the returning follower"
    );

    // 3. The leader stops: a new one continues the manifest from where it ends.
    let remote_end_before = manifest(c.broker(followers[1]))
        .await
        .end_offset()
        .unwrap_or(0);
    c.broker_mut(leader).stop().await;
    let survivor = followers[1];
    {
        let c = &c;
        eventually("a new leader", || async move {
            leader_of(c, survivor).is_some_and(|l| l != leader)
                && c.broker(survivor)
                    .broker()
                    .partition(TOPIC, 0)
                    .is_some_and(|p| p.is_leader() || p.leader_and_epoch().0 != Some(leader))
        })
        .await;
    }
    let new_leader = leader_of(&c, survivor).expect("new leader");
    {
        let b = c.broker(new_leader);
        eventually("the new leader serves the partition", || async move {
            b.broker()
                .partition(TOPIC, 0)
                .is_some_and(|p| p.is_leader())
        })
        .await;
    }
    produce_idempotent(c.broker(new_leader), b_pid, &mut seq_b, 40).await;
    let end3 = end2 + 40 * 20;
    {
        let c = &c;
        eventually(
            "the new leader uploads past the old remote end",
            || async move {
                let m = manifest(c.broker(new_leader)).await;
                m.end_offset().unwrap_or(0) > remote_end_before + 200
                    && replica(c.broker(new_leader)).1 > remote_end_before
            },
        )
        .await;
    }
    let m = manifest(c.broker(new_leader)).await;
    assert_manifest_well_formed(&m);
    assert!(
        m.leader_epoch > 0 && m.segments.iter().any(|s| s.leader_epoch == m.leader_epoch),
        "the new leader committed segments in its epoch {}",
        m.leader_epoch
    );

    // 4. A consumer from offset 0 on the new leader gets every record once, in order.
    let got = consume_from_zero(c.broker(new_leader), end3).await;
    assert_eq!(got, (0..end3).collect::<Vec<i64>>());

    c.shutdown().await;
}

/// Rehydration in a cluster: every replica, leader and followers, brings the leader's uploaded
/// segments back in front of its own local log from the shared bucket once local retention is
/// raised, and a consumer of each replica's data still gets every record once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_replica_rehydrates_from_the_shared_bucket() {
    let bucket = tempfile::tempdir().expect("bucket dir");
    let (c, leader) = tiered_rf3_cluster(bucket.path(), &[]).await;
    let pid = init_producer_id(&mut c.broker(leader).client().await).await;
    let mut seq = 0;
    produce_idempotent(c.broker(leader), pid, &mut seq, 40).await;
    let end = 40 * 20;
    for id in 1..=3 {
        let c = &c;
        eventually("every replica offloaded", || async move {
            replica(c.broker(id)).1 > 0
        })
        .await;
    }

    let mut client = c.broker(leader).client().await;
    for (k, v) in [
        ("local.retention.bytes", "-1"),
        ("strata.remote.rehydrate.enable", "true"),
    ] {
        let (code, message) = crate::tiering::set_topic_config(&mut client, TOPIC, k, v).await;
        assert_eq!(code, 0, "{k}={v}: {message}");
    }
    for id in 1..=3 {
        let c = &c;
        eventually("every replica rehydrated", || async move {
            replica(c.broker(id)).1 == 0
        })
        .await;
    }
    for id in 1..=3 {
        let (log_start, local_start, log_end, _, _) = replica(c.broker(id));
        assert_eq!(
            (log_start, local_start, log_end),
            (0, 0, end),
            "broker {id}"
        );
        let bytes = c
            .broker(id)
            .broker()
            .partition(TOPIC, 0)
            .expect("replica")
            .with_log(|l| l.size_bytes());
        let leader_bytes = c
            .broker(leader)
            .broker()
            .partition(TOPIC, 0)
            .expect("replica")
            .with_log(|l| l.size_bytes());
        assert_eq!(bytes, leader_bytes, "broker {id} holds the leader's bytes");
    }
    assert_eq!(
        consume_from_zero(c.broker(leader), end).await,
        (0..end).collect::<Vec<_>>()
    );
    // The bucket's catalog records the topic's replication factor.
    let store = &c
        .broker(leader)
        .services()
        .tiering
        .as_ref()
        .expect("tiering")
        .store;
    let (catalog, _) = strata_tiering::catalog::load(store)
        .await
        .expect("catalog loads")
        .expect("a catalog");
    assert_eq!(catalog.topics[TOPIC].replication_factor, 3);
    c.shutdown().await;
}

const REBUILT: &str = "rebuilt";
const EMPTIED: &str = "rebuilt-emptied";
/// Records produced to each partition of [`REBUILT`] (30 batches of 20).
const DATA_END: i64 = 600;

/// Every partition of `topic` has a leader serving it (as broker `id`'s image has it).
async fn leaders_serving(c: &QuorumCluster, topic: &str, partitions: i32) -> Vec<i32> {
    let mut leaders = Vec::new();
    for index in 0..partitions {
        let c = &c;
        let mut leader = None;
        eventually("a leader serving the partition", || {
            let found = (|| {
                let state = c
                    .broker(1)
                    .services()
                    .cluster
                    .as_ref()?
                    .node()
                    .ok()?
                    .state();
                let l = state
                    .topic_by_name(topic)?
                    .partitions
                    .get(index as usize)?
                    .leader?
                    .0;
                c.broker(l)
                    .broker()
                    .partition(topic, index)
                    .filter(|p| p.is_replicated() && p.is_leader())
                    .map(|_| l)
            })();
            leader = found;
            async move { found.is_some() }
        })
        .await;
        leaders.push(leader.expect("leader"));
    }
    leaders
}

/// Every record offset of `topic`-`index` a consumer from offset 0 gets from `b`, skipping
/// the records of a returned batch below the fetch position (as consumers do), until `end`.
async fn consume_partition(b: &TestBroker, topic: &str, index: i32, end: i64) -> Vec<i64> {
    let mut c = b.client().await;
    let mut out: Vec<i64> = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while out.last().map_or(0, |o| o + 1) < end {
        assert!(
            tokio::time::Instant::now() < deadline,
            "consumer stalled at {:?}",
            out.last()
        );
        let next = out.last().map_or(0, |o| o + 1);
        let args = FetchArgs {
            offset: next,
            ..FetchArgs::default()
        };
        let data = fetch(&mut c, topic, index, args).await;
        assert_eq!(data.error_code, 0, "fetch {topic}-{index} at {next}");
        let got: Vec<i64> = record_offsets(&data.records)
            .into_iter()
            .filter(|&o| o >= next)
            .collect();
        if got.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        out.extend(got);
    }
    out
}

/// The group's committed offsets of `topic` partitions 0 and 1, from its coordinator once it
/// has loaded the group.
async fn committed_offsets(c: &QuorumCluster, group: &str, topic: &str) -> Vec<i64> {
    let (_, node) = crate::cluster_coordinators::coordinator(c.broker(1), 0, group).await;
    let mut client = c.broker(node).client().await;
    let parts = [0, 1];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let r = crate::groups::offset_fetch_request(8, &[(group, Some((topic, &parts[..])))]);
        let resp = client.call(8, &r).await;
        let g = &resp.groups[0];
        if g.error_code == 0 {
            return g
                .topics
                .iter()
                .flat_map(|t| t.partitions.iter())
                .map(|p| p.committed_offset)
                .collect();
        }
        assert_eq!(g.error_code, 14, "COORDINATOR_LOAD_IN_PROGRESS at most");
        assert!(tokio::time::Instant::now() < deadline, "group never loaded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// InitProducerId for `txn` on its coordinator, retried while the coordinator is elsewhere
/// or loading.
async fn init_txn_on_coordinator(c: &QuorumCluster, txn: &str) -> (i64, i16) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, node) = crate::cluster_coordinators::coordinator(c.broker(1), 1, txn).await;
        let mut client = c.broker(node).client().await;
        let r = crate::transactions::try_init(&mut client, txn, 60_000, None).await;
        if r.error_code == 0 {
            return (r.producer_id.0, r.producer_epoch);
        }
        // COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR,
        // CONCURRENT_TRANSACTIONS.
        assert!(
            [14, 15, 16, 51].contains(&r.error_code),
            "InitProducerId: {r:?}"
        );
        assert!(
            tokio::time::Instant::now() < deadline,
            "InitProducerId: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Lose every broker disk and the metadata quorum of a three-node cluster, keep the bucket: a
/// new cluster with `strata.remote.cluster.restore.enable` pointed at it comes back with the
/// topics (ids, partition counts, replication factors, configs), every uploaded record at its
/// offset, the committed offsets and a producer-id counter past every id handed out; new
/// records follow the restored ones. On s3s-fs (SigV4) when installed, else the filesystem
/// store.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_that_lost_every_disk_and_its_quorum_is_rebuilt_from_its_bucket() {
    use crate::tiering::s3_server::{S3Kind, S3Server};
    let _ = tracing_subscriber::fmt()
        .with_env_filter("strata=info,strata_tiering=info,strata_metadata=warn,openraft=off")
        .with_test_writer()
        .try_init();
    let bucket = tempfile::tempdir().expect("bucket dir");
    let server = S3Server::start_if_installed(S3Kind::S3sFs, "strata-rebuild").expect("s3s-fs");
    let store: Vec<(String, String)> = match &server {
        Some(s) => s.store_settings("prod"),
        None => vec![(
            "strata.remote.store.url".into(),
            format!("file://{}", bucket.path().join("objects").display()),
        )],
    };
    let mut settings: Vec<(&str, &str)> = store
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    settings.extend_from_slice(&[
        ("remote.log.manager.task.interval.ms", "50"),
        ("log.retention.check.interval.ms", "50"),
        ("strata.remote.cache.disk.bytes", "0"),
        ("strata.remote.internal.topics.enable", "true"),
        ("strata.remote.cluster.restore.enable", "true"),
        ("offsets.topic.num.partitions", "2"),
        ("transaction.state.log.num.partitions", "2"),
    ]);

    // 1. The cluster that will be lost: a tiered RF=3 topic with two partitions. Its quorum
    //    decides the restore first (nothing in the bucket yet); until then topics wait.
    let c = QuorumCluster::start_with(&settings).await;
    let decided = |c: &QuorumCluster| {
        c.broker(1)
            .services()
            .cluster
            .as_ref()
            .and_then(|q| q.node().ok())
            .and_then(|n| n.state().restored_from_bucket())
    };
    {
        let c = &c;
        eventually(
            "the restore decided",
            || async move { decided(c).is_some() },
        )
        .await;
    }
    assert_eq!(decided(&c), Some(true), "an empty bucket restores no topic");
    let t = tiered_rf3_topic(REBUILT, 2, &[("max.message.bytes", "500000")]);
    let emptied = tiered_rf3_topic(EMPTIED, 1, &[]);
    let r = create_topics(&mut c.broker(1).client().await, vec![t, emptied]).await;
    assert!(r.iter().all(|r| r.error_code == 0), "create: {r:?}");
    // A topic whose every record was deleted (DeleteRecords, then remote retention): the
    // bucket keeps only its log start.
    let (emptied_end, emptied_id) = {
        let leader = leaders_serving(&c, EMPTIED, 1).await[0];
        let mut client = c.broker(leader).client().await;
        for _ in 0..10 {
            let r = produce(&mut client, EMPTIED, 0, batch(20)).await;
            assert_eq!(r.error_code, 0);
        }
        let mut req = kafka_protocol::messages::DeleteRecordsRequest::default();
        let mut t = kafka_protocol::messages::delete_records_request::DeleteRecordsTopic::default();
        t.name = name(EMPTIED);
        let mut p =
            kafka_protocol::messages::delete_records_request::DeleteRecordsPartition::default();
        p.offset = 200;
        t.partitions = vec![p];
        req.topics = vec![t];
        req.timeout_ms = 5000;
        let resp = client.call(2, &req).await;
        assert_eq!(resp.topics[0].partitions[0].error_code, 0);
        let id = c.broker(leader).broker().topic(EMPTIED).expect("topic").id;
        (200, id)
    };
    let leaders = leaders_serving(&c, REBUILT, 2).await;
    let mut ends = Vec::new();
    let mut pids = Vec::new();
    let mut producers = Vec::new();
    for (index, &leader) in leaders.iter().enumerate() {
        let mut client = c.broker(leader).client().await;
        let pid = init_producer_id(&mut client).await;
        pids.push(pid.0);
        producers.push(pid);
        for seq in 0..30 {
            let batch = idempotent_batch(20, (pid.0, pid.1, seq * 20));
            let r = produce(&mut client, REBUILT, index as i32, batch).await;
            assert_eq!(r.error_code, 0, "acks=all produce");
        }
        ends.push(DATA_END);
    }
    let group = "rebuilt-group";
    // A simple commit, retried while the new coordinator loads (COORDINATOR_LOAD_IN_PROGRESS,
    // NOT_COORDINATOR).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (_, node) = crate::cluster_coordinators::coordinator(c.broker(1), 0, group).await;
        let entries = [(0, 123, -1, ""), (1, 456, -1, "")];
        let errors = crate::groups::commit(
            &mut c.broker(node).client().await,
            group,
            -1,
            "",
            REBUILT,
            &entries,
        )
        .await;
        if errors.iter().all(|&e| e == 0) {
            break;
        }
        assert!(
            errors.iter().all(|&e| e == 14 || e == 15 || e == 16),
            "commit: {errors:?}"
        );
        assert!(tokio::time::Instant::now() < deadline, "commit: {errors:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(committed_offsets(&c, group, REBUILT).await, vec![123, 456]);
    let old_id = c.broker(1).broker().topic(REBUILT).expect("topic").id;
    // A committed transaction on the topic: its transactional id must keep its producer id.
    let txn = "rebuilt-txn";
    let txn_producer = init_txn_on_coordinator(&c, txn).await;
    {
        let (_, node) = crate::cluster_coordinators::coordinator(c.broker(1), 1, txn).await;
        let mut client = c.broker(node).client().await;
        let added =
            crate::transactions::add_partitions(&mut client, txn, txn_producer, REBUILT, &[0])
                .await;
        assert!(
            added.iter().all(|&e| e == 0),
            "AddPartitionsToTxn: {added:?}"
        );
        assert_eq!(
            crate::transactions::end_txn(&mut client, txn, txn_producer, true).await,
            0
        );
        // Its COMMIT marker.
        ends[0] += 1;
    }

    // Everything acknowledged goes to the bucket (what a clean shutdown does), then every
    // disk and the quorum are lost.
    for id in 1..=3 {
        let b = c.broker(id);
        let t = b.services().tiering.clone().expect("tiering on");
        t.drain(b.broker()).await;
    }
    // The emptied topic's manifest keeps only its log start.
    {
        let t = c.broker(1).services().tiering.clone().expect("tiering");
        let store = &t.store;
        let pid = &strata_tiering::PartitionId {
            topic: EMPTIED.into(),
            topic_id: emptied_id,
            partition: 0,
        };
        eventually(
            "the bucket holds only the emptied topic's log start",
            || async move {
                strata_tiering::manifest::load(store, pid)
                    .await
                    .ok()
                    .flatten()
                    .is_some_and(|v| {
                        v.manifest.log_start_offset == emptied_end && v.manifest.segments.is_empty()
                    })
            },
        )
        .await;
    }
    c.shutdown().await;

    // 2. A new cluster on empty disks, pointed at the same bucket.
    let started = std::time::Instant::now();
    let c = QuorumCluster::start_with(&settings).await;
    let leaders = leaders_serving(&c, REBUILT, 2).await;
    let rebuilt_in = started.elapsed();
    let state = c
        .broker(1)
        .services()
        .cluster
        .as_ref()
        .expect("cluster")
        .node()
        .expect("node")
        .state();
    assert_eq!(state.restored_from_bucket(), Some(true));
    let topic = state.topic_by_name(REBUILT).expect("the topic is back");
    assert_eq!(
        uuid::Uuid::from_bytes(*topic.id.as_bytes()),
        old_id,
        "same topic id"
    );
    assert_eq!(topic.partitions.len(), 2);
    assert!(topic.partitions.iter().all(|p| p.replicas.len() == 3));
    assert_eq!(
        topic.configs.get("max.message.bytes").map(String::as_str),
        Some("500000")
    );
    assert!(
        topic.partitions.iter().all(|p| p.leader_epoch.0 > 0),
        "leader epochs above the restored ones"
    );
    assert!(
        state.next_producer_id().0 > *pids.iter().max().unwrap(),
        "producer ids are never reused"
    );
    for (index, &leader) in leaders.iter().enumerate() {
        let b = c.broker(leader);
        let mut client = b.client().await;
        let latest = list_offset(&mut client, REBUILT, index as i32, -1).await;
        assert_eq!(
            (latest.error_code, latest.offset),
            (0, ends[index]),
            "partition {index} led by {leader}"
        );
        assert_eq!(
            list_offset(&mut client, REBUILT, index as i32, -2)
                .await
                .offset,
            0
        );
        let got = consume_partition(b, REBUILT, index as i32, DATA_END).await;
        assert_eq!(
            got.iter()
                .copied()
                .filter(|&o| o < DATA_END)
                .collect::<Vec<_>>(),
            (0..DATA_END).collect::<Vec<_>>(),
            "partition {index}: every uploaded record once, at its offset"
        );
    }
    // The transactional id keeps its producer id, at a newer epoch.
    let again = init_txn_on_coordinator(&c, txn).await;
    assert_eq!(
        again.0, txn_producer.0,
        "the transactional id keeps its producer id"
    );
    assert!(again.1 > txn_producer.1, "{again:?} after {txn_producer:?}");
    // Consumers resume where they committed.
    assert_eq!(committed_offsets(&c, group, REBUILT).await, vec![123, 456]);
    // New records follow the restored ones: an old producer's retry of its last batch is a
    // duplicate (its state came back), a new producer gets a fresh id.
    for (index, &leader) in leaders.iter().enumerate() {
        let mut client = c.broker(leader).client().await;
        let old = producers[index];
        let retry = idempotent_batch(20, (old.0, old.1, 29 * 20));
        let r = produce(&mut client, REBUILT, index as i32, retry).await;
        assert_eq!(
            (r.error_code, r.base_offset),
            (0, DATA_END - 20),
            "duplicate retry"
        );
        let pid = init_producer_id(&mut client).await;
        assert!(!pids.contains(&pid.0), "a fresh producer id");
        let r = produce(
            &mut client,
            REBUILT,
            index as i32,
            idempotent_batch(5, (pid.0, pid.1, 0)),
        )
        .await;
        assert_eq!((r.error_code, r.base_offset), (0, ends[index]));
        let got = consume_partition(c.broker(leader), REBUILT, index as i32, ends[index] + 5).await;
        assert_eq!(
            got.iter()
                .copied()
                .filter(|&o| o >= ends[index])
                .collect::<Vec<_>>(),
            (ends[index]..ends[index] + 5).collect::<Vec<_>>()
        );
    }
    // The emptied topic continues at its log start, never at offsets handed out before.
    let leader = leaders_serving(&c, EMPTIED, 1).await[0];
    let mut client = c.broker(leader).client().await;
    assert_eq!(
        list_offset(&mut client, EMPTIED, 0, -2).await.offset,
        emptied_end
    );
    assert_eq!(
        list_offset(&mut client, EMPTIED, 0, -1).await.offset,
        emptied_end
    );
    let r = produce(&mut client, EMPTIED, 0, batch(5)).await;
    assert_eq!((r.error_code, r.base_offset), (0, emptied_end));
    eprintln!("rebuilt a 3-node cluster from its bucket in {rebuilt_in:?}");
    c.shutdown().await;
}
