//! TxnOffsetCommit: offsets committed as part of a transaction. The group's offsets partition
//! must be in the transaction (KIP-890 verification, as Kafka's group coordinator does); the
//! offsets are written as a transactional batch and count once the COMMIT marker lands.

use std::sync::Arc;

use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{TxnOffsetCommitRequest, TxnOffsetCommitResponse};
use kafka_protocol::ResponseError;

use crate::api::add_offsets_to_txn::offsets_partition;
use crate::api::blocking;
use crate::broker::Broker;
use crate::coordinator::txn::TransactionCoordinator;
use crate::coordinator::GroupCoordinator;
use crate::coordinator::OFFSETS_TOPIC;

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
