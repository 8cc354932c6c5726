//! [`LocalLog`]: what the tiering orchestration ([`crate::upload_queue`]) needs from one of
//! the broker's partitions. The broker implements it; this crate never sees its log.
//!
//! Methods that touch the log are blocking (they take the partition's log lock, and may
//! read or delete files): the orchestration calls them on a blocking thread. Role, epoch and
//! policy are cheap reads.

use std::io;

use bytes::Bytes;

use crate::manifest::PartitionManifest;
use crate::rehydrate::RehydrateTarget;
use crate::upload::SegmentFiles;

/// The partition's replica role on this broker, with the leader epoch it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicaRole {
    /// Uploads, commits, and applies remote retention, fenced by `leader_epoch`.
    Leader { leader_epoch: i32 },
    /// A follower of a replicated partition: follows the manifest its leader commits to
    /// apply local retention.
    Follower,
    /// Neither (not yet assigned, or an unreplicated follower): nothing to do.
    None,
}

/// A sealed segment's files, read (memory-mapped) under the log lock so the cleaner cannot
/// swap them in between, ready for [`crate::upload::upload`].
#[derive(Debug, Clone)]
pub struct PreparedSegment {
    pub files: SegmentFiles,
    pub parts: Vec<Bytes>,
}

impl PreparedSegment {
    pub fn bytes(&self) -> u64 {
        self.parts.iter().map(|b| b.len() as u64).sum()
    }
}

/// The cleaned local segments a compacted snapshot replaces `[from, upto)` with.
#[derive(Debug, Clone)]
pub struct CompactedSegments {
    pub from: i64,
    pub upto: i64,
    pub segments: Vec<PreparedSegment>,
}

/// The local inputs of remote retention: never the local log start offset (see
/// [`crate::partition::RetentionInput`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalRetentionInput {
    /// The offset of an explicit DeleteRecords handled by this process (-1 for none).
    pub delete_records_offset: i64,
    /// Bytes of local segments not yet covered by the manifest.
    pub local_only_bytes: u64,
}

/// The topic configuration tiering acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TieringPolicy {
    /// `retention.ms`, -1 for none (or when cleanup.policy has no `delete`).
    pub retention_ms: i64,
    /// `retention.bytes` across both tiers, -1 for none (or when cleanup.policy has no
    /// `delete`).
    pub retention_bytes: i64,
    /// cleanup.policy has `compact`: upload compacted snapshots.
    pub compact: bool,
}

/// A durable step of the orchestration after which the broker may have a crash point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DurableStep {
    /// A segment bundle is in the bucket; the manifest does not name it yet.
    Uploaded,
    /// A manifest covering a segment is committed; local retention has not run yet.
    ManifestCommitted,
    /// A remote segment is downloaded to temporary files; it is not in the local log yet.
    RehydrateDownloaded,
    /// A rehydrated segment is renamed into place in front of the local log.
    Rehydrated,
}

/// One broker partition as the tiering orchestration sees it.
pub trait LocalLog: Send + Sync + 'static {
    /// The role and leader epoch now.
    fn role(&self) -> ReplicaRole;

    /// The topic configuration now.
    fn policy(&self) -> TieringPolicy;

    /// Takes the manifest's log start offset and remote end into the local log (the log
    /// start only moves up; the remote end bounds local retention). Returns the log start
    /// offset before and after. Blocking.
    fn apply_manifest(
        &self,
        log_start_offset: i64,
        remote_end: Option<i64>,
    ) -> io::Result<(i64, i64)>;

    /// The oldest sealed segment that ends past `from`, below the high watermark and the
    /// last stable offset, with its files read. Blocking.
    fn next_uploadable(&self, from: i64) -> io::Result<Option<PreparedSegment>>;

    /// A committed manifest now ends at `remote_end`: local retention may delete local
    /// segments up to it. Returns how many it deleted. Blocking.
    fn allow_local_retention(&self, remote_end: i64, now_ms: i64) -> io::Result<usize>;

    /// The local inputs of remote retention. Blocking (brief).
    fn retention_input(&self) -> LocalRetentionInput;

    /// Remote retention moved the log start offset. Blocking.
    fn advance_log_start_offset(&self, log_start_offset: i64) -> io::Result<()>;

    /// Compacted topics: the offset below which the cleaner has cleaned, if it has.
    fn cleaned_upto(&self) -> Option<i64>;

    /// The cleaned sealed segments ending at or below `limit`, from the first local offset
    /// (None when no sealed segment ends there). Blocking.
    fn compacted_segments(&self, limit: i64) -> io::Result<Option<CompactedSegments>>;

    /// Seals the active segment (clean shutdown uploads everything acknowledged). Blocking.
    fn roll(&self, now_ms: i64) -> io::Result<()>;

    /// Called right after `step` became durable (the broker's crash points).
    fn reached(&self, step: DurableStep);

    /// Called after a pass that committed uploads (the broker's continuous export).
    fn uploads_committed(&self, manifest: &PartitionManifest);

    /// Rehydration ([`crate::rehydrate`]): the segment of `manifest` to bring back to local
    /// disk next, or None (rehydration off, or local retention would not keep it). Blocking
    /// (brief).
    fn rehydration_candidate(
        &self,
        manifest: &PartitionManifest,
        now_ms: i64,
    ) -> Option<RehydrateTarget>;

    /// Checks the downloaded files of `target` and puts the segment in front of the local
    /// log. False when the log no longer starts where the segment ends (nothing changed).
    /// Blocking.
    fn install_rehydrated(&self, target: &RehydrateTarget) -> io::Result<bool>;
}
