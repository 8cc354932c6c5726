//! JoinGroup (classic protocol): parks until the rebalance completes.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::{JoinGroupRequest, JoinGroupResponse, RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;

use crate::api::gate::{Gate, Who, GROUP_DENIED};
use crate::api::{Api, Context, Outcome};
use crate::coordinator::group::JoinRequest;
use crate::coordinator::GroupCoordinator;
use crate::services::Services;

fn s(v: String) -> StrBytes {
    StrBytes::from_string(v)
}

pub async fn handle(
    groups: &Arc<GroupCoordinator>,
    ctx: &Context,
    req: JoinGroupRequest,
    version: i16,
) -> JoinGroupResponse {
    let coordinator = groups;
    let join = JoinRequest {
        member_id: req.member_id.to_string(),
        group_instance_id: req.group_instance_id.map(|i| i.to_string()),
        client_id: ctx.client_id.clone(),
        client_host: ctx.client_host(),
        session_timeout: Duration::from_millis(req.session_timeout_ms.max(0) as u64),
        // v0 had no rebalance timeout: it equals the session timeout.
        rebalance_timeout: Duration::from_millis(
            if version == 0 {
                req.session_timeout_ms
            } else {
                req.rebalance_timeout_ms
            }
            .max(0) as u64,
        ),
        protocol_type: req.protocol_type.to_string(),
        protocols: req
            .protocols
            .into_iter()
            .map(|p| (p.name.to_string(), p.metadata))
            .collect(),
        require_known_member_id: version >= 4,
    };
    let r = coordinator.join(req.group_id.0.as_str(), join).await;
    let mut resp = JoinGroupResponse::default()
        .with_error_code(r.error.map(|e| e.code()).unwrap_or(0))
        .with_generation_id(r.generation)
        .with_leader(s(r.leader))
        .with_member_id(s(r.member_id))
        .with_members(
            r.members
                .into_iter()
                .map(|(id, instance, metadata)| {
                    JoinGroupResponseMember::default()
                        .with_member_id(s(id))
                        .with_group_instance_id(instance.map(s))
                        .with_metadata(metadata)
                })
                .collect(),
        );
    if version >= 7 {
        resp = resp
            .with_protocol_type(r.protocol_type.map(s))
            .with_protocol_name(r.protocol_name.map(s));
    } else {
        resp = resp.with_protocol_name(Some(s(r.protocol_name.unwrap_or_default())));
    }
    if version >= 9 {
        resp = resp.with_skip_assignment(r.skip_assignment);
    }
    resp
}

/// JoinGroup: READ on the group.
pub struct JoinGroup;

impl Api for JoinGroup {
    type Request = JoinGroupRequest;

    fn authorize(who: &Who, r: JoinGroupRequest, _version: i16) -> Gate {
        if !who.may_use_group(&r.group_id) {
            return Gate::Answer(ResponseKind::JoinGroup(
                JoinGroupResponse::default()
                    .with_error_code(GROUP_DENIED.code())
                    .with_generation_id(-1),
            ));
        }
        Gate::Run(RequestKind::JoinGroup(r), None)
    }

    async fn handle(s: &Services, ctx: &Context, r: JoinGroupRequest, version: i16) -> Outcome {
        Outcome::respond(handle(&s.groups, ctx, r, version).await)
    }
}
