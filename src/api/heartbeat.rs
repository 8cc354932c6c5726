//! Heartbeat: keeps a member's session alive and tells it when to rejoin.

use kafka_protocol::messages::{HeartbeatRequest, HeartbeatResponse, RequestKind, ResponseKind};

use crate::api::gate::{Gate, Who, GROUP_DENIED};
use crate::api::{Api, Context, Outcome};
use crate::coordinator::GroupCoordinator;
use crate::services::Services;

pub fn handle(groups: &GroupCoordinator, req: HeartbeatRequest) -> HeartbeatResponse {
    let error = groups.heartbeat(
        req.group_id.0.as_str(),
        req.member_id.as_str(),
        req.group_instance_id.as_deref(),
        req.generation_id,
    );
    HeartbeatResponse::default().with_error_code(error.map(|e| e.code()).unwrap_or(0))
}

/// Heartbeat: READ on the group.
pub struct Heartbeat;

impl Api for Heartbeat {
    type Request = HeartbeatRequest;

    fn authorize(who: &Who, r: HeartbeatRequest, _version: i16) -> Gate {
        if !who.may_use_group(&r.group_id) {
            return Gate::Answer(ResponseKind::Heartbeat(
                HeartbeatResponse::default().with_error_code(GROUP_DENIED.code()),
            ));
        }
        Gate::Run(RequestKind::Heartbeat(r), None)
    }

    async fn handle(s: &Services, _ctx: &Context, r: HeartbeatRequest, _version: i16) -> Outcome {
        Outcome::respond(handle(&s.groups, r))
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::GroupId;
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::ResponseError;

    use super::*;
    use crate::api::test_support::{groups, join};

    fn beat(group: &str, member: &str, generation: i32) -> HeartbeatRequest {
        HeartbeatRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
            .with_member_id(StrBytes::from_string(member.to_string()))
            .with_generation_id(generation)
    }

    #[tokio::test]
    async fn a_member_heartbeats_and_strangers_are_told_why_not() {
        let groups = groups();
        let joined = join(&groups, "g", "").await;
        let member = joined.member_id.to_string();
        assert_eq!(handle(&groups, beat("g", &member, 1)).error_code, 0);
        let code = |r: HeartbeatResponse| ResponseError::try_from_code(r.error_code);
        assert_eq!(
            code(handle(&groups, beat("g", &member, 2))),
            Some(ResponseError::IllegalGeneration)
        );
        assert_eq!(
            code(handle(&groups, beat("g", "stranger", 1))),
            Some(ResponseError::UnknownMemberId)
        );
        assert_eq!(
            code(handle(&groups, beat("no-such-group", &member, 1))),
            Some(ResponseError::UnknownMemberId)
        );
        assert_eq!(
            code(handle(&groups, beat("", &member, 1))),
            Some(ResponseError::InvalidGroupId)
        );
    }

    #[tokio::test]
    async fn heartbeats_need_read_on_the_group() {
        use crate::api::test_support::{allow, broker_with_acls, who};
        use crate::security::acl::{Operation as Op, ResourceType as Res};
        let dir = tempfile::tempdir().unwrap();
        let broker = broker_with_acls(
            dir.path(),
            &[allow("User:alice", Op::Read, Res::Group, "mine")],
        );
        let alice = who(&broker, "User:alice");
        assert!(matches!(
            Heartbeat::authorize(&alice, beat("mine", "m", 1), 4),
            Gate::Run(RequestKind::Heartbeat(_), None)
        ));
        let Gate::Answer(ResponseKind::Heartbeat(refused)) =
            Heartbeat::authorize(&alice, beat("theirs", "m", 1), 4)
        else {
            panic!("refused without running the handler")
        };
        assert_eq!(refused.error_code, 30, "GROUP_AUTHORIZATION_FAILED");
        // DESCRIBE is not enough.
        let dir = tempfile::tempdir().unwrap();
        let broker = broker_with_acls(
            dir.path(),
            &[allow("User:alice", Op::Describe, Res::Group, "mine")],
        );
        assert!(matches!(
            Heartbeat::authorize(&who(&broker, "User:alice"), beat("mine", "m", 1), 4),
            Gate::Answer(_)
        ));
    }
}
