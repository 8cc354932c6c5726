//! [`OffsetsLog`] on top of the broker's own `__consumer_offsets` partitions.
//!
//! Appends go through the partition as leader and are acknowledged like an acks=all produce
//! (Kafka's coordinators append with `requiredAcks = -1`): once the high watermark covers
//! them with at least min.insync.replicas in the ISR, or they fail with a [`LogWriteError`].

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::records::{Compression, RecordBatchDecoder};

use super::offsets_topic::partition_for;
use super::ownership::Ownership;
use super::{GroupConfig, GroupCoordinator, LogEntry, LogWriteError, OffsetsLog, OFFSETS_TOPIC};
use crate::broker::CatalogListener;
use crate::broker::{Broker, Offset, Partition, Topic, TopicError};
use crate::clock::now_ms;
use crate::log::batch::{build_batch, BatchHeader, BatchIter};
use crate::log::AppendError;
use crate::replication::PartitionLeadership;

impl GroupCoordinator {
    /// The broker's group coordinator over `__consumer_offsets`, replayed. Blocking.
    pub fn open(broker: &Arc<Broker>) -> io::Result<Arc<GroupCoordinator>> {
        use std::time::Duration;
        let c = &broker.config;
        let log = BrokerOffsetsLog::new(broker.clone(), c.offsets_topic_num_partitions);
        let coordinator = GroupCoordinator::with_ownership(
            GroupConfig {
                initial_rebalance_delay: Duration::from_millis(c.group_initial_rebalance_delay_ms),
                min_session_timeout: Duration::from_millis(c.group_min_session_timeout_ms),
                max_session_timeout: Duration::from_millis(c.group_max_session_timeout_ms),
                offsets_retention: Duration::from_millis(c.offsets_retention_ms as u64),
                offset_metadata_max_bytes: c.offset_metadata_max_bytes,
                consumer_session_timeout: Duration::from_millis(
                    c.group_consumer_session_timeout_ms,
                ),
                consumer_heartbeat_interval: Duration::from_millis(
                    c.group_consumer_heartbeat_interval_ms,
                ),
                migration: c.group_consumer_migration_policy,
            },
            Arc::new(log),
            Arc::new(Ownership::new(c.cluster.is_some())),
        )
        .with_group_timeouts(broker.clone());
        let records = coordinator.load()?;
        tracing::info!(records, "group coordinator loaded __consumer_offsets");
        Ok(Arc::new(coordinator))
    }
}

/// A group's KIP-848 timeouts come from its GROUP configs, within the broker's bounds.
impl super::ConsumerGroupTimeouts for Broker {
    fn consumer_timeouts(&self, group_id: &str) -> (Duration, Duration) {
        let broker = crate::config::group::BrokerGroupSettings::new(&self.config.explicit);
        let (session, heartbeat) =
            crate::config::group::consumer_timeouts(&self.group_configs(group_id), &broker);
        (
            Duration::from_millis(session.max(1) as u64),
            Duration::from_millis(heartbeat.max(1) as u64),
        )
    }
}

/// The coordinator follows the leadership of the `__consumer_offsets` partitions, and forgets
/// the offsets of deleted topics.
impl CatalogListener for GroupCoordinator {
    fn topic_deleted(&self, topic: &Topic) {
        GroupCoordinator::topic_deleted(self, &topic.name);
    }

    fn leadership_applied(&self, state: &PartitionLeadership, leader: bool) {
        if state.topic != OFFSETS_TOPIC {
            return;
        }
        if leader {
            self.on_election(state.partition, state.leader_epoch.0);
        } else {
            self.on_resignation(state.partition);
        }
    }
}

pub struct BrokerOffsetsLog {
    broker: Arc<Broker>,
    partitions: i32,
}

impl BrokerOffsetsLog {
    pub fn new(broker: Arc<Broker>, partitions: i32) -> Self {
        BrokerOffsetsLog { broker, partitions }
    }

    fn topic(&self, create: bool) -> io::Result<Option<std::sync::Arc<Topic>>> {
        let broker = &self.broker;
        if let Some(t) = broker.topic(OFFSETS_TOPIC) {
            return Ok(Some(t));
        }
        // In cluster mode the quorum creates it (on the first FindCoordinator), never a broker.
        if !create || broker.config.cluster.is_some() {
            return Ok(None);
        }
        let spec = super::internal_topics::spec(&broker.config, OFFSETS_TOPIC, false)
            .ok_or_else(|| io::Error::other("no spec for the offsets topic"))?;
        match broker.create_topic(OFFSETS_TOPIC, spec.partitions, 1, spec.configs) {
            Ok(t) => Ok(Some(t)),
            Err(TopicError::AlreadyExists(_)) => Ok(broker.topic(OFFSETS_TOPIC)),
            Err(e) => Err(io::Error::other(e.to_string())),
        }
    }
}

impl BrokerOffsetsLog {
    fn partition_of(&self, group: &str) -> Result<Arc<Partition>, LogWriteError> {
        let unavailable = |e: String| LogWriteError::Unavailable(e);
        let topic = self
            .topic(true)
            .map_err(|e| unavailable(e.to_string()))?
            .ok_or_else(|| unavailable("no offsets topic".into()))?;
        let index = partition_for(group, topic.partitions.len() as i32) as usize;
        topic
            .partitions
            .get(index)
            .cloned()
            .ok_or_else(|| unavailable("offsets partition missing".into()))
    }
}

/// Kafka's default `offsets.commit.timeout.ms`: how long an offset commit or group write
/// waits for the in-sync replicas.
pub const COMMIT_TIMEOUT: Duration = Duration::from_millis(5_000);

/// Appends `records` to `partition` as leader and waits, as an acks=all produce does, until
/// the high watermark covers them with min.insync.replicas in the ISR. Blocking: call from a
/// blocking thread.
pub(crate) fn append_replicated(
    partition: &Partition,
    records: &[u8],
    timeout: Duration,
) -> Result<(), LogWriteError> {
    let min_isr = partition.min_insync_replicas();
    if !partition.is_leader() {
        return Err(LogWriteError::NotLeader);
    }
    if !partition.has_enough_in_sync_replicas(min_isr) {
        return Err(LogWriteError::NotEnoughReplicas);
    }
    let info = partition
        .append_from(crate::log::AppendOrigin::Coordinator, records)
        .map_err(|e| match e {
            AppendError::NotLeaderOrFollower => LogWriteError::NotLeader,
            AppendError::MessageTooLarge { .. } => LogWriteError::TooLarge(e.to_string()),
            other => LogWriteError::Storage(other.to_string()),
        })?;
    await_replicated(partition, Offset(info.last_offset).next(), timeout)
}

/// Kafka's DelayedProduce for one append of this broker (a coordinator write, a transaction
/// marker): waits until the high watermark reaches `required_offset` with min.insync.replicas
/// in the ISR, woken by high watermark moves. Blocking.
pub(crate) fn await_replicated(
    partition: &Partition,
    required_offset: Offset,
    timeout: Duration,
) -> Result<(), LogWriteError> {
    use kafka_protocol::ResponseError;
    let min_isr = partition.min_insync_replicas();
    let deadline = Instant::now() + timeout;
    loop {
        let notify = Arc::new(tokio::sync::Notify::new());
        partition.add_waiter(&notify);
        match partition.check_enough_replicas_reach_offset(required_offset, min_isr) {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(ResponseError::NotLeaderOrFollower) => return Err(LogWriteError::NotLeader),
            Err(_) => return Err(LogWriteError::NotEnoughReplicas),
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(LogWriteError::Timeout);
        }
        if tokio::runtime::Handle::try_current().is_ok() {
            // A blocking thread of the runtime: its timer and the fetch handlers that move the
            // high watermark run on the workers.
            futures::executor::block_on(async {
                let _ = tokio::time::timeout(left, notify.notified()).await;
            });
        } else {
            std::thread::sleep(left.min(Duration::from_millis(10)));
        }
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
    fn append(
        &self,
        group: &str,
        records: Vec<(Bytes, Option<Bytes>)>,
    ) -> Result<(), LogWriteError> {
        let partition = self.partition_of(group)?;
        let now = now_ms();
        let buf = build_batch(
            records.into_iter().map(|(k, v)| (now, Some(k), v)),
            Compression::None,
        )
        .map_err(|e| LogWriteError::Storage(format!("cannot encode offsets batch: {e}")))?;
        append_replicated(&partition, &buf, COMMIT_TIMEOUT)
    }

    fn append_transactional(
        &self,
        group: &str,
        producer_id: i64,
        producer_epoch: i16,
        records: Vec<(Bytes, Option<Bytes>)>,
    ) -> Result<i32, LogWriteError> {
        let partition = self.partition_of(group)?;
        let buf = transactional_batch(producer_id, producer_epoch, records)
            .map_err(|e| LogWriteError::Storage(e.to_string()))?;
        append_replicated(&partition, &buf, COMMIT_TIMEOUT)?;
        Ok(partition.index)
    }

    fn partition_for(&self, group: &str) -> i32 {
        let count = self
            .broker
            .topic(OFFSETS_TOPIC)
            .map(|t| t.partitions.len() as i32)
            .unwrap_or(self.partitions);
        partition_for(group, count)
    }

    fn replay_partition(&self, partition: i32) -> io::Result<Vec<LogEntry>> {
        let Some(topic) = self.topic(false)? else {
            return Ok(Vec::new());
        };
        match topic.partitions.get(partition as usize) {
            Some(p) => replay_partitions(std::slice::from_ref(p)),
            None => Ok(Vec::new()),
        }
    }

    fn resolve_topic(&self, name: &str) -> Option<(uuid::Uuid, i32)> {
        let t = self.broker.topic(name)?;
        Some((t.id, t.partitions.len() as i32))
    }

    fn topic_name(&self, id: &uuid::Uuid) -> Option<String> {
        self.broker.topic_by_id(id).map(|t| t.name.clone())
    }

    fn replay(&self) -> io::Result<Vec<LogEntry>> {
        let Some(topic) = self.topic(false)? else {
            return Ok(Vec::new());
        };
        replay_partitions(&topic.partitions)
    }
}

/// Decodes one stored batch of an internal topic with kafka-protocol, after checking with the
/// record codec that its records are well formed and decompress to at most `limit` bytes
/// (the topic's `strata.max.decompressed.batch.bytes`): kafka-protocol's decompressors have
/// no bound, so they only see a batch that is known to fit.
pub(crate) fn decode_bounded(
    batch: &mut Bytes,
    limit: u64,
) -> io::Result<kafka_protocol::records::RecordSet> {
    let invalid = |e: String| io::Error::new(io::ErrorKind::InvalidData, e);
    let mut scratch = Vec::new();
    strata_records::walk(batch, limit, &mut scratch, |_, _| {})
        .map_err(|e| invalid(e.to_string()))?;
    drop(scratch);
    RecordBatchDecoder::decode(batch).map_err(|e| invalid(e.to_string()))
}

/// The records and markers of `partitions` up to their log ends, in log order.
fn replay_partitions(partitions: &[Arc<Partition>]) -> io::Result<Vec<LogEntry>> {
    let mut out = Vec::new();
    for p in partitions {
        let limit = p.max_decompressed_batch_bytes();
        scan_batches(p, |h, mut batch| {
            let set = decode_bounded(&mut batch, limit)?;
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
                return Ok(());
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
            Ok(())
        })?;
    }
    Ok(out)
}

/// Calls `f` with each batch of `p` from its log start up to its log end (not the high
/// watermark: a new leader's high watermark can lag what its predecessor already acknowledged,
/// and Kafka's coordinator loaders read to the log end). The batch bytes share the read
/// buffer. Used by the group and transaction coordinators' loaders.
pub(crate) fn scan_batches(
    p: &Partition,
    mut f: impl FnMut(&BatchHeader, Bytes) -> io::Result<()>,
) -> io::Result<()> {
    let mut offset = p.offsets().log_start_offset.0;
    loop {
        let end = p.offsets().log_end_offset;
        let slice = match p.read(Offset(offset), 1 << 20, end, true) {
            Ok(Some(s)) => s,
            Ok(None) => return Ok(()),
            Err(e) => return Err(io::Error::other(e.to_string())),
        };
        let bytes = slice.read()?;
        let mut next = offset;
        for item in BatchIter::new(&bytes) {
            let (_, h, raw) = item.map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            next = h.last_offset() + 1;
            f(&h, bytes.slice_ref(raw))?;
        }
        if next <= offset {
            return Ok(());
        }
        offset = next;
    }
}
