//! ListGroups, with the state filter (v4+) and type filter (v5+: "classic" or "consumer").

use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{GroupId, ListGroupsRequest, ListGroupsResponse};
use kafka_protocol::protocol::StrBytes;
use std::sync::Arc;

use crate::coordinator::GroupCoordinator;

pub fn handle(
    groups: &Arc<GroupCoordinator>,
    req: ListGroupsRequest,
    version: i16,
) -> ListGroupsResponse {
    let coordinator = groups;
    let states: Vec<String> = req
        .states_filter
        .iter()
        .map(|s| s.to_ascii_lowercase())
        .collect();
    let types: Vec<String> = req
        .types_filter
        .iter()
        .map(|s| s.to_ascii_lowercase())
        .collect();
    let groups = coordinator
        .list()
        .into_iter()
        .filter(|(_, _, state, _)| {
            states.is_empty() || states.contains(&state.to_ascii_lowercase())
        })
        .filter(|(_, _, _, kind)| types.is_empty() || types.iter().any(|t| t == kind))
        .map(|(id, protocol_type, state, kind)| {
            let mut g = ListedGroup::default()
                .with_group_id(GroupId(StrBytes::from_string(id)))
                .with_protocol_type(StrBytes::from_string(protocol_type));
            if version >= 4 {
                g = g.with_group_state(StrBytes::from_static_str(state));
            }
            if version >= 5 {
                g = g.with_group_type(StrBytes::from_static_str(kind));
            }
            g
        })
        .collect();
    ListGroupsResponse::default().with_groups(groups)
}
