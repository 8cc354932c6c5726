//! Remote reads through a memory cache and a disk tier of chunk files.
//!
//! A segment bundle is read in fixed-size chunks (`chunk_size`, aligned to the bundle), each
//! cached under `<object key>@<chunk>`. A fetch looks up the segment's offset index (cached
//! whole), scans batch headers from the indexed position, and returns whole batches up to
//! `max_bytes`, reading the chunks it needs in parallel. After each read the next
//! `readahead_chunks` chunks are fetched in the background, so a sequential consumer finds
//! them cached. Concurrent misses on one chunk share a single GET (foyer deduplicates).
//!
//! The tiers: without a disk tier, chunks are kept in memory (least recently used out). With
//! one ([`crate::disk_tier`]), a chunk fetched from the store is written to its own file and
//! then leaves memory: the page cache is the disk tier's memory, and a read of a cached chunk
//! answers with the file range itself, which the broker sends with `sendfile` as it sends
//! local segments (no copy through the broker, no checksum pass). Memory then holds the
//! index parts and the chunks on their way to disk. A chunk the disk tier cannot take (a
//! full disk) stays in memory.
//!
//! Why not a block engine (foyer's hybrid cache) for the disk tier: it reads each 4 MiB disk
//! hit into a fresh buffer with direct I/O, checksums and copies it; measured, reading a
//! topic a second time that way cost the broker a third of a core at 200 MB/s, which on a
//! small machine its consumers were missing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use foyer_memory::{Cache, CacheBuilder};
use tokio::sync::Semaphore;

use crate::disk_tier::{DiskTier, FileRange};
use crate::manifest::{Part, RemoteSegment};
use crate::store::{RemoteStore, StoreError};

/// Batch header fields the reader needs (RecordBatch v2).
const HEADER_LEN: usize = 61;
const OFFSET_ENTRY: usize = 8;
const TIME_ENTRY: usize = 12;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheConfig {
    pub memory_bytes: usize,
    /// 0 disables the disk tier.
    pub disk_bytes: u64,
    pub disk_dir: std::path::PathBuf,
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
    /// Chunks a read found cached, or being fetched by a GET it did not start.
    pub chunk_hits: AtomicU64,
    /// Chunks a read had to GET itself.
    pub chunk_misses: AtomicU64,
    /// Chunk GETs started by read-ahead, ahead of any read.
    pub readahead_gets: AtomicU64,
    pub reads: AtomicU64,
    pub read_micros_total: AtomicU64,
}

impl ReadMetrics {
    /// Chunk GETs of reads and of read-ahead together.
    pub fn chunk_gets(&self) -> u64 {
        self.chunk_misses.load(Ordering::Relaxed) + self.readahead_gets.load(Ordering::Relaxed)
    }
}

/// Bytes of a bundle: in memory, or a range of a disk-tier file.
#[derive(Debug, Clone)]
pub enum Piece {
    Memory(Bytes),
    File(FileRange),
}

impl Piece {
    pub fn len(&self) -> usize {
        match self {
            Piece::Memory(b) => b.len(),
            Piece::File(f) => f.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn slice(&self, from: usize, to: usize) -> Piece {
        match self {
            Piece::Memory(b) => Piece::Memory(b.slice(from..to)),
            Piece::File(f) => Piece::File(f.slice(from, to)),
        }
    }

    /// Copies `out.len()` bytes from `at` into `out`.
    fn copy_to(&self, at: usize, out: &mut [u8]) -> std::io::Result<()> {
        match self {
            Piece::Memory(b) => {
                out.copy_from_slice(&b[at..at + out.len()]);
                Ok(())
            }
            Piece::File(f) => {
                use std::os::unix::fs::FileExt;
                f.file.read_exact_at(out, f.position + at as u64)
            }
        }
    }
}

/// Whole record batches read from remote storage, as consecutive pieces.
#[derive(Debug, Clone, Default)]
pub struct RemoteRecords {
    pub pieces: Vec<Piece>,
}

impl RemoteRecords {
    pub fn len(&self) -> usize {
        self.pieces.iter().map(Piece::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The records in one buffer (a copy, unless they are one piece in memory).
    pub fn into_bytes(self) -> std::io::Result<Bytes> {
        if let [Piece::Memory(b)] = &self.pieces[..] {
            return Ok(b.clone());
        }
        let mut out = vec![0u8; self.len()];
        let mut at = 0;
        for p in &self.pieces {
            p.copy_to(0, &mut out[at..at + p.len()])?;
            at += p.len();
        }
        Ok(Bytes::from(out))
    }
}

/// The chunks covering a byte range of a bundle: chunk `first + i` is `chunks[i]`.
struct Window {
    chunk_size: u64,
    first: u64,
    chunks: Vec<Piece>,
}

impl Window {
    fn covers(&self, start: u64, end: u64) -> bool {
        start >= self.first * self.chunk_size && end <= self.end()
    }

    /// The bundle position after the window's last byte.
    fn end(&self) -> u64 {
        let base = self.first * self.chunk_size;
        base + (self.chunks.len() as u64).saturating_sub(1) * self.chunk_size
            + self.chunks.last().map_or(0, |c| c.len() as u64)
    }

    /// `[start, end)` as pieces of the chunks; the window covers it.
    fn pieces(&self, start: u64, end: u64) -> Vec<Piece> {
        let mut out = Vec::new();
        let mut pos = start;
        while pos < end {
            let i = pos / self.chunk_size;
            let c = &self.chunks[(i - self.first) as usize];
            let c_start = i * self.chunk_size;
            let to = (end - c_start).min(c.len() as u64);
            out.push(c.slice((pos - c_start) as usize, to as usize));
            pos = c_start + to;
        }
        out
    }

    /// Copies `out.len()` bytes from `pos` on; the window covers them.
    fn copy_to(&self, pos: u64, out: &mut [u8]) -> std::io::Result<()> {
        let mut done = 0;
        while done < out.len() {
            let at = pos + done as u64;
            let i = at / self.chunk_size;
            let c = &self.chunks[(i - self.first) as usize];
            let off = (at - i * self.chunk_size) as usize;
            let n = (c.len() - off).min(out.len() - done);
            c.copy_to(off, &mut out[done..done + n])?;
            done += n;
        }
        Ok(())
    }
}

/// Reads batch headers out of a window: small batches' headers a block at a time, large
/// batches' one by one, so scanning neither copies the records nor makes a call per small
/// batch.
struct HeaderScan {
    buf: Vec<u8>,
    /// Bundle position of `buf[0]`.
    at: u64,
    /// Size of the last batch read, to choose the next read's length.
    last_size: u64,
}

impl HeaderScan {
    const BLOCK: u64 = 8 << 10;

    fn new() -> HeaderScan {
        HeaderScan {
            buf: Vec::new(),
            at: 0,
            last_size: 0,
        }
    }

    /// The header at `pos`; `limit` bounds what may be read (the window's end).
    fn header(&mut self, w: &Window, pos: u64, limit: u64) -> std::io::Result<[u8; HEADER_LEN]> {
        let have = pos >= self.at && pos + HEADER_LEN as u64 <= self.at + self.buf.len() as u64;
        if !have {
            let len = if self.last_size < Self::BLOCK / 4 {
                Self::BLOCK.min(limit - pos).max(HEADER_LEN as u64)
            } else {
                HEADER_LEN as u64
            };
            self.buf.resize(len as usize, 0);
            w.copy_to(pos, &mut self.buf)?;
            self.at = pos;
        }
        let from = (pos - self.at) as usize;
        let mut h = [0u8; HEADER_LEN];
        h.copy_from_slice(&self.buf[from..from + HEADER_LEN]);
        Ok(h)
    }
}

/// Moves fetched chunks from memory to the disk tier, on threads of their own.
///
/// Filling the cache is background work: the readers already have the bytes. A fixed set of
/// writers (one per core, at most [`ChunkWriter::THREADS`]) bounds it however many partitions
/// are read cold at once, and a writer takes each chunk from the memory cache when it gets to
/// it, so the chunks waiting for a slow disk are bounded by the memory cache rather than
/// piling up in write tasks. A chunk evicted from memory first is counted (`unwritten`) and
/// fetched again if it is read again.
///
/// Why more than one: writing a chunk file into page-cache pages the machine has not used
/// lately waits on the memory system more than on the core (on a VM that returns freed
/// memory to its host, 0.4 GiB/s for such pages against 2-8 GiB/s for recycled ones), and
/// measured, a single writer fell behind a cold read and let chunks go unwritten. Why normal
/// priority: in the idle scheduling class the cold read was no faster, and on a busy machine
/// the writers starved, so nothing reached the disk tier.
struct ChunkWriter {
    queue: std::sync::mpsc::SyncSender<String>,
    disk: Arc<DiskTier>,
    /// Chunks queued and not yet written or dropped.
    pending: Arc<AtomicU64>,
}

impl ChunkWriter {
    /// Chunk keys waiting (a key is small; the chunks themselves stay in the memory cache).
    const QUEUE: usize = 4096;
    /// Writer threads at most.
    const THREADS: usize = 4;

    fn start(disk: Arc<DiskTier>, memory: Cache<String, Bytes>) -> std::io::Result<ChunkWriter> {
        let (queue, keys) = std::sync::mpsc::sync_channel::<String>(Self::QUEUE);
        let keys = Arc::new(std::sync::Mutex::new(keys));
        let pending = Arc::new(AtomicU64::new(0));
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, Self::THREADS);
        for _ in 0..threads {
            let (tier, left, keys, memory) =
                (disk.clone(), pending.clone(), keys.clone(), memory.clone());
            std::thread::Builder::new()
                .name("strata-cache-writer".into())
                .spawn(move || loop {
                    // Ends when the reader (the queue's sender) is dropped.
                    let next = keys.lock().unwrap_or_else(|e| e.into_inner()).recv();
                    let Ok(key) = next else { return };
                    Self::write(&tier, &memory, &key);
                    left.fetch_sub(1, Ordering::Release);
                })?;
        }
        Ok(ChunkWriter {
            queue,
            disk,
            pending,
        })
    }

    fn write(tier: &DiskTier, memory: &Cache<String, Bytes>, key: &str) {
        let Some(entry) = memory.get(key) else {
            if !tier.contains(key) {
                tier.metrics.unwritten.fetch_add(1, Ordering::Relaxed);
            }
            return;
        };
        let bytes = entry.value().clone();
        drop(entry);
        match tier.put(key, &bytes) {
            Ok(()) if tier.contains(key) => {
                memory.remove(key);
            }
            // Skipped to keep the file system's free share: it stays in memory.
            Ok(()) => {}
            Err(e) => {
                tracing::warn!(chunk = %key, error = %e, "remote cache: chunk not written to disk, kept in memory");
            }
        }
    }

    fn enqueue(&self, key: String) {
        self.pending.fetch_add(1, Ordering::Acquire);
        if self.queue.try_send(key).is_err() {
            self.pending.fetch_sub(1, Ordering::Release);
            self.disk.metrics.unwritten.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether every chunk queued so far has been written or dropped.
    #[cfg(test)]
    fn idle(&self) -> bool {
        self.pending.load(Ordering::Acquire) == 0
    }
}

pub struct RemoteReader {
    store: Arc<RemoteStore>,
    memory: Cache<String, Bytes>,
    disk: Option<Arc<DiskTier>>,
    writer: Option<Arc<ChunkWriter>>,
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

impl BatchPos {
    /// The batch whose header `h` is, at `position` of a log part ending at `log_end`;
    /// `None` when its length is too short for a header or runs past the end.
    fn parse(h: &[u8; HEADER_LEN], position: u64, log_end: u64) -> Option<BatchPos> {
        let base_offset = i64::from_be_bytes(h[0..8].try_into().unwrap_or_default());
        let length = i32::from_be_bytes(h[8..12].try_into().unwrap_or_default());
        let last_delta = i32::from_be_bytes(h[23..27].try_into().unwrap_or_default());
        let max_timestamp = i64::from_be_bytes(h[35..43].try_into().unwrap_or_default());
        if length < (HEADER_LEN - 12) as i32 || position + 12 + length as u64 > log_end {
            return None;
        }
        Some(BatchPos {
            position,
            last_offset: base_offset + i64::from(last_delta),
            max_timestamp,
            size: 12 + length as u64,
        })
    }
}

fn corrupt_header(position: u64, seg: &RemoteSegment) -> StoreError {
    StoreError::Request(format!(
        "corrupt batch header at position {position} of {}",
        seg.key
    ))
}

fn io_error(key: &str, e: std::io::Error) -> StoreError {
    StoreError::Request(format!("remote cache read of {key}: {e}"))
}

impl RemoteReader {
    pub async fn new(
        store: Arc<RemoteStore>,
        cfg: &CacheConfig,
    ) -> Result<RemoteReader, StoreError> {
        let chunk_size = cfg.chunk_size.clamp(64 << 10, 64 << 20);
        let memory = CacheBuilder::new(cfg.memory_bytes.max(2 * chunk_size))
            .with_name("strata-remote")
            .with_weighter(|k: &String, v: &Bytes| k.len() + v.len() + 64)
            .build();
        let disk = if cfg.disk_bytes > 0 {
            let (dir, capacity) = (cfg.disk_dir.clone(), cfg.disk_bytes);
            let tier = tokio::task::spawn_blocking(move || DiskTier::open(&dir, capacity))
                .await
                .map_err(|e| StoreError::Config(format!("cache dir: {e}")))?
                .map_err(|e| {
                    StoreError::Config(format!("cache dir {}: {e}", cfg.disk_dir.display()))
                })?;
            Some(Arc::new(tier))
        } else {
            None
        };
        let writer = match &disk {
            Some(d) => Some(Arc::new(
                ChunkWriter::start(d.clone(), memory.clone())
                    .map_err(|e| StoreError::Config(format!("cache writer thread: {e}")))?,
            )),
            None => None,
        };
        Ok(RemoteReader {
            store,
            memory,
            disk,
            writer,
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

    /// The disk tier, when there is one (its metrics).
    pub fn disk_tier(&self) -> Option<&Arc<DiskTier>> {
        self.disk.as_ref()
    }

    /// Waits until the chunks queued for the disk tier so far are written (or dropped).
    #[cfg(test)]
    async fn writes_done(&self) {
        while self.writer.as_ref().is_some_and(|w| !w.idle()) {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
    }

    /// The bytes of chunk `index` (`[start, end)` of the bundle) from the store, through the
    /// memory cache (which joins concurrent misses into one GET); with a disk tier, queued
    /// for the background writer, which moves it to a file.
    fn fetch(
        &self,
        topic: &str,
        seg: &RemoteSegment,
        cache_key: String,
        (start, end): (u64, u64),
        missed: Option<Arc<std::sync::atomic::AtomicBool>>,
    ) -> impl std::future::Future<Output = Result<Bytes, StoreError>> + Send + 'static {
        let store = self.store.clone();
        let gets = self.gets.clone();
        let key = seg.key.clone();
        let topic = topic.to_string();
        let metrics = self.metrics.clone();
        let rate = self.rate.clone();
        // Set by the one call of those sharing the GET that ran it.
        let fetched_here = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let ran = fetched_here.clone();
        let fetched = self.memory.get_or_fetch(&cache_key, move || async move {
            ran.store(true, Ordering::Relaxed);
            match missed {
                Some(m) => {
                    m.store(true, Ordering::Relaxed);
                    metrics.chunk_misses.fetch_add(1, Ordering::Relaxed);
                }
                None => {
                    metrics.readahead_gets.fetch_add(1, Ordering::Relaxed);
                }
            }
            let _permit = gets.acquire_owned().await;
            if let Some(r) = rate {
                r.take(end - start).await;
            }
            store.get_range(&topic, &key, start..end).await
        });
        let writer = self.writer.clone();
        let what = seg.key.clone();
        // A task of its own, so that the chunk is queued for the writer even when the read
        // that started the GET is dropped before it completes (a fetch that ran out of its
        // wait): the cache inserts it regardless.
        let done = tokio::spawn(async move {
            let entry = fetched
                .await
                .map_err(|e| StoreError::Request(format!("remote read of {what}: {e}")))?;
            let bytes = entry.value().clone();
            drop(entry);
            if let Some(w) = writer.filter(|_| fetched_here.load(Ordering::Relaxed)) {
                // In memory now, where the writer takes it from.
                w.enqueue(cache_key);
            }
            Ok(bytes)
        });
        async move {
            done.await
                .map_err(|e| StoreError::Request(format!("remote read task: {e}")))?
        }
    }

    /// Reads one chunk of a bundle through the cache.
    async fn chunk(
        &self,
        topic: &str,
        seg: &RemoteSegment,
        index: u64,
    ) -> Result<Piece, StoreError> {
        let object_size = seg.object_size();
        let start = index * self.chunk_size;
        let end = (start + self.chunk_size).min(object_size);
        if start >= end {
            return Ok(Piece::Memory(Bytes::new()));
        }
        let cache_key = format!("{}@{index}", seg.key);
        if let Some(e) = self.memory.get(&cache_key) {
            self.metrics.chunk_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(Piece::Memory(e.value().clone()));
        }
        if let Some(disk) = &self.disk {
            if let Some(needs_check) = disk.lookup(&cache_key) {
                // A file this process wrote is opened in place (an `open` of a cached
                // inode); one found at start is read whole for its CRC first.
                let found = if needs_check {
                    let (d, k) = (disk.clone(), cache_key.clone());
                    tokio::task::spawn_blocking(move || d.get(&k, end - start))
                        .await
                        .ok()
                        .flatten()
                } else {
                    disk.get(&cache_key, end - start)
                };
                if let Some(f) = found {
                    self.metrics.chunk_hits.fetch_add(1, Ordering::Relaxed);
                    return Ok(Piece::File(f));
                }
            }
        }
        let missed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let bytes = self
            .fetch(topic, seg, cache_key, (start, end), Some(missed.clone()))
            .await?;
        if !missed.load(Ordering::Relaxed) {
            self.metrics.chunk_hits.fetch_add(1, Ordering::Relaxed);
        }
        Ok(Piece::Memory(bytes))
    }

    /// The chunks covering bytes `[start, end)` of a bundle, read in parallel.
    async fn window(
        &self,
        topic: &str,
        seg: &RemoteSegment,
        start: u64,
        end: u64,
    ) -> Result<Window, StoreError> {
        let first = start / self.chunk_size;
        let last = (end.max(start + 1) - 1) / self.chunk_size;
        let chunks =
            futures::future::try_join_all((first..=last).map(|i| self.chunk(topic, seg, i)))
                .await?;
        let w = Window {
            chunk_size: self.chunk_size,
            first,
            chunks,
        };
        let short = w
            .chunks
            .iter()
            .rev()
            .skip(1)
            .any(|c| c.len() as u64 != self.chunk_size);
        if short || !w.covers(start, end) {
            return Err(StoreError::Request(format!(
                "{} is shorter than its manifest entry",
                seg.key
            )));
        }
        Ok(w)
    }

    /// Bytes `[start, end)` of a bundle in one buffer.
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
        let w = self.window(topic, seg, start, end).await?;
        RemoteRecords {
            pieces: w.pieces(start, end),
        }
        .into_bytes()
        .map_err(|e| io_error(&seg.key, e))
    }

    /// A whole index part, cached in memory as one entry. The GET starts when this is called
    /// (the cache runs it in a task of its own), not when the answer is awaited.
    fn index(
        &self,
        topic: &str,
        seg: &RemoteSegment,
        part: Part,
        tag: &str,
    ) -> impl std::future::Future<Output = Result<Bytes, StoreError>> + Send + 'static {
        let fetched = (!part.is_empty()).then(|| {
            let store = self.store.clone();
            let key = seg.key.clone();
            let topic = topic.to_string();
            let gets = self.gets.clone();
            self.memory
                .get_or_fetch(&format!("{}#{tag}", seg.key), move || async move {
                    let _permit = gets.acquire_owned().await;
                    store.get_range(&topic, &key, part.range()).await
                })
        });
        let what = seg.key.clone();
        async move {
            let Some(fetched) = fetched else {
                return Ok(Bytes::new());
            };
            let entry = fetched
                .await
                .map_err(|e| StoreError::Request(format!("remote index of {what}: {e}")))?;
            Ok(entry.value().clone())
        }
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
        let h: &[u8; HEADER_LEN] = h[..]
            .try_into()
            .map_err(|_| corrupt_header(position, seg))?;
        BatchPos::parse(h, position, log_end)
            .map(Some)
            .ok_or_else(|| corrupt_header(position, seg))
    }

    /// Whole batches from the one holding `offset`, at most `max_bytes` unless `min_one` and
    /// the first batch alone is larger. Empty when `offset` is past the segment. `next` is the
    /// segment after this one, if any: read-ahead that runs past this segment's end goes on
    /// into it, so a sequential consumer does not wait for a GET at each segment boundary.
    ///
    /// As a local segment read: the offset index gives the position to scan from for the
    /// first batch and then the last batch start within the budget (every entry is a batch
    /// start), so only the batches past the last entry have their headers read. The chunks
    /// of the budget are read in parallel, and the answer is pieces of them: slices of chunks
    /// in memory, ranges of disk-tier files. No record is copied.
    pub async fn read(
        &self,
        topic: &str,
        seg: &RemoteSegment,
        offset: i64,
        max_bytes: usize,
        min_one: bool,
        next: Option<&RemoteSegment>,
    ) -> Result<RemoteRecords, StoreError> {
        const SCAN_SLACK: u64 = 64 << 10;
        let started = Instant::now();
        let index = self.index(topic, seg, seg.offset_index, "oidx").await?;
        let entry = |i: usize| {
            let e = &index[i * OFFSET_ENTRY..(i + 1) * OFFSET_ENTRY];
            let rel = u32::from_be_bytes(e[0..4].try_into().unwrap_or_default()) as i64;
            let pos = u32::from_be_bytes(e[4..8].try_into().unwrap_or_default()) as u64;
            (rel, pos)
        };
        let entries = index.len() / OFFSET_ENTRY;
        // The last entry whose relative offset is <= the target.
        let relative = offset.saturating_sub(seg.base_offset);
        // The number of leading entries for which `pred` holds (they are sorted by both
        // offset and position).
        let count = |pred: &dyn Fn((i64, u64)) -> bool| {
            let (mut lo, mut hi) = (0usize, entries);
            while lo < hi {
                let mid = (lo + hi) / 2;
                if pred(entry(mid)) {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            lo
        };
        let at = count(&|(rel, _)| rel <= relative);
        let mut pos = if at == 0 { 0 } else { entry(at - 1).1 };
        let log_end = seg.log.end;
        let budget = max_bytes as u64;
        let mut window: Option<Window> = None;
        let mut headers = HeaderScan::new();
        // The size of the batch at `pos` and its last offset, reading the chunks from `pos`
        // to the end of the budget when the window does not hold its header.
        let mut header = async |pos: u64, window: &mut Option<Window>| {
            let h_end = pos + HEADER_LEN as u64;
            if !window.as_ref().is_some_and(|w| w.covers(pos, h_end)) {
                let end = (pos + budget + SCAN_SLACK).clamp(h_end, log_end);
                *window = Some(self.window(topic, seg, pos, end).await?);
            }
            let w = window.as_ref().expect("a window");
            let h = headers
                .header(w, pos, w.end().min(log_end))
                .map_err(|e| io_error(&seg.key, e))?;
            let b = BatchPos::parse(&h, pos, log_end).ok_or_else(|| corrupt_header(pos, seg))?;
            headers.last_size = b.size;
            Ok::<_, StoreError>((b.size, b.last_offset))
        };
        // The first batch: the one holding `offset`.
        let (first, first_size) = loop {
            if pos + HEADER_LEN as u64 > log_end {
                return Ok(RemoteRecords::default());
            }
            let (size, last_offset) = header(pos, &mut window).await?;
            if last_offset >= offset {
                break (pos, size);
            }
            pos += size;
        };
        if first_size > budget && !min_one {
            return Ok(RemoteRecords::default());
        }
        // Up to the last indexed batch start within the budget, then whole batches while
        // they fit.
        let allowed = (first + budget).min(log_end);
        let last_start = count(&|(_, p)| p <= allowed);
        let mut end = first + first_size;
        if last_start > 0 {
            end = end.max(entry(last_start - 1).1.min(allowed));
        }
        while end + HEADER_LEN as u64 <= log_end {
            let (size, _) = header(end, &mut window).await?;
            if end + size - first > budget {
                break;
            }
            end += size;
        }
        let window = match window {
            Some(w) if w.covers(first, end) => w,
            _ => self.window(topic, seg, first, end).await?,
        };
        let out = RemoteRecords {
            pieces: window.pieces(first, end),
        };
        self.prefetch(topic, seg, end, next);
        self.metrics.reads.fetch_add(1, Ordering::Relaxed);
        self.metrics
            .read_micros_total
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        Ok(out)
    }

    /// Starts background reads of the `readahead` chunks after `position` (read-ahead) that
    /// are neither in memory nor on disk; those past the end of `seg`'s log come from the start
    /// of `next`'s, with its offset index. Each read runs in a task of its own (see
    /// [`Self::fetch`]), so nothing here is awaited.
    fn prefetch(
        &self,
        topic: &str,
        seg: &RemoteSegment,
        position: u64,
        next: Option<&RemoteSegment>,
    ) {
        if self.readahead == 0 {
            return;
        }
        let mut left = self.readahead as u64 + 1;
        if position < seg.log.end {
            let first = position / self.chunk_size;
            let last = ((seg.log.end - 1) / self.chunk_size).min(first + self.readahead as u64);
            self.prefetch_chunks(topic, seg, first..=last);
            left -= last - first + 1;
        }
        let Some(next) = next.filter(|n| left > 0 && n.log.end > 0) else {
            return;
        };
        // A hit, or a GET the cache runs in a task of its own: the answer is not needed.
        drop(self.index(topic, next, next.offset_index, "oidx"));
        let last = ((next.log.end - 1) / self.chunk_size).min(left - 1);
        self.prefetch_chunks(topic, next, 0..=last);
    }

    fn prefetch_chunks(
        &self,
        topic: &str,
        seg: &RemoteSegment,
        chunks: std::ops::RangeInclusive<u64>,
    ) {
        for i in chunks {
            let cache_key = format!("{}@{i}", seg.key);
            if self.memory.contains(&cache_key)
                || self.disk.as_ref().is_some_and(|d| d.contains(&cache_key))
            {
                continue;
            }
            let start = i * self.chunk_size;
            let end = (start + self.chunk_size).min(seg.object_size());
            // The GET and the queueing for the disk tier run in their own task.
            drop(self.fetch(topic, seg, cache_key, (start, end), None));
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
                let got = read_bytes(&reader, &seg, target, 1, true).await;
                assert_eq!(&got[..], &bytes[..], "batch at {offset}");
                let got = read_bytes(&reader, &seg, target, 35_000, false).await;
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
            .read("t", &seg, files.next_offset, 1000, true, None)
            .await
            .unwrap()
            .is_empty());
        assert!(
            reader
                .read("t", &seg, 150, 1000, false, None)
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
    /// is fetched from the store or written to disk again, memory holds no chunk, and the
    /// answers are ranges of the disk tier's files (sent with `sendfile`), not copies.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rereading_more_than_memory_is_served_from_disk_tier_files() {
        const MEMORY: usize = 4 << 20;
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(RemoteStore::in_memory());
        // ~16 MiB: 250 chunks of 64 KiB, four times what memory holds.
        let (files, batches, seg) =
            uploaded(&store, dir.path(), (0, 1600, 5), UploadOptions::default()).await;
        let reader = reader(&store, dir.path(), MEMORY, 64 << 20).await;
        let disk = reader.disk_tier().unwrap().clone();
        // Every answer's batches, checked against what was written; counts the answers'
        // pieces that were file ranges.
        // `pace`: wait for the chunk writer after each read, so that memory (a sixteenth of
        // the segment) does not evict a chunk before it is written.
        let (reader, seg, files, batches) = (&reader, &seg, &files, &batches);
        let read_all = |pace: bool| async move {
            let (mut offset, mut file_pieces, mut pieces) = (0, 0, 0);
            while offset < files.next_offset {
                let got = reader
                    .read("t", seg, offset, 100_000, true, None)
                    .await
                    .unwrap();
                if pace {
                    reader.writes_done().await;
                }
                assert!(!got.is_empty(), "a batch at {offset}");
                pieces += got.pieces.len();
                file_pieces += got
                    .pieces
                    .iter()
                    .filter(|p| matches!(p, Piece::File(_)))
                    .count();
                let got = got.into_bytes().unwrap();
                let mut at = 0;
                while at < got.len() {
                    let len = i32::from_be_bytes(got[at + 8..at + 12].try_into().unwrap());
                    let k = (offset / 5) as usize;
                    assert_eq!(&got[at..at + 12 + len as usize], &batches[k].1[..]);
                    at += 12 + len as usize;
                    offset += 5;
                }
            }
            (file_pieces, pieces)
        };
        let settled = || async {
            // Read-ahead tasks finish, then the writer.
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            reader.writes_done().await;
            disk.metrics.bytes_written.load(Ordering::Relaxed)
        };
        read_all(true).await;
        let fetched = reader.metrics.chunk_gets();
        let written = settled().await;
        assert!(
            written >= seg.log.end,
            "every chunk went to disk: {written}"
        );
        assert_eq!(disk.metrics.unwritten.load(Ordering::Relaxed), 0);
        for _ in 0..3 {
            let (file_pieces, pieces) = read_all(false).await;
            assert_eq!(
                file_pieces, pieces,
                "every answer is a range of a chunk file"
            );
        }
        assert_eq!(
            reader.metrics.chunk_gets(),
            fetched,
            "reading again fetches nothing"
        );
        assert_eq!(settled().await, written, "nor writes anything to disk");
        assert!(
            reader.memory.usage() < 4 * (64 << 10),
            "memory holds the index, not the chunks on disk: {} bytes",
            reader.memory.usage()
        );
    }

    /// The chunk writer moves a chunk from memory to a file, and counts one that memory
    /// evicted before it got to it instead of writing anything.
    #[test]
    fn the_chunk_writer_moves_chunks_from_memory_and_counts_those_it_missed() {
        let dir = tempfile::tempdir().unwrap();
        let disk = Arc::new(DiskTier::open(dir.path(), 64 << 20).unwrap());
        let memory: Cache<String, Bytes> = CacheBuilder::new(16 << 20).build();
        let writer = ChunkWriter::start(disk.clone(), memory.clone()).unwrap();
        let payload = Bytes::from(vec![7u8; 100_000]);
        memory.insert("seg@0".to_string(), payload.clone());
        writer.enqueue("seg@0".to_string());
        // Evicted (here: removed) before the writer reached it.
        writer.enqueue("seg@1".to_string());
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        while !writer.idle() {
            assert!(Instant::now() < deadline, "the writer finishes");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let file = disk.get("seg@0", payload.len() as u64).expect("written");
        assert_eq!(file.read().unwrap(), payload.to_vec());
        assert!(memory.get("seg@0").is_none(), "and dropped from memory");
        assert!(!disk.contains("seg@1"));
        assert_eq!(disk.metrics.unwritten.load(Ordering::Relaxed), 1);
        assert_eq!(disk.metrics.files_written.load(Ordering::Relaxed), 1);
    }

    /// Waits until `done` holds, failing after 20 s with `what` (work of background tasks).
    async fn eventually(what: &str, done: impl Fn() -> bool) {
        let deadline = Instant::now() + std::time::Duration::from_secs(20);
        while !done() {
            assert!(Instant::now() < deadline, "not so after 20 s: {what}");
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }

    /// Reading the end of a segment reads ahead into the start of the next one (its offset
    /// index and first chunks), so the first read there needs no GET of its own.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn read_ahead_runs_on_into_the_next_segment() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(RemoteStore::in_memory());
        let (a_dir, b_dir) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::create_dir_all(&a_dir).unwrap();
        std::fs::create_dir_all(&b_dir).unwrap();
        let (a_files, _, a) = uploaded(&store, &a_dir, (0, 100, 5), UploadOptions::default()).await;
        let (_, b_batches, b) = uploaded(
            &store,
            &b_dir,
            (a_files.next_offset, 100, 5),
            UploadOptions::default(),
        )
        .await;
        // Two chunks of read-ahead, memory only.
        let reader = reader(&store, dir.path(), 16 << 20, 0).await;
        let last = reader
            .read("t", &a, a_files.next_offset - 1, 1, true, Some(&b))
            .await
            .unwrap();
        assert!(!last.is_empty());
        let wanted = [
            format!("{}#oidx", b.key),
            format!("{}@0", b.key),
            format!("{}@1", b.key),
            format!("{}@2", b.key),
        ];
        eventually("the next segment was read ahead", || {
            wanted.iter().all(|k| reader.memory.contains(k))
        })
        .await;
        // The chunk holding the position (b's first) and two more, as within a segment.
        assert!(
            !reader.memory.contains(&format!("{}@3", b.key)),
            "only two chunks ahead"
        );
        let requests = store.metrics.total_requests();
        let got = reader
            .read("t", &b, b.base_offset, 1, true, None)
            .await
            .unwrap()
            .into_bytes()
            .unwrap();
        assert_eq!(&got[..], &b_batches[0].1[..]);
        assert_eq!(
            store.metrics.total_requests(),
            requests,
            "no GET of its own"
        );
    }

    /// A sequential read counts apart what it fetched itself and what read-ahead fetched for
    /// it: only the first read's chunks are its own misses; every other chunk was read ahead,
    /// once, and the reads that found it count as hits.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_sequential_read_misses_only_its_first_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(RemoteStore::in_memory());
        let (files, batches, seg) =
            uploaded(&store, dir.path(), (0, 100, 5), UploadOptions::default()).await;
        let chunks = seg.log.end.div_ceil(64 << 10);
        assert!(chunks >= 4, "{chunks} chunks");
        let reader = reader(&store, dir.path(), 16 << 20, 0).await;
        let mut offset = 0;
        while offset < files.next_offset {
            let got = read_bytes(&reader, &seg, offset, 20_000, true).await;
            let k = (offset / 5) as usize;
            assert_eq!(&got[..batches[k].1.len()], &batches[k].1[..]);
            offset += 5 * (got.len() / batches[k].1.len()) as i64;
        }
        let m = &reader.metrics;
        eventually("every chunk fetched", || m.chunk_gets() == chunks).await;
        // The first read's window (its 20,000 bytes and 64 KiB to scan headers in) spans
        // chunks 0 and 1.
        assert_eq!(m.chunk_misses.load(Ordering::Relaxed), 2);
        assert_eq!(m.readahead_gets.load(Ordering::Relaxed), chunks - 2);
        assert!(m.chunk_hits.load(Ordering::Relaxed) >= chunks - 2);
    }

    /// A read dropped while its GET is in flight (a fetch that ran out of its wait): the
    /// chunk still reaches the disk tier, as if the read had waited.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_chunk_whose_read_was_dropped_still_reaches_the_disk_tier() {
        use std::time::Duration;
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(RemoteStore::in_memory());
        let (_, batches, seg) =
            uploaded(&store, dir.path(), (0, 100, 5), UploadOptions::default()).await;
        let reader = reader(&store, dir.path(), 16 << 20, 64 << 20).await;
        // The index GET ends at 1 s, the chunk's at 2 s; the read is dropped in between.
        store.faults.set_latency(Duration::from_secs(1));
        let dropped = tokio::time::timeout(
            Duration::from_millis(1500),
            reader.read("t", &seg, 0, 1000, true, None),
        )
        .await;
        assert!(
            dropped.is_err(),
            "the read was dropped during the chunk's GET"
        );
        store.faults.set_latency(Duration::ZERO);
        let disk = reader.disk_tier().unwrap();
        let key = format!("{}@0", seg.key);
        eventually("the chunk was written", || disk.contains(&key)).await;
        assert_eq!(disk.metrics.unwritten.load(Ordering::Relaxed), 0);
        // And the next read of it is answered from its file, not by a second GET (which
        // would answer from memory).
        let got = reader.read("t", &seg, 0, 1, true, None).await.unwrap();
        assert!(
            got.pieces.iter().all(|p| matches!(p, Piece::File(_))),
            "answered from the chunk's file"
        );
        assert_eq!(&got.into_bytes().unwrap()[..], &batches[0].1[..]);
    }

    /// A disk tier that cannot take chunks (its directory gone, as a full or failed disk
    /// would refuse them): reads are answered from memory, and the failures are counted.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failing_disk_tier_leaves_reads_to_memory() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(RemoteStore::in_memory());
        let (files, batches, seg) =
            uploaded(&store, dir.path(), (0, 100, 5), UploadOptions::default()).await;
        let reader = reader(&store, dir.path(), 16 << 20, 64 << 20).await;
        std::fs::remove_dir_all(dir.path().join("cache")).unwrap();
        for pass in 0..2 {
            let mut offset = 0;
            while offset < files.next_offset {
                let got = read_bytes(&reader, &seg, offset, 100_000, true).await;
                let k = (offset / 5) as usize;
                assert_eq!(&got[..batches[k].1.len()], &batches[k].1[..], "pass {pass}");
                offset += 5 * (got.len() / batches[k].1.len()) as i64;
            }
        }
        reader.writes_done().await;
        let disk = reader.disk_tier().unwrap();
        assert!(disk.metrics.write_errors.load(Ordering::Relaxed) > 0);
        let misses = reader.metrics.chunk_gets();
        assert!(
            misses <= (seg.object_size() / (64 << 10) + 1),
            "the second pass was served from memory: {misses} GETs"
        );
    }

    async fn read_bytes(
        reader: &RemoteReader,
        seg: &RemoteSegment,
        offset: i64,
        max_bytes: usize,
        min_one: bool,
    ) -> Bytes {
        reader
            .read("t", seg, offset, max_bytes, min_one, None)
            .await
            .unwrap()
            .into_bytes()
            .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reads_whole_batches_across_chunks_memory_cache() {
        check_reads(false, false).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reads_whole_batches_across_chunks_disk_tier_multipart() {
        check_reads(true, true).await;
    }
}
