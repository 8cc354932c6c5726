//! DescribeTopicPartitions (KIP-966): topics and their partitions' leadership, paginated by a
//! partition limit and a cursor, as Kafka's admin client uses it for `describeTopics`.
//!
//! As in Kafka: an empty topic list means every topic; topics are answered in name order,
//! starting at the cursor's topic (at the cursor's partition) and stopping once
//! `ResponsePartitionLimit` partitions (capped to 1..=2000, Kafka's
//! `max.request.partition.size.limit`) are in the response. `NextCursor` then names the first
//! partition left out. A cursor whose topic is not among the named topics, or with a negative
//! partition, makes the whole request INVALID_REQUEST. Strata has no eligible leader replicas,
//! so both ELR lists are empty, as Kafka answers while every replica is in sync.

use std::collections::BTreeSet;

use kafka_protocol::messages::describe_topic_partitions_response::{
    Cursor, DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic,
};
use kafka_protocol::messages::{
    DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use uuid::Uuid;

use crate::api::gate::{Gate, Who, TOPIC_DENIED};
use crate::api::metadata::{broker_ids, LeadershipView};
use crate::api::{Api, Context, Outcome};
use crate::broker::{is_internal_topic, validate_topic_name, Broker};
use crate::security::acl::{Operation as Op, ResourceType as Res};
use crate::services::Services;

/// The most partitions one response carries: Kafka's default
/// `max.request.partition.size.limit`.
pub const MAX_REQUEST_PARTITION_SIZE_LIMIT: i32 = 2000;

fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

/// A topic answered with an error and nothing else.
fn error_topic(name: &str, error: ResponseError) -> DescribeTopicPartitionsResponseTopic {
    DescribeTopicPartitionsResponseTopic::default()
        .with_error_code(error.code())
        .with_name(Some(topic_name(name)))
        .with_topic_id(Uuid::nil())
}

/// The whole request refused as INVALID_REQUEST: every named topic with that error, as
/// Kafka's error response for the request lists them.
fn invalid_request(req: &DescribeTopicPartitionsRequest) -> DescribeTopicPartitionsResponse {
    let mut seen = BTreeSet::new();
    let topics = req
        .topics
        .iter()
        .filter(|t| seen.insert(t.name.as_str()))
        .map(|t| error_topic(&t.name, ResponseError::InvalidRequest))
        .collect();
    DescribeTopicPartitionsResponse::default().with_topics(topics)
}

/// Answers `req`. `may_describe` is the DESCRIBE check on a topic and `operations` a topic's
/// authorized operations, both for the requesting principal.
pub fn describe(
    broker: &Broker,
    req: &DescribeTopicPartitionsRequest,
    may_describe: &dyn Fn(&str) -> bool,
    operations: &dyn Fn(&str) -> i32,
) -> DescribeTopicPartitionsResponse {
    let all = req.topics.is_empty();
    let cursor = req
        .cursor
        .as_ref()
        .map(|c| (c.topic_name.as_str(), c.partition_index));
    let cursor_topic = cursor.map_or("", |(t, _)| t);
    // Topics from the cursor's on, in name order, each once.
    let names: BTreeSet<String> = if all {
        broker
            .topics()
            .iter()
            .map(|t| t.name.clone())
            .filter(|n| n.as_str() >= cursor_topic)
            .collect()
    } else {
        req.topics
            .iter()
            .map(|t| t.name.to_string())
            .filter(|n| n.as_str() >= cursor_topic)
            .collect()
    };
    if let Some((topic, partition)) = cursor {
        if (!all && !names.contains(topic)) || partition < 0 {
            return invalid_request(req);
        }
    }
    // Named topics the principal may not describe are refused without saying whether they
    // exist, all of them, even those past the partition limit; a listing of all topics
    // leaves them out.
    let (authorized, denied): (Vec<&String>, Vec<&String>) =
        names.iter().partition(|n| may_describe(n));
    let mut refused: Vec<_> = if all {
        Vec::new()
    } else {
        denied
            .iter()
            .map(|n| error_topic(n, TOPIC_DENIED))
            .collect()
    };

    let limit = req
        .response_partition_limit
        .min(MAX_REQUEST_PARTITION_SIZE_LIMIT)
        .max(1);
    let mut remaining = limit as usize;
    let view = LeadershipView::new(broker);
    let mut topics = Vec::new();
    let mut next_cursor = None;
    for name in authorized.into_iter().map(String::as_str) {
        if remaining == 0 {
            // Every partition of the previous topic is in; the next response starts here.
            next_cursor = Some(
                Cursor::default()
                    .with_topic_name(topic_name(name))
                    .with_partition_index(0),
            );
            break;
        }
        let Some(topic) = broker.topic(name) else {
            if !all {
                let error = if validate_topic_name(name).is_ok() {
                    ResponseError::UnknownTopicOrPartition
                } else {
                    ResponseError::InvalidTopicException
                };
                topics.push(error_topic(name, error).with_is_internal(is_internal_topic(name)));
            }
            continue;
        };
        let first = match cursor {
            Some((t, partition)) if t == name => partition as usize,
            _ => 0,
        };
        let count = topic.partitions.len();
        let upper = count.min(first.saturating_add(remaining));
        let partitions: Vec<_> = topic
            .partitions
            .get(first..upper)
            .unwrap_or_default()
            .iter()
            .map(|p| {
                let v = view.partition(&topic.name, p);
                DescribeTopicPartitionsResponsePartition::default()
                    .with_partition_index(v.index)
                    .with_leader_id(v.leader.unwrap_or(-1).into())
                    .with_leader_epoch(v.leader_epoch)
                    .with_replica_nodes(broker_ids(&v.replicas))
                    .with_isr_nodes(broker_ids(&v.isr))
                    .with_eligible_leader_replicas(Some(Vec::new()))
                    .with_last_known_elr(Some(Vec::new()))
                    .with_offline_replicas(broker_ids(&v.offline_replicas))
            })
            .collect();
        remaining -= partitions.len();
        topics.push(
            DescribeTopicPartitionsResponseTopic::default()
                .with_name(Some(topic_name(name)))
                .with_topic_id(topic.id)
                .with_is_internal(topic.is_internal())
                .with_partitions(partitions),
        );
        if upper < count {
            next_cursor = Some(
                Cursor::default()
                    .with_topic_name(topic_name(name))
                    .with_partition_index(upper as i32),
            );
            break;
        }
    }
    for t in &mut topics {
        if let Some(name) = &t.name {
            t.topic_authorized_operations = operations(name);
        }
    }
    topics.append(&mut refused);
    DescribeTopicPartitionsResponse::default()
        .with_topics(topics)
        .with_next_cursor(next_cursor)
}

/// Answers `req` for `principal` connecting from `host`, with the broker's authorizer (which
/// allows everything when none is configured).
pub fn describe_as(
    broker: &Broker,
    req: &DescribeTopicPartitionsRequest,
    principal: &str,
    host: &str,
) -> DescribeTopicPartitionsResponse {
    let authorizer = &broker.authorizer;
    let may_describe =
        |name: &str| authorizer.authorize(principal, host, Op::Describe, Res::Topic, name);
    let operations =
        |name: &str| authorizer.authorized_operations(principal, host, Res::Topic, name);
    describe(broker, req, &may_describe, &operations)
}

/// DescribeTopicPartitions: DESCRIBE on each topic. The check runs inside the handler, as in
/// Kafka, because the partition limit counts only the partitions of topics the principal may
/// describe: a named topic it may not describe is refused with TOPIC_AUTHORIZATION_FAILED,
/// and a listing of all topics leaves such topics out.
pub struct DescribeTopicPartitions;

impl Api for DescribeTopicPartitions {
    type Request = DescribeTopicPartitionsRequest;

    fn authorize(_who: &Who, r: DescribeTopicPartitionsRequest, _version: i16) -> Gate {
        Gate::Run(r.into(), None)
    }

    async fn handle(
        s: &Services,
        ctx: &Context,
        r: DescribeTopicPartitionsRequest,
        _version: i16,
    ) -> Outcome {
        let host = ctx.peer.ip().to_string();
        Outcome::respond(describe_as(&s.broker, &r, &ctx.principal, &host))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use kafka_protocol::messages::describe_topic_partitions_request::{self as req, TopicRequest};
    use kafka_protocol::messages::{ApiKey, BrokerId};

    use super::*;
    use crate::api::test_support::broker_with_acls;

    const ALL_OPS: i32 = crate::api::metadata::TOPIC_AUTHORIZED_OPERATIONS;

    /// A broker with topics `a` (5 partitions), `b` (3) and `c` (2).
    fn broker(dir: &std::path::Path) -> Arc<Broker> {
        let broker = broker_with_acls(dir, &[]);
        for (name, partitions) in [("a", 5), ("b", 3), ("c", 2)] {
            broker
                .create_topic(name, partitions, 1, BTreeMap::new())
                .expect("topic");
        }
        broker
    }

    fn request(
        topics: &[&str],
        limit: i32,
        cursor: Option<(&str, i32)>,
    ) -> DescribeTopicPartitionsRequest {
        DescribeTopicPartitionsRequest::default()
            .with_topics(
                topics
                    .iter()
                    .map(|t| TopicRequest::default().with_name(topic_name(t)))
                    .collect(),
            )
            .with_response_partition_limit(limit)
            .with_cursor(cursor.map(|(t, p)| {
                req::Cursor::default()
                    .with_topic_name(topic_name(t))
                    .with_partition_index(p)
            }))
    }

    fn run(broker: &Broker, r: DescribeTopicPartitionsRequest) -> DescribeTopicPartitionsResponse {
        describe(broker, &r, &|_| true, &|_| ALL_OPS)
    }

    /// (topic, error, partition indices) per topic, and the next cursor.
    type Page = (Vec<(String, i16, Vec<i32>)>, Option<(String, i32)>);

    fn page(resp: &DescribeTopicPartitionsResponse) -> Page {
        let topics = resp
            .topics
            .iter()
            .map(|t| {
                (
                    t.name.as_ref().map(|n| n.to_string()).unwrap_or_default(),
                    t.error_code,
                    t.partitions.iter().map(|p| p.partition_index).collect(),
                )
            })
            .collect();
        let cursor = resp
            .next_cursor
            .as_ref()
            .map(|c| (c.topic_name.to_string(), c.partition_index));
        (topics, cursor)
    }

    fn ok(name: &str, partitions: &[i32]) -> (String, i16, Vec<i32>) {
        (name.to_string(), 0, partitions.to_vec())
    }

    #[test]
    fn the_partition_limit_pages_across_topics_with_a_cursor() {
        let dir = tempfile::tempdir().expect("dir");
        let broker = broker(dir.path());
        // Stops inside `a`: the cursor names its first partition left out.
        assert_eq!(
            page(&run(&broker, request(&[], 4, None))),
            (vec![ok("a", &[0, 1, 2, 3])], Some(("a".into(), 4)))
        );
        // From the cursor: the rest of `a` and all of `b` fill the limit exactly, so the
        // cursor points at the start of `c`.
        assert_eq!(
            page(&run(&broker, request(&[], 4, Some(("a", 4))))),
            (
                vec![ok("a", &[4]), ok("b", &[0, 1, 2])],
                Some(("c".into(), 0))
            )
        );
        assert_eq!(
            page(&run(&broker, request(&[], 4, Some(("c", 0))))),
            (vec![ok("c", &[0, 1])], None)
        );
        // Named topics are answered in name order, each once.
        assert_eq!(
            page(&run(&broker, request(&["c", "a", "c"], 6, None))),
            (
                vec![ok("a", &[0, 1, 2, 3, 4]), ok("c", &[0])],
                Some(("c".into(), 1))
            )
        );
        // A limit of 0 or below is raised to 1.
        for limit in [0, -5] {
            assert_eq!(
                page(&run(&broker, request(&["b"], limit, None))),
                (vec![ok("b", &[0])], Some(("b".into(), 1)))
            );
        }
    }

    #[test]
    fn partitions_carry_leadership_and_empty_eligible_leader_replicas() {
        let dir = tempfile::tempdir().expect("dir");
        let broker = broker(dir.path());
        let resp = run(&broker, request(&["b"], 2000, None));
        let t = &resp.topics[0];
        assert_eq!(t.topic_id, broker.topic("b").expect("b").id);
        assert!(!t.is_internal);
        assert_eq!(t.topic_authorized_operations, ALL_OPS);
        let node = BrokerId(broker.config.node_id);
        for p in &t.partitions {
            assert_eq!(p.error_code, 0);
            assert_eq!(p.leader_id, node);
            assert_eq!(p.replica_nodes, vec![node]);
            assert_eq!(p.isr_nodes, vec![node]);
            assert_eq!(p.eligible_leader_replicas, Some(vec![]));
            assert_eq!(p.last_known_elr, Some(vec![]));
            assert!(p.offline_replicas.is_empty());
        }
    }

    #[test]
    fn a_limit_above_the_maximum_is_capped_at_2000_partitions() {
        let dir = tempfile::tempdir().expect("dir");
        let broker = broker(dir.path());
        broker
            .create_topic(
                "big",
                MAX_REQUEST_PARTITION_SIZE_LIMIT + 1,
                1,
                BTreeMap::new(),
            )
            .expect("topic");
        let (topics, cursor) = page(&run(&broker, request(&["big", "c"], i32::MAX, None)));
        assert_eq!(topics.len(), 1);
        assert_eq!(topics[0].2.len(), MAX_REQUEST_PARTITION_SIZE_LIMIT as usize);
        assert_eq!(
            cursor,
            Some(("big".into(), MAX_REQUEST_PARTITION_SIZE_LIMIT))
        );
        // A cursor far past the last partition does not overflow: the topic comes back empty.
        assert_eq!(
            page(&run(
                &broker,
                request(&["big", "c"], i32::MAX, Some(("big", i32::MAX)))
            )),
            (vec![ok("big", &[]), ok("c", &[0, 1])], None)
        );
    }

    #[test]
    fn a_cursor_on_a_missing_or_unnamed_topic() {
        let dir = tempfile::tempdir().expect("dir");
        let broker = broker(dir.path());
        // Listing all topics from a topic that does not exist starts at the next one, at its
        // first partition.
        assert_eq!(
            page(&run(&broker, request(&[], 2000, Some(("a0", 3))))),
            (vec![ok("b", &[0, 1, 2]), ok("c", &[0, 1])], None)
        );
        // A named unknown topic in the cursor is answered like any unknown topic.
        assert_eq!(
            page(&run(&broker, request(&["zz"], 2000, Some(("zz", 1))))),
            (vec![("zz".into(), UNKNOWN_TOPIC, vec![])], None)
        );
        // The cursor's topic must be one of the named topics, and its partition not negative:
        // otherwise every named topic gets INVALID_REQUEST.
        let invalid = ResponseError::InvalidRequest.code();
        assert_eq!(
            page(&run(
                &broker,
                request(&["c", "b", "c"], 2000, Some(("a", 0)))
            )),
            (
                vec![("c".into(), invalid, vec![]), ("b".into(), invalid, vec![])],
                None
            )
        );
        assert_eq!(
            page(&run(&broker, request(&["b"], 2000, Some(("b", -1))))),
            (vec![("b".into(), invalid, vec![])], None)
        );
        assert_eq!(
            page(&run(&broker, request(&[], 2000, Some(("b", -1))))),
            (vec![], None)
        );
    }

    const UNKNOWN_TOPIC: i16 = 3;

    #[test]
    fn unknown_and_invalid_named_topics_take_no_room() {
        let dir = tempfile::tempdir().expect("dir");
        let broker = broker(dir.path());
        // `b` fills all but one of the limit; what follows it still gets its error.
        let resp = run(
            &broker,
            request(&["b", "bad/name", "__consumer_offsets"], 4, None),
        );
        assert_eq!(
            page(&resp),
            (
                vec![
                    (
                        "__consumer_offsets".into(),
                        ResponseError::UnknownTopicOrPartition.code(),
                        vec![]
                    ),
                    ok("b", &[0, 1, 2]),
                    (
                        "bad/name".into(),
                        ResponseError::InvalidTopicException.code(),
                        vec![]
                    ),
                ],
                None
            )
        );
        assert!(resp.topics[0].is_internal);
        assert_eq!(resp.topics[0].topic_id, Uuid::nil());
    }

    #[test]
    fn topics_the_principal_may_not_describe_are_refused_or_left_out() {
        let dir = tempfile::tempdir().expect("dir");
        let broker = broker(dir.path());
        let not_b = |n: &str| n != "b";
        let ops = |n: &str| if n == "a" { 1 << 8 } else { 0 };
        // Named: refused after the answered topics, with no id, even past the limit.
        let resp = describe(
            &broker,
            &request(&["b", "a", "c", "zz"], 2, None),
            &not_b,
            &ops,
        );
        assert_eq!(
            page(&resp),
            (
                vec![ok("a", &[0, 1]), ("b".into(), TOPIC_DENIED.code(), vec![])],
                Some(("a".into(), 2))
            )
        );
        assert_eq!(resp.topics[0].topic_authorized_operations, 1 << 8);
        assert_eq!(resp.topics[1].topic_id, Uuid::nil());
        assert_eq!(resp.topics[1].topic_authorized_operations, i32::MIN);
        // All topics: `b` is left out and its partitions do not count towards the limit.
        let resp = describe(&broker, &request(&[], 7, None), &not_b, &ops);
        assert_eq!(
            page(&resp),
            (vec![ok("a", &[0, 1, 2, 3, 4]), ok("c", &[0, 1])], None)
        );
        // A cursor on a refused topic: the next topic starts at its first partition.
        let resp = describe(
            &broker,
            &request(&["b", "c"], 7, Some(("b", 2))),
            &not_b,
            &ops,
        );
        assert_eq!(
            page(&resp),
            (
                vec![ok("c", &[0, 1]), ("b".into(), TOPIC_DENIED.code(), vec![])],
                None
            )
        );
    }

    #[test]
    fn the_authorizer_decides_which_topics_are_described() {
        use crate::api::test_support::allow;
        let dir = tempfile::tempdir().expect("dir");
        let broker = broker(dir.path());
        broker
            .authorizer
            .add(&[allow("User:alice", Op::Describe, Res::Topic, "a")]);
        let as_alice = |r| describe_as(&broker, &r, "User:alice", "127.0.0.1");
        let resp = as_alice(request(&["a", "b"], 2000, None));
        assert_eq!(
            page(&resp),
            (
                vec![
                    ok("a", &[0, 1, 2, 3, 4]),
                    ("b".into(), TOPIC_DENIED.code(), vec![])
                ],
                None
            )
        );
        assert_eq!(resp.topics[0].topic_authorized_operations, 1 << 8);
        assert_eq!(
            page(&as_alice(request(&[], 2000, None))),
            (vec![ok("a", &[0, 1, 2, 3, 4])], None)
        );
        // A super user sees everything, with every operation.
        let resp = describe_as(
            &broker,
            &request(&[], 2000, None),
            "User:admin",
            "127.0.0.1",
        );
        assert_eq!(resp.topics.len(), 3);
        assert!(resp
            .topics
            .iter()
            .all(|t| t.topic_authorized_operations == ALL_OPS));
    }

    #[test]
    fn api_versions_advertises_version_0() {
        assert!(crate::api::SERVED_APIS.contains(&ApiKey::DescribeTopicPartitions));
        assert_eq!(
            crate::api::served_versions(ApiKey::DescribeTopicPartitions),
            Some((0, 0))
        );
    }
}
