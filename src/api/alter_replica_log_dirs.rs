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
    AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse, RequestKind, ResponseKind,
};

use crate::api::gate::{Gate, Who, CLUSTER_DENIED};
use crate::api::{blocking, Api, Context, Outcome};
use crate::broker::Broker;
use crate::security::acl::Operation as Op;
use crate::services::Services;

/// Every partition of the request with `error`, as Kafka answers them all when refused.
fn every_partition(
    r: &AlterReplicaLogDirsRequest,
    error: i16,
) -> Vec<AlterReplicaLogDirTopicResult> {
    let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for d in &r.dirs {
        for t in &d.topics {
            by_topic
                .entry(t.name.0.to_string())
                .or_default()
                .extend(&t.partitions);
        }
    }
    by_topic
        .into_iter()
        .map(|(topic, partitions)| result(&topic, partitions.into_iter().map(|p| (p, error))))
        .collect()
}

fn result(
    topic: &str,
    partitions: impl Iterator<Item = (i32, i16)>,
) -> AlterReplicaLogDirTopicResult {
    AlterReplicaLogDirTopicResult::default()
        .with_topic_name(kafka_protocol::messages::TopicName(
            kafka_protocol::protocol::StrBytes::from_string(topic.to_string()),
        ))
        .with_partitions(
            partitions
                .map(|(p, e)| {
                    AlterReplicaLogDirPartitionResult::default()
                        .with_partition_index(p)
                        .with_error_code(e)
                })
                .collect(),
        )
}

pub async fn handle(
    broker: Arc<Broker>,
    r: AlterReplicaLogDirsRequest,
) -> AlterReplicaLogDirsResponse {
    let results = blocking(move || {
        // Kafka keys the request by topic partition: the last dir named for one wins.
        let mut wanted: BTreeMap<(String, i32), String> = BTreeMap::new();
        for d in &r.dirs {
            for t in &d.topics {
                for &p in &t.partitions {
                    wanted.insert((t.name.0.to_string(), p), d.path.to_string());
                }
            }
        }
        let mut by_topic: BTreeMap<String, Vec<(i32, i16)>> = BTreeMap::new();
        for ((topic, p), path) in wanted {
            let code = match broker.alter_replica_log_dir(&topic, p, &path) {
                Ok(()) => 0,
                Err(e) => e.code(),
            };
            by_topic.entry(topic).or_default().push((p, code));
        }
        by_topic
            .into_iter()
            .map(|(topic, parts)| result(&topic, parts.into_iter()))
            .collect()
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
            let results = every_partition(&r, CLUSTER_DENIED.code());
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
