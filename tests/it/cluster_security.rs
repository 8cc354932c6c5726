//! Cluster mode: ACLs, SCRAM credentials, client quotas and delegation tokens changed through
//! any broker are committed to the quorum and enforced by every broker, including one that
//! was stopped while they changed; credentials added offline to a stopped broker's data dir
//! reach all brokers when it rejoins.

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::*;
use strata::security::acl::{AclBinding, Operation, PatternType, Permission, ResourceType};
use strata::security::scram::Mechanism;

use crate::cluster::{eventually, QuorumCluster};
use crate::harness::*;

const TOPIC_DENIED: i16 = 29;

fn deny_read(topic: &str) -> AclBinding {
    AclBinding {
        resource_type: ResourceType::Topic,
        resource_name: topic.to_string(),
        pattern_type: PatternType::Literal,
        principal: "User:ANONYMOUS".to_string(),
        host: "*".to_string(),
        operation: Operation::Read,
        permission: Permission::Deny,
    }
}

/// CreateAcls v3 of one ACL on `b`.
async fn create_acl(b: &TestBroker, acl: &AclBinding) -> i16 {
    let mut x = create_acls_request::AclCreation::default();
    x.resource_type = 2;
    x.resource_name = str_bytes(&acl.resource_name);
    x.resource_pattern_type = 3;
    x.principal = str_bytes(&acl.principal);
    x.host = str_bytes(&acl.host);
    x.operation = 3; // READ
    x.permission_type = 2; // DENY
    let mut req = CreateAclsRequest::default();
    req.creations = vec![x];
    b.client().await.call(3, &req).await.results[0].error_code
}

/// DeleteAcls v3 of every ACL on topic `topic`; returns how many were removed.
async fn delete_acls(b: &TestBroker, topic: &str) -> usize {
    let mut f = delete_acls_request::DeleteAclsFilter::default();
    f.resource_type_filter = 2;
    f.resource_name_filter = Some(str_bytes(topic));
    f.pattern_type_filter = 3;
    f.principal_filter = None;
    f.host_filter = None;
    f.operation = 1;
    f.permission_type = 1;
    let mut del = DeleteAclsRequest::default();
    del.filters = vec![f];
    let r = b.client().await.call(3, &del).await;
    assert_eq!(r.filter_results[0].error_code, 0);
    r.filter_results[0].matching_acls.len()
}

async fn fetch_error(b: &TestBroker, topic: &str) -> i16 {
    let mut c = b.client().await;
    fetch(&mut c, topic, 0, FetchArgs::default())
        .await
        .error_code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acls_credentials_and_quotas_reach_every_broker_through_the_quorum() {
    let mut c = QuorumCluster::start_with(&[
        (
            "authorizer.class.name",
            "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        ),
        // Replica fetchers connect as ANONYMOUS: no ACL on the cluster lets them.
        ("allow.everyone.if.no.acl.found", "true"),
    ])
    .await;
    let mut t = CreatableTopic::default();
    t.name = name("secret");
    t.num_partitions = 1;
    t.replication_factor = 3;
    let r = create_topics(&mut c.broker(1).client().await, vec![t])
        .await
        .remove(0);
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    for id in 1..=3 {
        let b = c.broker(id);
        eventually("the topic on every broker", || async move {
            b.broker().topic("secret").is_some()
        })
        .await;
    }

    // An ACL created through broker 1 is enforced by all three.
    let acl = deny_read("secret");
    assert_eq!(create_acl(c.broker(1), &acl).await, 0);
    assert_eq!(c.broker(1).broker().authorizer.acls(), vec![acl.clone()]);
    for id in 1..=3 {
        let b = c.broker(id);
        eventually("the ACL on every broker", || async move {
            b.broker().authorizer.acls() == vec![deny_read("secret")]
        })
        .await;
        assert_eq!(fetch_error(b, "secret").await, TOPIC_DENIED, "broker {id}");
    }

    // Broker 3 is down while the ACL is deleted through broker 2 and a credential and a
    // quota are set through broker 1; it learns all three when it returns.
    c.broker_mut(3).stop().await;
    assert_eq!(delete_acls(c.broker(2), "secret").await, 1);
    assert_eq!(
        crate::security::add_scram_user(
            &mut c.broker(1).client().await,
            "alice",
            "alice-pw",
            Mechanism::Sha256,
            4096
        )
        .await,
        0
    );
    let altered = crate::quotas::alter(
        &mut c.broker(1).client().await,
        vec![crate::quotas::entry(
            &[("user", Some("alice"))],
            vec![crate::quotas::set("producer_byte_rate", 1024.0)],
        )],
        false,
    )
    .await;
    assert_eq!(altered[0].0, 0, "{altered:?}");
    // `strata scram add` on the stopped broker's data dir: proposed when it rejoins.
    let mut pairs = std::collections::BTreeMap::new();
    pairs.insert(
        "log.dirs".to_string(),
        c.broker(3).dir.path().display().to_string(),
    );
    strata::broker::add_scram_credential_offline(
        &strata::config::BrokerConfig::build(&[pairs]).unwrap(),
        "offline",
        Mechanism::Sha512,
        strata::security::scram::credential_for_password(Mechanism::Sha512, "offline-pw", 4096),
    )
    .unwrap();
    c.broker_mut(3).resume().await;
    for id in 1..=3 {
        let b = c.broker(id);
        eventually(
            "the deletion, credentials and quota on every broker",
            || async move {
                let broker = b.broker();
                broker.authorizer.acls().is_empty()
                    && broker
                        .scram_credential("alice", Mechanism::Sha256)
                        .is_some()
                    && broker
                        .scram_credential("offline", Mechanism::Sha512)
                        .is_some()
                    && broker.quotas.records().len() == 1
            },
        )
        .await;
        assert_eq!(
            fetch_error(b, "secret").await,
            0,
            "broker {id} after the delete"
        );
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dynamic_broker_configs_reach_every_broker_through_the_quorum() {
    let c = QuorumCluster::start().await;
    let mut t = CreatableTopic::default();
    t.name = name("defaults");
    t.num_partitions = 1;
    t.replication_factor = 1;
    let r = create_topics(&mut c.broker(1).client().await, vec![t])
        .await
        .remove(0);
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    // Every broker names the active controller (the quorum's leader) in Metadata.
    let mut controllers = Vec::new();
    for id in 1..=3 {
        let mut req = MetadataRequest::default();
        req.topics = Some(vec![]);
        let m: MetadataResponse = c.broker(id).client().await.call(12, &req).await;
        controllers.push(m.controller_id.0);
    }
    let active = c
        .broker(1)
        .services()
        .cluster
        .as_ref()
        .unwrap()
        .active_controller();
    assert_eq!(controllers, vec![active.unwrap(); 3], "{controllers:?}");
    // DescribeQuorum on every broker (the others forward it to the leader): the leader, its
    // term and the three voters, each with a log end offset.
    for id in 1..=3 {
        let mut p = describe_quorum_request::PartitionData::default();
        p.partition_index = 0;
        let mut t = describe_quorum_request::TopicData::default();
        t.topic_name = name("__cluster_metadata");
        t.partitions = vec![p];
        let mut req = DescribeQuorumRequest::default();
        req.topics = vec![t];
        let r: DescribeQuorumResponse = c.broker(id).client().await.call(2, &req).await;
        assert_eq!(r.error_code, 0, "{r:?}");
        let p = &r.topics[0].partitions[0];
        assert_eq!(p.leader_id.0, active.unwrap());
        assert!(p.leader_epoch >= 1 && p.high_watermark > 0, "{p:?}");
        let mut voters: Vec<i32> = p.current_voters.iter().map(|v| v.replica_id.0).collect();
        voters.sort_unstable();
        assert_eq!(voters, vec![1, 2, 3]);
        assert!(
            p.current_voters.iter().all(|v| v.log_end_offset > 0),
            "{p:?}"
        );
        assert_eq!(r.nodes.len(), 3, "the voters' controller listeners");
    }
    // The cluster-wide default through broker 2, broker 3's own setting through broker 1.
    let b2 = c.broker(2).broker().clone();
    tokio::task::spawn_blocking(move || {
        b2.set_dynamic_broker_configs(
            "",
            [("log.retention.ms".to_string(), "123456".to_string())].into(),
        )
    })
    .await
    .unwrap()
    .expect("cluster default through the quorum");
    let b1 = c.broker(1).broker().clone();
    tokio::task::spawn_blocking(move || {
        b1.set_dynamic_broker_configs(
            "3",
            [("log.retention.ms".to_string(), "654321".to_string())].into(),
        )
    })
    .await
    .unwrap()
    .expect("broker 3's config through the quorum");
    for (id, expected) in [(1, 123456), (2, 123456), (3, 654321)] {
        let b = c.broker(id).broker().clone();
        eventually("the dynamic default in every broker's topic config", || {
            let b = b.clone();
            async move {
                b.dynamic_broker_configs("")
                    .get("log.retention.ms")
                    .map(String::as_str)
                    == Some("123456")
                    && b.topic("defaults")
                        .is_some_and(|t| t.config.retention_ms == expected)
            }
        })
        .await;
    }
    c.shutdown().await;
}

/// A delegation token created through one broker authenticates on every broker (each derives
/// its SCRAM credentials from the HMAC with the shared secret), including one that was down
/// when it was created; expired through another broker, it is gone everywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn delegation_tokens_reach_every_broker_through_the_quorum() {
    use strata::broker::TokenChange;
    use strata::security::delegation_token::{self as token, Principal};

    let mut c =
        QuorumCluster::start_with(&[("delegation.token.secret.key", "cluster-secret")]).await;
    let config = c
        .broker(1)
        .broker()
        .config
        .security
        .delegation_token
        .clone();
    let now = strata::broker::now_ms();
    let alice = Principal::new("User", "alice");
    let info = token::create(
        &config,
        now,
        "token-1".into(),
        alice.clone(),
        alice.clone(),
        vec![],
        -1,
    )
    .unwrap();
    c.broker_mut(3).stop().await;
    let b1 = c.broker(1).broker().clone();
    let put = info.clone();
    tokio::task::spawn_blocking(move || {
        b1.write_delegation_token(|_| Ok(((), TokenChange::Put(put))))
    })
    .await
    .unwrap()
    .unwrap();
    c.broker_mut(3).resume().await;
    let hmac = token::token_hmac("cluster-secret", "token-1");
    for id in 1..=3 {
        let b = c.broker(id);
        eventually("the token on every broker", || async move {
            b.broker()
                .scram_lookup("token-1", true, Mechanism::Sha512)
                .is_some_and(|f| f.authorization_id == "alice")
        })
        .await;
        assert_eq!(
            b.broker().delegation_tokens(),
            vec![(info.clone(), hmac.clone())],
            "broker {id}"
        );
    }
    // Expired at once through broker 2.
    let b2 = c.broker(2).broker().clone();
    tokio::task::spawn_blocking(move || {
        b2.write_delegation_token(|tokens| {
            let found = tokens.by_hmac(&hmac).map(|t| &t.info);
            let expiry = token::expire(&config, found, now, &alice, -1)?;
            assert!(matches!(expiry, token::Expiry::Removed { .. }));
            Ok(((), TokenChange::Remove("token-1".into())))
        })
    })
    .await
    .unwrap()
    .unwrap();
    for id in 1..=3 {
        let b = c.broker(id);
        eventually("the token gone from every broker", || async move {
            b.broker()
                .scram_lookup("token-1", true, Mechanism::Sha512)
                .is_none()
        })
        .await;
    }
    c.shutdown().await;
}
