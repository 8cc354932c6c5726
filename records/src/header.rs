//! The fixed 61-byte header of a RecordBatch v2, its CRC and codec.
//!
//! Invariant: [`BatchHeader::parse`] reads only the 61 header bytes and never indexes past
//! them; [`BatchHeader::check_whole`] then checks that a buffer holds exactly this one batch
//! and that its CRC-32C (attributes to the end) matches.

use std::fmt;

use crate::RecordsError;

/// Size of the RecordBatch v2 header that precedes the records (Kafka's
/// `RECORD_BATCH_OVERHEAD`).
pub const BATCH_HEADER_LEN: usize = 61;
/// Base offset and batch length: the batch occupies `LOG_OVERHEAD + batchLength` bytes.
pub const LOG_OVERHEAD: usize = 12;
/// The CRC covers the bytes from the attributes field to the end of the batch.
pub const CRC_START: usize = 21;
/// The only magic this crate reads.
pub const MAGIC_V2: i8 = 2;

pub const BASE_OFFSET: usize = 0;
pub const BATCH_LENGTH: usize = 8;
pub const PARTITION_LEADER_EPOCH: usize = 12;
pub const MAGIC: usize = 16;
pub const CRC: usize = 17;
pub const ATTRIBUTES: usize = 21;
pub const LAST_OFFSET_DELTA: usize = 23;
pub const BASE_TIMESTAMP: usize = 27;
pub const MAX_TIMESTAMP: usize = 35;
pub const PRODUCER_ID: usize = 43;
pub const PRODUCER_EPOCH: usize = 51;
pub const BASE_SEQUENCE: usize = 53;
pub const RECORDS_COUNT: usize = 57;

pub const COMPRESSION_MASK: i16 = 0x07;
pub const TIMESTAMP_TYPE_FLAG: i16 = 0x08;
pub const TRANSACTIONAL_FLAG: i16 = 0x10;
pub const CONTROL_FLAG: i16 = 0x20;
pub const DELETE_HORIZON_FLAG: i16 = 0x40;

/// Kafka's `NO_TIMESTAMP`.
pub const NO_TIMESTAMP: i64 = -1;

/// Compression codec of a batch (attribute bits 0-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Codec {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl Codec {
    pub fn from_attributes(attributes: i16) -> Result<Codec, RecordsError> {
        Ok(match attributes & COMPRESSION_MASK {
            0 => Codec::None,
            1 => Codec::Gzip,
            2 => Codec::Snappy,
            3 => Codec::Lz4,
            4 => Codec::Zstd,
            other => return Err(RecordsError::UnknownCodec(other)),
        })
    }

    /// Kafka's name of the codec (`compression.type`).
    pub fn name(self) -> &'static str {
        match self {
            Codec::None => "none",
            Codec::Gzip => "gzip",
            Codec::Snappy => "snappy",
            Codec::Lz4 => "lz4",
            Codec::Zstd => "zstd",
        }
    }
}

impl fmt::Display for Codec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

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

pub(crate) fn i16_at(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
pub(crate) fn i32_at(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
pub(crate) fn i64_at(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

impl BatchHeader {
    /// Parses the header at the start of `b` (which may hold more than one batch). Checks
    /// that the header is present, the magic is 2 and the batch length covers the header.
    pub fn parse(b: &[u8]) -> Result<BatchHeader, RecordsError> {
        if b.len() <= MAGIC {
            return Err(RecordsError::Truncated {
                needed: BATCH_HEADER_LEN,
                available: b.len(),
            });
        }
        let magic = b[MAGIC] as i8;
        if magic != MAGIC_V2 {
            return Err(RecordsError::UnsupportedMagic(magic));
        }
        if b.len() < BATCH_HEADER_LEN {
            return Err(RecordsError::Truncated {
                needed: BATCH_HEADER_LEN,
                available: b.len(),
            });
        }
        let batch_length = i32_at(b, BATCH_LENGTH);
        if i64::from(batch_length) < (BATCH_HEADER_LEN - LOG_OVERHEAD) as i64 {
            return Err(RecordsError::BadLength(batch_length));
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

    /// Parses the header of `batch`, which must hold exactly one whole batch, and checks
    /// its length, CRC and codec.
    pub fn parse_whole(batch: &[u8]) -> Result<BatchHeader, RecordsError> {
        let header = BatchHeader::parse(batch)?;
        header.check_whole(batch)?;
        Ok(header)
    }

    /// Checks that `batch` is exactly this batch (length), its CRC and its codec.
    pub fn check_whole(&self, batch: &[u8]) -> Result<(), RecordsError> {
        if batch.len() != self.total_size() {
            return Err(RecordsError::LengthMismatch {
                declared: self.total_size(),
                actual: batch.len(),
            });
        }
        let computed = crc32c::crc32c(&batch[CRC_START..]);
        if computed != self.crc {
            return Err(RecordsError::CrcMismatch {
                stored: self.crc,
                computed,
            });
        }
        self.codec()?;
        Ok(())
    }

    /// Total size of the batch on the wire and on disk.
    pub fn total_size(&self) -> usize {
        LOG_OVERHEAD + self.batch_length.max(0) as usize
    }

    pub fn last_offset(&self) -> i64 {
        self.base_offset
            .saturating_add(i64::from(self.last_offset_delta))
    }

    pub fn codec(&self) -> Result<Codec, RecordsError> {
        Codec::from_attributes(self.attributes)
    }

    pub fn is_transactional(&self) -> bool {
        self.attributes & TRANSACTIONAL_FLAG != 0
    }

    pub fn is_control(&self) -> bool {
        self.attributes & CONTROL_FLAG != 0
    }

    pub fn is_log_append_time(&self) -> bool {
        self.attributes & TIMESTAMP_TYPE_FLAG != 0
    }

    pub fn has_producer_id(&self) -> bool {
        self.producer_id >= 0
    }

    /// KIP-534: with the delete-horizon flag the base timestamp is the delete horizon.
    pub fn delete_horizon_ms(&self) -> Option<i64> {
        (self.attributes & DELETE_HORIZON_FLAG != 0).then_some(self.base_timestamp)
    }
}

/// Whether the stored CRC of `batch` matches its bytes (recovery path).
pub fn crc_matches(batch: &[u8]) -> bool {
    if batch.len() < BATCH_HEADER_LEN {
        return false;
    }
    let stored = u32::from_be_bytes([batch[CRC], batch[CRC + 1], batch[CRC + 2], batch[CRC + 3]]);
    crc32c::crc32c(&batch[CRC_START..]) == stored
}

/// Recomputes and stores the CRC of a whole batch after a header field it covers changed.
pub fn rewrite_crc(batch: &mut [u8]) {
    if batch.len() < BATCH_HEADER_LEN {
        return;
    }
    let crc = crc32c::crc32c(&batch[CRC_START..]);
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
    type Item = Result<(usize, BatchHeader, &'a [u8]), RecordsError>;

    fn next(&mut self) -> Option<Self::Item> {
        let rest = self.buf.get(self.pos..).filter(|r| !r.is_empty())?;
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
            return Some(Err(RecordsError::Truncated {
                needed: size,
                available: rest.len(),
            }));
        }
        let at = self.pos;
        self.pos += size;
        Some(Ok((at, header, &rest[..size])))
    }
}
