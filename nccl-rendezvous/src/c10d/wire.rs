//! The bytes of torch's c10d TCPStore protocol, as its sources (torch 2.x,
//! `torch/csrc/distributed/c10d/`) define them; written here from reading
//! them.
//!
//! A request is one query-type byte (`enum class QueryType : uint8_t` in
//! `TCPStoreBackend.hpp`) followed by its arguments; the client builds it in
//! `SendBuffer` (`TCPStore.cpp`). Arguments are:
//!
//! * a string or byte vector: its length as a `uint64_t`, then the bytes
//!   (`SendBuffer::appendString` / `appendBytes`, read by
//!   `tcputil::recvString` / `recvVector` in `Utils.hpp`);
//! * a number: its bytes in host order (`SendBuffer::appendValue`), which
//!   is little-endian on every platform torch's TCPStore runs on (x86-64,
//!   aarch64); this client always sends and reads little-endian;
//! * a key: a string holding `/` and then the key, because torch's client
//!   puts its `keyPrefix_` (`"/"`) before every key it sends, so a torch
//!   rank's `store.get("k")` reads what this client's `set("k", ..)` wrote;
//! * a key list (CHECK, WAIT): the count as a `size_t` (`uint64_t`), then
//!   each key as a key.
//!
//! | query | code | arguments | reply |
//! |---|---|---|---|
//! | VALIDATE | 0 | `u32` magic `0x3C85F7CE` | none |
//! | SET | 1 | key, value | none |
//! | COMPARE_SET | 2 | key, expected, desired | bytes: the value afterwards (see below) |
//! | GET | 3 | key | bytes (legacy server: closes the connection if absent; libuv: empty) |
//! | ADD | 4 | key, `i64` delta | `i64`: the new value |
//! | CHECK | 5 | key list | `u8`: 0 READY, 1 NOT_READY |
//! | WAIT | 6 | key list | `u8` 0 STOP_WAITING, once every key is set |
//! | GETNUMKEYS | 7 | none | `i64` (not used here) |
//! | DELETE_KEY | 8 | key | `i64`: how many keys were removed (0 or 1) |
//! | APPEND | 9 | key, value | none (not used here) |
//! | MULTI_GET | 10 | key list | that many byte vectors (not used here) |
//! | MULTI_SET | 11 | `i64` count, then key and value pairs (not used here) | none |
//! | CANCEL_WAIT | 12 | none | `u8` 1 WAIT_CANCELED, possibly after a late STOP_WAITING |
//! | PING | 13 | `u32` nonce | `u32`: the same nonce |
//!
//! A new connection's first query must be VALIDATE (`validateHandler` in
//! `TCPStoreBackend.cpp`, `parse_validate_command` in
//! `TCPStoreLibUvBackend.cpp`); torch's client then PINGs with its pid
//! (`TCPStore::ping`). Counters are decimal text: ADD parses the stored
//! value with `std::stoll` and stores `std::to_string` of the sum. Torch's
//! libuv server refuses a key longer than 8 KiB, a value longer than 8 MiB
//! and a key list longer than 128 Ki keys by closing the connection
//! (`MAX_STRING_LEN`, `MAX_PAYLOAD_LEN`, `MAX_KEY_COUNT`), so the client
//! refuses them before sending.

use std::io::{self, Read};

/// The magic number of the VALIDATE query (`validationMagicNumber`).
pub(super) const VALIDATION_MAGIC: u32 = 0x3C85_F7CE;

/// What torch's client puts before every key on the wire (`keyPrefix_`).
const KEY_PREFIX: &str = "/";
/// The longest key this client sends: torch's libuv server accepts
/// strings of at most 8 KiB (`MAX_STRING_LEN`), the prefix included.
pub(super) const MAX_KEY_LEN: usize = 8 * 1024 - KEY_PREFIX.len();
/// The longest value torch's libuv server accepts (`MAX_PAYLOAD_LEN`).
pub(super) const MAX_VALUE_LEN: usize = 8 * 1024 * 1024;
/// The most keys in one CHECK or WAIT torch's libuv server accepts
/// (`MAX_KEY_COUNT`).
pub(super) const MAX_KEY_COUNT: usize = 128 * 1024;
/// The longest value this client reads back: above torch's own limit, so
/// that a value the legacy server holds still reads, but bounded, so that
/// a peer that is not a c10d store cannot make it allocate without limit.
pub(super) const MAX_REPLY_LEN: u64 = 64 * 1024 * 1024;

/// Query-type bytes (`enum class QueryType : uint8_t`), those this client
/// sends.
mod query {
    pub(super) const VALIDATE: u8 = 0;
    pub(super) const SET: u8 = 1;
    pub(super) const COMPARE_SET: u8 = 2;
    pub(super) const GET: u8 = 3;
    pub(super) const ADD: u8 = 4;
    pub(super) const CHECK: u8 = 5;
    pub(super) const WAIT: u8 = 6;
    pub(super) const DELETE_KEY: u8 = 8;
    pub(super) const CANCEL_WAIT: u8 = 12;
    pub(super) const PING: u8 = 13;
}

/// One request, borrowed from the caller's arguments.
#[derive(Debug, Clone, Copy)]
pub(super) enum Request<'a> {
    Validate,
    Ping {
        nonce: u32,
    },
    Set {
        key: &'a str,
        value: &'a [u8],
    },
    CompareSet {
        key: &'a str,
        expected: &'a [u8],
        desired: &'a [u8],
    },
    Get {
        key: &'a str,
    },
    Add {
        key: &'a str,
        delta: i64,
    },
    Check {
        keys: &'a [&'a str],
    },
    Wait {
        keys: &'a [&'a str],
    },
    CancelWait,
    DeleteKey {
        key: &'a str,
    },
}

impl Request<'_> {
    /// The request's bytes, as torch's `SendBuffer` would send them.
    pub(super) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(32);
        match *self {
            Request::Validate => {
                out.push(query::VALIDATE);
                out.extend_from_slice(&VALIDATION_MAGIC.to_le_bytes());
            }
            Request::Ping { nonce } => {
                out.push(query::PING);
                out.extend_from_slice(&nonce.to_le_bytes());
            }
            Request::Set { key, value } => {
                out.push(query::SET);
                put_key(&mut out, key);
                put_bytes(&mut out, value);
            }
            Request::CompareSet {
                key,
                expected,
                desired,
            } => {
                out.push(query::COMPARE_SET);
                put_key(&mut out, key);
                put_bytes(&mut out, expected);
                put_bytes(&mut out, desired);
            }
            Request::Get { key } => {
                out.push(query::GET);
                put_key(&mut out, key);
            }
            Request::Add { key, delta } => {
                out.push(query::ADD);
                put_key(&mut out, key);
                out.extend_from_slice(&delta.to_le_bytes());
            }
            Request::Check { keys } => {
                out.push(query::CHECK);
                put_keys(&mut out, keys);
            }
            Request::Wait { keys } => {
                out.push(query::WAIT);
                put_keys(&mut out, keys);
            }
            Request::CancelWait => out.push(query::CANCEL_WAIT),
            Request::DeleteKey { key } => {
                out.push(query::DELETE_KEY);
                put_key(&mut out, key);
            }
        }
        out
    }
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    out.extend_from_slice(bytes);
}

fn put_key(out: &mut Vec<u8>, key: &str) {
    out.extend_from_slice(&((KEY_PREFIX.len() + key.len()) as u64).to_le_bytes());
    out.extend_from_slice(KEY_PREFIX.as_bytes());
    out.extend_from_slice(key.as_bytes());
}

fn put_keys(out: &mut Vec<u8>, keys: &[&str]) {
    out.extend_from_slice(&(keys.len() as u64).to_le_bytes());
    for key in keys {
        put_key(out, key);
    }
}

/// Why a reply could not be read.
#[derive(Debug)]
pub(super) enum ReadError {
    /// The socket failed, timed out or closed.
    Io(io::Error),
    /// The bytes are not a reply of this protocol.
    Malformed(String),
}

impl From<io::Error> for ReadError {
    fn from(e: io::Error) -> Self {
        ReadError::Io(e)
    }
}

/// CHECK's reply (`CheckResponseType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CheckReply {
    Ready,
    NotReady,
}

/// WAIT's and CANCEL_WAIT's reply (`WaitResponseType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WaitReply {
    StopWaiting,
    WaitCanceled,
}

fn read_array<const N: usize>(from: &mut impl Read) -> Result<[u8; N], ReadError> {
    let mut bytes = [0u8; N];
    from.read_exact(&mut bytes)?;
    Ok(bytes)
}

/// A `u32` (PING's echo).
pub(super) fn read_u32(from: &mut impl Read) -> Result<u32, ReadError> {
    Ok(u32::from_le_bytes(read_array(from)?))
}

/// An `i64` (ADD's new value, DELETE_KEY's count).
pub(super) fn read_i64(from: &mut impl Read) -> Result<i64, ReadError> {
    Ok(i64::from_le_bytes(read_array(from)?))
}

/// A byte vector (GET's and COMPARE_SET's value), at most [`MAX_REPLY_LEN`]
/// long.
pub(super) fn read_bytes(from: &mut impl Read) -> Result<Vec<u8>, ReadError> {
    let len = u64::from_le_bytes(read_array(from)?);
    if len > MAX_REPLY_LEN {
        return Err(ReadError::Malformed(format!(
            "a value of {len} bytes announced, above the {MAX_REPLY_LEN} bytes this client reads"
        )));
    }
    let mut value = Vec::new();
    let read = from.by_ref().take(len).read_to_end(&mut value)?;
    if (read as u64) < len {
        return Err(ReadError::Io(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("the connection ended after {read} of {len} bytes of a value"),
        )));
    }
    Ok(value)
}

/// CHECK's reply byte.
pub(super) fn read_check(from: &mut impl Read) -> Result<CheckReply, ReadError> {
    match read_array::<1>(from)?[0] {
        0 => Ok(CheckReply::Ready),
        1 => Ok(CheckReply::NotReady),
        other => Err(ReadError::Malformed(format!(
            "CHECK answered {other}, expected 0 (READY) or 1 (NOT_READY)"
        ))),
    }
}

/// WAIT's or CANCEL_WAIT's reply byte.
pub(super) fn read_wait(from: &mut impl Read) -> Result<WaitReply, ReadError> {
    match read_array::<1>(from)?[0] {
        0 => Ok(WaitReply::StopWaiting),
        1 => Ok(WaitReply::WaitCanceled),
        other => Err(ReadError::Malformed(format!(
            "WAIT answered {other}, expected 0 (STOP_WAITING) or 1 (WAIT_CANCELED)"
        ))),
    }
}

#[cfg(test)]
mod tests;
