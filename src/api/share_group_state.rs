//! The share-group state APIs a share-partition leader sends to the share coordinator of a
//! state key (Kafka's persister RPCs): InitializeShareGroupState, ReadShareGroupState,
//! WriteShareGroupState, DeleteShareGroupState and ReadShareGroupStateSummary. Each answers
//! per partition from this broker's [`ShareCoordinator`]: NOT_COORDINATOR for a key whose
//! `__share_group_state` partition another broker leads, COORDINATOR_LOAD_IN_PROGRESS while
//! it loads, UNKNOWN_TOPIC_OR_PARTITION for a partition the cluster does not have, and the
//! coordinator's fencing errors. Inter-broker: CLUSTER_ACTION on the cluster, or every
//! partition is answered CLUSTER_AUTHORIZATION_FAILED.

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
use crate::share::partition::StateBatch;
use crate::share::persister::Summary;
use crate::share::state_record::StateKey;

fn message(e: ResponseError) -> Option<StrBytes> {
    Some(StrBytes::from_string(e.to_string()))
}

/// The key of `partition` of `topic_id` in `group`, if the cluster has that partition.
fn key_of(
    broker: &Broker,
    group: &str,
    topic_id: Uuid,
    partition: i32,
) -> Result<StateKey, ResponseError> {
    let known = broker
        .topic_by_id(&topic_id)
        .is_some_and(|t| partition >= 0 && (partition as usize) < t.partitions.len());
    if !known {
        return Err(ResponseError::UnknownTopicOrPartition);
    }
    Ok(StateKey {
        group: group.to_string(),
        topic_id,
        partition,
    })
}

fn coordinator(s: &Services) -> (std::sync::Arc<Broker>, std::sync::Arc<ShareCoordinator>) {
    (s.broker.clone(), s.shares.persister.coordinator().clone())
}

/// Answers every partition of an InitializeShareGroupState with `f`.
fn initialize(
    r: &InitializeShareGroupStateRequest,
    f: impl Fn(Uuid, &init_req::PartitionData) -> Result<(), ResponseError>,
) -> InitializeShareGroupStateResponse {
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
                        Err(e) => base
                            .with_error_code(e.code())
                            .with_error_message(message(e)),
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
            |_, _| Err(CLUSTER_DENIED),
        )))
    }

    async fn handle(s: &Services, _ctx: &Context, r: Self::Request, _version: i16) -> Outcome {
        let (broker, c) = coordinator(s);
        let answer = blocking(move || {
            let group = r.group_id.to_string();
            initialize(&r, |topic_id, p| {
                let key = key_of(&broker, &group, topic_id, p.partition)?;
                c.initialize(&key, p.state_epoch, p.start_offset)
            })
        });
        Outcome::respond(answer.await.unwrap_or_default())
    }
}

/// Answers every partition of a ReadShareGroupState with `f`.
fn read_state(
    r: &ReadShareGroupStateRequest,
    f: impl Fn(
        Uuid,
        &read_req::PartitionData,
    ) -> Result<Option<crate::share::partition::Snapshot>, ResponseError>,
) -> ReadShareGroupStateResponse {
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
                        // Never initialized: Kafka's uninitialized start offset and state epoch.
                        Ok(None) => base.with_start_offset(-1).with_state_epoch(0),
                        Ok(Some(s)) => base
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
                        Err(e) => base
                            .with_error_code(e.code())
                            .with_error_message(message(e))
                            .with_start_offset(-1),
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
            Err(CLUSTER_DENIED)
        })))
    }

    async fn handle(s: &Services, _ctx: &Context, r: Self::Request, _version: i16) -> Outcome {
        let (broker, c) = coordinator(s);
        let answer = blocking(move || {
            let group = r.group_id.to_string();
            read_state(&r, |topic_id, p| {
                let key = key_of(&broker, &group, topic_id, p.partition)?;
                c.read(&key, p.leader_epoch)
            })
        });
        Outcome::respond(answer.await.unwrap_or_default())
    }
}

/// Answers every partition of a WriteShareGroupState with `f`.
fn write_state(
    r: &WriteShareGroupStateRequest,
    f: impl Fn(Uuid, &write_req::PartitionData) -> Result<(), ResponseError>,
) -> WriteShareGroupStateResponse {
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
                        Err(e) => base
                            .with_error_code(e.code())
                            .with_error_message(message(e)),
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
            |_, _| Err(CLUSTER_DENIED),
        )))
    }

    async fn handle(s: &Services, _ctx: &Context, r: Self::Request, _version: i16) -> Outcome {
        let (broker, c) = coordinator(s);
        let answer = blocking(move || {
            let group = r.group_id.to_string();
            write_state(&r, |topic_id, p| {
                let key = key_of(&broker, &group, topic_id, p.partition)?;
                let w = StateWrite {
                    state_epoch: p.state_epoch,
                    leader_epoch: p.leader_epoch,
                    start_offset: p.start_offset,
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
                    return Err(ResponseError::InvalidRequest);
                }
                c.write(&key, &w)
            })
        });
        Outcome::respond(answer.await.unwrap_or_default())
    }
}

/// Answers every partition of a DeleteShareGroupState with `f`.
fn delete_state(
    r: &DeleteShareGroupStateRequest,
    f: impl Fn(Uuid, &del_req::PartitionData) -> Result<(), ResponseError>,
) -> DeleteShareGroupStateResponse {
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
                        Err(e) => base
                            .with_error_code(e.code())
                            .with_error_message(message(e)),
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
            |_, _| Err(CLUSTER_DENIED),
        )))
    }

    async fn handle(s: &Services, _ctx: &Context, r: Self::Request, _version: i16) -> Outcome {
        let (_, c) = coordinator(s);
        let answer = blocking(move || {
            let group = r.group_id.to_string();
            // The topic may be gone already: its state is deleted all the same.
            delete_state(&r, |topic_id, p| {
                c.delete(&StateKey {
                    group: group.clone(),
                    topic_id,
                    partition: p.partition,
                })
            })
        });
        Outcome::respond(answer.await.unwrap_or_default())
    }
}

/// Answers every partition of a ReadShareGroupStateSummary with `f`.
fn summarize(
    r: &ReadShareGroupStateSummaryRequest,
    f: impl Fn(Uuid, &summary_req::PartitionData) -> Result<Option<Summary>, ResponseError>,
) -> ReadShareGroupStateSummaryResponse {
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
                        Ok(None) => base.with_start_offset(-1).with_leader_epoch(-1),
                        Ok(Some(s)) => base
                            .with_state_epoch(s.state_epoch)
                            .with_leader_epoch(s.leader_epoch)
                            .with_start_offset(s.start_offset)
                            .with_delivery_complete_count(
                                s.delivery_complete.clamp(0, i32::MAX as i64) as i32,
                            ),
                        Err(e) => base
                            .with_error_code(e.code())
                            .with_error_message(message(e))
                            .with_start_offset(-1)
                            .with_leader_epoch(-1),
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
            |_, _| Err(CLUSTER_DENIED),
        )))
    }

    async fn handle(s: &Services, _ctx: &Context, r: Self::Request, _version: i16) -> Outcome {
        let (broker, c) = coordinator(s);
        let answer = blocking(move || {
            let group = r.group_id.to_string();
            summarize(&r, |topic_id, p| {
                let key = key_of(&broker, &group, topic_id, p.partition)?;
                Ok(c.summary(&key)?.map(|s| Summary::of(&s)))
            })
        });
        Outcome::respond(answer.await.unwrap_or_default())
    }
}
