//! ACLs and the authorizer, with the semantics of Kafka's `StandardAuthorizer` (KRaft):
//!
//! - super users (`super.users`) may do anything;
//! - an ACL matches a resource when its pattern is the literal name, the literal wildcard `*`,
//!   or a prefix (PREFIXED); its principal is the caller's or `User:*`; its host is the caller's
//!   IP or `*`;
//! - a matching DENY wins over any ALLOW; an ALLOW of READ, WRITE, DELETE or ALTER implies
//!   DESCRIBE, and ALTER_CONFIGS implies DESCRIBE_CONFIGS (a DENY implies nothing);
//! - when no ACL at all names the resource, `allow.everyone.if.no.acl.found` decides.
//!
//! The ACLs are kept in the broker's metadata file (see `broker.rs`); this module only holds
//! them in memory and answers questions.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::RwLock;

use serde::{Deserialize, Serialize};

/// The only name a CLUSTER resource has.
pub const CLUSTER_NAME: &str = "kafka-cluster";
/// The literal wildcard resource name and the wildcard principal or host.
pub const WILDCARD: &str = "*";
const WILDCARD_PRINCIPAL: &str = "User:*";

/// Kafka's `ResourceType` codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ResourceType {
    Topic,
    Group,
    Cluster,
    TransactionalId,
    DelegationToken,
    User,
}

impl ResourceType {
    pub fn code(self) -> i8 {
        match self {
            ResourceType::Topic => 2,
            ResourceType::Group => 3,
            ResourceType::Cluster => 4,
            ResourceType::TransactionalId => 5,
            ResourceType::DelegationToken => 6,
            ResourceType::User => 7,
        }
    }

    pub fn from_code(code: i8) -> Option<ResourceType> {
        Some(match code {
            2 => ResourceType::Topic,
            3 => ResourceType::Group,
            4 => ResourceType::Cluster,
            5 => ResourceType::TransactionalId,
            6 => ResourceType::DelegationToken,
            7 => ResourceType::User,
            _ => return None,
        })
    }

    /// The operations Kafka reports in `*_authorized_operations` for this resource type.
    pub fn operations(self) -> &'static [Operation] {
        use Operation::*;
        match self {
            ResourceType::Topic => &[
                Read,
                Write,
                Create,
                Delete,
                Alter,
                Describe,
                DescribeConfigs,
                AlterConfigs,
            ],
            ResourceType::Group => &[Read, Describe, Delete],
            ResourceType::Cluster => &[
                Create,
                ClusterAction,
                DescribeConfigs,
                AlterConfigs,
                IdempotentWrite,
                Alter,
                Describe,
            ],
            ResourceType::TransactionalId => &[Describe, Write],
            ResourceType::DelegationToken => &[Describe],
            ResourceType::User => &[CreateTokens, DescribeTokens],
        }
    }
}

/// Kafka's `PatternType` codes for stored ACLs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PatternType {
    Literal,
    Prefixed,
}

impl PatternType {
    pub fn code(self) -> i8 {
        match self {
            PatternType::Literal => 3,
            PatternType::Prefixed => 4,
        }
    }
}

/// Kafka's `AclOperation` codes (without UNKNOWN and ANY, which only filters use).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Operation {
    All,
    Read,
    Write,
    Create,
    Delete,
    Alter,
    Describe,
    ClusterAction,
    DescribeConfigs,
    AlterConfigs,
    IdempotentWrite,
    CreateTokens,
    DescribeTokens,
    TwoPhaseCommit,
}

impl Operation {
    pub fn code(self) -> i8 {
        match self {
            Operation::All => 2,
            Operation::Read => 3,
            Operation::Write => 4,
            Operation::Create => 5,
            Operation::Delete => 6,
            Operation::Alter => 7,
            Operation::Describe => 8,
            Operation::ClusterAction => 9,
            Operation::DescribeConfigs => 10,
            Operation::AlterConfigs => 11,
            Operation::IdempotentWrite => 12,
            Operation::CreateTokens => 13,
            Operation::DescribeTokens => 14,
            Operation::TwoPhaseCommit => 15,
        }
    }

    pub fn from_code(code: i8) -> Option<Operation> {
        Some(match code {
            2 => Operation::All,
            3 => Operation::Read,
            4 => Operation::Write,
            5 => Operation::Create,
            6 => Operation::Delete,
            7 => Operation::Alter,
            8 => Operation::Describe,
            9 => Operation::ClusterAction,
            10 => Operation::DescribeConfigs,
            11 => Operation::AlterConfigs,
            12 => Operation::IdempotentWrite,
            13 => Operation::CreateTokens,
            14 => Operation::DescribeTokens,
            15 => Operation::TwoPhaseCommit,
            _ => return None,
        })
    }

    /// Whether an ALLOW ACL for `self` allows `wanted`.
    fn allows(self, wanted: Operation) -> bool {
        use Operation::*;
        self == All
            || self == wanted
            || (wanted == Describe && matches!(self, Read | Write | Delete | Alter))
            || (wanted == DescribeConfigs && self == AlterConfigs)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Permission {
    Deny,
    Allow,
}

impl Permission {
    pub fn code(self) -> i8 {
        match self {
            Permission::Deny => 2,
            Permission::Allow => 3,
        }
    }
}

/// One ACL: a resource pattern and an access-control entry.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AclBinding {
    pub resource_type: ResourceType,
    pub resource_name: String,
    pub pattern_type: PatternType,
    pub principal: String,
    pub host: String,
    pub operation: Operation,
    pub permission: Permission,
}

/// Why a CreateAcls entry was refused (Kafka answers INVALID_REQUEST with this message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidAcl(pub String);

impl AclBinding {
    /// Builds an ACL from the wire codes of a CreateAcls entry, with the checks of Kafka's
    /// `AclControlManager.validateNewAcl` and `AclApis`.
    pub fn from_wire(
        resource_type: i8,
        resource_name: &str,
        pattern_type: i8,
        principal: &str,
        host: &str,
        operation: i8,
        permission: i8,
    ) -> Result<AclBinding, InvalidAcl> {
        let bad = |m: String| Err(InvalidAcl(m));
        let Some(resource_type) = ResourceType::from_code(resource_type) else {
            return bad(format!("Invalid resourceType {}", code_name(resource_type)));
        };
        let pattern_type = match pattern_type {
            3 => PatternType::Literal,
            4 => PatternType::Prefixed,
            p => return bad(format!("Invalid patternType {}", pattern_name(p))),
        };
        let Some(operation) = Operation::from_code(operation) else {
            return bad(format!("Invalid operation {}", operation_name(operation)));
        };
        let permission = match permission {
            2 => Permission::Deny,
            3 => Permission::Allow,
            p => return bad(format!("Invalid permissionType {}", permission_name(p))),
        };
        if resource_name.is_empty() {
            return bad("Resource name should not be empty".into());
        }
        if resource_type == ResourceType::Cluster && resource_name != CLUSTER_NAME {
            return bad(format!(
                "The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
            ));
        }
        if !principal.contains(':') {
            return bad(format!(
                "Could not parse principal from `{principal}` (no colon is present separating the principal type from the principal name)"
            ));
        }
        Ok(AclBinding {
            resource_type,
            resource_name: resource_name.to_string(),
            pattern_type,
            principal: principal.to_string(),
            host: host.to_string(),
            operation,
            permission,
        })
    }

    /// Whether this ACL's pattern covers `name` (a resource of the ACL's type).
    fn covers(&self, name: &str) -> bool {
        match self.pattern_type {
            PatternType::Literal => self.resource_name == name || self.resource_name == WILDCARD,
            PatternType::Prefixed => name.starts_with(&self.resource_name),
        }
    }
}

fn code_name(code: i8) -> &'static str {
    match code {
        1 => "ANY",
        _ => "UNKNOWN",
    }
}

fn pattern_name(code: i8) -> &'static str {
    match code {
        1 => "ANY",
        2 => "MATCH",
        _ => "UNKNOWN",
    }
}

fn operation_name(code: i8) -> &'static str {
    code_name(code)
}

fn permission_name(code: i8) -> &'static str {
    code_name(code)
}

/// A DescribeAcls / DeleteAcls filter, in wire codes (`ANY` = 1 matches anything).
#[derive(Debug, Clone)]
pub struct AclFilter {
    pub resource_type: i8,
    pub resource_name: Option<String>,
    pub pattern_type: i8,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: i8,
    pub permission: i8,
}

const ANY: i8 = 1;
const MATCH: i8 = 2;

impl AclFilter {
    /// Kafka refuses filters with an UNKNOWN (or out-of-range) field: INVALID_REQUEST.
    pub fn validate(&self) -> Result<(), InvalidAcl> {
        if self.resource_type != ANY && ResourceType::from_code(self.resource_type).is_none() {
            return Err(InvalidAcl("Unknown resourceType in the filter".into()));
        }
        if !matches!(self.pattern_type, 1..=4) {
            return Err(InvalidAcl("Unknown patternFilter.".into()));
        }
        if self.operation != ANY && Operation::from_code(self.operation).is_none() {
            return Err(InvalidAcl("Unknown entryFilter: bad operation".into()));
        }
        if !matches!(self.permission, 1..=3) {
            return Err(InvalidAcl("Unknown entryFilter: bad permissionType".into()));
        }
        Ok(())
    }

    /// Kafka's `AclBindingFilter.matches`.
    pub fn matches(&self, acl: &AclBinding) -> bool {
        if self.resource_type != ANY && self.resource_type != acl.resource_type.code() {
            return false;
        }
        let pattern = acl.pattern_type.code();
        if self.pattern_type != ANY && self.pattern_type != MATCH && self.pattern_type != pattern {
            return false;
        }
        if let Some(name) = &self.resource_name {
            let name_ok = if self.pattern_type == ANY || self.pattern_type == pattern {
                *name == acl.resource_name
            } else {
                acl.covers(name)
            };
            if !name_ok {
                return false;
            }
        }
        self.principal.as_ref().is_none_or(|p| *p == acl.principal)
            && self.host.as_ref().is_none_or(|h| *h == acl.host)
            && (self.operation == ANY || self.operation == acl.operation.code())
            && (self.permission == ANY || self.permission == acl.permission.code())
    }
}

/// The authorizer: settings plus the ACLs in memory.
pub struct Authorizer {
    /// `authorizer.class.name` is set: without it every request is allowed and the ACL APIs
    /// answer SECURITY_DISABLED, as in Kafka.
    enabled: bool,
    super_users: HashSet<String>,
    allow_if_no_acl: bool,
    acls: RwLock<AclIndex>,
}

/// The ACLs, indexed so a check looks only at the ACLs that can cover the resource: those
/// with its exact name or `*`, and the prefixed ones whose prefix it starts with (one hash
/// lookup per distinct prefix length). A check costs the same with 10 or 100 000 ACLs.
#[derive(Default)]
struct AclIndex {
    /// Every ACL, in creation order (what Describe/DeleteAcls and the metadata file see).
    all: Vec<AclBinding>,
    literal: HashMap<ResourceType, HashMap<String, Vec<AclBinding>>>,
    prefixed: HashMap<ResourceType, HashMap<String, Vec<AclBinding>>>,
    /// The distinct prefix lengths (in bytes) per resource type.
    prefix_lengths: HashMap<ResourceType, BTreeSet<usize>>,
}

impl AclIndex {
    fn new(all: Vec<AclBinding>) -> AclIndex {
        let mut index = AclIndex::default();
        for acl in &all {
            let by_name = match acl.pattern_type {
                PatternType::Literal => &mut index.literal,
                PatternType::Prefixed => {
                    index
                        .prefix_lengths
                        .entry(acl.resource_type)
                        .or_default()
                        .insert(acl.resource_name.len());
                    &mut index.prefixed
                }
            };
            by_name
                .entry(acl.resource_type)
                .or_default()
                .entry(acl.resource_name.clone())
                .or_default()
                .push(acl.clone());
        }
        index.all = all;
        index
    }

    /// The ACLs whose pattern covers `name`.
    fn covering<'a>(
        &'a self,
        resource_type: ResourceType,
        name: &'a str,
    ) -> impl Iterator<Item = &'a AclBinding> + 'a {
        let literal = self.literal.get(&resource_type);
        let exact = literal.and_then(|m| m.get(name)).into_iter().flatten();
        let wildcard = literal
            .filter(|_| name != WILDCARD)
            .and_then(|m| m.get(WILDCARD))
            .into_iter()
            .flatten();
        let prefixed = self.prefixed.get(&resource_type);
        let prefixes = self
            .prefix_lengths
            .get(&resource_type)
            .into_iter()
            .flatten()
            .filter(move |&&len| len <= name.len() && name.is_char_boundary(len))
            .filter_map(move |&len| prefixed.and_then(|m| m.get(&name[..len])))
            .flatten();
        exact.chain(wildcard).chain(prefixes)
    }
}

impl Authorizer {
    pub fn new(
        enabled: bool,
        super_users: impl IntoIterator<Item = String>,
        allow_if_no_acl: bool,
        acls: Vec<AclBinding>,
    ) -> Authorizer {
        Authorizer {
            enabled,
            super_users: super_users.into_iter().collect(),
            allow_if_no_acl,
            acls: RwLock::new(AclIndex::new(acls)),
        }
    }

    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Whether `principal` connecting from `host` may perform `op` on the resource.
    pub fn authorize(
        &self,
        principal: &str,
        host: &str,
        op: Operation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        if !self.enabled || self.super_users.contains(principal) {
            return true;
        }
        let acls = self.acls.read().unwrap_or_else(|e| e.into_inner());
        let mut resource_has_acls = false;
        let mut allowed = false;
        for acl in acls.covering(resource_type, name) {
            resource_has_acls = true;
            if acl.principal != principal && acl.principal != WILDCARD_PRINCIPAL {
                continue;
            }
            if acl.host != WILDCARD && acl.host != host {
                continue;
            }
            match acl.permission {
                Permission::Deny if acl.operation == Operation::All || acl.operation == op => {
                    return false;
                }
                Permission::Allow if acl.operation.allows(op) => allowed = true,
                _ => {}
            }
        }
        allowed || (!resource_has_acls && self.allow_if_no_acl)
    }

    /// Kafka's `authorizeByResourceType`: whether `op` is allowed on at least one resource of
    /// the type (InitProducerId without a transactional id asks this for WRITE on topics).
    pub fn authorize_any(
        &self,
        principal: &str,
        host: &str,
        op: Operation,
        resource_type: ResourceType,
    ) -> bool {
        if !self.enabled || self.super_users.contains(principal) {
            return true;
        }
        let acls = self.acls.read().unwrap_or_else(|e| e.into_inner());
        let applies = |a: &&AclBinding| {
            a.resource_type == resource_type
                && (a.principal == principal || a.principal == WILDCARD_PRINCIPAL)
                && (a.host == WILDCARD || a.host == host)
        };
        let denies: Vec<&AclBinding> = acls
            .all
            .iter()
            .filter(applies)
            .filter(|a| {
                a.permission == Permission::Deny
                    && (a.operation == Operation::All || a.operation == op)
            })
            .collect();
        let denied = |a: &AclBinding| {
            denies.iter().any(|d| match d.pattern_type {
                PatternType::Literal => {
                    d.resource_name == WILDCARD
                        || (a.pattern_type == PatternType::Literal
                            && d.resource_name == a.resource_name)
                }
                PatternType::Prefixed => a.resource_name.starts_with(&d.resource_name),
            })
        };
        let any_allow = acls
            .all
            .iter()
            .filter(applies)
            .any(|a| a.permission == Permission::Allow && a.operation.allows(op) && !denied(a));
        if any_allow {
            return true;
        }
        // No ACL of the type at all: the default decides, as for a single resource.
        self.allow_if_no_acl && !acls.all.iter().any(|a| a.resource_type == resource_type)
    }

    /// The `*_authorized_operations` bit field for a resource (bit n = operation code n).
    pub fn authorized_operations(
        &self,
        principal: &str,
        host: &str,
        resource_type: ResourceType,
        name: &str,
    ) -> i32 {
        resource_type
            .operations()
            .iter()
            .filter(|op| self.authorize(principal, host, **op, resource_type, name))
            .fold(0, |bits, op| bits | (1 << op.code()))
    }

    pub fn acls(&self) -> Vec<AclBinding> {
        self.acls
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .all
            .clone()
    }

    /// Adds ACLs (existing ones are kept once); returns the new full list to persist.
    pub fn add(&self, new: &[AclBinding]) -> Vec<AclBinding> {
        let mut acls = self.acls.write().unwrap_or_else(|e| e.into_inner());
        let mut all = std::mem::take(&mut acls.all);
        let mut seen: HashSet<AclBinding> = all.iter().cloned().collect();
        for acl in new {
            if seen.insert(acl.clone()) {
                all.push(acl.clone());
            }
        }
        *acls = AclIndex::new(all);
        acls.all.clone()
    }

    /// Removes the ACLs matching each filter; returns what each filter removed and the new
    /// full list to persist.
    pub fn remove(&self, filters: &[AclFilter]) -> (Vec<Vec<AclBinding>>, Vec<AclBinding>) {
        let mut acls = self.acls.write().unwrap_or_else(|e| e.into_inner());
        let removed: Vec<Vec<AclBinding>> = filters
            .iter()
            .map(|f| acls.all.iter().filter(|a| f.matches(a)).cloned().collect())
            .collect();
        let kept: Vec<AclBinding> = std::mem::take(&mut acls.all)
            .into_iter()
            .filter(|a| !filters.iter().any(|f| f.matches(a)))
            .collect();
        *acls = AclIndex::new(kept);
        (removed, acls.all.clone())
    }

    /// Puts back a list (when persisting a change failed).
    pub fn replace(&self, acls: Vec<AclBinding>) {
        *self.acls.write().unwrap_or_else(|e| e.into_inner()) = AclIndex::new(acls);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Operation::*;
    use ResourceType::*;

    fn acl(
        rt: ResourceType,
        name: &str,
        pt: PatternType,
        principal: &str,
        op: Operation,
        perm: Permission,
    ) -> AclBinding {
        AclBinding {
            resource_type: rt,
            resource_name: name.into(),
            pattern_type: pt,
            principal: principal.into(),
            host: WILDCARD.into(),
            operation: op,
            permission: perm,
        }
    }

    fn authorizer(acls: Vec<AclBinding>, allow_if_no_acl: bool) -> Authorizer {
        Authorizer::new(true, ["User:admin".to_string()], allow_if_no_acl, acls)
    }

    #[test]
    fn literal_prefixed_and_wildcard_patterns_match_as_in_kafka() {
        let a = authorizer(
            vec![
                acl(
                    Topic,
                    "orders",
                    PatternType::Literal,
                    "User:alice",
                    Read,
                    Permission::Allow,
                ),
                acl(
                    Topic,
                    "logs-",
                    PatternType::Prefixed,
                    "User:alice",
                    Write,
                    Permission::Allow,
                ),
                acl(
                    Topic,
                    "*",
                    PatternType::Literal,
                    "User:bob",
                    Describe,
                    Permission::Allow,
                ),
            ],
            false,
        );
        let h = "127.0.0.1";
        assert!(a.authorize("User:alice", h, Read, Topic, "orders"));
        assert!(!a.authorize("User:alice", h, Read, Topic, "orders2"));
        assert!(a.authorize("User:alice", h, Write, Topic, "logs-app"));
        assert!(!a.authorize("User:alice", h, Write, Topic, "logs"));
        assert!(a.authorize("User:bob", h, Describe, Topic, "anything"));
        assert!(!a.authorize("User:bob", h, Read, Topic, "anything"));
        // READ and WRITE imply DESCRIBE.
        assert!(a.authorize("User:alice", h, Describe, Topic, "orders"));
        assert!(a.authorize("User:alice", h, Describe, Topic, "logs-x"));
        // Super users need no ACL; others get nothing without one.
        assert!(a.authorize("User:admin", h, Delete, Cluster, CLUSTER_NAME));
        assert!(!a.authorize("User:carol", h, Read, Group, "g"));
    }

    #[test]
    fn deny_wins_and_does_not_imply_describe() {
        let a = authorizer(
            vec![
                acl(
                    Topic,
                    "*",
                    PatternType::Literal,
                    "User:*",
                    All,
                    Permission::Allow,
                ),
                acl(
                    Topic,
                    "secret",
                    PatternType::Literal,
                    "User:alice",
                    Read,
                    Permission::Deny,
                ),
            ],
            false,
        );
        let h = "10.0.0.1";
        assert!(!a.authorize("User:alice", h, Read, Topic, "secret"));
        assert!(a.authorize("User:alice", h, Describe, Topic, "secret"));
        assert!(a.authorize("User:alice", h, Read, Topic, "public"));
        assert!(a.authorize("User:bob", h, Read, Topic, "secret"));
    }

    #[test]
    fn hosts_must_match_unless_wildcard() {
        let mut only_local = acl(
            Topic,
            "t",
            PatternType::Literal,
            "User:alice",
            Read,
            Permission::Allow,
        );
        only_local.host = "127.0.0.1".into();
        let a = authorizer(vec![only_local], false);
        assert!(a.authorize("User:alice", "127.0.0.1", Read, Topic, "t"));
        assert!(!a.authorize("User:alice", "10.1.1.1", Read, Topic, "t"));
    }

    #[test]
    fn allow_everyone_applies_only_to_resources_without_acls() {
        let a = authorizer(
            vec![acl(
                Topic,
                "t",
                PatternType::Literal,
                "User:alice",
                Read,
                Permission::Allow,
            )],
            true,
        );
        let h = "127.0.0.1";
        assert!(a.authorize("User:bob", h, Read, Topic, "other"));
        // "t" has an ACL (for alice only), so bob is denied.
        assert!(!a.authorize("User:bob", h, Read, Topic, "t"));
    }

    #[test]
    fn authorize_any_sees_allows_not_covered_by_denies() {
        let write_all_prefixed = acl(
            Topic,
            "app-",
            PatternType::Prefixed,
            "User:alice",
            Write,
            Permission::Allow,
        );
        let a = authorizer(vec![write_all_prefixed.clone()], false);
        assert!(a.authorize_any("User:alice", "h", Write, Topic));
        assert!(!a.authorize_any("User:bob", "h", Write, Topic));
        let a = authorizer(
            vec![
                write_all_prefixed,
                acl(
                    Topic,
                    "app",
                    PatternType::Prefixed,
                    "User:alice",
                    Write,
                    Permission::Deny,
                ),
            ],
            false,
        );
        assert!(!a.authorize_any("User:alice", "h", Write, Topic));
    }

    #[test]
    fn filters_match_like_kafkas_acl_binding_filter() {
        let literal = acl(
            Topic,
            "orders",
            PatternType::Literal,
            "User:a",
            Read,
            Permission::Allow,
        );
        let wildcard = acl(
            Topic,
            "*",
            PatternType::Literal,
            "User:a",
            Read,
            Permission::Allow,
        );
        let prefixed = acl(
            Topic,
            "ord",
            PatternType::Prefixed,
            "User:a",
            Read,
            Permission::Allow,
        );
        let f = |pattern_type: i8, name: Option<&str>| AclFilter {
            resource_type: Topic.code(),
            resource_name: name.map(str::to_string),
            pattern_type,
            principal: None,
            host: None,
            operation: ANY,
            permission: ANY,
        };
        let matching = |filter: AclFilter| -> Vec<bool> {
            [&literal, &wildcard, &prefixed]
                .iter()
                .map(|a| filter.matches(a))
                .collect()
        };
        assert_eq!(matching(f(MATCH, Some("orders"))), [true, true, true]);
        assert_eq!(matching(f(ANY, Some("orders"))), [true, false, false]);
        assert_eq!(matching(f(3, None)), [true, true, false]);
        assert_eq!(matching(f(4, Some("ord"))), [false, false, true]);
        assert!(f(0, None).validate().is_err());
        assert!(f(MATCH, None).validate().is_ok());
    }

    #[test]
    fn creations_are_validated_with_kafkas_messages() {
        let e = AclBinding::from_wire(4, "other", 3, "User:a", "*", 3, 3).unwrap_err();
        assert!(e.0.contains("only valid name for the CLUSTER"), "{e}");
        let e = AclBinding::from_wire(2, "t", 3, "alice", "*", 3, 3).unwrap_err();
        assert!(e.0.contains("Could not parse principal"), "{e}");
        let e = AclBinding::from_wire(1, "t", 3, "User:a", "*", 3, 3).unwrap_err();
        assert_eq!(e.0, "Invalid resourceType ANY");
        let e = AclBinding::from_wire(2, "t", 2, "User:a", "*", 3, 3).unwrap_err();
        assert_eq!(e.0, "Invalid patternType MATCH");
        assert!(AclBinding::from_wire(2, "t", 4, "User:a", "*", 2, 2).is_ok());
    }

    /// The index must answer exactly as a scan of every ACL would.
    #[test]
    fn the_index_agrees_with_a_scan_of_every_acl() {
        use proptest::prelude::*;
        use proptest::test_runner::{Config, TestRunner};
        let name = prop::sample::select(vec!["", "a", "ab", "abc", "b", "*", "a*", "é", "éa"]);
        let acl = (
            prop::sample::select(vec![Topic, Group]),
            name.clone(),
            prop::sample::select(vec![PatternType::Literal, PatternType::Prefixed]),
            prop::sample::select(vec!["User:a", "User:b", "User:*"]),
            prop::sample::select(vec![Read, Write, Describe, All]),
            prop::sample::select(vec![Permission::Allow, Permission::Deny]),
        )
            .prop_map(|(rt, n, pt, p, op, perm)| acl(rt, n, pt, p, op, perm));
        let case = (
            prop::collection::vec(acl, 0..12),
            prop::sample::select(vec![Topic, Group]),
            name,
            prop::sample::select(vec!["User:a", "User:b"]),
            prop::sample::select(vec![Read, Write, Describe]),
            any::<bool>(),
        );
        TestRunner::new(Config::with_cases(2000))
            .run(&case, |(acls, rt, n, principal, op, default)| {
                let scan = {
                    let covering: Vec<&AclBinding> = acls
                        .iter()
                        .filter(|a| a.resource_type == rt && a.covers(n))
                        .collect();
                    let mine =
                        |a: &&&AclBinding| a.principal == principal || a.principal == "User:*";
                    let denied = covering.iter().filter(mine).any(|a| {
                        a.permission == Permission::Deny
                            && (a.operation == All || a.operation == op)
                    });
                    let allowed = covering
                        .iter()
                        .filter(mine)
                        .any(|a| a.permission == Permission::Allow && a.operation.allows(op));
                    !denied && (allowed || (covering.is_empty() && default))
                };
                let a = Authorizer::new(true, Vec::new(), default, acls.clone());
                prop_assert_eq!(a.authorize(principal, "h", op, rt, n), scan, "{:?}", acls);
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn authorized_operations_is_a_bit_field_of_operation_codes() {
        let a = authorizer(
            vec![acl(
                Topic,
                "t",
                PatternType::Literal,
                "User:a",
                Read,
                Permission::Allow,
            )],
            false,
        );
        let bits = a.authorized_operations("User:a", "h", Topic, "t");
        assert_eq!(bits, (1 << Read.code()) | (1 << Describe.code()));
    }
}
