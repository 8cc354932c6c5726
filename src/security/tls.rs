//! TLS listeners with rustls: server certificates from PEM (Kafka's `ssl.keystore.type=PEM`),
//! optional client certificates verified against the truststore (`ssl.client.auth`), whose
//! subject becomes the principal as Kafka's default `ssl.principal.mapping.rules` make it.
//! And the client side brokers use towards each other's inter-broker listener
//! ([`connector`]): the same listener's truststore and keystore, with host-name verification
//! per `ssl.endpoint.identification.algorithm`.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::client::WebPkiServerVerifier;
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig,
    SignatureScheme,
};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::config::{ClientAuth, InterBrokerTls, TlsConfig};

/// Builds the acceptor of one TLS listener; errors name what is wrong with the keys.
pub fn acceptor(cfg: &TlsConfig) -> anyhow::Result<TlsAcceptor> {
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(cfg.cert_chain_pem.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|e| anyhow::anyhow!("ssl.keystore: bad certificate PEM: {e}"))?;
    if certs.is_empty() {
        anyhow::bail!("ssl.keystore: no certificate in the PEM");
    }
    let key = PrivateKeyDer::from_pem_slice(cfg.key_pem.as_bytes())
        .map_err(|e| anyhow::anyhow!("ssl.keystore: no usable private key in the PEM: {e}"))?;
    let builder = ServerConfig::builder();
    let builder = match (&cfg.truststore_pem, cfg.client_auth) {
        (Some(pem), auth) if auth != ClientAuth::None => {
            let mut roots = RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                let c = c.map_err(|e| anyhow::anyhow!("ssl.truststore: bad PEM: {e}"))?;
                roots
                    .add(c)
                    .map_err(|e| anyhow::anyhow!("ssl.truststore: {e}"))?;
            }
            let verifier = WebPkiClientVerifier::builder(Arc::new(roots));
            let verifier = if auth == ClientAuth::Requested {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            builder.with_client_cert_verifier(
                verifier
                    .build()
                    .map_err(|e| anyhow::anyhow!("ssl.truststore: {e}"))?,
            )
        }
        _ => builder.with_no_client_auth(),
    };
    let config = builder
        .with_single_cert(certs, key)
        .map_err(|e| anyhow::anyhow!("ssl.keystore: certificate and key do not match: {e}"))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Builds the TLS client of the inter-broker listener: peers must present a certificate
/// chaining to the listener's truststore (and naming the host, unless
/// `ssl.endpoint.identification.algorithm` is empty); this broker presents the listener's
/// keystore certificate when a peer asks for one.
pub fn connector(cfg: &InterBrokerTls) -> anyhow::Result<TlsConnector> {
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(cfg.truststore_pem.as_bytes()) {
        let c = c.map_err(|e| anyhow::anyhow!("ssl.truststore: bad PEM: {e}"))?;
        roots
            .add(c)
            .map_err(|e| anyhow::anyhow!("ssl.truststore: {e}"))?;
    }
    if roots.is_empty() {
        anyhow::bail!("ssl.truststore: no certificate in the PEM");
    }
    let webpki = WebPkiServerVerifier::builder(Arc::new(roots))
        .build()
        .map_err(|e| anyhow::anyhow!("ssl.truststore: {e}"))?;
    let builder = ClientConfig::builder();
    let builder = if cfg.verify_hostname {
        builder.with_webpki_verifier(webpki)
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(ChainOnly(webpki)))
    };
    let config = match (&cfg.cert_chain_pem, &cfg.key_pem) {
        (Some(chain), Some(key)) => {
            let certs: Vec<CertificateDer<'static>> =
                CertificateDer::pem_slice_iter(chain.as_bytes())
                    .collect::<Result<_, _>>()
                    .map_err(|e| anyhow::anyhow!("ssl.keystore: bad certificate PEM: {e}"))?;
            let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).map_err(|e| {
                anyhow::anyhow!("ssl.keystore: no usable private key in the PEM: {e}")
            })?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| anyhow::anyhow!("ssl.keystore: {e}"))?
        }
        _ => builder.with_no_client_auth(),
    };
    Ok(TlsConnector::from(Arc::new(config)))
}

/// `ssl.endpoint.identification.algorithm=` (empty): the peer's chain is verified against the
/// truststore, its host name is not. webpki checks the chain before the name, so a name
/// mismatch is the only error this lets through.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, tokio_rustls::rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(tokio_rustls::rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, tokio_rustls::rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, tokio_rustls::rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// The TLS listeners' acceptors, replaced when a listener's keystore or truststore is
/// updated at run time (Kafka's dynamic SSL reconfiguration, KIP-226): a connection takes
/// the acceptor in force when it is accepted; connections already open keep theirs.
#[derive(Default)]
pub struct ListenerTls(RwLock<HashMap<String, (TlsConfig, TlsAcceptor)>>);

impl ListenerTls {
    /// The acceptors of `listeners` (a listener whose keys do not load is left out: the
    /// start fails on it when it binds).
    pub fn new<'a>(listeners: impl IntoIterator<Item = (&'a String, &'a TlsConfig)>) -> Self {
        let map = listeners
            .into_iter()
            .filter_map(|(name, cfg)| Some((name.clone(), (cfg.clone(), acceptor(cfg).ok()?))))
            .collect();
        ListenerTls(RwLock::new(map))
    }

    pub fn acceptor(&self, listener: &str) -> Option<TlsAcceptor> {
        self.0
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(listener)
            .map(|(_, a)| a.clone())
    }

    /// Whether `listener` serves with exactly `cfg` now.
    pub fn serves(&self, listener: &str, cfg: &TlsConfig) -> bool {
        self.0
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(listener)
            .is_some_and(|(current, _)| current == cfg)
    }

    /// Checks new keys for `listener`: they load, and (Kafka's default,
    /// `ssl.allow.dn.changes` and `ssl.allow.san.changes` false) the certificate names the
    /// same subject and alternative names as the one in force.
    pub fn check(&self, listener: &str, new: &TlsConfig) -> Result<(), String> {
        acceptor(new).map_err(|e| format!("{e:#}"))?;
        let map = self.0.read().unwrap_or_else(|e| e.into_inner());
        if let Some((current, _)) = map.get(listener) {
            let (old_dn, old_san) = identity(&current.cert_chain_pem).unwrap_or_default();
            let (new_dn, new_san) = identity(&new.cert_chain_pem).unwrap_or_default();
            if old_dn != new_dn {
                return Err(format!(
                    "Keystore DistinguishedName does not match: existing={old_dn}, new={new_dn}"
                ));
            }
            if old_san != new_san {
                return Err("Keystore SubjectAltNames do not match".to_string());
            }
        }
        Ok(())
    }

    /// Serves new connections of `listener` with `cfg` from now on.
    pub fn install(&self, listener: &str, cfg: TlsConfig, acceptor: TlsAcceptor) {
        self.0
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(listener.to_string(), (cfg, acceptor));
    }
}

/// The subject and the raw subjectAltName extension of the first certificate of a PEM chain.
fn identity(chain_pem: &str) -> Option<(String, Vec<u8>)> {
    let first = CertificateDer::pem_slice_iter(chain_pem.as_bytes())
        .next()?
        .ok()?;
    let dn = subject_dn(first.as_ref())?;
    Some((dn, subject_alt_names(first.as_ref()).unwrap_or_default()))
}

/// The value of the subjectAltName extension (2.5.29.17) of a DER certificate.
fn subject_alt_names(der: &[u8]) -> Option<Vec<u8>> {
    let (_, cert, _) = tlv(der)?;
    let (_, tbs, _) = tlv(cert)?;
    let mut rest = tbs;
    while !rest.is_empty() {
        let (tag, contents, after) = tlv(rest)?;
        rest = after;
        if tag != 0xa3 {
            continue;
        }
        let (_, extensions, _) = tlv(contents)?;
        let mut exts = extensions;
        while !exts.is_empty() {
            let (_, ext, after) = tlv(exts)?;
            exts = after;
            let (_, oid, mut fields) = tlv(ext)?;
            if oid != [0x55, 0x1d, 0x11] {
                continue;
            }
            loop {
                let (tag, value, after) = tlv(fields)?;
                if tag == 0x04 {
                    return Some(value.to_vec());
                }
                fields = after;
            }
        }
    }
    None
}

/// Kafka's principal for a client certificate: `User:` and the subject's distinguished name
/// (RFC 2253 order, as Java's `X500Principal.getName()`), e.g. `User:CN=alice,O=Example`.
pub fn principal_of(cert: &CertificateDer<'_>) -> Option<String> {
    subject_dn(cert.as_ref()).map(|dn| format!("User:{dn}"))
}

/// A minimal DER walk to the subject of an X.509 certificate.
fn subject_dn(der: &[u8]) -> Option<String> {
    // Certificate ::= SEQUENCE { tbsCertificate SEQUENCE { [0] version?, serial, sigAlg,
    // issuer, validity, subject, ... } ... }
    let (_, cert, _) = tlv(der)?;
    let (_, tbs, _) = tlv(cert)?;
    let mut rest = tbs;
    let mut fields = Vec::new();
    while !rest.is_empty() && fields.len() < 6 {
        let (tag, _, after) = tlv(rest)?;
        fields.push((tag, &rest[..rest.len() - after.len()]));
        rest = after;
    }
    // Skip the optional explicit version tag.
    let offset = usize::from(fields.first()?.0 == 0xa0);
    let subject = fields.get(offset + 4)?.1;
    let (_, rdns, _) = tlv(subject)?;
    let mut parts = Vec::new();
    let mut rest = rdns;
    while !rest.is_empty() {
        let (_, set, after) = tlv(rest)?;
        let (_, atv, _) = tlv(set)?;
        let (_, oid, after_oid) = tlv(atv)?;
        let (_, value, _) = tlv(after_oid)?;
        let name = match oid {
            [0x55, 0x04, 0x03] => "CN",
            [0x55, 0x04, 0x0a] => "O",
            [0x55, 0x04, 0x0b] => "OU",
            [0x55, 0x04, 0x06] => "C",
            [0x55, 0x04, 0x07] => "L",
            [0x55, 0x04, 0x08] => "ST",
            _ => "OID",
        };
        parts.push(format!("{name}={}", String::from_utf8_lossy(value)));
        rest = after;
    }
    parts.reverse();
    Some(parts.join(","))
}

/// One DER TLV: (tag, contents, rest).
fn tlv(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let tag = *b.first()?;
    let first = *b.get(1)? as usize;
    let (len, header) = if first < 0x80 {
        (first, 2)
    } else {
        let n = first & 0x7f;
        if n == 0 || n > 4 {
            return None;
        }
        let mut len = 0usize;
        for i in 0..n {
            len = (len << 8) | *b.get(2 + i)? as usize;
        }
        (len, 2 + n)
    };
    let end = header.checked_add(len)?;
    Some((tag, b.get(header..end)?, b.get(end..)?))
}
