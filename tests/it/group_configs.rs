//! GROUP config resources (type 32): DescribeConfigs, IncrementalAlterConfigs and
//! AlterConfigs, their durability (restart, metadata quorum) and the KIP-848 heartbeat
//! interval that follows them.

use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_configs_response::DescribeConfigsResult;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{
    alter_configs_request, AlterConfigsRequest, ConsumerGroupHeartbeatRequest,
    DescribeConfigsRequest, IncrementalAlterConfigsRequest,
};

use crate::client::Client;
use crate::cluster::{eventually, QuorumCluster};
use crate::groups::group_id;
use crate::harness::*;

const GROUP: i8 = 32;
const SET: i8 = 0;
const DELETE: i8 = 1;
const APPEND: i8 = 2;
const DYNAMIC_GROUP_CONFIG: i8 = 8;
const STATIC_BROKER_CONFIG: i8 = 4;
const DEFAULT_CONFIG: i8 = 5;

/// Lower broker bounds so a test can use short intervals, as an operator may.
const SETTINGS: [(&str, &str); 2] = [
    ("group.consumer.min.heartbeat.interval.ms", "1000"),
    ("group.consumer.heartbeat.interval.ms", "2000"),
];

async fn describe(c: &mut Client, group: &str) -> DescribeConfigsResult {
    let mut r = DescribeConfigsResource::default();
    r.resource_type = GROUP;
    r.resource_name = str_bytes(group);
    r.configuration_keys = None;
    let mut req = DescribeConfigsRequest::default();
    req.resources = vec![r];
    req.include_synonyms = true;
    req.include_documentation = true;
    let resp = c.call(4, &req).await;
    resp.results.into_iter().next().expect("one result")
}

fn value_of(res: &DescribeConfigsResult, key: &str) -> (String, i8) {
    let e = res
        .configs
        .iter()
        .find(|e| e.name.as_str() == key)
        .unwrap_or_else(|| panic!("{key} not described"));
    (
        e.value.as_ref().map(|v| v.to_string()).unwrap_or_default(),
        e.config_source,
    )
}

async fn alter(
    c: &mut Client,
    group: &str,
    ops: &[(&str, i8, Option<&str>)],
    validate_only: bool,
) -> (i16, Option<String>) {
    let mut r = AlterConfigsResource::default();
    r.resource_type = GROUP;
    r.resource_name = str_bytes(group);
    r.configs = ops
        .iter()
        .map(|(k, op, v)| {
            let mut a = AlterableConfig::default();
            a.name = str_bytes(k);
            a.config_operation = *op;
            a.value = v.map(str_bytes);
            a
        })
        .collect();
    let mut req = IncrementalAlterConfigsRequest::default();
    req.resources = vec![r];
    req.validate_only = validate_only;
    let resp = c.call(1, &req).await;
    let r = &resp.responses[0];
    (
        r.error_code,
        r.error_message.as_ref().map(|m| m.to_string()),
    )
}

/// A new member's first ConsumerGroupHeartbeat: (error code, heartbeat interval).
async fn join(c: &mut Client, group: &str) -> (i16, i32) {
    let mut hb = ConsumerGroupHeartbeatRequest::default();
    hb.group_id = group_id(group);
    hb.member_id = str_bytes(&uuid::Uuid::new_v4().to_string());
    hb.member_epoch = 0;
    hb.rebalance_timeout_ms = 30_000;
    hb.subscribed_topic_names = Some(vec![name("group-configs")]);
    hb.topic_partitions = Some(vec![]);
    let r = c.call(0, &hb).await;
    (r.error_code, r.heartbeat_interval_ms)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_configs_validate_persist_and_drive_the_heartbeat_interval() {
    let b = TestBroker::start_with(&SETTINGS).await;
    let mut c = b.client().await;

    // A group that does not exist yet describes the broker's values.
    let d = describe(&mut c, "gc").await;
    assert_eq!(d.error_code, 0);
    assert_eq!(d.configs.len(), 21);
    assert_eq!(
        value_of(&d, "consumer.heartbeat.interval.ms"),
        ("2000".into(), STATIC_BROKER_CONFIG)
    );
    assert_eq!(
        value_of(&d, "consumer.session.timeout.ms"),
        ("45000".into(), DEFAULT_CONFIG)
    );
    assert_eq!(join(&mut c, "gc").await, (0, 2000));

    // Refusals carry Kafka's codes and messages; nothing is stored.
    let refusals = [
        (
            vec![("consumer.heartbeat.interval.ms", SET, Some("500"))],
            40,
            "consumer.heartbeat.interval.ms must be in the range 1000 to 15000 inclusive.",
        ),
        (
            vec![("no.such.config", SET, Some("1"))],
            40,
            "Unknown group config name: no.such.config",
        ),
        (
            vec![("consumer.session.timeout.ms", SET, Some("soon"))],
            40,
            "Invalid value soon for configuration consumer.session.timeout.ms: Not a number of type INT",
        ),
        (
            vec![("consumer.session.timeout.ms", SET, None)],
            42,
            "Null value not supported for : consumer.session.timeout.ms",
        ),
        (
            vec![("streams.rack.aware.assignment.tags", APPEND, Some("a"))],
            40,
            "Can't APPEND to key streams.rack.aware.assignment.tags because its type is not LIST.",
        ),
        (
            vec![
                ("consumer.session.timeout.ms", SET, Some("46000")),
                ("consumer.session.timeout.ms", SET, Some("47000")),
            ],
            42,
            "Error due to duplicate config keys",
        ),
    ];
    for (ops, code, msg) in refusals {
        assert_eq!(
            alter(&mut c, "gc", &ops, false).await,
            (code, Some(msg.to_string())),
            "{ops:?}"
        );
    }
    assert_eq!(
        alter(
            &mut c,
            "",
            &[("consumer.session.timeout.ms", SET, Some("50000"))],
            false
        )
        .await,
        (42, Some("Default group resources are not allowed.".into()))
    );
    let empty = describe(&mut c, "").await;
    assert_eq!(
        (empty.error_code, empty.error_message.map(|m| m.to_string())),
        (42, Some("Group name must not be empty".into()))
    );

    // validate_only checks without storing.
    let ops = [("consumer.heartbeat.interval.ms", SET, Some("1500"))];
    assert_eq!(alter(&mut c, "gc", &ops, true).await, (0, None));
    assert_eq!(join(&mut c, "gc").await, (0, 2000));
    assert_eq!(alter(&mut c, "gc", &ops, false).await, (0, None));
    assert_eq!(join(&mut c, "gc").await, (0, 1500));
    let d = describe(&mut c, "gc").await;
    assert_eq!(
        value_of(&d, "consumer.heartbeat.interval.ms"),
        ("1500".into(), DYNAMIC_GROUP_CONFIG)
    );
    let e = d
        .configs
        .iter()
        .find(|e| e.name.as_str() == "consumer.heartbeat.interval.ms")
        .unwrap();
    let synonyms: Vec<_> = e
        .synonyms
        .iter()
        .map(|s| (s.name.to_string(), s.source))
        .collect();
    assert_eq!(
        synonyms,
        [
            (
                "consumer.heartbeat.interval.ms".to_string(),
                DYNAMIC_GROUP_CONFIG
            ),
            (
                "group.consumer.heartbeat.interval.ms".to_string(),
                STATIC_BROKER_CONFIG
            ),
            (
                "group.consumer.heartbeat.interval.ms".to_string(),
                DEFAULT_CONFIG
            )
        ]
    );
    assert!(e.documentation.is_some());

    // The legacy AlterConfigs replaces the whole set.
    let mut r = alter_configs_request::AlterConfigsResource::default();
    r.resource_type = GROUP;
    r.resource_name = str_bytes("legacy");
    let mut entry = alter_configs_request::AlterableConfig::default();
    entry.name = str_bytes("share.delivery.count.limit");
    entry.value = Some(str_bytes("7"));
    r.configs = vec![entry];
    let mut req = AlterConfigsRequest::default();
    req.resources = vec![r];
    let resp = c.call(2, &req).await;
    assert_eq!(resp.responses[0].error_code, 0);

    // Durable: a restart keeps them.
    drop(c);
    let b = b.restart().await;
    let mut c = b.client().await;
    assert_eq!(join(&mut c, "gc").await, (0, 1500));
    assert_eq!(
        value_of(
            &describe(&mut c, "legacy").await,
            "share.delivery.count.limit"
        ),
        ("7".into(), DYNAMIC_GROUP_CONFIG)
    );
    // DELETE falls back to the broker's value.
    let ops = [("consumer.heartbeat.interval.ms", DELETE, None)];
    assert_eq!(alter(&mut c, "gc", &ops, false).await, (0, None));
    assert_eq!(join(&mut c, "gc").await, (0, 2000));
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_configs_go_through_the_metadata_quorum_to_every_broker() {
    let c = QuorumCluster::start_with(&SETTINGS).await;
    let mut one = c.broker(1).client().await;
    let ops = [("consumer.heartbeat.interval.ms", SET, Some("3000"))];
    assert_eq!(alter(&mut one, "shared", &ops, false).await, (0, None));
    for id in 1..=3 {
        let broker = c.broker(id).broker().clone();
        eventually("the group config reaches every broker", || {
            let broker = broker.clone();
            async move {
                broker
                    .group_configs("shared")
                    .get("consumer.heartbeat.interval.ms")
                    .map(String::as_str)
                    == Some("3000")
            }
        })
        .await;
    }
    let mut three = c.broker(3).client().await;
    assert_eq!(
        value_of(
            &describe(&mut three, "shared").await,
            "consumer.heartbeat.interval.ms"
        ),
        ("3000".into(), DYNAMIC_GROUP_CONFIG)
    );
    c.shutdown().await;
}
