//! Share-partition snapshots in `__share_group_state`, one keyed record per write, appended
//! like a coordinator write (acks=all) and read back at start-up.
//!
//! A share-partition's record goes to partition `hash("group:topic_id:partition") % n` (Kafka's
//! share coordinator key with the topic id in base64, Java's `String.hashCode`), so every
//! snapshot of one share-partition is in one log in write order: the last one read wins.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;

use bytes::Bytes;

use super::partition::Snapshot;
use super::state_record::{self, StateKey};
use crate::broker::{Broker, Partition, Topic, TopicError};
use crate::clock::now_ms;
use crate::coordinator::internal_topics::{self, SHARE_STATE_TOPIC};
use crate::coordinator::offsets_log::{
    append_replicated, decode_bounded, scan_batches, COMMIT_TIMEOUT,
};
use crate::coordinator::offsets_topic::partition_for;
use crate::coordinator::LogWriteError;
use crate::log::batch::build_batch;

pub struct ShareStateLog {
    broker: Arc<Broker>,
}

impl ShareStateLog {
    pub fn new(broker: Arc<Broker>) -> ShareStateLog {
        ShareStateLog { broker }
    }

    /// The topic, created on first use on a single node.
    fn topic(&self, create: bool) -> io::Result<Option<Arc<Topic>>> {
        let broker = &self.broker;
        if let Some(t) = broker.topic(SHARE_STATE_TOPIC) {
            return Ok(Some(t));
        }
        if !create || broker.config.cluster.is_some() {
            return Ok(None);
        }
        let spec = internal_topics::spec(&broker.config, SHARE_STATE_TOPIC, false)
            .ok_or_else(|| io::Error::other("no spec for the share state topic"))?;
        match broker.create_topic(SHARE_STATE_TOPIC, spec.partitions, 1, spec.configs) {
            Ok(t) => Ok(Some(t)),
            Err(TopicError::AlreadyExists(_)) => Ok(broker.topic(SHARE_STATE_TOPIC)),
            Err(e) => Err(io::Error::other(e.to_string())),
        }
    }

    fn partition_of(&self, key: &StateKey) -> Result<Arc<Partition>, LogWriteError> {
        let unavailable = |e: String| LogWriteError::Unavailable(e);
        let topic = self
            .topic(true)
            .map_err(|e| unavailable(e.to_string()))?
            .ok_or_else(|| unavailable("no share state topic".into()))?;
        let index = partition_index(key, topic.partitions.len() as i32) as usize;
        topic
            .partitions
            .get(index)
            .cloned()
            .ok_or_else(|| unavailable("share state partition missing".into()))
    }

    /// The `__share_group_state` partition of `key`, once the topic exists (on a single node
    /// it is created here, in cluster mode by the quorum).
    pub fn index_of(&self, key: &StateKey) -> Option<i32> {
        let topic = self.topic(self.broker.config.cluster.is_none()).ok()??;
        Some(partition_index(key, topic.partitions.len() as i32))
    }

    /// Writes a share-partition's snapshot (`None`: its state is deleted) and waits until it
    /// is replicated. Blocking.
    pub fn write(&self, key: &StateKey, snapshot: Option<&Snapshot>) -> Result<(), LogWriteError> {
        let partition = self.partition_of(key)?;
        let record = (
            now_ms(),
            Some(state_record::encode_key(key)),
            snapshot.map(state_record::encode_value),
        );
        let buf = build_batch(
            std::iter::once(record),
            kafka_protocol::records::Compression::None,
        )
        .map_err(|e| LogWriteError::Storage(format!("cannot encode share state: {e}")))?;
        append_replicated(&partition, &buf, COMMIT_TIMEOUT)
    }

    /// The latest snapshot of every share-partition. Blocking. A record that does not decode
    /// is skipped with a warning: its share-partition then starts from an older snapshot (or
    /// none), which redelivers records rather than losing them.
    pub fn load(&self) -> io::Result<HashMap<StateKey, Snapshot>> {
        let mut out = HashMap::new();
        let Some(topic) = self.topic(false)? else {
            return Ok(out);
        };
        for p in &topic.partitions {
            load_into(p, &mut out)?;
        }
        Ok(out)
    }

    /// The latest snapshot of every share-partition kept in partition `index`. Blocking.
    pub fn load_partition(&self, index: i32) -> io::Result<HashMap<StateKey, Snapshot>> {
        let mut out = HashMap::new();
        let Some(topic) = self.topic(false)? else {
            return Ok(out);
        };
        if let Some(p) = usize::try_from(index)
            .ok()
            .and_then(|i| topic.partitions.get(i))
        {
            load_into(p, &mut out)?;
        }
        out.retain(|k, _| partition_index(k, topic.partitions.len() as i32) == index);
        Ok(out)
    }
}

/// Kafka's share coordinator key (`SharePartitionKey.asCoordinatorKey`): the topic id in
/// Kafka's base64 form.
pub fn coordinator_key(key: &StateKey) -> String {
    let topic_id = crate::broker::kafka_uuid_string(key.topic_id);
    format!("{}:{topic_id}:{}", key.group, key.partition)
}

/// The partition of `key`: `hash(coordinator key) % partitions`, as Kafka places it.
pub fn partition_index(key: &StateKey, partitions: i32) -> i32 {
    partition_for(&coordinator_key(key), partitions)
}

fn load_into(p: &Partition, out: &mut HashMap<StateKey, Snapshot>) -> io::Result<()> {
    let limit = p.max_decompressed_batch_bytes();
    scan_batches(p, |h, mut batch| {
        if h.is_control() {
            return Ok(());
        }
        let set = decode_bounded(&mut batch, limit)?;
        for r in set.records {
            apply(out, r.key, r.value);
        }
        Ok(())
    })
}

fn apply(out: &mut HashMap<StateKey, Snapshot>, key: Option<Bytes>, value: Option<Bytes>) {
    let Some(key) = key else { return };
    let key = match state_record::decode_key(&key) {
        Ok(Some(k)) => k,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(error = %e, "skipping an unreadable share state key");
            return;
        }
    };
    match value {
        None => {
            out.remove(&key);
        }
        Some(v) => match state_record::decode_value(&v) {
            Ok(s) => {
                out.insert(key, s);
            }
            Err(e) => {
                tracing::warn!(group = %key.group, topic_id = %key.topic_id, partition = key.partition, error = %e, "skipping an unreadable share state snapshot");
            }
        },
    }
}
