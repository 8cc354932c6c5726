//! The fuzz targets. Each takes any bytes and must return; `true` when the input decoded (so a
//! smoke can report how much of its input got past the first check).

use std::path::Path;

use bytes::Bytes;
use kafka_protocol::records::RecordBatchDecoder;
use strata::config::TopicConfig;
use strata::coordinator::offsets_topic;
use strata::coordinator::txn::transaction_log;
use strata::log::batch::{BatchHeader, BatchIter};
use strata::log::{LoadOptions, Log};
use strata::share;

use crate::seeds;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// A request frame from a client, before authentication: `decode_request`.
    Request,
    /// A RecordBatch as produce receives it: header, CRC, codec, record walk (the CRC is fixed
    /// up after mutation when the first byte is odd, so mutations reach the records).
    RecordBatch,
    /// A partition directory (segments, indexes, snapshots, checkpoints) opened by recovery,
    /// then read end to end.
    PartitionDir,
    /// `__consumer_offsets`, `__transaction_state` and `__share_group_state` keys, values and
    /// batches as replay decodes them (a share snapshot also restored into a share-partition,
    /// a consumer group record into a consumer group).
    CoordinatorRecords,
    /// The tiering manifest read back from the bucket.
    Manifest,
    /// Per-directory offset checkpoints and a partition's `.txnindex`.
    Checkpoints,
    /// The metadata quorum's Raft log directory (segments of CRC-framed entries and
    /// `raft-meta.json`), opened as at start-up. Frames get valid lengths and CRCs when the
    /// first byte is odd, so mutations reach the entry decoder.
    MetadataLog,
    /// An Iceberg table's files as the export's commit reads them from the bucket: a manifest
    /// list (Avro) when the first byte is even, the table metadata (JSON, with the snapshot
    /// summary's offsets and the schema's columns) when it is odd.
    IcebergMetadata,
    /// A remote segment downloaded for rehydration (its `.log`, and a `.txnindex` when the
    /// first byte is odd), checked, indexed and put in front of a real log, then read.
    RehydratedSegment,
    /// Frames read by the metadata quorum's RPC listener (Raft messages, forwarded proposals,
    /// learner joins, heartbeats and voter changes), decoded one after another.
    MetadataRpc,
    /// The remote read cache's disk tier directory (chunk files, possibly damaged by a
    /// crash), opened as at start-up, then every chunk it indexed read as a fetch would.
    RemoteCacheDir,
    /// The bucket's cluster catalog as a restore reads it, then every topic's replicas placed
    /// on three brokers as the restore plans them.
    Catalog,
}

pub const ALL: [Target; 12] = [
    Target::Request,
    Target::RecordBatch,
    Target::PartitionDir,
    Target::CoordinatorRecords,
    Target::Manifest,
    Target::Checkpoints,
    Target::MetadataLog,
    Target::IcebergMetadata,
    Target::RehydratedSegment,
    Target::MetadataRpc,
    Target::RemoteCacheDir,
    Target::Catalog,
];

impl Target {
    pub fn name(self) -> &'static str {
        match self {
            Target::Request => "request",
            Target::RecordBatch => "record_batch",
            Target::PartitionDir => "partition_dir",
            Target::CoordinatorRecords => "coordinator_records",
            Target::Manifest => "manifest",
            Target::Checkpoints => "checkpoints",
            Target::MetadataLog => "metadata_log",
            Target::IcebergMetadata => "iceberg_metadata",
            Target::RehydratedSegment => "rehydrated_segment",
            Target::MetadataRpc => "metadata_rpc",
            Target::RemoteCacheDir => "remote_cache_dir",
            Target::Catalog => "catalog",
        }
    }

    pub fn from_name(name: &str) -> Option<Target> {
        ALL.into_iter().find(|t| t.name() == name)
    }

    /// The longest input worth generating.
    pub fn max_len(self) -> usize {
        match self {
            Target::PartitionDir | Target::MetadataLog => 256 << 10,
            _ => 64 << 10,
        }
    }

    pub fn seeds(self) -> Vec<Vec<u8>> {
        match self {
            Target::Request => seeds::request_frames(),
            Target::RecordBatch => seeds::batches()
                .into_iter()
                .map(|b| [&[1u8][..], &b].concat())
                .collect(),
            Target::PartitionDir => vec![partition_dir_seed()],
            Target::CoordinatorRecords => seeds::coordinator_records(),
            Target::Manifest => seeds::manifests(),
            Target::Checkpoints => vec![
                b"0\n2\nt 0 100\nt 1 7\n".to_vec(),
                [&[1u8][..], &[0u8; 34], &[0u8; 34]].concat(),
            ],
            Target::MetadataLog => vec![metadata_log_seed()],
            Target::IcebergMetadata => seeds::iceberg_metadata(),
            Target::RehydratedSegment => seeds::batches()
                .into_iter()
                .map(|b| rehydrated_segment_seed(&b))
                .collect(),
            Target::MetadataRpc => metadata_rpc_seeds(),
            Target::RemoteCacheDir => vec![remote_cache_dir_seed()],
            Target::Catalog => seeds::catalogs(),
        }
    }

    pub fn run(self, data: &[u8]) -> bool {
        match self {
            Target::Request => request(data),
            Target::RecordBatch => record_batch(data),
            Target::PartitionDir => partition_dir(data),
            Target::CoordinatorRecords => coordinator_records(data),
            Target::Manifest => strata_tiering::manifest::PartitionManifest::decode(data).is_ok(),
            Target::Checkpoints => checkpoints(data),
            Target::MetadataLog => metadata_log(data),
            Target::IcebergMetadata => iceberg_metadata(data),
            Target::RehydratedSegment => rehydrated_segment(data),
            Target::MetadataRpc => metadata_rpc(data),
            Target::RemoteCacheDir => remote_cache_dir(data),
            Target::Catalog => catalog(data),
        }
    }
}

pub fn catalog(data: &[u8]) -> bool {
    use strata_metadata::ids::{BrokerId, Uuid128};
    use strata_metadata::placement::{place_replicas, BrokerCandidate, PlacementSeed};
    use strata_tiering::catalog::{Catalog, MAX_CATALOG_PARTITIONS};
    let Ok(c) = Catalog::decode(data) else {
        return false;
    };
    let brokers: Vec<BrokerCandidate> = (1..=3)
        .map(|id| BrokerCandidate {
            id: BrokerId(id),
            rack: None,
        })
        .collect();
    let mut planned = 0u64;
    for (name, t) in &c.topics {
        // Each name becomes a directory `<name>-<partition>` under a log directory.
        let dir = std::path::Path::new("/log").join(format!("{name}-0"));
        assert_eq!(dir.parent(), Some(std::path::Path::new("/log")), "{name:?}");
        let id = Uuid128::from_bytes(*t.topic_id.as_bytes());
        let rf = u16::try_from(t.replication_factor).expect("decode checks the factor");
        let count = u32::try_from(t.partitions).expect("decode checks the count");
        if let Ok(placed) = place_replicas(&brokers, count, rf, 0, PlacementSeed::from_topic_id(id))
        {
            assert_eq!(placed.len(), count as usize);
        }
        planned += u64::from(count);
    }
    assert!(planned <= MAX_CATALOG_PARTITIONS);
    true
}

pub fn iceberg_metadata(data: &[u8]) -> bool {
    use strata_tiering::export::iceberg;
    let Some((&kind, rest)) = data.split_first() else {
        return false;
    };
    if kind & 1 == 0 {
        return iceberg::decode_manifest_list(rest).is_ok();
    }
    let Ok((table, _)) = iceberg::decode_metadata(rest) else {
        return false;
    };
    let value_schema = strata_tiering::export::ValueSchema::from_json(
        br#"{"fields":[{"name":"id","type":"long"},{"name":"at","type":"timestamp_ms"}]}"#,
    )
    .ok()
    .map(std::sync::Arc::new);
    let options = strata_tiering::export::ConvertOptions {
        value_schema,
        ..Default::default()
    };
    let _ = iceberg::columns(&options, Some(&table));
    true
}

pub fn request(data: &[u8]) -> bool {
    strata::protocol::decode_request(Bytes::copy_from_slice(data), &strata::api::API_TABLE).is_ok()
}

pub fn record_batch(data: &[u8]) -> bool {
    let Some((&flags, batch)) = data.split_first() else {
        return false;
    };
    let mut batch = batch.to_vec();
    if flags & 1 == 1 && batch.len() >= 21 {
        // RecordBatch v2: the CRC at bytes 17..21 covers everything from the attributes on.
        let crc = crc32c::crc32c(&batch[21..]);
        batch[17..21].copy_from_slice(&crc.to_be_bytes());
    }
    let Ok(header) = BatchHeader::parse(&batch) else {
        return false;
    };
    let valid = header.validate(&batch).is_ok();
    // The produce path's validator (Kafka's LogValidator rules), under a bound well below the
    // fuzz allocator's, on both a plain and a compacted topic.
    let mut scratch = strata_records::Scratch::new();
    for compacted_topic in [false, true] {
        let opts = strata_records::ValidationOptions {
            topic_partition: "fuzz-0",
            origin_client: true,
            compacted_topic,
            log_append_time: false,
            now_ms: NOW_MS,
            timestamp_before_max_ms: i64::MAX,
            timestamp_after_max_ms: i64::MAX,
            max_decompressed_message_bytes: 1 << 20,
            max_decompressed_batch_bytes: DECOMPRESSED_BOUND,
        };
        let _ = strata_records::validate(&batch, &opts, &mut scratch);
    }
    for item in BatchIter::new(&batch) {
        if item.is_err() {
            break;
        }
    }
    // The cleaner's walk: decompress and split records.
    if let Ok(h) = strata_compaction::batch::BatchHeader::parse(&batch) {
        let bytes = Bytes::from(batch.clone());
        let _ = strata_compaction::batch::records(&bytes, &h, DECOMPRESSED_BOUND);
    }
    let _ = strata_tiering::export::convert::BatchHeader::parse(&batch);
    valid
}

/// Files of a partition directory, as `[name length: u8][name][data length: u32][data]...`.
pub fn encode_dir(files: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, data) in files {
        out.push(name.len() as u8);
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        out.extend_from_slice(data);
    }
    out
}

fn decode_dir(mut data: &[u8]) -> Vec<(String, &[u8])> {
    let mut files = Vec::new();
    while let Some((&n, rest)) = data.split_first() {
        let n = n as usize;
        if rest.len() < n + 4 {
            break;
        }
        let name = String::from_utf8_lossy(&rest[..n]).to_string();
        let len = u32::from_be_bytes([rest[n], rest[n + 1], rest[n + 2], rest[n + 3]]) as usize;
        let body = &rest[n + 4..];
        let len = len.min(body.len());
        files.push((name, &body[..len]));
        data = &body[len..];
    }
    files
}

/// A name a partition directory may hold (no separators, no hidden or parent entries).
fn plain_file_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_')
}

fn scratch_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(d) = tempfile::tempdir_in(shm) {
            return d;
        }
    }
    tempfile::tempdir().expect("a temporary directory")
}

const NOW_MS: i64 = 1_800_000_000_000;

/// The decompressed-size bound the record targets run under (the broker's default is 64 MiB,
/// the fuzz allocator's limit).
const DECOMPRESSED_BOUND: u64 = 16 << 20;

pub fn partition_dir(data: &[u8]) -> bool {
    let Some((&flags, rest)) = data.split_first() else {
        return false;
    };
    let tmp = scratch_dir();
    let dir = tmp.path().join("fuzz-0");
    if std::fs::create_dir_all(&dir).is_err() {
        return false;
    }
    for (name, body) in decode_dir(rest) {
        if plain_file_name(&name) {
            let _ = std::fs::write(dir.join(name), body);
        }
    }
    let opts = LoadOptions {
        clean_shutdown: flags & 1 == 1,
        recovery_point: (flags & 2 == 2).then_some(0),
        log_start_offset: (flags & 4 == 4).then_some(i64::from(flags >> 3)),
        now_ms: NOW_MS,
    };
    let Ok(mut log) = Log::open(&dir, TopicConfig::default(), opts) else {
        return false;
    };
    read_everything(&log);
    let _ = log.close(NOW_MS);
    true
}

/// Two chunk files as the disk tier writes them, in [`encode_dir`]'s form.
pub fn remote_cache_dir_seed() -> Vec<u8> {
    use strata_tiering::disk_tier::DiskTier;
    let tmp = scratch_dir();
    let tier = DiskTier::open(tmp.path(), 1 << 20).expect("a cache dir");
    tier.put("t/0/00000000000000000000-0.bundle@0", &[7u8; 300])
        .expect("a chunk file");
    tier.put("t/0/00000000000000000000-0.bundle@1", b"tail")
        .expect("a chunk file");
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(tmp.path())
        .expect("the cache dir")
        .filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name().to_string_lossy().into_owned();
            Some((name, std::fs::read(e.path()).ok()?))
        })
        .collect();
    files.sort();
    encode_dir(&files)
}

/// Opens a disk tier over the files and reads every chunk it indexed, as fetches would: a
/// damaged file is refused (and deleted), never served.
pub fn remote_cache_dir(data: &[u8]) -> bool {
    use strata_tiering::disk_tier::DiskTier;
    let tmp = scratch_dir();
    for (name, body) in decode_dir(data) {
        if plain_file_name(&name) {
            let _ = std::fs::write(tmp.path().join(name), body);
        }
    }
    let Ok(tier) = DiskTier::open(tmp.path(), 1 << 20) else {
        return false;
    };
    let mut served = false;
    for (key, len) in tier.entries() {
        if let Some(range) = tier.get(&key, len) {
            let bytes = range.read().expect("a served chunk is readable");
            assert_eq!(bytes.len() as u64, len);
            served = true;
        }
    }
    served
}

/// Input of [`rehydrated_segment`]: flags (bit 0: a `.txnindex` follows the log, after a u16
/// length), the segment's next offset (u16, base 0), then the `.log` bytes.
pub fn rehydrated_segment_seed(batch: &[u8]) -> Vec<u8> {
    let next = BatchHeader::parse(batch)
        .map(|h| h.last_offset() + 1)
        .unwrap_or(1) as u16;
    [&[0u8][..], &next.to_be_bytes(), batch].concat()
}

/// A rehydration of the bytes as a remote segment's: stage (checks, indexes), install in front
/// of a log whose first segment starts at the claimed next offset, and read it all back.
pub fn rehydrated_segment(data: &[u8]) -> bool {
    use strata::log::rehydrate::stage_rehydrated;
    use strata_tiering::manifest::{Part, RemoteSegment};
    use strata_tiering::rehydrate::RehydrateTarget;
    let [flags, n0, n1, rest @ ..] = data else {
        return false;
    };
    let next = i64::from(u16::from_be_bytes([*n0, *n1])).max(1);
    let (log_bytes, txn) = match (flags & 1 == 1, rest) {
        (true, [l0, l1, tail @ ..]) => {
            let n = usize::from(u16::from_be_bytes([*l0, *l1])).min(tail.len());
            (&tail[n..], Some(&tail[..n]))
        }
        _ => (rest, None),
    };
    let tmp = scratch_dir();
    let dir = tmp.path().join("fuzz-0");
    let staging = dir.join("00000000000000000000.rehydrate.tmp");
    if std::fs::create_dir_all(&dir).is_err()
        || std::fs::write(dir.join(format!("{next:020}.log")), b"").is_err()
    {
        return false;
    }
    let part = |len: usize| Part {
        start: 0,
        end: len as u64,
    };
    let target = RehydrateTarget {
        segment: RemoteSegment {
            key: "fuzz".into(),
            base_offset: 0,
            next_offset: next,
            max_timestamp: -1,
            leader_epoch: 0,
            epochs: Vec::new(),
            log: part(log_bytes.len()),
            offset_index: part(0),
            time_index: part(0),
            producer_snapshot: None,
            leader_epoch_checkpoint: None,
            txn_index: txn.map(|t| part(t.len())),
            uploaded_at_ms: NOW_MS,
        },
        log_tmp: staging.join("00000000000000000000.log"),
        txn_index_tmp: staging.join("00000000000000000000.txnindex"),
        staging: staging.clone(),
    };
    let mut overrides = std::collections::BTreeMap::new();
    overrides.insert("remote.storage.enable".to_string(), "true".to_string());
    let config = TopicConfig::resolve(&overrides, &Default::default());
    let opts = LoadOptions {
        clean_shutdown: true,
        recovery_point: None,
        log_start_offset: Some(0),
        now_ms: NOW_MS,
    };
    // The log is open before the download starts (opening removes `.tmp` staging).
    let Ok(mut log) = Log::open(&dir, config, opts) else {
        return false;
    };
    if std::fs::create_dir_all(&staging).is_err()
        || std::fs::write(&target.log_tmp, log_bytes).is_err()
        || txn.is_some_and(|t| std::fs::write(&target.txn_index_tmp, t).is_err())
    {
        return false;
    }
    let Ok(staged) = stage_rehydrated(&target, log.segment_limits()) else {
        return false;
    };
    let installed = log.install_rehydrated(&target, staged).unwrap_or(false);
    read_everything(&log);
    let _ = log.close(NOW_MS);
    installed
}

/// Reads the whole log as a consumer would, then the timestamp and transaction lookups.
fn read_everything(log: &Log) {
    let end = log.log_end_offset();
    let mut offset = log.log_start_offset();
    for _ in 0..10_000 {
        if offset >= end {
            break;
        }
        let Ok(Some(slice)) = log.read(offset, 1 << 20, end, true) else {
            break;
        };
        let Ok(bytes) = slice.read() else {
            break;
        };
        let mut next = offset;
        for item in BatchIter::new(&bytes) {
            match item {
                Ok((_, h, _)) => next = next.max(h.last_offset() + 1),
                Err(_) => break,
            }
        }
        if next <= offset {
            break;
        }
        offset = next;
    }
    let _ = log.offset_for_timestamp(0);
    let _ = log.offset_for_timestamp(NOW_MS);
    let _ = log.max_timestamp_offset();
    let _ = log.aborted_transactions(log.log_start_offset(), end);
    let _ = log.producer_states();
}

/// A partition directory written by the log itself: two segments with their indexes, a
/// producer snapshot and the leader-epoch checkpoint, as `partition_dir` reads its input.
pub fn partition_dir_seed() -> Vec<u8> {
    let tmp = scratch_dir();
    let dir = tmp.path().join("seed-0");
    let opts = LoadOptions {
        clean_shutdown: false,
        recovery_point: None,
        log_start_offset: None,
        now_ms: NOW_MS,
    };
    let mut log = Log::open(&dir, TopicConfig::default(), opts).expect("open a fresh log");
    for (i, b) in seeds::batches().iter().enumerate() {
        log.append_as_leader(b, 1, NOW_MS)
            .expect("append a seed batch");
        if i == 2 {
            log.roll(NOW_MS).expect("roll");
        }
    }
    log.close(NOW_MS).expect("close the seed log");
    let mut files = Vec::new();
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if let Ok(body) = std::fs::read(e.path()) {
                // Index files are preallocated sparse; keep their written prefix only.
                let body = if name.ends_with("index") {
                    trim_zeros(body)
                } else {
                    body
                };
                files.push((name, body));
            }
        }
    }
    files.sort();
    [&[0u8][..], &encode_dir(&files)].concat()
}

fn trim_zeros(mut body: Vec<u8>) -> Vec<u8> {
    while body.last() == Some(&0) {
        body.pop();
    }
    body
}

pub fn coordinator_records(data: &[u8]) -> bool {
    let Some((&selector, rest)) = data.split_first() else {
        return false;
    };
    let b = Bytes::copy_from_slice(rest);
    match selector % 11 {
        8 => consumer_group_record(&b),
        // A classic member's subscription and assignment (JoinGroup and SyncGroup bytes, and
        // a classic group's record when the group is converted).
        9 => strata::coordinator::consumer_group::classic::decode_subscription(&b).is_some(),
        10 => strata::coordinator::consumer_group::classic::decode_assignment(&b).is_some(),
        6 => share::state_record::decode_key(&b).is_ok(),
        7 => match share::state_record::decode_value(&b) {
            // A snapshot restores into a share-partition whatever its ranges say.
            Ok(s) => {
                share::partition::SharePartition::from_snapshot(&s).in_flight()
                    <= share::partition::MAX_SLOTS
            }
            Err(_) => false,
        },
        0 => offsets_topic::decode_key(b).is_ok(),
        1 => offsets_topic::decode_offset(b).is_ok(),
        2 => offsets_topic::decode_group(b).is_ok(),
        3 => transaction_log::decode_key(b).is_ok(),
        4 => transaction_log::decode_value("fuzz", b).is_ok(),
        _ => {
            let mut b = b;
            let Ok(set) = RecordBatchDecoder::decode(&mut b) else {
                return false;
            };
            for r in set.records {
                if let Some(k) = r.key {
                    let _ = offsets_topic::decode_key(k.clone());
                    let _ = transaction_log::decode_key(k);
                }
                if let Some(v) = r.value {
                    let _ = offsets_topic::decode_offset(v.clone());
                    let _ = offsets_topic::decode_group(v.clone());
                    let _ = transaction_log::decode_value("fuzz", v);
                }
            }
            true
        }
    }
}

/// A KIP-848 consumer group record: one byte of key length, the key, the value; restored
/// into a group as a load would.
fn consumer_group_record(b: &Bytes) -> bool {
    use strata::coordinator::consumer_group::{records, ConsumerState};
    let Some((&len, rest)) = b.split_first() else {
        return false;
    };
    let (key, value) = rest.split_at((len as usize).min(rest.len()));
    let key = Bytes::copy_from_slice(key);
    let Ok(offsets_topic::RecordKey::Consumer { group, record }) =
        offsets_topic::decode_key(key.clone())
    else {
        return false;
    };
    let ok = records::decode_value(&record, value).is_ok();
    let image = records::Image::from([(key, Bytes::copy_from_slice(value))]);
    let state = ConsumerState::restore(
        &group,
        image,
        std::time::Duration::from_secs(45),
        std::time::Instant::now(),
    );
    ok && state.members.len() <= 1
}

pub fn checkpoints(data: &[u8]) -> bool {
    let Some((&selector, rest)) = data.split_first() else {
        return false;
    };
    match selector % 2 {
        0 => {
            let tmp = scratch_dir();
            let path = tmp.path().join("recovery-point-offset-checkpoint");
            if std::fs::write(&path, rest).is_err() {
                return false;
            }
            strata::log::checkpoint::read_offsets(&path).is_ok()
        }
        _ => strata::log::txn_index::parse(rest).is_ok(),
    }
}

/// Raft log entries as openraft serializes them, in the metadata log's files: a
/// `raft-meta.json` and one segment whose entries are `[u16 length][JSON]` (framed by the
/// target when the first byte is odd).
pub fn metadata_log_seed() -> Vec<u8> {
    let entry = |index: u64, payload: &str| {
        format!(
            r#"{{"log_id":{{"leader_id":{{"term":1,"node_id":1}},"index":{index}}},"payload":{payload}}}"#
        )
    };
    let entries = [
        entry(1, r#""Blank""#),
        entry(
            2,
            r#"{"Membership":{"configs":[[1,2,3]],"nodes":{"1":{"addr":"127.0.0.1:1"},"2":{"addr":"127.0.0.1:2","directory_id":"02020202020202020202020202020202"},"3":{"addr":"127.0.0.1:3"}}}}"#,
        ),
        entry(3, r#""Blank""#),
    ];
    let mut segment = Vec::new();
    for e in &entries {
        segment.extend_from_slice(&(e.len() as u16).to_be_bytes());
        segment.extend_from_slice(e.as_bytes());
    }
    let meta = br#"{"vote":{"leader_id":{"term":1,"node_id":1},"committed":true},"committed":{"leader_id":{"term":1,"node_id":1},"index":2},"last_purged":null}"#;
    let files = vec![
        ("raft-meta.json".to_string(), meta.to_vec()),
        ("00000000000000000001.log".to_string(), segment),
    ];
    [&[1u8][..], &encode_dir(&files)].concat()
}

/// Frames `[u16 length][payload]...` as the metadata log does: `[u32 LE length][u32 LE
/// crc32c][payload]`.
fn frame_entries(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while data.len() >= 2 {
        let n = (u16::from_be_bytes([data[0], data[1]]) as usize).min(data.len() - 2);
        let payload = &data[2..2 + n];
        out.extend_from_slice(&(n as u32).to_le_bytes());
        out.extend_from_slice(&crc32c::crc32c(payload).to_le_bytes());
        out.extend_from_slice(payload);
        data = &data[2 + n..];
    }
    out
}

/// The runtime the metadata targets run their async decoders on.
fn runtime() -> &'static tokio::runtime::Runtime {
    use std::sync::OnceLock;
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime")
    })
}

/// One frame of each leader-only request a node forwards.
pub fn metadata_rpc_seeds() -> Vec<Vec<u8>> {
    use strata_metadata::ids::{BrokerEpoch, BrokerId, Uuid128};
    use strata_metadata::network::{encode_request, RpcRequest};
    let requests = [
        RpcRequest::AddLearner {
            node_id: 4,
            addr: "127.0.0.1:9093".into(),
        },
        RpcRequest::Heartbeat {
            id: BrokerId(2),
            broker_epoch: BrokerEpoch(7),
        },
        RpcRequest::AddVoter {
            node_id: 4,
            directory_id: Uuid128([4; 16]),
            endpoints: vec!["127.0.0.1:9093".into()],
            timeout_ms: 30_000,
        },
        RpcRequest::RemoveVoter {
            node_id: 1,
            directory_id: Uuid128([1; 16]),
            timeout_ms: 30_000,
        },
        RpcRequest::SetDirectory {
            node_id: 2,
            directory_id: Uuid128([2; 16]),
        },
        RpcRequest::Propose(strata_metadata::Command::SetClusterId {
            cluster_id: "fuzz".into(),
        }),
    ];
    let frames: Vec<Vec<u8>> = requests
        .iter()
        .map(|r| runtime().block_on(encode_request(r)))
        .collect();
    let mut seeds = frames.clone();
    seeds.push(frames.concat());
    seeds
}

pub fn metadata_rpc(data: &[u8]) -> bool {
    runtime().block_on(strata_metadata::network::decode_requests(data)) > 0
}

pub fn metadata_log(data: &[u8]) -> bool {
    let Some((&flags, rest)) = data.split_first() else {
        return false;
    };
    let tmp = scratch_dir();
    let dir = tmp.path().join("metadata");
    if std::fs::create_dir_all(&dir).is_err() {
        return false;
    }
    for (name, body) in decode_dir(rest) {
        if !plain_file_name(&name) {
            continue;
        }
        let body = if flags & 1 == 1 && name.ends_with(".log") {
            frame_entries(body)
        } else {
            body.to_vec()
        };
        let _ = std::fs::write(dir.join(name), body);
    }
    runtime().block_on(async {
        strata_metadata::store::LogStore::open(&dir, Default::default())
            .await
            .is_ok()
    })
}
