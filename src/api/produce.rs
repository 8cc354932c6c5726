//! Produce: validate each partition's batch (CRC, size, timestamps, producer sequence) and
//! append it, without decompressing. All partitions of a request are appended in one trip to
//! the blocking pool; acks=0 gets no response.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::api::{blocking, errors};
use crate::broker::Broker;

pub async fn handle(
    broker: Arc<Broker>,
    ctx: &super::Context,
    req: ProduceRequest,
    version: i16,
) -> super::Outcome {
    let acks = req.acks;
    let b = broker.clone();
    // Only the broker writes internal topics; Kafka lets its own admin client through.
    let may_write_internal = ctx.client_id == "__admin_client";
    let result = blocking(move || append_all(&b, req, version, may_write_internal)).await;
    let responses = match result {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %e, "produce task failed");
            Vec::new()
        }
    };
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
    super::Outcome::Respond(Box::new(kafka_protocol::messages::ResponseKind::Produce(
        ProduceResponse::default().with_responses(responses),
    )))
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

/// KIP-890 part 1: a transactional batch is accepted only if the coordinator has the
/// partition in the producer's ongoing transaction (checked in memory, no I/O).
fn verify_transactional(
    broker: &Broker,
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
    match broker.txn_coordinator() {
        Some(c) => c.verify_partition_for_produce(
            id,
            h.producer_id,
            h.producer_epoch,
            topic,
            partition,
            version,
        ),
        None => Err(ResponseError::CoordinatorNotAvailable),
    }
}

fn append_all(
    broker: &Broker,
    req: ProduceRequest,
    version: i16,
    may_write_internal: bool,
) -> Vec<TopicProduceResponse> {
    let transactional_id = req.transactional_id.as_ref().map(|t| t.0.to_string());
    let acks_valid = matches!(req.acks, -1..=1);
    let mut out = Vec::with_capacity(req.topic_data.len());
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
            // The ISR of a single broker is one replica; acks=all needs min.insync.replicas.
            let isr_size = 1;
            if req.acks == -1 && isr_size < partition_config_min_isr(topic.as_deref()) {
                partitions.push(partition_error(
                    pd.index,
                    ResponseError::NotEnoughReplicas,
                    None,
                ));
                continue;
            }
            let records = pd.records.unwrap_or_default();
            if let Err(code) = verify_transactional(
                broker,
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
                    partitions.push(
                        PartitionProduceResponse::default()
                            .with_index(pd.index)
                            .with_base_offset(info.base_offset)
                            .with_log_append_time_ms(info.log_append_time)
                            .with_log_start_offset(partition.offsets().log_start_offset),
                    );
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
    out
}
