//! Replica fetchers: one task per leader broker, fetching every partition this broker follows
//! from it over one connection with the Fetch API (v16, sessionless), as Kafka's
//! `ReplicaFetcherThread` does.
//!
//! Each round sends, per partition, the follower's log end offset as the fetch offset and the
//! latest epoch of its leader epoch cache as `last_fetched_epoch`; the leader answers with
//! records, its high watermark and log start offset, or a diverging epoch (KIP-320), on which
//! the follower truncates to the end of the largest epoch both logs share and fetches again.
//!
//! Connections use the inter-broker listener's security (TLS, SASL; see [`super::peer`]).
//!
//! Errors: an unreachable leader is retried with `replica.fetch.backoff.ms` (an
//! authentication failure too, logged as an error: it needs a configuration fix);
//! NOT_LEADER_OR_FOLLOWER and UNKNOWN_LEADER_EPOCH pause the partition for the backoff;
//! FENCED_LEADER_EPOCH pauses it until the control plane applies a newer state;
//! OFFSET_OUT_OF_RANGE asks the leader's log end and start offsets (ListOffsets) and truncates
//! or restarts the log there. Cancellation stops a fetcher between requests or while waiting.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ReplicaState};
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{FetchRequest, FetchResponse, ListOffsetsRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use crate::broker::{Broker, LeaderEpoch, Offset, Partition, Role};
use crate::log::AppendError;
use crate::peer::{PeerConnection, PeerError};
use crate::tiering::Tiering;

/// The Fetch version followers send (replica_state, topic ids, KIP-951 fields).
const FETCH_VERSION: i16 = 16;
/// The ListOffsets version followers send: EARLIEST_LOCAL (-4) needs v8 (KIP-405), and a
/// leader refuses a special timestamp below the version that introduced it, as Kafka does.
const LIST_OFFSETS_VERSION: i16 = 9;
const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const EARLIEST_LOCAL: i64 = -4;

struct RunningFetcher {
    address: (String, u16),
    partitions: watch::Sender<Vec<Arc<Partition>>>,
    cancel: CancellationToken,
}

/// Keeps one fetcher per leader this broker follows partitions of, until `shutdown`.
/// Fetches below a leader's local log start read `tiering`'s remote segments.
pub async fn manage(
    broker: Arc<Broker>,
    tiering: Option<Arc<Tiering>>,
    shutdown: CancellationToken,
) {
    let tasks = TaskTracker::new();
    let mut fetchers: HashMap<i32, RunningFetcher> = HashMap::new();
    loop {
        reconcile(&broker, &tiering, &mut fetchers, &tasks, &shutdown);
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = broker.replication().follow_changed.notified() => {}
        }
    }
    for f in fetchers.values() {
        f.cancel.cancel();
    }
    tasks.close();
    tasks.wait().await;
}

/// The address of `leader` on the inter-broker listener (or its first listener).
pub(crate) fn leader_address(broker: &Broker, leader: i32) -> Option<(String, u16)> {
    let b = broker.replication().cluster_broker(leader)?;
    let e = match &broker.config.replication.inter_broker_listener_name {
        Some(name) => b.endpoint(name)?,
        None => b
            .endpoint(&broker.config.listeners[0].name)
            .or(b.endpoints.first())?,
    };
    Some((e.host.clone(), e.port))
}

fn reconcile(
    broker: &Arc<Broker>,
    tiering: &Option<Arc<Tiering>>,
    fetchers: &mut HashMap<i32, RunningFetcher>,
    tasks: &TaskTracker,
    shutdown: &CancellationToken,
) {
    let mut wanted: HashMap<i32, Vec<Arc<Partition>>> = HashMap::new();
    for p in broker.all_partitions() {
        if p.is_replicated() && p.role() == Role::Follower {
            if let (Some(leader), _) = p.leader_and_epoch() {
                wanted.entry(leader).or_default().push(p);
            }
        }
    }
    fetchers.retain(|leader, f| {
        let keep = wanted.contains_key(leader)
            && leader_address(broker, *leader).as_ref() == Some(&f.address);
        if !keep {
            f.cancel.cancel();
        }
        keep
    });
    for (leader, partitions) in wanted {
        if let Some(f) = fetchers.get(&leader) {
            f.partitions.send_replace(partitions);
            continue;
        }
        let Some(address) = leader_address(broker, leader) else {
            tracing::warn!(
                leader,
                "no endpoint known for the leader: cannot fetch from it"
            );
            continue;
        };
        let (tx, rx) = watch::channel(partitions);
        let cancel = shutdown.child_token();
        tracing::info!(leader, host = %address.0, port = address.1, "starting replica fetcher");
        tasks.spawn(
            Fetcher {
                broker: broker.clone(),
                tiering: tiering.clone(),
                leader,
                address: address.clone(),
                partitions: rx,
                cancel: cancel.clone(),
                paused: HashMap::new(),
                failures: 0,
                denials: 0,
                round: 0,
            }
            .run(),
        );
        fetchers.insert(
            leader,
            RunningFetcher {
                address,
                partitions: tx,
                cancel,
            },
        );
    }
}

/// Why a partition is not fetched for now.
#[derive(Debug, Clone, Copy)]
enum Pause {
    /// Until this time (transient errors), at this leader epoch.
    Until(Instant, LeaderEpoch),
    /// Until the control plane applies another leader epoch (fenced).
    EpochChange(LeaderEpoch),
}

struct Target {
    partition: Arc<Partition>,
    leader_epoch: LeaderEpoch,
    fetch_offset: Offset,
    /// A throttled replica outside the ISR: its bytes count against this broker's
    /// `follower.replication.throttled.rate` (KIP-73).
    throttled: bool,
}

/// What to do after processing one partition of a fetch response.
enum Next {
    Continue,
    Pause(Pause),
    OutOfRange,
    /// OFFSET_MOVED_TO_TIERED_STORAGE: the fetch offset is below the leader's local log start.
    MovedToTieredStorage,
    /// TOPIC_AUTHORIZATION_FAILED: what a leader answers a follower whose principal lacks
    /// CLUSTER_ACTION (Kafka's rule); paused like other errors, reported as a person's job.
    Denied(Pause),
}

struct Fetcher {
    broker: Arc<Broker>,
    tiering: Option<Arc<Tiering>>,
    leader: i32,
    address: (String, u16),
    partitions: watch::Receiver<Vec<Arc<Partition>>>,
    cancel: CancellationToken,
    paused: HashMap<(Uuid, i32), Pause>,
    /// Consecutive failed requests (quiet logging first, louder if they persist).
    failures: u32,
    /// Consecutive responses refusing partitions for authorization.
    denials: u32,
    /// Rotates the order of partitions in requests: only the first partition with data may
    /// exceed its byte limit (KIP-74), so every partition gets to be first in turn.
    round: usize,
}

impl Fetcher {
    async fn run(mut self) {
        let mut conn: Option<PeerConnection> = None;
        while !self.cancel.is_cancelled() {
            let targets = self.targets();
            if targets.is_empty() {
                let wait = self.next_unpause().unwrap_or(Duration::from_secs(1));
                tokio::select! {
                    _ = self.cancel.cancelled() => return,
                    _ = self.partitions.changed() => {}
                    _ = tokio::time::sleep(wait) => {}
                }
                continue;
            }
            let connection = match conn.as_mut() {
                Some(c) => c,
                None => match tokio::select! {
                    _ = self.cancel.cancelled() => return,
                    c = self.connect() => c,
                } {
                    Ok(c) => conn.insert(c),
                    Err(e) => {
                        self.failed(&e);
                        self.backoff().await;
                        continue;
                    }
                },
            };
            let request = self.fetch_request(&targets);
            let timeout = self.broker.config.replication.fetch_wait_max
                + self.broker.config.replication.socket_timeout;
            let response = tokio::select! {
                _ = self.cancel.cancelled() => return,
                r = connection.call(FETCH_VERSION, &request, timeout) => r,
            };
            let response = match response {
                Ok(r) => r,
                Err(e) => {
                    conn = None;
                    self.failed(&e);
                    self.backoff().await;
                    continue;
                }
            };
            if response.error_code != 0 {
                let error = ResponseError::try_from_code(response.error_code);
                self.failures += 1;
                tracing::info!(leader = self.leader, error = ?error, "fetch refused by the leader");
                self.backoff().await;
                continue;
            }
            self.failures = 0;
            let out_of_range = self.process(targets, response).await;
            for (target, tiered) in out_of_range {
                let Some(c) = conn.as_mut() else { break };
                let cancel = self.cancel.clone();
                let reset = tokio::select! {
                    _ = cancel.cancelled() => return,
                    r = async {
                        if tiered {
                            self.reset_to_tiered(c, &target).await
                        } else {
                            self.reset_out_of_range(c, &target).await
                        }
                    } => r,
                };
                if let Err(e) = reset {
                    conn = None;
                    self.failed(&e);
                }
            }
        }
    }

    fn failed(&mut self, e: &PeerError) {
        self.failures += 1;
        if e.is_authentication() {
            // Credentials or certificates: retrying will not help until someone fixes them.
            if self.failures == 1 || self.failures % 100 == 0 {
                tracing::error!(leader = self.leader, error = %e, failures = self.failures, listener = %self.broker.config.replication.inter_broker.listener, "replica fetcher cannot authenticate to the leader: this broker does not replicate from it; check the inter-broker listener's TLS and SASL settings");
            }
        } else if self.failures <= 3 {
            tracing::debug!(leader = self.leader, error = %e, "replica fetch failed; retrying");
        } else if self.failures % 10 == 4 {
            tracing::warn!(leader = self.leader, error = %e, failures = self.failures, "replica fetch keeps failing");
        }
    }

    async fn backoff(&self) {
        tokio::select! {
            _ = self.cancel.cancelled() => {}
            _ = tokio::time::sleep(self.broker.config.replication.fetch_backoff) => {}
        }
    }

    async fn connect(&self) -> Result<PeerConnection, PeerError> {
        self.broker
            .replication()
            .peers
            .connect(
                &self.address.0,
                self.address.1,
                format!("broker-{}-fetcher-0", self.broker.config.node_id),
                self.broker.config.replication.socket_timeout,
            )
            .await
    }

    /// The followed partitions not paused, with their fetch positions. A throttled replica
    /// outside the ISR is left out while the follower throttle is exceeded.
    fn targets(&mut self) -> Vec<Target> {
        let now = Instant::now();
        let throttle = &self.broker.replication().throttles.follower;
        let throttling = throttle.limit() != i64::MAX;
        let exceeded = throttling && throttle.is_exceeded(crate::clock::now_ms());
        let me = self.broker.config.node_id;
        let partitions = self.partitions.borrow_and_update().clone();
        self.paused
            .retain(|key, _| partitions.iter().any(|p| (p.topic_id, p.index) == *key));
        let mut out = Vec::with_capacity(partitions.len());
        for p in partitions {
            let (leader, epoch) = p.leader_and_epoch();
            if p.role() != Role::Follower || leader != Some(self.leader) {
                continue;
            }
            let key = (p.topic_id, p.index);
            match self.paused.get(&key) {
                Some(Pause::Until(t, e)) if *t > now && *e == epoch => continue,
                Some(Pause::EpochChange(e)) if *e == epoch => continue,
                Some(_) => {
                    self.paused.remove(&key);
                }
                None => {}
            }
            let throttled = throttling
                && self
                    .broker
                    .topic(&p.topic)
                    .is_some_and(|t| t.config.follower_throttled.includes(p.index, me))
                && !p.in_isr(me);
            if throttled && exceeded {
                continue;
            }
            out.push(Target {
                fetch_offset: p.offsets().log_end_offset,
                leader_epoch: epoch,
                partition: p,
                throttled,
            });
        }
        if !out.is_empty() {
            self.round = self.round.wrapping_add(1);
            let n = out.len();
            out.rotate_left(self.round % n);
        }
        out
    }

    fn next_unpause(&self) -> Option<Duration> {
        let now = Instant::now();
        self.paused
            .values()
            .filter_map(|p| match p {
                Pause::Until(t, _) => Some(t.saturating_duration_since(now)),
                Pause::EpochChange(_) => None,
            })
            .min()
    }

    fn fetch_request(&self, targets: &[Target]) -> FetchRequest {
        let c = &self.broker.config.replication;
        let mut topics: Vec<FetchTopic> = Vec::new();
        for t in targets {
            let p = &t.partition;
            let last_fetched_epoch = p.latest_epoch().unwrap_or(-1);
            let fp = FetchPartition::default()
                .with_partition(p.index)
                .with_current_leader_epoch(t.leader_epoch.0)
                .with_fetch_offset(t.fetch_offset.0)
                .with_last_fetched_epoch(last_fetched_epoch)
                .with_log_start_offset(p.offsets().log_start_offset.0)
                .with_partition_max_bytes(c.fetch_max_bytes);
            match topics.iter_mut().find(|x| x.topic_id == p.topic_id) {
                Some(x) => x.partitions.push(fp),
                None => topics.push(
                    FetchTopic::default()
                        .with_topic_id(p.topic_id)
                        .with_topic(TopicName(StrBytes::from_string(p.topic.clone())))
                        .with_partitions(vec![fp]),
                ),
            }
        }
        FetchRequest::default()
            .with_replica_state(
                ReplicaState::default().with_replica_id(self.broker.config.node_id.into()),
            )
            .with_max_wait_ms(c.fetch_wait_max.as_millis().min(i32::MAX as u128) as i32)
            .with_min_bytes(c.fetch_min_bytes)
            .with_max_bytes(c.fetch_response_max_bytes)
            .with_isolation_level(0)
            .with_session_id(0)
            .with_session_epoch(-1)
            .with_topics(topics)
    }

    /// Applies a fetch response; returns the partitions whose offset was out of range (with
    /// `true` where it moved to tiered storage).
    async fn process(
        &mut self,
        targets: Vec<Target>,
        response: FetchResponse,
    ) -> Vec<(Target, bool)> {
        let mut by_key: HashMap<(Uuid, i32), Target> = targets
            .into_iter()
            .map(|t| ((t.partition.topic_id, t.partition.index), t))
            .collect();
        let mut work = Vec::new();
        for topic in response.responses {
            for data in topic.partitions {
                if let Some(t) = by_key.remove(&(topic.topic_id, data.partition_index)) {
                    if t.throttled {
                        let bytes = data.records.as_ref().map_or(0, |r| r.len());
                        self.broker
                            .replication()
                            .throttles
                            .follower
                            .record(bytes, crate::clock::now_ms());
                    }
                    work.push((t, data));
                }
            }
        }
        let backoff = self.broker.config.replication.fetch_backoff;
        let leader = self.leader;
        // Appends that only write the page cache happen here; the rest (a roll, a flush, a
        // new epoch, a truncation, a locked log) on a blocking thread.
        let mut results = Vec::with_capacity(work.len());
        let mut left = Vec::new();
        for (t, data) in work {
            match try_apply_partition_data(&t, data, leader, backoff) {
                Ok(next) => results.push((t, next)),
                Err(rest) => left.push((t, rest)),
            }
        }
        if !left.is_empty() {
            let applied = crate::blocking::run(move || {
                left.into_iter()
                    .map(|(t, rest)| {
                        let next = apply_partition_data(&t, rest, leader, backoff);
                        (t, next)
                    })
                    .collect::<Vec<_>>()
            })
            .await;
            match applied {
                Ok(applied) => results.extend(applied),
                Err(_) => {
                    tracing::error!(leader = self.leader, "applying a fetch response panicked")
                }
            }
        }
        let mut out_of_range = Vec::new();
        let mut denied = 0;
        for (t, next) in results {
            match next {
                Next::Continue => {}
                Next::Pause(p) => {
                    self.paused
                        .insert((t.partition.topic_id, t.partition.index), p);
                }
                Next::Denied(p) => {
                    denied += 1;
                    self.paused
                        .insert((t.partition.topic_id, t.partition.index), p);
                }
                Next::OutOfRange => out_of_range.push((t, false)),
                Next::MovedToTieredStorage => out_of_range.push((t, true)),
            }
        }
        if denied == 0 {
            self.denials = 0;
        } else {
            self.denials += 1;
            if self.denials == 1 || self.denials % 100 == 0 {
                tracing::error!(leader = self.leader, partitions = denied, listener = %self.broker.config.replication.inter_broker.listener, "the leader refuses this broker's fetches (TOPIC_AUTHORIZATION_FAILED): its inter-broker principal needs CLUSTER_ACTION on the cluster, usually through super.users=User:<broker principal>");
            }
        }
        out_of_range
    }

    /// Kafka's `fetchOffsetAndTruncate`: the leader's log ends before ours (truncate there) or
    /// starts after it (restart our log at the leader's start).
    async fn reset_out_of_range(
        &mut self,
        conn: &mut PeerConnection,
        target: &Target,
    ) -> Result<(), PeerError> {
        let p = target.partition.clone();
        let leader_end = self
            .list_offset(conn, &p, target.leader_epoch, LATEST)
            .await?;
        let leader_start = self
            .list_offset(conn, &p, target.leader_epoch, EARLIEST)
            .await?;
        let (Some(leader_end), Some(leader_start)) = (leader_end, leader_start) else {
            self.paused.insert(
                (p.topic_id, p.index),
                Pause::Until(
                    Instant::now() + self.broker.config.replication.fetch_backoff,
                    target.leader_epoch,
                ),
            );
            return Ok(());
        };
        let epoch = target.leader_epoch;
        let result = crate::blocking::run(move || -> Result<(), AppendError> {
            let end = p.offsets().log_end_offset;
            if leader_end < end {
                tracing::warn!(topic = %p.topic, partition = p.index, %leader_end, %end, "leader's log ends before ours: truncating");
                p.truncate_to(epoch, leader_end)?;
            } else if end < leader_start {
                p.truncate_fully_and_start_at(epoch, leader_start)?;
            }
            Ok(())
        })
        .await;
        match result {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::info!(topic = %target.partition.topic, partition = target.partition.index, error = %e, "cannot reset out-of-range follower")
            }
            Err(_) => tracing::error!("resetting an out-of-range follower panicked"),
        }
        Ok(())
    }

    /// Kafka's `ReplicaFetcherTierStateMachine`: the leader deleted the local copy of what
    /// this follower needs next, which is in remote storage. Restart the local log at the
    /// leader's local log start, with the leader's log start offset, and the leader epochs and
    /// producer state from the remote segment that ends there (read from the bucket, which
    /// this broker shares). The follower then fetches only what the leader still has locally.
    /// When the manifest does not (yet) cover the leader's local start, the partition backs
    /// off and the next fetch tries again.
    async fn reset_to_tiered(
        &mut self,
        conn: &mut PeerConnection,
        target: &Target,
    ) -> Result<(), PeerError> {
        let p = target.partition.clone();
        let key = (p.topic_id, p.index);
        let backoff = Pause::Until(
            Instant::now() + self.broker.config.replication.fetch_backoff,
            target.leader_epoch,
        );
        let local_start = self
            .list_offset(conn, &p, target.leader_epoch, EARLIEST_LOCAL)
            .await?;
        let log_start = self
            .list_offset(conn, &p, target.leader_epoch, EARLIEST)
            .await?;
        let (Some(local_start), Some(log_start)) = (local_start, log_start) else {
            self.paused.insert(key, backoff);
            return Ok(());
        };
        let state = match self.remote_state_at(&p, local_start.0).await {
            Ok(s) => s,
            Err(e) => {
                tracing::info!(topic = %p.topic, partition = p.index, %local_start, error = %e, "cannot rebuild the follower state from remote storage yet; will retry");
                self.paused.insert(key, backoff);
                return Ok(());
            }
        };
        let epoch = target.leader_epoch;
        let result = crate::blocking::run(move || {
            p.start_at_tiered(
                epoch,
                log_start,
                local_start,
                &state.epochs,
                state.producer_snapshot.as_deref(),
            )
        })
        .await;
        match result {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                report_append_error(&target.partition, &e);
                self.paused.insert(key, backoff);
            }
            Err(_) => tracing::error!("restarting a follower at the leader's local start panicked"),
        }
        Ok(())
    }

    /// Leader epochs and producer state at `local_start` from the partition's manifest: from
    /// the remote segment ending at `local_start` or, when the leader's local segments do not
    /// line up with the remote ones (right after a leadership change), the one holding
    /// `local_start - 1` (its producer state is then that of its own end).
    async fn remote_state_at(
        &self,
        p: &Partition,
        local_start: i64,
    ) -> Result<RemoteState, crate::tiering::RemoteReadError> {
        use crate::tiering::RemoteReadError;
        let (Some(tiering), Some(topic)) = (self.tiering.as_ref(), self.broker.topic(&p.topic))
        else {
            return Err(RemoteReadError::OutOfRange(local_start));
        };
        let tp = tiering.partition(&topic, p.index).await?;
        let manifest = tp.refresh(&tiering.store).await?;
        let Some(seg) = manifest
            .segments
            .iter()
            .find(|s| s.next_offset == local_start)
            .or_else(|| manifest.segment_for(local_start - 1))
        else {
            return Err(RemoteReadError::OutOfRange(local_start - 1));
        };
        let epochs = match seg.leader_epoch_checkpoint {
            Some(part) => {
                let raw = tiering.reader.part(&topic.name, seg, part).await?;
                crate::log::leader_epoch::parse_checkpoint(&raw)
            }
            None => Vec::new(),
        };
        let producer_snapshot = match seg.producer_snapshot {
            Some(part) => Some(tiering.reader.part(&topic.name, seg, part).await?),
            None => None,
        };
        if seg.next_offset != local_start {
            tracing::info!(topic = %p.topic, partition = p.index, local_start, remote_segment_end = seg.next_offset, "the leader's local start is inside a remote segment; taking its producer state");
        }
        Ok(RemoteState {
            epochs,
            producer_snapshot,
        })
    }

    /// The leader's offset for `timestamp` (-1 latest = its log end, -2 earliest), or `None`
    /// when the leader refuses (the partition is paused then).
    async fn list_offset(
        &self,
        conn: &mut PeerConnection,
        p: &Partition,
        leader_epoch: LeaderEpoch,
        timestamp: i64,
    ) -> Result<Option<Offset>, PeerError> {
        let request = ListOffsetsRequest::default()
            .with_replica_id(self.broker.config.node_id.into())
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(TopicName(StrBytes::from_string(p.topic.clone())))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(p.index)
                    .with_current_leader_epoch(leader_epoch.0)
                    .with_timestamp(timestamp)])]);
        let response = conn
            .call(
                LIST_OFFSETS_VERSION,
                &request,
                self.broker.config.replication.socket_timeout,
            )
            .await?;
        let answer = response
            .topics
            .into_iter()
            .flat_map(|t| t.partitions)
            .find(|x| x.partition_index == p.index);
        Ok(answer
            .filter(|a| a.error_code == 0)
            .map(|a| Offset(a.offset)))
    }
}

/// What a follower restarting at the leader's local log start takes from remote storage.
struct RemoteState {
    epochs: Vec<(i32, i64)>,
    producer_snapshot: Option<bytes::Bytes>,
}

/// Where a follower truncates on a diverging epoch from the leader (Kafka's
/// `getOffsetTruncationState`). `follower_end_for_epoch` is the follower's own
/// `endOffsetFor(leader_epoch)`.
pub fn truncation_offset(
    diverging_epoch: i32,
    diverging_end_offset: i64,
    follower_log_end_offset: i64,
    follower_high_watermark: i64,
    follower_end_for_epoch: (i32, i64),
) -> i64 {
    if diverging_end_offset < 0 {
        // The leader cannot say: fall back to the high watermark.
        return follower_high_watermark.min(follower_log_end_offset);
    }
    if diverging_epoch < 0 {
        return diverging_end_offset.min(follower_log_end_offset);
    }
    match follower_end_for_epoch {
        (_, end) if end < 0 => diverging_end_offset.min(follower_log_end_offset),
        // The follower does not have the leader's epoch: go back to the end of its own
        // largest earlier epoch, and let the next fetch compare again.
        (epoch, end) if epoch != diverging_epoch => end.min(follower_log_end_offset),
        (_, end) => end.min(diverging_end_offset).min(follower_log_end_offset),
    }
}

/// Applies one partition of a fetch response. Blocking.
/// What of one partition's fetch data a blocking thread applies: the divergence to truncate
/// at, or the batches from `from` on, which must continue the log at `log_end_offset`.
struct Rest {
    data: PartitionData,
    from: usize,
    log_end_offset: Offset,
}

/// Applies one partition of a fetch response as far as that waits on neither the disk nor a
/// lock: errors, stale answers, and appends to the page cache. Returns the rest for
/// [`apply_partition_data`].
fn try_apply_partition_data(
    t: &Target,
    data: PartitionData,
    leader: i32,
    backoff: Duration,
) -> Result<Next, Box<Rest>> {
    let p = &t.partition;
    let pause = || Next::Pause(Pause::Until(Instant::now() + backoff, t.leader_epoch));
    match ResponseError::try_from_code(data.error_code) {
        None => {}
        Some(ResponseError::OffsetOutOfRange) => return Ok(Next::OutOfRange),
        Some(ResponseError::OffsetMovedToTieredStorage) => return Ok(Next::MovedToTieredStorage),
        Some(ResponseError::TopicAuthorizationFailed) => {
            return Ok(Next::Denied(Pause::Until(
                Instant::now() + backoff,
                t.leader_epoch,
            )));
        }
        Some(ResponseError::FencedLeaderEpoch) => {
            tracing::info!(topic = %p.topic, partition = p.index, leader, leader_epoch = %t.leader_epoch, "fenced by the leader: waiting for a newer partition state");
            return Ok(Next::Pause(Pause::EpochChange(t.leader_epoch)));
        }
        Some(e) => {
            tracing::debug!(topic = %p.topic, partition = p.index, leader, error = ?e, "fetch error; backing off");
            return Ok(pause());
        }
    }
    let rest = |data, from| {
        Box::new(Rest {
            data,
            from,
            log_end_offset: p.offsets().log_end_offset,
        })
    };
    if diverges(&data) {
        return Err(rest(data, 0));
    }
    if p.offsets().log_end_offset != t.fetch_offset {
        // The log moved (truncated) since the request: this answer is stale.
        return Ok(Next::Continue);
    }
    let records = data.records.clone().unwrap_or_default();
    match p.try_append_as_follower(
        t.leader_epoch,
        &records,
        Offset(data.high_watermark),
        Offset(data.log_start_offset),
    ) {
        Ok(None) => Ok(Next::Continue),
        Ok(Some(from)) => Err(rest(data, from)),
        Err(e) => {
            report_append_error(p, &e);
            Ok(pause())
        }
    }
}

/// The leader's answer says where this follower's log diverges from its own.
fn diverges(data: &PartitionData) -> bool {
    data.diverging_epoch.epoch >= 0 || data.diverging_epoch.end_offset >= 0
}

/// Applies what [`try_apply_partition_data`] left: truncates a diverging log, or appends the
/// remaining batches and takes the leader's high watermark and log start offset. Blocking.
fn apply_partition_data(t: &Target, rest: Box<Rest>, leader: i32, backoff: Duration) -> Next {
    let p = &t.partition;
    let pause = || Next::Pause(Pause::Until(Instant::now() + backoff, t.leader_epoch));
    let Rest {
        data,
        from,
        log_end_offset,
    } = *rest;
    if diverges(&data) {
        let (end, hw, own) = p.divergence_view(data.diverging_epoch.epoch);
        let offset = truncation_offset(
            data.diverging_epoch.epoch,
            data.diverging_epoch.end_offset,
            end,
            hw,
            own,
        );
        return match p.truncate_to(t.leader_epoch, Offset(offset)) {
            Ok(_) => Next::Continue,
            Err(e) => {
                report_append_error(p, &e);
                pause()
            }
        };
    }
    if p.offsets().log_end_offset != log_end_offset {
        // The log moved (truncated) since: this answer is stale.
        tracing::debug!(topic = %p.topic, partition = p.index, leader, "follower log moved while applying a fetch response");
        return Next::Continue;
    }
    let records = data.records.unwrap_or_default();
    match p.append_as_follower(
        t.leader_epoch,
        records.get(from..).unwrap_or_default(),
        Offset(data.high_watermark),
        Offset(data.log_start_offset),
    ) {
        Ok(_) => Next::Continue,
        Err(e) => {
            report_append_error(p, &e);
            pause()
        }
    }
}

fn report_append_error(p: &Partition, e: &AppendError) {
    match e {
        AppendError::NotLeaderOrFollower => {
            tracing::debug!(topic = %p.topic, partition = p.index, "partition state changed during the fetch")
        }
        AppendError::Io(_) => {
            tracing::error!(topic = %p.topic, partition = p.index, error = %e, "cannot write replicated data")
        }
        _ => {
            tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "leader sent data the follower cannot append")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::truncation_offset;

    #[test]
    fn a_follower_truncates_to_the_end_of_the_largest_common_epoch() {
        // Leader: epoch 3 ends at 40. Follower has epoch 3 up to 55: truncate to 40.
        assert_eq!(truncation_offset(3, 40, 55, 30, (3, 55)), 40);
        // Follower never saw epoch 3 (its largest earlier epoch 2 ends at 35): go to 35.
        assert_eq!(truncation_offset(3, 40, 55, 30, (2, 35)), 35);
        // The leader has no end offset for the epoch: the high watermark.
        assert_eq!(truncation_offset(-1, -1, 55, 30, (-1, -1)), 30);
        // Never beyond the follower's own end.
        assert_eq!(truncation_offset(3, 80, 55, 30, (3, 90)), 55);
        // The follower has no epochs at all: the leader's end offset.
        assert_eq!(truncation_offset(3, 40, 55, 30, (-1, -1)), 40);
    }
}
