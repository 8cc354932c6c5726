//! The cleaner over real segment files: a pass keeps the newest value per key at its original
//! offset, survives a reopen, never disturbs a reader of a replaced segment, and a crash at
//! any step of a swap recovers to a valid log with every key's newest value.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use kafka_protocol::records::{Compression, RecordBatchDecoder};
use strata_compaction::{Cleaner, CleaningCandidate, LogToClean, PassOutcome, Throttler};

use super::*;
use crate::config::TopicConfig;
use crate::log::batch::build_batch;
use crate::log::{AppendError, LoadOptions};

fn config(overrides: &[(&str, &str)]) -> TopicConfig {
    let o: BTreeMap<String, String> = overrides
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    TopicConfig::resolve(&o, &Default::default())
}

fn compacted() -> TopicConfig {
    config(&[
        ("cleanup.policy", "compact"),
        ("segment.bytes", "400"),
        ("min.cleanable.dirty.ratio", "0.01"),
    ])
}

fn now() -> i64 {
    crate::clock::now_ms()
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

/// Appends one batch of (key, value-or-tombstone) records.
fn append(log: &mut Log, records: &[(&str, Option<&str>)]) -> i64 {
    let batch = build_batch(
        records.iter().map(|(k, v)| {
            (
                now(),
                Some(Bytes::from(k.to_string())),
                v.map(|v| Bytes::from(v.to_string())),
            )
        }),
        Compression::None,
    )
    .unwrap();
    let info = log.append_as_leader(&batch, 0, now()).unwrap();
    let leo = log.log_end_offset();
    log.update_high_watermark(leo);
    info.base_offset
}

/// Every record readable from offset 0: (offset, key, value).
fn records(log: &Log) -> Vec<(i64, String, Option<String>)> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    while let Some(slice) = log
        .read(offset, 1 << 20, log.high_watermark(), true)
        .unwrap()
    {
        let mut bytes = slice.read().unwrap();
        for set in RecordBatchDecoder::decode_all(&mut bytes).unwrap() {
            for r in set.records {
                offset = r.offset + 1;
                let text = |b: Option<Bytes>| b.map(|b| String::from_utf8(b.to_vec()).unwrap());
                out.push((r.offset, text(r.key).unwrap(), text(r.value)));
            }
        }
    }
    out
}

/// Newest (offset, value) per key.
fn newest(records: &[(i64, String, Option<String>)]) -> HashMap<String, (i64, Option<String>)> {
    records
        .iter()
        .map(|(o, k, v)| (k.clone(), (*o, v.clone())))
        .collect()
}

/// Ten keys updated over many small segments, then one record to seal the last of them.
fn keyed_log(dir: &Path) -> Log {
    let mut log = open(dir, compacted(), true);
    for round in 0..8 {
        for key in 0..10 {
            append(
                &mut log,
                &[(&format!("k{key}"), Some(&format!("v{round}")))],
            );
        }
    }
    append(&mut log, &[("seal", Some("x"))]);
    log
}

fn clean_once(log: &Mutex<Log>) -> PassOutcome {
    let candidate = log.with_log(|l| CleaningCandidate {
        partition: 0,
        segments: l.cleaner_segments().unwrap(),
        log_start_offset: l.log_start_offset(),
        log_end_offset: l.log_end_offset(),
        cleaner_checkpoint: None,
        upper_bound_offset: l.high_watermark(),
        config: super::compaction_config(l.config()),
    });
    let to_clean = LogToClean::compute(&candidate, now()).unwrap();
    let mut cleaner = Cleaner::new(0, 1 << 20, 0.9, Arc::new(Throttler::unlimited())).unwrap();
    let source = LogSegmentSource::new(log);
    let mut sink = CleanedSegmentSink::new(log);
    cleaner
        .clean(&to_clean, &source, &mut sink, now(), &|| false)
        .unwrap()
}

fn file_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_pass_keeps_the_newest_value_per_key_at_its_offset_and_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let log = keyed_log(dir.path());
    let before = records(&log);
    let segments_before = log.segment_count();
    let log = Mutex::new(log);
    let outcome = clean_once(&log);
    assert!(matches!(outcome, PassOutcome::Completed { .. }));
    assert!(outcome.stats().groups_committed > 0);
    let log = log.into_inner().unwrap();
    let after = records(&log);
    assert_eq!(newest(&after), newest(&before));
    assert!(after.len() < before.len(), "superseded values are gone");
    assert!(
        after.windows(2).all(|w| w[0].0 < w[1].0),
        "offsets increase"
    );
    assert!(log.segment_count() <= segments_before);
    assert!(
        file_names(dir.path())
            .iter()
            .all(|n| !n.ends_with(CLEANED_SUFFIX)
                && !n.ends_with(SWAP_SUFFIX)
                && !n.ends_with(DELETED_SUFFIX)),
        "{:?}",
        file_names(dir.path())
    );
    drop(log);
    for clean_shutdown in [true, false] {
        let reopened = open(dir.path(), compacted(), clean_shutdown);
        assert_eq!(records(&reopened), after);
    }
}

#[test]
fn a_reader_of_a_replaced_segment_keeps_reading_its_old_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let log = keyed_log(dir.path());
    let slice = log
        .read(0, 1 << 20, log.high_watermark(), true)
        .unwrap()
        .unwrap();
    let expected = slice.read().unwrap();
    let log = Mutex::new(log);
    clean_once(&log);
    assert_eq!(
        slice.read().unwrap(),
        expected,
        "the replaced file is still readable"
    );
    let mut bytes = slice.read().unwrap();
    assert!(!RecordBatchDecoder::decode_all(&mut bytes)
        .unwrap()
        .is_empty());
}

#[test]
fn a_swap_is_refused_when_the_replaced_segments_changed_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let log = Mutex::new(keyed_log(dir.path()));
    let mut segments = log.with_log(|l| l.cleaner_segments().unwrap());
    let mut sink = CleanedSegmentSink::new(&log);
    segments[0].size_bytes += 1;
    sink.begin(&segments[..2]).unwrap();
    let error = sink.commit(now()).unwrap_err();
    assert!(error.to_string().contains("changed"), "{error}");
    assert!(!is_swap_incomplete(&error));
    assert!(file_names(dir.path())
        .iter()
        .all(|n| !n.ends_with(CLEANED_SUFFIX) && !n.ends_with(SWAP_SUFFIX)));
    // The active segment is never replaced.
    let all = log.with_log(|l| l.cleaner_segments().unwrap());
    sink.begin(&all).unwrap();
    assert!(sink.commit(now()).is_err());
    // Abandoning removes the aside files.
    sink.begin(&all[..1]).unwrap();
    assert!(file_names(dir.path())
        .iter()
        .any(|n| n.ends_with(CLEANED_SUFFIX)));
    sink.abandon().unwrap();
    assert!(file_names(dir.path())
        .iter()
        .all(|n| !n.ends_with(CLEANED_SUFFIX)));
}

/// Copies the segment files (`.log`, `.index`, `.timeindex`) of `dir`, by name.
fn segment_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    file_names(dir)
        .into_iter()
        .filter(|n| {
            [".log", ".index", ".timeindex"]
                .iter()
                .any(|e| n.ends_with(e))
        })
        .map(|n| {
            let bytes = fs::read(dir.join(&n)).unwrap();
            (n, bytes)
        })
        .collect()
}

/// A crash at each step of a swap, laid out from the files before and after a pass.
#[derive(Debug, Clone, Copy)]
enum CrashPoint {
    /// The cleaned segments were being written (`.cleaned`).
    WritingCleaned,
    /// The cleaned segments were renamed `.swap`, the old ones still live.
    Swapping,
    /// The old segments were renamed `.deleted`, the new ones still `.swap`.
    OldRenamed,
    /// The swap was done but the `.deleted` files were not removed yet.
    DeletingOld,
}

/// Writes the files of a directory interrupted at `point` into `dir` (emptied of segments).
fn lay_out(
    dir: &Path,
    before: &BTreeMap<String, Vec<u8>>,
    after: &BTreeMap<String, Vec<u8>>,
    point: CrashPoint,
) {
    for name in segment_files(dir).keys() {
        fs::remove_file(dir.join(name)).unwrap();
    }
    // Unchanged files (the active segment, anything the pass did not rewrite) stay live.
    let unchanged = |n: &String| before.get(n).is_some_and(|b| after.get(n) == Some(b));
    for (name, bytes) in before.iter().filter(|(n, _)| unchanged(n)) {
        fs::write(dir.join(name), bytes).unwrap();
    }
    let old = before.iter().filter(|(n, _)| !unchanged(n));
    let new = after.iter().filter(|(n, _)| !unchanged(n));
    let (old_suffix, new_suffix) = match point {
        CrashPoint::WritingCleaned => ("", CLEANED_SUFFIX),
        CrashPoint::Swapping => ("", SWAP_SUFFIX),
        CrashPoint::OldRenamed => (DELETED_SUFFIX, SWAP_SUFFIX),
        CrashPoint::DeletingOld => (DELETED_SUFFIX, ""),
    };
    for (name, bytes) in old {
        fs::write(dir.join(format!("{name}{old_suffix}")), bytes).unwrap();
    }
    for (name, bytes) in new {
        fs::write(dir.join(format!("{name}{new_suffix}")), bytes).unwrap();
    }
}

#[test]
fn a_crash_at_any_step_of_a_swap_recovers_a_valid_log_with_every_newest_value() {
    let dir = tempfile::tempdir().unwrap();
    let log = keyed_log(dir.path());
    let expected = newest(&records(&log));
    drop(log);
    let before = segment_files(dir.path());
    let log = Mutex::new(open(dir.path(), compacted(), true));
    clean_once(&log);
    let cleaned = records(&log.into_inner().unwrap());
    let after = segment_files(dir.path());
    assert_ne!(before, after);

    for point in [
        CrashPoint::WritingCleaned,
        CrashPoint::Swapping,
        CrashPoint::OldRenamed,
        CrashPoint::DeletingOld,
    ] {
        lay_out(dir.path(), &before, &after, point);
        let log = open(dir.path(), compacted(), false);
        let got = records(&log);
        assert_eq!(newest(&got), expected, "{point:?}");
        assert!(got.windows(2).all(|w| w[0].0 < w[1].0), "{point:?}");
        match point {
            CrashPoint::WritingCleaned => assert!(got.len() > cleaned.len(), "{point:?}"),
            _ => assert_eq!(got, cleaned, "{point:?}: the swap is completed"),
        }
        let leftovers: Vec<String> = file_names(dir.path())
            .into_iter()
            .filter(|n| {
                n.ends_with(CLEANED_SUFFIX)
                    || n.ends_with(SWAP_SUFFIX)
                    || n.ends_with(DELETED_SUFFIX)
            })
            .collect();
        assert!(leftovers.is_empty(), "{point:?}: {leftovers:?}");
        // New appends continue at the log end.
        drop(log);
        let mut log = open(dir.path(), compacted(), true);
        let end = log.log_end_offset();
        assert_eq!(append(&mut log, &[("late", Some("y"))]), end);
    }
}

#[test]
fn a_compacted_topic_rejects_records_without_a_key_as_kafka_does() {
    let dir = tempfile::tempdir().unwrap();
    let partition_dir = dir.path().join("orders-3");
    let mut log = open(&partition_dir, compacted(), true);
    let batch = build_batch(
        [
            (now(), Some(Bytes::from("k")), Some(Bytes::from("v"))),
            (now(), None, Some(Bytes::from("no key"))),
            (now(), None, None),
        ]
        .into_iter(),
        Compression::Lz4,
    )
    .unwrap();
    let error = log.append_as_leader(&batch, 0, now()).unwrap_err();
    let AppendError::RecordErrors {
        message,
        record_errors,
        ..
    } = &error
    else {
        panic!("{error:?}");
    };
    let per_record =
        "Compacted topic cannot accept message without key in topic partition orders-3";
    assert_eq!(
        record_errors,
        &vec![(1, per_record.to_string()), (2, per_record.to_string())]
    );
    assert_eq!(
        message,
        &format!("One or more records have been rejected due to 2 record errors in total, and only showing the first three errors at most: [RecordError(batchIndex=1, message='{per_record}'), RecordError(batchIndex=2, message='{per_record}')]")
    );
    assert_eq!(log.log_end_offset(), 0, "nothing was appended");
    // A delete-only topic takes them.
    let mut plain = open(&dir.path().join("plain-0"), config(&[]), true);
    assert!(plain.append_as_leader(&batch, 0, now()).is_ok());
}

#[test]
fn a_cleaned_segment_inherits_the_aborted_transactions_of_the_segments_it_replaces() {
    let dir = tempfile::tempdir().unwrap();
    let log = keyed_log(dir.path());
    let segments = log.cleaner_segments().unwrap();
    let entry = |pid: i64, last: i64| {
        let mut e = 0i16.to_be_bytes().to_vec();
        for v in [pid, last - 1, last, last] {
            e.extend_from_slice(&v.to_be_bytes());
        }
        e
    };
    // Aborted transactions recorded with the first two segments.
    let (first, second) = (&segments[0], &segments[1]);
    let a = entry(7, first.next_offset - 1);
    let b = entry(8, second.next_offset - 1);
    fs::write(
        Segment::file_path(dir.path(), first.base_offset, "txnindex", ""),
        &a,
    )
    .unwrap();
    fs::write(
        Segment::file_path(dir.path(), second.base_offset, "txnindex", ""),
        &b,
    )
    .unwrap();
    let log = Mutex::new(log);
    let mut sink = CleanedSegmentSink::new(&log);
    sink.begin(&segments[..2]).unwrap();
    sink.commit(now()).unwrap();
    let merged = fs::read(Segment::file_path(
        dir.path(),
        first.base_offset,
        "txnindex",
        "",
    ))
    .unwrap();
    assert_eq!(merged, [a, b].concat());
    assert!(!Segment::file_path(dir.path(), second.base_offset, "txnindex", "").exists());
}
