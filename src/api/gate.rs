//! What every API's ACL check is built from, with the resources, operations and error codes
//! of Kafka's `KafkaApis`. The rules themselves live with each API (`authorize` in its file).
//!
//! Each request passes through its API's `authorize` before its handler. A request the
//! principal may not make at all is answered there ([`Gate::Answer`]). A request naming some
//! resources it may not use loses those before the handler runs, and the refusals are put back
//! into the handler's response afterwards ([`Gate::Run`] with a finishing step), which is how
//! Kafka builds such responses too. Listings (Metadata for all topics, ListGroups,
//! ListTransactions, OffsetFetch for all topics) drop what the principal may not describe, so
//! nothing leaks.
//!
//! Without an authorizer (`authorizer.class.name` unset) no check runs at all.

use std::sync::Arc;

use kafka_protocol::messages::{RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use Operation::{Read, Write};
use ResourceType::{Cluster, Group, Topic, TransactionalId};

use crate::api::Outcome;
use crate::broker::Broker;
use crate::security::acl::{Operation, ResourceType, CLUSTER_NAME};

/// Applied to the handler's outcome to put back the refused resources.
pub type Finish = Box<dyn FnOnce(Outcome) -> Outcome + Send>;

pub enum Gate {
    /// Run the handler on this (possibly trimmed) request, then finish its outcome.
    Run(RequestKind, Option<Finish>),
    /// Refused as a whole: answer without running the handler.
    Answer(ResponseKind),
}

pub const TOPIC_DENIED: ResponseError = ResponseError::TopicAuthorizationFailed;
pub const GROUP_DENIED: ResponseError = ResponseError::GroupAuthorizationFailed;
pub const CLUSTER_DENIED: ResponseError = ResponseError::ClusterAuthorizationFailed;
pub const TXN_DENIED: ResponseError = ResponseError::TransactionalIdAuthorizationFailed;

/// Finishes a `Respond` outcome with `f` (other outcomes pass unchanged).
pub fn finish(f: impl FnOnce(ResponseKind) -> ResponseKind + Send + 'static) -> Option<Finish> {
    Some(Box::new(move |outcome| match outcome {
        Outcome::Respond(r) => Outcome::Respond(Box::new(f(*r))),
        Outcome::RespondWithFiles(r, files) => Outcome::RespondWithFiles(Box::new(f(*r)), files),
        other => other,
    }))
}

/// Who is asking, detached from the connection so finishing steps can check ACLs too.
#[derive(Clone)]
pub struct Who {
    pub broker: Arc<Broker>,
    pub principal: String,
    pub host: String,
}

impl Who {
    pub fn may(&self, op: Operation, rt: ResourceType, name: &str) -> bool {
        self.broker
            .authorizer
            .authorize(&self.principal, &self.host, op, rt, name)
    }

    pub fn may_cluster(&self, op: Operation) -> bool {
        self.may(op, Cluster, CLUSTER_NAME)
    }

    /// A topic's name from the request's name or, for requests by id, from the catalog.
    pub fn topic_name(&self, name: &str, id: &uuid::Uuid) -> Option<String> {
        if !name.is_empty() {
            return Some(name.to_string());
        }
        self.broker.topic_by_id(id).map(|t| t.name.clone())
    }

    /// A topic check by name or id. An id the broker does not know passes: the handler
    /// answers UNKNOWN_TOPIC_ID for it.
    pub fn may_topic(&self, op: Operation, name: &str, id: &uuid::Uuid) -> bool {
        self.topic_name(name, id)
            .is_none_or(|n| self.may(op, Topic, &n))
    }

    pub fn operations(&self, rt: ResourceType, name: &str) -> i32 {
        self.broker
            .authorizer
            .authorized_operations(&self.principal, &self.host, rt, name)
    }

    /// A group member's requests (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
    /// ConsumerGroupHeartbeat) need READ on the group.
    pub fn may_use_group(&self, group: &str) -> bool {
        self.may(Read, Group, group)
    }

    /// The refusal for a request acting for a transaction on a group's offsets
    /// (AddOffsetsToTxn, TxnOffsetCommit): WRITE on the transactional id, then READ on the
    /// group.
    pub fn txn_group_refusal(&self, transactional_id: &str, group: &str) -> Option<ResponseError> {
        if !self.may(Write, TransactionalId, transactional_id) {
            Some(TXN_DENIED)
        } else if !self.may(Read, Group, group) {
            Some(GROUP_DENIED)
        } else {
            None
        }
    }
}

/// A refusal's error message: the error's own text, as Kafka sends it.
pub fn message(code: ResponseError) -> Option<StrBytes> {
    Some(StrBytes::from_string(code.to_string()))
}

/// Runs the trimmed request and appends `refusals` to the response with `put`.
pub fn run_and_extend<T: Send + 'static>(
    request: RequestKind,
    refusals: Vec<T>,
    put: impl FnOnce(ResponseKind, Vec<T>) -> ResponseKind + Send + 'static,
) -> Gate {
    if refusals.is_empty() {
        return Gate::Run(request, None);
    }
    Gate::Run(request, finish(move |resp| put(resp, refusals)))
}

/// Splits config resources (DescribeConfigs, AlterConfigs, IncrementalAlterConfigs) into those
/// the principal may use with `op` and those refused, each with its error code.
pub fn split_configs<R>(
    who: &Who,
    op: Operation,
    resources: Vec<R>,
    key: impl Fn(&R) -> (i8, &StrBytes),
) -> (Vec<R>, Vec<(R, ResponseError)>) {
    let mut ok = Vec::new();
    let mut refused = Vec::new();
    for res in resources {
        let (resource_type, name) = key(&res);
        match config_refusal(who, op, resource_type, name) {
            Some(code) => refused.push((res, code)),
            None => ok.push(res),
        }
    }
    (ok, refused)
}

/// The refusal for a DescribeConfigs / AlterConfigs resource, if any.
fn config_refusal(
    who: &Who,
    op: Operation,
    resource_type: i8,
    name: &str,
) -> Option<ResponseError> {
    const TOPIC: i8 = 2;
    const GROUP: i8 = 32;
    match resource_type {
        TOPIC => (!who.may(op, Topic, name)).then_some(TOPIC_DENIED),
        GROUP => (!who.may(op, Group, name)).then_some(GROUP_DENIED),
        // Brokers, broker loggers and client metrics are cluster configs. Unknown types are
        // left to the handler, which refuses them with its own error.
        4 | 8 | 16 => (!who.may_cluster(op)).then_some(CLUSTER_DENIED),
        _ => None,
    }
}
