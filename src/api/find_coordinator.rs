//! FindCoordinator: the coordinator of a group (transactional id) is the leader of its
//! `__consumer_offsets` (`__transaction_state`) partition. On a single node, or for internal
//! partitions the control plane has not assigned, that is this broker; a partition without a
//! leader answers COORDINATOR_NOT_AVAILABLE. The named broker may still be loading the
//! partition: it answers the group's requests COORDINATOR_LOAD_IN_PROGRESS until done.
//!
//! In cluster mode the quorum owns the topic: while it does not have it yet, the request asks
//! for its creation (as Kafka's `AutoTopicCreationManager`) and is answered
//! COORDINATOR_NOT_AVAILABLE, which clients retry; an unassigned partition has no coordinator.

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{
    FindCoordinatorRequest, FindCoordinatorResponse, RequestKind, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::api::gate::{self, Gate, Who, CLUSTER_DENIED, GROUP_DENIED, TXN_DENIED};
use crate::api::{Api, Context, Outcome};
use crate::broker::Broker;
use crate::controller::ClusterControl;
use crate::coordinator::internal_topics::SHARE_STATE_TOPIC;
use crate::coordinator::offsets_topic::partition_for;
use crate::coordinator::txn::TRANSACTION_STATE_TOPIC;
use crate::coordinator::{internal_topics, OFFSETS_TOPIC};
use crate::security::acl::{Operation as Op, ResourceType as Res};
use crate::services::Services;

const KEY_GROUP: i8 = 0;
const KEY_TRANSACTION: i8 = 1;
/// A share-partition's state (`group:topic_id:partition`), version 6 on (KIP-932).
const KEY_SHARE: i8 = 2;

/// Whether `key` is a share coordinator key: `group:topic_id:partition` with a group, Kafka's
/// base64 topic id and a partition.
fn is_share_key(key: &str) -> bool {
    let mut parts = key.rsplitn(3, ':');
    let (Some(partition), Some(topic_id), Some(group)) = (parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    !group.is_empty()
        && topic_id.len() == 22
        && topic_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && partition.parse::<i32>().is_ok_and(|p| p >= 0)
}

pub fn handle(
    broker: &Broker,
    cluster: Option<&std::sync::Arc<ClusterControl>>,
    req: FindCoordinatorRequest,
    version: i16,
    listener: usize,
) -> FindCoordinatorResponse {
    let answer = |key_type: i8| -> Result<(), (ResponseError, &'static str)> {
        match key_type {
            KEY_GROUP | KEY_TRANSACTION => Ok(()),
            KEY_SHARE if version >= 6 => Ok(()),
            // Kafka answers share keys with an empty message, errors included.
            KEY_SHARE => Err((ResponseError::InvalidRequest, "")),
            _ => Err((
                ResponseError::InvalidRequest,
                "Unknown coordinator key type.",
            )),
        }
    };
    // The leader of the key's internal partition, with its address on this listener.
    let locate = |key: &str| -> Result<(i32, StrBytes, i32), (ResponseError, &'static str)> {
        answer(req.key_type)?;
        let (topic, partitions) = match req.key_type {
            KEY_GROUP => (OFFSETS_TOPIC, broker.config.offsets_topic_num_partitions),
            KEY_TRANSACTION => (
                TRANSACTION_STATE_TOPIC,
                broker.config.transaction_state_log_num_partitions,
            ),
            _ if !is_share_key(key) => return Err((ResponseError::InvalidRequest, "")),
            _ => (
                SHARE_STATE_TOPIC,
                broker.config.share_state_topic_num_partitions,
            ),
        };
        if let Some(c) = cluster {
            if !crate::controller::admin::topic_exists(c, topic) {
                if let Some(spec) = internal_topics::spec(&broker.config, topic, true) {
                    c.request_internal_topic(spec);
                }
                return Err((
                    ResponseError::CoordinatorNotAvailable,
                    "The coordinator is not available.",
                ));
            }
        }
        // The topic's own partition count (it may differ from the setting it was created with).
        let partitions = broker
            .topic(topic)
            .map_or(partitions, |t| t.partitions.len() as i32);
        let partition = partition_for(key, partitions);
        let node = match broker.replication().leadership(topic, partition) {
            Some(state) => state.leader,
            None if cluster.is_some() => None,
            None => Some(broker.config.node_id),
        };
        node.and_then(|id| broker.broker_endpoint(id, listener))
            .map(|(id, host, port, _)| (id, StrBytes::from_string(host), port as i32))
            .ok_or((
                ResponseError::CoordinatorNotAvailable,
                "The coordinator is not available.",
            ))
    };
    if version < 4 {
        return match locate(req.key.as_str()) {
            Ok((node, host, port)) => FindCoordinatorResponse::default()
                .with_node_id(node.into())
                .with_host(host)
                .with_port(port),
            Err((e, msg)) => FindCoordinatorResponse::default()
                .with_error_code(e.code())
                .with_error_message(Some(StrBytes::from_static_str(msg)))
                .with_node_id((-1).into())
                .with_port(-1),
        };
    }
    let share = req.key_type == KEY_SHARE;
    let coordinators = req
        .coordinator_keys
        .into_iter()
        .map(|key| match locate(key.as_str()) {
            Ok((node, host, port)) => Coordinator::default()
                .with_key(key)
                .with_node_id(node.into())
                .with_host(host)
                .with_port(port)
                .with_error_message(share.then(|| StrBytes::from_static_str(""))),
            Err((e, msg)) => Coordinator::default()
                .with_key(key)
                .with_error_code(e.code())
                .with_error_message(Some(StrBytes::from_static_str(msg)))
                .with_node_id((-1).into())
                .with_port(-1),
        })
        .collect();
    FindCoordinatorResponse::default().with_coordinators(coordinators)
}

/// A key refused with `code`: no coordinator named.
fn refused(key: StrBytes, code: ResponseError) -> Coordinator {
    Coordinator::default()
        .with_key(key)
        .with_node_id((-1).into())
        .with_port(-1)
        .with_error_code(code.code())
        .with_error_message(gate::message(code))
}

/// FindCoordinator: DESCRIBE on the group or transactional id of each key.
pub struct FindCoordinator;

impl Api for FindCoordinator {
    type Request = FindCoordinatorRequest;

    fn authorize(who: &Who, mut r: FindCoordinatorRequest, version: i16) -> Gate {
        if r.key_type == KEY_SHARE {
            // Inter-broker: the persister of a share-partition leader.
            if who.may_cluster(Op::ClusterAction) {
                return Gate::Run(RequestKind::FindCoordinator(r), None);
            }
            let coordinators = r
                .coordinator_keys
                .into_iter()
                .map(|k| refused(k, CLUSTER_DENIED))
                .collect();
            return Gate::Answer(ResponseKind::FindCoordinator(
                FindCoordinatorResponse::default().with_coordinators(coordinators),
            ));
        }
        let (rt, code) = match r.key_type {
            1 => (Res::TransactionalId, TXN_DENIED),
            _ => (Res::Group, GROUP_DENIED),
        };
        if version < 4 {
            if !who.may(Op::Describe, rt, &r.key) {
                return Gate::Answer(ResponseKind::FindCoordinator(
                    FindCoordinatorResponse::default()
                        .with_error_code(code.code())
                        .with_error_message(gate::message(code))
                        .with_node_id((-1).into())
                        .with_port(-1),
                ));
            }
            return Gate::Run(RequestKind::FindCoordinator(r), None);
        }
        let (ok, denied): (Vec<_>, Vec<_>) = r
            .coordinator_keys
            .into_iter()
            .partition(|k| who.may(Op::Describe, rt, k));
        r.coordinator_keys = ok;
        let refusals = denied.into_iter().map(|k| refused(k, code)).collect();
        gate::run_and_extend(
            RequestKind::FindCoordinator(r),
            refusals,
            |resp, mut extra| match resp {
                ResponseKind::FindCoordinator(mut f) => {
                    f.coordinators.append(&mut extra);
                    ResponseKind::FindCoordinator(f)
                }
                other => other,
            },
        )
    }

    async fn handle(
        s: &Services,
        ctx: &Context,
        r: FindCoordinatorRequest,
        version: i16,
    ) -> Outcome {
        let cluster = s.cluster.as_ref();
        Outcome::respond(handle(&s.broker, cluster, r, version, ctx.listener))
    }
}
