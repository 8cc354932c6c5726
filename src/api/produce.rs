//! Produce: validate each partition's batch (CRC, size, timestamps, producer sequence) and
//! append it, without decompressing. All partitions of a request are appended in one trip to
//! the blocking pool; acks=0 gets no response, acks=1 is answered after the local append, and
//! acks=all waits until the high watermark passes the batch (Kafka's DelayedProduce) or the
//! request's timeout (REQUEST_TIMED_OUT). A broker that does not lead the partition answers
//! NOT_LEADER_OR_FOLLOWER with the current leader (KIP-951).

use std::sync::atomic::Ordering;
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
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::api::gate::{Gate, Who, TOPIC_DENIED, TXN_DENIED};
use crate::api::{blocking, errors, Api, Context, Outcome};
use crate::broker::{Broker, Partition};
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
    let acks = req.acks;
    let timeout = Duration::from_millis(req.timeout_ms.max(0) as u64);
    let b = broker.clone();
    let t = txns.clone();
    // Only the broker writes internal topics; Kafka lets its own admin client through.
    let may_write_internal = ctx.client_id == "__admin_client";
    let result = blocking(move || append_all(&b, &t, req, version, may_write_internal)).await;
    let Appended {
        mut responses,
        awaiting,
        leaders,
    } = match result {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %e, "produce task failed");
            Appended::default()
        }
    };
    if acks == -1 && !awaiting.is_empty() {
        await_replication(&mut responses, awaiting, timeout).await;
    }
    if acks == 0 {
        let failed = responses
            .iter()
            .flat_map(|t| &t.partition_responses)
            .any(|p| p.error_code != 0);
        return if failed {
            super::Outcome::Close("an acks=0 produce failed")
        } else {
            super::Outcome::NoResponse
        };
    }
    let node_endpoints = node_endpoints(&broker, leaders, ctx.listener);
    super::Outcome::Respond(Box::new(kafka_protocol::messages::ResponseKind::Produce(
        ProduceResponse::default()
            .with_responses(responses)
            .with_node_endpoints(node_endpoints),
    )))
}

/// An acks=all append waiting for the ISR: where its answer is, and the offset the high
/// watermark must reach.
struct Awaiting {
    topic_slot: usize,
    partition_slot: usize,
    partition: Arc<Partition>,
    required_offset: i64,
    min_insync_replicas: i32,
}

#[derive(Default)]
struct Appended {
    responses: Vec<TopicProduceResponse>,
    awaiting: Vec<Awaiting>,
    /// Leaders named in NOT_LEADER_OR_FOLLOWER answers.
    leaders: Vec<i32>,
}

/// Kafka's DelayedProduce: waits until every append is replicated to the ISR (woken by high
/// watermark moves), fails one whose partition lost leadership or whose ISR shrank below
/// min.insync.replicas, and times the rest out.
async fn await_replication(
    responses: &mut [TopicProduceResponse],
    mut awaiting: Vec<Awaiting>,
    timeout: Duration,
) {
    let deadline = Instant::now() + timeout;
    loop {
        let notify = Arc::new(Notify::new());
        for a in &awaiting {
            a.partition.add_waiter(notify.clone());
        }
        awaiting.retain(|a| {
            let outcome = a
                .partition
                .check_enough_replicas_reach_offset(a.required_offset, a.min_insync_replicas);
            match outcome {
                Ok(false) => true,
                Ok(true) => false,
                Err(code) => {
                    set_error(responses, a, code);
                    false
                }
            }
        });
        if awaiting.is_empty() {
            return;
        }
        if tokio::time::timeout_at(deadline, notify.notified())
            .await
            .is_err()
        {
            for a in &awaiting {
                set_error(responses, a, ResponseError::RequestTimedOut);
            }
            return;
        }
    }
}

fn set_error(responses: &mut [TopicProduceResponse], a: &Awaiting, code: ResponseError) {
    if let Some(r) = responses
        .get_mut(a.topic_slot)
        .and_then(|t| t.partition_responses.get_mut(a.partition_slot))
    {
        r.error_code = code.code();
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

fn partition_config_min_isr(topic: Option<&crate::broker::Topic>) -> i32 {
    topic.map(|t| t.config.min_insync_replicas).unwrap_or(1)
}

/// NOT_LEADER_OR_FOLLOWER with the leader this broker knows.
fn not_leader(partition: &Partition, index: i32) -> (PartitionProduceResponse, Option<i32>) {
    let (leader, epoch) = partition.leader_and_epoch();
    let response = partition_error(index, ResponseError::NotLeaderOrFollower, None)
        .with_current_leader(
            LeaderIdAndEpoch::default()
                .with_leader_id(leader.unwrap_or(-1).into())
                .with_leader_epoch(epoch),
        );
    (response, leader)
}

/// KIP-890 part 1: a transactional batch is accepted only if the coordinator has the
/// partition in the producer's ongoing transaction (checked in memory, no I/O).
fn verify_transactional(
    broker: &Broker,
    txns: &Arc<TransactionCoordinator>,
    transactional_id: Option<&str>,
    records: &[u8],
    topic: &str,
    partition: i32,
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
    use crate::coordinator::txn::state_log::{
        coordinator_location, verify_remotely, CoordinatorLocation,
    };
    let produce_error = |e| crate::coordinator::txn::produce_error(e, version);
    match coordinator_location(broker, id) {
        CoordinatorLocation::Local => {}
        CoordinatorLocation::Remote(coordinator) => {
            // As Kafka, only a producer's first batch of a transaction on this partition is
            // verified: later ones continue a transaction the coordinator already vouched for.
            let ongoing = broker
                .partition(topic, partition)
                .is_some_and(|p| p.has_ongoing_transaction(h.producer_id, h.producer_epoch));
            if ongoing {
                return Ok(());
            }
            return verify_remotely(
                broker,
                coordinator,
                id,
                h.producer_id,
                h.producer_epoch,
                topic,
                partition,
            )
            .map_err(produce_error);
        }
        CoordinatorLocation::Unavailable => {
            return Err(produce_error(ResponseError::CoordinatorNotAvailable))
        }
    }
    txns.verify_partition_for_produce(
        id,
        h.producer_id,
        h.producer_epoch,
        topic,
        partition,
        version,
    )
}

fn append_all(
    broker: &Broker,
    txns: &Arc<TransactionCoordinator>,
    req: ProduceRequest,
    version: i16,
    may_write_internal: bool,
) -> Appended {
    let transactional_id = req.transactional_id.as_ref().map(|t| t.0.to_string());
    let acks_valid = matches!(req.acks, -1..=1);
    let mut out = Vec::with_capacity(req.topic_data.len());
    let mut awaiting = Vec::new();
    let mut leaders = Vec::new();
    for topic_data in req.topic_data {
        let topic = if topic_data.name.0.is_empty() {
            broker.topic_by_id(&topic_data.topic_id)
        } else {
            broker.topic(topic_data.name.0.as_str())
        };
        let missing = if topic_data.name.0.is_empty() {
            ResponseError::UnknownTopicId
        } else {
            ResponseError::UnknownTopicOrPartition
        };
        let mut partitions = Vec::with_capacity(topic_data.partition_data.len());
        for pd in topic_data.partition_data {
            if !acks_valid {
                partitions.push(partition_error(
                    pd.index,
                    ResponseError::InvalidRequiredAcks,
                    None,
                ));
                continue;
            }
            if !may_write_internal && topic.as_ref().is_some_and(|t| t.is_internal()) {
                partitions.push(partition_error(
                    pd.index,
                    ResponseError::InvalidTopicException,
                    Some("Cannot append to internal topic".into()),
                ));
                continue;
            }
            let Some(partition) = topic
                .as_ref()
                .and_then(|t| t.partitions.get(usize::try_from(pd.index).ok()?))
            else {
                partitions.push(partition_error(pd.index, missing, None));
                continue;
            };
            if !partition.is_leader() {
                let (response, leader) = not_leader(partition, pd.index);
                leaders.extend(leader);
                partitions.push(response);
                continue;
            }
            // acks=all needs min.insync.replicas (capped by the replication factor) in sync.
            let min_isr = partition_config_min_isr(topic.as_deref());
            if req.acks == -1 && !partition.has_enough_in_sync_replicas(min_isr) {
                partitions.push(partition_error(
                    pd.index,
                    ResponseError::NotEnoughReplicas,
                    Some(format!(
                        "The size of the current ISR is below min.insync.replicas {min_isr}"
                    )),
                ));
                continue;
            }
            let records = pd.records.unwrap_or_default();
            if let Err(code) = verify_transactional(
                broker,
                txns,
                transactional_id.as_deref(),
                &records,
                &partition.topic,
                pd.index,
                version,
            ) {
                broker.metrics.record_error(0, code.code());
                partitions.push(partition_error(pd.index, code, None));
                continue;
            }
            match partition.append(&records) {
                Ok(info) => {
                    if !info.duplicate {
                        broker
                            .metrics
                            .produce_bytes
                            .fetch_add(info.bytes as u64, Ordering::Relaxed);
                        broker
                            .metrics
                            .produce_records
                            .fetch_add(info.records as u64, Ordering::Relaxed);
                    }
                    // Already replicated (a single replica): answer without waiting.
                    let replicated = partition
                        .check_enough_replicas_reach_offset(info.last_offset + 1, min_isr)
                        .unwrap_or(false);
                    if req.acks == -1 && !replicated {
                        awaiting.push(Awaiting {
                            topic_slot: out.len(),
                            partition_slot: partitions.len(),
                            partition: partition.clone(),
                            required_offset: info.last_offset + 1,
                            min_insync_replicas: min_isr,
                        });
                    }
                    partitions.push(
                        PartitionProduceResponse::default()
                            .with_index(pd.index)
                            .with_base_offset(info.base_offset)
                            .with_log_append_time_ms(info.log_append_time)
                            .with_log_start_offset(partition.offsets().log_start_offset),
                    );
                }
                Err(crate::log::AppendError::NotLeaderOrFollower) => {
                    let (response, leader) = not_leader(partition, pd.index);
                    leaders.extend(leader);
                    partitions.push(response);
                }
                Err(e) => {
                    let code = errors::append_error(&e);
                    broker.metrics.record_error(0, code.code());
                    if matches!(e, crate::log::AppendError::Io(_)) {
                        tracing::error!(topic = %partition.topic, partition = partition.index, error = %e, "append failed");
                    } else {
                        tracing::debug!(topic = %partition.topic, partition = partition.index, error = %e, "rejected batch");
                    }
                    let mut response = partition_error(pd.index, code, Some(e.to_string()));
                    if let crate::log::AppendError::RecordErrors { record_errors, .. } = &e {
                        response.record_errors = record_errors
                            .iter()
                            .map(|(index, message)| {
                                BatchIndexAndErrorMessage::default()
                                    .with_batch_index(*index)
                                    .with_batch_index_error_message(Some(StrBytes::from_string(
                                        message.clone(),
                                    )))
                            })
                            .collect();
                    }
                    partitions.push(response);
                }
            }
        }
        out.push(
            TopicProduceResponse::default()
                .with_name(topic_data.name)
                .with_topic_id(topic_data.topic_id)
                .with_partition_responses(partitions),
        );
    }
    Appended {
        responses: out,
        awaiting,
        leaders,
    }
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
