//! ConsumerGroupDescribe (KIP-848): epochs, members, current and target assignments.

use std::sync::Arc;

use kafka_protocol::messages::consumer_group_describe_response::{
    Assignment, DescribedGroup, Member, TopicPartitions,
};
use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, RequestKind, ResponseKind,
    TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::api::gate::{self, Gate, Who, GROUP_DENIED};
use crate::api::{Api, Context, Outcome};
use crate::broker::Broker;
use crate::coordinator::consumer_group::Assignment as Parts;
use crate::coordinator::GroupCoordinator;
use crate::security::acl::{Operation as Op, ResourceType as Res};
use crate::services::Services;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn assignment(broker: &Broker, a: &Parts) -> Assignment {
    Assignment::default().with_topic_partitions(
        a.iter()
            .map(|(id, ps)| {
                let name = broker
                    .topic_by_id(id)
                    .map(|t| t.name.clone())
                    .unwrap_or_default();
                TopicPartitions::default()
                    .with_topic_id(*id)
                    .with_topic_name(TopicName(s(&name)))
                    .with_partitions(ps.iter().copied().collect())
            })
            .collect(),
    )
}

pub fn handle(
    broker: &Broker,
    groups: &Arc<GroupCoordinator>,
    req: ConsumerGroupDescribeRequest,
) -> ConsumerGroupDescribeResponse {
    let groups = req
        .group_ids
        .into_iter()
        .map(|id| {
            let base = DescribedGroup::default()
                .with_group_id(id.clone())
                .with_authorized_operations(i32::MIN);
            let coordinator = groups;
            if let Err(e) = coordinator.check_coordinator(id.0.as_str()) {
                return base.with_error_code(e.code());
            }
            let described = coordinator.with_consumer_group(id.0.as_str(), |c| {
                let members = c
                    .members
                    .values()
                    .map(|m| {
                        Member::default()
                            .with_member_id(s(&m.member_id))
                            .with_instance_id(m.instance_id.as_deref().map(s))
                            .with_rack_id(m.rack_id.as_deref().map(s))
                            .with_member_epoch(m.member_epoch)
                            .with_client_id(s(&m.client_id))
                            .with_client_host(s(&m.client_host))
                            .with_subscribed_topic_names(
                                m.subscribed_topics
                                    .iter()
                                    .map(|t| TopicName(s(t)))
                                    .collect(),
                            )
                            .with_subscribed_topic_regex(m.subscribed_regex.as_deref().map(s))
                            // v1: 0 for a member of the classic protocol, 1 otherwise.
                            .with_member_type(if m.classic.is_some() { 0 } else { 1 })
                            .with_assignment(assignment(broker, &m.assigned))
                            .with_target_assignment(assignment(
                                broker,
                                c.target.get(&m.member_id).unwrap_or(&Parts::new()),
                            ))
                    })
                    .collect();
                base.clone()
                    .with_group_state(s(c.state_name()))
                    .with_group_epoch(c.group_epoch)
                    .with_assignment_epoch(c.assignment_epoch)
                    .with_assignor_name(s(&c.assignor))
                    .with_members(members)
            });
            described.unwrap_or_else(|| {
                base.with_error_code(ResponseError::GroupIdNotFound.code())
                    .with_error_message(Some(s(&format!("Group {} not found.", id.0.as_str()))))
            })
        })
        .collect();
    ConsumerGroupDescribeResponse::default().with_groups(groups)
}

/// ConsumerGroupDescribe: DESCRIBE on each group; its authorized operations are the
/// principal's.
pub struct ConsumerGroupDescribe;

impl Api for ConsumerGroupDescribe {
    type Request = ConsumerGroupDescribeRequest;

    fn authorize(who: &Who, r: ConsumerGroupDescribeRequest, _version: i16) -> Gate {
        let wants_ops = r.include_authorized_operations;
        let who = who.clone();
        Gate::Run(
            RequestKind::ConsumerGroupDescribe(r),
            gate::finish(move |resp| match resp {
                ResponseKind::ConsumerGroupDescribe(mut d) => {
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
                    ResponseKind::ConsumerGroupDescribe(d)
                }
                other => other,
            }),
        )
    }

    async fn handle(
        s: &Services,
        _ctx: &Context,
        r: ConsumerGroupDescribeRequest,
        _version: i16,
    ) -> Outcome {
        Outcome::respond(handle(&s.broker, &s.groups, r))
    }
}
