//! Unit and property tests: batches encoded by kafka-protocol (the client side) walk and
//! validate; every corrupt class is refused with Kafka's error; mutated batches never panic
//! and never allocate beyond the decompression bound.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{
    Compression, Record as KRecord, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use crate::header::{rewrite_crc, BATCH_LENGTH, LAST_OFFSET_DELTA, RECORDS_COUNT};
use crate::record::{write_varint, write_varlong};
use crate::*;

// ---- allocation accounting (per thread, so parallel tests do not disturb each other) ----

struct Counting;

thread_local! {
    static LIVE: Cell<usize> = const { Cell::new(0) };
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let _ = LIVE.try_with(|l| {
                let now = l.get() + layout.size();
                l.set(now);
                let _ = PEAK.try_with(|p| p.set(p.get().max(now)));
            });
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        let _ = LIVE.try_with(|l| l.set(l.get().saturating_sub(layout.size())));
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Runs `f` and returns its result with the most bytes it had allocated at once (this
/// thread only).
fn peak_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = LIVE.with(|l| l.get());
    PEAK.with(|p| p.set(base));
    let out = f();
    let peak = PEAK.with(|p| p.get());
    (out, peak.saturating_sub(base))
}

// ---- helpers ----

const NOW: i64 = 1_700_000_000_000;

fn opts() -> ValidationOptions<'static> {
    ValidationOptions {
        topic_partition: "t-0",
        origin_client: true,
        compacted_topic: false,
        log_append_time: false,
        now_ms: NOW,
        timestamp_before_max_ms: i64::MAX,
        timestamp_after_max_ms: 3_600_000,
        max_decompressed_message_bytes: DEFAULT_MAX_DECOMPRESSED_MESSAGE_BYTES,
        max_decompressed_batch_bytes: 64 << 20,
    }
}

type TestRecord<'a> = (
    Option<&'a [u8]>,
    Option<&'a [u8]>,
    Vec<(&'a str, Option<&'a [u8]>)>,
);

fn encode(records: &[TestRecord<'_>], compression: Compression) -> Vec<u8> {
    let records: Vec<KRecord> = records
        .iter()
        .enumerate()
        .map(|(i, (k, v, h))| KRecord {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: i as i32,
            timestamp: NOW + i as i64,
            key: k.map(Bytes::copy_from_slice),
            value: v.map(Bytes::copy_from_slice),
            headers: h
                .iter()
                .map(|(hk, hv)| {
                    (
                        kafka_protocol::protocol::StrBytes::from_string(hk.to_string()),
                        hv.map(Bytes::copy_from_slice),
                    )
                })
                .collect(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        records.iter(),
        &RecordEncodeOptions {
            version: 2,
            compression,
        },
    )
    .expect("encode");
    buf.to_vec()
}

fn simple(n: usize, compression: Compression) -> Vec<u8> {
    let values: Vec<Vec<u8>> = (0..n).map(|i| format!("value-{i}").into_bytes()).collect();
    let records: Vec<TestRecord<'_>> = values
        .iter()
        .map(|v| {
            (
                Some(&b"key"[..]),
                Some(v.as_slice()),
                vec![("h", Some(&b"v"[..]))],
            )
        })
        .collect();
    encode(&records, compression)
}

/// `batch`'s header with `records` as its records section (uncompressed bytes, or already
/// compressed for `codec`), `count` records; the length and CRC fixed up.
fn reframe(batch: &[u8], records: &[u8], count: i32, codec: Codec) -> Vec<u8> {
    let mut out = batch[..BATCH_HEADER_LEN].to_vec();
    out.extend_from_slice(records);
    let len = (out.len() - 12) as i32;
    out[BATCH_LENGTH..BATCH_LENGTH + 4].copy_from_slice(&len.to_be_bytes());
    out[RECORDS_COUNT..RECORDS_COUNT + 4].copy_from_slice(&count.to_be_bytes());
    out[LAST_OFFSET_DELTA..LAST_OFFSET_DELTA + 4].copy_from_slice(&(count - 1).to_be_bytes());
    let id: i16 = match codec {
        Codec::None => 0,
        Codec::Gzip => 1,
        Codec::Snappy => 2,
        Codec::Lz4 => 3,
        Codec::Zstd => 4,
    };
    let attributes = (i16::from_be_bytes([out[21], out[22]]) & !7) | id;
    out[21..23].copy_from_slice(&attributes.to_be_bytes());
    rewrite_crc(&mut out);
    out
}

/// One hand-written record: body fields as given, the length computed unless `length`.
fn raw_record(offset_delta: i32, key: Option<&[u8]>, value: &[u8], length: Option<i32>) -> Vec<u8> {
    let mut body = vec![0u8];
    let mut v = [0u8; 10];
    let n = write_varlong(&mut v, 0);
    body.extend_from_slice(&v[..n]);
    let mut w = [0u8; 5];
    let n = write_varint(&mut w, offset_delta);
    body.extend_from_slice(&w[..n]);
    match key {
        Some(k) => {
            let n = write_varint(&mut w, k.len() as i32);
            body.extend_from_slice(&w[..n]);
            body.extend_from_slice(k);
        }
        None => body.push(1), // -1
    }
    let n = write_varint(&mut w, value.len() as i32);
    body.extend_from_slice(&w[..n]);
    body.extend_from_slice(value);
    body.push(0); // no headers
    let mut out = Vec::new();
    let n = write_varint(&mut w, length.unwrap_or(body.len() as i32));
    out.extend_from_slice(&w[..n]);
    out.extend_from_slice(&body);
    out
}

fn compress(codec: Codec, plain: &[u8]) -> Vec<u8> {
    use kafka_protocol::compression::{Compressor, Gzip, Lz4, Snappy, Zstd};
    let mut out = BytesMut::new();
    let fill = |b: &mut BytesMut| {
        b.extend_from_slice(plain);
        Ok(())
    };
    match codec {
        Codec::None => out.extend_from_slice(plain),
        Codec::Gzip => Gzip::compress(&mut out, fill).expect("gzip"),
        Codec::Snappy => Snappy::compress(&mut out, fill).expect("snappy"),
        Codec::Lz4 => Lz4::compress(&mut out, fill).expect("lz4"),
        Codec::Zstd => Zstd::compress(&mut out, fill).expect("zstd"),
    }
    out.to_vec()
}

const CODECS: [(Compression, Codec); 5] = [
    (Compression::None, Codec::None),
    (Compression::Gzip, Codec::Gzip),
    (Compression::Snappy, Codec::Snappy),
    (Compression::Lz4, Codec::Lz4),
    (Compression::Zstd, Codec::Zstd),
];

fn check(batch: &[u8]) -> Result<ValidatedBatch, ValidateError> {
    validate(batch, &opts(), &mut Scratch::new())
}

fn assert_invalid_record(batch: &[u8], needle: &str) {
    let err = check(batch).expect_err("refused");
    assert_eq!(err.kafka_error(), KafkaError::InvalidRecord, "{err}");
    assert!(
        err.to_string().contains(needle),
        "{err} should mention {needle}"
    );
}

// ---- tests ----

#[test]
fn kafka_protocol_batches_validate_and_walk_in_every_codec() {
    for (compression, codec) in CODECS {
        let batch = simple(50, compression);
        let v = check(&batch).unwrap_or_else(|e| panic!("{codec}: {e}"));
        assert_eq!(v.codec, codec);
        assert_eq!(v.max_timestamp, NOW + 49);
        let mut buf = Vec::new();
        let mut seen = Vec::new();
        let h = walk(&batch, 1 << 20, &mut buf, |i, r| {
            assert_eq!(r.offset_delta, i);
            assert_eq!(r.key, Some(&b"key"[..]));
            assert_eq!(r.header_count, 1);
            seen.push(r.value.map(<[u8]>::to_vec));
        })
        .unwrap();
        assert_eq!(h.records_count, 50);
        assert_eq!(seen[7].as_deref(), Some(&b"value-7"[..]));
    }
}

#[test]
fn a_varint_longer_than_five_bytes_is_invalid_record() {
    let base = simple(1, Compression::None);
    let records = [0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
    assert_invalid_record(
        &reframe(&base, &records, 1, Codec::None),
        "invalid record structure",
    );
}

#[test]
fn negative_lengths_are_invalid_record() {
    let base = simple(1, Compression::None);
    // Record length -2.
    let records = raw_record(0, Some(b"k"), b"v", Some(-2));
    assert_invalid_record(&reframe(&base, &records, 1, Codec::None), "negative");
    // Key length -5 (only -1 means null).
    let mut r = raw_record(0, Some(b"k"), b"v", None);
    let key_len_at = 1 + 1 + 1 + 1; // length, attributes, timestamp delta, offset delta
    r[key_len_at] = 9; // zig-zag -5
    assert_invalid_record(&reframe(&base, &r, 1, Codec::None), "negative key size");
}

#[test]
fn negative_and_huge_header_counts_are_invalid_record() {
    let base = simple(1, Compression::None);
    let mut r = raw_record(0, Some(b"k"), b"v", None);
    let last = r.len() - 1;
    r[last] = 3; // zig-zag -2
    assert_invalid_record(
        &reframe(&base, &r, 1, Codec::None),
        "number of record headers",
    );
    // 2^31-1 headers in a record: refused before anything is reserved for them.
    let mut r = raw_record(0, Some(b"k"), b"v", None);
    r.pop();
    r.extend_from_slice(&[0xfe, 0xff, 0xff, 0xff, 0x0f]);
    r[0] += 4;
    let (result, peak) = peak_during(|| check(&reframe(&base, &r, 1, Codec::None)));
    let err = result.expect_err("refused");
    assert_eq!(err.kafka_error(), KafkaError::InvalidRecord);
    assert!(peak < 1 << 20, "allocated {peak} bytes");
}

#[test]
fn record_count_must_match_the_records() {
    let base = simple(3, Compression::None);
    let records = &base[BATCH_HEADER_LEN..];
    // Declares 4 (and last offset delta 3), holds 3.
    assert_invalid_record(&reframe(&base, records, 4, Codec::None), "premature EOF");
    // Declares 2^31-1: the walk ends at the records, nothing moves the offsets.
    assert_invalid_record(
        &reframe(&base, records, i32::MAX, Codec::None),
        "premature EOF",
    );
    // Declares 2, holds 3.
    assert_invalid_record(
        &reframe(&base, records, 2, Codec::None),
        "records still remaining",
    );
    // The same in a compressed batch.
    for codec in [Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd] {
        let z = compress(codec, records);
        assert_invalid_record(&reframe(&base, &z, 4, codec), "premature EOF");
        assert_invalid_record(&reframe(&base, &z, 2, codec), "records still remaining");
        check(&reframe(&base, &z, 3, codec)).unwrap_or_else(|e| panic!("{codec}: {e}"));
    }
}

#[test]
fn batch_header_rules_are_kafkas() {
    let mut b = simple(3, Compression::None);
    b[LAST_OFFSET_DELTA..LAST_OFFSET_DELTA + 4].copy_from_slice(&1i32.to_be_bytes());
    rewrite_crc(&mut b);
    assert_invalid_record(
        &b,
        "Inconsistent batch offset range [0, 1] and count of records 3",
    );
    let mut b = simple(1, Compression::None);
    b[RECORDS_COUNT..RECORDS_COUNT + 4].copy_from_slice(&0i32.to_be_bytes());
    b[LAST_OFFSET_DELTA..LAST_OFFSET_DELTA + 4].copy_from_slice(&0i32.to_be_bytes());
    rewrite_crc(&mut b);
    assert_invalid_record(&b, "Invalid reported count for record batch: 0");
    let mut b = simple(1, Compression::None);
    b[LAST_OFFSET_DELTA..LAST_OFFSET_DELTA + 4].copy_from_slice(&(-1i32).to_be_bytes());
    rewrite_crc(&mut b);
    assert_invalid_record(&b, "invalid offset range");
    let mut b = simple(1, Compression::None);
    let last = b.len() - 1;
    b[last] ^= 1;
    assert_eq!(
        check(&b).unwrap_err().kafka_error(),
        KafkaError::CorruptMessage
    );
}

#[test]
fn a_client_base_offset_at_the_top_of_the_range_does_not_overflow() {
    // The broker assigns offsets: the client's base offset only appears in messages, where
    // Kafka's `lastOffset` wraps as Java's long arithmetic does.
    let mut b = simple(3, Compression::None);
    b[..8].copy_from_slice(&i64::MAX.to_be_bytes());
    check(&b).expect("valid whatever the client's base offset");
    b[LAST_OFFSET_DELTA..LAST_OFFSET_DELTA + 4].copy_from_slice(&1i32.to_be_bytes());
    rewrite_crc(&mut b);
    assert_invalid_record(
        &b,
        &format!(
            "Inconsistent batch offset range [{}, {}] and count of records 3",
            i64::MAX,
            i64::MIN
        ),
    );
}

#[test]
fn offset_deltas_must_count_from_zero() {
    let base = simple(1, Compression::None);
    let mut records = raw_record(0, Some(b"a"), b"1", None);
    records.extend(raw_record(2, Some(b"b"), b"2", None));
    assert_invalid_record(
        &reframe(&base, &records, 2, Codec::None),
        "Invalid offset delta 2 of record 1",
    );
    let z = compress(Codec::Zstd, &records);
    assert_invalid_record(
        &reframe(&base, &z, 2, Codec::Zstd),
        "Invalid offset delta 2",
    );
}

#[test]
fn trailing_bytes_after_the_records_are_refused() {
    let base = simple(2, Compression::None);
    let mut records = base[BATCH_HEADER_LEN..].to_vec();
    records.push(0);
    assert_invalid_record(
        &reframe(&base, &records, 2, Codec::None),
        "records still remaining",
    );
}

#[test]
fn garbage_and_truncated_compressed_payloads_are_invalid_record() {
    let base = simple(20, Compression::None);
    let plain = &base[BATCH_HEADER_LEN..];
    for codec in [Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd] {
        let garbage: Vec<u8> = (0..200u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        let err = check(&reframe(&base, &garbage, 20, codec)).expect_err("garbage");
        assert_eq!(
            err.kafka_error(),
            KafkaError::InvalidRecord,
            "{codec}: {err}"
        );
        let z = compress(codec, plain);
        for cut in [1, z.len() / 2, z.len() - 1] {
            let err = check(&reframe(&base, &z[..cut], 20, codec)).expect_err("truncated");
            assert_eq!(
                err.kafka_error(),
                KafkaError::InvalidRecord,
                "{codec} cut {cut}: {err}"
            );
        }
        check(&reframe(&base, &z, 20, codec)).unwrap();
    }
}

#[test]
fn lz4_frames_with_dependent_blocks_are_refused_as_kafka_does() {
    use std::io::Write;
    let base = simple(20, Compression::None);
    let plain = &base[BATCH_HEADER_LEN..];
    let mut enc = lz4::EncoderBuilder::new()
        .block_mode(lz4::BlockMode::Linked)
        .build(Vec::new())
        .unwrap();
    enc.write_all(plain).unwrap();
    let (linked, r) = enc.finish();
    r.unwrap();
    assert_invalid_record(
        &reframe(&base, &linked, 20, Codec::Lz4),
        "BLOCKINDEPENDENCE",
    );
}

#[test]
fn a_zstd_bomb_stops_at_the_limit_without_growing_memory() {
    // 256 MiB of one repeated record-ish byte pattern compresses to a few KiB.
    let chunk = vec![0u8; 1 << 20];
    let mut enc = zstd::stream::Encoder::new(Vec::new(), 1).unwrap();
    for _ in 0..256 {
        std::io::Write::write_all(&mut enc, &chunk).unwrap();
    }
    let bomb = enc.finish().unwrap();
    assert!(bomb.len() < 64 * 1024, "bomb is {} bytes", bomb.len());
    let base = simple(1, Compression::None);
    let batch = reframe(&base, &bomb, 1 << 20, Codec::Zstd);
    let mut scratch = Scratch::new();
    let mut o = opts();
    o.max_decompressed_batch_bytes = 8 << 20;
    // Zero bytes read as records of length 0: refused at the first record.
    let (r, peak) = peak_during(|| validate(&batch, &o, &mut scratch));
    assert_eq!(r.unwrap_err().kafka_error(), KafkaError::InvalidRecord);
    assert!(peak < 4 << 20, "validation allocated {peak} bytes");
    // Materialising stops at the limit too.
    let mut out = Vec::new();
    let (r, peak) = peak_during(|| decompress_into(Codec::Zstd, &bomb, 8 << 20, &mut out));
    assert_eq!(
        r,
        Err(RecordsError::DecompressedTooLarge { limit: 8 << 20 })
    );
    assert!(peak < 40 << 20, "materialising allocated {peak} bytes");
}

#[test]
fn a_bomb_of_valid_tiny_records_is_bounded_by_the_batch_limit() {
    // 4 Mi records of 8 bytes each (32 MiB), each record identical except its offset delta:
    // compressible enough to be a bomb, valid enough to be walked to the end.
    for codec in [Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd] {
        let mut plain = Vec::new();
        let n = 1 << 19;
        for i in 0..n {
            plain.extend(raw_record(i, None, b"", None));
        }
        let z = compress(codec, &plain);
        let base = simple(1, Compression::None);
        let batch = reframe(&base, &z, n, codec);
        let mut o = opts();
        o.max_decompressed_batch_bytes = plain.len() as u64 - 1;
        let mut scratch = Scratch::new();
        let (r, peak) = peak_during(|| validate(&batch, &o, &mut scratch));
        assert_eq!(
            r.unwrap_err(),
            ValidateError::Batch(RecordsError::DecompressedTooLarge {
                limit: plain.len() as u64 - 1
            }),
            "{codec}"
        );
        assert!(peak < 5 << 20, "{codec}: validation allocated {peak} bytes");
        o.max_decompressed_batch_bytes = plain.len() as u64;
        let v = validate(&batch, &o, &mut scratch).unwrap_or_else(|e| panic!("{codec}: {e}"));
        assert_eq!(v.decompressed_bytes, plain.len() as u64);
    }
}

#[test]
fn max_decompressed_message_bytes_bounds_each_compressed_record() {
    let big = vec![7u8; 1000];
    let records: Vec<TestRecord<'_>> = vec![(Some(&b"k"[..]), Some(big.as_slice()), vec![])];
    let mut o = opts();
    o.max_decompressed_message_bytes = 100;
    let err = validate(
        &encode(&records, Compression::Gzip),
        &o,
        &mut Scratch::new(),
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("exceeds the configured maximum record size"),
        "{err}"
    );
    assert_eq!(err.kafka_error(), KafkaError::InvalidRecord);
    // An uncompressed batch is held to max.message.bytes only, as in Kafka.
    validate(
        &encode(&records, Compression::None),
        &o,
        &mut Scratch::new(),
    )
    .unwrap();
}

#[test]
fn keyless_records_on_a_compacted_topic_get_per_record_errors() {
    let records: Vec<TestRecord<'_>> = vec![
        (Some(&b"k"[..]), Some(&b"1"[..]), vec![]),
        (None, Some(&b"2"[..]), vec![]),
        (None, None, vec![]),
    ];
    for (compression, _) in CODECS {
        let mut o = opts();
        o.compacted_topic = true;
        let err = validate(&encode(&records, compression), &o, &mut Scratch::new()).unwrap_err();
        let ValidateError::Records {
            invalid_timestamp,
            message,
            record_errors,
        } = &err
        else {
            panic!("{err:?}");
        };
        assert!(!invalid_timestamp);
        assert_eq!(
            record_errors
                .iter()
                .map(|e| e.batch_index)
                .collect::<Vec<_>>(),
            [1, 2]
        );
        assert_eq!(
            message,
            "One or more records have been rejected due to 2 record errors in total, and only showing the first three errors at most: [RecordError(batchIndex=1, message='Compacted topic cannot accept message without key in topic partition t-0'), RecordError(batchIndex=2, message='Compacted topic cannot accept message without key in topic partition t-0')]"
        );
    }
}

#[test]
fn timestamps_out_of_range_are_invalid_timestamp() {
    let mut o = opts();
    o.now_ms = NOW - 10_000_000;
    let err = validate(&simple(2, Compression::Lz4), &o, &mut Scratch::new()).unwrap_err();
    assert_eq!(err.kafka_error(), KafkaError::InvalidTimestamp);
    assert_eq!(
        err.to_string(),
        "One or more records have been rejected due to invalid timestamp"
    );
    o.log_append_time = true;
    validate(&simple(2, Compression::Lz4), &o, &mut Scratch::new()).unwrap();
}

// ---- property tests ----

mod props {
    use super::*;
    use proptest::prelude::*;

    fn arb_record() -> impl Strategy<
        Value = (
            Option<Vec<u8>>,
            Option<Vec<u8>>,
            Vec<(String, Option<Vec<u8>>)>,
        ),
    > {
        (
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)),
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..200)),
            proptest::collection::vec(
                (
                    "[a-z]{0,8}",
                    proptest::option::of(proptest::collection::vec(any::<u8>(), 0..20)),
                ),
                0..3,
            ),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        #[test]
        fn what_kafka_protocol_encodes_walks_back_field_for_field(
            records in proptest::collection::vec(arb_record(), 1..20),
            codec in 0usize..5,
        ) {
            let (compression, _) = CODECS[codec];
            let views: Vec<TestRecord<'_>> = records
                .iter()
                .map(|(k, v, h)| (
                    k.as_deref(),
                    v.as_deref(),
                    h.iter().map(|(hk, hv)| (hk.as_str(), hv.as_deref())).collect(),
                ))
                .collect();
            let batch = encode(&views, compression);
            let v = check(&batch).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(v.header.records_count as usize, records.len());
            let mut buf = Vec::new();
            let mut got = Vec::new();
            walk(&batch, 1 << 24, &mut buf, |_, r| {
                let headers = HeaderIter::new(r.headers, r.header_count).map(|h| h.map(|(k, _)| k.to_vec())).collect::<Result<Vec<_>, _>>().expect("headers");
                assert_eq!(headers.len(), r.header_count as usize);
                got.push((r.key.map(<[u8]>::to_vec), r.value.map(<[u8]>::to_vec), r.header_count as usize));
            }).map_err(|e| TestCaseError::fail(e.to_string()))?;
            // kafka-protocol keeps headers in a map: a repeated key is written once.
            let distinct = |h: &Vec<(String, Option<Vec<u8>>)>| {
                h.iter().map(|(k, _)| k).collect::<std::collections::BTreeSet<_>>().len()
            };
            let want: Vec<_> = records.iter().map(|(k, v, h)| (k.clone(), v.clone(), distinct(h))).collect();
            prop_assert_eq!(got, want);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = check(&bytes);
            let mut buf = Vec::new();
            let _ = walk(&bytes, 1 << 20, &mut buf, |_, _| {});
        }
    }
}

/// A xorshift generator: the mutation test must be reproducible from its printed seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Thousands of random mutations of valid batches in every codec (CRC fixed up so the walk
/// runs): validation and the bounded walk never panic, and never allocate more than the
/// decompression bound and the codecs' fixed state. Seeded; set STRATA_RECORDS_SEED to replay.
#[test]
fn mutated_batches_never_panic_nor_allocate_past_the_bound() {
    let seed = std::env::var("STRATA_RECORDS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
                | 1
        });
    println!("mutation seed: STRATA_RECORDS_SEED={seed}");
    let mut rng = Rng(seed);
    let originals: Vec<Vec<u8>> = CODECS
        .iter()
        .flat_map(|(c, _)| [simple(1, *c), simple(7, *c), simple(60, *c)])
        .collect();
    let limit: u64 = 1 << 20;
    let started = std::time::Instant::now();
    let mut scratch = Scratch::new();
    let mut buf = Vec::new();
    let mut runs = 0;
    while runs < 10_000 && started.elapsed() < std::time::Duration::from_secs(20) {
        let mut b = originals[rng.below(originals.len())].clone();
        for _ in 0..1 + rng.below(4) {
            if b.len() <= BATCH_HEADER_LEN {
                break;
            }
            match rng.below(4) {
                0 => {
                    let at = rng.below(b.len());
                    b[at] = rng.next() as u8;
                }
                1 => {
                    let at = BATCH_HEADER_LEN + rng.below(b.len() - BATCH_HEADER_LEN);
                    b[at] ^= 1 << rng.below(8);
                }
                2 => {
                    let cut = BATCH_HEADER_LEN + rng.below(b.len() - BATCH_HEADER_LEN);
                    b.truncate(cut.max(BATCH_HEADER_LEN));
                }
                _ => {
                    let at = BATCH_HEADER_LEN + rng.below(b.len() - BATCH_HEADER_LEN);
                    let extra: Vec<u8> = (0..rng.below(8)).map(|_| rng.next() as u8).collect();
                    b.splice(at..at, extra);
                }
            }
        }
        if rng.below(4) != 0 && b.len() >= BATCH_HEADER_LEN {
            // Keep the framing valid most of the time, so the records get walked.
            let len = (b.len() - 12) as i32;
            b[BATCH_LENGTH..BATCH_LENGTH + 4].copy_from_slice(&len.to_be_bytes());
            b[16] = 2;
            rewrite_crc(&mut b);
        }
        let mut o = opts();
        o.max_decompressed_batch_bytes = limit;
        let (_, peak) = peak_during(|| validate(&b, &o, &mut scratch));
        // The scratch window is 64 KiB; lz4 holds up to a 4 MiB block pair, zstd its window.
        assert!(
            peak < (16 << 20) + 22 * b.len(),
            "seed {seed}: validate allocated {peak}"
        );
        let (_, peak) = peak_during(|| walk(&b, limit, &mut buf, |_, _| {}));
        assert!(
            peak < (16 << 20) + limit as usize * 2,
            "seed {seed}: walk allocated {peak}"
        );
        runs += 1;
    }
    println!("{runs} mutations in {:?}", started.elapsed());
}

/// Validation throughput per codec over 256 MiB of 1 KiB records in ~1 MiB batches (values
/// half random, half text, so codecs compress ~2x). Run with
/// `cargo test --release -p strata-records validate_throughput -- --ignored --nocapture`.
#[test]
#[ignore = "benchmark"]
fn validate_throughput() {
    let mut rng = Rng(0x9e3779b97f4a7c15);
    let values: Vec<Vec<u8>> = (0..1000)
        .map(|i| {
            let mut v: Vec<u8> = (0..512).map(|_| rng.next() as u8).collect();
            v.extend(format!("{i:0>512}").bytes());
            v
        })
        .collect();
    for (compression, codec) in CODECS {
        let records: Vec<TestRecord<'_>> = values
            .iter()
            .map(|v| (Some(&b"key-0001"[..]), Some(v.as_slice()), vec![]))
            .collect();
        let batch = encode(&records, compression);
        let plain = 1000 * 1024u64;
        let rounds = (256u64 << 20) / plain;
        let mut scratch = Scratch::new();
        let o = opts();
        let started = std::time::Instant::now();
        for _ in 0..rounds {
            validate(&batch, &o, &mut scratch).expect("valid");
        }
        let secs = started.elapsed().as_secs_f64();
        let mib = (rounds * plain) as f64 / (1 << 20) as f64;
        println!(
            "{codec}: {:.0} MiB/s of records, {:.2} CPU s/GiB (batch {} bytes on the wire)",
            mib / secs,
            secs / (mib / 1024.0),
            batch.len()
        );
    }
}
