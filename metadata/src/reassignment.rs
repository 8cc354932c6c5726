//! Partition reassignment as Kafka's KRaft controller runs it (KIP-455): the rules of
//! `PartitionReassignmentReplicas`, `PartitionReassignmentRevert` and the reassignment part
//! of `PartitionChangeBuilder`, as pure functions over a [`PartitionState`].
//!
//! A reassignment goes through three stages:
//! 1. `AlterPartitionReassignment` sets the target: the replicas become the target followed by
//!    the current replicas not in it (sorted), `adding_replicas` = target − current and
//!    `removing_replicas` = current − target (both sorted). The ISR and leader stay; the new
//!    replicas start following the leader.
//! 2. The leader's `AlterPartition`s add each new replica to the ISR once it has caught up.
//! 3. The change that makes the ISR (without the removing replicas) cover every target
//!    replica completes the reassignment in the same apply: replicas = target, ISR = ISR
//!    without the removing replicas, `adding`/`removing` cleared; a leader being removed
//!    hands over to the first target replica in the ISR that may lead. A reassignment the
//!    ISR already covers (a reordering, a pure removal) completes in stage 1.
//!
//! Epochs: every change bumps the partition epoch; the leader epoch grows when the leader
//! changes or a replica leaves the replica set (Kafka's
//! `triggerLeaderEpochBumpForReplicaReassignmentIfNeeded`), so a removed leader's in-flight
//! ISR change is fenced.

use std::collections::BTreeSet;

use crate::ids::{BrokerId, LeaderEpoch};
use crate::state::PartitionState;

/// The assignment a new reassignment target gives a partition (Kafka's
/// `PartitionReassignmentReplicas(current, target)`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReassignmentReplicas {
    /// The target followed by the replicas being removed.
    pub replicas: Vec<BrokerId>,
    pub adding: Vec<BrokerId>,
    pub removing: Vec<BrokerId>,
}

impl ReassignmentReplicas {
    pub fn new(current: &[BrokerId], target: &[BrokerId]) -> Self {
        let removing: Vec<BrokerId> = sorted_difference(current, target);
        let adding: Vec<BrokerId> = sorted_difference(target, current);
        let mut replicas = target.to_vec();
        replicas.extend(&removing);
        ReassignmentReplicas {
            replicas,
            adding,
            removing,
        }
    }
}

/// `a − b`, sorted and without duplicates.
fn sorted_difference(a: &[BrokerId], b: &[BrokerId]) -> Vec<BrokerId> {
    let a: BTreeSet<BrokerId> = a.iter().copied().collect();
    a.into_iter().filter(|id| !b.contains(id)).collect()
}

/// The replicas of a partition before its ongoing reassignment (`replicas − adding`).
pub fn original_replicas(p: &PartitionState) -> Vec<BrokerId> {
    p.replicas
        .iter()
        .copied()
        .filter(|id| !p.adding_replicas.contains(id))
        .collect()
}

/// Replicas and ISR after cancelling an ongoing reassignment (Kafka's
/// `PartitionReassignmentRevert`): the adding replicas leave both. `unclean` when the ISR held
/// only adding replicas: it becomes the first original replica, which needs
/// `unclean.leader.election.enable`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Revert {
    pub replicas: Vec<BrokerId>,
    pub isr: Vec<BrokerId>,
    pub unclean: bool,
}

/// `None` when no original replica remains (a partition always starts with replicas, so this
/// is a corrupt state rather than a user error).
pub fn revert(p: &PartitionState) -> Option<Revert> {
    let replicas = original_replicas(p);
    let mut isr: Vec<BrokerId> = p
        .isr
        .iter()
        .copied()
        .filter(|id| !p.adding_replicas.contains(id))
        .collect();
    let first = *replicas.first()?;
    let unclean = isr.is_empty();
    if unclean {
        isr.push(first);
    }
    Some(Revert {
        replicas,
        isr,
        unclean,
    })
}

/// One partition change before reassignment completion, leader election and epoch bumps
/// (the targets of Kafka's `PartitionChangeBuilder`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionChange {
    pub replicas: Vec<BrokerId>,
    pub isr: Vec<BrokerId>,
    pub adding: Vec<BrokerId>,
    pub removing: Vec<BrokerId>,
    pub leader: Option<BrokerId>,
    pub leader_epoch: LeaderEpoch,
}

impl PartitionChange {
    /// No change yet: the partition as it is.
    pub fn of(p: &PartitionState) -> Self {
        PartitionChange {
            replicas: p.replicas.clone(),
            isr: p.isr.clone(),
            adding: p.adding_replicas.clone(),
            removing: p.removing_replicas.clone(),
            leader: p.leader,
            leader_epoch: p.leader_epoch,
        }
    }

    /// Kafka's `maybeCompleteReassignment`: when the ISR without the removing replicas covers
    /// every remaining replica, the reassignment is done. Returns whether it completed.
    fn complete_reassignment(&mut self) -> bool {
        if self.adding.is_empty() && self.removing.is_empty() {
            return false;
        }
        let keep = |ids: &[BrokerId]| -> Vec<BrokerId> {
            ids.iter()
                .copied()
                .filter(|id| !self.removing.contains(id))
                .collect()
        };
        let isr = keep(&self.isr);
        let replicas = keep(&self.replicas);
        if isr.is_empty() || replicas.is_empty() || !replicas.iter().all(|r| isr.contains(r)) {
            return false;
        }
        self.isr = isr;
        self.replicas = replicas;
        self.adding.clear();
        self.removing.clear();
        true
    }

    /// Completes a reassignment the change allows, moves leadership off a leader that left the
    /// ISR (Kafka's online election: the first replica in the ISR that `may_lead`), bumps the
    /// leader epoch when the leader changed or a replica was removed, and returns the state
    /// `current` becomes (its partition epoch left to the caller). `None` when nothing changes.
    pub fn build(
        mut self,
        current: &PartitionState,
        may_lead: impl Fn(BrokerId) -> bool,
    ) -> Option<PartitionState> {
        if self.complete_reassignment() {
            let valid = |id: &BrokerId| self.isr.contains(id) && may_lead(*id);
            if !self.leader.as_ref().is_some_and(valid) {
                self.leader = self.replicas.iter().copied().find(valid);
            }
        }
        let replica_removed = current.replicas.iter().any(|r| !self.replicas.contains(r));
        if self.leader != current.leader || replica_removed {
            let bumped = LeaderEpoch(current.leader_epoch.0.saturating_add(1));
            self.leader_epoch = self.leader_epoch.max(bumped);
        }
        let next = PartitionState {
            replicas: self.replicas,
            isr: self.isr,
            leader: self.leader,
            leader_epoch: self.leader_epoch,
            partition_epoch: current.partition_epoch,
            adding_replicas: self.adding,
            removing_replicas: self.removing,
        };
        (next != *current).then_some(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::PartitionEpoch;

    fn ids(v: &[i32]) -> Vec<BrokerId> {
        v.iter().map(|id| BrokerId(*id)).collect()
    }

    fn partition(replicas: &[i32], isr: &[i32], leader: i32) -> PartitionState {
        PartitionState {
            replicas: ids(replicas),
            isr: ids(isr),
            leader: Some(BrokerId(leader)),
            leader_epoch: LeaderEpoch(3),
            partition_epoch: PartitionEpoch(7),
            adding_replicas: vec![],
            removing_replicas: vec![],
        }
    }

    #[test]
    fn a_target_puts_the_removed_replicas_after_it_sorted() {
        let r = ReassignmentReplicas::new(&ids(&[3, 1, 2]), &ids(&[5, 4, 2]));
        assert_eq!(r.replicas, ids(&[5, 4, 2, 1, 3]));
        assert_eq!(r.adding, ids(&[4, 5]));
        assert_eq!(r.removing, ids(&[1, 3]));
        let same = ReassignmentReplicas::new(&ids(&[1, 2]), &ids(&[2, 1]));
        assert_eq!(same.replicas, ids(&[2, 1]));
        assert!(same.adding.is_empty() && same.removing.is_empty());
    }

    #[test]
    fn completion_waits_for_every_target_replica_in_the_isr() {
        let current = partition(&[2, 3, 1], &[1], 1);
        let mut change = PartitionChange::of(&current);
        change.adding = ids(&[2, 3]);
        change.removing = ids(&[1]);
        change.isr = ids(&[1, 2]);
        let half = change.clone().build(&current, |_| true).unwrap();
        assert_eq!(half.replicas, ids(&[2, 3, 1]));
        assert_eq!(half.adding_replicas, ids(&[2, 3]));
        assert_eq!(half.leader, Some(BrokerId(1)));
        assert_eq!(
            half.leader_epoch,
            LeaderEpoch(3),
            "no removal yet: same epoch"
        );

        change.isr = ids(&[1, 2, 3]);
        let done = change.build(&current, |_| true).unwrap();
        assert_eq!(done.replicas, ids(&[2, 3]));
        assert_eq!(done.isr, ids(&[2, 3]));
        assert!(done.adding_replicas.is_empty() && done.removing_replicas.is_empty());
        assert_eq!(
            done.leader,
            Some(BrokerId(2)),
            "the removed leader hands over"
        );
        assert_eq!(done.leader_epoch, LeaderEpoch(4));
    }

    #[test]
    fn the_new_leader_is_the_first_target_replica_that_may_lead() {
        let mut current = partition(&[2, 3, 1], &[1, 2, 3], 1);
        current.adding_replicas = ids(&[2, 3]);
        current.removing_replicas = ids(&[1]);
        let done = PartitionChange::of(&current)
            .build(&current, |id| id != BrokerId(2))
            .unwrap();
        assert_eq!(done.leader, Some(BrokerId(3)));
        // A leader that stays keeps leading, but the removal still bumps the epoch.
        let mut kept = partition(&[1, 2, 3], &[1, 2, 3], 1);
        kept.replicas = ids(&[1, 2, 3]);
        kept.removing_replicas = ids(&[3]);
        let done = PartitionChange::of(&kept).build(&kept, |_| true).unwrap();
        assert_eq!(
            (done.leader, done.leader_epoch, done.replicas),
            (Some(BrokerId(1)), LeaderEpoch(4), ids(&[1, 2]))
        );
    }

    #[test]
    fn no_completion_without_a_remaining_isr_member() {
        let mut current = partition(&[2, 1], &[1], 1);
        current.adding_replicas = ids(&[2]);
        current.removing_replicas = ids(&[1]);
        assert_eq!(
            PartitionChange::of(&current).build(&current, |_| true),
            None
        );
    }

    #[test]
    fn revert_drops_the_adding_replicas() {
        let mut p = partition(&[4, 5, 1, 2], &[1, 4], 1);
        p.adding_replicas = ids(&[4, 5]);
        p.removing_replicas = ids(&[1, 2]);
        assert_eq!(original_replicas(&p), ids(&[1, 2]));
        assert_eq!(
            revert(&p),
            Some(Revert {
                replicas: ids(&[1, 2]),
                isr: ids(&[1]),
                unclean: false
            })
        );
        p.isr = ids(&[4]);
        assert_eq!(
            revert(&p).map(|r| (r.isr, r.unclean)),
            Some((ids(&[1]), true))
        );
    }
}
