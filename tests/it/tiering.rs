//! Tiered storage against the embedded filesystem store, with faults injected between the
//! steps of an upload: no acknowledged record is lost, no local segment is deleted before a
//! manifest covers it, uploads resume after an outage, and orphans are scrubbed.

use std::path::Path;
use std::time::Duration;

use strata_tiering::store::Op;

use crate::client::Client;
use crate::harness::*;

pub(crate) const TOPIC: &str = "tiered";

pub(crate) fn tiered_broker_settings() -> Vec<(&'static str, &'static str)> {
    vec![
        ("remote.log.manager.task.interval.ms", "50"),
        ("log.retention.check.interval.ms", "50"),
        ("strata.remote.orphan.grace.ms", "1"),
        ("strata.remote.scrub.interval.ms", "100"),
        ("strata.remote.cache.disk.bytes", "0"),
    ]
}

pub(crate) async fn create_tiered_topic(c: &mut Client) {
    let r = create_topic_with(
        c,
        TOPIC,
        1,
        &[
            ("remote.storage.enable", "true"),
            ("local.retention.bytes", "1"),
            ("internal.segment.bytes", "4096"),
            ("retention.ms", "-1"),
        ],
    )
    .await;
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
}

/// Base offsets of the local `.log` files.
pub(crate) fn local_segments(dir: &Path) -> Vec<i64> {
    let mut v: Vec<i64> = std::fs::read_dir(dir.join(format!("{TOPIC}-0")))
        .map(|r| {
            r.flatten()
                .filter_map(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .strip_suffix(".log")
                        .and_then(|s| s.parse().ok())
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort_unstable();
    v
}

/// Every `.seg` object under the store directory.
pub(crate) fn remote_objects(dir: &Path) -> Vec<String> {
    fn walk(d: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "seg") {
                out.push(p.file_name().unwrap().to_string_lossy().to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(&dir.join("objects"), &mut out);
    out.sort();
    out
}

/// Whether the bucket holds a manifest.
fn has_manifest(dir: &Path) -> bool {
    fn walk(d: &Path) -> bool {
        std::fs::read_dir(d)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| {
                let p = e.path();
                if p.is_dir() {
                    walk(&p)
                } else {
                    p.file_name().is_some_and(|n| n == "manifest.json")
                }
            })
    }
    walk(&dir.join("objects"))
}

pub(crate) async fn produce_batches(c: &mut Client, n: usize) -> i64 {
    let mut last = -1;
    for _ in 0..n {
        let r = produce(c, TOPIC, 0, batch(20)).await;
        assert_eq!(r.error_code, 0);
        last = r.base_offset + 19;
    }
    last + 1
}

/// Reads the whole partition from offset 0 and returns the offsets seen.
pub(crate) async fn read_all(c: &mut Client, end: i64) -> Vec<i64> {
    read_all_from(c, 0, end).await
}

/// A broker with the tiered topic holding 60 batches, every sealed segment offloaded (in
/// the bucket, deleted locally); the end offset.
pub(crate) async fn offloaded_topic() -> (TestBroker, Client, i64) {
    let b = TestBroker::start_with(&tiered_broker_settings()).await;
    let mut c = b.client().await;
    create_tiered_topic(&mut c).await;
    let end = produce_batches(&mut c, 60).await;
    let dir = b.dir.path().to_path_buf();
    wait_until("everything sealed offloaded", || {
        local_segments(&dir).len() == 1
    })
    .await;
    (b, c, end)
}

pub(crate) async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..200 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_keeps_local_segments_and_uploads_resume() {
    let b = TestBroker::start_with(&tiered_broker_settings()).await;
    let mut c = b.client().await;
    create_tiered_topic(&mut c).await;
    let store = b
        .services()
        .tiering
        .as_ref()
        .expect("tiering on")
        .store
        .clone();
    store.faults.set_outage(true);
    let end = produce_batches(&mut c, 60).await;
    // Rather than a fixed time: wait until the store refused a request and local retention
    // ran a few times after the produce.
    let relaxed = std::sync::atomic::Ordering::Relaxed;
    let failed_requests = store.metrics.errors.load(relaxed);
    let retention_checks = b.broker().metrics.retention_checks.load(relaxed);
    wait_until("failed store requests and retention checks", || {
        store.metrics.errors.load(relaxed) > failed_requests
            && b.broker().metrics.retention_checks.load(relaxed) >= retention_checks + 3
    })
    .await;
    let segs = local_segments(b.dir.path());
    assert!(segs.len() > 3, "segments rolled: {segs:?}");
    assert_eq!(
        segs[0], 0,
        "nothing deleted locally while the store is down"
    );
    assert!(remote_objects(b.dir.path()).is_empty());
    // Consumers are unaffected.
    assert_eq!(read_all(&mut c, end).await, (0..end).collect::<Vec<_>>());

    store.faults.set_outage(false);
    let dir = b.dir.path().to_path_buf();
    wait_until("local segments to be offloaded", || {
        local_segments(&dir)[0] > 0
    })
    .await;
    // Offsets below the local log start now come from the bucket.
    assert_eq!(read_all(&mut c, end).await, (0..end).collect::<Vec<_>>());
    let earliest = list_offset(&mut c, TOPIC, 0, -2).await;
    assert_eq!(earliest.offset, 0);
    let local = list_offset_at(&mut c, 8, TOPIC, 0, -4).await;
    assert!(local.offset > 0, "earliest local offset {}", local.offset);
    b.shutdown().await;
}

/// Restore and `strata export` find a topic's data through the bucket's catalog: while the
/// catalog cannot be written, nothing of a new topic is uploaded, so nothing is deleted
/// locally that they could not find.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_uploaded_before_the_catalog_lists_the_topic() {
    let b = TestBroker::start_with(&tiered_broker_settings()).await;
    let store = b
        .services()
        .tiering
        .as_ref()
        .expect("tiering on")
        .store
        .clone();
    store
        .faults
        .fail_op_on_keys_containing(Op::Put, "catalog.json");
    let mut c = b.client().await;
    create_tiered_topic(&mut c).await;
    let end = produce_batches(&mut c, 60).await;
    let relaxed = std::sync::atomic::Ordering::Relaxed;
    let (failed, checks) = (
        store.metrics.errors.load(relaxed),
        b.broker().metrics.retention_checks.load(relaxed),
    );
    wait_until("failed catalog writes and retention checks", || {
        store.metrics.errors.load(relaxed) > failed + 3
            && b.broker().metrics.retention_checks.load(relaxed) >= checks + 3
    })
    .await;
    let dir = b.dir.path().to_path_buf();
    assert!(local_segments(&dir).len() > 3, "segments rolled");
    assert_eq!(local_segments(&dir)[0], 0, "nothing deleted locally");
    assert!(
        remote_objects(&dir).is_empty(),
        "{:?}",
        remote_objects(&dir)
    );
    assert!(!has_manifest(&dir), "no manifest claimed");

    store.faults.clear();
    wait_until("local segments to be offloaded", || {
        local_segments(&dir)[0] > 0
    })
    .await;
    let (catalog, _) = strata_tiering::catalog::load(&store)
        .await
        .unwrap()
        .expect("a catalog");
    assert_eq!(catalog.topics[TOPIC].partitions, 1);
    assert_eq!(read_all(&mut c, end).await, (0..end).collect::<Vec<_>>());
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_manifest_commits_leave_orphans_that_the_scrubber_removes() {
    let b = TestBroker::start_with(&tiered_broker_settings()).await;
    let mut c = b.client().await;
    create_tiered_topic(&mut c).await;
    let store = b
        .services()
        .tiering
        .as_ref()
        .expect("tiering on")
        .store
        .clone();
    // The leader claims the manifest with its epoch before it uploads anything.
    let dir = b.dir.path().to_path_buf();
    wait_until("the leader's manifest claim", || has_manifest(&dir)).await;
    // Uploads succeed but every manifest commit fails: the fail point between upload and
    // commit.
    store
        .faults
        .fail_op_on_keys_containing(Op::Put, "manifest.json");
    let end = produce_batches(&mut c, 40).await;
    wait_until("uncommitted uploads", || remote_objects(&dir).len() >= 2).await;
    assert_eq!(
        local_segments(b.dir.path())[0],
        0,
        "no local delete without a manifest"
    );
    let tiering = b.services().tiering.as_ref().unwrap().clone();
    assert!(
        tiering
            .metrics
            .upload_failures
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0
    );
    // Crash with uncommitted uploads in the bucket, then restart with the store healthy.
    let b = b.crash_and_restart(|_| {}).await;
    let mut c = b.client().await;
    let dir = b.dir.path().to_path_buf();
    wait_until("offload after the restart", || local_segments(&dir)[0] > 0).await;
    assert_eq!(read_all(&mut c, end).await, (0..end).collect::<Vec<_>>());
    // Every object left is referenced by the manifest (orphans scrubbed).
    let tiering = b.services().tiering.as_ref().unwrap().clone();
    let topic = b.broker().topic(TOPIC).unwrap();
    let tp = tiering.partition(&topic, 0).await.unwrap();
    let mut attempts = 0;
    loop {
        let referenced: Vec<String> = tp
            .manifest()
            .segments
            .iter()
            .map(|s| s.key.rsplit('/').next().unwrap().to_string())
            .collect();
        let mut referenced = referenced;
        referenced.sort();
        if remote_objects(b.dir.path()) == referenced {
            break;
        }
        attempts += 1;
        assert!(
            attempts < 100,
            "orphans remain: {:?} vs {:?}",
            remote_objects(b.dir.path()),
            referenced
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_reads_are_reported_and_retried() {
    let b = TestBroker::start_with(&tiered_broker_settings()).await;
    let mut c = b.client().await;
    create_tiered_topic(&mut c).await;
    let end = produce_batches(&mut c, 40).await;
    let dir = b.dir.path().to_path_buf();
    wait_until("offload", || local_segments(&dir)[0] > 0).await;
    let store = b.services().tiering.as_ref().unwrap().store.clone();
    store.faults.fail_next(Op::Get, 1_000);
    let p = fetch(&mut c, TOPIC, 0, FetchArgs::default()).await;
    assert_eq!(
        p.error_code, 56,
        "KAFKA_STORAGE_ERROR while the store fails reads"
    );
    store.faults.clear();
    assert_eq!(read_all(&mut c, end).await, (0..end).collect::<Vec<_>>());
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_from_the_bucket_after_a_clean_shutdown_keeps_every_record() {
    let b = TestBroker::start_with(&tiered_broker_settings()).await;
    let mut c = b.client().await;
    create_tiered_topic(&mut c).await;
    let end = produce_batches(&mut c, 30).await;
    let objects = tempfile::tempdir().unwrap();
    let store_dir = b.dir.path().join("objects");
    // A clean shutdown uploads the active segment too.
    b.shutdown_keep_dir(|dir| {
        let _ = std::fs::rename(dir.join("objects"), objects.path().join("objects"));
    })
    .await;
    assert!(!store_dir.exists());
    let url = format!("file://{}", objects.path().join("objects").display());
    let mut settings = tiered_broker_settings();
    settings.push(("strata.remote.store.url", url.as_str()));
    let b = TestBroker::start_with(&settings).await;
    let mut c = b.client().await;
    assert_eq!(list_offset(&mut c, TOPIC, 0, -1).await.offset, end);
    assert_eq!(read_all(&mut c, end).await, (0..end).collect::<Vec<_>>());
    // Producing continues after the restored end.
    let r = produce(&mut c, TOPIC, 0, batch(1)).await;
    assert_eq!(r.error_code, 0);
    assert_eq!(r.base_offset, end);
    b.shutdown().await;
}

/// A catalog naming a topic that would lead out of the log directory (a damaged or hostile
/// bucket) is refused before anything is written: the broker does not start, and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_refuses_a_catalog_whose_topic_name_leads_out_of_the_log_directory() {
    let b = TestBroker::start_with(&tiered_broker_settings()).await;
    let mut c = b.client().await;
    create_tiered_topic(&mut c).await;
    produce_batches(&mut c, 10).await;
    let objects = tempfile::tempdir().unwrap();
    b.shutdown_keep_dir(|dir| {
        std::fs::rename(dir.join("objects"), objects.path().join("objects")).unwrap();
    })
    .await;
    let catalog = objects.path().join("objects/_strata/catalog.json");
    let json = std::fs::read_to_string(&catalog).unwrap();
    let renamed = json.replace(&format!("\"{TOPIC}\""), "\"../../escaped\"");
    assert_ne!(json, renamed, "the catalog names {TOPIC}: {json}");
    std::fs::write(&catalog, renamed).unwrap();

    let data = tempfile::tempdir().unwrap();
    let logs = data.path().join("a/b/logs");
    std::fs::create_dir_all(&logs).unwrap();
    let url = format!("file://{}", objects.path().join("objects").display());
    let mut settings: Vec<(String, String)> = tiered_broker_settings()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    settings.push(("strata.remote.store.url".into(), url));
    let Err(e) = strata::runtime::start(config_for(&logs, &settings)).await else {
        panic!("a broker started from a catalog naming ../../escaped");
    };
    let why = format!("{e:#}");
    assert!(
        why.contains("corrupt catalog: \"../../escaped\" is not a legal topic name"),
        "{why}"
    );
    let mut found = Vec::new();
    let mut dirs = vec![data.path().to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.file_name().to_string_lossy().contains("escaped") {
                found.push(e.path());
            }
            if e.path().is_dir() {
                dirs.push(e.path());
            }
        }
    }
    assert!(
        found.is_empty(),
        "written from the catalog's name: {found:?}"
    );
}

/// With `strata.remote.internal.topics.enable` the coordinators' topics are tiered: a broker
/// restored from the bucket alone knows the committed offsets of a group and the
/// transactional producer (InitProducerId gives it its producer id back with a newer epoch,
/// not a new id).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_brings_back_committed_offsets_and_transaction_state() {
    use crate::groups::{committed, simple_commit};
    use crate::transactions::{add_partitions, end_txn, init_txn};
    let mut settings = tiered_broker_settings();
    settings.push(("strata.remote.internal.topics.enable", "true"));
    let b = TestBroker::start_with(&settings).await;
    let mut c = b.client().await;
    create_tiered_topic(&mut c).await;
    let end = produce_batches(&mut c, 10).await;
    simple_commit(&mut c, "restored-group", TOPIC, &[(0, 42)]).await;
    let producer = init_txn(&mut c, "restored-txn").await;
    assert!(
        add_partitions(&mut c, "restored-txn", producer, TOPIC, &[0])
            .await
            .iter()
            .all(|&e| e == 0)
    );
    assert_eq!(end_txn(&mut c, "restored-txn", producer, true).await, 0);
    let objects = tempfile::tempdir().unwrap();
    b.shutdown_keep_dir(|dir| {
        let _ = std::fs::rename(dir.join("objects"), objects.path().join("objects"));
    })
    .await;

    let url = format!("file://{}", objects.path().join("objects").display());
    settings.push(("strata.remote.store.url", url.as_str()));
    let b = TestBroker::start_with(&settings).await;
    let mut c = b.client().await;
    // The records and the transaction's COMMIT marker.
    assert_eq!(list_offset(&mut c, TOPIC, 0, -1).await.offset, end + 1);
    assert_eq!(
        committed(&mut c, "restored-group", TOPIC, &[0]).await,
        vec![42]
    );
    let again = init_txn(&mut c, "restored-txn").await;
    assert_eq!(
        again.0, producer.0,
        "the transactional id keeps its producer id"
    );
    assert!(again.1 > producer.1, "{again:?} after {producer:?}");
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_tiering_configs_get_invalid_config() {
    let b = TestBroker::start_with(&[("remote.log.storage.system.enable", "false")]).await;
    let mut c = b.client().await;
    let r = create_topic_with(&mut c, "t1", 1, &[("remote.storage.enable", "true")]).await;
    assert_eq!(
        r.error_code, 40,
        "INVALID_CONFIG when the system is disabled"
    );
    b.shutdown().await;
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    let r = create_topic_with(
        &mut c,
        "t2",
        1,
        &[
            ("remote.storage.enable", "true"),
            ("retention.ms", "1000"),
            ("local.retention.ms", "2000"),
        ],
    )
    .await;
    assert_eq!(r.error_code, 40, "{:?}", r.error_message);
    let r = create_topic_with(
        &mut c,
        "t3",
        1,
        &[
            ("remote.storage.enable", "true"),
            ("retention.bytes", "1000"),
            ("local.retention.bytes", "2000"),
        ],
    )
    .await;
    assert_eq!(r.error_code, 40, "{:?}", r.error_message);
    // Kafka's KIP-950 and copy-lag rules: read-only tiered data keeps one retention for both
    // tiers, a positive copy lag may not exceed the local retention, and -2 is no lag.
    for (name, settings, needle) in [
        (
            "t4",
            &[("retention.ms", "100000"), ("local.retention.ms", "1000"), ("remote.log.copy.disable", "true")][..],
            "`local.retention.ms` and `retention.ms` must be set to the identical value",
        ),
        (
            "t5",
            &[("local.retention.ms", "1000"), ("retention.ms", "100000"), ("remote.copy.lag.ms", "1001")][..],
            "Invalid value 1001 for configuration remote.copy.lag.ms: Value must not exceed local.retention.ms (effective value: 1000)",
        ),
        (
            "t6",
            &[("local.retention.bytes", "100"), ("remote.copy.lag.bytes", "101")][..],
            "remote.copy.lag.bytes",
        ),
        ("t7", &[("remote.copy.lag.bytes", "-2")][..], "remote.copy.lag.bytes"),
    ] {
        let mut configs = vec![("remote.storage.enable", "true")];
        configs.extend_from_slice(settings);
        let r = create_topic_with(&mut c, name, 1, &configs).await;
        assert_eq!(r.error_code, 40, "{name}: {:?}", r.error_message);
        let message = r.error_message.as_deref().unwrap_or_default().to_string();
        assert!(message.contains(needle), "{name}: {message}");
    }
    b.shutdown().await;
}

#[path = "../support/s3_server.rs"]
pub(crate) mod s3_server;

use s3_server::{S3Kind, S3Server};

/// Offload, read back from offset 0, and restore on an empty data dir, against a real
/// S3-compatible server (moto; s3s-fs checks every request's SigV4 signature). Uploads use
/// multipart when `multipart` is set.
async fn s3_round_trip(kind: S3Kind, multipart: bool) {
    let Some(server) = S3Server::start_if_installed(kind, "strata-it").expect("s3 server starts")
    else {
        return;
    };
    let store: Vec<(String, String)> = server.store_settings("cluster-a");
    let mut settings: Vec<(&str, &str)> = tiered_broker_settings();
    settings.extend(store.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    if multipart {
        settings.push(("strata.remote.upload.multipart.threshold.bytes", "1"));
    }
    let b = TestBroker::start_with(&settings).await;
    let mut c = b.client().await;
    create_tiered_topic(&mut c).await;
    let end = produce_batches(&mut c, 40).await;
    let dir = b.dir.path().to_path_buf();
    wait_until("every sealed segment offloaded to S3", || {
        local_segments(&dir).len() == 1
    })
    .await;
    assert_eq!(read_all(&mut c, end).await, (0..end).collect::<Vec<_>>());
    let keys = server.object_keys().expect("list bucket");
    assert!(
        keys.iter()
            .any(|k| k.starts_with("cluster-a/_strata/catalog.json")),
        "catalog in the bucket: {keys:?}"
    );
    assert!(keys.iter().any(|k| k.ends_with("/0/manifest.json")));
    assert!(keys.iter().filter(|k| k.ends_with(".seg")).count() >= 2);
    b.shutdown().await;

    // A new broker on an empty disk rebuilds the topic from the bucket alone.
    let b = TestBroker::start_with(&settings).await;
    let mut c = b.client().await;
    assert_eq!(list_offset(&mut c, TOPIC, 0, -1).await.offset, end);
    assert_eq!(read_all(&mut c, end).await, (0..end).collect::<Vec<_>>());
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_round_trip_on_moto() {
    s3_round_trip(S3Kind::Moto, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_round_trip_on_moto_with_multipart_uploads() {
    s3_round_trip(S3Kind::Moto, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_round_trip_on_s3s_fs_with_sigv4() {
    s3_round_trip(S3Kind::S3sFs, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_retention_delete_records_and_topic_deletion_reach_the_bucket() {
    let (b, mut c, end) = offloaded_topic().await;
    let dir = b.dir.path().to_path_buf();
    let before = remote_objects(&dir).len();
    assert!(before >= 3);

    // DeleteRecords below the local log start: the log start moves and the remote segments
    // wholly below it go.
    let cut = end / 2;
    let mut req = kafka_protocol::messages::DeleteRecordsRequest::default();
    let mut t = kafka_protocol::messages::delete_records_request::DeleteRecordsTopic::default();
    t.name = name(TOPIC);
    let mut p = kafka_protocol::messages::delete_records_request::DeleteRecordsPartition::default();
    p.partition_index = 0;
    p.offset = cut;
    t.partitions = vec![p];
    req.topics = vec![t];
    req.timeout_ms = 5000;
    let resp = c.call(2, &req).await;
    assert_eq!(resp.topics[0].partitions[0].error_code, 0);
    assert_eq!(resp.topics[0].partitions[0].low_watermark, cut);
    assert_eq!(list_offset(&mut c, TOPIC, 0, -2).await.offset, cut);
    wait_until("remote segments below the cut deleted", || {
        remote_objects(&dir).len() < before
    })
    .await;
    let p = fetch(&mut c, TOPIC, 0, FetchArgs::default()).await;
    assert_eq!(p.error_code, 1, "OFFSET_OUT_OF_RANGE below the log start");
    assert_eq!(
        read_all_from(&mut c, cut, end).await,
        (cut..end).collect::<Vec<_>>()
    );

    // retention.bytes is the total across tiers.
    let mut req = kafka_protocol::messages::IncrementalAlterConfigsRequest::default();
    let mut r =
        kafka_protocol::messages::incremental_alter_configs_request::AlterConfigsResource::default(
        );
    r.resource_type = 2;
    r.resource_name = str_bytes(TOPIC);
    let mut cfg =
        kafka_protocol::messages::incremental_alter_configs_request::AlterableConfig::default();
    cfg.name = str_bytes("retention.bytes");
    cfg.config_operation = 0;
    cfg.value = Some(str_bytes("5000"));
    r.configs = vec![cfg];
    req.resources = vec![r];
    let resp = c.call(1, &req).await;
    assert_eq!(
        resp.responses[0].error_code, 0,
        "{:?}",
        resp.responses[0].error_message
    );
    let mut start = cut;
    for _ in 0..200 {
        start = list_offset(&mut c, TOPIC, 0, -2).await.offset;
        if start > cut {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(start > cut, "retention.bytes moved the log start ({start})");
    assert_eq!(
        read_all_from(&mut c, start, end).await,
        (start..end).collect::<Vec<_>>()
    );

    // Deleting the topic deletes its remote data.
    let mut req = kafka_protocol::messages::DeleteTopicsRequest::default();
    req.topic_names = vec![name(TOPIC)];
    req.timeout_ms = 5000;
    let resp = c.call(4, &req).await;
    assert_eq!(resp.responses[0].error_code, 0);
    wait_until("remote data of the deleted topic gone", || {
        remote_objects(&dir).is_empty()
    })
    .await;
    b.shutdown().await;
}

/// Reads [from, end) and returns the offsets seen.
pub(crate) async fn read_all_from(c: &mut Client, from: i64, end: i64) -> Vec<i64> {
    let mut offsets = Vec::new();
    let mut next = from;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while next < end {
        assert!(
            std::time::Instant::now() < deadline,
            "stuck at offset {next}"
        );
        let p = fetch(
            c,
            TOPIC,
            0,
            FetchArgs {
                offset: next,
                max_wait_ms: 100,
                ..Default::default()
            },
        )
        .await;
        assert_eq!(p.error_code, 0, "fetch at {next}");
        offsets.extend(
            record_offsets(&p.records)
                .into_iter()
                .filter(|&o| o >= next),
        );
        if let Some(&last) = offsets.last() {
            next = last + 1;
        }
    }
    offsets
}

/// All (offset, key, value) from `from`, reading until `end`.
async fn read_records(c: &mut Client, topic: &str, end: i64) -> Vec<(i64, String, String)> {
    let mut out: Vec<(i64, String, String)> = Vec::new();
    let mut next = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while next < end {
        assert!(
            std::time::Instant::now() < deadline,
            "stuck at offset {next}"
        );
        let p = fetch(
            c,
            topic,
            0,
            FetchArgs {
                offset: next,
                max_wait_ms: 100,
                ..Default::default()
            },
        )
        .await;
        assert_eq!(p.error_code, 0, "fetch at {next}");
        let Some(mut b) = p.records.clone().filter(|b| !b.is_empty()) else {
            continue;
        };
        for set in kafka_protocol::records::RecordBatchDecoder::decode_all(&mut b).unwrap() {
            for r in set.records {
                if r.offset < next || r.control {
                    continue;
                }
                let s = |b: &Option<bytes::Bytes>| {
                    b.as_ref()
                        .map(|b| String::from_utf8_lossy(b).to_string())
                        .unwrap_or_default()
                };
                out.push((r.offset, s(&r.key), s(&r.value)));
            }
        }
        if let Some(&(last, _, _)) = out.last() {
            next = last + 1;
        }
        if out.last().is_some_and(|(o, _, _)| *o + 1 >= end) {
            break;
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compacted_tiered_topic_keeps_its_compacted_state_in_the_bucket() {
    let mut settings = tiered_broker_settings();
    settings.push(("strata.remote.compacted.snapshot.interval.ms", "0"));
    settings.push(("log.cleaner.backoff.ms", "50"));
    let b = TestBroker::start_with(&settings).await;
    let mut c = b.client().await;
    let r = create_topic_with(
        &mut c,
        "compacted",
        1,
        &[
            ("cleanup.policy", "compact"),
            ("remote.storage.enable", "true"),
            ("internal.segment.bytes", "2048"),
            ("min.cleanable.dirty.ratio", "0.01"),
        ],
    )
    .await;
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    // 40 rounds of updates to the same 10 keys (key-0..key-9): value "round-R".
    let now = now_ms();
    let mut end = 0;
    for round in 0..40 {
        let v = format!("round-{round}");
        let values: Vec<&[u8]> = (0..10).map(|_| v.as_bytes()).collect();
        let r = produce(
            &mut c,
            "compacted",
            0,
            batch_with(
                &values,
                &[now; 10],
                kafka_protocol::records::Compression::None,
                None,
            ),
        )
        .await;
        assert_eq!(r.error_code, 0);
        end = r.base_offset + 10;
    }
    let tiering = b.services().tiering.as_ref().unwrap().clone();
    let topic = b.broker().topic("compacted").unwrap();
    let tp = tiering.partition(&topic, 0).await.unwrap();
    for _ in 0..300 {
        if tp.manifest().compacted_upto.is_some_and(|u| u >= end / 2) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let upto = tp
        .manifest()
        .compacted_upto
        .expect("a compacted snapshot was committed");
    assert!(upto >= end / 2, "snapshot covers {upto} of {end}");
    let objects = tempfile::tempdir().unwrap();
    b.shutdown_keep_dir(|dir| {
        std::fs::rename(dir.join("objects"), objects.path().join("objects")).unwrap();
    })
    .await;

    // Restore on an empty disk: the bucket alone yields the compacted state.
    let url = format!("file://{}", objects.path().join("objects").display());
    let mut restored = settings.clone();
    restored.push(("strata.remote.store.url", url.as_str()));
    let b = TestBroker::start_with(&restored).await;
    let mut c = b.client().await;
    let records = read_records(&mut c, "compacted", end).await;
    let offsets: Vec<i64> = records.iter().map(|r| r.0).collect();
    assert!(offsets.windows(2).all(|w| w[0] < w[1]), "offsets increase");
    let below: Vec<_> = records.iter().filter(|r| r.0 < upto).collect();
    let mut keys: Vec<&str> = below.iter().map(|r| r.1.as_str()).collect();
    keys.sort();
    keys.dedup();
    assert_eq!(
        keys.len(),
        below.len(),
        "one record per key below the snapshot end: {below:?}"
    );
    // The newest value of every key survives.
    let mut latest = std::collections::BTreeMap::new();
    for (_, k, v) in &records {
        latest.insert(k.clone(), v.clone());
    }
    assert_eq!(latest.len(), 10);
    assert!(latest.values().all(|v| v == "round-39"), "{latest:?}");
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_sealed_segment_is_uploaded_without_waiting_for_the_timer() {
    // The timer's first pass runs at start-up, before the topic exists; the next one is an
    // hour away. Only the partition's events can bring the upload.
    let mut settings = tiered_broker_settings();
    settings[0] = ("remote.log.manager.task.interval.ms", "3600000");
    let b = TestBroker::start_with(&settings).await;
    let mut c = b.client().await;
    create_tiered_topic(&mut c).await;
    let end = produce_batches(&mut c, 40).await;
    wait_until("a segment uploaded on its commit event", || {
        !remote_objects(b.dir.path()).is_empty()
    })
    .await;
    // Every acknowledged record is still readable, exactly once and in order.
    let offsets = read_all(&mut c, end).await;
    assert_eq!(offsets, (0..end).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_offsets_reports_what_the_bucket_holds_and_what_is_pending_upload() {
    const LATEST_TIERED: i64 = -5;
    const EARLIEST_PENDING_UPLOAD: i64 = -6;
    const EARLIEST_LOCAL: i64 = -4;
    let b = TestBroker::start_with(&tiered_broker_settings()).await;
    let mut c = b.client().await;
    create_tiered_topic(&mut c).await;
    // Nothing uploaded, the local log starts at the log start: pending upload is the
    // earliest offset, and the bucket holds nothing.
    let pending = list_offset_at(&mut c, 11, TOPIC, 0, EARLIEST_PENDING_UPLOAD).await;
    assert_eq!((pending.error_code, pending.offset), (0, 0));
    let tiered = list_offset_at(&mut c, 11, TOPIC, 0, LATEST_TIERED).await;
    assert_eq!(
        (tiered.error_code, tiered.offset, tiered.leader_epoch),
        (0, -1, -1)
    );
    // Version 10 does not know the pending-upload timestamp.
    let old = list_offset_at(&mut c, 10, TOPIC, 0, EARLIEST_PENDING_UPLOAD).await;
    assert_eq!(old.error_code, 35, "UNSUPPORTED_VERSION");

    let end = produce_batches(&mut c, 40).await;
    let dir = b.dir.path().to_path_buf();
    wait_until("local segments deleted after upload", || {
        local_segments(&dir).first().is_some_and(|&base| base > 0)
    })
    .await;
    // Uploads go on while the offsets are asked one request at a time: read until the
    // latest tiered offset is the same before and after the others.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let (tiered, pending, local) = loop {
        let tiered = list_offset_at(&mut c, 11, TOPIC, 0, LATEST_TIERED).await;
        let pending = list_offset_at(&mut c, 11, TOPIC, 0, EARLIEST_PENDING_UPLOAD).await;
        let local = list_offset_at(&mut c, 11, TOPIC, 0, EARLIEST_LOCAL).await;
        let again = list_offset_at(&mut c, 11, TOPIC, 0, LATEST_TIERED).await;
        if again.offset == tiered.offset {
            break (tiered, pending, local);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "uploads never settled"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        (tiered.error_code, pending.error_code, local.error_code),
        (0, 0, 0)
    );
    // The bucket holds everything below the pending offset; local retention deleted only
    // what it holds; the active segment is never uploaded.
    assert_eq!(pending.offset, tiered.offset + 1);
    assert!(
        local.offset > 0 && local.offset <= pending.offset,
        "{local:?} {pending:?}"
    );
    assert!(pending.offset < end, "{pending:?} end {end}");
    assert_eq!((tiered.leader_epoch, pending.leader_epoch), (0, 0));
    // And every record is still there, in order.
    assert_eq!(read_all(&mut c, end).await, (0..end).collect::<Vec<_>>());
}

/// Sets one topic config with IncrementalAlterConfigs; returns (error code, message).
pub(crate) async fn set_topic_config(
    c: &mut Client,
    topic: &str,
    name: &str,
    value: &str,
) -> (i16, String) {
    use kafka_protocol::messages::incremental_alter_configs_request as iac;
    let mut cfg = iac::AlterableConfig::default();
    cfg.name = str_bytes(name);
    cfg.config_operation = 0;
    cfg.value = Some(str_bytes(value));
    let mut r = iac::AlterConfigsResource::default();
    r.resource_type = 2;
    r.resource_name = str_bytes(topic);
    r.configs = vec![cfg];
    let mut req = kafka_protocol::messages::IncrementalAlterConfigsRequest::default();
    req.resources = vec![r];
    let resp = c.call(1, &req).await;
    let r = &resp.responses[0];
    (
        r.error_code,
        r.error_message.as_deref().unwrap_or_default().to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_lag_holds_uploads_back_and_copy_disable_stops_them() {
    const EARLIEST_PENDING_UPLOAD: i64 = -6;
    let b = TestBroker::start_with(&tiered_broker_settings()).await;
    let mut c = b.client().await;
    // Local retention unlimited: a copy lag of -1 (derived from it) would not apply, so the
    // byte lag alone decides. 64 MiB is far more than this test writes.
    let r = create_topic_with(
        &mut c,
        TOPIC,
        1,
        &[
            ("remote.storage.enable", "true"),
            ("internal.segment.bytes", "4096"),
            ("retention.ms", "-1"),
            ("remote.copy.lag.ms", "-1"),
            ("remote.copy.lag.bytes", "67108864"),
        ],
    )
    .await;
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    produce_batches(&mut c, 40).await;
    assert!(
        local_segments(b.dir.path()).len() > 3,
        "several sealed segments"
    );
    // Tiering passes run every 50 ms: a second is twenty chances to upload.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        remote_objects(b.dir.path()).is_empty(),
        "held back by the copy lag"
    );
    let pending = list_offset_at(&mut c, 11, TOPIC, 0, EARLIEST_PENDING_UPLOAD).await;
    assert_eq!(pending.offset, 0);

    // A lag of 0 uploads at once.
    assert_eq!(
        set_topic_config(&mut c, TOPIC, "remote.copy.lag.bytes", "0")
            .await
            .0,
        0
    );
    let dir = b.dir.path().to_path_buf();
    wait_until("uploads once the lag is 0", || {
        !remote_objects(&dir).is_empty()
    })
    .await;
    let mut uploaded = 0;
    for _ in 0..200 {
        uploaded = list_offset_at(&mut c, 11, TOPIC, 0, EARLIEST_PENDING_UPLOAD)
            .await
            .offset;
        if uploaded > 0 && remote_objects(&dir).len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(uploaded > 0);

    // Read-only tiered data: nothing more is uploaded.
    let (code, message) = set_topic_config(&mut c, TOPIC, "remote.log.copy.disable", "true").await;
    assert_eq!(code, 0, "{message}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let frozen = list_offset_at(&mut c, 11, TOPIC, 0, EARLIEST_PENDING_UPLOAD)
        .await
        .offset;
    let objects = remote_objects(&dir).len();
    let end = produce_batches(&mut c, 40).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        remote_objects(&dir).len(),
        objects,
        "no upload with copy disabled"
    );
    assert_eq!(
        list_offset_at(&mut c, 11, TOPIC, 0, EARLIEST_PENDING_UPLOAD)
            .await
            .offset,
        frozen
    );
    // Every record is still there, once, in order (remote and local).
    assert_eq!(read_all(&mut c, end).await, (0..end).collect::<Vec<_>>());

    // Turning tiered storage off without the delete flag is refused, with Kafka's message.
    let (code, message) = set_topic_config(&mut c, TOPIC, "remote.storage.enable", "false").await;
    assert_eq!(code, 40, "INVALID_CONFIG");
    assert!(
        message.contains("remote.log.delete.on.disable=true"),
        "{message}"
    );
}

/// KIP-950: `remote.storage.enable=false` with `remote.log.delete.on.disable=true` deletes the
/// topic's tiered data and takes it out of the bucket's catalog; the local log becomes the
/// whole log (its log start is the first local offset), keeps taking records, uploads
/// nothing more, and stays so across a crash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turning_remote_storage_off_deletes_the_tiered_data() {
    let (b, mut c, end) = offloaded_topic().await;
    let dir = b.dir.path().to_path_buf();
    let store = b.services().tiering.as_ref().unwrap().store.clone();

    let (code, message) =
        set_topic_config(&mut c, TOPIC, "remote.log.delete.on.disable", "true").await;
    assert_eq!(code, 0, "{message}");
    let (code, message) = set_topic_config(&mut c, TOPIC, "remote.storage.enable", "false").await;
    assert_eq!(code, 0, "{message}");
    // Local retention had deleted what the bucket held: the log now starts where the local
    // segments do.
    let local_start = local_segments(&dir)[0];
    assert_eq!(list_offset(&mut c, TOPIC, 0, -2).await.offset, local_start);
    let mut catalog_lists_it = true;
    for _ in 0..200 {
        let (catalog, _) = strata_tiering::catalog::load(&store)
            .await
            .unwrap()
            .expect("a catalog");
        catalog_lists_it = catalog.topics.contains_key(TOPIC);
        if !catalog_lists_it && remote_objects(&dir).is_empty() && !has_manifest(&dir) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!catalog_lists_it, "the catalog still lists the topic");
    assert_eq!(remote_objects(&dir), Vec::<String>::new());
    assert!(!has_manifest(&dir));
    assert_eq!(
        read_all_from(&mut c, local_start, end).await,
        (local_start..end).collect::<Vec<_>>()
    );

    // An untiered log from now on: new records stay local, retention is `retention.*`.
    let end = {
        let mut last = end;
        for _ in 0..40 {
            let r = produce(&mut c, TOPIC, 0, batch(20)).await;
            assert_eq!(r.error_code, 0);
            last = r.base_offset + 20;
        }
        last
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(remote_objects(&dir).is_empty(), "nothing uploaded");
    assert_eq!(
        local_segments(&dir)[0],
        local_start,
        "nothing deleted locally"
    );

    let b = b.crash_and_restart(|_| {}).await;
    let mut c = b.client().await;
    assert_eq!(list_offset(&mut c, TOPIC, 0, -2).await.offset, local_start);
    assert_eq!(
        read_all_from(&mut c, local_start, end).await,
        (local_start..end).collect::<Vec<_>>()
    );

    // On again: the local log is tiered from its start, and stays whole.
    let (code, message) = set_topic_config(&mut c, TOPIC, "remote.storage.enable", "true").await;
    assert_eq!(code, 0, "{message}");
    let dir = b.dir.path().to_path_buf();
    wait_until("the local log to be tiered again", || {
        local_segments(&dir)[0] > local_start && !remote_objects(&dir).is_empty()
    })
    .await;
    assert_eq!(list_offset(&mut c, TOPIC, 0, -2).await.offset, local_start);
    assert_eq!(
        read_all_from(&mut c, local_start, end).await,
        (local_start..end).collect::<Vec<_>>()
    );
    b.shutdown().await;
}
