//! The log cleaner service (Kafka's `LogCleaner`): compacts the partitions of topics with
//! `cleanup.policy=compact` (or `compact,delete`), `__consumer_offsets` included, with the
//! `strata-compaction` crate over the broker's segment files ([`crate::log::cleaner`]).
//!
//! Tasks: `log.cleaner.threads` tasks (kept running by [`supervise`], which [`crate::runtime`]
//! spawns; stopped by its shutdown token). Each loops: on the blocking pool, list the
//! compacted partitions, let the shared [`CleanerManager`] pick the filthiest one not being
//! cleaned, and run one pass over it with its own [`Cleaner`] (offset map allocated on first
//! use, then reused); when nothing is cleanable, sleep `log.cleaner.backoff.ms`. All tasks
//! share one [`Throttler`] (`log.cleaner.io.max.bytes.per.second`).
//!
//! Reconfiguration ([`LogCleaner::reconfigure`], dynamic broker configs, Kafka's
//! `LogCleaner.reconfigure`): the throttle takes its new rate at its next check; a task
//! builds a new offset map (`log.cleaner.dedupe.buffer.size` / threads, load factor) before
//! its next pass and sleeps the new backoff; tasks above a lowered thread count stop after
//! their pass, and the supervisor starts the ones a raised count wants. Kafka restarts every
//! cleaner thread instead, which aborts the passes in progress.
//!
//! Cancellation: a pass polls the shutdown token and its guard's abort flag (raised by topic
//! deletion through [`LogCleaner::abort_topic`]) before every batch; committed groups stay,
//! the group in progress is abandoned.
//!
//! State: the first dirty offset of each partition, persisted per log dir in Kafka's
//! `cleaner-offset-checkpoint` (written after every completed pass, after the groups it
//! committed, so it only moves over durable work). On a remote-storage topic only what the
//! bucket already holds is cleaned (up to the remote end), and tiering then replaces whole
//! remote segments with the compacted snapshot.
//!
//! Errors: a failed pass is logged once. I/O errors are retried after the backoff; a corrupt
//! batch, a too small offset map or a half-done swap mark the partition uncleanable until the
//! broker restarts (a person must act: the log line says why).

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use strata_compaction::{
    Cleaner, CleanerError, CleanerManager, CleaningCandidate, LogToClean, PassOutcome, Throttler,
};
use tokio_util::sync::CancellationToken;

use super::{Broker, Partition, Topic};
use crate::clock::now_ms;
use crate::config::LogCleanerConfig;
use crate::log::checkpoint;
use crate::log::cleaner::{
    compaction_config, is_swap_incomplete, CleanedSegmentSink, LogSegmentSource,
};

/// Kafka's per-log-dir checkpoint of first dirty offsets.
pub const CHECKPOINT_FILE: &str = "cleaner-offset-checkpoint";

/// A partition as the cleaner names it: (topic, partition).
pub type PartitionKey = (String, i32);

/// The cleaner state shared by the broker and its cleaner tasks.
pub struct LogCleaner {
    config: RwLock<LogCleanerConfig>,
    /// Raised by every reconfiguration: an offset map sized under an older one is replaced.
    generation: AtomicU64,
    /// Wakes the [`supervise`] task after a reconfiguration.
    reconfigured: tokio::sync::Notify,
    manager: Arc<CleanerManager<PartitionKey>>,
    throttler: Arc<Throttler>,
    /// First dirty offset per partition; the lock also serializes checkpoint writes.
    checkpoints: Mutex<HashMap<PartitionKey, i64>>,
}

fn is_cleaned(topic: &Topic) -> bool {
    topic.config.cleanup_policy_compact
}

impl LogCleaner {
    /// Loads the checkpoints of every log dir. A missing or unreadable checkpoint only means
    /// the next pass starts from the log start, so it is not fatal.
    pub fn open(config: LogCleanerConfig, log_dirs: &[PathBuf]) -> LogCleaner {
        let mut checkpoints = HashMap::new();
        for dir in log_dirs {
            match checkpoint::read_offsets(&dir.join(CHECKPOINT_FILE)) {
                Ok(entries) => {
                    for (topic, partition, offset) in entries {
                        checkpoints.insert((topic, partition), offset);
                    }
                }
                Err(error) => {
                    tracing::warn!(dir = %dir.display(), %error, "ignoring unreadable cleaner checkpoint")
                }
            }
        }
        LogCleaner {
            throttler: Arc::new(Throttler::new(config.io_max_bytes_per_second)),
            manager: Arc::new(CleanerManager::new()),
            checkpoints: Mutex::new(checkpoints),
            config: RwLock::new(config),
            generation: AtomicU64::new(0),
            reconfigured: tokio::sync::Notify::new(),
        }
    }

    /// The settings in force now.
    pub fn config(&self) -> LogCleanerConfig {
        self.config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// New settings (dynamic broker configs; `enable` is read at start-up only). Returns
    /// whether anything changed.
    pub fn reconfigure(&self, new: LogCleanerConfig) -> bool {
        let mut config = self.config.write().unwrap_or_else(|e| e.into_inner());
        let new = LogCleanerConfig {
            enable: config.enable,
            ..new
        };
        if *config == new {
            return false;
        }
        if new.io_max_bytes_per_second != config.io_max_bytes_per_second {
            self.throttler.set_rate(new.io_max_bytes_per_second);
        }
        tracing::info!(
            threads = new.threads,
            dedupe_buffer_bytes = new.dedupe_buffer_bytes,
            load_factor = new.dedupe_buffer_load_factor,
            io_max_bytes_per_second = new.io_max_bytes_per_second,
            backoff_ms = new.backoff.as_millis() as u64,
            "log cleaner reconfigured"
        );
        *config = new;
        drop(config);
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.reconfigured.notify_one();
        true
    }

    /// Refuses a thread count Kafka refuses: below 1, below half or above double the
    /// current one (Kafka's `LogCleaner.validateReconfiguration`).
    pub fn check_threads(&self, threads: i64) -> Result<(), String> {
        let current = self.config().threads as i64;
        if threads < 1 {
            return Err("Log cleaner threads should be at least 1".into());
        }
        if threads < current / 2 {
            return Err(format!(
                "Log cleaner threads cannot be reduced to less than half the current value {current}"
            ));
        }
        if threads > current * 2 {
            return Err(format!(
                "Log cleaner threads cannot be increased to more than double the current value {current}"
            ));
        }
        Ok(())
    }

    fn checkpoints(&self) -> std::sync::MutexGuard<'_, HashMap<PartitionKey, i64>> {
        self.checkpoints.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The persisted first dirty offset of a partition, if it was ever cleaned.
    /// Stops any pass on the partition and keeps the cleaner off it until the guard drops
    /// (a replica moving to another log dir). Blocks until a pass in progress has noticed.
    pub fn pause(&self, key: &PartitionKey) -> CleaningPaused {
        self.manager.abort_and_pause(key);
        CleaningPaused {
            manager: self.manager.clone(),
            key: key.clone(),
        }
    }

    pub fn checkpoint(&self, topic: &str, partition: i32) -> Option<i64> {
        self.checkpoints()
            .get(&(topic.to_string(), partition))
            .copied()
    }

    pub fn uncleanable_partitions(&self) -> Vec<PartitionKey> {
        self.manager.uncleanable_partitions()
    }

    fn candidate(
        &self,
        topic: &Topic,
        partition: &Partition,
        checkpoints: &HashMap<PartitionKey, i64>,
    ) -> io::Result<CleaningCandidate<PartitionKey>> {
        let key = (topic.name.clone(), partition.index);
        let (segments, log_start_offset, log_end_offset, last_stable_offset) =
            partition.with_log(|log| {
                Ok::<_, io::Error>((
                    log.cleaner_segments()?,
                    log.log_start_offset(),
                    log.log_end_offset(),
                    // With remote storage only what the bucket already has is cleaned, so a
                    // cleaned group never straddles the remote end (the compacted snapshot
                    // then replaces whole remote segments).
                    if topic.config.remote_storage_enable {
                        log.last_stable_offset().min(log.remote_end_offset().max(0))
                    } else {
                        log.last_stable_offset()
                    },
                ))
            })?;
        Ok(CleaningCandidate {
            cleaner_checkpoint: checkpoints.get(&key).copied(),
            partition: key,
            segments,
            log_start_offset,
            log_end_offset,
            // Nothing at or above the last stable offset (at most the high watermark) is
            // cleaned: an undecided transaction must stay whole.
            upper_bound_offset: last_stable_offset,
            config: compaction_config(&topic.config),
        })
    }

    /// The dirty ratio of one compacted partition now (for metrics).
    pub fn dirty_ratio(&self, topic: &Topic, partition: &Partition) -> Option<f64> {
        let checkpoints = self.checkpoints().clone();
        let candidate = self.candidate(topic, partition, &checkpoints).ok()?;
        LogToClean::compute(&candidate, now_ms()).map(|l| l.cleanable_ratio)
    }

    /// Runs one pass on the filthiest cleanable partition. Returns false when there was
    /// nothing to clean (the caller then backs off). Blocking.
    pub fn clean_filthiest(
        &self,
        broker: &Broker,
        id: usize,
        cleaner: &mut Option<Cleaner>,
        shutdown: &CancellationToken,
    ) -> bool {
        let now = now_ms();
        let checkpoints = self.checkpoints().clone();
        let mut partitions: HashMap<PartitionKey, Arc<Partition>> = HashMap::new();
        let mut candidates = Vec::new();
        for topic in broker.topics().iter().filter(|t| is_cleaned(t)) {
            for partition in &topic.partitions {
                match self.candidate(topic, partition, &checkpoints) {
                    Ok(candidate) => {
                        partitions.insert(candidate.partition.clone(), partition.clone());
                        candidates.push(candidate);
                    }
                    Err(error) => {
                        tracing::warn!(topic = %topic.name, partition = partition.index, %error, "cannot list segments for the log cleaner")
                    }
                }
            }
        }
        let (selection, guard) = self.manager.grab_filthiest(candidates, now);
        if !selection.checkpoint_resets.is_empty() {
            let mut checkpoints = self.checkpoints();
            for (key, offset) in &selection.checkpoint_resets {
                checkpoints.insert(key.clone(), *offset);
            }
            self.write_checkpoints(broker, &checkpoints);
        }
        let (Some(log), Some(guard)) = (selection.filthiest, guard) else {
            return false;
        };
        let Some(partition) = partitions.get(&log.partition) else {
            return false;
        };
        let (topic, index) = log.partition.clone();
        let cleaner = match cleaner {
            Some(cleaner) => cleaner,
            None => {
                let config = self.config().cleaner_config();
                match Cleaner::new(
                    id,
                    config.offset_map_bytes_per_cleaner(),
                    config.dedupe_buffer_load_factor,
                    self.throttler.clone(),
                ) {
                    Ok(created) => cleaner.insert(created),
                    Err(error) => {
                        tracing::error!(%error, "the log cleaner cannot start");
                        self.manager.mark_uncleanable(log.partition.clone());
                        return false;
                    }
                }
            }
        };
        let source = LogSegmentSource::new(&**partition);
        let mut sink = CleanedSegmentSink::new(&**partition);
        let cancel = || shutdown.is_cancelled() || guard.is_aborted();
        let outcome = cleaner.clean(&log, &source, &mut sink, now, &cancel);
        drop(sink);
        let metrics = &broker.metrics;
        match outcome {
            Ok(outcome) => {
                let stats = outcome.stats();
                metrics.cleaner_passes.fetch_add(1, Ordering::Relaxed);
                metrics
                    .cleaner_bytes_read
                    .fetch_add(stats.bytes_read, Ordering::Relaxed);
                metrics
                    .cleaner_bytes_written
                    .fetch_add(stats.bytes_written, Ordering::Relaxed);
                metrics
                    .cleaner_records_removed
                    .fetch_add(stats.records_removed(), Ordering::Relaxed);
                metrics
                    .cleaner_last_pass_micros
                    .store(stats.duration.as_micros() as u64, Ordering::Relaxed);
                match outcome {
                    PassOutcome::Completed {
                        first_dirty_offset, ..
                    } => {
                        let mut checkpoints = self.checkpoints();
                        checkpoints.insert(log.partition.clone(), first_dirty_offset);
                        self.write_checkpoints(broker, &checkpoints);
                        // No progress (nothing mapped): back off rather than spin.
                        first_dirty_offset > log.first_dirty_offset
                    }
                    PassOutcome::Cancelled { .. } => false,
                }
            }
            Err(error) => {
                metrics.cleaner_errors.fetch_add(1, Ordering::Relaxed);
                let swap_incomplete =
                    matches!(&error, CleanerError::Sink(e) if is_swap_incomplete(e));
                let corrupt_file = matches!(&error, CleanerError::Source(e) if e.kind() == io::ErrorKind::InvalidData);
                if swap_incomplete || corrupt_file || !error.is_retriable() {
                    tracing::error!(%topic, partition = index, error = %error, cause = ?std::error::Error::source(&error).map(|s| s.to_string()), "the log cleaner stops cleaning this partition until the broker restarts");
                    self.manager.mark_uncleanable(log.partition.clone());
                } else {
                    tracing::warn!(%topic, partition = index, error = %error, cause = ?std::error::Error::source(&error).map(|s| s.to_string()), "log cleaner pass failed; it is retried");
                }
                false
            }
        }
    }

    /// Writes the checkpoint of every log dir (the caller holds the checkpoints lock).
    fn write_checkpoints(&self, broker: &Broker, checkpoints: &HashMap<PartitionKey, i64>) {
        let mut per_dir: HashMap<PathBuf, Vec<String>> = broker
            .config
            .log_dirs
            .iter()
            .map(|d| (d.clone(), Vec::new()))
            .collect();
        for partition in broker.all_partitions() {
            let key = (partition.topic.clone(), partition.index);
            let Some(offset) = checkpoints.get(&key) else {
                continue;
            };
            let dir = partition.with_log(|l| l.dir().parent().map(Path::to_path_buf));
            if let Some(lines) = dir.and_then(|d| per_dir.get_mut(&d)) {
                lines.push(format!("{} {} {offset}", key.0, key.1));
            }
        }
        for (dir, lines) in per_dir {
            if let Err(error) = checkpoint::write(&dir.join(CHECKPOINT_FILE), &lines) {
                tracing::warn!(dir = %dir.display(), %error, "writing the cleaner checkpoint failed");
            }
        }
    }

    /// Stops any pass on the partitions of a topic being deleted and forgets their state.
    /// Blocks until a pass in progress has noticed. `remove` runs while cleaning is paused.
    pub fn abort_topic<R>(&self, topic: &str, partitions: i32, remove: impl FnOnce() -> R) -> R {
        let keys: Vec<PartitionKey> = (0..partitions).map(|p| (topic.to_string(), p)).collect();
        for key in &keys {
            self.manager.abort_and_pause(key);
        }
        let result = remove();
        {
            let mut checkpoints = self.checkpoints();
            for key in &keys {
                checkpoints.remove(key);
                self.manager.clear_uncleanable(key);
            }
        }
        for key in &keys {
            self.manager.resume(key);
        }
        result
    }
}

/// Cleaning of one partition paused (see [`LogCleaner::pause`]); resumes on drop.
pub struct CleaningPaused {
    manager: Arc<CleanerManager<PartitionKey>>,
    key: PartitionKey,
}

impl Drop for CleaningPaused {
    fn drop(&mut self) {
        self.manager.resume(&self.key);
    }
}

/// Keeps `log.cleaner.threads` cleaner tasks running until `shutdown`, starting the ones a
/// raised thread count wants (checked after each reconfiguration, and every second).
pub async fn supervise(
    broker: Arc<Broker>,
    tasks: tokio_util::task::TaskTracker,
    shutdown: CancellationToken,
) {
    let mut running: Vec<tokio::task::JoinHandle<()>> = Vec::new();
    loop {
        let threads = broker.log_cleaner().config().threads;
        for id in 0..threads {
            if running.get(id).is_some_and(|h| !h.is_finished()) {
                continue;
            }
            let handle = tasks.spawn(run(broker.clone(), id, shutdown.clone()));
            if id < running.len() {
                running[id] = handle;
            } else {
                running.push(handle);
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = broker.log_cleaner().reconfigured.notified() => {}
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

/// One cleaner task: passes back to back while there is work, `log.cleaner.backoff.ms` apart
/// when there is none, until `shutdown` or until the thread count falls to `id` or below.
pub async fn run(broker: Arc<Broker>, id: usize, shutdown: CancellationToken) {
    let mut cleaner: Option<Cleaner> = None;
    let mut sized_at = broker.log_cleaner().generation.load(Ordering::SeqCst);
    while !shutdown.is_cancelled() {
        let config = broker.log_cleaner().config();
        if id >= config.threads {
            tracing::info!(
                cleaner = id,
                "log cleaner task stopped: fewer threads configured"
            );
            break;
        }
        let generation = broker.log_cleaner().generation.load(Ordering::SeqCst);
        if generation != sized_at {
            // Reconfigured: the next pass builds an offset map of the new size.
            cleaner = None;
            sized_at = generation;
        }
        let backoff = config.backoff.max(Duration::from_millis(10));
        let b = broker.clone();
        let stop = shutdown.clone();
        let mut mine = cleaner.take();
        let task = tokio::task::spawn_blocking(move || {
            let worked = b.log_cleaner().clean_filthiest(&b, id, &mut mine, &stop);
            (mine, worked)
        });
        let worked = match task.await {
            Ok((returned, worked)) => {
                cleaner = returned;
                worked
            }
            Err(_) => {
                tracing::error!(cleaner = id, "log cleaner task panicked");
                false
            }
        };
        if !worked {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(backoff) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(threads: usize) -> LogCleanerConfig {
        LogCleanerConfig {
            enable: true,
            threads,
            dedupe_buffer_bytes: 1 << 20,
            dedupe_buffer_load_factor: 0.9,
            io_max_bytes_per_second: f64::MAX,
            backoff: Duration::from_millis(200),
        }
    }

    #[test]
    fn a_reconfiguration_takes_the_new_settings_and_keeps_enable() {
        let cleaner = LogCleaner::open(config(1), &[]);
        assert!(!cleaner.reconfigure(config(1)), "nothing changed");
        assert_eq!(cleaner.generation.load(Ordering::SeqCst), 0);
        let new = LogCleanerConfig {
            enable: false,
            io_max_bytes_per_second: 1024.0,
            dedupe_buffer_bytes: 2 << 20,
            ..config(2)
        };
        assert!(cleaner.reconfigure(new));
        let now = cleaner.config();
        assert!(now.enable, "enable is read at start-up only");
        assert_eq!((now.threads, now.dedupe_buffer_bytes), (2, 2 << 20));
        assert_eq!(cleaner.throttler.rate(), 1024.0);
        assert_eq!(cleaner.generation.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn thread_counts_are_bounded_as_kafka_bounds_them() {
        let cleaner = LogCleaner::open(config(4), &[]);
        assert!(cleaner.check_threads(2).is_ok());
        assert!(cleaner.check_threads(8).is_ok());
        assert_eq!(
            cleaner.check_threads(9).unwrap_err(),
            "Log cleaner threads cannot be increased to more than double the current value 4"
        );
        assert_eq!(
            cleaner.check_threads(1).unwrap_err(),
            "Log cleaner threads cannot be reduced to less than half the current value 4"
        );
        assert_eq!(
            cleaner.check_threads(0).unwrap_err(),
            "Log cleaner threads should be at least 1"
        );
    }
}
