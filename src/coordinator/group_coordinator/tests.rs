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
