//! Which partitions are being cleaned, paused or uncleanable (Kafka's `LogCleanerManager`
//! state), shared by the broker's pool of cleaner tasks.
//!
//! Invariants: a partition has at most one pass in progress, and a paused or uncleanable
//! partition gets none. Selecting a partition and marking it in progress happen under one lock,
//! so two tasks can never pick the same partition. The [`CleaningGuard`] handed out ends the
//! "in progress" state when dropped, whatever way the pass ended.
//!
//! Aborting: [`CleanerManager::abort_and_pause`] (for truncation, deletion or a config change)
//! raises the guard's abort flag, which the pass polls between batches, then blocks until the
//! pass has ended. Call it from a blocking context.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::selection::{select_filthiest, CleaningCandidate, Selection};

#[derive(Debug)]
enum State {
    InProgress { abort: Arc<AtomicBool> },
    Paused { count: u32 },
}

struct Partitions<P> {
    states: HashMap<P, State>,
    uncleanable: HashSet<P>,
}

/// Shared by all cleaner tasks of a broker.
pub struct CleanerManager<P> {
    partitions: Mutex<Partitions<P>>,
    pass_ended: Condvar,
}

impl<P: Clone + Eq + Hash> Default for CleanerManager<P> {
    fn default() -> Self {
        Self::new()
    }
}

impl<P: Clone + Eq + Hash> CleanerManager<P> {
    pub fn new() -> Self {
        CleanerManager {
            partitions: Mutex::new(Partitions {
                states: HashMap::new(),
                uncleanable: HashSet::new(),
            }),
            pass_ended: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Partitions<P>> {
        // The state stays consistent even if a holder panicked: every update is one statement.
        self.partitions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Chooses the dirtiest cleanable partition among those not in progress, paused or
    /// uncleanable, and marks it in progress. The guard must live for the whole pass.
    pub fn grab_filthiest(
        self: &Arc<Self>,
        candidates: impl IntoIterator<Item = CleaningCandidate<P>>,
        now_ms: i64,
    ) -> (Selection<P>, Option<CleaningGuard<P>>) {
        let mut partitions = self.lock();
        let eligible: Vec<CleaningCandidate<P>> = candidates
            .into_iter()
            .filter(|c| {
                !partitions.states.contains_key(&c.partition)
                    && !partitions.uncleanable.contains(&c.partition)
            })
            .collect();
        let selection = select_filthiest(eligible, now_ms);
        let guard = selection.filthiest.as_ref().map(|log| {
            let abort = Arc::new(AtomicBool::new(false));
            partitions.states.insert(
                log.partition.clone(),
                State::InProgress {
                    abort: abort.clone(),
                },
            );
            CleaningGuard {
                manager: Arc::clone(self),
                partition: log.partition.clone(),
                abort,
            }
        });
        (selection, guard)
    }

    pub fn is_in_progress(&self, partition: &P) -> bool {
        matches!(
            self.lock().states.get(partition),
            Some(State::InProgress { .. })
        )
    }

    /// Stops cleaning of `partition` until as many `resume` calls: aborts a pass in progress
    /// and waits until it has ended.
    pub fn abort_and_pause(&self, partition: &P) {
        let mut partitions = self.lock();
        loop {
            match partitions.states.get_mut(partition) {
                Some(State::InProgress { abort }) => {
                    abort.store(true, Ordering::Relaxed);
                    partitions = self
                        .pass_ended
                        .wait(partitions)
                        .unwrap_or_else(|p| p.into_inner());
                }
                Some(State::Paused { count }) => {
                    *count += 1;
                    return;
                }
                None => {
                    partitions
                        .states
                        .insert(partition.clone(), State::Paused { count: 1 });
                    return;
                }
            }
        }
    }

    /// Undoes one `abort_and_pause`.
    pub fn resume(&self, partition: &P) {
        let mut partitions = self.lock();
        if let Some(State::Paused { count }) = partitions.states.get_mut(partition) {
            *count -= 1;
            if *count == 0 {
                partitions.states.remove(partition);
            }
        }
    }

    /// Keeps `partition` out of selection (after a non-retriable error) until `clear_uncleanable`.
    pub fn mark_uncleanable(&self, partition: P) {
        self.lock().uncleanable.insert(partition);
    }

    pub fn clear_uncleanable(&self, partition: &P) {
        self.lock().uncleanable.remove(partition);
    }

    pub fn uncleanable_partitions(&self) -> Vec<P> {
        self.lock().uncleanable.iter().cloned().collect()
    }

    fn end_pass(&self, partition: &P) {
        let mut partitions = self.lock();
        if matches!(
            partitions.states.get(partition),
            Some(State::InProgress { .. })
        ) {
            partitions.states.remove(partition);
        }
        drop(partitions);
        self.pass_ended.notify_all();
    }
}

/// Proof that a pass on `partition` is in progress; dropping it ends the pass.
pub struct CleaningGuard<P: Clone + Eq + Hash> {
    manager: Arc<CleanerManager<P>>,
    partition: P,
    abort: Arc<AtomicBool>,
}

impl<P: Clone + Eq + Hash> CleaningGuard<P> {
    pub fn partition(&self) -> &P {
        &self.partition
    }

    /// True once `abort_and_pause` asked this pass to stop; combine it with the broker's
    /// shutdown signal in the pass's cancellation check.
    pub fn is_aborted(&self) -> bool {
        self.abort.load(Ordering::Relaxed)
    }
}

impl<P: Clone + Eq + Hash> Drop for CleaningGuard<P> {
    fn drop(&mut self) {
        self.manager.end_pass(&self.partition);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::CompactionConfig;
    use crate::segment::SegmentInfo;
    use std::time::Duration;

    fn dirty(partition: u32) -> CleaningCandidate<u32> {
        let segment = |base: i64| SegmentInfo {
            base_offset: base,
            next_offset: base + 10,
            size_bytes: 100,
            offset_index_bytes: 0,
            time_index_bytes: 0,
            largest_timestamp_ms: 0,
            first_batch_timestamp_ms: None,
            last_modified_ms: 0,
        };
        CleaningCandidate {
            partition,
            segments: vec![segment(0), segment(10), segment(20)],
            log_start_offset: 0,
            log_end_offset: 30,
            cleaner_checkpoint: None,
            upper_bound_offset: 30,
            config: CompactionConfig::default(),
        }
    }

    #[test]
    fn two_tasks_never_get_the_same_partition() {
        let manager = Arc::new(CleanerManager::new());
        let (_, first) = manager.grab_filthiest(vec![dirty(1)], 0);
        let first = first.expect("partition 1 is dirty");
        assert!(manager.is_in_progress(&1));
        let (_, second) = manager.grab_filthiest(vec![dirty(1)], 0);
        assert!(second.is_none(), "partition 1 is already being cleaned");
        drop(first);
        assert!(!manager.is_in_progress(&1));
        assert!(manager.grab_filthiest(vec![dirty(1)], 0).1.is_some());
    }

    #[test]
    fn paused_and_uncleanable_partitions_are_skipped() {
        let manager = Arc::new(CleanerManager::new());
        manager.abort_and_pause(&1);
        manager.mark_uncleanable(2);
        let (_, guard) = manager.grab_filthiest(vec![dirty(1), dirty(2), dirty(3)], 0);
        assert_eq!(guard.as_ref().map(|g| *g.partition()), Some(3));
        drop(guard);
        manager.resume(&1);
        manager.clear_uncleanable(&2);
        let (selection, guard) = manager.grab_filthiest(vec![dirty(1), dirty(2)], 0);
        assert!(guard.is_some());
        assert_eq!(selection.cleanable_logs, 2);
    }

    #[test]
    fn abort_and_pause_waits_for_the_pass_to_end() {
        let manager = Arc::new(CleanerManager::new());
        let (_, guard) = manager.grab_filthiest(vec![dirty(7)], 0);
        let guard = guard.unwrap();
        let pass = std::thread::spawn(move || {
            while !guard.is_aborted() {
                std::thread::sleep(Duration::from_millis(1));
            }
            drop(guard);
        });
        manager.abort_and_pause(&7);
        assert!(!manager.is_in_progress(&7));
        assert!(
            manager.grab_filthiest(vec![dirty(7)], 0).1.is_none(),
            "paused"
        );
        pass.join().unwrap();
        manager.resume(&7);
        assert!(manager.grab_filthiest(vec![dirty(7)], 0).1.is_some());
    }
}
