//! CreateTopics validation, DescribeConfigs and IncrementalAlterConfigs.

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_configs_response::DescribeConfigsResourceResult;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{DescribeConfigsRequest, IncrementalAlterConfigsRequest};

use crate::client::Client;
use crate::harness::*;

const TOPIC_RESOURCE: i8 = 2;
const SOURCE_DYNAMIC_TOPIC: i8 = 1;
const SOURCE_DEFAULT: i8 = 5;

async fn describe_topic(c: &mut Client, topic: &str) -> Vec<DescribeConfigsResourceResult> {
    let mut r = DescribeConfigsResource::default();
    r.resource_type = TOPIC_RESOURCE;
    r.resource_name = str_bytes(topic);
    r.configuration_keys = None;
    let mut req = DescribeConfigsRequest::default();
    req.resources = vec![r];
    let resp = c.call(4, &req).await;
    assert_eq!(resp.results.len(), 1);
    let res = resp.results.into_iter().next().unwrap();
    assert_eq!(res.error_code, 0, "{:?}", res.error_message);
    res.configs
}

fn entry<'a>(
    configs: &'a [DescribeConfigsResourceResult],
    key: &str,
) -> &'a DescribeConfigsResourceResult {
    configs
        .iter()
        .find(|c| c.name.as_str() == key)
        .unwrap_or_else(|| panic!("{key} not described"))
}

fn value(e: &DescribeConfigsResourceResult) -> &str {
    e.value.as_ref().map(|v| v.as_str()).unwrap_or("<null>")
}

async fn alter(c: &mut Client, topic: &str, ops: &[(&str, i8, Option<&str>)]) -> i16 {
    let mut r = AlterConfigsResource::default();
    r.resource_type = TOPIC_RESOURCE;
    r.resource_name = str_bytes(topic);
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
    let resp = c.call(1, &req).await;
    assert_eq!(resp.responses.len(), 1);
    resp.responses[0].error_code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_topics_errors_use_kafka_codes() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "exists", 1).await;
    let dup = create_topic_with(&mut c, "exists", 1, &[]).await;
    assert_eq!(dup.error_code, 36, "TOPIC_ALREADY_EXISTS");

    let mut rf3 = CreatableTopic::default();
    rf3.name = name("rf3");
    rf3.num_partitions = 1;
    rf3.replication_factor = 3;
    let mut zero = CreatableTopic::default();
    zero.name = name("zero-partitions");
    zero.num_partitions = 0;
    zero.replication_factor = 1;
    let mut bad_name = CreatableTopic::default();
    bad_name.name = name("bad name!");
    bad_name.num_partitions = 1;
    bad_name.replication_factor = 1;
    let results = create_topics(&mut c, vec![rf3, zero, bad_name]).await;
    let code = |n: &str| {
        results
            .iter()
            .find(|r| r.name.0.as_str() == n)
            .unwrap()
            .error_code
    };
    assert_eq!(code("rf3"), 38, "INVALID_REPLICATION_FACTOR");
    assert_eq!(code("zero-partitions"), 37, "INVALID_PARTITIONS");
    assert_eq!(code("bad name!"), 17, "INVALID_TOPIC_EXCEPTION");

    let bad_value =
        create_topic_with(&mut c, "bad-config", 1, &[("cleanup.policy", "forever")]).await;
    assert_eq!(bad_value.error_code, 40, "INVALID_CONFIG for a bad value");
    let unknown_key = create_topic_with(&mut c, "bad-config", 1, &[("retention.mss", "1")]).await;
    assert_eq!(
        unknown_key.error_code, 40,
        "INVALID_CONFIG for an unknown key"
    );

    // None of the failed topics exist.
    for t in ["rf3", "zero-partitions", "bad-config"] {
        let r = produce(&mut c, t, 0, batch(1)).await;
        assert_eq!(r.error_code, 3, "{t} must not have been created");
    }
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_configs_shows_a_topic_override_as_dynamic_topic_config() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    let r = create_topic_with(&mut c, "configured", 1, &[("retention.ms", "12345")]).await;
    assert_eq!(r.error_code, 0);
    let configs = describe_topic(&mut c, "configured").await;
    let retention = entry(&configs, "retention.ms");
    assert_eq!(value(retention), "12345");
    assert_eq!(retention.config_source, SOURCE_DYNAMIC_TOPIC);
    let segment = entry(&configs, "segment.bytes");
    assert_eq!(value(segment), "1073741824");
    assert_eq!(segment.config_source, SOURCE_DEFAULT);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incremental_alter_configs_set_then_delete_round_trips() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "altered", 1).await;
    assert_eq!(
        alter(
            &mut c,
            "altered",
            &[
                ("retention.ms", 0, Some("999")),
                ("max.message.bytes", 0, Some("2048"))
            ]
        )
        .await,
        0
    );
    let configs = describe_topic(&mut c, "altered").await;
    assert_eq!(value(entry(&configs, "retention.ms")), "999");
    assert_eq!(
        entry(&configs, "retention.ms").config_source,
        SOURCE_DYNAMIC_TOPIC
    );
    assert_eq!(value(entry(&configs, "max.message.bytes")), "2048");
    // The new limit is enforced on produce.
    let big = vec![b'z'; 4000];
    let r = produce(
        &mut c,
        "altered",
        0,
        batch_with(
            &[&big],
            &[now_ms()],
            kafka_protocol::records::Compression::None,
            None,
        ),
    )
    .await;
    assert_eq!(r.error_code, 10);

    assert_eq!(
        alter(&mut c, "altered", &[("retention.ms", 1, None)]).await,
        0
    );
    let configs = describe_topic(&mut c, "altered").await;
    assert_eq!(value(entry(&configs, "retention.ms")), "604800000");
    assert_eq!(
        entry(&configs, "retention.ms").config_source,
        SOURCE_DEFAULT
    );
    assert_eq!(
        value(entry(&configs, "max.message.bytes")),
        "2048",
        "untouched key kept"
    );

    // Bad values and unknown keys are refused without changing anything.
    assert_eq!(
        alter(&mut c, "altered", &[("retention.ms", 0, Some("soon"))]).await,
        40
    );
    assert_eq!(
        alter(&mut c, "altered", &[("no.such.key", 0, Some("1"))]).await,
        40
    );
    assert_eq!(
        alter(&mut c, "missing-topic", &[("retention.ms", 0, Some("1"))]).await,
        3
    );
    let configs = describe_topic(&mut c, "altered").await;
    assert_eq!(value(entry(&configs, "retention.ms")), "604800000");

    // Overrides survive a restart.
    drop(c);
    let b = b.restart().await;
    let mut c = b.client().await;
    let configs = describe_topic(&mut c, "altered").await;
    assert_eq!(value(entry(&configs, "max.message.bytes")), "2048");
    assert_eq!(
        entry(&configs, "max.message.bytes").config_source,
        SOURCE_DYNAMIC_TOPIC
    );
    b.shutdown().await;
}
