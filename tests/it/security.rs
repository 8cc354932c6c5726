//! SASL over the wire protocol: what a SASL listener accepts before authentication, PLAIN and
//! SCRAM exchanges with Kafka's error codes, SCRAM credential administration, and session
//! expiry with re-authentication (KIP-368).

use std::time::Duration;

use kafka_protocol::messages::*;
use strata::security::scram::{self, ClientExchange, Mechanism};

use crate::client::Client;
use crate::harness::*;

const SASL_SETTINGS: [(&str, &str); 3] = [
    (
        "listeners",
        "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    ),
    (
        "sasl.enabled.mechanisms",
        "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    ),
    (
        "listener.name.sasl_plaintext.plain.sasl.jaas.config",
        "org.apache.kafka.common.security.plain.PlainLoginModule required user_alice=\"alice-pw\";",
    ),
];

async fn sasl_client(b: &TestBroker) -> Client {
    let port = b.broker().config.listeners[1].advertised_port;
    Client::connect(format!("127.0.0.1:{port}").parse().unwrap()).await
}

async fn handshake(c: &mut Client, mechanism: &str) -> SaslHandshakeResponse {
    let mut r = SaslHandshakeRequest::default();
    r.mechanism = str_bytes(mechanism);
    c.call(1, &r).await
}

async fn authenticate(c: &mut Client, bytes: Vec<u8>) -> SaslAuthenticateResponse {
    let mut r = SaslAuthenticateRequest::default();
    r.auth_bytes = bytes.into();
    c.call(2, &r).await
}

pub(crate) async fn add_scram_user(
    c: &mut Client,
    user: &str,
    password: &str,
    m: Mechanism,
    iterations: i32,
) -> i16 {
    let salt = b"0123456789abcdef".to_vec();
    let mut u = alter_user_scram_credentials_request::ScramCredentialUpsertion::default();
    u.name = str_bytes(user);
    u.mechanism = m.code();
    u.iterations = iterations;
    u.salted_password = scram::salted_password(m, password.as_bytes(), &salt, iterations).into();
    u.salt = salt.into();
    let mut r = AlterUserScramCredentialsRequest::default();
    r.upsertions = vec![u];
    let resp = c.call(0, &r).await;
    resp.results[0].error_code
}

async fn scram_login(
    c: &mut Client,
    m: Mechanism,
    user: &str,
    password: &str,
) -> SaslAuthenticateResponse {
    assert_eq!(handshake(c, m.name()).await.error_code, 0);
    let client = ClientExchange::new(m, user, password);
    let first = authenticate(c, client.first()).await;
    if first.error_code != 0 {
        return first;
    }
    authenticate(c, client.last(&first.auth_bytes).unwrap()).await
}

async fn metadata(c: &mut Client) -> MetadataResponse {
    c.call(12, &MetadataRequest::default()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sasl_listener_serves_nothing_before_authentication() {
    let b = TestBroker::start_with(&SASL_SETTINGS).await;
    // ApiVersions is allowed (clients need it to pick SaslHandshake's version).
    let mut c = sasl_client(&b).await;
    let v = c.call(3, &api_versions_request()).await;
    assert_eq!(v.error_code, 0);
    // Anything else closes the connection.
    let _ = c.send(12, &MetadataRequest::default()).await;
    assert!(c.is_closed_by_peer(Duration::from_secs(2)).await);
    // A mechanism the listener does not enable: UNSUPPORTED_SASL_MECHANISM with the list.
    let mut c = sasl_client(&b).await;
    let h = handshake(&mut c, "GSSAPI").await;
    assert_eq!(h.error_code, 33);
    let names: Vec<&str> = h.mechanisms.iter().map(|m| m.as_str()).collect();
    assert_eq!(names, vec!["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_accepts_the_jaas_users_and_refuses_wrong_passwords() {
    let b = TestBroker::start_with(&SASL_SETTINGS).await;
    let mut c = sasl_client(&b).await;
    assert_eq!(handshake(&mut c, "PLAIN").await.error_code, 0);
    let r = authenticate(&mut c, b"\0alice\0wrong".to_vec()).await;
    assert_eq!(r.error_code, 58, "SASL_AUTHENTICATION_FAILED");
    assert_eq!(
        r.error_message.as_deref(),
        Some("Authentication failed: Invalid username or password")
    );
    assert!(c.is_closed_by_peer(Duration::from_secs(2)).await);
    for bad in [&b"\0mallory\0alice-pw"[..], b"alice\0alice-pw", b"\0alice"] {
        let mut c = sasl_client(&b).await;
        assert_eq!(handshake(&mut c, "PLAIN").await.error_code, 0);
        assert_eq!(
            authenticate(&mut c, bad.to_vec()).await.error_code,
            58,
            "{bad:?}"
        );
    }
    let mut c = sasl_client(&b).await;
    assert_eq!(handshake(&mut c, "PLAIN").await.error_code, 0);
    let ok = authenticate(&mut c, b"\0alice\0alice-pw".to_vec()).await;
    assert_eq!(ok.error_code, 0);
    assert_eq!(ok.session_lifetime_ms, 0, "no re-authentication configured");
    assert_eq!(metadata(&mut c).await.brokers.len(), 1);
    // After authentication another SaslAuthenticate is ILLEGAL_SASL_STATE.
    assert_eq!(handshake(&mut c, "PLAIN").await.error_code, 34);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_logins_use_credentials_managed_by_the_admin_apis() {
    let b = TestBroker::start_with(&SASL_SETTINGS).await;
    let mut admin = b.client().await;
    for m in [Mechanism::Sha256, Mechanism::Sha512] {
        assert_eq!(
            add_scram_user(&mut admin, "bob", "bob-pw", m, 4096).await,
            0
        );
    }
    let d = admin
        .call(0, &DescribeUserScramCredentialsRequest::default())
        .await;
    assert_eq!(d.results.len(), 1);
    assert_eq!(d.results[0].user.as_str(), "bob");
    assert_eq!(d.results[0].credential_infos.len(), 2);
    for m in [Mechanism::Sha256, Mechanism::Sha512] {
        let mut c = sasl_client(&b).await;
        let r = scram_login(&mut c, m, "bob", "bob-pw").await;
        assert_eq!(r.error_code, 0, "{r:?}");
        assert!(r.auth_bytes.starts_with(b"v="), "server signature");
        assert_eq!(metadata(&mut c).await.brokers.len(), 1);
        let mut c = sasl_client(&b).await;
        let r = scram_login(&mut c, m, "bob", "wrong").await;
        assert_eq!(r.error_code, 58);
        assert_eq!(
            r.error_message.as_deref(),
            Some(format!("Authentication failed during authentication due to invalid credentials with SASL mechanism {}", m.name()).as_str())
        );
    }
    let mut c = sasl_client(&b).await;
    assert_eq!(
        scram_login(&mut c, Mechanism::Sha256, "nobody", "x")
            .await
            .error_code,
        58
    );

    // Kafka's validation of credential changes.
    assert_eq!(
        add_scram_user(&mut admin, "carol", "pw", Mechanism::Sha256, 1000).await,
        93
    );
    assert_eq!(
        add_scram_user(&mut admin, "carol", "pw", Mechanism::Sha256, 20000).await,
        93
    );
    assert_eq!(
        add_scram_user(&mut admin, "", "pw", Mechanism::Sha256, 4096).await,
        93
    );
    let mut del = alter_user_scram_credentials_request::ScramCredentialDeletion::default();
    del.name = str_bytes("carol");
    del.mechanism = 1;
    let mut r = AlterUserScramCredentialsRequest::default();
    r.deletions = vec![del.clone()];
    assert_eq!(
        admin.call(0, &r).await.results[0].error_code,
        91,
        "RESOURCE_NOT_FOUND"
    );
    let mut bad = del.clone();
    bad.mechanism = 9;
    r.deletions = vec![bad];
    assert_eq!(admin.call(0, &r).await.results[0].error_code, 33);
    // Two changes of one user in one request, even for different mechanisms, are refused
    // together, as Kafka's ScramControlManager does.
    let upsert = |m: Mechanism| {
        let mut u = alter_user_scram_credentials_request::ScramCredentialUpsertion::default();
        u.name = str_bytes("dave");
        u.mechanism = m.code();
        u.iterations = 4096;
        u.salt = bytes::Bytes::from_static(b"salt-salt-salt");
        u.salted_password = scram::salted_password(m, b"pw", b"salt-salt-salt", 4096).into();
        u
    };
    let mut r = AlterUserScramCredentialsRequest::default();
    r.upsertions = vec![upsert(Mechanism::Sha256), upsert(Mechanism::Sha512)];
    let twice = admin.call(0, &r).await;
    assert_eq!(twice.results.len(), 1);
    assert_eq!(twice.results[0].error_code, 92, "DUPLICATE_RESOURCE");
    assert_eq!(
        twice.results[0].error_message.as_deref(),
        Some("A user credential cannot be altered twice in the same request")
    );
    assert!(b.broker().scram_users().iter().all(|(u, _)| u != "dave"));
    let mut d = DescribeUserScramCredentialsRequest::default();
    let mut n = describe_user_scram_credentials_request::UserName::default();
    n.name = str_bytes("carol");
    d.users = Some(vec![n.clone(), n]);
    assert_eq!(
        admin.call(0, &d).await.results[0].error_code,
        92,
        "DUPLICATE_RESOURCE"
    );
    // Deleting bob's SHA-256 credential ends SHA-256 logins; credentials survive a restart.
    let mut del = alter_user_scram_credentials_request::ScramCredentialDeletion::default();
    del.name = str_bytes("bob");
    del.mechanism = 1;
    let mut r = AlterUserScramCredentialsRequest::default();
    r.deletions = vec![del];
    assert_eq!(admin.call(0, &r).await.results[0].error_code, 0);
    let b = b.restart().await;
    let mut c = sasl_client(&b).await;
    assert_eq!(
        scram_login(&mut c, Mechanism::Sha256, "bob", "bob-pw")
            .await
            .error_code,
        58
    );
    let mut c = sasl_client(&b).await;
    assert_eq!(
        scram_login(&mut c, Mechanism::Sha512, "bob", "bob-pw")
            .await
            .error_code,
        0
    );
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_expire_unless_the_client_re_authenticates() {
    let mut settings = SASL_SETTINGS.to_vec();
    settings.push(("connections.max.reauth.ms", "600"));
    let b = TestBroker::start_with(&settings).await;
    let mut c = sasl_client(&b).await;
    assert_eq!(handshake(&mut c, "PLAIN").await.error_code, 0);
    let ok = authenticate(&mut c, b"\0alice\0alice-pw".to_vec()).await;
    assert_eq!((ok.error_code, ok.session_lifetime_ms), (0, 600));
    // Re-authenticating on the same connection before expiry keeps it usable.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(handshake(&mut c, "PLAIN").await.error_code, 0);
    assert_eq!(
        authenticate(&mut c, b"\0alice\0alice-pw".to_vec())
            .await
            .error_code,
        0
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(metadata(&mut c).await.brokers.len(), 1);
    // Without re-authentication the next request after expiry closes the connection.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let _ = c.send(12, &MetadataRequest::default()).await;
    assert!(c.is_closed_by_peer(Duration::from_secs(2)).await);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_advertises_the_listener_the_client_used() {
    let b = TestBroker::start_with(&SASL_SETTINGS).await;
    let plain_port = b.broker().config.listeners[0].advertised_port as i32;
    let sasl_port = b.broker().config.listeners[1].advertised_port as i32;
    let mut c = b.client().await;
    assert_eq!(metadata(&mut c).await.brokers[0].port, plain_port);
    let mut c = sasl_client(&b).await;
    assert_eq!(handshake(&mut c, "PLAIN").await.error_code, 0);
    assert_eq!(
        authenticate(&mut c, b"\0alice\0alice-pw".to_vec())
            .await
            .error_code,
        0
    );
    assert_eq!(metadata(&mut c).await.brokers[0].port, sasl_port);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_added_before_the_first_start_let_users_in() {
    let dir = tempfile::tempdir().unwrap();
    let dirs = dir.path().display().to_string();
    let mut pairs = std::collections::BTreeMap::new();
    pairs.insert("log.dirs".to_string(), dirs.clone());
    let config = strata::config::BrokerConfig::build(&[pairs]).unwrap();
    strata::broker::add_scram_credential_offline(
        &config,
        "early",
        Mechanism::Sha256,
        scram::credential_for_password(Mechanism::Sha256, "early-pw", 4096),
    )
    .unwrap();
    assert!(
        strata::broker::is_fresh_data_dir(&config),
        "credentials alone keep the dir fresh"
    );
    let mut settings = SASL_SETTINGS.to_vec();
    settings.push(("log.dirs", dirs.as_str()));
    let b = TestBroker::start_with(&settings).await;
    let mut c = sasl_client(&b).await;
    assert_eq!(
        scram_login(&mut c, Mechanism::Sha256, "early", "early-pw")
            .await
            .error_code,
        0
    );
    b.shutdown().await;
}
