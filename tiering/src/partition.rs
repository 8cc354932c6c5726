//! One partition's remote state: its manifest as last committed, the upload commit, remote
//! retention and the orphan scrubber. The broker drives these from its tiering task; only the
//! partition leader does, with its leader epoch as the fencing token.

use std::collections::HashSet;
use std::sync::{Arc, RwLock};

use crate::manifest::{
    self, CommitError, PartitionId, PartitionManifest, RemoteSegment, Versioned,
};
use crate::store::{RemoteStore, StoreError};

pub struct TieredPartition {
    pub id: PartitionId,
    committed: tokio::sync::Mutex<Option<Versioned>>,
    view: RwLock<Arc<PartitionManifest>>,
}

/// What remote retention needs from the broker.
#[derive(Debug, Clone, Copy)]
pub struct RetentionInput {
    pub now_ms: i64,
    pub retention_ms: i64,
    pub retention_bytes: i64,
    /// Bytes of local segments not yet covered by the manifest (they count towards
    /// retention.bytes, which is the total across tiers).
    pub local_only_bytes: u64,
    /// The broker's log start offset (DeleteRecords moves it).
    pub log_start_offset: i64,
    pub leader_epoch: i32,
}

#[derive(Debug, Clone, Default)]
pub struct RetentionOutcome {
    pub deleted_segments: usize,
    pub deleted_bytes: u64,
    /// The log start offset after retention (None when nothing changed).
    pub log_start_offset: Option<i64>,
}

impl TieredPartition {
    /// Loads the partition's manifest (an empty one when it has none yet).
    pub async fn load(store: &RemoteStore, id: PartitionId) -> Result<TieredPartition, StoreError> {
        let loaded = manifest::load(store, &id).await?;
        let view = match &loaded {
            Some(v) => v.manifest.clone(),
            None => PartitionManifest::empty(&id, -1),
        };
        Ok(TieredPartition {
            id,
            committed: tokio::sync::Mutex::new(loaded),
            view: RwLock::new(Arc::new(view)),
        })
    }

    /// The manifest as last committed or loaded (cheap; for reads).
    pub fn manifest(&self) -> Arc<PartitionManifest> {
        self.view.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Reloads the manifest from the bucket (a follower learning what its leader uploaded, or
    /// a new leader taking over from where the manifest ends) and returns it.
    pub async fn refresh(&self, store: &RemoteStore) -> Result<Arc<PartitionManifest>, StoreError> {
        let mut committed = self.committed.lock().await;
        let loaded = manifest::load(store, &self.id).await?;
        match &loaded {
            Some(v) => self.publish(&v.manifest),
            None => self.publish(&PartitionManifest::empty(&self.id, -1)),
        }
        *committed = loaded;
        Ok(self.manifest())
    }

    fn publish(&self, m: &PartitionManifest) {
        *self.view.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(m.clone());
    }

    /// Commits `change` applied to the current manifest, reloading and retrying once when
    /// another writer raced us. `change` returns false to abandon.
    async fn commit_with(
        &self,
        store: &RemoteStore,
        leader_epoch: i32,
        mut change: impl FnMut(&mut PartitionManifest) -> Result<bool, CommitError>,
    ) -> Result<bool, CommitError> {
        let mut committed = self.committed.lock().await;
        for attempt in 0..2 {
            if attempt > 0 {
                *committed = manifest::load(store, &self.id)
                    .await
                    .map_err(CommitError::Store)?;
                // Readers and the uploader see what another writer committed even when
                // `change` then abandons (otherwise the uploader would retry from a stale end).
                if let Some(v) = committed.as_ref() {
                    self.publish(&v.manifest);
                }
            }
            let mut next = match committed.as_ref() {
                Some(v) => v.manifest.clone(),
                None => PartitionManifest::empty(&self.id, leader_epoch),
            };
            if !change(&mut next)? {
                return Ok(false);
            }
            next.leader_epoch = leader_epoch;
            match manifest::commit(store, &self.id, committed.as_ref(), next).await {
                Ok(v) => {
                    self.publish(&v.manifest);
                    *committed = Some(v);
                    return Ok(true);
                }
                Err(CommitError::Conflict) if attempt == 0 => continue,
                Err(e) => return Err(e),
            }
        }
        Err(CommitError::Conflict)
    }

    /// Adds an uploaded segment to the manifest. On failure the uploaded object is an orphan:
    /// it is deleted here on a best-effort basis and otherwise by the scrubber.
    pub async fn commit_segment(
        &self,
        store: &RemoteStore,
        seg: RemoteSegment,
        leader_epoch: i32,
    ) -> Result<(), CommitError> {
        let key = seg.key.clone();
        let result = self
            .commit_with(store, leader_epoch, |m| {
                if let Some(end) = m.end_offset() {
                    if seg.next_offset <= end {
                        // Already covered (a retry after a commit whose answer was lost).
                        return Ok(false);
                    }
                    if seg.base_offset < end {
                        // A new leader's segment straddles the end of what the previous
                        // leader uploaded (replicas roll segments at different offsets). It
                        // goes in whole: the overlap holds the same committed batches, reads
                        // look segments up by offset, and without it the remote log could
                        // never move past the old leader's last segment.
                        tracing::info!(partition = %self.id.dir(), end, base = seg.base_offset, next = seg.next_offset, "remote segment overlaps the previous leader's last one");
                    }
                    if seg.base_offset > end {
                        tracing::warn!(partition = %self.id.dir(), end, base = seg.base_offset, "remote log has a gap (local data was deleted before it was uploaded)");
                    }
                } else {
                    m.log_start_offset = m.log_start_offset.max(seg.base_offset);
                }
                m.segments.push(seg.clone());
                Ok(true)
            })
            .await;
        match result {
            Ok(true) => Ok(()),
            Ok(false) => {
                let _ = store.delete(&self.id.topic, &key).await;
                Ok(())
            }
            Err(e) => {
                if !matches!(e, CommitError::Store(_)) {
                    let _ = store.delete(&self.id.topic, &key).await;
                }
                Err(e)
            }
        }
    }

    /// Remote retention: drops expired segments from the manifest first, then deletes their
    /// objects (invariant 3).
    pub async fn apply_retention(
        &self,
        store: &RemoteStore,
        input: RetentionInput,
    ) -> Result<RetentionOutcome, CommitError> {
        let mut doomed: Vec<RemoteSegment> = Vec::new();
        let mut new_start = None;
        self.commit_with(store, input.leader_epoch, |m| {
            doomed.clear();
            let mut total = m.size() + input.local_only_bytes;
            let mut keep_from = 0;
            for seg in &m.segments {
                let below_start = seg.next_offset <= input.log_start_offset;
                let by_time = input.retention_ms >= 0
                    && input.now_ms - seg.max_timestamp > input.retention_ms;
                let by_size = input.retention_bytes >= 0
                    && total.saturating_sub(seg.size()) >= input.retention_bytes as u64;
                if !(below_start || by_time || by_size) {
                    break;
                }
                total -= seg.size();
                keep_from += 1;
            }
            // Deleting segments moves the start to the first one kept; otherwise only
            // DeleteRecords does (a compacted log may have a gap at its start: the start stays).
            let by_deletion = if keep_from == 0 {
                m.log_start_offset
            } else {
                match m.segments.get(keep_from) {
                    Some(s) => s.base_offset.max(m.log_start_offset),
                    None => m.end_offset().unwrap_or(m.log_start_offset),
                }
            };
            let start = by_deletion.max(
                input
                    .log_start_offset
                    .min(m.end_offset().unwrap_or(i64::MAX)),
            );
            if keep_from == 0 && start <= m.log_start_offset {
                return Ok(false);
            }
            doomed = m.segments.drain(..keep_from).collect();
            m.log_start_offset = start.max(m.log_start_offset);
            new_start = Some(m.log_start_offset);
            Ok(true)
        })
        .await?;
        let mut outcome = RetentionOutcome {
            log_start_offset: new_start,
            ..Default::default()
        };
        for seg in doomed {
            outcome.deleted_segments += 1;
            outcome.deleted_bytes += seg.size();
            if let Err(e) = store.delete(&self.id.topic, &seg.key).await {
                tracing::warn!(key = %seg.key, error = %e, "could not delete an expired remote segment; the scrubber will retry");
            }
        }
        Ok(outcome)
    }

    /// Replaces the remote segments covering `[from, upto)` with a compacted snapshot (the
    /// cleaned segments, already uploaded), in one manifest commit; the replaced objects are
    /// deleted afterwards. Refused (Ok(false)) when a remote segment straddles `from` or
    /// `upto`, since the snapshot would then overlap it.
    pub async fn commit_snapshot(
        &self,
        store: &RemoteStore,
        snapshot: Vec<RemoteSegment>,
        from: i64,
        upto: i64,
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<bool, CommitError> {
        let mut replaced: Vec<RemoteSegment> = Vec::new();
        let snapshot_keys: Vec<String> = snapshot.iter().map(|s| s.key.clone()).collect();
        let committed = self
            .commit_with(store, leader_epoch, |m| {
                replaced.clear();
                if m.segments.iter().any(|s| {
                    (s.base_offset < from && s.next_offset > from)
                        || (s.base_offset < upto && s.next_offset > upto)
                }) {
                    return Ok(false);
                }
                let mut next = Vec::with_capacity(m.segments.len());
                next.extend(m.segments.iter().filter(|s| s.next_offset <= from).cloned());
                next.extend(snapshot.iter().cloned());
                next.extend(m.segments.iter().filter(|s| s.base_offset >= upto).cloned());
                replaced = m
                    .segments
                    .iter()
                    .filter(|s| s.base_offset >= from && s.next_offset <= upto)
                    .cloned()
                    .collect();
                m.segments = next;
                m.compacted_upto = Some(upto);
                m.compacted_at_ms = Some(now_ms);
                Ok(true)
            })
            .await;
        match committed {
            Ok(true) => {
                for seg in replaced {
                    if let Err(e) = store.delete(&self.id.topic, &seg.key).await {
                        tracing::warn!(key = %seg.key, error = %e, "could not delete a segment replaced by a compacted snapshot; the scrubber will retry");
                    }
                }
                Ok(true)
            }
            other => {
                // Not committed: the snapshot's objects are orphans.
                for key in snapshot_keys {
                    let _ = store.delete(&self.id.topic, &key).await;
                }
                other
            }
        }
    }

    /// Deletes objects under the partition's prefix that the manifest does not reference and
    /// that are older than `grace_ms` (uploads that were never committed). Returns how many.
    pub async fn scrub(
        &self,
        store: &RemoteStore,
        now_ms: i64,
        grace_ms: i64,
    ) -> Result<usize, StoreError> {
        let manifest = self.manifest();
        let live: HashSet<&str> = manifest.segments.iter().map(|s| s.key.as_str()).collect();
        let manifest_key = self.id.manifest_key();
        let mut removed = 0;
        for obj in store
            .list(&self.id.topic, &format!("{}/", self.id.dir()))
            .await?
        {
            if obj.key == manifest_key || live.contains(obj.key.as_str()) {
                continue;
            }
            if now_ms - obj.last_modified_ms < grace_ms {
                continue;
            }
            store.delete(&self.id.topic, &obj.key).await?;
            removed += 1;
        }
        Ok(removed)
    }

    /// Topic deletion: the manifest goes first, then the segments.
    pub async fn delete_all(&self, store: &RemoteStore) -> Result<(), StoreError> {
        let _committed = self.committed.lock().await;
        let manifest = self.manifest();
        store
            .delete(&self.id.topic, &self.id.manifest_key())
            .await?;
        for seg in &manifest.segments {
            store.delete(&self.id.topic, &seg.key).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::Part;

    fn seg(base: i64, next: i64, epoch: i32) -> RemoteSegment {
        RemoteSegment {
            key: format!("k{base}-{epoch}"),
            base_offset: base,
            next_offset: next,
            max_timestamp: base,
            leader_epoch: epoch,
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

    #[tokio::test]
    async fn a_new_leader_continues_the_manifest_across_a_straddling_segment() {
        let store = RemoteStore::in_memory();
        let id = PartitionId {
            topic: "t".into(),
            topic_id: uuid::Uuid::new_v4(),
            partition: 0,
        };
        let old = TieredPartition::load(&store, id.clone()).await.unwrap();
        old.commit_segment(&store, seg(0, 100, 1), 1).await.unwrap();
        // The new leader cached the manifest before that commit (it was a follower).
        let new = TieredPartition::load(&store, id.clone()).await.unwrap();
        let stale = TieredPartition::load(&store, id.clone()).await.unwrap();
        old.commit_segment(&store, seg(100, 150, 1), 1)
            .await
            .unwrap();
        assert_eq!(new.refresh(&store).await.unwrap().end_offset(), Some(150));
        // Its segment [120, 180) straddles the old end: committed whole.
        new.commit_segment(&store, seg(120, 180, 2), 2)
            .await
            .unwrap();
        let m = new.manifest();
        let bounds: Vec<_> = m
            .segments
            .iter()
            .map(|s| (s.base_offset, s.next_offset))
            .collect();
        assert_eq!(bounds, vec![(0, 100), (100, 150), (120, 180)]);
        assert_eq!(m.segment_for(130).unwrap().base_offset, 100);
        assert_eq!(m.segment_for(150).unwrap().base_offset, 120);
        // A segment already covered is not added again, and a stale writer learns the
        // committed end from the retry's reload.
        stale
            .commit_segment(&store, seg(100, 150, 2), 2)
            .await
            .unwrap();
        assert_eq!(stale.manifest().end_offset(), Some(180));
        // The old leader is fenced.
        assert!(matches!(
            old.commit_segment(&store, seg(180, 200, 1), 1).await,
            Err(CommitError::Fenced { .. })
        ));
    }
}
