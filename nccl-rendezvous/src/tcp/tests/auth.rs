//! The handshake's refusals, the per-request limits and the quota, on real
//! sockets of 127.0.0.1.

use std::io::Write;
use std::net::TcpStream;
use std::thread;
use std::time::Duration;

use super::{
    PATIENCE, SECRET, expect_error_frame, opts, raw_plain_session, read_raw_frame, sealed_server,
    server_with,
};
use crate::tcp::wire::{self, Request, Response, code};
use crate::tcp::{TcpStore, TcpStoreServer, TcpStoreServerOptions};
use crate::{Store, StoreError};

#[test]
fn a_client_with_a_secret_refuses_a_server_without_one() {
    let server = TcpStoreServer::bind("127.0.0.1:0", TcpStoreServerOptions::default()).unwrap();
    let err =
        TcpStore::connect_to(server.local_addr(), opts().with_secret(b"s".to_vec())).unwrap_err();
    assert!(matches!(err, StoreError::Auth { .. }), "{err:?}");
    assert!(err.to_string().contains("holds no secret"), "{err}");
}

#[test]
fn empty_secrets_are_refused_on_both_sides() {
    let err = TcpStoreServer::bind(
        "127.0.0.1:0",
        TcpStoreServerOptions::default().with_secret(Vec::new()),
    )
    .unwrap_err();
    assert!(
        matches!(err, StoreError::InvalidArgument { what: "secret", .. }),
        "{err:?}"
    );
    let err = TcpStore::connect("127.0.0.1", 1, opts().with_secret(Vec::new())).unwrap_err();
    assert!(
        matches!(err, StoreError::InvalidArgument { what: "secret", .. }),
        "{err:?}"
    );
}

#[test]
fn requests_over_the_limits_are_refused_before_sending_and_by_the_server() {
    let server = server_with(
        TcpStoreServerOptions::default()
            .with_max_key_len(16)
            .with_max_value_len(64)
            .with_max_keys_per_request(4),
    );
    let store = TcpStore::connect_to(server.local_addr(), opts()).unwrap();
    let long_key = "k".repeat(17);
    let cases: [(&str, StoreError); 4] = [
        ("max_key_len of 16", store.set(&long_key, b"v").unwrap_err()),
        ("max_value_len of 64", store.set("k", &[0; 65]).unwrap_err()),
        (
            "max_value_len of 64",
            store.compare_set("k", Some(&[0; 65]), b"").unwrap_err(),
        ),
        (
            "max_keys_per_request of 4",
            store
                .wait(&["a", "b", "c", "d", "e"], Duration::from_secs(1))
                .unwrap_err(),
        ),
    ];
    for (limit, err) in cases {
        assert!(matches!(err, StoreError::OverLimit { .. }), "{err:?}");
        let message = err.to_string();
        assert!(
            message.contains(limit) && message.contains("nothing stored was changed"),
            "{message}"
        );
    }
    store.set(&"k".repeat(16), &[0; 64]).unwrap();

    // A raw client that sends one anyway is refused from the frame's first
    // bytes: a 12 M-key `wait` of which only the first 13 bytes ever come,
    // announced at 57 MiB (over the largest request these limits allow),
    // or within it.
    let wait_head = |declared: u32| {
        let mut head = declared.to_be_bytes().to_vec();
        head.push(0x07);
        head.extend(1000u64.to_be_bytes());
        head.extend(12_000_000u32.to_be_bytes());
        head
    };
    let largest = server.max_frame_size();
    assert_eq!(largest, 1 + 4 + 16 + 1 + 4 + 64 + 4 + 64 + 16 + 32);
    let mut raw = raw_plain_session(server.local_addr());
    raw.write_all(&wait_head(57 << 20)).unwrap();
    let message = expect_error_frame(&mut raw, code::TOO_LARGE);
    assert!(
        message.contains("59768832") && message.contains(&largest.to_string()),
        "{message}"
    );
    let mut raw = raw_plain_session(server.local_addr());
    raw.write_all(&wait_head(150)).unwrap();
    let message = expect_error_frame(&mut raw, code::LIMIT);
    assert_eq!(
        message,
        "a request naming 12000000 keys is over the server's max_keys_per_request of 4"
    );
    assert_eq!(
        store.try_get(&"k".repeat(16)).unwrap().unwrap(),
        vec![0; 64]
    );
}

#[test]
fn the_quota_refuses_writes_past_it_and_loses_nothing_stored() {
    let server = server_with(
        TcpStoreServerOptions::default()
            .with_max_stored_keys(3)
            .with_max_stored_bytes(100),
    );
    let store = TcpStore::connect_to(server.local_addr(), opts()).unwrap();
    store.set("a", b"1").unwrap();
    store.set("b", b"2").unwrap();
    store.add("c", 3).unwrap();
    for err in [
        store.set("d", b"4").unwrap_err(),
        store.add("d", 1).unwrap_err(),
        store.compare_set("d", None, b"4").unwrap_err(),
    ] {
        assert!(matches!(err, StoreError::OverLimit { .. }), "{err:?}");
        assert!(err.to_string().contains("max_stored_keys of 3"), "{err}");
    }
    let err = store.set("a", &[0; 99]).unwrap_err();
    assert!(err.to_string().contains("max_stored_bytes of 100"), "{err}");
    // Everything stored before is intact, and the client keeps working.
    assert_eq!(store.try_get("a").unwrap().unwrap(), b"1");
    assert_eq!(store.try_get("b").unwrap().unwrap(), b"2");
    assert_eq!(store.add("c", 1).unwrap(), 4);
    assert_eq!(store.try_get("d").unwrap(), None);
    assert!(store.delete("b").unwrap());
    store.set("d", b"4").unwrap();
}

#[test]
fn a_sealed_frame_that_was_altered_or_replayed_closes_the_connection_unapplied() {
    let (server, store) = sealed_server_and_client();
    // A raw client that holds the secret, to send frames by hand.
    for tamper in [Tamper::FlipValueBit, Tamper::Replay] {
        let mut raw = TcpStream::connect(server.local_addr()).unwrap();
        let mut session = raw_sealed_session(&mut raw, SECRET);
        let set = |value: &[u8]| {
            Request::Set {
                key: "uid".into(),
                value: value.to_vec(),
            }
            .encode()
        };
        let first = session.seal_request(set(b"first"), PATIENCE);
        raw.write_all(first.as_bytes()).unwrap();
        let answer = read_raw_frame(&mut raw).unwrap();
        assert_eq!(
            Response::decode(&session.open(answer).unwrap().body).unwrap(),
            Response::Ok
        );
        store.set("uid", b"real").unwrap();
        let bytes = match tamper {
            Tamper::FlipValueBit => {
                let mut bytes = session
                    .seal_request(set(b"fake!"), PATIENCE)
                    .as_bytes()
                    .to_vec();
                let at = bytes.len() - wire::TAG_LEN - 1;
                bytes[at] ^= 1;
                bytes
            }
            Tamper::Replay => first.as_bytes().to_vec(),
        };
        raw.write_all(&bytes).unwrap();
        let answer = read_raw_frame(&mut raw).expect("a sealed refusal");
        let refusal = Response::decode(&session.open(answer).unwrap().body).unwrap();
        assert!(
            matches!(&refusal, Response::Error { code: code::INTEGRITY, message } if message.contains("failed authentication")),
            "{tamper:?}: {refusal:?}"
        );
        assert_eq!(
            store.try_get("uid").unwrap().unwrap(),
            b"real",
            "{tamper:?}"
        );
    }
}

#[test]
fn a_request_stamped_ahead_of_the_servers_clock_or_past_its_patience_is_refused_unapplied() {
    let (server, store) = sealed_server_and_client();
    store.set("uid", b"real").unwrap();
    let day = Duration::from_secs(86_400);
    for (stamp, why) in [
        // A time the client's clock cannot have reached: the server's clock
        // started first.
        (
            wire::Stamp {
                sent: Duration::from_millis(u64::MAX),
                patience: day,
            },
            "forged",
        ),
        (
            wire::Stamp {
                sent: day,
                patience: day,
            },
            "forged",
        ),
        // Sent at the handshake by a client that gave up at once: it
        // arrives after its client's patience.
        (
            wire::Stamp {
                sent: Duration::ZERO,
                patience: Duration::ZERO,
            },
            "past the 0ns its client waits",
        ),
    ] {
        let mut raw = TcpStream::connect(server.local_addr()).unwrap();
        let mut session = raw_sealed_session(&mut raw, SECRET);
        thread::sleep(Duration::from_millis(5));
        let set = Request::Set {
            key: "uid".into(),
            value: b"forged".to_vec(),
        };
        let frame = session.seal_forged(set.encode(), stamp);
        raw.write_all(frame.as_bytes()).unwrap();
        let answer = read_raw_frame(&mut raw).expect("a sealed refusal");
        let refusal = Response::decode(&session.open(answer).unwrap().body).unwrap();
        assert!(
            matches!(&refusal, Response::Error { code: code::INTEGRITY, message } if message.contains(why)),
            "{stamp:?}: {refusal:?}"
        );
    }
    assert_eq!(store.try_get("uid").unwrap().unwrap(), b"real");
}

/// A server that holds [`SECRET`], and a client of it that holds it too.
fn sealed_server_and_client() -> (TcpStoreServer, TcpStore) {
    let server = sealed_server(TcpStoreServerOptions::default());
    let store =
        TcpStore::connect_to(server.local_addr(), opts().with_secret(SECRET.to_vec())).unwrap();
    (server, store)
}

#[derive(Debug, Clone, Copy)]
enum Tamper {
    FlipValueBit,
    Replay,
}

/// Runs the client's handshake by hand on `raw`.
fn raw_sealed_session(raw: &mut TcpStream, secret: &[u8]) -> wire::Session {
    raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    raw.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    let (session, _) = super::super::client::client_handshake(raw, Some(secret)).unwrap();
    session
}
