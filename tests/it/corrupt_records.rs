//! Corrupt records inside an intact batch (valid header and CRC): each class gets Kafka's
//! error code, nothing is appended (the log end offset does not move and the next valid
//! batch gets the next offset), a multi-partition produce fails only the bad partition, and
//! the broker keeps serving. Decompression bombs are refused under
//! `strata.max.decompressed.batch.bytes` on plain, recompressing and compacted topics.

use bytes::{Bytes, BytesMut};
use kafka_protocol::compression::{Compressor, Gzip, Lz4, Snappy, Zstd};
use kafka_protocol::messages::produce_request::PartitionProduceData;

use crate::client::Client;
use crate::harness::*;

const INVALID_RECORD: i16 = 87;
const HEADER_LEN: usize = 61;

#[derive(Clone, Copy, Debug)]
enum Codec {
    None = 0,
    Gzip = 1,
    Snappy = 2,
    Lz4 = 3,
    Zstd = 4,
}

const COMPRESSED: [Codec; 4] = [Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd];

/// A valid batch's header around `records` (a records section, compressed for `codec` by the
/// caller), declaring `count` records; length, last offset delta, codec and CRC fixed up.
fn reframe(records: &[u8], count: i32, codec: Codec) -> Bytes {
    let base = batch(1);
    let mut out = base[..HEADER_LEN].to_vec();
    out.extend_from_slice(records);
    let len = (out.len() - 12) as i32;
    out[8..12].copy_from_slice(&len.to_be_bytes());
    out[23..27].copy_from_slice(&count.wrapping_sub(1).to_be_bytes());
    out[57..61].copy_from_slice(&count.to_be_bytes());
    let attributes = (i16::from_be_bytes([out[21], out[22]]) & !7) | codec as i16;
    out[21..23].copy_from_slice(&attributes.to_be_bytes());
    let crc = crc32c::crc32c(&out[21..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    Bytes::from(out)
}

fn varint(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push(z as u8 | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// One record: `offset_delta`, key and value as given, `header_count` written as is (with no
/// header bytes), the body length computed unless `length` forces one.
fn record(
    offset_delta: i64,
    key: &[u8],
    value: &[u8],
    header_count: i64,
    length: Option<i64>,
) -> Vec<u8> {
    let mut body = vec![0u8]; // attributes
    varint(&mut body, 0); // timestamp delta
    varint(&mut body, offset_delta);
    varint(&mut body, key.len() as i64);
    body.extend_from_slice(key);
    varint(&mut body, value.len() as i64);
    body.extend_from_slice(value);
    varint(&mut body, header_count);
    let mut out = Vec::new();
    varint(&mut out, length.unwrap_or(body.len() as i64));
    out.extend_from_slice(&body);
    out
}

fn records(n: i64) -> Vec<u8> {
    (0..n)
        .flat_map(|i| record(i, format!("k{i}").as_bytes(), b"value", 0, None))
        .collect()
}

fn compress(codec: Codec, plain: &[u8]) -> Vec<u8> {
    let mut out = BytesMut::new();
    let fill = |b: &mut BytesMut| {
        b.extend_from_slice(plain);
        Ok(())
    };
    match codec {
        Codec::None => out.extend_from_slice(plain),
        Codec::Gzip => Gzip::compress(&mut out, fill).unwrap(),
        Codec::Snappy => Snappy::compress(&mut out, fill).unwrap(),
        Codec::Lz4 => Lz4::compress(&mut out, fill).unwrap(),
        Codec::Zstd => Zstd::compress(&mut out, fill).unwrap(),
    }
    out.to_vec()
}

/// Produces `bad`, expects `code`, then checks nothing moved and the partition still takes a
/// valid batch at the next offset.
async fn assert_refused(c: &mut Client, topic: &str, bad: Bytes, code: i16, what: &str) {
    let before = list_offset(c, topic, 0, -1).await.offset;
    let r = produce(c, topic, 0, bad).await;
    assert_eq!(r.error_code, code, "{what}: {:?}", r.error_message);
    assert_eq!(r.base_offset, -1, "{what}");
    assert_eq!(
        list_offset(c, topic, 0, -1).await.offset,
        before,
        "{what}: nothing appended"
    );
    let ok = produce(c, topic, 0, batch(2)).await;
    assert_eq!(
        (ok.error_code, ok.base_offset),
        (0, before),
        "{what}: next batch"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_records_get_invalid_record_and_append_nothing() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "malformed", 1).await;
    // A record length varint of six bytes (Kafka allows five).
    let long_varint = [0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0, 0, 0];
    assert_refused(
        &mut c,
        "malformed",
        reframe(&long_varint, 1, Codec::None),
        INVALID_RECORD,
        "varint",
    )
    .await;
    // A negative record length.
    let negative = record(0, b"k", b"v", 0, Some(-3));
    assert_refused(
        &mut c,
        "malformed",
        reframe(&negative, 1, Codec::None),
        INVALID_RECORD,
        "negative length",
    )
    .await;
    // A record length past the batch.
    let past = record(0, b"k", b"v", 0, Some(1000));
    assert_refused(
        &mut c,
        "malformed",
        reframe(&past, 1, Codec::None),
        INVALID_RECORD,
        "length past end",
    )
    .await;
    // A negative header count.
    let headers = record(0, b"k", b"v", -2, None);
    assert_refused(
        &mut c,
        "malformed",
        reframe(&headers, 1, Codec::None),
        INVALID_RECORD,
        "negative headers",
    )
    .await;
    // Offset deltas out of order.
    let mut swapped = record(1, b"a", b"1", 0, None);
    swapped.extend(record(0, b"b", b"2", 0, None));
    assert_refused(
        &mut c,
        "malformed",
        reframe(&swapped, 2, Codec::None),
        INVALID_RECORD,
        "offset deltas",
    )
    .await;
    // Bytes after the last record.
    let mut trailing = records(2);
    trailing.push(0);
    assert_refused(
        &mut c,
        "malformed",
        reframe(&trailing, 2, Codec::None),
        INVALID_RECORD,
        "trailing",
    )
    .await;
    // The same records compressed, in every codec.
    for codec in COMPRESSED {
        let z = compress(codec, &headers);
        assert_refused(
            &mut c,
            "malformed",
            reframe(&z, 1, codec),
            INVALID_RECORD,
            &format!("{codec:?} headers"),
        )
        .await;
    }
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_claiming_2_pow_31_headers_is_refused_on_a_recompressing_topic() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    let r = create_topic_with(&mut c, "recompress", 1, &[("compression.type", "gzip")]).await;
    assert_eq!(r.error_code, 0);
    let bomb = record(0, b"k", b"v", i32::MAX as i64, None);
    assert_refused(
        &mut c,
        "recompress",
        reframe(&bomb, 1, Codec::None),
        INVALID_RECORD,
        "2^31-1 headers",
    )
    .await;
    // The broker still serves this and other clients.
    let mut other = b.client().await;
    create_topic(&mut other, "after", 1).await;
    assert_eq!(
        produce(&mut other, "after", 0, batch(3)).await.error_code,
        0
    );
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_count_that_does_not_match_the_records_moves_no_offset() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "counts", 1).await;
    let three = records(3);
    for (count, what) in [(4, "one short"), (2, "one extra"), (i32::MAX, "2^31-1")] {
        assert_refused(
            &mut c,
            "counts",
            reframe(&three, count, Codec::None),
            INVALID_RECORD,
            what,
        )
        .await;
        for codec in COMPRESSED {
            let z = compress(codec, &three);
            assert_refused(
                &mut c,
                "counts",
                reframe(&z, count, codec),
                INVALID_RECORD,
                &format!("{codec:?} {what}"),
            )
            .await;
        }
    }
    // A count that matches is taken, and the offsets advance by exactly it.
    let before = list_offset(&mut c, "counts", 0, -1).await.offset;
    assert_eq!(
        produce(&mut c, "counts", 0, reframe(&three, 3, Codec::None))
            .await
            .error_code,
        0
    );
    assert_eq!(
        list_offset(&mut c, "counts", 0, -1).await.offset,
        before + 3
    );
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_truncated_compressed_payloads_get_invalid_record() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "payloads", 1).await;
    let plain = records(50);
    let garbage: Vec<u8> = (0..300u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 11) as u8)
        .collect();
    for codec in COMPRESSED {
        assert_refused(
            &mut c,
            "payloads",
            reframe(&garbage, 50, codec),
            INVALID_RECORD,
            &format!("{codec:?} garbage"),
        )
        .await;
        let z = compress(codec, &plain);
        for cut in [4, z.len() / 2, z.len() - 1] {
            let what = format!("{codec:?} truncated at {cut} of {}", z.len());
            assert_refused(
                &mut c,
                "payloads",
                reframe(&z[..cut], 50, codec),
                INVALID_RECORD,
                &what,
            )
            .await;
        }
        assert_eq!(
            produce(&mut c, "payloads", 0, reframe(&z, 50, codec))
                .await
                .error_code,
            0,
            "{codec:?} whole"
        );
    }
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lz4_frames_with_dependent_blocks_get_invalid_record_as_in_kafka() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "lz4-linked", 1).await;
    let plain = records(200);
    let z = compress(Codec::Lz4, &plain);
    // Clear FLG's block-independence bit (bit 5). Kafka refuses the flag before it looks at
    // the descriptor checksum, so that is left as it is.
    let mut linked = z.clone();
    linked[4] &= !0x20;
    let r = produce(&mut c, "lz4-linked", 0, reframe(&linked, 200, Codec::Lz4)).await;
    assert_eq!(r.error_code, INVALID_RECORD);
    let message = r.error_message.map(|m| m.to_string()).unwrap_or_default();
    assert!(message.contains("BLOCKINDEPENDENCE"), "{message}");
    assert_eq!(list_offset(&mut c, "lz4-linked", 0, -1).await.offset, 0);
    assert_eq!(
        produce(&mut c, "lz4-linked", 0, reframe(&z, 200, Codec::Lz4))
            .await
            .error_code,
        0
    );
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_corrupt_partition_of_a_produce_fails() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "two", 2).await;
    let mut req = produce_request("two", 0, reframe(&records(3), 5, Codec::None), -1);
    let mut good = PartitionProduceData::default();
    good.index = 1;
    good.records = Some(batch(4));
    req.topic_data[0].partition_data.push(good);
    let resp = c.call(PRODUCE_V, &req).await;
    let parts = &resp.responses[0].partition_responses;
    let by_index = |i: i32| parts.iter().find(|p| p.index == i).expect("answered");
    assert_eq!(by_index(0).error_code, INVALID_RECORD);
    assert_eq!((by_index(1).error_code, by_index(1).base_offset), (0, 0));
    assert_eq!(list_offset(&mut c, "two", 0, -1).await.offset, 0);
    assert_eq!(list_offset(&mut c, "two", 1, -1).await.offset, 4);
    b.shutdown().await;
}

/// `n` valid records of one key byte and a `value_len`-byte zero value: a records section
/// that compresses by orders of magnitude.
fn compressible_records(n: i64, value_len: usize, keyed: bool) -> Vec<u8> {
    let value = vec![0u8; value_len];
    let mut out = Vec::with_capacity(n as usize * (value_len + 12));
    for i in 0..n {
        let key: &[u8] = if keyed { b"k" } else { b"" };
        out.extend(record(i, key, &value, 0, None));
    }
    out
}

/// A zstd batch of valid records that inflates to ~96 MiB, past the default
/// `strata.max.decompressed.batch.bytes` (64 MiB), while its compressed size stays under
/// `max.message.bytes`.
fn zstd_bomb() -> Bytes {
    let n = 96 * 1024;
    let plain = compressible_records(n, 1024, true);
    let mut enc = zstd::stream::Encoder::new(Vec::new(), 3).unwrap();
    std::io::Write::write_all(&mut enc, &plain).unwrap();
    let z = enc.finish().unwrap();
    assert!(z.len() < 1_000_000, "bomb is {} bytes", z.len());
    reframe(&z, n as i32, Codec::Zstd)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zstd_bomb_is_refused_on_plain_recompressing_and_compacted_topics() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    let bomb = zstd_bomb();
    for (topic, configs) in [
        ("bomb-plain", vec![]),
        ("bomb-recompress", vec![("compression.type", "lz4")]),
        ("bomb-compacted", vec![("cleanup.policy", "compact")]),
    ] {
        let r = create_topic_with(&mut c, topic, 1, &configs).await;
        assert_eq!(r.error_code, 0);
        let before = list_offset(&mut c, topic, 0, -1).await.offset;
        let r = produce(&mut c, topic, 0, bomb.clone()).await;
        assert_eq!(
            r.error_code, INVALID_RECORD,
            "{topic}: {:?}",
            r.error_message
        );
        let message = r.error_message.map(|m| m.to_string()).unwrap_or_default();
        assert!(
            message.contains("decompress to more than 67108864 bytes"),
            "{topic}: {message}"
        );
        assert_eq!(
            list_offset(&mut c, topic, 0, -1).await.offset,
            before,
            "{topic}"
        );
        assert_eq!(
            produce(&mut c, topic, 0, batch(2)).await.error_code,
            0,
            "{topic}"
        );
    }
    // Under a raised bound the same batch is valid and taken, on every kind of topic.
    for (topic, configs) in [
        (
            "big-plain",
            vec![("strata.max.decompressed.batch.bytes", "134217728")],
        ),
        (
            "big-recompress",
            vec![
                ("strata.max.decompressed.batch.bytes", "134217728"),
                ("compression.type", "lz4"),
            ],
        ),
    ] {
        let r = create_topic_with(&mut c, topic, 1, &configs).await;
        assert_eq!(r.error_code, 0);
        let r = produce(&mut c, topic, 0, bomb.clone()).await;
        assert_eq!(
            (r.error_code, r.base_offset),
            (0, 0),
            "{topic}: {:?}",
            r.error_message
        );
    }
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_decompressed_message_bytes_refuses_a_bigger_compressed_record() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    let r = create_topic_with(
        &mut c,
        "per-record",
        1,
        &[("max.decompressed.message.bytes", "500")],
    )
    .await;
    assert_eq!(r.error_code, 0);
    let big = compressible_records(1, 1000, true);
    let z = compress(Codec::Gzip, &big);
    assert_refused(
        &mut c,
        "per-record",
        reframe(&z, 1, Codec::Gzip),
        INVALID_RECORD,
        "record over the limit",
    )
    .await;
    // Uncompressed, the same record is held to max.message.bytes only (as in Kafka).
    assert_eq!(
        produce(&mut c, "per-record", 0, reframe(&big, 1, Codec::None))
            .await
            .error_code,
        0
    );
    let small = compress(Codec::Gzip, &compressible_records(3, 100, true));
    assert_eq!(
        produce(&mut c, "per-record", 0, reframe(&small, 3, Codec::Gzip))
            .await
            .error_code,
        0
    );
    b.shutdown().await;
}

fn vm_hwm_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Measures a spawned broker's peak RSS (VmHWM) before and after a zstd batch of valid
/// records that inflates to 1 GiB, on a plain, a recompressing and a compacted topic (refused
/// at the default 64 MiB bound), and on a plain topic whose bound is raised to 2 GiB (streamed
/// through the 64 KiB window and accepted). Prints the figures; run with
/// `cargo test --test it measure_rss -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement: spawns the broker binary and builds a 1 GiB bomb"]
async fn measure_rss_of_a_spawned_broker_under_a_1_gib_zstd_bomb() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let admin = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_strata"))
        .arg("serve")
        .arg("-o")
        .arg(format!("listeners=PLAINTEXT://127.0.0.1:{port}"))
        .arg("-o")
        .arg(format!("strata.admin.listener=127.0.0.1:{admin}"))
        .arg("-o")
        .arg(format!("log.dirs={}", dir.path().display()))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn broker");
    let pid = child.id();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut c = loop {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            break Client::connect(addr).await;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    // 16 Ki records of a 64 KiB zero value: 1 GiB of valid records.
    let n = 16 * 1024;
    let mut enc = zstd::stream::Encoder::new(Vec::new(), 3).unwrap();
    for i in 0..n {
        std::io::Write::write_all(&mut enc, &record(i, b"k", &vec![0u8; 64 * 1024], 0, None))
            .unwrap();
    }
    let z = enc.finish().unwrap();
    let bomb = reframe(&z, n as i32, Codec::Zstd);
    println!(
        "bomb: {} bytes compressed, {} records, ~1 GiB decompressed",
        bomb.len(),
        n
    );
    for (topic, configs) in [
        ("rss-plain", vec![]),
        ("rss-recompress", vec![("compression.type", "lz4")]),
        ("rss-compacted", vec![("cleanup.policy", "compact")]),
        (
            "rss-raised",
            vec![("strata.max.decompressed.batch.bytes", "2147483647")],
        ),
    ] {
        let r = create_topic_with(&mut c, topic, 1, &configs).await;
        assert_eq!(r.error_code, 0);
        let before = vm_hwm_kib(pid);
        let started = std::time::Instant::now();
        let r = produce(&mut c, topic, 0, bomb.clone()).await;
        let after = vm_hwm_kib(pid);
        println!(
            "{topic}: error_code {} in {:?}; VmHWM before {before} kB, after {after} kB",
            r.error_code,
            started.elapsed()
        );
    }
    let _ = child.kill();
    let _ = child.wait();
}
