//! CreateTopics: validates names, partition counts, replication factors and configs with the
//! error codes Kafka returns; `validate_only` checks without creating.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::{
    CreateTopicsRequest, CreateTopicsResponse, RequestKind, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::api::gate::{self, Gate, Who, TOPIC_DENIED};
use crate::api::{blocking, errors, Api, Context, Outcome};
use crate::broker::{Broker, TopicError};
use crate::config::topic::{effective, TOPIC_CONFIGS};
use crate::controller::ClusterControl;
use crate::security::acl::{Operation as Op, ResourceType as Res};
use crate::services::Services;

pub async fn handle(
    broker: Arc<Broker>,
    cluster: Option<&Arc<ClusterControl>>,
    req: CreateTopicsRequest,
    version: i16,
) -> CreateTopicsResponse {
    let b = broker.clone();
    let cluster = cluster.cloned();
    match blocking(move || create(&b, cluster.as_ref(), req, version)).await {
        Ok(topics) => CreateTopicsResponse::default().with_topics(topics),
        Err(e) => {
            tracing::error!(error = %e, "create topics task failed");
            CreateTopicsResponse::default()
        }
    }
}

fn create(
    broker: &Broker,
    cluster: Option<&Arc<ClusterControl>>,
    req: CreateTopicsRequest,
    version: i16,
) -> Vec<CreatableTopicResult> {
    if requested_partitions(&req, broker.config.num_partitions) > MAX_PARTITIONS_PER_REQUEST {
        return req
            .topics
            .iter()
            .map(|t| {
                CreatableTopicResult::default()
                    .with_name(t.name.clone())
                    .with_error_code(ResponseError::PolicyViolation.code())
                    .with_error_message(Some(StrBytes::from_static_str(
                        "Excessively large number of partitions per request.",
                    )))
                    .with_num_partitions(-1)
                    .with_replication_factor(-1)
            })
            .collect();
    }
    let mut counts: HashMap<String, usize> = HashMap::new();
    for t in &req.topics {
        *counts.entry(t.name.0.to_string()).or_default() += 1;
    }
    let mut out = Vec::new();
    for t in req.topics {
        let name = t.name.0.to_string();
        let fail = |error: ResponseError, message: String| {
            CreatableTopicResult::default()
                .with_name(t.name.clone())
                .with_error_code(error.code())
                .with_error_message(Some(StrBytes::from_string(message)))
                .with_num_partitions(-1)
                .with_replication_factor(-1)
        };
        if counts.get(&name).copied().unwrap_or(0) > 1 {
            out.push(fail(ResponseError::InvalidRequest, format!("Create topics request from client contains multiple entries for the following topics: {name}")));
            continue;
        }
        let mut configs = BTreeMap::new();
        let mut null_value = None;
        for c in &t.configs {
            match &c.value {
                Some(v) => {
                    configs.insert(c.name.to_string(), v.to_string());
                }
                None => null_value = Some(c.name.to_string()),
            }
        }
        if let Some(k) = null_value {
            out.push(fail(
                ResponseError::InvalidConfig,
                format!("Null value not supported for topic configs: {k}"),
            ));
            continue;
        }
        let (partitions, rf, assigned) = match layout(broker, cluster, &t) {
            Ok(l) => l,
            Err((code, message)) => {
                out.push(fail(code, message));
                continue;
            }
        };
        let result = if req.validate_only {
            broker
                .check_new_topic(&name, partitions, rf, &configs)
                .map(|_| None)
        } else if let (Some(c), Some(replicas)) = (cluster, assigned) {
            broker
                .check_new_topic(&name, partitions, rf, &configs)
                .and_then(|_| {
                    crate::controller::admin::create_topic(
                        broker,
                        c,
                        &name,
                        partitions,
                        rf,
                        configs.clone(),
                        Some(replicas),
                    )
                })
                .map(Some)
        } else {
            broker
                .create_topic(&name, partitions, rf, configs.clone())
                .map(Some)
        };
        match result {
            Ok(created) => {
                let mut r = CreatableTopicResult::default()
                    .with_name(t.name.clone())
                    .with_num_partitions(partitions)
                    .with_replication_factor(rf);
                if let Some(topic) = &created {
                    r = r.with_topic_id(topic.id);
                }
                if version >= 5 {
                    let defaults = broker.topic_defaults();
                    let topic_configs = TOPIC_CONFIGS
                        .iter()
                        .filter_map(|d| {
                            let (value, source) = effective(d.name, &configs, &defaults)?;
                            Some(
                                CreatableTopicConfigs::default()
                                    .with_name(StrBytes::from_static_str(d.name))
                                    .with_value(Some(StrBytes::from_string(value.to_string())))
                                    .with_config_source(source.code()),
                            )
                        })
                        .collect();
                    r = r.with_configs(Some(topic_configs));
                }
                out.push(r);
            }
            Err(e) => {
                if matches!(e, TopicError::Io(_)) {
                    tracing::error!(topic = %name, error = %e, "topic creation failed");
                }
                out.push(fail(errors::topic_error(&e), e.to_string()));
            }
        }
    }
    out
}

/// The most partitions one CreateTopics request may create, all topics together: Kafka's
/// controller refuses more (`MAX_RECORDS_PER_USER_OP`) before it looks at anything else.
pub const MAX_PARTITIONS_PER_REQUEST: u64 = 10_000;

/// The partitions a request asks for, counted as Kafka's controller counts them: explicit
/// assignments, else the count (-1: the broker's default; zero or negative: none).
fn requested_partitions(req: &CreateTopicsRequest, default_partitions: i32) -> u64 {
    req.topics
        .iter()
        .map(|t| {
            if !t.assignments.is_empty() {
                t.assignments.len() as u64
            } else if t.num_partitions == -1 {
                u64::try_from(default_partitions).unwrap_or(0)
            } else {
                u64::try_from(t.num_partitions).unwrap_or(0)
            }
        })
        .sum()
}

/// CreateTopics: CREATE on the cluster or on each topic.
pub struct CreateTopics;

impl Api for CreateTopics {
    type Request = CreateTopicsRequest;

    fn authorize(who: &Who, mut r: CreateTopicsRequest, _version: i16) -> Gate {
        let may_create_any = who.may_cluster(Op::Create);
        let (ok, denied): (Vec<_>, Vec<_>) = r
            .topics
            .into_iter()
            .partition(|t| may_create_any || who.may(Op::Create, Res::Topic, &t.name));
        r.topics = ok;
        let refusals = denied
            .iter()
            .map(|t| {
                CreatableTopicResult::default()
                    .with_name(t.name.clone())
                    .with_error_code(TOPIC_DENIED.code())
                    .with_error_message(gate::message(TOPIC_DENIED))
                    .with_topic_config_error_code(TOPIC_DENIED.code())
                    .with_num_partitions(-1)
                    .with_replication_factor(-1)
            })
            .collect();
        gate::run_and_extend(
            RequestKind::CreateTopics(r),
            refusals,
            |resp, mut extra| match resp {
                ResponseKind::CreateTopics(mut c) => {
                    c.topics.append(&mut extra);
                    ResponseKind::CreateTopics(c)
                }
                other => other,
            },
        )
    }

    async fn handle(s: &Services, _ctx: &Context, r: CreateTopicsRequest, version: i16) -> Outcome {
        Outcome::respond(handle(s.broker.clone(), s.cluster.as_ref(), r, version).await)
    }
}

/// A topic's partition count and replication factor, from its explicit replica assignments
/// or its counts (-1: the broker's defaults). In cluster mode explicit replicas are checked
/// against the registered brokers and returned; a single node accepts only itself.
fn layout(
    broker: &Broker,
    cluster: Option<&Arc<ClusterControl>>,
    t: &kafka_protocol::messages::create_topics_request::CreatableTopic,
) -> Result<(i32, i16, Option<Vec<Vec<i32>>>), (ResponseError, String)> {
    let mut assigned: Option<Vec<Vec<i32>>> = None;
    if !t.assignments.is_empty() {
        if t.num_partitions != -1 || t.replication_factor != -1 {
            return Err((ResponseError::InvalidRequest, "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time.".into()));
        }
        if let Some(c) = cluster {
            let in_order = t
                .assignments
                .iter()
                .enumerate()
                .all(|(i, a)| a.partition_index == i as i32);
            let replicas: Vec<Vec<i32>> = t
                .assignments
                .iter()
                .map(|a| a.broker_ids.iter().map(|b| b.0).collect())
                .collect();
            let checked = if in_order {
                crate::controller::admin::check_assignments(c, &replicas)
            } else {
                Err("Partitions must be assigned in order, from 0.".into())
            };
            if let Err(reason) = checked {
                return Err((ResponseError::InvalidReplicaAssignment, reason));
            }
            assigned = Some(replicas);
        }
        let me = broker.config.node_id;
        let bad = t.assignments.iter().enumerate().find(|(i, a)| {
            assigned.is_none()
                && (a.partition_index != *i as i32
                    || a.broker_ids.iter().any(|b| b.0 != me)
                    || a.broker_ids.is_empty())
        });
        if let Some((_, a)) = bad {
            return Err((
                ResponseError::InvalidReplicaAssignment,
                format!(
                    "Invalid replica assignment for partition {}: only broker {me} exists.",
                    a.partition_index
                ),
            ));
        }
        return Ok((
            t.assignments.len() as i32,
            t.assignments[0].broker_ids.len() as i16,
            assigned,
        ));
    }
    Ok((
        if t.num_partitions == -1 {
            broker.config.num_partitions
        } else {
            t.num_partitions
        },
        if t.replication_factor == -1 {
            broker.config.default_replication_factor
        } else {
            t.replication_factor
        },
        None,
    ))
}
