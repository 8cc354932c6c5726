//! The remote read cache's disk tier: one file per chunk in a directory, read through the page
//! cache and sent to consumers with `sendfile`, as the broker sends its local segments.
//!
//! A chunk file is a small header (magic, payload length, CRC-32C of the payload, the cache
//! key) followed by the chunk's bytes. Files are written under a temporary name and renamed,
//! and never change after that; eviction (least recently used first, when the tier holds more
//! than its capacity) unlinks them, so a reader holding one open keeps its bytes. Nothing is
//! fsynced: after a crash a file may be short or hold garbage, so the files found at start
//! are indexed from their headers and each one's CRC is checked the first time it is read;
//! a file that fails is deleted and the chunk fetched again. Files written by this process
//! are trusted (they are read back from the page cache).
//!
//! The tier never takes the last of its file system: a write that would leave less than
//! [`MIN_FREE_PERCENT`] of it free first evicts the tier's own files to make room, and is
//! skipped when that is not enough. By default the cache shares its disk with the log, whose
//! appends come first.
//!
//! Why files: a chunk read from the page cache goes to the socket without passing through the
//! broker's memory, so reading old data a second time costs the broker what reading local
//! data costs (see the reader's module docs for what a block engine costs instead).

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

const MAGIC: &[u8; 4] = b"SCF1";
/// magic, payload length (u32), CRC-32C (u32), key length (u16).
const FIXED_HEADER: usize = 4 + 4 + 4 + 2;
const TMP_SUFFIX: &str = ".tmp";
const FILE_SUFFIX: &str = ".chunk";

/// The share of its file system the tier leaves free (the broker's rehydration keeps the
/// same).
pub const MIN_FREE_PERCENT: u64 = 10;

/// A chunk's bytes in a cache file.
#[derive(Debug, Clone)]
pub struct FileRange {
    pub file: Arc<File>,
    pub position: u64,
    pub len: usize,
}

impl FileRange {
    pub fn slice(&self, from: usize, to: usize) -> FileRange {
        debug_assert!(from <= to && to <= self.len);
        FileRange {
            file: self.file.clone(),
            position: self.position + from as u64,
            len: to - from,
        }
    }

    pub fn read(&self) -> std::io::Result<Vec<u8>> {
        let mut buf = vec![0u8; self.len];
        self.file.read_exact_at(&mut buf, self.position)?;
        Ok(buf)
    }
}

#[derive(Debug, Default)]
pub struct DiskTierMetrics {
    pub files_written: AtomicU64,
    pub bytes_written: AtomicU64,
    pub files_evicted: AtomicU64,
    /// Files found unreadable, short or with a bad CRC (deleted).
    pub files_rejected: AtomicU64,
    pub write_errors: AtomicU64,
    /// Chunks not written because the file system was short of free space.
    pub skipped_for_space: AtomicU64,
    /// Chunks fetched but never written: memory evicted them before the background writer
    /// reached them, or its queue was full (a machine too busy to fill the cache).
    pub unwritten: AtomicU64,
    pub bytes: AtomicU64,
}

struct Entry {
    name: String,
    /// Payload bytes.
    len: u64,
    /// Its place in the LRU order.
    tick: u64,
    /// Whether the payload's CRC has been checked (or the file written by this process).
    verified: bool,
}

#[derive(Default)]
struct State {
    entries: HashMap<String, Entry>,
    lru: BTreeMap<u64, String>,
    tick: u64,
    /// Bytes of the files indexed (headers included).
    used: u64,
    next_name: u64,
}

impl State {
    fn touch(&mut self, key: &str) {
        self.tick += 1;
        let tick = self.tick;
        if let Some(e) = self.entries.get_mut(key) {
            self.lru.remove(&e.tick);
            e.tick = tick;
            self.lru.insert(tick, key.to_string());
        }
    }

    /// Drops `key` from the index; the caller unlinks the file it returns.
    fn forget(&mut self, key: &str) -> Option<String> {
        let e = self.entries.remove(key)?;
        self.lru.remove(&e.tick);
        self.used = self.used.saturating_sub(file_size(key, e.len));
        Some(e.name)
    }
}

fn file_size(key: &str, len: u64) -> u64 {
    (FIXED_HEADER + key.len()) as u64 + len
}

/// A file system's (total, free) bytes for a path in it.
type SpaceOf = Box<dyn Fn(&Path) -> Option<(u64, u64)> + Send + Sync>;

pub struct DiskTier {
    dir: PathBuf,
    capacity: u64,
    min_free_percent: u64,
    /// The file system's (total, free) bytes: [`free_space`] (tests measure their own).
    space: SpaceOf,
    state: Mutex<State>,
    pub metrics: DiskTierMetrics,
}

impl DiskTier {
    /// Opens the tier in `dir` (created if missing): indexes the chunk files there, removes
    /// temporary files and files whose header is unreadable, and evicts down to `capacity`.
    pub fn open(dir: &Path, capacity: u64) -> std::io::Result<DiskTier> {
        std::fs::create_dir_all(dir)?;
        let tier = DiskTier {
            dir: dir.to_path_buf(),
            capacity,
            min_free_percent: MIN_FREE_PERCENT,
            space: Box::new(free_space),
            state: Mutex::new(State::default()),
            metrics: DiskTierMetrics::default(),
        };
        let mut found = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            let Some(stem) = name.strip_suffix(FILE_SUFFIX) else {
                if name.ends_with(TMP_SUFFIX) {
                    let _ = std::fs::remove_file(&path);
                }
                // A foyer block engine's files (a cache directory used by an older Strata)
                // are of no use; anything else is not ours.
                if name.starts_with("foyer-storage-direct-fs-") {
                    let _ = std::fs::remove_file(&path);
                }
                continue;
            };
            // Names are sequence numbers this process continues from: one near the top of
            // the range (not ours) must not make them wrap onto files in use.
            let seq = u64::from_str_radix(stem, 16).ok().filter(|&n| n < 1 << 62);
            let modified = entry
                .metadata()
                .and_then(|m| m.modified())
                .unwrap_or(std::time::UNIX_EPOCH);
            match (seq, read_header(&path)) {
                (Some(seq), Ok(Some((key, len)))) => found.push((modified, seq, name, key, len)),
                _ => {
                    tier.metrics.files_rejected.fetch_add(1, Ordering::Relaxed);
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        // Oldest first, so the LRU order survives a restart roughly.
        found.sort();
        let mut evict = Vec::new();
        {
            let mut st = tier.lock();
            for (_, seq, name, key, len) in found {
                st.next_name = st.next_name.max(seq + 1);
                if let Some(old) = st.forget(&key) {
                    evict.push(old);
                }
                st.tick += 1;
                let tick = st.tick;
                st.used += file_size(&key, len);
                st.lru.insert(tick, key.clone());
                st.entries.insert(
                    key,
                    Entry {
                        name,
                        len,
                        tick,
                        verified: false,
                    },
                );
            }
            evict.extend(tier.evict_locked(&mut st, 0));
            tier.metrics.bytes.store(st.used, Ordering::Relaxed);
        }
        for name in evict {
            let _ = std::fs::remove_file(dir.join(name));
        }
        Ok(tier)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Removes least recently used entries until `incoming` more bytes fit; returns the file
    /// names to unlink.
    fn evict_locked(&self, st: &mut State, incoming: u64) -> Vec<String> {
        let mut names = Vec::new();
        while st.used + incoming > self.capacity {
            let Some((_, key)) = st.lru.pop_first() else {
                break;
            };
            if let Some(e) = st.entries.remove(&key) {
                st.used = st.used.saturating_sub(file_size(&key, e.len));
                names.push(e.name);
                self.metrics.files_evicted.fetch_add(1, Ordering::Relaxed);
            }
        }
        names
    }

    /// The chunks indexed, with their lengths.
    pub fn entries(&self) -> Vec<(String, u64)> {
        let st = self.lock();
        st.entries.iter().map(|(k, e)| (k.clone(), e.len)).collect()
    }

    /// Whether the tier has `key` (`None`: no), and whether its file still needs the check a
    /// file found at start gets (a whole read: do it off the async threads).
    pub fn lookup(&self, key: &str) -> Option<bool> {
        self.lock().entries.get(key).map(|e| !e.verified)
    }

    pub fn contains(&self, key: &str) -> bool {
        self.lock().entries.contains_key(key)
    }

    /// The chunk `key` if the tier has it with `len` payload bytes. Blocking (an `open`, and
    /// for a file from before this start, a read of the whole file to check its CRC).
    pub fn get(&self, key: &str, len: u64) -> Option<FileRange> {
        let (name, verified) = {
            let mut st = self.lock();
            let e = st.entries.get(key)?;
            let found = (e.name.clone(), e.verified, e.len);
            if found.2 != len {
                // The manifest says otherwise: the file is not this chunk's.
                let name = st.forget(key);
                drop(st);
                self.reject(name);
                return None;
            }
            st.touch(key);
            (found.0, found.1)
        };
        let position = (FIXED_HEADER + key.len()) as u64;
        let file = match File::open(self.dir.join(&name)) {
            Ok(f) => f,
            Err(e) => {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(file = %name, error = %e, "remote cache file unreadable");
                }
                let name = self.forget_if(key, &name);
                self.reject(name);
                return None;
            }
        };
        if !verified {
            if let Err(why) = verify(&file, key, len) {
                tracing::warn!(file = %name, key, why, "remote cache file rejected");
                let name = self.forget_if(key, &name);
                self.reject(name);
                return None;
            }
            if let Some(e) = self.lock().entries.get_mut(key) {
                if e.name == name {
                    e.verified = true;
                }
            }
        }
        Some(FileRange {
            file: Arc::new(file),
            position,
            len: len as usize,
        })
    }

    /// Forgets `key` if its entry is still file `name` (not replaced meanwhile).
    fn forget_if(&self, key: &str, name: &str) -> Option<String> {
        let mut st = self.lock();
        if st.entries.get(key).is_some_and(|e| e.name == name) {
            st.forget(key)
        } else {
            None
        }
    }

    fn reject(&self, name: Option<String>) {
        if let Some(name) = name {
            self.metrics.files_rejected.fetch_add(1, Ordering::Relaxed);
            let _ = std::fs::remove_file(self.dir.join(name));
        }
        self.metrics
            .bytes
            .store(self.lock().used, Ordering::Relaxed);
    }

    /// Writes chunk `key`. Blocking. A failure (a full disk) leaves the tier without it and
    /// is counted; the caller keeps serving the chunk from memory.
    pub fn put(&self, key: &str, payload: &[u8]) -> std::io::Result<()> {
        let size = file_size(key, payload.len() as u64);
        if size > self.capacity
            || key.len() > u16::MAX as usize
            || payload.len() > u32::MAX as usize
        {
            return Ok(());
        }
        let (seq, evict) = {
            let mut st = self.lock();
            if st.entries.contains_key(key) {
                return Ok(());
            }
            // What the file system lacks to keep its free share after this file: the tier
            // gives back that much of its own first.
            let short = match (self.space)(&self.dir) {
                Some((total, free)) => {
                    (total / 100 * self.min_free_percent + size).saturating_sub(free)
                }
                None => 0,
            };
            if short > st.used {
                self.metrics
                    .skipped_for_space
                    .fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
            let evict = if short > 0 {
                // Down to `used - short`.
                let keep = st.used - short;
                self.evict_locked(&mut st, self.capacity.saturating_sub(keep))
            } else {
                Vec::new()
            };
            st.next_name += 1;
            (st.next_name - 1, evict)
        };
        for name in evict {
            let _ = std::fs::remove_file(self.dir.join(name));
        }
        let name = format!("{seq:016x}{FILE_SUFFIX}");
        let tmp = self.dir.join(format!("{seq:016x}{TMP_SUFFIX}"));
        let written = (|| {
            let mut f = File::create(&tmp)?;
            let mut header = Vec::with_capacity(FIXED_HEADER + key.len());
            header.extend_from_slice(MAGIC);
            header.extend_from_slice(&(payload.len() as u32).to_be_bytes());
            header.extend_from_slice(&crc32c::crc32c(payload).to_be_bytes());
            header.extend_from_slice(&(key.len() as u16).to_be_bytes());
            header.extend_from_slice(key.as_bytes());
            f.write_all(&header)?;
            f.write_all(payload)?;
            std::fs::rename(&tmp, self.dir.join(&name))
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            self.metrics.write_errors.fetch_add(1, Ordering::Relaxed);
            return Err(e);
        }
        let evict = {
            let mut st = self.lock();
            let mut evict = st.forget(key).into_iter().collect::<Vec<_>>();
            evict.extend(self.evict_locked(&mut st, size));
            st.tick += 1;
            let tick = st.tick;
            st.used += size;
            st.lru.insert(tick, key.to_string());
            st.entries.insert(
                key.to_string(),
                Entry {
                    name,
                    len: payload.len() as u64,
                    tick,
                    verified: true,
                },
            );
            self.metrics.bytes.store(st.used, Ordering::Relaxed);
            evict
        };
        for name in evict {
            let _ = std::fs::remove_file(self.dir.join(name));
        }
        self.metrics.files_written.fetch_add(1, Ordering::Relaxed);
        self.metrics
            .bytes_written
            .fetch_add(size, Ordering::Relaxed);
        Ok(())
    }
}

/// The total and free bytes (for an unprivileged writer) of the file system holding `dir`
/// (Kafka's `FileStore.getTotalSpace` / `getUsableSpace`). The broker's log uses it too.
pub fn free_space(dir: &Path) -> Option<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut s = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `path` is a valid NUL-terminated string and `s` is written by statvfs before
    // it is read (only on success).
    let s = unsafe {
        if libc::statvfs(path.as_ptr(), s.as_mut_ptr()) != 0 {
            return None;
        }
        s.assume_init()
    };
    let block = s.f_frsize as u64;
    Some((
        (s.f_blocks as u64).saturating_mul(block),
        (s.f_bavail as u64).saturating_mul(block),
    ))
}

/// The key and payload length in a chunk file's header, `None` when it is not one whole
/// chunk file (bad magic, a length that disagrees with the file's size).
fn read_header(path: &Path) -> std::io::Result<Option<(String, u64)>> {
    let file = File::open(path)?;
    let size = file.metadata()?.len();
    let mut fixed = [0u8; FIXED_HEADER];
    if size < FIXED_HEADER as u64 {
        return Ok(None);
    }
    file.read_exact_at(&mut fixed, 0)?;
    if &fixed[0..4] != MAGIC {
        return Ok(None);
    }
    let len = u32::from_be_bytes(fixed[4..8].try_into().unwrap_or_default()) as u64;
    let key_len = u16::from_be_bytes(fixed[12..14].try_into().unwrap_or_default()) as usize;
    if size != (FIXED_HEADER + key_len) as u64 + len {
        return Ok(None);
    }
    let mut key = vec![0u8; key_len];
    file.read_exact_at(&mut key, FIXED_HEADER as u64)?;
    Ok(String::from_utf8(key).ok().map(|k| (k, len)))
}

/// Checks a file found at start: its header names `key` with `len` bytes and the payload's
/// CRC matches.
fn verify(file: &File, key: &str, len: u64) -> Result<(), &'static str> {
    let mut fixed = [0u8; FIXED_HEADER];
    file.read_exact_at(&mut fixed, 0)
        .map_err(|_| "short header")?;
    let crc = u32::from_be_bytes(fixed[8..12].try_into().unwrap_or_default());
    let stored_len = u32::from_be_bytes(fixed[4..8].try_into().unwrap_or_default()) as u64;
    let key_len = u16::from_be_bytes(fixed[12..14].try_into().unwrap_or_default()) as usize;
    if &fixed[0..4] != MAGIC || stored_len != len || key_len != key.len() {
        return Err("header does not match");
    }
    let mut stored_key = vec![0u8; key_len];
    file.read_exact_at(&mut stored_key, FIXED_HEADER as u64)
        .map_err(|_| "short key")?;
    if stored_key != key.as_bytes() {
        return Err("another chunk's file");
    }
    let mut payload = vec![0u8; len as usize];
    file.read_exact_at(&mut payload, (FIXED_HEADER + key_len) as u64)
        .map_err(|_| "short payload")?;
    if crc32c::crc32c(&payload) != crc {
        return Err("CRC mismatch");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(n: usize, seed: u8) -> Vec<u8> {
        (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
    }

    #[test]
    fn a_written_chunk_is_read_back_from_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let tier = DiskTier::open(dir.path(), 1 << 20).unwrap();
        let p = payload(10_000, 1);
        tier.put("t/0/a@0", &p).unwrap();
        let r = tier.get("t/0/a@0", 10_000).expect("cached");
        assert_eq!(r.read().unwrap(), p);
        assert_eq!(r.slice(100, 200).read().unwrap(), &p[100..200]);
        assert!(tier.get("t/0/a@1", 10_000).is_none());
        // A length the manifest disagrees with is not served, and the file goes.
        assert!(tier.get("t/0/a@0", 9_999).is_none());
        assert!(!tier.contains("t/0/a@0"));
    }

    #[test]
    fn least_recently_used_chunks_are_evicted_beyond_capacity() {
        let dir = tempfile::tempdir().unwrap();
        let tier = DiskTier::open(dir.path(), 3 * 10_100).unwrap();
        for i in 0..3 {
            tier.put(&format!("k{i}"), &payload(10_000, i)).unwrap();
        }
        // k0 is read: k1 is now the oldest.
        assert!(tier.get("k0", 10_000).is_some());
        tier.put("k3", &payload(10_000, 3)).unwrap();
        assert!(tier.contains("k0") && !tier.contains("k1"));
        assert!(tier.contains("k2") && tier.contains("k3"));
        let files = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(files, 3, "the evicted chunk's file is unlinked");
        assert!(tier.metrics.bytes.load(Ordering::Relaxed) <= 3 * 10_100);
        // A chunk larger than the whole tier is not written at all.
        tier.put("big", &payload(40_000, 9)).unwrap();
        assert!(!tier.contains("big") && tier.contains("k3"));
    }

    #[test]
    fn an_evicted_file_stays_readable_by_whoever_holds_it() {
        let dir = tempfile::tempdir().unwrap();
        let tier = DiskTier::open(dir.path(), 10_100).unwrap();
        let p = payload(10_000, 7);
        tier.put("a", &p).unwrap();
        let held = tier.get("a", 10_000).unwrap();
        tier.put("b", &payload(10_000, 8)).unwrap();
        assert!(!tier.contains("a"));
        assert_eq!(held.read().unwrap(), p);
    }

    #[test]
    fn files_survive_a_restart_and_damaged_ones_are_refetched() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, c) = (payload(5_000, 1), payload(5_000, 2), payload(5_000, 3));
        {
            let tier = DiskTier::open(dir.path(), 1 << 20).unwrap();
            tier.put("a", &a).unwrap();
            tier.put("b", &b).unwrap();
            tier.put("c", &c).unwrap();
        }
        // A crash: a temporary file left behind, one file with a flipped payload byte, one
        // cut short, and a stray file of someone else's.
        let mut names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        names.sort();
        let flip = &names[1];
        let mut bytes = std::fs::read(flip).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(flip, &bytes).unwrap();
        let cut = &names[2];
        let bytes = std::fs::read(cut).unwrap();
        std::fs::write(cut, &bytes[..bytes.len() - 10]).unwrap();
        std::fs::write(dir.path().join("0000000000000009.tmp"), b"partial").unwrap();
        std::fs::write(dir.path().join("notes.txt"), b"keep").unwrap();

        let tier = DiskTier::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(tier.get("a", 5_000).unwrap().read().unwrap(), a);
        assert!(tier.get("b", 5_000).is_none(), "bad CRC");
        assert!(tier.get("c", 5_000).is_none(), "short file");
        assert_eq!(tier.metrics.files_rejected.load(Ordering::Relaxed), 2);
        assert!(!dir.path().join("0000000000000009.tmp").exists());
        assert!(dir.path().join("notes.txt").exists());
        // Refetched chunks get new names, not the rejected ones'.
        tier.put("b", &b).unwrap();
        assert_eq!(tier.get("b", 5_000).unwrap().read().unwrap(), b);
        let files = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(files, 3, "a, b and notes.txt");
    }

    /// A file system short of free space: the tier gives back its own least recently used
    /// files to make room, and takes nothing when its own files are not enough.
    #[test]
    fn a_disk_short_of_free_space_gets_the_cache_files_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut tier = DiskTier::open(dir.path(), 1 << 20).unwrap();
        for (i, k) in ["a", "b", "c"].iter().enumerate() {
            tier.put(k, &payload(10_000, i as u8)).unwrap();
        }
        let one = file_size("a", 10_000);
        // 10% of 1 MB must stay free and 100,000 bytes + one file are: exactly room for
        // one more.
        tier.space = Box::new(move |_| Some((1_000_000, 100_000 + one)));
        tier.put("d", &payload(10_000, 3)).unwrap();
        assert!(["a", "b", "c", "d"].iter().all(|k| tier.contains(k)));
        // Now one and a half files short: the two oldest go, then the write.
        tier.space = Box::new(move |_| Some((1_000_000, 100_000 - one / 2)));
        tier.put("e", &payload(10_000, 4)).unwrap();
        assert!(!tier.contains("a") && !tier.contains("b"));
        assert!(["c", "d", "e"].iter().all(|k| tier.contains(k)));
        // Short of more than the tier holds: nothing is written, nothing is evicted in vain.
        tier.space = Box::new(move |_| Some((1_000_000, 0)));
        tier.put("f", &payload(10_000, 5)).unwrap();
        assert!(!tier.contains("f"));
        assert!(["c", "d", "e"].iter().all(|k| tier.contains(k)));
        assert_eq!(tier.metrics.skipped_for_space.load(Ordering::Relaxed), 1);
        let files = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(files, 3);
    }

    #[test]
    fn a_write_that_fails_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let tier = DiskTier::open(&dir.path().join("cache"), 1 << 20).unwrap();
        std::fs::remove_dir_all(dir.path().join("cache")).unwrap();
        assert!(tier.put("a", &payload(100, 1)).is_err());
        assert!(!tier.contains("a"));
        assert_eq!(tier.metrics.write_errors.load(Ordering::Relaxed), 1);
    }
}
