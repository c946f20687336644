//! The TCP store's wire protocol.
//!
//! Every message is a frame: a `u32` big-endian payload length, then the
//! payload. A payload is one opcode byte followed by fields; integers are
//! big-endian, byte strings and text are a `u32` length and the bytes, text is
//! UTF-8. Frames longer than the maximum frame size are refused before their
//! body is read.
//!
//! A client's first frame is `HELLO` (magic, protocol version, optional
//! shared secret); the server answers `HELLO` with its maximum frame size.
//! A server configured with a secret answers anything else, or a wrong
//! secret, with an `ERROR` frame (code `AUTH`) and closes the connection.
//! Any malformed frame gets an `ERROR` frame (where the connection still
//! allows it) and the connection is closed; the server itself keeps serving.
//! A connection over the server's `max_connections` gets an `ERROR` frame
//! (code `TOO_MANY_CONNECTIONS`) and is closed before any frame is read.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Identifies the protocol in `HELLO`.
pub(crate) const MAGIC: [u8; 4] = *b"NCRS";
/// The protocol version in `HELLO`.
pub(crate) const VERSION: u16 = 1;

mod op {
    pub const HELLO: u8 = 0x01;
    pub const SET: u8 = 0x02;
    pub const GET: u8 = 0x03;
    pub const TRY_GET: u8 = 0x04;
    pub const COMPARE_SET: u8 = 0x05;
    pub const ADD: u8 = 0x06;
    pub const WAIT: u8 = 0x07;
    pub const DELETE: u8 = 0x08;
}

mod resp {
    pub const HELLO: u8 = 0x80;
    pub const OK: u8 = 0x81;
    pub const VALUE: u8 = 0x82;
    pub const NOT_FOUND: u8 = 0x83;
    pub const INT: u8 = 0x84;
    pub const BOOL: u8 = 0x85;
    pub const TIMEOUT: u8 = 0x90;
    pub const NOT_AN_INTEGER: u8 = 0x91;
    pub const OVERFLOW: u8 = 0x92;
    pub const ERROR: u8 = 0x9f;
}

/// Codes carried by [`Response::Error`].
pub(crate) mod code {
    /// Missing or wrong shared secret.
    pub const AUTH: u8 = 1;
    /// A frame that is not the protocol.
    pub const PROTOCOL: u8 = 2;
    /// A frame over the maximum size.
    pub const TOO_LARGE: u8 = 3;
    /// The server is shutting down.
    pub const SHUTDOWN: u8 = 4;
    /// The server already has its maximum number of connections open.
    pub const TOO_MANY_CONNECTIONS: u8 = 5;
}

/// A client's request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Request {
    Hello {
        version: u16,
        secret: Option<Vec<u8>>,
    },
    Set {
        key: String,
        value: Vec<u8>,
    },
    Get {
        key: String,
        timeout: Duration,
    },
    TryGet {
        key: String,
    },
    CompareSet {
        key: String,
        expected: Option<Vec<u8>>,
        new: Vec<u8>,
    },
    Add {
        key: String,
        delta: i64,
    },
    Wait {
        keys: Vec<String>,
        timeout: Duration,
    },
    Delete {
        key: String,
    },
}

/// The server's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Response {
    Hello {
        max_frame: u64,
    },
    Ok,
    Value(Vec<u8>),
    NotFound,
    Int(i64),
    Bool(bool),
    Timeout {
        missing: Vec<String>,
        waited: Duration,
    },
    NotAnInteger(Vec<u8>),
    Overflow(i64),
    Error {
        code: u8,
        message: String,
    },
}

/// Builds a frame: the length header is filled in by [`Encoder::finish`].
struct Encoder(Vec<u8>);

impl Encoder {
    fn new(opcode: u8, capacity: usize) -> Self {
        let mut buf = Vec::with_capacity(5 + capacity);
        buf.extend_from_slice(&[0; 4]);
        buf.push(opcode);
        Encoder(buf)
    }
    fn u8(mut self, v: u8) -> Self {
        self.0.push(v);
        self
    }
    fn u16(mut self, v: u16) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn i64(mut self, v: i64) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn raw(mut self, v: &[u8]) -> Self {
        self.0.extend_from_slice(v);
        self
    }
    fn bytes(self, v: &[u8]) -> Self {
        // Lengths over u32::MAX are caught by `finish` (the frame is then
        // longer than any maximum); saturating keeps this total.
        let len = u32::try_from(v.len()).unwrap_or(u32::MAX);
        self.u32(len).raw(v)
    }
    fn duration(self, d: Duration) -> Self {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        self.u64(ms)
    }
    fn strings(self, v: &[String]) -> Self {
        let n = u32::try_from(v.len()).unwrap_or(u32::MAX);
        v.iter().fold(self.u32(n), |e, s| e.bytes(s.as_bytes()))
    }
    /// The frame, header included. The header saturates at `u32::MAX` for
    /// absurdly long payloads; callers check [`Frame::payload_len`] first.
    fn finish(mut self) -> Frame {
        let payload = self.0.len() - 4;
        let len = u32::try_from(payload).unwrap_or(u32::MAX).to_be_bytes();
        self.0[..4].copy_from_slice(&len);
        Frame(self.0)
    }
}

/// An encoded frame, header included.
#[derive(Debug)]
pub(crate) struct Frame(Vec<u8>);

impl Frame {
    pub(crate) fn payload_len(&self) -> usize {
        self.0.len() - 4
    }
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// Reads fields from a payload; every read is bounds-checked.
struct Decoder<'a> {
    buf: &'a [u8],
}

type DecodeResult<T> = std::result::Result<T, String>;

impl<'a> Decoder<'a> {
    fn take(&mut self, n: usize, what: &str) -> DecodeResult<&'a [u8]> {
        if self.buf.len() < n {
            return Err(format!(
                "truncated frame: {what} needs {n} bytes, only {} left",
                self.buf.len()
            ));
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }
    fn array<const N: usize>(&mut self, what: &str) -> DecodeResult<[u8; N]> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }
    fn u8(&mut self, what: &str) -> DecodeResult<u8> {
        Ok(self.array::<1>(what)?[0])
    }
    fn u16(&mut self, what: &str) -> DecodeResult<u16> {
        Ok(u16::from_be_bytes(self.array(what)?))
    }
    fn u32(&mut self, what: &str) -> DecodeResult<u32> {
        Ok(u32::from_be_bytes(self.array(what)?))
    }
    fn u64(&mut self, what: &str) -> DecodeResult<u64> {
        Ok(u64::from_be_bytes(self.array(what)?))
    }
    fn i64(&mut self, what: &str) -> DecodeResult<i64> {
        Ok(i64::from_be_bytes(self.array(what)?))
    }
    fn bool(&mut self, what: &str) -> DecodeResult<bool> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(format!("{what}: expected 0 or 1, got {other}")),
        }
    }
    fn bytes(&mut self, what: &str) -> DecodeResult<Vec<u8>> {
        let n = self.u32(what)?;
        let n = usize::try_from(n).map_err(|_| format!("{what}: length {n} too large"))?;
        Ok(self.take(n, what)?.to_vec())
    }
    fn string(&mut self, what: &str) -> DecodeResult<String> {
        String::from_utf8(self.bytes(what)?).map_err(|_| format!("{what} is not valid UTF-8"))
    }
    fn duration(&mut self, what: &str) -> DecodeResult<Duration> {
        Ok(Duration::from_millis(self.u64(what)?))
    }
    fn strings(&mut self, what: &str) -> DecodeResult<Vec<String>> {
        let n = self.u32(what)?;
        // Never trust a count for allocation: each entry takes >= 4 bytes.
        let cap = (self.buf.len() / 4).min(usize::try_from(n).unwrap_or(usize::MAX));
        let mut out = Vec::with_capacity(cap);
        for _ in 0..n {
            out.push(self.string(what)?);
        }
        Ok(out)
    }
    fn finish(self) -> DecodeResult<()> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(format!("{} unexpected trailing bytes", self.buf.len()))
        }
    }
}

fn opt_bytes(e: Encoder, v: Option<&[u8]>) -> Encoder {
    match v {
        None => e.u8(0),
        Some(v) => e.u8(1).bytes(v),
    }
}

fn read_opt_bytes(d: &mut Decoder<'_>, what: &str) -> DecodeResult<Option<Vec<u8>>> {
    Ok(if d.bool(what)? {
        Some(d.bytes(what)?)
    } else {
        None
    })
}

impl Request {
    pub(crate) fn encode(&self) -> Frame {
        match self {
            Request::Hello { version, secret } => {
                let e = Encoder::new(op::HELLO, 16).raw(&MAGIC).u16(*version);
                opt_bytes(e, secret.as_deref())
            }
            Request::Set { key, value } => Encoder::new(op::SET, 8 + key.len() + value.len())
                .bytes(key.as_bytes())
                .bytes(value),
            Request::Get { key, timeout } => Encoder::new(op::GET, 12 + key.len())
                .bytes(key.as_bytes())
                .duration(*timeout),
            Request::TryGet { key } => {
                Encoder::new(op::TRY_GET, 4 + key.len()).bytes(key.as_bytes())
            }
            Request::CompareSet { key, expected, new } => {
                let cap = 13 + key.len() + expected.as_ref().map_or(0, Vec::len) + new.len();
                let e = Encoder::new(op::COMPARE_SET, cap).bytes(key.as_bytes());
                opt_bytes(e, expected.as_deref()).bytes(new)
            }
            Request::Add { key, delta } => Encoder::new(op::ADD, 12 + key.len())
                .bytes(key.as_bytes())
                .i64(*delta),
            Request::Wait { keys, timeout } => {
                let cap = 12 + keys.iter().map(|k| 4 + k.len()).sum::<usize>();
                Encoder::new(op::WAIT, cap).duration(*timeout).strings(keys)
            }
            Request::Delete { key } => {
                Encoder::new(op::DELETE, 4 + key.len()).bytes(key.as_bytes())
            }
        }
        .finish()
    }

    /// Parses a payload (the frame without its length header).
    pub(crate) fn decode(payload: &[u8]) -> DecodeResult<Request> {
        let mut d = Decoder { buf: payload };
        let req = match d.u8("opcode")? {
            op::HELLO => {
                let magic: [u8; 4] = d.array("HELLO magic")?;
                if magic != MAGIC {
                    return Err(format!(
                        "HELLO magic is {magic:02x?}, expected {MAGIC:02x?} (\"NCRS\")"
                    ));
                }
                let version = d.u16("HELLO version")?;
                let secret = read_opt_bytes(&mut d, "HELLO secret")?;
                Request::Hello { version, secret }
            }
            op::SET => Request::Set {
                key: d.string("key")?,
                value: d.bytes("value")?,
            },
            op::GET => Request::Get {
                key: d.string("key")?,
                timeout: d.duration("timeout")?,
            },
            op::TRY_GET => Request::TryGet {
                key: d.string("key")?,
            },
            op::COMPARE_SET => Request::CompareSet {
                key: d.string("key")?,
                expected: read_opt_bytes(&mut d, "expected value")?,
                new: d.bytes("new value")?,
            },
            op::ADD => Request::Add {
                key: d.string("key")?,
                delta: d.i64("delta")?,
            },
            op::WAIT => Request::Wait {
                timeout: d.duration("timeout")?,
                keys: d.strings("keys")?,
            },
            op::DELETE => Request::Delete {
                key: d.string("key")?,
            },
            other => return Err(format!("unknown request opcode 0x{other:02x}")),
        };
        d.finish()?;
        Ok(req)
    }
}

impl Response {
    pub(crate) fn encode(&self) -> Frame {
        match self {
            Response::Hello { max_frame } => Encoder::new(resp::HELLO, 8).u64(*max_frame),
            Response::Ok => Encoder::new(resp::OK, 0),
            Response::Value(v) => Encoder::new(resp::VALUE, 4 + v.len()).bytes(v),
            Response::NotFound => Encoder::new(resp::NOT_FOUND, 0),
            Response::Int(v) => Encoder::new(resp::INT, 8).i64(*v),
            Response::Bool(v) => Encoder::new(resp::BOOL, 1).u8(u8::from(*v)),
            Response::Timeout { missing, waited } => Encoder::new(resp::TIMEOUT, 64)
                .duration(*waited)
                .strings(missing),
            Response::NotAnInteger(v) => Encoder::new(resp::NOT_AN_INTEGER, 4 + v.len()).bytes(v),
            Response::Overflow(v) => Encoder::new(resp::OVERFLOW, 8).i64(*v),
            Response::Error { code, message } => Encoder::new(resp::ERROR, 5 + message.len())
                .u8(*code)
                .bytes(message.as_bytes()),
        }
        .finish()
    }

    /// Parses a payload (the frame without its length header).
    pub(crate) fn decode(payload: &[u8]) -> DecodeResult<Response> {
        let mut d = Decoder { buf: payload };
        let r = match d.u8("opcode")? {
            resp::HELLO => Response::Hello {
                max_frame: d.u64("max frame size")?,
            },
            resp::OK => Response::Ok,
            resp::VALUE => Response::Value(d.bytes("value")?),
            resp::NOT_FOUND => Response::NotFound,
            resp::INT => Response::Int(d.i64("integer")?),
            resp::BOOL => Response::Bool(d.bool("boolean")?),
            resp::TIMEOUT => Response::Timeout {
                waited: d.duration("waited")?,
                missing: d.strings("missing keys")?,
            },
            resp::NOT_AN_INTEGER => Response::NotAnInteger(d.bytes("value")?),
            resp::OVERFLOW => Response::Overflow(d.i64("current value")?),
            resp::ERROR => Response::Error {
                code: d.u8("error code")?,
                message: String::from_utf8_lossy(&d.bytes("error message")?).into_owned(),
            },
            other => return Err(format!("unknown response opcode 0x{other:02x}")),
        };
        d.finish()?;
        Ok(r)
    }

    /// A short name for messages.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Response::Hello { .. } => "HELLO",
            Response::Ok => "OK",
            Response::Value(_) => "VALUE",
            Response::NotFound => "NOT_FOUND",
            Response::Int(_) => "INT",
            Response::Bool(_) => "BOOL",
            Response::Timeout { .. } => "TIMEOUT",
            Response::NotAnInteger(_) => "NOT_AN_INTEGER",
            Response::Overflow(_) => "OVERFLOW",
            Response::Error { .. } => "ERROR",
        }
    }
}

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
    if let Some(t) = timeouts {
        stream
            .set_read_timeout(t.first_byte.map(at_least_1ms))
            .map_err(FrameError::Io)?;
    }
    let mut header = [0u8; 4];
    if read_some(stream, &mut header[..1], None).map_err(FrameError::Io)? == 0 {
        return Err(FrameError::Closed);
    }
    let deadline = timeouts.map(|t| Instant::now() + at_least_1ms(t.whole_frame));
    read_exact_within(stream, &mut header, 1, deadline, ("header", 4))?;
    let len = u32::from_be_bytes(header);
    if u64::from(len) > max as u64 {
        return Err(FrameError::TooLarge(u64::from(len)));
    }
    let len = len as usize;
    let mut body = Vec::with_capacity(len.min(READ_CHUNK));
    while body.len() < len {
        let filled = body.len();
        body.resize(filled + (len - filled).min(READ_CHUNK), 0);
        read_exact_within(stream, &mut body, filled, deadline, ("body", len))?;
    }
    Ok(body)
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
pub(crate) fn write_frame(stream: &mut TcpStream, frame: &Frame) -> io::Result<()> {
    stream.write_all(frame.as_bytes())?;
    stream.flush()
}

/// Writes a whole frame within `limit`: a deadline for the frame, so a
/// client that reads its answer a byte at a time cannot hold the writer
/// forever.
pub(crate) fn write_frame_within(
    stream: &mut TcpStream,
    frame: &Frame,
    limit: Duration,
) -> io::Result<()> {
    let deadline = Instant::now() + at_least_1ms(limit);
    let mut rest = frame.as_bytes();
    while !rest.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
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

/// Compares two secrets in time that depends only on `expected`'s length.
pub(crate) fn secrets_match(expected: &[u8], given: &[u8]) -> bool {
    let mut diff = expected.len() ^ given.len();
    for (i, &e) in expected.iter().enumerate() {
        let g = given.get(i).copied().unwrap_or(0);
        diff |= usize::from(e ^ g);
    }
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip_req(r: Request) {
        let f = r.encode();
        assert_eq!(
            u32::from_be_bytes(f.as_bytes()[..4].try_into().unwrap()) as usize,
            f.payload_len()
        );
        assert_eq!(Request::decode(&f.as_bytes()[4..]).unwrap(), r);
    }

    fn roundtrip_resp(r: Response) {
        let f = r.encode();
        assert_eq!(Response::decode(&f.as_bytes()[4..]).unwrap(), r);
    }

    #[test]
    fn requests_roundtrip() {
        roundtrip_req(Request::Hello {
            version: VERSION,
            secret: None,
        });
        roundtrip_req(Request::Hello {
            version: 7,
            secret: Some(b"s3".to_vec()),
        });
        roundtrip_req(Request::Set {
            key: "k".into(),
            value: vec![0, 1, 2],
        });
        roundtrip_req(Request::Get {
            key: "ключ".into(),
            timeout: Duration::from_millis(1234),
        });
        roundtrip_req(Request::TryGet { key: String::new() });
        roundtrip_req(Request::CompareSet {
            key: "c".into(),
            expected: None,
            new: b"n".to_vec(),
        });
        roundtrip_req(Request::CompareSet {
            key: "c".into(),
            expected: Some(Vec::new()),
            new: b"n".to_vec(),
        });
        roundtrip_req(Request::Add {
            key: "a".into(),
            delta: -5,
        });
        roundtrip_req(Request::Wait {
            keys: vec!["x".into(), "y".into()],
            timeout: Duration::from_secs(3),
        });
        roundtrip_req(Request::Delete { key: "d".into() });
    }

    #[test]
    fn responses_roundtrip() {
        for r in [
            Response::Hello { max_frame: 99 },
            Response::Ok,
            Response::Value(b"v".to_vec()),
            Response::NotFound,
            Response::Int(-3),
            Response::Bool(true),
            Response::Timeout {
                missing: vec!["m".into()],
                waited: Duration::from_millis(10),
            },
            Response::NotAnInteger(b"x".to_vec()),
            Response::Overflow(i64::MAX),
            Response::Error {
                code: code::AUTH,
                message: "no".into(),
            },
        ] {
            roundtrip_resp(r);
        }
    }

    #[test]
    fn malformed_payloads_are_errors_not_panics() {
        assert!(Request::decode(&[]).is_err());
        assert!(Request::decode(&[0xee]).is_err());
        assert!(Request::decode(&[op::SET, 0, 0, 0, 9, b'k']).is_err());
        assert!(Request::decode(&[op::SET, 0xff, 0xff, 0xff, 0xff]).is_err());
        assert!(Request::decode(&[op::HELLO, b'X', b'X', b'X', b'X', 0, 1, 0]).is_err());
        // Invalid UTF-8 key.
        assert!(Request::decode(&[op::TRY_GET, 0, 0, 0, 1, 0xff]).is_err());
        // Trailing bytes.
        assert!(Request::decode(&[op::TRY_GET, 0, 0, 0, 1, b'k', 0]).is_err());
        // A huge key count with no data behind it.
        assert!(
            Request::decode(&[op::WAIT, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff]).is_err()
        );
        // Every prefix of a valid frame is rejected cleanly.
        let f = Request::CompareSet {
            key: "key".into(),
            expected: Some(b"old".to_vec()),
            new: b"new".to_vec(),
        }
        .encode();
        let payload = &f.as_bytes()[4..];
        for n in 0..payload.len() {
            assert!(Request::decode(&payload[..n]).is_err(), "prefix {n}");
        }
        assert!(Response::decode(&[resp::BOOL, 2]).is_err());
    }

    #[test]
    fn secret_comparison() {
        assert!(secrets_match(b"abc", b"abc"));
        assert!(!secrets_match(b"abc", b"abd"));
        assert!(!secrets_match(b"abc", b"ab"));
        assert!(!secrets_match(b"abc", b"abcd"));
        assert!(!secrets_match(b"abc", b""));
        assert!(secrets_match(b"", b""));
    }
}
