//! ApiVersions: the APIs and version ranges Strata serves.

use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};

use crate::protocol;

pub fn handle(_req: ApiVersionsRequest, _version: i16) -> ApiVersionsResponse {
    ApiVersionsResponse::default()
        .with_api_keys(protocol::api_versions_list())
        .with_finalized_features_epoch(-1)
}
