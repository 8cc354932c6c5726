//! SyncGroup: the leader's assignment is distributed to every member.

use kafka_protocol::messages::{SyncGroupRequest, SyncGroupResponse};
use kafka_protocol::protocol::StrBytes;
use std::sync::Arc;

use crate::coordinator::GroupCoordinator;

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
