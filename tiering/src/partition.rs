//! One partition's remote state: its manifest as last committed, the upload commit, remote
//! retention and the orphan scrubber. The broker drives these from its tiering task; only the
//! partition leader does, with its leader epoch as the fencing token.
//!
//! Invariants of every manifest committed here:
//! - Segments are strictly ordered: each one's base and next offsets are greater than its
//!   predecessor's, and it starts at or before the predecessor's end (no gap, except where
//!   compaction removed records or local data was lost before its upload).
//! - A segment whose offsets the manifest already covers is never added; a segment that
//!   starts at or before the base of committed ones replaces them (it holds the same
//!   committed batches and more), and their objects are deleted after the commit.
//! - Leader epochs fence writers: a new leader first [`TieredPartition::claim`]s the manifest
//!   with its epoch (a conditional PUT) before it uploads. A writer of an older epoch then
//!   loses its next compare-and-swap on the ETag, and its reload shows the newer epoch, so it
//!   can never commit again. Without the claim the manifest would carry the old epoch until
//!   the new leader's first upload commits, and a deposed leader still draining (a controlled
//!   shutdown rolls and uploads its last segment) could commit in between.

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
    /// The offset an explicit DeleteRecords moved the log start to (-1 for none). Never the
    /// broker's local log start offset: after a crash that may come from a checkpoint that is
    /// missing or stale, or from the first local segment, and nothing a crash can lose may
    /// delete remote data.
    pub delete_records_offset: i64,
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

    /// A new leader's first step in `leader_epoch`, before it uploads anything: reloads the
    /// manifest and, unless it already carries this epoch, rewrites it unchanged but for the
    /// epoch (creating it when the partition has none yet), conditional on the ETag just read.
    /// Fails with [`CommitError::Fenced`] when a newer epoch has claimed it already.
    pub async fn claim(
        &self,
        store: &RemoteStore,
        leader_epoch: i32,
    ) -> Result<Arc<PartitionManifest>, CommitError> {
        self.refresh(store).await.map_err(CommitError::Store)?;
        self.commit_with(store, leader_epoch, |m| Ok(m.leader_epoch < leader_epoch))
            .await?;
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
                None => PartitionManifest::empty(&self.id, -1),
            };
            if next.leader_epoch > leader_epoch {
                // Checked before `change`, which would otherwise judge (and perhaps abandon)
                // against a manifest this writer may no longer touch.
                return Err(CommitError::Fenced {
                    stored: next.leader_epoch,
                    ours: leader_epoch,
                });
            }
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

    /// Adds an uploaded segment to the manifest, keeping it strictly ordered (see the module
    /// doc). Returns whether the segment was added; when it was not (its offsets are already
    /// covered), its object is deleted. On failure the uploaded object is an orphan: it is
    /// deleted here on a best-effort basis and otherwise by the scrubber.
    pub async fn commit_segment(
        &self,
        store: &RemoteStore,
        seg: RemoteSegment,
        leader_epoch: i32,
    ) -> Result<bool, CommitError> {
        let key = seg.key.clone();
        let mut replaced: Vec<RemoteSegment> = Vec::new();
        let result = self
            .commit_with(store, leader_epoch, |m| {
                replaced.clear();
                let Some(end) = m.end_offset() else {
                    m.log_start_offset = m.log_start_offset.max(seg.base_offset);
                    m.segments.push(seg.clone());
                    return Ok(true);
                };
                if seg.next_offset <= end {
                    // Already covered: a retry after a commit whose answer was lost, or a new
                    // leader's segment inside what a previous leader uploaded last.
                    return Ok(false);
                }
                if seg.base_offset > end {
                    tracing::warn!(partition = %self.id.dir(), end, base = seg.base_offset, "remote log has a gap (local data was deleted before it was uploaded)");
                } else if seg.base_offset < end {
                    // A new leader's segment straddles the end of what the previous leader
                    // uploaded (replicas roll segments at different offsets). It goes in whole:
                    // the overlap holds the same committed batches, reads look segments up by
                    // offset, and without it the remote log could never move past the old
                    // leader's last segment. Committed segments starting at or after its base
                    // lie inside it: it replaces them, so bases stay strictly increasing.
                    while m
                        .segments
                        .last()
                        .is_some_and(|s| s.base_offset >= seg.base_offset)
                    {
                        replaced.extend(m.segments.pop());
                    }
                    if !replaced.is_empty() {
                        if let Some(c) = m.compacted_upto {
                            m.compacted_upto = Some(c.min(seg.base_offset));
                        }
                    }
                    tracing::info!(partition = %self.id.dir(), end, base = seg.base_offset, next = seg.next_offset, replaced = replaced.len(), "remote segment overlaps the previous leader's last one");
                }
                m.segments.push(seg.clone());
                Ok(true)
            })
            .await;
        match result {
            Ok(true) => {
                for old in replaced {
                    if let Err(e) = store.delete(&self.id.topic, &old.key).await {
                        tracing::warn!(key = %old.key, error = %e, "could not delete a remote segment replaced by a longer one; the scrubber will retry");
                    }
                }
                Ok(true)
            }
            Ok(false) => {
                let _ = store.delete(&self.id.topic, &key).await;
                Ok(false)
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
    ///
    /// Evaluated on the committed manifest alone: a segment goes when it is past
    /// `retention_ms`, when the bytes after it (both tiers) still reach `retention_bytes`, or
    /// when it ends at or below `delete_records_offset`. Those are the only reasons; the
    /// manifest's `log_start_offset` moves only to the first segment kept or to the
    /// DeleteRecords offset (capped at the remote end while segments remain).
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
                let below_start = seg.next_offset <= input.delete_records_offset;
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
                    .delete_records_offset
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

    fn pid() -> PartitionId {
        PartitionId {
            topic: "t".into(),
            topic_id: uuid::Uuid::new_v4(),
            partition: 0,
        }
    }

    fn bounds(m: &PartitionManifest) -> Vec<(i64, i64)> {
        m.segments
            .iter()
            .map(|s| (s.base_offset, s.next_offset))
            .collect()
    }

    /// The manifest invariant: base and next offsets strictly increase, without gaps.
    fn assert_well_formed(m: &PartitionManifest) {
        for w in m.segments.windows(2) {
            assert!(w[1].base_offset <= w[0].next_offset, "gap: {:?}", bounds(m));
            assert!(
                w[1].base_offset > w[0].base_offset && w[1].next_offset > w[0].next_offset,
                "out of order or one inside another: {:?}",
                bounds(m)
            );
        }
    }

    /// The failover race seen in the cluster test: the deposed leader (shutting down, it rolls
    /// and uploads its last segment) commits after the new leader loaded the manifest; the
    /// new leader's segment, rolled elsewhere, starts before that last segment.
    #[tokio::test]
    async fn a_deposed_leaders_late_commit_does_not_misorder_the_manifest() {
        let store = RemoteStore::in_memory();
        let id = pid();
        let old = TieredPartition::load(&store, id.clone()).await.unwrap();
        old.commit_segment(&store, seg(0, 100, 1), 1).await.unwrap();
        old.commit_segment(&store, seg(100, 150, 1), 1)
            .await
            .unwrap();
        let new = TieredPartition::load(&store, id.clone()).await.unwrap();
        assert_eq!(new.refresh(&store).await.unwrap().end_offset(), Some(150));
        // The old leader drains: its last segment [150, 170) goes in after the new leader's load.
        old.commit_segment(&store, seg(150, 170, 1), 1)
            .await
            .unwrap();
        // The new leader uploads its segment holding offset 150: [120, 180).
        new.commit_segment(&store, seg(120, 180, 2), 2)
            .await
            .unwrap();
        let m = TieredPartition::load(&store, id).await.unwrap().manifest();
        assert_well_formed(&m);
        assert_eq!(m.end_offset(), Some(180));
    }

    #[tokio::test]
    async fn a_claim_fences_the_previous_leader_before_the_new_one_uploads() {
        let store = RemoteStore::in_memory();
        let id = pid();
        let old = TieredPartition::load(&store, id.clone()).await.unwrap();
        // A claim creates the manifest when the partition has none yet.
        assert_eq!(old.claim(&store, 1).await.unwrap().leader_epoch, 1);
        old.commit_segment(&store, seg(0, 100, 1), 1).await.unwrap();
        let new = TieredPartition::load(&store, id.clone()).await.unwrap();
        let m = new.claim(&store, 2).await.unwrap();
        assert_eq!((m.leader_epoch, m.end_offset()), (2, Some(100)));
        // Claiming again in the same epoch writes nothing.
        let version = m.version;
        assert_eq!(new.claim(&store, 2).await.unwrap().version, version);
        // The deposed leader's late upload is refused and its object deleted.
        let late = seg(100, 150, 1);
        store
            .put_if(&id.topic, &late.key, bytes::Bytes::from_static(b"x"), None)
            .await
            .unwrap();
        assert!(matches!(
            old.commit_segment(&store, late.clone(), 1).await,
            Err(CommitError::Fenced { stored: 2, ours: 1 })
        ));
        assert!(store.get(&id.topic, &late.key).await.unwrap().is_none());
        assert!(matches!(
            old.claim(&store, 1).await,
            Err(CommitError::Fenced { stored: 2, ours: 1 })
        ));
        let m = TieredPartition::load(&store, id).await.unwrap().manifest();
        assert_eq!(bounds(&m), vec![(0, 100)]);
    }

    #[tokio::test]
    async fn a_segment_starting_at_or_before_committed_ones_replaces_them() {
        let store = RemoteStore::in_memory();
        let id = pid();
        let old = TieredPartition::load(&store, id.clone()).await.unwrap();
        for (b, n) in [(0, 100), (100, 150), (150, 170)] {
            let s = seg(b, n, 1);
            store
                .put_if(&id.topic, &s.key, bytes::Bytes::from_static(b"x"), None)
                .await
                .unwrap();
            old.commit_segment(&store, s, 1).await.unwrap();
        }
        let new = TieredPartition::load(&store, id.clone()).await.unwrap();
        new.claim(&store, 2).await.unwrap();
        // Inside what is committed: not added.
        assert!(!new
            .commit_segment(&store, seg(120, 160, 2), 2)
            .await
            .unwrap());
        // Starts before [100, 150) and [150, 170), ends past them: replaces both.
        assert!(new
            .commit_segment(&store, seg(90, 200, 2), 2)
            .await
            .unwrap());
        let m = new.manifest();
        assert_eq!(bounds(&m), vec![(0, 100), (90, 200)]);
        assert_well_formed(&m);
        // The replaced objects go after the commit; the one still referenced stays.
        assert!(store.get(&id.topic, "k100-1").await.unwrap().is_none());
        assert!(store.get(&id.topic, "k150-1").await.unwrap().is_none());
        assert!(store.get(&id.topic, "k0-1").await.unwrap().is_some());
        assert_every_offset_read_once(&m, 200);
    }

    /// A consumer reading the remote log from offset 0 as the broker does (the segment holding
    /// the fetch offset, else the next one), skipping records below its position.
    fn assert_every_offset_read_once(m: &PartitionManifest, end: i64) {
        let mut got = Vec::new();
        let mut offset = 0;
        while offset < end {
            let s = m
                .segment_for(offset)
                .or_else(|| m.segment_after(offset))
                .unwrap_or_else(|| panic!("no segment for {offset}: {:?}", bounds(m)));
            got.extend((s.base_offset..s.next_offset).filter(|&o| o >= offset));
            offset = s.next_offset;
        }
        assert_eq!(got, (0..end).collect::<Vec<_>>(), "{:?}", bounds(m));
    }

    struct Leader {
        epoch: i32,
        tp: TieredPartition,
        /// Its local segments, as (base, next): each leader rolls at its own offsets.
        segs: Vec<(i64, i64)>,
        claimed: bool,
    }

    /// Seeded interleavings of failovers: each leader rolls its segments at its own offsets,
    /// claims the manifest in its epoch and uploads, while the previous leader keeps draining
    /// for a few steps. Every manifest stays well formed, the remote end never goes back, no
    /// older epoch commits after a newer one claimed, and a reader gets every offset once.
    #[tokio::test]
    async fn failovers_with_different_roll_offsets_keep_the_manifest_well_formed() {
        const END: i64 = 4000;
        let seed: u64 = std::env::var("STRATA_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0x5eed_7e57);
        println!("seed {seed} (STRATA_TEST_SEED to repeat)");
        let mut rng = seed;
        let mut next_rand = move |n: u64| {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (rng >> 33) % n
        };
        for run in 0..40 {
            let store = RemoteStore::in_memory();
            let id = pid();
            let mut leaders: Vec<Leader> = Vec::new();
            let mut claimed_epoch = -1;
            let mut remote_end = 0;
            for epoch in 1..=8 {
                let mut rolls: Vec<i64> = (0..60)
                    .map(|_| 1 + next_rand(END as u64 - 1) as i64)
                    .collect();
                rolls.extend([0, END]);
                rolls.sort_unstable();
                rolls.dedup();
                let segs = rolls.windows(2).map(|w| (w[0], w[1])).collect();
                let tp = TieredPartition::load(&store, id.clone()).await.unwrap();
                leaders.push(Leader {
                    epoch,
                    tp,
                    segs,
                    claimed: false,
                });
                // The new leader and its predecessor take turns in a random order.
                for _ in 0..10 {
                    let i = leaders.len() - 1 - (next_rand(2) as usize).min(leaders.len() - 1);
                    let newest = i == leaders.len() - 1;
                    let Leader {
                        epoch,
                        tp,
                        segs,
                        claimed,
                    } = &mut leaders[i];
                    if !*claimed && newest {
                        tp.claim(&store, *epoch).await.unwrap();
                        claimed_epoch = *epoch;
                        *claimed = true;
                        continue;
                    }
                    let from = tp.manifest().end_offset().unwrap_or(-1);
                    let Some(&(b, n)) = segs.iter().find(|(_, n)| *n > from) else {
                        continue;
                    };
                    let r = tp.commit_segment(&store, seg(b, n, *epoch), *epoch).await;
                    match r {
                        Ok(_) => assert!(
                            *epoch >= claimed_epoch,
                            "seed {seed} run {run}: epoch {epoch} committed after epoch {claimed_epoch} claimed"
                        ),
                        Err(CommitError::Fenced { .. }) => assert!(*epoch < claimed_epoch),
                        Err(e) => panic!("seed {seed} run {run}: {e}"),
                    }
                    let m = TieredPartition::load(&store, id.clone())
                        .await
                        .unwrap()
                        .manifest();
                    assert_well_formed(&m);
                    let end = m.end_offset().unwrap_or(0);
                    assert!(
                        end >= remote_end,
                        "seed {seed} run {run}: remote end went back"
                    );
                    remote_end = end;
                    assert_eq!(m.segments.first().map_or(0, |s| s.base_offset), 0);
                    assert_every_offset_read_once(&m, end);
                }
            }
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
    fn retention(
        now_ms: i64,
        retention_ms: i64,
        retention_bytes: i64,
        local_only_bytes: u64,
        delete_records_offset: i64,
    ) -> RetentionInput {
        RetentionInput {
            now_ms,
            retention_ms,
            retention_bytes,
            local_only_bytes,
            delete_records_offset,
            leader_epoch: 1,
        }
    }

    /// Four committed segments of 10 bytes each, [0, 100) .. [300, 400), their objects in the
    /// store; segment i's newest record is at time 1000 * (i + 1).
    async fn four_segments(store: &RemoteStore) -> (PartitionId, TieredPartition) {
        let id = pid();
        let tp = TieredPartition::load(store, id.clone()).await.unwrap();
        for i in 0..4 {
            let mut s = seg(i * 100, (i + 1) * 100, 1);
            s.max_timestamp = 1000 * (i + 1);
            store
                .put_if(&id.topic, &s.key, bytes::Bytes::from_static(b"x"), None)
                .await
                .unwrap();
            tp.commit_segment(store, s, 1).await.unwrap();
        }
        (id, tp)
    }

    async fn objects(store: &RemoteStore, id: &PartitionId) -> usize {
        let mut n = 0;
        for i in 0..4 {
            if store
                .get(&id.topic, &format!("k{}-1", i * 100))
                .await
                .unwrap()
                .is_some()
            {
                n += 1;
            }
        }
        n
    }

    /// The tester's crash, at the level of the manifest: retention.ms=-1, no retention.bytes,
    /// no DeleteRecords. Whatever the broker's local log start is after a restart (it is not
    /// an input), remote retention deletes nothing and the remote log start stays.
    #[tokio::test]
    async fn without_retention_limits_or_delete_records_remote_retention_deletes_nothing() {
        let store = RemoteStore::in_memory();
        let (id, tp) = four_segments(&store).await;
        for local_only_bytes in [0, 1 << 30] {
            let out = tp
                .apply_retention(&store, retention(i64::MAX, -1, -1, local_only_bytes, -1))
                .await
                .unwrap();
            assert_eq!((out.deleted_segments, out.log_start_offset), (0, None));
        }
        let m = TieredPartition::load(&store, id.clone())
            .await
            .unwrap()
            .manifest();
        assert_eq!(m.segments.len(), 4);
        assert_eq!(m.log_start_offset, 0);
        assert_eq!(objects(&store, &id).await, 4);
    }

    #[tokio::test]
    async fn remote_retention_deletes_exactly_what_each_limit_says() {
        let store = RemoteStore::in_memory();
        let (id, tp) = four_segments(&store).await;
        // DeleteRecords at 150: only [0, 100) lies wholly below; the start moves to 150.
        let out = tp
            .apply_retention(&store, retention(0, -1, -1, 0, 150))
            .await
            .unwrap();
        assert_eq!((out.deleted_segments, out.log_start_offset), (1, Some(150)));
        assert_eq!(objects(&store, &id).await, 3);
        // retention.bytes is the total over both tiers: 30 remote + 15 local bytes against a
        // limit of 25 removes [100, 200) and [200, 300) (what is left, 10 + 15, is 25).
        let out = tp
            .apply_retention(&store, retention(0, -1, 25, 15, -1))
            .await
            .unwrap();
        assert_eq!((out.deleted_segments, out.log_start_offset), (2, Some(300)));
        // retention.ms: [300, 400)'s newest record (4000) is not older than 10_000 at 12_000.
        let out = tp
            .apply_retention(&store, retention(12_000, 10_000, -1, 0, -1))
            .await
            .unwrap();
        assert_eq!(out.deleted_segments, 0);
        let out = tp
            .apply_retention(&store, retention(14_001, 10_000, -1, 0, -1))
            .await
            .unwrap();
        assert_eq!((out.deleted_segments, out.log_start_offset), (1, Some(400)));
        let m = TieredPartition::load(&store, id.clone())
            .await
            .unwrap()
            .manifest();
        assert!(m.segments.is_empty());
        assert_eq!(m.log_start_offset, 400);
        assert_eq!(objects(&store, &id).await, 0);
    }

    /// Seeded: for random manifests and limits, every segment remote retention deletes is past
    /// retention.ms, or leaves at least retention.bytes behind it (both tiers), or ends at or
    /// below the DeleteRecords offset, and the remote log start never passes both the first
    /// segment kept and the DeleteRecords offset.
    #[tokio::test]
    async fn remote_retention_never_deletes_a_segment_no_limit_names() {
        let seed: u64 = std::env::var("STRATA_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0x7e7e_2026);
        println!("seed {seed} (STRATA_TEST_SEED to repeat)");
        let mut rng = seed;
        let mut next_rand = move |n: u64| {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (rng >> 33) % n
        };
        for run in 0..200 {
            let store = RemoteStore::in_memory();
            let id = pid();
            let tp = TieredPartition::load(&store, id.clone()).await.unwrap();
            let (mut base, mut ts) = (0i64, 0i64);
            for _ in 0..1 + next_rand(8) {
                let next = base + 1 + next_rand(100) as i64;
                ts += next_rand(1000) as i64;
                let mut s = seg(base, next, 1);
                s.max_timestamp = ts;
                s.log = Part {
                    start: 0,
                    end: 1 + next_rand(50),
                };
                tp.commit_segment(&store, s, 1).await.unwrap();
                base = next;
            }
            let before = tp.manifest();
            let pick = |n: u64, r: u64| if r % 3 == 0 { -1 } else { n as i64 };
            let input = retention(
                ts + next_rand(1000) as i64,
                pick(next_rand(2000), next_rand(3)),
                pick(next_rand(400), next_rand(3)),
                next_rand(100),
                pick(next_rand(base as u64 + 50), next_rand(3)),
            );
            let out = tp.apply_retention(&store, input).await.unwrap();
            let after = tp.manifest();
            let deleted = &before.segments[..out.deleted_segments];
            assert_eq!(
                &before.segments[out.deleted_segments..],
                &after.segments[..]
            );
            let mut total = before.size() + input.local_only_bytes;
            for s in deleted {
                let by_time =
                    input.retention_ms >= 0 && input.now_ms - s.max_timestamp > input.retention_ms;
                let by_size =
                    input.retention_bytes >= 0 && total - s.size() >= input.retention_bytes as u64;
                let by_delete_records = s.next_offset <= input.delete_records_offset;
                assert!(
                    by_time || by_size || by_delete_records,
                    "seed {seed} run {run}: deleted {:?} under {input:?}",
                    (s.base_offset, s.next_offset)
                );
                total -= s.size();
            }
            if input.retention_ms < 0
                && input.retention_bytes < 0
                && input.delete_records_offset < 0
            {
                assert!(deleted.is_empty() && out.log_start_offset.is_none());
            }
            let first_kept = after.segments.first().map_or(base, |s| s.base_offset);
            assert!(
                after.log_start_offset <= first_kept.max(input.delete_records_offset).min(base),
                "seed {seed} run {run}: log start {} under {input:?}",
                after.log_start_offset
            );
        }
    }
}
