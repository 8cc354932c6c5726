//! Coordinators: the group coordinator ([`group_coordinator`], the classic and the consumer
//! group protocols, over `__consumer_offsets`) and the transaction coordinator ([`txn`], over
//! `__transaction_state`). Each serves the partitions of its topic that this broker leads
//! ([`ownership`]) and reaches its log through a trait ([`OffsetsLog`],
//! [`txn::TransactionLog`]) the broker implements in [`offsets_log`] and
//! [`txn::state_log`].

pub mod consumer_group;
pub mod flexible;
pub mod group;
pub mod group_coordinator;
pub mod internal_topics;
pub mod offsets_log;
pub mod offsets_topic;
pub mod ownership;
pub mod share_group;
#[cfg(test)]
pub(crate) mod test_support;
pub mod txn;

pub use group_coordinator::{
    Committed, ConsumerGroupTimeouts, GroupConfig, GroupCoordinator, GroupDescription, LogEntry,
    LogWriteError, OffsetsLog, OFFSETS_TOPIC,
};
