//! ListPartitionReassignments (KIP-455): the partitions being reassigned, with their replicas
//! and the replicas being added and removed. Read from this broker's metadata image in
//! cluster mode; a single node never reassigns.

use std::sync::Arc;

use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{
    BrokerId, ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, RequestKind,
    ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::api::gate::{self, Gate, Who, CLUSTER_DENIED};
use crate::api::{Api, Context, Outcome};
use crate::controller::{reassign, ClusterControl};
use crate::security::acl::Operation as Op;
use crate::services::Services;

pub fn handle(
    cluster: Option<&Arc<ClusterControl>>,
    req: ListPartitionReassignmentsRequest,
) -> ListPartitionReassignmentsResponse {
    let Some(control) = cluster else {
        return ListPartitionReassignmentsResponse::default();
    };
    let requested = req.topics.map(|topics| {
        topics
            .into_iter()
            .map(|t| (t.name.0.to_string(), t.partition_indexes))
            .collect()
    });
    let ids = |v: Vec<i32>| v.into_iter().map(BrokerId).collect();
    let topics = reassign::list(control, requested)
        .into_iter()
        .map(|(name, partitions)| {
            let partitions = partitions
                .into_iter()
                .map(|p| {
                    OngoingPartitionReassignment::default()
                        .with_partition_index(p.partition)
                        .with_replicas(ids(p.replicas))
                        .with_adding_replicas(ids(p.adding))
                        .with_removing_replicas(ids(p.removing))
                })
                .collect();
            OngoingTopicReassignment::default()
                .with_name(TopicName(StrBytes::from_string(name)))
                .with_partitions(partitions)
        })
        .collect();
    ListPartitionReassignmentsResponse::default().with_topics(topics)
}

/// ListPartitionReassignments: DESCRIBE on the cluster.
pub struct ListPartitionReassignments;

impl Api for ListPartitionReassignments {
    type Request = ListPartitionReassignmentsRequest;

    fn authorize(who: &Who, r: ListPartitionReassignmentsRequest, _version: i16) -> Gate {
        if !who.may_cluster(Op::Describe) {
            return Gate::Answer(ResponseKind::ListPartitionReassignments(
                ListPartitionReassignmentsResponse::default()
                    .with_error_code(CLUSTER_DENIED.code())
                    .with_error_message(gate::message(CLUSTER_DENIED)),
            ));
        }
        Gate::Run(RequestKind::ListPartitionReassignments(r), None)
    }

    async fn handle(
        s: &Services,
        _ctx: &Context,
        r: ListPartitionReassignmentsRequest,
        _version: i16,
    ) -> Outcome {
        Outcome::respond(handle(s.cluster.as_ref(), r))
    }
}
