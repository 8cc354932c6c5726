//! Consumer groups over the wire, part two: offsets (commit, fetch, fencing, durability) and
//! the group admin APIs (DescribeGroups, ListGroups, DeleteGroups, OffsetDelete).
//! Helpers live in `groups.rs`.

use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::offset_delete_request::{
    OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use kafka_protocol::messages::*;

use crate::groups::*;
use crate::harness::*;

// ---------------------------------------------------------------------------------------------
// Offsets

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offset_commit_then_fetch_round_trips_offsets_metadata_and_leader_epochs() {
    let b = start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "orders", 3).await;
    create_topic(&mut c, "audit", 1).await;
    // One group per commit version, committed the simple way (no generation, no member).
    for v in 2..=COMMIT_V {
        let group = format!("commit-v{v}");
        let req = commit_request(
            v,
            &group,
            -1,
            "",
            None,
            "orders",
            &[(0, 100 + v as i64, 7, "meta-0"), (1, 200, 8, "")],
        );
        let resp = c.call(v, &req).await;
        let errors: Vec<i16> = resp.topics[0]
            .partitions
            .iter()
            .map(|p| p.error_code)
            .collect();
        assert_eq!(errors, [NONE, NONE], "OffsetCommit v{v}");
        let want_epoch = |e: i32| if v >= 6 { e } else { -1 };
        // Single-group fetch (v1-7) with explicit partitions, including an uncommitted one.
        for fv in 1..=7 {
            let got = fetch_offsets_v(&mut c, fv, &group, Some(("orders", &[0, 1, 2][..]))).await;
            let epoch = |e: i32| if fv >= 5 { want_epoch(e) } else { -1 };
            assert_eq!(
                got,
                [
                    (
                        "orders".into(),
                        0,
                        100 + v as i64,
                        epoch(7),
                        "meta-0".into(),
                        NONE
                    ),
                    ("orders".into(), 1, 200, epoch(8), "".into(), NONE),
                    ("orders".into(), 2, -1, -1, "".into(), NONE),
                ],
                "commit v{v}, OffsetFetch v{fv}"
            );
        }
        // All committed partitions (null topics, v2+).
        let got = fetch_offsets_v(&mut c, 7, &group, None).await;
        assert_eq!(got.len(), 2, "commit v{v}: all partitions {got:?}");
    }
    // Multi-group fetch (v8+): several groups in one request, null topics meaning "all".
    let mut c2 = b.client().await;
    simple_commit(&mut c2, "other", "audit", &[(0, 5)]).await;
    for fv in 8..=OFFSET_FETCH_V {
        let req = offset_fetch_request(
            fv,
            &[
                ("commit-v9", Some(("orders", &[0, 2][..]))),
                ("other", None),
                ("never-committed", Some(("orders", &[0][..]))),
            ],
        );
        let resp = c.call(fv, &req).await;
        let flat: Vec<(String, String, i32, i64, i32, String)> = resp
            .groups
            .iter()
            .flat_map(|g| {
                assert_eq!(g.error_code, NONE, "v{fv} {}", g.group_id.0.as_str());
                g.topics.iter().flat_map(move |t| {
                    t.partitions.iter().map(move |p| {
                        assert_eq!(p.error_code, NONE);
                        (
                            g.group_id.0.to_string(),
                            t.name.0.to_string(),
                            p.partition_index,
                            p.committed_offset,
                            p.committed_leader_epoch,
                            p.metadata
                                .as_ref()
                                .map(|m| m.to_string())
                                .unwrap_or_default(),
                        )
                    })
                })
            })
            .collect();
        let s = |x: &str| x.to_string();
        assert_eq!(
            flat,
            [
                (s("commit-v9"), s("orders"), 0, 109, 7, s("meta-0")),
                (s("commit-v9"), s("orders"), 2, -1, -1, s("")),
                (s("other"), s("audit"), 0, 5, -1, s("")),
                (s("never-committed"), s("orders"), 0, -1, -1, s("")),
            ],
            "OffsetFetch v{fv}"
        );
    }
    // A later commit overwrites.
    simple_commit(&mut c, "commit-v9", "orders", &[(0, 1000)]).await;
    assert_eq!(
        committed(&mut c, "commit-v9", "orders", &[0, 1]).await,
        [1000, 200]
    );
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_simple_commit_to_a_group_without_members_is_accepted() {
    let b = start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "t", 2).await;
    simple_commit(&mut c, "standalone", "t", &[(0, 42)]).await;
    assert_eq!(committed(&mut c, "standalone", "t", &[0]).await, [42]);
    let d = describe(&mut c, "standalone").await;
    assert_eq!(d.error_code, NONE);
    assert_eq!(d.group_state.as_str(), "Empty");
    assert!(d.members.is_empty());
    // Metadata over offset.metadata.max.bytes (4096) is refused for its partition only.
    let big = "m".repeat(4097);
    let errors = commit(
        &mut c,
        "standalone",
        -1,
        "",
        "t",
        &[(0, 50, -1, &big), (1, 51, -1, "")],
    )
    .await;
    assert_eq!(errors, [OFFSET_METADATA_TOO_LARGE, NONE]);
    assert_eq!(
        committed(&mut c, "standalone", "t", &[0, 1]).await,
        [42, 51]
    );
    // A member of a generation cannot commit to a missing group (before v9:
    // ILLEGAL_GENERATION), and no group is created.
    for v in 2..=8 {
        let req = commit_request(v, "missing", 1, "strata-it-x", None, "t", &[(0, 1, -1, "")]);
        let resp = c.call(v, &req).await;
        let e = resp.topics[0].partitions[0].error_code;
        assert_eq!(e, ILLEGAL_GENERATION, "OffsetCommit v{v}");
    }
    let names: Vec<String> = list_groups(&mut c, &[])
        .await
        .into_iter()
        .map(|g| g.0)
        .collect();
    assert_eq!(names, ["standalone"]);
    b.shutdown().await;
}

/// OffsetCommit v9 (KIP-848) answers GROUP_ID_NOT_FOUND, for both protocols, when a member of
/// a generation commits to a group that does not exist (older versions: ILLEGAL_GENERATION).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offset_commit_v9_from_a_member_of_a_missing_group_is_group_id_not_found() {
    let b = start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "t", 1).await;
    let errors = commit(&mut c, "missing", 1, "strata-it-x", "t", &[(0, 1, -1, "")]).await;
    assert_eq!(errors, [GROUP_ID_NOT_FOUND]);
    assert!(list_groups(&mut c, &[]).await.is_empty());
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offset_commit_is_fenced_by_generation_and_membership() {
    let b = start().await;
    let group = "fenced";
    let mut c = b.client().await;
    create_topic(&mut c, "topic", 2).await;
    let mut m = form_group(&b, group, &[None]).await.remove(0);
    let id = m.id.clone();
    assert_eq!(m.generation, 1);
    let e = |o| (0, o, 3, "by member");
    assert_eq!(
        commit(&mut m.c, group, 1, &id, "topic", &[e(10)]).await,
        [NONE]
    );
    assert_eq!(
        commit(&mut m.c, group, 0, &id, "topic", &[e(11)]).await,
        [ILLEGAL_GENERATION]
    );
    assert_eq!(
        commit(&mut m.c, group, 2, &id, "topic", &[e(11)]).await,
        [ILLEGAL_GENERATION]
    );
    assert_eq!(
        commit(&mut m.c, group, 1, "strata-it-stranger", "topic", &[e(11)]).await,
        [UNKNOWN_MEMBER_ID]
    );
    // Only members may commit to a group that has members.
    assert_eq!(
        commit(&mut m.c, group, -1, "", "topic", &[e(11)]).await,
        [UNKNOWN_MEMBER_ID]
    );
    assert_eq!(committed(&mut c, group, "topic", &[0]).await, [10]);
    // After a rebalance the previous generation is stale.
    let members = add_member(&b, group, None, vec![m]).await;
    assert_eq!(members[0].generation, 2);
    let mut m = members.into_iter().next().unwrap();
    assert_eq!(
        commit(&mut m.c, group, 1, &id, "topic", &[e(12)]).await,
        [ILLEGAL_GENERATION]
    );
    assert_eq!(
        commit(&mut m.c, group, 2, &id, "topic", &[e(13)]).await,
        [NONE]
    );
    assert_eq!(committed(&mut c, group, "topic", &[0]).await, [13]);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offset_commit_to_an_unknown_topic_is_refused() {
    let b = start().await;
    let mut c = b.client().await;
    let errors = commit(&mut c, "g", -1, "", "no-such-topic", &[(0, 1, -1, "")]).await;
    assert_eq!(errors, [UNKNOWN_TOPIC_OR_PARTITION]);
    create_topic(&mut c, "one-partition", 1).await;
    let errors = commit(
        &mut c,
        "g",
        -1,
        "",
        "one-partition",
        &[(0, 1, -1, ""), (5, 1, -1, "")],
    )
    .await;
    assert_eq!(errors, [NONE, UNKNOWN_TOPIC_OR_PARTITION]);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_offsets_and_groups_survive_a_broker_restart() {
    let b = start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "t", 2).await;
    let members = form_group(&b, "live", &[None]).await;
    let (live_id, live_assignment) = (members[0].id.clone(), members[0].assignment.clone());
    let req = commit_request(
        COMMIT_V,
        "live",
        1,
        &live_id,
        None,
        "t",
        &[(0, 77, 4, "m-live")],
    );
    let resp = c.call(COMMIT_V, &req).await;
    assert_eq!(resp.topics[0].partitions[0].error_code, NONE);
    let req = commit_request(
        COMMIT_V,
        "plain",
        -1,
        "",
        None,
        "t",
        &[(0, 5, 1, "m0"), (1, 6, 2, "m1")],
    );
    assert!(c.call(COMMIT_V, &req).await.topics[0]
        .partitions
        .iter()
        .all(|p| p.error_code == NONE));
    simple_commit(&mut c, "plain", "t", &[(1, 9)]).await;
    simple_commit(&mut c, "doomed", "t", &[(0, 3)]).await;
    assert_eq!(
        delete_groups(&mut c, &["doomed"]).await,
        [("doomed".into(), NONE)]
    );
    // A group whose only member left is Empty at generation 2.
    let left = form_group(&b, "left", &[None]).await;
    let mut r = LeaveGroupRequest::default();
    r.group_id = group_id("left");
    r.member_id = str_bytes(&left[0].id);
    assert_eq!(c.call(2, &r).await.error_code, NONE);
    drop((c, members, left));

    let b = b.restart().await;
    let mut c = b.client().await;
    let got = fetch_offsets_v(&mut c, OFFSET_FETCH_V, "plain", Some(("t", &[0, 1][..]))).await;
    assert_eq!(
        got,
        [
            ("t".into(), 0, 5, 1, "m0".into(), NONE),
            ("t".into(), 1, 9, -1, "".into(), NONE)
        ]
    );
    let got = fetch_offsets_v(&mut c, OFFSET_FETCH_V, "live", Some(("t", &[0][..]))).await;
    assert_eq!(got, [("t".into(), 0, 77, 4, "m-live".into(), NONE)]);
    assert_eq!(
        committed(&mut c, "doomed", "t", &[0]).await,
        [-1],
        "deleted stays deleted"
    );
    // The group's membership came back too: its member keeps its generation and assignment.
    let d = describe(&mut c, "live").await;
    assert_eq!(d.group_state.as_str(), "Stable");
    assert_eq!(d.members.len(), 1);
    assert_eq!(d.members[0].member_id.as_str(), live_id);
    assert_eq!(d.members[0].member_assignment, live_assignment);
    assert_eq!(heartbeat(&mut c, "live", &live_id, None, 1).await, NONE);
    let groups = list_groups(&mut c, &[]).await;
    let names: Vec<&str> = groups.iter().map(|g| g.0.as_str()).collect();
    assert_eq!(names, ["left", "live", "plain"]);
    // The emptied group keeps counting generations.
    assert_eq!(group_state(&mut c, "left").await, "Empty");
    let r = join_new(&mut c, "left", None, SESSION_MS).await;
    assert_eq!((r.error_code, r.generation_id), (NONE, 3), "{r:?}");
    b.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Group admin

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_groups_reports_state_protocol_and_members_with_their_assignments() {
    let b = start().await;
    let group = "described";
    let members = form_group(&b, group, &[None, Some("static-2")]).await;
    let mut c = b.client().await;
    create_topic(&mut c, "topic", 1).await;
    simple_commit(&mut c, "offsets-only", "topic", &[(0, 1)]).await;
    for v in 0..=6 {
        let mut r = DescribeGroupsRequest::default();
        r.groups = vec![
            group_id(group),
            group_id("offsets-only"),
            group_id("unknown"),
        ];
        r.include_authorized_operations = v >= 3;
        let resp = c.call(v, &r).await;
        assert_eq!(resp.groups.len(), 3, "v{v}");
        let g = &resp.groups[0];
        assert_eq!(g.error_code, NONE, "v{v}");
        assert_eq!(g.group_id.0.as_str(), group);
        if v >= 3 {
            // READ (3), DELETE (6) and DESCRIBE (8): everything a group supports.
            assert_eq!(
                g.authorized_operations,
                (1 << 3) | (1 << 6) | (1 << 8),
                "v{v}"
            );
        }
        assert_eq!(g.group_state.as_str(), "Stable", "v{v}");
        assert_eq!(g.protocol_type.as_str(), "consumer", "v{v}");
        assert_eq!(g.protocol_data.as_str(), PROTOCOL, "v{v}");
        assert_eq!(g.members.len(), 2, "v{v}");
        for m in &members {
            let d = g
                .members
                .iter()
                .find(|d| d.member_id.as_str() == m.id)
                .unwrap_or_else(|| panic!("v{v}: member {} not described", m.id));
            assert_eq!(d.client_id.as_str(), "strata-it", "v{v}");
            assert_eq!(d.client_host.as_str(), "/127.0.0.1", "v{v}");
            assert_eq!(d.member_metadata, subscription(&["topic"]), "v{v}");
            assert_eq!(d.member_assignment, m.assignment, "v{v}");
            let want_instance = if v >= 4 { m.instance.as_deref() } else { None };
            assert_eq!(d.group_instance_id.as_deref(), want_instance, "v{v}");
        }
        let g = &resp.groups[1];
        assert_eq!(g.error_code, NONE, "v{v}");
        assert_eq!(g.group_state.as_str(), "Empty", "v{v}");
        assert_eq!(g.protocol_type.as_str(), "", "v{v}");
        assert!(g.members.is_empty());
        let g = &resp.groups[2];
        assert_eq!(g.group_state.as_str(), "Dead", "v{v}");
        let want = if v >= 6 { GROUP_ID_NOT_FOUND } else { NONE };
        assert_eq!(g.error_code, want, "v{v}: unknown group");
    }
    // While rebalancing, members are listed without metadata or assignment.
    let mut c3 = b.client().await;
    let joining = tokio::spawn(async move { join_new(&mut c3, group, None, SESSION_MS).await });
    let mut members = members;
    members[0]
        .heartbeat_until(group, REBALANCE_IN_PROGRESS)
        .await;
    let d = describe(&mut c, group).await;
    assert_eq!(d.group_state.as_str(), "PreparingRebalance");
    assert_eq!(d.protocol_data.as_str(), "");
    assert!(d
        .members
        .iter()
        .all(|m| m.member_assignment.is_empty() && m.member_metadata.is_empty()));
    let tasks: Vec<_> = members
        .into_iter()
        .map(|m| tokio::spawn(rejoin(m, group.to_string())))
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(joining.await.unwrap().error_code, NONE);
    assert_eq!(group_state(&mut c, group).await, "CompletingRebalance");
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_groups_lists_every_group_and_filters_by_state() {
    let b = start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "topic", 1).await;
    let _members = form_group(&b, "active", &[None]).await;
    simple_commit(&mut c, "idle", "topic", &[(0, 1)]).await;
    let s = |x: &str| x.to_string();
    assert_eq!(
        list_groups(&mut c, &[]).await,
        [
            (s("active"), s("consumer"), s("Stable")),
            (s("idle"), s(""), s("Empty"))
        ]
    );
    assert_eq!(
        list_groups(&mut c, &["Empty"]).await,
        [(s("idle"), s(""), s("Empty"))]
    );
    assert_eq!(
        list_groups(&mut c, &["stable", "Dead"]).await,
        [(s("active"), s("consumer"), s("Stable"))]
    );
    assert!(list_groups(&mut c, &["PreparingRebalance"])
        .await
        .is_empty());
    for v in 0..=LIST_V {
        let resp = c.call(v, &ListGroupsRequest::default()).await;
        assert_eq!(resp.error_code, NONE, "v{v}");
        let mut ids: Vec<&str> = resp.groups.iter().map(|g| g.group_id.0.as_str()).collect();
        ids.sort();
        assert_eq!(ids, ["active", "idle"], "v{v}");
        if v >= 5 {
            assert!(resp
                .groups
                .iter()
                .all(|g| g.group_type.as_str() == "classic"));
        }
    }
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_groups_deletes_only_empty_groups_with_their_offsets() {
    let b = start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "t", 1).await;
    let members = form_group(&b, "busy", &[None]).await;
    simple_commit(&mut c, "idle", "t", &[(0, 10)]).await;
    let got = delete_groups(&mut c, &["busy", "idle", "unknown"]).await;
    assert_eq!(
        got,
        [
            ("busy".into(), NON_EMPTY_GROUP),
            ("idle".into(), NONE),
            ("unknown".into(), GROUP_ID_NOT_FOUND)
        ]
    );
    assert_eq!(
        committed(&mut c, "idle", "t", &[0]).await,
        [-1],
        "offsets are gone"
    );
    let names: Vec<String> = list_groups(&mut c, &[])
        .await
        .into_iter()
        .map(|g| g.0)
        .collect();
    assert_eq!(names, ["busy"]);
    assert_eq!(group_state(&mut c, "idle").await, "Dead");
    // Once its last member leaves, the group can be deleted.
    let mut r = LeaveGroupRequest::default();
    r.group_id = group_id("busy");
    let mut mi = MemberIdentity::default();
    mi.member_id = str_bytes(&members[0].id);
    r.members = vec![mi];
    let resp = c.call(LEAVE_V, &r).await;
    assert_eq!(resp.members[0].error_code, NONE);
    for v in 0..=DELETE_V {
        let mut r = DeleteGroupsRequest::default();
        r.groups_names = vec![group_id("busy")];
        let want = if v == 0 { NONE } else { GROUP_ID_NOT_FOUND };
        assert_eq!(c.call(v, &r).await.results[0].error_code, want, "v{v}");
    }
    assert!(list_groups(&mut c, &[]).await.is_empty());
    b.shutdown().await;
}

fn offset_delete_request(group: &str, topic: &str, partitions: &[i32]) -> OffsetDeleteRequest {
    let mut t = OffsetDeleteRequestTopic::default();
    t.name = name(topic);
    t.partitions = partitions
        .iter()
        .map(|&p| {
            let mut x = OffsetDeleteRequestPartition::default();
            x.partition_index = p;
            x
        })
        .collect();
    let mut r = OffsetDeleteRequest::default();
    r.group_id = group_id(group);
    r.topics = vec![t];
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offset_delete_removes_offsets_the_group_does_not_consume() {
    let b = start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "t", 2).await;
    create_topic(&mut c, "topic", 1).await;
    simple_commit(&mut c, "idle", "t", &[(0, 10), (1, 11)]).await;
    let resp = c.call(0, &offset_delete_request("idle", "t", &[0])).await;
    assert_eq!(resp.error_code, NONE);
    assert_eq!(resp.topics[0].partitions[0].error_code, NONE);
    assert_eq!(committed(&mut c, "idle", "t", &[0, 1]).await, [-1, 11]);
    let resp = c
        .call(0, &offset_delete_request("unknown", "t", &[0]))
        .await;
    assert_eq!(resp.error_code, GROUP_ID_NOT_FOUND);
    // An active consumer group keeps offsets of topics it subscribes to ("topic").
    let members = form_group(&b, "active", &[None]).await;
    let id = members[0].id.clone();
    let mut mc = members.into_iter().next().unwrap().c;
    assert_eq!(
        commit(&mut mc, "active", 1, &id, "topic", &[(0, 3, -1, "")]).await,
        [NONE]
    );
    assert_eq!(
        commit(&mut mc, "active", 1, &id, "t", &[(0, 4, -1, "")]).await,
        [NONE]
    );
    let resp = c
        .call(0, &offset_delete_request("active", "topic", &[0]))
        .await;
    assert_eq!(resp.error_code, NONE);
    assert_eq!(
        resp.topics[0].partitions[0].error_code,
        GROUP_SUBSCRIBED_TO_TOPIC
    );
    let resp = c.call(0, &offset_delete_request("active", "t", &[0])).await;
    assert_eq!(resp.topics[0].partitions[0].error_code, NONE);
    assert_eq!(committed(&mut c, "active", "topic", &[0]).await, [3]);
    assert_eq!(committed(&mut c, "active", "t", &[0]).await, [-1]);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offset_delete_refuses_a_non_empty_group_of_another_protocol_type() {
    let b = start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "t", 1).await;
    let mut r = join_request("workers", "", None, SESSION_MS);
    r.protocol_type = str_bytes("connect");
    let first = c.call(JOIN_V, &r).await;
    r.member_id = first.member_id.clone();
    let j = c.call(JOIN_V, &r).await;
    assert_eq!(j.error_code, NONE);
    let id = j.member_id.to_string();
    assert_eq!(
        commit(&mut c, "workers", 1, &id, "t", &[(0, 3, -1, "")]).await,
        [REBALANCE_IN_PROGRESS]
    );
    let mut s = sync_request(
        "workers",
        &id,
        None,
        1,
        vec![(id.clone(), Bytes::from_static(b"x"))],
    );
    s.protocol_type = Some(str_bytes("connect"));
    assert_eq!(c.call(SYNC_V, &s).await.error_code, NONE);
    assert_eq!(
        commit(&mut c, "workers", 1, &id, "t", &[(0, 3, -1, "")]).await,
        [NONE]
    );
    let resp = c
        .call(0, &offset_delete_request("workers", "t", &[0]))
        .await;
    assert_eq!(resp.error_code, NON_EMPTY_GROUP, "{resp:?}");
    assert_eq!(committed(&mut c, "workers", "t", &[0]).await, [3]);
    b.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// group.initial.rebalance.delay.ms

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initial_rebalance_delay_holds_back_the_first_join_of_an_empty_group() {
    let b = TestBroker::start_with(&[
        ("group.initial.rebalance.delay.ms", "1000"),
        ("offsets.topic.num.partitions", "3"),
    ])
    .await;
    let mut c = b.client().await;
    let started = Instant::now();
    let r = c
        .call(3, &join_request("delayed", "", None, SESSION_MS))
        .await;
    let took = started.elapsed();
    assert_eq!((r.error_code, r.generation_id), (NONE, 1), "{r:?}");
    assert!(
        took >= Duration::from_millis(900),
        "join completed after {took:?}"
    );
    assert!(
        took < Duration::from_secs(5),
        "join completed after {took:?}"
    );
    b.shutdown().await;
}

/// Deleting a topic deletes the offsets committed to it, as Kafka does: a topic re-created
/// under the same name starts with none, and a commit to the new topic is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_topic_takes_its_committed_offsets_along() {
    use kafka_protocol::messages::DeleteTopicsRequest;
    let b = start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "gone", 2).await;
    create_topic(&mut c, "kept", 1).await;
    simple_commit(&mut c, "g", "gone", &[(0, 42), (1, 7)]).await;
    simple_commit(&mut c, "g", "kept", &[(0, 5)]).await;
    let mut req = DeleteTopicsRequest::default();
    req.topic_names = vec![name("gone")];
    req.timeout_ms = 10_000;
    let resp = c.call(5, &req).await;
    assert_eq!(resp.responses[0].error_code, NONE);
    create_topic(&mut c, "gone", 2).await;
    let mut forgotten = false;
    for _ in 0..200 {
        if committed(&mut c, "g", "gone", &[0, 1]).await == [-1, -1] {
            forgotten = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(forgotten, "the deleted topic's offsets are still there");
    assert_eq!(committed(&mut c, "g", "kept", &[0]).await, [5]);
    // The re-created topic's own commits stay, across a restart too.
    simple_commit(&mut c, "g", "gone", &[(1, 3)]).await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(committed(&mut c, "g", "gone", &[0, 1]).await, [-1, 3]);
    let b = b.restart().await;
    let mut c = b.client().await;
    assert_eq!(committed(&mut c, "g", "gone", &[0, 1]).await, [-1, 3]);
    assert_eq!(committed(&mut c, "g", "kept", &[0]).await, [5]);
    b.shutdown().await;
}
