//! Inter-broker traffic over TLS and SASL: the peer connection brokers use towards each
//! other verifies certificates (chain and host name) and authenticates with PLAIN and SCRAM,
//! re-authenticating within the session lifetime; a quorum whose inter-broker listener is
//! SASL_SSL with ACLs on replicates and commits transactions over it; a broker with a wrong
//! password or without CLUSTER_ACTION does not replicate and leaves the ISR.

use std::time::Duration;

use kafka_protocol::messages::create_topics_request::{
    CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig,
};
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, MetadataRequest};
use strata::config::{InterBrokerSecurity, InterBrokerTls, SaslCredentials, SecurityProtocol};
use strata::peer::{PeerConnection, PeerError, PeerSecurity};
use strata::security::scram::Mechanism;

use crate::cluster::{eventually, QuorumCluster};
use crate::harness::*;
use crate::security::add_scram_user;
use crate::transactions::{add_partitions, produce_txn, txn_batch};

const STANDARD_AUTHORIZER: &str = "org.apache.kafka.metadata.authorizer.StandardAuthorizer";
const TIMEOUT: Duration = Duration::from_secs(10);

fn cert(name: &str) -> String {
    format!("{}/tests/it/certs/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn read(name: &str) -> String {
    std::fs::read_to_string(cert(name)).expect("test certificate")
}

/// A client side like a broker's: TLS trusting `truststore` (with the broker keystore as
/// client certificate) and/or SASL credentials.
fn security(tls: Option<(&str, bool)>, sasl: Option<(&str, &str, &str)>) -> PeerSecurity {
    let cfg = InterBrokerSecurity {
        listener: "TEST".into(),
        protocol: SecurityProtocol::SaslSsl,
        tls: tls.map(|(truststore, verify_hostname)| InterBrokerTls {
            cert_chain_pem: Some(read("broker.pem")),
            key_pem: Some(read("broker.pem")),
            truststore_pem: read(truststore),
            verify_hostname,
        }),
        sasl: sasl.map(|(mechanism, username, password)| SaslCredentials {
            mechanism: mechanism.into(),
            username: username.into(),
            password: password.into(),
        }),
    };
    PeerSecurity::new(&cfg).expect("usable test keys")
}

async fn connect(port: u16, s: &PeerSecurity) -> Result<PeerConnection, PeerError> {
    PeerConnection::connect("127.0.0.1", port, "it-peer".into(), s, TIMEOUT).await
}

/// Metadata over the connection works (the listener served it: authenticated).
async fn metadata_ok(c: &mut PeerConnection) {
    let m = c
        .call(12, &MetadataRequest::default(), TIMEOUT)
        .await
        .expect("Metadata over the authenticated connection");
    assert_eq!(m.brokers.len(), 1);
}

fn auth_error(r: Result<PeerConnection, PeerError>) -> String {
    match r {
        Err(e @ PeerError::Authentication { .. }) => e.to_string(),
        Err(e) => panic!("expected an authentication error, got {e}"),
        Ok(_) => panic!("expected an authentication error, connected"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_connections_verify_certificates_and_authenticate_with_plain_and_scram() {
    let keystore = cert("broker.pem");
    let other = cert("other-host.pem");
    let truststore = cert("ca.pem");
    let b = TestBroker::start_with(&[
        (
            "listeners",
            "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,SSL://127.0.0.1:0",
        ),
        ("ssl.keystore.type", "PEM"),
        ("ssl.keystore.location", keystore.as_str()),
        ("ssl.truststore.location", truststore.as_str()),
        ("listener.name.sasl_ssl.ssl.client.auth", "required"),
        // The SSL listener presents a certificate for another host name.
        ("listener.name.ssl.ssl.keystore.location", other.as_str()),
        (
            "sasl.enabled.mechanisms",
            "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        ),
        (
            "listener.name.sasl_ssl.plain.sasl.jaas.config",
            r#"org.apache.kafka.common.security.plain.PlainLoginModule required user_broker="broker-pw";"#,
        ),
        ("connections.max.reauth.ms", "1000"),
    ])
    .await;
    let sasl_ssl = b.broker().config.listeners[1].advertised_port;
    let ssl = b.broker().config.listeners[2].advertised_port;
    let mut admin = b.client().await;
    for m in [Mechanism::Sha256, Mechanism::Sha512] {
        assert_eq!(
            add_scram_user(&mut admin, "broker", "scram-pw", m, 4096).await,
            0
        );
    }

    // PLAIN over TLS (with a client certificate, as the listener requires one).
    let tls = Some(("ca.pem", true));
    let mut c = connect(
        sasl_ssl,
        &security(tls, Some(("PLAIN", "broker", "broker-pw"))),
    )
    .await
    .expect("PLAIN over TLS");
    metadata_ok(&mut c).await;
    // Past the session lifetime the server closes a connection that has not
    // re-authenticated; this one re-authenticates before it and keeps working.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(700)).await;
        metadata_ok(&mut c).await;
    }
    let e = auth_error(connect(sasl_ssl, &security(tls, Some(("PLAIN", "broker", "wrong")))).await);
    assert!(e.contains("SaslAuthenticationFailed"), "{e}");
    assert!(e.contains("Invalid username or password"), "{e}");

    // SCRAM, both digests, with the server's signature checked.
    for m in ["SCRAM-SHA-256", "SCRAM-SHA-512"] {
        let mut c = connect(sasl_ssl, &security(tls, Some((m, "broker", "scram-pw"))))
            .await
            .unwrap_or_else(|e| panic!("{m}: {e}"));
        metadata_ok(&mut c).await;
        tokio::time::sleep(Duration::from_millis(1100)).await;
        metadata_ok(&mut c).await;
        let e = auth_error(connect(sasl_ssl, &security(tls, Some((m, "broker", "nope")))).await);
        assert!(e.contains("SaslAuthenticationFailed"), "{m}: {e}");
    }

    // Host names: other-host.pem names other.example, not 127.0.0.1.
    let e = auth_error(connect(ssl, &security(Some(("ca.pem", true)), None)).await);
    assert!(e.contains("TLS handshake"), "{e}");
    // ssl.endpoint.identification.algorithm= (empty): the name is not checked...
    let mut c = connect(ssl, &security(Some(("ca.pem", false)), None))
        .await
        .expect("no host-name check");
    metadata_ok(&mut c).await;
    // ... but the chain still is.
    auth_error(connect(ssl, &security(Some(("untrusted-ca.pem", false)), None)).await);
    b.shutdown().await;
}

/// Settings of a quorum whose inter-broker listener is SASL_SSL (mutual TLS + PLAIN) and
/// enforces ACLs, with `User:broker` a super user as Kafka's usual setup has it. Test clients
/// use the PLAINTEXT listener as `User:ANONYMOUS`, also a super user.
fn secure_settings(keystore: &str, truststore: &str) -> Vec<(String, String)> {
    [
        ("security.inter.broker.protocol", "SASL_SSL"),
        ("ssl.keystore.type", "PEM"),
        ("ssl.keystore.location", keystore),
        ("ssl.truststore.type", "PEM"),
        ("ssl.truststore.location", truststore),
        ("listener.name.sasl_ssl.ssl.client.auth", "required"),
        ("sasl.enabled.mechanisms", "PLAIN"),
        ("authorizer.class.name", STANDARD_AUTHORIZER),
        ("super.users", "User:broker;User:ANONYMOUS"),
        ("connections.max.reauth.ms", "3000"),
        ("replica.lag.time.max.ms", "3000"),
        ("transaction.state.log.num.partitions", "3"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// The listener's JAAS: its users, and this broker's own credentials.
fn jaas(username: &str, password: &str) -> (String, String) {
    (
        "listener.name.sasl_ssl.plain.sasl.jaas.config".into(),
        format!(
            r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="{username}" password="{password}" user_broker="broker-pw" user_intruder="intruder-pw";"#
        ),
    )
}

async fn start_secure(credentials: impl Fn(i32) -> (&'static str, &'static str)) -> QuorumCluster {
    let keystore = cert("broker.pem");
    let truststore = cert("ca.pem");
    let settings = secure_settings(&keystore, &truststore);
    let extra: Vec<(&str, &str)> = settings
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let c = QuorumCluster::start_custom("SASL_SSL://127.0.0.1:0", &extra, |id| {
        let (u, p) = credentials(id);
        vec![jaas(u, p)]
    })
    .await;
    let b = c.broker(1);
    eventually("three unfenced brokers", || async move {
        b.services()
            .cluster
            .as_ref()
            .map(|c| strata::controller::admin::unfenced_brokers(c))
            == Some(3)
    })
    .await;
    c
}

/// A topic with one partition per `replicas` list (the first replica leads it).
async fn create_assigned(
    b: &TestBroker,
    topic: &str,
    replicas: &[[i32; 3]],
    configs: &[(&str, &str)],
) {
    let mut t = CreatableTopic::default();
    t.name = name(topic);
    t.num_partitions = -1;
    t.replication_factor = -1;
    t.assignments = replicas
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut a = CreatableReplicaAssignment::default();
            a.partition_index = i as i32;
            a.broker_ids = r.iter().map(|id| BrokerId(*id)).collect();
            a
        })
        .collect();
    t.configs = configs
        .iter()
        .map(|(k, v)| {
            let mut c = CreatableTopicConfig::default();
            c.name = str_bytes(k);
            c.value = Some(str_bytes(v));
            c
        })
        .collect();
    let r = create_topics(&mut b.client().await, vec![t])
        .await
        .remove(0);
    assert_eq!(r.error_code, 0, "create {topic}: {:?}", r.error_message);
}

/// Partition `p` of `topic` on broker `b`: (log end offset, last stable offset, ISR).
fn local(b: &TestBroker, topic: &str, p: usize) -> Option<(i64, i64, Vec<i32>)> {
    let t = b.broker().topic(topic)?;
    let part = t.partitions.get(p)?;
    let o = part.offsets();
    let mut isr = part.replica_set().isr;
    isr.sort_unstable();
    Some((o.log_end_offset.0, o.last_stable_offset.0, isr))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_quorum_replicates_and_commits_transactions_over_a_sasl_ssl_inter_broker_listener() {
    let c = start_secure(|_| ("broker", "broker-pw")).await;
    // Partition p is led by broker p + 1; acks=all needs all three replicas.
    let topic = "secure";
    create_assigned(
        c.broker(1),
        topic,
        &[[1, 2, 3], [2, 3, 1], [3, 1, 2]],
        &[("min.insync.replicas", "3")],
    )
    .await;
    for p in 0..3usize {
        let leader = c.broker(p as i32 + 1);
        eventually("the leader with a full ISR", || async move {
            local(leader, topic, p).is_some_and(|(_, _, isr)| isr == vec![1, 2, 3])
                && leader
                    .broker()
                    .topic(topic)
                    .is_some_and(|t| t.partitions[p].replica_set().leader == Some(p as i32 + 1))
        })
        .await;
        let r = produce_acks(&mut leader.client().await, topic, p as i32, batch(5), -1).await;
        assert_eq!(r.error_code, 0, "acks=all to partition {p}: {r:?}");
    }
    // Every follower holds the records: fetched over the SASL_SSL listener.
    for id in 1..=3 {
        let b = c.broker(id);
        eventually("every replica holds the records", || async move {
            (0..3).all(|p| local(b, topic, p).is_some_and(|(end, _, _)| end == 5))
        })
        .await;
    }
    // Past several session lifetimes (3 s) the followers are still in the ISR and replicate.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let r = produce_acks(&mut c.broker(1).client().await, topic, 0, batch(5), -1).await;
    assert_eq!(r.error_code, 0, "acks=all after re-authentication: {r:?}");

    // A transaction across partitions led by the three brokers: the coordinator sends the
    // markers to the other leaders, and they verify the transaction with it, over SASL_SSL.
    let id = "secure-txn";
    let mut fc = FindCoordinatorRequest::default();
    fc.key_type = 1;
    fc.coordinator_keys = vec![str_bytes(id)];
    let mut admin = c.broker(1).client().await;
    let mut coordinator = -1;
    for _ in 0..400 {
        let f = admin.call(4, &fc).await;
        if f.coordinators[0].error_code == 0 {
            coordinator = f.coordinators[0].node_id.0;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(coordinator > 0, "a transaction coordinator");
    let mut tc = c.broker(coordinator).client().await;
    let producer = {
        let mut attempt = 0;
        loop {
            let r = crate::transactions::try_init(&mut tc, id, 60_000, None).await;
            if r.error_code == 0 {
                break (r.producer_id.0, r.producer_epoch);
            }
            attempt += 1;
            assert!(attempt < 400, "InitProducerId: {r:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    assert_eq!(
        add_partitions(&mut tc, id, producer, topic, &[0, 1, 2]).await,
        vec![0, 0, 0]
    );
    let ends: Vec<i64> = (0..3)
        .map(|p| local(c.broker(p as i32 + 1), topic, p).unwrap().0)
        .collect();
    for p in 0..3 {
        let mut lc = c.broker(p + 1).client().await;
        let r = produce_txn(&mut lc, id, topic, p, txn_batch(2, producer, 0)).await;
        assert_eq!(
            r.error_code, 0,
            "transactional produce to partition {p}: {r:?}"
        );
    }
    let e = crate::transactions::end_txn(&mut tc, id, producer, true).await;
    assert_eq!(e, 0, "EndTxn commit");
    // Each partition: 2 records and a COMMIT marker, stable, on every replica.
    for id in 1..=3 {
        let b = c.broker(id);
        let ends = ends.clone();
        eventually("the commit markers on every replica", || {
            let ends = ends.clone();
            async move {
                (0..3).all(|p| local(b, topic, p).is_some_and(|(end, _, _)| end == ends[p] + 3))
            }
        })
        .await;
    }
    for (p, end) in ends.iter().enumerate() {
        let leader = c.broker(p as i32 + 1);
        let end = end + 3;
        eventually(
            "the leader's last stable offset past the marker",
            || async move { local(leader, topic, p).is_some_and(|(_, lso, _)| lso == end) },
        )
        .await;
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn brokers_with_a_wrong_password_or_without_cluster_action_do_not_replicate() {
    // Broker 2's password is wrong; broker 3 authenticates as a user that is not a super
    // user and has no CLUSTER_ACTION ACL.
    let _ = tracing_subscriber::fmt()
        .with_env_filter("strata::replication=info")
        .with_test_writer()
        .try_init();
    let c = start_secure(|id| match id {
        2 => ("broker", "not-the-password"),
        3 => ("intruder", "intruder-pw"),
        _ => ("broker", "broker-pw"),
    })
    .await;
    let topic = "guarded";
    create_assigned(c.broker(1), topic, &[[1, 2, 3]], &[]).await;
    let leader = c.broker(1);
    // The leader drops both from the ISR (replica.lag.time.max.ms) instead of waiting.
    eventually("the ISR shrinks to the leader", || async move {
        leader
            .broker()
            .topic(topic)
            .is_some_and(|t| t.partitions[0].replica_set().leader == Some(1))
            && local(leader, topic, 0).is_some_and(|(_, _, isr)| isr == vec![1])
    })
    .await;
    let r = produce_acks(&mut leader.client().await, topic, 0, batch(5), -1).await;
    assert_eq!(r.error_code, 0, "acks=all with the ISR {{1}}: {r:?}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(local(leader, topic, 0).unwrap().0, 5);
    for id in [2, 3] {
        assert_eq!(
            local(c.broker(id), topic, 0).map(|(end, _, _)| end),
            Some(0),
            "broker {id} replicated nothing"
        );
    }
    // The leader counts the refused authentications (the fetcher logs them as errors).
    let (_, metrics) = crate::http::http_get(leader.admin_addr, "/metrics").await;
    assert!(
        metrics.contains(
            "strata_request_errors_total{api=\"SaslAuthenticate\",error=\"SaslAuthenticationFailed\"}"
        ),
        "{metrics}"
    );
    c.shutdown().await;
}
