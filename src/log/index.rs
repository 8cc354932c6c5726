//! Sparse `.index` (offset -> file position) and `.timeindex` (timestamp -> offset) files in
//! Kafka's format: big-endian fixed-size entries with offsets relative to the segment's base.
//!
//! Entries are kept in memory for binary search and appended to the file as they are added; a
//! sealed segment's index file therefore holds exactly its entries (Kafka preallocates and trims
//! on roll; the resulting file is the same). Indexes are derived data: recovery rebuilds them
//! from the `.log` whenever they are missing or fail a sanity check.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use super::io_fault;

pub const OFFSET_ENTRY_LEN: usize = 8;
pub const TIME_ENTRY_LEN: usize = 12;

/// An offset index entry: the first offset of a batch and that batch's position in the `.log`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetPosition {
    pub offset: i64,
    pub position: u32,
}

/// A time index entry: the max timestamp seen so far and the offset where it was seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampOffset {
    pub timestamp: i64,
    pub offset: i64,
}

pub struct OffsetIndex {
    path: PathBuf,
    file: File,
    base_offset: i64,
    entries: Vec<(u32, u32)>,
    max_entries: usize,
}

impl OffsetIndex {
    /// Opens (or creates) the index and loads its entries. Entries that do not increase are a
    /// sign of corruption and are reported as `InvalidData` so the caller rebuilds.
    pub fn open(path: &Path, base_offset: i64, max_bytes: usize) -> io::Result<OffsetIndex> {
        let mut file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(path)?;
        let mut raw = Vec::new();
        file.read_to_end(&mut raw)?;
        if raw.len() % OFFSET_ENTRY_LEN != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "index size not a multiple of 8",
            ));
        }
        let mut entries = Vec::with_capacity(raw.len() / OFFSET_ENTRY_LEN);
        for e in raw.chunks_exact(OFFSET_ENTRY_LEN) {
            let rel = u32::from_be_bytes([e[0], e[1], e[2], e[3]]);
            let pos = u32::from_be_bytes([e[4], e[5], e[6], e[7]]);
            if let Some(&(last_rel, last_pos)) = entries.last() {
                if rel <= last_rel || pos <= last_pos {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "index not increasing",
                    ));
                }
            }
            entries.push((rel, pos));
        }
        Ok(OffsetIndex {
            path: path.to_path_buf(),
            file,
            base_offset,
            entries,
            max_entries: (max_bytes / OFFSET_ENTRY_LEN).max(1),
        })
    }

    pub fn is_full(&self) -> bool {
        self.entries.len() >= self.max_entries
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn last(&self) -> Option<OffsetPosition> {
        self.entries.last().map(|&(rel, position)| OffsetPosition {
            offset: self.base_offset + rel as i64,
            position,
        })
    }

    pub fn append(&mut self, offset: i64, position: u32) -> io::Result<()> {
        let rel = (offset - self.base_offset) as u32;
        if let Some(&(last_rel, _)) = self.entries.last() {
            if rel <= last_rel {
                return Ok(());
            }
        }
        let mut e = [0u8; OFFSET_ENTRY_LEN];
        e[..4].copy_from_slice(&rel.to_be_bytes());
        e[4..].copy_from_slice(&position.to_be_bytes());
        io_fault::write_all(&self.file, || self.path.clone(), &e)?;
        self.entries.push((rel, position));
        Ok(())
    }

    /// The entry with the largest offset <= `offset`, or the segment start.
    pub fn lookup(&self, offset: i64) -> OffsetPosition {
        let rel = offset - self.base_offset;
        if rel < 0 {
            return OffsetPosition {
                offset: self.base_offset,
                position: 0,
            };
        }
        let idx = self.entries.partition_point(|&(r, _)| (r as i64) <= rel);
        if idx == 0 {
            OffsetPosition {
                offset: self.base_offset,
                position: 0,
            }
        } else {
            let (r, position) = self.entries[idx - 1];
            OffsetPosition {
                offset: self.base_offset + r as i64,
                position,
            }
        }
    }

    /// Drops entries at or beyond `offset` (log truncation).
    pub fn truncate_to(&mut self, offset: i64) -> io::Result<()> {
        let rel = offset - self.base_offset;
        let keep = self.entries.partition_point(|&(r, _)| (r as i64) < rel);
        self.truncate_entries(keep)
    }

    /// Keeps the first `len` entries, in memory and in the file (also cutting a partially
    /// written entry after a failed append).
    pub fn truncate_entries(&mut self, len: usize) -> io::Result<()> {
        io_fault::set_len(
            &self.file,
            || self.path.clone(),
            (len * OFFSET_ENTRY_LEN) as u64,
        )?;
        self.entries.truncate(len);
        Ok(())
    }

    pub fn flush(&self) -> io::Result<()> {
        io_fault::sync_data(&self.file, || self.path.clone())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

pub struct TimeIndex {
    path: PathBuf,
    file: File,
    base_offset: i64,
    entries: Vec<(i64, u32)>,
    max_entries: usize,
}

impl TimeIndex {
    pub fn open(path: &Path, base_offset: i64, max_bytes: usize) -> io::Result<TimeIndex> {
        let mut file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(path)?;
        let mut raw = Vec::new();
        file.read_to_end(&mut raw)?;
        if raw.len() % TIME_ENTRY_LEN != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "time index size not a multiple of 12",
            ));
        }
        let mut entries = Vec::with_capacity(raw.len() / TIME_ENTRY_LEN);
        for e in raw.chunks_exact(TIME_ENTRY_LEN) {
            let mut ts = [0u8; 8];
            ts.copy_from_slice(&e[..8]);
            let ts = i64::from_be_bytes(ts);
            let rel = u32::from_be_bytes([e[8], e[9], e[10], e[11]]);
            if let Some(&(last_ts, last_rel)) = entries.last() {
                if ts < last_ts || rel < last_rel {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "time index not increasing",
                    ));
                }
            }
            entries.push((ts, rel));
        }
        Ok(TimeIndex {
            path: path.to_path_buf(),
            file,
            base_offset,
            entries,
            max_entries: (max_bytes / TIME_ENTRY_LEN).max(1),
        })
    }

    pub fn is_full(&self) -> bool {
        self.entries.len() >= self.max_entries
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn last(&self) -> Option<TimestampOffset> {
        self.entries
            .last()
            .map(|&(timestamp, rel)| TimestampOffset {
                timestamp,
                offset: self.base_offset + rel as i64,
            })
    }

    /// Appends an entry if the timestamp is larger than the last one (Kafka's rule).
    pub fn maybe_append(&mut self, timestamp: i64, offset: i64) -> io::Result<()> {
        let rel = (offset - self.base_offset) as u32;
        if let Some(&(last_ts, last_rel)) = self.entries.last() {
            if timestamp <= last_ts || rel < last_rel {
                return Ok(());
            }
        }
        let mut e = [0u8; TIME_ENTRY_LEN];
        e[..8].copy_from_slice(&timestamp.to_be_bytes());
        e[8..].copy_from_slice(&rel.to_be_bytes());
        io_fault::write_all(&self.file, || self.path.clone(), &e)?;
        self.entries.push((timestamp, rel));
        Ok(())
    }

    /// The entry with the largest timestamp <= `timestamp`, or the segment start.
    pub fn lookup(&self, timestamp: i64) -> TimestampOffset {
        let idx = self.entries.partition_point(|&(ts, _)| ts <= timestamp);
        if idx == 0 {
            TimestampOffset {
                timestamp: -1,
                offset: self.base_offset,
            }
        } else {
            let (ts, rel) = self.entries[idx - 1];
            TimestampOffset {
                timestamp: ts,
                offset: self.base_offset + rel as i64,
            }
        }
    }

    pub fn truncate_to(&mut self, offset: i64) -> io::Result<()> {
        let rel = offset - self.base_offset;
        let keep = self.entries.partition_point(|&(_, r)| (r as i64) < rel);
        self.truncate_entries(keep)
    }

    /// Keeps the first `len` entries, in memory and in the file.
    pub fn truncate_entries(&mut self, len: usize) -> io::Result<()> {
        io_fault::set_len(
            &self.file,
            || self.path.clone(),
            (len * TIME_ENTRY_LEN) as u64,
        )?;
        self.entries.truncate(len);
        Ok(())
    }

    pub fn flush(&self) -> io::Result<()> {
        io_fault::sync_data(&self.file, || self.path.clone())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn offset_index_round_trips_through_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("00000000000000000100.index");
        {
            let mut idx = OffsetIndex::open(&p, 100, 1024).unwrap();
            idx.append(100, 0).unwrap();
            idx.append(150, 4096).unwrap();
            idx.append(180, 9000).unwrap();
        }
        let idx = OffsetIndex::open(&p, 100, 1024).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 24);
        assert_eq!(
            idx.lookup(99),
            OffsetPosition {
                offset: 100,
                position: 0
            }
        );
        assert_eq!(
            idx.lookup(160),
            OffsetPosition {
                offset: 150,
                position: 4096
            }
        );
        assert_eq!(
            idx.lookup(10_000),
            OffsetPosition {
                offset: 180,
                position: 9000
            }
        );
    }

    #[test]
    fn a_corrupt_index_is_reported_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.index");
        std::fs::write(&p, [0u8, 0, 0, 5, 0, 0, 0, 9, 0, 0, 0, 1, 0, 0, 0, 10]).unwrap();
        assert!(OffsetIndex::open(&p, 0, 1024).is_err());
    }

    #[test]
    fn time_index_keeps_only_increasing_timestamps() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.timeindex");
        let mut idx = TimeIndex::open(&p, 0, 1024).unwrap();
        idx.maybe_append(10, 0).unwrap();
        idx.maybe_append(5, 3).unwrap();
        idx.maybe_append(20, 7).unwrap();
        assert_eq!(
            idx.lookup(15),
            TimestampOffset {
                timestamp: 10,
                offset: 0
            }
        );
        assert_eq!(
            idx.lookup(25),
            TimestampOffset {
                timestamp: 20,
                offset: 7
            }
        );
        assert_eq!(idx.lookup(1).offset, 0);
        idx.truncate_to(7).unwrap();
        assert_eq!(
            idx.last(),
            Some(TimestampOffset {
                timestamp: 10,
                offset: 0
            })
        );
    }

    #[test]
    fn index_files_hold_big_endian_entries_relative_to_the_base() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("00000000000000000100.index");
        let mut idx = OffsetIndex::open(&p, 100, 1024).unwrap();
        idx.append(101, 0x0102_0304).unwrap();
        idx.append(356, 70_000).unwrap();
        assert_eq!(
            std::fs::read(&p).unwrap(),
            [0, 0, 0, 1, 1, 2, 3, 4, 0, 0, 1, 0, 0, 1, 0x11, 0x70]
        );
        let t = dir.path().join("00000000000000000100.timeindex");
        let mut tidx = TimeIndex::open(&t, 100, 1024).unwrap();
        tidx.maybe_append(0x0102_0304_0506_0708, 101).unwrap();
        assert_eq!(
            std::fs::read(&t).unwrap(),
            [1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 1]
        );
    }

    #[test]
    fn a_corrupt_time_index_is_reported_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.timeindex");
        let entry = |ts: i64, rel: u32| {
            let mut e = ts.to_be_bytes().to_vec();
            e.extend_from_slice(&rel.to_be_bytes());
            e
        };
        // Equal timestamps and offsets load (they do not go backwards) ...
        std::fs::write(&p, [entry(5, 1), entry(5, 1), entry(7, 2)].concat()).unwrap();
        assert_eq!(TimeIndex::open(&p, 0, 1024).unwrap().len(), 3);
        // ... a timestamp or an offset that goes backwards does not, nor a torn entry.
        std::fs::write(&p, [entry(5, 1), entry(4, 2)].concat()).unwrap();
        assert!(TimeIndex::open(&p, 0, 1024).is_err());
        std::fs::write(&p, [entry(5, 2), entry(6, 1)].concat()).unwrap();
        assert!(TimeIndex::open(&p, 0, 1024).is_err());
        std::fs::write(&p, [entry(5, 1), vec![0]].concat()).unwrap();
        assert!(TimeIndex::open(&p, 0, 1024).is_err());
    }

    proptest! {
        #[test]
        fn lookup_returns_the_greatest_entry_not_above_the_target(
            gaps in proptest::collection::vec(1u32..100, 1..50), target in 0i64..6000
        ) {
            let dir = tempfile::tempdir().unwrap();
            let mut idx = OffsetIndex::open(&dir.path().join("i.index"), 0, 1 << 20).unwrap();
            let mut off = 0i64;
            let mut entries = vec![];
            for g in gaps {
                off += g as i64;
                idx.append(off, (off * 10) as u32).unwrap();
                entries.push(off);
            }
            let got = idx.lookup(target);
            let want = entries.iter().rev().find(|&&o| o <= target).copied().unwrap_or(0);
            prop_assert_eq!(got.offset, want);
        }
    }
}
