//! OffsetCommit: fenced by generation and member, stored durably in `__consumer_offsets`
//! before the answer.
//!
//! From v10 (Kafka 4.4) a request names its topics by id. Each id is resolved to its topic's
//! name in the catalog, as Kafka's `KafkaApis` does before its ACL checks and the group
//! coordinator; an id the catalog does not know (never created, or the topic was deleted)
//! answers UNKNOWN_TOPIC_ID for each of its partitions. The offsets stay stored by name, and the
//! answer names the topics by the ids the request used.

use std::sync::Arc;

use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::{
    offset_commit_request, OffsetCommitRequest, OffsetCommitResponse, RequestKind, ResponseKind,
};
use kafka_protocol::ResponseError;

use crate::api::gate::{self, Gate, Who, GROUP_DENIED, TOPIC_DENIED};
use crate::api::{blocking, Api, Context, Outcome};
use crate::broker::{Broker, TopicRef};
use crate::coordinator::GroupCoordinator;
use crate::security::acl::Operation as Op;
use crate::services::Services;

pub async fn handle(
    broker: Arc<Broker>,
    groups: &Arc<GroupCoordinator>,
    req: OffsetCommitRequest,
    version: i16,
) -> OffsetCommitResponse {
    let shape: Vec<(kafka_protocol::messages::TopicName, uuid::Uuid, Vec<i32>)> = req
        .topics
        .iter()
        .map(|t| {
            (
                t.name.clone(),
                t.topic_id,
                t.partitions.iter().map(|p| p.partition_index).collect(),
            )
        })
        .collect();
    let respond = |errors: Vec<Option<ResponseError>>| {
        let mut it = errors.into_iter();
        OffsetCommitResponse::default().with_topics(
            shape
                .iter()
                .map(|(name, id, parts)| {
                    OffsetCommitResponseTopic::default()
                        .with_name(name.clone())
                        .with_topic_id(*id)
                        .with_partitions(
                            parts
                                .iter()
                                .map(|&p| {
                                    OffsetCommitResponsePartition::default()
                                        .with_partition_index(p)
                                        .with_error_code(
                                            it.next().flatten().map(|e| e.code()).unwrap_or(0),
                                        )
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
    };
    let total: usize = shape.iter().map(|(_, _, p)| p.len()).sum();
    let coordinator = groups.clone();
    // Unknown topic ids and partitions that do not exist are refused here, as Kafka does
    // before the coordinator.
    let mut slots: Vec<Option<ResponseError>> = Vec::with_capacity(total);
    let mut offsets: Vec<(String, i32, i64, i32, Option<String>)> = Vec::new();
    for t in &req.topics {
        let topic = topic_name(&broker, &t.name, t.topic_id, version >= 10);
        for p in &t.partitions {
            match &topic {
                Err(e) => slots.push(Some(*e)),
                Ok(name) if broker.partition(name, p.partition_index).is_some() => {
                    slots.push(None);
                    offsets.push((
                        name.clone(),
                        p.partition_index,
                        p.committed_offset,
                        p.committed_leader_epoch,
                        p.committed_metadata.as_ref().map(|m| m.to_string()),
                    ));
                }
                Ok(_) => slots.push(Some(ResponseError::UnknownTopicOrPartition)),
            }
        }
    }
    let group = req.group_id.0.to_string();
    let member = req.member_id.to_string();
    let instance = req.group_instance_id.as_ref().map(|i| i.to_string());
    let generation = req.generation_id_or_member_epoch;
    let unknown_group = if version >= 9 {
        ResponseError::GroupIdNotFound
    } else {
        ResponseError::IllegalGeneration
    };
    let result = blocking(move || {
        coordinator.commit_offsets(
            &group,
            &member,
            instance.as_deref(),
            generation,
            offsets,
            unknown_group,
        )
    })
    .await;
    // Merge the coordinator's answers into the slots of the partitions it saw.
    let merge = |answers: Vec<Option<ResponseError>>| {
        let mut it = answers.into_iter();
        slots
            .iter()
            .map(|s| if s.is_some() { *s } else { it.next().flatten() })
            .collect::<Vec<_>>()
    };
    let result = result.map(|r| r.map(merge));
    match result {
        Ok(Ok(errors)) => respond(errors),
        Ok(Err(e)) => respond(vec![Some(e); total]),
        Err(_) => respond(vec![Some(ResponseError::UnknownServerError); total]),
    }
}

/// The name of the topic a commit names: by id (`by_id`: OffsetCommit v10+, TxnOffsetCommit
/// v6+), or by name (whether that topic exists is checked with its partitions). An id the
/// catalog does not know is UNKNOWN_TOPIC_ID: a deleted topic's id never reaches the offsets of
/// a new topic of the same name.
pub(crate) fn topic_name(
    broker: &Broker,
    name: &kafka_protocol::messages::TopicName,
    id: uuid::Uuid,
    by_id: bool,
) -> Result<String, ResponseError> {
    if by_id {
        broker.resolve(&TopicRef::Id(id)).map(|t| t.name.clone())
    } else {
        Ok(name.0.to_string())
    }
}

/// OffsetCommit: READ on the group, then READ on each topic (a topic named by id is checked
/// by its name; an unknown id passes, to be answered UNKNOWN_TOPIC_ID).
pub struct OffsetCommit;

impl Api for OffsetCommit {
    type Request = OffsetCommitRequest;

    fn authorize(who: &Who, mut r: OffsetCommitRequest, _version: i16) -> Gate {
        if !who.may_use_group(&r.group_id) {
            let topics = r.topics.iter().map(|t| refusal(t, GROUP_DENIED)).collect();
            return Gate::Answer(ResponseKind::OffsetCommit(
                OffsetCommitResponse::default().with_topics(topics),
            ));
        }
        let (ok, denied): (Vec<_>, Vec<_>) = r
            .topics
            .into_iter()
            .partition(|t| who.may_topic(Op::Read, &t.name, &t.topic_id));
        r.topics = ok;
        let refusals = denied.iter().map(|t| refusal(t, TOPIC_DENIED)).collect();
        gate::run_and_extend(
            RequestKind::OffsetCommit(r),
            refusals,
            |resp, mut extra| match resp {
                ResponseKind::OffsetCommit(mut o) => {
                    o.topics.append(&mut extra);
                    ResponseKind::OffsetCommit(o)
                }
                other => other,
            },
        )
    }

    async fn handle(s: &Services, _ctx: &Context, r: OffsetCommitRequest, version: i16) -> Outcome {
        Outcome::respond(handle(s.broker.clone(), &s.groups, r, version).await)
    }
}

/// A refused topic: every partition with `code`.
fn refusal(
    t: &offset_commit_request::OffsetCommitRequestTopic,
    code: ResponseError,
) -> OffsetCommitResponseTopic {
    OffsetCommitResponseTopic::default()
        .with_name(t.name.clone())
        .with_topic_id(t.topic_id)
        .with_partitions(
            t.partitions
                .iter()
                .map(|p| {
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code.code())
                })
                .collect(),
        )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use bytes::BytesMut;
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::{GroupId, TopicName};
    use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
    use uuid::Uuid;

    use super::*;
    use crate::api::test_support::{allow, broker_with_acls, services, who};
    use crate::security::acl::ResourceType as Res;

    /// A topic of a commit, named by `name` (v9) or `id` (v10), one offset per partition.
    fn topic(name: &str, id: Uuid, offsets: &[(i32, i64)]) -> OffsetCommitRequestTopic {
        OffsetCommitRequestTopic::default()
            .with_name(TopicName(StrBytes::from_string(name.to_string())))
            .with_topic_id(id)
            .with_partitions(
                offsets
                    .iter()
                    .map(|&(p, o)| {
                        OffsetCommitRequestPartition::default()
                            .with_partition_index(p)
                            .with_committed_offset(o)
                    })
                    .collect(),
            )
    }

    /// A simple commit (no member, no generation) of `topics` for `group`.
    fn commit(group: &str, topics: Vec<OffsetCommitRequestTopic>) -> OffsetCommitRequest {
        OffsetCommitRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
            .with_generation_id_or_member_epoch(-1)
            .with_topics(topics)
    }

    /// (name, id, partition, error code) of every partition answered.
    fn answers(r: &OffsetCommitResponse) -> Vec<(String, Uuid, i32, i16)> {
        r.topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(|p| {
                    (
                        t.name.to_string(),
                        t.topic_id,
                        p.partition_index,
                        p.error_code,
                    )
                })
            })
            .collect()
    }

    fn round_trip(r: &OffsetCommitRequest, version: i16) -> OffsetCommitRequest {
        let mut buf = BytesMut::new();
        r.encode(&mut buf, version).unwrap();
        assert_eq!(buf.len(), r.compute_size(version).unwrap(), "v{version}");
        let mut bytes = buf.freeze();
        let decoded = OffsetCommitRequest::decode(&mut bytes, version).unwrap();
        assert!(bytes.is_empty(), "v{version}: bytes left over");
        decoded
    }

    #[test]
    fn the_codec_names_topics_up_to_v9_and_by_id_from_v10() {
        let id = Uuid::new_v4();
        let r = commit("g", vec![topic("t", id, &[(0, 5)])]);
        let v9 = round_trip(&r, 9);
        assert_eq!(v9.topics[0].name.as_str(), "t");
        assert_eq!(
            v9.topics[0].topic_id,
            Uuid::nil(),
            "no id on the wire at v9"
        );
        let v10 = round_trip(&r, 10);
        assert_eq!(
            v10.topics[0].name.as_str(),
            "",
            "no name on the wire at v10"
        );
        assert_eq!(v10.topics[0].topic_id, id);
        assert_eq!(v10.topics[0].partitions, r.topics[0].partitions);
        // The v10 topic is the 16-byte id where v9 has the compact string "t" (2 bytes).
        assert_eq!(
            r.compute_size(10).unwrap(),
            r.compute_size(9).unwrap() + 16 - 2
        );
        assert!(r.encode(&mut BytesMut::new(), 11).is_err());

        let resp =
            OffsetCommitResponse::default().with_topics(vec![OffsetCommitResponseTopic::default()
                .with_topic_id(id)
                .with_partitions(vec![OffsetCommitResponsePartition::default()
                    .with_partition_index(3)
                    .with_error_code(100)])]);
        let mut buf = BytesMut::new();
        resp.encode(&mut buf, 10).unwrap();
        let back = OffsetCommitResponse::decode(&mut buf.freeze(), 10).unwrap();
        assert_eq!(back, resp);
    }

    #[tokio::test]
    async fn v10_commits_by_topic_id_and_unknown_ids_get_unknown_topic_id() {
        let dir = tempfile::tempdir().unwrap();
        let s = services(dir.path());
        let t = s.broker.create_topic("t", 2, 1, BTreeMap::new()).unwrap();
        let stranger = Uuid::new_v4();
        let r = handle(
            s.broker.clone(),
            &s.groups,
            commit(
                "g",
                vec![
                    topic("", t.id, &[(0, 7), (1, 8), (5, 1)]),
                    topic("", stranger, &[(0, 1), (1, 1)]),
                ],
            ),
            10,
        )
        .await;
        // Named by the ids the request used (v10 has no names on the wire).
        assert_eq!(
            answers(&r),
            [
                (String::new(), t.id, 0, 0),
                (String::new(), t.id, 1, 0),
                // A partition the known topic does not have, as Kafka answers it at v10 too.
                (String::new(), t.id, 5, 3),
                (String::new(), stranger, 0, 100),
                (String::new(), stranger, 1, 100),
            ]
        );
        // Stored by name: a fetch by name sees the offsets committed by id.
        let fetched = s
            .groups
            .fetch_offsets("g", Some(&[("t".into(), 0), ("t".into(), 1)]));
        let offsets: Vec<_> = fetched
            .iter()
            .map(|(_, c)| c.as_ref().map(|c| c.offset))
            .collect();
        assert_eq!(offsets, [Some(7), Some(8)]);
    }

    #[tokio::test]
    async fn only_unknown_ids_commit_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let s = services(dir.path());
        let stranger = Uuid::new_v4();
        let r = handle(
            s.broker.clone(),
            &s.groups,
            commit("g", vec![topic("", stranger, &[(0, 1)])]),
            10,
        )
        .await;
        assert_eq!(answers(&r), [(String::new(), stranger, 0, 100)]);
        assert!(s.groups.fetch_offsets("g", None).is_empty());
    }

    #[tokio::test]
    async fn v9_still_commits_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let s = services(dir.path());
        s.broker.create_topic("t", 1, 1, BTreeMap::new()).unwrap();
        let r = handle(
            s.broker.clone(),
            &s.groups,
            commit(
                "g",
                vec![
                    topic("t", Uuid::nil(), &[(0, 4)]),
                    topic("nope", Uuid::nil(), &[(0, 1)]),
                ],
            ),
            9,
        )
        .await;
        assert_eq!(
            answers(&r),
            [
                ("t".into(), Uuid::nil(), 0, 0),
                ("nope".into(), Uuid::nil(), 0, 3)
            ]
        );
        let fetched = s.groups.fetch_offsets("g", Some(&[("t".into(), 0)]));
        assert_eq!(fetched[0].1.as_ref().map(|c| c.offset), Some(4));
    }

    #[tokio::test]
    async fn the_id_of_a_deleted_topic_is_unknown_even_after_its_name_is_reused() {
        let dir = tempfile::tempdir().unwrap();
        let s = services(dir.path());
        let old = s.broker.create_topic("t", 1, 1, BTreeMap::new()).unwrap();
        s.broker.delete_topic("t").unwrap();
        let new = s.broker.create_topic("t", 1, 1, BTreeMap::new()).unwrap();
        assert_ne!(old.id, new.id);
        let r = handle(
            s.broker.clone(),
            &s.groups,
            commit("g", vec![topic("", old.id, &[(0, 9)])]),
            10,
        )
        .await;
        assert_eq!(answers(&r), [(String::new(), old.id, 0, 100)]);
        let fetched = s.groups.fetch_offsets("g", Some(&[("t".into(), 0)]));
        assert_eq!(fetched[0].1, None, "nothing committed to the new topic");
    }

    #[test]
    fn topics_named_by_id_are_authorized_by_their_names() {
        let dir = tempfile::tempdir().unwrap();
        let broker = broker_with_acls(
            dir.path(),
            &[
                allow("User:alice", Op::Read, Res::Group, "g"),
                allow("User:alice", Op::Read, Res::Topic, "allowed"),
            ],
        );
        let allowed = broker
            .create_topic("allowed", 1, 1, BTreeMap::new())
            .unwrap();
        let denied = broker
            .create_topic("denied", 1, 1, BTreeMap::new())
            .unwrap();
        let stranger = Uuid::new_v4();
        let req = commit(
            "g",
            vec![
                topic("", allowed.id, &[(0, 1)]),
                topic("", denied.id, &[(0, 1)]),
                topic("", stranger, &[(0, 1)]),
            ],
        );
        let Gate::Run(RequestKind::OffsetCommit(run), Some(finish)) =
            OffsetCommit::authorize(&who(&broker, "User:alice"), req.clone(), 10)
        else {
            panic!("a partial refusal runs the rest")
        };
        // The handler sees the allowed topic and the unknown id (answered UNKNOWN_TOPIC_ID).
        let ids: Vec<_> = run.topics.iter().map(|t| t.topic_id).collect();
        assert_eq!(ids, [allowed.id, stranger]);
        let Outcome::Respond(resp) = finish(Outcome::respond(OffsetCommitResponse::default()))
        else {
            panic!("answered")
        };
        let ResponseKind::OffsetCommit(resp) = *resp else {
            panic!("an OffsetCommit answer")
        };
        assert_eq!(answers(&resp), [(String::new(), denied.id, 0, 29)]);
        // Without READ on the group every topic is refused, by the id it was named with.
        let Gate::Answer(ResponseKind::OffsetCommit(resp)) =
            OffsetCommit::authorize(&who(&broker, "User:bob"), req, 10)
        else {
            panic!("refused as a whole")
        };
        let codes: Vec<_> = answers(&resp).into_iter().map(|a| (a.1, a.3)).collect();
        assert_eq!(codes, [(allowed.id, 30), (denied.id, 30), (stranger, 30)]);
    }
}
