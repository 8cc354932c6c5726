//! RecordBatch v2: header view, record iteration, and the rewrite of a batch with some records
//! removed (what Kafka's `MemoryRecords.filterTo` does for the cleaner).
//!
//! Invariants of every batch this module writes:
//! - the base offset, `lastOffsetDelta`, producer id/epoch, base sequence, partition leader
//!   epoch, codec, timestamp type and the transactional/control flags are those of the source
//!   batch, so offsets never move and the last sequence of a producer stays visible;
//! - each kept record's bytes from its key onwards (key, value, headers) are copied verbatim;
//!   only the record length and timestamp delta are re-encoded, because the base timestamp
//!   changes when the first record is dropped or a delete horizon is set;
//! - the CRC-32C is recomputed over attributes..end.
//!
//! Everything here is pure (bytes in, bytes out) and never panics on input: malformed bytes
//! yield a [`BatchError`].

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::compression::{self as codec, Compressor};

/// Bytes from the start of a batch to the first record (Kafka's `RECORD_BATCH_OVERHEAD`).
pub const BATCH_OVERHEAD: usize = 61;
/// Bytes before the `batchLength` count starts (base offset and the length itself).
const LOG_OVERHEAD: usize = 12;
/// The CRC covers the bytes from the attributes field to the end of the batch.
const CRC_START: usize = 21;
const MAGIC_V2: i8 = 2;

const CODEC_MASK: i16 = 0x07;
const TIMESTAMP_TYPE_FLAG: i16 = 0x08;
const TRANSACTIONAL_FLAG: i16 = 0x10;
const CONTROL_FLAG: i16 = 0x20;
const DELETE_HORIZON_FLAG: i16 = 0x40;

/// `NO_TIMESTAMP` in Kafka.
pub const NO_TIMESTAMP: i64 = -1;
const NO_PRODUCER_ID: i64 = -1;

/// Why a batch could not be read or rewritten. Any of these means the segment holding the batch
/// is corrupt (or uses a format this crate does not support); the partition should be skipped.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    #[error("batch is truncated: {needed} bytes needed, {available} available")]
    Truncated { needed: usize, available: usize },
    #[error("batch length field {length} disagrees with the {actual} bytes given")]
    LengthMismatch { length: i64, actual: usize },
    #[error("unsupported batch magic {0} (only v2 is supported)")]
    UnsupportedMagic(i8),
    #[error("CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch { stored: u32, computed: u32 },
    #[error("unknown compression codec id {0}")]
    UnknownCodec(i16),
    #[error("invalid batch header: {0}")]
    InvalidHeader(&'static str),
    #[error("malformed record {index}: {reason}")]
    MalformedRecord { index: usize, reason: String },
    /// Decompression failed or passed `strata.max.decompressed.batch.bytes`.
    #[error(transparent)]
    Records(strata_records::RecordsError),
    #[error("batch declares {declared} records but holds {found}")]
    RecordCountMismatch { declared: i32, found: usize },
    #[error("{codec:?} codec failed")]
    Codec {
        codec: Codec,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Compression codec of a batch (attribute bits 0-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl Codec {
    fn from_attributes(attributes: i16) -> Result<Self, BatchError> {
        Ok(match attributes & CODEC_MASK {
            0 => Codec::None,
            1 => Codec::Gzip,
            2 => Codec::Snappy,
            3 => Codec::Lz4,
            4 => Codec::Zstd,
            other => return Err(BatchError::UnknownCodec(other)),
        })
    }

    fn compress_into(self, out: &mut BytesMut, records: &[u8]) -> Result<(), BatchError> {
        let fill = |buf: &mut BytesMut| {
            buf.extend_from_slice(records);
            Ok(())
        };
        let result = match self {
            Codec::None => {
                out.extend_from_slice(records);
                return Ok(());
            }
            Codec::Gzip => codec::Gzip::compress(out, fill),
            Codec::Snappy => codec::Snappy::compress(out, fill),
            Codec::Lz4 => codec::Lz4::compress(out, fill),
            Codec::Zstd => codec::Zstd::compress(out, fill),
        };
        result.map_err(|e| BatchError::Codec {
            codec: self,
            source: e.into(),
        })
    }
}

/// Timestamp type of a batch (attribute bit 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampType {
    CreateTime,
    LogAppendTime,
}

/// The fixed 61-byte header of a RecordBatch v2, validated (length, magic, CRC, codec).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    pub partition_leader_epoch: i32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub records_count: i32,
}

impl BatchHeader {
    /// Parses and validates the header of `batch`, which must hold exactly one whole batch.
    pub fn parse(batch: &[u8]) -> Result<Self, BatchError> {
        if batch.len() < BATCH_OVERHEAD {
            return Err(BatchError::Truncated {
                needed: BATCH_OVERHEAD,
                available: batch.len(),
            });
        }
        let length = i64::from(be_i32(batch, 8));
        if length + LOG_OVERHEAD as i64 != batch.len() as i64 {
            return Err(BatchError::LengthMismatch {
                length,
                actual: batch.len(),
            });
        }
        let magic = batch[16] as i8;
        if magic != MAGIC_V2 {
            return Err(BatchError::UnsupportedMagic(magic));
        }
        let stored = u32::from_be_bytes([batch[17], batch[18], batch[19], batch[20]]);
        let computed = crc32c::crc32c(&batch[CRC_START..]);
        if stored != computed {
            return Err(BatchError::CrcMismatch { stored, computed });
        }
        let header = BatchHeader {
            base_offset: be_i64(batch, 0),
            partition_leader_epoch: be_i32(batch, 12),
            attributes: i16::from_be_bytes([batch[21], batch[22]]),
            last_offset_delta: be_i32(batch, 23),
            base_timestamp: be_i64(batch, 27),
            max_timestamp: be_i64(batch, 35),
            producer_id: be_i64(batch, 43),
            producer_epoch: i16::from_be_bytes([batch[51], batch[52]]),
            base_sequence: be_i32(batch, 53),
            records_count: be_i32(batch, 57),
        };
        Codec::from_attributes(header.attributes)?;
        if header.base_offset < 0 {
            return Err(BatchError::InvalidHeader("negative base offset"));
        }
        if header.last_offset_delta < 0 {
            return Err(BatchError::InvalidHeader("negative last offset delta"));
        }
        if header.records_count < 0 {
            return Err(BatchError::InvalidHeader("negative record count"));
        }
        Ok(header)
    }

    pub fn codec(&self) -> Codec {
        // Validated in `parse`; a hand-built header with a bad codec reads as uncompressed.
        Codec::from_attributes(self.attributes).unwrap_or(Codec::None)
    }

    pub fn timestamp_type(&self) -> TimestampType {
        if self.attributes & TIMESTAMP_TYPE_FLAG != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }

    pub fn is_transactional(&self) -> bool {
        self.attributes & TRANSACTIONAL_FLAG != 0
    }

    pub fn is_control(&self) -> bool {
        self.attributes & CONTROL_FLAG != 0
    }

    pub fn has_producer_id(&self) -> bool {
        self.producer_id > NO_PRODUCER_ID
    }

    /// KIP-534: when the delete-horizon flag is set, the base timestamp holds the time after
    /// which tombstones (and removable transaction markers) of this batch may be dropped.
    pub fn delete_horizon_ms(&self) -> Option<i64> {
        (self.attributes & DELETE_HORIZON_FLAG != 0).then_some(self.base_timestamp)
    }

    pub fn last_offset(&self) -> i64 {
        self.base_offset
            .saturating_add(i64::from(self.last_offset_delta))
    }

    pub fn next_offset(&self) -> i64 {
        self.last_offset().saturating_add(1)
    }
}

/// One record of a batch, borrowed from the decompressed records section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordView {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<Bytes>,
    /// `false` for a tombstone (null value).
    pub has_value: bool,
    /// The record's bytes from the key length onwards (key, value, headers), copied verbatim
    /// when the record is kept.
    tail: Bytes,
    offset_delta: i32,
}

/// Decompresses `batch` (validated by [`BatchHeader::parse`]) under `limit` bytes and splits
/// it into records, through the one record codec (`strata_records`).
pub fn records(
    batch: &Bytes,
    header: &BatchHeader,
    limit: u64,
) -> Result<Vec<RecordView>, BatchError> {
    let payload = decompressed(batch, header, limit)?;
    let declared = header.records_count;
    let mut records = Vec::with_capacity(usize::try_from(declared).unwrap_or(0).min(4096));
    for item in strata_records::RecordIter::new(&payload) {
        let (index, r) = item.map_err(|e| record_error(records.len(), e))?;
        let timestamp = record_timestamp(header, r.timestamp_delta);
        let slice = |s: &[u8]| payload.slice_ref(s);
        records.push(RecordView {
            offset: header.base_offset.saturating_add(i64::from(r.offset_delta)),
            timestamp,
            key: r.key.map(slice),
            has_value: r.value.is_some(),
            tail: slice(r.tail),
            offset_delta: r.offset_delta,
        });
        debug_assert_eq!(index as usize + 1, records.len());
    }
    if records.len() as i64 != i64::from(declared) {
        return Err(BatchError::RecordCountMismatch {
            declared,
            found: records.len(),
        });
    }
    Ok(records)
}

/// Calls `f(key, offset)` for each record of `batch`, walked in place after decompressing
/// under `limit` bytes; nothing is kept per record. Stops early (returning true) when `f`
/// returns true.
pub fn for_each_key(
    batch: &Bytes,
    header: &BatchHeader,
    limit: u64,
    mut f: impl FnMut(Option<&[u8]>, i64) -> bool,
) -> Result<bool, BatchError> {
    let payload = decompressed(batch, header, limit)?;
    let mut found = 0usize;
    for item in strata_records::RecordIter::new(&payload) {
        let (_, r) = item.map_err(|e| record_error(found, e))?;
        found += 1;
        if f(
            r.key,
            header.base_offset.saturating_add(i64::from(r.offset_delta)),
        ) {
            return Ok(true);
        }
    }
    if found as i64 != i64::from(header.records_count) {
        return Err(BatchError::RecordCountMismatch {
            declared: header.records_count,
            found,
        });
    }
    Ok(false)
}

fn record_timestamp(header: &BatchHeader, timestamp_delta: i64) -> i64 {
    match header.timestamp_type() {
        // Readers use the batch's max timestamp for every record of a LogAppendTime batch.
        TimestampType::LogAppendTime => header.max_timestamp,
        TimestampType::CreateTime => header.base_timestamp.wrapping_add(timestamp_delta),
    }
}

fn record_error(index: usize, e: strata_records::RecordsError) -> BatchError {
    match e {
        strata_records::RecordsError::Decompress { .. }
        | strata_records::RecordsError::DecompressedTooLarge { .. } => BatchError::Records(e),
        other => BatchError::MalformedRecord {
            index,
            reason: other.to_string(),
        },
    }
}

/// The records section of `batch`: a slice of it when uncompressed, else decompressed under
/// `limit` bytes.
fn decompressed(batch: &Bytes, header: &BatchHeader, limit: u64) -> Result<Bytes, BatchError> {
    let payload = batch.slice(BATCH_OVERHEAD.min(batch.len())..);
    let codec = match header.codec() {
        Codec::None => return Ok(payload),
        Codec::Gzip => strata_records::Codec::Gzip,
        Codec::Snappy => strata_records::Codec::Snappy,
        Codec::Lz4 => strata_records::Codec::Lz4,
        Codec::Zstd => strata_records::Codec::Zstd,
    };
    let mut out = Vec::new();
    strata_records::decompress_into(codec, &payload, limit, &mut out)
        .map_err(BatchError::Records)?;
    Ok(Bytes::from(out))
}

/// Builds the batch that replaces `original` when only `kept` (in order, non-empty) survive,
/// as Kafka's `buildRetainedRecordsInto` does: same base offset and last offset delta, same
/// producer fields, codec and flags; the base timestamp is the delete horizon when one is given
/// (and the delete-horizon flag is then set), otherwise the first kept record's timestamp.
pub fn rebuild(
    original: &BatchHeader,
    kept: &[&RecordView],
    delete_horizon_ms: Option<i64>,
) -> Result<Bytes, BatchError> {
    let first = kept
        .first()
        .ok_or(BatchError::InvalidHeader("rebuild without records"))?;
    let base_timestamp = delete_horizon_ms.unwrap_or(first.timestamp);
    let max_timestamp = match original.timestamp_type() {
        TimestampType::LogAppendTime => original.max_timestamp,
        TimestampType::CreateTime => kept
            .iter()
            .map(|r| r.timestamp)
            .max()
            .unwrap_or(NO_TIMESTAMP),
    };

    let mut plain = BytesMut::new();
    for record in kept {
        let timestamp_delta = record.timestamp.wrapping_sub(base_timestamp);
        let mut prefix = [0u8; 1 + 10 + 5];
        let mut len = 1; // attributes byte, always 0 in v2
        len += write_varlong(&mut prefix[len..], timestamp_delta);
        len += write_varint(&mut prefix[len..], record.offset_delta);
        let body_len = len + record.tail.len();
        let body_len =
            i32::try_from(body_len).map_err(|_| BatchError::InvalidHeader("record too large"))?;
        let mut length = [0u8; 5];
        let n = write_varint(&mut length, body_len);
        plain.extend_from_slice(&length[..n]);
        plain.extend_from_slice(&prefix[..len]);
        plain.extend_from_slice(&record.tail);
    }

    let mut attributes = original.attributes & !DELETE_HORIZON_FLAG;
    if delete_horizon_ms.is_some() {
        attributes |= DELETE_HORIZON_FLAG;
    }
    let count =
        i32::try_from(kept.len()).map_err(|_| BatchError::InvalidHeader("too many records"))?;
    let header = BatchHeader {
        attributes,
        base_timestamp,
        max_timestamp,
        records_count: count,
        ..original.clone()
    };
    let mut out = BytesMut::with_capacity(BATCH_OVERHEAD + plain.len());
    write_header_fields(&mut out, &header);
    original.codec().compress_into(&mut out, &plain)?;
    finish(out)
}

/// Kafka's `writeEmptyHeader`: a record-less batch kept only to preserve producer state (or the
/// last offset of a cleaning round). Uncompressed, no base timestamp, delete-horizon flag clear.
pub fn empty_batch(original: &BatchHeader) -> Result<Bytes, BatchError> {
    let header = BatchHeader {
        attributes: original.attributes & (TIMESTAMP_TYPE_FLAG | TRANSACTIONAL_FLAG | CONTROL_FLAG),
        base_timestamp: NO_TIMESTAMP,
        records_count: 0,
        ..original.clone()
    };
    let mut out = BytesMut::with_capacity(BATCH_OVERHEAD);
    write_header_fields(&mut out, &header);
    finish(out)
}

/// Writes the 61 header bytes with placeholders for the length and CRC.
fn write_header_fields(out: &mut BytesMut, header: &BatchHeader) {
    out.put_i64(header.base_offset);
    out.put_i32(0); // batch length, filled by `finish`
    out.put_i32(header.partition_leader_epoch);
    out.put_i8(MAGIC_V2);
    out.put_u32(0); // CRC, filled by `finish`
    out.put_i16(header.attributes);
    out.put_i32(header.last_offset_delta);
    out.put_i64(header.base_timestamp);
    out.put_i64(header.max_timestamp);
    out.put_i64(header.producer_id);
    out.put_i16(header.producer_epoch);
    out.put_i32(header.base_sequence);
    out.put_i32(header.records_count);
}

fn finish(mut out: BytesMut) -> Result<Bytes, BatchError> {
    let length = i32::try_from(out.len() - LOG_OVERHEAD)
        .map_err(|_| BatchError::InvalidHeader("batch larger than 2 GiB"))?;
    out[8..12].copy_from_slice(&length.to_be_bytes());
    let crc = crc32c::crc32c(&out[CRC_START..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    Ok(out.freeze())
}

fn be_i32(buf: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]])
}

fn be_i64(buf: &[u8], at: usize) -> i64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&buf[at..at + 8]);
    i64::from_be_bytes(bytes)
}

fn write_unsigned(out: &mut [u8], mut value: u64) -> usize {
    let mut i = 0;
    while value >= 0x80 {
        out[i] = (value as u8) | 0x80;
        value >>= 7;
        i += 1;
    }
    out[i] = value as u8;
    i + 1
}

fn write_varint(out: &mut [u8], value: i32) -> usize {
    write_unsigned(out, u64::from(((value << 1) ^ (value >> 31)) as u32))
}

fn write_varlong(out: &mut [u8], value: i64) -> usize {
    write_unsigned(out, ((value << 1) ^ (value >> 63)) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_batches::{encode, TestRecord};
    use kafka_protocol::records::{Compression, RecordBatchDecoder};

    fn decode(batch: &Bytes) -> Vec<kafka_protocol::records::Record> {
        let mut buf = batch.clone();
        RecordBatchDecoder::decode(&mut buf)
            .expect("kafka-protocol decodes the batch")
            .records
    }

    const LIMIT: u64 = 1 << 20;

    fn sample(compression: Compression) -> Bytes {
        let records = vec![
            TestRecord::new(b"a", Some(b"1"), 1_000),
            TestRecord::new(b"b", None, 1_005),
            TestRecord::new(b"c", Some(b"3"), 990),
        ];
        encode(100, &records, compression)
    }

    #[test]
    fn header_and_records_match_what_kafka_protocol_wrote() {
        for compression in crate::test_batches::ALL_COMPRESSIONS {
            let batch = sample(compression);
            let header = BatchHeader::parse(&batch).unwrap();
            assert_eq!(header.base_offset, 100);
            assert_eq!(header.last_offset(), 102);
            assert_eq!(header.records_count, 3);
            let records = records(&batch, &header, LIMIT).unwrap();
            let offsets: Vec<i64> = records.iter().map(|r| r.offset).collect();
            assert_eq!(offsets, vec![100, 101, 102]);
            assert_eq!(records[1].key.as_deref(), Some(&b"b"[..]));
            assert!(!records[1].has_value);
            assert_eq!(records[2].timestamp, 990);
        }
    }

    #[test]
    fn rebuilt_batch_keeps_offsets_producer_fields_and_sets_delete_horizon() {
        for compression in crate::test_batches::ALL_COMPRESSIONS {
            let batch = sample(compression);
            let header = BatchHeader::parse(&batch).unwrap();
            let all = records(&batch, &header, LIMIT).unwrap();
            let kept = [&all[1], &all[2]];
            let rebuilt = rebuild(&header, &kept, Some(50_000)).unwrap();
            let new_header = BatchHeader::parse(&rebuilt).unwrap();
            assert_eq!(new_header.base_offset, 100, "base offset never moves");
            assert_eq!(new_header.last_offset(), 102, "last offset is preserved");
            assert_eq!(new_header.records_count, 2);
            assert_eq!(new_header.delete_horizon_ms(), Some(50_000));
            assert_eq!(new_header.codec(), header.codec());
            assert_eq!(new_header.producer_id, header.producer_id);
            assert_eq!(new_header.base_sequence, header.base_sequence);
            assert_eq!(new_header.max_timestamp, 1_005);
            let decoded = decode(&rebuilt);
            let seen: Vec<(i64, i64, Option<Bytes>)> = decoded
                .iter()
                .map(|r| (r.offset, r.timestamp, r.value.clone()))
                .collect();
            assert_eq!(
                seen,
                vec![
                    (101, 1_005, None),
                    (102, 990, Some(Bytes::from_static(b"3")))
                ]
            );
            // Header bytes are verbatim.
            assert_eq!(decoded[0].headers.len(), 1);
        }
    }

    #[test]
    fn rebuilt_batch_without_horizon_starts_at_first_kept_timestamp() {
        let batch = sample(Compression::None);
        let header = BatchHeader::parse(&batch).unwrap();
        let all = records(&batch, &header, LIMIT).unwrap();
        let rebuilt = rebuild(&header, &[&all[2]], None).unwrap();
        let new_header = BatchHeader::parse(&rebuilt).unwrap();
        assert_eq!(new_header.base_timestamp, 990);
        assert_eq!(new_header.delete_horizon_ms(), None);
        assert_eq!(decode(&rebuilt)[0].offset, 102);
    }

    #[test]
    fn empty_batch_keeps_offset_range_and_producer_state() {
        let batch = sample(Compression::Zstd);
        let header = BatchHeader::parse(&batch).unwrap();
        let empty = empty_batch(&header).unwrap();
        assert_eq!(empty.len(), BATCH_OVERHEAD);
        let parsed = BatchHeader::parse(&empty).unwrap();
        assert_eq!(parsed.base_offset, 100);
        assert_eq!(parsed.last_offset(), 102);
        assert_eq!(parsed.records_count, 0);
        assert_eq!(parsed.codec(), Codec::None);
        assert_eq!(parsed.producer_epoch, header.producer_epoch);
        assert!(records(&empty, &parsed, LIMIT).unwrap().is_empty());
    }

    #[test]
    fn corrupt_batches_are_errors() {
        let batch = sample(Compression::Gzip);
        let mut flipped = batch.to_vec();
        let last = flipped.len() - 1;
        flipped[last] ^= 0xff;
        assert!(matches!(
            BatchHeader::parse(&flipped),
            Err(BatchError::CrcMismatch { .. })
        ));
        assert!(matches!(
            BatchHeader::parse(&batch[..40]),
            Err(BatchError::Truncated { .. })
        ));
        assert!(matches!(
            BatchHeader::parse(&batch[..batch.len() - 1]),
            Err(BatchError::LengthMismatch { .. })
        ));
    }

    #[test]
    fn a_batch_that_decompresses_past_the_bound_is_an_error_not_memory() {
        // 8 MiB of records in a tiny zstd batch; the cleaner reads it under a 1 MiB bound.
        let value = vec![0u8; 1000];
        let many: Vec<TestRecord> = (0..8 * 1024)
            .map(|i| TestRecord::new(format!("k{i}").as_bytes(), Some(&value), 1_000))
            .collect();
        let batch = encode(0, &many, Compression::Zstd);
        assert!(batch.len() < 1 << 20);
        let header = BatchHeader::parse(&batch).unwrap();
        assert!(matches!(
            records(&batch, &header, LIMIT),
            Err(BatchError::Records(
                strata_records::RecordsError::DecompressedTooLarge { .. }
            ))
        ));
        assert!(matches!(
            for_each_key(&batch, &header, LIMIT, |_, _| false),
            Err(BatchError::Records(_))
        ));
        assert_eq!(records(&batch, &header, 16 << 20).unwrap().len(), 8 * 1024);
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            let bytes = Bytes::from(bytes);
            if let Ok(header) = BatchHeader::parse(&bytes) {
                let _ = records(&bytes, &header, LIMIT);
            }
        }

        #[test]
        fn corrupted_records_section_never_panics(
            index in 0usize..200,
            value in proptest::num::u8::ANY,
        ) {
            // Fix up the CRC after corrupting the record bytes so parsing gets past the header.
            let batch = sample(Compression::None);
            let mut bytes = batch.to_vec();
            let at = BATCH_OVERHEAD + index % (bytes.len() - BATCH_OVERHEAD);
            bytes[at] = value;
            let crc = crc32c::crc32c(&bytes[CRC_START..]);
            bytes[17..21].copy_from_slice(&crc.to_be_bytes());
            let bytes = Bytes::from(bytes);
            let header = BatchHeader::parse(&bytes).unwrap();
            let _ = records(&bytes, &header, LIMIT);
        }
    }
}
