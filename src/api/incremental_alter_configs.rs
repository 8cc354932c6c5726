//! AlterConfigs (replace all overrides) and IncrementalAlterConfigs (SET, DELETE, APPEND,
//! SUBTRACT) for topics, brokers and groups. Every change is validated before anything is
//! applied.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::{
    alter_configs_response, incremental_alter_configs_response, AlterConfigsRequest,
    AlterConfigsResponse, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
    RequestKind, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::api::describe_configs::{RESOURCE_BROKER, RESOURCE_GROUP, RESOURCE_TOPIC};
use crate::api::gate::{self, Gate, Who};
use crate::api::{blocking, Api, Context};
use crate::broker::Broker;
use crate::config::group::{self as group_config, BrokerGroupSettings};
use crate::config::value::Kind;
use crate::config::{dynamic_broker, topic};
use crate::security::acl::Operation as Op;
use crate::services::Services;

const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
const OP_APPEND: i8 = 2;
const OP_SUBTRACT: i8 = 3;

type Outcome = Result<(), (ResponseError, String)>;

/// The most bytes an error message may have: Kafka's messages travel as (non-flexible)
/// strings on their way through the broker and controller.
const MAX_ERROR_MESSAGE: usize = i16::MAX as usize;

/// The error code and message of a refused resource. Kafka answers UNKNOWN_SERVER_ERROR
/// without a message when its message would not fit a string (a huge value echoed back);
/// so does Strata, rather than failing to encode the response. An empty message is null.
fn error_fields((code, msg): (ResponseError, String)) -> (i16, Option<StrBytes>) {
    if msg.len() > MAX_ERROR_MESSAGE {
        return (ResponseError::UnknownServerError.code(), None);
    }
    (
        code.code(),
        (!msg.is_empty()).then(|| StrBytes::from_string(msg)),
    )
}

/// Applies new overrides for a topic after validating each.
fn apply(
    broker: &Broker,
    topic_name: &str,
    overrides: BTreeMap<String, String>,
    validate_only: bool,
) -> Outcome {
    for (k, v) in &overrides {
        topic::validate(k, v).map_err(|e| (ResponseError::InvalidConfig, e.to_string()))?;
    }
    let was_remote = broker
        .topic(topic_name)
        .map(|t| t.config.remote_storage_enable);
    topic::check_combination(
        &broker.topic_config(&overrides),
        broker.config.tiering.enabled,
        was_remote,
    )
    .map_err(|e| (ResponseError::InvalidConfig, e))?;
    if validate_only {
        return Ok(());
    }
    broker
        .set_topic_configs(topic_name, overrides)
        .map_err(|e| (crate::api::errors::topic_error(&e), e.to_string()))
}

/// Validates and applies the full set of dynamic configs for a broker resource, with
/// Kafka's rules for what may change at run time and where (`config::dynamic_broker`):
/// broker defaults of topic configs apply at once, Kafka settings Strata has no use for are
/// stored and described, and settings Strata reads only at start-up are refused.
fn apply_broker(
    broker: &Broker,
    resource: &str,
    configs: BTreeMap<String, String>,
    validate_only: bool,
) -> Outcome {
    if !resource.is_empty() && resource != broker.config.node_id.to_string() {
        return Err((
            ResponseError::InvalidRequest,
            format!(
                "Unexpected broker id, expected {}, but received {resource}",
                broker.config.node_id
            ),
        ));
    }
    dynamic_broker::check(&configs, resource.is_empty())
        .map_err(|e| (ResponseError::InvalidRequest, e))?;
    broker.check_listener_tls(resource, &configs).map_err(|e| {
        (
            ResponseError::InvalidRequest,
            format!("Validation of dynamic config update of SSLFactory failed: {e}"),
        )
    })?;
    if let Some(threads) = configs.get("log.cleaner.threads") {
        // Kafka's LogCleaner.validateReconfiguration, in Kafka's wrapping of its message.
        let threads = threads.trim().parse::<i64>().unwrap_or(-1);
        broker.log_cleaner().check_threads(threads).map_err(|e| {
            (
                ResponseError::InvalidRequest,
                format!(
                    "Invalid value org.apache.kafka.common.config.ConfigException: {e} for \
                     configuration Invalid dynamic configuration"
                ),
            )
        })?;
    }
    for (k, v) in &configs {
        if let Some(d) = topic::TOPIC_CONFIGS.iter().find(|d| d.broker_synonym == k) {
            topic::validate(d.name, v).map_err(|e| {
                let reason = match e {
                    topic::TopicConfigError::Invalid { reason, .. } => reason.to_string(),
                    other => other.to_string(),
                };
                (
                    ResponseError::InvalidRequest,
                    format!("Invalid value {v} for configuration {k}: {reason}"),
                )
            })?;
        }
    }
    if validate_only {
        return Ok(());
    }
    broker
        .set_dynamic_broker_configs(resource, configs)
        .map_err(|e| (ResponseError::KafkaStorageError, e.to_string()))
}

/// Validates and applies the complete new set of a group's configs. The group need not
/// exist: Kafka keeps configs for groups yet to come (and after a group is deleted).
fn apply_group(
    broker: &Broker,
    group: &str,
    configs: BTreeMap<String, String>,
    validate_only: bool,
) -> Outcome {
    if group.is_empty() {
        return Err((
            ResponseError::InvalidRequest,
            "Default group resources are not allowed.".to_string(),
        ));
    }
    group_config::validate(&configs, &BrokerGroupSettings::new(&broker.config.explicit))
        .map_err(|e| (ResponseError::InvalidConfig, e.to_string()))?;
    if validate_only {
        return Ok(());
    }
    broker
        .set_group_configs(group, configs)
        .map_err(|e| (ResponseError::KafkaStorageError, e.to_string()))
}

/// IncrementalAlterConfigs on a group, as Kafka 4.4 answers it: SET and DELETE only (APPEND
/// and SUBTRACT are refused for every group config, LIST ones included), each key once.
fn incremental_group(
    broker: &Broker,
    group: &str,
    ops: Vec<(String, i8, Option<String>)>,
    validate_only: bool,
) -> Outcome {
    let mut seen = std::collections::BTreeSet::new();
    if !ops.iter().all(|(k, ..)| seen.insert(k.as_str())) {
        return Err((
            ResponseError::InvalidRequest,
            "Error due to duplicate config keys".to_string(),
        ));
    }
    let mut configs = broker.group_configs(group);
    for (key, op, value) in ops {
        match op {
            OP_SET => {
                let v = value.ok_or((
                    ResponseError::InvalidRequest,
                    format!("Null value not supported for : {key}"),
                ))?;
                configs.insert(key, v);
            }
            OP_DELETE => {
                configs.remove(&key);
            }
            OP_APPEND | OP_SUBTRACT => {
                let name = if op == OP_APPEND {
                    "APPEND"
                } else {
                    "SUBTRACT"
                };
                return Err((
                    ResponseError::InvalidConfig,
                    format!("Can't {name} to key {key} because its type is not LIST."),
                ));
            }
            // Kafka fails such a request without a message.
            _ => return Err((ResponseError::UnknownServerError, String::new())),
        }
    }
    apply_group(broker, group, configs, validate_only)
}

/// Applies SET / DELETE / APPEND / SUBTRACT to a set of values.
fn apply_ops(
    mut values: BTreeMap<String, String>,
    ops: Vec<(String, i8, Option<String>)>,
    kind_of: impl Fn(&str) -> Option<Kind>,
    current: impl Fn(&str) -> String,
) -> Result<BTreeMap<String, String>, (ResponseError, String)> {
    for (key, op, value) in ops {
        let kind = kind_of(&key).ok_or((
            ResponseError::InvalidConfig,
            format!("Unknown topic config name: {key}"),
        ))?;
        match op {
            OP_SET => {
                let v = value.ok_or((
                    ResponseError::InvalidRequest,
                    format!("Null value not supported for : {key}"),
                ))?;
                values.insert(key, v);
            }
            OP_DELETE => {
                values.remove(&key);
            }
            OP_APPEND | OP_SUBTRACT => {
                if kind != Kind::List {
                    return Err((
                        ResponseError::InvalidConfig,
                        format!("Config value append is not allowed for config key: {key}"),
                    ));
                }
                let existing = values.get(&key).cloned().unwrap_or_else(|| current(&key));
                let mut items: Vec<String> = existing
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect();
                for v in value
                    .unwrap_or_default()
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                {
                    if op == OP_APPEND {
                        if !items.iter().any(|i| i == v) {
                            items.push(v.to_string());
                        }
                    } else {
                        items.retain(|i| i != v);
                    }
                }
                values.insert(key, items.join(","));
            }
            other => {
                return Err((
                    ResponseError::InvalidRequest,
                    format!("Unknown config operation {other}"),
                ))
            }
        }
    }
    Ok(values)
}

fn incremental(
    broker: &Broker,
    resource_type: i8,
    name: &str,
    ops: Vec<(String, i8, Option<String>)>,
    validate_only: bool,
) -> Outcome {
    match resource_type {
        RESOURCE_TOPIC => {
            let t = broker.topic(name).ok_or((
                ResponseError::UnknownTopicOrPartition,
                "Topic does not exist".to_string(),
            ))?;
            let defaults = broker.topic_defaults();
            let overrides = apply_ops(
                t.overrides.clone(),
                ops,
                |k| topic::def(k).map(|d| d.kind),
                |k| {
                    topic::effective(k, &t.overrides, &defaults)
                        .map(|(v, _)| v.to_string())
                        .unwrap_or_default()
                },
            )?;
            apply(broker, name, overrides, validate_only)
        }
        RESOURCE_BROKER => {
            let defaults = broker.topic_defaults();
            let configs = apply_ops(
                broker.dynamic_broker_configs(name),
                ops,
                |k| Some(dynamic_broker::kind(k).unwrap_or(Kind::String)),
                |k| defaults.get(k).map(|(v, _)| v.clone()).unwrap_or_default(),
            )?;
            apply_broker(broker, name, configs, validate_only)
        }
        RESOURCE_GROUP => incremental_group(broker, name, ops, validate_only),
        other => Err((
            ResponseError::InvalidRequest,
            format!("Unsupported resource type {other}"),
        )),
    }
}

pub async fn handle(
    broker: Arc<Broker>,
    req: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
    let b = broker.clone();
    let responses = blocking(move || {
        req.resources
            .into_iter()
            .map(|r| {
                let ops = r
                    .configs
                    .into_iter()
                    .map(|c| {
                        (
                            c.name.to_string(),
                            c.config_operation,
                            c.value.map(|v| v.to_string()),
                        )
                    })
                    .collect();
                let outcome = incremental(
                    &b,
                    r.resource_type,
                    r.resource_name.as_str(),
                    ops,
                    req.validate_only,
                );
                let resp = AlterConfigsResourceResponse::default()
                    .with_resource_type(r.resource_type)
                    .with_resource_name(r.resource_name);
                match outcome {
                    Ok(()) => resp.with_error_message(None),
                    Err(refusal) => {
                        let (code, message) = error_fields(refusal);
                        resp.with_error_code(code).with_error_message(message)
                    }
                }
            })
            .collect()
    })
    .await
    .unwrap_or_default();
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}

pub async fn handle_legacy(broker: Arc<Broker>, req: AlterConfigsRequest) -> AlterConfigsResponse {
    use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
    let b = broker.clone();
    let responses = blocking(move || {
        req.resources
            .into_iter()
            .map(|r| {
                let outcome: Outcome = match r.resource_type {
                    RESOURCE_TOPIC => {
                        if b.topic(r.resource_name.as_str()).is_none() {
                            Err((
                                ResponseError::UnknownTopicOrPartition,
                                "Topic does not exist".to_string(),
                            ))
                        } else {
                            let overrides = r
                                .configs
                                .iter()
                                .filter_map(|c| {
                                    Some((c.name.to_string(), c.value.as_ref()?.to_string()))
                                })
                                .collect();
                            apply(&b, r.resource_name.as_str(), overrides, req.validate_only)
                        }
                    }
                    RESOURCE_BROKER => {
                        let configs = r
                            .configs
                            .iter()
                            .filter_map(|c| {
                                Some((c.name.to_string(), c.value.as_ref()?.to_string()))
                            })
                            .collect();
                        apply_broker(&b, r.resource_name.as_str(), configs, req.validate_only)
                    }
                    RESOURCE_GROUP => {
                        let configs = r
                            .configs
                            .iter()
                            .filter_map(|c| {
                                Some((c.name.to_string(), c.value.as_ref()?.to_string()))
                            })
                            .collect();
                        apply_group(&b, r.resource_name.as_str(), configs, req.validate_only)
                    }
                    other => Err((
                        ResponseError::InvalidRequest,
                        format!("Unsupported resource type {other}"),
                    )),
                };
                let resp = AlterConfigsResourceResponse::default()
                    .with_resource_type(r.resource_type)
                    .with_resource_name(r.resource_name);
                match outcome {
                    Ok(()) => resp.with_error_message(None),
                    Err(refusal) => {
                        let (code, message) = error_fields(refusal);
                        resp.with_error_code(code).with_error_message(message)
                    }
                }
            })
            .collect()
    })
    .await
    .unwrap_or_default();
    AlterConfigsResponse::default().with_responses(responses)
}

/// AlterConfigs: ALTER_CONFIGS on each resource (topic, group or cluster).
pub struct AlterConfigs;

impl Api for AlterConfigs {
    type Request = AlterConfigsRequest;

    fn authorize(who: &Who, mut r: AlterConfigsRequest, _version: i16) -> Gate {
        let (ok, refusals) = gate::split_configs(who, Op::AlterConfigs, r.resources, |res| {
            (res.resource_type, &res.resource_name)
        });
        r.resources = ok;
        let refusals = refusals
            .into_iter()
            .map(|(res, code)| {
                alter_configs_response::AlterConfigsResourceResponse::default()
                    .with_error_code(code.code())
                    .with_error_message(gate::message(code))
                    .with_resource_type(res.resource_type)
                    .with_resource_name(res.resource_name)
            })
            .collect();
        gate::run_and_extend(
            RequestKind::AlterConfigs(r),
            refusals,
            |resp, mut extra| match resp {
                ResponseKind::AlterConfigs(mut a) => {
                    a.responses.append(&mut extra);
                    ResponseKind::AlterConfigs(a)
                }
                other => other,
            },
        )
    }

    async fn handle(
        s: &Services,
        _ctx: &Context,
        r: AlterConfigsRequest,
        _version: i16,
    ) -> super::Outcome {
        super::Outcome::respond(handle_legacy(s.broker.clone(), r).await)
    }
}

/// IncrementalAlterConfigs: ALTER_CONFIGS on each resource (topic, group or cluster).
pub struct IncrementalAlterConfigs;

impl Api for IncrementalAlterConfigs {
    type Request = IncrementalAlterConfigsRequest;

    fn authorize(who: &Who, mut r: IncrementalAlterConfigsRequest, _version: i16) -> Gate {
        let (ok, refusals) = gate::split_configs(who, Op::AlterConfigs, r.resources, |res| {
            (res.resource_type, &res.resource_name)
        });
        r.resources = ok;
        let refusals = refusals
            .into_iter()
            .map(|(res, code)| {
                incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                    .with_error_code(code.code())
                    .with_error_message(gate::message(code))
                    .with_resource_type(res.resource_type)
                    .with_resource_name(res.resource_name)
            })
            .collect();
        gate::run_and_extend(
            RequestKind::IncrementalAlterConfigs(r),
            refusals,
            |resp, mut extra| match resp {
                ResponseKind::IncrementalAlterConfigs(mut a) => {
                    a.responses.append(&mut extra);
                    ResponseKind::IncrementalAlterConfigs(a)
                }
                other => other,
            },
        )
    }

    async fn handle(
        s: &Services,
        _ctx: &Context,
        r: IncrementalAlterConfigsRequest,
        _version: i16,
    ) -> super::Outcome {
        super::Outcome::respond(handle(s.broker.clone(), r).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_too_long_for_a_string_becomes_unknown_server_error() {
        let fits = "m".repeat(MAX_ERROR_MESSAGE);
        assert_eq!(
            error_fields((ResponseError::InvalidConfig, fits.clone())),
            (40, Some(StrBytes::from_string(fits)))
        );
        assert_eq!(
            error_fields((
                ResponseError::InvalidConfig,
                "m".repeat(MAX_ERROR_MESSAGE + 1)
            )),
            (-1, None)
        );
        assert_eq!(
            error_fields((ResponseError::UnknownServerError, String::new())),
            (-1, None)
        );
    }
}
