//! Sparse `.index` (offset -> file position) and `.timeindex` (timestamp -> offset) files in
//! Kafka's format: big-endian fixed-size entries with offsets relative to the segment's base.
//! Both are one [`SparseIndex`] over their entry type ([`OffsetEntry`], [`TimeEntry`]): the
//! file handling, the corruption checks on open, the binary search and the truncation are
//! shared; the entry type decides its encoding, its search key and its ordering rules.
//!
//! Entries are kept in memory for binary search and appended to the file as they are added; a
//! sealed segment's index file therefore holds exactly its entries (Kafka preallocates and trims
//! on roll; the resulting file is the same). Indexes are derived data: recovery rebuilds them
//! from the `.log` whenever they are missing or fail a sanity check.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use super::io_fault;

pub const OFFSET_ENTRY_LEN: usize = <OffsetEntry as IndexEntry>::SIZE;
pub const TIME_ENTRY_LEN: usize = <TimeEntry as IndexEntry>::SIZE;

/// Room for one entry of any index (a time index entry, the largest, has 12 bytes).
const MAX_ENTRY_LEN: usize = 16;

/// One fixed-size entry of a sparse index, as stored (offsets relative to the segment base).
pub trait IndexEntry: Copy {
    /// Bytes of one entry in the file (at most 16).
    const SIZE: usize;
    /// What the file is called in error messages.
    const NAME: &'static str;
    /// Reads an entry from exactly [`IndexEntry::SIZE`] big-endian bytes.
    fn decode(bytes: &[u8]) -> Self;
    /// Writes the entry into exactly [`IndexEntry::SIZE`] bytes.
    fn encode(&self, out: &mut [u8]);
    /// What lookups search by: the relative offset or the timestamp.
    fn key(&self) -> i64;
    /// The entry's offset relative to the segment's base offset.
    fn relative_offset(&self) -> u32;
    /// Whether `self` may follow `prev` in a sound file (else the file is corrupt).
    fn follows(&self, prev: &Self) -> bool;
    /// Whether appending `self` after `last` adds an entry (else the append is skipped).
    fn extends(&self, last: &Self) -> bool;
}

/// A `.index` entry: (offset - base offset, position in the `.log`), 4 + 4 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetEntry {
    relative_offset: u32,
    position: u32,
}

impl IndexEntry for OffsetEntry {
    const SIZE: usize = 8;
    const NAME: &'static str = "index";

    fn decode(e: &[u8]) -> Self {
        OffsetEntry {
            relative_offset: u32::from_be_bytes([e[0], e[1], e[2], e[3]]),
            position: u32::from_be_bytes([e[4], e[5], e[6], e[7]]),
        }
    }

    fn encode(&self, out: &mut [u8]) {
        out[..4].copy_from_slice(&self.relative_offset.to_be_bytes());
        out[4..].copy_from_slice(&self.position.to_be_bytes());
    }

    fn key(&self) -> i64 {
        self.relative_offset as i64
    }

    fn relative_offset(&self) -> u32 {
        self.relative_offset
    }

    /// Offsets and positions both strictly increase.
    fn follows(&self, prev: &Self) -> bool {
        self.relative_offset > prev.relative_offset && self.position > prev.position
    }

    fn extends(&self, last: &Self) -> bool {
        self.relative_offset > last.relative_offset
    }
}

/// A `.timeindex` entry: (max timestamp so far, offset - base offset), 8 + 4 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeEntry {
    timestamp: i64,
    relative_offset: u32,
}

impl IndexEntry for TimeEntry {
    const SIZE: usize = 12;
    const NAME: &'static str = "time index";

    fn decode(e: &[u8]) -> Self {
        let mut ts = [0u8; 8];
        ts.copy_from_slice(&e[..8]);
        TimeEntry {
            timestamp: i64::from_be_bytes(ts),
            relative_offset: u32::from_be_bytes([e[8], e[9], e[10], e[11]]),
        }
    }

    fn encode(&self, out: &mut [u8]) {
        out[..8].copy_from_slice(&self.timestamp.to_be_bytes());
        out[8..].copy_from_slice(&self.relative_offset.to_be_bytes());
    }

    fn key(&self) -> i64 {
        self.timestamp
    }

    fn relative_offset(&self) -> u32 {
        self.relative_offset
    }

    /// Neither timestamps nor offsets go backwards.
    fn follows(&self, prev: &Self) -> bool {
        self.timestamp >= prev.timestamp && self.relative_offset >= prev.relative_offset
    }

    /// Kafka's rule: only a larger timestamp adds an entry.
    fn extends(&self, last: &Self) -> bool {
        self.timestamp > last.timestamp && self.relative_offset >= last.relative_offset
    }
}

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

/// The `.index` of a segment.
pub type OffsetIndex = SparseIndex<OffsetEntry>;
/// The `.timeindex` of a segment.
pub type TimeIndex = SparseIndex<TimeEntry>;

/// A sparse index file of fixed-size entries, held in memory for binary search.
pub struct SparseIndex<E> {
    path: PathBuf,
    file: File,
    base_offset: i64,
    entries: Vec<E>,
    max_entries: usize,
}

impl<E: IndexEntry> SparseIndex<E> {
    /// Opens (or creates) the index and loads its entries. A size that is not a whole number
    /// of entries, or entries that do not increase, are a sign of corruption and are reported
    /// as `InvalidData` so the caller rebuilds.
    pub fn open(path: &Path, base_offset: i64, max_bytes: usize) -> io::Result<SparseIndex<E>> {
        let mut file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(path)?;
        let mut raw = Vec::new();
        file.read_to_end(&mut raw)?;
        if raw.len() % E::SIZE != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} size not a multiple of {}", E::NAME, E::SIZE),
            ));
        }
        let mut entries: Vec<E> = Vec::with_capacity(raw.len() / E::SIZE);
        for bytes in raw.chunks_exact(E::SIZE) {
            let entry = E::decode(bytes);
            if let Some(prev) = entries.last() {
                if !entry.follows(prev) {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("{} not increasing", E::NAME),
                    ));
                }
            }
            entries.push(entry);
        }
        Ok(SparseIndex {
            path: path.to_path_buf(),
            file,
            base_offset,
            entries,
            max_entries: (max_bytes / E::SIZE).max(1),
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

    /// Appends `entry` to the file and the memory copy unless it does not extend the last
    /// entry (then nothing happens).
    fn push(&mut self, entry: E) -> io::Result<()> {
        if let Some(last) = self.entries.last() {
            if !entry.extends(last) {
                return Ok(());
            }
        }
        const { assert!(E::SIZE <= MAX_ENTRY_LEN) };
        let mut bytes = [0u8; MAX_ENTRY_LEN];
        let bytes = &mut bytes[..E::SIZE];
        entry.encode(bytes);
        io_fault::write_all(&self.file, || self.path.clone(), bytes)?;
        self.entries.push(entry);
        Ok(())
    }

    /// The entry with the largest key <= `key`, if any.
    fn floor(&self, key: i64) -> Option<E> {
        let idx = self.entries.partition_point(|e| e.key() <= key);
        idx.checked_sub(1).map(|i| self.entries[i])
    }

    fn relative(&self, offset: i64) -> u32 {
        (offset - self.base_offset) as u32
    }

    fn absolute(&self, entry: &E) -> i64 {
        self.base_offset + entry.relative_offset() as i64
    }

    /// Drops entries at or beyond `offset` (log truncation).
    pub fn truncate_to(&mut self, offset: i64) -> io::Result<()> {
        let rel = offset - self.base_offset;
        let keep = self
            .entries
            .partition_point(|e| (e.relative_offset() as i64) < rel);
        self.truncate_entries(keep)
    }

    /// Keeps the first `len` entries, in memory and in the file (also cutting a partially
    /// written entry after a failed append).
    pub fn truncate_entries(&mut self, len: usize) -> io::Result<()> {
        io_fault::set_len(&self.file, || self.path.clone(), (len * E::SIZE) as u64)?;
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

impl SparseIndex<OffsetEntry> {
    pub fn last(&self) -> Option<OffsetPosition> {
        self.entries.last().map(|e| OffsetPosition {
            offset: self.absolute(e),
            position: e.position,
        })
    }

    /// Appends an entry if `offset` is beyond the last one.
    pub fn append(&mut self, offset: i64, position: u32) -> io::Result<()> {
        self.push(OffsetEntry {
            relative_offset: self.relative(offset),
            position,
        })
    }

    /// The largest indexed position at or below `position`: the start of a batch.
    pub fn position_at_or_below(&self, position: u64) -> Option<u64> {
        let i = self
            .entries
            .partition_point(|e| e.position as u64 <= position);
        i.checked_sub(1).map(|i| self.entries[i].position as u64)
    }

    /// The entry with the largest offset <= `offset`, or the segment start.
    pub fn lookup(&self, offset: i64) -> OffsetPosition {
        let start = OffsetPosition {
            offset: self.base_offset,
            position: 0,
        };
        let rel = offset - self.base_offset;
        if rel < 0 {
            return start;
        }
        match self.floor(rel) {
            Some(e) => OffsetPosition {
                offset: self.absolute(&e),
                position: e.position,
            },
            None => start,
        }
    }
}

impl SparseIndex<TimeEntry> {
    pub fn last(&self) -> Option<TimestampOffset> {
        self.entries.last().map(|e| TimestampOffset {
            timestamp: e.timestamp,
            offset: self.absolute(e),
        })
    }

    /// Appends an entry if the timestamp is larger than the last one (Kafka's rule).
    pub fn maybe_append(&mut self, timestamp: i64, offset: i64) -> io::Result<()> {
        self.push(TimeEntry {
            timestamp,
            relative_offset: self.relative(offset),
        })
    }

    /// The entry with the largest timestamp <= `timestamp`, or the segment start.
    pub fn lookup(&self, timestamp: i64) -> TimestampOffset {
        match self.floor(timestamp) {
            Some(e) => TimestampOffset {
                timestamp: e.timestamp,
                offset: self.absolute(&e),
            },
            None => TimestampOffset {
                timestamp: -1,
                offset: self.base_offset,
            },
        }
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
