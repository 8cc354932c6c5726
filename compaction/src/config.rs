//! Cleaner settings under Kafka's names: broker-wide (`log.cleaner.*`) and per topic.

/// Broker-wide cleaner settings.
#[derive(Debug, Clone, PartialEq)]
pub struct CleanerConfig {
    /// `log.cleaner.threads`: number of cleaner tasks; the dedupe buffer is split among them.
    pub threads: usize,
    /// `log.cleaner.dedupe.buffer.size`: memory for all offset maps together.
    pub dedupe_buffer_bytes: usize,
    /// `log.cleaner.io.buffer.load.factor`: how full an offset map may get.
    pub dedupe_buffer_load_factor: f64,
    /// `log.cleaner.io.max.bytes.per.second`: read+write rate shared by all cleaner tasks.
    pub io_max_bytes_per_second: f64,
}

impl Default for CleanerConfig {
    fn default() -> Self {
        CleanerConfig {
            threads: 1,
            dedupe_buffer_bytes: 128 * 1024 * 1024,
            dedupe_buffer_load_factor: 0.9,
            io_max_bytes_per_second: f64::MAX,
        }
    }
}

impl CleanerConfig {
    /// Offset-map memory of one cleaner task, capped at 2 GiB like Kafka.
    pub fn offset_map_bytes_per_cleaner(&self) -> usize {
        (self.dedupe_buffer_bytes / self.threads.max(1)).min(i32::MAX as usize)
    }
}

/// Topic-level settings that drive compaction of one partition.
#[derive(Debug, Clone, PartialEq)]
pub struct CompactionConfig {
    /// `min.cleanable.dirty.ratio`: a log is cleaned once dirty/total bytes exceeds this.
    pub min_cleanable_dirty_ratio: f64,
    /// `min.compaction.lag.ms`: a segment whose largest timestamp is newer than now minus this
    /// is not cleaned.
    pub min_compaction_lag_ms: i64,
    /// `max.compaction.lag.ms`: a log whose oldest dirty segment is older than this is cleaned
    /// whatever its dirty ratio.
    pub max_compaction_lag_ms: i64,
    /// `delete.retention.ms`: how long tombstones survive after the pass that first kept them.
    pub delete_retention_ms: i64,
    /// `segment.bytes`: upper bound of a cleaned segment built from a group of segments.
    pub segment_bytes: u64,
    /// `segment.index.bytes`: upper bound of each index of a cleaned segment.
    pub segment_index_bytes: u64,
    /// `strata.max.decompressed.batch.bytes`: the most one batch's records may decompress to;
    /// a larger batch fails the pass as corrupt instead of growing memory.
    pub max_decompressed_batch_bytes: u64,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        CompactionConfig {
            min_cleanable_dirty_ratio: 0.5,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            delete_retention_ms: 24 * 60 * 60 * 1000,
            segment_bytes: 1024 * 1024 * 1024,
            segment_index_bytes: 10 * 1024 * 1024,
            max_decompressed_batch_bytes: 64 * 1024 * 1024,
        }
    }
}
