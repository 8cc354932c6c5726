//! One consumer group under the classic protocol: members, generations and the
//! Empty -> PreparingRebalance -> CompletingRebalance -> Stable state machine, as Kafka's
//! `GroupMetadata` / `GroupCoordinator` define them.
//!
//! Pure state: methods take `now` and return what to send; waiting JoinGroup and SyncGroup
//! calls are parked as oneshot senders inside their member and completed here.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use bytes::Bytes;
use indexmap::IndexMap;
use kafka_protocol::ResponseError;
use tokio::sync::oneshot;

use super::offsets_topic::{GroupValue, MemberValue, OffsetValue};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

/// What a JoinGroup call gets back.
#[derive(Debug, Clone)]
pub struct JoinResult {
    pub error: Option<ResponseError>,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub member_id: String,
    pub skip_assignment: bool,
    /// Filled for the leader: (member id, instance id, metadata for the chosen protocol).
    pub members: Vec<(String, Option<String>, Bytes)>,
}

impl JoinResult {
    pub fn error(e: ResponseError, member_id: &str) -> Self {
        JoinResult {
            error: Some(e),
            generation: -1,
            protocol_type: None,
            protocol_name: None,
            leader: String::new(),
            member_id: member_id.to_string(),
            skip_assignment: false,
            members: Vec::new(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct SyncResult {
    pub error: Option<ResponseError>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

impl SyncResult {
    pub fn error(e: ResponseError) -> Self {
        SyncResult {
            error: Some(e),
            protocol_type: None,
            protocol_name: None,
            assignment: Bytes::new(),
        }
    }
}

pub struct Member {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout: Duration,
    pub session_timeout: Duration,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    pub assignment: Bytes,
    pub awaiting_join: Option<oneshot::Sender<JoinResult>>,
    pub awaiting_sync: Option<oneshot::Sender<SyncResult>>,
    pub heartbeat_deadline: Instant,
    pub is_new: bool,
}

impl Member {
    fn metadata_for(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(n, _)| n == protocol)
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }
}

/// A join request, decoded.
pub struct JoinRequest {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout: Duration,
    pub rebalance_timeout: Duration,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    /// JoinGroup v4+: a new dynamic member must first get an id (MEMBER_ID_REQUIRED).
    pub require_known_member_id: bool,
}

pub struct Group {
    pub id: String,
    pub state: GroupState,
    pub state_since_ms: i64,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub generation: i32,
    pub leader: Option<String>,
    pub members: IndexMap<String, Member>,
    pub static_members: HashMap<String, String>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, waiting for their second join.
    pub pending_members: HashMap<String, Instant>,
    pub offsets: BTreeMap<(String, i32), OffsetValue>,
    /// Set when the group uses the consumer protocol (KIP-848) instead of the classic one.
    pub consumer: Option<super::consumer_group::ConsumerState>,
    /// Set when the group is a share group (KIP-932).
    pub share: Option<super::share_group::ShareState>,
    /// Rebalances completed (for metrics).
    pub rebalances: u64,
    /// Records a conversion between the protocols left for the group's next write, ahead
    /// of anything else it writes (the old protocol's tombstones, the new one's records).
    pub unwritten: Vec<(Bytes, Option<Bytes>)>,
    /// The converted consumer group's writer: the conversion's records wait for its last
    /// write, so they land after it.
    pub unwritten_after: Option<std::sync::Arc<std::sync::Mutex<()>>>,
    /// When PreparingRebalance: join completes when all members joined and `join_not_before`
    /// has passed, or at `rebalance_deadline`.
    join_not_before: Instant,
    rebalance_deadline: Instant,
    initial_delay: Duration,
    /// The rebalance started from Empty (Kafka's InitialDelayedJoin): its join phase ends on
    /// the timer only, never inline in a JoinGroup.
    initial_join: bool,
    /// The initial join phase does not end before this: [`NEW_GROUP_QUIET`] after the last
    /// member arrived (Kafka's `newMemberAdded`, measured in time rather than timer runs).
    quiet_until: Instant,
}

/// How long a new group's first join phase waits after its last arrival, whatever
/// `group.initial.rebalance.delay.ms` says. Consumers started together do not reach the
/// coordinator together: librdkafka holds a JoinGroup back for up to its sparse-connection
/// interval (about 50 ms) while it fetches metadata, and a generation that ended inside
/// that window would hand one member every partition and revoke them moments later. Kafka
/// ends the phase one timer hop after the first member and misses such a consumer often.
pub const NEW_GROUP_QUIET: Duration = Duration::from_millis(100);

fn new_member_id(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4())
}

impl Group {
    pub fn new(id: &str, now: Instant, now_ms: i64, initial_delay: Duration) -> Group {
        Group {
            id: id.to_string(),
            state: GroupState::Empty,
            state_since_ms: now_ms,
            protocol_type: None,
            protocol_name: None,
            generation: 0,
            leader: None,
            members: IndexMap::new(),
            static_members: HashMap::new(),
            pending_members: HashMap::new(),
            offsets: BTreeMap::new(),
            consumer: None,
            share: None,
            rebalances: 0,
            unwritten: Vec::new(),
            unwritten_after: None,
            join_not_before: now,
            rebalance_deadline: now,
            initial_delay,
            initial_join: false,
            quiet_until: now,
        }
    }

    fn transition(&mut self, state: GroupState, now_ms: i64) {
        self.state = state;
        self.state_since_ms = now_ms;
    }

    fn supports(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        if self.members.is_empty() {
            return !protocol_type.is_empty() && !protocols.is_empty();
        }
        self.protocol_type.as_deref() == Some(protocol_type)
            && protocols.iter().any(|(name, _)| {
                self.members
                    .values()
                    .all(|m| m.protocols.iter().any(|(n, _)| n == name))
            })
    }

    fn all_joined(&self) -> bool {
        self.pending_members.is_empty() && self.members.values().all(|m| m.awaiting_join.is_some())
    }

    fn max_rebalance_timeout(&self) -> Duration {
        self.members
            .values()
            .map(|m| m.rebalance_timeout)
            .max()
            .unwrap_or(Duration::ZERO)
    }

    /// Forgets the classic protocol's membership (the group moves to the consumer protocol,
    /// or its record was deleted); offsets stay.
    pub(crate) fn clear_classic(&mut self) {
        self.members.clear();
        self.static_members.clear();
        self.pending_members.clear();
        self.leader = None;
        self.protocol_name = None;
        self.state = GroupState::Empty;
        self.initial_join = false;
    }

    /// Moves to PreparingRebalance (from any state but Dead/PreparingRebalance).
    pub(crate) fn prepare_rebalance(&mut self, now: Instant, now_ms: i64) {
        if self.state == GroupState::PreparingRebalance || self.state == GroupState::Dead {
            return;
        }
        // Members waiting for a SyncGroup of a generation that will not complete.
        for m in self.members.values_mut() {
            if let Some(tx) = m.awaiting_sync.take() {
                let _ = tx.send(SyncResult::error(ResponseError::RebalanceInProgress));
            }
        }
        let from_empty = self.state == GroupState::Empty;
        self.transition(GroupState::PreparingRebalance, now_ms);
        self.rebalance_deadline = now + self.max_rebalance_timeout();
        self.join_not_before = if from_empty {
            now + self.initial_delay
        } else {
            now
        };
        self.initial_join = from_empty;
        if from_empty {
            self.quiet_until = now + NEW_GROUP_QUIET;
        }
    }

    /// Handles a JoinGroup. Returns `Some(result)` to answer now, or parks `tx` in the member
    /// (returning `None`) until the join completes.
    pub fn join(
        &mut self,
        req: JoinRequest,
        tx: oneshot::Sender<JoinResult>,
        now: Instant,
        now_ms: i64,
    ) -> Option<(oneshot::Sender<JoinResult>, JoinResult)> {
        if !self.supports(&req.protocol_type, &req.protocols) {
            return Some((
                tx,
                JoinResult::error(ResponseError::InconsistentGroupProtocol, &req.member_id),
            ));
        }
        if req.member_id.is_empty() {
            return self.join_unknown_member(req, tx, now, now_ms);
        }
        // Known member id.
        if let Some(instance) = &req.group_instance_id {
            if let Some(owner) = self.static_members.get(instance) {
                if *owner != req.member_id {
                    return Some((
                        tx,
                        JoinResult::error(ResponseError::FencedInstanceId, &req.member_id),
                    ));
                }
            }
        }
        if self.pending_members.remove(&req.member_id).is_some() {
            self.add_member(req.member_id.clone(), req, Some(tx), now, now_ms);
            return None;
        }
        let Some(member) = self.members.get_mut(&req.member_id) else {
            return Some((
                tx,
                JoinResult::error(ResponseError::UnknownMemberId, &req.member_id),
            ));
        };
        member.heartbeat_deadline = now + req.session_timeout;
        member.session_timeout = req.session_timeout;
        member.rebalance_timeout = req.rebalance_timeout;
        let protocols_changed = member.protocols != req.protocols;
        match self.state {
            GroupState::PreparingRebalance => {
                let member = self.members.get_mut(&req.member_id)?;
                member.protocols = req.protocols;
                if let Some(old) = member.awaiting_join.replace(tx) {
                    let _ = old.send(JoinResult::error(
                        ResponseError::UnknownMemberId,
                        &req.member_id,
                    ));
                }
                self.maybe_complete_join(now, now_ms);
                None
            }
            GroupState::CompletingRebalance | GroupState::Stable
                if !protocols_changed
                    && (self.state != GroupState::Stable
                        || self.leader.as_deref() != Some(req.member_id.as_str())) =>
            {
                // Same metadata: resend the current generation.
                let result = self.join_result_for(&req.member_id);
                Some((tx, result))
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                let member = self.members.get_mut(&req.member_id)?;
                member.protocols = req.protocols;
                member.awaiting_join = Some(tx);
                self.prepare_rebalance(now, now_ms);
                self.maybe_complete_join(now, now_ms);
                None
            }
            GroupState::Empty | GroupState::Dead => Some((
                tx,
                JoinResult::error(ResponseError::UnknownMemberId, &req.member_id),
            )),
        }
    }

    fn join_unknown_member(
        &mut self,
        req: JoinRequest,
        tx: oneshot::Sender<JoinResult>,
        now: Instant,
        now_ms: i64,
    ) -> Option<(oneshot::Sender<JoinResult>, JoinResult)> {
        if let Some(instance) = req.group_instance_id.clone() {
            let new_id = new_member_id(&instance);
            if let Some(old_id) = self.static_members.get(&instance).cloned() {
                return self.replace_static_member(&old_id, new_id, req, tx, now, now_ms);
            }
            self.add_member(new_id, req, Some(tx), now, now_ms);
            return None;
        }
        let new_id = new_member_id(if req.client_id.is_empty() {
            "member"
        } else {
            &req.client_id
        });
        if req.require_known_member_id {
            self.pending_members
                .insert(new_id.clone(), now + req.session_timeout);
            return Some((
                tx,
                JoinResult::error(ResponseError::MemberIdRequired, &new_id),
            ));
        }
        self.add_member(new_id, req, Some(tx), now, now_ms);
        None
    }

    /// KIP-345: a static member rejoining with an unknown member id takes over its old
    /// member's place. In a stable group with unchanged metadata there is no rebalance: it
    /// gets the current generation back and syncs its old assignment.
    fn replace_static_member(
        &mut self,
        old_id: &str,
        new_id: String,
        req: JoinRequest,
        tx: oneshot::Sender<JoinResult>,
        now: Instant,
        now_ms: i64,
    ) -> Option<(oneshot::Sender<JoinResult>, JoinResult)> {
        let Some(mut member) = self.members.shift_remove(old_id) else {
            self.static_members
                .remove(req.group_instance_id.as_deref().unwrap_or_default());
            self.add_member(new_id, req, Some(tx), now, now_ms);
            return None;
        };
        // The old incarnation's parked calls are fenced.
        if let Some(old) = member.awaiting_join.take() {
            let _ = old.send(JoinResult::error(ResponseError::FencedInstanceId, old_id));
        }
        if let Some(old) = member.awaiting_sync.take() {
            let _ = old.send(SyncResult::error(ResponseError::FencedInstanceId));
        }
        member.member_id = new_id.clone();
        member.client_id = req.client_id;
        member.client_host = req.client_host;
        member.session_timeout = req.session_timeout;
        member.rebalance_timeout = req.rebalance_timeout;
        member.heartbeat_deadline = now + req.session_timeout;
        member.protocols = req.protocols;
        if self.leader.as_deref() == Some(old_id) {
            self.leader = Some(new_id.clone());
        }
        if let Some(instance) = &member.group_instance_id {
            self.static_members.insert(instance.clone(), new_id.clone());
        }
        self.members.insert(new_id.clone(), member);
        // Kafka rebalances only if the new metadata changes which protocol the group would
        // select; the metadata bytes themselves may differ (the Java client encodes its owned
        // partitions and generation in them).
        let selection_unchanged = self.select_protocol() == self.protocol_name;
        match self.state {
            GroupState::Stable if selection_unchanged => {
                let mut result = self.join_result_for(&new_id);
                // The leader must not recompute the assignment (KIP-345's skip_assignment).
                result.skip_assignment = self.leader.as_deref() == Some(new_id.as_str());
                Some((tx, result))
            }
            _ => {
                if let Some(m) = self.members.get_mut(&new_id) {
                    m.awaiting_join = Some(tx);
                }
                self.prepare_rebalance(now, now_ms);
                self.maybe_complete_join(now, now_ms);
                None
            }
        }
    }

    fn add_member(
        &mut self,
        member_id: String,
        req: JoinRequest,
        tx: Option<oneshot::Sender<JoinResult>>,
        now: Instant,
        now_ms: i64,
    ) {
        if self.members.is_empty() {
            self.protocol_type = Some(req.protocol_type.clone());
        }
        if let Some(instance) = &req.group_instance_id {
            self.static_members
                .insert(instance.clone(), member_id.clone());
        }
        self.members.insert(
            member_id.clone(),
            Member {
                member_id,
                group_instance_id: req.group_instance_id,
                client_id: req.client_id,
                client_host: req.client_host,
                rebalance_timeout: req.rebalance_timeout,
                session_timeout: req.session_timeout,
                protocol_type: req.protocol_type,
                protocols: req.protocols,
                assignment: Bytes::new(),
                awaiting_join: tx,
                awaiting_sync: None,
                heartbeat_deadline: now + req.session_timeout,
                is_new: true,
            },
        );
        let was_preparing = self.state == GroupState::PreparingRebalance;
        self.prepare_rebalance(now, now_ms);
        if was_preparing && self.join_not_before > now {
            // Kafka's InitialDelayedJoin: each new member extends the delay, bounded by the
            // rebalance timeout.
            self.join_not_before = (now + self.initial_delay).min(self.rebalance_deadline.max(now));
        }
        self.rebalance_deadline = self
            .rebalance_deadline
            .max(now + self.max_rebalance_timeout());
        if self.initial_join {
            self.quiet_until = now + NEW_GROUP_QUIET;
        }
        self.maybe_complete_join(now, now_ms);
    }

    fn join_result_for(&self, member_id: &str) -> JoinResult {
        let is_leader = self.leader.as_deref() == Some(member_id);
        let protocol = self.protocol_name.clone().unwrap_or_default();
        JoinResult {
            error: None,
            generation: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            leader: self.leader.clone().unwrap_or_default(),
            member_id: member_id.to_string(),
            skip_assignment: false,
            members: if is_leader {
                self.members
                    .values()
                    .map(|m| {
                        (
                            m.member_id.clone(),
                            m.group_instance_id.clone(),
                            m.metadata_for(&protocol),
                        )
                    })
                    .collect()
            } else {
                Vec::new()
            },
        }
    }

    /// Completes the join phase if every member has rejoined, unless it is the initial join
    /// of an empty group: that one ends on the timer (Kafka's `maybeCompleteJoinPhase` leaves
    /// a rebalance from Empty to its InitialDelayedJoin), so the other consumers started at
    /// the same moment get their JoinGroup in, even with no initial delay.
    pub fn maybe_complete_join(&mut self, now: Instant, now_ms: i64) {
        if self.state == GroupState::PreparingRebalance
            && !self.initial_join
            && self.all_joined()
            && now >= self.join_not_before
        {
            self.complete_join(now, now_ms);
        }
    }

    /// Timer work: complete joins whose deadline passed, expire members and pending ids.
    /// Returns true when the group's persisted metadata changed.
    pub fn tick(&mut self, now: Instant, now_ms: i64) -> bool {
        let mut changed = false;
        self.pending_members.retain(|_, deadline| *deadline > now);
        // Sessions expire in every state, as in Kafka: during a rebalance a member that
        // crashed (not rejoining) goes after session.timeout.ms, not at the rebalance
        // deadline (max.poll.interval.ms), so the others are not held up for minutes.
        let expired: Vec<String> = self
            .members
            .values()
            .filter(|m| m.awaiting_join.is_none() && m.heartbeat_deadline <= now)
            .map(|m| m.member_id.clone())
            .collect();
        if !expired.is_empty() {
            for id in &expired {
                tracing::info!(group = %self.id, member = %id, "member session expired");
                self.remove_member(id);
            }
            self.after_members_left(now, now_ms);
            changed = true;
        }
        // Kafka's InitialDelayedJoin: a new group's join phase ends only after a quiet spell
        // without a new member (and with no pending member: `all_joined`).
        let settled = !self.initial_join || now >= self.quiet_until;
        if self.state == GroupState::PreparingRebalance
            && (settled && self.all_joined() && now >= self.join_not_before
                || now >= self.rebalance_deadline)
        {
            self.complete_join(now, now_ms);
            changed = true;
        }
        changed
    }

    fn complete_join(&mut self, now: Instant, now_ms: i64) {
        self.rebalances += 1;
        self.initial_join = false;
        // Members that did not rejoin in time are removed.
        let missing: Vec<String> = self
            .members
            .values()
            .filter(|m| m.awaiting_join.is_none())
            .map(|m| m.member_id.clone())
            .collect();
        for id in missing {
            self.remove_member(&id);
        }
        self.pending_members.clear();
        if self.members.is_empty() {
            self.generation += 1;
            self.protocol_name = None;
            self.leader = None;
            self.transition(GroupState::Empty, now_ms);
            return;
        }
        self.generation += 1;
        self.protocol_name = self.select_protocol();
        if self
            .leader
            .as_ref()
            .is_none_or(|l| !self.members.contains_key(l))
        {
            self.leader = self.members.keys().next().cloned();
        }
        self.transition(GroupState::CompletingRebalance, now_ms);
        let ids: Vec<String> = self.members.keys().cloned().collect();
        for id in ids {
            let result = self.join_result_for(&id);
            if let Some(m) = self.members.get_mut(&id) {
                m.is_new = false;
                m.heartbeat_deadline = now + m.session_timeout;
                if let Some(tx) = m.awaiting_join.take() {
                    let _ = tx.send(result);
                }
            }
        }
    }

    /// Kafka's vote: among protocols every member supports, each member votes for its most
    /// preferred; the most votes win (ties to the first candidate in the leader's order).
    pub(crate) fn select_protocol(&self) -> Option<String> {
        let first = self.members.values().next()?;
        let candidates: Vec<&String> = first
            .protocols
            .iter()
            .map(|(n, _)| n)
            .filter(|n| {
                self.members
                    .values()
                    .all(|m| m.protocols.iter().any(|(p, _)| p == *n))
            })
            .collect();
        let mut votes: Vec<(&String, usize)> = candidates.iter().map(|c| (*c, 0)).collect();
        for m in self.members.values() {
            if let Some((n, _)) = m.protocols.iter().find(|(n, _)| candidates.contains(&n)) {
                if let Some(v) = votes.iter_mut().find(|(c, _)| *c == n) {
                    v.1 += 1;
                }
            }
        }
        votes
            .iter()
            .max_by(|a, b| a.1.cmp(&b.1).then(std::cmp::Ordering::Greater))
            .map(|(n, _)| (*n).clone())
    }

    fn remove_member(&mut self, member_id: &str) {
        if let Some(mut m) = self.members.shift_remove(member_id) {
            if let Some(instance) = &m.group_instance_id {
                if self.static_members.get(instance).map(String::as_str) == Some(member_id) {
                    self.static_members.remove(instance);
                }
            }
            if let Some(tx) = m.awaiting_join.take() {
                let _ = tx.send(JoinResult::error(ResponseError::UnknownMemberId, member_id));
            }
            if let Some(tx) = m.awaiting_sync.take() {
                let _ = tx.send(SyncResult::error(ResponseError::UnknownMemberId));
            }
        }
        if self.leader.as_deref() == Some(member_id) {
            self.leader = None;
        }
    }

    fn after_members_left(&mut self, now: Instant, now_ms: i64) {
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance => {
                if self.members.is_empty() {
                    self.generation += 1;
                    self.protocol_name = None;
                    self.transition(GroupState::Empty, now_ms);
                } else {
                    self.prepare_rebalance(now, now_ms);
                }
            }
            GroupState::PreparingRebalance => self.maybe_complete_join(now, now_ms),
            GroupState::Empty | GroupState::Dead => {}
        }
    }

    /// SyncGroup. Returns the answer now, or parks `tx` until the leader's assignment arrives.
    /// The bool says whether the group's metadata must be persisted (the leader synced).
    pub fn sync(
        &mut self,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation: i32,
        protocol_type: Option<&str>,
        protocol_name: Option<&str>,
        assignments: Vec<(String, Bytes)>,
        tx: oneshot::Sender<SyncResult>,
        now: Instant,
    ) -> (Option<(oneshot::Sender<SyncResult>, SyncResult)>, bool) {
        if let Err(e) = self.validate_member(member_id, group_instance_id) {
            return (Some((tx, SyncResult::error(e))), false);
        }
        if generation != self.generation {
            return (
                Some((tx, SyncResult::error(ResponseError::IllegalGeneration))),
                false,
            );
        }
        if protocol_type.is_some_and(|p| Some(p) != self.protocol_type.as_deref())
            || protocol_name.is_some_and(|p| Some(p) != self.protocol_name.as_deref())
        {
            return (
                Some((
                    tx,
                    SyncResult::error(ResponseError::InconsistentGroupProtocol),
                )),
                false,
            );
        }
        if let Some(m) = self.members.get_mut(member_id) {
            m.heartbeat_deadline = now + m.session_timeout;
        }
        match self.state {
            GroupState::PreparingRebalance => (
                Some((tx, SyncResult::error(ResponseError::RebalanceInProgress))),
                false,
            ),
            GroupState::Stable => {
                let assignment = self
                    .members
                    .get(member_id)
                    .map(|m| m.assignment.clone())
                    .unwrap_or_default();
                (Some((tx, self.sync_ok(assignment))), false)
            }
            GroupState::CompletingRebalance => {
                if let Some(m) = self.members.get_mut(member_id) {
                    m.awaiting_sync = Some(tx);
                }
                if self.leader.as_deref() != Some(member_id) {
                    return (None, false);
                }
                let mut by_member: HashMap<String, Bytes> = assignments.into_iter().collect();
                for m in self.members.values_mut() {
                    m.assignment = by_member.remove(&m.member_id).unwrap_or_default();
                }
                self.state = GroupState::Stable;
                let results: Vec<(String, SyncResult)> = self
                    .members
                    .values()
                    .map(|m| (m.member_id.clone(), self.sync_ok(m.assignment.clone())))
                    .collect();
                for (id, r) in results {
                    if let Some(tx) = self
                        .members
                        .get_mut(&id)
                        .and_then(|m| m.awaiting_sync.take())
                    {
                        let _ = tx.send(r);
                    }
                }
                (None, true)
            }
            GroupState::Empty | GroupState::Dead => (
                Some((tx, SyncResult::error(ResponseError::UnknownMemberId))),
                false,
            ),
        }
    }

    fn sync_ok(&self, assignment: Bytes) -> SyncResult {
        SyncResult {
            error: None,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            assignment,
        }
    }

    fn validate_member(
        &self,
        member_id: &str,
        group_instance_id: Option<&str>,
    ) -> Result<(), ResponseError> {
        if let Some(instance) = group_instance_id {
            match self.static_members.get(instance) {
                Some(owner) if owner != member_id => return Err(ResponseError::FencedInstanceId),
                None if !self.members.contains_key(member_id) => {
                    return Err(ResponseError::UnknownMemberId)
                }
                _ => {}
            }
        }
        if !self.members.contains_key(member_id) {
            return Err(ResponseError::UnknownMemberId);
        }
        Ok(())
    }

    pub fn heartbeat(
        &mut self,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation: i32,
        now: Instant,
    ) -> Option<ResponseError> {
        if let Err(e) = self.validate_member(member_id, group_instance_id) {
            return Some(e);
        }
        if generation != self.generation {
            return Some(ResponseError::IllegalGeneration);
        }
        if let Some(m) = self.members.get_mut(member_id) {
            m.heartbeat_deadline = now + m.session_timeout;
        }
        match self.state {
            GroupState::PreparingRebalance => Some(ResponseError::RebalanceInProgress),
            GroupState::Stable | GroupState::CompletingRebalance => None,
            GroupState::Empty | GroupState::Dead => Some(ResponseError::UnknownMemberId),
        }
    }

    /// LeaveGroup for one member identity; returns its error, if any.
    pub fn leave(
        &mut self,
        member_id: &str,
        group_instance_id: Option<&str>,
        now: Instant,
        now_ms: i64,
    ) -> Option<ResponseError> {
        let id = match group_instance_id {
            Some(instance) => match self.static_members.get(instance) {
                None => return Some(ResponseError::UnknownMemberId),
                Some(owner) if !member_id.is_empty() && owner != member_id => {
                    return Some(ResponseError::FencedInstanceId)
                }
                Some(owner) => owner.clone(),
            },
            None => member_id.to_string(),
        };
        if self.pending_members.remove(&id).is_some() {
            return None;
        }
        if !self.members.contains_key(&id) {
            return Some(ResponseError::UnknownMemberId);
        }
        self.remove_member(&id);
        self.after_members_left(now, now_ms);
        None
    }

    /// Validates an OffsetCommit against membership and generation (Kafka's rules).
    pub fn check_commit(
        &self,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation: i32,
    ) -> Option<ResponseError> {
        if let Some(c) = self.consumer.as_ref().filter(|c| !c.is_empty()) {
            // Consumer-protocol members commit with their member epoch.
            if generation < 0 && member_id.is_empty() {
                return Some(ResponseError::UnknownMemberId);
            }
            return match c.members.get(member_id) {
                None => Some(ResponseError::UnknownMemberId),
                // A classic member's epoch is its generation (Kafka's `validateMemberEpoch`).
                Some(m) if m.member_epoch != generation && m.classic.is_some() => {
                    Some(ResponseError::IllegalGeneration)
                }
                Some(m) if m.member_epoch != generation => Some(ResponseError::StaleMemberEpoch),
                Some(_) => None,
            };
        }
        if generation < 0 && member_id.is_empty() && group_instance_id.is_none() {
            // A commit from outside the group (admin tools, assign() consumers).
            return if self.members.is_empty() {
                None
            } else {
                Some(ResponseError::UnknownMemberId)
            };
        }
        if let Err(e) = self.validate_member(member_id, group_instance_id) {
            return Some(e);
        }
        if generation != self.generation {
            return Some(ResponseError::IllegalGeneration);
        }
        if self.state == GroupState::CompletingRebalance {
            return Some(ResponseError::RebalanceInProgress);
        }
        None
    }

    /// The group's persisted form.
    pub fn to_value(&self) -> GroupValue {
        let protocol = self.protocol_name.clone();
        GroupValue {
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            generation: self.generation,
            protocol: protocol.clone(),
            leader: self.leader.clone(),
            current_state_timestamp: self.state_since_ms,
            members: self
                .members
                .values()
                .map(|m| MemberValue {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    rebalance_timeout_ms: m.rebalance_timeout.as_millis() as i32,
                    session_timeout_ms: m.session_timeout.as_millis() as i32,
                    subscription: m.metadata_for(protocol.as_deref().unwrap_or_default()),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        }
    }

    /// Restores a group from its persisted form: members come back Stable, with fresh
    /// session deadlines, so they keep their assignment if they heartbeat in time.
    pub fn restore(&mut self, v: GroupValue, now: Instant) {
        self.protocol_type = Some(v.protocol_type.clone()).filter(|p| !p.is_empty());
        self.generation = v.generation;
        self.protocol_name = v.protocol.clone();
        self.leader = v.leader;
        self.state_since_ms = v.current_state_timestamp;
        self.members.clear();
        self.static_members.clear();
        for m in v.members {
            if let Some(instance) = &m.group_instance_id {
                self.static_members
                    .insert(instance.clone(), m.member_id.clone());
            }
            let session_timeout = Duration::from_millis(m.session_timeout_ms.max(0) as u64);
            self.members.insert(
                m.member_id.clone(),
                Member {
                    member_id: m.member_id,
                    group_instance_id: m.group_instance_id,
                    client_id: m.client_id,
                    client_host: m.client_host,
                    rebalance_timeout: Duration::from_millis(m.rebalance_timeout_ms.max(0) as u64),
                    session_timeout,
                    protocol_type: v.protocol_type.clone(),
                    protocols: vec![(v.protocol.clone().unwrap_or_default(), m.subscription)],
                    assignment: m.assignment,
                    awaiting_join: None,
                    awaiting_sync: None,
                    heartbeat_deadline: now + session_timeout,
                    is_new: false,
                },
            );
        }
        self.state = if self.members.is_empty() {
            GroupState::Empty
        } else {
            GroupState::Stable
        };
    }
}

#[cfg(test)]
mod tests;
