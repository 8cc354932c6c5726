//! [`MetadataNode`]: one member of the metadata quorum, the object the broker owns.
//!
//! Start-up: open the log and state machine from `dir`, bind the RPC listener, start Raft,
//! then join the quorum according to [`MetadataConfig::voters`]:
//! - no voters configured: a single-node cluster that initializes itself (zero-config);
//! - this node among the voters: initialize with all voters (idempotent on every voter and on
//!   restart; the voters then elect a leader once a majority is up);
//! - otherwise: a learner, which keeps asking the voters to add it until it is in the
//!   membership, then follows the log.
//!
//! Concurrency and shutdown: everything the node starts (RPC server, connection tasks, the
//! learner join loop) runs on its `TaskTracker` under its `CancellationToken`;
//! [`MetadataNode::shutdown`] cancels them, shuts Raft down and waits for all of it, each step
//! bounded by `shutdown_timeout`. Dropping the node without `shutdown` cancels its tasks and
//! Raft stops once its last handle is gone, but nothing waits for them.
//!
//! Retries: proposals, learner joins and heartbeats retry with a capped exponential backoff
//! while no leader is known or the leader cannot be reached; a forwarded proposal that may
//! have reached the leader is never resent (its outcome is reported as unknown). Heartbeats
//! are idempotent: they go over one kept connection and are resent after any failure.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{InitializeError, RaftError};
use openraft::{Raft, RaftMetrics, SnapshotPolicy};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::command::{kafka_codes, ApplyError, Command, Response};
use crate::ids::{BrokerEpoch, BrokerId, Uuid128};
use crate::network::{
    add_learner_on_leader, propose_on_leader, serve, LeaderError, LeaderReply, NetworkFactory,
    RpcClient, RpcError, RpcRequest, RpcResponse, Server,
};
use crate::sessions::{heartbeat_on_leader, Sessions};
use crate::state::MetadataState;
use crate::store::{LogStore, LogStoreOptions, MetadataImage, StateMachineStore, StoreError};
use crate::voters::{
    add_voter_on_leader, remove_voter_on_leader, set_directory_on_leader, QuorumNode, VoterRefusal,
};
use crate::TypeConfig;

/// How a node takes part in the quorum, derived from its config.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// No voters configured: the node is the whole quorum.
    SingleNode,
    Voter,
    Learner,
}

/// Configuration of a metadata node. [`MetadataConfig::new`] gives the zero-config single
/// node; set `voters` (see [`MetadataConfig::parse_voters`]) for a quorum.
#[derive(Clone, Debug)]
pub struct MetadataConfig {
    /// This node's id (the broker's `node.id`).
    pub node_id: u64,
    /// The voters and their metadata RPC addresses (Kafka's `controller.quorum.voters`).
    /// Empty, with no bootstrap servers either: a single self-bootstrapping node. A node not
    /// listed here joins as a learner.
    pub voters: BTreeMap<u64, String>,
    /// Where a learner asks to join besides the voters (Kafka's
    /// `controller.quorum.bootstrap.servers`, `host:port`). Set without voters: the node joins
    /// an existing quorum as a learner; only `voters` start a new one.
    pub bootstrap_servers: Vec<String>,
    /// Where the metadata RPC listener binds.
    pub listen_addr: SocketAddr,
    /// The address peers reach this node at, when it is not a voter (voters are reached at
    /// their `voters` entry). Defaults to the bound listener address.
    pub advertised_addr: Option<String>,
    /// The node's metadata directory (log segments, meta, snapshot).
    pub dir: PathBuf,
    pub heartbeat_interval: Duration,
    pub election_timeout_min: Duration,
    pub election_timeout_max: Duration,
    /// Bound on one forwarded request to the leader.
    pub rpc_timeout: Duration,
    /// Bound on a whole proposal, waiting for a leader included.
    pub propose_timeout: Duration,
    /// Take a snapshot after this many entries since the previous one.
    pub snapshot_after_entries: u64,
    /// Entries kept in the log behind a snapshot, so lagging followers catch up without one.
    pub entries_kept_after_snapshot: u64,
    /// Log segment file size.
    pub segment_bytes: u64,
    /// Bound on each step of [`MetadataNode::shutdown`].
    pub shutdown_timeout: Duration,
}

impl MetadataConfig {
    /// A zero-config single node listening on an ephemeral loopback port.
    pub fn new(node_id: u64, dir: impl Into<PathBuf>) -> Self {
        MetadataConfig {
            node_id,
            voters: BTreeMap::new(),
            bootstrap_servers: Vec::new(),
            listen_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            advertised_addr: None,
            dir: dir.into(),
            heartbeat_interval: Duration::from_millis(200),
            election_timeout_min: Duration::from_millis(1_000),
            election_timeout_max: Duration::from_millis(2_000),
            rpc_timeout: Duration::from_secs(5),
            propose_timeout: Duration::from_secs(15),
            snapshot_after_entries: 10_000,
            entries_kept_after_snapshot: 1_000,
            segment_bytes: LogStoreOptions::default().segment_bytes,
            shutdown_timeout: Duration::from_secs(5),
        }
    }

    /// Parses Kafka's `controller.quorum.voters` form: `1@host:port,2@host:port`. An empty
    /// string means no voters.
    pub fn parse_voters(text: &str) -> Result<BTreeMap<u64, String>, NodeError> {
        let mut voters = BTreeMap::new();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let invalid = |reason: &str| {
                NodeError::InvalidConfig(format!(
                    "voter {item:?}: {reason} (expected id@host:port)"
                ))
            };
            let (id, addr) = item.split_once('@').ok_or_else(|| invalid("no '@'"))?;
            let id: u64 = id
                .trim()
                .parse()
                .map_err(|_| invalid("the id is not a number"))?;
            let addr = addr.trim();
            let port = addr.rsplit_once(':').map(|(_, port)| port);
            if port.is_none_or(|p| p.parse::<u16>().is_err()) {
                return Err(invalid("the address has no valid port"));
            }
            if voters.insert(id, addr.to_owned()).is_some() {
                return Err(invalid("the id is listed twice"));
            }
        }
        Ok(voters)
    }

    /// Checks the config and derives this node's role.
    pub fn role(&self) -> Result<Role, NodeError> {
        let invalid = |reason: String| Err(NodeError::InvalidConfig(reason));
        if self.heartbeat_interval.is_zero() || self.heartbeat_interval >= self.election_timeout_min
        {
            return invalid(format!(
                "the heartbeat interval {:?} must be positive and below the minimum election timeout {:?}",
                self.heartbeat_interval, self.election_timeout_min
            ));
        }
        if self.election_timeout_min >= self.election_timeout_max {
            return invalid(format!(
                "the election timeout range {:?}..{:?} is empty",
                self.election_timeout_min, self.election_timeout_max
            ));
        }
        if self.rpc_timeout.is_zero() || self.propose_timeout.is_zero() {
            return invalid("timeouts must be positive".into());
        }
        if let Some((id, _)) = self.voters.iter().find(|(_, addr)| addr.trim().is_empty()) {
            return invalid(format!("voter {id} has an empty address"));
        }
        Ok(
            if self.voters.is_empty() && self.bootstrap_servers.is_empty() {
                Role::SingleNode
            } else if self.voters.contains_key(&self.node_id) {
                Role::Voter
            } else {
                Role::Learner
            },
        )
    }

    fn raft_config(&self) -> Result<openraft::Config, NodeError> {
        let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        openraft::Config {
            cluster_name: "strata-metadata".into(),
            heartbeat_interval: millis(self.heartbeat_interval),
            election_timeout_min: millis(self.election_timeout_min),
            election_timeout_max: millis(self.election_timeout_max),
            install_snapshot_timeout: millis(self.rpc_timeout),
            snapshot_policy: SnapshotPolicy::LogsSinceLast(self.snapshot_after_entries.max(1)),
            max_in_snapshot_log_to_keep: self.entries_kept_after_snapshot,
            // JSON frames carry chunk bytes as numbers (~4x): keep frames well below the limit.
            snapshot_max_chunk_size: 1024 * 1024,
            ..Default::default()
        }
        .validate()
        .map_err(|e| NodeError::InvalidConfig(e.to_string()))
    }
}

/// Why a node could not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("invalid metadata quorum config: {0}")]
    InvalidConfig(String),
    #[error("metadata storage: {0}")]
    Store(#[from] StoreError),
    #[error("cannot bind the metadata RPC listener on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("metadata Raft failed: {0}")]
    Raft(String),
    #[error("metadata node shutdown did not finish within {0:?}")]
    ShutdownTimedOut(Duration),
}

/// Why a proposal did not produce a response.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProposeError {
    /// Committed, and rejected identically on every node: nothing changed.
    #[error("metadata command rejected: {0}")]
    Rejected(#[from] ApplyError),
    /// No leader was known or reachable within the propose timeout; nothing was committed.
    #[error("no metadata leader within {0:?}")]
    NoLeader(Duration),
    /// The request reached the leader but no answer came back: it may or may not be
    /// committed. Re-read the state before retrying a non-idempotent command.
    #[error("outcome unknown: {0}")]
    OutcomeUnknown(String),
    /// The leader refused the request (e.g. an invalid membership change).
    #[error("the metadata leader refused the request: {0}")]
    Refused(String),
    #[error("the metadata node is shutting down")]
    ShuttingDown,
    /// [`MetadataNode::propose_as_leader`]: this node does not lead in that term (any more);
    /// nothing was committed through it.
    #[error("this node does not lead the metadata quorum in term {0}")]
    NotLeaderInTerm(u64),
}

impl ProposeError {
    /// Whether the same request may succeed later without any change.
    pub fn is_retriable(&self) -> bool {
        matches!(
            self,
            ProposeError::NoLeader(_) | ProposeError::OutcomeUnknown(_)
        )
    }

    /// The Kafka error code for a client whose request needed this proposal.
    pub fn kafka_error_code(&self) -> i16 {
        match self {
            ProposeError::Rejected(e) => e.kafka_error_code(),
            ProposeError::NoLeader(_)
            | ProposeError::ShuttingDown
            | ProposeError::NotLeaderInTerm(_) => kafka_codes::NOT_CONTROLLER,
            ProposeError::OutcomeUnknown(_) => kafka_codes::REQUEST_TIMED_OUT,
            ProposeError::Refused(_) => kafka_codes::INVALID_REQUEST,
        }
    }
}

/// Why a voter change did not happen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VoterChangeError {
    /// The leader checked the change and refused it.
    #[error("{0}")]
    Refused(VoterRefusal),
    /// The leader could not be reached or did not answer.
    #[error("{0}")]
    Quorum(ProposeError),
}

impl VoterChangeError {
    pub fn kafka_error_code(&self) -> i16 {
        match self {
            VoterChangeError::Refused(refusal) => refusal.kafka_error_code(),
            VoterChangeError::Quorum(error) => error.kafka_error_code(),
        }
    }
}

/// Exponential backoff that honours cancellation: the one retry helper of this crate.
pub(crate) struct Backoff {
    next: Duration,
    max: Duration,
}

impl Backoff {
    pub(crate) fn new(first: Duration, max: Duration) -> Self {
        Backoff { next: first, max }
    }

    /// Sleeps for the next interval (never past `deadline`); false if cancelled.
    pub(crate) async fn wait(
        &mut self,
        cancel: &CancellationToken,
        deadline: Option<Instant>,
    ) -> bool {
        let mut wake = Instant::now() + self.next;
        if let Some(deadline) = deadline {
            wake = wake.min(deadline);
        }
        self.next = (self.next * 2).min(self.max);
        tokio::select! {
            _ = cancel.cancelled() => false,
            _ = tokio::time::sleep_until(wake) => true,
        }
    }
}

/// A leader-only operation that a node runs locally or forwards to the leader.
#[derive(Clone, Debug)]
enum LeaderOp {
    Propose(Command),
    AddLearner {
        node_id: u64,
        addr: String,
    },
    Heartbeat {
        id: BrokerId,
        broker_epoch: BrokerEpoch,
    },
    AddVoter {
        node_id: u64,
        directory_id: Uuid128,
        endpoints: Vec<String>,
        timeout: Duration,
    },
    RemoveVoter {
        node_id: u64,
        directory_id: Uuid128,
        timeout: Duration,
    },
    SetDirectory {
        node_id: u64,
        directory_id: Uuid128,
    },
}

impl LeaderOp {
    fn request(&self) -> RpcRequest {
        match self {
            LeaderOp::AddVoter {
                node_id,
                directory_id,
                endpoints,
                timeout,
            } => RpcRequest::AddVoter {
                node_id: *node_id,
                directory_id: *directory_id,
                endpoints: endpoints.clone(),
                timeout_ms: timeout.as_millis() as u64,
            },
            LeaderOp::RemoveVoter {
                node_id,
                directory_id,
                timeout,
            } => RpcRequest::RemoveVoter {
                node_id: *node_id,
                directory_id: *directory_id,
                timeout_ms: timeout.as_millis() as u64,
            },
            LeaderOp::SetDirectory {
                node_id,
                directory_id,
            } => RpcRequest::SetDirectory {
                node_id: *node_id,
                directory_id: *directory_id,
            },
            LeaderOp::Propose(command) => RpcRequest::Propose(command.clone()),
            LeaderOp::AddLearner { node_id, addr } => RpcRequest::AddLearner {
                node_id: *node_id,
                addr: addr.clone(),
            },
            LeaderOp::Heartbeat { id, broker_epoch } => RpcRequest::Heartbeat {
                id: *id,
                broker_epoch: *broker_epoch,
            },
        }
    }

    /// Running it twice is the same as once, so it may be resent whatever became of an
    /// earlier attempt, and over a kept connection.
    fn is_idempotent(&self) -> bool {
        matches!(self, LeaderOp::Heartbeat { .. })
    }

    /// How long the leader may take to answer: a voter change waits for its new voter to
    /// catch up and for the change to commit.
    fn leader_time(&self) -> Option<Duration> {
        match self {
            LeaderOp::AddVoter { timeout, .. } | LeaderOp::RemoveVoter { timeout, .. } => {
                Some(*timeout)
            }
            _ => None,
        }
    }
}

/// What a forwarding attempt tells the retry loop.
enum Forwarded {
    Done(LeaderReply),
    /// Certainly not executed: retry (after a backoff).
    Retry,
}

/// What a node needs to run leader operations; shared with its background tasks.
#[derive(Clone)]
struct Quorum {
    raft: Raft<TypeConfig>,
    addr: String,
    rpc_timeout: Duration,
    cancel: CancellationToken,
    images: watch::Receiver<MetadataImage>,
    sessions: Arc<Sessions>,
    /// The connection idempotent requests (heartbeats) are forwarded over, kept open: a
    /// fresh one per heartbeat cost the leader an accept per broker per interval.
    kept: Arc<tokio::sync::Mutex<Option<RpcClient>>>,
}

impl Quorum {
    async fn run_locally(&self, op: &LeaderOp) -> Result<LeaderReply, LeaderError> {
        match op {
            LeaderOp::Propose(command) => propose_on_leader(&self.raft, command.clone()).await,
            LeaderOp::AddLearner { node_id, addr } => {
                add_learner_on_leader(&self.raft, *node_id, addr.clone()).await
            }
            LeaderOp::Heartbeat { id, broker_epoch } => {
                heartbeat_on_leader(&self.raft, &self.images, &self.sessions, *id, *broker_epoch)
            }
            LeaderOp::AddVoter {
                node_id,
                directory_id,
                endpoints,
                timeout,
            } => {
                add_voter_on_leader(
                    &self.raft,
                    *node_id,
                    *directory_id,
                    endpoints.clone(),
                    *timeout,
                )
                .await
            }
            LeaderOp::RemoveVoter {
                node_id,
                directory_id,
                timeout,
            } => remove_voter_on_leader(&self.raft, *node_id, *directory_id, *timeout).await,
            LeaderOp::SetDirectory {
                node_id,
                directory_id,
            } => set_directory_on_leader(&self.raft, *node_id, *directory_id).await,
        }
    }

    /// Runs `op` here if this node leads, else forwards it to the leader, retrying while no
    /// leader is known or reachable until `deadline`.
    async fn execute(&self, op: &LeaderOp, deadline: Instant) -> Result<LeaderReply, ProposeError> {
        let started = Instant::now();
        let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_millis(500));
        loop {
            // A leader that lost its quorum never answers: bound the wait. The entry may
            // still commit later, so the outcome is unknown rather than failed.
            let local = tokio::time::timeout_at(deadline, self.run_locally(op))
                .await
                .map_err(|_| {
                    ProposeError::OutcomeUnknown(format!(
                        "not committed within {:?}",
                        started.elapsed()
                    ))
                })?;
            match local {
                Ok(reply) => return Ok(reply),
                Err(LeaderError::NotLeader {
                    leader_addr: Some(leader_addr),
                    ..
                }) if leader_addr != self.addr => {
                    match self.forward(op, &leader_addr, deadline).await? {
                        Forwarded::Done(reply) => return Ok(reply),
                        Forwarded::Retry => {}
                    }
                }
                Err(LeaderError::NotLeader { .. }) => {}
                Err(LeaderError::ShuttingDown) => return Err(ProposeError::ShuttingDown),
                Err(LeaderError::Failed(reason)) => return Err(ProposeError::Refused(reason)),
            }
            // The wait ends at the deadline at the latest; a new attempt then would start
            // with no time left, so give up instead.
            if !backoff.wait(&self.cancel, Some(deadline)).await {
                return Err(ProposeError::ShuttingDown);
            }
            if Instant::now() >= deadline {
                return Err(ProposeError::NoLeader(started.elapsed()));
            }
        }
    }

    async fn forward(
        &self,
        op: &LeaderOp,
        leader_addr: &str,
        deadline: Instant,
    ) -> Result<Forwarded, ProposeError> {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let timeout = op
            .leader_time()
            .map_or(self.rpc_timeout, |t| t + self.rpc_timeout)
            .min(remaining)
            .max(Duration::from_millis(1));
        if op.is_idempotent() {
            return self.forward_idempotent(op, leader_addr, timeout).await;
        }
        // A fresh connection per forwarded request: a connect error then proves the request
        // was not sent, which is what makes retrying safe.
        let mut client = RpcClient::new(leader_addr);
        match client.call(&op.request(), timeout).await {
            Ok(RpcResponse::Leader(Ok(reply))) => Ok(Forwarded::Done(reply)),
            // openraft answers "forward to leader" for a write it had accepted only when it
            // truncated that entry, so this proves the command is not (and will not be)
            // committed.
            Ok(RpcResponse::Leader(Err(LeaderError::NotLeader { .. }))) => Ok(Forwarded::Retry),
            // A leader stopping mid-write may have replicated the entry already.
            Ok(RpcResponse::Leader(Err(LeaderError::ShuttingDown))) => {
                Err(ProposeError::OutcomeUnknown(format!(
                    "the leader at {leader_addr} shut down during the request"
                )))
            }
            Ok(RpcResponse::Leader(Err(LeaderError::Failed(reason)))) => {
                Err(ProposeError::Refused(reason))
            }
            Ok(_) => Err(ProposeError::OutcomeUnknown(format!(
                "unexpected response from the leader at {leader_addr}"
            ))),
            Err(error) if error.request_not_sent() => {
                tracing::debug!(%leader_addr, %error, "metadata leader unreachable; retrying");
                Ok(Forwarded::Retry)
            }
            Err(error @ RpcError::BadRequest(_)) => Err(ProposeError::Refused(error.to_string())),
            Err(error) => Err(ProposeError::OutcomeUnknown(format!(
                "request to the leader at {leader_addr}: {error}"
            ))),
        }
    }

    /// Forwards an idempotent `op` over the kept connection (reopened when the leader
    /// moved or the connection failed); any failure is retried until the deadline.
    async fn forward_idempotent(
        &self,
        op: &LeaderOp,
        leader_addr: &str,
        timeout: Duration,
    ) -> Result<Forwarded, ProposeError> {
        let mut kept = self.kept.lock().await;
        let client = match &mut *kept {
            Some(client) if client.addr() == leader_addr => client,
            other => other.insert(RpcClient::new(leader_addr)),
        };
        match client.call(&op.request(), timeout).await {
            Ok(RpcResponse::Leader(Ok(reply))) => Ok(Forwarded::Done(reply)),
            Ok(RpcResponse::Leader(Err(LeaderError::ShuttingDown))) => Ok(Forwarded::Retry),
            Ok(RpcResponse::Leader(Err(LeaderError::NotLeader { .. }))) => Ok(Forwarded::Retry),
            Ok(RpcResponse::Leader(Err(LeaderError::Failed(reason)))) => {
                Err(ProposeError::Refused(reason))
            }
            Ok(_) => Err(ProposeError::Refused(format!(
                "unexpected response from the leader at {leader_addr}"
            ))),
            Err(error @ RpcError::BadRequest(_)) => Err(ProposeError::Refused(error.to_string())),
            Err(error) => {
                tracing::debug!(%leader_addr, %error, "forwarding to the metadata leader failed; retrying");
                *kept = None;
                Ok(Forwarded::Retry)
            }
        }
    }

    fn in_membership(&self, node_id: u64, addr: &str) -> bool {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow();
        metrics
            .membership_config
            .membership()
            .get_node(&node_id)
            .is_some_and(|node| node.addr == addr)
    }
}

/// A running member of the metadata quorum.
pub struct MetadataNode {
    node_id: u64,
    role: Role,
    local_addr: SocketAddr,
    quorum: Quorum,
    images: watch::Receiver<MetadataImage>,
    tracker: TaskTracker,
    propose_timeout: Duration,
    shutdown_timeout: Duration,
}

impl MetadataNode {
    /// Binds `config.listen_addr` and starts the node.
    pub async fn start(config: MetadataConfig) -> Result<Self, NodeError> {
        let listener = TcpListener::bind(config.listen_addr)
            .await
            .map_err(|source| NodeError::Bind {
                addr: config.listen_addr,
                source,
            })?;
        Self::start_with_listener(config, listener).await
    }

    /// Starts the node on an already bound listener (`config.listen_addr` is ignored).
    pub async fn start_with_listener(
        config: MetadataConfig,
        listener: TcpListener,
    ) -> Result<Self, NodeError> {
        let role = config.role()?;
        let raft_config = Arc::new(config.raft_config()?);
        let local_addr = listener.local_addr().map_err(|source| NodeError::Bind {
            addr: config.listen_addr,
            source,
        })?;
        let addr = match role {
            Role::Voter => {
                let addr = config
                    .voters
                    .get(&config.node_id)
                    .cloned()
                    .unwrap_or_default();
                let configured_port = addr
                    .rsplit_once(':')
                    .and_then(|(_, p)| p.parse::<u16>().ok());
                if configured_port.is_some_and(|port| port != local_addr.port()) {
                    tracing::warn!(
                        node_id = config.node_id,
                        %addr,
                        %local_addr,
                        "this voter listens on another port than its voter entry: peers cannot reach it"
                    );
                }
                addr
            }
            Role::SingleNode | Role::Learner => config
                .advertised_addr
                .clone()
                .unwrap_or_else(|| local_addr.to_string()),
        };

        let log = LogStore::open(
            config.dir.join("log"),
            LogStoreOptions {
                segment_bytes: config.segment_bytes,
            },
        )
        .await?;
        let state_machine = StateMachineStore::open(config.dir.join("state")).await?;
        let images = state_machine.subscribe();
        let network = NetworkFactory {
            node_id: config.node_id,
        };
        let raft = Raft::new(config.node_id, raft_config, network, log, state_machine)
            .await
            .map_err(|e| NodeError::Raft(e.to_string()))?;

        let cancel = CancellationToken::new();
        let tracker = TaskTracker::new();
        let sessions = Arc::new(Sessions::default());
        let server = Server {
            raft: raft.clone(),
            images: images.clone(),
            sessions: sessions.clone(),
        };
        tracker.spawn(serve(listener, server, cancel.clone(), tracker.clone()));
        let quorum = Quorum {
            raft,
            addr: addr.clone(),
            rpc_timeout: config.rpc_timeout,
            cancel,
            images: images.clone(),
            sessions,
            kept: Arc::default(),
        };
        let node = MetadataNode {
            node_id: config.node_id,
            role,
            local_addr,
            quorum,
            images,
            tracker,
            propose_timeout: config.propose_timeout,
            shutdown_timeout: config.shutdown_timeout,
        };
        tracing::info!(
            node_id = config.node_id,
            ?role,
            %addr,
            %local_addr,
            dir = %config.dir.display(),
            "metadata node started"
        );

        let bootstrap = match role {
            Role::SingleNode => {
                node.initialize(BTreeMap::from([(config.node_id, QuorumNode::new(&addr))]))
                    .await
            }
            Role::Voter => {
                let voters = config
                    .voters
                    .iter()
                    .map(|(id, addr)| (*id, QuorumNode::new(addr)))
                    .collect();
                node.initialize(voters).await
            }
            Role::Learner => {
                let quorum = node.quorum.clone();
                let mut voters: Vec<String> = config.voters.values().cloned().collect();
                voters.extend(
                    config
                        .bootstrap_servers
                        .iter()
                        .filter(|s| !config.voters.values().any(|v| v == *s))
                        .cloned(),
                );
                let node_id = config.node_id;
                node.tracker
                    .spawn(async move { join_as_learner(quorum, node_id, addr, voters).await });
                Ok(())
            }
        };
        if let Err(error) = bootstrap {
            // Stop what was started before reporting the failure.
            if let Err(shutdown_error) = node.shutdown().await {
                tracing::warn!(
                    %shutdown_error,
                    "metadata node did not stop cleanly after a failed start"
                );
            }
            return Err(error);
        }
        Ok(node)
    }

    async fn initialize(&self, members: BTreeMap<u64, QuorumNode>) -> Result<(), NodeError> {
        let raft = &self.quorum.raft;
        let initialized = raft
            .is_initialized()
            .await
            .map_err(|e| NodeError::Raft(e.to_string()))?;
        if initialized {
            return Ok(());
        }
        match raft.initialize(members).await {
            Ok(()) => Ok(()),
            // Another voter's initialization (or ours, earlier) got there first.
            Err(RaftError::APIError(InitializeError::NotAllowed(_))) => Ok(()),
            Err(e) => Err(NodeError::Raft(e.to_string())),
        }
    }

    /// Commits `command` through the leader (forwarding it if this node does not lead) and
    /// returns the result every node computed. On success the local [`state`](Self::state)
    /// normally already reflects the command (the wait for it is bounded by the propose
    /// timeout).
    pub async fn propose(&self, command: Command) -> Result<Response, ProposeError> {
        let deadline = Instant::now() + self.propose_timeout;
        let name = command.name();
        let reply = self
            .quorum
            .execute(&LeaderOp::Propose(command), deadline)
            .await?;
        let LeaderReply::Proposed { log_index, result } = reply else {
            return Err(ProposeError::OutcomeUnknown(format!(
                "the leader answered {name} with a learner reply"
            )));
        };
        self.wait_applied(log_index, deadline).await;
        result.map_err(ProposeError::Rejected)
    }

    /// Commits `command` as this node's own decision as the leader of Raft term `term`: never
    /// forwarded. For the active controller's decisions (fencing, elections), which it
    /// computed from its view as leader: if this node does not lead in `term`, or loses the
    /// leadership before the entry commits (cut off, then superseded), the decision is stale
    /// and fails with [`ProposeError::NotLeaderInTerm`] instead of reaching the new leader.
    /// ([`propose`](Self::propose) would forward it once the new leader is known.) The entry
    /// may still commit under a later leader that holds it, as any Raft entry may.
    pub async fn propose_as_leader(
        &self,
        command: Command,
        term: u64,
    ) -> Result<Response, ProposeError> {
        let leads_in_term = {
            let metrics = self.quorum.raft.metrics();
            let m = metrics.borrow();
            m.current_term == term && m.current_leader == Some(self.node_id)
        };
        if !leads_in_term {
            return Err(ProposeError::NotLeaderInTerm(term));
        }
        let deadline = Instant::now() + self.propose_timeout;
        let name = command.name();
        let local =
            tokio::time::timeout_at(deadline, propose_on_leader(&self.quorum.raft, command))
                .await
                .map_err(|_| {
                    ProposeError::OutcomeUnknown(format!(
                        "{name} not committed within {:?}",
                        self.propose_timeout
                    ))
                })?;
        match local {
            Ok(LeaderReply::Proposed { log_index, result }) => {
                self.wait_applied(log_index, deadline).await;
                result.map_err(ProposeError::Rejected)
            }
            Ok(_) => Err(ProposeError::OutcomeUnknown(format!(
                "{name} answered with a learner reply"
            ))),
            Err(LeaderError::NotLeader { .. }) => Err(ProposeError::NotLeaderInTerm(term)),
            Err(LeaderError::ShuttingDown) => Err(ProposeError::ShuttingDown),
            Err(LeaderError::Failed(reason)) => Err(ProposeError::Refused(reason)),
        }
    }

    /// A broker heartbeat: the leader (this node, or the one it is forwarded to) checks `id`
    /// and `broker_epoch` against its state and records the time in memory; nothing is
    /// written to the log ([`crate::sessions`]). Answers [`Response::HeartbeatAccepted`]
    /// with whether the broker is fenced, or rejects a stale epoch or an unknown broker
    /// ([`ProposeError::Rejected`]), as the logged heartbeat did.
    pub async fn heartbeat(
        &self,
        id: BrokerId,
        broker_epoch: BrokerEpoch,
    ) -> Result<Response, ProposeError> {
        let deadline = Instant::now() + self.propose_timeout;
        let op = LeaderOp::Heartbeat { id, broker_epoch };
        match self.quorum.execute(&op, deadline).await? {
            LeaderReply::Heartbeat { result } => result.map_err(ProposeError::Rejected),
            other => Err(ProposeError::Refused(format!(
                "the leader answered a heartbeat with {other:?}"
            ))),
        }
    }

    /// When this node, as the active controller, last received a heartbeat of broker `id`
    /// (wall-clock ms on its clock); `None` if it never did.
    pub fn last_contact_ms(&self, id: BrokerId) -> Option<i64> {
        self.quorum.sessions.last_contact_ms(id)
    }

    /// Adds `node_id` as a learner reachable at `addr` (learners started with voters
    /// configured do this themselves).
    pub async fn add_learner(
        &self,
        node_id: u64,
        addr: impl Into<String>,
    ) -> Result<(), ProposeError> {
        let deadline = Instant::now() + self.propose_timeout;
        let op = LeaderOp::AddLearner {
            node_id,
            addr: addr.into(),
        };
        if let LeaderReply::LearnerAdded {
            log_index: Some(index),
        } = self.quorum.execute(&op, deadline).await?
        {
            self.wait_applied(index, deadline).await;
        }
        Ok(())
    }

    /// Kafka's AddRaftVoter: promotes learner `node_id`, whose metadata log dir has
    /// `directory_id`, to voter once it has caught up, within `timeout` ([`crate::voters`]).
    /// `endpoints` (`host:port`) must include where the learner serves the quorum.
    pub async fn add_voter(
        &self,
        node_id: u64,
        directory_id: Uuid128,
        endpoints: Vec<String>,
        timeout: Duration,
    ) -> Result<(), VoterChangeError> {
        let op = LeaderOp::AddVoter {
            node_id,
            directory_id,
            endpoints,
            timeout,
        };
        self.change_voters(op, timeout).await
    }

    /// Kafka's RemoveRaftVoter: demotes voter `node_id` with `directory_id` (zero for a voter
    /// whose directory id is not known) to learner ([`crate::voters`]).
    pub async fn remove_voter(
        &self,
        node_id: u64,
        directory_id: Uuid128,
    ) -> Result<(), VoterChangeError> {
        let op = LeaderOp::RemoveVoter {
            node_id,
            directory_id,
            timeout: self.propose_timeout,
        };
        self.change_voters(op, self.propose_timeout).await
    }

    /// Records this node's metadata log dir id in the membership (what Kafka's controllers
    /// send UpdateRaftVoter for). One attempt, bounded by the propose timeout; the caller
    /// retries a [`VoterChangeError::Quorum`] error.
    pub async fn report_directory_id(&self, directory_id: Uuid128) -> Result<(), VoterChangeError> {
        let op = LeaderOp::SetDirectory {
            node_id: self.node_id,
            directory_id,
        };
        self.change_voters(op, self.propose_timeout).await
    }

    async fn change_voters(&self, op: LeaderOp, timeout: Duration) -> Result<(), VoterChangeError> {
        // Time to find the leader, then the leader's own bound.
        let deadline = Instant::now() + timeout + self.quorum.rpc_timeout;
        match self.quorum.execute(&op, deadline).await {
            Ok(LeaderReply::VotersChanged(Ok(index))) => {
                self.wait_applied(index, deadline).await;
                Ok(())
            }
            Ok(LeaderReply::VotersChanged(Err(refusal))) => Err(VoterChangeError::Refused(refusal)),
            Ok(other) => Err(VoterChangeError::Quorum(ProposeError::OutcomeUnknown(
                format!("the leader answered a voter change with {other:?}"),
            ))),
            Err(error) => Err(VoterChangeError::Quorum(error)),
        }
    }

    /// The voters in force (committed or not), with their directory ids once known.
    pub fn voters(&self) -> Vec<(u64, Option<Uuid128>)> {
        let metrics = self.quorum.raft.metrics();
        let metrics = metrics.borrow();
        let membership = metrics.membership_config.membership();
        membership
            .voter_ids()
            .map(|id| (id, membership.get_node(&id).and_then(|n| n.directory_id)))
            .collect()
    }

    async fn wait_applied(&self, index: u64, deadline: Instant) {
        let mut images = self.images.clone();
        let reached = tokio::time::timeout_at(
            deadline,
            images.wait_for(|image| image.applied_index >= Some(index)),
        )
        .await;
        if !matches!(reached, Ok(Ok(_))) {
            tracing::debug!(index, "committed metadata entry not yet applied locally");
        }
    }

    /// The latest applied metadata state on this node.
    pub fn state(&self) -> Arc<MetadataState> {
        self.images.borrow().state.clone()
    }

    /// The latest applied state with its log index.
    pub fn image(&self) -> MetadataImage {
        self.images.borrow().clone()
    }

    /// A receiver notified of every applied state (the broker's metadata cache follows this).
    pub fn subscribe(&self) -> watch::Receiver<MetadataImage> {
        self.images.clone()
    }

    pub fn node_id(&self) -> u64 {
        self.node_id
    }

    pub fn role(&self) -> Role {
        self.role
    }

    /// The address peers reach this node at.
    pub fn addr(&self) -> &str {
        &self.quorum.addr
    }

    /// The address the RPC listener is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The current leader (the active controller), if known.
    pub fn leader(&self) -> Option<u64> {
        self.quorum.raft.metrics().borrow().current_leader
    }

    /// Whether this node is the active controller.
    pub fn is_leader(&self) -> bool {
        self.leader() == Some(self.node_id)
    }

    /// Waits until some leader is known, returning its id.
    pub async fn wait_for_leader(&self, timeout: Duration) -> Result<u64, ProposeError> {
        let mut metrics = self.quorum.raft.metrics();
        let found =
            tokio::time::timeout(timeout, metrics.wait_for(|m| m.current_leader.is_some())).await;
        match found {
            Ok(Ok(metrics)) => metrics
                .current_leader
                .ok_or(ProposeError::NoLeader(timeout)),
            Ok(Err(_)) => Err(ProposeError::ShuttingDown),
            Err(_) => Err(ProposeError::NoLeader(timeout)),
        }
    }

    /// Raft metrics (leader, term, log and applied indexes, membership, replication).
    pub fn metrics(&self) -> watch::Receiver<RaftMetrics<u64, QuorumNode>> {
        self.quorum.raft.metrics()
    }

    /// Stops the RPC server and background tasks, then Raft, and waits for all of them.
    pub async fn shutdown(self) -> Result<(), NodeError> {
        self.quorum.cancel.cancel();
        let limit = self.shutdown_timeout;
        let raft = tokio::time::timeout(limit, self.quorum.raft.shutdown()).await;
        self.tracker.close();
        let tasks = tokio::time::timeout(limit, self.tracker.wait()).await;
        tracing::info!(node_id = self.node_id, "metadata node stopped");
        match (raft, tasks) {
            (Ok(Ok(())), Ok(())) => Ok(()),
            (Ok(Err(join)), _) => Err(NodeError::Raft(format!("raft task failed: {join}"))),
            _ => Err(NodeError::ShutdownTimedOut(limit)),
        }
    }
}

impl Drop for MetadataNode {
    fn drop(&mut self) {
        self.quorum.cancel.cancel();
    }
}

/// Asks the voters to add this node as a learner until it is in the membership.
async fn join_as_learner(quorum: Quorum, node_id: u64, addr: String, voters: Vec<String>) {
    let request = LeaderOp::AddLearner {
        node_id,
        addr: addr.clone(),
    }
    .request();
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
    let mut attempts = 0u32;
    while !quorum.in_membership(node_id, &addr) {
        for voter in &voters {
            // Ask this voter; if it does not lead it names the leader, which is asked next.
            let mut target = voter.clone();
            for _hop in 0..2 {
                let mut client = RpcClient::new(&target);
                match client.call(&request, quorum.rpc_timeout).await {
                    Ok(RpcResponse::Leader(Ok(_))) => {
                        tracing::info!(node_id, %addr, "joined the metadata quorum as a learner");
                        return;
                    }
                    Ok(RpcResponse::Leader(Err(LeaderError::NotLeader {
                        leader_addr: Some(leader),
                        ..
                    }))) if leader != target => target = leader,
                    Ok(RpcResponse::Leader(Err(LeaderError::Failed(reason)))) => {
                        tracing::warn!(
                            node_id,
                            %reason,
                            "the metadata leader refused this learner"
                        );
                        break;
                    }
                    Ok(_) => break,
                    Err(error) => {
                        tracing::debug!(
                            node_id,
                            %target,
                            %error,
                            "cannot ask to join the metadata quorum"
                        );
                        break;
                    }
                }
            }
        }
        attempts += 1;
        if attempts % 20 == 0 {
            tracing::warn!(
                node_id,
                attempts,
                "still waiting to join the metadata quorum as a learner"
            );
        }
        if !backoff.wait(&quorum.cancel, None).await {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn voters_parse_from_kafka_syntax() {
        let voters =
            MetadataConfig::parse_voters("1@a:9093, 2@b.example:19093,3@[::1]:9093").unwrap();
        assert_eq!(voters.len(), 3);
        assert_eq!(voters[&2], "b.example:19093");
        assert_eq!(voters[&3], "[::1]:9093");
        assert!(MetadataConfig::parse_voters("").unwrap().is_empty());
        for bad in ["1", "x@a:1", "1@a", "1@a:port", "1@a:1,1@b:2"] {
            assert!(MetadataConfig::parse_voters(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn roles_follow_the_voter_list_and_bad_timings_are_refused() {
        let mut config = MetadataConfig::new(1, "/tmp/unused");
        assert_eq!(config.role().unwrap(), Role::SingleNode);
        config.voters = MetadataConfig::parse_voters("1@h:1,2@h:2").unwrap();
        assert_eq!(config.role().unwrap(), Role::Voter);
        config.node_id = 7;
        assert_eq!(config.role().unwrap(), Role::Learner);
        config.heartbeat_interval = config.election_timeout_min;
        assert!(matches!(config.role(), Err(NodeError::InvalidConfig(_))));
        let mut config = MetadataConfig::new(1, "/tmp/unused");
        config.election_timeout_max = config.election_timeout_min;
        assert!(config.role().is_err());
        assert!(config.raft_config().is_err());
    }
}
