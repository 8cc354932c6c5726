//! Share-partition snapshots in `__share_group_state`, one keyed record per write, appended
//! like a coordinator write (acks=all) and read back at start-up.
//!
//! A share-partition's record goes to partition `hash("group:topic_id:partition") % n` (Kafka's
//! share coordinator key, Java's `String.hashCode`), so every snapshot of one share-partition
//! is in one log in write order: the last one read wins.

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
        let name = format!("{}:{}:{}", key.group, key.topic_id, key.partition);
        let index = partition_for(&name, topic.partitions.len() as i32) as usize;
        topic
            .partitions
            .get(index)
            .cloned()
            .ok_or_else(|| unavailable("share state partition missing".into()))
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
            let limit = p.max_decompressed_batch_bytes();
            scan_batches(p, |h, mut batch| {
                if h.is_control() {
                    return Ok(());
                }
                let set = decode_bounded(&mut batch, limit)?;
                for r in set.records {
                    apply(&mut out, r.key, r.value);
                }
                Ok(())
            })?;
        }
        Ok(out)
    }
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
