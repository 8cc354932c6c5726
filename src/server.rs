//! The Kafka listener: accepts connections and serves each on its own task.
//!
//! A connection reads one size-prefixed frame at a time, handles it, and writes the response
//! before reading the next, so pipelined requests are answered in order (Kafka mutes a channel
//! while a request is in flight; this is the same contract). Oversized, truncated or
//! undecodable frames close only that connection, with the reason logged at debug level and
//! counted in `strata_connections_closed_bad_request_total`.
//!
//! Cancellation: every connection task watches the shutdown token and stops after the
//! request in progress; the listener stops accepting first.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::api;
use crate::broker::Broker;
use crate::protocol::{self, FrameError};

/// Serves the Kafka protocol on `listener` until `shutdown` is cancelled.
pub async fn serve(
    listener: TcpListener,
    broker: Arc<Broker>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
) {
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((stream, peer)) => {
                let _ = stream.set_nodelay(true);
                let broker = broker.clone();
                let shutdown = shutdown.clone();
                tracker.spawn(async move {
                    broker
                        .metrics
                        .connections_total
                        .fetch_add(1, Ordering::Relaxed);
                    broker
                        .metrics
                        .connections_active
                        .fetch_add(1, Ordering::Relaxed);
                    match serve_connection(stream, peer, &broker, &shutdown).await {
                        Ok(()) => {}
                        // A response we cannot encode is a bug in a handler, not the client's fault.
                        Err(reason @ ConnectionEnd::Encode(_)) => {
                            tracing::error!(%peer, %reason, "closing connection")
                        }
                        Err(reason) => tracing::debug!(%peer, %reason, "closing connection"),
                    }
                    broker
                        .metrics
                        .connections_active
                        .fetch_sub(1, Ordering::Relaxed);
                });
            }
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Why a connection ended other than a clean EOF.
#[derive(Debug, thiserror::Error)]
enum ConnectionEnd {
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    #[error("request size {size} outside [8, {max}]")]
    BadSize { size: i64, max: usize },
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error("{0}")]
    Closed(&'static str),
    #[error("idle for longer than connections.max.idle.ms")]
    Idle,
    #[error("cannot encode response: {0}")]
    Encode(String),
}

async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    broker: &Arc<Broker>,
    shutdown: &CancellationToken,
) -> Result<(), ConnectionEnd> {
    let (read_half, mut writer) = stream.into_split();
    let mut reader = BufReader::with_capacity(64 * 1024, read_half);
    let max = broker.config.socket_request_max_bytes;
    let idle = Duration::from_millis(broker.config.connections_max_idle_ms);
    loop {
        let mut prefix = [0u8; 4];
        let read = tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            r = tokio::time::timeout(idle, reader.read_exact(&mut prefix)) => r,
        };
        match read {
            Err(_) => return Err(ConnectionEnd::Idle),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Ok(Err(e)) => return Err(e.into()),
            Ok(Ok(_)) => {}
        }
        let size = protocol::frame_size(&prefix);
        if size < 8 || size as usize > max {
            broker
                .metrics
                .connections_closed_bad_request
                .fetch_add(1, Ordering::Relaxed);
            tracing::info!(%peer, size, max, "closing connection: request size out of range");
            return Err(ConnectionEnd::BadSize {
                size: size as i64,
                max,
            });
        }
        let mut frame = BytesMut::zeroed(size as usize);
        reader.read_exact(&mut frame).await?;
        let frame = frame.freeze();
        let started = Instant::now();
        let request = match protocol::decode_request(frame) {
            Ok(r) => r,
            Err(FrameError::UnsupportedVersion {
                api: kafka_protocol::messages::ApiKey::ApiVersions,
                correlation_id,
                ..
            }) => {
                writer
                    .write_all(&protocol::unsupported_api_versions_response(correlation_id))
                    .await?;
                continue;
            }
            Err(e) => {
                broker
                    .metrics
                    .connections_closed_bad_request
                    .fetch_add(1, Ordering::Relaxed);
                tracing::info!(%peer, error = %e, "closing connection: bad request");
                return Err(e.into());
            }
        };
        let api_key = request.api_key;
        let version = request.header.request_api_version;
        let correlation_id = request.header.correlation_id;
        // A request parked in a long poll must not hold up shutdown.
        let outcome = tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            o = api::handle(broker, peer, request) => o,
        };
        match outcome {
            api::Outcome::Respond(body) => {
                let chunks = protocol::encode_response(api_key, version, correlation_id, &body)
                    .map_err(|e| ConnectionEnd::Encode(e.to_string()))?;
                write_chunks(&mut writer, chunks).await?;
            }
            api::Outcome::NoResponse => {}
            api::Outcome::Close(reason) => return Err(ConnectionEnd::Closed(reason)),
        }
        broker
            .metrics
            .record_request(api_key as i16, started.elapsed());
    }
}

/// Writes the chunks of one response with vectored writes.
async fn write_chunks(
    writer: &mut tokio::net::tcp::OwnedWriteHalf,
    mut chunks: Vec<bytes::Bytes>,
) -> std::io::Result<()> {
    use bytes::Buf;
    let mut first = 0;
    while first < chunks.len() {
        let slices: Vec<std::io::IoSlice<'_>> = chunks[first..]
            .iter()
            .map(|c| std::io::IoSlice::new(c))
            .collect();
        let mut n = writer.write_vectored(&slices).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while n > 0 && first < chunks.len() {
            let len = chunks[first].len();
            if n >= len {
                n -= len;
                first += 1;
            } else {
                chunks[first].advance(n);
                n = 0;
            }
        }
    }
    Ok(())
}
