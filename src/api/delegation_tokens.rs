//! CreateDelegationToken, RenewDelegationToken, ExpireDelegationToken and
//! DescribeDelegationToken (KIP-48, KIP-373), with the checks and error codes of Kafka's
//! KafkaApis / ControllerApis and DelegationTokenControlManager; the rules themselves are in
//! [`crate::security::delegation_token`].
//!
//! Tokens are managed only over a connection authenticated with SASL or a TLS client
//! certificate, and never over one authenticated with a token
//! (DELEGATION_TOKEN_REQUEST_NOT_ALLOWED). A principal may create tokens for itself; for
//! another owner it needs CREATE_TOKENS on that user. DescribeDelegationToken shows a
//! principal the tokens it owns, requested or may renew, and others with DESCRIBE on the token
//! or DESCRIBE_TOKENS on its owner. These checks run in the handlers (their order decides the
//! error), with the authorizer's answer (everything allowed without one).

use kafka_protocol::messages::describe_delegation_token_response::{
    DescribedDelegationToken, DescribedDelegationTokenRenewer,
};
use kafka_protocol::messages::{
    CreateDelegationTokenRequest, CreateDelegationTokenResponse, DescribeDelegationTokenRequest,
    DescribeDelegationTokenResponse, ExpireDelegationTokenRequest, ExpireDelegationTokenResponse,
    RenewDelegationTokenRequest, RenewDelegationTokenResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::api::{blocking, Api, Context, Outcome};
use crate::broker::{now_ms, Broker, TokenChange, TokenWriteError};
use crate::security::acl::{Operation, ResourceType};
use crate::security::delegation_token::{self as token, Principal, TokenError, USER_TYPE};
use crate::services::Services;

/// Kafka's `DelegationTokenManager.ErrorTimestamp`.
const ERROR_TIMESTAMP: i64 = -1;

/// The Kafka error for a refused token operation.
fn code(e: TokenError) -> i16 {
    match e {
        TokenError::AuthDisabled => ResponseError::DelegationTokenAuthDisabled,
        TokenError::RequestNotAllowed => ResponseError::DelegationTokenRequestNotAllowed,
        TokenError::AuthorizationFailed => ResponseError::DelegationTokenAuthorizationFailed,
        TokenError::InvalidPrincipalType => ResponseError::InvalidPrincipalType,
        TokenError::NotFound => ResponseError::DelegationTokenNotFound,
        TokenError::Expired => ResponseError::DelegationTokenExpired,
        TokenError::OwnerMismatch => ResponseError::DelegationTokenOwnerMismatch,
    }
    .code()
}

fn write_error_code(e: &TokenWriteError) -> i16 {
    match e {
        TokenWriteError::Refused(e) => code(*e),
        TokenWriteError::Storage(_) => ResponseError::UnknownServerError.code(),
    }
}

/// Kafka's `allowTokenRequests`: not over a token-authenticated connection, PLAINTEXT without
/// SASL, or TLS without a client certificate.
fn allow_token_requests(broker: &Broker, ctx: &Context) -> bool {
    use crate::config::SecurityProtocol as P;
    if ctx.token_authenticated {
        return false;
    }
    match broker
        .config
        .listeners
        .get(ctx.listener)
        .map(|l| l.security)
    {
        Some(P::SaslPlaintext | P::SaslSsl) => true,
        Some(P::Ssl) => ctx.principal != crate::security::ANONYMOUS,
        Some(P::Plaintext) | None => false,
    }
}

fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// A fresh token id: Kafka's random `Uuid`, never one starting with '-'.
fn new_token_id() -> String {
    loop {
        let id = crate::broker::kafka_uuid_string(uuid::Uuid::new_v4());
        if !id.starts_with('-') {
            return id;
        }
    }
}

/// A token operation that ran in the blocking pool and failed there.
fn storage_failure(e: tokio::task::JoinError) -> TokenWriteError {
    TokenWriteError::Storage(std::io::Error::other(e.to_string()))
}

/// The token requester is part of the responses from v3 (KIP-373).
const REQUESTER_VERSION: i16 = 3;

pub async fn create(
    s: &Services,
    ctx: &Context,
    r: CreateDelegationTokenRequest,
    version: i16,
) -> CreateDelegationTokenResponse {
    let requester = Principal::parse(&ctx.principal);
    let owner = match r.owner_principal_name.as_deref() {
        Some(name) if !name.is_empty() => {
            Principal::new(r.owner_principal_type.as_deref().unwrap_or(USER_TYPE), name)
        }
        _ => requester.clone(),
    };
    let mut base = CreateDelegationTokenResponse::default()
        .with_principal_type(text(&owner.principal_type))
        .with_principal_name(text(&owner.name));
    if version >= REQUESTER_VERSION {
        base = base
            .with_token_requester_principal_type(text(&requester.principal_type))
            .with_token_requester_principal_name(text(&requester.name));
    }
    let refused = |e: TokenError| {
        base.clone()
            .with_error_code(code(e))
            .with_issue_timestamp_ms(ERROR_TIMESTAMP)
            .with_expiry_timestamp_ms(ERROR_TIMESTAMP)
            .with_max_timestamp_ms(ERROR_TIMESTAMP)
    };
    if !allow_token_requests(&s.broker, ctx) {
        return refused(TokenError::RequestNotAllowed);
    }
    // A principal may always create tokens for itself.
    if owner != requester
        && !ctx.allowed(
            &s.broker,
            Operation::CreateTokens,
            ResourceType::User,
            &owner.to_string(),
        )
    {
        return refused(TokenError::AuthorizationFailed);
    }
    let renewers: Vec<Principal> = r
        .renewers
        .iter()
        .map(|p| Principal::new(&p.principal_type, &p.principal_name))
        .collect();
    let broker = s.broker.clone();
    let created = blocking(move || {
        let config = &broker.config.security.delegation_token;
        let info = token::create(
            config,
            now_ms(),
            new_token_id(),
            owner,
            requester,
            renewers,
            r.max_lifetime_ms,
        )?;
        let secret = config.secret_key.as_deref().unwrap_or_default();
        let hmac = token::token_hmac(secret, &info.token_id);
        broker.write_delegation_token(|_| Ok(((info.clone(), hmac), TokenChange::Put(info))))
    })
    .await
    .unwrap_or_else(|e| Err(storage_failure(e)));
    match created {
        Ok((info, hmac)) => base
            .with_issue_timestamp_ms(info.issue_timestamp_ms)
            .with_expiry_timestamp_ms(info.expiry_timestamp_ms)
            .with_max_timestamp_ms(info.max_timestamp_ms)
            .with_token_id(text(&info.token_id))
            .with_hmac(hmac.into()),
        // Refusals decided by Kafka's controller carry its default timestamps (0).
        Err(e) => base.with_error_code(write_error_code(&e)),
    }
}

pub async fn renew(
    s: &Services,
    ctx: &Context,
    r: RenewDelegationTokenRequest,
) -> RenewDelegationTokenResponse {
    let base = RenewDelegationTokenResponse::default();
    if !allow_token_requests(&s.broker, ctx) {
        return base
            .with_error_code(code(TokenError::RequestNotAllowed))
            .with_expiry_timestamp_ms(ERROR_TIMESTAMP);
    }
    let principal = Principal::parse(&ctx.principal);
    let broker = s.broker.clone();
    let renewed = blocking(move || {
        let config = broker.config.security.delegation_token.clone();
        broker.write_delegation_token(|tokens| {
            let found = tokens.by_hmac(&r.hmac).map(|t| &t.info);
            let info = token::renew(&config, found, now_ms(), &principal, r.renew_period_ms)?;
            Ok((info.expiry_timestamp_ms, TokenChange::Put(info)))
        })
    })
    .await
    .unwrap_or_else(|e| Err(storage_failure(e)));
    match renewed {
        Ok(expiry) => base.with_expiry_timestamp_ms(expiry),
        Err(e) => base.with_error_code(write_error_code(&e)),
    }
}

pub async fn expire(
    s: &Services,
    ctx: &Context,
    r: ExpireDelegationTokenRequest,
) -> ExpireDelegationTokenResponse {
    let base = ExpireDelegationTokenResponse::default();
    if !allow_token_requests(&s.broker, ctx) {
        return base
            .with_error_code(code(TokenError::RequestNotAllowed))
            .with_expiry_timestamp_ms(ERROR_TIMESTAMP);
    }
    let principal = Principal::parse(&ctx.principal);
    let broker = s.broker.clone();
    let expired = blocking(move || {
        let config = broker.config.security.delegation_token.clone();
        broker.write_delegation_token(|tokens| {
            let found = tokens.by_hmac(&r.hmac).map(|t| &t.info);
            let expiry = token::expire(
                &config,
                found,
                now_ms(),
                &principal,
                r.expiry_time_period_ms,
            )?;
            let answer = expiry.expiry_timestamp_ms();
            let change = match expiry {
                token::Expiry::Removed { token_id, .. } => TokenChange::Remove(token_id),
                token::Expiry::Updated(info) => TokenChange::Put(info),
            };
            Ok((answer, change))
        })
    })
    .await
    .unwrap_or_else(|e| Err(storage_failure(e)));
    match expired {
        Ok(expiry) => base.with_expiry_timestamp_ms(expiry),
        Err(e) => base.with_error_code(write_error_code(&e)),
    }
}

pub fn describe(
    broker: &Broker,
    ctx: &Context,
    r: DescribeDelegationTokenRequest,
    version: i16,
) -> DescribeDelegationTokenResponse {
    let base = DescribeDelegationTokenResponse::default();
    if !allow_token_requests(broker, ctx) {
        return base.with_error_code(code(TokenError::RequestNotAllowed));
    }
    if broker.config.security.delegation_token.secret_key.is_none() {
        return base.with_error_code(code(TokenError::AuthDisabled));
    }
    let owners: Option<Vec<Principal>> = r.owners.map(|os| {
        os.iter()
            .map(|o| Principal::new(&o.principal_type, &o.principal_name))
            .collect()
    });
    // An empty owners list asks for no tokens.
    if owners.as_ref().is_some_and(|o| o.is_empty()) {
        return base;
    }
    let requester = Principal::parse(&ctx.principal);
    let tokens = broker
        .delegation_tokens()
        .into_iter()
        .filter(|(info, _)| {
            token::describable(
                &requester,
                owners.as_deref(),
                info,
                |id| {
                    ctx.allowed(
                        broker,
                        Operation::Describe,
                        ResourceType::DelegationToken,
                        id,
                    )
                },
                |owner| {
                    ctx.allowed(
                        broker,
                        Operation::DescribeTokens,
                        ResourceType::User,
                        &owner.to_string(),
                    )
                },
            )
        })
        .map(|(info, hmac)| {
            let mut t = DescribedDelegationToken::default()
                .with_principal_type(text(&info.owner.principal_type))
                .with_principal_name(text(&info.owner.name));
            if version >= REQUESTER_VERSION {
                t = t
                    .with_token_requester_principal_type(text(&info.requester.principal_type))
                    .with_token_requester_principal_name(text(&info.requester.name));
            }
            t.with_issue_timestamp(info.issue_timestamp_ms)
                .with_expiry_timestamp(info.expiry_timestamp_ms)
                .with_max_timestamp(info.max_timestamp_ms)
                .with_token_id(text(&info.token_id))
                .with_hmac(hmac.into())
                .with_renewers(
                    info.renewers
                        .iter()
                        .map(|p| {
                            DescribedDelegationTokenRenewer::default()
                                .with_principal_type(text(&p.principal_type))
                                .with_principal_name(text(&p.name))
                        })
                        .collect(),
                )
        })
        .collect();
    base.with_tokens(tokens)
}

/// CreateDelegationToken.
pub struct CreateDelegationToken;

impl Api for CreateDelegationToken {
    type Request = CreateDelegationTokenRequest;

    async fn handle(
        s: &Services,
        ctx: &Context,
        r: CreateDelegationTokenRequest,
        version: i16,
    ) -> Outcome {
        Outcome::respond(create(s, ctx, r, version).await)
    }
}

/// RenewDelegationToken.
pub struct RenewDelegationToken;

impl Api for RenewDelegationToken {
    type Request = RenewDelegationTokenRequest;

    async fn handle(
        s: &Services,
        ctx: &Context,
        r: RenewDelegationTokenRequest,
        _version: i16,
    ) -> Outcome {
        Outcome::respond(renew(s, ctx, r).await)
    }
}

/// ExpireDelegationToken.
pub struct ExpireDelegationToken;

impl Api for ExpireDelegationToken {
    type Request = ExpireDelegationTokenRequest;

    async fn handle(
        s: &Services,
        ctx: &Context,
        r: ExpireDelegationTokenRequest,
        _version: i16,
    ) -> Outcome {
        Outcome::respond(expire(s, ctx, r).await)
    }
}

/// DescribeDelegationToken.
pub struct DescribeDelegationToken;

impl Api for DescribeDelegationToken {
    type Request = DescribeDelegationTokenRequest;

    async fn handle(
        s: &Services,
        ctx: &Context,
        r: DescribeDelegationTokenRequest,
        version: i16,
    ) -> Outcome {
        Outcome::respond(describe(&s.broker, ctx, r, version))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use kafka_protocol::messages::create_delegation_token_request::CreatableRenewers;
    use kafka_protocol::messages::describe_delegation_token_request::DescribeDelegationTokenOwner;

    use super::*;
    use crate::api::test_support::{allow, context};
    use crate::config::BrokerConfig;

    /// A broker with a PLAINTEXT and a SASL_PLAINTEXT listener (index 1), the authorizer on
    /// (nothing allowed without an ACL) and tokens enabled unless `secret` is None.
    fn services(dir: &std::path::Path, secret: Option<&str>) -> Services {
        let mut settings: BTreeMap<String, String> = [
            ("log.dirs", dir.display().to_string()),
            (
                "listeners",
                "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0".into(),
            ),
            ("sasl.enabled.mechanisms", "SCRAM-SHA-256".into()),
            (
                "authorizer.class.name",
                "org.apache.kafka.metadata.authorizer.StandardAuthorizer".into(),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        if let Some(s) = secret {
            settings.insert("delegation.token.secret.key".into(), s.into());
        }
        let config = BrokerConfig::build(&[settings]).expect("config");
        Services::open(config, None).expect("services")
    }

    fn as_user(name: &str) -> Context {
        Context {
            principal: format!("User:{name}"),
            listener: 1,
            ..context()
        }
    }

    fn create_request(owner: Option<&str>) -> CreateDelegationTokenRequest {
        CreateDelegationTokenRequest::default()
            .with_owner_principal_type(owner.map(|_| text("User")))
            .with_owner_principal_name(owner.map(text))
            .with_renewers(vec![CreatableRenewers::default()
                .with_principal_type(text("User"))
                .with_principal_name(text("bob"))])
            .with_max_lifetime_ms(-1)
    }

    fn owners(names: &[&str]) -> DescribeDelegationTokenRequest {
        DescribeDelegationTokenRequest::default().with_owners(Some(
            names
                .iter()
                .map(|n| {
                    DescribeDelegationTokenOwner::default()
                        .with_principal_type(text("User"))
                        .with_principal_name(text(n))
                })
                .collect(),
        ))
    }

    #[tokio::test]
    async fn a_token_is_created_used_renewed_and_expired_and_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let s = services(dir.path(), Some("k3y-s3cr3t"));
        let alice = as_user("alice");
        let created = create(&s, &alice, create_request(None), 3).await;
        assert_eq!(created.error_code, 0);
        assert_eq!(created.principal_name.as_str(), "alice");
        assert_eq!(created.token_requester_principal_name.as_str(), "alice");
        assert_eq!(
            created.hmac.as_ref(),
            token::token_hmac("k3y-s3cr3t", &created.token_id)
        );
        assert_eq!(
            created.expiry_timestamp_ms - created.issue_timestamp_ms,
            86_400_000
        );
        assert_eq!(
            created.max_timestamp_ms - created.issue_timestamp_ms,
            7 * 86_400_000
        );
        let id = created.token_id.to_string();
        // v1 and v2 responses carry no requester, and encode.
        use kafka_protocol::protocol::Encodable;
        let v1 = create(&s, &alice, create_request(None), 1).await;
        assert_eq!(v1.error_code, 0);
        assert!(v1.token_requester_principal_name.is_empty());
        v1.encode(&mut bytes::BytesMut::new(), 1)
            .expect("v1 encodes");
        let d1 = describe(&s.broker, &alice, owners(&["alice"]), 1);
        assert_eq!(d1.tokens.len(), 2);
        d1.encode(&mut bytes::BytesMut::new(), 1)
            .expect("v1 encodes");
        let e = expire(
            &s,
            &alice,
            ExpireDelegationTokenRequest::default()
                .with_hmac(v1.hmac.clone())
                .with_expiry_time_period_ms(-1),
        )
        .await;
        assert_eq!(e.error_code, 0);
        // The token's SCRAM credential authenticates its owner.
        let found = s
            .broker
            .scram_lookup(&id, true, crate::security::scram::Mechanism::Sha256)
            .unwrap();
        assert_eq!(found.authorization_id, "alice");
        assert!(s
            .broker
            .scram_lookup(&id, false, crate::security::scram::Mechanism::Sha256)
            .is_none());

        let described = describe(&s.broker, &as_user("bob"), owners(&["alice"]), 3);
        assert_eq!(described.tokens.len(), 1);
        assert_eq!(
            described.tokens[0].renewers[0].principal_name.as_str(),
            "bob"
        );
        // An empty owners list asks for nothing.
        assert!(describe(&s.broker, &alice, owners(&[]), 3)
            .tokens
            .is_empty());

        let renew_req = RenewDelegationTokenRequest::default()
            .with_hmac(created.hmac.clone())
            .with_renew_period_ms(1_000);
        let r = renew(&s, &as_user("carol"), renew_req.clone()).await;
        assert_eq!(
            r.error_code,
            ResponseError::DelegationTokenOwnerMismatch.code()
        );
        let r = renew(&s, &as_user("bob"), renew_req).await;
        assert_eq!(r.error_code, 0);
        assert!(r.expiry_timestamp_ms <= now_ms() + 1_000);

        // Restart: the token is back, with its HMAC recomputed from the secret.
        drop(s);
        let s = services(dir.path(), Some("k3y-s3cr3t"));
        let described = describe(&s.broker, &alice, owners(&["alice"]), 3);
        assert_eq!(described.tokens.len(), 1);
        assert_eq!(described.tokens[0].hmac, created.hmac);
        assert_eq!(described.tokens[0].expiry_timestamp, r.expiry_timestamp_ms);
        let catalog = std::fs::read_to_string(dir.path().join("strata-metadata.toml")).unwrap();
        assert!(catalog.contains(&id));
        assert!(
            !catalog.contains("k3y-s3cr3t"),
            "the secret key is never stored"
        );

        let expire_req = ExpireDelegationTokenRequest::default()
            .with_hmac(created.hmac.clone())
            .with_expiry_time_period_ms(-1);
        let e = expire(&s, &alice, expire_req.clone()).await;
        assert_eq!((e.error_code, e.expiry_timestamp_ms), (0, -1));
        assert!(describe(&s.broker, &alice, owners(&["alice"]), 3)
            .tokens
            .is_empty());
        assert!(s
            .broker
            .scram_lookup(&id, true, crate::security::scram::Mechanism::Sha256)
            .is_none());
        let e = expire(&s, &alice, expire_req).await;
        assert_eq!(e.error_code, ResponseError::DelegationTokenNotFound.code());
    }

    #[tokio::test]
    async fn tokens_for_another_owner_need_create_tokens_on_that_user() {
        let dir = tempfile::tempdir().unwrap();
        let s = services(dir.path(), Some("k3y-s3cr3t"));
        s.broker.authorizer.add(&[allow(
            "User:admin",
            Operation::CreateTokens,
            ResourceType::User,
            "User:alice",
        )]);
        let refused = create(&s, &as_user("carol"), create_request(Some("alice")), 3).await;
        assert_eq!(
            refused.error_code,
            ResponseError::DelegationTokenAuthorizationFailed.code()
        );
        assert_eq!(refused.principal_name.as_str(), "alice");
        assert_eq!(refused.token_requester_principal_name.as_str(), "carol");
        assert_eq!(refused.issue_timestamp_ms, ERROR_TIMESTAMP);

        let ok = create(&s, &as_user("admin"), create_request(Some("alice")), 3).await;
        assert_eq!(ok.error_code, 0);
        assert_eq!(ok.principal_name.as_str(), "alice");
        assert_eq!(ok.token_requester_principal_name.as_str(), "admin");

        // carol sees alice's token only with DESCRIBE on it or DESCRIBE_TOKENS on alice.
        assert!(
            describe(&s.broker, &as_user("carol"), owners(&["alice"]), 3)
                .tokens
                .is_empty()
        );
        s.broker.authorizer.add(&[allow(
            "User:carol",
            Operation::DescribeTokens,
            ResourceType::User,
            "User:alice",
        )]);
        assert_eq!(
            describe(&s.broker, &as_user("carol"), owners(&["alice"]), 3)
                .tokens
                .len(),
            1
        );
        // The requester sees what it requested.
        assert_eq!(
            describe(&s.broker, &as_user("admin"), owners(&["alice"]), 3)
                .tokens
                .len(),
            1
        );
    }

    #[tokio::test]
    async fn token_requests_are_refused_without_a_secret_or_over_a_token_connection() {
        let dir = tempfile::tempdir().unwrap();
        let off = services(dir.path(), None);
        let r = create(&off, &as_user("alice"), create_request(None), 3).await;
        assert_eq!(
            r.error_code,
            ResponseError::DelegationTokenAuthDisabled.code()
        );
        let r = describe(&off.broker, &as_user("alice"), owners(&["alice"]), 3);
        assert_eq!(
            r.error_code,
            ResponseError::DelegationTokenAuthDisabled.code()
        );
        drop(off);

        let dir = tempfile::tempdir().unwrap();
        let s = services(dir.path(), Some("k3y-s3cr3t"));
        let by_token = Context {
            token_authenticated: true,
            ..as_user("alice")
        };
        let not_allowed = ResponseError::DelegationTokenRequestNotAllowed.code();
        let r = create(&s, &by_token, create_request(None), 3).await;
        assert_eq!(
            (r.error_code, r.max_timestamp_ms),
            (not_allowed, ERROR_TIMESTAMP)
        );
        let r = renew(&s, &by_token, RenewDelegationTokenRequest::default()).await;
        assert_eq!(
            (r.error_code, r.expiry_timestamp_ms),
            (not_allowed, ERROR_TIMESTAMP)
        );
        let r = expire(&s, &by_token, ExpireDelegationTokenRequest::default()).await;
        assert_eq!(r.error_code, not_allowed);
        let r = describe(&s.broker, &by_token, owners(&["alice"]), 3);
        assert_eq!(r.error_code, not_allowed);
        // PLAINTEXT without SASL.
        let plaintext = Context {
            listener: 0,
            ..as_user("alice")
        };
        let r = create(&s, &plaintext, create_request(None), 3).await;
        assert_eq!(r.error_code, not_allowed);
        // The secret is never among the configs DescribeConfigs lists.
        assert!(!s
            .broker
            .config
            .describe()
            .iter()
            .any(|(k, v, ..)| k == "delegation.token.secret.key" || v == "k3y-s3cr3t"));
        // Renewers must be users.
        let group_renewer = create_request(None).with_renewers(vec![CreatableRenewers::default()
            .with_principal_type(text("Group"))
            .with_principal_name(text("g"))]);
        let r = create(&s, &as_user("alice"), group_renewer, 3).await;
        assert_eq!(r.error_code, ResponseError::InvalidPrincipalType.code());
    }
}
