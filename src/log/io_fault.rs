//! Injectable I/O errors for the storage engine's durable steps: a write, fsync, rename or
//! truncation of a file under a chosen directory can be made to fail with `EIO`, `ENOSPC` or
//! any other errno, after a number of calls that still succeed. Writes can fail *short*
//! (half the bytes reach the file first), which is what a filling disk does.
//!
//! Tests arm a fault with [`inject`] and disarm it by dropping the returned [`FaultGuard`].
//! Faults apply only to paths under the directory they name, so tests running in parallel
//! threads do not see each other's faults. Nothing in the broker arms one: with no fault armed
//! each hook costs one relaxed atomic load.
//!
//! This is for I/O *errors* only; crash points (stopping the process mid-operation) are a
//! separate mechanism.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// The operation a fault targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Appending bytes to a segment, an index, a checkpoint or a snapshot.
    Write,
    /// `fsync` / `fdatasync`.
    Sync,
    /// Renaming a file or directory.
    Rename,
    /// Changing a file's length (truncation back to the last good offset).
    SetLen,
}

/// What to fail, and how.
#[derive(Debug, Clone)]
pub struct Fault {
    /// Only paths under this directory are affected.
    pub under: PathBuf,
    pub op: Op,
    /// Only files whose name ends with this (e.g. `.log`, `.index`, `checkpoint.tmp`).
    pub name_ends_with: Option<String>,
    /// Matching calls that still succeed before the first failure.
    pub skip: u32,
    /// How many matching calls fail after that (`u32::MAX`: until disarmed).
    pub times: u32,
    /// The `errno` returned (`libc`-style: 5 is EIO, 28 is ENOSPC).
    pub errno: i32,
    /// For writes: half the bytes reach the file before the error (a short write).
    pub short_write: bool,
}

pub const EIO: i32 = 5;
pub const ENOSPC: i32 = 28;

impl Fault {
    /// A fault on the next matching `op` under `under`, failing once with EIO.
    pub fn new(under: &Path, op: Op) -> Fault {
        Fault {
            under: under.to_path_buf(),
            op,
            name_ends_with: None,
            skip: 0,
            times: 1,
            errno: EIO,
            short_write: false,
        }
    }
    pub fn on_files_ending_with(mut self, suffix: &str) -> Fault {
        self.name_ends_with = Some(suffix.to_string());
        self
    }
    pub fn after(mut self, skip: u32) -> Fault {
        self.skip = skip;
        self
    }
    pub fn times(mut self, times: u32) -> Fault {
        self.times = times;
        self
    }
    pub fn errno(mut self, errno: i32) -> Fault {
        self.errno = errno;
        self
    }
    pub fn short_write(mut self) -> Fault {
        self.short_write = true;
        self
    }
}

struct Armed {
    id: u64,
    fault: Fault,
    seen: u32,
    failed: u32,
}

static ARMED: AtomicBool = AtomicBool::new(false);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);
static FAULTS: Mutex<Vec<Armed>> = Mutex::new(Vec::new());

/// Disarms its fault when dropped.
#[must_use = "the fault is disarmed when the guard is dropped"]
pub struct FaultGuard {
    id: u64,
}

impl FaultGuard {
    /// How many calls the fault failed so far.
    pub fn failures(&self) -> u32 {
        let faults = FAULTS.lock().unwrap_or_else(|e| e.into_inner());
        faults
            .iter()
            .find(|a| a.id == self.id)
            .map_or(0, |a| a.failed)
    }
}

impl Drop for FaultGuard {
    fn drop(&mut self) {
        let mut faults = FAULTS.lock().unwrap_or_else(|e| e.into_inner());
        faults.retain(|a| a.id != self.id);
        ARMED.store(!faults.is_empty(), Ordering::Release);
    }
}

/// Arms a fault until the guard is dropped.
pub fn inject(fault: Fault) -> FaultGuard {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let mut faults = FAULTS.lock().unwrap_or_else(|e| e.into_inner());
    faults.push(Armed {
        id,
        fault,
        seen: 0,
        failed: 0,
    });
    ARMED.store(true, Ordering::Release);
    FaultGuard { id }
}

/// The fault to apply to this call, if any: (errno, short write).
fn triggered(op: Op, path: &Path) -> Option<(i32, bool)> {
    if !ARMED.load(Ordering::Relaxed) {
        return None;
    }
    let mut faults = FAULTS.lock().unwrap_or_else(|e| e.into_inner());
    let name = path.file_name().map(|n| n.to_string_lossy().to_string());
    for a in faults.iter_mut() {
        let f = &a.fault;
        if f.op != op || !path.starts_with(&f.under) {
            continue;
        }
        if let Some(suffix) = &f.name_ends_with {
            if !name
                .as_deref()
                .is_some_and(|n| n.ends_with(suffix.as_str()))
            {
                continue;
            }
        }
        a.seen += 1;
        if a.seen > f.skip && a.failed < f.times {
            a.failed += 1;
            return Some((f.errno, f.short_write));
        }
    }
    None
}

/// Fails with the armed error for `op` on `path`, if any.
pub fn check(op: Op, path: &Path) -> io::Result<()> {
    match triggered(op, path) {
        Some((errno, _)) => Err(io::Error::from_raw_os_error(errno)),
        None => Ok(()),
    }
}

/// `write_all` to `file` (whose path `path` names, lazily) through the fault hook.
pub fn write_all(mut file: &File, path: impl FnOnce() -> PathBuf, bytes: &[u8]) -> io::Result<()> {
    if ARMED.load(Ordering::Relaxed) {
        if let Some((errno, short)) = triggered(Op::Write, &path()) {
            if short {
                file.write_all(&bytes[..bytes.len() / 2])?;
            }
            return Err(io::Error::from_raw_os_error(errno));
        }
    }
    file.write_all(bytes)
}

/// `fdatasync` through the fault hook.
pub fn sync_data(file: &File, path: impl FnOnce() -> PathBuf) -> io::Result<()> {
    if ARMED.load(Ordering::Relaxed) {
        check(Op::Sync, &path())?;
    }
    file.sync_data()
}

/// `fsync` through the fault hook.
pub fn sync_all(file: &File, path: impl FnOnce() -> PathBuf) -> io::Result<()> {
    if ARMED.load(Ordering::Relaxed) {
        check(Op::Sync, &path())?;
    }
    file.sync_all()
}

/// `ftruncate` through the fault hook.
pub fn set_len(file: &File, path: impl FnOnce() -> PathBuf, len: u64) -> io::Result<()> {
    if ARMED.load(Ordering::Relaxed) {
        check(Op::SetLen, &path())?;
    }
    file.set_len(len)
}

/// `rename` through the fault hook (the source path is matched).
pub fn rename(from: &Path, to: &Path) -> io::Result<()> {
    check(Op::Rename, from)?;
    std::fs::rename(from, to)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_hits_only_its_directory_and_only_after_skip() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let fa = File::create(a.path().join("x.log")).unwrap();
        let fb = File::create(b.path().join("x.log")).unwrap();
        let guard = inject(Fault::new(a.path(), Op::Write).after(1).short_write());
        write_all(&fb, || b.path().join("x.log"), b"abcd").unwrap();
        write_all(&fa, || a.path().join("x.log"), b"abcd").unwrap();
        let e = write_all(&fa, || a.path().join("x.log"), b"wxyz").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(EIO));
        assert_eq!(guard.failures(), 1);
        // Failed once: the next write succeeds.
        write_all(&fa, || a.path().join("x.log"), b"1234").unwrap();
        assert_eq!(
            std::fs::read(a.path().join("x.log")).unwrap(),
            b"abcdwx1234"
        );
        drop(guard);
        assert!(!ARMED.load(Ordering::Relaxed) || !FAULTS.lock().unwrap().is_empty());
    }
}
