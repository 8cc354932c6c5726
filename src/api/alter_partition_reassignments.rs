//! AlterPartitionReassignments (KIP-455; v1 adds `allow_replication_factor_change`, KIP-860):
//! moves partitions to new replicas, or cancels a move (`replicas` null).
//!
//! In cluster mode the changes go through the metadata quorum
//! ([`crate::controller::reassign`]) and are answered once committed and applied here; the
//! data is copied and the replicas switched afterwards, as in Kafka. A single node is its
//! only broker: a target of exactly this node is a no-op success, any other target names an
//! unregistered broker (INVALID_REPLICA_ASSIGNMENT), and there is never a reassignment to
//! cancel (NO_REASSIGNMENT_IN_PROGRESS).

use std::sync::Arc;

use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, RequestKind,
    ResponseKind,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::api::gate::{self, Gate, Who, CLUSTER_DENIED};
use crate::api::{blocking, errors, Api, Context, Outcome};
use crate::broker::Broker;
use crate::controller::reassign::{self, PartitionOutcome, PartitionTarget};
use crate::controller::ClusterControl;
use crate::security::acl::Operation as Op;
use crate::services::Services;

pub async fn handle(
    broker: Arc<Broker>,
    cluster: Option<&Arc<ClusterControl>>,
    req: AlterPartitionReassignmentsRequest,
) -> AlterPartitionReassignmentsResponse {
    let cluster = cluster.cloned();
    let allow = req.allow_replication_factor_change;
    let topics: Vec<(String, Vec<PartitionTarget>)> = req
        .topics
        .into_iter()
        .map(|t| {
            let partitions = t
                .partitions
                .into_iter()
                .map(|p| PartitionTarget {
                    partition: p.partition_index,
                    replicas: p.replicas.map(|r| r.into_iter().map(|id| id.0).collect()),
                })
                .collect();
            (t.name.0.to_string(), partitions)
        })
        .collect();
    let b = broker.clone();
    let answers = blocking(move || match &cluster {
        Some(control) => reassign::alter(control, topics, allow),
        None => single_node(&b, topics, allow),
    })
    .await;
    let response =
        AlterPartitionReassignmentsResponse::default().with_allow_replication_factor_change(allow);
    let answers = match answers {
        Ok(a) => a,
        Err(_) => {
            return response
                .with_error_code(errors::internal().code())
                .with_error_message(Some(StrBytes::from_static_str("internal error")));
        }
    };
    let responses = answers
        .into_iter()
        .map(|(name, partitions)| {
            let partitions = partitions
                .into_iter()
                .map(|(index, outcome)| {
                    let r = ReassignablePartitionResponse::default().with_partition_index(index);
                    match outcome {
                        Ok(()) => r,
                        Err((code, message)) => r
                            .with_error_code(code)
                            .with_error_message(Some(StrBytes::from_string(message))),
                    }
                })
                .collect();
            ReassignableTopicResponse::default()
                .with_name(kafka_protocol::messages::TopicName(StrBytes::from_string(
                    name,
                )))
                .with_partitions(partitions)
        })
        .collect();
    response.with_responses(responses)
}

/// A single node's answers: only "stay on this node" is possible. Blocking.
fn single_node(
    broker: &Broker,
    topics: Vec<(String, Vec<PartitionTarget>)>,
    allow_replication_factor_change: bool,
) -> Vec<(String, Vec<(i32, PartitionOutcome)>)> {
    let me = broker.config.node_id;
    topics
        .into_iter()
        .map(|(name, partitions)| {
            let count = broker.topic(&name).map_or(0, |t| t.partitions.len());
            let outcomes = partitions
                .into_iter()
                .map(|target| {
                    let p = target.partition;
                    let outcome = if usize::try_from(p).map_or(true, |i| i >= count) {
                        Err((
                            ResponseError::UnknownTopicOrPartition.code(),
                            format!("Unable to find partition {name}:{p}."),
                        ))
                    } else {
                        match target.replicas {
                            None => Err((
                                ResponseError::NoReassignmentInProgress.code(),
                                ResponseError::NoReassignmentInProgress.to_string(),
                            )),
                            Some(r) if r == [me] => Ok(()),
                            Some(r) if r.is_empty() => Err((
                                ResponseError::InvalidReplicaAssignment.code(),
                                "The manual partition assignment includes an empty replica list."
                                    .to_string(),
                            )),
                            Some(r) if !allow_replication_factor_change && r.len() != 1 => Err((
                                ResponseError::InvalidReplicationFactor.code(),
                                format!("The replication factor is changed from 1 to {} but allowReplicationFactorChange is false.", r.len()),
                            )),
                            Some(r) => Err((
                                ResponseError::InvalidReplicaAssignment.code(),
                                format!("This broker runs as a single node (no controller.quorum.voters): broker {me} is the only replica a partition can have, not {r:?}."),
                            )),
                        }
                    };
                    (p, outcome)
                })
                .collect();
            (name, outcomes)
        })
        .collect()
}

/// AlterPartitionReassignments: ALTER on the cluster.
pub struct AlterPartitionReassignments;

impl Api for AlterPartitionReassignments {
    type Request = AlterPartitionReassignmentsRequest;

    fn authorize(who: &Who, r: AlterPartitionReassignmentsRequest, _version: i16) -> Gate {
        if who.may_cluster(Op::Alter) {
            return Gate::Run(RequestKind::AlterPartitionReassignments(r), None);
        }
        let responses = r
            .topics
            .iter()
            .map(|t| {
                ReassignableTopicResponse::default()
                    .with_name(t.name.clone())
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|p| {
                                ReassignablePartitionResponse::default()
                                    .with_partition_index(p.partition_index)
                                    .with_error_code(CLUSTER_DENIED.code())
                                    .with_error_message(gate::message(CLUSTER_DENIED))
                            })
                            .collect(),
                    )
            })
            .collect();
        Gate::Answer(ResponseKind::AlterPartitionReassignments(
            AlterPartitionReassignmentsResponse::default()
                .with_allow_replication_factor_change(r.allow_replication_factor_change)
                .with_error_code(CLUSTER_DENIED.code())
                .with_error_message(gate::message(CLUSTER_DENIED))
                .with_responses(responses),
        ))
    }

    async fn handle(
        s: &Services,
        _ctx: &Context,
        r: AlterPartitionReassignmentsRequest,
        _version: i16,
    ) -> Outcome {
        Outcome::respond(handle(s.broker.clone(), s.cluster.as_ref(), r).await)
    }
}
