//! DescribeGroups: state, protocol and members (with metadata and assignment when Stable).

use std::sync::Arc;

use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::{
    DescribeGroupsRequest, DescribeGroupsResponse, RequestKind, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::api::gate::{self, Gate, Who, GROUP_DENIED};
use crate::api::{Api, Context, Outcome};
use crate::coordinator::GroupCoordinator;
use crate::security::acl::{Operation as Op, ResourceType as Res};
use crate::services::Services;

/// DESCRIBE, DELETE, READ as bits (everything allowed without an authorizer).
const GROUP_AUTHORIZED_OPERATIONS: i32 = (1 << 3) | (1 << 6) | (1 << 8);

fn s(v: String) -> StrBytes {
    StrBytes::from_string(v)
}

pub fn handle(
    groups: &Arc<GroupCoordinator>,
    req: DescribeGroupsRequest,
    version: i16,
) -> DescribeGroupsResponse {
    let ops = if req.include_authorized_operations && version >= 3 {
        GROUP_AUTHORIZED_OPERATIONS
    } else {
        i32::MIN
    };
    let groups = req
        .groups
        .into_iter()
        .map(|id| {
            let base = DescribedGroup::default()
                .with_group_id(id.clone())
                .with_authorized_operations(ops);
            let coordinator = groups;
            if let Err(e) = coordinator.check_coordinator(id.0.as_str()) {
                return base.with_error_code(e.code());
            }
            match coordinator.describe(id.0.as_str()) {
                None if version >= 6 => base
                    .with_error_code(ResponseError::GroupIdNotFound.code())
                    .with_error_message(Some(s(format!("Group {} not found.", id.0.as_str()))))
                    .with_group_state(StrBytes::from_static_str("Dead")),
                None => base.with_group_state(StrBytes::from_static_str("Dead")),
                Some(d) => base
                    .with_group_state(StrBytes::from_static_str(d.state))
                    .with_protocol_type(s(d.protocol_type))
                    .with_protocol_data(s(d.protocol))
                    .with_members(
                        d.members
                            .into_iter()
                            .map(
                                |(
                                    member_id,
                                    instance,
                                    client_id,
                                    client_host,
                                    metadata,
                                    assignment,
                                )| {
                                    DescribedGroupMember::default()
                                        .with_member_id(s(member_id))
                                        .with_group_instance_id(if version >= 4 {
                                            instance.map(s)
                                        } else {
                                            None
                                        })
                                        .with_client_id(s(client_id))
                                        .with_client_host(s(client_host))
                                        .with_member_metadata(metadata)
                                        .with_member_assignment(assignment)
                                },
                            )
                            .collect(),
                    ),
            }
        })
        .collect();
    DescribeGroupsResponse::default().with_groups(groups)
}

/// DescribeGroups: DESCRIBE on each group; its authorized operations are the principal's.
pub struct DescribeGroups;

impl Api for DescribeGroups {
    type Request = DescribeGroupsRequest;

    fn authorize(who: &Who, r: DescribeGroupsRequest, _version: i16) -> Gate {
        let wants_ops = r.include_authorized_operations;
        let who = who.clone();
        Gate::Run(
            RequestKind::DescribeGroups(r),
            gate::finish(move |resp| match resp {
                ResponseKind::DescribeGroups(mut d) => {
                    for g in d.groups.iter_mut() {
                        if !who.may(Op::Describe, Res::Group, &g.group_id) {
                            *g = DescribedGroup::default()
                                .with_group_id(g.group_id.clone())
                                .with_error_code(GROUP_DENIED.code())
                                .with_error_message(gate::message(GROUP_DENIED));
                        } else if wants_ops {
                            g.authorized_operations = who.operations(Res::Group, &g.group_id);
                        }
                    }
                    ResponseKind::DescribeGroups(d)
                }
                other => other,
            }),
        )
    }

    async fn handle(
        s: &Services,
        _ctx: &Context,
        r: DescribeGroupsRequest,
        version: i16,
    ) -> Outcome {
        Outcome::respond(handle(&s.groups, r, version))
    }
}
