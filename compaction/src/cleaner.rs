//! One cleaning pass over one partition (Kafka's `Cleaner.doClean`).
//!
//! 1. Map: read the cleanable section `[first dirty, first uncleanable)` and record, for every
//!    key, its latest offset, until the map is full. The map then covers `[first dirty, end)`
//!    where `end` = last fully mapped offset + 1; the next pass starts at `end`.
//! 2. Recopy: every segment below `end` (clean ones included) is grouped with its neighbours
//!    up to `segment.bytes` and rewritten through the [`BatchSink`], keeping a record iff it
//!    lies past the mapped range or is the newest for its key, and dropping a tombstone once
//!    its batch's delete horizon has passed.
//!
//! Concurrency and cancellation: a [`Cleaner`] owns its offset map and runs one pass at a time;
//! several cleaners may run on different partitions (the [`crate::CleanerManager`] keeps them
//! apart) and share one [`Throttler`]. The pass checks the cancellation flag before each batch;
//! on cancellation the group in progress is abandoned and groups already committed stay (each
//! is a valid, compacted replacement), the checkpoint is simply not advanced.
//!
//! Errors: a corrupt batch or an I/O error abandons the group in progress and ends the pass;
//! the log is unchanged past the last committed group. Nothing is retried here.

use std::collections::HashMap;
use std::fmt::Debug;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::batch::{self, BatchError, BatchHeader};
use crate::offset_map::{OffsetMap, OffsetMapTooSmall};
use crate::segment::{BatchSink, LastRecord, RetainedBatch, SegmentInfo, SegmentSource};
use crate::selection::{dirty_ratio, first_uncleanable_segment_base, log_segments, LogToClean};
use crate::throttle::Throttler;

#[derive(Debug, thiserror::Error)]
pub enum CleanerError {
    #[error("reading the partition log failed")]
    Source(#[source] io::Error),
    #[error("writing the cleaned segment failed")]
    Sink(#[source] io::Error),
    #[error("corrupt or unsupported batch in segment {segment_base_offset}")]
    CorruptBatch {
        segment_base_offset: i64,
        #[source]
        source: BatchError,
    },
    #[error("the offset map ({capacity} keys) filled up before one batch at offset {first_dirty_offset} was mapped")]
    OffsetMapTooSmall {
        capacity: usize,
        first_dirty_offset: i64,
    },
}

impl CleanerError {
    /// I/O failures may pass on a later attempt; a corrupt batch or a too small map will not,
    /// and the partition should be marked uncleanable until an operator acts.
    pub fn is_retriable(&self) -> bool {
        matches!(self, CleanerError::Source(_) | CleanerError::Sink(_))
    }
}

/// How a pass ended.
#[derive(Debug, Clone)]
pub enum PassOutcome {
    /// The broker should persist `first_dirty_offset` as the partition's cleaner checkpoint.
    Completed {
        first_dirty_offset: i64,
        stats: PassStats,
    },
    /// Cancelled between batches; committed groups stay, the checkpoint must not move.
    Cancelled { stats: PassStats },
}

impl PassOutcome {
    pub fn stats(&self) -> &PassStats {
        match self {
            PassOutcome::Completed { stats, .. } | PassOutcome::Cancelled { stats } => stats,
        }
    }
}

/// Figures of one pass, for metrics and the pass log line.
#[derive(Debug, Clone, Default)]
pub struct PassStats {
    /// Bytes read while recopying, and written to cleaned segments.
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Bytes and records read while building the offset map.
    pub map_bytes_read: u64,
    pub map_records_read: u64,
    pub records_read: u64,
    pub records_retained: u64,
    /// Tombstones dropped because their delete horizon had passed.
    pub tombstones_removed: u64,
    /// Records without a key seen in the mapped range (kept; see the crate docs).
    pub null_key_records: u64,
    pub batches_copied: u64,
    pub batches_rewritten: u64,
    /// Batches kept without records to preserve producer state or the round's last offset.
    pub batches_emptied: u64,
    pub batches_removed: u64,
    pub groups_committed: u64,
    pub map_duration: Duration,
    pub duration: Duration,
    pub dirty_ratio_before: f64,
    /// `None` if the segment list could not be read after the pass.
    pub dirty_ratio_after: Option<f64>,
    /// Fraction of the offset map's slots used.
    pub buffer_utilization: f64,
}

impl PassStats {
    pub fn records_removed(&self) -> u64 {
        self.records_read.saturating_sub(self.records_retained)
    }
}

/// One cleaner task's state: its offset map and the shared throttle.
pub struct Cleaner {
    id: usize,
    map: OffsetMap,
    throttler: Arc<Throttler>,
}

enum Flow {
    Done,
    Full,
    Cancelled,
}

/// What recopying needs besides the map, fixed for the whole pass.
struct RecopyContext<'a> {
    now_ms: i64,
    delete_retention_ms: i64,
    /// Kafka's `upperBoundOffsetOfCleaningRound`: the batch ending right there is kept even
    /// if emptied, so the log keeps its last offset before the uncleanable section.
    round_upper_bound: i64,
    active_producers: &'a HashMap<i64, LastRecord>,
    /// `strata.max.decompressed.batch.bytes`.
    max_decompressed_batch_bytes: u64,
}

impl Cleaner {
    /// A cleaner with an offset map of `map_bytes` (see
    /// [`crate::CleanerConfig::offset_map_bytes_per_cleaner`]) filled up to `load_factor`.
    pub fn new(
        id: usize,
        map_bytes: usize,
        load_factor: f64,
        throttler: Arc<Throttler>,
    ) -> Result<Self, OffsetMapTooSmall> {
        Ok(Cleaner {
            id,
            map: OffsetMap::new(map_bytes, load_factor)?,
            throttler,
        })
    }

    /// Keys one pass can map.
    pub fn map_capacity(&self) -> usize {
        self.map.capacity()
    }

    /// Cleans `log` once. `cancel` is polled before every batch.
    pub fn clean<P: Debug>(
        &mut self,
        log: &LogToClean<P>,
        source: &dyn SegmentSource,
        sink: &mut dyn BatchSink,
        now_ms: i64,
        cancel: &dyn Fn() -> bool,
    ) -> Result<PassOutcome, CleanerError> {
        let span =
            tracing::info_span!("log_cleaner_pass", partition = ?log.partition, cleaner = self.id);
        let _entered = span.enter();
        let started = Instant::now();
        let mut stats = PassStats {
            dirty_ratio_before: log.cleanable_ratio,
            ..PassStats::default()
        };

        let segments = source.segments().map_err(CleanerError::Source)?;
        let Some(active) = segments.last() else {
            return Ok(PassOutcome::Completed {
                first_dirty_offset: log.first_dirty_offset,
                stats,
            });
        };
        // Re-derive the bound from the current segments: the active segment may have rolled.
        let first_uncleanable = first_uncleanable_segment_base(
            &segments,
            log.first_uncleanable_offset.min(active.base_offset),
        );
        let first_dirty = log.first_dirty_offset.min(first_uncleanable);

        let flow = self.build_offset_map(
            source,
            &segments,
            (first_dirty, first_uncleanable),
            log.config.max_decompressed_batch_bytes,
            &mut stats,
            cancel,
        )?;
        stats.map_duration = started.elapsed();
        stats.buffer_utilization = self.map.utilization();
        if matches!(flow, Flow::Cancelled) {
            stats.duration = started.elapsed();
            return Ok(PassOutcome::Cancelled { stats });
        }
        let end_offset = match self.map.latest_offset() {
            Some(latest) if latest >= first_dirty => latest + 1,
            _ if matches!(flow, Flow::Full) => {
                return Err(CleanerError::OffsetMapTooSmall {
                    capacity: self.map.capacity(),
                    first_dirty_offset: first_dirty,
                })
            }
            // Nothing dirty: nothing to do this pass.
            _ => {
                stats.duration = started.elapsed();
                stats.dirty_ratio_after =
                    Some(dirty_ratio(&segments, first_dirty, first_uncleanable));
                return Ok(PassOutcome::Completed {
                    first_dirty_offset: first_dirty,
                    stats,
                });
            }
        };
        tracing::debug!(
            first_dirty,
            end_offset,
            first_uncleanable,
            keys = self.map.len(),
            "offset map built"
        );

        let active_producers = source.last_records_of_active_producers();
        let context = RecopyContext {
            now_ms,
            delete_retention_ms: log.config.delete_retention_ms,
            round_upper_bound: first_uncleanable,
            active_producers: &active_producers,
            max_decompressed_batch_bytes: log.config.max_decompressed_batch_bytes,
        };
        let groups = group_segments_by_size(
            log_segments(&segments, 0, end_offset),
            log.config.segment_bytes,
            log.config.segment_index_bytes,
            first_uncleanable,
        );
        for group in groups {
            if let Flow::Cancelled =
                self.clean_group(group, source, sink, &context, &mut stats, cancel)?
            {
                stats.duration = started.elapsed();
                return Ok(PassOutcome::Cancelled { stats });
            }
        }

        stats.duration = started.elapsed();
        stats.dirty_ratio_after = source
            .segments()
            .ok()
            .map(|after| dirty_ratio(&after, end_offset, first_uncleanable));
        tracing::info!(
            end_offset,
            bytes_read = stats.bytes_read,
            bytes_written = stats.bytes_written,
            records_removed = stats.records_removed(),
            duration_ms = stats.duration.as_millis() as u64,
            "log cleaner pass done"
        );
        Ok(PassOutcome::Completed {
            first_dirty_offset: end_offset,
            stats,
        })
    }

    fn build_offset_map(
        &mut self,
        source: &dyn SegmentSource,
        segments: &[SegmentInfo],
        (start, end): (i64, i64),
        limit: u64,
        stats: &mut PassStats,
        cancel: &dyn Fn() -> bool,
    ) -> Result<Flow, CleanerError> {
        self.map.clear();
        let dirty = log_segments(segments, start, end);
        for (index, segment) in dirty.iter().enumerate() {
            let next_start = dirty.get(index + 1).map_or(end, |next| next.base_offset);
            match self.map_segment(source, segment, (start, next_start), limit, stats, cancel)? {
                Flow::Done => {}
                other => return Ok(other),
            }
        }
        Ok(Flow::Done)
    }

    /// Adds the keys of one segment from `start` on; `Full` when the map ran out of room (the
    /// batch being read then does not count as mapped).
    fn map_segment(
        &mut self,
        source: &dyn SegmentSource,
        segment: &SegmentInfo,
        (start, next_segment_start): (i64, i64),
        limit: u64,
        stats: &mut PassStats,
        cancel: &dyn Fn() -> bool,
    ) -> Result<Flow, CleanerError> {
        let corrupt = |source| CleanerError::CorruptBatch {
            segment_base_offset: segment.base_offset,
            source,
        };
        let batches = source
            .read_batches(segment.base_offset, start)
            .map_err(CleanerError::Source)?;
        for raw in batches {
            if cancel() {
                return Ok(Flow::Cancelled);
            }
            let raw = raw.map_err(CleanerError::Source)?;
            self.throttler.maybe_throttle(raw.len() as u64);
            stats.map_bytes_read += raw.len() as u64;
            let header = BatchHeader::parse(&raw).map_err(corrupt)?;
            if header.last_offset() < start {
                continue;
            }
            // Transactional batches and markers are not mapped: see "not done yet" in lib.rs.
            if !header.is_control() && !header.is_transactional() {
                // Walked in place (decompressed under the bound), nothing kept per record.
                let full = batch::for_each_key(&raw, &header, limit, |key, offset| {
                    stats.map_records_read += 1;
                    match key {
                        Some(key) if offset >= start => !self.map.put(key, offset),
                        _ => false,
                    }
                })
                .map_err(corrupt)?;
                if full {
                    return Ok(Flow::Full);
                }
            }
            self.map.update_latest_offset(header.last_offset());
        }
        // Offsets may have gaps (removed by earlier passes): the whole segment is covered.
        self.map.update_latest_offset(next_segment_start - 1);
        Ok(Flow::Done)
    }

    fn clean_group(
        &mut self,
        group: &[SegmentInfo],
        source: &dyn SegmentSource,
        sink: &mut dyn BatchSink,
        context: &RecopyContext<'_>,
        stats: &mut PassStats,
        cancel: &dyn Fn() -> bool,
    ) -> Result<Flow, CleanerError> {
        let Some(last) = group.last() else {
            return Ok(Flow::Done);
        };
        sink.begin(group).map_err(CleanerError::Sink)?;
        let recopied = self.recopy_group(group, source, sink, context, stats, cancel);
        match recopied {
            Ok(Flow::Done) => {
                if let Err(error) = sink.commit(last.last_modified_ms) {
                    abandon(sink);
                    return Err(CleanerError::Sink(error));
                }
                stats.groups_committed += 1;
                Ok(Flow::Done)
            }
            Ok(flow) => {
                abandon(sink);
                Ok(flow)
            }
            Err(error) => {
                abandon(sink);
                Err(error)
            }
        }
    }

    fn recopy_group(
        &mut self,
        group: &[SegmentInfo],
        source: &dyn SegmentSource,
        sink: &mut dyn BatchSink,
        context: &RecopyContext<'_>,
        stats: &mut PassStats,
        cancel: &dyn Fn() -> bool,
    ) -> Result<Flow, CleanerError> {
        for segment in group {
            let corrupt = |source| CleanerError::CorruptBatch {
                segment_base_offset: segment.base_offset,
                source,
            };
            let batches = source
                .read_batches(segment.base_offset, segment.base_offset)
                .map_err(CleanerError::Source)?;
            for raw in batches {
                if cancel() {
                    return Ok(Flow::Cancelled);
                }
                let raw = raw.map_err(CleanerError::Source)?;
                self.throttler.maybe_throttle(raw.len() as u64);
                stats.bytes_read += raw.len() as u64;
                if let Some(retained) = self.filter_batch(raw, context, stats).map_err(corrupt)? {
                    self.throttler.maybe_throttle(retained.bytes.len() as u64);
                    stats.bytes_written += retained.bytes.len() as u64;
                    sink.append(retained).map_err(CleanerError::Sink)?;
                }
            }
        }
        Ok(Flow::Done)
    }

    /// Kafka's `MemoryRecords.filterTo` with the cleaner's record filter, for one batch.
    fn filter_batch(
        &self,
        raw: Bytes,
        context: &RecopyContext<'_>,
        stats: &mut PassStats,
    ) -> Result<Option<RetainedBatch>, BatchError> {
        let header = BatchHeader::parse(&raw)?;
        let count = u64::try_from(header.records_count).unwrap_or(0);
        // Until transactions exist, markers and transactional batches are kept as they are.
        if header.is_control() || header.is_transactional() {
            stats.records_read += count;
            stats.records_retained += count;
            stats.batches_copied += 1;
            return Ok(Some(retained(raw, &header)));
        }

        let records = batch::records(&raw, &header, context.max_decompressed_batch_bytes)?;
        stats.records_read += records.len() as u64;
        let delete_horizon = header.delete_horizon_ms();
        let retain_tombstones = delete_horizon.is_none_or(|horizon| context.now_ms < horizon);
        let mapped_up_to = self.map.latest_offset().unwrap_or(-1);

        let mut kept = Vec::with_capacity(records.len());
        let mut contains_tombstones = false;
        for record in &records {
            let keep = if record.offset > mapped_up_to {
                true
            } else if let Some(key) = &record.key {
                let newest = self
                    .map
                    .get(key)
                    .is_none_or(|latest| record.offset >= latest);
                if newest && !record.has_value && !retain_tombstones {
                    stats.tombstones_removed += 1;
                }
                newest && (record.has_value || retain_tombstones)
            } else {
                stats.null_key_records += 1;
                true
            };
            if keep {
                contains_tombstones |= !record.has_value;
                kept.push(record);
            }
        }
        stats.records_retained += kept.len() as u64;

        if kept.is_empty() {
            let last_of_producer = header.has_producer_id()
                && is_last_batch_of_active_producer(&header, context.active_producers);
            if last_of_producer || header.next_offset() == context.round_upper_bound {
                stats.batches_emptied += 1;
                let empty = batch::empty_batch(&header)?;
                return Ok(Some(retained(empty, &header)));
            }
            stats.batches_removed += 1;
            return Ok(None);
        }
        let set_delete_horizon = contains_tombstones && delete_horizon.is_none();
        if kept.len() == records.len() && !set_delete_horizon {
            stats.batches_copied += 1;
            return Ok(Some(retained(raw, &header)));
        }
        let horizon = if set_delete_horizon {
            Some(context.now_ms.saturating_add(context.delete_retention_ms))
        } else {
            delete_horizon
        };
        let rebuilt = batch::rebuild(&header, &kept, horizon)?;
        let rebuilt_header = BatchHeader::parse(&rebuilt)?;
        stats.batches_rewritten += 1;
        Ok(Some(retained(rebuilt, &rebuilt_header)))
    }
}

/// Kafka keeps the batch holding an active producer's last data offset, or its last marker
/// when the producer's last entry is a marker, so the producer state survives cleaning.
fn is_last_batch_of_active_producer(
    header: &BatchHeader,
    producers: &HashMap<i64, LastRecord>,
) -> bool {
    producers
        .get(&header.producer_id)
        .is_some_and(|last| match last.last_data_offset {
            Some(offset) => header.last_offset() == offset,
            None => header.is_control() && header.producer_epoch == last.producer_epoch,
        })
}

fn retained(bytes: Bytes, header: &BatchHeader) -> RetainedBatch {
    RetainedBatch {
        bytes,
        base_offset: header.base_offset,
        last_offset: header.last_offset(),
        max_timestamp_ms: header.max_timestamp,
    }
}

fn abandon(sink: &mut dyn BatchSink) {
    if let Err(error) = sink.abandon() {
        tracing::warn!(%error, "abandoning a cleaned segment failed; start-up recovery will remove it");
    }
}

/// Kafka's `groupSegmentsBySize`: consecutive segments whose log and each index together fit
/// the limits, and whose offsets span at most `i32::MAX` (relative offsets in the index).
pub fn group_segments_by_size(
    segments: &[SegmentInfo],
    max_bytes: u64,
    max_index_bytes: u64,
    first_uncleanable_offset: i64,
) -> Vec<&[SegmentInfo]> {
    let mut groups = Vec::new();
    let mut start = 0;
    while start < segments.len() {
        let first = &segments[start];
        let (mut log_bytes, mut index_bytes, mut time_index_bytes) = (
            first.size_bytes,
            first.offset_index_bytes,
            first.time_index_bytes,
        );
        let mut end = start + 1;
        while let Some(next) = segments.get(end) {
            let last_offset_estimate = segments
                .get(end + 1)
                .map_or(first_uncleanable_offset, |after| after.base_offset)
                - 1;
            let fits = log_bytes.saturating_add(next.size_bytes) <= max_bytes
                && index_bytes.saturating_add(next.offset_index_bytes) <= max_index_bytes
                && time_index_bytes.saturating_add(next.time_index_bytes) <= max_index_bytes
                && (next.size_bytes == 0
                    || last_offset_estimate.saturating_sub(first.base_offset)
                        <= i64::from(i32::MAX));
            if !fits {
                break;
            }
            log_bytes += next.size_bytes;
            index_bytes += next.offset_index_bytes;
            time_index_bytes += next.time_index_bytes;
            end += 1;
        }
        groups.push(&segments[start..end]);
        start = end;
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(base_offset: i64, size_bytes: u64) -> SegmentInfo {
        SegmentInfo {
            base_offset,
            next_offset: base_offset,
            size_bytes,
            offset_index_bytes: 10,
            time_index_bytes: 10,
            largest_timestamp_ms: 0,
            first_batch_timestamp_ms: None,
            last_modified_ms: 0,
        }
    }

    fn bases(groups: &[&[SegmentInfo]]) -> Vec<Vec<i64>> {
        groups
            .iter()
            .map(|g| g.iter().map(|s| s.base_offset).collect())
            .collect()
    }

    #[test]
    fn groups_fill_up_to_segment_bytes() {
        let segs = vec![
            segment(0, 40),
            segment(10, 40),
            segment(20, 30),
            segment(30, 50),
            segment(40, 100),
        ];
        let groups = group_segments_by_size(&segs, 100, 1000, 50);
        assert_eq!(bases(&groups), vec![vec![0, 10], vec![20, 30], vec![40]]);
    }

    #[test]
    fn groups_respect_index_limits() {
        let segs = vec![segment(0, 1), segment(10, 1), segment(20, 1)];
        let groups = group_segments_by_size(&segs, 100, 20, 30);
        assert_eq!(bases(&groups), vec![vec![0, 10], vec![20]]);
    }

    #[test]
    fn groups_never_span_more_than_i32_offsets() {
        let far = i64::from(i32::MAX);
        let segs = vec![segment(0, 1), segment(far - 10, 1), segment(far + 10, 1)];
        let groups = group_segments_by_size(&segs, 100, 1000, far + 20);
        assert_eq!(bases(&groups), vec![vec![0], vec![far - 10, far + 10]]);
        // An empty segment can always join.
        let segs = vec![segment(0, 1), segment(far + 10, 0)];
        assert_eq!(group_segments_by_size(&segs, 100, 1000, far + 20).len(), 1);
    }
}
