//! The cluster catalog: one object listing the topics that keep data in the bucket, with their
//! IDs, partition counts and configs, so a cluster can be rebuilt from the bucket alone
//! (invariant 7) without listing it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::store::{RemoteStore, StoreError};

pub const CATALOG_KEY: &str = "_strata/catalog.json";
const CATALOG_FORMAT: u32 = 1;

/// The most partitions a catalog topic may have: the most CreateTopics accepts.
pub const MAX_TOPIC_PARTITIONS: i32 = 100_000;
/// The most partitions a whole catalog may list. A restore plans every partition's replicas
/// in memory and reads one manifest per partition before it proposes anything, so the
/// catalog's counts, not its size, would size that work.
pub const MAX_CATALOG_PARTITIONS: u64 = 1_000_000;

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
    let c = Catalog::decode(&bytes).map_err(StoreError::Request)?;
    Ok(Some((c, e_tag)))
}

impl Catalog {
    /// Decodes the catalog object and checks what a restore builds from it: every topic name
    /// legal in Kafka (so no name leads out of a log directory), 1 to
    /// [`MAX_TOPIC_PARTITIONS`] partitions each and [`MAX_CATALOG_PARTITIONS`] in all, a
    /// replication factor of at least 1, a topic id, and a producer-id high-water mark that
    /// is not negative.
    pub fn decode(bytes: &[u8]) -> Result<Catalog, String> {
        let c: Catalog =
            serde_json::from_slice(bytes).map_err(|e| format!("corrupt catalog: {e}"))?;
        if c.format > CATALOG_FORMAT {
            return Err(format!(
                "catalog format {} is newer than this broker understands",
                c.format
            ));
        }
        let corrupt = |what: String| Err(format!("corrupt catalog: {what}"));
        let mut total = 0u64;
        for (name, t) in &c.topics {
            let shown: String = name.chars().take(64).collect();
            if !legal_topic_name(name) {
                return corrupt(format!("{shown:?} is not a legal topic name"));
            }
            if !(1..=MAX_TOPIC_PARTITIONS).contains(&t.partitions) {
                return corrupt(format!(
                    "topic {shown} has {} partitions (1 to {MAX_TOPIC_PARTITIONS} allowed)",
                    t.partitions
                ));
            }
            if t.replication_factor < 1 {
                return corrupt(format!(
                    "topic {shown} has replication factor {}",
                    t.replication_factor
                ));
            }
            if t.topic_id.is_nil() {
                return corrupt(format!("topic {shown} has no topic id"));
            }
            if let Some(k) = t.configs.keys().find(|k| k.is_empty()) {
                return corrupt(format!("topic {shown} has a config with no name {k:?}"));
            }
            total += t.partitions as u64;
        }
        if total > MAX_CATALOG_PARTITIONS {
            return corrupt(format!(
                "{total} partitions in all (at most {MAX_CATALOG_PARTITIONS})"
            ));
        }
        if c.producer_id_block_end < 0 {
            return corrupt(format!("producer-id block end {}", c.producer_id_block_end));
        }
        Ok(c)
    }
}

/// Kafka's rule for topic names (1 to 249 of `[a-zA-Z0-9._-]`, not `.` or `..`); CreateTopics
/// and the metadata quorum apply it with Kafka's messages, the catalog only needs the verdict.
fn legal_topic_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 249
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
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

    fn catalog_with(name: &str, partitions: i32, replication_factor: i16) -> Vec<u8> {
        let topic = CatalogTopic {
            topic_id: uuid::Uuid::from_u128(7),
            partitions,
            replication_factor,
            configs: BTreeMap::new(),
        };
        let c = Catalog {
            format: 1,
            version: 1,
            topics: BTreeMap::from([(name.to_string(), topic)]),
            producer_id_block_end: 1000,
        };
        serde_json::to_vec(&c).unwrap()
    }

    #[test]
    fn decode_accepts_what_update_writes() {
        let c = Catalog::decode(&catalog_with("orders.v1_a-b", 12, 3)).unwrap();
        assert_eq!(c.topics["orders.v1_a-b"].partitions, 12);
        assert_eq!(c.producer_id_block_end, 1000);
        assert!(Catalog::decode(&catalog_with("t", MAX_TOPIC_PARTITIONS, 1)).is_ok());
    }

    #[test]
    fn decode_refuses_a_name_that_leads_out_of_a_log_directory() {
        for name in [
            "../../etc/x",
            "..",
            ".",
            "",
            "a/b",
            "a b",
            "é",
            &"x".repeat(250),
        ] {
            let e = Catalog::decode(&catalog_with(name, 1, 1)).unwrap_err();
            assert!(e.contains("is not a legal topic name"), "{name:?}: {e}");
        }
    }

    #[test]
    fn decode_refuses_counts_no_restore_could_plan() {
        for (partitions, rf, want) in [
            (0, 1, "has 0 partitions"),
            (-1, 1, "has -1 partitions"),
            (
                MAX_TOPIC_PARTITIONS + 1,
                1,
                "partitions (1 to 100000 allowed)",
            ),
            (i32::MAX, 1, "2147483647 partitions"),
            (1, 0, "replication factor 0"),
            (1, -3, "replication factor -3"),
        ] {
            let e = Catalog::decode(&catalog_with("t", partitions, rf)).unwrap_err();
            assert!(
                e.starts_with("corrupt catalog: ") && e.contains(want),
                "{e}"
            );
        }
        // Eleven topics of the most partitions each: more than a whole catalog may list.
        let mut c: Catalog =
            serde_json::from_slice(&catalog_with("t0", MAX_TOPIC_PARTITIONS, 1)).unwrap();
        for i in 1..11 {
            let mut t = c.topics["t0"].clone();
            t.topic_id = uuid::Uuid::from_u128(100 + i);
            c.topics.insert(format!("t{i}"), t);
        }
        let e = Catalog::decode(&serde_json::to_vec(&c).unwrap()).unwrap_err();
        assert!(e.contains("1100000 partitions in all"), "{e}");
    }

    #[test]
    fn decode_refuses_a_nil_topic_id_and_a_negative_producer_id_mark() {
        let mut c: Catalog = serde_json::from_slice(&catalog_with("t", 1, 1)).unwrap();
        c.producer_id_block_end = -5;
        let e = Catalog::decode(&serde_json::to_vec(&c).unwrap()).unwrap_err();
        assert!(e.contains("producer-id block end -5"), "{e}");
        c.producer_id_block_end = 0;
        c.topics.get_mut("t").unwrap().topic_id = uuid::Uuid::nil();
        let e = Catalog::decode(&serde_json::to_vec(&c).unwrap()).unwrap_err();
        assert!(e.contains("topic t has no topic id"), "{e}");
        let e = Catalog::decode(b"{\"format\": 9, \"version\": 1, \"topics\": {}}").unwrap_err();
        assert!(e.contains("format 9 is newer"), "{e}");
        assert!(Catalog::decode(b"\xff\x00")
            .unwrap_err()
            .starts_with("corrupt catalog: "));
    }

    #[tokio::test]
    async fn load_reports_a_corrupt_catalog_in_the_bucket() {
        let store = RemoteStore::in_memory();
        store
            .put("", CATALOG_KEY, catalog_with("../x", 1, 1).into())
            .await
            .unwrap();
        let e = load(&store).await.unwrap_err().to_string();
        assert!(e.contains("\"../x\" is not a legal topic name"), "{e}");
    }
}
