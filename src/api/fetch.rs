//! Fetch: serve stored batches as they are on disk, long-polling until `min_bytes` are
//! available or `max_wait_ms` passes (woken by appends, not by polling).
//!
//! Limits follow KIP-74: `partition_max_bytes` per partition and `max_bytes` overall, except
//! that the first batch of the first partition with data is returned whole even when larger,
//! so a consumer always makes progress. Incremental fetch sessions (KIP-227) are kept in
//! [`crate::fetch_session`].

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, EpochEndOffset, FetchableTopicResponse, LeaderIdAndEpoch, NodeEndpoint,
    PartitionData,
};
use kafka_protocol::messages::{
    fetch_response, FetchRequest, FetchResponse, RequestKind, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::api::gate::{self, Gate, Who, TOPIC_DENIED};
use crate::api::{blocking, errors, Api, Context, Outcome};
use crate::broker::{Broker, FollowerFetchError, Partition, Role, Topic};
use crate::fetch_session::{FetchPosition, PartitionKey, SentState, SessionMode};
use crate::security::acl::Operation as Op;
use crate::services::Services;
use crate::tiering::Tiering;

struct Wanted {
    topic_name: TopicName,
    topic_id: uuid::Uuid,
    partitions: Vec<(i32, FetchPosition)>,
}

/// Who fetches, and how the request is answered.
#[derive(Clone, Copy)]
struct FetchParams {
    /// A follower's broker id, or -1 for a consumer.
    replica_id: i32,
    version: i16,
    read_committed: bool,
}

impl FetchParams {
    fn is_follower(&self) -> bool {
        self.replica_id >= 0
    }

    /// Followers, and consumers before KIP-392 (v11), read only from the leader.
    fn only_from_leader(&self) -> bool {
        self.is_follower() || self.version < 11
    }
}

struct Pass {
    topics: Vec<FetchableTopicResponse>,
    bytes: usize,
    /// An error or a diverging epoch: answer without waiting for data.
    answer_now: bool,
    /// Partitions consulted with the (high watermark, log end offset) seen, to detect appends
    /// that race the wait.
    watched: Vec<(Arc<Partition>, i64, i64)>,
    /// Leaders named in NOT_LEADER_OR_FOLLOWER answers (KIP-951 node endpoints).
    leaders: Vec<i32>,
    /// A partition whose fetch offset is below its local log start: read from remote storage
    /// after the pass (at most one per request, as Kafka does).
    remote: Option<RemoteRead>,
}

struct RemoteRead {
    topic_slot: usize,
    partition_slot: usize,
    topic: Arc<Topic>,
    partition: i32,
    offset: i64,
    max_bytes: usize,
    min_one: bool,
    read_committed: bool,
}

/// `listener`: the listener the request came in on (KIP-951 leader endpoints).
/// `quota_cap`: the most a consumer with a byte quota may get in one response (Kafka caps
/// `max_bytes` so that one response cannot exceed the quota window).
pub async fn handle(
    broker: Arc<Broker>,
    tiering: Option<&Arc<Tiering>>,
    req: FetchRequest,
    version: i16,
    listener: usize,
    quota_cap: Option<f64>,
) -> FetchResponse {
    let position = |p: &kafka_protocol::messages::fetch_request::FetchPartition| FetchPosition {
        fetch_offset: p.fetch_offset,
        partition_max_bytes: p.partition_max_bytes,
        current_leader_epoch: p.current_leader_epoch,
        last_fetched_epoch: if version >= 12 {
            p.last_fetched_epoch
        } else {
            -1
        },
        log_start_offset: p.log_start_offset,
    };
    let params = FetchParams {
        replica_id: if version >= 15 {
            req.replica_state.replica_id.0
        } else {
            req.replica_id.0
        },
        version,
        read_committed: req.isolation_level == 1,
    };
    let requested: Vec<(PartitionKey, FetchPosition)> = req
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(move |p| ((t.topic.clone(), t.topic_id, p.partition), position(p)))
        })
        .collect();
    let forgotten: Vec<PartitionKey> = req
        .forgotten_topics_data
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(move |&p| (t.topic.clone(), t.topic_id, p))
        })
        .collect();
    let begun =
        broker
            .fetch_sessions()
            .begin(req.session_id, req.session_epoch, requested, &forgotten);
    let (mode, parts) = match begun {
        Ok(x) => x,
        Err(code) => return FetchResponse::default().with_error_code(code.code()),
    };
    let mut wanted: Vec<Wanted> = Vec::new();
    for ((name, id, partition), pos) in parts {
        match wanted.last_mut() {
            Some(w) if w.topic_name == name && w.topic_id == id => {}
            _ => wanted.push(Wanted {
                topic_name: name,
                topic_id: id,
                partitions: Vec::new(),
            }),
        }
        if let Some(w) = wanted.last_mut() {
            w.partitions.push((partition, pos));
        }
    }
    let wanted = Arc::new(wanted);
    let max_bytes = (req.max_bytes.max(0) as usize)
        .min(broker.config.fetch_max_bytes)
        .min(quota_cap.map_or(usize::MAX, |c| c.max(0.0) as usize));
    // Capped with max_bytes, so a consumer held by its quota is not parked for more bytes
    // than it may receive.
    let min_bytes = (req.min_bytes.max(0) as usize).min(max_bytes);
    let deadline = Instant::now() + Duration::from_millis(req.max_wait_ms.max(0) as u64);
    // A follower's fetch position is recorded by the first read only (as in Kafka).
    let mut first = true;
    let tiered = tiering.is_some();
    let pass = loop {
        let b = broker.clone();
        let w = wanted.clone();
        let record = std::mem::take(&mut first);
        let pass =
            match blocking(move || read_pass(&b, &w, max_bytes, params, record, tiered)).await {
                Ok(p) => p,
                Err(e) => {
                    tracing::error!(error = %e, "fetch task failed");
                    return FetchResponse::default().with_error_code(errors::internal().code());
                }
            };
        if pass.bytes >= min_bytes
            || pass.answer_now
            || pass.remote.is_some()
            || Instant::now() >= deadline
            || pass.watched.is_empty()
        {
            break pass;
        }
        let notify = Arc::new(Notify::new());
        for (p, _, _) in &pass.watched {
            p.add_waiter(notify.clone());
        }
        // An append between the read and the registration would not wake us: re-check.
        if pass.watched.iter().any(|(p, hw, leo)| {
            let now = p.offsets();
            now.high_watermark != *hw || now.log_end_offset != *leo
        }) {
            continue;
        }
        if tokio::time::timeout_at(deadline, notify.notified())
            .await
            .is_err()
        {
            // Deadline: one last pass returns whatever has arrived.
            let b = broker.clone();
            let w = wanted.clone();
            match blocking(move || read_pass(&b, &w, max_bytes, params, false, tiered)).await {
                Ok(p) => break p,
                Err(_) => {
                    return FetchResponse::default().with_error_code(errors::internal().code())
                }
            }
        }
    };
    let mut pass = pass;
    if let (Some(r), Some(tiering)) = (pass.remote.take(), tiering) {
        pass.bytes += read_remote(tiering, &broker.metrics, &mut pass.topics, r).await;
    }
    broker
        .metrics
        .fetch_bytes
        .fetch_add(pass.bytes as u64, Ordering::Relaxed);
    let mut response = respond(&broker, mode, pass.topics);
    if version >= 16 {
        response.node_endpoints = node_endpoints(&broker, &pass.leaders, listener);
    }
    response
}

/// KIP-951: the endpoints of the leaders named in NOT_LEADER_OR_FOLLOWER answers, on the
/// request's listener.
fn node_endpoints(broker: &Broker, leaders: &[i32], listener: usize) -> Vec<NodeEndpoint> {
    let mut ids: Vec<i32> = leaders.to_vec();
    ids.sort_unstable();
    ids.dedup();
    ids.into_iter()
        .filter_map(|id| broker.broker_endpoint(id, listener))
        .map(|(id, host, port, rack)| {
            NodeEndpoint::default()
                .with_node_id(id.into())
                .with_host(StrBytes::from_string(host))
                .with_port(port as i32)
                .with_rack(rack.map(StrBytes::from_string))
        })
        .collect()
}

/// NOT_LEADER_OR_FOLLOWER with the leader this broker knows (KIP-951).
fn not_leader(p: &Partition, index: i32) -> (PartitionData, Option<i32>) {
    let (leader, epoch) = p.leader_and_epoch();
    let data = partition_response(index, ResponseError::NotLeaderOrFollower).with_current_leader(
        LeaderIdAndEpoch::default()
            .with_leader_id(leader.unwrap_or(-1).into())
            .with_leader_epoch(epoch),
    );
    (data, leader)
}

/// Fills in the records of the partition that needs remote storage, waiting at most
/// remote.fetch.max.wait.ms (on timeout the partition is returned empty; the read keeps
/// warming the cache for the retry). Returns the bytes added.
async fn read_remote(
    tiering: &Tiering,
    metrics: &crate::metrics::Metrics,
    topics: &mut [FetchableTopicResponse],
    r: RemoteRead,
) -> usize {
    let Some(slot) = topics
        .get_mut(r.topic_slot)
        .and_then(|t| t.partitions.get_mut(r.partition_slot))
    else {
        return 0;
    };
    let read = tiering.read(&r.topic, r.partition, r.offset, r.max_bytes, r.min_one);
    match tokio::time::timeout(tiering.fetch_max_wait(), read).await {
        Ok(Ok(records)) => {
            let n = records.len();
            if r.read_committed && n > 0 {
                // Aborted transactions from the remote indexes, then the local ones (a marker
                // may already be local).
                let upper = slot.last_stable_offset;
                let mut aborted: Vec<(i64, i64)> = match tiering
                    .aborted_transactions(&r.topic, r.partition, r.offset, upper)
                    .await
                {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(topic = %r.topic.name, partition = r.partition, error = %e, "remote transaction index unreadable");
                        slot.error_code = ResponseError::KafkaStorageError.code();
                        return 0;
                    }
                };
                if let Some(p) = r.topic.partitions.get(r.partition as usize) {
                    aborted.extend(
                        p.aborted_transactions(r.offset, upper)
                            .into_iter()
                            .map(|t| (t.producer_id, t.first_offset)),
                    );
                }
                aborted.sort_unstable();
                aborted.dedup();
                slot.aborted_transactions = Some(
                    aborted
                        .into_iter()
                        .map(|(pid, first)| {
                            AbortedTransaction::default()
                                .with_producer_id(pid.into())
                                .with_first_offset(first)
                        })
                        .collect(),
                );
            }
            slot.records = Some(records);
            n
        }
        Ok(Err(crate::tiering::RemoteReadError::OutOfRange(_))) => {
            slot.error_code = ResponseError::OffsetOutOfRange.code();
            metrics.record_error(1, slot.error_code);
            0
        }
        Ok(Err(e)) => {
            tracing::warn!(topic = %r.topic.name, partition = r.partition, offset = r.offset, error = %e, "remote fetch failed");
            slot.error_code = ResponseError::KafkaStorageError.code();
            metrics.record_error(1, slot.error_code);
            0
        }
        Err(_) => 0,
    }
}

/// Records what is sent in the session and, for incremental sessions, drops partitions with
/// nothing new.
fn respond(
    broker: &Broker,
    mode: SessionMode,
    mut topics: Vec<FetchableTopicResponse>,
) -> FetchResponse {
    let sent: Vec<(PartitionKey, SentState, bool)> = topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(move |p| {
                let state = SentState {
                    high_watermark: p.high_watermark,
                    last_stable_offset: p.last_stable_offset,
                    log_start_offset: p.log_start_offset,
                };
                let has_news =
                    p.error_code != 0 || p.records.as_ref().is_some_and(|r| !r.is_empty());
                (
                    (t.topic.clone(), t.topic_id, p.partition_index),
                    state,
                    has_news,
                )
            })
        })
        .collect();
    let include = broker.fetch_sessions().finish(&mode, &sent);
    let mut flags = include.into_iter();
    for t in &mut topics {
        t.partitions.retain(|_| flags.next().unwrap_or(true));
    }
    let session_id = match mode {
        SessionMode::Sessionless => 0,
        SessionMode::New(id) => id,
        SessionMode::Incremental(id) => {
            topics.retain(|t| !t.partitions.is_empty());
            id
        }
    };
    FetchResponse::default()
        .with_session_id(session_id)
        .with_responses(topics)
}

/// KIP-320 on the leader (Kafka's `Partition.readRecords`): when the fetcher's last fetched
/// epoch ends before its fetch offset here, or is unknown here, answer the end of the largest
/// epoch both have so it truncates. Blocking (takes the log lock).
fn diverging_epoch(
    p: &Partition,
    last_fetched_epoch: i32,
    fetch_offset: i64,
    offsets: crate::broker::PartitionOffsets,
) -> Result<Option<EpochEndOffset>, ResponseError> {
    let (epoch, end_offset) = p.end_offset_for_epoch(last_fetched_epoch);
    if epoch < 0 || end_offset < 0 {
        return Err(ResponseError::OffsetOutOfRange);
    }
    if fetch_offset < offsets.log_start_offset {
        return Err(ResponseError::OffsetOutOfRange);
    }
    if epoch < last_fetched_epoch || end_offset < fetch_offset {
        return Ok(Some(
            EpochEndOffset::default()
                .with_epoch(epoch)
                .with_end_offset(end_offset),
        ));
    }
    Ok(None)
}

fn partition_response(index: i32, error: ResponseError) -> PartitionData {
    PartitionData::default()
        .with_partition_index(index)
        .with_error_code(error.code())
        .with_high_watermark(-1)
        .with_last_stable_offset(-1)
        .with_log_start_offset(-1)
        .with_records(Some(Bytes::new()))
}

fn read_pass(
    broker: &Broker,
    wanted: &[Wanted],
    max_bytes: usize,
    params: FetchParams,
    record_follower_position: bool,
    tiered: bool,
) -> Pass {
    let mut pass = Pass {
        topics: Vec::with_capacity(wanted.len()),
        bytes: 0,
        answer_now: false,
        watched: Vec::new(),
        leaders: Vec::new(),
        remote: None,
    };
    let mut remaining = max_bytes;
    for w in wanted {
        let by_id = w.topic_name.0.is_empty();
        let topic = if by_id {
            broker.topic_by_id(&w.topic_id)
        } else {
            broker.topic(w.topic_name.0.as_str())
        };
        let missing = if by_id {
            ResponseError::UnknownTopicId
        } else {
            ResponseError::UnknownTopicOrPartition
        };
        let mut partitions = Vec::with_capacity(w.partitions.len());
        for &(index, pos) in &w.partitions {
            let slot = (pass.topics.len(), partitions.len());
            let data = read_partition(
                broker,
                topic.as_ref(),
                missing,
                (index, pos),
                slot,
                &mut remaining,
                &mut pass,
                PassParams {
                    params,
                    record_follower_position,
                    tiered,
                },
            );
            partitions.push(data);
        }
        pass.topics.push(
            FetchableTopicResponse::default()
                .with_topic(w.topic_name.clone())
                .with_topic_id(w.topic_id)
                .with_partitions(partitions),
        );
    }
    pass
}

/// How one read pass runs: the request's parameters, whether this pass records a follower's
/// fetch position, and whether remote reads are possible.
#[derive(Clone, Copy)]
struct PassParams {
    params: FetchParams,
    record_follower_position: bool,
    tiered: bool,
}

/// Reads one partition of a pass within `remaining` bytes: its answer (records, an error, a
/// diverging epoch or NOT_LEADER_OR_FOLLOWER), recording in `pass` what the request as a
/// whole needs (bytes read, partitions to watch, leaders to name, a remote read). `slot` is
/// where the answer goes: its (topic, partition) index in the response.
#[allow(clippy::too_many_arguments)]
fn read_partition(
    broker: &Broker,
    topic: Option<&Arc<Topic>>,
    missing: ResponseError,
    (index, pos): (i32, FetchPosition),
    (topic_slot, partition_slot): (usize, usize),
    remaining: &mut usize,
    pass: &mut Pass,
    PassParams {
        params,
        record_follower_position,
        tiered,
    }: PassParams,
) -> PartitionData {
    let read_committed = params.read_committed;
    let fetch_offset = pos.fetch_offset;
    let partition_max_bytes = pos.partition_max_bytes;
    let current_leader_epoch = pos.current_leader_epoch;
    let Some(p) = topic
        .and_then(|t| t.partitions.get(usize::try_from(index).ok()?))
        .cloned()
    else {
        pass.answer_now = true;
        return partition_response(index, missing);
    };
    if current_leader_epoch >= 0 && current_leader_epoch != p.leader_epoch() {
        pass.answer_now = true;
        let e = if current_leader_epoch > p.leader_epoch() {
            ResponseError::UnknownLeaderEpoch
        } else {
            ResponseError::FencedLeaderEpoch
        };
        return partition_response(index, e);
    }
    let role = p.role();
    if role == Role::None || (params.only_from_leader() && role != Role::Leader) {
        pass.answer_now = true;
        let (data, leader) = not_leader(&p, index);
        pass.leaders.extend(leader);
        return data;
    }
    let offsets = p.offsets();
    // The common case needs no epoch lookup: the fetcher is in the leader's epoch.
    let in_current_epoch = role == Role::Leader
        && pos.last_fetched_epoch == p.leader_epoch()
        && fetch_offset <= offsets.log_end_offset;
    if pos.last_fetched_epoch >= 0 && !in_current_epoch {
        match diverging_epoch(&p, pos.last_fetched_epoch, fetch_offset, offsets) {
            Ok(None) => {}
            Ok(Some(diverging)) => {
                pass.answer_now = true;
                return PartitionData::default()
                    .with_partition_index(index)
                    .with_high_watermark(offsets.high_watermark)
                    .with_last_stable_offset(offsets.last_stable_offset)
                    .with_log_start_offset(offsets.log_start_offset)
                    .with_diverging_epoch(diverging)
                    .with_aborted_transactions(read_committed.then(Vec::new))
                    .with_records(Some(Bytes::new()));
            }
            Err(code) => {
                pass.answer_now = true;
                broker.metrics.record_error(1, code.code());
                return partition_response(index, code)
                    .with_high_watermark(offsets.high_watermark)
                    .with_last_stable_offset(offsets.last_stable_offset)
                    .with_log_start_offset(offsets.log_start_offset);
            }
        }
    }
    let limit = (partition_max_bytes.max(0) as usize).min(*remaining);
    let min_one = pass.bytes == 0;
    // Followers read up to the log end; read_committed consumers stop at the last
    // stable offset, others at the high watermark.
    let max_offset = if params.is_follower() {
        offsets.log_end_offset
    } else if read_committed {
        offsets.last_stable_offset
    } else {
        offsets.high_watermark
    };
    let records = match p
        .read(fetch_offset, limit, max_offset, min_one)
        .and_then(|s| match s {
            Some(slice) => slice.read().map_err(Into::into),
            None => Ok(Bytes::new()),
        }) {
        Ok(r) => r,
        // A follower below the leader's local log start does not copy the remote
        // log through the leader: it rebuilds its state from remote storage and
        // starts at the local log start (KIP-405, OFFSET_MOVED_TO_TIERED_STORAGE).
        Err(crate::log::ReadError::Remote { .. }) if params.is_follower() => {
            pass.answer_now = true;
            let code = ResponseError::OffsetMovedToTieredStorage;
            broker.metrics.record_error(1, code.code());
            return partition_response(index, code)
                .with_high_watermark(offsets.high_watermark)
                .with_last_stable_offset(offsets.last_stable_offset)
                .with_log_start_offset(offsets.log_start_offset);
        }
        Err(crate::log::ReadError::Remote { .. }) if tiered => {
            if pass.remote.is_none() {
                if let Some(t) = topic {
                    pass.remote = Some(RemoteRead {
                        topic_slot,
                        partition_slot,
                        topic: t.clone(),
                        partition: index,
                        offset: fetch_offset,
                        max_bytes: limit,
                        min_one,
                        read_committed,
                    });
                }
            }
            Bytes::new()
        }
        Err(e) => {
            pass.answer_now = true;
            let code = errors::read_error(&e);
            if code == ResponseError::KafkaStorageError {
                tracing::error!(topic = %p.topic, partition = index, error = %e, "fetch read failed");
            }
            broker.metrics.record_error(1, code.code());
            return partition_response(index, code)
                .with_high_watermark(offsets.high_watermark)
                .with_last_stable_offset(offsets.last_stable_offset)
                .with_log_start_offset(offsets.log_start_offset);
        }
    };
    if params.is_follower() && record_follower_position {
        match p.update_follower_fetch_state(
            params.replica_id,
            fetch_offset,
            pos.log_start_offset,
            offsets.log_end_offset,
            crate::clock::now_ms(),
        ) {
            Ok(Some(expansion)) => broker.replication().propose(p.clone(), expansion),
            Ok(None) => {}
            Err(FollowerFetchError::NotLeaderOrFollower) => {
                pass.answer_now = true;
                let (data, leader) = not_leader(&p, index);
                pass.leaders.extend(leader);
                return data;
            }
        }
    }
    *remaining = remaining.saturating_sub(records.len());
    pass.bytes += records.len();
    pass.watched
        .push((p.clone(), offsets.high_watermark, offsets.log_end_offset));
    let aborted = if !read_committed {
        None
    } else if records.is_empty() {
        Some(Vec::new())
    } else {
        Some(
            p.aborted_transactions(fetch_offset, max_offset)
                .into_iter()
                .map(|t| {
                    AbortedTransaction::default()
                        .with_producer_id(t.producer_id.into())
                        .with_first_offset(t.first_offset)
                })
                .collect(),
        )
    };

    PartitionData::default()
        .with_partition_index(index)
        .with_high_watermark(offsets.high_watermark)
        .with_last_stable_offset(offsets.last_stable_offset)
        .with_log_start_offset(offsets.log_start_offset)
        .with_aborted_transactions(aborted)
        .with_preferred_read_replica((-1).into())
        .with_records(Some(records))
}

/// Fetch: READ on each topic; followers also need CLUSTER_ACTION.
pub struct Fetch;

impl Api for Fetch {
    type Request = FetchRequest;

    fn authorize(who: &Who, mut r: FetchRequest, _version: i16) -> Gate {
        let from_follower = r.replica_id.0 >= 0 || r.replica_state.replica_id.0 >= 0;
        let follower_ok = !from_follower || who.may_cluster(Op::ClusterAction);
        let (ok, denied): (Vec<_>, Vec<_>) = r
            .topics
            .into_iter()
            .partition(|t| follower_ok && who.may_topic(Op::Read, &t.topic, &t.topic_id));
        r.topics = ok;
        let mut refusals: Vec<_> = denied
            .iter()
            .map(|t| {
                let parts = t.partitions.iter().map(|p| p.partition).collect();
                refusal(t.topic.clone(), t.topic_id, parts)
            })
            .collect();
        let who = who.clone();
        Gate::Run(
            RequestKind::Fetch(r),
            gate::finish(move |resp| match resp {
                ResponseKind::Fetch(mut f) => {
                    // Partitions already in a fetch session are not in the request: check
                    // every topic of the response again, so a revoked ACL takes effect at once.
                    for t in f.responses.iter_mut() {
                        if !(follower_ok && who.may_topic(Op::Read, &t.topic, &t.topic_id)) {
                            let parts = t.partitions.iter().map(|p| p.partition_index).collect();
                            *t = refusal(t.topic.clone(), t.topic_id, parts);
                        }
                    }
                    f.responses.append(&mut refusals);
                    ResponseKind::Fetch(f)
                }
                other => other,
            }),
        )
    }

    async fn handle(s: &Services, ctx: &Context, r: FetchRequest, version: i16) -> Outcome {
        // A consumer with a byte quota gets at most what the quota window allows.
        let quota_cap = s.broker.quotas.clients.max_value_in_window(
            crate::quota::QuotaType::Fetch,
            crate::quota::Client {
                user: crate::quota::user_of(&ctx.principal),
                client_id: &ctx.client_id,
            },
        );
        let tiering = s.tiering.as_ref();
        Outcome::respond(
            handle(
                s.broker.clone(),
                tiering,
                r,
                version,
                ctx.listener,
                quota_cap,
            )
            .await,
        )
    }
}

/// A refused topic: every partition TOPIC_AUTHORIZATION_FAILED.
fn refusal(
    topic: TopicName,
    topic_id: uuid::Uuid,
    partitions: Vec<i32>,
) -> fetch_response::FetchableTopicResponse {
    fetch_response::FetchableTopicResponse::default()
        .with_topic(topic)
        .with_topic_id(topic_id)
        .with_partitions(
            partitions
                .into_iter()
                .map(|p| {
                    fetch_response::PartitionData::default()
                        .with_partition_index(p)
                        .with_error_code(TOPIC_DENIED.code())
                        .with_high_watermark(-1)
                        .with_last_stable_offset(-1)
                        .with_log_start_offset(-1)
                })
                .collect(),
        )
}
