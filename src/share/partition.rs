//! One share-partition (KIP-932): which records of one topic partition a share group has
//! delivered, to whom, how often, and which are done.
//!
//! Offsets below the share-partition start offset (SPSO, `start_offset`) are done. From there
//! up to the end offset (SPEO) every offset has a slot: available (to be acquired again),
//! acquired by one member under a lock until a deadline, acknowledged, or archived (rejected,
//! past the delivery count limit, a gap, a control or aborted record). Offsets at or above the
//! end offset have never been acquired. The start offset moves up over leading slots that are
//! done, so the slots (the records in flight) stay bounded by `max_record_locks` as long as
//! the consumers acknowledge.
//!
//! Pure state: the share service calls it under the partition's lock, persists a
//! [`Snapshot`] of the result before it answers an acknowledgement, and only then keeps the
//! new state. Acquisition is not persisted (as in Kafka): after a restart, records that were
//! acquired are available again with the delivery count last persisted.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

/// The most records in flight a persisted share-partition is read back with.
pub const MAX_SLOTS: usize = 100_000;

/// The acknowledgement types of ShareFetch / ShareAcknowledge.
pub const ACK_GAP: i8 = 0;
pub const ACK_ACCEPT: i8 = 1;
pub const ACK_RELEASE: i8 = 2;
pub const ACK_REJECT: i8 = 3;
/// Keeps the records acquired and renews their lock (ShareFetch / ShareAcknowledge v2,
/// KIP-1222).
pub const ACK_RENEW: i8 = 4;

/// A record's delivery state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordState {
    Available,
    Acquired,
    Acknowledged,
    Archived,
}

impl RecordState {
    /// The persisted form (Kafka's `DeliveryState`: 0 available, 2 acknowledged, 4 archived).
    /// Acquisition is not persisted: an acquired record is written as available.
    pub fn persisted(self) -> i8 {
        match self {
            RecordState::Available | RecordState::Acquired => 0,
            RecordState::Acknowledged => 2,
            RecordState::Archived => 4,
        }
    }

    fn from_persisted(v: i8) -> Option<RecordState> {
        match v {
            0 => Some(RecordState::Available),
            2 => Some(RecordState::Acknowledged),
            4 => Some(RecordState::Archived),
            _ => None,
        }
    }

    fn is_done(self) -> bool {
        matches!(self, RecordState::Acknowledged | RecordState::Archived)
    }
}

#[derive(Debug, Clone)]
struct Slot {
    state: RecordState,
    delivery_count: i16,
    /// The member holding the acquisition lock.
    owner: Option<Arc<str>>,
    lock_deadline: Option<Instant>,
}

impl Slot {
    fn done(state: RecordState) -> Slot {
        Slot {
            state,
            delivery_count: 0,
            owner: None,
            lock_deadline: None,
        }
    }
}

/// One contiguous range of offsets in one persisted state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateBatch {
    pub first_offset: i64,
    pub last_offset: i64,
    pub delivery_state: i8,
    pub delivery_count: i16,
}

/// What is persisted of a share-partition (Kafka's `ShareSnapshotValue`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub snapshot_epoch: i32,
    pub state_epoch: i32,
    pub leader_epoch: i32,
    pub start_offset: i64,
    /// Offsets at or above the start offset whose delivery is complete, as the leader last
    /// said (Kafka's tagged `DeliveryCompleteCount`; -1: not known).
    pub delivery_complete_count: i32,
    pub create_timestamp: i64,
    pub write_timestamp: i64,
    pub state_batches: Vec<StateBatch>,
}

/// What a fetched batch is, as far as acquisition cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchKind {
    /// Records to deliver.
    Data,
    /// A transaction marker, or records of an aborted transaction under read_committed:
    /// archived without delivery.
    Skip,
}

/// Records acquired for one member: `[first_offset, last_offset]`, each delivered for the
/// `delivery_count`-th time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acquired {
    pub first_offset: i64,
    pub last_offset: i64,
    pub delivery_count: i16,
}

/// Records archived by a member's rejection or at the delivery count limit: what a share
/// group with a dead-letter topic copies there (see [`super::dead_letter`]). Offsets
/// `[first_offset, last_offset]`, each delivered `delivery_count` times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadLetter {
    pub first_offset: i64,
    pub last_offset: i64,
    pub delivery_count: i16,
    /// Rejected by the member; else released or timed out at the limit.
    pub rejected: bool,
}

/// Why an acknowledgement was refused (nothing of its batch was applied).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckError {
    /// An offset is not acquired by this member (Kafka's INVALID_RECORD_STATE).
    InvalidRecordState,
    /// Malformed: last before first, or as many types as neither 1 nor the offsets
    /// (INVALID_REQUEST).
    InvalidRequest,
}

/// The limits a share group puts on its share-partitions.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// `share.delivery.count.limit`: a record released or timed out after this many
    /// deliveries is archived.
    pub delivery_count_limit: i16,
    /// `share.partition.max.record.locks`: at most this many records in flight.
    pub max_record_locks: usize,
}

#[derive(Debug, Clone)]
pub struct SharePartition {
    start_offset: i64,
    /// `slots[i]` is offset `start_offset + i`.
    slots: VecDeque<Slot>,
    acquired: usize,
    pub state_epoch: i32,
    pub leader_epoch: i32,
    pub snapshot_epoch: i32,
    create_timestamp: i64,
    /// Archived since [`take_dead_letters`](Self::take_dead_letters) last ran; never
    /// persisted (Kafka's dead-letter copy is not atomic with the state either).
    dead_letters: Vec<DeadLetter>,
}

impl SharePartition {
    /// A share-partition that starts delivering at `start_offset`.
    pub fn new(start_offset: i64, leader_epoch: i32, now_ms: i64) -> SharePartition {
        SharePartition {
            start_offset,
            slots: VecDeque::new(),
            acquired: 0,
            state_epoch: 0,
            leader_epoch,
            snapshot_epoch: 0,
            create_timestamp: now_ms,
            dead_letters: Vec::new(),
        }
    }

    /// The records archived by rejection or at the delivery count limit since the last call.
    pub fn take_dead_letters(&mut self) -> Vec<DeadLetter> {
        std::mem::take(&mut self.dead_letters)
    }

    fn dead_letter(&mut self, offset: i64, delivery_count: i16, rejected: bool) {
        match self.dead_letters.last_mut() {
            Some(d)
                if d.last_offset + 1 == offset
                    && d.delivery_count == delivery_count
                    && d.rejected == rejected =>
            {
                d.last_offset = offset;
            }
            _ => self.dead_letters.push(DeadLetter {
                first_offset: offset,
                last_offset: offset,
                delivery_count,
                rejected,
            }),
        }
    }

    /// The share-partition as persisted. Offsets between the start offset and the last state
    /// batch that no batch names are available, never delivered; a state it does not know is
    /// taken as available (delivered again rather than lost).
    pub fn from_snapshot(s: &Snapshot) -> SharePartition {
        let mut p = SharePartition {
            start_offset: s.start_offset,
            slots: VecDeque::new(),
            acquired: 0,
            state_epoch: s.state_epoch,
            leader_epoch: s.leader_epoch,
            snapshot_epoch: s.snapshot_epoch,
            create_timestamp: s.create_timestamp,
            dead_letters: Vec::new(),
        };
        let mut batches = s.state_batches.clone();
        batches.sort_by_key(|b| b.first_offset);
        for b in batches {
            let first = b.first_offset.max(p.end_offset());
            // A corrupt batch cannot make the slots huge: no share-partition has more records
            // in flight than `MAX_SLOTS` (Kafka's largest `share.partition.max.record.locks`
            // is 10,000).
            let last = b
                .last_offset
                .min(p.start_offset.saturating_add(MAX_SLOTS as i64 - 1));
            if last < first {
                continue;
            }
            while p.end_offset() < first {
                p.slots.push_back(Slot::done(RecordState::Available));
            }
            let state =
                RecordState::from_persisted(b.delivery_state).unwrap_or(RecordState::Available);
            for _ in first..=last {
                p.slots.push_back(Slot {
                    state,
                    delivery_count: b.delivery_count.max(0),
                    owner: None,
                    lock_deadline: None,
                });
            }
        }
        p.advance_start();
        p
    }

    /// The share-partition start offset (SPSO).
    pub fn start_offset(&self) -> i64 {
        self.start_offset
    }

    /// The offset after the last one ever acquired (SPEO).
    pub fn end_offset(&self) -> i64 {
        self.start_offset + self.slots.len() as i64
    }

    /// Records acquired and not yet acknowledged or released.
    pub fn acquired_count(&self) -> usize {
        self.acquired
    }

    /// Records in flight (between the start and the end offset).
    pub fn in_flight(&self) -> usize {
        self.slots.len()
    }

    /// Where the next fetch for this share-partition reads from: the first available record,
    /// or the end offset. `None` when nothing can be acquired: every record in flight is
    /// acquired or done and the record locks are all used.
    pub fn next_fetch_offset(&self, limits: Limits) -> Option<i64> {
        if let Some(i) = self
            .slots
            .iter()
            .position(|s| s.state == RecordState::Available)
        {
            return Some(self.start_offset + i as i64);
        }
        (self.slots.len() < limits.max_record_locks).then_some(self.end_offset())
    }

    /// The log start moved past the start offset (retention, DeleteRecords): those records
    /// are gone, whatever their state.
    pub fn move_start_to(&mut self, log_start_offset: i64) {
        while self.start_offset < log_start_offset {
            match self.slots.pop_front() {
                Some(s) => {
                    if s.state == RecordState::Acquired {
                        self.acquired -= 1;
                    }
                }
                None => {
                    self.start_offset = log_start_offset;
                    return;
                }
            }
            self.start_offset += 1;
        }
    }

    /// Acquires for `member`, from `batches` (first offset, last offset, kind) as read from
    /// the log in order, the available and the new records, locked until `lock_deadline`:
    /// at most `max_records` of them, or, with `whole_batches` (Kafka's batch-optimized
    /// acquire mode), whole batches until `max_records` is reached, which may exceed it to end
    /// on a batch boundary. Returns the acquired ranges in offset order.
    pub fn acquire(
        &mut self,
        member: &Arc<str>,
        batches: &[(i64, i64, BatchKind)],
        max_records: usize,
        whole_batches: bool,
        limits: Limits,
        lock_deadline: Instant,
    ) -> Vec<Acquired> {
        let mut out: Vec<Acquired> = Vec::new();
        let mut taken = 0usize;
        'batches: for &(first, last, kind) in batches {
            if taken >= max_records {
                break;
            }
            let first = first.max(self.start_offset);
            let mut offset = first;
            while offset <= last {
                if taken >= max_records && !whole_batches {
                    break 'batches;
                }
                if offset >= self.end_offset() {
                    if self.slots.is_empty() {
                        // Nothing in flight: offsets the log skipped (compaction) move the
                        // start offset.
                        self.start_offset = offset;
                    }
                    let gap = (offset - self.end_offset()) as usize;
                    if self.slots.len().saturating_add(gap) >= limits.max_record_locks {
                        break 'batches;
                    }
                    // Offsets the log skipped before this batch: nothing there.
                    while self.end_offset() < offset {
                        self.slots.push_back(Slot::done(RecordState::Archived));
                    }
                    self.slots.push_back(Slot::done(RecordState::Available));
                }
                let i = (offset - self.start_offset) as usize;
                let slot = &mut self.slots[i];
                if slot.state == RecordState::Available {
                    if kind == BatchKind::Skip {
                        slot.state = RecordState::Archived;
                    } else {
                        slot.state = RecordState::Acquired;
                        slot.delivery_count = slot.delivery_count.saturating_add(1);
                        slot.owner = Some(member.clone());
                        slot.lock_deadline = Some(lock_deadline);
                        self.acquired += 1;
                        taken += 1;
                        let count = slot.delivery_count;
                        match out.last_mut() {
                            Some(a) if a.last_offset + 1 == offset && a.delivery_count == count => {
                                a.last_offset = offset;
                            }
                            _ => out.push(Acquired {
                                first_offset: offset,
                                last_offset: offset,
                                delivery_count: count,
                            }),
                        }
                    }
                }
                offset += 1;
            }
        }
        self.advance_start();
        out
    }

    /// Applies one acknowledgement batch of `member`: one type for every offset, or one per
    /// offset. All or nothing. RENEW keeps a record acquired until `renew_until`, and is
    /// refused (INVALID_REQUEST) without it.
    pub fn acknowledge(
        &mut self,
        member: &str,
        first_offset: i64,
        last_offset: i64,
        types: &[i8],
        limits: Limits,
        renew_until: Option<Instant>,
    ) -> Result<(), AckError> {
        if last_offset < first_offset {
            return Err(AckError::InvalidRequest);
        }
        let n = i128::from(last_offset) - i128::from(first_offset) + 1;
        if types.is_empty() || (types.len() != 1 && types.len() as i128 != n) {
            return Err(AckError::InvalidRequest);
        }
        let highest = if renew_until.is_some() {
            ACK_RENEW
        } else {
            ACK_REJECT
        };
        if types.iter().any(|t| !(ACK_GAP..=highest).contains(t)) {
            return Err(AckError::InvalidRequest);
        }
        if first_offset < self.start_offset || last_offset >= self.end_offset() {
            return Err(AckError::InvalidRecordState);
        }
        let from = (first_offset - self.start_offset) as usize;
        let to = (last_offset - self.start_offset) as usize;
        let held =
            |s: &Slot| s.state == RecordState::Acquired && s.owner.as_deref() == Some(member);
        if !self.slots.range(from..=to).all(held) {
            return Err(AckError::InvalidRecordState);
        }
        for (k, i) in (from..=to).enumerate() {
            let t = if types.len() == 1 { types[0] } else { types[k] };
            let slot = &mut self.slots[i];
            if t == ACK_RENEW {
                slot.lock_deadline = renew_until;
                continue;
            }
            self.acquired -= 1;
            slot.owner = None;
            slot.lock_deadline = None;
            slot.state = match t {
                ACK_ACCEPT => RecordState::Acknowledged,
                ACK_RELEASE if slot.delivery_count < limits.delivery_count_limit => {
                    RecordState::Available
                }
                _ => RecordState::Archived,
            };
            // A gap (type 0) names an offset with no record: nothing to copy.
            if matches!(t, ACK_RELEASE | ACK_REJECT) && slot.state == RecordState::Archived {
                let count = slot.delivery_count;
                self.dead_letter(first_offset + k as i64, count, t == ACK_REJECT);
            }
        }
        self.advance_start();
        Ok(())
    }

    /// Releases what `member` holds (its share session closed). Returns whether any was.
    pub fn release_member(&mut self, member: &str, limits: Limits) -> bool {
        self.release_where(limits, |s| s.owner.as_deref() == Some(member))
    }

    /// Releases the records whose acquisition lock expired by `now`. Returns whether any did.
    pub fn expire_locks(&mut self, now: Instant, limits: Limits) -> bool {
        if self.acquired == 0 {
            return false;
        }
        self.release_where(limits, |s| s.lock_deadline.is_some_and(|d| d <= now))
    }

    /// The earliest acquisition lock deadline.
    pub fn next_lock_deadline(&self) -> Option<Instant> {
        if self.acquired == 0 {
            return None;
        }
        self.slots.iter().filter_map(|s| s.lock_deadline).min()
    }

    fn release_where(&mut self, limits: Limits, pick: impl Fn(&Slot) -> bool) -> bool {
        let mut any = false;
        let mut archived = Vec::new();
        for (i, slot) in self.slots.iter_mut().enumerate() {
            if slot.state == RecordState::Acquired && pick(slot) {
                slot.state = if slot.delivery_count < limits.delivery_count_limit {
                    RecordState::Available
                } else {
                    archived.push((self.start_offset + i as i64, slot.delivery_count));
                    RecordState::Archived
                };
                slot.owner = None;
                slot.lock_deadline = None;
                self.acquired -= 1;
                any = true;
            }
        }
        for (offset, count) in archived {
            self.dead_letter(offset, count, false);
        }
        self.advance_start();
        any
    }

    fn advance_start(&mut self) {
        while self.slots.front().is_some_and(|s| s.state.is_done()) {
            self.slots.pop_front();
            self.start_offset += 1;
        }
    }

    /// What to persist: the start offset and the slots as runs of one state and count.
    pub fn snapshot(&self, now_ms: i64) -> Snapshot {
        let mut batches: Vec<StateBatch> = Vec::new();
        for (i, s) in self.slots.iter().enumerate() {
            let offset = self.start_offset + i as i64;
            let (state, count) = (s.state.persisted(), s.delivery_count);
            match batches.last_mut() {
                Some(b)
                    if b.last_offset + 1 == offset
                        && b.delivery_state == state
                        && b.delivery_count == count =>
                {
                    b.last_offset = offset;
                }
                _ => batches.push(StateBatch {
                    first_offset: offset,
                    last_offset: offset,
                    delivery_state: state,
                    delivery_count: count,
                }),
            }
        }
        Snapshot {
            snapshot_epoch: self.snapshot_epoch,
            state_epoch: self.state_epoch,
            leader_epoch: self.leader_epoch,
            start_offset: self.start_offset,
            delivery_complete_count: self.done_in_flight().min(i32::MAX as usize) as i32,
            create_timestamp: self.create_timestamp,
            write_timestamp: now_ms,
            state_batches: batches,
        }
    }

    /// Records in flight that are done (acknowledged or archived): Kafka's delivery-complete
    /// count, which the lag leaves out.
    pub fn done_in_flight(&self) -> usize {
        self.slots.iter().filter(|s| s.state.is_done()).count()
    }

    /// The state of one offset (for tests and describe).
    pub fn state_of(&self, offset: i64) -> Option<(RecordState, i16)> {
        if offset < self.start_offset {
            return None;
        }
        self.slots
            .get((offset - self.start_offset) as usize)
            .map(|s| (s.state, s.delivery_count))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use proptest::prelude::*;

    use super::*;

    const LIMITS: Limits = Limits {
        delivery_count_limit: 3,
        max_record_locks: 100,
    };

    fn member(name: &str) -> Arc<str> {
        Arc::from(name)
    }

    fn data(first: i64, last: i64) -> (i64, i64, BatchKind) {
        (first, last, BatchKind::Data)
    }

    fn later() -> Instant {
        Instant::now() + Duration::from_secs(30)
    }

    #[test]
    fn two_members_never_hold_the_same_record() {
        let mut p = SharePartition::new(0, 0, 0);
        let (a, b) = (member("a"), member("b"));
        let got_a = p.acquire(&a, &[data(0, 9)], 4, false, LIMITS, later());
        assert_eq!(
            got_a,
            vec![Acquired {
                first_offset: 0,
                last_offset: 3,
                delivery_count: 1
            }]
        );
        assert_eq!(p.next_fetch_offset(LIMITS), Some(4));
        // The next read starts at 4; the batch holding 0..=9 is read again and only 4.. is new.
        let got_b = p.acquire(&b, &[data(0, 9)], 100, false, LIMITS, later());
        assert_eq!(got_b[0].first_offset, 4);
        assert_eq!(got_b[0].last_offset, 9);
        assert_eq!(p.acquired_count(), 10);
        assert_eq!(
            p.acknowledge("b", 0, 0, &[ACK_ACCEPT], LIMITS, None),
            Err(AckError::InvalidRecordState)
        );
    }

    #[test]
    fn accepted_records_move_the_start_offset_and_released_ones_come_back() {
        let mut p = SharePartition::new(0, 0, 0);
        let a = member("a");
        p.acquire(&a, &[data(0, 4)], 100, false, LIMITS, later());
        p.acknowledge("a", 0, 4, &[1, 1, 2, 3, 1], LIMITS, None)
            .unwrap();
        assert_eq!(p.start_offset(), 2);
        assert_eq!(p.state_of(2), Some((RecordState::Available, 1)));
        assert_eq!(p.state_of(3), Some((RecordState::Archived, 1)));
        let again = p.acquire(&a, &[data(0, 4)], 100, false, LIMITS, later());
        assert_eq!(
            again,
            vec![Acquired {
                first_offset: 2,
                last_offset: 2,
                delivery_count: 2
            }]
        );
        p.acknowledge("a", 2, 2, &[ACK_ACCEPT], LIMITS, None)
            .unwrap();
        assert_eq!(p.start_offset(), 5);
        assert_eq!(p.in_flight(), 0);
    }

    #[test]
    fn rejected_records_and_those_archived_at_the_limit_are_dead_letters() {
        let dead = |first, last, delivery_count, rejected| DeadLetter {
            first_offset: first,
            last_offset: last,
            delivery_count,
            rejected,
        };
        let mut p = SharePartition::new(0, 0, 0);
        let a = member("a");
        p.acquire(&a, &[data(0, 5)], 100, false, LIMITS, later());
        // Accepted, released below the limit and gaps are not dead letters.
        p.acknowledge("a", 0, 5, &[1, 3, 3, 2, 0, 3], LIMITS, None)
            .unwrap();
        assert_eq!(
            p.take_dead_letters(),
            vec![dead(1, 2, 1, true), dead(5, 5, 1, true)]
        );
        assert!(p.take_dead_letters().is_empty(), "taken once");
        // Offset 3 released twice more reaches the limit; a lock expiry archives 6 at it.
        for _ in 0..2 {
            p.acquire(&a, &[data(3, 3)], 100, false, LIMITS, later());
            p.acknowledge("a", 3, 3, &[ACK_RELEASE], LIMITS, None)
                .unwrap();
        }
        assert_eq!(p.take_dead_letters(), vec![dead(3, 3, 3, false)]);
        for _ in 0..3 {
            p.acquire(&a, &[data(6, 7)], 100, false, LIMITS, later());
            assert!(p.expire_locks(Instant::now() + Duration::from_secs(60), LIMITS));
        }
        assert_eq!(p.take_dead_letters(), vec![dead(6, 7, 3, false)]);
        // A refused acknowledgement archives nothing.
        p.acquire(&a, &[data(8, 8)], 100, false, LIMITS, later());
        assert!(p
            .acknowledge("b", 8, 8, &[ACK_REJECT], LIMITS, None)
            .is_err());
        assert!(p.take_dead_letters().is_empty());
    }

    #[test]
    fn a_record_released_at_the_delivery_count_limit_is_archived() {
        let mut p = SharePartition::new(0, 0, 0);
        let a = member("a");
        for round in 1..=3 {
            let got = p.acquire(&a, &[data(0, 0)], 100, false, LIMITS, later());
            assert_eq!(got[0].delivery_count, round);
            p.acknowledge("a", 0, 0, &[ACK_RELEASE], LIMITS, None)
                .unwrap();
        }
        assert_eq!(p.start_offset(), 1, "archived after the third delivery");
        assert!(p
            .acquire(&a, &[data(0, 0)], 100, false, LIMITS, later())
            .is_empty());
    }

    #[test]
    fn expired_locks_make_records_available_to_another_member() {
        let mut p = SharePartition::new(0, 0, 0);
        let now = Instant::now();
        p.acquire(&member("a"), &[data(0, 2)], 100, false, LIMITS, now);
        assert!(p.expire_locks(now, LIMITS));
        let got = p.acquire(&member("b"), &[data(0, 2)], 100, false, LIMITS, later());
        assert_eq!(
            got,
            vec![Acquired {
                first_offset: 0,
                last_offset: 2,
                delivery_count: 2
            }]
        );
        assert_eq!(
            p.acknowledge("a", 0, 2, &[ACK_ACCEPT], LIMITS, None),
            Err(AckError::InvalidRecordState),
            "the lock is b's now"
        );
    }

    #[test]
    fn control_and_aborted_batches_are_archived_without_delivery() {
        let mut p = SharePartition::new(0, 0, 0);
        let got = p.acquire(
            &member("a"),
            &[
                data(0, 1),
                (2, 3, BatchKind::Skip),
                (4, 4, BatchKind::Skip),
                data(5, 6),
            ],
            100,
            false,
            LIMITS,
            later(),
        );
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].first_offset, got[0].last_offset), (0, 1));
        assert_eq!((got[1].first_offset, got[1].last_offset), (5, 6));
        p.acknowledge("a", 0, 1, &[ACK_ACCEPT], LIMITS, None)
            .unwrap();
        assert_eq!(p.start_offset(), 5);
    }

    #[test]
    fn the_record_locks_bound_what_is_in_flight() {
        let limits = Limits {
            delivery_count_limit: 3,
            max_record_locks: 5,
        };
        let mut p = SharePartition::new(10, 0, 0);
        let got = p.acquire(&member("a"), &[data(10, 100)], 1000, false, limits, later());
        assert_eq!(got[0].last_offset, 14);
        assert_eq!(p.next_fetch_offset(limits), None);
    }

    #[test]
    fn whole_batches_may_exceed_max_records_and_renew_keeps_the_lock() {
        let mut p = SharePartition::new(0, 0, 0);
        let a = member("a");
        let now = Instant::now();
        let got = p.acquire(&a, &[data(0, 9), data(10, 19)], 3, true, LIMITS, now);
        assert_eq!(
            (got[0].first_offset, got[0].last_offset),
            (0, 9),
            "the first batch whole"
        );
        assert_eq!(
            p.acknowledge("a", 0, 9, &[ACK_RENEW], LIMITS, None),
            Err(AckError::InvalidRequest),
            "RENEW needs a v2 request"
        );
        p.acknowledge("a", 0, 4, &[ACK_RENEW], LIMITS, Some(later()))
            .unwrap();
        assert!(p.expire_locks(now, LIMITS));
        assert_eq!(p.state_of(0), Some((RecordState::Acquired, 1)), "renewed");
        assert_eq!(p.state_of(5), Some((RecordState::Available, 1)), "expired");
        p.acknowledge("a", 0, 4, &[ACK_ACCEPT], LIMITS, None)
            .unwrap();
        assert_eq!(p.start_offset(), 5);
    }

    #[test]
    fn malformed_acknowledgements_change_nothing() {
        let mut p = SharePartition::new(0, 0, 0);
        p.acquire(&member("a"), &[data(0, 3)], 100, false, LIMITS, later());
        let before = p.snapshot(0);
        assert_eq!(
            p.acknowledge("a", 2, 1, &[1], LIMITS, None),
            Err(AckError::InvalidRequest)
        );
        assert_eq!(
            p.acknowledge("a", 0, 3, &[1, 1], LIMITS, None),
            Err(AckError::InvalidRequest)
        );
        assert_eq!(
            p.acknowledge("a", 0, 3, &[9], LIMITS, None),
            Err(AckError::InvalidRequest)
        );
        assert_eq!(
            p.acknowledge("a", 0, 9, &[1], LIMITS, None),
            Err(AckError::InvalidRecordState)
        );
        assert_eq!(
            p.acknowledge("a", i64::MIN, i64::MAX, &[1], LIMITS, None),
            Err(AckError::InvalidRecordState)
        );
        assert_eq!(p.snapshot(0), before);
    }

    #[test]
    fn a_restored_snapshot_keeps_what_was_done_and_redelivers_what_was_acquired() {
        let mut p = SharePartition::new(0, 0, 0);
        let a = member("a");
        p.acquire(&a, &[data(0, 5)], 100, false, LIMITS, later());
        p.acknowledge("a", 1, 1, &[ACK_ACCEPT], LIMITS, None)
            .unwrap();
        p.acknowledge("a", 3, 3, &[ACK_REJECT], LIMITS, None)
            .unwrap();
        let restored = SharePartition::from_snapshot(&p.snapshot(7));
        assert_eq!(restored.start_offset(), 0);
        assert_eq!(restored.end_offset(), 6);
        assert_eq!(restored.state_of(0), Some((RecordState::Available, 1)));
        assert_eq!(restored.state_of(1), Some((RecordState::Acknowledged, 1)));
        assert_eq!(restored.state_of(3), Some((RecordState::Archived, 1)));
        assert_eq!(restored.acquired_count(), 0);
    }

    #[test]
    fn a_corrupt_snapshot_cannot_make_unbounded_slots() {
        let s = Snapshot {
            snapshot_epoch: 0,
            state_epoch: 0,
            leader_epoch: 0,
            start_offset: 0,
            delivery_complete_count: -1,
            create_timestamp: 0,
            write_timestamp: 0,
            state_batches: vec![StateBatch {
                first_offset: 0,
                last_offset: i64::MAX,
                delivery_state: 0,
                delivery_count: 1,
            }],
        };
        let p = SharePartition::from_snapshot(&s);
        assert_eq!(p.in_flight(), MAX_SLOTS);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Acquire(u8, i64, i64, usize),
        Ack(u8, i64, i64, i8),
        Expire,
        Release(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..3, 0i64..40, 0i64..10, 1usize..20).prop_map(|(m, f, n, max)| Op::Acquire(
                m,
                f,
                f + n,
                max
            )),
            (0u8..3, 0i64..40, 0i64..5, 0i8..4).prop_map(|(m, f, n, t)| Op::Ack(m, f, f + n, t)),
            Just(Op::Expire),
            (0u8..3).prop_map(Op::Release),
        ]
    }

    proptest! {
        /// Whatever members do: no record is held by two members, an accepted record is never
        /// acquired again, delivery counts never pass the limit, and a snapshot round trip
        /// keeps every done record done.
        #[test]
        fn records_are_accepted_at_most_once(ops in proptest::collection::vec(op(), 1..80)) {
            let names = [member("m0"), member("m1"), member("m2")];
            let mut p = SharePartition::new(0, 0, 0);
            let mut accepted = std::collections::BTreeSet::new();
            let now = Instant::now();
            for op in ops {
                match op {
                    Op::Acquire(m, f, l, max) => {
                        for a in p.acquire(&names[m as usize], &[data(f, l)], max, false, LIMITS, now) {
                            prop_assert!(a.delivery_count <= LIMITS.delivery_count_limit);
                            for o in a.first_offset..=a.last_offset {
                                prop_assert!(!accepted.contains(&o), "offset {o} accepted, then acquired again");
                            }
                        }
                    }
                    Op::Ack(m, f, l, t) => {
                        let held: Vec<_> = (f..=l).map(|o| p.state_of(o)).collect();
                        if p.acknowledge(&names[m as usize], f, l, &[t], LIMITS, None).is_ok() {
                            prop_assert!(held.iter().all(|s| matches!(s, Some((RecordState::Acquired, _)))));
                            if t == ACK_ACCEPT {
                                for o in f..=l {
                                    prop_assert!(accepted.insert(o), "offset {o} accepted twice");
                                }
                            }
                        }
                    }
                    Op::Expire => { p.expire_locks(now, LIMITS); }
                    Op::Release(m) => { p.release_member(&names[m as usize], LIMITS); }
                }
                prop_assert_eq!(p.acquired_count(), (p.start_offset()..p.end_offset()).filter(|&o| matches!(p.state_of(o), Some((RecordState::Acquired, _)))).count());
            }
            let restored = SharePartition::from_snapshot(&p.snapshot(0));
            for &o in &accepted {
                prop_assert!(o < restored.start_offset() || restored.state_of(o) == Some((RecordState::Acknowledged, p.state_of(o).map(|s| s.1).unwrap_or(0))));
            }
        }
    }
}
