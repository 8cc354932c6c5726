//! The consumer group protocol (KIP-848): the broker computes assignments and each member
//! reconciles toward its target through ConsumerGroupHeartbeat.
//!
//! Epochs: the group epoch rises on every membership or subscription change; the target
//! assignment is recomputed at that epoch (the assignment epoch). A member moves to the
//! assignment epoch once it holds no partition outside its target: partitions to revoke are
//! taken away first and the member keeps its epoch until it reports (in `topic_partitions`)
//! that it released them; partitions still held by others are handed over as they are
//! released. Pure state: the coordinator calls it under its lock with a topic resolver.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indexmap::IndexMap;
use kafka_protocol::ResponseError;
use uuid::Uuid;

pub mod classic;
pub mod records;

/// topic id -> partitions
pub type Assignment = BTreeMap<Uuid, BTreeSet<i32>>;

pub const ASSIGNORS: [&str; 2] = ["uniform", "range"];

pub struct ConsumerMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    pub rebalance_timeout: Duration,
    pub subscribed_topics: Vec<String>,
    /// The member's topic regular expression (RE2 syntax, matched against whole names).
    pub subscribed_regex: Option<String>,
    /// The topics its regex matched, among those it may describe, when last resolved.
    pub regex_topics: BTreeSet<String>,
    regex_resolved_at: Option<Instant>,
    pub server_assignor: Option<String>,
    /// What the member holds, as far as the coordinator has told it.
    pub assigned: Assignment,
    /// Partitions taken away and not yet confirmed released.
    pub pending_revocation: Assignment,
    pub revocation_deadline: Option<Instant>,
    pub session_deadline: Instant,
    /// The assignment last sent, to answer `null` (unchanged) otherwise.
    last_sent: Option<Assignment>,
    /// Set for a member of the classic protocol (JoinGroup, SyncGroup, Heartbeat) inside
    /// the group ([`classic`]).
    pub classic: Option<classic::ClassicMember>,
}

#[derive(Default)]
pub struct ConsumerState {
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub members: IndexMap<String, ConsumerMember>,
    pub target: BTreeMap<String, Assignment>,
    /// (topic name, id, partition count) of the subscribed topics when the target was made.
    subscription_metadata: Vec<(String, Uuid, i32)>,
    pub assignor: String,
    /// Target assignments computed (for metrics).
    pub rebalances: u64,
    /// The records last written to `__consumer_offsets` ([`records`]).
    persisted: records::Image,
    /// What changed since they were written.
    touched: Touched,
    /// The hash of the subscribed topics a load found; the first heartbeat after it compares
    /// the topics with it instead of with the (unknown) topics of the last assignment.
    loaded_metadata_hash: Option<i64>,
    /// Serializes the group's writes, so they reach the log in the order they were taken.
    pub writer: Arc<Mutex<()>>,
    /// The group was converted from a classic group whose record its next write deletes.
    pub(crate) replaces_classic: bool,
    /// A consumer-protocol member left and every member left speaks the classic protocol:
    /// the coordinator converts the group back to a classic group ([`classic`]).
    pub(crate) downgrade_due: bool,
}

/// The parts of a group changed since its records were last written.
#[derive(Default)]
struct Touched {
    /// The group epoch moved (every member's target may have), or a member was replaced.
    all: bool,
    members: BTreeSet<String>,
}

/// One heartbeat, decoded.
pub struct HeartbeatIn {
    pub member_id: String,
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout: Duration,
    pub subscribed_topics: Option<Vec<String>>,
    /// `None`: unchanged; `Some("")`: no regex any more.
    pub subscribed_regex: Option<String>,
    pub server_assignor: Option<String>,
    pub owned: Option<Assignment>,
}

pub struct HeartbeatOut {
    pub member_id: String,
    pub member_epoch: i32,
    /// `None`: unchanged since the last answer.
    pub assignment: Option<Assignment>,
}

/// Resolves a topic name to (id, partition count).
pub type TopicResolver<'a> = &'a dyn Fn(&str) -> Option<(Uuid, i32)>;

/// The topics a regular expression matches that the heartbeating member may describe.
pub type RegexResolver<'a> = &'a dyn Fn(&str) -> BTreeSet<String>;

/// How often a member's regex is resolved again (new or deleted topics), as Kafka's
/// `REGEX_BATCH_REFRESH_INTERVAL_MS`; a changed regex is resolved at once.
pub const REGEX_REFRESH_INTERVAL: Duration = Duration::from_secs(10);

impl ConsumerMember {
    /// Whether the member subscribes to `topic`, by name or through its regex.
    pub fn subscribes_to(&self, topic: &str) -> bool {
        self.regex_topics.contains(topic) || self.subscribed_topics.iter().any(|t| t == topic)
    }

    /// What the member says it owns: once none of the partitions it had to give up is among
    /// them, they are released.
    fn note_owned(&mut self, owned: &Assignment) {
        if !intersects(owned, &self.pending_revocation) {
            self.pending_revocation.clear();
            self.revocation_deadline = None;
        }
    }

    fn topic_names(&self) -> impl Iterator<Item = &String> {
        self.subscribed_topics
            .iter()
            .chain(self.regex_topics.iter())
    }

    /// Resolves the regex again when it changed or its last resolution is older than
    /// [`REGEX_REFRESH_INTERVAL`]; returns whether the topics it matches changed.
    fn refresh_regex(&mut self, resolve: RegexResolver<'_>, now: Instant) -> bool {
        let Some(regex) = &self.subscribed_regex else {
            self.regex_resolved_at = None;
            return !std::mem::take(&mut self.regex_topics).is_empty();
        };
        if self
            .regex_resolved_at
            .is_some_and(|at| now < at + REGEX_REFRESH_INTERVAL)
        {
            return false;
        }
        self.regex_resolved_at = Some(now);
        let topics = resolve(regex);
        if topics == self.regex_topics {
            return false;
        }
        self.regex_topics = topics;
        true
    }
}

const LEAVE_EPOCH: i32 = -1;
const STATIC_LEAVE_EPOCH: i32 = -2;

fn subtract(a: &Assignment, b: &Assignment) -> Assignment {
    let mut out = Assignment::new();
    for (t, ps) in a {
        let rest: BTreeSet<i32> = ps
            .iter()
            .filter(|p| !b.get(t).is_some_and(|bp| bp.contains(p)))
            .copied()
            .collect();
        if !rest.is_empty() {
            out.insert(*t, rest);
        }
    }
    out
}

fn union_into(a: &mut Assignment, b: &Assignment) {
    for (t, ps) in b {
        a.entry(*t).or_default().extend(ps.iter().copied());
    }
}

fn intersects(a: &Assignment, b: &Assignment) -> bool {
    a.iter()
        .any(|(t, ps)| b.get(t).is_some_and(|bp| ps.iter().any(|p| bp.contains(p))))
}

impl ConsumerState {
    pub fn new() -> Self {
        ConsumerState {
            assignor: ASSIGNORS[0].to_string(),
            ..Default::default()
        }
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Kafka's consumer group states.
    pub fn state_name(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else if self.assignment_epoch < self.group_epoch {
            "Assigning"
        } else if self
            .members
            .values()
            .filter(|m| m.member_epoch != STATIC_LEAVE_EPOCH)
            .any(|m| {
                m.member_epoch != self.assignment_epoch
                    || self.target.get(&m.member_id) != Some(&m.assigned)
            })
        {
            "Reconciling"
        } else {
            "Stable"
        }
    }

    pub fn heartbeat(
        &mut self,
        req: HeartbeatIn,
        topics: TopicResolver<'_>,
        regex_topics: RegexResolver<'_>,
        session_timeout: Duration,
        now: Instant,
    ) -> Result<HeartbeatOut, ResponseError> {
        if let Some(a) = &req.server_assignor {
            if !ASSIGNORS.contains(&a.as_str()) {
                return Err(ResponseError::UnsupportedAssignor);
            }
        }
        // Leaving.
        if req.member_epoch == STATIC_LEAVE_EPOCH {
            // A static member leaving temporarily keeps its assignment until its session
            // expires, so the same instance can come back without a rebalance.
            let m = self
                .members
                .get_mut(&req.member_id)
                .ok_or(ResponseError::UnknownMemberId)?;
            if m.instance_id.is_some() {
                m.member_epoch = STATIC_LEAVE_EPOCH;
                m.session_deadline = now + session_timeout;
                self.touched.members.insert(req.member_id.clone());
                return Ok(HeartbeatOut {
                    member_id: req.member_id,
                    member_epoch: STATIC_LEAVE_EPOCH,
                    assignment: None,
                });
            }
        }
        if req.member_epoch == LEAVE_EPOCH || req.member_epoch == STATIC_LEAVE_EPOCH {
            if self.members.shift_remove(&req.member_id).is_none() {
                return Err(ResponseError::UnknownMemberId);
            }
            self.target.remove(&req.member_id);
            self.bump_and_assign(topics);
            self.note_departure(true);
            return Ok(HeartbeatOut {
                member_id: req.member_id,
                member_epoch: req.member_epoch,
                assignment: None,
            });
        }
        let member_id = if req.member_id.is_empty() {
            uuid::Uuid::new_v4().to_string()
        } else {
            req.member_id.clone()
        };
        let mut changed = false;
        self.touched.members.insert(member_id.clone());
        if req.member_epoch == 0 {
            changed |= self.join(&req, &member_id, session_timeout, now)?;
        } else {
            let m = self
                .members
                .get(&member_id)
                .ok_or(ResponseError::UnknownMemberId)?;
            if req.member_epoch != m.member_epoch && req.member_epoch != m.previous_member_epoch {
                return Err(ResponseError::FencedMemberEpoch);
            }
            if req.member_epoch == m.previous_member_epoch && req.member_epoch != m.member_epoch {
                // The member missed our last answer: resend it in full.
                if let Some(m) = self.members.get_mut(&member_id) {
                    m.last_sent = None;
                }
            }
        }
        let m = self
            .members
            .get_mut(&member_id)
            .ok_or(ResponseError::UnknownMemberId)?;
        m.session_deadline = now + session_timeout;
        if req.rebalance_timeout > Duration::ZERO {
            m.rebalance_timeout = req.rebalance_timeout;
        }
        if let Some(topics) = &req.subscribed_topics {
            if *topics != m.subscribed_topics {
                m.subscribed_topics = topics.clone();
                changed = true;
            }
        }
        if let Some(regex) = &req.subscribed_regex {
            let regex = (!regex.is_empty()).then(|| regex.clone());
            if regex != m.subscribed_regex {
                m.subscribed_regex = regex;
                m.regex_resolved_at = None;
            }
        }
        changed |= m.refresh_regex(regex_topics, now);
        if let Some(a) = &req.server_assignor {
            if m.server_assignor.as_ref() != Some(a) {
                m.server_assignor = Some(a.clone());
                changed = true;
            }
        }
        if let Some(owned) = &req.owned {
            m.note_owned(owned);
        }
        if changed || self.metadata_changed(topics) {
            self.bump_and_assign(topics);
        }
        self.reconcile(&member_id, now);
        let m = self
            .members
            .get_mut(&member_id)
            .ok_or(ResponseError::UnknownMemberId)?;
        let assignment = if m.last_sent.as_ref() != Some(&m.assigned) {
            m.last_sent = Some(m.assigned.clone());
            Some(m.assigned.clone())
        } else {
            None
        };
        Ok(HeartbeatOut {
            member_id,
            member_epoch: m.member_epoch,
            assignment,
        })
    }

    /// A member (re)joining with epoch 0; a static member takes over its previous
    /// incarnation's place (same assignment and target, no new group epoch) once that one has
    /// left temporarily. Returns whether the group's membership changed.
    fn join(
        &mut self,
        req: &HeartbeatIn,
        member_id: &str,
        session_timeout: Duration,
        now: Instant,
    ) -> Result<bool, ResponseError> {
        let member_id = member_id.to_string();
        // A (re)joining member; a static member takes over its previous incarnation.
        let mut taken_over = false;
        if let Some(instance) = &req.instance_id {
            let old = self
                .members
                .values()
                .find(|m| {
                    m.instance_id.as_deref() == Some(instance.as_str()) && m.member_id != member_id
                })
                .map(|m| m.member_id.clone());
            if let Some(old) = old {
                // A classic member is replaced at once, as Kafka does when a static member
                // restarts with the consumer protocol (a rolling upgrade).
                let released = self
                    .members
                    .get(&old)
                    .is_some_and(|m| m.member_epoch == STATIC_LEAVE_EPOCH || m.classic.is_some());
                if !released {
                    // The previous incarnation is still a live member.
                    return Err(ResponseError::UnreleasedInstanceId);
                }
                // Take over its place: same assignment and target, no new group epoch.
                let epochs = (self.assignment_epoch, -1);
                if let Some(m) = self.take_over(&old, &member_id, epochs) {
                    m.client_id = req.client_id.clone();
                    m.client_host = req.client_host.clone();
                    m.session_deadline = now + session_timeout;
                    m.classic = None;
                    taken_over = true;
                }
            }
        }
        let subscribed = req.subscribed_topics.clone().unwrap_or_default();
        let changed = match self.members.get_mut(&member_id) {
            Some(_) if taken_over => false,
            Some(m) => {
                // Rejoin after a fence: start over.
                m.assigned.clear();
                m.pending_revocation.clear();
                m.member_epoch = 0;
                m.last_sent = None;
                false
            }
            None => {
                self.members.insert(
                    member_id.clone(),
                    ConsumerMember {
                        member_id: member_id.clone(),
                        instance_id: req.instance_id.clone(),
                        rack_id: req.rack_id.clone(),
                        client_id: req.client_id.clone(),
                        client_host: req.client_host.clone(),
                        member_epoch: 0,
                        previous_member_epoch: -1,
                        rebalance_timeout: req.rebalance_timeout,
                        subscribed_topics: subscribed,
                        subscribed_regex: None,
                        regex_topics: BTreeSet::new(),
                        regex_resolved_at: None,
                        server_assignor: req.server_assignor.clone(),
                        assigned: Assignment::new(),
                        pending_revocation: Assignment::new(),
                        revocation_deadline: None,
                        session_deadline: now + session_timeout,
                        last_sent: None,
                        classic: None,
                    },
                );
                true
            }
        };
        Ok(changed)
    }

    /// Moves member `old`'s place, assignment and target to `new`, a static member's new
    /// incarnation, at `(member epoch, previous epoch)`; it releases nothing it was giving
    /// up (the old process is gone) and gets its assignment in full. `None` without `old`.
    fn take_over(
        &mut self,
        old: &str,
        new: &str,
        (epoch, previous): (i32, i32),
    ) -> Option<&mut ConsumerMember> {
        let mut m = self.members.shift_remove(old)?;
        let target = self.target.remove(old).unwrap_or_default();
        m.member_id = new.to_string();
        m.member_epoch = epoch;
        m.previous_member_epoch = previous;
        m.last_sent = None;
        m.pending_revocation.clear();
        m.revocation_deadline = None;
        self.target.insert(new.to_string(), target);
        self.touched.all = true;
        self.members.insert(new.to_string(), m);
        self.members.get_mut(new)
    }

    fn subscription_metadata(&self, topics: TopicResolver<'_>) -> Vec<(String, Uuid, i32)> {
        let names: BTreeSet<&String> = self
            .members
            .values()
            .flat_map(|m| m.topic_names())
            .collect();
        names
            .into_iter()
            .filter_map(|n| topics(n).map(|(id, count)| (n.clone(), id, count)))
            .collect()
    }

    fn metadata_changed(&mut self, topics: TopicResolver<'_>) -> bool {
        let current = self.subscription_metadata(topics);
        if let Some(hash) = self.loaded_metadata_hash.take() {
            // Loaded: the topics of the last assignment are known by their hash only.
            if records::metadata_hash(&current) == hash {
                self.subscription_metadata = current;
                return false;
            }
            return true;
        }
        current != self.subscription_metadata
    }

    /// A new group epoch and a new target assignment.
    fn bump_and_assign(&mut self, topics: TopicResolver<'_>) {
        self.touched.all = true;
        self.loaded_metadata_hash = None;
        self.rebalances += 1;
        self.group_epoch += 1;
        self.subscription_metadata = self.subscription_metadata(topics);
        if let Some(a) = self
            .members
            .values()
            .filter_map(|m| m.server_assignor.clone())
            .next()
        {
            self.assignor = a;
        }
        self.target = self.compute_target();
        self.assignment_epoch = self.group_epoch;
    }

    fn compute_target(&self) -> BTreeMap<String, Assignment> {
        let mut target: BTreeMap<String, Assignment> = self
            .members
            .keys()
            .map(|k| (k.clone(), Assignment::new()))
            .collect();
        for (name, id, count) in &self.subscription_metadata {
            let mut subscribers: Vec<&String> = self
                .members
                .values()
                .filter(|m| m.subscribes_to(name))
                .map(|m| &m.member_id)
                .collect();
            subscribers.sort();
            if subscribers.is_empty() {
                continue;
            }
            let n = subscribers.len() as i32;
            if self.assignor == "range" {
                // Contiguous ranges per topic, as the range assignor.
                let per = *count / n;
                let extra = *count % n;
                let mut start = 0;
                for (i, m) in subscribers.iter().enumerate() {
                    let len = per + if (i as i32) < extra { 1 } else { 0 };
                    let set: BTreeSet<i32> = (start..start + len).collect();
                    if !set.is_empty() {
                        target.entry((*m).clone()).or_default().insert(*id, set);
                    }
                    start += len;
                }
                continue;
            }
            // Uniform: keep each partition with its current target owner while that owner is
            // under its quota, then hand out the rest to the least loaded.
            let quota_floor = *count / n;
            let extra = (*count % n) as usize;
            let mut load: BTreeMap<&String, i32> = subscribers.iter().map(|m| (*m, 0)).collect();
            let mut extras_used = 0usize;
            let mut unassigned = Vec::new();
            for p in 0..*count {
                let current = self
                    .target
                    .iter()
                    .find(|(m, a)| {
                        load.contains_key(m) && a.get(id).is_some_and(|ps| ps.contains(&p))
                    })
                    .map(|(m, _)| m);
                match current {
                    Some(m) => {
                        let l = load[m];
                        let allowed = quota_floor + if extras_used < extra { 1 } else { 0 };
                        if l < quota_floor || (l < allowed && l == quota_floor) {
                            if l == quota_floor {
                                extras_used += 1;
                            }
                            *load.get_mut(m).expect("subscriber") += 1;
                            target
                                .entry(m.clone())
                                .or_default()
                                .entry(*id)
                                .or_default()
                                .insert(p);
                        } else {
                            unassigned.push(p);
                        }
                    }
                    None => unassigned.push(p),
                }
            }
            for p in unassigned {
                let (m, _) = load
                    .iter()
                    .filter(|(_, l)| {
                        **l < quota_floor || (**l == quota_floor && extras_used < extra)
                    })
                    .min_by_key(|(m, l)| (**l, m.to_string()))
                    .map(|(m, l)| ((*m).clone(), *l))
                    .unwrap_or_else(|| (subscribers[0].clone(), 0));
                let l = load[&m];
                if l == quota_floor {
                    extras_used += 1;
                }
                *load.get_mut(&m).expect("subscriber") += 1;
                target
                    .entry(m)
                    .or_default()
                    .entry(*id)
                    .or_default()
                    .insert(p);
            }
        }
        target
    }

    /// Moves one member toward its target.
    fn reconcile(&mut self, member_id: &str, now: Instant) {
        let target = self.target.get(member_id).cloned().unwrap_or_default();
        // Partitions others still hold or are releasing.
        let mut held_by_others = Assignment::new();
        for (id, m) in &self.members {
            if id != member_id {
                union_into(&mut held_by_others, &m.assigned);
                union_into(&mut held_by_others, &m.pending_revocation);
            }
        }
        let assignment_epoch = self.assignment_epoch;
        let Some(m) = self.members.get_mut(member_id) else {
            return;
        };
        if !m.pending_revocation.is_empty() {
            return;
        }
        let revoke = subtract(&m.assigned, &target);
        if !revoke.is_empty() {
            m.assigned = subtract(&m.assigned, &revoke);
            m.pending_revocation = revoke;
            m.revocation_deadline = Some(now + m.rebalance_timeout);
            return;
        }
        if m.member_epoch != assignment_epoch {
            m.previous_member_epoch = m.member_epoch;
            m.member_epoch = assignment_epoch;
        }
        let add = subtract(&subtract(&target, &m.assigned), &held_by_others);
        union_into(&mut m.assigned, &add);
    }

    /// Expires members whose session lapsed or that did not release partitions in time.
    /// Returns true if membership changed.
    pub fn tick(&mut self, topics: TopicResolver<'_>, now: Instant) -> bool {
        let expired: Vec<String> = self
            .members
            .values()
            .filter(|m| {
                m.session_deadline <= now
                    || m.revocation_deadline.is_some_and(|d| d <= now)
                    || m.classic.as_ref().is_some_and(|c| c.expired(now))
            })
            .map(|m| m.member_id.clone())
            .collect();
        if expired.is_empty() {
            return false;
        }
        let mut consumer_left = false;
        for id in &expired {
            tracing::info!(member = %id, "consumer group member expired");
            if let Some(m) = self.members.shift_remove(id) {
                consumer_left |= m.classic.is_none();
            }
            self.target.remove(id);
        }
        self.bump_and_assign(topics);
        self.note_departure(consumer_left);
        true
    }

    pub fn member_epoch(&self, member_id: &str) -> Option<i32> {
        self.members.get(member_id).map(|m| m.member_epoch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topics(name: &str) -> Option<(Uuid, i32)> {
        match name {
            "t" => Some((Uuid::from_u128(1), 6)),
            _ => None,
        }
    }

    fn hb(member: &str, epoch: i32, owned: Option<Assignment>) -> HeartbeatIn {
        HeartbeatIn {
            member_id: member.into(),
            member_epoch: epoch,
            instance_id: None,
            rack_id: None,
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            rebalance_timeout: Duration::from_secs(30),
            subscribed_topics: if epoch == 0 {
                Some(vec!["t".into()])
            } else {
                None
            },
            subscribed_regex: None,
            server_assignor: None,
            owned,
        }
    }

    fn no_regex(_: &str) -> BTreeSet<String> {
        BTreeSet::new()
    }

    fn count(a: &Option<Assignment>) -> usize {
        a.as_ref()
            .map(|a| a.values().map(|s| s.len()).sum())
            .unwrap_or(0)
    }

    #[test]
    fn two_members_split_partitions_with_revocation_before_reassignment() {
        let now = Instant::now();
        let s = Duration::from_secs(45);
        let mut g = ConsumerState::new();
        let a = g
            .heartbeat(hb("a", 0, None), &topics, &no_regex, s, now)
            .unwrap();
        assert_eq!((a.member_epoch, count(&a.assignment)), (1, 6));
        let a_owned = a.assignment.clone();
        // b joins: a must give up three partitions before b gets them.
        let b = g
            .heartbeat(hb("b", 0, None), &topics, &no_regex, s, now)
            .unwrap();
        assert_eq!(b.member_epoch, 2);
        assert_eq!(count(&b.assignment), 0, "b waits for a's partitions");
        let a2 = g
            .heartbeat(hb("a", 1, a_owned), &topics, &no_regex, s, now)
            .unwrap();
        assert_eq!(a2.member_epoch, 1, "a keeps its epoch until it releases");
        assert_eq!(count(&a2.assignment), 3);
        assert_eq!(g.state_name(), "Reconciling");
        let a3 = g
            .heartbeat(
                hb("a", 1, a2.assignment.clone()),
                &topics,
                &no_regex,
                s,
                now,
            )
            .unwrap();
        assert_eq!(a3.member_epoch, 2);
        let b2 = g
            .heartbeat(
                hb("b", 2, Some(Assignment::new())),
                &topics,
                &no_regex,
                s,
                now,
            )
            .unwrap();
        assert_eq!(count(&b2.assignment), 3);
        assert_eq!(g.state_name(), "Stable");
        // A stale epoch is fenced.
        assert_eq!(
            g.heartbeat(hb("b", 7, None), &topics, &no_regex, s, now)
                .err(),
            Some(ResponseError::FencedMemberEpoch)
        );
        // b leaves: a gets everything.
        g.heartbeat(hb("b", -1, None), &topics, &no_regex, s, now)
            .unwrap();
        let a4 = g
            .heartbeat(hb("a", 2, None), &topics, &no_regex, s, now)
            .unwrap();
        assert_eq!((a4.member_epoch, count(&a4.assignment)), (3, 6));
    }

    #[test]
    fn a_silent_member_expires_and_its_partitions_move() {
        let now = Instant::now();
        let s = Duration::from_secs(1);
        let mut g = ConsumerState::new();
        let a = g
            .heartbeat(hb("a", 0, None), &topics, &no_regex, s, now)
            .unwrap();
        g.heartbeat(hb("b", 0, None), &topics, &no_regex, s, now)
            .unwrap();
        // a keeps heartbeating (and releases what it must); b goes silent.
        let later = now + Duration::from_millis(900);
        let a2 = g
            .heartbeat(
                hb("a", a.member_epoch, a.assignment.clone()),
                &topics,
                &no_regex,
                s,
                later,
            )
            .unwrap();
        g.heartbeat(
            hb("a", a2.member_epoch, a2.assignment.clone()),
            &topics,
            &no_regex,
            s,
            later,
        )
        .unwrap();
        assert!(g.tick(&topics, now + Duration::from_millis(1500)));
        assert_eq!(g.members.keys().collect::<Vec<_>>(), vec!["a"]);
        let epoch = g.member_epoch("a").unwrap();
        let a3 = g
            .heartbeat(
                hb("a", epoch, None),
                &topics,
                &no_regex,
                s,
                now + Duration::from_millis(1600),
            )
            .unwrap();
        assert_eq!(count(&a3.assignment), 6);
    }

    #[test]
    fn range_assigns_contiguous_partitions() {
        let now = Instant::now();
        let s = Duration::from_secs(45);
        let mut g = ConsumerState::new();
        let mut r = hb("a", 0, None);
        r.server_assignor = Some("range".into());
        g.heartbeat(r, &topics, &no_regex, s, now).unwrap();
        let mut r = hb("b", 0, None);
        r.server_assignor = Some("range".into());
        g.heartbeat(r, &topics, &no_regex, s, now).unwrap();
        let t = Uuid::from_u128(1);
        assert_eq!(g.target["a"][&t], (0..3).collect());
        assert_eq!(g.target["b"][&t], (3..6).collect());
        let mut bad = hb("c", 0, None);
        bad.server_assignor = Some("nope".into());
        assert_eq!(
            g.heartbeat(bad, &topics, &no_regex, s, now).err(),
            Some(ResponseError::UnsupportedAssignor)
        );
    }

    #[test]
    fn a_static_member_that_leaves_temporarily_comes_back_to_its_assignment_without_a_new_epoch() {
        let now = Instant::now();
        let s = Duration::from_secs(45);
        let mut g = ConsumerState::new();
        let mut a = hb("a1", 0, None);
        a.instance_id = Some("ia".into());
        let a1 = g.heartbeat(a, &topics, &no_regex, s, now).unwrap();
        let mut b = hb("b1", 0, None);
        b.instance_id = Some("ib".into());
        g.heartbeat(b, &topics, &no_regex, s, now).unwrap();
        // Settle: a releases, b receives.
        let a2 = g
            .heartbeat(
                hb("a1", a1.member_epoch, a1.assignment.clone()),
                &topics,
                &no_regex,
                s,
                now,
            )
            .unwrap();
        g.heartbeat(
            hb("a1", a2.member_epoch, a2.assignment.clone()),
            &topics,
            &no_regex,
            s,
            now,
        )
        .unwrap();
        let b2 = g
            .heartbeat(
                hb("b1", 2, Some(Assignment::new())),
                &topics,
                &no_regex,
                s,
                now,
            )
            .unwrap();
        assert_eq!(count(&b2.assignment), 3);
        let epoch = g.group_epoch;
        // b leaves as a static member and restarts with a new member id.
        assert_eq!(
            g.heartbeat(hb("b1", -2, None), &topics, &no_regex, s, now)
                .unwrap()
                .member_epoch,
            -2
        );
        let mut again = hb("b2", 0, None);
        again.instance_id = Some("ib".into());
        let back = g.heartbeat(again, &topics, &no_regex, s, now).unwrap();
        assert_eq!(g.group_epoch, epoch, "no rebalance");
        assert_eq!(back.assignment, b2.assignment, "same partitions");
        // A second live instance with the same id is refused.
        let mut dup = hb("b3", 0, None);
        dup.instance_id = Some("ib".into());
        assert_eq!(
            g.heartbeat(dup, &topics, &no_regex, s, now).err(),
            Some(ResponseError::UnreleasedInstanceId)
        );
    }

    #[test]
    fn a_regex_member_is_assigned_what_its_regex_matches_and_follows_new_topics() {
        let mut g = ConsumerState::new();
        let s = Duration::from_secs(45);
        let now = Instant::now();
        let catalog = std::cell::RefCell::new(vec!["t".to_string(), "other".to_string()]);
        let matching = |regex: &str| -> BTreeSet<String> {
            let re = regex::Regex::new(&format!("^(?:{regex})$")).unwrap();
            catalog
                .borrow()
                .iter()
                .filter(|t| re.is_match(t))
                .cloned()
                .collect()
        };
        let both = |name: &str| match name {
            "t" => Some((Uuid::from_u128(1), 6)),
            "t2" => Some((Uuid::from_u128(2), 2)),
            _ => None,
        };
        let mut join = hb("a", 0, None);
        join.subscribed_topics = None;
        join.subscribed_regex = Some("t.*".into());
        let a = g.heartbeat(join, &both, &matching, s, now).unwrap();
        assert_eq!(count(&a.assignment), 6);
        assert_eq!(
            g.members["a"].regex_topics,
            BTreeSet::from(["t".to_string()])
        );
        let epoch = g.group_epoch;
        // A new matching topic is picked up at the next resolution, not before.
        catalog.borrow_mut().push("t2".into());
        let owned = a.assignment.clone();
        g.heartbeat(
            hb("a", a.member_epoch, owned.clone()),
            &both,
            &matching,
            s,
            now,
        )
        .unwrap();
        assert_eq!(
            g.group_epoch, epoch,
            "resolved less than the refresh interval ago"
        );
        let later = now + REGEX_REFRESH_INTERVAL;
        let a = g
            .heartbeat(hb("a", a.member_epoch, owned), &both, &matching, s, later)
            .unwrap();
        assert_eq!(g.group_epoch, epoch + 1);
        assert_eq!(count(&a.assignment), 8);
        // Dropping the regex drops its topics.
        let mut clear = hb("a", a.member_epoch, a.assignment.clone());
        clear.subscribed_regex = Some(String::new());
        g.heartbeat(clear, &both, &matching, s, later).unwrap();
        assert!(g.members["a"].regex_topics.is_empty());
        assert_eq!(g.group_epoch, epoch + 2);
        assert!(g.target["a"].is_empty());
    }
}
