//! Log invariants: offsets assigned densely and never reused, reads return whole batches,
//! recovery keeps every complete batch and drops a torn tail, retention moves the log start.

use std::collections::BTreeMap;

use kafka_protocol::records::Compression;
use proptest::prelude::*;

use super::batch::tests::encode_batch;
use super::batch::{BatchHeader, BatchIter};
use super::*;

fn config(overrides: &[(&str, &str)]) -> TopicConfig {
    let o: BTreeMap<String, String> = overrides
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    TopicConfig::resolve(&o, &Default::default())
}

fn open(dir: &Path, cfg: TopicConfig, clean: bool) -> Log {
    Log::open(
        dir,
        cfg,
        LoadOptions {
            clean_shutdown: clean,
            recovery_point: None,
            log_start_offset: None,
            now_ms: now(),
        },
    )
    .unwrap()
}

fn now() -> i64 {
    crate::clock::now_ms()
}

fn append(log: &mut Log, values: &[&[u8]]) -> AppendInfo {
    let b = encode_batch(values, Compression::None, now());
    let info = log.append_as_leader(&b, 0, now()).unwrap();
    let leo = log.log_end_offset();
    log.update_high_watermark(leo);
    info
}

/// All (offset of first record, record count) pairs readable from `from`.
fn read_all(log: &Log, from: i64) -> Vec<(i64, i32)> {
    let mut out = Vec::new();
    let mut offset = from;
    while let Some(slice) = log
        .read(offset, 1 << 20, log.high_watermark(), true)
        .unwrap()
    {
        let bytes = slice.read().unwrap();
        for item in BatchIter::new(&bytes) {
            let (_, h, _) = item.unwrap();
            out.push((h.base_offset, h.records_count));
            offset = h.last_offset() + 1;
        }
    }
    out
}

#[test]
fn offsets_are_assigned_densely_and_reads_return_whole_batches() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), config(&[]), true);
    assert_eq!(append(&mut log, &[b"a", b"b"]).base_offset, 0);
    assert_eq!(append(&mut log, &[b"c"]).base_offset, 2);
    assert_eq!(append(&mut log, &[b"d", b"e", b"f"]).base_offset, 3);
    assert_eq!(log.log_end_offset(), 6);
    assert_eq!(read_all(&log, 0), vec![(0, 2), (2, 1), (3, 3)]);
    // A read starting inside a batch returns that whole batch.
    assert_eq!(read_all(&log, 4), vec![(3, 3)]);
    assert!(matches!(
        log.read(7, 100, 6, true),
        Err(ReadError::OffsetOutOfRange { .. })
    ));
    assert!(log.read(6, 100, 6, true).unwrap().is_none());
}

/// Rolling syncs the sealed segment and moves the recovery point to the new one; after a
/// crash the recovery point stays where the checkpoint had it (what recovery rescanned is
/// not known to be on disk) until the next roll.
#[test]
fn the_recovery_point_moves_with_each_roll_and_not_with_a_rescan() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&[("segment.bytes", "400")]);
    let mut log = open(dir.path(), cfg.clone(), true);
    let value = [b'x'; 100];
    for _ in 0..20 {
        append(&mut log, &[&value]);
        assert_eq!(log.recovery_point(), log.active_segment_base_offset());
    }
    assert!(log.segment_count() > 3, "{} segments", log.segment_count());
    let checkpointed = log.recovery_point();
    assert!(checkpointed > 0);
    drop(log); // a crash: no close, no flush
    let reopen = |recovery_point| {
        Log::open(
            dir.path(),
            cfg.clone(),
            LoadOptions {
                clean_shutdown: false,
                recovery_point: Some(recovery_point),
                log_start_offset: None,
                now_ms: now(),
            },
        )
        .unwrap()
    };
    let mut log = reopen(checkpointed);
    assert_eq!(log.log_end_offset(), 20);
    assert_eq!(
        log.recovery_point(),
        checkpointed,
        "not moved by the rescan"
    );
    while log.active_segment_base_offset() == checkpointed {
        append(&mut log, &[&value]);
    }
    assert_eq!(log.recovery_point(), log.active_segment_base_offset());
    // A checkpoint older than the data (or none) rescans more, and still moves nothing.
    drop(log);
    let log = reopen(0);
    assert_eq!(log.recovery_point(), 0);
    assert_eq!(
        read_all(&log, 0).len() as i64,
        log.log_end_offset(),
        "every record kept"
    );
}

#[test]
fn reads_stop_at_the_high_watermark() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), config(&[]), true);
    append(&mut log, &[b"a"]);
    append(&mut log, &[b"b"]);
    log.update_high_watermark(1);
    assert_eq!(read_all(&log, 0), vec![(0, 1)]);
}

#[test]
fn segments_roll_on_size_and_reads_cross_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), config(&[("segment.bytes", "300")]), true);
    for i in 0..20 {
        append(&mut log, &[format!("value-{i:03}").as_bytes()]);
    }
    assert!(log.segment_count() > 3, "{} segments", log.segment_count());
    let all = read_all(&log, 0);
    assert_eq!(all.len(), 20);
    assert!(all.iter().enumerate().all(|(i, (o, _))| *o == i as i64));
    let logs = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "log")
        })
        .count();
    assert_eq!(logs, log.segment_count());
}

#[test]
fn a_clean_reopen_keeps_everything() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut log = open(dir.path(), config(&[("segment.bytes", "500")]), true);
        for i in 0..30 {
            append(&mut log, &[format!("v{i}").as_bytes(), b"x"]);
        }
        log.close(now()).unwrap();
    }
    let log = open(dir.path(), config(&[("segment.bytes", "500")]), true);
    assert_eq!(log.log_end_offset(), 60);
    assert_eq!(read_all(&log, 0).len(), 30);
}

#[test]
fn recovery_truncates_a_torn_tail_and_keeps_complete_batches() {
    let dir = tempfile::tempdir().unwrap();
    let path;
    {
        let mut log = open(dir.path(), config(&[]), true);
        for _ in 0..5 {
            append(&mut log, &[b"complete"]);
        }
        path = segment::Segment::log_path(dir.path(), 0);
    }
    // Simulate a crash mid-write: half a batch at the end.
    let b = encode_batch(&[b"torn"], Compression::None, now());
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    std::io::Write::write_all(&mut f, &b[..b.len() / 2]).unwrap();
    drop(f);
    let mut log = open(dir.path(), config(&[]), false);
    assert_eq!(log.log_end_offset(), 5);
    assert_eq!(read_all(&log, 0).len(), 5);
    // And the log is appendable right after the truncation point.
    assert_eq!(append(&mut log, &[b"next"]).base_offset, 5);
}

#[test]
fn recovery_drops_a_batch_with_a_bad_crc() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut log = open(dir.path(), config(&[]), true);
        for _ in 0..3 {
            append(&mut log, &[b"payload"]);
        }
    }
    let path = segment::Segment::log_path(dir.path(), 0);
    let mut raw = std::fs::read(&path).unwrap();
    let last = raw.len() - 1;
    raw[last] ^= 0xff;
    std::fs::write(&path, raw).unwrap();
    let log = open(dir.path(), config(&[]), false);
    assert_eq!(log.log_end_offset(), 2);
}

#[test]
fn retention_by_size_deletes_whole_old_segments_and_moves_the_log_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(
        dir.path(),
        config(&[("segment.bytes", "300"), ("retention.bytes", "600")]),
        true,
    );
    for i in 0..20 {
        append(&mut log, &[format!("value-{i:03}").as_bytes()]);
    }
    let before = log.segment_count();
    let deleted = log.apply_retention(now()).unwrap();
    assert!(deleted > 0 && log.segment_count() == before - deleted);
    assert!(log.size_bytes() <= 600 + 300);
    let start = log.log_start_offset();
    assert!(start > 0);
    assert!(matches!(
        log.read(0, 100, log.high_watermark(), true),
        Err(ReadError::OffsetOutOfRange { .. })
    ));
    assert_eq!(read_all(&log, start).first().map(|b| b.0), Some(start));
}

#[test]
fn retention_by_time_can_empty_the_log_and_appends_continue_at_the_same_offset() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), config(&[("retention.ms", "1000")]), true);
    let old = encode_batch(&[b"old"], Compression::None, now() - 10_000);
    log.append_as_leader(&old, 0, now()).unwrap();
    log.update_high_watermark(1);
    assert_eq!(log.apply_retention(now()).unwrap(), 1);
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (1, 1));
    assert_eq!(append(&mut log, &[b"new"]).base_offset, 1);
}

#[test]
fn idempotent_retries_are_deduplicated_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = encode_batch(&[b"x", b"y"], Compression::Lz4, now());
    // producer id 9, epoch 0, base sequence 0
    b[43..51].copy_from_slice(&9i64.to_be_bytes());
    b[51..53].copy_from_slice(&0i16.to_be_bytes());
    b[53..57].copy_from_slice(&0i32.to_be_bytes());
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    {
        let mut log = open(dir.path(), config(&[]), true);
        let first = log.append_as_leader(&b, 0, now()).unwrap();
        let again = log.append_as_leader(&b, 0, now()).unwrap();
        assert!(again.duplicate && again.base_offset == first.base_offset);
        log.close(now()).unwrap();
    }
    let mut log = open(dir.path(), config(&[]), true);
    let again = log.append_as_leader(&b, 0, now()).unwrap();
    assert!(again.duplicate);
    assert_eq!(log.log_end_offset(), 2);
}

#[test]
fn oversized_and_corrupt_batches_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), config(&[("max.message.bytes", "100")]), true);
    let big = encode_batch(&[&[7u8; 200]], Compression::None, now());
    assert!(matches!(
        log.append_as_leader(&big, 0, now()),
        Err(AppendError::MessageTooLarge { .. })
    ));
    let mut bad = encode_batch(&[b"x"], Compression::None, now());
    let last = bad.len() - 1;
    bad[last] ^= 1;
    assert!(matches!(
        log.append_as_leader(&bad, 0, now()),
        Err(AppendError::Records(
            strata_records::RecordsError::CrcMismatch { .. }
        ))
    ));
    assert!(matches!(
        log.append_as_leader(&[], 0, now()),
        Err(AppendError::InvalidRecord(_))
    ));
    assert_eq!(log.log_end_offset(), 0);
}

#[test]
fn timestamps_far_in_the_future_are_refused_under_create_time() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), config(&[]), true);
    let future = encode_batch(&[b"x"], Compression::None, now() + 2 * 3_600_000);
    assert!(matches!(
        log.append_as_leader(&future, 0, now()),
        Err(AppendError::RecordErrors {
            invalid_timestamp: true,
            ..
        })
    ));
}

#[test]
fn log_append_time_stamps_the_batch_without_recompressing() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(
        dir.path(),
        config(&[("message.timestamp.type", "LogAppendTime")]),
        true,
    );
    let b = encode_batch(&[b"x", b"y"], Compression::Snappy, 5);
    let t = now();
    let info = log.append_as_leader(&b, 0, t).unwrap();
    assert_eq!(info.log_append_time, t);
    log.update_high_watermark(2);
    let bytes = log
        .read(0, 1 << 20, 2, true)
        .unwrap()
        .unwrap()
        .read()
        .unwrap();
    let h = BatchHeader::parse(&bytes).unwrap();
    assert!(h.is_log_append_time() && h.max_timestamp == t);
    assert_eq!(h.codec().unwrap(), batch::Codec::Snappy);
    assert_eq!(bytes.len(), b.len());
}

#[test]
fn a_topic_codec_recompresses_only_batches_that_differ() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), config(&[("compression.type", "zstd")]), true);
    let b = encode_batch(
        &[b"aaaaaaaaaaaaaaaaaaaa", b"bbbbbbbbbbbbbbbbbbbb"],
        Compression::Gzip,
        now(),
    );
    log.append_as_leader(&b, 0, now()).unwrap();
    log.update_high_watermark(2);
    let bytes = log
        .read(0, 1 << 20, 2, true)
        .unwrap()
        .unwrap()
        .read()
        .unwrap();
    let h = BatchHeader::parse(&bytes).unwrap();
    assert_eq!(h.codec().unwrap(), batch::Codec::Zstd);
    h.validate(&bytes).unwrap();
    // kafka-protocol's decoder is the client-side oracle for the re-encoded batch.
    let values: Vec<_> = kafka_protocol::records::RecordBatchDecoder::decode(
        &mut bytes::Bytes::copy_from_slice(&bytes),
    )
    .unwrap()
    .records
    .into_iter()
    .map(|r| r.value.unwrap())
    .collect();
    assert_eq!(
        values,
        vec![
            bytes::Bytes::from_static(b"aaaaaaaaaaaaaaaaaaaa"),
            bytes::Bytes::from_static(b"bbbbbbbbbbbbbbbbbbbb")
        ]
    );
}

#[test]
fn offsets_for_timestamps_find_the_first_record_at_or_after() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), config(&[("index.interval.bytes", "1")]), true);
    let base = now() - 100_000;
    for i in 0..10i64 {
        let b = encode_batch(&[b"a", b"b"], Compression::Lz4, base + i * 1000);
        log.append_as_leader(&b, 0, now()).unwrap();
    }
    log.update_high_watermark(20);
    // Batch i holds offsets 2i, 2i+1 with timestamps base+1000i, base+1000i+1.
    let r = log.offset_for_timestamp(base + 3001).unwrap().unwrap();
    assert_eq!((r.offset, r.timestamp), (7, base + 3001));
    let r = log.offset_for_timestamp(base + 3002).unwrap().unwrap();
    assert_eq!(r.offset, 8);
    assert!(log
        .offset_for_timestamp(base + 1_000_000)
        .unwrap()
        .is_none());
    let m = log.max_timestamp_offset().unwrap().unwrap();
    assert_eq!((m.offset, m.timestamp), (19, base + 9001));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    /// Whatever the segment size and however much of the tail is torn off, recovery keeps a
    /// prefix of the batches with dense offsets and the log accepts new appends after it.
    #[test]
    fn recovery_keeps_a_dense_prefix(
        sizes in proptest::collection::vec(1usize..400, 1..30),
        segment_bytes in 200u64..4000,
        tear in 0usize..200,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config(&[("segment.bytes", &segment_bytes.to_string())]);
        let mut expected_end = 0;
        {
            let mut log = open(dir.path(), cfg.clone(), true);
            for s in &sizes {
                let v = vec![b'x'; *s];
                append(&mut log, &[&v]);
                expected_end += 1;
            }
        }
        // Tear bytes off the last segment file.
        let mut logs: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "log")).collect();
        logs.sort();
        let last = logs.last().unwrap();
        let len = std::fs::metadata(last).unwrap().len();
        let cut = (tear as u64).min(len);
        std::fs::OpenOptions::new().write(true).open(last).unwrap().set_len(len - cut).unwrap();
        let mut log = open(dir.path(), cfg, false);
        let end = log.log_end_offset();
        prop_assert!(end <= expected_end);
        if cut == 0 { prop_assert_eq!(end, expected_end); }
        let batches = read_all(&log, 0);
        prop_assert_eq!(batches.len() as i64, end);
        for (i, (o, _)) in batches.iter().enumerate() { prop_assert_eq!(*o, i as i64); }
        prop_assert_eq!(append(&mut log, &[b"after"]).base_offset, end);
    }

    /// A read returns the longest run of whole batches from the one holding the fetch
    /// offset that fits the byte limit (the first whole even if it alone does not, with
    /// `min_one`) and ends at or below the offset limit, whatever the index interval (a read
    /// skips ahead through the offset index).
    #[test]
    fn reads_return_the_whole_batches_that_fit(
        sizes in proptest::collection::vec(1usize..3000, 1..40),
        index_interval in prop_oneof![Just(1usize), 100usize..5000, Just(1 << 20)],
        from in 0i64..40,
        max_bytes in 0usize..40_000,
        max_offset in 0i64..41,
        min_one in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config(&[("index.interval.bytes", &index_interval.to_string())]);
        let mut log = open(dir.path(), cfg, true);
        let mut batches = Vec::new(); // (offset, bytes)
        for s in &sizes {
            let v = vec![b'x'; *s];
            let b = encode_batch(&[&v], Compression::None, now());
            batches.push((log.append_as_leader(&b, 0, now()).unwrap().base_offset, b.len()));
        }
        let end = batches.len() as i64;
        log.update_high_watermark(end);
        let (from, max_offset) = (from.min(end), max_offset.min(end));
        let got = log.read(from, max_bytes, max_offset, min_one);
        let mut want = Vec::new();
        let mut bytes = 0;
        for &(o, len) in batches.iter().skip(from as usize) {
            if o >= max_offset || (bytes + len > max_bytes && !(min_one && want.is_empty())) {
                break;
            }
            want.push(o);
            bytes += len;
        }
        match got {
            Ok(Some(slice)) => {
                let read = slice.read().unwrap();
                let offsets: Vec<i64> = BatchIter::new(&read).map(|b| b.unwrap().1.base_offset).collect();
                prop_assert_eq!(offsets, want);
            }
            Ok(None) => prop_assert!(want.is_empty()),
            Err(e) => prop_assert!(false, "{e}"),
        }
    }
}

/// The tester's crash: a tiered log whose early segments exist only in the bucket, reopened
/// after a crash before the log-start checkpoint was ever written. The first local segment
/// is where local retention stopped, not the log start.
#[test]
fn a_tiered_log_reopened_without_a_log_start_checkpoint_does_not_start_at_its_first_local_segment()
{
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&[
        ("segment.bytes", "300"),
        ("remote.storage.enable", "true"),
        ("local.retention.bytes", "1"),
        ("retention.ms", "-1"),
    ]);
    let local_start = {
        let mut log = open(dir.path(), cfg.clone(), true);
        for i in 0..20 {
            append(&mut log, &[format!("value-{i:03}").as_bytes()]);
        }
        // The manifest covers everything but the active segment; local retention deletes it.
        let covered = log.segment_files(-1, i64::MAX).last().unwrap().next_offset;
        log.set_remote_end_offset(covered);
        assert!(log.apply_retention(now()).unwrap() > 0);
        assert_eq!(
            log.log_start_offset(),
            0,
            "local retention keeps the log start"
        );
        assert!(log.local_start_offset() > 0);
        log.local_start_offset()
        // Dropped without close: a crash.
    };
    let mut log = open(dir.path(), cfg.clone(), false);
    assert_eq!(log.log_start_offset(), 0, "not the first local segment");
    assert_eq!(log.local_start_offset(), local_start);
    assert_eq!(log.delete_records_offset(), -1);
    // The manifest is the authority: its start, never below what the checkpoint said.
    log.apply_manifest(0, Some(local_start)).unwrap();
    assert_eq!(log.log_start_offset(), 0);
    assert_eq!(log.remote_end_offset(), local_start);
    log.apply_manifest(3, Some(local_start)).unwrap();
    assert_eq!(log.log_start_offset(), 3);
    log.apply_manifest(1, Some(local_start)).unwrap();
    assert_eq!(log.log_start_offset(), 3, "the log start never goes back");

    // A checkpoint that was written is taken, and a stale (lower) one is raised by the
    // manifest; neither is a DeleteRecords.
    let reopen = |ckpt: i64| {
        Log::open(
            dir.path(),
            cfg.clone(),
            LoadOptions {
                clean_shutdown: false,
                recovery_point: None,
                log_start_offset: Some(ckpt),
                now_ms: now(),
            },
        )
        .unwrap()
    };
    let mut log = reopen(2);
    assert_eq!(
        (log.log_start_offset(), log.delete_records_offset()),
        (2, -1)
    );
    log.apply_manifest(3, Some(local_start)).unwrap();
    assert_eq!(log.log_start_offset(), 3);
    // DeleteRecords is the only local input to remote retention.
    assert_eq!(log.delete_records_before(5).unwrap(), 5);
    assert_eq!(log.delete_records_offset(), 5);
}

/// With nothing remote the local log is the whole log: its first segment is the start.
#[test]
fn a_tiered_log_with_an_empty_manifest_starts_at_its_first_local_segment() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&[("segment.bytes", "300"), ("remote.storage.enable", "true")]);
    {
        let mut log = open(dir.path(), config(&[("segment.bytes", "300")]), true);
        for i in 0..20 {
            append(&mut log, &[format!("value-{i:03}").as_bytes()]);
        }
        // Before remote storage was enabled, DeleteRecords removed the first segments.
        log.delete_records_before(12).unwrap();
        assert!(log.local_start_offset() > 0);
    }
    let mut log = open(dir.path(), cfg, false);
    let first_local = *log.segments.keys().next().unwrap();
    assert!(first_local > 0);
    assert_eq!(log.log_start_offset(), 0);
    log.apply_manifest(0, None).unwrap();
    assert_eq!(log.log_start_offset(), first_local);
    assert_eq!(
        log.remote_end_offset(),
        -1,
        "local retention deletes nothing"
    );
}

#[test]
fn an_append_that_must_not_block_leaves_a_roll_a_flush_a_new_epoch_and_a_repair_to_the_caller() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&[("segment.bytes", "300"), ("flush.messages", "3")]);
    let mut log = open(dir.path(), cfg, true);
    let batch = |v: &str| encode_batch(&[v.as_bytes()], Compression::None, now());
    // The first append of epoch 0 writes the leader epoch checkpoint.
    assert!(log
        .try_append_as_leader(&batch("a"), 0, now())
        .unwrap()
        .is_none());
    assert_eq!(log.log_end_offset(), 0);
    log.append_as_leader(&batch("a"), 0, now()).unwrap();
    // Page-cache writes only: appended here.
    let info = log
        .try_append_as_leader(&batch("b"), 0, now())
        .unwrap()
        .unwrap();
    assert_eq!((info.base_offset, log.log_end_offset()), (1, 2));
    // The third record reaches flush.messages (an fsync).
    assert!(log
        .try_append_as_leader(&batch("c"), 0, now())
        .unwrap()
        .is_none());
    log.append_as_leader(&batch("c"), 0, now()).unwrap();
    // A newer epoch (a checkpoint write).
    assert!(log
        .try_append_as_leader(&batch("d"), 1, now())
        .unwrap()
        .is_none());
    // Fill the segment until the next batch would roll it.
    let segments = log.segment_count();
    while log
        .try_append_as_leader(&batch("e"), 0, now())
        .unwrap()
        .is_some()
    {}
    assert_eq!(
        log.segment_count(),
        segments,
        "a non-blocking append rolled"
    );
    let end = log.log_end_offset();
    log.append_as_leader(&batch("e"), 0, now()).unwrap();
    assert_eq!(
        (log.segment_count(), log.log_end_offset()),
        (segments + 1, end + 1)
    );
    // Refused records are refused with the log's own error, blocking or not.
    let mut corrupt = batch("f");
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0xff;
    let refused = log.try_append_as_leader(&corrupt, 0, now()).unwrap_err();
    let blocking = log.append_as_leader(&corrupt, 0, now()).unwrap_err();
    assert_eq!(refused.to_string(), blocking.to_string());
    log.update_high_watermark(end + 1);
    let offsets: Vec<i64> = read_all(&log, 0).iter().map(|(o, _)| *o).collect();
    assert_eq!(offsets, (0..end + 1).collect::<Vec<_>>());
    // An offline log is repaired by the blocking path only.
    log.take_offline("test".into());
    assert!(log
        .try_append_as_leader(&batch("g"), 0, now())
        .unwrap()
        .is_none());
    assert_eq!(log.log_end_offset(), end + 1);
}

/// Copies the sealed segments' `.log` files of `src` (below `end`) into `staging`, as a seed's
/// download leaves them.
fn stage_sealed(src: &Path, end: i64, staging: &Path) {
    std::fs::create_dir_all(staging).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let path = e.unwrap().path();
        let base = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".log"))
            .and_then(|s| s.parse::<i64>().ok());
        if base.is_some_and(|b| b < end) {
            std::fs::copy(&path, staging.join(path.file_name().unwrap())).unwrap();
        }
    }
}

/// A seed from the bucket that a crash interrupts at any of its renames leaves its marker: the
/// reopened log counts as empty, and the next seed brings back exactly the remote records,
/// never a partial log that would be led with a hole in it.
#[test]
fn a_seed_from_the_bucket_interrupted_at_any_rename_is_done_again_from_scratch() {
    use super::io_fault::{inject, Fault, Op};
    let src = tempfile::tempdir().unwrap();
    let cfg = config(&[("segment.bytes", "300")]);
    let mut remote = open(src.path(), cfg.clone(), true);
    for i in 0..20 {
        append(&mut remote, &[format!("value-{i:03}").as_bytes()]);
    }
    remote.roll(now()).unwrap();
    let end = remote.log_end_offset();
    let expected = read_all(&remote, 0);
    let sealed = remote.segment_count() - 1;
    assert!(sealed >= 3, "{sealed} sealed segments");
    for crash_at in 0..sealed as u32 {
        let dir = tempfile::tempdir().unwrap();
        let staging = dir.path().join("bucket-seed.tmp");
        let seed = LogSeed {
            log_start_offset: 0,
            local_start_offset: end,
            epochs: vec![(0, 0)],
            producer_snapshot: None,
            segments: Some(staging.clone()),
        };
        let mut log = open(dir.path(), cfg.clone(), true);
        assert!(log.wants_seed());
        stage_sealed(src.path(), end, &staging);
        {
            let _crash = inject(Fault::new(dir.path(), Op::Rename).after(crash_at));
            assert!(log.seed_from_remote(&seed, now()).is_err());
        }
        drop(log);

        let mut log = open(dir.path(), cfg.clone(), false);
        assert!(log.wants_seed(), "crash at rename {crash_at}: seeded again");
        stage_sealed(src.path(), end, &staging);
        log.seed_from_remote(&seed, now()).unwrap();
        assert!(!log.wants_seed());
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (0, end));
        assert_eq!(read_all(&log, 0), expected, "crash at rename {crash_at}");
        drop(log);
        let log = open(dir.path(), cfg.clone(), true);
        assert!(!log.wants_seed());
        assert_eq!(read_all(&log, 0), expected, "after a restart");
    }
}

/// Without segments (a user topic), a seed restarts the empty log at the remote end with the
/// leader epochs below it; appends continue there.
#[test]
fn a_seed_without_segments_starts_the_log_at_the_remote_end() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), config(&[]), true);
    let seed = LogSeed {
        log_start_offset: 100,
        local_start_offset: 600,
        epochs: vec![(0, 0), (3, 250)],
        producer_snapshot: None,
        segments: None,
    };
    log.seed_from_remote(&seed, now()).unwrap();
    assert!(!log.wants_seed());
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (100, 600));
    assert_eq!(log.latest_epoch(), Some(3));
    let b = encode_batch(&[b"next"], Compression::None, now());
    let info = log.append_as_leader(&b, 4, now()).unwrap();
    assert_eq!(info.base_offset, 600);
    assert_eq!(log.latest_epoch(), Some(4));
}
