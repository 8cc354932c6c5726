//! AlterShareGroupOffsets (KIP-932): sets the start offset of a share group's share-partitions
//! (`kafka-share-groups --reset-offsets`), only while the group has no members; the new start
//! is persisted before the answer.

use std::sync::Arc;

use kafka_protocol::messages::alter_share_group_offsets_response::{
    AlterShareGroupOffsetsResponsePartition as Partition,
    AlterShareGroupOffsetsResponseTopic as Topic,
};
use kafka_protocol::messages::{
    AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse, RequestKind, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::api::describe_share_group_offsets::{refuse_offset_change, UNKNOWN_PARTITION};
use crate::api::gate::{self, Gate, Who, GROUP_DENIED, TOPIC_DENIED};
use crate::api::{blocking, errors, Api, Context, Outcome};
use crate::broker::Broker;
use crate::coordinator::GroupCoordinator;
use crate::security::acl::{Operation as Op, ResourceType as Res};
use crate::services::Services;
use crate::share::ShareService;

fn refuse(code: ResponseError, message: Option<String>) -> AlterShareGroupOffsetsResponse {
    AlterShareGroupOffsetsResponse::default()
        .with_error_code(code.code())
        .with_error_message(message.map(StrBytes::from_string))
}

/// Kafka's message for an unknown topic or partition; none otherwise.
fn message_of(error: Option<ResponseError>) -> Option<StrBytes> {
    (error == Some(ResponseError::UnknownTopicOrPartition))
        .then(|| StrBytes::from_static_str(UNKNOWN_PARTITION))
}

/// Blocking (persists).
pub fn handle(
    broker: &Broker,
    groups: &GroupCoordinator,
    shares: &ShareService,
    req: AlterShareGroupOffsetsRequest,
) -> AlterShareGroupOffsetsResponse {
    let group = req.group_id.0.to_string();
    if let Some((code, message)) = refuse_offset_change(groups, shares, &group, true) {
        return refuse(code, message);
    }
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let topic = broker.topic(&t.topic_name);
            let partitions = t
                .partitions
                .into_iter()
                .map(|p| {
                    let result = match &topic {
                        None => Err(ResponseError::UnknownTopicOrPartition),
                        Some(topic) => shares.reset_start_offset(
                            &group,
                            topic,
                            p.partition_index,
                            p.start_offset,
                        ),
                    };
                    Partition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(result.err().map_or(0, |e| e.code()))
                        .with_error_message(message_of(result.err()))
                        .with_error_message(message_of(result.err()))
                })
                .collect();
            Topic::default()
                .with_topic_name(t.topic_name)
                .with_topic_id(topic.map(|t| t.id).unwrap_or_default())
                .with_partitions(partitions)
        })
        .collect();
    AlterShareGroupOffsetsResponse::default().with_responses(topics)
}

/// AlterShareGroupOffsets: READ on the group and on each topic.
pub struct AlterShareGroupOffsets;

impl Api for AlterShareGroupOffsets {
    type Request = AlterShareGroupOffsetsRequest;

    fn authorize(who: &Who, mut r: AlterShareGroupOffsetsRequest, _version: i16) -> Gate {
        if !who.may(Op::Read, Res::Group, &r.group_id) {
            return Gate::Answer(ResponseKind::AlterShareGroupOffsets(refuse(
                GROUP_DENIED,
                Some(crate::api::errors::GROUP_AUTHORIZATION_FAILED.into()),
            )));
        }
        let (ok, denied): (Vec<_>, Vec<_>) = r
            .topics
            .into_iter()
            .partition(|t| who.may(Op::Read, Res::Topic, &t.topic_name));
        r.topics = ok;
        let refusals: Vec<Topic> = denied
            .into_iter()
            .map(|t| {
                // Kafka names an existing topic by its id even when refusing it.
                let id = who.broker.topic(&t.topic_name).map(|t| t.id);
                Topic::default()
                    .with_topic_id(id.unwrap_or_default())
                    .with_topic_name(t.topic_name)
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|p| {
                                Partition::default()
                                    .with_partition_index(p.partition_index)
                                    .with_error_code(TOPIC_DENIED.code())
                                    .with_error_message(Some(StrBytes::from_static_str(
                                        crate::api::errors::TOPIC_AUTHORIZATION_FAILED,
                                    )))
                            })
                            .collect(),
                    )
            })
            .collect();
        Gate::Run(
            RequestKind::AlterShareGroupOffsets(r),
            gate::finish(move |resp| match resp {
                ResponseKind::AlterShareGroupOffsets(mut a) => {
                    a.responses.extend(refusals);
                    ResponseKind::AlterShareGroupOffsets(a)
                }
                other => other,
            }),
        )
    }

    async fn handle(
        s: &Services,
        _ctx: &Context,
        r: AlterShareGroupOffsetsRequest,
        _version: i16,
    ) -> Outcome {
        let (broker, groups, shares): (Arc<Broker>, Arc<GroupCoordinator>, Arc<ShareService>) =
            (s.broker.clone(), s.groups.clone(), s.shares.clone());
        let response = blocking(move || handle(&broker, &groups, &shares, r))
            .await
            .unwrap_or_else(|_| refuse(errors::internal(), None));
        Outcome::respond(response)
    }
}
