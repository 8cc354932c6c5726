//! AddPartitionsToTxn: v0-3 from producers (one transaction), v4+ batched from brokers, with
//! the verify-only form of KIP-890 part 1. A partition that does not exist fails the whole
//! transaction (the others get OPERATION_NOT_ATTEMPTED), as in Kafka.

use std::sync::Arc;

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::api::blocking;
use crate::broker::Broker;
use crate::coordinator::txn::TransactionCoordinator;

type Partitions = Vec<(String, i32)>;

fn flatten(topics: &[AddPartitionsToTxnTopic]) -> Partitions {
    topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| (t.name.0.to_string(), *p)))
        .collect()
}

/// Per-topic results, in first-seen topic order.
fn topic_results(results: Vec<((String, i32), i16)>) -> Vec<AddPartitionsToTxnTopicResult> {
    let mut out: Vec<AddPartitionsToTxnTopicResult> = Vec::new();
    for ((topic, partition), code) in results {
        let r = AddPartitionsToTxnPartitionResult::default()
            .with_partition_index(partition)
            .with_partition_error_code(code);
        match out.iter_mut().find(|t| t.name.0.as_str() == topic) {
            Some(t) => t.results_by_partition.push(r),
            None => out.push(
                AddPartitionsToTxnTopicResult::default()
                    .with_name(TopicName(StrBytes::from_string(topic)))
                    .with_results_by_partition(vec![r]),
            ),
        }
    }
    out
}

/// One transaction's per-partition error codes.
async fn one(
    broker: &Arc<Broker>,
    txns: &Arc<TransactionCoordinator>,
    transactional_id: String,
    producer_id: i64,
    producer_epoch: i16,
    verify_only: bool,
    partitions: Partitions,
    version: i16,
) -> Vec<((String, i32), i16)> {
    let all = |e: ResponseError| -> Vec<((String, i32), i16)> {
        partitions.iter().map(|p| (p.clone(), e.code())).collect()
    };
    let unknown: Vec<bool> = partitions
        .iter()
        .map(|(t, p)| broker.partition(t, *p).is_none())
        .collect();
    if unknown.iter().any(|u| *u) {
        return partitions
            .iter()
            .zip(unknown)
            .map(|(p, u)| {
                let e = if u {
                    ResponseError::UnknownTopicOrPartition
                } else {
                    ResponseError::OperationNotAttempted
                };
                (p.clone(), e.code())
            })
            .collect();
    }
    let c = txns.clone();
    if verify_only {
        return match c.verify_partitions(
            &transactional_id,
            producer_id,
            producer_epoch,
            &partitions,
        ) {
            Ok(v) => partitions
                .iter()
                .zip(v)
                .map(|(p, e)| (p.clone(), e.map_or(0, |e| e.code())))
                .collect(),
            Err(e) => all(e),
        };
    }
    let ps = partitions.clone();
    let result =
        blocking(move || c.add_partitions(&transactional_id, producer_id, producer_epoch, ps))
            .await
            .unwrap_or(Err(ResponseError::UnknownServerError));
    match result {
        Ok(()) => all_ok(&partitions),
        // Clients before v2 do not know PRODUCER_FENCED.
        Err(ResponseError::ProducerFenced) if version < 2 => {
            all(ResponseError::InvalidProducerEpoch)
        }
        Err(e) => all(e),
    }
}

fn all_ok(partitions: &Partitions) -> Vec<((String, i32), i16)> {
    partitions.iter().map(|p| (p.clone(), 0)).collect()
}

pub async fn handle(
    broker: Arc<Broker>,
    txns: &Arc<TransactionCoordinator>,
    req: AddPartitionsToTxnRequest,
    version: i16,
) -> AddPartitionsToTxnResponse {
    if version < 4 {
        let results = one(
            &broker,
            txns,
            req.v3_and_below_transactional_id.0.to_string(),
            req.v3_and_below_producer_id.0,
            req.v3_and_below_producer_epoch,
            false,
            flatten(&req.v3_and_below_topics),
            version,
        )
        .await;
        return AddPartitionsToTxnResponse::default()
            .with_results_by_topic_v3_and_below(topic_results(results));
    }
    let mut out = Vec::with_capacity(req.transactions.len());
    for t in req.transactions {
        let results = one(
            &broker,
            txns,
            t.transactional_id.0.to_string(),
            t.producer_id.0,
            t.producer_epoch,
            t.verify_only,
            flatten(&t.topics),
            version,
        )
        .await;
        out.push(
            AddPartitionsToTxnResult::default()
                .with_transactional_id(TransactionalId(t.transactional_id.0))
                .with_topic_results(topic_results(results)),
        );
    }
    AddPartitionsToTxnResponse::default().with_results_by_transaction(out)
}
