//! A minimal Kafka wire client for tests: size-prefixed frames, request headers with the
//! version each API needs, responses decoded with `kafka-protocol`'s client side.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long a test waits for any single response before failing.
pub const IO_TIMEOUT: Duration = Duration::from_secs(15);

pub struct Client {
    pub stream: TcpStream,
    next_correlation_id: i32,
}

/// Encodes a request frame (size prefix included).
pub fn encode_frame<R: Request>(version: i16, correlation_id: i32, req: &R) -> BytesMut {
    let api = ApiKey::try_from(R::KEY).expect("known api key");
    let mut buf = BytesMut::with_capacity(256);
    buf.put_i32(0);
    let mut header = RequestHeader::default();
    header.request_api_key = R::KEY;
    header.request_api_version = version;
    header.correlation_id = correlation_id;
    header.client_id = Some(StrBytes::from_static_str("strata-it"));
    header
        .encode(&mut buf, api.request_header_version(version))
        .expect("encode request header");
    req.encode(&mut buf, version).expect("encode request body");
    let len = (buf.len() - 4) as i32;
    buf[..4].copy_from_slice(&len.to_be_bytes());
    buf
}

/// Splits a response frame into its header and body, decoding the header for `R`'s API.
pub fn decode_response<R: Request>(
    version: i16,
    mut frame: Bytes,
) -> (ResponseHeader, R::Response) {
    let api = ApiKey::try_from(R::KEY).expect("known api key");
    let header = ResponseHeader::decode(&mut frame, api.response_header_version(version))
        .expect("decode response header");
    let body = <R::Response as Decodable>::decode(&mut frame, version)
        .unwrap_or_else(|e| panic!("decode {api:?} v{version} response: {e:#}"));
    assert_eq!(
        frame.remaining(),
        0,
        "{api:?} v{version} response has trailing bytes"
    );
    (header, body)
}

impl Client {
    pub async fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).await.expect("connect to broker");
        stream.set_nodelay(true).unwrap();
        Client {
            stream,
            next_correlation_id: 1,
        }
    }

    pub fn next_correlation_id(&mut self) -> i32 {
        let id = self.next_correlation_id;
        self.next_correlation_id += 1;
        id
    }

    pub async fn write_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes).await?;
        self.stream.flush().await
    }

    /// Sends a request without waiting; returns its correlation id.
    pub async fn send<R: Request>(&mut self, version: i16, req: &R) -> i32 {
        let id = self.next_correlation_id();
        let frame = encode_frame(version, id, req);
        self.write_raw(&frame).await.expect("write request");
        id
    }

    /// Reads one size-prefixed frame (without the prefix).
    pub async fn read_frame(&mut self) -> std::io::Result<Bytes> {
        tokio::time::timeout(IO_TIMEOUT, async {
            let size = self.stream.read_i32().await?;
            assert!(size >= 0, "negative response size {size}");
            let mut buf = vec![0u8; size as usize];
            self.stream.read_exact(&mut buf).await?;
            Ok(Bytes::from(buf))
        })
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no response in time"))?
    }

    /// Reads the response to a request of type `R` sent at `version`.
    pub async fn recv<R: Request>(&mut self, version: i16) -> (ResponseHeader, R::Response) {
        let frame = self.read_frame().await.expect("read response");
        decode_response::<R>(version, frame)
    }

    /// Sends a request and reads its response, checking the correlation id.
    pub async fn call<R: Request>(&mut self, version: i16, req: &R) -> R::Response {
        let id = self.send(version, req).await;
        let (header, body) = self.recv::<R>(version).await;
        assert_eq!(
            header.correlation_id,
            id,
            "correlation id of {:?}",
            ApiKey::try_from(R::KEY)
        );
        body
    }

    /// True when the broker closed the connection (EOF or reset) within `within`.
    pub async fn is_closed_by_peer(&mut self, within: Duration) -> bool {
        let mut buf = [0u8; 256];
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match tokio::time::timeout_at(deadline, self.stream.read(&mut buf)).await {
                Err(_) => return false,
                Ok(Ok(0)) => return true,
                Ok(Err(_)) => return true,
                // Bytes of a response: keep reading until EOF.
                Ok(Ok(_)) => continue,
            }
        }
    }
}

/// A raw request frame whose header claims `api`/`version` but whose body is `body` (for
/// versions the encoder refuses, and for garbage).
pub fn raw_frame(api: i16, version: i16, correlation_id: i32, body: &[u8]) -> BytesMut {
    let mut buf = BytesMut::new();
    buf.put_i32(0);
    buf.put_i16(api);
    buf.put_i16(version);
    buf.put_i32(correlation_id);
    buf.put_slice(body);
    let len = (buf.len() - 4) as i32;
    buf[..4].copy_from_slice(&len.to_be_bytes());
    buf
}

/// Rewrites the api version of an encoded frame (size prefix included).
pub fn patch_version(frame: &mut BytesMut, version: i16) {
    frame[6..8].copy_from_slice(&version.to_be_bytes());
}
