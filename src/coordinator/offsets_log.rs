//! [`OffsetsLog`] on top of the broker's own `__consumer_offsets` partitions.

use std::collections::BTreeMap;
use std::io;
use std::sync::Weak;

use bytes::Bytes;
use kafka_protocol::records::{Compression, RecordBatchDecoder};

use super::offsets_topic::partition_for;
use super::{LogEntry, OffsetsLog, OFFSETS_TOPIC};
use crate::broker::{now_ms, Broker, Topic, TopicError};
use crate::log::batch::{build_batch, BatchIter};

pub struct BrokerOffsetsLog {
    broker: Weak<Broker>,
    partitions: i32,
    segment_bytes: i64,
}

impl BrokerOffsetsLog {
    pub fn new(broker: Weak<Broker>, partitions: i32, segment_bytes: i64) -> Self {
        BrokerOffsetsLog {
            broker,
            partitions,
            segment_bytes,
        }
    }

    fn topic(&self, create: bool) -> io::Result<Option<std::sync::Arc<Topic>>> {
        let broker = self
            .broker
            .upgrade()
            .ok_or_else(|| io::Error::other("broker is shutting down"))?;
        if let Some(t) = broker.topic(OFFSETS_TOPIC) {
            return Ok(Some(t));
        }
        if !create {
            return Ok(None);
        }
        let mut configs = BTreeMap::new();
        configs.insert("cleanup.policy".to_string(), "compact".to_string());
        configs.insert("compression.type".to_string(), "producer".to_string());
        configs.insert("segment.bytes".to_string(), self.segment_bytes.to_string());
        match broker.create_topic(OFFSETS_TOPIC, self.partitions, 1, configs) {
            Ok(t) => Ok(Some(t)),
            Err(TopicError::AlreadyExists(_)) => Ok(broker.topic(OFFSETS_TOPIC)),
            Err(e) => Err(io::Error::other(e.to_string())),
        }
    }
}

impl BrokerOffsetsLog {
    fn partition_of(&self, group: &str) -> io::Result<std::sync::Arc<crate::broker::Partition>> {
        let topic = self
            .topic(true)?
            .ok_or_else(|| io::Error::other("no offsets topic"))?;
        let index = partition_for(group, topic.partitions.len() as i32) as usize;
        topic
            .partitions
            .get(index)
            .cloned()
            .ok_or_else(|| io::Error::other("offsets partition missing"))
    }
}

/// One transactional RecordBatch v2 of the producer without a sequence (base sequence -1, as
/// Kafka's group coordinator writes TxnOffsetCommit records).
fn transactional_batch(
    producer_id: i64,
    producer_epoch: i16,
    records: Vec<(Bytes, Option<Bytes>)>,
) -> io::Result<bytes::BytesMut> {
    use kafka_protocol::records::{Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};
    let now = now_ms();
    let records: Vec<Record> = records
        .into_iter()
        .enumerate()
        .map(|(i, (key, value))| Record {
            transactional: true,
            control: false,
            partition_leader_epoch: -1,
            producer_id,
            producer_epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // offset - sequence stays 1, so one batch with base sequence -1.
            sequence: i as i32 - 1,
            timestamp: now,
            key: Some(key),
            value,
            headers: Default::default(),
            delete_horizon: false,
        })
        .collect();
    let mut buf = bytes::BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        records.iter(),
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .map_err(|e| io::Error::other(format!("cannot encode offsets batch: {e}")))?;
    Ok(buf)
}

impl OffsetsLog for BrokerOffsetsLog {
    fn append(&self, group: &str, records: Vec<(Bytes, Option<Bytes>)>) -> io::Result<()> {
        let partition = self.partition_of(group)?;
        let now = now_ms();
        let buf = build_batch(
            records.into_iter().map(|(k, v)| (now, Some(k), v)),
            Compression::None,
        )
        .map_err(|e| io::Error::other(format!("cannot encode offsets batch: {e}")))?;
        partition
            .append(&buf)
            .map(drop)
            .map_err(|e| io::Error::other(e.to_string()))
    }

    fn append_transactional(
        &self,
        group: &str,
        producer_id: i64,
        producer_epoch: i16,
        records: Vec<(Bytes, Option<Bytes>)>,
    ) -> io::Result<i32> {
        let partition = self.partition_of(group)?;
        let buf = transactional_batch(producer_id, producer_epoch, records)?;
        partition
            .append(&buf)
            .map(|_| partition.index)
            .map_err(|e| io::Error::other(e.to_string()))
    }

    fn resolve_topic(&self, name: &str) -> Option<(uuid::Uuid, i32)> {
        let t = self.broker.upgrade()?.topic(name)?;
        Some((t.id, t.partitions.len() as i32))
    }

    fn replay(&self) -> io::Result<Vec<LogEntry>> {
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
                    let mut b = Bytes::copy_from_slice(raw);
                    let set = RecordBatchDecoder::decode(&mut b)
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
                    if h.is_control() {
                        // A control record's key: version (int16), type (0 abort, 1 commit).
                        if let Some(k) = set.records.first().and_then(|r| r.key.clone()) {
                            if h.is_transactional() && k.len() >= 4 {
                                out.push(LogEntry::Marker {
                                    partition: p.index,
                                    producer_id: h.producer_id,
                                    commit: i16::from_be_bytes([k[2], k[3]]) == 1,
                                });
                            }
                        }
                        continue;
                    }
                    for r in set.records {
                        if let Some(key) = r.key {
                            out.push(if h.is_transactional() {
                                LogEntry::Transactional {
                                    partition: p.index,
                                    producer_id: h.producer_id,
                                    key,
                                    value: r.value,
                                }
                            } else {
                                LogEntry::Record {
                                    key,
                                    value: r.value,
                                }
                            });
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
}
