//! Fetch: the request becomes a [`Broker::fetch`] of the partitions its fetch session
//! (KIP-227, [`crate::fetch_session`]) names; the broker reads them and long-polls (Kafka's
//! ReplicaManager and DelayedFetch, see [`crate::broker`]). This handler caps the byte limits
//! by the client's quota, reads remote storage for the one partition a fetch may leave to it,
//! and builds the response: the session's incremental view, and the endpoints of the leaders
//! named in NOT_LEADER_OR_FOLLOWER answers (KIP-951).

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

use crate::api::gate::{self, Gate, Who, TOPIC_DENIED};
use crate::api::{errors, Api, Context, Outcome};
use crate::broker::{
    Broker, FetchLimits, FetchParams, FetchTopic, LeaderEpoch, Offset, PartitionOffsets,
    PartitionRead, RemoteRead, TopicRef,
};
use crate::fetch_session::{FetchPosition, PartitionKey, SentState, SessionMode};
use crate::log::txn_index::AbortedTxn;
use crate::protocol::{Chunk, FileRecords};
use crate::security::acl::Operation as Op;
use crate::services::{FetchSessions, Services};
use crate::tiering::Tiering;

/// `listener`: the listener the request came in on (KIP-951 leader endpoints).
/// `quota_cap`: the most a consumer with a byte quota may get in one response (Kafka caps
/// `max_bytes` so that one response cannot exceed the quota window).
pub async fn handle(
    broker: Arc<Broker>,
    tiering: Option<&Arc<Tiering>>,
    sessions: &FetchSessions,
    req: FetchRequest,
    version: i16,
    listener: usize,
    quota_cap: Option<f64>,
) -> (FetchResponse, FileRecords) {
    let position = |p: &kafka_protocol::messages::fetch_request::FetchPartition| FetchPosition {
        fetch_offset: Offset(p.fetch_offset),
        partition_max_bytes: p.partition_max_bytes,
        current_leader_epoch: LeaderEpoch(p.current_leader_epoch),
        last_fetched_epoch: LeaderEpoch(if version >= 12 {
            p.last_fetched_epoch
        } else {
            -1
        }),
        log_start_offset: Offset(p.log_start_offset),
    };
    let replica_id = if version >= 15 {
        req.replica_state.replica_id.0
    } else {
        req.replica_id.0
    };
    let params = FetchParams {
        replica_id,
        // Followers, and consumers before KIP-392 (v11), read only from the leader.
        only_from_leader: replica_id >= 0 || version < 11,
        read_committed: req.isolation_level == 1,
        tiered: tiering.is_some(),
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
    let begun = sessions
        .lock()
        .begin(req.session_id, req.session_epoch, requested, &forgotten);
    let (mode, parts) = match begun {
        Ok(x) => x,
        Err(code) => {
            let response = FetchResponse::default().with_error_code(code.code());
            return (response, FileRecords::default());
        }
    };
    // The session's partitions grouped by topic, as the response names them.
    let mut names: Vec<(TopicName, uuid::Uuid)> = Vec::new();
    let mut wanted: Vec<FetchTopic> = Vec::new();
    for ((name, id, partition), pos) in parts {
        if names.last().is_none_or(|(n, i)| *n != name || *i != id) {
            wanted.push(FetchTopic {
                topic: TopicRef::new(&name.0, id),
                partitions: Vec::new(),
            });
            names.push((name, id));
        }
        if let Some(w) = wanted.last_mut() {
            w.partitions.push((partition, pos));
        }
    }
    let max_bytes = (req.max_bytes.max(0) as usize)
        .min(broker.config.fetch_max_bytes)
        .min(quota_cap.map_or(usize::MAX, |c| c.max(0.0) as usize));
    let limits = FetchLimits {
        max_bytes,
        // Capped with max_bytes, so a consumer held by its quota is not parked for more
        // bytes than it may receive.
        min_bytes: (req.min_bytes.max(0) as usize).min(max_bytes),
        max_wait: Duration::from_millis(req.max_wait_ms.max(0) as u64),
    };
    let fetched = match broker.fetch(Arc::new(wanted), params, limits).await {
        Ok(f) => f,
        Err(e) => {
            tracing::error!(error = %e, "fetch task failed");
            let response = FetchResponse::default().with_error_code(errors::internal().code());
            return (response, FileRecords::default());
        }
    };
    let mut bytes = fetched.bytes;
    let mut leaders = Vec::new();
    let mut remote = None;
    let mut files = FileRecords::default();
    let mut topics: Vec<FetchableTopicResponse> = Vec::with_capacity(names.len());
    for ((name, id), reads) in names.into_iter().zip(fetched.topics) {
        let mut partitions = Vec::with_capacity(reads.len());
        for (index, read) in reads {
            let slot = (topics.len(), partitions.len());
            partitions.push(partition_data(
                index,
                read,
                params,
                &mut leaders,
                slot,
                &mut remote,
                &mut files,
            ));
        }
        topics.push(
            FetchableTopicResponse::default()
                .with_topic(name)
                .with_topic_id(id)
                .with_partitions(partitions),
        );
    }
    if let (Some((slot, r)), Some(tiering)) = (remote, tiering) {
        bytes += read_remote(tiering, &broker.metrics, &mut topics, slot, r, &mut files).await;
    }
    broker
        .metrics
        .fetch_bytes
        .fetch_add(bytes as u64, Ordering::Relaxed);
    let mut response = respond(sessions, mode, topics);
    if version >= 16 {
        response.node_endpoints = node_endpoints(&broker, &leaders, listener);
    }
    (response, files)
}

/// One partition's answer. The leader a NOT_LEADER_OR_FOLLOWER names goes to `leaders`; a
/// read left to remote storage goes to `remote` with its place in the response (`slot`); a
/// record set still in its segment file goes to `files`, with a stand-in in the answer.
fn partition_data(
    index: i32,
    read: PartitionRead,
    params: FetchParams,
    leaders: &mut Vec<i32>,
    slot: (usize, usize),
    remote: &mut Option<((usize, usize), RemoteRead)>,
    files: &mut FileRecords,
) -> PartitionData {
    let with_offsets = |data: PartitionData, o: PartitionOffsets| {
        data.with_high_watermark(o.high_watermark.0)
            .with_last_stable_offset(o.last_stable_offset.0)
            .with_log_start_offset(o.log_start_offset.0)
    };
    let records = |offsets, records, aborted: Option<Vec<AbortedTxn>>| {
        let aborted = aborted.map(|a| {
            a.into_iter()
                .map(|t| {
                    AbortedTransaction::default()
                        .with_producer_id(t.producer_id.into())
                        .with_first_offset(t.first_offset)
                })
                .collect()
        });
        with_offsets(
            PartitionData::default().with_partition_index(index),
            offsets,
        )
        .with_aborted_transactions(aborted)
        .with_preferred_read_replica((-1).into())
        .with_records(Some(records))
    };
    match read {
        PartitionRead::Records {
            offsets,
            records: Chunk::Bytes(bytes),
            aborted,
        } => records(offsets, bytes, aborted),
        PartitionRead::Records {
            offsets,
            records: Chunk::File(slice),
            aborted,
        } => match files
            .stand_in(slice.clone())
            .map_or_else(|| slice.read(), Ok)
        {
            Ok(bytes) => records(offsets, bytes, aborted),
            Err(e) => {
                tracing::error!(error = %e, partition = index, "fetch read failed");
                with_offsets(
                    partition_response(index, ResponseError::KafkaStorageError),
                    offsets,
                )
            }
        },
        PartitionRead::Remote { offsets, read } => {
            *remote = Some((slot, read));
            let aborted = params.read_committed.then(Vec::new);
            records(offsets, Bytes::new(), aborted)
        }
        PartitionRead::Diverging {
            offsets,
            epoch,
            end_offset,
        } => with_offsets(
            PartitionData::default().with_partition_index(index),
            offsets,
        )
        .with_diverging_epoch(
            EpochEndOffset::default()
                .with_epoch(epoch.0)
                .with_end_offset(end_offset.0),
        )
        .with_aborted_transactions(params.read_committed.then(Vec::new))
        .with_records(Some(Bytes::new())),
        PartitionRead::NotLeader { leader, epoch } => {
            leaders.extend(leader);
            partition_response(index, ResponseError::NotLeaderOrFollower).with_current_leader(
                LeaderIdAndEpoch::default()
                    .with_leader_id(leader.unwrap_or(-1).into())
                    .with_leader_epoch(epoch.0),
            )
        }
        PartitionRead::Failed {
            error,
            offsets: None,
        } => partition_response(index, error),
        PartitionRead::Failed {
            error,
            offsets: Some(offsets),
        } => with_offsets(partition_response(index, error), offsets),
    }
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

/// Fills in the records of the partition that needs remote storage, waiting at most
/// remote.fetch.max.wait.ms (on timeout the partition is returned empty; the read keeps
/// warming the cache for the retry). Returns the bytes added.
async fn read_remote(
    tiering: &Tiering,
    metrics: &crate::metrics::Metrics,
    topics: &mut [FetchableTopicResponse],
    (topic_slot, partition_slot): (usize, usize),
    r: RemoteRead,
    files: &mut FileRecords,
) -> usize {
    let Some(slot) = topics
        .get_mut(topic_slot)
        .and_then(|t| t.partitions.get_mut(partition_slot))
    else {
        return 0;
    };
    let read = tiering.read(&r.topic, r.partition, r.offset.0, r.max_bytes, r.min_one);
    match tokio::time::timeout(tiering.fetch_max_wait(), read).await {
        Ok(Ok(records)) => {
            let n = records.len();
            if r.topic.config.remote_rehydrate && n > 0 {
                // Rehydration watches remote reads for a range read again.
                if let Some(p) = r.topic.partitions.get(r.partition as usize) {
                    let now = crate::clock::now_ms();
                    if p.with_log(|l| l.note_remote_read(r.offset.0, now)) {
                        // A pass brings the hot range back now, not at the next timer.
                        tiering.notify(
                            &r.topic.name,
                            r.partition,
                            strata_tiering::Event::Reconcile,
                        );
                    }
                }
            }
            if r.read_committed && n > 0 {
                // Aborted transactions from the remote indexes, then the local ones (a marker
                // may already be local).
                let upper = Offset(slot.last_stable_offset);
                let mut aborted: Vec<(i64, i64)> = match tiering
                    .aborted_transactions(&r.topic, r.partition, r.offset.0, upper.0)
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
            match remote_records(records, files) {
                Ok(records) => slot.records = Some(records),
                Err(e) => {
                    tracing::warn!(topic = %r.topic.name, partition = r.partition, error = %e, "remote cache file unreadable");
                    slot.error_code = ResponseError::KafkaStorageError.code();
                    metrics.record_error(1, slot.error_code);
                    return 0;
                }
            }
            n
        }
        Ok(Err(crate::tiering::RemoteReadError::OutOfRange(_))) => {
            slot.error_code = ResponseError::OffsetOutOfRange.code();
            metrics.record_error(1, slot.error_code);
            0
        }
        Ok(Err(e)) => {
            tracing::warn!(topic = %r.topic.name, partition = r.partition, offset = %r.offset, error = %e, "remote fetch failed");
            slot.error_code = ResponseError::KafkaStorageError.code();
            metrics.record_error(1, slot.error_code);
            0
        }
        Err(_) => 0,
    }
}

/// The records of a remote read for the response: bytes in memory as they are; ranges of the
/// remote cache's files (and the pieces around them) behind a stand-in, sent from the page
/// cache as local segments are.
fn remote_records(
    records: strata_tiering::RemoteRecords,
    files: &mut FileRecords,
) -> std::io::Result<Bytes> {
    use strata_tiering::Piece;
    if let [Piece::Memory(b)] = &records.pieces[..] {
        return Ok(b.clone());
    }
    let pieces = records
        .pieces
        .iter()
        .map(|p| match p {
            Piece::Memory(b) => Chunk::Bytes(b.clone()),
            Piece::File(f) => Chunk::File(crate::log::segment::FileSlice {
                file: f.file.clone(),
                position: f.position,
                len: f.len,
            }),
        })
        .collect();
    match files.stand_in_pieces(pieces) {
        Some(stand_in) => Ok(stand_in),
        None => records.into_bytes(),
    }
}

/// Records what is sent in the session and, for incremental sessions, drops partitions with
/// nothing new.
fn respond(
    sessions: &FetchSessions,
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
    let include = sessions.lock().finish(&mode, &sent);
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

fn partition_response(index: i32, error: ResponseError) -> PartitionData {
    PartitionData::default()
        .with_partition_index(index)
        .with_error_code(error.code())
        .with_high_watermark(-1)
        .with_last_stable_offset(-1)
        .with_log_start_offset(-1)
        .with_records(Some(Bytes::new()))
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
        let (response, files) = handle(
            s.broker.clone(),
            tiering,
            &s.fetch_sessions,
            r,
            version,
            ctx.listener,
            quota_cap,
        )
        .await;
        Outcome::RespondWithFiles(Box::new(ResponseKind::Fetch(response)), files)
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
