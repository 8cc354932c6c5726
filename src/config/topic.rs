//! Topic configs with Kafka's names, defaults and broker-level synonyms.
//!
//! A topic's effective value is its override (set by CreateTopics / AlterConfigs), else the
//! broker's `log.*` synonym when the operator set it, else Kafka's default. [`TOPIC_CONFIGS`] is
//! the single table that drives validation, resolution and DescribeConfigs.

use std::collections::BTreeMap;

use super::value::{self, Kind, ValueError};

pub struct TopicConfigDef {
    pub name: &'static str,
    /// The broker config that supplies the default (Kafka's "synonym").
    pub broker_synonym: &'static str,
    pub kind: Kind,
    pub default: &'static str,
    validate: fn(&str, &str) -> Result<(), ValueError>,
}

fn any(_: &str, _: &str) -> Result<(), ValueError> {
    Ok(())
}

fn long_at_least(min: i64) -> impl Fn(&str, &str) -> Result<(), ValueError> {
    move |k, v| {
        let n = value::parse_long(k, v)?;
        if n < min {
            return Err(ValueError::Range {
                got: v.into(),
                range: format!("[{min},...]"),
            });
        }
        Ok(())
    }
}

macro_rules! at_least {
    ($min:expr) => {{
        fn f(k: &str, v: &str) -> Result<(), ValueError> {
            long_at_least($min)(k, v)
        }
        f
    }};
}

fn one_of(v: &str, allowed: &[&str]) -> Result<(), ValueError> {
    if allowed.contains(&v.trim()) {
        Ok(())
    } else {
        Err(ValueError::NotAllowed {
            got: v.into(),
            allowed: allowed.join(", "),
        })
    }
}

/// Kafka's `ThrottledReplicaListValidator`.
fn throttled_replicas(k: &str, v: &str) -> Result<(), ValueError> {
    ThrottledReplicas::parse(v).map(drop).ok_or_else(|| {
        ValueError::Format(format!(
            "{k} must be the literal '*' or a list of replicas in the following format: \
             [partitionId]:[brokerId],[partitionId]:[brokerId],..."
        ))
    })
}

/// `leader.replication.throttled.replicas` / `follower.replication.throttled.replicas`: the
/// replicas whose replication traffic counts against the broker's throttle rate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ThrottledReplicas {
    #[default]
    None,
    /// `*`: every replica of the topic.
    All,
    /// `partition:broker` pairs.
    Some(Vec<(i32, i32)>),
}

impl ThrottledReplicas {
    /// Parses Kafka's form: `*`, or a list of `partition:broker` items (each trimmed; empty
    /// items, as in a trailing comma, are allowed). None if invalid.
    pub fn parse(v: &str) -> Option<ThrottledReplicas> {
        let v = v.trim();
        if v == "*" {
            return Some(ThrottledReplicas::All);
        }
        let mut pairs = Vec::new();
        for item in v.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (p, b) = item.split_once(':')?;
            let digits = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
            if !digits(p) || !digits(b) {
                return None;
            }
            pairs.push((p.parse().ok()?, b.parse().ok()?));
        }
        Some(if pairs.is_empty() {
            ThrottledReplicas::None
        } else {
            ThrottledReplicas::Some(pairs)
        })
    }

    /// Whether the replica of `partition` on `broker` is throttled.
    pub fn includes(&self, partition: i32, broker: i32) -> bool {
        match self {
            ThrottledReplicas::None => false,
            ThrottledReplicas::All => true,
            ThrottledReplicas::Some(pairs) => pairs.contains(&(partition, broker)),
        }
    }
}

fn cleanup_policy(_: &str, v: &str) -> Result<(), ValueError> {
    for p in v.split(',') {
        one_of(p, &["delete", "compact"])?;
    }
    Ok(())
}
fn compression_type(_: &str, v: &str) -> Result<(), ValueError> {
    one_of(
        v,
        &["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"],
    )
}
fn timestamp_type(_: &str, v: &str) -> Result<(), ValueError> {
    one_of(v, &["CreateTime", "LogAppendTime"])
}
fn ratio(_: &str, v: &str) -> Result<(), ValueError> {
    let d = value::parse_double(v)?;
    if (0.0..=1.0).contains(&d) {
        Ok(())
    } else {
        Err(ValueError::Range {
            got: v.into(),
            range: "[0,...,1]".into(),
        })
    }
}
fn boolean(_: &str, v: &str) -> Result<(), ValueError> {
    value::parse_bool(v).map(drop)
}
fn int_at_least_one(k: &str, v: &str) -> Result<(), ValueError> {
    let n = value::parse_int(k, v)?;
    if n < 1 {
        return Err(ValueError::Range {
            got: v.into(),
            range: "[1,...]".into(),
        });
    }
    Ok(())
}
fn int_at_least_zero(k: &str, v: &str) -> Result<(), ValueError> {
    let n = value::parse_int(k, v)?;
    if n < 0 {
        return Err(ValueError::Range {
            got: v.into(),
            range: "[0,...]".into(),
        });
    }
    Ok(())
}
/// Kafka 4.x refuses segments under 1 MiB (KIP-1030).
fn segment_bytes(k: &str, v: &str) -> Result<(), ValueError> {
    let n = value::parse_int(k, v)?;
    if n < 1024 * 1024 {
        return Err(ValueError::Range {
            got: v.into(),
            range: "[1048576,...]".into(),
        });
    }
    Ok(())
}

/// Kafka's `internal.segment.bytes`: an undocumented topic config that overrides
/// `segment.bytes` without its 1 MiB floor, for tests that need many small segments. It is
/// accepted on create/alter but not listed by DescribeConfigs, as in Kafka.
pub const INTERNAL_SEGMENT_BYTES: &str = "internal.segment.bytes";

/// Continuous Parquet export (Strata only): `strata.export.parquet=true` makes the tiering task
/// export each uploaded segment to `strata.export.parquet.target` (default `<remote store
/// url>/export`), in files of up to `strata.export.parquet.file.bytes`. Accepted on
/// create/alter and read from the topic's overrides; not listed by DescribeConfigs.
pub const EXPORT_PARQUET: &str = "strata.export.parquet";
pub const EXPORT_PARQUET_TARGET: &str = "strata.export.parquet.target";
pub const EXPORT_PARQUET_FILE_BYTES: &str = "strata.export.parquet.file.bytes";
/// With `strata.export.parquet=true`: the topic's export directory is an Apache Iceberg table,
/// committed after each export (`strata export --iceberg`, continuously).
pub const EXPORT_ICEBERG: &str = "strata.export.iceberg";
/// Rehydration (Strata only): remote segments that local retention would keep come back to
/// the broker's disk (`strata_tiering::rehydrate`). Off by default.
pub const REMOTE_REHYDRATE_ENABLE: &str = "strata.remote.rehydrate.enable";
/// With rehydration on: the most bytes a partition keeps locally beyond its local retention
/// for remote ranges consumers read again (0: only local retention brings data back).
pub const REMOTE_REHYDRATE_HOT_BYTES: &str = "strata.remote.rehydrate.hot.bytes";
/// With rehydration on: how long a range read again stays local after its last read.
pub const REMOTE_REHYDRATE_HOT_MS: &str = "strata.remote.rehydrate.hot.ms";

/// Kafka's per-record bound on decompressed record bodies (see [`TOPIC_CONFIGS`]).
pub const MAX_DECOMPRESSED_MESSAGE_BYTES: &str = "max.decompressed.message.bytes";
/// Strata's per-batch bound on decompressed records (see [`TOPIC_CONFIGS`]).
pub const MAX_DECOMPRESSED_BATCH_BYTES: &str = "strata.max.decompressed.batch.bytes";

const LONG_MAX: &str = "9223372036854775807";

pub static TOPIC_CONFIGS: &[TopicConfigDef] = &[
    TopicConfigDef {
        name: "cleanup.policy",
        broker_synonym: "log.cleanup.policy",
        kind: Kind::List,
        default: "delete",
        validate: cleanup_policy,
    },
    TopicConfigDef {
        name: "compression.type",
        broker_synonym: "compression.type",
        kind: Kind::String,
        default: "producer",
        validate: compression_type,
    },
    TopicConfigDef {
        name: "compression.gzip.level",
        broker_synonym: "compression.gzip.level",
        kind: Kind::Int,
        default: "-1",
        validate: any,
    },
    TopicConfigDef {
        name: "compression.lz4.level",
        broker_synonym: "compression.lz4.level",
        kind: Kind::Int,
        default: "9",
        validate: any,
    },
    TopicConfigDef {
        name: "compression.zstd.level",
        broker_synonym: "compression.zstd.level",
        kind: Kind::Int,
        default: "3",
        validate: any,
    },
    TopicConfigDef {
        name: "delete.retention.ms",
        broker_synonym: "log.cleaner.delete.retention.ms",
        kind: Kind::Long,
        default: "86400000",
        validate: at_least!(0),
    },
    // A share group's dead-letter topic must have this set (KIP-1191, see
    // `share::dead_letter`).
    TopicConfigDef {
        name: "errors.deadletterqueue.group.enable",
        broker_synonym: "",
        kind: Kind::Boolean,
        default: "false",
        validate: boolean,
    },
    TopicConfigDef {
        name: "file.delete.delay.ms",
        broker_synonym: "log.segment.delete.delay.ms",
        kind: Kind::Long,
        default: "60000",
        validate: at_least!(0),
    },
    TopicConfigDef {
        name: "flush.messages",
        broker_synonym: "log.flush.interval.messages",
        kind: Kind::Long,
        default: LONG_MAX,
        validate: at_least!(1),
    },
    TopicConfigDef {
        name: "flush.ms",
        broker_synonym: "log.flush.interval.ms",
        kind: Kind::Long,
        default: LONG_MAX,
        validate: at_least!(0),
    },
    TopicConfigDef {
        name: "follower.replication.throttled.replicas",
        broker_synonym: "",
        kind: Kind::List,
        default: "",
        validate: throttled_replicas,
    },
    TopicConfigDef {
        name: "index.interval.bytes",
        broker_synonym: "log.index.interval.bytes",
        kind: Kind::Int,
        default: "4096",
        validate: int_at_least_zero,
    },
    TopicConfigDef {
        name: "leader.replication.throttled.replicas",
        broker_synonym: "",
        kind: Kind::List,
        default: "",
        validate: throttled_replicas,
    },
    TopicConfigDef {
        name: "local.retention.bytes",
        broker_synonym: "log.local.retention.bytes",
        kind: Kind::Long,
        default: "-2",
        validate: at_least!(-2),
    },
    TopicConfigDef {
        name: "local.retention.ms",
        broker_synonym: "log.local.retention.ms",
        kind: Kind::Long,
        default: "-2",
        validate: at_least!(-2),
    },
    TopicConfigDef {
        name: "max.compaction.lag.ms",
        broker_synonym: "log.cleaner.max.compaction.lag.ms",
        kind: Kind::Long,
        default: LONG_MAX,
        validate: at_least!(1),
    },
    // Kafka's `max.decompressed.message.bytes` (KAFKA trunk, undocumented there): the
    // largest record body a compressed batch may hold once decompressed; a bigger one is
    // INVALID_RECORD. Default `Records.SOFT_MAX_ARRAY_LENGTH`; the broker default has the
    // same name.
    TopicConfigDef {
        name: MAX_DECOMPRESSED_MESSAGE_BYTES,
        broker_synonym: MAX_DECOMPRESSED_MESSAGE_BYTES,
        kind: Kind::Int,
        default: "2147483639",
        validate: int_at_least_zero,
    },
    // Strata's bound on what one compressed batch's records may decompress to (Kafka streams
    // and has none): every place that decompresses a batch (produce validation,
    // recompression, the cleaner, export, record replay, timestamp lookups) stops there, and
    // produce refuses a batch past it with INVALID_RECORD. Never below max.message.bytes.
    TopicConfigDef {
        name: MAX_DECOMPRESSED_BATCH_BYTES,
        broker_synonym: "strata.log.max.decompressed.batch.bytes",
        kind: Kind::Int,
        default: "67108864",
        validate: int_at_least_zero,
    },
    TopicConfigDef {
        name: "max.message.bytes",
        broker_synonym: "message.max.bytes",
        kind: Kind::Int,
        default: "1048588",
        validate: int_at_least_zero,
    },
    TopicConfigDef {
        name: "message.timestamp.after.max.ms",
        broker_synonym: "log.message.timestamp.after.max.ms",
        kind: Kind::Long,
        default: "3600000",
        validate: at_least!(0),
    },
    TopicConfigDef {
        name: "message.timestamp.before.max.ms",
        broker_synonym: "log.message.timestamp.before.max.ms",
        kind: Kind::Long,
        default: LONG_MAX,
        validate: at_least!(0),
    },
    TopicConfigDef {
        name: "message.timestamp.type",
        broker_synonym: "log.message.timestamp.type",
        kind: Kind::String,
        default: "CreateTime",
        validate: timestamp_type,
    },
    TopicConfigDef {
        name: "min.cleanable.dirty.ratio",
        broker_synonym: "log.cleaner.min.cleanable.ratio",
        kind: Kind::Double,
        default: "0.5",
        validate: ratio,
    },
    TopicConfigDef {
        name: "min.compaction.lag.ms",
        broker_synonym: "log.cleaner.min.compaction.lag.ms",
        kind: Kind::Long,
        default: "0",
        validate: at_least!(0),
    },
    TopicConfigDef {
        name: "min.insync.replicas",
        broker_synonym: "min.insync.replicas",
        kind: Kind::Int,
        default: "1",
        validate: int_at_least_one,
    },
    TopicConfigDef {
        name: "preallocate",
        broker_synonym: "log.preallocate",
        kind: Kind::Boolean,
        default: "false",
        validate: boolean,
    },
    TopicConfigDef {
        name: "remote.copy.lag.bytes",
        broker_synonym: "log.remote.copy.lag.bytes",
        kind: Kind::Long,
        default: "-1",
        validate: at_least!(-1),
    },
    TopicConfigDef {
        name: "remote.copy.lag.ms",
        broker_synonym: "log.remote.copy.lag.ms",
        kind: Kind::Long,
        default: "0",
        validate: at_least!(-1),
    },
    TopicConfigDef {
        name: "remote.log.copy.disable",
        broker_synonym: "",
        kind: Kind::Boolean,
        default: "false",
        validate: boolean,
    },
    TopicConfigDef {
        name: "remote.log.delete.on.disable",
        broker_synonym: "",
        kind: Kind::Boolean,
        default: "false",
        validate: boolean,
    },
    TopicConfigDef {
        name: "remote.storage.enable",
        // Not a Kafka setting: Strata's broker-wide default for remote.storage.enable.
        broker_synonym: "log.remote.storage.enable",
        kind: Kind::Boolean,
        default: "false",
        validate: boolean,
    },
    TopicConfigDef {
        name: "retention.bytes",
        broker_synonym: "log.retention.bytes",
        kind: Kind::Long,
        default: "-1",
        validate: any,
    },
    TopicConfigDef {
        name: "retention.ms",
        broker_synonym: "log.retention.ms",
        kind: Kind::Long,
        default: "604800000",
        validate: at_least!(-1),
    },
    TopicConfigDef {
        name: "segment.bytes",
        broker_synonym: "log.segment.bytes",
        kind: Kind::Int,
        default: "1073741824",
        validate: segment_bytes,
    },
    TopicConfigDef {
        name: "segment.index.bytes",
        broker_synonym: "log.index.size.max.bytes",
        kind: Kind::Int,
        default: "10485760",
        validate: int_at_least_zero,
    },
    TopicConfigDef {
        name: "segment.jitter.ms",
        broker_synonym: "log.roll.jitter.ms",
        kind: Kind::Long,
        default: "0",
        validate: at_least!(0),
    },
    TopicConfigDef {
        name: "segment.ms",
        broker_synonym: "log.roll.ms",
        kind: Kind::Long,
        default: "604800000",
        validate: at_least!(1),
    },
    TopicConfigDef {
        name: "unclean.leader.election.enable",
        broker_synonym: "unclean.leader.election.enable",
        kind: Kind::Boolean,
        default: "false",
        validate: boolean,
    },
];

pub fn def(name: &str) -> Option<&'static TopicConfigDef> {
    TOPIC_CONFIGS
        .iter()
        .chain(STRATA_TOPIC_CONFIGS)
        .find(|d| d.name == name)
}

fn export_file_bytes(k: &str, v: &str) -> Result<(), ValueError> {
    long_at_least(1 << 20)(k, v)
}

/// Strata's own topic configs: settable (CreateTopics, AlterConfigs, IncrementalAlterConfigs)
/// and described when set, but not listed among Kafka's configs and without broker synonym.
pub static STRATA_TOPIC_CONFIGS: &[TopicConfigDef] = &[
    TopicConfigDef {
        name: EXPORT_PARQUET,
        broker_synonym: "",
        kind: Kind::Boolean,
        default: "false",
        validate: boolean,
    },
    TopicConfigDef {
        name: EXPORT_PARQUET_TARGET,
        broker_synonym: "",
        kind: Kind::String,
        default: "",
        validate: any,
    },
    TopicConfigDef {
        name: EXPORT_PARQUET_FILE_BYTES,
        broker_synonym: "",
        kind: Kind::Long,
        default: "268435456",
        validate: export_file_bytes,
    },
    TopicConfigDef {
        name: EXPORT_ICEBERG,
        broker_synonym: "",
        kind: Kind::Boolean,
        default: "false",
        validate: boolean,
    },
    TopicConfigDef {
        name: REMOTE_REHYDRATE_ENABLE,
        broker_synonym: "",
        kind: Kind::Boolean,
        default: "false",
        validate: boolean,
    },
    TopicConfigDef {
        name: REMOTE_REHYDRATE_HOT_BYTES,
        broker_synonym: "",
        kind: Kind::Long,
        default: "1073741824",
        validate: rehydrate_hot_bytes,
    },
    TopicConfigDef {
        name: REMOTE_REHYDRATE_HOT_MS,
        broker_synonym: "",
        kind: Kind::Long,
        default: "3600000",
        validate: rehydrate_hot_ms,
    },
];

fn rehydrate_hot_bytes(k: &str, v: &str) -> Result<(), ValueError> {
    long_at_least(0)(k, v)
}

fn rehydrate_hot_ms(k: &str, v: &str) -> Result<(), ValueError> {
    long_at_least(1)(k, v)
}

/// Why a topic config was refused. Maps to INVALID_CONFIG.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopicConfigError {
    #[error("Unknown topic config name: {0}")]
    Unknown(String),
    #[error("Invalid value {value} for configuration {name}: {reason}")]
    Invalid {
        name: String,
        value: String,
        reason: ValueError,
    },
}

/// Validates one override.
pub fn validate(name: &str, raw: &str) -> Result<(), TopicConfigError> {
    if name == INTERNAL_SEGMENT_BYTES {
        return value::parse_int(name, raw)
            .and_then(|n| {
                if n >= 14 {
                    Ok(())
                } else {
                    Err(ValueError::Range {
                        got: raw.into(),
                        range: "[14,...]".into(),
                    })
                }
            })
            .map_err(|reason| TopicConfigError::Invalid {
                name: name.into(),
                value: raw.into(),
                reason,
            });
    }
    let d = def(name).ok_or_else(|| TopicConfigError::Unknown(name.to_string()))?;
    value::check(name, d.kind, raw)
        .and_then(|_| (d.validate)(name, raw))
        .map_err(|reason| TopicConfigError::Invalid {
            name: name.into(),
            value: raw.into(),
            reason,
        })
}

/// Where an effective value came from (DescribeConfigs `config_source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    DynamicTopic,
    DynamicBroker,
    DynamicDefaultBroker,
    StaticBroker,
    Default,
}

impl ConfigSource {
    pub fn code(self) -> i8 {
        match self {
            ConfigSource::DynamicTopic => 1,
            ConfigSource::DynamicBroker => 2,
            ConfigSource::DynamicDefaultBroker => 3,
            ConfigSource::StaticBroker => 4,
            ConfigSource::Default => 5,
        }
    }
}

/// The broker values a topic falls back to: key -> (value, source).
pub type BrokerDefaults = BTreeMap<String, (String, ConfigSource)>;

/// The typed, effective configuration of one topic.
#[derive(Debug, Clone, PartialEq)]
pub struct TopicConfig {
    pub cleanup_policy_compact: bool,
    pub cleanup_policy_delete: bool,
    pub compression_type: String,
    pub flush_messages: i64,
    pub flush_ms: i64,
    pub index_interval_bytes: usize,
    pub max_message_bytes: usize,
    /// Kafka's `max.decompressed.message.bytes`.
    pub max_decompressed_message_bytes: u64,
    /// `strata.max.decompressed.batch.bytes`, at least `max_message_bytes`.
    pub max_decompressed_batch_bytes: u64,
    pub message_timestamp_after_max_ms: i64,
    pub message_timestamp_before_max_ms: i64,
    pub log_append_time: bool,
    pub min_insync_replicas: i32,
    pub retention_bytes: i64,
    pub retention_ms: i64,
    pub segment_bytes: u64,
    pub segment_index_bytes: usize,
    pub segment_ms: i64,
    pub segment_jitter_ms: i64,
    pub file_delete_delay_ms: i64,
    pub remote_storage_enable: bool,
    /// KIP-950: tiered data becomes read-only; no more uploads, and retention.* (not
    /// local.*) governs the local log.
    pub remote_log_copy_disable: bool,
    /// Asked for with remote.storage.enable=false: delete the tiered data.
    pub remote_log_delete_on_disable: bool,
    /// `strata.remote.rehydrate.enable`: bring back remote segments local retention would
    /// keep.
    pub remote_rehydrate: bool,
    /// `strata.remote.rehydrate.hot.bytes` / `.hot.ms`: remote ranges read again.
    pub remote_rehydrate_hot_bytes: i64,
    pub remote_rehydrate_hot_ms: i64,
    /// Replicas whose traffic as leader counts against `leader.replication.throttled.rate`.
    pub leader_throttled: ThrottledReplicas,
    /// Replicas whose traffic as follower counts against
    /// `follower.replication.throttled.rate`.
    pub follower_throttled: ThrottledReplicas,
    /// Upload eligibility of a sealed segment (-1: derived from local retention).
    pub remote_copy_lag_ms: i64,
    pub remote_copy_lag_bytes: i64,
    /// Effective local retention (local.retention.* with -2 resolved to retention.*).
    pub local_retention_ms: i64,
    pub local_retention_bytes: i64,
    /// The log cleaner's settings for compacted topics.
    pub min_cleanable_dirty_ratio: f64,
    pub delete_retention_ms: i64,
    pub min_compaction_lag_ms: i64,
    pub max_compaction_lag_ms: i64,
}

/// Looks up the effective raw value and its source.
pub fn effective<'a>(
    name: &str,
    overrides: &'a BTreeMap<String, String>,
    broker: &'a BrokerDefaults,
) -> Option<(&'a str, ConfigSource)> {
    let d = def(name)?;
    if let Some(v) = overrides.get(name) {
        return Some((v.as_str(), ConfigSource::DynamicTopic));
    }
    if let Some((v, src)) = broker.get(d.broker_synonym) {
        return Some((v.as_str(), *src));
    }
    Some((d.default, ConfigSource::Default))
}

impl TopicConfig {
    /// Resolves the effective config. Overrides were validated when set; a value that still
    /// fails to parse falls back to Kafka's default rather than failing the partition.
    pub fn resolve(overrides: &BTreeMap<String, String>, broker: &BrokerDefaults) -> TopicConfig {
        let raw = |name: &str| {
            effective(name, overrides, broker)
                .map(|(v, _)| v.to_string())
                .unwrap_or_default()
        };
        let default = |name: &str| def(name).map(|d| d.default).unwrap_or("0");
        let long = |name: &str| {
            value::parse_long(name, &raw(name))
                .unwrap_or_else(|_| value::parse_long(name, default(name)).unwrap_or(0))
        };
        let policy = raw("cleanup.policy");
        TopicConfig {
            cleanup_policy_compact: policy.split(',').any(|p| p.trim() == "compact"),
            cleanup_policy_delete: policy.split(',').any(|p| p.trim() == "delete"),
            compression_type: raw("compression.type"),
            flush_messages: long("flush.messages"),
            flush_ms: long("flush.ms"),
            index_interval_bytes: long("index.interval.bytes").max(0) as usize,
            max_message_bytes: long("max.message.bytes").max(0) as usize,
            max_decompressed_message_bytes: long(MAX_DECOMPRESSED_MESSAGE_BYTES).max(0) as u64,
            max_decompressed_batch_bytes: long(MAX_DECOMPRESSED_BATCH_BYTES)
                .max(long("max.message.bytes"))
                .max(0) as u64,
            message_timestamp_after_max_ms: long("message.timestamp.after.max.ms"),
            message_timestamp_before_max_ms: long("message.timestamp.before.max.ms"),
            log_append_time: raw("message.timestamp.type") == "LogAppendTime",
            min_insync_replicas: long("min.insync.replicas") as i32,
            retention_bytes: long("retention.bytes"),
            retention_ms: long("retention.ms"),
            segment_bytes: overrides
                .get(INTERNAL_SEGMENT_BYTES)
                .and_then(|v| value::parse_long(INTERNAL_SEGMENT_BYTES, v).ok())
                .unwrap_or_else(|| long("segment.bytes"))
                .max(14) as u64,
            segment_index_bytes: long("segment.index.bytes").max(8) as usize,
            segment_ms: long("segment.ms").max(1),
            segment_jitter_ms: long("segment.jitter.ms"),
            file_delete_delay_ms: long("file.delete.delay.ms"),
            remote_storage_enable: value::parse_bool(&raw("remote.storage.enable"))
                .unwrap_or(false),
            remote_log_copy_disable: value::parse_bool(&raw("remote.log.copy.disable"))
                .unwrap_or(false),
            remote_log_delete_on_disable: value::parse_bool(&raw("remote.log.delete.on.disable"))
                .unwrap_or(false),
            remote_rehydrate: overrides
                .get(REMOTE_REHYDRATE_ENABLE)
                .and_then(|v| value::parse_bool(v).ok())
                .unwrap_or(false),
            remote_rehydrate_hot_bytes: overrides
                .get(REMOTE_REHYDRATE_HOT_BYTES)
                .and_then(|v| value::parse_long(REMOTE_REHYDRATE_HOT_BYTES, v).ok())
                .unwrap_or(1 << 30)
                .max(0),
            remote_rehydrate_hot_ms: overrides
                .get(REMOTE_REHYDRATE_HOT_MS)
                .and_then(|v| value::parse_long(REMOTE_REHYDRATE_HOT_MS, v).ok())
                .unwrap_or(3_600_000)
                .max(1),
            leader_throttled: ThrottledReplicas::parse(&raw(
                "leader.replication.throttled.replicas",
            ))
            .unwrap_or_default(),
            follower_throttled: ThrottledReplicas::parse(&raw(
                "follower.replication.throttled.replicas",
            ))
            .unwrap_or_default(),
            remote_copy_lag_ms: long("remote.copy.lag.ms"),
            remote_copy_lag_bytes: long("remote.copy.lag.bytes"),
            local_retention_ms: match long("local.retention.ms") {
                -2 => long("retention.ms"),
                v => v,
            },
            local_retention_bytes: match long("local.retention.bytes") {
                -2 => long("retention.bytes"),
                v => v,
            },
            min_cleanable_dirty_ratio: value::parse_double(&raw("min.cleanable.dirty.ratio"))
                .unwrap_or(0.5),
            delete_retention_ms: long("delete.retention.ms"),
            min_compaction_lag_ms: long("min.compaction.lag.ms"),
            max_compaction_lag_ms: long("max.compaction.lag.ms"),
        }
    }
}

/// Checks settings that are valid alone but not together (Kafka's INVALID_CONFIG cases for
/// tiered storage). `was_remote` is the topic's current remote.storage.enable, if it exists.
pub fn check_combination(
    config: &TopicConfig,
    remote_system_enabled: bool,
    was_remote: Option<bool>,
) -> Result<(), String> {
    if config.remote_storage_enable && !remote_system_enabled {
        return Err("Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage.".into());
    }
    if was_remote == Some(true) && !config.remote_storage_enable {
        if !config.remote_log_delete_on_disable {
            return Err("It is invalid to disable remote storage without deleting remote data. If you want to keep the remote data and turn to read only, please set `remote.storage.enable=true,remote.log.copy.disable=true`. If you want to disable remote storage and delete all remote data, please set `remote.storage.enable=false,remote.log.delete.on.disable=true`.".into());
        }
        // Accepted: the tiered data is deleted and the local log becomes the whole log.
        return Ok(());
    }
    if config.remote_storage_enable && config.remote_log_copy_disable {
        if config.local_retention_bytes != config.retention_bytes {
            return Err("When `remote.log.copy.disable` is set to true, the `local.retention.bytes` and `retention.bytes` must be set to the identical value because there will be no more logs copied to the remote storage.".into());
        }
        if config.local_retention_ms != config.retention_ms {
            return Err("When `remote.log.copy.disable` is set to true, the `local.retention.ms` and `retention.ms` must be set to the identical value because there will be no more logs copied to the remote storage.".into());
        }
    }
    if config.remote_storage_enable {
        // A positive copy lag may not exceed the effective local retention (Kafka's check).
        for (name, lag, local) in [
            (
                "remote.copy.lag.ms",
                config.remote_copy_lag_ms,
                config.local_retention_ms,
            ),
            (
                "remote.copy.lag.bytes",
                config.remote_copy_lag_bytes,
                config.local_retention_bytes,
            ),
        ] {
            if lag > 0 && local >= 0 && lag > local {
                let retention = name.replace("remote.copy.lag", "local.retention");
                return Err(format!(
                    "Invalid value {lag} for configuration {name}: Value must not exceed {retention} (effective value: {local})"
                ));
            }
        }
        if config.retention_ms >= 0
            && (config.local_retention_ms < 0 || config.local_retention_ms > config.retention_ms)
        {
            return Err(format!(
                "Invalid value {} for configuration local.retention.ms: Value must not be more than retention.ms property value: {}",
                config.local_retention_ms, config.retention_ms
            ));
        }
        if config.retention_bytes >= 0
            && (config.local_retention_bytes < 0
                || config.local_retention_bytes > config.retention_bytes)
        {
            return Err(format!(
                "Invalid value {} for configuration local.retention.bytes: Value must not be more than retention.bytes property value: {}",
                config.local_retention_bytes, config.retention_bytes
            ));
        }
    }
    Ok(())
}

impl Default for TopicConfig {
    fn default() -> Self {
        TopicConfig::resolve(&BTreeMap::new(), &BrokerDefaults::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttled_replicas_take_kafkas_forms_only() {
        assert_eq!(ThrottledReplicas::parse(""), Some(ThrottledReplicas::None));
        assert_eq!(
            ThrottledReplicas::parse(" * "),
            Some(ThrottledReplicas::All)
        );
        let some = ThrottledReplicas::parse("0:1, 0:2 ,3:1,").unwrap();
        assert!(some.includes(0, 2) && some.includes(3, 1));
        assert!(!some.includes(1, 1) && !some.includes(0, 3));
        assert!(ThrottledReplicas::All.includes(7, 9));
        for bad in ["0", "0:x", "*,0:1", "0 : 1", "a:b", "0:1:2", "-1:2"] {
            assert_eq!(ThrottledReplicas::parse(bad), None, "{bad}");
            let err = validate("leader.replication.throttled.replicas", bad).unwrap_err();
            assert!(
                err.to_string().contains(
                    "leader.replication.throttled.replicas must be the literal '*' or a list"
                ),
                "{err}"
            );
        }
    }

    #[test]
    fn overrides_beat_broker_synonyms_which_beat_defaults() {
        let mut broker = BrokerDefaults::new();
        broker.insert(
            "log.retention.ms".into(),
            ("1000".into(), ConfigSource::StaticBroker),
        );
        broker.insert(
            "log.segment.bytes".into(),
            ("2048".into(), ConfigSource::StaticBroker),
        );
        let mut o = BTreeMap::new();
        o.insert("retention.ms".to_string(), "5".to_string());
        let c = TopicConfig::resolve(&o, &broker);
        assert_eq!(c.retention_ms, 5);
        assert_eq!(c.segment_bytes, 2048);
        assert_eq!(c.max_message_bytes, 1048588);
        assert_eq!(
            effective("segment.bytes", &o, &broker).unwrap().1,
            ConfigSource::StaticBroker
        );
    }

    #[test]
    fn bad_overrides_name_the_key() {
        assert_eq!(
            validate("retention.mss", "1").unwrap_err().to_string(),
            "Unknown topic config name: retention.mss"
        );
        let e = validate("cleanup.policy", "forever")
            .unwrap_err()
            .to_string();
        assert!(e.contains("cleanup.policy"), "{e}");
        assert!(validate("retention.ms", "3d").is_ok());
        assert!(validate("min.cleanable.dirty.ratio", "1.5").is_err());
    }
}
