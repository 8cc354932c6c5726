//! How services above the catalog follow it without the catalog naming them.
//!
//! The group and transaction coordinators load and unload the partitions of their topics as
//! this broker starts or stops leading them; tiered storage uploads a sealed segment as soon
//! as it is committed, follows leadership and config changes, and removes the remote data of
//! a deleted topic. Each registers a [`CatalogListener`] with [`super::Broker::add_listener`]
//! at start-up, before the control plane applies any state. The broker holds its listeners
//! weakly: their owner ([`crate::services::Services`]) keeps them alive, so a coordinator
//! may hold the broker without a reference cycle. Listeners are called on the
//! thread that changed the catalog or the partition, after the change is in place, sometimes
//! with the partition's log lock held: a listener only records the event and returns (it
//! takes no lock of the broker's and does no I/O).

use std::sync::{RwLock, Weak};

use super::leadership::PartitionLeadership;
use super::Topic;

pub trait CatalogListener: Send + Sync {
    /// A partition's leadership was applied; `leader` says whether this broker now leads it
    /// (Kafka's `onElection` / `onResignation` for coordinator partitions).
    fn leadership_applied(&self, _state: &PartitionLeadership, _leader: bool) {}

    /// A topic's config overrides changed.
    fn topic_config_changed(&self, _topic: &Topic) {}

    /// A topic left this broker's catalog (deleted).
    fn topic_deleted(&self, _topic: &Topic) {}

    /// A sealed segment of a remote-storage partition is now entirely below its last stable
    /// offset (and so its high watermark): it can be uploaded.
    fn segment_committed(&self, _topic: &str, _partition: i32) {}
}

/// The registered listeners, shared by the broker and its partitions.
#[derive(Default)]
pub(crate) struct Listeners(RwLock<Vec<Weak<dyn CatalogListener>>>);

impl Listeners {
    pub(crate) fn add(&self, listener: Weak<dyn CatalogListener>) {
        self.0
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(listener);
    }

    /// Calls `f` on every listener still alive.
    pub(crate) fn each(&self, f: impl Fn(&dyn CatalogListener)) {
        for l in self.0.read().unwrap_or_else(|e| e.into_inner()).iter() {
            if let Some(l) = l.upgrade() {
                f(l.as_ref());
            }
        }
    }
}
