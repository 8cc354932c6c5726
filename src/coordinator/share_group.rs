//! Share group membership (KIP-932): members join and leave through ShareGroupHeartbeat and
//! the coordinator hands each the partitions it fetches from, with Kafka's simple share
//! assignor. Unlike a consumer group, a partition may go to several members at once (records
//! are shared per record by the share-partition leader), so an assignment needs no
//! revocation: a member takes its new target at once, at the group epoch.
//!
//! Pure state: the coordinator calls it under its lock with a topic resolver.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use indexmap::IndexMap;
use kafka_protocol::ResponseError;
use uuid::Uuid;

use super::consumer_group::{Assignment, TopicResolver};

pub const ASSIGNOR: &str = "simple";
const LEAVE_EPOCH: i32 = -1;

pub struct ShareMember {
    pub member_id: String,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub member_epoch: i32,
    pub subscribed_topics: Vec<String>,
    pub assigned: Assignment,
    session_deadline: Instant,
    last_sent: Option<Assignment>,
}

#[derive(Default)]
pub struct ShareState {
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub members: IndexMap<String, ShareMember>,
    /// (topic name, id, partition count) of the subscribed topics when assigned.
    subscription_metadata: Vec<(String, Uuid, i32)>,
    /// Assignments computed (for metrics).
    pub rebalances: u64,
}

/// One heartbeat, decoded.
pub struct ShareHeartbeatIn {
    pub member_id: String,
    pub member_epoch: i32,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// `None`: unchanged.
    pub subscribed_topics: Option<Vec<String>>,
}

pub struct ShareHeartbeatOut {
    pub member_epoch: i32,
    /// `None`: unchanged since the last answer.
    pub assignment: Option<Assignment>,
}

impl ShareState {
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Kafka's share group states.
    pub fn state_name(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else {
            "Stable"
        }
    }

    pub fn heartbeat(
        &mut self,
        req: ShareHeartbeatIn,
        topics: TopicResolver<'_>,
        session_timeout: Duration,
        now: Instant,
    ) -> Result<ShareHeartbeatOut, ResponseError> {
        if req.member_id.is_empty() {
            return Err(ResponseError::InvalidRequest);
        }
        if req.member_epoch == LEAVE_EPOCH {
            if self.members.shift_remove(&req.member_id).is_some() {
                self.group_epoch += 1;
            }
            return Ok(ShareHeartbeatOut {
                member_epoch: LEAVE_EPOCH,
                assignment: None,
            });
        }
        if req.member_epoch == 0 {
            if req.subscribed_topics.as_ref().is_none_or(|t| t.is_empty()) {
                return Err(ResponseError::InvalidRequest);
            }
            if !self.members.contains_key(&req.member_id) {
                self.members.insert(
                    req.member_id.clone(),
                    ShareMember {
                        member_id: req.member_id.clone(),
                        rack_id: None,
                        client_id: String::new(),
                        client_host: String::new(),
                        member_epoch: 0,
                        subscribed_topics: Vec::new(),
                        assigned: Assignment::new(),
                        session_deadline: now,
                        last_sent: None,
                    },
                );
                self.group_epoch += 1;
            } else if let Some(m) = self.members.get_mut(&req.member_id) {
                // A member joining again starts over: it is sent its assignment.
                m.last_sent = None;
            }
        }
        let m = self
            .members
            .get_mut(&req.member_id)
            .ok_or(ResponseError::UnknownMemberId)?;
        if req.member_epoch > 0 && req.member_epoch != m.member_epoch {
            return Err(ResponseError::FencedMemberEpoch);
        }
        m.session_deadline = now + session_timeout;
        m.rack_id = req.rack_id.or(m.rack_id.take());
        m.client_id = req.client_id;
        m.client_host = req.client_host;
        if let Some(mut topics) = req.subscribed_topics {
            topics.sort();
            topics.dedup();
            if topics != m.subscribed_topics {
                m.subscribed_topics = topics;
                self.group_epoch += 1;
            }
        }
        self.assign_if_needed(topics);
        let m = self
            .members
            .get_mut(&req.member_id)
            .ok_or(ResponseError::UnknownMemberId)?;
        m.member_epoch = self.assignment_epoch;
        let assignment = (m.last_sent.as_ref() != Some(&m.assigned)).then(|| m.assigned.clone());
        if assignment.is_some() {
            m.last_sent = assignment.clone();
        }
        Ok(ShareHeartbeatOut {
            member_epoch: m.member_epoch,
            assignment,
        })
    }

    /// Removes members whose session expired. Returns whether any did.
    pub fn tick(&mut self, topics: TopicResolver<'_>, now: Instant) -> bool {
        let before = self.members.len();
        self.members.retain(|_, m| m.session_deadline > now);
        if self.members.len() == before {
            return false;
        }
        self.group_epoch += 1;
        self.assign_if_needed(topics);
        true
    }

    /// Recomputes the assignment when the group epoch moved or a subscribed topic changed
    /// (created, deleted, more partitions).
    fn assign_if_needed(&mut self, topics: TopicResolver<'_>) {
        let subscribed: BTreeSet<&String> = self
            .members
            .values()
            .flat_map(|m| m.subscribed_topics.iter())
            .collect();
        let metadata: Vec<(String, Uuid, i32)> = subscribed
            .into_iter()
            .filter_map(|t| topics(t).map(|(id, n)| (t.clone(), id, n)))
            .collect();
        if metadata != self.subscription_metadata {
            self.subscription_metadata = metadata;
            self.group_epoch += 1;
        }
        if self.assignment_epoch == self.group_epoch {
            return;
        }
        let target = simple_assignment(&self.members, &self.subscription_metadata);
        for (id, m) in self.members.iter_mut() {
            m.assigned = target.get(id).cloned().unwrap_or_default();
        }
        self.assignment_epoch = self.group_epoch;
        self.rebalances += 1;
    }
}

/// Kafka's simple share assignor, per topic: with no more members than partitions, each
/// partition goes to one member (round robin over the members in id order); with more
/// members, each member gets one partition and partitions are shared.
fn simple_assignment(
    members: &IndexMap<String, ShareMember>,
    topics: &[(String, Uuid, i32)],
) -> BTreeMap<String, Assignment> {
    let mut out: BTreeMap<String, Assignment> = BTreeMap::new();
    for (name, id, count) in topics {
        let mut subscribers: Vec<&String> = members
            .values()
            .filter(|m| m.subscribed_topics.contains(name))
            .map(|m| &m.member_id)
            .collect();
        subscribers.sort();
        let (m, p) = (subscribers.len(), (*count).max(0) as usize);
        if m == 0 || p == 0 {
            continue;
        }
        let mut give = |member: &String, partition: usize| {
            out.entry(member.clone())
                .or_default()
                .entry(*id)
                .or_default()
                .insert(partition as i32);
        };
        if m <= p {
            for partition in 0..p {
                give(subscribers[partition % m], partition);
            }
        } else {
            for (j, member) in subscribers.iter().enumerate() {
                give(member, j % p);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn join(
        s: &mut ShareState,
        id: &str,
        topics: &[&str],
        resolve: TopicResolver<'_>,
    ) -> ShareHeartbeatOut {
        s.heartbeat(
            ShareHeartbeatIn {
                member_id: id.into(),
                member_epoch: 0,
                rack_id: None,
                client_id: "c".into(),
                client_host: "/127.0.0.1".into(),
                subscribed_topics: Some(topics.iter().map(|t| t.to_string()).collect()),
            },
            resolve,
            Duration::from_secs(45),
            Instant::now(),
        )
        .unwrap()
    }

    #[test]
    fn members_share_a_partition_when_there_are_more_of_them() {
        let id = Uuid::new_v4();
        let resolve = move |name: &str| (name == "t").then_some((id, 1));
        let mut s = ShareState::default();
        let a = join(&mut s, "a", &["t"], &resolve);
        let b = join(&mut s, "b", &["t"], &resolve);
        let expected: Assignment = [(id, [0].into())].into();
        assert_eq!(a.assignment, Some(expected.clone()));
        assert_eq!(b.assignment, Some(expected.clone()));
        assert_eq!(s.members["a"].assigned, expected);
        assert_eq!(b.member_epoch, s.group_epoch);
    }

    #[test]
    fn partitions_are_spread_when_there_are_enough() {
        let id = Uuid::new_v4();
        let resolve = move |_: &str| Some((id, 4));
        let mut s = ShareState::default();
        join(&mut s, "a", &["t"], &resolve);
        join(&mut s, "b", &["t"], &resolve);
        let a = &s.members["a"].assigned[&id];
        let b = &s.members["b"].assigned[&id];
        assert_eq!(a.len() + b.len(), 4);
        assert!(a.is_disjoint(b));
    }

    #[test]
    fn a_stale_epoch_is_fenced_and_an_unknown_member_refused() {
        let resolve = |_: &str| Some((Uuid::nil(), 1));
        let mut s = ShareState::default();
        let a = join(&mut s, "a", &["t"], &resolve);
        let hb = |epoch, id: &str| ShareHeartbeatIn {
            member_id: id.into(),
            member_epoch: epoch,
            rack_id: None,
            client_id: "c".into(),
            client_host: "h".into(),
            subscribed_topics: None,
        };
        let now = Instant::now();
        let t = Duration::from_secs(45);
        assert_eq!(
            s.heartbeat(hb(a.member_epoch + 5, "a"), &resolve, t, now)
                .err(),
            Some(ResponseError::FencedMemberEpoch)
        );
        assert_eq!(
            s.heartbeat(hb(3, "nobody"), &resolve, t, now).err(),
            Some(ResponseError::UnknownMemberId)
        );
        let ok = s
            .heartbeat(hb(a.member_epoch, "a"), &resolve, t, now)
            .unwrap();
        assert_eq!(
            ok.assignment, None,
            "unchanged assignments are not sent again"
        );
        assert_eq!(
            s.heartbeat(hb(-1, "a"), &resolve, t, now)
                .unwrap()
                .member_epoch,
            -1
        );
        assert!(s.is_empty());
    }
}
