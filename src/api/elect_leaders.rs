//! ElectLeaders (KIP-183, KIP-460): preferred and unclean leader elections, answered as
//! Kafka's `ReplicationControlManager.electLeaders` does.
//!
//! In cluster mode each partition's election is an `ElectLeader` command that the quorum
//! decides at apply time (so two racing requests cannot both move a leader); a partition is
//! answered once the change has reached this broker, within the request's `timeout_ms`. With
//! `topic_partitions` null every partition is considered and, as in Kafka, those that need no
//! election are left out of the answer; this broker's copy of the metadata decides which need
//! one (only those are proposed), so a sweep does not commit a rejected entry per partition.
//! A topic the quorum does not have but this broker does (every
//! topic on a single node, local internal topics) has one replica, which leads already:
//! ELECTION_NOT_NEEDED.

use std::sync::Arc;
use std::time::Duration;

use futures::stream::{self, StreamExt};
use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{
    ElectLeadersRequest, ElectLeadersResponse, RequestKind, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use strata_metadata::command::ElectionType;
use strata_metadata::ids::TopicId;
use strata_metadata::{ApplyError, MetadataState, ProposeError};

use crate::api::gate::{Gate, Who, CLUSTER_DENIED};
use crate::api::{Api, Context, Outcome};
use crate::broker::Broker;
use crate::controller::{ClusterControl, ClusterError};
use crate::security::acl::Operation as Op;
use crate::services::Services;

/// Elections of one request proposed at once.
const CONCURRENT_ELECTIONS: usize = 32;

/// A partition's answer: error code and message.
type Answer = (i16, Option<String>);

/// What to do for one requested partition.
enum Step {
    Answer(Answer),
    /// ELECTION_NOT_NEEDED; left out of the response when no partitions were named.
    NotNeeded,
    Elect(TopicId, u32),
}

pub async fn handle(
    broker: Arc<Broker>,
    cluster: Option<&Arc<ClusterControl>>,
    req: ElectLeadersRequest,
) -> ElectLeadersResponse {
    let election = match req.election_type {
        0 => ElectionType::Preferred,
        1 => ElectionType::Unclean,
        other => {
            return refuse(
                &req,
                ResponseError::InvalidRequest,
                format!("Unknown election type {other}"),
            )
        }
    };
    let timeout = Duration::from_millis(u64::try_from(req.timeout_ms).unwrap_or(0).max(1));
    let control = cluster.cloned();
    let state = control
        .as_ref()
        .and_then(|c| c.node().ok())
        .map(|n| n.state());
    let state = state.as_deref();
    let every_partition = req.topic_partitions.is_none();
    let requested: Vec<(TopicName, Vec<i32>)> = match req.topic_partitions {
        Some(topics) => topics
            .into_iter()
            .map(|t| (t.topic, t.partitions))
            .collect(),
        None => all_partitions(&broker, state),
    };

    let mut steps: Vec<(usize, i32, Step)> = Vec::new();
    for (index, (topic, partitions)) in requested.iter().enumerate() {
        for &partition in partitions {
            let mut step = resolve(&broker, state, topic.0.as_str(), partition);
            if let (true, Step::Elect(topic_id, p), Some(state)) = (every_partition, &step, state) {
                step = match state.leader_election(*topic_id, *p, election) {
                    Ok(_) => step,
                    Err(ApplyError::ElectionNotNeeded { .. }) => Step::NotNeeded,
                    Err(rejection) => {
                        Step::Answer(rejected(rejection, topic.0.as_str(), partition))
                    }
                };
            }
            steps.push((index, partition, step));
        }
    }

    let answers: Vec<(usize, i32, Option<Answer>)> = stream::iter(steps)
        .map(|(index, partition, step)| {
            let control = control.clone();
            let topic = requested[index].0 .0.to_string();
            async move {
                let answer = match (step, control) {
                    (Step::Answer(a), _) => Some(a),
                    (Step::NotNeeded, _) | (Step::Elect(..), None) => {
                        (!every_partition).then(not_needed)
                    }
                    (Step::Elect(topic_id, p), Some(control)) => Some(
                        elect(&control, topic_id, p, election, timeout, &topic, partition).await,
                    ),
                };
                (index, partition, answer)
            }
        })
        .buffered(CONCURRENT_ELECTIONS)
        .collect()
        .await;

    let mut results: Vec<ReplicaElectionResult> = requested
        .into_iter()
        .map(|(topic, _)| ReplicaElectionResult::default().with_topic(topic))
        .collect();
    for (index, partition, answer) in answers {
        if let Some((code, message)) = answer {
            results[index].partition_result.push(
                PartitionResult::default()
                    .with_partition_id(partition)
                    .with_error_code(code)
                    .with_error_message(message.map(StrBytes::from_string)),
            );
        }
    }
    ElectLeadersResponse::default().with_replica_election_results(results)
}

/// Every partition of every topic, by name: the quorum's topics and this broker's own.
fn all_partitions(broker: &Broker, state: Option<&MetadataState>) -> Vec<(TopicName, Vec<i32>)> {
    let mut topics: std::collections::BTreeMap<String, usize> = broker
        .topics()
        .iter()
        .map(|t| (t.name.clone(), t.partitions.len()))
        .collect();
    for topic in state.into_iter().flat_map(|s| s.topics()) {
        topics.insert(topic.name.clone(), topic.partitions.len());
    }
    topics
        .into_iter()
        .map(|(name, count)| {
            let count = i32::try_from(count).unwrap_or(i32::MAX);
            (TopicName(StrBytes::from_string(name)), (0..count).collect())
        })
        .collect()
}

fn resolve(broker: &Broker, state: Option<&MetadataState>, topic: &str, partition: i32) -> Step {
    let unknown_partition = || {
        Step::Answer((
            ResponseError::UnknownTopicOrPartition.code(),
            Some(format!("No such partition as {topic}-{partition}")),
        ))
    };
    if let Some(t) = state.and_then(|s| s.topic_by_name(topic)) {
        return match u32::try_from(partition) {
            Ok(p) if (p as usize) < t.partitions.len() => Step::Elect(t.id, p),
            _ => unknown_partition(),
        };
    }
    match broker.topic(topic) {
        Some(t) if usize::try_from(partition).is_ok_and(|p| p < t.partitions.len()) => {
            Step::NotNeeded
        }
        Some(_) => unknown_partition(),
        None => Step::Answer((
            ResponseError::UnknownTopicOrPartition.code(),
            Some(format!("No such topic as {topic}")),
        )),
    }
}

async fn elect(
    control: &ClusterControl,
    topic_id: TopicId,
    partition: u32,
    election: ElectionType,
    timeout: Duration,
    topic: &str,
    requested: i32,
) -> Answer {
    match control
        .elect_leader(topic_id, partition, election, timeout)
        .await
    {
        Ok(()) => (0, None),
        Err(ClusterError::Propose(ProposeError::Rejected(rejection))) => {
            rejected(rejection, topic, requested)
        }
        Err(e) => (e.kafka_error_code(), Some(e.to_string())),
    }
}

/// The answer for an election the metadata refused.
fn rejected(rejection: ApplyError, topic: &str, partition: i32) -> Answer {
    match rejection {
        ApplyError::ElectionNotNeeded { .. }
        | ApplyError::PreferredLeaderNotAvailable { .. }
        | ApplyError::EligibleLeadersNotAvailable { .. } => {
            let code = rejection.kafka_error_code();
            (code, kafka_message(code))
        }
        // Deleted since the name was resolved.
        ApplyError::UnknownTopicId(_) | ApplyError::UnknownPartition { .. } => (
            ResponseError::UnknownTopicOrPartition.code(),
            Some(format!("No such partition as {topic}-{partition}")),
        ),
        other => (other.kafka_error_code(), Some(other.to_string())),
    }
}

/// Kafka's default message (`Errors.java`) for an election outcome.
fn kafka_message(code: i16) -> Option<String> {
    let text = match ResponseError::try_from_code(code)? {
        ResponseError::ElectionNotNeeded => "Leader election not needed for topic partition.",
        ResponseError::PreferredLeaderNotAvailable => "The preferred leader was not available.",
        ResponseError::EligibleLeadersNotAvailable => {
            "Eligible topic partition leaders are not available."
        }
        other => return Some(other.to_string()),
    };
    Some(text.to_string())
}

fn not_needed() -> Answer {
    let code = ResponseError::ElectionNotNeeded.code();
    (code, kafka_message(code))
}

/// The whole request refused with `error` (Kafka's `ElectLeadersRequest.getErrorResponse`):
/// top-level and on every named partition.
pub fn refuse(
    req: &ElectLeadersRequest,
    error: ResponseError,
    message: String,
) -> ElectLeadersResponse {
    let results = req
        .topic_partitions
        .iter()
        .flatten()
        .map(|t| {
            ReplicaElectionResult::default()
                .with_topic(t.topic.clone())
                .with_partition_result(
                    t.partitions
                        .iter()
                        .map(|p| {
                            PartitionResult::default()
                                .with_partition_id(*p)
                                .with_error_code(error.code())
                                .with_error_message(Some(StrBytes::from_string(message.clone())))
                        })
                        .collect(),
                )
        })
        .collect();
    ElectLeadersResponse::default()
        .with_error_code(error.code())
        .with_replica_election_results(results)
}

/// ElectLeaders: ALTER on the cluster.
pub struct ElectLeaders;

impl Api for ElectLeaders {
    type Request = ElectLeadersRequest;

    fn authorize(who: &Who, r: ElectLeadersRequest, _version: i16) -> Gate {
        if !who.may_cluster(Op::Alter) {
            return Gate::Answer(ResponseKind::ElectLeaders(refuse(
                &r,
                CLUSTER_DENIED,
                CLUSTER_DENIED.to_string(),
            )));
        }
        Gate::Run(RequestKind::ElectLeaders(r), None)
    }

    async fn handle(
        s: &Services,
        _ctx: &Context,
        r: ElectLeadersRequest,
        _version: i16,
    ) -> Outcome {
        Outcome::respond(handle(s.broker.clone(), s.cluster.as_ref(), r).await)
    }
}
