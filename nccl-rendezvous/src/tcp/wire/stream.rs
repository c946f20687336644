//! Moving whole frames over a blocking stream, within limits: the maximum
//! frame size (checked before a body is read), and bodies read a bounded
//! chunk at a time. The client reads and writes this way; so does the
//! server's handshake when a fuzzer drives it (the server itself assembles
//! frames from a non-blocking socket, see `incoming`).

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use super::Frame;

/// Why a frame could not be read.
#[derive(Debug)]
pub(crate) enum FrameError {
    /// The peer closed the connection cleanly between frames.
    Closed,
    /// The header announced more than the maximum.
    TooLarge(u64),
    /// An I/O error, a timeout, or a close in the middle of a frame.
    Io(io::Error),
}

/// A byte stream whose reads can be given a time limit: a socket, or an
/// in-memory source when fuzzing.
pub(crate) trait FrameSource: Read {
    /// Sets how long one read may block (`None`: forever).
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()>;
}

impl FrameSource for TcpStream {
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        TcpStream::set_read_timeout(self, timeout)
    }
}

/// The largest piece of a frame body read (and allocated) at a time: memory
/// follows the bytes that actually arrived, not the length a header claims.
const READ_CHUNK: usize = 64 * 1024;

/// Reads one frame's payload of at most `max` bytes; the source's own read
/// timeout applies to each read.
pub(crate) fn read_frame<S: Read + ?Sized>(
    stream: &mut S,
    max: usize,
) -> Result<Vec<u8>, FrameError> {
    let mut header = [0u8; 4];
    if read_some(stream, &mut header[..1]).map_err(FrameError::Io)? == 0 {
        return Err(FrameError::Closed);
    }
    read_exact(stream, &mut header, 1, ("header", 4))?;
    let len = u32::from_be_bytes(header);
    if u64::from(len) > max as u64 {
        return Err(FrameError::TooLarge(u64::from(len)));
    }
    let len = len as usize;
    let mut body = Vec::with_capacity(len.min(READ_CHUNK));
    while body.len() < len {
        let filled = body.len();
        body.resize(filled + (len - filled).min(READ_CHUNK), 0);
        read_exact(stream, &mut body, filled, ("body", len))?;
    }
    Ok(body)
}

/// Fills `buf[from..]`.
///
/// When the peer closes first, the error says how far the frame got; `part`
/// names the part being read and its full length.
fn read_exact<S: Read + ?Sized>(
    stream: &mut S,
    buf: &mut [u8],
    from: usize,
    part: (&str, usize),
) -> Result<(), FrameError> {
    let mut filled = from;
    while filled < buf.len() {
        match read_some(stream, &mut buf[filled..]) {
            Ok(0) => {
                let (name, total) = part;
                return Err(FrameError::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("connection closed after {filled} of {total} frame {name} bytes"),
                )));
            }
            Ok(n) => filled += n,
            Err(e) => return Err(FrameError::Io(e)),
        }
    }
    Ok(())
}

/// One read, retried on interruption.
fn read_some<S: Read + ?Sized>(stream: &mut S, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match stream.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// Writes a whole frame.
pub(crate) fn write_frame<S: Write + ?Sized>(stream: &mut S, frame: &Frame) -> io::Result<()> {
    stream.write_all(frame.as_bytes())?;
    stream.flush()
}
