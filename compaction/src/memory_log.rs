//! An in-memory partition log implementing [`SegmentSource`] and (through [`MemorySink`])
//! [`BatchSink`]: the fixture the cleaner is tested against, usable by the broker's tests too.
//!
//! It holds real RecordBatch v2 bytes. `append` assigns offsets by rewriting the base offset
//! (outside the CRC, as the broker does). The sink checks what a real segment writer would
//! check: batches in offset order within the replaced range, replaced segments still present
//! at commit, and it can be told to fail to exercise the cleaner's error paths.

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::{Bytes, BytesMut};

use crate::batch::{BatchError, BatchHeader};
use crate::segment::{BatchSink, LastRecord, RetainedBatch, SegmentInfo, SegmentSource};

#[derive(Debug, Clone)]
struct Segment {
    base_offset: i64,
    next_offset: i64,
    last_modified_ms: i64,
    /// Batches with their header, parsed once on the way in.
    batches: Vec<(Bytes, BatchHeader)>,
}

impl Segment {
    fn empty(base_offset: i64, now_ms: i64) -> Self {
        Segment {
            base_offset,
            next_offset: base_offset,
            last_modified_ms: now_ms,
            batches: Vec::new(),
        }
    }

    fn info(&self) -> SegmentInfo {
        SegmentInfo {
            base_offset: self.base_offset,
            next_offset: self.next_offset,
            size_bytes: self.batches.iter().map(|(b, _)| b.len() as u64).sum(),
            offset_index_bytes: 0,
            time_index_bytes: 0,
            largest_timestamp_ms: self
                .batches
                .iter()
                .map(|(_, h)| h.max_timestamp)
                .max()
                .unwrap_or(-1),
            first_batch_timestamp_ms: self.batches.first().map(|(_, h)| h.max_timestamp),
            last_modified_ms: self.last_modified_ms,
        }
    }
}

#[derive(Debug)]
struct State {
    /// Never empty: the last segment is the active one.
    segments: Vec<Segment>,
    log_end_offset: i64,
    active_producers: HashMap<i64, LastRecord>,
}

/// A partition log in memory. Clones share the same log.
#[derive(Debug, Clone)]
pub struct MemoryLog {
    state: Arc<Mutex<State>>,
}

impl Default for MemoryLog {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryLog {
    /// An empty log: one empty active segment at offset 0.
    pub fn new() -> Self {
        MemoryLog {
            state: Arc::new(Mutex::new(State {
                segments: vec![Segment::empty(0, 0)],
                log_end_offset: 0,
                active_producers: HashMap::new(),
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Appends `batch` to the active segment at the log end offset; returns its base offset.
    pub fn append(&self, batch: Bytes, now_ms: i64) -> Result<i64, BatchError> {
        BatchHeader::parse(&batch)?;
        let mut state = self.lock();
        let base_offset = state.log_end_offset;
        let mut bytes = BytesMut::from(&batch[..]);
        bytes[0..8].copy_from_slice(&base_offset.to_be_bytes());
        let bytes = bytes.freeze();
        let header = BatchHeader::parse(&bytes)?;
        state.log_end_offset = header.next_offset();
        let active = state
            .segments
            .last_mut()
            .expect("a log always has an active segment");
        active.next_offset = header.next_offset();
        active.last_modified_ms = now_ms;
        active.batches.push((bytes, header));
        Ok(base_offset)
    }

    /// Seals the active segment and starts a new one at the log end offset (if the active
    /// segment holds anything).
    pub fn roll(&self, now_ms: i64) {
        let mut state = self.lock();
        let end = state.log_end_offset;
        if state.segments.last().is_some_and(|s| !s.batches.is_empty()) {
            state.segments.push(Segment::empty(end, now_ms));
        }
    }

    /// Size of the active segment, to roll by size.
    pub fn active_segment_bytes(&self) -> u64 {
        self.lock()
            .segments
            .last()
            .map_or(0, |s| s.info().size_bytes)
    }

    pub fn log_end_offset(&self) -> i64 {
        self.lock().log_end_offset
    }

    pub fn log_start_offset(&self) -> i64 {
        self.lock().segments.first().map_or(0, |s| s.base_offset)
    }

    /// Every batch of the log, in order.
    pub fn batches(&self) -> Vec<Bytes> {
        self.lock()
            .segments
            .iter()
            .flat_map(|s| s.batches.iter().map(|(b, _)| b.clone()))
            .collect()
    }

    pub fn set_last_modified(&self, base_offset: i64, last_modified_ms: i64) {
        let mut state = self.lock();
        if let Some(segment) = state
            .segments
            .iter_mut()
            .find(|s| s.base_offset == base_offset)
        {
            segment.last_modified_ms = last_modified_ms;
        }
    }

    pub fn set_active_producers(&self, producers: HashMap<i64, LastRecord>) {
        self.lock().active_producers = producers;
    }

    /// A sink writing cleaned segments into this log.
    pub fn sink(&self) -> MemorySink {
        MemorySink {
            log: self.clone(),
            pending: None,
            fail_append_after: None,
            appended: 0,
        }
    }
}

impl SegmentSource for MemoryLog {
    fn segments(&self) -> io::Result<Vec<SegmentInfo>> {
        Ok(self.lock().segments.iter().map(Segment::info).collect())
    }

    fn read_batches(
        &self,
        base_offset: i64,
        from_offset: i64,
    ) -> io::Result<Box<dyn Iterator<Item = io::Result<Bytes>> + '_>> {
        let state = self.lock();
        let segment = state
            .segments
            .iter()
            .find(|s| s.base_offset == base_offset)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("no segment at {base_offset}"),
                )
            })?;
        let batches: Vec<Bytes> = segment
            .batches
            .iter()
            .filter(|(_, h)| h.last_offset() >= from_offset)
            .map(|(b, _)| b.clone())
            .collect();
        Ok(Box::new(batches.into_iter().map(Ok)))
    }

    fn last_records_of_active_producers(&self) -> HashMap<i64, LastRecord> {
        self.lock().active_producers.clone()
    }
}

#[derive(Debug)]
struct Pending {
    replaces: Vec<SegmentInfo>,
    batches: Vec<(Bytes, BatchHeader)>,
}

/// Builds cleaned segments aside and swaps them into the [`MemoryLog`] on commit.
#[derive(Debug)]
pub struct MemorySink {
    log: MemoryLog,
    pending: Option<Pending>,
    fail_append_after: Option<usize>,
    appended: usize,
}

impl MemorySink {
    /// Makes every append after the first `appends` fail, as a full disk would.
    pub fn fail_append_after(&mut self, appends: usize) {
        self.fail_append_after = Some(appends);
    }
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

impl BatchSink for MemorySink {
    fn begin(&mut self, replaces: &[SegmentInfo]) -> io::Result<()> {
        if self.pending.is_some() {
            return Err(invalid("begin while a cleaned segment is open".into()));
        }
        if replaces.is_empty() {
            return Err(invalid("begin without segments to replace".into()));
        }
        self.pending = Some(Pending {
            replaces: replaces.to_vec(),
            batches: Vec::new(),
        });
        Ok(())
    }

    fn append(&mut self, batch: RetainedBatch) -> io::Result<()> {
        if self
            .fail_append_after
            .is_some_and(|limit| self.appended >= limit)
        {
            return Err(io::Error::other("injected append failure"));
        }
        let pending = self
            .pending
            .as_mut()
            .ok_or_else(|| invalid("append without begin".into()))?;
        let header =
            BatchHeader::parse(&batch.bytes).map_err(|e| invalid(format!("invalid batch: {e}")))?;
        if header.base_offset != batch.base_offset || header.last_offset() != batch.last_offset {
            return Err(invalid("batch offsets disagree with its header".into()));
        }
        let first = pending.replaces[0].base_offset;
        let end = pending.replaces[pending.replaces.len() - 1].next_offset;
        if header.base_offset < first || header.next_offset() > end {
            return Err(invalid(format!(
                "batch at {} outside [{first}, {end})",
                header.base_offset
            )));
        }
        if let Some((_, previous)) = pending.batches.last() {
            if header.base_offset <= previous.last_offset() {
                return Err(invalid(format!(
                    "batch at {} out of order",
                    header.base_offset
                )));
            }
        }
        pending.batches.push((batch.bytes, header));
        self.appended += 1;
        Ok(())
    }

    fn commit(&mut self, last_modified_ms: i64) -> io::Result<()> {
        let pending = self
            .pending
            .take()
            .ok_or_else(|| invalid("commit without begin".into()))?;
        let mut state = self.log.lock();
        let first = pending.replaces[0].base_offset;
        let start = state
            .segments
            .iter()
            .position(|s| s.base_offset == first)
            .ok_or_else(|| invalid(format!("segment {first} is gone")))?;
        let end = start + pending.replaces.len();
        // The active segment is never replaced, and the replaced segments must be unchanged.
        let unchanged = end < state.segments.len()
            && state.segments[start..end]
                .iter()
                .zip(&pending.replaces)
                .all(|(s, r)| s.info() == *r);
        if !unchanged {
            return Err(invalid("replaced segments changed during cleaning".into()));
        }
        let cleaned = Segment {
            base_offset: first,
            next_offset: pending.replaces[pending.replaces.len() - 1].next_offset,
            last_modified_ms,
            batches: pending.batches,
        };
        state.segments.splice(start..end, std::iter::once(cleaned));
        Ok(())
    }

    fn abandon(&mut self) -> io::Result<()> {
        self.pending = None;
        Ok(())
    }
}
