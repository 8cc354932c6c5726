//! Idempotent-producer state of one partition: per producer id, the epoch and the metadata of
//! the last five appended batches, so a retried batch is answered with its original offsets and
//! a gap in sequence numbers is refused with OUT_OF_ORDER_SEQUENCE_NUMBER.
//!
//! Snapshots use Kafka's `<offset:020>.snapshot` format (version 1, CRC32C); like Kafka's they
//! keep only the last batch per producer. On load the log replays batches after the snapshot
//! offset through [`ProducerStateManager::update`], so the state after a restart equals the
//! state before it (up to the five-batch dedup window, which Kafka also narrows to one).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::batch::{BatchHeader, NO_SEQUENCE};
use super::segment::file_stem;

/// Batches per producer remembered for duplicate detection (Kafka's NUM_BATCHES_TO_RETAIN).
pub const BATCHES_TO_RETAIN: usize = 5;
const SNAPSHOT_VERSION: i16 = 1;
const NO_PRODUCER_EPOCH: i16 = -1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMetadata {
    pub first_seq: i32,
    pub last_seq: i32,
    pub first_offset: i64,
    pub last_offset: i64,
    pub timestamp: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerEntry {
    pub epoch: i16,
    pub batches: VecDeque<BatchMetadata>,
    pub last_timestamp: i64,
    pub coordinator_epoch: i32,
    pub current_txn_first_offset: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProducerError {
    #[error("producer {producer_id} epoch {epoch} is older than the current epoch {current}")]
    InvalidProducerEpoch {
        producer_id: i64,
        epoch: i16,
        current: i16,
    },
    #[error("out of order sequence for producer {producer_id}: expected {expected}, got {got}")]
    OutOfOrderSequence {
        producer_id: i64,
        expected: i32,
        got: i32,
    },
    #[error("marker for producer {producer_id} from coordinator epoch {coordinator_epoch} is older than {current}")]
    CoordinatorFenced {
        producer_id: i64,
        coordinator_epoch: i32,
        current: i32,
    },
}

/// What the producer state says about an incoming batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceCheck {
    /// Append it.
    Append,
    /// A retry of a batch already in the log: answer with its offsets, append nothing.
    Duplicate(BatchMetadata),
}

fn in_sequence(last_seq: i32, next_first_seq: i32) -> bool {
    next_first_seq as i64 == last_seq as i64 + 1 || (next_first_seq == 0 && last_seq == i32::MAX)
}

#[derive(Default)]
pub struct ProducerStateManager {
    producers: HashMap<i64, ProducerEntry>,
    /// Ongoing transactions: first offset -> producer id (the smallest key is the first
    /// unstable offset).
    ongoing: BTreeMap<i64, i64>,
}

/// A transaction ended by a COMMIT or ABORT marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    /// The marker's offset.
    pub last_offset: i64,
}

impl ProducerStateManager {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn get(&self, producer_id: i64) -> Option<&ProducerEntry> {
        self.producers.get(&producer_id)
    }

    pub fn len(&self) -> usize {
        self.producers.len()
    }

    /// Every producer still in the state, by producer id.
    pub fn entries(&self) -> impl Iterator<Item = (i64, &ProducerEntry)> {
        self.producers.iter().map(|(id, e)| (*id, e))
    }

    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    /// Checks a batch from a client against the producer's state (Kafka's
    /// `ProducerAppendInfo.checkProducerEpoch` and `checkSequence`).
    pub fn check(&self, h: &BatchHeader) -> Result<SequenceCheck, ProducerError> {
        if !h.has_producer_id() {
            return Ok(SequenceCheck::Append);
        }
        let Some(entry) = self.producers.get(&h.producer_id) else {
            // Unknown producer (new, or its state expired): any sequence is accepted.
            return Ok(SequenceCheck::Append);
        };
        if h.producer_epoch < entry.epoch {
            return Err(ProducerError::InvalidProducerEpoch {
                producer_id: h.producer_id,
                epoch: h.producer_epoch,
                current: entry.epoch,
            });
        }
        if h.base_sequence == NO_SEQUENCE {
            return Ok(SequenceCheck::Append);
        }
        if h.producer_epoch == entry.epoch {
            let last_seq = h.last_sequence();
            if let Some(dup) = entry
                .batches
                .iter()
                .find(|b| b.first_seq == h.base_sequence && b.last_seq == last_seq)
            {
                return Ok(SequenceCheck::Duplicate(*dup));
            }
            let current_last = entry
                .batches
                .back()
                .map(|b| b.last_seq)
                .unwrap_or(NO_SEQUENCE);
            if entry.epoch != NO_PRODUCER_EPOCH
                && current_last != NO_SEQUENCE
                && !in_sequence(current_last, h.base_sequence)
            {
                return Err(ProducerError::OutOfOrderSequence {
                    producer_id: h.producer_id,
                    expected: current_last.wrapping_add(1),
                    got: h.base_sequence,
                });
            }
        } else if h.base_sequence != 0 && entry.epoch != NO_PRODUCER_EPOCH {
            // A bumped epoch must start again at sequence 0.
            return Err(ProducerError::OutOfOrderSequence {
                producer_id: h.producer_id,
                expected: 0,
                got: h.base_sequence,
            });
        }
        Ok(SequenceCheck::Append)
    }

    /// The first offset of the oldest ongoing transaction (the last stable offset is the
    /// smaller of this and the high watermark).
    pub fn first_unstable_offset(&self) -> Option<i64> {
        self.ongoing.keys().next().copied()
    }

    /// The ongoing transaction of `producer_id`, if any, as its first offset.
    pub fn ongoing_txn(&self, producer_id: i64) -> Option<i64> {
        self.producers
            .get(&producer_id)
            .and_then(|e| e.current_txn_first_offset)
    }

    /// The last stable offset recorded with `producer_id`'s aborted transaction whose ABORT
    /// marker is at `marker_offset`: the first offset of the oldest ongoing transaction of
    /// another producer, else the offset after the marker (Kafka's `lastStableOffset` of a
    /// `CompletedTxn`).
    pub fn last_stable_offset_after_abort(&self, producer_id: i64, marker_offset: i64) -> i64 {
        self.ongoing
            .iter()
            .find(|(_, &pid)| pid != producer_id)
            .map_or(marker_offset + 1, |(&o, _)| o)
    }

    /// Checks a COMMIT/ABORT marker against the producer's epoch and coordinator epoch
    /// (Kafka's `ProducerAppendInfo.appendEndTxnMarker`).
    pub fn check_marker(&self, marker: &super::TxnMarker) -> Result<(), ProducerError> {
        let super::TxnMarker {
            producer_id,
            producer_epoch,
            coordinator_epoch,
            transaction_version,
            ..
        } = *marker;
        if let Some(e) = self.producers.get(&producer_id) {
            // Kafka 4.4's rule: a transaction-version-2 marker that ends an ongoing
            // transaction carries the epoch its coordinator bumped, so one at the epoch of
            // the transaction's records is late; other markers (older versions, or no
            // transaction ongoing here, as for a resent one) only may not go below it.
            let stale = if transaction_version >= 2 && e.current_txn_first_offset.is_some() {
                producer_epoch <= e.epoch
            } else {
                producer_epoch < e.epoch
            };
            if stale {
                return Err(ProducerError::InvalidProducerEpoch {
                    producer_id,
                    epoch: producer_epoch,
                    current: e.epoch,
                });
            }
            if coordinator_epoch < e.coordinator_epoch {
                return Err(ProducerError::CoordinatorFenced {
                    producer_id,
                    coordinator_epoch,
                    current: e.coordinator_epoch,
                });
            }
        }
        Ok(())
    }

    /// Records a COMMIT/ABORT marker appended at `marker_offset` and returns the transaction
    /// it ends (a marker without an ongoing transaction ends an empty one at the marker).
    pub fn complete_txn(&mut self, h: &BatchHeader, coordinator_epoch: i32) -> CompletedTxn {
        let first = self.ongoing_txn(h.producer_id).unwrap_or(h.base_offset);
        self.update(h);
        if let Some(e) = self.producers.get_mut(&h.producer_id) {
            e.coordinator_epoch = e.coordinator_epoch.max(coordinator_epoch);
        }
        CompletedTxn {
            producer_id: h.producer_id,
            first_offset: first,
            last_offset: h.base_offset,
        }
    }

    /// Records an appended batch (offsets assigned). Also used to replay the log on load:
    /// a transactional data batch opens the producer's transaction if none is open, a control
    /// batch (COMMIT/ABORT marker) closes it.
    pub fn update(&mut self, h: &BatchHeader) {
        if !h.has_producer_id() {
            return;
        }
        if h.is_transactional() {
            let current = self
                .producers
                .get(&h.producer_id)
                .and_then(|e| e.current_txn_first_offset);
            if h.is_control() {
                if let Some(first) = current {
                    self.ongoing.remove(&first);
                }
            } else if current.is_none() {
                self.ongoing.insert(h.base_offset, h.producer_id);
            }
        }
        let entry = self
            .producers
            .entry(h.producer_id)
            .or_insert_with(|| ProducerEntry {
                epoch: h.producer_epoch,
                batches: VecDeque::new(),
                last_timestamp: h.max_timestamp,
                coordinator_epoch: -1,
                current_txn_first_offset: None,
            });
        if h.producer_epoch > entry.epoch {
            entry.epoch = h.producer_epoch;
            entry.batches.clear();
        }
        entry.last_timestamp = h.max_timestamp;
        if h.is_transactional() {
            if h.is_control() {
                entry.current_txn_first_offset = None;
            } else if entry.current_txn_first_offset.is_none() {
                entry.current_txn_first_offset = Some(h.base_offset);
            }
        }
        if h.base_sequence != NO_SEQUENCE && !h.is_control() {
            if entry.batches.len() == BATCHES_TO_RETAIN {
                entry.batches.pop_front();
            }
            entry.batches.push_back(BatchMetadata {
                first_seq: h.base_sequence,
                last_seq: h.last_sequence(),
                first_offset: h.base_offset,
                last_offset: h.last_offset(),
                timestamp: h.max_timestamp,
            });
        }
    }

    pub fn set_coordinator_epoch(&mut self, producer_id: i64, coordinator_epoch: i32) {
        if let Some(e) = self.producers.get_mut(&producer_id) {
            e.coordinator_epoch = e.coordinator_epoch.max(coordinator_epoch);
        }
    }

    /// (producer id, epoch, last sequence, last timestamp, coordinator epoch, current
    /// transaction start offset or -1), sorted by producer id.
    pub fn describe(&self) -> Vec<(i64, i16, i32, i64, i32, i64)> {
        let mut v: Vec<_> = self
            .producers
            .iter()
            .map(|(&id, e)| {
                (
                    id,
                    e.epoch,
                    e.batches.back().map_or(NO_SEQUENCE, |b| b.last_seq),
                    e.last_timestamp,
                    e.coordinator_epoch,
                    e.current_txn_first_offset.unwrap_or(-1),
                )
            })
            .collect();
        v.sort_unstable();
        v
    }

    /// Forgets producers whose last write is older than `expiration_ms` before `now_ms`.
    pub fn expire(&mut self, now_ms: i64, expiration_ms: i64) {
        self.producers.retain(|_, e| {
            e.current_txn_first_offset.is_some() || now_ms - e.last_timestamp < expiration_ms
        });
    }

    pub fn snapshot_path(dir: &Path, offset: i64) -> PathBuf {
        dir.join(format!("{}.snapshot", file_stem(offset)))
    }

    /// Writes `<offset>.snapshot` in Kafka's format.
    pub fn write_snapshot(&self, dir: &Path, offset: i64) -> io::Result<()> {
        let mut body = Vec::with_capacity(4 + self.producers.len() * 50);
        body.extend_from_slice(&(self.producers.len() as i32).to_be_bytes());
        let mut ids: Vec<_> = self.producers.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let e = &self.producers[&id];
            let last = e.batches.back().copied().unwrap_or(BatchMetadata {
                first_seq: NO_SEQUENCE,
                last_seq: NO_SEQUENCE,
                first_offset: -1,
                last_offset: -1,
                timestamp: e.last_timestamp,
            });
            body.extend_from_slice(&id.to_be_bytes());
            body.extend_from_slice(&e.epoch.to_be_bytes());
            body.extend_from_slice(&last.last_seq.to_be_bytes());
            body.extend_from_slice(&last.last_offset.to_be_bytes());
            body.extend_from_slice(&((last.last_offset - last.first_offset) as i32).to_be_bytes());
            body.extend_from_slice(&e.last_timestamp.to_be_bytes());
            body.extend_from_slice(&e.coordinator_epoch.to_be_bytes());
            body.extend_from_slice(&e.current_txn_first_offset.unwrap_or(-1).to_be_bytes());
        }
        let mut out = Vec::with_capacity(6 + body.len());
        out.extend_from_slice(&SNAPSHOT_VERSION.to_be_bytes());
        out.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
        out.extend_from_slice(&body);
        let path = Self::snapshot_path(dir, offset);
        let tmp = path.with_extension("snapshot.tmp");
        let written = (|| {
            let f = fs::File::create(&tmp)?;
            super::io_fault::write_all(&f, || tmp.clone(), &out)?;
            super::io_fault::sync_all(&f, || tmp.clone())?;
            super::io_fault::rename(&tmp, &path)
        })();
        if written.is_err() {
            // A full disk must not leave a torn temp file behind (recovery ignores it, but it
            // holds space).
            let _ = fs::remove_file(&tmp);
        }
        written
    }

    /// Reads a snapshot file. Corrupt snapshots are an `InvalidData` error; the caller then
    /// falls back to an older snapshot or a full replay.
    pub fn read_snapshot(path: &Path) -> io::Result<ProducerStateManager> {
        let raw = fs::read(path)?;
        let bad = |m: &str| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {m}", path.display()),
            )
        };
        if raw.len() < 10 {
            return Err(bad("too short"));
        }
        if i16::from_be_bytes([raw[0], raw[1]]) != SNAPSHOT_VERSION {
            return Err(bad("unsupported version"));
        }
        let crc = u32::from_be_bytes([raw[2], raw[3], raw[4], raw[5]]);
        let body = &raw[6..];
        if crc32c::crc32c(body) != crc {
            return Err(bad("CRC mismatch"));
        }
        let count = i32::from_be_bytes([body[0], body[1], body[2], body[3]]);
        const ENTRY: usize = 8 + 2 + 4 + 8 + 4 + 8 + 4 + 8;
        if count < 0 || body.len() != 4 + count as usize * ENTRY {
            return Err(bad("bad entry count"));
        }
        let mut producers = HashMap::new();
        for e in body[4..].chunks_exact(ENTRY) {
            let i64_at = |a: usize| i64::from_be_bytes(e[a..a + 8].try_into().unwrap_or([0; 8]));
            let i32_at = |a: usize| i32::from_be_bytes(e[a..a + 4].try_into().unwrap_or([0; 4]));
            let id = i64_at(0);
            let epoch = i16::from_be_bytes([e[8], e[9]]);
            let last_seq = i32_at(10);
            let last_offset = i64_at(14);
            let offset_delta = i32_at(22);
            let timestamp = i64_at(26);
            let coordinator_epoch = i32_at(34);
            let txn_first = i64_at(38);
            let mut batches = VecDeque::new();
            if last_seq != NO_SEQUENCE && last_offset >= 0 {
                batches.push_back(BatchMetadata {
                    first_seq: (last_seq as i64 - offset_delta as i64).max(0) as i32,
                    last_seq,
                    first_offset: last_offset - offset_delta as i64,
                    last_offset,
                    timestamp,
                });
            }
            producers.insert(
                id,
                ProducerEntry {
                    epoch,
                    batches,
                    last_timestamp: timestamp,
                    coordinator_epoch,
                    current_txn_first_offset: (txn_first >= 0).then_some(txn_first),
                },
            );
        }
        let ongoing = producers
            .iter()
            .filter_map(|(&id, e)| e.current_txn_first_offset.map(|o| (o, id)))
            .collect();
        Ok(ProducerStateManager { producers, ongoing })
    }

    /// Snapshot offsets present in `dir`, ascending.
    pub fn list_snapshots(dir: &Path) -> io::Result<Vec<i64>> {
        let mut out = Vec::new();
        for e in fs::read_dir(dir)? {
            let name = e?.file_name();
            let name = name.to_string_lossy();
            if let Some(stem) = name.strip_suffix(".snapshot") {
                if let Ok(o) = stem.parse::<i64>() {
                    out.push(o);
                }
            }
        }
        out.sort_unstable();
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::batch::BATCH_HEADER_LEN;

    fn header(pid: i64, epoch: i16, seq: i32, base: i64, n: i32) -> BatchHeader {
        BatchHeader {
            base_offset: base,
            batch_length: (BATCH_HEADER_LEN - 12) as i32,
            partition_leader_epoch: 0,
            magic: 2,
            crc: 0,
            attributes: 0,
            last_offset_delta: n - 1,
            base_timestamp: 1,
            max_timestamp: 1,
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
            records_count: n,
        }
    }

    #[test]
    fn a_retried_batch_is_a_duplicate_with_its_original_offsets() {
        let mut s = ProducerStateManager::new();
        s.update(&header(7, 0, 0, 0, 3));
        s.update(&header(7, 0, 3, 3, 2));
        match s.check(&header(7, 0, 0, 99, 3)).unwrap() {
            SequenceCheck::Duplicate(b) => assert_eq!((b.first_offset, b.last_offset), (0, 2)),
            other => panic!("expected duplicate, got {other:?}"),
        }
        assert_eq!(
            s.check(&header(7, 0, 5, 99, 1)).unwrap(),
            SequenceCheck::Append
        );
    }

    #[test]
    fn a_gap_is_out_of_order_and_an_old_epoch_is_fenced() {
        let mut s = ProducerStateManager::new();
        s.update(&header(7, 3, 0, 0, 1));
        assert!(matches!(
            s.check(&header(7, 3, 5, 1, 1)),
            Err(ProducerError::OutOfOrderSequence { expected: 1, .. })
        ));
        assert!(matches!(
            s.check(&header(7, 2, 1, 1, 1)),
            Err(ProducerError::InvalidProducerEpoch { .. })
        ));
        assert!(matches!(
            s.check(&header(7, 4, 3, 1, 1)),
            Err(ProducerError::OutOfOrderSequence { expected: 0, .. })
        ));
        assert_eq!(
            s.check(&header(7, 4, 0, 1, 1)).unwrap(),
            SequenceCheck::Append
        );
    }

    #[test]
    fn only_the_last_five_batches_are_remembered() {
        let mut s = ProducerStateManager::new();
        for i in 0..7 {
            s.update(&header(1, 0, i, i as i64, 1));
        }
        assert!(matches!(
            s.check(&header(1, 0, 2, 0, 1)).unwrap(),
            SequenceCheck::Duplicate(_)
        ));
        assert!(s.check(&header(1, 0, 1, 0, 1)).is_err());
    }

    #[test]
    fn snapshots_round_trip_the_last_batch() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = ProducerStateManager::new();
        s.update(&header(11, 2, 0, 0, 4));
        s.update(&header(11, 2, 4, 10, 3));
        s.write_snapshot(dir.path(), 13).unwrap();
        assert_eq!(
            ProducerStateManager::list_snapshots(dir.path()).unwrap(),
            vec![13]
        );
        let loaded = ProducerStateManager::read_snapshot(&ProducerStateManager::snapshot_path(
            dir.path(),
            13,
        ))
        .unwrap();
        let e = loaded.get(11).unwrap();
        assert_eq!(e.epoch, 2);
        assert_eq!(
            e.batches.back().unwrap(),
            s.get(11).unwrap().batches.back().unwrap()
        );
        assert!(matches!(
            loaded.check(&header(11, 2, 4, 0, 3)).unwrap(),
            SequenceCheck::Duplicate(_)
        ));
    }
}
