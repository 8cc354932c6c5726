//! Kafka's `LogValidator` for one batch a client produced, without keeping decompressed bytes.
//!
//! What is checked, in Kafka's order and with Kafka's messages:
//! 1. framing: length, CRC, codec (CORRUPT_MESSAGE);
//! 2. `validateBatch`: the offset range `[base, base + lastOffsetDelta]` is non-empty, the
//!    record count is positive and equals `lastOffsetDelta + 1`, no control batch, a producer
//!    id comes with a sequence (INVALID_RECORD);
//! 3. every record's structure ([`crate::record`]), exactly `recordsCount` records and no byte
//!    after them, every offset delta equal to the record's index (Kafka rewrites a compressed
//!    batch whose inner offsets are off; Strata stores batches as produced, so it refuses it),
//!    the decompressed size within `max_decompressed_batch_bytes` and every record body of a
//!    compressed batch within `max.decompressed.message.bytes` (INVALID_RECORD);
//! 4. `validateRecord` per record: a key on a compacted topic, the timestamp within
//!    `message.timestamp.{before,after}.max.ms` for CreateTime topics, no LogAppendTime from a
//!    producer; these are collected as Kafka's per-record errors (`RecordValidationException`).
//!
//! An uncompressed batch is walked in place; a compressed one is decompressed through the
//! [`Scratch`] window and its bytes are skipped, not kept. No allocation happens per record
//! (per-record error messages are built only for refused records, at most
//! [`MAX_RECORD_ERRORS`] of them).

use crate::decompress::{self, Scratch};
use crate::header::{BatchHeader, Codec, BATCH_HEADER_LEN};
use crate::record::{read_record, Input, Next, SliceInput};
use crate::{failure, KafkaError, RecordsError};

/// Per-record errors kept for the response (the count in the message stays exact).
pub const MAX_RECORD_ERRORS: usize = 1000;

/// The topic and broker settings a produced batch is validated against.
#[derive(Debug, Clone, Copy)]
pub struct ValidationOptions<'a> {
    /// `topic-partition`, as Kafka names it in its messages.
    pub topic_partition: &'a str,
    /// The batch comes from a client (Kafka's `AppendOrigin.CLIENT`): the offset range,
    /// record count, control and sequence checks of `validateBatch` apply. The broker's own
    /// coordinator writes skip them, as in Kafka.
    pub origin_client: bool,
    /// `cleanup.policy` includes `compact`: every record needs a key.
    pub compacted_topic: bool,
    /// `message.timestamp.type=LogAppendTime`.
    pub log_append_time: bool,
    pub now_ms: i64,
    /// `message.timestamp.before.max.ms` / `message.timestamp.after.max.ms`.
    pub timestamp_before_max_ms: i64,
    pub timestamp_after_max_ms: i64,
    /// Kafka's `max.decompressed.message.bytes`: the largest record body a compressed batch
    /// may hold.
    pub max_decompressed_message_bytes: u64,
    /// Strata's `strata.max.decompressed.batch.bytes`: the most bytes one compressed batch's
    /// records may decompress to.
    pub max_decompressed_batch_bytes: u64,
}

/// What validation learnt about an accepted batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValidatedBatch {
    pub header: BatchHeader,
    pub codec: Codec,
    /// The largest record timestamp (Kafka sets the batch's max timestamp to it on a
    /// CreateTime topic), or -1.
    pub max_timestamp: i64,
    /// Size of the records section once decompressed.
    pub decompressed_bytes: u64,
}

/// One refused record: its index in the batch and Kafka's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordError {
    pub batch_index: i32,
    pub message: String,
}

/// Why a batch was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValidateError {
    #[error(transparent)]
    Batch(#[from] RecordsError),
    /// Kafka's `RecordValidationException`: INVALID_TIMESTAMP if any record has a bad
    /// timestamp, else INVALID_RECORD; `message` is Kafka's top-level message.
    #[error("{message}")]
    Records {
        invalid_timestamp: bool,
        message: String,
        record_errors: Vec<RecordError>,
    },
}

impl ValidateError {
    pub fn kafka_error(&self) -> KafkaError {
        match self {
            ValidateError::Batch(e) => e.kafka_error(),
            ValidateError::Records {
                invalid_timestamp: true,
                ..
            } => KafkaError::InvalidTimestamp,
            ValidateError::Records { .. } => KafkaError::InvalidRecord,
        }
    }
}

fn invalid(message: String) -> ValidateError {
    ValidateError::Batch(RecordsError::InvalidBatch(message))
}

/// Kafka's `validateBatch` for a client's v2 batch.
fn validate_batch(h: &BatchHeader, tp: &str) -> Result<(), ValidateError> {
    // The client's base offset is only named in messages (the broker assigns offsets); Kafka's
    // `lastOffset` wraps there, as Java's long arithmetic does.
    let last = h.base_offset.wrapping_add(i64::from(h.last_offset_delta));
    let count_from_offsets = i64::from(h.last_offset_delta) + 1;
    if count_from_offsets <= 0 {
        return Err(invalid(format!(
            "Batch has an invalid offset range: [{}, {last}] in topic partition {tp}",
            h.base_offset
        )));
    }
    if h.records_count <= 0 {
        return Err(invalid(format!(
            "Invalid reported count for record batch: {} in topic partition {tp}",
            h.records_count
        )));
    }
    if count_from_offsets != i64::from(h.records_count) {
        return Err(invalid(format!(
            "Inconsistent batch offset range [{}, {last}] and count of records {} in topic partition {tp}",
            h.base_offset, h.records_count
        )));
    }
    if h.is_control() {
        return Err(invalid(format!(
            "Clients are not allowed to write control records in topic partition {tp}"
        )));
    }
    if h.has_producer_id() && h.base_sequence < 0 {
        return Err(invalid(format!(
            "Invalid sequence number {} in record batch with producerId {} in topic partition {tp}",
            h.base_sequence, h.producer_id
        )));
    }
    Ok(())
}

/// Per-record errors being collected.
#[derive(Default)]
struct Errors {
    total: usize,
    invalid_timestamp: bool,
    kept: Vec<RecordError>,
}

impl Errors {
    fn push(&mut self, batch_index: i32, message: String, timestamp: bool) {
        self.total += 1;
        self.invalid_timestamp |= timestamp;
        if self.kept.len() < MAX_RECORD_ERRORS {
            self.kept.push(RecordError {
                batch_index,
                message,
            });
        }
    }

    /// Kafka's `processRecordErrors`.
    fn into_result(self) -> Result<(), ValidateError> {
        if self.total == 0 {
            return Ok(());
        }
        let message = if self.invalid_timestamp {
            "One or more records have been rejected due to invalid timestamp".to_string()
        } else {
            let shown: Vec<String> = self
                .kept
                .iter()
                .take(3)
                .map(|e| {
                    format!(
                        "RecordError(batchIndex={}, message='{}')",
                        e.batch_index, e.message
                    )
                })
                .collect();
            format!(
                "One or more records have been rejected due to {} record errors in total, and only showing the first three errors at most: [{}]",
                self.total,
                shown.join(", ")
            )
        };
        Err(ValidateError::Records {
            invalid_timestamp: self.invalid_timestamp,
            message,
            record_errors: self.kept,
        })
    }
}

/// Validates one whole batch (`batch` holds exactly one) produced by a client.
pub fn validate(
    batch: &[u8],
    opts: &ValidationOptions<'_>,
    scratch: &mut Scratch,
) -> Result<ValidatedBatch, ValidateError> {
    let header = BatchHeader::parse_whole(batch)?;
    let codec = header.codec()?;
    if opts.origin_client {
        validate_batch(&header, opts.topic_partition)?;
    }
    let payload = &batch[BATCH_HEADER_LEN..];
    let (max_timestamp, decompressed_bytes) = match codec {
        Codec::None => {
            let mut input = SliceInput::new(payload);
            let max = walk(&mut input, &header, opts, u64::MAX)?;
            (max, payload.len() as u64)
        }
        codec => {
            let mut input =
                decompress::stream(codec, payload, opts.max_decompressed_batch_bytes, scratch)?;
            let max = walk(
                &mut input,
                &header,
                opts,
                opts.max_decompressed_message_bytes,
            )?;
            if !input.finish()? {
                return Err(invalid(
                    "Incorrect declared batch size, records still remaining in file".into(),
                ));
            }
            (max, input.produced())
        }
    };
    Ok(ValidatedBatch {
        header,
        codec,
        max_timestamp,
        decompressed_bytes,
    })
}

/// Reads exactly `records_count` records from `input`, checking each; returns the max
/// timestamp. A streamed input's trailing bytes are checked by the caller.
fn walk<I: Input>(
    input: &mut I,
    h: &BatchHeader,
    opts: &ValidationOptions<'_>,
    max_body: u64,
) -> Result<i64, ValidateError> {
    let tp = opts.topic_partition;
    let mut errors = Errors::default();
    let mut max_timestamp = crate::header::NO_TIMESTAMP;
    let batch_log_append_time = h.is_log_append_time();
    for index in 0..h.records_count {
        let record = match read_record(input, max_body) {
            Ok(Next::Record(r)) => r,
            Ok(Next::End) => {
                return Err(invalid(
                    "Incorrect declared batch size, premature EOF reached".into(),
                ))
            }
            Err(e) => return Err(failure(index, e).into()),
        };
        if record.offset_delta != index {
            return Err(invalid(format!(
                "Invalid offset delta {} of record {index} in a batch of {} records (expected {index}) in topic partition {tp}",
                record.offset_delta, h.records_count
            )));
        }
        let timestamp = if batch_log_append_time {
            h.max_timestamp
        } else {
            h.base_timestamp.wrapping_add(record.timestamp_delta)
        };
        // validateKey, then validateTimestamp.
        if opts.compacted_topic && record.key.is_none() {
            errors.push(
                index,
                format!(
                    "Compacted topic cannot accept message without key in topic partition {tp}"
                ),
                false,
            );
            continue;
        }
        if !opts.log_append_time && timestamp != crate::header::NO_TIMESTAMP {
            let diff = opts.now_ms.wrapping_sub(timestamp);
            if diff > opts.timestamp_before_max_ms
                || diff.wrapping_neg() > opts.timestamp_after_max_ms
            {
                errors.push(
                    index,
                    format!(
                        "Timestamp {timestamp} of message with offset {} is out of range. The timestamp should be within [{}, {}]",
                        h.base_offset.wrapping_add(i64::from(index)),
                        opts.now_ms.saturating_sub(opts.timestamp_before_max_ms),
                        opts.now_ms.saturating_add(opts.timestamp_after_max_ms)
                    ),
                    true,
                );
                continue;
            }
        } else if batch_log_append_time {
            errors.push(
                index,
                format!(
                    "Invalid timestamp type in message DefaultRecord(offset={}, timestamp={timestamp}, key={} bytes, value={} bytes). Producer should not set timestamp type to LogAppendTime.",
                    h.base_offset.wrapping_add(i64::from(index)),
                    record.key_len.max(0),
                    record.value_len.max(0)
                ),
                true,
            );
            continue;
        }
        max_timestamp = max_timestamp.max(timestamp);
    }
    if let Some(remaining) = input.remaining() {
        if remaining > 0 {
            return Err(invalid(
                "Incorrect declared batch size, records still remaining in file".into(),
            ));
        }
    }
    errors.into_result()?;
    Ok(max_timestamp)
}
