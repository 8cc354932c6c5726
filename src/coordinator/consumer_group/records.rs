//! A consumer group's state in `__consumer_offsets`, in Kafka's formats: its group
//! coordinator's KIP-848 records (types 3, 5, 6, 7, 8 and 16; value version 0, flexible),
//! so a coordinator that takes the group over after a restart or a failover continues it
//! with the same group, assignment and member epochs and the same target and current
//! assignments. Members go on heartbeating with their epochs; nobody is fenced and nobody
//! rejoins.
//!
//! | type | key | value |
//! |---|---|---|
//! | 3 | group | group epoch; tag 0: hash of the subscribed topics |
//! | 5 | group, member | instance, rack, client, host, topic names, regex, rebalance timeout, assignor |
//! | 6 | group | assignment epoch |
//! | 7 | group, member | the member's target partitions |
//! | 8 | group, member | member epoch, previous epoch, state, assigned, pending revocation |
//! | 16 | group, regex | the topics the regex matched |
//!
//! Writes are differences. The group keeps the records it last wrote (its image); after a
//! change, the records that differ, and tombstones for the ones gone, are appended as one
//! batch before the heartbeat is answered. Only the members a change touched are encoded
//! again, unless it changed the group epoch (which can move every member's target).
//!
//! Strata's own choices inside Kafka's fields: the topic hash (tag 0 of type 3) is Strata's
//! FNV-1a over the subscribed topics' names, ids and partition counts, compared only with
//! itself (a different hash costs one rebalance); the regex records carry version and
//! timestamp 0 (Strata resolves a regex again on the member's first heartbeat after a load
//! and keeps it when it matches the same topics).
//!
//! Decoding checks every length and count against the bytes left before allocating.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use indexmap::IndexMap;
use uuid::Uuid;

use super::{Assignment, ConsumerMember, ConsumerState, Touched};
use crate::coordinator::flexible::{put_uvarint, ReadError, Reader};
use crate::coordinator::offsets_topic::{self, ConsumerKey, RecordKey};

/// The records a group last wrote: encoded key → encoded value.
pub type Image = BTreeMap<Bytes, Bytes>;

/// Kafka's `MemberState` values (type 8's `State`).
const STABLE: i8 = 0;
const UNREVOKED_PARTITIONS: i8 = 1;
const UNRELEASED_PARTITIONS: i8 = 2;

/// Type 5: who a member is and what it subscribes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberMetadata {
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topic_names: Vec<String>,
    pub subscribed_topic_regex: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub server_assignor: Option<String>,
    /// Tag 0: set for a member that speaks the classic protocol inside the group.
    pub classic: Option<ClassicMetadata>,
}

/// Type 5's `ClassicMemberMetadata`: what a classic member joined with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassicMetadata {
    pub session_timeout_ms: i32,
    /// (protocol name, its metadata), in the member's order of preference.
    pub protocols: Vec<(String, Bytes)>,
}

/// Type 8: where a member stands in its reconciliation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentAssignment {
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    pub state: i8,
    pub assigned: Assignment,
    pub pending_revocation: Assignment,
}

/// The value of one consumer-group record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// Type 3: the group epoch and the hash of the subscribed topics.
    Group {
        epoch: i32,
        metadata_hash: i64,
    },
    Member(MemberMetadata),
    /// Type 6: the epoch the target assignment was computed at.
    TargetEpoch(i32),
    /// Type 7: a member's target partitions.
    Target(Assignment),
    Current(CurrentAssignment),
    /// Type 16: the topics a regex matched.
    Regex(Vec<String>),
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("consumer group record truncated")]
    Truncated,
    #[error("consumer group record value version {0} is unknown")]
    UnknownVersion(i16),
    #[error("consumer group record is malformed: {0}")]
    Malformed(&'static str),
}

// ---- encoding -------------------------------------------------------------------------

fn put_str(b: &mut BytesMut, s: &str) {
    put_uvarint(b, s.len() as u64 + 1);
    b.put_slice(s.as_bytes());
}

fn put_nullable_str(b: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => put_str(b, s),
        None => put_uvarint(b, 0),
    }
}

fn put_strs<'a>(b: &mut BytesMut, items: impl ExactSizeIterator<Item = &'a String>) {
    put_uvarint(b, items.len() as u64 + 1);
    for s in items {
        put_str(b, s);
    }
}

/// `[]TopicPartitions`: topic id, partitions, no tagged fields.
fn put_assignment(b: &mut BytesMut, a: &Assignment) {
    put_uvarint(b, a.len() as u64 + 1);
    for (id, ps) in a {
        b.put_slice(id.as_bytes());
        put_uvarint(b, ps.len() as u64 + 1);
        for p in ps {
            b.put_i32(*p);
        }
        put_uvarint(b, 0);
    }
}

pub fn encode_value(v: &Value) -> Bytes {
    let mut b = BytesMut::with_capacity(64);
    b.put_i16(0);
    match v {
        Value::Group {
            epoch,
            metadata_hash,
        } => {
            b.put_i32(*epoch);
            // Tagged field 0: MetadataHash.
            put_uvarint(&mut b, 1);
            put_uvarint(&mut b, 0);
            put_uvarint(&mut b, 8);
            b.put_i64(*metadata_hash);
            return b.freeze();
        }
        Value::Member(m) => {
            put_nullable_str(&mut b, m.instance_id.as_deref());
            put_nullable_str(&mut b, m.rack_id.as_deref());
            put_str(&mut b, &m.client_id);
            put_str(&mut b, &m.client_host);
            put_strs(&mut b, m.subscribed_topic_names.iter());
            put_nullable_str(&mut b, m.subscribed_topic_regex.as_deref());
            b.put_i32(m.rebalance_timeout_ms);
            put_nullable_str(&mut b, m.server_assignor.as_deref());
            if let Some(c) = &m.classic {
                // Tagged field 0: ClassicMemberMetadata, a nullable struct (a varint 1 before
                // it says it is not null).
                let mut field = BytesMut::new();
                put_uvarint(&mut field, 1);
                field.put_i32(c.session_timeout_ms);
                put_uvarint(&mut field, c.protocols.len() as u64 + 1);
                for (name, metadata) in &c.protocols {
                    put_str(&mut field, name);
                    put_uvarint(&mut field, metadata.len() as u64 + 1);
                    field.put_slice(metadata);
                    put_uvarint(&mut field, 0);
                }
                put_uvarint(&mut field, 0);
                put_uvarint(&mut b, 1);
                put_uvarint(&mut b, 0);
                put_uvarint(&mut b, field.len() as u64);
                b.put_slice(&field);
                return b.freeze();
            }
        }
        Value::TargetEpoch(epoch) => b.put_i32(*epoch),
        Value::Target(a) => put_assignment(&mut b, a),
        Value::Current(c) => {
            b.put_i32(c.member_epoch);
            b.put_i32(c.previous_member_epoch);
            b.put_i8(c.state);
            put_assignment(&mut b, &c.assigned);
            put_assignment(&mut b, &c.pending_revocation);
        }
        Value::Regex(topics) => {
            put_strs(&mut b, topics.iter());
            b.put_i64(0); // Version
            b.put_i64(0); // Timestamp
        }
    }
    put_uvarint(&mut b, 0);
    b.freeze()
}

// ---- decoding -------------------------------------------------------------------------

impl From<ReadError> for DecodeError {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Truncated => DecodeError::Truncated,
            ReadError::Malformed(m) => DecodeError::Malformed(m),
        }
    }
}

/// The shapes of these records on top of the shared reader.
trait RecordReader<'a> {
    fn compact_len(&mut self, min_item: usize) -> Result<Option<usize>, DecodeError>;
    fn nullable_str(&mut self) -> Result<Option<String>, DecodeError>;
    fn str(&mut self) -> Result<String, DecodeError>;
    fn strs(&mut self) -> Result<Vec<String>, DecodeError>;
    fn tagged_i64(&mut self, tag: u64) -> Result<Option<i64>, DecodeError>;
    fn assignment(&mut self) -> Result<Assignment, DecodeError>;
}

impl<'a> RecordReader<'a> for Reader<'a> {
    /// A compact length (`n + 1`, 0 for null), checked against the bytes left at
    /// `min_item` bytes per item before anything is allocated for it.
    fn compact_len(&mut self, min_item: usize) -> Result<Option<usize>, DecodeError> {
        let n = self.uvarint()?;
        if n == 0 {
            return Ok(None);
        }
        let n = usize::try_from(n - 1).map_err(|_| DecodeError::Truncated)?;
        if n.saturating_mul(min_item.max(1)) > self.remaining() {
            return Err(DecodeError::Truncated);
        }
        Ok(Some(n))
    }
    fn nullable_str(&mut self) -> Result<Option<String>, DecodeError> {
        let Some(n) = self.compact_len(1)? else {
            return Ok(None);
        };
        let s = std::str::from_utf8(self.take(n)?)
            .map_err(|_| DecodeError::Malformed("string is not UTF-8"))?;
        Ok(Some(s.to_string()))
    }
    fn str(&mut self) -> Result<String, DecodeError> {
        self.nullable_str()?
            .ok_or(DecodeError::Malformed("null string"))
    }
    fn strs(&mut self) -> Result<Vec<String>, DecodeError> {
        let n = self
            .compact_len(1)?
            .ok_or(DecodeError::Malformed("null array"))?;
        (0..n).map(|_| self.str()).collect()
    }
    /// A tagged-field section; returns the int64 field `tag` if present.
    fn tagged_i64(&mut self, tag: u64) -> Result<Option<i64>, DecodeError> {
        match self.tagged(tag)? {
            None => Ok(None),
            Some(field) => {
                let bytes: [u8; 8] = field
                    .try_into()
                    .map_err(|_| DecodeError::Malformed("a tagged int64 is not 8 bytes"))?;
                Ok(Some(i64::from_be_bytes(bytes)))
            }
        }
    }
    /// `[]TopicPartitions` (a topic is at least its id, two lengths: 18 bytes).
    fn assignment(&mut self) -> Result<Assignment, DecodeError> {
        let n = self
            .compact_len(18)?
            .ok_or(DecodeError::Malformed("null partitions"))?;
        let mut a = Assignment::new();
        for _ in 0..n {
            let id = Uuid::from_slice(self.take(16)?).map_err(|_| DecodeError::Truncated)?;
            let count = self
                .compact_len(4)?
                .ok_or(DecodeError::Malformed("null partition list"))?;
            let mut ps = BTreeSet::new();
            for _ in 0..count {
                let p = self.i32()?;
                if p < 0 {
                    return Err(DecodeError::Malformed("negative partition"));
                }
                ps.insert(p);
            }
            // Tag 0 of type 8's TopicPartitions (AssignmentEpochs) is not used here.
            self.skip_tagged()?;
            if !ps.is_empty() {
                a.entry(id).or_default().extend(ps);
            }
        }
        Ok(a)
    }
}

/// Decodes the value of a record whose key is `key`.
pub fn decode_value(key: &ConsumerKey, bytes: &[u8]) -> Result<Value, DecodeError> {
    let mut r = Reader(bytes);
    let version = r.i16()?;
    if version != 0 {
        return Err(DecodeError::UnknownVersion(version));
    }
    let value = match key {
        ConsumerKey::Metadata => {
            let epoch = r.i32()?;
            let metadata_hash = r.tagged_i64(0)?.unwrap_or(0);
            return Ok(Value::Group {
                epoch,
                metadata_hash,
            });
        }
        ConsumerKey::Member(_) => {
            let mut m = MemberMetadata {
                instance_id: r.nullable_str()?,
                rack_id: r.nullable_str()?,
                client_id: r.str()?,
                client_host: r.str()?,
                subscribed_topic_names: r.strs()?,
                subscribed_topic_regex: r.nullable_str()?,
                rebalance_timeout_ms: r.i32()?,
                server_assignor: r.nullable_str()?,
                classic: None,
            };
            m.classic = r.tagged(0)?.map(classic_metadata).transpose()?.flatten();
            return Ok(Value::Member(m));
        }
        ConsumerKey::TargetMetadata => Value::TargetEpoch(r.i32()?),
        ConsumerKey::TargetMember(_) => Value::Target(r.assignment()?),
        ConsumerKey::Assignment(_) => Value::Current(CurrentAssignment {
            member_epoch: r.i32()?,
            previous_member_epoch: r.i32()?,
            state: r.i8()?,
            assigned: r.assignment()?,
            pending_revocation: r.assignment()?,
        }),
        ConsumerKey::Regex(_) => {
            let topics = r.strs()?;
            let _version = r.i64()?;
            let _timestamp = r.i64()?;
            Value::Regex(topics)
        }
    };
    r.skip_tagged()?;
    Ok(value)
}

/// Type 5's tag 0 (`ClassicMemberMetadata`): a varint marker (0 for null, as Kafka's
/// generated readers take it), then the struct with its own tagged fields.
fn classic_metadata(bytes: &[u8]) -> Result<Option<ClassicMetadata>, DecodeError> {
    let mut r = Reader(bytes);
    if r.uvarint()? == 0 {
        return Ok(None);
    }
    let session_timeout_ms = r.i32()?;
    // A protocol is at least two lengths and a tag count: 3 bytes.
    let n = r
        .compact_len(3)?
        .ok_or(DecodeError::Malformed("null protocols"))?;
    let mut protocols = Vec::with_capacity(n);
    for _ in 0..n {
        let name = r.str()?;
        let len = r
            .compact_len(1)?
            .ok_or(DecodeError::Malformed("null protocol metadata"))?;
        let metadata = Bytes::copy_from_slice(r.take(len)?);
        r.skip_tagged()?;
        protocols.push((name, metadata));
    }
    r.skip_tagged()?;
    Ok(Some(ClassicMetadata {
        session_timeout_ms,
        protocols,
    }))
}

// ---- the group's records ------------------------------------------------------------------

/// FNV-1a over the subscribed topics' names, ids and partition counts.
pub(super) fn metadata_hash(topics: &[(String, Uuid, i32)]) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    for (name, id, count) in topics {
        eat(&(name.len() as u32).to_be_bytes());
        eat(name.as_bytes());
        eat(id.as_bytes());
        eat(&count.to_be_bytes());
    }
    h as i64
}

fn key(group: &str, record: ConsumerKey) -> Bytes {
    offsets_topic::encode_key(&RecordKey::Consumer {
        group: group.to_string(),
        record,
    })
}

/// A write: the records to append, and what the image held before at their keys.
#[derive(Debug, Default)]
pub struct Changes {
    pub records: Vec<(Bytes, Option<Bytes>)>,
    undo: Vec<(Bytes, Option<Bytes>)>,
    /// The records start with the tombstone of the classic group this one replaced.
    replaces_classic: bool,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

impl ConsumerMember {
    fn state(&self, assignment_epoch: i32, target: Option<&Assignment>) -> i8 {
        if !self.pending_revocation.is_empty() {
            UNREVOKED_PARTITIONS
        } else if self.member_epoch == assignment_epoch
            && target.is_some_and(|t| *t != self.assigned)
        {
            UNRELEASED_PARTITIONS
        } else {
            STABLE
        }
    }

    fn metadata(&self) -> MemberMetadata {
        MemberMetadata {
            instance_id: self.instance_id.clone(),
            rack_id: self.rack_id.clone(),
            client_id: self.client_id.clone(),
            client_host: self.client_host.clone(),
            subscribed_topic_names: self.subscribed_topics.clone(),
            subscribed_topic_regex: self.subscribed_regex.clone(),
            rebalance_timeout_ms: self.rebalance_timeout.as_millis().min(i32::MAX as u128) as i32,
            server_assignor: self.server_assignor.clone(),
            classic: self.classic.as_ref().map(|c| ClassicMetadata {
                session_timeout_ms: c.session_timeout.as_millis().min(i32::MAX as u128) as i32,
                protocols: c.protocols.clone(),
            }),
        }
    }
}

impl ConsumerState {
    /// The records of the group-wide state: epoch, assignment epoch, regexes.
    fn group_records(&self, group: &str, out: &mut Vec<(Bytes, Bytes)>) {
        out.push((
            key(group, ConsumerKey::Metadata),
            encode_value(&Value::Group {
                epoch: self.group_epoch,
                metadata_hash: metadata_hash(&self.subscription_metadata),
            }),
        ));
        out.push((
            key(group, ConsumerKey::TargetMetadata),
            encode_value(&Value::TargetEpoch(self.assignment_epoch)),
        ));
        let mut regexes: BTreeMap<&String, BTreeSet<&String>> = BTreeMap::new();
        for m in self.members.values() {
            if let Some(r) = &m.subscribed_regex {
                regexes.entry(r).or_default().extend(m.regex_topics.iter());
            }
        }
        for (regex, topics) in regexes {
            let topics: Vec<String> = topics.into_iter().cloned().collect();
            out.push((
                key(group, ConsumerKey::Regex(regex.clone())),
                encode_value(&Value::Regex(topics)),
            ));
        }
    }

    /// The three records of member `id` (none when it is gone).
    fn member_records(&self, group: &str, id: &str, out: &mut Vec<(Bytes, Bytes)>) {
        let Some(m) = self.members.get(id) else {
            return;
        };
        let target = self.target.get(id);
        out.push((
            key(group, ConsumerKey::Member(id.to_string())),
            encode_value(&Value::Member(m.metadata())),
        ));
        out.push((
            key(group, ConsumerKey::TargetMember(id.to_string())),
            encode_value(&Value::Target(target.cloned().unwrap_or_default())),
        ));
        out.push((
            key(group, ConsumerKey::Assignment(id.to_string())),
            encode_value(&Value::Current(CurrentAssignment {
                member_epoch: m.member_epoch,
                previous_member_epoch: m.previous_member_epoch,
                state: m.state(self.assignment_epoch, target),
                assigned: m.assigned.clone(),
                pending_revocation: m.pending_revocation.clone(),
            })),
        ));
    }

    /// Whether a change is waiting to be written.
    pub fn needs_write(&self) -> bool {
        self.replaces_classic || self.touched.all || !self.touched.members.is_empty()
    }

    /// The records `touched` covers as they are now, and the keys written before that are
    /// gone (a member that left; with `touched.all`, anything not wanted any more).
    fn wanted(&self, group: &str, touched: &Touched) -> (Vec<(Bytes, Bytes)>, Vec<Bytes>) {
        let mut wanted = Vec::new();
        self.group_records(group, &mut wanted);
        let mut gone = Vec::new();
        if touched.all {
            for id in self.members.keys() {
                self.member_records(group, id, &mut wanted);
            }
            let keep: BTreeSet<&Bytes> = wanted.iter().map(|(k, _)| k).collect();
            gone = self
                .persisted
                .keys()
                .filter(|k| !keep.contains(k))
                .cloned()
                .collect();
        } else {
            for id in &touched.members {
                if self.members.contains_key(id) {
                    self.member_records(group, id, &mut wanted);
                    continue;
                }
                gone.extend(
                    [
                        ConsumerKey::Member(id.clone()),
                        ConsumerKey::TargetMember(id.clone()),
                        ConsumerKey::Assignment(id.clone()),
                    ]
                    .map(|k| key(group, k))
                    .into_iter()
                    .filter(|k| self.persisted.contains_key(k)),
                );
            }
        }
        (wanted, gone)
    }

    /// Forgets what was touched when the records it covers are what was last written: a
    /// heartbeat that changed nothing durable (most of them) needs no write. Returns
    /// [`Self::needs_write`] after.
    pub fn drop_unchanged(&mut self, group: &str) -> bool {
        if self.replaces_classic || self.touched.all || self.touched.members.is_empty() {
            return self.needs_write();
        }
        let (wanted, gone) = self.wanted(group, &self.touched);
        if gone.is_empty() && wanted.iter().all(|(k, v)| self.persisted.get(k) == Some(v)) {
            self.touched = Touched::default();
        }
        self.needs_write()
    }

    /// The records that changed since the image, with tombstones for the ones gone; the
    /// image takes them at once (writes of a group are serialized by [`Self::writer`]). Give
    /// them back with [`Self::undo`] if the write fails.
    pub fn take_changes(&mut self, group: &str) -> Changes {
        let touched = std::mem::take(&mut self.touched);
        let (wanted, gone) = self.wanted(group, &touched);
        let mut changes = Changes::default();
        if std::mem::take(&mut self.replaces_classic) {
            // The classic group's record goes first, so a load never sees both protocols.
            changes.replaces_classic = true;
            changes.records.push((
                offsets_topic::encode_key(&RecordKey::Group {
                    group: group.to_string(),
                }),
                None,
            ));
        }
        for (k, v) in wanted {
            if self.persisted.get(&k) == Some(&v) {
                continue;
            }
            let before = self.persisted.insert(k.clone(), v.clone());
            changes.undo.push((k.clone(), before));
            changes.records.push((k, Some(v)));
        }
        for k in gone {
            let before = self.persisted.remove(&k);
            changes.undo.push((k.clone(), before));
            changes.records.push((k, None));
        }
        changes
    }

    /// A write of `changes` failed: the image goes back to what it was, and the next write
    /// compares every record.
    pub fn undo(&mut self, changes: Changes) {
        self.replaces_classic |= changes.replaces_classic;
        for (k, before) in changes.undo.into_iter().rev() {
            match before {
                Some(v) => self.persisted.insert(k, v),
                None => self.persisted.remove(&k),
            };
        }
        self.touched.all = true;
    }

    /// Tombstones for every record the group wrote (its deletion).
    pub fn tombstones(&self) -> Vec<(Bytes, Option<Bytes>)> {
        self.persisted.keys().map(|k| (k.clone(), None)).collect()
    }

    /// A group as its records left it (a load). Members' sessions start now; a member
    /// that was revoking partitions gets its rebalance timeout from now to release them.
    pub fn restore(group: &str, image: Image, session_timeout: Duration, now: Instant) -> Self {
        let mut state = ConsumerState::new();
        let mut metadata: BTreeMap<String, MemberMetadata> = BTreeMap::new();
        let mut current: BTreeMap<String, CurrentAssignment> = BTreeMap::new();
        let mut regexes: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut kept = Image::new();
        for (k, v) in image {
            let Ok(RecordKey::Consumer { group: g, record }) = offsets_topic::decode_key(k.clone())
            else {
                continue;
            };
            if g != group {
                continue;
            }
            let value = match decode_value(&record, &v) {
                Ok(value) => value,
                Err(e) => {
                    tracing::warn!(%group, error = %e, "skipping an undecodable consumer group record");
                    continue;
                }
            };
            match (record, value) {
                (
                    ConsumerKey::Metadata,
                    Value::Group {
                        epoch,
                        metadata_hash,
                    },
                ) => {
                    state.group_epoch = epoch;
                    state.loaded_metadata_hash = Some(metadata_hash);
                }
                (ConsumerKey::TargetMetadata, Value::TargetEpoch(epoch)) => {
                    state.assignment_epoch = epoch;
                }
                (ConsumerKey::Member(id), Value::Member(m)) => {
                    metadata.insert(id, m);
                }
                (ConsumerKey::TargetMember(id), Value::Target(a)) => {
                    state.target.insert(id, a);
                }
                (ConsumerKey::Assignment(id), Value::Current(c)) => {
                    current.insert(id, c);
                }
                (ConsumerKey::Regex(regex), Value::Regex(topics)) => {
                    regexes.insert(regex, topics.into_iter().collect());
                }
                _ => continue,
            }
            kept.insert(k, v);
        }
        let mut members = IndexMap::new();
        for (id, m) in metadata {
            let c = current.remove(&id);
            let (member_epoch, previous_member_epoch, assigned, pending_revocation) = match c {
                Some(c) => (
                    c.member_epoch,
                    c.previous_member_epoch,
                    c.assigned,
                    c.pending_revocation,
                ),
                None => (0, -1, Assignment::new(), Assignment::new()),
            };
            let rebalance_timeout = Duration::from_millis(m.rebalance_timeout_ms.max(0) as u64);
            // A classic member keeps the session it joined with.
            let classic = m.classic.map(|c| super::classic::ClassicMember {
                session_timeout: Duration::from_millis(c.session_timeout_ms.max(0) as u64),
                protocols: c.protocols,
                join_deadline: None,
                sync_deadline: None,
            });
            let session = classic
                .as_ref()
                .map(|c| c.session_timeout)
                .unwrap_or(session_timeout);
            let regex_topics = m
                .subscribed_topic_regex
                .as_ref()
                .and_then(|r| regexes.get(r).cloned())
                .unwrap_or_default();
            members.insert(
                id.clone(),
                ConsumerMember {
                    member_id: id,
                    instance_id: m.instance_id,
                    rack_id: m.rack_id,
                    client_id: m.client_id,
                    client_host: m.client_host,
                    member_epoch,
                    previous_member_epoch,
                    rebalance_timeout,
                    subscribed_topics: m.subscribed_topic_names,
                    subscribed_regex: m.subscribed_topic_regex,
                    regex_topics,
                    regex_resolved_at: None,
                    server_assignor: m.server_assignor,
                    revocation_deadline: (!pending_revocation.is_empty())
                        .then(|| now + rebalance_timeout),
                    assigned,
                    pending_revocation,
                    session_deadline: now + session,
                    last_sent: None,
                    classic,
                },
            );
        }
        // Targets of members without metadata are leftovers of a write cut short.
        state.target.retain(|id, _| members.contains_key(id));
        if let Some(a) = members.values().find_map(|m| m.server_assignor.clone()) {
            state.assignor = a;
        }
        state.members = members;
        state.persisted = kept;
        state
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn assignment(parts: &[(u128, &[i32])]) -> Assignment {
        parts
            .iter()
            .map(|(id, ps)| (Uuid::from_u128(*id), ps.iter().copied().collect()))
            .collect()
    }

    #[test]
    fn values_round_trip() {
        let values = [
            (
                ConsumerKey::Metadata,
                Value::Group {
                    epoch: 7,
                    metadata_hash: -3,
                },
            ),
            (
                ConsumerKey::Member("m".into()),
                Value::Member(MemberMetadata {
                    instance_id: Some("i".into()),
                    rack_id: None,
                    client_id: "c".into(),
                    client_host: "/127.0.0.1".into(),
                    subscribed_topic_names: vec!["a".into(), "b".into()],
                    subscribed_topic_regex: Some("o.*".into()),
                    rebalance_timeout_ms: 30_000,
                    server_assignor: Some("uniform".into()),
                    classic: None,
                }),
            ),
            (
                ConsumerKey::Member("k".into()),
                Value::Member(MemberMetadata {
                    instance_id: None,
                    rack_id: Some("r1".into()),
                    client_id: "classic".into(),
                    client_host: "/127.0.0.1".into(),
                    subscribed_topic_names: vec!["a".into()],
                    subscribed_topic_regex: None,
                    rebalance_timeout_ms: 60_000,
                    server_assignor: None,
                    classic: Some(ClassicMetadata {
                        session_timeout_ms: 10_000,
                        protocols: vec![
                            ("cooperative-sticky".into(), Bytes::from_static(&[0, 3, 1])),
                            ("range".into(), Bytes::new()),
                        ],
                    }),
                }),
            ),
            (ConsumerKey::TargetMetadata, Value::TargetEpoch(6)),
            (
                ConsumerKey::TargetMember("m".into()),
                Value::Target(assignment(&[(1, &[0, 2]), (2, &[5])])),
            ),
            (
                ConsumerKey::Assignment("m".into()),
                Value::Current(CurrentAssignment {
                    member_epoch: 6,
                    previous_member_epoch: 5,
                    state: UNREVOKED_PARTITIONS,
                    assigned: assignment(&[(1, &[0])]),
                    pending_revocation: assignment(&[(1, &[2])]),
                }),
            ),
            (
                ConsumerKey::Regex("o.*".into()),
                Value::Regex(vec!["orders".into()]),
            ),
        ];
        for (k, v) in values {
            assert_eq!(decode_value(&k, &encode_value(&v)), Ok(v));
        }
    }

    /// Bytes as Kafka 4.x writes a ConsumerGroupCurrentMemberAssignmentValue, with the
    /// AssignmentEpochs tag (KIP-1251) Strata does not write.
    #[test]
    fn a_current_assignment_with_kafkas_assignment_epochs_tag_is_read() {
        let mut b = BytesMut::new();
        b.put_i16(0);
        b.put_i32(4);
        b.put_i32(3);
        b.put_i8(STABLE);
        put_uvarint(&mut b, 2); // one topic
        b.put_slice(Uuid::from_u128(9).as_bytes());
        put_uvarint(&mut b, 2); // one partition
        b.put_i32(1);
        put_uvarint(&mut b, 1); // a tagged field: AssignmentEpochs [4]
        put_uvarint(&mut b, 0);
        put_uvarint(&mut b, 5);
        put_uvarint(&mut b, 2);
        b.put_i32(4);
        put_uvarint(&mut b, 1); // no pending revocation
        put_uvarint(&mut b, 0);
        let v = decode_value(&ConsumerKey::Assignment("m".into()), &b).unwrap();
        let Value::Current(c) = v else {
            panic!("{v:?}")
        };
        assert_eq!(c.assigned, assignment(&[(9, &[1])]));
        assert_eq!((c.member_epoch, c.previous_member_epoch), (4, 3));
    }

    #[test]
    fn a_count_the_bytes_cannot_back_is_refused_before_allocating() {
        let mut b = BytesMut::new();
        b.put_i16(0);
        put_uvarint(&mut b, u64::from(u32::MAX)); // ~4 billion topics in 0 bytes
        let e = decode_value(&ConsumerKey::TargetMember("m".into()), &b).unwrap_err();
        assert_eq!(e, DecodeError::Truncated);
    }

    proptest! {
        #[test]
        fn any_bytes_decode_or_fail_without_panicking(
            kind in 0usize..6,
            bytes in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            let key = [
                ConsumerKey::Metadata,
                ConsumerKey::Member("m".into()),
                ConsumerKey::TargetMetadata,
                ConsumerKey::TargetMember("m".into()),
                ConsumerKey::Assignment("m".into()),
                ConsumerKey::Regex("r".into()),
            ][kind].clone();
            let _ = decode_value(&key, &bytes);
        }
    }
}
