//! Broker configuration: Kafka's own setting names, from a `server.properties` or TOML file,
//! `STRATA_*` environment variables and `--override key=value` flags (later sources win).
//!
//! Every source is flattened to `key -> string`, then validated against [`BROKER_CONFIGS`] and
//! the topic-config table (for `log.*` synonyms) and turned into a typed [`BrokerConfig`].
//! Unknown Kafka keys are accepted with a warning, as Kafka does; unknown `strata.*` keys and
//! bad values are errors that name the key.

mod broker_defs;
pub mod dynamic_broker;
pub mod group;
pub mod security;
pub mod topic;
pub mod value;

use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};

use security::{controller_listener_names, parse_protocol_map};
pub use security::{
    parse_jaas_options, parse_plain_jaas, ClientAuth, DelegationTokenConfig, InterBrokerSecurity,
    InterBrokerTls, SaslConfig, SaslCredentials, SecurityConfig, SecurityProtocol, TlsConfig,
};
pub use topic::{BrokerDefaults, ConfigSource, TopicConfig};
use value::Kind;

pub use broker_defs::BROKER_CONFIGS;
use broker_defs::{IGNORED_KAFKA_KEYS, SECRET_KEYS};

/// Broker settings that are not topic-config synonyms.
pub struct BrokerConfigDef {
    pub name: &'static str,
    pub kind: Kind,
    pub default: &'static str,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}: {message}")]
    Syntax {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("invalid value {value:?} for {key}: {reason}")]
    InvalidValue {
        key: String,
        value: String,
        reason: String,
    },
    #[error("unknown setting {0}: Strata has no such setting (check the spelling)")]
    UnknownStrataKey(String),
    #[error("bad override {0:?}: expected key=value")]
    BadOverride(String),
}

/// A listener address and how clients should reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub name: String,
    pub security: SecurityProtocol,
    pub bind: SocketAddr,
    pub advertised_host: String,
    pub advertised_port: u16,
}

/// The validated broker configuration.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    pub node_id: i32,
    pub rack: Option<String>,
    pub cluster_id: Option<String>,
    /// The first listener (what tests and tools connect to by default).
    pub listener: Listener,
    /// Every listener, the first one first.
    pub listeners: Vec<Listener>,
    pub security: SecurityConfig,
    pub admin_listener: SocketAddr,
    pub log_dirs: Vec<PathBuf>,
    pub num_partitions: i32,
    pub default_replication_factor: i16,
    pub auto_create_topics_enable: bool,
    pub delete_topic_enable: bool,
    pub socket_request_max_bytes: usize,
    /// `queued.max.request.bytes`: the budget for request bytes being read or handled, across
    /// all connections (`None`: unbounded). At least `socket_request_max_bytes`.
    pub queued_max_request_bytes: Option<u64>,
    /// `sasl.server.max.receive.size`: the largest frame a SASL listener reads before the
    /// client has authenticated.
    pub sasl_server_max_receive_size: usize,
    pub connections_max_idle_ms: u64,
    pub fetch_max_bytes: usize,
    pub log_retention_check_interval_ms: u64,
    pub log_flush_scheduler_interval_ms: u64,
    pub log_flush_offset_checkpoint_interval_ms: u64,
    pub producer_id_expiration_ms: i64,
    pub offsets_topic_num_partitions: i32,
    pub offsets_topic_segment_bytes: i64,
    /// Cluster mode: replicas of `__consumer_offsets` partitions (a single node keeps one).
    pub offsets_topic_replication_factor: i16,
    /// Cluster mode: replicas of `__transaction_state` partitions, and its min.insync.replicas.
    pub transaction_state_log_replication_factor: i16,
    pub transaction_state_log_min_isr: i32,
    pub transaction_state_log_num_partitions: i32,
    pub transaction_state_log_segment_bytes: i64,
    /// `share.coordinator.state.topic.num.partitions`: partitions of `__share_group_state`.
    pub share_state_topic_num_partitions: i32,
    pub share_state_topic_segment_bytes: i64,
    /// `share.coordinator.state.topic.replication.factor` / `.min.isr` (cluster mode).
    pub share_state_topic_replication_factor: i16,
    pub share_state_topic_min_isr: i32,
    pub transaction_max_timeout_ms: i32,
    pub transactional_id_expiration_ms: i64,
    pub transaction_abort_timed_out_transaction_cleanup_interval_ms: u64,
    pub transaction_remove_expired_transaction_cleanup_interval_ms: u64,
    pub offsets_retention_ms: i64,
    pub offset_metadata_max_bytes: usize,
    pub group_initial_rebalance_delay_ms: u64,
    pub group_min_session_timeout_ms: u64,
    pub group_max_session_timeout_ms: u64,
    pub group_consumer_session_timeout_ms: u64,
    pub group_consumer_heartbeat_interval_ms: u64,
    /// `group.consumer.migration.policy`: the conversions between the classic and the
    /// consumer protocol a group may go through.
    pub group_consumer_migration_policy:
        crate::coordinator::consumer_group::classic::MigrationPolicy,
    pub tiering: TieringConfig,
    pub log_cleaner: LogCleanerConfig,
    /// `quota.window.num` samples of `quota.window.size.seconds` for client quotas.
    pub quota_sample: crate::quota::SampleConfig,
    /// `max.connections*` settings.
    pub connection_limits: crate::quota::ConnectionLimitsConfig,
    pub replication: ReplicationConfig,
    /// Cluster mode: set when `controller.quorum.voters` is (see [`crate::controller`]).
    pub cluster: Option<ClusterConfig>,
    /// The `log.*` and other topic-config synonyms as set, for topic defaults.
    pub topic_defaults: BrokerDefaults,
    /// Every explicitly set key (for DescribeConfigs on the broker resource).
    pub explicit: BTreeMap<String, String>,
}

/// The metadata quorum settings of cluster mode (Kafka's KRaft names).
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterConfig {
    /// `controller.quorum.voters`: voter id to its metadata RPC address (`host:port`).
    pub voters: BTreeMap<u64, String>,
    /// `controller.quorum.bootstrap.servers` (`host:port,...`): where a node that is not
    /// among the voters asks to join the quorum, besides the voters.
    pub bootstrap_servers: Vec<String>,
    /// `controller.quorum.auto.join.enable` (KIP-1186): an observer adds itself as a voter.
    pub auto_join: bool,
    /// Where the metadata RPC binds: the `controller.listener.names` listener, else this
    /// node's voter entry.
    pub rpc_bind: SocketAddr,
    /// The address other nodes reach this node's metadata RPC at.
    pub rpc_advertised: String,
    /// `metadata.log.dir` (default: `<first log dir>/__cluster_metadata`).
    pub metadata_log_dir: PathBuf,
    /// `broker.session.timeout.ms`: a broker without heartbeat for this long is fenced.
    pub session_timeout: std::time::Duration,
    /// `broker.heartbeat.interval.ms`.
    pub heartbeat_interval: std::time::Duration,
    /// `leader.imbalance.check.interval.seconds`, or `None` when `auto.leader.rebalance.enable`
    /// is false: how often the active controller moves leadership back to preferred replicas.
    pub leader_imbalance_check_interval: Option<std::time::Duration>,
}

/// Replica fetching and ISR maintenance (`replica.*`, Kafka's names and defaults).
#[derive(Debug, Clone, PartialEq)]
pub struct ReplicationConfig {
    /// `inter.broker.listener.name` (or the listener named by
    /// `security.inter.broker.protocol`): the listener followers fetch from (empty = the
    /// first).
    pub inter_broker_listener_name: Option<String>,
    /// How this broker connects to that listener of other brokers (TLS, SASL).
    pub inter_broker: InterBrokerSecurity,
    /// `replica.lag.time.max.ms`: a follower that has not caught up for this long leaves the
    /// ISR.
    pub replica_lag_time_max: std::time::Duration,
    /// `replica.fetch.wait.max.ms`: how long a follower's fetch waits on the leader.
    pub fetch_wait_max: std::time::Duration,
    /// `replica.fetch.min.bytes`.
    pub fetch_min_bytes: i32,
    /// `replica.fetch.max.bytes`: per partition.
    pub fetch_max_bytes: i32,
    /// `replica.fetch.response.max.bytes`: per fetch response.
    pub fetch_response_max_bytes: i32,
    /// `replica.fetch.backoff.ms`: pause after a fetch error.
    pub fetch_backoff: std::time::Duration,
    /// `replica.socket.timeout.ms`: a fetch unanswered for this long (beyond its wait) fails.
    pub socket_timeout: std::time::Duration,
    /// `leader.replication.throttled.rate` / `follower.replication.throttled.rate`: bytes per
    /// second for the throttled replicas of topics (their
    /// `*.replication.throttled.replicas`); changed at run time by dynamic broker configs.
    pub leader_throttled_rate: i64,
    pub follower_throttled_rate: i64,
    /// `replication.quota.window.num` and `replication.quota.window.size.seconds`: how the
    /// throttled rate is measured.
    pub quota_window_num: u32,
    pub quota_window_size_ms: i64,
}

/// The log cleaner's broker-wide settings (`log.cleaner.*`, Kafka's names and defaults).
#[derive(Debug, Clone, PartialEq)]
pub struct LogCleanerConfig {
    /// `log.cleaner.enable`: compacted topics are cleaned at all.
    pub enable: bool,
    /// `log.cleaner.threads`: cleaner tasks (0 = none, like Kafka).
    pub threads: usize,
    /// `log.cleaner.dedupe.buffer.size`: offset-map memory shared by all cleaner tasks.
    pub dedupe_buffer_bytes: usize,
    /// `log.cleaner.io.buffer.load.factor`: how full an offset map may get.
    pub dedupe_buffer_load_factor: f64,
    /// `log.cleaner.io.max.bytes.per.second`: read+write rate of all cleaner tasks together.
    pub io_max_bytes_per_second: f64,
    /// `log.cleaner.backoff.ms`: how long a cleaner task sleeps when nothing is cleanable.
    pub backoff: std::time::Duration,
}

impl LogCleanerConfig {
    fn build(
        get: &dyn Fn(&str) -> String,
        long: &dyn Fn(&str) -> Result<i64, ConfigError>,
        bool_of: &dyn Fn(&str) -> Result<bool, ConfigError>,
    ) -> Result<LogCleanerConfig, ConfigError> {
        let double = |k: &str| value::parse_double(&get(k)).map_err(|e| invalid(k, &get(k), e));
        let threads = long("log.cleaner.threads")?;
        if !(0..=1024).contains(&threads) {
            return Err(invalid(
                "log.cleaner.threads",
                &get("log.cleaner.threads"),
                "must be between 0 and 1024",
            ));
        }
        let dedupe = long("log.cleaner.dedupe.buffer.size")?;
        if dedupe < 1 {
            return Err(invalid(
                "log.cleaner.dedupe.buffer.size",
                &get("log.cleaner.dedupe.buffer.size"),
                "must be positive",
            ));
        }
        let load_factor = double("log.cleaner.io.buffer.load.factor")?;
        if !(load_factor > 0.0 && load_factor <= 1.0) {
            return Err(invalid(
                "log.cleaner.io.buffer.load.factor",
                &get("log.cleaner.io.buffer.load.factor"),
                "must be in (0, 1]",
            ));
        }
        let io_max = double("log.cleaner.io.max.bytes.per.second")?;
        if io_max.is_nan() || io_max <= 0.0 {
            return Err(invalid(
                "log.cleaner.io.max.bytes.per.second",
                &get("log.cleaner.io.max.bytes.per.second"),
                "must be positive",
            ));
        }
        let backoff = long("log.cleaner.backoff.ms")?;
        if backoff < 0 {
            return Err(invalid(
                "log.cleaner.backoff.ms",
                &get("log.cleaner.backoff.ms"),
                "must not be negative",
            ));
        }
        Ok(LogCleanerConfig {
            enable: bool_of("log.cleaner.enable")?,
            threads: threads as usize,
            dedupe_buffer_bytes: usize::try_from(dedupe).unwrap_or(usize::MAX),
            dedupe_buffer_load_factor: load_factor,
            io_max_bytes_per_second: io_max,
            backoff: std::time::Duration::from_millis(backoff as u64),
        })
    }

    /// The settings the `strata-compaction` crate takes.
    pub fn cleaner_config(&self) -> strata_compaction::CleanerConfig {
        strata_compaction::CleanerConfig {
            threads: self.threads.max(1),
            dedupe_buffer_bytes: self.dedupe_buffer_bytes,
            dedupe_buffer_load_factor: self.dedupe_buffer_load_factor,
            io_max_bytes_per_second: self.io_max_bytes_per_second,
        }
    }
}

/// Tiered storage settings (Kafka's `remote.log.*` names where Kafka has one).
#[derive(Debug, Clone, PartialEq)]
pub struct TieringConfig {
    /// `remote.log.storage.system.enable`: topics may set remote.storage.enable.
    pub enabled: bool,
    pub store: strata_tiering::StoreConfig,
    pub task_interval_ms: u64,
    pub upload_concurrency: usize,
    pub reader_concurrency: usize,
    pub upload_bytes_per_second: i64,
    pub fetch_max_wait_ms: u64,
    pub cache: strata_tiering::CacheConfig,
    pub upload: strata_tiering::UploadOptions,
    pub orphan_grace_ms: i64,
    pub scrub_interval_ms: u64,
    /// Compacted topics: least time between two compacted snapshots of a partition.
    pub compacted_snapshot_interval_ms: u64,
    /// `strata.remote.internal.topics.enable`: the coordinators' topics are created tiered,
    /// so a restore from the bucket brings back committed offsets and transaction state.
    pub internal_topics: bool,
    /// `strata.remote.cluster.restore.enable` (cluster mode): a quorum that holds no topic yet
    /// takes the bucket catalog's topics, once (see `crate::controller::restore`).
    pub cluster_restore: bool,
    /// `strata.export.iceberg.catalog.*`: the REST catalog continuous Iceberg exports commit
    /// through (`None`: the filesystem layout next to the files).
    pub export_catalog: Option<strata_tiering::export::CatalogSettings>,
}

impl TieringConfig {
    fn build(
        get: &dyn Fn(&str) -> String,
        long: &dyn Fn(&str) -> Result<i64, ConfigError>,
        bool_of: &dyn Fn(&str) -> Result<bool, ConfigError>,
        log_dirs: &[PathBuf],
    ) -> Result<TieringConfig, ConfigError> {
        let positive = |k: &str| -> Result<i64, ConfigError> {
            let v = long(k)?;
            if v < 1 {
                return Err(invalid(k, &get(k), "must be positive"));
            }
            Ok(v)
        };
        let absolute = |p: &Path| -> PathBuf {
            if p.is_absolute() {
                p.to_path_buf()
            } else {
                std::env::current_dir().unwrap_or_default().join(p)
            }
        };
        let primary = absolute(&log_dirs[0]);
        let mut url = get("strata.remote.store.url");
        if url.is_empty() {
            // The embedded default: objects next to the data, in <first log dir>/objects
            // (partition directories are named topic-N, so it can never clash).
            url = format!("file://{}", primary.join("objects").display());
        }
        let opt = |k: &str| Some(get(k)).filter(|v| !v.is_empty());
        let store = strata_tiering::StoreConfig {
            url,
            endpoint: opt("strata.remote.store.endpoint"),
            region: opt("strata.remote.store.region"),
            path_style: bool_of("strata.remote.store.path.style")?,
            access_key_id: opt("strata.remote.store.access.key.id"),
            secret_access_key: opt("strata.remote.store.secret.access.key"),
            max_retries: long("strata.remote.store.max.retries")?.max(0) as usize,
            request_timeout: std::time::Duration::from_millis(positive(
                "strata.remote.store.request.timeout.ms",
            )? as u64),
        };
        let cache_dir = match opt("strata.remote.cache.dir") {
            Some(d) => absolute(Path::new(&d)),
            None => primary.join("remote-cache"),
        };
        let chunk = positive("strata.remote.chunk.bytes")?;
        if !(64 << 10..=64 << 20).contains(&chunk) {
            return Err(invalid(
                "strata.remote.chunk.bytes",
                &get("strata.remote.chunk.bytes"),
                "must be between 64 KiB and 64 MiB",
            ));
        }
        let part = positive("strata.remote.upload.part.bytes")?;
        if part < 5 << 20 {
            return Err(invalid(
                "strata.remote.upload.part.bytes",
                &get("strata.remote.upload.part.bytes"),
                "must be at least 5 MiB (the S3 minimum part size)",
            ));
        }
        Ok(TieringConfig {
            enabled: bool_of("remote.log.storage.system.enable")?,
            store,
            task_interval_ms: positive("remote.log.manager.task.interval.ms")? as u64,
            upload_concurrency: positive("remote.log.manager.copier.thread.pool.size")? as usize,
            reader_concurrency: positive("remote.log.reader.threads")? as usize,
            upload_bytes_per_second: positive("remote.log.manager.copy.max.bytes.per.second")?,
            fetch_max_wait_ms: positive("remote.fetch.max.wait.ms")? as u64,
            cache: strata_tiering::CacheConfig {
                memory_bytes: long("strata.remote.cache.memory.bytes")?.max(0) as usize,
                disk_bytes: long("strata.remote.cache.disk.bytes")?.max(0) as u64,
                disk_dir: cache_dir,
                chunk_size: chunk as usize,
                readahead_chunks: long("strata.remote.readahead.chunks")?.max(0) as usize,
                max_concurrent_gets: positive("remote.log.reader.threads")? as usize,
                max_bytes_per_second: Some(positive(
                    "remote.log.manager.fetch.max.bytes.per.second",
                )? as u64)
                .filter(|&r| r != i64::MAX as u64),
            },
            upload: strata_tiering::UploadOptions {
                multipart_threshold: positive("strata.remote.upload.multipart.threshold.bytes")?
                    as u64,
                part_size: part as u64,
            },
            orphan_grace_ms: positive("strata.remote.orphan.grace.ms")?,
            scrub_interval_ms: positive("strata.remote.scrub.interval.ms")? as u64,
            compacted_snapshot_interval_ms: long("strata.remote.compacted.snapshot.interval.ms")?
                .max(0) as u64,
            internal_topics: bool_of("strata.remote.internal.topics.enable")?,
            cluster_restore: bool_of("strata.remote.cluster.restore.enable")?,
            export_catalog: opt("strata.export.iceberg.catalog.uri").map(|uri| {
                strata_tiering::export::CatalogSettings {
                    uri,
                    namespace: get("strata.export.iceberg.catalog.namespace"),
                    auth: strata_tiering::export::iceberg::rest::CatalogAuth::from_properties(
                        opt("strata.export.iceberg.catalog.token"),
                        opt("strata.export.iceberg.catalog.credential"),
                        opt("strata.export.iceberg.catalog.oauth2.server.uri"),
                        opt("strata.export.iceberg.catalog.scope"),
                    ),
                }
            }),
        })
    }
}

impl BrokerConfig {
    /// The `max.connections*` settings with `dynamic` (the effective dynamic broker
    /// configs) over the properties file's. An override host that does not resolve is
    /// skipped with a warning, as Kafka accepts it dynamically (blocking: resolves names).
    pub fn connection_limits_with(
        &self,
        dynamic: &BTreeMap<String, String>,
    ) -> Result<crate::quota::ConnectionLimitsConfig, ConfigError> {
        let mut explicit = self.explicit.clone();
        explicit.extend(dynamic.iter().map(|(k, v)| (k.clone(), v.clone())));
        let get = |k: &str| effective_value(&explicit, k);
        let long = |k: &str| value::parse_long(k, &get(k)).map_err(|e| invalid(k, &get(k), e));
        connection_limits(&get, &long, self.connection_limits.sample, true)
    }
}

/// The `max.connections*` settings, with Kafka's checks: counts and rates are non-negative,
/// `max.connections.per.ip` may be 0 only with overrides, and override hosts must resolve.
fn connection_limits(
    get: &dyn Fn(&str) -> String,
    long: &dyn Fn(&str) -> Result<i64, ConfigError>,
    sample: crate::quota::SampleConfig,
    skip_unresolved: bool,
) -> Result<crate::quota::ConnectionLimitsConfig, ConfigError> {
    let int = |k: &str| -> Result<i32, ConfigError> {
        let v = long(k)?;
        if !(0..=i32::MAX as i64).contains(&v) {
            return Err(invalid(k, &get(k), "must be between 0 and 2147483647"));
        }
        Ok(v as i32)
    };
    const OVERRIDES: &str = "max.connections.per.ip.overrides";
    let text = get(OVERRIDES);
    let overrides = crate::quota::connection::parse_per_ip_overrides(&text)
        .map_err(|e| invalid(OVERRIDES, &text, e))?;
    let max_per_ip = int("max.connections.per.ip")?;
    if max_per_ip == 0 && overrides.is_empty() {
        return Err(invalid(
            "max.connections.per.ip",
            "0",
            format!("can be set to zero only if {OVERRIDES} property is set"),
        ));
    }
    let mut per_ip_overrides = std::collections::HashMap::new();
    for (host, count) in overrides {
        let addrs: Vec<std::net::IpAddr> = match host.parse() {
            Ok(ip) => vec![ip],
            Err(_) => (host.as_str(), 0)
                .to_socket_addrs()
                .map(|a| a.map(|a| a.ip()).collect())
                .unwrap_or_default(),
        };
        if addrs.is_empty() && skip_unresolved {
            tracing::warn!(%host, "a max.connections.per.ip.overrides host does not resolve; skipped");
            continue;
        }
        if addrs.is_empty() {
            return Err(invalid(
                OVERRIDES,
                &text,
                format!("contains invalid addresses : {host}"),
            ));
        }
        for a in addrs {
            per_ip_overrides.insert(a, count);
        }
    }
    Ok(crate::quota::ConnectionLimitsConfig {
        max_per_ip,
        per_ip_overrides,
        max_connections: int("max.connections")?,
        max_creation_rate: int("max.connection.creation.rate")?,
        sample,
    })
}

/// Parses a Kafka `server.properties` file: `key=value` or `key: value`, `#`/`!` comments,
/// backslash line continuations.
pub fn parse_properties(text: &str, path: &Path) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut out = BTreeMap::new();
    let mut pending = String::new();
    let mut start_line = 0;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if pending.is_empty() {
            if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with('!') {
                continue;
            }
            start_line = i + 1;
        }
        if let Some(cont) = trimmed.strip_suffix('\\') {
            pending.push_str(cont);
            continue;
        }
        pending.push_str(trimmed);
        let entry = std::mem::take(&mut pending);
        let sep = entry.find(['=', ':']).ok_or_else(|| ConfigError::Syntax {
            path: path.into(),
            line: start_line,
            message: format!("expected key=value, got {entry:?}"),
        })?;
        let key = entry[..sep].trim().to_string();
        let value = entry[sep + 1..].trim().to_string();
        if key.is_empty() {
            return Err(ConfigError::Syntax {
                path: path.into(),
                line: start_line,
                message: "empty key".into(),
            });
        }
        out.insert(key, value);
    }
    Ok(out)
}

/// Parses a TOML file whose (possibly nested) keys are Kafka setting names:
/// `log.retention.ms = "7d"` and `[log] retention.ms = 604800000` mean the same.
pub fn parse_toml(text: &str, path: &Path) -> Result<BTreeMap<String, String>, ConfigError> {
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| ConfigError::Syntax {
            path: path.into(),
            line: e
                .span()
                .map(|s| text[..s.start].lines().count().max(1))
                .unwrap_or(0),
            message: e.message().to_string(),
        })?;
    let mut out = BTreeMap::new();
    fn flatten(prefix: &str, t: &toml::Table, out: &mut BTreeMap<String, String>) {
        for (k, v) in t {
            let key = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            match v {
                toml::Value::Table(inner) => flatten(&key, inner, out),
                toml::Value::String(s) => {
                    out.insert(key, s.clone());
                }
                toml::Value::Array(items) => {
                    let joined: Vec<String> = items
                        .iter()
                        .map(|i| match i {
                            toml::Value::String(s) => s.clone(),
                            other => other.to_string(),
                        })
                        .collect();
                    out.insert(key, joined.join(","));
                }
                other => {
                    out.insert(key, other.to_string());
                }
            }
        }
    }
    flatten("", &table, &mut out);
    Ok(out)
}

/// Reads a config file, choosing the format by extension (`.toml`, else properties).
pub fn read_file(path: &Path) -> Result<BTreeMap<String, String>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
        path: path.into(),
        source,
    })?;
    if path.extension().is_some_and(|e| e == "toml") {
        parse_toml(&text, path)
    } else {
        parse_properties(&text, path)
    }
}

/// `STRATA_LOG_DIRS=/x` -> `log.dirs=/x`. `STRATA_` alone, and non-setting variables such as
/// `STRATA_BIN` or `STRATA_TEST_TARGET`, are not settings: only keys that name a known setting
/// (or a `strata.` setting) are taken.
pub fn from_env(vars: impl Iterator<Item = (String, String)>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (k, v) in vars {
        let Some(rest) = k.strip_prefix("STRATA_") else {
            continue;
        };
        if rest.is_empty() {
            continue;
        }
        let key = rest.to_ascii_lowercase().replace('_', ".");
        let strata_key = format!("strata.{key}");
        if is_known(&key) {
            out.insert(key, v);
        } else if is_known(&strata_key) {
            out.insert(strata_key, v);
        }
    }
    out
}

fn is_known(key: &str) -> bool {
    BROKER_CONFIGS.iter().any(|d| d.name == key)
        || topic::TOPIC_CONFIGS.iter().any(|d| d.broker_synonym == key)
        || IGNORED_KAFKA_KEYS.contains(&key)
}

/// Parses `key=value` flag overrides.
pub fn parse_overrides(items: &[String]) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut out = BTreeMap::new();
    for item in items {
        let (k, v) = item
            .split_once('=')
            .ok_or_else(|| ConfigError::BadOverride(item.clone()))?;
        if k.trim().is_empty() {
            return Err(ConfigError::BadOverride(item.clone()));
        }
        out.insert(k.trim().to_string(), v.trim().to_string());
    }
    Ok(out)
}

fn invalid(key: &str, value: &str, reason: impl ToString) -> ConfigError {
    ConfigError::InvalidValue {
        key: key.into(),
        value: value.into(),
        reason: reason.to_string(),
    }
}

fn parse_listener(key: &str, spec: &str) -> Result<(String, String, u16), ConfigError> {
    let (name, addr) = spec
        .split_once("://")
        .ok_or_else(|| invalid(key, spec, "expected NAME://host:port"))?;
    let (host, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| invalid(key, spec, "expected NAME://host:port"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| invalid(key, spec, "port is not a number in 0..65535"))?;
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    Ok((name.trim().to_string(), host, port))
}

/// `controller.quorum.bootstrap.servers`: `host:port` entries, comma-separated.
fn parse_bootstrap_servers(text: &str) -> Result<Vec<String>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|entry| match entry.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {
                Ok(entry.to_string())
            }
            _ => Err(format!("{entry} is not host:port")),
        })
        .collect()
}

/// `cluster.id`: empty for none; else what the metadata quorum accepts as a cluster id.
fn cluster_id_setting(text: &str) -> Result<Option<String>, ConfigError> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    match strata_metadata::command::validate_cluster_id(text) {
        Ok(()) => Ok(Some(text.to_string())),
        Err(strata_metadata::ApplyError::InvalidClusterId { reason, .. }) => {
            Err(invalid("cluster.id", text, reason))
        }
        Err(e) => Err(invalid("cluster.id", text, e)),
    }
}

impl ClusterConfig {
    fn build(
        get: &dyn Fn(&str) -> String,
        long: &dyn Fn(&str) -> Result<i64, ConfigError>,
        node_id: u64,
        controller_listener: Option<(String, u16)>,
        log_dirs: &[PathBuf],
    ) -> Result<Option<ClusterConfig>, ConfigError> {
        let text = get("controller.quorum.voters");
        let voters = strata_metadata::MetadataConfig::parse_voters(&text)
            .map_err(|e| invalid("controller.quorum.voters", &text, e))?;
        let bootstrap_text = get("controller.quorum.bootstrap.servers");
        let bootstrap_servers = parse_bootstrap_servers(&bootstrap_text)
            .map_err(|e| invalid("controller.quorum.bootstrap.servers", &bootstrap_text, e))?;
        if voters.is_empty() && bootstrap_servers.is_empty() {
            return Ok(None);
        }
        let roles = get("process.roles");
        for role in roles.split(',').map(str::trim).filter(|r| !r.is_empty()) {
            if role != "broker" && role != "controller" {
                return Err(invalid(
                    "process.roles",
                    &roles,
                    "roles are broker and controller (every Strata node is both)",
                ));
            }
        }
        let own_entry = voters.get(&node_id).cloned();
        let (bind_text, advertised) =
            match (controller_listener, own_entry) {
                (Some((host, port)), entry) => {
                    let bind_host = if host.is_empty() {
                        "0.0.0.0".into()
                    } else {
                        host.clone()
                    };
                    let advertised = entry.unwrap_or_else(|| {
                        let h = if host.is_empty() || host == "0.0.0.0" {
                            "127.0.0.1".to_string()
                        } else {
                            host
                        };
                        format!("{h}:{port}")
                    });
                    (format!("{bind_host}:{port}"), advertised)
                }
                (None, Some(entry)) => (entry.clone(), entry),
                (None, None) => return Err(invalid(
                    "controller.listener.names",
                    &get("controller.listener.names"),
                    "a node that is not a voter needs a controller listener for the metadata RPC",
                )),
            };
        let rpc_bind = bind_text
            .to_socket_addrs()
            .map_err(|e| invalid("controller.listener.names", &bind_text, e))?
            .next()
            .ok_or_else(|| invalid("controller.listener.names", &bind_text, "does not resolve"))?;
        let ms = |k: &str| -> Result<std::time::Duration, ConfigError> {
            let v = long(k)?;
            if v < 1 {
                return Err(invalid(k, &get(k), "must be positive"));
            }
            Ok(std::time::Duration::from_millis(v as u64))
        };
        let session_timeout = ms("broker.session.timeout.ms")?;
        let heartbeat_interval = ms("broker.heartbeat.interval.ms")?;
        if heartbeat_interval >= session_timeout {
            return Err(invalid(
                "broker.heartbeat.interval.ms",
                &get("broker.heartbeat.interval.ms"),
                "must be below broker.session.timeout.ms",
            ));
        }
        let check_seconds = long("leader.imbalance.check.interval.seconds")?;
        if check_seconds < 1 {
            return Err(invalid(
                "leader.imbalance.check.interval.seconds",
                &get("leader.imbalance.check.interval.seconds"),
                "must be at least 1",
            ));
        }
        let rebalance = value::parse_bool(&get("auto.leader.rebalance.enable")).map_err(|e| {
            invalid(
                "auto.leader.rebalance.enable",
                &get("auto.leader.rebalance.enable"),
                e,
            )
        })?;
        let leader_imbalance_check_interval =
            rebalance.then(|| std::time::Duration::from_secs(check_seconds as u64));
        let auto_join =
            value::parse_bool(&get("controller.quorum.auto.join.enable")).map_err(|e| {
                invalid(
                    "controller.quorum.auto.join.enable",
                    &get("controller.quorum.auto.join.enable"),
                    e,
                )
            })?;
        let dir = get("metadata.log.dir");
        let metadata_log_dir = if dir.is_empty() {
            log_dirs[0].join("__cluster_metadata")
        } else {
            PathBuf::from(dir)
        };
        Ok(Some(ClusterConfig {
            voters,
            bootstrap_servers,
            auto_join,
            rpc_bind,
            rpc_advertised: advertised,
            metadata_log_dir,
            session_timeout,
            heartbeat_interval,
            leader_imbalance_check_interval,
        }))
    }
}

/// `queued.max.request.bytes`: -1 (or 0) is unbounded as in Kafka; a bound must hold the
/// largest request (`socket.request.max.bytes`), as Kafka requires.
fn queued_max_request_bytes(
    get: &dyn Fn(&str) -> String,
    long: &dyn Fn(&str) -> Result<i64, ConfigError>,
    socket_request_max_bytes: usize,
) -> Result<Option<u64>, ConfigError> {
    let key = "queued.max.request.bytes";
    let v = long(key)?;
    match v {
        i64::MIN..=-2 => Err(invalid(key, &get(key), "must be -1 (unbounded) or positive")),
        -1 | 0 => Ok(None),
        v if (v as u64) < socket_request_max_bytes as u64 => Err(invalid(
            key,
            &get(key),
            format!("must be at least socket.request.max.bytes ({socket_request_max_bytes}), or -1 for unbounded"),
        )),
        v => Ok(Some(v as u64)),
    }
}

impl BrokerConfig {
    /// Merges the sources (file < env < overrides) and validates the result.
    pub fn build(layers: &[BTreeMap<String, String>]) -> Result<BrokerConfig, ConfigError> {
        let explicit = merge_layers(layers);
        validate_explicit(&explicit)?;
        let get = |k: &str| effective_value(&explicit, k);
        let long = |k: &str| value::parse_long(k, &get(k)).map_err(|e| invalid(k, &get(k), e));
        let positive = |k: &str| -> Result<u64, ConfigError> {
            let v = long(k)?;
            if v < 1 {
                return Err(invalid(k, &get(k), "must be positive"));
            }
            Ok(v as u64)
        };
        let bool_of = |k: &str| value::parse_bool(&get(k)).map_err(|e| invalid(k, &get(k), e));
        let topic_defaults = static_topic_defaults(&explicit, &long)?;
        let node_id = node_id(&explicit, &get, &long)?;
        let (listeners, controller_listener) = parse_listeners(&get)?;
        let security = SecurityConfig::build(&explicit, &get, &listeners)?;
        let admin_listener = admin_listener(&get)?;
        let log_dirs = log_dirs(&explicit, &get)?;
        let (num_partitions, default_replication_factor) = new_topic_defaults(&get, &long)?;
        let tiering = TieringConfig::build(&get, &long, &bool_of, &log_dirs)?;
        let log_cleaner = LogCleanerConfig::build(&get, &long, &bool_of)?;
        let quota_sample = crate::quota::SampleConfig {
            samples: positive("quota.window.num")?.min(i32::MAX as u64) as u32,
            window_ms: positive("quota.window.size.seconds")?.min(i32::MAX as u64) as i64 * 1000,
        };
        let connection_limits = connection_limits(&get, &long, quota_sample, false)?;
        let replication = ReplicationConfig::build(&explicit, &listeners, &security, &positive)?;
        let cluster =
            ClusterConfig::build(&get, &long, node_id as u64, controller_listener, &log_dirs)?;
        let socket_request_max_bytes = positive("socket.request.max.bytes")? as usize;
        let queued_max_request_bytes =
            queued_max_request_bytes(&get, &long, socket_request_max_bytes)?;
        Ok(BrokerConfig {
            node_id,
            rack: Some(get("broker.rack")).filter(|r| !r.is_empty()),
            cluster_id: cluster_id_setting(&get("cluster.id"))?,
            listener: listeners[0].clone(),
            listeners,
            security,
            admin_listener,
            log_dirs,
            num_partitions,
            default_replication_factor,
            auto_create_topics_enable: bool_of("auto.create.topics.enable")?,
            delete_topic_enable: bool_of("delete.topic.enable")?,
            socket_request_max_bytes,
            queued_max_request_bytes,
            sasl_server_max_receive_size: positive("sasl.server.max.receive.size")? as usize,
            connections_max_idle_ms: positive("connections.max.idle.ms")?,
            fetch_max_bytes: positive("fetch.max.bytes")? as usize,
            log_retention_check_interval_ms: positive("log.retention.check.interval.ms")?,
            log_flush_scheduler_interval_ms: positive("log.flush.scheduler.interval.ms")?,
            log_flush_offset_checkpoint_interval_ms: positive(
                "log.flush.offset.checkpoint.interval.ms",
            )?,
            producer_id_expiration_ms: positive("producer.id.expiration.ms")? as i64,
            offsets_topic_num_partitions: positive("offsets.topic.num.partitions")? as i32,
            offsets_topic_segment_bytes: positive("offsets.topic.segment.bytes")? as i64,
            offsets_topic_replication_factor: positive("offsets.topic.replication.factor")?
                .min(i16::MAX as u64) as i16,
            transaction_state_log_replication_factor: positive(
                "transaction.state.log.replication.factor",
            )?
            .min(i16::MAX as u64) as i16,
            transaction_state_log_min_isr: positive("transaction.state.log.min.isr")?
                .min(i32::MAX as u64) as i32,
            transaction_state_log_num_partitions: positive("transaction.state.log.num.partitions")?
                as i32,
            share_state_topic_num_partitions: positive(
                "share.coordinator.state.topic.num.partitions",
            )?
            .min(i32::MAX as u64) as i32,
            share_state_topic_segment_bytes: positive(
                "share.coordinator.state.topic.segment.bytes",
            )? as i64,
            share_state_topic_replication_factor: positive(
                "share.coordinator.state.topic.replication.factor",
            )?
            .min(i16::MAX as u64) as i16,
            share_state_topic_min_isr: positive("share.coordinator.state.topic.min.isr")?
                .min(i32::MAX as u64) as i32,
            transaction_state_log_segment_bytes: positive("transaction.state.log.segment.bytes")?
                as i64,
            transaction_max_timeout_ms: positive("transaction.max.timeout.ms")?.min(i32::MAX as u64)
                as i32,
            transactional_id_expiration_ms: positive("transactional.id.expiration.ms")? as i64,
            transaction_abort_timed_out_transaction_cleanup_interval_ms: positive(
                "transaction.abort.timed.out.transaction.cleanup.interval.ms",
            )?,
            transaction_remove_expired_transaction_cleanup_interval_ms: positive(
                "transaction.remove.expired.transaction.cleanup.interval.ms",
            )?,
            offsets_retention_ms: positive("offsets.retention.minutes")? as i64 * 60_000,
            offset_metadata_max_bytes: positive("offset.metadata.max.bytes")? as usize,
            group_initial_rebalance_delay_ms: long("group.initial.rebalance.delay.ms")?.max(0)
                as u64,
            group_min_session_timeout_ms: positive("group.min.session.timeout.ms")?,
            group_max_session_timeout_ms: positive("group.max.session.timeout.ms")?,
            group_consumer_session_timeout_ms: positive("group.consumer.session.timeout.ms")?,
            group_consumer_heartbeat_interval_ms: positive("group.consumer.heartbeat.interval.ms")?,
            group_consumer_migration_policy: {
                let k = "group.consumer.migration.policy";
                crate::coordinator::consumer_group::classic::MigrationPolicy::parse(&get(k))
                    .ok_or_else(|| {
                        invalid(
                            k,
                            &get(k),
                            "must be one of disabled, upgrade, downgrade, bidirectional",
                        )
                    })?
            },
            tiering,
            log_cleaner,
            quota_sample,
            connection_limits,
            replication,
            cluster,
            topic_defaults,
            explicit,
        })
    }

    /// Loads from an optional file, the process environment and flag overrides.
    pub fn load(file: Option<&Path>, overrides: &[String]) -> Result<BrokerConfig, ConfigError> {
        let file_layer = match file {
            Some(p) => read_file(p)?,
            None => BTreeMap::new(),
        };
        let env_layer = from_env(std::env::vars());
        let flag_layer = parse_overrides(overrides)?;
        BrokerConfig::build(&[file_layer, env_layer, flag_layer])
    }

    /// The effective config of a topic with the given overrides.
    pub fn topic_config(&self, overrides: &BTreeMap<String, String>) -> TopicConfig {
        TopicConfig::resolve(overrides, &self.topic_defaults)
    }

    /// Effective broker-level values for DescribeConfigs: (name, value, source, kind).
    pub fn describe(&self) -> Vec<(String, String, ConfigSource, Kind)> {
        let mut out = Vec::new();
        for d in BROKER_CONFIGS {
            let (v, src) = match self.explicit.get(d.name) {
                Some(v) => (v.clone(), ConfigSource::StaticBroker),
                None => (d.default.to_string(), ConfigSource::Default),
            };
            out.push((d.name.to_string(), v, src, d.kind));
        }
        for d in topic::TOPIC_CONFIGS {
            let (v, src) = match self.topic_defaults.get(d.broker_synonym) {
                Some((v, s)) => (v.clone(), *s),
                None => (d.default.to_string(), ConfigSource::Default),
            };
            if !out.iter().any(|(n, ..)| n == d.broker_synonym) {
                out.push((d.broker_synonym.to_string(), v, src, d.kind));
            }
        }
        out
    }
}

/// The explicitly set keys of all layers; a later layer's value wins.
fn merge_layers(layers: &[BTreeMap<String, String>]) -> BTreeMap<String, String> {
    let mut explicit = BTreeMap::new();
    for layer in layers {
        for (k, v) in layer {
            explicit.insert(k.clone(), v.clone());
        }
    }
    explicit
}

/// Checks every explicitly set key: a broker setting or a topic default's `log.*` synonym must
/// hold a valid value; an unknown `strata.*` key is an error (a typo would silently do
/// nothing); Kafka settings Strata does not use are logged and ignored.
fn validate_explicit(explicit: &BTreeMap<String, String>) -> Result<(), ConfigError> {
    for (k, v) in explicit {
        if let Some(d) = BROKER_CONFIGS.iter().find(|d| d.name == k) {
            value::check(k, d.kind, v).map_err(|e| invalid(k, v, e))?;
        } else if let Some(d) = topic::TOPIC_CONFIGS.iter().find(|d| d.broker_synonym == k) {
            topic::validate(d.name, v).map_err(|e| match e {
                topic::TopicConfigError::Invalid { reason, .. } => invalid(k, v, reason),
                other => invalid(k, v, other),
            })?;
        } else if let Some(checked) = group::check_broker_setting(k, v) {
            // A bound or fallback of group configs (`group.consumer.min.session.timeout.ms`).
            checked.map_err(|e| invalid(k, v, e))?;
        } else if k.starts_with("listener.name.") {
            // Per-listener settings (ssl.*, sasl.*): read by SecurityConfig::build.
        } else if k.starts_with("strata.") {
            return Err(ConfigError::UnknownStrataKey(k.clone()));
        } else if !IGNORED_KAFKA_KEYS.contains(&k.as_str()) && !SECRET_KEYS.contains(&k.as_str()) {
            tracing::warn!(key = %k, "unknown setting ignored");
        }
    }
    Ok(())
}

/// A setting's value: the one set, or else its default (empty for a key without one).
fn effective_value(explicit: &BTreeMap<String, String>, k: &str) -> String {
    explicit
        .get(k)
        .cloned()
        .or_else(|| {
            BROKER_CONFIGS
                .iter()
                .find(|d| d.name == k)
                .map(|d| d.default.to_string())
        })
        .unwrap_or_default()
}

/// Topic defaults from the `log.*` synonyms set in the file, with Kafka's hours and minutes
/// fallbacks for `log.retention.ms` and `log.roll.ms`.
fn static_topic_defaults(
    explicit: &BTreeMap<String, String>,
    long: &dyn Fn(&str) -> Result<i64, ConfigError>,
) -> Result<BrokerDefaults, ConfigError> {
    let mut topic_defaults = BrokerDefaults::new();
    for d in topic::TOPIC_CONFIGS {
        if let Some(v) = explicit.get(d.broker_synonym) {
            topic_defaults.insert(
                d.broker_synonym.to_string(),
                (v.clone(), ConfigSource::StaticBroker),
            );
        }
    }
    if !explicit.contains_key("log.retention.ms") {
        let ms = if explicit.contains_key("log.retention.minutes") {
            Some(long("log.retention.minutes")? * 60_000)
        } else if explicit.contains_key("log.retention.hours") {
            Some(long("log.retention.hours")? * 3_600_000)
        } else {
            None
        };
        if let Some(ms) = ms {
            topic_defaults.insert(
                "log.retention.ms".into(),
                (ms.to_string(), ConfigSource::StaticBroker),
            );
        }
    }
    if !explicit.contains_key("log.roll.ms") && explicit.contains_key("log.roll.hours") {
        let ms = long("log.roll.hours")? * 3_600_000;
        topic_defaults.insert(
            "log.roll.ms".into(),
            (ms.to_string(), ConfigSource::StaticBroker),
        );
    }
    Ok(topic_defaults)
}

/// `node.id`, or Kafka's older `broker.id` when that is set (non-negative) and `node.id` is
/// not: a non-negative 32-bit integer.
fn node_id(
    explicit: &BTreeMap<String, String>,
    get: &dyn Fn(&str) -> String,
    long: &dyn Fn(&str) -> Result<i64, ConfigError>,
) -> Result<i32, ConfigError> {
    let broker_id = long("broker.id")?;
    let node = long("node.id")?;
    let node_id = if explicit.contains_key("node.id") || broker_id < 0 {
        node
    } else {
        broker_id
    };
    if node_id < 0 || node_id > i32::MAX as i64 {
        return Err(invalid(
            "node.id",
            &get("node.id"),
            "must be a non-negative integer",
        ));
    }
    Ok(node_id as i32)
}

/// The Kafka listeners (`listeners`, `advertised.listeners`,
/// `listener.security.protocol.map`) and the first KRaft controller listener, where the
/// metadata quorum's RPC binds in cluster mode.
#[allow(clippy::type_complexity)]
fn parse_listeners(
    get: &dyn Fn(&str) -> String,
) -> Result<(Vec<Listener>, Option<(String, u16)>), ConfigError> {
    let protocol_map = parse_protocol_map(&get("listener.security.protocol.map"))?;
    let listener_specs = get("listeners");
    let mut advertised: BTreeMap<String, (String, u16)> = BTreeMap::new();
    for spec in get("advertised.listeners")
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        let (n, h, p) = parse_listener("advertised.listeners", spec)?;
        advertised.insert(n, (h, p));
    }
    let mut listeners: Vec<Listener> = Vec::new();
    let mut controller_listener: Option<(String, u16)> = None;
    for spec in listener_specs
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        let (name, host, port) = parse_listener("listeners", spec)?;
        if controller_listener_names(&get("controller.listener.names")).contains(&name) {
            // KRaft controller listeners: not Kafka protocol. In cluster mode the first
            // one is where the metadata quorum's RPC binds.
            if controller_listener.is_none() {
                controller_listener = Some((host, port));
            }
            continue;
        }
        if listeners.iter().any(|l| l.name == name) {
            return Err(invalid("listeners", spec, "listener names must be unique"));
        }
        let security = match protocol_map.get(&name) {
            Some(p) => *p,
            None => SecurityProtocol::parse(&name).ok_or_else(|| {
                invalid(
                    "listener.security.protocol.map",
                    &get("listener.security.protocol.map"),
                    format!("no security protocol for listener {name}"),
                )
            })?,
        };
        let bind_host = if host.is_empty() {
            "0.0.0.0".to_string()
        } else {
            host.clone()
        };
        let bind = (bind_host.as_str(), port)
            .to_socket_addrs()
            .map_err(|e| invalid("listeners", spec, e))?
            .next()
            .ok_or_else(|| invalid("listeners", spec, "host does not resolve"))?;
        let (advertised_host, advertised_port) = match advertised.get(&name) {
            Some((h, p)) => (h.clone(), *p),
            None if host.is_empty() || host == "0.0.0.0" => ("127.0.0.1".to_string(), port),
            None => (host, port),
        };
        listeners.push(Listener {
            name,
            security,
            bind,
            advertised_host,
            advertised_port,
        });
    }
    if listeners.is_empty() {
        return Err(invalid("listeners", &listener_specs, "no listener"));
    }
    Ok((listeners, controller_listener))
}

/// `strata.admin.listener`, the address of the HTTP `/health` and `/metrics` endpoint.
fn admin_listener(get: &dyn Fn(&str) -> String) -> Result<SocketAddr, ConfigError> {
    let admin = get("strata.admin.listener");
    admin
        .to_socket_addrs()
        .map_err(|e| invalid("strata.admin.listener", &admin, e))?
        .next()
        .ok_or_else(|| invalid("strata.admin.listener", &admin, "does not resolve"))
}

/// `log.dirs`, or `log.dir` when `log.dirs` is not set: at least one directory.
fn log_dirs(
    explicit: &BTreeMap<String, String>,
    get: &dyn Fn(&str) -> String,
) -> Result<Vec<PathBuf>, ConfigError> {
    let dirs = if explicit.contains_key("log.dirs") {
        get("log.dirs")
    } else {
        get("log.dir")
    };
    let log_dirs: Vec<PathBuf> = dirs
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .collect();
    if log_dirs.is_empty() {
        return Err(invalid(
            "log.dirs",
            &dirs,
            "at least one directory is required",
        ));
    }
    Ok(log_dirs)
}

/// What a topic created without them gets: `num.partitions` and
/// `default.replication.factor`.
fn new_topic_defaults(
    get: &dyn Fn(&str) -> String,
    long: &dyn Fn(&str) -> Result<i64, ConfigError>,
) -> Result<(i32, i16), ConfigError> {
    let num_partitions = long("num.partitions")?;
    if num_partitions < 1 {
        return Err(invalid(
            "num.partitions",
            &get("num.partitions"),
            "must be at least 1",
        ));
    }
    let rf = long("default.replication.factor")?;
    if rf < 1 || rf > i16::MAX as i64 {
        return Err(invalid(
            "default.replication.factor",
            &get("default.replication.factor"),
            "must be at least 1",
        ));
    }
    Ok((num_partitions as i32, rf as i16))
}

/// A long setting that must not be negative (a rate).
fn non_negative(explicit: &BTreeMap<String, String>, k: &str) -> Result<i64, ConfigError> {
    let v = effective_value(explicit, k);
    match value::parse_long(k, &v) {
        Ok(n) if n >= 0 => Ok(n),
        _ => Err(invalid(k, &v, "must be at least 0")),
    }
}

impl ReplicationConfig {
    /// The inter-broker listener and this broker's security on it, and the `replica.*`
    /// settings (positive numbers).
    fn build(
        explicit: &BTreeMap<String, String>,
        listeners: &[Listener],
        security: &SecurityConfig,
        positive: &dyn Fn(&str) -> Result<u64, ConfigError>,
    ) -> Result<ReplicationConfig, ConfigError> {
        let ms = |k: &str| positive(k).map(std::time::Duration::from_millis);
        let int =
            |k: &str| -> Result<i32, ConfigError> { Ok(positive(k)?.min(i32::MAX as u64) as i32) };
        let inter_broker = InterBrokerSecurity::build(explicit, listeners, security)?;
        let named = [
            "inter.broker.listener.name",
            "security.inter.broker.protocol",
        ]
        .iter()
        .any(|k| explicit.get(*k).is_some_and(|v| !v.trim().is_empty()));
        Ok(ReplicationConfig {
            inter_broker_listener_name: Some(inter_broker.listener.clone())
                .filter(|n| named && !n.is_empty()),
            inter_broker,
            replica_lag_time_max: ms("replica.lag.time.max.ms")?,
            fetch_wait_max: ms("replica.fetch.wait.max.ms")?,
            fetch_min_bytes: int("replica.fetch.min.bytes")?,
            fetch_max_bytes: int("replica.fetch.max.bytes")?,
            fetch_response_max_bytes: int("replica.fetch.response.max.bytes")?,
            fetch_backoff: ms("replica.fetch.backoff.ms")?,
            socket_timeout: ms("replica.socket.timeout.ms")?,
            leader_throttled_rate: non_negative(explicit, "leader.replication.throttled.rate")?,
            follower_throttled_rate: non_negative(explicit, "follower.replication.throttled.rate")?,
            quota_window_num: int("replication.quota.window.num")? as u32,
            quota_window_size_ms: positive("replication.quota.window.size.seconds")?
                .saturating_mul(1000)
                .min(i64::MAX as u64) as i64,
        })
    }
}

#[cfg(test)]
mod tests;
