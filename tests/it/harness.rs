//! An in-process broker on ephemeral ports with its own temporary data dir, and builders for
//! the requests most tests send.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::list_offsets_response::ListOffsetsPartitionResponse;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::produce_response::PartitionProduceResponse;
use kafka_protocol::messages::{
    CreateTopicsRequest, FetchRequest, FetchResponse, InitProducerIdRequest, ListOffsetsRequest,
    ProduceRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use strata::config::BrokerConfig;
use strata::runtime::Running;
use tempfile::TempDir;

use crate::client::Client;

pub const PRODUCE_V: i16 = 9;
pub const FETCH_V: i16 = 12;
pub const LIST_OFFSETS_V: i16 = 7;
pub const CREATE_TOPICS_V: i16 = 7;

pub struct TestBroker {
    running: Option<Running>,
    pub dir: TempDir,
    extra: Vec<(String, String)>,
    pub kafka_addr: SocketAddr,
    pub admin_addr: SocketAddr,
}

pub fn config_for(dir: &Path, extra: &[(String, String)]) -> BrokerConfig {
    let mut m = BTreeMap::new();
    m.insert(
        "listeners".to_string(),
        "PLAINTEXT://127.0.0.1:0".to_string(),
    );
    m.insert(
        "strata.admin.listener".to_string(),
        "127.0.0.1:0".to_string(),
    );
    m.insert("log.dirs".to_string(), dir.display().to_string());
    for (k, v) in extra {
        m.insert(k.clone(), v.clone());
    }
    BrokerConfig::build(&[m]).expect("valid test config")
}

impl TestBroker {
    pub async fn start() -> TestBroker {
        TestBroker::start_with(&[]).await
    }

    pub async fn start_with(extra: &[(&str, &str)]) -> TestBroker {
        let dir = tempfile::Builder::new()
            .prefix("strata-it-")
            .tempdir()
            .expect("tempdir");
        let extra: Vec<(String, String)> = extra
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let running = strata::runtime::start(config_for(dir.path(), &extra))
            .await
            .expect("broker starts");
        TestBroker {
            kafka_addr: running.kafka_addr,
            admin_addr: running.admin_addr,
            running: Some(running),
            dir,
            extra,
        }
    }

    /// The in-process broker (for tests that inspect or fault-inject its internals).
    pub fn broker(&self) -> &std::sync::Arc<strata::broker::Broker> {
        &self.running.as_ref().expect("running").broker
    }

    pub fn services(&self) -> &strata::services::Services {
        &self.running.as_ref().expect("running").services
    }

    pub async fn client(&self) -> Client {
        Client::connect(self.kafka_addr).await
    }

    /// Clean shutdown, then a new broker on the same data dir.
    pub async fn restart(mut self) -> TestBroker {
        let running = self.running.take().expect("running");
        running.shutdown().await.expect("clean shutdown");
        let running = strata::runtime::start(config_for(self.dir.path(), &self.extra))
            .await
            .expect("broker restarts");
        self.kafka_addr = running.kafka_addr;
        self.admin_addr = running.admin_addr;
        self.running = Some(running);
        self
    }

    /// Simulates a crash: stops serving without closing the logs (no final flush, producer
    /// snapshots, checkpoints or clean-shutdown marker), lets `tamper` change the data dir,
    /// then starts a new broker on it.
    pub async fn crash_and_restart(mut self, tamper: impl FnOnce(&Path)) -> TestBroker {
        let running = self.running.take().expect("running");
        running.shutdown_token().cancel();
        tokio::time::sleep(Duration::from_millis(300)).await;
        drop(running);
        tamper(self.dir.path());
        let running = strata::runtime::start(config_for(self.dir.path(), &self.extra))
            .await
            .expect("broker starts after a crash");
        self.kafka_addr = running.kafka_addr;
        self.admin_addr = running.admin_addr;
        self.running = Some(running);
        self
    }

    /// Simulates a crash that keeps the data dir for [`TestBroker::resume`]: stops serving and
    /// (in cluster mode) stops the metadata node without a controlled shutdown, and never
    /// closes the logs.
    pub async fn crash(&mut self) {
        let running = self.running.take().expect("running");
        running.shutdown_token().cancel();
        if let Some(control) = running.services.cluster.as_ref() {
            control.shutdown(Duration::from_secs(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        drop(running);
    }

    /// Clean shutdown, returning how long it took.
    pub async fn timed_shutdown(mut self) -> Duration {
        let started = std::time::Instant::now();
        let r = self.running.take().expect("running");
        tokio::time::timeout(Duration::from_secs(60), r.shutdown())
            .await
            .expect("shutdown finishes")
            .expect("clean shutdown");
        started.elapsed()
    }

    /// Clean shutdown; `after` may move things out of the data dir before it is removed.
    pub async fn shutdown_keep_dir(mut self, after: impl FnOnce(&Path)) {
        if let Some(r) = self.running.take() {
            tokio::time::timeout(Duration::from_secs(30), r.shutdown())
                .await
                .expect("shutdown finishes in time")
                .expect("clean shutdown");
        }
        after(self.dir.path());
    }

    /// Clean shutdown that keeps the data dir, for [`TestBroker::resume`].
    pub async fn stop(&mut self) {
        if let Some(r) = self.running.take() {
            tokio::time::timeout(Duration::from_secs(30), r.shutdown())
                .await
                .expect("shutdown finishes in time")
                .expect("clean shutdown");
        }
    }

    /// Starts a broker again on the data dir of a stopped one (new ephemeral ports).
    pub async fn resume(&mut self) {
        assert!(self.running.is_none(), "resume a stopped broker");
        let running = strata::runtime::start(config_for(self.dir.path(), &self.extra))
            .await
            .expect("broker restarts");
        self.kafka_addr = running.kafka_addr;
        self.admin_addr = running.admin_addr;
        self.running = Some(running);
    }

    /// Starts a stopped broker again on its data dir with `overrides` on top of its settings
    /// for this start only; returns the start-up error instead of panicking on it.
    pub async fn try_resume_with(&mut self, overrides: &[(&str, &str)]) -> anyhow::Result<()> {
        assert!(self.running.is_none(), "resume a stopped broker");
        let mut extra = self.extra.clone();
        extra.extend(
            overrides
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string())),
        );
        let running = strata::runtime::start(config_for(self.dir.path(), &extra)).await?;
        self.kafka_addr = running.kafka_addr;
        self.admin_addr = running.admin_addr;
        self.running = Some(running);
        Ok(())
    }

    pub async fn shutdown(mut self) {
        if let Some(r) = self.running.take() {
            tokio::time::timeout(Duration::from_secs(30), r.shutdown())
                .await
                .expect("shutdown finishes in time")
                .expect("clean shutdown");
        }
    }
}

/// The names of the entries of `dir` that start with `prefix`, sorted (partition directories
/// of a topic, and what its deletion renamed them to).
pub fn entries_starting_with(dir: &Path, prefix: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with(prefix))
        .collect();
    v.sort();
    v
}

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// An ApiVersions request naming its client as Kafka requires from v3 on.
pub fn api_versions_request() -> kafka_protocol::messages::ApiVersionsRequest {
    kafka_protocol::messages::ApiVersionsRequest::default()
        .with_client_software_name(kafka_protocol::protocol::StrBytes::from_static_str(
            "strata-it",
        ))
        .with_client_software_version(kafka_protocol::protocol::StrBytes::from_static_str("1.0"))
}

pub fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

pub fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// Producer identity of an idempotent batch: (producer id, epoch, base sequence).
pub type ProducerIds = (i64, i16, i32);

/// One RecordBatch v2 holding `values`, record `i` stamped `timestamps[i]`.
pub fn batch_with(
    values: &[&[u8]],
    timestamps: &[i64],
    compression: Compression,
    producer: Option<ProducerIds>,
) -> Bytes {
    assert_eq!(values.len(), timestamps.len());
    let (pid, epoch, base_seq) = producer.unwrap_or((-1, -1, -1));
    let records: Vec<Record> = values
        .iter()
        .zip(timestamps)
        .enumerate()
        .map(|(i, (v, ts))| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: pid,
            producer_epoch: epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // The encoder keeps records in one batch while offset - sequence is constant; a
            // non-idempotent batch has base sequence -1.
            sequence: base_seq + i as i32,
            timestamp: *ts,
            key: Some(Bytes::from(format!("key-{i}"))),
            value: Some(Bytes::copy_from_slice(v)),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        records.iter(),
        &RecordEncodeOptions {
            version: 2,
            compression,
        },
    )
    .expect("encode batch");
    let b = buf.freeze();
    assert_eq!(
        u32::from_be_bytes([b[57], b[58], b[59], b[60]]) as usize,
        values.len(),
        "encoder produced one batch"
    );
    b
}

/// A batch of `n` small records stamped now.
pub fn batch(n: usize) -> Bytes {
    let now = now_ms();
    let values: Vec<Vec<u8>> = (0..n).map(|i| format!("value-{i}").into_bytes()).collect();
    let refs: Vec<&[u8]> = values.iter().map(|v| v.as_slice()).collect();
    let ts: Vec<i64> = (0..n).map(|_| now).collect();
    batch_with(&refs, &ts, Compression::None, None)
}

/// An idempotent batch of `n` small records.
pub fn idempotent_batch(n: usize, producer: ProducerIds) -> Bytes {
    let now = now_ms();
    let values: Vec<Vec<u8>> = (0..n).map(|i| format!("idem-{i}").into_bytes()).collect();
    let refs: Vec<&[u8]> = values.iter().map(|v| v.as_slice()).collect();
    let ts: Vec<i64> = (0..n).map(|_| now).collect();
    batch_with(&refs, &ts, Compression::None, Some(producer))
}

/// Number of records in a fetched records blob.
pub fn count_records(records: &Option<Bytes>) -> usize {
    let Some(b) = records else { return 0 };
    if b.is_empty() {
        return 0;
    }
    let mut b = b.clone();
    RecordBatchDecoder::decode_all(&mut b)
        .expect("decode fetched batches")
        .iter()
        .map(|s| s.records.len())
        .sum()
}

/// Offsets of the records in a fetched records blob.
pub fn record_offsets(records: &Option<Bytes>) -> Vec<i64> {
    let Some(b) = records else { return vec![] };
    let mut b = b.clone();
    RecordBatchDecoder::decode_all(&mut b)
        .expect("decode fetched batches")
        .iter()
        .flat_map(|s| s.records.iter().map(|r| r.offset))
        .collect()
}

pub async fn create_topic_with(
    c: &mut Client,
    topic: &str,
    partitions: i32,
    configs: &[(&str, &str)],
) -> CreatableTopicResult {
    let mut t = CreatableTopic::default();
    t.name = name(topic);
    t.num_partitions = partitions;
    t.replication_factor = 1;
    t.configs = configs
        .iter()
        .map(|(k, v)| {
            let mut c = CreatableTopicConfig::default();
            c.name = str_bytes(k);
            c.value = Some(str_bytes(v));
            c
        })
        .collect();
    create_topics(c, vec![t]).await.remove(0)
}

pub async fn create_topics(
    c: &mut Client,
    topics: Vec<CreatableTopic>,
) -> Vec<CreatableTopicResult> {
    let mut req = CreateTopicsRequest::default();
    req.topics = topics;
    req.timeout_ms = 10_000;
    c.call(CREATE_TOPICS_V, &req).await.topics
}

/// Creates a topic and checks it worked; returns its id.
pub async fn create_topic(c: &mut Client, topic: &str, partitions: i32) -> uuid::Uuid {
    let r = create_topic_with(c, topic, partitions, &[]).await;
    assert_eq!(r.error_code, 0, "create {topic}: {:?}", r.error_message);
    r.topic_id
}

pub fn produce_request(topic: &str, partition: i32, records: Bytes, acks: i16) -> ProduceRequest {
    let mut pd = PartitionProduceData::default();
    pd.index = partition;
    pd.records = Some(records);
    let mut td = TopicProduceData::default();
    td.name = name(topic);
    td.partition_data = vec![pd];
    let mut req = ProduceRequest::default();
    req.acks = acks;
    req.timeout_ms = 10_000;
    req.topic_data = vec![td];
    req
}

pub async fn produce(
    c: &mut Client,
    topic: &str,
    partition: i32,
    records: Bytes,
) -> PartitionProduceResponse {
    produce_acks(c, topic, partition, records, -1).await
}

pub async fn produce_acks(
    c: &mut Client,
    topic: &str,
    partition: i32,
    records: Bytes,
    acks: i16,
) -> PartitionProduceResponse {
    let resp = c
        .call(PRODUCE_V, &produce_request(topic, partition, records, acks))
        .await;
    assert_eq!(resp.responses.len(), 1);
    let mut t = resp.responses.into_iter().next().unwrap();
    assert_eq!(t.name.0.as_str(), topic);
    assert_eq!(t.partition_responses.len(), 1);
    t.partition_responses.remove(0)
}

pub struct FetchArgs {
    pub offset: i64,
    pub max_wait_ms: i32,
    pub min_bytes: i32,
    pub partition_max_bytes: i32,
}

impl Default for FetchArgs {
    fn default() -> Self {
        FetchArgs {
            offset: 0,
            max_wait_ms: 0,
            min_bytes: 0,
            partition_max_bytes: 1 << 20,
        }
    }
}

pub fn fetch_request(topic: &str, partition: i32, a: &FetchArgs) -> FetchRequest {
    let mut p = FetchPartition::default();
    p.partition = partition;
    p.fetch_offset = a.offset;
    p.partition_max_bytes = a.partition_max_bytes;
    let mut t = FetchTopic::default();
    t.topic = name(topic);
    t.partitions = vec![p];
    let mut req = FetchRequest::default();
    req.max_wait_ms = a.max_wait_ms;
    req.min_bytes = a.min_bytes;
    req.max_bytes = 50 << 20;
    req.topics = vec![t];
    req
}

/// Fetches one partition by name and returns its partition data.
pub async fn fetch(c: &mut Client, topic: &str, partition: i32, a: FetchArgs) -> PartitionData {
    let resp: FetchResponse = c.call(FETCH_V, &fetch_request(topic, partition, &a)).await;
    assert_eq!(resp.error_code, 0);
    assert_eq!(resp.responses.len(), 1);
    let mut t = resp.responses.into_iter().next().unwrap();
    assert_eq!(t.partitions.len(), 1);
    t.partitions.remove(0)
}

pub async fn list_offset(
    c: &mut Client,
    topic: &str,
    partition: i32,
    timestamp: i64,
) -> ListOffsetsPartitionResponse {
    list_offset_at(c, LIST_OFFSETS_V, topic, partition, timestamp).await
}

/// [`list_offset`] at a given ListOffsets version.
pub async fn list_offset_at(
    c: &mut Client,
    version: i16,
    topic: &str,
    partition: i32,
    timestamp: i64,
) -> ListOffsetsPartitionResponse {
    let mut p = ListOffsetsPartition::default();
    p.partition_index = partition;
    p.timestamp = timestamp;
    let mut t = ListOffsetsTopic::default();
    t.name = name(topic);
    t.partitions = vec![p];
    let mut req = ListOffsetsRequest::default();
    req.replica_id = (-1).into();
    req.topics = vec![t];
    let resp = c.call(version, &req).await;
    let mut t = resp.topics.into_iter().next().expect("one topic");
    t.partitions.remove(0)
}

pub async fn init_producer_id(c: &mut Client) -> (i64, i16) {
    let mut req = InitProducerIdRequest::default();
    req.transactional_id = None;
    req.transaction_timeout_ms = 60_000;
    req.producer_id = (-1).into();
    req.producer_epoch = -1;
    let resp = c.call(4, &req).await;
    assert_eq!(resp.error_code, 0, "InitProducerId");
    assert!(resp.producer_id.0 >= 0);
    (resp.producer_id.0, resp.producer_epoch)
}
