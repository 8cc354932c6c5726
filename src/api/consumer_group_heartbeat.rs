//! ConsumerGroupHeartbeat (KIP-848): join, reconcile toward the server's assignment, leave.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::consumer_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::{
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, RequestKind, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use regex::Regex;

use crate::api::gate::{Gate, Who, GROUP_DENIED, TOPIC_DENIED};
use crate::api::{Api, Context, Outcome};
use crate::coordinator::consumer_group::HeartbeatIn;
use crate::coordinator::GroupCoordinator;
use crate::security::acl::{Operation as Op, ResourceType as Res};
use crate::services::Services;

/// Compiles a member's topic regex as Kafka matches it: against whole topic names, in RE2
/// syntax (Kafka uses RE2/J; Rust's `regex` implements the same syntax).
pub fn compile_topic_regex(regex: &str) -> Result<Regex, String> {
    Regex::new(&format!("^(?:{regex})$")).map_err(|e| {
        format!("SubscribedTopicRegex `{regex}` is not a valid regular expression: {e}.")
    })
}

fn refuse(code: ResponseError, message: String) -> ConsumerGroupHeartbeatResponse {
    ConsumerGroupHeartbeatResponse::default()
        .with_error_code(code.code())
        .with_error_message(Some(StrBytes::from_string(message)))
}

/// ConsumerGroupHeartbeat. `topic_names` lists the catalog's topics and `may_describe` says
/// whether the member's principal may describe one: a regex subscription matches only
/// those, as in Kafka.
pub fn handle(
    groups: &Arc<GroupCoordinator>,
    ctx: &Context,
    req: ConsumerGroupHeartbeatRequest,
    topic_names: &dyn Fn() -> Vec<String>,
    may_describe: &dyn Fn(&str) -> bool,
) -> ConsumerGroupHeartbeatResponse {
    let coordinator = groups;
    if req.member_epoch == 0
        && req.subscribed_topic_names.is_none()
        && req.subscribed_topic_regex.is_none()
    {
        return refuse(
            ResponseError::InvalidRequest,
            "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when \
             (re-)joining."
                .into(),
        );
    }
    if let Some(regex) = req
        .subscribed_topic_regex
        .as_deref()
        .filter(|r| !r.is_empty())
    {
        if let Err(message) = compile_topic_regex(regex) {
            return refuse(ResponseError::InvalidRegularExpression, message);
        }
    }
    let regex_topics = |regex: &str| -> BTreeSet<String> {
        let Ok(re) = compile_topic_regex(regex) else {
            return BTreeSet::new();
        };
        topic_names()
            .into_iter()
            .filter(|t| re.is_match(t) && may_describe(t))
            .collect()
    };
    let hb = HeartbeatIn {
        member_id: req.member_id.to_string(),
        member_epoch: req.member_epoch,
        instance_id: req.instance_id.map(|s| s.to_string()),
        rack_id: req.rack_id.map(|s| s.to_string()),
        client_id: ctx.client_id.clone(),
        client_host: ctx.client_host(),
        rebalance_timeout: Duration::from_millis(req.rebalance_timeout_ms.max(0) as u64),
        subscribed_topics: req
            .subscribed_topic_names
            .map(|ts| ts.into_iter().map(|t| t.0.to_string()).collect()),
        subscribed_regex: req.subscribed_topic_regex.map(|r| r.to_string()),
        server_assignor: req.server_assignor.map(|s| s.to_string()),
        owned: req.topic_partitions.map(|tps| {
            tps.into_iter()
                .map(|tp| (tp.topic_id, tp.partitions.into_iter().collect()))
                .collect()
        }),
    };
    match coordinator.consumer_heartbeat(req.group_id.0.as_str(), hb, &regex_topics) {
        Err(e) => ConsumerGroupHeartbeatResponse::default()
            .with_error_code(e.code())
            .with_member_epoch(-1),
        Ok(out) => ConsumerGroupHeartbeatResponse::default()
            .with_member_id(Some(StrBytes::from_string(out.member_id)))
            .with_member_epoch(out.member_epoch)
            .with_heartbeat_interval_ms(
                coordinator
                    .consumer_heartbeat_interval(req.group_id.0.as_str())
                    .as_millis() as i32,
            )
            .with_assignment(out.assignment.map(|a| {
                Assignment::default().with_topic_partitions(
                    a.into_iter()
                        .map(|(id, ps)| {
                            TopicPartitions::default()
                                .with_topic_id(id)
                                .with_partitions(ps.into_iter().collect())
                        })
                        .collect(),
                )
            })),
    }
}

/// ConsumerGroupHeartbeat: READ on the group, DESCRIBE on every subscribed topic.
pub struct ConsumerGroupHeartbeat;

impl Api for ConsumerGroupHeartbeat {
    type Request = ConsumerGroupHeartbeatRequest;

    fn authorize(who: &Who, r: ConsumerGroupHeartbeatRequest, _version: i16) -> Gate {
        let refuse = |code: ResponseError, msg: String| {
            Gate::Answer(ResponseKind::ConsumerGroupHeartbeat(
                ConsumerGroupHeartbeatResponse::default()
                    .with_error_code(code.code())
                    .with_error_message(Some(StrBytes::from_string(msg))),
            ))
        };
        if !who.may_use_group(&r.group_id) {
            return refuse(GROUP_DENIED, GROUP_DENIED.to_string());
        }
        let denied: Vec<String> = r
            .subscribed_topic_names
            .iter()
            .flatten()
            .filter(|t| !who.may(Op::Describe, Res::Topic, t))
            .map(|t| t.to_string())
            .collect();
        if !denied.is_empty() {
            return refuse(
                TOPIC_DENIED,
                format!("Unauthorized topics: {}", denied.join(", ")),
            );
        }
        Gate::Run(RequestKind::ConsumerGroupHeartbeat(r), None)
    }

    async fn handle(
        s: &Services,
        ctx: &Context,
        r: ConsumerGroupHeartbeatRequest,
        _version: i16,
    ) -> Outcome {
        let topic_names = || s.broker.topics().iter().map(|t| t.name.clone()).collect();
        let may_describe = |t: &str| ctx.allowed(&s.broker, Op::Describe, Res::Topic, t);
        let group = r.group_id.0.to_string();
        let response = handle(&s.groups, ctx, r, &topic_names, &may_describe);
        Outcome::respond(persist(&s.groups, &group, response).await)
    }
}

/// Answers a heartbeat only once the group's records hold what it changed (Kafka answers
/// after its records are committed); the write's error otherwise. The member retries with
/// the epoch it had, which the group still accepts.
pub async fn persist(
    groups: &Arc<GroupCoordinator>,
    group: &str,
    response: ConsumerGroupHeartbeatResponse,
) -> ConsumerGroupHeartbeatResponse {
    if !groups.consumer_group_needs_write(group) {
        return response;
    }
    let (coordinator, id) = (groups.clone(), group.to_string());
    let written = tokio::task::spawn_blocking(move || coordinator.write_consumer_group(&id))
        .await
        .unwrap_or(Err(ResponseError::UnknownServerError));
    match written {
        Ok(()) => response,
        Err(e) => ConsumerGroupHeartbeatResponse::default()
            .with_error_code(e.code())
            .with_member_epoch(-1),
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::GroupId;

    use super::*;
    use crate::api::test_support::{context, groups};

    fn join_with_regex(regex: Option<&'static str>) -> ConsumerGroupHeartbeatRequest {
        ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(StrBytes::from_static_str("g")))
            .with_member_epoch(0)
            .with_rebalance_timeout_ms(30_000)
            .with_subscribed_topic_regex(regex.map(StrBytes::from_static_str))
            .with_topic_partitions(Some(Vec::new()))
    }

    fn catalog() -> Vec<String> {
        ["orders", "orders-eu", "payments", "orders.archive"]
            .map(String::from)
            .to_vec()
    }

    #[test]
    fn a_regex_matches_whole_names_the_member_may_describe() {
        let groups = groups();
        let denied = |t: &str| t != "orders-eu";
        let r = handle(
            &groups,
            &context(),
            join_with_regex(Some("orders.*")),
            &catalog,
            &denied,
        );
        assert_eq!(r.error_code, 0, "{:?}", r.error_message);
        let matched = groups
            .with_consumer_group("g", |c| {
                c.members.values().next().map(|m| m.regex_topics.clone())
            })
            .flatten()
            .expect("a member");
        assert_eq!(
            matched,
            ["orders", "orders.archive"].map(String::from).into()
        );
        // Anchored: "rders" alone matches nothing.
        let r = handle(
            &groups,
            &context(),
            join_with_regex(Some("rders")),
            &catalog,
            &|_| true,
        );
        assert_eq!(r.error_code, 0);
    }

    #[test]
    fn an_invalid_regex_or_no_subscription_at_all_is_refused_as_kafka_does() {
        let groups = groups();
        let r = handle(
            &groups,
            &context(),
            join_with_regex(Some("orders[")),
            &catalog,
            &|_| true,
        );
        assert_eq!(r.error_code, ResponseError::InvalidRegularExpression.code());
        let message = r.error_message.as_deref().unwrap_or_default().to_string();
        assert!(
            message.starts_with("SubscribedTopicRegex `orders[` is not a valid regular expression"),
            "{message}"
        );
        let r = handle(
            &groups,
            &context(),
            join_with_regex(None),
            &catalog,
            &|_| true,
        );
        assert_eq!(r.error_code, ResponseError::InvalidRequest.code());
        assert!(r
            .error_message
            .as_deref()
            .unwrap_or_default()
            .contains("SubscribedTopicRegex"));
    }
}
