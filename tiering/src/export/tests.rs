//! Converter and export tests: batches are built here (records encoded by hand, compressed
//! with kafka-protocol's codecs, or encoded by its `RecordBatchEncoder`) and the Parquet
//! output is read back with parquet's own Arrow reader.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type, TimestampMillisecondType};
use arrow_array::Array;
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::compression::{Compressor, Gzip, Lz4, Snappy, Zstd};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use tokio_util::sync::CancellationToken;

use super::convert::*;
use super::*;

type Header<'a> = (&'a str, Option<&'a [u8]>);

pub(super) struct Rec<'a> {
    pub(super) offset_delta: i32,
    pub(super) ts_delta: i64,
    pub(super) key: Option<&'a [u8]>,
    pub(super) value: Option<&'a [u8]>,
    pub(super) headers: Vec<Header<'a>>,
}

fn put_varlong(b: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    loop {
        if z < 0x80 {
            b.push(z as u8);
            return;
        }
        b.push((z as u8 & 0x7f) | 0x80);
        z >>= 7;
    }
}

fn put_bytes(b: &mut Vec<u8>, v: Option<&[u8]>) {
    match v {
        None => put_varlong(b, -1),
        Some(v) => {
            put_varlong(b, v.len() as i64);
            b.extend_from_slice(v);
        }
    }
}

#[derive(Clone, Copy)]
pub(super) struct BatchSpec {
    pub(super) base_offset: i64,
    pub(super) codec: i16,
    pub(super) attributes: i16,
    pub(super) producer_id: i64,
    pub(super) base_ts: i64,
    pub(super) max_ts: i64,
}

pub(super) fn spec(base_offset: i64, codec: i16) -> BatchSpec {
    BatchSpec {
        base_offset,
        codec,
        attributes: 0,
        producer_id: -1,
        base_ts: 1_700_000_000_000,
        max_ts: 1_700_000_000_000,
    }
}

/// One RecordBatch v2, with a correct CRC.
pub(super) fn batch(s: BatchSpec, recs: &[Rec]) -> Vec<u8> {
    let mut raw = Vec::new();
    for r in recs {
        let mut body = vec![0u8];
        put_varlong(&mut body, r.ts_delta);
        put_varlong(&mut body, r.offset_delta as i64);
        put_bytes(&mut body, r.key);
        put_bytes(&mut body, r.value);
        put_varlong(&mut body, r.headers.len() as i64);
        for (k, v) in &r.headers {
            put_bytes(&mut body, Some(k.as_bytes()));
            put_bytes(&mut body, *v);
        }
        put_varlong(&mut raw, body.len() as i64);
        raw.extend_from_slice(&body);
    }
    let mut out = BytesMut::new();
    let fill = |b: &mut BytesMut| -> anyhow::Result<()> {
        b.put_slice(&raw);
        Ok(())
    };
    match s.codec {
        0 => out.put_slice(&raw),
        1 => Gzip::compress(&mut out, fill).unwrap(),
        2 => Snappy::compress(&mut out, fill).unwrap(),
        3 => Lz4::compress(&mut out, fill).unwrap(),
        4 => Zstd::compress(&mut out, fill).unwrap(),
        _ => unreachable!(),
    }
    let last_delta = recs.iter().map(|r| r.offset_delta).max().unwrap_or(0);
    let mut b = Vec::new();
    b.extend_from_slice(&s.base_offset.to_be_bytes());
    b.extend_from_slice(&((49 + out.len()) as i32).to_be_bytes());
    b.extend_from_slice(&0i32.to_be_bytes()); // leader epoch
    b.push(2);
    b.extend_from_slice(&0u32.to_be_bytes()); // crc, below
    b.extend_from_slice(&(s.attributes | s.codec).to_be_bytes());
    b.extend_from_slice(&last_delta.to_be_bytes());
    b.extend_from_slice(&s.base_ts.to_be_bytes());
    b.extend_from_slice(&s.max_ts.to_be_bytes());
    b.extend_from_slice(&s.producer_id.to_be_bytes());
    b.extend_from_slice(&0i16.to_be_bytes());
    b.extend_from_slice(&(-1i32).to_be_bytes());
    b.extend_from_slice(&(recs.len() as i32).to_be_bytes());
    b.extend_from_slice(&out);
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b
}

/// Simple batch: `n` records at `base..base+n`, key `k<offset>`, value `v<offset>`, one header.
pub(super) fn simple(s: BatchSpec, n: i32) -> Vec<u8> {
    let keys: Vec<String> = (0..n)
        .map(|i| format!("k{}", s.base_offset + i as i64))
        .collect();
    let values: Vec<String> = (0..n)
        .map(|i| format!("v{}", s.base_offset + i as i64))
        .collect();
    let recs: Vec<Rec> = (0..n)
        .map(|i| Rec {
            offset_delta: i,
            ts_delta: i as i64,
            key: Some(keys[i as usize].as_bytes()),
            value: Some(values[i as usize].as_bytes()),
            headers: vec![("h", Some(b"x"))],
        })
        .collect();
    let mut s = s;
    s.max_ts = s.base_ts + n as i64 - 1;
    batch(s, &recs)
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Row {
    offset: i64,
    timestamp: i64,
    timestamp_type: String,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(String, Option<Vec<u8>>)>,
    producer_id: i64,
    topic: String,
    partition: i32,
}

fn read_rows(parquet: &[u8]) -> Vec<Row> {
    let reader = ParquetRecordBatchReaderBuilder::try_new(Bytes::copy_from_slice(parquet))
        .unwrap()
        .build()
        .unwrap();
    let mut rows = Vec::new();
    for b in reader {
        let b = b.unwrap();
        let topic = b.column(0).as_string::<i32>();
        let partition = b.column(1).as_primitive::<Int32Type>();
        let offset = b.column(2).as_primitive::<Int64Type>();
        let ts = b.column(3).as_primitive::<TimestampMillisecondType>();
        let tt = b.column(4).as_string::<i32>();
        let key = b.column(5).as_binary::<i32>();
        let value = b.column(6).as_binary::<i32>();
        let headers = b.column(7).as_list::<i32>();
        let pid = b.column(8).as_primitive::<Int64Type>();
        for i in 0..b.num_rows() {
            let h = headers.value(i);
            let h = h.as_struct();
            let hk = h.column(0).as_string::<i32>();
            let hv = h.column(1).as_binary::<i32>();
            rows.push(Row {
                offset: offset.value(i),
                timestamp: ts.value(i),
                timestamp_type: tt.value(i).to_string(),
                key: (!key.is_null(i)).then(|| key.value(i).to_vec()),
                value: (!value.is_null(i)).then(|| value.value(i).to_vec()),
                headers: (0..h.len())
                    .map(|j| {
                        (
                            hk.value(j).to_string(),
                            (!hv.is_null(j)).then(|| hv.value(j).to_vec()),
                        )
                    })
                    .collect(),
                producer_id: pid.value(i),
                topic: topic.value(i).to_string(),
                partition: partition.value(i),
            });
        }
    }
    rows
}

fn convert(batches: &[Vec<u8>], filter: RecordFilter, aborted: &AbortedTxns) -> Vec<u8> {
    let mut w = ParquetFileWriter::new(Vec::new(), "t", 3, &ConvertOptions::default()).unwrap();
    let mut filter = filter;
    for b in batches {
        let bytes = Bytes::copy_from_slice(b);
        let h = BatchHeader::parse(&bytes).unwrap().unwrap();
        w.push_batch(&h, &bytes, &mut filter, aborted).unwrap();
    }
    w.finish().unwrap()
}

#[test]
fn every_codec_converts_to_the_same_rows() {
    let mut expected = None;
    for codec in 0..=4 {
        let batches = vec![simple(spec(0, codec), 5), simple(spec(5, codec), 3)];
        let rows = read_rows(&convert(
            &batches,
            RecordFilter::offsets(0, i64::MAX),
            &AbortedTxns::default(),
        ));
        assert_eq!(rows.len(), 8, "codec {codec}");
        assert_eq!(rows[6].key.as_deref(), Some(&b"k6"[..]));
        assert_eq!(rows[6].value.as_deref(), Some(&b"v6"[..]));
        assert_eq!(rows[6].timestamp, 1_700_000_000_001);
        assert_eq!(
            rows[6].headers,
            vec![("h".to_string(), Some(b"x".to_vec()))]
        );
        assert_eq!((rows[0].topic.as_str(), rows[0].partition), ("t", 3));
        match &expected {
            None => expected = Some(rows),
            Some(e) => assert_eq!(e, &rows, "codec {codec}"),
        }
    }
}

#[test]
fn batches_from_kafka_protocols_encoder_are_read_exactly() {
    use kafka_protocol::indexmap::IndexMap;
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::records::{
        Compression as C, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };
    let records: Vec<Record> = (0..20)
        .map(|i| {
            let mut headers = IndexMap::new();
            headers.insert(
                StrBytes::from_string(format!("n{i}")),
                Some(Bytes::from("hv")),
            );
            headers.insert(StrBytes::from_string("null".into()), None);
            Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 0,
                producer_id: 42,
                producer_epoch: 0,
                timestamp_type: TimestampType::Creation,
                offset: 100 + i,
                sequence: i as i32,
                timestamp: 5_000 + i * 7,
                key: (i % 3 != 0).then(|| Bytes::from(format!("key{i}"))),
                value: (i % 5 != 0).then(|| Bytes::from(vec![i as u8; 300])),
                headers,
            }
        })
        .collect();
    for compression in [C::None, C::Gzip, C::Snappy, C::Lz4, C::Zstd] {
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(
            &mut buf,
            &records,
            &RecordEncodeOptions {
                version: 2,
                compression,
            },
        )
        .unwrap();
        let rows = read_rows(&convert(
            &[buf.to_vec()],
            RecordFilter::offsets(0, i64::MAX),
            &AbortedTxns::default(),
        ));
        assert_eq!(rows.len(), records.len(), "{compression:?}");
        for (row, rec) in rows.iter().zip(&records) {
            assert_eq!(row.offset, rec.offset);
            assert_eq!(row.timestamp, rec.timestamp);
            assert_eq!(row.key.as_deref(), rec.key.as_deref());
            assert_eq!(row.value.as_deref(), rec.value.as_deref());
            assert_eq!(row.producer_id, 42);
            let headers: Vec<_> = rec
                .headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.as_ref().map(|v| v.to_vec())))
                .collect();
            assert_eq!(row.headers, headers);
        }
    }
}

#[test]
fn repeated_header_keys_null_fields_and_log_append_time_are_kept() {
    let mut s = spec(10, 4);
    s.attributes = 0x08; // LogAppendTime
    s.max_ts = 9_999;
    let b = batch(
        s,
        &[
            Rec {
                offset_delta: 0,
                ts_delta: 3,
                key: None,
                value: None,
                headers: vec![("a", Some(b"1")), ("a", Some(b"2")), ("b", None)],
            },
            Rec {
                offset_delta: 1,
                ts_delta: 4,
                key: Some(b""),
                value: Some(b""),
                headers: vec![],
            },
        ],
    );
    let rows = read_rows(&convert(
        &[b],
        RecordFilter::offsets(0, i64::MAX),
        &AbortedTxns::default(),
    ));
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].timestamp, 9_999);
    assert_eq!(rows[0].timestamp_type, "LogAppendTime");
    assert_eq!(rows[0].key, None);
    assert_eq!(rows[0].value, None);
    assert_eq!(
        rows[0].headers,
        vec![
            ("a".to_string(), Some(b"1".to_vec())),
            ("a".to_string(), Some(b"2".to_vec())),
            ("b".to_string(), None)
        ]
    );
    assert_eq!(rows[1].key, Some(vec![]));
    assert_eq!(rows[1].headers, vec![]);
}

fn txn_batches() -> (Vec<Vec<u8>>, AbortedTxns) {
    let tx = |base: i64, pid: i64, n: i32| {
        let mut s = spec(base, 0);
        s.attributes = 0x10;
        s.producer_id = pid;
        simple(s, n)
    };
    let marker = |base: i64, pid: i64| {
        let mut s = spec(base, 0);
        s.attributes = 0x30;
        s.producer_id = pid;
        batch(
            s,
            &[Rec {
                offset_delta: 0,
                ts_delta: 0,
                key: Some(&[0, 0, 0, 0]),
                value: Some(&[0, 0, 0, 0, 0, 0]),
                headers: vec![],
            }],
        )
    };
    // 0..2 plain; pid 7 aborted at 2..4 (marker 6); pid 8 committed at 4..6 (marker 7);
    // pid 7 again committed at 8..10 (marker 10); plain 11.
    let batches = vec![
        simple(spec(0, 0), 2),
        tx(2, 7, 2),
        tx(4, 8, 2),
        marker(6, 7),
        marker(7, 8),
        tx(8, 7, 2),
        marker(10, 7),
        simple(spec(11, 0), 1),
    ];
    let aborted = AbortedTxns::new(vec![AbortedTxn {
        producer_id: 7,
        first_offset: 2,
        last_offset: 6,
    }]);
    (batches, aborted)
}

#[test]
fn control_batches_and_aborted_transactions_are_not_exported() {
    let (batches, aborted) = txn_batches();
    let rows = read_rows(&convert(
        &batches,
        RecordFilter::offsets(0, i64::MAX),
        &aborted,
    ));
    let offsets: Vec<i64> = rows.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, vec![0, 1, 4, 5, 8, 9, 11]);
    assert_eq!(rows[2].producer_id, 8);
}

#[test]
fn aborted_lookup_matches_only_the_producer_and_range() {
    let a = AbortedTxns::new(vec![
        AbortedTxn {
            producer_id: 1,
            first_offset: 10,
            last_offset: 20,
        },
        AbortedTxn {
            producer_id: 1,
            first_offset: 30,
            last_offset: 40,
        },
        AbortedTxn {
            producer_id: 2,
            first_offset: 0,
            last_offset: 100,
        },
    ]);
    assert!(!a.is_aborted(1, 9));
    assert!(a.is_aborted(1, 10));
    assert!(a.is_aborted(1, 20));
    assert!(!a.is_aborted(1, 25));
    assert!(a.is_aborted(1, 35));
    assert!(!a.is_aborted(1, 41));
    assert!(a.is_aborted(2, 50));
    assert!(!a.is_aborted(3, 50));
}

#[test]
fn offset_and_time_filters_cut_inside_batches() {
    let batches = vec![simple(spec(0, 4), 10), simple(spec(10, 4), 10)];
    let rows = read_rows(&convert(
        &batches,
        RecordFilter::offsets(3, 14),
        &AbortedTxns::default(),
    ));
    assert_eq!(rows.first().map(|r| r.offset), Some(3));
    assert_eq!(rows.last().map(|r| r.offset), Some(13));
    assert_eq!(rows.len(), 11);
    // Timestamps are base + delta: offsets 0..10 at t0+0..9, offsets 10..20 at t0+0..9.
    let t0 = 1_700_000_000_000;
    let mut f = RecordFilter {
        from: 0,
        to: i64::MAX,
        from_time: Some(t0 + 5),
        to_time: Some(t0 + 8),
    };
    let mut w = ParquetFileWriter::new(Vec::new(), "t", 0, &ConvertOptions::default()).unwrap();
    for b in &batches {
        let bytes = Bytes::copy_from_slice(b);
        let h = BatchHeader::parse(&bytes).unwrap().unwrap();
        w.push_batch(&h, &bytes, &mut f, &AbortedTxns::default())
            .unwrap();
    }
    // Starts at offset 5 (t0+5), stops at offset 9 (t0+9 > t0+8).
    assert_eq!(f.to, 9);
    let rows = read_rows(&w.finish().unwrap());
    let offsets: Vec<i64> = rows.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, vec![5, 6, 7, 8]);
}

#[test]
fn corrupt_batches_are_errors_not_panics() {
    let mut b = simple(spec(0, 4), 3);
    let n = b.len();
    b[n - 2] ^= 0xff;
    let bytes = Bytes::from(b);
    let h = BatchHeader::parse(&bytes).unwrap().unwrap();
    let mut w = ParquetFileWriter::new(Vec::new(), "t", 0, &ConvertOptions::default()).unwrap();
    let mut f = RecordFilter::offsets(0, i64::MAX);
    assert!(matches!(
        w.push_batch(&h, &bytes, &mut f, &AbortedTxns::default()),
        Err(ConvertError::Corrupt { .. })
    ));
    assert!(BatchHeader::parse(&[0u8; 11]).unwrap().is_none());
    let mut short = vec![0u8; 12];
    short[11] = 5;
    assert!(BatchHeader::parse(&short).is_err());
}

// ---- whole-partition export ----

pub(super) fn write_segment(dir: &Path, base: i64, batches: &[Vec<u8>]) {
    std::fs::write(dir.join(format!("{base:020}.log")), batches.concat()).unwrap();
}

fn txnindex_entry(pid: i64, first: i64, last: i64) -> Vec<u8> {
    let mut e = Vec::new();
    e.extend_from_slice(&0i16.to_be_bytes());
    e.extend_from_slice(&pid.to_be_bytes());
    e.extend_from_slice(&first.to_be_bytes());
    e.extend_from_slice(&last.to_be_bytes());
    e.extend_from_slice(&(last + 1).to_be_bytes());
    e
}

/// A partition dir with segments 0 (offsets 0..12, the txn batches), 12 (12..42), 42 (42..45)
/// and an active segment at 45 holding an open transaction of producer 9 at 45.
fn local_partition(dir: &Path) {
    let (txn, _) = txn_batches();
    write_segment(dir, 0, &txn);
    std::fs::write(
        dir.join(format!("{:020}.txnindex", 0)),
        txnindex_entry(7, 2, 6),
    )
    .unwrap();
    write_segment(
        dir,
        12,
        &[
            simple(spec(12, 1), 10),
            simple(spec(22, 2), 10),
            simple(spec(32, 3), 10),
        ],
    );
    write_segment(dir, 42, &[simple(spec(42, 4), 3)]);
    let mut s = spec(45, 0);
    s.attributes = 0x10;
    s.producer_id = 9;
    write_segment(dir, 45, &[simple(s, 2)]);
}

pub(super) async fn run_export(
    plan: &Arc<PartitionPlan>,
    target: &Arc<Target>,
    range: ExportRange,
    options: &ExportOptions,
) -> Result<PartitionSummary, ExportError> {
    export_partition(
        plan.clone(),
        target.clone(),
        range,
        options.clone(),
        Arc::new(Progress::default()),
        CancellationToken::new(),
    )
    .await
}

fn exported(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let dir = root.join("topic=t/partition=0");
    std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".parquet"))
        .map(|n| (n.clone(), std::fs::read(dir.join(&n)).unwrap()))
        .collect()
}

pub(super) async fn local_plan(dir: &Path) -> Arc<PartitionPlan> {
    local_plan_below(dir, None).await
}

/// The plan of a local partition whose high watermark checkpoint is `high_watermark`.
async fn local_plan_below(dir: &Path, high_watermark: Option<i64>) -> Arc<PartitionPlan> {
    Arc::new(
        plan_partition(PlanInput {
            topic: "t",
            partition: 0,
            remote: None,
            local_dir: Some(dir.to_path_buf()),
            high_watermark,
            from: 0,
        })
        .await
        .unwrap(),
    )
}

#[tokio::test]
async fn local_segments_export_once_and_a_rerun_after_a_crash_rewrites_identical_files() {
    let log = tempfile::tempdir().unwrap();
    local_partition(log.path());
    let plan = local_plan(log.path()).await;
    // The active segment is planned too; the open transaction at 45 in it ends the export.
    assert_eq!(plan.safe_end, 45);
    assert_eq!(plan.segments.len(), 4);
    assert_eq!(plan.log_end, 47);
    assert_eq!(plan.stopped_by, Some(Bound::OpenTransaction));
    let out = tempfile::tempdir().unwrap();
    let target = Arc::new(Target::open(out.path().to_str().unwrap(), &Default::default()).unwrap());
    let options = ExportOptions::default();
    let s = run_export(&plan, &target, ExportRange::default(), &options)
        .await
        .unwrap();
    assert_eq!(s.records, 7 + 30 + 3);
    assert_eq!(s.end_offset, 45);
    let files = exported(out.path());
    let names: Vec<&String> = files.keys().collect();
    assert_eq!(
        names,
        vec![
            "00000000000000000000-00000000000000000011.parquet",
            "00000000000000000012-00000000000000000041.parquet",
            "00000000000000000042-00000000000000000044.parquet",
        ]
    );
    let all: Vec<i64> = files
        .values()
        .flat_map(|f| read_rows(f))
        .map(|r| r.offset)
        .collect();
    let mut want = vec![0, 1, 4, 5, 8, 9, 11];
    want.extend(12..45);
    assert_eq!(all, want);
    let (c, _) = target.read_checkpoint("t", 0).await.unwrap();
    assert_eq!(c.unwrap().next_offset, 45);

    // A re-run finds nothing to do.
    let again = run_export(&plan, &target, ExportRange::default(), &options)
        .await
        .unwrap();
    assert_eq!((again.records, again.files.len()), (0, 0));

    // Crash after the second file landed but before its checkpoint: the re-run writes the
    // same files with the same bytes, and no others.
    target
        .write_checkpoint("t", 0, Checkpoint::new("t", 0, 12, None, Some(42)), None)
        .await
        .unwrap();
    std::fs::write(
        out.path().join("topic=t/partition=0/.writing-x.tmp"),
        b"torn",
    )
    .unwrap();
    let rerun = run_export(&plan, &target, ExportRange::default(), &options)
        .await
        .unwrap();
    assert_eq!(rerun.records, 33);
    assert_eq!(exported(out.path()), files);
    let leftovers: Vec<_> = std::fs::read_dir(out.path().join("topic=t/partition=0"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[tokio::test]
async fn large_segments_split_into_files_at_the_same_batches_every_time() {
    let log = tempfile::tempdir().unwrap();
    let big: Vec<Vec<u8>> = (0..40).map(|i| simple(spec(i * 50, 4), 50)).collect();
    write_segment(log.path(), 0, &big);
    write_segment(log.path(), 2000, &[]);
    let plan = local_plan(log.path()).await;
    let options = ExportOptions {
        file_bytes: 8 << 10,
        convert: ConvertOptions {
            batch_rows: 100,
            ..Default::default()
        },
        ..Default::default()
    };
    let mut runs = Vec::new();
    for _ in 0..2 {
        let out = tempfile::tempdir().unwrap();
        let target =
            Arc::new(Target::open(out.path().to_str().unwrap(), &Default::default()).unwrap());
        let s = run_export(&plan, &target, ExportRange::default(), &options)
            .await
            .unwrap();
        assert_eq!(s.records, 2000);
        runs.push(exported(out.path()));
    }
    assert!(runs[0].len() > 2, "{} files", runs[0].len());
    assert_eq!(runs[0], runs[1]);
    // The files tile the offsets with no gap or overlap.
    let mut next = 0;
    for (name, data) in &runs[0] {
        let rows = read_rows(data);
        assert_eq!(rows[0].offset, next, "{name}");
        next = rows.last().unwrap().offset + 1;
    }
    assert_eq!(next, 2000);
}

#[tokio::test]
async fn batches_straddling_read_chunks_export_the_same_files_as_one_read() {
    // Reads come in chunks of at least 64 KiB. Lay out a segment where a chunk boundary cuts
    // a batch header, and a batch spans more than a whole chunk.
    const CHUNK: usize = 64 << 10;
    let mut tail = Vec::new();
    let mut records = 1;
    for n in [6000, 3, 1, 2000, 7, 1, 1, 500] {
        tail.push(simple(spec(records, 0), n as i32));
        records += n;
    }
    // A first record with a `pad`-byte value shifts every later batch by a byte a step.
    let first = |pad: usize| {
        let padding = vec![b'p'; pad];
        let rec = Rec {
            offset_delta: 0,
            ts_delta: 0,
            key: None,
            value: Some(&padding),
            headers: vec![],
        };
        batch(spec(0, 0), &[rec])
    };
    let cuts_a_header = |first: &[u8]| {
        let mut start = first.len();
        tail.iter().any(|b| {
            let cut = (start / CHUNK + 1) * CHUNK;
            let cut_inside_header = cut - start < LOG_OVERHEAD;
            start += b.len();
            cut_inside_header
        })
    };
    let head = (0..CHUNK)
        .map(first)
        .find(|f| cuts_a_header(f))
        .expect("some padding makes a chunk boundary cut a batch header");
    let batches: Vec<Vec<u8>> = std::iter::once(head).chain(tail).collect();
    assert!(batches.iter().any(|b| b.len() > CHUNK));
    let log = tempfile::tempdir().unwrap();
    write_segment(log.path(), 0, &batches);
    write_segment(log.path(), records, &[]);
    let plan = local_plan(log.path()).await;
    let mut runs = Vec::new();
    for chunk_bytes in [CHUNK, 64 << 20] {
        let out = tempfile::tempdir().unwrap();
        let target =
            Arc::new(Target::open(out.path().to_str().unwrap(), &Default::default()).unwrap());
        let options = ExportOptions {
            chunk_bytes,
            ..Default::default()
        };
        let s = run_export(&plan, &target, ExportRange::default(), &options)
            .await
            .unwrap();
        assert_eq!(s.records, records as u64);
        runs.push(exported(out.path()));
    }
    assert_eq!(runs[0], runs[1]);
    let offsets: Vec<i64> = runs[0]
        .values()
        .flat_map(|f| read_rows(f))
        .map(|r| r.offset)
        .collect();
    assert_eq!(offsets, (0..records).collect::<Vec<_>>());

    // A segment that ends inside a batch is an error, whatever the chunking.
    let all = batches.concat();
    std::fs::write(
        log.path().join(format!("{:020}.log", 0)),
        &all[..all.len() - 5],
    )
    .unwrap();
    let plan = local_plan(log.path()).await;
    let out = tempfile::tempdir().unwrap();
    let target = Arc::new(Target::open(out.path().to_str().unwrap(), &Default::default()).unwrap());
    let options = ExportOptions {
        chunk_bytes: CHUNK,
        ..Default::default()
    };
    let err = run_export(&plan, &target, ExportRange::default(), &options)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("ends inside a batch"), "{err}");
}

#[tokio::test]
async fn remote_segments_and_an_object_store_target() {
    use crate::manifest::{self as m, Part, PartitionManifest, RemoteSegment};
    let store = Arc::new(RemoteStore::in_memory());
    let id = m::PartitionId {
        topic: "t".into(),
        topic_id: uuid::Uuid::new_v4(),
        partition: 0,
    };
    let (txn, _) = txn_batches();
    let seg0 = txn.concat();
    let seg1 = [simple(spec(12, 4), 20), simple(spec(32, 3), 5)].concat();
    let mut manifest = PartitionManifest::empty(&id, 0);
    for (base, next, log, txnindex) in [
        (0, 12, seg0, Some(txnindex_entry(7, 2, 6))),
        (12, 37, seg1, None),
    ] {
        let key = id.segment_key(base, 0);
        let mut object = log.clone();
        let txn_part = txnindex.map(|t| {
            let start = object.len() as u64;
            object.extend_from_slice(&t);
            Part {
                start,
                end: object.len() as u64,
            }
        });
        store.put("t", &key, object.into()).await.unwrap();
        manifest.segments.push(RemoteSegment {
            key,
            base_offset: base,
            next_offset: next,
            max_timestamp: 0,
            leader_epoch: 0,
            epochs: vec![],
            log: Part {
                start: 0,
                end: log.len() as u64,
            },
            offset_index: Part { start: 0, end: 0 },
            time_index: Part { start: 0, end: 0 },
            producer_snapshot: None,
            leader_epoch_checkpoint: None,
            txn_index: txn_part,
            uploaded_at_ms: 0,
        });
    }
    m::commit(&store, &id, None, manifest).await.unwrap();
    let plan = Arc::new(
        plan_partition(PlanInput {
            topic: "t",
            partition: 0,
            remote: Some((store.clone(), id.clone())),
            local_dir: None,
            high_watermark: None,
            from: 0,
        })
        .await
        .unwrap(),
    );
    assert_eq!(plan.aborted.len(), 1);
    let target = Arc::new(Target::Store(Arc::new(RemoteStore::in_memory())));
    let range = ExportRange {
        to_offset: Some(30),
        ..Default::default()
    };
    let s = run_export(&plan, &target, range, &ExportOptions::default())
        .await
        .unwrap();
    assert_eq!(s.records, 7 + 18);
    assert_eq!(s.end_offset, 30);
    assert_eq!(
        s.files,
        vec![
            "00000000000000000000-00000000000000000011.parquet".to_string(),
            "00000000000000000012-00000000000000000029.parquet".to_string(),
        ]
    );
    let Target::Store(out) = &*target else {
        unreachable!()
    };
    let (data, _) = out
        .get(
            "t",
            "topic=t/partition=0/00000000000000000012-00000000000000000029.parquet",
        )
        .await
        .unwrap()
        .unwrap();
    let rows = read_rows(&data);
    assert_eq!(rows.len(), 18);
    assert_eq!(rows[17].offset, 29);
    // The rest of the range continues from the checkpoint.
    let s = run_export(
        &plan,
        &target,
        ExportRange::default(),
        &ExportOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!((s.start_offset, s.end_offset, s.records), (30, 37, 7));

    // Local segments may start below the end of the remote ones; above it, the records
    // between are nowhere, and the plan says so instead of skipping them.
    let plan_with_local = |dir: std::path::PathBuf, id: m::PartitionId| {
        let store = store.clone();
        async move {
            plan_partition(PlanInput {
                topic: "t",
                partition: 0,
                remote: Some((store, id)),
                local_dir: Some(dir),
                high_watermark: None,
                from: 0,
            })
            .await
        }
    };
    let overlapping = tempfile::tempdir().unwrap();
    write_segment(overlapping.path(), 32, &[simple(spec(32, 3), 5)]);
    write_segment(overlapping.path(), 37, &[simple(spec(37, 3), 5)]);
    let p = plan_with_local(overlapping.path().to_path_buf(), id.clone()).await;
    assert_eq!(p.unwrap().log_end, 42);
    let above = tempfile::tempdir().unwrap();
    write_segment(above.path(), 50, &[simple(spec(50, 3), 5)]);
    let err = plan_with_local(above.path().to_path_buf(), id.clone())
        .await
        .unwrap_err();
    assert!(err.needs_new_plan(), "{err}");
    assert_eq!(
        err.to_string(),
        "offsets 37..50 of t-0 are neither in log.dirs nor in the bucket"
    );
}

#[test]
fn times_parse_in_the_usual_forms() {
    assert_eq!(parse_time("1700000000000"), Ok(1_700_000_000_000));
    assert_eq!(parse_time("2023-11-14T22:13:20Z"), Ok(1_700_000_000_000));
    assert_eq!(
        parse_time("2023-11-14T23:13:20.5+01:00"),
        Ok(1_700_000_000_500)
    );
    assert_eq!(parse_time("2023-11-14 22:13:20"), Ok(1_700_000_000_000));
    assert_eq!(parse_time("2023-11-14"), Ok(1_699_920_000_000));
    assert!(parse_time("yesterday").is_err());
}

#[test]
fn a_value_schema_adds_typed_columns_keeps_raw_values_and_counts_mismatches() {
    let value_schema = ValueSchema::from_json(
        br#"{"fields":[{"name":"id","type":"long"},{"name":"amount","type":"double"},
        {"name":"ts","type":"timestamp_ms"},{"name":"tags","type":"string","nullable":true}]}"#,
    )
    .unwrap();
    let values: Vec<Option<Vec<u8>>> = (0..250)
        .map(|i| match i % 5 {
            0 => Some(format!(
                r#"{{"id":{i},"amount":{i}.5,"ts":{},"tags":"t{i}"}}"#,
                1000 + i
            )),
            1 => Some(format!(
                r#"{{"id":{i},"amount":{i},"ts":"1970-01-01T00:00:01Z"}}"#
            )),
            2 => Some(format!("not json {i}")),
            3 => Some(format!(r#"{{"id":"{i}","amount":1,"ts":1}}"#)),
            _ => None,
        })
        .map(|v| v.map(String::into_bytes))
        .collect();
    let batches: Vec<Vec<u8>> = values
        .chunks(50)
        .enumerate()
        .map(|(b, chunk)| {
            let recs: Vec<Rec> = chunk
                .iter()
                .enumerate()
                .map(|(i, v)| Rec {
                    offset_delta: i as i32,
                    ts_delta: 0,
                    key: None,
                    value: v.as_deref(),
                    headers: vec![],
                })
                .collect();
            batch(spec(b as i64 * 50, 4), &recs)
        })
        .collect();
    // Small Arrow batches: the typed columns are flushed with the fixed ones.
    let options = ConvertOptions {
        batch_rows: 64,
        value_schema: Some(Arc::new(value_schema)),
        ..Default::default()
    };
    let mut w = ParquetFileWriter::new(Vec::new(), "t", 0, &options).unwrap();
    let mut filter = RecordFilter::offsets(0, i64::MAX);
    let mut pushed = Pushed::default();
    for b in &batches {
        let bytes = Bytes::copy_from_slice(b);
        let h = BatchHeader::parse(&bytes).unwrap().unwrap();
        let p = w
            .push_batch(&h, &bytes, &mut filter, &AbortedTxns::default())
            .unwrap();
        pushed.rows += p.rows;
        pushed.values_not_json += p.values_not_json;
        pushed.values_mismatched += p.values_mismatched;
    }
    assert_eq!(
        (
            pushed.rows,
            pushed.values_not_json,
            pushed.values_mismatched
        ),
        (250, 50, 50)
    );
    assert_eq!((w.values_not_json, w.values_mismatched), (50, 50));
    let parquet = w.finish().unwrap();

    // The fixed columns are unchanged (raw values kept), the typed ones follow.
    let rows = read_rows(&parquet);
    assert_eq!(rows.len(), 250);
    for (row, v) in rows.iter().zip(&values) {
        assert_eq!(&row.value, v);
    }
    let reader = ParquetRecordBatchReaderBuilder::try_new(Bytes::from(parquet))
        .unwrap()
        .build()
        .unwrap();
    let names: Vec<String> = arrow_array::RecordBatchReader::schema(&reader)
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(
        names[9..],
        ["value_id", "value_amount", "value_ts", "value_tags"]
    );
    let mut i = 0usize;
    for b in reader {
        let b = b.unwrap();
        let id = b.column(9).as_primitive::<Int64Type>();
        let amount = b
            .column(10)
            .as_primitive::<arrow_array::types::Float64Type>();
        let ts = b.column(11).as_primitive::<TimestampMillisecondType>();
        let tags = b.column(12).as_string::<i32>();
        for r in 0..b.num_rows() {
            let n = i as i64;
            match i % 5 {
                0 => {
                    assert_eq!((id.value(r), amount.value(r)), (n, n as f64 + 0.5));
                    assert_eq!(
                        (ts.value(r), tags.value(r)),
                        (1000 + n, format!("t{i}").as_str())
                    );
                }
                1 => {
                    assert_eq!(
                        (id.value(r), amount.value(r), ts.value(r)),
                        (n, n as f64, 1000)
                    );
                    assert!(tags.is_null(r));
                }
                3 => {
                    assert!(id.is_null(r), "row {i}");
                    assert_eq!((amount.value(r), ts.value(r)), (1.0, 1));
                }
                _ => {
                    for c in 9..13 {
                        assert!(b.column(c).is_null(r), "row {i} column {c}");
                    }
                }
            }
            i += 1;
        }
    }
    assert_eq!(i, 250);
}

#[tokio::test]
async fn the_active_segment_is_exported_up_to_its_last_whole_batch_and_the_high_watermark() {
    let log = tempfile::tempdir().unwrap();
    // Every record is in the active segment; a broker is writing its last batch.
    let whole = [simple(spec(0, 1), 10), simple(spec(10, 2), 5)];
    let mut bytes = whole.concat();
    let growing = simple(spec(15, 3), 5);
    bytes.extend_from_slice(&growing[..growing.len() - 7]);
    std::fs::write(log.path().join(format!("{:020}.log", 0)), &bytes).unwrap();
    let plan = local_plan(log.path()).await;
    assert_eq!(
        (plan.safe_end, plan.log_end, plan.stopped_by),
        (15, 15, None)
    );
    let out = tempfile::tempdir().unwrap();
    let target = Arc::new(Target::open(out.path().to_str().unwrap(), &Default::default()).unwrap());
    let options = ExportOptions::default();
    let s = run_export(&plan, &target, ExportRange::default(), &options)
        .await
        .unwrap();
    assert_eq!((s.records, s.end_offset, s.log_end), (15, 15, 15));
    let offsets: Vec<i64> = exported(out.path())
        .values()
        .flat_map(|f| read_rows(f))
        .map(|r| r.offset)
        .collect();
    assert_eq!(offsets, (0..15).collect::<Vec<_>>());

    // With a high watermark checkpoint below the end, the export stops there and says why;
    // a later run continues from its checkpoint.
    let plan = local_plan_below(log.path(), Some(12)).await;
    assert_eq!(
        (plan.safe_end, plan.stopped_by),
        (12, Some(Bound::HighWatermark))
    );
    let out = tempfile::tempdir().unwrap();
    let target = Arc::new(Target::open(out.path().to_str().unwrap(), &Default::default()).unwrap());
    let s = run_export(&plan, &target, ExportRange::default(), &options)
        .await
        .unwrap();
    assert_eq!((s.records, s.end_offset), (12, 12));
    assert_eq!(s.stopped_by, Some(Bound::HighWatermark));
    let first = exported(out.path());
    assert_eq!(first.len(), 1);
    let rest = local_plan(log.path()).await;
    let s = run_export(&rest, &target, ExportRange::default(), &options)
        .await
        .unwrap();
    assert_eq!((s.start_offset, s.records, s.end_offset), (12, 3, 15));

    // Killed after the file that ended at the high watermark landed, before the checkpoint
    // moved: the next run, which may go further, ends its first file there again (same name
    // and bytes) rather than write one that overlaps it.
    target
        .write_checkpoint("t", 0, Checkpoint::new("t", 0, 0, None, Some(12)), None)
        .await
        .unwrap();
    let s = run_export(&rest, &target, ExportRange::default(), &options)
        .await
        .unwrap();
    assert_eq!((s.records, s.end_offset, s.files.len()), (15, 15, 2));
    let files = exported(out.path());
    assert_eq!(files.len(), 2, "{:?}", files.keys());
    let (name, bytes) = first.iter().next().unwrap();
    assert_eq!(files.get(name), Some(bytes));
    let (c, _) = target.read_checkpoint("t", 0).await.unwrap();
    let c = c.unwrap();
    assert_eq!((c.next_offset, c.pending_end), (15, None));
}
