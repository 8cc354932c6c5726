//! Cluster mode: the broker's side of the metadata quorum (`strata-metadata`), Kafka's
//! KRaft broker lifecycle and active controller.
//!
//! Cluster mode is on when `controller.quorum.voters` is set; without it nothing here runs and
//! the broker is the zero-config single node. A [`ClusterControl`] owns this node's
//! [`MetadataNode`] and:
//! - first settles the cluster id ([`ClusterControl::establish_cluster_id`]): the quorum's,
//!   set once by the first broker that proposes one, which every broker adopts (or refuses to
//!   start with, see [`crate::broker::ClusterIdError`]) before it registers;
//! - registers the broker (all its listeners, its rack, a fresh incarnation), then heartbeats
//!   every `broker.heartbeat.interval.ms` to the active controller, which keeps them in
//!   memory (`strata_metadata::sessions`); a heartbeat answered "fenced" (after a session
//!   expiry or a restart) makes the broker ask to be unfenced, since it has caught up with the
//!   log by then (it serves clients only after its first metadata sync);
//! - on the node that is the Raft leader (the active controller), fences brokers whose session
//!   expired, or sooner when a broker's heartbeat is late and its listener refuses
//!   connections (its process died: [`ClusterControl::dead_brokers`]), moves their partitions off them ([`placement::reelect_for_fenced_broker`]) and
//!   brings offline partitions back ([`placement::elect_offline_partitions`]) and, every
//!   `leader.imbalance.check.interval.seconds` (with `auto.leader.rebalance.enable`), moves
//!   leadership back to preferred replicas that are in the ISR and unfenced
//!   ([`placement::preferred_leader_elections`]). As in Kafka 4's KRaft controller every such
//!   partition is rebalanced (at most [`MAX_ELECTIONS_PER_IMBALANCE`] per check, continuing
//!   on the next tick when capped); `leader.imbalance.per.broker.percentage` is not used;
//! - serves ElectLeaders ([`ClusterControl::elect_leader`]);
//! - follows every applied metadata image ([`sync`]): the cluster view, the partition states
//!   (leader, epochs, replicas, ISR) of every partition, local topic creation and deletion and
//!   topic configs;
//! - implements [`IsrChangeSink`] by proposing `AlterPartition`;
//! - serves the metadata-changing admin requests (topics, partitions, topic configs) and
//!   producer-id blocks by proposing commands ([`admin`]), and partition reassignments
//!   ([`reassign`]; they complete inside the leader's `AlterPartition` apply, not in the
//!   controller loop).
//!
//! Concurrency and cancellation: the heartbeat, controller and sync loops are spawned by the
//! runtime on its service tracker and stop on its cancellation token; each proposal is bounded
//! by the node's propose timeout. Blocking work (applying states, creating or deleting logs)
//! runs on the blocking pool.
//!
//! Crash consistency: nothing here is persisted by the broker; the metadata log is the truth
//! and every restart re-applies it. Retries: a failed heartbeat, fence or election is retried
//! on the next tick; registration retries with a backoff until the previous incarnation's
//! session expired (Kafka's DUPLICATE_BROKER_REGISTRATION).
//!
//! The coordinators' topics (`__consumer_offsets`, `__transaction_state`) are created in the
//! quorum on the first FindCoordinator for them ([`ClusterControl::request_internal_topic`]),
//! replicated like any topic, and the coordinators follow their partitions' leadership.
//!
//! ACLs, SCRAM credentials and client quotas are quorum records ([`records`]); dynamic broker
//! configs (cluster-wide and per broker) are quorum configs.

pub mod admin;
pub mod reassign;
pub mod records;
pub mod restore;
pub mod sync;

use std::collections::HashSet;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use strata_metadata::command::{ElectionType, Endpoint};
use strata_metadata::ids::{BrokerEpoch, BrokerId, PartitionEpoch, Uuid128};
use strata_metadata::voters::VoterRefusal;
use strata_metadata::{
    placement, ApplyError, Command, MetadataConfig, MetadataNode, ProposeError, Response,
    VoterChangeError,
};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::clock::now_ms;
use crate::config::{BrokerConfig, ClusterConfig};
use crate::coordinator::internal_topics::InternalTopicSpec;
use crate::replication::{AlterPartitionError, AlterPartitionRequest, IsrChangeSink, LeaderAndIsr};

/// How many producer ids one `AllocateProducerIds` takes (Kafka's block size).
const PRODUCER_ID_BLOCK: u32 = 1000;

/// The most preferred-leader elections one rebalance check proposes (Kafka's
/// `MAX_ELECTIONS_PER_IMBALANCE`).
pub const MAX_ELECTIONS_PER_IMBALANCE: usize = 1000;

/// Why a cluster-mode operation failed; carries the Kafka error code to answer with.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClusterError {
    #[error(transparent)]
    Propose(#[from] ProposeError),
    #[error("the metadata node is stopped")]
    Stopped,
    #[error("the committed change did not reach this broker within {0:?}")]
    NotSynced(Duration),
    #[error("unexpected metadata response {0:?}")]
    UnexpectedResponse(String),
}

/// A catalog change the quorum refused or could not commit, with the code Kafka answers.
impl From<ClusterError> for crate::broker::TopicError {
    fn from(e: ClusterError) -> Self {
        crate::broker::TopicError::Quorum {
            code: e.kafka_error_code(),
            message: e.to_string(),
        }
    }
}

impl ClusterError {
    pub fn kafka_error_code(&self) -> i16 {
        match self {
            ClusterError::Propose(e) => e.kafka_error_code(),
            ClusterError::Stopped => strata_metadata::command::kafka_codes::NOT_CONTROLLER,
            ClusterError::NotSynced(_) => strata_metadata::command::kafka_codes::REQUEST_TIMED_OUT,
            ClusterError::UnexpectedResponse(_) => {
                strata_metadata::command::kafka_codes::UNKNOWN_SERVER_ERROR
            }
        }
    }

    pub fn is_retriable(&self) -> bool {
        match self {
            ClusterError::Propose(e) => e.is_retriable(),
            ClusterError::NotSynced(_) => true,
            ClusterError::Stopped | ClusterError::UnexpectedResponse(_) => false,
        }
    }
}

/// This broker's membership in the cluster: its metadata node, registration and loops.
pub struct ClusterControl {
    broker_id: BrokerId,
    node: Mutex<Option<Arc<MetadataNode>>>,
    incarnation: Uuid128,
    rack: Option<String>,
    endpoints: Vec<Endpoint>,
    /// `-1` until registered.
    broker_epoch: AtomicI64,
    session_timeout: Duration,
    heartbeat_interval: Duration,
    /// The broker-level `unclean.leader.election.enable` default.
    default_unclean: bool,
    /// The applied index the local broker has synced to (`None` before the first sync).
    synced: watch::Sender<Option<u64>>,
    producer_ids: tokio::sync::Mutex<(i64, i64)>,
    /// (Raft term, wall-clock ms) when this node last became the active controller.
    controller_since: Mutex<Option<(u64, i64)>>,
    /// Coordinator topics whose creation is being proposed (one proposal at a time each).
    internal_creations: Mutex<HashSet<&'static str>>,
    /// When "too few brokers for a coordinator topic" was last logged (ms), to log it rarely.
    internal_warned_ms: AtomicI64,
    /// `None` when `auto.leader.rebalance.enable` is false.
    leader_imbalance_check_interval: Option<Duration>,
    /// Wall-clock ms of the last completed leader rebalance check (0: none yet).
    last_rebalance_ms: AtomicI64,
    /// `strata.remote.cluster.restore.enable` (with tiered storage on): no coordinator topic
    /// is created before the quorum has decided the restore ([`restore`]).
    restore_from_bucket: bool,
}

impl ClusterControl {
    /// Starts the metadata node (binding its RPC listener) and waits for a leader.
    pub async fn start(
        config: &BrokerConfig,
        cluster: &ClusterConfig,
    ) -> anyhow::Result<Arc<ClusterControl>> {
        let mut meta = MetadataConfig::new(config.node_id as u64, &cluster.metadata_log_dir);
        meta.voters = cluster.voters.clone();
        meta.bootstrap_servers = cluster.bootstrap_servers.clone();
        meta.listen_addr = cluster.rpc_bind;
        meta.advertised_addr = Some(cluster.rpc_advertised.clone());
        let node = MetadataNode::start(meta).await?;
        let endpoints = config
            .listeners
            .iter()
            .map(|l| Endpoint {
                listener: l.name.clone(),
                host: l.advertised_host.clone(),
                port: l.advertised_port,
                security_protocol: protocol_name(l.security).to_string(),
            })
            .collect();
        let default_unclean = config
            .topic_defaults
            .get(placement::UNCLEAN_LEADER_ELECTION)
            .is_some_and(|(v, _)| v.trim().eq_ignore_ascii_case("true"));
        let (synced, _) = watch::channel(None);
        Ok(Arc::new(ClusterControl {
            broker_id: BrokerId(config.node_id),
            node: Mutex::new(Some(Arc::new(node))),
            incarnation: Uuid128::from_bytes(*uuid::Uuid::new_v4().as_bytes()),
            rack: config.rack.clone(),
            endpoints,
            broker_epoch: AtomicI64::new(-1),
            session_timeout: cluster.session_timeout,
            heartbeat_interval: cluster.heartbeat_interval,
            default_unclean,
            synced,
            producer_ids: tokio::sync::Mutex::new((0, 0)),
            controller_since: Mutex::new(None),
            internal_creations: Mutex::default(),
            internal_warned_ms: AtomicI64::new(i64::MIN),
            leader_imbalance_check_interval: cluster.leader_imbalance_check_interval,
            last_rebalance_ms: AtomicI64::new(0),
            restore_from_bucket: config.tiering.enabled && config.tiering.cluster_restore,
        }))
    }

    /// The running metadata node.
    pub fn node(&self) -> Result<Arc<MetadataNode>, ClusterError> {
        self.node
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or(ClusterError::Stopped)
    }

    /// Whether `strata.remote.cluster.restore.enable` is on (with tiered storage).
    pub fn restores_from_bucket(&self) -> bool {
        self.restore_from_bucket
    }

    pub fn broker_id(&self) -> i32 {
        self.broker_id.0
    }

    /// The active controller (the Raft leader of the metadata quorum) as this node last saw
    /// it; `None` while no leader is known (an election is under way or no quorum).
    pub fn active_controller(&self) -> Option<i32> {
        let leader = self.node().ok()?.leader()?;
        i32::try_from(leader).ok()
    }

    fn broker_epoch(&self) -> BrokerEpoch {
        BrokerEpoch(self.broker_epoch.load(Ordering::Acquire))
    }

    /// Proposes a command and returns the committed response with the applied index it is
    /// visible at locally.
    pub async fn propose(&self, command: Command) -> Result<(Response, u64), ClusterError> {
        let node = self.node()?;
        let response = node.propose(command).await?;
        let index = node.image().applied_index.unwrap_or(0);
        Ok((response, index))
    }

    /// Registers this broker, retrying while the previous incarnation is still live (its
    /// session has to expire first) or no leader is known, until `cancel`.
    pub async fn register(&self, cancel: &CancellationToken) -> Result<(), ClusterError> {
        let mut backoff = Duration::from_millis(100);
        loop {
            let command = Command::RegisterBroker {
                id: self.broker_id,
                incarnation: self.incarnation,
                rack: self.rack.clone(),
                endpoints: self.endpoints.clone(),
                now_ms: now_ms(),
            };
            match self.propose(command).await {
                Ok((Response::BrokerRegistered { broker_epoch }, _)) => {
                    self.broker_epoch.store(broker_epoch.0, Ordering::Release);
                    tracing::info!(
                        broker = self.broker_id.0,
                        broker_epoch = broker_epoch.0,
                        "registered with the metadata quorum"
                    );
                    return Ok(());
                }
                Ok((other, _)) => {
                    return Err(ClusterError::UnexpectedResponse(format!("{other:?}")));
                }
                Err(ClusterError::Propose(ProposeError::Rejected(
                    ApplyError::DuplicateBrokerRegistration { .. },
                ))) => {
                    tracing::info!(
                        broker = self.broker_id.0,
                        "a previous incarnation is still registered; waiting for its session to expire"
                    );
                }
                Err(e) if e.is_retriable() => {
                    tracing::info!(error = %e, "registration not committed yet; retrying");
                }
                Err(e) => return Err(e),
            }
            tokio::select! {
                _ = cancel.cancelled() => return Err(ClusterError::Stopped),
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(self.heartbeat_interval);
        }
    }

    /// The metadata quorum's cluster id: the one it holds, else `candidate` set with
    /// `SetClusterId` (set once: when another broker's candidate committed first, that one).
    /// Retries while no leader is known, until `cancel`; resending is safe, a second
    /// `SetClusterId` changes nothing.
    pub async fn establish_cluster_id(
        &self,
        candidate: &str,
        cancel: &CancellationToken,
    ) -> Result<String, ClusterError> {
        let mut backoff = Duration::from_millis(100);
        loop {
            // Set once: a value in the local state, however far behind, is final.
            if let Some(id) = self.node()?.state().cluster_id() {
                return Ok(id.to_string());
            }
            let command = Command::SetClusterId {
                cluster_id: candidate.to_string(),
            };
            match self.propose(command).await {
                Ok((
                    Response::ClusterId {
                        cluster_id,
                        newly_set,
                    },
                    _,
                )) => {
                    if newly_set {
                        tracing::info!(%cluster_id, "set the cluster id of a new metadata quorum");
                    }
                    return Ok(cluster_id);
                }
                Ok((other, _)) => {
                    return Err(ClusterError::UnexpectedResponse(format!("{other:?}")));
                }
                Err(e) if e.is_retriable() => {
                    tracing::info!(error = %e, "the cluster id is not committed yet; retrying");
                }
                Err(e) => return Err(e),
            }
            tokio::select! {
                _ = cancel.cancelled() => return Err(ClusterError::Stopped),
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(self.heartbeat_interval);
        }
    }

    /// Asks the controller to unfence this broker (it has caught up with the log).
    pub async fn unfence_self(&self) -> Result<(), ClusterError> {
        self.propose(Command::UnfenceBroker {
            id: self.broker_id,
            broker_epoch: self.broker_epoch(),
        })
        .await?;
        Ok(())
    }

    /// One heartbeat; re-registers when the quorum no longer knows this incarnation.
    async fn heartbeat(&self, cancel: &CancellationToken) -> Result<(), ClusterError> {
        let node = self.node()?;
        match node.heartbeat(self.broker_id, self.broker_epoch()).await {
            Ok(Response::HeartbeatAccepted { fenced: true }) => self.unfence_self().await,
            Ok(_) => Ok(()),
            Err(ProposeError::Rejected(
                ApplyError::StaleBrokerEpoch { .. } | ApplyError::BrokerNotRegistered(_),
            )) => {
                self.register(cancel).await?;
                self.unfence_self().await
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The heartbeat loop, until `cancel`.
    pub async fn run_heartbeats(self: Arc<Self>, cancel: CancellationToken) {
        let mut ticker = tokio::time::interval(self.heartbeat_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failures = 0u32;
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = ticker.tick() => {}
            }
            let result = tokio::select! {
                _ = cancel.cancelled() => return,
                r = self.heartbeat(&cancel) => r,
            };
            match result {
                Ok(()) => failures = 0,
                Err(e) => {
                    failures += 1;
                    if failures >= 3 {
                        tracing::warn!(error = %e, failures, "broker heartbeats are failing");
                    } else {
                        tracing::debug!(error = %e, "broker heartbeat failed");
                    }
                }
            }
        }
    }

    /// The active controller's loop: fencing expired sessions, moving partitions off fenced
    /// brokers and electing leaders of offline partitions. Runs on every node; acts only while
    /// this node is the Raft leader.
    pub async fn run_controller(self: Arc<Self>, cancel: CancellationToken) {
        // Often enough to notice a dead broker soon after its heartbeat is late.
        let every = (self.heartbeat_interval / 2)
            .clamp(Duration::from_millis(100), Duration::from_millis(500));
        let mut ticker = tokio::time::interval(every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = ticker.tick() => {}
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = self.controller_tick() => {}
            }
        }
    }

    async fn controller_tick(&self) {
        let Ok(node) = self.node() else { return };
        // Every decision below is this node's as the leader of `term`, and is committed only
        // while it still leads in that term (`propose_as_leader`): a leader that was cut off
        // sees every session expire, and must not have those fences forwarded to the new
        // leader once it can reach it again.
        let term = {
            let metrics = node.metrics();
            let m = metrics.borrow();
            if m.current_leader != Some(m.id) {
                return;
            }
            m.current_term
        };
        let now = now_ms();
        let since = {
            let mut since = self
                .controller_since
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            match *since {
                Some((t, at)) if t == term => at,
                _ => {
                    *since = Some((term, now));
                    now
                }
            }
        };
        let session_ms = i64::try_from(self.session_timeout.as_millis()).unwrap_or(i64::MAX);
        // Heartbeats are kept in the active controller's memory: as Kafka's new active
        // controller, this one gives every broker a full session from when it took over.
        let expired = node
            .state()
            .brokers_with_expired_session(now, session_ms, |id| {
                Some(node.last_contact_ms(id).unwrap_or(since).max(since))
            });
        let mut dead = self.dead_brokers(&node, now).await;
        dead.retain(|id| !expired.contains(id));
        let fences = expired
            .into_iter()
            .map(|id| (id, "broker session expired: fencing it"))
            .chain(dead.into_iter().map(|id| {
                (
                    id,
                    "broker missed its heartbeat and refuses connections: fencing it before its session expires",
                )
            }));
        for (id, why) in fences {
            tracing::info!(broker = id.0, "{why}");
            match node
                .propose_as_leader(Command::FenceBroker { id }, term)
                .await
            {
                Ok(_) => {}
                Err(ProposeError::NotLeaderInTerm(_)) => {
                    tracing::info!(
                        term,
                        "no longer the active controller: dropping this round's decisions"
                    );
                    return;
                }
                Err(e) => tracing::warn!(broker = id.0, error = %e, "fencing a broker failed"),
            }
        }
        // Partitions still led by (or with an ISR holding) a fenced broker, then offline ones.
        let state = node.state();
        let mut commands: Vec<Command> = state
            .brokers()
            .filter(|b| b.fenced)
            .flat_map(|b| placement::reelect_for_fenced_broker(&state, b.id, self.default_unclean))
            .collect();
        commands.extend(placement::elect_offline_partitions(
            &state,
            self.default_unclean,
        ));
        for command in commands {
            match node.propose_as_leader(command, term).await {
                Ok(_) => {}
                // Raced another change: recomputed from the newer state on the next tick.
                Err(ProposeError::Rejected(
                    ApplyError::InvalidUpdateVersion { .. } | ApplyError::FencedLeaderEpoch { .. },
                )) => {}
                Err(ProposeError::NotLeaderInTerm(_)) => return,
                Err(e) => tracing::warn!(error = %e, "a leader election was not committed"),
            }
        }
        self.maybe_rebalance_leaders(&node, now, since).await;
    }

    /// Kafka's automatic leader rebalance, once per check interval of this controller's term
    /// (the first one a full interval after it became active).
    async fn maybe_rebalance_leaders(&self, node: &MetadataNode, now: i64, since: i64) {
        let Some(interval) = self.leader_imbalance_check_interval else {
            return;
        };
        let interval_ms = i64::try_from(interval.as_millis()).unwrap_or(i64::MAX);
        let last = self.last_rebalance_ms.load(Ordering::Acquire).max(since);
        if now.saturating_sub(last) < interval_ms {
            return;
        }
        let commands =
            placement::preferred_leader_elections(&node.state(), MAX_ELECTIONS_PER_IMBALANCE);
        // Capped: the rest follow on the next tick, as Kafka reschedules immediately.
        if commands.len() < MAX_ELECTIONS_PER_IMBALANCE {
            self.last_rebalance_ms.store(now, Ordering::Release);
        }
        for command in commands {
            match node.propose(command).await {
                Ok(_) => tracing::debug!("moved leadership back to a preferred replica"),
                // The partition changed since the state was read; the next check sees it.
                Err(ProposeError::Rejected(
                    ApplyError::ElectionNotNeeded { .. }
                    | ApplyError::PreferredLeaderNotAvailable { .. },
                )) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "a preferred leader election was not committed")
                }
            }
        }
    }

    /// One partition's ElectLeaders election through the quorum; answers once the committed
    /// change has reached the local broker (so its Metadata shows the new leader), within
    /// `timeout`.
    pub async fn elect_leader(
        &self,
        topic_id: Uuid128,
        partition: u32,
        election: ElectionType,
        timeout: Duration,
    ) -> Result<(), ClusterError> {
        let work = async {
            let command = Command::ElectLeader {
                topic_id,
                partition,
                election,
            };
            let (_, index) = self.propose(command).await?;
            self.wait_synced(index, timeout).await
        };
        tokio::time::timeout(timeout, work)
            .await
            .unwrap_or(Err(ClusterError::NotSynced(timeout)))
    }

    /// Unfenced brokers whose heartbeat is late (over 1.5 heartbeat intervals since this
    /// controller last heard from them, or since their registration) and whose Kafka
    /// listener refuses connections. A process that died (crash, `kill -9`, OOM) has its ports
    /// closed by the kernel at once, so the controller fences it now rather than after
    /// `broker.session.timeout.ms` (Kafka always waits for the session). A paused, overloaded
    /// or partitioned broker still accepts connections or does not answer, and keeps its
    /// session as in Kafka. A new controller may fence this way at once: a refused connection
    /// does not depend on having received heartbeats.
    async fn dead_brokers(&self, node: &MetadataNode, now: i64) -> Vec<BrokerId> {
        const PROBE_TIMEOUT: Duration = Duration::from_millis(250);
        let late_ms =
            i64::try_from(self.heartbeat_interval.as_millis() * 3 / 2).unwrap_or(i64::MAX);
        let state = node.state();
        let probes = state
            .brokers()
            .filter(|b| {
                let heard = node
                    .last_contact_ms(b.id)
                    .map_or(b.last_heartbeat_ms, |t| t.max(b.last_heartbeat_ms));
                !b.fenced && b.id != self.broker_id && now.saturating_sub(heard) > late_ms
            })
            .filter_map(|b| {
                let e = b.endpoints.first()?;
                let addr = format!("{}:{}", e.host, e.port);
                let id = b.id;
                Some(async move {
                    let refused = matches!(
                        tokio::time::timeout(PROBE_TIMEOUT, tokio::net::TcpStream::connect(&addr)).await,
                        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused
                    );
                    refused.then_some(id)
                })
            });
        futures::future::join_all(probes)
            .await
            .into_iter()
            .flatten()
            .collect()
    }

    /// Waits until the local broker has synced the metadata image at `index` or later.
    pub async fn wait_synced(&self, index: u64, timeout: Duration) -> Result<(), ClusterError> {
        let mut rx = self.synced.subscribe();
        let reached = tokio::time::timeout(timeout, rx.wait_for(|s| s.is_some_and(|s| s >= index)))
            .await
            .map(|r| r.is_ok());
        match reached {
            Ok(true) => Ok(()),
            Ok(false) => Err(ClusterError::Stopped),
            Err(_) => Err(ClusterError::NotSynced(timeout)),
        }
    }

    pub(crate) fn mark_synced(&self, index: u64) {
        self.synced.send_replace(Some(index));
    }

    /// The next producer id, from this broker's block (a new block is committed when it runs
    /// out), so ids never collide across brokers.
    pub async fn allocate_producer_id(&self) -> Result<i64, ClusterError> {
        let mut ids = self.producer_ids.lock().await;
        if ids.0 >= ids.1 {
            let command = Command::AllocateProducerIds {
                broker: self.broker_id,
                broker_epoch: self.broker_epoch(),
                count: PRODUCER_ID_BLOCK,
            };
            match self.propose(command).await? {
                (Response::ProducerIdsAllocated(block), _) => {
                    *ids = (block.first.0, block.first.0 + i64::from(block.count));
                }
                (other, _) => return Err(ClusterError::UnexpectedResponse(format!("{other:?}"))),
            }
        }
        let id = ids.0;
        ids.0 += 1;
        Ok(id)
    }

    /// Makes sure the quorum has the coordinator topic `spec` names, as Kafka's
    /// `AutoTopicCreationManager` does on a FindCoordinator: returns at once, and a task
    /// proposes the topic unless it exists or a proposal for it is already running. With
    /// fewer unfenced brokers than its replication factor nothing is created (the caller
    /// answers COORDINATOR_NOT_AVAILABLE, and a later request tries again). Neither is it
    /// while a restore from the bucket is pending ([`restore`]): the restore brings the
    /// coordinators' topics back with their ids.
    pub fn request_internal_topic(self: &Arc<Self>, spec: InternalTopicSpec) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if let Ok(node) = self.node() {
            if restore::pending(self.restore_from_bucket, &node.state()) {
                return;
            }
        }
        if !self
            .internal_creations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(spec.name)
        {
            return;
        }
        let control = self.clone();
        // Bounded by the propose timeout.
        runtime.spawn(async move {
            let name = spec.name;
            match admin::create_internal_topic(&control, spec).await {
                Ok(true) => tracing::info!(topic = name, "created a coordinator topic"),
                Ok(false) => {}
                Err(e) => {
                    let now = now_ms();
                    let last = control.internal_warned_ms.load(Ordering::Relaxed);
                    if now.saturating_sub(last) >= 30_000 {
                        control.internal_warned_ms.store(now, Ordering::Relaxed);
                        tracing::warn!(topic = name, error = %e, "cannot create a coordinator topic yet");
                    }
                }
            }
            control
                .internal_creations
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(name);
        });
    }

    /// Controlled shutdown: fence this broker and move its partitions' leadership away while
    /// the quorum can still be reached (bounded by `limit`).
    pub async fn controlled_shutdown(&self, limit: Duration) {
        let work = async {
            self.propose(Command::FenceBroker { id: self.broker_id })
                .await?;
            let node = self.node()?;
            let commands = placement::reelect_for_fenced_broker(
                &node.state(),
                self.broker_id,
                self.default_unclean,
            );
            for command in commands {
                if let Err(e) = node.propose(command).await {
                    tracing::debug!(error = %e, "moving a partition off this broker failed");
                }
            }
            Ok::<_, ClusterError>(())
        };
        match tokio::time::timeout(limit, work).await {
            Ok(Ok(())) => tracing::info!("controlled shutdown: partitions moved off this broker"),
            Ok(Err(e)) => tracing::warn!(error = %e, "controlled shutdown failed"),
            Err(_) => tracing::warn!("controlled shutdown did not finish within {limit:?}"),
        }
    }

    /// Kafka's UnregisterBroker: fences broker `id`, moves leadership and ISR membership off
    /// it (as its controlled shutdown would), then forgets its registration, so the cluster
    /// stops listing a broker taken out of service. A broker still running registers again
    /// at its next heartbeat, as in Kafka. `Ok(false)` when no broker `id` is registered.
    pub async fn unregister_broker(&self, id: BrokerId) -> Result<bool, ClusterError> {
        let node = self.node()?;
        if node.state().broker(id).is_none() {
            return Ok(false);
        }
        self.propose(Command::FenceBroker { id }).await?;
        let moves = placement::reelect_for_fenced_broker(&node.state(), id, self.default_unclean);
        for command in moves {
            // One that raced another change is redone by the active controller's tick, which
            // moves partitions off fenced and unregistered brokers.
            if let Err(e) = node.propose(command).await {
                tracing::debug!(broker = id.0, error = %e, "moving a partition off an unregistered broker failed");
            }
        }
        match self.propose(Command::UnregisterBroker { id }).await {
            Ok(_) => {
                tracing::info!(broker = id.0, "unregistered a broker");
                Ok(true)
            }
            Err(ClusterError::Propose(ProposeError::Rejected(
                ApplyError::BrokerNotRegistered(_),
            ))) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Stops the metadata node (the last step of a broker's shutdown).
    /// Reports this node's metadata log dir id to the quorum's leader until it has it, the
    /// leader refuses it for good, or `cancel` fires. The node handle is not held between
    /// attempts, so shutdown never waits for this.
    pub async fn report_directory_id(
        self: Arc<Self>,
        directory_id: Uuid128,
        cancel: CancellationToken,
    ) {
        let mut backoff = Duration::from_millis(100);
        loop {
            let Ok(node) = self.node() else { return };
            let result = tokio::select! {
                _ = cancel.cancelled() => return,
                r = node.report_directory_id(directory_id) => r,
            };
            drop(node);
            match result {
                Ok(()) => {
                    tracing::info!(%directory_id, "the metadata quorum has this node's directory id");
                    return;
                }
                // Another voter change in flight: try again.
                Err(VoterChangeError::Refused(VoterRefusal::TimedOut(reason))) => {
                    tracing::debug!(%reason, "the directory id waits for another voter change");
                }
                Err(VoterChangeError::Refused(refusal)) => {
                    tracing::warn!(%refusal, "the metadata quorum refused this node's directory id");
                    return;
                }
                Err(VoterChangeError::Quorum(error)) => {
                    tracing::debug!(%error, "cannot report the directory id yet; retrying");
                }
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    }

    /// `controller.quorum.auto.join.enable` (KIP-1186): while this node is not a voter, it
    /// asks the leader to add it (as AddRaftVoter would) once it has caught up, until it is
    /// one or `cancel` fires. Run after its directory id is reported.
    pub async fn join_as_voter(self: Arc<Self>, directory_id: Uuid128, cancel: CancellationToken) {
        let me = self.broker_id.0 as u64;
        let mut backoff = Duration::from_millis(500);
        loop {
            let Ok(node) = self.node() else { return };
            if node.voters().iter().any(|(id, _)| *id == me) {
                return;
            }
            let addr = node.addr().to_string();
            let result = tokio::select! {
                _ = cancel.cancelled() => return,
                r = node.add_voter(me, directory_id, vec![addr], Duration::from_secs(30)) => r,
            };
            drop(node);
            match result {
                Ok(()) | Err(VoterChangeError::Refused(VoterRefusal::Duplicate(_))) => {
                    tracing::info!("this node joined the metadata quorum's voters");
                    return;
                }
                Err(e) => tracing::info!(error = %e, "cannot join the voters yet; retrying"),
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(Duration::from_secs(10));
        }
    }

    pub async fn shutdown(&self, limit: Duration) {
        let Some(mut node) = self.node.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return;
        };
        // In-flight proposals hold a handle for at most their timeout.
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            match Arc::try_unwrap(node) {
                Ok(owned) => {
                    if let Err(e) = owned.shutdown().await {
                        tracing::warn!(error = %e, "metadata node did not stop cleanly");
                    }
                    return;
                }
                Err(shared) if tokio::time::Instant::now() < deadline => {
                    node = shared;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(_) => {
                    tracing::warn!("metadata node still in use after {limit:?}; dropping it");
                    return;
                }
            }
        }
    }
}

fn protocol_name(p: crate::config::SecurityProtocol) -> &'static str {
    use crate::config::SecurityProtocol;
    match p {
        SecurityProtocol::Plaintext => "PLAINTEXT",
        SecurityProtocol::Ssl => "SSL",
        SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
        SecurityProtocol::SaslSsl => "SASL_SSL",
    }
}

/// Maps a refused `AlterPartition` to the data plane's error.
fn alter_partition_error(e: ClusterError) -> AlterPartitionError {
    match e {
        ClusterError::Propose(ProposeError::Rejected(rejection)) => match rejection {
            ApplyError::FencedLeaderEpoch { .. } => AlterPartitionError::FencedLeaderEpoch,
            ApplyError::InvalidUpdateVersion { .. } => AlterPartitionError::InvalidUpdateVersion,
            ApplyError::UnknownTopicId(_)
            | ApplyError::UnknownTopic(_)
            | ApplyError::UnknownPartition { .. } => AlterPartitionError::UnknownTopicOrPartition,
            // INVALID_REQUEST or INELIGIBLE_REPLICA (a fenced broker proposed into the ISR):
            // the leader keeps its ISR and proposes again on a later fetch.
            _ => AlterPartitionError::InvalidRequest,
        },
        other => AlterPartitionError::Unavailable(other.to_string()),
    }
}

/// Proposes a leader's ISR changes through the quorum.
pub struct QuorumIsrSink {
    pub control: Arc<ClusterControl>,
}

impl IsrChangeSink for QuorumIsrSink {
    fn alter_partition(
        &self,
        request: AlterPartitionRequest,
    ) -> BoxFuture<'static, Result<LeaderAndIsr, AlterPartitionError>> {
        let control = self.control.clone();
        Box::pin(async move {
            let Ok(partition) = u32::try_from(request.partition) else {
                return Err(AlterPartitionError::UnknownTopicOrPartition);
            };
            let command = Command::AlterPartition {
                topic_id: Uuid128::from_bytes(*request.topic_id.as_bytes()),
                partition,
                leader: Some(control.broker_id),
                leader_epoch: request.leader_epoch,
                isr: request.new_isr.iter().map(|id| BrokerId(*id)).collect(),
                partition_epoch: PartitionEpoch(request.partition_epoch),
            };
            match control.propose(command).await {
                Ok((
                    Response::PartitionAltered {
                        leader,
                        leader_epoch,
                        partition_epoch,
                    },
                    _,
                )) => Ok(LeaderAndIsr {
                    leader: leader.map(|b| b.0),
                    leader_epoch,
                    isr: request.new_isr.clone(),
                    partition_epoch: partition_epoch.0,
                }),
                Ok((other, _)) => Err(AlterPartitionError::Unavailable(format!(
                    "unexpected metadata response {other:?}"
                ))),
                Err(e) => Err(alter_partition_error(e)),
            }
        })
    }
}
