//! Broker sessions, kept in the active controller's memory rather than in the log.
//!
//! A broker heartbeats every `broker.heartbeat.interval.ms`. Writing each heartbeat to the
//! metadata log made an idle cluster append, replicate and fsync an entry per broker per
//! interval on every voter (and rewrite openraft's committed-index file on each commit).
//! Kafka's controller keeps heartbeat times in memory (`BrokerHeartbeatManager`) and writes
//! only registrations and fence/unfence changes; so does this crate:
//! - a heartbeat is a leader-only request ([`heartbeat_on_leader`]): the leader checks the
//!   broker's id and epoch against its applied state and records the time it received the
//!   heartbeat, on its own clock, in [`Sessions`];
//! - the controller fences a broker when the newest of that time, its registration time and
//!   the moment this node became leader is older than the session timeout. A new leader
//!   knows no heartbeat yet and so gives every broker a full session, as Kafka's does.
//!
//! A leader answers heartbeats only once it has applied an entry of its own term (so every
//! entry committed before its election, registrations included, is in its state); until
//! then it answers "not leader" and the broker retries, instead of being told it is not
//! registered.
//!
//! Heartbeats are idempotent, so a forwarding node may resend one over a kept connection
//! whatever became of the previous attempt (see [`crate::node`]).

use std::collections::HashMap;
use std::sync::Mutex;

use openraft::Raft;
use tokio::sync::watch;

use crate::command::{CommandResult, Response};
use crate::ids::{BrokerEpoch, BrokerId};
use crate::network::{LeaderError, LeaderReply};
use crate::store::MetadataImage;
use crate::TypeConfig;

/// When the active controller last heard from each broker (wall-clock ms, on its clock).
#[derive(Debug, Default)]
pub struct Sessions {
    last_contact_ms: Mutex<HashMap<BrokerId, i64>>,
}

impl Sessions {
    /// Records a heartbeat of `id` received at `now_ms`.
    pub fn record(&self, id: BrokerId, now_ms: i64) {
        let mut last = self
            .last_contact_ms
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let entry = last.entry(id).or_insert(now_ms);
        *entry = (*entry).max(now_ms);
    }

    /// When this node last received a heartbeat of `id` (as leader, in any term).
    pub fn last_contact_ms(&self, id: BrokerId) -> Option<i64> {
        self.last_contact_ms
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
            .copied()
    }
}

/// The wall clock in ms since the Unix epoch.
pub(crate) fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Handles a broker heartbeat if this node is the leader and has applied an entry of its
/// term: checks the registration, records the contact and answers
/// [`Response::HeartbeatAccepted`] (or the registration error) in
/// [`LeaderReply::Heartbeat`]. Writes nothing to the log.
pub(crate) fn heartbeat_on_leader(
    raft: &Raft<TypeConfig>,
    images: &watch::Receiver<MetadataImage>,
    sessions: &Sessions,
    id: BrokerId,
    broker_epoch: BrokerEpoch,
) -> Result<LeaderReply, LeaderError> {
    {
        let metrics = raft.metrics();
        let m = metrics.borrow();
        if m.current_leader != Some(m.id) {
            let leader_addr = m.current_leader.and_then(|leader| {
                m.membership_config
                    .membership()
                    .get_node(&leader)
                    .map(|node| node.addr.clone())
            });
            return Err(LeaderError::NotLeader {
                leader_id: m.current_leader,
                leader_addr,
            });
        }
        let caught_up = m
            .last_applied
            .is_some_and(|applied| applied.leader_id.term == m.current_term);
        if !caught_up {
            // Leading, but entries of earlier terms may not be applied yet: retriable.
            return Err(LeaderError::NotLeader {
                leader_id: None,
                leader_addr: None,
            });
        }
    }
    let state = images.borrow().state.clone();
    let result: CommandResult =
        state
            .broker_checked(id, broker_epoch)
            .map(|broker| Response::HeartbeatAccepted {
                fenced: broker.fenced,
            });
    if result.is_ok() {
        sessions.record(id, wall_clock_ms());
    }
    Ok(LeaderReply::Heartbeat { result })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contact_times_only_move_forward() {
        let sessions = Sessions::default();
        assert_eq!(sessions.last_contact_ms(BrokerId(1)), None);
        sessions.record(BrokerId(1), 2_000);
        sessions.record(BrokerId(1), 1_500);
        assert_eq!(sessions.last_contact_ms(BrokerId(1)), Some(2_000));
        sessions.record(BrokerId(1), 2_500);
        assert_eq!(sessions.last_contact_ms(BrokerId(1)), Some(2_500));
        assert_eq!(sessions.last_contact_ms(BrokerId(2)), None);
    }
}
