//! DeleteRecords: moves the log start offset forward (offset -1 means the high watermark).

use std::sync::Arc;

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{
    DeleteRecordsRequest, DeleteRecordsResponse, RequestKind, ResponseKind,
};
use kafka_protocol::ResponseError;

use crate::api::gate::{self, Gate, Who, TOPIC_DENIED};
use crate::api::{blocking, Api, Context, Outcome};
use crate::broker::{Broker, Offset};
use crate::security::acl::{Operation as Op, ResourceType as Res};
use crate::services::Services;

pub async fn handle(broker: Arc<Broker>, req: DeleteRecordsRequest) -> DeleteRecordsResponse {
    let b = broker.clone();
    let topics = blocking(move || {
        req.topics
            .into_iter()
            .map(|t| {
                let topic = b.topic(t.name.0.as_str());
                let partitions = t
                    .partitions
                    .into_iter()
                    .map(|p| {
                        let r = DeleteRecordsPartitionResult::default().with_partition_index(p.partition_index).with_low_watermark(-1);
                        let Some(part) = topic.as_ref().and_then(|x| x.partitions.get(usize::try_from(p.partition_index).ok()?)).cloned() else {
                            return r.with_error_code(ResponseError::UnknownTopicOrPartition.code());
                        };
                        if !part.is_leader() {
                            return r.with_error_code(ResponseError::NotLeaderOrFollower.code());
                        }
                        let hw = part.offsets().high_watermark.0;
                        let target = if p.offset == -1 { hw } else { p.offset };
                        if target < 0 || target > hw {
                            return r.with_error_code(ResponseError::OffsetOutOfRange.code());
                        }
                        match part.delete_records_before(Offset(target)) {
                            Ok(low) => r.with_low_watermark(low.0),
                            Err(e) => {
                                tracing::error!(topic = %part.topic, partition = part.index, error = %e, "delete records failed");
                                r.with_error_code(ResponseError::KafkaStorageError.code())
                            }
                        }
                    })
                    .collect();
                DeleteRecordsTopicResult::default().with_name(t.name).with_partitions(partitions)
            })
            .collect()
    })
    .await
    .unwrap_or_default();
    DeleteRecordsResponse::default().with_topics(topics)
}

/// DeleteRecords: DELETE on each topic.
pub struct DeleteRecords;

impl Api for DeleteRecords {
    type Request = DeleteRecordsRequest;

    fn authorize(who: &Who, mut r: DeleteRecordsRequest, _version: i16) -> Gate {
        let (ok, denied): (Vec<_>, Vec<_>) = r
            .topics
            .into_iter()
            .partition(|t| who.may(Op::Delete, Res::Topic, &t.name));
        r.topics = ok;
        let refusals = denied
            .iter()
            .map(|t| {
                DeleteRecordsTopicResult::default()
                    .with_name(t.name.clone())
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|p| {
                                DeleteRecordsPartitionResult::default()
                                    .with_partition_index(p.partition_index)
                                    .with_low_watermark(-1)
                                    .with_error_code(TOPIC_DENIED.code())
                            })
                            .collect(),
                    )
            })
            .collect();
        gate::run_and_extend(
            RequestKind::DeleteRecords(r),
            refusals,
            |resp, mut extra| match resp {
                ResponseKind::DeleteRecords(mut d) => {
                    d.topics.append(&mut extra);
                    ResponseKind::DeleteRecords(d)
                }
                other => other,
            },
        )
    }

    async fn handle(
        s: &Services,
        _ctx: &Context,
        r: DeleteRecordsRequest,
        _version: i16,
    ) -> Outcome {
        Outcome::respond(handle(s.broker.clone(), r).await)
    }
}
