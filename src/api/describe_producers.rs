//! DescribeProducers: the active producers of each partition (idempotent and transactional),
//! from the partition's producer state.

use std::sync::Arc;

use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::{
    DescribeProducersRequest, DescribeProducersResponse, RequestKind, ResponseKind,
};
use kafka_protocol::ResponseError;

use crate::api::gate::{self, Gate, Who, TOPIC_DENIED};
use crate::api::{blocking, Api, Context, Outcome};
use crate::broker::Broker;
use crate::security::acl::{Operation as Op, ResourceType as Res};
use crate::services::Services;

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

/// DescribeProducers: READ on each topic.
pub struct DescribeProducers;

impl Api for DescribeProducers {
    type Request = DescribeProducersRequest;

    fn authorize(who: &Who, mut r: DescribeProducersRequest, _version: i16) -> Gate {
        let (ok, denied): (Vec<_>, Vec<_>) = r
            .topics
            .into_iter()
            .partition(|t| who.may(Op::Read, Res::Topic, &t.name));
        r.topics = ok;
        let refusals = denied
            .iter()
            .map(|t| {
                TopicResponse::default()
                    .with_name(t.name.clone())
                    .with_partitions(
                        t.partition_indexes
                            .iter()
                            .map(|p| {
                                PartitionResponse::default()
                                    .with_partition_index(*p)
                                    .with_error_code(TOPIC_DENIED.code())
                                    .with_error_message(gate::message(TOPIC_DENIED))
                            })
                            .collect(),
                    )
            })
            .collect();
        gate::run_and_extend(
            RequestKind::DescribeProducers(r),
            refusals,
            |resp, mut extra| match resp {
                ResponseKind::DescribeProducers(mut d) => {
                    d.topics.append(&mut extra);
                    ResponseKind::DescribeProducers(d)
                }
                other => other,
            },
        )
    }

    async fn handle(
        s: &Services,
        _ctx: &Context,
        r: DescribeProducersRequest,
        _version: i16,
    ) -> Outcome {
        Outcome::respond(handle(s.broker.clone(), r).await)
    }
}
