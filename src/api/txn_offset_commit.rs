//! TxnOffsetCommit: offsets committed as part of a transaction. The group's offsets partition
//! must be in the transaction (KIP-890 verification, as Kafka's group coordinator does); the
//! offsets are written as a transactional batch and count once the COMMIT marker lands.
//!
//! In a cluster the transaction coordinator of the transactional id may be another broker
//! than this group coordinator: the verification is then an AddPartitionsToTxn (verify only)
//! to that broker, as Kafka's `AddPartitionsToTxnManager` sends it, and only for a producer
//! whose transaction has not yet written to the offsets partition.

use std::sync::Arc;

use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{
    txn_offset_commit_request, RequestKind, ResponseKind, TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
};
use kafka_protocol::ResponseError;

use crate::api::add_offsets_to_txn::offsets_partition;
use crate::api::gate::{self, Gate, Who, TOPIC_DENIED};
use crate::api::{blocking, Api, Context, Outcome};
use crate::broker::Broker;
use crate::coordinator::txn::state_log::{
    coordinator_location, verify_remotely, CoordinatorLocation,
};
use crate::coordinator::txn::TransactionCoordinator;
use crate::coordinator::{GroupCoordinator, OFFSETS_TOPIC};
use crate::security::acl::{Operation as Op, ResourceType as Res};
use crate::services::Services;

pub async fn handle(
    broker: Arc<Broker>,
    groups: &Arc<GroupCoordinator>,
    txns: &Arc<TransactionCoordinator>,
    req: TxnOffsetCommitRequest,
    version: i16,
) -> TxnOffsetCommitResponse {
    let (groups, txns) = (groups.clone(), txns.clone());
    let shape: Vec<(kafka_protocol::messages::TopicName, Vec<i32>)> = req
        .topics
        .iter()
        .map(|t| {
            (
                t.name.clone(),
                t.partitions.iter().map(|p| p.partition_index).collect(),
            )
        })
        .collect();
    let respond = |errors: Vec<Option<ResponseError>>| {
        let mut it = errors.into_iter();
        TxnOffsetCommitResponse::default().with_topics(
            shape
                .iter()
                .map(|(name, parts)| {
                    TxnOffsetCommitResponseTopic::default()
                        .with_name(name.clone())
                        .with_partitions(
                            parts
                                .iter()
                                .map(|&p| {
                                    TxnOffsetCommitResponsePartition::default()
                                        .with_partition_index(p)
                                        .with_error_code(
                                            it.next().flatten().map_or(0, |e| e.code()),
                                        )
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
    };
    let total: usize = shape.iter().map(|(_, p)| p.len()).sum();
    let group = req.group_id.0.to_string();
    let txn_id = req.transactional_id.0.to_string();
    let (pid, epoch) = (req.producer_id.0, req.producer_epoch);
    // Only the group's coordinator takes the offsets (Kafka answers NOT_COORDINATOR before it
    // verifies anything: it is not the leader of the offsets partition).
    if let Err(e) = groups.check_coordinator(&group) {
        return respond(vec![Some(e); total]);
    }
    // Verification: the group's offsets partition must have been added (AddOffsetsToTxn).
    let partition = offsets_partition(&broker, &group);
    let verified = {
        let (broker, txns, txn_id) = (broker.clone(), txns.clone(), txn_id.clone());
        blocking(move || verify_offsets_partition(&broker, &txns, &txn_id, pid, epoch, partition))
            .await
            .unwrap_or(Err(ResponseError::UnknownServerError))
    };
    if let Err(e) = verified {
        tracing::debug!(group = %group, transactional_id = %txn_id, error = ?e, "transactional offset commit not verified");
        return respond(vec![Some(verification_error(e, version)); total]);
    }
    let mut slots: Vec<Option<ResponseError>> = Vec::with_capacity(total);
    let mut offsets = Vec::new();
    for t in &req.topics {
        for p in &t.partitions {
            if broker
                .partition(t.name.0.as_str(), p.partition_index)
                .is_some()
            {
                slots.push(None);
                offsets.push((
                    t.name.0.to_string(),
                    p.partition_index,
                    p.committed_offset,
                    p.committed_leader_epoch,
                    p.committed_metadata.as_ref().map(|m| m.to_string()),
                ));
            } else {
                slots.push(Some(ResponseError::UnknownTopicOrPartition));
            }
        }
    }
    if offsets.is_empty() {
        return respond(slots);
    }
    let member = req.member_id.to_string();
    let instance = req.group_instance_id.as_ref().map(|i| i.to_string());
    let generation = req.generation_id;
    let result = blocking(move || {
        groups.commit_txn_offsets(
            &group,
            &member,
            instance.as_deref(),
            generation,
            pid,
            epoch,
            offsets,
        )
    })
    .await;
    match result {
        Ok(Ok(answers)) => {
            let mut it = answers.into_iter();
            respond(
                slots
                    .iter()
                    .map(|s| if s.is_some() { *s } else { it.next().flatten() })
                    .collect(),
            )
        }
        Ok(Err(e)) => respond(vec![Some(e); total]),
        Err(_) => respond(vec![Some(ResponseError::UnknownServerError); total]),
    }
}

/// Whether the transaction coordinator of `transactional_id` has the group's offsets
/// `partition` in the producer's transaction: asked in memory when this broker coordinates
/// the id, else of the broker that does (not again once the transaction has written to the
/// partition, as Kafka's `maybeStartTransactionVerification`). Blocking.
fn verify_offsets_partition(
    broker: &Broker,
    txns: &TransactionCoordinator,
    transactional_id: &str,
    producer_id: i64,
    producer_epoch: i16,
    partition: i32,
) -> Result<(), ResponseError> {
    match coordinator_location(broker, transactional_id) {
        CoordinatorLocation::Local => txns
            .verify_partitions(
                transactional_id,
                producer_id,
                producer_epoch,
                &[(OFFSETS_TOPIC.to_string(), partition)],
            )
            .and_then(|v| match v.into_iter().next().flatten() {
                None => Ok(()),
                Some(e) => Err(e),
            }),
        CoordinatorLocation::Remote(coordinator) => {
            let partition = broker
                .partition(OFFSETS_TOPIC, partition)
                .ok_or(ResponseError::NotCoordinator)?;
            verify_remotely(
                broker,
                coordinator,
                transactional_id,
                producer_id,
                producer_epoch,
                &partition,
            )
        }
        CoordinatorLocation::Unavailable => Err(ResponseError::CoordinatorNotAvailable),
    }
}

/// The answer to a failed verification, as Kafka's group coordinator gives it
/// (`AddPartitionsToTxnManager` and `CoordinatorOperationExceptionHelper`): a network failure
/// is retried without a coordinator lookup, and clients before v4 do not know
/// TRANSACTION_ABORTABLE.
fn verification_error(e: ResponseError, version: i16) -> ResponseError {
    match e {
        ResponseError::ProducerFenced => ResponseError::InvalidProducerEpoch,
        ResponseError::TransactionAbortable if version < 4 => ResponseError::InvalidTxnState,
        ResponseError::NetworkException => ResponseError::CoordinatorLoadInProgress,
        ResponseError::UnknownTopicOrPartition
        | ResponseError::NotEnoughReplicas
        | ResponseError::RequestTimedOut => ResponseError::CoordinatorNotAvailable,
        ResponseError::NotLeaderOrFollower | ResponseError::KafkaStorageError => {
            ResponseError::NotCoordinator
        }
        e => e,
    }
}

/// TxnOffsetCommit: WRITE on the transactional id, READ on the group, then READ on each
/// topic.
pub struct TxnOffsetCommit;

impl Api for TxnOffsetCommit {
    type Request = TxnOffsetCommitRequest;

    fn authorize(who: &Who, mut r: TxnOffsetCommitRequest, _version: i16) -> Gate {
        if let Some(code) = who.txn_group_refusal(&r.transactional_id, &r.group_id) {
            let topics = r.topics.iter().map(|t| refusal(t, code)).collect();
            return Gate::Answer(ResponseKind::TxnOffsetCommit(
                TxnOffsetCommitResponse::default().with_topics(topics),
            ));
        }
        let (ok, denied): (Vec<_>, Vec<_>) = r
            .topics
            .into_iter()
            .partition(|t| who.may(Op::Read, Res::Topic, &t.name));
        r.topics = ok;
        let refusals = denied.iter().map(|t| refusal(t, TOPIC_DENIED)).collect();
        gate::run_and_extend(
            RequestKind::TxnOffsetCommit(r),
            refusals,
            |resp, mut extra| match resp {
                ResponseKind::TxnOffsetCommit(mut t) => {
                    t.topics.append(&mut extra);
                    ResponseKind::TxnOffsetCommit(t)
                }
                other => other,
            },
        )
    }

    async fn handle(
        s: &Services,
        _ctx: &Context,
        r: TxnOffsetCommitRequest,
        version: i16,
    ) -> Outcome {
        Outcome::respond(handle(s.broker.clone(), &s.groups, &s.txns, r, version).await)
    }
}

/// A refused topic: every partition with `code`.
fn refusal(
    t: &txn_offset_commit_request::TxnOffsetCommitRequestTopic,
    code: ResponseError,
) -> TxnOffsetCommitResponseTopic {
    TxnOffsetCommitResponseTopic::default()
        .with_name(t.name.clone())
        .with_partitions(
            t.partitions
                .iter()
                .map(|p| {
                    TxnOffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code.code())
                })
                .collect(),
        )
}
