//! Requests whose counts, lengths or varints claim more than the frame carries: the broker
//! refuses them before allocating (Kafka's generated readers do the same), closes only that
//! connection, as Kafka does for an unparseable request, and keeps serving everyone else,
//! on plaintext and on SASL listeners before authentication.

use std::time::Duration;

use bytes::BufMut;
use kafka_protocol::messages::MetadataRequest;

use crate::client::{raw_frame, Client};
use crate::harness::*;

/// A count of 2^31-1 in a non-flexible (INT32) array.
const HUGE_INT32: [u8; 4] = [0x7f, 0xff, 0xff, 0xff];
/// 2^31 as an unsigned varint: a compact array of 2^31-1 elements.
const HUGE_VARINT: [u8; 5] = [0xff, 0xff, 0xff, 0xff, 0x07];
/// A varint with a continuation bit on its fifth byte (Kafka refuses varints over 5 bytes).
const OVERLONG_VARINT: [u8; 6] = [0xff, 0xff, 0xff, 0xff, 0xff, 0x01];

/// The request header's client id (null) after api key, version and correlation id.
fn header_v1(body: &mut Vec<u8>) {
    body.put_i16(-1);
}

/// Header v2: client id (null) and an empty tagged-field section.
fn header_v2(body: &mut Vec<u8>) {
    body.put_i16(-1);
    body.put_u8(0);
}

/// One hostile frame per shape the outside tester found, and a few more.
fn hostile_frames() -> Vec<(&'static str, bytes::BytesMut)> {
    let mut frames = Vec::new();

    // Metadata v1: topics array of 2^31-1 entries (17 bytes after the size prefix).
    let mut b = Vec::new();
    header_v1(&mut b);
    b.extend_from_slice(&HUGE_INT32);
    frames.push(("metadata v1 topics 2^31-1", raw_frame(3, 1, 1, &b)));

    // Metadata v12 (flexible): compact topics array of 2^31-1, and an over-long varint.
    let mut b = Vec::new();
    header_v2(&mut b);
    b.extend_from_slice(&HUGE_VARINT);
    frames.push((
        "metadata v12 compact topics 2^31-1",
        raw_frame(3, 12, 2, &b),
    ));
    let mut b = Vec::new();
    header_v2(&mut b);
    b.extend_from_slice(&OVERLONG_VARINT);
    frames.push(("metadata v12 over-long varint", raw_frame(3, 12, 3, &b)));

    // Produce v3: transactional id null, acks, timeout, topics array of 2^31-1.
    let mut b = Vec::new();
    header_v1(&mut b);
    b.put_i16(-1);
    b.put_i16(1);
    b.put_i32(30_000);
    b.extend_from_slice(&HUGE_INT32);
    frames.push(("produce v3 topics 2^31-1", raw_frame(0, 3, 4, &b)));

    // Produce v3: one topic whose partition array claims 2^31-1 entries.
    let mut b = Vec::new();
    header_v1(&mut b);
    b.put_i16(-1);
    b.put_i16(1);
    b.put_i32(30_000);
    b.put_i32(1);
    b.put_i16(1);
    b.put_u8(b't');
    b.extend_from_slice(&HUGE_INT32);
    frames.push(("produce v3 partitions 2^31-1", raw_frame(0, 3, 5, &b)));

    // Produce v9 (flexible): a topic name whose compact length claims 2^31 bytes.
    let mut b = Vec::new();
    header_v2(&mut b);
    b.put_u8(0); // transactional id: null compact string
    b.put_i16(1);
    b.put_i32(30_000);
    b.put_u8(2); // one topic
    b.extend_from_slice(&HUGE_VARINT);
    frames.push(("produce v9 topic name 2^31 bytes", raw_frame(0, 9, 6, &b)));

    // Fetch v4: replica id, max wait, min bytes, max bytes, isolation, topics 2^31-1.
    let mut b = Vec::new();
    header_v1(&mut b);
    b.put_i32(-1);
    b.put_i32(500);
    b.put_i32(1);
    b.put_i32(1 << 20);
    b.put_i8(0);
    b.extend_from_slice(&HUGE_INT32);
    frames.push(("fetch v4 topics 2^31-1", raw_frame(1, 4, 7, &b)));

    // ListOffsets v1: replica id, topics 2^31-1.
    let mut b = Vec::new();
    header_v1(&mut b);
    b.put_i32(-1);
    b.extend_from_slice(&HUGE_INT32);
    frames.push(("list_offsets v1 topics 2^31-1", raw_frame(2, 1, 8, &b)));

    // A header whose client id claims 32767 bytes of a 2-byte body.
    let mut b = Vec::new();
    b.put_i16(i16::MAX);
    b.put_i16(0);
    frames.push(("header client id 32767 bytes", raw_frame(3, 1, 9, &b)));
    frames
}

async fn assert_refused_and_broker_serves(addr: std::net::SocketAddr, b: &TestBroker) {
    for (what, frame) in hostile_frames() {
        let mut c = Client::connect(addr).await;
        c.write_raw(&frame).await.unwrap();
        assert!(
            c.is_closed_by_peer(Duration::from_secs(10)).await,
            "{what}: the broker closes the connection of an unparseable request"
        );
        // Everyone else is still served.
        let mut other = b.client().await;
        let resp = other.call(12, &MetadataRequest::default()).await;
        assert_eq!(resp.brokers.len(), 1, "{what}: broker still answers");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_larger_than_the_frame_close_the_connection_without_allocating() {
    let b = TestBroker::start().await;
    let before = vm_hwm_kib();
    assert_refused_and_broker_serves(b.kafka_addr, &b).await;
    // Every frame above claims gigabytes; none may be reserved (the test process is the broker).
    let grown = vm_hwm_kib().saturating_sub(before);
    assert!(grown < 256 * 1024, "peak RSS grew by {grown} KiB");
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sasl_listener_refuses_them_before_authentication() {
    let b = TestBroker::start_with(&[
        (
            "listeners",
            "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        ),
        ("sasl.enabled.mechanisms", "PLAIN"),
        (
            "listener.name.sasl_plaintext.plain.sasl.jaas.config",
            "org.apache.kafka.common.security.plain.PlainLoginModule required user_alice=\"alice-pw\";",
        ),
    ])
    .await;
    let port = b.broker().config.listeners[1].advertised_port;
    let addr = format!("127.0.0.1:{port}").parse().unwrap();
    assert_refused_and_broker_serves(addr, &b).await;
    b.shutdown().await;
}

/// The process's peak resident set (VmHWM) in KiB.
fn vm_hwm_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}
