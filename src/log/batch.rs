//! RecordBatch v2 header parsing and validation, without decompressing records.
//!
//! The broker stores batches exactly as the producer sent them; only the base offset and the
//! partition leader epoch are rewritten (neither is covered by the CRC), plus the timestamp type
//! and max timestamp for `LogAppendTime` topics (which needs a CRC recompute, not a re-encode).
//! Everything here is pure: bytes in, values or errors out.

/// Size of the RecordBatch v2 header that precedes the records.
pub const BATCH_HEADER_LEN: usize = 61;
/// Offset of the `batchLength` field; the batch occupies `LOG_OVERHEAD + batchLength` bytes.
pub const LOG_OVERHEAD: usize = 12;

const BASE_OFFSET: usize = 0;
const BATCH_LENGTH: usize = 8;
const PARTITION_LEADER_EPOCH: usize = 12;
const MAGIC: usize = 16;
const CRC: usize = 17;
const ATTRIBUTES: usize = 21;
const LAST_OFFSET_DELTA: usize = 23;
const BASE_TIMESTAMP: usize = 27;
const MAX_TIMESTAMP: usize = 35;
const PRODUCER_ID: usize = 43;
const PRODUCER_EPOCH: usize = 51;
const BASE_SEQUENCE: usize = 53;
const RECORDS_COUNT: usize = 57;

const COMPRESSION_MASK: i16 = 0x07;
const TIMESTAMP_TYPE_MASK: i16 = 0x08;
const TRANSACTIONAL_MASK: i16 = 0x10;
const CONTROL_MASK: i16 = 0x20;

/// Producer id of a batch written by a non-idempotent producer.
pub const NO_PRODUCER_ID: i64 = -1;
/// Sequence number of a batch written by a non-idempotent producer.
pub const NO_SEQUENCE: i32 = -1;

/// Why a batch was rejected. Maps to `CORRUPT_MESSAGE` or `INVALID_RECORD` at the API edge.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error("batch truncated: need {needed} bytes, have {available}")]
    Truncated { needed: usize, available: usize },
    #[error("batch length {0} is smaller than the header")]
    BadLength(i32),
    #[error("unsupported magic {0}: only RecordBatch v2 is accepted")]
    UnsupportedMagic(i8),
    #[error("CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch { stored: u32, computed: u32 },
    #[error("record count {count} does not match last offset delta {last_offset_delta}")]
    CountMismatch { count: i32, last_offset_delta: i32 },
    #[error("unknown compression codec {0}")]
    UnknownCodec(i16),
    #[error("cannot encode batch: {0}")]
    Encode(String),
}

/// Compression codec of a batch, as encoded in its attributes (the record codec's type).
pub use strata_records::Codec;

/// The parsed header of one RecordBatch v2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub records_count: i32,
}

fn i16_at(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
fn i32_at(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn i64_at(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

impl BatchHeader {
    /// Parses the header at the start of `b`. Checks only that the header is present and the
    /// magic is 2; [`BatchHeader::validate`] checks the rest.
    pub fn parse(b: &[u8]) -> Result<BatchHeader, BatchError> {
        if b.len() < LOG_OVERHEAD + 5 {
            return Err(BatchError::Truncated {
                needed: BATCH_HEADER_LEN,
                available: b.len(),
            });
        }
        let magic = b[MAGIC] as i8;
        if magic != 2 {
            return Err(BatchError::UnsupportedMagic(magic));
        }
        if b.len() < BATCH_HEADER_LEN {
            return Err(BatchError::Truncated {
                needed: BATCH_HEADER_LEN,
                available: b.len(),
            });
        }
        let batch_length = i32_at(b, BATCH_LENGTH);
        if (batch_length as i64) < (BATCH_HEADER_LEN - LOG_OVERHEAD) as i64 {
            return Err(BatchError::BadLength(batch_length));
        }
        Ok(BatchHeader {
            base_offset: i64_at(b, BASE_OFFSET),
            batch_length,
            partition_leader_epoch: i32_at(b, PARTITION_LEADER_EPOCH),
            magic,
            crc: u32::from_be_bytes([b[CRC], b[CRC + 1], b[CRC + 2], b[CRC + 3]]),
            attributes: i16_at(b, ATTRIBUTES),
            last_offset_delta: i32_at(b, LAST_OFFSET_DELTA),
            base_timestamp: i64_at(b, BASE_TIMESTAMP),
            max_timestamp: i64_at(b, MAX_TIMESTAMP),
            producer_id: i64_at(b, PRODUCER_ID),
            producer_epoch: i16_at(b, PRODUCER_EPOCH),
            base_sequence: i32_at(b, BASE_SEQUENCE),
            records_count: i32_at(b, RECORDS_COUNT),
        })
    }

    /// Total size of the batch on the wire and on disk.
    pub fn total_size(&self) -> usize {
        LOG_OVERHEAD + self.batch_length as usize
    }

    /// `base_offset + last_offset_delta`, wrapping as Kafka's `lastOffset` does: a header read
    /// from the network or a damaged file must not overflow (the offset checks refuse it).
    pub fn last_offset(&self) -> i64 {
        self.base_offset
            .wrapping_add(i64::from(self.last_offset_delta))
    }

    pub fn codec(&self) -> Result<Codec, BatchError> {
        Codec::from_attributes(self.attributes)
            .map_err(|_| BatchError::UnknownCodec(self.attributes & COMPRESSION_MASK))
    }

    pub fn is_transactional(&self) -> bool {
        self.attributes & TRANSACTIONAL_MASK != 0
    }

    pub fn is_control(&self) -> bool {
        self.attributes & CONTROL_MASK != 0
    }

    pub fn is_log_append_time(&self) -> bool {
        self.attributes & TIMESTAMP_TYPE_MASK != 0
    }

    pub fn has_producer_id(&self) -> bool {
        self.producer_id >= 0
    }

    /// The sequence number of the last record, wrapping at `i32::MAX` as Kafka does.
    pub fn last_sequence(&self) -> i32 {
        if self.base_sequence == NO_SEQUENCE {
            return NO_SEQUENCE;
        }
        let last = self.base_sequence as i64 + self.last_offset_delta as i64;
        if last > i32::MAX as i64 {
            (last - i32::MAX as i64 - 1) as i32
        } else {
            last as i32
        }
    }

    /// Full validation of a batch occupying exactly `batch` (as produced by a client): length,
    /// CRC over everything after the CRC field, codec, and record count.
    pub fn validate(&self, batch: &[u8]) -> Result<(), BatchError> {
        if batch.len() != self.total_size() {
            return Err(BatchError::Truncated {
                needed: self.total_size(),
                available: batch.len(),
            });
        }
        let computed = crc32c::crc32c(&batch[ATTRIBUTES..]);
        if computed != self.crc {
            return Err(BatchError::CrcMismatch {
                stored: self.crc,
                computed,
            });
        }
        self.codec()?;
        if self.records_count < 0
            || (self.records_count > 0 && self.last_offset_delta != self.records_count - 1)
        {
            return Err(BatchError::CountMismatch {
                count: self.records_count,
                last_offset_delta: self.last_offset_delta,
            });
        }
        Ok(())
    }
}

/// Checks only the CRC of a stored batch (recovery path).
pub fn crc_matches(batch: &[u8]) -> bool {
    if batch.len() < BATCH_HEADER_LEN {
        return false;
    }
    let stored = u32::from_be_bytes([batch[CRC], batch[CRC + 1], batch[CRC + 2], batch[CRC + 3]]);
    crc32c::crc32c(&batch[ATTRIBUTES..]) == stored
}

/// Rewrites the base offset and partition leader epoch in place. Neither is covered by the CRC.
pub fn assign_offset_and_epoch(batch: &mut [u8], base_offset: i64, leader_epoch: i32) {
    batch[BASE_OFFSET..BASE_OFFSET + 8].copy_from_slice(&base_offset.to_be_bytes());
    batch[PARTITION_LEADER_EPOCH..PARTITION_LEADER_EPOCH + 4]
        .copy_from_slice(&leader_epoch.to_be_bytes());
}

/// Sets the batch's max timestamp (Kafka's `setMaxTimestamp` for CreateTime) and recomputes
/// its CRC.
pub fn set_max_timestamp(batch: &mut [u8], max_timestamp: i64) {
    batch[MAX_TIMESTAMP..MAX_TIMESTAMP + 8].copy_from_slice(&max_timestamp.to_be_bytes());
    let crc = crc32c::crc32c(&batch[ATTRIBUTES..]);
    batch[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
}

/// After the records section was re-encoded: sets the codec bits and the batch length and
/// recomputes the CRC.
pub fn set_codec_and_length(batch: &mut [u8], codec_id: i16) {
    let attributes = (i16_at(batch, ATTRIBUTES) & !COMPRESSION_MASK) | codec_id;
    batch[ATTRIBUTES..ATTRIBUTES + 2].copy_from_slice(&attributes.to_be_bytes());
    let length = (batch.len() - LOG_OVERHEAD) as i32;
    batch[BATCH_LENGTH..BATCH_LENGTH + 4].copy_from_slice(&length.to_be_bytes());
    let crc = crc32c::crc32c(&batch[ATTRIBUTES..]);
    batch[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
}

/// Marks the batch as `LogAppendTime` with the given time and recomputes its CRC. The records
/// themselves are untouched: consumers take every record's timestamp from the max timestamp.
pub fn set_log_append_time(batch: &mut [u8], now_ms: i64) {
    let attributes = i16_at(batch, ATTRIBUTES) | TIMESTAMP_TYPE_MASK;
    batch[ATTRIBUTES..ATTRIBUTES + 2].copy_from_slice(&attributes.to_be_bytes());
    batch[MAX_TIMESTAMP..MAX_TIMESTAMP + 8].copy_from_slice(&now_ms.to_be_bytes());
    let crc = crc32c::crc32c(&batch[ATTRIBUTES..]);
    batch[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
}

/// Iterates over the batches in a buffer of concatenated batches. Stops with an error at the
/// first header that cannot be parsed or a batch that extends past the buffer.
pub struct BatchIter<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> BatchIter<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        BatchIter { buf, pos: 0 }
    }
}

impl<'a> Iterator for BatchIter<'a> {
    /// (position in the buffer, header, the batch bytes)
    type Item = Result<(usize, BatchHeader, &'a [u8]), BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.buf.len() {
            return None;
        }
        let rest = &self.buf[self.pos..];
        let header = match BatchHeader::parse(rest) {
            Ok(h) => h,
            Err(e) => {
                self.pos = self.buf.len();
                return Some(Err(e));
            }
        };
        let size = header.total_size();
        if size > rest.len() {
            self.pos = self.buf.len();
            return Some(Err(BatchError::Truncated {
                needed: size,
                available: rest.len(),
            }));
        }
        let at = self.pos;
        self.pos += size;
        Some(Ok((at, header, &rest[..size])))
    }
}

/// Builds one RecordBatch v2 without a producer id from (timestamp, key, value) records,
/// with kafka-protocol's encoder. Used for batches the broker writes itself (internal topics).
pub fn build_batch(
    records: impl Iterator<Item = (i64, Option<bytes::Bytes>, Option<bytes::Bytes>)>,
    compression: kafka_protocol::records::Compression,
) -> Result<bytes::BytesMut, BatchError> {
    use kafka_protocol::records::{Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};
    let records: Vec<Record> = records
        .enumerate()
        .map(|(i, (timestamp, key, value))| Record {
            transactional: false,
            control: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // The encoder keeps records in one batch only while offset - sequence is constant.
            sequence: i as i32,
            timestamp,
            key,
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
            compression,
        },
    )
    .map_err(|e| BatchError::Encode(e.to_string()))?;
    Ok(buf)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use kafka_protocol::records::Compression;
    use proptest::prelude::*;

    /// Encodes a real batch with kafka-protocol's encoder (the client side of the codec).
    pub fn encode_batch(values: &[&[u8]], compression: Compression, timestamp: i64) -> Vec<u8> {
        let records = values.iter().enumerate().map(|(i, v)| {
            (
                timestamp + i as i64,
                Some(bytes::Bytes::from(format!("k{i}"))),
                Some(bytes::Bytes::copy_from_slice(v)),
            )
        });
        build_batch(records, compression).expect("encode").to_vec()
    }

    #[test]
    fn parses_and_validates_a_real_batch() {
        let b = encode_batch(&[b"a", b"bb", b"ccc"], Compression::None, 1000);
        let h = BatchHeader::parse(&b).unwrap();
        assert_eq!(h.records_count, 3);
        assert_eq!(h.last_offset_delta, 2);
        assert_eq!(h.total_size(), b.len());
        assert_eq!(h.max_timestamp, 1002);
        h.validate(&b).unwrap();
    }

    #[test]
    fn a_flipped_bit_fails_the_crc() {
        let mut b = encode_batch(&[b"hello"], Compression::None, 1);
        let last = b.len() - 1;
        b[last] ^= 1;
        let h = BatchHeader::parse(&b).unwrap();
        assert!(matches!(
            h.validate(&b),
            Err(BatchError::CrcMismatch { .. })
        ));
    }

    #[test]
    fn offset_and_epoch_rewrite_keeps_the_crc_valid() {
        let mut b = encode_batch(&[b"x", b"y"], Compression::Lz4, 5);
        assign_offset_and_epoch(&mut b, 42, 7);
        let h = BatchHeader::parse(&b).unwrap();
        assert_eq!(
            (h.base_offset, h.partition_leader_epoch, h.last_offset()),
            (42, 7, 43)
        );
        h.validate(&b).unwrap();
        assert_eq!(h.codec().unwrap(), Codec::Lz4);
    }

    #[test]
    fn log_append_time_recomputes_the_crc() {
        let mut b = encode_batch(&[b"x"], Compression::Zstd, 5);
        set_log_append_time(&mut b, 99);
        let h = BatchHeader::parse(&b).unwrap();
        assert!(h.is_log_append_time());
        assert_eq!(h.max_timestamp, 99);
        h.validate(&b).unwrap();
    }

    #[test]
    fn old_magic_is_rejected() {
        let mut b = encode_batch(&[b"x"], Compression::None, 5);
        b[MAGIC] = 1;
        assert_eq!(BatchHeader::parse(&b), Err(BatchError::UnsupportedMagic(1)));
    }

    #[test]
    fn sequence_wraps_at_i32_max() {
        let mut b = encode_batch(&[b"x", b"y", b"z"], Compression::None, 5);
        b[BASE_SEQUENCE..BASE_SEQUENCE + 4].copy_from_slice(&(i32::MAX - 1).to_be_bytes());
        let h = BatchHeader::parse(&b).unwrap();
        assert_eq!(h.last_sequence(), 0);
    }

    proptest! {
        #[test]
        fn iterating_concatenated_batches_yields_each_one(
            sizes in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 1..8),
            cut in 0usize..64,
        ) {
            let mut buf = Vec::new();
            let mut expected = Vec::new();
            for (i, v) in sizes.iter().enumerate() {
                let mut b = encode_batch(&[v.as_slice()], Compression::None, i as i64);
                assign_offset_and_epoch(&mut b, i as i64, 0);
                expected.push(buf.len());
                buf.extend_from_slice(&b);
            }
            let got: Vec<usize> = BatchIter::new(&buf).map(|r| r.unwrap().0).collect();
            prop_assert_eq!(&got, &expected);
            // A torn tail yields every whole batch and then one error.
            let torn = &buf[..buf.len() - 1 - cut.min(buf.len() - 1)];
            let results: Vec<_> = BatchIter::new(torn).collect();
            let ok = results.iter().take_while(|r| r.is_ok()).count();
            prop_assert!(ok < expected.len());
            prop_assert!(results.len() == ok || results[ok].is_err());
        }
    }
}
