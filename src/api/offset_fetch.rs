//! OffsetFetch: committed offsets of one group (v1-7) or several (v8+); a partition without a
//! commit answers offset -1.
//!
//! From v10 (Kafka 4.4) topics are named by id, resolved to names in the catalog as Kafka's
//! `KafkaApis` does: an id the catalog does not know (never created, or its topic deleted)
//! answers UNKNOWN_TOPIC_ID for each partition asked, after the known topics; an all-topics
//! answer names each committed topic by its current id and leaves out topics that no longer
//! exist. Offsets stay stored by name: an id reads what is stored under its topic's current
//! name, and a deleted topic's id is unknown.

use std::collections::HashMap;
use std::sync::Arc;

use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup;
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
use crate::broker::{Broker, TopicRef};
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

/// A v10 topic whose id the catalog does not know: each partition asked answers `error`
/// (offset -1), as Kafka's `KafkaApis` builds it.
fn unknown_topic(
    t: kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopics,
    error: ResponseError,
) -> OffsetFetchResponseTopics {
    OffsetFetchResponseTopics::default()
        .with_topic_id(t.topic_id)
        .with_partitions(
            t.partition_indexes
                .into_iter()
                .map(|p| {
                    OffsetFetchResponsePartitions::default()
                        .with_partition_index(p)
                        .with_committed_offset(-1)
                        .with_committed_leader_epoch(-1)
                        .with_metadata(Some(StrBytes::from_static_str("")))
                        .with_error_code(error.code())
                })
                .collect(),
        )
}

/// A group's committed offsets for `topics` (all when `None`), grouped by topic, and the
/// partitions whose transactional offsets are still pending when the request requires stable
/// offsets (v7+: those answer UNSTABLE_OFFSET_COMMIT, so the consumer retries until the
/// transaction completes).
fn committed(
    coordinator: &GroupCoordinator,
    group: &str,
    topics: Option<Vec<(String, Vec<i32>)>>,
    require_stable: bool,
) -> (Vec<TopicAnswer>, Vec<(String, i32)>) {
    let wanted: Option<Vec<(String, i32)>> = topics.map(|ts| {
        ts.into_iter()
            .flat_map(|(t, ps)| ps.into_iter().map(move |p| (t.clone(), p)))
            .collect()
    });
    let answer = coordinator.fetch_offsets(group, wanted.as_deref());
    let pending = if require_stable {
        coordinator.unstable_offsets(group)
    } else {
        Vec::new()
    };
    (by_topic(answer), pending)
}

/// (offset, leader epoch, metadata, error) of one partition's answer.
fn partition_answer(
    topic: &str,
    partition: i32,
    c: &Option<Committed>,
    pending: &[(String, i32)],
) -> (i64, i32, String, i16) {
    if pending.iter().any(|(t, p)| t == topic && *p == partition) {
        return (
            -1,
            -1,
            String::new(),
            ResponseError::UnstableOffsetCommit.code(),
        );
    }
    let (offset, epoch, metadata) = fields(c);
    (offset, epoch, metadata, 0)
}

/// v9+: a consumer-protocol member fetching its offsets is fenced by its epoch.
fn member_error(
    coordinator: &GroupCoordinator,
    g: &OffsetFetchRequestGroup,
) -> Option<ResponseError> {
    let member = g.member_id.as_ref().filter(|_| g.member_epoch >= 0)?;
    coordinator
        .with_consumer_group(g.group_id.0.as_str(), |c| {
            match c.member_epoch(member.as_str()) {
                None => Some(ResponseError::UnknownMemberId),
                Some(e) if e != g.member_epoch => Some(ResponseError::StaleMemberEpoch),
                Some(_) => None,
            }
        })
        .flatten()
}

/// One group of a v8+ request.
fn fetch_group(
    broker: &Broker,
    coordinator: &GroupCoordinator,
    g: OffsetFetchRequestGroup,
    by_id: bool,
    require_stable: bool,
) -> OffsetFetchResponseGroup {
    let error = coordinator
        .check_coordinator(g.group_id.0.as_str())
        .err()
        .or_else(|| member_error(coordinator, &g));
    if let Some(e) = error {
        return OffsetFetchResponseGroup::default()
            .with_group_id(g.group_id)
            .with_error_code(e.code());
    }
    // v10: ids resolved to names; the ids of the names, to answer with.
    let mut ids: HashMap<String, uuid::Uuid> = HashMap::new();
    let mut unknown = Vec::new();
    let topics = g.topics.map(|ts| {
        let mut named = Vec::with_capacity(ts.len());
        for t in ts {
            if !by_id {
                named.push((t.name.0.to_string(), t.partition_indexes));
                continue;
            }
            match broker.resolve(&TopicRef::Id(t.topic_id)) {
                Ok(topic) => {
                    ids.insert(topic.name.clone(), t.topic_id);
                    named.push((topic.name.clone(), t.partition_indexes));
                }
                Err(e) => unknown.push(unknown_topic(t, e)),
            }
        }
        named
    });
    let all = topics.is_none();
    let (answer, pending) = committed(coordinator, g.group_id.0.as_str(), topics, require_stable);
    let mut topics: Vec<OffsetFetchResponseTopics> = answer
        .into_iter()
        .filter_map(|(t, parts)| {
            // v10, all topics: each by its current id; a topic deleted since its commit has
            // none and is left out, as Kafka does.
            let id = match ids.get(&t) {
                Some(id) => *id,
                None if by_id && all => broker.topic(&t)?.id,
                None => uuid::Uuid::nil(),
            };
            let partitions = parts
                .into_iter()
                .map(|(p, c)| {
                    let (offset, epoch, metadata, error) = partition_answer(&t, p, &c, &pending);
                    OffsetFetchResponsePartitions::default()
                        .with_partition_index(p)
                        .with_committed_offset(offset)
                        .with_committed_leader_epoch(epoch)
                        .with_metadata(Some(StrBytes::from_string(metadata)))
                        .with_error_code(error)
                })
                .collect();
            Some(
                OffsetFetchResponseTopics::default()
                    .with_name(TopicName(StrBytes::from_string(t)))
                    .with_topic_id(id)
                    .with_partitions(partitions),
            )
        })
        .collect();
    topics.append(&mut unknown);
    OffsetFetchResponseGroup::default()
        .with_group_id(g.group_id)
        .with_topics(topics)
}

pub fn handle(
    broker: &Broker,
    groups: &Arc<GroupCoordinator>,
    req: OffsetFetchRequest,
    version: i16,
) -> OffsetFetchResponse {
    let coordinator: &GroupCoordinator = groups;
    if version >= 8 {
        let groups = req
            .groups
            .into_iter()
            .map(|g| fetch_group(broker, coordinator, g, version >= 10, req.require_stable))
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
    let (answer, pending) = committed(
        coordinator,
        req.group_id.0.as_str(),
        topics,
        req.require_stable,
    );
    let topics = answer
        .into_iter()
        .map(|(t, parts)| {
            let partitions = parts
                .into_iter()
                .map(|(p, c)| {
                    let (offset, epoch, metadata, error) = partition_answer(&t, p, &c, &pending);
                    OffsetFetchResponsePartition::default()
                        .with_partition_index(p)
                        .with_committed_offset(offset)
                        .with_committed_leader_epoch(if version >= 5 { epoch } else { -1 })
                        .with_metadata(Some(StrBytes::from_string(metadata)))
                        .with_error_code(error)
                })
                .collect();
            OffsetFetchResponseTopic::default()
                .with_name(TopicName(StrBytes::from_string(t)))
                .with_partitions(partitions)
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
        Outcome::respond(handle(&s.broker, &s.groups, r, version))
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use bytes::BytesMut;
    use kafka_protocol::messages::offset_fetch_request::{
        OffsetFetchRequestGroup, OffsetFetchRequestTopics,
    };
    use kafka_protocol::messages::GroupId;
    use kafka_protocol::protocol::{Decodable, Encodable};
    use uuid::Uuid;

    use super::*;
    use crate::api::test_support::{allow, broker_with_acls, groups, services, who};

    /// One group's fetch at v8+: `topics` by name (v8-9) or id (v10), or all topics (`None`).
    fn fetch(group: &str, topics: Option<Vec<(&str, Uuid, Vec<i32>)>>) -> OffsetFetchRequest {
        OffsetFetchRequest::default().with_groups(vec![OffsetFetchRequestGroup::default()
            .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
            .with_member_epoch(-1)
            .with_topics(topics.map(|ts| {
                ts.into_iter()
                    .map(|(name, id, parts)| {
                        OffsetFetchRequestTopics::default()
                            .with_name(TopicName(StrBytes::from_string(name.to_string())))
                            .with_topic_id(id)
                            .with_partition_indexes(parts)
                    })
                    .collect()
            }))])
    }

    /// (name, id, partition, offset, error code) of every partition of the first group.
    fn answers(r: &OffsetFetchResponse) -> Vec<(String, Uuid, i32, i64, i16)> {
        r.groups[0]
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(|p| {
                    (
                        t.name.to_string(),
                        t.topic_id,
                        p.partition_index,
                        p.committed_offset,
                        p.error_code,
                    )
                })
            })
            .collect()
    }

    /// Commits `offset` for every (topic, partition), as the coordinator stores it: by name.
    fn commit(groups: &GroupCoordinator, group: &str, offsets: &[(&str, i32, i64)]) {
        let offsets = offsets
            .iter()
            .map(|&(t, p, o)| (t.to_string(), p, o, -1, None))
            .collect();
        let r = groups.commit_offsets(group, "", None, -1, offsets, ResponseError::GroupIdNotFound);
        assert!(r.unwrap().iter().all(Option::is_none));
    }

    #[test]
    fn the_codec_names_topics_in_v8_9_and_by_id_from_v10() {
        let id = Uuid::new_v4();
        let r = fetch("g", Some(vec![("t", id, vec![0, 1])]));
        for (version, name, topic_id) in [(9, "t", Uuid::nil()), (10, "", id)] {
            let mut buf = BytesMut::new();
            r.encode(&mut buf, version).unwrap();
            assert_eq!(buf.len(), r.compute_size(version).unwrap());
            let back = OffsetFetchRequest::decode(&mut buf.freeze(), version).unwrap();
            let t = &back.groups[0].topics.as_ref().unwrap()[0];
            assert_eq!(
                (t.name.as_str(), t.topic_id),
                (name, topic_id),
                "v{version}"
            );
            assert_eq!(t.partition_indexes, [0, 1]);
        }
        // A null topic list (all topics) stays null at v10.
        let all = fetch("g", None);
        let mut buf = BytesMut::new();
        all.encode(&mut buf, 10).unwrap();
        let back = OffsetFetchRequest::decode(&mut buf.freeze(), 10).unwrap();
        assert!(back.groups[0].topics.is_none());
    }

    #[test]
    fn v10_fetches_by_topic_id_with_unknown_ids_answered_after_the_known() {
        let dir = tempfile::tempdir().unwrap();
        let s = services(dir.path());
        let t = s.broker.create_topic("t", 2, 1, BTreeMap::new()).unwrap();
        commit(&s.groups, "g", &[("t", 0, 7)]);
        let stranger = Uuid::new_v4();
        let r = handle(
            &s.broker,
            &s.groups,
            fetch(
                "g",
                Some(vec![("", stranger, vec![0]), ("", t.id, vec![0, 1])]),
            ),
            10,
        );
        assert_eq!(
            answers(&r),
            [
                ("t".into(), t.id, 0, 7, 0),
                ("t".into(), t.id, 1, -1, 0),
                (String::new(), stranger, 0, -1, 100),
            ]
        );
        // The same at v10 on the wire: ids, no names.
        let mut buf = BytesMut::new();
        r.encode(&mut buf, 10).unwrap();
        let back = OffsetFetchResponse::decode(&mut buf.freeze(), 10).unwrap();
        assert_eq!(back.groups[0].topics[0].topic_id, t.id);
        assert_eq!(back.groups[0].topics[0].name.as_str(), "");
    }

    #[test]
    fn v10_all_topics_names_each_by_its_id_and_leaves_out_deleted_topics() {
        let dir = tempfile::tempdir().unwrap();
        let s = services(dir.path());
        let a = s.broker.create_topic("a", 1, 1, BTreeMap::new()).unwrap();
        s.broker
            .create_topic("gone", 1, 1, BTreeMap::new())
            .unwrap();
        commit(&s.groups, "g", &[("a", 0, 3), ("gone", 0, 4)]);
        s.broker.delete_topic("gone").unwrap();
        let r = handle(&s.broker, &s.groups, fetch("g", None), 10);
        assert_eq!(answers(&r), [("a".into(), a.id, 0, 3, 0)]);
        // v9 names every committed topic, existing or not, as before.
        let r = handle(&s.broker, &s.groups, fetch("g", None), 9);
        let mut names: Vec<_> = answers(&r).into_iter().map(|a| (a.0, a.3)).collect();
        names.sort();
        assert_eq!(names, [("a".into(), 3), ("gone".into(), 4)]);
    }

    #[test]
    fn the_id_of_a_deleted_topic_does_not_reach_the_offsets_of_its_successor() {
        let dir = tempfile::tempdir().unwrap();
        let s = services(dir.path());
        let old = s.broker.create_topic("t", 1, 1, BTreeMap::new()).unwrap();
        s.broker.delete_topic("t").unwrap();
        let new = s.broker.create_topic("t", 1, 1, BTreeMap::new()).unwrap();
        commit(&s.groups, "g", &[("t", 0, 5)]);
        let r = handle(
            &s.broker,
            &s.groups,
            fetch("g", Some(vec![("", old.id, vec![0])])),
            10,
        );
        assert_eq!(answers(&r), [(String::new(), old.id, 0, -1, 100)]);
        let r = handle(
            &s.broker,
            &s.groups,
            fetch("g", Some(vec![("", new.id, vec![0])])),
            10,
        );
        assert_eq!(answers(&r), [("t".into(), new.id, 0, 5, 0)]);
    }

    #[test]
    fn v9_still_fetches_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let s = services(dir.path());
        s.broker.create_topic("t", 1, 1, BTreeMap::new()).unwrap();
        commit(&s.groups, "g", &[("t", 0, 2)]);
        let r = handle(
            &s.broker,
            &s.groups,
            fetch("g", Some(vec![("t", Uuid::nil(), vec![0])])),
            9,
        );
        assert_eq!(answers(&r), [("t".into(), Uuid::nil(), 0, 2, 0)]);
    }

    #[test]
    fn topics_named_by_id_are_authorized_by_their_names() {
        let dir = tempfile::tempdir().unwrap();
        let broker = broker_with_acls(
            dir.path(),
            &[
                allow("User:alice", Op::Describe, Res::Group, "g"),
                allow("User:alice", Op::Describe, Res::Topic, "allowed"),
            ],
        );
        let allowed = broker
            .create_topic("allowed", 1, 1, BTreeMap::new())
            .unwrap();
        let denied = broker
            .create_topic("denied", 1, 1, BTreeMap::new())
            .unwrap();
        let groups = groups();
        commit(&groups, "g", &[("allowed", 0, 1), ("denied", 0, 2)]);
        let stranger = Uuid::new_v4();
        let run = |req: OffsetFetchRequest| {
            let Gate::Run(RequestKind::OffsetFetch(req), Some(finish)) =
                OffsetFetch::authorize(&who(&broker, "User:alice"), req, 10)
            else {
                panic!("checked on the answer")
            };
            let Outcome::Respond(resp) =
                finish(Outcome::respond(handle(&broker, &groups, req, 10)))
            else {
                panic!("answered")
            };
            let ResponseKind::OffsetFetch(resp) = *resp else {
                panic!("an OffsetFetch answer")
            };
            answers(&resp)
        };
        let named = fetch(
            "g",
            Some(vec![
                ("", allowed.id, vec![0]),
                ("", denied.id, vec![0]),
                ("", stranger, vec![0]),
            ]),
        );
        assert_eq!(
            run(named),
            [
                ("allowed".into(), allowed.id, 0, 1, 0),
                ("denied".into(), denied.id, 0, -1, 29),
                (String::new(), stranger, 0, -1, 100),
            ]
        );
        // All topics: what alice may not describe is left out.
        assert_eq!(
            run(fetch("g", None)),
            [("allowed".into(), allowed.id, 0, 1, 0)]
        );
    }
}
