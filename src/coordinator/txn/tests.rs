//! The coordinator over an in-memory log and fake partitions: state machine, fencing with
//! Kafka's error codes, timeouts and restarts.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use super::*;
use crate::clock::Clock;

#[derive(Default)]
struct MemoryLog {
    records: Mutex<Vec<(Bytes, Option<Bytes>)>>,
    fail: AtomicBool,
}

impl TransactionLog for MemoryLog {
    fn append(
        &self,
        _id: &str,
        key: Bytes,
        value: Option<Bytes>,
    ) -> Result<(), crate::coordinator::LogWriteError> {
        if self.fail.load(Ordering::SeqCst) {
            return Err(crate::coordinator::LogWriteError::NotEnoughReplicas);
        }
        self.records.lock().unwrap().push((key, value));
        Ok(())
    }
    fn replay(&self) -> io::Result<Vec<(Bytes, Option<Bytes>)>> {
        Ok(self.records.lock().unwrap().clone())
    }
    fn coordinator_epoch(&self, _id: &str) -> i32 {
        3
    }
}

#[derive(Default)]
struct FakeParticipants {
    next_pid: AtomicI64,
    /// (topic, partition, producer id, epoch, coordinator epoch, commit)
    markers: Mutex<Vec<(String, i32, i64, i16, i32, bool)>>,
    fail_markers: AtomicBool,
}

impl Participants for FakeParticipants {
    fn allocate_producer_id(&self) -> io::Result<i64> {
        Ok(self.next_pid.fetch_add(1, Ordering::SeqCst) + 100)
    }
    fn write_marker(
        &self,
        topic: &str,
        partition: i32,
        marker: &crate::log::TxnMarker,
    ) -> Result<(), MarkerError> {
        if topic == "gone" {
            return Err(MarkerError::UnknownPartition);
        }
        if self.fail_markers.load(Ordering::SeqCst) {
            return Err(MarkerError::Failed("injected".into()));
        }
        self.markers.lock().unwrap().push((
            topic.to_string(),
            partition,
            marker.producer_id,
            marker.producer_epoch,
            marker.coordinator_epoch,
            marker.commit,
        ));
        Ok(())
    }
}

fn config() -> TxnConfig {
    TxnConfig {
        max_timeout_ms: 900_000,
        transactional_id_expiration_ms: 604_800_000,
        abort_timed_out_interval: Duration::ZERO,
        remove_expired_interval: Duration::from_secs(3600),
    }
}

/// The produce path's verification of a write to `(topic, partition)`, answered as Kafka
/// answers a Produce request of `version`.
fn produce_check(
    c: &TransactionCoordinator,
    id: &str,
    pid: i64,
    epoch: i16,
    (topic, partition): (&str, i32),
    version: i16,
) -> Result<(), ResponseError> {
    let found = c.verify_partitions(id, pid, epoch, &[tp(topic, partition)]);
    match found.map(|v| v.into_iter().next().flatten()) {
        Ok(None) => Ok(()),
        Ok(Some(e)) | Err(e) => Err(super::produce_error(e, version)),
    }
}

fn coordinator(log: &Arc<MemoryLog>, parts: &Arc<FakeParticipants>) -> TransactionCoordinator {
    let c = TransactionCoordinator::new(config(), log.clone(), parts.clone());
    c.load().unwrap();
    c
}

fn tp(t: &str, p: i32) -> (String, i32) {
    (t.to_string(), p)
}

fn state(c: &TransactionCoordinator, id: &str) -> &'static str {
    c.describe(id).unwrap().state
}

#[test]
fn init_add_commit_writes_markers_and_completes() {
    let (log, parts) = (Arc::default(), Arc::default());
    let c = coordinator(&log, &parts);
    let (pid, epoch) = c.init_producer_id("tx", 60_000, None).unwrap();
    assert_eq!((pid, epoch), (100, 0));
    c.add_partitions("tx", pid, epoch, vec![tp("a", 0), tp("b", 1)], 0)
        .unwrap();
    assert_eq!(state(&c, "tx"), "Ongoing");
    assert_eq!(
        c.verify_partitions("tx", pid, epoch, &[tp("a", 0), tp("c", 0)])
            .unwrap(),
        vec![None, Some(ResponseError::TransactionAbortable)]
    );
    assert_eq!(c.end_txn("tx", pid, epoch, true, 0).unwrap(), (pid, epoch));
    assert_eq!(state(&c, "tx"), "CompleteCommit");
    let markers = parts.markers.lock().unwrap().clone();
    assert_eq!(
        markers,
        vec![
            ("a".to_string(), 0, pid, 0, 3, true),
            ("b".to_string(), 1, pid, 0, 3, true)
        ]
    );
    // A retried commit is fine; an abort now is not.
    assert_eq!(c.end_txn("tx", pid, epoch, true, 0).unwrap(), (pid, epoch));
    assert_eq!(
        c.end_txn("tx", pid, epoch, false, 0),
        Err(ResponseError::InvalidTxnState)
    );
    // EndTxn without a transaction.
    let (p2, e2) = c.init_producer_id("tx2", 60_000, None).unwrap();
    assert_eq!(
        c.end_txn("tx2", p2, e2, true, 0),
        Err(ResponseError::InvalidTxnState)
    );
}

#[test]
fn a_new_producer_fences_the_old_one_with_kafkas_errors() {
    let (log, parts) = (Arc::default(), Arc::default());
    let c = coordinator(&log, &parts);
    let (pid, e0) = c.init_producer_id("tx", 60_000, None).unwrap();
    let (pid2, e1) = c.init_producer_id("tx", 60_000, None).unwrap();
    assert_eq!((pid2, e1), (pid, e0 + 1));
    assert_eq!(
        c.add_partitions("tx", pid, e0, vec![tp("a", 0)], 0),
        Err(ResponseError::ProducerFenced)
    );
    assert_eq!(
        c.end_txn("tx", pid, e0, true, 0),
        Err(ResponseError::ProducerFenced)
    );
    assert_eq!(
        c.add_partitions("tx", pid + 1, e1, vec![tp("a", 0)], 0),
        Err(ResponseError::InvalidProducerIdMapping)
    );
    assert_eq!(
        c.add_partitions("nope", pid, e1, vec![tp("a", 0)], 0),
        Err(ResponseError::InvalidProducerIdMapping)
    );
    // The produce path's verification, as Kafka answers Produce v9/v10 and v11+.
    c.add_partitions("tx", pid, e1, vec![tp("a", 0)], 0)
        .unwrap();
    assert_eq!(produce_check(&c, "tx", pid, e1, ("a", 0), 10), Ok(()));
    assert_eq!(
        produce_check(&c, "tx", pid, e0, ("a", 0), 10),
        Err(ResponseError::InvalidProducerEpoch)
    );
    assert_eq!(
        produce_check(&c, "tx", pid, e1, ("a", 1), 10),
        Err(ResponseError::InvalidTxnState)
    );
    assert_eq!(
        produce_check(&c, "tx", pid, e1, ("a", 1), 11),
        Err(ResponseError::TransactionAbortable)
    );
    assert_eq!(
        produce_check(&c, "other", pid, e1, ("a", 0), 10),
        Err(ResponseError::InvalidProducerIdMapping)
    );
}

#[test]
fn reinit_during_a_transaction_aborts_it_first() {
    let (log, parts) = (Arc::default(), Arc::default());
    let c = coordinator(&log, &parts);
    let (pid, e0) = c.init_producer_id("tx", 60_000, None).unwrap();
    c.add_partitions("tx", pid, e0, vec![tp("a", 0)], 0)
        .unwrap();
    assert_eq!(
        c.init_producer_id("tx", 60_000, None),
        Err(ResponseError::ConcurrentTransactions)
    );
    assert_eq!(state(&c, "tx"), "CompleteAbort");
    // The abort marker carries the fenced epoch.
    assert_eq!(
        parts.markers.lock().unwrap().clone(),
        vec![("a".to_string(), 0, pid, e0 + 1, 3, false)]
    );
    // The retry bumps again.
    assert_eq!(
        c.init_producer_id("tx", 60_000, None).unwrap(),
        (pid, e0 + 2)
    );
}

#[test]
fn kip360_and_epoch_exhaustion() {
    let (log, parts) = (Arc::default(), Arc::default());
    let c = coordinator(&log, &parts);
    let (pid, e0) = c.init_producer_id("tx", 60_000, None).unwrap();
    let (_, e1) = c.init_producer_id("tx", 60_000, Some((pid, e0))).unwrap();
    assert_eq!(e1, e0 + 1);
    // A retry of that bump with the old epoch gets the same answer.
    assert_eq!(
        c.init_producer_id("tx", 60_000, Some((pid, e0))).unwrap(),
        (pid, e1)
    );
    assert_eq!(
        c.init_producer_id("tx", 60_000, Some((pid, 42))),
        Err(ResponseError::ProducerFenced)
    );
    assert_eq!(
        c.init_producer_id("tx", 60_000, Some((pid + 50, e1))),
        Err(ResponseError::ProducerFenced)
    );
    c.txns().get_mut("tx").unwrap().meta.producer_epoch = i16::MAX - 1;
    let (pid2, e) = c.init_producer_id("tx", 60_000, None).unwrap();
    assert_ne!(pid2, pid);
    assert_eq!(e, 0);
}

#[test]
fn timeouts_are_validated_and_enforced() {
    let (log, parts): (Arc<MemoryLog>, Arc<FakeParticipants>) = (Arc::default(), Arc::default());
    let clock = Clock::manual(1_700_000_000_000);
    let c =
        TransactionCoordinator::new(config(), log.clone(), parts.clone()).with_clock(clock.clone());
    c.load().unwrap();
    assert_eq!(
        c.init_producer_id("tx", 900_001, None),
        Err(ResponseError::InvalidTransactionTimeout)
    );
    assert_eq!(
        c.init_producer_id("tx", 0, None),
        Err(ResponseError::InvalidTransactionTimeout)
    );
    let (pid, e0) = c.init_producer_id("tx", 1, None).unwrap();
    c.add_partitions("tx", pid, e0, vec![tp("a", 0)], 0)
        .unwrap();
    // Past the transaction's 1 ms timeout.
    clock.advance_ms(5);
    c.tick();
    let d = c.describe("tx").unwrap();
    assert_eq!((d.state, d.producer_epoch), ("CompleteAbort", e0 + 1));
    // The timed-out producer is fenced.
    assert_eq!(
        c.add_partitions("tx", pid, e0, vec![tp("a", 0)], 0),
        Err(ResponseError::ProducerFenced)
    );
}

#[test]
fn a_restart_finishes_prepared_transactions_and_keeps_open_ones() {
    let log: Arc<MemoryLog> = Arc::default();
    let parts: Arc<FakeParticipants> = Arc::default();
    let c = coordinator(&log, &parts);
    let (pid, e) = c.init_producer_id("done", 60_000, None).unwrap();
    c.add_partitions("done", pid, e, vec![tp("a", 0)], 0)
        .unwrap();
    let (pid2, e2) = c.init_producer_id("open", 60_000, None).unwrap();
    c.add_partitions("open", pid2, e2, vec![tp("a", 1)], 0)
        .unwrap();
    // Markers fail: the commit is durable (PrepareCommit) but not complete.
    parts.fail_markers.store(true, Ordering::SeqCst);
    assert_eq!(c.end_txn("done", pid, e, true, 0).unwrap(), (pid, e));
    assert_eq!(state(&c, "done"), "PrepareCommit");
    assert_eq!(
        c.add_partitions("done", pid, e, vec![tp("a", 0)], 0),
        Err(ResponseError::ConcurrentTransactions)
    );
    parts.fail_markers.store(false, Ordering::SeqCst);
    drop(c);
    let parts2: Arc<FakeParticipants> = Arc::default();
    parts2.next_pid.store(10, Ordering::SeqCst);
    let c = coordinator(&log, &parts2);
    assert_eq!(state(&c, "done"), "PrepareCommit");
    assert_eq!(state(&c, "open"), "Ongoing");
    c.tick();
    assert_eq!(state(&c, "done"), "CompleteCommit");
    assert_eq!(
        parts2.markers.lock().unwrap().clone(),
        vec![("a".to_string(), 0, pid, e, 3, true)]
    );
    assert_eq!(c.end_txn("open", pid2, e2, false, 0).unwrap(), (pid2, e2));
    assert_eq!(state(&c, "open"), "CompleteAbort");
}

#[test]
fn a_failed_append_leaves_the_state_unchanged_and_retryable() {
    let log: Arc<MemoryLog> = Arc::default();
    let parts: Arc<FakeParticipants> = Arc::default();
    let c = coordinator(&log, &parts);
    let (pid, e) = c.init_producer_id("tx", 60_000, None).unwrap();
    log.fail.store(true, Ordering::SeqCst);
    assert_eq!(
        c.add_partitions("tx", pid, e, vec![tp("a", 0)], 0),
        Err(ResponseError::CoordinatorNotAvailable)
    );
    assert_eq!(state(&c, "tx"), "Empty");
    log.fail.store(false, Ordering::SeqCst);
    c.add_partitions("tx", pid, e, vec![tp("a", 0), tp("gone", 0)], 0)
        .unwrap();
    c.end_txn("tx", pid, e, false, 0).unwrap();
    assert_eq!(state(&c, "tx"), "CompleteAbort");
}

#[test]
fn tv2_clients_get_a_new_epoch_from_every_end_txn() {
    let (log, parts) = (Arc::default(), Arc::default());
    let c = coordinator(&log, &parts);
    let (pid, e) = c.init_producer_id("tx", 60_000, None).unwrap();
    c.add_partitions("tx", pid, e, vec![tp("a", 0)], 0).unwrap();
    assert_eq!(c.end_txn("tx", pid, e, true, 2).unwrap(), (pid, e + 1));
    // The marker is written with the bumped epoch; a retry with the old epoch succeeds.
    assert_eq!(parts.markers.lock().unwrap()[0].3, e + 1);
    assert_eq!(c.end_txn("tx", pid, e, true, 2).unwrap(), (pid, e + 1));
    c.add_partitions("tx", pid, e + 1, vec![tp("a", 0)], 0)
        .unwrap();
    assert_eq!(c.end_txn("tx", pid, e + 1, false, 2).unwrap(), (pid, e + 2));
}

#[test]
fn list_and_describe_filter_like_kafka() {
    let (log, parts) = (Arc::default(), Arc::default());
    let c = coordinator(&log, &parts);
    let (pa, ea) = c.init_producer_id("a", 60_000, None).unwrap();
    c.init_producer_id("b", 60_000, None).unwrap();
    c.add_partitions("a", pa, ea, vec![tp("t", 0)], 0).unwrap();
    let (all, unknown) = c.list(&[], &[], -1, None);
    assert_eq!(all.len(), 2);
    assert!(unknown.is_empty());
    let (ongoing, unknown) = c.list(&["Ongoing".into(), "Bogus".into()], &[], -1, None);
    assert_eq!(ongoing.len(), 1);
    assert_eq!(ongoing[0].transactional_id, "a");
    assert_eq!(unknown, vec!["Bogus".to_string()]);
    assert_eq!(c.list(&[], &[pa], -1, None).0.len(), 1);
    // Kafka compares against the start time, which is -1 for an id without a transaction.
    let long = c.list(&[], &[], 3_600_000, None).0;
    assert_eq!(long.len(), 1);
    assert_eq!(long[0].transactional_id, "b");
    let re = regex::Regex::new("^(?:b)$").unwrap();
    assert_eq!(c.list(&[], &[], -1, Some(&re)).0[0].transactional_id, "b");
    assert_eq!(
        c.describe("zzz"),
        Err(ResponseError::TransactionalIdNotFound)
    );
    assert_eq!(c.describe("a").unwrap().partitions, vec![tp("t", 0)]);
    assert_eq!(c.ongoing_count(), 1);
}

#[test]
fn idle_transactional_ids_expire_with_a_tombstone() {
    let log: Arc<MemoryLog> = Arc::default();
    let parts: Arc<FakeParticipants> = Arc::default();
    let mut cfg = config();
    cfg.transactional_id_expiration_ms = 0;
    let clock = Clock::manual(1_700_000_000_000);
    let c = TransactionCoordinator::new(cfg, log.clone(), parts.clone()).with_clock(clock.clone());
    c.init_producer_id("tx", 60_000, None).unwrap();
    clock.advance_ms(2);
    c.expire_transactional_ids();
    assert_eq!(
        c.describe("tx"),
        Err(ResponseError::TransactionalIdNotFound)
    );
    assert_eq!(log.records.lock().unwrap().last().unwrap().1, None);
    let c2 = coordinator(&log, &parts);
    assert_eq!(
        c2.describe("tx"),
        Err(ResponseError::TransactionalIdNotFound)
    );
}

#[test]
fn a_moved_partition_is_refused_then_reloaded_with_its_prepared_transaction_finished() {
    let log: Arc<MemoryLog> = Arc::default();
    let parts: Arc<FakeParticipants> = Arc::default();
    let c = coordinator(&log, &parts);
    let (pid, e) = c.init_producer_id("tx", 60_000, None).unwrap();
    c.add_partitions("tx", pid, e, vec![tp("a", 0)], 0).unwrap();
    // The markers cannot be written: the transaction stays PrepareCommit.
    parts.fail_markers.store(true, Ordering::SeqCst);
    assert_eq!(c.end_txn("tx", pid, e, true, 0), Ok((pid, e)));
    assert_eq!(state(&c, "tx"), "PrepareCommit");

    c.on_resignation(0);
    assert_eq!(c.describe("tx"), Err(ResponseError::NotCoordinator));
    assert_eq!(
        c.init_producer_id("tx", 60_000, None),
        Err(ResponseError::NotCoordinator)
    );
    assert_eq!(
        c.end_txn("tx", pid, e, true, 0),
        Err(ResponseError::NotCoordinator)
    );
    c.tick();
    assert!(
        parts.markers.lock().unwrap().is_empty(),
        "no markers once resigned"
    );

    // Leader again at a new epoch: loading, then the timer finishes the commit.
    parts.fail_markers.store(false, Ordering::SeqCst);
    c.on_election(0, 5);
    assert_eq!(
        c.end_txn("tx", pid, e, true, 0),
        Err(ResponseError::CoordinatorLoadInProgress)
    );
    c.tick();
    assert_eq!(state(&c, "tx"), "CompleteCommit");
    assert_eq!(parts.markers.lock().unwrap().len(), 1);
}

#[test]
fn tv2_writes_add_their_partitions_and_every_end_bumps_the_epoch() {
    let log: Arc<MemoryLog> = Arc::default();
    let parts: Arc<FakeParticipants> = Arc::default();
    let c = coordinator(&log, &parts);
    let (pid, e) = c.init_producer_id("tx", 60_000, None).unwrap();
    // A TV2 write adds its partition; the commit bumps the epoch and its markers carry it.
    c.add_partitions("tx", pid, e, vec![tp("a", 0)], 2).unwrap();
    assert_eq!(c.end_txn("tx", pid, e, true, 2), Ok((pid, e + 1)));
    assert_eq!(
        parts.markers.lock().unwrap().last().unwrap(),
        &("a".to_string(), 0, pid, e + 1, 3, true)
    );
    // A retry with the old epoch gets the same answer; committing again at the new epoch
    // (nothing added) is refused; the old epoch cannot start anything.
    assert_eq!(c.end_txn("tx", pid, e, true, 2), Ok((pid, e + 1)));
    assert_eq!(
        c.end_txn("tx", pid, e + 1, true, 2),
        Err(ResponseError::InvalidTxnState)
    );
    assert_eq!(
        c.add_partitions("tx", pid, e, vec![tp("a", 0)], 2),
        Err(ResponseError::ProducerFenced)
    );
    // An abort with nothing added still bumps the epoch (it fences a write on its way) and
    // writes no marker; its retry is answered, a commit retry of it is refused.
    let markers = parts.markers.lock().unwrap().len();
    assert_eq!(c.end_txn("tx", pid, e + 1, false, 2), Ok((pid, e + 2)));
    assert_eq!(parts.markers.lock().unwrap().len(), markers);
    assert_eq!(state(&c, "tx"), "CompleteAbort");
    assert_eq!(c.end_txn("tx", pid, e + 1, false, 2), Ok((pid, e + 2)));
    assert_eq!(
        c.end_txn("tx", pid, e + 1, true, 2),
        Err(ResponseError::InvalidTxnState)
    );
    // A TV1 end on the same id keeps the epoch.
    c.add_partitions("tx", pid, e + 2, vec![tp("a", 0)], 0)
        .unwrap();
    assert_eq!(c.end_txn("tx", pid, e + 2, true, 0), Ok((pid, e + 2)));
}

#[test]
fn tv2_end_with_an_exhausted_epoch_moves_to_a_new_producer_id() {
    let log: Arc<MemoryLog> = Arc::default();
    let parts: Arc<FakeParticipants> = Arc::default();
    let c = coordinator(&log, &parts);
    let (pid, _) = c.init_producer_id("tx", 60_000, None).unwrap();
    let e = i16::MAX - 1;
    c.txns().get_mut("tx").unwrap().meta.producer_epoch = e;
    c.add_partitions("tx", pid, e, vec![tp("a", 0)], 2).unwrap();
    let (next, epoch) = c.end_txn("tx", pid, e, true, 2).unwrap();
    assert_ne!(next, pid);
    assert_eq!(epoch, 0);
    // The markers close the transaction under the old id, at the highest epoch.
    assert_eq!(
        parts.markers.lock().unwrap().last().unwrap(),
        &("a".to_string(), 0, pid, i16::MAX, 3, true)
    );
    // A retry of that end, by the old id and epoch, gets the new id.
    assert_eq!(c.end_txn("tx", pid, e, true, 2), Ok((next, 0)));
    c.add_partitions("tx", next, 0, vec![tp("a", 0)], 2)
        .unwrap();
    // The rotation is durable.
    let c2 = coordinator(&log, &parts);
    assert_eq!(c2.describe("tx").unwrap().producer_id, next);
}

#[test]
fn a_timed_out_tv2_transaction_is_aborted_with_one_bump_as_in_kafka() {
    let (log, parts): (Arc<MemoryLog>, Arc<FakeParticipants>) = (Arc::default(), Arc::default());
    let clock = Clock::manual(1_700_000_000_000);
    let c =
        TransactionCoordinator::new(config(), log.clone(), parts.clone()).with_clock(clock.clone());
    c.load().unwrap();
    let (pid, e) = c.init_producer_id("tx", 1, None).unwrap();
    c.add_partitions("tx", pid, e, vec![tp("a", 0)], 2).unwrap();
    clock.advance_ms(5);
    c.tick();
    // Kafka 4.4 leaves a timed-out transaction, TV2 or not, one epoch above.
    let d = c.describe("tx").unwrap();
    assert_eq!((d.state, d.producer_epoch), ("CompleteAbort", e + 1));
    assert_eq!(
        parts.markers.lock().unwrap().last().unwrap(),
        &("a".to_string(), 0, pid, e + 1, 3, false)
    );
    assert_eq!(
        c.add_partitions("tx", pid, e, vec![tp("a", 0)], 2),
        Err(ResponseError::ProducerFenced)
    );
}

#[test]
fn an_idle_coordinator_needs_no_tick_and_a_prepared_transaction_does() {
    let (log, parts): (Arc<MemoryLog>, Arc<FakeParticipants>) = (Arc::default(), Arc::default());
    let mut config = config();
    config.abort_timed_out_interval = Duration::from_secs(3600);
    let c = TransactionCoordinator::new(config, log.clone(), parts.clone());
    c.load().unwrap();
    assert!(!c.needs_tick());
    let (pid, e) = c.init_producer_id("tx", 60_000, None).unwrap();
    c.add_partitions("tx", pid, e, vec![tp("a", 0)], 0).unwrap();
    assert!(
        !c.needs_tick(),
        "an ongoing transaction waits for the timed-out scan, not for the timer"
    );
    // Markers fail: the prepared commit is the timer's to finish.
    parts.fail_markers.store(true, Ordering::SeqCst);
    assert_eq!(c.end_txn("tx", pid, e, true, 0).unwrap(), (pid, e));
    assert_eq!(state(&c, "tx"), "PrepareCommit");
    assert!(c.needs_tick());
}
