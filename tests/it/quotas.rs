//! Client quotas over the wire: AlterClientQuotas / DescribeClientQuotas with Kafka's checks,
//! persistence across a restart, KIP-219 throttling (throttle_time_ms, then a muted channel,
//! throttled fetches answered empty), and connection limits at accept time.

use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::*;
use kafka_protocol::records::Compression;

use crate::client::Client;
use crate::harness::*;

const ALTER_V: i16 = 1;
const DESCRIBE_V: i16 = 1;
const INVALID_REQUEST: i16 = 42;
const UNSUPPORTED_VERSION: i16 = 35;

pub(crate) fn entity(parts: &[(&str, Option<&str>)]) -> Vec<EntityData> {
    parts
        .iter()
        .map(|(t, n)| {
            EntityData::default()
                .with_entity_type(str_bytes(t))
                .with_entity_name(n.map(str_bytes))
        })
        .collect()
}

pub(crate) fn set(key: &str, value: f64) -> OpData {
    OpData::default().with_key(str_bytes(key)).with_value(value)
}

fn remove(key: &str) -> OpData {
    OpData::default().with_key(str_bytes(key)).with_remove(true)
}

pub(crate) fn entry(parts: &[(&str, Option<&str>)], ops: Vec<OpData>) -> EntryData {
    EntryData::default()
        .with_entity(entity(parts))
        .with_ops(ops)
}

pub(crate) async fn alter(
    c: &mut Client,
    entries: Vec<EntryData>,
    validate_only: bool,
) -> Vec<(i16, String)> {
    let req = AlterClientQuotasRequest::default()
        .with_entries(entries)
        .with_validate_only(validate_only);
    c.call(ALTER_V, &req)
        .await
        .entries
        .into_iter()
        .map(|e| {
            (
                e.error_code,
                e.error_message.map(|m| m.to_string()).unwrap_or_default(),
            )
        })
        .collect()
}

fn component(t: &str, match_type: i8, m: Option<&str>) -> ComponentData {
    ComponentData::default()
        .with_entity_type(str_bytes(t))
        .with_match_type(match_type)
        .with_match(m.map(str_bytes))
}

/// Entities (as "type=name" lists, default shown as `<default>`) with their values.
type Described = Vec<(Vec<String>, Vec<(String, f64)>)>;

async fn describe(c: &mut Client, components: Vec<ComponentData>, strict: bool) -> Described {
    let req = DescribeClientQuotasRequest::default()
        .with_components(components)
        .with_strict(strict);
    let resp = c.call(DESCRIBE_V, &req).await;
    assert_eq!(resp.error_code, 0, "{:?}", resp.error_message);
    let mut out: Described = resp
        .entries
        .expect("entries")
        .into_iter()
        .map(|e| {
            let entity = e
                .entity
                .iter()
                .map(|p| {
                    format!(
                        "{}={}",
                        p.entity_type.as_str(),
                        p.entity_name.as_deref().unwrap_or("<default>")
                    )
                })
                .collect();
            let mut values: Vec<(String, f64)> = e
                .values
                .iter()
                .map(|v| (v.key.to_string(), v.value))
                .collect();
            values.sort_by(|a, b| a.0.cmp(&b.0));
            (entity, values)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// An entity's "type=name" parts and its values.
type Expected<'a> = (&'a [&'a str], &'a [(&'a str, f64)]);

fn described(items: &[Expected<'_>]) -> Described {
    let mut out: Described = items
        .iter()
        .map(|(e, v)| {
            (
                e.iter().map(|s| s.to_string()).collect(),
                v.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            )
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_quotas_round_trip_and_survive_a_restart() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    let versions = c.call(3, &api_versions_request()).await;
    for key in [48, 49] {
        assert!(
            versions
                .api_keys
                .iter()
                .any(|k| k.api_key == key && k.max_version == 1),
            "ApiVersions advertises api {key}"
        );
    }
    let results = alter(
        &mut c,
        vec![
            entry(
                &[("user", Some("alice"))],
                vec![
                    set("producer_byte_rate", 1_048_576.0),
                    set("consumer_byte_rate", 2_097_152.0),
                ],
            ),
            entry(
                &[("user", Some("alice")), ("client-id", None)],
                vec![set("request_percentage", 12.5)],
            ),
            entry(
                &[("client-id", None)],
                vec![set("controller_mutation_rate", 10.0)],
            ),
            entry(
                &[("ip", Some("127.0.0.2"))],
                vec![set("connection_creation_rate", 100.0)],
            ),
        ],
        false,
    )
    .await;
    assert!(results.iter().all(|(code, _)| *code == 0), "{results:?}");
    let all = described(&[
        (
            &["user=alice"],
            &[
                ("consumer_byte_rate", 2_097_152.0),
                ("producer_byte_rate", 1_048_576.0),
            ],
        ),
        (
            &["user=alice", "client-id=<default>"],
            &[("request_percentage", 12.5)],
        ),
        (
            &["client-id=<default>"],
            &[("controller_mutation_rate", 10.0)],
        ),
        (&["ip=127.0.0.2"], &[("connection_creation_rate", 100.0)]),
    ]);
    assert_eq!(describe(&mut c, vec![], false).await, all);
    // Filters: exact user (non-strict also matches user+client-id), strict, default, specified.
    assert_eq!(
        describe(&mut c, vec![component("user", 0, Some("alice"))], false)
            .await
            .len(),
        2
    );
    assert_eq!(
        describe(&mut c, vec![component("user", 0, Some("alice"))], true).await,
        all[2..3].to_vec()
    );
    assert_eq!(
        describe(&mut c, vec![component("client-id", 1, None)], true).await,
        described(&[(
            &["client-id=<default>"],
            &[("controller_mutation_rate", 10.0)]
        )])
    );
    assert_eq!(
        describe(&mut c, vec![component("ip", 2, None)], false)
            .await
            .len(),
        1
    );
    // Removing one key keeps the other; validate_only changes nothing.
    let r = alter(
        &mut c,
        vec![entry(
            &[("user", Some("alice"))],
            vec![remove("consumer_byte_rate")],
        )],
        false,
    )
    .await;
    assert_eq!(r[0].0, 0);
    let r = alter(
        &mut c,
        vec![entry(
            &[("user", Some("bob"))],
            vec![set("producer_byte_rate", 5.0)],
        )],
        true,
    )
    .await;
    assert_eq!(r[0].0, 0, "validate_only accepts a valid alteration");
    let b = b.restart().await;
    let mut c = b.client().await;
    let after = describe(&mut c, vec![component("user", 2, None)], false).await;
    assert_eq!(
        after,
        described(&[
            (&["user=alice"], &[("producer_byte_rate", 1_048_576.0)]),
            (
                &["user=alice", "client-id=<default>"],
                &[("request_percentage", 12.5)]
            ),
        ]),
        "bob was only validated; alice's quotas survived the restart"
    );
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_alterations_and_filters_get_kafkas_error_codes() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    let cases: Vec<(EntryData, &str)> = vec![
        (
            entry(&[], vec![set("producer_byte_rate", 1.0)]),
            "Invalid empty client quota entity",
        ),
        (
            entry(&[("group", Some("g"))], vec![set("producer_byte_rate", 1.0)]),
            "Unhandled client quota entity type: group",
        ),
        (
            entry(&[("user", Some("a"))], vec![set("not_a_quota", 1.0)]),
            "Invalid configuration key not_a_quota",
        ),
        (
            entry(
                &[("user", Some("b"))],
                vec![set("connection_creation_rate", 1.0)],
            ),
            "Invalid configuration key connection_creation_rate",
        ),
        (
            entry(
                &[("ip", Some("10.0.0.1")), ("client-id", Some("c"))],
                vec![set("connection_creation_rate", 1.0)],
            ),
            "Invalid quota entity combination, IP entity should not be combined with User or ClientId",
        ),
        (
            entry(&[("client-id", Some("c"))], vec![set("producer_byte_rate", -5.0)]),
            "Quota producer_byte_rate must be greater than 0",
        ),
        (
            entry(&[("client-id", Some("d"))], vec![set("consumer_byte_rate", 0.5)]),
            "consumer_byte_rate cannot be a fractional value.",
        ),
        (
            entry(&[("user", Some(""))], vec![set("producer_byte_rate", 1.0)]),
            "Empty user not supported",
        ),
    ];
    let (entries, messages): (Vec<_>, Vec<_>) = cases.into_iter().unzip();
    // One good entry among the bad ones is applied; each bad one gets its own error.
    let mut all = entries;
    all.push(entry(
        &[("client-id", Some("good"))],
        vec![set("producer_byte_rate", 1000.0)],
    ));
    let results = alter(&mut c, all, false).await;
    for (i, message) in messages.iter().enumerate() {
        assert_eq!(
            results[i],
            (INVALID_REQUEST, message.to_string()),
            "case {i}"
        );
    }
    assert_eq!(results.last().unwrap().0, 0);
    // The same entity twice in one request: the repeat is refused.
    let twice = alter(
        &mut c,
        vec![
            entry(&[("user", Some("x"))], vec![set("producer_byte_rate", 1.0)]),
            entry(&[("user", Some("x"))], vec![set("producer_byte_rate", 2.0)]),
        ],
        false,
    )
    .await;
    assert_eq!(twice[0].0, 0);
    assert_eq!(twice[1].0, INVALID_REQUEST);
    assert!(
        twice[1].1.starts_with("Ignoring duplicate entity"),
        "{twice:?}"
    );
    assert_eq!(
        describe(&mut c, vec![], false).await,
        described(&[
            (&["client-id=good"], &[("producer_byte_rate", 1000.0)]),
            (&["user=x"], &[("producer_byte_rate", 1.0)]),
        ])
    );
    // Describe filter errors are top-level, without entries.
    for (components, code) in [
        (vec![component("group", 2, None)], UNSUPPORTED_VERSION),
        (vec![component("user", 0, None)], INVALID_REQUEST),
        (vec![component("user", 1, Some("x"))], INVALID_REQUEST),
        (
            vec![component("user", 2, None), component("user", 2, None)],
            INVALID_REQUEST,
        ),
        (
            vec![component("ip", 2, None), component("user", 2, None)],
            INVALID_REQUEST,
        ),
    ] {
        let req = DescribeClientQuotasRequest::default().with_components(components);
        let resp = c.call(DESCRIBE_V, &req).await;
        assert_eq!(resp.error_code, code, "{:?}", resp.error_message);
        assert!(resp.error_message.is_some());
        assert!(resp.entries.is_none());
    }
    b.shutdown().await;
}

/// One record of `size` bytes.
fn big_batch(size: usize) -> Bytes {
    let value = vec![b'x'; size];
    batch_with(&[&value], &[now_ms()], Compression::None, None)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_over_its_byte_quotas_is_throttled_and_muted() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "quota-bytes", 1).await;
    // The test client's id is "strata-it": 20 KB/s each way.
    let r = alter(
        &mut c,
        vec![entry(
            &[("client-id", Some("strata-it"))],
            vec![
                set("producer_byte_rate", 20_000.0),
                set("consumer_byte_rate", 20_000.0),
            ],
        )],
        false,
    )
    .await;
    assert_eq!(r[0].0, 0);
    // 215 KB in one request is ~21.5 KB/s over the 10 s minimum window: ~750 ms throttle.
    let resp = c
        .call(
            PRODUCE_V,
            &produce_request("quota-bytes", 0, big_batch(215_000), -1),
        )
        .await;
    assert_eq!(resp.responses[0].partition_responses[0].error_code, 0);
    let throttle = resp.throttle_time_ms;
    assert!(
        (300..=2000).contains(&throttle),
        "throttle_time_ms {throttle}"
    );
    // The channel is muted: the next request is read only after the throttle time.
    let sent = Instant::now();
    c.call(12, &MetadataRequest::default()).await;
    let waited = sent.elapsed();
    assert!(
        waited >= Duration::from_millis(throttle as u64 - 50),
        "answered after {waited:?}, throttle {throttle} ms"
    );
    // A fetch of the same 215 KB is over the consumer quota: answered at once, empty, with
    // the throttle time; the bytes are not counted, so the next fetch gets them.
    let resp: FetchResponse = c
        .call(
            FETCH_V,
            &fetch_request("quota-bytes", 0, &FetchArgs::default()),
        )
        .await;
    assert!(resp.throttle_time_ms > 0, "fetch throttle_time_ms");
    assert!(
        resp.responses.is_empty(),
        "a throttled fetch returns no data"
    );
    // With more bytes allowed, the fetch goes through.
    alter(
        &mut c,
        vec![entry(
            &[("client-id", Some("strata-it"))],
            vec![set("consumer_byte_rate", 10_000_000.0)],
        )],
        false,
    )
    .await;
    let p = fetch(&mut c, "quota-bytes", 0, FetchArgs::default()).await;
    assert_eq!(count_records(&p.records), 1);
    // The metrics show the throttled client.
    let (_, metrics) = crate::http::http_get(b.admin_addr, "/metrics").await;
    let line = metrics
        .lines()
        .find(|l| {
            l.starts_with("strata_client_quota_throttled_total{type=\"Produce\",user=\"\",client_id=\"strata-it\"}")
        })
        .unwrap_or_else(|| panic!("no produce throttle metric in\n{metrics}"));
    assert!(line.ends_with(" 1"), "{line}");
    assert!(metrics.contains("strata_client_quota_byte_rate{type=\"Produce\""));
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_beyond_max_connections_per_ip_is_closed() {
    let b = TestBroker::start_with(&[("max.connections.per.ip", "2")]).await;
    let mut first = b.client().await;
    let mut second = b.client().await;
    assert_eq!(first.call(3, &api_versions_request()).await.error_code, 0);
    assert_eq!(second.call(3, &api_versions_request()).await.error_code, 0);
    let mut third = b.client().await;
    assert!(
        third.is_closed_by_peer(Duration::from_secs(5)).await,
        "the third connection from 127.0.0.1 is refused"
    );
    // Closing one frees a slot.
    drop(first);
    let mut admitted = None;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        if b.broker()
            .quotas
            .connections
            .count("127.0.0.1".parse().unwrap())
            < 2
        {
            admitted = Some(b.client().await);
            break;
        }
    }
    let mut fourth = admitted.expect("the slot is freed");
    assert_eq!(fourth.call(3, &api_versions_request()).await.error_code, 0);
    assert_eq!(second.call(3, &api_versions_request()).await.error_code, 0);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ip_over_its_connection_creation_rate_is_closed_after_the_throttle_time() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    let r = alter(
        &mut c,
        vec![entry(
            &[("ip", Some("127.0.0.1"))],
            vec![set("connection_creation_rate", 1.0)],
        )],
        false,
    )
    .await;
    assert_eq!(r[0].0, 0);
    // 1 connection/s over the 10 s window: 10 connections are fine, the 11th is over.
    let mut open = Vec::new();
    for _ in 0..10 {
        let mut c = b.client().await;
        assert_eq!(c.call(3, &api_versions_request()).await.error_code, 0);
        open.push(c);
    }
    let mut over = b.client().await;
    let started = Instant::now();
    assert!(over.is_closed_by_peer(Duration::from_secs(5)).await);
    let after = started.elapsed();
    assert!(
        after >= Duration::from_millis(300),
        "closed after the throttle time, not at once ({after:?})"
    );
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_over_its_request_percentage_is_throttled_for_at_most_one_window() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    // 0.01 % of one thread: a few dozen requests are over it.
    let r = alter(
        &mut c,
        vec![entry(
            &[
                ("user", Some("ANONYMOUS")),
                ("client-id", Some("strata-it")),
            ],
            vec![set("request_percentage", 0.01)],
        )],
        false,
    )
    .await;
    assert_eq!(r[0].0, 0);
    let mut throttle = 0;
    for _ in 0..2000 {
        let resp = c.call(12, &MetadataRequest::default()).await;
        if resp.throttle_time_ms > 0 {
            throttle = resp.throttle_time_ms;
            break;
        }
    }
    assert!(
        (1..=1000).contains(&throttle),
        "Metadata was throttled, at most one quota window: {throttle}"
    );
    let (_, metrics) = crate::http::http_get(b.admin_addr, "/metrics").await;
    assert!(
        metrics.contains(
            "strata_client_quota_request_time_percent{type=\"Request\",user=\"ANONYMOUS\",client_id=\"strata-it\"}"
        ),
        "{metrics}"
    );
    b.shutdown().await;
}
