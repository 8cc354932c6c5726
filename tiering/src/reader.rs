//! Remote reads through a foyer hybrid cache (memory + a disk directory).
//!
//! A segment bundle is read in fixed-size chunks (`chunk_size`, aligned to the bundle), each
//! cached under `<object key>@<chunk>`. A fetch looks up the segment's offset index (cached
//! whole), scans batch headers from the indexed position, and returns whole batches up to
//! `max_bytes`, reading the chunks it needs in parallel. After each read the next
//! `readahead_chunks` chunks are fetched in the background, so a sequential consumer finds
//! them cached. Concurrent misses on one chunk share a single GET (foyer deduplicates).
//!
//! The tiers: a chunk fetched from the store goes to memory; memory writes it to the disk
//! tier when it evicts it (foyer's `WriteOnEviction`). A chunk found on disk is served from
//! there and kept in a small memory cache of its own (an eighth of the memory budget, at
//! least the read-ahead window), so the next reads of the chunk and the read-ahead find it
//! without touching the chunks fetched from the store, and it is never written to disk
//! again. Promoting disk hits into the main memory tier (foyer's `get_or_fetch`) made every
//! disk hit evict a fetched chunk and write it out, so a second read of a topic larger than
//! memory rewrote the disk tier as it went (227 MiB written to read 512 MiB, 41% of the
//! broker's CPU in `pwrite`); as low-priority entries of the main tier they were evicted
//! before they were read (a shard's low-priority pool is smaller than a chunk).
//!
//! The disk tier is read and written with direct I/O where the filesystem allows it: it is a
//! cache of its own and should not copy every chunk through the page cache too (the copy was
//! most of a cold read's CPU); a filesystem without `O_DIRECT` (tmpfs) gets buffered I/O.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use foyer::{
    BlockEngineConfig, Cache, CacheBuilder, DeviceBuilder, FsDeviceBuilder, HybridCache,
    HybridCacheBuilder, HybridCachePolicy, Load,
};
use tokio::sync::Semaphore;

use crate::manifest::{Part, RemoteSegment};
use crate::store::{RemoteStore, StoreError};

/// Whether files in `dir` can be opened with `O_DIRECT` (not on tmpfs, for one).
fn direct_io_works(dir: &std::path::Path) -> bool {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::OpenOptionsExt;
        let probe = dir.join(".strata-direct-io-probe");
        let works = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(&probe)
            .is_ok();
        let _ = std::fs::remove_file(&probe);
        if !works {
            tracing::info!(dir = %dir.display(), "the remote cache's disk tier uses buffered I/O: the filesystem refuses O_DIRECT");
        }
        works
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = dir;
        false
    }
}

/// Batch header fields the reader needs (RecordBatch v2).
const HEADER_LEN: usize = 61;
const OFFSET_ENTRY: usize = 8;
const TIME_ENTRY: usize = 12;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheConfig {
    pub memory_bytes: usize,
    /// 0 disables the disk tier.
    pub disk_bytes: u64,
    pub disk_dir: PathBuf,
    pub chunk_size: usize,
    pub readahead_chunks: usize,
    /// GETs in flight at once for remote reads (across all partitions).
    pub max_concurrent_gets: usize,
    /// Byte rate of remote reads (all partitions together); `None` = unlimited.
    pub max_bytes_per_second: Option<u64>,
}

/// Spaces GETs so that, on average, reads stay under a byte rate. On tokio's clock, like the
/// sleep it takes, so tests can run it in paused time.
#[derive(Debug)]
struct RateLimit {
    bytes_per_second: u64,
    next_free: std::sync::Mutex<tokio::time::Instant>,
}

impl RateLimit {
    async fn take(&self, bytes: u64) {
        let wait = {
            let mut next = self.next_free.lock().unwrap_or_else(|e| e.into_inner());
            let now = tokio::time::Instant::now();
            let start = (*next).max(now);
            *next = start
                + std::time::Duration::from_secs_f64(bytes as f64 / self.bytes_per_second as f64);
            start - now
        };
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

#[derive(Debug, Default)]
pub struct ReadMetrics {
    pub chunk_hits: AtomicU64,
    pub chunk_misses: AtomicU64,
    pub reads: AtomicU64,
    pub read_micros_total: AtomicU64,
}

pub struct RemoteReader {
    store: Arc<RemoteStore>,
    cache: HybridCache<String, Bytes>,
    /// Chunks read from the disk tier (see the module docs).
    from_disk: Cache<String, Bytes>,
    chunk_size: u64,
    readahead: usize,
    gets: Arc<Semaphore>,
    rate: Option<Arc<RateLimit>>,
    pub metrics: Arc<ReadMetrics>,
}

/// A lookup result that locates a record batch in a remote segment.
#[derive(Debug, Clone, Copy)]
struct BatchPos {
    position: u64,
    last_offset: i64,
    max_timestamp: i64,
    size: u64,
}

impl RemoteReader {
    pub async fn new(
        store: Arc<RemoteStore>,
        cfg: &CacheConfig,
    ) -> Result<RemoteReader, StoreError> {
        let chunk_size = cfg.chunk_size.clamp(64 << 10, 64 << 20);
        let weigh = |k: &String, v: &Bytes| k.len() + v.len() + 64;
        // The disk hits' share of the memory budget: an eighth, at least the read-ahead
        // window and the chunk being read, at most half.
        let memory = cfg.memory_bytes.max(2 * chunk_size);
        let from_disk_bytes = if cfg.disk_bytes > 0 {
            (memory / 8)
                .max((cfg.readahead_chunks + 2) * chunk_size)
                .min(memory / 2)
        } else {
            0
        };
        let from_disk = CacheBuilder::new(from_disk_bytes.max(1))
            .with_shards(1)
            .with_weighter(weigh)
            .build();
        let builder = HybridCacheBuilder::new()
            .with_name("strata-remote")
            // Chunks go to disk when memory evicts them. (WriteOnInsertion re-enqueues a disk
            // write on every lookup, memory hits included, which floods the disk tier.)
            .with_policy(HybridCachePolicy::WriteOnEviction)
            .memory(memory - from_disk_bytes)
            .with_weighter(weigh)
            .storage();
        let cache = if cfg.disk_bytes > 0 {
            std::fs::create_dir_all(&cfg.disk_dir).map_err(|e| {
                StoreError::Config(format!("cache dir {}: {e}", cfg.disk_dir.display()))
            })?;
            let device = FsDeviceBuilder::new(&cfg.disk_dir)
                .with_capacity(cfg.disk_bytes as usize)
                .with_direct(direct_io_works(&cfg.disk_dir))
                .build()
                .map_err(|e| StoreError::Config(format!("cache device: {e}")))?;
            // A block must hold the largest entry: a chunk or a whole offset/time index.
            let block = (chunk_size + (1 << 20)).max(16 << 20);
            builder
                .with_engine_config(BlockEngineConfig::new(device).with_block_size(block))
                .build()
                .await
        } else {
            builder.build().await
        }
        .map_err(|e| StoreError::Config(format!("cache: {e}")))?;
        Ok(RemoteReader {
            store,
            cache,
            from_disk,
            chunk_size: chunk_size as u64,
            readahead: cfg.readahead_chunks,
            gets: Arc::new(Semaphore::new(cfg.max_concurrent_gets.max(1))),
            rate: cfg
                .max_bytes_per_second
                .filter(|&r| r > 0)
                .map(|bytes_per_second| {
                    Arc::new(RateLimit {
                        bytes_per_second,
                        next_free: std::sync::Mutex::new(tokio::time::Instant::now()),
                    })
                }),
            metrics: Arc::new(ReadMetrics::default()),
        })
    }

    pub fn store(&self) -> &Arc<RemoteStore> {
        &self.store
    }

    pub async fn close(&self) {
        let _ = self.cache.close().await;
    }

    /// A chunk from memory or the disk tier, without going to the store; a disk hit is kept
    /// in `from_disk`, not in the main memory tier (see the module docs).
    async fn cached(
        cache: &HybridCache<String, Bytes>,
        from_disk: &Cache<String, Bytes>,
        cache_key: &str,
    ) -> Option<Bytes> {
        if let Some(e) = cache.memory().get(cache_key) {
            return Some(e.value().clone());
        }
        if let Some(e) = from_disk.get(cache_key) {
            return Some(e.value().clone());
        }
        if !cache.is_hybrid() || !cache.storage().may_contains(cache_key) {
            return None;
        }
        // Concurrent readers of one chunk (the reader and its read-ahead) share one load.
        let storage = cache.storage().clone();
        let key = cache_key.to_string();
        let loaded = from_disk
            .get_or_fetch(cache_key, move || async move {
                match storage.load(&key).await {
                    Ok(Load::Entry { value, .. }) => Ok(value),
                    Ok(Load::Piece { piece, .. }) => Ok(piece.value().clone()),
                    // A miss, a throttled load or an unreadable entry: the store has it.
                    Ok(_) => Err(anyhow::anyhow!("{key} is not in the disk tier")),
                    Err(e) => Err(anyhow::anyhow!("{key}: {e}")),
                }
            })
            .await;
        loaded.ok().map(|e| e.value().clone())
    }

    /// Reads one chunk of a bundle through the cache.
    async fn chunk(
        &self,
        topic: &str,
        seg: &RemoteSegment,
        index: u64,
    ) -> Result<Bytes, StoreError> {
        let cache_key = format!("{}@{index}", seg.key);
        if let Some(value) = Self::cached(&self.cache, &self.from_disk, &cache_key).await {
            self.metrics.chunk_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(value);
        }
        let object_size = seg.object_size();
        let start = index * self.chunk_size;
        let end = (start + self.chunk_size).min(object_size);
        if start >= end {
            return Ok(Bytes::new());
        }
        let store = self.store.clone();
        let gets = self.gets.clone();
        let key = seg.key.clone();
        let topic = topic.to_string();
        let metrics = self.metrics.clone();
        let missed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let missed2 = missed.clone();
        let rate = self.rate.clone();
        let entry = self
            .cache
            .get_or_fetch(&cache_key, move || async move {
                missed2.store(true, Ordering::Relaxed);
                metrics.chunk_misses.fetch_add(1, Ordering::Relaxed);
                let _permit = gets.acquire_owned().await;
                if let Some(r) = rate {
                    r.take(end - start).await;
                }
                store.get_range(&topic, &key, start..end).await
            })
            .await
            .map_err(|e| StoreError::Request(format!("remote read of {}: {e}", seg.key)))?;
        if !missed.load(Ordering::Relaxed) {
            self.metrics.chunk_hits.fetch_add(1, Ordering::Relaxed);
        }
        Ok(entry.value().clone())
    }

    /// Reads bytes `[start, end)` of a bundle, fetching the chunks in parallel.
    async fn range(
        &self,
        topic: &str,
        seg: &RemoteSegment,
        start: u64,
        end: u64,
    ) -> Result<Bytes, StoreError> {
        if start >= end {
            return Ok(Bytes::new());
        }
        let first = start / self.chunk_size;
        let last = (end - 1) / self.chunk_size;
        let chunks =
            futures::future::try_join_all((first..=last).map(|i| self.chunk(topic, seg, i)))
                .await?;
        let base = first * self.chunk_size;
        if chunks.len() == 1 {
            let c = &chunks[0];
            let (a, b) = ((start - base) as usize, (end - base) as usize);
            if b > c.len() {
                return Err(StoreError::Request(format!(
                    "{} is shorter than its manifest entry",
                    seg.key
                )));
            }
            return Ok(c.slice(a..b));
        }
        let mut out = BytesMut::with_capacity((end - start) as usize);
        for (i, c) in chunks.iter().enumerate() {
            let c_start = base + i as u64 * self.chunk_size;
            let a = start.saturating_sub(c_start) as usize;
            let b = ((end - c_start) as usize).min(c.len());
            if a > b {
                return Err(StoreError::Request(format!(
                    "{} is shorter than its manifest entry",
                    seg.key
                )));
            }
            out.extend_from_slice(&c[a..b]);
        }
        if out.len() as u64 != end - start {
            return Err(StoreError::Request(format!(
                "{} is shorter than its manifest entry",
                seg.key
            )));
        }
        Ok(out.freeze())
    }

    /// A whole index part, cached as one entry.
    async fn index(
        &self,
        topic: &str,
        seg: &RemoteSegment,
        part: Part,
        tag: &str,
    ) -> Result<Bytes, StoreError> {
        if part.is_empty() {
            return Ok(Bytes::new());
        }
        let cache_key = format!("{}#{tag}", seg.key);
        let store = self.store.clone();
        let key = seg.key.clone();
        let topic = topic.to_string();
        let gets = self.gets.clone();
        let entry = self
            .cache
            .get_or_fetch(&cache_key, move || async move {
                let _permit = gets.acquire_owned().await;
                store.get_range(&topic, &key, part.range()).await
            })
            .await
            .map_err(|e| StoreError::Request(format!("remote index of {}: {e}", seg.key)))?;
        Ok(entry.value().clone())
    }

    /// The header of the batch at `position` of the segment's log part.
    async fn header_at(
        &self,
        topic: &str,
        seg: &RemoteSegment,
        position: u64,
    ) -> Result<Option<BatchPos>, StoreError> {
        let log_end = seg.log.end;
        if position + HEADER_LEN as u64 > log_end {
            return Ok(None);
        }
        let h = self
            .range(topic, seg, position, position + HEADER_LEN as u64)
            .await?;
        let base_offset = i64::from_be_bytes(h[0..8].try_into().unwrap_or_default());
        let length = i32::from_be_bytes(h[8..12].try_into().unwrap_or_default());
        let last_delta = i32::from_be_bytes(h[23..27].try_into().unwrap_or_default());
        let max_timestamp = i64::from_be_bytes(h[35..43].try_into().unwrap_or_default());
        if length < (HEADER_LEN - 12) as i32 || position + 12 + length as u64 > log_end {
            return Err(StoreError::Request(format!(
                "corrupt batch header at position {position} of {}",
                seg.key
            )));
        }
        Ok(Some(BatchPos {
            position,
            last_offset: base_offset + i64::from(last_delta),
            max_timestamp,
            size: 12 + length as u64,
        }))
    }

    /// Whole batches from the one holding `offset`, at most `max_bytes` unless `min_one` and
    /// the first batch alone is larger. Empty when `offset` is past the segment.
    ///
    /// Reads one window of chunks (the fetch budget plus some slack for the scan from the
    /// index entry), parses the batch headers in memory, and slices whole batches out of it;
    /// the cache is consulted once per chunk, not once per batch.
    pub async fn read(
        &self,
        topic: &str,
        seg: &RemoteSegment,
        offset: i64,
        max_bytes: usize,
        min_one: bool,
    ) -> Result<Bytes, StoreError> {
        const SCAN_SLACK: u64 = 64 << 10;
        let started = Instant::now();
        let index = self.index(topic, seg, seg.offset_index, "oidx").await?;
        let relative = offset.saturating_sub(seg.base_offset);
        let entries = index.len() / OFFSET_ENTRY;
        // Largest entry whose relative offset is <= the target.
        let (mut lo, mut hi) = (0usize, entries);
        while lo < hi {
            let mid = (lo + hi) / 2;
            let e = &index[mid * OFFSET_ENTRY..];
            let rel = u32::from_be_bytes(e[0..4].try_into().unwrap_or_default()) as i64;
            if rel <= relative {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let mut scan = if lo == 0 {
            0
        } else {
            let e = &index[(lo - 1) * OFFSET_ENTRY..];
            u32::from_be_bytes(e[4..8].try_into().unwrap_or_default()) as u64
        };
        let log_end = seg.log.end;
        let budget = max_bytes as u64;
        let corrupt = |at: u64| {
            StoreError::Request(format!(
                "corrupt batch header at position {at} of {}",
                seg.key
            ))
        };
        // (start, end) of the batches to return, as positions in the log part.
        let mut first: Option<u64> = None;
        let mut end = 0u64;
        'windows: loop {
            if scan + HEADER_LEN as u64 > log_end {
                break;
            }
            let window_end = (scan + budget.max(HEADER_LEN as u64) + SCAN_SLACK).min(log_end);
            let buf = self.range(topic, seg, scan, window_end).await?;
            let mut at = 0usize;
            while at + HEADER_LEN <= buf.len() {
                let h = &buf[at..];
                let base_offset = i64::from_be_bytes(h[0..8].try_into().unwrap_or_default());
                let length = i32::from_be_bytes(h[8..12].try_into().unwrap_or_default());
                let last_delta = i32::from_be_bytes(h[23..27].try_into().unwrap_or_default());
                let pos = scan + at as u64;
                if length < (HEADER_LEN - 12) as i32 || pos + 12 + length as u64 > log_end {
                    return Err(corrupt(pos));
                }
                let size = 12 + length as u64;
                match first {
                    None if base_offset + i64::from(last_delta) < offset => {}
                    None => {
                        if size > budget && !min_one {
                            break 'windows;
                        }
                        first = Some(pos);
                        end = pos + size;
                    }
                    Some(f) => {
                        if pos + size - f > budget {
                            break 'windows;
                        }
                        end = pos + size;
                    }
                }
                if first.is_some_and(|f| end - f >= budget) {
                    break 'windows;
                }
                at += size as usize;
            }
            if first.is_some() && (end > window_end || window_end == log_end || at < buf.len()) {
                // The window is used up: the batches found so far are the answer.
                break;
            }
            scan += at as u64;
            if window_end == log_end && at >= buf.len() {
                break;
            }
        }
        let Some(first) = first else {
            return Ok(Bytes::new());
        };
        let out = self.range(topic, seg, first, end).await?;
        self.prefetch(topic, seg, end);
        self.metrics.reads.fetch_add(1, Ordering::Relaxed);
        self.metrics
            .read_micros_total
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        Ok(out)
    }

    /// Starts background reads of the chunks after `position` (read-ahead).
    fn prefetch(&self, topic: &str, seg: &RemoteSegment, position: u64) {
        if self.readahead == 0 || position >= seg.log.end {
            return;
        }
        let first = position / self.chunk_size;
        let last = ((seg.log.end - 1) / self.chunk_size).min(first + self.readahead as u64);
        for i in first..=last {
            let cache_key = format!("{}@{i}", seg.key);
            if self.cache.memory().contains(&cache_key) || self.from_disk.contains(&cache_key) {
                continue;
            }
            if self.cache.is_hybrid() && self.cache.storage().may_contains(&cache_key) {
                // On disk: bring it into memory ahead of the reader.
                let (cache, from_disk) = (self.cache.clone(), self.from_disk.clone());
                tokio::spawn(async move {
                    let _ = Self::cached(&cache, &from_disk, &cache_key).await;
                });
                continue;
            }
            let start = i * self.chunk_size;
            let end = (start + self.chunk_size).min(seg.object_size());
            let store = self.store.clone();
            let key = seg.key.clone();
            let topic = topic.to_string();
            let gets = self.gets.clone();
            let metrics = self.metrics.clone();
            let rate = self.rate.clone();
            let fut = self.cache.get_or_fetch(&cache_key, move || async move {
                metrics.chunk_misses.fetch_add(1, Ordering::Relaxed);
                let _permit = gets.acquire_owned().await;
                if let Some(r) = rate {
                    r.take(end - start).await;
                }
                store.get_range(&topic, &key, start..end).await
            });
            tokio::spawn(async move {
                let _ = fut.await;
            });
        }
    }

    /// For offsetsForTimes: the first batch of the segment whose max timestamp is >=
    /// `timestamp`, at or after `min_offset`. The caller decodes it to find the record.
    pub async fn batch_for_timestamp(
        &self,
        topic: &str,
        seg: &RemoteSegment,
        timestamp: i64,
        min_offset: i64,
    ) -> Result<Option<Bytes>, StoreError> {
        let index = self.index(topic, seg, seg.time_index, "tidx").await?;
        // Kafka's time index lookup: the last entry with timestamp <= target bounds the scan.
        let mut start_offset = seg.base_offset;
        for e in index.chunks_exact(TIME_ENTRY) {
            let ts = i64::from_be_bytes(e[0..8].try_into().unwrap_or_default());
            let rel = u32::from_be_bytes(e[8..12].try_into().unwrap_or_default()) as i64;
            if ts > timestamp {
                break;
            }
            start_offset = seg.base_offset + rel;
        }
        // Position of the start offset through the offset index, then scan.
        let oidx = self.index(topic, seg, seg.offset_index, "oidx").await?;
        let target = start_offset.max(min_offset) - seg.base_offset;
        let mut position = 0u64;
        for e in oidx.chunks_exact(OFFSET_ENTRY) {
            let rel = u32::from_be_bytes(e[0..4].try_into().unwrap_or_default()) as i64;
            if rel > target {
                break;
            }
            position = u32::from_be_bytes(e[4..8].try_into().unwrap_or_default()) as u64;
        }
        let mut next = self.header_at(topic, seg, position).await?;
        while let Some(b) = next {
            if b.last_offset >= min_offset && b.max_timestamp >= timestamp {
                return self
                    .range(topic, seg, b.position, b.position + b.size)
                    .await
                    .map(Some);
            }
            next = self.header_at(topic, seg, b.position + b.size).await?;
        }
        Ok(None)
    }

    /// The segment's aborted-transaction index (Kafka's `.txnindex` bytes), cached whole.
    pub async fn txn_index(&self, topic: &str, seg: &RemoteSegment) -> Result<Bytes, StoreError> {
        match seg.txn_index {
            Some(part) => self.index(topic, seg, part, "txn").await,
            None => Ok(Bytes::new()),
        }
    }

    /// Downloads one part of a bundle whole (restore: producer snapshot, epochs).
    pub async fn part(
        &self,
        topic: &str,
        seg: &RemoteSegment,
        part: Part,
    ) -> Result<Bytes, StoreError> {
        self.store.get_range(topic, &seg.key, part.range()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::PartitionId;
    use crate::upload::{self, SegmentFiles, UploadOptions};

    /// A fake segment: batches of `per_batch` offsets with `payload` bytes each, an offset
    /// index entry every 3 batches and a time index entry every 5.
    fn write_segment(
        dir: &std::path::Path,
        base: i64,
        batches: usize,
        per_batch: i64,
        payload: usize,
    ) -> (SegmentFiles, Vec<(i64, Vec<u8>)>) {
        let mut log = Vec::new();
        let mut oidx = Vec::new();
        let mut tidx = Vec::new();
        let mut all = Vec::new();
        let mut offset = base;
        for i in 0..batches {
            let mut b = vec![0u8; HEADER_LEN + payload];
            b[0..8].copy_from_slice(&offset.to_be_bytes());
            let len = (b.len() - 12) as i32;
            b[8..12].copy_from_slice(&len.to_be_bytes());
            b[16] = 2;
            b[23..27].copy_from_slice(&((per_batch - 1) as i32).to_be_bytes());
            let ts = 1000 + offset;
            b[27..35].copy_from_slice(&ts.to_be_bytes());
            b[35..43].copy_from_slice(&(ts + per_batch - 1).to_be_bytes());
            for (j, x) in b[HEADER_LEN..].iter_mut().enumerate() {
                *x = (i + j) as u8;
            }
            if i % 3 == 0 {
                oidx.extend_from_slice(&((offset - base) as u32).to_be_bytes());
                oidx.extend_from_slice(&(log.len() as u32).to_be_bytes());
            }
            if i % 5 == 0 {
                tidx.extend_from_slice(&ts.to_be_bytes());
                tidx.extend_from_slice(&((offset - base) as u32).to_be_bytes());
            }
            log.extend_from_slice(&b);
            all.push((offset, b));
            offset += per_batch;
        }
        let p = |ext: &str| dir.join(format!("{base:020}.{ext}"));
        std::fs::write(p("log"), &log).unwrap();
        std::fs::write(p("index"), &oidx).unwrap();
        std::fs::write(p("timeindex"), &tidx).unwrap();
        std::fs::write(p("snapshot"), b"snap").unwrap();
        let files = SegmentFiles {
            base_offset: base,
            next_offset: offset,
            max_timestamp: 1000 + offset - 1,
            log: p("log"),
            offset_index: p("index"),
            time_index: p("timeindex"),
            producer_snapshot: Some(p("snapshot")),
            leader_epoch_checkpoint: Some(b"0\n1\n0 0\n".to_vec()),
            epochs: vec![(0, base)],
            txn_index: None,
        };
        (files, all)
    }

    /// A segment of `batches` fake batches (see [`write_segment`]) uploaded to `store`.
    async fn uploaded(
        store: &RemoteStore,
        dir: &std::path::Path,
        (base, batches, per_batch): (i64, usize, i64),
        opts: UploadOptions,
    ) -> (SegmentFiles, Vec<(i64, Vec<u8>)>, RemoteSegment) {
        let id = PartitionId {
            topic: "t".into(),
            topic_id: uuid::Uuid::new_v4(),
            partition: 0,
        };
        let (files, written) = write_segment(dir, base, batches, per_batch, 10_000);
        let parts = upload::prepare(&files).unwrap();
        let seg = upload::upload(store, &id, &files, parts, 3, opts, 0)
            .await
            .unwrap();
        (files, written, seg)
    }

    /// A reader over `store` with 64 KiB chunks, two read ahead.
    async fn reader(
        store: &Arc<RemoteStore>,
        dir: &std::path::Path,
        memory_bytes: usize,
        disk_bytes: u64,
    ) -> RemoteReader {
        let cfg = CacheConfig {
            memory_bytes,
            disk_bytes,
            disk_dir: dir.join("cache"),
            chunk_size: 64 << 10,
            readahead_chunks: 2,
            max_concurrent_gets: 4,
            max_bytes_per_second: None,
        };
        RemoteReader::new(store.clone(), &cfg).await.unwrap()
    }

    async fn check_reads(disk: bool, multipart: bool) {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(RemoteStore::in_memory());
        let opts = if multipart {
            UploadOptions {
                multipart_threshold: 1,
                part_size: 5 << 20,
            }
        } else {
            UploadOptions::default()
        };
        // 200 batches of ~10 KB: crosses many 64 KiB chunks.
        let (files, batches, seg) = uploaded(&store, dir.path(), (100, 200, 7), opts).await;
        assert_eq!(seg.producer_snapshot.map(|p| p.len()), Some(4));
        let disk_bytes = if disk { 64 << 20 } else { 0 };
        let reader = reader(&store, dir.path(), 256 << 10, disk_bytes).await;
        for (k, (offset, bytes)) in batches.iter().enumerate() {
            for target in [*offset, offset + 3] {
                // One batch when max_bytes is small (min_one), else as many as fit.
                let got = reader.read("t", &seg, target, 1, true).await.unwrap();
                assert_eq!(&got[..], &bytes[..], "batch at {offset}");
                let got = reader.read("t", &seg, target, 35_000, false).await.unwrap();
                let want: Vec<u8> = batches[k..]
                    .iter()
                    .take(3)
                    .flat_map(|(_, b)| b.clone())
                    .collect();
                assert_eq!(got.len(), want.len());
                assert_eq!(&got[..], &want[..]);
            }
        }
        assert!(reader
            .read("t", &seg, files.next_offset, 1000, true)
            .await
            .unwrap()
            .is_empty());
        assert!(
            reader
                .read("t", &seg, 150, 1000, false)
                .await
                .unwrap()
                .is_empty(),
            "no whole batch fits"
        );
        // Timestamp lookup: record timestamps are 1000 + offset.
        let b = reader
            .batch_for_timestamp("t", &seg, 1000 + 100 + 7 * 50 + 2, 0)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            i64::from_be_bytes(b[0..8].try_into().unwrap()),
            100 + 7 * 50
        );
        assert!(reader
            .batch_for_timestamp("t", &seg, 1_000_000, 0)
            .await
            .unwrap()
            .is_none());
        let m = &reader.metrics;
        assert!(m.chunk_hits.load(Ordering::Relaxed) > m.chunk_misses.load(Ordering::Relaxed));
        reader.close().await;
    }

    /// In paused time: the clock moves only when every task waits, so the elapsed times are
    /// the limiter's own waits, whatever the machine's load.
    #[tokio::test(start_paused = true)]
    async fn the_rate_limit_spaces_reads() {
        use std::time::Duration;
        let r = RateLimit {
            bytes_per_second: 1_000_000,
            next_free: std::sync::Mutex::new(tokio::time::Instant::now()),
        };
        let started = tokio::time::Instant::now();
        r.take(200_000).await;
        // The first read does not wait.
        assert_eq!(started.elapsed(), Duration::ZERO);
        r.take(200_000).await;
        let elapsed = started.elapsed();
        assert!(elapsed >= Duration::from_millis(200), "{elapsed:?}");
        r.take(200_000).await;
        // The second and third reads wait for the first two to "drain" at 1 MB/s: 400 ms
        // (tokio's timer rounds a sleep up to the next millisecond).
        let elapsed = started.elapsed();
        assert!(
            elapsed >= Duration::from_millis(400) && elapsed <= Duration::from_millis(402),
            "{elapsed:?}"
        );
    }

    /// Reading a segment larger than memory again and again: after the first pass nothing
    /// is fetched from the store, and once the disk tier holds what memory evicted, reading
    /// it again writes nothing to disk (a disk hit never pushes a fetched chunk out to be
    /// written, nor is written back itself).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rereading_more_than_memory_holds_neither_fetches_nor_rewrites_the_disk_tier() {
        const MEMORY: usize = 4 << 20;
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(RemoteStore::in_memory());
        // ~16 MiB: 250 chunks of 64 KiB, four times what memory holds.
        let (files, batches, seg) =
            uploaded(&store, dir.path(), (0, 1600, 5), UploadOptions::default()).await;
        let reader = reader(&store, dir.path(), MEMORY, 64 << 20).await;
        let read_all = || async {
            let mut offset = 0;
            while offset < files.next_offset {
                let got = reader.read("t", &seg, offset, 100_000, true).await.unwrap();
                assert!(!got.is_empty(), "a batch at {offset}");
                let k = (offset / 5) as usize;
                assert_eq!(&got[..batches[k].1.len()], &batches[k].1[..]);
                let mut at = 0;
                while at < got.len() {
                    let len = i32::from_be_bytes(got[at + 8..at + 12].try_into().unwrap());
                    at += 12 + len as usize;
                    offset += 5;
                }
            }
        };
        let settled = || async {
            // Read-ahead tasks and the disk tier's writes finish.
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            reader.cache.storage().wait().await;
            reader.cache.statistics().disk_write_bytes()
        };
        read_all().await;
        let fetched = reader.metrics.chunk_misses.load(Ordering::Relaxed);
        let written = settled().await;
        assert!(written > 0, "memory evicted chunks to disk");
        for _ in 0..3 {
            read_all().await;
        }
        assert_eq!(
            reader.metrics.chunk_misses.load(Ordering::Relaxed),
            fetched,
            "reading again fetches nothing: every chunk is in memory or on disk"
        );
        // Only fetched chunks that memory had already set aside for eviction go to disk (a
        // tenth of memory): disk hits neither push the other fetched chunks out nor are
        // written back. Promoting disk hits as ordinary entries wrote all of memory.
        let rewritten = settled().await - written;
        assert!(
            rewritten < MEMORY / 4,
            "{rewritten} bytes written to disk by three more reads of the same data"
        );
        reader.close().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reads_whole_batches_across_chunks_memory_cache() {
        check_reads(false, false).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reads_whole_batches_across_chunks_hybrid_cache_multipart() {
        check_reads(true, true).await;
    }
}
