//! The leader's view of a partition's replica set: each follower's fetch progress, the ISR
//! (committed and in flight), and the rules Kafka's `Partition` applies to them: the high
//! watermark is the smallest log end offset of the maximal ISR (KIP-497), a follower joins the
//! ISR once it reaches the high watermark within the current leader epoch, and leaves it after
//! `replica.lag.time.max.ms` without catching up. Pure state: no I/O, no locks, no clock (the
//! caller passes `now_ms`).

use std::collections::{BTreeMap, BTreeSet};

use super::{LeaderEpoch, Offset};

/// Kafka's `UnifiedLog.UNKNOWN_OFFSET`.
pub const UNKNOWN_OFFSET: Offset = Offset(-1);

/// What the leader knows of one follower (Kafka's `ReplicaState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerState {
    pub log_start_offset: Offset,
    pub log_end_offset: Offset,
    /// The leader's log end offset when this follower last fetched.
    pub last_fetch_leader_log_end_offset: Offset,
    pub last_fetch_time_ms: i64,
    /// The last time the follower had everything the leader had at one of its fetches.
    pub last_caught_up_time_ms: i64,
}

impl FollowerState {
    fn unknown(last_caught_up_time_ms: i64) -> FollowerState {
        FollowerState {
            log_start_offset: UNKNOWN_OFFSET,
            log_end_offset: UNKNOWN_OFFSET,
            last_fetch_leader_log_end_offset: UNKNOWN_OFFSET,
            last_fetch_time_ms: 0,
            last_caught_up_time_ms,
        }
    }

    /// Kafka's `Replica.updateFetchStateOrThrow`: a fetch at `fetch_offset` means the follower
    /// holds everything below it. It was caught up at this fetch if it reached the leader's
    /// end as of the read, or at its previous fetch if it now has what the leader had then.
    pub fn record_fetch(
        &mut self,
        fetch_offset: Offset,
        log_start_offset: Offset,
        now_ms: i64,
        leader_log_end_offset: Offset,
    ) {
        if fetch_offset >= leader_log_end_offset {
            self.last_caught_up_time_ms = self.last_caught_up_time_ms.max(now_ms);
        } else if fetch_offset >= self.last_fetch_leader_log_end_offset {
            self.last_caught_up_time_ms = self.last_caught_up_time_ms.max(self.last_fetch_time_ms);
        }
        self.log_start_offset = log_start_offset;
        self.log_end_offset = fetch_offset;
        self.last_fetch_leader_log_end_offset =
            leader_log_end_offset.max(self.last_fetch_leader_log_end_offset);
        self.last_fetch_time_ms = now_ms;
    }

    /// Kafka's `ReplicaState.isCaughtUp`.
    pub fn is_caught_up(
        &self,
        leader_log_end_offset: Offset,
        now_ms: i64,
        max_lag_ms: i64,
    ) -> bool {
        leader_log_end_offset == self.log_end_offset
            || now_ms - self.last_caught_up_time_ms <= max_lag_ms
    }
}

/// The assignment and ISR of a partition as last applied, plus the leader-side follower
/// states (empty on a follower).
#[derive(Debug, Clone)]
pub struct ReplicaSet {
    pub local_id: i32,
    pub leader: Option<i32>,
    pub leader_epoch: LeaderEpoch,
    pub partition_epoch: i32,
    pub replicas: Vec<i32>,
    /// The committed ISR.
    pub isr: Vec<i32>,
    /// An AlterPartition in flight: the ISR proposed to the controller.
    pub pending_isr: Option<Vec<i32>>,
    /// Where this broker's leadership epoch starts (the log end offset when it became leader).
    pub leader_epoch_start_offset: Option<Offset>,
    pub followers: BTreeMap<i32, FollowerState>,
    pub replica_lag_time_max_ms: i64,
    /// Replicas whose broker is fenced or not registered (Kafka's `isReplicaIsrEligible` is
    /// false): they may not join the ISR and do not hold the high watermark back while they
    /// still count as caught up.
    pub ineligible: BTreeSet<i32>,
}

impl ReplicaSet {
    /// A single broker leading its partition alone (no state applied yet).
    pub fn sole_leader(
        local_id: i32,
        leader_epoch: LeaderEpoch,
        replica_lag_time_max_ms: i64,
    ) -> Self {
        ReplicaSet {
            local_id,
            leader: Some(local_id),
            leader_epoch,
            partition_epoch: 0,
            replicas: vec![local_id],
            isr: vec![local_id],
            pending_isr: None,
            leader_epoch_start_offset: Some(Offset(0)),
            followers: BTreeMap::new(),
            replica_lag_time_max_ms,
            ineligible: BTreeSet::new(),
        }
    }

    pub fn is_leader(&self) -> bool {
        self.leader == Some(self.local_id)
    }

    /// The committed ISR together with replicas being added (KIP-497's maximal ISR): the most
    /// restrictive set, used for the high watermark and acks=all.
    pub fn maximal_isr(&self) -> Vec<i32> {
        let mut v = self.isr.clone();
        if let Some(p) = &self.pending_isr {
            for id in p {
                if !v.contains(id) {
                    v.push(*id);
                }
            }
        }
        v
    }

    /// Kafka's `effectiveMinIsr`: min.insync.replicas capped by the replication factor.
    pub fn effective_min_isr(&self, min_insync_replicas: i32) -> usize {
        (min_insync_replicas.max(1) as usize).min(self.replicas.len().max(1))
    }

    pub fn is_under_min_isr(&self, min_insync_replicas: i32) -> bool {
        self.isr.len() < self.effective_min_isr(min_insync_replicas)
    }

    /// Kafka's `maybeIncrementLeaderHW` (the candidate; the caller moves the log's high
    /// watermark only forward): the smallest log end offset among the leader, the maximal ISR
    /// and the followers caught up enough to join it. `None` when under min ISR.
    pub fn high_watermark(
        &self,
        leader_log_end_offset: Offset,
        now_ms: i64,
        min_insync_replicas: i32,
    ) -> Option<Offset> {
        if self.is_under_min_isr(min_insync_replicas) {
            return None;
        }
        let maximal = self.maximal_isr();
        let mut hw = leader_log_end_offset;
        for (id, f) in &self.followers {
            let waits_to_join = !self.ineligible.contains(id)
                && f.is_caught_up(leader_log_end_offset, now_ms, self.replica_lag_time_max_ms);
            if f.log_end_offset < hw && (maximal.contains(id) || waits_to_join) {
                hw = f.log_end_offset;
            }
        }
        Some(hw)
    }

    /// Kafka's `maybeExpandIsr`: the ISR to propose when `follower` may join it (it reached the
    /// high watermark and the current leader epoch), unless a change is in flight.
    pub fn expansion(&self, follower: i32, high_watermark: Offset) -> Option<Vec<i32>> {
        if !self.is_leader()
            || self.pending_isr.is_some()
            || self.isr.contains(&follower)
            || self.ineligible.contains(&follower)
        {
            return None;
        }
        let f = self.followers.get(&follower)?;
        let in_epoch = self
            .leader_epoch_start_offset
            .is_some_and(|start| f.log_end_offset >= start);
        if f.log_end_offset >= high_watermark && in_epoch {
            let mut isr = self.isr.clone();
            isr.push(follower);
            Some(isr)
        } else {
            None
        }
    }

    /// Kafka's `maybeShrinkIsr`: the ISR without the followers that have not caught up for
    /// `replica.lag.time.max.ms`, unless a change is in flight or none lags.
    pub fn shrink(&self, leader_log_end_offset: Offset, now_ms: i64) -> Option<Vec<i32>> {
        if !self.is_leader() || self.pending_isr.is_some() {
            return None;
        }
        let out_of_sync: Vec<i32> = self
            .isr
            .iter()
            .copied()
            .filter(|id| *id != self.local_id)
            .filter(|id| {
                self.followers.get(id).is_none_or(|f| {
                    !f.is_caught_up(leader_log_end_offset, now_ms, self.replica_lag_time_max_ms)
                })
            })
            .collect();
        if out_of_sync.is_empty() {
            return None;
        }
        Some(
            self.isr
                .iter()
                .copied()
                .filter(|id| !out_of_sync.contains(id))
                .collect(),
        )
    }

    /// Resets follower states when this broker starts a leader epoch (Kafka's
    /// `resetReplicaState`): ISR members count as caught up now, others not at all.
    pub fn start_leader_epoch(&mut self, was_leader: bool, log_end_offset: Offset, now_ms: i64) {
        let followers: Vec<i32> = self
            .replicas
            .iter()
            .copied()
            .filter(|id| *id != self.local_id)
            .collect();
        let previous = std::mem::take(&mut self.followers);
        for id in followers {
            let in_sync = self.isr.contains(&id);
            let caught_up = if in_sync { now_ms } else { 0 };
            let state = match previous.get(&id) {
                Some(p) if was_leader => FollowerState {
                    last_fetch_leader_log_end_offset: log_end_offset,
                    last_fetch_time_ms: if in_sync { now_ms } else { 0 },
                    last_caught_up_time_ms: caught_up,
                    ..*p
                },
                _ => FollowerState::unknown(caught_up),
            };
            self.followers.insert(id, state);
        }
        self.leader_epoch_start_offset = Some(log_end_offset);
    }

    /// Keeps follower states in step with a new assignment under the same leader epoch.
    pub fn sync_followers(&mut self) {
        let local = self.local_id;
        let replicas = self.replicas.clone();
        self.followers
            .retain(|id, _| replicas.contains(id) && *id != local);
        for id in replicas {
            if id != local {
                self.followers
                    .entry(id)
                    .or_insert_with(|| FollowerState::unknown(0));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leader_of_three() -> ReplicaSet {
        let mut s = ReplicaSet::sole_leader(1, LeaderEpoch(0), 1000);
        s.replicas = vec![1, 2, 3];
        s.isr = vec![1, 2, 3];
        s.leader_epoch = LeaderEpoch(1);
        s.start_leader_epoch(false, Offset(10), 5_000);
        s
    }

    #[test]
    fn high_watermark_is_the_smallest_isr_log_end_offset() {
        let mut s = leader_of_three();
        // Followers have not fetched: their log end offsets are unknown.
        assert_eq!(s.high_watermark(Offset(20), 5_000, 1), Some(UNKNOWN_OFFSET));
        s.followers
            .get_mut(&2)
            .unwrap()
            .record_fetch(Offset(15), Offset(0), 5_100, Offset(20));
        s.followers
            .get_mut(&3)
            .unwrap()
            .record_fetch(Offset(18), Offset(0), 5_100, Offset(20));
        assert_eq!(s.high_watermark(Offset(20), 5_100, 1), Some(Offset(15)));
        s.followers
            .get_mut(&2)
            .unwrap()
            .record_fetch(Offset(20), Offset(0), 5_200, Offset(20));
        assert_eq!(s.high_watermark(Offset(20), 5_200, 1), Some(Offset(18)));
    }

    #[test]
    fn a_fenced_follower_out_of_the_isr_does_not_hold_the_high_watermark() {
        let mut s = leader_of_three();
        s.followers
            .get_mut(&2)
            .unwrap()
            .record_fetch(Offset(20), Offset(0), 5_100, Offset(20));
        s.followers
            .get_mut(&3)
            .unwrap()
            .record_fetch(Offset(20), Offset(0), 5_100, Offset(20));
        // Broker 3 stops and the controller removes it from the ISR: while it still counts as
        // caught up (within the lag time) it would hold the high watermark at 20.
        s.isr = vec![1, 2];
        s.followers
            .get_mut(&2)
            .unwrap()
            .record_fetch(Offset(30), Offset(0), 5_200, Offset(30));
        assert_eq!(s.high_watermark(Offset(30), 5_300, 1), Some(Offset(20)));
        s.ineligible = [3].into();
        assert_eq!(s.high_watermark(Offset(30), 5_300, 1), Some(Offset(30)));
        assert_eq!(
            s.expansion(3, Offset(30)),
            None,
            "a fenced broker may not rejoin"
        );
    }

    #[test]
    fn a_lagging_follower_leaves_the_isr_and_rejoins_at_the_high_watermark() {
        let mut s = leader_of_three();
        s.followers
            .get_mut(&2)
            .unwrap()
            .record_fetch(Offset(10), Offset(0), 5_100, Offset(10));
        s.followers
            .get_mut(&3)
            .unwrap()
            .record_fetch(Offset(10), Offset(0), 5_100, Offset(10));
        assert_eq!(s.shrink(Offset(10), 5_500), None);
        // Follower 3 stops fetching while the leader appends.
        s.followers
            .get_mut(&2)
            .unwrap()
            .record_fetch(Offset(30), Offset(0), 6_000, Offset(30));
        assert_eq!(s.shrink(Offset(30), 6_200), Some(vec![1, 2]));
        s.isr = vec![1, 2];
        // Out of the ISR and not caught up: no longer holds the high watermark back.
        assert_eq!(s.high_watermark(Offset(30), 6_200, 1), Some(Offset(30)));
        // Under min ISR the high watermark stays.
        assert_eq!(s.high_watermark(Offset(30), 6_200, 3), None);
        s.followers
            .get_mut(&3)
            .unwrap()
            .record_fetch(Offset(25), Offset(0), 6_300, Offset(30));
        assert_eq!(s.expansion(3, Offset(30)), None);
        s.followers
            .get_mut(&3)
            .unwrap()
            .record_fetch(Offset(30), Offset(0), 6_400, Offset(30));
        assert_eq!(s.expansion(3, Offset(30)), Some(vec![1, 2, 3]));
        s.pending_isr = Some(vec![1, 2, 3]);
        assert_eq!(s.maximal_isr(), vec![1, 2, 3]);
        assert_eq!(
            s.expansion(3, Offset(30)),
            None,
            "one change in flight at a time"
        );
    }

    #[test]
    fn a_follower_must_reach_the_current_leader_epoch_to_join() {
        let mut s = leader_of_three();
        s.isr = vec![1];
        s.start_leader_epoch(true, Offset(50), 1_000);
        s.followers
            .get_mut(&2)
            .unwrap()
            .record_fetch(Offset(40), Offset(0), 1_100, Offset(50));
        assert_eq!(
            s.expansion(2, Offset(40)),
            None,
            "below the epoch start offset 50"
        );
        s.followers
            .get_mut(&2)
            .unwrap()
            .record_fetch(Offset(50), Offset(0), 1_200, Offset(50));
        assert_eq!(s.expansion(2, Offset(50)), Some(vec![1, 2]));
    }

    proptest::proptest! {
        /// Whatever the followers fetch and however the ISR changes, the high watermark never
        /// passes the log end offset of the leader or of a maximal-ISR member.
        #[test]
        fn the_high_watermark_never_passes_an_in_sync_replica(
            steps in proptest::collection::vec((2i32..=3, 0i64..50, 0i64..3_000, 0u8..4), 1..60)
        ) {
            let mut s = leader_of_three();
            let mut leader_end = 10i64;
            let mut now = 5_000i64;
            for (follower, advance, elapsed, action) in steps {
                now += elapsed;
                leader_end += advance;
                match action {
                    0 => {
                        let f = s.followers.get_mut(&follower).unwrap();
                        let offset = (f.log_end_offset.0.max(0) + advance).min(leader_end);
                        f.record_fetch(Offset(offset), Offset(0), now, Offset(leader_end));
                    }
                    1 => if let Some(isr) = s.shrink(Offset(leader_end), now) { s.isr = isr },
                    2 => if let Some(isr) = s.expansion(follower, Offset(leader_end)) {
                        s.pending_isr = Some(isr);
                    },
                    _ => if let Some(p) = s.pending_isr.take() { s.isr = p },
                }
                proptest::prop_assert!(s.isr.contains(&1), "the leader stays in its ISR");
                if let Some(hw) = s.high_watermark(Offset(leader_end), now, 1) {
                    proptest::prop_assert!(hw <= Offset(leader_end));
                    for id in s.maximal_isr() {
                        if let Some(f) = s.followers.get(&id) {
                            proptest::prop_assert!(hw <= f.log_end_offset, "hw {} > replica {} at {}", hw, id, f.log_end_offset);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn effective_min_isr_is_capped_by_the_replication_factor() {
        let s = ReplicaSet::sole_leader(1, LeaderEpoch(0), 1000);
        assert_eq!(s.effective_min_isr(2), 1);
        assert!(!s.is_under_min_isr(2));
        assert_eq!(leader_of_three().effective_min_isr(2), 2);
    }
}
