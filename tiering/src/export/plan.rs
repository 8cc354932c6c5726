//! What one partition's export reads: its remote segments (from the manifest), its sealed
//! local segments (from the partition directory), the aborted transactions of both, and the
//! offset below which exporting is safe.
//!
//! Safety bound: every segment is read, the active one up to its last whole batch (a broker
//! may be appending to it), capped by the high watermark checkpoint when the log dir has one
//! (records above it may still be truncated) and by the first offset of any transaction still
//! open at the end of the local log (its outcome is unknown, so its records can be neither
//! exported nor dropped yet): the last stable offset as the log dir shows it. Remote segments
//! are below the last stable offset by construction (design invariant 5). The plan says which
//! bound stopped it ([`PartitionPlan::stopped_by`]).

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::export::convert::{AbortedTxn, AbortedTxns, BATCH_HEADER_LEN, LOG_OVERHEAD};
use crate::export::ExportError;
use crate::manifest::{self, PartitionId, RemoteSegment};
use crate::store::RemoteStore;

/// One segment to read.
#[derive(Debug, Clone)]
pub enum Source {
    Local {
        log: PathBuf,
        base_offset: i64,
        /// The base offset of the next segment; for the active segment, the offset after its
        /// last whole batch.
        next_offset: i64,
        /// The bytes to read: the whole file of a sealed segment (one that ends inside a
        /// batch is reported corrupt), the whole batches of the active one (a broker may be
        /// appending to it).
        size: u64,
    },
    Remote {
        topic: String,
        segment: RemoteSegment,
    },
}

impl Source {
    pub fn base_offset(&self) -> i64 {
        match self {
            Source::Local { base_offset, .. } => *base_offset,
            Source::Remote { segment, .. } => segment.base_offset,
        }
    }
    pub fn next_offset(&self) -> i64 {
        match self {
            Source::Local { next_offset, .. } => *next_offset,
            Source::Remote { segment, .. } => segment.next_offset,
        }
    }
    pub fn size(&self) -> u64 {
        match self {
            Source::Local { size, .. } => *size,
            Source::Remote { segment, .. } => segment.size(),
        }
    }
    pub fn max_timestamp(&self) -> Option<i64> {
        match self {
            Source::Local { .. } => None,
            Source::Remote { segment, .. } => Some(segment.max_timestamp),
        }
    }
    pub fn describe(&self) -> String {
        match self {
            Source::Local { log, .. } => log.display().to_string(),
            Source::Remote { segment, .. } => segment.key.clone(),
        }
    }
}

/// Everything the export of one partition reads.
#[derive(Debug, Clone)]
pub struct PartitionPlan {
    pub topic: String,
    pub partition: i32,
    /// In offset order; remote segments only below the first local one.
    pub segments: Vec<Source>,
    pub aborted: AbortedTxns,
    /// The partition's log start offset (records below were deleted).
    pub log_start_offset: i64,
    /// Exclusive bound below which records are safe to export.
    pub safe_end: i64,
    /// Where the partition's records end (the offset after the last whole batch).
    pub log_end: i64,
    /// Why `safe_end` is below `log_end`, if it is.
    pub stopped_by: Option<Bound>,
    /// The bucket the remote segments are read from.
    pub remote_store: Option<Arc<RemoteStore>>,
}

/// What keeps records below the end of the log out of an export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// The high watermark checkpoint: records above it are not yet known to be committed.
    HighWatermark,
    /// A transaction still open at this offset: its records are not yet committed or aborted.
    OpenTransaction,
}

impl std::fmt::Display for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Bound::HighWatermark => "above the high watermark checkpoint (not yet committed)",
            Bound::OpenTransaction => "in a transaction still open",
        })
    }
}

/// Where the partition lives.
pub struct PlanInput<'a> {
    pub topic: &'a str,
    pub partition: i32,
    /// The bucket and the partition's id in it, when the topic is tiered.
    pub remote: Option<(Arc<RemoteStore>, PartitionId)>,
    /// `<log.dir>/<topic>-<partition>`, when this broker holds the partition.
    pub local_dir: Option<PathBuf>,
    /// The partition's high watermark from the log dir's checkpoint, if any.
    pub high_watermark: Option<i64>,
    /// Export start: remote segments entirely below it are not read, nor their indexes.
    pub from: i64,
}

pub async fn plan_partition(input: PlanInput<'_>) -> Result<PartitionPlan, ExportError> {
    let mut aborted = Vec::new();
    let mut local = Vec::new();
    let mut open_txn_start = None;
    if let Some(dir) = &input.local_dir {
        let dir = dir.clone();
        let scanned = tokio::task::spawn_blocking(move || scan_local(&dir))
            .await
            .map_err(|e| ExportError::Io(io::Error::other(e)))??;
        local = scanned.sealed;
        aborted.extend(scanned.aborted);
        open_txn_start = scanned.open_txn_start;
    }
    let local_start = local.first().map(Source::base_offset);
    let mut segments = Vec::new();
    let mut log_start_offset = local_start.unwrap_or(0);
    // Where the remote segments below the local ones end, skipped ones included.
    let mut remote_end = None;
    if let Some((store, id)) = &input.remote {
        if let Some(v) = manifest::load(store, id).await? {
            log_start_offset = v.manifest.log_start_offset;
            for s in v.manifest.segments {
                if local_start.is_some_and(|l| s.base_offset >= l) {
                    break;
                }
                remote_end = Some(s.next_offset);
                if s.next_offset <= input.from.max(log_start_offset) {
                    continue;
                }
                if let Some(part) = s.txn_index {
                    let raw = store.get_range(&id.topic, &s.key, part.range()).await?;
                    aborted.extend(AbortedTxn::parse_index(&raw));
                }
                segments.push(Source::Remote {
                    topic: id.topic.clone(),
                    segment: s,
                });
            }
        }
    }
    // Aborted transactions whose ABORT marker is in a remote segment below `from` cannot
    // cover records at or after `from`: the marker comes after every record it aborts.
    let start = input.from.max(log_start_offset);
    if let (Some(end), Some(local)) = (remote_end, local_start) {
        if local > end.max(start) {
            return Err(hole(&input, end.max(start), local));
        }
    }
    segments.extend(local);
    if let Some(w) = segments
        .windows(2)
        .find(|w| w[1].base_offset() > w[0].next_offset())
    {
        return Err(hole(&input, w[0].next_offset(), w[1].base_offset()));
    }
    let log_end = segments
        .last()
        .map_or(log_start_offset, Source::next_offset);
    let (mut safe_end, mut stopped_by) = (log_end, None);
    for (bound, why) in [
        (input.high_watermark, Bound::HighWatermark),
        (open_txn_start, Bound::OpenTransaction),
    ] {
        if let Some(b) = bound.filter(|&b| b < safe_end) {
            (safe_end, stopped_by) = (b, Some(why));
        }
    }
    Ok(PartitionPlan {
        topic: input.topic.to_string(),
        partition: input.partition,
        segments,
        aborted: AbortedTxns::new(aborted),
        log_start_offset,
        safe_end,
        log_end,
        stopped_by,
        remote_store: input.remote.map(|(s, _)| s),
    })
}

/// Records from `from` to `to` are in no segment found: a local segment was deleted between
/// the directory listing and its scan, or deleted locally without being in the manifest.
/// Either would otherwise be skipped silently. (A local segment may start below the end of
/// the last remote one: that overlap is no hole.)
fn hole(input: &PlanInput<'_>, from: i64, to: i64) -> ExportError {
    ExportError::Hole {
        topic: input.topic.to_string(),
        partition: input.partition,
        from,
        to,
    }
}

struct LocalScan {
    /// Every segment, the active one last (when it holds a whole batch).
    sealed: Vec<Source>,
    aborted: Vec<AbortedTxn>,
    open_txn_start: Option<i64>,
}

/// Lists a partition directory's segments (`<base:020>.log`), reads every `.txnindex`
/// (the active segment's too: it may hold the ABORT of a sealed segment's records), and walks
/// the batch headers of the whole local log for transactions without an end marker.
fn scan_local(dir: &Path) -> Result<LocalScan, ExportError> {
    let mut bases = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Ok(LocalScan {
                sealed: Vec::new(),
                aborted: Vec::new(),
                open_txn_start: None,
            })
        }
        Err(e) => return Err(e.into()),
    };
    for e in entries {
        let e = e?;
        let name = e.file_name().to_string_lossy().to_string();
        if let Some(stem) = name.strip_suffix(".log") {
            if stem.len() == 20 {
                if let Ok(base) = stem.parse::<i64>() {
                    bases.push(base);
                }
            }
        }
    }
    bases.sort_unstable();
    let mut aborted = Vec::new();
    let mut open: HashMap<i64, i64> = HashMap::new();
    let mut sealed = Vec::new();
    for (i, &base) in bases.iter().enumerate() {
        let log = dir.join(format!("{base:020}.log"));
        match std::fs::read(dir.join(format!("{base:020}.txnindex"))) {
            Ok(raw) => aborted.extend(AbortedTxn::parse_index(&raw)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
        let scan = match scan_transactions(&log, &mut open) {
            Ok(scanned) => scanned,
            // Deleted by retention since the listing: nothing to export from it.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e.into()),
        };
        let (next_offset, size) = match bases.get(i + 1) {
            Some(&next) => (next, scan.file_len),
            // The active segment: up to its last whole batch.
            None if scan.whole_bytes > 0 => (scan.end_offset, scan.whole_bytes),
            None => continue,
        };
        sealed.push(Source::Local {
            log,
            base_offset: base,
            next_offset,
            size,
        });
    }
    Ok(LocalScan {
        sealed,
        aborted,
        open_txn_start: open.values().copied().min(),
    })
}

/// What [`scan_transactions`] found in a segment file.
struct SegmentScan {
    file_len: u64,
    /// The bytes of the whole batches at its start.
    whole_bytes: u64,
    /// The offset after the last whole batch.
    end_offset: i64,
}

/// Reads the batch headers of one segment file, tracking transactions: a transactional data
/// batch opens its producer's transaction, a control batch closes it.
fn scan_transactions(log: &Path, open: &mut HashMap<i64, i64>) -> io::Result<SegmentScan> {
    let f = File::open(log)?;
    let len = f.metadata()?.len();
    let mut pos = 0u64;
    let mut end = 0i64;
    let mut h = [0u8; BATCH_HEADER_LEN];
    while pos + BATCH_HEADER_LEN as u64 <= len {
        f.read_exact_at(&mut h, pos)?;
        let base = i64::from_be_bytes(h[0..8].try_into().unwrap_or_default());
        let length = i32::from_be_bytes(h[8..12].try_into().unwrap_or_default());
        if length < (BATCH_HEADER_LEN - LOG_OVERHEAD) as i32
            || pos + LOG_OVERHEAD as u64 + length as u64 > len
        {
            break; // a torn, zero-filled or still-growing tail
        }
        let last_offset_delta = i32::from_be_bytes(h[23..27].try_into().unwrap_or_default());
        end = base.saturating_add(last_offset_delta.max(0) as i64 + 1);
        let attributes = i16::from_be_bytes([h[21], h[22]]);
        let producer_id = i64::from_be_bytes(h[43..51].try_into().unwrap_or_default());
        if attributes & 0x10 != 0 {
            if attributes & 0x20 != 0 {
                open.remove(&producer_id);
            } else {
                open.entry(producer_id).or_insert(base);
            }
        }
        pos += LOG_OVERHEAD as u64 + length as u64;
    }
    Ok(SegmentScan {
        file_len: len,
        whole_bytes: pos,
        end_offset: end,
    })
}

/// The high watermark of `topic`-`partition` from Kafka's `replication-offset-checkpoint` in
/// a log dir (`topic partition offset` lines after a version and a count line).
pub fn read_high_watermark(log_dir: &Path, topic: &str, partition: i32) -> Option<i64> {
    let text = std::fs::read_to_string(log_dir.join("replication-offset-checkpoint")).ok()?;
    text.lines().skip(2).find_map(|l| {
        let mut f = l.split_whitespace();
        match (f.next(), f.next(), f.next()) {
            (Some(t), Some(p), Some(o)) if t == topic && p.parse() == Ok(partition) => {
                o.parse().ok()
            }
            _ => None,
        }
    })
}
