//! Bounded, streaming decompression of a batch's records section.
//!
//! Invariants:
//! - a decompressor never produces more than `limit` bytes: the stream fails with
//!   [`RecordsError::DecompressedTooLarge`] as soon as one byte more comes out, so memory is
//!   bounded by the caller's buffer (streaming) or by `limit` (materialising);
//! - every length a codec frame declares is checked before anything is allocated for it:
//!   a snappy chunk's decompressed length against the bytes left under the limit and the
//!   most snappy can expand its compressed bytes, an lz4 block against the frame's maximum
//!   block size (in liblz4), a zstd window against [`ZSTD_WINDOW_LOG_MAX`];
//! - a stream is only accepted whole: [`CodecReader::finish`] fails on a truncated gzip
//!   member, zstd frame, lz4 frame or snappy chunk;
//! - lz4 frames must use independent blocks, version 1 and clear reserved bits, as Kafka's
//!   `KafkaLZ4BlockInputStream` requires.
//!
//! Decoder state is created per batch (zstd reuses a context held by [`Scratch`]); nothing
//! is allocated per record.

use std::io::{self, Read};

use crate::header::Codec;
use crate::record::Input;
use crate::RecordsError;

/// Largest zstd window accepted (16 MiB). Producers compress batches at Kafka's levels with
/// windows of at most 8 MiB; a frame declaring a larger one is refused instead of making the
/// decoder allocate it.
pub const ZSTD_WINDOW_LOG_MAX: u32 = 24;

/// Size of the reusable buffer a streamed batch is decompressed into.
pub const STREAM_BUFFER_LEN: usize = 64 * 1024;

/// Most bytes one snappy byte can expand to (a 3-byte copy of 64 bytes), rounded up.
const SNAPPY_MAX_EXPANSION: usize = 22;

const XERIAL_MAGIC: &[u8; 8] = b"\x82SNAPPY\x00";
const XERIAL_HEADER_LEN: usize = 16;
const LZ4_FRAME_MAGIC: u32 = 0x184D_2204;

/// Reusable buffers for validating batches: the streaming window, the snappy chunk buffer
/// and a zstd decompression context. One per writer (partition log), never shared.
pub struct Scratch {
    window: Vec<u8>,
    snappy: Vec<u8>,
    zstd: Option<zstd::zstd_safe::DCtx<'static>>,
}

impl Default for Scratch {
    fn default() -> Self {
        Scratch::new()
    }
}

impl std::fmt::Debug for Scratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scratch")
            .field("window", &self.window.len())
            .field("snappy", &self.snappy.capacity())
            .finish()
    }
}

impl Scratch {
    pub fn new() -> Self {
        Scratch {
            window: Vec::new(),
            snappy: Vec::new(),
            zstd: None,
        }
    }

    /// Capacity currently held, in bytes (for memory budgets and tests).
    pub fn held_bytes(&self) -> usize {
        self.window.capacity() + self.snappy.capacity()
    }
}

fn codec_error(codec: Codec, e: impl std::fmt::Display) -> RecordsError {
    RecordsError::Decompress {
        codec,
        reason: e.to_string(),
    }
}

/// Checks Kafka's lz4 frame rules (`KafkaLZ4BlockInputStream.readHeader`): magic, version 1,
/// independent blocks, reserved bits clear, block size id 4..7. liblz4 checks the rest
/// (descriptor checksum, block sizes, content checksum).
fn check_lz4_frame(payload: &[u8]) -> Result<(), RecordsError> {
    let err = |reason: &str| codec_error(Codec::Lz4, reason);
    if payload.len() < 7 {
        return Err(err("Stream ended prematurely"));
    }
    let magic = u32::from_le_bytes([payload[0], payload[1], payload[2], payload[3]]);
    if magic != LZ4_FRAME_MAGIC {
        return Err(err("Stream unsupported (invalid magic bytes)"));
    }
    let flg = payload[4];
    let bd = payload[5];
    if flg & 0x03 != 0 {
        return Err(err("Reserved0 field must be 0"));
    }
    if (flg >> 5) & 1 == 0 {
        return Err(err(
            "Dependent block stream is unsupported (BLOCKINDEPENDENCE must be set)",
        ));
    }
    if (flg >> 6) & 3 != 1 {
        return Err(err(&format!("Version {} is unsupported", (flg >> 6) & 3)));
    }
    if bd & 0x0f != 0 || bd & 0x80 != 0 {
        return Err(err("Reserved BD bits must be 0"));
    }
    if (bd >> 4) & 7 < 4 {
        return Err(err("Block size value must be between 4 and 7"));
    }
    Ok(())
}

/// Kafka's snappy framing (xerial's `SnappyInputStream`): a 16-byte header then chunks of
/// `length: u32 BE` and a raw snappy block; without the header, one raw snappy block.
struct SnappyReader<'a> {
    input: &'a [u8],
    raw: bool,
    /// Decompressed bytes of the current chunk, in `Scratch::snappy`.
    out: &'a mut Vec<u8>,
    pos: usize,
    /// Bytes the chunks may still produce under the limit.
    budget: u64,
}

impl<'a> SnappyReader<'a> {
    fn new(input: &'a [u8], out: &'a mut Vec<u8>, budget: u64) -> Result<Self, RecordsError> {
        if input.is_empty() {
            return Err(codec_error(
                Codec::Snappy,
                "expected some bytes in snappy stream",
            ));
        }
        out.clear();
        let raw = input.len() < XERIAL_HEADER_LEN || &input[..8] != XERIAL_MAGIC;
        let input = if raw {
            input
        } else {
            &input[XERIAL_HEADER_LEN..]
        };
        Ok(SnappyReader {
            input,
            raw,
            out,
            pos: 0,
            budget,
        })
    }

    /// Decompresses the next chunk into `out`; false at the end of the stream.
    fn next_chunk(&mut self) -> Result<bool, RecordsError> {
        if self.input.is_empty() {
            return Ok(false);
        }
        let block = if self.raw {
            std::mem::take(&mut self.input)
        } else {
            if self.input.len() < 4 {
                return Err(codec_error(
                    Codec::Snappy,
                    "not enough bytes to read compressed block length",
                ));
            }
            let len =
                u32::from_be_bytes([self.input[0], self.input[1], self.input[2], self.input[3]])
                    as usize;
            let rest = &self.input[4..];
            if len > rest.len() {
                return Err(codec_error(Codec::Snappy, "not enough bytes for block"));
            }
            let (block, rest) = rest.split_at(len);
            self.input = rest;
            block
        };
        let declared =
            snap::raw::decompress_len(block).map_err(|e| codec_error(Codec::Snappy, e))?;
        if declared as u64 > self.budget {
            return Err(RecordsError::DecompressedTooLarge { limit: 0 });
        }
        if declared
            > block
                .len()
                .saturating_mul(SNAPPY_MAX_EXPANSION)
                .saturating_add(64)
        {
            return Err(codec_error(
                Codec::Snappy,
                format!(
                    "block declares {declared} bytes, more than its {} compressed bytes can hold",
                    block.len()
                ),
            ));
        }
        self.out.clear();
        self.out.resize(declared, 0);
        let n = snap::raw::Decoder::new()
            .decompress(block, self.out)
            .map_err(|e| codec_error(Codec::Snappy, e))?;
        self.out.truncate(n);
        self.budget -= n as u64;
        self.pos = 0;
        Ok(true)
    }
}

impl Read for SnappyReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.pos >= self.out.len() {
            match self.next_chunk() {
                Ok(true) => {}
                Ok(false) => return Ok(0),
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
            }
        }
        let n = buf.len().min(self.out.len() - self.pos);
        buf[..n].copy_from_slice(&self.out[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// A decompressor over one batch's records section.
enum Decoder<'a> {
    Gzip(Box<flate2::bufread::MultiGzDecoder<&'a [u8]>>),
    Snappy(SnappyReader<'a>),
    Lz4(lz4::Decoder<&'a [u8]>),
    Zstd(zstd::stream::read::Decoder<'a, &'a [u8]>),
}

/// A bounded decompressing reader of one batch's records section.
pub struct CodecReader<'a> {
    codec: Codec,
    decoder: Decoder<'a>,
    /// Bytes produced so far, and the most allowed.
    produced: u64,
    limit: u64,
    done: bool,
}

impl<'a> CodecReader<'a> {
    /// A reader of `payload` (the bytes after the 61-byte header) compressed with `codec`
    /// (not [`Codec::None`]), producing at most `limit` bytes.
    pub fn new(
        codec: Codec,
        payload: &'a [u8],
        limit: u64,
        snappy: &'a mut Vec<u8>,
        zstd_ctx: &'a mut Option<zstd::zstd_safe::DCtx<'static>>,
    ) -> Result<Self, RecordsError> {
        let decoder = match codec {
            Codec::None => {
                return Err(codec_error(codec, "an uncompressed batch is read in place"))
            }
            Codec::Gzip => Decoder::Gzip(Box::new(flate2::bufread::MultiGzDecoder::new(payload))),
            Codec::Snappy => {
                Decoder::Snappy(SnappyReader::new(payload, snappy, limit.saturating_add(1))?)
            }
            Codec::Lz4 => {
                check_lz4_frame(payload)?;
                Decoder::Lz4(lz4::Decoder::new(payload).map_err(|e| codec_error(codec, e))?)
            }
            Codec::Zstd => {
                let ctx = zstd_ctx.get_or_insert_with(zstd::zstd_safe::DCtx::create);
                ctx.reset(zstd::zstd_safe::ResetDirective::SessionOnly)
                    .map_err(|c| codec_error(codec, zstd::zstd_safe::get_error_name(c)))?;
                ctx.set_parameter(zstd::zstd_safe::DParameter::WindowLogMax(
                    ZSTD_WINDOW_LOG_MAX,
                ))
                .map_err(|c| codec_error(codec, zstd::zstd_safe::get_error_name(c)))?;
                Decoder::Zstd(zstd::stream::read::Decoder::with_context(payload, ctx))
            }
        };
        Ok(CodecReader {
            codec,
            decoder,
            produced: 0,
            limit,
            done: false,
        })
    }

    /// Fills `buf` with the next decompressed bytes; 0 at the end of the stream.
    pub fn read_some(&mut self, buf: &mut [u8]) -> Result<usize, RecordsError> {
        if self.done || buf.is_empty() {
            return Ok(0);
        }
        let n = loop {
            let r = match &mut self.decoder {
                Decoder::Gzip(d) => d.read(buf),
                Decoder::Snappy(d) => d.read(buf),
                Decoder::Lz4(d) => d.read(buf),
                Decoder::Zstd(d) => d.read(buf),
            };
            match r {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.io_error(e)),
            }
        };
        if n == 0 {
            self.done = true;
        }
        self.produced += n as u64;
        if self.produced > self.limit {
            return Err(RecordsError::DecompressedTooLarge { limit: self.limit });
        }
        Ok(n)
    }

    fn io_error(&self, e: io::Error) -> RecordsError {
        if let Some(inner) = e.get_ref().and_then(|i| i.downcast_ref::<RecordsError>()) {
            return match inner {
                RecordsError::DecompressedTooLarge { .. } => {
                    RecordsError::DecompressedTooLarge { limit: self.limit }
                }
                other => other.clone(),
            };
        }
        codec_error(self.codec, e)
    }

    /// Bytes produced so far.
    pub fn produced(&self) -> u64 {
        self.produced
    }

    /// Checks that the compressed stream ended cleanly (no truncated frame or member).
    /// Call after [`CodecReader::read_some`] returned 0.
    pub fn finish(self) -> Result<(), RecordsError> {
        let codec = self.codec;
        match self.decoder {
            Decoder::Lz4(d) => d
                .finish()
                .1
                .map_err(|_| codec_error(codec, "Stream ended prematurely (truncated lz4 frame)")),
            // gzip and zstd report a truncated stream from `read`; snappy chunks are whole.
            Decoder::Gzip(_) | Decoder::Snappy(_) | Decoder::Zstd(_) => Ok(()),
        }
    }
}

/// Streaming [`Input`] over a [`CodecReader`], through a fixed window buffer. Bytes are
/// skipped, never kept: its spans are `()`.
pub struct StreamInput<'a> {
    reader: Option<CodecReader<'a>>,
    window: &'a mut [u8],
    pos: usize,
    len: usize,
    consumed: u64,
}

impl<'a> StreamInput<'a> {
    fn new(reader: CodecReader<'a>, window: &'a mut [u8]) -> Self {
        StreamInput {
            reader: Some(reader),
            window,
            pos: 0,
            len: 0,
            consumed: 0,
        }
    }

    /// Refills the window; false at the end of the stream.
    fn fill(&mut self) -> Result<bool, RecordsError> {
        if self.pos < self.len {
            return Ok(true);
        }
        let Some(reader) = self.reader.as_mut() else {
            return Ok(false);
        };
        let n = reader.read_some(self.window)?;
        self.pos = 0;
        self.len = n;
        Ok(n > 0)
    }

    /// Decompressed bytes produced so far.
    pub fn produced(&self) -> u64 {
        self.reader.as_ref().map_or(self.consumed, |r| r.produced())
    }

    /// Checks that the stream has no byte left and ended cleanly.
    pub fn finish(&mut self) -> Result<bool, RecordsError> {
        if self.fill()? {
            return Ok(false);
        }
        match self.reader.take() {
            Some(r) => r.finish().map(|_| true),
            None => Ok(true),
        }
    }
}

impl Input for StreamInput<'_> {
    type Span = ();

    fn position(&self) -> u64 {
        self.consumed
    }

    fn remaining(&self) -> Option<u64> {
        None
    }

    #[inline]
    fn byte(&mut self) -> Result<Option<u8>, RecordsError> {
        if !self.fill()? {
            return Ok(None);
        }
        let b = self.window[self.pos];
        self.pos += 1;
        self.consumed += 1;
        Ok(Some(b))
    }

    fn take(&mut self, mut n: usize) -> Result<Option<()>, RecordsError> {
        while n > 0 {
            if !self.fill()? {
                return Ok(None);
            }
            let step = n.min(self.len - self.pos);
            self.pos += step;
            self.consumed += step as u64;
            n -= step;
        }
        Ok(Some(()))
    }

    fn span_since(&self, _start: u64) {}

    fn at_end(&mut self) -> Result<bool, RecordsError> {
        Ok(!self.fill()?)
    }
}

/// Opens a streaming input over a compressed records section, using `scratch`'s buffers.
pub fn stream<'a>(
    codec: Codec,
    payload: &'a [u8],
    limit: u64,
    scratch: &'a mut Scratch,
) -> Result<StreamInput<'a>, RecordsError> {
    if scratch.window.len() != STREAM_BUFFER_LEN {
        scratch.window = vec![0; STREAM_BUFFER_LEN];
    }
    let reader = CodecReader::new(
        codec,
        payload,
        limit,
        &mut scratch.snappy,
        &mut scratch.zstd,
    )?;
    Ok(StreamInput::new(reader, &mut scratch.window))
}

/// Decompresses a records section into `out` (cleared first), stopping with
/// [`RecordsError::DecompressedTooLarge`] past `limit` bytes. `out` grows as bytes arrive,
/// never ahead of them. [`Codec::None`] copies the payload (within the limit).
pub fn decompress_into(
    codec: Codec,
    payload: &[u8],
    limit: u64,
    out: &mut Vec<u8>,
) -> Result<(), RecordsError> {
    out.clear();
    if codec == Codec::None {
        if payload.len() as u64 > limit {
            return Err(RecordsError::DecompressedTooLarge { limit });
        }
        out.extend_from_slice(payload);
        return Ok(());
    }
    let mut snappy = Vec::new();
    let mut zstd_ctx = None;
    let mut reader = CodecReader::new(codec, payload, limit, &mut snappy, &mut zstd_ctx)?;
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let n = reader.read_some(&mut chunk)?;
        if n == 0 {
            break;
        }
        out.extend_from_slice(&chunk[..n]);
    }
    reader.finish()
}
