//! Peers that stall mid-request, claim large frames they never send, or send large frames
//! before SASL authentication: the broker times them out, bounds the memory they hold
//! (`queued.max.request.bytes`, `sasl.server.max.receive.size`) and keeps serving the others.

use std::time::{Duration, Instant};

use kafka_protocol::messages::{
    MetadataRequest, ProduceRequest, SaslAuthenticateRequest, SaslHandshakeRequest,
};
use kafka_protocol::records::Compression;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::client::{encode_frame, Client};
use crate::harness::*;
use crate::http::http_get;

/// The test process's resident anonymous memory (the broker runs in-process; file-backed
/// pages such as memory-mapped indexes of other tests' brokers are left out).
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status");
    kib * 1024
}

async fn assert_serves_api_versions_and_metadata(b: &TestBroker) {
    let mut c = b.client().await;
    assert_eq!(c.call(3, &api_versions_request()).await.error_code, 0);
    assert_eq!(
        c.call(12, &MetadataRequest::default()).await.brokers.len(),
        1
    );
}

/// Polls `f` until it holds, for at most 10 seconds.
async fn eventually(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn produce_frame(topic: &str, value_bytes: usize, correlation_id: i32) -> Vec<u8> {
    let value = vec![b'x'; value_bytes];
    let records = batch_with(&[&value], &[now_ms()], Compression::None, None);
    encode_frame(
        PRODUCE_V,
        correlation_id,
        &produce_request(topic, 0, records, 1),
    )
    .to_vec()
}

async fn read_produce_response(c: &mut Client) -> i16 {
    let (_, resp) = c.recv::<ProduceRequest>(PRODUCE_V).await;
    resp.responses[0].partition_responses[0].error_code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_sent_request_is_closed_after_connections_max_idle_ms() {
    let b = TestBroker::start_with(&[("connections.max.idle.ms", "500")]).await;
    let mut c = b.client().await;
    let mut wire = 1000i32.to_be_bytes().to_vec();
    wire.extend_from_slice(&[0, 18, 0, 3, 0, 0, 0, 1, 0, 0]);
    c.write_raw(&wire).await.unwrap();
    let started = Instant::now();
    assert!(
        c.is_closed_by_peer(Duration::from_secs(5)).await,
        "a request stalled mid-body must be closed"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "closed before connections.max.idle.ms: {:?}",
        started.elapsed()
    );
    let m = &b.broker().metrics;
    assert_eq!(
        m.connections_closed_stalled
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    assert_eq!(b.broker().request_memory.reserved(), 0, "memory released");
    let (_, text) = http_get(b.admin_addr, "/metrics").await;
    assert!(
        text.contains("strata_connections_closed_stalled_total 1"),
        "{text}"
    );
    assert!(
        text.contains("strata_request_memory_reserved_bytes 0"),
        "{text}"
    );
    assert_serves_api_versions_and_metadata(&b).await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_trickled_a_byte_at_a_time_is_closed_when_not_complete_within_the_idle_time() {
    // Bytes keep arriving (each well within the idle time), but the body as a whole does not.
    let b = TestBroker::start_with(&[("connections.max.idle.ms", "600")]).await;
    let mut c = b.client().await;
    c.write_raw(&1000i32.to_be_bytes()).await.unwrap();
    let started = Instant::now();
    let mut closed = false;
    for _ in 0..50 {
        if c.write_raw(&[0]).await.is_err() || c.is_closed_by_peer(Duration::from_millis(100)).await
        {
            closed = true;
            break;
        }
    }
    assert!(closed, "a trickled request must be closed");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    assert_serves_api_versions_and_metadata(&b).await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_claims_of_100_mb_hold_neither_memory_nor_the_broker() {
    // Defaults: socket.request.max.bytes = 100 MiB, queued.max.request.bytes = 512 MiB.
    const CONNECTIONS: usize = 20;
    const CLAIM: i32 = 100 << 20;
    const SENT: usize = 32 << 20;
    let b = TestBroker::start().await;
    assert_serves_api_versions_and_metadata(&b).await;
    let capacity = b.broker().request_memory.capacity().expect("bounded");
    let before = rss_bytes();

    let chunk = vec![0u8; 64 * 1024];
    let mut writers = tokio::task::JoinSet::new();
    for _ in 0..CONNECTIONS {
        let chunk = chunk.clone();
        let addr = b.kafka_addr;
        writers.spawn(async move {
            let mut s = TcpStream::connect(addr).await.expect("connect");
            s.write_all(&CLAIM.to_be_bytes()).await.expect("write size");
            // The header of an ApiVersions request, then zeros.
            s.write_all(&[0, 18, 0, 3, 0, 0, 0, 1])
                .await
                .expect("write");
            let mut sent = 8;
            while sent < SENT {
                if s.write_all(&chunk).await.is_err() {
                    break;
                }
                sent += chunk.len();
            }
            // Keep the connection open, stalled, until the test ends.
            s
        });
    }
    // The connections whose claim fits in the budget read what was sent; the others wait for
    // memory without reading (their bytes stay in the kernel's socket buffers).
    let fit = (capacity / CLAIM as u64) as usize;
    let mut streams = Vec::new();
    for _ in 0..fit {
        let s = tokio::time::timeout(Duration::from_secs(30), writers.join_next())
            .await
            .expect("the claims that fit are read")
            .expect("a writer")
            .expect("writer ok");
        streams.push(s);
    }
    let pool = &b.broker().request_memory;
    eventually("the other claims wait for memory", || {
        pool.waits() >= (CONNECTIONS - fit) as u64
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let grown = rss_bytes().saturating_sub(before);
    let reserved = pool.reserved();
    println!(
        "{CONNECTIONS} connections claiming {} MiB and sending {} MiB each: RSS grew by {} MiB, {} MiB reserved of {} MiB",
        CLAIM >> 20,
        SENT >> 20,
        grown >> 20,
        reserved >> 20,
        capacity >> 20
    );
    assert!(reserved <= capacity, "reserved {reserved} > {capacity}");
    assert_eq!(reserved, fit as u64 * CLAIM as u64);
    // What the broker buffers is the bytes received on the connections that fit (not the
    // claimed sizes, and nothing for the connections that wait): about fit * SENT. Reading
    // every connection would buffer CONNECTIONS * SENT; the bound is half-way between, so
    // other tests running in this process do not make it flaky.
    let bound = ((fit + CONNECTIONS) * SENT / 2) as u64;
    assert!(
        grown < bound,
        "RSS grew by {} MiB (bound {} MiB)",
        grown >> 20,
        bound >> 20
    );
    // Small requests fit next to the claims, on new connections.
    assert_serves_api_versions_and_metadata(&b).await;
    writers.abort_all();
    while writers.join_next().await.is_some() {}
    drop(streams);
    eventually("closed connections release their memory", || {
        pool.reserved() == 0
    })
    .await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_over_the_memory_budget_waits_while_a_small_one_is_served() {
    let b = TestBroker::start_with(&[
        ("queued.max.request.bytes", "65536"),
        ("socket.request.max.bytes", "65536"),
    ])
    .await;
    let mut admin = b.client().await;
    create_topic(&mut admin, "budget", 1).await;
    let pool = &b.broker().request_memory;

    // A: a 40 KB produce, all but its last bytes sent: it holds its frame's size.
    let frame_a = produce_frame("budget", 40_000, 1);
    let size_a = (frame_a.len() - 4) as u64;
    let mut a = b.client().await;
    a.write_raw(&frame_a[..frame_a.len() - 100]).await.unwrap();
    eventually("A's frame is reserved", || pool.reserved() == size_a).await;

    // B: another 40 KB produce, sent in full: it does not fit and waits.
    let frame_b = produce_frame("budget", 40_000, 1);
    let mut c_b = b.client().await;
    c_b.write_raw(&frame_b).await.unwrap();
    eventually("B waits for memory", || pool.waits() == 1).await;

    // A small request on a third connection fits and is served meanwhile.
    assert_serves_api_versions_and_metadata(&b).await;
    assert!(
        tokio::time::timeout(Duration::from_millis(300), c_b.read_frame())
            .await
            .is_err(),
        "B is not answered while A holds the memory"
    );
    assert_eq!(pool.reserved(), size_a);

    // A completes; its memory is released once handled and B is read and served.
    a.write_raw(&frame_a[frame_a.len() - 100..]).await.unwrap();
    assert_eq!(read_produce_response(&mut a).await, 0);
    assert_eq!(read_produce_response(&mut c_b).await, 0);
    eventually("all memory released", || pool.reserved() == 0).await;
    assert_eq!(list_offset(&mut admin, "budget", 0, -1).await.offset, 2);
    let (_, text) = http_get(b.admin_addr, "/metrics").await;
    assert!(
        text.contains("strata_request_memory_waits_total 1"),
        "{text}"
    );
    assert!(
        text.contains("strata_request_memory_capacity_bytes 65536"),
        "{text}"
    );
    b.shutdown().await;
}

const SASL_SETTINGS: [(&str, &str); 3] = [
    (
        "listeners",
        "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    ),
    ("sasl.enabled.mechanisms", "PLAIN"),
    (
        "listener.name.sasl_plaintext.plain.sasl.jaas.config",
        "org.apache.kafka.common.security.plain.PlainLoginModule required user_alice=\"alice-pw\";",
    ),
];

async fn sasl_client(b: &TestBroker) -> Client {
    let port = b.broker().config.listeners[1].advertised_port;
    Client::connect(format!("127.0.0.1:{port}").parse().unwrap()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unauthenticated_frame_over_sasl_server_max_receive_size_closes_the_connection() {
    let b = TestBroker::start_with(&SASL_SETTINGS).await;
    // Over the default 524288 (but within socket.request.max.bytes), before authenticating.
    let mut c = sasl_client(&b).await;
    let mut wire = (100i32 << 20).to_be_bytes().to_vec();
    wire.extend_from_slice(&[0, 17, 0, 1, 0, 0, 0, 1, 0, 0]);
    c.write_raw(&wire).await.unwrap();
    assert!(
        c.is_closed_by_peer(Duration::from_secs(2)).await,
        "an oversized unauthenticated frame must close at once"
    );
    assert_eq!(b.broker().request_memory.reserved(), 0, "nothing reserved");

    // The same frame on the PLAINTEXT listener is within socket.request.max.bytes: read.
    let mut plain = b.client().await;
    plain.write_raw(&wire).await.unwrap();
    assert!(!plain.is_closed_by_peer(Duration::from_millis(300)).await);
    drop(plain);

    // After authentication, frames up to socket.request.max.bytes are accepted again.
    let mut c = sasl_client(&b).await;
    assert_eq!(c.call(3, &api_versions_request()).await.error_code, 0);
    let mut h = SaslHandshakeRequest::default();
    h.mechanism = str_bytes("PLAIN");
    assert_eq!(c.call(1, &h).await.error_code, 0);
    let mut auth = SaslAuthenticateRequest::default();
    auth.auth_bytes = b"\0alice\0alice-pw".to_vec().into();
    assert_eq!(c.call(2, &auth).await.error_code, 0);
    create_topic(&mut c, "big", 1).await;
    c.write_raw(&produce_frame("big", 600_000, 7))
        .await
        .unwrap();
    assert_eq!(read_produce_response(&mut c).await, 0);

    // An authentication exchange itself is bounded by the setting.
    let b2 = TestBroker::start_with(&[
        SASL_SETTINGS[0],
        SASL_SETTINGS[1],
        SASL_SETTINGS[2],
        ("sasl.server.max.receive.size", "1024"),
    ])
    .await;
    let mut c = sasl_client(&b2).await;
    assert_eq!(c.call(1, &h).await.error_code, 0);
    let mut auth = SaslAuthenticateRequest::default();
    auth.auth_bytes = vec![b'a'; 2000].into();
    c.send(2, &auth).await;
    assert!(c.is_closed_by_peer(Duration::from_secs(2)).await);
    b2.shutdown().await;
    b.shutdown().await;
}
