//! Share groups' dead-letter topics (KIP-1191), as Kafka 4.4's `ShareGroupDLQStateManager`
//! writes them.
//!
//! A record a member rejects, or one released or timed out at `share.delivery.count.limit`,
//! is archived; when its group names a dead-letter topic (the group config
//! `errors.deadletterqueue.topic.name`), a record describing it is produced there once its
//! archived state is persisted:
//! - headers `__dlq.errors.topic`, `__dlq.errors.partition`, `__dlq.errors.offset`,
//!   `__dlq.errors.group`, `__dlq.errors.delivery.count` (decimal text) and
//!   `__dlq.errors.message` ("Offset rejected by client." or "Offset delivery count exceeded
//!   the threshold.");
//! - the source record's key and value when the group sets
//!   `errors.deadletterqueue.copy.record.enable` (from the local log, else from remote
//!   storage as Kafka's `ShareGroupDLQRecordFetcher` reads it; a record found in neither gets
//!   the headers only, as Kafka's does when it cannot read it);
//! - the time of the copy as its timestamp, in one uncompressed batch per partition and
//!   round, to partition `source partition % dead-letter partitions`.
//!
//! The topic must not start with `__`, must start with the broker's
//! `errors.deadletterqueue.topic.name.prefix` (default `dlq.`) when that is set, and must
//! have `errors.deadletterqueue.group.enable=true`; a missing one is created (with that
//! config, default partitions and replication) only when
//! `errors.deadletterqueue.auto.create.topics.enable` is true. A group whose topic breaks a
//! rule gets a warning in the log and no copy, as in Kafka.
//!
//! Delivery: a background task takes the copies from a bounded queue and produces them with
//! acks=all to the partition's leader over the inter-broker listener (this broker included),
//! retrying transient errors. As in Kafka, the copy is not atomic with the archived state: a
//! crash between the two loses the copy, and a retried produce may write it twice.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use indexmap::IndexMap;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{CreateTopicsRequest, ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use kafka_protocol::ResponseError;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::partition::DeadLetter;
use crate::broker::Broker;
use crate::tiering::Tiering;

pub const TOPIC_NAME: &str = "errors.deadletterqueue.topic.name";
pub const COPY_RECORD: &str = "errors.deadletterqueue.copy.record.enable";
pub const TOPIC_ENABLE: &str = "errors.deadletterqueue.group.enable";
pub const PREFIX: &str = "errors.deadletterqueue.topic.name.prefix";
pub const AUTO_CREATE: &str = "errors.deadletterqueue.auto.create.topics.enable";
/// Kafka's default `errors.deadletterqueue.topic.name.prefix`.
const DEFAULT_PREFIX: &str = "dlq.";

const REJECTED: &str = "Offset rejected by client.";
const LIMIT_REACHED: &str = "Offset delivery count exceeded the threshold.";

/// Copies waiting for the task; more are dropped with a warning.
const QUEUE: usize = 4096;
/// Records in one produced batch.
const BATCH_RECORDS: usize = 500;
/// Bytes of source records read for one batch's copies.
const READ_BYTES: usize = 4 << 20;
const ATTEMPTS: u32 = 5;
const PRODUCE_VERSION: i16 = 9;
const CREATE_TOPICS_VERSION: i16 = 5;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a created dead-letter topic may take to reach this broker's metadata.
const TOPIC_WAIT: Duration = Duration::from_secs(10);

/// Archived records of one share-partition to copy.
#[derive(Debug)]
struct Job {
    group: String,
    topic_id: Uuid,
    partition: i32,
    letters: Vec<DeadLetter>,
}

/// The queue of copies and the task that produces them.
pub struct DeadLetters {
    tx: mpsc::Sender<Job>,
    rx: Mutex<Option<mpsc::Receiver<Job>>>,
    pub written: AtomicU64,
    pub failed: AtomicU64,
}

impl Default for DeadLetters {
    fn default() -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        DeadLetters {
            tx,
            rx: Mutex::new(Some(rx)),
            written: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        }
    }
}

/// The dead-letter settings of a group and the topic they name.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Target {
    topic: String,
    copy_record: bool,
}

fn is_true(v: Option<&String>) -> bool {
    v.is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

impl DeadLetters {
    /// Queues the copies of records `group` archived on a share-partition (after their state
    /// is persisted). Never blocks: a full queue drops them with a warning.
    pub fn enqueue(&self, group: &str, topic_id: Uuid, partition: i32, letters: Vec<DeadLetter>) {
        if letters.is_empty() {
            return;
        }
        let job = Job {
            group: group.to_string(),
            topic_id,
            partition,
            letters,
        };
        if let Err(e) = self.tx.try_send(job) {
            self.failed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%group, partition, error = %e, "Unable to enqueue DLQ request");
        }
    }

    /// Produces the queued copies until `shutdown`; source records that left the local log
    /// are read from `tiering`.
    pub async fn run(
        self: Arc<Self>,
        broker: Arc<Broker>,
        tiering: Option<Arc<Tiering>>,
        shutdown: CancellationToken,
    ) {
        let Some(mut rx) = self.rx.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return;
        };
        loop {
            let job = tokio::select! {
                _ = shutdown.cancelled() => return,
                job = rx.recv() => match job { Some(job) => job, None => return },
            };
            let (group, partition) = (job.group.clone(), job.partition);
            match deliver(&broker, tiering.as_deref(), job).await {
                Ok(0) => {}
                Ok(n) => {
                    self.written.fetch_add(n as u64, Ordering::Relaxed);
                }
                Err(e) => {
                    self.failed.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(%group, partition, error = %e, "share group dead-letter copy not written");
                }
            }
        }
    }
}

/// The group's dead-letter topic, checked as Kafka's `validateDlqTopic` checks it; `Ok(None)`:
/// the group has none.
fn target(broker: &Broker, group: &str) -> Result<Option<Target>, String> {
    let configs = broker.group_configs(group);
    let Some(topic) = configs.get(TOPIC_NAME).map(|t| t.trim().to_string()) else {
        return Ok(None);
    };
    if topic.is_empty() {
        return Ok(None);
    }
    if topic.starts_with("__") {
        return Err(format!(
            "Configured DLQ topic name in share group: {group} cannot start with __, topic: {topic}."
        ));
    }
    let dynamic = broker.effective_dynamic_configs();
    let prefix = dynamic
        .get(PREFIX)
        .or_else(|| broker.config.explicit.get(PREFIX))
        .map_or(DEFAULT_PREFIX, String::as_str)
        .trim()
        .to_string();
    if !prefix.is_empty() && !topic.starts_with(&prefix) {
        return Err(format!(
            "Configured DLQ topic name does not comply with the DLQ topic prefix in share group: {group}, topic: {topic}, prefix: {prefix}."
        ));
    }
    Ok(Some(Target {
        topic,
        copy_record: is_true(configs.get(COPY_RECORD)),
    }))
}

/// Where this broker reaches broker `id` (itself included) on the inter-broker listener.
fn address(broker: &Broker, id: i32) -> Option<(String, u16)> {
    if id == broker.config.node_id {
        let name = &broker.config.replication.inter_broker.listener;
        let l = broker
            .config
            .listeners
            .iter()
            .find(|l| &l.name == name)
            .unwrap_or(&broker.config.listener);
        return Some((l.advertised_host.clone(), l.advertised_port));
    }
    crate::replication::fetcher::leader_address(broker, id)
}

async fn call<R: kafka_protocol::protocol::Request>(
    broker: &Broker,
    id: i32,
    version: i16,
    request: &R,
) -> Result<R::Response, String> {
    let (host, port) = address(broker, id).ok_or(format!("no address for broker {id}"))?;
    broker
        .replication()
        .peers
        .call(
            &host,
            port,
            &format!("broker-{}-share-dlq", broker.config.node_id),
            broker.config.replication.socket_timeout,
            version,
            request,
            REQUEST_TIMEOUT,
        )
        .await
        .map_err(|e| e.to_string())
}

/// The dead-letter topic, created when missing and the broker allows it; checked enabled.
async fn topic(broker: &Arc<Broker>, group: &str, name: &str) -> Result<i32, String> {
    for _ in 0..ATTEMPTS {
        if let Some(t) = broker.topic(name) {
            if !is_true(t.overrides.get(TOPIC_ENABLE)) {
                return Err(format!(
                    "DLQ is not enabled on configured DLQ topic for share group: {group}, topic: {name}."
                ));
            }
            return Ok(t.partitions.len() as i32);
        }
        let dynamic = broker.effective_dynamic_configs();
        let auto = dynamic
            .get(AUTO_CREATE)
            .or_else(|| broker.config.explicit.get(AUTO_CREATE));
        if !is_true(auto) {
            return Err(format!(
                "DLQ topic does not exist and auto create is disabled on cluster for share group: {group}, topic: {name}."
            ));
        }
        let config = |k: &str, v: &str| {
            CreatableTopicConfig::default()
                .with_name(StrBytes::from_string(k.to_string()))
                .with_value(Some(StrBytes::from_string(v.to_string())))
        };
        let request = CreateTopicsRequest::default()
            .with_timeout_ms(REQUEST_TIMEOUT.as_millis() as i32)
            .with_topics(vec![CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_string(name.to_string())))
                .with_num_partitions(-1)
                .with_replication_factor(-1)
                .with_configs(vec![
                    config(TOPIC_ENABLE, "true"),
                    config("message.timestamp.type", "CreateTime"),
                ])]);
        let me = broker.config.node_id;
        let response = call(broker, me, CREATE_TOPICS_VERSION, &request).await?;
        let code = response.topics.first().map_or(0, |t| t.error_code);
        match ResponseError::try_from_code(code) {
            None | Some(ResponseError::TopicAlreadyExists) => {
                tracing::info!(%group, topic = name, "created the share group's dead-letter topic");
            }
            Some(e) => return Err(format!("cannot create DLQ topic {name}: {e:?}")),
        }
        // The broker learns the new topic from the metadata it applies (in a cluster, once
        // the controller's record reaches it).
        let appear = tokio::time::Instant::now() + TOPIC_WAIT;
        while broker.topic(name).is_none() && tokio::time::Instant::now() < appear {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Err(format!(
        "DLQ topic {name} for share group {group} did not appear"
    ))
}

/// Key and value of source records, by offset.
type Copies = std::collections::HashMap<i64, (Option<Bytes>, Option<Bytes>)>;

/// The source records `[first, last]` still in the local log or in remote storage.
async fn source_records(
    broker: &Arc<Broker>,
    tiering: Option<&Tiering>,
    topic: &str,
    partition: i32,
    first: i64,
    last: i64,
) -> Copies {
    let mut out = Copies::new();
    let Some(t) = broker.topic(topic) else {
        return out;
    };
    let mut next = first;
    while next <= last {
        let (b, name) = (broker.clone(), topic.to_string());
        let local = tokio::task::spawn_blocking(move || {
            let p = b.partition(&name, partition)?;
            let slice = p
                .read(
                    crate::broker::Offset(next),
                    READ_BYTES,
                    crate::broker::Offset(i64::MAX),
                    true,
                )
                .ok()??;
            slice.read().ok()
        })
        .await
        .ok()
        .flatten();
        let bytes = match (local, tiering) {
            (Some(bytes), _) => bytes,
            (None, Some(tiering)) => {
                match tiering.read(&t, partition, next, READ_BYTES, true).await {
                    Ok(records) => match records.into_bytes() {
                        Ok(bytes) => bytes,
                        Err(_) => break,
                    },
                    Err(_) => break,
                }
            }
            (None, None) => break,
        };
        let before = next;
        decode_into(bytes, first, last, &mut next, &mut out);
        if next == before {
            break;
        }
    }
    out
}

/// Adds the data records of `bytes` (whole batches) in `[first, last]` to `out`; `next`
/// moves past every record seen.
fn decode_into(mut bytes: Bytes, first: i64, last: i64, next: &mut i64, out: &mut Copies) {
    let Ok(batches) = RecordBatchDecoder::decode_all(&mut bytes) else {
        return;
    };
    for record in batches.iter().flat_map(|b| b.records.iter()) {
        *next = (*next).max(record.offset + 1);
        if !record.control && (first..=last).contains(&record.offset) {
            out.insert(record.offset, (record.key.clone(), record.value.clone()));
        }
    }
}

fn header(v: impl ToString) -> Option<Bytes> {
    Some(Bytes::from(v.to_string()))
}

/// What the dead-letter records of one range of archived offsets say.
struct Letter<'a> {
    source: &'a str,
    partition: i32,
    group: &'a str,
    delivery_count: i16,
    rejected: bool,
}

impl Letter<'_> {
    /// The records for offsets `[first, last]`, with the copies found, stamped `now`.
    fn records(&self, first: i64, last: i64, copies: &Copies, now: i64) -> Vec<Record> {
        (first..=last)
            .map(|offset| {
                let (key, value) = copies.get(&offset).cloned().unwrap_or((None, None));
                let mut headers = IndexMap::new();
                let mut h = |k: &'static str, v| {
                    headers.insert(StrBytes::from_static_str(k), v);
                };
                h("__dlq.errors.topic", header(self.source));
                h("__dlq.errors.partition", header(self.partition));
                h("__dlq.errors.offset", header(offset));
                h("__dlq.errors.group", header(self.group));
                h("__dlq.errors.delivery.count", header(self.delivery_count));
                let reason = if self.rejected {
                    REJECTED
                } else {
                    LIMIT_REACHED
                };
                h("__dlq.errors.message", header(reason));
                Record {
                    transactional: false,
                    control: false,
                    delete_horizon: false,
                    partition_leader_epoch: -1,
                    producer_id: -1,
                    producer_epoch: -1,
                    timestamp_type: TimestampType::Creation,
                    offset: offset - first,
                    // One batch, no producer: base sequence -1 (the encoder splits records
                    // whose offset and sequence do not move together).
                    sequence: (offset - first) as i32 - 1,
                    timestamp: now,
                    key,
                    value,
                    headers,
                }
            })
            .collect()
    }
}

/// One uncompressed batch of `records`.
fn encode(records: &[Record]) -> Result<Bytes, String> {
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .map_err(|e| format!("cannot encode dead-letter records: {e}"))?;
    Ok(buf.freeze())
}

async fn deliver(
    broker: &Arc<Broker>,
    tiering: Option<&Tiering>,
    job: Job,
) -> Result<usize, String> {
    let Some(target) = target(broker, &job.group)? else {
        return Ok(0);
    };
    let partitions = topic(broker, &job.group, &target.topic).await?;
    if partitions <= 0 {
        return Err(format!("DLQ topic {} has no partitions", target.topic));
    }
    let destination = job.partition % partitions;
    let source = broker
        .topic_by_id(&job.topic_id)
        .map(|t| t.name.clone())
        .unwrap_or_else(|| crate::broker::kafka_uuid_string(job.topic_id));
    let mut written = 0;
    for letter in &job.letters {
        let mut first = letter.first_offset;
        while first <= letter.last_offset {
            let last = letter
                .last_offset
                .min(first.saturating_add(BATCH_RECORDS as i64 - 1));
            let copies = if target.copy_record {
                source_records(broker, tiering, &source, job.partition, first, last).await
            } else {
                Copies::new()
            };
            let letter = Letter {
                source: &source,
                partition: job.partition,
                group: &job.group,
                delivery_count: letter.delivery_count,
                rejected: letter.rejected,
            };
            let records = letter.records(first, last, &copies, crate::clock::now_ms());
            produce(broker, &target.topic, destination, &records).await?;
            written += records.len();
            first = last + 1;
        }
    }
    Ok(written)
}

/// Produces one batch to `topic`'s `partition` with acks=all, retrying transient errors.
async fn produce(
    broker: &Arc<Broker>,
    topic: &str,
    partition: i32,
    records: &[Record],
) -> Result<(), String> {
    let batch = encode(records)?;
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(REQUEST_TIMEOUT.as_millis() as i32)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(batch))])]);
    let mut last_error = String::new();
    for attempt in 0..ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(200 << attempt)).await;
        }
        let leader = match broker.replication().leadership(topic, partition) {
            Some(state) => match state.leader {
                Some(id) => id,
                None => {
                    last_error = format!("{topic}-{partition} has no leader");
                    continue;
                }
            },
            // A single node leads every partition; in a cluster an unknown one is waited for.
            None if broker.config.cluster.is_none() => broker.config.node_id,
            None => {
                last_error = format!("the leader of {topic}-{partition} is not known yet");
                continue;
            }
        };
        let response = match call(broker, leader, PRODUCE_VERSION, &request).await {
            Ok(r) => r,
            Err(e) => {
                last_error = e;
                continue;
            }
        };
        let answer = response
            .responses
            .first()
            .and_then(|t| t.partition_responses.first());
        let code = answer.map_or(ResponseError::UnknownServerError.code(), |p| p.error_code);
        let message = answer
            .and_then(|p| p.error_message.as_ref())
            .map_or("", |m| m.as_str());
        match ResponseError::try_from_code(code) {
            None => return Ok(()),
            Some(e) if e.is_retriable() => last_error = format!("{e:?} {message}"),
            Some(e) => return Err(format!("produce to {topic}-{partition}: {e:?} {message}")),
        }
    }
    Err(format!(
        "Exhausted max retries to produce to DLQ topic {topic}-{partition}: {last_error}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_of_dead_letters_is_one_batch_without_a_producer_carrying_kafkas_headers() {
        let letter = Letter {
            source: "orders",
            partition: 3,
            group: "billing",
            delivery_count: 5,
            rejected: false,
        };
        let copies = std::collections::HashMap::from([(
            11,
            (
                Some(Bytes::from_static(b"k")),
                Some(Bytes::from_static(b"v")),
            ),
        )]);
        let batch = encode(&letter.records(10, 12, &copies, 1_700_000_000_000)).unwrap();
        let header = strata_records::header::BatchHeader::parse_whole(&batch).unwrap();
        assert_eq!(header.total_size(), batch.len(), "exactly one batch");
        assert_eq!((header.producer_id, header.base_sequence), (-1, -1));
        let sets = RecordBatchDecoder::decode_all(&mut batch.clone()).unwrap();
        let records = &sets[0].records;
        assert_eq!(records.len(), 3);
        let text = |r: &Record, k: &str| {
            String::from_utf8(
                r.headers[&StrBytes::from_string(k.to_string())]
                    .clone()
                    .unwrap()
                    .to_vec(),
            )
            .unwrap()
        };
        for (i, r) in records.iter().enumerate() {
            assert_eq!(text(r, "__dlq.errors.offset"), (10 + i).to_string());
            assert_eq!(text(r, "__dlq.errors.topic"), "orders");
            assert_eq!(text(r, "__dlq.errors.partition"), "3");
            assert_eq!(text(r, "__dlq.errors.group"), "billing");
            assert_eq!(text(r, "__dlq.errors.delivery.count"), "5");
            assert_eq!(text(r, "__dlq.errors.message"), LIMIT_REACHED);
            assert_eq!(r.timestamp, 1_700_000_000_000);
        }
        assert_eq!(records[1].value.as_deref(), Some(&b"v"[..]));
        assert!(records[0].key.is_none() && records[2].value.is_none());
    }
}
