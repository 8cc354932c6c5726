//! Test-only batch builder. Batches are encoded with `kafka-protocol`'s own encoder so that the
//! cleaner's parser and rewriter are checked against an independent implementation.

use bytes::{Bytes, BytesMut};
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

pub const ALL_COMPRESSIONS: [Compression; 5] = [
    Compression::None,
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

#[derive(Debug, Clone)]
pub struct TestRecord {
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub timestamp: i64,
}

impl TestRecord {
    pub fn new(key: &[u8], value: Option<&[u8]>, timestamp: i64) -> Self {
        TestRecord {
            key: Some(Bytes::copy_from_slice(key)),
            value: value.map(Bytes::copy_from_slice),
            timestamp,
        }
    }
}

/// Producer fields of a test batch; `Default` is a plain (non-idempotent) producer.
#[derive(Debug, Clone, Copy)]
pub struct TestProducer {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
}

impl Default for TestProducer {
    fn default() -> Self {
        TestProducer {
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
        }
    }
}

/// One batch holding `records` at consecutive offsets from `base_offset`. Every record carries
/// one header so that header bytes are covered by the round trips.
pub fn encode(base_offset: i64, records: &[TestRecord], compression: Compression) -> Bytes {
    encode_with_producer(base_offset, records, compression, TestProducer::default())
}

pub fn encode_with_producer(
    base_offset: i64,
    records: &[TestRecord],
    compression: Compression,
    producer: TestProducer,
) -> Bytes {
    let records: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut headers = IndexMap::new();
            headers.insert(
                StrBytes::from_static_str("h"),
                Some(Bytes::from_static(b"v")),
            );
            Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 3,
                producer_id: producer.producer_id,
                producer_epoch: producer.producer_epoch,
                timestamp_type: TimestampType::Creation,
                offset: base_offset + i as i64,
                // The encoder starts a new batch when offset - sequence changes, so keep it constant.
                sequence: producer.base_sequence.wrapping_add(i as i32),
                timestamp: r.timestamp,
                key: r.key.clone(),
                value: r.value.clone(),
                headers,
            }
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression,
        },
    )
    .expect("test batch encodes");
    buf.freeze()
}
