//! DeleteTopics: by name (v0-5) or by name or id (v6+).

use std::sync::Arc;

use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{DeleteTopicsRequest, DeleteTopicsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use uuid::Uuid;

use crate::api::{blocking, errors};
use crate::broker::Broker;

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
