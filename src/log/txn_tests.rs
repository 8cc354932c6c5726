//! Transactions on the partition: the last stable offset, COMMIT/ABORT markers, the aborted
//! transaction index, and their recovery after a restart or a crash.

use std::collections::BTreeMap;
use std::fs;

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use super::*;

fn config() -> TopicConfig {
    TopicConfig::resolve(&BTreeMap::new(), &Default::default())
}

fn open(dir: &Path, clean: bool) -> Log {
    Log::open(
        dir,
        config(),
        LoadOptions {
            clean_shutdown: clean,
            recovery_point: None,
            log_start_offset: None,
            now_ms: crate::clock::now_ms(),
        },
    )
    .unwrap()
}

/// A transactional batch of `n` records for producer `pid` starting at sequence `seq`.
pub(super) fn txn_batch(pid: i64, seq: i32, n: usize) -> Vec<u8> {
    let now = crate::clock::now_ms();
    let records: Vec<Record> = (0..n)
        .map(|i| Record {
            transactional: true,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: pid,
            producer_epoch: 0,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: seq + i as i32,
            timestamp: now,
            key: Some(Bytes::from(format!("k{i}"))),
            value: Some(Bytes::from(format!("v{i}"))),
            headers: Default::default(),
        })
        .collect();
    let mut out = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut out,
        records.iter(),
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .unwrap();
    out.to_vec()
}

fn append(log: &mut Log, bytes: &[u8]) -> i64 {
    let info = log
        .append_as_leader(bytes, 0, crate::clock::now_ms())
        .unwrap();
    let leo = log.log_end_offset();
    log.update_high_watermark(leo);
    info.base_offset
}

pub(super) fn txn_marker(
    producer_id: i64,
    producer_epoch: i16,
    commit: bool,
    tv: i16,
) -> TxnMarker {
    TxnMarker {
        producer_id,
        producer_epoch,
        coordinator_epoch: 0,
        commit,
        transaction_version: tv,
    }
}

fn marker(log: &mut Log, pid: i64, commit: bool) -> i64 {
    let o = log
        .append_txn_marker(&txn_marker(pid, 0, commit, 0), 0, crate::clock::now_ms())
        .unwrap();
    let leo = log.log_end_offset();
    log.update_high_watermark(leo);
    o
}

#[test]
fn the_last_stable_offset_waits_for_the_oldest_open_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), true);
    let a = append(&mut log, &txn_batch(1, 0, 3)); // 0..3
    append(
        &mut log,
        &super::batch::tests::encode_batch(&[b"x"], Compression::None, 1),
    ); // 3
    let b = append(&mut log, &txn_batch(2, 0, 2)); // 4..6
    assert_eq!((a, b), (0, 4));
    assert_eq!(log.high_watermark(), 6);
    assert_eq!(log.last_stable_offset(), 0);
    // More data from producer 1 does not move its transaction's start.
    append(&mut log, &txn_batch(1, 3, 1)); // 6
    assert_eq!(marker(&mut log, 1, true), 7);
    assert_eq!(log.last_stable_offset(), 4, "producer 2 is still open");
    assert_eq!(marker(&mut log, 2, false), 8);
    assert_eq!(log.last_stable_offset(), 9);
    let aborted = log.aborted_transactions(0, 9);
    assert_eq!(aborted.len(), 1);
    assert_eq!(
        (
            aborted[0].producer_id,
            aborted[0].first_offset,
            aborted[0].last_offset
        ),
        (2, 4, 8)
    );
    assert!(log.aborted_transactions(9, 20).is_empty());
    // Reads stop at the last stable offset for read_committed.
    let mut log2 = log;
    append(&mut log2, &txn_batch(3, 0, 1)); // 9, open
    assert_eq!(log2.last_stable_offset(), 9);
    assert!(log2
        .read(9, 1 << 20, log2.last_stable_offset(), true)
        .unwrap()
        .is_none());
}

#[test]
fn markers_check_the_producer_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), true);
    append(&mut log, &txn_batch(5, 0, 1));
    log.append_txn_marker(&txn_marker(5, 1, false, 0), 0, 0)
        .unwrap();
    let e = log
        .append_txn_marker(&txn_marker(5, 0, true, 0), 0, 0)
        .unwrap_err();
    assert!(matches!(
        e,
        AppendError::Producer(producer_state::ProducerError::InvalidProducerEpoch { .. })
    ));
    // Transaction version 2 (Kafka 4.4): the coordinator bumps the epoch to end a
    // transaction, so a marker at the producer's own epoch is late or a duplicate.
    append(&mut log, &txn_batch(6, 0, 1));
    let e = log
        .append_txn_marker(&txn_marker(6, 0, true, 2), 0, 0)
        .unwrap_err();
    assert!(matches!(
        e,
        AppendError::Producer(producer_state::ProducerError::InvalidProducerEpoch { .. })
    ));
    log.append_txn_marker(&txn_marker(6, 1, true, 2), 0, 0)
        .unwrap();
    // Sent again with no transaction ongoing, the same marker is written, as Kafka 4.4
    // does; one below the producer's epoch is not.
    log.append_txn_marker(&txn_marker(6, 1, true, 2), 0, 0)
        .unwrap();
    assert!(log
        .append_txn_marker(&txn_marker(6, 0, true, 1), 0, 0)
        .is_err());
    // An older client's marker at the transaction's epoch stays valid.
    append(&mut log, &txn_batch(7, 0, 1));
    log.append_txn_marker(&txn_marker(7, 0, false, 1), 0, 0)
        .unwrap();
}

#[test]
fn aborted_transactions_survive_restarts_and_crashes() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), true);
    append(&mut log, &txn_batch(7, 0, 2));
    append(&mut log, &txn_batch(8, 0, 2));
    marker(&mut log, 7, false);
    append(&mut log, &txn_batch(9, 0, 1)); // stays open
    log.close(crate::clock::now_ms()).unwrap();
    drop(log);
    let log = open(dir.path(), true);
    assert_eq!(log.aborted_transactions(0, 100).len(), 1);
    assert_eq!(
        log.last_stable_offset(),
        2,
        "producer 8 is still open after a restart"
    );
    drop(log);
    // A crash that lost the .txnindex append: replay after the snapshot rebuilds it.
    for e in fs::read_dir(dir.path()).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if name.ends_with(".txnindex") || name.ends_with(".snapshot") {
            fs::remove_file(e.path()).unwrap();
        }
    }
    let log = open(dir.path(), false);
    let aborted = log.aborted_transactions(0, 100);
    assert_eq!(aborted.len(), 1);
    assert_eq!((aborted[0].producer_id, aborted[0].first_offset), (7, 0));
    assert_eq!(log.last_stable_offset(), 2);
}
