//! DeleteGroups: only empty groups; their offsets are tombstoned.

use std::sync::Arc;

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{DeleteGroupsRequest, DeleteGroupsResponse};

use crate::api::blocking;
use crate::coordinator::GroupCoordinator;

pub async fn handle(
    groups: Arc<GroupCoordinator>,
    req: DeleteGroupsRequest,
) -> DeleteGroupsResponse {
    let results = blocking(move || {
        req.groups_names
            .into_iter()
            .map(|g| {
                let error = groups.delete_group(g.0.as_str());
                DeletableGroupResult::default()
                    .with_group_id(g)
                    .with_error_code(error.map(|e| e.code()).unwrap_or(0))
            })
            .collect()
    })
    .await
    .unwrap_or_default();
    DeleteGroupsResponse::default().with_results(results)
}
