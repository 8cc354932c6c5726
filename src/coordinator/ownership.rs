//! Which partitions of a coordinator topic (`__consumer_offsets`, `__transaction_state`) this
//! broker serves, following their leadership as Kafka's `GroupCoordinator.onElection` /
//! `onResignation` and `TransactionStateManager.loadTransactionsForTxnTopicPartition` do.
//!
//! Without a metadata quorum, a partition the control plane has never assigned is served as on
//! a single node: its state was loaded at start-up with the rest of the topic. In cluster mode
//! ([`Ownership::new`] with `cluster`) nothing is served before the quorum assigns it: the
//! quorum owns the topic, so a partition is loaded when this broker is elected its leader.
//! Once assigned, a partition this broker
//! leads is *loading* (requests get COORDINATOR_LOAD_IN_PROGRESS) until the coordinator's
//! timer has replayed it, then *active* at the partition's leader epoch (the coordinator
//! epoch); a partition led elsewhere, or by nobody, is *not owned* (NOT_COORDINATOR).
//!
//! Concurrency: one std mutex, never held across I/O. A coordinator takes it before its own
//! state lock when it loads or unloads a partition, so a load finishing after a resignation
//! is discarded.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use kafka_protocol::ResponseError;

/// A coordinator partition's status on this broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionStatus {
    /// Another broker leads it, or nobody does.
    NotOwned,
    /// Being replayed for this coordinator epoch.
    Loading { epoch: i32 },
    /// Served at this coordinator epoch.
    Active { epoch: i32 },
}

/// What the coordinator must do after a leadership change of one of its partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// Nothing changed (the same epoch again, or still not owned).
    None,
    /// Drop the partition's state, then replay it at `epoch`.
    Load { epoch: i32 },
    /// Drop the partition's state: another broker serves it now.
    Unload,
}

#[derive(Debug, Default)]
pub struct Ownership {
    /// Partitions the control plane has assigned; absent ones are served as on a single node
    /// unless `cluster`.
    statuses: Mutex<HashMap<i32, PartitionStatus>>,
    /// Cluster mode: an unassigned partition is not owned, and an election always loads.
    cluster: bool,
}

impl Ownership {
    /// `cluster`: the metadata quorum assigns every partition (see the module docs).
    pub fn new(cluster: bool) -> Self {
        Ownership {
            statuses: Mutex::default(),
            cluster,
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, HashMap<i32, PartitionStatus>> {
        self.statuses.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The status of a partition the control plane has assigned.
    pub fn status(&self, partition: i32) -> Option<PartitionStatus> {
        self.lock().get(&partition).copied()
    }

    /// Whether requests for keys on `partition` may be served, with Kafka's error if not.
    pub fn check(&self, partition: i32) -> Result<(), ResponseError> {
        match self.status(partition) {
            None if self.cluster => Err(ResponseError::NotCoordinator),
            None | Some(PartitionStatus::Active { .. }) => Ok(()),
            Some(PartitionStatus::Loading { .. }) => Err(ResponseError::CoordinatorLoadInProgress),
            Some(PartitionStatus::NotOwned) => Err(ResponseError::NotCoordinator),
        }
    }

    /// Whether the partition's state is in memory (served, or loaded at start-up).
    pub fn is_served(&self, partition: i32) -> bool {
        self.check(partition).is_ok()
    }

    /// This broker became the partition's leader at `epoch`. Without a quorum, a partition
    /// loaded at start-up and never assigned elsewhere is already in memory and is served at
    /// once; otherwise `unload` drops its stale state (under the lock) and the partition waits
    /// for its load.
    pub fn elect(&self, partition: i32, epoch: i32, unload: impl FnOnce()) -> Transition {
        let mut statuses = self.lock();
        let (next, transition) = match statuses.get(&partition) {
            None if !self.cluster => (PartitionStatus::Active { epoch }, Transition::None),
            Some(PartitionStatus::Active { epoch: e }) if *e == epoch => {
                (PartitionStatus::Active { epoch }, Transition::None)
            }
            Some(PartitionStatus::Loading { epoch: e }) if *e == epoch => {
                (PartitionStatus::Loading { epoch }, Transition::None)
            }
            _ => (
                PartitionStatus::Loading { epoch },
                Transition::Load { epoch },
            ),
        };
        if transition != Transition::None {
            unload();
        }
        statuses.insert(partition, next);
        transition
    }

    /// This broker no longer leads the partition: `unload` drops its state (under the lock).
    pub fn resign(&self, partition: i32, unload: impl FnOnce()) -> Transition {
        let mut statuses = self.lock();
        match statuses.insert(partition, PartitionStatus::NotOwned) {
            Some(PartitionStatus::NotOwned) => Transition::None,
            _ => {
                unload();
                Transition::Unload
            }
        }
    }

    /// Installs a finished load (under the lock) and serves the partition, unless its
    /// leadership changed while it loaded. Returns whether it was installed.
    pub fn complete_load(&self, partition: i32, epoch: i32, install: impl FnOnce()) -> bool {
        let mut statuses = self.lock();
        if statuses.get(&partition) != Some(&PartitionStatus::Loading { epoch }) {
            return false;
        }
        install();
        statuses.insert(partition, PartitionStatus::Active { epoch });
        true
    }

    /// Whether a partition waits for its load.
    pub fn any_loading(&self) -> bool {
        self.lock()
            .values()
            .any(|s| matches!(s, PartitionStatus::Loading { .. }))
    }

    /// Partitions waiting for their load, with the epoch each is loaded for.
    pub fn loading(&self) -> Vec<(i32, i32)> {
        let mut out: Vec<(i32, i32)> = self
            .lock()
            .iter()
            .filter_map(|(p, s)| match s {
                PartitionStatus::Loading { epoch } => Some((*p, *epoch)),
                _ => None,
            })
            .collect();
        out.sort_unstable();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_follow_election_and_resignation() {
        let o = Ownership::default();
        assert_eq!(o.check(3), Ok(()), "unassigned: served as on a single node");
        assert_eq!(
            o.elect(3, 0, || {}),
            Transition::None,
            "already loaded at start-up"
        );
        assert_eq!(o.resign(3, || {}), Transition::Unload);
        assert_eq!(o.check(3), Err(ResponseError::NotCoordinator));
        assert_eq!(o.resign(3, || {}), Transition::None);
        assert_eq!(o.elect(3, 2, || {}), Transition::Load { epoch: 2 });
        assert_eq!(o.elect(3, 2, || {}), Transition::None);
        assert_eq!(o.check(3), Err(ResponseError::CoordinatorLoadInProgress));
        assert_eq!(o.loading(), vec![(3, 2)]);
        assert_eq!(o.elect(3, 4, || {}), Transition::Load { epoch: 4 });
        assert_eq!(o.loading(), vec![(3, 4)]);
        assert!(!o.complete_load(3, 2, || panic!("stale load installed")));
        assert!(o.complete_load(3, 4, || {}));
        assert_eq!(o.check(3), Ok(()));
    }

    #[test]
    fn in_cluster_mode_only_assigned_partitions_are_served_and_elections_load() {
        let o = Ownership::new(true);
        assert_eq!(o.check(1), Err(ResponseError::NotCoordinator));
        assert!(!o.is_served(1), "nothing loaded at start-up is kept");
        assert_eq!(o.elect(1, 0, || {}), Transition::Load { epoch: 0 });
        assert_eq!(o.check(1), Err(ResponseError::CoordinatorLoadInProgress));
        assert!(o.complete_load(1, 0, || {}));
        assert_eq!(o.check(1), Ok(()));
        assert_eq!(o.resign(1, || {}), Transition::Unload);
        assert_eq!(o.check(1), Err(ResponseError::NotCoordinator));
    }
}
