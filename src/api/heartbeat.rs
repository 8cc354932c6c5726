//! Heartbeat: keeps a member's session alive and tells it when to rejoin.

use kafka_protocol::messages::{HeartbeatRequest, HeartbeatResponse};

use crate::coordinator::GroupCoordinator;

pub fn handle(groups: &GroupCoordinator, req: HeartbeatRequest) -> HeartbeatResponse {
    let error = groups.heartbeat(
        req.group_id.0.as_str(),
        req.member_id.as_str(),
        req.group_instance_id.as_deref(),
        req.generation_id,
    );
    HeartbeatResponse::default().with_error_code(error.map(|e| e.code()).unwrap_or(0))
}
