//! ACL checks for every API, in one place, with the resources, operations and error codes of
//! Kafka's `KafkaApis`.
//!
//! Each request passes through [`gate`] before its handler. A request the principal may not make
//! at all is answered here ([`Gate::Answer`]). A request naming some resources it may not use
//! loses those before the handler runs, and the refusals are put back into the handler's
//! response afterwards ([`Gate::Run`] with a finishing step), which is how Kafka builds such
//! responses too. Listings (Metadata for all topics, ListGroups, ListTransactions, OffsetFetch
//! for all topics) drop what the principal may not describe, so nothing leaks.
//!
//! Without an authorizer (`authorizer.class.name` unset) the gate lets everything through.

use std::sync::Arc;

use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::acl::{Operation, ResourceType, CLUSTER_NAME};
use crate::api::{Context, Outcome};
use crate::broker::Broker;

use Operation::*;
use ResourceType::{Cluster, Group, Topic, TransactionalId};

/// Applied to the handler's outcome to put back the refused resources.
pub type Finish = Box<dyn FnOnce(Outcome) -> Outcome + Send>;

pub enum Gate {
    /// Run the handler on this (possibly trimmed) request, then finish its outcome.
    Run(RequestKind, Option<Finish>),
    /// Refused as a whole: answer without running the handler.
    Answer(ResponseKind),
}

const TOPIC_DENIED: ResponseError = ResponseError::TopicAuthorizationFailed;
const GROUP_DENIED: ResponseError = ResponseError::GroupAuthorizationFailed;
const CLUSTER_DENIED: ResponseError = ResponseError::ClusterAuthorizationFailed;
const TXN_DENIED: ResponseError = ResponseError::TransactionalIdAuthorizationFailed;

/// Finishes a `Respond` outcome with `f` (other outcomes pass unchanged).
fn finish(f: impl FnOnce(ResponseKind) -> ResponseKind + Send + 'static) -> Option<Finish> {
    Some(Box::new(move |outcome| match outcome {
        Outcome::Respond(r) => Outcome::Respond(Box::new(f(*r))),
        other => other,
    }))
}

/// Who is asking, detached from the connection so finishing steps can check ACLs too.
#[derive(Clone)]
struct Who {
    broker: Arc<Broker>,
    principal: String,
    host: String,
}

impl Who {
    fn may(&self, op: Operation, rt: ResourceType, name: &str) -> bool {
        self.broker
            .authorizer
            .authorize(&self.principal, &self.host, op, rt, name)
    }

    fn may_cluster(&self, op: Operation) -> bool {
        self.may(op, Cluster, CLUSTER_NAME)
    }

    /// A topic's name from the request's name or, for requests by id, from the catalog.
    fn topic_name(&self, name: &str, id: &uuid::Uuid) -> Option<String> {
        if !name.is_empty() {
            return Some(name.to_string());
        }
        self.broker.topic_by_id(id).map(|t| t.name.clone())
    }

    /// A topic check by name or id. An id the broker does not know passes: the handler
    /// answers UNKNOWN_TOPIC_ID for it.
    fn may_topic(&self, op: Operation, name: &str, id: &uuid::Uuid) -> bool {
        self.topic_name(name, id)
            .is_none_or(|n| self.may(op, Topic, &n))
    }

    fn operations(&self, rt: ResourceType, name: &str) -> i32 {
        self.broker
            .authorizer
            .authorized_operations(&self.principal, &self.host, rt, name)
    }
}

fn message(code: ResponseError) -> Option<StrBytes> {
    Some(StrBytes::from_string(code.to_string()))
}

/// Runs the trimmed request and appends `refusals` to the response with `put`.
fn run_and_extend<T: Send + 'static>(
    request: RequestKind,
    refusals: Vec<T>,
    put: impl FnOnce(ResponseKind, Vec<T>) -> ResponseKind + Send + 'static,
) -> Gate {
    if refusals.is_empty() {
        return Gate::Run(request, None);
    }
    Gate::Run(request, finish(move |resp| put(resp, refusals)))
}

pub fn gate(broker: &Arc<Broker>, ctx: &Context, body: RequestKind, version: i16) -> Gate {
    if !broker.authorizer.is_enabled() {
        return Gate::Run(body, None);
    }
    let who = Who {
        broker: broker.clone(),
        principal: ctx.principal.clone(),
        host: ctx.peer.ip().to_string(),
    };
    match body {
        RequestKind::Produce(r) => produce(who, r),
        RequestKind::Fetch(r) => fetch(who, r),
        RequestKind::ListOffsets(mut r) => {
            if r.replica_id.0 >= 0 && !who.may_cluster(ClusterAction) {
                let topics = r
                    .topics
                    .iter()
                    .map(|t| list_offsets_refusal(t, CLUSTER_DENIED))
                    .collect();
                return Gate::Answer(ResponseKind::ListOffsets(
                    ListOffsetsResponse::default().with_topics(topics),
                ));
            }
            let (ok, denied): (Vec<_>, Vec<_>) = r
                .topics
                .into_iter()
                .partition(|t| who.may(Describe, Topic, &t.name));
            r.topics = ok;
            let refusals = denied
                .iter()
                .map(|t| list_offsets_refusal(t, TOPIC_DENIED))
                .collect();
            run_and_extend(
                RequestKind::ListOffsets(r),
                refusals,
                |resp, mut extra| match resp {
                    ResponseKind::ListOffsets(mut l) => {
                        l.topics.append(&mut extra);
                        ResponseKind::ListOffsets(l)
                    }
                    other => other,
                },
            )
        }
        RequestKind::OffsetForLeaderEpoch(mut r) => {
            let (op_ok, code) = if r.replica_id.0 >= 0 {
                (who.may_cluster(ClusterAction), CLUSTER_DENIED)
            } else {
                (true, TOPIC_DENIED)
            };
            let (ok, denied): (Vec<_>, Vec<_>) = r
                .topics
                .into_iter()
                .partition(|t| op_ok && who.may(Describe, Topic, &t.topic));
            r.topics = ok;
            let refusals = denied
                .iter()
                .map(|t| {
                    offset_for_leader_epoch_response::OffsetForLeaderTopicResult::default()
                        .with_topic(t.topic.clone())
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    offset_for_leader_epoch_response::EpochEndOffset::default()
                                        .with_partition(p.partition)
                                        .with_error_code(code.code())
                                        .with_leader_epoch(-1)
                                        .with_end_offset(-1)
                                })
                                .collect(),
                        )
                })
                .collect();
            run_and_extend(
                RequestKind::OffsetForLeaderEpoch(r),
                refusals,
                |resp, mut extra| match resp {
                    ResponseKind::OffsetForLeaderEpoch(mut o) => {
                        o.topics.append(&mut extra);
                        ResponseKind::OffsetForLeaderEpoch(o)
                    }
                    other => other,
                },
            )
        }
        RequestKind::Metadata(r) => metadata(who, r),
        RequestKind::CreateTopics(mut r) => {
            let may_create_any = who.may_cluster(Create);
            let (ok, denied): (Vec<_>, Vec<_>) = r
                .topics
                .into_iter()
                .partition(|t| may_create_any || who.may(Create, Topic, &t.name));
            r.topics = ok;
            let refusals = denied
                .iter()
                .map(|t| {
                    create_topics_response::CreatableTopicResult::default()
                        .with_name(t.name.clone())
                        .with_error_code(TOPIC_DENIED.code())
                        .with_error_message(message(TOPIC_DENIED))
                        .with_topic_config_error_code(TOPIC_DENIED.code())
                        .with_num_partitions(-1)
                        .with_replication_factor(-1)
                })
                .collect();
            run_and_extend(
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
        RequestKind::DeleteTopics(mut r) => {
            let (ok, denied): (Vec<_>, Vec<_>) = r.topics.into_iter().partition(|t| {
                who.may_topic(
                    Delete,
                    t.name.as_ref().map_or("", |n| n.as_str()),
                    &t.topic_id,
                )
            });
            r.topics = ok;
            let (ok_names, denied_names): (Vec<_>, Vec<_>) = r
                .topic_names
                .into_iter()
                .partition(|n| who.may(Delete, Topic, n));
            r.topic_names = ok_names;
            let refusals = denied
                .into_iter()
                .map(|t| (t.name, t.topic_id))
                .chain(
                    denied_names
                        .into_iter()
                        .map(|n| (Some(n), uuid::Uuid::nil())),
                )
                .map(|(name, id)| {
                    delete_topics_response::DeletableTopicResult::default()
                        .with_name(name)
                        .with_topic_id(id)
                        .with_error_code(TOPIC_DENIED.code())
                        .with_error_message(message(TOPIC_DENIED))
                })
                .collect();
            run_and_extend(
                RequestKind::DeleteTopics(r),
                refusals,
                |resp, mut extra| match resp {
                    ResponseKind::DeleteTopics(mut d) => {
                        d.responses.append(&mut extra);
                        ResponseKind::DeleteTopics(d)
                    }
                    other => other,
                },
            )
        }
        RequestKind::DeleteRecords(mut r) => {
            let (ok, denied): (Vec<_>, Vec<_>) = r
                .topics
                .into_iter()
                .partition(|t| who.may(Delete, Topic, &t.name));
            r.topics = ok;
            let refusals = denied
                .iter()
                .map(|t| {
                    delete_records_response::DeleteRecordsTopicResult::default()
                        .with_name(t.name.clone())
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    delete_records_response::DeleteRecordsPartitionResult::default()
                                        .with_partition_index(p.partition_index)
                                        .with_low_watermark(-1)
                                        .with_error_code(TOPIC_DENIED.code())
                                })
                                .collect(),
                        )
                })
                .collect();
            run_and_extend(
                RequestKind::DeleteRecords(r),
                refusals,
                |resp, mut extra| match resp {
                    ResponseKind::DeleteRecords(mut d) => {
                        d.topics.append(&mut extra);
                        ResponseKind::DeleteRecords(d)
                    }
                    other => other,
                },
            )
        }
        RequestKind::CreatePartitions(mut r) => {
            let (ok, denied): (Vec<_>, Vec<_>) = r
                .topics
                .into_iter()
                .partition(|t| who.may(Alter, Topic, &t.name));
            r.topics = ok;
            let refusals = denied
                .iter()
                .map(|t| {
                    create_partitions_response::CreatePartitionsTopicResult::default()
                        .with_name(t.name.clone())
                        .with_error_code(TOPIC_DENIED.code())
                        .with_error_message(message(TOPIC_DENIED))
                })
                .collect();
            run_and_extend(
                RequestKind::CreatePartitions(r),
                refusals,
                |resp, mut extra| match resp {
                    ResponseKind::CreatePartitions(mut c) => {
                        c.results.append(&mut extra);
                        ResponseKind::CreatePartitions(c)
                    }
                    other => other,
                },
            )
        }
        RequestKind::DescribeConfigs(mut r) => {
            let (ok, refusals) = split_configs(&who, DescribeConfigs, r.resources, |res| {
                (res.resource_type, &res.resource_name)
            });
            r.resources = ok;
            let refusals = refusals
                .into_iter()
                .map(|(res, code)| {
                    describe_configs_response::DescribeConfigsResult::default()
                        .with_error_code(code.code())
                        .with_error_message(message(code))
                        .with_resource_type(res.resource_type)
                        .with_resource_name(res.resource_name)
                })
                .collect();
            run_and_extend(
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
        RequestKind::AlterConfigs(mut r) => {
            let (ok, refusals) = split_configs(&who, AlterConfigs, r.resources, |res| {
                (res.resource_type, &res.resource_name)
            });
            r.resources = ok;
            let refusals = refusals
                .into_iter()
                .map(|(res, code)| {
                    alter_configs_response::AlterConfigsResourceResponse::default()
                        .with_error_code(code.code())
                        .with_error_message(message(code))
                        .with_resource_type(res.resource_type)
                        .with_resource_name(res.resource_name)
                })
                .collect();
            run_and_extend(
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
        RequestKind::IncrementalAlterConfigs(mut r) => {
            let (ok, refusals) = split_configs(&who, AlterConfigs, r.resources, |res| {
                (res.resource_type, &res.resource_name)
            });
            r.resources = ok;
            let refusals = refusals
                .into_iter()
                .map(|(res, code)| {
                    incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                        .with_error_code(code.code())
                        .with_error_message(message(code))
                        .with_resource_type(res.resource_type)
                        .with_resource_name(res.resource_name)
                })
                .collect();
            run_and_extend(
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
        RequestKind::DescribeLogDirs(r) => {
            if !who.may_cluster(Describe) {
                return Gate::Answer(ResponseKind::DescribeLogDirs(
                    DescribeLogDirsResponse::default().with_error_code(CLUSTER_DENIED.code()),
                ));
            }
            Gate::Run(RequestKind::DescribeLogDirs(r), None)
        }
        RequestKind::DescribeCluster(r) => {
            if !r.include_cluster_authorized_operations {
                return Gate::Run(RequestKind::DescribeCluster(r), None);
            }
            let bits = who.operations(Cluster, CLUSTER_NAME);
            Gate::Run(
                RequestKind::DescribeCluster(r),
                finish(move |resp| match resp {
                    ResponseKind::DescribeCluster(d) => {
                        ResponseKind::DescribeCluster(d.with_cluster_authorized_operations(bits))
                    }
                    other => other,
                }),
            )
        }
        RequestKind::AlterPartitionReassignments(r) => {
            if who.may_cluster(Alter) {
                return Gate::Run(RequestKind::AlterPartitionReassignments(r), None);
            }
            use kafka_protocol::messages::alter_partition_reassignments_response as apr;
            let responses = r
                .topics
                .iter()
                .map(|t| {
                    apr::ReassignableTopicResponse::default()
                        .with_name(t.name.clone())
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    apr::ReassignablePartitionResponse::default()
                                        .with_partition_index(p.partition_index)
                                        .with_error_code(CLUSTER_DENIED.code())
                                        .with_error_message(message(CLUSTER_DENIED))
                                })
                                .collect(),
                        )
                })
                .collect();
            Gate::Answer(ResponseKind::AlterPartitionReassignments(
                AlterPartitionReassignmentsResponse::default()
                    .with_allow_replication_factor_change(r.allow_replication_factor_change)
                    .with_error_code(CLUSTER_DENIED.code())
                    .with_error_message(message(CLUSTER_DENIED))
                    .with_responses(responses),
            ))
        }
        RequestKind::ListPartitionReassignments(r) => {
            if !who.may_cluster(Describe) {
                return Gate::Answer(ResponseKind::ListPartitionReassignments(
                    ListPartitionReassignmentsResponse::default()
                        .with_error_code(CLUSTER_DENIED.code())
                        .with_error_message(message(CLUSTER_DENIED)),
                ));
            }
            Gate::Run(RequestKind::ListPartitionReassignments(r), None)
        }
        RequestKind::DescribeQuorum(r) => {
            if who.may_cluster(Describe) {
                return Gate::Run(RequestKind::DescribeQuorum(r), None);
            }
            Gate::Answer(ResponseKind::DescribeQuorum(
                DescribeQuorumResponse::default()
                    .with_error_code(CLUSTER_DENIED.code())
                    .with_error_message(message(CLUSTER_DENIED)),
            ))
        }
        RequestKind::ElectLeaders(r) => {
            if !who.may_cluster(Alter) {
                return Gate::Answer(ResponseKind::ElectLeaders(
                    crate::api::elect_leaders::refuse(
                        &r,
                        CLUSTER_DENIED,
                        CLUSTER_DENIED.to_string(),
                    ),
                ));
            }
            Gate::Run(RequestKind::ElectLeaders(r), None)
        }
        RequestKind::DescribeUserScramCredentials(r) => {
            if !who.may_cluster(Describe) {
                return Gate::Answer(ResponseKind::DescribeUserScramCredentials(
                    DescribeUserScramCredentialsResponse::default()
                        .with_error_code(CLUSTER_DENIED.code())
                        .with_error_message(message(CLUSTER_DENIED)),
                ));
            }
            Gate::Run(RequestKind::DescribeUserScramCredentials(r), None)
        }
        RequestKind::AlterUserScramCredentials(r) => {
            if !who.may_cluster(Alter) {
                let users: std::collections::BTreeSet<String> = r
                    .deletions
                    .iter()
                    .map(|d| d.name.to_string())
                    .chain(r.upsertions.iter().map(|u| u.name.to_string()))
                    .collect();
                let results = users
                    .into_iter()
                    .map(|u| {
                        alter_user_scram_credentials_response::AlterUserScramCredentialsResult::default()
                            .with_user(StrBytes::from_string(u))
                            .with_error_code(CLUSTER_DENIED.code())
                            .with_error_message(message(CLUSTER_DENIED))
                    })
                    .collect();
                return Gate::Answer(ResponseKind::AlterUserScramCredentials(
                    AlterUserScramCredentialsResponse::default().with_results(results),
                ));
            }
            Gate::Run(RequestKind::AlterUserScramCredentials(r), None)
        }
        RequestKind::DescribeClientQuotas(r) => {
            if !who.may_cluster(DescribeConfigs) {
                return Gate::Answer(ResponseKind::DescribeClientQuotas(
                    DescribeClientQuotasResponse::default()
                        .with_error_code(CLUSTER_DENIED.code())
                        .with_error_message(message(CLUSTER_DENIED))
                        .with_entries(None),
                ));
            }
            Gate::Run(RequestKind::DescribeClientQuotas(r), None)
        }
        RequestKind::AlterClientQuotas(r) => {
            if !who.may_cluster(AlterConfigs) {
                let entries = r
                    .entries
                    .iter()
                    .map(|e| {
                        alter_client_quotas_response::EntryData::default()
                            .with_error_code(CLUSTER_DENIED.code())
                            .with_error_message(message(CLUSTER_DENIED))
                            .with_entity(
                                e.entity
                                    .iter()
                                    .map(|x| {
                                        alter_client_quotas_response::EntityData::default()
                                            .with_entity_type(x.entity_type.clone())
                                            .with_entity_name(x.entity_name.clone())
                                    })
                                    .collect(),
                            )
                    })
                    .collect();
                return Gate::Answer(ResponseKind::AlterClientQuotas(
                    AlterClientQuotasResponse::default().with_entries(entries),
                ));
            }
            Gate::Run(RequestKind::AlterClientQuotas(r), None)
        }
        other => groups_and_transactions(who, other, version),
    }
}

fn produce(who: Who, mut r: ProduceRequest) -> Gate {
    if let Some(txn) = &r.transactional_id {
        if !who.may(Write, TransactionalId, txn) {
            let topics = r
                .topic_data
                .iter()
                .map(|t| produce_refusal(t, TXN_DENIED))
                .collect();
            return Gate::Answer(ResponseKind::Produce(
                ProduceResponse::default().with_responses(topics),
            ));
        }
    }
    let (ok, denied): (Vec<_>, Vec<_>) = r
        .topic_data
        .into_iter()
        .partition(|t| who.may_topic(Write, &t.name, &t.topic_id));
    r.topic_data = ok;
    if denied.is_empty() {
        return Gate::Run(RequestKind::Produce(r), None);
    }
    let acks_zero = r.acks == 0;
    let mut refusals: Vec<_> = denied
        .iter()
        .map(|t| produce_refusal(t, TOPIC_DENIED))
        .collect();
    Gate::Run(
        RequestKind::Produce(r),
        Some(Box::new(move |outcome| match outcome {
            // acks=0: closing the connection is the only way to tell the producer.
            _ if acks_zero => Outcome::Close("acks=0 produce to a topic without WRITE permission"),
            Outcome::Respond(resp) => match *resp {
                ResponseKind::Produce(mut p) => {
                    p.responses.append(&mut refusals);
                    Outcome::Respond(Box::new(ResponseKind::Produce(p)))
                }
                other => Outcome::Respond(Box::new(other)),
            },
            other => other,
        })),
    )
}

fn produce_refusal(
    t: &produce_request::TopicProduceData,
    code: ResponseError,
) -> produce_response::TopicProduceResponse {
    produce_response::TopicProduceResponse::default()
        .with_name(t.name.clone())
        .with_topic_id(t.topic_id)
        .with_partition_responses(
            t.partition_data
                .iter()
                .map(|p| {
                    produce_response::PartitionProduceResponse::default()
                        .with_index(p.index)
                        .with_error_code(code.code())
                        .with_base_offset(-1)
                        .with_log_append_time_ms(-1)
                        .with_log_start_offset(-1)
                })
                .collect(),
        )
}

fn fetch(who: Who, mut r: FetchRequest) -> Gate {
    let from_follower = r.replica_id.0 >= 0 || r.replica_state.replica_id.0 >= 0;
    let follower_ok = !from_follower || who.may_cluster(ClusterAction);
    let (ok, denied): (Vec<_>, Vec<_>) = r
        .topics
        .into_iter()
        .partition(|t| follower_ok && who.may_topic(Read, &t.topic, &t.topic_id));
    r.topics = ok;
    let mut refusals: Vec<_> = denied
        .iter()
        .map(|t| {
            let parts = t.partitions.iter().map(|p| p.partition).collect();
            fetch_refusal(t.topic.clone(), t.topic_id, parts)
        })
        .collect();
    Gate::Run(
        RequestKind::Fetch(r),
        finish(move |resp| match resp {
            ResponseKind::Fetch(mut f) => {
                // Partitions already in a fetch session are not in the request: check every
                // topic of the response again, so a revoked ACL takes effect at once.
                for t in f.responses.iter_mut() {
                    if !(follower_ok && who.may_topic(Read, &t.topic, &t.topic_id)) {
                        let parts = t.partitions.iter().map(|p| p.partition_index).collect();
                        *t = fetch_refusal(t.topic.clone(), t.topic_id, parts);
                    }
                }
                f.responses.append(&mut refusals);
                ResponseKind::Fetch(f)
            }
            other => other,
        }),
    )
}

fn fetch_refusal(
    topic: TopicName,
    topic_id: uuid::Uuid,
    partitions: Vec<i32>,
) -> fetch_response::FetchableTopicResponse {
    fetch_response::FetchableTopicResponse::default()
        .with_topic(topic)
        .with_topic_id(topic_id)
        .with_partitions(
            partitions
                .into_iter()
                .map(|p| {
                    fetch_response::PartitionData::default()
                        .with_partition_index(p)
                        .with_error_code(TOPIC_DENIED.code())
                        .with_high_watermark(-1)
                        .with_last_stable_offset(-1)
                        .with_log_start_offset(-1)
                })
                .collect(),
        )
}

fn list_offsets_refusal(
    t: &list_offsets_request::ListOffsetsTopic,
    code: ResponseError,
) -> list_offsets_response::ListOffsetsTopicResponse {
    list_offsets_response::ListOffsetsTopicResponse::default()
        .with_name(t.name.clone())
        .with_partitions(
            t.partitions
                .iter()
                .map(|p| {
                    list_offsets_response::ListOffsetsPartitionResponse::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code.code())
                        .with_timestamp(-1)
                        .with_offset(-1)
                        .with_leader_epoch(-1)
                })
                .collect(),
        )
}

/// Splits config resources into those the principal may use with `op` and those refused,
/// each with its error code.
fn split_configs<R>(
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

/// Metadata: explicitly requested topics the principal may not describe are refused;
/// a listing of all topics leaves them out; auto-creation needs CREATE.
fn metadata(who: Who, mut r: MetadataRequest) -> Gate {
    let auto_create = r.allow_auto_topic_creation && who.broker.config.auto_create_topics_enable;
    let mut refusals: Vec<metadata_response::MetadataResponseTopic> = Vec::new();
    if let Some(topics) = r.topics.take() {
        let mut kept = Vec::new();
        for t in topics {
            let name = match &t.name {
                Some(n) if !n.is_empty() => Some(n.to_string()),
                _ => who.topic_name("", &t.topic_id),
            };
            let Some(name) = name else {
                kept.push(t);
                continue;
            };
            let exists = who.broker.topic(&name).is_some();
            let may_describe = who.may(Describe, Topic, &name);
            let may_create = || who.may_cluster(Create) || who.may(Create, Topic, &name);
            if may_describe && (exists || !auto_create || may_create()) {
                kept.push(t);
            } else {
                refusals.push(
                    metadata_response::MetadataResponseTopic::default()
                        .with_error_code(TOPIC_DENIED.code())
                        .with_name(t.name.clone())
                        .with_topic_id(if may_describe {
                            t.topic_id
                        } else {
                            uuid::Uuid::nil()
                        })
                        .with_is_internal(crate::broker::is_internal_topic(&name))
                        .with_topic_authorized_operations(i32::MIN),
                );
            }
        }
        r.topics = Some(kept);
    }
    let listing_all = r.topics.is_none();
    let topic_ops = r.include_topic_authorized_operations;
    let cluster_ops = r.include_cluster_authorized_operations;
    Gate::Run(
        RequestKind::Metadata(r),
        finish(move |resp| match resp {
            ResponseKind::Metadata(mut m) => {
                if listing_all {
                    m.topics
                        .retain(|t| t.name.as_ref().is_none_or(|n| who.may(Describe, Topic, n)));
                }
                if topic_ops {
                    for t in m.topics.iter_mut().filter(|t| t.error_code == 0) {
                        if let Some(n) = &t.name {
                            t.topic_authorized_operations = who.operations(Topic, n);
                        }
                    }
                }
                if cluster_ops {
                    m.cluster_authorized_operations = who.operations(Cluster, CLUSTER_NAME);
                }
                m.topics.append(&mut refusals);
                ResponseKind::Metadata(m)
            }
            other => other,
        }),
    )
}

/// OffsetFetch: DESCRIBE on the group, then DESCRIBE on each topic (refused when named,
/// left out of an all-topics answer).
fn offset_fetch(who: Who, r: OffsetFetchRequest, version: i16) -> Gate {
    if version < 8 {
        if !who.may(Describe, Group, &r.group_id) {
            return Gate::Answer(ResponseKind::OffsetFetch(
                OffsetFetchResponse::default().with_error_code(GROUP_DENIED.code()),
            ));
        }
        let named = r.topics.is_some();
        return Gate::Run(
            RequestKind::OffsetFetch(r),
            finish(move |resp| match resp {
                ResponseKind::OffsetFetch(mut o) => {
                    o.topics
                        .retain(|t| named || who.may(Describe, Topic, &t.name));
                    for t in o.topics.iter_mut() {
                        if !who.may(Describe, Topic, &t.name) {
                            for p in t.partitions.iter_mut() {
                                p.error_code = TOPIC_DENIED.code();
                                p.committed_offset = -1;
                                p.metadata = Some(StrBytes::default());
                            }
                        }
                    }
                    ResponseKind::OffsetFetch(o)
                }
                other => other,
            }),
        );
    }
    let named: std::collections::HashMap<String, bool> = r
        .groups
        .iter()
        .map(|g| (g.group_id.to_string(), g.topics.is_some()))
        .collect();
    Gate::Run(
        RequestKind::OffsetFetch(r),
        finish(move |resp| match resp {
            ResponseKind::OffsetFetch(mut o) => {
                for g in o.groups.iter_mut() {
                    if !who.may(Describe, Group, &g.group_id) {
                        *g = offset_fetch_response::OffsetFetchResponseGroup::default()
                            .with_group_id(g.group_id.clone())
                            .with_error_code(GROUP_DENIED.code());
                        continue;
                    }
                    let named = named.get(g.group_id.as_str()).copied().unwrap_or(false);
                    g.topics
                        .retain(|t| named || who.may_topic(Describe, &t.name, &t.topic_id));
                    for t in g.topics.iter_mut() {
                        if !who.may_topic(Describe, &t.name, &t.topic_id) {
                            for p in t.partitions.iter_mut() {
                                p.error_code = TOPIC_DENIED.code();
                                p.committed_offset = -1;
                                p.metadata = Some(StrBytes::default());
                            }
                        }
                    }
                }
                ResponseKind::OffsetFetch(o)
            }
            other => other,
        }),
    )
}

fn groups_and_transactions(who: Who, body: RequestKind, version: i16) -> Gate {
    match body {
        RequestKind::JoinGroup(r) => {
            if !who.may(Read, Group, &r.group_id) {
                return Gate::Answer(ResponseKind::JoinGroup(
                    JoinGroupResponse::default()
                        .with_error_code(GROUP_DENIED.code())
                        .with_generation_id(-1),
                ));
            }
            Gate::Run(RequestKind::JoinGroup(r), None)
        }
        RequestKind::SyncGroup(r) => {
            if !who.may(Read, Group, &r.group_id) {
                return Gate::Answer(ResponseKind::SyncGroup(
                    SyncGroupResponse::default().with_error_code(GROUP_DENIED.code()),
                ));
            }
            Gate::Run(RequestKind::SyncGroup(r), None)
        }
        RequestKind::Heartbeat(r) => {
            if !who.may(Read, Group, &r.group_id) {
                return Gate::Answer(ResponseKind::Heartbeat(
                    HeartbeatResponse::default().with_error_code(GROUP_DENIED.code()),
                ));
            }
            Gate::Run(RequestKind::Heartbeat(r), None)
        }
        RequestKind::LeaveGroup(r) => {
            if !who.may(Read, Group, &r.group_id) {
                return Gate::Answer(ResponseKind::LeaveGroup(
                    LeaveGroupResponse::default().with_error_code(GROUP_DENIED.code()),
                ));
            }
            Gate::Run(RequestKind::LeaveGroup(r), None)
        }
        RequestKind::OffsetCommit(mut r) => {
            let refusal = |t: &offset_commit_request::OffsetCommitRequestTopic,
                           code: ResponseError| {
                offset_commit_response::OffsetCommitResponseTopic::default()
                    .with_name(t.name.clone())
                    .with_topic_id(t.topic_id)
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|p| {
                                offset_commit_response::OffsetCommitResponsePartition::default()
                                    .with_partition_index(p.partition_index)
                                    .with_error_code(code.code())
                            })
                            .collect(),
                    )
            };
            if !who.may(Read, Group, &r.group_id) {
                let topics = r.topics.iter().map(|t| refusal(t, GROUP_DENIED)).collect();
                return Gate::Answer(ResponseKind::OffsetCommit(
                    OffsetCommitResponse::default().with_topics(topics),
                ));
            }
            let (ok, denied): (Vec<_>, Vec<_>) = r
                .topics
                .into_iter()
                .partition(|t| who.may_topic(Read, &t.name, &t.topic_id));
            r.topics = ok;
            let refusals = denied.iter().map(|t| refusal(t, TOPIC_DENIED)).collect();
            run_and_extend(
                RequestKind::OffsetCommit(r),
                refusals,
                |resp, mut extra| match resp {
                    ResponseKind::OffsetCommit(mut o) => {
                        o.topics.append(&mut extra);
                        ResponseKind::OffsetCommit(o)
                    }
                    other => other,
                },
            )
        }
        RequestKind::OffsetFetch(r) => offset_fetch(who, r, version),
        RequestKind::DescribeGroups(r) => {
            let wants_ops = r.include_authorized_operations;
            Gate::Run(
                RequestKind::DescribeGroups(r),
                finish(move |resp| match resp {
                    ResponseKind::DescribeGroups(mut d) => {
                        for g in d.groups.iter_mut() {
                            if !who.may(Describe, Group, &g.group_id) {
                                *g = describe_groups_response::DescribedGroup::default()
                                    .with_group_id(g.group_id.clone())
                                    .with_error_code(GROUP_DENIED.code())
                                    .with_error_message(message(GROUP_DENIED));
                            } else if wants_ops {
                                g.authorized_operations = who.operations(Group, &g.group_id);
                            }
                        }
                        ResponseKind::DescribeGroups(d)
                    }
                    other => other,
                }),
            )
        }
        RequestKind::ConsumerGroupDescribe(r) => {
            let wants_ops = r.include_authorized_operations;
            Gate::Run(
                RequestKind::ConsumerGroupDescribe(r),
                finish(move |resp| match resp {
                    ResponseKind::ConsumerGroupDescribe(mut d) => {
                        for g in d.groups.iter_mut() {
                            if !who.may(Describe, Group, &g.group_id) {
                                *g = consumer_group_describe_response::DescribedGroup::default()
                                    .with_group_id(g.group_id.clone())
                                    .with_error_code(GROUP_DENIED.code())
                                    .with_error_message(message(GROUP_DENIED));
                            } else if wants_ops {
                                g.authorized_operations = who.operations(Group, &g.group_id);
                            }
                        }
                        ResponseKind::ConsumerGroupDescribe(d)
                    }
                    other => other,
                }),
            )
        }
        RequestKind::ListGroups(r) => {
            if who.may_cluster(Describe) {
                return Gate::Run(RequestKind::ListGroups(r), None);
            }
            Gate::Run(
                RequestKind::ListGroups(r),
                finish(move |resp| match resp {
                    ResponseKind::ListGroups(mut l) => {
                        l.groups.retain(|g| who.may(Describe, Group, &g.group_id));
                        ResponseKind::ListGroups(l)
                    }
                    other => other,
                }),
            )
        }
        RequestKind::DeleteGroups(mut r) => {
            let (ok, denied): (Vec<_>, Vec<_>) = r
                .groups_names
                .into_iter()
                .partition(|g| who.may(Delete, Group, g));
            r.groups_names = ok;
            let refusals = denied
                .into_iter()
                .map(|g| {
                    delete_groups_response::DeletableGroupResult::default()
                        .with_group_id(g)
                        .with_error_code(GROUP_DENIED.code())
                })
                .collect();
            run_and_extend(
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
        RequestKind::OffsetDelete(mut r) => {
            if !who.may(Delete, Group, &r.group_id) {
                return Gate::Answer(ResponseKind::OffsetDelete(
                    OffsetDeleteResponse::default().with_error_code(GROUP_DENIED.code()),
                ));
            }
            let (ok, denied): (Vec<_>, Vec<_>) = r
                .topics
                .into_iter()
                .partition(|t| who.may(Read, Topic, &t.name));
            r.topics = ok;
            let refusals = denied
                .iter()
                .map(|t| {
                    offset_delete_response::OffsetDeleteResponseTopic::default()
                        .with_name(t.name.clone())
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    offset_delete_response::OffsetDeleteResponsePartition::default()
                                        .with_partition_index(p.partition_index)
                                        .with_error_code(TOPIC_DENIED.code())
                                })
                                .collect(),
                        )
                })
                .collect();
            run_and_extend(
                RequestKind::OffsetDelete(r),
                refusals,
                |resp, mut extra| match resp {
                    ResponseKind::OffsetDelete(mut o) => {
                        o.topics.append(&mut extra);
                        ResponseKind::OffsetDelete(o)
                    }
                    other => other,
                },
            )
        }
        RequestKind::FindCoordinator(mut r) => {
            let (rt, code) = match r.key_type {
                1 => (TransactionalId, TXN_DENIED),
                _ => (Group, GROUP_DENIED),
            };
            if version < 4 {
                if !who.may(Describe, rt, &r.key) {
                    return Gate::Answer(ResponseKind::FindCoordinator(
                        FindCoordinatorResponse::default()
                            .with_error_code(code.code())
                            .with_error_message(message(code))
                            .with_node_id((-1).into())
                            .with_port(-1),
                    ));
                }
                return Gate::Run(RequestKind::FindCoordinator(r), None);
            }
            let (ok, denied): (Vec<_>, Vec<_>) = r
                .coordinator_keys
                .into_iter()
                .partition(|k| who.may(Describe, rt, k));
            r.coordinator_keys = ok;
            let refusals = denied
                .into_iter()
                .map(|k| {
                    find_coordinator_response::Coordinator::default()
                        .with_key(k)
                        .with_node_id((-1).into())
                        .with_port(-1)
                        .with_error_code(code.code())
                        .with_error_message(message(code))
                })
                .collect();
            run_and_extend(
                RequestKind::FindCoordinator(r),
                refusals,
                |resp, mut extra| match resp {
                    ResponseKind::FindCoordinator(mut f) => {
                        f.coordinators.append(&mut extra);
                        ResponseKind::FindCoordinator(f)
                    }
                    other => other,
                },
            )
        }
        RequestKind::ConsumerGroupHeartbeat(r) => {
            let refuse = |code: ResponseError, msg: String| {
                Gate::Answer(ResponseKind::ConsumerGroupHeartbeat(
                    ConsumerGroupHeartbeatResponse::default()
                        .with_error_code(code.code())
                        .with_error_message(Some(StrBytes::from_string(msg))),
                ))
            };
            if !who.may(Read, Group, &r.group_id) {
                return refuse(GROUP_DENIED, GROUP_DENIED.to_string());
            }
            let denied: Vec<String> = r
                .subscribed_topic_names
                .iter()
                .flatten()
                .filter(|t| !who.may(Describe, Topic, t))
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
        RequestKind::InitProducerId(r) => {
            let refusal = match &r.transactional_id {
                Some(txn) => (!who.may(Write, TransactionalId, txn)).then_some(TXN_DENIED),
                None => (!who.may_cluster(IdempotentWrite)
                    && !who.broker.authorizer.authorize_any(
                        &who.principal,
                        &who.host,
                        Write,
                        Topic,
                    ))
                .then_some(CLUSTER_DENIED),
            };
            match refusal {
                Some(code) => Gate::Answer(ResponseKind::InitProducerId(
                    InitProducerIdResponse::default()
                        .with_error_code(code.code())
                        .with_producer_id((-1).into())
                        .with_producer_epoch(-1),
                )),
                None => Gate::Run(RequestKind::InitProducerId(r), None),
            }
        }
        RequestKind::AddPartitionsToTxn(r) => add_partitions_to_txn(who, r),
        RequestKind::AddOffsetsToTxn(r) => {
            let code = if !who.may(Write, TransactionalId, &r.transactional_id) {
                Some(TXN_DENIED)
            } else if !who.may(Read, Group, &r.group_id) {
                Some(GROUP_DENIED)
            } else {
                None
            };
            match code {
                Some(code) => Gate::Answer(ResponseKind::AddOffsetsToTxn(
                    AddOffsetsToTxnResponse::default().with_error_code(code.code()),
                )),
                None => Gate::Run(RequestKind::AddOffsetsToTxn(r), None),
            }
        }
        RequestKind::TxnOffsetCommit(mut r) => {
            let refusal = |t: &txn_offset_commit_request::TxnOffsetCommitRequestTopic,
                           code: ResponseError| {
                txn_offset_commit_response::TxnOffsetCommitResponseTopic::default()
                    .with_name(t.name.clone())
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|p| {
                                txn_offset_commit_response::TxnOffsetCommitResponsePartition::default()
                                    .with_partition_index(p.partition_index)
                                    .with_error_code(code.code())
                            })
                            .collect(),
                    )
            };
            let whole = if !who.may(Write, TransactionalId, &r.transactional_id) {
                Some(TXN_DENIED)
            } else if !who.may(Read, Group, &r.group_id) {
                Some(GROUP_DENIED)
            } else {
                None
            };
            if let Some(code) = whole {
                let topics = r.topics.iter().map(|t| refusal(t, code)).collect();
                return Gate::Answer(ResponseKind::TxnOffsetCommit(
                    TxnOffsetCommitResponse::default().with_topics(topics),
                ));
            }
            let (ok, denied): (Vec<_>, Vec<_>) = r
                .topics
                .into_iter()
                .partition(|t| who.may(Read, Topic, &t.name));
            r.topics = ok;
            let refusals = denied.iter().map(|t| refusal(t, TOPIC_DENIED)).collect();
            run_and_extend(
                RequestKind::TxnOffsetCommit(r),
                refusals,
                |resp, mut extra| match resp {
                    ResponseKind::TxnOffsetCommit(mut t) => {
                        t.topics.append(&mut extra);
                        ResponseKind::TxnOffsetCommit(t)
                    }
                    other => other,
                },
            )
        }
        RequestKind::EndTxn(r) => {
            if !who.may(Write, TransactionalId, &r.transactional_id) {
                return Gate::Answer(ResponseKind::EndTxn(
                    EndTxnResponse::default()
                        .with_error_code(TXN_DENIED.code())
                        .with_producer_id((-1).into())
                        .with_producer_epoch(-1),
                ));
            }
            Gate::Run(RequestKind::EndTxn(r), None)
        }
        RequestKind::WriteTxnMarkers(r) => {
            if who.may_cluster(ClusterAction) {
                return Gate::Run(RequestKind::WriteTxnMarkers(r), None);
            }
            let markers = r
                .markers
                .iter()
                .map(|m| {
                    write_txn_markers_response::WritableTxnMarkerResult::default()
                        .with_producer_id(m.producer_id)
                        .with_topics(
                            m.topics
                                .iter()
                                .map(|t| {
                                    write_txn_markers_response::WritableTxnMarkerTopicResult::default()
                                        .with_name(t.name.clone())
                                        .with_partitions(
                                            t.partition_indexes
                                                .iter()
                                                .map(|p| {
                                                    write_txn_markers_response::WritableTxnMarkerPartitionResult::default()
                                                        .with_partition_index(*p)
                                                        .with_error_code(CLUSTER_DENIED.code())
                                                })
                                                .collect(),
                                        )
                                })
                                .collect(),
                        )
                })
                .collect();
            Gate::Answer(ResponseKind::WriteTxnMarkers(
                WriteTxnMarkersResponse::default().with_markers(markers),
            ))
        }
        RequestKind::DescribeTransactions(r) => Gate::Run(
            RequestKind::DescribeTransactions(r),
            finish(move |resp| match resp {
                ResponseKind::DescribeTransactions(mut d) => {
                    for t in d.transaction_states.iter_mut() {
                        if !who.may(Describe, TransactionalId, &t.transactional_id) {
                            *t = describe_transactions_response::TransactionState::default()
                                .with_transactional_id(t.transactional_id.clone())
                                .with_error_code(TXN_DENIED.code());
                        }
                    }
                    ResponseKind::DescribeTransactions(d)
                }
                other => other,
            }),
        ),
        RequestKind::ListTransactions(r) => Gate::Run(
            RequestKind::ListTransactions(r),
            finish(move |resp| match resp {
                ResponseKind::ListTransactions(mut l) => {
                    l.transaction_states
                        .retain(|t| who.may(Describe, TransactionalId, &t.transactional_id));
                    ResponseKind::ListTransactions(l)
                }
                other => other,
            }),
        ),
        RequestKind::DescribeProducers(mut r) => {
            let (ok, denied): (Vec<_>, Vec<_>) = r
                .topics
                .into_iter()
                .partition(|t| who.may(Read, Topic, &t.name));
            r.topics = ok;
            let refusals = denied
                .iter()
                .map(|t| {
                    describe_producers_response::TopicResponse::default()
                        .with_name(t.name.clone())
                        .with_partitions(
                            t.partition_indexes
                                .iter()
                                .map(|p| {
                                    describe_producers_response::PartitionResponse::default()
                                        .with_partition_index(*p)
                                        .with_error_code(TOPIC_DENIED.code())
                                        .with_error_message(message(TOPIC_DENIED))
                                })
                                .collect(),
                        )
                })
                .collect();
            run_and_extend(
                RequestKind::DescribeProducers(r),
                refusals,
                |resp, mut extra| match resp {
                    ResponseKind::DescribeProducers(mut d) => {
                        d.topics.append(&mut extra);
                        ResponseKind::DescribeProducers(d)
                    }
                    other => other,
                },
            )
        }
        other => Gate::Run(other, None),
    }
}

/// AddPartitionsToTxn: WRITE on the transactional id, then WRITE on every topic; if any topic
/// is refused, nothing is added (the others get OPERATION_NOT_ATTEMPTED), as in Kafka. v4+
/// batches from brokers need CLUSTER_ACTION.
fn add_partitions_to_txn(who: Who, r: AddPartitionsToTxnRequest) -> Gate {
    use add_partitions_to_txn_response::{
        AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
    };
    let results = |topics: &[add_partitions_to_txn_request::AddPartitionsToTxnTopic],
                   code_for: &dyn Fn(&str) -> ResponseError| {
        topics
            .iter()
            .map(|t| {
                let code = code_for(&t.name);
                AddPartitionsToTxnTopicResult::default()
                    .with_name(t.name.clone())
                    .with_results_by_partition(
                        t.partitions
                            .iter()
                            .map(|p| {
                                AddPartitionsToTxnPartitionResult::default()
                                    .with_partition_index(*p)
                                    .with_partition_error_code(code.code())
                            })
                            .collect(),
                    )
            })
            .collect::<Vec<_>>()
    };
    // The refusal for one transaction, if any: per-topic codes.
    let refusal = |txn: &str,
                   topics: &[add_partitions_to_txn_request::AddPartitionsToTxnTopic]|
     -> Option<Vec<AddPartitionsToTxnTopicResult>> {
        if !who.may(Write, TransactionalId, txn) {
            return Some(results(topics, &|_| TXN_DENIED));
        }
        let denied: Vec<&str> = topics
            .iter()
            .map(|t| t.name.as_str())
            .filter(|n| !who.may(Write, Topic, n))
            .collect();
        if denied.is_empty() {
            return None;
        }
        Some(results(topics, &|n| {
            if denied.contains(&n) {
                TOPIC_DENIED
            } else {
                ResponseError::OperationNotAttempted
            }
        }))
    };
    if r.transactions.is_empty() {
        // v0-3: one transaction from a client.
        return match refusal(&r.v3_and_below_transactional_id, &r.v3_and_below_topics) {
            Some(topics) => Gate::Answer(ResponseKind::AddPartitionsToTxn(
                AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(topics),
            )),
            None => Gate::Run(RequestKind::AddPartitionsToTxn(r), None),
        };
    }
    if !who.may_cluster(ClusterAction) {
        return Gate::Answer(ResponseKind::AddPartitionsToTxn(
            AddPartitionsToTxnResponse::default().with_error_code(CLUSTER_DENIED.code()),
        ));
    }
    Gate::Run(RequestKind::AddPartitionsToTxn(r), None)
}
