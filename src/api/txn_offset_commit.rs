//! TxnOffsetCommit: offsets committed as part of a transaction. The group's offsets partition
//! must be in the transaction (KIP-890 verification, as Kafka's group coordinator does); the
//! offsets are written as a transactional batch and count once the COMMIT marker lands.

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
    // Verification: the group's offsets partition must have been added (AddOffsetsToTxn).
    let partition = offsets_partition(&broker, &group);
    let verified = txns
        .verify_partitions(
            &txn_id,
            pid,
            epoch,
            &[(OFFSETS_TOPIC.to_string(), partition)],
        )
        .and_then(|v| match v.into_iter().next().flatten() {
            None => Ok(()),
            Some(e) => Err(e),
        });
    if let Err(e) = verified {
        let e = match e {
            ResponseError::ProducerFenced => ResponseError::InvalidProducerEpoch,
            ResponseError::TransactionAbortable if version < 4 => ResponseError::InvalidTxnState,
            e => e,
        };
        return respond(vec![Some(e); total]);
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
