//! DescribeCluster: this broker is the whole cluster (and its controller) until the Raft
//! metadata quorum lands.

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{DescribeClusterRequest, DescribeClusterResponse};
use kafka_protocol::protocol::StrBytes;

use crate::api::metadata::CLUSTER_AUTHORIZED_OPERATIONS;
use crate::broker::Broker;

pub fn handle(
    broker: &Broker,
    req: DescribeClusterRequest,
    listener: usize,
) -> DescribeClusterResponse {
    let l = &broker.config.listeners[listener];
    let me = DescribeClusterBroker::default()
        .with_broker_id(broker.config.node_id.into())
        .with_host(StrBytes::from_string(l.advertised_host.clone()))
        .with_port(l.advertised_port as i32)
        .with_rack(broker.config.rack.clone().map(StrBytes::from_string));
    DescribeClusterResponse::default()
        .with_endpoint_type(req.endpoint_type)
        .with_cluster_id(StrBytes::from_string(broker.cluster_id.clone()))
        .with_controller_id(broker.config.node_id.into())
        .with_brokers(vec![me])
        .with_cluster_authorized_operations(if req.include_cluster_authorized_operations {
            CLUSTER_AUTHORIZED_OPERATIONS
        } else {
            i32::MIN
        })
}
