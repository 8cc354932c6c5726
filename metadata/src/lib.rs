//! `strata-metadata`: Strata's metadata quorum, the equivalent of Kafka's KRaft controller
//! quorum, built on `openraft` 0.9 (`storage-v2`).
//!
//! A replicated log of [`Command`]s (broker registrations, fencing, topics and
//! their ids, partition assignments with leader, leader epoch, ISR and partition epoch,
//! configs, producer-id blocks, opaque ACL/SCRAM/quota records) is applied in order by every
//! node to an identical [`MetadataState`]. The Raft leader is the active controller.
//!
//! The crate does not depend on the broker; the broker uses it in cluster mode (its
//! `controller` module), when `controller.quorum.voters` is set.
//!
//! # How the broker uses it
//! - **Start-up.** Each broker starts one [`MetadataNode`] from its config: `node.id` becomes
//!   [`MetadataConfig::node_id`], `controller.quorum.voters` (`id@host:port` of each voter's
//!   metadata RPC listener, parsed by [`MetadataConfig::parse_voters`]) becomes `voters`, and
//!   the metadata log directory becomes `dir`. With no voters configured the node is a
//!   single-node quorum that bootstraps itself (zero-config). A broker listed in the voters
//!   is a voter; any other broker joins as a learner: it follows the log but never votes,
//!   until [`MetadataNode::add_voter`] promotes it ([`MetadataNode::remove_voter`] demotes a
//!   voter). The voters in force are the membership in the log; the config's voters only
//!   bootstrap the quorum and tell a learner where to ask to join.
//! - **Every broker** proposes its own `RegisterBroker` at start (getting its broker epoch),
//!   through [`MetadataNode::propose`], which forwards to the leader when needed, then
//!   heartbeats with [`MetadataNode::heartbeat`], which the leader keeps in memory
//!   ([`sessions`]): an idle cluster writes nothing to the log. It follows
//!   [`MetadataNode::subscribe`] to keep its metadata
//!   cache current and to become leader or follower of partitions when their leader or
//!   leader epoch changes; a partition leader proposes `AlterPartition` to shrink or expand
//!   its ISR.
//! - **The controller** (the node where [`MetadataNode::is_leader`] holds) serves the admin
//!   requests that change metadata (CreateTopics with [`placement::place_replicas`],
//!   DeleteTopics, CreatePartitions, IncrementalAlterConfigs, AllocateProducerIds, ACL and
//!   SCRAM changes) by proposing commands, unfences brokers that caught up, and watches
//!   sessions: [`MetadataState::brokers_with_expired_session`], with the heartbeat times of
//!   [`MetadataNode::last_contact_ms`], gives the brokers to fence with
//!   `FenceBroker`, followed by [`placement::reelect_for_fenced_broker`]'s `AlterPartition`s;
//!   after an `UnfenceBroker`, [`placement::elect_offline_partitions`] brings offline
//!   partitions back. ElectLeaders requests become `ElectLeader` commands, decided at apply
//!   time ([`MetadataState::leader_election`]); the automatic leader rebalance proposes
//!   those of [`placement::preferred_leader_elections`].
//! - **Errors** map to Kafka error codes in one place each: [`ApplyError::kafka_error_code`],
//!   [`ProposeError::kafka_error_code`], [`placement::PlacementError::kafka_error_code`].
//!
//! # Invariants
//! - Apply is deterministic: no clock, randomness or I/O; timestamps travel in commands; a
//!   rejected command is committed but changes nothing, with the same error everywhere.
//! - An appended entry is fsynced before openraft is told it is durable; the vote is
//!   persisted before it is used; snapshots and meta files are replaced atomically.
//! - A proposal is retried only when it provably did not reach a leader, so a command is
//!   never committed twice by this crate's retries.
//!
//! # Modules
//! - [`ids`]: newtypes for broker ids, epochs, producer ids and topic ids.
//! - [`command`]: the log's commands, responses and rejections.
//! - [`state`]: the state machine proper, [`MetadataState::apply`].
//! - [`placement`]: replica placement and leader election for the controller.
//! - [`sessions`]: broker heartbeats, kept in the active controller's memory.
//! - [`reassignment`]: partition reassignment (adding/removing replicas, completion).
//! - [`store`]: the on-disk Raft log and the state machine store with snapshots.
//! - [`network`]: the TCP transport (Raft RPCs and forwarding to the leader).
//! - [`voters`]: changing the voters at run time (Kafka's AddRaftVoter, RemoveRaftVoter).
//! - [`node`]: [`MetadataNode`], which ties them together.
//!
//! # Not done yet
//! - TLS and authentication on the metadata RPC listener: bind it to a private network.
//! - Eligible leader replicas (KIP-966), controlled shutdown and broker unregistration are
//!   not modelled yet.
//! - Frames are JSON; snapshot chunks are sent as JSON arrays of numbers (about 4x their
//!   size), acceptable for metadata-sized snapshots.

#[cfg(test)]
mod cluster_tests;
pub mod command;
pub mod ids;
pub mod network;
pub mod node;
pub mod placement;
pub mod reassignment;
pub mod sessions;
pub mod state;
pub mod store;
pub mod voters;

use std::io::Cursor;

pub use command::{ApplyError, Command, CommandResult, Response};
pub use node::{MetadataConfig, MetadataNode, NodeError, ProposeError, Role, VoterChangeError};
pub use state::MetadataState;
pub use store::MetadataImage;

openraft::declare_raft_types!(
    /// The openraft type configuration of the metadata quorum: node ids are `u64` (a broker's
    /// `node.id`), nodes are addressed by their metadata RPC address and carry their directory id.
    pub TypeConfig:
        D = Command,
        R = CommandResult,
        Node = voters::QuorumNode,
);
