//! Kafka's `meta.properties` in each log dir (`cluster.id`, `directory.id`, `node.id`,
//! `version=1`), and the cluster id a broker answers with.
//!
//! Where the cluster id comes from:
//! - single node: the catalog file's, else a log dir's `meta.properties`, else `cluster.id`
//!   from the config, else a fresh Kafka-style id (22 characters of base64);
//! - cluster mode: the metadata quorum's, set once by the first broker that proposes one
//!   ([`strata_metadata::Command::SetClusterId`]); each broker proposes its configured
//!   `cluster.id`, else the one its log dirs carry, else a fresh id, and adopts the quorum's
//!   ([`Broker::adopt_cluster_id`]) before it registers and before it serves any client.
//!
//! As in Kafka, every log dir's `meta.properties` must name the same cluster id, the one in
//! force ("Invalid cluster.id in: ..."), and in cluster mode a configured `cluster.id` must be
//! the quorum's and the log dirs': a broker with data or settings of another cluster does not
//! start, and is refused before it could propose its id to a new quorum.
//!
//! Crash consistency: each file is replaced atomically (temp file, fsync, rename); a crash
//! leaves the old or the new file, and the next start writes it again.

use super::*;

pub(super) const META_PROPERTIES_FILE: &str = "meta.properties";
/// `meta.properties` is a few lines; anything much larger is not one.
const MAX_META_PROPERTIES_BYTES: u64 = 64 * 1024;

/// Why the cluster id of this broker cannot be settled, or its `meta.properties` not read or
/// written. Each one stops the start-up.
#[derive(Debug, thiserror::Error)]
pub enum ClusterIdError {
    /// Kafka's message for a log dir formatted for another cluster.
    #[error(
        "Invalid cluster.id in: {}. Expected {expected}, but read {read} (the log dir belongs to \
         another cluster: move it away, or correct its cluster.id if its data belongs to cluster \
         {expected})",
        path.display()
    )]
    InvalidClusterId {
        path: PathBuf,
        expected: String,
        read: String,
    },
    #[error(
        "cluster.id {configured} in this broker's config does not match the metadata quorum's \
         cluster id {quorum}: the broker was pointed at another cluster's quorum, or its \
         cluster.id setting is wrong"
    )]
    ConfigMismatch { configured: String, quorum: String },
    #[error(
        "cluster.id {configured} in this broker's config does not match the cluster id \
         {recorded} its log dirs' meta.properties were written with"
    )]
    ConfigDiffersFromLogDirs {
        configured: String,
        recorded: String,
    },
    #[error("the cluster id changed from {current} to {quorum} while the broker runs")]
    Changed { current: String, quorum: String },
    #[error("{} is not a valid meta.properties: {reason}", path.display())]
    Malformed { path: PathBuf, reason: String },
    #[error("cannot {op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// The fields of a `meta.properties` Strata reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct MetaProperties {
    pub(super) cluster_id: Option<String>,
    pub(super) directory_id: Option<String>,
}

/// Reads `dir/meta.properties`; `None` when the dir has none (never started, or formatted by
/// nothing yet).
pub(super) fn read(dir: &Path) -> Result<Option<MetaProperties>, ClusterIdError> {
    use std::io::Read;
    let path = dir.join(META_PROPERTIES_FILE);
    let file = match fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(ClusterIdError::Io {
                op: "open",
                path,
                source,
            })
        }
    };
    let mut bytes = Vec::new();
    file.take(MAX_META_PROPERTIES_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| ClusterIdError::Io {
            op: "read",
            path: path.clone(),
            source,
        })?;
    if bytes.len() as u64 > MAX_META_PROPERTIES_BYTES {
        return Err(ClusterIdError::Malformed {
            path,
            reason: format!("larger than {MAX_META_PROPERTIES_BYTES} bytes"),
        });
    }
    let text = String::from_utf8(bytes).map_err(|_| ClusterIdError::Malformed {
        path: path.clone(),
        reason: "not UTF-8 text".into(),
    })?;
    Ok(Some(parse(&text)))
}

/// Java properties as Kafka writes them: `key=value` lines, `#` or `!` comments.
fn parse(text: &str) -> MetaProperties {
    let mut props = MetaProperties::default();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let Some((key, value)) = line.split_once(['=', ':']) else {
            continue;
        };
        let value = Some(value.trim().to_string()).filter(|v| !v.is_empty());
        match key.trim() {
            "cluster.id" => props.cluster_id = value,
            "directory.id" => props.directory_id = value,
            _ => {}
        }
    }
    props
}

/// The cluster id the log dirs' `meta.properties` agree on (`None` when none has one), or
/// Kafka's error naming the first dir that disagrees.
pub(super) fn recorded_cluster_id(dirs: &[PathBuf]) -> Result<Option<String>, ClusterIdError> {
    let mut found: Option<String> = None;
    for dir in dirs {
        let Some(read) = read(dir)?.and_then(|p| p.cluster_id) else {
            continue;
        };
        match &found {
            None => found = Some(read),
            Some(expected) if *expected != read => {
                return Err(ClusterIdError::InvalidClusterId {
                    path: dir.join(META_PROPERTIES_FILE),
                    expected: expected.clone(),
                    read,
                })
            }
            Some(_) => {}
        }
    }
    Ok(found)
}

/// Fails with Kafka's error unless every log dir's `meta.properties` that names a cluster id
/// names `expected`.
pub(super) fn check_cluster_id(dirs: &[PathBuf], expected: &str) -> Result<(), ClusterIdError> {
    for dir in dirs {
        if let Some(read) = read(dir)?.and_then(|p| p.cluster_id) {
            if read != expected {
                return Err(ClusterIdError::InvalidClusterId {
                    path: dir.join(META_PROPERTIES_FILE),
                    expected: expected.to_string(),
                    read,
                });
            }
        }
    }
    Ok(())
}

/// Writes `dir/meta.properties` atomically, keeping the dir's `directory.id`.
pub(super) fn write(dir: &Path, cluster_id: &str, node_id: i32) -> Result<(), ClusterIdError> {
    let path = dir.join(META_PROPERTIES_FILE);
    let directory_id = read(dir)
        .ok()
        .flatten()
        .and_then(|p| p.directory_id)
        .unwrap_or_else(|| kafka_uuid_string(Uuid::new_v4()));
    let text = format!(
        "#Written by Strata\ncluster.id={cluster_id}\ndirectory.id={directory_id}\nnode.id={node_id}\nversion=1\n"
    );
    let io_error = |op: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| ClusterIdError::Io { op, path, source }
    };
    let tmp = dir.join("meta.properties.tmp");
    {
        let f = fs::File::create(&tmp).map_err(io_error("create", &tmp))?;
        io::Write::write_all(&mut &f, text.as_bytes()).map_err(io_error("write", &tmp))?;
        f.sync_all().map_err(io_error("sync", &tmp))?;
    }
    fs::rename(&tmp, &path).map_err(io_error("replace", &path))
}

impl Broker {
    /// The cluster id this broker answers Metadata and DescribeCluster with. `None` only in
    /// cluster mode before the quorum's id is adopted, when no client is served yet.
    pub fn cluster_id(&self) -> Option<&str> {
        self.cluster_id.get().map(String::as_str)
    }

    /// Cluster mode: the id this broker proposes to a quorum that has none yet, its configured
    /// `cluster.id`, else the one its log dirs carry, else a fresh Kafka-style id.
    pub fn cluster_id_candidate(&self) -> String {
        self.config
            .cluster_id
            .clone()
            .or_else(|| self.recorded_cluster_id.clone())
            .unwrap_or_else(|| kafka_uuid_string(Uuid::new_v4()))
    }

    /// Cluster mode: takes the metadata quorum's cluster id, after checking it against the
    /// configured `cluster.id` and every log dir's `meta.properties`, and writes it into them.
    /// Blocking.
    pub fn adopt_cluster_id(&self, quorum: &str) -> Result<(), ClusterIdError> {
        if let Some(configured) = self.config.cluster_id.as_deref() {
            if configured != quorum {
                return Err(ClusterIdError::ConfigMismatch {
                    configured: configured.to_string(),
                    quorum: quorum.to_string(),
                });
            }
        }
        check_cluster_id(&self.config.log_dirs, quorum)?;
        if let Some(current) = self.cluster_id() {
            if current != quorum {
                return Err(ClusterIdError::Changed {
                    current: current.to_string(),
                    quorum: quorum.to_string(),
                });
            }
        }
        let _ = self.cluster_id.set(quorum.to_string());
        for d in &self.config.log_dirs {
            write(d, quorum, self.config.node_id)?;
        }
        if let Some(dir) = self.explicit_metadata_log_dir() {
            // Kafka formats `metadata.log.dir` too; `kafka-metadata-quorum add-controller`
            // reads the directory id there.
            check_cluster_id(std::slice::from_ref(&dir), quorum)?;
            fs::create_dir_all(&dir).map_err(|source| ClusterIdError::Io {
                op: "create",
                path: dir.clone(),
                source,
            })?;
            write(&dir, quorum, self.config.node_id)?;
        }
        self.save_metadata().map_err(|source| ClusterIdError::Io {
            op: "write",
            path: self.config.log_dirs[0].join(METADATA_FILE),
            source,
        })
    }
}

impl Broker {
    /// `metadata.log.dir` when it is set apart from the log dirs.
    fn explicit_metadata_log_dir(&self) -> Option<PathBuf> {
        let cluster = self.config.cluster.as_ref()?;
        let default = self.config.log_dirs[0].join("__cluster_metadata");
        (cluster.metadata_log_dir != default).then(|| cluster.metadata_log_dir.clone())
    }

    /// The `directory.id` of the metadata log dir, as `kafka-metadata-quorum add-controller`
    /// reads it: from `metadata.log.dir`'s `meta.properties` when that is set, else from the
    /// first log dir's. `None` before the cluster id is adopted (the file is written then).
    pub fn metadata_directory_id(&self) -> Option<Uuid> {
        self.read_metadata_directory_id()
    }

    /// [`Broker::metadata_directory_id`] for an async worker: the file is read on the blocking
    /// pool.
    pub async fn metadata_directory_id_off_worker(self: &Arc<Self>) -> Option<Uuid> {
        let broker = self.clone();
        tokio::task::spawn_blocking(move || broker.read_metadata_directory_id())
            .await
            .ok()
            .flatten()
    }

    fn read_metadata_directory_id(&self) -> Option<Uuid> {
        let dir = self
            .explicit_metadata_log_dir()
            .unwrap_or_else(|| self.config.log_dirs[0].clone());
        let text = read(&dir).ok().flatten()?.directory_id?;
        let bytes = base64::Engine::decode(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD,
            text.as_bytes(),
        )
        .ok()?;
        Uuid::from_slice(&bytes).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_parse_like_kafka_writes_them() {
        let p = parse("#Written by Kafka\n#Tue\nnode.id=1\ndirectory.id=abc\nversion=1\ncluster.id = MkU3OEVBNTcwNTJENDM2Qk \n");
        assert_eq!(p.cluster_id.as_deref(), Some("MkU3OEVBNTcwNTJENDM2Qk"));
        assert_eq!(p.directory_id.as_deref(), Some("abc"));
        assert_eq!(parse("! comment\ncluster.id=\n"), MetaProperties::default());
    }

    #[test]
    fn log_dirs_of_two_clusters_are_refused_with_kafkas_message() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let dirs = vec![a.path().to_path_buf(), b.path().to_path_buf()];
        assert_eq!(recorded_cluster_id(&dirs).unwrap(), None);
        write(a.path(), "one", 1).unwrap();
        assert_eq!(recorded_cluster_id(&dirs).unwrap().as_deref(), Some("one"));
        let directory_id = read(a.path()).unwrap().unwrap().directory_id;
        write(a.path(), "one", 1).unwrap();
        assert_eq!(
            read(a.path()).unwrap().unwrap().directory_id,
            directory_id,
            "kept on rewrite"
        );
        write(b.path(), "two", 1).unwrap();
        let err = recorded_cluster_id(&dirs).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!(
                "Invalid cluster.id in: {}. Expected one, but read two",
                b.path().join("meta.properties").display()
            )),
            "{err}"
        );
        assert!(check_cluster_id(&dirs[..1], "one").is_ok());
        assert!(check_cluster_id(&dirs, "one").is_err());
    }

    #[test]
    fn an_oversized_meta_properties_is_refused() {
        let d = tempfile::tempdir().unwrap();
        fs::write(
            d.path().join(META_PROPERTIES_FILE),
            vec![b'#'; MAX_META_PROPERTIES_BYTES as usize + 1],
        )
        .unwrap();
        assert!(matches!(
            read(d.path()),
            Err(ClusterIdError::Malformed { .. })
        ));
    }
}
