//! Follower-side log operations: appending the leader's batches as they are, and truncating a
//! divergent suffix (offsets, leader epochs, producer state and indexes follow).

use std::collections::BTreeMap;

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::Compression;

use super::batch::tests::encode_batch;
use super::batch::BatchIter;
use super::*;

fn open(dir: &Path, overrides: &[(&str, &str)]) -> Log {
    let o: BTreeMap<String, String> = overrides
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Log::open(
        dir,
        TopicConfig::resolve(&o, &Default::default()),
        LoadOptions {
            clean_shutdown: true,
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

/// Every stored byte from `from` to the log end.
fn bytes_from(log: &Log, from: i64) -> Vec<u8> {
    let mut out = Vec::new();
    let mut offset = from;
    while let Some(slice) = log
        .read(offset, 1 << 20, log.log_end_offset(), true)
        .unwrap()
    {
        let bytes = slice.read().unwrap();
        for item in BatchIter::new(&bytes) {
            let (_, h, _) = item.unwrap();
            offset = h.last_offset() + 1;
        }
        out.extend_from_slice(&bytes);
    }
    out
}

/// Two records from producer `producer_id` (epoch 0) starting at sequence `seq`.
fn idempotent_batch(producer_id: i64, seq: i32) -> Vec<u8> {
    use kafka_protocol::records::{Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};
    let records: Vec<Record> = (0..2)
        .map(|i| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id,
            producer_epoch: 0,
            timestamp_type: TimestampType::Creation,
            offset: i,
            sequence: seq + i as i32,
            timestamp: now(),
            key: None,
            value: Some(Bytes::from_static(b"v")),
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
    .unwrap();
    buf.to_vec()
}

#[test]
fn a_follower_stores_the_leaders_batches_byte_for_byte() {
    let leader_dir = tempfile::tempdir().unwrap();
    let follower_dir = tempfile::tempdir().unwrap();
    let mut leader = open(leader_dir.path(), &[]);
    let mut follower = open(follower_dir.path(), &[]);
    for (epoch, values) in [(0, vec![&b"a"[..], b"b"]), (0, vec![b"c"]), (3, vec![b"d"])] {
        let b = encode_batch(&values, Compression::None, now());
        leader.append_as_leader(&b, epoch, now()).unwrap();
    }
    let fetched = bytes_from(&leader, 0);
    // A fetch response may end with part of a batch: only whole batches are appended.
    let cut = fetched.len() - 5;
    let appended = follower.append_as_follower(&fetched[..cut], now()).unwrap();
    assert_eq!(follower.log_end_offset(), 3);
    follower
        .append_as_follower(&fetched[appended..], now())
        .unwrap();
    assert_eq!(follower.log_end_offset(), 4);
    assert_eq!(bytes_from(&follower, 0), fetched);
    assert_eq!(follower.end_offset_for_epoch(0), (0, 3));
    assert_eq!(follower.latest_epoch(), Some(3));
    // Data that does not continue the log is refused.
    assert!(matches!(
        follower.append_as_follower(&fetched, now()),
        Err(AppendError::UnexpectedOffset { .. })
    ));
}

#[test]
fn truncation_removes_the_suffix_its_epochs_and_its_producer_state() {
    let dir = tempfile::tempdir().unwrap();
    // Small segments so truncation crosses segment boundaries.
    let mut log = open(dir.path(), &[("segment.bytes", "200")]);
    let idempotent = |log: &mut Log, epoch: i32, seq: i32| {
        let b = idempotent_batch(7, seq);
        log.append_as_leader(&b, epoch, now()).unwrap()
    };
    for seq in [0, 2, 4] {
        idempotent(&mut log, 1, seq);
    }
    for seq in [6, 8] {
        idempotent(&mut log, 2, seq);
    }
    assert_eq!(log.log_end_offset(), 10);
    assert!(log.segment_count() > 1);
    log.update_high_watermark(10);
    assert!(log.truncate_to(6, now()).unwrap());
    assert_eq!(log.log_end_offset(), 6);
    assert_eq!(log.high_watermark(), 6);
    assert_eq!(log.latest_epoch(), Some(1));
    // The producer's next sequence continues from the last kept batch.
    let info = idempotent(&mut log, 3, 6);
    assert!(
        !info.duplicate,
        "sequence 6 was truncated away, so it is new"
    );
    assert_eq!(info.base_offset, 6);
    assert_eq!(log.end_offset_for_epoch(1), (1, 6));
    // Reopening finds the same log.
    drop(log);
    let log = open(dir.path(), &[("segment.bytes", "200")]);
    assert_eq!(log.log_end_offset(), 8);
    assert_eq!(log.latest_epoch(), Some(3));
}

#[test]
fn truncation_below_the_log_start_restarts_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), &[]);
    let b = encode_batch(&[b"a", b"b"], Compression::None, now());
    log.append_as_leader(&b, 0, now()).unwrap();
    log.truncate_fully_and_start_at(50, now()).unwrap();
    assert_eq!(
        (
            log.log_start_offset(),
            log.log_end_offset(),
            log.high_watermark()
        ),
        (50, 50, 50)
    );
    assert_eq!(log.latest_epoch(), None);
}

#[test]
fn truncating_at_the_log_end_drops_an_epoch_led_without_appending() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), &[]);
    let b = encode_batch(&[b"a", b"b"], Compression::None, now());
    log.append_as_leader(&b, 0, now()).unwrap();
    // Elected for epoch 3, then demoted before any append.
    log.assign_epoch_start_offset(3, 2).unwrap();
    assert_eq!(log.latest_epoch(), Some(3));
    assert!(!log.truncate_to(2, now()).unwrap());
    assert_eq!(log.latest_epoch(), Some(0));
    assert_eq!(log.log_end_offset(), 2);
}

#[test]
fn a_follower_append_that_must_not_block_stops_before_a_roll_a_flush_a_new_epoch_and_an_abort() {
    use super::txn_tests::{txn_batch, txn_marker};
    let leader_dir = tempfile::tempdir().unwrap();
    let follower_dir = tempfile::tempdir().unwrap();
    let mut leader = open(leader_dir.path(), &[]);
    let overrides = [("segment.bytes", "700"), ("flush.messages", "25")];
    let mut follower = open(follower_dir.path(), &overrides);
    let value =
        |i: usize| encode_batch(&[format!("value {i}").as_bytes()], Compression::None, now());
    for i in 0..30 {
        leader.append_as_leader(&value(i), 0, now()).unwrap();
    }
    leader
        .append_as_leader(&txn_batch(7, 0, 2), 0, now())
        .unwrap();
    let abort = leader
        .append_txn_marker(&txn_marker(7, 0, false, 0), 0, now())
        .unwrap();
    let epoch_2 = leader.log_end_offset();
    for i in 0..10 {
        leader.append_as_leader(&value(i), 2, now()).unwrap();
    }
    let fetched = bytes_from(&leader, 0);

    // The fetcher's loop: what the async worker may append, then the batch that stopped it
    // where blocking is allowed.
    let mut at = 0;
    let mut stops = Vec::new();
    loop {
        let before = (
            follower.segment_count(),
            follower.latest_epoch(),
            follower.recovery_point(),
            follower.aborted_transactions(0, i64::MAX).len(),
        );
        let appended = follower
            .try_append_as_follower(&fetched[at..], now())
            .unwrap();
        let after = (
            follower.segment_count(),
            follower.latest_epoch(),
            follower.recovery_point(),
            follower.aborted_transactions(0, i64::MAX).len(),
        );
        assert_eq!(
            before, after,
            "a non-blocking append rolled, wrote an epoch, flushed or indexed an abort"
        );
        at += appended.bytes;
        let Some(rest) = appended.rest else { break };
        assert_eq!(rest, appended.bytes, "it stops at a batch boundary");
        stops.push(follower.log_end_offset());
        let (_, header, _) = BatchIter::new(&fetched[at..]).next().unwrap().unwrap();
        let one = header.total_size();
        follower
            .append_as_follower(&fetched[at..at + one], now())
            .unwrap();
        at += one;
    }
    assert_eq!(at, fetched.len());
    assert_eq!(bytes_from(&follower, 0), fetched);
    assert_eq!(
        follower.end_offset_for_epoch(0),
        leader.end_offset_for_epoch(0)
    );
    assert_eq!(follower.latest_epoch(), Some(2));
    assert_eq!(
        follower.aborted_transactions(0, i64::MAX),
        leader.aborted_transactions(0, i64::MAX)
    );
    // The first batch starts epoch 0; the 25th record fsyncs; the marker aborts; epoch 2
    // starts; the rest are rolls.
    for offset in [0, 24, abort, epoch_2] {
        assert!(stops.contains(&offset), "no stop at {offset}: {stops:?}");
    }
    assert!(follower.segment_count() > 3, "{}", follower.segment_count());
    assert!(stops.len() >= 4 + follower.segment_count() - 1, "{stops:?}");

    // An offline log is repaired by the blocking path only.
    follower.take_offline("test".into());
    let appended = follower.try_append_as_follower(&fetched, now()).unwrap();
    assert_eq!((appended.bytes, appended.rest), (0, Some(0)));
}
