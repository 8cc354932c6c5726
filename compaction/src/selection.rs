//! Which part of a log may be cleaned, how dirty it is, and which partition to clean next
//! (Kafka's `LogCleanerManager.cleanableOffsets`, `maxCompactionDelay`, `LogToClean` and
//! `grabFilthiestCompactedLog`). Pure functions over segment metadata.
//!
//! - The *clean* section is `[log start, first dirty offset)`: already compacted by earlier
//!   passes (the first dirty offset is the broker's cleaner checkpoint).
//! - The *cleanable* section is `[first dirty, first uncleanable)`. The first uncleanable
//!   offset is the lowest of: the active segment's base (never cleaned), the base of the first
//!   dirty segment holding a record newer than `min.compaction.lag.ms`, and the upper bound the
//!   broker passes (last stable offset, itself at most the high watermark); then rounded down
//!   to a segment boundary, because cleaning works on whole segments.
//! - dirty ratio = cleanable bytes / (clean + cleanable bytes).
//! - A log is cleanable when its ratio exceeds `min.cleanable.dirty.ratio`, or when it has
//!   cleanable bytes and its oldest dirty segment's first batch is older than
//!   `max.compaction.lag.ms`. The cleanable log with the highest ratio goes first.

use crate::config::CompactionConfig;
use crate::segment::SegmentInfo;

/// What the broker reports about one compacted partition when asking what to clean.
#[derive(Debug, Clone)]
pub struct CleaningCandidate<P> {
    pub partition: P,
    /// All segments, in offset order, the active segment last.
    pub segments: Vec<SegmentInfo>,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    /// The first dirty offset recorded after the last pass (`cleaner-offset-checkpoint`).
    pub cleaner_checkpoint: Option<i64>,
    /// Nothing at or above this offset is cleaned: the last stable offset (which is at most
    /// the high watermark).
    pub upper_bound_offset: i64,
    pub config: CompactionConfig,
}

/// A partition's cleanable range and dirtiness, computed at one instant.
#[derive(Debug, Clone, PartialEq)]
pub struct LogToClean<P> {
    pub partition: P,
    pub first_dirty_offset: i64,
    /// The checkpoint was outside the log (truncation, or behind the log start after
    /// retention) and was reset to the log start; the broker should persist the new value.
    pub checkpoint_reset: bool,
    /// Segment boundary where the cleanable section ends.
    pub first_uncleanable_offset: i64,
    pub clean_bytes: u64,
    pub cleanable_bytes: u64,
    pub cleanable_ratio: f64,
    /// How long past `max.compaction.lag.ms` the oldest dirty segment is (0 if not).
    pub max_compaction_delay_ms: i64,
    pub config: CompactionConfig,
}

impl<P: Clone> LogToClean<P> {
    /// `None` when the log has no segment at all.
    pub fn compute(candidate: &CleaningCandidate<P>, now_ms: i64) -> Option<Self> {
        let segments = &candidate.segments;
        let active = segments.last()?;
        let log_start = candidate.log_start_offset;

        let checkpoint = candidate.cleaner_checkpoint.unwrap_or(log_start);
        let checkpoint_valid = (log_start..=candidate.log_end_offset).contains(&checkpoint);
        let first_dirty = if checkpoint_valid {
            checkpoint
        } else {
            log_start
        };

        let min_lag = candidate.config.min_compaction_lag_ms.max(0);
        let dirty_non_active = log_segments(segments, first_dirty, active.base_offset);
        let first_within_min_lag = (min_lag > 0)
            .then(|| {
                dirty_non_active
                    .iter()
                    .find(|s| s.largest_timestamp_ms > now_ms.saturating_sub(min_lag))
                    .map(|s| s.base_offset)
            })
            .flatten();
        let uncleanable = [
            Some(candidate.upper_bound_offset),
            Some(active.base_offset),
            first_within_min_lag,
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(active.base_offset)
        .max(first_dirty);

        let first_uncleanable = first_uncleanable_segment_base(segments, uncleanable);
        let clean_bytes = total_size(log_segments(segments, -1, first_dirty));
        let cleanable_bytes = total_size(log_segments(
            segments,
            first_dirty.min(first_uncleanable),
            first_uncleanable,
        ));
        let total = clean_bytes + cleanable_bytes;
        let cleanable_ratio = if total == 0 {
            0.0
        } else {
            cleanable_bytes as f64 / total as f64
        };

        let earliest_dirty_timestamp = dirty_non_active
            .iter()
            .filter_map(|s| s.first_batch_timestamp_ms)
            .filter(|ts| *ts > 0)
            .min();
        let max_lag = candidate.config.max_compaction_lag_ms.max(0);
        let max_compaction_delay_ms = earliest_dirty_timestamp
            .map(|ts| now_ms.saturating_sub(ts).saturating_sub(max_lag).max(0))
            .unwrap_or(0);

        Some(LogToClean {
            partition: candidate.partition.clone(),
            first_dirty_offset: first_dirty,
            checkpoint_reset: !checkpoint_valid,
            first_uncleanable_offset: first_uncleanable,
            clean_bytes,
            cleanable_bytes,
            cleanable_ratio,
            max_compaction_delay_ms,
            config: candidate.config.clone(),
        })
    }
}

impl<P> LogToClean<P> {
    pub fn total_bytes(&self) -> u64 {
        self.clean_bytes + self.cleanable_bytes
    }

    /// Past `max.compaction.lag.ms`: clean now whatever the ratio.
    pub fn need_compaction_now(&self) -> bool {
        self.max_compaction_delay_ms > 0
    }

    pub fn is_cleanable(&self) -> bool {
        (self.need_compaction_now() && self.cleanable_bytes > 0)
            || self.cleanable_ratio > self.config.min_cleanable_dirty_ratio
    }
}

/// Result of one selection round, with the figures Kafka exports as metrics.
#[derive(Debug, Clone)]
pub struct Selection<P> {
    pub filthiest: Option<LogToClean<P>>,
    /// Highest dirty ratio among non-empty logs (`max-dirty-percent`).
    pub max_dirty_ratio: f64,
    /// Logs that qualified for cleaning.
    pub cleanable_logs: usize,
    /// Largest `max.compaction.lag.ms` overrun (`max-compaction-delay-secs`).
    pub max_compaction_delay_ms: i64,
    /// Logs whose checkpoint was reset; the broker should persist their new first dirty offset.
    pub checkpoint_resets: Vec<(P, i64)>,
}

/// Picks the cleanable log with the highest dirty ratio.
pub fn select_filthiest<P: Clone>(
    candidates: impl IntoIterator<Item = CleaningCandidate<P>>,
    now_ms: i64,
) -> Selection<P> {
    let mut selection = Selection {
        filthiest: None,
        max_dirty_ratio: 0.0,
        cleanable_logs: 0,
        max_compaction_delay_ms: 0,
        checkpoint_resets: Vec::new(),
    };
    for candidate in candidates {
        let Some(log) = LogToClean::compute(&candidate, now_ms) else {
            continue;
        };
        if log.checkpoint_reset {
            selection
                .checkpoint_resets
                .push((log.partition.clone(), log.first_dirty_offset));
        }
        selection.max_compaction_delay_ms = selection
            .max_compaction_delay_ms
            .max(log.max_compaction_delay_ms);
        if log.total_bytes() == 0 {
            continue;
        }
        selection.max_dirty_ratio = selection.max_dirty_ratio.max(log.cleanable_ratio);
        if !log.is_cleanable() {
            continue;
        }
        selection.cleanable_logs += 1;
        let dirtier = selection
            .filthiest
            .as_ref()
            .is_none_or(|best| log.cleanable_ratio > best.cleanable_ratio);
        if dirtier {
            selection.filthiest = Some(log);
        }
    }
    selection
}

/// Dirty ratio of a log whose cleanable section is `[first_dirty, first_uncleanable)`.
pub fn dirty_ratio(segments: &[SegmentInfo], first_dirty: i64, first_uncleanable: i64) -> f64 {
    let clean = total_size(log_segments(segments, -1, first_dirty));
    let cleanable = total_size(log_segments(
        segments,
        first_dirty.min(first_uncleanable),
        first_uncleanable,
    ));
    let total = clean + cleanable;
    if total == 0 {
        0.0
    } else {
        cleanable as f64 / total as f64
    }
}

/// Kafka's `logSegments(from, to)`: the segment holding `from` (or the first one) through the
/// last segment whose base offset is below `to`.
pub(crate) fn log_segments(segments: &[SegmentInfo], from: i64, to: i64) -> &[SegmentInfo] {
    if from >= to {
        return &[];
    }
    let start = segments
        .iter()
        .rposition(|s| s.base_offset <= from)
        .unwrap_or(0);
    let end = segments.partition_point(|s| s.base_offset < to);
    if start >= end {
        &[]
    } else {
        &segments[start..end]
    }
}

/// Base offset of the segment holding `offset`, or of the active segment if `offset` is in it
/// or beyond (Kafka's `calculateCleanableBytes`).
pub(crate) fn first_uncleanable_segment_base(segments: &[SegmentInfo], offset: i64) -> i64 {
    let Some(active) = segments.last() else {
        return offset;
    };
    if offset >= active.base_offset {
        return active.base_offset;
    }
    match segments.iter().rposition(|s| s.base_offset <= offset) {
        Some(index) => segments[index].base_offset,
        // Below the first segment: nothing is cleanable.
        None => segments[0].base_offset.min(offset),
    }
}

fn total_size(segments: &[SegmentInfo]) -> u64 {
    segments.iter().map(|s| s.size_bytes).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60_000;

    /// Segments of 100 bytes, each 10 offsets wide, written one minute apart; the last one is
    /// the active segment.
    fn segments(count: i64, now_ms: i64) -> Vec<SegmentInfo> {
        (0..count)
            .map(|i| {
                let written = now_ms - (count - i) * MIN;
                SegmentInfo {
                    base_offset: i * 10,
                    next_offset: i * 10 + 10,
                    size_bytes: 100,
                    offset_index_bytes: 0,
                    time_index_bytes: 0,
                    largest_timestamp_ms: written,
                    first_batch_timestamp_ms: Some(written - 1_000),
                    last_modified_ms: written,
                }
            })
            .collect()
    }

    fn candidate(
        name: &'static str,
        count: i64,
        checkpoint: Option<i64>,
        now_ms: i64,
    ) -> CleaningCandidate<&'static str> {
        CleaningCandidate {
            partition: name,
            segments: segments(count, now_ms),
            log_start_offset: 0,
            log_end_offset: count * 10,
            cleaner_checkpoint: checkpoint,
            upper_bound_offset: count * 10,
            config: CompactionConfig::default(),
        }
    }

    const NOW: i64 = 1_000_000_000;

    #[test]
    fn dirty_ratio_is_cleanable_over_total_bytes_and_excludes_the_active_segment() {
        // 5 segments: 0..40 sealed, 40.. active. Checkpoint at 20: clean = 2 segments,
        // cleanable = segments 20 and 30.
        let log = LogToClean::compute(&candidate("p", 5, Some(20), NOW), NOW).unwrap();
        assert_eq!(log.first_dirty_offset, 20);
        assert_eq!(
            log.first_uncleanable_offset, 40,
            "the active segment is never cleanable"
        );
        assert_eq!(log.clean_bytes, 200);
        assert_eq!(log.cleanable_bytes, 200);
        assert_eq!(log.cleanable_ratio, 0.5);
        assert!(
            !log.is_cleanable(),
            "0.5 does not exceed min.cleanable.dirty.ratio 0.5"
        );
    }

    #[test]
    fn the_dirtiest_log_above_the_minimum_ratio_is_selected() {
        let now = NOW;
        let selection = select_filthiest(
            vec![
                candidate("half", 5, Some(20), now),  // 0.5: not above 0.5
                candidate("most", 5, Some(0), now),   // 1.0
                candidate("some", 11, Some(30), now), // 7/10
            ],
            now,
        );
        assert_eq!(selection.filthiest.unwrap().partition, "most");
        assert_eq!(selection.cleanable_logs, 2);
        assert_eq!(selection.max_dirty_ratio, 1.0);
    }

    #[test]
    fn nothing_is_selected_when_all_logs_are_clean_enough() {
        let selection = select_filthiest(vec![candidate("clean", 5, Some(40), NOW)], NOW);
        assert!(selection.filthiest.is_none());
        assert_eq!(selection.max_dirty_ratio, 0.0);
    }

    #[test]
    fn max_compaction_lag_forces_cleaning_below_the_ratio() {
        let mut c = candidate("lagging", 5, Some(30), NOW); // ratio 0.25
        c.config.max_compaction_lag_ms = 2 * MIN;
        let log = LogToClean::compute(&c, NOW).unwrap();
        assert!(log.cleanable_ratio < 0.5);
        // Segment 30 was written 2 minutes ago, its first batch a second before that.
        assert_eq!(log.max_compaction_delay_ms, 1_000);
        assert!(log.need_compaction_now());
        assert!(log.is_cleanable());

        c.config.max_compaction_lag_ms = 3 * MIN;
        let log = LogToClean::compute(&c, NOW).unwrap();
        assert!(!log.need_compaction_now());
        assert!(!log.is_cleanable());
    }

    #[test]
    fn max_compaction_lag_needs_cleanable_bytes() {
        let mut c = candidate("lagging", 5, Some(40), NOW);
        c.config.max_compaction_lag_ms = 0;
        let log = LogToClean::compute(&c, NOW).unwrap();
        assert_eq!(log.cleanable_bytes, 0);
        assert!(
            !log.is_cleanable(),
            "nothing to clean even though the lag is exceeded"
        );
    }

    #[test]
    fn min_compaction_lag_stops_at_the_first_recent_segment() {
        let mut c = candidate("young", 6, Some(0), NOW);
        // Segments end at now-6min .. now-2min (sealed), active at now-1min.
        c.config.min_compaction_lag_ms = 4 * MIN + 1;
        let log = LogToClean::compute(&c, NOW).unwrap();
        // Segment 20 (largest timestamp now-4min) is within the lag.
        assert_eq!(log.first_uncleanable_offset, 20);
        assert_eq!(log.cleanable_bytes, 200);
    }

    #[test]
    fn upper_bound_inside_a_segment_rounds_down_to_its_base() {
        let mut c = candidate("hw", 6, Some(0), NOW);
        c.upper_bound_offset = 27;
        let log = LogToClean::compute(&c, NOW).unwrap();
        assert_eq!(log.first_uncleanable_offset, 20);
        c.upper_bound_offset = 0;
        let log = LogToClean::compute(&c, NOW).unwrap();
        assert_eq!(log.first_uncleanable_offset, 0);
        assert_eq!(log.cleanable_bytes, 0);
    }

    #[test]
    fn a_checkpoint_outside_the_log_is_reset_to_the_log_start() {
        let mut c = candidate("truncated", 5, Some(500), NOW);
        c.log_start_offset = 10;
        let log = LogToClean::compute(&c, NOW).unwrap();
        assert!(log.checkpoint_reset);
        assert_eq!(log.first_dirty_offset, 10);
        let mut c = candidate("retention", 5, Some(5), NOW);
        c.log_start_offset = 10;
        assert!(LogToClean::compute(&c, NOW).unwrap().checkpoint_reset);
        let selection = select_filthiest(vec![c], NOW);
        assert_eq!(selection.checkpoint_resets, vec![("retention", 10)]);
    }

    #[test]
    fn log_segments_follows_kafka_range_rules() {
        let segs = segments(4, NOW);
        let bases = |s: &[SegmentInfo]| s.iter().map(|s| s.base_offset).collect::<Vec<_>>();
        assert_eq!(bases(log_segments(&segs, 15, 30)), vec![10, 20]);
        assert_eq!(bases(log_segments(&segs, -1, 20)), vec![0, 10]);
        assert_eq!(bases(log_segments(&segs, 20, 20)), Vec::<i64>::new());
        assert_eq!(bases(log_segments(&segs, 35, 100)), vec![30]);
    }
}
