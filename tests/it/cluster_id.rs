//! One cluster id per cluster: the metadata quorum settles it once and every broker answers
//! Metadata and DescribeCluster with it, writes it into its log dirs' `meta.properties`, and
//! keeps it across restarts and controller changes; a broker whose `cluster.id` setting or
//! log dir names another cluster does not start. A single node keeps its own id.

use std::path::Path;

use kafka_protocol::messages::{DescribeClusterRequest, MetadataRequest};

use crate::cluster::{eventually, QuorumCluster};
use crate::harness::*;

/// The cluster id in broker `b`'s Metadata (v12) and DescribeCluster (v1) answers.
async fn reported_cluster_ids(b: &TestBroker) -> (Option<String>, String) {
    let mut client = b.client().await;
    let mut req = MetadataRequest::default();
    req.topics = Some(Vec::new());
    let metadata = client.call(12, &req).await;
    let described = client.call(1, &DescribeClusterRequest::default()).await;
    assert_eq!(described.error_code, 0);
    (
        metadata.cluster_id.map(|id| id.to_string()),
        described.cluster_id.to_string(),
    )
}

/// `cluster.id` from the `meta.properties` in `dir`.
fn meta_properties_cluster_id(dir: &Path) -> Option<String> {
    std::fs::read_to_string(dir.join("meta.properties"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("cluster.id=").map(str::to_string))
}

/// Every broker of `c` that runs (all but `stopped`) reports `expected` in Metadata,
/// DescribeCluster and its `meta.properties`.
async fn assert_one_cluster_id(c: &QuorumCluster, stopped: Option<i32>, expected: &str) {
    for id in (1..=3).filter(|id| Some(*id) != stopped) {
        let b = c.broker(id);
        assert_eq!(
            reported_cluster_ids(b).await,
            (Some(expected.to_string()), expected.to_string()),
            "broker {id}"
        );
        assert_eq!(b.broker().cluster_id(), Some(expected), "broker {id}");
        assert_eq!(
            meta_properties_cluster_id(b.dir.path()).as_deref(),
            Some(expected),
            "broker {id}'s meta.properties"
        );
    }
}

/// The broker id of the active controller (the metadata quorum's leader), as broker `from`
/// sees it.
fn active_controller(c: &QuorumCluster, from: i32) -> Option<i32> {
    c.broker(from)
        .services()
        .cluster
        .as_ref()?
        .active_controller()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn brokers_of_a_quorum_report_one_cluster_id_through_restarts_and_leader_changes() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("strata=info,strata_metadata=info,openraft=warn")
        .with_test_writer()
        .try_init();
    // No broker has a cluster.id setting: the quorum generates one for all of them.
    let mut c = QuorumCluster::start().await;
    let quorum_id = c
        .broker(1)
        .services()
        .cluster
        .as_ref()
        .and_then(|control| control.node().ok())
        .and_then(|node| node.state().cluster_id().map(str::to_string))
        .expect("the quorum holds a cluster id");
    assert_eq!(
        quorum_id.len(),
        22,
        "a Kafka-style base64 UUID: {quorum_id}"
    );
    assert!(
        quorum_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
        "{quorum_id}"
    );
    assert_one_cluster_id(&c, None, &quorum_id).await;

    // A follower of the metadata quorum restarts: same id, from its own copy of the log.
    let leader = active_controller(&c, 1).expect("an active controller");
    let follower = if leader == 1 { 2 } else { 1 };
    c.broker_mut(follower).stop().await;
    assert_one_cluster_id(&c, Some(follower), &quorum_id).await;
    c.broker_mut(follower).resume().await;
    assert_one_cluster_id(&c, None, &quorum_id).await;

    // The active controller stops: another broker leads the quorum, the id stays.
    c.broker_mut(leader).stop().await;
    let survivor = if leader == 3 { 2 } else { 3 };
    {
        let c = &c;
        eventually("a new active controller", || async move {
            active_controller(c, survivor).is_some_and(|l| l != leader)
        })
        .await;
    }
    assert_one_cluster_id(&c, Some(leader), &quorum_id).await;
    c.broker_mut(leader).resume().await;
    assert_one_cluster_id(&c, None, &quorum_id).await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_broker_of_another_cluster_does_not_start() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("strata=info,strata_metadata=info,openraft=warn")
        .with_test_writer()
        .try_init();
    // Formatted like Kafka: every broker configured with the same id.
    let mut c = QuorumCluster::start_with(&[("cluster.id", "quorum-test")]).await;
    assert_one_cluster_id(&c, None, "quorum-test").await;
    c.broker_mut(3).stop().await;

    let dir = c.broker(3).dir.path().to_path_buf();
    let path = dir.join("meta.properties");
    let original = std::fs::read_to_string(&path).expect("meta.properties");

    // A cluster.id setting that is not the one its log dir was written with.
    let err = c
        .broker_mut(3)
        .try_resume_with(&[("cluster.id", "other-cluster")])
        .await
        .expect_err("a broker configured for another cluster does not start");
    let message = format!("{err:#}");
    assert!(
        message.contains(
            "cluster.id other-cluster in this broker's config does not match the cluster id \
             quorum-test its log dirs' meta.properties were written with"
        ),
        "{message}"
    );

    // Nor the quorum's (the log dir holds no meta.properties, as before a first start).
    std::fs::remove_file(&path).unwrap();
    let err = c
        .broker_mut(3)
        .try_resume_with(&[("cluster.id", "other-cluster")])
        .await
        .expect_err("a broker configured for another cluster does not start");
    let message = format!("{err:#}");
    assert!(
        message.contains(
            "cluster.id other-cluster in this broker's config does not match the metadata \
             quorum's cluster id quorum-test"
        ),
        "{message}"
    );
    assert!(!path.exists(), "a refused start writes no meta.properties");

    // A log dir formatted for another cluster (Kafka's "Invalid cluster.id").
    std::fs::write(
        &path,
        original.replace("cluster.id=quorum-test", "cluster.id=foreign"),
    )
    .unwrap();
    // Without a cluster.id setting the log dir's id is its candidate; the quorum has one.
    let err = c
        .broker_mut(3)
        .try_resume_with(&[("cluster.id", "")])
        .await
        .expect_err("a log dir of another cluster stops the start");
    let message = format!("{err:#}");
    assert!(
        message.contains(&format!(
            "Invalid cluster.id in: {}. Expected quorum-test, but read foreign",
            path.display()
        )),
        "{message}"
    );
    assert_eq!(
        meta_properties_cluster_id(&dir).as_deref(),
        Some("foreign"),
        "a refused start does not rewrite the log dir"
    );

    // Put right, the broker starts and joins with the quorum's id.
    std::fs::write(&path, &original).unwrap();
    c.broker_mut(3)
        .try_resume_with(&[])
        .await
        .expect("the broker starts with the quorum's id");
    assert_one_cluster_id(&c, None, "quorum-test").await;
    {
        let c = &c;
        eventually("three unfenced brokers", || async move {
            c.broker(1)
                .services()
                .cluster
                .as_ref()
                .map(|control| strata::controller::admin::unfenced_brokers(control))
                == Some(3)
        })
        .await;
    }
    c.shutdown().await;
}

#[tokio::test]
async fn a_single_node_keeps_its_cluster_id_and_refuses_a_log_dir_of_another_cluster() {
    let b = TestBroker::start().await;
    let (id, described) = reported_cluster_ids(&b).await;
    let id = id.expect("a cluster id");
    assert_eq!(id.len(), 22, "{id}");
    assert_eq!(described, id);
    assert_eq!(
        meta_properties_cluster_id(b.dir.path()).as_deref(),
        Some(id.as_str())
    );
    let mut b = b.restart().await;
    assert_eq!(
        reported_cluster_ids(&b).await,
        (Some(id.clone()), id.clone())
    );

    b.stop().await;
    let path = b.dir.path().join("meta.properties");
    let original = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, original.replace(&id, "foreign")).unwrap();
    let err = b
        .try_resume_with(&[])
        .await
        .expect_err("a log dir of another cluster stops the start");
    let message = format!("{err:#}");
    assert!(
        message.contains(&format!(
            "Invalid cluster.id in: {}. Expected {id}, but read foreign",
            path.display()
        )),
        "{message}"
    );
    std::fs::write(&path, &original).unwrap();
    b.try_resume_with(&[]).await.expect("starts again");
    assert_eq!(reported_cluster_ids(&b).await, (Some(id.clone()), id));
    b.shutdown().await;
}
