//! The services of one broker process, built once at start-up by [`crate::runtime`].
//!
//! [`Services`] holds the catalog and partitions ([`Broker`]) and the services that work on
//! them: the group and transaction coordinators and tiered storage. Nothing below points back
//! up here: a service is handed what it needs when it is built, and the catalog tells the
//! services that follow it through [`crate::broker::CatalogListener`]; in cluster mode it
//! proposes its changes through [`crate::broker::MetadataQuorum`]. Request handlers
//! ([`crate::api`]) each take only the parts they use.

use std::sync::{Arc, Mutex, Weak};

use anyhow::Context;

use strata_tiering::Event;

use crate::broker::leadership::PartitionLeadership;
use crate::broker::{Broker, CatalogListener, Topic};
use crate::config::BrokerConfig;
use crate::controller::ClusterControl;
use crate::coordinator::txn::TransactionCoordinator;
use crate::coordinator::GroupCoordinator;
use crate::fetch_session::FetchSessionCache;
use crate::share::ShareService;
use crate::tiering::Tiering;

pub struct Services {
    /// Topics, partitions and their logs; producer ids, configs and security metadata.
    pub broker: Arc<Broker>,
    pub groups: Arc<GroupCoordinator>,
    pub txns: Arc<TransactionCoordinator>,
    /// Tiered storage, when `remote.log.storage.system.enable` is set.
    pub tiering: Option<Arc<Tiering>>,
    /// Cluster mode: this broker's membership in the metadata quorum (set by the runtime
    /// once it has joined, before any client is served).
    pub cluster: Option<Arc<ClusterControl>>,
    /// Incremental fetch sessions (KIP-227): protocol state, kept with the handlers as Kafka's
    /// FetchManager is, not with the partitions.
    pub fetch_sessions: FetchSessions,
    /// Share groups' share-partitions on this broker (KIP-932).
    pub shares: Arc<ShareService>,
}

/// Kafka's `max.incremental.fetch.session.cache.slots` default.
const FETCH_SESSION_SLOTS: usize = 1000;

/// The fetch session cache, locked briefly by each fetch (never across `.await`).
pub struct FetchSessions(Mutex<FetchSessionCache>);

impl FetchSessions {
    pub fn lock(&self) -> std::sync::MutexGuard<'_, FetchSessionCache> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Default for FetchSessions {
    fn default() -> Self {
        FetchSessions(Mutex::new(FetchSessionCache::new(FETCH_SESSION_SLOTS)))
    }
}

impl Services {
    /// Opens every log (recovering after a crash), then loads the group coordinator and the
    /// transaction coordinator from their topics (in that order: transaction markers complete
    /// the group coordinator's pending offsets). Blocking.
    pub fn open(config: BrokerConfig, tiering: Option<Arc<Tiering>>) -> anyhow::Result<Services> {
        let broker = Broker::open(config)?;
        let groups = GroupCoordinator::open(&broker).context("loading the group coordinator")?;
        let txns = TransactionCoordinator::open(&broker, groups.clone())
            .context("loading the transaction coordinator")?;
        let shares = ShareService::open(broker.clone()).context("loading __share_group_state")?;
        // Held weakly by the broker, kept alive here.
        broker.add_listener(Arc::downgrade(&groups) as Weak<dyn CatalogListener>);
        broker.add_listener(Arc::downgrade(&txns) as Weak<dyn CatalogListener>);
        broker.add_listener(Arc::downgrade(&shares) as Weak<dyn CatalogListener>);
        if let Some(t) = &tiering {
            broker.add_listener(Arc::downgrade(t) as Weak<dyn CatalogListener>);
        }
        Ok(Services {
            broker,
            groups,
            txns,
            tiering,
            cluster: None,
            fetch_sessions: FetchSessions::default(),
            shares,
        })
    }
}

/// Share-partitions of a deleted topic are forgotten, and so are those of a partition this
/// broker no longer leads; the share coordinator follows the leadership of
/// `__share_group_state`.
impl CatalogListener for ShareService {
    fn topic_deleted(&self, topic: &Topic) {
        ShareService::topic_deleted(self, topic.id);
    }

    fn leadership_applied(&self, state: &PartitionLeadership, leader: bool) {
        if state.topic == crate::share::SHARE_STATE_TOPIC {
            let c = self.persister.coordinator();
            if leader {
                c.on_election(state.partition, state.leader_epoch.0);
            } else {
                c.on_resignation(state.partition);
            }
        } else if !leader {
            self.leadership_lost(state.topic_id, state.partition);
        }
    }
}

/// What tiered storage follows: committed sealed segments, leadership and config changes of
/// remote partitions wake their upload queues (the timer only reconciles what these miss),
/// and a deleted remote topic's data leaves the bucket too.
impl CatalogListener for Tiering {
    fn leadership_applied(&self, state: &PartitionLeadership, _leader: bool) {
        self.notify(&state.topic, state.partition, Event::LeadershipChanged);
    }

    fn topic_config_changed(&self, topic: &Topic) {
        if topic.config.remote_storage_enable {
            for p in 0..topic.partitions.len() as i32 {
                self.notify(&topic.name, p, Event::ConfigChanged);
            }
        } else {
            // Remote storage turned off (only allowed with remote.log.delete.on.disable).
            self.remote_storage_disabled(topic);
        }
    }

    fn topic_deleted(&self, topic: &Topic) {
        if topic.config.remote_storage_enable {
            self.topic_deleted(&topic.name, topic.id, topic.partitions.len() as i32);
        }
    }

    fn segment_committed(&self, topic: &str, partition: i32) {
        self.notify(topic, partition, Event::HighWatermarkAdvanced);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn config(dir: &std::path::Path) -> BrokerConfig {
        let mut m = BTreeMap::new();
        m.insert("log.dirs".to_string(), dir.display().to_string());
        BrokerConfig::build(&[m]).expect("valid config")
    }

    #[test]
    fn dropping_the_services_frees_the_broker_and_its_listeners() {
        let dir = tempfile::tempdir().unwrap();
        let services = Services::open(config(dir.path()), None).unwrap();
        services
            .broker
            .create_topic("t", 2, 1, BTreeMap::new())
            .unwrap();
        let broker = Arc::downgrade(&services.broker);
        let groups = Arc::downgrade(&services.groups);
        let txns = Arc::downgrade(&services.txns);
        drop(services);
        // Nothing holds the broker in a cycle: its partitions (and their files) are gone.
        assert!(broker.upgrade().is_none());
        assert!(groups.upgrade().is_none());
        assert!(txns.upgrade().is_none());
    }

    #[derive(Default)]
    struct Seen(std::sync::Mutex<Vec<String>>);

    impl CatalogListener for Seen {
        fn topic_config_changed(&self, topic: &Topic) {
            self.0
                .lock()
                .unwrap()
                .push(format!("config {}", topic.name));
        }
        fn topic_deleted(&self, topic: &Topic) {
            self.0
                .lock()
                .unwrap()
                .push(format!("deleted {}", topic.name));
        }
    }

    #[test]
    fn the_catalog_tells_its_listeners_while_their_owner_keeps_them() {
        let dir = tempfile::tempdir().unwrap();
        let services = Services::open(config(dir.path()), None).unwrap();
        let b = &services.broker;
        let seen = Arc::new(Seen::default());
        b.add_listener(Arc::downgrade(&seen) as Weak<dyn CatalogListener>);
        b.create_topic("t", 1, 1, BTreeMap::new()).unwrap();
        let overrides = BTreeMap::from([("retention.ms".to_string(), "1000".to_string())]);
        b.set_topic_configs("t", overrides).unwrap();
        b.delete_topic("t").unwrap();
        assert_eq!(*seen.0.lock().unwrap(), ["config t", "deleted t"]);
        // A listener its owner dropped is no longer called (and not kept alive).
        let weak = Arc::downgrade(&seen);
        drop(seen);
        assert!(weak.upgrade().is_none());
        b.create_topic("u", 1, 1, BTreeMap::new()).unwrap();
        b.delete_topic("u").unwrap();
    }
}
