//! Writing response frames to a connection: bytes with vectored writes, and record sets still
//! in their segment files ([`Chunk::File`]) without copying them through the broker's memory
//! where the socket allows it.
//!
//! On a plaintext TCP connection a record set goes from the page cache to the socket with
//! `sendfile(2)`, as Kafka's `FileRecords.writeTo` does with `transferTo`; the socket is corked
//! for the response so its small header pieces and the record sets leave in full packets. On
//! TLS the bytes must pass through the encrypter: they are read from the file in pieces (the
//! one copy) and written. Either way the file is read when the response is written, not when
//! the fetch is answered, so a segment truncated in between (a leader that lost its
//! leadership truncating its log) ends the connection rather than sending fewer bytes than
//! the frame announced; the client fetches again, as with Kafka.
//!
//! Like Kafka's network threads, `sendfile` reads a record set that is not in the page cache
//! on the thread that writes the response.

use std::future::Future;
use std::io;
use std::os::fd::AsRawFd;

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, Interest, WriteHalf};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;

use crate::log::segment::FileSlice;
use crate::protocol::Chunk;

/// The write side of a connection.
pub trait ResponseWriter: AsyncWrite + Unpin + Send {
    /// Sends a record set still in its segment file, all of it.
    fn send_file(&mut self, slice: &FileSlice) -> impl Future<Output = io::Result<()>> + Send;

    /// Holds small writes back until [`ResponseWriter::uncork`], so that a response's pieces
    /// leave in full packets. Only a hint.
    fn cork(&mut self) {}
    fn uncork(&mut self) {}

    /// Writes one response's chunks in order.
    fn write_chunks(&mut self, chunks: Vec<Chunk>) -> impl Future<Output = io::Result<()>> + Send {
        async move {
            let corked = chunks.len() > 1 && chunks.iter().any(|c| matches!(c, Chunk::File(_)));
            if corked {
                self.cork();
            }
            let result = write_in_order(self, chunks).await;
            if corked {
                self.uncork();
            }
            result
        }
    }
}

async fn write_in_order<W: ResponseWriter + ?Sized>(
    writer: &mut W,
    chunks: Vec<Chunk>,
) -> io::Result<()> {
    let mut bytes: Vec<Bytes> = Vec::new();
    for chunk in chunks {
        match chunk {
            Chunk::Bytes(b) => bytes.push(b),
            Chunk::File(f) => {
                write_vectored_all(writer, std::mem::take(&mut bytes)).await?;
                if f.len > 0 {
                    writer.send_file(&f).await?;
                }
            }
        }
    }
    write_vectored_all(writer, bytes).await
}

/// Writes `chunks` with vectored writes until all are written.
async fn write_vectored_all<W: AsyncWrite + Unpin + ?Sized>(
    writer: &mut W,
    mut chunks: Vec<Bytes>,
) -> io::Result<()> {
    let mut first = 0;
    while first < chunks.len() {
        let slices: Vec<io::IoSlice<'_>> = chunks[first..]
            .iter()
            .map(|c| io::IoSlice::new(c))
            .collect();
        let mut n = writer.write_vectored(&slices).await?;
        if n == 0 && slices.iter().any(|s| !s.is_empty()) {
            return Err(io::ErrorKind::WriteZero.into());
        }
        while first < chunks.len() && (n > 0 || chunks[first].is_empty()) {
            let len = chunks[first].len();
            if n >= len {
                n -= len;
                first += 1;
            } else {
                chunks[first].advance(n);
                n = 0;
            }
        }
    }
    Ok(())
}

/// A plaintext TCP connection: `sendfile`.
impl ResponseWriter for OwnedWriteHalf {
    async fn send_file(&mut self, slice: &FileSlice) -> io::Result<()> {
        send_file(self.as_ref(), slice).await
    }

    fn cork(&mut self) {
        set_cork(self.as_ref(), true);
    }

    fn uncork(&mut self) {
        set_cork(self.as_ref(), false);
    }
}

/// Any other stream (TLS): the record set is read from the file in pieces and written.
impl<S: AsyncRead + AsyncWrite + Send> ResponseWriter for WriteHalf<S> {
    async fn send_file(&mut self, slice: &FileSlice) -> io::Result<()> {
        const PIECE: usize = 256 << 10;
        let mut buf = vec![0u8; slice.len.min(PIECE)];
        let mut done = 0;
        while done < slice.len {
            let n = (slice.len - done).min(PIECE);
            read_exact_at(slice, done, &mut buf[..n])?;
            self.write_all(&buf[..n]).await?;
            done += n;
        }
        Ok(())
    }
}

fn read_exact_at(slice: &FileSlice, from: usize, buf: &mut [u8]) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    slice
        .file
        .read_exact_at(buf, slice.position + from as u64)
        .map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => truncated(),
            _ => e,
        })
}

fn truncated() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "the segment file was truncated while its records were sent",
    )
}

/// Sends `slice` to `sock` with `sendfile(2)`, waiting for the socket to drain as needed.
pub async fn send_file(sock: &TcpStream, slice: &FileSlice) -> io::Result<()> {
    let (out_fd, in_fd) = (sock.as_raw_fd(), slice.file.as_raw_fd());
    let mut offset = libc::off_t::try_from(slice.position).map_err(io::Error::other)?;
    let mut left = slice.len;
    while left > 0 {
        sock.writable().await?;
        let sent = sock.try_io(Interest::WRITABLE, || {
            // SAFETY: both descriptors stay open for the call (the socket and the file are
            // borrowed), and `offset` is an off_t the kernel reads and advances.
            let n = unsafe { libc::sendfile(out_fd, in_fd, &mut offset, left) };
            if n < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(n as usize)
            }
        });
        match sent {
            Ok(0) => return Err(truncated()),
            Ok(n) => left -= n.min(left),
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock
                    || e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn set_cork(sock: &TcpStream, on: bool) {
    let value: libc::c_int = on.into();
    // SAFETY: a valid socket descriptor, and a pointer to a c_int of the size passed.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CORK,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::Arc;
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;

    fn file_of(content: &[u8]) -> Arc<std::fs::File> {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(content).unwrap();
        Arc::new(f)
    }

    /// A plaintext and a TLS-style (split) writer each connected to a reader; returns what
    /// the reader got after the writer wrote `chunks` and closed.
    async fn through_socket(chunks: Vec<Chunk>, plaintext: bool) -> io::Result<Vec<u8>> {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let reader = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).await.unwrap();
            got
        });
        let stream = TcpStream::connect(addr).await.unwrap();
        let written = if plaintext {
            let (_r, mut w) = stream.into_split();
            let res = w.write_chunks(chunks).await;
            drop(w);
            res
        } else {
            let (_r, mut w) = tokio::io::split(stream);
            let res = w.write_chunks(chunks).await;
            let _ = w.shutdown().await;
            drop((_r, w));
            res
        };
        let got = reader.await.unwrap();
        written.map(|()| got)
    }

    #[tokio::test]
    async fn file_ranges_and_bytes_arrive_in_order_on_both_kinds_of_socket() {
        // Large enough to fill the socket buffers, so the writer waits for the reader.
        let content: Vec<u8> = (0..8_000_000u32).map(|i| (i % 253) as u8).collect();
        let file = file_of(&content);
        let slice = |position: u64, len: usize| {
            Chunk::File(FileSlice {
                file: file.clone(),
                position,
                len,
            })
        };
        let chunks = vec![
            Chunk::Bytes(Bytes::from_static(b"head")),
            slice(10, 5_000_000),
            Chunk::Bytes(Bytes::from_static(b"")),
            Chunk::Bytes(Bytes::from_static(b"middle")),
            slice(7_000_000, 0),
            slice(6_000_000, 1_000_000),
            Chunk::Bytes(Bytes::from_static(b"tail")),
        ];
        let mut want = b"head".to_vec();
        want.extend_from_slice(&content[10..5_000_010]);
        want.extend_from_slice(b"middle");
        want.extend_from_slice(&content[6_000_000..7_000_000]);
        want.extend_from_slice(b"tail");
        for plaintext in [true, false] {
            let got = through_socket(chunks.clone(), plaintext).await.unwrap();
            assert!(got == want, "plaintext={plaintext}: {} bytes", got.len());
        }
    }

    #[tokio::test]
    async fn a_file_truncated_before_it_is_sent_ends_the_response_with_an_error() {
        let file = file_of(&[9u8; 10_000]);
        file.set_len(6_000).unwrap();
        let chunks = vec![
            Chunk::Bytes(Bytes::from_static(b"head")),
            Chunk::File(FileSlice {
                file,
                position: 0,
                len: 10_000,
            }),
        ];
        for plaintext in [true, false] {
            let err = through_socket(chunks.clone(), plaintext).await.unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof, "{err}");
        }
    }
}
