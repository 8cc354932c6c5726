//! DeleteGroups: only empty groups; their offsets are tombstoned, and a share group's
//! share-partition state is deleted from `__share_group_state`.

use std::sync::Arc;

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{
    DeleteGroupsRequest, DeleteGroupsResponse, RequestKind, ResponseKind,
};
use kafka_protocol::ResponseError;

use crate::api::gate::{self, Gate, Who, GROUP_DENIED};
use crate::api::{blocking, Api, Context, Outcome};
use crate::coordinator::GroupCoordinator;
use crate::security::acl::{Operation as Op, ResourceType as Res};
use crate::services::Services;
use crate::share::ShareService;

pub async fn handle(
    groups: Arc<GroupCoordinator>,
    shares: Arc<ShareService>,
    req: DeleteGroupsRequest,
) -> DeleteGroupsResponse {
    let results = blocking(move || {
        req.groups_names
            .into_iter()
            .map(|g| {
                let id = g.0.as_str();
                // Only a share group (or a group the coordinator does not know) can have
                // share-partition state.
                let may_have_share_state = matches!(groups.group_type(id), None | Some("share"));
                let mut error = groups.delete_group(id);
                // A share group's state outlives its members (and a restart).
                if may_have_share_state
                    && matches!(error, None | Some(ResponseError::GroupIdNotFound))
                    && shares.knows_group(id)
                {
                    error = shares.delete_group(id).err();
                }
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

/// DeleteGroups: DELETE on each group.
pub struct DeleteGroups;

impl Api for DeleteGroups {
    type Request = DeleteGroupsRequest;

    fn authorize(who: &Who, mut r: DeleteGroupsRequest, _version: i16) -> Gate {
        let (ok, denied): (Vec<_>, Vec<_>) = r
            .groups_names
            .into_iter()
            .partition(|g| who.may(Op::Delete, Res::Group, g));
        r.groups_names = ok;
        let refusals = denied
            .into_iter()
            .map(|g| {
                DeletableGroupResult::default()
                    .with_group_id(g)
                    .with_error_code(GROUP_DENIED.code())
            })
            .collect();
        gate::run_and_extend(
            RequestKind::DeleteGroups(r),
            refusals,
            |resp, mut extra| match resp {
                ResponseKind::DeleteGroups(mut d) => {
                    d.results.append(&mut extra);
                    ResponseKind::DeleteGroups(d)
                }
                other => other,
            },
        )
    }

    async fn handle(
        s: &Services,
        _ctx: &Context,
        r: DeleteGroupsRequest,
        _version: i16,
    ) -> Outcome {
        Outcome::respond(handle(s.groups.clone(), s.shares.clone(), r).await)
    }
}
