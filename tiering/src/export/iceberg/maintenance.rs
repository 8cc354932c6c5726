//! Keeping a table that is committed often readable at the same cost: the manifests of the
//! current snapshot are merged once there are [`MIN_COUNT_TO_MERGE`] of them (one manifest per
//! commit would otherwise make every scan open one file per commit), snapshots older than the
//! table's `history.expire.max-snapshot-age-ms` are expired (all but the newest
//! `history.expire.min-snapshots-to-keep`, and never the current one), and the metadata log
//! keeps the last `write.metadata.previous-versions-max` entries. The property names and
//! defaults are Iceberg's; Iceberg applies the first and the last at commit, and Strata also
//! expires at commit because an export may commit every few seconds and every snapshot stays
//! in the metadata file each commit rewrites.
//!
//! Merging rewrites only manifests Strata wrote (their entries keep their snapshot ids and get
//! explicit sequence numbers, status EXISTING); another engine's manifests are listed as they
//! are. Data files are never deleted: every snapshot of an export table is an append, so the
//! current one references every file. After the commit that expires a snapshot, its manifest
//! list is deleted, and so are the manifests Strata wrote that only expired snapshots
//! referenced (the ones a merge replaced), as Iceberg's `ExpireSnapshots` does
//! ([`unreferenced_manifests`]).

use serde_json::Value as Json;

use super::avro::{self, Value};
use super::{
    manifest_file, null, rel_of, some, table_error, ManifestSummary, MANIFEST_ENTRY_SCHEMA,
};
use crate::export::target::Target;
use crate::export::ExportError;

/// Iceberg's `commit.manifest.min-count-to-merge` default.
pub const MIN_COUNT_TO_MERGE: usize = 100;
const MAX_SNAPSHOT_AGE_MS: (&str, i64) = ("history.expire.max-snapshot-age-ms", 5 * 86_400_000);
const MIN_SNAPSHOTS_TO_KEEP: (&str, i64) = ("history.expire.min-snapshots-to-keep", 1);
const PREVIOUS_VERSIONS_MAX: (&str, i64) = ("write.metadata.previous-versions-max", 100);

fn property(metadata: &Json, (name, default): (&str, i64)) -> i64 {
    metadata
        .get("properties")
        .and_then(|p| p.get(name))
        .and_then(Json::as_str)
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// `manifests` (a manifest list's entries), with Strata's manifests merged into one when there
/// are at least [`MIN_COUNT_TO_MERGE`]. `header` is the Avro header of a manifest of this table.
pub(super) async fn merge_manifests(
    target: &Target,
    topic: &str,
    manifests: Vec<Value>,
    header: &[(&str, String)],
    sequence: i64,
    snapshot_id: i64,
) -> Result<Vec<Value>, ExportError> {
    if manifests.len() < MIN_COUNT_TO_MERGE {
        return Ok(manifests);
    }
    let mut kept = Vec::new();
    let mut entries = Vec::new();
    let mut min_sequence = sequence;
    for m in manifests {
        let location = m
            .field("manifest_path")
            .and_then(Value::as_str)
            .ok_or_else(|| table_error("a manifest list entry without a path"))?
            .to_string();
        let manifest_sequence = m
            .field("sequence_number")
            .and_then(Value::as_long)
            .unwrap_or(0);
        let raw = target
            .read_object(topic, &rel_of(target, &location)?)
            .await?
            .ok_or_else(|| table_error(format!("manifest {location} is missing")))?;
        let file = avro::read_container_file(&raw)
            .map_err(|e| table_error(format!("manifest {location}: {e}")))?;
        let ours = file
            .metadata
            .iter()
            .any(|(k, v)| k == "avro.schema" && v.as_slice() == MANIFEST_ENTRY_SCHEMA.as_bytes());
        if !ours {
            kept.push(m);
            continue;
        }
        min_sequence = min_sequence.min(manifest_sequence);
        for e in &file.records {
            if let Some(entry) = existing_entry(e, manifest_sequence) {
                entries.push(entry);
            }
        }
    }
    let rel = super::metadata_rel(topic, &format!("{}-m0.avro", uuid::Uuid::new_v4()));
    let manifest = avro::container_file(MANIFEST_ENTRY_SCHEMA, header, &entries);
    let length = manifest.len() as i64;
    target
        .put_object(topic, &rel, bytes::Bytes::from(manifest))
        .await?;
    kept.push(merged_manifest_file(
        &target.location(&rel),
        length,
        sequence,
        min_sequence,
        snapshot_id,
        &entries,
    ));
    Ok(kept)
}

/// A live entry of a manifest as an EXISTING entry of a merged one (sequence numbers made
/// explicit: an ADDED entry's were inherited from its manifest); `None` for a DELETED entry.
fn existing_entry(e: &Value, manifest_sequence: i64) -> Option<Value> {
    let status = e.field("status")?.as_long()?;
    if status == 2 {
        return None;
    }
    let seq = |name: &str| {
        let v = e
            .field(name)
            .and_then(Value::as_long)
            .unwrap_or(manifest_sequence);
        some(Value::Long(v))
    };
    Some(Value::Record(vec![
        ("status".into(), Value::Int(0)),
        (
            "snapshot_id".into(),
            e.field("snapshot_id").cloned().unwrap_or_else(null),
        ),
        ("sequence_number".into(), seq("sequence_number")),
        ("file_sequence_number".into(), seq("file_sequence_number")),
        ("data_file".into(), e.field("data_file")?.clone()),
    ]))
}

fn merged_manifest_file(
    path: &str,
    length: i64,
    sequence: i64,
    min_sequence: i64,
    snapshot_id: i64,
    entries: &[Value],
) -> Value {
    let rows: i64 = entries
        .iter()
        .filter_map(|e| e.field("data_file")?.field("record_count")?.as_long())
        .sum();
    let part = |name: &str| -> Vec<i32> {
        entries
            .iter()
            .filter_map(|e| {
                e.field("data_file")?
                    .field("partition")?
                    .field(name)?
                    .as_long()
            })
            .map(|v| v as i32)
            .collect()
    };
    manifest_file(
        path,
        length,
        ManifestSummary {
            sequence,
            min_sequence,
            snapshot_id,
            added: (0, 0),
            existing: (entries.len(), rows),
            partitions: part("partition"),
            days: part("timestamp_day"),
        },
    )
}

/// Expires old snapshots from `metadata` (whose current snapshot is the newest) and trims its
/// metadata log; returns the manifest lists of the expired snapshots, to delete once this
/// metadata is committed.
pub(super) fn expire(metadata: &mut Json, now: i64) -> Vec<String> {
    let max_age = property(metadata, MAX_SNAPSHOT_AGE_MS);
    let min_keep = property(metadata, MIN_SNAPSHOTS_TO_KEEP).max(1) as usize;
    let previous_max = property(metadata, PREVIOUS_VERSIONS_MAX).max(1) as usize;
    let current = metadata.get("current-snapshot-id").and_then(Json::as_i64);
    let Some(o) = metadata.as_object_mut() else {
        return Vec::new();
    };
    let mut expired = Vec::new();
    if let Some(snapshots) = o.get_mut("snapshots").and_then(Json::as_array_mut) {
        let n = snapshots.len();
        let mut kept = Vec::with_capacity(n);
        for (i, s) in std::mem::take(snapshots).into_iter().enumerate() {
            let newest = i + min_keep >= n;
            let young = s
                .get("timestamp-ms")
                .and_then(Json::as_i64)
                .is_none_or(|t| t >= now - max_age);
            let is_current = s.get("snapshot-id").and_then(Json::as_i64) == current;
            if newest || young || is_current {
                kept.push(s);
            } else {
                expired.push(s);
            }
        }
        *snapshots = kept;
    }
    let expired_ids: Vec<Json> = expired
        .iter()
        .filter_map(|s| s.get("snapshot-id").cloned())
        .collect();
    if let Some(log) = o.get_mut("snapshot-log").and_then(Json::as_array_mut) {
        log.retain(|e| {
            !e.get("snapshot-id")
                .is_some_and(|id| expired_ids.contains(id))
        });
    }
    if let Some(log) = o.get_mut("metadata-log").and_then(Json::as_array_mut) {
        if log.len() > previous_max {
            log.drain(..log.len() - previous_max);
        }
    }
    expired
        .iter()
        .filter_map(|s| s.get("manifest-list")?.as_str().map(str::to_string))
        .collect()
}

/// The manifests Strata wrote (`<uuid>-m0.avro` in the table's metadata directory) that the
/// `expired` manifest lists name and no snapshot `metadata` keeps can reach: to delete once
/// `metadata` is committed. `current` is the manifest list of the new current snapshot.
///
/// Snapshots of an export table form one chain in which each manifest list is the previous
/// one's manifests, merged or not, plus a new one, so a manifest leaves the chain for good
/// once a merge replaces it: a manifest that a kept snapshot references is referenced by the
/// oldest kept one. Only that list (and `current`) is read, not every kept one. Where that
/// does not hold (another engine rolled the table back, or added a branch or a tag), or a list
/// cannot be read, nothing is deleted: an orphan is cheaper than a deleted live manifest.
pub(super) async fn unreferenced_manifests(
    target: &Target,
    topic: &str,
    metadata: &Json,
    expired: &[String],
    current: &[Value],
) -> Vec<String> {
    if expired.is_empty() || !one_chain(metadata) {
        return Vec::new();
    }
    let path = |m: &Value| {
        m.field("manifest_path")
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let mut kept: std::collections::HashSet<String> = current.iter().filter_map(path).collect();
    let oldest_kept = metadata
        .get("snapshots")
        .and_then(Json::as_array)
        .and_then(|s| {
            s.iter()
                .min_by_key(|s| s.get("sequence-number").and_then(Json::as_i64))
        })
        .and_then(|s| s.get("manifest-list")?.as_str());
    if let Some(list) = oldest_kept {
        match super::previous_manifests(target, topic, list).await {
            Ok(ms) => kept.extend(ms.iter().filter_map(path)),
            Err(_) => return Vec::new(),
        }
    }
    let ours = target.location(&super::metadata_rel(topic, ""));
    let mut doomed = std::collections::BTreeSet::new();
    for list in expired {
        let Ok(ms) = super::previous_manifests(target, topic, list).await else {
            continue;
        };
        for m in ms.iter().filter_map(path) {
            let strata_wrote = m
                .strip_prefix(ours.as_str())
                .is_some_and(|name| !name.contains('/') && name.ends_with("-m0.avro"));
            if strata_wrote && !kept.contains(&m) {
                doomed.insert(m);
            }
        }
    }
    doomed.into_iter().collect()
}

/// Whether the kept snapshots are one chain ending at the current snapshot: each one's parent
/// is the one before it (by sequence number), the current one is the newest, and the only
/// reference is `main`.
pub(super) fn one_chain(metadata: &Json) -> bool {
    let only_main = metadata
        .get("refs")
        .and_then(Json::as_object)
        .is_none_or(|r| r.keys().all(|k| k == "main"));
    let Some(snapshots) = metadata.get("snapshots").and_then(Json::as_array) else {
        return false;
    };
    let mut chain: Vec<(i64, i64, Option<i64>)> = Vec::with_capacity(snapshots.len());
    for s in snapshots {
        let (Some(seq), Some(id)) = (
            s.get("sequence-number").and_then(Json::as_i64),
            s.get("snapshot-id").and_then(Json::as_i64),
        ) else {
            return false;
        };
        chain.push((seq, id, s.get("parent-snapshot-id").and_then(Json::as_i64)));
    }
    chain.sort_unstable();
    let current = metadata.get("current-snapshot-id").and_then(Json::as_i64);
    only_main
        && chain.last().map(|c| c.1) == current
        && chain.windows(2).all(|w| w[1].2 == Some(w[0].1))
}
