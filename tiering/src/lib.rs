//! Strata's tiered storage: sealed segments move to S3-compatible object storage and are read
//! back through a local memory+disk cache, so retention can be months while local disks hold
//! hours.
//!
//! The crate does not depend on the broker. The broker implements [`LocalLog`] for each of
//! its partitions (handing over the files of sealed segments, [`upload::SegmentFiles`]); each
//! partition's [`upload_queue`] worker drives its [`partition::TieredPartition`] as partition
//! leader, or follows its manifest as follower; and the broker asks the
//! [`reader::RemoteReader`] for batches below its local log start offset.
//!
//! Modules:
//! - [`store`]: object store access (S3, filesystem, memory), request metrics, fault injection.
//! - [`manifest`]: the per-partition manifest, the object layout, fenced compare-and-swap commits.
//! - [`upload`]: one segment and its indexes as a single bundle object.
//! - [`partition`]: commit of uploads, remote retention, the orphan scrubber.
//! - [`reader`]: cached, chunked, parallel remote reads with read-ahead.
//! - [`error`]: [`TieringError`], what a caller of the orchestration can act on.
//! - [`backoff`]: the one retry-with-backoff helper, honouring cancellation.
//! - [`local_log`]: [`LocalLog`], what the orchestration needs from a broker partition.
//! - [`upload_queue`]: per-partition typed operations (upload, commit, local retention,
//!   remote delete, barrier) fed by events, one worker per partition.
//! - [`rehydrate`]: remote segments brought back to local disk when local retention would
//!   keep them (a topic config, off by default).
//! - [`catalog`]: the topics kept in the bucket, for restoring a cluster from the bucket alone.
//! - [`export`]: Parquet export of partitions (remote and sealed local segments) for bulk
//!   loads, with per-partition checkpoints for exactly-once re-runs.
//!
//! Accepted orphans (invariant 4): a bundle uploaded whose manifest commit never happened
//! (crash or store error between the two), and a bundle dropped from the manifest whose
//! delete failed. Both are unreferenced by any manifest and are removed by
//! [`partition::TieredPartition::scrub`] once older than its grace period.

pub mod backoff;
pub mod catalog;
pub mod disk_tier;
pub mod error;
pub mod export;
pub mod local_log;
pub mod manifest;
pub mod partition;
pub mod reader;
pub mod rehydrate;
pub mod store;
pub mod upload;
pub mod upload_queue;

pub use backoff::Backoff;
pub use error::TieringError;
pub use local_log::{LocalLog, ReplicaRole};
pub use manifest::{PartitionId, PartitionManifest, RemoteSegment};
pub use partition::{RetentionInput, RetentionOutcome, TieredPartition};
pub use reader::{CacheConfig, Piece, RemoteReader, RemoteRecords};
pub use store::{RemoteStore, StoreConfig, StoreError};
pub use upload::{SegmentFiles, UploadOptions};
pub use upload_queue::{Event, PartitionWorker, TieringMetrics};
