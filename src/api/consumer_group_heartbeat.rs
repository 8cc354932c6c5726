//! ConsumerGroupHeartbeat (KIP-848): join, reconcile toward the server's assignment, leave.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::consumer_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::{
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, RequestKind, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::api::gate::{Gate, Who, GROUP_DENIED, TOPIC_DENIED};
use crate::api::{Api, Context, Outcome};
use crate::coordinator::consumer_group::HeartbeatIn;
use crate::coordinator::GroupCoordinator;
use crate::security::acl::{Operation as Op, ResourceType as Res};
use crate::services::Services;

pub fn handle(
    groups: &Arc<GroupCoordinator>,
    ctx: &Context,
    req: ConsumerGroupHeartbeatRequest,
) -> ConsumerGroupHeartbeatResponse {
    let coordinator = groups;
    if req.subscribed_topic_regex.is_some() {
        return ConsumerGroupHeartbeatResponse::default()
            .with_error_code(ResponseError::InvalidRequest.code())
            .with_error_message(Some(StrBytes::from_static_str(
                "Regular expression subscriptions are not supported yet.",
            )));
    }
    if req.member_epoch == 0 && req.subscribed_topic_names.is_none() {
        return ConsumerGroupHeartbeatResponse::default()
            .with_error_code(ResponseError::InvalidRequest.code())
            .with_error_message(Some(StrBytes::from_static_str(
                "SubscribedTopicNames must be set in first request.",
            )));
    }
    let hb = HeartbeatIn {
        member_id: req.member_id.to_string(),
        member_epoch: req.member_epoch,
        instance_id: req.instance_id.map(|s| s.to_string()),
        rack_id: req.rack_id.map(|s| s.to_string()),
        client_id: ctx.client_id.clone(),
        client_host: ctx.client_host(),
        rebalance_timeout: Duration::from_millis(req.rebalance_timeout_ms.max(0) as u64),
        subscribed_topics: req
            .subscribed_topic_names
            .map(|ts| ts.into_iter().map(|t| t.0.to_string()).collect()),
        server_assignor: req.server_assignor.map(|s| s.to_string()),
        owned: req.topic_partitions.map(|tps| {
            tps.into_iter()
                .map(|tp| (tp.topic_id, tp.partitions.into_iter().collect()))
                .collect()
        }),
    };
    match coordinator.consumer_heartbeat(req.group_id.0.as_str(), hb) {
        Err(e) => ConsumerGroupHeartbeatResponse::default()
            .with_error_code(e.code())
            .with_member_epoch(-1),
        Ok(out) => {
            ConsumerGroupHeartbeatResponse::default()
                .with_member_id(Some(StrBytes::from_string(out.member_id)))
                .with_member_epoch(out.member_epoch)
                .with_heartbeat_interval_ms(
                    coordinator.consumer_heartbeat_interval().as_millis() as i32
                )
                .with_assignment(out.assignment.map(|a| {
                    Assignment::default().with_topic_partitions(
                        a.into_iter()
                            .map(|(id, ps)| {
                                TopicPartitions::default()
                                    .with_topic_id(id)
                                    .with_partitions(ps.into_iter().collect())
                            })
                            .collect(),
                    )
                }))
        }
    }
}

/// ConsumerGroupHeartbeat: READ on the group, DESCRIBE on every subscribed topic.
pub struct ConsumerGroupHeartbeat;

impl Api for ConsumerGroupHeartbeat {
    type Request = ConsumerGroupHeartbeatRequest;

    fn authorize(who: &Who, r: ConsumerGroupHeartbeatRequest, _version: i16) -> Gate {
        let refuse = |code: ResponseError, msg: String| {
            Gate::Answer(ResponseKind::ConsumerGroupHeartbeat(
                ConsumerGroupHeartbeatResponse::default()
                    .with_error_code(code.code())
                    .with_error_message(Some(StrBytes::from_string(msg))),
            ))
        };
        if !who.may_use_group(&r.group_id) {
            return refuse(GROUP_DENIED, GROUP_DENIED.to_string());
        }
        let denied: Vec<String> = r
            .subscribed_topic_names
            .iter()
            .flatten()
            .filter(|t| !who.may(Op::Describe, Res::Topic, t))
            .map(|t| t.to_string())
            .collect();
        if !denied.is_empty() {
            return refuse(
                TOPIC_DENIED,
                format!("Unauthorized topics: {}", denied.join(", ")),
            );
        }
        Gate::Run(RequestKind::ConsumerGroupHeartbeat(r), None)
    }

    async fn handle(
        s: &Services,
        ctx: &Context,
        r: ConsumerGroupHeartbeatRequest,
        _version: i16,
    ) -> Outcome {
        Outcome::respond(handle(&s.groups, ctx, r))
    }
}
