//! FindCoordinator: this broker coordinates every group and every transactional id (it leads
//! every `__consumer_offsets` and `__transaction_state` partition until replication lands).

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::broker::Broker;

const KEY_GROUP: i8 = 0;
const KEY_TRANSACTION: i8 = 1;

pub fn handle(
    broker: &Broker,
    req: FindCoordinatorRequest,
    version: i16,
    listener: usize,
) -> FindCoordinatorResponse {
    let answer = |key_type: i8| -> Result<(), (ResponseError, &'static str)> {
        match key_type {
            KEY_GROUP if broker.group_coordinator().is_some() => Ok(()),
            KEY_GROUP => Err((
                ResponseError::CoordinatorNotAvailable,
                "The group coordinator is loading.",
            )),
            KEY_TRANSACTION if broker.txn_coordinator().is_some() => Ok(()),
            KEY_TRANSACTION => Err((
                ResponseError::CoordinatorNotAvailable,
                "The transaction coordinator is loading.",
            )),
            _ => Err((
                ResponseError::InvalidRequest,
                "Unknown coordinator key type.",
            )),
        }
    };
    let l = &broker.config.listeners[listener];
    let host = StrBytes::from_string(l.advertised_host.clone());
    let port = l.advertised_port as i32;
    let node = broker.config.node_id;
    if version < 4 {
        return match answer(req.key_type) {
            Ok(()) => FindCoordinatorResponse::default()
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
    let coordinators = req
        .coordinator_keys
        .into_iter()
        .map(|key| match answer(req.key_type) {
            Ok(()) => Coordinator::default()
                .with_key(key)
                .with_node_id(node.into())
                .with_host(host.clone())
                .with_port(port),
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
