//! Micro-benchmarks of the broker's hot paths, without the network:
//! - `log_append/lz4_16KiB`: `Log::append_as_leader` of ~16 KiB lz4-compressed batches (CRC
//!   check, producer-state check, offset assignment, write to the page cache, index update).
//! - `offset_index/lookup`: `OffsetIndex::lookup` in a 100k-entry index.
//! - `batch_validate/lz4_16KiB`: `BatchHeader::parse` + `validate` (CRC32C over the batch).
//! - `acl_authorize/<n>_acls`: one ACL check (what every request does per topic, group or
//!   transactional id) with n ACLs loaded: literal ACLs on other topics and users, prefixed
//!   ACLs, and the one that allows it.
//!
//! Run: `cargo bench --bench log_micro -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use strata::config::TopicConfig;
use strata::log::batch::BatchHeader;
use strata::log::index::OffsetIndex;
use strata::log::{LoadOptions, Log};

const TARGET_BATCH: usize = 16 * 1024;

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn encode(records: &[Record]) -> Bytes {
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        records.iter(),
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::Lz4,
        },
    )
    .expect("encode");
    buf.freeze()
}

/// One lz4 batch of JSON-like records (compressible, like typical event payloads), grown
/// until the compressed batch reaches 16 KiB.
fn lz4_batch_16k() -> Bytes {
    let now = now_ms();
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut rand = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut records = Vec::new();
    loop {
        let i = records.len() as i64;
        let value = format!(
            "{{\"id\":{},\"user\":\"u{:08x}\",\"amount\":{}.{:02},\"ts\":{},\"tags\":[\"t{}\",\"t{}\"],\"nonce\":\"{:016x}{:016x}\"}}",
            i,
            rand() as u32,
            rand() % 10_000,
            rand() % 100,
            now + i,
            rand() % 50,
            rand() % 50,
            rand(),
            rand()
        );
        records.push(Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i,
            sequence: i as i32 - 1,
            timestamp: now + i,
            key: Some(Bytes::from(format!("key-{}", rand() % 1000))),
            value: Some(Bytes::from(value)),
            headers: Default::default(),
        });
        if records.len() % 16 == 0 {
            let b = encode(&records);
            if b.len() >= TARGET_BATCH {
                return b;
            }
        }
    }
}

fn open_log(dir: &std::path::Path) -> Log {
    let config = TopicConfig {
        segment_bytes: 64 << 20,
        ..TopicConfig::default()
    };
    Log::open(
        dir,
        config,
        LoadOptions {
            clean_shutdown: true,
            recovery_point: None,
            log_start_offset: None,
            now_ms: now_ms(),
        },
    )
    .expect("open log")
}

fn bench_append(c: &mut Criterion) {
    let batch = lz4_batch_16k();
    let records = BatchHeader::parse(&batch).expect("parse").records_count;
    eprintln!(
        "batch: {} bytes on the wire, {records} records, lz4",
        batch.len()
    );
    let mut g = c.benchmark_group("log_append");
    g.throughput(Throughput::Bytes(batch.len() as u64));
    g.bench_function("lz4_16KiB", |b| {
        let root = tempfile::tempdir().expect("tempdir");
        let mut generation = 0u32;
        let mut dir = root.path().join(format!("bench-{generation}"));
        let mut log = open_log(&dir);
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                // Keep the disk footprint bounded: start over every 512 MiB (not timed).
                if log.size_bytes() > 512 << 20 {
                    generation += 1;
                    let old = std::mem::replace(
                        &mut dir,
                        root.path().join(format!("bench-{generation}")),
                    );
                    log = open_log(&dir);
                    std::fs::remove_dir_all(&old).expect("remove old log");
                }
                let now = now_ms();
                let t = Instant::now();
                let info = log
                    .append_as_leader(black_box(&batch), 0, now)
                    .expect("append");
                spent += t.elapsed();
                black_box(info);
            }
            spent
        });
    });
    g.finish();
}

fn bench_index(c: &mut Criterion) {
    const ENTRIES: i64 = 100_000;
    const LOOKUPS: usize = 1024;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut index = OffsetIndex::open(&dir.path().join("0.index"), 0, 10 << 20).expect("index");
    for i in 0..ENTRIES {
        index
            .append(i * 37, (i * 4096) as u32)
            .expect("append entry");
    }
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let targets: Vec<i64> = (0..LOOKUPS)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % (ENTRIES as u64 * 37)) as i64
        })
        .collect();
    let mut g = c.benchmark_group("offset_index");
    g.throughput(Throughput::Elements(LOOKUPS as u64));
    g.bench_function("lookup_100k_entries", |b| {
        b.iter(|| {
            for &t in &targets {
                black_box(index.lookup(black_box(t)));
            }
        })
    });
    g.finish();
}

fn bench_validate(c: &mut Criterion) {
    let batch = lz4_batch_16k();
    let mut g = c.benchmark_group("batch_validate");
    g.throughput(Throughput::Bytes(batch.len() as u64));
    g.bench_function("lz4_16KiB", |b| {
        b.iter(|| {
            let h = BatchHeader::parse(black_box(&batch)).expect("parse");
            h.validate(black_box(&batch)).expect("valid");
            black_box(h)
        })
    });
    // Validation plus the copy the append path makes of the producer's bytes (the copy is
    // freed each time, as on the append path, so the allocator reuses warm memory).
    g.bench_function("lz4_16KiB_with_copy", |b| {
        b.iter(|| {
            let h = BatchHeader::parse(black_box(&batch)).expect("parse");
            h.validate(&batch).expect("valid");
            let owned = batch.to_vec();
            black_box(&owned);
        })
    });
    g.finish();
}

fn bench_acl(c: &mut Criterion) {
    use strata::security::acl::{
        AclBinding, Authorizer, Operation, PatternType, Permission, ResourceType,
    };
    let acl = |name: String, pattern_type, principal: String, operation| AclBinding {
        resource_type: ResourceType::Topic,
        resource_name: name,
        pattern_type,
        principal,
        host: "*".to_string(),
        operation,
        permission: Permission::Allow,
    };
    let mut group = c.benchmark_group("acl_authorize");
    for n in [10usize, 100_000] {
        let mut acls: Vec<AclBinding> = (0..n)
            .map(|i| {
                if i % 10 == 0 {
                    let prefix = format!("team-{}-", i % 997);
                    acl(
                        prefix,
                        PatternType::Prefixed,
                        format!("User:u{i}"),
                        Operation::Write,
                    )
                } else {
                    let topic = format!("topic-{i}");
                    acl(
                        topic,
                        PatternType::Literal,
                        format!("User:u{i}"),
                        Operation::Read,
                    )
                }
            })
            .collect();
        acls.push(acl(
            "team-7-orders".into(),
            PatternType::Literal,
            "User:alice".into(),
            Operation::Read,
        ));
        let authorizer = Authorizer::new(true, Vec::new(), false, acls);
        group.bench_function(format!("{n}_acls"), |b| {
            b.iter(|| {
                black_box(authorizer.authorize(
                    "User:alice",
                    "10.0.0.1",
                    Operation::Read,
                    ResourceType::Topic,
                    black_box("team-7-orders"),
                ))
            })
        });
    }
    group.finish();
}

criterion_group!(
    benches,
    bench_append,
    bench_index,
    bench_validate,
    bench_acl
);
criterion_main!(benches);
