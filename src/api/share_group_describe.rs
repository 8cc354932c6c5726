//! ShareGroupDescribe (KIP-932): a share group's state, epochs, members and assignments.

use std::sync::Arc;

use kafka_protocol::messages::share_group_describe_response::{
    Assignment, DescribedGroup, Member, TopicPartitions,
};
use kafka_protocol::messages::{
    RequestKind, ResponseKind, ShareGroupDescribeRequest, ShareGroupDescribeResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::api::gate::{self, Gate, Who, GROUP_DENIED, TOPIC_DENIED};
use crate::api::{Api, Context, Outcome};
use crate::broker::Broker;
use crate::coordinator::consumer_group::Assignment as Parts;
use crate::coordinator::share_group::ASSIGNOR;
use crate::coordinator::GroupCoordinator;
use crate::security::acl::{Operation as Op, ResourceType as Res};
use crate::services::Services;
use crate::share::ShareService;

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
    shares: &ShareService,
    req: ShareGroupDescribeRequest,
) -> ShareGroupDescribeResponse {
    let described = req
        .group_ids
        .into_iter()
        .map(|id| {
            let base = DescribedGroup::default()
                .with_group_id(id.clone())
                .with_authorized_operations(i32::MIN);
            if let Err(e) = groups.check_coordinator(id.0.as_str()) {
                return base.with_error_code(e.code());
            }
            let described = groups.with_share_group(id.0.as_str(), |g| {
                let members = g
                    .members
                    .values()
                    .map(|m| {
                        Member::default()
                            .with_member_id(s(&m.member_id))
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
                            .with_assignment(assignment(broker, &m.assigned))
                    })
                    .collect();
                base.clone()
                    .with_group_state(s(g.state_name()))
                    .with_group_epoch(g.group_epoch)
                    .with_assignment_epoch(g.assignment_epoch)
                    .with_assignor_name(s(ASSIGNOR))
                    .with_members(members)
            });
            described.unwrap_or_else(|| {
                if shares.knows_group(id.0.as_str()) {
                    // Its members are gone; its share-partitions' state is kept.
                    return base
                        .with_group_state(s("Empty"))
                        .with_assignor_name(s(ASSIGNOR));
                }
                let message = if groups.group_type(id.0.as_str()).is_some() {
                    crate::api::describe_share_group_offsets::not_a_share_group(id.0.as_str())
                } else {
                    format!("Group {} not found.", id.0.as_str())
                };
                base.with_error_code(ResponseError::GroupIdNotFound.code())
                    .with_error_message(Some(s(&message)))
            })
        })
        .collect();
    ShareGroupDescribeResponse::default().with_groups(described)
}

/// ShareGroupDescribe: DESCRIBE on each group; its authorized operations are the
/// principal's.
pub struct ShareGroupDescribe;

impl Api for ShareGroupDescribe {
    type Request = ShareGroupDescribeRequest;

    fn authorize(who: &Who, r: ShareGroupDescribeRequest, _version: i16) -> Gate {
        let wants_ops = r.include_authorized_operations;
        let who = who.clone();
        Gate::Run(
            RequestKind::ShareGroupDescribe(r),
            gate::finish(move |resp| match resp {
                ResponseKind::ShareGroupDescribe(mut d) => {
                    for g in d.groups.iter_mut() {
                        // Kafka: DESCRIBE on the group (refused without a message), and on
                        // every topic assigned to a member.
                        let hidden_topic = g.members.iter().any(|m| {
                            m.assignment
                                .topic_partitions
                                .iter()
                                .any(|t| !who.may(Op::Describe, Res::Topic, t.topic_name.as_str()))
                        });
                        if !who.may(Op::Describe, Res::Group, &g.group_id) {
                            *g = DescribedGroup::default()
                                .with_group_id(g.group_id.clone())
                                .with_error_code(GROUP_DENIED.code())
                                .with_authorized_operations(i32::MIN);
                        } else if hidden_topic {
                            *g = DescribedGroup::default()
                                .with_group_id(g.group_id.clone())
                                .with_error_code(TOPIC_DENIED.code())
                                .with_error_message(Some(StrBytes::from_static_str(
                                    "The group has described topic(s) that the client is not authorized to describe.",
                                )))
                                .with_authorized_operations(i32::MIN);
                        } else if wants_ops {
                            g.authorized_operations = who.operations(Res::Group, &g.group_id);
                        }
                    }
                    ResponseKind::ShareGroupDescribe(d)
                }
                other => other,
            }),
        )
    }

    async fn handle(
        s: &Services,
        _ctx: &Context,
        r: ShareGroupDescribeRequest,
        _version: i16,
    ) -> Outcome {
        // A share group known only by its share-partitions' state is looked up with the
        // share coordinators (requests to other brokers in cluster mode): off the async
        // workers.
        let (broker, groups, shares) = (s.broker.clone(), s.groups.clone(), s.shares.clone());
        let response = crate::api::blocking(move || handle(&broker, &groups, &shares, r))
            .await
            .unwrap_or_default();
        Outcome::respond(response)
    }
}
