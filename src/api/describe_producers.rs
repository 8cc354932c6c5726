//! DescribeProducers: the active producers of each partition (idempotent and transactional),
//! from the partition's producer state.

use std::sync::Arc;

use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::{DescribeProducersRequest, DescribeProducersResponse};
use kafka_protocol::ResponseError;

use crate::api::blocking;
use crate::broker::Broker;

pub async fn handle(
    broker: Arc<Broker>,
    req: DescribeProducersRequest,
) -> DescribeProducersResponse {
    let topics = blocking(move || {
        req.topics
            .into_iter()
            .map(|t| {
                let partitions = t
                    .partition_indexes
                    .iter()
                    .map(|&p| {
                        let r = PartitionResponse::default().with_partition_index(p);
                        match broker.partition(t.name.0.as_str(), p) {
                            None => {
                                r.with_error_code(ResponseError::UnknownTopicOrPartition.code())
                            }
                            Some(part) => r.with_active_producers(
                                Broker::describe_producers(&part)
                                    .into_iter()
                                    .map(|(pid, epoch, seq, ts, ce, txn_start)| {
                                        ProducerState::default()
                                            .with_producer_id(pid.into())
                                            .with_producer_epoch(epoch as i32)
                                            .with_last_sequence(seq)
                                            .with_last_timestamp(ts)
                                            .with_coordinator_epoch(ce)
                                            .with_current_txn_start_offset(txn_start)
                                    })
                                    .collect(),
                            ),
                        }
                    })
                    .collect();
                TopicResponse::default()
                    .with_name(t.name)
                    .with_partitions(partitions)
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_default();
    DescribeProducersResponse::default().with_topics(topics)
}
