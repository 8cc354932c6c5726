//! DescribeAcls, CreateAcls and DeleteAcls, as Kafka answers them: SECURITY_DISABLED without an
//! authorizer, CLUSTER_AUTHORIZATION_FAILED without DESCRIBE (or ALTER) on the cluster, and
//! INVALID_REQUEST with Kafka's message for a malformed ACL or filter.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::api::{blocking, Api, Context, Outcome};
use crate::broker::Broker;
use crate::security::acl::{
    AclBinding, AclFilter, Operation, PatternType, ResourceType, CLUSTER_NAME,
};
use crate::services::Services;

const NO_AUTHORIZER: &str = "No Authorizer is configured.";

fn text(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

/// The refusal every ACL request gets before looking at its contents, if any.
fn refusal(broker: &Broker, ctx: &Context, op: Operation) -> Option<(ResponseError, String)> {
    if !broker.authorizer.is_enabled() {
        return Some((ResponseError::SecurityDisabled, NO_AUTHORIZER.into()));
    }
    if !ctx.allowed(broker, op, ResourceType::Cluster, CLUSTER_NAME) {
        return Some((
            ResponseError::ClusterAuthorizationFailed,
            ResponseError::ClusterAuthorizationFailed.to_string(),
        ));
    }
    None
}

pub fn describe(broker: &Broker, ctx: &Context, req: DescribeAclsRequest) -> DescribeAclsResponse {
    let error = |code: ResponseError, message: String| {
        DescribeAclsResponse::default()
            .with_error_code(code.code())
            .with_error_message(Some(text(message)))
    };
    if let Some((code, message)) = refusal(broker, ctx, Operation::Describe) {
        return error(code, message);
    }
    let filter = AclFilter {
        resource_type: req.resource_type_filter,
        resource_name: req.resource_name_filter.map(|s| s.to_string()),
        pattern_type: req.pattern_type_filter,
        principal: req.principal_filter.map(|s| s.to_string()),
        host: req.host_filter.map(|s| s.to_string()),
        operation: req.operation,
        permission: req.permission_type,
    };
    if let Err(e) = filter.validate() {
        return error(ResponseError::InvalidRequest, e.0);
    }
    // One entry per resource pattern, each with its ACLs.
    let mut by_pattern: BTreeMap<(ResourceType, String, PatternType), Vec<AclDescription>> =
        BTreeMap::new();
    for acl in broker
        .authorizer
        .acls()
        .into_iter()
        .filter(|a| filter.matches(a))
    {
        by_pattern
            .entry((
                acl.resource_type,
                acl.resource_name.clone(),
                acl.pattern_type,
            ))
            .or_default()
            .push(
                AclDescription::default()
                    .with_principal(text(acl.principal))
                    .with_host(text(acl.host))
                    .with_operation(acl.operation.code())
                    .with_permission_type(acl.permission.code()),
            );
    }
    let resources = by_pattern
        .into_iter()
        .map(|((rt, name, pt), acls)| {
            DescribeAclsResource::default()
                .with_resource_type(rt.code())
                .with_resource_name(text(name))
                .with_pattern_type(pt.code())
                .with_acls(acls)
        })
        .collect();
    DescribeAclsResponse::default().with_resources(resources)
}

pub async fn create(
    broker: Arc<Broker>,
    ctx: &Context,
    req: CreateAclsRequest,
) -> CreateAclsResponse {
    let result = |code: ResponseError, message: String| {
        AclCreationResult::default()
            .with_error_code(code.code())
            .with_error_message(Some(text(message)))
    };
    if let Some((code, message)) = refusal(&broker, ctx, Operation::Alter) {
        let results = req
            .creations
            .iter()
            .map(|_| result(code, message.clone()))
            .collect();
        return CreateAclsResponse::default().with_results(results);
    }
    let parsed: Vec<Result<AclBinding, String>> = req
        .creations
        .iter()
        .map(|c| {
            AclBinding::from_wire(
                c.resource_type,
                &c.resource_name,
                c.resource_pattern_type,
                &c.principal,
                &c.host,
                c.operation,
                c.permission_type,
            )
            .map_err(|e| e.0)
        })
        .collect();
    let valid: Vec<AclBinding> = parsed.iter().filter_map(|p| p.clone().ok()).collect();
    let b = broker.clone();
    let stored = match blocking(move || b.create_acls(&valid)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("cannot persist the ACLs: {e}")),
        Err(e) => Err(format!("internal error: {e}")),
    };
    let results = parsed
        .into_iter()
        .map(|p| match (p, &stored) {
            (Err(message), _) => result(ResponseError::InvalidRequest, message),
            (Ok(_), Err(message)) => result(ResponseError::UnknownServerError, message.clone()),
            (Ok(_), Ok(())) => AclCreationResult::default(),
        })
        .collect();
    CreateAclsResponse::default().with_results(results)
}

pub async fn delete(
    broker: Arc<Broker>,
    ctx: &Context,
    req: DeleteAclsRequest,
) -> DeleteAclsResponse {
    let failed = |code: ResponseError, message: String| {
        DeleteAclsFilterResult::default()
            .with_error_code(code.code())
            .with_error_message(Some(text(message)))
    };
    if let Some((code, message)) = refusal(&broker, ctx, Operation::Alter) {
        let results = req
            .filters
            .iter()
            .map(|_| failed(code, message.clone()))
            .collect();
        return DeleteAclsResponse::default().with_filter_results(results);
    }
    let filters: Vec<Result<AclFilter, String>> = req
        .filters
        .iter()
        .map(|f| {
            let filter = AclFilter {
                resource_type: f.resource_type_filter,
                resource_name: f.resource_name_filter.as_ref().map(|s| s.to_string()),
                pattern_type: f.pattern_type_filter,
                principal: f.principal_filter.as_ref().map(|s| s.to_string()),
                host: f.host_filter.as_ref().map(|s| s.to_string()),
                operation: f.operation,
                permission: f.permission_type,
            };
            filter.validate().map(|()| filter).map_err(|e| e.0)
        })
        .collect();
    let valid: Vec<AclFilter> = filters.iter().filter_map(|f| f.clone().ok()).collect();
    let b = broker.clone();
    let deleted = match blocking(move || b.delete_acls(&valid)).await {
        Ok(Ok(d)) => Ok(d),
        Ok(Err(e)) => Err(format!("cannot persist the ACLs: {e}")),
        Err(e) => Err(format!("internal error: {e}")),
    };
    let mut deleted_per_filter = match &deleted {
        Ok(d) => d.clone().into_iter(),
        Err(_) => Vec::new().into_iter(),
    };
    let results = filters
        .into_iter()
        .map(|f| match (f, &deleted) {
            (Err(message), _) => failed(ResponseError::InvalidRequest, message),
            (Ok(_), Err(message)) => failed(ResponseError::UnknownServerError, message.clone()),
            (Ok(_), Ok(_)) => {
                let matching = deleted_per_filter
                    .next()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|a| {
                        DeleteAclsMatchingAcl::default()
                            .with_resource_type(a.resource_type.code())
                            .with_resource_name(text(a.resource_name))
                            .with_pattern_type(a.pattern_type.code())
                            .with_principal(text(a.principal))
                            .with_host(text(a.host))
                            .with_operation(a.operation.code())
                            .with_permission_type(a.permission.code())
                    })
                    .collect();
                DeleteAclsFilterResult::default().with_matching_acls(matching)
            }
        })
        .collect();
    DeleteAclsResponse::default().with_filter_results(results)
}

/// DescribeAcls: checks DESCRIBE on the cluster itself (to answer SECURITY_DISABLED first).
pub struct DescribeAcls;

impl Api for DescribeAcls {
    type Request = DescribeAclsRequest;

    async fn handle(s: &Services, ctx: &Context, r: DescribeAclsRequest, _version: i16) -> Outcome {
        Outcome::respond(describe(&s.broker, ctx, r))
    }
}

/// CreateAcls: checks ALTER on the cluster itself.
pub struct CreateAcls;

impl Api for CreateAcls {
    type Request = CreateAclsRequest;

    async fn handle(s: &Services, ctx: &Context, r: CreateAclsRequest, _version: i16) -> Outcome {
        Outcome::respond(create(s.broker.clone(), ctx, r).await)
    }
}

/// DeleteAcls: checks ALTER on the cluster itself.
pub struct DeleteAcls;

impl Api for DeleteAcls {
    type Request = DeleteAclsRequest;

    async fn handle(s: &Services, ctx: &Context, r: DeleteAclsRequest, _version: i16) -> Outcome {
        Outcome::respond(delete(s.broker.clone(), ctx, r).await)
    }
}
