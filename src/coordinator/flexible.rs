//! Kafka's flexible-version encoding as the coordinators' records use it (the values of
//! `__consumer_offsets` KIP-848 records and of `__share_group_state`): big-endian integers,
//! unsigned varints, compact lengths (`n + 1`, 0 for null) and tagged-field sections.
//!
//! The reader checks every length against the bytes left before anything is sized by it.

use bytes::{BufMut, BytesMut};

/// Why bytes did not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadError {
    Truncated,
    Malformed(&'static str),
}

pub fn put_uvarint(b: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        b.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    b.put_u8(v as u8);
}

/// Reads from the front of a byte slice.
pub struct Reader<'a>(pub &'a [u8]);

impl<'a> Reader<'a> {
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], ReadError> {
        if self.0.len() < n {
            return Err(ReadError::Truncated);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    /// The bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.0.len()
    }

    pub fn i8(&mut self) -> Result<i8, ReadError> {
        Ok(self.take(1)?[0] as i8)
    }

    pub fn i16(&mut self) -> Result<i16, ReadError> {
        let b = self.take(2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    pub fn i32(&mut self) -> Result<i32, ReadError> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn i64(&mut self) -> Result<i64, ReadError> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(i64::from_be_bytes(a))
    }

    pub fn uvarint(&mut self) -> Result<u64, ReadError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.take(1)?[0];
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(ReadError::Malformed("varint longer than 10 bytes"))
    }

    /// A tagged-field section; returns the bytes of field `tag` if present.
    pub fn tagged(&mut self, tag: u64) -> Result<Option<&'a [u8]>, ReadError> {
        let n = self.uvarint()?;
        let mut found = None;
        for _ in 0..n {
            let t = self.uvarint()?;
            let size = usize::try_from(self.uvarint()?).map_err(|_| ReadError::Truncated)?;
            let field = self.take(size)?;
            if t == tag {
                found = Some(field);
            }
        }
        Ok(found)
    }

    /// Skips a tagged-field section.
    pub fn skip_tagged(&mut self) -> Result<(), ReadError> {
        self.tagged(u64::MAX).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_tagged_fields_round_trip_and_truncation_is_refused() {
        let mut b = BytesMut::new();
        put_uvarint(&mut b, 300);
        put_uvarint(&mut b, 2); // two tagged fields
        put_uvarint(&mut b, 0);
        put_uvarint(&mut b, 1);
        b.put_u8(7);
        put_uvarint(&mut b, 5);
        put_uvarint(&mut b, 2);
        b.put_i16(-2);
        let mut r = Reader(&b);
        assert_eq!(r.uvarint(), Ok(300));
        assert_eq!(r.tagged(5), Ok(Some(&[0xff, 0xfe][..])));
        assert_eq!(r.remaining(), 0);
        assert_eq!(Reader(&[0x80, 0x80]).uvarint(), Err(ReadError::Truncated));
        // A field longer than what is left.
        assert_eq!(Reader(&[1, 0, 9, 1]).tagged(0), Err(ReadError::Truncated));
    }
}
