//! ListOffsets: earliest (-2), latest (-1), max timestamp (-3), earliest local (-4), latest
//! tiered (-5), earliest pending upload (-6) and by timestamp through the time index.

use std::sync::Arc;

use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{
    list_offsets_request, list_offsets_response, ListOffsetsRequest, ListOffsetsResponse,
    RequestKind, ResponseKind,
};
use kafka_protocol::ResponseError;

use crate::api::gate::{self, Gate, Who, CLUSTER_DENIED, TOPIC_DENIED};
use crate::api::{blocking, Api, Context, Outcome};
use crate::broker::{Broker, Topic};
use crate::security::acl::{Operation as Op, ResourceType as Res};
use crate::services::Services;
use crate::tiering::Tiering;

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;
const LATEST_TIERED: i64 = -5;
const EARLIEST_PENDING_UPLOAD: i64 = -6;

/// Kafka's `isListOffsetsTimestampUnsupported`: each special timestamp needs the version
/// that introduced it, and an unknown negative one is refused with UNSUPPORTED_VERSION.
fn timestamp_unsupported(timestamp: i64, version: i16) -> bool {
    let min_version = match timestamp {
        ts if ts >= 0 => return false,
        LATEST | EARLIEST => 1,
        MAX_TIMESTAMP => 7,
        EARLIEST_LOCAL => 8,
        LATEST_TIERED => 9,
        EARLIEST_PENDING_UPLOAD => 11,
        _ => return true,
    };
    version < min_version
}

pub async fn handle(
    broker: Arc<Broker>,
    tiering: Option<&Arc<Tiering>>,
    req: ListOffsetsRequest,
    version: i16,
) -> ListOffsetsResponse {
    let b = broker.clone();
    match blocking(move || list(&b, req, version)).await {
        Ok((mut topics, remote)) => {
            for r in remote {
                if let Some(tiering) = tiering {
                    lookup_remote(tiering, &mut topics, r, version).await;
                }
            }
            ListOffsetsResponse::default().with_topics(topics)
        }
        Err(e) => {
            tracing::error!(error = %e, "list offsets task failed");
            ListOffsetsResponse::default()
        }
    }
}

/// A timestamp lookup whose answer may lie in remote storage.
struct RemoteLookup {
    topic_slot: usize,
    partition_slot: usize,
    topic: Arc<Topic>,
    partition: i32,
    timestamp: i64,
    log_start: i64,
    local_start: i64,
}

async fn lookup_remote(
    tiering: &Tiering,
    topics: &mut [ListOffsetsTopicResponse],
    r: RemoteLookup,
    version: i16,
) {
    let Some(slot) = topics
        .get_mut(r.topic_slot)
        .and_then(|t| t.partitions.get_mut(r.partition_slot))
    else {
        return;
    };
    match tiering
        .offset_for_timestamp(
            &r.topic,
            r.partition,
            r.timestamp,
            r.log_start,
            r.local_start,
        )
        .await
    {
        Ok(Some(t)) => {
            slot.offset = t.offset;
            slot.timestamp = t.timestamp;
            slot.leader_epoch = if version >= 4 { t.leader_epoch } else { -1 };
        }
        Ok(None) => {}
        Err(e) => {
            tracing::warn!(topic = %r.topic.name, partition = r.partition, error = %e, "remote timestamp lookup failed");
            slot.error_code = ResponseError::KafkaStorageError.code();
            slot.offset = -1;
            slot.timestamp = -1;
        }
    }
}

fn answer(index: i32, error: ResponseError) -> ListOffsetsPartitionResponse {
    ListOffsetsPartitionResponse::default()
        .with_partition_index(index)
        .with_error_code(error.code())
        .with_timestamp(-1)
        .with_offset(-1)
        .with_leader_epoch(-1)
}

fn list(
    broker: &Broker,
    req: ListOffsetsRequest,
    version: i16,
) -> (Vec<ListOffsetsTopicResponse>, Vec<RemoteLookup>) {
    // leader_epoch exists from v4; older versions must leave it at its default.
    let epoch_field = |e: i32| if version >= 4 { e } else { -1 };
    let mut out = Vec::new();
    let mut remote = Vec::new();
    for t in req.topics {
        let topic = broker.topic(t.name.0.as_str());
        let mut partitions = Vec::new();
        for p in t.partitions {
            if timestamp_unsupported(p.timestamp, version) {
                partitions.push(answer(p.partition_index, ResponseError::UnsupportedVersion));
                continue;
            }
            let Some(partition) = topic
                .as_ref()
                .and_then(|tp| tp.partitions.get(usize::try_from(p.partition_index).ok()?))
                .cloned()
            else {
                partitions.push(answer(
                    p.partition_index,
                    ResponseError::UnknownTopicOrPartition,
                ));
                continue;
            };
            let epoch = partition.leader_epoch().0;
            if p.current_leader_epoch >= 0 && p.current_leader_epoch != epoch {
                let e = if p.current_leader_epoch > epoch {
                    ResponseError::UnknownLeaderEpoch
                } else {
                    ResponseError::FencedLeaderEpoch
                };
                partitions.push(answer(p.partition_index, e));
                continue;
            }
            // Kafka's `fetchOnlyFromLeader`: everyone but the debugging replica id (-2).
            if req.replica_id.0 != -2 && !partition.is_leader() {
                partitions.push(answer(
                    p.partition_index,
                    ResponseError::NotLeaderOrFollower,
                ));
                continue;
            }
            let offsets = partition.offsets();
            let found = |offset: i64, timestamp: i64, leader_epoch: i32| {
                ListOffsetsPartitionResponse::default()
                    .with_partition_index(p.partition_index)
                    .with_timestamp(timestamp)
                    .with_offset(offset)
                    .with_leader_epoch(epoch_field(leader_epoch))
            };
            let resp = match p.timestamp {
                // read_committed (isolation level 1) sees up to the last stable offset.
                // Replicas (followers, and the debugging id) see the log end offset.
                LATEST if req.replica_id.0 != -1 => found(offsets.log_end_offset.0, -1, epoch),
                LATEST if req.isolation_level == 1 => {
                    found(offsets.last_stable_offset.0, -1, epoch)
                }
                LATEST => found(offsets.high_watermark.0, -1, epoch),
                EARLIEST => {
                    let (offset, epoch) = partition.earliest_offset();
                    found(offset.0, -1, epoch.map_or(-1, |e| e.0))
                }
                EARLIEST_LOCAL => {
                    let (offset, epoch) = partition.earliest_local_offset();
                    found(offset.0, -1, epoch.map_or(-1, |e| e.0))
                }
                LATEST_TIERED => {
                    let (offset, epoch) = partition.latest_tiered_offset();
                    found(offset.0, -1, epoch.map_or(-1, |e| e.0))
                }
                EARLIEST_PENDING_UPLOAD => {
                    let (offset, epoch) = partition.earliest_pending_upload_offset();
                    found(offset.0, -1, epoch.map_or(-1, |e| e.0))
                }
                MAX_TIMESTAMP => match partition.max_timestamp_offset() {
                    Ok(Some(t)) => found(t.offset, t.timestamp, t.leader_epoch),
                    Ok(None) => found(-1, -1, -1),
                    Err(e) => {
                        tracing::error!(topic = %partition.topic, partition = partition.index, error = %e, "max timestamp lookup failed");
                        answer(p.partition_index, crate::log::ReadError::from(e).code())
                    }
                },
                ts if ts >= 0 => match {
                    let ((log_start, local_start), found) = partition.offset_for_timestamp(ts);
                    if let Some(t) = topic.as_ref().filter(|t| t.config.remote_storage_enable) {
                        if log_start < local_start {
                            remote.push(RemoteLookup {
                                topic_slot: out.len(),
                                partition_slot: partitions.len(),
                                topic: t.clone(),
                                partition: p.partition_index,
                                timestamp: ts,
                                log_start,
                                local_start,
                            });
                        }
                    }
                    found
                } {
                    Ok(Some(t)) => found(t.offset, t.timestamp, t.leader_epoch),
                    Ok(None) => found(-1, -1, -1),
                    Err(e) => {
                        tracing::error!(topic = %partition.topic, partition = partition.index, error = %e, "timestamp lookup failed");
                        answer(p.partition_index, crate::log::ReadError::from(e).code())
                    }
                },
                _ => answer(p.partition_index, ResponseError::InvalidRequest),
            };
            partitions.push(resp);
        }
        out.push(
            ListOffsetsTopicResponse::default()
                .with_name(t.name)
                .with_partitions(partitions),
        );
    }
    (out, remote)
}

/// ListOffsets: DESCRIBE on each topic; followers need CLUSTER_ACTION.
pub struct ListOffsets;

impl Api for ListOffsets {
    type Request = ListOffsetsRequest;

    fn authorize(who: &Who, mut r: ListOffsetsRequest, _version: i16) -> Gate {
        if r.replica_id.0 >= 0 && !who.may_cluster(Op::ClusterAction) {
            let topics = r
                .topics
                .iter()
                .map(|t| refusal(t, CLUSTER_DENIED))
                .collect();
            return Gate::Answer(ResponseKind::ListOffsets(
                ListOffsetsResponse::default().with_topics(topics),
            ));
        }
        let (ok, denied): (Vec<_>, Vec<_>) = r
            .topics
            .into_iter()
            .partition(|t| who.may(Op::Describe, Res::Topic, &t.name));
        r.topics = ok;
        let refusals = denied.iter().map(|t| refusal(t, TOPIC_DENIED)).collect();
        gate::run_and_extend(
            RequestKind::ListOffsets(r),
            refusals,
            |resp, mut extra| match resp {
                ResponseKind::ListOffsets(mut l) => {
                    l.topics.append(&mut extra);
                    ResponseKind::ListOffsets(l)
                }
                other => other,
            },
        )
    }

    async fn handle(s: &Services, _ctx: &Context, r: ListOffsetsRequest, version: i16) -> Outcome {
        Outcome::respond(handle(s.broker.clone(), s.tiering.as_ref(), r, version).await)
    }
}

/// A refused topic: every partition with `code`.
fn refusal(
    t: &list_offsets_request::ListOffsetsTopic,
    code: ResponseError,
) -> list_offsets_response::ListOffsetsTopicResponse {
    list_offsets_response::ListOffsetsTopicResponse::default()
        .with_name(t.name.clone())
        .with_partitions(
            t.partitions
                .iter()
                .map(|p| {
                    list_offsets_response::ListOffsetsPartitionResponse::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code.code())
                        .with_timestamp(-1)
                        .with_offset(-1)
                        .with_leader_epoch(-1)
                })
                .collect(),
        )
}
