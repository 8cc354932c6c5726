use super::*;

fn uuid(n: u8) -> Uuid128 {
    let mut bytes = [0u8; 16];
    bytes[15] = n;
    Uuid128(bytes)
}

fn register(state: &mut MetadataState, index: u64, id: i32, rack: Option<&str>) -> BrokerEpoch {
    let response = state
        .apply(
            index,
            &Command::RegisterBroker {
                id: BrokerId(id),
                incarnation: uuid(id as u8 + 100),
                rack: rack.map(str::to_owned),
                endpoints: vec![Endpoint {
                    listener: "PLAINTEXT".into(),
                    host: "localhost".into(),
                    port: 9092,
                    security_protocol: "PLAINTEXT".into(),
                }],
                now_ms: 1_000,
            },
        )
        .unwrap();
    match response {
        Response::BrokerRegistered { broker_epoch } => broker_epoch,
        other => panic!("unexpected {other:?}"),
    }
}

/// Three registered, unfenced brokers 1, 2, 3.
fn three_brokers() -> MetadataState {
    let mut state = MetadataState::new();
    for id in 1..=3 {
        let epoch = register(&mut state, id as u64 * 10, id, None);
        state
            .apply(
                id as u64 * 10 + 1,
                &Command::UnfenceBroker {
                    id: BrokerId(id),
                    broker_epoch: epoch,
                },
            )
            .unwrap();
    }
    state
}

fn replicas(ids: &[i32]) -> PartitionAssignment {
    PartitionAssignment {
        replicas: ids.iter().map(|id| BrokerId(*id)).collect(),
    }
}

fn create_topic(
    state: &mut MetadataState,
    name: &str,
    id: TopicId,
    parts: &[&[i32]],
) -> CommandResult {
    state.apply(
        100,
        &Command::CreateTopic {
            name: name.into(),
            id,
            partitions: parts.iter().map(|p| replicas(p)).collect(),
            configs: BTreeMap::new(),
        },
    )
}

#[test]
fn registration_starts_fenced_with_the_log_index_as_epoch() {
    let mut state = MetadataState::new();
    let epoch = register(&mut state, 42, 7, Some("rack-a"));
    assert_eq!(epoch, BrokerEpoch(42));
    let broker = state.broker(BrokerId(7)).unwrap();
    assert!(broker.fenced);
    assert_eq!(broker.rack.as_deref(), Some("rack-a"));
    assert!(!state.is_usable(BrokerId(7)));
}

#[test]
fn a_second_live_incarnation_of_a_broker_id_is_rejected_until_fenced() {
    let mut state = three_brokers();
    let other = Command::RegisterBroker {
        id: BrokerId(1),
        incarnation: uuid(1),
        rack: None,
        endpoints: vec![],
        now_ms: 5_000,
    };
    let err = state.apply(200, &other).unwrap_err();
    assert!(matches!(
        err,
        ApplyError::DuplicateBrokerRegistration { .. }
    ));
    assert_eq!(err.kafka_error_code(), 101);

    state
        .apply(201, &Command::FenceBroker { id: BrokerId(1) })
        .unwrap();
    assert_eq!(
        state.apply(202, &other),
        Ok(Response::BrokerRegistered {
            broker_epoch: BrokerEpoch(202)
        })
    );
}

#[test]
fn heartbeats_check_the_broker_epoch_and_keep_the_newest_time() {
    let mut state = three_brokers();
    let epoch = state.broker(BrokerId(2)).unwrap().epoch;
    let stale = Command::BrokerHeartbeat {
        id: BrokerId(2),
        broker_epoch: BrokerEpoch(epoch.0 - 1),
        now_ms: 9_000,
    };
    assert!(matches!(
        state.apply(300, &stale),
        Err(ApplyError::StaleBrokerEpoch { .. })
    ));
    for now_ms in [9_000, 8_000] {
        let beat = Command::BrokerHeartbeat {
            id: BrokerId(2),
            broker_epoch: epoch,
            now_ms,
        };
        assert_eq!(
            state.apply(301, &beat),
            Ok(Response::HeartbeatAccepted { fenced: false })
        );
    }
    assert_eq!(state.broker(BrokerId(2)).unwrap().last_heartbeat_ms, 9_000);
    assert_eq!(
        state.brokers_with_expired_session(10_000, 5_000, |_| None),
        vec![BrokerId(1), BrokerId(3)]
    );
    // The controller's in-memory contact times count like heartbeats in the log.
    let contact = |id: BrokerId| (id == BrokerId(1)).then_some(9_500);
    assert_eq!(
        state.brokers_with_expired_session(10_000, 5_000, contact),
        vec![BrokerId(3)]
    );
    let unknown = Command::BrokerHeartbeat {
        id: BrokerId(9),
        broker_epoch: epoch,
        now_ms: 1,
    };
    assert_eq!(
        state.apply(302, &unknown),
        Err(ApplyError::BrokerNotRegistered(BrokerId(9)))
    );
}

#[test]
fn an_unregistered_broker_is_forgotten_until_it_registers_again() {
    let mut state = three_brokers();
    assert_eq!(
        state.apply(300, &Command::UnregisterBroker { id: BrokerId(2) }),
        Ok(Response::BrokerUnregistered)
    );
    assert!(state.broker(BrokerId(2)).is_none());
    assert_eq!(
        state.brokers().map(|b| b.id).collect::<Vec<_>>(),
        vec![BrokerId(1), BrokerId(3)]
    );
    // Twice, or an id never registered: BROKER_ID_NOT_REGISTERED, nothing changes.
    for id in [2, 9] {
        assert_eq!(
            state.apply(301, &Command::UnregisterBroker { id: BrokerId(id) }),
            Err(ApplyError::BrokerNotRegistered(BrokerId(id)))
        );
    }
    // Its old epoch is refused; a new registration starts fenced, as after a restart.
    let epoch = register(&mut state, 302, 2, None);
    assert!(state.broker(BrokerId(2)).is_some_and(|b| b.fenced));
    assert_eq!(epoch, BrokerEpoch(302));
}

#[test]
fn create_topic_leads_on_the_first_unfenced_replica() {
    let mut state = three_brokers();
    state
        .apply(99, &Command::FenceBroker { id: BrokerId(2) })
        .unwrap();
    let result = create_topic(&mut state, "orders", uuid(1), &[&[2, 3, 1], &[1, 2, 3]]);
    assert_eq!(
        result,
        Ok(Response::TopicCreated {
            id: uuid(1),
            partitions: 2
        })
    );
    let p0 = state.partition(uuid(1), 0).unwrap();
    assert_eq!(p0.leader, Some(BrokerId(3)));
    assert_eq!(p0.isr, vec![BrokerId(3), BrokerId(1)]);
    assert_eq!(p0.replicas, vec![BrokerId(2), BrokerId(3), BrokerId(1)]);
    assert_eq!(state.topic_by_name("orders").unwrap().id, uuid(1));
}

#[test]
fn create_topic_rejects_bad_input_without_changing_state() {
    let mut state = three_brokers();
    create_topic(&mut state, "a.b", uuid(1), &[&[1]]).unwrap();
    let before = state.clone();
    let cases: Vec<(&str, TopicId, Vec<&[i32]>, i16)> = vec![
        ("", uuid(2), vec![&[1]], 17),
        ("..", uuid(2), vec![&[1]], 17),
        ("bad name", uuid(2), vec![&[1]], 17),
        ("a_b", uuid(2), vec![&[1]], 17),
        ("ok", Uuid128::ZERO, vec![&[1]], 17),
        ("a.b", uuid(2), vec![&[1]], 36),
        ("ok", uuid(1), vec![&[1]], 36),
        ("ok", uuid(2), vec![], 37),
        ("ok", uuid(2), vec![&[]], 39),
        ("ok", uuid(2), vec![&[1, 1]], 39),
        ("ok", uuid(2), vec![&[1, 9]], 39),
        ("ok", uuid(2), vec![&[1, 2], &[3]], 39),
    ];
    for (name, id, parts, code) in cases {
        let err = create_topic(&mut state, name, id, &parts).unwrap_err();
        assert_eq!(err.kafka_error_code(), code, "{name:?}: {err}");
        assert_eq!(state, before, "{name:?} changed the state");
    }
    let long = "x".repeat(250);
    assert!(create_topic(&mut state, &long, uuid(3), &[&[1]]).is_err());
    for id in 1..=3 {
        state
            .apply(120, &Command::FenceBroker { id: BrokerId(id) })
            .unwrap();
    }
    let err = create_topic(&mut state, "fenced", uuid(4), &[&[1, 2]]).unwrap_err();
    assert!(err.to_string().contains("fenced"), "{err}");
}

#[test]
fn delete_topic_frees_its_name_and_configs() {
    let mut state = three_brokers();
    create_topic(&mut state, "t", uuid(1), &[&[1]]).unwrap();
    let set = Command::SetConfigs {
        resource: ConfigResource::Topic("t".into()),
        changes: BTreeMap::from([("retention.ms".to_owned(), Some("1000".to_owned()))]),
    };
    state.apply(101, &set).unwrap();
    assert_eq!(
        state.apply(102, &Command::DeleteTopic { id: uuid(1) }),
        Ok(Response::TopicDeleted { name: "t".into() })
    );
    assert!(state.topic_by_name("t").is_none());
    assert!(state.configs(&ConfigResource::Topic("t".into())).is_none());
    assert_eq!(
        state.apply(103, &Command::DeleteTopic { id: uuid(1) }),
        Err(ApplyError::UnknownTopicId(uuid(1)))
    );
    create_topic(&mut state, "t", uuid(2), &[&[2]]).unwrap();
    assert!(state
        .configs(&ConfigResource::Topic("t".into()))
        .unwrap()
        .is_empty());
}

#[test]
fn create_partitions_keeps_the_replication_factor() {
    let mut state = three_brokers();
    create_topic(&mut state, "t", uuid(1), &[&[1, 2]]).unwrap();
    let add = |parts: &[&[i32]]| Command::CreatePartitions {
        topic_id: uuid(1),
        partitions: parts.iter().map(|p| replicas(p)).collect(),
    };
    assert!(matches!(
        state.apply(110, &add(&[&[3]])),
        Err(ApplyError::InvalidReplicaAssignment(_))
    ));
    assert!(matches!(
        state.apply(110, &add(&[])),
        Err(ApplyError::InvalidPartitions(_))
    ));
    assert_eq!(
        state.apply(111, &add(&[&[2, 3], &[3, 1]])),
        Ok(Response::PartitionsCreated { total: 3 })
    );
    assert_eq!(
        state.partition(uuid(1), 2).unwrap().leader,
        Some(BrokerId(3))
    );
}

fn alter(leader: Option<i32>, leader_epoch: i32, isr: &[i32], partition_epoch: i32) -> Command {
    Command::AlterPartition {
        topic_id: uuid(1),
        partition: 0,
        leader: leader.map(BrokerId),
        leader_epoch: LeaderEpoch(leader_epoch),
        isr: isr.iter().map(|b| BrokerId(*b)).collect(),
        partition_epoch: PartitionEpoch(partition_epoch),
    }
}

#[test]
fn alter_partition_applies_kafka_checks() {
    let mut state = three_brokers();
    create_topic(&mut state, "t", uuid(1), &[&[1, 2, 3]]).unwrap();
    let before = state.clone();
    let rejected: Vec<(Command, i16)> = vec![
        (alter(Some(1), 0, &[1, 2], 1), 95), // stale/future partition epoch
        (alter(Some(2), 0, &[1, 2], 0), 74), // leader changed, same epoch
        (alter(Some(1), -1, &[1, 2], 0), 74), // older leader epoch
        (alter(Some(1), 0, &[], 0), 42),     // empty ISR
        (alter(Some(1), 0, &[1, 1], 0), 42), // duplicate
        (alter(Some(1), 0, &[1, 4], 0), 42), // not a replica
        (alter(Some(3), 1, &[1, 2], 0), 42), // leader outside the ISR
    ];
    for (command, code) in rejected {
        let err = state.apply(200, &command).unwrap_err();
        assert_eq!(err.kafka_error_code(), code, "{command:?}: {err}");
        assert_eq!(state, before);
    }
    let shrink = alter(Some(1), 0, &[1, 2], 0);
    assert_eq!(
        state.apply(201, &shrink),
        Ok(Response::PartitionAltered {
            leader: Some(BrokerId(1)),
            leader_epoch: LeaderEpoch(0),
            partition_epoch: PartitionEpoch(1),
        })
    );
    // The same change again is now stale.
    assert!(matches!(
        state.apply(202, &shrink),
        Err(ApplyError::InvalidUpdateVersion { .. })
    ));
    // A fenced broker cannot rejoin the ISR nor lead.
    state
        .apply(203, &Command::FenceBroker { id: BrokerId(3) })
        .unwrap();
    assert!(matches!(
        state.apply(204, &alter(Some(1), 0, &[1, 2, 3], 1)),
        Err(ApplyError::IneligibleReplica {
            broker: BrokerId(3),
            ..
        })
    ));
    state
        .apply(205, &Command::FenceBroker { id: BrokerId(1) })
        .unwrap();
    assert!(matches!(
        state.apply(206, &alter(Some(1), 0, &[1, 2], 1)),
        Err(ApplyError::IneligibleReplica {
            broker: BrokerId(1),
            ..
        })
    ));
    // Moving leadership to 2 with a new epoch works; 1 may stay in the ISR while fenced.
    assert!(state.apply(207, &alter(Some(2), 1, &[1, 2], 1)).is_ok());
    let p = state.partition(uuid(1), 0).unwrap();
    assert_eq!(
        (p.leader, p.leader_epoch, p.partition_epoch),
        (Some(BrokerId(2)), LeaderEpoch(1), PartitionEpoch(2))
    );
    let mut unknown = alter(Some(2), 1, &[2], 2);
    if let Command::AlterPartition { partition, .. } = &mut unknown {
        *partition = 5;
    }
    assert!(matches!(
        state.apply(208, &unknown),
        Err(ApplyError::UnknownPartition { partition: 5, .. })
    ));
}

fn reassign(target: Option<&[i32]>, allow_rf_change: bool) -> Command {
    Command::AlterPartitionReassignment {
        topic_id: uuid(1),
        partition: 0,
        replicas: target.map(|t| t.iter().map(|b| BrokerId(*b)).collect()),
        allow_replication_factor_change: allow_rf_change,
    }
}

fn ids(v: &[i32]) -> Vec<BrokerId> {
    v.iter().map(|b| BrokerId(*b)).collect()
}

#[test]
fn reassignment_adds_replicas_then_completes_when_the_isr_covers_the_target() {
    let mut state = three_brokers();
    create_topic(&mut state, "t", uuid(1), &[&[1]]).unwrap();
    assert_eq!(
        state.apply(200, &reassign(Some(&[2, 3]), true)),
        Ok(Response::PartitionAltered {
            leader: Some(BrokerId(1)),
            leader_epoch: LeaderEpoch(0),
            partition_epoch: PartitionEpoch(1),
        })
    );
    let p = state.partition(uuid(1), 0).unwrap().clone();
    assert_eq!(p.replicas, ids(&[2, 3, 1]));
    assert_eq!(
        (p.adding_replicas.clone(), p.removing_replicas.clone()),
        (ids(&[2, 3]), ids(&[1]))
    );
    assert_eq!(p.isr, ids(&[1]));
    assert!(p.is_reassigning());

    // The leader adds 2: still in progress.
    state.apply(201, &alter(Some(1), 0, &[1, 2], 1)).unwrap();
    assert!(state.partition(uuid(1), 0).unwrap().is_reassigning());
    // Adding 3 completes it in the same apply: broker 1 leaves, 2 leads at a new epoch.
    assert_eq!(
        state.apply(202, &alter(Some(1), 0, &[1, 2, 3], 2)),
        Ok(Response::PartitionAltered {
            leader: Some(BrokerId(2)),
            leader_epoch: LeaderEpoch(1),
            partition_epoch: PartitionEpoch(3),
        })
    );
    let p = state.partition(uuid(1), 0).unwrap();
    assert_eq!(
        (p.replicas.clone(), p.isr.clone()),
        (ids(&[2, 3]), ids(&[2, 3]))
    );
    assert!(!p.is_reassigning());
    // The old leader's next ISR change is fenced.
    assert!(matches!(
        state.apply(203, &alter(Some(1), 0, &[1, 2, 3], 3)),
        Err(ApplyError::FencedLeaderEpoch { .. })
    ));
}

#[test]
fn a_target_the_isr_already_covers_completes_at_once() {
    let mut state = three_brokers();
    create_topic(&mut state, "t", uuid(1), &[&[1, 2, 3]]).unwrap();
    // Reordering: same set, new preferred leader; the leader stays, no epoch bump.
    state
        .apply(200, &reassign(Some(&[3, 1, 2]), false))
        .unwrap();
    let p = state.partition(uuid(1), 0).unwrap().clone();
    assert_eq!(p.replicas, ids(&[3, 1, 2]));
    assert_eq!(
        (p.leader, p.leader_epoch),
        (Some(BrokerId(1)), LeaderEpoch(0))
    );
    assert!(!p.is_reassigning());
    // Shrinking off the leader: done at once, leadership moves to the first target replica.
    state.apply(201, &reassign(Some(&[2, 3]), true)).unwrap();
    let p = state.partition(uuid(1), 0).unwrap().clone();
    assert_eq!(
        (p.replicas.clone(), p.isr.clone()),
        (ids(&[2, 3]), ids(&[2, 3]))
    );
    assert_eq!(
        (p.leader, p.leader_epoch),
        (Some(BrokerId(2)), LeaderEpoch(1))
    );
    assert_eq!(p.partition_epoch, PartitionEpoch(2));
    // The same target again changes nothing, not even the partition epoch.
    let before = state.clone();
    assert_eq!(
        state.apply(202, &reassign(Some(&[2, 3]), false)),
        Ok(Response::PartitionAltered {
            leader: Some(BrokerId(2)),
            leader_epoch: LeaderEpoch(1),
            partition_epoch: PartitionEpoch(2),
        })
    );
    assert_eq!(state, before);
}

#[test]
fn cancelling_a_reassignment_reverts_to_the_original_replicas() {
    let mut state = three_brokers();
    create_topic(&mut state, "t", uuid(1), &[&[1, 2]]).unwrap();
    state.apply(200, &reassign(Some(&[3, 2]), true)).unwrap();
    let p = state.partition(uuid(1), 0).unwrap();
    assert_eq!(p.replicas, ids(&[3, 2, 1]));
    assert_eq!(p.leader_epoch, LeaderEpoch(0));
    state.apply(201, &reassign(None, true)).unwrap();
    // As in Kafka, the reverted replicas keep their order in the reassigning list.
    let p = state.partition(uuid(1), 0).unwrap();
    assert_eq!(
        (p.replicas.clone(), p.isr.clone()),
        (ids(&[2, 1]), ids(&[1, 2]))
    );
    assert!(!p.is_reassigning());
    assert_eq!(p.leader, Some(BrokerId(1)));
    assert_eq!(p.leader_epoch, LeaderEpoch(1), "broker 3 left the replicas");
    let before = state.clone();
    let err = state.apply(202, &reassign(None, true)).unwrap_err();
    assert_eq!(err.kafka_error_code(), 85, "{err}");
    assert_eq!(state, before);
}

#[test]
fn reassignment_rejects_bad_targets_without_changing_state() {
    let mut state = three_brokers();
    create_topic(&mut state, "t", uuid(1), &[&[1, 2]]).unwrap();
    let before = state.clone();
    let cases: Vec<(Command, i16)> = vec![
        (reassign(Some(&[]), true), 39),
        (reassign(Some(&[1, 1]), true), 39),
        (reassign(Some(&[1, 9]), true), 39),
        (reassign(Some(&[3]), false), 38),
        (reassign(Some(&[1, 2, 3]), false), 38),
        (reassign(None, true), 85),
    ];
    for (command, code) in cases {
        let err = state.apply(300, &command).unwrap_err();
        assert_eq!(err.kafka_error_code(), code, "{command:?}: {err}");
        assert_eq!(state, before);
    }
    let mut unknown = reassign(Some(&[1]), true);
    if let Command::AlterPartitionReassignment { partition, .. } = &mut unknown {
        *partition = 4;
    }
    assert_eq!(
        state.apply(301, &unknown).unwrap_err().kafka_error_code(),
        3
    );
    // A fenced but registered broker is a valid target: it joins once unfenced.
    state
        .apply(302, &Command::FenceBroker { id: BrokerId(3) })
        .unwrap();
    state.apply(303, &reassign(Some(&[1, 3]), false)).unwrap();
    assert_eq!(
        state.partition(uuid(1), 0).unwrap().adding_replicas,
        ids(&[3])
    );
    assert!(matches!(
        state.apply(304, &alter(Some(1), 0, &[1, 2, 3], 1)),
        Err(ApplyError::IneligibleReplica { .. })
    ));
}

#[test]
fn partition_state_without_reassignment_fields_still_loads() {
    let old = r#"{"replicas":[1,2],"isr":[1],"leader":1,"leader_epoch":4,"partition_epoch":9}"#;
    let p: PartitionState = serde_json::from_str(old).unwrap();
    assert!(p.adding_replicas.is_empty() && p.removing_replicas.is_empty());
    assert_eq!(serde_json::to_string(&p).unwrap(), old);
}

fn elect(election: ElectionType) -> Command {
    Command::ElectLeader {
        topic_id: uuid(1),
        partition: 0,
        election,
    }
}

fn leadership(state: &MetadataState) -> (Option<i32>, Vec<i32>, i32, i32) {
    let p = state.partition(uuid(1), 0).unwrap();
    (
        p.leader.map(|b| b.0),
        p.isr.iter().map(|b| b.0).collect(),
        p.leader_epoch.0,
        p.partition_epoch.0,
    )
}

#[test]
fn preferred_election_moves_leadership_back_to_the_first_replica() {
    let mut state = three_brokers();
    create_topic(&mut state, "t", uuid(1), &[&[1, 2, 3]]).unwrap();
    let preferred = elect(ElectionType::Preferred);
    let err = state.apply(200, &preferred).unwrap_err();
    assert_eq!(err.kafka_error_code(), 84, "{err}");

    // Broker 1 drops out of the ISR and loses leadership to 2.
    state.apply(201, &alter(Some(2), 1, &[2, 3], 0)).unwrap();
    let before = state.clone();
    let err = state.apply(202, &preferred).unwrap_err();
    assert_eq!(err.kafka_error_code(), 80, "not in the ISR: {err}");
    assert_eq!(state, before);

    // Back in the ISR but fenced: still not available.
    state.apply(203, &alter(Some(2), 1, &[2, 3, 1], 1)).unwrap();
    state
        .apply(204, &Command::FenceBroker { id: BrokerId(1) })
        .unwrap();
    let before = state.clone();
    let err = state.apply(205, &preferred).unwrap_err();
    assert_eq!(err.kafka_error_code(), 80, "fenced: {err}");
    assert_eq!(state, before);

    let epoch = state.broker(BrokerId(1)).unwrap().epoch;
    state
        .apply(
            206,
            &Command::UnfenceBroker {
                id: BrokerId(1),
                broker_epoch: epoch,
            },
        )
        .unwrap();
    assert_eq!(
        state.apply(207, &preferred),
        Ok(Response::PartitionAltered {
            leader: Some(BrokerId(1)),
            leader_epoch: LeaderEpoch(2),
            partition_epoch: PartitionEpoch(3),
        })
    );
    assert_eq!(leadership(&state), (Some(1), vec![2, 3, 1], 2, 3));
    let err = state.apply(208, &preferred).unwrap_err();
    assert_eq!(err.kafka_error_code(), 84, "{err}");
}

#[test]
fn preferred_election_of_a_leaderless_partition_takes_a_usable_isr_member() {
    let mut state = three_brokers();
    create_topic(&mut state, "t", uuid(1), &[&[1, 2, 3]]).unwrap();
    state.apply(200, &alter(None, 1, &[2, 3], 0)).unwrap();
    state
        .apply(201, &Command::FenceBroker { id: BrokerId(1) })
        .unwrap();
    assert!(state.apply(202, &elect(ElectionType::Preferred)).is_ok());
    assert_eq!(leadership(&state), (Some(2), vec![2, 3], 2, 2));
}

#[test]
fn unclean_election_only_for_leaderless_partitions_and_it_may_leave_the_isr() {
    let mut state = three_brokers();
    create_topic(&mut state, "t", uuid(1), &[&[1, 2, 3]]).unwrap();
    let unclean = elect(ElectionType::Unclean);
    let err = state.apply(200, &unclean).unwrap_err();
    assert_eq!(err.kafka_error_code(), 84, "there is a leader: {err}");

    // Offline with only broker 3 in the ISR, and 3 fenced.
    state.apply(201, &alter(None, 1, &[3], 0)).unwrap();
    for id in 1..=3 {
        state
            .apply(202, &Command::FenceBroker { id: BrokerId(id) })
            .unwrap();
    }
    let before = state.clone();
    let err = state.apply(203, &unclean).unwrap_err();
    assert_eq!(err.kafka_error_code(), 83, "no live replica: {err}");
    assert_eq!(state, before);

    // Broker 2 comes back: outside the ISR, it becomes leader and the whole ISR.
    let epoch = state.broker(BrokerId(2)).unwrap().epoch;
    state
        .apply(
            204,
            &Command::UnfenceBroker {
                id: BrokerId(2),
                broker_epoch: epoch,
            },
        )
        .unwrap();
    assert!(state.apply(205, &unclean).is_ok());
    assert_eq!(leadership(&state), (Some(2), vec![2], 2, 2));
}

#[test]
fn elections_of_unknown_partitions_are_rejected() {
    let mut state = three_brokers();
    create_topic(&mut state, "t", uuid(1), &[&[1]]).unwrap();
    let missing = Command::ElectLeader {
        topic_id: uuid(1),
        partition: 1,
        election: ElectionType::Preferred,
    };
    let err = state.apply(200, &missing).unwrap_err();
    assert_eq!(err.kafka_error_code(), 3, "{err}");
    let unknown_topic = Command::ElectLeader {
        topic_id: uuid(9),
        partition: 0,
        election: ElectionType::Unclean,
    };
    assert_eq!(
        state.apply(201, &unknown_topic),
        Err(ApplyError::UnknownTopicId(uuid(9)))
    );
}

#[test]
fn configs_are_set_and_removed_per_resource() {
    let mut state = three_brokers();
    let set = |resource: ConfigResource, key: &str, value: Option<&str>| Command::SetConfigs {
        resource,
        changes: BTreeMap::from([(key.to_owned(), value.map(str::to_owned))]),
    };
    state
        .apply(
            1,
            &set(
                ConfigResource::Broker(BrokerId(1)),
                "log.retention.ms",
                Some("5"),
            ),
        )
        .unwrap();
    state
        .apply(
            2,
            &set(
                ConfigResource::ClusterDefault,
                "log.cleaner.threads",
                Some("2"),
            ),
        )
        .unwrap();
    assert_eq!(
        state.configs(&ConfigResource::Broker(BrokerId(1))).unwrap()["log.retention.ms"],
        "5"
    );
    state
        .apply(
            3,
            &set(
                ConfigResource::Broker(BrokerId(1)),
                "log.retention.ms",
                None,
            ),
        )
        .unwrap();
    assert!(state
        .configs(&ConfigResource::Broker(BrokerId(1)))
        .is_none());
    assert_eq!(
        state.apply(
            4,
            &set(ConfigResource::Topic("nope".into()), "a", Some("b"))
        ),
        Err(ApplyError::UnknownTopic("nope".into()))
    );
    assert!(matches!(
        state.apply(5, &set(ConfigResource::ClusterDefault, "", Some("b"))),
        Err(ApplyError::InvalidConfig(_))
    ));
}

#[test]
fn producer_id_blocks_never_overlap() {
    let mut state = three_brokers();
    let epoch = |state: &MetadataState, id| state.broker(BrokerId(id)).unwrap().epoch;
    let allocate = |broker, broker_epoch, count| Command::AllocateProducerIds {
        broker: BrokerId(broker),
        broker_epoch,
        count,
    };
    let first = state
        .apply(1, &allocate(1, epoch(&state, 1), 1000))
        .unwrap();
    let second = state
        .apply(2, &allocate(2, epoch(&state, 2), 1000))
        .unwrap();
    assert_eq!(
        (first, second),
        (
            Response::ProducerIdsAllocated(ProducerIdBlock {
                broker: BrokerId(1),
                first: ProducerId(0),
                count: 1000
            }),
            Response::ProducerIdsAllocated(ProducerIdBlock {
                broker: BrokerId(2),
                first: ProducerId(1000),
                count: 1000
            })
        )
    );
    assert!(matches!(
        state.apply(3, &allocate(1, BrokerEpoch(0), 1)),
        Err(ApplyError::StaleBrokerEpoch { .. })
    ));
    assert_eq!(
        state.apply(4, &allocate(1, epoch(&state, 1), 0)),
        Err(ApplyError::InvalidProducerIdCount(0))
    );
    state.next_producer_id = i64::MAX - 10;
    assert_eq!(
        state.apply(5, &allocate(1, epoch(&state, 1), 1000)),
        Err(ApplyError::ProducerIdsExhausted)
    );
    assert_eq!(state.next_producer_id(), ProducerId(i64::MAX - 10));
}

#[test]
fn opaque_records_are_kept_per_kind_and_key() {
    let mut state = MetadataState::new();
    let put = Command::PutRecord {
        kind: RecordKind::ScramCredential,
        key: "alice/SCRAM-SHA-256".into(),
        value: vec![1, 2, 3],
    };
    assert_eq!(state.apply(1, &put), Ok(Response::RecordPut));
    assert_eq!(
        state.record(RecordKind::ScramCredential, "alice/SCRAM-SHA-256"),
        Some(&[1u8, 2, 3][..])
    );
    assert_eq!(state.record(RecordKind::Acl, "alice/SCRAM-SHA-256"), None);
    let delete = Command::DeleteRecord {
        kind: RecordKind::ScramCredential,
        key: "alice/SCRAM-SHA-256".into(),
    };
    assert_eq!(
        state.apply(2, &delete),
        Ok(Response::RecordDeleted { existed: true })
    );
    assert_eq!(
        state.apply(3, &delete),
        Ok(Response::RecordDeleted { existed: false })
    );
    let empty_key = Command::PutRecord {
        kind: RecordKind::Acl,
        key: String::new(),
        value: vec![],
    };
    assert!(matches!(
        state.apply(4, &empty_key),
        Err(ApplyError::InvalidRecordKey(_))
    ));
}

#[test]
fn state_round_trips_through_json() {
    let mut state = three_brokers();
    create_topic(&mut state, "t", uuid(1), &[&[1, 2], &[2, 3]]).unwrap();
    state
        .apply(
            5,
            &Command::PutRecord {
                kind: RecordKind::Acl,
                key: "k".into(),
                value: vec![9],
            },
        )
        .unwrap();
    state
        .apply(
            6,
            &Command::SetConfigs {
                resource: ConfigResource::Broker(BrokerId(2)),
                changes: BTreeMap::from([("a".to_owned(), Some("b".to_owned()))]),
            },
        )
        .unwrap();
    let json = serde_json::to_vec(&state).unwrap();
    let back: MetadataState = serde_json::from_slice(&json).unwrap();
    assert_eq!(back, state);
}

#[test]
fn the_cluster_id_is_set_once_and_later_proposals_answer_it() {
    let mut state = MetadataState::new();
    assert_eq!(state.cluster_id(), None);
    let set = |id: &str| Command::SetClusterId {
        cluster_id: id.into(),
    };
    // A malformed id is refused and sets nothing.
    for bad in ["", "has space", "new\nline", "a=b", &"x".repeat(256)] {
        let before = state.clone();
        assert!(
            matches!(
                state.apply(1, &set(bad)),
                Err(ApplyError::InvalidClusterId { .. })
            ),
            "{bad:?}"
        );
        assert_eq!(state, before);
    }
    assert_eq!(
        state.apply(2, &set("MkU3OEVBNTcwNTJENDM2Qk")),
        Ok(Response::ClusterId {
            cluster_id: "MkU3OEVBNTcwNTJENDM2Qk".into(),
            newly_set: true
        })
    );
    // Another broker's candidate (or the same one again) changes nothing and learns the id.
    for other in ["MkU3OEVBNTcwNTJENDM2Qk", "another-cluster", ""] {
        assert_eq!(
            state.apply(3, &set(other)),
            Ok(Response::ClusterId {
                cluster_id: "MkU3OEVBNTcwNTJENDM2Qk".into(),
                newly_set: false
            })
        );
    }
    assert_eq!(state.cluster_id(), Some("MkU3OEVBNTcwNTJENDM2Qk"));
}

#[test]
fn a_state_serialized_before_cluster_ids_reads_without_one() {
    let mut state = three_brokers();
    let old = serde_json::to_value(&state).unwrap();
    assert!(old.get("cluster_id").is_none(), "not written while unset");
    let back: MetadataState = serde_json::from_value(old).unwrap();
    assert_eq!(back.cluster_id(), None);
    state
        .apply(
            40,
            &Command::SetClusterId {
                cluster_id: "c1".into(),
            },
        )
        .unwrap();
    let back: MetadataState = serde_json::from_slice(&serde_json::to_vec(&state).unwrap()).unwrap();
    assert_eq!(back, state);
    assert_eq!(back.cluster_id(), Some("c1"));
}

#[test]
fn group_configs_need_no_group_and_vanish_when_emptied() {
    let mut state = three_brokers();
    let set = |group: &str, value: Option<&str>| Command::SetConfigs {
        resource: ConfigResource::Group(group.to_owned()),
        changes: BTreeMap::from([(
            "consumer.session.timeout.ms".to_owned(),
            value.map(str::to_owned),
        )]),
    };
    state
        .apply(1, &set("not-yet-a-group", Some("50000")))
        .unwrap();
    assert_eq!(
        state.configs(&ConfigResource::Group("not-yet-a-group".into())),
        Some(&BTreeMap::from([(
            "consumer.session.timeout.ms".to_owned(),
            "50000".to_owned()
        )]))
    );
    assert_eq!(state.group_configs().len(), 1);
    // A snapshot carries them.
    let copy: MetadataState =
        serde_json::from_str(&serde_json::to_string(&state).unwrap()).unwrap();
    assert_eq!(copy.group_configs(), state.group_configs());
    state.apply(2, &set("not-yet-a-group", None)).unwrap();
    assert!(state.group_configs().is_empty());
    assert!(matches!(
        state.apply(3, &set("", Some("1"))),
        Err(ApplyError::InvalidConfig(_))
    ));
}

fn restored(name: &str, id: TopicId, parts: &[&[i32]], epoch: i32) -> RestoredTopic {
    RestoredTopic {
        name: name.into(),
        id,
        partitions: parts.iter().map(|p| replicas(p)).collect(),
        leader_epochs: vec![LeaderEpoch(epoch); parts.len()],
        configs: BTreeMap::from([("remote.storage.enable".into(), "true".into())]),
    }
}

#[test]
fn a_restore_from_the_bucket_creates_its_topics_at_their_epochs_once() {
    let mut state = three_brokers();
    let restore = Command::RestoreFromBucket {
        topics: vec![
            restored("orders", uuid(7), &[&[1, 2, 3], &[2, 3, 1]], 6),
            restored("__consumer_offsets", uuid(8), &[&[3, 1, 2]], 2),
        ],
        next_producer_id: 5_000,
    };
    assert_eq!(
        state.apply(300, &restore),
        Ok(Response::BucketRestore {
            created: vec!["orders".into(), "__consumer_offsets".into()],
            refused: None,
            newly_decided: true,
        })
    );
    assert_eq!(state.restored_from_bucket(), Some(true));
    let orders = state.topic_by_name("orders").unwrap();
    assert_eq!(orders.id, uuid(7));
    assert_eq!(orders.configs["remote.storage.enable"], "true");
    assert_eq!(orders.partitions[1].leader, Some(BrokerId(2)));
    assert!(orders
        .partitions
        .iter()
        .all(|p| p.leader_epoch == LeaderEpoch(6)));
    assert_eq!(state.next_producer_id(), ProducerId(5_000));

    // Decided once: after a deletion, the same catalog brings nothing back.
    state
        .apply(301, &Command::DeleteTopic { id: uuid(7) })
        .unwrap();
    let again = state.apply(302, &restore).unwrap();
    assert!(matches!(
        again,
        Response::BucketRestore { ref created, newly_decided: false, .. } if created.is_empty()
    ));
    assert!(state.topic_by_name("orders").is_none());
}

#[test]
fn a_quorum_with_topics_refuses_a_restore_and_never_takes_one_later() {
    let mut state = three_brokers();
    create_topic(&mut state, "live", uuid(9), &[&[1]]).unwrap();
    let restore = Command::RestoreFromBucket {
        topics: vec![restored("orders", uuid(7), &[&[1, 2, 3]], 0)],
        next_producer_id: 0,
    };
    let r = state.apply(300, &restore).unwrap();
    assert!(matches!(
        r,
        Response::BucketRestore { ref created, refused: Some(_), newly_decided: true } if created.is_empty()
    ));
    assert_eq!(state.restored_from_bucket(), Some(false));
    state
        .apply(301, &Command::DeleteTopic { id: uuid(9) })
        .unwrap();
    state.apply(302, &restore).unwrap();
    assert!(state.topic_by_name("orders").is_none());
}

#[test]
fn an_invalid_restore_changes_nothing_and_leaves_it_undecided() {
    let mut state = three_brokers();
    let before = state.clone();
    // Broker 4 is not registered: the second topic is invalid, so neither is created.
    let restore = Command::RestoreFromBucket {
        topics: vec![
            restored("orders", uuid(7), &[&[1, 2, 3]], 0),
            restored("payments", uuid(8), &[&[4]], 0),
        ],
        next_producer_id: 9_000,
    };
    assert!(matches!(
        state.apply(300, &restore),
        Err(ApplyError::InvalidReplicaAssignment(_))
    ));
    let mut short = restored("orders", uuid(7), &[&[1, 2, 3]], 0);
    short.leader_epochs.clear();
    assert!(state
        .apply(
            301,
            &Command::RestoreFromBucket {
                topics: vec![short],
                next_producer_id: 0
            }
        )
        .is_err());
    assert_eq!(state, before);
    assert_eq!(state.restored_from_bucket(), None);
}
