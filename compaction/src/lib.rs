//! `strata-compaction`: the log cleaner of Strata, following Kafka's `LogCleaner` semantics
//! for topics with `cleanup.policy=compact` (or `compact,delete`).
//!
//! This crate does no file or network I/O of its own and does not depend on the broker. It
//! defines the two traits it needs, [`SegmentSource`] and [`BatchSink`], which the broker
//! implements over its segment files; [`MemoryLog`] implements both in memory for tests.
//!
//! # Algorithm
//! A partition log is split into a *clean* section (compacted by earlier passes, below the
//! cleaner checkpoint), a *cleanable* dirty section, and an uncleanable tail: the active
//! segment, segments newer than `min.compaction.lag.ms`, and anything at or above the upper
//! bound the broker passes (last stable offset, at most the high watermark).
//!
//! 1. **Selection** ([`select_filthiest`], [`CleanerManager::grab_filthiest`]): the dirty ratio
//!    is cleanable bytes / (clean + cleanable bytes). The partition with the highest ratio above
//!    `min.cleanable.dirty.ratio` is cleaned next; a partition whose oldest dirty segment is
//!    past `max.compaction.lag.ms` qualifies whatever its ratio. A partition in progress,
//!    paused, or marked uncleanable is skipped.
//! 2. **Offset map** ([`OffsetMap`]): the dirty section is read in order and each key's latest
//!    offset recorded under a 128-bit digest, in a table bounded by
//!    `log.cleaner.dedupe.buffer.size / log.cleaner.threads` and filled to 90 %. If the dirty
//!    section does not fit, the map covers the prefix that does (whole batches), and the next
//!    pass continues from there.
//! 3. **Recopy** ([`Cleaner::clean`]): all segments below the end of the mapped range, clean
//!    ones included, are grouped into runs that fit `segment.bytes` and `segment.index.bytes`
//!    and rewritten group by group. A record is kept iff it lies past the mapped range, or it is
//!    the newest for its key and either has a value or is a tombstone whose delete horizon has
//!    not passed. A batch whose records all survive is copied byte for byte; otherwise its
//!    survivors are re-encoded as one batch with the same base offset, last offset delta,
//!    producer id/epoch, base sequence, leader epoch, codec and timestamp type. Offsets and
//!    order never change. An emptied batch is dropped, unless it holds an active producer's
//!    last sequence (or last marker) or ends exactly at the uncleanable offset: then its empty
//!    header is kept.
//! 4. **Tombstones** (KIP-534): the first pass that keeps a tombstone stamps its batch with a
//!    delete horizon = now + `delete.retention.ms` (delete-horizon attribute bit, base
//!    timestamp). A later pass at or after the horizon removes it. Tombstones are only removed
//!    by a pass, which runs when the log is dirty enough or past its max lag.
//! 5. **Throttle** ([`Throttler`]): bytes read and written by all cleaner tasks share one
//!    `log.cleaner.io.max.bytes.per.second` budget.
//!
//! A pass returns [`PassOutcome::Completed`] with the new first dirty offset (the broker
//! persists it in its cleaner checkpoint) and [`PassStats`] for metrics, or
//! [`PassOutcome::Cancelled`] when its cancellation check fired between two batches.
//!
//! # What the broker implements
//! - [`SegmentSource`]: the segment list (base/next offset, sizes, timestamps, last-modified
//!   time), the batches of a segment as stored, and `lastRecordsOfActiveProducers` from the
//!   producer state.
//! - [`BatchSink`]: begin a cleaned segment for a group, append batches, commit or abandon.
//!   Crash-safety contract: the cleaned segment is written aside (`.cleaned`), flushed, renamed
//!   `.swap`, the replaced segments removed, the suffix dropped, so the directory always
//!   recovers to either the old or the new segments; on start, `.cleaned` leftovers are deleted
//!   and `.swap` files completed. A crash mid-pass therefore loses at most the group in
//!   progress, and the checkpoint (written after the pass) only moves forward over committed
//!   work. Readers must keep serving from the old segments until the swap.
//! - The task pool (`log.cleaner.threads` tasks on the blocking pool), each owning a
//!   [`Cleaner`], sharing one [`CleanerManager`] and one [`Throttler`]; rejecting null keys on
//!   produce to compacted topics; retention for `compact,delete`.
//!
//! # Not done yet
//! - Transactions. Control batches and transactional data batches are kept whole and
//!   transactional records never enter the offset map (so they never shadow older values). To
//!   do once the broker has transactions: read the aborted-transaction index for the dirty
//!   range (Kafka's `CleanedTransactionMetadata`), leave aborted batches out of the map and
//!   drop them, drop COMMIT/ABORT markers once no batch of their transaction remains and their
//!   delete horizon has passed, and write the cleaned `.txnindex`.
//! - Records without a key are kept (Kafka drops them and counts them as invalid); they only
//!   exist in a topic switched from `delete` to `compact`. Counted in `null_key_records`.
//! - Message formats v0/v1 are rejected as unsupported (the broker only writes v2).
//! - Decompression is not bounded: a batch that inflates enormously is decompressed in full.
//! - Compacted snapshots in object storage (issue part 4) are not here yet.
//!
//! # Modules
//! - [`batch`]: RecordBatch v2 parsing, record iteration and the rewrite of a filtered batch.
//! - [`offset_map`]: the bounded key-digest → offset map.
//! - [`selection`]: cleanable offsets, dirty ratio, lag rules, choice of the filthiest log.
//! - [`cleaner`]: one pass (map, group, recopy) and its statistics.
//! - [`cleaning_state`]: the [`CleanerManager`] shared by cleaner tasks.
//! - [`segment`]: the broker-facing traits.
//! - [`throttle`]: the shared I/O throttle.
//! - [`memory_log`]: the in-memory log used by tests.
//! - [`config`]: cleaner and topic settings under Kafka's names.

pub mod batch;
pub mod cleaner;
pub mod cleaning_state;
pub mod config;
pub mod memory_log;
pub mod offset_map;
pub mod segment;
pub mod selection;
pub mod throttle;

#[cfg(test)]
mod property_tests;
#[cfg(test)]
mod test_batches;

pub use batch::BatchError;
pub use cleaner::{Cleaner, CleanerError, PassOutcome, PassStats};
pub use cleaning_state::{CleanerManager, CleaningGuard};
pub use config::{CleanerConfig, CompactionConfig};
pub use memory_log::{MemoryLog, MemorySink};
pub use offset_map::{OffsetMap, OffsetMapTooSmall};
pub use segment::{BatchSink, LastRecord, RetainedBatch, SegmentInfo, SegmentSource};
pub use selection::{select_filthiest, CleaningCandidate, LogToClean, Selection};
pub use throttle::{Clock, SystemClock, Throttler};
