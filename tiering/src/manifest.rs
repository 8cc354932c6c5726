//! The per-partition remote manifest: the source of truth for what is remote (invariant 1).
//!
//! One JSON object per partition at `<topic>-<topic id>/<partition>/manifest.json`, replaced
//! by compare-and-swap on its ETag. Every commit also carries the writer's leader epoch: a
//! writer whose epoch is lower than the stored one is fenced, so a deposed leader can neither
//! add segments nor delete them.
//!
//! Object layout (invariant 2: keys are unique and never overwritten):
//! ```text
//! <prefix>/_strata/catalog.json                                 topics with remote storage
//! <prefix>/<topic>-<id>/<partition>/manifest.json               the partition's manifest
//! <prefix>/<topic>-<id>/<partition>/<base:020>-<epoch>-<uuid>.seg   segment bundles
//! ```
//! A segment bundle is the segment's `.log` bytes followed by its offset index, time index,
//! producer snapshot and leader-epoch checkpoint; the manifest records each part's byte
//! range, so one PUT uploads a segment and ranged GETs read any part of it.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::store::{RemoteStore, StoreError};

pub const MANIFEST_FORMAT: u32 = 1;

/// Identifies a partition in the bucket.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionId {
    pub topic: String,
    pub topic_id: uuid::Uuid,
    pub partition: i32,
}

impl PartitionId {
    pub fn dir(&self) -> String {
        format!(
            "{}-{}/{}",
            self.topic,
            self.topic_id.simple(),
            self.partition
        )
    }
    pub fn manifest_key(&self) -> String {
        format!("{}/manifest.json", self.dir())
    }
    pub fn segment_key(&self, base_offset: i64, epoch: i32) -> String {
        let unique = uuid::Uuid::new_v4().simple().to_string();
        format!(
            "{}/{base_offset:020}-{epoch}-{}.seg",
            self.dir(),
            &unique[..12]
        )
    }
}

/// Byte range of one part of a segment bundle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Part {
    pub start: u64,
    pub end: u64,
}

impl Part {
    pub fn range(&self) -> Range<u64> {
        self.start..self.end
    }
    pub fn len(&self) -> u64 {
        self.end - self.start
    }
    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }
}

/// One uploaded segment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteSegment {
    pub key: String,
    pub base_offset: i64,
    /// The offset after the segment's last batch.
    pub next_offset: i64,
    /// Largest record timestamp (for time retention and timestamp lookups).
    pub max_timestamp: i64,
    /// The uploader's leader epoch.
    pub leader_epoch: i32,
    /// Leader epochs that start inside this segment, as (epoch, start offset).
    pub epochs: Vec<(i32, i64)>,
    pub log: Part,
    pub offset_index: Part,
    pub time_index: Part,
    pub producer_snapshot: Option<Part>,
    pub leader_epoch_checkpoint: Option<Part>,
    /// The segment's `.txnindex` (aborted transactions), absent when it had none.
    #[serde(default)]
    pub txn_index: Option<Part>,
    pub uploaded_at_ms: i64,
}

impl RemoteSegment {
    pub fn size(&self) -> u64 {
        self.log.len()
    }
    pub fn object_size(&self) -> u64 {
        [
            Some(self.log),
            Some(self.offset_index),
            Some(self.time_index),
            self.producer_snapshot,
            self.leader_epoch_checkpoint,
            self.txn_index,
        ]
        .into_iter()
        .flatten()
        .map(|p| p.end)
        .max()
        .unwrap_or(0)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionManifest {
    pub format: u32,
    pub topic: String,
    pub topic_id: uuid::Uuid,
    pub partition: i32,
    /// Incremented by every commit.
    pub version: u64,
    /// Epoch of the last writer: writers with a lower epoch are fenced.
    pub leader_epoch: i32,
    /// The partition's log start offset (after remote retention and DeleteRecords).
    pub log_start_offset: i64,
    /// Segments in offset order: both base and next offsets strictly increase. Contiguous,
    /// except where compaction removed records; after a leadership change the new leader's
    /// first segment may overlap the previous leader's last one (replicas roll at different
    /// offsets; the overlap holds the same committed batches), but never lies inside it or
    /// starts at or before its base (see [`crate::partition`]).
    pub segments: Vec<RemoteSegment>,
    /// Compacted topics: the remote log below this offset is a compacted snapshot (the
    /// cleaned segments), replacing the segments uploaded as they were written.
    #[serde(default)]
    pub compacted_upto: Option<i64>,
    #[serde(default)]
    pub compacted_at_ms: Option<i64>,
}

impl PartitionManifest {
    pub fn empty(id: &PartitionId, leader_epoch: i32) -> PartitionManifest {
        PartitionManifest {
            format: MANIFEST_FORMAT,
            topic: id.topic.clone(),
            topic_id: id.topic_id,
            partition: id.partition,
            version: 0,
            leader_epoch,
            log_start_offset: 0,
            segments: Vec::new(),
            compacted_upto: None,
            compacted_at_ms: None,
        }
    }

    /// The offset after the last remote record, or `None` when nothing is remote.
    pub fn end_offset(&self) -> Option<i64> {
        self.segments.last().map(|s| s.next_offset)
    }

    pub fn start_offset(&self) -> Option<i64> {
        self.segments
            .first()
            .map(|s| s.base_offset.max(self.log_start_offset))
    }

    pub fn size(&self) -> u64 {
        self.segments.iter().map(|s| s.size()).sum()
    }

    /// The segment holding `offset`.
    pub fn segment_for(&self, offset: i64) -> Option<&RemoteSegment> {
        let i = self.segments.partition_point(|s| s.next_offset <= offset);
        self.segments.get(i).filter(|s| s.base_offset <= offset)
    }

    /// The first segment after the one holding `offset` (for a reader crossing segments).
    pub fn segment_after(&self, offset: i64) -> Option<&RemoteSegment> {
        let i = self.segments.partition_point(|s| s.base_offset <= offset);
        self.segments.get(i)
    }

    /// Parses a manifest read from the bucket and checks what readers rely on: every part's
    /// range is well formed, and segments are in offset order (see [`Self::segments`]). A
    /// manifest that fails is corrupt; nothing is read or deleted on its say-so.
    pub fn decode(bytes: &[u8]) -> Result<PartitionManifest, StoreError> {
        let m: PartitionManifest = serde_json::from_slice(bytes)
            .map_err(|e| StoreError::Request(format!("corrupt manifest: {e}")))?;
        if m.format > MANIFEST_FORMAT {
            return Err(StoreError::Request(format!(
                "manifest format {} is newer than this broker understands ({MANIFEST_FORMAT})",
                m.format
            )));
        }
        m.check().map_err(|reason| {
            StoreError::Request(format!(
                "corrupt manifest of {}-{}: {reason}",
                m.topic, m.partition
            ))
        })?;
        Ok(m)
    }

    fn check(&self) -> Result<(), String> {
        if self.log_start_offset < 0 {
            return Err(format!(
                "negative log start offset {}",
                self.log_start_offset
            ));
        }
        let mut previous: Option<&RemoteSegment> = None;
        for s in &self.segments {
            if s.base_offset < 0 || s.next_offset <= s.base_offset {
                return Err(format!(
                    "segment {} has offsets [{}, {})",
                    s.key, s.base_offset, s.next_offset
                ));
            }
            let parts = [
                Some(s.log),
                Some(s.offset_index),
                Some(s.time_index),
                s.producer_snapshot,
                s.leader_epoch_checkpoint,
                s.txn_index,
            ];
            if let Some(p) = parts.into_iter().flatten().find(|p| p.start > p.end) {
                return Err(format!(
                    "segment {} has a part [{}, {})",
                    s.key, p.start, p.end
                ));
            }
            if let Some(prev) = previous {
                if s.base_offset <= prev.base_offset || s.next_offset <= prev.next_offset {
                    return Err(format!(
                        "segment {} [{}, {}) is not after {} [{}, {})",
                        s.key,
                        s.base_offset,
                        s.next_offset,
                        prev.key,
                        prev.base_offset,
                        prev.next_offset
                    ));
                }
            }
            previous = Some(s);
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    #[error("fenced: the manifest was written by leader epoch {stored}, ours is {ours}")]
    Fenced { stored: i32, ours: i32 },
    #[error("the manifest changed since it was read")]
    Conflict,
    #[error(transparent)]
    Store(StoreError),
}

/// A manifest as last read or written by this broker, with its ETag for the next
/// compare-and-swap.
#[derive(Debug, Clone)]
pub struct Versioned {
    pub manifest: PartitionManifest,
    pub e_tag: Option<String>,
}

/// Reads the partition's manifest; `None` when the partition has never uploaded.
pub async fn load(store: &RemoteStore, id: &PartitionId) -> Result<Option<Versioned>, StoreError> {
    let Some((bytes, e_tag)) = store.get(&id.topic, &id.manifest_key()).await? else {
        return Ok(None);
    };
    Ok(Some(Versioned {
        manifest: PartitionManifest::decode(&bytes)?,
        e_tag,
    }))
}

/// Commits `next` over `current` (None = no manifest yet), fenced by leader epoch.
pub async fn commit(
    store: &RemoteStore,
    id: &PartitionId,
    current: Option<&Versioned>,
    mut next: PartitionManifest,
) -> Result<Versioned, CommitError> {
    if let Some(cur) = current {
        if cur.manifest.leader_epoch > next.leader_epoch {
            return Err(CommitError::Fenced {
                stored: cur.manifest.leader_epoch,
                ours: next.leader_epoch,
            });
        }
        next.version = cur.manifest.version + 1;
    } else {
        next.version = 1;
    }
    next.format = MANIFEST_FORMAT;
    let bytes = serde_json::to_vec_pretty(&next)
        .map_err(|e| CommitError::Store(StoreError::Request(e.to_string())))?;
    let expected = current.and_then(|c| c.e_tag.as_deref());
    if current.is_some() && expected.is_none() {
        return Err(CommitError::Store(StoreError::Request(
            "the object store returned no ETag for the manifest".into(),
        )));
    }
    match store
        .put_if(&id.topic, &id.manifest_key(), bytes.into(), expected)
        .await
    {
        Ok(e_tag) => Ok(Versioned {
            manifest: next,
            e_tag,
        }),
        Err(StoreError::Conflict(_)) => Err(CommitError::Conflict),
        Err(e) => Err(CommitError::Store(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(base: i64, next: i64) -> RemoteSegment {
        RemoteSegment {
            key: format!("k{base}"),
            base_offset: base,
            next_offset: next,
            max_timestamp: base,
            leader_epoch: 0,
            epochs: vec![],
            log: Part { start: 0, end: 10 },
            offset_index: Part { start: 10, end: 18 },
            time_index: Part { start: 18, end: 30 },
            producer_snapshot: None,
            leader_epoch_checkpoint: None,
            txn_index: None,
            uploaded_at_ms: 0,
        }
    }

    #[test]
    fn segment_lookup() {
        let id = PartitionId {
            topic: "t".into(),
            topic_id: uuid::Uuid::nil(),
            partition: 0,
        };
        let mut m = PartitionManifest::empty(&id, 0);
        m.segments = vec![seg(0, 10), seg(10, 25), seg(25, 30)];
        assert_eq!(m.segment_for(0).unwrap().base_offset, 0);
        assert_eq!(m.segment_for(9).unwrap().base_offset, 0);
        assert_eq!(m.segment_for(10).unwrap().base_offset, 10);
        assert_eq!(m.segment_for(29).unwrap().base_offset, 25);
        assert!(m.segment_for(30).is_none());
        assert_eq!(m.segment_after(3).unwrap().base_offset, 10);
        assert!(m.segment_after(27).is_none());
        assert_eq!(m.end_offset(), Some(30));
        assert_eq!(m.segments[0].object_size(), 30);
    }

    #[tokio::test]
    async fn commits_are_fenced_and_conditional() {
        let store = RemoteStore::in_memory();
        let id = PartitionId {
            topic: "t".into(),
            topic_id: uuid::Uuid::new_v4(),
            partition: 3,
        };
        assert!(load(&store, &id).await.unwrap().is_none());
        let mut m = PartitionManifest::empty(&id, 5);
        m.segments.push(seg(0, 10));
        let v1 = commit(&store, &id, None, m.clone()).await.unwrap();
        assert_eq!(v1.manifest.version, 1);
        // A second creator loses.
        assert!(matches!(
            commit(&store, &id, None, m.clone()).await,
            Err(CommitError::Conflict)
        ));
        // A lower epoch is fenced.
        let mut stale = v1.manifest.clone();
        stale.leader_epoch = 4;
        assert!(matches!(
            commit(&store, &id, Some(&v1), stale).await,
            Err(CommitError::Fenced { stored: 5, ours: 4 })
        ));
        let mut next = v1.manifest.clone();
        next.segments.push(seg(10, 20));
        let v2 = commit(&store, &id, Some(&v1), next.clone()).await.unwrap();
        assert_eq!(v2.manifest.version, 2);
        // Writing over a stale ETag loses.
        assert!(matches!(
            commit(&store, &id, Some(&v1), next).await,
            Err(CommitError::Conflict)
        ));
        let loaded = load(&store, &id).await.unwrap().unwrap();
        assert_eq!(loaded.manifest, v2.manifest);
    }
}
