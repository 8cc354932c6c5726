//! The ordered set of segments (Kafka's `LogSegments`), keyed by base offset, and the lookups
//! in it: the active segment, reads by offset, offsets by timestamp (decompressing only the one
//! batch that holds the answer), sizes, and the sealed segments the tiering service uploads.

use std::io;

use super::batch::BatchHeader;
use super::producer_state::ProducerStateManager;
use super::segment::{self, FileSlice, Segment};
use super::{txn_index, Log, ReadError, TimestampAndOffset};

impl Log {
    pub(super) fn active(&mut self) -> &mut Segment {
        self.segments
            .values_mut()
            .next_back()
            .expect("a log always has an active segment")
    }

    pub(super) fn active_base(&self) -> i64 {
        *self.segments.keys().next_back().unwrap_or(&0)
    }

    /// The base offset of the active segment: every offset below it is in a sealed one.
    pub fn active_segment_base_offset(&self) -> i64 {
        self.active_base()
    }

    /// The first offset held locally (the log start offset without remote storage).
    pub fn local_start_offset(&self) -> i64 {
        self.segments
            .keys()
            .next()
            .copied()
            .unwrap_or(self.log_end_offset)
            .max(self.log_start_offset)
    }

    pub fn size_bytes(&self) -> u64 {
        self.segments.values().map(|s| s.size()).sum()
    }

    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// Bytes of local segments the remote manifest does not cover yet (upload lag).
    pub fn local_only_bytes(&self) -> u64 {
        self.segments
            .values()
            .filter(|s| s.next_offset() > self.remote_end_offset)
            .map(|s| s.size())
            .sum()
    }

    /// Reads batches from `offset`, never past `max_offset` (the high watermark for consumers).
    pub fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        max_offset: i64,
        min_one: bool,
    ) -> Result<Option<FileSlice>, ReadError> {
        self.check_online()?;
        if offset < self.log_start_offset || offset > self.log_end_offset {
            return Err(ReadError::OffsetOutOfRange {
                offset,
                log_start_offset: self.log_start_offset,
                log_end_offset: self.log_end_offset,
            });
        }
        if offset >= max_offset {
            return Ok(None);
        }
        let local_start_offset = self.local_start_offset();
        if offset < local_start_offset {
            return Err(ReadError::Remote {
                offset,
                local_start_offset,
            });
        }
        self.note_local_read(offset);
        let start_base = self
            .segments
            .range(..=offset)
            .next_back()
            .map(|(b, _)| *b)
            .unwrap_or(i64::MIN);
        for (_, seg) in self.segments.range(start_base..) {
            let max_position =
                if max_offset >= self.log_end_offset || max_offset >= seg.next_offset() {
                    u64::MAX
                } else {
                    seg.position_of(max_offset)?
                };
            if let Some(slice) = seg.read(offset, max_bytes, max_position, min_one)? {
                return Ok(Some(slice).filter(|s| s.len > 0));
            }
        }
        Ok(None)
    }

    /// Kafka's offsetsForTimes: the first record with timestamp >= `timestamp`, below the high
    /// watermark. Decompresses only the one batch that holds the answer.
    pub fn offset_for_timestamp(&self, timestamp: i64) -> io::Result<Option<TimestampAndOffset>> {
        for seg in self.segments.values() {
            if seg.max_timestamp() < timestamp || seg.base_offset() >= self.high_watermark {
                continue;
            }
            let start = seg.time_lookup_offset(timestamp).max(self.log_start_offset);
            for (pos, h) in seg.headers_from(start)? {
                if h.base_offset >= self.high_watermark {
                    return Ok(None);
                }
                if h.max_timestamp < timestamp {
                    continue;
                }
                if h.is_log_append_time() || h.is_control() {
                    return Ok(Some(TimestampAndOffset {
                        timestamp: h.max_timestamp,
                        offset: h.base_offset,
                        leader_epoch: h.partition_leader_epoch,
                    }));
                }
                let raw = seg.read_batch_at(pos, &h)?;
                let log_start = self.log_start_offset;
                let limit = self.config.max_decompressed_batch_bytes;
                if let Some((offset, ts)) =
                    find_record(&raw, limit, |o, t| t >= timestamp && o >= log_start)?
                {
                    return Ok(Some(TimestampAndOffset {
                        timestamp: ts,
                        offset,
                        leader_epoch: h.partition_leader_epoch,
                    }));
                }
            }
        }
        Ok(None)
    }

    /// ListOffsets MAX_TIMESTAMP: the record with the largest timestamp (first one on ties).
    pub fn max_timestamp_offset(&self) -> io::Result<Option<TimestampAndOffset>> {
        let Some(seg) = self
            .segments
            .values()
            .filter(|s| s.max_timestamp() >= 0)
            .fold(None::<&Segment>, |best, s| match best {
                Some(b) if b.max_timestamp() >= s.max_timestamp() => Some(b),
                _ => Some(s),
            })
        else {
            return Ok(None);
        };
        let target = seg.max_timestamp();
        for (pos, h) in seg.headers_from(seg.base_offset())? {
            if h.max_timestamp != target {
                continue;
            }
            if h.is_log_append_time() || h.is_control() {
                return Ok(Some(TimestampAndOffset {
                    timestamp: target,
                    offset: h.base_offset,
                    leader_epoch: h.partition_leader_epoch,
                }));
            }
            let raw = seg.read_batch_at(pos, &h)?;
            let limit = self.config.max_decompressed_batch_bytes;
            if let Some((offset, _)) = find_record(&raw, limit, |_, t| t == target)? {
                return Ok(Some(TimestampAndOffset {
                    timestamp: target,
                    offset,
                    leader_epoch: h.partition_leader_epoch,
                }));
            }
        }
        Ok(None)
    }

    /// Sealed segments wholly below the last stable offset that end after `from`, with what
    /// the tiering service uploads for each.
    pub fn uploadable_segments(&self, from: i64, now_ms: i64) -> Vec<strata_tiering::SegmentFiles> {
        if self.config.remote_log_copy_disable {
            return Vec::new();
        }
        let mut files = self.segment_files(from, i64::MAX);
        let eligible = files
            .iter()
            .take_while(|f| self.copy_lag_passed(f.next_offset, f.max_timestamp, now_ms))
            .count();
        files.truncate(eligible);
        files
    }

    /// Kafka's upload eligibility of a sealed segment (`remote.copy.lag.ms` / `.bytes`): a lag
    /// of 0 uploads at once; otherwise the segment waits until its newest record is that old
    /// or that many bytes were written after it, whichever comes first. -1 takes the local
    /// retention's value, and an unlimited one does not count; with neither check in force
    /// nothing delays the upload.
    fn copy_lag_passed(&self, next_offset: i64, max_timestamp: i64, now_ms: i64) -> bool {
        let (lag_ms, lag_bytes) = (
            self.config.remote_copy_lag_ms,
            self.config.remote_copy_lag_bytes,
        );
        if lag_ms == 0 || lag_bytes == 0 {
            return true;
        }
        let lag_ms = if lag_ms == -1 {
            self.config.local_retention_ms
        } else {
            lag_ms
        };
        let lag_bytes = if lag_bytes == -1 {
            self.config.local_retention_bytes
        } else {
            lag_bytes
        };
        if lag_ms < 0 && lag_bytes < 0 {
            return true;
        }
        let by_time = lag_ms >= 0 && now_ms.saturating_sub(max_timestamp) >= lag_ms;
        let newer_bytes: u64 = self
            .segments
            .range(next_offset..)
            .map(|(_, s)| s.size())
            .sum();
        let by_size = lag_bytes >= 0 && newer_bytes >= lag_bytes as u64;
        by_time || by_size
    }

    /// The end of the last sealed segment below the last stable offset that ends at or below
    /// `limit` (segments emptied by the cleaner included).
    pub fn sealed_end_at_or_below(&self, limit: i64) -> Option<i64> {
        let active = self.active_base();
        self.segments
            .values()
            .take_while(|s| {
                s.base_offset() != active && s.next_offset() <= self.last_stable_offset()
            })
            .map(|s| s.next_offset())
            .filter(|&n| n <= limit)
            .max()
    }

    /// Sealed, non-empty segments below the last stable offset with `from < next offset <=
    /// upto` (a compacted snapshot takes the cleaned ones).
    pub fn segment_files(&self, from: i64, upto: i64) -> Vec<strata_tiering::SegmentFiles> {
        let active = self.active_base();
        let mut out = Vec::new();
        for seg in self.segments.values() {
            let base = seg.base_offset();
            // Only data below the last stable offset: an undecided transaction must not
            // reach the bucket before its marker.
            if base == active || seg.next_offset() > self.last_stable_offset() {
                break;
            }
            if seg.next_offset() > upto {
                break;
            }
            if seg.next_offset() <= from || seg.size() == 0 {
                continue;
            }
            let stem = segment::file_stem(base);
            let snapshot = ProducerStateManager::snapshot_path(&self.dir, seg.next_offset());
            let entries: Vec<_> = self
                .epochs
                .entries()
                .iter()
                .filter(|e| e.start_offset < seg.next_offset())
                .copied()
                .collect();
            let mut checkpoint = format!("0\n{}\n", entries.len());
            for e in &entries {
                checkpoint.push_str(&format!("{} {}\n", e.epoch, e.start_offset));
            }
            out.push(strata_tiering::SegmentFiles {
                base_offset: base,
                next_offset: seg.next_offset(),
                max_timestamp: seg.max_timestamp(),
                log: self.dir.join(format!("{stem}.log")),
                offset_index: self.dir.join(format!("{stem}.index")),
                time_index: self.dir.join(format!("{stem}.timeindex")),
                producer_snapshot: snapshot.exists().then_some(snapshot),
                leader_epoch_checkpoint: Some(checkpoint.into_bytes()),
                txn_index: {
                    let p = txn_index::path(&self.dir, base);
                    p.exists().then_some(p)
                },
                epochs: entries
                    .iter()
                    .filter(|e| e.start_offset >= base)
                    .map(|e| (e.epoch, e.start_offset))
                    .collect(),
            });
        }
        out
    }
}

/// The first record of `batch` (one RecordBatch) at or after `min_offset` whose timestamp is
/// >= `timestamp` (offsetsForTimes over a batch read from remote storage).
pub fn first_record_at_or_after(
    batch: &[u8],
    timestamp: i64,
    min_offset: i64,
    max_decompressed_batch_bytes: u64,
) -> io::Result<Option<TimestampAndOffset>> {
    let header = BatchHeader::parse(batch)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
    if header.is_log_append_time() || header.is_control() {
        return Ok(
            (header.max_timestamp >= timestamp).then_some(TimestampAndOffset {
                timestamp: header.max_timestamp,
                offset: header.base_offset.max(min_offset),
                leader_epoch: header.partition_leader_epoch,
            }),
        );
    }
    Ok(find_record(batch, max_decompressed_batch_bytes, |o, t| {
        t >= timestamp && o >= min_offset
    })?
    .map(|(offset, ts)| TimestampAndOffset {
        timestamp: ts,
        offset,
        leader_epoch: header.partition_leader_epoch,
    }))
}

/// The first record of one stored batch, as (offset, timestamp), for which `pred` holds.
/// Decompresses under `limit` bytes (off the hot path: timestamp lookups).
fn find_record(
    raw: &[u8],
    limit: u64,
    pred: impl Fn(i64, i64) -> bool,
) -> io::Result<Option<(i64, i64)>> {
    let invalid = |e: strata_records::RecordsError| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("cannot read batch: {e}"),
        )
    };
    let header = strata_records::BatchHeader::parse(raw).map_err(invalid)?;
    let mut buf = Vec::new();
    for item in strata_records::records_of(raw, &header, limit, &mut buf).map_err(invalid)? {
        let (_, r) = item.map_err(invalid)?;
        let offset = header.base_offset + i64::from(r.offset_delta);
        let timestamp = if header.is_log_append_time() {
            header.max_timestamp
        } else {
            header.base_timestamp.wrapping_add(r.timestamp_delta)
        };
        if pred(offset, timestamp) {
            return Ok(Some((offset, timestamp)));
        }
    }
    Ok(None)
}
