//! AlterReplicaLogDirs (`kafka-reassign-partitions` with `log_dirs` in its plan): moves
//! replicas of this broker to other log dirs, in the background
//! ([`crate::broker::Broker::alter_replica_log_dir`]); DescribeLogDirs shows a move in
//! progress as a future replica in its destination.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::alter_replica_log_dirs_response::{
    AlterReplicaLogDirPartitionResult, AlterReplicaLogDirTopicResult,
};
use kafka_protocol::messages::{
    AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse, RequestKind, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::api::gate::{Gate, Who, CLUSTER_DENIED};
use crate::api::{blocking, Api, Context, Outcome};
use crate::broker::Broker;
use crate::security::acl::Operation as Op;
use crate::services::Services;

/// The partitions the request names, with the dir each goes to: Kafka keys the request by
/// topic partition, so the last dir named for one wins.
fn requested(r: &AlterReplicaLogDirsRequest) -> BTreeMap<(String, i32), String> {
    let mut wanted = BTreeMap::new();
    for d in &r.dirs {
        for t in &d.topics {
            for &p in &t.partitions {
                wanted.insert((t.name.0.to_string(), p), d.path.to_string());
            }
        }
    }
    wanted
}

/// Each partition's error code, grouped by topic as the response lists them.
fn results(
    codes: impl Iterator<Item = ((String, i32), i16)>,
) -> Vec<AlterReplicaLogDirTopicResult> {
    let mut by_topic: BTreeMap<String, Vec<AlterReplicaLogDirPartitionResult>> = BTreeMap::new();
    for ((topic, p), code) in codes {
        by_topic.entry(topic).or_default().push(
            AlterReplicaLogDirPartitionResult::default()
                .with_partition_index(p)
                .with_error_code(code),
        );
    }
    by_topic
        .into_iter()
        .map(|(topic, partitions)| {
            AlterReplicaLogDirTopicResult::default()
                .with_topic_name(TopicName(StrBytes::from_string(topic)))
                .with_partitions(partitions)
        })
        .collect()
}

pub async fn handle(
    broker: Arc<Broker>,
    r: AlterReplicaLogDirsRequest,
) -> AlterReplicaLogDirsResponse {
    let results = blocking(move || {
        results(requested(&r).into_iter().map(|((topic, p), path)| {
            let code = match broker.alter_replica_log_dir(&topic, p, &path) {
                Ok(()) => 0,
                Err(e) => e.code(),
            };
            ((topic, p), code)
        }))
    })
    .await
    .unwrap_or_default();
    AlterReplicaLogDirsResponse::default().with_results(results)
}

/// AlterReplicaLogDirs: ALTER on the cluster.
pub struct AlterReplicaLogDirs;

impl Api for AlterReplicaLogDirs {
    type Request = AlterReplicaLogDirsRequest;

    fn authorize(who: &Who, r: AlterReplicaLogDirsRequest, _version: i16) -> Gate {
        if !who.may_cluster(Op::Alter) {
            let denied = CLUSTER_DENIED.code();
            let results = results(requested(&r).into_keys().map(|key| (key, denied)));
            return Gate::Answer(ResponseKind::AlterReplicaLogDirs(
                AlterReplicaLogDirsResponse::default().with_results(results),
            ));
        }
        Gate::Run(RequestKind::AlterReplicaLogDirs(r), None)
    }

    async fn handle(
        s: &Services,
        _ctx: &Context,
        r: AlterReplicaLogDirsRequest,
        _version: i16,
    ) -> Outcome {
        Outcome::respond(handle(s.broker.clone(), r).await)
    }
}
