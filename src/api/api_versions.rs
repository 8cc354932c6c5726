//! ApiVersions: the APIs and version ranges Strata serves.

use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};

use crate::api::{Api, Context, Outcome};
use crate::services::Services;

pub fn handle(_req: ApiVersionsRequest, _version: i16) -> ApiVersionsResponse {
    ApiVersionsResponse::default()
        .with_api_keys(super::API_TABLE.api_versions_list())
        .with_finalized_features_epoch(-1)
}

/// ApiVersions: open to all, before authentication too.
pub struct ApiVersions;

impl Api for ApiVersions {
    type Request = ApiVersionsRequest;

    async fn handle(_s: &Services, _ctx: &Context, r: ApiVersionsRequest, version: i16) -> Outcome {
        Outcome::respond(handle(r, version))
    }
}
