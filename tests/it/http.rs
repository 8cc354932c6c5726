//! The admin HTTP listener: /health and /metrics.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::harness::*;

pub(crate) async fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr)
        .await
        .expect("connect admin listener");
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .expect("http response in time")
        .unwrap();
    let text = String::from_utf8(out).expect("utf-8 response");
    let (head, body) = text.split_once("\r\n\r\n").expect("header/body separator");
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status code");
    assert!(head.starts_with("HTTP/1.1 "), "{head}");
    if let Some(len) = head.lines().find_map(|l| {
        l.to_ascii_lowercase()
            .strip_prefix("content-length:")
            .map(|v| v.trim().to_string())
    }) {
        assert_eq!(
            len.parse::<usize>().unwrap(),
            body.len(),
            "Content-Length matches"
        );
    }
    (status, body.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_metrics_answer_200_and_metrics_count_requests() {
    let b = TestBroker::start().await;
    let (status, body) = http_get(b.admin_addr, "/health").await;
    assert_eq!(status, 200, "{body}");

    let mut c = b.client().await;
    c.call(3, &api_versions_request()).await;
    create_topic(&mut c, "metered", 1).await;
    produce(&mut c, "metered", 0, batch(2)).await;

    // Requests are counted once their response is written: allow a moment.
    let mut last = String::new();
    for _ in 0..20 {
        let (status, body) = http_get(b.admin_addr, "/metrics").await;
        assert_eq!(status, 200);
        assert!(body.contains("strata_requests_total"), "{body}");
        assert!(
            body.contains("strata_group_members 0"),
            "group gauges are exported: {body}"
        );
        assert!(body.contains("strata_group_rebalances_total 0"), "{body}");
        if body
            .lines()
            .any(|l| l.starts_with("strata_requests_total{") && l.contains("ApiVersions"))
        {
            b.shutdown().await;
            return;
        }
        last = body;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no ApiVersions request counted:\n{last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_admin_path_is_404() {
    let b = TestBroker::start().await;
    let (status, _) = http_get(b.admin_addr, "/nope").await;
    assert_eq!(status, 404);
    b.shutdown().await;
}
