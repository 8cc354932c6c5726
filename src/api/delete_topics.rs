//! DeleteTopics: by name (v0-5) or by name or id (v6+).

use std::sync::Arc;

use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{
    DeleteTopicsRequest, DeleteTopicsResponse, RequestKind, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use uuid::Uuid;

use crate::api::gate::{self, Gate, Who, TOPIC_DENIED};
use crate::api::{blocking, errors, Api, Context, Outcome};
use crate::broker::Broker;
use crate::security::acl::{Operation as Op, ResourceType as Res};
use crate::services::Services;

pub async fn handle(
    broker: Arc<Broker>,
    req: DeleteTopicsRequest,
    version: i16,
) -> DeleteTopicsResponse {
    let b = broker.clone();
    match blocking(move || delete(&b, req, version)).await {
        Ok(responses) => DeleteTopicsResponse::default().with_responses(responses),
        Err(e) => {
            tracing::error!(error = %e, "delete topics task failed");
            DeleteTopicsResponse::default()
        }
    }
}

fn delete(broker: &Broker, req: DeleteTopicsRequest, version: i16) -> Vec<DeletableTopicResult> {
    let targets: Vec<(Option<String>, Uuid)> = if version >= 6 {
        req.topics
            .into_iter()
            .map(|t| (t.name.map(|n| n.0.to_string()), t.topic_id))
            .collect()
    } else {
        req.topic_names
            .into_iter()
            .map(|n| (Some(n.0.to_string()), Uuid::nil()))
            .collect()
    };
    let mut out = Vec::new();
    for (name, id) in targets {
        let resolved = match &name {
            Some(n) => broker
                .topic(n)
                .map(|t| t.name.clone())
                .ok_or(ResponseError::UnknownTopicOrPartition),
            None => broker
                .topic_by_id(&id)
                .map(|t| t.name.clone())
                .ok_or(ResponseError::UnknownTopicId),
        };
        let result = DeletableTopicResult::default()
            .with_name(name.clone().map(|n| TopicName(StrBytes::from_string(n))))
            .with_topic_id(id);
        match resolved {
            Err(code) => out.push(result.with_error_code(code.code())),
            Ok(topic_name) => match broker.delete_topic(&topic_name) {
                Ok(deleted_id) => out.push(
                    result
                        .with_name(Some(TopicName(StrBytes::from_string(topic_name))))
                        .with_topic_id(deleted_id),
                ),
                Err(e) => out.push(
                    result
                        .with_error_code(errors::topic_error(&e).code())
                        .with_error_message(Some(StrBytes::from_string(e.to_string()))),
                ),
            },
        }
    }
    out
}

/// DeleteTopics: DELETE on each topic, by name or id.
pub struct DeleteTopics;

impl Api for DeleteTopics {
    type Request = DeleteTopicsRequest;

    fn authorize(who: &Who, mut r: DeleteTopicsRequest, _version: i16) -> Gate {
        let (ok, denied): (Vec<_>, Vec<_>) = r.topics.into_iter().partition(|t| {
            who.may_topic(
                Op::Delete,
                t.name.as_ref().map_or("", |n| n.as_str()),
                &t.topic_id,
            )
        });
        r.topics = ok;
        let (ok_names, denied_names): (Vec<_>, Vec<_>) = r
            .topic_names
            .into_iter()
            .partition(|n| who.may(Op::Delete, Res::Topic, n));
        r.topic_names = ok_names;
        let refusals = denied
            .into_iter()
            .map(|t| (t.name, t.topic_id))
            .chain(denied_names.into_iter().map(|n| (Some(n), Uuid::nil())))
            .map(|(name, id)| {
                DeletableTopicResult::default()
                    .with_name(name)
                    .with_topic_id(id)
                    .with_error_code(TOPIC_DENIED.code())
                    .with_error_message(gate::message(TOPIC_DENIED))
            })
            .collect();
        gate::run_and_extend(
            RequestKind::DeleteTopics(r),
            refusals,
            |resp, mut extra| match resp {
                ResponseKind::DeleteTopics(mut d) => {
                    d.responses.append(&mut extra);
                    ResponseKind::DeleteTopics(d)
                }
                other => other,
            },
        )
    }

    async fn handle(s: &Services, _ctx: &Context, r: DeleteTopicsRequest, version: i16) -> Outcome {
        Outcome::respond(handle(s.broker.clone(), r, version).await)
    }
}
