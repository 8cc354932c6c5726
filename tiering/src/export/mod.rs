//! Parquet export: a partition's records (remote segments and sealed local segments) as
//! Parquet files that Spark, DuckDB and warehouses bulk-load.
//!
//! Layout: `<out>/topic=T/partition=P/<first:020>-<last:020>.parquet`, named by the offsets of
//! their first and last record, plus `<out>/topic=T/partition=P/_checkpoint.json` (the next
//! offset to export). Columns: topic, partition, offset, timestamp (UTC millis),
//! timestamp_type, key, value, headers (list of key/value structs), producer_id; see
//! [`convert::schema`]. With a [`ValueSchema`], typed `value_<name>` columns decoded from JSON
//! values follow ([`value_schema`]). Control batches and records of aborted transactions are
//! never exported. With [`ConvertOptions::iceberg`] the columns carry Iceberg field ids,
//! timestamps are microseconds, each range of offsets is written as one file per UTC day, and
//! [`iceberg::commit`] makes `topic=T` an Iceberg table over the landed files.
//!
//! Invariants:
//! - Files never span segments: a file ends at a segment's end, at the export's end, or (for
//!   segments larger than [`ExportOptions::file_bytes`]) at a batch boundary once the file
//!   passes that size. Boundaries therefore depend only on the log and the start offset, so a
//!   re-run from a checkpoint writes byte-identical files under identical names.
//! - Exactly once: the checkpoint is replaced only after the file it covers has landed, and a
//!   run starts at the checkpoint. A file that landed without its checkpoint is rewritten
//!   with the same name and rows; nothing is skipped because the checkpoint never passes a
//!   record that is not in a landed file.
//! - The checkpoint wins over `from`: to export a range again, use another target (or delete
//!   the checkpoint). With `from_time`, no checkpoint is written before the first exported
//!   record, so a re-run seeks by time again.
//!
//! Memory: a segment is read in chunks of [`ExportOptions::chunk_bytes`] (two in flight;
//! local reads reuse a few pooled chunk buffers),
//! one batch is decompressed at a time and rows go to the Parquet writer in bounded Arrow
//! batches; a row group is flushed at [`convert::ConvertOptions::row_group_bytes`]. Nothing
//! is proportional to a segment's or a partition's size.
//!
//! Concurrency: one partition's export runs on one blocking thread (decoding and encoding are
//! CPU work) with its reads prefetched by an async task; partitions run in parallel. A
//! cancelled export stops between batches and leaves its checkpoint where it was.
//!
//! Retries: store requests retry inside `object_store`; any other failure ends the
//! partition's export with an error and the checkpoint says where a re-run resumes.

pub mod continuous;
pub mod convert;
pub mod iceberg;
pub mod plan;
pub mod target;
pub mod value_schema;

use std::io::{BufWriter, Read};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;

pub use continuous::{CatalogSettings, ContinuousExporter, ExportJob, ExportLag};
pub use convert::{
    AbortedTxn, AbortedTxns, ConvertOptions, FileSet, IcebergColumns, ParquetFileWriter,
    RecordFilter,
};
pub use plan::{plan_partition, read_high_watermark, Bound, PartitionPlan, PlanInput, Source};
pub use target::{Checkpoint, Target};
pub use value_schema::{ValueSchema, ValueSchemaError};

use crate::store::{RemoteStore, StoreError};
use convert::{BatchHeader, ConvertError, LOG_OVERHEAD};

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Convert(#[from] ConvertError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("segment {0} disappeared while it was exported (moved to remote storage?)")]
    SourceGone(String),
    /// The segments found leave records out: neither `log.dirs` nor the bucket holds
    /// `[from, to)` (local retention ran between the listing and the reads, or the bucket
    /// does not hold what was deleted locally).
    #[error(
        "offsets {from}..{to} of {topic}-{partition} are neither in log.dirs nor in the bucket"
    )]
    Hole {
        topic: String,
        partition: i32,
        from: i64,
        to: i64,
    },
    #[error("{0}")]
    Checkpoint(String),
    #[error("iceberg table: {0}")]
    Table(String),
    #[error("export cancelled")]
    Cancelled,
}

impl ExportError {
    /// A fresh plan (the manifest and the local segments read again) may succeed.
    pub fn needs_new_plan(&self) -> bool {
        matches!(self, ExportError::SourceGone(_) | ExportError::Hole { .. })
    }
}

#[derive(Debug, Clone)]
pub struct ExportOptions {
    pub convert: ConvertOptions,
    /// A file is closed at the next batch boundary once it passes this many bytes.
    pub file_bytes: usize,
    /// Bytes per read of a segment (local read or ranged GET).
    pub chunk_bytes: usize,
    /// Fail point for crash tests: sleep between a file landing and its checkpoint commit.
    pub pause_before_checkpoint: Option<std::time::Duration>,
}

impl Default for ExportOptions {
    fn default() -> Self {
        ExportOptions {
            convert: ConvertOptions::default(),
            file_bytes: 256 << 20,
            chunk_bytes: 8 << 20,
            pause_before_checkpoint: None,
        }
    }
}

/// Which records to export; `None` means from the log start / to the safe end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExportRange {
    pub from_offset: Option<i64>,
    /// Exclusive.
    pub to_offset: Option<i64>,
    /// Start at the first record with a timestamp at or after this (ms).
    pub from_time: Option<i64>,
    /// Stop at the first record with a timestamp after this (ms).
    pub to_time: Option<i64>,
}

/// Counters shared with a progress display.
#[derive(Debug, Default)]
pub struct Progress {
    pub records: AtomicU64,
    pub skipped: AtomicU64,
    /// Segment bytes read.
    pub bytes_in: AtomicU64,
    /// Segment bytes the export expects to read in all.
    pub bytes_planned: AtomicU64,
    pub bytes_out: AtomicU64,
    pub files: AtomicU64,
    /// With a value schema: records whose value is not a JSON object.
    pub values_not_json: AtomicU64,
    /// With a value schema: records with a field of the wrong type or missing.
    pub values_mismatched: AtomicU64,
}

impl Progress {
    /// Counts the records of a batch written to a file.
    fn add(&self, pushed: &convert::Pushed) {
        self.records.fetch_add(pushed.rows, Ordering::Relaxed);
        self.skipped.fetch_add(pushed.skipped, Ordering::Relaxed);
        self.values_not_json
            .fetch_add(pushed.values_not_json, Ordering::Relaxed);
        self.values_mismatched
            .fetch_add(pushed.values_mismatched, Ordering::Relaxed);
    }
}

/// What the export of one partition did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionSummary {
    pub topic: String,
    pub partition: i32,
    /// Where this run started and ended (exclusive).
    pub start_offset: i64,
    pub end_offset: i64,
    pub records: u64,
    pub files: Vec<String>,
    pub bytes_out: u64,
    /// With a value schema: exported records whose value is not a JSON object (their typed
    /// columns are null).
    pub values_not_json: u64,
    /// With a value schema: exported records with a field of the wrong type or a required
    /// field missing (null in that column).
    pub values_mismatched: u64,
    /// Where the partition's records end: from `end_offset` to here they were not exported.
    pub log_end: i64,
    /// What kept records below `log_end` out, when no `--to-*` bound did.
    pub stopped_by: Option<Bound>,
}

/// Parses a time for `--from-time`/`--to-time`: RFC 3339 (`2026-01-02T03:04:05Z`, with an
/// offset or fraction), a UTC date-time without zone (`2026-01-02T03:04:05`, `2026-01-02
/// 03:04:05`), a UTC date (`2026-01-02`), or epoch milliseconds.
pub fn parse_time(text: &str) -> Result<i64, String> {
    use chrono::{NaiveDate, NaiveDateTime};
    let t = text.trim();
    if let Ok(ms) = t.parse::<i64>() {
        return Ok(ms);
    }
    if let Ok(d) = chrono::DateTime::parse_from_rfc3339(t) {
        return Ok(d.timestamp_millis());
    }
    for f in ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"] {
        if let Ok(d) = NaiveDateTime::parse_from_str(t, f) {
            return Ok(d.and_utc().timestamp_millis());
        }
    }
    if let Ok(d) = NaiveDate::parse_from_str(t, "%Y-%m-%d") {
        if let Some(dt) = d.and_hms_opt(0, 0, 0) {
            return Ok(dt.and_utc().timestamp_millis());
        }
    }
    Err(format!(
        "cannot read '{text}' as a time (use e.g. 2026-01-02T03:04:05Z, 2026-01-02 or epoch ms)"
    ))
}

/// The segment bytes an export of `plan` from `start` will read (for an ETA).
pub fn planned_bytes(plan: &PartitionPlan, start: i64, end: i64) -> u64 {
    plan.segments
        .iter()
        .filter(|s| s.next_offset() > start && s.base_offset() < end)
        .map(Source::size)
        .sum()
}

/// Removes the spool files of a range that will not land.
fn discard(files: OpenFiles) {
    for (_, (_, spool)) in files.files {
        let _ = std::fs::remove_file(&spool);
    }
}

/// Where a run starts and ends.
pub struct RunStart {
    pub start: i64,
    pub end: i64,
    /// The checkpoint's version to replace.
    pub e_tag: Option<String>,
    pub resumed: bool,
    /// Where the first file must end: a file that ended there may have landed without the
    /// checkpoint moving.
    pub pending_end: Option<i64>,
}

/// Resolves where this run starts (checkpoint, `from`, log start) and where it ends.
pub async fn resolve_start(
    plan: &PartitionPlan,
    target: &Target,
    range: &ExportRange,
) -> Result<RunStart, ExportError> {
    let (checkpoint, e_tag) = target.read_checkpoint(&plan.topic, plan.partition).await?;
    let from = range.from_offset.unwrap_or(0).max(plan.log_start_offset);
    let start = checkpoint
        .as_ref()
        .map_or(from, |c| c.next_offset.max(from));
    let end = range
        .to_offset
        .map_or(plan.safe_end, |t| t.min(plan.safe_end));
    Ok(RunStart {
        start,
        end,
        e_tag,
        resumed: checkpoint.is_some(),
        pending_end: checkpoint.and_then(|c| c.pending_end),
    })
}

/// Exports one partition per `plan` into `target`, resuming at its checkpoint. Runs the CPU
/// work on a blocking thread.
pub async fn export_partition(
    plan: Arc<PartitionPlan>,
    target: Arc<Target>,
    range: ExportRange,
    options: ExportOptions,
    progress: Arc<Progress>,
    cancel: CancellationToken,
) -> Result<PartitionSummary, ExportError> {
    target.prepare(&plan.topic, plan.partition).await?;
    let RunStart {
        start,
        end,
        e_tag,
        resumed,
        pending_end,
    } = resolve_start(&plan, &target, &range).await?;
    progress
        .bytes_planned
        .fetch_add(planned_bytes(&plan, start, end), Ordering::Relaxed);
    let handle = Handle::current();
    let run = Run {
        plan,
        target,
        options,
        progress,
        cancel,
        handle,
        chunk_pool: ChunkPool::default(),
    };
    let filter = RecordFilter {
        from: start,
        to: end,
        // A checkpoint means the time seek already happened.
        from_time: if resumed { None } else { range.from_time },
        to_time: range.to_time,
    };
    tokio::task::spawn_blocking(move || run.export(filter, e_tag, pending_end))
        .await
        .map_err(|e| ExportError::Io(std::io::Error::other(e)))?
}

struct Run {
    plan: Arc<PartitionPlan>,
    target: Arc<Target>,
    options: ExportOptions,
    progress: Arc<Progress>,
    cancel: CancellationToken,
    handle: Handle,
    chunk_pool: ChunkPool,
}

/// The files of the range being exported (one, or one per day for an Iceberg table), each
/// with its spool path.
type OpenFiles = FileSet<BufWriter<std::fs::File>, std::path::PathBuf>;

impl Run {
    fn export(
        &self,
        mut filter: RecordFilter,
        mut e_tag: Option<String>,
        pending_end: Option<i64>,
    ) -> Result<PartitionSummary, ExportError> {
        let plan = &*self.plan;
        let (topic, partition) = (plan.topic.as_str(), plan.partition);
        let mut summary = PartitionSummary {
            topic: topic.to_string(),
            partition,
            start_offset: filter.from,
            end_offset: filter.from,
            log_end: plan.log_end,
            stopped_by: plan.stopped_by.filter(|_| filter.to >= plan.safe_end),
            ..Default::default()
        };
        let mut cursor = filter.from;
        // A file that may have landed before its checkpoint moved ends here: the first file
        // ends there again, with the same records and so the same name and bytes.
        if let Some(p) = pending_end.filter(|&p| p > cursor && p < filter.to) {
            let end = std::mem::replace(&mut filter.to, p);
            cursor = self.export_range(cursor, &mut filter, &mut e_tag, &mut summary)?;
            if filter.to < p {
                // `--to-time` ended the export inside that file.
                summary.end_offset = summary.end_offset.max(cursor.min(filter.to));
                return Ok(summary);
            }
            // The next file starts where that one ended, inside a batch perhaps.
            (filter.from, filter.to) = (cursor, end);
        }
        cursor = self.export_range(cursor, &mut filter, &mut e_tag, &mut summary)?;
        summary.end_offset = summary.end_offset.max(cursor.min(filter.to));
        Ok(summary)
    }

    /// Exports the segments' records from `cursor` up to `filter.to`; returns where it
    /// ended.
    fn export_range(
        &self,
        mut cursor: i64,
        filter: &mut RecordFilter,
        e_tag: &mut Option<String>,
        summary: &mut PartitionSummary,
    ) -> Result<i64, ExportError> {
        for source in &self.plan.segments {
            if source.next_offset() <= cursor {
                continue;
            }
            if source.base_offset() >= filter.to {
                break;
            }
            if filter.from_time.is_some()
                && source
                    .max_timestamp()
                    .is_some_and(|m| m < filter.from_time.unwrap_or(0))
            {
                // Every record of this segment is before the time to start from.
                cursor = source.next_offset();
                continue;
            }
            cursor = self.export_segment(source, cursor, filter, e_tag, summary)?;
            if cursor >= filter.to {
                break;
            }
        }
        Ok(cursor)
    }

    /// Exports the batches of one segment from `cursor` into files (a new file once one
    /// passes [`ExportOptions::file_bytes`]), lands them and moves the checkpoint. Returns
    /// where this segment's export ended: the next offset to export.
    fn export_segment(
        &self,
        source: &Source,
        mut cursor: i64,
        filter: &mut RecordFilter,
        e_tag: &mut Option<String>,
        summary: &mut PartitionSummary,
    ) -> Result<i64, ExportError> {
        let mut batches = SegmentBatches::new(self.read_segment(source));
        let mut file: Option<OpenFiles> = None;
        let mut exhausted = false;
        loop {
            if self.cancel.is_cancelled() {
                if let Some(f) = file.take() {
                    discard(f);
                }
                return Err(ExportError::Cancelled);
            }
            let (header, batch) = match batches.read(source, cursor)? {
                NextBatch::Batch(header, batch) => (header, batch),
                NextBatch::NotYet => continue,
                NextBatch::End => {
                    exhausted = true;
                    break;
                }
            };
            self.progress
                .bytes_in
                .fetch_add(header.size as u64, Ordering::Relaxed);
            if header.next_offset() <= cursor {
                continue;
            }
            if header.base_offset >= filter.to {
                break;
            }
            let plan = &*self.plan;
            let mut from = filter.from;
            let open = loop {
                let open = file.get_or_insert_with(|| {
                    FileSet::new(&plan.topic, plan.partition, &self.options.convert)
                });
                // A cut range resumes inside this batch: its records before the cut are in
                // the files just closed.
                let mut part = RecordFilter { from, ..*filter };
                let pushed =
                    open.push_batch(&header, &batch, &mut part, &plan.aborted, &mut || {
                        self.open_file()
                    })?;
                (filter.to, filter.from_time) = (part.to, part.from_time);
                self.progress.add(&pushed);
                let Some(cut) = pushed.cut else {
                    break open;
                };
                let f = file.take().expect("file is open");
                self.close_file(f, cut, e_tag, filter, summary)?;
                from = cut;
            };
            let batch_end = header.next_offset().min(filter.to);
            if open.approximate_size() >= self.options.file_bytes
                && batch_end < source.next_offset().min(filter.to)
            {
                let f = file.take().expect("file is open");
                self.close_file(f, batch_end, e_tag, filter, summary)?;
                cursor = batch_end;
                continue;
            }
            cursor = batch_end;
            if cursor >= filter.to {
                break;
            }
        }
        drop(batches);
        // The segment ends at its next offset, or where the export ends inside it.
        let seg_end = if exhausted {
            source.next_offset().min(filter.to)
        } else {
            cursor.min(filter.to)
        };
        let seg_end = seg_end.max(cursor);
        match file.take() {
            Some(f) => self.close_file(f, seg_end, e_tag, filter, summary)?,
            None if filter.from_time.is_none() && seg_end > summary.end_offset => {
                *e_tag = self.commit(seg_end, None, e_tag.as_deref())?;
                summary.end_offset = seg_end;
            }
            None => {}
        }
        Ok(seg_end)
    }

    fn open_file(&self) -> Result<(BufWriter<std::fs::File>, std::path::PathBuf), ExportError> {
        let plan = &*self.plan;
        let spool = self.target.spool_path(
            &plan.topic,
            plan.partition,
            &format!("writing-{}", uuid::Uuid::new_v4().simple()),
        );
        let out = BufWriter::with_capacity(1 << 20, std::fs::File::create(&spool)?);
        Ok((out, spool))
    }

    /// Finishes the files of a range, lands them, and moves the checkpoint to `next_offset`.
    fn close_file(
        &self,
        files: OpenFiles,
        next_offset: i64,
        e_tag: &mut Option<String>,
        filter: &RecordFilter,
        summary: &mut PartitionSummary,
    ) -> Result<(), ExportError> {
        let plan = &*self.plan;
        let mut finished = Vec::new();
        for (_, (writer, spool)) in files.files {
            let (first, last) = (writer.first_offset, writer.last_offset);
            let rows = writer.row_count;
            let (not_json, mismatched) = (writer.values_not_json, writer.values_mismatched);
            let out = writer.finish()?;
            let file = out.into_inner().map_err(|e| e.into_error())?;
            file.sync_all()?;
            drop(file);
            match (first, last) {
                (Some(first), Some(last)) => {
                    let name = target::file_name(first, last);
                    finished.push((name, spool, rows, not_json, mismatched));
                }
                _ => {
                    let _ = std::fs::remove_file(&spool);
                }
            }
        }
        if finished.is_empty() {
            // Nothing exportable (aborted or control records only).
            if filter.from_time.is_none() {
                *e_tag = self.commit(next_offset, None, e_tag.as_deref())?;
                summary.end_offset = next_offset;
            }
            return Ok(());
        }
        // Say where these files end before they land: a run that dies between landing them and
        // moving the checkpoint leaves files the next run must write again, not overlap.
        *e_tag = self.write_checkpoint(summary.end_offset, None, Some(next_offset), e_tag)?;
        let mut last_name = None;
        for (name, spool, rows, not_json, mismatched) in finished {
            let size = self.handle.block_on(self.target.land(
                &plan.topic,
                plan.partition,
                &spool,
                &name,
            ))?;
            self.progress.bytes_out.fetch_add(size, Ordering::Relaxed);
            self.progress.files.fetch_add(1, Ordering::Relaxed);
            summary.bytes_out += size;
            summary.records += rows;
            summary.values_not_json += not_json;
            summary.values_mismatched += mismatched;
            summary.files.push(name.clone());
            last_name = Some(name);
        }
        if let Some(pause) = self.options.pause_before_checkpoint {
            std::thread::sleep(pause);
        }
        *e_tag = self.commit(next_offset, last_name, e_tag.as_deref())?;
        summary.end_offset = next_offset;
        Ok(())
    }

    fn commit(
        &self,
        next_offset: i64,
        last_file: Option<String>,
        e_tag: Option<&str>,
    ) -> Result<Option<String>, ExportError> {
        self.write_checkpoint(next_offset, last_file, None, &e_tag.map(str::to_string))
    }

    fn write_checkpoint(
        &self,
        next_offset: i64,
        last_file: Option<String>,
        pending_end: Option<i64>,
        e_tag: &Option<String>,
    ) -> Result<Option<String>, ExportError> {
        let plan = &*self.plan;
        self.handle.block_on(self.target.write_checkpoint(
            &plan.topic,
            plan.partition,
            Checkpoint::new(
                &plan.topic,
                plan.partition,
                next_offset,
                last_file,
                pending_end,
            ),
            e_tag.as_deref(),
        ))
    }

    /// Reads a segment's log bytes in chunks on an async task, two chunks ahead.
    fn read_segment(&self, source: &Source) -> SegmentChunks {
        let (tx, rx) = tokio::sync::mpsc::channel(2);
        let chunk = self.options.chunk_bytes.max(64 << 10);
        let source = source.clone();
        let store = self.plan.remote_store.clone();
        let pool = self.chunk_pool.clone();
        let task = self.handle.spawn(async move {
            let r = read_chunks(&source, store.as_deref(), &pool, chunk, &tx).await;
            if let Err(e) = r {
                let _ = tx.send(Err(e)).await;
            }
        });
        SegmentChunks { rx, task }
    }
}

/// The chunks of one segment; dropping it stops the reader task.
struct SegmentChunks {
    rx: tokio::sync::mpsc::Receiver<Result<Bytes, ExportError>>,
    task: tokio::task::JoinHandle<()>,
}

impl SegmentChunks {
    fn blocking_recv(&mut self) -> Option<Result<Bytes, ExportError>> {
        self.rx.blocking_recv()
    }
}

impl Drop for SegmentChunks {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A segment's chunks cut into batches. `buf` starts at a batch boundary; `next` is the
/// unread rest of the last chunk. A batch that straddles two chunks is the only one copied.
struct SegmentBatches {
    chunks: SegmentChunks,
    buf: Bytes,
    next: Bytes,
}

/// What one step of [`SegmentBatches::read`] found.
enum NextBatch {
    Batch(BatchHeader, Bytes),
    /// More bytes were taken in; no whole batch yet.
    NotYet,
    /// The segment ended at a batch boundary.
    End,
}

impl SegmentBatches {
    fn new(chunks: SegmentChunks) -> SegmentBatches {
        SegmentBatches {
            chunks,
            buf: Bytes::new(),
            next: Bytes::new(),
        }
    }

    /// The next whole batch, or else takes in more bytes (completing a straddling batch from
    /// the last chunk, or waiting for the next chunk). `cursor` and `source` only name where
    /// a segment that ends inside a batch is corrupt.
    fn read(&mut self, source: &Source, cursor: i64) -> Result<NextBatch, ExportError> {
        if let Some(header) = BatchHeader::parse(&self.buf)? {
            let batch = self.buf.split_to(header.size);
            return Ok(NextBatch::Batch(header, batch));
        }
        if !self.next.is_empty() {
            self.buf = if self.buf.is_empty() {
                std::mem::take(&mut self.next)
            } else {
                // Complete the batch header, then the batch, from `next`.
                let buf = &self.buf;
                let want = match buf.get(8..LOG_OVERHEAD) {
                    Some(len) => {
                        let len = i32::from_be_bytes([len[0], len[1], len[2], len[3]]);
                        (LOG_OVERHEAD + len.max(0) as usize).saturating_sub(buf.len())
                    }
                    None => LOG_OVERHEAD - buf.len(),
                };
                let tail = self.next.split_to(want.min(self.next.len()));
                let mut m = BytesMut::with_capacity(buf.len() + tail.len());
                m.extend_from_slice(buf);
                m.extend_from_slice(&tail);
                m.freeze()
            };
            return Ok(NextBatch::NotYet);
        }
        match self.chunks.blocking_recv() {
            Some(Ok(chunk)) => {
                self.next = chunk;
                Ok(NextBatch::NotYet)
            }
            Some(Err(e)) => Err(e),
            None if self.buf.is_empty() => Ok(NextBatch::End),
            None => Err(ConvertError::Corrupt {
                offset: cursor,
                reason: format!(
                    "{} ends inside a batch ({} bytes left)",
                    source.describe(),
                    self.buf.len()
                ),
            }
            .into()),
        }
    }
}

/// Buffers for local segment reads, handed back when the converter drops the last slice of a
/// chunk: a partition's export reuses a few chunk-sized buffers instead of faulting fresh
/// memory in for every chunk. Holds at most [`POOLED_CHUNKS`] idle buffers, never more than
/// were in use at once.
#[derive(Clone, Default)]
struct ChunkPool(Arc<std::sync::Mutex<Vec<Vec<u8>>>>);

const POOLED_CHUNKS: usize = 4;

impl ChunkPool {
    /// An empty buffer with room for `capacity` bytes.
    fn take(&self, capacity: usize) -> Vec<u8> {
        let mut buf = self
            .0
            .lock()
            .ok()
            .and_then(|mut idle| idle.pop())
            .unwrap_or_default();
        buf.clear();
        buf.reserve_exact(capacity);
        buf
    }

    /// `data` as `Bytes` that return the buffer to the pool when the last slice is dropped.
    fn bytes(&self, data: Vec<u8>) -> Bytes {
        Bytes::from_owner(PooledChunk {
            data,
            pool: self.clone(),
        })
    }
}

struct PooledChunk {
    data: Vec<u8>,
    pool: ChunkPool,
}

impl AsRef<[u8]> for PooledChunk {
    fn as_ref(&self) -> &[u8] {
        &self.data
    }
}

impl Drop for PooledChunk {
    fn drop(&mut self) {
        if let Ok(mut idle) = self.pool.0.lock() {
            if idle.len() < POOLED_CHUNKS {
                idle.push(std::mem::take(&mut self.data));
            }
        }
    }
}

async fn read_chunks(
    source: &Source,
    store: Option<&RemoteStore>,
    pool: &ChunkPool,
    chunk: usize,
    tx: &tokio::sync::mpsc::Sender<Result<Bytes, ExportError>>,
) -> Result<(), ExportError> {
    match source {
        Source::Local { log, size, .. } => {
            let mut left = *size;
            let f = match tokio::fs::File::open(log).await {
                Ok(f) => Arc::new(f.into_std().await),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(ExportError::SourceGone(log.display().to_string()))
                }
                Err(e) => return Err(e.into()),
            };
            while left > 0 {
                // Read straight into a pooled buffer on a blocking thread (tokio's File would
                // read into its own buffer and copy); never past the whole batches planned.
                let (f, buf) = (f.clone(), pool.take(chunk));
                let want = left.min(chunk as u64);
                let buf = tokio::task::spawn_blocking(move || {
                    let mut buf = buf;
                    (&*f).take(want).read_to_end(&mut buf).map(|_| buf)
                })
                .await
                .map_err(std::io::Error::other)??;
                if buf.is_empty() {
                    return Ok(());
                }
                left -= buf.len() as u64;
                if tx.send(Ok(pool.bytes(buf))).await.is_err() {
                    return Ok(());
                }
            }
            Ok(())
        }
        Source::Remote { topic, segment } => {
            let store = store.ok_or_else(|| {
                ExportError::Checkpoint("a remote segment without a store".to_string())
            })?;
            let mut pos = segment.log.start;
            while pos < segment.log.end {
                let end = (pos + chunk as u64).min(segment.log.end);
                let data = match store.get_range(topic, &segment.key, pos..end).await {
                    Ok(d) => d,
                    Err(StoreError::NotFound(k)) => return Err(ExportError::SourceGone(k)),
                    Err(e) => return Err(e.into()),
                };
                pos = end;
                if tx.send(Ok(data)).await.is_err() {
                    return Ok(());
                }
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests;
