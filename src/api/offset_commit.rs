//! OffsetCommit: fenced by generation and member, stored durably in `__consumer_offsets`
//! before the answer.

use std::sync::Arc;

use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::{
    offset_commit_request, OffsetCommitRequest, OffsetCommitResponse, RequestKind, ResponseKind,
};
use kafka_protocol::ResponseError;

use crate::api::gate::{self, Gate, Who, GROUP_DENIED, TOPIC_DENIED};
use crate::api::{blocking, Api, Context, Outcome};
use crate::broker::Broker;
use crate::coordinator::GroupCoordinator;
use crate::security::acl::Operation as Op;
use crate::services::Services;

pub async fn handle(
    broker: Arc<Broker>,
    groups: &Arc<GroupCoordinator>,
    req: OffsetCommitRequest,
    version: i16,
) -> OffsetCommitResponse {
    let shape: Vec<(kafka_protocol::messages::TopicName, uuid::Uuid, Vec<i32>)> = req
        .topics
        .iter()
        .map(|t| {
            (
                t.name.clone(),
                t.topic_id,
                t.partitions.iter().map(|p| p.partition_index).collect(),
            )
        })
        .collect();
    let respond = |errors: Vec<Option<ResponseError>>| {
        let mut it = errors.into_iter();
        OffsetCommitResponse::default().with_topics(
            shape
                .iter()
                .map(|(name, id, parts)| {
                    OffsetCommitResponseTopic::default()
                        .with_name(name.clone())
                        .with_topic_id(*id)
                        .with_partitions(
                            parts
                                .iter()
                                .map(|&p| {
                                    OffsetCommitResponsePartition::default()
                                        .with_partition_index(p)
                                        .with_error_code(
                                            it.next().flatten().map(|e| e.code()).unwrap_or(0),
                                        )
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
    };
    let total: usize = shape.iter().map(|(_, _, p)| p.len()).sum();
    let coordinator = groups.clone();
    // Partitions that do not exist are refused here, as Kafka does before the coordinator.
    let known = |topic: &str, partition: i32| broker.partition(topic, partition).is_some();
    let mut slots: Vec<Option<ResponseError>> = Vec::with_capacity(total);
    let mut offsets: Vec<(String, i32, i64, i32, Option<String>)> = Vec::new();
    for t in &req.topics {
        for p in &t.partitions {
            if known(t.name.0.as_str(), p.partition_index) {
                slots.push(None);
                offsets.push((
                    t.name.0.to_string(),
                    p.partition_index,
                    p.committed_offset,
                    p.committed_leader_epoch,
                    p.committed_metadata.as_ref().map(|m| m.to_string()),
                ));
            } else {
                slots.push(Some(ResponseError::UnknownTopicOrPartition));
            }
        }
    }
    let group = req.group_id.0.to_string();
    let member = req.member_id.to_string();
    let instance = req.group_instance_id.as_ref().map(|i| i.to_string());
    let generation = req.generation_id_or_member_epoch;
    let unknown_group = if version >= 9 {
        ResponseError::GroupIdNotFound
    } else {
        ResponseError::IllegalGeneration
    };
    let result = blocking(move || {
        coordinator.commit_offsets(
            &group,
            &member,
            instance.as_deref(),
            generation,
            offsets,
            unknown_group,
        )
    })
    .await;
    // Merge the coordinator's answers into the slots of the partitions it saw.
    let merge = |answers: Vec<Option<ResponseError>>| {
        let mut it = answers.into_iter();
        slots
            .iter()
            .map(|s| if s.is_some() { *s } else { it.next().flatten() })
            .collect::<Vec<_>>()
    };
    let result = result.map(|r| r.map(merge));
    match result {
        Ok(Ok(errors)) => respond(errors),
        Ok(Err(e)) => respond(vec![Some(e); total]),
        Err(_) => respond(vec![Some(ResponseError::UnknownServerError); total]),
    }
}

/// OffsetCommit: READ on the group, then READ on each topic.
pub struct OffsetCommit;

impl Api for OffsetCommit {
    type Request = OffsetCommitRequest;

    fn authorize(who: &Who, mut r: OffsetCommitRequest, _version: i16) -> Gate {
        if !who.may_use_group(&r.group_id) {
            let topics = r.topics.iter().map(|t| refusal(t, GROUP_DENIED)).collect();
            return Gate::Answer(ResponseKind::OffsetCommit(
                OffsetCommitResponse::default().with_topics(topics),
            ));
        }
        let (ok, denied): (Vec<_>, Vec<_>) = r
            .topics
            .into_iter()
            .partition(|t| who.may_topic(Op::Read, &t.name, &t.topic_id));
        r.topics = ok;
        let refusals = denied.iter().map(|t| refusal(t, TOPIC_DENIED)).collect();
        gate::run_and_extend(
            RequestKind::OffsetCommit(r),
            refusals,
            |resp, mut extra| match resp {
                ResponseKind::OffsetCommit(mut o) => {
                    o.topics.append(&mut extra);
                    ResponseKind::OffsetCommit(o)
                }
                other => other,
            },
        )
    }

    async fn handle(s: &Services, _ctx: &Context, r: OffsetCommitRequest, version: i16) -> Outcome {
        Outcome::respond(handle(s.broker.clone(), &s.groups, r, version).await)
    }
}

/// A refused topic: every partition with `code`.
fn refusal(
    t: &offset_commit_request::OffsetCommitRequestTopic,
    code: ResponseError,
) -> OffsetCommitResponseTopic {
    OffsetCommitResponseTopic::default()
        .with_name(t.name.clone())
        .with_topic_id(t.topic_id)
        .with_partitions(
            t.partitions
                .iter()
                .map(|p| {
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code.code())
                })
                .collect(),
        )
}
