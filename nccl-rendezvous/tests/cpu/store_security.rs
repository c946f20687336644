//! The TCP store against an attacker on the path (CPU only, 127.0.0.1): a
//! relay that captures a whole authenticated session, then replays the
//! client's side to the server and the server's side to a client, and
//! alters, duplicates or injects frames in a live session. It never reads
//! a value, never plants one, and is refused every time. Also: the
//! handshake's fuzz entry point over seeded random inputs.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use nccl_rendezvous::fuzzing;
use nccl_rendezvous::{
    Store, StoreError, TcpStore, TcpStoreOptions, TcpStoreServer, TcpStoreServerOptions,
};

const SECRET: &[u8] = b"team-secret";
const PATIENCE: Duration = Duration::from_secs(10);

fn options() -> TcpStoreOptions {
    TcpStoreOptions::default()
        .with_secret(SECRET.to_vec())
        .with_timeout(PATIENCE)
        .with_connect_timeout(Duration::from_secs(2))
        .with_io_margin(Duration::from_secs(2))
}

fn server() -> TcpStoreServer {
    server_with(TcpStoreServerOptions::default())
}

/// A server on 127.0.0.1 with `options` and [`SECRET`].
fn server_with(options: TcpStoreServerOptions) -> TcpStoreServer {
    TcpStoreServer::bind("127.0.0.1:0", options.with_secret(SECRET.to_vec()))
        .expect("a server on 127.0.0.1")
}

/// What a relay changes in the client's bytes on their way to the server.
#[derive(Clone, Copy, Debug)]
enum Meddle {
    /// Forward every byte as it is, and record them.
    Nothing,
    /// Flip the last bit of the client's `n`th write (0: its HELLO).
    FlipLastBitOfWrite(usize),
    /// Send the client's `n`th write twice.
    DuplicateWrite(usize),
    /// Send these bytes before the client's `n`th write.
    InjectBeforeWrite(usize, &'static [u8]),
    /// Flip the last bit of the server's `n`th write to the client (0: its
    /// HELLO, 1: its confirmation, 2: its answer to the first request).
    FlipLastBitOfAnswer(usize),
    /// Hold the client's `n`th write back this long, then send it.
    DelayWrite(usize, Duration),
}

/// One relayed connection: what the client sent, then what the server sent.
type Captured = (Vec<u8>, Vec<u8>);

/// A relay between clients and `target`: every accepted connection is
/// forwarded to the target, the client's writes changed as `meddle` says.
/// Returns its address and, per connection, what each side sent.
fn relay(target: SocketAddr, meddle: Meddle) -> (SocketAddr, mpsc::Receiver<Captured>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (captured, capture) = mpsc::channel();
    thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { return };
            let server = TcpStream::connect(target).unwrap();
            let captured = captured.clone();
            thread::spawn(move || {
                let to_client = {
                    let (server, client) =
                        (server.try_clone().unwrap(), client.try_clone().unwrap());
                    thread::spawn(move || {
                        pump(server, client, |write, bytes| match meddle {
                            Meddle::FlipLastBitOfAnswer(n) if n == write => {
                                let mut bytes = bytes.to_vec();
                                *bytes.last_mut().unwrap() ^= 1;
                                vec![bytes]
                            }
                            _ => vec![bytes.to_vec()],
                        })
                    })
                };
                let from_client = pump(client, server, |write, bytes| match meddle {
                    Meddle::FlipLastBitOfWrite(n) if n == write => {
                        let mut bytes = bytes.to_vec();
                        *bytes.last_mut().unwrap() ^= 1;
                        vec![bytes]
                    }
                    Meddle::DuplicateWrite(n) if n == write => vec![bytes.to_vec(), bytes.to_vec()],
                    Meddle::InjectBeforeWrite(n, extra) if n == write => {
                        vec![extra.to_vec(), bytes.to_vec()]
                    }
                    Meddle::DelayWrite(n, delay) if n == write => {
                        thread::sleep(delay);
                        vec![bytes.to_vec()]
                    }
                    _ => vec![bytes.to_vec()],
                });
                let to_client = to_client.join().unwrap();
                let _ = captured.send((from_client, to_client));
            });
        }
    });
    (addr, capture)
}

/// Copies `from` to `to` (each read passed through `change`, numbered)
/// until `from` ends; returns what was read, unchanged.
fn pump(
    mut from: TcpStream,
    mut to: TcpStream,
    change: impl Fn(usize, &[u8]) -> Vec<Vec<u8>>,
) -> Vec<u8> {
    let mut seen = Vec::new();
    let mut buf = [0u8; 65536];
    let mut write = 0;
    from.set_read_timeout(Some(PATIENCE)).unwrap();
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 {
            break;
        }
        seen.extend_from_slice(&buf[..n]);
        for piece in change(write, &buf[..n]) {
            if to.write_all(&piece).is_err() {
                return seen;
            }
        }
        write += 1;
    }
    let _ = to.shutdown(Shutdown::Write);
    seen
}

/// Sends `bytes` to `addr` as a client would, and returns everything the
/// peer sends back until it closes (or [`PATIENCE`] passes).
fn replay_to(addr: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut stream = TcpStream::connect(addr).unwrap();
    let _ = stream.write_all(bytes);
    let _ = stream.shutdown(Shutdown::Write);
    read_until_closed(&mut stream)
}

fn read_until_closed(stream: &mut TcpStream) -> Vec<u8> {
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return got,
        }
    }
}

/// The bytes (the client's, the server's) of a session through a relay
/// to `server` in which a client does `requests`.
fn captured_session(server: &TcpStoreServer, requests: impl FnOnce(&TcpStore)) -> Captured {
    let (relay_addr, capture) = relay(server.local_addr(), Meddle::Nothing);
    let client = TcpStore::connect_to(relay_addr, options()).unwrap();
    requests(&client);
    drop(client);
    capture.recv_timeout(PATIENCE).unwrap()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn a_captured_session_replayed_to_the_server_reads_nothing_and_plants_nothing() {
    let server = server();
    // The real client's session through the relay: it plants the old id.
    let (client_bytes, server_bytes) = captured_session(&server, |client| {
        client.set("uid", b"stale-unique-id").unwrap();
        assert_eq!(client.get("uid", PATIENCE).unwrap(), b"stale-unique-id");
    });
    assert!(!contains(&client_bytes, SECRET) && !contains(&server_bytes, SECRET));
    // Authenticated, not encrypted: the relay saw the value go by.
    assert!(contains(&server_bytes, b"stale-unique-id"));

    // The job moves on to a new id.
    let direct = TcpStore::connect_to(server.local_addr(), options()).unwrap();
    direct.set("uid", b"fresh-unique-id").unwrap();

    // Replayed whole, and cut after the handshake's first two frames.
    for bytes in [&client_bytes[..], &client_bytes[..client_bytes.len() / 2]] {
        let answer = replay_to(server.local_addr(), bytes);
        assert!(
            !contains(&answer, b"fresh-unique-id"),
            "the replay read the value"
        );
        assert!(
            contains(&answer, b"does not match"),
            "refused: {answer:02x?}"
        );
    }
    assert_eq!(
        direct.get("uid", PATIENCE).unwrap(),
        b"fresh-unique-id",
        "the replayed set planted nothing"
    );
}

#[test]
fn a_captured_server_side_replayed_to_a_client_is_refused() {
    let server = server();
    let (_, server_bytes) = captured_session(&server, |client| client.set("uid", b"real").unwrap());

    // A fake server that answers every client with the captured bytes.
    let fake = TcpListener::bind("127.0.0.1:0").unwrap();
    let fake_addr = fake.local_addr().unwrap();
    let replayer = thread::spawn(move || {
        let (mut victim, _) = fake.accept().unwrap();
        let _ = victim.write_all(&server_bytes);
        read_until_closed(&mut victim)
    });
    let err = TcpStore::connect_to(fake_addr, options()).unwrap_err();
    assert!(matches!(err, StoreError::Auth { .. }), "{err:?}");
    assert!(
        err.to_string().contains("server's proof does not match"),
        "{err}"
    );
    // The victim never proved anything to the fake server.
    let sent = replayer.join().unwrap();
    assert_eq!(sent.len(), 4 + 40, "only its HELLO: {sent:02x?}");
}

#[test]
fn altered_duplicated_or_injected_frames_in_a_live_session_are_refused_unapplied() {
    let server = server();
    let direct = TcpStore::connect_to(server.local_addr(), options()).unwrap();
    // Writes 0 and 1 are the HELLO and the PROOF; write 2 is the first
    // request (a set), write 3 the second.
    let cases = [
        Meddle::FlipLastBitOfWrite(0),
        Meddle::FlipLastBitOfWrite(1),
        Meddle::FlipLastBitOfWrite(2),
        Meddle::DuplicateWrite(2),
        Meddle::InjectBeforeWrite(2, &[0, 0, 0, 5, 0x04, 0, 0, 0, 0]),
        Meddle::FlipLastBitOfAnswer(0),
        Meddle::FlipLastBitOfAnswer(1),
        Meddle::FlipLastBitOfAnswer(2),
    ];
    for meddle in cases {
        direct.set("uid", b"real").unwrap();
        let (relay_addr, _capture) = relay(server.local_addr(), meddle);
        let outcome = TcpStore::connect_to(relay_addr, options()).and_then(|client| {
            client.set("uid", b"planted")?;
            client.set("other", b"x")
        });
        let err = outcome.expect_err(&format!("{meddle:?} went unnoticed"));
        assert!(
            matches!(
                err,
                StoreError::Auth { .. }
                    | StoreError::Integrity { .. }
                    | StoreError::ConnectionClosed { .. }
            ),
            "{meddle:?}: {err:?}"
        );
        let uid = direct.get("uid", PATIENCE).unwrap();
        match meddle {
            // The set itself arrived intact; the frame after it did not.
            Meddle::DuplicateWrite(_) => assert_eq!(uid, b"planted", "{meddle:?}"),
            // The set was applied; its answer was altered on the way back,
            // and the client noticed.
            Meddle::FlipLastBitOfAnswer(2) => {
                assert_eq!(uid, b"planted", "{meddle:?}");
                assert!(
                    matches!(err, StoreError::Integrity { .. }),
                    "{meddle:?}: {err:?}"
                );
            }
            _ => assert_eq!(uid, b"real", "{meddle:?}: a tampered frame was applied"),
        }
        assert_eq!(direct.try_get("other").unwrap(), None, "{meddle:?}");
    }
}

#[test]
fn handshake_fuzzing_never_authenticates_without_the_secret() {
    const INPUTS: usize = 20_000;
    let samples = fuzzing::handshake_samples();
    let mut total = fuzzing::HandshakeReport::default();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for i in 0..INPUTS {
        let mut input = samples[i % samples.len()].clone();
        input[0] = next() as u8;
        for _ in 0..next() % 4 {
            let at = (next() as usize) % input.len();
            match next() % 3 {
                0 => input[at] = next() as u8,
                1 => input.truncate(at.max(1)),
                _ => input.insert(at.max(1), next() as u8),
            }
        }
        let report =
            fuzzing::handshake(&input).unwrap_or_else(|e| panic!("{e}; input {input:02x?}"));
        total.server_sessions += report.server_sessions;
        total.client_sessions += report.client_sessions;
        total.frames_written += report.frames_written;
        total.refusals += report.refusals;
    }
    // The inputs reach every outcome: plain sessions, refusals, answers.
    assert!(
        total.server_sessions > 0 && total.client_sessions > 0,
        "{total:?}"
    );
    assert!(
        total.refusals > INPUTS / 10 && total.frames_written > INPUTS,
        "{total:?}"
    );
}

/// A client whose first set a relay holds back for five times `margin`
/// gives up after `margin`; a newer value lands over another connection,
/// and the server, once the relay releases the stale set, refuses it
/// saying `why` and keeps the newer value.
fn a_held_back_set_is_refused_unapplied(server: &TcpStoreServer, margin: Duration, why: &[u8]) {
    let direct = TcpStore::connect_to(server.local_addr(), options()).unwrap();
    direct.set("uid", b"first").unwrap();
    // Write 2 is the client's first request.
    let (relay_addr, capture) = relay(server.local_addr(), Meddle::DelayWrite(2, margin * 5));
    let late = TcpStore::connect_to(relay_addr, options().with_io_margin(margin)).unwrap();
    let err = late.set("uid", b"stale").unwrap_err();
    assert!(matches!(err, StoreError::Unresponsive { .. }), "{err:?}");
    direct.set("uid", b"fresh").unwrap();
    drop(late);
    // The relay's connection ends once the server has had the held-back
    // set and closed.
    let (_, server_side) = capture.recv_timeout(PATIENCE * 3).unwrap();
    assert!(
        contains(&server_side, why),
        "the server says why it refused: {server_side:02x?}"
    );
    assert_eq!(
        direct.get("uid", PATIENCE).unwrap(),
        b"fresh",
        "the held-back set rolled the value back"
    );
}

#[test]
fn a_set_a_relay_holds_back_past_the_io_timeout_is_refused_unapplied() {
    // The relay releases the set long after the server's io_timeout.
    let io_timeout = Duration::from_millis(300);
    let server = server_with(TcpStoreServerOptions::default().with_io_timeout(io_timeout));
    a_held_back_set_is_refused_unapplied(&server, io_timeout, b"held back");
}

#[test]
fn a_set_held_back_past_its_clients_patience_is_refused_unapplied_within_io_timeout() {
    // The server's io_timeout is its default (30 s); the client gives up
    // after 300 ms, and the relay releases the set after 1.5 s, well
    // within io_timeout, after the client wrote again on another
    // connection.
    a_held_back_set_is_refused_unapplied(
        &server(),
        Duration::from_millis(300),
        b"its client waits",
    );
}

#[test]
fn a_request_altered_on_the_way_is_an_integrity_error_not_a_wrong_secret() {
    let server = server();
    let (relay_addr, _capture) = relay(server.local_addr(), Meddle::FlipLastBitOfWrite(2));
    let client = TcpStore::connect_to(relay_addr, options()).unwrap();
    let err = client.set("uid", b"altered").unwrap_err();
    assert!(matches!(err, StoreError::Integrity { .. }), "{err:?}");
    assert!(!err.to_string().contains("same shared secret"), "{err}");
}
