//! One record of a RecordBatch v2, read from an [`Input`]: in place from a slice (uncompressed
//! batches, or a payload already decompressed under a bound) or streamed from a bounded
//! decompressor.
//!
//! Record layout (Kafka's `DefaultRecord`): `length: varint` then the body of `length` bytes:
//! `attributes: i8, timestampDelta: varlong, offsetDelta: varint, keyLength: varint, key,
//! valueLength: varint, value, headerCount: varint, [headerKeyLength: varint, headerKey,
//! headerValueLength: varint, headerValue]*`.
//!
//! Invariants: a varint is at most 5 bytes and a varlong at most 10 (Kafka's `ByteUtils`);
//! every length and count is checked against the bytes the record's body has left before
//! anything is skipped or sliced, and the body must be consumed exactly. The body length
//! itself is checked against the bytes the input has left (a slice), or against the
//! configured maximum record size (a stream, Kafka's `max.decompressed.message.bytes`).
//! Nothing here allocates.

use crate::RecordsError;

/// Where record bytes come from. `Span` is what a key, value or header section reads as:
/// a borrowed slice for in-place input, `()` for a stream whose bytes are not kept.
pub trait Input {
    type Span: Copy;
    /// Bytes consumed so far.
    fn position(&self) -> u64;
    /// Bytes left, when known (in-place input).
    fn remaining(&self) -> Option<u64>;
    /// The next byte, or `None` at the end of the input.
    fn byte(&mut self) -> Result<Option<u8>, RecordsError>;
    /// The next `n` bytes, or `None` if the input ends first.
    fn take(&mut self, n: usize) -> Result<Option<Self::Span>, RecordsError>;
    /// The bytes consumed since `start` (a [`Input::position`]), for in-place input.
    fn span_since(&self, start: u64) -> Self::Span;
    /// Whether the input has no byte left.
    fn at_end(&mut self) -> Result<bool, RecordsError>;
}

/// In-place input over a slice.
pub struct SliceInput<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> SliceInput<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        SliceInput { buf, pos: 0 }
    }
}

impl<'a> Input for SliceInput<'a> {
    type Span = &'a [u8];

    fn position(&self) -> u64 {
        self.pos as u64
    }

    fn remaining(&self) -> Option<u64> {
        Some((self.buf.len() - self.pos) as u64)
    }

    #[inline]
    fn byte(&mut self) -> Result<Option<u8>, RecordsError> {
        let b = self.buf.get(self.pos).copied();
        if b.is_some() {
            self.pos += 1;
        }
        Ok(b)
    }

    #[inline]
    fn take(&mut self, n: usize) -> Result<Option<&'a [u8]>, RecordsError> {
        let Some(end) = self.pos.checked_add(n).filter(|&e| e <= self.buf.len()) else {
            return Ok(None);
        };
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(Some(s))
    }

    fn span_since(&self, start: u64) -> &'a [u8] {
        let start = usize::try_from(start).unwrap_or(self.pos).min(self.pos);
        &self.buf[start..self.pos]
    }

    fn at_end(&mut self) -> Result<bool, RecordsError> {
        Ok(self.pos >= self.buf.len())
    }
}

/// One record. With [`SliceInput`], `S` is `&[u8]` and the fields borrow the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<S> {
    /// Position of the record's length varint in the records section.
    pub position: u64,
    /// Length varint plus body (Kafka's `sizeInBytes`).
    pub size_in_bytes: u64,
    /// The declared body length (Kafka's `sizeOfBodyInBytes`).
    pub body_len: u32,
    pub attributes: i8,
    pub timestamp_delta: i64,
    pub offset_delta: i32,
    pub key: Option<S>,
    pub value: Option<S>,
    /// Key and value lengths (-1 for null).
    pub key_len: i32,
    pub value_len: i32,
    pub header_count: i32,
    /// The headers' bytes (after the count); walk them with [`HeaderIter`].
    pub headers: S,
    /// The body from the key length onwards (key, value, headers), copied verbatim by the
    /// cleaner when it keeps the record.
    pub tail: S,
}

/// Why a record could not be read: Kafka's `InvalidRecordException` texts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MalformedRecord {
    /// A varint that runs off the body or is longer than Kafka allows.
    InvalidStructure,
    NegativeSize(i32),
    /// The body is longer than the input holds.
    SizeBeyondInput {
        size: i32,
        remaining: u64,
    },
    /// The body is longer than `max.decompressed.message.bytes` (a decompressed stream).
    SizeBeyondLimit {
        size: i32,
        max: u64,
    },
    NegativeLength {
        field: &'static str,
        length: i32,
    },
    LengthBeyondBody {
        field: &'static str,
        length: i32,
        remaining: u64,
    },
    InvalidHeaderCount(i32),
    HeaderCountBeyondBody {
        count: i32,
        remaining: u64,
    },
    /// The fields did not add up to the declared body length.
    SizeMismatch {
        expected: u32,
        read: u64,
    },
}

impl std::fmt::Display for MalformedRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MalformedRecord::InvalidStructure => f.write_str("Found invalid record structure"),
            MalformedRecord::NegativeSize(size) => {
                write!(f, "Invalid record size: the size of the record body {size} is negative")
            }
            MalformedRecord::SizeBeyondInput { size, remaining } => write!(
                f,
                "Invalid record size: expected to read {size} bytes in record payload, but instead the buffer has only {remaining} remaining bytes."
            ),
            MalformedRecord::SizeBeyondLimit { size, max } => write!(
                f,
                "Record body size {size} exceeds the configured maximum record size {max} (max.decompressed.message.bytes)"
            ),
            MalformedRecord::NegativeLength { field, length } => {
                write!(f, "Invalid negative {field} size {length}")
            }
            MalformedRecord::LengthBeyondBody {
                field,
                length,
                remaining,
            } => write!(
                f,
                "Invalid {field} size {length}: only {remaining} bytes remain in the record"
            ),
            MalformedRecord::InvalidHeaderCount(n) => {
                write!(f, "Found invalid number of record headers {n}")
            }
            MalformedRecord::HeaderCountBeyondBody { count, remaining } => write!(
                f,
                "Found invalid number of record headers. {count} is larger than the remaining size of the buffer ({remaining})"
            ),
            MalformedRecord::SizeMismatch { expected, read } => write!(
                f,
                "Invalid record size: expected to read {expected} bytes in record payload, but instead read {read}"
            ),
        }
    }
}

/// Outcome of reading one record.
pub enum Next<S> {
    Record(Record<S>),
    /// The input ended cleanly before a record started.
    End,
}

/// Reads an unsigned varint of at most `max_bytes` bytes, never past `end`.
#[inline]
fn unsigned<I: Input>(input: &mut I, end: u64, max_bytes: u32) -> Result<u64, ReadFailure> {
    let mut value = 0u64;
    for i in 0..max_bytes {
        if input.position() >= end {
            return Err(ReadFailure::Malformed(MalformedRecord::InvalidStructure));
        }
        let b = input.byte()?.ok_or(ReadFailure::Eof)?;
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(ReadFailure::Malformed(MalformedRecord::InvalidStructure))
}

#[inline]
fn varint<I: Input>(input: &mut I, end: u64) -> Result<i32, ReadFailure> {
    // Kafka keeps the low 32 bits of a 5-byte varint.
    let raw = unsigned(input, end, 5)? as u32;
    Ok(((raw >> 1) as i32) ^ -((raw & 1) as i32))
}

#[inline]
fn varlong<I: Input>(input: &mut I, end: u64) -> Result<i64, ReadFailure> {
    let raw = unsigned(input, end, 10)?;
    Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64))
}

/// A failure inside one record: malformed bytes, the input ended, or the input itself failed
/// (a decompressor error or its bound).
pub enum ReadFailure {
    Malformed(MalformedRecord),
    /// The input ended inside the record.
    Eof,
    Input(RecordsError),
}

impl From<RecordsError> for ReadFailure {
    fn from(e: RecordsError) -> Self {
        ReadFailure::Input(e)
    }
}

/// A length-prefixed byte field (`-1` is null) of at most the bytes left before `end`.
#[inline]
fn field<I: Input>(
    input: &mut I,
    end: u64,
    name: &'static str,
    nullable: bool,
) -> Result<(i32, Option<I::Span>), ReadFailure> {
    let length = varint(input, end)?;
    if length < 0 {
        if length == -1 && nullable {
            return Ok((-1, None));
        }
        return Err(ReadFailure::Malformed(MalformedRecord::NegativeLength {
            field: name,
            length,
        }));
    }
    let remaining = end.saturating_sub(input.position());
    if length as u64 > remaining {
        return Err(ReadFailure::Malformed(MalformedRecord::LengthBeyondBody {
            field: name,
            length,
            remaining,
        }));
    }
    let span = input.take(length as usize)?.ok_or(ReadFailure::Eof)?;
    Ok((length, Some(span)))
}

/// Reads the next record. `max_body` bounds the declared body length of a streamed record
/// (in-place input is bounded by its own length).
pub fn read_record<I: Input>(input: &mut I, max_body: u64) -> Result<Next<I::Span>, ReadFailure> {
    if input.at_end()? {
        return Ok(Next::End);
    }
    let position = input.position();
    let size = varint(input, u64::MAX)?;
    if size < 0 {
        return Err(ReadFailure::Malformed(MalformedRecord::NegativeSize(size)));
    }
    match input.remaining() {
        Some(remaining) if size as u64 > remaining => {
            return Err(ReadFailure::Malformed(MalformedRecord::SizeBeyondInput {
                size,
                remaining,
            }))
        }
        None if size as u64 > max_body => {
            return Err(ReadFailure::Malformed(MalformedRecord::SizeBeyondLimit {
                size,
                max: max_body,
            }))
        }
        _ => {}
    }
    let start = input.position();
    let end = start + size as u64;
    if start >= end {
        return Err(ReadFailure::Malformed(MalformedRecord::InvalidStructure));
    }
    let attributes = input.byte()?.ok_or(ReadFailure::Eof)? as i8;
    let timestamp_delta = varlong(input, end)?;
    let offset_delta = varint(input, end)?;
    let tail_start = input.position();
    let (key_len, key) = field(input, end, "key", true)?;
    let (value_len, value) = field(input, end, "value", true)?;
    let header_count = varint(input, end)?;
    if header_count < 0 {
        return Err(ReadFailure::Malformed(MalformedRecord::InvalidHeaderCount(
            header_count,
        )));
    }
    // Each header takes at least two bytes (two one-byte lengths).
    let remaining = end.saturating_sub(input.position());
    if header_count as u64 > remaining / 2 {
        return Err(ReadFailure::Malformed(
            MalformedRecord::HeaderCountBeyondBody {
                count: header_count,
                remaining,
            },
        ));
    }
    let headers_start = input.position();
    for _ in 0..header_count {
        field(input, end, "header key", false)?;
        field(input, end, "header value", true)?;
    }
    let headers = input.span_since(headers_start);
    let read = input.position() - start;
    if read != size as u64 {
        return Err(ReadFailure::Malformed(MalformedRecord::SizeMismatch {
            expected: size as u32,
            read,
        }));
    }
    Ok(Next::Record(Record {
        position,
        size_in_bytes: input.position() - position,
        body_len: size as u32,
        attributes,
        timestamp_delta,
        offset_delta,
        key,
        value,
        key_len,
        value_len,
        header_count,
        headers,
        tail: input.span_since(tail_start),
    }))
}

/// The headers of one record read in place: `(key, value)` pairs.
pub struct HeaderIter<'a> {
    input: SliceInput<'a>,
    left: i32,
}

impl<'a> HeaderIter<'a> {
    /// Over `headers` and `count` of a [`Record`] that [`read_record`] returned.
    pub fn new(headers: &'a [u8], count: i32) -> Self {
        HeaderIter {
            input: SliceInput::new(headers),
            left: count.max(0),
        }
    }
}

impl<'a> Iterator for HeaderIter<'a> {
    type Item = Result<(&'a [u8], Option<&'a [u8]>), MalformedRecord>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let end = self.input.buf.len() as u64;
        let pair = field(&mut self.input, end, "header key", false).and_then(|(_, key)| {
            let (_, value) = field(&mut self.input, end, "header value", true)?;
            Ok((key.unwrap_or_default(), value))
        });
        match pair {
            Ok(p) => Some(Ok(p)),
            Err(e) => {
                self.left = 0;
                Some(Err(match e {
                    ReadFailure::Malformed(m) => m,
                    ReadFailure::Eof | ReadFailure::Input(_) => MalformedRecord::InvalidStructure,
                }))
            }
        }
    }
}

/// Writes the zig-zag varint encoding of `value` into `out`; returns the bytes written.
pub fn write_varint(out: &mut [u8; 5], value: i32) -> usize {
    write_unsigned(out, u64::from(((value << 1) ^ (value >> 31)) as u32))
}

/// Writes the zig-zag varlong encoding of `value` into `out`; returns the bytes written.
pub fn write_varlong(out: &mut [u8], value: i64) -> usize {
    write_unsigned(out, ((value << 1) ^ (value >> 63)) as u64)
}

fn write_unsigned(out: &mut [u8], mut value: u64) -> usize {
    let mut i = 0;
    while value >= 0x80 && i + 1 < out.len() {
        out[i] = (value as u8) | 0x80;
        value >>= 7;
        i += 1;
    }
    out[i] = value as u8;
    i + 1
}
