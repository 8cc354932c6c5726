//! Uploading one sealed segment as a bundle (see [`crate::manifest`] for the layout).
//!
//! The `.log` file is memory-mapped and handed to the HTTP client as it is, so a segment of
//! any size is uploaded without copying it into the heap; its pages are page cache, shared
//! with the broker's own reads, and reclaimable. Segments up to `multipart_threshold` go in
//! one PUT (two requests per segment with the manifest commit: ≈2 per GiB with 1 GiB
//! segments); larger ones as a multipart upload of `part_size` parts sliced from the map.

use std::fs::File;
use std::path::PathBuf;

use bytes::Bytes;
use object_store::PutPayload;

use crate::manifest::{Part, PartitionId, RemoteSegment};
use crate::store::{RemoteStore, StoreError};

/// The files of one sealed segment, as the broker hands them over. The broker guarantees
/// they do not change while the upload runs (the segment is sealed and below the high
/// watermark) and that local retention does not delete them before the manifest commit.
#[derive(Debug, Clone)]
pub struct SegmentFiles {
    pub base_offset: i64,
    pub next_offset: i64,
    pub max_timestamp: i64,
    pub log: PathBuf,
    pub offset_index: PathBuf,
    pub time_index: PathBuf,
    pub producer_snapshot: Option<PathBuf>,
    /// The partition's leader-epoch checkpoint file contents, trimmed to this segment's end.
    pub leader_epoch_checkpoint: Option<Vec<u8>>,
    /// Leader epochs starting inside this segment, as (epoch, start offset).
    pub epochs: Vec<(i32, i64)>,
    /// The segment's `.txnindex` (aborted transactions), when it has one.
    pub txn_index: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UploadOptions {
    pub multipart_threshold: u64,
    pub part_size: u64,
}

impl Default for UploadOptions {
    fn default() -> Self {
        UploadOptions {
            multipart_threshold: 4 << 30,
            part_size: 512 << 20,
        }
    }
}

fn read_file(path: &PathBuf) -> Result<Bytes, StoreError> {
    std::fs::read(path)
        .map(Bytes::from)
        .map_err(|e| StoreError::Request(format!("cannot read {}: {e}", path.display())))
}

fn map_file(path: &PathBuf) -> Result<Bytes, StoreError> {
    let file = File::open(path)
        .map_err(|e| StoreError::Request(format!("cannot open {}: {e}", path.display())))?;
    let len = file
        .metadata()
        .map_err(|e| StoreError::Request(format!("cannot stat {}: {e}", path.display())))?
        .len();
    if len == 0 {
        return Ok(Bytes::new());
    }
    // SAFETY: the broker does not modify a sealed segment below the high watermark while it
    // is uploaded (see `SegmentFiles`); the map is read-only and dropped after the upload.
    let map = unsafe { memmap2::Mmap::map(&file) }
        .map_err(|e| StoreError::Request(format!("cannot map {}: {e}", path.display())))?;
    Ok(Bytes::from_owner(map))
}

/// Reads the segment's files into the bundle's parts (blocking I/O: call on a blocking
/// thread).
pub fn prepare(files: &SegmentFiles) -> Result<Vec<Bytes>, StoreError> {
    let mut parts = vec![
        map_file(&files.log)?,
        read_file(&files.offset_index)?,
        read_file(&files.time_index)?,
    ];
    if let Some(p) = &files.producer_snapshot {
        parts.push(read_file(p)?);
    }
    if let Some(c) = &files.leader_epoch_checkpoint {
        parts.push(Bytes::from(c.clone()));
    }
    if let Some(p) = &files.txn_index {
        parts.push(read_file(p)?);
    }
    Ok(parts)
}

/// Uploads a prepared bundle under a fresh unique key and describes it for the manifest.
pub async fn upload(
    store: &RemoteStore,
    id: &PartitionId,
    files: &SegmentFiles,
    parts: Vec<Bytes>,
    leader_epoch: i32,
    opts: UploadOptions,
    now_ms: i64,
) -> Result<RemoteSegment, StoreError> {
    let mut ranges = Vec::with_capacity(parts.len());
    let mut at = 0u64;
    for p in &parts {
        ranges.push(Part {
            start: at,
            end: at + p.len() as u64,
        });
        at += p.len() as u64;
    }
    let total = at;
    let key = id.segment_key(files.base_offset, leader_epoch);
    if total > opts.multipart_threshold {
        let part_size = opts.part_size.max(5 << 20) as usize;
        let mut chunks = Vec::new();
        let mut pending: Vec<Bytes> = Vec::new();
        let mut pending_len = 0usize;
        for p in parts {
            let mut p = p;
            while !p.is_empty() {
                let take = (part_size - pending_len).min(p.len());
                pending.push(p.split_to(take));
                pending_len += take;
                if pending_len == part_size {
                    chunks.push(concat(std::mem::take(&mut pending)));
                    pending_len = 0;
                }
            }
        }
        if pending_len > 0 {
            chunks.push(concat(pending));
        }
        store.put_multipart(&id.topic, &key, chunks).await?;
    } else {
        store
            .put(&id.topic, &key, PutPayload::from_iter(parts))
            .await?;
    }
    let mut it = ranges.into_iter();
    let log = it.next().unwrap_or(Part { start: 0, end: 0 });
    let offset_index = it.next().unwrap_or(Part {
        start: log.end,
        end: log.end,
    });
    let time_index = it.next().unwrap_or(Part {
        start: offset_index.end,
        end: offset_index.end,
    });
    let producer_snapshot = files.producer_snapshot.as_ref().and_then(|_| it.next());
    let leader_epoch_checkpoint = files
        .leader_epoch_checkpoint
        .as_ref()
        .and_then(|_| it.next());
    let txn_index = files.txn_index.as_ref().and_then(|_| it.next());
    Ok(RemoteSegment {
        key,
        base_offset: files.base_offset,
        next_offset: files.next_offset,
        max_timestamp: files.max_timestamp,
        leader_epoch,
        epochs: files.epochs.clone(),
        log,
        offset_index,
        time_index,
        producer_snapshot,
        leader_epoch_checkpoint,
        txn_index,
        uploaded_at_ms: now_ms,
    })
}

/// One multipart part from slices (copies only when a part spans files).
fn concat(mut pieces: Vec<Bytes>) -> Bytes {
    if pieces.len() == 1 {
        return pieces.pop().unwrap_or_default();
    }
    let mut out = Vec::with_capacity(pieces.iter().map(|p| p.len()).sum());
    for p in pieces {
        out.extend_from_slice(&p);
    }
    Bytes::from(out)
}
