//! Incremental fetch sessions (KIP-227): the broker remembers the partitions a consumer
//! fetches, so later requests carry only changes and responses only partitions with news.
//!
//! Pure state: the fetch handler locks the cache briefly (never across `.await`) to resolve a
//! request into the partitions to read, and again to record what it sent. Sessions are evicted
//! least-recently-used beyond `max_slots`, as Kafka's `max.incremental.fetch.session.cache.slots`.

use std::collections::HashMap;

use indexmap::IndexMap;
use kafka_protocol::messages::TopicName;
use kafka_protocol::ResponseError;
use uuid::Uuid;

pub use crate::broker::FetchPosition;

/// `(topic name, or empty when addressed by id; topic id; partition)`.
pub type PartitionKey = (TopicName, Uuid, i32);

/// What was last sent for a partition; an incremental response includes the partition only
/// when one of these changed, it has records, or it has an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SentState {
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
}

struct Session {
    partitions: IndexMap<PartitionKey, (FetchPosition, Option<SentState>)>,
    /// The epoch the next request must carry.
    next_epoch: i32,
    last_used: u64,
}

/// How a request relates to sessions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionMode {
    /// Full request, full response, no session (epoch -1, or no room for a session).
    Sessionless,
    /// Full request creating session `id`; the response carries the id and all partitions.
    New(i32),
    /// Incremental request on session `id`: respond with changed partitions only.
    Incremental(i32),
}

pub struct FetchSessionCache {
    sessions: HashMap<i32, Session>,
    max_slots: usize,
    next_id: i32,
    clock: u64,
}

const INITIAL_EPOCH: i32 = 0;
const FINAL_EPOCH: i32 = -1;

fn next_epoch(e: i32) -> i32 {
    if e == i32::MAX {
        1
    } else {
        e + 1
    }
}

impl FetchSessionCache {
    pub fn new(max_slots: usize) -> Self {
        FetchSessionCache {
            sessions: HashMap::new(),
            max_slots,
            next_id: 1,
            clock: 0,
        }
    }

    /// Resolves a request into a mode and the partitions to read, in order.
    /// `requested` are the request's partitions, `forgotten` its forgotten partitions.
    pub fn begin(
        &mut self,
        session_id: i32,
        epoch: i32,
        requested: Vec<(PartitionKey, FetchPosition)>,
        forgotten: &[PartitionKey],
    ) -> Result<(SessionMode, Vec<(PartitionKey, FetchPosition)>), ResponseError> {
        self.clock += 1;
        if epoch == FINAL_EPOCH || epoch == INITIAL_EPOCH {
            if session_id != 0 {
                self.sessions.remove(&session_id);
            }
            if epoch == FINAL_EPOCH || self.max_slots == 0 {
                return Ok((SessionMode::Sessionless, requested));
            }
            if self.sessions.len() >= self.max_slots {
                if let Some((&lru, _)) = self.sessions.iter().min_by_key(|(_, s)| s.last_used) {
                    self.sessions.remove(&lru);
                }
            }
            let id = self.allocate_id();
            let partitions = requested
                .iter()
                .map(|(k, p)| (k.clone(), (*p, None)))
                .collect();
            self.sessions.insert(
                id,
                Session {
                    partitions,
                    next_epoch: next_epoch(INITIAL_EPOCH),
                    last_used: self.clock,
                },
            );
            return Ok((SessionMode::New(id), requested));
        }
        let session = self
            .sessions
            .get_mut(&session_id)
            .ok_or(ResponseError::FetchSessionIdNotFound)?;
        if session.next_epoch != epoch {
            return Err(ResponseError::InvalidFetchSessionEpoch);
        }
        session.last_used = self.clock;
        for key in forgotten {
            session.partitions.shift_remove(key);
        }
        for (key, pos) in requested {
            match session.partitions.get_mut(&key) {
                Some(entry) => entry.0 = pos,
                None => {
                    session.partitions.insert(key, (pos, None));
                }
            }
        }
        let all = session
            .partitions
            .iter()
            .map(|(k, (p, _))| (k.clone(), *p))
            .collect();
        Ok((SessionMode::Incremental(session_id), all))
    }

    /// Records what was sent and advances the session epoch. Returns, for an incremental
    /// session, whether each partition must be included in the response.
    pub fn finish(
        &mut self,
        mode: &SessionMode,
        sent: &[(PartitionKey, SentState, bool)],
    ) -> Vec<bool> {
        let id = match mode {
            SessionMode::Sessionless => return vec![true; sent.len()],
            SessionMode::New(id) | SessionMode::Incremental(id) => *id,
        };
        let incremental = matches!(mode, SessionMode::Incremental(_));
        let Some(session) = self.sessions.get_mut(&id) else {
            return vec![true; sent.len()];
        };
        if incremental {
            session.next_epoch = next_epoch(session.next_epoch);
        }
        sent.iter()
            .map(
                |(key, state, has_news)| match session.partitions.get_mut(key) {
                    Some(entry) => {
                        let changed = entry.1 != Some(*state);
                        entry.1 = Some(*state);
                        !incremental || *has_news || changed
                    }
                    None => true,
                },
            )
            .collect()
    }

    fn allocate_id(&mut self) -> i32 {
        loop {
            let id = self.next_id;
            self.next_id = if self.next_id == i32::MAX {
                1
            } else {
                self.next_id + 1
            };
            if !self.sessions.contains_key(&id) {
                return id;
            }
        }
    }

    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::{LeaderEpoch, Offset};
    use kafka_protocol::protocol::StrBytes;

    fn key(p: i32) -> PartitionKey {
        (TopicName(StrBytes::from_static_str("t")), Uuid::nil(), p)
    }
    fn pos(o: i64) -> FetchPosition {
        FetchPosition {
            fetch_offset: Offset(o),
            partition_max_bytes: 1000,
            current_leader_epoch: LeaderEpoch(-1),
            last_fetched_epoch: LeaderEpoch(-1),
            log_start_offset: Offset(-1),
        }
    }
    fn state(hw: i64) -> SentState {
        SentState {
            high_watermark: hw,
            last_stable_offset: hw,
            log_start_offset: 0,
        }
    }

    #[test]
    fn a_session_carries_partitions_and_sends_only_changes() {
        let mut c = FetchSessionCache::new(10);
        let (mode, parts) = c
            .begin(0, 0, vec![(key(0), pos(0)), (key(1), pos(0))], &[])
            .unwrap();
        let SessionMode::New(id) = mode else {
            panic!("expected a new session")
        };
        assert_eq!(parts.len(), 2);
        assert_eq!(
            c.finish(
                &mode,
                &[(key(0), state(5), true), (key(1), state(0), false)]
            ),
            vec![true, true]
        );
        // Incremental with no partitions listed still reads both.
        let (mode, parts) = c.begin(id, 1, vec![], &[]).unwrap();
        assert_eq!(parts.len(), 2);
        // Partition 1 unchanged and empty: left out; partition 0 has records: included.
        assert_eq!(
            c.finish(
                &mode,
                &[(key(0), state(5), true), (key(1), state(0), false)]
            ),
            vec![true, false]
        );
        // Wrong epoch.
        assert_eq!(
            c.begin(id, 1, vec![], &[]).unwrap_err(),
            ResponseError::InvalidFetchSessionEpoch
        );
        // Forget partition 1.
        let (_, parts) = c.begin(id, 2, vec![(key(0), pos(7))], &[key(1)]).unwrap();
        assert_eq!(parts, vec![(key(0), pos(7))]);
        assert_eq!(
            c.begin(999, 1, vec![], &[]).unwrap_err(),
            ResponseError::FetchSessionIdNotFound
        );
    }

    #[test]
    fn the_least_recently_used_session_is_evicted() {
        let mut c = FetchSessionCache::new(2);
        let a = c.begin(0, 0, vec![], &[]).unwrap().0;
        let b = c.begin(0, 0, vec![], &[]).unwrap().0;
        let SessionMode::New(b_id) = b else { panic!() };
        c.begin(b_id, 1, vec![], &[]).unwrap();
        c.begin(0, 0, vec![], &[]).unwrap();
        assert_eq!(c.len(), 2);
        let SessionMode::New(a_id) = a else { panic!() };
        assert_eq!(
            c.begin(a_id, 1, vec![], &[]).unwrap_err(),
            ResponseError::FetchSessionIdNotFound
        );
    }
}
