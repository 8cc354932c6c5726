//! AddPartitionsToTxn: v0-3 from producers (one transaction), v4+ batched from brokers, with
//! the verify-only form of KIP-890 part 1. A partition that does not exist fails the whole
//! transaction (the others get OPERATION_NOT_ATTEMPTED), as in Kafka.

use std::sync::Arc;

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, RequestKind, ResponseKind, TopicName,
    TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::api::gate::{Gate, Who, CLUSTER_DENIED, TOPIC_DENIED, TXN_DENIED};
use crate::api::{blocking, Api, Context, Outcome};
use crate::broker::Broker;
use crate::coordinator::txn::TransactionCoordinator;
use crate::security::acl::{Operation as Op, ResourceType as Res};
use crate::services::Services;

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
    // v4+ comes from a partition leader adding a TV2 client's write (Kafka's
    // `transactionVersionForAddPartitionsToTxn`).
    let client_tv = if version > 3 { 2 } else { 0 };
    let result = blocking(move || {
        c.add_partitions(
            &transactional_id,
            producer_id,
            producer_epoch,
            ps,
            client_tv,
        )
    })
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

/// AddPartitionsToTxn: WRITE on the transactional id, then WRITE on every topic; if any
/// topic is refused, nothing is added (the others get OPERATION_NOT_ATTEMPTED), as in Kafka.
/// v4+ batches from brokers need CLUSTER_ACTION.
pub struct AddPartitionsToTxn;

impl Api for AddPartitionsToTxn {
    type Request = AddPartitionsToTxnRequest;

    fn authorize(who: &Who, r: AddPartitionsToTxnRequest, _version: i16) -> Gate {
        if r.transactions.is_empty() {
            // v0-3: one transaction from a client.
            let refused = refusal(
                who,
                &r.v3_and_below_transactional_id,
                &r.v3_and_below_topics,
            );
            return match refused {
                Some(topics) => Gate::Answer(ResponseKind::AddPartitionsToTxn(
                    AddPartitionsToTxnResponse::default()
                        .with_results_by_topic_v3_and_below(topics),
                )),
                None => Gate::Run(RequestKind::AddPartitionsToTxn(r), None),
            };
        }
        if !who.may_cluster(Op::ClusterAction) {
            return Gate::Answer(ResponseKind::AddPartitionsToTxn(
                AddPartitionsToTxnResponse::default().with_error_code(CLUSTER_DENIED.code()),
            ));
        }
        Gate::Run(RequestKind::AddPartitionsToTxn(r), None)
    }

    async fn handle(
        s: &Services,
        _ctx: &Context,
        r: AddPartitionsToTxnRequest,
        version: i16,
    ) -> Outcome {
        Outcome::respond(handle(s.broker.clone(), &s.txns, r, version).await)
    }
}

/// The refusal for one transaction, if any: per-topic codes.
fn refusal(
    who: &Who,
    txn: &str,
    topics: &[AddPartitionsToTxnTopic],
) -> Option<Vec<AddPartitionsToTxnTopicResult>> {
    if !who.may(Op::Write, Res::TransactionalId, txn) {
        return Some(refused_topics(topics, &|_| TXN_DENIED));
    }
    let denied: Vec<&str> = topics
        .iter()
        .map(|t| t.name.as_str())
        .filter(|n| !who.may(Op::Write, Res::Topic, n))
        .collect();
    if denied.is_empty() {
        return None;
    }
    Some(refused_topics(topics, &|n| {
        if denied.contains(&n) {
            TOPIC_DENIED
        } else {
            ResponseError::OperationNotAttempted
        }
    }))
}

/// Every partition of every topic, with the topic's code.
fn refused_topics(
    topics: &[AddPartitionsToTxnTopic],
    code_for: &dyn Fn(&str) -> ResponseError,
) -> Vec<AddPartitionsToTxnTopicResult> {
    topics
        .iter()
        .map(|t| {
            let code = code_for(&t.name);
            AddPartitionsToTxnTopicResult::default()
                .with_name(t.name.clone())
                .with_results_by_partition(
                    t.partitions
                        .iter()
                        .map(|p| {
                            AddPartitionsToTxnPartitionResult::default()
                                .with_partition_index(*p)
                                .with_partition_error_code(code.code())
                        })
                        .collect(),
                )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::test_support::{allow, broker_with_acls, who};
    use crate::security::acl::{Operation as Op, ResourceType as Res};

    fn add(txn: &str, topics: &[&str]) -> AddPartitionsToTxnRequest {
        AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(TransactionalId(StrBytes::from_string(
                txn.to_string(),
            )))
            .with_v3_and_below_topics(
                topics
                    .iter()
                    .map(|t| {
                        AddPartitionsToTxnTopic::default()
                            .with_name(TopicName(StrBytes::from_string(t.to_string())))
                            .with_partitions(vec![0])
                    })
                    .collect(),
            )
    }

    /// (topic, code) of a v3 refusal.
    fn refused(gate: Gate) -> Vec<(String, i16)> {
        let Gate::Answer(ResponseKind::AddPartitionsToTxn(r)) = gate else {
            panic!("refused as a whole")
        };
        r.results_by_topic_v3_and_below
            .iter()
            .flat_map(|t| {
                t.results_by_partition
                    .iter()
                    .map(|p| (t.name.to_string(), p.partition_error_code))
            })
            .collect()
    }

    #[tokio::test]
    async fn one_refused_topic_refuses_the_whole_request() {
        let dir = tempfile::tempdir().unwrap();
        let broker = broker_with_acls(
            dir.path(),
            &[
                allow("User:alice", Op::Write, Res::TransactionalId, "tx"),
                allow("User:alice", Op::Write, Res::Topic, "allowed"),
            ],
        );
        let alice = who(&broker, "User:alice");
        assert!(matches!(
            AddPartitionsToTxn::authorize(&alice, add("tx", &["allowed"]), 3),
            Gate::Run(_, None)
        ));
        // OPERATION_NOT_ATTEMPTED (55) for the allowed topic, TOPIC_AUTHORIZATION_FAILED (29)
        // for the refused one.
        assert_eq!(
            refused(AddPartitionsToTxn::authorize(
                &alice,
                add("tx", &["allowed", "denied"]),
                3
            )),
            [("allowed".into(), 55), ("denied".into(), 29)]
        );
        // Without WRITE on the transactional id every topic gets
        // TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53).
        assert_eq!(
            refused(AddPartitionsToTxn::authorize(
                &alice,
                add("other", &["allowed", "denied"]),
                3
            )),
            [("allowed".into(), 53), ("denied".into(), 53)]
        );
    }
}
