//! The classic group coordinator: FindCoordinator, the JoinGroup / SyncGroup / Heartbeat /
//! LeaveGroup membership protocol (dynamic and static members), offset commits and fetches,
//! and the group admin APIs, each checked against Kafka's semantics.
//!
//! Group members that must wait for each other (JoinGroup and SyncGroup park until the
//! rebalance completes) each get their own connection and run in their own task.

use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition;
use kafka_protocol::messages::describe_groups_response::DescribedGroup;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::Encodable;

use crate::client::Client;
use crate::harness::*;

pub const JOIN_V: i16 = 9;
pub const SYNC_V: i16 = 5;
pub const HEARTBEAT_V: i16 = 4;
pub const LEAVE_V: i16 = 5;
pub const COMMIT_V: i16 = 9;
pub const OFFSET_FETCH_V: i16 = 9;
pub const DESCRIBE_V: i16 = 5;
pub const LIST_V: i16 = 5;
pub const DELETE_V: i16 = 2;

// Kafka error codes.
pub const NONE: i16 = 0;
pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
pub const OFFSET_METADATA_TOO_LARGE: i16 = 12;
pub const ILLEGAL_GENERATION: i16 = 22;
pub const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
pub const UNKNOWN_MEMBER_ID: i16 = 25;
pub const INVALID_SESSION_TIMEOUT: i16 = 26;
pub const REBALANCE_IN_PROGRESS: i16 = 27;
pub const NON_EMPTY_GROUP: i16 = 68;
pub const GROUP_ID_NOT_FOUND: i16 = 69;
pub const MEMBER_ID_REQUIRED: i16 = 79;
pub const FENCED_INSTANCE_ID: i16 = 82;
pub const GROUP_SUBSCRIBED_TO_TOPIC: i16 = 86;

/// Session timeout of members in tests that do not test expiry (nothing expires by accident).
pub const SESSION_MS: i32 = 10_000;
pub const REBALANCE_MS: i32 = 10_000;
pub const PROTOCOL: &str = "range";

/// Broker settings for group tests: no initial rebalance delay, short sessions allowed, few
/// `__consumer_offsets` partitions.
pub const GROUP_SETTINGS: [(&str, &str); 3] = [
    ("group.initial.rebalance.delay.ms", "0"),
    ("group.min.session.timeout.ms", "500"),
    ("offsets.topic.num.partitions", "3"),
];

pub async fn start() -> TestBroker {
    TestBroker::start_with(&GROUP_SETTINGS).await
}

pub fn group_id(s: &str) -> GroupId {
    GroupId(str_bytes(s))
}

/// A consumer-protocol subscription (v1) to `topics`, as the Java consumer sends it.
pub fn subscription(topics: &[&str]) -> Bytes {
    let mut s = ConsumerProtocolSubscription::default();
    s.topics = topics.iter().map(|t| str_bytes(t)).collect();
    let mut buf = BytesMut::new();
    buf.put_i16(1);
    s.encode(&mut buf, 1).expect("encode subscription");
    buf.freeze()
}

/// A consumer-protocol assignment (v1) of `partitions` of `topic`.
pub fn assignment(topic: &str, partitions: &[i32]) -> Bytes {
    let mut tp = TopicPartition::default();
    tp.topic = name(topic);
    tp.partitions = partitions.to_vec();
    let mut a = ConsumerProtocolAssignment::default();
    a.assigned_partitions = vec![tp];
    let mut buf = BytesMut::new();
    buf.put_i16(1);
    a.encode(&mut buf, 1).expect("encode assignment");
    buf.freeze()
}

pub fn join_request(
    group: &str,
    member_id: &str,
    instance: Option<&str>,
    session_ms: i32,
) -> JoinGroupRequest {
    let mut p = JoinGroupRequestProtocol::default();
    p.name = str_bytes(PROTOCOL);
    p.metadata = subscription(&["topic"]);
    let mut r = JoinGroupRequest::default();
    r.group_id = group_id(group);
    r.session_timeout_ms = session_ms;
    r.rebalance_timeout_ms = REBALANCE_MS;
    r.member_id = str_bytes(member_id);
    r.group_instance_id = instance.map(str_bytes);
    r.protocol_type = str_bytes("consumer");
    r.protocols = vec![p];
    r
}

pub async fn join(
    c: &mut Client,
    group: &str,
    member_id: &str,
    instance: Option<&str>,
) -> JoinGroupResponse {
    c.call(
        JOIN_V,
        &join_request(group, member_id, instance, SESSION_MS),
    )
    .await
}

/// Joins as a new member the way the Java consumer does: an empty member id first, then (for a
/// dynamic member, which gets MEMBER_ID_REQUIRED) again with the id the coordinator handed out.
pub async fn join_new(
    c: &mut Client,
    group: &str,
    instance: Option<&str>,
    session_ms: i32,
) -> JoinGroupResponse {
    let first = c
        .call(JOIN_V, &join_request(group, "", instance, session_ms))
        .await;
    if first.error_code != MEMBER_ID_REQUIRED {
        return first;
    }
    assert!(instance.is_none(), "a static member needs no member id");
    assert!(
        !first.member_id.is_empty(),
        "MEMBER_ID_REQUIRED carries an id"
    );
    let id = first.member_id.to_string();
    c.call(JOIN_V, &join_request(group, &id, instance, session_ms))
        .await
}

pub fn sync_request(
    group: &str,
    member_id: &str,
    instance: Option<&str>,
    generation: i32,
    assignments: Vec<(String, Bytes)>,
) -> SyncGroupRequest {
    let mut r = SyncGroupRequest::default();
    r.group_id = group_id(group);
    r.generation_id = generation;
    r.member_id = str_bytes(member_id);
    r.group_instance_id = instance.map(str_bytes);
    r.protocol_type = Some(str_bytes("consumer"));
    r.protocol_name = Some(str_bytes(PROTOCOL));
    r.assignments = assignments
        .into_iter()
        .map(|(m, a)| {
            let mut x = SyncGroupRequestAssignment::default();
            x.member_id = str_bytes(&m);
            x.assignment = a;
            x
        })
        .collect();
    r
}

pub async fn heartbeat(
    c: &mut Client,
    group: &str,
    member_id: &str,
    instance: Option<&str>,
    generation: i32,
) -> i16 {
    let mut r = HeartbeatRequest::default();
    r.group_id = group_id(group);
    r.generation_id = generation;
    r.member_id = str_bytes(member_id);
    r.group_instance_id = instance.map(str_bytes);
    c.call(HEARTBEAT_V, &r).await.error_code
}

pub async fn describe(c: &mut Client, group: &str) -> DescribedGroup {
    let mut r = DescribeGroupsRequest::default();
    r.groups = vec![group_id(group)];
    let mut resp = c.call(DESCRIBE_V, &r).await;
    assert_eq!(resp.groups.len(), 1);
    resp.groups.remove(0)
}

pub async fn group_state(c: &mut Client, group: &str) -> String {
    describe(c, group).await.group_state.to_string()
}

/// (partition, offset, leader epoch, metadata) of one commit.
pub type CommitEntry<'a> = (i32, i64, i32, &'a str);

pub fn commit_request(
    v: i16,
    group: &str,
    generation: i32,
    member_id: &str,
    instance: Option<&str>,
    topic: &str,
    entries: &[CommitEntry],
) -> OffsetCommitRequest {
    let mut t = OffsetCommitRequestTopic::default();
    t.name = name(topic);
    t.partitions = entries
        .iter()
        .map(|&(p, offset, epoch, metadata)| {
            let mut x = OffsetCommitRequestPartition::default();
            x.partition_index = p;
            x.committed_offset = offset;
            if v >= 6 {
                x.committed_leader_epoch = epoch;
            }
            x.committed_metadata = Some(str_bytes(metadata));
            x
        })
        .collect();
    let mut r = OffsetCommitRequest::default();
    r.group_id = group_id(group);
    r.generation_id_or_member_epoch = generation;
    r.member_id = str_bytes(member_id);
    if v >= 7 {
        r.group_instance_id = instance.map(str_bytes);
    }
    r.topics = vec![t];
    r
}

/// Commits at the latest version; returns each partition's error code.
pub async fn commit(
    c: &mut Client,
    group: &str,
    generation: i32,
    member_id: &str,
    topic: &str,
    entries: &[CommitEntry<'_>],
) -> Vec<i16> {
    let resp = c
        .call(
            COMMIT_V,
            &commit_request(COMMIT_V, group, generation, member_id, None, topic, entries),
        )
        .await;
    assert_eq!(resp.topics.len(), 1);
    assert_eq!(resp.topics[0].name.0.as_str(), topic);
    let parts = &resp.topics[0].partitions;
    assert_eq!(
        parts.iter().map(|p| p.partition_index).collect::<Vec<_>>(),
        entries.iter().map(|e| e.0).collect::<Vec<_>>()
    );
    parts.iter().map(|p| p.error_code).collect()
}

/// A simple commit (from outside any generation) of `offset` to each partition.
pub async fn simple_commit(c: &mut Client, group: &str, topic: &str, parts: &[(i32, i64)]) {
    let entries: Vec<CommitEntry> = parts.iter().map(|&(p, o)| (p, o, -1, "")).collect();
    let errors = commit(c, group, -1, "", topic, &entries).await;
    assert!(
        errors.iter().all(|&e| e == NONE),
        "simple commit: {errors:?}"
    );
}

/// A group to fetch offsets of: its id and (topic, partitions), or None for all partitions.
pub type FetchSpec<'a> = (&'a str, Option<(&'a str, &'a [i32])>);

pub fn offset_fetch_request(v: i16, groups: &[FetchSpec]) -> OffsetFetchRequest {
    let mut r = OffsetFetchRequest::default();
    if v >= 8 {
        r.groups = groups
            .iter()
            .map(|(g, topics)| {
                let mut x = OffsetFetchRequestGroup::default();
                x.group_id = group_id(g);
                x.topics = topics.map(|(t, ps)| {
                    let mut y = OffsetFetchRequestTopics::default();
                    y.name = name(t);
                    y.partition_indexes = ps.to_vec();
                    vec![y]
                });
                x
            })
            .collect();
    } else {
        assert_eq!(groups.len(), 1, "OffsetFetch v{v} takes one group");
        let (g, topics) = groups[0];
        r.group_id = group_id(g);
        r.topics = topics.map(|(t, ps)| {
            let mut y = OffsetFetchRequestTopic::default();
            y.name = name(t);
            y.partition_indexes = ps.to_vec();
            vec![y]
        });
    }
    r
}

/// (topic, partition, offset, leader epoch, metadata, error) of an OffsetFetch answer.
pub type Fetched = (String, i32, i64, i32, String, i16);

/// Fetches committed offsets of one group at version `v`; asserts no group-level error.
pub async fn fetch_offsets_v(
    c: &mut Client,
    v: i16,
    group: &str,
    topic: Option<(&str, &[i32])>,
) -> Vec<Fetched> {
    let resp = c.call(v, &offset_fetch_request(v, &[(group, topic)])).await;
    if v >= 8 {
        assert_eq!(resp.groups.len(), 1);
        let g = &resp.groups[0];
        assert_eq!(g.group_id.0.as_str(), group);
        assert_eq!(g.error_code, NONE, "OffsetFetch v{v} group error");
        g.topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(|p| {
                    (
                        t.name.0.to_string(),
                        p.partition_index,
                        p.committed_offset,
                        p.committed_leader_epoch,
                        p.metadata
                            .as_ref()
                            .map(|m| m.to_string())
                            .unwrap_or_default(),
                        p.error_code,
                    )
                })
            })
            .collect()
    } else {
        assert_eq!(resp.error_code, NONE, "OffsetFetch v{v} error");
        resp.topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(|p| {
                    (
                        t.name.0.to_string(),
                        p.partition_index,
                        p.committed_offset,
                        p.committed_leader_epoch,
                        p.metadata
                            .as_ref()
                            .map(|m| m.to_string())
                            .unwrap_or_default(),
                        p.error_code,
                    )
                })
            })
            .collect()
    }
}

/// Committed offsets of `partitions` of `topic` (-1 when none), at the latest version.
pub async fn committed(c: &mut Client, group: &str, topic: &str, partitions: &[i32]) -> Vec<i64> {
    let got = fetch_offsets_v(c, OFFSET_FETCH_V, group, Some((topic, partitions))).await;
    assert_eq!(got.len(), partitions.len());
    got.iter()
        .zip(partitions)
        .map(|(f, p)| {
            assert_eq!((f.0.as_str(), f.1), (topic, *p));
            assert_eq!(f.5, NONE, "OffsetFetch partition error");
            f.2
        })
        .collect()
}

pub async fn list_groups(c: &mut Client, states: &[&str]) -> Vec<(String, String, String)> {
    let mut r = ListGroupsRequest::default();
    r.states_filter = states.iter().map(|s| str_bytes(s)).collect();
    let resp = c.call(LIST_V, &r).await;
    assert_eq!(resp.error_code, NONE);
    let mut v: Vec<_> = resp
        .groups
        .iter()
        .map(|g| {
            (
                g.group_id.0.to_string(),
                g.protocol_type.to_string(),
                g.group_state.to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

pub async fn delete_groups(c: &mut Client, groups: &[&str]) -> Vec<(String, i16)> {
    let mut r = DeleteGroupsRequest::default();
    r.groups_names = groups.iter().map(|g| group_id(g)).collect();
    c.call(DELETE_V, &r)
        .await
        .results
        .into_iter()
        .map(|x| (x.group_id.0.to_string(), x.error_code))
        .collect()
}

/// A group member with its own connection.
pub struct Member {
    pub c: Client,
    pub id: String,
    pub instance: Option<String>,
    pub generation: i32,
    pub leader: String,
    pub assignment: Bytes,
}

impl Member {
    fn update(&mut self, r: &JoinGroupResponse) {
        assert_eq!(r.error_code, NONE, "JoinGroup of {}: {r:?}", self.id);
        self.id = r.member_id.to_string();
        self.generation = r.generation_id;
        self.leader = r.leader.to_string();
    }

    pub fn is_leader(&self) -> bool {
        self.id == self.leader
    }

    pub async fn heartbeat(&mut self, group: &str) -> i16 {
        let (id, instance, generation) = (self.id.clone(), self.instance.clone(), self.generation);
        heartbeat(&mut self.c, group, &id, instance.as_deref(), generation).await
    }

    /// Heartbeats until the coordinator answers `code` (within 5 s).
    pub async fn heartbeat_until(&mut self, group: &str, code: i16) {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let e = self.heartbeat(group).await;
            if e == code {
                return;
            }
            assert_eq!(e, NONE, "heartbeat of {} while waiting for {code}", self.id);
            assert!(Instant::now() < deadline, "heartbeat never answered {code}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Rejoins with the member's id; parks until the rebalance completes.
pub async fn rejoin(mut m: Member, group: String) -> (Member, JoinGroupResponse) {
    let (id, instance) = (m.id.clone(), m.instance.clone());
    let r = join(&mut m.c, &group, &id, instance.as_deref()).await;
    m.update(&r);
    (m, r)
}

/// Every member syncs; the leader hands member `k` partition `k` of "topic".
pub async fn sync_all(members: Vec<Member>, group: &str) -> Vec<Member> {
    let n = members.len();
    let assignments: Vec<(String, Bytes)> = members
        .iter()
        .enumerate()
        .map(|(k, m)| (m.id.clone(), assignment("topic", &[k as i32])))
        .collect();
    let mut leader = None;
    let mut followers = Vec::new();
    for (k, mut m) in members.into_iter().enumerate() {
        if m.is_leader() {
            leader = Some((k, m));
            continue;
        }
        let group = group.to_string();
        followers.push((
            k,
            tokio::spawn(async move {
                let (id, instance, generation) = (m.id.clone(), m.instance.clone(), m.generation);
                let r =
                    m.c.call(
                        SYNC_V,
                        &sync_request(&group, &id, instance.as_deref(), generation, vec![]),
                    )
                    .await;
                (m, r)
            }),
        ));
    }
    let (lk, mut l) = leader.expect("a leader among the members");
    let (id, instance, generation) = (l.id.clone(), l.instance.clone(), l.generation);
    let r =
        l.c.call(
            SYNC_V,
            &sync_request(
                group,
                &id,
                instance.as_deref(),
                generation,
                assignments.clone(),
            ),
        )
        .await;
    assert_eq!(r.error_code, NONE, "leader SyncGroup: {r:?}");
    l.assignment = r.assignment;
    let mut out: Vec<Option<Member>> = (0..n).map(|_| None).collect();
    out[lk] = Some(l);
    for (k, task) in followers {
        let (mut m, r) = task.await.expect("follower sync task");
        assert_eq!(r.error_code, NONE, "follower SyncGroup: {r:?}");
        m.assignment = r.assignment;
        out[k] = Some(m);
    }
    let out: Vec<Member> = out.into_iter().map(|m| m.unwrap()).collect();
    for (m, (id, a)) in out.iter().zip(&assignments) {
        assert_eq!(&m.id, id);
        assert_eq!(&m.assignment, a, "assignment of {id}");
    }
    out
}

/// Adds a member the way consumers do: it joins (and parks), the existing members learn of the
/// rebalance from their heartbeats and rejoin, then everyone syncs. Returns all members,
/// existing ones first, in a Stable group.
pub async fn add_member(
    b: &TestBroker,
    group: &str,
    instance: Option<&str>,
    mut members: Vec<Member>,
) -> Vec<Member> {
    let mut c = b.client().await;
    let g = group.to_string();
    let inst = instance.map(str::to_string);
    let joining = tokio::spawn(async move {
        let r = join_new(&mut c, &g, inst.as_deref(), SESSION_MS).await;
        (c, r)
    });
    let mut rejoined = Vec::new();
    if !members.is_empty() {
        members[0]
            .heartbeat_until(group, REBALANCE_IN_PROGRESS)
            .await;
        let tasks: Vec<_> = members
            .drain(..)
            .map(|m| tokio::spawn(rejoin(m, group.to_string())))
            .collect();
        for t in tasks {
            rejoined.push(t.await.expect("rejoin task").0);
        }
    }
    let (c, r) = joining.await.expect("join task");
    let mut m = Member {
        c,
        id: String::new(),
        instance: instance.map(str::to_string),
        generation: -1,
        leader: String::new(),
        assignment: Bytes::new(),
    };
    m.update(&r);
    rejoined.push(m);
    let generation = rejoined[0].generation;
    assert!(rejoined.iter().all(|m| m.generation == generation));
    sync_all(rejoined, group).await
}

/// A Stable group of members with the given instance ids (None: dynamic), formed one by one.
pub async fn form_group(b: &TestBroker, group: &str, instances: &[Option<&str>]) -> Vec<Member> {
    let mut members = Vec::new();
    for i in instances {
        members = add_member(b, group, *i, members).await;
    }
    members
}

/// (node id, host, port) of the broker as Metadata advertises it.
pub async fn advertised(c: &mut Client) -> (i32, String, i32) {
    let resp = c.call(12, &MetadataRequest::default()).await;
    assert_eq!(resp.brokers.len(), 1);
    let me = &resp.brokers[0];
    (me.node_id.0, me.host.to_string(), me.port)
}

// ---------------------------------------------------------------------------------------------
// FindCoordinator

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn find_coordinator_names_this_broker_for_groups_at_every_version() {
    let b = start().await;
    let mut c = b.client().await;
    let (node, host, port) = advertised(&mut c).await;
    for v in 0..=3 {
        let mut r = FindCoordinatorRequest::default();
        r.key = str_bytes("my-group");
        let resp = c.call(v, &r).await;
        assert_eq!(resp.error_code, NONE, "v{v}: {resp:?}");
        assert_eq!(resp.node_id.0, node, "v{v}");
        assert_eq!(resp.host.as_str(), host, "v{v}");
        assert_eq!(resp.port, port, "v{v}");
    }
    for v in 4..=6 {
        let mut r = FindCoordinatorRequest::default();
        r.coordinator_keys = vec![str_bytes("group-a"), str_bytes("group-b")];
        let resp = c.call(v, &r).await;
        let keys: Vec<&str> = resp.coordinators.iter().map(|k| k.key.as_str()).collect();
        assert_eq!(keys, ["group-a", "group-b"], "v{v}");
        for k in &resp.coordinators {
            assert_eq!(k.error_code, NONE, "v{v}: {k:?}");
            assert_eq!(k.node_id.0, node, "v{v}");
            assert_eq!(k.host.as_str(), host, "v{v}");
            assert_eq!(k.port, port, "v{v}");
        }
    }
    b.shutdown().await;
}

/// Kafka advertises the port it bound when a listener asks for port 0; advertising 0 sends
/// every client that bootstraps (Metadata, FindCoordinator) to a port nobody listens on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_on_port_0_advertises_the_port_it_bound() {
    let b = start().await;
    let mut c = b.client().await;
    let (_, host, port) = advertised(&mut c).await;
    assert_eq!(
        (host.as_str(), port),
        ("127.0.0.1", b.kafka_addr.port() as i32),
        "Metadata"
    );
    let mut r = FindCoordinatorRequest::default();
    r.key = str_bytes("my-group");
    let resp = c.call(3, &r).await;
    assert_eq!(resp.port, b.kafka_addr.port() as i32, "FindCoordinator");
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn find_coordinator_for_a_transactional_id_is_this_broker() {
    let b = start().await;
    let mut c = b.client().await;
    for v in 1..=3 {
        let mut r = FindCoordinatorRequest::default();
        r.key = str_bytes("my-txn");
        r.key_type = 1;
        let resp = c.call(v, &r).await;
        assert_eq!(resp.error_code, 0, "v{v}");
        assert_eq!(resp.port, b.kafka_addr.port() as i32, "v{v}");
    }
    for v in 4..=6 {
        let mut r = FindCoordinatorRequest::default();
        r.key_type = 1;
        r.coordinator_keys = vec![str_bytes("txn-a"), str_bytes("txn-b")];
        let resp = c.call(v, &r).await;
        assert_eq!(resp.coordinators.len(), 2, "v{v}");
        for k in &resp.coordinators {
            assert_eq!(k.error_code, 0, "v{v}: {k:?}");
            assert_eq!(k.port, b.kafka_addr.port() as i32, "v{v}");
        }
    }
    b.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Membership

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_group_v4_hands_out_a_member_id_then_makes_the_member_leader_of_generation_1() {
    let b = start().await;
    let mut c = b.client().await;
    for v in 4..=JOIN_V {
        let group = format!("join-v{v}");
        let first = c.call(v, &join_request(&group, "", None, SESSION_MS)).await;
        assert_eq!(first.error_code, MEMBER_ID_REQUIRED, "v{v}: {first:?}");
        let id = first.member_id.to_string();
        assert!(
            id.starts_with("strata-it-"),
            "v{v}: member id {id} (client id prefix)"
        );
        let r = c
            .call(v, &join_request(&group, &id, None, SESSION_MS))
            .await;
        assert_eq!(r.error_code, NONE, "v{v}: {r:?}");
        assert_eq!(r.generation_id, 1, "v{v}");
        assert_eq!(r.member_id.as_str(), id, "v{v}");
        assert_eq!(r.leader.as_str(), id, "v{v}");
        assert_eq!(r.protocol_name.as_deref(), Some(PROTOCOL), "v{v}");
        if v >= 7 {
            assert_eq!(r.protocol_type.as_deref(), Some("consumer"), "v{v}");
        }
        // The leader learns every member's subscription.
        assert_eq!(r.members.len(), 1, "v{v}");
        assert_eq!(r.members[0].member_id.as_str(), id);
        assert_eq!(r.members[0].metadata, subscription(&["topic"]));
    }
    // Before v4 a new member is admitted straight away.
    let r = c
        .call(3, &join_request("join-v3", "", None, SESSION_MS))
        .await;
    assert_eq!(r.error_code, NONE, "{r:?}");
    assert_eq!(r.generation_id, 1);
    assert!(!r.member_id.is_empty());
    assert_eq!(r.leader, r.member_id);
    b.shutdown().await;
}

/// Two consumers started together (the second up to 8 ms behind, as threads and processes
/// started at once are) both belong to the first generation of a fresh group, with no initial
/// rebalance delay: the first member's rejoin must not close the join phase before the second
/// member's JoinGroup arrives. 20 rounds, a fresh group each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_members_joining_at_the_same_moment_both_get_the_first_generation() {
    const ROUNDS: usize = 20;
    let b = start().await;
    let mut failed = Vec::new();
    for round in 0..ROUNDS {
        let group = format!("simultaneous-{round}");
        let skew = Duration::from_millis(2 * (round % 5) as u64);
        let mut tasks = Vec::new();
        for k in 0..2 {
            let mut c = b.client().await;
            let g = group.clone();
            tasks.push(tokio::spawn(async move {
                if k == 1 {
                    tokio::time::sleep(skew).await;
                }
                let r = join_new(&mut c, &g, None, SESSION_MS).await;
                (c, r)
            }));
        }
        // A member left out of generation 1 stays parked in the next rebalance: collect what
        // answered within 2 s.
        let mut answered = Vec::new();
        for t in tasks.iter_mut() {
            if let Ok(r) = tokio::time::timeout(Duration::from_secs(2), t).await {
                answered.push(r.expect("join task"));
            }
        }
        let generations: Vec<i32> = answered.iter().map(|(_, r)| r.generation_id).collect();
        let shared = answered.len() == 2
            && answered.iter().all(|(_, r)| r.error_code == NONE)
            && generations == [1, 1]
            && answered
                .iter()
                .any(|(_, r)| r.leader == r.member_id && r.members.len() == 2);
        if !shared {
            failed.push((round, skew, generations));
            // Let the parked member in (the early one rejoins, as on REBALANCE_IN_PROGRESS).
            for (mut c, r) in answered {
                let id = r.member_id.to_string();
                let _ = join(&mut c, &group, &id, None).await;
            }
            continue;
        }
        let members: Vec<Member> = answered
            .into_iter()
            .map(|(c, r)| {
                let mut m = Member {
                    c,
                    id: String::new(),
                    instance: None,
                    generation: -1,
                    leader: String::new(),
                    assignment: Bytes::new(),
                };
                m.update(&r);
                m
            })
            .collect();
        // Balanced: each member gets its own partition from the leader; nothing to revoke.
        let members = sync_all(members, &group).await;
        for mut m in members {
            assert_eq!(m.heartbeat(&group).await, NONE, "round {round}: stable");
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {ROUNDS} rounds without a shared first generation (round, skew, generations): {failed:?}",
        failed.len()
    );
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_group_parks_followers_until_the_leader_distributes_assignments() {
    let b = start().await;
    let group = "sync";
    let mut a = b.client().await;
    let mut bc = b.client().await;
    let ja = join_new(&mut a, group, None, SESSION_MS).await;
    let a_id = ja.member_id.to_string();
    assert_eq!((ja.error_code, ja.generation_id), (NONE, 1));
    // B joins and parks; A is told to rejoin by its heartbeat, rejoins, and both get gen 2.
    let joining = tokio::spawn(async move {
        let r = join_new(&mut bc, group, None, SESSION_MS).await;
        (bc, r)
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    while heartbeat(&mut a, group, &a_id, None, 1).await != REBALANCE_IN_PROGRESS {
        assert!(Instant::now() < deadline, "no rebalance after B joined");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ra = join(&mut a, group, &a_id, None).await;
    let (mut bc, rb) = joining.await.unwrap();
    let b_id = rb.member_id.to_string();
    assert_eq!((ra.error_code, rb.error_code), (NONE, NONE));
    assert_eq!((ra.generation_id, rb.generation_id), (2, 2));
    assert_eq!(ra.leader.as_str(), a_id, "the leader stays leader");
    assert_eq!(rb.leader.as_str(), a_id);
    let mut ids: Vec<&str> = ra.members.iter().map(|m| m.member_id.as_str()).collect();
    ids.sort();
    let mut want = vec![a_id.as_str(), b_id.as_str()];
    want.sort();
    assert_eq!(ids, want, "the leader sees both members");
    assert!(rb.members.is_empty(), "a follower gets no member list");

    // B syncs first: it parks until the leader's assignment arrives.
    let b_sync = {
        let b_id = b_id.clone();
        tokio::spawn(async move {
            let r = bc
                .call(SYNC_V, &sync_request(group, &b_id, None, 2, vec![]))
                .await;
            (bc, r)
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !b_sync.is_finished(),
        "a follower's SyncGroup waits for the leader"
    );
    let (a_assign, b_assign) = (assignment("topic", &[0]), assignment("topic", &[1]));
    let sa = a
        .call(
            SYNC_V,
            &sync_request(
                group,
                &a_id,
                None,
                2,
                vec![
                    (a_id.clone(), a_assign.clone()),
                    (b_id.clone(), b_assign.clone()),
                ],
            ),
        )
        .await;
    assert_eq!(sa.error_code, NONE, "{sa:?}");
    assert_eq!(sa.assignment, a_assign);
    assert_eq!(sa.protocol_type.as_deref(), Some("consumer"));
    assert_eq!(sa.protocol_name.as_deref(), Some(PROTOCOL));
    let (mut bc, sb) = b_sync.await.unwrap();
    assert_eq!(sb.error_code, NONE, "{sb:?}");
    assert_eq!(sb.assignment, b_assign);
    assert_eq!(group_state(&mut a, group).await, "Stable");
    // A SyncGroup in a Stable group returns the member's assignment again.
    let again = bc
        .call(SYNC_V, &sync_request(group, &b_id, None, 2, vec![]))
        .await;
    assert_eq!((again.error_code, again.assignment), (NONE, b_assign));
    // Older SyncGroup versions work too (no protocol type/name).
    for v in 0..SYNC_V {
        let mut r = sync_request(group, &b_id, None, 2, vec![]);
        r.protocol_type = None;
        r.protocol_name = None;
        let resp = bc.call(v, &r).await;
        assert_eq!(resp.error_code, NONE, "SyncGroup v{v}");
        assert_eq!(resp.assignment, assignment("topic", &[1]), "SyncGroup v{v}");
    }
    // A SyncGroup of a wrong generation or an unknown member is refused.
    let stale = bc
        .call(SYNC_V, &sync_request(group, &b_id, None, 1, vec![]))
        .await;
    assert_eq!(stale.error_code, ILLEGAL_GENERATION);
    let unknown = bc
        .call(SYNC_V, &sync_request(group, "nobody", None, 2, vec![]))
        .await;
    assert_eq!(unknown.error_code, UNKNOWN_MEMBER_ID);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_rejects_a_wrong_generation_and_an_unknown_member() {
    let b = start().await;
    let group = "hb";
    let mut m = form_group(&b, group, &[None]).await.remove(0);
    assert_eq!(m.generation, 1);
    let id = m.id.clone();
    for v in 0..=HEARTBEAT_V {
        let mut r = HeartbeatRequest::default();
        r.group_id = group_id(group);
        r.member_id = str_bytes(&id);
        r.generation_id = 1;
        assert_eq!(m.c.call(v, &r).await.error_code, NONE, "v{v}");
        r.generation_id = 2;
        assert_eq!(m.c.call(v, &r).await.error_code, ILLEGAL_GENERATION, "v{v}");
        r.generation_id = 0;
        assert_eq!(m.c.call(v, &r).await.error_code, ILLEGAL_GENERATION, "v{v}");
        r.generation_id = 1;
        r.member_id = str_bytes("strata-it-00000000-0000-0000-0000-000000000000");
        assert_eq!(m.c.call(v, &r).await.error_code, UNKNOWN_MEMBER_ID, "v{v}");
    }
    assert_eq!(
        heartbeat(&mut m.c, "no-such-group", &id, None, 1).await,
        UNKNOWN_MEMBER_ID
    );
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_member_makes_heartbeats_ask_for_a_rebalance_until_everyone_rejoins() {
    let b = start().await;
    let group = "rebalance";
    let mut members = form_group(&b, group, &[None, None]).await;
    assert_eq!(members[0].generation, 2);
    assert!(members[0].is_leader());
    for m in members.iter_mut() {
        assert_eq!(m.heartbeat(group).await, NONE);
    }
    // A third member joins (and parks).
    let mut c3 = b.client().await;
    let third = tokio::spawn(async move {
        let r = join_new(&mut c3, group, None, SESSION_MS).await;
        (c3, r)
    });
    members[0]
        .heartbeat_until(group, REBALANCE_IN_PROGRESS)
        .await;
    assert_eq!(members[1].heartbeat(group).await, REBALANCE_IN_PROGRESS);
    assert_eq!(
        group_state(&mut members[0].c, group).await,
        "PreparingRebalance"
    );
    // The first member rejoins; until the second does too, the join stays open.
    let second = members.pop().unwrap();
    let first = members.pop().unwrap();
    let first_rejoin = tokio::spawn(rejoin(first, group.to_string()));
    let mut second = second;
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(second.heartbeat(group).await, REBALANCE_IN_PROGRESS);
    }
    assert!(
        !first_rejoin.is_finished(),
        "join completed without the second member"
    );
    assert!(!third.is_finished());
    let (second, r2) = rejoin(second, group.to_string()).await;
    let (first, r1) = first_rejoin.await.unwrap();
    let (c3, r3) = third.await.unwrap();
    for r in [&r1, &r2, &r3] {
        assert_eq!(r.error_code, NONE, "{r:?}");
        assert_eq!(r.generation_id, 3, "the generation increases");
        assert_eq!(r.leader.as_str(), first.id, "the leader keeps its role");
    }
    assert_eq!(r1.members.len(), 3);
    let mut third = Member {
        c: c3,
        id: r3.member_id.to_string(),
        instance: None,
        generation: 3,
        leader: r3.leader.to_string(),
        assignment: Bytes::new(),
    };
    // The new generation is accepted, the old one is not.
    assert_eq!(third.heartbeat(group).await, NONE);
    let old = heartbeat(&mut third.c, group, &second.id, None, 2).await;
    assert_eq!(old, ILLEGAL_GENERATION);
    let members = sync_all(vec![first, second, third], group).await;
    assert_eq!(members.len(), 3);
    assert_eq!(group_state(&mut b.client().await, group).await, "Stable");
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_stops_heartbeating_is_evicted_after_its_session_timeout() {
    let b = start().await;
    let group = "expiry";
    let mut c = b.client().await;
    let r = join_new(&mut c, group, None, 600).await;
    assert_eq!((r.error_code, r.generation_id), (NONE, 1));
    let id = r.member_id.to_string();
    let s = c
        .call(
            SYNC_V,
            &sync_request(
                group,
                &id,
                None,
                1,
                vec![(id.clone(), assignment("t", &[0]))],
            ),
        )
        .await;
    assert_eq!(s.error_code, NONE);
    // Heartbeating keeps the member alive past its session timeout.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert_eq!(heartbeat(&mut c, group, &id, None, 1).await, NONE);
    }
    let d = describe(&mut c, group).await;
    assert_eq!(d.group_state.as_str(), "Stable");
    assert_eq!(d.members.len(), 1);
    // Then it goes quiet.
    let quiet = Instant::now();
    let deadline = quiet + Duration::from_secs(5);
    loop {
        let d = describe(&mut c, group).await;
        if d.group_state.as_str() == "Empty" {
            assert!(d.members.is_empty());
            break;
        }
        assert_eq!(d.group_state.as_str(), "Stable");
        assert!(Instant::now() < deadline, "member never evicted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        quiet.elapsed() >= Duration::from_millis(400),
        "evicted after {:?}, before its 600 ms session timeout",
        quiet.elapsed()
    );
    assert_eq!(
        heartbeat(&mut c, group, &id, None, 1).await,
        UNKNOWN_MEMBER_ID
    );
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_does_not_rejoin_within_the_rebalance_timeout_is_dropped() {
    let b = start().await;
    let group = "slow-rejoin";
    let request = |member_id: &str| {
        let mut r = join_request(group, member_id, None, SESSION_MS);
        r.rebalance_timeout_ms = 500;
        r
    };
    let mut a = b.client().await;
    let first = a.call(JOIN_V, &request("")).await;
    let ra = a.call(JOIN_V, &request(&first.member_id)).await;
    assert_eq!((ra.error_code, ra.generation_id), (NONE, 1));
    let a_id = ra.member_id.to_string();
    assert_eq!(ra.leader.as_str(), a_id);
    // B joins; A learns of the rebalance but never rejoins.
    let mut bc = b.client().await;
    let joining = tokio::spawn(async move {
        let first = bc.call(JOIN_V, &request("")).await;
        let r = bc.call(JOIN_V, &request(&first.member_id)).await;
        (Instant::now(), r)
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    while heartbeat(&mut a, group, &a_id, None, 1).await != REBALANCE_IN_PROGRESS {
        assert!(Instant::now() < deadline, "no rebalance after B joined");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let rebalancing = Instant::now();
    let (done, rb) = joining.await.unwrap();
    let waited = done - rebalancing;
    assert!(
        waited >= Duration::from_millis(400),
        "join completed after {waited:?}"
    );
    assert!(
        waited < Duration::from_secs(5),
        "join completed after {waited:?}"
    );
    assert_eq!((rb.error_code, rb.generation_id), (NONE, 2), "{rb:?}");
    assert_eq!(rb.leader, rb.member_id, "B leads the new generation");
    let ids: Vec<&str> = rb.members.iter().map(|m| m.member_id.as_str()).collect();
    assert_eq!(ids, [rb.member_id.as_str()], "A was dropped");
    assert_eq!(
        heartbeat(&mut a, group, &a_id, None, 1).await,
        UNKNOWN_MEMBER_ID
    );
    let r = a.call(JOIN_V, &request(&a_id)).await;
    assert_eq!(
        r.error_code, UNKNOWN_MEMBER_ID,
        "a dropped member must join anew"
    );
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_cannot_produce_to_the_offsets_topic() {
    let b = start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "t", 1).await;
    simple_commit(&mut c, "g", "t", &[(0, 1)]).await;
    let r = produce(&mut c, "__consumer_offsets", 0, batch(1)).await;
    // Kafka: INVALID_TOPIC_EXCEPTION, "Cannot append to internal topic".
    assert_eq!(r.error_code, 17, "{r:?}");
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_group_refuses_session_timeouts_outside_the_configured_bounds() {
    let b = TestBroker::start_with(&[
        ("group.initial.rebalance.delay.ms", "0"),
        ("group.min.session.timeout.ms", "1000"),
        ("group.max.session.timeout.ms", "20000"),
    ])
    .await;
    let mut c = b.client().await;
    for ms in [999, 20_001] {
        let r = c.call(JOIN_V, &join_request("bounds", "", None, ms)).await;
        assert_eq!(r.error_code, INVALID_SESSION_TIMEOUT, "session {ms} ms");
    }
    let r = join_new(&mut c, "bounds", None, 1000).await;
    assert_eq!(r.error_code, NONE);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_group_with_no_protocol_in_common_is_inconsistent() {
    let b = start().await;
    let group = "protocols";
    let mut c = b.client().await;
    // A new group needs a protocol type and at least one protocol.
    let mut r = join_request(group, "", None, SESSION_MS);
    r.protocols.clear();
    assert_eq!(
        c.call(JOIN_V, &r).await.error_code,
        INCONSISTENT_GROUP_PROTOCOL
    );
    let mut r = join_request(group, "", None, SESSION_MS);
    r.protocol_type = str_bytes("");
    assert_eq!(
        c.call(JOIN_V, &r).await.error_code,
        INCONSISTENT_GROUP_PROTOCOL
    );
    let members = form_group(&b, group, &[None]).await;
    // Another protocol type, or only protocols the members do not support, is refused.
    let mut r = join_request(group, "", None, SESSION_MS);
    r.protocol_type = str_bytes("connect");
    assert_eq!(
        c.call(JOIN_V, &r).await.error_code,
        INCONSISTENT_GROUP_PROTOCOL
    );
    let mut r = join_request(group, "", None, SESSION_MS);
    r.protocols[0].name = str_bytes("roundrobin");
    assert_eq!(
        c.call(JOIN_V, &r).await.error_code,
        INCONSISTENT_GROUP_PROTOCOL
    );
    drop(members);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_group_with_a_stale_member_id_for_a_missing_group_creates_no_group() {
    let b = start().await;
    let mut c = b.client().await;
    let r = join(&mut c, "ghost", "strata-it-gone", None).await;
    assert_eq!(r.error_code, UNKNOWN_MEMBER_ID, "{r:?}");
    assert!(
        list_groups(&mut c, &[]).await.is_empty(),
        "a refused join left a group behind"
    );
    let d = c
        .call(6, &{
            let mut r = DescribeGroupsRequest::default();
            r.groups = vec![group_id("ghost")];
            r
        })
        .await;
    assert_eq!(d.groups[0].error_code, GROUP_ID_NOT_FOUND);
    b.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Static membership (KIP-345)

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_member_rejoining_keeps_generation_and_assignment_and_fences_its_old_id() {
    let b = start().await;
    let group = "static";
    create_topic(&mut b.client().await, "topic", 2).await;
    let mut members = form_group(&b, group, &[Some("leader-1"), Some("follower-1")]).await;
    assert_eq!(members[0].generation, 2);
    assert!(members[0].is_leader());
    let old = members.pop().unwrap();
    let mut leader = members.pop().unwrap();
    let old_id = old.id.clone();
    let old_assignment = old.assignment.clone();
    drop(old); // the follower "restarts"
               // Same instance, empty member id: no rebalance, the current generation, a new member id.
    let mut c = b.client().await;
    let r = c
        .call(
            JOIN_V,
            &join_request(group, "", Some("follower-1"), SESSION_MS),
        )
        .await;
    assert_eq!(r.error_code, NONE, "{r:?}");
    assert_eq!(r.generation_id, 2, "no new generation");
    assert_ne!(r.member_id.as_str(), old_id, "a new member id");
    assert_eq!(r.leader.as_str(), leader.id);
    assert!(!r.skip_assignment, "only the leader skips the assignment");
    let new_id = r.member_id.to_string();
    assert_eq!(
        leader.heartbeat(group).await,
        NONE,
        "the leader sees no rebalance"
    );
    assert_eq!(group_state(&mut c, group).await, "Stable");
    // Its old assignment comes back with SyncGroup.
    let s = c
        .call(
            SYNC_V,
            &sync_request(group, &new_id, Some("follower-1"), 2, vec![]),
        )
        .await;
    assert_eq!(s.error_code, NONE);
    assert_eq!(s.assignment, old_assignment);
    // The old incarnation is fenced; the new one is live.
    assert_eq!(
        heartbeat(&mut c, group, &old_id, Some("follower-1"), 2).await,
        FENCED_INSTANCE_ID
    );
    assert_eq!(
        heartbeat(&mut c, group, &new_id, Some("follower-1"), 2).await,
        NONE
    );
    let stale_commit = commit_request(
        COMMIT_V,
        group,
        2,
        &old_id,
        Some("follower-1"),
        "topic",
        &[(1, 10, -1, "")],
    );
    let resp = c.call(COMMIT_V, &stale_commit).await;
    assert_eq!(resp.topics[0].partitions[0].error_code, FENCED_INSTANCE_ID);

    // The leader rejoining the same way keeps the generation and is told to skip assigning.
    let mut c2 = b.client().await;
    let r = c2
        .call(
            JOIN_V,
            &join_request(group, "", Some("leader-1"), SESSION_MS),
        )
        .await;
    assert_eq!((r.error_code, r.generation_id), (NONE, 2), "{r:?}");
    assert_eq!(r.leader, r.member_id, "still the leader");
    assert!(r.skip_assignment);
    assert_eq!(
        heartbeat(&mut c2, group, &leader.id, Some("leader-1"), 2).await,
        FENCED_INSTANCE_ID
    );
    let d = describe(&mut c2, group).await;
    let mut ids: Vec<(String, Option<String>)> = d
        .members
        .iter()
        .map(|m| {
            (
                m.member_id.to_string(),
                m.group_instance_id.as_ref().map(|i| i.to_string()),
            )
        })
        .collect();
    ids.sort();
    let mut want = vec![
        (r.member_id.to_string(), Some("leader-1".to_string())),
        (new_id, Some("follower-1".to_string())),
    ];
    want.sort();
    assert_eq!(ids, want);
    b.shutdown().await;
}

/// Members of one group may speak different JoinGroup versions: a leader on v4 (before static
/// membership) still gets the member list, without the instance ids its version cannot carry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_on_an_old_join_version_learns_of_static_members() {
    let b = start().await;
    let group = "mixed";
    let mut a = b.client().await;
    let first = a.call(4, &join_request(group, "", None, SESSION_MS)).await;
    assert_eq!(first.error_code, MEMBER_ID_REQUIRED);
    let a_id = first.member_id.to_string();
    let r = a
        .call(4, &join_request(group, &a_id, None, SESSION_MS))
        .await;
    assert_eq!((r.error_code, r.generation_id), (NONE, 1));
    // A static member joins with v5.
    let mut s = b.client().await;
    let joining = tokio::spawn(async move {
        let r = s
            .call(5, &join_request(group, "", Some("static-1"), SESSION_MS))
            .await;
        (s, r)
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    while heartbeat(&mut a, group, &a_id, None, 1).await != REBALANCE_IN_PROGRESS {
        assert!(
            Instant::now() < deadline,
            "no rebalance after the static member joined"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The leader rejoins with v4: its answer lists both members (no instance ids at v4).
    let id = a
        .send(4, &join_request(group, &a_id, None, SESSION_MS))
        .await;
    let frame = a
        .read_frame()
        .await
        .expect("the v4 leader's JoinGroup got no answer (response not encodable at v4?)");
    let (header, r) = crate::client::decode_response::<JoinGroupRequest>(4, frame);
    assert_eq!(header.correlation_id, id);
    assert_eq!((r.error_code, r.generation_id), (NONE, 2), "{r:?}");
    assert_eq!(r.members.len(), 2);
    let (_, rs) = joining.await.unwrap();
    assert_eq!((rs.error_code, rs.generation_id), (NONE, 2), "{rs:?}");
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_member_replacement_survives_a_broker_restart() {
    let b = start().await;
    let group = "static-restart";
    let members = form_group(&b, group, &[Some("only-1")]).await;
    let old_id = members[0].id.clone();
    drop(members);
    let mut c = b.client().await;
    let r = c
        .call(JOIN_V, &join_request(group, "", Some("only-1"), SESSION_MS))
        .await;
    assert_eq!((r.error_code, r.generation_id), (NONE, 1), "{r:?}");
    let new_id = r.member_id.to_string();
    assert_ne!(new_id, old_id);
    drop(c);
    let b = b.restart().await;
    let mut c = b.client().await;
    assert_eq!(
        heartbeat(&mut c, group, &new_id, Some("only-1"), 1).await,
        NONE,
        "the coordinator forgot the replacement of a static member"
    );
    assert_eq!(
        heartbeat(&mut c, group, &old_id, Some("only-1"), 1).await,
        FENCED_INSTANCE_ID
    );
    b.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// LeaveGroup

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leave_group_v3_removes_static_members_by_instance_id_and_empties_the_group() {
    let b = start().await;
    let group = "leave";
    let members = form_group(&b, group, &[Some("i-1"), Some("i-2")]).await;
    let mut c = b.client().await;
    let identity = |instance: &str| {
        let mut m = MemberIdentity::default();
        m.group_instance_id = Some(str_bytes(instance));
        m.reason = Some(str_bytes("test is done"));
        m
    };
    let mut r = LeaveGroupRequest::default();
    r.group_id = group_id(group);
    r.members = vec![identity("i-1"), identity("i-2"), identity("i-unknown")];
    let resp = c.call(LEAVE_V, &r).await;
    assert_eq!(resp.error_code, NONE, "{resp:?}");
    let got: Vec<(Option<&str>, i16)> = resp
        .members
        .iter()
        .map(|m| (m.group_instance_id.as_deref(), m.error_code))
        .collect();
    assert_eq!(
        got,
        [
            (Some("i-1"), NONE),
            (Some("i-2"), NONE),
            (Some("i-unknown"), UNKNOWN_MEMBER_ID)
        ]
    );
    let d = describe(&mut c, group).await;
    assert_eq!(d.group_state.as_str(), "Empty");
    assert!(d.members.is_empty());
    assert_eq!(
        d.protocol_type.as_str(),
        "consumer",
        "an empty group keeps its type"
    );
    for m in &members {
        assert_eq!(
            heartbeat(&mut c, group, &m.id, m.instance.as_deref(), m.generation).await,
            UNKNOWN_MEMBER_ID
        );
    }
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leave_group_before_v3_removes_one_member_and_the_rest_rebalance() {
    let b = start().await;
    let group = "leave-old";
    let mut members = form_group(&b, group, &[None, None]).await;
    let leaving = members.pop().unwrap();
    let mut stays = members.pop().unwrap();
    let mut r = LeaveGroupRequest::default();
    r.group_id = group_id(group);
    r.member_id = str_bytes(&leaving.id);
    let mut c = b.client().await;
    assert_eq!(c.call(1, &r).await.error_code, NONE);
    // Leaving again, or an unknown member, is UNKNOWN_MEMBER_ID.
    assert_eq!(c.call(1, &r).await.error_code, UNKNOWN_MEMBER_ID);
    assert_eq!(stays.heartbeat(group).await, REBALANCE_IN_PROGRESS);
    let (stays, r) = rejoin(stays, group.to_string()).await;
    assert_eq!(r.generation_id, 3);
    assert_eq!(r.members.len(), 1);
    let stays = sync_all(vec![stays], group).await;
    // The last member leaving empties the group.
    let mut r = LeaveGroupRequest::default();
    r.group_id = group_id(group);
    r.member_id = str_bytes(&stays[0].id);
    assert_eq!(c.call(0, &r).await.error_code, NONE);
    assert_eq!(group_state(&mut c, group).await, "Empty");
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leave_group_v3_for_an_unknown_group_answers_unknown_member_per_member() {
    let b = start().await;
    let mut c = b.client().await;
    let mut m = MemberIdentity::default();
    m.member_id = str_bytes("strata-it-gone");
    let mut r = LeaveGroupRequest::default();
    r.group_id = group_id("no-such-group");
    r.members = vec![m];
    let resp = c.call(LEAVE_V, &r).await;
    // Kafka answers NONE at the top level and UNKNOWN_MEMBER_ID for each member.
    assert_eq!(resp.error_code, NONE, "{resp:?}");
    assert_eq!(resp.members.len(), 1, "{resp:?}");
    assert_eq!(resp.members[0].member_id.as_str(), "strata-it-gone");
    assert_eq!(resp.members[0].error_code, UNKNOWN_MEMBER_ID);
    // Before v3 the member's error is the top-level error.
    let mut r = LeaveGroupRequest::default();
    r.group_id = group_id("no-such-group");
    r.member_id = str_bytes("strata-it-gone");
    assert_eq!(c.call(2, &r).await.error_code, UNKNOWN_MEMBER_ID);
    b.shutdown().await;
}
