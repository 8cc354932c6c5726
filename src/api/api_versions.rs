//! ApiVersions: the APIs and version ranges Strata serves.

use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};
use kafka_protocol::ResponseError;

use crate::api::{Api, Context, Outcome};
use crate::services::Services;

/// The ApiVersions answer of the broker `node_id` of the cluster `cluster_id`.
pub fn handle(
    req: ApiVersionsRequest,
    version: i16,
    cluster_id: Option<&str>,
    node_id: i32,
) -> ApiVersionsResponse {
    // From v5 a client may name the cluster and node it means to reach (both or neither);
    // reaching another one (an address reused after the cluster moved) tells it to
    // rebootstrap. Both errors come with no API list, as Kafka 4.4 answers.
    let refuse = |e: ResponseError| {
        ApiVersionsResponse::default()
            .with_error_code(e.code())
            .with_finalized_features_epoch(-1)
    };
    if version >= 5 {
        if req.cluster_id.is_none() != (req.node_id == -1) {
            return refuse(ResponseError::InvalidRequest);
        }
        let elsewhere = |expected: &str| Some(expected) != cluster_id || req.node_id != node_id;
        if req.cluster_id.as_deref().is_some_and(elsewhere) {
            return refuse(ResponseError::RebootstrapRequired);
        }
    }
    ApiVersionsResponse::default()
        .with_api_keys(super::API_TABLE.api_versions_list())
        .with_finalized_features_epoch(-1)
}

/// ApiVersions: open to all, before authentication too.
pub struct ApiVersions;

impl Api for ApiVersions {
    type Request = ApiVersionsRequest;

    async fn handle(s: &Services, _ctx: &Context, r: ApiVersionsRequest, version: i16) -> Outcome {
        let node_id = s.broker.config.node_id;
        Outcome::respond(handle(r, version, s.broker.cluster_id(), node_id))
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::ApiKey;
    use kafka_protocol::protocol::StrBytes;

    use super::*;

    fn ask(version: i16, cluster: Option<&str>, node: i32) -> ApiVersionsResponse {
        let req = ApiVersionsRequest::default()
            .with_cluster_id(cluster.map(|c| StrBytes::from_string(c.to_string())))
            .with_node_id(node);
        handle(req, version, Some("abc"), 3)
    }

    #[test]
    fn a_client_that_reached_another_cluster_or_node_is_told_to_rebootstrap() {
        let rebootstrap = ResponseError::RebootstrapRequired.code();
        for (cluster, node) in [(Some("other"), 3), (Some("abc"), 4), (Some("abc"), 0)] {
            let r = ask(5, cluster, node);
            assert_eq!(r.error_code, rebootstrap, "{cluster:?} {node}");
            assert!(r.api_keys.is_empty());
        }
        // A cluster without a node, or a node without a cluster, is not a valid request.
        for (cluster, node) in [(Some("abc"), -1), (None, 3)] {
            let r = ask(5, cluster, node);
            assert_eq!(r.error_code, ResponseError::InvalidRequest.code());
            assert!(r.api_keys.is_empty());
        }
        // The right cluster and node, or no expectation, or an older version: the list.
        for (version, cluster, node) in [(5, Some("abc"), 3), (5, None, -1), (4, Some("x"), 9)] {
            let r = ask(version, cluster, node);
            assert_eq!(r.error_code, 0);
            assert!(r
                .api_keys
                .iter()
                .any(|k| k.api_key == ApiKey::ApiVersions as i16 && k.max_version == 5));
        }
    }
}
