//! Small file primitives shared by the log and the snapshot store: checksummed frames and
//! atomic replacement of a file.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::StoreError;

/// Bytes before each frame's payload: length (u32 LE) and CRC-32C of the payload (u32 LE).
pub(crate) const FRAME_HEADER_BYTES: usize = 8;

/// No single log entry or snapshot part may exceed this (it bounds what a corrupt length
/// field can make us allocate or trust).
pub(crate) const MAX_FRAME_BYTES: usize = 256 * 1024 * 1024;

/// Appends one frame holding `payload` to `out`.
pub(crate) fn encode_frame(payload: &[u8], out: &mut Vec<u8>) {
    // Payloads come from our own serializer and are far below 4 GiB; a larger one would be a
    // bug, and its length would be caught by MAX_FRAME_BYTES on read.
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    out.extend_from_slice(payload);
}

/// The result of reading one frame at some position of a buffer.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Frame<'a> {
    /// A whole, checksum-valid frame and the position after it.
    Complete { payload: &'a [u8], end: usize },
    /// The buffer ends exactly here.
    End,
    /// A frame that is cut short or fails its checksum: a torn write if it is the last thing
    /// in the file, corruption otherwise.
    Invalid { reason: String },
}

pub(crate) fn read_frame(buf: &[u8], pos: usize) -> Frame<'_> {
    let rest = buf.get(pos..).unwrap_or_default();
    if rest.is_empty() {
        return Frame::End;
    }
    if rest.len() < FRAME_HEADER_BYTES {
        return Frame::Invalid {
            reason: format!("{} bytes of a frame header at byte {pos}", rest.len()),
        };
    }
    let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
    let crc = u32::from_le_bytes([rest[4], rest[5], rest[6], rest[7]]);
    if len > MAX_FRAME_BYTES {
        return Frame::Invalid {
            reason: format!("frame length {len} at byte {pos} exceeds {MAX_FRAME_BYTES}"),
        };
    }
    let Some(payload) = rest.get(FRAME_HEADER_BYTES..FRAME_HEADER_BYTES + len) else {
        return Frame::Invalid {
            reason: format!("frame at byte {pos} is cut short"),
        };
    };
    if crc32c::crc32c(payload) != crc {
        return Frame::Invalid {
            reason: format!("checksum mismatch in the frame at byte {pos}"),
        };
    }
    Frame::Complete {
        payload,
        end: pos + FRAME_HEADER_BYTES + len,
    }
}

pub(crate) fn io_error(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> StoreError {
    let path = path.to_path_buf();
    move |source| StoreError::Io { op, path, source }
}

/// Makes a directory's entries (created, renamed, removed files) durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_error("sync directory", dir))
}

/// Replaces `dir/name` with `bytes` so that after a crash the file holds either the old or
/// the new content: write a temporary file, fsync it, rename it over, fsync the directory.
pub(crate) fn write_atomically(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), StoreError> {
    let path = dir.join(name);
    let tmp: PathBuf = dir.join(format!("{name}.tmp"));
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .map_err(io_error("create", &tmp))?;
    file.write_all(bytes).map_err(io_error("write", &tmp))?;
    file.sync_all().map_err(io_error("sync", &tmp))?;
    drop(file);
    fs::rename(&tmp, &path).map_err(io_error("rename into place", &path))?;
    sync_dir(dir)
}

/// Reads a whole file, or `None` if it does not exist.
pub(crate) fn read_if_exists(path: &Path) -> Result<Option<Vec<u8>>, StoreError> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error("read", path)(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_detect_damage() {
        let mut buf = Vec::new();
        encode_frame(b"hello", &mut buf);
        encode_frame(b"", &mut buf);
        let Frame::Complete { payload, end } = read_frame(&buf, 0) else {
            panic!("first frame")
        };
        assert_eq!(payload, b"hello");
        assert!(matches!(
            read_frame(&buf, end),
            Frame::Complete { payload: b"", .. }
        ));
        assert_eq!(read_frame(&buf, buf.len()), Frame::End);

        // Every strict prefix of the first frame (13 bytes) is detected as invalid.
        for cut in 1..13 {
            assert!(
                matches!(read_frame(&buf[..cut], 0), Frame::Invalid { .. }),
                "{cut}"
            );
        }
        let mut flipped = buf.clone();
        flipped[9] ^= 1;
        assert!(matches!(read_frame(&flipped, 0), Frame::Invalid { .. }));
        let mut huge = buf.clone();
        huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(read_frame(&huge, 0), Frame::Invalid { .. }));
    }
}
