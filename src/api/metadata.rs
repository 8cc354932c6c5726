//! Metadata: brokers, cluster id, controller and topic/partition leadership, with topic
//! auto-creation per `auto.create.topics.enable`.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{
    BrokerId, MetadataRequest, MetadataResponse, RequestKind, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use uuid::Uuid;

use crate::api::gate::{self, Gate, Who, TOPIC_DENIED};
use crate::api::{blocking, errors, Api, Context, Outcome};
use crate::broker::leadership::ClusterBroker;
use crate::broker::{validate_topic_name, Broker, Partition, Topic};
use crate::security::acl::{Operation as Op, ResourceType as Res, CLUSTER_NAME};
use crate::services::Services;

/// Without an authorizer every operation is allowed: READ, WRITE, CREATE, DELETE, ALTER,
/// DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS as bits, as Kafka reports them.
pub const TOPIC_AUTHORIZED_OPERATIONS: i32 =
    (1 << 3) | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 10) | (1 << 11);
/// CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE,
/// CREATE_TOKENS, DESCRIBE_TOKENS.
pub const CLUSTER_AUTHORIZED_OPERATIONS: i32 = (1 << 5)
    | (1 << 7)
    | (1 << 8)
    | (1 << 9)
    | (1 << 10)
    | (1 << 11)
    | (1 << 12)
    | (1 << 13)
    | (1 << 14);

/// A partition's leader, leader epoch, replicas, ISR and offline replicas as clients are told
/// them (Metadata and DescribeTopicPartitions answer from the same view).
pub struct PartitionView {
    pub index: i32,
    /// `None` while no registered broker leads the partition.
    pub leader: Option<i32>,
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub offline_replicas: Vec<i32>,
}

/// The control plane's view of partition leadership, read once per response.
pub struct LeadershipView<'a> {
    broker: &'a Broker,
    cluster: Option<Arc<Vec<ClusterBroker>>>,
}

impl<'a> LeadershipView<'a> {
    pub fn new(broker: &'a Broker) -> Self {
        LeadershipView {
            broker,
            cluster: broker.replication().cluster(),
        }
    }

    pub fn partition(&self, topic: &str, p: &Partition) -> PartitionView {
        let node = self.broker.config.node_id;
        match self.broker.replication().leadership(topic, p.index) {
            // The control plane's view: leader, epoch, replicas, ISR; replicas on brokers
            // that are not registered are offline.
            Some(state) => {
                let registered = |id: &i32| {
                    self.cluster
                        .as_ref()
                        .is_none_or(|c| c.iter().any(|b| b.id == *id))
                };
                PartitionView {
                    index: p.index,
                    leader: state.leader.filter(registered),
                    leader_epoch: state.leader_epoch.0,
                    offline_replicas: state
                        .replicas
                        .iter()
                        .copied()
                        .filter(|id| !registered(id))
                        .collect(),
                    replicas: state.replicas,
                    isr: state.isr,
                }
            }
            // No state from the control plane yet: in cluster mode the partition has no leader
            // here yet (LEADER_NOT_AVAILABLE); a single node leads all its partitions.
            None => PartitionView {
                index: p.index,
                leader: self.broker.config.cluster.is_none().then_some(node),
                leader_epoch: p.leader_epoch().0,
                replicas: vec![node],
                isr: vec![node],
                offline_replicas: Vec::new(),
            },
        }
    }
}

/// Broker ids as the protocol carries them.
pub fn broker_ids(ids: &[i32]) -> Vec<BrokerId> {
    ids.iter().map(|&id| id.into()).collect()
}

pub fn topic_metadata(broker: &Broker, topic: &Topic, include_ops: bool) -> MetadataResponseTopic {
    let view = LeadershipView::new(broker);
    let partitions = topic
        .partitions
        .iter()
        .map(|p| {
            let v = view.partition(&topic.name, p);
            MetadataResponsePartition::default()
                .with_error_code(if v.leader.is_some() {
                    0
                } else {
                    ResponseError::LeaderNotAvailable.code()
                })
                .with_partition_index(v.index)
                .with_leader_id(v.leader.unwrap_or(-1).into())
                .with_leader_epoch(v.leader_epoch)
                .with_replica_nodes(broker_ids(&v.replicas))
                .with_isr_nodes(broker_ids(&v.isr))
                .with_offline_replicas(broker_ids(&v.offline_replicas))
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(TopicName(StrBytes::from_string(topic.name.clone()))))
        .with_topic_id(topic.id)
        .with_is_internal(topic.is_internal())
        .with_partitions(partitions)
        .with_topic_authorized_operations(if include_ops {
            TOPIC_AUTHORIZED_OPERATIONS
        } else {
            i32::MIN
        })
}

fn error_topic(name: Option<&str>, id: Uuid, error: ResponseError) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_error_code(error.code())
        .with_name(name.map(|n| TopicName(StrBytes::from_string(n.to_string()))))
        .with_topic_id(id)
        .with_topic_authorized_operations(i32::MIN)
}

pub async fn handle(
    broker: Arc<Broker>,
    req: MetadataRequest,
    version: i16,
    listener: usize,
) -> MetadataResponse {
    // Clients are told the address of the listener they came in on, as in Kafka.
    let brokers: Vec<MetadataResponseBroker> = broker
        .cluster_endpoints(listener)
        .into_iter()
        .map(|(id, host, port, rack)| {
            MetadataResponseBroker::default()
                .with_node_id(id.into())
                .with_host(StrBytes::from_string(host))
                .with_port(port as i32)
                .with_rack(rack.map(StrBytes::from_string))
        })
        .collect();
    let include_ops = req.include_topic_authorized_operations && version >= 8;
    // v0: an empty list means all topics; v1+: null means all topics.
    let all = match &req.topics {
        None => true,
        Some(t) => t.is_empty() && version == 0,
    };
    // Before v4 auto-creation was implied.
    let allow_auto_create =
        (version < 4 || req.allow_auto_topic_creation) && broker.config.auto_create_topics_enable;
    let mut topics = Vec::new();
    if all {
        for t in broker.topics() {
            topics.push(topic_metadata(&broker, &t, include_ops));
        }
    } else {
        for requested in req.topics.unwrap_or_default() {
            // A topic id names the topic (v10+), as in Kafka: the Java client sends an id
            // with an empty (not null) name, e.g. for the topics of a regex assignment.
            let name = requested
                .name
                .as_ref()
                .map(|n| n.0.as_str().to_string())
                .filter(|_| requested.topic_id.is_nil());
            match name {
                None => match broker.topic_by_id(&requested.topic_id) {
                    Some(t) => topics.push(topic_metadata(&broker, &t, include_ops)),
                    None => topics.push(error_topic(
                        None,
                        requested.topic_id,
                        ResponseError::UnknownTopicId,
                    )),
                },
                Some(name) => {
                    if let Some(t) = broker.topic(&name) {
                        topics.push(topic_metadata(&broker, &t, include_ops));
                        continue;
                    }
                    if validate_topic_name(&name).is_err() {
                        topics.push(error_topic(
                            Some(&name),
                            Uuid::nil(),
                            ResponseError::InvalidTopicException,
                        ));
                        continue;
                    }
                    if !allow_auto_create {
                        topics.push(error_topic(
                            Some(&name),
                            Uuid::nil(),
                            ResponseError::UnknownTopicOrPartition,
                        ));
                        continue;
                    }
                    let b = broker.clone();
                    let n = name.clone();
                    let created = blocking(move || {
                        let partitions = b.config.num_partitions;
                        let rf = b.config.default_replication_factor;
                        b.create_topic(&n, partitions, rf, BTreeMap::new())
                    })
                    .await;
                    match created {
                        Ok(Ok(t)) => topics.push(topic_metadata(&broker, &t, include_ops)),
                        // Lost a race with another creator: serve what exists.
                        Ok(Err(crate::broker::TopicError::AlreadyExists(_))) => {
                            match broker.topic(&name) {
                                Some(t) => topics.push(topic_metadata(&broker, &t, include_ops)),
                                None => topics.push(error_topic(
                                    Some(&name),
                                    Uuid::nil(),
                                    ResponseError::LeaderNotAvailable,
                                )),
                            }
                        }
                        Ok(Err(e)) => {
                            tracing::warn!(topic = %name, error = %e, "auto-creation failed");
                            topics.push(error_topic(
                                Some(&name),
                                Uuid::nil(),
                                errors::topic_error(&e),
                            ));
                        }
                        Err(_) => {
                            topics.push(error_topic(Some(&name), Uuid::nil(), errors::internal()))
                        }
                    }
                }
            }
        }
    }
    MetadataResponse::default()
        .with_brokers(brokers)
        .with_cluster_id(
            broker
                .cluster_id()
                .map(|id| StrBytes::from_string(id.to_string())),
        )
        .with_controller_id(broker.controller_id().into())
        .with_topics(topics)
        .with_cluster_authorized_operations(
            if req.include_cluster_authorized_operations && (8..=10).contains(&version) {
                CLUSTER_AUTHORIZED_OPERATIONS
            } else {
                i32::MIN
            },
        )
}

/// Metadata: explicitly requested topics the principal may not describe are refused;
/// a listing of all topics leaves them out; auto-creation needs CREATE.
pub struct Metadata;

impl Api for Metadata {
    type Request = MetadataRequest;

    fn authorize(who: &Who, mut r: MetadataRequest, _version: i16) -> Gate {
        let auto_create =
            r.allow_auto_topic_creation && who.broker.config.auto_create_topics_enable;
        let mut refusals: Vec<MetadataResponseTopic> = Vec::new();
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
                let may_describe = who.may(Op::Describe, Res::Topic, &name);
                let may_create =
                    || who.may_cluster(Op::Create) || who.may(Op::Create, Res::Topic, &name);
                if may_describe && (exists || !auto_create || may_create()) {
                    kept.push(t);
                } else {
                    refusals.push(
                        MetadataResponseTopic::default()
                            .with_error_code(TOPIC_DENIED.code())
                            .with_name(t.name.clone())
                            .with_topic_id(if may_describe {
                                t.topic_id
                            } else {
                                Uuid::nil()
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
        let who = who.clone();
        Gate::Run(
            RequestKind::Metadata(r),
            gate::finish(move |resp| match resp {
                ResponseKind::Metadata(mut m) => {
                    if listing_all {
                        m.topics.retain(|t| {
                            t.name
                                .as_ref()
                                .is_none_or(|n| who.may(Op::Describe, Res::Topic, n))
                        });
                    }
                    if topic_ops {
                        for t in m.topics.iter_mut().filter(|t| t.error_code == 0) {
                            if let Some(n) = &t.name {
                                t.topic_authorized_operations = who.operations(Res::Topic, n);
                            }
                        }
                    }
                    if cluster_ops {
                        m.cluster_authorized_operations =
                            who.operations(Res::Cluster, CLUSTER_NAME);
                    }
                    m.topics.append(&mut refusals);
                    ResponseKind::Metadata(m)
                }
                other => other,
            }),
        )
    }

    async fn handle(s: &Services, ctx: &Context, r: MetadataRequest, version: i16) -> Outcome {
        Outcome::respond(handle(s.broker.clone(), r, version, ctx.listener).await)
    }
}
