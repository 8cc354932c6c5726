//! ListConfigResources (KIP-1142): the resources configs can be described for, as Kafka 4.4
//! lists them. v0 lists client-metrics resources only (Strata has none: it serves no client
//! telemetry); v1 lists the resource types asked for, or all of them: every topic (internal
//! ones too), every registered broker, and the groups that have configs. Kafka also lists
//! each broker as a BROKER_LOGGER resource; Strata serves no logger configs and lists none.
//! A type Kafka does not know is refused with UNSUPPORTED_VERSION, as Kafka does.

use kafka_protocol::messages::list_config_resources_response::ConfigResource;
use kafka_protocol::messages::{
    ListConfigResourcesRequest, ListConfigResourcesResponse, RequestKind, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::api::gate::{Gate, Who, CLUSTER_DENIED};
use crate::api::{Api, Context, Outcome};
use crate::broker::Broker;
use crate::security::acl::Operation as Op;
use crate::services::Services;

/// Kafka's `ConfigResource.Type` ids.
const TOPIC: i8 = 2;
const BROKER: i8 = 4;
const BROKER_LOGGER: i8 = 8;
const CLIENT_METRICS: i8 = 16;
const GROUP: i8 = 32;
const KNOWN: [i8; 5] = [TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP];

/// The config resources of one type (names, in Strata's order).
fn resources_of(broker: &Broker, resource_type: i8) -> Vec<String> {
    match resource_type {
        TOPIC => {
            let mut names: Vec<String> = broker.topics().iter().map(|t| t.name.clone()).collect();
            names.sort();
            names
        }
        BROKER => {
            let mut ids = broker.broker_ids();
            ids.sort_unstable();
            ids.iter().map(i32::to_string).collect()
        }
        GROUP => broker.groups_with_configs(),
        // No logger configs or client-metrics subscriptions are kept.
        _ => Vec::new(),
    }
}

pub fn handle(
    broker: &Broker,
    req: ListConfigResourcesRequest,
    version: i16,
) -> ListConfigResourcesResponse {
    let types: Vec<i8> = if version == 0 {
        vec![CLIENT_METRICS]
    } else if req.resource_types.is_empty() {
        KNOWN.to_vec()
    } else {
        req.resource_types.clone()
    };
    if types.iter().any(|t| !KNOWN.contains(t)) {
        return ListConfigResourcesResponse::default()
            .with_error_code(ResponseError::UnsupportedVersion.code());
    }
    // Each type once, however often it was asked for.
    let resources = KNOWN
        .iter()
        .filter(|t| types.contains(t))
        .flat_map(|&t| resources_of(broker, t).into_iter().map(move |n| (t, n)))
        .map(|(t, name)| {
            ConfigResource::default()
                .with_resource_name(StrBytes::from_string(name))
                .with_resource_type(t)
        })
        .collect();
    ListConfigResourcesResponse::default().with_config_resources(resources)
}

/// ListConfigResources: DESCRIBE_CONFIGS on the cluster, for every resource type (as Kafka).
pub struct ListConfigResources;

impl Api for ListConfigResources {
    type Request = ListConfigResourcesRequest;

    fn authorize(who: &Who, r: ListConfigResourcesRequest, _version: i16) -> Gate {
        if !who.may_cluster(Op::DescribeConfigs) {
            return Gate::Answer(ResponseKind::ListConfigResources(
                ListConfigResourcesResponse::default().with_error_code(CLUSTER_DENIED.code()),
            ));
        }
        Gate::Run(RequestKind::ListConfigResources(r), None)
    }

    async fn handle(
        s: &Services,
        _ctx: &Context,
        r: ListConfigResourcesRequest,
        version: i16,
    ) -> Outcome {
        Outcome::respond(handle(&s.broker, r, version))
    }
}
