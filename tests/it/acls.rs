//! ACL enforcement over the wire protocol: the error code each API gives a principal without
//! the permission Kafka requires, what listings leave out, and the ACL APIs' own answers.
//! The connection's principal is `User:ANONYMOUS` (PLAINTEXT); ACLs are planted through the
//! broker's API, as CreateAcls from an administrator would.

use std::time::Duration;

use kafka_protocol::messages::*;
use strata::security::acl::{
    AclBinding, Operation, PatternType, Permission, ResourceType, CLUSTER_NAME,
};

use crate::harness::*;

const AUTHORIZER: [(&str, &str); 2] = [
    (
        "authorizer.class.name",
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    ),
    ("super.users", "User:admin"),
];

const TOPIC_DENIED: i16 = 29;
const GROUP_DENIED: i16 = 30;
const CLUSTER_DENIED: i16 = 31;
const TXN_DENIED: i16 = 53;

fn grant(b: &TestBroker, rt: ResourceType, name: &str, op: Operation) {
    let acl = AclBinding {
        resource_type: rt,
        resource_name: name.to_string(),
        pattern_type: PatternType::Literal,
        principal: "User:ANONYMOUS".to_string(),
        host: "*".to_string(),
        operation: op,
        permission: Permission::Allow,
    };
    b.broker().create_acls(&[acl]).expect("ACL stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_apis_answer_security_disabled_without_an_authorizer() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    let mut req = DescribeAclsRequest::default();
    req.resource_type_filter = 1;
    req.pattern_type_filter = 1;
    req.operation = 1;
    req.permission_type = 1;
    let r = c.call(3, &req).await;
    assert_eq!(r.error_code, 54, "SECURITY_DISABLED");
    assert_eq!(
        r.error_message.as_deref(),
        Some("No Authorizer is configured.")
    );
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_api_refuses_what_the_principal_may_not_do() {
    let b = TestBroker::start_with(&AUTHORIZER).await;
    let mut c = b.client().await;

    // CreateTopics needs CREATE on the cluster (or the topic).
    let r = create_topic_with(&mut c, "t", 1, &[]).await;
    assert_eq!(r.error_code, TOPIC_DENIED);
    grant(&b, ResourceType::Cluster, CLUSTER_NAME, Operation::Create);
    create_topic(&mut c, "t", 1).await;

    // Without DESCRIBE, Metadata leaves the topic out of a listing and refuses it by name.
    let all = c.call(12, &MetadataRequest::default()).await;
    assert!(all.topics.is_empty(), "{:?}", all.topics);
    let mut by_name = MetadataRequest::default();
    let mut t = metadata_request::MetadataRequestTopic::default();
    t.name = Some(name("t"));
    by_name.topics = Some(vec![t]);
    let r = c.call(12, &by_name).await;
    assert_eq!(r.topics[0].error_code, TOPIC_DENIED);
    assert!(r.topics[0].partitions.is_empty());

    // Produce needs WRITE; with acks=0 the connection is closed instead.
    let p = produce(&mut c, "t", 0, batch(3)).await;
    assert_eq!(p.error_code, TOPIC_DENIED);
    let mut c0 = b.client().await;
    c0.send(9, &produce_request("t", 0, batch(1), 0)).await;
    assert!(c0.is_closed_by_peer(Duration::from_secs(2)).await);
    // Fetch and ListOffsets need READ / DESCRIBE.
    let f = fetch(&mut c, "t", 0, FetchArgs::default()).await;
    assert_eq!(f.error_code, TOPIC_DENIED);
    let l = list_offset(&mut c, "t", 0, -1).await;
    assert_eq!(l.error_code, TOPIC_DENIED);
    // DeleteTopics needs DELETE; DescribeConfigs DESCRIBE_CONFIGS (CLUSTER for brokers).
    let mut d = DeleteTopicsRequest::default();
    d.topic_names = vec![name("t")];
    d.timeout_ms = 5000;
    let r = c.call(5, &d).await;
    assert_eq!(r.responses[0].error_code, TOPIC_DENIED);
    let mut dc = DescribeConfigsRequest::default();
    for (rt, n) in [(2, "t"), (4, "1")] {
        let mut res = describe_configs_request::DescribeConfigsResource::default();
        res.resource_type = rt;
        res.resource_name = str_bytes(n);
        dc.resources.push(res);
    }
    let r = c.call(4, &dc).await;
    let codes: Vec<(i8, i16)> = r
        .results
        .iter()
        .map(|x| (x.resource_type, x.error_code))
        .collect();
    assert!(
        codes.contains(&(2, TOPIC_DENIED)) && codes.contains(&(4, CLUSTER_DENIED)),
        "{codes:?}"
    );

    // With WRITE the same produce succeeds; READ is still missing for fetch.
    grant(&b, ResourceType::Topic, "t", Operation::Write);
    assert_eq!(produce(&mut c, "t", 0, batch(3)).await.error_code, 0);
    assert_eq!(
        fetch(&mut c, "t", 0, FetchArgs::default()).await.error_code,
        TOPIC_DENIED
    );

    // Groups: FindCoordinator needs DESCRIBE, JoinGroup READ.
    let mut fc = FindCoordinatorRequest::default();
    fc.key_type = 0;
    fc.coordinator_keys = vec![str_bytes("g")];
    let r = c.call(4, &fc).await;
    assert_eq!(r.coordinators[0].error_code, GROUP_DENIED);
    let mut hb = HeartbeatRequest::default();
    hb.group_id = str_bytes("g").into();
    assert_eq!(c.call(4, &hb).await.error_code, GROUP_DENIED);

    // Idempotence needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic (which
    // ANONYMOUS now has); a transactional id needs WRITE on it.
    init_producer_id(&mut c).await;
    let mut ip = InitProducerIdRequest::default();
    ip.transactional_id = Some(str_bytes("tx").into());
    ip.transaction_timeout_ms = 60_000;
    ip.producer_id = (-1).into();
    ip.producer_epoch = -1;
    assert_eq!(c.call(4, &ip).await.error_code, TXN_DENIED);

    // Cluster operations.
    let r = c.call(4, &DescribeLogDirsRequest::default()).await;
    assert_eq!(r.error_code, CLUSTER_DENIED);
    let mut acls = DescribeAclsRequest::default();
    acls.resource_type_filter = 1;
    acls.pattern_type_filter = 1;
    acls.operation = 1;
    acls.permission_type = 1;
    assert_eq!(c.call(3, &acls).await.error_code, CLUSTER_DENIED);
    let q = c.call(1, &DescribeClientQuotasRequest::default()).await;
    assert_eq!(q.error_code, CLUSTER_DENIED);
    // Reassignments: ALTER / DESCRIBE on CLUSTER.
    let mut part = alter_partition_reassignments_request::ReassignablePartition::default();
    part.replicas = Some(vec![BrokerId(1)]);
    let mut topic = alter_partition_reassignments_request::ReassignableTopic::default();
    topic.name = name("t");
    topic.partitions = vec![part];
    let mut alter = AlterPartitionReassignmentsRequest::default();
    alter.topics = vec![topic];
    let r = c.call(1, &alter).await;
    assert_eq!(r.error_code, CLUSTER_DENIED);
    assert_eq!(r.responses[0].partitions[0].error_code, CLUSTER_DENIED);
    let r = c
        .call(0, &ListPartitionReassignmentsRequest::default())
        .await;
    assert_eq!(r.error_code, CLUSTER_DENIED);
    // ElectLeaders needs ALTER on the cluster; a single node's one replica leads already.
    let mut el = ElectLeadersRequest::default();
    let mut tp = elect_leaders_request::TopicPartitions::default();
    tp.topic = name("t");
    tp.partitions = vec![0];
    el.topic_partitions = Some(vec![tp]);
    el.timeout_ms = 5000;
    let r = c.call(2, &el).await;
    assert_eq!(r.error_code, CLUSTER_DENIED);
    assert_eq!(
        r.replica_election_results[0].partition_result[0].error_code,
        CLUSTER_DENIED
    );
    grant(&b, ResourceType::Cluster, CLUSTER_NAME, Operation::Alter);
    let r = c.call(2, &el).await;
    assert_eq!(r.error_code, 0);
    let p = &r.replica_election_results[0].partition_result[0];
    assert_eq!(p.error_code, 84, "ELECTION_NOT_NEEDED: {p:?}");

    // The ACLs outlive a restart.
    let b = b.restart().await;
    let mut c = b.client().await;
    assert_eq!(produce(&mut c, "t", 0, batch(1)).await.error_code, 0);
    assert_eq!(b.broker().authorizer.acls().len(), 3);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_acls_validates_like_kafka_and_delete_returns_what_it_removed() {
    let b = TestBroker::start_with(&[AUTHORIZER[0], ("super.users", "User:ANONYMOUS")]).await;
    let mut c = b.client().await;
    let creation = |rt: i8, n: &str, pt: i8, principal: &str| {
        let mut x = create_acls_request::AclCreation::default();
        x.resource_type = rt;
        x.resource_name = str_bytes(n);
        x.resource_pattern_type = pt;
        x.principal = str_bytes(principal);
        x.host = str_bytes("*");
        x.operation = 3;
        x.permission_type = 3;
        x
    };
    let mut req = CreateAclsRequest::default();
    req.creations = vec![
        creation(2, "orders", 3, "User:bob"),
        creation(2, "logs-", 4, "User:bob"),
        creation(4, "not-kafka-cluster", 3, "User:bob"),
        creation(2, "x", 2, "User:bob"),
        creation(2, "x", 3, "bob"),
    ];
    let r = c.call(3, &req).await;
    let codes: Vec<i16> = r.results.iter().map(|x| x.error_code).collect();
    assert_eq!(
        codes,
        vec![0, 0, 42, 42, 42],
        "INVALID_REQUEST for the bad ones"
    );
    assert_eq!(
        r.results[2].error_message.as_deref(),
        Some("The only valid name for the CLUSTER resource is kafka-cluster")
    );
    assert_eq!(
        r.results[3].error_message.as_deref(),
        Some("Invalid patternType MATCH")
    );

    let mut del = DeleteAclsRequest::default();
    let mut f = delete_acls_request::DeleteAclsFilter::default();
    f.resource_type_filter = 2;
    f.resource_name_filter = Some(str_bytes("logs-app"));
    f.pattern_type_filter = 2; // MATCH: the prefixed ACL covers logs-app
    f.principal_filter = None;
    f.host_filter = None;
    f.operation = 1;
    f.permission_type = 1;
    del.filters = vec![f];
    let r = c.call(3, &del).await;
    let removed = &r.filter_results[0].matching_acls;
    assert_eq!(removed.len(), 1);
    assert_eq!(removed[0].resource_name.as_str(), "logs-");
    assert_eq!(removed[0].pattern_type, 4);
    assert_eq!(b.broker().authorizer.acls().len(), 1);
    b.shutdown().await;
}
