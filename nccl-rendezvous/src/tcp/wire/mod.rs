//! The TCP store's wire protocol, version 6.
//!
//! Every message is a frame: a `u32` big-endian payload length, then the
//! payload. A payload is one opcode byte followed by fields; integers are
//! big-endian, byte strings and text are a `u32` length and the bytes, text is
//! UTF-8. Frames longer than the maximum frame size are refused before their
//! body is read.
//!
//! # Handshake
//!
//! No secret ever crosses the wire. Until the handshake is done, frames are
//! capped at [`HANDSHAKE_MAX_FRAME`] bytes and the whole handshake must end
//! within the server's handshake timeout.
//!
//! 1. The client sends `HELLO`: magic, [`VERSION`], a fresh 32-byte nonce,
//!    and whether it holds a secret. A server of another version answers
//!    with an `ERROR` naming both versions.
//! 2. The server answers `HELLO`: its version, its own fresh nonce, its
//!    per-request limits ([`Limits`]) and, when both sides hold a secret,
//!    its proof: HMAC-SHA256 under the secret of both `HELLO`s (its own
//!    without the proof). The client checks the proof, so a fake server
//!    is refused.
//! 3. The client sends `PROOF`: HMAC-SHA256 under the secret of both
//!    `HELLO`s, under another label. The server checks it (in constant
//!    time) and answers a sealed `OK`.
//!
//! From then on every frame, both ways, is sealed: its payload ends with
//! an HMAC-SHA256 tag of a sequence number (counted per direction from 0,
//! never sent) and the payload, under a session key derived from the
//! secret and both `HELLO`s (one key per direction). A frame replayed,
//! reordered, altered, reflected or injected fails its tag, and the
//! connection is closed. Payloads are authenticated, not encrypted.
//!
//! A sealed request also carries, between its fields and its tag, its
//! stamp: the client's milliseconds since its side of the handshake ended,
//! and how many more milliseconds it waits for the answer before it gives
//! up (two `u64`s, under the tag). The server's own clock started before
//! the client's (it confirms the handshake after starting it), so its time
//! since the handshake is never behind the client's: it refuses, unapplied,
//! a request that arrives after its client gave up (its stamp plus its
//! patience behind the server's time), after the server's I/O timeout, or
//! stamped ahead of the server's time (beyond the 500 ppm two monotonic
//! clocks may differ by). So a request held back on the way (by a relay) is
//! never applied once its client gave up on it and may have written again.
//! Both clocks are monotonic; they need no synchronisation, since each only
//! measures from its own end of the same handshake.
//!
//! Without a secret on either side, step 2 carries no proof, step 3 is
//! skipped and frames are not sealed. A server without a secret then
//! accepts only peers on its own host, unless told to accept anyone.
//!
//! # Errors
//!
//! Any malformed frame gets an `ERROR` frame (where the connection still
//! allows it) and the connection is closed; the server itself keeps serving.
//! A connection over the server's `max_connections` gets an `ERROR` frame
//! (code `TOO_MANY_CONNECTIONS`) and is closed before any frame is read.
//! A request over a per-request limit or over the store's quota gets an
//! `ERROR` frame (code `LIMIT`), changes nothing, and closes the connection.
//! The server checks each length field as it arrives, and the length the
//! fields add up to against the length the frame declares (`scan`), so a
//! frame over a limit, or one whose fields do not fill it, is refused
//! before its body is buffered.
//!
//! This module holds the messages ([`Request`], [`Response`]) and their
//! opcodes; `encode` builds frames, `decode` parses them, `scan` checks a
//! request's shape as it arrives, `incoming` assembles frames from the
//! bytes a non-blocking socket gives, `stream` reads and writes them on a
//! blocking one, and `seal` holds the handshake's proofs, the per-frame
//! tags and the requests' stamps.

mod decode;
mod encode;
mod incoming;
mod scan;
mod seal;
mod stream;

use std::time::Duration;

pub(crate) use decode::DecodeError;
pub(crate) use encode::{Frame, value_head};
pub(crate) use incoming::{Incoming, IncomingError, Rules};
pub(crate) use scan::Scan;
#[cfg(test)]
pub(crate) use seal::Stamp;
pub(crate) use seal::{NONCE_LEN, Nonce, Proofs, STAMP_LEN, Session, TAG_LEN, Tag, fresh_nonce};
pub(crate) use stream::{FrameError, FrameSource, read_frame, write_frame};

/// Identifies the protocol in `HELLO`.
pub(crate) const MAGIC: [u8; 4] = *b"NCRS";
/// The protocol version in `HELLO`.
///
/// Version 6 adds `SET_SESSION` (a key bound to the connection that set
/// it: see the server's table); version 5 seals in every request how long its client waits for the answer;
/// version 4 stamped every sealed request with the client's time since the
/// handshake, and answered a tampered frame with its own code (`INTEGRITY`);
/// version 3 authenticated by challenge and response and sealed every frame
/// (version 2 sent the secret itself); version 2 answered `COMPARE_SET` with
/// whether it swapped (version 1 sent one value). Two sides of different
/// versions refuse each other in `HELLO`, naming both.
pub(crate) const VERSION: u16 = 6;

/// The largest frame either side accepts before the handshake is done: a
/// client's `HELLO` is 40 bytes, the server's 68 (100 with its proof), an
/// error message a few hundred.
pub(crate) const HANDSHAKE_MAX_FRAME: usize = 512;

mod op {
    pub const HELLO: u8 = 0x01;
    pub const SET: u8 = 0x02;
    pub const GET: u8 = 0x03;
    pub const TRY_GET: u8 = 0x04;
    pub const COMPARE_SET: u8 = 0x05;
    pub const ADD: u8 = 0x06;
    pub const WAIT: u8 = 0x07;
    pub const DELETE: u8 = 0x08;
    pub const PROOF: u8 = 0x09;
    pub const SET_SESSION: u8 = 0x0a;
}

mod resp {
    pub const HELLO: u8 = 0x80;
    pub const OK: u8 = 0x81;
    pub const VALUE: u8 = 0x82;
    pub const NOT_FOUND: u8 = 0x83;
    pub const INT: u8 = 0x84;
    pub const BOOL: u8 = 0x85;
    pub const COMPARE_SET: u8 = 0x86;
    pub const TIMEOUT: u8 = 0x90;
    pub const NOT_AN_INTEGER: u8 = 0x91;
    pub const OVERFLOW: u8 = 0x92;
    pub const ERROR: u8 = 0x9f;
}

/// Codes carried by [`Response::Error`].
pub(crate) mod code {
    /// A failed handshake: a missing or different secret, a peer not
    /// allowed without a secret, or a frame that failed its tag.
    pub const AUTH: u8 = 1;
    /// A frame that is not the protocol, or another protocol version.
    pub const PROTOCOL: u8 = 2;
    /// A frame over the maximum size.
    pub const TOO_LARGE: u8 = 3;
    /// The server is shutting down.
    pub const SHUTDOWN: u8 = 4;
    /// The server already has its maximum number of connections open (or
    /// has no file descriptor left for another).
    pub const TOO_MANY_CONNECTIONS: u8 = 5;
    /// A request over a per-request limit or over the store's quota.
    pub const LIMIT: u8 = 6;
    /// A sealed frame that failed its tag, or a request stamped too long
    /// before it arrived: altered, replayed or held back on the way.
    pub const INTEGRITY: u8 = 7;
}

/// The server's per-request limits, announced in its `HELLO` so that a
/// client refuses an oversized request before sending it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// The largest frame payload, a seal's tag included.
    pub(crate) max_frame: u64,
    /// The longest key, in bytes.
    pub(crate) max_key_len: u64,
    /// The longest value, in bytes.
    pub(crate) max_value_len: u64,
    /// The most keys one request names (a `wait`).
    pub(crate) max_keys: u64,
}

/// What the server checks in each request: the limits its `HELLO`
/// announces, and the bytes of keys one request may name (not announced:
/// a client learns it from a refusal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RequestLimits {
    pub(crate) announced: Limits,
    pub(crate) max_key_bytes: u64,
}

/// A per-request limit, named alike by the server's refusals and the
/// client's own checks before sending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Limit {
    KeyLen,
    ValueLen,
    Keys,
    KeyBytes,
}

impl Limit {
    /// The server setting of this limit.
    fn option(self) -> &'static str {
        match self {
            Limit::KeyLen => "max_key_len",
            Limit::ValueLen => "max_value_len",
            Limit::Keys => "max_keys_per_request",
            Limit::KeyBytes => "max_key_bytes_per_request",
        }
    }

    /// Why `given` is refused under `max`, e.g. "a key of 9 bytes is over
    /// the server's max_key_len of 8".
    pub(crate) fn refusal(self, given: u64, max: u64) -> String {
        let what = match self {
            Limit::KeyLen => format!("a key of {given} bytes"),
            Limit::ValueLen => format!("a value of {given} bytes"),
            Limit::Keys => format!("a request naming {given} keys"),
            Limit::KeyBytes => format!("a request naming {given} bytes of keys"),
        };
        format!("{what} is over the server's {} of {max}", self.option())
    }
}

impl RequestLimits {
    fn max(&self, limit: Limit) -> u64 {
        match limit {
            Limit::KeyLen => self.announced.max_key_len,
            Limit::ValueLen => self.announced.max_value_len,
            Limit::Keys => self.announced.max_keys,
            Limit::KeyBytes => self.max_key_bytes,
        }
    }

    /// Refuses `given` when it is over `limit`.
    pub(crate) fn check(&self, limit: Limit, given: u64) -> Result<(), DecodeError> {
        let max = self.max(limit);
        if given > max {
            return Err(DecodeError::OverLimit(limit.refusal(given, max)));
        }
        Ok(())
    }
}

/// A client's request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Request {
    Hello {
        nonce: Nonce,
        /// Whether the client holds a secret (and will prove it).
        authenticate: bool,
    },
    Proof(Tag),
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
    /// A `SET` whose key the server deletes when this connection closes;
    /// `owner` names the client, so that its next connection may take the
    /// key over (answered `BOOL`: false when another client holds it).
    SetSession {
        key: String,
        value: Vec<u8>,
        owner: Owner,
    },
}

/// The length of a session key's owner: a client's random name.
pub(crate) const OWNER_LEN: usize = 16;
/// A client's random name, which its session keys are bound to.
pub(crate) type Owner = [u8; OWNER_LEN];

/// The server's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Response {
    Hello {
        nonce: Nonce,
        limits: Limits,
        /// The server's proof; present exactly when both sides hold a
        /// secret.
        proof: Option<Tag>,
    },
    Ok,
    Value(Vec<u8>),
    NotFound,
    Int(i64),
    Bool(bool),
    /// A `COMPARE_SET`'s outcome: `current` is `None` for an absent key, and
    /// is always set when `swapped`.
    CompareSet {
        swapped: bool,
        current: Option<Vec<u8>>,
    },
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

impl Request {
    /// Whether it only reads: sending it twice changes nothing.
    pub(crate) fn is_read(&self) -> bool {
        matches!(
            self,
            Request::Get { .. } | Request::TryGet { .. } | Request::Wait { .. }
        )
    }
}

impl Response {
    /// A short name for messages.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Response::Hello { .. } => "HELLO",
            Response::Ok => "OK",
            Response::Value(_) => "VALUE",
            Response::NotFound => "NOT_FOUND",
            Response::Int(_) => "INT",
            Response::Bool(_) => "BOOL",
            Response::CompareSet { .. } => "COMPARE_SET",
            Response::Timeout { .. } => "TIMEOUT",
            Response::NotAnInteger(_) => "NOT_AN_INTEGER",
            Response::Overflow(_) => "OVERFLOW",
            Response::Error { .. } => "ERROR",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        max_frame: 99,
        max_key_len: 8,
        max_value_len: 77,
        max_keys: 3,
    };

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
            nonce: [7; NONCE_LEN],
            authenticate: false,
        });
        roundtrip_req(Request::Hello {
            nonce: [0; NONCE_LEN],
            authenticate: true,
        });
        roundtrip_req(Request::Proof([9; TAG_LEN]));
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
        roundtrip_req(Request::SetSession {
            key: "s".into(),
            value: b"v".to_vec(),
            owner: [7; OWNER_LEN],
        });
    }

    #[test]
    fn responses_roundtrip() {
        for r in [
            Response::Hello {
                nonce: [1; NONCE_LEN],
                limits: LIMITS,
                proof: None,
            },
            Response::Hello {
                nonce: [2; NONCE_LEN],
                limits: LIMITS,
                proof: Some([3; TAG_LEN]),
            },
            Response::Ok,
            Response::Value(b"v".to_vec()),
            Response::NotFound,
            Response::Int(-3),
            Response::Bool(true),
            Response::CompareSet {
                swapped: true,
                current: Some(b"new".to_vec()),
            },
            Response::CompareSet {
                swapped: false,
                current: Some(Vec::new()),
            },
            Response::CompareSet {
                swapped: false,
                current: None,
            },
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
}
