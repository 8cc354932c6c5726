//! SASL authentication (PLAIN, SCRAM-SHA-256/512) with Kafka's
//! SaslHandshake / SaslAuthenticate exchange, including re-authentication (KIP-368).
//!
//! A SASL listener accepts only ApiVersions, SaslHandshake and SaslAuthenticate until the
//! client has authenticated; anything else closes the connection, as Kafka does. A failed
//! authentication is answered with SASL_AUTHENTICATION_FAILED and the connection is closed.
//! With `connections.max.reauth.ms` set, SaslAuthenticate tells the client its session
//! lifetime and a connection that has not re-authenticated in time is closed at its next
//! request.

use super::scram;

use std::time::{Duration, Instant};

use kafka_protocol::messages::{
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::config::SaslConfig;
use crate::metrics::Metrics;

/// The principal of an unauthenticated PLAINTEXT or SSL (without client certificate)
/// connection.
pub const ANONYMOUS: &str = "User:ANONYMOUS";

/// SASL state of one connection.
pub struct Sasl {
    config: SaslConfig,
    max_reauth: Option<Duration>,
    mechanism: Option<String>,
    scram: Option<scram::ServerExchange>,
    /// `User:<name>` once authenticated.
    pub principal: Option<String>,
    /// Authenticated with a delegation token (SCRAM with `tokenauth=true`): the principal is
    /// the token's owner, and may not ask for tokens on this connection.
    pub token_authenticated: bool,
    expires: Option<Instant>,
}

/// What the connection does after a SASL request.
pub enum SaslOutcome {
    Handshake(SaslHandshakeResponse),
    /// Send the response; close the connection afterwards when `close` is set.
    Authenticate {
        response: SaslAuthenticateResponse,
        close: bool,
    },
}

impl Sasl {
    pub fn new(config: SaslConfig, max_reauth_ms: i64) -> Sasl {
        Sasl {
            config,
            max_reauth: (max_reauth_ms > 0).then(|| Duration::from_millis(max_reauth_ms as u64)),
            mechanism: None,
            scram: None,
            principal: None,
            token_authenticated: false,
            expires: None,
        }
    }

    /// Whether ordinary requests may be served: authenticated, and the session (if it has a
    /// lifetime) still valid.
    pub fn is_authenticated(&self) -> bool {
        self.principal.is_some() && self.expires.is_none_or(|e| Instant::now() < e)
    }

    pub fn handshake(&mut self, req: &SaslHandshakeRequest) -> SaslOutcome {
        let mechanisms: Vec<StrBytes> = self
            .config
            .mechanisms
            .iter()
            .map(|m| StrBytes::from_string(m.clone()))
            .collect();
        let base = SaslHandshakeResponse::default().with_mechanisms(mechanisms);
        // Re-authentication (KIP-368) is for sessions with a lifetime.
        if self.principal.is_some() && self.expires.is_none() {
            return SaslOutcome::Handshake(
                base.with_error_code(ResponseError::IllegalSaslState.code()),
            );
        }
        let wanted = req.mechanism.to_string();
        if !self.config.mechanisms.iter().any(|m| *m == wanted) {
            return SaslOutcome::Handshake(
                base.with_error_code(ResponseError::UnsupportedSaslMechanism.code()),
            );
        }
        self.scram = scram::Mechanism::parse(&wanted).map(scram::ServerExchange::new);
        self.mechanism = Some(wanted);
        SaslOutcome::Handshake(base)
    }

    /// One SaslAuthenticate step; `credentials` looks up the SCRAM credential of a user, or
    /// of a delegation token id when its second argument is set (see [`scram::Found`]).
    pub fn authenticate(
        &mut self,
        credentials: impl Fn(&str, bool, scram::Mechanism) -> Option<scram::Found>,
        metrics: &Metrics,
        req: &SaslAuthenticateRequest,
    ) -> SaslOutcome {
        let fail = |code: ResponseError, message: String| SaslOutcome::Authenticate {
            response: SaslAuthenticateResponse::default()
                .with_error_code(code.code())
                .with_error_message(Some(StrBytes::from_string(message))),
            close: true,
        };
        let Some(mechanism) = self.mechanism.clone() else {
            return fail(
                ResponseError::IllegalSaslState,
                "SaslAuthenticate request received before SaslHandshake".into(),
            );
        };
        let previous = self.principal.clone();
        let result = if mechanism == "PLAIN" {
            self.mechanism = None;
            plain(&self.config, &req.auth_bytes)
                .map(|user| (user, false, None, Vec::new()))
                .map_err(|m| (ResponseError::SaslAuthenticationFailed, m))
        } else if let Some(exchange) = self.scram.as_mut() {
            let m = scram::Mechanism::parse(&mechanism).unwrap_or(scram::Mechanism::Sha256);
            match exchange.step(&req.auth_bytes, |user, token| credentials(user, token, m)) {
                Ok(scram::Step::Continue(reply)) => {
                    return SaslOutcome::Authenticate {
                        response: SaslAuthenticateResponse::default().with_auth_bytes(reply.into()),
                        close: false,
                    }
                }
                Ok(scram::Step::Success {
                    user,
                    token_authenticated,
                    expiry_timestamp_ms,
                    reply,
                }) => {
                    self.scram = None;
                    self.mechanism = None;
                    Ok((user, token_authenticated, expiry_timestamp_ms, reply))
                }
                Err(message) => Err((ResponseError::SaslAuthenticationFailed, message)),
            }
        } else {
            Err((
                ResponseError::IllegalSaslState,
                format!("no SASL exchange in progress for {mechanism}"),
            ))
        };
        match result {
            Ok((user, token_authenticated, credential_expiry_ms, reply)) => {
                let principal = format!("User:{user}");
                if previous.as_ref().is_some_and(|p| *p != principal) {
                    // KIP-368: re-authentication must not change the principal.
                    return fail(
                        ResponseError::SaslAuthenticationFailed,
                        format!("Cannot change principals during re-authentication from {}: {principal}", previous.unwrap_or_default()),
                    );
                }
                self.principal = Some(principal);
                self.token_authenticated = token_authenticated;
                let lifetime = session_lifetime(
                    self.max_reauth,
                    credential_expiry_ms,
                    crate::clock::now_ms(),
                );
                self.expires = lifetime.map(|d| Instant::now() + d);
                let lifetime = lifetime.map_or(0, |d| d.as_millis() as i64);
                SaslOutcome::Authenticate {
                    response: SaslAuthenticateResponse::default()
                        .with_auth_bytes(reply.into())
                        .with_session_lifetime_ms(lifetime),
                    close: false,
                }
            }
            Err((code, message)) => {
                metrics.record_error(36, code.code());
                fail(code, message)
            }
        }
    }
}

/// Kafka's session lifetime: `connections.max.reauth.ms` and the credential's expiry (a
/// delegation token's), whichever ends first; none when neither is set.
fn session_lifetime(
    max_reauth: Option<Duration>,
    credential_expiry_ms: Option<i64>,
    now_ms: i64,
) -> Option<Duration> {
    let credential =
        credential_expiry_ms.map(|e| Duration::from_millis(e.saturating_sub(now_ms).max(0) as u64));
    match (max_reauth, credential) {
        (Some(m), Some(c)) => Some(m.min(c)),
        (m, c) => m.or(c),
    }
}

/// SASL/PLAIN: `authzid NUL user NUL password` checked against the listener's JAAS users.
fn plain(config: &SaslConfig, bytes: &[u8]) -> Result<String, String> {
    let invalid = || "Authentication failed: Invalid username or password".to_string();
    let mut parts = bytes.split(|&b| b == 0);
    let (Some(authzid), Some(user), Some(password), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("Invalid SASL/PLAIN response: expected 3 tokens".into());
    };
    let user = std::str::from_utf8(user).map_err(|_| invalid())?;
    if user.is_empty() {
        return Err("Authentication failed: username not specified".into());
    }
    if !authzid.is_empty() && authzid != user.as_bytes() {
        return Err("Authentication failed: Client requested an authorization id that is different from username".into());
    }
    match config.plain_users.get(user) {
        Some(expected)
            if aws_lc_rs::constant_time::verify_slices_are_equal(expected.as_bytes(), password)
                .is_ok() =>
        {
            Ok(user.to_string())
        }
        _ => Err(invalid()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_session_ends_when_the_token_expires_or_earlier_with_max_reauth() {
        let ms = Duration::from_millis;
        assert_eq!(session_lifetime(None, None, 1_000), None);
        assert_eq!(session_lifetime(Some(ms(500)), None, 1_000), Some(ms(500)));
        assert_eq!(session_lifetime(None, Some(4_000), 1_000), Some(ms(3_000)));
        assert_eq!(
            session_lifetime(Some(ms(500)), Some(4_000), 1_000),
            Some(ms(500))
        );
        assert_eq!(
            session_lifetime(Some(ms(5_000)), Some(4_000), 1_000),
            Some(ms(3_000))
        );
        // An expired token's session has no time left.
        assert_eq!(session_lifetime(None, Some(500), 1_000), Some(ms(0)));
    }
}
