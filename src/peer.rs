//! A connection from this broker to another broker's inter-broker listener, carrying one
//! request at a time: the replica fetcher's Fetch and ListOffsets, and (through [`PeerPool`])
//! the coordinators' WriteTxnMarkers and transaction verifications.
//!
//! Security follows the inter-broker listener ([`PeerSecurity`], built at start-up): TLS
//! with that listener's truststore (and its keystore as client certificate; both follow the
//! listener's keys when they are reloaded at run time, for connections opened from then
//! on), then SASL
//! (SaslHandshake v1 + SaslAuthenticate v2) with this broker's own credentials for
//! `sasl.mechanism.inter.broker.protocol`. When the peer answers a session lifetime
//! (`connections.max.reauth.ms`, KIP-368), the connection re-authenticates in place before a
//! request once 85-95% of it has passed, as Kafka's clients do. A connection that fails for
//! any reason is dropped and its owner connects again; a follower fetches from its own log
//! end offset, so no replication progress is lost either way.
//!
//! Errors: [`PeerError::Authentication`] (wrong credentials, a mechanism the peer does not
//! enable, a TLS certificate refused) needs a person to fix the configuration; the others are
//! transient.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, RequestHeader, ResponseHeader, SaslAuthenticateRequest, SaslHandshakeRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};
use kafka_protocol::ResponseError;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::config::security::{InterBrokerTls, TlsConfig};
use crate::config::{InterBrokerSecurity, SaslCredentials};
use crate::security::scram;

/// Largest response frame accepted from a peer.
const MAX_RESPONSE_BYTES: usize = 512 << 20;
const SASL_HANDSHAKE_VERSION: i16 = 1;
const SASL_AUTHENTICATE_VERSION: i16 = 2;

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
    /// The peer refused this broker's TLS certificate or SASL credentials, or this broker
    /// refused the peer's certificate: a configuration problem, not a transient one.
    #[error("authentication with {addr} failed: {message}")]
    Authentication { addr: String, message: String },
}

impl PeerError {
    /// Whether retrying cannot help until someone changes a configuration.
    pub fn is_authentication(&self) -> bool {
        matches!(self, PeerError::Authentication { .. })
    }
}

/// How this broker connects to other brokers: the client side of the inter-broker listener.
pub struct PeerSecurity {
    /// The TLS settings in force and their connector; replaced when the inter-broker
    /// listener's keys are reloaded ([`PeerSecurity::reload_tls`]).
    tls: std::sync::RwLock<Option<(InterBrokerTls, TlsConnector)>>,
    sasl: Option<SaslCredentials>,
}

impl std::fmt::Debug for PeerSecurity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerSecurity")
            .field("tls", &self.connector().is_some())
            .field("sasl", &self.sasl.as_ref().map(|s| &s.mechanism))
            .finish()
    }
}

impl PeerSecurity {
    /// Plaintext, unauthenticated.
    pub fn plaintext() -> PeerSecurity {
        PeerSecurity {
            tls: std::sync::RwLock::new(None),
            sasl: None,
        }
    }

    /// From the validated inter-broker settings; fails on unusable TLS keys (at start-up).
    pub fn new(cfg: &InterBrokerSecurity) -> anyhow::Result<PeerSecurity> {
        let tls = match &cfg.tls {
            Some(t) => Some((
                t.clone(),
                crate::security::tls::connector(t).map_err(|e| {
                    anyhow::anyhow!("inter-broker listener {}: {e:#}", cfg.listener)
                })?,
            )),
            None => None,
        };
        Ok(PeerSecurity {
            tls: std::sync::RwLock::new(tls),
            sasl: cfg.sasl.clone(),
        })
    }

    fn connector(&self) -> Option<TlsConnector> {
        self.tls
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|(_, c)| c.clone())
    }

    /// The inter-broker listener's keys were reloaded as `listener`: connections opened from
    /// now on present its new keystore and trust its new truststore (open ones keep theirs,
    /// as Kafka's do). Returns whether anything changed; keys that do not load change
    /// nothing. Without TLS towards peers there is nothing to reload.
    pub fn reload_tls(&self, listener: &TlsConfig) -> anyhow::Result<bool> {
        let mut tls = self.tls.write().unwrap_or_else(|e| e.into_inner());
        let Some((current, _)) = tls.as_ref() else {
            return Ok(false);
        };
        let Some(truststore_pem) = listener.truststore_pem.clone() else {
            anyhow::bail!("the inter-broker listener has no truststore to verify peers with");
        };
        let next = InterBrokerTls {
            cert_chain_pem: Some(listener.cert_chain_pem.clone()),
            key_pem: Some(listener.key_pem.clone()),
            truststore_pem,
            verify_hostname: current.verify_hostname,
        };
        if *current == next {
            return Ok(false);
        }
        let connector = crate::security::tls::connector(&next)?;
        *tls = Some((next, connector));
        Ok(true)
    }
}

/// A byte stream to a peer: TCP, or TLS over TCP.
trait PeerIo: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> PeerIo for T {}

pub struct PeerConnection {
    stream: Box<dyn PeerIo>,
    addr: String,
    client_id: StrBytes,
    next_correlation_id: i32,
    sasl: Option<SaslCredentials>,
    /// When to re-authenticate (KIP-368), if the peer gave the session a lifetime.
    reauthenticate_at: Option<Instant>,
}

impl PeerConnection {
    /// Connects, then completes TLS and SASL as `security` says, all within `timeout`.
    pub async fn connect(
        host: &str,
        port: u16,
        client_id: String,
        security: &PeerSecurity,
        timeout: Duration,
    ) -> Result<PeerConnection, PeerError> {
        let connecting = Self::connect_within(host, port, client_id, security, timeout);
        match tokio::time::timeout(timeout, connecting).await {
            Ok(r) => r,
            Err(_) => Err(PeerError::Timeout(timeout)),
        }
    }

    async fn connect_within(
        host: &str,
        port: u16,
        client_id: String,
        security: &PeerSecurity,
        timeout: Duration,
    ) -> Result<PeerConnection, PeerError> {
        let addr = format!("{host}:{port}");
        let tcp = match TcpStream::connect(&addr).await {
            Ok(s) => s,
            Err(source) => return Err(PeerError::Connect { addr, source }),
        };
        let _ = tcp.set_nodelay(true);
        let stream: Box<dyn PeerIo> = match security.connector() {
            None => Box::new(tcp),
            Some(connector) => {
                let name = ServerName::try_from(host.to_string()).map_err(|e| {
                    PeerError::Authentication {
                        addr: addr.clone(),
                        message: format!("{host} is not a valid TLS server name: {e}"),
                    }
                })?;
                match connector.connect(name, tcp).await {
                    Ok(s) => Box::new(s),
                    // A certificate refused (by either side) surfaces as InvalidData.
                    Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                        return Err(PeerError::Authentication {
                            addr,
                            message: format!("TLS handshake: {e}"),
                        })
                    }
                    Err(e) => return Err(PeerError::Io(e)),
                }
            }
        };
        let mut conn = PeerConnection {
            stream,
            addr,
            client_id: StrBytes::from_string(client_id),
            next_correlation_id: 0,
            sasl: security.sasl.clone(),
            reauthenticate_at: None,
        };
        conn.authenticate(timeout).await?;
        Ok(conn)
    }

    /// SaslHandshake and SaslAuthenticate with this broker's credentials, if it has any
    /// (also to re-authenticate an open connection, KIP-368).
    async fn authenticate(&mut self, timeout: Duration) -> Result<(), PeerError> {
        let Some(creds) = self.sasl.clone() else {
            return Ok(());
        };
        let handshake = SaslHandshakeRequest::default()
            .with_mechanism(StrBytes::from_string(creds.mechanism.clone()));
        let h = self
            .exchange(SASL_HANDSHAKE_VERSION, &handshake, timeout)
            .await?;
        match ResponseError::try_from_code(h.error_code) {
            None => {}
            Some(ResponseError::UnsupportedSaslMechanism) => {
                let enabled: Vec<&str> = h.mechanisms.iter().map(|m| m.as_str()).collect();
                return Err(self.refused(format!(
                    "the peer does not enable SASL mechanism {} (it enables {}): check sasl.mechanism.inter.broker.protocol",
                    creds.mechanism,
                    enabled.join(", ")
                )));
            }
            Some(e) => return Err(self.refused(format!("SaslHandshake refused: {e:?}"))),
        }
        let started = Instant::now();
        let lifetime_ms = match scram::Mechanism::parse(&creds.mechanism) {
            None => {
                // PLAIN: authzid NUL user NUL password.
                let mut token = vec![0];
                token.extend_from_slice(creds.username.as_bytes());
                token.push(0);
                token.extend_from_slice(creds.password.as_bytes());
                self.sasl_step(token, timeout).await?.1
            }
            Some(m) => {
                let client = scram::ClientExchange::new(m, &creds.username, &creds.password);
                let (server_first, _) = self.sasl_step(client.first(), timeout).await?;
                let (last, expected) = client
                    .finish(&server_first)
                    .map_err(|e| self.refused(format!("SCRAM: {e}")))?;
                let (server_final, lifetime) = self.sasl_step(last, timeout).await?;
                if server_final != expected {
                    return Err(self.refused(
                        "SCRAM: the peer's server signature does not match this broker's credential".into(),
                    ));
                }
                lifetime
            }
        };
        self.reauthenticate_at = (lifetime_ms > 0).then(|| {
            // Kafka's clients re-authenticate at 85-95% of the session lifetime.
            let mut jitter = [0u8; 1];
            let _ = aws_lc_rs::rand::fill(&mut jitter);
            let fraction = 0.85 + 0.1 * f64::from(jitter[0]) / 255.0;
            started + Duration::from_millis((lifetime_ms as f64 * fraction) as u64)
        });
        Ok(())
    }

    fn refused(&self, message: String) -> PeerError {
        PeerError::Authentication {
            addr: self.addr.clone(),
            message,
        }
    }

    /// One SaslAuthenticate round: (the server's bytes, its session lifetime in ms).
    async fn sasl_step(
        &mut self,
        bytes: Vec<u8>,
        timeout: Duration,
    ) -> Result<(Vec<u8>, i64), PeerError> {
        let request = SaslAuthenticateRequest::default().with_auth_bytes(bytes.into());
        let r = self
            .exchange(SASL_AUTHENTICATE_VERSION, &request, timeout)
            .await?;
        if r.error_code != 0 {
            let error = ResponseError::try_from_code(r.error_code)
                .map_or_else(|| format!("error {}", r.error_code), |e| format!("{e:?}"));
            let message = r.error_message.as_deref().unwrap_or("");
            return Err(self.refused(format!("{error}: {message}")));
        }
        Ok((r.auth_bytes.to_vec(), r.session_lifetime_ms))
    }

    /// Sends `request` at `version` and waits up to `timeout` for its response (first
    /// re-authenticating when the session is about to expire).
    pub async fn call<R: Request>(
        &mut self,
        version: i16,
        request: &R,
        timeout: Duration,
    ) -> Result<R::Response, PeerError> {
        if self
            .reauthenticate_at
            .is_some_and(|at| Instant::now() >= at)
        {
            tracing::debug!(peer = %self.addr, "re-authenticating (KIP-368)");
            self.authenticate(timeout).await?;
        }
        self.exchange(version, request, timeout).await
    }

    async fn exchange<R: Request>(
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
            self.stream.flush().await?;
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
/// connection that fails (the peer restarted, or closed an expired session) is replaced by a
/// fresh one once.
pub struct PeerPool {
    security: Arc<PeerSecurity>,
    idle: Mutex<HashMap<(String, u16), Vec<PeerConnection>>>,
}

impl Default for PeerPool {
    fn default() -> Self {
        PeerPool::new(PeerSecurity::plaintext())
    }
}

impl PeerPool {
    pub fn new(security: PeerSecurity) -> PeerPool {
        PeerPool {
            security: Arc::new(security),
            idle: Mutex::new(HashMap::new()),
        }
    }

    /// The inter-broker security new connections use.
    pub fn security(&self) -> &PeerSecurity {
        &self.security
    }

    /// A dedicated connection with the inter-broker security (replica fetchers keep one per
    /// leader).
    pub async fn connect(
        &self,
        host: &str,
        port: u16,
        client_id: String,
        timeout: Duration,
    ) -> Result<PeerConnection, PeerError> {
        PeerConnection::connect(host, port, client_id, &self.security, timeout).await
    }

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
                self.connect(host, port, client_id.to_string(), connect_timeout)
                    .await?,
                false,
            ),
        };
        let mut result = conn.call(version, request, timeout).await;
        if reused && matches!(result, Err(PeerError::Io(_))) {
            conn = self
                .connect(host, port, client_id.to_string(), connect_timeout)
                .await?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::security::ClientAuth;

    fn certs(file: &str) -> String {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/certs");
        std::fs::read_to_string(dir.join(file)).unwrap()
    }

    fn listener(keystore: &str, truststore: &str) -> TlsConfig {
        let pem = certs(keystore);
        TlsConfig {
            cert_chain_pem: pem.clone(),
            key_pem: pem,
            truststore_pem: Some(certs(truststore)),
            client_auth: ClientAuth::Required,
        }
    }

    fn security(keystore: &str, truststore: &str) -> PeerSecurity {
        let pem = certs(keystore);
        let tls = InterBrokerTls {
            cert_chain_pem: Some(pem.clone()),
            key_pem: Some(pem),
            truststore_pem: certs(truststore),
            verify_hostname: true,
        };
        PeerSecurity {
            tls: std::sync::RwLock::new(Some((
                tls.clone(),
                crate::security::tls::connector(&tls).unwrap(),
            ))),
            sasl: None,
        }
    }

    fn in_force(s: &PeerSecurity) -> InterBrokerTls {
        s.tls.read().unwrap().as_ref().unwrap().0.clone()
    }

    #[test]
    fn the_listeners_reloaded_keys_become_the_client_side_and_bad_ones_change_nothing() {
        let s = security("broker.pem", "ca.pem");
        assert!(!s.reload_tls(&listener("broker.pem", "ca.pem")).unwrap());
        // A new keystore and truststore: both are what new connections use.
        assert!(s
            .reload_tls(&listener("other-host.pem", "untrusted-ca.pem"))
            .unwrap());
        let now = in_force(&s);
        assert_eq!(
            now.cert_chain_pem.as_deref(),
            Some(certs("other-host.pem").as_str())
        );
        assert_eq!(now.truststore_pem, certs("untrusted-ca.pem"));
        assert!(
            now.verify_hostname,
            "the host name check is not a listener setting"
        );
        // Keys that do not load, or no truststore: the keys in force stay.
        let mut broken = listener("broker.pem", "ca.pem");
        broken.truststore_pem = Some("not a certificate".into());
        assert!(s.reload_tls(&broken).is_err());
        broken.truststore_pem = None;
        assert!(s.reload_tls(&broken).is_err());
        assert!(in_force(&s) == now);
        // A broker without TLS towards its peers has nothing to reload.
        assert!(!PeerSecurity::plaintext()
            .reload_tls(&listener("broker.pem", "ca.pem"))
            .unwrap());
    }
}
