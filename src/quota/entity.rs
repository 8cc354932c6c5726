//! Client quota configuration as Kafka models it: entities (`user`, `client-id`, `ip`, each
//! named or the default) with quota values, Kafka's validation of alterations
//! (`ClientQuotaControlManager`) and its describe filters (`ClientQuotasImage.describe`).
//! Pure data: no I/O except the host-name check, which the caller passes in.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

pub const USER: &str = "user";
pub const CLIENT_ID: &str = "client-id";
pub const IP: &str = "ip";

/// The name of one entity component: a specific name or the default (`<default>`, a null
/// name in the protocol).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EntityName {
    Default,
    Named(String),
}

impl EntityName {
    pub fn from_wire(name: Option<&str>) -> EntityName {
        match name {
            None => EntityName::Default,
            Some(n) => EntityName::Named(n.to_string()),
        }
    }

    pub fn to_wire(&self) -> Option<&str> {
        match self {
            EntityName::Default => None,
            EntityName::Named(n) => Some(n),
        }
    }
}

impl fmt::Display for EntityName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EntityName::Default => f.write_str("<default>"),
            EntityName::Named(n) => f.write_str(n),
        }
    }
}

/// A quota entity: `user`, `client-id`, `user`+`client-id`, or `ip`.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QuotaEntity {
    pub user: Option<EntityName>,
    pub client_id: Option<EntityName>,
    pub ip: Option<EntityName>,
}

impl QuotaEntity {
    /// (entity type, name) pairs in a stable order: user, client-id, ip.
    pub fn components(&self) -> Vec<(&'static str, &EntityName)> {
        let mut out = Vec::with_capacity(2);
        if let Some(u) = &self.user {
            out.push((USER, u));
        }
        if let Some(c) = &self.client_id {
            out.push((CLIENT_ID, c));
        }
        if let Some(i) = &self.ip {
            out.push((IP, i));
        }
        out
    }

    fn get(&self, entity_type: &str) -> Option<&EntityName> {
        match entity_type {
            USER => self.user.as_ref(),
            CLIENT_ID => self.client_id.as_ref(),
            IP => self.ip.as_ref(),
            _ => None,
        }
    }
}

impl fmt::Display for QuotaEntity {
    /// Kafka's `ClientQuotaEntity(entries={user=alice, client-id=app})`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let entries: Vec<String> = self
            .components()
            .iter()
            .map(|(t, n)| match n {
                EntityName::Default => format!("{t}=null"),
                EntityName::Named(n) => format!("{t}={n}"),
            })
            .collect();
        write!(f, "ClientQuotaEntity(entries={{{}}})", entries.join(", "))
    }
}

/// The quota keys, with Kafka's names and value types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum QuotaKey {
    ProducerByteRate,
    ConsumerByteRate,
    RequestPercentage,
    ControllerMutationRate,
    ConnectionCreationRate,
}

/// How a quota value must look (Kafka's `ConfigDef.Type` of the key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ValueType {
    Int,
    Long,
    Double,
}

impl QuotaKey {
    pub const ALL: [QuotaKey; 5] = [
        QuotaKey::ProducerByteRate,
        QuotaKey::ConsumerByteRate,
        QuotaKey::RequestPercentage,
        QuotaKey::ControllerMutationRate,
        QuotaKey::ConnectionCreationRate,
    ];

    pub fn name(self) -> &'static str {
        match self {
            QuotaKey::ProducerByteRate => "producer_byte_rate",
            QuotaKey::ConsumerByteRate => "consumer_byte_rate",
            QuotaKey::RequestPercentage => "request_percentage",
            QuotaKey::ControllerMutationRate => "controller_mutation_rate",
            QuotaKey::ConnectionCreationRate => "connection_creation_rate",
        }
    }

    pub fn parse(name: &str) -> Option<QuotaKey> {
        QuotaKey::ALL.into_iter().find(|k| k.name() == name)
    }

    fn value_type(self) -> ValueType {
        match self {
            QuotaKey::ProducerByteRate | QuotaKey::ConsumerByteRate => ValueType::Long,
            QuotaKey::RequestPercentage | QuotaKey::ControllerMutationRate => ValueType::Double,
            QuotaKey::ConnectionCreationRate => ValueType::Int,
        }
    }

    /// `ip` entities take `connection_creation_rate` only; user and client-id entities take
    /// the others.
    fn applies_to_ip(self) -> bool {
        self == QuotaKey::ConnectionCreationRate
    }
}

/// A refused request, with Kafka's exception (and so its error code) and message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuotaError {
    /// Kafka's `InvalidRequestException` (INVALID_REQUEST).
    #[error("{0}")]
    InvalidRequest(String),
    /// Kafka's `UnsupportedVersionException` (UNSUPPORTED_VERSION): an entity type this
    /// broker does not know in a describe filter.
    #[error("{0}")]
    UnsupportedVersion(String),
}

fn invalid(message: impl Into<String>) -> QuotaError {
    QuotaError::InvalidRequest(message.into())
}

/// One entry of an AlterClientQuotas request, as sent.
#[derive(Debug, Clone, PartialEq)]
pub struct Alteration {
    /// (entity type, name; None = the default).
    pub entity: Vec<(String, Option<String>)>,
    /// (key, value; None = remove).
    pub ops: Vec<(String, Option<f64>)>,
}

/// A validated alteration: what to set and remove on which entity.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub entity: QuotaEntity,
    pub set: Vec<(QuotaKey, f64)>,
    /// Keys to remove (removing an unknown or unset key is a no-op, as in Kafka).
    pub remove: Vec<String>,
}

/// One component of a DescribeClientQuotas filter, as sent.
#[derive(Debug, Clone, PartialEq)]
pub struct FilterComponent {
    pub entity_type: String,
    /// 0 = EXACT (`match` names the entity), 1 = DEFAULT, 2 = SPECIFIED (any name).
    pub match_type: i8,
    pub matches: Option<String>,
}

pub const MATCH_TYPE_EXACT: i8 = 0;
pub const MATCH_TYPE_DEFAULT: i8 = 1;
pub const MATCH_TYPE_SPECIFIED: i8 = 2;

/// Entities with their quota values, as DescribeClientQuotas returns them.
pub type DescribedQuotas = Vec<(QuotaEntity, Vec<(QuotaKey, f64)>)>;

/// The configured client quotas: entity -> key -> value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QuotaStore {
    entries: BTreeMap<QuotaEntity, BTreeMap<QuotaKey, f64>>,
}

impl QuotaStore {
    pub fn entries(&self) -> impl Iterator<Item = (&QuotaEntity, &BTreeMap<QuotaKey, f64>)> {
        self.entries.iter()
    }

    pub fn get(&self, entity: &QuotaEntity, key: QuotaKey) -> Option<f64> {
        self.entries.get(entity)?.get(&key).copied()
    }

    /// Checks an alteration as Kafka's controller does. `resolves(host)` says whether an
    /// `ip` entity name is an IP address or a resolvable host name.
    pub fn validate(
        alteration: &Alteration,
        resolves: &dyn Fn(&str) -> bool,
    ) -> Result<Change, QuotaError> {
        let entity = validate_entity(&alteration.entity)?;
        let mut seen: Vec<&str> = Vec::new();
        for (key, _) in &alteration.ops {
            if seen.contains(&key.as_str()) {
                return Err(invalid(format!(
                    "Duplicate quota key {key} not updating quota for this entity {entity}"
                )));
            }
            seen.push(key);
        }
        let is_ip = match (&entity.ip, &entity.user, &entity.client_id) {
            (Some(_), None, None) => true,
            (Some(_), _, _) => {
                return Err(invalid(
                    "Invalid quota entity combination, IP entity should not be combined with User or ClientId",
                ))
            }
            (None, None, None) => return Err(invalid("Invalid empty client quota entity")),
            (None, _, _) => false,
        };
        if let Some(EntityName::Named(host)) = &entity.ip {
            if !resolves(host) {
                return Err(invalid(format!(
                    "{host} is not a valid IP or resolvable host."
                )));
            }
        }
        let mut change = Change {
            entity,
            set: Vec::new(),
            remove: Vec::new(),
        };
        for (name, value) in &alteration.ops {
            let Some(value) = value else {
                change.remove.push(name.clone());
                continue;
            };
            let key = QuotaKey::parse(name)
                .filter(|k| k.applies_to_ip() == is_ip)
                .ok_or_else(|| invalid(format!("Invalid configuration key {name}")))?;
            validate_value(key, *value)?;
            change.set.push((key, *value));
        }
        Ok(change)
    }

    /// Applies a validated change; returns whether anything changed.
    pub fn apply(&mut self, change: &Change) -> bool {
        let values = self.entries.entry(change.entity.clone()).or_default();
        let mut changed = false;
        for name in &change.remove {
            if let Some(key) = QuotaKey::parse(name) {
                changed |= values.remove(&key).is_some();
            }
        }
        for (key, value) in &change.set {
            changed |= values.insert(*key, *value) != Some(*value);
        }
        if values.is_empty() {
            self.entries.remove(&change.entity);
        }
        changed
    }

    /// The entities matching a DescribeClientQuotas filter, with their values.
    pub fn describe(
        &self,
        components: &[FilterComponent],
        strict: bool,
    ) -> Result<DescribedQuotas, QuotaError> {
        // entity type -> exact name (None = the default); and types that must be present.
        let mut exact: BTreeMap<&str, Option<&str>> = BTreeMap::new();
        let mut typed: Vec<&str> = Vec::new();
        for c in components {
            let t = c.entity_type.as_str();
            if t.is_empty() {
                return Err(invalid("Invalid empty entity type."));
            }
            if exact.contains_key(t) || typed.contains(&t) {
                return Err(invalid(format!(
                    "Entity type {t} cannot appear more than once in the filter."
                )));
            }
            if ![USER, CLIENT_ID, IP].contains(&t) {
                return Err(QuotaError::UnsupportedVersion(format!(
                    "Unsupported entity type {t}"
                )));
            }
            match c.match_type {
                MATCH_TYPE_EXACT => {
                    let Some(m) = c.matches.as_deref() else {
                        return Err(invalid(
                            "Request specified MATCH_TYPE_EXACT, but set match string to null.",
                        ));
                    };
                    exact.insert(t, Some(m));
                }
                MATCH_TYPE_DEFAULT => {
                    if c.matches.is_some() {
                        return Err(invalid(
                            "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.",
                        ));
                    }
                    exact.insert(t, None);
                }
                MATCH_TYPE_SPECIFIED => {
                    if c.matches.is_some() {
                        return Err(invalid(
                            "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.",
                        ));
                    }
                    typed.push(t);
                }
                other => return Err(invalid(format!("Unknown match type {other}"))),
            }
        }
        let mentions = |t: &str| exact.contains_key(t) || typed.contains(&t);
        if mentions(IP) && (mentions(USER) || mentions(CLIENT_ID)) {
            return Err(invalid(
                "Invalid entity filter component combination. IP filter component should not be used with user or clientId filter component.",
            ));
        }
        let matches = |entity: &QuotaEntity| {
            if strict && entity.components().len() != exact.len() + typed.len() {
                return false;
            }
            let exact_ok = exact
                .iter()
                .all(|(t, name)| entity.get(t).is_some_and(|n| n.to_wire() == *name));
            exact_ok && typed.iter().all(|t| entity.get(t).is_some())
        };
        Ok(self
            .entries
            .iter()
            .filter(|(e, _)| matches(e))
            .map(|(e, v)| (e.clone(), v.iter().map(|(k, v)| (*k, *v)).collect()))
            .collect())
    }

    /// The store as persisted in the metadata file.
    pub fn to_records(&self) -> Vec<QuotaRecord> {
        self.entries
            .iter()
            .map(|(entity, values)| QuotaRecord {
                entity: entity
                    .components()
                    .into_iter()
                    .map(|(t, n)| EntityRecord {
                        entity_type: t.to_string(),
                        name: n.to_wire().map(str::to_string),
                    })
                    .collect(),
                values: values
                    .iter()
                    .map(|(k, v)| (k.name().to_string(), *v))
                    .collect(),
            })
            .collect()
    }

    /// Loads persisted quotas; records that do not validate (a hand-edited file) are skipped
    /// with a warning rather than failing the start.
    pub fn from_records(records: &[QuotaRecord]) -> QuotaStore {
        let mut store = QuotaStore::default();
        for r in records {
            let alteration = Alteration {
                entity: r
                    .entity
                    .iter()
                    .map(|e| (e.entity_type.clone(), e.name.clone()))
                    .collect(),
                ops: r
                    .values
                    .iter()
                    .map(|(k, v)| (k.clone(), Some(*v)))
                    .collect(),
            };
            match QuotaStore::validate(&alteration, &|_| true) {
                Ok(change) => {
                    store.apply(&change);
                }
                Err(e) => tracing::warn!(error = %e, "ignoring an invalid stored client quota"),
            }
        }
        store
    }
}

/// A client quota entity and its values in the metadata file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuotaRecord {
    pub entity: Vec<EntityRecord>,
    pub values: BTreeMap<String, f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EntityRecord {
    pub entity_type: String,
    /// Absent for the default entity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

fn validate_entity(components: &[(String, Option<String>)]) -> Result<QuotaEntity, QuotaError> {
    if components.is_empty() {
        return Err(invalid("Invalid empty client quota entity"));
    }
    let mut entity = QuotaEntity::default();
    for (entity_type, name) in components {
        let slot = match entity_type.as_str() {
            USER => &mut entity.user,
            CLIENT_ID => &mut entity.client_id,
            IP => &mut entity.ip,
            other => {
                return Err(invalid(format!(
                    "Unhandled client quota entity type: {other}"
                )))
            }
        };
        if slot.is_some() {
            return Err(invalid(format!(
                "Invalid client quota entity, duplicate entity entry {entity_type}"
            )));
        }
        if name.as_deref() == Some("") {
            return Err(invalid(format!("Empty {entity_type} not supported")));
        }
        *slot = Some(EntityName::from_wire(name.as_deref()));
    }
    Ok(entity)
}

fn validate_value(key: QuotaKey, value: f64) -> Result<(), QuotaError> {
    let name = key.name();
    if value.is_nan() || value <= 0.0 {
        return Err(invalid(format!("Quota {name} must be greater than 0")));
    }
    let (max, type_name) = match key.value_type() {
        ValueType::Double if value.is_finite() => return Ok(()),
        ValueType::Double => return Err(invalid(format!("Quota {name} must be finite"))),
        ValueType::Int => (i32::MAX as f64, "an INT"),
        ValueType::Long => (i64::MAX as f64, "a LONG"),
    };
    if value > max {
        return Err(invalid(format!(
            "Proposed value for {name} is too large for {type_name}."
        )));
    }
    if (value % 1.0).abs() > 1e-6 {
        return Err(invalid(format!("{name} cannot be a fractional value.")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alteration(entity: &[(&str, Option<&str>)], ops: &[(&str, Option<f64>)]) -> Alteration {
        Alteration {
            entity: entity
                .iter()
                .map(|(t, n)| (t.to_string(), n.map(str::to_string)))
                .collect(),
            ops: ops.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        }
    }

    fn error_of(entity: &[(&str, Option<&str>)], ops: &[(&str, Option<f64>)]) -> String {
        match QuotaStore::validate(&alteration(entity, ops), &|h| h != "no.such.host") {
            Err(QuotaError::InvalidRequest(m)) => m,
            other => panic!("expected INVALID_REQUEST, got {other:?}"),
        }
    }

    #[test]
    fn alterations_are_validated_with_kafkas_messages() {
        let rate = [("producer_byte_rate", Some(1024.0))];
        assert_eq!(error_of(&[], &rate), "Invalid empty client quota entity");
        assert_eq!(
            error_of(&[("group", Some("g"))], &rate),
            "Unhandled client quota entity type: group"
        );
        assert_eq!(
            error_of(&[("user", Some(""))], &rate),
            "Empty user not supported"
        );
        assert_eq!(
            error_of(&[("user", Some("a")), ("user", Some("b"))], &rate),
            "Invalid client quota entity, duplicate entity entry user"
        );
        assert!(
            error_of(&[("ip", Some("10.0.0.1")), ("user", Some("a"))], &rate)
                .starts_with("Invalid quota entity combination")
        );
        assert_eq!(
            error_of(
                &[("ip", Some("no.such.host"))],
                &[("connection_creation_rate", Some(5.0))]
            ),
            "no.such.host is not a valid IP or resolvable host."
        );
        assert_eq!(
            error_of(&[("user", Some("a"))], &[("bogus", Some(1.0))]),
            "Invalid configuration key bogus"
        );
        assert_eq!(
            error_of(&[("ip", None)], &[("producer_byte_rate", Some(1.0))]),
            "Invalid configuration key producer_byte_rate"
        );
        assert_eq!(
            error_of(
                &[("user", None)],
                &[("connection_creation_rate", Some(1.0))]
            ),
            "Invalid configuration key connection_creation_rate"
        );
        assert_eq!(
            error_of(
                &[("client-id", Some("c"))],
                &[("producer_byte_rate", Some(0.0))]
            ),
            "Quota producer_byte_rate must be greater than 0"
        );
        assert_eq!(
            error_of(
                &[("client-id", Some("c"))],
                &[("producer_byte_rate", Some(1.5))]
            ),
            "producer_byte_rate cannot be a fractional value."
        );
        assert_eq!(
            error_of(
                &[("ip", Some("10.0.0.1"))],
                &[("connection_creation_rate", Some(3e9))]
            ),
            "Proposed value for connection_creation_rate is too large for an INT."
        );
        assert!(error_of(
            &[("user", Some("a"))],
            &[
                ("producer_byte_rate", Some(1.0)),
                ("producer_byte_rate", None)
            ]
        )
        .starts_with("Duplicate quota key producer_byte_rate"));
        // Fractional doubles are fine; removing an unknown key is a no-op.
        let c = QuotaStore::validate(
            &alteration(
                &[("user", None), ("client-id", Some("c"))],
                &[("request_percentage", Some(12.5)), ("bogus", None)],
            ),
            &|_| true,
        )
        .unwrap();
        assert_eq!(c.set, vec![(QuotaKey::RequestPercentage, 12.5)]);
        assert_eq!(c.entity.user, Some(EntityName::Default));
    }

    /// (entity as (type, name) pairs, key, value).
    type Spec<'a> = (&'a [(&'a str, Option<&'a str>)], &'a str, f64);

    fn store_with(items: &[Spec<'_>]) -> QuotaStore {
        let mut s = QuotaStore::default();
        for (entity, key, value) in items {
            let c = QuotaStore::validate(&alteration(entity, &[(key, Some(*value))]), &|_| true)
                .unwrap();
            assert!(s.apply(&c));
        }
        s
    }

    fn filter(t: &str, match_type: i8, m: Option<&str>) -> FilterComponent {
        FilterComponent {
            entity_type: t.into(),
            match_type,
            matches: m.map(str::to_string),
        }
    }

    #[test]
    fn describe_filters_match_like_kafka() {
        let s = store_with(&[
            (&[("user", Some("alice"))], "producer_byte_rate", 100.0),
            (&[("user", None)], "producer_byte_rate", 50.0),
            (
                &[("user", Some("alice")), ("client-id", Some("app"))],
                "consumer_byte_rate",
                10.0,
            ),
            (&[("client-id", Some("app"))], "request_percentage", 20.0),
            (&[("ip", Some("10.0.0.1"))], "connection_creation_rate", 5.0),
        ]);
        let count = |f: &[FilterComponent], strict| s.describe(f, strict).unwrap().len();
        // Everything.
        assert_eq!(count(&[], false), 5);
        // Strict with no components: nothing (no entity has zero components).
        assert_eq!(count(&[], true), 0);
        let alice = [filter("user", MATCH_TYPE_EXACT, Some("alice"))];
        assert_eq!(count(&alice, false), 2);
        assert_eq!(count(&alice, true), 1);
        assert_eq!(count(&[filter("user", MATCH_TYPE_DEFAULT, None)], true), 1);
        // SPECIFIED: any entity with the type (named or default).
        assert_eq!(
            count(&[filter("user", MATCH_TYPE_SPECIFIED, None)], true),
            2
        );
        assert_eq!(
            count(&[filter("client-id", MATCH_TYPE_SPECIFIED, None)], false),
            2
        );
        assert_eq!(count(&[filter("ip", MATCH_TYPE_SPECIFIED, None)], false), 1);
    }

    #[test]
    fn bad_describe_filters_are_refused() {
        let s = QuotaStore::default();
        let err = |f: &[FilterComponent]| s.describe(f, false).unwrap_err();
        assert_eq!(
            err(&[filter("", MATCH_TYPE_SPECIFIED, None)]),
            QuotaError::InvalidRequest("Invalid empty entity type.".into())
        );
        assert_eq!(
            err(&[filter("group", MATCH_TYPE_SPECIFIED, None)]),
            QuotaError::UnsupportedVersion("Unsupported entity type group".into())
        );
        assert!(matches!(
            err(&[
                filter("user", MATCH_TYPE_SPECIFIED, None),
                filter("user", MATCH_TYPE_DEFAULT, None)
            ]),
            QuotaError::InvalidRequest(m) if m.contains("more than once")
        ));
        assert!(matches!(
            err(&[filter("user", MATCH_TYPE_EXACT, None)]),
            QuotaError::InvalidRequest(m) if m.contains("MATCH_TYPE_EXACT")
        ));
        assert!(matches!(
            err(&[filter("user", MATCH_TYPE_DEFAULT, Some("x"))]),
            QuotaError::InvalidRequest(m) if m.contains("MATCH_TYPE_DEFAULT")
        ));
        assert!(matches!(
            err(&[filter("user", 7, None)]),
            QuotaError::InvalidRequest(m) if m == "Unknown match type 7"
        ));
        assert!(matches!(
            err(&[
                filter("ip", MATCH_TYPE_SPECIFIED, None),
                filter("user", MATCH_TYPE_SPECIFIED, None)
            ]),
            QuotaError::InvalidRequest(m) if m.contains("IP filter component")
        ));
    }

    #[test]
    fn removing_the_last_value_removes_the_entity_and_records_round_trip() {
        let mut s = store_with(&[
            (&[("user", Some("alice"))], "producer_byte_rate", 100.0),
            (&[("client-id", None)], "consumer_byte_rate", 7.0),
        ]);
        let back = QuotaStore::from_records(&s.to_records());
        assert_eq!(back, s);
        let text = toml::to_string(&Wrapper { q: s.to_records() }).unwrap();
        let parsed: Wrapper = toml::from_str(&text).unwrap();
        assert_eq!(QuotaStore::from_records(&parsed.q), s);
        let remove = QuotaStore::validate(
            &alteration(&[("user", Some("alice"))], &[("producer_byte_rate", None)]),
            &|_| true,
        )
        .unwrap();
        assert!(s.apply(&remove));
        assert!(!s.apply(&remove), "removing twice changes nothing");
        assert_eq!(s.entries().count(), 1);
    }

    #[derive(Serialize, Deserialize)]
    struct Wrapper {
        q: Vec<QuotaRecord>,
    }
}
