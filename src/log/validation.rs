//! Append-time checks of a produced batch and its preparation for the log (Kafka's
//! `LogValidator`): one RecordBatch v2 per partition, at most `max.message.bytes`, its records
//! validated by the record codec ([`strata_records::validate`]), a producer id on a
//! transactional batch; then recompression when the topic's
//! `compression.type` pins another codec, the max timestamp, the offsets, the leader epoch and
//! LogAppendTime. A refused batch changes nothing.

use bytes::BytesMut;
use kafka_protocol::records::Compression;

use super::batch::{self, BatchError, BatchHeader, BatchIter, Codec};
use super::{AppendError, AppendOrigin, Log};

impl Log {
    /// Checks one produce request partition before it meets the producer state: exactly one
    /// batch of magic 2, no larger than `max.message.bytes`, valid records, a producer id if
    /// transactional. Returns the batch's header and bytes and what validation learned.
    pub(super) fn validate_produce_request<'a>(
        &mut self,
        records: &'a [u8],
        origin: AppendOrigin,
        now_ms: i64,
    ) -> Result<(BatchHeader, &'a [u8], strata_records::ValidatedBatch), AppendError> {
        let (header, bytes) = single_batch(records)?;
        if bytes.len() > self.config.max_message_bytes {
            return Err(AppendError::MessageTooLarge {
                size: bytes.len(),
                max: self.config.max_message_bytes,
            });
        }
        let validated = self.validate_produced(bytes, origin, now_ms)?;
        if header.is_transactional() && !header.has_producer_id() {
            return Err(AppendError::InvalidRecord(
                "transactional batches need a producer id".into(),
            ));
        }
        Ok((header, bytes, validated))
    }

    /// Kafka's `LogValidator` for a client's batch, through the record codec: an uncompressed
    /// batch is walked in place, a compressed one streamed through the log's scratch buffer
    /// under `strata.max.decompressed.batch.bytes` (nothing decompressed is kept).
    fn validate_produced(
        &mut self,
        bytes: &[u8],
        origin: AppendOrigin,
        now_ms: i64,
    ) -> Result<strata_records::ValidatedBatch, AppendError> {
        let topic_partition = self
            .dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let opts = strata_records::ValidationOptions {
            topic_partition: &topic_partition,
            origin_client: origin == AppendOrigin::Client,
            compacted_topic: self.config.cleanup_policy_compact,
            log_append_time: self.config.log_append_time,
            now_ms,
            timestamp_before_max_ms: self.config.message_timestamp_before_max_ms,
            timestamp_after_max_ms: self.config.message_timestamp_after_max_ms,
            max_decompressed_message_bytes: self.config.max_decompressed_message_bytes,
            max_decompressed_batch_bytes: self.config.max_decompressed_batch_bytes,
        };
        strata_records::validate(bytes, &opts, &mut self.scratch).map_err(|e| match e {
            strata_records::ValidateError::Batch(e) => AppendError::Records(e),
            strata_records::ValidateError::Records {
                invalid_timestamp,
                message,
                record_errors,
            } => AppendError::RecordErrors {
                invalid_timestamp,
                message,
                record_errors: record_errors
                    .into_iter()
                    .map(|e| (e.batch_index, e.message))
                    .collect(),
            },
        })
    }

    /// The validated batch as it is stored: recompressed if the topic pins another codec,
    /// its max timestamp corrected, `base_offset` and `leader_epoch` assigned and, for a
    /// LogAppendTime topic, stamped with `now_ms`. Returns the bytes and the LogAppendTime
    /// (-1 for CreateTime).
    pub(super) fn prepare_batch(
        &self,
        header: &BatchHeader,
        bytes: &[u8],
        validated: &strata_records::ValidatedBatch,
        base_offset: i64,
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<(Vec<u8>, i64), AppendError> {
        // Recompress only when the topic pins a codec the batch does not use.
        let mut owned = match compression_for(&self.config.compression_type) {
            Some(target) if !codec_matches(validated.codec, target) => {
                recompress(bytes, target, self.config.max_decompressed_batch_bytes)?
            }
            _ => bytes.to_vec(),
        };
        // As Kafka, the batch's max timestamp is the largest record timestamp, whatever the
        // producer wrote (the CRC covers it).
        if !self.config.log_append_time && validated.max_timestamp != header.max_timestamp {
            batch::set_max_timestamp(&mut owned, validated.max_timestamp);
        }
        batch::assign_offset_and_epoch(&mut owned, base_offset, leader_epoch);
        let log_append_time = if self.config.log_append_time {
            batch::set_log_append_time(&mut owned, now_ms);
            now_ms
        } else {
            -1
        };
        Ok((owned, log_append_time))
    }
}

/// The one batch of a produce request partition (Kafka refuses none, several, or another
/// magic).
fn single_batch(records: &[u8]) -> Result<(BatchHeader, &[u8]), AppendError> {
    let mut batches = Vec::new();
    for item in BatchIter::new(records) {
        let (_, h, bytes) = item.map_err(|e| match e {
            BatchError::UnsupportedMagic(m) => AppendError::InvalidRecord(format!(
                "Produce requests are only allowed to contain record batches with magic version 2, got {m}"
            )),
            other => AppendError::Corrupt(other),
        })?;
        batches.push((h, bytes));
    }
    let [(header, bytes)] = batches.as_slice() else {
        return Err(AppendError::InvalidRecord(if batches.is_empty() {
            "Produce requests must have at least one record batch per partition".into()
        } else {
            "Produce requests are only allowed to contain exactly one record batch per partition"
                .into()
        }));
    };
    Ok((*header, *bytes))
}

fn compression_for(name: &str) -> Option<Compression> {
    match name {
        "uncompressed" => Some(Compression::None),
        "gzip" => Some(Compression::Gzip),
        "snappy" => Some(Compression::Snappy),
        "lz4" => Some(Compression::Lz4),
        "zstd" => Some(Compression::Zstd),
        _ => None,
    }
}

fn codec_matches(codec: Codec, target: Compression) -> bool {
    matches!(
        (codec, target),
        (Codec::None, Compression::None)
            | (Codec::Gzip, Compression::Gzip)
            | (Codec::Snappy, Compression::Snappy)
            | (Codec::Lz4, Compression::Lz4)
            | (Codec::Zstd, Compression::Zstd)
    )
}

/// Re-encodes a validated batch with another codec (topic compression.type differs from the
/// producer's). The records section does not depend on the codec, so it is decompressed
/// (under `limit` bytes) and compressed again as it is; the header keeps every field but the
/// codec bits, length and CRC.
fn recompress(bytes: &[u8], target: Compression, limit: u64) -> Result<Vec<u8>, AppendError> {
    use kafka_protocol::compression::{Compressor, Gzip, Lz4, Snappy, Zstd};
    let header = strata_records::BatchHeader::parse(bytes).map_err(AppendError::Records)?;
    let codec = header.codec().map_err(AppendError::Records)?;
    let payload = &bytes[batch::BATCH_HEADER_LEN..];
    let mut plain = Vec::new();
    let records: &[u8] = if codec == Codec::None {
        payload
    } else {
        strata_records::decompress_into(codec, payload, limit, &mut plain)
            .map_err(AppendError::Records)?;
        &plain
    };
    let mut out = BytesMut::with_capacity(batch::BATCH_HEADER_LEN + records.len() / 2);
    out.extend_from_slice(&bytes[..batch::BATCH_HEADER_LEN]);
    let fill = |b: &mut BytesMut| {
        b.extend_from_slice(records);
        Ok(())
    };
    let (id, result) = match target {
        Compression::None => {
            out.extend_from_slice(records);
            (0, Ok(()))
        }
        Compression::Gzip => (1, Gzip::compress(&mut out, fill)),
        Compression::Snappy => (2, Snappy::compress(&mut out, fill)),
        Compression::Lz4 => (3, Lz4::compress(&mut out, fill)),
        Compression::Zstd => (4, Zstd::compress(&mut out, fill)),
    };
    result.map_err(|e| AppendError::InvalidRecord(format!("cannot re-encode batch: {e}")))?;
    drop(plain);
    let mut out = out.to_vec();
    batch::set_codec_and_length(&mut out, id);
    Ok(out)
}
