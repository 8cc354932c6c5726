//! The broker settings Strata reads, with Kafka's names, types and defaults, and the Kafka
//! settings it accepts but does not need.

use super::*;

pub static BROKER_CONFIGS: &[BrokerConfigDef] = &[
    BrokerConfigDef {
        name: "node.id",
        kind: Kind::Int,
        default: "1",
    },
    BrokerConfigDef {
        name: "broker.id",
        kind: Kind::Int,
        default: "-1",
    },
    BrokerConfigDef {
        name: "broker.rack",
        kind: Kind::String,
        default: "",
    },
    BrokerConfigDef {
        name: "cluster.id",
        kind: Kind::String,
        default: "",
    },
    BrokerConfigDef {
        name: "listeners",
        kind: Kind::List,
        default: "PLAINTEXT://127.0.0.1:9092",
    },
    BrokerConfigDef {
        name: "listener.security.protocol.map",
        kind: Kind::String,
        default: "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
    },
    BrokerConfigDef {
        name: "controller.listener.names",
        kind: Kind::String,
        default: "",
    },
    BrokerConfigDef {
        name: "process.roles",
        kind: Kind::List,
        default: "broker,controller",
    },
    BrokerConfigDef {
        name: "controller.quorum.voters",
        kind: Kind::String,
        default: "",
    },
    BrokerConfigDef {
        name: "controller.quorum.bootstrap.servers",
        kind: Kind::List,
        default: "",
    },
    BrokerConfigDef {
        name: "controller.quorum.auto.join.enable",
        kind: Kind::Boolean,
        default: "false",
    },
    BrokerConfigDef {
        name: "broker.session.timeout.ms",
        kind: Kind::Long,
        default: "9000",
    },
    BrokerConfigDef {
        name: "broker.heartbeat.interval.ms",
        kind: Kind::Long,
        default: "2000",
    },
    BrokerConfigDef {
        name: "auto.leader.rebalance.enable",
        kind: Kind::Boolean,
        default: "true",
    },
    BrokerConfigDef {
        name: "leader.imbalance.check.interval.seconds",
        kind: Kind::Long,
        default: "300",
    },
    // Accepted and validated; like Kafka 4's KRaft controller, the rebalance ignores it.
    BrokerConfigDef {
        name: "leader.imbalance.per.broker.percentage",
        kind: Kind::Int,
        default: "10",
    },
    BrokerConfigDef {
        name: "metadata.log.dir",
        kind: Kind::String,
        default: "",
    },
    BrokerConfigDef {
        name: "connection.failed.authentication.delay.ms",
        kind: Kind::Int,
        default: "100",
    },
    BrokerConfigDef {
        name: "connections.max.reauth.ms",
        kind: Kind::Long,
        default: "0",
    },
    BrokerConfigDef {
        name: "authorizer.class.name",
        kind: Kind::String,
        default: "",
    },
    BrokerConfigDef {
        name: "super.users",
        kind: Kind::String,
        default: "",
    },
    BrokerConfigDef {
        name: "allow.everyone.if.no.acl.found",
        kind: Kind::Boolean,
        default: "false",
    },
    // Delegation tokens (KIP-48); the secret key is a `SECRET_KEYS` entry.
    BrokerConfigDef {
        name: "delegation.token.max.lifetime.ms",
        kind: Kind::Long,
        default: "604800000",
    },
    BrokerConfigDef {
        name: "delegation.token.expiry.time.ms",
        kind: Kind::Long,
        default: "86400000",
    },
    BrokerConfigDef {
        name: "delegation.token.expiry.check.interval.ms",
        kind: Kind::Long,
        default: "3600000",
    },
    BrokerConfigDef {
        name: "sasl.enabled.mechanisms",
        kind: Kind::List,
        default: "GSSAPI",
    },
    BrokerConfigDef {
        name: "sasl.jaas.config",
        kind: Kind::Password,
        default: "",
    },
    BrokerConfigDef {
        name: "ssl.keystore.type",
        kind: Kind::String,
        default: "JKS",
    },
    BrokerConfigDef {
        name: "ssl.keystore.location",
        kind: Kind::String,
        default: "",
    },
    BrokerConfigDef {
        name: "ssl.keystore.certificate.chain",
        kind: Kind::Password,
        default: "",
    },
    BrokerConfigDef {
        name: "ssl.keystore.key",
        kind: Kind::Password,
        default: "",
    },
    BrokerConfigDef {
        name: "ssl.truststore.type",
        kind: Kind::String,
        default: "JKS",
    },
    BrokerConfigDef {
        name: "ssl.truststore.location",
        kind: Kind::String,
        default: "",
    },
    BrokerConfigDef {
        name: "ssl.truststore.certificates",
        kind: Kind::Password,
        default: "",
    },
    BrokerConfigDef {
        name: "ssl.client.auth",
        kind: Kind::String,
        default: "none",
    },
    BrokerConfigDef {
        name: "ssl.endpoint.identification.algorithm",
        kind: Kind::String,
        default: "https",
    },
    BrokerConfigDef {
        name: "security.inter.broker.protocol",
        kind: Kind::String,
        default: "",
    },
    BrokerConfigDef {
        name: "sasl.mechanism.inter.broker.protocol",
        kind: Kind::String,
        default: "",
    },
    BrokerConfigDef {
        name: "advertised.listeners",
        kind: Kind::List,
        default: "",
    },
    BrokerConfigDef {
        name: "log.dirs",
        kind: Kind::List,
        default: "",
    },
    BrokerConfigDef {
        name: "log.dir",
        kind: Kind::String,
        default: "./strata-data",
    },
    BrokerConfigDef {
        name: "num.partitions",
        kind: Kind::Int,
        default: "1",
    },
    BrokerConfigDef {
        name: "default.replication.factor",
        kind: Kind::Int,
        default: "1",
    },
    BrokerConfigDef {
        name: "auto.create.topics.enable",
        kind: Kind::Boolean,
        default: "true",
    },
    BrokerConfigDef {
        name: "delete.topic.enable",
        kind: Kind::Boolean,
        default: "true",
    },
    BrokerConfigDef {
        name: "socket.request.max.bytes",
        kind: Kind::Int,
        default: "104857600",
    },
    // Kafka's default is -1 (unbounded); Strata bounds the bytes of requests being read or
    // handled by default. -1 (or 0) is unbounded, as in Kafka.
    BrokerConfigDef {
        name: "queued.max.request.bytes",
        kind: Kind::Long,
        default: "536870912",
    },
    BrokerConfigDef {
        name: "sasl.server.max.receive.size",
        kind: Kind::Int,
        default: "524288",
    },
    BrokerConfigDef {
        name: "connections.max.idle.ms",
        kind: Kind::Long,
        default: "600000",
    },
    BrokerConfigDef {
        name: "max.connections.per.ip",
        kind: Kind::Int,
        default: "2147483647",
    },
    BrokerConfigDef {
        name: "max.connections.per.ip.overrides",
        kind: Kind::String,
        default: "",
    },
    BrokerConfigDef {
        name: "max.connections",
        kind: Kind::Int,
        default: "2147483647",
    },
    BrokerConfigDef {
        name: "max.connection.creation.rate",
        kind: Kind::Int,
        default: "2147483647",
    },
    BrokerConfigDef {
        name: "quota.window.num",
        kind: Kind::Int,
        default: "11",
    },
    BrokerConfigDef {
        name: "quota.window.size.seconds",
        kind: Kind::Int,
        default: "1",
    },
    BrokerConfigDef {
        name: "fetch.max.bytes",
        kind: Kind::Int,
        default: "57671680",
    },
    BrokerConfigDef {
        name: "log.retention.check.interval.ms",
        kind: Kind::Long,
        default: "300000",
    },
    BrokerConfigDef {
        name: "log.retention.minutes",
        kind: Kind::Int,
        default: "",
    },
    BrokerConfigDef {
        name: "log.retention.hours",
        kind: Kind::Int,
        default: "168",
    },
    BrokerConfigDef {
        name: "log.roll.hours",
        kind: Kind::Int,
        default: "168",
    },
    BrokerConfigDef {
        name: "log.roll.jitter.hours",
        kind: Kind::Int,
        default: "0",
    },
    BrokerConfigDef {
        name: "log.flush.scheduler.interval.ms",
        kind: Kind::Long,
        default: "9223372036854775807",
    },
    BrokerConfigDef {
        name: "log.flush.offset.checkpoint.interval.ms",
        kind: Kind::Int,
        default: "60000",
    },
    BrokerConfigDef {
        name: "log.flush.start.offset.checkpoint.interval.ms",
        kind: Kind::Int,
        default: "60000",
    },
    BrokerConfigDef {
        name: "producer.id.expiration.ms",
        kind: Kind::Int,
        default: "86400000",
    },
    BrokerConfigDef {
        name: "strata.admin.listener",
        kind: Kind::String,
        default: "127.0.0.1:9644",
    },
    BrokerConfigDef {
        name: "offsets.topic.num.partitions",
        kind: Kind::Int,
        default: "50",
    },
    BrokerConfigDef {
        name: "share.coordinator.state.topic.num.partitions",
        kind: Kind::Int,
        default: "50",
    },
    BrokerConfigDef {
        name: "share.coordinator.state.topic.replication.factor",
        kind: Kind::Short,
        default: "3",
    },
    BrokerConfigDef {
        name: "share.coordinator.state.topic.min.isr",
        kind: Kind::Short,
        default: "2",
    },
    BrokerConfigDef {
        name: "share.coordinator.state.topic.segment.bytes",
        kind: Kind::Int,
        default: "104857600",
    },
    BrokerConfigDef {
        name: "offsets.topic.segment.bytes",
        kind: Kind::Int,
        default: "104857600",
    },
    BrokerConfigDef {
        name: "offsets.topic.replication.factor",
        kind: Kind::Short,
        default: "3",
    },
    BrokerConfigDef {
        name: "transaction.state.log.replication.factor",
        kind: Kind::Short,
        default: "3",
    },
    BrokerConfigDef {
        name: "transaction.state.log.min.isr",
        kind: Kind::Int,
        default: "2",
    },
    BrokerConfigDef {
        name: "transaction.state.log.num.partitions",
        kind: Kind::Int,
        default: "50",
    },
    BrokerConfigDef {
        name: "transaction.state.log.segment.bytes",
        kind: Kind::Int,
        default: "104857600",
    },
    BrokerConfigDef {
        name: "transaction.max.timeout.ms",
        kind: Kind::Int,
        default: "900000",
    },
    BrokerConfigDef {
        name: "transactional.id.expiration.ms",
        kind: Kind::Int,
        default: "604800000",
    },
    BrokerConfigDef {
        name: "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        kind: Kind::Int,
        default: "10000",
    },
    BrokerConfigDef {
        name: "transaction.remove.expired.transaction.cleanup.interval.ms",
        kind: Kind::Int,
        default: "3600000",
    },
    BrokerConfigDef {
        name: "offsets.retention.minutes",
        kind: Kind::Int,
        default: "10080",
    },
    BrokerConfigDef {
        name: "offset.metadata.max.bytes",
        kind: Kind::Int,
        default: "4096",
    },
    BrokerConfigDef {
        name: "group.initial.rebalance.delay.ms",
        kind: Kind::Int,
        default: "3000",
    },
    BrokerConfigDef {
        name: "group.min.session.timeout.ms",
        kind: Kind::Int,
        default: "6000",
    },
    BrokerConfigDef {
        name: "group.max.session.timeout.ms",
        kind: Kind::Int,
        default: "1800000",
    },
    BrokerConfigDef {
        name: "group.consumer.session.timeout.ms",
        kind: Kind::Int,
        default: "45000",
    },
    BrokerConfigDef {
        name: "remote.log.storage.system.enable",
        kind: Kind::Boolean,
        default: "true",
    },
    BrokerConfigDef {
        name: "remote.log.manager.task.interval.ms",
        kind: Kind::Long,
        default: "30000",
    },
    BrokerConfigDef {
        name: "remote.log.manager.copier.thread.pool.size",
        kind: Kind::Int,
        default: "2",
    },
    BrokerConfigDef {
        name: "remote.log.reader.threads",
        kind: Kind::Int,
        default: "10",
    },
    BrokerConfigDef {
        name: "remote.log.manager.copy.max.bytes.per.second",
        kind: Kind::Long,
        default: "9223372036854775807",
    },
    BrokerConfigDef {
        name: "remote.log.manager.fetch.max.bytes.per.second",
        kind: Kind::Long,
        default: "9223372036854775807",
    },
    BrokerConfigDef {
        name: "remote.fetch.max.wait.ms",
        kind: Kind::Int,
        default: "500",
    },
    BrokerConfigDef {
        name: "strata.remote.store.url",
        kind: Kind::String,
        default: "",
    },
    BrokerConfigDef {
        name: "strata.remote.store.endpoint",
        kind: Kind::String,
        default: "",
    },
    BrokerConfigDef {
        name: "strata.remote.store.region",
        kind: Kind::String,
        default: "us-east-1",
    },
    BrokerConfigDef {
        name: "strata.remote.store.path.style",
        kind: Kind::Boolean,
        default: "false",
    },
    BrokerConfigDef {
        name: "strata.remote.store.access.key.id",
        kind: Kind::String,
        default: "",
    },
    BrokerConfigDef {
        name: "strata.remote.store.secret.access.key",
        kind: Kind::Password,
        default: "",
    },
    BrokerConfigDef {
        name: "strata.remote.store.max.retries",
        kind: Kind::Int,
        default: "10",
    },
    BrokerConfigDef {
        name: "strata.remote.store.request.timeout.ms",
        kind: Kind::Long,
        default: "180000",
    },
    BrokerConfigDef {
        name: "strata.remote.cache.dir",
        kind: Kind::String,
        default: "",
    },
    BrokerConfigDef {
        name: "strata.remote.cache.memory.bytes",
        kind: Kind::Long,
        default: "268435456",
    },
    BrokerConfigDef {
        name: "strata.remote.cache.disk.bytes",
        kind: Kind::Long,
        default: "1073741824",
    },
    BrokerConfigDef {
        name: "strata.remote.chunk.bytes",
        kind: Kind::Int,
        default: "4194304",
    },
    BrokerConfigDef {
        name: "strata.remote.readahead.chunks",
        kind: Kind::Int,
        default: "8",
    },
    BrokerConfigDef {
        name: "strata.remote.upload.multipart.threshold.bytes",
        kind: Kind::Long,
        default: "4294967296",
    },
    BrokerConfigDef {
        name: "strata.remote.upload.part.bytes",
        kind: Kind::Long,
        default: "536870912",
    },
    BrokerConfigDef {
        name: "strata.remote.compacted.snapshot.interval.ms",
        kind: Kind::Long,
        default: "3600000",
    },
    BrokerConfigDef {
        name: "strata.remote.orphan.grace.ms",
        kind: Kind::Long,
        default: "3600000",
    },
    BrokerConfigDef {
        name: "strata.remote.scrub.interval.ms",
        kind: Kind::Long,
        default: "3600000",
    },
    BrokerConfigDef {
        name: "strata.remote.internal.topics.enable",
        kind: Kind::Boolean,
        default: "false",
    },
    BrokerConfigDef {
        name: "strata.remote.cluster.restore.enable",
        kind: Kind::Boolean,
        default: "false",
    },
    BrokerConfigDef {
        name: "strata.export.iceberg.catalog.uri",
        kind: Kind::String,
        default: "",
    },
    BrokerConfigDef {
        name: "strata.export.iceberg.catalog.namespace",
        kind: Kind::String,
        default: "kafka",
    },
    BrokerConfigDef {
        name: "strata.export.iceberg.catalog.token",
        kind: Kind::Password,
        default: "",
    },
    BrokerConfigDef {
        name: "strata.export.iceberg.catalog.credential",
        kind: Kind::Password,
        default: "",
    },
    BrokerConfigDef {
        name: "strata.export.iceberg.catalog.oauth2.server.uri",
        kind: Kind::String,
        default: "",
    },
    BrokerConfigDef {
        name: "strata.export.iceberg.catalog.scope",
        kind: Kind::String,
        default: "catalog",
    },
    BrokerConfigDef {
        name: "group.consumer.heartbeat.interval.ms",
        kind: Kind::Int,
        default: "5000",
    },
    BrokerConfigDef {
        name: "group.consumer.migration.policy",
        kind: Kind::String,
        default: "bidirectional",
    },
    BrokerConfigDef {
        name: "inter.broker.listener.name",
        kind: Kind::String,
        default: "",
    },
    BrokerConfigDef {
        name: "replica.lag.time.max.ms",
        kind: Kind::Long,
        default: "30000",
    },
    BrokerConfigDef {
        name: "replica.fetch.wait.max.ms",
        kind: Kind::Int,
        default: "500",
    },
    BrokerConfigDef {
        name: "replica.fetch.min.bytes",
        kind: Kind::Int,
        default: "1",
    },
    BrokerConfigDef {
        name: "replica.fetch.max.bytes",
        kind: Kind::Int,
        default: "1048576",
    },
    BrokerConfigDef {
        name: "replica.fetch.response.max.bytes",
        kind: Kind::Int,
        default: "10485760",
    },
    BrokerConfigDef {
        name: "replica.fetch.backoff.ms",
        kind: Kind::Int,
        default: "1000",
    },
    BrokerConfigDef {
        name: "replica.socket.timeout.ms",
        kind: Kind::Int,
        default: "30000",
    },
    BrokerConfigDef {
        name: "leader.replication.throttled.rate",
        kind: Kind::Long,
        default: "9223372036854775807",
    },
    BrokerConfigDef {
        name: "follower.replication.throttled.rate",
        kind: Kind::Long,
        default: "9223372036854775807",
    },
    BrokerConfigDef {
        name: "replication.quota.window.num",
        kind: Kind::Int,
        default: "11",
    },
    BrokerConfigDef {
        name: "replication.quota.window.size.seconds",
        kind: Kind::Int,
        default: "1",
    },
    BrokerConfigDef {
        name: "log.cleaner.enable",
        kind: Kind::Boolean,
        default: "true",
    },
    BrokerConfigDef {
        name: "log.cleaner.threads",
        kind: Kind::Int,
        default: "1",
    },
    BrokerConfigDef {
        name: "log.cleaner.dedupe.buffer.size",
        kind: Kind::Long,
        default: "134217728",
    },
    BrokerConfigDef {
        name: "log.cleaner.io.buffer.load.factor",
        kind: Kind::Double,
        default: "0.9",
    },
    BrokerConfigDef {
        name: "log.cleaner.io.max.bytes.per.second",
        kind: Kind::Double,
        default: "1.7976931348623157E308",
    },
    BrokerConfigDef {
        name: "log.cleaner.backoff.ms",
        kind: Kind::Long,
        default: "15000",
    },
];

/// Secret settings: read at start-up like the others but never listed among the broker's
/// configs, so DescribeConfigs cannot reveal them.
pub(super) const SECRET_KEYS: &[&str] = &["delegation.token.secret.key"];

/// Kafka settings Strata reads but does not need (KRaft roles, thread pools, buffer sizes).
pub(super) const IGNORED_KAFKA_KEYS: &[&str] = &[
    "num.network.threads",
    "num.io.threads",
    "socket.send.buffer.bytes",
    "socket.receive.buffer.bytes",
    "num.recovery.threads.per.data.dir",
];
