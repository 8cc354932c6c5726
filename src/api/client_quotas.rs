//! DescribeClientQuotas and AlterClientQuotas (KIP-546), with the checks and error codes of
//! Kafka's KRaft broker and controller. Quota values live in [`crate::quota`] and are persisted
//! in the metadata file.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::alter_client_quotas_response::{
    EntityData as AlterEntityData, EntryData as AlterEntryData,
};
use kafka_protocol::messages::describe_client_quotas_response::{EntityData, EntryData, ValueData};
use kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, DescribeClientQuotasRequest,
    DescribeClientQuotasResponse, RequestKind, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::api::gate::{self, Gate, Who, CLUSTER_DENIED};
use crate::api::{blocking, errors, Api, Context, Outcome};
use crate::broker::Broker;
use crate::quota::{Alteration, Change, FilterComponent, QuotaEntity, QuotaError};
use crate::security::acl::Operation as Op;
use crate::services::Services;

pub fn describe(broker: &Broker, req: DescribeClientQuotasRequest) -> DescribeClientQuotasResponse {
    let components: Vec<FilterComponent> = req
        .components
        .iter()
        .map(|c| FilterComponent {
            entity_type: c.entity_type.to_string(),
            match_type: c.match_type,
            matches: c._match.as_ref().map(|m| m.to_string()),
        })
        .collect();
    match broker.quotas.describe(&components, req.strict) {
        Ok(found) => DescribeClientQuotasResponse::default().with_entries(Some(
            found
                .into_iter()
                .map(|(entity, values)| {
                    EntryData::default()
                        .with_entity(describe_entity(&entity))
                        .with_values(
                            values
                                .into_iter()
                                .map(|(k, v)| {
                                    ValueData::default()
                                        .with_key(StrBytes::from_static_str(k.name()))
                                        .with_value(v)
                                })
                                .collect(),
                        )
                })
                .collect(),
        )),
        Err(e) => DescribeClientQuotasResponse::default()
            .with_error_code(errors::quota_error(&e).code())
            .with_error_message(Some(StrBytes::from_string(e.to_string())))
            .with_entries(None),
    }
}

fn describe_entity(entity: &QuotaEntity) -> Vec<EntityData> {
    entity
        .components()
        .into_iter()
        .map(|(t, name)| {
            EntityData::default()
                .with_entity_type(StrBytes::from_static_str(t))
                .with_entity_name(name.to_wire().map(|n| StrBytes::from_string(n.to_string())))
        })
        .collect()
}

pub async fn alter(
    broker: Arc<Broker>,
    req: AlterClientQuotasRequest,
) -> AlterClientQuotasResponse {
    let validate_only = req.validate_only;
    let echo: Vec<Vec<AlterEntityData>> = req
        .entries
        .iter()
        .map(|e| {
            e.entity
                .iter()
                .map(|c| {
                    AlterEntityData::default()
                        .with_entity_type(c.entity_type.clone())
                        .with_entity_name(c.entity_name.clone())
                })
                .collect()
        })
        .collect();
    let alterations: Vec<Alteration> = req
        .entries
        .iter()
        .map(|e| Alteration {
            entity: e
                .entity
                .iter()
                .map(|c| {
                    (
                        c.entity_type.to_string(),
                        c.entity_name.as_ref().map(|n| n.to_string()),
                    )
                })
                .collect(),
            ops: e
                .ops
                .iter()
                .map(|o| (o.key.to_string(), (!o.remove).then_some(o.value)))
                .collect(),
        })
        .collect();
    // Validation may resolve host names and applying writes the metadata file: both blocking.
    let b = broker.clone();
    let results = blocking(move || {
        let mut results: Vec<Result<(), QuotaError>> = Vec::with_capacity(alterations.len());
        let mut changes: Vec<Change> = Vec::new();
        let mut seen: Vec<BTreeMap<&str, Option<&str>>> = Vec::new();
        for a in &alterations {
            // Kafka handles an entity once per request and refuses its repeats.
            let raw: BTreeMap<&str, Option<&str>> = a
                .entity
                .iter()
                .map(|(t, n)| (t.as_str(), n.as_deref()))
                .collect();
            if seen.contains(&raw) {
                results.push(Err(QuotaError::InvalidRequest(format!(
                    "Ignoring duplicate entity {}",
                    describe_raw(&raw)
                ))));
                continue;
            }
            seen.push(raw);
            results.push(b.quotas.validate(a).map(|change| changes.push(change)));
        }
        if validate_only || changes.is_empty() {
            return Ok(results);
        }
        b.alter_client_quotas(&changes).map(|()| results)
    })
    .await;
    let results = match results {
        Ok(Ok(r)) => r
            .into_iter()
            .map(|r| r.map_err(|e| entry_error(&e)))
            .collect(),
        Ok(Err(e)) => {
            tracing::error!(error = %e, "cannot persist client quotas");
            vec![Err((ResponseError::KafkaStorageError, e.to_string())); echo.len()]
        }
        Err(e) => {
            tracing::error!(error = %e, "client quota task failed");
            vec![Err((errors::internal(), e.to_string())); echo.len()]
        }
    };
    let entries = echo
        .into_iter()
        .zip(results)
        .map(|(entity, result)| {
            let entry = AlterEntryData::default().with_entity(entity);
            match result {
                Ok(()) => entry,
                Err((code, message)) => entry
                    .with_error_code(code.code())
                    .with_error_message(Some(StrBytes::from_string(message))),
            }
        })
        .collect();
    AlterClientQuotasResponse::default().with_entries(entries)
}

fn entry_error(e: &QuotaError) -> (ResponseError, String) {
    (errors::quota_error(e), e.to_string())
}

/// Kafka's `ClientQuotaEntity(entries={user=alice})` for an entity as sent.
fn describe_raw(raw: &BTreeMap<&str, Option<&str>>) -> String {
    let entries: Vec<String> = raw
        .iter()
        .map(|(t, n)| format!("{t}={}", n.unwrap_or("null")))
        .collect();
    format!("ClientQuotaEntity(entries={{{}}})", entries.join(", "))
}

/// DescribeClientQuotas: DESCRIBE_CONFIGS on the cluster.
pub struct DescribeClientQuotas;

impl Api for DescribeClientQuotas {
    type Request = DescribeClientQuotasRequest;

    fn authorize(who: &Who, r: DescribeClientQuotasRequest, _version: i16) -> Gate {
        if !who.may_cluster(Op::DescribeConfigs) {
            return Gate::Answer(ResponseKind::DescribeClientQuotas(
                DescribeClientQuotasResponse::default()
                    .with_error_code(CLUSTER_DENIED.code())
                    .with_error_message(gate::message(CLUSTER_DENIED))
                    .with_entries(None),
            ));
        }
        Gate::Run(RequestKind::DescribeClientQuotas(r), None)
    }

    async fn handle(
        s: &Services,
        _ctx: &Context,
        r: DescribeClientQuotasRequest,
        _version: i16,
    ) -> Outcome {
        Outcome::respond(describe(&s.broker, r))
    }
}

/// AlterClientQuotas: ALTER_CONFIGS on the cluster; a refusal answers every entry.
pub struct AlterClientQuotas;

impl Api for AlterClientQuotas {
    type Request = AlterClientQuotasRequest;

    fn authorize(who: &Who, r: AlterClientQuotasRequest, _version: i16) -> Gate {
        if who.may_cluster(Op::AlterConfigs) {
            return Gate::Run(RequestKind::AlterClientQuotas(r), None);
        }
        let entries = r
            .entries
            .iter()
            .map(|e| {
                AlterEntryData::default()
                    .with_error_code(CLUSTER_DENIED.code())
                    .with_error_message(gate::message(CLUSTER_DENIED))
                    .with_entity(
                        e.entity
                            .iter()
                            .map(|x| {
                                AlterEntityData::default()
                                    .with_entity_type(x.entity_type.clone())
                                    .with_entity_name(x.entity_name.clone())
                            })
                            .collect(),
                    )
            })
            .collect();
        Gate::Answer(ResponseKind::AlterClientQuotas(
            AlterClientQuotasResponse::default().with_entries(entries),
        ))
    }

    async fn handle(
        s: &Services,
        _ctx: &Context,
        r: AlterClientQuotasRequest,
        _version: i16,
    ) -> Outcome {
        Outcome::respond(alter(s.broker.clone(), r).await)
    }
}
