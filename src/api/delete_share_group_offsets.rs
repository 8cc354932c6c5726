//! DeleteShareGroupOffsets (KIP-932): forgets a share group's state of whole topics
//! (`kafka-share-groups --delete-offsets`), only while the group has no members; the next
//! member to fetch starts where `share.auto.offset.reset` says.

use std::sync::Arc;

use kafka_protocol::messages::delete_share_group_offsets_response::DeleteShareGroupOffsetsResponseTopic as Topic;
use kafka_protocol::messages::{
    DeleteShareGroupOffsetsRequest, DeleteShareGroupOffsetsResponse, RequestKind, ResponseKind,
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

fn refuse(code: ResponseError, message: Option<String>) -> DeleteShareGroupOffsetsResponse {
    DeleteShareGroupOffsetsResponse::default()
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
    req: DeleteShareGroupOffsetsRequest,
) -> DeleteShareGroupOffsetsResponse {
    let group = req.group_id.0.to_string();
    if let Some((code, message)) = refuse_offset_change(groups, shares, &group, false) {
        return refuse(code, message);
    }
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let topic = broker.topic(&t.topic_name);
            let result = match &topic {
                None => Err(ResponseError::UnknownTopicOrPartition),
                Some(topic) => shares.delete_topic_state(&group, topic.id),
            };
            Topic::default()
                .with_topic_name(t.topic_name)
                .with_topic_id(topic.map(|t| t.id).unwrap_or_default())
                .with_error_code(result.err().map_or(0, |e| e.code()))
                .with_error_message(message_of(result.err()))
        })
        .collect();
    DeleteShareGroupOffsetsResponse::default().with_responses(topics)
}

/// DeleteShareGroupOffsets: DELETE on the group, READ on each topic.
pub struct DeleteShareGroupOffsets;

impl Api for DeleteShareGroupOffsets {
    type Request = DeleteShareGroupOffsetsRequest;

    fn authorize(who: &Who, mut r: DeleteShareGroupOffsetsRequest, _version: i16) -> Gate {
        if !who.may(Op::Delete, Res::Group, &r.group_id) {
            return Gate::Answer(ResponseKind::DeleteShareGroupOffsets(refuse(
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
                Topic::default()
                    .with_topic_name(t.topic_name)
                    .with_error_code(TOPIC_DENIED.code())
                    .with_error_message(Some(StrBytes::from_static_str(
                        crate::api::errors::TOPIC_AUTHORIZATION_FAILED,
                    )))
            })
            .collect();
        Gate::Run(
            RequestKind::DeleteShareGroupOffsets(r),
            gate::finish(move |resp| match resp {
                ResponseKind::DeleteShareGroupOffsets(mut d) => {
                    d.responses.extend(refusals);
                    ResponseKind::DeleteShareGroupOffsets(d)
                }
                other => other,
            }),
        )
    }

    async fn handle(
        s: &Services,
        _ctx: &Context,
        r: DeleteShareGroupOffsetsRequest,
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
