//! The Kafka listener: accepts connections and serves each on its own task.
//!
//! A connection reads one size-prefixed frame at a time, handles it, and writes the response
//! before reading the next, so pipelined requests are answered in order (Kafka mutes a channel
//! while a request is in flight; this is the same contract). Oversized, truncated or
//! undecodable frames close only that connection, with the reason logged at debug level and
//! counted in `strata_connections_closed_bad_request_total`.
//!
//! Bounded input: a frame's size prefix is checked against `socket.request.max.bytes` (on a
//! SASL listener before authentication, against `sasl.server.max.receive.size`, where an
//! oversized frame closes the connection as Kafka's InvalidReceiveException does). Then the
//! frame's size is reserved from the broker-wide request memory
//! ([`crate::memory_pool`], `queued.max.request.bytes`): a connection whose frame does not fit
//! reads nothing more until enough memory is released, while connections whose requests fit
//! keep being served. The reservation is held until the request has been handled (decoded
//! requests are zero-copy slices of the frame) and released before the response is written.
//! The body buffer grows as bytes arrive (64 KiB reads, doubling up to the frame size), so a
//! frame that claims 100 MB and sends 10 bytes costs its connection about nothing in memory.
//!
//! Timeouts: a connection with no request for `connections.max.idle.ms` is closed; so is one
//! whose request body has not arrived in full within `connections.max.idle.ms` of the broker
//! starting to read it (after its memory was reserved). That covers a peer that stalls
//! mid-request (Kafka's idle expiry) and one that trickles a byte now and then to hold its
//! reservation; a Kafka client gives up on a request after `request.timeout.ms` (30 s by
//! default) anyway. Such closes are counted in `strata_connections_closed_stalled_total`.
//! Waiting for request memory is the broker's back-pressure and has no timeout. A reservation
//! is for the claimed size, so a peer that claims a large frame and stalls holds budget (not
//! memory) until that deadline: requests that fit in the rest are still served; lowering
//! `socket.request.max.bytes` or `connections.max.idle.ms` shortens what such peers can hold.
//!
//! Quotas: connection limits are applied when a connection is accepted; a client over a
//! byte-rate or request-time quota gets its response at once with `throttle_time_ms` set, and
//! its connection is then muted (nothing is read from it) for that time, as in Kafka (KIP-219).
//!
//! Cancellation: every connection task watches the shutdown token and stops after the
//! request in progress; the listener stops accepting first.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::{RequestKind, ResponseKind};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::api;
use crate::memory_pool::Reservation;
use crate::protocol::{self, FrameError};
use crate::quota::{self, Refusal, RequestCost};
use crate::response_writer::ResponseWriter;
use crate::security::{self, Sasl, SaslOutcome};
use crate::services::Services;

/// How long a TLS handshake may take before the connection is dropped.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves the Kafka protocol on `listener` (the broker's listener number `index`) until
/// `shutdown` is cancelled.
pub async fn serve(
    listener: TcpListener,
    index: usize,
    services: Arc<Services>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
) {
    let broker = &services.broker;
    let config = &broker.config.listeners[index];
    let uses_tls = broker.config.security.tls.contains_key(&config.name);
    if uses_tls && broker.listener_tls.acceptor(&config.name).is_none() {
        // Checked at start-up (runtime::start); here only for completeness.
        tracing::error!(listener = %config.name, "cannot serve TLS: its keys did not load");
        return;
    }
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((stream, peer)) => {
                // Connection limits: may wait (broker-wide rate, max.connections) like Kafka's
                // acceptor, refuse at once (per-IP count) or close after a delay (IP rate).
                let admitted = tokio::select! {
                    _ = shutdown.cancelled() => break,
                    a = broker.quotas.connections.admit(peer.ip()) => a,
                };
                let permit = match admitted {
                    Ok(p) => p,
                    Err(Refusal::TooManyFromIp { max }) => {
                        tracing::info!(ip = %peer.ip(), max, "Rejected connection: address already has the configured maximum of connections");
                        drop(stream);
                        continue;
                    }
                    Err(Refusal::Throttled { delay }) => {
                        tracing::debug!(ip = %peer.ip(), ?delay, "connection creation rate over the IP's quota: closing after the throttle time");
                        let shutdown = shutdown.clone();
                        tracker.spawn(async move {
                            tokio::select! {
                                _ = shutdown.cancelled() => {}
                                _ = tokio::time::sleep(delay) => {}
                            }
                            drop(stream);
                        });
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let services = services.clone();
                let shutdown = shutdown.clone();
                // The acceptor in force now: a keystore reloaded at run time serves the
                // connections accepted after it.
                let tls = if uses_tls {
                    match broker.listener_tls.acceptor(&config.name) {
                        Some(a) => Some(a),
                        None => continue,
                    }
                } else {
                    None
                };
                tracker.spawn(async move {
                    let broker = &services.broker;
                    broker
                        .metrics
                        .connections_total
                        .fetch_add(1, Ordering::Relaxed);
                    broker
                        .metrics
                        .connections_active
                        .fetch_add(1, Ordering::Relaxed);
                    let result = match &tls {
                        None => {
                            let (reader, writer) = stream.into_split();
                            serve_connection(
                                reader,
                                writer,
                                peer,
                                index,
                                security::ANONYMOUS.to_string(),
                                &services,
                                &shutdown,
                            )
                            .await
                        }
                        Some(acceptor) => {
                            match tokio::time::timeout(
                                TLS_HANDSHAKE_TIMEOUT,
                                acceptor.accept(stream),
                            )
                            .await
                            {
                                Ok(Ok(tls_stream)) => {
                                    let principal = tls_stream
                                        .get_ref()
                                        .1
                                        .peer_certificates()
                                        .and_then(|c| c.first())
                                        .and_then(security::tls::principal_of)
                                        .unwrap_or_else(|| security::ANONYMOUS.to_string());
                                    let (reader, writer) = tokio::io::split(tls_stream);
                                    serve_connection(
                                        reader, writer, peer, index, principal, &services,
                                        &shutdown,
                                    )
                                    .await
                                }
                                Ok(Err(e)) => Err(ConnectionEnd::Tls(e.to_string())),
                                Err(_) => Err(ConnectionEnd::Tls("handshake timed out".into())),
                            }
                        }
                    };
                    // Share sessions end with their connection, releasing their records.
                    let shares = services.shares.clone();
                    if shares
                        .sessions
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .uses(peer)
                    {
                        let _ = crate::blocking::run(move || shares.connection_closed(peer)).await;
                    }
                    match result {
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
                    drop(permit);
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
    /// Kafka's InvalidReceiveException on a SASL listener before authentication.
    #[error("invalid receive (size = {size} larger than {max}) before SASL authentication: sasl.server.max.receive.size")]
    UnauthenticatedSize { size: i64, max: usize },
    #[error(
        "request body stalled: {received} of {size} bytes arrived within connections.max.idle.ms"
    )]
    Stalled { received: usize, size: usize },
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error("{0}")]
    Closed(&'static str),
    #[error("idle for longer than connections.max.idle.ms")]
    Idle,
    #[error("cannot encode response: {0}")]
    Encode(String),
    #[error("TLS: {0}")]
    Tls(String),
    #[error("unexpected request {0:?} before SASL authentication")]
    Unauthenticated(kafka_protocol::messages::ApiKey),
    #[error("SASL authentication failed or its session expired")]
    AuthenticationFailed,
}

/// What a connection may send next: `socket.request.max.bytes`, and before SASL
/// authentication `sasl.server.max.receive.size`; the whole frame within
/// `connections.max.idle.ms`.
struct FrameLimits {
    max: usize,
    sasl_max: usize,
    idle: Duration,
    unauthenticated: bool,
}

/// Reads one request frame: its size prefix (checked against `limits`), then memory for it
/// from `queued.max.request.bytes` (waiting, and reading nothing more from this connection,
/// until it fits), then its body. `None` when the peer closed the connection between
/// requests or the broker is shutting down.
async fn read_frame<'a, R: AsyncRead + Unpin>(
    reader: &mut R,
    services: &'a Services,
    peer: SocketAddr,
    limits: &FrameLimits,
    shutdown: &CancellationToken,
) -> Result<Option<(Bytes, Reservation<'a>)>, ConnectionEnd> {
    let broker = &services.broker;
    let mut prefix = [0u8; 4];
    let read = tokio::select! {
        _ = shutdown.cancelled() => return Ok(None),
        r = tokio::time::timeout(limits.idle, reader.read_exact(&mut prefix)) => r,
    };
    match read {
        Err(_) => return Err(ConnectionEnd::Idle),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Ok(Err(e)) => return Err(e.into()),
        Ok(Ok(_)) => {}
    }
    let size = protocol::frame_size(&prefix);
    // Kafka's SaslServerAuthenticator reads at most sasl.server.max.receive.size before
    // the client has authenticated, so an anonymous peer cannot make it buffer 100 MB.
    let (max, sasl_max) = (limits.max, limits.sasl_max);
    if limits.unauthenticated && size as i64 > sasl_max as i64 && size as usize <= max {
        broker
            .metrics
            .connections_closed_bad_request
            .fetch_add(1, Ordering::Relaxed);
        tracing::info!(%peer, size, max = sasl_max, "closing connection: request before SASL authentication larger than sasl.server.max.receive.size");
        return Err(ConnectionEnd::UnauthenticatedSize {
            size: size as i64,
            max: sasl_max,
        });
    }
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
    let size = size as usize;
    // queued.max.request.bytes: wait (read nothing more from this connection) until the
    // frame fits in the broker's request memory; held until the request has been handled.
    let reservation = tokio::select! {
        _ = shutdown.cancelled() => return Ok(None),
        r = broker.request_memory.reserve(size as u64) => r,
    };
    let now = tokio::time::Instant::now();
    // A year stands in for "never" when connections.max.idle.ms is beyond the clock.
    let deadline = now
        .checked_add(limits.idle)
        .unwrap_or(now + Duration::from_secs(365 * 24 * 3600));
    let frame = tokio::select! {
        _ = shutdown.cancelled() => return Ok(None),
        f = read_body(reader, size, deadline) => f,
    };
    match frame {
        Ok(f) => Ok(Some((f, reservation))),
        Err(e @ ConnectionEnd::Stalled { .. }) => {
            broker
                .metrics
                .connections_closed_stalled
                .fetch_add(1, Ordering::Relaxed);
            tracing::info!(%peer, reason = %e, "closing connection: request body stalled");
            Err(e)
        }
        Err(e) => Err(e),
    }
}

/// Records a request's cost against its client's quotas; a client over one gets
/// `throttle_time_ms` in its response and the connection is muted for the returned time.
fn throttle(
    quotas: &quota::Quotas,
    cost: &RequestCost<'_>,
    outcome: &mut api::Outcome,
) -> Duration {
    match outcome {
        api::Outcome::Respond(body) | api::Outcome::RespondWithFiles(body, _) => {
            quotas.throttle(cost, Some(body))
        }
        api::Outcome::NoResponse => quotas.throttle(cost, None),
        api::Outcome::Close(_) => Duration::ZERO,
    }
}

/// What handling one request produced.
struct Handled {
    outcome: api::Outcome,
    /// The thread time that counts against request quotas (not SASL authentication).
    thread_time: Option<Duration>,
    /// A failed SASL authentication: the connection closes after the response.
    close_after: bool,
}

/// Handles one request: SASL handshake and authentication are connection state, handled
/// here; anything else goes to [`api::handle`] once authenticated (ApiVersions also before).
/// `None` when the broker is shutting down.
async fn handle_request(
    sasl: &mut Option<Sasl>,
    conn: &mut api::Connection,
    services: &Services,
    peer: SocketAddr,
    request: protocol::Request,
    shutdown: &CancellationToken,
) -> Result<Option<Handled>, ConnectionEnd> {
    let api_key = request.api_key;
    // Thread time of a request that counts against quotas (not SASL authentication).
    let mut thread_time = None;
    // SASL: the handshake and authentication are connection state, handled here.
    let mut close_after = false;
    // The request (and so the frame it slices) is dropped by the end of this block.
    let outcome = {
        let request = request;
        match (sasl, &request.body) {
            (Some(s), RequestKind::SaslHandshake(r)) => match s.handshake(r) {
                SaslOutcome::Handshake(resp) => {
                    api::Outcome::Respond(Box::new(ResponseKind::SaslHandshake(resp)))
                }
                SaslOutcome::Authenticate { .. } => unreachable_outcome(),
            },
            (Some(s), RequestKind::SaslAuthenticate(r)) => match s.authenticate(
                |user, token, m| services.broker.scram_lookup(user, token, m),
                &services.broker.metrics,
                r,
            ) {
                SaslOutcome::Authenticate { response, close } => {
                    close_after = close;
                    if let Some(p) = &s.principal {
                        conn.principal = p.clone();
                        conn.token_authenticated = s.token_authenticated;
                    }
                    api::Outcome::Respond(Box::new(ResponseKind::SaslAuthenticate(response)))
                }
                SaslOutcome::Handshake(_) => unreachable_outcome(),
            },
            (Some(s), body) if !s.is_authenticated() => {
                if s.principal.is_some() {
                    // KIP-368: the session expired without re-authentication.
                    return Err(ConnectionEnd::AuthenticationFailed);
                }
                if !matches!(body, RequestKind::ApiVersions(_)) {
                    return Err(ConnectionEnd::Unauthenticated(api_key));
                }
                tokio::select! {
                    _ = shutdown.cancelled() => return Ok(None),
                    o = api::handle(services, peer, &conn, request) => o,
                }
            }
            // A request parked in a long poll must not hold up shutdown.
            _ => tokio::select! {
                _ = shutdown.cancelled() => return Ok(None),
                (o, used) = quota::request::measure_thread_time(api::handle(services, peer, &conn, request)) => {
                    thread_time = Some(used);
                    o
                }
            },
        }
    };
    Ok(Some(Handled {
        outcome,
        thread_time,
        close_after,
    }))
}

#[allow(clippy::too_many_arguments)]
async fn serve_connection<R, W>(
    read_half: R,
    mut writer: W,
    peer: SocketAddr,
    listener: usize,
    principal: String,
    services: &Services,
    shutdown: &CancellationToken,
) -> Result<(), ConnectionEnd>
where
    R: AsyncRead + Send + Unpin,
    W: ResponseWriter,
{
    let broker = &services.broker;
    let mut reader = BufReader::with_capacity(64 * 1024, read_half);
    let listener_config = &broker.config.listeners[listener];
    let mut sasl = broker
        .config
        .security
        .sasl
        .get(&listener_config.name)
        .filter(|_| listener_config.security.uses_sasl())
        .map(|c| Sasl::new(c.clone(), broker.config.security.max_reauth_ms));
    let mut conn = api::Connection {
        listener,
        principal,
        token_authenticated: false,
    };
    let max = broker.config.socket_request_max_bytes;
    let sasl_max = broker.config.sasl_server_max_receive_size;
    let idle = Duration::from_millis(broker.config.connections_max_idle_ms);
    loop {
        let limits = FrameLimits {
            max,
            sasl_max,
            idle,
            unauthenticated: sasl.as_ref().is_some_and(|s| !s.is_authenticated()),
        };
        let Some((frame, reservation)) =
            read_frame(&mut reader, services, peer, &limits, shutdown).await?
        else {
            return Ok(());
        };
        let started = Instant::now();
        let request = match protocol::decode_request(frame, &api::API_TABLE) {
            Ok(r) => r,
            Err(FrameError::UnsupportedVersion {
                api: kafka_protocol::messages::ApiKey::ApiVersions,
                correlation_id,
                ..
            }) => {
                drop(reservation);
                writer
                    .write_all(&protocol::unsupported_api_versions_response(
                        correlation_id,
                        &api::API_TABLE,
                    ))
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
        let request_size = request.size;
        let client_id = request
            .header
            .client_id
            .as_ref()
            .map(|c| c.to_string())
            .unwrap_or_default();
        let Some(Handled {
            outcome,
            thread_time,
            close_after,
        }) = handle_request(&mut sasl, &mut conn, services, peer, request, shutdown).await?
        else {
            return Ok(());
        };
        // Handled: the frame's memory goes back to queued.max.request.bytes before the
        // response is written (a client slow to read its responses does not hold it).
        drop(reservation);
        let mut outcome = outcome;
        // KIP-219: a client over a quota gets its response at once, with throttle_time_ms,
        // and the connection is muted for that long afterwards.
        let mute = match thread_time {
            Some(thread_time) => {
                let cost = RequestCost {
                    client: quota::Client {
                        user: quota::user_of(&conn.principal),
                        client_id: &client_id,
                    },
                    api_key,
                    version,
                    request_size,
                    thread_time,
                };
                throttle(&broker.quotas, &cost, &mut outcome)
            }
            None => Duration::ZERO,
        };
        match outcome {
            api::Outcome::Respond(body) => {
                let none = protocol::FileRecords::default();
                let chunks =
                    protocol::encode_response(api_key, version, correlation_id, &body, &none)
                        .map_err(|e| ConnectionEnd::Encode(e.to_string()))?;
                writer.write_chunks(chunks).await?;
            }
            api::Outcome::RespondWithFiles(body, files) => {
                let chunks =
                    protocol::encode_response(api_key, version, correlation_id, &body, &files)
                        .map_err(|e| ConnectionEnd::Encode(e.to_string()))?;
                writer.write_chunks(chunks).await?;
            }
            api::Outcome::NoResponse => {}
            api::Outcome::Close(reason) => return Err(ConnectionEnd::Closed(reason)),
        }
        if close_after {
            writer.flush().await?;
            // KIP-306: Kafka waits connection.failed.authentication.delay.ms before closing,
            // which slows password guessing and lets clients read the error before the EOF.
            let delay =
                Duration::from_millis(broker.config.security.failed_authentication_delay_ms);
            tokio::select! {
                _ = shutdown.cancelled() => {}
                _ = tokio::time::sleep(delay) => {}
            }
            return Err(ConnectionEnd::AuthenticationFailed);
        }
        broker
            .metrics
            .record_request(api_key as i16, started.elapsed());
        if !mute.is_zero() {
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                _ = tokio::time::sleep(mute) => {}
            }
        }
    }
}

/// Bytes read into a request body at a time. The body buffer grows as bytes arrive (doubling,
/// up to the frame size), so a frame that claims 100 MB and stalls holds only what it sent.
const BODY_CHUNK: usize = 64 * 1024;

/// Reads a request body of `size` bytes, which must arrive in full before `deadline`.
async fn read_body<R: AsyncRead + Unpin>(
    reader: &mut R,
    size: usize,
    deadline: tokio::time::Instant,
) -> Result<Bytes, ConnectionEnd> {
    let mut body: Vec<u8> = Vec::with_capacity(size.min(BODY_CHUNK));
    while body.len() < size {
        if body.len() == body.capacity() {
            let more = body.capacity().max(BODY_CHUNK).min(size - body.len());
            body.reserve_exact(more);
        }
        let start = body.len();
        let end = body.capacity().min(size).min(start + BODY_CHUNK);
        body.resize(end, 0);
        let read = tokio::time::timeout_at(deadline, reader.read(&mut body[start..end])).await;
        let n = match read {
            Err(_) => {
                return Err(ConnectionEnd::Stalled {
                    received: start,
                    size,
                })
            }
            Ok(r) => r?,
        };
        if n == 0 {
            return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
        }
        body.truncate(start + n);
    }
    Ok(Bytes::from(body))
}

fn unreachable_outcome() -> api::Outcome {
    api::Outcome::Close("internal error: mismatched SASL outcome")
}
