//! Strata's one codec for Kafka's RecordBatch v2, free of I/O: bytes in, values or errors out.
//!
//! Module map:
//! - [`header`]: the 61-byte batch header, CRC-32C, codec and flags, and iteration over
//!   concatenated batches;
//! - [`record`]: reading one record from an [`record::Input`] (in place from a slice, or
//!   streamed), with every varint, length and count bounded by the bytes that back it;
//! - [`decompress`]: gzip, snappy (xerial framing), lz4 (Kafka's frame rules) and zstd
//!   decompression that streams through a small reusable buffer or materialises under a
//!   byte limit, and stops at that limit;
//! - [`validate`]: Kafka's `LogValidator` rules for a produced batch, run without keeping
//!   the decompressed bytes.
//!
//! Invariants: nothing here panics on input, and nothing allocates from a count or length
//! read from the input before the bytes that back it are present (in place) or before the
//! configured limit allows it (decompressed). The produce path allocates nothing per record.
//!
//! Errors: one [`RecordsError`] for everything that can be wrong with a batch, with the
//! Kafka error it answers as ([`RecordsError::kafka_error`]); [`validate::ValidateError`] adds
//! the per-record errors of Kafka's `RecordValidationException`.

pub mod decompress;
pub mod header;
pub mod record;
pub mod validate;

pub use decompress::{decompress_into, Scratch};
pub use header::{BatchHeader, BatchIter, Codec, BATCH_HEADER_LEN};
pub use record::{HeaderIter, MalformedRecord, Record};
pub use validate::{validate, ValidateError, ValidatedBatch, ValidationOptions};

use record::{read_record, Next, ReadFailure, SliceInput};

/// Kafka's default `max.decompressed.message.bytes` (`Records.SOFT_MAX_ARRAY_LENGTH`): the
/// largest record body a compressed batch may hold.
pub const DEFAULT_MAX_DECOMPRESSED_MESSAGE_BYTES: u64 = (i32::MAX - 8) as u64;

/// The Kafka error a refused batch is answered with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KafkaError {
    /// CORRUPT_MESSAGE (2): the batch's framing or CRC is wrong.
    CorruptMessage,
    /// INVALID_RECORD (87): the batch is intact but its contents break the format or the
    /// broker's rules.
    InvalidRecord,
    /// INVALID_TIMESTAMP (32).
    InvalidTimestamp,
}

impl KafkaError {
    pub fn code(self) -> i16 {
        match self {
            KafkaError::CorruptMessage => 2,
            KafkaError::InvalidRecord => 87,
            KafkaError::InvalidTimestamp => 32,
        }
    }
}

/// Everything that can be wrong with one batch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordsError {
    #[error("batch truncated: need {needed} bytes, have {available}")]
    Truncated { needed: usize, available: usize },
    #[error("batch length {0} is smaller than the header")]
    BadLength(i32),
    #[error("batch length field says {declared} bytes but {actual} were given")]
    LengthMismatch { declared: usize, actual: usize },
    #[error("unsupported magic {0}: only RecordBatch v2 is accepted")]
    UnsupportedMagic(i8),
    #[error("CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch { stored: u32, computed: u32 },
    #[error("unknown compression codec id {0}")]
    UnknownCodec(i16),
    /// Kafka's batch-level `InvalidRecordException` (offset range, count, control batch,
    /// sequence, declared size), with Kafka's message.
    #[error("{0}")]
    InvalidBatch(String),
    #[error("record {index}: {reason}")]
    MalformedRecord { index: i32, reason: MalformedRecord },
    #[error("cannot decompress the {codec} records of the batch: {reason}")]
    Decompress { codec: Codec, reason: String },
    #[error("the records of the batch decompress to more than {limit} bytes")]
    DecompressedTooLarge { limit: u64 },
}

impl RecordsError {
    /// The Kafka error this answers as: a framing or CRC failure is CORRUPT_MESSAGE, as in
    /// Kafka's `CorruptRecordException`; everything found inside an intact batch is
    /// INVALID_RECORD (Kafka's `InvalidRecordException`).
    pub fn kafka_error(&self) -> KafkaError {
        match self {
            RecordsError::Truncated { .. }
            | RecordsError::BadLength(_)
            | RecordsError::LengthMismatch { .. }
            | RecordsError::CrcMismatch { .. }
            | RecordsError::UnknownCodec(_) => KafkaError::CorruptMessage,
            RecordsError::UnsupportedMagic(_)
            | RecordsError::InvalidBatch(_)
            | RecordsError::MalformedRecord { .. }
            | RecordsError::Decompress { .. }
            | RecordsError::DecompressedTooLarge { .. } => KafkaError::InvalidRecord,
        }
    }
}

/// Iterates over the records of a records section held in memory (an uncompressed batch's
/// bytes after the header, or a payload [`decompress_into`] produced). Yields
/// `(index, record)`; after an error it yields nothing more. Allocates nothing.
pub struct RecordIter<'a> {
    input: SliceInput<'a>,
    index: i32,
    failed: bool,
}

impl<'a> RecordIter<'a> {
    pub fn new(records: &'a [u8]) -> Self {
        RecordIter {
            input: SliceInput::new(records),
            index: 0,
            failed: false,
        }
    }

    /// Records read so far.
    pub fn records_read(&self) -> i32 {
        self.index
    }
}

impl<'a> Iterator for RecordIter<'a> {
    type Item = Result<(i32, Record<&'a [u8]>), RecordsError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let index = self.index;
        match read_record(&mut self.input, u64::MAX) {
            Ok(Next::End) => None,
            Ok(Next::Record(r)) => {
                self.index = self.index.saturating_add(1);
                Some(Ok((index, r)))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(failure(index, e)))
            }
        }
    }
}

pub(crate) fn failure(index: i32, e: ReadFailure) -> RecordsError {
    match e {
        ReadFailure::Malformed(reason) => RecordsError::MalformedRecord { index, reason },
        ReadFailure::Eof => RecordsError::InvalidBatch(
            "Incorrect declared batch size, premature EOF reached".into(),
        ),
        ReadFailure::Input(e) => e,
    }
}

/// The records section of `batch` (a whole batch whose header is `header`), in place when
/// uncompressed, else decompressed into `buf` under `limit` bytes; iterate it with
/// [`RecordIter`]. This is the walk of the cleaner, export and record replay.
pub fn records_of<'a>(
    batch: &'a [u8],
    header: &BatchHeader,
    limit: u64,
    buf: &'a mut Vec<u8>,
) -> Result<RecordIter<'a>, RecordsError> {
    let payload = batch.get(BATCH_HEADER_LEN..).unwrap_or_default();
    match header.codec()? {
        Codec::None => Ok(RecordIter::new(payload)),
        codec => {
            decompress_into(codec, payload, limit, buf)?;
            Ok(RecordIter::new(buf))
        }
    }
}

/// Walks every record of one whole batch (`batch` holds exactly one), checking the header,
/// CRC, record structure and declared count, decompressing under `limit` bytes into `buf`.
/// Calls `f` with each record; returns the header. For fuzzing and tools.
pub fn walk<'a>(
    batch: &'a [u8],
    limit: u64,
    buf: &'a mut Vec<u8>,
    mut f: impl FnMut(i32, &Record<&[u8]>),
) -> Result<BatchHeader, RecordsError> {
    let header = BatchHeader::parse_whole(batch)?;
    let mut iter = records_of(batch, &header, limit, buf)?;
    for item in iter.by_ref() {
        let (index, record) = item?;
        f(index, &record);
    }
    if iter.records_read() != header.records_count {
        return Err(RecordsError::InvalidBatch(format!(
            "batch declares {} records but holds {}",
            header.records_count,
            iter.records_read()
        )));
    }
    Ok(header)
}

#[cfg(test)]
mod tests;
