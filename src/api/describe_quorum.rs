//! DescribeQuorum (KIP-595/KIP-853; `kafka-metadata-quorum describe --status/--replication`):
//! the metadata quorum as its Raft leader sees it. A broker that is not the leader forwards
//! the request to the leader's inter-broker listener, as Kafka's brokers forward it to the
//! active controller. Mapping: the Raft term is the leader epoch, the applied index + 1 the
//! high watermark, a voter's matched index + 1 its log end offset (-1 when unknown); learners
//! are observers. Timestamps Strata does not track are -1, as Kafka reports unknown ones.
//!
//! A single node (no `controller.quorum.voters`) is its own quorum of one: it is the leader and
//! only voter, at epoch 0, with no metadata log (high watermark and end offset -1).

use kafka_protocol::messages::describe_quorum_response::{
    Listener, Node, PartitionData, ReplicaState, TopicData,
};
use kafka_protocol::messages::{
    DescribeQuorumRequest, DescribeQuorumResponse, RequestKind, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::api::gate::{self, Gate, Who, CLUSTER_DENIED};
use crate::api::{Api, Context, Outcome};
use crate::broker::Broker;
use crate::controller::ClusterControl;
use crate::security::acl::Operation as Op;
use crate::services::Services;

/// Kafka's name for the metadata log.
const METADATA_TOPIC: &str = "__cluster_metadata";
/// How long a forwarded request may take.
const FORWARD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

fn replica(id: i32, log_end_offset: i64) -> ReplicaState {
    ReplicaState::default()
        .with_replica_id(id.into())
        .with_log_end_offset(log_end_offset)
        .with_last_fetch_timestamp(-1)
        .with_last_caught_up_timestamp(-1)
}

fn answer(partition: PartitionData, nodes: Vec<Node>) -> DescribeQuorumResponse {
    DescribeQuorumResponse::default()
        .with_topics(vec![TopicData::default()
            .with_topic_name(TopicName(StrBytes::from_static_str(METADATA_TOPIC)))
            .with_partitions(vec![partition])])
        .with_nodes(nodes)
}

fn error(code: ResponseError, message: String) -> DescribeQuorumResponse {
    DescribeQuorumResponse::default()
        .with_error_code(code.code())
        .with_error_message(Some(StrBytes::from_string(message)))
}

pub async fn handle(
    broker: std::sync::Arc<Broker>,
    cluster: Option<&std::sync::Arc<ClusterControl>>,
    req: DescribeQuorumRequest,
    version: i16,
) -> DescribeQuorumResponse {
    let asks_metadata = req.topics.iter().any(|t| {
        t.topic_name.0.as_str() == METADATA_TOPIC
            && t.partitions.iter().any(|p| p.partition_index == 0)
    });
    if !asks_metadata {
        return error(
            ResponseError::UnknownTopicOrPartition,
            format!("Only {METADATA_TOPIC}-0 has a quorum."),
        );
    }
    let Some(control) = cluster else {
        let id = broker.config.node_id;
        // v2 carries directory ids; earlier versions cannot encode one.
        let directory = match version >= 2 {
            true => broker.metadata_directory_id_off_worker().await,
            false => None,
        }
        .unwrap_or_default();
        let partition = PartitionData::default()
            .with_leader_id(id.into())
            .with_leader_epoch(0)
            .with_high_watermark(-1)
            .with_current_voters(vec![replica(id, -1).with_replica_directory_id(directory)]);
        return answer(partition, Vec::new());
    };
    let Ok(node) = control.node() else {
        return error(
            ResponseError::BrokerNotAvailable,
            "The broker is stopping.".into(),
        );
    };
    let metrics = node.metrics().borrow().clone();
    let Some(leader) = metrics.current_leader else {
        return error(
            ResponseError::NotLeaderOrFollower,
            "The metadata quorum has no leader right now.".into(),
        );
    };
    if leader != metrics.id {
        // The leader answers with what it tracks.
        let Some((host, port)) =
            crate::replication::fetcher::leader_address(&broker, leader as i32)
        else {
            return error(
                ResponseError::NotLeaderOrFollower,
                format!("The metadata quorum's leader {leader} is not a live broker."),
            );
        };
        let client_id = format!("broker-{}-describe-quorum", broker.config.node_id);
        return match broker
            .replication()
            .peers
            .call(
                &host,
                port,
                &client_id,
                broker.config.replication.socket_timeout,
                version,
                &req,
                FORWARD_TIMEOUT,
            )
            .await
        {
            Ok(r) => r,
            Err(e) => error(
                ResponseError::RequestTimedOut,
                format!("Cannot reach the metadata quorum's leader {leader}: {e}"),
            ),
        };
    }
    let membership = metrics.membership_config.membership();
    let matched = |id: u64| -> i64 {
        if id == metrics.id {
            return metrics.last_log_index.map_or(-1, |i| i as i64 + 1);
        }
        metrics
            .replication
            .as_ref()
            .and_then(|r| r.get(&id).copied().flatten())
            .map_or(-1, |log_id| log_id.index as i64 + 1)
    };
    // Kafka's ZERO_UUID for a directory id not reported yet; v2 carries directory ids,
    // earlier versions cannot encode one.
    let directory = |id: u64| {
        membership
            .get_node(&id)
            .and_then(|n| n.directory_id)
            .filter(|_| version >= 2)
            .map_or(uuid::Uuid::nil(), |d| uuid::Uuid::from_bytes(*d.as_bytes()))
    };
    let voters: Vec<ReplicaState> = membership
        .voter_ids()
        .map(|id| replica(id as i32, matched(id)).with_replica_directory_id(directory(id)))
        .collect();
    let observers: Vec<ReplicaState> = membership
        .learner_ids()
        .map(|id| replica(id as i32, matched(id)).with_replica_directory_id(directory(id)))
        .collect();
    let nodes: Vec<Node> = membership
        .nodes()
        .filter_map(|(id, n)| {
            let (host, port) = n.addr.rsplit_once(':')?;
            Some(
                Node::default()
                    .with_node_id((*id as i32).into())
                    .with_listeners(vec![Listener::default()
                        .with_name(StrBytes::from_static_str("CONTROLLER"))
                        .with_host(StrBytes::from_string(host.to_string()))
                        .with_port(port.parse().ok()?)]),
            )
        })
        .collect();
    let partition = PartitionData::default()
        .with_leader_id((leader as i32).into())
        .with_leader_epoch(i32::try_from(metrics.current_term).unwrap_or(i32::MAX))
        .with_high_watermark(metrics.last_applied.map_or(-1, |l| l.index as i64 + 1))
        .with_current_voters(voters)
        .with_observers(observers);
    answer(partition, nodes)
}

/// DescribeQuorum: DESCRIBE on the cluster.
pub struct DescribeQuorum;

impl Api for DescribeQuorum {
    type Request = DescribeQuorumRequest;

    fn authorize(who: &Who, r: DescribeQuorumRequest, _version: i16) -> Gate {
        if who.may_cluster(Op::Describe) {
            return Gate::Run(RequestKind::DescribeQuorum(r), None);
        }
        Gate::Answer(ResponseKind::DescribeQuorum(
            DescribeQuorumResponse::default()
                .with_error_code(CLUSTER_DENIED.code())
                .with_error_message(gate::message(CLUSTER_DENIED)),
        ))
    }

    async fn handle(
        s: &Services,
        _ctx: &Context,
        r: DescribeQuorumRequest,
        version: i16,
    ) -> Outcome {
        Outcome::respond(handle(s.broker.clone(), s.cluster.as_ref(), r, version).await)
    }
}
