//! A connection from this broker to another broker's Kafka listener (plaintext), carrying one
//! request at a time: the replica fetcher's Fetch and ListOffsets, and (through [`PeerPool`])
//! the coordinators' WriteTxnMarkers and transaction verifications.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest response frame accepted from a peer.
const MAX_RESPONSE_BYTES: usize = 512 << 20;

#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("I/O with the leader failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("no response within {0:?}")]
    Timeout(Duration),
    #[error("malformed response: {0}")]
    Protocol(String),
}

pub struct PeerConnection {
    stream: TcpStream,
    client_id: StrBytes,
    next_correlation_id: i32,
}

impl PeerConnection {
    pub async fn connect(
        host: &str,
        port: u16,
        client_id: String,
        timeout: Duration,
    ) -> Result<PeerConnection, PeerError> {
        let addr = format!("{host}:{port}");
        let stream = match tokio::time::timeout(timeout, TcpStream::connect(&addr)).await {
            Ok(Ok(s)) => s,
            Ok(Err(source)) => return Err(PeerError::Connect { addr, source }),
            Err(_) => return Err(PeerError::Timeout(timeout)),
        };
        let _ = stream.set_nodelay(true);
        Ok(PeerConnection {
            stream,
            client_id: StrBytes::from_string(client_id),
            next_correlation_id: 0,
        })
    }

    /// Sends `request` at `version` and waits up to `timeout` for its response.
    pub async fn call<R: Request>(
        &mut self,
        version: i16,
        request: &R,
        timeout: Duration,
    ) -> Result<R::Response, PeerError> {
        let api = ApiKey::try_from(R::KEY)
            .map_err(|_| PeerError::Protocol(format!("unknown api key {}", R::KEY)))?;
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        let mut buf = BytesMut::with_capacity(256);
        buf.put_i32(0);
        let mut header = RequestHeader::default();
        header.request_api_key = R::KEY;
        header.request_api_version = version;
        header.correlation_id = correlation_id;
        header.client_id = Some(self.client_id.clone());
        header
            .encode(&mut buf, api.request_header_version(version))
            .map_err(|e| PeerError::Protocol(e.to_string()))?;
        request
            .encode(&mut buf, version)
            .map_err(|e| PeerError::Protocol(e.to_string()))?;
        let len = (buf.len() - 4) as i32;
        buf[..4].copy_from_slice(&len.to_be_bytes());
        let exchange = async {
            self.stream.write_all(&buf).await?;
            let size = self.stream.read_i32().await?;
            if size < 0 || size as usize > MAX_RESPONSE_BYTES {
                return Err(PeerError::Protocol(format!("response size {size}")));
            }
            let mut frame = vec![0u8; size as usize];
            self.stream.read_exact(&mut frame).await?;
            Ok(Bytes::from(frame))
        };
        let mut frame = match tokio::time::timeout(timeout, exchange).await {
            Ok(r) => r?,
            Err(_) => return Err(PeerError::Timeout(timeout)),
        };
        let header = ResponseHeader::decode(&mut frame, api.response_header_version(version))
            .map_err(|e| PeerError::Protocol(e.to_string()))?;
        if header.correlation_id != correlation_id {
            return Err(PeerError::Protocol(format!(
                "correlation id {} for request {correlation_id}",
                header.correlation_id
            )));
        }
        let body = <R::Response as Decodable>::decode(&mut frame, version)
            .map_err(|e| PeerError::Protocol(e.to_string()))?;
        if frame.has_remaining() {
            return Err(PeerError::Protocol(
                "trailing bytes after the response".into(),
            ));
        }
        Ok(body)
    }
}

/// Idle connections kept per broker address.
const MAX_IDLE_PER_PEER: usize = 4;

/// Reusable connections to other brokers for one-off requests. A call checks a connection
/// out (so calls never share one), and returns it after a successful exchange; a pooled
/// connection that fails (the peer restarted) is replaced by a fresh one once.
#[derive(Default)]
pub struct PeerPool {
    idle: Mutex<HashMap<(String, u16), Vec<PeerConnection>>>,
}

impl PeerPool {
    #[allow(clippy::too_many_arguments)]
    pub async fn call<R: Request>(
        &self,
        host: &str,
        port: u16,
        client_id: &str,
        connect_timeout: Duration,
        version: i16,
        request: &R,
        timeout: Duration,
    ) -> Result<R::Response, PeerError> {
        let key = (host.to_string(), port);
        let pooled = self
            .idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(&key)
            .and_then(Vec::pop);
        let (mut conn, reused) = match pooled {
            Some(c) => (c, true),
            None => (
                PeerConnection::connect(host, port, client_id.to_string(), connect_timeout).await?,
                false,
            ),
        };
        let mut result = conn.call(version, request, timeout).await;
        if reused && matches!(result, Err(PeerError::Io(_))) {
            conn =
                PeerConnection::connect(host, port, client_id.to_string(), connect_timeout).await?;
            result = conn.call(version, request, timeout).await;
        }
        if result.is_ok() {
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            let slot = idle.entry(key).or_default();
            if slot.len() < MAX_IDLE_PER_PEER {
                slot.push(conn);
            }
        }
        result
    }
}
