//! DescribeCluster: the registered brokers once the control plane has set the cluster view,
//! else this broker alone (and its controller).

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{
    DescribeClusterRequest, DescribeClusterResponse, RequestKind, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;

use crate::api::gate::{self, Gate, Who};
use crate::api::metadata::CLUSTER_AUTHORIZED_OPERATIONS;
use crate::api::{Api, Context, Outcome};
use crate::broker::Broker;
use crate::security::acl::{ResourceType as Res, CLUSTER_NAME};
use crate::services::Services;

pub fn handle(
    broker: &Broker,
    req: DescribeClusterRequest,
    listener: usize,
) -> DescribeClusterResponse {
    let brokers = broker
        .cluster_endpoints(listener)
        .into_iter()
        .map(|(id, host, port, rack)| {
            DescribeClusterBroker::default()
                .with_broker_id(id.into())
                .with_host(StrBytes::from_string(host))
                .with_port(port as i32)
                .with_rack(rack.map(StrBytes::from_string))
        })
        .collect();
    DescribeClusterResponse::default()
        .with_endpoint_type(req.endpoint_type)
        // Clients are served only once the id is known (see `Broker::cluster_id`).
        .with_cluster_id(StrBytes::from_string(
            broker.cluster_id().unwrap_or_default().to_string(),
        ))
        .with_controller_id(broker.controller_id().into())
        .with_brokers(brokers)
        .with_cluster_authorized_operations(if req.include_cluster_authorized_operations {
            CLUSTER_AUTHORIZED_OPERATIONS
        } else {
            i32::MIN
        })
}

/// DescribeCluster: open to all; the cluster's authorized operations are the principal's.
pub struct DescribeCluster;

impl Api for DescribeCluster {
    type Request = DescribeClusterRequest;

    fn authorize(who: &Who, r: DescribeClusterRequest, _version: i16) -> Gate {
        if !r.include_cluster_authorized_operations {
            return Gate::Run(RequestKind::DescribeCluster(r), None);
        }
        let bits = who.operations(Res::Cluster, CLUSTER_NAME);
        Gate::Run(
            RequestKind::DescribeCluster(r),
            gate::finish(move |resp| match resp {
                ResponseKind::DescribeCluster(d) => {
                    ResponseKind::DescribeCluster(d.with_cluster_authorized_operations(bits))
                }
                other => other,
            }),
        )
    }

    async fn handle(
        s: &Services,
        ctx: &Context,
        r: DescribeClusterRequest,
        _version: i16,
    ) -> Outcome {
        Outcome::respond(handle(&s.broker, r, ctx.listener))
    }
}
