//! The cluster catalog: one object listing the topics that keep data in the bucket, with their
//! IDs, partition counts and configs, so a cluster can be rebuilt from the bucket alone
//! (invariant 7) without listing it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::store::{RemoteStore, StoreError};

pub const CATALOG_KEY: &str = "_strata/catalog.json";
const CATALOG_FORMAT: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CatalogTopic {
    pub topic_id: uuid::Uuid,
    pub partitions: i32,
    pub replication_factor: i16,
    /// Topic configs set explicitly (Kafka names).
    pub configs: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Catalog {
    pub format: u32,
    pub version: u64,
    pub topics: BTreeMap<String, CatalogTopic>,
    /// The end of the last producer-id block the cluster handed out, so a restored cluster
    /// never reuses a producer id found in restored producer snapshots.
    #[serde(default)]
    pub producer_id_block_end: i64,
}

pub async fn load(store: &RemoteStore) -> Result<Option<(Catalog, Option<String>)>, StoreError> {
    let Some((bytes, e_tag)) = store.get("", CATALOG_KEY).await? else {
        return Ok(None);
    };
    let c: Catalog = serde_json::from_slice(&bytes)
        .map_err(|e| StoreError::Request(format!("corrupt catalog: {e}")))?;
    if c.format > CATALOG_FORMAT {
        return Err(StoreError::Request(format!(
            "catalog format {} is newer than this broker understands",
            c.format
        )));
    }
    Ok(Some((c, e_tag)))
}

/// Applies `change` to the catalog with compare-and-swap, retrying lost races. `change`
/// returns false when there is nothing to write.
pub async fn update(
    store: &RemoteStore,
    mut change: impl FnMut(&mut Catalog) -> bool,
) -> Result<(), StoreError> {
    for _ in 0..16 {
        let (mut catalog, e_tag) = match load(store).await? {
            Some((c, e)) => (c, e),
            None => (Catalog::default(), None),
        };
        let existed = e_tag.is_some();
        if !change(&mut catalog) {
            return Ok(());
        }
        catalog.format = CATALOG_FORMAT;
        catalog.version += 1;
        let bytes =
            serde_json::to_vec_pretty(&catalog).map_err(|e| StoreError::Request(e.to_string()))?;
        if existed && e_tag.is_none() {
            return Err(StoreError::Request(
                "the object store returned no ETag for the catalog".into(),
            ));
        }
        match store
            .put_if("", CATALOG_KEY, bytes.into(), e_tag.as_deref())
            .await
        {
            Ok(_) => return Ok(()),
            Err(StoreError::Conflict(_)) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(StoreError::Request(
        "catalog update kept losing races".into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn update_adds_and_removes_topics() {
        let store = RemoteStore::in_memory();
        assert!(load(&store).await.unwrap().is_none());
        let id = uuid::Uuid::new_v4();
        update(&store, |c| {
            c.topics.insert(
                "a".into(),
                CatalogTopic {
                    topic_id: id,
                    partitions: 3,
                    replication_factor: 1,
                    configs: BTreeMap::from([("remote.storage.enable".into(), "true".into())]),
                },
            );
            true
        })
        .await
        .unwrap();
        update(&store, |_| false).await.unwrap();
        let (c, _) = load(&store).await.unwrap().unwrap();
        assert_eq!(c.version, 1);
        assert_eq!(c.topics["a"].partitions, 3);
        update(&store, |c| c.topics.remove("a").is_some())
            .await
            .unwrap();
        let (c, _) = load(&store).await.unwrap().unwrap();
        assert!(c.topics.is_empty());
        assert_eq!(c.version, 2);
    }
}
