//! Expected messages are the ones a Kafka 4.4 broker answers with default `group.*` settings.

use super::*;

fn one(k: &str, v: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(k.to_string(), v.to_string())])
}

fn check(k: &str, v: &str) -> Result<(), String> {
    validate(&one(k, v), &BrokerGroupSettings::default()).map_err(|e| e.to_string())
}

#[test]
fn values_within_the_broker_bounds_are_accepted() {
    for (k, v) in [
        ("consumer.session.timeout.ms", "50000"),
        ("consumer.session.timeout.ms", " 50000 "),
        ("consumer.heartbeat.interval.ms", "6000"),
        ("consumer.assignor.offload.enable", "FALSE"),
        ("share.auto.offset.reset", "by_duration:PT1H"),
        ("share.auto.offset.reset", "by_duration:P1DT2H3M4.5S"),
        ("share.auto.offset.reset", "by_duration:+PT1H"),
        ("share.auto.offset.reset", "by_duration:P-1DT25H"),
        ("share.auto.offset.reset", "latest "),
        ("share.isolation.level", "read_committed"),
        ("streams.initial.rebalance.delay.ms", "99999999"),
        ("streams.rack.aware.assignment.tags", "a,b"),
        ("streams.rack.aware.assignment.tags", ""),
        ("streams.assignor.name", "sticky"),
        ("streams.num.standby.replicas", "+1"),
        ("streams.acceptable.recovery.lag", "99999999999"),
        ("errors.deadletterqueue.topic.name", "bad name!"),
    ] {
        assert_eq!(check(k, v), Ok(()), "{k}={v}");
    }
}

#[test]
fn each_refusal_carries_kafkas_message() {
    let cases = [
        ("foo.bar", "1", "Unknown group config name: foo.bar"),
        (
            "consumer.session.timeout.ms",
            "1000",
            "consumer.session.timeout.ms must be in the range 45000 to 60000 inclusive.",
        ),
        (
            "consumer.session.timeout.ms",
            "100000",
            "consumer.session.timeout.ms must be in the range 45000 to 60000 inclusive.",
        ),
        (
            "consumer.session.timeout.ms",
            "abc",
            "Invalid value abc for configuration consumer.session.timeout.ms: Not a number of type INT",
        ),
        (
            "consumer.session.timeout.ms",
            "99999999999",
            "Invalid value 99999999999 for configuration consumer.session.timeout.ms: Not a number of type INT",
        ),
        (
            "consumer.session.timeout.ms",
            "",
            "Invalid value  for configuration consumer.session.timeout.ms: Not a number of type INT",
        ),
        (
            "consumer.session.timeout.ms",
            "1.5",
            "Invalid value 1.5 for configuration consumer.session.timeout.ms: Not a number of type INT",
        ),
        (
            "consumer.session.timeout.ms",
            "-1",
            "Invalid value -1 for configuration consumer.session.timeout.ms: Value must be at least 1",
        ),
        (
            "consumer.heartbeat.interval.ms",
            "16000",
            "consumer.heartbeat.interval.ms must be in the range 5000 to 15000 inclusive.",
        ),
        (
            "consumer.assignor.offload.enable",
            "maybe",
            "Invalid value maybe for configuration consumer.assignor.offload.enable: Expected value to be either true or false",
        ),
        (
            "consumer.assignment.interval.ms",
            "-5",
            "Invalid value -5 for configuration consumer.assignment.interval.ms: Value must be at least 0",
        ),
        (
            "share.auto.offset.reset",
            "EARLIEST",
            "Invalid value EARLIEST for configuration share.auto.offset.reset: Invalid value `EARLIEST` for configuration share.auto.offset.reset. The value must be either 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'.",
        ),
        (
            "share.isolation.level",
            "bad",
            "Invalid value bad for configuration share.isolation.level: String must be one of: read_committed, read_uncommitted",
        ),
        (
            "share.record.lock.duration.ms",
            "500",
            "Invalid value 500 for configuration share.record.lock.duration.ms: Value must be at least 1000",
        ),
        (
            "share.record.lock.duration.ms",
            "3600001",
            "share.record.lock.duration.ms must be in the range 15000 to 60000 inclusive.",
        ),
        (
            "share.delivery.count.limit",
            "11",
            "share.delivery.count.limit must be in the range 2 to 10 inclusive.",
        ),
        (
            "share.partition.max.record.locks",
            "100000",
            "share.partition.max.record.locks must be in the range 100 to 4000 inclusive.",
        ),
        (
            "streams.num.standby.replicas",
            "3",
            "streams.num.standby.replicas must be less than or equal to 2",
        ),
        (
            "streams.assignor.name",
            "nope",
            "streams.assignor.name 'nope' is not a registered task assignor. Registered assignors are: [sticky].",
        ),
        (
            "streams.acceptable.recovery.lag",
            "-1",
            "Invalid value -1 for configuration streams.acceptable.recovery.lag: Value must be at least 0",
        ),
        (
            "streams.task.offset.interval.ms",
            "5",
            "streams.task.offset.interval.ms must be greater than or equal to 15000",
        ),
        (
            "streams.rack.aware.assignment.tags",
            "a, a",
            "streams.rack.aware.assignment.tags must not contain duplicate tag keys.",
        ),
        (
            "errors.deadletterqueue.topic.name",
            "__x",
            "errors.deadletterqueue.topic.name: DLQ topic name must not start with '__'",
        ),
    ];
    for (k, v, msg) in cases {
        assert_eq!(check(k, v), Err(msg.to_string()), "{k}={v}");
    }
}

#[test]
fn the_first_problem_reported_follows_kafkas_order() {
    let b = BrokerGroupSettings::default();
    let two = |a: (&str, &str), c: (&str, &str)| {
        let m = BTreeMap::from([
            (a.0.to_string(), a.1.to_string()),
            (c.0.to_string(), c.1.to_string()),
        ]);
        validate(&m, &b).map_err(|e| e.to_string())
    };
    // Names first, then types (in definition order), then broker bounds.
    assert_eq!(
        two(("zzz", "1"), ("consumer.session.timeout.ms", "x")),
        Err("Unknown group config name: zzz".into())
    );
    assert_eq!(
        two(
            ("share.delivery.count.limit", "1"),
            ("consumer.session.timeout.ms", "x")
        ),
        Err("Invalid value x for configuration consumer.session.timeout.ms: Not a number of type INT".into())
    );
    assert_eq!(
        two(
            ("share.delivery.count.limit", "11"),
            ("consumer.session.timeout.ms", "1")
        ),
        Err("consumer.session.timeout.ms must be in the range 45000 to 60000 inclusive.".into())
    );
}

#[test]
fn broker_settings_move_the_bounds_and_the_defaults() {
    let b = BrokerGroupSettings::new(&BTreeMap::from([
        (
            "group.consumer.min.session.timeout.ms".to_string(),
            "6000".to_string(),
        ),
        (
            "group.consumer.min.heartbeat.interval.ms".to_string(),
            "1000".to_string(),
        ),
        (
            "group.consumer.heartbeat.interval.ms".to_string(),
            "2000".to_string(),
        ),
        ("log.retention.ms".to_string(), "1".to_string()),
    ]));
    assert_eq!(
        validate(&one("consumer.session.timeout.ms", "6000"), &b),
        Ok(())
    );
    // The session timeout must exceed the heartbeat interval in force.
    assert_eq!(
        validate(
            &BTreeMap::from([
                (
                    "consumer.session.timeout.ms".to_string(),
                    "6000".to_string()
                ),
                (
                    "consumer.heartbeat.interval.ms".to_string(),
                    "6000".to_string()
                ),
            ]),
            &b
        )
        .map_err(|e| e.to_string()),
        Err(
            "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms"
                .into()
        )
    );
    assert_eq!(consumer_timeouts(&BTreeMap::new(), &b), (45000, 2000));
    assert_eq!(
        consumer_timeouts(&one("consumer.session.timeout.ms", "7000"), &b),
        (7000, 2000)
    );
    // A value the bounds no longer allow is clamped to them.
    assert_eq!(
        consumer_timeouts(
            &one("consumer.session.timeout.ms", "7000"),
            &BrokerGroupSettings::default()
        ),
        (45000, 5000)
    );
    let hb = describe(&BTreeMap::new(), &b)
        .into_iter()
        .find(|d| d.name == "consumer.heartbeat.interval.ms")
        .unwrap();
    assert_eq!(
        (hb.value.as_str(), hb.source),
        ("2000", SOURCE_STATIC_BROKER)
    );
}

#[test]
fn describe_lists_overrides_then_their_fallback_and_hides_unset_internal_configs() {
    let b = BrokerGroupSettings::default();
    let all = describe(&BTreeMap::new(), &b);
    assert_eq!(all.len(), 21);
    assert!(all.iter().all(|d| d.source == SOURCE_DEFAULT));
    assert!(!all
        .iter()
        .any(|d| d.name == "consumer.assignor.offload.enable"));
    let assignor = all
        .iter()
        .find(|d| d.name == "streams.assignor.name")
        .unwrap();
    assert_eq!(assignor.value, "sticky");
    assert_eq!(
        assignor.synonyms,
        [(
            "group.streams.assignors".to_string(),
            "sticky".to_string(),
            5
        )]
    );
    let set = describe(
        &BTreeMap::from([
            (
                "consumer.session.timeout.ms".to_string(),
                "50000".to_string(),
            ),
            (
                "consumer.assignor.offload.enable".to_string(),
                "false".to_string(),
            ),
        ]),
        &b,
    );
    assert_eq!(set.len(), 22);
    let s = set
        .iter()
        .find(|d| d.name == "consumer.session.timeout.ms")
        .unwrap();
    assert_eq!(
        (s.value.as_str(), s.source),
        ("50000", SOURCE_DYNAMIC_GROUP)
    );
    assert_eq!(
        s.synonyms,
        [
            (
                "consumer.session.timeout.ms".to_string(),
                "50000".to_string(),
                8
            ),
            (
                "group.consumer.session.timeout.ms".to_string(),
                "45000".to_string(),
                5
            )
        ]
    );
    let level = set
        .iter()
        .find(|d| d.name == "share.isolation.level")
        .unwrap();
    assert_eq!(
        level.synonyms,
        [(
            "share.isolation.level".to_string(),
            "read_uncommitted".to_string(),
            5
        )]
    );
}

#[test]
fn iso_durations_parse_like_javas() {
    for ok in [
        "PT1H",
        "P1D",
        "pt1h",
        "PT0S",
        "P1DT2H3M4.5S",
        "PT1.5S",
        "+PT1H",
        "P-1DT25H",
    ] {
        assert!(parse_iso_duration_nanos(ok).is_some(), "{ok}");
    }
    for bad in [
        "PT",
        "",
        "P",
        "P1W",
        " PT1H",
        "PT1H ",
        "PT1.1234567891S",
        "1H",
    ] {
        assert!(parse_iso_duration_nanos(bad).is_none(), "{bad}");
    }
    assert!(!valid_auto_offset_reset("by_duration:-PT1H"));
    assert!(!valid_auto_offset_reset("by_duration:PT-1H"));
    assert!(!valid_auto_offset_reset("BY_DURATION:PT1H"));
    assert!(valid_auto_offset_reset("by_duration:PT1H"));
}

#[test]
fn huge_values_are_refused_without_panicking() {
    let huge = "9".repeat(100_000);
    assert!(check("consumer.session.timeout.ms", &huge).is_err());
    assert!(check("streams.acceptable.recovery.lag", &huge).is_err());
    assert!(check("share.auto.offset.reset", &format!("by_duration:PT{huge}S")).is_err());
    assert!(check(&huge, "1").is_err());
}

#[test]
fn the_broker_settings_behind_group_configs_are_recognised_and_checked() {
    assert_eq!(
        check_broker_setting("group.consumer.min.session.timeout.ms", "6000"),
        Some(Ok(()))
    );
    assert_eq!(
        check_broker_setting("group.consumer.max.heartbeat.interval.ms", "soon"),
        Some(Err("Not a number of type INT".into()))
    );
    assert_eq!(
        check_broker_setting("group.share.assignor.offload.enable", "yes"),
        Some(Err("Expected value to be either true or false".into()))
    );
    assert_eq!(
        check_broker_setting("group.streams.assignors", "sticky"),
        Some(Ok(()))
    );
    assert_eq!(
        check_broker_setting("group.initial.rebalance.delay.ms", "1"),
        None
    );
}
