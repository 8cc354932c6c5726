//! Object store access: one [`RemoteStore`] over `object_store` for S3 and S3-compatible
//! servers, the local filesystem (the embedded default) and memory (unit tests).
//!
//! Everything above this module talks in keys relative to the configured prefix. The store
//! counts every request by operation and by topic (so users can see their request cost), and
//! can inject faults (errors, latency, outages) for tests of the upload and read paths.
//!
//! Conditional writes (invariant 3 of the design: commit the manifest with a PUT conditional
//! on its ETag) use `PutMode::Create` / `PutMode::Update`. S3, MinIO and moto implement both;
//! `LocalFileSystem` implements only `Create`, so for it the compare-and-swap is done under a
//! process-wide lock (HEAD, compare the ETag, overwrite by atomic rename). That is exact for
//! one broker process per directory, which is what a filesystem store is for.

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    ObjectStore, ObjectStoreExt, PutMode, PutMultipartOptions, PutOptions, PutPayload,
    UpdateVersion,
};

/// Where the tiered data lives and how to reach it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreConfig {
    /// `file:///abs/dir`, `s3://bucket[/prefix]` or `memory://`.
    pub url: String,
    /// S3 endpoint for S3-compatible servers (MinIO, moto, ...); AWS when unset.
    pub endpoint: Option<String>,
    pub region: Option<String>,
    /// Path-style requests (`endpoint/bucket/key`), which most S3-compatible servers need.
    pub path_style: bool,
    /// Static credentials; when unset the usual AWS sources apply (environment, profile,
    /// instance metadata).
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    /// Retries of one request on transient errors (object_store's backoff) before the caller
    /// sees the error.
    pub max_retries: usize,
    /// Upper bound on one request including its retries.
    pub request_timeout: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("invalid object store configuration: {0}")]
    Config(String),
    #[error("object {0} not found")]
    NotFound(String),
    #[error("conditional write of {0} lost a race")]
    Conflict(String),
    #[error("object store request failed: {0}")]
    Request(String),
    #[error("injected fault: {0}")]
    Injected(String),
}

impl StoreError {
    fn from_os(key: &str, e: object_store::Error) -> StoreError {
        match e {
            object_store::Error::NotFound { .. } => StoreError::NotFound(key.to_string()),
            object_store::Error::Precondition { .. }
            | object_store::Error::AlreadyExists { .. } => StoreError::Conflict(key.to_string()),
            other => StoreError::Request(other.to_string()),
        }
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

/// Request kinds counted by [`StoreMetrics`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    Put,
    MultipartPart,
    Get,
    Head,
    Delete,
    List,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Put => "put",
            Op::MultipartPart => "multipart_part",
            Op::Get => "get",
            Op::Head => "head",
            Op::Delete => "delete",
            Op::List => "list",
        }
    }
}

/// Request and byte counters. Topic `""` is used for cluster-level objects.
#[derive(Debug, Default)]
pub struct StoreMetrics {
    requests: Mutex<HashMap<(String, Op), u64>>,
    pub errors: AtomicU64,
    pub bytes_uploaded: AtomicU64,
    pub bytes_downloaded: AtomicU64,
}

impl StoreMetrics {
    fn count(&self, topic: &str, op: Op) {
        let mut m = self.requests.lock().unwrap_or_else(|e| e.into_inner());
        *m.entry((topic.to_string(), op)).or_insert(0) += 1;
    }

    /// (topic, operation, count), sorted.
    pub fn requests(&self) -> Vec<(String, Op, u64)> {
        let m = self.requests.lock().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<_> = m.iter().map(|((t, o), n)| (t.clone(), *o, *n)).collect();
        v.sort();
        v
    }

    pub fn total_requests(&self) -> u64 {
        let m = self.requests.lock().unwrap_or_else(|e| e.into_inner());
        m.values().sum()
    }
}

/// Faults injected before requests reach the store (tests only, but compiled always so
/// integration tests of the broker can use them too).
#[derive(Debug, Default)]
pub struct Faults {
    state: Mutex<FaultState>,
}

#[derive(Debug, Default)]
struct FaultState {
    /// Fail every request while set.
    outage: bool,
    /// Fail the next n requests of this kind.
    fail_next: HashMap<Op, u32>,
    /// Fail requests (of one kind, or all) whose key contains this text.
    fail_keys: Vec<(Option<Op>, String)>,
    latency: Duration,
}

impl Faults {
    pub fn set_outage(&self, on: bool) {
        self.lock().outage = on;
    }
    pub fn fail_next(&self, op: Op, n: u32) {
        self.lock().fail_next.insert(op, n);
    }
    pub fn fail_keys_containing(&self, text: &str) {
        self.lock().fail_keys.push((None, text.to_string()));
    }
    /// Fails requests of kind `op` whose key contains `text` (e.g. only manifest PUTs).
    pub fn fail_op_on_keys_containing(&self, op: Op, text: &str) {
        self.lock().fail_keys.push((Some(op), text.to_string()));
    }
    pub fn clear(&self) {
        *self.lock() = FaultState::default();
    }
    pub fn set_latency(&self, latency: Duration) {
        self.lock().latency = latency;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FaultState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn check(&self, op: Op, key: &str) -> StoreResult<()> {
        let latency = {
            let mut s = self.lock();
            if s.outage {
                return Err(StoreError::Injected(format!(
                    "outage ({} {key})",
                    op.name()
                )));
            }
            if let Some(n) = s.fail_next.get_mut(&op) {
                if *n > 0 {
                    *n -= 1;
                    return Err(StoreError::Injected(format!("{} {key}", op.name())));
                }
            }
            if s.fail_keys
                .iter()
                .any(|(o, t)| o.is_none_or(|o| o == op) && key.contains(t.as_str()))
            {
                return Err(StoreError::Injected(format!("{} {key}", op.name())));
            }
            s.latency
        };
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    S3,
    Local,
    Memory,
}

/// An object listed by [`RemoteStore::list`].
#[derive(Debug, Clone)]
pub struct Listed {
    pub key: String,
    pub size: u64,
    pub last_modified_ms: i64,
}

/// Serialises the emulated compare-and-swap of filesystem stores (see [`RemoteStore::put_if`]).
static LOCAL_CAS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub struct RemoteStore {
    inner: Arc<dyn ObjectStore>,
    backend: Backend,
    prefix: String,
    description: String,
    pub metrics: Arc<StoreMetrics>,
    pub faults: Arc<Faults>,
}

impl fmt::Debug for RemoteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.description)
    }
}

impl fmt::Display for RemoteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.description)
    }
}

impl RemoteStore {
    pub fn open(cfg: &StoreConfig) -> StoreResult<RemoteStore> {
        let url = cfg.url.trim();
        if let Some(rest) = url.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(StoreError::Config(format!("no bucket in '{url}'")));
            }
            // Objects are typed: segment bundles `binary/octet-stream`, S3's own type for
            // untyped objects, manifests JSON. S3-compatible servers that compress what they
            // cannot type would otherwise spend their reads decompressing segment bundles
            // (SeaweedFS gzips an untyped or `application/octet-stream` upload that looks
            // compressible, then serves ranged GETs of it at 20-80 MB/s instead of ~500).
            let client = object_store::ClientOptions::new()
                .with_default_content_type("binary/octet-stream")
                .with_content_type_for_suffix("json", "application/json");
            let mut b = AmazonS3Builder::from_env()
                .with_client_options(client)
                .with_bucket_name(bucket)
                .with_retry(object_store::RetryConfig {
                    max_retries: cfg.max_retries,
                    retry_timeout: cfg.request_timeout,
                    ..Default::default()
                })
                .with_virtual_hosted_style_request(!cfg.path_style);
            if let Some(region) = &cfg.region {
                b = b.with_region(region);
            }
            if let Some(endpoint) = &cfg.endpoint {
                b = b
                    .with_endpoint(endpoint)
                    .with_allow_http(endpoint.starts_with("http://"));
            }
            if let Some(k) = &cfg.access_key_id {
                b = b.with_access_key_id(k);
            }
            if let Some(s) = &cfg.secret_access_key {
                b = b.with_secret_access_key(s);
            }
            let store = b.build().map_err(|e| StoreError::Config(e.to_string()))?;
            Ok(Self::new(Arc::new(store), Backend::S3, prefix, url))
        } else if let Some(dir) = url.strip_prefix("file://") {
            if !dir.starts_with('/') {
                return Err(StoreError::Config(format!(
                    "'{url}': a file:// store needs an absolute path"
                )));
            }
            std::fs::create_dir_all(dir)
                .map_err(|e| StoreError::Config(format!("cannot create {dir}: {e}")))?;
            let store = LocalFileSystem::new_with_prefix(dir)
                .map_err(|e| StoreError::Config(e.to_string()))?
                .with_automatic_cleanup(true);
            Ok(Self::new(Arc::new(store), Backend::Local, "", url))
        } else if url == "memory://" || url == "memory:" {
            Ok(Self::in_memory())
        } else {
            Err(StoreError::Config(format!(
                "unsupported object store URL '{url}' (use s3://bucket/prefix, file:///dir or memory://)"
            )))
        }
    }

    pub fn in_memory() -> RemoteStore {
        Self::new(Arc::new(InMemory::new()), Backend::Memory, "", "memory://")
    }

    fn new(inner: Arc<dyn ObjectStore>, backend: Backend, prefix: &str, url: &str) -> Self {
        RemoteStore {
            inner,
            backend,
            prefix: prefix.trim_matches('/').to_string(),
            description: url.to_string(),
            metrics: Arc::new(StoreMetrics::default()),
            faults: Arc::new(Faults::default()),
        }
    }

    fn path(&self, key: &str) -> Path {
        if self.prefix.is_empty() {
            Path::from(key)
        } else {
            Path::from(format!("{}/{key}", self.prefix))
        }
    }

    async fn before(&self, topic: &str, op: Op, key: &str) -> StoreResult<()> {
        self.metrics.count(topic, op);
        let r = self.faults.check(op, key).await;
        if r.is_err() {
            self.metrics.errors.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    fn failed<T>(&self, key: &str, r: Result<T, object_store::Error>) -> StoreResult<T> {
        r.map_err(|e| {
            if !matches!(e, object_store::Error::NotFound { .. }) {
                self.metrics.errors.fetch_add(1, Ordering::Relaxed);
            }
            StoreError::from_os(key, e)
        })
    }

    /// Writes an object in one request. Data objects have unique keys, so this never replaces
    /// anything that matters.
    pub async fn put(&self, topic: &str, key: &str, payload: PutPayload) -> StoreResult<()> {
        self.before(topic, Op::Put, key).await?;
        let len = payload.content_length() as u64;
        let r = self.inner.put(&self.path(key), payload).await;
        self.failed(key, r)?;
        self.metrics
            .bytes_uploaded
            .fetch_add(len, Ordering::Relaxed);
        Ok(())
    }

    /// Writes an object as a multipart upload of the given parts (each but the last at least
    /// 5 MiB for S3). Aborts the upload on failure so no parts linger.
    pub async fn put_multipart(
        &self,
        topic: &str,
        key: &str,
        parts: Vec<Bytes>,
    ) -> StoreResult<()> {
        self.before(topic, Op::Put, key).await?;
        let path = self.path(key);
        let r = self
            .inner
            .put_multipart_opts(&path, PutMultipartOptions::default())
            .await;
        let mut upload = self.failed(key, r)?;
        for part in parts {
            let len = part.len() as u64;
            if let Err(e) = self.before(topic, Op::MultipartPart, key).await {
                let _ = upload.abort().await;
                return Err(e);
            }
            if let Err(e) = upload.put_part(PutPayload::from(part)).await {
                let _ = upload.abort().await;
                return self.failed(key, Err(e));
            }
            self.metrics
                .bytes_uploaded
                .fetch_add(len, Ordering::Relaxed);
        }
        let r = upload.complete().await;
        self.failed(key, r)?;
        Ok(())
    }

    /// Writes a local file as one object without holding it in memory: one PUT when it fits
    /// in `part_size`, else a multipart upload reading one part at a time. Returns its size.
    pub async fn put_file(
        &self,
        topic: &str,
        key: &str,
        file: &std::path::Path,
        part_size: usize,
    ) -> StoreResult<u64> {
        use tokio::io::AsyncReadExt;
        let io_err = |e: std::io::Error| StoreError::Request(format!("{}: {e}", file.display()));
        let mut f = tokio::fs::File::open(file).await.map_err(io_err)?;
        let size = f.metadata().await.map_err(io_err)?.len();
        let part_size = part_size.max(5 << 20);
        let read_part = async |f: &mut tokio::fs::File| -> StoreResult<Bytes> {
            let mut buf = Vec::with_capacity(part_size);
            (&mut *f)
                .take(part_size as u64)
                .read_to_end(&mut buf)
                .await
                .map_err(io_err)?;
            Ok(Bytes::from(buf))
        };
        if size <= part_size as u64 {
            let data = read_part(&mut f).await?;
            self.put(topic, key, PutPayload::from(data)).await?;
            return Ok(size);
        }
        self.before(topic, Op::Put, key).await?;
        let r = self
            .inner
            .put_multipart_opts(&self.path(key), PutMultipartOptions::default())
            .await;
        let mut upload = self.failed(key, r)?;
        let mut sent = 0u64;
        while sent < size {
            let part = match read_part(&mut f).await {
                Ok(p) if !p.is_empty() => p,
                Ok(_) => break,
                Err(e) => {
                    let _ = upload.abort().await;
                    return Err(e);
                }
            };
            let len = part.len() as u64;
            if let Err(e) = self.before(topic, Op::MultipartPart, key).await {
                let _ = upload.abort().await;
                return Err(e);
            }
            if let Err(e) = upload.put_part(PutPayload::from(part)).await {
                let _ = upload.abort().await;
                return self.failed(key, Err(e));
            }
            sent += len;
            self.metrics
                .bytes_uploaded
                .fetch_add(len, Ordering::Relaxed);
        }
        let r = upload.complete().await;
        self.failed(key, r)?;
        Ok(sent)
    }

    /// Reads `range` of an object.
    pub async fn get_range(&self, topic: &str, key: &str, range: Range<u64>) -> StoreResult<Bytes> {
        self.before(topic, Op::Get, key).await?;
        let r = self.inner.get_range(&self.path(key), range).await;
        let b = self.failed(key, r)?;
        self.metrics
            .bytes_downloaded
            .fetch_add(b.len() as u64, Ordering::Relaxed);
        Ok(b)
    }

    /// Reads a whole object with its ETag; `None` when it does not exist.
    pub async fn get(
        &self,
        topic: &str,
        key: &str,
    ) -> StoreResult<Option<(Bytes, Option<String>)>> {
        self.before(topic, Op::Get, key).await?;
        let r = self.inner.get(&self.path(key)).await;
        let got = match r {
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            other => self.failed(key, other)?,
        };
        let e_tag = got.meta.e_tag.clone();
        let r = got.bytes().await;
        let b = self.failed(key, r)?;
        self.metrics
            .bytes_downloaded
            .fetch_add(b.len() as u64, Ordering::Relaxed);
        Ok(Some((b, e_tag)))
    }

    /// Compare-and-swap write: creates the object when `expected` is `None` (fails if it
    /// exists), else replaces it only if its ETag is still `expected`. Returns the new ETag.
    pub async fn put_if(
        &self,
        topic: &str,
        key: &str,
        data: Bytes,
        expected: Option<&str>,
    ) -> StoreResult<Option<String>> {
        self.before(topic, Op::Put, key).await?;
        let path = self.path(key);
        let len = data.len() as u64;
        let result = if self.backend == Backend::Local {
            // Emulated: serialise all conditional writes of this process. The lock is shared by
            // every store of the process, not one per `RemoteStore`: brokers started in one
            // process (the cluster tests) each open their own store on the same directory, and
            // a check-then-write per store would let two of them both win a compare-and-swap.
            // (Separate processes sharing a file:// bucket are not serialised.)
            let _guard = LOCAL_CAS.lock().await;
            let current = match self.inner.head(&path).await {
                Ok(meta) => Some(meta.e_tag),
                Err(object_store::Error::NotFound { .. }) => None,
                Err(e) => return self.failed(key, Err(e)),
            };
            let matches = match (expected, &current) {
                (None, None) => true,
                (Some(want), Some(Some(have))) => want == have,
                _ => false,
            };
            if !matches {
                return Err(StoreError::Conflict(key.to_string()));
            }
            self.inner.put(&path, PutPayload::from(data)).await
        } else {
            let mode = match expected {
                None => PutMode::Create,
                Some(e) => PutMode::Update(UpdateVersion {
                    e_tag: Some(e.to_string()),
                    version: None,
                }),
            };
            let opts = PutOptions {
                mode,
                ..Default::default()
            };
            self.inner
                .put_opts(&path, PutPayload::from(data), opts)
                .await
        };
        let put = self.failed(key, result)?;
        self.metrics
            .bytes_uploaded
            .fetch_add(len, Ordering::Relaxed);
        Ok(put.e_tag)
    }

    /// Deletes an object; deleting a missing object succeeds.
    pub async fn delete(&self, topic: &str, key: &str) -> StoreResult<()> {
        self.before(topic, Op::Delete, key).await?;
        match self.inner.delete(&self.path(key)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => self.failed(key, Err(e)),
        }
    }

    /// Lists objects under `prefix` (relative keys). Used only by the scrubber and tools:
    /// recovery never needs to list.
    pub async fn list(&self, topic: &str, prefix: &str) -> StoreResult<Vec<Listed>> {
        self.before(topic, Op::List, prefix).await?;
        let base = self.path(prefix.trim_end_matches('/'));
        let r: Result<Vec<_>, _> = self.inner.list(Some(&base)).try_collect().await;
        let metas = self.failed(prefix, r)?;
        let strip = if self.prefix.is_empty() {
            0
        } else {
            self.prefix.len() + 1
        };
        Ok(metas
            .into_iter()
            .map(|m| Listed {
                key: m.location.as_ref()[strip..].to_string(),
                size: m.size,
                last_modified_ms: m.last_modified.timestamp_millis(),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn cas_roundtrip(store: &RemoteStore) {
        let e1 = store
            .put_if("t", "a/m.json", Bytes::from_static(b"1"), None)
            .await
            .unwrap();
        assert!(matches!(
            store
                .put_if("t", "a/m.json", Bytes::from_static(b"x"), None)
                .await,
            Err(StoreError::Conflict(_))
        ));
        let e1 = e1.expect("etag");
        let e2 = store
            .put_if("t", "a/m.json", Bytes::from_static(b"2"), Some(&e1))
            .await
            .unwrap()
            .expect("etag");
        assert!(matches!(
            store
                .put_if("t", "a/m.json", Bytes::from_static(b"3"), Some(&e1))
                .await,
            Err(StoreError::Conflict(_))
        ));
        let (data, etag) = store.get("t", "a/m.json").await.unwrap().unwrap();
        assert_eq!(&data[..], b"2");
        assert_eq!(etag.as_deref(), Some(e2.as_str()));
        assert!(store.get("t", "missing").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn memory_store_compare_and_swap() {
        cas_roundtrip(&RemoteStore::in_memory()).await;
    }

    #[tokio::test]
    async fn local_store_compare_and_swap_and_ranges() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("file://{}", dir.path().display());
        let store = RemoteStore::open(&StoreConfig {
            url,
            ..Default::default()
        })
        .unwrap();
        cas_roundtrip(&store).await;
        store
            .put(
                "t",
                "x/seg",
                PutPayload::from(Bytes::from_static(b"0123456789")),
            )
            .await
            .unwrap();
        let r = store.get_range("t", "x/seg", 2..5).await.unwrap();
        assert_eq!(&r[..], b"234");
        let keys: Vec<String> = store
            .list("t", "x")
            .await
            .unwrap()
            .into_iter()
            .map(|l| l.key)
            .collect();
        assert_eq!(keys, vec!["x/seg".to_string()]);
        store.delete("t", "x/seg").await.unwrap();
        store.delete("t", "x/seg").await.unwrap();
        assert!(store.list("t", "x").await.unwrap().is_empty());
    }

    /// Brokers in one process each open their own store on a shared directory: a conditional
    /// write still has exactly one winner.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn local_stores_on_one_directory_share_the_compare_and_swap() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("file://{}", dir.path().display());
        let open = || {
            RemoteStore::open(&StoreConfig {
                url: url.clone(),
                ..Default::default()
            })
            .unwrap()
        };
        let first = open();
        first
            .put_if("t", "m.json", Bytes::from_static(b"0"), None)
            .await
            .unwrap();
        let stores: Vec<RemoteStore> = (0..8).map(|_| open()).collect();
        for round in 0..10 {
            let (_, e_tag) = first.get("t", "m.json").await.unwrap().unwrap();
            let e_tag = e_tag.unwrap();
            let wins = futures::future::join_all(stores.iter().enumerate().map(|(i, s)| {
                let e_tag = e_tag.clone();
                async move {
                    s.put_if(
                        "t",
                        "m.json",
                        Bytes::from(format!("{round}-{i}")),
                        Some(&e_tag),
                    )
                    .await
                }
            }))
            .await
            .into_iter()
            .filter(|r| r.is_ok())
            .count();
            assert_eq!(
                wins, 1,
                "round {round}: {wins} writers won one compare-and-swap"
            );
        }
    }

    #[tokio::test]
    async fn faults_fail_requests_and_are_counted() {
        let store = RemoteStore::in_memory();
        store.faults.fail_next(Op::Put, 1);
        assert!(matches!(
            store
                .put("t", "k", PutPayload::from(Bytes::from_static(b"v")))
                .await,
            Err(StoreError::Injected(_))
        ));
        store
            .put("t", "k", PutPayload::from(Bytes::from_static(b"v")))
            .await
            .unwrap();
        store.faults.set_outage(true);
        assert!(store.get_range("t", "k", 0..1).await.is_err());
        store.faults.set_outage(false);
        assert_eq!(&store.get_range("t", "k", 0..1).await.unwrap()[..], b"v");
        assert_eq!(store.metrics.total_requests(), 4);
        assert_eq!(store.metrics.errors.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn bad_urls_are_rejected_with_a_message() {
        for url in ["ftp://x", "s3://", "file://relative"] {
            let e = RemoteStore::open(&StoreConfig {
                url: url.into(),
                ..Default::default()
            })
            .unwrap_err();
            assert!(matches!(e, StoreError::Config(_)), "{url}: {e}");
        }
    }
}
