//! Share sessions (KIP-932): per (group, member), the share-partitions a share consumer
//! fetches from this broker and the epoch its next request must carry.
//!
//! Epoch 0 opens a session (replacing one the member had), -1 closes it (its last
//! acknowledgements, no fetch), and any other epoch must be the session's next one. As
//! Kafka's share session cache: SHARE_SESSION_NOT_FOUND without a session,
//! INVALID_SHARE_SESSION_EPOCH for another epoch, SHARE_SESSION_LIMIT_REACHED when the cache
//! is full.
//!
//! A session belongs to the connection that last used it: when that connection closes, the
//! session ends and its member's acquired records are released (as Kafka does), instead of
//! waiting for their locks to expire.

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;

use kafka_protocol::ResponseError;
use uuid::Uuid;

/// Epoch that opens a session.
pub const INITIAL_EPOCH: i32 = 0;
/// Epoch that closes a session.
pub const FINAL_EPOCH: i32 = -1;

pub type SessionKey = (String, String);

#[derive(Debug, Default)]
struct Session {
    /// The epoch the next request must carry.
    next_epoch: i32,
    partitions: BTreeSet<(Uuid, i32)>,
    /// The client connection that last used the session.
    connection: Option<SocketAddr>,
}

/// What a request did to its session.
#[derive(Debug, PartialEq, Eq)]
pub enum Begun {
    /// The session's share-partitions, to fetch from.
    Open(Vec<(Uuid, i32)>),
    /// The session was closed (epoch -1): the member's acquired records are released.
    Closed,
}

pub struct ShareSessions {
    sessions: HashMap<SessionKey, Session>,
    max_sessions: usize,
}

fn next(epoch: i32) -> i32 {
    if epoch == i32::MAX {
        1
    } else {
        epoch + 1
    }
}

impl ShareSessions {
    pub fn new(max_sessions: usize) -> ShareSessions {
        ShareSessions {
            sessions: HashMap::new(),
            max_sessions,
        }
    }

    /// Checks `epoch` against the member's session and applies the request's added and
    /// forgotten share-partitions.
    pub fn begin(
        &mut self,
        key: SessionKey,
        epoch: i32,
        added: &[(Uuid, i32)],
        forgotten: &[(Uuid, i32)],
        connection: SocketAddr,
    ) -> Result<Begun, ResponseError> {
        match epoch {
            INITIAL_EPOCH => {
                if !self.sessions.contains_key(&key) && self.sessions.len() >= self.max_sessions {
                    return Err(ResponseError::ShareSessionLimitReached);
                }
                let s = Session {
                    next_epoch: 1,
                    partitions: added.iter().copied().collect(),
                    connection: Some(connection),
                };
                let partitions = s.partitions.iter().copied().collect();
                self.sessions.insert(key, s);
                Ok(Begun::Open(partitions))
            }
            FINAL_EPOCH => match self.sessions.remove(&key) {
                Some(_) => Ok(Begun::Closed),
                None => Err(ResponseError::ShareSessionNotFound),
            },
            e => {
                let s = self
                    .sessions
                    .get_mut(&key)
                    .ok_or(ResponseError::ShareSessionNotFound)?;
                if e != s.next_epoch {
                    return Err(ResponseError::InvalidShareSessionEpoch);
                }
                s.next_epoch = next(e);
                s.connection = Some(connection);
                s.partitions.extend(added.iter().copied());
                for f in forgotten {
                    s.partitions.remove(f);
                }
                Ok(Begun::Open(s.partitions.iter().copied().collect()))
            }
        }
    }

    /// Checks a ShareAcknowledge's epoch (it neither adds nor forgets partitions).
    pub fn acknowledge(
        &mut self,
        key: SessionKey,
        epoch: i32,
        connection: SocketAddr,
    ) -> Result<Begun, ResponseError> {
        if epoch == INITIAL_EPOCH {
            return Err(ResponseError::InvalidShareSessionEpoch);
        }
        self.begin(key, epoch, &[], &[], connection)
    }

    /// Whether a session belongs to `connection`.
    pub fn uses(&self, connection: SocketAddr) -> bool {
        self.sessions
            .values()
            .any(|s| s.connection == Some(connection))
    }

    /// Ends the sessions of a closed connection; returns their (group, member) keys.
    pub fn connection_closed(&mut self, connection: SocketAddr) -> Vec<SessionKey> {
        let keys: Vec<SessionKey> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.connection == Some(connection))
            .map(|(k, _)| k.clone())
            .collect();
        for k in &keys {
            self.sessions.remove(k);
        }
        keys
    }

    /// Whether any member of `group` has a share session here.
    pub fn has_group(&self, group: &str) -> bool {
        self.sessions.keys().any(|(g, _)| g == group)
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

    fn key() -> SessionKey {
        ("g".into(), "m".into())
    }

    fn conn() -> SocketAddr {
        "127.0.0.1:5000".parse().unwrap()
    }

    #[test]
    fn epochs_follow_kafkas_rules() {
        let mut s = ShareSessions::new(2);
        let tp = (Uuid::new_v4(), 0);
        assert_eq!(
            s.begin(key(), 1, &[tp], &[], conn()),
            Err(ResponseError::ShareSessionNotFound)
        );
        assert_eq!(
            s.begin(key(), 0, &[tp], &[], conn()),
            Ok(Begun::Open(vec![tp]))
        );
        assert_eq!(
            s.begin(key(), 2, &[], &[], conn()),
            Err(ResponseError::InvalidShareSessionEpoch)
        );
        assert_eq!(
            s.begin(key(), 1, &[], &[], conn()),
            Ok(Begun::Open(vec![tp]))
        );
        assert_eq!(s.acknowledge(key(), 2, conn()), Ok(Begun::Open(vec![tp])));
        assert_eq!(
            s.begin(key(), 3, &[], &[tp], conn()),
            Ok(Begun::Open(vec![]))
        );
        assert_eq!(s.begin(key(), -1, &[], &[], conn()), Ok(Begun::Closed));
        assert_eq!(
            s.begin(key(), -1, &[], &[], conn()),
            Err(ResponseError::ShareSessionNotFound)
        );
    }

    #[test]
    fn the_cache_is_bounded() {
        let mut s = ShareSessions::new(1);
        s.begin(key(), 0, &[], &[], conn()).unwrap();
        assert_eq!(
            s.begin(("g".into(), "other".into()), 0, &[], &[], conn()),
            Err(ResponseError::ShareSessionLimitReached)
        );
        assert!(
            s.begin(key(), 0, &[], &[], conn()).is_ok(),
            "a member may reopen its own"
        );
    }

    #[test]
    fn a_closed_connection_ends_its_sessions_only() {
        let mut s = ShareSessions::new(10);
        let other: SocketAddr = "127.0.0.1:6000".parse().unwrap();
        s.begin(key(), 0, &[], &[], conn()).unwrap();
        s.begin(("g".into(), "n".into()), 0, &[], &[], other)
            .unwrap();
        assert!(s.uses(conn()));
        assert_eq!(s.connection_closed(conn()), vec![key()]);
        assert!(!s.uses(conn()));
        assert_eq!(s.len(), 1);
    }
}
