//! Classic members inside a consumer group, and the conversions between the two protocols
//! (KIP-848's online upgrade and downgrade), as Kafka's group coordinator does them.
//!
//! A rolling upgrade restarts a classic group's consumers one by one with
//! `group.protocol=consumer`. The first ConsumerGroupHeartbeat converts the group
//! ([`upgrade`]): every classic member becomes a member of the consumer group at the
//! classic generation, keeping its assignment as its target, so nothing moves until the
//! new member's arrival computes a new target. The classic members stay in the group and
//! go on with JoinGroup, SyncGroup, Heartbeat and LeaveGroup, which the group answers from
//! its own state:
//!
//! - JoinGroup updates the member's subscription, reconciles it toward its target with the
//!   partitions its subscription says it still owns, and answers at once with its member
//!   epoch as the generation; nobody waits for anybody, there is no leader.
//! - SyncGroup answers the member's current assignment in the consumer protocol's encoding.
//! - Heartbeat answers REBALANCE_IN_PROGRESS when the member must rejoin to move on: the
//!   group epoch moved past it, it has partitions to give up, or partitions it waits for
//!   have been released.
//!
//! A rolling downgrade is the reverse: when the last member of the consumer protocol
//! leaves (or is fenced) and classic members remain, the group becomes a classic group
//! again ([`downgrade`]) at the group epoch, each member holding its target assignment,
//! and rebalances.
//!
//! Deadlines a classic member must keep besides its session: after a heartbeat told it to
//! rejoin, a JoinGroup within its rebalance timeout; after a JoinGroup, a SyncGroup within
//! the same. A member that misses one is removed, as in Kafka.

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition as AssignedPartitions;
use kafka_protocol::messages::{
    ConsumerProtocolAssignment, ConsumerProtocolSubscription, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::ResponseError;
use uuid::Uuid;

use super::{intersects, subtract, Assignment, ConsumerMember, ConsumerState, TopicResolver};
use crate::coordinator::group::{Group, GroupState, JoinRequest, Member};
use crate::coordinator::offsets_topic::{self, RecordKey};

/// The protocol type of consumers (the only one a consumer group takes members of).
pub const PROTOCOL_TYPE: &str = "consumer";

/// The highest version of the consumer protocol's embedded messages this broker reads and
/// writes; a newer one is read as this one, as Kafka's `ConsumerProtocol` does.
const LATEST: i16 = 3;

/// Which conversions `group.consumer.migration.policy` allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigrationPolicy {
    pub upgrade: bool,
    pub downgrade: bool,
}

impl Default for MigrationPolicy {
    /// Kafka's default, `bidirectional`.
    fn default() -> Self {
        MigrationPolicy {
            upgrade: true,
            downgrade: true,
        }
    }
}

impl MigrationPolicy {
    /// Kafka's values, in any case: `disabled`, `upgrade`, `downgrade`, `bidirectional`.
    pub fn parse(s: &str) -> Option<Self> {
        let (upgrade, downgrade) = match s.trim().to_ascii_lowercase().as_str() {
            "disabled" => (false, false),
            "upgrade" => (true, false),
            "downgrade" => (false, true),
            "bidirectional" => (true, true),
            _ => return None,
        };
        Some(MigrationPolicy { upgrade, downgrade })
    }
}

/// What a member of the classic protocol joined with, and the calls it owes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassicMember {
    pub session_timeout: Duration,
    /// (protocol name, metadata) in the member's order of preference.
    pub protocols: Vec<(String, Bytes)>,
    /// Told to rejoin: removed if no JoinGroup comes by then.
    pub join_deadline: Option<Instant>,
    /// Joined: removed if no SyncGroup comes by then.
    pub sync_deadline: Option<Instant>,
}

impl ClassicMember {
    pub fn expired(&self, now: Instant) -> bool {
        self.join_deadline.is_some_and(|d| d <= now) || self.sync_deadline.is_some_and(|d| d <= now)
    }

    /// The protocol the member is answered with: its first (Kafka's choice).
    pub fn protocol_name(&self) -> &str {
        self.protocols
            .first()
            .map(|(n, _)| n.as_str())
            .unwrap_or("")
    }

    /// The consumer protocol version of the member's first protocol's metadata: its
    /// assignment is encoded at that version.
    fn version(&self) -> i16 {
        self.protocols
            .first()
            .and_then(|(_, m)| version_of(m))
            .unwrap_or(0)
    }
}

/// A subscription in the classic consumer protocol's encoding, decoded.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Subscription {
    pub topics: Vec<String>,
    /// (topic, partitions) the member still owns (version 1 and later).
    pub owned: Vec<(String, Vec<i32>)>,
    pub rack_id: Option<String>,
}

fn version_of(bytes: &[u8]) -> Option<i16> {
    let v = i16::from_be_bytes([*bytes.first()?, *bytes.get(1)?]);
    (v >= 0).then_some(v.min(LATEST))
}

/// Decodes a ConsumerProtocolSubscription (version prefix, then the message); `None` when
/// the bytes are not one.
pub fn decode_subscription(bytes: &Bytes) -> Option<Subscription> {
    let version = version_of(bytes)?;
    let mut b = bytes.slice(2..);
    let s = ConsumerProtocolSubscription::decode(&mut b, version).ok()?;
    Some(Subscription {
        topics: s.topics.into_iter().map(|t| t.to_string()).collect(),
        owned: s
            .owned_partitions
            .into_iter()
            .map(|tp| (tp.topic.to_string(), tp.partitions))
            .collect(),
        rack_id: s.rack_id.map(|r| r.to_string()),
    })
}

/// Decodes a ConsumerProtocolAssignment into (topic, partitions); `None` when the bytes are
/// not one. Empty bytes are an empty assignment (a member that was never synced).
pub fn decode_assignment(bytes: &Bytes) -> Option<Vec<(String, Vec<i32>)>> {
    if bytes.is_empty() {
        return Some(Vec::new());
    }
    let version = version_of(bytes)?;
    let mut b = bytes.slice(2..);
    let a = ConsumerProtocolAssignment::decode(&mut b, version).ok()?;
    Some(
        a.assigned_partitions
            .into_iter()
            .map(|tp| (tp.topic.to_string(), tp.partitions))
            .collect(),
    )
}

/// Encodes an assignment as a ConsumerProtocolAssignment of `version`; partitions of
/// topics `name` cannot name (deleted) are left out.
pub fn encode_assignment(
    a: &Assignment,
    name: &dyn Fn(&Uuid) -> Option<String>,
    version: i16,
) -> Bytes {
    let partitions = a
        .iter()
        .filter_map(|(id, ps)| {
            Some(
                AssignedPartitions::default()
                    .with_topic(TopicName(StrBytes::from_string(name(id)?)))
                    .with_partitions(ps.iter().copied().collect()),
            )
        })
        .collect();
    let message = ConsumerProtocolAssignment::default().with_assigned_partitions(partitions);
    let mut b = BytesMut::new();
    b.extend_from_slice(&version.to_be_bytes());
    // Encoding a message built here at a version it supports cannot fail.
    if message.encode(&mut b, version).is_err() {
        return Bytes::new();
    }
    b.freeze()
}

/// (topic, partitions) by name → by topic id; topics unknown to `topics` are left out.
fn by_id(parts: &[(String, Vec<i32>)], topics: TopicResolver<'_>) -> Assignment {
    let mut a = Assignment::new();
    for (topic, ps) in parts {
        if let Some((id, _)) = topics(topic) {
            let set = a.entry(id).or_default();
            set.extend(ps.iter().copied().filter(|p| *p >= 0));
        }
    }
    a.retain(|_, ps| !ps.is_empty());
    a
}

/// The answer to a JoinGroup the consumer group took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassicJoined {
    pub member_id: String,
    /// The member's epoch.
    pub generation: i32,
    pub protocol_name: String,
}

impl ConsumerState {
    /// Kafka's `ConsumerGroup.supportsClassicProtocols`: a consumer protocol type, and a
    /// protocol every classic member supports.
    fn supports_classic(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        if protocol_type != PROTOCOL_TYPE || protocols.is_empty() {
            return false;
        }
        protocols.iter().any(|(name, _)| {
            self.members
                .values()
                .filter_map(|m| m.classic.as_ref())
                .all(|c| c.protocols.iter().any(|(n, _)| n == name))
        })
    }

    /// The member a classic request names: by instance id for a static member (fenced when
    /// another member id holds it), by member id otherwise; UNKNOWN_MEMBER_ID when it is not
    /// a member of the classic protocol.
    fn classic_member(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> Result<&mut ConsumerMember, ResponseError> {
        let id = match instance_id {
            Some(instance) => {
                let m = self
                    .members
                    .values()
                    .find(|m| m.instance_id.as_deref() == Some(instance))
                    .ok_or(ResponseError::UnknownMemberId)?;
                if m.member_id != member_id {
                    return Err(ResponseError::FencedInstanceId);
                }
                m.member_id.clone()
            }
            None => member_id.to_string(),
        };
        self.members
            .get_mut(&id)
            .filter(|m| m.classic.is_some())
            .ok_or(ResponseError::UnknownMemberId)
    }

    /// JoinGroup from a member of the classic protocol (Kafka's
    /// `classicGroupJoinToConsumerGroup`). Errors carry the member id to answer with.
    pub fn classic_join(
        &mut self,
        req: &JoinRequest,
        topics: TopicResolver<'_>,
        now: Instant,
    ) -> Result<ClassicJoined, (ResponseError, String)> {
        let unknown = req.member_id.is_empty();
        let member_id = if unknown {
            Uuid::new_v4().to_string()
        } else {
            req.member_id.clone()
        };
        let fail = |e: ResponseError| (e, member_id.clone());
        if !self.supports_classic(&req.protocol_type, &req.protocols) {
            return Err(fail(ResponseError::InconsistentGroupProtocol));
        }
        if req.require_known_member_id && unknown && req.group_instance_id.is_none() {
            return Err(fail(ResponseError::MemberIdRequired));
        }
        let subscription = decode_subscription(&req.protocols[0].1)
            .ok_or_else(|| fail(ResponseError::InconsistentGroupProtocol))?;
        let mut changed = false;
        match &req.group_instance_id {
            Some(instance) => {
                let existing = self
                    .members
                    .values()
                    .find(|m| m.instance_id.as_deref() == Some(instance.as_str()))
                    .map(|m| m.member_id.clone());
                match existing {
                    Some(old) if unknown => {
                        // A static member restarted: the new incarnation takes the old one's
                        // place and assignment (whatever protocol the old one spoke).
                        let consumer_replaced = self.replace_member(&old, &member_id, now);
                        self.downgrade_due = consumer_replaced
                            && self
                                .members
                                .iter()
                                .all(|(id, m)| id == &member_id || m.classic.is_some());
                    }
                    Some(old) if old != member_id => {
                        return Err(fail(ResponseError::FencedInstanceId))
                    }
                    Some(_) => {}
                    None if unknown => changed |= self.add_classic(&member_id, now),
                    None => return Err(fail(ResponseError::UnknownMemberId)),
                }
            }
            None => {
                if !self.members.contains_key(&member_id) {
                    changed |= self.add_classic(&member_id, now);
                }
            }
        }
        let m = self
            .members
            .get_mut(&member_id)
            .ok_or_else(|| fail(ResponseError::UnknownMemberId))?;
        if m.classic.is_none() {
            // A member of the consumer protocol cannot join through JoinGroup.
            return Err(fail(ResponseError::UnknownMemberId));
        }
        m.instance_id = req.group_instance_id.clone();
        if subscription.rack_id.is_some() {
            m.rack_id = subscription.rack_id.clone();
        }
        if req.rebalance_timeout > Duration::ZERO {
            m.rebalance_timeout = req.rebalance_timeout;
        }
        m.server_assignor = None;
        m.subscribed_regex = None;
        m.regex_topics.clear();
        if m.subscribed_topics != subscription.topics {
            m.subscribed_topics = subscription.topics.clone();
            changed = true;
        }
        m.client_id = req.client_id.clone();
        m.client_host = req.client_host.clone();
        m.classic = Some(ClassicMember {
            session_timeout: req.session_timeout,
            protocols: req.protocols.clone(),
            join_deadline: None,
            sync_deadline: Some(now + m.rebalance_timeout),
        });
        m.session_deadline = now + req.session_timeout;
        m.note_owned(&by_id(&subscription.owned, topics));
        self.touched.members.insert(member_id.clone());
        if changed || self.metadata_changed(topics) {
            self.bump_and_assign(topics);
        }
        self.reconcile(&member_id, now);
        let m = self
            .members
            .get(&member_id)
            .ok_or_else(|| fail(ResponseError::UnknownMemberId))?;
        Ok(ClassicJoined {
            member_id: member_id.clone(),
            generation: m.member_epoch,
            protocol_name: m
                .classic
                .as_ref()
                .map(|c| c.protocol_name().to_string())
                .unwrap_or_default(),
        })
    }

    /// A new classic member, before its JoinGroup fills it in.
    fn add_classic(&mut self, member_id: &str, now: Instant) -> bool {
        self.members.insert(
            member_id.to_string(),
            ConsumerMember {
                member_id: member_id.to_string(),
                instance_id: None,
                rack_id: None,
                client_id: String::new(),
                client_host: String::new(),
                member_epoch: 0,
                previous_member_epoch: -1,
                rebalance_timeout: Duration::ZERO,
                subscribed_topics: Vec::new(),
                subscribed_regex: None,
                regex_topics: Default::default(),
                regex_resolved_at: None,
                server_assignor: None,
                assigned: Assignment::new(),
                pending_revocation: Assignment::new(),
                revocation_deadline: None,
                session_deadline: now,
                last_sent: None,
                classic: Some(ClassicMember {
                    session_timeout: Duration::ZERO,
                    protocols: Vec::new(),
                    join_deadline: None,
                    sync_deadline: None,
                }),
            },
        );
        true
    }

    /// Moves member `old`'s place, assignment and target to `new` (a static member's new
    /// incarnation joining through JoinGroup) at epoch 0. Returns whether `old` spoke the
    /// consumer protocol.
    fn replace_member(&mut self, old: &str, new: &str, now: Instant) -> bool {
        let Some(m) = self.take_over(old, new, (0, 0)) else {
            return false;
        };
        m.session_deadline = now;
        let was_consumer = m.classic.is_none();
        m.classic.get_or_insert(ClassicMember {
            session_timeout: Duration::ZERO,
            protocols: Vec::new(),
            join_deadline: None,
            sync_deadline: None,
        });
        was_consumer
    }

    /// SyncGroup from a classic member (Kafka's `classicGroupSyncToConsumerGroup`): its
    /// current assignment, encoded in the consumer protocol at its subscription's version.
    #[allow(clippy::too_many_arguments)]
    pub fn classic_sync(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        protocol_type: Option<&str>,
        protocol_name: Option<&str>,
        names: &dyn Fn(&Uuid) -> Option<String>,
        now: Instant,
    ) -> Result<Bytes, ResponseError> {
        let group_epoch = self.group_epoch;
        let m = self.classic_member(member_id, instance_id)?;
        if generation != m.member_epoch {
            return Err(ResponseError::IllegalGeneration);
        }
        let Some(c) = m.classic.as_mut() else {
            return Err(ResponseError::UnknownMemberId);
        };
        if protocol_type.is_some_and(|t| t != PROTOCOL_TYPE)
            || protocol_name.is_some_and(|n| n != c.protocol_name())
        {
            return Err(ResponseError::InconsistentGroupProtocol);
        }
        if group_epoch > m.member_epoch && m.pending_revocation.is_empty() {
            // A new rebalance started since the member joined: it rejoins first.
            c.join_deadline.get_or_insert(now + m.rebalance_timeout);
            return Err(ResponseError::RebalanceInProgress);
        }
        c.sync_deadline = None;
        m.session_deadline = now + c.session_timeout;
        Ok(encode_assignment(&m.assigned, names, c.version()))
    }

    /// Heartbeat from a classic member (Kafka's `classicGroupHeartbeatToConsumerGroup`):
    /// REBALANCE_IN_PROGRESS when it must rejoin to move toward its target.
    pub fn classic_heartbeat(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        now: Instant,
    ) -> Option<ResponseError> {
        let (group_epoch, assignment_epoch) = (self.group_epoch, self.assignment_epoch);
        let waiting = self.waiting_on_released(member_id);
        let target = self.target.get(member_id).cloned().unwrap_or_default();
        let m = match self.classic_member(member_id, instance_id) {
            Ok(m) => m,
            Err(e) => return Some(e),
        };
        if generation != m.member_epoch {
            return Some(ResponseError::IllegalGeneration);
        }
        let c = m.classic.as_mut()?;
        m.session_deadline = now + c.session_timeout;
        let unreleased = m.member_epoch == assignment_epoch && target != m.assigned;
        if m.member_epoch < group_epoch
            || !m.pending_revocation.is_empty()
            || (unreleased && !waiting)
        {
            c.join_deadline.get_or_insert(now + m.rebalance_timeout);
            return Some(ResponseError::RebalanceInProgress);
        }
        None
    }

    /// Whether a partition of the member's target it does not hold yet is still held (or
    /// being released) by another member (Kafka's `waitingOnUnreleasedPartition`).
    fn waiting_on_released(&self, member_id: &str) -> bool {
        let (Some(m), Some(target)) = (self.members.get(member_id), self.target.get(member_id))
        else {
            return false;
        };
        let missing = subtract(target, &m.assigned);
        self.members.iter().any(|(id, other)| {
            id != member_id
                && (intersects(&missing, &other.assigned)
                    || intersects(&missing, &other.pending_revocation))
        })
    }

    /// LeaveGroup for classic members (Kafka's `classicGroupLeaveToConsumerGroup`): each
    /// identity's error; the group moves to a new epoch if anyone left.
    pub fn classic_leave(
        &mut self,
        identities: &[(String, Option<String>)],
        topics: TopicResolver<'_>,
    ) -> Vec<Option<ResponseError>> {
        let mut left = false;
        let results = identities
            .iter()
            .map(|(member_id, instance)| {
                let id = match instance {
                    Some(instance) => {
                        let Some(m) = self
                            .members
                            .values()
                            .find(|m| m.instance_id.as_deref() == Some(instance.as_str()))
                        else {
                            return Some(ResponseError::UnknownMemberId);
                        };
                        // An administrative removal names the instance only.
                        if !member_id.is_empty() && m.member_id != *member_id {
                            return Some(ResponseError::FencedInstanceId);
                        }
                        m.member_id.clone()
                    }
                    None => member_id.clone(),
                };
                if !self.members.get(&id).is_some_and(|m| m.classic.is_some()) {
                    return Some(ResponseError::UnknownMemberId);
                }
                tracing::info!(member = %id, "classic member left the consumer group");
                self.members.shift_remove(&id);
                self.target.remove(&id);
                left = true;
                None
            })
            .collect();
        if left {
            self.bump_and_assign(topics);
        }
        results
    }

    /// After members left: a downgrade is due when one of them spoke the consumer protocol
    /// and every member left speaks the classic one.
    pub(super) fn note_departure(&mut self, consumer_left: bool) {
        self.downgrade_due = consumer_left
            && !self.members.is_empty()
            && self.members.values().all(|m| m.classic.is_some());
    }
}

/// Converts a classic group of consumers with members into a consumer group (Kafka's
/// `ConsumerGroup.fromClassicGroup`): the group epoch and every member's epoch are the
/// generation; each member's assignment is both what it holds and its target. Parked
/// JoinGroup and SyncGroup calls are answered REBALANCE_IN_PROGRESS, so their members
/// rejoin into the consumer group. The group's next write deletes its classic record.
/// Fails, changing nothing, when a member's metadata is not the consumer protocol's.
pub fn upgrade(g: &mut Group, topics: TopicResolver<'_>, now: Instant) -> Result<(), String> {
    let protocol = g.protocol_name.clone().unwrap_or_default();
    let mut members = Vec::with_capacity(g.members.len());
    for m in g.members.values() {
        let metadata = m
            .protocols
            .iter()
            .find(|(n, _)| *n == protocol)
            .or(m.protocols.first())
            .map(|(_, b)| b.clone())
            .unwrap_or_default();
        let subscription = decode_subscription(&metadata).ok_or_else(|| {
            format!(
                "member {} has no consumer protocol subscription",
                m.member_id
            )
        })?;
        let assigned = decode_assignment(&m.assignment)
            .ok_or_else(|| format!("member {} has a malformed assignment", m.member_id))?;
        members.push((m, subscription, by_id(&assigned, topics)));
    }
    let generation = g.generation;
    let mut c = ConsumerState::new();
    c.group_epoch = generation;
    c.assignment_epoch = generation;
    for (m, subscription, assigned) in members {
        c.target.insert(m.member_id.clone(), assigned.clone());
        c.members.insert(
            m.member_id.clone(),
            ConsumerMember {
                member_id: m.member_id.clone(),
                instance_id: m.group_instance_id.clone(),
                rack_id: subscription.rack_id,
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                member_epoch: generation,
                previous_member_epoch: generation,
                rebalance_timeout: m.rebalance_timeout,
                subscribed_topics: subscription.topics,
                subscribed_regex: None,
                regex_topics: Default::default(),
                regex_resolved_at: None,
                server_assignor: None,
                assigned,
                pending_revocation: Assignment::new(),
                revocation_deadline: None,
                session_deadline: now + m.session_timeout,
                last_sent: None,
                classic: Some(ClassicMember {
                    session_timeout: m.session_timeout,
                    protocols: m.protocols.clone(),
                    join_deadline: None,
                    sync_deadline: None,
                }),
            },
        );
    }
    c.subscription_metadata = c.subscription_metadata(topics);
    c.touched.all = true;
    c.replaces_classic = true;
    for (id, m) in g.members.iter_mut() {
        if let Some(tx) = m.awaiting_join.take() {
            let _ = tx.send(crate::coordinator::group::JoinResult::error(
                ResponseError::RebalanceInProgress,
                id,
            ));
        }
        if let Some(tx) = m.awaiting_sync.take() {
            let _ = tx.send(crate::coordinator::group::SyncResult::error(
                ResponseError::RebalanceInProgress,
            ));
        }
    }
    tracing::info!(group = %g.id, generation, members = c.members.len(),
        "converted the classic group to a consumer group");
    g.clear_classic();
    g.protocol_type = Some(PROTOCOL_TYPE.into());
    g.consumer = Some(c);
    Ok(())
}

/// Converts a consumer group whose members all speak the classic protocol into a classic
/// group (Kafka's `ClassicGroup.fromConsumerGroup`): Stable at the group epoch, each member
/// holding its target assignment, then (with `rebalance`) preparing a rebalance so they
/// rejoin. Returns the records of the conversion: the consumer group's tombstones, then the
/// classic group's record.
pub fn downgrade(
    g: &mut Group,
    names: &dyn Fn(&Uuid) -> Option<String>,
    rebalance: bool,
    now: Instant,
    now_ms: i64,
) -> Vec<(Bytes, Option<Bytes>)> {
    let Some(c) = g.consumer.take() else {
        return Vec::new();
    };
    let mut records = c.tombstones();
    g.clear_classic();
    g.protocol_type = Some(PROTOCOL_TYPE.into());
    g.generation = c.group_epoch;
    for m in c.members.values() {
        let Some(classic) = &m.classic else { continue };
        let member = Member {
            member_id: m.member_id.clone(),
            group_instance_id: m.instance_id.clone(),
            client_id: m.client_id.clone(),
            client_host: m.client_host.clone(),
            rebalance_timeout: m.rebalance_timeout,
            session_timeout: classic.session_timeout,
            protocol_type: PROTOCOL_TYPE.into(),
            protocols: classic.protocols.clone(),
            assignment: Bytes::new(),
            awaiting_join: None,
            awaiting_sync: None,
            heartbeat_deadline: now + classic.session_timeout,
            is_new: false,
        };
        if let Some(instance) = &m.instance_id {
            g.static_members
                .insert(instance.clone(), m.member_id.clone());
        }
        g.members.insert(m.member_id.clone(), member);
    }
    g.protocol_name = g.select_protocol();
    let protocol = g.protocol_name.clone().unwrap_or_default();
    for (id, member) in g.members.iter_mut() {
        let version = member
            .protocols
            .iter()
            .find(|(n, _)| *n == protocol)
            .and_then(|(_, m)| version_of(m))
            .unwrap_or(0);
        let target = c.target.get(id).cloned().unwrap_or_default();
        member.assignment = encode_assignment(&target, names, version);
    }
    g.leader = g.members.keys().next().cloned();
    g.state = GroupState::Stable;
    g.rebalances += c.rebalances;
    tracing::info!(group = %g.id, generation = g.generation, members = g.members.len(),
        "converted the consumer group to a classic group");
    if rebalance {
        g.prepare_rebalance(now, now_ms);
    }
    records.push((
        offsets_topic::encode_key(&RecordKey::Group {
            group: g.id.clone(),
        }),
        Some(offsets_topic::encode_group(&g.to_value())),
    ));
    records
}

/// The classic protocol's embedded metadata, for tests and tools: a subscription of
/// `topics` owning `owned`, at `version`.
pub fn encode_subscription(topics: &[&str], owned: &[(&str, &[i32])], version: i16) -> Bytes {
    use kafka_protocol::messages::consumer_protocol_subscription::TopicPartition;
    let s = ConsumerProtocolSubscription::default()
        .with_topics(
            topics
                .iter()
                .map(|t| StrBytes::from_string(t.to_string()))
                .collect(),
        )
        .with_owned_partitions(
            owned
                .iter()
                .map(|(t, ps)| {
                    TopicPartition::default()
                        .with_topic(TopicName(StrBytes::from_string(t.to_string())))
                        .with_partitions(ps.to_vec())
                })
                .collect(),
        );
    let mut b = BytesMut::new();
    b.extend_from_slice(&version.to_be_bytes());
    if s.encode(&mut b, version).is_err() {
        return Bytes::new();
    }
    b.freeze()
}
