//! Changing the voters of the metadata quorum at run time, as Kafka's KIP-853 does:
//! AddRaftVoter promotes an observer (a learner, in openraft's words) to voter, RemoveRaftVoter
//! demotes a voter to observer, and each node reports the directory id of its metadata log
//! dir (what Kafka's controllers send UpdateRaftVoter for), so a voter is named as Kafka names
//! it: by node id and directory id.
//!
//! Every change runs on the leader, one at a time, through openraft's joint consensus
//! (`change_membership`): the answer comes once the new voter set is committed. The checks
//! follow Kafka's `AddVoterHandler` / `RemoveVoterHandler`, with Kafka's error codes:
//! - a change while the previous one is not committed: `REQUEST_TIMED_OUT`;
//! - adding a voter id already voting: `DUPLICATE_VOTER`;
//! - adding a node that is not an observer with that directory id, or one that does not catch
//!   up with the leader's log before the request's timeout: `REQUEST_TIMED_OUT`;
//! - removing a node id and directory id that is not a voter, or the last voter:
//!   `VOTER_NOT_FOUND`.
//!
//! A removed voter stays an observer: it follows the metadata log and its broker keeps
//! serving until it is stopped. A removed leader leads until the new voter set commits, then
//! the remaining voters elect a leader among themselves.

use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

use openraft::error::{ChangeMembershipError, ClientWriteError, RaftError};
use openraft::{ChangeMembers, Raft, RaftMetrics};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::ids::Uuid128;
use crate::network::{LeaderError, LeaderReply};
use crate::TypeConfig;

/// A member of the metadata quorum as its membership records it (openraft's node type).
///
/// Serialized as `{"addr": ...}` plus `directory_id` once known, so membership written with
/// openraft's `BasicNode` (address only) reads back unchanged.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuorumNode {
    /// Where peers reach the node's metadata RPC listener.
    pub addr: String,
    /// Kafka's `directory.id` of the node's metadata log dir, once the node reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directory_id: Option<Uuid128>,
}

impl QuorumNode {
    pub fn new(addr: impl Into<String>) -> Self {
        QuorumNode {
            addr: addr.into(),
            directory_id: None,
        }
    }
}

/// A voter as Kafka names it (`ReplicaKey`): an unknown directory id is printed empty.
struct Key(u64, Option<Uuid128>);

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.1 {
            Some(dir) => write!(
                f,
                "ReplicaKey(id={}, directoryId={})",
                self.0,
                dir.to_kafka_string()
            ),
            None => write!(f, "ReplicaKey(id={}, directoryId=<none>)", self.0),
        }
    }
}

/// Why the leader did not change the voters; each maps to one Kafka error code.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum VoterRefusal {
    /// `DUPLICATE_VOTER`.
    #[error("{0}")]
    Duplicate(String),
    /// `VOTER_NOT_FOUND`.
    #[error("{0}")]
    NotFound(String),
    /// `REQUEST_TIMED_OUT`: not now (a change in flight, a lagging or absent observer).
    #[error("{0}")]
    TimedOut(String),
    /// `INVALID_REQUEST`.
    #[error("{0}")]
    Invalid(String),
}

impl VoterRefusal {
    pub fn kafka_error_code(&self) -> i16 {
        match self {
            VoterRefusal::Duplicate(_) => 126,
            VoterRefusal::NotFound(_) => 127,
            VoterRefusal::TimedOut(_) => 7,
            VoterRefusal::Invalid(_) => 42,
        }
    }
}

type Metrics = RaftMetrics<u64, QuorumNode>;

/// How long a change waits for the leader to apply the latest voter change before it is
/// refused as one in flight.
const APPLY_WAIT: Duration = Duration::from_secs(2);

/// The endpoints of an AddRaftVoter request compared with the observer's address.
const MAX_ENDPOINTS: usize = 16;

fn refused(refusal: VoterRefusal) -> Result<LeaderReply, LeaderError> {
    Ok(LeaderReply::VotersChanged(Err(refusal)))
}

/// This node's metrics if it leads, else where the leader is.
fn leading(raft: &Raft<TypeConfig>) -> Result<Metrics, LeaderError> {
    let metrics = raft.metrics().borrow().clone();
    if metrics.current_leader == Some(metrics.id) {
        return Ok(metrics);
    }
    let leader_addr = metrics.current_leader.and_then(|id| {
        metrics
            .membership_config
            .membership()
            .get_node(&id)
            .map(|n| n.addr.clone())
    });
    Err(LeaderError::NotLeader {
        leader_id: metrics.current_leader,
        leader_addr,
    })
}

/// This leader's view once no voter change is in flight. Kafka answers a change while the
/// previous one is uncommitted with REQUEST_TIMED_OUT; so does this (the effective membership
/// is committed once applied). A committed joint configuration is a change a previous leader
/// left half done (it stopped between joint consensus's two steps): openraft leaves finishing
/// it to the application, so it is finished here, toward its new voters, before anything
/// else. Without that no voter change would ever be accepted again.
async fn settled(
    raft: &Raft<TypeConfig>,
    deadline: Instant,
) -> Result<Metrics, Result<LeaderReply, LeaderError>> {
    let mut metrics = leading(raft).map_err(Err)?;
    // A leader just elected applies the entries of its term first: give it a moment rather
    // than refuse a change that would be accepted a few milliseconds later.
    let pending = |m: &Metrics| {
        m.membership_config.log_id().map(|l| l.index) > m.last_applied.map(|l| l.index)
    };
    if pending(&metrics) {
        let mut watch = raft.metrics();
        let wait = deadline.min(Instant::now() + APPLY_WAIT);
        let _ = tokio::time::timeout_at(wait, watch.wait_for(|m| !pending(m))).await;
        metrics = leading(raft).map_err(Err)?;
    }
    let stored = &metrics.membership_config;
    let applied = metrics.last_applied.map(|l| l.index);
    if stored.log_id().map(|l| l.index) > applied {
        return Err(refused(VoterRefusal::TimedOut(format!(
            "Request timed out waiting for voters to commit the latest voter change at {:?} \
             with HWM {}",
            stored.log_id().map(|l| l.index),
            applied.map_or(-1, |i| i as i64 + 1)
        ))));
    }
    let joint = stored.membership().get_joint_config();
    if joint.len() == 1 {
        return Ok(metrics);
    }
    let goal = joint.last().cloned().unwrap_or_default();
    tracing::info!(
        ?goal,
        "finishing a voter change a previous leader left half done"
    );
    let finish = ChangeMembers::ReplaceAllVoters(goal);
    match commit(
        raft,
        finish,
        true,
        deadline,
        "The unfinished voter change".into(),
    )
    .await
    {
        Ok(LeaderReply::VotersChanged(Ok(_))) => leading(raft).map_err(Err),
        other => Err(other),
    }
}

fn voter_keys(metrics: &Metrics) -> String {
    let membership = metrics.membership_config.membership();
    let keys: Vec<String> = membership
        .voter_ids()
        .map(|id| {
            let dir = membership.get_node(&id).and_then(|n| n.directory_id);
            Key(id, dir).to_string()
        })
        .collect();
    format!("[{}]", keys.join(", "))
}

/// The error openraft gave a membership change, as the client sees it.
fn change_failed(
    error: RaftError<u64, ClientWriteError<u64, QuorumNode>>,
) -> Result<LeaderReply, LeaderError> {
    match error {
        RaftError::APIError(ClientWriteError::ChangeMembershipError(
            ChangeMembershipError::InProgress(e),
        )) => refused(VoterRefusal::TimedOut(format!(
            "Request timed out waiting for leader to handle previous voter change request: {e}"
        ))),
        RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => {
            refused(VoterRefusal::TimedOut(e.to_string()))
        }
        other => Err(crate::network::leader_error(other)),
    }
}

/// What AddRaftVoter asks: promote observer `node_id` with `directory_id`, reachable at one
/// of `endpoints` (`host:port`), within `timeout`.
pub(crate) async fn add_voter_on_leader(
    raft: &Raft<TypeConfig>,
    node_id: u64,
    directory_id: Uuid128,
    endpoints: Vec<String>,
    timeout: Duration,
) -> Result<LeaderReply, LeaderError> {
    let deadline = Instant::now() + timeout;
    let key = Key(node_id, Some(directory_id));
    let metrics = match settled(raft, deadline).await {
        Ok(metrics) => metrics,
        Err(answer) => return answer,
    };
    let membership = metrics.membership_config.membership();
    if membership.voter_ids().any(|id| id == node_id) {
        return refused(VoterRefusal::Duplicate(format!(
            "The voter id for {key} is already part of the set of voters {}.",
            voter_keys(&metrics)
        )));
    }
    let Some(node) = membership.get_node(&node_id).cloned() else {
        return refused(VoterRefusal::TimedOut(format!(
            "Aborted add voter operation for {key} since it is not an observer of the metadata \
             quorum: start it with controller.quorum.voters naming the voters, then add it"
        )));
    };
    match node.directory_id {
        Some(known) if known == directory_id => {}
        Some(known) => {
            return refused(VoterRefusal::TimedOut(format!(
                "Aborted add voter operation for {key} since observer {node_id} has directory \
                 id {}",
                known.to_kafka_string()
            )))
        }
        None => {
            return refused(VoterRefusal::TimedOut(format!(
                "Aborted add voter operation for {key} since observer {node_id} has not \
                 reported its directory id yet"
            )))
        }
    }
    // Each comparison may resolve a host name: a request naming many is looked at no further
    // than its first few.
    let mut reachable = false;
    for endpoint in endpoints.iter().take(MAX_ENDPOINTS) {
        reachable = reachable || same_endpoint(endpoint, &node.addr).await;
    }
    if !reachable {
        return refused(VoterRefusal::Invalid(format!(
            "Provided listeners [{}] do not contain {}, where observer {node_id} serves the \
             metadata quorum",
            endpoints.join(", "),
            node.addr
        )));
    }
    // Kafka adds an observer only once it has caught up with the leader's log.
    let target = metrics.last_log_index.unwrap_or(0);
    let mut watch = raft.metrics();
    let caught_up = tokio::time::timeout_at(
        deadline,
        watch.wait_for(|m| {
            m.replication
                .as_ref()
                .and_then(|r| r.get(&node_id).copied().flatten())
                .is_some_and(|matched| matched.index >= target)
        }),
    )
    .await
    .is_ok_and(|reached| reached.is_ok());
    if !caught_up {
        return refused(VoterRefusal::TimedOut(format!(
            "Aborted add voter operation for {key} since it is lagging behind"
        )));
    }
    let change = ChangeMembers::AddVoterIds(BTreeSet::from([node_id]));
    commit(raft, change, false, deadline, format!("Adding {key}")).await
}

/// Runs a membership change until it commits or `deadline` passes (then it may still).
async fn commit(
    raft: &Raft<TypeConfig>,
    change: ChangeMembers<u64, QuorumNode>,
    retain: bool,
    deadline: Instant,
    what: String,
) -> Result<LeaderReply, LeaderError> {
    let started = Instant::now();
    match tokio::time::timeout_at(deadline, raft.change_membership(change, retain)).await {
        Ok(Ok(response)) => Ok(LeaderReply::VotersChanged(Ok(response.log_id.index))),
        Ok(Err(error)) => change_failed(error),
        Err(_) => refused(VoterRefusal::TimedOut(format!(
            "{what} was not committed within {:?}; it may still be",
            started.elapsed()
        ))),
    }
}

/// What RemoveRaftVoter asks: demote voter `node_id` with `directory_id` (zero: a voter whose
/// directory id is not known) to observer.
pub(crate) async fn remove_voter_on_leader(
    raft: &Raft<TypeConfig>,
    node_id: u64,
    directory_id: Uuid128,
    timeout: Duration,
) -> Result<LeaderReply, LeaderError> {
    let wanted = (!directory_id.is_zero()).then_some(directory_id);
    let key = Key(node_id, wanted);
    let deadline = Instant::now() + timeout;
    let metrics = match settled(raft, deadline).await {
        Ok(metrics) => metrics,
        Err(answer) => return answer,
    };
    let membership = metrics.membership_config.membership();
    let is_voter = membership.voter_ids().any(|id| id == node_id)
        && membership.get_node(&node_id).map(|n| n.directory_id) == Some(wanted);
    if !is_voter || membership.voter_ids().count() == 1 {
        return refused(VoterRefusal::NotFound(format!(
            "Cannot remove voter {key} from the set of voters {}",
            voter_keys(&metrics)
        )));
    }
    // Kept as a learner: the node goes on following the log (its broker keeps serving).
    let change = ChangeMembers::RemoveVoters(BTreeSet::from([node_id]));
    commit(raft, change, true, deadline, format!("Removing {key}")).await
}

/// Records the directory id node `node_id` reported. A voter already known with another
/// directory id keeps it: that is another disk, which Kafka treats as another replica, and
/// it needs RemoveRaftVoter and AddRaftVoter.
pub(crate) async fn set_directory_on_leader(
    raft: &Raft<TypeConfig>,
    node_id: u64,
    directory_id: Uuid128,
) -> Result<LeaderReply, LeaderError> {
    // The caller's own deadline is shorter; this only bounds a leader cut off from its quorum.
    let deadline = Instant::now() + Duration::from_secs(60);
    let metrics = match settled(raft, deadline).await {
        Ok(metrics) => metrics,
        Err(answer) => return answer,
    };
    let membership = metrics.membership_config.membership();
    let Some(node) = membership.get_node(&node_id).cloned() else {
        return refused(VoterRefusal::NotFound(format!(
            "node {node_id} is not a member of the metadata quorum"
        )));
    };
    if node.directory_id == Some(directory_id) {
        return Ok(LeaderReply::VotersChanged(Ok(metrics
            .membership_config
            .log_id()
            .map_or(0, |l| l.index))));
    }
    let is_voter = membership.voter_ids().any(|id| id == node_id);
    if let (Some(known), true) = (node.directory_id, is_voter) {
        return refused(VoterRefusal::Invalid(format!(
            "voter {node_id} has directory id {}, not {}: a voter on a new disk is removed \
             (RemoveRaftVoter) and added again (AddRaftVoter)",
            known.to_kafka_string(),
            directory_id.to_kafka_string()
        )));
    }
    let updated = QuorumNode {
        addr: node.addr,
        directory_id: Some(directory_id),
    };
    let change = ChangeMembers::SetNodes([(node_id, updated)].into_iter().collect());
    let what = format!("The directory id of node {node_id}");
    commit(raft, change, true, deadline, what).await
}

/// Whether `host:port` names the same listener as `addr`: the same port, and the same host
/// or both resolving to a common address.
async fn same_endpoint(endpoint: &str, addr: &str) -> bool {
    if endpoint == addr {
        return true;
    }
    let port = |s: &str| s.rsplit_once(':').map(|(_, p)| p.to_string());
    if port(endpoint) != port(addr) {
        return false;
    }
    async fn resolve(s: &str) -> Vec<std::net::SocketAddr> {
        match tokio::net::lookup_host(s).await {
            Ok(found) => found.collect(),
            Err(_) => Vec::new(),
        }
    }
    let theirs = resolve(endpoint).await;
    resolve(addr).await.iter().any(|a| theirs.contains(a))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_written_by_basic_node_reads_back_and_round_trips() {
        let old: QuorumNode = serde_json::from_str(r#"{"addr":"127.0.0.1:9093"}"#).unwrap();
        assert_eq!(old, QuorumNode::new("127.0.0.1:9093"));
        assert_eq!(
            serde_json::to_string(&old).unwrap(),
            r#"{"addr":"127.0.0.1:9093"}"#
        );
        let with_dir = QuorumNode {
            addr: "h:1".into(),
            directory_id: Some(Uuid128([7; 16])),
        };
        let text = serde_json::to_string(&with_dir).unwrap();
        assert_eq!(serde_json::from_str::<QuorumNode>(&text).unwrap(), with_dir);
    }

    #[tokio::test]
    async fn endpoints_match_by_port_and_resolved_host() {
        assert!(same_endpoint("127.0.0.1:9093", "127.0.0.1:9093").await);
        assert!(same_endpoint("localhost:9093", "127.0.0.1:9093").await);
        assert!(!same_endpoint("127.0.0.1:9094", "127.0.0.1:9093").await);
        assert!(!same_endpoint("10.255.255.1:9093", "127.0.0.1:9093").await);
    }
}
