//! Log compaction end to end: the broker's cleaner keeps the newest value per key at its
//! original offset, removes tombstones after delete.retention.ms, compacts __consumer_offsets,
//! rejects null keys on compacted topics, and recovers from a crash at any step of a swap.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::IncrementalAlterConfigsRequest;
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use crate::client::Client;
use crate::harness::*;

/// The cleaner looks for work every 50 ms instead of 15 s.
const CLEANER_SETTINGS: [(&str, &str); 2] = [
    ("log.cleaner.backoff.ms", "50"),
    ("log.cleaner.dedupe.buffer.size", "1048576"),
];

/// A compacted topic with ~1 KiB segments, cleaned as soon as anything is dirty.
const COMPACTED: [(&str, &str); 3] = [
    ("cleanup.policy", "compact"),
    ("internal.segment.bytes", "1024"),
    ("min.cleanable.dirty.ratio", "0.01"),
];

/// One batch of (key, value) records; a `None` key or value is null.
fn keyed_batch(records: &[(Option<&str>, Option<&str>)]) -> Bytes {
    let now = now_ms();
    let records: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, (k, v))| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // The encoder keeps records in one batch while offset - sequence is constant.
            sequence: i as i32 - 1,
            timestamp: now,
            key: k.map(|k| Bytes::from(k.to_string())),
            value: v.map(|v| Bytes::from(v.to_string())),
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

/// Produces `records` as one batch and returns the offset of each record.
async fn produce_keyed(
    c: &mut Client,
    topic: &str,
    records: &[(Option<&str>, Option<&str>)],
) -> Vec<i64> {
    let r = produce(c, topic, 0, keyed_batch(records)).await;
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    (0..records.len() as i64)
        .map(|i| r.base_offset + i)
        .collect()
}

/// A record as a consumer sees it: (offset, key, value).
type Seen = (i64, Option<String>, Option<String>);

/// Every record of partition 0 from offset 0 to the high watermark, walking over batches
/// (emptied batches included) by their last offset.
async fn read_all(c: &mut Client, topic: &str) -> Vec<Seen> {
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let p = fetch(
            c,
            topic,
            0,
            FetchArgs {
                offset,
                ..FetchArgs::default()
            },
        )
        .await;
        assert_eq!(p.error_code, 0, "fetch at {offset}");
        let Some(bytes) = p.records.filter(|b| !b.is_empty()) else {
            break;
        };
        let mut pos = 0;
        while pos + 61 <= bytes.len() {
            let len = i32::from_be_bytes(bytes[pos + 8..pos + 12].try_into().unwrap()) as usize;
            let end = pos + 12 + len;
            if end > bytes.len() {
                break;
            }
            let base = i64::from_be_bytes(bytes[pos..pos + 8].try_into().unwrap());
            let delta = i32::from_be_bytes(bytes[pos + 23..pos + 27].try_into().unwrap());
            let mut batch = bytes.slice(pos..end);
            let set = RecordBatchDecoder::decode(&mut batch).expect("decode batch");
            let text = |b: Option<Bytes>| b.map(|b| String::from_utf8(b.to_vec()).unwrap());
            for r in set.records {
                if r.offset >= offset {
                    out.push((r.offset, text(r.key), text(r.value)));
                }
            }
            offset = offset.max(base + delta as i64 + 1);
            pos = end;
        }
        if offset >= p.high_watermark {
            break;
        }
    }
    out
}

/// Newest (offset, value) per key.
fn newest(records: &[Seen]) -> HashMap<String, (i64, Option<String>)> {
    records
        .iter()
        .filter_map(|(o, k, v)| Some((k.clone()?, (*o, v.clone()))))
        .collect()
}

fn increasing(records: &[Seen]) -> bool {
    records.windows(2).all(|w| w[0].0 < w[1].0)
}

/// Produces `rounds` updates of `keys` keys, five records a batch, then a record big enough
/// to start a new segment, so every update sits in a sealed (cleanable) segment. Returns the
/// newest (offset, value) per key and the offset of the sealing record.
async fn produce_updates(
    c: &mut Client,
    topic: &str,
    keys: usize,
    rounds: usize,
) -> (HashMap<String, (i64, Option<String>)>, i64) {
    let mut expected = HashMap::new();
    for round in 0..rounds {
        let names: Vec<String> = (0..keys).map(|k| format!("key-{k}")).collect();
        let values: Vec<String> = (0..keys).map(|k| format!("value-{k}-{round}")).collect();
        for chunk in (0..keys).collect::<Vec<_>>().chunks(5) {
            let records: Vec<(Option<&str>, Option<&str>)> = chunk
                .iter()
                .map(|&k| (Some(names[k].as_str()), Some(values[k].as_str())))
                .collect();
            let offsets = produce_keyed(c, topic, &records).await;
            for (&k, o) in chunk.iter().zip(offsets) {
                expected.insert(names[k].clone(), (o, Some(values[k].clone())));
            }
        }
    }
    let seal = seal(c, topic).await;
    (expected, seal)
}

/// Appends a record larger than a segment: it rolls the active segment.
async fn seal(c: &mut Client, topic: &str) -> i64 {
    let filler = "f".repeat(1100);
    produce_keyed(c, topic, &[(Some("seal"), Some(&filler))]).await[0]
}

/// Waits until the cleaner's checkpoint of partition 0 reaches `offset`.
async fn wait_cleaned(b: &TestBroker, topic: &str, offset: i64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let at = b.broker().log_cleaner().checkpoint(topic, 0);
        if at.is_some_and(|o| o >= offset) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{topic} not cleaned up to {offset} in 30 s (checkpoint {at:?})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Newest values without the sealing record.
fn without_seal(
    mut m: HashMap<String, (i64, Option<String>)>,
) -> HashMap<String, (i64, Option<String>)> {
    m.remove("seal");
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_keeps_the_newest_value_of_every_key_at_its_original_offset() {
    let b = TestBroker::start_with(&CLEANER_SETTINGS).await;
    let mut c = b.client().await;
    let r = create_topic_with(&mut c, "profiles", 1, &COMPACTED).await;
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    // The cleaner runs while the updates arrive (the ratio threshold is tiny).
    let (expected, seal) = produce_updates(&mut c, "profiles", 20, 10).await;
    let produced = seal + 1;
    assert_eq!(produced, 201);

    wait_cleaned(&b, "profiles", seal).await;
    let after = read_all(&mut c, "profiles").await;
    assert_eq!(without_seal(newest(&after)), expected);
    assert!(increasing(&after));
    assert!(
        after.len() < produced as usize / 2,
        "superseded values were removed: {} of {produced} records left",
        after.len(),
    );
    // Every record left is the newest of its key: nothing older survives a full pass.
    let newest_offsets: Vec<i64> = newest(&after).values().map(|(o, _)| *o).collect();
    assert!(after.iter().all(|(o, ..)| newest_offsets.contains(o)));
    // Appends go on at the log end; the compacted state survives a restart.
    let next = produce_keyed(&mut c, "profiles", &[(Some("key-0"), Some("later"))]).await[0];
    assert_eq!(next, seal + 1);
    drop(c);
    let b = b.restart().await;
    let mut c = b.client().await;
    let reopened = read_all(&mut c, "profiles").await;
    assert_eq!(&reopened[..after.len()], &after[..]);
    assert_eq!(
        newest(&reopened)["key-0"],
        (next, Some("later".to_string()))
    );

    let metrics = http_metrics(&b).await;
    for line in [
        "strata_log_cleaner_passes_total ",
        "strata_log_cleaner_bytes_cleaned_total ",
        "strata_log_cleaner_last_pass_duration_seconds ",
        "strata_partition_cleaner_dirty_ratio{topic=\"profiles\",partition=\"0\"} ",
    ] {
        assert!(metrics.contains(line), "{line} missing from /metrics");
    }
    b.shutdown().await;
}

async fn http_metrics(b: &TestBroker) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(b.admin_addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tombstones_are_kept_for_delete_retention_ms_then_removed() {
    let b = TestBroker::start_with(&CLEANER_SETTINGS).await;
    let mut c = b.client().await;
    let mut configs = COMPACTED.to_vec();
    configs.push(("delete.retention.ms", "1000"));
    let r = create_topic_with(&mut c, "accounts", 1, &configs).await;
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    let (mut expected, _) = produce_updates(&mut c, "accounts", 10, 3).await;
    // Delete the even keys.
    for k in (0..10).step_by(2) {
        let key = format!("key-{k}");
        let o = produce_keyed(&mut c, "accounts", &[(Some(&key), None)]).await[0];
        expected.insert(key, (o, None));
    }
    let seal = seal(&mut c, "accounts").await;
    wait_cleaned(&b, "accounts", seal).await;
    let after = read_all(&mut c, "accounts").await;
    assert_eq!(
        without_seal(newest(&after)),
        expected,
        "tombstones are kept at first"
    );
    let tombstones = after.iter().filter(|(_, _, v)| v.is_none()).count();
    assert_eq!(tombstones, 5);

    // After delete.retention.ms, the next pass (made due by new dirty data) removes them.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let late = produce_keyed(&mut c, "accounts", &[(Some("key-1"), Some("late"))]).await[0];
    let seal = self::seal(&mut c, "accounts").await;
    wait_cleaned(&b, "accounts", seal).await;
    let after = read_all(&mut c, "accounts").await;
    assert!(increasing(&after));
    let live = without_seal(newest(&after));
    let mut want: HashMap<String, (i64, Option<String>)> = expected
        .into_iter()
        .filter(|(_, (_, v))| v.is_some())
        .collect();
    want.insert("key-1".into(), (late, Some("late".into())));
    assert_eq!(
        live, want,
        "tombstones and the values they deleted are gone"
    );
    assert!(after.iter().all(|(_, _, v)| v.is_some()));
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_without_a_key_are_rejected_on_compacted_topics_with_invalid_record() {
    let b = TestBroker::start_with(&CLEANER_SETTINGS).await;
    let mut c = b.client().await;
    for (topic, policy) in [("ck", "compact"), ("ckd", "compact,delete")] {
        let r = create_topic_with(&mut c, topic, 1, &[("cleanup.policy", policy)]).await;
        assert_eq!(r.error_code, 0);
        let batch = keyed_batch(&[(Some("k"), Some("v")), (None, Some("no key"))]);
        let r = produce(&mut c, topic, 0, batch).await;
        assert_eq!(r.error_code, 87, "INVALID_RECORD");
        assert_eq!(r.base_offset, -1);
        let per_record = format!(
            "Compacted topic cannot accept message without key in topic partition {topic}-0"
        );
        assert_eq!(
            r.error_message.as_deref(),
            Some(format!("One or more records have been rejected due to 1 record errors in total, and only showing the first three errors at most: [RecordError(batchIndex=1, message='{per_record}')]").as_str())
        );
        assert_eq!(r.record_errors.len(), 1);
        assert_eq!(r.record_errors[0].batch_index, 1);
        assert_eq!(
            r.record_errors[0].batch_index_error_message.as_deref(),
            Some(per_record.as_str())
        );
        // Nothing was appended; keyed records still are.
        let ok = produce_keyed(&mut c, topic, &[(Some("k"), Some("v"))]).await;
        assert_eq!(ok, [0]);
    }
    // A delete topic accepts null keys.
    create_topic(&mut c, "plain", 1).await;
    let r = produce(&mut c, "plain", 0, keyed_batch(&[(None, Some("v"))])).await;
    assert_eq!(r.error_code, 0);
    b.shutdown().await;
}

async fn alter_topic(c: &mut Client, topic: &str, key: &str, value: &str) {
    let mut a = AlterableConfig::default();
    a.name = str_bytes(key);
    a.config_operation = 0;
    a.value = Some(str_bytes(value));
    let mut r = AlterConfigsResource::default();
    r.resource_type = 2;
    r.resource_name = str_bytes(topic);
    r.configs = vec![a];
    let mut req = IncrementalAlterConfigsRequest::default();
    req.resources = vec![r];
    let resp = c.call(1, &req).await;
    assert_eq!(resp.responses[0].error_code, 0, "alter {key}");
}

/// The segment files (`.log`, `.index`, `.timeindex`) of a partition dir, by name.
fn segment_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| {
            [".log", ".index", ".timeindex"]
                .iter()
                .any(|e| n.ends_with(e))
        })
        .map(|n| {
            let bytes = std::fs::read(dir.join(&n)).unwrap();
            (n, bytes)
        })
        .collect()
}

/// Leaves `dir` as a crash at `step` of a swap would: `.cleaned` written; renamed `.swap`;
/// old segments renamed `.deleted`; `.swap` suffix dropped but `.deleted` not yet removed.
fn crashed_swap(
    dir: &Path,
    before: &BTreeMap<String, Vec<u8>>,
    after: &BTreeMap<String, Vec<u8>>,
    step: &str,
) {
    for name in segment_files(dir).keys() {
        std::fs::remove_file(dir.join(name)).unwrap();
    }
    let unchanged = |n: &String| before.get(n).is_some_and(|b| after.get(n) == Some(b));
    for (name, bytes) in before.iter().filter(|(n, _)| unchanged(n)) {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
    let (old_suffix, new_suffix) = match step {
        "cleaned" => ("", ".cleaned"),
        "swap" => ("", ".swap"),
        "deleted" => (".deleted", ".swap"),
        "renamed" => (".deleted", ""),
        other => panic!("unknown step {other}"),
    };
    for (name, bytes) in before.iter().filter(|(n, _)| !unchanged(n)) {
        std::fs::write(dir.join(format!("{name}{old_suffix}")), bytes).unwrap();
    }
    for (name, bytes) in after.iter().filter(|(n, _)| !unchanged(n)) {
        std::fs::write(dir.join(format!("{name}{new_suffix}")), bytes).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_each_step_of_a_swap_recovers_a_valid_log_with_every_newest_value() {
    let b = TestBroker::start_with(&CLEANER_SETTINGS).await;
    let mut c = b.client().await;
    // Not cleanable (a ratio can never exceed 1) until the files before cleaning are saved.
    let mut configs = COMPACTED.to_vec();
    configs[2] = ("min.cleanable.dirty.ratio", "1");
    let r = create_topic_with(&mut c, "swapped", 1, &configs).await;
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    let (expected, seal) = produce_updates(&mut c, "swapped", 20, 8).await;
    let full = read_all(&mut c, "swapped").await;
    let partition_dir = b.dir.path().join("swapped-0");
    let before = segment_files(&partition_dir);
    alter_topic(&mut c, "swapped", "min.cleanable.dirty.ratio", "0.01").await;
    wait_cleaned(&b, "swapped", seal).await;
    let cleaned = read_all(&mut c, "swapped").await;
    let after = segment_files(&partition_dir);
    assert_ne!(before, after);
    drop(c);

    let mut b = b;
    for step in ["cleaned", "swap", "deleted", "renamed"] {
        let (bf, af, dir) = (before.clone(), after.clone(), partition_dir.clone());
        b = b
            .crash_and_restart(move |_| crashed_swap(&dir, &bf, &af, step))
            .await;
        let mut c = b.client().await;
        let got = read_all(&mut c, "swapped").await;
        assert_eq!(without_seal(newest(&got)), expected, "crash at {step}");
        assert!(increasing(&got), "crash at {step}");
        if step == "cleaned" {
            assert_eq!(got, full, "a crash before the swap keeps the old segments");
        } else {
            assert_eq!(got, cleaned, "a crash after the swap began completes it");
        }
        let leftovers: Vec<String> = std::fs::read_dir(&partition_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".cleaned") || n.ends_with(".swap") || n.ends_with(".deleted"))
            .collect();
        assert!(leftovers.is_empty(), "crash at {step}: {leftovers:?}");
        // The recovered log takes appends at its end.
        let r = produce(&mut c, "swapped", 0, keyed_batch(&[(Some("x"), Some("y"))])).await;
        assert_eq!(
            (r.error_code, r.base_offset),
            (0, seal + 1),
            "crash at {step}"
        );
    }
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_offsets_is_compacted_and_keeps_every_latest_commit() {
    let mut settings = CLEANER_SETTINGS.to_vec();
    settings.extend([
        ("offsets.topic.num.partitions", "1"),
        ("offsets.topic.segment.bytes", "1048576"),
        ("offset.metadata.max.bytes", "200000"),
    ]);
    let b = TestBroker::start_with(&settings).await;
    let mut c = b.client().await;
    create_topic(&mut c, "t", 2).await;
    // ~5 MiB of commits: 100 commits with 50 KB of metadata each, over 5 segments.
    let metadata = "m".repeat(50_000);
    for i in 0..100 {
        let errors = crate::groups::commit(
            &mut c,
            "big",
            -1,
            "",
            "t",
            &[(i % 2, i as i64, -1, metadata.as_str())],
        )
        .await;
        assert!(errors.iter().all(|&e| e == 0), "{errors:?}");
    }
    crate::groups::simple_commit(&mut c, "big", "t", &[(0, 1000), (1, 1001)]).await;
    let offsets = b
        .broker()
        .partition("__consumer_offsets", 0)
        .expect("offsets topic");
    let size_before = offsets.offsets().log_end_offset.0;
    assert!(size_before > 100);
    let seal_at = offsets.with_log(|l| l.cleaner_segments().unwrap().last().unwrap().base_offset);
    wait_cleaned(&b, "__consumer_offsets", seal_at).await;
    let bytes = offsets.with_log(|l| l.size_bytes());
    assert!(bytes < 2 << 20, "compacted to {bytes} bytes");
    drop(c);
    let b = b.restart().await;
    let mut c = b.client().await;
    assert_eq!(
        crate::groups::committed(&mut c, "big", "t", &[0, 1]).await,
        [1000, 1001]
    );
    b.shutdown().await;
}
