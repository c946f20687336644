//! Encoding: building frames (the length header, then the payload's
//! fields) from requests and responses.

use std::time::Duration;

use super::{Limits, MAGIC, Request, Response, VERSION, op, resp};

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
    /// The frame, header included.
    ///
    /// The header saturates at `u32::MAX` for absurdly long payloads; callers
    /// check [`Frame::payload_len`] first.
    fn finish(mut self) -> Frame {
        let payload = self.0.len() - 4;
        let len = u32::try_from(payload).unwrap_or(u32::MAX).to_be_bytes();
        self.0[..4].copy_from_slice(&len);
        Frame(self.0)
    }
}

/// The head of a `VALUE` answer whose value is sent apart (shared, not
/// copied): the frame's length header, counting the value and `trailer`
/// bytes after it (a seal), the opcode, and the value's length.
pub(crate) fn value_head(value_len: usize, trailer: usize) -> Vec<u8> {
    let payload = 1 + 4 + value_len + trailer;
    let mut head = Vec::with_capacity(9);
    head.extend_from_slice(&u32::try_from(payload).unwrap_or(u32::MAX).to_be_bytes());
    head.push(resp::VALUE);
    head.extend_from_slice(&u32::try_from(value_len).unwrap_or(u32::MAX).to_be_bytes());
    head
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
    /// The payload: the frame without its length header.
    pub(crate) fn payload(&self) -> &[u8] {
        &self.0[4..]
    }
    /// The frame with `trailer` appended to its payload (a seal's tag).
    pub(crate) fn with_trailer(self, trailer: &[u8]) -> Frame {
        let mut bytes = self.0;
        bytes.extend_from_slice(trailer);
        Encoder(bytes).finish()
    }
}

fn opt_bytes(e: Encoder, v: Option<&[u8]>) -> Encoder {
    match v {
        None => e.u8(0),
        Some(v) => e.u8(1).bytes(v),
    }
}

fn limits_fields(e: Encoder, limits: &Limits) -> Encoder {
    e.u64(limits.max_frame)
        .u64(limits.max_key_len)
        .u64(limits.max_value_len)
        .u64(limits.max_keys)
}

impl Request {
    pub(crate) fn encode(&self) -> Frame {
        match self {
            Request::Hello {
                nonce,
                authenticate,
            } => Encoder::new(op::HELLO, 7 + nonce.len())
                .raw(&MAGIC)
                .u16(VERSION)
                .raw(nonce)
                .u8(u8::from(*authenticate)),
            Request::Proof(tag) => Encoder::new(op::PROOF, tag.len()).raw(tag),
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
            Request::SetSession { key, value, owner } => {
                let cap = 8 + key.len() + value.len() + owner.len();
                Encoder::new(op::SET_SESSION, cap)
                    .bytes(key.as_bytes())
                    .bytes(value)
                    .raw(owner)
            }
        }
        .finish()
    }
}

impl Response {
    pub(crate) fn encode(&self) -> Frame {
        match self {
            Response::Hello {
                nonce,
                limits,
                proof,
            } => {
                let e = Encoder::new(resp::HELLO, 2 + nonce.len() + 32 + 1 + 32)
                    .u16(VERSION)
                    .raw(nonce);
                let e = limits_fields(e, limits);
                match proof {
                    None => e.u8(0),
                    Some(tag) => e.u8(1).raw(tag),
                }
            }
            Response::Ok => Encoder::new(resp::OK, 0),
            Response::Value(v) => Encoder::new(resp::VALUE, 4 + v.len()).bytes(v),
            Response::NotFound => Encoder::new(resp::NOT_FOUND, 0),
            Response::Int(v) => Encoder::new(resp::INT, 8).i64(*v),
            Response::Bool(v) => Encoder::new(resp::BOOL, 1).u8(u8::from(*v)),
            Response::CompareSet { swapped, current } => {
                let cap = 6 + current.as_ref().map_or(0, Vec::len);
                let e = Encoder::new(resp::COMPARE_SET, cap).u8(u8::from(*swapped));
                opt_bytes(e, current.as_deref())
            }
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
}
