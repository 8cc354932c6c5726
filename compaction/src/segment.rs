//! The two traits the broker implements for the cleaner: [`SegmentSource`] (read side) and
//! [`BatchSink`] (write side), plus the segment metadata they exchange.

use std::collections::HashMap;
use std::io;

use bytes::Bytes;

/// What the cleaner needs to know about one segment of a partition log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentInfo {
    pub base_offset: i64,
    /// One past the last offset of the segment's last batch (`base_offset` when empty).
    pub next_offset: i64,
    /// Size of the `.log` file.
    pub size_bytes: u64,
    /// Sizes of the `.index` and `.timeindex` files; a cleaned group must fit
    /// `segment.index.bytes` for each (Kafka's `groupSegmentsBySize`). 0 if unknown.
    pub offset_index_bytes: u64,
    pub time_index_bytes: u64,
    /// Largest record timestamp in the segment (`min.compaction.lag.ms` compares it with now).
    pub largest_timestamp_ms: i64,
    /// Max timestamp of the segment's first batch (Kafka's `getFirstBatchTimestamp`), which
    /// `max.compaction.lag.ms` compares with now. `None` for an empty segment.
    pub first_batch_timestamp_ms: Option<i64>,
    /// Modification time of the segment; a cleaned segment takes that of the last segment it
    /// replaces, like Kafka.
    pub last_modified_ms: i64,
}

/// Kafka's `LastRecord`: the last data offset and epoch of a producer that is still active
/// (its producer id has not expired from the producer state).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastRecord {
    /// Last offset of the producer's last data batch; `None` when its last entry is a
    /// transaction marker.
    pub last_data_offset: Option<i64>,
    pub producer_epoch: i16,
}

/// Read access to one partition log. Implemented by the broker over its segment files and by
/// [`crate::MemoryLog`] in tests.
pub trait SegmentSource {
    /// All segments of the partition in offset order; the last one is the active segment.
    fn segments(&self) -> io::Result<Vec<SegmentInfo>>;

    /// The batches of the segment with `base_offset`, in file order, each exactly as stored (one
    /// whole RecordBatch v2 per item). The iteration may start at any batch at or before the
    /// one holding `from_offset` (an offset-index lookup is enough); the cleaner skips batches
    /// that end before it.
    fn read_batches(
        &self,
        base_offset: i64,
        from_offset: i64,
    ) -> io::Result<Box<dyn Iterator<Item = io::Result<Bytes>> + '_>>;

    /// Kafka's `lastRecordsOfActiveProducers`, keyed by producer id. The batch holding each
    /// active producer's last data offset is kept (possibly emptied) so that its sequence
    /// numbers and epoch survive a restart.
    fn last_records_of_active_producers(&self) -> HashMap<i64, LastRecord>;
}

/// A batch the cleaner keeps, with the offsets and timestamp an index writer needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetainedBatch {
    /// A whole, CRC-valid RecordBatch v2 with its original offsets.
    pub bytes: Bytes,
    pub base_offset: i64,
    pub last_offset: i64,
    pub max_timestamp_ms: i64,
}

/// Write access: replaces a group of consecutive segments by one cleaned segment.
///
/// A group goes through `begin`, any number of `append`s, then exactly one of `commit` or
/// `abandon`. The crash-safety contract the broker's implementation must keep (Kafka's
/// protocol): the cleaned segment is written aside (`<base>.log.cleaned` and its indexes) and
/// never visible to readers before `commit`; `commit` flushes it, renames it to `.swap`,
/// removes the replaced segments (renamed `.deleted` first), then drops the `.swap` suffix,
/// so that at every instant the directory can be recovered to either the old or the new
/// segments: on start, `.cleaned` files are deleted, and `.swap` files are completed (the
/// segments they overlap are deleted and the suffix dropped). `abandon` deletes whatever the
/// group wrote; the log is as before `begin`.
pub trait BatchSink {
    /// Starts the cleaned segment that will replace `replaces` (consecutive, in offset order);
    /// its base offset is `replaces[0].base_offset`.
    fn begin(&mut self, replaces: &[SegmentInfo]) -> io::Result<()>;

    /// Appends one batch; batches arrive in strictly increasing offset order, all within the
    /// offset range of the replaced segments.
    fn append(&mut self, batch: RetainedBatch) -> io::Result<()>;

    /// Makes the cleaned segment durable and swaps it in atomically for the replaced ones,
    /// stamping it with `last_modified_ms`.
    fn commit(&mut self, last_modified_ms: i64) -> io::Result<()>;

    /// Discards the group in progress, if any.
    fn abandon(&mut self) -> io::Result<()>;
}
