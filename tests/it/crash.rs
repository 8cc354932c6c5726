//! Crashes of the real `strata` binary: `kill -9`, and aborts at the crash points of
//! [`strata::failpoint`] (`STRATA_FAILPOINT`). Each test builds the same shape of tiered
//! history (sealed segments in the embedded `file://` bucket, deleted locally by
//! `local.retention.bytes`, the log-start checkpoint not written yet), crashes the broker,
//! starts it again on the same data dir, and checks what a client sees: every acknowledged
//! record readable exactly once and in order from offset 0, ListOffsets EARLIEST still 0, and
//! every segment the bucket held before the crash still there.
//!
//! The scenario is an outside tester's report scaled down (16 KiB segments instead of 1 MiB,
//! a few hundred records of 1 KiB): before the fix the restarted broker took the first local
//! segment as the log start and remote retention deleted the whole tiered history.

use std::net::SocketAddr;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::ProduceRequest;
use kafka_protocol::records::{Compression, RecordBatchDecoder};
use tempfile::TempDir;

use crate::client::{decode_response, encode_frame, Client};
use crate::harness::*;

const TOPIC: &str = "tiered";
const RECORD_BYTES: usize = 1024;
/// Three batches fill a segment.
const RECORDS_PER_BATCH: usize = 5;
const SEGMENT_BYTES: usize = 16 * 1024;
/// How long a debug broker may take to start.
const START_TIMEOUT: Duration = Duration::from_secs(90);

/// One run of the broker binary on a data dir that outlives it.
pub(crate) struct BrokerProcess {
    child: Child,
    pub(crate) kafka_addr: SocketAddr,
    log: PathBuf,
}

fn broker_props(root: &Path, extra: &[&str]) -> String {
    let data = root.join("data");
    [
        "listeners=PLAINTEXT://127.0.0.1:0".to_string(),
        "strata.admin.listener=127.0.0.1:0".to_string(),
        format!("log.dirs={}", data.display()),
        "remote.log.manager.task.interval.ms=100".to_string(),
        "log.retention.check.interval.ms=100".to_string(),
        // The log-start checkpoint is not written while the test runs (Kafka's default is a
        // minute): the crash finds it missing, as the tester's did.
        "log.flush.offset.checkpoint.interval.ms=3600000".to_string(),
        "strata.remote.cache.disk.bytes=0".to_string(),
        "auto.create.topics.enable=false".to_string(),
    ]
    .into_iter()
    .chain(extra.iter().map(|l| l.to_string()))
    .collect::<Vec<_>>()
    .join("\n")
        + "\n"
}

impl BrokerProcess {
    /// Starts `strata serve` on `root` (run `run` logs to `root/strata-<run>.log`), with
    /// `STRATA_FAILPOINT` set to `failpoint` or unset, and waits until it listens.
    pub(crate) async fn start(root: &Path, run: usize, failpoint: Option<&str>) -> BrokerProcess {
        BrokerProcess::start_with(root, run, failpoint, &[]).await
    }

    /// [`BrokerProcess::start`] with more `key=value` settings.
    async fn start_with(
        root: &Path,
        run: usize,
        failpoint: Option<&str>,
        extra: &[&str],
    ) -> BrokerProcess {
        let config = root.join("server.properties");
        std::fs::write(&config, broker_props(root, extra)).expect("write config");
        let log = root.join(format!("strata-{run}.log"));
        let out = std::fs::File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_strata"));
        cmd.arg("serve")
            .arg("--config")
            .arg(&config)
            .current_dir(root)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .env_remove(strata::failpoint::ENV)
            .env_remove("STRATA_LOG");
        if let Some(f) = failpoint {
            cmd.env(strata::failpoint::ENV, f);
        }
        let mut child = cmd.spawn().expect("spawn the strata binary");
        let deadline = Instant::now() + START_TIMEOUT;
        let kafka_addr = loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if let Some(addr) = text
                .lines()
                .filter(|l| l.contains("strata broker started"))
                .flat_map(|l| l.split_whitespace())
                .find_map(|w| w.strip_prefix("kafka_addr="))
                .and_then(|a| a.parse().ok())
            {
                break addr;
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!("broker exited during start-up ({status}):\n{}", tail(&log));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "broker did not start within {START_TIMEOUT:?}:\n{}",
                    tail(&log)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        BrokerProcess {
            child,
            kafka_addr,
            log,
        }
    }

    /// `kill -9`: no shutdown step of any kind runs.
    pub(crate) fn kill_9(&mut self) {
        self.child.kill().expect("SIGKILL the broker");
        let status = self.child.wait().expect("reap the broker");
        assert_eq!(status.signal(), Some(9), "{status}");
    }

    /// SIGTERM: the broker's clean shutdown (final upload, checkpoints, marker).
    fn terminate(&mut self) {
        let ok = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "kill -TERM {}", self.child.id());
    }

    /// Waits for the process to end by itself (a crash point).
    pub(crate) async fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("poll the broker") {
                return status;
            }
            if Instant::now() > deadline {
                panic!(
                    "broker still running after {within:?}:\n{}",
                    tail(&self.log)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub(crate) fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn tempdir() -> TempDir {
    tempfile::Builder::new()
        .prefix("strata-crash-")
        .tempdir()
        .expect("tempdir")
}

fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// The value of record `i`: its index, padded to 1 KiB.
fn value(i: i64) -> Vec<u8> {
    let mut v = format!("record-{i:08}-").into_bytes();
    v.resize(RECORD_BYTES, b'x');
    v
}

fn batch_from(first: i64) -> Bytes {
    let values: Vec<Vec<u8>> = (0..RECORDS_PER_BATCH as i64)
        .map(|i| value(first + i))
        .collect();
    let refs: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
    let now = now_ms();
    batch_with(&refs, &[now; RECORDS_PER_BATCH], Compression::None, None)
}

/// Produces one batch with acks=all; None when the broker is gone (no acknowledgement).
async fn try_produce(c: &mut Client, records: Bytes) -> Option<i64> {
    let req = produce_request(TOPIC, 0, records, -1);
    let id = c.next_correlation_id();
    c.write_raw(&encode_frame(PRODUCE_V, id, &req)).await.ok()?;
    let frame = c.read_frame().await.ok()?;
    let (_, resp) = decode_response::<ProduceRequest>(PRODUCE_V, frame);
    let p = &resp.responses[0].partition_responses[0];
    assert_eq!(p.error_code, 0, "produce: {:?}", p.error_message);
    Some(p.base_offset)
}

/// Produces `batches` batches (or until the broker dies); returns how many records were
/// acknowledged. Record `i` lands at offset `i`.
async fn produce_records(c: &mut Client, batches: usize) -> i64 {
    let mut acked = 0;
    for _ in 0..batches {
        match try_produce(c, batch_from(acked)).await {
            Some(base) => {
                assert_eq!(base, acked, "offsets are dense");
                acked += RECORDS_PER_BATCH as i64;
            }
            None => break,
        }
    }
    acked
}

async fn create_tiered_topic(c: &mut Client) {
    let segment = SEGMENT_BYTES.to_string();
    let r = create_topic_with(
        c,
        TOPIC,
        1,
        &[
            ("remote.storage.enable", "true"),
            ("internal.segment.bytes", &segment),
            ("local.retention.bytes", &segment),
            ("retention.ms", "-1"),
        ],
    )
    .await;
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
}

fn partition_dir(root: &Path) -> PathBuf {
    root.join("data").join(format!("{TOPIC}-0"))
}

/// Base offsets of the local `.log` files.
fn local_segments(root: &Path) -> Vec<i64> {
    let mut v: Vec<i64> = std::fs::read_dir(partition_dir(root))
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

/// Every segment object in the embedded bucket.
fn remote_segments(root: &Path) -> Vec<String> {
    fn walk(d: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "seg") {
                out.push(
                    p.file_name()
                        .unwrap_or_default()
                        .to_string_lossy()
                        .to_string(),
                );
            }
        }
    }
    let mut out = Vec::new();
    walk(&root.join("data").join("objects"), &mut out);
    out.sort();
    out
}

/// Whether the log-start checkpoint has an entry for the topic.
fn log_start_checkpointed(root: &Path) -> bool {
    std::fs::read_to_string(root.join("data").join("log-start-offset-checkpoint"))
        .is_ok_and(|t| t.lines().any(|l| l.starts_with(&format!("{TOPIC} "))))
}

async fn wait_for(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Reads the partition from offset 0 to `end`: (offset, value) of each record.
async fn read_history(c: &mut Client, end: i64) -> Vec<(i64, Bytes)> {
    read_history_from(c, 0, end).await
}

async fn read_history_from(c: &mut Client, from: i64, end: i64) -> Vec<(i64, Bytes)> {
    let mut out: Vec<(i64, Bytes)> = Vec::new();
    let mut next = from;
    let deadline = Instant::now() + Duration::from_secs(60);
    while next < end {
        assert!(Instant::now() < deadline, "reading stuck at offset {next}");
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
        let Some(mut b) = p.records.clone().filter(|b| !b.is_empty()) else {
            continue;
        };
        for set in RecordBatchDecoder::decode_all(&mut b).expect("decode fetched batches") {
            for r in set.records {
                if r.offset >= next {
                    out.push((r.offset, r.value.unwrap_or_default()));
                }
            }
        }
        if let Some((last, _)) = out.last() {
            next = last + 1;
        }
    }
    out
}

/// What a client must see after the restart: the whole history from offset 0, each record
/// once, in order, at least every acknowledged one; EARLIEST 0; LATEST its end.
async fn check_history(c: &mut Client, acked: i64) -> i64 {
    let earliest = list_offset(c, TOPIC, 0, -2).await;
    assert_eq!(
        (earliest.error_code, earliest.offset),
        (0, 0),
        "ListOffsets EARLIEST after the restart"
    );
    let latest = list_offset(c, TOPIC, 0, -1).await.offset;
    assert!(
        latest >= acked,
        "high watermark {latest} < acknowledged {acked}"
    );
    let history = read_history(c, latest).await;
    assert_eq!(history.len() as i64, latest, "one record per offset");
    for (i, (offset, v)) in history.iter().enumerate() {
        assert_eq!(*offset, i as i64, "in order, exactly once");
        assert_eq!(v.as_ref(), value(i as i64).as_slice(), "record {i}");
    }
    latest
}

/// The bucket's segment objects that hold an offset at or past `offset`: all but those whose
/// next segment starts at or below it (object names start with the base offset).
fn segments_reaching(objects: &[String], offset: i64) -> Vec<String> {
    let base = |name: &String| -> i64 {
        name.split('-')
            .next()
            .and_then(|b| b.parse().ok())
            .unwrap_or(i64::MAX)
    };
    let mut sorted: Vec<&String> = objects.iter().collect();
    sorted.sort_by_key(|n| base(n));
    sorted
        .iter()
        .enumerate()
        .filter(|(i, _)| sorted.get(i + 1).is_none_or(|next| base(next) > offset))
        .map(|(_, n)| (*n).clone())
        .collect()
}

fn assert_still_in_bucket(root: &Path, before: &[String]) {
    let after = remote_segments(root);
    let lost: Vec<&String> = before.iter().filter(|k| !after.contains(k)).collect();
    assert!(
        lost.is_empty(),
        "remote segments deleted after the restart: {lost:?}"
    );
}

fn assert_no_remote_deletes(b: &BrokerProcess) {
    let log = b.log_text();
    assert!(
        !log.contains("deleted remote segments past retention"),
        "remote retention ran on the restarted broker:\n{}",
        tail(&b.log)
    );
}

/// Produces the tiered history: `batches` batches, then waits until all but the last two
/// segments are only in the bucket. Returns (acknowledged records, bucket contents).
async fn tiered_history(b: &BrokerProcess, root: &Path, batches: usize) -> (i64, Vec<String>) {
    let mut c = Client::connect(b.kafka_addr).await;
    create_tiered_topic(&mut c).await;
    let acked = produce_records(&mut c, batches).await;
    assert_eq!(acked, (batches * RECORDS_PER_BATCH) as i64);
    wait_for(
        "sealed segments tiered and deleted locally",
        Duration::from_secs(60),
        || {
            let local = local_segments(root);
            local.len() <= 2 && local.first().is_some_and(|&f| f > 0)
        },
    )
    .await;
    let bucket = remote_segments(root);
    assert!(bucket.len() >= 10, "tiered history: {bucket:?}");
    assert!(
        !log_start_checkpointed(root),
        "the shape needs the log-start checkpoint not written yet"
    );
    (acked, bucket)
}

/// The tester's report: kill -9 before the first log-start checkpoint, restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_before_the_log_start_checkpoint_keeps_the_whole_tiered_history() {
    let root = tempdir();
    let root = root.path();
    let mut b = BrokerProcess::start(root, 1, None).await;
    // 300 KiB in 16 KiB segments: 20 segments, all but the last ones only in the bucket.
    let (acked, bucket) = tiered_history(&b, root, 60).await;
    let local_start = local_segments(root)[0];
    b.kill_9();

    let b = BrokerProcess::start(root, 2, None).await;
    let mut c = Client::connect(b.kafka_addr).await;
    // At once: the log start comes from the manifest, not the first local segment.
    assert!(local_start > 0);
    assert_eq!(list_offset(&mut c, TOPIC, 0, -2).await.offset, 0);
    // Let remote retention run: the tester's broker deleted everything within a second.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_no_remote_deletes(&b);
    assert_still_in_bucket(root, &bucket);
    check_history(&mut c, acked).await;
}

/// The crash point at "log-start checkpoint about to be written", reached by a clean shutdown
/// (SIGTERM uploads the rest, closes the logs and writes the checkpoints): the restart finds
/// the recovery point but no log start, and no clean-shutdown marker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_before_the_log_start_checkpoint_keeps_the_whole_tiered_history() {
    let root = tempdir();
    let root = root.path();
    let mut b = BrokerProcess::start(root, 1, Some(strata::failpoint::CHECKPOINT_LOG_START)).await;
    let (acked, _) = tiered_history(&b, root, 60).await;
    b.terminate();
    let status = b.wait_exit(Duration::from_secs(60)).await;
    assert_eq!(
        status.signal(),
        Some(6),
        "aborted at the crash point: {status}"
    );
    assert!(b.log_text().contains("crash point checkpoint.log_start"));
    assert!(!log_start_checkpointed(root));
    // The shutdown uploaded the active segment too.
    let bucket = remote_segments(root);

    let b = BrokerProcess::start(root, 2, None).await;
    let mut c = Client::connect(b.kafka_addr).await;
    assert_eq!(list_offset(&mut c, TOPIC, 0, -2).await.offset, 0);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_no_remote_deletes(&b);
    assert_still_in_bucket(root, &bucket);
    check_history(&mut c, acked).await;
}

/// The crash point at "manifest committed, local segment not yet deleted", at the fourth
/// commit (three segments are only remote by then), while the producer may still be sending:
/// every acknowledged record survives, the restarted broker continues the manifest, and local
/// retention deletes the covered segment afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_after_a_manifest_commit_keeps_the_whole_tiered_history() {
    let root = tempdir();
    let root = root.path();
    let point = format!("{}:4", strata::failpoint::TIERING_MANIFEST_COMMITTED);
    let mut b = BrokerProcess::start(root, 1, Some(&point)).await;
    let mut c = Client::connect(b.kafka_addr).await;
    create_tiered_topic(&mut c).await;
    // Until the broker dies (produce stops at the first unanswered request).
    let acked = produce_records(&mut c, 400).await;
    let status = b.wait_exit(Duration::from_secs(60)).await;
    assert_eq!(
        status.signal(),
        Some(6),
        "aborted at the crash point: {status}"
    );
    assert!(b
        .log_text()
        .contains("crash point tiering.manifest_committed (hit 4)"));
    let bucket = remote_segments(root);
    assert_eq!(bucket.len(), 4, "four segments committed: {bucket:?}");
    assert!(
        local_segments(root)[0] > 0,
        "local retention deleted what the first commits covered"
    );
    assert!(!log_start_checkpointed(root));

    let b = BrokerProcess::start(root, 2, None).await;
    let mut c = Client::connect(b.kafka_addr).await;
    assert_eq!(list_offset(&mut c, TOPIC, 0, -2).await.offset, 0);
    // The restarted broker uploads the rest and deletes the covered local segments.
    wait_for("the rest tiered", Duration::from_secs(60), || {
        local_segments(root).len() <= 2
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_no_remote_deletes(&b);
    assert_still_in_bucket(root, &bucket);
    check_history(&mut c, acked).await;
}

/// The crash point at "uploaded, manifest not committed", at the third upload: the bucket
/// holds an object its manifest does not name. The restarted broker uploads that segment
/// again under a new key, the scrubber removes the orphan after its grace period, and
/// nothing committed is touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_between_upload_and_manifest_commit_leaves_an_orphan_the_restart_scrubs() {
    let root = tempdir();
    let root = root.path();
    let point = format!("{}:3", strata::failpoint::TIERING_UPLOADED);
    let mut b = BrokerProcess::start(root, 1, Some(&point)).await;
    let mut c = Client::connect(b.kafka_addr).await;
    create_tiered_topic(&mut c).await;
    let acked = produce_records(&mut c, 400).await;
    let status = b.wait_exit(Duration::from_secs(60)).await;
    assert_eq!(
        status.signal(),
        Some(6),
        "aborted at the crash point: {status}"
    );
    let bucket = remote_segments(root);
    assert_eq!(bucket.len(), 3, "two committed, one orphan: {bucket:?}");
    let manifest = manifest_text(root);
    let orphans: Vec<&String> = bucket.iter().filter(|k| !manifest.contains(*k)).collect();
    assert_eq!(orphans.len(), 1, "{bucket:?} against {manifest}");
    let orphan = orphans[0].clone();
    let committed: Vec<String> = bucket.iter().filter(|k| **k != orphan).cloned().collect();

    let b = BrokerProcess::start_with(
        root,
        2,
        None,
        &[
            "strata.remote.orphan.grace.ms=1000",
            "strata.remote.scrub.interval.ms=200",
        ],
    )
    .await;
    let mut c = Client::connect(b.kafka_addr).await;
    assert_eq!(list_offset(&mut c, TOPIC, 0, -2).await.offset, 0);
    wait_for(
        "the orphan scrubbed and the rest tiered",
        Duration::from_secs(60),
        || !remote_segments(root).contains(&orphan) && local_segments(root).len() <= 2,
    )
    .await;
    assert!(b.log_text().contains("removed orphaned remote objects"));
    assert_no_remote_deletes(&b);
    assert_still_in_bucket(root, &committed);
    check_history(&mut c, acked).await;
}

/// Remote retention moved the log start (here DeleteRecords, applied to the manifest), then
/// kill -9 before the log-start checkpoint: the restarted broker answers EARLIEST with the
/// manifest's start at once: not 0, and not the first local segment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_after_remote_retention_restarts_at_the_manifests_log_start() {
    let root = tempdir();
    let root = root.path();
    let mut b = BrokerProcess::start(root, 1, None).await;
    let (acked, _) = tiered_history(&b, root, 60).await;
    let mut c = Client::connect(b.kafka_addr).await;
    let cut = acked / 2;
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
    wait_for(
        "the manifest to carry the cut",
        Duration::from_secs(30),
        || {
            serde_json::from_str::<serde_json::Value>(&manifest_text(root))
                .is_ok_and(|m| m["log_start_offset"].as_i64() == Some(cut))
        },
    )
    .await;
    // The segments wholly below the cut are the old broker's to delete, after the manifest
    // moved: it may still be deleting them when it is killed. Every other one must stay.
    let bucket = segments_reaching(&remote_segments(root), cut);
    let local_start = local_segments(root)[0];
    assert!(local_start > cut);
    assert!(!log_start_checkpointed(root));
    b.kill_9();

    let b = BrokerProcess::start(root, 2, None).await;
    let mut c = Client::connect(b.kafka_addr).await;
    assert_eq!(list_offset(&mut c, TOPIC, 0, -2).await.offset, cut);
    let below = fetch(
        &mut c,
        TOPIC,
        0,
        FetchArgs {
            offset: cut - 1,
            ..Default::default()
        },
    )
    .await;
    assert_eq!(
        below.error_code, 1,
        "OFFSET_OUT_OF_RANGE below the log start"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_no_remote_deletes(&b);
    assert_still_in_bucket(root, &bucket);
    let history = read_history_from(&mut c, cut, acked).await;
    assert_eq!(history.len() as i64, acked - cut);
    for (i, (offset, v)) in history.iter().enumerate() {
        let want = cut + i as i64;
        assert_eq!(*offset, want, "in order, exactly once");
        assert_eq!(v.as_ref(), value(want).as_slice(), "record {want}");
    }
}

/// The crash points of rehydration: after a download (only temporary files exist) and after
/// the third segment is renamed into place in front of the log. The restart removes the
/// temporary files, opens the installed segments like any other, brings the rest back, and a
/// client reads every acknowledged record once, in order, with the bucket untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborts_during_rehydration_keep_the_whole_history() {
    use strata::failpoint::{TIERING_REHYDRATED, TIERING_REHYDRATE_DOWNLOADED};
    for (point, hit) in [(TIERING_REHYDRATE_DOWNLOADED, 1), (TIERING_REHYDRATED, 3)] {
        let root = tempdir();
        let root = root.path();
        let mut b = BrokerProcess::start(root, 1, Some(&format!("{point}:{hit}"))).await;
        let (acked, bucket) = tiered_history(&b, root, 60).await;
        let before = local_segments(root);
        let mut c = Client::connect(b.kafka_addr).await;
        for (name, value) in [
            ("local.retention.bytes", "-1"),
            ("strata.remote.rehydrate.enable", "true"),
        ] {
            let (code, message) =
                crate::tiering::set_topic_config(&mut c, TOPIC, name, value).await;
            assert_eq!(code, 0, "{name}: {message}");
        }
        let status = b.wait_exit(Duration::from_secs(60)).await;
        assert_eq!(status.signal(), Some(6), "aborted at {point}: {status}");
        let temp: Vec<String> = std::fs::read_dir(partition_dir(root))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().to_string())
            .filter(|n| n.ends_with(".rehydrate.tmp"))
            .collect();
        let after = local_segments(root);
        if point == TIERING_REHYDRATE_DOWNLOADED {
            assert!(!temp.is_empty(), "the download is on disk");
            assert_eq!(after, before, "nothing installed yet");
        } else {
            assert!(temp.is_empty(), "{temp:?}");
            assert_eq!(after.len(), before.len() + 3, "{after:?}");
        }

        let b = BrokerProcess::start(root, 2, None).await;
        let mut c = Client::connect(b.kafka_addr).await;
        wait_for(
            "every segment back on disk",
            Duration::from_secs(60),
            || local_segments(root).first() == Some(&0),
        )
        .await;
        check_history(&mut c, acked).await;
        assert_still_in_bucket(root, &bucket);
        let leftovers = std::fs::read_dir(partition_dir(root))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .count();
        assert_eq!(leftovers, 0, "temporary files after the restart");
    }
}

/// The partition's manifest as stored in the embedded bucket.
fn manifest_text(root: &Path) -> String {
    fn find(d: &Path) -> Option<PathBuf> {
        for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                if let Some(f) = find(&p) {
                    return Some(f);
                }
            } else if p.file_name().is_some_and(|n| n == "manifest.json") {
                return Some(p);
            }
        }
        None
    }
    find(&root.join("data").join("objects"))
        .and_then(|p| std::fs::read_to_string(p).ok())
        .unwrap_or_default()
}
