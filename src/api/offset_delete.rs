//! OffsetDelete: removes committed offsets for topics the group does not consume.

use std::sync::Arc;

use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::{OffsetDeleteRequest, OffsetDeleteResponse};
use kafka_protocol::ResponseError;

use crate::api::blocking;
use crate::coordinator::GroupCoordinator;

pub async fn handle(
    groups: &Arc<GroupCoordinator>,
    req: OffsetDeleteRequest,
) -> OffsetDeleteResponse {
    let coordinator = groups.clone();
    let partitions: Vec<(String, i32)> = req
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(move |p| (t.name.0.to_string(), p.partition_index))
        })
        .collect();
    let group = req.group_id.0.to_string();
    let ps = partitions.clone();
    let result = blocking(move || coordinator.delete_offsets(&group, &ps))
        .await
        .unwrap_or(Err(ResponseError::UnknownServerError));
    match result {
        Err(e) => OffsetDeleteResponse::default().with_error_code(e.code()),
        Ok(errors) => {
            let mut it = errors.into_iter();
            OffsetDeleteResponse::default().with_topics(
                req.topics
                    .into_iter()
                    .map(|t| {
                        let parts = t
                            .partitions
                            .iter()
                            .map(|p| {
                                OffsetDeleteResponsePartition::default()
                                    .with_partition_index(p.partition_index)
                                    .with_error_code(
                                        it.next().flatten().map(|e| e.code()).unwrap_or(0),
                                    )
                            })
                            .collect();
                        OffsetDeleteResponseTopic::default()
                            .with_name(t.name)
                            .with_partitions(parts)
                    })
                    .collect(),
            )
        }
    }
}
