//! The leader epoch cache: for each leader epoch, the first offset written in it. Persisted as
//! `leader-epoch-checkpoint` (`epoch start_offset` lines). Answers OffsetForLeaderEpoch, which
//! followers use to truncate divergent logs after a leader change.

use std::io;
use std::path::{Path, PathBuf};

use super::checkpoint;

pub const FILE_NAME: &str = "leader-epoch-checkpoint";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEntry {
    pub epoch: i32,
    pub start_offset: i64,
}

pub struct LeaderEpochCache {
    path: PathBuf,
    entries: Vec<EpochEntry>,
}

impl LeaderEpochCache {
    pub fn load(dir: &Path) -> io::Result<LeaderEpochCache> {
        let path = dir.join(FILE_NAME);
        let mut entries = Vec::new();
        for line in checkpoint::read(&path)? {
            let mut it = line.split_whitespace();
            match (
                it.next().and_then(|e| e.parse().ok()),
                it.next().and_then(|o| o.parse().ok()),
            ) {
                (Some(epoch), Some(start_offset)) => entries.push(EpochEntry {
                    epoch,
                    start_offset,
                }),
                _ => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("bad leader epoch line {line:?}"),
                    ))
                }
            }
        }
        Ok(LeaderEpochCache { path, entries })
    }

    pub fn latest_epoch(&self) -> Option<i32> {
        self.entries.last().map(|e| e.epoch)
    }

    /// The earliest entry: (epoch, start offset).
    pub fn earliest(&self) -> Option<(i32, i64)> {
        self.entries.first().map(|e| (e.epoch, e.start_offset))
    }

    /// Kafka's `epochForOffset`: the epoch of the last entry starting at or before `offset`.
    pub fn epoch_for_offset(&self, offset: i64) -> Option<i32> {
        self.entries
            .iter()
            .take_while(|e| e.start_offset <= offset)
            .last()
            .map(|e| e.epoch)
    }

    /// Whether [`LeaderEpochCache::assign`] of `epoch` would add an entry (and write the
    /// checkpoint): a defined epoch newer than every entry.
    pub fn would_assign(&self, epoch: i32) -> bool {
        epoch >= 0 && self.latest_epoch().is_none_or(|l| l < epoch)
    }

    /// Records that `epoch` starts at `start_offset` if it is newer than the latest epoch.
    pub fn assign(&mut self, epoch: i32, start_offset: i64) -> io::Result<()> {
        if !self.would_assign(epoch) {
            return Ok(());
        }
        self.entries.push(EpochEntry {
            epoch,
            start_offset,
        });
        self.flush()
    }

    /// Kafka's `LeaderEpochFileCache.endOffsetFor`: the (epoch, end offset) pair for the
    /// largest epoch <= `epoch`, where the end offset is the start of the next epoch, or
    /// `log_end_offset` when `epoch` is the latest. An epoch older than every entry answers
    /// (`epoch`, start of the first entry); an undefined (-1) or unknown newer epoch, or an empty
    /// cache, answers `(-1, -1)`.
    pub fn end_offset_for(&self, epoch: i32, log_end_offset: i64) -> (i32, i64) {
        const UNDEFINED: (i32, i64) = (-1, -1);
        if epoch < 0 {
            return UNDEFINED;
        }
        if self.latest_epoch() == Some(epoch) {
            return (epoch, log_end_offset);
        }
        let Some(higher) = self.entries.iter().position(|e| e.epoch > epoch) else {
            return UNDEFINED;
        };
        let next_start = self.entries[higher].start_offset;
        match higher.checked_sub(1).map(|i| self.entries[i]) {
            None => (epoch, next_start),
            Some(floor) => (floor.epoch, next_start),
        }
    }

    /// Drops entries starting at or after `offset` (log truncation).
    pub fn truncate_from_end(&mut self, offset: i64) -> io::Result<()> {
        let before = self.entries.len();
        self.entries.retain(|e| e.start_offset < offset);
        if self.entries.len() != before {
            self.flush()
        } else {
            Ok(())
        }
    }

    /// Moves the first entry's start up to the new log start offset.
    pub fn truncate_from_start(&mut self, log_start_offset: i64) -> io::Result<()> {
        let keep_from = self
            .entries
            .iter()
            .rposition(|e| e.start_offset <= log_start_offset);
        if let Some(i) = keep_from {
            if i > 0 || self.entries[0].start_offset < log_start_offset {
                self.entries.drain(..i);
                self.entries[0].start_offset = log_start_offset;
                return self.flush();
            }
        }
        Ok(())
    }

    /// Keeps the first `len` entries (a failed append rolls back the epoch it started). The
    /// in-memory cache is always restored; rewriting the checkpoint is best effort, because an
    /// entry left in the file starts at the log end offset and loading drops it
    /// ([`LeaderEpochCache::truncate_from_end`] at open).
    pub fn restore_len(&mut self, len: usize) {
        if self.entries.len() > len {
            self.entries.truncate(len);
            if let Err(e) = self.flush() {
                tracing::debug!(path = %self.path.display(), error = %e, "could not rewrite the leader epoch checkpoint after a failed append");
            }
        }
    }

    /// Forgets every entry (the log was truncated fully).
    pub fn clear(&mut self) -> io::Result<()> {
        self.entries.clear();
        self.flush()
    }

    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    fn flush(&self) -> io::Result<()> {
        let lines: Vec<String> = self
            .entries
            .iter()
            .map(|e| format!("{} {}", e.epoch, e.start_offset))
            .collect();
        checkpoint::write(&self.path, &lines)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn end_offsets_follow_kafka_semantics() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = LeaderEpochCache::load(dir.path()).unwrap();
        c.assign(0, 0).unwrap();
        c.assign(2, 10).unwrap();
        c.assign(5, 30).unwrap();
        c.assign(4, 40).unwrap(); // older epoch: ignored
        assert_eq!(c.end_offset_for(0, 50), (0, 10));
        assert_eq!(c.end_offset_for(1, 50), (0, 10));
        assert_eq!(c.end_offset_for(2, 50), (2, 30));
        assert_eq!(c.end_offset_for(5, 50), (5, 50));
        // Newer than any epoch, or undefined: Kafka answers UNDEFINED_EPOCH(_OFFSET).
        assert_eq!(c.end_offset_for(7, 50), (-1, -1));
        assert_eq!(c.end_offset_for(-1, 50), (-1, -1));
        let c2 = LeaderEpochCache::load(dir.path()).unwrap();
        assert_eq!(c2.entries(), c.entries());
        let mut c3 = c2;
        c3.truncate_from_start(15).unwrap();
        assert_eq!(
            c3.entries()[0],
            EpochEntry {
                epoch: 2,
                start_offset: 15
            }
        );
    }

    #[test]
    fn epoch_for_offset_is_the_last_epoch_starting_at_or_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = LeaderEpochCache::load(dir.path()).unwrap();
        assert_eq!(c.epoch_for_offset(0), None);
        assert_eq!(c.earliest(), None);
        c.assign(1, 5).unwrap();
        c.assign(3, 20).unwrap();
        assert_eq!(c.epoch_for_offset(4), None, "before the first entry");
        assert_eq!(c.epoch_for_offset(5), Some(1));
        assert_eq!(c.epoch_for_offset(19), Some(1));
        assert_eq!(c.epoch_for_offset(20), Some(3));
        assert_eq!(c.epoch_for_offset(i64::MAX), Some(3));
        assert_eq!(c.earliest(), Some((1, 5)));
    }
}

/// The (epoch, start offset) lines of a leader-epoch checkpoint (version, count, entries);
/// malformed lines are skipped.
pub fn parse_checkpoint(raw: &[u8]) -> Vec<(i32, i64)> {
    String::from_utf8_lossy(raw)
        .lines()
        .skip(2)
        .filter_map(|line| {
            let mut it = line.split_whitespace();
            Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
        })
        .collect()
}
