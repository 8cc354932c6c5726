//! Framing, ApiVersions negotiation, pipelining and bad-input handling over raw TCP.

use std::time::Duration;

use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, DescribeClusterRequest, MetadataRequest, ResponseHeader,
};
use kafka_protocol::protocol::Decodable;

use crate::client::{encode_frame, patch_version, raw_frame, Client};
use crate::harness::*;

fn api_range(resp: &ApiVersionsResponse, key: ApiKey) -> Option<(i16, i16)> {
    resp.api_keys
        .iter()
        .find(|k| k.api_key == key as i16)
        .map(|k| (k.min_version, k.max_version))
}

fn assert_core_apis_listed(resp: &ApiVersionsResponse) {
    assert_eq!(resp.error_code, 0);
    let produce = api_range(resp, ApiKey::Produce).expect("Produce listed");
    let fetch = api_range(resp, ApiKey::Fetch).expect("Fetch listed");
    let metadata = api_range(resp, ApiKey::Metadata).expect("Metadata listed");
    let api_versions = api_range(resp, ApiKey::ApiVersions).expect("ApiVersions listed");
    assert!(produce.0 <= 3 && produce.1 >= 9, "Produce {produce:?}");
    assert!(fetch.0 <= 4 && fetch.1 >= 13, "Fetch {fetch:?}");
    assert!(metadata.0 <= 1 && metadata.1 >= 12, "Metadata {metadata:?}");
    assert_eq!(api_versions, (0, 5));
}

/// Ping: a Metadata request that must succeed on a connection.
async fn assert_usable(c: &mut Client) {
    let resp = c.call(12, &MetadataRequest::default()).await;
    assert_eq!(resp.brokers.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_versions_v0_v3_v4_v5_list_produce_fetch_metadata_ranges() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    for v in [0i16, 1, 2, 3, 4, 5] {
        let resp = c.call(v, &api_versions_request()).await;
        assert_core_apis_listed(&resp);
    }
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_versions_at_unsupported_version_gets_v0_error_reply_and_connection_stays_usable() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    // What a newer client sends first: its newest ApiVersions (flexible header and body).
    let mut frame = encode_frame(3, 77, &api_versions_request());
    patch_version(&mut frame, 127);
    c.write_raw(&frame).await.unwrap();
    let mut reply = c.read_frame().await.expect("a reply, not a close");
    let header = ResponseHeader::decode(&mut reply, 0).unwrap();
    assert_eq!(header.correlation_id, 77);
    let body = ApiVersionsResponse::decode(&mut reply, 0).expect("v0 body");
    assert_eq!(body.error_code, 35, "UNSUPPORTED_VERSION");
    assert!(api_range(&body, ApiKey::Produce).is_some());
    assert!(api_range(&body, ApiKey::Fetch).is_some());
    assert_eq!(api_range(&body, ApiKey::ApiVersions), Some((0, 5)));
    // The client retries at a version the broker listed, on the same connection.
    let resp = c.call(3, &api_versions_request()).await;
    assert_core_apis_listed(&resp);
    assert_usable(&mut c).await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_of_mixed_apis_are_answered_in_order() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "pipe", 1).await;
    produce(&mut c, "pipe", 0, batch(3)).await;

    // Encode all 20 requests into one buffer and write it in one go.
    let mut wire = Vec::new();
    let mut sent: Vec<(i32, ApiKey, i16)> = Vec::new();
    for i in 0..20 {
        let id = 1000 + i;
        let (api, v, frame) = match i % 5 {
            0 => (
                ApiKey::ApiVersions,
                3,
                encode_frame(3, id, &api_versions_request()),
            ),
            1 => (
                ApiKey::Metadata,
                12,
                encode_frame(12, id, &MetadataRequest::default()),
            ),
            2 => (
                ApiKey::Fetch,
                FETCH_V,
                encode_frame(
                    FETCH_V,
                    id,
                    &fetch_request("pipe", 0, &FetchArgs::default()),
                ),
            ),
            3 => (
                ApiKey::Produce,
                PRODUCE_V,
                encode_frame(PRODUCE_V, id, &produce_request("pipe", 0, batch(1), -1)),
            ),
            _ => (
                ApiKey::DescribeCluster,
                0,
                encode_frame(0, id, &DescribeClusterRequest::default()),
            ),
        };
        wire.extend_from_slice(&frame);
        sent.push((id, api, v));
    }
    c.write_raw(&wire).await.unwrap();
    let mut produced_offsets = Vec::new();
    for (id, api, v) in sent {
        let mut frame = c.read_frame().await.expect("response");
        let header = ResponseHeader::decode(&mut frame, api.response_header_version(v)).unwrap();
        assert_eq!(header.correlation_id, id, "responses out of order");
        let body = kafka_protocol::messages::ResponseKind::decode(api, &mut frame, v)
            .unwrap_or_else(|e| panic!("decode {api:?}: {e:#}"));
        if let kafka_protocol::messages::ResponseKind::Produce(p) = body {
            let pr = &p.responses[0].partition_responses[0];
            assert_eq!(pr.error_code, 0);
            produced_offsets.push(pr.base_offset);
        }
    }
    assert_eq!(
        produced_offsets,
        vec![3, 4, 5, 6],
        "pipelined produces append in order"
    );
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_frame_closes_only_that_connection() {
    let b = TestBroker::start_with(&[("socket.request.max.bytes", "1024")]).await;
    let mut bystander = b.client().await;
    assert_usable(&mut bystander).await;

    let mut bad = b.client().await;
    let mut frame = Vec::new();
    frame.extend_from_slice(&2000i32.to_be_bytes());
    frame.extend_from_slice(&[0u8; 64]);
    bad.write_raw(&frame).await.unwrap();
    assert!(
        bad.is_closed_by_peer(Duration::from_secs(5)).await,
        "oversized frame must close"
    );

    // The connection opened before keeps working, and new ones are accepted.
    assert_usable(&mut bystander).await;
    let mut fresh = b.client().await;
    assert_usable(&mut fresh).await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_frame_closes_only_that_connection() {
    let b = TestBroker::start().await;
    let mut bystander = b.client().await;
    assert_usable(&mut bystander).await;

    // Pseudo-random bytes with a valid size (xorshift, fixed seed), with an api key no
    // Kafka version defines.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut body: Vec<u8> = (0..200)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    body[0] = 0x7f;
    let mut frame = (body.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    let mut bad = b.client().await;
    bad.write_raw(&frame).await.unwrap();
    assert!(
        bad.is_closed_by_peer(Duration::from_secs(5)).await,
        "garbage must close"
    );

    // A known api and version with an undecodable body: also closed.
    let mut bad2 = b.client().await;
    let mut tail = vec![0u8, 9]; // client id length 9
    tail.extend_from_slice(b"strata-it");
    tail.extend_from_slice(&body[..50]);
    bad2.write_raw(&raw_frame(ApiKey::Produce as i16, 7, 5, &tail))
        .await
        .unwrap();
    assert!(
        bad2.is_closed_by_peer(Duration::from_secs(5)).await,
        "malformed produce must close"
    );

    assert_usable(&mut bystander).await;
    assert_usable(&mut b.client().await).await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negative_frame_size_closes_the_connection_and_broker_keeps_serving() {
    let b = TestBroker::start().await;
    let mut bad = b.client().await;
    bad.write_raw(&(-5i32).to_be_bytes()).await.unwrap();
    assert!(bad.is_closed_by_peer(Duration::from_secs(5)).await);
    let mut tiny = b.client().await;
    tiny.write_raw(&3i32.to_be_bytes()).await.unwrap();
    tiny.write_raw(&[0, 18, 0]).await.unwrap();
    assert!(
        tiny.is_closed_by_peer(Duration::from_secs(5)).await,
        "a frame shorter than a header"
    );
    assert_usable(&mut b.client().await).await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsupported_version_of_produce_closes_the_connection() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "old", 1).await;
    // Produce v1 has the same header (v1) as v3; only the version number differs.
    let mut frame = encode_frame(3, 9, &produce_request("old", 0, batch(1), -1));
    patch_version(&mut frame, 1);
    c.write_raw(&frame).await.unwrap();
    assert!(
        c.is_closed_by_peer(Duration::from_secs(5)).await,
        "Produce v1 must close"
    );
    // Nothing was appended.
    let mut c2 = b.client().await;
    assert_eq!(list_offset(&mut c2, "old", 0, -1).await.offset, 0);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_api_key_closes_the_connection() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    // JoinGroup (11) is a real Kafka API this broker does not serve.
    c.write_raw(&raw_frame(11, 5, 1, &[0, 0])).await.unwrap();
    assert!(c.is_closed_by_peer(Duration::from_secs(5)).await);
    assert_usable(&mut b.client().await).await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed_after_connections_max_idle_ms() {
    let b = TestBroker::start_with(&[("connections.max.idle.ms", "300")]).await;
    let mut c = b.client().await;
    assert_usable(&mut c).await;
    assert!(
        c.is_closed_by_peer(Duration::from_secs(3)).await,
        "idle connection kept open"
    );
    assert_usable(&mut b.client().await).await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_is_not_closed_without_a_reason() {
    // Control for the close assertions above: a healthy connection reads no EOF.
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    assert_usable(&mut c).await;
    assert!(!c.is_closed_by_peer(Duration::from_millis(300)).await);
    assert_usable(&mut c).await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_is_prompt_while_a_long_poll_fetch_is_parked() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "parked", 1).await;
    let req = fetch_request(
        "parked",
        0,
        &FetchArgs {
            max_wait_ms: 30_000,
            min_bytes: 1,
            ..FetchArgs::default()
        },
    );
    c.send(FETCH_V, &req).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let took = b.timed_shutdown().await;
    assert!(
        took < Duration::from_secs(5),
        "shutdown waited {took:?} for a parked fetch"
    );
}
