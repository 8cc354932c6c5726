//! LeaveGroup: one member (v0-2) or a batch of members by id or instance id (v3+).

use std::sync::Arc;

use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::{LeaveGroupRequest, LeaveGroupResponse, RequestKind, ResponseKind};
use kafka_protocol::ResponseError;

use crate::api::gate::{Gate, Who, GROUP_DENIED};
use crate::api::{blocking, Api, Context, Outcome};
use crate::coordinator::GroupCoordinator;
use crate::services::Services;

pub async fn handle(
    groups: &Arc<GroupCoordinator>,
    req: LeaveGroupRequest,
    version: i16,
) -> LeaveGroupResponse {
    let coordinator = groups.clone();
    let identities: Vec<(String, Option<String>)> = if version >= 3 {
        req.members
            .iter()
            .map(|m| {
                (
                    m.member_id.to_string(),
                    m.group_instance_id.as_ref().map(|i| i.to_string()),
                )
            })
            .collect()
    } else {
        vec![(req.member_id.to_string(), None)]
    };
    let group = req.group_id.0.to_string();
    let ids = identities.clone();
    let result = blocking(move || coordinator.leave(&group, &ids))
        .await
        .unwrap_or(Err(ResponseError::UnknownServerError));
    match result {
        Err(e) => LeaveGroupResponse::default().with_error_code(e.code()),
        Ok(errors) if version >= 3 => LeaveGroupResponse::default().with_members(
            req.members
                .into_iter()
                .zip(errors)
                .map(|(m, e)| {
                    MemberResponse::default()
                        .with_member_id(m.member_id)
                        .with_group_instance_id(m.group_instance_id)
                        .with_error_code(e.map(|e| e.code()).unwrap_or(0))
                })
                .collect(),
        ),
        Ok(errors) => LeaveGroupResponse::default().with_error_code(
            errors
                .first()
                .copied()
                .flatten()
                .map(|e| e.code())
                .unwrap_or(0),
        ),
    }
}

/// LeaveGroup: READ on the group.
pub struct LeaveGroup;

impl Api for LeaveGroup {
    type Request = LeaveGroupRequest;

    fn authorize(who: &Who, r: LeaveGroupRequest, _version: i16) -> Gate {
        if !who.may_use_group(&r.group_id) {
            return Gate::Answer(ResponseKind::LeaveGroup(
                LeaveGroupResponse::default().with_error_code(GROUP_DENIED.code()),
            ));
        }
        Gate::Run(RequestKind::LeaveGroup(r), None)
    }

    async fn handle(s: &Services, _ctx: &Context, r: LeaveGroupRequest, version: i16) -> Outcome {
        Outcome::respond(handle(&s.groups, r, version).await)
    }
}
