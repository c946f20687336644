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
//!
//! This module holds the messages ([`Request`], [`Response`]) and their
//! opcodes; `encode` builds frames, `decode` parses them, and `stream`
//! reads and writes them within the size and time limits.

mod decode;
mod encode;
mod stream;

use std::time::Duration;

pub(crate) use encode::Frame;
pub(crate) use stream::{
    FrameError, FrameSource, FrameTimeouts, read_frame, write_frame, write_frame_within,
};

/// Identifies the protocol in `HELLO`.
pub(crate) const MAGIC: [u8; 4] = *b"NCRS";
/// The protocol version in `HELLO`. Version 2 answers `COMPARE_SET` with
/// whether it swapped and the current value (version 1 sent one value).
pub(crate) const VERSION: u16 = 2;

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
    pub const COMPARE_SET: u8 = 0x86;
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
