//! The store_abuse tests' tools: the wire protocol written out by hand
//! (so the tests also pin the format down), raw connections, a seeded
//! random generator, and checks that the server still serves.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use nccl_rendezvous::{Store, TcpStore, TcpStoreOptions, TcpStoreServer, TcpStoreServerOptions};

/// How long any "eventually" condition may take on a loaded machine.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// Request opcodes and response codes of the wire protocol, written out
/// here so the tests also pin the format down.
const HELLO: u8 = 0x01;
pub const SET: u8 = 0x02;
const GET: u8 = 0x03;
const WAIT: u8 = 0x07;
const RESP_HELLO: u8 = 0x80;
pub const RESP_OK: u8 = 0x81;
const RESP_ERROR: u8 = 0x9f;
pub const CODE_PROTOCOL: u8 = 2;
pub const CODE_TOO_LARGE: u8 = 3;
pub const CODE_TOO_MANY_CONNECTIONS: u8 = 5;
pub const CODE_LIMIT: u8 = 6;

/// A tiny deterministic generator (xorshift64*): no `rand` dependency.
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        // A zero state would stay zero.
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    /// The next number.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    /// A random byte.
    pub fn byte(&mut self) -> u8 {
        self.next().to_le_bytes()[0]
    }
    /// `n` random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.byte()).collect()
    }
}

/// A server on an ephemeral port of 127.0.0.1.
pub fn bind(options: TcpStoreServerOptions) -> TcpStoreServer {
    TcpStoreServer::bind("127.0.0.1:0", options).expect("binding a server on 127.0.0.1")
}

/// Client options patient enough for a loaded machine.
pub fn client_options() -> TcpStoreOptions {
    TcpStoreOptions::default()
        .with_timeout(PATIENCE)
        .with_connect_timeout(PATIENCE)
        .with_io_margin(PATIENCE)
}

/// A good client of `server`.
pub fn connect(server: &TcpStoreServer) -> TcpStore {
    TcpStore::connect_to(server.local_addr(), client_options()).expect("a good client connects")
}

/// Polls `condition` until it holds; fails the test after [`PATIENCE`].
pub fn eventually(what: &str, condition: impl FnMut() -> bool) {
    nccl_test_support::eventually(what, PATIENCE, condition);
}

/// Waits until the server's connection count is `baseline`.
pub fn assert_connections_return_to(server: &TcpStoreServer, baseline: usize) {
    eventually(
        &format!("the server's connections return to {baseline}"),
        || server.num_connections() == baseline,
    );
}

/// Waits until the server has accepted every connection made so far, then
/// until its connection count is `baseline`. A connection the accept loop
/// has not taken yet is not counted at all, so polling the count alone could
/// pass too early; the accept queue is first in, first out, so once a new
/// client has been served, every earlier connection has been accepted.
pub fn assert_settles_to(server: &TcpStoreServer, baseline: usize) {
    assert_serves(server);
    assert_connections_return_to(server, baseline);
}

/// A fresh client can still use the server: set, get and add.
pub fn assert_serves(server: &TcpStoreServer) {
    let store = connect(server);
    store.set("probe/value", b"ok").unwrap();
    assert_eq!(store.get("probe/value", PATIENCE).unwrap(), b"ok");
    let before = store.add("probe/count", 0).unwrap();
    assert_eq!(store.add("probe/count", 1).unwrap(), before + 1);
}

/// Asserts that `server` serves, then that it closes every connection once
/// `last`, its last client, is gone.
pub fn assert_serves_then_closes(server: &TcpStoreServer, last: TcpStore) {
    assert_serves(server);
    drop(last);
    assert_connections_return_to(server, 0);
}

/// A frame: the big-endian payload length, then the payload.
pub fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = u32::try_from(payload.len()).unwrap().to_be_bytes().to_vec();
    out.extend_from_slice(payload);
    out
}

/// A length-prefixed field.
fn field(bytes: &[u8]) -> Vec<u8> {
    let mut out = u32::try_from(bytes.len()).unwrap().to_be_bytes().to_vec();
    out.extend_from_slice(bytes);
    out
}

/// A `set` request frame.
pub fn set_frame(key: &str, value: &[u8]) -> Vec<u8> {
    frame(&[&[SET][..], &field(key.as_bytes()), &field(value)].concat())
}

/// A `get` request frame.
pub fn get_frame(key: &str, timeout: Duration) -> Vec<u8> {
    let ms = u64::try_from(timeout.as_millis()).unwrap().to_be_bytes();
    frame(&[&[GET][..], &field(key.as_bytes()), &ms].concat())
}

/// A `wait` request frame.
pub fn wait_frame(keys: &[&str], timeout: Duration) -> Vec<u8> {
    let ms = u64::try_from(timeout.as_millis()).unwrap().to_be_bytes();
    let mut payload = vec![WAIT];
    payload.extend_from_slice(&ms);
    payload.extend_from_slice(&u32::try_from(keys.len()).unwrap().to_be_bytes());
    for key in keys {
        payload.extend_from_slice(&field(key.as_bytes()));
    }
    frame(&payload)
}

/// A connection that speaks no protocol by itself.
pub fn raw_connect(addr: SocketAddr) -> TcpStream {
    TcpStream::connect(addr).expect("a raw connection to the server")
}

/// The wire protocol's version, in both sides' `HELLO`.
const VERSION: u16 = 6;

/// A client's `HELLO` without a secret: magic, [`VERSION`], a nonce, no
/// secret.
fn hello() -> Vec<u8> {
    let mut hello = vec![HELLO];
    hello.extend_from_slice(b"NCRS");
    hello.extend_from_slice(&VERSION.to_be_bytes());
    hello.extend_from_slice(&[0x42; 32]);
    hello.push(0);
    frame(&hello)
}

/// Sends `HELLO` on `raw` and reads the first 4 + 68 bytes of the answer:
/// the server's `HELLO` (its version, nonce, four limits and no proof),
/// unless it refused.
fn exchange_hellos(raw: &mut TcpStream) -> [u8; 4 + 68] {
    raw.write_all(&hello()).expect("sending HELLO");
    raw.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut answer = [0u8; 4 + 68];
    raw.read_exact(&mut answer).expect("the server's HELLO");
    raw.set_read_timeout(None).unwrap();
    answer
}

/// Does the handshake of a client without a secret on `raw`: frames after
/// it are plain requests.
pub fn handshake(raw: &mut TcpStream) {
    let answer = exchange_hellos(raw);
    assert_eq!(answer[..4], 68u32.to_be_bytes(), "{answer:02x?}");
    assert_eq!(
        answer[4..7],
        [RESP_HELLO, 0, VERSION as u8],
        "{answer:02x?}"
    );
    assert_eq!(answer[4 + 67], 0, "no proof without a secret");
}

/// A raw connection that has done the handshake. Like a real client, it
/// tries again while the server refuses it for too many connections in
/// their handshake at once.
pub fn session_connect(addr: SocketAddr) -> TcpStream {
    let start = Instant::now();
    loop {
        let mut raw = raw_connect(addr);
        let answer = exchange_hellos(&mut raw);
        if answer[4..6] != [RESP_ERROR, CODE_TOO_MANY_CONNECTIONS] {
            assert_eq!(
                answer[4..7],
                [RESP_HELLO, 0, VERSION as u8],
                "{answer:02x?}"
            );
            return raw;
        }
        assert!(start.elapsed() < PATIENCE, "refused for {PATIENCE:?}");
        thread::sleep(Duration::from_millis(10));
    }
}

/// Reads what the server sends until it closes the connection, and splits
/// it into response frames. Fails the test when the server keeps the
/// connection open past [`PATIENCE`], or sends anything but whole frames of
/// response opcodes.
pub fn answers_until_closed(stream: &mut TcpStream) -> Vec<Vec<u8>> {
    let start = Instant::now();
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = PATIENCE.saturating_sub(start.elapsed());
        assert!(
            !left.is_zero(),
            "the server did not close the connection within {PATIENCE:?}"
        );
        stream.set_read_timeout(Some(left)).unwrap();
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                panic!("the server did not close the connection within {PATIENCE:?}")
            }
            // A reset also ends the connection (we may have sent bytes the
            // server never read).
            Err(_) => break,
        }
    }
    let mut frames = Vec::new();
    let mut rest = bytes.as_slice();
    while !rest.is_empty() {
        assert!(
            rest.len() >= 5,
            "a partial frame from the server: {rest:02x?}"
        );
        let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
        assert!(
            rest.len() >= 4 + len,
            "a frame cut short by the server: {rest:02x?}"
        );
        let payload = rest[4..4 + len].to_vec();
        assert!(
            (0x80..=0x9f).contains(&payload[0]),
            "the server sent opcode 0x{:02x}, not a response",
            payload[0]
        );
        frames.push(payload);
        rest = &rest[4 + len..];
    }
    frames
}

/// The code and message of an error frame's payload.
fn error_frame(payload: &[u8]) -> (u8, String) {
    assert_eq!(
        payload[0], RESP_ERROR,
        "expected an error frame, got {payload:02x?}"
    );
    let len = u32::from_be_bytes(payload[2..6].try_into().unwrap()) as usize;
    assert_eq!(payload.len(), 6 + len, "error frame length: {payload:02x?}");
    (
        payload[1],
        String::from_utf8(payload[6..].to_vec()).unwrap(),
    )
}

/// Expects exactly one error frame with `code` before the server closes,
/// and returns its message.
pub fn expect_refusal(stream: &mut TcpStream, code: u8) -> String {
    let answers = answers_until_closed(stream);
    assert_eq!(
        answers.len(),
        1,
        "expected one error frame, got {answers:02x?}"
    );
    let (got, message) = error_frame(&answers[0]);
    assert_eq!(got, code, "error code; message: {message}");
    message
}
