//! OffsetDelete: removes committed offsets for topics the group does not consume.

use std::sync::Arc;

use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::{
    OffsetDeleteRequest, OffsetDeleteResponse, RequestKind, ResponseKind,
};
use kafka_protocol::ResponseError;

use crate::api::gate::{self, Gate, Who, GROUP_DENIED, TOPIC_DENIED};
use crate::api::{blocking, Api, Context, Outcome};
use crate::coordinator::GroupCoordinator;
use crate::security::acl::{Operation as Op, ResourceType as Res};
use crate::services::Services;

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

/// OffsetDelete: DELETE on the group, then READ on each topic.
pub struct OffsetDelete;

impl Api for OffsetDelete {
    type Request = OffsetDeleteRequest;

    fn authorize(who: &Who, mut r: OffsetDeleteRequest, _version: i16) -> Gate {
        if !who.may(Op::Delete, Res::Group, &r.group_id) {
            return Gate::Answer(ResponseKind::OffsetDelete(
                OffsetDeleteResponse::default().with_error_code(GROUP_DENIED.code()),
            ));
        }
        let (ok, denied): (Vec<_>, Vec<_>) = r
            .topics
            .into_iter()
            .partition(|t| who.may(Op::Read, Res::Topic, &t.name));
        r.topics = ok;
        let refusals = denied
            .iter()
            .map(|t| {
                OffsetDeleteResponseTopic::default()
                    .with_name(t.name.clone())
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|p| {
                                OffsetDeleteResponsePartition::default()
                                    .with_partition_index(p.partition_index)
                                    .with_error_code(TOPIC_DENIED.code())
                            })
                            .collect(),
                    )
            })
            .collect();
        gate::run_and_extend(
            RequestKind::OffsetDelete(r),
            refusals,
            |resp, mut extra| match resp {
                ResponseKind::OffsetDelete(mut o) => {
                    o.topics.append(&mut extra);
                    ResponseKind::OffsetDelete(o)
                }
                other => other,
            },
        )
    }

    async fn handle(
        s: &Services,
        _ctx: &Context,
        r: OffsetDeleteRequest,
        _version: i16,
    ) -> Outcome {
        Outcome::respond(handle(&s.groups, r).await)
    }
}
