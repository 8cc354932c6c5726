//! AddRaftVoter and RemoveRaftVoter (KIP-853; `kafka-metadata-quorum add-controller /
//! remove-controller`, `Admin.addRaftVoter / removeRaftVoter`): change the voters of the
//! metadata quorum at run time. Every Strata node is broker and controller, so any node takes
//! the request and the metadata quorum's leader decides it ([`strata_metadata::voters`] has
//! the rules, which are Kafka's).
//!
//! A voter is named by its node id and the directory id of its metadata log dir (the
//! `directory.id` of `meta.properties` in `metadata.log.dir`, else in the first of
//! `log.dirs`; `kafka-metadata-quorum describe --replication` lists them). The node to add
//! must be running as an observer: started with `controller.quorum.voters` naming the
//! current voters, and not among them.
//!
//! AddRaftVoter v1's `ack_when_committed=false` asks for the answer once the new voter set is
//! appended; Strata answers both versions once it is committed, which is later, never
//! earlier.
//!
//! A single node is its own quorum of one voter, with no observers: adding itself is
//! DUPLICATE_VOTER, adding any other node REQUEST_TIMED_OUT (it is not an observer), and
//! removing a voter VOTER_NOT_FOUND (the last voter cannot be removed), as Kafka answers.

use std::time::Duration;

use kafka_protocol::messages::{
    AddRaftVoterRequest, AddRaftVoterResponse, RemoveRaftVoterRequest, RemoveRaftVoterResponse,
    RequestKind, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use strata_metadata::ids::Uuid128;
use strata_metadata::voters::VoterRefusal;
use strata_metadata::VoterChangeError;

use crate::api::gate::{Gate, Who, CLUSTER_DENIED};
use crate::api::{Api, Context, Outcome};
use crate::security::acl::Operation as Op;
use crate::services::Services;

/// Kafka's feature whose level 1 allows voter changes.
const KRAFT_VERSION: &str = "kraft.version";
/// Bounds on AddRaftVoter's `timeout_ms`.
const MIN_TIMEOUT: Duration = Duration::from_secs(1);
const MAX_TIMEOUT: Duration = Duration::from_secs(300);

type Failure = (i16, String);

fn uuid128(id: uuid::Uuid) -> Uuid128 {
    Uuid128::from_bytes(*id.as_bytes())
}

/// What both requests check before the quorum is asked: the cluster id and `kraft.version`.
fn precheck(s: &Services, cluster_id: Option<&StrBytes>, verb: &str) -> Result<(), Failure> {
    if let Some(asked) = cluster_id {
        if s.broker.cluster_id() != Some(asked.as_str()) {
            return Err((
                ResponseError::InconsistentClusterId.code(),
                format!(
                    "The cluster id {} in the request does not match this cluster's {}",
                    asked.as_str(),
                    s.broker.cluster_id().unwrap_or("")
                ),
            ));
        }
    }
    let level = s.broker.features.level(KRAFT_VERSION);
    if level < 1 {
        return Err((
            ResponseError::UnsupportedVersion.code(),
            format!("Cluster doesn't support {verb} voter because the {KRAFT_VERSION} feature is {level}"),
        ));
    }
    Ok(())
}

fn changed(result: Result<(), VoterChangeError>) -> Result<(), Failure> {
    result.map_err(|e| (e.kafka_error_code(), e.to_string()))
}

async fn single_node_key(s: &Services) -> String {
    let id = s
        .broker
        .metadata_directory_id_off_worker()
        .await
        .map(|d| uuid128(d).to_kafka_string())
        .unwrap_or_else(|| "<none>".into());
    format!(
        "[ReplicaKey(id={}, directoryId={id})]",
        s.broker.config.node_id
    )
}

async fn add(s: &Services, r: &AddRaftVoterRequest) -> Result<(), Failure> {
    precheck(s, r.cluster_id.as_ref(), "adding")?;
    let key = format!(
        "ReplicaKey(id={}, directoryId={})",
        r.voter_id,
        uuid128(r.voter_directory_id).to_kafka_string()
    );
    if r.voter_directory_id.is_nil() {
        return Err((
            ResponseError::InvalidRequest.code(),
            "Add voter request didn't include a valid directory id".into(),
        ));
    }
    if r.listeners.is_empty() {
        return Err((
            ResponseError::InvalidRequest.code(),
            format!("Add voter request for {key} didn't include any endpoint"),
        ));
    }
    let Some(cluster) = &s.cluster else {
        let refusal = if r.voter_id == s.broker.config.node_id {
            VoterRefusal::Duplicate(format!(
                "The voter id for {key} is already part of the set of voters {}.",
                single_node_key(s).await
            ))
        } else {
            VoterRefusal::TimedOut(format!(
                "Aborted add voter operation for {key} since it is not an observer of the \
                 metadata quorum: a single node has none"
            ))
        };
        return Err((refusal.kafka_error_code(), refusal.to_string()));
    };
    let Ok(voter_id) = u64::try_from(r.voter_id) else {
        return Err((
            ResponseError::InvalidRequest.code(),
            format!("Invalid voter id {}", r.voter_id),
        ));
    };
    let endpoints = r
        .listeners
        .iter()
        .map(|l| {
            let host = l.host.as_str();
            if host.contains(':') && !host.starts_with('[') {
                format!("[{host}]:{}", l.port)
            } else {
                format!("{host}:{}", l.port)
            }
        })
        .collect();
    let timeout = Duration::from_millis(r.timeout_ms.max(0) as u64).clamp(MIN_TIMEOUT, MAX_TIMEOUT);
    let node = cluster
        .node()
        .map_err(|e| (ResponseError::NotController.code(), e.to_string()))?;
    changed(
        node.add_voter(voter_id, uuid128(r.voter_directory_id), endpoints, timeout)
            .await,
    )
}

async fn remove(s: &Services, r: &RemoveRaftVoterRequest) -> Result<(), Failure> {
    precheck(s, r.cluster_id.as_ref(), "removing")?;
    let key = format!(
        "ReplicaKey(id={}, directoryId={})",
        r.voter_id,
        uuid128(r.voter_directory_id).to_kafka_string()
    );
    let Some(cluster) = &s.cluster else {
        let refusal = VoterRefusal::NotFound(format!(
            "Cannot remove voter {key} from the set of voters {}",
            single_node_key(s).await
        ));
        return Err((refusal.kafka_error_code(), refusal.to_string()));
    };
    let Ok(voter_id) = u64::try_from(r.voter_id) else {
        return Err((
            ResponseError::VoterNotFound.code(),
            format!("Cannot remove voter {key}: not a valid voter id"),
        ));
    };
    let node = cluster
        .node()
        .map_err(|e| (ResponseError::NotController.code(), e.to_string()))?;
    changed(
        node.remove_voter(voter_id, uuid128(r.voter_directory_id))
            .await,
    )
}

/// AddRaftVoter: ALTER on the cluster.
pub struct AddRaftVoter;

impl Api for AddRaftVoter {
    type Request = AddRaftVoterRequest;

    fn authorize(who: &Who, r: AddRaftVoterRequest, _version: i16) -> Gate {
        if !who.may_cluster(Op::Alter) {
            return Gate::Answer(ResponseKind::AddRaftVoter(
                AddRaftVoterResponse::default().with_error_code(CLUSTER_DENIED.code()),
            ));
        }
        Gate::Run(RequestKind::AddRaftVoter(r), None)
    }

    async fn handle(
        s: &Services,
        _ctx: &Context,
        r: AddRaftVoterRequest,
        _version: i16,
    ) -> Outcome {
        let response = match add(s, &r).await {
            Ok(()) => AddRaftVoterResponse::default(),
            Err((code, message)) => {
                tracing::info!(voter = r.voter_id, code, %message, "AddRaftVoter refused");
                AddRaftVoterResponse::default()
                    .with_error_code(code)
                    .with_error_message(Some(StrBytes::from_string(message)))
            }
        };
        Outcome::respond(response)
    }
}

/// RemoveRaftVoter: ALTER on the cluster.
pub struct RemoveRaftVoter;

impl Api for RemoveRaftVoter {
    type Request = RemoveRaftVoterRequest;

    fn authorize(who: &Who, r: RemoveRaftVoterRequest, _version: i16) -> Gate {
        if !who.may_cluster(Op::Alter) {
            return Gate::Answer(ResponseKind::RemoveRaftVoter(
                RemoveRaftVoterResponse::default().with_error_code(CLUSTER_DENIED.code()),
            ));
        }
        Gate::Run(RequestKind::RemoveRaftVoter(r), None)
    }

    async fn handle(
        s: &Services,
        _ctx: &Context,
        r: RemoveRaftVoterRequest,
        _version: i16,
    ) -> Outcome {
        let response = match remove(s, &r).await {
            Ok(()) => RemoveRaftVoterResponse::default(),
            Err((code, message)) => {
                tracing::info!(voter = r.voter_id, code, %message, "RemoveRaftVoter refused");
                RemoveRaftVoterResponse::default()
                    .with_error_code(code)
                    .with_error_message(Some(StrBytes::from_string(message)))
            }
        };
        Outcome::respond(response)
    }
}
