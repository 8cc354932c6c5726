//! Whole-pass tests: random keyed update streams in random batches and codecs, cleaned through
//! `MemoryLog`, checked record by record against the stream that was written. Batches are
//! built and read back with `kafka-protocol`'s own codec, an independent implementation.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::records::{Compression, RecordBatchDecoder};
use proptest::prelude::*;

use crate::batch::BatchHeader;
use crate::test_batches::{
    encode, encode_with_producer, TestProducer, TestRecord, ALL_COMPRESSIONS,
};
use crate::{
    Cleaner, CleanerError, CleaningCandidate, CompactionConfig, LastRecord, LogToClean, MemoryLog,
    PassOutcome, SegmentSource, Throttler,
};

const T0: i64 = 1_000_000;
const T1: i64 = 2_000_000;
const RETENTION_MS: i64 = 10_000;
const ROLL_BYTES: u64 = 600;

#[derive(Debug, Clone)]
struct TestBatch {
    compression: Compression,
    /// (key id, value present?)
    records: Vec<(u8, bool)>,
    roll_after: bool,
}

fn batch_strategy(keys: u8) -> impl Strategy<Value = TestBatch> {
    (
        0..ALL_COMPRESSIONS.len(),
        prop::collection::vec((0..keys, prop::bool::weighted(0.8)), 1..8),
        prop::bool::weighted(0.15),
    )
        .prop_map(|(codec, records, roll_after)| TestBatch {
            compression: ALL_COMPRESSIONS[codec],
            records,
            roll_after,
        })
}

fn key(id: u8) -> Vec<u8> {
    format!("key-{id}").into_bytes()
}

/// Writes the batches (each value unique, so survivors can be traced to their write), rolling
/// by size or when asked, and leaves the last batch in the active segment.
fn build_log(batches: &[TestBatch]) -> MemoryLog {
    let log = MemoryLog::new();
    let mut serial = 0u32;
    for (i, batch) in batches.iter().enumerate() {
        let now = T0 + i as i64;
        let records: Vec<TestRecord> = batch
            .records
            .iter()
            .map(|&(id, has_value)| {
                serial += 1;
                let value = format!("value-{serial}");
                TestRecord::new(&key(id), has_value.then_some(value.as_bytes()), now)
            })
            .collect();
        let is_last = i + 1 == batches.len();
        if is_last {
            log.roll(now);
        }
        log.append(encode(0, &records, batch.compression), now)
            .expect("valid test batch");
        if !is_last && (batch.roll_after || log.active_segment_bytes() >= ROLL_BYTES) {
            log.roll(now);
        }
    }
    log
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Rec {
    offset: i64,
    key: Option<Bytes>,
    value: Option<Bytes>,
    timestamp: i64,
}

fn decode_all(batches: &[Bytes]) -> Vec<Rec> {
    batches
        .iter()
        .flat_map(|batch| {
            let mut buf = batch.clone();
            let set = RecordBatchDecoder::decode(&mut buf)
                .expect("every batch decodes with kafka-protocol");
            set.records.into_iter().map(|r| Rec {
                offset: r.offset,
                key: r.key,
                value: r.value,
                timestamp: r.timestamp,
            })
        })
        .collect()
}

fn config() -> CompactionConfig {
    CompactionConfig {
        min_cleanable_dirty_ratio: 0.0,
        delete_retention_ms: RETENTION_MS,
        segment_bytes: 2_000,
        ..CompactionConfig::default()
    }
}

fn log_to_clean(
    log: &MemoryLog,
    checkpoint: Option<i64>,
    upper_bound: i64,
    now_ms: i64,
) -> LogToClean<()> {
    let candidate = CleaningCandidate {
        partition: (),
        segments: log.segments().unwrap(),
        log_start_offset: log.log_start_offset(),
        log_end_offset: log.log_end_offset(),
        cleaner_checkpoint: checkpoint,
        upper_bound_offset: upper_bound,
        config: config(),
    };
    LogToClean::compute(&candidate, now_ms).unwrap()
}

fn cleaner(map_bytes: usize) -> Cleaner {
    Cleaner::new(0, map_bytes, 0.9, Arc::new(Throttler::unlimited())).unwrap()
}

/// Runs one pass; returns the new first dirty offset and the first uncleanable offset used.
fn pass(
    cleaner: &mut Cleaner,
    log: &MemoryLog,
    checkpoint: Option<i64>,
    upper_bound: i64,
    now_ms: i64,
) -> (i64, i64) {
    let to_clean = log_to_clean(log, checkpoint, upper_bound, now_ms);
    match cleaner.clean(&to_clean, log, &mut log.sink(), now_ms, &|| false) {
        Ok(PassOutcome::Completed {
            first_dirty_offset, ..
        }) => (first_dirty_offset, to_clean.first_uncleanable_offset),
        other => panic!("pass did not complete: {other:?}"),
    }
}

fn newest_per_key(records: &[Rec]) -> HashMap<Bytes, Rec> {
    let mut newest = HashMap::new();
    for r in records {
        if let Some(k) = &r.key {
            newest.insert(k.clone(), r.clone());
        }
    }
    newest
}

fn assert_strictly_increasing(records: &[Rec]) {
    for pair in records.windows(2) {
        assert!(
            pair[0].offset < pair[1].offset,
            "offsets go backwards: {} then {}",
            pair[0].offset,
            pair[1].offset
        );
    }
}

fn assert_subset_with_same_offsets(after: &[Rec], before: &[Rec]) {
    let by_offset: BTreeMap<i64, &Rec> = before.iter().map(|r| (r.offset, r)).collect();
    for r in after {
        assert_eq!(
            by_offset.get(&r.offset).copied(),
            Some(r),
            "record at {} differs from the original",
            r.offset
        );
    }
}

fn batches_from(batches: &[Bytes], offset: i64) -> Vec<Bytes> {
    batches
        .iter()
        .filter(|b| BatchHeader::parse(b).unwrap().base_offset >= offset)
        .cloned()
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn cleaning_keeps_the_newest_record_of_every_key_and_never_moves_offsets(
        batches in prop::collection::vec(batch_strategy(6), 2..30),
        upper_bound_fraction in 0.0f64..=1.2,
    ) {
        let log = build_log(&batches);
        let before_batches = log.batches();
        let before = decode_all(&before_batches);
        let upper_bound = (log.log_end_offset() as f64 * upper_bound_fraction) as i64;

        let (end, first_uncleanable) = pass(&mut cleaner(1 << 20), &log, None, upper_bound, T1);
        let after_batches = log.batches();
        let after = decode_all(&after_batches);

        prop_assert!(end <= first_uncleanable);
        assert_strictly_increasing(&after);
        assert_subset_with_same_offsets(&after, &before);
        // Nothing at or above the uncleanable offset changes, byte for byte.
        prop_assert_eq!(batches_from(&after_batches, first_uncleanable), batches_from(&before_batches, first_uncleanable));
        // The newest record of every key survives the first pass, tombstones included.
        for (k, newest) in newest_per_key(&before) {
            prop_assert!(after.contains(&newest), "newest record of {:?} lost", k);
        }
        // Below the end of the mapped range, each key appears at most once.
        let mut seen = HashMap::new();
        for r in after.iter().filter(|r| r.offset < end) {
            let previous = seen.insert(r.key.clone(), r.offset);
            prop_assert!(previous.is_none(), "key {:?} kept twice below {}", r.key, end);
        }
        // Kept tombstones below the mapped end carry the delete horizon of this pass.
        for batch in &after_batches {
            let header = BatchHeader::parse(batch).unwrap();
            let has_tombstone = decode_all(std::slice::from_ref(batch)).iter().any(|r| r.value.is_none());
            if header.base_offset < end && has_tombstone {
                prop_assert_eq!(header.delete_horizon_ms(), Some(T1 + RETENTION_MS));
            }
        }
    }

    #[test]
    fn tombstones_vanish_only_after_delete_retention(
        batches in prop::collection::vec(batch_strategy(6), 2..25),
        horizon_passed in any::<bool>(),
    ) {
        let log = build_log(&batches);
        let (end, _) = pass(&mut cleaner(1 << 20), &log, None, i64::MAX, T1);
        let after_first = decode_all(&log.batches());
        // Keys written again in the dirty section of the second pass lose their old records
        // whatever the horizon; leave them out.
        let rewritten: std::collections::HashSet<Option<Bytes>> =
            after_first.iter().filter(|r| r.offset >= end).map(|r| r.key.clone()).collect();
        let clean: Vec<Rec> =
            after_first.iter().filter(|r| r.offset < end && !rewritten.contains(&r.key)).cloned().collect();
        let tombstones: Vec<Rec> = clean.iter().filter(|r| r.value.is_none()).cloned().collect();

        // New dirty data under a fresh key, so the second pass has work and supersedes nothing.
        let fresh = [TestRecord::new(b"fresh", Some(b"x"), T1)];
        log.roll(T1);
        log.append(encode(0, &fresh, Compression::None), T1).unwrap();
        log.roll(T1);
        log.append(encode(0, &fresh, Compression::None), T1).unwrap();

        let now = if horizon_passed { T1 + RETENTION_MS } else { T1 + RETENTION_MS - 1 };
        pass(&mut cleaner(1 << 20), &log, Some(end), i64::MAX, now);
        let after_second = decode_all(&log.batches());
        for tombstone in &tombstones {
            prop_assert_eq!(
                after_second.contains(tombstone),
                !horizon_passed,
                "tombstone at {} present after the horizon {}", tombstone.offset, if horizon_passed { "passed" } else { "did not pass" }
            );
        }
        // Every record with a value survives the second pass.
        for r in clean.iter().filter(|r| r.value.is_some()) {
            prop_assert!(after_second.contains(r), "record at {} lost", r.offset);
        }
        assert_strictly_increasing(&after_second);
    }

    #[test]
    fn a_small_offset_map_takes_more_passes_and_reaches_the_same_result(
        batches in prop::collection::vec(batch_strategy(16), 2..30),
    ) {
        let reference = build_log(&batches);
        pass(&mut cleaner(1 << 20), &reference, None, i64::MAX, T1);

        let log = build_log(&batches);
        let mut small = cleaner(24 * 11); // 11 slots, 9 keys
        prop_assert_eq!(small.map_capacity(), 9);
        let dirty_keys = {
            let to_clean = log_to_clean(&log, None, i64::MAX, T1);
            let records = decode_all(&log.batches());
            records.iter().filter(|r| r.offset < to_clean.first_uncleanable_offset).filter_map(|r| r.key.clone()).collect::<std::collections::HashSet<_>>().len()
        };
        let mut checkpoint = None;
        let mut passes = 0;
        loop {
            let (end, first_uncleanable) = pass(&mut small, &log, checkpoint, i64::MAX, T1);
            passes += 1;
            prop_assert!(passes < 100, "no convergence");
            prop_assert!(checkpoint.is_none_or(|previous| end > previous) || end == first_uncleanable, "no progress");
            checkpoint = Some(end);
            if end >= first_uncleanable {
                break;
            }
        }
        if dirty_keys > small.map_capacity() {
            prop_assert!(passes > 1, "{} dirty keys cannot fit one pass", dirty_keys);
        }
        prop_assert_eq!(decode_all(&log.batches()), decode_all(&reference.batches()));
    }
}

/// Keys 0..20 written twice each, in batches of 4, one batch per segment.
fn twice_written_log() -> MemoryLog {
    let log = MemoryLog::new();
    for round in 0..2 {
        for chunk in 0..5u8 {
            let records: Vec<TestRecord> = (0..4u8)
                .map(|i| {
                    let id = chunk * 4 + i;
                    TestRecord::new(&key(id), Some(format!("{round}").as_bytes()), T0)
                })
                .collect();
            log.append(encode(0, &records, Compression::Lz4), T0)
                .unwrap();
            log.roll(T0);
        }
    }
    log.append(
        encode(
            0,
            &[TestRecord::new(b"tail", Some(b"t"), T0)],
            Compression::None,
        ),
        T0,
    )
    .unwrap();
    log
}

#[test]
fn offset_map_smaller_than_the_dirty_section_cleans_in_several_passes() {
    let log = twice_written_log();
    let mut small = cleaner(24 * 11); // maps 9 keys: two batches of 4 per pass
    let mut checkpoint = None;
    let mut ends = Vec::new();
    loop {
        let (end, first_uncleanable) = pass(&mut small, &log, checkpoint, i64::MAX, T1);
        ends.push(end);
        checkpoint = Some(end);
        if end >= first_uncleanable {
            break;
        }
    }
    assert_eq!(
        ends,
        vec![8, 16, 24, 32, 40],
        "each pass maps two batches of four keys"
    );
    let records = decode_all(&log.batches());
    assert_eq!(
        records.len(),
        21,
        "one record per key plus the active segment's"
    );
    assert!(records
        .iter()
        .filter(|r| r.key.as_deref() != Some(&b"tail"[..]))
        .all(|r| r.value.as_deref() == Some(&b"1"[..])));
}

#[test]
fn the_last_batch_of_an_active_producer_is_kept_empty() {
    let log = MemoryLog::new();
    let producer = TestProducer {
        producer_id: 7,
        producer_epoch: 2,
        base_sequence: 40,
    };
    let old = [
        TestRecord::new(b"a", Some(b"old"), T0),
        TestRecord::new(b"b", Some(b"old"), T0),
    ];
    log.append(
        encode_with_producer(0, &old, Compression::Gzip, producer),
        T0,
    )
    .unwrap();
    let other = TestProducer {
        producer_id: 8,
        producer_epoch: 0,
        base_sequence: 0,
    };
    log.append(encode_with_producer(0, &old, Compression::Gzip, other), T0)
        .unwrap();
    let new = [
        TestRecord::new(b"a", Some(b"new"), T0),
        TestRecord::new(b"b", Some(b"new"), T0),
    ];
    log.append(encode(0, &new, Compression::None), T0).unwrap();
    log.roll(T0);
    log.append(encode(0, &new, Compression::None), T0).unwrap();
    log.set_active_producers(HashMap::from([(
        7,
        LastRecord {
            last_data_offset: Some(1),
            producer_epoch: 2,
        },
    )]));

    pass(&mut cleaner(1 << 20), &log, None, i64::MAX, T1);

    let headers: Vec<BatchHeader> = log
        .batches()
        .iter()
        .map(|b| BatchHeader::parse(b).unwrap())
        .collect();
    let first = &headers[0];
    assert_eq!(
        (first.base_offset, first.last_offset(), first.records_count),
        (0, 1, 0)
    );
    assert_eq!(
        (first.producer_id, first.producer_epoch, first.base_sequence),
        (7, 2, 40)
    );
    assert!(
        headers.iter().all(|h| h.producer_id != 8),
        "an expired producer's emptied batch is dropped"
    );
    assert_eq!(headers.len(), 3);
}

/// Corrupts one batch on the way out of the source, as a bad disk sector would.
struct CorruptingSource<'a> {
    log: &'a MemoryLog,
    batch_base_offset: i64,
}

impl SegmentSource for CorruptingSource<'_> {
    fn segments(&self) -> std::io::Result<Vec<crate::SegmentInfo>> {
        self.log.segments()
    }

    fn read_batches(
        &self,
        base_offset: i64,
        from_offset: i64,
    ) -> std::io::Result<Box<dyn Iterator<Item = std::io::Result<Bytes>> + '_>> {
        let target = self.batch_base_offset;
        let batches = self.log.read_batches(base_offset, from_offset)?;
        Ok(Box::new(batches.map(move |batch| {
            let batch = batch?;
            if BatchHeader::parse(&batch).is_ok_and(|h| h.base_offset == target) {
                let mut bytes = batch.to_vec();
                let last = bytes.len() - 1;
                bytes[last] ^= 0x5a;
                return Ok(Bytes::from(bytes));
            }
            Ok(batch)
        })))
    }

    fn last_records_of_active_producers(&self) -> HashMap<i64, LastRecord> {
        HashMap::new()
    }
}

#[test]
fn a_corrupt_batch_fails_the_pass_and_leaves_the_log_unchanged() {
    let log = twice_written_log();
    let before = log.batches();
    let source = CorruptingSource {
        log: &log,
        batch_base_offset: 24,
    };
    let to_clean = log_to_clean(&log, None, i64::MAX, T1);
    let result = cleaner(1 << 20).clean(&to_clean, &source, &mut log.sink(), T1, &|| false);
    match result {
        Err(
            error @ CleanerError::CorruptBatch {
                segment_base_offset: 24,
                ..
            },
        ) => assert!(!error.is_retriable()),
        other => panic!("expected a corrupt batch error, got {other:?}"),
    }
    assert_eq!(log.batches(), before);
}

#[test]
fn a_corrupt_batch_in_the_clean_section_abandons_only_its_group() {
    let log = twice_written_log();
    let before = log.batches();
    // Checkpoint at 20: the map reads 20..40 only; recopy meets the corrupt batch at 4.
    let source = CorruptingSource {
        log: &log,
        batch_base_offset: 4,
    };
    let mut to_clean = log_to_clean(&log, Some(20), i64::MAX, T1);
    to_clean.config.segment_bytes = 1; // one segment per group
    let result = cleaner(1 << 20).clean(&to_clean, &source, &mut log.sink(), T1, &|| false);
    assert!(matches!(
        result,
        Err(CleanerError::CorruptBatch {
            segment_base_offset: 4,
            ..
        })
    ));
    // The first group (offsets 0..4, all superseded by 20..24) was committed with its batch
    // removed; the group holding the corrupt batch and all later ones are untouched.
    assert_eq!(log.batches(), before[1..]);
    assert_eq!(log.segments().unwrap()[0].size_bytes, 0);
}

#[test]
fn a_sink_failure_abandons_the_group() {
    let log = twice_written_log();
    let before = log.batches();
    let mut sink = log.sink();
    sink.fail_append_after(0);
    let to_clean = log_to_clean(&log, None, i64::MAX, T1);
    let result = cleaner(1 << 20).clean(&to_clean, &log, &mut sink, T1, &|| false);
    match result {
        Err(error @ CleanerError::Sink(_)) => assert!(error.is_retriable()),
        other => panic!("expected a sink error, got {other:?}"),
    }
    assert_eq!(log.batches(), before);
}

#[test]
fn cancellation_stops_between_batches_and_keeps_the_log_valid() {
    for cancel_after in [0, 3, 12, 15, 18] {
        let log = twice_written_log();
        let before = decode_all(&log.batches());
        let polls = AtomicUsize::new(0);
        let cancel = || polls.fetch_add(1, Ordering::Relaxed) >= cancel_after;
        let to_clean = log_to_clean(&log, None, i64::MAX, T1);
        let mut to_clean_small_groups = to_clean.clone();
        to_clean_small_groups.config.segment_bytes = 1;
        let outcome = cleaner(1 << 20)
            .clean(&to_clean_small_groups, &log, &mut log.sink(), T1, &cancel)
            .unwrap();
        assert!(
            matches!(outcome, PassOutcome::Cancelled { .. }),
            "cancelled after {cancel_after} polls"
        );
        let after = decode_all(&log.batches());
        assert_strictly_increasing(&after);
        assert_subset_with_same_offsets(&after, &before);
        for newest in newest_per_key(&before).values() {
            assert!(after.contains(newest));
        }
    }
}

#[test]
fn an_empty_dirty_section_is_a_no_op() {
    let log = twice_written_log();
    pass(&mut cleaner(1 << 20), &log, None, i64::MAX, T1);
    let before = log.batches();
    let to_clean = log_to_clean(&log, Some(40), i64::MAX, T1);
    let outcome = cleaner(1 << 20)
        .clean(&to_clean, &log, &mut log.sink(), T1, &|| false)
        .unwrap();
    match outcome {
        PassOutcome::Completed {
            first_dirty_offset,
            stats,
        } => {
            assert_eq!(first_dirty_offset, 40);
            assert_eq!(stats.groups_committed, 0);
            assert_eq!(stats.dirty_ratio_after, Some(0.0));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(log.batches(), before);
}

#[test]
fn pass_stats_account_for_what_was_read_and_kept() {
    let log = twice_written_log();
    let mut to_clean = log_to_clean(&log, None, i64::MAX, T1);
    to_clean.config.segment_bytes = 1 << 20;
    assert_eq!(to_clean.cleanable_ratio, 1.0);
    let outcome = cleaner(1 << 20)
        .clean(&to_clean, &log, &mut log.sink(), T1, &|| false)
        .unwrap();
    let stats = outcome.stats();
    assert_eq!(stats.map_records_read, 40);
    assert_eq!(stats.records_read, 40);
    assert_eq!(stats.records_retained, 20);
    assert_eq!(stats.records_removed(), 20);
    assert_eq!(stats.batches_removed, 5);
    assert_eq!(stats.batches_copied, 5);
    assert_eq!(stats.groups_committed, 1);
    assert!(stats.bytes_written < stats.bytes_read);
    assert_eq!(stats.dirty_ratio_after, Some(0.0));
}

#[test]
fn an_emptied_batch_ending_at_the_uncleanable_offset_is_kept_empty() {
    let log = MemoryLog::new();
    log.append(
        encode(
            0,
            &[TestRecord::new(b"a", Some(b"1"), T0)],
            Compression::Snappy,
        ),
        T0,
    )
    .unwrap();
    log.append(
        encode(0, &[TestRecord::new(b"a", None, T0)], Compression::Snappy),
        T0,
    )
    .unwrap();
    log.roll(T0);
    log.append(
        encode(
            0,
            &[TestRecord::new(b"b", Some(b"2"), T0)],
            Compression::None,
        ),
        T0,
    )
    .unwrap();

    pass(&mut cleaner(1 << 20), &log, None, i64::MAX, T1);
    let tombstone = BatchHeader::parse(&log.batches()[0]).unwrap();
    assert_eq!((tombstone.base_offset, tombstone.records_count), (1, 1));
    assert_eq!(tombstone.delete_horizon_ms(), Some(T1 + RETENTION_MS));

    // Re-clean from the start once the horizon has passed: the tombstone goes, but its batch
    // ends at the uncleanable offset, so its empty header stays and the log keeps offset 1.
    pass(
        &mut cleaner(1 << 20),
        &log,
        None,
        i64::MAX,
        T1 + RETENTION_MS,
    );
    let batches = log.batches();
    let emptied = BatchHeader::parse(&batches[0]).unwrap();
    assert_eq!(
        (
            emptied.base_offset,
            emptied.last_offset(),
            emptied.records_count
        ),
        (1, 1, 0)
    );
    assert_eq!(batches.len(), 2);
    assert!(decode_all(&batches)
        .iter()
        .all(|r| r.key.as_deref() == Some(&b"b"[..])));
}
