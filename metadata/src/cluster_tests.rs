//! In-process clusters on 127.0.0.1 ephemeral ports: election, forwarding, failover,
//! restart from disk, learners and snapshots. Every test shuts down what it starts.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

use crate::command::{ApplyError, Command, Endpoint, PartitionAssignment, RecordKind, Response};
use crate::ids::{BrokerEpoch, BrokerId, Uuid128};
use crate::node::{MetadataConfig, MetadataNode, ProposeError, Role};

/// Timings short enough for tests, long enough for a busy two-core machine.
fn test_config(node_id: u64, dir: &TempDir, voters: &BTreeMap<u64, String>) -> MetadataConfig {
    let mut config = MetadataConfig::new(node_id, dir.path());
    config.voters = voters.clone();
    config.heartbeat_interval = Duration::from_millis(100);
    config.election_timeout_min = Duration::from_millis(700);
    config.election_timeout_max = Duration::from_millis(1_400);
    config.rpc_timeout = Duration::from_secs(2);
    config.propose_timeout = Duration::from_secs(10);
    config
}

async fn loopback_listener() -> TcpListener {
    TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port")
}

/// Polls `condition` every 20 ms until it holds or `timeout` passes.
async fn eventually<F, Fut>(timeout: Duration, mut condition: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if condition().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn register(id: i32) -> Command {
    Command::RegisterBroker {
        id: BrokerId(id),
        incarnation: Uuid128([id as u8; 16]),
        rack: None,
        endpoints: vec![Endpoint {
            listener: "PLAINTEXT".into(),
            host: "127.0.0.1".into(),
            port: 9092,
            security_protocol: "PLAINTEXT".into(),
        }],
        now_ms: 1_000,
    }
}

fn put(key: &str) -> Command {
    Command::PutRecord {
        kind: RecordKind::ClientQuota,
        key: key.into(),
        value: key.as_bytes().to_vec(),
    }
}

/// Reports `node`'s directory id, retrying while the leader has a change in flight (right
/// after an election its first membership entry may not be applied yet), as brokers do.
async fn report_directory(node: &MetadataNode, id: Uuid128) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match node.report_directory_id(id).await {
            Ok(()) => return,
            Err(e) if Instant::now() < deadline => {
                eprintln!("directory id not reported yet: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("directory id of node {} not reported: {e}", node.node_id()),
        }
    }
}

/// Voters 1..=n, each with its own directory and pre-bound port.
struct Cluster {
    dirs: BTreeMap<u64, TempDir>,
    voters: BTreeMap<u64, String>,
    nodes: BTreeMap<u64, MetadataNode>,
    propose_timeout: Duration,
}

impl Cluster {
    async fn start(n: u64) -> Cluster {
        Self::start_with(n, Duration::from_secs(10)).await
    }

    async fn start_with(n: u64, propose_timeout: Duration) -> Cluster {
        let mut listeners = BTreeMap::new();
        let mut voters = BTreeMap::new();
        for id in 1..=n {
            let listener = loopback_listener().await;
            voters.insert(id, listener.local_addr().unwrap().to_string());
            listeners.insert(id, listener);
        }
        let mut cluster = Cluster {
            dirs: BTreeMap::new(),
            voters,
            nodes: BTreeMap::new(),
            propose_timeout,
        };
        for (id, listener) in listeners {
            cluster.dirs.insert(id, tempfile::tempdir().unwrap());
            cluster.start_node(id, listener).await;
        }
        cluster
    }

    async fn start_node(&mut self, id: u64, listener: TcpListener) {
        let mut config = test_config(id, &self.dirs[&id], &self.voters);
        config.propose_timeout = self.propose_timeout;
        let node = MetadataNode::start_with_listener(config, listener)
            .await
            .unwrap();
        assert_eq!(node.role(), Role::Voter);
        self.nodes.insert(id, node);
    }

    /// Restarts a stopped voter from its directory on its old address.
    async fn restart(&mut self, id: u64) {
        let listener = TcpListener::bind(&self.voters[&id]).await.unwrap();
        self.start_node(id, listener).await;
    }

    /// Waits until every running node names the same leader, which is running and is not
    /// `not`; returns it.
    async fn agreed_leader(&self, not: Option<u64>, timeout: Duration) -> Option<u64> {
        let deadline = Instant::now() + timeout;
        loop {
            let leaders: Vec<Option<u64>> = self.nodes.values().map(MetadataNode::leader).collect();
            if let Some(Some(leader)) = leaders.first() {
                if leaders.iter().all(|l| *l == Some(*leader))
                    && Some(*leader) != not
                    && self.nodes.contains_key(leader)
                {
                    return Some(*leader);
                }
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn shutdown(self) {
        for (id, node) in self.nodes {
            node.shutdown()
                .await
                .unwrap_or_else(|e| panic!("node {id} did not stop: {e}"));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_voters_elect_forward_fail_over_and_restart_from_disk() {
    let mut cluster = Cluster::start(3).await;
    let leader = cluster
        .agreed_leader(None, Duration::from_secs(15))
        .await
        .expect("the voters elect a leader");
    let follower = *cluster.nodes.keys().find(|id| **id != leader).unwrap();

    // A proposal on a follower is forwarded to the leader and visible locally on return.
    let response = cluster.nodes[&follower].propose(register(1)).await.unwrap();
    assert!(
        matches!(response, Response::BrokerRegistered { .. }),
        "{response:?}"
    );
    assert!(cluster.nodes[&follower]
        .state()
        .broker(BrokerId(1))
        .is_some());
    let everywhere = |cluster: &Cluster, id| {
        cluster
            .nodes
            .values()
            .all(|n| n.state().broker(BrokerId(id)).is_some())
    };
    assert!(eventually(Duration::from_secs(5), || async { everywhere(&cluster, 1) }).await);
    // A rejected command comes back as a typed error from a follower too.
    let mut duplicate = register(1);
    if let Command::RegisterBroker { incarnation, .. } = &mut duplicate {
        *incarnation = Uuid128([99; 16]);
    }
    let Response::BrokerRegistered { broker_epoch } = response else {
        unreachable!()
    };
    let unfence = Command::UnfenceBroker {
        id: BrokerId(1),
        broker_epoch,
    };
    cluster.nodes[&follower].propose(unfence).await.unwrap();
    let err = cluster.nodes[&follower]
        .propose(duplicate)
        .await
        .unwrap_err();
    assert!(matches!(err, ProposeError::Rejected(_)), "{err}");
    assert_eq!(err.kafka_error_code(), 101);

    // The leader goes away: the other two elect a new one and keep the state.
    let old_leader = cluster.nodes.remove(&leader).unwrap();
    old_leader.shutdown().await.unwrap();
    let stopped_at = Instant::now();
    let new_leader = cluster
        .agreed_leader(Some(leader), Duration::from_secs(15))
        .await
        .expect("the remaining voters elect a new leader");
    let failover = stopped_at.elapsed();
    println!("new leader {new_leader} elected {failover:?} after leader {leader} stopped");
    assert!(failover < Duration::from_secs(10), "{failover:?}");
    assert!(everywhere(&cluster, 1));

    let topic = Command::CreateTopic {
        name: "orders".into(),
        id: Uuid128([7; 16]),
        partitions: vec![PartitionAssignment {
            replicas: vec![BrokerId(1)],
        }],
        configs: BTreeMap::new(),
    };
    let other = *cluster.nodes.keys().find(|id| **id != new_leader).unwrap();
    let created = cluster.nodes[&other].propose(topic).await.unwrap();
    assert!(
        matches!(created, Response::TopicCreated { partitions: 1, .. }),
        "{created:?}"
    );

    // The stopped node restarts from its directory and catches up.
    cluster.restart(leader).await;
    let restarted = &cluster.nodes[&leader];
    assert!(
        eventually(Duration::from_secs(10), || async {
            restarted.state().topic_by_name("orders").is_some()
        })
        .await,
        "the restarted node catches up"
    );
    assert!(restarted.state().broker(BrokerId(1)).is_some());
    assert!(cluster
        .agreed_leader(None, Duration::from_secs(10))
        .await
        .is_some());
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_reach_the_leader_s_memory_and_write_nothing_to_the_log() {
    let mut cluster = Cluster::start(3).await;
    let leader = cluster
        .agreed_leader(None, Duration::from_secs(15))
        .await
        .expect("the voters elect a leader");
    let follower = *cluster.nodes.keys().find(|id| **id != leader).unwrap();
    let Response::BrokerRegistered { broker_epoch } =
        cluster.nodes[&follower].propose(register(1)).await.unwrap()
    else {
        panic!("unexpected response")
    };
    let applied = |cluster: &Cluster| {
        cluster
            .nodes
            .values()
            .map(|n| n.image().applied_index)
            .collect::<Vec<_>>()
    };
    // Let every node apply the registration, then heartbeat from every node, many times.
    assert!(
        eventually(Duration::from_secs(5), || async {
            cluster
                .nodes
                .values()
                .all(|n| n.state().broker(BrokerId(1)).is_some())
        })
        .await
    );
    let before = applied(&cluster);
    for _ in 0..20 {
        for node in cluster.nodes.values() {
            assert_eq!(
                node.heartbeat(BrokerId(1), broker_epoch).await,
                Ok(Response::HeartbeatAccepted { fenced: true })
            );
        }
    }
    assert_eq!(
        applied(&cluster),
        before,
        "a heartbeat appended a log entry"
    );
    assert!(cluster.nodes[&leader]
        .last_contact_ms(BrokerId(1))
        .is_some());
    assert_eq!(cluster.nodes[&follower].last_contact_ms(BrokerId(1)), None);
    // The leader's checks answer through a forwarding follower with the typed errors.
    assert!(matches!(
        cluster.nodes[&follower]
            .heartbeat(BrokerId(1), BrokerEpoch(broker_epoch.0 + 1))
            .await,
        Err(ProposeError::Rejected(ApplyError::StaleBrokerEpoch { .. }))
    ));
    assert_eq!(
        cluster.nodes[&follower]
            .heartbeat(BrokerId(7), broker_epoch)
            .await,
        Err(ProposeError::Rejected(ApplyError::BrokerNotRegistered(
            BrokerId(7)
        )))
    );
    assert_eq!(
        cluster.nodes[&leader].last_contact_ms(BrokerId(7)),
        None,
        "a rejected heartbeat is no contact"
    );

    // A new leader starts with no contacts and takes the heartbeats, still over the kept
    // connection of the follower that forwarded to the old leader.
    let old_leader = cluster.nodes.remove(&leader).unwrap();
    old_leader.shutdown().await.unwrap();
    let new_leader = cluster
        .agreed_leader(Some(leader), Duration::from_secs(15))
        .await
        .expect("the remaining voters elect a new leader");
    assert_eq!(
        cluster.nodes[&new_leader].last_contact_ms(BrokerId(1)),
        None
    );
    for node in cluster.nodes.values() {
        assert_eq!(
            node.heartbeat(BrokerId(1), broker_epoch).await,
            Ok(Response::HeartbeatAccepted { fenced: true })
        );
    }
    assert!(cluster.nodes[&new_leader]
        .last_contact_ms(BrokerId(1))
        .is_some());
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learner_joins_receives_a_snapshot_and_forwards_proposals() {
    let voter_dir = tempfile::tempdir().unwrap();
    let voter_listener = loopback_listener().await;
    let voters = BTreeMap::from([(1, voter_listener.local_addr().unwrap().to_string())]);
    let mut voter_config = test_config(1, &voter_dir, &voters);
    // Snapshot often and keep no log behind it, so a newcomer needs the snapshot.
    voter_config.snapshot_after_entries = 5;
    voter_config.entries_kept_after_snapshot = 0;
    let voter = MetadataNode::start_with_listener(voter_config, voter_listener)
        .await
        .unwrap();
    voter
        .wait_for_leader(Duration::from_secs(10))
        .await
        .unwrap();
    let set_cluster_id = Command::SetClusterId {
        cluster_id: "learner-test".into(),
    };
    voter.propose(set_cluster_id).await.unwrap();
    for i in 0..20 {
        voter.propose(put(&format!("quota-{i}"))).await.unwrap();
    }
    let mut metrics = voter.metrics();
    tokio::time::timeout(
        Duration::from_secs(10),
        metrics.wait_for(|m| m.purged.is_some()),
    )
    .await
    .expect("the voter snapshots and purges its log")
    .unwrap();

    let learner_dir = tempfile::tempdir().unwrap();
    let learner = MetadataNode::start(test_config(2, &learner_dir, &voters))
        .await
        .unwrap();
    assert_eq!(learner.role(), Role::Learner);
    assert!(
        eventually(Duration::from_secs(10), || async {
            learner.state().records(RecordKind::ClientQuota).count() == 20
        })
        .await,
        "the learner receives the state"
    );
    assert!(
        learner.metrics().borrow().snapshot.is_some(),
        "state came by snapshot"
    );
    assert_eq!(
        learner.state().cluster_id(),
        Some("learner-test"),
        "the snapshot carries the cluster id"
    );
    // A learner's own candidate does not replace it.
    let again = Command::SetClusterId {
        cluster_id: "learner-own".into(),
    };
    assert_eq!(
        learner.propose(again).await.unwrap(),
        Response::ClusterId {
            cluster_id: "learner-test".into(),
            newly_set: false
        }
    );
    {
        let metrics = voter.metrics();
        let metrics = metrics.borrow();
        let membership = metrics.membership_config.membership();
        assert_eq!(membership.voter_ids().collect::<Vec<_>>(), vec![1]);
        assert_eq!(membership.learner_ids().collect::<Vec<_>>(), vec![2]);
    }

    // Adding a known learner again is a no-op; a voter cannot be re-addressed by a join.
    voter.add_learner(2, learner.addr()).await.unwrap();
    let err = learner.add_learner(1, "127.0.0.1:1").await.unwrap_err();
    assert!(matches!(err, ProposeError::Refused(_)), "{err}");

    // A learner forwards proposals and sees their effect on return.
    learner.propose(put("from-learner")).await.unwrap();
    assert!(learner
        .state()
        .record(RecordKind::ClientQuota, "from-learner")
        .is_some());
    assert!(voter
        .state()
        .record(RecordKind::ClientQuota, "from-learner")
        .is_some());
    assert!(!learner.is_leader());
    assert_eq!(learner.leader(), Some(1));

    learner.shutdown().await.unwrap();
    voter.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_node_without_voters_bootstraps_and_restarts_from_its_directory() {
    let dir = tempfile::tempdir().unwrap();
    let node = MetadataNode::start(test_config(1, &dir, &BTreeMap::new()))
        .await
        .unwrap();
    assert_eq!(node.role(), Role::SingleNode);
    let Response::BrokerRegistered { broker_epoch } = node.propose(register(1)).await.unwrap()
    else {
        panic!("unexpected response")
    };
    let allocate = Command::AllocateProducerIds {
        broker: BrokerId(1),
        broker_epoch,
        count: 1_000,
    };
    node.propose(allocate.clone()).await.unwrap();
    node.shutdown().await.unwrap();

    // Same directory, a new ephemeral port: the state is back before any new proposal.
    let node = MetadataNode::start(test_config(1, &dir, &BTreeMap::new()))
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async {
            node.state().broker(BrokerId(1)).is_some()
        })
        .await
    );
    assert_eq!(
        node.state().broker(BrokerId(1)).unwrap().epoch,
        broker_epoch
    );
    let Response::ProducerIdsAllocated(block) = node.propose(allocate).await.unwrap() else {
        panic!("unexpected response")
    };
    assert_eq!(
        block.first.0, 1_000,
        "producer ids continue after a restart"
    );
    assert!(matches!(
        node.heartbeat(BrokerId(1), BrokerEpoch(broker_epoch.0 - 1))
            .await,
        Err(ProposeError::Rejected(ApplyError::StaleBrokerEpoch { .. }))
    ));
    assert_eq!(
        node.heartbeat(BrokerId(1), broker_epoch).await,
        Ok(Response::HeartbeatAccepted { fenced: true })
    );
    assert!(node.last_contact_ms(BrokerId(1)).is_some());
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proposal_without_a_quorum_fails_with_no_leader() {
    // Two voters configured, only one running: no majority, no leader.
    let dir = tempfile::tempdir().unwrap();
    let listener = loopback_listener().await;
    let absent = loopback_listener().await;
    let voters = BTreeMap::from([
        (1, listener.local_addr().unwrap().to_string()),
        (2, absent.local_addr().unwrap().to_string()),
    ]);
    drop(absent);
    let mut config = test_config(1, &dir, &voters);
    config.propose_timeout = Duration::from_secs(2);
    let node = MetadataNode::start_with_listener(config, listener)
        .await
        .unwrap();
    let err = node.propose(put("k")).await.unwrap_err();
    assert!(matches!(err, ProposeError::NoLeader(_)), "{err}");
    assert!(err.is_retriable());
    assert_eq!(err.kafka_error_code(), 41);
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_rpc_frames_close_only_their_connection() {
    let dir = tempfile::tempdir().unwrap();
    let node = MetadataNode::start(test_config(1, &dir, &BTreeMap::new()))
        .await
        .unwrap();
    node.wait_for_leader(Duration::from_secs(10)).await.unwrap();

    // Undecodable JSON: a BadRequest answer, then the connection closes.
    let mut stream = TcpStream::connect(node.local_addr()).await.unwrap();
    stream.write_all(&3u32.to_be_bytes()).await.unwrap();
    stream.write_all(b"{x}").await.unwrap();
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).await.unwrap();
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    stream.read_exact(&mut body).await.unwrap();
    assert!(String::from_utf8_lossy(&body).contains("BadRequest"));
    assert_eq!(stream.read(&mut len).await.unwrap(), 0, "connection closed");

    // An absurd length: the connection closes without an allocation.
    let mut stream = TcpStream::connect(node.local_addr()).await.unwrap();
    stream.write_all(&u32::MAX.to_be_bytes()).await.unwrap();
    assert_eq!(stream.read(&mut len).await.unwrap_or(0), 0);

    // The node still serves.
    node.propose(put("still-serving")).await.unwrap();
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_lost_its_quorum_fails_proposals_within_the_timeout() {
    let propose_timeout = Duration::from_secs(2);
    let mut cluster = Cluster::start_with(2, propose_timeout).await;
    let leader = cluster
        .agreed_leader(None, Duration::from_secs(15))
        .await
        .expect("the voters elect a leader");
    cluster.nodes[&leader].propose(put("before")).await.unwrap();
    // Stop the other voter: whichever way the survivor sees it (a leader that cannot
    // commit, or a candidate without a leader), the proposal fails in bounded time.
    let other = *cluster.nodes.keys().find(|id| **id != leader).unwrap();
    cluster
        .nodes
        .remove(&other)
        .unwrap()
        .shutdown()
        .await
        .unwrap();
    let started = Instant::now();
    let err = cluster.nodes[&leader]
        .propose(put("after"))
        .await
        .unwrap_err();
    println!(
        "proposal without a quorum failed after {:?}: {err}",
        started.elapsed()
    );
    assert!(err.is_retriable(), "{err}");
    assert!(
        started.elapsed() < propose_timeout + Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_as_leader_commits_only_on_the_leader_of_its_term() {
    let cluster = Cluster::start(3).await;
    let leader = cluster
        .agreed_leader(None, Duration::from_secs(20))
        .await
        .expect("a leader");
    let term = cluster.nodes[&leader].metrics().borrow().current_term;
    let follower = cluster
        .nodes
        .keys()
        .copied()
        .find(|id| *id != leader)
        .unwrap();
    // A follower never commits it (`propose` would forward it to the leader).
    let err = cluster.nodes[&follower]
        .propose_as_leader(put("from-follower"), term)
        .await
        .unwrap_err();
    assert_eq!(err, ProposeError::NotLeaderInTerm(term));
    // Nor does the leader for a decision made in another term.
    let err = cluster.nodes[&leader]
        .propose_as_leader(put("other-term"), term + 1)
        .await
        .unwrap_err();
    assert_eq!(err, ProposeError::NotLeaderInTerm(term + 1));
    assert!(!err.is_retriable());
    cluster.nodes[&leader]
        .propose_as_leader(put("in-term"), term)
        .await
        .unwrap();
    for node in cluster.nodes.into_values() {
        node.shutdown().await.unwrap();
    }
}

/// Kafka's AddRaftVoter and RemoveRaftVoter through the quorum: a learner becomes a voter,
/// the leader itself is removed, and the three voters left (two old, one new) keep committing
/// with the removed node stopped. The refusals carry Kafka's codes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn voters_are_added_and_removed_at_run_time_with_kafkas_refusals() {
    use crate::node::VoterChangeError;
    use crate::voters::VoterRefusal;

    let mut cluster = Cluster::start(3).await;
    let leader = cluster
        .agreed_leader(None, Duration::from_secs(15))
        .await
        .expect("the voters elect a leader");
    for id in 1..=3u64 {
        report_directory(&cluster.nodes[&id], Uuid128([id as u8; 16])).await;
    }
    cluster.nodes[&leader].propose(put("before")).await.unwrap();

    let learner_dir = tempfile::tempdir().unwrap();
    let learner = MetadataNode::start(test_config(4, &learner_dir, &cluster.voters))
        .await
        .unwrap();
    assert_eq!(learner.role(), Role::Learner);
    let follower = *cluster.nodes.keys().find(|id| **id != leader).unwrap();
    let via = &cluster.nodes[&follower];
    let learner_addr = learner.addr().to_string();
    let code = |r: Result<(), VoterChangeError>| r.unwrap_err().kafka_error_code();

    // Before it reports its directory id, and with another one, the learner is not added.
    assert!(
        eventually(Duration::from_secs(10), || async {
            via.voters().len() == 3
                && learner.leader().is_some()
                && learner.state().records(RecordKind::ClientQuota).count() == 1
        })
        .await
    );
    let short = Duration::from_secs(2);
    let dir4 = Uuid128([4; 16]);
    let err = via
        .add_voter(4, dir4, vec![learner_addr.clone()], short)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, VoterChangeError::Refused(VoterRefusal::TimedOut(m)) if m.contains("not reported")),
        "{err}"
    );
    report_directory(&learner, dir4).await;
    assert_eq!(
        code(
            via.add_voter(4, Uuid128([5; 16]), vec![learner_addr.clone()], short)
                .await
        ),
        7
    );
    // A voter already voting; an unknown node; endpoints that do not reach the learner.
    assert_eq!(
        code(
            via.add_voter(1, Uuid128([1; 16]), vec![learner_addr.clone()], short)
                .await
        ),
        126
    );
    assert_eq!(
        code(
            via.add_voter(9, Uuid128([9; 16]), vec!["127.0.0.1:1".into()], short)
                .await
        ),
        7
    );
    assert_eq!(
        code(
            via.add_voter(4, dir4, vec!["127.0.0.1:1".into()], short)
                .await
        ),
        42
    );

    via.add_voter(4, dir4, vec![learner_addr.clone()], Duration::from_secs(10))
        .await
        .unwrap();
    let voters: Vec<u64> = via.voters().iter().map(|(id, _)| *id).collect();
    assert_eq!(voters, vec![1, 2, 3, 4]);
    assert_eq!(
        via.voters().iter().find(|(id, _)| *id == 4).unwrap().1,
        Some(dir4)
    );

    // Removal names the directory id; a wrong one, or a node that does not vote, is
    // VOTER_NOT_FOUND.
    assert_eq!(code(via.remove_voter(leader, Uuid128([9; 16])).await), 127);
    assert_eq!(code(via.remove_voter(9, Uuid128::ZERO).await), 127);
    via.remove_voter(leader, Uuid128([leader as u8; 16]))
        .await
        .unwrap();
    let voters: Vec<u64> = via.voters().iter().map(|(id, _)| *id).collect();
    assert!(!voters.contains(&leader) && voters.len() == 3, "{voters:?}");

    // The removed leader steps down; with it stopped, the three voters left commit.
    let removed = cluster.nodes.remove(&leader).unwrap();
    removed.shutdown().await.unwrap();
    cluster.nodes.insert(4, learner);
    let new_leader = cluster
        .agreed_leader(Some(leader), Duration::from_secs(15))
        .await
        .expect("the remaining voters elect a leader");
    assert_ne!(new_leader, leader);
    cluster.nodes[&4].propose(put("after")).await.unwrap();
    for node in cluster.nodes.values() {
        assert!(
            eventually(Duration::from_secs(10), || async {
                node.state().records(RecordKind::ClientQuota).count() == 2
            })
            .await
        );
    }
    // Down to one voter; the last one cannot be removed.
    let mut left: Vec<u64> = cluster.nodes[&4]
        .voters()
        .iter()
        .map(|(id, _)| *id)
        .collect();
    while left.len() > 1 {
        let id = left.pop().unwrap();
        cluster.nodes[&4]
            .remove_voter(id, Uuid128([id as u8; 16]))
            .await
            .unwrap();
    }
    let last = left[0];
    assert_eq!(
        code(
            cluster.nodes[&4]
                .remove_voter(last, Uuid128([last as u8; 16]))
                .await
        ),
        127
    );
    cluster.shutdown().await;
}

/// The usual replacement of a dead voter: with voter `dead` stopped for good, a learner is
/// added and the dead voter removed; the quorum commits throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_voter_is_replaced_while_it_is_down() {
    let mut cluster = Cluster::start(3).await;
    let leader = cluster
        .agreed_leader(None, Duration::from_secs(15))
        .await
        .expect("the voters elect a leader");
    for id in 1..=3u64 {
        report_directory(&cluster.nodes[&id], Uuid128([id as u8; 16])).await;
    }
    let dead = *cluster.nodes.keys().find(|id| **id != leader).unwrap();
    cluster
        .nodes
        .remove(&dead)
        .unwrap()
        .shutdown()
        .await
        .unwrap();
    cluster.nodes[&leader]
        .propose(put("one down"))
        .await
        .unwrap();

    let learner_dir = tempfile::tempdir().unwrap();
    let learner = MetadataNode::start(test_config(4, &learner_dir, &cluster.voters))
        .await
        .unwrap();
    report_directory(&learner, Uuid128([4; 16])).await;
    let addr = learner.addr().to_string();
    learner
        .add_voter(4, Uuid128([4; 16]), vec![addr], Duration::from_secs(10))
        .await
        .unwrap();
    learner
        .remove_voter(dead, Uuid128([dead as u8; 16]))
        .await
        .unwrap();
    let mut voters: Vec<u64> = learner.voters().iter().map(|(id, _)| *id).collect();
    voters.sort();
    let mut want: Vec<u64> = [1, 2, 3, 4].into_iter().filter(|id| *id != dead).collect();
    want.sort();
    assert_eq!(voters, want);
    learner.propose(put("replaced")).await.unwrap();
    cluster.nodes.insert(4, learner);
    for node in cluster.nodes.values() {
        assert!(
            eventually(Duration::from_secs(10), || async {
                node.state().records(RecordKind::ClientQuota).count() == 2
            })
            .await
        );
    }
    cluster.shutdown().await;
}

/// The leader dies while a voter is being added: the survivors elect a leader and the
/// membership is either the old voters or the new ones, never a joint configuration left
/// behind; the change, asked again, ends with the learner voting and the quorum committing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voter_change_survives_the_death_of_its_leader_mid_change() {
    use crate::node::VoterChangeError;
    use crate::voters::VoterRefusal;

    let mut cluster = Cluster::start(3).await;
    let leader = cluster
        .agreed_leader(None, Duration::from_secs(15))
        .await
        .expect("the voters elect a leader");
    for id in 1..=3u64 {
        report_directory(&cluster.nodes[&id], Uuid128([id as u8; 16])).await;
    }
    let learner_dir = tempfile::tempdir().unwrap();
    let learner = MetadataNode::start(test_config(4, &learner_dir, &cluster.voters))
        .await
        .unwrap();
    report_directory(&learner, Uuid128([4; 16])).await;
    let addr = learner.addr().to_string();
    let dying = cluster.nodes.remove(&leader).unwrap();
    let follower = cluster.nodes.values().next().unwrap();
    // The change reaches the leader through a follower; the leader stops while it is under
    // way.
    let (started, ()) = tokio::join!(
        follower.add_voter(
            4,
            Uuid128([4; 16]),
            vec![addr.clone()],
            Duration::from_secs(5)
        ),
        async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            dying.shutdown().await.unwrap();
        }
    );
    eprintln!("add_voter during the leader's shutdown: {started:?}");
    cluster.nodes.insert(4, learner);
    let new_leader = cluster
        .agreed_leader(Some(leader), Duration::from_secs(20))
        .await
        .expect("the survivors elect a leader");
    let voters_now = |node: &MetadataNode| {
        let mut v: Vec<u64> = node.voters().iter().map(|(id, _)| *id).collect();
        v.sort();
        v
    };
    let before = voters_now(&cluster.nodes[&new_leader]);
    assert!(
        before == vec![1, 2, 3] || before == vec![1, 2, 3, 4],
        "not a joint or partial configuration: {before:?}"
    );
    // Asked again (as the client would after REQUEST_TIMED_OUT): done or a duplicate.
    let again = cluster.nodes[&4]
        .add_voter(4, Uuid128([4; 16]), vec![addr], Duration::from_secs(10))
        .await;
    assert!(
        matches!(
            again,
            Ok(()) | Err(VoterChangeError::Refused(VoterRefusal::Duplicate(_)))
        ),
        "{again:?}"
    );
    assert_eq!(voters_now(&cluster.nodes[&4]), vec![1, 2, 3, 4]);
    // Three of the four voters are running: they commit.
    cluster.nodes[&4].propose(put("after")).await.unwrap();
    cluster.shutdown().await;
}
