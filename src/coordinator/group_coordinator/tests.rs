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
}

type Assigned = consumer_group::Assignment;

/// What one member knows: its id, epoch and partitions.
#[derive(Debug, Clone, PartialEq)]
struct Member {
    id: String,
    epoch: i32,
    owned: Assigned,
}

/// One heartbeat as the Java client sends it, then the handler's write; the member takes
/// what the answer says.
fn beat(c: &GroupCoordinator, m: &mut Member) -> Result<(), ResponseError> {
    let out = c.consumer_heartbeat(
        "g",
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
        },
        &|_| Default::default(),
    );
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
    let _ = first.consumer_heartbeat(
        "g",
        consumer_group::HeartbeatIn {
            member_id: members[0].id.clone(),
            member_epoch: members[0].epoch,
            instance_id: None,
            rack_id: None,
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            rebalance_timeout: Duration::from_secs(30),
            subscribed_topics: None,
            subscribed_regex: None,
            server_assignor: None,
            owned: Some(members[0].owned.clone()),
        },
        &|_| Default::default(),
    );
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
