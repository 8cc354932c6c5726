//! Listener security: Kafka's security protocols per listener, TLS keys (PEM) and SASL
//! settings (mechanisms, PLAIN users in JAAS syntax), with Kafka's setting names.

use std::collections::BTreeMap;

use super::{invalid, value, ConfigError, Listener};

/// Kafka's security protocols, mapped to listeners by `listener.security.protocol.map`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    pub fn parse(s: &str) -> Option<SecurityProtocol> {
        match s.trim() {
            "PLAINTEXT" => Some(SecurityProtocol::Plaintext),
            "SSL" => Some(SecurityProtocol::Ssl),
            "SASL_PLAINTEXT" => Some(SecurityProtocol::SaslPlaintext),
            "SASL_SSL" => Some(SecurityProtocol::SaslSsl),
            _ => None,
        }
    }
    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }
    pub fn uses_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }
}

pub(super) fn parse_protocol_map(
    text: &str,
) -> Result<BTreeMap<String, SecurityProtocol>, ConfigError> {
    let mut out = BTreeMap::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, proto) = item.split_once(':').ok_or_else(|| {
            invalid(
                "listener.security.protocol.map",
                text,
                "expected NAME:PROTOCOL,...",
            )
        })?;
        let p = SecurityProtocol::parse(proto).ok_or_else(|| {
            invalid(
                "listener.security.protocol.map",
                text,
                format!("unknown security protocol {proto}"),
            )
        })?;
        out.insert(name.trim().to_string(), p);
    }
    Ok(out)
}

pub(super) fn controller_listener_names(text: &str) -> Vec<String> {
    text.split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// Where TLS keys come from (PEM only: Kafka's `ssl.keystore.type=PEM`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfig {
    /// PEM certificate chain (from `ssl.keystore.location`, or inline
    /// `ssl.keystore.certificate.chain`).
    pub cert_chain_pem: String,
    /// PEM private key (the same file, or inline `ssl.keystore.key`).
    pub key_pem: String,
    /// PEM CA certificates for client certificates (`ssl.truststore.location` or inline
    /// `ssl.truststore.certificates`).
    pub truststore_pem: Option<String>,
    /// `ssl.client.auth`: none, requested or required.
    pub client_auth: ClientAuth,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    None,
    Requested,
    Required,
}

/// SASL settings of one listener.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SaslConfig {
    /// `sasl.enabled.mechanisms` (per listener: `listener.name.<l>.sasl.enabled.mechanisms`).
    pub mechanisms: Vec<String>,
    /// PLAIN users from the listener's JAAS config (`user_NAME="password"`).
    pub plain_users: BTreeMap<String, String>,
}

/// TLS and SASL settings per listener name.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SecurityConfig {
    pub tls: BTreeMap<String, TlsConfig>,
    pub sasl: BTreeMap<String, SaslConfig>,
    /// `connections.max.reauth.ms` (0: sessions never expire).
    pub max_reauth_ms: i64,
    /// `connection.failed.authentication.delay.ms` (KIP-306).
    pub failed_authentication_delay_ms: u64,
    /// `authorizer.class.name` is set (to Kafka's StandardAuthorizer or AclAuthorizer): ACLs
    /// are enforced.
    pub authorizer_enabled: bool,
    /// `super.users`: principals (`User:NAME`) allowed everything.
    pub super_users: Vec<String>,
    /// `allow.everyone.if.no.acl.found`.
    pub allow_everyone_if_no_acl_found: bool,
    /// `delegation.token.*`.
    pub delegation_token: DelegationTokenConfig,
}

/// The delegation token settings (KIP-48).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct DelegationTokenConfig {
    /// `delegation.token.secret.key`: tokens are served only when it is set (non-empty).
    pub secret_key: Option<String>,
    /// `delegation.token.max.lifetime.ms`: the longest a token lives, renewals included.
    pub max_lifetime_ms: i64,
    /// `delegation.token.expiry.time.ms`: how long a token lives until renewed.
    pub expiry_time_ms: i64,
    /// `delegation.token.expiry.check.interval.ms`: how often expired tokens are removed.
    pub expiry_check_interval_ms: i64,
}

/// The secret key stays out of logs.
impl std::fmt::Debug for DelegationTokenConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DelegationTokenConfig")
            .field("secret_key", &self.secret_key.as_ref().map(|_| "[hidden]"))
            .field("max_lifetime_ms", &self.max_lifetime_ms)
            .field("expiry_time_ms", &self.expiry_time_ms)
            .field("expiry_check_interval_ms", &self.expiry_check_interval_ms)
            .finish()
    }
}

impl DelegationTokenConfig {
    fn build(get: &dyn Fn(&str) -> String) -> Result<DelegationTokenConfig, ConfigError> {
        let positive = |key: &str| -> Result<i64, ConfigError> {
            let raw = get(key);
            let v = value::parse_long(key, &raw).map_err(|e| invalid(key, &raw, e))?;
            if v < 1 {
                return Err(invalid(key, &raw, "Value must be at least 1"));
            }
            Ok(v)
        };
        let secret = get("delegation.token.secret.key");
        Ok(DelegationTokenConfig {
            secret_key: (!secret.is_empty()).then_some(secret),
            max_lifetime_ms: positive("delegation.token.max.lifetime.ms")?,
            expiry_time_ms: positive("delegation.token.expiry.time.ms")?,
            expiry_check_interval_ms: positive("delegation.token.expiry.check.interval.ms")?,
        })
    }
}

/// The `authorizer.class.name` values Strata's built-in authorizer stands in for.
pub const AUTHORIZER_CLASSES: &[&str] = &[
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
    "strata",
];

/// Parses Kafka's JAAS `PlainLoginModule required user_alice="pw" ...;` for the users.
pub fn parse_plain_jaas(text: &str) -> BTreeMap<String, String> {
    let mut users = BTreeMap::new();
    let mut rest = text;
    while let Some(i) = rest.find("user_") {
        rest = &rest[i + 5..];
        let Some(eq) = rest.find('=') else { break };
        let name = rest[..eq].trim().to_string();
        let after = rest[eq + 1..].trim_start();
        let Some(stripped) = after.strip_prefix('"') else {
            continue;
        };
        let Some(end) = stripped.find('"') else { break };
        users.insert(name, stripped[..end].to_string());
        rest = &stripped[end + 1..];
    }
    users
}

/// How this broker reaches the other brokers' inter-broker listener (replica fetchers,
/// transaction markers and verifications): Kafka's client side of that listener's settings.
#[derive(Clone, PartialEq, Eq)]
pub struct InterBrokerSecurity {
    /// `inter.broker.listener.name`, the listener named by `security.inter.broker.protocol`,
    /// or else the first listener.
    pub listener: String,
    pub protocol: SecurityProtocol,
    /// Set when the listener uses TLS.
    pub tls: Option<InterBrokerTls>,
    /// Set when the listener uses SASL.
    pub sasl: Option<SaslCredentials>,
}

/// The TLS client side of the inter-broker listener.
#[derive(Clone, PartialEq, Eq)]
pub struct InterBrokerTls {
    /// The listener's keystore (PEM chain and key), presented as this broker's client
    /// certificate when a peer asks for one (`ssl.client.auth`).
    pub cert_chain_pem: Option<String>,
    pub key_pem: Option<String>,
    /// The listener's truststore: peers' certificates must chain to one of these.
    pub truststore_pem: String,
    /// `ssl.endpoint.identification.algorithm=https` (the default): the peer's certificate
    /// must name the host connected to. Empty: the chain is still verified, the name is not.
    pub verify_hostname: bool,
}

/// This broker's own SASL credentials for the inter-broker listener.
#[derive(Clone, PartialEq, Eq)]
pub struct SaslCredentials {
    /// PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
    pub mechanism: String,
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for InterBrokerSecurity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterBrokerSecurity")
            .field("listener", &self.listener)
            .field("protocol", &self.protocol)
            .field(
                "tls",
                &self.tls.as_ref().map(|t| {
                    format!(
                        "client certificate: {}, verify host name: {}",
                        t.cert_chain_pem.is_some(),
                        t.verify_hostname
                    )
                }),
            )
            .field(
                "sasl",
                &self
                    .sasl
                    .as_ref()
                    .map(|s| format!("{} as {}", s.mechanism, s.username)),
            )
            .finish()
    }
}

impl Default for InterBrokerSecurity {
    fn default() -> Self {
        InterBrokerSecurity {
            listener: String::new(),
            protocol: SecurityProtocol::Plaintext,
            tls: None,
            sasl: None,
        }
    }
}

/// The options of a JAAS login module line (`Module required key="value" key2=value2;`).
pub fn parse_jaas_options(text: &str) -> BTreeMap<String, String> {
    let chars: Vec<char> = text.chars().collect();
    let n = chars.len();
    let mut out = BTreeMap::new();
    let mut word = String::new();
    let mut i = 0;
    while i < n {
        let c = chars[i];
        if c == '=' && !word.is_empty() {
            let key = std::mem::take(&mut word);
            i += 1;
            while i < n && chars[i].is_whitespace() {
                i += 1;
            }
            let mut value = String::new();
            if i < n && chars[i] == '"' {
                i += 1;
                while i < n && chars[i] != '"' {
                    if chars[i] == '\\' && i + 1 < n {
                        i += 1;
                    }
                    value.push(chars[i]);
                    i += 1;
                }
                i += 1;
            } else {
                while i < n && !chars[i].is_whitespace() && chars[i] != ';' {
                    value.push(chars[i]);
                    i += 1;
                }
            }
            out.insert(key, value);
            continue;
        }
        if c.is_alphanumeric() || matches!(c, '_' | '.' | '-') {
            word.push(c);
        } else if c.is_whitespace() {
            // `key = value`: keep the word only when an `=` follows.
            let mut j = i;
            while j < n && chars[j].is_whitespace() {
                j += 1;
            }
            if j >= n || chars[j] != '=' {
                word.clear();
            }
            i = j;
            continue;
        } else {
            word.clear();
        }
        i += 1;
    }
    out
}

/// A listener-prefixed setting (`listener.name.<l>.<key>`) or else the plain one, as Kafka
/// resolves them: (the key found, its value).
fn listener_setting(
    explicit: &BTreeMap<String, String>,
    listener: &str,
    key: &str,
) -> Option<(String, String)> {
    let prefixed = format!("listener.name.{}.{key}", listener.to_lowercase());
    explicit
        .get(&prefixed)
        .map(|v| (prefixed.clone(), v.clone()))
        .or_else(|| explicit.get(key).map(|v| (key.to_string(), v.clone())))
}

impl InterBrokerSecurity {
    /// Resolves the inter-broker listener and this broker's client settings for it. Fails
    /// (naming the setting) when a TLS listener has no truststore or a SASL listener has no
    /// credentials for the inter-broker mechanism.
    pub(super) fn build(
        explicit: &BTreeMap<String, String>,
        listeners: &[Listener],
        security: &SecurityConfig,
    ) -> Result<InterBrokerSecurity, ConfigError> {
        let listener = inter_broker_listener(explicit, listeners)?;
        let l = listener.name.as_str();
        let mut out = InterBrokerSecurity {
            listener: l.to_string(),
            protocol: listener.security,
            tls: None,
            sasl: None,
        };
        if listener.security.uses_tls() {
            out.tls = Some(InterBrokerTls::build(explicit, l, security)?);
        }
        if listener.security.uses_sasl() {
            out.sasl = Some(SaslCredentials::build(explicit, l, security)?);
        }
        Ok(out)
    }
}

/// The listener brokers talk to each other on: `inter.broker.listener.name`, the listener
/// named like `security.inter.broker.protocol` (setting both is an error), or else the
/// first listener.
fn inter_broker_listener<'a>(
    explicit: &BTreeMap<String, String>,
    listeners: &'a [Listener],
) -> Result<&'a Listener, ConfigError> {
    let by_name = explicit
        .get("inter.broker.listener.name")
        .filter(|n| !n.trim().is_empty());
    let by_protocol = explicit
        .get("security.inter.broker.protocol")
        .filter(|p| !p.trim().is_empty());
    Ok(match (by_name, by_protocol) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                "security.inter.broker.protocol",
                by_protocol.map_or("", |s| s.as_str()),
                "Only one of inter.broker.listener.name and security.inter.broker.protocol should be set",
            ))
        }
        (Some(name), None) => listeners
            .iter()
            .find(|l| l.name == name.trim())
            .ok_or_else(|| {
                invalid(
                    "inter.broker.listener.name",
                    name,
                    "must be the name of one of the listeners",
                )
            })?,
        (None, Some(protocol)) => {
            let p = protocol.trim();
            if SecurityProtocol::parse(p).is_none() {
                return Err(invalid(
                    "security.inter.broker.protocol",
                    p,
                    "expected PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL",
                ));
            }
            // Kafka's ListenerName.forSecurityProtocol: the listener named like it.
            listeners.iter().find(|l| l.name == p).ok_or_else(|| {
                invalid(
                    "security.inter.broker.protocol",
                    p,
                    format!("no listener is named {p}; name one in listeners or set inter.broker.listener.name instead"),
                )
            })?
        }
        (None, None) => &listeners[0],
    })
}

impl InterBrokerTls {
    /// The client side of the TLS listener `l`: its truststore (required: brokers verify
    /// each other's certificates), its keystore as the client certificate, and whether the
    /// peer's host name is verified (`ssl.endpoint.identification.algorithm`).
    fn build(
        explicit: &BTreeMap<String, String>,
        l: &str,
        security: &SecurityConfig,
    ) -> Result<InterBrokerTls, ConfigError> {
        let keystore = security.tls.get(l);
        let truststore_pem = keystore.and_then(|t| t.truststore_pem.clone()).ok_or_else(|| {
            invalid(
                &format!("listener.name.{}.ssl.truststore.location", l.to_lowercase()),
                "",
                format!("the inter-broker listener {l} uses TLS: brokers verify each other's certificates against its truststore; set listener.name.{}.ssl.truststore.location (or ssl.truststore.location / ssl.truststore.certificates)", l.to_lowercase()),
            )
        })?;
        let algorithm = listener_setting(explicit, l, "ssl.endpoint.identification.algorithm")
            .unwrap_or_else(|| {
                (
                    "ssl.endpoint.identification.algorithm".into(),
                    "https".into(),
                )
            });
        let verify_hostname = match algorithm.1.trim().to_lowercase().as_str() {
            "https" => true,
            "" => false,
            other => {
                return Err(invalid(
                    &algorithm.0,
                    other,
                    "expected https (verify the peer's host name) or empty (do not)",
                ))
            }
        };
        Ok(InterBrokerTls {
            cert_chain_pem: keystore.map(|t| t.cert_chain_pem.clone()),
            key_pem: keystore.map(|t| t.key_pem.clone()),
            truststore_pem,
            verify_hostname,
        })
    }
}

impl SaslCredentials {
    /// This broker's credentials on the SASL listener `l`: the mechanism
    /// (`sasl.mechanism.inter.broker.protocol`, or the listener's first enabled one) and the
    /// username and password of its JAAS config.
    fn build(
        explicit: &BTreeMap<String, String>,
        l: &str,
        security: &SecurityConfig,
    ) -> Result<SaslCredentials, ConfigError> {
        let enabled = security
            .sasl
            .get(l)
            .map(|s| s.mechanisms.clone())
            .unwrap_or_default();
        let key = "sasl.mechanism.inter.broker.protocol";
        let mechanism = match explicit.get(key).map(|m| m.trim().to_uppercase()) {
            Some(m) if !m.is_empty() => {
                if !matches!(m.as_str(), "PLAIN" | "SCRAM-SHA-256" | "SCRAM-SHA-512") {
                    return Err(invalid(
                        key,
                        &m,
                        "Strata brokers authenticate to each other with PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512",
                    ));
                }
                if !enabled.contains(&m) {
                    return Err(invalid(
                        key,
                        &m,
                        format!("{key} must be included in sasl.enabled.mechanisms of listener {l} when SASL is used for inter-broker communication"),
                    ));
                }
                m
            }
            // Kafka's default (GSSAPI) is not supported: the listener's first mechanism.
            _ => enabled.first().cloned().ok_or_else(|| {
                invalid(
                    "sasl.enabled.mechanisms",
                    "",
                    format!("the inter-broker listener {l} enables no SASL mechanism"),
                )
            })?,
        };
        let jaas_key = format!(
            "listener.name.{}.{}.sasl.jaas.config",
            l.to_lowercase(),
            mechanism.to_lowercase()
        );
        let options = explicit
            .get(&jaas_key)
            .or_else(|| explicit.get("sasl.jaas.config"))
            .map(|v| parse_jaas_options(v))
            .unwrap_or_default();
        let (Some(username), Some(password)) = (options.get("username"), options.get("password"))
        else {
            return Err(invalid(
                &jaas_key,
                "",
                format!("the inter-broker listener {l} uses SASL/{mechanism}: set this broker's own username=\"...\" password=\"...\" in {jaas_key} (or sasl.jaas.config)"),
            ));
        };
        Ok(SaslCredentials {
            mechanism,
            username: username.clone(),
            password: password.clone(),
        })
    }
}

impl SecurityConfig {
    pub(super) fn build(
        explicit: &BTreeMap<String, String>,
        get: &dyn Fn(&str) -> String,
        listeners: &[Listener],
    ) -> Result<SecurityConfig, ConfigError> {
        let delay_key = "connection.failed.authentication.delay.ms";
        let failed_authentication_delay_ms = value::parse_long(delay_key, &get(delay_key))
            .map_err(|e| invalid(delay_key, &get(delay_key), e))?
            .max(0) as u64;
        let authorizer_class = get("authorizer.class.name");
        let authorizer_class = authorizer_class.trim();
        if !authorizer_class.is_empty() && !AUTHORIZER_CLASSES.contains(&authorizer_class) {
            return Err(invalid(
                "authorizer.class.name",
                authorizer_class,
                format!(
                    "Strata's built-in ACL authorizer is enabled by one of {}",
                    AUTHORIZER_CLASSES.join(", ")
                ),
            ));
        }
        let super_users = parse_super_users(&get("super.users"));
        if let Some(bad) = super_users.iter().find(|u| !u.contains(':')) {
            return Err(invalid(
                "super.users",
                &get("super.users"),
                format!("{bad} is not a principal of the form Type:name (e.g. User:admin)"),
            ));
        }
        let allow_everyone = get("allow.everyone.if.no.acl.found");
        let allow_everyone_if_no_acl_found = value::parse_bool(&allow_everyone)
            .map_err(|e| invalid("allow.everyone.if.no.acl.found", &allow_everyone, e))?;
        let mut out = SecurityConfig {
            delegation_token: DelegationTokenConfig::build(get)?,
            authorizer_enabled: !authorizer_class.is_empty(),
            super_users,
            allow_everyone_if_no_acl_found,
            failed_authentication_delay_ms,
            max_reauth_ms: value::parse_long(
                "connections.max.reauth.ms",
                &get("connections.max.reauth.ms"),
            )
            .map_err(|e| {
                invalid(
                    "connections.max.reauth.ms",
                    &get("connections.max.reauth.ms"),
                    e,
                )
            })?,
            ..Default::default()
        };
        for l in listeners {
            if l.security.uses_tls() {
                out.tls
                    .insert(l.name.clone(), TlsConfig::build(explicit, &l.name)?);
            }
            if l.security.uses_sasl() {
                out.sasl
                    .insert(l.name.clone(), SaslConfig::build(explicit, &l.name)?);
            }
        }
        Ok(out)
    }
}

impl TlsConfig {
    /// The TLS settings of `listener` (a listener-prefixed setting wins over the plain one,
    /// as in Kafka): its PEM keystore, inline or read from `ssl.keystore.location`, its
    /// truststore and `ssl.client.auth`. Reads the files named.
    pub fn build(
        explicit: &BTreeMap<String, String>,
        listener: &str,
    ) -> Result<TlsConfig, ConfigError> {
        if let Some((k, t)) = listener_setting(explicit, listener, "ssl.keystore.type") {
            if !t.eq_ignore_ascii_case("PEM") {
                return Err(invalid(
                    &k,
                    &t,
                    "only PEM keystores are supported (ssl.keystore.type=PEM)",
                ));
            }
        }
        let (cert_chain_pem, key_pem) = match (
            listener_setting(explicit, listener, "ssl.keystore.certificate.chain"),
            listener_setting(explicit, listener, "ssl.keystore.key"),
            listener_setting(explicit, listener, "ssl.keystore.location"),
        ) {
            (Some((_, chain)), Some((_, key)), _) => (chain, key),
            (_, _, Some((k, path))) => {
                let pem = read_pem(&k, &path)?;
                (pem.clone(), pem)
            }
            _ => {
                return Err(invalid(
                    "listeners",
                    listener,
                    format!("listener {listener} uses TLS but has no ssl.keystore.location (PEM with certificate chain and key) or ssl.keystore.certificate.chain + ssl.keystore.key"),
                ))
            }
        };
        let truststore_pem = match (
            listener_setting(explicit, listener, "ssl.truststore.certificates"),
            listener_setting(explicit, listener, "ssl.truststore.location"),
        ) {
            (Some((_, pem)), _) => Some(pem),
            (None, Some((k, path))) => Some(read_pem(&k, &path)?),
            _ => None,
        };
        let client_auth = match listener_setting(explicit, listener, "ssl.client.auth")
            .map(|(_, v)| v.to_lowercase())
        {
            None => ClientAuth::None,
            Some(v) if v == "none" => ClientAuth::None,
            Some(v) if v == "requested" => ClientAuth::Requested,
            Some(v) if v == "required" => ClientAuth::Required,
            Some(v) => {
                return Err(invalid(
                    "ssl.client.auth",
                    &v,
                    "expected none, requested or required",
                ))
            }
        };
        if client_auth != ClientAuth::None && truststore_pem.is_none() {
            return Err(invalid(
                "ssl.client.auth",
                "required",
                "client authentication needs ssl.truststore.location",
            ));
        }
        Ok(TlsConfig {
            cert_chain_pem,
            key_pem,
            truststore_pem,
            client_auth,
        })
    }
}

/// A PEM file named by the setting `key`.
fn read_pem(key: &str, path: &str) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|e| invalid(key, path, e))
}

impl SaslConfig {
    /// The SASL settings of `listener` (a listener-prefixed setting wins over the plain one,
    /// as in Kafka): its enabled mechanisms and the PLAIN users of its JAAS config.
    fn build(
        explicit: &BTreeMap<String, String>,
        listener: &str,
    ) -> Result<SaslConfig, ConfigError> {
        let mechanisms: Vec<String> =
            listener_setting(explicit, listener, "sasl.enabled.mechanisms")
                .map(|(_, v)| v)
                .unwrap_or_else(|| "GSSAPI".to_string())
                .split(',')
                .map(|m| m.trim().to_uppercase())
                .filter(|m| !m.is_empty())
                .collect();
        for m in &mechanisms {
            if !matches!(m.as_str(), "PLAIN" | "SCRAM-SHA-256" | "SCRAM-SHA-512") {
                return Err(invalid(
                    "sasl.enabled.mechanisms",
                    m,
                    "supported mechanisms: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512",
                ));
            }
        }
        let plain_users = listener_setting(explicit, listener, "plain.sasl.jaas.config")
            .or_else(|| listener_setting(explicit, listener, "sasl.jaas.config"))
            .map(|(_, v)| parse_plain_jaas(&v))
            .unwrap_or_default();
        Ok(SaslConfig {
            mechanisms,
            plain_users,
        })
    }
}

/// Parses `super.users` (`User:alice;User:bob`).
pub fn parse_super_users(value: &str) -> Vec<String> {
    value
        .split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::*;

    fn build(pairs: &[(&str, &str)]) -> Result<BrokerConfig, ConfigError> {
        let m: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        BrokerConfig::build(&[m])
    }

    #[test]
    fn listeners_map_to_security_protocols_as_kafka_does() {
        let c = build(&[
            (
                "listeners",
                "PLAINTEXT://127.0.0.1:0,CLIENT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
            ),
            (
                "listener.security.protocol.map",
                "PLAINTEXT:PLAINTEXT,CLIENT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
            ),
            ("controller.listener.names", "CONTROLLER"),
            (
                "listener.name.client.sasl.enabled.mechanisms",
                "SCRAM-SHA-512",
            ),
            ("advertised.listeners", "CLIENT://broker1.example:9093"),
        ])
        .unwrap();
        // The controller listener of a KRaft config is not served.
        let names: Vec<&str> = c.listeners.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, vec!["PLAINTEXT", "CLIENT"]);
        assert_eq!(c.listeners[1].security, SecurityProtocol::SaslPlaintext);
        assert_eq!(c.listeners[1].advertised_host, "broker1.example");
        assert_eq!(c.listeners[1].advertised_port, 9093);
        assert_eq!(c.security.sasl["CLIENT"].mechanisms, vec!["SCRAM-SHA-512"]);
    }

    #[test]
    fn bad_security_settings_name_the_problem() {
        let e = build(&[("listeners", "CLIENT://127.0.0.1:0")]).unwrap_err();
        assert!(
            e.to_string()
                .contains("no security protocol for listener CLIENT"),
            "{e}"
        );
        let e = build(&[("listeners", "SSL://127.0.0.1:0")]).unwrap_err();
        assert!(e.to_string().contains("ssl.keystore.location"), "{e}");
        let e = build(&[
            ("listeners", "SSL://127.0.0.1:0"),
            ("ssl.keystore.type", "JKS"),
            ("ssl.keystore.location", "/x.jks"),
        ])
        .unwrap_err();
        assert!(e.to_string().contains("only PEM keystores"), "{e}");
        let e = build(&[
            ("listeners", "SASL_PLAINTEXT://127.0.0.1:0"),
            ("sasl.enabled.mechanisms", "GSSAPI"),
        ])
        .unwrap_err();
        assert!(e.to_string().contains("supported mechanisms"), "{e}");
    }

    fn cert(name: &str) -> String {
        format!("{}/tests/it/certs/{name}", env!("CARGO_MANIFEST_DIR"))
    }

    /// A PLAINTEXT listener and a SASL_SSL INTERNAL one with keys, plus `extra`.
    fn internal(extra: &[(&str, &str)]) -> Result<BrokerConfig, ConfigError> {
        let keystore = cert("broker.pem");
        let truststore = cert("ca.pem");
        let mut pairs = vec![
            (
                "listeners",
                "PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
            ),
            (
                "listener.security.protocol.map",
                "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL",
            ),
            ("inter.broker.listener.name", "INTERNAL"),
            ("ssl.keystore.type", "PEM"),
            ("ssl.keystore.location", keystore.as_str()),
            ("ssl.truststore.location", truststore.as_str()),
            ("sasl.enabled.mechanisms", "SCRAM-SHA-512,PLAIN"),
            (
                "listener.name.internal.scram-sha-512.sasl.jaas.config",
                r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="s3cret";"#,
            ),
        ];
        pairs.extend_from_slice(extra);
        build(&pairs)
    }

    #[test]
    fn the_inter_broker_listener_gives_tls_and_sasl_client_settings() {
        let c = internal(&[]).unwrap();
        let ib = &c.replication.inter_broker;
        assert_eq!(ib.listener, "INTERNAL");
        assert_eq!(ib.protocol, SecurityProtocol::SaslSsl);
        let tls = ib.tls.as_ref().unwrap();
        assert!(tls.verify_hostname, "https is the default");
        assert!(
            tls.cert_chain_pem.is_some(),
            "the keystore is the client cert"
        );
        // Kafka's GSSAPI default is not supported: the listener's first mechanism.
        let sasl = ib.sasl.as_ref().unwrap();
        assert_eq!(
            (
                sasl.mechanism.as_str(),
                sasl.username.as_str(),
                sasl.password.as_str()
            ),
            ("SCRAM-SHA-512", "broker", "s3cret")
        );
        assert!(
            !format!("{:?}", c.replication).contains("s3cret"),
            "no password in Debug"
        );

        let c = internal(&[
            ("sasl.mechanism.inter.broker.protocol", "PLAIN"),
            (
                "listener.name.internal.plain.sasl.jaas.config",
                r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="b1" password="p w" user_b1="p w";"#,
            ),
            ("listener.name.internal.ssl.endpoint.identification.algorithm", ""),
        ])
        .unwrap();
        let ib = &c.replication.inter_broker;
        let sasl = ib.sasl.as_ref().unwrap();
        assert_eq!(
            (sasl.mechanism.as_str(), sasl.password.as_str()),
            ("PLAIN", "p w")
        );
        assert!(!ib.tls.as_ref().unwrap().verify_hostname);

        // security.inter.broker.protocol names the listener called like the protocol.
        let c = build(&[
            ("listeners", "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"),
            ("security.inter.broker.protocol", "SASL_PLAINTEXT"),
            ("sasl.enabled.mechanisms", "PLAIN"),
            (
                "sasl.jaas.config",
                r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="b" password="x" user_b="x";"#,
            ),
        ])
        .unwrap();
        assert_eq!(
            c.replication.inter_broker_listener_name.as_deref(),
            Some("SASL_PLAINTEXT")
        );
        assert!(c.replication.inter_broker.tls.is_none());
        // Neither set: the first listener, plaintext.
        let c = build(&[("listeners", "PLAINTEXT://127.0.0.1:0")]).unwrap();
        assert_eq!(c.replication.inter_broker.listener, "PLAINTEXT");
        assert!(c.replication.inter_broker_listener_name.is_none());
    }

    #[test]
    fn missing_inter_broker_truststore_or_credentials_fail_naming_the_setting() {
        let keystore = cert("broker.pem");
        let e = build(&[
            ("listeners", "SSL://127.0.0.1:0"),
            ("ssl.keystore.location", keystore.as_str()),
        ])
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("listener.name.ssl.ssl.truststore.location"),
            "{e}"
        );
        let e = internal(&[(
            "listener.name.internal.scram-sha-512.sasl.jaas.config",
            r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="broker";"#,
        )])
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("listener.name.internal.scram-sha-512.sasl.jaas.config"),
            "{e}"
        );
        let e = internal(&[("sasl.mechanism.inter.broker.protocol", "GSSAPI")]).unwrap_err();
        assert!(
            e.to_string()
                .contains("PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"),
            "{e}"
        );
        let e = internal(&[("sasl.mechanism.inter.broker.protocol", "SCRAM-SHA-256")]).unwrap_err();
        assert!(
            e.to_string()
                .contains("must be included in sasl.enabled.mechanisms"),
            "{e}"
        );
        let e = internal(&[("security.inter.broker.protocol", "SASL_SSL")]).unwrap_err();
        assert!(e.to_string().contains("Only one of"), "{e}");
        let e = internal(&[("ssl.endpoint.identification.algorithm", "ldap")]).unwrap_err();
        assert!(
            e.to_string()
                .contains("ssl.endpoint.identification.algorithm"),
            "{e}"
        );
    }

    #[test]
    fn jaas_options_parse_quoted_and_bare_values() {
        let o = parse_jaas_options(
            r#"org.apache.kafka.common.security.plain.PlainLoginModule required username = "admin" password="a \"q\" b" user_admin="x" tokenauth=true;"#,
        );
        assert_eq!(o["username"], "admin");
        assert_eq!(o["password"], r#"a "q" b"#);
        assert_eq!(o["user_admin"], "x");
        assert_eq!(o["tokenauth"], "true");
        assert!(!o.contains_key("required"));
    }

    #[test]
    fn plain_users_come_from_kafkas_jaas_syntax() {
        let users = parse_plain_jaas(
            r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="a" user_admin="a" user_alice = "p w";"#,
        );
        assert_eq!(users.len(), 2);
        assert_eq!(users["admin"], "a");
        assert_eq!(users["alice"], "p w");
    }
}
