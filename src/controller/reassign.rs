//! Partition reassignment in cluster mode (Kafka's AlterPartitionReassignments and
//! ListPartitionReassignments, KIP-455).
//!
//! Alter proposes one `AlterPartitionReassignment` per partition and answers once the
//! committed changes have reached the local broker (as [`super::admin`] does). The rest runs
//! on its own: the metadata sync makes the new replicas followers of the current leader
//! (they are in `replicas`), the leader adds them to the ISR with `AlterPartition` once they
//! caught up, and the `AlterPartition` whose ISR covers the target completes the reassignment
//! in the same apply (`strata_metadata::reassignment`): the removed replicas leave the
//! replica set and the ISR, a removed leader hands over to a target replica with a new leader
//! epoch, and the removed brokers stop fetching and delete their copy
//! (`Partition::delete_local_replica`).
//!
//! Called from the blocking pool; each call waits for its proposals, bounded by the propose
//! timeout per proposal plus the sync wait.

use std::sync::Arc;
use std::time::Duration;

use strata_metadata::command::kafka_codes;
use strata_metadata::ids::BrokerId;
use strata_metadata::Command;

use super::admin::{state_with_topic, wait_for};
use super::ClusterControl;

/// How long an alter waits for its committed changes to reach this broker.
const SYNC_WAIT: Duration = Duration::from_secs(15);

/// One partition of an AlterPartitionReassignments request: the target replicas, or `None`
/// to cancel the ongoing reassignment.
#[derive(Debug, Clone)]
pub struct PartitionTarget {
    pub partition: i32,
    pub replicas: Option<Vec<i32>>,
}

/// A partition's answer: `Err((kafka error code, message))` when refused.
pub type PartitionOutcome = Result<(), (i16, String)>;

/// A reassignment in progress, as ListPartitionReassignments reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OngoingReassignment {
    pub partition: i32,
    pub replicas: Vec<i32>,
    pub adding: Vec<i32>,
    pub removing: Vec<i32>,
}

fn unknown_partition(topic: &str, partition: i32) -> (i16, String) {
    (
        kafka_codes::UNKNOWN_TOPIC_OR_PARTITION,
        format!("Unable to find partition {topic}:{partition}."),
    )
}

/// Starts, changes or cancels the reassignments of `topics`' partitions. Blocking.
pub fn alter(
    control: &Arc<ClusterControl>,
    topics: Vec<(String, Vec<PartitionTarget>)>,
    allow_replication_factor_change: bool,
) -> Vec<(String, Vec<(i32, PartitionOutcome)>)> {
    // Resolve names first; proposals go in one batch, answered after one sync.
    let mut answers: Vec<(String, Vec<(i32, PartitionOutcome)>)> = Vec::new();
    let mut commands: Vec<(usize, usize, Command)> = Vec::new();
    for (name, partitions) in topics {
        let topic_id = state_with_topic(control, &name)
            .ok()
            .and_then(|s| s.topic_by_name(&name).map(|t| t.id));
        let t = answers.len();
        let mut outcomes = Vec::with_capacity(partitions.len());
        for target in partitions {
            let p = outcomes.len();
            match (topic_id, u32::try_from(target.partition)) {
                (Some(topic_id), Ok(partition)) => {
                    commands.push((
                        t,
                        p,
                        Command::AlterPartitionReassignment {
                            topic_id,
                            partition,
                            replicas: target
                                .replicas
                                .map(|r| r.into_iter().map(BrokerId).collect()),
                            allow_replication_factor_change,
                        },
                    ));
                    outcomes.push((target.partition, Ok(())));
                }
                _ => outcomes.push((
                    target.partition,
                    Err(unknown_partition(&name, target.partition)),
                )),
            }
        }
        answers.push((name, outcomes));
    }
    if commands.is_empty() {
        return answers;
    }
    let c = control.clone();
    let proposed = wait_for(async move {
        let mut results = Vec::with_capacity(commands.len());
        let mut synced_to = None;
        for (t, p, command) in commands {
            let result = c.propose(command).await;
            if let Ok((_, index)) = &result {
                synced_to = synced_to.max(Some(*index));
            }
            results.push((
                t,
                p,
                result
                    .map(|_| ())
                    .map_err(|e| (e.kafka_error_code(), e.to_string())),
            ));
        }
        let sync = match synced_to {
            Some(index) => c.wait_synced(index, SYNC_WAIT).await,
            None => Ok(()),
        };
        Ok((results, sync))
    });
    match proposed {
        Ok((results, sync)) => {
            for (t, p, mut result) in results {
                if let (Ok(()), Err(e)) = (&result, &sync) {
                    result = Err((e.kafka_error_code(), e.to_string()));
                }
                answers[t].1[p].1 = result;
            }
        }
        Err(e) => {
            for (_, outcomes) in &mut answers {
                for (_, outcome) in outcomes.iter_mut().filter(|(_, o)| o.is_ok()) {
                    *outcome = Err((e.kafka_error_code(), e.to_string()));
                }
            }
        }
    }
    answers
}

/// The reassignments in progress: of every topic (`None`), or of the named partitions (unknown
/// topics and partitions, and those not reassigning, are left out as Kafka does).
pub fn list(
    control: &ClusterControl,
    topics: Option<Vec<(String, Vec<i32>)>>,
) -> Vec<(String, Vec<OngoingReassignment>)> {
    let Ok(node) = control.node() else {
        return Vec::new();
    };
    let state = node.state();
    let ongoing = |index: usize, p: &strata_metadata::state::PartitionState| {
        p.is_reassigning().then(|| OngoingReassignment {
            partition: index as i32,
            replicas: p.replicas.iter().map(|b| b.0).collect(),
            adding: p.adding_replicas.iter().map(|b| b.0).collect(),
            removing: p.removing_replicas.iter().map(|b| b.0).collect(),
        })
    };
    let mut out = Vec::new();
    match topics {
        None => {
            for topic in state.topics() {
                let partitions: Vec<_> = topic
                    .partitions
                    .iter()
                    .enumerate()
                    .filter_map(|(i, p)| ongoing(i, p))
                    .collect();
                if !partitions.is_empty() {
                    out.push((topic.name.clone(), partitions));
                }
            }
            out.sort_by(|a, b| a.0.cmp(&b.0));
        }
        Some(requested) => {
            for (name, indexes) in requested {
                let Some(topic) = state.topic_by_name(&name) else {
                    continue;
                };
                let partitions: Vec<_> = indexes
                    .into_iter()
                    .filter_map(|i| {
                        let p = topic.partitions.get(usize::try_from(i).ok()?)?;
                        ongoing(i as usize, p)
                    })
                    .collect();
                if !partitions.is_empty() {
                    out.push((name, partitions));
                }
            }
        }
    }
    out
}
