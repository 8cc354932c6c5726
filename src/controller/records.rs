//! ACLs, SCRAM credentials, client quotas and delegation tokens in cluster mode. The quorum
//! keeps each as an opaque record (`RecordKind`): the key is the JSON of what identifies it
//! (the whole ACL binding, the user and mechanism, the quota entity) or the token id, the
//! value the JSON of its content. A change made on any broker is proposed as puts and
//! deletes and answered once the local broker has synced it; every broker replaces its ACLs,
//! credentials, quotas and tokens with the quorum's whenever those records change
//! ([`SecurityRecords`], applied by the sync task), so a broker that was down catches up like
//! any other metadata.
//!
//! Credentials added with `strata scram add` while a broker is stopped (Kafka's
//! `kafka-storage format --add-scram`) are proposed to the quorum when it next joins
//! ([`propose_pending_scram`]); from then on the quorum owns them.
//!
//! Not atomic across entries: a request changing several ACLs or credentials is several
//! commits, as Kafka's per-entry results allow; a failure part-way is reported for the
//! whole request and the client retries (puts and deletes are idempotent).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use strata_metadata::command::RecordKind;
use strata_metadata::{Command, MetadataState};

use super::{ClusterControl, ClusterError};
use crate::quota::{EntityRecord, QuotaRecord};
use crate::security::acl::AclBinding;
use crate::security::scram::Credential;

/// How long a write waits for its commit to reach this broker.
const SYNC_WAIT: Duration = Duration::from_secs(15);

/// user -> mechanism name -> credential, as the broker keeps them.
pub use crate::broker::ScramStore;

#[derive(Serialize, Deserialize)]
struct ScramKey<'a> {
    user: &'a str,
    mechanism: &'a str,
}

fn json<T: Serialize + ?Sized>(value: &T) -> String {
    // Plain data (strings, numbers, enums): serialization cannot fail.
    serde_json::to_string(value).unwrap_or_default()
}

pub fn put_acl(acl: &AclBinding) -> Command {
    let key = json(acl);
    Command::PutRecord {
        kind: RecordKind::Acl,
        value: key.clone().into_bytes(),
        key,
    }
}

pub fn delete_acl(acl: &AclBinding) -> Command {
    Command::DeleteRecord {
        kind: RecordKind::Acl,
        key: json(acl),
    }
}

/// Sets (`Some`) or deletes a user's credential for one mechanism.
pub fn scram(user: &str, mechanism: &str, credential: Option<&Credential>) -> Command {
    let key = json(&ScramKey { user, mechanism });
    match credential {
        Some(c) => Command::PutRecord {
            kind: RecordKind::ScramCredential,
            key,
            value: json(c).into_bytes(),
        },
        None => Command::DeleteRecord {
            kind: RecordKind::ScramCredential,
            key,
        },
    }
}

/// Sets an entity's quotas (all of them), or deletes the entity when it has none left.
pub fn quota(entity: &[EntityRecord], values: &BTreeMap<String, f64>) -> Command {
    let key = json(entity);
    if values.is_empty() {
        Command::DeleteRecord {
            kind: RecordKind::ClientQuota,
            key,
        }
    } else {
        Command::PutRecord {
            kind: RecordKind::ClientQuota,
            key,
            value: json(values).into_bytes(),
        }
    }
}

/// Puts a delegation token's information (keyed by its id) or removes it.
pub fn delegation_token(change: &crate::broker::TokenChange) -> Command {
    match change {
        crate::broker::TokenChange::Put(info) => Command::PutRecord {
            kind: RecordKind::DelegationToken,
            key: info.token_id.clone(),
            value: json(info).into_bytes(),
        },
        crate::broker::TokenChange::Remove(id) => Command::DeleteRecord {
            kind: RecordKind::DelegationToken,
            key: id.clone(),
        },
    }
}

/// The key of the one record holding the finalized feature levels.
pub const FEATURES_KEY: &str = "finalized";

/// Replaces the finalized feature levels (all of them, with their epoch).
pub fn features(levels: &crate::features::FinalizedLevels) -> Command {
    Command::PutRecord {
        kind: RecordKind::Features,
        key: FEATURES_KEY.to_string(),
        value: json(levels).into_bytes(),
    }
}

/// The quorum's finalized feature levels: the defaults until UpdateFeatures set some, or
/// when the record does not decode (written by a newer version; logged).
pub fn decode_features(state: &MetadataState) -> crate::features::FinalizedLevels {
    let Some(value) = state.record(RecordKind::Features, FEATURES_KEY) else {
        return Default::default();
    };
    serde_json::from_slice(value).unwrap_or_else(|e| {
        tracing::error!(error = %e, "the finalized feature levels in the metadata do not decode; using the defaults");
        Default::default()
    })
}

/// Proposes `commands` in order and waits until this broker has synced the last. Blocking:
/// call from the blocking pool.
pub fn write(control: &Arc<ClusterControl>, commands: Vec<Command>) -> Result<(), ClusterError> {
    if commands.is_empty() {
        return Ok(());
    }
    let c = control.clone();
    super::admin::wait_for(async move {
        let mut index = 0;
        for command in commands {
            index = c.propose(command).await?.1;
        }
        c.wait_synced(index, SYNC_WAIT).await
    })
}

/// One kind's records: (key, value) in key order.
type KindRecords = Vec<(String, Vec<u8>)>;

/// The raw records of the security kinds, to notice when they change.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RawRecords(Vec<(RecordKind, KindRecords)>);

const KINDS: [RecordKind; 4] = [
    RecordKind::Acl,
    RecordKind::ScramCredential,
    RecordKind::ClientQuota,
    RecordKind::DelegationToken,
];

impl RawRecords {
    /// Whether `state` holds exactly these records; compares in place, without copying (the
    /// sync asks on every image, and most images change none of them).
    pub fn matches(&self, state: &MetadataState) -> bool {
        self.0.len() == KINDS.len()
            && self.0.iter().zip(KINDS).all(|((kind, records), k)| {
                *kind == k
                    && state.records(k).map(|(key, value)| (key, value)).eq(records
                        .iter()
                        .map(|(key, value)| (key.as_str(), value.as_slice())))
            })
    }

    pub fn of(state: &MetadataState) -> RawRecords {
        RawRecords(
            KINDS
                .into_iter()
                .map(|kind| {
                    let records = state
                        .records(kind)
                        .map(|(k, v)| (k.to_string(), v.to_vec()))
                        .collect();
                    (kind, records)
                })
                .collect(),
        )
    }
}

pub use crate::broker::SecurityRecords;

impl SecurityRecords {
    /// Decodes the records; one that does not decode (written by a newer version) is skipped
    /// with an error log rather than stopping the sync.
    pub fn decode(raw: &RawRecords) -> SecurityRecords {
        let mut out = SecurityRecords::default();
        for (kind, records) in &raw.0 {
            for (key, value) in records {
                let decoded =
                    match kind {
                        RecordKind::Acl => serde_json::from_slice::<AclBinding>(value)
                            .map(|acl| out.acls.push(acl)),
                        RecordKind::ScramCredential => serde_json::from_str::<ScramKey>(key)
                            .and_then(|k| {
                                let c: Credential = serde_json::from_slice(value)?;
                                out.scram
                                    .entry(k.user.to_string())
                                    .or_default()
                                    .insert(k.mechanism.to_string(), c);
                                Ok(())
                            }),
                        RecordKind::ClientQuota => serde_json::from_str::<Vec<EntityRecord>>(key)
                            .and_then(|entity| {
                                let values: BTreeMap<String, f64> = serde_json::from_slice(value)?;
                                out.quotas.push(QuotaRecord { entity, values });
                                Ok(())
                            }),
                        RecordKind::DelegationToken => serde_json::from_slice::<
                            crate::security::delegation_token::TokenInfo,
                        >(value)
                        .map(|t| out.delegation_tokens.push(t)),
                        // Not among KINDS: applied on its own (see `decode_features`).
                        RecordKind::Features => Ok(()),
                    };
                if let Err(e) = decoded {
                    tracing::error!(?kind, %key, error = %e, "skipping a metadata record that does not decode");
                }
            }
        }
        out
    }
}

/// Proposes the credentials `strata scram add` left for the quorum, then forgets them.
pub async fn propose_pending_scram(
    broker: &Arc<crate::broker::Broker>,
    control: &Arc<ClusterControl>,
) -> Result<(), ClusterError> {
    let pending = broker.pending_scram();
    if pending.is_empty() {
        return Ok(());
    }
    let mut index = 0;
    for (user, mechanisms) in &pending {
        for (mechanism, credential) in mechanisms {
            index = control
                .propose(scram(user, mechanism, Some(credential)))
                .await?
                .1;
            tracing::info!(%user, %mechanism, "proposed a SCRAM credential added offline");
        }
    }
    control.wait_synced(index, SYNC_WAIT).await?;
    let b = broker.clone();
    tokio::task::spawn_blocking(move || b.clear_pending_scram())
        .await
        .map_err(|e| ClusterError::UnexpectedResponse(e.to_string()))?
        .map_err(|e| ClusterError::UnexpectedResponse(e.to_string()))
}
