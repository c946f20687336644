//! TCP store tests: real sockets on 127.0.0.1 only. `auth` has the
//! handshake's and the limits' tests, `parked` those of blocking requests. No test bounds how long anything
//! takes: [`PATIENCE`] only keeps a broken one from hanging.

mod auth;
mod parked;
#[cfg(target_os = "linux")]
mod priority;
mod sessions;

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::thread;
use std::time::Duration;

use super::wire::{self, Request, Response, code};
use super::*;
use crate::{Store, StoreError};

/// How long anything that must happen may take before a test fails: a
/// hang guard, not a bound on speed.
const PATIENCE: Duration = Duration::from_secs(10);

/// Polls `condition` until it holds; fails the test after [`PATIENCE`].
fn eventually(what: &str, condition: impl FnMut() -> bool) {
    nccl_test_support::eventually(what, PATIENCE, condition);
}

fn server() -> TcpStoreServer {
    server_with(TcpStoreServerOptions::default())
}

/// A server on 127.0.0.1 with `options`.
fn server_with(options: TcpStoreServerOptions) -> TcpStoreServer {
    TcpStoreServer::bind("127.0.0.1:0", options).unwrap()
}

/// Stops `server` and starts another at its address: binding again while
/// the old server's loops still hold the port, failing at once on any
/// other error.
fn restart(server: TcpStoreServer) -> TcpStoreServer {
    let addr = server.local_addr();
    drop(server);
    let mut restarted = None;
    eventually("the stopped server to release its port", || {
        match TcpStoreServer::bind(addr, TcpStoreServerOptions::default()) {
            Ok(server) => restarted = Some(server),
            Err(StoreError::Bind { source, .. }) if source.kind() == io::ErrorKind::AddrInUse => {}
            Err(error) => panic!("restarting the server at {addr}: {error}"),
        }
        restarted.is_some()
    });
    restarted.expect("bound once `eventually` returned")
}

/// The secret of the tests' sealed servers and their clients.
const SECRET: &[u8] = b"s3cret";

/// A server on 127.0.0.1 with `options` and [`SECRET`].
fn sealed_server(options: TcpStoreServerOptions) -> TcpStoreServer {
    server_with(options.with_secret(SECRET.to_vec()))
}

fn opts() -> TcpStoreOptions {
    TcpStoreOptions::default()
        .with_timeout(Duration::from_secs(5))
        .with_connect_timeout(Duration::from_secs(5))
        .with_io_margin(Duration::from_secs(2))
}

fn client(server: &TcpStoreServer) -> TcpStore {
    TcpStore::connect_to(server.local_addr(), opts()).unwrap()
}

/// Asserts that a plain client can still use the server.
fn assert_serves(server: &TcpStoreServer, options: TcpStoreOptions) {
    let store = TcpStore::connect_to(server.local_addr(), options).unwrap();
    let n = store.add("still-serving", 1).unwrap();
    assert!(n >= 1);
    store.set("after", b"ok").unwrap();
    assert_eq!(store.get("after", Duration::from_secs(1)).unwrap(), b"ok");
}

/// Reads one raw frame's payload (test side), with a timeout.
fn read_raw_frame(stream: &mut TcpStream) -> Option<Vec<u8>> {
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut header = [0u8; 4];
    stream.read_exact(&mut header).ok()?;
    let mut body = vec![0u8; u32::from_be_bytes(header) as usize];
    stream.read_exact(&mut body).ok()?;
    Some(body)
}

/// Asserts that the server closes `stream` (read returns 0 or a reset),
/// within [`PATIENCE`].
fn assert_closed(stream: &mut TcpStream) {
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut buf = [0u8; 16];
    match stream.read(&mut buf) {
        Ok(0) => {}
        Ok(n) => panic!("expected the connection closed, read {n} more bytes"),
        // A reset closes it too; only a read that timed out means open.
        Err(e) => assert!(
            !matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ),
            "the server kept the connection open for {PATIENCE:?}"
        ),
    }
}

/// A raw connection to `addr` that has sent a HELLO of nonce bytes
/// `nonce`, asking to `authenticate` or not.
fn connect_and_say_hello(addr: std::net::SocketAddr, nonce: u8, authenticate: bool) -> TcpStream {
    let mut raw = TcpStream::connect(addr).unwrap();
    let hello = Request::Hello {
        nonce: [nonce; wire::NONCE_LEN],
        authenticate,
    }
    .encode();
    raw.write_all(hello.as_bytes()).unwrap();
    raw
}

/// A raw connection that has done the handshake without a secret: frames
/// on it are plain.
fn raw_plain_session(addr: std::net::SocketAddr) -> TcpStream {
    let mut raw = connect_and_say_hello(addr, 1, false);
    let payload = read_raw_frame(&mut raw).expect("the server's HELLO");
    assert!(
        matches!(
            Response::decode(&payload),
            Ok(Response::Hello { proof: None, .. })
        ),
        "{payload:02x?}"
    );
    raw
}

fn expect_error_frame(stream: &mut TcpStream, want: u8) -> String {
    let payload = read_raw_frame(stream).expect("an error frame");
    match Response::decode(&payload).unwrap() {
        Response::Error { code, message } => {
            assert_eq!(code, want, "{message}");
            message
        }
        other => panic!("expected an error frame, got {other:?}"),
    }
}

#[test]
fn local_addr_reports_the_ephemeral_port() {
    let server = server();
    assert_ne!(server.local_addr().port(), 0);
    assert!(server.local_addr().ip().is_loopback());
    let any = TcpStoreServer::bind("0.0.0.0:0", TcpStoreServerOptions::default()).unwrap();
    assert!(any.connect_addr().ip().is_loopback());
    drop(any);
}

#[test]
fn two_clients_see_each_other_and_blocking_get_does_not_block_others() {
    let server = server();
    let a = client(&server);
    let b = client(&server);
    thread::scope(|s| {
        let waiter = s.spawn(|| a.get("from-b", PATIENCE));
        eventually("a's get is parked", || server.stats().parked_requests == 1);
        // Meanwhile b is served, a still waiting.
        assert_eq!(b.add("n", 1).unwrap(), 1);
        assert_eq!(b.try_get("n").unwrap().unwrap(), b"1");
        assert!(!waiter.is_finished());
        b.set("from-b", b"hi").unwrap();
        assert_eq!(waiter.join().unwrap().unwrap(), b"hi");
    });
}

#[test]
fn one_client_shared_by_threads_uses_several_connections() {
    let server = server();
    let store = client(&server);
    thread::scope(|s| {
        let waiter = s.spawn(|| store.wait(&["go"], PATIENCE));
        eventually("the wait is parked", || server.stats().parked_requests == 1);
        // The same client sets the key while another thread of it waits.
        store.set("go", b"").unwrap();
        waiter.join().unwrap().unwrap();
    });
    assert!(server.num_connections() >= 2);
}

#[test]
fn get_timeout_names_key_and_server_address() {
    let server = server();
    let store = client(&server);
    let timeout = Duration::from_millis(200);
    let err = store.get("rank1/uid", timeout).unwrap_err();
    let StoreError::Timeout { waited, .. } = err else {
        panic!("expected a timeout, got {err:?}");
    };
    assert!(waited >= timeout, "the client counts {waited:?} waited");
    let msg = err.to_string();
    assert!(err.is_timeout(), "{err:?}");
    assert!(msg.contains("\"rank1/uid\""), "{msg}");
    assert!(msg.contains(&server.local_addr().to_string()), "{msg}");
    // The connection stays usable after a timeout.
    store.set("x", b"1").unwrap();
}

#[test]
fn calls_after_server_death_fail_fast() {
    let server = server();
    let store = client(&server);
    store.set("k", b"v").unwrap();
    drop(server);
    // The pooled connection is found closed and dropped; a new one is
    // refused: no call waits for a server that is gone.
    let err = store.set("k", b"w").unwrap_err();
    assert!(matches!(err, StoreError::Connect { .. }), "{err:?}");
    let err = store.get("k", Duration::from_secs(600)).unwrap_err();
    assert!(matches!(err, StoreError::Connect { .. }), "{err:?}");
}

#[test]
fn wrong_or_missing_secret_is_refused_and_server_keeps_serving() {
    let server = sealed_server(TcpStoreServerOptions::default());
    let addr = server.local_addr();

    let err = TcpStore::connect_to(addr, opts().with_secret(b"wrong".to_vec())).unwrap_err();
    assert!(matches!(err, StoreError::Auth { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("does not match") && msg.contains("NCCL_RS_STORE_SECRET"),
        "{msg}"
    );
    assert!(!msg.contains("s3cret") && !msg.contains("wrong"), "{msg}");

    let err = TcpStore::connect_to(addr, opts()).unwrap_err();
    assert!(matches!(err, StoreError::Auth { .. }), "{err:?}");
    assert!(err.to_string().contains("presented none"), "{err}");

    // A raw client that skips HELLO is refused too.
    let mut raw = TcpStream::connect(addr).unwrap();
    let frame = Request::TryGet { key: "k".into() }.encode();
    raw.write_all(frame.as_bytes()).unwrap();
    let message = expect_error_frame(&mut raw, code::PROTOCOL);
    assert!(message.contains("first frame must be HELLO"), "{message}");
    assert_closed(&mut raw);

    assert_serves(&server, opts().with_secret(SECRET.to_vec()));
}

#[test]
fn garbage_bytes_close_only_that_connection() {
    let server = server();
    let addr = server.local_addr();
    let keeper = client(&server);
    keeper.set("before", b"1").unwrap();

    // A valid length with a payload that is not the protocol.
    let mut raw = TcpStream::connect(addr).unwrap();
    raw.write_all(&[0, 0, 0, 5, 0xde, 0xad, 0xbe, 0xef, 0x00])
        .unwrap();
    let message = expect_error_frame(&mut raw, code::PROTOCOL);
    assert!(message.contains("unknown request opcode 0xde"), "{message}");
    assert_closed(&mut raw);

    // An HTTP request: "GET " read as a length is ~1.2 GB, over the
    // handshake's cap.
    let mut raw = TcpStream::connect(addr).unwrap();
    raw.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let message = expect_error_frame(&mut raw, code::TOO_LARGE);
    assert!(
        message.contains("before the handshake") && message.contains("at most 512 bytes"),
        "{message}"
    );
    assert_closed(&mut raw);

    // A partial header, then the client goes away.
    let mut raw = TcpStream::connect(addr).unwrap();
    raw.write_all(&[0, 0]).unwrap();
    raw.shutdown(Shutdown::Write).unwrap();
    assert_closed(&mut raw);

    // A HELLO of another version (999), one of version 2, whose clients
    // sent the secret itself, one of version 3, whose sealed requests
    // carried no stamp, and one of version 4, whose stamps carried no
    // patience.
    for (version, rest) in [
        (999u16, &[][..]),
        (2, &[1, 0, 0, 0, 2, b's', b'3'][..]),
        (3, &[][..]),
        (4, &[0x42; 33][..]),
    ] {
        let mut raw = TcpStream::connect(addr).unwrap();
        let mut payload = vec![0x01];
        payload.extend_from_slice(b"NCRS");
        payload.extend_from_slice(&version.to_be_bytes());
        payload.extend_from_slice(rest);
        let mut frame = (payload.len() as u32).to_be_bytes().to_vec();
        frame.extend(payload);
        raw.write_all(&frame).unwrap();
        let message = expect_error_frame(&mut raw, code::PROTOCOL);
        assert!(
            message.contains(&format!("protocol version {version} is not supported"))
                && message.contains("version 6")
                && message.contains("same nccl-rendezvous version"),
            "{message}"
        );
    }

    // The earlier client's connection and new clients are fine.
    assert_eq!(keeper.get("before", Duration::from_secs(1)).unwrap(), b"1");
    assert_serves(&server, opts());
}

#[test]
fn every_call_after_a_server_restart_is_served_on_a_fresh_connection() {
    let server = server();
    let store = client(&server);
    // Four connections in the pool: four calls at once.
    thread::scope(|s| {
        let waiters: Vec<_> = (0..4)
            .map(|_| s.spawn(|| store.wait(&["go"], PATIENCE)))
            .collect();
        eventually("four waits parked", || server.stats().parked_requests == 4);
        client(&server).set("go", b"").unwrap();
        for waiter in waiters {
            waiter.join().unwrap().unwrap();
        }
    });
    let _restarted = restart(server);
    // Each pooled connection was closed by the old server: none of them
    // fails a call.
    store.set("k", b"v").unwrap();
    assert_eq!(store.try_get("k").unwrap().unwrap(), b"v");
    assert_eq!(store.get("k", PATIENCE).unwrap(), b"v");
    store.wait(&["k"], PATIENCE).unwrap();
    assert_eq!(store.add("n", 1).unwrap(), 1);
    assert!(store.delete("k").unwrap());
}

#[test]
fn oversized_frame_is_refused_and_server_answers_the_next_client() {
    let server = server_with(TcpStoreServerOptions::default().with_max_frame_size(1024));
    let addr = server.local_addr();

    // Declares 100 MiB and sends only the header.
    let mut raw = raw_plain_session(addr);
    raw.write_all(&(100u32 << 20).to_be_bytes()).unwrap();
    let message = expect_error_frame(&mut raw, code::TOO_LARGE);
    assert!(
        message.contains("104857600") && message.contains("1024"),
        "{message}"
    );
    assert_closed(&mut raw);

    // Well over the limit with a real body behind the header: the error
    // frame still reaches the client (the server drains before closing).
    let mut raw = raw_plain_session(addr);
    let mut frame = (256u32 << 10).to_be_bytes().to_vec();
    frame.extend(std::iter::repeat_n(0u8, 256 << 10));
    raw.set_write_timeout(Some(Duration::from_secs(3))).unwrap();
    let _ = raw.write_all(&frame);
    expect_error_frame(&mut raw, code::TOO_LARGE);
    assert_closed(&mut raw);

    // A client learns the server's limit in HELLO and refuses to send more.
    let store = TcpStore::connect_to(addr, opts()).unwrap();
    let err = store.set("big", &[7u8; 2000]).unwrap_err();
    assert!(
        matches!(err, StoreError::FrameTooLarge { max: 1024, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("\"big\""), "{err}");
    store.set("small", &[7u8; 100]).unwrap();
    assert_serves(&server, opts());
}

#[test]
fn client_refuses_an_oversized_answer() {
    let server = server();
    let writer = client(&server);
    writer.set("big", &[1u8; 4096]).unwrap();
    let reader =
        TcpStore::connect_to(server.local_addr(), opts().with_max_frame_size(1024)).unwrap();
    let err = reader.get("big", Duration::from_secs(1)).unwrap_err();
    assert!(matches!(err, StoreError::FrameTooLarge { .. }), "{err:?}");
    assert!(err.to_string().contains("answer to get \"big\""), "{err}");
    // The reader still works for small values (on a fresh connection).
    writer.set("small", b"s").unwrap();
    assert_eq!(reader.get("small", Duration::from_secs(1)).unwrap(), b"s");
}

#[test]
fn stalled_frame_body_is_dropped_after_io_timeout() {
    let server =
        server_with(TcpStoreServerOptions::default().with_io_timeout(Duration::from_millis(200)));
    let mut raw = raw_plain_session(server.local_addr());
    // A SET of key "k" and an empty value announces 10 bytes; send 6, stall.
    raw.write_all(&[0, 0, 0, 10, 0x02, 0, 0, 0, 1, b'k'])
        .unwrap();
    assert_closed(&mut raw);
    assert_serves(&server, opts());
}

#[test]
fn an_unfinished_handshake_loses_its_slot_at_the_handshake_deadline() {
    let deadline = Duration::from_millis(300);
    let server = sealed_server(TcpStoreServerOptions::default().with_handshake_timeout(deadline));
    let addr = server.local_addr();
    // Silent, half a HELLO, and a whole HELLO that never sends its PROOF.
    let mut silent = TcpStream::connect(addr).unwrap();
    let mut partial = TcpStream::connect(addr).unwrap();
    partial.write_all(&[0, 0, 0, 44, 1]).unwrap();
    let mut unproven = connect_and_say_hello(addr, 5, true);
    for raw in [&mut silent, &mut partial] {
        assert_closed(raw);
    }
    let answer = read_raw_frame(&mut unproven).expect("the server's HELLO");
    assert!(matches!(
        Response::decode(&answer),
        Ok(Response::Hello { proof: Some(_), .. })
    ));
    assert_closed(&mut unproven);
    eventually("the slots are freed", || server.num_connections() == 0);
    assert_serves(&server, opts().with_secret(SECRET.to_vec()));
}

#[test]
fn connect_retries_until_the_server_comes_up() {
    // Choose a free port up front, release it, and start the server 300 ms
    // after the client begins connecting.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let starter = thread::spawn(move || {
        thread::sleep(Duration::from_millis(300));
        TcpStoreServer::bind(("127.0.0.1", port), TcpStoreServerOptions::default()).unwrap()
    });
    let store = TcpStore::connect("127.0.0.1", port, opts().with_connect_timeout(PATIENCE));
    let server = starter.join().unwrap();
    let store = store.unwrap();
    store.set("k", b"v").unwrap();
    assert_eq!(store.get("k", Duration::from_secs(1)).unwrap(), b"v");
    drop(store);
    drop(server);
}

#[test]
fn connect_gives_up_after_the_connect_timeout() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let connect_timeout = Duration::from_millis(300);
    let err = TcpStore::connect(
        "127.0.0.1",
        port,
        opts().with_connect_timeout(connect_timeout),
    )
    .unwrap_err();
    match &err {
        StoreError::Connect {
            attempts,
            addr,
            waited,
            ..
        } => {
            assert!(*attempts > 1, "{attempts}");
            assert!(*waited >= connect_timeout, "{waited:?}");
            assert_eq!(addr, &format!("127.0.0.1:{port}"));
        }
        other => panic!("expected a connect error, got {other:?}"),
    }
    assert!(err.to_string().contains("MASTER_ADDR"), "{err}");
}

#[test]
fn talking_to_something_that_is_not_a_store_is_a_protocol_error() {
    // A fake "server" that answers HELLO with junk.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let fake = thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let _ = read_raw_frame(&mut s);
        s.write_all(&[0, 0, 0, 2, 0x77, 0x77]).unwrap();
        thread::sleep(Duration::from_millis(200));
    });
    let err = TcpStore::connect_to(addr, opts()).unwrap_err();
    assert!(matches!(err, StoreError::Protocol { .. }), "{err:?}");
    assert!(
        err.to_string().contains("unknown response opcode 0x77"),
        "{err}"
    );
    fake.join().unwrap();
}

#[test]
fn bind_conflict_is_a_clear_error() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let err = TcpStoreServer::bind(addr, TcpStoreServerOptions::default()).unwrap_err();
    assert!(matches!(err, StoreError::Bind { .. }), "{err:?}");
    assert!(err.to_string().contains(&addr.to_string()), "{err}");
    assert!(err.to_string().contains("MASTER_PORT"), "{err}");
}

#[test]
fn secrets_do_not_appear_in_debug_output() {
    let o = TcpStoreOptions::default().with_secret(b"hunter2".to_vec());
    let s = TcpStoreServerOptions::default().with_secret(b"hunter2".to_vec());
    assert!(!format!("{o:?}{s:?}").contains("hunter2"));
}

#[test]
fn hello_answer_carries_the_servers_max_frame() {
    let server = server_with(TcpStoreServerOptions::default().with_max_frame_size(4096));
    let mut raw = connect_and_say_hello(server.local_addr(), 9, false);
    let payload = read_raw_frame(&mut raw).unwrap();
    let Ok(Response::Hello { limits, proof, .. }) = Response::decode(&payload) else {
        panic!("expected HELLO, got {payload:02x?}");
    };
    assert_eq!(proof, None);
    assert_eq!(
        limits,
        wire::Limits {
            max_frame: 4096,
            max_key_len: 8192,
            max_value_len: 8 << 20,
            max_keys: 128 << 10,
        }
    );
}

#[test]
fn a_frozen_server_is_tried_again_until_the_connect_timeout() {
    // A listener nobody accepts on: the kernel takes connections into its
    // backlog and nothing ever answers, as with a stopped (SIGSTOP) server.
    let frozen = TcpListener::bind("127.0.0.1:0").unwrap();
    let err = TcpStore::connect_to(
        frozen.local_addr().unwrap(),
        opts()
            .with_io_margin(Duration::from_millis(100))
            .with_connect_timeout(Duration::from_secs(1)),
    )
    .unwrap_err();
    assert!(matches!(err, StoreError::Unresponsive { .. }), "{err:?}");
    frozen.set_nonblocking(true).unwrap();
    let attempts = frozen.incoming().map_while(Result::ok).count();
    assert!(attempts > 1, "the handshake was tried {attempts} time(s)");
}
