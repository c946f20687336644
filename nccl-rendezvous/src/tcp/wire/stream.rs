//! Moving whole frames over a stream, within limits: the maximum frame
//! size (checked before a body is read), a deadline per frame on the
//! server, and bodies read a bounded chunk at a time.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::Frame;

/// Why a frame could not be read.
#[derive(Debug)]
pub(crate) enum FrameError {
    /// The peer closed the connection cleanly between frames.
    Closed,
    /// The header announced more than the maximum.
    TooLarge(u64),
    /// The inspector refused the frame from its first bytes (its message);
    /// the rest of the frame was not read.
    Refused(String),
    /// An I/O error, a timeout, or a close in the middle of a frame.
    Io(io::Error),
}

/// A byte stream the frame reader can put time limits on: a socket, or an
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

/// A byte stream the frame writer can put time limits on: a socket, or an
/// in-memory sink when fuzzing.
pub(crate) trait FrameSink: Write {
    /// Sets how long one write may block (`None`: forever).
    fn set_write_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()>;
}

impl FrameSink for TcpStream {
    fn set_write_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        TcpStream::set_write_timeout(self, timeout)
    }
}

/// The server's time limits for reading one frame.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FrameTimeouts {
    /// How long to wait for the frame's first byte; `None` waits as long as
    /// the connection stays idle.
    pub(crate) first_byte: Option<Duration>,
    /// The whole frame, header included, must have arrived this long after
    /// its first byte: a deadline for the frame, not a per-read timeout, so
    /// a client that dribbles bytes cannot keep a frame open forever.
    pub(crate) whole_frame: Duration,
}

/// The largest piece of a frame body read (and allocated) at a time: memory
/// follows the bytes that actually arrived, not the length a header claims.
const READ_CHUNK: usize = 64 * 1024;

/// Reads one frame's payload.
///
/// With `timeouts` (the server's mode), the source's read timeout is set
/// before every read from the limits there. Without it, the source's own read
/// timeout applies to each read (the client's mode).
pub(crate) fn read_frame<S: FrameSource + ?Sized>(
    stream: &mut S,
    max: usize,
    timeouts: Option<FrameTimeouts>,
) -> Result<Vec<u8>, FrameError> {
    read_frame_inspected(stream, max, timeouts, &mut |_, _| Ok(()))
}

/// Looks at a frame's first body bytes and its declared length, and may
/// refuse it (the message).
pub(crate) type Inspector<'a> = dyn FnMut(&[u8], usize) -> Result<(), String> + 'a;

/// [`read_frame`] that shows the body's first bytes (growing prefixes of
/// up to 64 KiB, as they arrive) and the declared length to `inspect`: an
/// `Err` from it ends the read with [`FrameError::Refused`], so a frame can
/// be refused from its first bytes without the memory or the time its
/// whole body would take.
pub(crate) fn read_frame_inspected<S: FrameSource + ?Sized>(
    stream: &mut S,
    max: usize,
    timeouts: Option<FrameTimeouts>,
    inspect: &mut Inspector<'_>,
) -> Result<Vec<u8>, FrameError> {
    if let Some(t) = timeouts {
        stream
            .set_read_timeout(t.first_byte.map(at_least_1ms))
            .map_err(FrameError::Io)?;
    }
    let mut header = [0u8; 4];
    if read_some(stream, &mut header[..1], None).map_err(FrameError::Io)? == 0 {
        return Err(FrameError::Closed);
    }
    let deadline = timeouts.and_then(|t| deadline_in(t.whole_frame));
    read_exact_within(stream, &mut header, 1, deadline, ("header", 4))?;
    let len = u32::from_be_bytes(header);
    if u64::from(len) > max as u64 {
        return Err(FrameError::TooLarge(u64::from(len)));
    }
    let len = len as usize;
    let mut body = Vec::with_capacity(len.min(READ_CHUNK));
    // The first READ_CHUNK bytes are read as they come and inspected as the
    // prefix doubles: a refusal never waits for bytes that may not come,
    // and a peer sending a byte at a time costs O(log n) inspections.
    let mut inspect_at = 1;
    while body.len() < len {
        let filled = body.len();
        body.resize(filled + (len - filled).min(READ_CHUNK), 0);
        if filled >= READ_CHUNK {
            read_exact_within(stream, &mut body, filled, deadline, ("body", len))?;
            continue;
        }
        let n = read_some(stream, &mut body[filled..], deadline).map_err(FrameError::Io)?;
        if n == 0 {
            return Err(FrameError::Io(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("connection closed after {filled} of {len} frame body bytes"),
            )));
        }
        body.truncate(filled + n);
        if body.len() >= inspect_at || body.len() == len {
            inspect(&body, len).map_err(FrameError::Refused)?;
            inspect_at = body.len().saturating_mul(2);
        }
    }
    Ok(body)
}

/// The instant `limit` (at least 1 ms) from now; `None` (no deadline) when
/// that is past what `Instant` can represent, rather than a panic.
fn deadline_in(limit: Duration) -> Option<Instant> {
    Instant::now().checked_add(at_least_1ms(limit))
}

fn at_least_1ms(d: Duration) -> Duration {
    // A zero timeout means "forever" to the socket API.
    d.max(Duration::from_millis(1))
}

/// Fills `buf[from..]`. When the peer closes or the deadline passes first,
/// the error says how far the frame got; `part` names the part being read
/// and its full length, for that message.
fn read_exact_within<S: FrameSource + ?Sized>(
    stream: &mut S,
    buf: &mut [u8],
    from: usize,
    deadline: Option<Instant>,
    part: (&str, usize),
) -> Result<(), FrameError> {
    let mut filled = from;
    while filled < buf.len() {
        match read_some(stream, &mut buf[filled..], deadline) {
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

/// One read, retried on interruption; with a deadline, the read may block
/// only until then.
fn read_some<S: FrameSource + ?Sized>(
    stream: &mut S,
    buf: &mut [u8],
    deadline: Option<Instant>,
) -> io::Result<usize> {
    loop {
        if let Some(deadline) = deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the frame did not arrive completely in time",
                ));
            }
            stream.set_read_timeout(Some(at_least_1ms(left)))?;
        }
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

/// Writes a whole frame within `limit`: a deadline for the frame, so a
/// client that reads its answer a byte at a time cannot hold the writer
/// forever.
pub(crate) fn write_frame_within<S: FrameSink + ?Sized>(
    stream: &mut S,
    frame: &Frame,
    limit: Duration,
) -> io::Result<()> {
    let deadline = deadline_in(limit);
    let mut rest = frame.as_bytes();
    while !rest.is_empty() {
        let left = deadline.map_or(limit, |d| d.saturating_duration_since(Instant::now()));
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the peer did not take the frame in time",
            ));
        }
        stream.set_write_timeout(Some(at_least_1ms(left)))?;
        match stream.write(rest) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => rest = &rest[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
