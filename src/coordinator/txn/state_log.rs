//! [`TransactionLog`] and [`Participants`] on top of the broker: `__transaction_state`
//! partitions of its own log, producer ids from its block, and markers written straight to the
//! local partition leaders (Kafka sends WriteTxnMarkers; every leader is this broker).

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Weak};

use bytes::Bytes;
use kafka_protocol::records::{Compression, RecordBatchDecoder};

use super::{MarkerError, Participants, TransactionLog, TRANSACTION_STATE_TOPIC};
use crate::broker::{now_ms, Broker, Topic, TopicError};
use crate::coordinator::offsets_topic::partition_for;
use crate::coordinator::OFFSETS_TOPIC;
use crate::log::batch::{build_batch, BatchIter};

pub struct BrokerTransactionLog {
    broker: Weak<Broker>,
    partitions: i32,
    segment_bytes: i64,
}

impl BrokerTransactionLog {
    pub fn new(broker: Weak<Broker>, partitions: i32, segment_bytes: i64) -> Self {
        BrokerTransactionLog {
            broker,
            partitions,
            segment_bytes,
        }
    }

    fn broker(&self) -> io::Result<Arc<Broker>> {
        self.broker
            .upgrade()
            .ok_or_else(|| io::Error::other("broker is shutting down"))
    }

    /// The topic, created (compacted, uncompressed, as Kafka enforces) on first use.
    fn topic(&self, create: bool) -> io::Result<Option<Arc<Topic>>> {
        let broker = self.broker()?;
        if let Some(t) = broker.topic(TRANSACTION_STATE_TOPIC) {
            return Ok(Some(t));
        }
        if !create {
            return Ok(None);
        }
        let mut configs = BTreeMap::new();
        configs.insert("cleanup.policy".to_string(), "compact".to_string());
        configs.insert("compression.type".to_string(), "uncompressed".to_string());
        configs.insert("segment.bytes".to_string(), self.segment_bytes.to_string());
        match broker.create_topic(TRANSACTION_STATE_TOPIC, self.partitions, 1, configs) {
            Ok(t) => Ok(Some(t)),
            Err(TopicError::AlreadyExists(_)) => Ok(broker.topic(TRANSACTION_STATE_TOPIC)),
            Err(e) => Err(io::Error::other(e.to_string())),
        }
    }

    /// Creates the topic if it does not exist yet (at coordinator start, as Kafka does).
    pub fn ensure_topic(&self) -> io::Result<()> {
        self.topic(true).map(drop)
    }
}

impl TransactionLog for BrokerTransactionLog {
    fn append(&self, transactional_id: &str, key: Bytes, value: Option<Bytes>) -> io::Result<()> {
        let topic = self
            .topic(true)?
            .ok_or_else(|| io::Error::other("no transaction state topic"))?;
        let index = partition_for(transactional_id, topic.partitions.len() as i32) as usize;
        let partition = topic
            .partitions
            .get(index)
            .ok_or_else(|| io::Error::other("transaction state partition missing"))?;
        let buf = build_batch(
            std::iter::once((now_ms(), Some(key), value)),
            Compression::None,
        )
        .map_err(|e| io::Error::other(format!("cannot encode transaction state: {e}")))?;
        partition
            .append(&buf)
            .map(drop)
            .map_err(|e| io::Error::other(e.to_string()))
    }

    fn replay(&self) -> io::Result<Vec<(Bytes, Option<Bytes>)>> {
        let Some(topic) = self.topic(false)? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for p in &topic.partitions {
            let mut offset = p.offsets().log_start_offset;
            loop {
                let hw = p.offsets().high_watermark;
                let slice = match p.read(offset, 1 << 20, hw, true) {
                    Ok(Some(s)) => s,
                    Ok(None) => break,
                    Err(e) => return Err(io::Error::other(e.to_string())),
                };
                let bytes = slice.read()?;
                let mut next = offset;
                for item in BatchIter::new(&bytes) {
                    let (_, h, raw) =
                        item.map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                    next = h.last_offset() + 1;
                    if h.is_control() {
                        continue;
                    }
                    let mut b = Bytes::copy_from_slice(raw);
                    let set = RecordBatchDecoder::decode(&mut b)
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
                    for r in set.records {
                        if r.offset < offset {
                            continue;
                        }
                        if let Some(k) = r.key {
                            out.push((k, r.value));
                        }
                    }
                }
                if next <= offset {
                    break;
                }
                offset = next;
            }
        }
        Ok(out)
    }

    fn coordinator_epoch(&self, transactional_id: &str) -> i32 {
        let Ok(Some(topic)) = self.topic(false) else {
            return 0;
        };
        let index = partition_for(transactional_id, topic.partitions.len() as i32) as usize;
        topic
            .partitions
            .get(index)
            .map(|p| p.leader_epoch().max(0))
            .unwrap_or(0)
    }
}

/// Producer ids and transaction markers, from the broker.
pub struct BrokerParticipants {
    broker: Weak<Broker>,
}

impl BrokerParticipants {
    pub fn new(broker: Weak<Broker>) -> Self {
        BrokerParticipants { broker }
    }
}

impl Participants for BrokerParticipants {
    fn allocate_producer_id(&self) -> io::Result<i64> {
        self.broker
            .upgrade()
            .ok_or_else(|| io::Error::other("broker is shutting down"))?
            .allocate_producer_id()
    }

    fn write_marker(
        &self,
        topic: &str,
        partition: i32,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
        commit: bool,
    ) -> Result<(), MarkerError> {
        let broker = self
            .broker
            .upgrade()
            .ok_or_else(|| MarkerError::Failed("broker is shutting down".into()))?;
        write_txn_marker(
            &broker,
            topic,
            partition,
            producer_id,
            producer_epoch,
            coordinator_epoch,
            commit,
        )
    }
}

/// Writes one marker to a local partition and, for a `__consumer_offsets` partition, lets the
/// group coordinator materialize or drop the producer's pending offsets (Kafka's
/// `onTransactionCompleted`). Shared by the coordinator and the WriteTxnMarkers API. Blocking.
pub fn write_txn_marker(
    broker: &Broker,
    topic: &str,
    partition: i32,
    producer_id: i64,
    producer_epoch: i16,
    coordinator_epoch: i32,
    commit: bool,
) -> Result<(), MarkerError> {
    let p = broker
        .partition(topic, partition)
        .ok_or(MarkerError::UnknownPartition)?;
    p.write_txn_marker(producer_id, producer_epoch, coordinator_epoch, commit)
        .map_err(|e| MarkerError::Failed(e.to_string()))?;
    if topic == OFFSETS_TOPIC {
        if let Some(g) = broker.group_coordinator() {
            g.complete_txn_offsets(producer_id, partition, commit);
        }
    }
    Ok(())
}
