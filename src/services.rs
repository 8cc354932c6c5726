//! The services of one broker process, built once at start-up by [`crate::runtime`].
//!
//! [`Services`] holds the catalog and partitions ([`Broker`]) and the services that work on
//! them: the group and transaction coordinators and tiered storage. Nothing below points back
//! up here: a service is handed what it needs when it is built, and the catalog tells the
//! services that follow it through [`crate::broker::CatalogListener`]; in cluster mode it
//! proposes its changes through [`crate::broker::MetadataQuorum`]. Request handlers
//! ([`crate::api`]) each take only the parts they use.

use std::sync::{Arc, Weak};

use anyhow::Context;

use strata_tiering::Event;

use crate::broker::leadership::PartitionLeadership;
use crate::broker::{Broker, CatalogListener, Topic};
use crate::config::BrokerConfig;
use crate::controller::ClusterControl;
use crate::coordinator::txn::TransactionCoordinator;
use crate::coordinator::GroupCoordinator;
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
        // Held weakly by the broker, kept alive here.
        broker.add_listener(Arc::downgrade(&groups) as Weak<dyn CatalogListener>);
        broker.add_listener(Arc::downgrade(&txns) as Weak<dyn CatalogListener>);
        if let Some(t) = &tiering {
            broker.add_listener(Arc::downgrade(t) as Weak<dyn CatalogListener>);
        }
        Ok(Services {
            broker,
            groups,
            txns,
            tiering,
            cluster: None,
        })
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
