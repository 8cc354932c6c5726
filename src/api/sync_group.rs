//! SyncGroup: the leader's assignment is distributed to every member.

use std::sync::Arc;

use kafka_protocol::messages::{RequestKind, ResponseKind, SyncGroupRequest, SyncGroupResponse};
use kafka_protocol::protocol::StrBytes;

use crate::api::gate::{Gate, Who, GROUP_DENIED};
use crate::api::{Api, Context, Outcome};
use crate::coordinator::GroupCoordinator;
use crate::services::Services;

pub async fn handle(
    groups: &Arc<GroupCoordinator>,
    req: SyncGroupRequest,
    version: i16,
) -> SyncGroupResponse {
    let coordinator = groups;
    let assignments = req
        .assignments
        .into_iter()
        .map(|a| (a.member_id.to_string(), a.assignment))
        .collect();
    let r = coordinator
        .sync(
            req.group_id.0.as_str(),
            req.member_id.as_str(),
            req.group_instance_id.as_deref(),
            req.generation_id,
            req.protocol_type.as_deref(),
            req.protocol_name.as_deref(),
            assignments,
        )
        .await;
    let mut resp = SyncGroupResponse::default()
        .with_error_code(r.error.map(|e| e.code()).unwrap_or(0))
        .with_assignment(r.assignment);
    if version >= 5 {
        resp = resp
            .with_protocol_type(r.protocol_type.map(StrBytes::from_string))
            .with_protocol_name(r.protocol_name.map(StrBytes::from_string));
    }
    resp
}

/// SyncGroup: READ on the group.
pub struct SyncGroup;

impl Api for SyncGroup {
    type Request = SyncGroupRequest;

    fn authorize(who: &Who, r: SyncGroupRequest, _version: i16) -> Gate {
        if !who.may_use_group(&r.group_id) {
            return Gate::Answer(ResponseKind::SyncGroup(
                SyncGroupResponse::default().with_error_code(GROUP_DENIED.code()),
            ));
        }
        Gate::Run(RequestKind::SyncGroup(r), None)
    }

    async fn handle(s: &Services, _ctx: &Context, r: SyncGroupRequest, version: i16) -> Outcome {
        Outcome::respond(handle(&s.groups, r, version).await)
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
    use kafka_protocol::messages::GroupId;
    use kafka_protocol::ResponseError;

    use super::*;
    use crate::api::test_support::{groups, join};

    fn sync(group: &str, member: &str, generation: i32) -> SyncGroupRequest {
        SyncGroupRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
            .with_member_id(StrBytes::from_string(member.to_string()))
            .with_generation_id(generation)
            .with_protocol_type(Some(StrBytes::from_static_str("consumer")))
            .with_protocol_name(Some(StrBytes::from_static_str("range")))
    }

    #[tokio::test]
    async fn the_leaders_assignment_reaches_it_and_v5_names_the_protocol() {
        let groups = groups();
        let joined = join(&groups, "g", "").await;
        assert_eq!((joined.error_code, joined.generation_id), (0, 1));
        assert_eq!(joined.leader, joined.member_id, "a lone member leads");
        let member = joined.member_id.to_string();
        let req =
            sync("g", &member, 1).with_assignments(vec![SyncGroupRequestAssignment::default()
                .with_member_id(joined.member_id.clone())
                .with_assignment(Bytes::from_static(b"partitions"))]);
        let resp = handle(&groups, req, 5).await;
        assert_eq!(resp.error_code, 0);
        assert_eq!(resp.assignment, Bytes::from_static(b"partitions"));
        assert_eq!(resp.protocol_type.as_deref(), Some("consumer"));
        assert_eq!(resp.protocol_name.as_deref(), Some("range"));
        // Before v5 the protocol is not echoed.
        let resp = handle(&groups, sync("g", &member, 1), 4).await;
        assert_eq!((resp.error_code, resp.protocol_name), (0, None));
    }

    #[tokio::test]
    async fn a_stale_generation_or_an_unknown_member_is_refused() {
        let groups = groups();
        let joined = join(&groups, "g", "").await;
        let member = joined.member_id.to_string();
        let resp = handle(&groups, sync("g", &member, 7), 5).await;
        assert_eq!(resp.error_code, ResponseError::IllegalGeneration.code());
        let resp = handle(&groups, sync("g", "stranger", 1), 5).await;
        assert_eq!(resp.error_code, ResponseError::UnknownMemberId.code());
        let resp = handle(&groups, sync("", &member, 1), 5).await;
        assert_eq!(resp.error_code, ResponseError::InvalidGroupId.code());
    }
}
