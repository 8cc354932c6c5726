//! Storage errors during appends, rolls and retention (injected with [`super::io_fault`]): a
//! failed step appends nothing a later read or recovery can see, the next append reuses the
//! offset, and a rollback that fails itself takes the log offline until a repair.

use std::collections::BTreeMap;
use std::fs;

use kafka_protocol::records::Compression;

use super::batch::tests::encode_batch;
use super::batch::BatchIter;
use super::io_fault::{inject, Fault, Op, ENOSPC};
use super::*;

fn config(overrides: &[(&str, &str)]) -> TopicConfig {
    let o: BTreeMap<String, String> = overrides
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    TopicConfig::resolve(&o, &Default::default())
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

fn value(i: usize) -> Vec<u8> {
    format!("value-{i:05}-{}", "x".repeat(40)).into_bytes()
}

fn try_append(log: &mut Log, i: usize, leader_epoch: i32, now_ms: i64) -> Result<i64, AppendError> {
    let v = value(i);
    // Increasing timestamps, so every batch also gets a time index entry.
    let b = encode_batch(&[&v], Compression::None, now() - 60_000 + i as i64 * 10);
    let info = log.append_as_leader(&b, leader_epoch, now_ms)?;
    let leo = log.log_end_offset();
    log.update_high_watermark(leo);
    Ok(info.base_offset)
}

fn append(log: &mut Log, i: usize) -> i64 {
    try_append(log, i, 0, now()).unwrap()
}

/// Every record value readable from the log start, with its offset.
fn history(log: &Log) -> Vec<(i64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    while let Some(slice) = log
        .read(offset, 1 << 20, log.high_watermark(), true)
        .unwrap()
    {
        let bytes = slice.read().unwrap();
        for item in BatchIter::new(&bytes) {
            let (_, h, raw) = item.unwrap();
            let mut buf = bytes::Bytes::copy_from_slice(raw);
            let set = kafka_protocol::records::RecordBatchDecoder::decode(&mut buf).unwrap();
            for r in set.records {
                out.push((r.offset, r.value.unwrap().to_vec()));
            }
            offset = h.last_offset() + 1;
        }
    }
    out
}

fn expected(values: &[usize]) -> Vec<(i64, Vec<u8>)> {
    values
        .iter()
        .enumerate()
        .map(|(o, &i)| (o as i64, value(i)))
        .collect()
}

fn file_len(dir: &Path, name: &str) -> u64 {
    fs::metadata(dir.join(name)).map(|m| m.len()).unwrap_or(0)
}

fn files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    v.sort();
    v
}

#[test]
fn a_short_segment_write_appends_nothing_and_the_offset_is_reused() {
    let dir = tempfile::tempdir().unwrap();
    let fault = Fault::new(dir.path(), Op::Write)
        .on_files_ending_with(".log")
        .errno(ENOSPC)
        .short_write();
    check_in(dir, &[], fault);
}

#[test]
fn failed_writes_of_the_segment_and_its_indexes_roll_back() {
    // Every batch after the first gets index entries.
    let cfg = [("index.interval.bytes", "1")];
    for (suffix, short) in [
        (".log", true),
        (".log", false),
        (".index", true),
        (".timeindex", true),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut fault = Fault::new(dir.path(), Op::Write)
            .on_files_ending_with(suffix)
            .errno(ENOSPC);
        if short {
            fault = fault.short_write();
        }
        check_in(dir, &cfg, fault);
    }
}

/// Appends batches 0..3 in `dir`, fails the 4th with `fault`, then appends batch 4: the log
/// must hold 0, 1, 2, 4 at offsets 0..4 with its files cut back after the failure, before and
/// after a recovery scan and a clean reopen.
fn check_in(dir: tempfile::TempDir, cfg: &[(&str, &str)], fault: Fault) {
    let mut log = open(dir.path(), config(cfg), true);
    for i in 0..3 {
        assert_eq!(append(&mut log, i), i as i64);
    }
    let seg = format!("{}.log", segment::file_stem(0));
    let index = format!("{}.index", segment::file_stem(0));
    let timeindex = format!("{}.timeindex", segment::file_stem(0));
    let sizes = |d: &Path| {
        (
            file_len(d, &seg),
            file_len(d, &index),
            file_len(d, &timeindex),
        )
    };
    let before = sizes(dir.path());
    let what = format!(
        "{:?} on {:?} short={}",
        fault.op, fault.name_ends_with, fault.short_write
    );
    let guard = inject(fault);
    let e = try_append(&mut log, 3, 0, now()).unwrap_err();
    assert!(matches!(e, AppendError::Io(_)), "{what}: {e}");
    assert_eq!(guard.failures(), 1, "{what}: the fault fired");
    drop(guard);
    assert!(!log.is_offline(), "{what}: the rollback worked");
    assert_eq!(log.log_end_offset(), 3, "{what}");
    assert_eq!(sizes(dir.path()), before, "{what}: files cut back");
    assert_eq!(history(&log), expected(&[0, 1, 2]), "{what}");
    assert_eq!(append(&mut log, 4), 3, "{what}: the offset is reused");
    assert_eq!(history(&log), expected(&[0, 1, 2, 4]), "{what}");
    drop(log);
    let log = open(dir.path(), config(cfg), false);
    assert_eq!(
        history(&log),
        expected(&[0, 1, 2, 4]),
        "{what}: after recovery"
    );
    drop(log);
    let log = open(dir.path(), config(cfg), true);
    assert_eq!(
        history(&log),
        expected(&[0, 1, 2, 4]),
        "{what}: after a clean open"
    );
}

#[test]
fn a_failed_fsync_rolls_the_batch_back() {
    let dir = tempfile::tempdir().unwrap();
    let fault = Fault::new(dir.path(), Op::Sync).on_files_ending_with(".log");
    check_in(dir, &[("flush.messages", "1")], fault);
}

#[test]
fn a_failed_leader_epoch_checkpoint_rolls_the_batch_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), config(&[]), true);
    assert_eq!(try_append(&mut log, 0, 1, now()).unwrap(), 0);
    // Epoch 2 starts with the next batch: its checkpoint write fails.
    let guard = inject(
        Fault::new(dir.path(), Op::Write)
            .on_files_ending_with("leader-epoch-checkpoint.tmp")
            .errno(ENOSPC),
    );
    assert!(try_append(&mut log, 1, 2, now()).is_err());
    assert_eq!(guard.failures(), 1);
    drop(guard);
    assert_eq!(log.latest_epoch(), Some(1), "the epoch did not start");
    assert_eq!(log.log_end_offset(), 1);
    assert_eq!(history(&log), expected(&[0]));
    assert!(!files(dir.path()).iter().any(|f| f.ends_with(".tmp")));
    assert_eq!(try_append(&mut log, 2, 2, now()).unwrap(), 1);
    assert_eq!(log.end_offset_for_epoch(1), (1, 1));
    drop(log);
    let log = open(dir.path(), config(&[]), false);
    assert_eq!(history(&log), expected(&[0, 2]));
    assert_eq!(log.end_offset_for_epoch(1), (1, 1));
}

#[test]
fn a_failed_roll_leaves_no_half_created_segment() {
    let dir = tempfile::tempdir().unwrap();
    // Each batch (~110 bytes) fills a segment.
    let cfg = [("segment.bytes", "100")];
    let mut log = open(dir.path(), config(&cfg), true);
    assert_eq!(append(&mut log, 0), 0);
    // Producer snapshots may be written before the roll fails; segment files may not.
    let segment_files = |d: &Path| -> Vec<String> {
        files(d)
            .into_iter()
            .filter(|f| !f.ends_with(".snapshot"))
            .collect()
    };
    let before = segment_files(dir.path());
    for fault in [
        // The producer snapshot written on roll.
        Fault::new(dir.path(), Op::Write)
            .on_files_ending_with(".snapshot.tmp")
            .errno(ENOSPC)
            .short_write(),
        // Creating the new segment's `.log`.
        Fault::new(dir.path(), Op::SetLen).on_files_ending_with(".log"),
    ] {
        let what = format!("{:?}", fault.op);
        let guard = inject(fault);
        assert!(try_append(&mut log, 1, 0, now()).is_err(), "{what}");
        assert_eq!(guard.failures(), 1, "{what}");
        drop(guard);
        assert_eq!(log.segment_count(), 1, "{what}");
        assert_eq!(
            segment_files(dir.path()),
            before,
            "{what}: nothing left behind"
        );
        assert_eq!(log.log_end_offset(), 1, "{what}");
    }
    assert_eq!(append(&mut log, 2), 1);
    assert_eq!(log.segment_count(), 2);
    assert_eq!(history(&log), expected(&[0, 2]));
    drop(log);
    let log = open(dir.path(), config(&cfg), false);
    assert_eq!(history(&log), expected(&[0, 2]));
}

#[test]
fn a_failed_rollback_takes_the_log_offline_until_a_repair_cuts_it_back() {
    // A whole batch reached the `.log` but its index entry did not, and the rollback's
    // truncation fails too: the bytes stay in the file. The log must refuse appends and reads,
    // and the repair must drop that batch (it was never acknowledged).
    let dir = tempfile::tempdir().unwrap();
    let cfg = [("index.interval.bytes", "1")];
    let mut log = open(dir.path(), config(&cfg), true);
    for i in 0..3 {
        append(&mut log, i);
    }
    let index_fault = inject(
        Fault::new(dir.path(), Op::Write)
            .on_files_ending_with(".index")
            .errno(ENOSPC),
    );
    let truncate_fault = inject(
        Fault::new(dir.path(), Op::SetLen)
            .on_files_ending_with(".log")
            .times(u32::MAX),
    );
    let t0 = now();
    assert!(try_append(&mut log, 3, 0, t0).is_err());
    drop(index_fault);
    assert!(log.is_offline());
    // The next append tries a repair, which cannot cut the file back either.
    let e = try_append(&mut log, 4, 0, t0 + 1).unwrap_err();
    assert!(e.to_string().contains("offline"), "{e}");
    assert!(log.is_offline());
    assert!(matches!(
        log.read(0, 1 << 20, 3, true),
        Err(ReadError::Io(_))
    ));
    // Retention and time flushes leave an offline log alone.
    assert_eq!(log.apply_retention(t0).unwrap(), 0);
    log.maybe_flush_on_time(t0 + 1_000_000).unwrap();
    drop(truncate_fault);
    // Within the backoff no repair is tried.
    assert!(try_append(&mut log, 4, 0, t0 + 2).is_err());
    assert!(log.is_offline());
    assert_eq!(
        try_append(&mut log, 4, 0, t0 + 1 + REPAIR_BACKOFF_MS).unwrap(),
        3,
        "repaired: appends resume at the acknowledged end"
    );
    assert!(!log.is_offline());
    assert_eq!(history(&log), expected(&[0, 1, 2, 4]));
    drop(log);
    let log = open(dir.path(), config(&cfg), false);
    assert_eq!(history(&log), expected(&[0, 1, 2, 4]));
}

#[test]
fn a_repair_keeps_the_delete_records_offset_and_the_log_start() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = [("index.interval.bytes", "1")];
    let mut log = open(dir.path(), config(&cfg), true);
    for i in 0..4 {
        append(&mut log, i);
    }
    assert_eq!(log.delete_records_before(2).unwrap(), 2);
    assert_eq!(log.delete_records_offset(), 2);
    // Offline: a batch's index entry fails and so does the rollback's truncation.
    let index_fault = inject(
        Fault::new(dir.path(), Op::Write)
            .on_files_ending_with(".index")
            .errno(ENOSPC),
    );
    let truncate_fault = inject(
        Fault::new(dir.path(), Op::SetLen)
            .on_files_ending_with(".log")
            .times(u32::MAX),
    );
    let t0 = now();
    assert!(try_append(&mut log, 4, 0, t0).is_err());
    drop((index_fault, truncate_fault));
    assert!(log.is_offline());
    assert_eq!(
        try_append(&mut log, 5, 0, t0 + REPAIR_BACKOFF_MS).unwrap(),
        4
    );
    assert!(!log.is_offline());
    assert_eq!(
        (log.log_start_offset(), log.delete_records_offset()),
        (2, 2),
        "the repair keeps what DeleteRecords did"
    );
}

#[test]
fn an_offline_log_does_not_close_cleanly_and_its_next_open_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), config(&[]), true);
    append(&mut log, 0);
    {
        let _short = inject(
            Fault::new(dir.path(), Op::Write)
                .on_files_ending_with(".log")
                .short_write(),
        );
        let _stuck = inject(
            Fault::new(dir.path(), Op::SetLen)
                .on_files_ending_with(".log")
                .times(u32::MAX),
        );
        assert!(try_append(&mut log, 1, 0, now()).is_err());
        assert!(log.is_offline());
        assert!(
            log.close(now()).is_err(),
            "close refuses while it cannot repair"
        );
    }
    drop(log);
    // Half a batch is in the file: the recovery scan drops it.
    let mut log = open(dir.path(), config(&[]), false);
    assert_eq!(history(&log), expected(&[0]));
    assert_eq!(append(&mut log, 2), 1);
}

#[test]
fn a_failed_retention_rename_keeps_the_segment_and_the_log_start() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = [("segment.bytes", "100"), ("retention.bytes", "1")];
    let mut log = open(dir.path(), config(&cfg), true);
    for i in 0..4 {
        append(&mut log, i);
    }
    assert_eq!(log.segment_count(), 4);
    let before = files(dir.path());
    let guard = inject(Fault::new(dir.path(), Op::Rename).on_files_ending_with(".log"));
    assert!(log.apply_retention(now()).is_err());
    assert_eq!(guard.failures(), 1);
    drop(guard);
    assert_eq!(log.segment_count(), 4);
    assert_eq!(log.log_start_offset(), 0);
    assert_eq!(files(dir.path()), before);
    assert_eq!(history(&log), expected(&[0, 1, 2, 3]));
    // The second rename fails: the first segment is gone, the rest stay.
    let guard = inject(
        Fault::new(dir.path(), Op::Rename)
            .on_files_ending_with(".log")
            .after(1),
    );
    assert!(log.apply_retention(now()).is_err());
    drop(guard);
    assert_eq!(log.log_start_offset(), 1);
    assert_eq!(
        history(&log),
        expected(&[1, 2, 3])
            .into_iter()
            .map(|(o, v)| (o + 1, v))
            .collect::<Vec<_>>()
    );
    assert!(!files(dir.path()).iter().any(|f| f.ends_with(".deleted")));
    assert!(log.apply_retention(now()).unwrap() >= 1);
    assert_eq!(log.log_start_offset(), 3);
}
