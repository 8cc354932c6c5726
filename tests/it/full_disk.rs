//! A full disk: a real 64 MiB filesystem (a tmpfs, and ext4 on a loop-mounted image) as
//! `log.dirs`, filled by a produce loop until the broker answers KAFKA_STORAGE_ERROR. Every acknowledged record must be readable exactly once at its
//! acknowledged offset, in order, with no record of a failed produce anywhere, after space
//! comes back, after a clean restart and after a `kill -9`. DeleteTopics on the full disk
//! either deletes the topic (and frees its space) or leaves it whole.
//!
//! The broker runs as a spawned `strata serve` process, so the test can SIGTERM and SIGKILL it.
//! Mounting needs root (CI runs as root); elsewhere the test prints why it skipped.

use std::collections::HashSet;
use std::fs;
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{DeleteTopicsRequest, MetadataRequest, MetadataResponse};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use crate::client::Client;
use crate::harness::*;

const TOPIC: &str = "full";
const VICTIM: &str = "victim";
const KAFKA_STORAGE_ERROR: i16 = 56;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;

/// A small filesystem mounted on a temp dir (a tmpfs, or ext4 on a loop-mounted image file),
/// unmounted on drop (also when the test fails).
struct MountedFs {
    mount_point: tempfile::TempDir,
    /// The ext4 image's dir (removed after the unmount).
    _image_dir: Option<tempfile::TempDir>,
}

#[derive(Debug, Clone, Copy)]
enum FsKind {
    Tmpfs,
    Ext4,
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl MountedFs {
    fn mount(kind: FsKind, size_mib: u64) -> Result<MountedFs, String> {
        let mount_point = tempfile::Builder::new()
            .prefix("strata-full-disk-")
            .tempdir()
            .map_err(|e| format!("cannot create a mount point: {e}"))?;
        let image_dir = match kind {
            FsKind::Tmpfs => {
                run(Command::new("mount")
                    .args(["-t", "tmpfs", "-o", &format!("size={size_mib}m"), "tmpfs"])
                    .arg(mount_point.path()))?;
                None
            }
            FsKind::Ext4 => {
                let image_dir = tempfile::Builder::new()
                    .prefix("strata-full-disk-image-")
                    .tempdir()
                    .map_err(|e| format!("cannot create the image dir: {e}"))?;
                let image = image_dir.path().join("ext4.img");
                let f = fs::File::create(&image).map_err(|e| format!("image: {e}"))?;
                f.set_len(size_mib << 20)
                    .map_err(|e| format!("image: {e}"))?;
                run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&image))?;
                run(Command::new("mount")
                    .args(["-o", "loop"])
                    .arg(&image)
                    .arg(mount_point.path()))?;
                Some(image_dir)
            }
        };
        Ok(MountedFs {
            mount_point,
            _image_dir: image_dir,
        })
    }

    fn path(&self) -> &Path {
        self.mount_point.path()
    }
}

impl Drop for MountedFs {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(self.mount_point.path())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            // Still busy (a broker that did not exit): detach it so nothing stays mounted.
            let _ = Command::new("umount")
                .arg("-l")
                .arg(self.mount_point.path())
                .status();
        }
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A `strata serve` process; killed (SIGKILL) on drop if still running.
struct Spawned {
    child: Child,
    kafka_addr: SocketAddr,
}

impl Spawned {
    fn start(data_dir: &Path, work_dir: &Path) -> Spawned {
        let port = free_port();
        let admin_port = free_port();
        let config = work_dir.join("server.properties");
        fs::write(
            &config,
            format!(
                "listeners=PLAINTEXT://127.0.0.1:{port}\nadvertised.listeners=PLAINTEXT://127.0.0.1:{port}\n\
                 strata.admin.listener=127.0.0.1:{admin_port}\nlog.dirs={}\n\
                 auto.create.topics.enable=false\n",
                data_dir.display()
            ),
        )
        .expect("write server.properties");
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(work_dir.join("strata.log"))
            .expect("broker log");
        let child = Command::new(env!("CARGO_BIN_EXE_strata"))
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .expect("spawn strata");
        let kafka_addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
        let mut spawned = Spawned { child, kafka_addr };
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Ok(Some(status)) = spawned.child.try_wait() {
                panic!(
                    "strata exited during start-up ({status}); see {}",
                    work_dir.join("strata.log").display()
                );
            }
            if TcpStream::connect(kafka_addr).is_ok() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "strata did not start within 120 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        spawned
    }

    async fn client(&self) -> Client {
        Client::connect(self.kafka_addr).await
    }

    /// SIGTERM (a clean shutdown) and wait for the exit.
    fn terminate(mut self) {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status();
        assert!(sent.is_ok_and(|s| s.success()), "kill -TERM {pid}");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    assert!(status.success(), "clean shutdown exits 0, got {status}");
                    return;
                }
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                _ => panic!("strata did not shut down within 60 s"),
            }
        }
    }

    /// `kill -9` and wait for the exit.
    fn kill9(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reap");
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// What the test knows about the topic: every acknowledged (offset, value), and the values of
/// produces that failed.
#[derive(Default)]
struct Ledger {
    acked: Vec<(i64, Bytes)>,
    failed: HashSet<Bytes>,
    produces: usize,
}

fn batch_of(values: &[Bytes]) -> Bytes {
    let now = now_ms();
    let records: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, v)| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // The encoder keeps one batch while offset - sequence is constant.
            sequence: -1 + i as i32,
            timestamp: now,
            key: None,
            value: Some(v.clone()),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        records.iter(),
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .expect("encode batch");
    buf.freeze()
}

impl Ledger {
    /// Produces `count` unique records in one batch; returns the error code.
    async fn produce(&mut self, c: &mut Client, count: usize, value_len: usize) -> i16 {
        let n = self.produces;
        self.produces += 1;
        let values: Vec<Bytes> = (0..count)
            .map(|i| {
                let mut v = format!("produce-{n:06}-record-{i:04}-").into_bytes();
                v.resize(value_len.max(v.len()), b'.');
                Bytes::from(v)
            })
            .collect();
        let r = produce(c, TOPIC, 0, batch_of(&values)).await;
        match r.error_code {
            0 => {
                for (i, v) in values.into_iter().enumerate() {
                    self.acked.push((r.base_offset + i as i64, v));
                }
            }
            KAFKA_STORAGE_ERROR => self.failed.extend(values),
            other => panic!(
                "produce {n}: unexpected error {other}: {:?}",
                r.error_message
            ),
        }
        r.error_code
    }

    /// Produces until acknowledged, retrying storage errors for up to 15 s (an offline
    /// partition repairs itself on a later produce).
    async fn produce_acked(&mut self, c: &mut Client, count: usize, value_len: usize) {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if self.produce(c, count, value_len).await == 0 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "produces still fail with KAFKA_STORAGE_ERROR 15 s after space was freed"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Reads the whole partition and checks it is exactly the acknowledged records: each once,
    /// at its offset, offsets contiguous from 0 up to the high watermark, nothing failed.
    async fn check(&self, c: &mut Client, when: &str) {
        let mut acked = self.acked.clone();
        acked.sort_by_key(|(o, _)| *o);
        for (i, (o, _)) in acked.iter().enumerate() {
            assert_eq!(*o, i as i64, "{when}: acknowledged offsets are contiguous from 0 (two produces were acknowledged at one offset, or one skipped)");
        }
        let end = acked.len() as i64;
        let mut seen: Vec<(i64, Bytes)> = Vec::new();
        let mut offset = 0;
        let mut high_watermark = -1;
        while offset < end {
            let p = fetch(
                c,
                TOPIC,
                0,
                FetchArgs {
                    offset,
                    partition_max_bytes: 1 << 20,
                    ..FetchArgs::default()
                },
            )
            .await;
            assert_eq!(p.error_code, 0, "{when}: fetch at {offset}");
            high_watermark = p.high_watermark;
            let mut records = p.records.clone().unwrap_or_default();
            assert!(
                !records.is_empty(),
                "{when}: a fetch at {offset} returned nothing, but {end} records were acknowledged (high watermark {})",
                p.high_watermark
            );
            let sets = RecordBatchDecoder::decode_all(&mut records).unwrap_or_else(|e| {
                panic!("{when}: the batches fetched at {offset} do not decode: {e}")
            });
            for set in sets {
                for r in set.records {
                    if r.offset >= offset {
                        seen.push((r.offset, r.value.clone().unwrap_or_default()));
                    }
                }
            }
            offset = seen.last().map(|(o, _)| o + 1).unwrap_or(offset);
        }
        for (o, v) in &seen {
            assert!(
                !self.failed.contains(v),
                "{when}: offset {o} holds a record of a produce that failed: {:?}",
                String::from_utf8_lossy(&v[..v.len().min(40)])
            );
        }
        assert_eq!(seen.len(), acked.len(), "{when}: record count");
        for ((o, v), (ao, av)) in seen.iter().zip(&acked) {
            assert_eq!(o, ao, "{when}: offsets");
            assert!(
                v == av,
                "{when}: the record at {o} is not the one acknowledged there"
            );
        }
        let listed = list_offset(c, TOPIC, 0, -1).await;
        assert_eq!(listed.offset, end, "{when}: latest offset (high watermark)");
        if high_watermark >= 0 {
            assert_eq!(high_watermark, end, "{when}: high watermark");
        }
    }
}

async fn metadata_error(c: &mut Client, topic: &str) -> i16 {
    let mut t = MetadataRequestTopic::default();
    t.name = Some(name(topic));
    let mut req = MetadataRequest::default();
    req.topics = Some(vec![t]);
    req.allow_auto_topic_creation = false;
    let resp: MetadataResponse = c.call(12, &req).await;
    resp.topics[0].error_code
}

async fn delete_topic(c: &mut Client, topic: &str) -> i16 {
    let mut req = DeleteTopicsRequest::default();
    req.topic_names = vec![name(topic)];
    req.timeout_ms = 10_000;
    let resp = c.call(5, &req).await;
    resp.responses[0].error_code
}

/// The victim topic is either wholly gone (metadata and files) or wholly there (metadata and
/// its records).
async fn check_victim(c: &mut Client, data: &Path, deleted: bool, records: usize, when: &str) {
    let present_dirs: Vec<String> = fs::read_dir(data)
        .expect("list data dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with(&format!("{VICTIM}-")))
        .collect();
    if deleted {
        assert_eq!(
            metadata_error(c, VICTIM).await,
            UNKNOWN_TOPIC_OR_PARTITION,
            "{when}: a deleted topic stays deleted"
        );
        assert!(
            present_dirs.is_empty(),
            "{when}: the deleted topic's files are gone: {present_dirs:?}"
        );
    } else {
        assert_eq!(
            metadata_error(c, VICTIM).await,
            0,
            "{when}: DeleteTopics failed, so the topic stays"
        );
        let p = fetch(c, VICTIM, 0, FetchArgs::default()).await;
        assert_eq!(p.error_code, 0, "{when}");
        assert_eq!(
            p.high_watermark, records as i64,
            "{when}: the topic's records stay"
        );
    }
}

/// Prints the tail of the brokers' log if the test fails.
struct LogTailOnPanic(PathBuf);

impl Drop for LogTailOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let text = fs::read_to_string(&self.0).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            eprintln!("--- tail of {} ---", self.0.display());
            for l in &lines[lines.len().saturating_sub(60)..] {
                eprintln!("{l}");
            }
        }
    }
}

/// How many lines of the brokers' log contain `needle`.
fn log_lines_with(log: &Path, needle: &str) -> usize {
    fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(needle))
        .count()
}

fn fill(path: &Path, bytes: usize) {
    let mut f = fs::File::create(path).expect("create filler");
    let chunk = vec![0xa5u8; 1 << 20];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len());
        f.write_all(&chunk[..n]).expect("write filler");
        left -= n;
    }
    f.sync_all().expect("sync filler");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_tmpfs_loses_no_acknowledged_record_and_shows_no_failed_one() {
    full_disk(
        FsKind::Tmpfs,
        "a_full_tmpfs_loses_no_acknowledged_record_and_shows_no_failed_one",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_ext4_disk_loses_no_acknowledged_record_and_shows_no_failed_one() {
    full_disk(
        FsKind::Ext4,
        "a_full_ext4_disk_loses_no_acknowledged_record_and_shows_no_failed_one",
    )
    .await;
}

/// The scenario of the module docs on a 64 MiB filesystem of `kind`.
async fn full_disk(kind: FsKind, test: &str) {
    let fs_guard = match MountedFs::mount(kind, 64) {
        Ok(m) => m,
        Err(reason) => {
            println!("SKIPPED {test}: cannot mount a 64 MiB {kind:?} ({reason}); it needs root");
            return;
        }
    };
    let work = tempfile::Builder::new()
        .prefix("strata-full-disk-work-")
        .tempdir()
        .expect("work dir");
    let data: PathBuf = fs_guard.path().join("data");
    fs::create_dir_all(&data).expect("data dir");
    let filler = fs_guard.path().join("filler");
    let broker_log = work.path().join("strata.log");
    let _tail = LogTailOnPanic(broker_log.clone());

    let broker = Spawned::start(&data, work.path());
    let mut c = broker.client().await;
    // Small segments, so segments roll (and producer snapshots are written) while the disk
    // fills: 4 MiB on tmpfs, 1 MiB (the smallest Kafka allows) on ext4.
    let segment_bytes = match kind {
        FsKind::Tmpfs => "4194304",
        FsKind::Ext4 => "1048576",
    };
    let r = create_topic_with(&mut c, TOPIC, 1, &[("segment.bytes", segment_bytes)]).await;
    assert_eq!(r.error_code, 0, "create {TOPIC}");
    create_topic(&mut c, VICTIM, 1).await;
    let victim_records = 40;
    for _ in 0..victim_records / 10 {
        let values: Vec<Bytes> = (0..10).map(|_| Bytes::from(vec![b'v'; 50_000])).collect();
        let r = produce(&mut c, VICTIM, 0, batch_of(&values)).await;
        assert_eq!(r.error_code, 0, "produce to {VICTIM}");
    }
    fill(&filler, 36 << 20);

    // Fill the rest with batches of varying size until storage errors keep coming; smaller
    // batches after a failed big one may still fit.
    let mut ledger = Ledger::default();
    let sizes = [
        (120usize, 997usize),
        (7, 1013),
        (45, 1500),
        (1, 700),
        (300, 333),
    ];
    let mut storage_errors = 0;
    let started = Instant::now();
    for round in 0.. {
        let (count, len) = sizes[round % sizes.len()];
        if ledger.produce(&mut c, count, len).await == KAFKA_STORAGE_ERROR {
            storage_errors += 1;
        }
        if storage_errors >= 40 {
            break;
        }
        assert!(round < 20_000, "the disk never filled");
    }
    let acked_when_full = ledger.acked.len();
    println!(
        "{kind:?}: filled the disk: {} produces, {acked_when_full} records acknowledged, {} records refused, in {:?}",
        ledger.produces,
        ledger.failed.len(),
        started.elapsed()
    );
    assert!(acked_when_full > 0 && !ledger.failed.is_empty());

    // DeleteTopics on the full disk: all or nothing.
    let deleted = match delete_topic(&mut c, VICTIM).await {
        0 => true,
        KAFKA_STORAGE_ERROR => false,
        other => panic!("DeleteTopics answered {other}"),
    };
    println!(
        "{kind:?}: DeleteTopics on the full disk: {}",
        if deleted { "deleted" } else { "refused" }
    );
    check_victim(
        &mut c,
        &data,
        deleted,
        victim_records,
        "after DeleteTopics on the full disk",
    )
    .await;
    // A few more produces while (nearly) full: some may fit in the space the deletion freed.
    for round in 0..20 {
        let (count, len) = sizes[round % sizes.len()];
        ledger.produce(&mut c, count, len).await;
    }

    fs::remove_file(&filler).expect("free space");
    for _ in 0..20 {
        ledger.produce_acked(&mut c, 10, 1000).await;
    }
    ledger.check(&mut c, "after space came back").await;
    drop(c);

    broker.terminate();
    let broker = Spawned::start(&data, work.path());
    let mut c = broker.client().await;
    ledger.check(&mut c, "after a clean restart").await;
    check_victim(
        &mut c,
        &data,
        deleted,
        victim_records,
        "after a clean restart",
    )
    .await;
    for _ in 0..5 {
        ledger.produce_acked(&mut c, 10, 1000).await;
    }
    drop(c);

    broker.kill9();
    let broker = Spawned::start(&data, work.path());
    let mut c = broker.client().await;
    ledger.check(&mut c, "after kill -9").await;
    check_victim(&mut c, &data, deleted, victim_records, "after kill -9").await;
    drop(c);
    broker.terminate();
    println!(
        "{kind:?}: checked {} acknowledged records ({} refused) after space came back, a clean restart and kill -9; \
         the broker logged {} failed appends and took a log offline {} times",
        ledger.acked.len(),
        ledger.failed.len(),
        log_lines_with(&broker_log, "append failed"),
        log_lines_with(&broker_log, "log offline"),
    );
    drop(fs_guard);
}
