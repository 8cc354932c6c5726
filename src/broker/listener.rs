//! How services above the catalog follow it without the catalog naming them.
//!
//! The group and transaction coordinators load and unload the partitions of their topics as
//! this broker starts or stops leading them; tiered storage removes the remote data of a
//! deleted topic. Each registers a [`CatalogListener`] with [`super::Broker::add_listener`]
//! at start-up, before the control plane applies any state. Listeners are called on the
//! thread that changed the catalog (a blocking one), after the change is in place.

use super::leadership::PartitionLeadership;
use super::Topic;

pub trait CatalogListener: Send + Sync {
    /// A partition's leadership was applied; `leader` says whether this broker now leads it
    /// (Kafka's `onElection` / `onResignation` for coordinator partitions).
    fn leadership_applied(&self, _state: &PartitionLeadership, _leader: bool) {}

    /// A topic left this broker's catalog (deleted).
    fn topic_deleted(&self, _topic: &Topic) {}
}
