//! The metadata log on disk: segment files of checksummed entries plus a small meta file.
//! See the [module docs](super) for the layout and crash consistency.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::ops::RangeBounds;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{Entry, LogId, LogState, RaftLogReader, StorageError, StorageIOError, Vote};
use serde::{Deserialize, Serialize};

use super::file::{
    encode_frame, io_error, read_frame, read_if_exists, sync_dir, write_atomically, Frame,
};
use super::{blocking, storage_error, StoreError};
use crate::TypeConfig;

type LogEntry = Entry<TypeConfig>;

const META_FILE: &str = "raft-meta.json";
const SEGMENT_SUFFIX: &str = ".log";

/// Tuning of the log files.
#[derive(Clone, Debug)]
pub struct LogStoreOptions {
    /// A new segment file starts once the active one is at least this large.
    pub segment_bytes: u64,
}

impl Default for LogStoreOptions {
    fn default() -> Self {
        LogStoreOptions {
            segment_bytes: 16 * 1024 * 1024,
        }
    }
}

/// What `raft-meta.json` holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct LogMeta {
    vote: Option<Vote<u64>>,
    committed: Option<LogId<u64>>,
    last_purged: Option<LogId<u64>>,
}

/// The Raft log storage. Owned by openraft's storage task; readers get a [`LogReader`].
pub struct LogStore {
    /// All entries after the last purged one, in memory for readers.
    entries: Arc<RwLock<BTreeMap<u64, LogEntry>>>,
    /// The files; only locked inside blocking tasks.
    disk: Arc<Mutex<LogDisk>>,
    /// A copy of the persisted meta, for reads without touching `disk`.
    meta: LogMeta,
}

/// A reader over the in-memory entries, handed to openraft's replication tasks.
#[derive(Clone)]
pub struct LogReader {
    entries: Arc<RwLock<BTreeMap<u64, LogEntry>>>,
}

impl LogStore {
    /// Opens (or creates) the log in `dir`, recovering from a crash if needed.
    pub async fn open(
        dir: impl Into<PathBuf>,
        options: LogStoreOptions,
    ) -> Result<Self, StoreError> {
        let dir = dir.into();
        let (disk, entries, meta) = blocking(move || LogDisk::open(dir, options)).await?;
        Ok(LogStore {
            entries: Arc::new(RwLock::new(entries)),
            disk: Arc::new(Mutex::new(disk)),
            meta,
        })
    }

    fn last_log_id(&self) -> Option<LogId<u64>> {
        let entries = read_lock(&self.entries);
        entries
            .values()
            .next_back()
            .map(|e| e.log_id)
            .or(self.meta.last_purged)
    }

    /// Persists a new meta file and, once durable, adopts it.
    async fn save_meta(&mut self, meta: LogMeta) -> Result<(), StoreError> {
        let disk = self.disk.clone();
        let saved = meta.clone();
        blocking(move || lock(&disk).write_meta(&saved)).await?;
        self.meta = meta;
        Ok(())
    }
}

fn read_lock<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    // A panic while holding the lock cannot leave the map half-updated (single inserts and
    // removals), so recover from poisoning instead of propagating it.
    lock.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn write_lock<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn entries_in<RB: RangeBounds<u64>>(
    entries: &RwLock<BTreeMap<u64, LogEntry>>,
    range: RB,
) -> Vec<LogEntry> {
    read_lock(entries)
        .range(range)
        .map(|(_, e)| e.clone())
        .collect()
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<LogEntry>, StorageError<u64>> {
        Ok(entries_in(&self.entries, range))
    }
}

impl RaftLogReader<TypeConfig> for LogReader {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<LogEntry>, StorageError<u64>> {
        Ok(entries_in(&self.entries, range))
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogReader;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<u64>> {
        Ok(LogState {
            last_purged_log_id: self.meta.last_purged,
            last_log_id: self.last_log_id(),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        LogReader {
            entries: self.entries.clone(),
        }
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), StorageError<u64>> {
        let meta = LogMeta {
            vote: Some(*vote),
            ..self.meta.clone()
        };
        self.save_meta(meta)
            .await
            .map_err(|e| storage_error(StorageIOError::write_vote, e))
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, StorageError<u64>> {
        Ok(self.meta.vote)
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<u64>>,
    ) -> Result<(), StorageError<u64>> {
        if committed == self.meta.committed {
            return Ok(());
        }
        let meta = LogMeta {
            committed,
            ..self.meta.clone()
        };
        self.save_meta(meta)
            .await
            .map_err(|e| storage_error(StorageIOError::write, e))
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<u64>>, StorageError<u64>> {
        Ok(self.meta.committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError<u64>>
    where
        I: IntoIterator<Item = LogEntry> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<LogEntry> = entries.into_iter().collect();
        let write = async {
            let mut records = Vec::with_capacity(entries.len());
            for entry in &entries {
                let payload = serde_json::to_vec(entry).map_err(|source| StoreError::Encode {
                    what: "a log entry",
                    source,
                })?;
                records.push((entry.log_id.index, payload));
            }
            let disk = self.disk.clone();
            blocking(move || lock(&disk).append(&records)).await
        };
        match write.await {
            Ok(()) => {
                let mut map = write_lock(&self.entries);
                for entry in entries {
                    map.insert(entry.log_id.index, entry);
                }
                drop(map);
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
                Err(storage_error(StorageIOError::write_logs, e))
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId<u64>) -> Result<(), StorageError<u64>> {
        let disk = self.disk.clone();
        let index = log_id.index;
        blocking(move || lock(&disk).truncate(index))
            .await
            .map_err(|e| storage_error(StorageIOError::write_logs, e))?;
        write_lock(&self.entries).split_off(&index);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<u64>) -> Result<(), StorageError<u64>> {
        if self
            .meta
            .last_purged
            .is_some_and(|purged| purged.index >= log_id.index)
        {
            return Ok(());
        }
        let meta = LogMeta {
            last_purged: Some(log_id),
            ..self.meta.clone()
        };
        // Durable purge marker first: from here on open() ignores entries up to it.
        self.save_meta(meta)
            .await
            .map_err(|e| storage_error(StorageIOError::write_logs, e))?;
        {
            let mut map = write_lock(&self.entries);
            let kept = map.split_off(&(log_id.index + 1));
            *map = kept;
        }
        let disk = self.disk.clone();
        blocking(move || lock(&disk).delete_purged_segments(log_id.index))
            .await
            .map_err(|e| storage_error(StorageIOError::write_logs, e))
    }
}

/// One segment file.
#[derive(Debug)]
struct Segment {
    path: PathBuf,
    /// Entries' byte positions, for truncation.
    positions: BTreeMap<u64, u64>,
    len: u64,
}

/// The files of the log. Lives behind a mutex that only blocking tasks take.
struct LogDisk {
    dir: PathBuf,
    options: LogStoreOptions,
    /// By first index; the last one is the active segment.
    segments: BTreeMap<u64, Segment>,
    /// An append handle on the active segment.
    active: Option<File>,
}

impl LogDisk {
    fn open(
        dir: PathBuf,
        options: LogStoreOptions,
    ) -> Result<(Self, BTreeMap<u64, LogEntry>, LogMeta), StoreError> {
        fs::create_dir_all(&dir).map_err(io_error("create directory", &dir))?;
        let meta_path = dir.join(META_FILE);
        let meta: LogMeta = match read_if_exists(&meta_path)? {
            Some(bytes) => serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt {
                path: meta_path.clone(),
                reason: e.to_string(),
            })?,
            None => LogMeta::default(),
        };
        let purged_index = meta.last_purged.map(|p| p.index);

        let mut files = Vec::new();
        for dirent in fs::read_dir(&dir).map_err(io_error("list", &dir))? {
            let dirent = dirent.map_err(io_error("list", &dir))?;
            let name = dirent.file_name();
            let Some(first_index) = name
                .to_str()
                .and_then(|n| n.strip_suffix(SEGMENT_SUFFIX))
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            files.push((first_index, dirent.path()));
        }
        files.sort();

        let mut disk = LogDisk {
            dir,
            options,
            segments: BTreeMap::new(),
            active: None,
        };
        let mut entries = BTreeMap::new();
        let mut previous_index: Option<u64> = None;
        let file_count = files.len();
        for (position, (first_index, path)) in files.into_iter().enumerate() {
            let is_last = position + 1 == file_count;
            let bytes = fs::read(&path).map_err(io_error("read", &path))?;
            let mut segment = Segment {
                path: path.clone(),
                positions: BTreeMap::new(),
                len: 0,
            };
            let mut pos = 0usize;
            loop {
                match read_frame(&bytes, pos) {
                    Frame::End => break,
                    Frame::Invalid { reason } if is_last => {
                        tracing::warn!(
                            path = %path.display(),
                            %reason,
                            "cutting a torn write off the end of the metadata log"
                        );
                        let file = OpenOptions::new()
                            .write(true)
                            .open(&path)
                            .map_err(io_error("open", &path))?;
                        file.set_len(pos as u64)
                            .map_err(io_error("truncate", &path))?;
                        file.sync_all().map_err(io_error("sync", &path))?;
                        break;
                    }
                    Frame::Invalid { reason } => {
                        return Err(StoreError::Corrupt { path, reason });
                    }
                    Frame::Complete { payload, end } => {
                        let entry: LogEntry =
                            serde_json::from_slice(payload).map_err(|e| StoreError::Corrupt {
                                path: path.clone(),
                                reason: format!("entry at byte {pos}: {e}"),
                            })?;
                        let index = entry.log_id.index;
                        let in_order = match previous_index {
                            Some(previous) => index > previous,
                            None => true,
                        } && (pos > 0 || index == first_index);
                        if !in_order {
                            return Err(StoreError::Corrupt {
                                path,
                                reason: format!("entry {index} at byte {pos} is out of order"),
                            });
                        }
                        previous_index = Some(index);
                        segment.positions.insert(index, pos as u64);
                        if purged_index.is_none_or(|purged| index > purged) {
                            entries.insert(index, entry);
                        }
                        pos = end;
                    }
                }
            }
            segment.len = pos as u64;
            disk.segments.insert(first_index, segment);
        }
        // Finish a purge a crash interrupted, and drop an empty last segment.
        if let Some(purged) = purged_index {
            disk.delete_purged_segments(purged)?;
        }
        if let Some((&first, segment)) = disk.segments.iter().next_back() {
            if segment.positions.is_empty() {
                let path = segment.path.clone();
                disk.segments.remove(&first);
                fs::remove_file(&path).map_err(io_error("remove", &path))?;
                sync_dir(&disk.dir)?;
            }
        }
        Ok((disk, entries, meta))
    }

    fn write_meta(&mut self, meta: &LogMeta) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(meta).map_err(|source| StoreError::Encode {
            what: "the log meta",
            source,
        })?;
        write_atomically(&self.dir, META_FILE, &bytes)
    }

    fn last_index(&self) -> Option<u64> {
        self.segments
            .values()
            .next_back()
            .and_then(|s| s.positions.keys().next_back().copied())
    }

    /// Appends serialized entries (which must continue the log) and fsyncs them.
    fn append(&mut self, records: &[(u64, Vec<u8>)]) -> Result<(), StoreError> {
        // Openraft appends contiguous entries after truncating conflicts; the storage suite
        // also appends after gaps and below a purge, so only strict growth is required here.
        let mut previous = self.last_index();
        for (index, _) in records {
            if previous.is_some_and(|p| *index <= p) {
                return Err(StoreError::OutOfOrder {
                    index: *index,
                    reason: format!(
                        "it does not come after entry {}",
                        previous.unwrap_or_default()
                    ),
                });
            }
            previous = Some(*index);
        }
        let mut buffer = Vec::new();
        for (index, payload) in records {
            let rolling = self
                .segments
                .values()
                .next_back()
                .is_none_or(|s| s.len >= self.options.segment_bytes);
            if rolling {
                self.flush(&mut buffer)?;
                self.roll(*index)?;
            }
            let segment = self.active_segment()?;
            let offset = segment.len + buffer.len() as u64;
            segment.positions.insert(*index, offset);
            encode_frame(payload, &mut buffer);
            if segment.len + (buffer.len() as u64) >= self.options.segment_bytes {
                self.flush(&mut buffer)?;
            }
        }
        self.flush(&mut buffer)
    }

    fn active_segment(&mut self) -> Result<&mut Segment, StoreError> {
        let dir = self.dir.clone();
        self.segments
            .values_mut()
            .next_back()
            .ok_or_else(|| StoreError::Corrupt {
                path: dir,
                reason: "no active segment".into(),
            })
    }

    /// Writes `buffer` to the active segment and fsyncs it.
    fn flush(&mut self, buffer: &mut Vec<u8>) -> Result<(), StoreError> {
        if buffer.is_empty() {
            return Ok(());
        }
        let segment = self.active_segment()?;
        let path = segment.path.clone();
        if self.active.is_none() {
            let file = OpenOptions::new()
                .append(true)
                .open(&path)
                .map_err(io_error("open", &path))?;
            self.active = Some(file);
        }
        let file = self.active.as_mut().ok_or_else(|| StoreError::Corrupt {
            path: path.clone(),
            reason: "no active file".into(),
        })?;
        file.write_all(buffer)
            .map_err(io_error("append to", &path))?;
        file.sync_data().map_err(io_error("sync", &path))?;
        self.active_segment()?.len += buffer.len() as u64;
        buffer.clear();
        Ok(())
    }

    /// Starts a new segment whose first entry is `first_index`.
    fn roll(&mut self, first_index: u64) -> Result<(), StoreError> {
        let path = self.dir.join(format!("{first_index:020}{SEGMENT_SUFFIX}"));
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io_error("create", &path))?;
        // A leftover file of that name can only hold entries that were truncated away.
        file.set_len(0).map_err(io_error("truncate", &path))?;
        sync_dir(&self.dir)?;
        self.active = Some(file);
        self.segments.insert(
            first_index,
            Segment {
                path,
                positions: BTreeMap::new(),
                len: 0,
            },
        );
        Ok(())
    }

    /// Removes entries from `index` on: newest segments first, then cuts the one holding
    /// `index`, so a crash midway leaves a prefix of the log.
    fn truncate(&mut self, index: u64) -> Result<(), StoreError> {
        let doomed: Vec<u64> = self
            .segments
            .range(index..)
            .map(|(first, _)| *first)
            .rev()
            .collect();
        if !doomed.is_empty() {
            self.active = None;
        }
        for first in doomed {
            if let Some(segment) = self.segments.remove(&first) {
                fs::remove_file(&segment.path).map_err(io_error("remove", &segment.path))?;
            }
        }
        if let Some(segment) = self.segments.values_mut().next_back() {
            if let Some(&offset) = segment.positions.get(&index) {
                let file = OpenOptions::new()
                    .write(true)
                    .open(&segment.path)
                    .map_err(io_error("open", &segment.path))?;
                file.set_len(offset)
                    .map_err(io_error("truncate", &segment.path))?;
                file.sync_all().map_err(io_error("sync", &segment.path))?;
                segment.positions.split_off(&index);
                segment.len = offset;
                self.active = None;
            }
        }
        sync_dir(&self.dir)
    }

    /// Deletes segments holding only entries up to `purged`.
    fn delete_purged_segments(&mut self, purged: u64) -> Result<(), StoreError> {
        let last_index = self.last_index();
        let firsts: Vec<u64> = self.segments.keys().copied().collect();
        let mut removed = false;
        for (i, first) in firsts.iter().enumerate() {
            // A segment ends where the next begins; the last one ends at the last entry.
            let last_in_segment = match firsts.get(i + 1) {
                Some(next) => next.checked_sub(1),
                None => last_index,
            };
            if last_in_segment.is_none_or(|last| last <= purged) {
                if let Some(segment) = self.segments.remove(first) {
                    if i + 1 == firsts.len() {
                        self.active = None;
                    }
                    fs::remove_file(&segment.path).map_err(io_error("remove", &segment.path))?;
                    removed = true;
                }
            } else {
                break;
            }
        }
        if removed {
            sync_dir(&self.dir)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use openraft::storage::RaftLogStorageExt;
    use openraft::testing::log_id;
    use openraft::EntryPayload;

    use super::*;
    use crate::command::{Command, RecordKind};

    fn entry(term: u64, index: u64) -> LogEntry {
        Entry {
            log_id: log_id(term, 1, index),
            payload: EntryPayload::Normal(Command::PutRecord {
                kind: RecordKind::Acl,
                key: format!("key-{index}"),
                value: vec![index as u8; 40],
            }),
        }
    }

    async fn append(store: &mut LogStore, entries: Vec<LogEntry>) {
        store.blocking_append(entries).await.unwrap();
    }

    fn small() -> LogStoreOptions {
        LogStoreOptions { segment_bytes: 300 }
    }

    #[tokio::test]
    async fn reopen_recovers_entries_vote_and_purge_across_segments() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = LogStore::open(dir.path(), small()).await.unwrap();
        append(&mut store, (1..=20).map(|i| entry(1, i)).collect()).await;
        store.save_vote(&Vote::new(3, 2)).await.unwrap();
        store.purge(log_id(1, 1, 5)).await.unwrap();
        store.truncate(log_id(1, 1, 18)).await.unwrap();
        let segments = fs::read_dir(dir.path())
            .unwrap()
            .filter(|d| {
                d.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with(".log")
            })
            .count();
        assert!(segments > 1, "expected several segments, got {segments}");
        drop(store);

        let mut store = LogStore::open(dir.path(), small()).await.unwrap();
        assert_eq!(store.read_vote().await.unwrap(), Some(Vote::new(3, 2)));
        let state = store.get_log_state().await.unwrap();
        assert_eq!(state.last_purged_log_id, Some(log_id(1, 1, 5)));
        assert_eq!(state.last_log_id, Some(log_id(1, 1, 17)));
        let got = store.try_get_log_entries(0..100).await.unwrap();
        assert_eq!(got.first().map(|e| e.log_id.index), Some(6));
        assert_eq!(got.len(), 12);
        append(&mut store, vec![entry(2, 18)]).await;
        drop(store);
        let mut store = LogStore::open(dir.path(), small()).await.unwrap();
        assert_eq!(
            store.get_log_state().await.unwrap().last_log_id,
            Some(log_id(2, 1, 18))
        );
    }

    fn segment_files(dir: &std::path::Path) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = fs::read_dir(dir)
            .unwrap()
            .map(|d| d.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "log"))
            .collect();
        files.sort();
        files
    }

    #[tokio::test]
    async fn a_torn_last_entry_is_cut_off_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = LogStore::open(dir.path(), LogStoreOptions::default())
            .await
            .unwrap();
        append(&mut store, (1..=3).map(|i| entry(1, i)).collect()).await;
        drop(store);
        let last = segment_files(dir.path()).pop().unwrap();
        let len = fs::metadata(&last).unwrap().len();
        let file = OpenOptions::new().write(true).open(&last).unwrap();
        file.set_len(len - 5).unwrap();
        drop(file);

        let mut store = LogStore::open(dir.path(), LogStoreOptions::default())
            .await
            .unwrap();
        assert_eq!(
            store.get_log_state().await.unwrap().last_log_id,
            Some(log_id(1, 1, 2))
        );
        // The cut-off index can be written again and survives another restart.
        append(&mut store, vec![entry(2, 3)]).await;
        drop(store);
        let mut store = LogStore::open(dir.path(), LogStoreOptions::default())
            .await
            .unwrap();
        let got = store.try_get_log_entries(..).await.unwrap();
        assert_eq!(
            got.iter().map(|e| e.log_id).collect::<Vec<_>>(),
            vec![log_id(1, 1, 1), log_id(1, 1, 2), log_id(2, 1, 3)]
        );
    }

    #[tokio::test]
    async fn damage_before_the_last_segment_is_reported_as_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = LogStore::open(dir.path(), small()).await.unwrap();
        append(&mut store, (1..=20).map(|i| entry(1, i)).collect()).await;
        drop(store);
        let first = segment_files(dir.path()).remove(0);
        let mut bytes = fs::read(&first).unwrap();
        bytes[12] ^= 0xff;
        fs::write(&first, bytes).unwrap();
        match LogStore::open(dir.path(), small()).await {
            Err(StoreError::Corrupt { path, reason }) => {
                assert_eq!(path, first);
                assert!(reason.contains("checksum"), "{reason}");
            }
            Err(other) => panic!("unexpected error {other}"),
            Ok(_) => panic!("a corrupt segment was accepted"),
        }
    }

    #[tokio::test]
    async fn appending_at_or_below_the_last_entry_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = LogStore::open(dir.path(), LogStoreOptions::default())
            .await
            .unwrap();
        append(&mut store, (1..=3).map(|i| entry(1, i)).collect()).await;
        let err = store.blocking_append(vec![entry(2, 3)]).await.unwrap_err();
        assert!(
            err.to_string().contains("does not come after entry 3"),
            "{err}"
        );
        assert_eq!(store.try_get_log_entries(..).await.unwrap().len(), 3);
    }
}
