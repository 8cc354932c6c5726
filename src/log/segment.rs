//! One segment of a partition log: `<base_offset:020>.log` with its `.index` and `.timeindex`.
//!
//! The segment owns the append side (one writer: the partition); readers get an
//! `Arc<File>` and a byte range and read with `pread` outside any lock. A reader may hold the
//! file after the segment is deleted (unlinked); that is safe on Unix.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::batch::{self, BatchHeader, BATCH_HEADER_LEN, LOG_OVERHEAD};
use super::index::{OffsetIndex, TimeIndex, TimestampOffset};
use super::io_fault;

/// The files of a segment, `.log` first.
pub const SEGMENT_FILE_EXTENSIONS: [&str; 4] = ["log", "index", "timeindex", "txnindex"];

/// File name stem of a segment: the base offset padded to 20 digits, as Kafka names it.
pub fn file_stem(base_offset: i64) -> String {
    format!("{base_offset:020}")
}

/// Sizes that shape a segment's indexes.
#[derive(Debug, Clone, Copy)]
pub struct SegmentLimits {
    pub index_interval_bytes: usize,
    pub max_index_bytes: usize,
}

/// A contiguous range of a segment file to send to a reader.
#[derive(Clone)]
pub struct FileSlice {
    pub file: Arc<File>,
    pub position: u64,
    pub len: usize,
}

impl FileSlice {
    pub fn read(&self) -> io::Result<bytes::Bytes> {
        let mut buf = vec![0u8; self.len];
        self.file.read_exact_at(&mut buf, self.position)?;
        Ok(bytes::Bytes::from(buf))
    }
}

pub struct Segment {
    base_offset: i64,
    dir: PathBuf,
    /// Suffix after each file name: "" for a live segment, or one of the cleaner's
    /// `.cleaned` / `.swap` / `.deleted` while it is written aside or swapped.
    suffix: &'static str,
    file: Arc<File>,
    size: u64,
    /// Offset after the last batch in this segment (== base_offset when empty).
    next_offset: i64,
    offset_index: OffsetIndex,
    time_index: TimeIndex,
    bytes_since_last_index_entry: usize,
    limits: SegmentLimits,
    max_timestamp: i64,
    offset_of_max_timestamp: i64,
    /// Timestamp of the first batch (for segment.ms), or the creation time when empty.
    rolling_base_timestamp: Option<i64>,
    created_ms: i64,
}

/// The append-side state of a segment at one point, to roll a failed append back to it
/// ([`Segment::mark`], [`Segment::restore`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentMark {
    size: u64,
    next_offset: i64,
    offset_entries: usize,
    time_entries: usize,
    bytes_since_last_index_entry: usize,
    max_timestamp: i64,
    offset_of_max_timestamp: i64,
    rolling_base_timestamp: Option<i64>,
}

/// What a recovery scan found.
pub struct RecoveryResult {
    pub valid_bytes: u64,
    pub truncated_bytes: u64,
}

impl Segment {
    pub fn log_path(dir: &Path, base_offset: i64) -> PathBuf {
        dir.join(format!("{}.log", file_stem(base_offset)))
    }
    fn index_path(dir: &Path, base_offset: i64) -> PathBuf {
        dir.join(format!("{}.index", file_stem(base_offset)))
    }
    fn time_index_path(dir: &Path, base_offset: i64) -> PathBuf {
        dir.join(format!("{}.timeindex", file_stem(base_offset)))
    }

    /// Path of one of the segment's files: `ext` is `log`, `index`, `timeindex` or
    /// `txnindex`, `suffix` "" or a cleaner suffix such as `.cleaned`.
    pub fn file_path(dir: &Path, base_offset: i64, ext: &str, suffix: &str) -> PathBuf {
        dir.join(format!("{}.{ext}{suffix}", file_stem(base_offset)))
    }

    /// Creates a new, empty segment.
    pub fn create(
        dir: &Path,
        base_offset: i64,
        limits: SegmentLimits,
        now_ms: i64,
    ) -> io::Result<Segment> {
        Self::create_aside(dir, base_offset, limits, now_ms, "")
    }

    /// Creates a new, empty segment whose files carry `suffix` (the cleaner writes a cleaned
    /// segment as `.cleaned`); any files of that name are truncated.
    pub fn create_aside(
        dir: &Path,
        base_offset: i64,
        limits: SegmentLimits,
        now_ms: i64,
        suffix: &'static str,
    ) -> io::Result<Segment> {
        let path = Self::file_path(dir, base_offset, "log", suffix);
        let index_path = Self::file_path(dir, base_offset, "index", suffix);
        let time_index_path = Self::file_path(dir, base_offset, "timeindex", suffix);
        let opened = (|| {
            let file = OpenOptions::new()
                .create(true)
                .read(true)
                .append(true)
                .open(&path)?;
            io_fault::set_len(&file, || path.clone(), 0)?;
            let _ = fs::remove_file(&index_path);
            let _ = fs::remove_file(&time_index_path);
            let offset_index = OffsetIndex::open(&index_path, base_offset, limits.max_index_bytes)?;
            let time_index =
                TimeIndex::open(&time_index_path, base_offset, limits.max_index_bytes)?;
            Ok::<_, io::Error>((file, offset_index, time_index))
        })();
        let (file, offset_index, time_index) = match opened {
            Ok(parts) => parts,
            Err(e) => {
                // A half-created segment must not outlive the failure: an empty `.log`
                // without indexes would be opened (and trusted) by the next recovery.
                for p in [&time_index_path, &index_path, &path] {
                    let _ = fs::remove_file(p);
                }
                return Err(e);
            }
        };
        Ok(Segment {
            base_offset,
            dir: dir.to_path_buf(),
            suffix,
            file: Arc::new(file),
            size: 0,
            next_offset: base_offset,
            offset_index,
            time_index,
            bytes_since_last_index_entry: 0,
            limits,
            max_timestamp: -1,
            offset_of_max_timestamp: -1,
            rolling_base_timestamp: None,
            created_ms: now_ms,
        })
    }

    /// Opens an existing segment. With `recover` the whole file is scanned, CRCs checked, a
    /// torn or corrupt tail truncated and both indexes rebuilt; otherwise the indexes are
    /// trusted if they load (and rebuilt if they do not) and only the tail after the last
    /// index entry is scanned to find the next offset.
    pub fn open(
        dir: &Path,
        base_offset: i64,
        limits: SegmentLimits,
        recover: bool,
    ) -> io::Result<(Segment, Option<RecoveryResult>)> {
        let path = Self::log_path(dir, base_offset);
        let file = OpenOptions::new().read(true).append(true).open(&path)?;
        let size = file.metadata()?.len();
        let created_ms = file
            .metadata()?
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let indexes = if recover {
            None
        } else {
            match (
                OffsetIndex::open(
                    &Self::index_path(dir, base_offset),
                    base_offset,
                    limits.max_index_bytes,
                ),
                TimeIndex::open(
                    &Self::time_index_path(dir, base_offset),
                    base_offset,
                    limits.max_index_bytes,
                ),
            ) {
                (Ok(o), Ok(t)) if o.last().is_none_or(|e| (e.position as u64) < size) => {
                    Some((o, t))
                }
                _ => None,
            }
        };
        let rebuild = indexes.is_none();
        let (offset_index, time_index) = match indexes {
            Some(pair) => pair,
            None => {
                let _ = fs::remove_file(Self::index_path(dir, base_offset));
                let _ = fs::remove_file(Self::time_index_path(dir, base_offset));
                (
                    OffsetIndex::open(
                        &Self::index_path(dir, base_offset),
                        base_offset,
                        limits.max_index_bytes,
                    )?,
                    TimeIndex::open(
                        &Self::time_index_path(dir, base_offset),
                        base_offset,
                        limits.max_index_bytes,
                    )?,
                )
            }
        };
        let mut seg = Segment {
            base_offset,
            dir: dir.to_path_buf(),
            suffix: "",
            file: Arc::new(file),
            size: 0,
            next_offset: base_offset,
            offset_index,
            time_index,
            bytes_since_last_index_entry: 0,
            limits,
            max_timestamp: -1,
            offset_of_max_timestamp: -1,
            rolling_base_timestamp: None,
            created_ms,
        };
        if rebuild {
            let result = seg.rebuild(size)?;
            Ok((seg, Some(result)))
        } else {
            // Trusted indexes: read the first header (for segment.ms) and scan only from the
            // last index entry to find the end of the log.
            let mut header_buf = [0u8; BATCH_HEADER_LEN];
            if size >= BATCH_HEADER_LEN as u64 {
                seg.file.read_exact_at(&mut header_buf, 0)?;
                if let Ok(h) = BatchHeader::parse(&header_buf) {
                    seg.rolling_base_timestamp = Some(h.max_timestamp);
                }
            }
            if let Some(TimestampOffset { timestamp, offset }) = seg.time_index.last() {
                seg.max_timestamp = timestamp;
                seg.offset_of_max_timestamp = offset;
            }
            let mut pos = seg
                .offset_index
                .last()
                .map(|e| e.position as u64)
                .unwrap_or(0);
            while pos + BATCH_HEADER_LEN as u64 <= size {
                seg.file.read_exact_at(&mut header_buf, pos)?;
                let h = match BatchHeader::parse(&header_buf) {
                    Ok(h) => h,
                    Err(_) => break,
                };
                if pos + h.total_size() as u64 > size {
                    break;
                }
                if h.max_timestamp > seg.max_timestamp {
                    seg.max_timestamp = h.max_timestamp;
                    seg.offset_of_max_timestamp = h.last_offset();
                }
                seg.next_offset = h.last_offset() + 1;
                seg.bytes_since_last_index_entry += h.total_size();
                pos += h.total_size() as u64;
            }
            if pos < size {
                // Bytes past the last whole batch after a clean shutdown cannot come from us;
                // drop them rather than serve them.
                io_fault::set_len(&seg.file, || Self::log_path(dir, base_offset), pos)?;
            }
            seg.size = pos;
            Ok((seg, None))
        }
    }

    /// Scans the file from the start, validating each batch, rebuilding the indexes and
    /// truncating at the first invalid batch.
    fn rebuild(&mut self, size: u64) -> io::Result<RecoveryResult> {
        let mut pos = 0u64;
        let mut header_buf = [0u8; BATCH_HEADER_LEN];
        let mut body = Vec::new();
        while pos + BATCH_HEADER_LEN as u64 <= size {
            self.file.read_exact_at(&mut header_buf, pos)?;
            let h = match BatchHeader::parse(&header_buf) {
                Ok(h) => h,
                Err(_) => break,
            };
            let total = h.total_size() as u64;
            if pos + total > size
                || h.base_offset < self.next_offset.max(self.base_offset) && pos > 0
            {
                break;
            }
            body.resize(total as usize, 0);
            self.file.read_exact_at(&mut body, pos)?;
            if !batch::crc_matches(&body) {
                break;
            }
            self.index_batch(&h, pos as u32, total as usize)?;
            self.next_offset = h.last_offset() + 1;
            pos += total;
        }
        if pos < size {
            let (dir, base, suffix) = (&self.dir, self.base_offset, self.suffix);
            io_fault::set_len(
                &self.file,
                || Self::file_path(dir, base, "log", suffix),
                pos,
            )?;
        }
        self.size = pos;
        Ok(RecoveryResult {
            valid_bytes: pos,
            truncated_bytes: size - pos,
        })
    }

    fn index_batch(&mut self, h: &BatchHeader, position: u32, len: usize) -> io::Result<()> {
        if self.rolling_base_timestamp.is_none() {
            self.rolling_base_timestamp = Some(h.max_timestamp);
        }
        if h.max_timestamp > self.max_timestamp {
            self.max_timestamp = h.max_timestamp;
            self.offset_of_max_timestamp = h.last_offset();
        }
        if self.bytes_since_last_index_entry >= self.limits.index_interval_bytes {
            self.offset_index.append(h.base_offset, position)?;
            self.time_index
                .maybe_append(self.max_timestamp, self.offset_of_max_timestamp)?;
            self.bytes_since_last_index_entry = 0;
        }
        self.bytes_since_last_index_entry += len;
        Ok(())
    }

    /// Appends one batch whose offsets are already assigned. On an error the file or an index
    /// may hold part of the batch: the caller rolls back with [`Segment::restore`] to a mark
    /// taken before.
    pub fn append(&mut self, header: &BatchHeader, bytes: &[u8]) -> io::Result<()> {
        debug_assert_eq!(bytes.len(), header.total_size());
        let position = self.size as u32;
        let (dir, base, suffix) = (&self.dir, self.base_offset, self.suffix);
        io_fault::write_all(
            &self.file,
            || Self::file_path(dir, base, "log", suffix),
            bytes,
        )?;
        self.index_batch(header, position, bytes.len())?;
        self.size += bytes.len() as u64;
        self.next_offset = header.last_offset() + 1;
        Ok(())
    }

    /// The append-side state now, for [`Segment::restore`].
    pub fn mark(&self) -> SegmentMark {
        SegmentMark {
            size: self.size,
            next_offset: self.next_offset,
            offset_entries: self.offset_index.len(),
            time_entries: self.time_index.len(),
            bytes_since_last_index_entry: self.bytes_since_last_index_entry,
            max_timestamp: self.max_timestamp,
            offset_of_max_timestamp: self.offset_of_max_timestamp,
            rolling_base_timestamp: self.rolling_base_timestamp,
        }
    }

    /// Rolls a failed append back to `mark`: the `.log` and both index files are cut back to
    /// their length at the mark (whatever part of the batch reached them goes) and the
    /// in-memory state is restored. Shrinking a file needs no free space. On an error the
    /// files may still hold the partial append: the caller must stop appending (the
    /// partition goes offline) until a recovery scan repairs the segment.
    pub fn restore(&mut self, mark: &SegmentMark) -> io::Result<()> {
        let (dir, base, suffix) = (&self.dir, self.base_offset, self.suffix);
        io_fault::set_len(
            &self.file,
            || Self::file_path(dir, base, "log", suffix),
            mark.size,
        )?;
        self.offset_index.truncate_entries(mark.offset_entries)?;
        self.time_index.truncate_entries(mark.time_entries)?;
        self.size = mark.size;
        self.next_offset = mark.next_offset;
        self.bytes_since_last_index_entry = mark.bytes_since_last_index_entry;
        self.max_timestamp = mark.max_timestamp;
        self.offset_of_max_timestamp = mark.offset_of_max_timestamp;
        self.rolling_base_timestamp = mark.rolling_base_timestamp;
        Ok(())
    }

    /// Drops every batch whose last offset is >= `offset` (a batch straddling `offset` goes
    /// whole, as in Kafka's `LogSegment.truncateTo`), with their index entries. Returns the
    /// bytes removed.
    pub fn truncate_to(&mut self, offset: i64) -> io::Result<u64> {
        let Some((position, _)) = self.translate_offset(offset)? else {
            return Ok(0);
        };
        let removed = self.size - position;
        let (dir, base, suffix) = (&self.dir, self.base_offset, self.suffix);
        io_fault::set_len(
            &self.file,
            || Self::file_path(dir, base, "log", suffix),
            position,
        )?;
        self.size = position;
        self.offset_index.truncate_to(offset)?;
        self.time_index.truncate_to(offset)?;
        // Recompute the tail state from the last index entry that survived.
        self.next_offset = self.base_offset;
        self.bytes_since_last_index_entry = 0;
        (self.max_timestamp, self.offset_of_max_timestamp) = match self.time_index.last() {
            Some(TimestampOffset { timestamp, offset }) => (timestamp, offset),
            None => (-1, -1),
        };
        // An entry for a straddling batch points at the new end: scan from the start then.
        let mut pos = match self.offset_index.last() {
            Some(e) if (e.position as u64) < self.size => e.position as u64,
            _ => 0,
        };
        let mut header_buf = [0u8; BATCH_HEADER_LEN];
        while pos + BATCH_HEADER_LEN as u64 <= self.size {
            self.file.read_exact_at(&mut header_buf, pos)?;
            let h = BatchHeader::parse(&header_buf)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            if h.max_timestamp > self.max_timestamp {
                self.max_timestamp = h.max_timestamp;
                self.offset_of_max_timestamp = h.last_offset();
            }
            self.next_offset = h.last_offset() + 1;
            self.bytes_since_last_index_entry += h.total_size();
            pos += h.total_size() as u64;
        }
        if self.size == 0 {
            self.rolling_base_timestamp = None;
        }
        Ok(removed)
    }

    /// Whether appending `len` more bytes would overflow this segment or its indexes, or the
    /// segment spans more than `segment_ms`. As in Kafka, the span is measured from the first
    /// batch's timestamp to the incoming batch's max timestamp (`message_timestamp`), or by
    /// wall clock from the segment's creation when it has no timestamped batch, so replaying
    /// old timestamps does not roll a segment per batch.
    pub fn should_roll(
        &self,
        len: usize,
        segment_bytes: u64,
        segment_ms: i64,
        now_ms: i64,
        message_timestamp: i64,
    ) -> bool {
        if self.size == 0 {
            return false;
        }
        let too_big = self.size + len as u64 > segment_bytes;
        let waited = match self.rolling_base_timestamp {
            Some(first) if first >= 0 => message_timestamp - first,
            _ => now_ms - self.created_ms,
        };
        let too_old = waited > segment_ms;
        too_big
            || too_old
            || self.offset_index.is_full()
            || self.time_index.is_full()
            || (self.size + len as u64) > u32::MAX as u64
    }

    /// Position of the first batch containing an offset >= `offset`, scanning headers forward
    /// from the index entry. Returns `None` when the segment has no such batch.
    pub fn translate_offset(&self, offset: i64) -> io::Result<Option<(u64, BatchHeader)>> {
        self.translate_offset_from(offset, self.offset_index.lookup(offset).position as u64)
    }

    fn translate_offset_from(
        &self,
        offset: i64,
        start: u64,
    ) -> io::Result<Option<(u64, BatchHeader)>> {
        let mut pos = start;
        let mut header_buf = [0u8; BATCH_HEADER_LEN];
        while pos + BATCH_HEADER_LEN as u64 <= self.size {
            self.file.read_exact_at(&mut header_buf, pos)?;
            let h = BatchHeader::parse(&header_buf)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            if h.last_offset() >= offset {
                return Ok(Some((pos, h)));
            }
            pos += h.total_size() as u64;
        }
        Ok(None)
    }

    /// Reads whole batches starting at the batch containing `offset`: up to `max_bytes` (at
    /// least one batch when `min_one` is set) and never past `max_position`.
    pub fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        max_position: u64,
        min_one: bool,
    ) -> io::Result<Option<FileSlice>> {
        let Some((start, first)) = self.translate_offset(offset)? else {
            return Ok(None);
        };
        if start >= max_position {
            return Ok(Some(FileSlice {
                file: self.file.clone(),
                position: start,
                len: 0,
            }));
        }
        let limit = max_position.min(self.size);
        let first_len = first.total_size() as u64;
        let mut end = start + first_len;
        if first_len as usize > max_bytes && !min_one {
            return Ok(Some(FileSlice {
                file: self.file.clone(),
                position: start,
                len: 0,
            }));
        }
        // Skip to the last indexed batch that starts within the bytes allowed (every index
        // entry is a batch start), then extend whole batches while they fit: a header read
        // per batch only past the last index entry.
        let allowed = (start + max_bytes as u64).min(limit);
        if let Some(p) = self.offset_index.position_at_or_below(allowed) {
            end = end.max(p);
        }
        let mut header_buf = [0u8; LOG_OVERHEAD];
        while end + LOG_OVERHEAD as u64 <= limit {
            self.file.read_exact_at(&mut header_buf, end)?;
            let len =
                i32::from_be_bytes([header_buf[8], header_buf[9], header_buf[10], header_buf[11]]);
            let next = end + LOG_OVERHEAD as u64 + len as u64;
            if len <= 0 || next > limit || (next - start) as usize > max_bytes {
                break;
            }
            end = next;
        }
        let end = end.min(limit);
        Ok(Some(FileSlice {
            file: self.file.clone(),
            position: start,
            len: (end - start) as usize,
        }))
    }

    /// The position where `offset` starts in this segment (a batch boundary), or the end.
    pub fn position_of(&self, offset: i64) -> io::Result<u64> {
        Ok(self
            .translate_offset(offset)?
            .map(|(p, _)| p)
            .unwrap_or(self.size))
    }

    /// Reads the batch that starts at `position` in full.
    pub fn read_batch_at(&self, position: u64, header: &BatchHeader) -> io::Result<Vec<u8>> {
        // The header comes from the file: a length past the segment's end is corruption, not
        // an allocation to make.
        let len = header.total_size() as u64;
        if position.saturating_add(len) > self.size {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "batch at position {position} claims {len} bytes, past the segment's {} bytes",
                    self.size
                ),
            ));
        }
        let mut buf = vec![0u8; len as usize];
        self.file.read_exact_at(&mut buf, position)?;
        Ok(buf)
    }

    /// Iterates batch headers with positions, from `offset` on.
    pub fn headers_from(&self, offset: i64) -> io::Result<Vec<(u64, BatchHeader)>> {
        let mut out = Vec::new();
        let Some((mut pos, _)) = self.translate_offset(offset)? else {
            return Ok(out);
        };
        let mut header_buf = [0u8; BATCH_HEADER_LEN];
        while pos + BATCH_HEADER_LEN as u64 <= self.size {
            self.file.read_exact_at(&mut header_buf, pos)?;
            let h = BatchHeader::parse(&header_buf)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            out.push((pos, h));
            pos += h.total_size() as u64;
        }
        Ok(out)
    }

    /// Position in the file from which to scan for the first timestamp >= `timestamp`.
    pub fn time_lookup_offset(&self, timestamp: i64) -> i64 {
        self.time_index.lookup(timestamp).offset
    }

    pub fn flush(&self) -> io::Result<()> {
        let (dir, base, suffix) = (&self.dir, self.base_offset, self.suffix);
        io_fault::sync_data(&self.file, || Self::file_path(dir, base, "log", suffix))?;
        self.offset_index.flush()?;
        self.time_index.flush()
    }

    /// Deletes the segment's files.
    pub fn delete(self) -> io::Result<()> {
        for ext in SEGMENT_FILE_EXTENSIONS {
            match fs::remove_file(Self::file_path(
                &self.dir,
                self.base_offset,
                ext,
                self.suffix,
            )) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Renames the segment's files from their current suffix to `suffix`, the `.log` first
    /// (Kafka's `changeFileSuffixes`; recovery keys on the `.log` file). Open handles, held by
    /// the segment or by readers, stay valid.
    pub fn change_suffix(&mut self, suffix: &'static str) -> io::Result<()> {
        for ext in SEGMENT_FILE_EXTENSIONS {
            let from = Self::file_path(&self.dir, self.base_offset, ext, self.suffix);
            let to = Self::file_path(&self.dir, self.base_offset, ext, suffix);
            match io_fault::rename(&from, &to) {
                Ok(()) => {}
                // Indexes are derived data and a segment has no `.txnindex` yet.
                Err(e) if e.kind() == io::ErrorKind::NotFound && ext != "log" => {}
                Err(e) => return Err(e),
            }
        }
        self.suffix = suffix;
        Ok(())
    }

    /// Stamps the `.log` file's modification time (a cleaned segment takes that of the last
    /// segment it replaces, as in Kafka).
    pub fn set_last_modified(&mut self, ms: i64) -> io::Result<()> {
        let time = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
        self.file.set_modified(time)?;
        self.created_ms = ms;
        Ok(())
    }

    /// Modification time of the `.log` file.
    pub fn last_modified_ms(&self) -> io::Result<i64> {
        Ok(self
            .file
            .metadata()?
            .modified()?
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0))
    }

    /// The `.log` file, for reads outside the partition lock (a sealed segment never changes).
    pub fn file(&self) -> Arc<File> {
        self.file.clone()
    }

    /// Bytes of the offset and time indexes.
    pub fn index_bytes(&self) -> (u64, u64) {
        (
            (self.offset_index.len() * super::index::OFFSET_ENTRY_LEN) as u64,
            (self.time_index.len() * super::index::TIME_ENTRY_LEN) as u64,
        )
    }

    /// Max timestamp of the first batch (`None` when empty).
    pub fn first_batch_timestamp(&self) -> Option<i64> {
        (self.size > 0)
            .then_some(self.rolling_base_timestamp)
            .flatten()
    }

    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }
    pub fn next_offset(&self) -> i64 {
        self.next_offset
    }
    pub fn size(&self) -> u64 {
        self.size
    }
    pub fn max_timestamp(&self) -> i64 {
        self.max_timestamp
    }
    pub fn offset_of_max_timestamp(&self) -> i64 {
        self.offset_of_max_timestamp
    }
    /// The time that retention.ms is measured from: the newest record, or the file's mtime.
    pub fn retention_timestamp(&self) -> i64 {
        if self.max_timestamp >= 0 {
            self.max_timestamp
        } else {
            self.created_ms
        }
    }
}
