//! Feature versions (KIP-584): the levels of each feature this code implements, and the
//! finalized level in force, which ApiVersions reports and UpdateFeatures changes
//! (`kafka-features upgrade / downgrade`).
//!
//! A feature never set by UpdateFeatures is at its default level, the one a new Kafka 4.4
//! cluster finalizes where Strata implements it: the KIP-848 consumer group protocol
//! (`group.version` 1), share groups (`share.version` 2; Kafka gates nothing on level 2 beyond
//! level 1, which enables share groups) and KIP-890's transaction version 2 (the producer
//! epoch is bumped at every transaction end, and writes add their partitions to the
//! transaction), and a dynamic metadata quorum (`kraft.version` 1, as a Kafka 4.4 quorum
//! formatted with `--standalone` has: AddRaftVoter and RemoveRaftVoter are served; at level 0
//! they are refused as Kafka refuses them for a static quorum). Streams groups and eligible
//! leader replicas are not built, so those features support level 0 only. Kafka's
//! `metadata.version` describes Kafka's own metadata log records, which Strata does not have;
//! it is not listed.
//!
//! The levels set are durable: on a single node in the broker's catalog file, in a cluster
//! as one metadata record every broker applies (see [`crate::controller::sync`]). The epoch
//! grows with every change, so a client that asks several brokers keeps the newest view.

use std::collections::BTreeMap;
use std::sync::RwLock;

use serde::{Deserialize, Serialize};

/// One feature: the levels this code supports and the level a new cluster finalizes.
pub struct Feature {
    pub name: &'static str,
    pub min: i16,
    pub max: i16,
    pub default: i16,
}

pub const TRANSACTION_VERSION: &str = "transaction.version";

pub const FEATURES: &[Feature] = &[
    Feature {
        name: "eligible.leader.replicas.version",
        min: 0,
        max: 0,
        default: 0,
    },
    Feature {
        name: "group.version",
        min: 1,
        max: 1,
        default: 1,
    },
    Feature {
        name: "kraft.version",
        min: 0,
        max: 1,
        default: 1,
    },
    Feature {
        name: "share.version",
        min: 0,
        max: 2,
        default: 2,
    },
    Feature {
        name: "streams.version",
        min: 0,
        max: 0,
        default: 0,
    },
    Feature {
        name: TRANSACTION_VERSION,
        min: 0,
        max: 2,
        default: 2,
    },
];

pub fn find(name: &str) -> Option<&'static Feature> {
    FEATURES.iter().find(|f| f.name == name)
}

/// The levels UpdateFeatures has set (the other features are at their default) and the
/// epoch of the last change (0: never changed).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FinalizedLevels {
    #[serde(default)]
    pub levels: BTreeMap<String, i16>,
    #[serde(default)]
    pub epoch: i64,
}

impl FinalizedLevels {
    /// The level in force for `name` (0 for a feature this code does not know).
    pub fn level(&self, name: &str) -> i16 {
        match self.levels.get(name) {
            Some(&l) => l,
            None => find(name).map_or(0, |f| f.default),
        }
    }

    /// These levels with `changes` applied, at the next epoch.
    pub fn with(&self, changes: &BTreeMap<String, i16>) -> FinalizedLevels {
        let mut next = self.clone();
        for (name, &level) in changes {
            next.levels.insert(name.clone(), level);
        }
        next.epoch += 1;
        next
    }
}

/// The finalized levels in force on this broker.
#[derive(Debug, Default)]
pub struct Features {
    state: RwLock<FinalizedLevels>,
}

impl Features {
    pub fn new(levels: FinalizedLevels) -> Self {
        Features {
            state: RwLock::new(levels),
        }
    }

    pub fn get(&self) -> FinalizedLevels {
        self.state.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn level(&self, name: &str) -> i16 {
        self.state
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .level(name)
    }

    pub fn replace(&self, levels: FinalizedLevels) {
        *self.state.write().unwrap_or_else(|e| e.into_inner()) = levels;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_features_are_at_their_default_and_changes_raise_the_epoch() {
        let l = FinalizedLevels::default();
        assert_eq!(l.level(TRANSACTION_VERSION), 2);
        assert_eq!(l.level("group.version"), 1);
        assert_eq!(l.level("no.such.feature"), 0);
        let changed = l.with(&BTreeMap::from([(TRANSACTION_VERSION.to_string(), 1)]));
        assert_eq!((changed.level(TRANSACTION_VERSION), changed.epoch), (1, 1));
        let f = Features::default();
        f.replace(changed.clone());
        assert_eq!(f.get(), changed);
        assert_eq!(f.level(TRANSACTION_VERSION), 1);
    }
}
