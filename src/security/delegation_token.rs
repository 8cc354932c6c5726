//! Delegation tokens (KIP-48, with the token requester of KIP-373), as Kafka's
//! DelegationTokenControlManager and DelegationTokenManager decide them: free of I/O, each
//! rule takes the time and the token and returns the new token or the error Kafka answers.
//!
//! A token is its information (id, owner, requester, renewers, issue / expiry / max
//! timestamps) plus its HMAC: HMAC-SHA512 of the token id keyed with
//! `delegation.token.secret.key`. The HMAC is the token's password: a client authenticates
//! with SCRAM using the token id as user name, the base64 HMAC as password and the extension
//! `tokenauth=true`, and is then the token's owner. Only the information is stored (the
//! broker catalog, the metadata quorum); every broker recomputes the HMAC from the secret it
//! is configured with, and the SCRAM credentials from the HMAC, as Kafka's brokers do.
//!
//! Tokens are served only with a secret key. A token expires at its expiry timestamp (renew
//! moves it, never past the max timestamp); expired tokens are removed by a periodic check
//! (`delegation.token.expiry.check.interval.ms`) and, until then, still authenticate, as in
//! Kafka.

use std::collections::BTreeMap;

use aws_lc_rs::hmac;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use serde::{Deserialize, Serialize};

use super::scram::{self, Credential, Mechanism};
use crate::config::DelegationTokenConfig;

/// Kafka's principal type of users, the only type a renewer may have.
pub const USER_TYPE: &str = "User";

/// The SCRAM iterations of a token's credentials (Kafka's minimum for both mechanisms).
pub const TOKEN_ITERATIONS: i32 = 4096;

/// A Kafka principal (`Type:name`); equal when type and name are.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Principal {
    pub principal_type: String,
    pub name: String,
}

impl Principal {
    pub fn new(principal_type: &str, name: &str) -> Principal {
        Principal {
            principal_type: principal_type.to_string(),
            name: name.to_string(),
        }
    }

    /// Parses `Type:name` (a connection's principal); without a colon, a user.
    pub fn parse(text: &str) -> Principal {
        match text.split_once(':') {
            Some((t, n)) => Principal::new(t, n),
            None => Principal::new(USER_TYPE, text),
        }
    }
}

impl std::fmt::Display for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.principal_type, self.name)
    }
}

/// What Kafka keeps of a token (its DelegationTokenRecord): never the HMAC or the secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenInfo {
    pub token_id: String,
    pub owner: Principal,
    pub requester: Principal,
    #[serde(default)]
    pub renewers: Vec<Principal>,
    pub issue_timestamp_ms: i64,
    pub expiry_timestamp_ms: i64,
    pub max_timestamp_ms: i64,
}

impl TokenInfo {
    /// Kafka's `TokenInformation.ownerOrRenewer`: the owner, the requester or a renewer.
    pub fn owner_or_renewer(&self, p: &Principal) -> bool {
        self.owner == *p || self.requester == *p || self.renewers.contains(p)
    }

    /// Who may renew or expire it: the owner or a renewer.
    pub fn allowed_to_renew(&self, p: &Principal) -> bool {
        self.owner == *p || self.renewers.contains(p)
    }

    pub fn is_expired(&self, now_ms: i64) -> bool {
        self.max_timestamp_ms < now_ms || self.expiry_timestamp_ms < now_ms
    }
}

/// The errors of the token APIs, each one Kafka error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("delegation tokens are disabled: delegation.token.secret.key is not set")]
    AuthDisabled,
    #[error("delegation token requests are not allowed on this connection")]
    RequestNotAllowed,
    #[error("not authorized to create or describe tokens for this owner")]
    AuthorizationFailed,
    #[error("renewers must be users")]
    InvalidPrincipalType,
    #[error("delegation token not found")]
    NotFound,
    #[error("delegation token expired")]
    Expired,
    #[error("the principal is neither the token's owner nor one of its renewers")]
    OwnerMismatch,
}

/// HMAC-SHA512 of the token id keyed with the secret (Kafka's `createHmac`).
pub fn token_hmac(secret: &str, token_id: &str) -> Vec<u8> {
    let key = hmac::Key::new(hmac::HMAC_SHA512, secret.as_bytes());
    hmac::sign(&key, token_id.as_bytes()).as_ref().to_vec()
}

/// A new token for `owner`, requested by `requester` at `now_ms`; `max_lifetime_ms` > 0 asks
/// for a shorter life than `delegation.token.max.lifetime.ms`.
pub fn create(
    config: &DelegationTokenConfig,
    now_ms: i64,
    token_id: String,
    owner: Principal,
    requester: Principal,
    renewers: Vec<Principal>,
    max_lifetime_ms: i64,
) -> Result<TokenInfo, TokenError> {
    if config.secret_key.is_none() {
        return Err(TokenError::AuthDisabled);
    }
    let max_lifetime = if max_lifetime_ms > 0 {
        config.max_lifetime_ms.min(max_lifetime_ms)
    } else {
        config.max_lifetime_ms
    };
    let max_timestamp_ms = now_ms.saturating_add(max_lifetime);
    let expiry_timestamp_ms = max_timestamp_ms.min(now_ms.saturating_add(config.expiry_time_ms));
    if renewers.iter().any(|r| r.principal_type != USER_TYPE) {
        return Err(TokenError::InvalidPrincipalType);
    }
    Ok(TokenInfo {
        token_id,
        owner,
        requester,
        renewers,
        issue_timestamp_ms: now_ms,
        expiry_timestamp_ms,
        max_timestamp_ms,
    })
}

/// The checks renew and expire share: enabled, found, not expired, owner or renewer.
fn check<'a>(
    config: &DelegationTokenConfig,
    token: Option<&'a TokenInfo>,
    now_ms: i64,
    principal: &Principal,
) -> Result<&'a TokenInfo, TokenError> {
    if config.secret_key.is_none() {
        return Err(TokenError::AuthDisabled);
    }
    let token = token.ok_or(TokenError::NotFound)?;
    if token.is_expired(now_ms) {
        return Err(TokenError::Expired);
    }
    if !token.allowed_to_renew(principal) {
        return Err(TokenError::OwnerMismatch);
    }
    Ok(token)
}

/// Renews `token` (found by its HMAC) for `renew_period_ms` (> 0; else, or when longer,
/// `delegation.token.expiry.time.ms`), never past its max timestamp.
pub fn renew(
    config: &DelegationTokenConfig,
    token: Option<&TokenInfo>,
    now_ms: i64,
    principal: &Principal,
    renew_period_ms: i64,
) -> Result<TokenInfo, TokenError> {
    let token = check(config, token, now_ms, principal)?;
    let period = if renew_period_ms > 0 {
        config.expiry_time_ms.min(renew_period_ms)
    } else {
        config.expiry_time_ms
    };
    let mut renewed = token.clone();
    renewed.expiry_timestamp_ms = token.max_timestamp_ms.min(now_ms.saturating_add(period));
    Ok(renewed)
}

/// What expiring a token does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expiry {
    /// A negative period: the token is removed now; Kafka answers the period itself as the
    /// expiry timestamp.
    Removed { token_id: String, answer_ms: i64 },
    /// The token now expires at its new expiry timestamp.
    Updated(TokenInfo),
}

impl Expiry {
    /// The expiry timestamp the response carries.
    pub fn expiry_timestamp_ms(&self) -> i64 {
        match self {
            Expiry::Removed { answer_ms, .. } => *answer_ms,
            Expiry::Updated(t) => t.expiry_timestamp_ms,
        }
    }
}

/// Expires `token` (found by its HMAC) `expiry_period_ms` from now: a negative period
/// removes it at once, otherwise it expires then (never past its max timestamp).
pub fn expire(
    config: &DelegationTokenConfig,
    token: Option<&TokenInfo>,
    now_ms: i64,
    principal: &Principal,
    expiry_period_ms: i64,
) -> Result<Expiry, TokenError> {
    let token = check(config, token, now_ms, principal)?;
    if expiry_period_ms < 0 {
        return Ok(Expiry::Removed {
            token_id: token.token_id.clone(),
            answer_ms: expiry_period_ms,
        });
    }
    let mut updated = token.clone();
    updated.expiry_timestamp_ms = token
        .max_timestamp_ms
        .min(now_ms.saturating_add(expiry_period_ms));
    Ok(Expiry::Updated(updated))
}

/// Kafka's `DelegationTokenManager.filterToken`: whether DescribeDelegationToken shows
/// `token` to `requester`. `owners` (when given) keeps tokens owned, requested or renewable
/// by one of them; the requester sees its own tokens, and others with DESCRIBE on the token
/// (`may_describe_token`) or DESCRIBE_TOKENS on its owner (`may_describe_owner`).
pub fn describable(
    requester: &Principal,
    owners: Option<&[Principal]>,
    token: &TokenInfo,
    may_describe_token: impl Fn(&str) -> bool,
    may_describe_owner: impl Fn(&Principal) -> bool,
) -> bool {
    if owners.is_some_and(|os| !os.iter().any(|o| token.owner_or_renewer(o))) {
        return false;
    }
    token.owner_or_renewer(requester)
        || may_describe_token(&token.token_id)
        || may_describe_owner(&token.owner)
}

/// A token as a broker holds it: its information, its HMAC and the SCRAM credentials derived
/// from the HMAC.
#[derive(Debug, Clone)]
pub struct Token {
    pub info: TokenInfo,
    pub hmac: Vec<u8>,
    credentials: BTreeMap<Mechanism, Credential>,
}

impl Token {
    /// Derives the HMAC and the SCRAM credentials (PBKDF2 with 4096 iterations per
    /// mechanism: CPU work, a few milliseconds).
    pub fn derive(secret: &str, info: TokenInfo) -> Token {
        let hmac = token_hmac(secret, &info.token_id);
        let password = B64.encode(&hmac);
        let credentials = [Mechanism::Sha256, Mechanism::Sha512]
            .into_iter()
            .map(|m| {
                (
                    m,
                    scram::credential_for_password(m, &password, TOKEN_ITERATIONS),
                )
            })
            .collect();
        Token {
            info,
            hmac,
            credentials,
        }
    }

    pub fn credential(&self, m: Mechanism) -> Option<&Credential> {
        self.credentials.get(&m)
    }
}

/// The tokens a broker holds, by id.
#[derive(Debug, Clone, Default)]
pub struct TokenCache {
    tokens: BTreeMap<String, Token>,
}

impl TokenCache {
    /// The cache for `infos`, reusing the derived credentials of `self` for tokens whose id
    /// is unchanged (the HMAC depends on the id only), so a sync does not derive them again.
    pub fn rebuilt(&self, secret: Option<&str>, infos: Vec<TokenInfo>) -> TokenCache {
        let Some(secret) = secret else {
            // Without the secret no token can be checked or used.
            return TokenCache::default();
        };
        let tokens = infos
            .into_iter()
            .map(|info| {
                let token = match self.tokens.get(&info.token_id) {
                    Some(old) => Token {
                        info: info.clone(),
                        hmac: old.hmac.clone(),
                        credentials: old.credentials.clone(),
                    },
                    None => Token::derive(secret, info.clone()),
                };
                (info.token_id, token)
            })
            .collect();
        TokenCache { tokens }
    }

    pub fn get(&self, token_id: &str) -> Option<&Token> {
        self.tokens.get(token_id)
    }

    /// The token whose HMAC is `hmac` (renew and expire name a token by its HMAC).
    pub fn by_hmac(&self, hmac: &[u8]) -> Option<&Token> {
        self.tokens
            .values()
            .find(|t| aws_lc_rs::constant_time::verify_slices_are_equal(&t.hmac, hmac).is_ok())
    }

    pub fn insert(&mut self, token: Token) {
        self.tokens.insert(token.info.token_id.clone(), token);
    }

    /// Replaces a token's information, keeping its derived credentials.
    pub fn update(&mut self, info: TokenInfo) {
        if let Some(t) = self.tokens.get_mut(&info.token_id) {
            t.info = info;
        }
    }

    pub fn remove(&mut self, token_id: &str) -> bool {
        self.tokens.remove(token_id).is_some()
    }

    pub fn infos(&self) -> Vec<TokenInfo> {
        self.tokens.values().map(|t| t.info.clone()).collect()
    }

    pub fn tokens(&self) -> impl Iterator<Item = &Token> {
        self.tokens.values()
    }

    /// The ids of the tokens expired at `now_ms`.
    pub fn expired(&self, now_ms: i64) -> Vec<String> {
        self.tokens
            .values()
            .filter(|t| t.info.is_expired(now_ms))
            .map(|t| t.info.token_id.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: i64 = 86_400_000;

    fn config() -> DelegationTokenConfig {
        DelegationTokenConfig {
            secret_key: Some("secret".into()),
            max_lifetime_ms: 7 * DAY,
            expiry_time_ms: DAY,
            expiry_check_interval_ms: 3_600_000,
        }
    }

    fn user(n: &str) -> Principal {
        Principal::new(USER_TYPE, n)
    }

    fn token(now: i64) -> TokenInfo {
        create(
            &config(),
            now,
            "id-1".into(),
            user("alice"),
            user("admin"),
            vec![user("bob")],
            -1,
        )
        .unwrap()
    }

    #[test]
    fn the_hmac_is_hmac_sha512_of_the_token_id_keyed_with_the_secret() {
        // RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?".
        let mac = token_hmac("Jefe", "what do ya want for nothing?");
        let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "164b7a7bfcf819e2e395fbe73b56e0a387bd64222e831fd610270cd7ea2505549758bf75c05a994a\
             6d034f65f8f0e6fdcaeab1a34d4a6b4b636e070a38bce737"
        );
        assert_eq!(token_hmac("secret", "id-1").len(), 64);
        assert_ne!(token_hmac("secret", "id-1"), token_hmac("other", "id-1"));
    }

    #[test]
    fn a_new_token_expires_after_the_expiry_time_and_lives_at_most_the_max_lifetime() {
        let t = token(1_000);
        assert_eq!(t.issue_timestamp_ms, 1_000);
        assert_eq!(t.expiry_timestamp_ms, 1_000 + DAY);
        assert_eq!(t.max_timestamp_ms, 1_000 + 7 * DAY);
        // A shorter requested max lifetime wins, and caps the expiry too.
        let short = create(
            &config(),
            0,
            "x".into(),
            user("a"),
            user("a"),
            vec![],
            60_000,
        )
        .unwrap();
        assert_eq!(
            (short.max_timestamp_ms, short.expiry_timestamp_ms),
            (60_000, 60_000)
        );
        // A longer one does not.
        let long = create(
            &config(),
            0,
            "x".into(),
            user("a"),
            user("a"),
            vec![],
            30 * DAY,
        )
        .unwrap();
        assert_eq!(long.max_timestamp_ms, 7 * DAY);
    }

    #[test]
    fn without_a_secret_key_every_operation_is_disabled() {
        let off = DelegationTokenConfig {
            secret_key: None,
            ..config()
        };
        let t = token(0);
        let e = create(&off, 0, "x".into(), user("a"), user("a"), vec![], -1);
        assert_eq!(e, Err(TokenError::AuthDisabled));
        assert_eq!(
            renew(&off, Some(&t), 0, &user("alice"), -1),
            Err(TokenError::AuthDisabled)
        );
        assert_eq!(
            expire(&off, Some(&t), 0, &user("alice"), -1),
            Err(TokenError::AuthDisabled)
        );
        assert!(TokenCache::default()
            .rebuilt(None, vec![t])
            .get("id-1")
            .is_none());
    }

    #[test]
    fn renewers_must_be_users() {
        let e = create(
            &config(),
            0,
            "x".into(),
            user("a"),
            user("a"),
            vec![Principal::new("Group", "g")],
            -1,
        );
        assert_eq!(e, Err(TokenError::InvalidPrincipalType));
    }

    #[test]
    fn renew_moves_the_expiry_but_never_past_the_max_timestamp() {
        let c = config();
        let t = token(0);
        let r = renew(&c, Some(&t), 1_000, &user("alice"), 5_000).unwrap();
        assert_eq!(r.expiry_timestamp_ms, 6_000);
        // No period, or one longer than the expiry time: the expiry time.
        let r = renew(&c, Some(&t), 1_000, &user("bob"), -1).unwrap();
        assert_eq!(r.expiry_timestamp_ms, 1_000 + DAY);
        let r = renew(&c, Some(&t), 1_000, &user("bob"), 3 * DAY).unwrap();
        assert_eq!(r.expiry_timestamp_ms, 1_000 + DAY);
        // Near the end of its life: the max timestamp.
        let late = TokenInfo {
            expiry_timestamp_ms: 7 * DAY,
            ..t.clone()
        };
        let r = renew(&c, Some(&late), 7 * DAY - 10, &user("alice"), -1).unwrap();
        assert_eq!(r.expiry_timestamp_ms, 7 * DAY);
    }

    #[test]
    fn renew_and_expire_refuse_unknown_expired_and_foreign_tokens_in_kafkas_order() {
        let c = config();
        let t = token(0);
        for op in [
            |c: &_, t, now, p: &_| renew(c, t, now, p, -1).map(|_| ()),
            |c: &_, t, now, p: &_| expire(c, t, now, p, 0).map(|_| ()),
        ] {
            assert_eq!(op(&c, None, 0, &user("alice")), Err(TokenError::NotFound));
            // Expired is checked before the principal.
            assert_eq!(
                op(&c, Some(&t), DAY + 1, &user("mallory")),
                Err(TokenError::Expired)
            );
            assert_eq!(
                op(&c, Some(&t), 10, &user("mallory")),
                Err(TokenError::OwnerMismatch)
            );
            // The requester is not a renewer.
            assert_eq!(
                op(&c, Some(&t), 10, &user("admin")),
                Err(TokenError::OwnerMismatch)
            );
            assert_eq!(op(&c, Some(&t), 10, &user("alice")), Ok(()));
            assert_eq!(op(&c, Some(&t), 10, &user("bob")), Ok(()));
        }
    }

    #[test]
    fn a_negative_expiry_period_removes_the_token_now() {
        let c = config();
        let t = token(0);
        let e = expire(&c, Some(&t), 10, &user("alice"), -1).unwrap();
        assert_eq!(
            e,
            Expiry::Removed {
                token_id: "id-1".into(),
                answer_ms: -1
            }
        );
        assert_eq!(e.expiry_timestamp_ms(), -1);
        let e = expire(&c, Some(&t), 10, &user("alice"), 500).unwrap();
        assert_eq!(e.expiry_timestamp_ms(), 510);
        let e = expire(&c, Some(&t), 10, &user("alice"), 30 * DAY).unwrap();
        assert_eq!(e.expiry_timestamp_ms(), 7 * DAY);
    }

    #[test]
    fn describe_shows_own_tokens_and_others_only_with_describe_acls() {
        let t = token(0);
        let no = |_: &str| false;
        let no_owner = |_: &Principal| false;
        // Owner, requester and renewers see it.
        for p in ["alice", "admin", "bob"] {
            assert!(describable(&user(p), None, &t, no, no_owner), "{p}");
        }
        assert!(!describable(&user("carol"), None, &t, no, no_owner));
        // DESCRIBE on the token, or DESCRIBE_TOKENS on its owner.
        assert!(describable(
            &user("carol"),
            None,
            &t,
            |id| id == "id-1",
            no_owner
        ));
        assert!(describable(&user("carol"), None, &t, no, |o| *o == user("alice")));
        // An owners filter keeps only tokens of those principals, even for the owner.
        assert!(!describable(
            &user("alice"),
            Some(&[user("dave")]),
            &t,
            no,
            no_owner
        ));
        assert!(describable(
            &user("carol"),
            Some(&[user("bob")]),
            &t,
            |_| true,
            no_owner
        ));
    }

    #[test]
    fn the_cache_finds_tokens_by_hmac_derives_scram_credentials_and_lists_expired_ones() {
        let t = token(0);
        let cache = TokenCache::default().rebuilt(Some("secret"), vec![t.clone()]);
        let mac = token_hmac("secret", "id-1");
        assert_eq!(cache.by_hmac(&mac).map(|x| x.info.clone()), Some(t.clone()));
        assert!(cache.by_hmac(&token_hmac("other", "id-1")).is_none());
        // The HMAC (base64) is the SCRAM password of the token id.
        let token = cache.get("id-1").unwrap();
        for m in [Mechanism::Sha256, Mechanism::Sha512] {
            let c = token.credential(m).unwrap();
            assert_eq!(c.iterations, 4096);
            let client = scram::ClientExchange::new(m, "id-1", &B64.encode(&mac));
            let mut server = scram::ServerExchange::new(m);
            let lookup = |_: &str, _: bool| {
                Some(scram::Found {
                    credential: c.clone(),
                    authorization_id: "alice".into(),
                    expiry_timestamp_ms: None,
                })
            };
            let scram::Step::Continue(first) = server.step(&client.first(), lookup).unwrap() else {
                panic!("continues");
            };
            assert!(server.step(&client.last(&first).unwrap(), lookup).is_ok());
        }
        // A rebuild keeps the derived credentials of known ids.
        let again = cache.rebuilt(Some("secret"), vec![t.clone()]);
        assert_eq!(
            again.get("id-1").unwrap().credential(Mechanism::Sha256),
            token.credential(Mechanism::Sha256)
        );
        assert_eq!(cache.expired(DAY), Vec::<String>::new());
        assert_eq!(cache.expired(DAY + 1), vec!["id-1".to_string()]);
    }
}
