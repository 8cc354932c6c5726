//! The broker's catalog file (`strata-metadata.toml` in the first log dir: topics, dynamic
//! configs, SCRAM credentials, ACLs, client quotas, the producer-id block), written atomically
//! (temp file, fsync, rename) on every change, and each partition dir's Kafka
//! `partition.metadata`. In cluster mode the quorum is the truth and this file a local copy.

use super::*;

#[derive(Serialize, Deserialize, Default)]
pub(super) struct MetadataFile {
    pub(super) cluster_id: String,
    pub(super) next_producer_id_block: i64,
    #[serde(default)]
    pub(super) topics: Vec<TopicRecord>,
    /// Dynamic broker configs set with (Incremental)AlterConfigs, keyed by resource name
    /// ("" = cluster-wide default, else a node id) and then by setting.
    #[serde(default)]
    pub(super) broker_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// Group configs set with (Incremental)AlterConfigs on GROUP resources: group id ->
    /// setting -> value. Kept when the group is deleted, as Kafka does.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(super) group_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// SCRAM credentials: user -> mechanism name -> salted keys (never the password).
    #[serde(default)]
    pub(super) scram_credentials: ScramStore,
    /// ACLs created with CreateAcls.
    #[serde(default)]
    pub(super) acls: Vec<crate::security::acl::AclBinding>,
    /// Client quotas set with AlterClientQuotas (entity and values).
    #[serde(default)]
    pub(super) client_quotas: Vec<crate::quota::QuotaRecord>,
    /// Credentials `strata scram add` wrote while the broker was stopped, which cluster mode
    /// has not proposed to the quorum yet (see [`crate::controller::records`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(super) scram_pending: ScramStore,
    /// The feature levels UpdateFeatures set (see [`crate::features`]).
    #[serde(default)]
    pub(super) features: crate::features::FinalizedLevels,
    /// Delegation tokens: their information only (never the HMAC or the secret key; the
    /// HMAC is recomputed from `delegation.token.secret.key` at start).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) delegation_tokens: Vec<crate::security::delegation_token::TokenInfo>,
}

/// user -> mechanism name -> credential, as the broker keeps them.
pub type ScramStore = BTreeMap<String, BTreeMap<String, crate::security::scram::Credential>>;

/// Adds or replaces a SCRAM credential in a data dir before the broker starts (`strata scram
/// add`, like `kafka-storage format --add-scram`). Blocking.
pub fn add_scram_credential_offline(
    config: &BrokerConfig,
    user: &str,
    mechanism: crate::security::scram::Mechanism,
    credential: crate::security::scram::Credential,
) -> io::Result<()> {
    let dir = &config.log_dirs[0];
    fs::create_dir_all(dir)?;
    let path = dir.join(METADATA_FILE);
    let mut meta: MetadataFile = match fs::read_to_string(&path) {
        Ok(text) => toml::from_str(&text).map_err(|e| io::Error::other(e.to_string()))?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => MetadataFile::default(),
        Err(e) => return Err(e),
    };
    meta.scram_credentials
        .entry(user.to_string())
        .or_default()
        .insert(mechanism.name().to_string(), credential.clone());
    meta.scram_pending
        .entry(user.to_string())
        .or_default()
        .insert(mechanism.name().to_string(), credential);
    let text = toml::to_string(&meta).map_err(|e| io::Error::other(e.to_string()))?;
    let tmp = path.with_extension("toml.tmp");
    fs::write(&tmp, text)?;
    fs::rename(&tmp, &path)
}

#[derive(Serialize, Deserialize, Clone)]
pub(super) struct TopicRecord {
    pub(super) name: String,
    pub(super) id: String,
    pub(super) partitions: i32,
    #[serde(default)]
    pub(super) configs: BTreeMap<String, String>,
}

/// True when the broker has never run on these log dirs (no meta.properties, and no topics in
/// the catalog: `strata scram add` may have written credentials before the first start).
pub fn is_fresh_data_dir(config: &BrokerConfig) -> bool {
    config.log_dirs.iter().all(|d| {
        let no_topics = fs::read_to_string(d.join(METADATA_FILE))
            .ok()
            .and_then(|t| toml::from_str::<MetadataFile>(&t).ok())
            .is_none_or(|m| m.topics.is_empty());
        no_topics
            && !d
                .join(super::meta_properties::META_PROPERTIES_FILE)
                .exists()
    })
}

/// Writes the catalog and log start offsets of topics restored from the bucket, before the
/// broker opens (see [`crate::tiering::restore_if_empty`]).
pub fn write_restored_metadata(
    config: &BrokerConfig,
    topics: &[(String, Uuid, i32, BTreeMap<String, String>)],
    log_starts: &[(String, i32, i64)],
    next_producer_id_block: i64,
) -> io::Result<()> {
    let dir = &config.log_dirs[0];
    fs::create_dir_all(dir)?;
    let lines: Vec<String> = log_starts
        .iter()
        .map(|(t, p, o)| format!("{t} {p} {o}"))
        .collect();
    checkpoint::write(&dir.join(LOG_START_FILE), &lines)?;
    let existing = fs::read_to_string(dir.join(METADATA_FILE))
        .ok()
        .and_then(|t| toml::from_str::<MetadataFile>(&t).ok())
        .unwrap_or_default();
    let file = MetadataFile {
        cluster_id: config.cluster_id.clone().unwrap_or_default(),
        next_producer_id_block,
        topics: topics
            .iter()
            .map(|(name, id, partitions, configs)| TopicRecord {
                name: name.clone(),
                id: id.to_string(),
                partitions: *partitions,
                configs: configs.clone(),
            })
            .collect(),
        broker_configs: BTreeMap::new(),
        group_configs: existing.group_configs,
        // Keep credentials added with `strata scram add` before this first start.
        scram_credentials: existing.scram_credentials,
        acls: existing.acls,
        client_quotas: existing.client_quotas,
        scram_pending: existing.scram_pending,
        features: existing.features,
        delegation_tokens: existing.delegation_tokens,
    };
    let text = toml::to_string(&file).map_err(|e| io::Error::other(e.to_string()))?;
    let path = dir.join(METADATA_FILE);
    let tmp = path.with_extension("toml.tmp");
    fs::write(&tmp, text)?;
    fs::rename(&tmp, &path)
}

/// Kafka's `partition.metadata`: the topic id, base64url without padding... Kafka writes the
/// id with `Uuid.toString()`, which is exactly that encoding.
pub(super) fn write_partition_metadata(dir: &Path, id: Uuid) -> io::Result<()> {
    let text = format!("version: 0\ntopic_id: {}\n", kafka_uuid_string(id));
    let tmp = dir.join("partition.metadata.tmp");
    fs::write(&tmp, text)?;
    crate::log::io_fault::rename(&tmp, &dir.join("partition.metadata"))
}

/// Kafka's textual topic id (URL-safe base64 of the 16 bytes, no padding).
pub fn kafka_uuid_string(id: Uuid) -> String {
    strata_metadata::ids::Uuid128::from_bytes(*id.as_bytes()).to_kafka_string()
}

impl Broker {
    pub(super) fn save_metadata_with(&self, next_producer_id_block: i64) -> io::Result<()> {
        let catalog = self.catalog.read().unwrap_or_else(|e| e.into_inner());
        let mut topics: Vec<TopicRecord> = catalog
            .by_name
            .values()
            .map(|t| TopicRecord {
                name: t.name.clone(),
                id: t.id.to_string(),
                partitions: t.partitions.len() as i32,
                configs: t.overrides.clone(),
            })
            .collect();
        drop(catalog);
        topics.sort_by(|a, b| a.name.cmp(&b.name));
        let broker_configs = self
            .dynamic_configs
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let group_configs = self
            .group_configs
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let scram_credentials = self.scram.read().unwrap_or_else(|e| e.into_inner()).clone();
        // In cluster mode a copy of the quorum's (empty until adopted).
        let cluster_id = self
            .cluster_id()
            .or(self.recorded_cluster_id.as_deref())
            .unwrap_or_default()
            .to_string();
        let file = MetadataFile {
            cluster_id,
            next_producer_id_block,
            topics,
            broker_configs,
            group_configs,
            scram_credentials,
            acls: self.authorizer.acls(),
            client_quotas: self.quotas.records(),
            scram_pending: self.pending_scram(),
            features: self.features.get(),
            delegation_tokens: self.delegation_token_infos(),
        };
        let text = toml::to_string(&file).map_err(|e| io::Error::other(e.to_string()))?;
        let path = self.config.log_dirs[0].join(METADATA_FILE);
        let tmp = path.with_extension("toml.tmp");
        let written = (|| {
            let f = fs::File::create(&tmp)?;
            crate::log::io_fault::write_all(&f, || tmp.clone(), text.as_bytes())?;
            crate::log::io_fault::sync_all(&f, || tmp.clone())?;
            crate::log::io_fault::rename(&tmp, &path)
        })();
        if written.is_err() {
            // The previous catalog file stays whole; do not leave a torn temp file behind.
            let _ = fs::remove_file(&tmp);
        }
        written
    }

    pub(super) fn save_metadata(&self) -> io::Result<()> {
        let block_end = self
            .producer_ids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .block_end;
        self.save_metadata_with(block_end)
    }
}
