//! Produce: validate each partition's batch (CRC, size, timestamps, producer sequence) and
//! append it, without decompressing. A small request without a transactional id is appended
//! on the async worker that read it, as long as no append waits on the disk or a lock; the
//! rest (and every other request) go in one trip to the blocking pool; acks=0 gets no response, acks=1 is answered after the local append, and
//! acks=all waits until the high watermark passes the batch (Kafka's DelayedProduce) or the
//! request's timeout (REQUEST_TIMED_OUT). A broker that does not lead the partition answers
//! NOT_LEADER_OR_FOLLOWER with the current leader (KIP-951).

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, LeaderIdAndEpoch, NodeEndpoint, PartitionProduceResponse,
    TopicProduceResponse,
};
use kafka_protocol::messages::{
    produce_request, ProduceRequest, ProduceResponse, RequestKind, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::api::gate::{Gate, Who, TOPIC_DENIED, TXN_DENIED};
use crate::api::{blocking, Api, Context, Outcome};
use crate::broker::{
    AppendParams, AppendResult, AppendTopic, Blocking, Broker, Partition, PartitionAppend, TopicRef,
};
use crate::coordinator::txn::TransactionCoordinator;
use crate::security::acl::{Operation as Op, ResourceType as Res};
use crate::services::Services;

pub async fn handle(
    broker: Arc<Broker>,
    txns: &Arc<TransactionCoordinator>,
    ctx: &super::Context,
    req: ProduceRequest,
    version: i16,
) -> super::Outcome {
    let params = AppendParams {
        acks: req.acks,
        // Only the broker writes internal topics; Kafka lets its own admin client through.
        internal_topics_allowed: ctx.client_id == "__admin_client",
    };
    let timeout = Duration::from_millis(req.timeout_ms.max(0) as u64);
    let transactional_id = req.transactional_id.as_ref().map(|t| t.0.to_string());
    // The request's topics, in its order: the response names them as the request did.
    let names: Vec<_> = req
        .topic_data
        .iter()
        .map(|t| (t.name.clone(), t.topic_id))
        .collect();
    let topics: Vec<AppendTopic> = req
        .topic_data
        .into_iter()
        .map(|t| AppendTopic {
            topic: TopicRef::new(&t.name.0, t.topic_id),
            partitions: t
                .partition_data
                .into_iter()
                .map(|p| (p.index, p.records.unwrap_or_default()))
                .collect(),
        })
        .collect();
    // Small non-transactional requests append on this async worker, which saves the two
    // thread switches of a trip to the blocking pool (most of the cost of a small produce);
    // an append that would wait on the disk (a roll, a flush, a new epoch) or on a lock, and
    // every transactional or large request, goes to the blocking pool.
    let inline = transactional_id.is_none()
        && topics
            .iter()
            .flat_map(|t| &t.partitions)
            .map(|(_, records)| records.len())
            .sum::<usize>()
            <= INLINE_APPEND_MAX_BYTES;
    let (mut appended, topics) = if inline {
        // No transactional id: the check only refuses transactional batches.
        let verify = |p: &Partition, records: &[u8]| {
            verify_transactional(&broker, txns, None, records, p, version)
        };
        let appended = broker.append_records(topics, params, Blocking::Refused, verify);
        (appended, None)
    } else {
        (AppendResult::default(), Some(topics))
    };
    if topics.is_some() || appended.has_deferred() {
        let b = broker.clone();
        let t = txns.clone();
        let done = blocking(move || {
            let verify = |p: &Partition, records: &[u8]| {
                verify_transactional(&b, &t, transactional_id.as_deref(), records, p, version)
            };
            match topics {
                Some(topics) => b.append_records(topics, params, Blocking::Allowed, verify),
                None => {
                    b.append_deferred(&mut appended, params, verify);
                    appended
                }
            }
        })
        .await;
        appended = match done {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(error = %e, "produce task failed");
                AppendResult::default()
            }
        };
    }
    if params.acks == -1 {
        appended.await_replication(timeout).await;
    }
    if params.acks == 0 {
        let failed = appended
            .topics
            .iter()
            .flatten()
            .any(|(_, a)| !matches!(a, PartitionAppend::Appended { error: None, .. }));
        return if failed {
            super::Outcome::Close("an acks=0 produce failed")
        } else {
            super::Outcome::NoResponse
        };
    }
    let mut leaders = Vec::new();
    let responses = names
        .into_iter()
        .zip(appended.topics)
        .map(|((name, topic_id), partitions)| {
            TopicProduceResponse::default()
                .with_name(name)
                .with_topic_id(topic_id)
                .with_partition_responses(
                    partitions
                        .into_iter()
                        .map(|(index, append)| partition_response(index, append, &mut leaders))
                        .collect(),
                )
        })
        .collect();
    let node_endpoints = node_endpoints(&broker, leaders, ctx.listener);
    super::Outcome::Respond(Box::new(kafka_protocol::messages::ResponseKind::Produce(
        ProduceResponse::default()
            .with_responses(responses)
            .with_node_endpoints(node_endpoints),
    )))
}

/// One partition's answer; the leader a NOT_LEADER_OR_FOLLOWER names goes to `leaders`.
fn partition_response(
    index: i32,
    append: PartitionAppend,
    leaders: &mut Vec<i32>,
) -> PartitionProduceResponse {
    match append {
        PartitionAppend::Appended {
            base_offset,
            log_append_time,
            log_start_offset,
            error,
        } => PartitionProduceResponse::default()
            .with_index(index)
            .with_error_code(error.map_or(0, |e| e.code()))
            .with_base_offset(base_offset.0)
            .with_log_append_time_ms(log_append_time)
            .with_log_start_offset(log_start_offset.0),
        PartitionAppend::NotLeader { leader, epoch } => {
            leaders.extend(leader);
            partition_error(index, ResponseError::NotLeaderOrFollower, None).with_current_leader(
                LeaderIdAndEpoch::default()
                    .with_leader_id(leader.unwrap_or(-1).into())
                    .with_leader_epoch(epoch.0),
            )
        }
        PartitionAppend::Failed {
            error,
            message,
            record_errors,
        } => partition_error(index, error, message).with_record_errors(
            record_errors
                .into_iter()
                .map(|(index, message)| {
                    BatchIndexAndErrorMessage::default()
                        .with_batch_index(index)
                        .with_batch_index_error_message(Some(StrBytes::from_string(message)))
                })
                .collect(),
        ),
    }
}

/// KIP-951: the endpoints of the leaders named in NOT_LEADER_OR_FOLLOWER answers.
fn node_endpoints(broker: &Broker, mut leaders: Vec<i32>, listener: usize) -> Vec<NodeEndpoint> {
    leaders.sort_unstable();
    leaders.dedup();
    leaders
        .into_iter()
        .filter_map(|id| broker.broker_endpoint(id, listener))
        .map(|(id, host, port, rack)| {
            NodeEndpoint::default()
                .with_node_id(id.into())
                .with_host(StrBytes::from_string(host))
                .with_port(port as i32)
                .with_rack(rack.map(StrBytes::from_string))
        })
        .collect()
}

fn partition_error(
    index: i32,
    error: ResponseError,
    message: Option<String>,
) -> PartitionProduceResponse {
    PartitionProduceResponse::default()
        .with_index(index)
        .with_error_code(error.code())
        .with_base_offset(-1)
        .with_log_append_time_ms(-1)
        .with_log_start_offset(-1)
        .with_error_message(message.map(StrBytes::from_string))
}

/// KIP-890: a transactional batch is accepted only if its partition is in the producer's
/// transaction: verified (v11 and below, whose clients added it) or added by this write
/// (v12+, transaction version 2).
/// The largest produce request (record bytes) appended on the async worker: a page-cache
/// write of this much takes well under a millisecond.
const INLINE_APPEND_MAX_BYTES: usize = 1024 * 1024;

fn verify_transactional(
    broker: &Broker,
    txns: &Arc<TransactionCoordinator>,
    transactional_id: Option<&str>,
    records: &[u8],
    partition: &Partition,
    version: i16,
) -> Result<(), ResponseError> {
    let Ok(h) = crate::log::batch::BatchHeader::parse(records) else {
        return Ok(()); // the append reports the corrupt batch
    };
    if !h.is_transactional() {
        return Ok(());
    }
    // Kafka refuses transactional records without a (authorized) transactional id.
    let Some(id) = transactional_id else {
        return Err(ResponseError::TransactionalIdAuthorizationFailed);
    };
    use crate::coordinator::txn::state_log::{ensure_in_transaction, TxnCheck};
    ensure_in_transaction(
        broker,
        txns,
        id,
        h.producer_id,
        h.producer_epoch,
        (partition.topic.as_str(), partition.index),
        TxnCheck::for_produce(version),
    )
    .map_err(|e| crate::coordinator::txn::produce_error(e, version))
}

/// Produce: WRITE on the transactional id (if any), then WRITE on each topic.
pub struct Produce;

impl Api for Produce {
    type Request = ProduceRequest;

    fn authorize(who: &Who, mut r: ProduceRequest, _version: i16) -> Gate {
        if let Some(txn) = &r.transactional_id {
            if !who.may(Op::Write, Res::TransactionalId, txn) {
                let topics = r
                    .topic_data
                    .iter()
                    .map(|t| refusal(t, TXN_DENIED))
                    .collect();
                return Gate::Answer(ResponseKind::Produce(
                    ProduceResponse::default().with_responses(topics),
                ));
            }
        }
        let (ok, denied): (Vec<_>, Vec<_>) = r
            .topic_data
            .into_iter()
            .partition(|t| who.may_topic(Op::Write, &t.name, &t.topic_id));
        r.topic_data = ok;
        if denied.is_empty() {
            return Gate::Run(RequestKind::Produce(r), None);
        }
        let acks_zero = r.acks == 0;
        let mut refusals: Vec<_> = denied.iter().map(|t| refusal(t, TOPIC_DENIED)).collect();
        Gate::Run(
            RequestKind::Produce(r),
            Some(Box::new(move |outcome| match outcome {
                // acks=0: closing the connection is the only way to tell the producer.
                _ if acks_zero => {
                    Outcome::Close("acks=0 produce to a topic without WRITE permission")
                }
                Outcome::Respond(resp) => match *resp {
                    ResponseKind::Produce(mut p) => {
                        p.responses.append(&mut refusals);
                        Outcome::Respond(Box::new(ResponseKind::Produce(p)))
                    }
                    other => Outcome::Respond(Box::new(other)),
                },
                other => other,
            })),
        )
    }

    async fn handle(s: &Services, ctx: &Context, r: ProduceRequest, version: i16) -> Outcome {
        handle(s.broker.clone(), &s.txns, ctx, r, version).await
    }
}

/// A refused topic: every partition with `code`.
fn refusal(t: &produce_request::TopicProduceData, code: ResponseError) -> TopicProduceResponse {
    TopicProduceResponse::default()
        .with_name(t.name.clone())
        .with_topic_id(t.topic_id)
        .with_partition_responses(
            t.partition_data
                .iter()
                .map(|p| {
                    PartitionProduceResponse::default()
                        .with_index(p.index)
                        .with_error_code(code.code())
                        .with_base_offset(-1)
                        .with_log_append_time_ms(-1)
                        .with_log_start_offset(-1)
                })
                .collect(),
        )
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{TopicName, TransactionalId};

    use super::*;
    use crate::api::test_support::{allow, broker_with_acls, who};
    use crate::security::acl::{Operation as Op, ResourceType as Res};

    fn produce(topics: &[&str], acks: i16, txn: Option<&str>) -> ProduceRequest {
        ProduceRequest::default()
            .with_acks(acks)
            .with_transactional_id(
                txn.map(|t| TransactionalId(StrBytes::from_string(t.to_string()))),
            )
            .with_topic_data(
                topics
                    .iter()
                    .map(|t| {
                        TopicProduceData::default()
                            .with_name(TopicName(StrBytes::from_string(t.to_string())))
                            .with_partition_data(vec![
                                PartitionProduceData::default().with_index(0),
                                PartitionProduceData::default().with_index(1),
                            ])
                    })
                    .collect(),
            )
    }

    fn topics_of(r: &RequestKind) -> Vec<String> {
        match r {
            RequestKind::Produce(p) => p.topic_data.iter().map(|t| t.name.to_string()).collect(),
            _ => panic!("not a produce request"),
        }
    }

    /// (topic, partition, error code) of a produce response.
    fn codes(outcome: &Outcome) -> Vec<(String, i32, i16)> {
        let Outcome::Respond(r) = outcome else {
            panic!("no response")
        };
        let ResponseKind::Produce(p) = r.as_ref() else {
            panic!("not a produce response")
        };
        p.responses
            .iter()
            .flat_map(|t| {
                t.partition_responses
                    .iter()
                    .map(|p| (t.name.to_string(), p.index, p.error_code))
            })
            .collect()
    }

    #[tokio::test]
    async fn topics_without_write_are_refused_and_the_rest_produced() {
        let dir = tempfile::tempdir().unwrap();
        let broker = broker_with_acls(
            dir.path(),
            &[allow("User:alice", Op::Write, Res::Topic, "allowed")],
        );
        let alice = who(&broker, "User:alice");
        let Gate::Run(request, Some(finish)) =
            Produce::authorize(&alice, produce(&["allowed", "denied"], 1, None), 9)
        else {
            panic!("a partly refused produce runs and is finished")
        };
        assert_eq!(topics_of(&request), ["allowed"]);
        let handled = Outcome::respond(ProduceResponse::default());
        assert_eq!(
            codes(&finish(handled)),
            [("denied".into(), 0, 29), ("denied".into(), 1, 29)],
            "TOPIC_AUTHORIZATION_FAILED for every partition of the refused topic"
        );
        // acks=0: the producer hears nothing, so the connection is closed.
        let Gate::Run(_, Some(finish)) =
            Produce::authorize(&alice, produce(&["allowed", "denied"], 0, None), 9)
        else {
            panic!("a partly refused produce runs and is finished")
        };
        assert!(matches!(finish(Outcome::NoResponse), Outcome::Close(_)));
        // Everything allowed: nothing to finish.
        assert!(matches!(
            Produce::authorize(&alice, produce(&["allowed"], 1, None), 9),
            Gate::Run(_, None)
        ));
        // A super user needs no ACL.
        let admin = who(&broker, "User:admin");
        assert!(matches!(
            Produce::authorize(&admin, produce(&["denied"], 1, None), 9),
            Gate::Run(_, None)
        ));
    }

    #[tokio::test]
    async fn a_transactional_produce_without_write_on_its_id_is_refused_whole() {
        let dir = tempfile::tempdir().unwrap();
        let broker = broker_with_acls(
            dir.path(),
            &[allow("User:alice", Op::Write, Res::Topic, "allowed")],
        );
        let alice = who(&broker, "User:alice");
        let Gate::Answer(answer) =
            Produce::authorize(&alice, produce(&["allowed"], -1, Some("tx")), 9)
        else {
            panic!("refused as a whole")
        };
        assert_eq!(
            codes(&Outcome::Respond(Box::new(answer))),
            [("allowed".into(), 0, 53), ("allowed".into(), 1, 53)],
            "TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition"
        );
    }
}
