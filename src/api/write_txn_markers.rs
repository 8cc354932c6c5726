//! WriteTxnMarkers: the inter-broker request a transaction coordinator sends to partition
//! leaders. Strata's coordinator sends it for partitions another broker leads and writes its
//! own partitions' markers directly. Answered once the marker is replicated (acks=all).

use std::sync::Arc;

use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{
    RequestKind, ResponseKind, WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};
use kafka_protocol::ResponseError;

use crate::api::gate::{Gate, Who, CLUSTER_DENIED};
use crate::api::{blocking, Api, Context, Outcome};
use crate::broker::Broker;
use crate::coordinator::offsets_log::await_replicated;
use crate::coordinator::{GroupCoordinator, LogWriteError, OFFSETS_TOPIC};
use crate::log::TxnMarker;
use crate::security::acl::Operation as Op;
use crate::services::Services;

/// How long a marker waits for the in-sync replicas (Kafka: `request.timeout.ms`).
const MARKER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

pub async fn handle(
    broker: Arc<Broker>,
    groups: Arc<GroupCoordinator>,
    req: WriteTxnMarkersRequest,
) -> WriteTxnMarkersResponse {
    let b = broker.clone();
    let markers = blocking(move || {
        req.markers
            .into_iter()
            .map(|m| {
                let topics = m
                    .topics
                    .iter()
                    .map(|t| {
                        let partitions = t
                            .partition_indexes
                            .iter()
                            .map(|&p| {
                                let marker = TxnMarker {
                                    producer_id: m.producer_id.0,
                                    producer_epoch: m.producer_epoch,
                                    coordinator_epoch: m.coordinator_epoch,
                                    commit: m.transaction_result,
                                    transaction_version: m.transaction_version.into(),
                                };
                                let code = write_one(&b, &groups, t.name.0.as_str(), p, &marker)
                                    .map_or_else(|e| e.code(), |()| 0);
                                WritableTxnMarkerPartitionResult::default()
                                    .with_partition_index(p)
                                    .with_error_code(code)
                            })
                            .collect();
                        WritableTxnMarkerTopicResult::default()
                            .with_name(t.name.clone())
                            .with_partitions(partitions)
                    })
                    .collect();
                WritableTxnMarkerResult::default()
                    .with_producer_id(m.producer_id)
                    .with_topics(topics)
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_default();
    WriteTxnMarkersResponse::default().with_markers(markers)
}

fn write_one(
    broker: &Broker,
    groups: &GroupCoordinator,
    topic: &str,
    partition: i32,
    marker: &TxnMarker,
) -> Result<(), ResponseError> {
    let p = broker
        .partition(topic, partition)
        .ok_or(ResponseError::UnknownTopicOrPartition)?;
    let offset = p.write_txn_marker(marker).map_err(|e| e.code())?;
    // Kafka appends markers with acks=all: the coordinator completes the transaction only
    // once every marker is replicated.
    await_replicated(&p, offset.next(), MARKER_TIMEOUT).map_err(|e| match e {
        LogWriteError::NotLeader => ResponseError::NotLeaderOrFollower,
        LogWriteError::NotEnoughReplicas => ResponseError::NotEnoughReplicasAfterAppend,
        LogWriteError::Timeout => ResponseError::RequestTimedOut,
        _ => ResponseError::KafkaStorageError,
    })?;
    if topic == OFFSETS_TOPIC {
        groups.complete_txn_offsets(marker.producer_id, partition, marker.commit);
    }
    Ok(())
}

/// WriteTxnMarkers: CLUSTER_ACTION (only brokers send it).
pub struct WriteTxnMarkers;

impl Api for WriteTxnMarkers {
    type Request = WriteTxnMarkersRequest;

    fn authorize(who: &Who, r: WriteTxnMarkersRequest, _version: i16) -> Gate {
        if who.may_cluster(Op::ClusterAction) {
            return Gate::Run(RequestKind::WriteTxnMarkers(r), None);
        }
        let markers = r
            .markers
            .iter()
            .map(|m| {
                WritableTxnMarkerResult::default()
                    .with_producer_id(m.producer_id)
                    .with_topics(
                        m.topics
                            .iter()
                            .map(|t| {
                                WritableTxnMarkerTopicResult::default()
                                    .with_name(t.name.clone())
                                    .with_partitions(
                                        t.partition_indexes
                                            .iter()
                                            .map(|p| {
                                                WritableTxnMarkerPartitionResult::default()
                                                    .with_partition_index(*p)
                                                    .with_error_code(CLUSTER_DENIED.code())
                                            })
                                            .collect(),
                                    )
                            })
                            .collect(),
                    )
            })
            .collect();
        Gate::Answer(ResponseKind::WriteTxnMarkers(
            WriteTxnMarkersResponse::default().with_markers(markers),
        ))
    }

    async fn handle(
        s: &Services,
        _ctx: &Context,
        r: WriteTxnMarkersRequest,
        _version: i16,
    ) -> Outcome {
        Outcome::respond(handle(s.broker.clone(), s.groups.clone(), r).await)
    }
}
