//! DescribeConfigs for topics (2) and brokers (4): effective values, their source, synonyms
//! and types, from the same tables that validate them.

use std::collections::BTreeMap;

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::broker::Broker;
use crate::config::topic::{ConfigSource, TOPIC_CONFIGS};

pub const RESOURCE_TOPIC: i8 = 2;
pub const RESOURCE_BROKER: i8 = 4;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

pub fn handle(
    broker: &Broker,
    req: DescribeConfigsRequest,
    _version: i16,
) -> DescribeConfigsResponse {
    let mut results = Vec::new();
    let defaults = broker.topic_defaults();
    for r in req.resources {
        let wanted = |name: &str| {
            r.configuration_keys
                .as_ref()
                .is_none_or(|keys| keys.iter().any(|k| k.as_str() == name))
        };
        let base = DescribeConfigsResult::default()
            .with_resource_type(r.resource_type)
            .with_resource_name(r.resource_name.clone());
        match r.resource_type {
            RESOURCE_TOPIC => {
                let Some(topic) = broker.topic(r.resource_name.as_str()) else {
                    results.push(
                        base.with_error_code(ResponseError::UnknownTopicOrPartition.code())
                            .with_error_message(Some(s("Topic does not exist"))),
                    );
                    continue;
                };
                let mut configs = Vec::new();
                for d in TOPIC_CONFIGS.iter().filter(|d| wanted(d.name)) {
                    let mut synonyms = Vec::new();
                    if let Some(v) = topic.overrides.get(d.name) {
                        synonyms.push(
                            DescribeConfigsSynonym::default()
                                .with_name(s(d.name))
                                .with_value(Some(s(v)))
                                .with_source(ConfigSource::DynamicTopic.code()),
                        );
                    }
                    if let Some((v, src)) = defaults.get(d.broker_synonym) {
                        synonyms.push(
                            DescribeConfigsSynonym::default()
                                .with_name(s(d.broker_synonym))
                                .with_value(Some(s(v)))
                                .with_source(src.code()),
                        );
                    }
                    synonyms.push(
                        DescribeConfigsSynonym::default()
                            .with_name(s(d.broker_synonym))
                            .with_value(Some(s(d.default)))
                            .with_source(ConfigSource::Default.code()),
                    );
                    let (value, source) =
                        crate::config::topic::effective(d.name, &topic.overrides, &defaults)
                            .unwrap_or((d.default, ConfigSource::Default));
                    configs.push(
                        DescribeConfigsResourceResult::default()
                            .with_name(s(d.name))
                            .with_value(Some(s(value)))
                            .with_config_source(source.code())
                            .with_config_type(d.kind.describe_code())
                            .with_synonyms(if req.include_synonyms {
                                synonyms
                            } else {
                                Vec::new()
                            }),
                    );
                }
                results.push(base.with_configs(configs));
            }
            RESOURCE_BROKER => {
                let name = r.resource_name.as_str();
                if !name.is_empty() && name != broker.config.node_id.to_string() {
                    results.push(
                        base.with_error_code(ResponseError::InvalidRequest.code())
                            .with_error_message(Some(s(&format!(
                                "Unexpected broker id, expected {}",
                                broker.config.node_id
                            )))),
                    );
                    continue;
                }
                let mut seen = BTreeMap::new();
                let mut configs = Vec::new();
                for (key, static_value, static_source, kind) in broker.config.describe() {
                    let dynamic = defaults.get(&key).filter(|(_, src)| {
                        matches!(
                            src,
                            ConfigSource::DynamicBroker | ConfigSource::DynamicDefaultBroker
                        )
                    });
                    let (value, source) = match dynamic {
                        Some((v, src)) => (v.clone(), *src),
                        None => (static_value, static_source),
                    };
                    let read_only = !TOPIC_CONFIGS.iter().any(|d| d.broker_synonym == key);
                    if !wanted(&key) || seen.insert(key.clone(), ()).is_some() {
                        continue;
                    }
                    configs.push(
                        DescribeConfigsResourceResult::default()
                            .with_name(s(&key))
                            .with_value(Some(s(&value)))
                            .with_read_only(read_only)
                            .with_config_source(source.code())
                            .with_config_type(kind.describe_code())
                            .with_synonyms(if req.include_synonyms {
                                vec![DescribeConfigsSynonym::default()
                                    .with_name(s(&key))
                                    .with_value(Some(s(&value)))
                                    .with_source(source.code())]
                            } else {
                                Vec::new()
                            }),
                    );
                }
                results.push(base.with_configs(configs));
            }
            other => results.push(
                base.with_error_code(ResponseError::InvalidRequest.code())
                    .with_error_message(Some(s(&format!("Unsupported resource type {other}")))),
            ),
        }
    }
    DescribeConfigsResponse::default().with_results(results)
}
