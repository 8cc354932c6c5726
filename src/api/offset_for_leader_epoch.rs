//! OffsetForLeaderEpoch: the end offset of a leader epoch, from the leader epoch cache (Kafka's
//! `Partition.lastOffsetForLeaderEpoch`). Consumers and followers are answered by the leader
//! only; the debugging replica id (-2, also every request before v3) by any replica.

/// Kafka's `OffsetsForLeaderEpochRequest.DEBUGGING_REPLICA_ID`.
const DEBUGGING_REPLICA_ID: i32 = -2;

use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{
    OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, RequestKind, ResponseKind,
};
use kafka_protocol::ResponseError;

use crate::api::gate::{self, Gate, Who, CLUSTER_DENIED, TOPIC_DENIED};
use crate::api::{Api, Context, Outcome};
use crate::broker::{Broker, LeaderEpoch, Role};
use crate::security::acl::{Operation as Op, ResourceType as Res};
use crate::services::Services;

/// Runs on the blocking pool: it takes partition log locks, which an append may hold
/// across an fsync.
pub async fn handle(
    broker: std::sync::Arc<Broker>,
    req: OffsetForLeaderEpochRequest,
) -> OffsetForLeaderEpochResponse {
    crate::api::blocking(move || lookup(&broker, req))
        .await
        .unwrap_or_default()
}

fn lookup(broker: &Broker, req: OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse {
    let only_leader = req.replica_id.0 != DEBUGGING_REPLICA_ID;
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let topic = broker.topic(t.topic.0.as_str());
            let partitions = t
                .partitions
                .into_iter()
                .map(|p| {
                    let r = EpochEndOffset::default()
                        .with_partition(p.partition)
                        .with_leader_epoch(-1)
                        .with_end_offset(-1);
                    let Some(part) = topic
                        .as_ref()
                        .and_then(|x| x.partitions.get(usize::try_from(p.partition).ok()?))
                        .cloned()
                    else {
                        return r.with_error_code(ResponseError::UnknownTopicOrPartition.code());
                    };
                    let current = part.leader_epoch().0;
                    if p.current_leader_epoch >= 0 && p.current_leader_epoch != current {
                        let e = if p.current_leader_epoch > current {
                            ResponseError::UnknownLeaderEpoch
                        } else {
                            ResponseError::FencedLeaderEpoch
                        };
                        return r.with_error_code(e.code());
                    }
                    let serves = match part.role() {
                        Role::Leader => true,
                        Role::Follower => !only_leader,
                        Role::None => false,
                    };
                    if !serves {
                        return r.with_error_code(ResponseError::NotLeaderOrFollower.code());
                    }
                    let (epoch, end) = part.end_offset_for_epoch(LeaderEpoch(p.leader_epoch));
                    r.with_leader_epoch(epoch.0).with_end_offset(end.0)
                })
                .collect();
            OffsetForLeaderTopicResult::default()
                .with_topic(t.topic)
                .with_partitions(partitions)
        })
        .collect();
    OffsetForLeaderEpochResponse::default().with_topics(topics)
}

/// OffsetForLeaderEpoch: DESCRIBE on each topic; followers need CLUSTER_ACTION.
pub struct OffsetForLeaderEpoch;

impl Api for OffsetForLeaderEpoch {
    type Request = OffsetForLeaderEpochRequest;

    fn authorize(who: &Who, mut r: OffsetForLeaderEpochRequest, _version: i16) -> Gate {
        let (op_ok, code) = if r.replica_id.0 >= 0 {
            (who.may_cluster(Op::ClusterAction), CLUSTER_DENIED)
        } else {
            (true, TOPIC_DENIED)
        };
        let (ok, denied): (Vec<_>, Vec<_>) = r
            .topics
            .into_iter()
            .partition(|t| op_ok && who.may(Op::Describe, Res::Topic, &t.topic));
        r.topics = ok;
        let refusals = denied
            .iter()
            .map(|t| {
                OffsetForLeaderTopicResult::default()
                    .with_topic(t.topic.clone())
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|p| {
                                EpochEndOffset::default()
                                    .with_partition(p.partition)
                                    .with_error_code(code.code())
                                    .with_leader_epoch(-1)
                                    .with_end_offset(-1)
                            })
                            .collect(),
                    )
            })
            .collect();
        gate::run_and_extend(
            RequestKind::OffsetForLeaderEpoch(r),
            refusals,
            |resp, mut extra| match resp {
                ResponseKind::OffsetForLeaderEpoch(mut o) => {
                    o.topics.append(&mut extra);
                    ResponseKind::OffsetForLeaderEpoch(o)
                }
                other => other,
            },
        )
    }

    async fn handle(
        s: &Services,
        _ctx: &Context,
        r: OffsetForLeaderEpochRequest,
        _version: i16,
    ) -> Outcome {
        Outcome::respond(handle(s.broker.clone(), r).await)
    }
}
