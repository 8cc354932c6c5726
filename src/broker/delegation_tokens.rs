//! The delegation tokens a broker holds (see [`crate::security::delegation_token`]): read by
//! SCRAM authentication and DescribeDelegationToken, changed by Create/Renew/Expire and the
//! periodic expiry check.
//!
//! Consistency: on a single node a change is decided and applied under the catalog write
//! lock, then the catalog file is written (the change is undone if that fails). In cluster
//! mode the change is decided against this broker's copy and proposed to the quorum; every
//! broker rebuilds its tokens from the quorum's records in the metadata sync. Only token
//! information is stored, never the HMAC or the secret.
//!
//! Retries: none here; a failed write is the client's error to retry. The expiry check runs
//! again at its next interval.

use super::*;
use crate::security::delegation_token::{Token, TokenCache, TokenError, TokenInfo};
use crate::security::scram::{Found, Mechanism};

/// One change to the tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenChange {
    /// A new token, or new timestamps for one.
    Put(TokenInfo),
    /// A token expired or removed.
    Remove(String),
}

/// Why a token write failed.
#[derive(Debug, thiserror::Error)]
pub enum TokenWriteError {
    #[error(transparent)]
    Refused(#[from] TokenError),
    #[error("storing the delegation token failed: {0}")]
    Storage(#[from] io::Error),
}

impl Broker {
    /// The credential for a SCRAM user name or, with `token`, a delegation token id (and the
    /// token's owner as the authorization id).
    pub fn scram_lookup(&self, user: &str, token: bool, m: Mechanism) -> Option<Found> {
        if !token {
            return self.scram_credential(user, m).map(|credential| Found {
                credential,
                authorization_id: user.to_string(),
                expiry_timestamp_ms: None,
            });
        }
        let tokens = self
            .delegation_tokens
            .read()
            .unwrap_or_else(|e| e.into_inner());
        let t = tokens.get(user)?;
        Some(Found {
            credential: t.credential(m)?.clone(),
            authorization_id: t.info.owner.name.clone(),
            expiry_timestamp_ms: Some(t.info.expiry_timestamp_ms),
        })
    }

    /// The tokens with their HMACs (DescribeDelegationToken).
    pub fn delegation_tokens(&self) -> Vec<(TokenInfo, Vec<u8>)> {
        self.delegation_tokens
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .tokens()
            .map(|t| (t.info.clone(), t.hmac.clone()))
            .collect()
    }

    /// Decides a change against the current tokens with `decide` and stores it; returns what
    /// `decide` returned once the change is durable (single node) or synced (cluster).
    /// Blocking.
    pub fn write_delegation_token<T>(
        &self,
        decide: impl FnOnce(&TokenCache) -> Result<(T, TokenChange), TokenError>,
    ) -> Result<T, TokenWriteError> {
        if let Some(q) = self.quorum() {
            let (out, change) = decide(
                &self
                    .delegation_tokens
                    .read()
                    .unwrap_or_else(|e| e.into_inner()),
            )?;
            q.delegation_token(&change)?;
            return Ok(out);
        }
        let _w = self
            .catalog_writes
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let before = self
            .delegation_tokens
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let (out, change) = decide(&before)?;
        let mut after = before.clone();
        match change {
            TokenChange::Put(info) if after.get(&info.token_id).is_some() => after.update(info),
            TokenChange::Put(info) => {
                let Some(secret) = self.config.security.delegation_token.secret_key.as_deref()
                else {
                    return Err(TokenError::AuthDisabled.into());
                };
                after.insert(Token::derive(secret, info));
            }
            TokenChange::Remove(id) => {
                after.remove(&id);
            }
        }
        *self
            .delegation_tokens
            .write()
            .unwrap_or_else(|e| e.into_inner()) = after;
        self.save_metadata().inspect_err(|_| {
            *self
                .delegation_tokens
                .write()
                .unwrap_or_else(|e| e.into_inner()) = before;
        })?;
        Ok(out)
    }

    /// Removes the tokens expired by now (the periodic check). In cluster mode only the
    /// broker that is the active controller proposes the removals. Blocking.
    pub fn remove_expired_delegation_tokens(&self) {
        let now = now_ms();
        let expired = self
            .delegation_tokens
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .expired(now);
        if expired.is_empty() {
            return;
        }
        if let Some(q) = self.quorum() {
            if q.active_controller() != Some(self.config.node_id) {
                return;
            }
        }
        for id in expired {
            let removed = self.write_delegation_token(|tokens| match tokens.get(&id) {
                Some(t) if t.info.is_expired(now) => Ok(((), TokenChange::Remove(id.clone()))),
                _ => Err(TokenError::NotFound),
            });
            match removed {
                Ok(()) => tracing::info!(token_id = %id, "delegation token expired and removed"),
                Err(TokenWriteError::Refused(_)) => {}
                Err(e) => {
                    tracing::warn!(token_id = %id, error = %e, "removing an expired delegation token failed; retrying at the next check");
                    return;
                }
            }
        }
    }

    /// Cluster mode: replaces the tokens with the quorum's (from the metadata sync).
    pub(super) fn replace_delegation_tokens(&self, infos: Vec<TokenInfo>) {
        let secret = self.config.security.delegation_token.secret_key.as_deref();
        // Derive new tokens' credentials outside the lock.
        let rebuilt = self
            .delegation_tokens
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .rebuilt(secret, infos);
        *self
            .delegation_tokens
            .write()
            .unwrap_or_else(|e| e.into_inner()) = rebuilt;
    }

    /// The token information to write to the catalog file.
    pub(super) fn delegation_token_infos(&self) -> Vec<TokenInfo> {
        self.delegation_tokens
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .infos()
    }
}
