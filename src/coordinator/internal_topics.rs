//! How the coordinators' topics (`__consumer_offsets`, `__transaction_state`,
//! `__share_group_state`) are created:
//! their partition counts, replication factors and configs, as Kafka's
//! `GroupCoordinatorService.groupMetadataTopicConfigs` and
//! `TransactionStateManager.transactionTopicConfigs` set them.
//!
//! On a single node a coordinator creates its topic locally on first use, with one replica.
//! In cluster mode the metadata quorum creates it on the first FindCoordinator for it (Kafka's
//! `AutoTopicCreationManager`), with `offsets.topic.replication.factor` /
//! `transaction.state.log.replication.factor` replicas, and `__transaction_state` gets
//! `min.insync.replicas = transaction.state.log.min.isr`.
//!
//! With `strata.remote.internal.topics.enable` they are created tiered
//! (`remote.storage.enable=true`, with `segment.ms` of [`INTERNAL_SEGMENT_MS`]), so the bucket
//! holds what a restore needs to bring back committed offsets and transaction state.

use std::collections::BTreeMap;

use super::txn::TRANSACTION_STATE_TOPIC;
use super::OFFSETS_TOPIC;
use crate::config::BrokerConfig;

/// Where share groups keep each share-partition's delivery state (Kafka's share coordinator
/// topic).
pub const SHARE_STATE_TOPIC: &str = "__share_group_state";

/// What a coordinator topic is created with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InternalTopicSpec {
    pub name: &'static str,
    pub partitions: i32,
    pub replication_factor: i16,
    pub configs: BTreeMap<String, String>,
}

/// The creation settings of a coordinator topic, or `None` for any other name. `cluster`
/// selects the replicated settings.
pub fn spec(config: &BrokerConfig, name: &str, cluster: bool) -> Option<InternalTopicSpec> {
    let mut configs = BTreeMap::new();
    configs.insert("cleanup.policy".to_string(), "compact".to_string());
    let mut spec = match name {
        OFFSETS_TOPIC => {
            configs.insert("compression.type".into(), "producer".into());
            configs.insert(
                "segment.bytes".into(),
                config.offsets_topic_segment_bytes.to_string(),
            );
            InternalTopicSpec {
                name: OFFSETS_TOPIC,
                partitions: config.offsets_topic_num_partitions,
                replication_factor: if cluster {
                    config.offsets_topic_replication_factor
                } else {
                    1
                },
                configs,
            }
        }
        TRANSACTION_STATE_TOPIC => {
            configs.insert("compression.type".into(), "uncompressed".into());
            configs.insert(
                "segment.bytes".into(),
                config.transaction_state_log_segment_bytes.to_string(),
            );
            if cluster {
                configs.insert(
                    "min.insync.replicas".into(),
                    config.transaction_state_log_min_isr.to_string(),
                );
                configs.insert("unclean.leader.election.enable".into(), "false".into());
            }
            InternalTopicSpec {
                name: TRANSACTION_STATE_TOPIC,
                partitions: config.transaction_state_log_num_partitions,
                replication_factor: if cluster {
                    config.transaction_state_log_replication_factor
                } else {
                    1
                },
                configs,
            }
        }
        SHARE_STATE_TOPIC => {
            // Kafka's share coordinator uses `cleanup.policy=delete` and prunes the records
            // below each share-partition's latest snapshot itself; Strata writes only
            // snapshots, keyed by share-partition, so compaction keeps the latest of each.
            configs.insert("compression.type".into(), "producer".into());
            configs.insert(
                "segment.bytes".into(),
                config.share_state_topic_segment_bytes.to_string(),
            );
            if cluster {
                configs.insert(
                    "min.insync.replicas".into(),
                    config.share_state_topic_min_isr.to_string(),
                );
                configs.insert("unclean.leader.election.enable".into(), "false".into());
            }
            InternalTopicSpec {
                name: SHARE_STATE_TOPIC,
                partitions: config.share_state_topic_num_partitions,
                replication_factor: if cluster {
                    config.share_state_topic_replication_factor
                } else {
                    1
                },
                configs,
            }
        }
        _ => return None,
    };
    if config.tiering.enabled && config.tiering.internal_topics {
        // Tiered, so the bucket carries committed offsets, transaction and share state for a
        // restore; a segment is sealed (and uploaded) at least every INTERNAL_SEGMENT_MS, which
        // bounds what a restore after a crash can miss.
        spec.configs
            .insert("remote.storage.enable".into(), "true".into());
        spec.configs
            .insert("segment.ms".into(), INTERNAL_SEGMENT_MS.to_string());
    }
    Some(spec)
}

/// `segment.ms` of the coordinators' topics when they are tiered
/// (`strata.remote.internal.topics.enable`): 10 minutes.
pub const INTERNAL_SEGMENT_MS: i64 = 600_000;
