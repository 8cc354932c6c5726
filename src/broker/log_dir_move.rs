//! Moving a replica to another of this broker's log dirs (AlterReplicaLogDirs, Kafka's
//! "future replica"): to balance disks, or to empty one before it is replaced. The replica
//! keeps serving (leader or follower) while it moves; only the last step holds its log.
//!
//! The steps, for a partition in `<from>/<topic>-<p>` going to log dir `<to>`:
//! 1. The cleaner pauses on the partition, and the log rolls, so every segment but a new,
//!    near-empty active one is sealed.
//! 2. Without the log's lock, every file is copied to `<to>/<topic>-<p>.<tag>-future`.
//! 3. Under the log's lock: the log is flushed and its producer snapshot written
//!    ([`Log::close`]); the files that may have changed since step 1 are copied again (the
//!    segments from the roll on, the checkpoints and snapshots; every file if a truncation
//!    or a repair rewrote sealed segments meanwhile, see [`Log::rewrites`]); files deleted
//!    meanwhile are deleted; everything is fsynced. Then `<from>/<topic>-<p>` is renamed
//!    `...<tag>-moved`, the future dir is renamed `<to>/<topic>-<p>`, and the log reopens
//!    there ([`Log::reopen_in`]) with its in-memory state.
//! 4. The checkpoints are rewritten and the `-moved` dir deleted.
//!
//! Crash consistency: until the first rename of step 3 the old dir is the replica and a
//! `-future` dir is an unfinished copy; after it, the `-future` dir is a complete copy (it
//! was fsynced first) and the only one. So at start-up ([`finish_interrupted_moves`]) a
//! `-future` dir becomes the replica when its partition has no dir; otherwise the unfinished
//! copy is deleted and the move starts again once the broker is open, as Kafka resumes its
//! future replicas after a restart (Strata copies from the start again: what a previous run
//! copied may predate a truncation or a cleaning it no longer knows of). `-moved` dirs are
//! deleted. The checkpoints are keyed by partition, not dir, so either copy finds its
//! recovery point and log start offset.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use kafka_protocol::ResponseError;

use super::{Broker, Partition};
use crate::clock::now_ms;
use crate::config::BrokerConfig;
use crate::failpoint;

const FUTURE_SUFFIX: &str = "-future";
const MOVED_SUFFIX: &str = "-moved";

/// The replica moves this broker was asked for.
#[derive(Default)]
pub struct LogDirMoves {
    wanted: Mutex<Wanted>,
    /// Log dirs asked for partitions this broker has no replica of yet (Kafka's preferred
    /// log dir): a replica created later goes there. In memory, as in Kafka.
    preferred: Mutex<HashMap<(String, i32), PathBuf>>,
    /// Moves a restart interrupted, to start again once the broker is open.
    interrupted: Mutex<Vec<Interrupted>>,
}

/// A move a restart interrupted: the partition and the log dir it was going to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Interrupted {
    pub topic: String,
    pub partition: i32,
    pub to: PathBuf,
}

/// Partitions moving or about to, with where to; one mover thread works through them (as
/// many requests as a client sends never start more threads).
#[derive(Default)]
struct Wanted {
    to: HashMap<(String, i32), PathBuf>,
    mover_running: bool,
}

impl LogDirMoves {
    /// The moves of a broker whose start-up found `interrupted` ones.
    pub(super) fn resuming(interrupted: Vec<Interrupted>) -> Self {
        LogDirMoves {
            interrupted: Mutex::new(interrupted),
            ..Default::default()
        }
    }

    fn wanted(&self) -> std::sync::MutexGuard<'_, Wanted> {
        self.wanted.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Where a new replica of the partition goes, if a log dir was asked for it.
    pub fn preferred_dir(&self, topic: &str, partition: i32) -> Option<PathBuf> {
        self.preferred
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(topic.to_string(), partition))
            .cloned()
    }

    /// A move of the partition (now in log dir `current`) in progress: its destination and
    /// the bytes copied there so far (DescribeLogDirs lists it as a future replica).
    pub fn future_replica(
        &self,
        topic: &str,
        partition: i32,
        current: &Path,
    ) -> Option<(PathBuf, u64)> {
        let to = self
            .wanted()
            .to
            .get(&(topic.to_string(), partition))
            .cloned()?;
        if same_dir(&to, current) {
            return None;
        }
        let prefix = format!("{}.", super::partition_dir_name(topic, partition));
        let copied = fs::read_dir(&to)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| {
                let name = e.file_name().to_string_lossy().to_string();
                name.starts_with(&prefix) && name.ends_with(FUTURE_SUFFIX)
            })
            .flat_map(|e| fs::read_dir(e.path()).into_iter().flatten().flatten())
            .filter_map(|f| f.metadata().ok().map(|m| m.len()))
            .sum();
        Some((to, copied))
    }
}

impl Broker {
    /// AlterReplicaLogDirs for one partition, with Kafka's answers: LOG_DIR_NOT_FOUND for a
    /// path that is not one of `log.dirs`; UNKNOWN_TOPIC_OR_PARTITION for a partition that
    /// does not exist (the dir is remembered for when it does); REPLICA_NOT_AVAILABLE when
    /// this broker is not one of its replicas; otherwise NONE. The move runs in the
    /// background; a later request for another dir redirects it.
    pub fn alter_replica_log_dir(
        self: &Arc<Self>,
        topic: &str,
        partition: i32,
        path: &str,
    ) -> Result<(), ResponseError> {
        let Some(to) = self
            .config
            .log_dirs
            .iter()
            .find(|d| same_dir(d, Path::new(path)))
            .cloned()
        else {
            return Err(ResponseError::LogDirNotFound);
        };
        let key = (topic.to_string(), partition);
        let Some(p) = self.partition(topic, partition) else {
            self.log_dir_moves
                .preferred
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(key, to);
            return Err(ResponseError::UnknownTopicOrPartition);
        };
        // Not a replica here (cluster mode): its empty log goes there now, so a replica
        // assigned later starts in that dir; Kafka answers REPLICA_NOT_AVAILABLE.
        let not_here = p.role() == super::Role::None;
        let current = p.log_dir_and_size().0;
        let mut wanted = self.log_dir_moves.wanted();
        let answer = if not_here {
            Err(ResponseError::ReplicaNotAvailable)
        } else {
            Ok(())
        };
        if same_dir(&current, &to) {
            // Already there; a move elsewhere in progress stops after its copy.
            if let Some(w) = wanted.to.get_mut(&key) {
                *w = to;
            }
            return answer;
        }
        wanted.to.insert(key, to);
        if !wanted.mover_running {
            let broker = self.clone();
            std::thread::Builder::new()
                .name("log-dir-mover".into())
                .spawn(move || broker.run_moves())
                .map_err(|e| {
                    tracing::error!(error = %e, "cannot start the replica mover");
                    ResponseError::KafkaStorageError
                })?;
            wanted.mover_running = true;
        }
        answer
    }

    /// Starts again the moves a restart interrupted (once the broker is open). A partition
    /// gone since, or a log dir no longer configured, is left where it is.
    pub fn resume_log_dir_moves(self: &Arc<Self>) {
        let interrupted = std::mem::take(
            &mut *self
                .log_dir_moves
                .interrupted
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        for m in interrupted {
            let to = m.to.to_string_lossy().to_string();
            match self.alter_replica_log_dir(&m.topic, m.partition, &to) {
                Ok(()) | Err(ResponseError::ReplicaNotAvailable) => {
                    tracing::info!(topic = %m.topic, partition = m.partition, to = %to,
                        "resuming a replica move a restart interrupted");
                }
                Err(e) => {
                    tracing::warn!(topic = %m.topic, partition = m.partition, to = %to, error = ?e,
                        "a replica move a restart interrupted is not resumed");
                }
            }
        }
    }

    /// The next move to make: a wanted partition not yet where it is wanted. Forgets the
    /// ones that are (or whose partition is gone); with none left, the mover stops.
    fn next_move(&self) -> Option<(Arc<Partition>, (String, i32), PathBuf)> {
        let mut wanted = self.log_dir_moves.wanted();
        let mut next = None;
        wanted.to.retain(|(topic, index), to| {
            let Some(p) = self.partition(topic, *index) else {
                return false;
            };
            let moving = !same_dir(&p.log_dir_and_size().0, to);
            if moving && next.is_none() {
                next = Some((p, (topic.clone(), *index), to.clone()));
            }
            moving
        });
        if next.is_none() {
            wanted.mover_running = false;
        }
        next
    }

    /// The mover: moves replicas until each sits where the latest request wants it.
    fn run_moves(&self) {
        while let Some((p, key, to)) = self.next_move() {
            let started = std::time::Instant::now();
            let pause = self.log_cleaner.pause(&key);
            let moved = move_replica(&p, &to);
            drop(pause);
            match moved {
                Ok(old) => {
                    if let Err(e) = self.write_checkpoints() {
                        tracing::warn!(error = %e, "writing checkpoints after a replica move failed");
                    }
                    if let Err(e) = fs::remove_dir_all(&old) {
                        tracing::warn!(dir = %old.display(), error = %e, "cannot delete a moved replica's old dir; the next start does");
                    }
                    tracing::info!(topic = %key.0, partition = key.1, to = %to.display(),
                        seconds = started.elapsed().as_secs_f64(), "replica moved to another log dir");
                }
                Err(e) => {
                    tracing::error!(topic = %key.0, partition = key.1, to = %to.display(),
                        error = %e, "replica move failed; the replica stays where it was");
                    let mut wanted = self.log_dir_moves.wanted();
                    if wanted.to.get(&key).is_some_and(|w| same_dir(w, &to)) {
                        wanted.to.remove(&key);
                    }
                }
            }
        }
    }
}

/// Steps 1 to 3 of the module docs. Returns the old dir (renamed `-moved`) to delete.
fn move_replica(p: &Partition, to: &Path) -> io::Result<PathBuf> {
    let (from, rolled_base, rewrites) = p.with_log(|l| -> io::Result<_> {
        l.roll(now_ms())?;
        Ok((l.dir().to_path_buf(), l.log_end_offset(), l.rewrites()))
    })?;
    let name = from
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| io::Error::other("a partition dir without a name"))?
        .to_string();
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let future = to.join(format!("{name}.{tag}{FUTURE_SUFFIX}"));
    fs::create_dir(&future)?;
    let result = (|| {
        copy_files(&from, &future, |_| true)?;
        p.with_log(|l| -> io::Result<PathBuf> {
            let now = now_ms();
            l.close(now)?;
            let whole = l.rewrites() != rewrites;
            copy_files(&from, &future, |file| {
                whole || segment_base(file).is_none_or(|base| base >= rolled_base)
            })?;
            remove_files_not_in(&future, &from)?;
            sync_files(&future)?;
            failpoint::hit(failpoint::LOG_DIR_MOVE_COPIED);
            let moved = from.with_file_name(format!("{name}.{tag}{MOVED_SUFFIX}"));
            let live = to.join(&name);
            crate::log::io_fault::rename(&from, &moved)?;
            sync_parent(&from)?;
            failpoint::hit(failpoint::LOG_DIR_MOVE_OLD_RENAMED);
            if let Err(e) =
                crate::log::io_fault::rename(&future, &live).and_then(|()| sync_parent(&live))
            {
                let _ = fs::rename(&moved, &from);
                return Err(e);
            }
            failpoint::hit(failpoint::LOG_DIR_MOVE_LIVE);
            if let Err(e) = l.reopen_in(&live, now) {
                let _ = fs::rename(&live, &future);
                let _ = fs::rename(&moved, &from);
                return Err(e);
            }
            Ok(moved)
        })
    })();
    if result.is_err() {
        let _ = fs::remove_dir_all(&future);
    }
    result
}

/// The base offset a segment file is named after (`00000000000000001234.log`, `.index`,
/// `.timeindex`, `.txnindex`, and the `.cleaned`/`.swap` forms); None for the others
/// (producer snapshots, checkpoints, partition metadata), which are always copied again.
fn segment_base(file: &str) -> Option<i64> {
    let (stem, ext) = file.split_once('.')?;
    let segment_ext = ["log", "index", "timeindex", "txnindex"]
        .iter()
        .any(|e| ext == *e || ext.starts_with(&format!("{e}.")));
    (segment_ext && stem.len() == 20)
        .then(|| stem.parse().ok())
        .flatten()
}

/// Copies the regular files of `from` that `wanted` names into `to`, replacing them. A file
/// deleted meanwhile (retention, a `.deleted` segment's delayed removal) is skipped: the last
/// pass deletes its copy.
fn copy_files(from: &Path, to: &Path, wanted: impl Fn(&str) -> bool) -> io::Result<()> {
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let name = entry.file_name();
        if !name.to_str().is_some_and(&wanted) {
            continue;
        }
        let copied = entry.file_type().and_then(|t| match t.is_file() {
            true => fs::copy(entry.path(), to.join(&name)).map(drop),
            false => Ok(()),
        });
        match copied {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            other => other?,
        }
    }
    Ok(())
}

/// Deletes the files of `copy` that `source` no longer has (segments retention deleted).
fn remove_files_not_in(copy: &Path, source: &Path) -> io::Result<()> {
    let present: HashSet<_> = fs::read_dir(source)?
        .filter_map(|e| e.ok().map(|e| e.file_name()))
        .collect();
    for entry in fs::read_dir(copy)? {
        let entry = entry?;
        if !present.contains(&entry.file_name()) {
            fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

fn sync_files(dir: &Path) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        fs::File::open(entry?.path())?.sync_all()?;
    }
    fs::File::open(dir)?.sync_all()
}

fn sync_parent(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(parent) => fs::File::open(parent)?.sync_all(),
        None => Ok(()),
    }
}

fn same_dir(a: &Path, b: &Path) -> bool {
    let canonical = |p: &Path| fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    a == b || canonical(a) == canonical(b)
}

/// Start-up, before the logs open: finishes moves a crash interrupted after their copy was
/// complete, and returns the ones it interrupted before, to start again (module docs).
pub(super) fn finish_interrupted_moves(config: &BrokerConfig) -> Vec<Interrupted> {
    let mut interrupted = Vec::new();
    let mut futures = Vec::new();
    for d in &config.log_dirs {
        let Ok(entries) = fs::read_dir(d) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if let Some(stem) = name.strip_suffix(FUTURE_SUFFIX) {
                if let Some((partition_dir, _tag)) = stem.rsplit_once('.') {
                    futures.push((e.path(), d.join(partition_dir), partition_dir.to_string()));
                }
            }
        }
    }
    for (future, live, partition_dir) in futures {
        let exists = config
            .log_dirs
            .iter()
            .any(|d| d.join(&partition_dir).is_dir());
        if exists {
            tracing::info!(dir = %future.display(), "deleting an unfinished replica move's copy; the move starts again");
            let _ = fs::remove_dir_all(&future);
            let to = live.parent().map(Path::to_path_buf);
            let parsed = partition_dir_name_parts(&partition_dir);
            if let (Some(to), Some((topic, partition))) = (to, parsed) {
                if !interrupted
                    .iter()
                    .any(|m: &Interrupted| m.topic == topic && m.partition == partition)
                {
                    interrupted.push(Interrupted {
                        topic,
                        partition,
                        to,
                    });
                }
            }
        } else if let Err(e) = fs::rename(&future, &live) {
            tracing::error!(dir = %future.display(), error = %e, "cannot finish an interrupted replica move");
        } else {
            tracing::info!(dir = %live.display(), "finished an interrupted replica move");
            let _ = sync_parent(&live);
        }
    }
    for d in &config.log_dirs {
        let Ok(entries) = fs::read_dir(d) else {
            continue;
        };
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().ends_with(MOVED_SUFFIX) {
                let _ = fs::remove_dir_all(e.path());
            }
        }
    }
    interrupted
}

/// `<topic>-<partition>` split.
fn partition_dir_name_parts(name: &str) -> Option<(String, i32)> {
    let (topic, partition) = name.rsplit_once('-')?;
    let partition = partition.parse().ok().filter(|p: &i32| *p >= 0)?;
    (!topic.is_empty()).then(|| (topic.to_string(), partition))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_files_are_told_from_the_others() {
        assert_eq!(segment_base("00000000000000001234.log"), Some(1234));
        assert_eq!(segment_base("00000000000000001234.timeindex"), Some(1234));
        assert_eq!(segment_base("00000000000000001234.log.cleaned"), Some(1234));
        assert_eq!(segment_base("00000000000000001234.snapshot"), None);
        assert_eq!(segment_base("leader-epoch-checkpoint"), None);
        assert_eq!(segment_base("partition.metadata"), None);
    }

    #[test]
    fn partition_dir_names_are_split_at_their_last_dash() {
        assert_eq!(
            partition_dir_name_parts("my-topic-12"),
            Some(("my-topic".to_string(), 12))
        );
        assert_eq!(partition_dir_name_parts("topic-x"), None);
        assert_eq!(partition_dir_name_parts("-3"), None);
        assert_eq!(partition_dir_name_parts("topic"), None);
    }
}
