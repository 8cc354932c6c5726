//! Valid inputs the mutations start from: a request frame for every API key and version the
//! broker serves, record batches in every codec, a partition directory written by the log
//! itself, coordinator records and a manifest.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ApiKey, ProduceRequest, RequestHeader, RequestKind, TopicName};
use kafka_protocol::protocol::{Encodable, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

/// A request frame (without the size prefix, as `decode_request` takes it).
pub fn frame(
    key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &RequestKind,
) -> Option<Vec<u8>> {
    let mut header = RequestHeader::default();
    header.request_api_key = key as i16;
    header.request_api_version = version;
    header.correlation_id = correlation_id;
    header.client_id = Some(StrBytes::from_static_str("fuzz"));
    let mut buf = BytesMut::new();
    header
        .encode(&mut buf, key.request_header_version(version))
        .ok()?;
    body.encode(&mut buf, version).ok()?;
    Some(buf.to_vec())
}

/// One request per (API key, version) the broker serves: the body all-zero bytes decode to
/// (empty arrays, empty strings), encoded back; plus produce requests that carry records.
pub fn request_frames() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for &key in strata::api::API_TABLE.keys {
        let Some((min, max)) = (strata::api::API_TABLE.versions)(key) else {
            continue;
        };
        for version in min..=max {
            let mut zeros = Bytes::from(vec![0u8; 256]);
            if let Ok(body) = RequestKind::decode(key, &mut zeros, version) {
                if let Some(f) = frame(key, version, version as i32, &body) {
                    out.push(f);
                }
            }
        }
    }
    for (version, batch) in [(3, batch(Compression::None)), (9, batch(Compression::Lz4))] {
        let mut req = ProduceRequest::default();
        req.acks = 1;
        req.timeout_ms = 1000;
        let mut topic = TopicProduceData::default();
        topic.name = TopicName(StrBytes::from_static_str("fuzz"));
        let mut p = PartitionProduceData::default();
        p.records = Some(Bytes::from(batch));
        topic.partition_data.push(p);
        req.topic_data.push(topic);
        if let Some(f) = frame(ApiKey::Produce, version, 1, &RequestKind::Produce(req)) {
            out.push(f);
        }
    }
    out
}

/// Records with keys, values and headers, as a producer would send them.
fn records(n: i64) -> Vec<Record> {
    (0..n)
        .map(|i| Record {
            transactional: false,
            control: false,
            partition_leader_epoch: 0,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i,
            // kafka-protocol's encoder keeps records in one batch while offset - sequence holds.
            sequence: i as i32,
            timestamp: 1_700_000_000_000 + i,
            delete_horizon: false,
            key: Some(Bytes::from(format!("key-{i}"))),
            value: Some(Bytes::from(format!("value-{i}-{}", "x".repeat(i as usize)))),
            headers: [(
                StrBytes::from_static_str("h"),
                Some(Bytes::from_static(b"header value")),
            )]
            .into_iter()
            .collect(),
        })
        .collect()
}

/// One RecordBatch v2 of five records in `compression`.
pub fn batch(compression: Compression) -> Vec<u8> {
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression,
    };
    RecordBatchEncoder::encode(&mut buf, &records(5), &options).expect("encode a batch");
    buf.to_vec()
}

pub fn batches() -> Vec<Vec<u8>> {
    [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ]
    .into_iter()
    .map(batch)
    .collect()
}

/// Coordinator records: `[selector][key or value bytes]`, as `targets::coordinator_records`
/// reads them.
pub fn coordinator_records() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    // __consumer_offsets offset key v1: group, topic, partition.
    let mut k = vec![0u8];
    k.put_i16(1);
    put_str(&mut k, "group");
    put_str(&mut k, "topic");
    k.put_i32(3);
    out.push(k);
    // Offset value v3: offset, leader epoch, metadata, commit timestamp.
    let mut v = vec![1u8];
    v.put_i16(3);
    v.put_i64(42);
    v.put_i32(7);
    put_str(&mut v, "meta");
    v.put_i64(1_700_000_000_000);
    out.push(v);
    // Group metadata value v3 with one member.
    let mut g = vec![2u8];
    g.put_i16(3);
    put_str(&mut g, "consumer");
    g.put_i32(5);
    put_str(&mut g, "range");
    put_str(&mut g, "member-1");
    g.put_i64(1_700_000_000_000);
    g.put_i32(1);
    put_str(&mut g, "member-1");
    put_str(&mut g, "client");
    put_str(&mut g, "/127.0.0.1");
    g.put_i32(30_000);
    g.put_i32(10_000);
    g.put_i32(3);
    g.put_slice(b"sub");
    g.put_i32(3);
    g.put_slice(b"asg");
    out.push(g);
    // A KIP-848 consumer group's member metadata and current assignment records.
    {
        use strata::coordinator::consumer_group::classic;
        use strata::coordinator::consumer_group::records::{
            self, CurrentAssignment, MemberMetadata, Value,
        };
        for version in [0, 1, 3] {
            let mut seed = vec![9u8];
            seed.extend_from_slice(&classic::encode_subscription(
                &["a", "b"],
                &[("a", &[0, 2])],
                version,
            ));
            out.push(seed);
            let mut seed = vec![10u8];
            seed.extend_from_slice(&classic::encode_assignment(
                &[(Default::default(), [0, 1].into())].into(),
                &|_| Some("a".into()),
                version,
            ));
            out.push(seed);
        }
        use strata::coordinator::offsets_topic::{encode_key, ConsumerKey, RecordKey};
        let key = |record| {
            encode_key(&RecordKey::Consumer {
                group: "g".into(),
                record,
            })
        };
        let member = Value::Member(MemberMetadata {
            instance_id: None,
            rack_id: Some("rack".into()),
            client_id: "client".into(),
            client_host: "/127.0.0.1".into(),
            subscribed_topic_names: vec!["topic".into()],
            subscribed_topic_regex: Some("top.*".into()),
            rebalance_timeout_ms: 30_000,
            server_assignor: Some("uniform".into()),
            classic: None,
        });
        // A classic member inside the group (tag 0: ClassicMemberMetadata).
        let classic_member = Value::Member(MemberMetadata {
            instance_id: Some("instance".into()),
            rack_id: None,
            client_id: "client".into(),
            client_host: "/127.0.0.1".into(),
            subscribed_topic_names: vec!["topic".into()],
            subscribed_topic_regex: None,
            rebalance_timeout_ms: 30_000,
            server_assignor: None,
            classic: Some(records::ClassicMetadata {
                session_timeout_ms: 10_000,
                protocols: vec![(
                    "cooperative-sticky".into(),
                    classic::encode_subscription(&["topic"], &[("topic", &[0, 1])], 3),
                )],
            }),
        });
        let current = Value::Current(CurrentAssignment {
            member_epoch: 3,
            previous_member_epoch: 2,
            state: 1,
            assigned: [(Default::default(), [0, 1].into())].into(),
            pending_revocation: [(Default::default(), [2].into())].into(),
        });
        for (k, v) in [
            (key(ConsumerKey::Member("m".into())), member),
            (key(ConsumerKey::Member("c".into())), classic_member),
            (key(ConsumerKey::Assignment("m".into())), current),
        ] {
            let mut seed = vec![8u8, k.len() as u8];
            seed.extend_from_slice(&k);
            seed.extend_from_slice(&records::encode_value(&v));
            out.push(seed);
        }
    }
    // __transaction_state key and value.
    let mut tk = vec![3u8];
    tk.put_i16(0);
    put_str(&mut tk, "txn-1");
    out.push(tk);
    let mut tv = vec![4u8];
    tv.put_i16(0);
    tv.put_i64(1000);
    tv.put_i16(2);
    tv.put_i32(60_000);
    tv.put_i8(1);
    tv.put_i32(1);
    put_str(&mut tv, "topic");
    tv.put_i32(2);
    tv.put_i32(0);
    tv.put_i32(1);
    tv.put_i64(1_700_000_000_000);
    tv.put_i64(1_700_000_000_000);
    out.push(tv);
    // __share_group_state snapshot key and value (Kafka's ShareSnapshotKey / Value v0).
    let key = strata::share::state_record::StateKey {
        group: "share-group".into(),
        topic_id: Default::default(),
        partition: 2,
    };
    out.push([&[6u8][..], &strata::share::state_record::encode_key(&key)].concat());
    let snapshot = strata::share::partition::Snapshot {
        snapshot_epoch: 3,
        state_epoch: 0,
        leader_epoch: 1,
        start_offset: 100,
        // Written as Kafka's tagged field, so the seed covers tagged-field decoding.
        delivery_complete_count: 4,
        create_timestamp: 1_700_000_000_000,
        write_timestamp: 1_700_000_000_000,
        state_batches: vec![
            strata::share::partition::StateBatch {
                first_offset: 100,
                last_offset: 120,
                delivery_state: 0,
                delivery_count: 2,
            },
            strata::share::partition::StateBatch {
                first_offset: 121,
                last_offset: 121,
                delivery_state: 4,
                delivery_count: 5,
            },
        ],
    };
    out.push(
        [
            &[7u8][..],
            &strata::share::state_record::encode_value(&snapshot),
        ]
        .concat(),
    );
    // A whole batch as replay reads it.
    let mut b = vec![5u8];
    b.extend_from_slice(&batch(Compression::None));
    out.push(b);
    out
}

fn put_str(b: &mut Vec<u8>, s: &str) {
    b.put_i16(s.len() as i16);
    b.put_slice(s.as_bytes());
}

/// Manifests as the tiering service writes them: empty, and with two segments.
/// Cluster catalogs as the tiering service writes them: one topic, and two with configs.
pub fn catalogs() -> Vec<Vec<u8>> {
    let topic = |id: &str, partitions: i32, rf: i16, configs: &str| {
        format!(
            r#"{{"topic_id":"{id}","partitions":{partitions},"replication_factor":{rf},"configs":{{{configs}}}}}"#
        )
    };
    vec![
        format!(
            r#"{{"format":1,"version":3,"topics":{{"orders":{}}},"producer_id_block_end":2000}}"#,
            topic("7f0b2b4e-3c1d-4f6a-9a7e-2d7b1f0c9e11", 6, 3, r#""remote.storage.enable":"true""#)
        )
        .into_bytes(),
        format!(
            r#"{{"format":1,"version":9,"topics":{{"__consumer_offsets":{},"a.b_c-d":{}}},"producer_id_block_end":0}}"#,
            topic("0b6f7d38-55a4-4c36-8a55-0e6b3b7c2d01", 50, 3, r#""cleanup.policy":"compact""#),
            topic(
                "a1c9f1d2-0e1f-4a6b-b7d5-4f0c6a2e9b33",
                1,
                1,
                r#""remote.storage.enable":"true","local.retention.ms":"60000""#
            )
        )
        .into_bytes(),
    ]
}

pub fn manifests() -> Vec<Vec<u8>> {
    let segment = |key: &str, base: i64, next: i64| {
        format!(
            r#"{{"key":"{key}","base_offset":{base},"next_offset":{next},"max_timestamp":1700000000000,
            "leader_epoch":3,"epochs":[[3,{base}]],"log":{{"start":0,"end":4096}},
            "offset_index":{{"start":4096,"end":4104}},"time_index":{{"start":4104,"end":4116}},
            "producer_snapshot":{{"start":4116,"end":4150}},"leader_epoch_checkpoint":null,
            "txn_index":null,"uploaded_at_ms":1700000000000}}"#
        )
    };
    let manifest = |segments: &str| {
        format!(
            r#"{{"format":1,"topic":"fuzz","topic_id":"7f0b2b4e-3c1d-4f6a-9a7e-2d7b1f0c9e11",
            "partition":0,"version":4,"leader_epoch":3,"log_start_offset":0,
            "segments":[{segments}],"compacted_upto":null,"compacted_at_ms":null}}"#
        )
        .into_bytes()
    };
    vec![
        manifest(""),
        manifest(&format!(
            "{},{}",
            segment("fuzz-x/0/00000000000000000000-3-aaaa.seg", 0, 100),
            segment("fuzz-x/0/00000000000000000100-3-bbbb.seg", 100, 250)
        )),
    ]
}

/// A manifest list of two manifests (Strata's schema) and the metadata of a table with a
/// snapshot, each behind its kind byte.
pub fn iceberg_metadata() -> Vec<Vec<u8>> {
    use strata_tiering::export::iceberg::{self, avro::Value};
    let entry = |path: &str, snapshot: i64| {
        let part = Value::Record(vec![
            ("contains_null".into(), Value::Boolean(false)),
            (
                "contains_nan".into(),
                Value::Union(1, Box::new(Value::Boolean(false))),
            ),
            (
                "lower_bound".into(),
                Value::Union(1, Box::new(Value::Bytes(0i32.to_le_bytes().to_vec()))),
            ),
            (
                "upper_bound".into(),
                Value::Union(1, Box::new(Value::Bytes(3i32.to_le_bytes().to_vec()))),
            ),
        ]);
        Value::Record(vec![
            ("manifest_path".into(), Value::String(path.into())),
            ("manifest_length".into(), Value::Long(4096)),
            ("partition_spec_id".into(), Value::Int(0)),
            ("content".into(), Value::Int(0)),
            ("sequence_number".into(), Value::Long(snapshot)),
            ("min_sequence_number".into(), Value::Long(snapshot)),
            ("added_snapshot_id".into(), Value::Long(snapshot * 1000)),
            ("added_files_count".into(), Value::Int(2)),
            ("existing_files_count".into(), Value::Int(0)),
            ("deleted_files_count".into(), Value::Int(0)),
            ("added_rows_count".into(), Value::Long(100)),
            ("existing_rows_count".into(), Value::Long(0)),
            ("deleted_rows_count".into(), Value::Long(0)),
            (
                "partitions".into(),
                Value::Union(1, Box::new(Value::Array(vec![part.clone(), part]))),
            ),
            (
                "key_metadata".into(),
                Value::Union(0, Box::new(Value::Null)),
            ),
        ])
    };
    let list = iceberg::avro::container_file(
        iceberg::MANIFEST_FILE_SCHEMA,
        &[("format-version", "2".to_string())],
        &[
            entry("/x/metadata/a-m0.avro", 1),
            entry("/x/metadata/b-m0.avro", 2),
        ],
    );
    let metadata = br#"{"format-version":2,"table-uuid":"7f0b2b4e-3c1d-4f6a-9a7e-2d7b1f0c9e11",
"location":"/x","last-sequence-number":1,"last-updated-ms":1700000000000,"last-column-id":14,
"current-schema-id":0,"schemas":[{"type":"struct","schema-id":0,"fields":[
{"id":1,"name":"topic","required":true,"type":"string"},
{"id":13,"name":"value_id","required":false,"type":"long"},
{"id":14,"name":"value_at","required":false,"type":"timestamptz"}]}],
"current-snapshot-id":5,"snapshots":[{"snapshot-id":5,"sequence-number":1,
"timestamp-ms":1700000000000,"manifest-list":"/x/metadata/snap-5.avro",
"summary":{"operation":"append","strata.export.next-offsets":"{\"0\":100,\"1\":7}"}}]}"#;
    vec![
        [&[0u8][..], &list].concat(),
        [&[1u8][..], &metadata[..]].concat(),
    ]
}
