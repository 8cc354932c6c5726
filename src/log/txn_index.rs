//! Kafka's `.txnindex`: one file per segment listing the aborted transactions whose ABORT
//! marker is in that segment, so a `read_committed` fetch can tell consumers which records to
//! drop. Entries are 34 bytes: version (i16, 0), producer id (i64), first offset (i64), last
//! offset (i64, the marker), last stable offset (i64, when the marker was written).

use std::fs::{self, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use super::io_fault;

use super::segment::file_stem;

const ENTRY_LEN: usize = 34;
const VERSION: i16 = 0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    pub last_offset: i64,
    pub last_stable_offset: i64,
}

pub fn path(dir: &Path, segment_base: i64) -> PathBuf {
    dir.join(format!("{}.txnindex", file_stem(segment_base)))
}

/// Reads a segment's index; a missing file is an empty index, a torn tail is ignored.
pub fn read(path: &Path) -> io::Result<Vec<AbortedTxn>> {
    let raw = match fs::read(path) {
        Ok(r) => r,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    parse(&raw).map_err(|m| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {m}", path.display()),
        )
    })
}

/// Parses index bytes (a local file's, or the `.txnindex` part of a remote segment bundle);
/// a torn tail is ignored.
pub fn parse(raw: &[u8]) -> Result<Vec<AbortedTxn>, String> {
    let i64_at = |e: &[u8], a: usize| i64::from_be_bytes(e[a..a + 8].try_into().unwrap_or([0; 8]));
    let mut out = Vec::with_capacity(raw.len() / ENTRY_LEN);
    for e in raw.chunks_exact(ENTRY_LEN) {
        if i16::from_be_bytes([e[0], e[1]]) != VERSION {
            return Err("unsupported transaction index entry version".into());
        }
        out.push(AbortedTxn {
            producer_id: i64_at(e, 2),
            first_offset: i64_at(e, 10),
            last_offset: i64_at(e, 18),
            last_stable_offset: i64_at(e, 26),
        });
    }
    Ok(out)
}

/// Appends one entry to a segment's index. A torn entry left by an earlier failed append
/// (a full disk) is cut off first, so entries stay aligned; a failed append cuts its own part
/// off again when it can.
pub fn append(path: &Path, t: &AbortedTxn) -> io::Result<()> {
    let mut e = Vec::with_capacity(ENTRY_LEN);
    e.extend_from_slice(&VERSION.to_be_bytes());
    e.extend_from_slice(&t.producer_id.to_be_bytes());
    e.extend_from_slice(&t.first_offset.to_be_bytes());
    e.extend_from_slice(&t.last_offset.to_be_bytes());
    e.extend_from_slice(&t.last_stable_offset.to_be_bytes());
    let mut f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?;
    let len = f.metadata()?.len();
    let whole = len - len % ENTRY_LEN as u64;
    if whole != len {
        io_fault::set_len(&f, || path.to_path_buf(), whole)?;
    }
    f.seek(SeekFrom::Start(whole))?;
    let written = io_fault::write_all(&f, || path.to_path_buf(), &e);
    if written.is_err() {
        let _ = f.set_len(whole);
    }
    written
}

/// Rewrites a segment's index with `entries` (recovery dropped some).
pub fn rewrite(path: &Path, entries: &[AbortedTxn]) -> io::Result<()> {
    let tmp = path.with_extension("txnindex.tmp");
    let _ = fs::remove_file(&tmp);
    for t in entries {
        if let Err(e) = append(&tmp, t) {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
    }
    if entries.is_empty() {
        match fs::remove_file(path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    } else {
        fs::rename(tmp, path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn entries_round_trip_and_torn_tails_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let p = path(dir.path(), 0);
        assert!(read(&p).unwrap().is_empty());
        let a = AbortedTxn {
            producer_id: 7,
            first_offset: 10,
            last_offset: 20,
            last_stable_offset: 21,
        };
        let b = AbortedTxn {
            producer_id: 8,
            first_offset: 15,
            last_offset: 30,
            last_stable_offset: 31,
        };
        append(&p, &a).unwrap();
        append(&p, &b).unwrap();
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(&[0, 0, 1]).unwrap();
        assert_eq!(read(&p).unwrap(), vec![a, b]);
        assert_eq!(fs::metadata(&p).unwrap().len(), 71);
        rewrite(&p, &[b]).unwrap();
        assert_eq!(read(&p).unwrap(), vec![b]);
        rewrite(&p, &[]).unwrap();
        assert!(!p.exists());
    }

    #[test]
    fn an_append_after_a_torn_one_stays_aligned() {
        use crate::log::io_fault::{inject, Fault, Op, ENOSPC};
        let dir = tempfile::tempdir().unwrap();
        let p = path(dir.path(), 0);
        let t = |pid| AbortedTxn {
            producer_id: pid,
            first_offset: pid * 10,
            last_offset: pid * 10 + 5,
            last_stable_offset: pid * 10 + 6,
        };
        append(&p, &t(1)).unwrap();
        {
            let _full = inject(
                Fault::new(dir.path(), Op::Write)
                    .on_files_ending_with(".txnindex")
                    .errno(ENOSPC)
                    .short_write(),
            );
            assert!(append(&p, &t(2)).is_err());
        }
        assert_eq!(
            fs::metadata(&p).unwrap().len(),
            ENTRY_LEN as u64,
            "cut back"
        );
        // A torn tail from a crash is cut off by the next append.
        OpenOptions::new()
            .append(true)
            .open(&p)
            .unwrap()
            .write_all(&[0, 0, 1])
            .unwrap();
        append(&p, &t(3)).unwrap();
        assert_eq!(read(&p).unwrap(), vec![t(1), t(3)]);
    }
}
