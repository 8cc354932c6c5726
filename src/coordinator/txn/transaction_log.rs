//! Records of the `__transaction_state` topic in Kafka's own format (`TransactionLogKey` v0,
//! `TransactionLogValue` v1 as Kafka 4.x writes it with transaction.version >= 1; v0 values are
//! read too). A null value is a tombstone (an expired transactional id). Pure encode/decode.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::metadata::{TxnMetadata, TxnState};

/// The value version written (Kafka's `TransactionVersion.transactionLogValueVersion()` for
/// TV >= 1).
pub const VALUE_VERSION: i16 = 1;

#[derive(Debug, thiserror::Error)]
#[error("malformed __transaction_state record: {0}")]
pub struct DecodeError(&'static str);

pub fn encode_key(transactional_id: &str) -> Bytes {
    let mut b = BytesMut::with_capacity(4 + transactional_id.len());
    b.put_i16(0);
    b.put_i16(transactional_id.len() as i16);
    b.put_slice(transactional_id.as_bytes());
    b.freeze()
}

pub fn decode_key(mut b: Bytes) -> Result<String, DecodeError> {
    let version = get_i16(&mut b)?;
    if version != 0 {
        return Err(DecodeError("unknown key version"));
    }
    let len = get_i16(&mut b)?;
    if len < 0 {
        return Err(DecodeError("null transactional id"));
    }
    need(&b, len as usize)?;
    String::from_utf8(b.split_to(len as usize).to_vec())
        .map_err(|_| DecodeError("transactional id is not UTF-8"))
}

fn put_uvarint(b: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        b.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    b.put_u8(v as u8);
}

fn get_uvarint(b: &mut Bytes) -> Result<u64, DecodeError> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        need(b, 1)?;
        let byte = b.get_u8();
        v |= ((byte & 0x7f) as u64) << shift;
        if byte & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(DecodeError("varint too long"))
}

fn need(b: &Bytes, n: usize) -> Result<(), DecodeError> {
    if b.remaining() < n {
        Err(DecodeError("truncated"))
    } else {
        Ok(())
    }
}
fn get_i8(b: &mut Bytes) -> Result<i8, DecodeError> {
    need(b, 1)?;
    Ok(b.get_i8())
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

/// Partitions grouped by topic, in a stable order.
fn by_topic(m: &TxnMetadata) -> Vec<(&str, Vec<i32>)> {
    let mut out: Vec<(&str, Vec<i32>)> = Vec::new();
    for (t, p) in &m.partitions {
        match out.last_mut() {
            Some((last, ps)) if *last == t.as_str() => ps.push(*p),
            _ => out.push((t.as_str(), vec![*p])),
        }
    }
    out
}

/// The value Kafka writes for a transition: v1 (flexible), partitions null when Empty.
pub fn encode_value(m: &TxnMetadata) -> Bytes {
    let mut b = BytesMut::with_capacity(64);
    b.put_i16(VALUE_VERSION);
    b.put_i64(m.producer_id);
    b.put_i16(m.producer_epoch);
    b.put_i32(m.timeout_ms);
    b.put_i8(m.state as i8);
    if m.state == TxnState::Empty {
        put_uvarint(&mut b, 0);
    } else {
        let topics = by_topic(m);
        put_uvarint(&mut b, topics.len() as u64 + 1);
        for (topic, ps) in topics {
            put_uvarint(&mut b, topic.len() as u64 + 1);
            b.put_slice(topic.as_bytes());
            put_uvarint(&mut b, ps.len() as u64 + 1);
            for p in ps {
                b.put_i32(p);
            }
            put_uvarint(&mut b, 0);
        }
    }
    b.put_i64(m.last_update_ms);
    b.put_i64(m.start_ms);
    // Tagged fields, in tag order, only when not at their defaults.
    let mut tags: Vec<(u64, Vec<u8>)> = Vec::new();
    if m.previous_producer_id != -1 {
        tags.push((0, m.previous_producer_id.to_be_bytes().to_vec()));
    }
    if m.next_producer_id != -1 {
        tags.push((1, m.next_producer_id.to_be_bytes().to_vec()));
    }
    if m.client_transaction_version != 0 {
        tags.push((2, m.client_transaction_version.to_be_bytes().to_vec()));
    }
    put_uvarint(&mut b, tags.len() as u64);
    for (tag, data) in tags {
        put_uvarint(&mut b, tag);
        put_uvarint(&mut b, data.len() as u64);
        b.put_slice(&data);
    }
    b.freeze()
}

/// Decodes a value (v0 or v1) into the metadata of `transactional_id`.
pub fn decode_value(transactional_id: &str, mut b: Bytes) -> Result<TxnMetadata, DecodeError> {
    let version = get_i16(&mut b)?;
    if !(0..=1).contains(&version) {
        return Err(DecodeError("unknown value version"));
    }
    let flexible = version >= 1;
    let producer_id = get_i64(&mut b)?;
    let producer_epoch = get_i16(&mut b)?;
    let timeout_ms = get_i32(&mut b)?;
    let state = TxnState::from_id(get_i8(&mut b)?).ok_or(DecodeError("unknown state"))?;
    let mut partitions = std::collections::BTreeSet::new();
    let topics: i64 = if flexible {
        get_uvarint(&mut b)? as i64 - 1
    } else {
        get_i32(&mut b)? as i64
    };
    for _ in 0..topics.max(0) {
        let len = if flexible {
            get_uvarint(&mut b)? as i64 - 1
        } else {
            get_i16(&mut b)? as i64
        };
        if len < 0 {
            return Err(DecodeError("null topic"));
        }
        need(&b, len as usize)?;
        let topic = String::from_utf8(b.split_to(len as usize).to_vec())
            .map_err(|_| DecodeError("topic is not UTF-8"))?;
        let n = if flexible {
            get_uvarint(&mut b)? as i64 - 1
        } else {
            get_i32(&mut b)? as i64
        };
        for _ in 0..n.max(0) {
            partitions.insert((topic.clone(), get_i32(&mut b)?));
        }
        if flexible {
            skip_tagged(&mut b)?;
        }
    }
    let last_update_ms = get_i64(&mut b)?;
    let start_ms = get_i64(&mut b)?;
    let mut m = TxnMetadata {
        transactional_id: transactional_id.to_string(),
        producer_id,
        previous_producer_id: -1,
        next_producer_id: -1,
        producer_epoch,
        last_producer_epoch: -1,
        timeout_ms,
        state,
        partitions,
        start_ms,
        last_update_ms,
        client_transaction_version: 0,
    };
    if flexible {
        let n = get_uvarint(&mut b)?;
        for _ in 0..n {
            let tag = get_uvarint(&mut b)?;
            let size = get_uvarint(&mut b)? as usize;
            need(&b, size)?;
            let mut data = b.split_to(size);
            match tag {
                0 => m.previous_producer_id = get_i64(&mut data)?,
                1 => m.next_producer_id = get_i64(&mut data)?,
                2 => m.client_transaction_version = get_i16(&mut data)?,
                _ => {}
            }
        }
    }
    Ok(m)
}

fn skip_tagged(b: &mut Bytes) -> Result<(), DecodeError> {
    let n = get_uvarint(b)?;
    for _ in 0..n {
        let _tag = get_uvarint(b)?;
        let size = get_uvarint(b)? as usize;
        need(b, size)?;
        b.advance(size);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(state: TxnState) -> TxnMetadata {
        let mut m = TxnMetadata::new("tx", 7, 60_000, 1_000);
        m.producer_epoch = 3;
        m.state = state;
        m.start_ms = 900;
        m.previous_producer_id = 5;
        m.client_transaction_version = 2;
        if state != TxnState::Empty {
            m.partitions.insert(("a".into(), 0));
            m.partitions.insert(("a".into(), 2));
            m.partitions.insert(("b".into(), 1));
        }
        m
    }

    #[test]
    fn values_round_trip() {
        for s in [TxnState::Empty, TxnState::Ongoing, TxnState::PrepareCommit] {
            let m = sample(s);
            let mut back = decode_value("tx", encode_value(&m)).unwrap();
            back.last_producer_epoch = m.last_producer_epoch;
            assert_eq!(back, m);
        }
        assert_eq!(decode_key(encode_key("tx")).unwrap(), "tx");
    }

    /// Bytes of a `TransactionLogValue` v1 as Kafka's generated serializer writes them.
    #[test]
    fn value_layout_matches_kafka() {
        let mut m = TxnMetadata::new("tx", 1, 100, 5);
        m.producer_epoch = 0;
        m.state = TxnState::Ongoing;
        m.start_ms = 4;
        m.partitions.insert(("t".into(), 0));
        let b = encode_value(&m);
        let expected: Vec<u8> = [
            &[0, 1][..],           // version
            &1i64.to_be_bytes(),   // producer id
            &0i16.to_be_bytes(),   // epoch
            &100i32.to_be_bytes(), // timeout
            &[1],                  // Ongoing
            &[2, 2, b't', 2],      // [{topic "t", partitions [..
            &0i32.to_be_bytes(),   // 0]
            &[0],                  // partition schema tags
            &5i64.to_be_bytes(),   // last update
            &4i64.to_be_bytes(),   // start
            &[0],                  // no tagged fields
        ]
        .concat();
        assert_eq!(b.to_vec(), expected);
        // v0 (what Kafka writes with transaction.version 0) decodes too.
        let v0: Vec<u8> = [
            &[0, 0][..],
            &1i64.to_be_bytes(),
            &0i16.to_be_bytes(),
            &100i32.to_be_bytes(),
            &[1],
            &1i32.to_be_bytes(),
            &[0, 1, b't'],
            &1i32.to_be_bytes(),
            &0i32.to_be_bytes(),
            &5i64.to_be_bytes(),
            &4i64.to_be_bytes(),
        ]
        .concat();
        let d = decode_value("tx", Bytes::from(v0)).unwrap();
        assert_eq!(d.partitions, m.partitions);
        assert_eq!(d.state, TxnState::Ongoing);
    }
}
