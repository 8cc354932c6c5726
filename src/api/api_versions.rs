//! ApiVersions: the APIs and version ranges Strata serves.

use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};
use kafka_protocol::ResponseError;

use crate::api::{update_features, Api, Context, Outcome};
use crate::features::FinalizedLevels;
use crate::services::Services;

/// The ApiVersions answer of the broker `node_id` of the cluster `cluster_id`, whose
/// finalized feature levels are `features`.
pub fn handle(
    req: ApiVersionsRequest,
    version: i16,
    cluster_id: Option<&str>,
    node_id: i32,
    features: &FinalizedLevels,
) -> ApiVersionsResponse {
    // From v5 a client may name the cluster and node it means to reach (both or neither);
    // reaching another one (an address reused after the cluster moved) tells it to
    // rebootstrap. Both errors come with no API list, as Kafka 4.4 answers.
    let refuse = |e: ResponseError| {
        ApiVersionsResponse::default()
            .with_error_code(e.code())
            .with_finalized_features_epoch(-1)
    };
    let software = [&req.client_software_name, &req.client_software_version];
    if version >= 3 && !software.iter().all(|s| valid_software_name(s)) {
        return refuse(ResponseError::InvalidRequest);
    }
    if version >= 5 {
        if req.cluster_id.is_none() != (req.node_id == -1) {
            return refuse(ResponseError::InvalidRequest);
        }
        let elsewhere = |expected: &str| Some(expected) != cluster_id || req.node_id != node_id;
        if req.cluster_id.as_deref().is_some_and(elsewhere) {
            return refuse(ResponseError::RebootstrapRequired);
        }
    }
    let mut r = ApiVersionsResponse::default().with_api_keys(super::API_TABLE.api_versions_list());
    if version >= 3 {
        r = r
            .with_supported_features(update_features::supported_features(version))
            .with_finalized_features_epoch(features.epoch)
            .with_finalized_features(update_features::finalized_features(features));
    } else {
        r = r.with_finalized_features_epoch(-1);
    }
    r
}

/// Kafka's rule for the client software name and version (v3+), its
/// `[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?`: letters and digits at both ends, and
/// also `-` and `.` between.
fn valid_software_name(s: &str) -> bool {
    let inner = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '.';
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric() && last.is_ascii_alphanumeric() && s.chars().all(inner)
        }
        _ => false,
    }
}

/// ApiVersions: open to all, before authentication too.
pub struct ApiVersions;

impl Api for ApiVersions {
    type Request = ApiVersionsRequest;

    async fn handle(s: &Services, _ctx: &Context, r: ApiVersionsRequest, version: i16) -> Outcome {
        let node_id = s.broker.config.node_id;
        let features = s.broker.features.get();
        Outcome::respond(handle(
            r,
            version,
            s.broker.cluster_id(),
            node_id,
            &features,
        ))
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::ApiKey;
    use kafka_protocol::protocol::StrBytes;

    use super::*;

    fn ask(version: i16, cluster: Option<&str>, node: i32) -> ApiVersionsResponse {
        let req = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("strata-test"))
            .with_client_software_version(StrBytes::from_static_str("1.0"))
            .with_cluster_id(cluster.map(|c| StrBytes::from_string(c.to_string())))
            .with_node_id(node);
        handle(req, version, Some("abc"), 3, &FinalizedLevels::default())
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

    #[test]
    fn client_software_names_follow_kafkas_pattern() {
        for ok in [
            "librdkafka",
            "v2.3.0",
            "apache-kafka-java",
            "a",
            "kafka-python",
            "1.0.0-rc1",
        ] {
            assert!(valid_software_name(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", ".", "a b", "a_b", "é", "a."] {
            assert!(!valid_software_name(bad), "{bad}");
        }
        let named = |name: &'static str| {
            let req = ApiVersionsRequest::default()
                .with_client_software_name(StrBytes::from_static_str(name))
                .with_client_software_version(StrBytes::from_static_str("1.0"));
            handle(req, 3, Some("abc"), 3, &FinalizedLevels::default()).error_code
        };
        assert_eq!(named("bad name"), ResponseError::InvalidRequest.code());
        assert_eq!(named("good-name"), 0);
        // Before v3 there are no names to check.
        assert_eq!(
            handle(
                ApiVersionsRequest::default(),
                2,
                None,
                3,
                &FinalizedLevels::default()
            )
            .error_code,
            0
        );
    }
}
