//! Cluster mode: the catalog's changes go through the metadata quorum.
//!
//! On a single node the broker applies a change (a topic created, a config set, an ACL
//! added, ...) to its own catalog and files. In cluster mode the same call proposes it to the
//! metadata quorum instead and returns once the committed change has reached this broker,
//! which applies it through the metadata sync like every other broker. The controller
//! implements [`MetadataQuorum`]; the runtime hands it to the broker once, when the broker
//! joins the cluster, before any client is served.

use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;

use uuid::Uuid;

use super::{Broker, Topic, TopicError};
use crate::security::acl::AclBinding;
use crate::security::scram::{Credential, Mechanism};

pub trait MetadataQuorum: Send + Sync {
    /// Whether the quorum knows a topic of this name.
    fn topic_exists(&self, name: &str) -> bool;
    /// Brokers that can take replicas (registered and unfenced).
    fn unfenced_brokers(&self) -> usize;
    /// The active controller's node id, when the quorum has a leader.
    fn active_controller(&self) -> Option<i32>;

    /// Creates a (validated) topic; returns this broker's copy once it is synced. Blocking.
    fn create_topic(
        &self,
        broker: &Broker,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        configs: BTreeMap<String, String>,
    ) -> Result<Arc<Topic>, TopicError>;
    fn delete_topic(&self, name: &str) -> Result<Uuid, TopicError>;
    fn create_partitions(
        &self,
        name: &str,
        count: i32,
        validate_only: bool,
    ) -> Result<(), TopicError>;
    fn set_topic_configs(
        &self,
        name: &str,
        overrides: BTreeMap<String, String>,
    ) -> Result<(), TopicError>;
    /// Replaces a broker resource's dynamic configs ("" = the cluster default).
    fn set_broker_configs(
        &self,
        resource: &str,
        configs: BTreeMap<String, String>,
    ) -> io::Result<()>;
    /// Replaces a group's configs (empty: removes them).
    fn set_group_configs(&self, group: &str, configs: BTreeMap<String, String>) -> io::Result<()>;
    fn allocate_producer_id(&self) -> io::Result<i64>;

    /// Sets (Some) or deletes (None) SCRAM credentials.
    fn alter_scram(&self, changes: &[(String, Mechanism, Option<Credential>)]) -> io::Result<()>;
    fn create_acls(&self, acls: &[AclBinding]) -> io::Result<()>;
    fn delete_acls(&self, acls: &[&AclBinding]) -> io::Result<()>;
    /// Puts or removes a delegation token.
    fn delegation_token(&self, change: &super::TokenChange) -> io::Result<()>;
    /// Replaces the finalized feature levels.
    fn set_features(&self, levels: &crate::features::FinalizedLevels) -> io::Result<()>;
    /// Replaces client quota records: `set` with values, `removed` entities with none.
    fn alter_client_quotas(
        &self,
        set: &[crate::quota::QuotaRecord],
        removed: &[crate::quota::QuotaRecord],
    ) -> io::Result<()>;
}
