use super::*;
use crate::coordinator::test_support::{test_config, MemoryLog};

fn coordinator(log: Arc<MemoryLog>) -> GroupCoordinator {
    GroupCoordinator::new(test_config(), log)
}

#[test]
fn transactional_offsets_count_only_after_their_commit_marker_also_on_replay() {
    let log = Arc::new(MemoryLog::default());
    let c = coordinator(log.clone());
    let tp = ("t".to_string(), 0);
    let commit = |c: &GroupCoordinator, pid: i64, offset: i64| {
        c.commit_txn_offsets(
            "g",
            "",
            None,
            -1,
            pid,
            0,
            vec![("t".into(), 0, offset, -1, None)],
        )
        .unwrap()
    };
    assert_eq!(commit(&c, 7, 10), vec![None]);
    assert_eq!(c.fetch_offsets("g", Some(&[tp.clone()]))[0].1, None);
    assert_eq!(c.unstable_offsets("g"), vec![tp.clone()]);
    c.complete_txn_offsets(7, 0, true);
    assert_eq!(
        c.fetch_offsets("g", Some(&[tp.clone()]))[0]
            .1
            .as_ref()
            .unwrap()
            .offset,
        10
    );
    assert!(c.unstable_offsets("g").is_empty());
    log.0.lock().unwrap().push(LogEntry::Marker {
        partition: 0,
        producer_id: 7,
        commit: true,
    });
    // An aborted one is dropped; one still open stays pending after a restart.
    commit(&c, 8, 20);
    c.complete_txn_offsets(8, 0, false);
    log.0.lock().unwrap().push(LogEntry::Marker {
        partition: 0,
        producer_id: 8,
        commit: false,
    });
    commit(&c, 9, 30);
    assert_eq!(
        c.fetch_offsets("g", Some(&[tp.clone()]))[0]
            .1
            .as_ref()
            .unwrap()
            .offset,
        10
    );
    let restarted = coordinator(log);
    restarted.load().unwrap();
    assert_eq!(
        restarted.fetch_offsets("g", Some(&[tp.clone()]))[0]
            .1
            .as_ref()
            .unwrap()
            .offset,
        10
    );
    assert_eq!(restarted.unstable_offsets("g"), vec![tp.clone()]);
    restarted.complete_txn_offsets(9, 0, true);
    assert_eq!(
        restarted.fetch_offsets("g", Some(&[tp]))[0]
            .1
            .as_ref()
            .unwrap()
            .offset,
        30
    );
}

#[test]
fn commits_replay_and_dead_groups_stay_dead_after_a_restart() {
    let log = Arc::new(MemoryLog::default());
    let c = coordinator(log.clone());
    let r = c
        .commit_offsets(
            "with-offsets",
            "",
            None,
            -1,
            vec![("t".into(), 0, 42, -1, Some("m".into()))],
            ResponseError::IllegalGeneration,
        )
        .unwrap();
    assert_eq!(r, vec![None]);
    c.commit_offsets(
        "emptied",
        "",
        None,
        -1,
        vec![("t".into(), 0, 1, -1, None)],
        ResponseError::IllegalGeneration,
    )
    .unwrap();
    c.delete_offsets("emptied", &[("t".into(), 0)]).unwrap();
    assert_eq!(c.remove_dead_groups(), 1);
    let restarted = coordinator(log);
    restarted.load().unwrap();
    let groups: Vec<String> = restarted.list().into_iter().map(|g| g.0).collect();
    assert_eq!(groups, vec!["with-offsets".to_string()]);
    let got = restarted.fetch_offsets("with-offsets", Some(&[("t".to_string(), 0)]));
    assert_eq!(
        got[0].1,
        Some(Committed {
            offset: 42,
            leader_epoch: -1,
            metadata: "m".into()
        })
    );
}

#[tokio::test]
async fn a_resigned_partition_answers_not_coordinator_and_an_elected_one_loads() {
    let log: Arc<MemoryLog> = Arc::default();
    let mut c = coordinator(log.clone());
    // The first join waits out group.initial.rebalance.delay.ms.
    c.config.initial_rebalance_delay = Duration::from_secs(60);
    let c = Arc::new(c);
    let commit = |c: &GroupCoordinator, offset: i64| {
        c.commit_offsets(
            "g",
            "",
            None,
            -1,
            vec![("t".into(), 0, offset, -1, None)],
            ResponseError::IllegalGeneration,
        )
    };
    assert_eq!(commit(&c, 7), Ok(vec![None]));
    assert!(!c.needs_tick(), "a group with offsets only has no timers");
    // A member waits in JoinGroup until the timer completes the rebalance.
    let joining = {
        let c = c.clone();
        tokio::spawn(async move {
            let req = JoinRequest {
                member_id: String::new(),
                group_instance_id: None,
                client_id: "client".into(),
                client_host: "/127.0.0.1".into(),
                session_timeout: Duration::from_secs(10),
                rebalance_timeout: Duration::from_secs(10),
                protocol_type: "consumer".into(),
                protocols: vec![("range".into(), Bytes::new())],
                require_known_member_id: false,
            };
            c.join("g", req).await
        })
    };
    while c.describe("g").is_none_or(|d| d.members.is_empty()) {
        tokio::task::yield_now().await;
    }
    assert!(c.needs_tick(), "a rebalance runs on the timer");
    c.on_resignation(0);
    let joined = joining.await.unwrap();
    assert_eq!(joined.error, Some(ResponseError::NotCoordinator));
    assert_eq!(c.check_coordinator("g"), Err(ResponseError::NotCoordinator));
    assert_eq!(commit(&c, 8), Err(ResponseError::NotCoordinator));
    assert!(c.list().is_empty());
    assert!(!c.needs_tick());

    c.on_election(0, 3);
    assert_eq!(
        c.check_coordinator("g"),
        Err(ResponseError::CoordinatorLoadInProgress)
    );
    assert!(c.needs_tick(), "an elected partition loads on the timer");
    c.load_elected();
    assert!(!c.needs_tick());
    assert_eq!(c.check_coordinator("g"), Ok(()));
    let got = c.fetch_offsets("g", Some(&[("t".to_string(), 0)]));
    assert_eq!(got[0].1.as_ref().map(|o| o.offset), Some(7));
}

/// `__consumer_offsets` in memory with a six-partition topic `t` to assign, whose appends
/// fail while `failing` is set.
#[derive(Default)]
struct AssigningLog {
    log: MemoryLog,
    failing: std::sync::atomic::AtomicBool,
}

impl OffsetsLog for AssigningLog {
    fn append(
        &self,
        group: &str,
        records: Vec<(Bytes, Option<Bytes>)>,
    ) -> Result<(), LogWriteError> {
        if self.failing.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(LogWriteError::NotEnoughReplicas);
        }
        self.log.append(group, records)
    }

    fn append_transactional(
        &self,
        group: &str,
        producer_id: i64,
        producer_epoch: i16,
        records: Vec<(Bytes, Option<Bytes>)>,
    ) -> Result<i32, LogWriteError> {
        self.log
            .append_transactional(group, producer_id, producer_epoch, records)
    }

    fn replay(&self) -> io::Result<Vec<LogEntry>> {
        self.log.replay()
    }

    fn resolve_topic(&self, name: &str) -> Option<(uuid::Uuid, i32)> {
        (name == "t").then_some((uuid::Uuid::from_u128(1), 6))
    }

    fn topic_name(&self, id: &uuid::Uuid) -> Option<String> {
        (*id == uuid::Uuid::from_u128(1)).then(|| "t".to_string())
    }
}

type Assigned = consumer_group::Assignment;

/// What one member knows: its id, epoch and partitions.
#[derive(Debug, Clone, PartialEq)]
struct Member {
    id: String,
    epoch: i32,
    owned: Assigned,
}

/// The heartbeat the Java client sends for what `m` knows: its subscription only when it
/// (re)joins, and the partitions it owns.
fn heartbeat_of(m: &Member) -> consumer_group::HeartbeatIn {
    consumer_group::HeartbeatIn {
        member_id: m.id.clone(),
        member_epoch: m.epoch,
        instance_id: None,
        rack_id: None,
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        rebalance_timeout: Duration::from_secs(30),
        subscribed_topics: (m.epoch == 0).then(|| vec!["t".to_string()]),
        subscribed_regex: None,
        server_assignor: None,
        owned: Some(m.owned.clone()),
    }
}

/// One heartbeat as the Java client sends it, then the handler's write; the member takes
/// what the answer says.
fn beat(c: &GroupCoordinator, m: &mut Member) -> Result<(), ResponseError> {
    let out = c.consumer_heartbeat("g", heartbeat_of(m), &|_| Default::default());
    c.write_consumer_group("g")?;
    let out = out?;
    m.epoch = out.member_epoch;
    if let Some(a) = out.assignment {
        m.owned = a;
    }
    Ok(())
}

fn member(id: &str) -> Member {
    Member {
        id: id.into(),
        epoch: 0,
        owned: Assigned::new(),
    }
}

/// Heartbeats every member until the group is stable.
fn settle(c: &GroupCoordinator, members: &mut [Member]) {
    for _ in 0..20 {
        for m in members.iter_mut() {
            beat(c, m).unwrap();
        }
        if c.with_consumer_group("g", |g| g.state_name()) == Some("Stable") {
            return;
        }
    }
    panic!("the group did not settle");
}

fn owned_count(members: &[Member]) -> usize {
    members
        .iter()
        .map(|m| m.owned.values().map(|ps| ps.len()).sum::<usize>())
        .sum()
}

fn reloaded(log: &Arc<AssigningLog>) -> GroupCoordinator {
    let c = GroupCoordinator::new(test_config(), log.clone());
    c.load().unwrap();
    c
}

#[test]
fn a_consumer_group_taken_over_by_another_coordinator_goes_on_without_a_rejoin() {
    let log = Arc::new(AssigningLog::default());
    let first = GroupCoordinator::new(test_config(), log.clone());
    let mut members = vec![member("a"), member("b")];
    settle(&first, &mut members);
    assert_eq!(owned_count(&members), 6);
    let epoch = first.with_consumer_group("g", |g| g.group_epoch).unwrap();
    // A heartbeat that changes nothing durable needs no write.
    let records = log.replay().unwrap().len();
    let _ = first.consumer_heartbeat("g", heartbeat_of(&members[0]), &|_| Default::default());
    assert!(!first.consumer_group_needs_write("g"));
    beat(&first, &mut members[1]).unwrap();
    assert_eq!(
        log.replay().unwrap().len(),
        records,
        "steady heartbeats write nothing"
    );

    // A new coordinator (a restart, a failover) reads the group back: the members'
    // heartbeats are answered at their epochs, with the partitions they hold, and nothing
    // is rebalanced.
    let second = reloaded(&log);
    let before = members.clone();
    for m in members.iter_mut() {
        beat(&second, m).unwrap();
    }
    assert_eq!(members, before);
    let (group_epoch, rebalances, state) = second
        .with_consumer_group("g", |g| (g.group_epoch, g.rebalances, g.state_name()))
        .unwrap();
    assert_eq!((group_epoch, rebalances, state), (epoch, 0, "Stable"));

    // A third member joins: a and b must give partitions up. The coordinator changes in
    // the middle of that, and the new one carries the revocation on.
    let mut c_member = member("c");
    beat(&second, &mut c_member).unwrap();
    beat(&second, &mut members[0]).unwrap();
    let revoking = second
        .with_consumer_group("g", |g| g.members["a"].pending_revocation.clone())
        .unwrap();
    assert!(!revoking.is_empty(), "a must revoke partitions");
    let third = reloaded(&log);
    assert_eq!(
        third
            .with_consumer_group("g", |g| g.members["a"].pending_revocation.clone())
            .unwrap(),
        revoking
    );
    members.push(c_member);
    settle(&third, &mut members);
    assert_eq!(owned_count(&members), 6);
    assert!(members
        .iter()
        .all(|m| m.owned.values().map(|p| p.len()).sum::<usize>() == 2));
    assert_eq!(third.with_consumer_group("g", |g| g.rebalances), Some(0));

    // c leaves; the next coordinator no longer knows it.
    let mut leaving = members.pop().unwrap();
    leaving.epoch = -1;
    beat(&third, &mut leaving).unwrap();
    let fourth = reloaded(&log);
    assert_eq!(
        fourth.with_consumer_group("g", |g| g.members.keys().cloned().collect::<Vec<_>>()),
        Some(vec!["a".to_string(), "b".to_string()])
    );
    leaving.epoch = 3;
    assert_eq!(
        beat(&fourth, &mut leaving),
        Err(ResponseError::UnknownMemberId)
    );
    settle(&fourth, &mut members);
    assert_eq!(owned_count(&members), 6);
}

#[test]
fn a_consumer_group_write_that_fails_is_answered_with_its_error_and_taken_again() {
    let log = Arc::new(AssigningLog::default());
    let c = GroupCoordinator::new(test_config(), log.clone());
    let mut members = vec![member("a")];
    settle(&c, &mut members);

    log.failing.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut b = member("b");
    assert_eq!(
        beat(&c, &mut b),
        Err(ResponseError::CoordinatorNotAvailable)
    );
    assert_eq!(
        reloaded(&log).with_consumer_group("g", |g| g.members.len()),
        Some(1),
        "nothing of the failed write is in the log"
    );

    // The log is back: a's next heartbeat writes what b's join changed.
    log.failing
        .store(false, std::sync::atomic::Ordering::SeqCst);
    beat(&c, &mut members[0]).unwrap();
    let after = reloaded(&log);
    let (ids, epoch) = after
        .with_consumer_group("g", |g| {
            (g.members.keys().cloned().collect::<Vec<_>>(), g.group_epoch)
        })
        .unwrap();
    assert_eq!(ids, vec!["a".to_string(), "b".to_string()]);
    assert_eq!(Some(epoch), c.with_consumer_group("g", |g| g.group_epoch));
}

#[test]
fn a_deleted_consumer_group_stays_deleted_after_a_reload() {
    let log = Arc::new(AssigningLog::default());
    let c = GroupCoordinator::new(test_config(), log.clone());
    let mut members = vec![member("a")];
    settle(&c, &mut members);
    assert_eq!(c.delete_group("g"), Some(ResponseError::NonEmptyGroup));
    members[0].epoch = -1;
    beat(&c, &mut members[0]).unwrap();
    assert_eq!(c.delete_group("g"), None);
    let after = reloaded(&log);
    assert!(after.list().is_empty(), "{:?}", after.list());
    // And every record the group wrote has its tombstone.
    let mut live = std::collections::BTreeMap::new();
    for e in log.replay().unwrap() {
        if let LogEntry::Record { key, value } = e {
            match value {
                Some(v) => live.insert(key, v),
                None => live.remove(&key),
            };
        }
    }
    assert!(live.is_empty(), "{live:?}");
}

/// OffsetDelete on a consumer-protocol group (Kafka's ConsumerGroup.isSubscribedToTopic):
/// offsets of a topic a member subscribes to stay (GROUP_SUBSCRIBED_TO_TOPIC), others go.
#[test]
fn offset_delete_keeps_the_topics_a_consumer_group_subscribes_to() {
    let log = Arc::new(AssigningLog::default());
    let c = GroupCoordinator::new(test_config(), log.clone());
    let mut members = vec![member("a")];
    settle(&c, &mut members);
    let m = &members[0];
    let offsets = vec![
        ("t".to_string(), 0, 10, -1, None),
        ("other".to_string(), 0, 20, -1, None),
    ];
    let unknown = ResponseError::GroupIdNotFound;
    let committed = c.commit_offsets("g", &m.id, None, m.epoch, offsets, unknown);
    assert_eq!(committed, Ok(vec![None, None]));
    let parts = [("t".to_string(), 0), ("other".to_string(), 0)];
    assert_eq!(
        c.delete_offsets("g", &parts),
        Ok(vec![Some(ResponseError::GroupSubscribedToTopic), None])
    );
    let left = c.fetch_offsets("g", Some(&parts));
    let left: Vec<_> = left
        .iter()
        .map(|(_, o)| o.as_ref().map(|o| o.offset))
        .collect();
    assert_eq!(left, [Some(10), None]);
    // Once the member leaves, nothing is subscribed: the rest goes too.
    members[0].epoch = -1;
    beat(&c, &mut members[0]).unwrap();
    assert_eq!(c.delete_offsets("g", &parts[..1]), Ok(vec![None]));
    let after = reloaded(&log);
    let left = after.fetch_offsets("g", Some(&parts));
    assert!(left.iter().all(|(_, o)| o.is_none()), "{left:?}");
}

/// Mixed groups: classic members and members of the consumer protocol in one group, and the
/// conversions between the protocols, driven as the Java client drives them.
mod mixed {
    use super::*;
    use crate::coordinator::consumer_group::classic;

    const T: uuid::Uuid = uuid::Uuid::from_u128(1);

    fn join_request(id: &str, owned: &[i32]) -> JoinRequest {
        JoinRequest {
            member_id: id.into(),
            group_instance_id: None,
            client_id: "java".into(),
            client_host: "/127.0.0.1".into(),
            session_timeout: Duration::from_secs(10),
            rebalance_timeout: Duration::from_secs(30),
            protocol_type: "consumer".into(),
            protocols: vec![(
                "cooperative-sticky".into(),
                classic::encode_subscription(&["t"], &[("t", owned)], 1),
            )],
            require_known_member_id: false,
        }
    }

    fn partitions(assignment: &Bytes) -> Vec<i32> {
        let mut ps: Vec<i32> = classic::decode_assignment(assignment)
            .expect("an assignment")
            .into_iter()
            .flat_map(|(t, ps)| {
                assert_eq!(t, "t");
                ps
            })
            .collect();
        ps.sort();
        ps
    }

    /// A classic member inside a consumer group: joins with what it owns, syncs, and
    /// reports the generation and partitions it got.
    async fn rejoin(c: &Arc<GroupCoordinator>, id: &str, owned: &[i32]) -> (i32, Vec<i32>) {
        let joined = c.join("g", join_request(id, owned)).await;
        assert_eq!(joined.error, None, "{id} joins");
        assert_eq!(joined.member_id, id);
        assert!(
            joined.members.is_empty() && joined.leader.is_empty(),
            "no leader"
        );
        let synced = c
            .sync(
                "g",
                id,
                None,
                joined.generation,
                Some("consumer"),
                Some("cooperative-sticky"),
                Vec::new(),
            )
            .await;
        assert_eq!(synced.error, None, "{id} syncs");
        (joined.generation, partitions(&synced.assignment))
    }

    /// Two classic members, t-0..2 and t-3..5, at generation 1.
    async fn classic_group(c: &Arc<GroupCoordinator>) -> [(String, i32, Vec<i32>); 2] {
        let joins: Vec<_> = (0..2)
            .map(|_| {
                let c = c.clone();
                tokio::spawn(async move { c.join("g", join_request("", &[])).await })
            })
            .collect();
        let mut done = Vec::new();
        for j in joins {
            while !j.is_finished() {
                tokio::time::sleep(Duration::from_millis(20)).await;
                let c = c.clone();
                tokio::task::spawn_blocking(move || c.tick()).await.unwrap();
            }
            done.push(j.await.unwrap());
        }
        let leader = done
            .iter()
            .find(|j| j.leader == j.member_id)
            .unwrap()
            .clone();
        let follower = done
            .iter()
            .find(|j| j.leader != j.member_id)
            .unwrap()
            .clone();
        assert_eq!(leader.generation, 1);
        let plan = |ps: &[i32]| {
            classic::encode_assignment(
                &[(T, ps.iter().copied().collect())].into(),
                &|_| Some("t".into()),
                1,
            )
        };
        let waiting = {
            let c = c.clone();
            let id = follower.member_id.clone();
            tokio::spawn(async move { c.sync("g", &id, None, 1, None, None, Vec::new()).await })
        };
        let led = c
            .sync(
                "g",
                &leader.member_id,
                None,
                1,
                None,
                None,
                vec![
                    (leader.member_id.clone(), plan(&[0, 1, 2])),
                    (follower.member_id.clone(), plan(&[3, 4, 5])),
                ],
            )
            .await;
        assert_eq!(partitions(&led.assignment), [0, 1, 2]);
        assert_eq!(partitions(&waiting.await.unwrap().assignment), [3, 4, 5]);
        [
            (leader.member_id, 1, vec![0, 1, 2]),
            (follower.member_id, 1, vec![3, 4, 5]),
        ]
    }

    fn commit(
        c: &GroupCoordinator,
        id: &str,
        generation: i32,
    ) -> Result<Vec<Option<ResponseError>>, ResponseError> {
        c.commit_offsets(
            "g",
            id,
            None,
            generation,
            vec![("t".into(), 0, 10, -1, None)],
            ResponseError::IllegalGeneration,
        )
    }

    #[tokio::test]
    async fn a_classic_group_is_upgraded_member_by_member_and_downgraded_when_the_last_new_member_leaves(
    ) {
        let log = Arc::new(AssigningLog::default());
        let c = Arc::new(GroupCoordinator::new(test_config(), log.clone()));
        let [(a, _, _), (b, _, _)] = classic_group(&c).await;
        assert_eq!(commit(&c, &a, 1), Ok(vec![None]));

        // A member of the consumer protocol joins: the group is converted at generation 1,
        // each classic member holding what it held.
        let mut n = member("n");
        beat(&c, &mut n).unwrap();
        let (epoch, classic_members, held) = c
            .with_consumer_group("g", |g| {
                (
                    g.group_epoch,
                    g.members.values().filter(|m| m.classic.is_some()).count(),
                    g.members[&a].assigned.clone(),
                )
            })
            .expect("a consumer group");
        assert_eq!((epoch, classic_members), (2, 2));
        assert_eq!(held, [(T, [0, 1, 2].into())].into());
        assert!(
            n.owned.is_empty(),
            "the new member waits for released partitions"
        );
        // The classic group's record is deleted before the consumer group's are written.
        let records = log.replay().unwrap();
        let first_consumer = records
            .iter()
            .position(|e| matches!(e, LogEntry::Record { key, .. } if matches!(offsets_topic::decode_key(key.clone()), Ok(RecordKey::Consumer { .. }))))
            .unwrap();
        assert!(
            matches!(&records[first_consumer - 1], LogEntry::Record { key, value: None }
            if matches!(offsets_topic::decode_key(key.clone()), Ok(RecordKey::Group { group }) if group == "g"))
        );

        // The classic members are told to rejoin; each gives up a partition, then comes back
        // at the new epoch.
        assert_eq!(
            c.heartbeat("g", &a, None, 1),
            Some(ResponseError::RebalanceInProgress)
        );
        let mut owned = std::collections::BTreeMap::new();
        for (id, held) in [(&a, vec![0, 1, 2]), (&b, vec![3, 4, 5])] {
            let (generation, kept) = rejoin(&c, id, &held).await;
            assert_eq!((generation, kept.len()), (1, 2), "{id} revokes one first");
            assert_eq!(
                c.heartbeat("g", id, None, 1),
                Some(ResponseError::RebalanceInProgress)
            );
            assert_eq!(
                commit(&c, id, 1),
                Ok(vec![None]),
                "commits at its generation"
            );
            let (generation, now) = rejoin(&c, id, &kept).await;
            assert_eq!((generation, &now), (2, &kept));
            assert_eq!(c.heartbeat("g", id, None, 2), None);
            assert_eq!(commit(&c, id, 1), Err(ResponseError::IllegalGeneration));
            owned.insert(id.clone(), now);
        }
        beat(&c, &mut n).unwrap();
        assert_eq!(n.owned[&T].len(), 2);
        let mut all: Vec<i32> = owned.values().flatten().copied().collect();
        all.extend(n.owned[&T].iter());
        all.sort();
        assert_eq!(all, [0, 1, 2, 3, 4, 5], "every partition once");
        assert_eq!(
            c.with_consumer_group("g", |g| g.state_name()),
            Some("Stable")
        );

        // Another coordinator reads the mixed group back: the classic members keep their
        // sessions, protocols and generations.
        let second = Arc::new(reloaded(&log));
        assert_eq!(second.heartbeat("g", &a, None, 2), None);
        let (generation, again) = rejoin(&second, &a, &owned[&a]).await;
        assert_eq!((generation, &again), (2, &owned[&a]));

        // The last member of the consumer protocol leaves: the group is classic again at
        // the group epoch, and rebalances.
        let leave = consumer_group::HeartbeatIn {
            member_epoch: -1,
            owned: None,
            ..heartbeat_of(&n)
        };
        let _ = second.consumer_heartbeat("g", leave, &|_| Default::default());
        second.write_consumer_group("g").unwrap();
        assert!(second.with_consumer_group("g", |_| ()).is_none());
        let d = second.describe("g").unwrap();
        assert_eq!(
            (d.state, d.protocol_type.as_str()),
            ("PreparingRebalance", "consumer")
        );
        assert_eq!(d.members.len(), 2);
        assert_eq!(
            second.heartbeat("g", &a, None, 3),
            Some(ResponseError::RebalanceInProgress)
        );
        // Read back, it is a classic group with the offsets committed all along.
        let third = reloaded(&log);
        assert!(third.with_consumer_group("g", |_| ()).is_none());
        let d = third.describe("g").unwrap();
        assert_eq!((d.members.len(), d.protocol_type.as_str()), (2, "consumer"));
        assert_eq!(
            third.fetch_offsets("g", Some(&[("t".into(), 0)]))[0]
                .1
                .as_ref()
                .map(|o| o.offset),
            Some(10)
        );
    }

    #[tokio::test]
    async fn classic_calls_to_a_consumer_group_get_kafkas_errors() {
        let log = Arc::new(AssigningLog::default());
        let c = Arc::new(GroupCoordinator::new(test_config(), log.clone()));
        let mut n = member("n");
        beat(&c, &mut n).unwrap();
        // Another protocol type, or metadata that is not a subscription.
        let mut other = join_request("", &[]);
        other.protocol_type = "connect".into();
        assert_eq!(
            c.join("g", other).await.error,
            Some(ResponseError::InconsistentGroupProtocol)
        );
        let mut garbage = join_request("", &[]);
        garbage.protocols[0].1 = Bytes::from_static(&[0xff]);
        assert_eq!(
            c.join("g", garbage).await.error,
            Some(ResponseError::InconsistentGroupProtocol)
        );
        // JoinGroup v4+: a new dynamic member gets an id first.
        let mut first = join_request("", &[]);
        first.require_known_member_id = true;
        let asked = c.join("g", first).await;
        assert_eq!(asked.error, Some(ResponseError::MemberIdRequired));
        let (generation, _) = rejoin(&c, &asked.member_id, &[]).await;
        // Kafka's checks on the other calls.
        let sync = |id: &str, generation: i32, name: Option<&'static str>| {
            let c = c.clone();
            let id = id.to_string();
            async move {
                c.sync(
                    "g",
                    &id,
                    None,
                    generation,
                    Some("consumer"),
                    name,
                    Vec::new(),
                )
                .await
                .error
            }
        };
        assert_eq!(
            sync(&asked.member_id, generation + 5, None).await,
            Some(ResponseError::IllegalGeneration)
        );
        assert_eq!(
            sync(&asked.member_id, generation, Some("range")).await,
            Some(ResponseError::InconsistentGroupProtocol)
        );
        assert_eq!(
            sync("nobody", generation, None).await,
            Some(ResponseError::UnknownMemberId)
        );
        assert_eq!(
            sync("n", n.epoch, None).await,
            Some(ResponseError::UnknownMemberId),
            "not a classic member"
        );
        assert_eq!(
            c.heartbeat("g", &asked.member_id, None, generation + 1),
            Some(ResponseError::IllegalGeneration)
        );
        assert_eq!(
            c.leave(
                "g",
                &[
                    ("n".into(), None),
                    ("x".into(), None),
                    (asked.member_id.clone(), None)
                ]
            )
            .unwrap(),
            vec![
                Some(ResponseError::UnknownMemberId),
                Some(ResponseError::UnknownMemberId),
                None
            ]
        );
        assert_eq!(c.with_consumer_group("g", |g| g.members.len()), Some(1));
    }

    /// The downgrade is a durable step: while its write fails, the log still holds the
    /// mixed consumer group (a coordinator that takes over serves the classic members from
    /// it), and the timer writes the conversion once the log is back.
    #[tokio::test]
    async fn a_downgrade_whose_write_fails_is_written_by_the_timer_and_never_half_applied() {
        let log = Arc::new(AssigningLog::default());
        let c = Arc::new(GroupCoordinator::new(test_config(), log.clone()));
        let [(a, _, _), (b, _, _)] = classic_group(&c).await;
        let mut n = member("n");
        beat(&c, &mut n).unwrap();
        let mut generation = 0;
        for (id, held) in [(&a, vec![0, 1, 2]), (&b, vec![3, 4, 5])] {
            let (_, kept) = rejoin(&c, id, &held).await;
            generation = rejoin(&c, id, &kept).await.0;
        }

        log.failing.store(true, std::sync::atomic::Ordering::SeqCst);
        let leave = consumer_group::HeartbeatIn {
            member_epoch: -1,
            owned: None,
            ..heartbeat_of(&n)
        };
        let _ = c.consumer_heartbeat("g", leave, &|_| Default::default());
        assert_eq!(
            c.write_consumer_group("g"),
            Err(ResponseError::CoordinatorNotAvailable)
        );
        assert!(c.consumer_group_needs_write("g"), "the conversion waits");
        let taken_over = Arc::new(reloaded(&log));
        assert_eq!(
            taken_over.with_consumer_group("g", |g| g
                .members
                .values()
                .filter(|m| m.classic.is_some())
                .count()),
            Some(2),
            "the log still holds the mixed group"
        );
        assert_eq!(
            taken_over.heartbeat("g", &a, None, generation),
            None,
            "its classic members are served at their generation"
        );

        log.failing
            .store(false, std::sync::atomic::Ordering::SeqCst);
        let ticker = c.clone();
        tokio::task::spawn_blocking(move || ticker.tick())
            .await
            .unwrap();
        assert!(!c.consumer_group_needs_write("g"));
        let after = reloaded(&log);
        assert!(
            after.with_consumer_group("g", |_| ()).is_none(),
            "a classic group"
        );
        assert_eq!(after.describe("g").map(|d| d.members.len()), Some(2));
    }

    /// A static classic member restarted (new process, no member id) takes its previous
    /// incarnation's place and partitions without a new group epoch; the old member id is
    /// fenced by its instance id.
    #[tokio::test]
    async fn a_restarted_static_classic_member_takes_over_its_place() {
        let log = Arc::new(AssigningLog::default());
        let c = Arc::new(GroupCoordinator::new(test_config(), log.clone()));
        let mut n = member("n");
        beat(&c, &mut n).unwrap();
        let static_join = || JoinRequest {
            group_instance_id: Some("i1".into()),
            ..join_request("", &[])
        };
        let first = c.join("g", static_join()).await;
        assert_eq!(first.error, None);
        let held = c
            .with_consumer_group("g", |g| g.target[&first.member_id].clone())
            .unwrap();
        let epoch = c.with_consumer_group("g", |g| g.group_epoch).unwrap();
        let again = c.join("g", static_join()).await;
        assert_eq!(again.error, None);
        assert_ne!(again.member_id, first.member_id);
        let (members, target, now_epoch) = c
            .with_consumer_group("g", |g| {
                (
                    g.members.len(),
                    g.target[&again.member_id].clone(),
                    g.group_epoch,
                )
            })
            .unwrap();
        assert_eq!((members, &target, now_epoch), (2, &held, epoch));
        assert_eq!(
            c.heartbeat("g", &first.member_id, Some("i1"), first.generation),
            Some(ResponseError::FencedInstanceId)
        );
    }

    #[tokio::test]
    async fn a_classic_member_that_does_not_rejoin_or_sync_in_time_is_removed() {
        let log = Arc::new(AssigningLog::default());
        let c = Arc::new(GroupCoordinator::new(test_config(), log.clone()));
        let mut n = member("n");
        beat(&c, &mut n).unwrap();
        let mut req = join_request("", &[]);
        req.rebalance_timeout = Duration::from_millis(50);
        let joined = c.join("g", req).await;
        assert_eq!(joined.error, None);
        // No SyncGroup within the rebalance timeout.
        tokio::time::sleep(Duration::from_millis(80)).await;
        let ticker = c.clone();
        tokio::task::spawn_blocking(move || ticker.tick())
            .await
            .unwrap();
        assert_eq!(c.with_consumer_group("g", |g| g.members.len()), Some(1));
        assert_eq!(
            c.heartbeat("g", &joined.member_id, None, joined.generation),
            Some(ResponseError::UnknownMemberId)
        );
    }
}
