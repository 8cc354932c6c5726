//! The records of `__share_group_state` in Kafka's format (its share coordinator's
//! `ShareSnapshotKey` / `ShareSnapshotValue`, record type 0), so Kafka's tools can read them.
//!
//! Key: int16 record type (0), then group id (int16-length string), topic id (16 bytes),
//! partition (int32). Value: int16 version (0), then the flexible-version body: snapshot
//! epoch, state epoch, leader epoch (int32), start offset, create and write timestamps
//! (int64), the state batches as a compact array of (first offset, last offset, int8 delivery
//! state, int16 delivery count, no tagged fields), and tagged fields (skipped when read).
//!
//! Decoding checks every length and count against the bytes left before allocating.

use bytes::{BufMut, Bytes, BytesMut};
use uuid::Uuid;

use super::partition::{Snapshot, StateBatch};
use crate::coordinator::flexible::{put_uvarint, ReadError, Reader};

/// Record type 0: a snapshot (Kafka's type 1, an update, is never written here).
const SNAPSHOT: i16 = 0;

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StateKey {
    pub group: String,
    pub topic_id: Uuid,
    pub partition: i32,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("share state record truncated")]
    Truncated,
    #[error("share state record type {0} is not a snapshot")]
    UnknownType(i16),
    #[error("share state value version {0} is unknown")]
    UnknownVersion(i16),
    #[error("share state record is malformed: {0}")]
    Malformed(&'static str),
}

pub fn encode_key(k: &StateKey) -> Bytes {
    let mut b = BytesMut::with_capacity(2 + 2 + k.group.len() + 16 + 4);
    b.put_i16(SNAPSHOT);
    let group = k.group.as_bytes();
    let len = group.len().min(i16::MAX as usize);
    b.put_i16(len as i16);
    b.put_slice(&group[..len]);
    b.put_slice(k.topic_id.as_bytes());
    b.put_i32(k.partition);
    b.freeze()
}

pub fn encode_value(s: &Snapshot) -> Bytes {
    let mut b = BytesMut::with_capacity(48 + s.state_batches.len() * 20);
    b.put_i16(0);
    b.put_i32(s.snapshot_epoch);
    b.put_i32(s.state_epoch);
    b.put_i32(s.leader_epoch);
    b.put_i64(s.start_offset);
    b.put_i64(s.create_timestamp);
    b.put_i64(s.write_timestamp);
    put_uvarint(&mut b, s.state_batches.len() as u64 + 1);
    for sb in &s.state_batches {
        b.put_i64(sb.first_offset);
        b.put_i64(sb.last_offset);
        b.put_i8(sb.delivery_state);
        b.put_i16(sb.delivery_count);
        put_uvarint(&mut b, 0);
    }
    // Tagged field 0: DeliveryCompleteCount, written when known.
    if s.delivery_complete_count == -1 {
        put_uvarint(&mut b, 0);
    } else {
        put_uvarint(&mut b, 1);
        put_uvarint(&mut b, DELIVERY_COMPLETE_COUNT_TAG);
        put_uvarint(&mut b, 4);
        b.put_i32(s.delivery_complete_count);
    }
    b.freeze()
}

/// The tag of ShareSnapshotValue's `DeliveryCompleteCount`.
const DELIVERY_COMPLETE_COUNT_TAG: u64 = 0;

impl From<ReadError> for DecodeError {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Truncated => DecodeError::Truncated,
            ReadError::Malformed(m) => DecodeError::Malformed(m),
        }
    }
}

/// A tagged-field section, returning the int32 field `tag` if present.
fn tagged_i32(r: &mut Reader<'_>, tag: u64) -> Result<Option<i32>, DecodeError> {
    match r.tagged(tag)? {
        None => Ok(None),
        Some(field) => {
            let bytes: [u8; 4] = field
                .try_into()
                .map_err(|_| DecodeError::Malformed("a tagged int32 is not 4 bytes"))?;
            Ok(Some(i32::from_be_bytes(bytes)))
        }
    }
}

/// Decodes a key; `Ok(None)` for a key of another record type (an update, which Strata does
/// not write and does not need).
pub fn decode_key(bytes: &[u8]) -> Result<Option<StateKey>, DecodeError> {
    let mut r = Reader(bytes);
    let kind = r.i16()?;
    if kind != SNAPSHOT {
        return Ok(None);
    }
    let len = r.i16()?;
    if len < 0 {
        return Err(DecodeError::Malformed("null group id"));
    }
    let group = std::str::from_utf8(r.take(len as usize)?)
        .map_err(|_| DecodeError::Malformed("group id is not UTF-8"))?
        .to_string();
    let topic_id = Uuid::from_slice(r.take(16)?).map_err(|_| DecodeError::Truncated)?;
    let partition = r.i32()?;
    Ok(Some(StateKey {
        group,
        topic_id,
        partition,
    }))
}

/// The encoded size of one state batch: two int64, int8, int16, an empty tagged section.
const STATE_BATCH_BYTES: usize = 8 + 8 + 1 + 2 + 1;

pub fn decode_value(bytes: &[u8]) -> Result<Snapshot, DecodeError> {
    let mut r = Reader(bytes);
    let version = r.i16()?;
    if version != 0 {
        return Err(DecodeError::UnknownVersion(version));
    }
    let snapshot_epoch = r.i32()?;
    let state_epoch = r.i32()?;
    let leader_epoch = r.i32()?;
    let start_offset = r.i64()?;
    let create_timestamp = r.i64()?;
    let write_timestamp = r.i64()?;
    let n = r.uvarint()?;
    if n == 0 {
        return Err(DecodeError::Malformed("null state batches"));
    }
    let n = usize::try_from(n - 1).map_err(|_| DecodeError::Truncated)?;
    if n > r.remaining() / STATE_BATCH_BYTES {
        return Err(DecodeError::Truncated);
    }
    let mut state_batches = Vec::with_capacity(n);
    for _ in 0..n {
        let first_offset = r.i64()?;
        let last_offset = r.i64()?;
        let delivery_state = r.i8()?;
        let delivery_count = r.i16()?;
        r.skip_tagged()?;
        if last_offset < first_offset {
            return Err(DecodeError::Malformed("state batch ends before it starts"));
        }
        state_batches.push(StateBatch {
            first_offset,
            last_offset,
            delivery_state,
            delivery_count,
        });
    }
    let delivery_complete_count = tagged_i32(&mut r, DELIVERY_COMPLETE_COUNT_TAG)?.unwrap_or(-1);
    Ok(Snapshot {
        snapshot_epoch,
        state_epoch,
        leader_epoch,
        start_offset,
        delivery_complete_count,
        create_timestamp,
        write_timestamp,
        state_batches,
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn batch() -> impl Strategy<Value = StateBatch> {
        (
            any::<i64>(),
            0i64..1000,
            prop_oneof![Just(0i8), Just(2), Just(4)],
            any::<i16>(),
        )
            .prop_map(|(f, n, s, c)| StateBatch {
                first_offset: f.min(i64::MAX - n),
                last_offset: f.min(i64::MAX - n) + n,
                delivery_state: s,
                delivery_count: c,
            })
    }

    proptest! {
        #[test]
        fn snapshots_round_trip(
            epochs in any::<(i32, i32, i32)>(),
            start in any::<i64>(),
            times in any::<(i64, i64)>(),
            batches in proptest::collection::vec(batch(), 0..20),
            group in "\\PC{0,40}",
            partition in any::<i32>(),
            count in any::<i32>(),
        ) {
            let s = Snapshot {
                snapshot_epoch: epochs.0,
                state_epoch: epochs.1,
                leader_epoch: epochs.2,
                start_offset: start,
                delivery_complete_count: count,
                create_timestamp: times.0,
                write_timestamp: times.1,
                state_batches: batches,
            };
            prop_assert_eq!(decode_value(&encode_value(&s)).unwrap(), s);
            let k = StateKey { group, topic_id: Uuid::new_v4(), partition };
            prop_assert_eq!(decode_key(&encode_key(&k)).unwrap(), Some(k));
        }

        #[test]
        fn any_bytes_decode_or_fail_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_key(&bytes);
            let _ = decode_value(&bytes);
        }
    }

    #[test]
    fn a_count_the_bytes_cannot_back_is_refused_before_allocating() {
        let mut b = BytesMut::new();
        b.put_i16(0);
        b.put_bytes(0, 4 * 3 + 8 * 3);
        put_uvarint(&mut b, u64::MAX / 2);
        assert_eq!(decode_value(&b), Err(DecodeError::Truncated));
    }

    #[test]
    fn a_value_with_kafkas_tagged_delivery_complete_count_is_read() {
        let s = Snapshot {
            snapshot_epoch: 1,
            state_epoch: 0,
            leader_epoch: 3,
            start_offset: 10,
            delivery_complete_count: -1,
            create_timestamp: 5,
            write_timestamp: 6,
            state_batches: vec![],
        };
        let mut b = BytesMut::from(&encode_value(&s)[..]);
        b.truncate(b.len() - 1);
        // One tagged field: tag 0 (DeliveryCompleteCount), 4 bytes; and an unknown tag 5.
        b.put_slice(&[2, 0, 4, 0, 0, 0, 7, 5, 1, 9]);
        let got = decode_value(&b).unwrap();
        assert_eq!(got.delivery_complete_count, 7);
        assert_eq!(decode_value(&encode_value(&got)).unwrap(), got);
    }
}
