//! Group configs: the settings a GROUP config resource (DescribeConfigs, AlterConfigs and
//! IncrementalAlterConfigs on resource type 32) holds, with Kafka 4.4's names, types, defaults,
//! validation and error messages.
//!
//! A group's override wins over the broker's `group.*` setting of the same meaning (its
//! synonym), which wins over Kafka's default. Overrides are checked in three steps, as Kafka's
//! `GroupConfig.validate` does: every name must be a group config; every value must parse as
//! its type and pass its own check (`Invalid value .. for configuration ..`); then the values
//! must lie within the broker's bounds (`group.consumer.min.session.timeout.ms`, ...). The
//! whole resulting set of a group is validated, not only the keys a request changes.
//!
//! Pure: no I/O; the broker settings come in as a map of the keys set in the broker config.

use std::collections::BTreeMap;

use super::value::Kind;

/// DescribeConfigs' `DYNAMIC_GROUP_CONFIG` source: a value set on the group.
pub const SOURCE_DYNAMIC_GROUP: i8 = 8;
/// DescribeConfigs' `STATIC_BROKER_CONFIG` source: a broker setting from its config file.
pub const SOURCE_STATIC_BROKER: i8 = 4;
/// DescribeConfigs' `DEFAULT_CONFIG` source: Kafka's default.
pub const SOURCE_DEFAULT: i8 = 5;

/// A value check beyond the type (Kafka's `ConfigDef.Validator`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    None,
    /// `Range.atLeast`: "Value must be at least N".
    AtLeast(i64),
    /// `ValidString.in`: "String must be one of: a, b".
    OneOf(&'static [&'static str]),
    /// `earliest`, `latest` or `by_duration:<ISO-8601 duration>` (not negative).
    AutoOffsetReset,
}

/// One group config.
#[derive(Debug, Clone, Copy)]
pub struct GroupConfigDef {
    pub name: &'static str,
    pub kind: Kind,
    /// Kafka's default when no broker setting stands in for it.
    pub default: &'static str,
    pub check: Check,
    /// The broker setting that supplies the value when the group has none.
    pub broker_synonym: Option<&'static str>,
    /// Internal configs are accepted and described once set, but not listed otherwise.
    pub internal: bool,
    pub doc: &'static str,
}

const fn def(
    name: &'static str,
    kind: Kind,
    default: &'static str,
    check: Check,
    broker_synonym: Option<&'static str>,
    internal: bool,
    doc: &'static str,
) -> GroupConfigDef {
    GroupConfigDef {
        name,
        kind,
        default,
        check,
        broker_synonym,
        internal,
        doc,
    }
}

pub const CONSUMER_SESSION_TIMEOUT_MS: &str = "consumer.session.timeout.ms";
pub const CONSUMER_HEARTBEAT_INTERVAL_MS: &str = "consumer.heartbeat.interval.ms";

/// Kafka 4.4's group configs, in its definition order (the order values are parsed in, so
/// the first bad value a request names is the one reported).
pub static GROUP_CONFIGS: &[GroupConfigDef] = &[
    def(
        CONSUMER_SESSION_TIMEOUT_MS,
        Kind::Int,
        "45000",
        Check::AtLeast(1),
        Some("group.consumer.session.timeout.ms"),
        false,
        "The timeout to detect client failures when using the consumer group protocol.",
    ),
    def(
        CONSUMER_HEARTBEAT_INTERVAL_MS,
        Kind::Int,
        "5000",
        Check::AtLeast(1),
        Some("group.consumer.heartbeat.interval.ms"),
        false,
        "The heartbeat interval given to the members of a consumer group.",
    ),
    def(
        "consumer.assignment.interval.ms",
        Kind::Int,
        "1000",
        Check::AtLeast(0),
        Some("group.consumer.assignment.interval.ms"),
        false,
        "The interval between assignment updates for a consumer group.",
    ),
    def(
        "consumer.assignor.offload.enable",
        Kind::Boolean,
        "true",
        Check::None,
        Some("group.consumer.assignor.offload.enable"),
        true,
        "Whether to offload consumer group assignment to a group coordinator background thread.",
    ),
    def(
        "share.session.timeout.ms",
        Kind::Int,
        "45000",
        Check::AtLeast(1),
        Some("group.share.session.timeout.ms"),
        false,
        "The timeout to detect client failures when using the share group protocol.",
    ),
    def(
        "share.heartbeat.interval.ms",
        Kind::Int,
        "5000",
        Check::AtLeast(1),
        Some("group.share.heartbeat.interval.ms"),
        false,
        "The heartbeat interval given to the members of a share group.",
    ),
    def(
        "share.record.lock.duration.ms",
        Kind::Int,
        "30000",
        Check::AtLeast(1000),
        Some("group.share.record.lock.duration.ms"),
        false,
        "The record acquisition lock duration in milliseconds for share groups.",
    ),
    def(
        "share.delivery.count.limit",
        Kind::Int,
        "5",
        Check::AtLeast(2),
        Some("group.share.delivery.count.limit"),
        false,
        "The maximum number of delivery attempts for a record delivered to a share group.",
    ),
    def(
        "share.partition.max.record.locks",
        Kind::Int,
        "2000",
        Check::AtLeast(100),
        Some("group.share.partition.max.record.locks"),
        false,
        "Share-group record lock limit per share-partition.",
    ),
    def(
        "share.auto.offset.reset",
        Kind::String,
        "latest",
        Check::AutoOffsetReset,
        None,
        false,
        "The strategy to initialize the share-partition start offset. <ul><li>earliest: \
         automatically reset the offset to the earliest offset</li><li>latest: automatically \
         reset the offset to the latest offset</li><li>by_duration:&lt;duration&gt;: \
         automatically reset the offset to a configured duration from the current timestamp. \
         &lt;duration&gt; must be specified in ISO8601 format (PnDTnHnMn.nS). Negative duration \
         is not allowed.</li><li>anything else: throw exception to the share consumer.</li></ul>",
    ),
    def(
        "share.isolation.level",
        Kind::String,
        "read_uncommitted",
        Check::OneOf(&["read_committed", "read_uncommitted"]),
        None,
        false,
        "Controls how to read records written transactionally. If set to \"read_committed\", \
         the share group will only deliver transactional records which have been committed. If \
         set to \"read_uncommitted\", the share group will return all messages, even \
         transactional messages which have been aborted. Non-transactional records will be \
         returned unconditionally in either mode.",
    ),
    def(
        "share.renew.acknowledge.enable",
        Kind::Boolean,
        "true",
        Check::None,
        None,
        false,
        "Whether the renew acknowledge type is enabled for the share group.",
    ),
    def(
        "share.assignment.interval.ms",
        Kind::Int,
        "1000",
        Check::AtLeast(0),
        Some("group.share.assignment.interval.ms"),
        false,
        "The interval between assignment updates for a share group.",
    ),
    def(
        "share.assignor.offload.enable",
        Kind::Boolean,
        "true",
        Check::None,
        Some("group.share.assignor.offload.enable"),
        true,
        "Whether to offload share group assignment to a group coordinator background thread.",
    ),
    def(
        "streams.session.timeout.ms",
        Kind::Int,
        "45000",
        Check::AtLeast(1),
        Some("group.streams.session.timeout.ms"),
        false,
        "The timeout to detect client failures when using the streams group protocol.",
    ),
    def(
        "streams.heartbeat.interval.ms",
        Kind::Int,
        "5000",
        Check::AtLeast(1),
        Some("group.streams.heartbeat.interval.ms"),
        false,
        "The heartbeat interval given to the members.",
    ),
    def(
        "streams.num.standby.replicas",
        Kind::Int,
        "0",
        Check::AtLeast(0),
        Some("group.streams.num.standby.replicas"),
        false,
        "The number of standby replicas for each task.",
    ),
    def(
        "streams.initial.rebalance.delay.ms",
        Kind::Int,
        "3000",
        Check::AtLeast(0),
        Some("group.streams.initial.rebalance.delay.ms"),
        false,
        "The amount of time the group coordinator will wait for more streams clients to join a \
         new group before performing the first rebalance. A longer delay means potentially \
         fewer rebalances.",
    ),
    def(
        "streams.assignment.interval.ms",
        Kind::Int,
        "1000",
        Check::AtLeast(0),
        Some("group.streams.assignment.interval.ms"),
        false,
        "The interval between assignment updates for a streams group.",
    ),
    def(
        "streams.assignor.offload.enable",
        Kind::Boolean,
        "true",
        Check::None,
        Some("group.streams.assignor.offload.enable"),
        true,
        "Whether to offload streams group assignment to a group coordinator background thread.",
    ),
    def(
        "streams.task.offset.interval.ms",
        Kind::Int,
        "60000",
        Check::AtLeast(1),
        Some("group.streams.task.offset.interval.ms"),
        true,
        "The interval in which the warmup task changelog offsets on a client are updated on the \
         broker. The offsets are sent with the next heartbeat after this time has passed.",
    ),
    def(
        "streams.num.warmup.replicas",
        Kind::Int,
        "2",
        Check::AtLeast(0),
        Some("group.streams.num.warmup.replicas"),
        true,
        "The maximum number of warmup task replicas.",
    ),
    def(
        "streams.rack.aware.assignment.tags",
        Kind::List,
        "",
        Check::None,
        Some("group.streams.rack.aware.assignment.tags"),
        false,
        "List of client tag keys used to distribute standby replicas across Kafka Streams \
         instances. When configured, and the used broker-side assignor supports it, it will make \
         a best-effort to distribute standby tasks over each client tag dimension.",
    ),
    def(
        "streams.acceptable.recovery.lag",
        Kind::Long,
        "10000",
        Check::AtLeast(0),
        Some("group.streams.acceptable.recovery.lag"),
        true,
        "The maximum acceptable lag (number of offsets to catch up) for a client to be \
         considered caught-up enough to receive an active task assignment.",
    ),
    def(
        "streams.assignor.name",
        Kind::String,
        "sticky",
        Check::None,
        Some("group.streams.assignors"),
        false,
        "The task assignor to use for this streams group, selected by short name from the \
         assignors registered via the broker configuration group.streams.assignors. When unset, \
         the group defaults to the first assignor configured in the broker's \
         group.streams.assignors setting. Changing the assignor does not trigger a rebalance for \
         the group; the new assignor takes effect on the next rebalance.",
    ),
    def(
        "errors.deadletterqueue.topic.name",
        Kind::String,
        "",
        Check::None,
        None,
        false,
        "The name of the topic to be used as the dead-letter queue (DLQ) topic for this share \
         group. If blank (the default), the group does not have a DLQ topic.",
    ),
    def(
        "errors.deadletterqueue.copy.record.enable",
        Kind::Boolean,
        "false",
        Check::None,
        None,
        false,
        "When writing onto the dead-letter queue topic, whether to copy the original record onto \
         the DLQ topic, or just write a record containing the context information headers.",
    ),
];

/// Kafka's defaults of the broker `group.*` settings that group configs fall back to or are
/// bounded by (group coordinator and share group settings).
static BROKER_DEFAULTS: &[(&str, &str)] = &[
    ("group.consumer.session.timeout.ms", "45000"),
    ("group.consumer.min.session.timeout.ms", "45000"),
    ("group.consumer.max.session.timeout.ms", "60000"),
    ("group.consumer.heartbeat.interval.ms", "5000"),
    ("group.consumer.min.heartbeat.interval.ms", "5000"),
    ("group.consumer.max.heartbeat.interval.ms", "15000"),
    ("group.consumer.assignment.interval.ms", "1000"),
    ("group.consumer.min.assignment.interval.ms", "0"),
    ("group.consumer.max.assignment.interval.ms", "15000"),
    ("group.consumer.assignor.offload.enable", "true"),
    ("group.share.session.timeout.ms", "45000"),
    ("group.share.min.session.timeout.ms", "45000"),
    ("group.share.max.session.timeout.ms", "60000"),
    ("group.share.heartbeat.interval.ms", "5000"),
    ("group.share.min.heartbeat.interval.ms", "5000"),
    ("group.share.max.heartbeat.interval.ms", "15000"),
    ("group.share.record.lock.duration.ms", "30000"),
    ("group.share.min.record.lock.duration.ms", "15000"),
    ("group.share.max.record.lock.duration.ms", "60000"),
    ("group.share.delivery.count.limit", "5"),
    ("group.share.min.delivery.count.limit", "2"),
    ("group.share.max.delivery.count.limit", "10"),
    ("group.share.partition.max.record.locks", "2000"),
    ("group.share.min.partition.max.record.locks", "100"),
    ("group.share.max.partition.max.record.locks", "4000"),
    ("group.share.assignment.interval.ms", "1000"),
    ("group.share.min.assignment.interval.ms", "0"),
    ("group.share.max.assignment.interval.ms", "15000"),
    ("group.share.assignor.offload.enable", "true"),
    ("group.streams.session.timeout.ms", "45000"),
    ("group.streams.min.session.timeout.ms", "45000"),
    ("group.streams.max.session.timeout.ms", "60000"),
    ("group.streams.heartbeat.interval.ms", "5000"),
    ("group.streams.min.heartbeat.interval.ms", "5000"),
    ("group.streams.max.heartbeat.interval.ms", "15000"),
    ("group.streams.num.standby.replicas", "0"),
    ("group.streams.max.standby.replicas", "2"),
    ("group.streams.initial.rebalance.delay.ms", "3000"),
    ("group.streams.assignment.interval.ms", "1000"),
    ("group.streams.min.assignment.interval.ms", "0"),
    ("group.streams.max.assignment.interval.ms", "15000"),
    ("group.streams.assignor.offload.enable", "true"),
    ("group.streams.task.offset.interval.ms", "60000"),
    ("group.streams.min.task.offset.interval.ms", "15000"),
    ("group.streams.num.warmup.replicas", "2"),
    ("group.streams.max.warmup.replicas", "20"),
    ("group.streams.rack.aware.assignment.tags", ""),
    ("group.streams.acceptable.recovery.lag", "10000"),
    ("group.streams.assignors", "sticky"),
];

/// Why a group's configs were refused; every variant is Kafka's INVALID_CONFIG with Kafka's
/// message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GroupConfigError {
    #[error("Unknown group config name: {0}")]
    UnknownName(String),
    #[error("Invalid value {value} for configuration {name}: {reason}")]
    InvalidValue {
        name: String,
        value: String,
        reason: String,
    },
    #[error("{name} must be in the range {min} to {max} inclusive.")]
    OutOfRange { name: String, min: i64, max: i64 },
    #[error("{name} must be less than or equal to {max}")]
    AboveMax { name: String, max: i64 },
    #[error("{name} must be greater than or equal to {min}")]
    BelowMin { name: String, min: i64 },
    #[error("{session} must be greater than {heartbeat}")]
    SessionNotAboveHeartbeat {
        session: &'static str,
        heartbeat: &'static str,
    },
    #[error(
        "streams.assignor.name '{name}' is not a registered task assignor. Registered assignors are: [{registered}]."
    )]
    UnknownAssignor { name: String, registered: String },
    #[error("streams.rack.aware.assignment.tags must not contain duplicate tag keys.")]
    DuplicateRackTags,
    #[error("errors.deadletterqueue.topic.name: DLQ topic name must not start with '__'")]
    InternalDlqTopic,
}

/// The broker settings group configs fall back to and are bounded by: the `group.*` keys set
/// in the broker config, else Kafka's defaults.
#[derive(Debug, Clone, Default)]
pub struct BrokerGroupSettings {
    explicit: BTreeMap<String, String>,
}

impl BrokerGroupSettings {
    /// From the broker's explicitly set keys (only `group.*` ones matter).
    pub fn new(explicit: &BTreeMap<String, String>) -> Self {
        BrokerGroupSettings {
            explicit: explicit
                .iter()
                .filter(|(k, _)| k.starts_with("group."))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        }
    }

    /// A broker setting's value and its DescribeConfigs source.
    pub fn value(&self, name: &str) -> (String, i8) {
        match self.explicit.get(name) {
            Some(v) => (v.clone(), SOURCE_STATIC_BROKER),
            None => (
                BROKER_DEFAULTS
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
                    .unwrap_or_default(),
                SOURCE_DEFAULT,
            ),
        }
    }

    /// Kafka's default of a broker setting.
    fn default_of(name: &str) -> String {
        BROKER_DEFAULTS
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())
            .unwrap_or_default()
    }

    /// A numeric broker setting; Kafka's default when it is unset or does not parse.
    fn int(&self, name: &str) -> i64 {
        let parsed = self
            .explicit
            .get(name)
            .and_then(|v| v.trim().parse::<i32>().ok());
        parsed
            .or_else(|| {
                BROKER_DEFAULTS
                    .iter()
                    .find(|(k, _)| *k == name)
                    .and_then(|(_, v)| v.parse::<i32>().ok())
            })
            .unwrap_or(0) as i64
    }

    /// The registered streams assignors (`group.streams.assignors`).
    fn streams_assignors(&self) -> Vec<String> {
        split_list(&self.value("group.streams.assignors").0)
    }
}

/// Checks a broker setting that group configs fall back to or are bounded by: `None` when
/// `name` is not one, else whether `value` has its type (an int, except the assignor
/// settings: booleans, and lists for the streams assignors and rack tags).
/// Whether `name` is a broker setting of group configs (a bound or a fallback), read from
/// the broker's properties.
pub fn is_broker_setting(name: &str) -> bool {
    BROKER_DEFAULTS.iter().any(|(k, _)| *k == name)
}

pub fn check_broker_setting(name: &str, value: &str) -> Option<Result<(), String>> {
    BROKER_DEFAULTS.iter().find(|(k, _)| *k == name)?;
    let v = value.trim();
    Some(if name.ends_with(".offload.enable") {
        if v.eq_ignore_ascii_case("true") || v.eq_ignore_ascii_case("false") {
            Ok(())
        } else {
            Err("Expected value to be either true or false".into())
        }
    } else if name.ends_with(".assignors") || name.ends_with(".tags") {
        Ok(())
    } else if name == "group.streams.acceptable.recovery.lag" {
        v.parse::<i64>()
            .map(|_| ())
            .map_err(|_| "Not a number of type LONG".into())
    } else {
        v.parse::<i32>()
            .map(|_| ())
            .map_err(|_| "Not a number of type INT".into())
    })
}

pub fn def_of(name: &str) -> Option<&'static GroupConfigDef> {
    GROUP_CONFIGS.iter().find(|d| d.name == name)
}

/// Kafka's LIST parsing: trimmed, split on commas with the spaces around them; empty is none.
fn split_list(v: &str) -> Vec<String> {
    let t = v.trim();
    if t.is_empty() {
        return Vec::new();
    }
    t.split(',').map(|s| s.trim().to_string()).collect()
}

/// A parsed value of one config (Kafka's `ConfigDef.parseType` then its validator).
#[derive(Debug, Clone, PartialEq)]
enum Parsed {
    Number(i64),
    Other,
}

fn parse(d: &GroupConfigDef, raw: &str) -> Result<Parsed, GroupConfigError> {
    let invalid = |reason: String| GroupConfigError::InvalidValue {
        name: d.name.to_string(),
        value: raw.to_string(),
        reason,
    };
    let v = raw.trim();
    let parsed = match d.kind {
        Kind::Int => Parsed::Number(
            v.parse::<i32>()
                .map_err(|_| invalid("Not a number of type INT".into()))? as i64,
        ),
        Kind::Long => Parsed::Number(
            v.parse::<i64>()
                .map_err(|_| invalid("Not a number of type LONG".into()))?,
        ),
        Kind::Boolean => {
            if !v.eq_ignore_ascii_case("true") && !v.eq_ignore_ascii_case("false") {
                return Err(invalid("Expected value to be either true or false".into()));
            }
            Parsed::Other
        }
        _ => Parsed::Other,
    };
    match (d.check, &parsed) {
        (Check::AtLeast(min), Parsed::Number(n)) if *n < min => {
            Err(invalid(format!("Value must be at least {min}")))
        }
        (Check::OneOf(allowed), _) if !allowed.contains(&v) => Err(invalid(format!(
            "String must be one of: {}",
            allowed.join(", ")
        ))),
        (Check::AutoOffsetReset, _) if !valid_auto_offset_reset(v) => Err(invalid(format!(
            "Invalid value `{v}` for configuration {}. The value must be either 'earliest', \
             'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'.",
            d.name
        ))),
        _ => Ok(parsed),
    }
}

fn valid_auto_offset_reset(v: &str) -> bool {
    match v {
        "earliest" | "latest" => true,
        _ => v
            .strip_prefix("by_duration:")
            .and_then(parse_iso_duration_nanos)
            .is_some_and(|n| n >= 0),
    }
}

/// Java's `Duration.parse` (`[-+]PnDTnHnMn.nS`, case-insensitive, at least one part) as
/// nanoseconds; `None` when it does not parse or overflows.
pub fn parse_iso_duration_nanos(s: &str) -> Option<i128> {
    let b = s.as_bytes();
    let mut i = 0;
    let sign_of = |b: &[u8], i: &mut usize| -> i128 {
        match b.get(*i) {
            Some(b'-') => {
                *i += 1;
                -1
            }
            Some(b'+') => {
                *i += 1;
                1
            }
            _ => 1,
        }
    };
    let number = |b: &[u8], i: &mut usize| -> Option<i128> {
        let sign = sign_of(b, i);
        let start = *i;
        while b.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
        if *i == start {
            return None;
        }
        let digits = std::str::from_utf8(&b[start..*i]).ok()?;
        // Java parses each part as a long.
        let n: i64 = digits.parse().ok()?;
        Some(sign * n as i128)
    };
    let overall = sign_of(b, &mut i);
    if !matches!(b.get(i), Some(b'P' | b'p')) {
        return None;
    }
    i += 1;
    let mut total: i128 = 0;
    let mut parts = 0;
    const SEC: i128 = 1_000_000_000;
    // Days.
    let save = i;
    if let Some(n) = number(b, &mut i) {
        if matches!(b.get(i), Some(b'D' | b'd')) {
            i += 1;
            total = total.checked_add(n.checked_mul(86_400 * SEC)?)?;
            parts += 1;
        } else {
            i = save;
        }
    } else {
        i = save;
    }
    if matches!(b.get(i), Some(b'T' | b't')) {
        i += 1;
        let mut time_parts = 0;
        for (unit, scale) in [(b'H', 3_600 * SEC), (b'M', 60 * SEC)] {
            let save = i;
            match number(b, &mut i) {
                Some(n) if b.get(i).map(u8::to_ascii_uppercase) == Some(unit) => {
                    i += 1;
                    total = total.checked_add(n.checked_mul(scale)?)?;
                    time_parts += 1;
                }
                _ => i = save,
            }
        }
        let save = i;
        let sign_at = i;
        if let Some(n) = number(b, &mut i) {
            let mut frac: i128 = 0;
            if matches!(b.get(i), Some(b'.' | b',')) {
                i += 1;
                let start = i;
                while b.get(i).is_some_and(u8::is_ascii_digit) {
                    i += 1;
                }
                if i - start > 9 {
                    return None;
                }
                let digits = std::str::from_utf8(&b[start..i]).ok()?;
                let padded = format!("{digits:0<9}");
                frac = padded.parse::<i128>().ok()?;
                if b.get(sign_at) == Some(&b'-') {
                    frac = -frac;
                }
            }
            if matches!(b.get(i), Some(b'S' | b's')) {
                i += 1;
                total = total.checked_add(n.checked_mul(SEC)?.checked_add(frac)?)?;
                time_parts += 1;
            } else {
                i = save;
            }
        }
        if time_parts == 0 {
            return None;
        }
        parts += time_parts;
    }
    if parts == 0 || i != b.len() {
        return None;
    }
    let total = overall.checked_mul(total)?;
    // Java's Duration holds seconds as a long.
    if total / SEC > i64::MAX as i128 || total / SEC < i64::MIN as i128 {
        return None;
    }
    Some(total)
}

/// A bound the broker's settings put on a group config.
#[derive(Debug, Clone, Copy)]
enum Bound {
    /// Between two broker settings, inclusive.
    Range(&'static str, &'static str),
    /// At most a broker setting.
    Max(&'static str),
    /// At least a broker setting.
    Min(&'static str),
}

impl Bound {
    fn check(
        self,
        name: &str,
        v: i64,
        broker: &BrokerGroupSettings,
    ) -> Result<(), GroupConfigError> {
        let name = name.to_string();
        match self {
            Bound::Range(min, max) => {
                let (min, max) = (broker.int(min), broker.int(max));
                if v < min || v > max {
                    return Err(GroupConfigError::OutOfRange { name, min, max });
                }
            }
            Bound::Max(max) => {
                let max = broker.int(max);
                if v > max {
                    return Err(GroupConfigError::AboveMax { name, max });
                }
            }
            Bound::Min(min) => {
                let min = broker.int(min);
                if v < min {
                    return Err(GroupConfigError::BelowMin { name, min });
                }
            }
        }
        Ok(())
    }
}

/// The broker bounds of group configs, in the order Kafka checks them.
static BOUNDS: &[(&str, Bound)] = &[
    (
        CONSUMER_HEARTBEAT_INTERVAL_MS,
        Bound::Range(
            "group.consumer.min.heartbeat.interval.ms",
            "group.consumer.max.heartbeat.interval.ms",
        ),
    ),
    (
        CONSUMER_SESSION_TIMEOUT_MS,
        Bound::Range(
            "group.consumer.min.session.timeout.ms",
            "group.consumer.max.session.timeout.ms",
        ),
    ),
    (
        "consumer.assignment.interval.ms",
        Bound::Range(
            "group.consumer.min.assignment.interval.ms",
            "group.consumer.max.assignment.interval.ms",
        ),
    ),
    (
        "share.heartbeat.interval.ms",
        Bound::Range(
            "group.share.min.heartbeat.interval.ms",
            "group.share.max.heartbeat.interval.ms",
        ),
    ),
    (
        "share.session.timeout.ms",
        Bound::Range(
            "group.share.min.session.timeout.ms",
            "group.share.max.session.timeout.ms",
        ),
    ),
    (
        "share.record.lock.duration.ms",
        Bound::Range(
            "group.share.min.record.lock.duration.ms",
            "group.share.max.record.lock.duration.ms",
        ),
    ),
    (
        "share.delivery.count.limit",
        Bound::Range(
            "group.share.min.delivery.count.limit",
            "group.share.max.delivery.count.limit",
        ),
    ),
    (
        "share.partition.max.record.locks",
        Bound::Range(
            "group.share.min.partition.max.record.locks",
            "group.share.max.partition.max.record.locks",
        ),
    ),
    (
        "share.assignment.interval.ms",
        Bound::Range(
            "group.share.min.assignment.interval.ms",
            "group.share.max.assignment.interval.ms",
        ),
    ),
    (
        "streams.heartbeat.interval.ms",
        Bound::Range(
            "group.streams.min.heartbeat.interval.ms",
            "group.streams.max.heartbeat.interval.ms",
        ),
    ),
    (
        "streams.session.timeout.ms",
        Bound::Range(
            "group.streams.min.session.timeout.ms",
            "group.streams.max.session.timeout.ms",
        ),
    ),
    (
        "streams.num.standby.replicas",
        Bound::Max("group.streams.max.standby.replicas"),
    ),
    (
        "streams.assignment.interval.ms",
        Bound::Range(
            "group.streams.min.assignment.interval.ms",
            "group.streams.max.assignment.interval.ms",
        ),
    ),
    (
        "streams.task.offset.interval.ms",
        Bound::Min("group.streams.min.task.offset.interval.ms"),
    ),
    (
        "streams.num.warmup.replicas",
        Bound::Max("group.streams.max.warmup.replicas"),
    ),
];

/// Validates the complete set of a group's configs, as Kafka 4.4 does.
pub fn validate(
    configs: &BTreeMap<String, String>,
    broker: &BrokerGroupSettings,
) -> Result<(), GroupConfigError> {
    if let Some(unknown) = configs.keys().find(|k| def_of(k).is_none()) {
        return Err(GroupConfigError::UnknownName(unknown.clone()));
    }
    if let Some(tags) = configs.get("streams.rack.aware.assignment.tags") {
        let list = split_list(tags);
        let distinct: std::collections::BTreeSet<&String> = list.iter().collect();
        if distinct.len() != list.len() {
            return Err(GroupConfigError::DuplicateRackTags);
        }
    }
    let mut numbers: BTreeMap<&str, i64> = BTreeMap::new();
    for d in GROUP_CONFIGS {
        if let Some(raw) = configs.get(d.name) {
            if let Parsed::Number(n) = parse(d, raw)? {
                numbers.insert(d.name, n);
            }
        }
    }
    for (name, bound) in BOUNDS {
        if let Some(v) = numbers.get(name) {
            bound.check(name, *v, broker)?;
        }
    }
    if let Some(name) = configs.get("streams.assignor.name") {
        let registered = broker.streams_assignors();
        if !registered.iter().any(|r| r == name.trim()) {
            return Err(GroupConfigError::UnknownAssignor {
                name: name.trim().to_string(),
                registered: registered.join(", "),
            });
        }
    }
    for (session, heartbeat, prefix) in [
        (
            CONSUMER_SESSION_TIMEOUT_MS,
            CONSUMER_HEARTBEAT_INTERVAL_MS,
            "group.consumer",
        ),
        (
            "share.session.timeout.ms",
            "share.heartbeat.interval.ms",
            "group.share",
        ),
        (
            "streams.session.timeout.ms",
            "streams.heartbeat.interval.ms",
            "group.streams",
        ),
    ] {
        if !numbers.contains_key(session) && !numbers.contains_key(heartbeat) {
            continue;
        }
        let s = numbers
            .get(session)
            .copied()
            .unwrap_or_else(|| broker.int(&format!("{prefix}.session.timeout.ms")));
        let h = numbers
            .get(heartbeat)
            .copied()
            .unwrap_or_else(|| broker.int(&format!("{prefix}.heartbeat.interval.ms")));
        if s <= h {
            return Err(GroupConfigError::SessionNotAboveHeartbeat { session, heartbeat });
        }
    }
    if configs
        .get("errors.deadletterqueue.topic.name")
        .is_some_and(|v| v.trim().starts_with("__"))
    {
        return Err(GroupConfigError::InternalDlqTopic);
    }
    Ok(())
}

/// One described entry of a group config: its effective value and source, and the synonyms
/// in Kafka's order (the group's own value, the broker setting from its config file, then
/// Kafka's default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Described {
    pub name: &'static str,
    pub value: String,
    pub source: i8,
    pub kind: Kind,
    pub doc: &'static str,
    /// (name, value, source)
    pub synonyms: Vec<(String, String, i8)>,
}

/// The entries DescribeConfigs lists for a group with these overrides: every non-internal
/// config, and internal ones only once set.
pub fn describe(
    overrides: &BTreeMap<String, String>,
    broker: &BrokerGroupSettings,
) -> Vec<Described> {
    GROUP_CONFIGS
        .iter()
        .filter(|d| !d.internal || overrides.contains_key(d.name))
        .map(|d| {
            // The broker's setting (when its config file sets it) and Kafka's default.
            let mut fallbacks = Vec::new();
            match d.broker_synonym {
                Some(b) => {
                    let (v, src) = broker.value(b);
                    if src == SOURCE_STATIC_BROKER {
                        fallbacks.push((b.to_string(), v, src));
                    }
                    fallbacks.push((
                        b.to_string(),
                        BrokerGroupSettings::default_of(b),
                        SOURCE_DEFAULT,
                    ));
                }
                None => fallbacks.push((d.name.to_string(), d.default.to_string(), SOURCE_DEFAULT)),
            }
            let fallback = fallbacks[0].clone();
            let mut synonyms = Vec::new();
            let (value, source) = match overrides.get(d.name) {
                Some(v) => {
                    synonyms.push((d.name.to_string(), v.clone(), SOURCE_DYNAMIC_GROUP));
                    (v.clone(), SOURCE_DYNAMIC_GROUP)
                }
                // The streams assignor in force is the first one the broker registers.
                None if d.name == "streams.assignor.name" => (
                    split_list(&fallback.1)
                        .into_iter()
                        .next()
                        .unwrap_or_default(),
                    fallback.2,
                ),
                None => (fallback.1.clone(), fallback.2),
            };
            synonyms.extend(fallbacks);
            Described {
                name: d.name,
                value,
                source,
                kind: d.kind,
                doc: d.doc,
                synonyms,
            }
        })
        .collect()
}

/// The KIP-848 session timeout and heartbeat interval (ms) a consumer group runs with: its
/// own configs when set, else the broker's, kept within the broker's current bounds (as
/// Kafka clamps a group value the broker bounds no longer allow).
pub fn consumer_timeouts(
    overrides: &BTreeMap<String, String>,
    broker: &BrokerGroupSettings,
) -> (i64, i64) {
    let pick = |name: &str, synonym: &str, min: &str, max: &str| -> i64 {
        let base = broker.int(synonym);
        match overrides
            .get(name)
            .and_then(|v| v.trim().parse::<i32>().ok())
        {
            Some(v) => {
                let (lo, hi) = (broker.int(min), broker.int(max));
                (v as i64).max(lo).min(hi.max(lo))
            }
            None => base,
        }
    };
    (
        pick(
            CONSUMER_SESSION_TIMEOUT_MS,
            "group.consumer.session.timeout.ms",
            "group.consumer.min.session.timeout.ms",
            "group.consumer.max.session.timeout.ms",
        ),
        pick(
            CONSUMER_HEARTBEAT_INTERVAL_MS,
            "group.consumer.heartbeat.interval.ms",
            "group.consumer.min.heartbeat.interval.ms",
            "group.consumer.max.heartbeat.interval.ms",
        ),
    )
}

/// What a share group runs with: its own configs when set (kept within the broker's bounds),
/// else the broker's `group.share.*` settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareSettings {
    pub session_timeout_ms: i64,
    pub heartbeat_interval_ms: i64,
    pub record_lock_duration_ms: i64,
    pub delivery_count_limit: i64,
    pub max_record_locks: i64,
    /// `share.auto.offset.reset`: `earliest`, `latest` or `by_duration:<ISO 8601 duration>`.
    pub auto_offset_reset: String,
    pub read_committed: bool,
    /// `share.renew.acknowledge.enable`: members may renew their acquisition locks.
    pub renew_acknowledge_enable: bool,
}

pub fn share_settings(
    overrides: &BTreeMap<String, String>,
    broker: &BrokerGroupSettings,
) -> ShareSettings {
    let pick = |name: &str, synonym: &str| -> i64 {
        let bounds = synonym.replacen("group.share.", "", 1);
        let (min, max) = (
            format!("group.share.min.{bounds}"),
            format!("group.share.max.{bounds}"),
        );
        let base = broker.int(synonym);
        match overrides
            .get(name)
            .and_then(|v| v.trim().parse::<i32>().ok())
        {
            Some(v) => {
                let (lo, hi) = (broker.int(&min), broker.int(&max));
                (v as i64).max(lo).min(hi.max(lo))
            }
            None => base,
        }
    };
    let text = |name: &str, default: &str| -> String {
        overrides
            .get(name)
            .map(|v| v.trim().to_string())
            .unwrap_or_else(|| default.to_string())
    };
    ShareSettings {
        session_timeout_ms: pick("share.session.timeout.ms", "group.share.session.timeout.ms"),
        heartbeat_interval_ms: pick(
            "share.heartbeat.interval.ms",
            "group.share.heartbeat.interval.ms",
        ),
        record_lock_duration_ms: pick(
            "share.record.lock.duration.ms",
            "group.share.record.lock.duration.ms",
        ),
        delivery_count_limit: pick(
            "share.delivery.count.limit",
            "group.share.delivery.count.limit",
        ),
        max_record_locks: pick(
            "share.partition.max.record.locks",
            "group.share.partition.max.record.locks",
        ),
        auto_offset_reset: text("share.auto.offset.reset", "latest"),
        read_committed: text("share.isolation.level", "read_uncommitted") == "read_committed",
        renew_acknowledge_enable: text("share.renew.acknowledge.enable", "true")
            .eq_ignore_ascii_case("true"),
    }
}

#[cfg(test)]
mod tests;
