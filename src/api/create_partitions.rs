//! CreatePartitions: grows topics; shrinking, no-op counts and bad assignments are refused
//! with INVALID_PARTITIONS / INVALID_REPLICA_ASSIGNMENT as Kafka does.

use std::sync::Arc;

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{
    CreatePartitionsRequest, CreatePartitionsResponse, RequestKind, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::api::gate::{self, Gate, Who, TOPIC_DENIED};
use crate::api::{blocking, errors, Api, Context, Outcome};
use crate::broker::Broker;
use crate::controller::ClusterControl;
use crate::security::acl::{Operation as Op, ResourceType as Res};
use crate::services::Services;

pub async fn handle(
    broker: Arc<Broker>,
    cluster: Option<&Arc<ClusterControl>>,
    req: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let b = broker.clone();
    let cluster = cluster.cloned();
    let results = blocking(move || {
        let mut out = Vec::new();
        for t in req.topics {
            let name = t.name.0.to_string();
            let result = CreatePartitionsTopicResult::default().with_name(t.name.clone());
            if let (Some(c), Some(assignments)) = (&cluster, &t.assignments) {
                let replicas: Vec<Vec<i32>> = assignments
                    .iter()
                    .map(|a| a.broker_ids.iter().map(|id| id.0).collect())
                    .collect();
                let r = crate::controller::admin::create_partitions(
                    c,
                    &name,
                    t.count,
                    req.validate_only,
                    Some(replicas),
                );
                out.push(match r {
                    Ok(()) => result,
                    Err(e) => result
                        .with_error_code(errors::topic_error(&e).code())
                        .with_error_message(Some(StrBytes::from_string(e.to_string()))),
                });
                continue;
            }
            if let Some(assignments) = &t.assignments {
                let current = b.topic(&name).map(|x| x.partitions.len() as i32).unwrap_or(0);
                let me = b.config.node_id;
                if assignments.len() as i32 != t.count - current || assignments.iter().any(|a| a.broker_ids.is_empty() || a.broker_ids.iter().any(|id| id.0 != me)) {
                    out.push(result.with_error_code(ResponseError::InvalidReplicaAssignment.code()).with_error_message(Some(StrBytes::from_string(format!(
                        "Increasing the number of partitions by {} but {} assignments provided, or an assignment names a broker other than {me}.",
                        t.count - current,
                        assignments.len()
                    )))));
                    continue;
                }
            }
            match b.create_partitions(&name, t.count, req.validate_only) {
                Ok(()) => out.push(result),
                Err(e) => out.push(result.with_error_code(errors::topic_error(&e).code()).with_error_message(Some(StrBytes::from_string(e.to_string())))),
            }
        }
        out
    })
    .await
    .unwrap_or_default();
    CreatePartitionsResponse::default().with_results(results)
}

/// CreatePartitions: ALTER on each topic.
pub struct CreatePartitions;

impl Api for CreatePartitions {
    type Request = CreatePartitionsRequest;

    fn authorize(who: &Who, mut r: CreatePartitionsRequest, _version: i16) -> Gate {
        let (ok, denied): (Vec<_>, Vec<_>) = r
            .topics
            .into_iter()
            .partition(|t| who.may(Op::Alter, Res::Topic, &t.name));
        r.topics = ok;
        let refusals = denied
            .iter()
            .map(|t| {
                CreatePartitionsTopicResult::default()
                    .with_name(t.name.clone())
                    .with_error_code(TOPIC_DENIED.code())
                    .with_error_message(gate::message(TOPIC_DENIED))
            })
            .collect();
        gate::run_and_extend(
            RequestKind::CreatePartitions(r),
            refusals,
            |resp, mut extra| match resp {
                ResponseKind::CreatePartitions(mut c) => {
                    c.results.append(&mut extra);
                    ResponseKind::CreatePartitions(c)
                }
                other => other,
            },
        )
    }

    async fn handle(
        s: &Services,
        _ctx: &Context,
        r: CreatePartitionsRequest,
        _version: i16,
    ) -> Outcome {
        Outcome::respond(handle(s.broker.clone(), s.cluster.as_ref(), r).await)
    }
}
