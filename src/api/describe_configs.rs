//! DescribeConfigs for topics (2), brokers (4) and groups (32): effective values, their
//! source, synonyms and types, from the same tables that validate them.

use std::collections::BTreeMap;

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{
    DescribeConfigsRequest, DescribeConfigsResponse, RequestKind, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::api::gate::{self, Gate, Who};
use crate::api::{Api, Context, Outcome};
use crate::broker::Broker;
use crate::config::dynamic_broker::{self, Treatment};
use crate::config::group::{self as group_config, BrokerGroupSettings};
use crate::config::topic::{BrokerDefaults, ConfigSource, TOPIC_CONFIGS};
use crate::config::value::Kind;
use crate::security::acl::Operation as Op;
use crate::services::Services;

pub const RESOURCE_TOPIC: i8 = 2;
pub const RESOURCE_BROKER: i8 = 4;
pub const RESOURCE_GROUP: i8 = 32;

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
            RESOURCE_BROKER => results.push(describe_broker(
                broker,
                base,
                &defaults,
                &wanted,
                req.include_synonyms,
            )),
            RESOURCE_GROUP => results.push(describe_group(
                broker,
                base,
                r.configuration_keys.as_deref(),
                req.include_synonyms,
                req.include_documentation,
            )),
            other => results.push(
                base.with_error_code(ResponseError::InvalidRequest.code())
                    .with_error_message(Some(s(&format!("Unsupported resource type {other}")))),
            ),
        }
    }
    DescribeConfigsResponse::default().with_results(results)
}

/// A broker resource: this broker's settings (static, dynamic, and the Kafka settings it
/// stores without using), or the cluster-wide dynamic defaults for the empty name.
fn describe_broker(
    broker: &Broker,
    base: DescribeConfigsResult,
    defaults: &BrokerDefaults,
    wanted: &dyn Fn(&str) -> bool,
    include_synonyms: bool,
) -> DescribeConfigsResult {
    let name = base.resource_name.to_string();
    if !name.is_empty() && name != broker.config.node_id.to_string() {
        return base
            .with_error_code(ResponseError::InvalidRequest.code())
            .with_error_message(Some(s(&format!(
                "Unexpected broker id, expected {}",
                broker.config.node_id
            ))));
    }
    if name.is_empty() {
        return base.with_configs(describe_cluster_defaults(broker, wanted, include_synonyms));
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
        let read_only = dynamic_broker::treatment(&key) != Treatment::Live;
        if !wanted(&key) || seen.insert(key.clone(), ()).is_some() {
            continue;
        }
        configs.push(broker_entry(
            &key,
            kind,
            read_only,
            &[(&value, source)],
            include_synonyms,
        ));
    }
    configs.extend(
        describe_stored_settings(broker, &name, &wanted, include_synonyms)
            .into_iter()
            .filter(|c| seen.insert(c.name.to_string(), ()).is_none()),
    );
    base.with_configs(configs)
}

/// One broker setting: its value and source are the first of `levels`, its synonyms all of
/// them (most specific first). Passwords, keys and JAAS configs are never sent back: Kafka
/// answers them with no value and marks them sensitive.
fn broker_entry(
    name: &str,
    kind: Kind,
    read_only: bool,
    levels: &[(&str, ConfigSource)],
    include_synonyms: bool,
) -> DescribeConfigsResourceResult {
    let sensitive = kind == Kind::Password;
    let shown = |v: &str| (!sensitive).then(|| s(v));
    let (value, source) = levels[0];
    let synonyms = if include_synonyms {
        levels
            .iter()
            .map(|(v, src)| {
                DescribeConfigsSynonym::default()
                    .with_name(s(name))
                    .with_value(shown(v))
                    .with_source(src.code())
            })
            .collect()
    } else {
        Vec::new()
    };
    DescribeConfigsResourceResult::default()
        .with_name(s(name))
        .with_value(shown(value))
        .with_read_only(read_only)
        .with_is_sensitive(sensitive)
        .with_config_source(source.code())
        .with_config_type(kind.describe_code())
        .with_synonyms(synonyms)
}

/// Kafka's dynamic broker settings that Strata stores without using (Kerberos, thread
/// pools, ...), once set on this broker or as the cluster-wide default. Synonyms as Kafka
/// orders them: this broker's value, then the default's.
fn describe_stored_settings(
    broker: &Broker,
    node: &str,
    wanted: &dyn Fn(&str) -> bool,
    include_synonyms: bool,
) -> Vec<DescribeConfigsResourceResult> {
    let mine = broker.dynamic_broker_configs(node);
    let cluster = broker.dynamic_broker_configs("");
    let keys: std::collections::BTreeSet<&String> = mine.keys().chain(cluster.keys()).collect();
    keys.into_iter()
        .filter(|k| wanted(k) && dynamic_broker::treatment(k) == Treatment::Ignored)
        .filter_map(|k| {
            let d = dynamic_broker::def(k)?;
            let levels: Vec<(&str, ConfigSource)> = [
                mine.get(k)
                    .map(|v| (v.as_str(), ConfigSource::DynamicBroker)),
                cluster
                    .get(k)
                    .map(|v| (v.as_str(), ConfigSource::DynamicDefaultBroker)),
            ]
            .into_iter()
            .flatten()
            .collect();
            Some(broker_entry(k, d.kind, false, &levels, include_synonyms))
        })
        .collect()
}

/// The cluster-wide default broker resource (the empty name): only the dynamic defaults set
/// on it, as Kafka lists them.
fn describe_cluster_defaults(
    broker: &Broker,
    wanted: &dyn Fn(&str) -> bool,
    include_synonyms: bool,
) -> Vec<DescribeConfigsResourceResult> {
    broker
        .dynamic_broker_configs("")
        .into_iter()
        .filter(|(k, _)| wanted(k))
        .filter_map(|(k, v)| {
            let kind = dynamic_broker::def(&k).map(|d| d.kind)?;
            let levels = [(v.as_str(), ConfigSource::DynamicDefaultBroker)];
            Some(broker_entry(&k, kind, false, &levels, include_synonyms))
        })
        .collect()
}

/// A group's configs: every non-internal one (internal ones once set), valued from the
/// group's own configs, the broker's settings or Kafka's defaults. The group need not exist.
fn describe_group(
    broker: &Broker,
    base: DescribeConfigsResult,
    keys: Option<&[StrBytes]>,
    include_synonyms: bool,
    include_documentation: bool,
) -> DescribeConfigsResult {
    let group = base.resource_name.to_string();
    if group.is_empty() {
        return base
            .with_error_code(ResponseError::InvalidRequest.code())
            .with_error_message(Some(s("Group name must not be empty")));
    }
    let settings = BrokerGroupSettings::new(&broker.config.explicit);
    let configs = group_config::describe(&broker.group_configs(&group), &settings)
        .into_iter()
        .filter(|d| keys.is_none_or(|keys| keys.iter().any(|k| k.as_str() == d.name)))
        .map(|d| {
            let synonyms = if include_synonyms {
                d.synonyms
                    .iter()
                    .map(|(name, value, source)| {
                        DescribeConfigsSynonym::default()
                            .with_name(s(name))
                            .with_value(Some(s(value)))
                            .with_source(*source)
                    })
                    .collect()
            } else {
                Vec::new()
            };
            DescribeConfigsResourceResult::default()
                .with_name(s(d.name))
                .with_value(Some(s(&d.value)))
                .with_config_source(d.source)
                .with_config_type(d.kind.describe_code())
                .with_documentation(include_documentation.then(|| s(d.doc)))
                .with_synonyms(synonyms)
        })
        .collect();
    base.with_configs(configs)
}

/// DescribeConfigs: DESCRIBE_CONFIGS on each resource (topic, group or cluster).
pub struct DescribeConfigs;

impl Api for DescribeConfigs {
    type Request = DescribeConfigsRequest;

    fn authorize(who: &Who, mut r: DescribeConfigsRequest, _version: i16) -> Gate {
        let (ok, refusals) = gate::split_configs(who, Op::DescribeConfigs, r.resources, |res| {
            (res.resource_type, &res.resource_name)
        });
        r.resources = ok;
        let refusals = refusals
            .into_iter()
            .map(|(res, code)| {
                DescribeConfigsResult::default()
                    .with_error_code(code.code())
                    .with_error_message(gate::message(code))
                    .with_resource_type(res.resource_type)
                    .with_resource_name(res.resource_name)
            })
            .collect();
        gate::run_and_extend(
            RequestKind::DescribeConfigs(r),
            refusals,
            |resp, mut extra| match resp {
                ResponseKind::DescribeConfigs(mut d) => {
                    d.results.append(&mut extra);
                    ResponseKind::DescribeConfigs(d)
                }
                other => other,
            },
        )
    }

    async fn handle(
        s: &Services,
        _ctx: &Context,
        r: DescribeConfigsRequest,
        version: i16,
    ) -> Outcome {
        Outcome::respond(handle(&s.broker, r, version))
    }
}

#[cfg(test)]
mod authorize_tests {
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;

    use super::*;
    use crate::api::test_support::{allow, broker_with_acls, who};
    use crate::security::acl::{Operation as Op, ResourceType as Res};

    fn resource(resource_type: i8, name: &str) -> DescribeConfigsResource {
        DescribeConfigsResource::default()
            .with_resource_type(resource_type)
            .with_resource_name(s(name))
    }

    #[tokio::test]
    async fn each_resource_is_refused_with_its_own_code() {
        let dir = tempfile::tempdir().unwrap();
        let broker = broker_with_acls(
            dir.path(),
            &[allow("User:alice", Op::DescribeConfigs, Res::Topic, "mine")],
        );
        let req = DescribeConfigsRequest::default().with_resources(vec![
            resource(2, "mine"),
            resource(2, "theirs"),
            resource(4, "1"),
            resource(32, "group"),
        ]);
        let Gate::Run(RequestKind::DescribeConfigs(kept), Some(finish)) =
            DescribeConfigs::authorize(&who(&broker, "User:alice"), req, 4)
        else {
            panic!("a partly refused request runs and is finished")
        };
        let kept: Vec<_> = kept
            .resources
            .iter()
            .map(|r| r.resource_name.to_string())
            .collect();
        assert_eq!(kept, ["mine"]);
        let Outcome::Respond(resp) = finish(Outcome::respond(DescribeConfigsResponse::default()))
        else {
            panic!("no response")
        };
        let ResponseKind::DescribeConfigs(resp) = *resp else {
            panic!("not a DescribeConfigs response")
        };
        let refused: Vec<_> = resp
            .results
            .iter()
            .map(|r| (r.resource_type, r.resource_name.to_string(), r.error_code))
            .collect();
        // TOPIC_ (29), CLUSTER_ (31) and GROUP_AUTHORIZATION_FAILED (30).
        assert_eq!(
            refused,
            [
                (2, "theirs".into(), 29),
                (4, "1".into(), 31),
                (32, "group".into(), 30)
            ]
        );
    }
}

#[cfg(test)]
mod sensitive_tests {
    use std::collections::BTreeMap;

    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;

    use super::*;
    use crate::config::BrokerConfig;

    #[test]
    fn passwords_keys_and_jaas_configs_are_described_without_their_value() {
        let dir = tempfile::tempdir().unwrap();
        let jaas = "org.apache.kafka.common.security.plain.PlainLoginModule required \
                    user_admin=\"s3cret\";";
        let settings: BTreeMap<String, String> = [
            ("log.dirs", dir.path().display().to_string()),
            ("sasl.jaas.config", jaas.to_string()),
            (
                "strata.remote.store.secret.access.key",
                "AKIA-secret".to_string(),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let broker = Broker::open(BrokerConfig::build(&[settings]).unwrap()).unwrap();
        let req = DescribeConfigsRequest::default()
            .with_include_synonyms(true)
            .with_resources(vec![DescribeConfigsResource::default()
                .with_resource_type(RESOURCE_BROKER)
                .with_resource_name(s("1"))
                .with_configuration_keys(None)]);
        let resp = handle(&broker, req, 4);
        let configs = &resp.results[0].configs;
        assert_eq!(
            resp.results[0].error_code, 0,
            "{:?}",
            resp.results[0].error_message
        );
        for key in [
            "sasl.jaas.config",
            "strata.remote.store.secret.access.key",
            "ssl.keystore.key",
        ] {
            let c = configs
                .iter()
                .find(|c| c.name.as_str() == key)
                .unwrap_or_else(|| panic!("{key} not described"));
            assert!(c.is_sensitive && c.value.is_none(), "{key}: {c:?}");
            assert!(c.synonyms.iter().all(|y| y.value.is_none()), "{key}");
        }
        let port = configs
            .iter()
            .find(|c| c.name.as_str() == "log.dirs")
            .unwrap();
        assert!(!port.is_sensitive && port.value.is_some());
        let text = format!("{resp:?}");
        assert!(!text.contains("s3cret") && !text.contains("AKIA-secret"));
    }
}
