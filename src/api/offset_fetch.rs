//! OffsetFetch: committed offsets of one group (v1-7) or several (v8+); a partition without a
//! commit answers offset -1.

use std::sync::Arc;

use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{
    OffsetFetchRequest, OffsetFetchResponse, RequestKind, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::api::gate::{self, Gate, Who, GROUP_DENIED, TOPIC_DENIED};
use crate::api::{Api, Context, Outcome};
use crate::coordinator::{Committed, GroupCoordinator};
use crate::security::acl::{Operation as Op, ResourceType as Res};
use crate::services::Services;

type Answer = Vec<((String, i32), Option<Committed>)>;

/// One topic's answers: (topic, [(partition, committed)]).
type TopicAnswer = (String, Vec<(i32, Option<Committed>)>);

/// Groups answers by topic, preserving first-seen order.
fn by_topic(answers: Answer) -> Vec<TopicAnswer> {
    let mut out: Vec<TopicAnswer> = Vec::new();
    for ((topic, partition), c) in answers {
        match out.iter_mut().find(|(t, _)| *t == topic) {
            Some((_, v)) => v.push((partition, c)),
            None => out.push((topic, vec![(partition, c)])),
        }
    }
    out
}

fn fields(c: &Option<Committed>) -> (i64, i32, String) {
    match c {
        Some(c) => (c.offset, c.leader_epoch, c.metadata.clone()),
        None => (-1, -1, String::new()),
    }
}

pub fn handle(
    groups: &Arc<GroupCoordinator>,
    req: OffsetFetchRequest,
    version: i16,
) -> OffsetFetchResponse {
    let coordinator = groups;
    // require_stable (v7+): a partition with transactional offsets still pending answers
    // UNSTABLE_OFFSET_COMMIT, so the consumer retries until the transaction completes.
    let require_stable = req.require_stable;
    let unstable = |group: &str| -> Vec<(String, i32)> {
        if require_stable {
            coordinator.unstable_offsets(group)
        } else {
            Vec::new()
        }
    };
    let unstable_code = ResponseError::UnstableOffsetCommit.code();
    let lookup = |group: &str, topics: Option<Vec<(String, Vec<i32>)>>| -> Answer {
        let wanted: Option<Vec<(String, i32)>> = topics.map(|ts| {
            ts.into_iter()
                .flat_map(|(t, ps)| ps.into_iter().map(move |p| (t.clone(), p)))
                .collect()
        });
        coordinator.fetch_offsets(group, wanted.as_deref())
    };
    if version >= 8 {
        let groups = req
            .groups
            .into_iter()
            .map(|g| {
                if let Err(e) = coordinator.check_coordinator(g.group_id.0.as_str()) {
                    return OffsetFetchResponseGroup::default()
                        .with_group_id(g.group_id)
                        .with_error_code(e.code());
                }
                // v9+: a consumer-protocol member fetching its offsets is fenced by epoch.
                if let Some(member) = g.member_id.as_ref().filter(|_| g.member_epoch >= 0) {
                    let check = coordinator.with_consumer_group(g.group_id.0.as_str(), |c| match c
                        .member_epoch(member.as_str())
                    {
                        None => Some(ResponseError::UnknownMemberId),
                        Some(e) if e != g.member_epoch => Some(ResponseError::StaleMemberEpoch),
                        Some(_) => None,
                    });
                    if let Some(Some(e)) = check {
                        return OffsetFetchResponseGroup::default()
                            .with_group_id(g.group_id)
                            .with_error_code(e.code());
                    }
                }
                let topics = g.topics.map(|ts| {
                    ts.into_iter()
                        .map(|t| (t.name.0.to_string(), t.partition_indexes))
                        .collect()
                });
                let answer = lookup(g.group_id.0.as_str(), topics);
                let pending = unstable(g.group_id.0.as_str());
                let topics = by_topic(answer)
                    .into_iter()
                    .map(|(t, parts)| {
                        OffsetFetchResponseTopics::default()
                            .with_name(TopicName(StrBytes::from_string(t.clone())))
                            .with_partitions(
                                parts
                                    .into_iter()
                                    .map(|(p, c)| {
                                        if pending.iter().any(|(pt, pp)| *pt == t && *pp == p) {
                                            return OffsetFetchResponsePartitions::default()
                                                .with_partition_index(p)
                                                .with_committed_offset(-1)
                                                .with_committed_leader_epoch(-1)
                                                .with_metadata(Some(StrBytes::from_static_str("")))
                                                .with_error_code(unstable_code);
                                        }
                                        let (offset, epoch, metadata) = fields(&c);
                                        OffsetFetchResponsePartitions::default()
                                            .with_partition_index(p)
                                            .with_committed_offset(offset)
                                            .with_committed_leader_epoch(epoch)
                                            .with_metadata(Some(StrBytes::from_string(metadata)))
                                    })
                                    .collect(),
                            )
                    })
                    .collect();
                OffsetFetchResponseGroup::default()
                    .with_group_id(g.group_id)
                    .with_topics(topics)
            })
            .collect();
        return OffsetFetchResponse::default().with_groups(groups);
    }
    if let Err(e) = coordinator.check_coordinator(req.group_id.0.as_str()) {
        return OffsetFetchResponse::default().with_error_code(e.code());
    }
    let topics = req.topics.map(|ts| {
        ts.into_iter()
            .map(|t| (t.name.0.to_string(), t.partition_indexes))
            .collect()
    });
    let answer = lookup(req.group_id.0.as_str(), topics);
    let pending = unstable(req.group_id.0.as_str());
    let topics = by_topic(answer)
        .into_iter()
        .map(|(t, parts)| {
            OffsetFetchResponseTopic::default()
                .with_name(TopicName(StrBytes::from_string(t.clone())))
                .with_partitions(
                    parts
                        .into_iter()
                        .map(|(p, c)| {
                            if pending.iter().any(|(pt, pp)| *pt == t && *pp == p) {
                                return OffsetFetchResponsePartition::default()
                                    .with_partition_index(p)
                                    .with_committed_offset(-1)
                                    .with_committed_leader_epoch(-1)
                                    .with_metadata(Some(StrBytes::from_static_str("")))
                                    .with_error_code(unstable_code);
                            }
                            let (offset, epoch, metadata) = fields(&c);
                            OffsetFetchResponsePartition::default()
                                .with_partition_index(p)
                                .with_committed_offset(offset)
                                .with_committed_leader_epoch(if version >= 5 { epoch } else { -1 })
                                .with_metadata(Some(StrBytes::from_string(metadata)))
                        })
                        .collect(),
                )
        })
        .collect();
    OffsetFetchResponse::default().with_topics(topics)
}

/// OffsetFetch: DESCRIBE on the group, then DESCRIBE on each topic (refused when named,
/// left out of an all-topics answer).
pub struct OffsetFetch;

impl Api for OffsetFetch {
    type Request = OffsetFetchRequest;

    fn authorize(who: &Who, r: OffsetFetchRequest, version: i16) -> Gate {
        if version < 8 {
            return authorize_one_group(who, r);
        }
        let named: std::collections::HashMap<String, bool> = r
            .groups
            .iter()
            .map(|g| (g.group_id.to_string(), g.topics.is_some()))
            .collect();
        let who = who.clone();
        Gate::Run(
            RequestKind::OffsetFetch(r),
            gate::finish(move |resp| match resp {
                ResponseKind::OffsetFetch(mut o) => {
                    for g in o.groups.iter_mut() {
                        if !who.may(Op::Describe, Res::Group, &g.group_id) {
                            *g = OffsetFetchResponseGroup::default()
                                .with_group_id(g.group_id.clone())
                                .with_error_code(GROUP_DENIED.code());
                            continue;
                        }
                        let named = named.get(g.group_id.as_str()).copied().unwrap_or(false);
                        g.topics
                            .retain(|t| named || who.may_topic(Op::Describe, &t.name, &t.topic_id));
                        for t in g.topics.iter_mut() {
                            if !who.may_topic(Op::Describe, &t.name, &t.topic_id) {
                                for p in t.partitions.iter_mut() {
                                    p.error_code = TOPIC_DENIED.code();
                                    p.committed_offset = -1;
                                    p.metadata = Some(StrBytes::default());
                                }
                            }
                        }
                    }
                    ResponseKind::OffsetFetch(o)
                }
                other => other,
            }),
        )
    }

    async fn handle(s: &Services, _ctx: &Context, r: OffsetFetchRequest, version: i16) -> Outcome {
        Outcome::respond(handle(&s.groups, r, version))
    }
}

/// OffsetFetch v0-7: one group.
fn authorize_one_group(who: &Who, r: OffsetFetchRequest) -> Gate {
    if !who.may(Op::Describe, Res::Group, &r.group_id) {
        return Gate::Answer(ResponseKind::OffsetFetch(
            OffsetFetchResponse::default().with_error_code(GROUP_DENIED.code()),
        ));
    }
    let named = r.topics.is_some();
    let who = who.clone();
    Gate::Run(
        RequestKind::OffsetFetch(r),
        gate::finish(move |resp| match resp {
            ResponseKind::OffsetFetch(mut o) => {
                o.topics
                    .retain(|t| named || who.may(Op::Describe, Res::Topic, &t.name));
                for t in o.topics.iter_mut() {
                    if !who.may(Op::Describe, Res::Topic, &t.name) {
                        for p in t.partitions.iter_mut() {
                            p.error_code = TOPIC_DENIED.code();
                            p.committed_offset = -1;
                            p.metadata = Some(StrBytes::default());
                        }
                    }
                }
                ResponseKind::OffsetFetch(o)
            }
            other => other,
        }),
    )
}
