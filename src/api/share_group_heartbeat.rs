//! ShareGroupHeartbeat (KIP-932): a share consumer joins, keeps its membership and learns
//! the partitions it fetches from, or leaves.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::share_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::{
    RequestKind, ResponseKind, ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::api::gate::{Gate, Who, GROUP_DENIED, TOPIC_DENIED};
use crate::api::{Api, Context, Outcome};
use crate::coordinator::share_group::ShareHeartbeatIn;
use crate::coordinator::GroupCoordinator;
use crate::security::acl::{Operation as Op, ResourceType as Res};
use crate::services::Services;
use crate::share::ShareService;

fn refuse(code: ResponseError, message: Option<String>) -> ShareGroupHeartbeatResponse {
    ShareGroupHeartbeatResponse::default()
        .with_error_code(code.code())
        .with_error_message(message.map(StrBytes::from_string))
}

pub fn handle(
    groups: &Arc<GroupCoordinator>,
    shares: &ShareService,
    ctx: &Context,
    req: ShareGroupHeartbeatRequest,
) -> ShareGroupHeartbeatResponse {
    let group = req.group_id.0.as_str();
    if req.member_epoch == 0
        && req
            .subscribed_topic_names
            .as_ref()
            .is_none_or(|t| t.is_empty())
    {
        return refuse(
            ResponseError::InvalidRequest,
            Some("SubscribedTopicNames must be set in first request.".into()),
        );
    }
    if req.member_id.is_empty() {
        return refuse(
            ResponseError::InvalidRequest,
            Some("MemberId can't be empty.".into()),
        );
    }
    let settings = shares.settings(group);
    let hb = ShareHeartbeatIn {
        member_id: req.member_id.to_string(),
        member_epoch: req.member_epoch,
        rack_id: req.rack_id.map(|s| s.to_string()),
        client_id: ctx.client_id.clone(),
        client_host: ctx.client_host(),
        subscribed_topics: req
            .subscribed_topic_names
            .map(|ts| ts.into_iter().map(|t| t.0.to_string()).collect()),
    };
    let session_timeout = Duration::from_millis(settings.session_timeout_ms.max(1) as u64);
    match groups.share_heartbeat(group, hb, session_timeout) {
        Err(e) => refuse(e, None).with_member_epoch(-1),
        Ok(out) => ShareGroupHeartbeatResponse::default()
            .with_member_id(Some(req.member_id))
            .with_member_epoch(out.member_epoch)
            .with_heartbeat_interval_ms(
                settings.heartbeat_interval_ms.clamp(1, i32::MAX as i64) as i32
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
            })),
    }
}

/// ShareGroupHeartbeat: READ on the group, DESCRIBE on every subscribed topic.
pub struct ShareGroupHeartbeat;

impl Api for ShareGroupHeartbeat {
    type Request = ShareGroupHeartbeatRequest;

    fn authorize(who: &Who, r: ShareGroupHeartbeatRequest, _version: i16) -> Gate {
        // Kafka refuses both without a message.
        let answer = |code: ResponseError| {
            Gate::Answer(ResponseKind::ShareGroupHeartbeat(refuse(code, None)))
        };
        if !who.may_use_group(&r.group_id) {
            return answer(GROUP_DENIED);
        }
        let denied = r
            .subscribed_topic_names
            .iter()
            .flatten()
            .any(|t| !who.may(Op::Describe, Res::Topic, t));
        if denied {
            return answer(TOPIC_DENIED);
        }
        Gate::Run(RequestKind::ShareGroupHeartbeat(r), None)
    }

    async fn handle(
        s: &Services,
        ctx: &Context,
        r: ShareGroupHeartbeatRequest,
        _version: i16,
    ) -> Outcome {
        if s.broker.features.level("share.version") < 1 {
            // Kafka's answer while the share.version feature is not finalized.
            return Outcome::respond(refuse(
                ResponseError::UnsupportedVersion,
                Some("The share group protocol is not enabled (share.version is 0).".into()),
            ));
        }
        Outcome::respond(handle(&s.groups, &s.shares, ctx, r))
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::{GroupId, TopicName};

    use super::*;
    use crate::api::test_support::{context, groups};

    #[test]
    fn a_first_heartbeat_without_topics_is_invalid() {
        let groups = groups();
        let dir = tempfile::tempdir().unwrap();
        let broker = crate::api::test_support::broker_with_acls(dir.path(), &[]);
        let shares = ShareService::open(broker).unwrap();
        let r = handle(
            &groups,
            &shares,
            &context(),
            ShareGroupHeartbeatRequest::default()
                .with_group_id(GroupId(StrBytes::from_static_str("g")))
                .with_member_id(StrBytes::from_static_str("m"))
                .with_member_epoch(0),
        );
        assert_eq!(r.error_code, ResponseError::InvalidRequest.code());
        let r = handle(
            &groups,
            &shares,
            &context(),
            ShareGroupHeartbeatRequest::default()
                .with_group_id(GroupId(StrBytes::from_static_str("g")))
                .with_member_id(StrBytes::from_static_str(""))
                .with_member_epoch(0)
                .with_subscribed_topic_names(Some(vec![TopicName(StrBytes::from_static_str("t"))])),
        );
        assert_eq!(r.error_code, ResponseError::InvalidRequest.code());
    }
}
