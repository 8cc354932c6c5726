//! DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554), with Kafka's checks
//! and error codes. Upsertions carry the salted password (the client derives it); the broker
//! keeps only salt, iterations, StoredKey and ServerKey.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse, RequestKind,
    ResponseKind,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::api::gate::{self, Gate, Who, CLUSTER_DENIED};
use crate::api::{blocking, Api, Context, Outcome};
use crate::broker::Broker;
use crate::security::acl::Operation as Op;
use crate::security::scram::{self, Mechanism};
use crate::services::Services;

const MAX_ITERATIONS: i32 = 16384;

pub fn describe(
    broker: &Broker,
    req: DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    let all = broker.scram_users();
    let mut results = Vec::new();
    let result = |user: &str, code: Option<ResponseError>, message: Option<String>| {
        DescribeUserScramCredentialsResult::default()
            .with_user(StrBytes::from_string(user.to_string()))
            .with_error_code(code.map_or(0, |c| c.code()))
            .with_error_message(message.map(StrBytes::from_string))
    };
    let infos = |mechs: &[(Mechanism, i32)]| -> Vec<CredentialInfo> {
        mechs
            .iter()
            .map(|(m, i)| {
                CredentialInfo::default()
                    .with_mechanism(m.code())
                    .with_iterations(*i)
            })
            .collect()
    };
    match req.users.filter(|u| !u.is_empty()) {
        None => {
            for (user, mechs) in &all {
                results.push(result(user, None, None).with_credential_infos(infos(mechs)));
            }
        }
        Some(users) => {
            let mut seen = HashSet::new();
            let dups: HashSet<String> = users
                .iter()
                .map(|u| u.name.to_string())
                .filter(|n| !seen.insert(n.clone()))
                .collect();
            let mut done = HashSet::new();
            for u in users {
                let name = u.name.to_string();
                if !done.insert(name.clone()) {
                    continue;
                }
                if dups.contains(&name) {
                    results.push(result(
                        &name,
                        Some(ResponseError::DuplicateResource),
                        Some(format!("Cannot describe SCRAM credentials for the same user twice in a single request: {name}")),
                    ));
                    continue;
                }
                match all.iter().find(|(n, _)| *n == name) {
                    Some((_, mechs)) => {
                        results.push(result(&name, None, None).with_credential_infos(infos(mechs)))
                    }
                    None => results.push(result(
                        &name,
                        Some(ResponseError::ResourceNotFound),
                        Some(format!(
                            "Attempt to describe a user credential that does not exist: {name}"
                        )),
                    )),
                }
            }
        }
    }
    DescribeUserScramCredentialsResponse::default().with_results(results)
}

pub async fn alter(
    broker: Arc<Broker>,
    req: AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
    // Per user: the first error wins; users without errors have all their changes applied.
    let mut errors: BTreeMap<String, (ResponseError, String)> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    let mut seen = HashSet::new();
    let mut changes: Vec<(String, Mechanism, Option<scram::Credential>)> = Vec::new();
    let existing = broker.scram_users();
    let mut note = |user: &str| {
        if !order.iter().any(|u| u == user) {
            order.push(user.to_string());
        }
    };
    // Kafka's ScramControlManager keys a request's changes by user name alone: a second
    // change of the same user, whatever its mechanism, refuses all of that user's changes.
    let duplicate = || {
        (
            ResponseError::DuplicateResource,
            "A user credential cannot be altered twice in the same request".to_string(),
        )
    };
    for d in &req.deletions {
        let user = d.name.to_string();
        note(&user);
        if !seen.insert(user.clone()) {
            errors.entry(user).or_insert_with(duplicate);
            continue;
        }
        let Some(m) = Mechanism::from_code(d.mechanism) else {
            errors.entry(user).or_insert((
                ResponseError::UnsupportedSaslMechanism,
                "Unknown SCRAM mechanism".into(),
            ));
            continue;
        };
        let exists = existing
            .iter()
            .any(|(u, ms)| *u == user && ms.iter().any(|(x, _)| *x == m));
        if !exists {
            errors.entry(user.clone()).or_insert((
                ResponseError::ResourceNotFound,
                format!("Attempt to delete a user credential that does not exist: {user}"),
            ));
            continue;
        }
        changes.push((user, m, None));
    }
    for u in &req.upsertions {
        let user = u.name.to_string();
        note(&user);
        if !seen.insert(user.clone()) {
            errors.entry(user).or_insert_with(duplicate);
            continue;
        }
        if user.is_empty() {
            errors.entry(user).or_insert((
                ResponseError::UnacceptableCredential,
                "Username must not be empty".into(),
            ));
            continue;
        }
        let Some(m) = Mechanism::from_code(u.mechanism) else {
            errors.entry(user).or_insert((
                ResponseError::UnsupportedSaslMechanism,
                "Unknown SCRAM mechanism".into(),
            ));
            continue;
        };
        if u.iterations < m.min_iterations() {
            errors.entry(user).or_insert((
                ResponseError::UnacceptableCredential,
                "Too few iterations".into(),
            ));
            continue;
        }
        if u.iterations > MAX_ITERATIONS {
            errors.entry(user).or_insert((
                ResponseError::UnacceptableCredential,
                "Too many iterations".into(),
            ));
            continue;
        }
        let cred = scram::credential_from_salted(m, &u.salted_password, &u.salt, u.iterations);
        changes.push((user, m, Some(cred)));
    }
    changes.retain(|(user, _, _)| !errors.contains_key(user));
    let stored = if changes.is_empty() {
        Ok(())
    } else {
        let b = broker.clone();
        match blocking(move || b.alter_scram(changes)).await {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        }
    };
    let results = order
        .into_iter()
        .map(|user| {
            let (code, message) = match (errors.get(&user), &stored) {
                (Some((c, m)), _) => (c.code(), Some(m.clone())),
                (None, Err(e)) => (ResponseError::UnknownServerError.code(), Some(e.clone())),
                (None, Ok(())) => (0, None),
            };
            AlterUserScramCredentialsResult::default()
                .with_user(StrBytes::from_string(user))
                .with_error_code(code)
                .with_error_message(message.map(StrBytes::from_string))
        })
        .collect();
    AlterUserScramCredentialsResponse::default().with_results(results)
}

/// DescribeUserScramCredentials: DESCRIBE on the cluster.
pub struct DescribeUserScramCredentials;

impl Api for DescribeUserScramCredentials {
    type Request = DescribeUserScramCredentialsRequest;

    fn authorize(who: &Who, r: DescribeUserScramCredentialsRequest, _version: i16) -> Gate {
        if !who.may_cluster(Op::Describe) {
            return Gate::Answer(ResponseKind::DescribeUserScramCredentials(
                DescribeUserScramCredentialsResponse::default()
                    .with_error_code(CLUSTER_DENIED.code())
                    .with_error_message(gate::message(CLUSTER_DENIED)),
            ));
        }
        Gate::Run(RequestKind::DescribeUserScramCredentials(r), None)
    }

    async fn handle(
        s: &Services,
        _ctx: &Context,
        r: DescribeUserScramCredentialsRequest,
        _version: i16,
    ) -> Outcome {
        Outcome::respond(describe(&s.broker, r))
    }
}

/// AlterUserScramCredentials: ALTER on the cluster; a refusal names every user once.
pub struct AlterUserScramCredentials;

impl Api for AlterUserScramCredentials {
    type Request = AlterUserScramCredentialsRequest;

    fn authorize(who: &Who, r: AlterUserScramCredentialsRequest, _version: i16) -> Gate {
        if who.may_cluster(Op::Alter) {
            return Gate::Run(RequestKind::AlterUserScramCredentials(r), None);
        }
        let users: std::collections::BTreeSet<String> = r
            .deletions
            .iter()
            .map(|d| d.name.to_string())
            .chain(r.upsertions.iter().map(|u| u.name.to_string()))
            .collect();
        let results = users
            .into_iter()
            .map(|u| {
                AlterUserScramCredentialsResult::default()
                    .with_user(StrBytes::from_string(u))
                    .with_error_code(CLUSTER_DENIED.code())
                    .with_error_message(gate::message(CLUSTER_DENIED))
            })
            .collect();
        Gate::Answer(ResponseKind::AlterUserScramCredentials(
            AlterUserScramCredentialsResponse::default().with_results(results),
        ))
    }

    async fn handle(
        s: &Services,
        _ctx: &Context,
        r: AlterUserScramCredentialsRequest,
        _version: i16,
    ) -> Outcome {
        Outcome::respond(alter(s.broker.clone(), r).await)
    }
}
