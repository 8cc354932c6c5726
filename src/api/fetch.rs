//! Fetch: serve stored batches as they are on disk, long-polling until `min_bytes` are
//! available or `max_wait_ms` passes (woken by appends, not by polling).
//!
//! Limits follow KIP-74: `partition_max_bytes` per partition and `max_bytes` overall, except
//! that the first batch of the first partition with data is returned whole even when larger,
//! so a consumer always makes progress. Fetch sessions (KIP-227) are answered sessionless
//! (session id 0), which clients handle by sending full fetch requests.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{FetchRequest, FetchResponse, TopicName};
use kafka_protocol::ResponseError;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::api::{blocking, errors};
use crate::broker::{Broker, Partition};

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
}

pub async fn handle(broker: Arc<Broker>, req: FetchRequest, _version: i16) -> FetchResponse {
    if req.session_id != 0 {
        return FetchResponse::default()
            .with_error_code(ResponseError::FetchSessionIdNotFound.code());
    }
    let wanted: Arc<Vec<Wanted>> = Arc::new(
        req.topics
            .into_iter()
            .map(|t| Wanted {
                topic_name: t.topic,
                topic_id: t.topic_id,
                partitions: t
                    .partitions
                    .iter()
                    .map(|p| {
                        (
                            p.partition,
                            p.fetch_offset,
                            p.partition_max_bytes,
                            p.current_leader_epoch,
                        )
                    })
                    .collect(),
            })
            .collect(),
    );
    let max_bytes = (req.max_bytes.max(0) as usize).min(broker.config.fetch_max_bytes);
    let min_bytes = req.min_bytes.max(0) as usize;
    let read_committed = req.isolation_level == 1;
    let deadline = Instant::now() + Duration::from_millis(req.max_wait_ms.max(0) as u64);
    loop {
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
            || Instant::now() >= deadline
            || pass.watched.is_empty()
        {
            broker
                .metrics
                .fetch_bytes
                .fetch_add(pass.bytes as u64, Ordering::Relaxed);
            return FetchResponse::default().with_responses(pass.topics);
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
            let pass = blocking(move || read_pass(&b, &w, max_bytes, read_committed)).await;
            return match pass {
                Ok(p) => {
                    broker
                        .metrics
                        .fetch_bytes
                        .fetch_add(p.bytes as u64, Ordering::Relaxed);
                    FetchResponse::default().with_responses(p.topics)
                }
                Err(_) => FetchResponse::default().with_error_code(errors::internal().code()),
            };
        }
    }
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
            let records = match p
                .read(fetch_offset, limit, offsets.high_watermark, min_one)
                .and_then(|s| match s {
                    Some(slice) => slice.read().map_err(Into::into),
                    None => Ok(Bytes::new()),
                }) {
                Ok(r) => r,
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
                            .with_last_stable_offset(offsets.high_watermark)
                            .with_log_start_offset(offsets.log_start_offset),
                    );
                    continue;
                }
            };
            remaining = remaining.saturating_sub(records.len());
            pass.bytes += records.len();
            pass.watched.push((p.clone(), offsets.high_watermark));
            partitions.push(
                PartitionData::default()
                    .with_partition_index(index)
                    .with_high_watermark(offsets.high_watermark)
                    .with_last_stable_offset(offsets.high_watermark)
                    .with_log_start_offset(offsets.log_start_offset)
                    .with_aborted_transactions(if read_committed {
                        Some(Vec::new())
                    } else {
                        None
                    })
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
