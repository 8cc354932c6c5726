//! Which broker settings AlterConfigs may change at run time, as Kafka 4.4 decides it
//! (`DynamicBrokerConfig`), and what Strata does with each.
//!
//! The tables are Kafka 4.4's own lists, read from its jars (`AbstractKafkaConfig.CONFIG_DEF`
//! for names and types, `DynamicBrokerConfig.dynamicConfigUpdateModes()` for what may change
//! and where). Strata sorts a dynamic setting into one of three [`Treatment`]s.

use std::collections::BTreeMap;

use super::topic::TOPIC_CONFIGS;
use super::value::Kind;
use super::{BROKER_CONFIGS, IGNORED_KAFKA_KEYS};

/// Where Kafka lets a dynamic setting be set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// On one broker or as the cluster-wide default (the empty resource name).
    ClusterWide,
    /// On one broker only.
    PerBroker,
}

pub struct DynamicDef {
    pub name: &'static str,
    pub kind: Kind,
    pub scope: Scope,
    /// Kafka's bounds for a number (`[min,...,max]`).
    range: (i64, i64),
}

const fn d(name: &'static str, kind: Kind, scope: Scope) -> DynamicDef {
    r(name, kind, scope, i64::MIN, i64::MAX)
}

/// A number with Kafka's lower bound only (`[min,...]`): the type's maximum above.
const fn min(name: &'static str, kind: Kind, scope: Scope, min: i64) -> DynamicDef {
    let max = match kind {
        Kind::Short => i16::MAX as i64,
        Kind::Int => i32::MAX as i64,
        _ => i64::MAX,
    };
    r(name, kind, scope, min, max)
}

const fn r(name: &'static str, kind: Kind, scope: Scope, min: i64, max: i64) -> DynamicDef {
    DynamicDef {
        name,
        kind,
        scope,
        range: (min, max),
    }
}

use Scope::{ClusterWide as C, PerBroker as P};

/// What Strata does with a dynamic broker setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Treatment {
    /// A broker default of a topic config (`log.retention.ms`, `message.max.bytes`, ...),
    /// applied at once to every topic that does not override it; a replication throttle
    /// rate, a connection limit or `producer.id.expiration.ms`.
    Live,
    /// A setting Strata reads only at start-up (listeners and per-listener settings, TLS
    /// files, SASL mechanisms, connection limits, the cleaner's and tiering's settings, the
    /// group coordinator's bounds): refused, so that a change never seems to apply when it
    /// does not.
    StartUp,
    /// A Kafka setting Strata has no use for (Kerberos, thread pools, metric reporters, ...):
    /// checked as Kafka checks it, stored and described, just as the same line in the
    /// broker's properties file is accepted and ignored.
    Ignored,
}

/// The per-listener TLS settings a listener reloads at run time (Kafka's
/// `SslConfigs.RECONFIGURABLE_CONFIGS`): its keystore and truststore.
pub fn is_reloadable_tls(base: &str) -> bool {
    matches!(
        base,
        "ssl.keystore.type"
            | "ssl.keystore.location"
            | "ssl.keystore.password"
            | "ssl.key.password"
            | "ssl.keystore.certificate.chain"
            | "ssl.keystore.key"
            | "ssl.truststore.type"
            | "ssl.truststore.location"
            | "ssl.truststore.password"
            | "ssl.truststore.certificates"
    )
}

pub fn treatment(name: &str) -> Treatment {
    if let Some(base) = listener_base(name) {
        if is_reloadable_tls(base) {
            return Treatment::Live;
        }
        // A per-listener setting: Strata reads the ones it uses (TLS files, SASL JAAS
        // configs, ...) when it opens the listener.
        let mechanism = LISTENER_MECHANISM.iter().any(|m| {
            base.strip_suffix(m)
                .is_some_and(|p| p.is_empty() || p.ends_with('.'))
        });
        return match treatment(base) {
            Treatment::Ignored if !mechanism => Treatment::Ignored,
            _ => Treatment::StartUp,
        };
    }
    if TOPIC_CONFIGS.iter().any(|d| d.broker_synonym == name) || LIVE.contains(&name) {
        Treatment::Live
    } else if BROKER_CONFIGS.iter().any(|d| d.name == name) || super::group::is_broker_setting(name)
    {
        Treatment::StartUp
    } else {
        Treatment::Ignored
    }
}

/// Broker settings other than topic defaults that apply at once.
const LIVE: &[&str] = &[
    "leader.replication.throttled.rate",
    "follower.replication.throttled.rate",
    "max.connections",
    "max.connections.per.ip",
    "max.connections.per.ip.overrides",
    "max.connection.creation.rate",
    "producer.id.expiration.ms",
    // Kafka's LogCleaner.RECONFIGURABLE_CONFIGS (io.buffer.size aside: Strata has no such
    // buffer, so it is stored and described only).
    "log.cleaner.threads",
    "log.cleaner.dedupe.buffer.size",
    "log.cleaner.io.buffer.load.factor",
    "log.cleaner.io.max.bytes.per.second",
    "log.cleaner.backoff.ms",
];

/// Kafka's definition of a dynamic broker setting.
pub fn def(name: &str) -> Option<&'static DynamicDef> {
    KAFKA_DYNAMIC.iter().find(|d| d.name == name)
}

/// The type of a dynamic broker setting, per-listener ones included.
pub fn kind(name: &str) -> Option<Kind> {
    def(listener_base(name).unwrap_or(name)).map(|d| d.kind)
}

/// `ssl.keystore.location` of `listener.name.<listener>.ssl.keystore.location`.
fn listener_base(name: &str) -> Option<&str> {
    let rest = name.strip_prefix("listener.name.")?;
    rest.split_once('.').map(|(_, base)| base)
}

/// Kafka's per-listener SASL settings (`listener.name.<l>.<mechanism>.sasl.jaas.config`,
/// ...), which Strata reads when it opens a listener.
const LISTENER_MECHANISM: &[&str] = &[
    "connections.max.reauth.ms",
    "sasl.jaas.config",
    "sasl.login.callback.handler.class",
    "sasl.login.class",
    "sasl.server.callback.handler.class",
];

/// Checks the complete new set of a broker resource's dynamic settings as Kafka does, in its
/// order (the settings that never change, the security stores, the values, the settings
/// that change only per broker), then Strata's own refusal of the settings it reads only at
/// start-up. `cluster_default` is the empty resource name. The error is Kafka's message
/// (INVALID_REQUEST).
pub fn check(configs: &BTreeMap<String, String>, cluster_default: bool) -> Result<(), String> {
    refuse(configs, "Cannot update these configs dynamically", |k| {
        KAFKA_READ_ONLY.contains(&k)
            || def(k).is_none()
                && (BROKER_CONFIGS.iter().any(|d| d.name == k) || IGNORED_KAFKA_KEYS.contains(&k))
    })?;
    refuse(
        configs,
        "These security configs can be dynamically updated only per-listener using the listener prefix",
        |k| PER_LISTENER_ONLY.contains(&k),
    )?;
    for (k, v) in configs {
        if let Some(d) = def(k) {
            check_value(d, v)
                .map_err(|e| format!("Invalid value {v} for configuration {k}: {e}"))?;
        }
    }
    if cluster_default {
        refuse(
            configs,
            "Cannot update these configs at default cluster level, broker id must be specified",
            |k| {
                k.starts_with("listener.name.")
                    || def(k).is_some_and(|d| d.scope == Scope::PerBroker)
            },
        )?;
    }
    refuse(
        configs,
        "Strata reads these configs only at start-up: set them in the broker's properties and \
         restart it",
        |k| treatment(k) == Treatment::StartUp,
    )
}

/// Kafka's `ConfigDef` parse and range check of one value.
fn check_value(d: &DynamicDef, v: &str) -> Result<(), String> {
    let v = v.trim();
    let number = |type_name: &str| -> Result<i64, String> {
        v.parse::<i64>()
            .map_err(|_| format!("Not a number of type {type_name}"))
    };
    let n = match d.kind {
        Kind::Boolean => {
            return match v.to_ascii_lowercase().as_str() {
                "true" | "false" => Ok(()),
                _ => Err("Expected value to be either true or false".into()),
            };
        }
        Kind::Short => number("SHORT")
            .and_then(|n| i16::try_from(n).map_err(|_| "Not a number of type SHORT".to_string()))?
            as i64,
        Kind::Int => number("INT")
            .and_then(|n| i32::try_from(n).map_err(|_| "Not a number of type INT".to_string()))?
            as i64,
        Kind::Long => number("LONG")?,
        Kind::Double => {
            return v
                .parse::<f64>()
                .map(drop)
                .map_err(|_| "Not a number of type DOUBLE".into());
        }
        Kind::String | Kind::List | Kind::Password | Kind::Class => return Ok(()),
    };
    let (min, max) = d.range;
    if n < min {
        Err(format!("Value must be at least {min}"))
    } else if n > max {
        Err(format!("Value must be no more than {max}"))
    } else {
        Ok(())
    }
}

/// Kafka's `checkInvalidProps`: the message and the offending names (sorted here; Kafka
/// prints them in hash order).
fn refuse(
    configs: &BTreeMap<String, String>,
    message: &str,
    bad: impl Fn(&str) -> bool,
) -> Result<(), String> {
    let names: Vec<&str> = configs
        .keys()
        .map(String::as_str)
        .filter(|k| bad(k))
        .collect();
    if names.is_empty() {
        Ok(())
    } else {
        Err(format!("{message}: [{}]", names.join(", ")))
    }
}

/// Kafka 4.4's dynamic broker settings (`KafkaConfig`'s, and the three only
/// `DynamicConfig.Broker` defines: the replication throttles).
pub static KAFKA_DYNAMIC: &[DynamicDef] = &[
    min("background.threads", Kind::Int, C, 1),
    d("compression.gzip.level", Kind::Int, C),
    r("compression.lz4.level", Kind::Int, C, 1, 17),
    d("compression.type", Kind::String, C),
    r("compression.zstd.level", Kind::Int, C, -131072, 22),
    d("config.providers", Kind::List, C),
    d("cordoned.log.dirs", Kind::List, P),
    d(
        "errors.deadletterqueue.auto.create.topics.enable",
        Kind::Boolean,
        C,
    ),
    d("errors.deadletterqueue.topic.name.prefix", Kind::String, C),
    d("follower.fetch.last.tiered.offset.enable", Kind::Boolean, C),
    min("follower.replication.throttled.rate", Kind::Long, C, 0),
    min("group.consumer.assignment.interval.ms", Kind::Int, C, 0),
    d("group.consumer.assignor.offload.enable", Kind::Boolean, C),
    min(
        "group.coordinator.cached.buffer.max.bytes",
        Kind::Int,
        C,
        524288,
    ),
    min("group.share.assignment.interval.ms", Kind::Int, C, 0),
    d("group.share.assignor.offload.enable", Kind::Boolean, C),
    min("group.streams.assignment.interval.ms", Kind::Int, C, 0),
    d("group.streams.assignor.offload.enable", Kind::Boolean, C),
    min("leader.replication.throttled.rate", Kind::Long, C, 0),
    d("listener.security.protocol.map", Kind::String, P),
    d("listeners", Kind::List, P),
    min("log.cleaner.backoff.ms", Kind::Long, C, 0),
    d("log.cleaner.dedupe.buffer.size", Kind::Long, C),
    min("log.cleaner.delete.retention.ms", Kind::Long, C, 0),
    d("log.cleaner.io.buffer.load.factor", Kind::Double, C),
    min("log.cleaner.io.buffer.size", Kind::Int, C, 0),
    d("log.cleaner.io.max.bytes.per.second", Kind::Double, C),
    min("log.cleaner.max.compaction.lag.ms", Kind::Long, C, 1),
    d("log.cleaner.min.cleanable.ratio", Kind::Double, C),
    min("log.cleaner.min.compaction.lag.ms", Kind::Long, C, 0),
    min("log.cleaner.threads", Kind::Int, C, 0),
    d("log.cleanup.policy", Kind::List, C),
    min("log.flush.interval.messages", Kind::Long, C, 1),
    d("log.flush.interval.ms", Kind::Long, C),
    min("log.index.interval.bytes", Kind::Int, C, 0),
    min("log.index.size.max.bytes", Kind::Int, C, 4),
    min("log.local.retention.bytes", Kind::Long, C, -2),
    min("log.local.retention.ms", Kind::Long, C, -2),
    min("log.message.timestamp.after.max.ms", Kind::Long, C, 0),
    min("log.message.timestamp.before.max.ms", Kind::Long, C, 0),
    d("log.message.timestamp.type", Kind::String, C),
    d("log.preallocate", Kind::Boolean, C),
    min("log.remote.copy.lag.bytes", Kind::Long, C, -1),
    min("log.remote.copy.lag.ms", Kind::Long, C, -1),
    d("log.retention.bytes", Kind::Long, C),
    d("log.retention.ms", Kind::Long, C),
    d("log.roll.jitter.ms", Kind::Long, C),
    d("log.roll.ms", Kind::Long, C),
    min("log.segment.bytes", Kind::Int, C, 1048576),
    min("log.segment.delete.delay.ms", Kind::Long, C, 0),
    min("max.connection.creation.rate", Kind::Int, C, 0),
    min("max.connections", Kind::Int, C, 0),
    min("max.connections.per.ip", Kind::Int, C, 0),
    d("max.connections.per.ip.overrides", Kind::String, C),
    r(
        "max.decompressed.message.bytes",
        Kind::Int,
        C,
        1,
        2147483639,
    ),
    min("message.max.bytes", Kind::Int, C, 0),
    d("metric.reporters", Kind::List, C),
    min("min.insync.replicas", Kind::Int, C, 1),
    min("num.io.threads", Kind::Int, C, 1),
    min("num.network.threads", Kind::Int, C, 1),
    min("num.recovery.threads.per.data.dir", Kind::Int, C, 1),
    min("num.replica.fetchers", Kind::Int, C, 1),
    d("principal.builder.class", Kind::Class, P),
    min("producer.id.expiration.ms", Kind::Int, C, 1),
    min("remote.fetch.max.wait.ms", Kind::Int, C, 1),
    min("remote.list.offsets.request.timeout.ms", Kind::Long, C, 1),
    min(
        "remote.log.index.file.cache.total.size.bytes",
        Kind::Long,
        C,
        1,
    ),
    min(
        "remote.log.manager.copier.thread.pool.size",
        Kind::Int,
        C,
        1,
    ),
    min(
        "remote.log.manager.copy.max.bytes.per.second",
        Kind::Long,
        C,
        1,
    ),
    min(
        "remote.log.manager.expiration.thread.pool.size",
        Kind::Int,
        C,
        1,
    ),
    min(
        "remote.log.manager.fetch.max.bytes.per.second",
        Kind::Long,
        C,
        1,
    ),
    min(
        "remote.log.manager.follower.thread.pool.size",
        Kind::Int,
        C,
        1,
    ),
    min("remote.log.reader.threads", Kind::Int, C, 1),
    min(
        "replica.alter.log.dirs.io.max.bytes.per.second",
        Kind::Long,
        C,
        0,
    ),
    d("sasl.enabled.mechanisms", Kind::List, P),
    d("sasl.jaas.config", Kind::Password, P),
    d("sasl.kerberos.kinit.cmd", Kind::String, P),
    d("sasl.kerberos.min.time.before.relogin", Kind::Long, P),
    d("sasl.kerberos.principal.to.local.rules", Kind::List, P),
    d("sasl.kerberos.service.name", Kind::String, P),
    d("sasl.kerberos.ticket.renew.jitter", Kind::Double, P),
    d("sasl.kerberos.ticket.renew.window.factor", Kind::Double, P),
    d("sasl.login.refresh.buffer.seconds", Kind::Short, P),
    d("sasl.login.refresh.min.period.seconds", Kind::Short, P),
    d("sasl.login.refresh.window.factor", Kind::Double, P),
    d("sasl.login.refresh.window.jitter", Kind::Double, P),
    d("sasl.mechanism.inter.broker.protocol", Kind::String, P),
    min(
        "share.coordinator.cached.buffer.max.bytes",
        Kind::Int,
        C,
        524288,
    ),
    d("ssl.cipher.suites", Kind::List, P),
    d("ssl.client.auth", Kind::String, P),
    d("ssl.enabled.protocols", Kind::List, P),
    d("ssl.endpoint.identification.algorithm", Kind::String, P),
    d("ssl.engine.factory.class", Kind::Class, P),
    d("ssl.key.password", Kind::Password, P),
    d("ssl.keymanager.algorithm", Kind::String, P),
    d("ssl.keystore.certificate.chain", Kind::Password, P),
    d("ssl.keystore.key", Kind::Password, P),
    d("ssl.keystore.location", Kind::String, P),
    d("ssl.keystore.password", Kind::Password, P),
    d("ssl.keystore.type", Kind::String, P),
    d("ssl.protocol", Kind::String, P),
    d("ssl.provider", Kind::String, P),
    d("ssl.secure.random.implementation", Kind::String, P),
    d("ssl.trustmanager.algorithm", Kind::String, P),
    d("ssl.truststore.certificates", Kind::Password, P),
    d("ssl.truststore.location", Kind::String, P),
    d("ssl.truststore.password", Kind::Password, P),
    d("ssl.truststore.type", Kind::String, P),
    d(
        "transaction.partition.verification.enable",
        Kind::Boolean,
        C,
    ),
    d("unclean.leader.election.enable", Kind::Boolean, C),
];

/// Kafka's security settings that change only per listener (`listener.name.<l>.<setting>`).
const PER_LISTENER_ONLY: &[&str] = &[
    "ssl.key.password",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.key",
    "ssl.keystore.location",
    "ssl.keystore.password",
    "ssl.keystore.type",
    "ssl.truststore.certificates",
    "ssl.truststore.location",
    "ssl.truststore.password",
    "ssl.truststore.type",
];

/// Kafka 4.4's other broker settings: they never change at run time.
static KAFKA_READ_ONLY: &[&str] = &[
    "add.partitions.to.txn.retry.backoff.max.ms",
    "add.partitions.to.txn.retry.backoff.ms",
    "advertised.listeners",
    "alter.config.policy.class.name",
    "alter.log.dirs.replication.quota.window.num",
    "alter.log.dirs.replication.quota.window.size.seconds",
    "authorizer.class.name",
    "auto.create.topics.enable",
    "auto.leader.rebalance.enable",
    "broker.heartbeat.interval.ms",
    "broker.id",
    "broker.rack",
    "broker.session.timeout.ms",
    "client.quota.callback.class",
    "connection.failed.authentication.delay.ms",
    "connections.max.idle.ms",
    "connections.max.reauth.ms",
    "controlled.shutdown.enable",
    "controller.listener.names",
    "controller.performance.always.log.threshold.ms",
    "controller.performance.sample.period.ms",
    "controller.quorum.append.linger.ms",
    "controller.quorum.auto.join.enable",
    "controller.quorum.bootstrap.servers",
    "controller.quorum.election.backoff.max.ms",
    "controller.quorum.election.timeout.ms",
    "controller.quorum.fetch.max.bytes",
    "controller.quorum.fetch.snapshot.max.bytes",
    "controller.quorum.fetch.timeout.ms",
    "controller.quorum.request.timeout.ms",
    "controller.quorum.retry.backoff.ms",
    "controller.quorum.voters",
    "controller.quota.window.num",
    "controller.quota.window.size.seconds",
    "controller.socket.timeout.ms",
    "create.topic.policy.class.name",
    "default.replication.factor",
    "delegation.token.expiry.check.interval.ms",
    "delegation.token.expiry.time.ms",
    "delegation.token.max.lifetime.ms",
    "delegation.token.secret.key",
    "delete.records.purgatory.purge.interval.requests",
    "delete.topic.enable",
    "early.start.listeners",
    "fetch.max.bytes",
    "fetch.purgatory.purge.interval.requests",
    "group.consumer.assignors",
    "group.consumer.heartbeat.interval.ms",
    "group.consumer.max.assignment.interval.ms",
    "group.consumer.max.heartbeat.interval.ms",
    "group.consumer.max.session.timeout.ms",
    "group.consumer.max.size",
    "group.consumer.migration.policy",
    "group.consumer.min.assignment.interval.ms",
    "group.consumer.min.heartbeat.interval.ms",
    "group.consumer.min.session.timeout.ms",
    "group.consumer.regex.refresh.interval.ms",
    "group.consumer.session.timeout.ms",
    "group.coordinator.append.linger.ms",
    "group.coordinator.background.threads",
    "group.coordinator.rebalance.protocols",
    "group.coordinator.threads",
    "group.initial.rebalance.delay.ms",
    "group.max.session.timeout.ms",
    "group.max.size",
    "group.min.session.timeout.ms",
    "group.share.assignors",
    "group.share.delivery.count.limit",
    "group.share.dlq.manager.class.name",
    "group.share.heartbeat.interval.ms",
    "group.share.initialize.retry.interval.ms",
    "group.share.max.assignment.interval.ms",
    "group.share.max.delivery.count.limit",
    "group.share.max.heartbeat.interval.ms",
    "group.share.max.partition.max.record.locks",
    "group.share.max.record.lock.duration.ms",
    "group.share.max.session.timeout.ms",
    "group.share.max.share.sessions",
    "group.share.max.size",
    "group.share.min.assignment.interval.ms",
    "group.share.min.delivery.count.limit",
    "group.share.min.heartbeat.interval.ms",
    "group.share.min.partition.max.record.locks",
    "group.share.min.record.lock.duration.ms",
    "group.share.min.session.timeout.ms",
    "group.share.partition.max.record.locks",
    "group.share.persister.class.name",
    "group.share.record.lock.duration.ms",
    "group.share.session.timeout.ms",
    "group.streams.acceptable.recovery.lag",
    "group.streams.assignors",
    "group.streams.heartbeat.interval.ms",
    "group.streams.initial.rebalance.delay.ms",
    "group.streams.max.assignment.interval.ms",
    "group.streams.max.heartbeat.interval.ms",
    "group.streams.max.session.timeout.ms",
    "group.streams.max.size",
    "group.streams.max.standby.replicas",
    "group.streams.max.warmup.replicas",
    "group.streams.min.assignment.interval.ms",
    "group.streams.min.heartbeat.interval.ms",
    "group.streams.min.session.timeout.ms",
    "group.streams.min.task.offset.interval.ms",
    "group.streams.num.standby.replicas",
    "group.streams.num.warmup.replicas",
    "group.streams.rack.aware.assignment.tags",
    "group.streams.session.timeout.ms",
    "group.streams.task.offset.interval.ms",
    "group.streams.topology.description.plugin.class",
    "initial.broker.registration.timeout.ms",
    "inter.broker.listener.name",
    "internal.metadata.delete.delay.millis",
    "internal.metadata.log.segment.bytes",
    "internal.metadata.max.batch.size.in.bytes",
    "kafka.metrics.polling.interval.secs",
    "kafka.metrics.reporters",
    "leader.imbalance.check.interval.seconds",
    "log.cleaner.enable",
    "log.dir",
    "log.dir.failure.timeout.ms",
    "log.dirs",
    "log.flush.offset.checkpoint.interval.ms",
    "log.flush.scheduler.interval.ms",
    "log.flush.start.offset.checkpoint.interval.ms",
    "log.initial.task.delay.ms",
    "log.retention.check.interval.ms",
    "log.retention.hours",
    "log.retention.minutes",
    "log.roll.hours",
    "log.roll.jitter.hours",
    "max.incremental.fetch.session.cache.slots",
    "max.request.partition.size.limit",
    "metadata.log.dir",
    "metadata.log.max.record.bytes.between.snapshots",
    "metadata.log.max.snapshot.interval.ms",
    "metadata.log.segment.bytes",
    "metadata.log.segment.ms",
    "metadata.max.idle.interval.ms",
    "metadata.max.retention.bytes",
    "metadata.max.retention.ms",
    "metrics.num.samples",
    "metrics.recording.level",
    "metrics.sample.window.ms",
    "node.id",
    "num.partitions",
    "num.replica.alter.log.dirs.threads",
    "offset.metadata.max.bytes",
    "offsets.commit.timeout.ms",
    "offsets.load.buffer.size",
    "offsets.retention.check.interval.ms",
    "offsets.retention.minutes",
    "offsets.topic.compression.codec",
    "offsets.topic.num.partitions",
    "offsets.topic.replication.factor",
    "offsets.topic.segment.bytes",
    "process.roles",
    "producer.id.expiration.check.interval.ms",
    "producer.purgatory.purge.interval.requests",
    "queued.max.request.bytes",
    "queued.max.requests",
    "quota.window.num",
    "quota.window.size.seconds",
    "remote.log.index.file.cache.ttl.ms",
    "remote.log.manager.copy.quota.window.num",
    "remote.log.manager.copy.quota.window.size.seconds",
    "remote.log.manager.fetch.quota.window.num",
    "remote.log.manager.fetch.quota.window.size.seconds",
    "remote.log.manager.task.interval.ms",
    "remote.log.manager.task.retry.backoff.max.ms",
    "remote.log.manager.task.retry.backoff.ms",
    "remote.log.manager.task.retry.jitter",
    "remote.log.manager.thread.pool.size",
    "remote.log.metadata.custom.metadata.max.bytes",
    "remote.log.metadata.manager.class.name",
    "remote.log.metadata.manager.class.path",
    "remote.log.metadata.manager.impl.prefix",
    "remote.log.metadata.manager.listener.name",
    "remote.log.reader.max.pending.tasks",
    "remote.log.storage.manager.class.name",
    "remote.log.storage.manager.class.path",
    "remote.log.storage.manager.impl.prefix",
    "remote.log.storage.system.enable",
    "replica.fetch.backoff.ms",
    "replica.fetch.max.bytes",
    "replica.fetch.min.bytes",
    "replica.fetch.response.max.bytes",
    "replica.fetch.wait.max.ms",
    "replica.high.watermark.checkpoint.interval.ms",
    "replica.lag.time.max.ms",
    "replica.selector.class",
    "replica.socket.receive.buffer.bytes",
    "replica.socket.timeout.ms",
    "replication.quota.window.num",
    "replication.quota.window.size.seconds",
    "request.timeout.ms",
    "sasl.client.callback.handler.class",
    "sasl.login.callback.handler.class",
    "sasl.login.class",
    "sasl.login.connect.timeout.ms",
    "sasl.login.read.timeout.ms",
    "sasl.login.retry.backoff.max.ms",
    "sasl.login.retry.backoff.ms",
    "sasl.mechanism.controller.protocol",
    "sasl.oauthbearer.allow.unverified.audience",
    "sasl.oauthbearer.allow.unverified.issuer",
    "sasl.oauthbearer.assertion.algorithm",
    "sasl.oauthbearer.assertion.claim.aud",
    "sasl.oauthbearer.assertion.claim.exp.seconds",
    "sasl.oauthbearer.assertion.claim.iss",
    "sasl.oauthbearer.assertion.claim.jti.include",
    "sasl.oauthbearer.assertion.claim.nbf.seconds",
    "sasl.oauthbearer.assertion.claim.sub",
    "sasl.oauthbearer.assertion.file",
    "sasl.oauthbearer.assertion.private.key.file",
    "sasl.oauthbearer.assertion.private.key.passphrase",
    "sasl.oauthbearer.assertion.template.file",
    "sasl.oauthbearer.client.credentials.client.id",
    "sasl.oauthbearer.client.credentials.client.secret",
    "sasl.oauthbearer.clock.skew.seconds",
    "sasl.oauthbearer.expected.audience",
    "sasl.oauthbearer.expected.issuer",
    "sasl.oauthbearer.jwks.endpoint.refresh.ms",
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms",
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms",
    "sasl.oauthbearer.jwks.endpoint.url",
    "sasl.oauthbearer.jwt.retriever.class",
    "sasl.oauthbearer.jwt.validator.class",
    "sasl.oauthbearer.scope",
    "sasl.oauthbearer.scope.claim.name",
    "sasl.oauthbearer.sub.claim.name",
    "sasl.oauthbearer.token.endpoint.url",
    "sasl.server.callback.handler.class",
    "sasl.server.max.receive.size",
    "security.inter.broker.protocol",
    "security.providers",
    "server.max.startup.time.ms",
    "share.coordinator.append.linger.ms",
    "share.coordinator.cold.partition.snapshot.interval.ms",
    "share.coordinator.load.buffer.size",
    "share.coordinator.snapshot.update.records.per.snapshot",
    "share.coordinator.state.topic.compression.codec",
    "share.coordinator.state.topic.min.isr",
    "share.coordinator.state.topic.num.partitions",
    "share.coordinator.state.topic.prune.interval.ms",
    "share.coordinator.state.topic.replication.factor",
    "share.coordinator.state.topic.segment.bytes",
    "share.coordinator.threads",
    "share.coordinator.write.timeout.ms",
    "share.fetch.purgatory.purge.interval.requests",
    "socket.connection.setup.timeout.max.ms",
    "socket.connection.setup.timeout.ms",
    "socket.listen.backlog.size",
    "socket.receive.buffer.bytes",
    "socket.request.max.bytes",
    "socket.send.buffer.bytes",
    "ssl.allow.dn.changes",
    "ssl.allow.san.changes",
    "ssl.principal.mapping.rules",
    "telemetry.max.bytes",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms",
    "transaction.max.timeout.ms",
    "transaction.remove.expired.transaction.cleanup.interval.ms",
    "transaction.state.log.load.buffer.size",
    "transaction.state.log.min.isr",
    "transaction.state.log.num.partitions",
    "transaction.state.log.replication.factor",
    "transaction.state.log.segment.bytes",
    "transaction.two.phase.commit.enable",
    "transactional.id.expiration.ms",
    "unclean.leader.election.interval.ms",
    "unstable.api.versions.enable",
    "unstable.feature.versions.enable",
];

#[cfg(test)]
mod tests {
    use super::*;

    fn set(items: &[(&str, &str)]) -> BTreeMap<String, String> {
        items
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_tables_do_not_overlap() {
        for d in KAFKA_DYNAMIC {
            assert!(!KAFKA_READ_ONLY.contains(&d.name), "{}", d.name);
        }
        assert!(PER_LISTENER_ONLY.iter().all(|k| def(k).is_some()));
    }

    #[test]
    fn refusals_come_in_kafkas_order_with_its_messages() {
        // A read-only setting is named before a bad value.
        assert_eq!(
            check(
                &set(&[("log.retention.ms", "abc"), ("node.id", "2")]),
                false
            ),
            Err("Cannot update these configs dynamically: [node.id]".into())
        );
        assert_eq!(
            check(&set(&[("ssl.keystore.location", "/k")]), false),
            Err(
                "These security configs can be dynamically updated only per-listener using \
                 the listener prefix: [ssl.keystore.location]"
                    .into()
            )
        );
        let per_broker = "Cannot update these configs at default cluster level, broker id must \
                          be specified: [listener.name.x.ssl.cipher.suites, \
                          sasl.kerberos.service.name]";
        assert_eq!(
            check(
                &set(&[
                    ("sasl.kerberos.service.name", "kafka"),
                    ("listener.name.x.ssl.cipher.suites", "A"),
                    ("background.threads", "4"),
                ]),
                true
            ),
            Err(per_broker.into())
        );
        assert_eq!(
            check(&set(&[("background.threads", "0")]), true),
            Err(
                "Invalid value 0 for configuration background.threads: Value must be at least 1"
                    .into()
            )
        );
        assert_eq!(
            check(
                &set(&[("max.decompressed.message.bytes", "2147483647")]),
                true
            ),
            Err(
                "Invalid value 2147483647 for configuration max.decompressed.message.bytes: \
                 Value must be no more than 2147483639"
                    .into()
            )
        );
        assert_eq!(
            check(
                &set(&[("sasl.kerberos.min.time.before.relogin", "7d")]),
                false
            ),
            Err(
                "Invalid value 7d for configuration sasl.kerberos.min.time.before.relogin: \
                 Not a number of type LONG"
                    .into()
            )
        );
    }

    #[test]
    fn what_strata_has_no_use_for_is_accepted_and_what_it_reads_at_start_up_is_refused() {
        assert_eq!(
            check(
                &set(&[
                    ("sasl.kerberos.min.time.before.relogin", "58000"),
                    ("num.io.threads", "16"),
                    (
                        "listener.name.plaintext.ssl.cipher.suites",
                        "TLS_AES_128_GCM_SHA256"
                    ),
                    ("a.setting.kafka.does.not.know", "x"),
                    ("log.retention.ms", "1000"),
                ]),
                false
            ),
            Ok(())
        );
        assert_eq!(treatment("log.retention.ms"), Treatment::Live);
        assert_eq!(treatment("num.io.threads"), Treatment::Ignored);
        assert_eq!(treatment("max.connections"), Treatment::Live);
        for k in [
            "log.cleaner.threads",
            "log.cleaner.io.max.bytes.per.second",
            "log.cleaner.backoff.ms",
            "listener.name.sasl_ssl.ssl.keystore.location",
            "listener.name.ssl.ssl.truststore.certificates",
        ] {
            assert_eq!(treatment(k), Treatment::Live, "{k}");
        }
        assert_eq!(treatment("log.cleaner.io.buffer.size"), Treatment::Ignored);
        for k in [
            "ssl.client.auth",
            "listener.name.sasl_ssl.ssl.client.auth",
            "listener.name.sasl_ssl.plain.sasl.jaas.config",
            "listener.name.sasl_ssl.sasl.jaas.config",
            "group.consumer.assignment.interval.ms",
        ] {
            assert_eq!(treatment(k), Treatment::StartUp, "{k}");
            let err = check(&set(&[(k, "1")]), false).unwrap_err();
            assert!(
                err.starts_with("Strata reads these configs only at start-up"),
                "{err}"
            );
        }
    }
}
