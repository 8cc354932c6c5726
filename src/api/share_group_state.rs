//! The share-group state APIs a share-partition leader sends to the share coordinator of a
//! state key (Kafka's persister RPCs): InitializeShareGroupState, ReadShareGroupState,
//! WriteShareGroupState, DeleteShareGroupState and ReadShareGroupStateSummary. Each answers
//! per partition from this broker's [`ShareCoordinator`] with Kafka 4.4's codes and messages
//! (checked against it by `tests/interop/test_share_group_state_apis.py`): NOT_COORDINATOR for
//! a key whose `__share_group_state` partition another broker leads,
//! COORDINATOR_LOAD_IN_PROGRESS while it loads, INVALID_REQUEST for a read or write of a
//! share-partition never initialized (checked before the topic), UNKNOWN_TOPIC_OR_PARTITION
//! for a partition the cluster does not have, and the coordinator's fencing errors. A request
//! with an empty group id is answered with no results, as Kafka does. Inter-broker:
//! CLUSTER_ACTION on the cluster, or every partition is answered
//! CLUSTER_AUTHORIZATION_FAILED.

use kafka_protocol::messages::{
    delete_share_group_state_request as del_req, delete_share_group_state_response as del,
    initialize_share_group_state_request as init_req,
    initialize_share_group_state_response as init, read_share_group_state_request as read_req,
    read_share_group_state_response as read, read_share_group_state_summary_request as summary_req,
    read_share_group_state_summary_response as summary,
    write_share_group_state_request as write_req, write_share_group_state_response as write,
    DeleteShareGroupStateRequest, DeleteShareGroupStateResponse, InitializeShareGroupStateRequest,
    InitializeShareGroupStateResponse, ReadShareGroupStateRequest, ReadShareGroupStateResponse,
    ReadShareGroupStateSummaryRequest, ReadShareGroupStateSummaryResponse, RequestKind,
    ResponseKind, WriteShareGroupStateRequest, WriteShareGroupStateResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use uuid::Uuid;

use crate::api::gate::{Gate, Who, CLUSTER_DENIED};
use crate::api::{blocking, Api, Context, Outcome};
use crate::broker::Broker;
use crate::security::acl::Operation as Op;
use crate::services::Services;
use crate::share::coordinator::{ShareCoordinator, StateWrite};
use crate::share::partition::{Snapshot, StateBatch};
use crate::share::state_record::StateKey;

/// A partition's error with Kafka's message.
type Refusal = (ResponseError, &'static str);

const READ_UNINITIALIZED: &str = "Read operation on uninitialized share partition not allowed.";
const WRITE_UNINITIALIZED: &str = "Write operation on uninitialized share partition not allowed.";
const NEGATIVE_LEADER_EPOCH: &str = "The leader epoch cannot be a negative number.";

/// `e` with Kafka's default message (`Errors.java`).
fn refusal(e: ResponseError) -> Refusal {
    let message = match e {
        ResponseError::UnknownTopicOrPartition => {
            "This server does not host this topic-partition."
        }
        ResponseError::FencedLeaderEpoch => {
            "The leader epoch in the request is older than the epoch on the broker."
        }
        ResponseError::FencedStateEpoch => {
            "The coordinator rejected the request because the state epoch did not match."
        }
        ResponseError::NotCoordinator => "This is not the correct coordinator.",
        ResponseError::CoordinatorLoadInProgress => {
            "The coordinator is loading and hence can't process requests."
        }
        ResponseError::CoordinatorNotAvailable => "The coordinator is not available.",
        ResponseError::ClusterAuthorizationFailed => "Cluster authorization failed.",
        ResponseError::RecordListTooLarge => {
            "The request included message batch larger than the configured segment size on the server."
        }
        _ => "The server experienced an unexpected error when processing the request.",
    };
    (e, message)
}

fn message(m: &'static str) -> Option<StrBytes> {
    Some(StrBytes::from_static_str(m))
}

/// Whether the cluster has `partition` of `topic_id`.
fn exists(broker: &Broker, topic_id: Uuid, partition: i32) -> bool {
    broker
        .topic_by_id(&topic_id)
        .is_some_and(|t| partition >= 0 && (partition as usize) < t.partitions.len())
}

fn key(group: &str, topic_id: Uuid, partition: i32) -> StateKey {
    StateKey {
        group: group.to_string(),
        topic_id,
        partition,
    }
}

fn coordinator(s: &Services) -> (std::sync::Arc<Broker>, std::sync::Arc<ShareCoordinator>) {
    (s.broker.clone(), s.shares.persister.coordinator().clone())
}

/// Answers every partition of an InitializeShareGroupState with `f`.
fn initialize(
    r: &InitializeShareGroupStateRequest,
    f: impl Fn(Uuid, &init_req::PartitionData) -> Result<(), Refusal>,
) -> InitializeShareGroupStateResponse {
    if r.group_id.is_empty() {
        return InitializeShareGroupStateResponse::default();
    }
    let results = r
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let base = init::PartitionResult::default().with_partition(p.partition);
                    match f(t.topic_id, p) {
                        Ok(()) => base,
                        Err((e, m)) => base
                            .with_error_code(e.code())
                            .with_error_message(message(m)),
                    }
                })
                .collect();
            init::InitializeStateResult::default()
                .with_topic_id(t.topic_id)
                .with_partitions(partitions)
        })
        .collect();
    InitializeShareGroupStateResponse::default().with_results(results)
}

pub struct InitializeShareGroupState;

impl Api for InitializeShareGroupState {
    type Request = InitializeShareGroupStateRequest;

    fn authorize(who: &Who, r: Self::Request, _version: i16) -> Gate {
        if who.may_cluster(Op::ClusterAction) {
            return Gate::Run(RequestKind::InitializeShareGroupState(r), None);
        }
        Gate::Answer(ResponseKind::InitializeShareGroupState(initialize(
            &r,
            |_, _| Err(refusal(CLUSTER_DENIED)),
        )))
    }

    async fn handle(s: &Services, _ctx: &Context, r: Self::Request, _version: i16) -> Outcome {
        let (broker, c) = coordinator(s);
        let answer = blocking(move || {
            let group = r.group_id.to_string();
            initialize(&r, |topic_id, p| {
                if !exists(&broker, topic_id, p.partition) {
                    return Err(refusal(ResponseError::UnknownTopicOrPartition));
                }
                c.initialize(
                    &key(&group, topic_id, p.partition),
                    p.state_epoch,
                    p.start_offset,
                )
                .map_err(refusal)
            })
        });
        Outcome::respond(answer.await.unwrap_or_default())
    }
}

/// Answers every partition of a ReadShareGroupState with `f`.
fn read_state(
    r: &ReadShareGroupStateRequest,
    f: impl Fn(Uuid, &read_req::PartitionData) -> Result<Snapshot, Refusal>,
) -> ReadShareGroupStateResponse {
    if r.group_id.is_empty() {
        return ReadShareGroupStateResponse::default();
    }
    let results = r
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let base = read::PartitionResult::default().with_partition(p.partition);
                    match f(t.topic_id, p) {
                        Ok(s) => base
                            .with_state_epoch(s.state_epoch)
                            .with_start_offset(s.start_offset)
                            .with_state_batches(
                                s.state_batches
                                    .iter()
                                    .map(|b| {
                                        read::StateBatch::default()
                                            .with_first_offset(b.first_offset)
                                            .with_last_offset(b.last_offset)
                                            .with_delivery_state(b.delivery_state)
                                            .with_delivery_count(b.delivery_count)
                                    })
                                    .collect(),
                            ),
                        // Kafka's error answer: the schema's zeros behind the error.
                        Err((e, m)) => base
                            .with_error_code(e.code())
                            .with_error_message(message(m)),
                    }
                })
                .collect();
            read::ReadStateResult::default()
                .with_topic_id(t.topic_id)
                .with_partitions(partitions)
        })
        .collect();
    ReadShareGroupStateResponse::default().with_results(results)
}

pub struct ReadShareGroupState;

impl Api for ReadShareGroupState {
    type Request = ReadShareGroupStateRequest;

    fn authorize(who: &Who, r: Self::Request, _version: i16) -> Gate {
        if who.may_cluster(Op::ClusterAction) {
            return Gate::Run(RequestKind::ReadShareGroupState(r), None);
        }
        Gate::Answer(ResponseKind::ReadShareGroupState(read_state(&r, |_, _| {
            Err(refusal(CLUSTER_DENIED))
        })))
    }

    async fn handle(s: &Services, _ctx: &Context, r: Self::Request, _version: i16) -> Outcome {
        let (broker, c) = coordinator(s);
        let answer = blocking(move || {
            let group = r.group_id.to_string();
            read_state(&r, |topic_id, p| {
                if p.leader_epoch < 0 {
                    return Err((ResponseError::InvalidRequest, NEGATIVE_LEADER_EPOCH));
                }
                let state = c
                    .read(&key(&group, topic_id, p.partition), p.leader_epoch)
                    .map_err(refusal)?
                    .ok_or((ResponseError::InvalidRequest, READ_UNINITIALIZED))?;
                if !exists(&broker, topic_id, p.partition) {
                    return Err(refusal(ResponseError::UnknownTopicOrPartition));
                }
                Ok(state)
            })
        });
        Outcome::respond(answer.await.unwrap_or_default())
    }
}

/// Answers every partition of a WriteShareGroupState with `f`.
fn write_state(
    r: &WriteShareGroupStateRequest,
    f: impl Fn(Uuid, &write_req::PartitionData) -> Result<(), Refusal>,
) -> WriteShareGroupStateResponse {
    if r.group_id.is_empty() {
        return WriteShareGroupStateResponse::default();
    }
    let results = r
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let base = write::PartitionResult::default().with_partition(p.partition);
                    match f(t.topic_id, p) {
                        Ok(()) => base,
                        Err((e, m)) => base
                            .with_error_code(e.code())
                            .with_error_message(message(m)),
                    }
                })
                .collect();
            write::WriteStateResult::default()
                .with_topic_id(t.topic_id)
                .with_partitions(partitions)
        })
        .collect();
    WriteShareGroupStateResponse::default().with_results(results)
}

pub struct WriteShareGroupState;

impl Api for WriteShareGroupState {
    type Request = WriteShareGroupStateRequest;

    fn authorize(who: &Who, r: Self::Request, _version: i16) -> Gate {
        if who.may_cluster(Op::ClusterAction) {
            return Gate::Run(RequestKind::WriteShareGroupState(r), None);
        }
        Gate::Answer(ResponseKind::WriteShareGroupState(write_state(
            &r,
            |_, _| Err(refusal(CLUSTER_DENIED)),
        )))
    }

    async fn handle(s: &Services, _ctx: &Context, r: Self::Request, _version: i16) -> Outcome {
        let (broker, c) = coordinator(s);
        let answer = blocking(move || {
            let group = r.group_id.to_string();
            write_state(&r, |topic_id, p| {
                let k = key(&group, topic_id, p.partition);
                let w = StateWrite {
                    state_epoch: p.state_epoch,
                    leader_epoch: p.leader_epoch,
                    start_offset: p.start_offset,
                    delivery_complete_count: p.delivery_complete_count,
                    batches: p
                        .state_batches
                        .iter()
                        .map(|b| StateBatch {
                            first_offset: b.first_offset,
                            last_offset: b.last_offset,
                            delivery_state: b.delivery_state,
                            delivery_count: b.delivery_count,
                        })
                        .collect(),
                };
                if w.batches.iter().any(|b| b.last_offset < b.first_offset) {
                    return Err((
                        ResponseError::InvalidRequest,
                        "A state batch ends before it starts.",
                    ));
                }
                // The "uninitialized" answer comes before the topic's.
                if !exists(&broker, topic_id, p.partition) {
                    return match c.summary(&k).map_err(refusal)? {
                        None => Err((ResponseError::InvalidRequest, WRITE_UNINITIALIZED)),
                        Some(_) => Err(refusal(ResponseError::UnknownTopicOrPartition)),
                    };
                }
                c.write(&k, &w).map_err(|e| match e {
                    ResponseError::InvalidRequest => (e, WRITE_UNINITIALIZED),
                    other => refusal(other),
                })
            })
        });
        Outcome::respond(answer.await.unwrap_or_default())
    }
}

/// Answers every partition of a DeleteShareGroupState with `f`.
fn delete_state(
    r: &DeleteShareGroupStateRequest,
    f: impl Fn(Uuid, &del_req::PartitionData) -> Result<(), Refusal>,
) -> DeleteShareGroupStateResponse {
    if r.group_id.is_empty() {
        return DeleteShareGroupStateResponse::default();
    }
    let results = r
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let base = del::PartitionResult::default().with_partition(p.partition);
                    match f(t.topic_id, p) {
                        Ok(()) => base,
                        Err((e, m)) => base
                            .with_error_code(e.code())
                            .with_error_message(message(m)),
                    }
                })
                .collect();
            del::DeleteStateResult::default()
                .with_topic_id(t.topic_id)
                .with_partitions(partitions)
        })
        .collect();
    DeleteShareGroupStateResponse::default().with_results(results)
}

pub struct DeleteShareGroupState;

impl Api for DeleteShareGroupState {
    type Request = DeleteShareGroupStateRequest;

    fn authorize(who: &Who, r: Self::Request, _version: i16) -> Gate {
        if who.may_cluster(Op::ClusterAction) {
            return Gate::Run(RequestKind::DeleteShareGroupState(r), None);
        }
        Gate::Answer(ResponseKind::DeleteShareGroupState(delete_state(
            &r,
            |_, _| Err(refusal(CLUSTER_DENIED)),
        )))
    }

    async fn handle(s: &Services, _ctx: &Context, r: Self::Request, _version: i16) -> Outcome {
        let (broker, c) = coordinator(s);
        let answer = blocking(move || {
            let group = r.group_id.to_string();
            delete_state(&r, |topic_id, p| {
                if !exists(&broker, topic_id, p.partition) {
                    return Err(refusal(ResponseError::UnknownTopicOrPartition));
                }
                c.delete(&key(&group, topic_id, p.partition))
                    .map_err(refusal)
            })
        });
        Outcome::respond(answer.await.unwrap_or_default())
    }
}

/// Answers every partition of a ReadShareGroupStateSummary with `f` (`None`: never
/// initialized).
fn summarize(
    r: &ReadShareGroupStateSummaryRequest,
    f: impl Fn(Uuid, &summary_req::PartitionData) -> Result<Option<Snapshot>, Refusal>,
) -> ReadShareGroupStateSummaryResponse {
    if r.group_id.is_empty() {
        return ReadShareGroupStateSummaryResponse::default();
    }
    let results = r
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let base = summary::PartitionResult::default().with_partition(p.partition);
                    match f(t.topic_id, p) {
                        Ok(None) => base.with_start_offset(-1).with_delivery_complete_count(-1),
                        Ok(Some(s)) => base
                            .with_state_epoch(s.state_epoch)
                            .with_leader_epoch(s.leader_epoch)
                            .with_start_offset(s.start_offset)
                            .with_delivery_complete_count(s.delivery_complete_count),
                        Err((e, m)) => base
                            .with_error_code(e.code())
                            .with_error_message(message(m)),
                    }
                })
                .collect();
            summary::ReadStateSummaryResult::default()
                .with_topic_id(t.topic_id)
                .with_partitions(partitions)
        })
        .collect();
    ReadShareGroupStateSummaryResponse::default().with_results(results)
}

pub struct ReadShareGroupStateSummary;

impl Api for ReadShareGroupStateSummary {
    type Request = ReadShareGroupStateSummaryRequest;

    fn authorize(who: &Who, r: Self::Request, _version: i16) -> Gate {
        if who.may_cluster(Op::ClusterAction) {
            return Gate::Run(RequestKind::ReadShareGroupStateSummary(r), None);
        }
        Gate::Answer(ResponseKind::ReadShareGroupStateSummary(summarize(
            &r,
            |_, _| Err(refusal(CLUSTER_DENIED)),
        )))
    }

    async fn handle(s: &Services, _ctx: &Context, r: Self::Request, _version: i16) -> Outcome {
        let (broker, c) = coordinator(s);
        let answer = blocking(move || {
            let group = r.group_id.to_string();
            summarize(&r, |topic_id, p| {
                if !exists(&broker, topic_id, p.partition) {
                    return Err(refusal(ResponseError::UnknownTopicOrPartition));
                }
                c.summary(&key(&group, topic_id, p.partition))
                    .map_err(refusal)
            })
        });
        Outcome::respond(answer.await.unwrap_or_default())
    }
}
