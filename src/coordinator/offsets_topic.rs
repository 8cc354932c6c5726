//! Records of the `__consumer_offsets` topic in Kafka's own format, so Kafka's tools (and a
//! future migration) can read them: offset commits (key v1, value v3) and group metadata
//! (key v2, value v3). A null value is a tombstone. Pure encode/decode, no I/O.

use bytes::{Buf, BufMut, Bytes, BytesMut};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordKey {
    Offset {
        group: String,
        topic: String,
        partition: i32,
    },
    Group {
        group: String,
    },
    /// A KIP-848 consumer group's record ([`super::consumer_group::records`]).
    Consumer {
        group: String,
        record: ConsumerKey,
    },
}

/// Which record of a consumer group (Kafka's record type).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ConsumerKey {
    /// 3: ConsumerGroupMetadata.
    Metadata,
    /// 5: ConsumerGroupMemberMetadata.
    Member(String),
    /// 6: ConsumerGroupTargetAssignmentMetadata.
    TargetMetadata,
    /// 7: ConsumerGroupTargetAssignmentMember.
    TargetMember(String),
    /// 8: ConsumerGroupCurrentMemberAssignment.
    Assignment(String),
    /// 16: ConsumerGroupRegularExpression.
    Regex(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetValue {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberValue {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    pub subscription: Bytes,
    pub assignment: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupValue {
    pub protocol_type: String,
    pub generation: i32,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    pub current_state_timestamp: i64,
    pub members: Vec<MemberValue>,
}

#[derive(Debug, thiserror::Error)]
#[error("malformed __consumer_offsets record: {0}")]
pub struct DecodeError(&'static str);

fn put_str(b: &mut BytesMut, s: &str) {
    b.put_i16(s.len() as i16);
    b.put_slice(s.as_bytes());
}
fn put_nullable_str(b: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => put_str(b, s),
        None => b.put_i16(-1),
    }
}
fn put_bytes(b: &mut BytesMut, v: &[u8]) {
    b.put_i32(v.len() as i32);
    b.put_slice(v);
}

fn need(b: &Bytes, n: usize) -> Result<(), DecodeError> {
    if b.remaining() < n {
        Err(DecodeError("truncated"))
    } else {
        Ok(())
    }
}
fn get_i16(b: &mut Bytes) -> Result<i16, DecodeError> {
    need(b, 2)?;
    Ok(b.get_i16())
}
fn get_i32(b: &mut Bytes) -> Result<i32, DecodeError> {
    need(b, 4)?;
    Ok(b.get_i32())
}
fn get_i64(b: &mut Bytes) -> Result<i64, DecodeError> {
    need(b, 8)?;
    Ok(b.get_i64())
}
fn get_nullable_str(b: &mut Bytes) -> Result<Option<String>, DecodeError> {
    let len = get_i16(b)?;
    if len < 0 {
        return Ok(None);
    }
    need(b, len as usize)?;
    let s = b.split_to(len as usize);
    String::from_utf8(s.to_vec())
        .map(Some)
        .map_err(|_| DecodeError("string is not UTF-8"))
}
fn get_str(b: &mut Bytes) -> Result<String, DecodeError> {
    get_nullable_str(b)?.ok_or(DecodeError("unexpected null string"))
}
fn get_bytes(b: &mut Bytes) -> Result<Bytes, DecodeError> {
    let len = get_i32(b)?;
    if len < 0 {
        return Ok(Bytes::new());
    }
    need(b, len as usize)?;
    Ok(b.split_to(len as usize))
}

pub fn encode_key(key: &RecordKey) -> Bytes {
    let mut b = BytesMut::new();
    match key {
        RecordKey::Offset {
            group,
            topic,
            partition,
        } => {
            b.put_i16(1);
            put_str(&mut b, group);
            put_str(&mut b, topic);
            b.put_i32(*partition);
        }
        RecordKey::Group { group } => {
            b.put_i16(2);
            put_str(&mut b, group);
        }
        RecordKey::Consumer { group, record } => {
            let (kind, second) = match record {
                ConsumerKey::Metadata => (3, None),
                ConsumerKey::Member(m) => (5, Some(m)),
                ConsumerKey::TargetMetadata => (6, None),
                ConsumerKey::TargetMember(m) => (7, Some(m)),
                ConsumerKey::Assignment(m) => (8, Some(m)),
                ConsumerKey::Regex(r) => (16, Some(r)),
            };
            b.put_i16(kind);
            put_str(&mut b, group);
            if let Some(s) = second {
                put_str(&mut b, s);
            }
        }
    }
    b.freeze()
}

pub fn decode_key(mut b: Bytes) -> Result<RecordKey, DecodeError> {
    match get_i16(&mut b)? {
        0 | 1 => Ok(RecordKey::Offset {
            group: get_str(&mut b)?,
            topic: get_str(&mut b)?,
            partition: get_i32(&mut b)?,
        }),
        2 => Ok(RecordKey::Group {
            group: get_str(&mut b)?,
        }),
        kind @ (3 | 5 | 6 | 7 | 8 | 16) => {
            let group = get_str(&mut b)?;
            let record = match kind {
                3 => ConsumerKey::Metadata,
                5 => ConsumerKey::Member(get_str(&mut b)?),
                6 => ConsumerKey::TargetMetadata,
                7 => ConsumerKey::TargetMember(get_str(&mut b)?),
                8 => ConsumerKey::Assignment(get_str(&mut b)?),
                _ => ConsumerKey::Regex(get_str(&mut b)?),
            };
            Ok(RecordKey::Consumer { group, record })
        }
        _ => Err(DecodeError("unknown key version")),
    }
}

pub fn encode_offset(v: &OffsetValue) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(3);
    b.put_i64(v.offset);
    b.put_i32(v.leader_epoch);
    put_str(&mut b, &v.metadata);
    b.put_i64(v.commit_timestamp);
    b.freeze()
}

pub fn decode_offset(mut b: Bytes) -> Result<OffsetValue, DecodeError> {
    let version = get_i16(&mut b)?;
    let offset = get_i64(&mut b)?;
    let leader_epoch = if version >= 3 { get_i32(&mut b)? } else { -1 };
    let metadata = get_str(&mut b)?;
    let commit_timestamp = get_i64(&mut b)?;
    Ok(OffsetValue {
        offset,
        leader_epoch,
        metadata,
        commit_timestamp,
    })
}

pub fn encode_group(v: &GroupValue) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(3);
    put_str(&mut b, &v.protocol_type);
    b.put_i32(v.generation);
    put_nullable_str(&mut b, v.protocol.as_deref());
    put_nullable_str(&mut b, v.leader.as_deref());
    b.put_i64(v.current_state_timestamp);
    b.put_i32(v.members.len() as i32);
    for m in &v.members {
        put_str(&mut b, &m.member_id);
        put_nullable_str(&mut b, m.group_instance_id.as_deref());
        put_str(&mut b, &m.client_id);
        put_str(&mut b, &m.client_host);
        b.put_i32(m.rebalance_timeout_ms);
        b.put_i32(m.session_timeout_ms);
        put_bytes(&mut b, &m.subscription);
        put_bytes(&mut b, &m.assignment);
    }
    b.freeze()
}

pub fn decode_group(mut b: Bytes) -> Result<GroupValue, DecodeError> {
    let version = get_i16(&mut b)?;
    let protocol_type = get_str(&mut b)?;
    let generation = get_i32(&mut b)?;
    let protocol = get_nullable_str(&mut b)?;
    let leader = get_nullable_str(&mut b)?;
    let current_state_timestamp = if version >= 2 { get_i64(&mut b)? } else { -1 };
    let n = get_i32(&mut b)?;
    let mut members = Vec::new();
    for _ in 0..n.max(0) {
        let member_id = get_str(&mut b)?;
        let group_instance_id = if version >= 3 {
            get_nullable_str(&mut b)?
        } else {
            None
        };
        let client_id = get_str(&mut b)?;
        let client_host = get_str(&mut b)?;
        let rebalance_timeout_ms = if version >= 1 { get_i32(&mut b)? } else { 0 };
        let session_timeout_ms = get_i32(&mut b)?;
        let subscription = get_bytes(&mut b)?;
        let assignment = get_bytes(&mut b)?;
        members.push(MemberValue {
            member_id,
            group_instance_id,
            client_id,
            client_host,
            rebalance_timeout_ms,
            session_timeout_ms,
            subscription,
            assignment,
        });
    }
    Ok(GroupValue {
        protocol_type,
        generation,
        protocol,
        leader,
        current_state_timestamp,
        members,
    })
}

/// Java's `String.hashCode`, which Kafka uses to pick a group's offsets partition.
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(c as i32))
}

/// The `__consumer_offsets` partition of a group: `abs(hashCode) % partitions`, with Kafka's
/// `Utils.abs` (which maps `i32::MIN` to 0).
pub fn partition_for(group: &str, partitions: i32) -> i32 {
    let h = java_string_hash(group);
    let abs = if h == i32::MIN { 0 } else { h.abs() };
    abs % partitions.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let k = RecordKey::Offset {
            group: "g".into(),
            topic: "t".into(),
            partition: 3,
        };
        assert_eq!(decode_key(encode_key(&k)).unwrap(), k);
        let v = OffsetValue {
            offset: 42,
            leader_epoch: 1,
            metadata: "m".into(),
            commit_timestamp: 7,
        };
        assert_eq!(decode_offset(encode_offset(&v)).unwrap(), v);
        let g = GroupValue {
            protocol_type: "consumer".into(),
            generation: 5,
            protocol: Some("range".into()),
            leader: Some("a".into()),
            current_state_timestamp: 9,
            members: vec![MemberValue {
                member_id: "a".into(),
                group_instance_id: Some("i".into()),
                client_id: "c".into(),
                client_host: "/127.0.0.1".into(),
                rebalance_timeout_ms: 1,
                session_timeout_ms: 2,
                subscription: Bytes::from_static(b"s"),
                assignment: Bytes::from_static(b"a"),
            }],
        };
        assert_eq!(decode_group(encode_group(&g)).unwrap(), g);
        assert!(decode_key(Bytes::from_static(&[0, 9])).is_err());
        for record in [
            ConsumerKey::Metadata,
            ConsumerKey::Member("m".into()),
            ConsumerKey::TargetMetadata,
            ConsumerKey::TargetMember("m".into()),
            ConsumerKey::Assignment("m".into()),
            ConsumerKey::Regex("o.*".into()),
        ] {
            let k = RecordKey::Consumer {
                group: "g".into(),
                record,
            };
            assert_eq!(decode_key(encode_key(&k)).unwrap(), k);
        }
    }

    #[test]
    fn group_partitions_match_kafka() {
        // Java: "my-group".hashCode() == -1906497762; Utils.abs(..) % 50 == 12.
        assert_eq!(java_string_hash("my-group"), -1906497762);
        assert_eq!(partition_for("my-group", 50), 12);
        assert_eq!(java_string_hash(""), 0);
    }
}
