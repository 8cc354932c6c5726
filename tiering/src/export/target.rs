//! Where exported files land: a local directory or an object store, in Hive-style
//! `topic=T/partition=P/` directories, with one checkpoint per partition.
//!
//! Crash consistency: a file is written to a spool file first (`.<name>.tmp` beside its final
//! name for a directory, the temp dir for an object store), then renamed or uploaded under
//! its final name, then the checkpoint is replaced. A crash between the two leaves a file the
//! checkpoint does not cover; the re-run writes it again under the same name with the same
//! rows. Spool files of a killed run are removed when the partition's export starts.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::export::ExportError;
use crate::store::{RemoteStore, StoreConfig, StoreError};

pub const CHECKPOINT_FILE: &str = "_checkpoint.json";
const CHECKPOINT_FORMAT: u32 = 1;

/// A partition's export progress: every record below `next_offset` that is exported at all
/// is in a file already written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub format: u32,
    pub topic: String,
    pub partition: i32,
    pub next_offset: i64,
    /// The file written last (for people; not needed to resume).
    #[serde(default)]
    pub last_file: Option<String>,
    /// A file ending before this offset is about to land: if the checkpoint still says so
    /// when the next run starts, that run's first file ends here too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_end: Option<i64>,
}

impl Checkpoint {
    pub fn new(
        topic: &str,
        partition: i32,
        next_offset: i64,
        last_file: Option<String>,
        pending_end: Option<i64>,
    ) -> Checkpoint {
        Checkpoint {
            format: CHECKPOINT_FORMAT,
            topic: topic.to_string(),
            partition,
            next_offset,
            last_file,
            pending_end,
        }
    }
}

pub enum Target {
    Dir(PathBuf),
    Store(Arc<RemoteStore>),
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Dir(d) => write!(f, "{}", d.display()),
            Target::Store(s) => write!(f, "{s}"),
        }
    }
}

/// `topic=T/partition=P` (Kafka topic names need no escaping: `[a-zA-Z0-9._-]`).
pub fn partition_dir(topic: &str, partition: i32) -> String {
    format!("topic={topic}/partition={partition}")
}

/// `<first:020>-<last:020>.parquet`: the offsets of the file's first and last record.
pub fn file_name(first: i64, last: i64) -> String {
    format!("{first:020}-{last:020}.parquet")
}

impl Target {
    /// `out` is a directory path, `file:///dir`, or `s3://bucket/prefix` (reached with the
    /// endpoint, region and credentials of `s3`, e.g. the broker's remote store settings).
    pub fn open(out: &str, s3: &StoreConfig) -> Result<Target, ExportError> {
        if out.starts_with("s3://") || out.starts_with("memory:") {
            let cfg = StoreConfig {
                url: out.to_string(),
                ..s3.clone()
            };
            return Ok(Target::Store(Arc::new(RemoteStore::open(&cfg)?)));
        }
        let dir = PathBuf::from(out.strip_prefix("file://").unwrap_or(out));
        std::fs::create_dir_all(&dir)?;
        Ok(Target::Dir(dir))
    }

    fn dir_of(root: &Path, topic: &str, partition: i32) -> PathBuf {
        root.join(partition_dir(topic, partition))
    }

    /// Prepares the partition's directory and removes spool files of an earlier run.
    pub async fn prepare(&self, topic: &str, partition: i32) -> Result<(), ExportError> {
        let dir = match self {
            Target::Dir(root) => Self::dir_of(root, topic, partition),
            Target::Store(_) => spool_dir(),
        };
        std::fs::create_dir_all(&dir)?;
        let prefix = match self {
            Target::Dir(_) => ".".to_string(),
            Target::Store(_) => format!("{topic}-{partition}-"),
        };
        for e in std::fs::read_dir(&dir)? {
            let name = e?.file_name().to_string_lossy().to_string();
            if name.starts_with(&prefix) && name.ends_with(".tmp") {
                let _ = std::fs::remove_file(dir.join(name));
            }
        }
        Ok(())
    }

    /// Where a file is written before it lands.
    pub fn spool_path(&self, topic: &str, partition: i32, name: &str) -> PathBuf {
        match self {
            Target::Dir(root) => Self::dir_of(root, topic, partition).join(format!(".{name}.tmp")),
            Target::Store(_) => spool_dir().join(format!("{topic}-{partition}-{name}.tmp")),
        }
    }

    /// Moves a finished (fsynced) spool file to its final name; returns its size.
    pub async fn land(
        &self,
        topic: &str,
        partition: i32,
        spool: &Path,
        name: &str,
    ) -> Result<u64, ExportError> {
        match self {
            Target::Dir(root) => {
                let dir = Self::dir_of(root, topic, partition);
                let size = std::fs::metadata(spool)?.len();
                std::fs::rename(spool, dir.join(name))?;
                sync_dir(&dir);
                Ok(size)
            }
            Target::Store(store) => {
                let key = format!("{}/{name}", partition_dir(topic, partition));
                let size = store.put_file(topic, &key, spool, PART_SIZE).await?;
                let _ = std::fs::remove_file(spool);
                Ok(size)
            }
        }
    }

    /// The partition's checkpoint and the version to replace (ETag for an object store).
    pub async fn read_checkpoint(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<(Option<Checkpoint>, Option<String>), ExportError> {
        let raw = match self {
            Target::Dir(root) => {
                let path = Self::dir_of(root, topic, partition).join(CHECKPOINT_FILE);
                match std::fs::read(&path) {
                    Ok(b) => Some((Bytes::from(b), None)),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                    Err(e) => return Err(e.into()),
                }
            }
            Target::Store(store) => {
                let key = format!("{}/{CHECKPOINT_FILE}", partition_dir(topic, partition));
                store.get(topic, &key).await?
            }
        };
        let Some((bytes, e_tag)) = raw else {
            return Ok((None, None));
        };
        let c: Checkpoint = serde_json::from_slice(&bytes)
            .map_err(|e| ExportError::Checkpoint(format!("corrupt export checkpoint: {e}")))?;
        if c.format > CHECKPOINT_FORMAT || c.topic != topic || c.partition != partition {
            return Err(ExportError::Checkpoint(format!(
                "checkpoint of {topic}-{partition} is for {}-{} (format {})",
                c.topic, c.partition, c.format
            )));
        }
        Ok((Some(c), e_tag))
    }

    /// Replaces the checkpoint. On an object store the write is conditional on `expected`
    /// (None: must not exist), so two exporters of one partition cannot both advance it.
    pub async fn write_checkpoint(
        &self,
        topic: &str,
        partition: i32,
        c: Checkpoint,
        expected: Option<&str>,
    ) -> Result<Option<String>, ExportError> {
        let bytes =
            serde_json::to_vec_pretty(&c).map_err(|e| ExportError::Checkpoint(e.to_string()))?;
        match self {
            Target::Dir(root) => {
                let dir = Self::dir_of(root, topic, partition);
                let tmp = dir.join(format!(".{CHECKPOINT_FILE}.tmp"));
                {
                    use std::io::Write;
                    let mut f = std::fs::File::create(&tmp)?;
                    f.write_all(&bytes)?;
                    f.sync_all()?;
                }
                std::fs::rename(&tmp, dir.join(CHECKPOINT_FILE))?;
                sync_dir(&dir);
                Ok(None)
            }
            Target::Store(store) => {
                let key = format!("{}/{CHECKPOINT_FILE}", partition_dir(topic, partition));
                match store.put_if(topic, &key, bytes.into(), expected).await {
                    Ok(e_tag) => Ok(e_tag),
                    Err(StoreError::Conflict(_)) => Err(ExportError::Checkpoint(format!(
                        "the export checkpoint of {topic}-{partition} changed under this \
                         exporter: is another export of it running?"
                    ))),
                    Err(e) => Err(e.into()),
                }
            }
        }
    }
}

/// Objects beside the exported files, named relative to the target's root (the Iceberg
/// table metadata under `topic=T/metadata/`). `topic` only labels the store's metrics.
impl Target {
    /// Where `rel` is, as table metadata names it: an absolute path for a directory, an
    /// `s3://bucket/prefix/rel` URL for an object store.
    pub fn location(&self, rel: &str) -> String {
        match self {
            Target::Dir(root) => {
                let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.clone());
                root.join(rel).display().to_string()
            }
            Target::Store(store) => format!("{}/{rel}", store.to_string().trim_end_matches('/')),
        }
    }

    /// The whole object, or `None` when it does not exist.
    pub async fn read_object(&self, topic: &str, rel: &str) -> Result<Option<Bytes>, ExportError> {
        match self {
            Target::Dir(root) => {
                let rel = rel.to_string();
                in_dir(root, move |root| match std::fs::read(root.join(rel)) {
                    Ok(b) => Ok(Some(Bytes::from(b))),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                    Err(e) => Err(e),
                })
                .await
            }
            Target::Store(store) => Ok(store.get(topic, rel).await?.map(|(b, _)| b)),
        }
    }

    /// `range` of an object.
    pub async fn read_range(
        &self,
        topic: &str,
        rel: &str,
        range: std::ops::Range<u64>,
    ) -> Result<Bytes, ExportError> {
        match self {
            Target::Dir(root) => {
                let rel = rel.to_string();
                in_dir(root, move |root| {
                    use std::io::{Read, Seek};
                    let mut f = std::fs::File::open(root.join(rel))?;
                    f.seek(std::io::SeekFrom::Start(range.start))?;
                    let mut buf = Vec::new();
                    f.take(range.end.saturating_sub(range.start))
                        .read_to_end(&mut buf)?;
                    Ok(Bytes::from(buf))
                })
                .await
            }
            Target::Store(store) => Ok(store.get_range(topic, rel, range).await?),
        }
    }

    /// The names and sizes of the objects directly under `rel_dir` (not its subdirectories,
    /// not spool files).
    pub async fn list_dir(
        &self,
        topic: &str,
        rel_dir: &str,
    ) -> Result<Vec<(String, u64)>, ExportError> {
        let mut out = Vec::new();
        match self {
            Target::Dir(root) => {
                let rel_dir = rel_dir.to_string();
                out = in_dir(root, move |root| {
                    let mut out = Vec::new();
                    let entries = match std::fs::read_dir(root.join(rel_dir)) {
                        Ok(e) => e,
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
                        Err(e) => return Err(e),
                    };
                    for e in entries {
                        let e = e?;
                        let meta = e.metadata()?;
                        let name = e.file_name().to_string_lossy().to_string();
                        if meta.is_file() && !name.starts_with('.') {
                            out.push((name, meta.len()));
                        }
                    }
                    Ok(out)
                })
                .await?;
            }
            Target::Store(store) => {
                let prefix = format!("{}/", rel_dir.trim_end_matches('/'));
                for l in store.list(topic, &prefix).await? {
                    if let Some(name) = l.key.strip_prefix(&prefix) {
                        if !name.contains('/') {
                            out.push((name.to_string(), l.size));
                        }
                    }
                }
            }
        }
        out.sort();
        Ok(out)
    }

    /// Writes an object, replacing any (for objects no reader depends on being atomic, or
    /// that name fresh keys).
    pub async fn put_object(&self, topic: &str, rel: &str, data: Bytes) -> Result<(), ExportError> {
        match self {
            Target::Dir(root) => {
                let rel = rel.to_string();
                in_dir(root, move |root| {
                    let (path, tmp) = spooled(root, &rel, &data)?;
                    std::fs::rename(&tmp, &path)?;
                    sync_dir(path.parent().unwrap_or(root));
                    Ok(())
                })
                .await
            }
            Target::Store(store) => Ok(store.put(topic, rel, data.into()).await?),
        }
    }

    /// Creates an object only if none exists under that name: `false` when one does. The
    /// atomic step of a table commit (a hard link in a directory, a conditional PUT in a
    /// bucket).
    pub async fn create_object(
        &self,
        topic: &str,
        rel: &str,
        data: Bytes,
    ) -> Result<bool, ExportError> {
        match self {
            Target::Dir(root) => {
                let rel = rel.to_string();
                in_dir(root, move |root| {
                    let (path, tmp) = spooled(root, &rel, &data)?;
                    let linked = std::fs::hard_link(&tmp, &path);
                    let _ = std::fs::remove_file(&tmp);
                    match linked {
                        Ok(()) => {
                            sync_dir(path.parent().unwrap_or(root));
                            Ok(true)
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
                        Err(e) => Err(e),
                    }
                })
                .await
            }
            Target::Store(store) => match store.put_if(topic, rel, data, None).await {
                Ok(_) => Ok(true),
                Err(StoreError::Conflict(_)) => Ok(false),
                Err(e) => Err(e.into()),
            },
        }
    }
}

impl Target {
    /// Deletes an object; a missing one is no error.
    pub async fn delete_object(&self, topic: &str, rel: &str) -> Result<(), ExportError> {
        match self {
            Target::Dir(root) => {
                let rel = rel.to_string();
                in_dir(root, move |root| {
                    match std::fs::remove_file(root.join(rel)) {
                        Ok(()) => Ok(()),
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                        Err(e) => Err(e),
                    }
                })
                .await
            }
            Target::Store(store) => Ok(store.delete(topic, rel).await?),
        }
    }
}

/// Runs file work on a directory target on the blocking pool: the continuous exporter calls
/// these from the broker's async workers, and a table commit fsyncs.
async fn in_dir<T: Send + 'static>(
    root: &Path,
    f: impl FnOnce(&Path) -> std::io::Result<T> + Send + 'static,
) -> Result<T, ExportError> {
    let root = root.to_path_buf();
    tokio::task::spawn_blocking(move || f(&root))
        .await
        .map_err(std::io::Error::other)?
        .map_err(ExportError::from)
}

/// `rel`'s path under `root`, and a temp file beside it holding `data`, fsynced.
fn spooled(root: &Path, rel: &str, data: &[u8]) -> std::io::Result<(PathBuf, PathBuf)> {
    let path = root.join(rel);
    let dir = path.parent().unwrap_or(root);
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".{}.tmp", uuid::Uuid::new_v4().simple()));
    write_synced(&tmp, data)?;
    Ok((path, tmp))
}

fn write_synced(path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::File::create(path)?;
    f.write_all(data)?;
    f.sync_all()
}

/// Multipart part size for uploads of exported files.
const PART_SIZE: usize = 16 << 20;

fn spool_dir() -> PathBuf {
    std::env::temp_dir().join("strata-export")
}

fn sync_dir(dir: &Path) {
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
}
