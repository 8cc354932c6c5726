//! DescribeLogDirs: partition sizes per log dir, with the future replica of a partition
//! moving to another dir (AlterReplicaLogDirs).

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{
    DescribeLogDirsRequest, DescribeLogDirsResponse, RequestKind, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::api::gate::{Gate, Who, CLUSTER_DENIED};
use crate::api::{blocking, Api, Context, Outcome};
use crate::broker::Broker;
use crate::security::acl::Operation as Op;
use crate::services::Services;

pub async fn handle(
    broker: Arc<Broker>,
    req: DescribeLogDirsRequest,
    version: i16,
) -> DescribeLogDirsResponse {
    let b = broker.clone();
    let results = blocking(move || {
        let wanted = |topic: &str, p: i32| match &req.topics {
            None => true,
            Some(ts) => ts
                .iter()
                .any(|t| t.topic.0.as_str() == topic && t.partitions.contains(&p)),
        };
        // dir -> topic -> partitions
        let mut by_dir: BTreeMap<String, BTreeMap<String, Vec<DescribeLogDirsPartition>>> =
            BTreeMap::new();
        for d in &b.config.log_dirs {
            by_dir.entry(d.display().to_string()).or_default();
        }
        for p in b.all_partitions() {
            if !wanted(&p.topic, p.index) {
                continue;
            }
            let (dir, size) = p.log_dir_and_size();
            let mut list = |dir: &std::path::Path, size: u64, future: bool| {
                by_dir
                    .entry(dir.display().to_string())
                    .or_default()
                    .entry(p.topic.clone())
                    .or_default()
                    .push(
                        DescribeLogDirsPartition::default()
                            .with_partition_index(p.index)
                            .with_partition_size(size as i64)
                            .with_is_future_key(future),
                    );
            };
            // A move in progress: the copy is a future replica in its destination.
            if let Some((to, copied)) = b.log_dir_moves.future_replica(&p.topic, p.index, &dir) {
                list(&to, copied, true);
            }
            list(&dir, size, false);
        }
        by_dir
            .into_iter()
            .map(|(dir, topics)| {
                // v4+ carry the file system's total and usable bytes.
                let (total, usable) = crate::log::disk_space(std::path::Path::new(&dir))
                    .filter(|_| version >= 4)
                    .unwrap_or((-1, -1));
                DescribeLogDirsResult::default()
                    .with_log_dir(StrBytes::from_string(dir))
                    .with_total_bytes(total)
                    .with_usable_bytes(usable)
                    .with_topics(
                        topics
                            .into_iter()
                            .map(|(t, parts)| {
                                DescribeLogDirsTopic::default()
                                    .with_name(TopicName(StrBytes::from_string(t)))
                                    .with_partitions(parts)
                            })
                            .collect(),
                    )
            })
            .collect()
    })
    .await
    .unwrap_or_default();
    DescribeLogDirsResponse::default().with_results(results)
}

/// DescribeLogDirs: DESCRIBE on the cluster.
pub struct DescribeLogDirs;

impl Api for DescribeLogDirs {
    type Request = DescribeLogDirsRequest;

    fn authorize(who: &Who, r: DescribeLogDirsRequest, _version: i16) -> Gate {
        if !who.may_cluster(Op::Describe) {
            return Gate::Answer(ResponseKind::DescribeLogDirs(
                DescribeLogDirsResponse::default().with_error_code(CLUSTER_DENIED.code()),
            ));
        }
        Gate::Run(RequestKind::DescribeLogDirs(r), None)
    }

    async fn handle(
        s: &Services,
        _ctx: &Context,
        r: DescribeLogDirsRequest,
        version: i16,
    ) -> Outcome {
        Outcome::respond(handle(s.broker.clone(), r, version).await)
    }
}
