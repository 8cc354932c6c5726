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
    AbortedTransaction, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::{FetchRequest, FetchResponse, TopicName};
use kafka_protocol::ResponseError;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::api::{blocking, errors};
use crate::broker::{Broker, Partition, Topic};
use crate::fetch_session::{FetchPosition, PartitionKey, SentState, SessionMode};

struct Wanted {
    topic_name: TopicName,
    topic_id: uuid::Uuid,
    partitions: Vec<(i32, i64, i32, i32)>, // (partition, fetch_offset, partition_max_bytes, current_leader_epoch)
}

struct Pass {
    topics: Vec<FetchableTopicResponse>,
    bytes: usize,
    errors: bool,
    /// Partitions consulted with the high watermark seen, to detect appends that race the wait.
    watched: Vec<(Arc<Partition>, i64)>,
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

/// `quota_cap`: the most a consumer with a byte quota may get in one response (Kafka caps
/// `max_bytes` so that one response cannot exceed the quota window).
pub async fn handle(
    broker: Arc<Broker>,
    req: FetchRequest,
    _version: i16,
    quota_cap: Option<f64>,
) -> FetchResponse {
    let position = |p: &kafka_protocol::messages::fetch_request::FetchPartition| FetchPosition {
        fetch_offset: p.fetch_offset,
        partition_max_bytes: p.partition_max_bytes,
        current_leader_epoch: p.current_leader_epoch,
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
            w.partitions.push((
                partition,
                pos.fetch_offset,
                pos.partition_max_bytes,
                pos.current_leader_epoch,
            ));
        }
    }
    let wanted = Arc::new(wanted);
    let max_bytes = (req.max_bytes.max(0) as usize)
        .min(broker.config.fetch_max_bytes)
        .min(quota_cap.map_or(usize::MAX, |c| c.max(0.0) as usize));
    let min_bytes = (req.min_bytes.max(0) as usize).min(max_bytes);
    let read_committed = req.isolation_level == 1;
    let deadline = Instant::now() + Duration::from_millis(req.max_wait_ms.max(0) as u64);
    let pass = loop {
        let b = broker.clone();
        let w = wanted.clone();
        let pass = match blocking(move || read_pass(&b, &w, max_bytes, read_committed)).await {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(error = %e, "fetch task failed");
                return FetchResponse::default().with_error_code(errors::internal().code());
            }
        };
        if pass.bytes >= min_bytes
            || pass.errors
            || pass.remote.is_some()
            || Instant::now() >= deadline
            || pass.watched.is_empty()
        {
            break pass;
        }
        let notify = Arc::new(Notify::new());
        for (p, _) in &pass.watched {
            p.add_waiter(notify.clone());
        }
        // An append between the read and the registration would not wake us: re-check.
        if pass
            .watched
            .iter()
            .any(|(p, hw)| p.offsets().high_watermark != *hw)
        {
            continue;
        }
        if tokio::time::timeout_at(deadline, notify.notified())
            .await
            .is_err()
        {
            // Deadline: one last pass returns whatever has arrived.
            let b = broker.clone();
            let w = wanted.clone();
            match blocking(move || read_pass(&b, &w, max_bytes, read_committed)).await {
                Ok(p) => break p,
                Err(_) => {
                    return FetchResponse::default().with_error_code(errors::internal().code())
                }
            }
        }
    };
    let mut pass = pass;
    if let Some(r) = pass.remote.take() {
        pass.bytes += read_remote(&broker, &mut pass.topics, r).await;
    }
    broker
        .metrics
        .fetch_bytes
        .fetch_add(pass.bytes as u64, Ordering::Relaxed);
    respond(&broker, mode, pass.topics)
}

/// Fills in the records of the partition that needs remote storage, waiting at most
/// remote.fetch.max.wait.ms (on timeout the partition is returned empty; the read keeps
/// warming the cache for the retry). Returns the bytes added.
async fn read_remote(
    broker: &Broker,
    topics: &mut [FetchableTopicResponse],
    r: RemoteRead,
) -> usize {
    let Some(tiering) = broker.tiering() else {
        return 0;
    };
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
                        p.with_log(|l| l.aborted_transactions(r.offset, upper))
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
            broker.metrics.record_error(1, slot.error_code);
            0
        }
        Ok(Err(e)) => {
            tracing::warn!(topic = %r.topic.name, partition = r.partition, offset = r.offset, error = %e, "remote fetch failed");
            slot.error_code = ResponseError::KafkaStorageError.code();
            broker.metrics.record_error(1, slot.error_code);
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

fn partition_response(index: i32, error: ResponseError) -> PartitionData {
    PartitionData::default()
        .with_partition_index(index)
        .with_error_code(error.code())
        .with_high_watermark(-1)
        .with_last_stable_offset(-1)
        .with_log_start_offset(-1)
        .with_records(Some(Bytes::new()))
}

fn read_pass(broker: &Broker, wanted: &[Wanted], max_bytes: usize, read_committed: bool) -> Pass {
    let mut pass = Pass {
        topics: Vec::with_capacity(wanted.len()),
        bytes: 0,
        errors: false,
        watched: Vec::new(),
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
        for &(index, fetch_offset, partition_max_bytes, current_leader_epoch) in &w.partitions {
            let Some(p) = topic
                .as_ref()
                .and_then(|t| t.partitions.get(usize::try_from(index).ok()?))
                .cloned()
            else {
                pass.errors = true;
                partitions.push(partition_response(index, missing));
                continue;
            };
            if current_leader_epoch >= 0 && current_leader_epoch != p.leader_epoch() {
                pass.errors = true;
                let e = if current_leader_epoch > p.leader_epoch() {
                    ResponseError::UnknownLeaderEpoch
                } else {
                    ResponseError::FencedLeaderEpoch
                };
                partitions.push(partition_response(index, e));
                continue;
            }
            let offsets = p.offsets();
            let limit = (partition_max_bytes.max(0) as usize).min(remaining);
            let min_one = pass.bytes == 0;
            // read_committed consumers stop at the last stable offset.
            let max_offset = if read_committed {
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
                Err(crate::log::ReadError::Remote { .. }) if broker.tiering().is_some() => {
                    if pass.remote.is_none() {
                        if let Some(t) = &topic {
                            pass.remote = Some(RemoteRead {
                                topic_slot: pass.topics.len(),
                                partition_slot: partitions.len(),
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
                    pass.errors = true;
                    let code = errors::read_error(&e);
                    if code == ResponseError::KafkaStorageError {
                        tracing::error!(topic = %p.topic, partition = index, error = %e, "fetch read failed");
                    }
                    broker.metrics.record_error(1, code.code());
                    partitions.push(
                        partition_response(index, code)
                            .with_high_watermark(offsets.high_watermark)
                            .with_last_stable_offset(offsets.last_stable_offset)
                            .with_log_start_offset(offsets.log_start_offset),
                    );
                    continue;
                }
            };
            remaining = remaining.saturating_sub(records.len());
            pass.bytes += records.len();
            pass.watched.push((p.clone(), offsets.high_watermark));
            let aborted = if !read_committed {
                None
            } else if records.is_empty() {
                Some(Vec::new())
            } else {
                Some(
                    p.with_log(|l| l.aborted_transactions(fetch_offset, max_offset))
                        .into_iter()
                        .map(|t| {
                            AbortedTransaction::default()
                                .with_producer_id(t.producer_id.into())
                                .with_first_offset(t.first_offset)
                        })
                        .collect(),
                )
            };
            partitions.push(
                PartitionData::default()
                    .with_partition_index(index)
                    .with_high_watermark(offsets.high_watermark)
                    .with_last_stable_offset(offsets.last_stable_offset)
                    .with_log_start_offset(offsets.log_start_offset)
                    .with_aborted_transactions(aborted)
                    .with_preferred_read_replica((-1).into())
                    .with_records(Some(records)),
            );
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
