//! A Kafka load generator that is not the bottleneck on a small machine.
//!
//! ```text
//! strata-loadgen produce --bootstrap HOST:PORT --topic T --partitions P --records N
//!                        [--record-size 1024] [--batch-bytes 16384] [--compression none|gzip|snappy|lz4|zstd]
//!                        [--acks 1|-1] [--connections 4] [--inflight 5]
//! strata-loadgen consume --bootstrap HOST:PORT --topic T --partitions P --records N
//!                        [--connections 4] [--fetch-max-bytes 52428800] [--partition-max-bytes 1048576]
//! (`--connections` per leader broker)
//! strata-loadgen floor   --bytes N --file PATH [--connections 4]
//! ```
//! `floor` measures what the machine itself allows a broker's produce path: N bytes sent over
//! loopback TCP and appended to a file (page cache, no fsync), by `--connections` sender and
//! receiver thread pairs in this process, with no protocol at all. Its MB/s and CPU-s per GiB
//! (sender and receiver together) are the bound a broker's figures are compared with.
//! Produce encodes one RecordBatch per partition once (random values, so compression does
//! the work it would on real payloads) and sends it again and again in ProduceRequest v9
//! frames, patching only the correlation id, with `--inflight` requests outstanding per
//! connection; the broker assigns offsets as it would for any non-idempotent producer.
//! Consume sends one Fetch v12 request at a time per connection, for the connection's
//! partitions, and walks only the batch headers of what comes back. (One request per
//! partition outstanding on each connection measured slower: the broker answers a
//! connection's requests in order, and smaller responses cost more per byte.)
//! So the generator spends a few percent of a core where a Java or librdkafka client spends
//! one or two, and the broker is what the figures measure.
//!
//! Each partition is sent to its leader, found with a Metadata request to the first
//! `--bootstrap` address (a comma-separated list) that accepts a connection, and each leader's partitions are spread
//! over `--connections` connections to it. Latency is per request (each request carries one
//! batch). Prints one line of `key=value` figures, including the generator's own CPU seconds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, FetchRequest, FetchResponse, MetadataRequest, MetadataResponse, ProduceRequest,
    ProduceResponse, RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

const PRODUCE_V: i16 = 9;
const FETCH_V: i16 = 12;
const METADATA_V: i16 = 12;

struct Args {
    mode: String,
    bootstrap: String,
    topic: String,
    partitions: i32,
    records: u64,
    record_size: usize,
    batch_bytes: usize,
    compression: Compression,
    acks: i16,
    connections: usize,
    inflight: usize,
    fetch_max_bytes: i32,
    partition_max_bytes: i32,
    /// `floor`: bytes to send and the file they are appended to.
    bytes: u64,
    file: String,
}

fn parse_args() -> Result<Args> {
    let mut it = std::env::args().skip(1);
    let mode = it
        .next()
        .context("usage: strata-loadgen produce|consume --bootstrap ...")?;
    let mut a = Args {
        mode,
        bootstrap: String::new(),
        topic: String::new(),
        partitions: 1,
        records: 1_000_000,
        record_size: 1024,
        batch_bytes: 16384,
        compression: Compression::None,
        acks: 1,
        connections: 4,
        inflight: 5,
        fetch_max_bytes: 52_428_800,
        partition_max_bytes: 1_048_576,
        bytes: 0,
        file: String::new(),
    };
    while let Some(flag) = it.next() {
        let v = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--bootstrap" => a.bootstrap = v,
            "--topic" => a.topic = v,
            "--partitions" => a.partitions = v.parse()?,
            "--records" => a.records = v.parse()?,
            "--record-size" => a.record_size = v.parse()?,
            "--batch-bytes" => a.batch_bytes = v.parse()?,
            "--acks" => a.acks = v.parse()?,
            "--connections" => a.connections = v.parse()?,
            "--inflight" => a.inflight = v.parse()?,
            "--fetch-max-bytes" => a.fetch_max_bytes = v.parse()?,
            "--partition-max-bytes" => a.partition_max_bytes = v.parse()?,
            "--bytes" => a.bytes = v.parse()?,
            "--file" => a.file = v,
            "--compression" => {
                a.compression = match v.as_str() {
                    "none" | "uncompressed" => Compression::None,
                    "gzip" => Compression::Gzip,
                    "snappy" => Compression::Snappy,
                    "lz4" => Compression::Lz4,
                    "zstd" => Compression::Zstd,
                    other => bail!("unknown compression {other}"),
                }
            }
            other => bail!("unknown flag {other}"),
        }
    }
    if a.mode == "floor" {
        if a.bytes == 0 || a.file.is_empty() || a.connections < 1 {
            bail!("floor needs --bytes N (positive), --file PATH and --connections >= 1");
        }
        return Ok(a);
    }
    if a.bootstrap.is_empty() || a.topic.is_empty() {
        bail!("--bootstrap and --topic are required");
    }
    if a.partitions < 1 || a.connections < 1 || a.inflight < 1 || a.record_size < 1 {
        bail!("--partitions, --connections, --inflight and --record-size must be positive");
    }
    Ok(a)
}

/// A frame: size prefix, request header, body.
fn encode_frame<R: Encodable + HeaderVersion>(
    key: ApiKey,
    version: i16,
    req: &R,
) -> Result<BytesMut> {
    let mut header = RequestHeader::default();
    header.request_api_key = key as i16;
    header.request_api_version = version;
    header.client_id = Some(StrBytes::from_static_str("strata-loadgen"));
    let mut buf = BytesMut::new();
    buf.extend_from_slice(&[0; 4]);
    header.encode(&mut buf, R::header_version(version))?;
    req.encode(&mut buf, version)?;
    let len = (buf.len() - 4) as i32;
    buf[..4].copy_from_slice(&len.to_be_bytes());
    Ok(buf)
}

fn set_correlation_id(frame: &mut [u8], id: i32) {
    frame[8..12].copy_from_slice(&id.to_be_bytes());
}

async fn read_frame(stream: &mut tokio::net::tcp::OwnedReadHalf) -> Result<Bytes> {
    let size = stream.read_i32().await.context("read a response size")?;
    if !(4..=1 << 30).contains(&size) {
        bail!("response size {size}");
    }
    let mut buf = BytesMut::zeroed(size as usize);
    stream
        .read_exact(&mut buf)
        .await
        .context("read a response")?;
    Ok(buf.freeze())
}

/// Pseudo-random bytes (xorshift), so payloads compress like real ones rather than zeros.
fn random_bytes(n: usize, seed: u64) -> Bytes {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(n);
    Bytes::from(out)
}

fn produce_frame(a: &Args, partition: i32, records_per_batch: usize) -> Result<BytesMut> {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let records: Vec<Record> = (0..records_per_batch)
        .map(|i| Record {
            transactional: false,
            control: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // kafka-protocol keeps records in one batch while offset - sequence is constant.
            sequence: i as i32,
            // Now: a fixed old stamp would be past retention.ms, and a broker's retention
            // check could delete the records under the consumer.
            timestamp: now_ms,
            key: None,
            value: Some(random_bytes(
                a.record_size,
                (partition as u64) << 32 | i as u64,
            )),
            headers: Default::default(),
            delete_horizon: false,
        })
        .collect();
    let mut batch = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut batch,
        records.iter(),
        &RecordEncodeOptions {
            version: 2,
            compression: a.compression,
        },
    )?;
    let mut req = ProduceRequest::default();
    req.acks = a.acks;
    req.timeout_ms = 30_000;
    let mut topic = TopicProduceData::default();
    topic.name = TopicName(StrBytes::from_string(a.topic.clone()));
    let mut p = PartitionProduceData::default();
    p.index = partition;
    p.records = Some(batch.freeze());
    topic.partition_data.push(p);
    req.topic_data.push(topic);
    encode_frame(ApiKey::Produce, PRODUCE_V, &req)
}

struct Totals {
    records: AtomicU64,
    bytes: AtomicU64,
    errors: AtomicU64,
    /// The last error code a partition answered with (0: none), for the report.
    last_error: std::sync::atomic::AtomicI32,
}

/// Each partition's leader address (`host:port`), from Metadata requests to the bootstrap
/// address until every partition has a leader, within 30 s.
async fn leaders(a: &Args) -> Result<Vec<String>> {
    let mut stream = None;
    for address in a.bootstrap.split(',') {
        if let Ok(s) = TcpStream::connect(address).await {
            stream = Some(s);
            break;
        }
    }
    let stream =
        stream.with_context(|| format!("no bootstrap broker answers ({})", a.bootstrap))?;
    stream.set_nodelay(true)?;
    let (mut rd, mut wr) = stream.into_split();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut req = MetadataRequest::default();
    let mut topic = MetadataRequestTopic::default();
    topic.name = Some(TopicName(StrBytes::from_string(a.topic.clone())));
    req.topics = Some(vec![topic]);
    let frame = encode_frame(ApiKey::Metadata, METADATA_V, &req)?;
    loop {
        wr.write_all(&frame).await?;
        let mut response = read_frame(&mut rd).await?;
        ResponseHeader::decode(&mut response, MetadataResponse::header_version(METADATA_V))?;
        let resp = MetadataResponse::decode(&mut response, METADATA_V)?;
        let address = |id: i32| {
            resp.brokers
                .iter()
                .find(|b| b.node_id.0 == id)
                .map(|b| format!("{}:{}", b.host.as_str(), b.port))
        };
        let found: Option<Vec<String>> = (0..a.partitions)
            .map(|p| {
                let partition = resp
                    .topics
                    .iter()
                    .flat_map(|t| &t.partitions)
                    .find(|x| x.partition_index == p && x.error_code == 0)?;
                address(partition.leader_id.0)
            })
            .collect();
        if let Some(found) = found {
            return Ok(found);
        }
        if Instant::now() >= deadline {
            bail!(
                "topic {} has no leader for every partition after 30 s",
                a.topic
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Partitions grouped into connections: by leader, then round-robin over `--connections`
/// connections to each leader. Returns (address, the connection's partitions).
fn connections(a: &Args, leaders: &[String]) -> Vec<(String, Vec<i32>)> {
    let mut by_leader: Vec<(&String, Vec<i32>)> = Vec::new();
    for (p, leader) in (0..).zip(leaders) {
        match by_leader.iter_mut().find(|(l, _)| *l == leader) {
            Some((_, parts)) => parts.push(p),
            None => by_leader.push((leader, vec![p])),
        }
    }
    let mut conns = Vec::new();
    for (leader, parts) in by_leader {
        let n = a.connections.min(parts.len());
        for c in 0..n {
            let mine = parts.iter().skip(c).step_by(n).copied().collect();
            conns.push((leader.clone(), mine));
        }
    }
    conns
}

async fn produce_connection(
    a: Arc<Args>,
    address: String,
    frames: Vec<(BytesMut, u64, u64)>,
    budget: Arc<AtomicU64>,
    totals: Arc<Totals>,
) -> Result<Vec<u32>> {
    let stream = TcpStream::connect(&address).await?;
    stream.set_nodelay(true)?;
    let (mut rd, mut wr) = stream.into_split();
    let (tx, mut rx) = mpsc::channel::<Instant>(a.inflight);
    let acks = a.acks;
    let last_error = totals.clone();
    let reader = tokio::spawn(async move {
        let last_error = &last_error.last_error;
        let mut latencies = Vec::new();
        let mut errors = 0u64;
        while let Some(sent) = rx.recv().await {
            if acks == 0 {
                continue;
            }
            let mut frame = read_frame(&mut rd).await?;
            latencies.push(sent.elapsed().as_micros().min(u32::MAX as u128) as u32);
            ResponseHeader::decode(&mut frame, ProduceResponse::header_version(PRODUCE_V))?;
            let resp = ProduceResponse::decode(&mut frame, PRODUCE_V)?;
            for t in &resp.responses {
                for p in &t.partition_responses {
                    if p.error_code != 0 {
                        errors += 1;
                        last_error.store(p.error_code.into(), Ordering::Relaxed);
                    }
                }
            }
        }
        anyhow::Ok((latencies, errors))
    });
    let mut frames = frames;
    let mut correlation = 0i32;
    let mut next = 0usize;
    loop {
        let n = frames.len();
        let (frame, records, bytes) = &mut frames[next % n];
        next += 1;
        // Take this batch's records from the shared budget; stop when it is spent.
        let taken = budget.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
            (left > 0).then(|| left.saturating_sub(*records))
        });
        if taken.is_err() {
            break;
        }
        correlation = correlation.wrapping_add(1);
        set_correlation_id(frame, correlation);
        // Blocks while `inflight` requests are outstanding.
        if tx.send(Instant::now()).await.is_err() {
            break;
        }
        wr.write_all(frame).await?;
        totals.records.fetch_add(*records, Ordering::Relaxed);
        totals.bytes.fetch_add(*bytes, Ordering::Relaxed);
    }
    drop(tx);
    let (latencies, errors) = reader.await??;
    totals.errors.fetch_add(errors, Ordering::Relaxed);
    wr.shutdown().await.ok();
    Ok(latencies)
}

/// Sends one batch to each partition's leader until every one is accepted (a topic just
/// created is not writable on every broker at once), within 30 s; these batches are not
/// measured.
async fn wait_until_writable(a: &Args, leaders: &[String], per_batch: usize) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut correlation = 0i32;
    for (p, leader) in (0..a.partitions).zip(leaders) {
        let stream = TcpStream::connect(leader).await?;
        stream.set_nodelay(true)?;
        let (mut rd, mut wr) = stream.into_split();
        let mut frame = produce_frame(a, p, per_batch)?;
        loop {
            correlation += 1;
            set_correlation_id(&mut frame, correlation);
            wr.write_all(&frame).await?;
            if a.acks == 0 {
                break;
            }
            let mut response = read_frame(&mut rd).await?;
            ResponseHeader::decode(&mut response, ProduceResponse::header_version(PRODUCE_V))?;
            let resp = ProduceResponse::decode(&mut response, PRODUCE_V)?;
            let code = resp
                .responses
                .iter()
                .flat_map(|t| &t.partition_responses)
                .map(|p| p.error_code)
                .find(|c| *c != 0)
                .unwrap_or(0);
            if code == 0 {
                break;
            }
            if Instant::now() >= deadline {
                bail!(
                    "partition {p} still refuses produce requests (error code {code}) after 30 s"
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

async fn produce(a: Arc<Args>) -> Result<()> {
    let per_batch = (a.batch_bytes / a.record_size).max(1);
    let leaders = leaders(&a).await?;
    let mut per_conn = Vec::new();
    for (address, partitions) in connections(&a, &leaders) {
        let frames = partitions
            .into_iter()
            .map(|p| {
                let frame = produce_frame(&a, p, per_batch)?;
                Ok((frame, per_batch as u64, (per_batch * a.record_size) as u64))
            })
            .collect::<Result<Vec<_>>>()?;
        per_conn.push((address, frames));
    }
    let budget = Arc::new(AtomicU64::new(a.records));
    let totals = Arc::new(Totals {
        records: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        last_error: std::sync::atomic::AtomicI32::new(0),
    });
    wait_until_writable(&a, &leaders, per_batch).await?;
    let cpu0 = own_cpu_seconds();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (address, frames) in per_conn {
        tasks.push(tokio::spawn(produce_connection(
            a.clone(),
            address,
            frames,
            budget.clone(),
            totals.clone(),
        )));
    }
    let mut latencies = Vec::new();
    for t in tasks {
        latencies.extend(t.await??);
    }
    let secs = started.elapsed().as_secs_f64();
    latencies.sort_unstable();
    let pct = |q: f64| -> f64 {
        if latencies.is_empty() {
            return 0.0;
        }
        let i = ((latencies.len() as f64 * q) as usize).min(latencies.len() - 1);
        latencies[i] as f64 / 1000.0
    };
    let records = totals.records.load(Ordering::Relaxed);
    let bytes = totals.bytes.load(Ordering::Relaxed);
    println!(
        "produce records={records} bytes={bytes} seconds={secs:.3} records_per_s={:.0} mb_per_s={:.1} p50_ms={:.2} p99_ms={:.2} p999_ms={:.2} max_ms={:.2} errors={} loadgen_cpu_s={:.2}",
        records as f64 / secs,
        bytes as f64 / secs / 1e6,
        pct(0.50),
        pct(0.99),
        pct(0.999),
        pct(1.0),
        totals.errors.load(Ordering::Relaxed),
        own_cpu_seconds() - cpu0,
    );
    if totals.errors.load(Ordering::Relaxed) > 0 {
        bail!(
            "the broker refused some produce requests (last error code {})",
            totals.last_error.load(Ordering::Relaxed)
        );
    }
    Ok(())
}

/// Offsets and record counts from the batch headers of a fetched `records` field.
fn walk_batches(mut records: Bytes) -> (i64, u64, u64) {
    let (mut next, mut count, mut bytes) = (-1i64, 0u64, 0u64);
    while records.len() >= 61 {
        let base = i64::from_be_bytes(records[0..8].try_into().unwrap_or_default());
        let len = i32::from_be_bytes(records[8..12].try_into().unwrap_or_default());
        let total = 12 + len.max(0) as usize;
        if len < 49 || total > records.len() {
            break; // a partial batch at the end of the response
        }
        let last_delta = i32::from_be_bytes(records[23..27].try_into().unwrap_or_default());
        let n = i32::from_be_bytes(records[57..61].try_into().unwrap_or_default());
        next = base + i64::from(last_delta) + 1;
        count += n.max(0) as u64;
        bytes += total as u64;
        records.advance(total);
    }
    (next, count, bytes)
}

async fn consume_connection(
    a: Arc<Args>,
    address: String,
    partitions: Vec<i32>,
    remaining: Arc<AtomicU64>,
    totals: Arc<Totals>,
) -> Result<()> {
    let stream = TcpStream::connect(&address).await?;
    stream.set_nodelay(true)?;
    let mut offsets: Vec<i64> = vec![0; partitions.len()];
    let mut correlation = 0;
    let (mut rd, mut wr) = stream.into_split();
    let deadline = Instant::now() + Duration::from_secs(600);
    while remaining.load(Ordering::Relaxed) > 0 && Instant::now() < deadline {
        let mut req = FetchRequest::default();
        req.replica_id = kafka_protocol::messages::BrokerId(-1);
        req.max_wait_ms = 500;
        req.min_bytes = 1;
        req.max_bytes = a.fetch_max_bytes;
        req.session_epoch = -1;
        let mut topic = FetchTopic::default();
        topic.topic = TopicName(StrBytes::from_string(a.topic.clone()));
        for (i, &p) in partitions.iter().enumerate() {
            let mut fp = FetchPartition::default();
            fp.partition = p;
            fp.fetch_offset = offsets[i];
            fp.partition_max_bytes = a.partition_max_bytes;
            topic.partitions.push(fp);
        }
        req.topics.push(topic);
        let mut frame = encode_frame(ApiKey::Fetch, FETCH_V, &req)?;
        correlation += 1;
        set_correlation_id(&mut frame, correlation);
        wr.write_all(&frame).await?;
        let mut resp = read_frame(&mut rd).await?;
        ResponseHeader::decode(&mut resp, FetchResponse::header_version(FETCH_V))?;
        let resp = FetchResponse::decode(&mut resp, FETCH_V)?;
        if resp.error_code != 0 {
            bail!(
                "the broker refused a fetch (error code {})",
                resp.error_code
            );
        }
        for t in resp.responses {
            for p in t.partitions {
                if p.error_code != 0 {
                    // A broker that refuses a partition refuses it again at once: stop rather
                    // than spin until the deadline.
                    bail!(
                        "the broker refused a fetch of partition {} (error code {}) at offset {}",
                        p.partition_index,
                        p.error_code,
                        partitions
                            .iter()
                            .position(|&x| x == p.partition_index)
                            .map_or(-1, |i| offsets[i])
                    );
                }
                let Some(i) = partitions.iter().position(|&x| x == p.partition_index) else {
                    continue;
                };
                if let Some(records) = p.records {
                    let (next, count, bytes) = walk_batches(records);
                    if next > offsets[i] {
                        offsets[i] = next;
                    }
                    totals.records.fetch_add(count, Ordering::Relaxed);
                    totals.bytes.fetch_add(bytes, Ordering::Relaxed);
                    let _ = remaining.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| {
                        Some(r.saturating_sub(count))
                    });
                }
            }
        }
    }
    Ok(())
}

async fn consume(a: Arc<Args>) -> Result<()> {
    let remaining = Arc::new(AtomicU64::new(a.records));
    let totals = Arc::new(Totals {
        records: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        last_error: std::sync::atomic::AtomicI32::new(0),
    });
    let per_conn = connections(&a, &leaders(&a).await?);
    let cpu0 = own_cpu_seconds();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (address, parts) in per_conn {
        tasks.push(tokio::spawn(consume_connection(
            a.clone(),
            address,
            parts,
            remaining.clone(),
            totals.clone(),
        )));
    }
    for t in tasks {
        t.await??;
    }
    let secs = started.elapsed().as_secs_f64();
    let records = totals.records.load(Ordering::Relaxed);
    let bytes = totals.bytes.load(Ordering::Relaxed);
    println!(
        "consume records={records} bytes={bytes} seconds={secs:.3} records_per_s={:.0} mb_per_s={:.1} errors={} loadgen_cpu_s={:.2}",
        records as f64 / secs,
        bytes as f64 / secs / 1e6,
        totals.errors.load(Ordering::Relaxed),
        own_cpu_seconds() - cpu0,
    );
    if records < a.records {
        bail!("consumed {records} of {} records", a.records);
    }
    Ok(())
}

/// The floor: `--bytes` over loopback into a file, by `--connections` thread pairs.
fn floor(a: &Args) -> Result<()> {
    use std::io::{Read, Write};
    const CHUNK: usize = 1 << 20;
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&a.file)
        .with_context(|| format!("opening {}", a.file))?;
    file.set_len(0)?;
    let file = Arc::new(std::sync::Mutex::new(file));
    let per_connection = a.bytes.div_ceil(a.connections as u64);
    // Pseudo-random bytes, so nothing along the way can shortcut zeros.
    let mut payload = vec![0u8; CHUNK];
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for b in payload.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    let payload = Arc::new(payload);
    let cpu0 = own_cpu_seconds();
    let started = Instant::now();
    std::thread::scope(|scope| -> Result<()> {
        let mut threads = Vec::new();
        for _ in 0..a.connections {
            let payload = payload.clone();
            threads.push(scope.spawn(move || -> Result<()> {
                let mut out = std::net::TcpStream::connect(addr)?;
                let mut left = per_connection;
                while left > 0 {
                    let n = left.min(CHUNK as u64) as usize;
                    out.write_all(&payload[..n])?;
                    left -= n as u64;
                }
                Ok(())
            }));
            let (mut inbound, _) = listener.accept()?;
            let file = file.clone();
            threads.push(scope.spawn(move || -> Result<()> {
                let mut buf = vec![0u8; CHUNK];
                loop {
                    let n = inbound.read(&mut buf)?;
                    if n == 0 {
                        return Ok(());
                    }
                    file.lock()
                        .map_err(|_| anyhow::anyhow!("a receiver panicked"))?
                        .write_all(&buf[..n])?;
                }
            }));
        }
        for t in threads {
            t.join()
                .map_err(|_| anyhow::anyhow!("a floor thread panicked"))??;
        }
        Ok(())
    })?;
    let secs = started.elapsed().as_secs_f64();
    let cpu = own_cpu_seconds() - cpu0;
    let written = std::fs::metadata(&a.file)?.len();
    std::fs::remove_file(&a.file)?;
    if written != per_connection * a.connections as u64 {
        bail!(
            "the file holds {written} bytes, not the {} sent",
            per_connection * a.connections as u64
        );
    }
    let gib = written as f64 / f64::from(1u32 << 30);
    println!(
        "floor bytes={written} seconds={secs:.3} mb_per_s={:.1} cpu_s={cpu:.2} cpu_s_per_gib={:.2}",
        written as f64 / secs / 1e6,
        cpu / gib,
    );
    Ok(())
}

/// This process's user + system CPU seconds (from /proc/self/stat; 100 ticks per second).
fn own_cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // After the command: state is field 0, utime 11, stime 12.
    (ticks(11) + ticks(12)) / 100.0
}

fn main() {
    let args = match parse_args() {
        Ok(a) => Arc::new(a),
        Err(e) => {
            eprintln!("strata-loadgen: {e:#}");
            std::process::exit(2);
        }
    };
    if args.mode == "floor" {
        if let Err(e) = floor(&args) {
            eprintln!("strata-loadgen: {e:#}");
            std::process::exit(1);
        }
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let result = runtime.block_on(async {
        match args.mode.as_str() {
            "produce" => produce(args.clone()).await,
            "consume" => consume(args.clone()).await,
            other => Err(anyhow::anyhow!(
                "unknown mode {other} (produce, consume, floor)"
            )),
        }
    });
    if let Err(e) = result {
        eprintln!("strata-loadgen: {e:#}");
        std::process::exit(1);
    }
}
