//! The admin HTTP listener: `GET /health` (200 once the broker serves) and `GET /metrics`
//! (Prometheus text format). A deliberately tiny HTTP/1.1 responder: one request per
//! connection, bounded header size, no bodies accepted.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::services::Services;

pub async fn serve(
    listener: TcpListener,
    services: Arc<Services>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
) {
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            a = listener.accept() => a,
        };
        let Ok((stream, _)) = accepted else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let services = services.clone();
        tracker.spawn(async move {
            let _ = tokio::time::timeout(Duration::from_secs(10), respond(stream, services)).await;
        });
    }
}

async fn respond(mut stream: TcpStream, services: Arc<Services>) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut chunk).await?;
        if n == 0 || buf.len() > 16 * 1024 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let line = String::from_utf8_lossy(&buf);
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("");
    let path = parts.next().unwrap_or("").split('?').next().unwrap_or("");
    let (status, content_type, body) = match (method, path) {
        ("GET", "/health") => ("200 OK", "text/plain", "ok\n".to_string()),
        ("GET", "/metrics") => {
            let s = services.clone();
            let text = tokio::task::spawn_blocking(move || {
                let b = &s.broker;
                let mut text = b.metrics.render(&b.partition_gauges(), &s.groups.gauges());
                if let Some(t) = &s.tiering {
                    t.render_metrics(&mut text, &b.remote_upload_lag());
                }
                b.quotas.render_metrics(&mut text);
                s.shares.render_metrics(&mut text);
                crate::metrics::render_request_memory(&mut text, &b.request_memory);
                crate::metrics::render_transactions(
                    &mut text,
                    s.txns.ongoing_count(),
                    &s.txns.count_by_state(),
                );
                text
            })
            .await
            .unwrap_or_default();
            ("200 OK", "text/plain; version=0.0.4", text)
        }
        ("GET", _) => ("404 Not Found", "text/plain", "not found\n".to_string()),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "method not allowed\n".to_string(),
        ),
    };
    let head = format!("HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}
