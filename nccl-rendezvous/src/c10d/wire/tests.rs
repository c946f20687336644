//! Every request this client sends and every reply it reads, against the
//! bytes torch's own client and servers exchanged for the same call:
//! `torch_wire.txt`, recorded from torch 2.11 (libuv and legacy servers) by
//! `nccl-rendezvous/tests/torch/record_c10d_wire.py`.

use super::*;

/// The recorded exchange: per backend and client call, the bytes the client
/// sent and the bytes the server answered, each in order.
struct Recorded {
    sent: Vec<u8>,
    answered: Vec<u8>,
}

impl Recorded {
    /// The server's answer, read from the recorded bytes with `read`.
    fn answer<'a, T>(&'a self, read: impl FnOnce(&mut &'a [u8]) -> Result<T, ReadError>) -> T {
        read(&mut &self.answered[..]).unwrap()
    }
}

fn recorded(backend: &str, call: &str) -> Recorded {
    let mut exchange = Recorded {
        sent: Vec::new(),
        answered: Vec::new(),
    };
    let rows = include_str!("torch_wire.txt")
        .lines()
        .filter(|line| !line.starts_with('#'))
        .map(|line| line.split('\t').collect::<Vec<_>>());
    for row in rows {
        let [b, c, direction, hex] = row[..] else {
            panic!("a row of torch_wire.txt has not 4 fields: {row:?}");
        };
        if b != backend || c != call {
            continue;
        }
        let bytes = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap());
        match direction {
            "c2s" => exchange.sent.extend(bytes),
            "s2c" => exchange.answered.extend(bytes),
            other => panic!("unknown direction {other:?}"),
        }
    }
    assert!(
        !exchange.sent.is_empty(),
        "no recorded bytes for {backend} {call:?}"
    );
    exchange
}

const BACKENDS: [&str; 2] = ["libuv", "legacy"];

/// Encodes `requests` one after the other, as torch's client sent them for
/// one call.
fn encoded(requests: &[Request<'_>]) -> Vec<u8> {
    requests.iter().flat_map(Request::encode).collect()
}

#[test]
fn connect_is_validate_then_ping_echoed() {
    for backend in BACKENDS {
        let r = recorded(backend, "connect");
        // torch pings with its pid as the nonce: take it from the recording.
        let nonce = read_u32(&mut &r.sent[6..]).unwrap();
        assert_eq!(
            r.sent,
            encoded(&[Request::Validate, Request::Ping { nonce }])
        );
        assert_eq!(r.answer(read_u32), nonce);
    }
}

#[test]
fn set_sends_the_prefixed_key_and_gets_no_reply() {
    for backend in BACKENDS {
        let r = recorded(backend, "set k1 v1");
        let set = Request::Set {
            key: "k1",
            value: b"v1",
        };
        assert_eq!(r.sent, set.encode());
        assert!(r.answered.is_empty());
        let value: Vec<u8> = (0..=255).collect();
        let bin = Request::Set {
            key: "bin",
            value: &value,
        };
        assert_eq!(recorded(backend, "set bin 0..255").sent, bin.encode());
    }
}

#[test]
fn get_is_wait_then_get() {
    for backend in BACKENDS {
        let r = recorded(backend, "get k1");
        let keys = ["k1"];
        assert_eq!(
            r.sent,
            encoded(&[Request::Wait { keys: &keys }, Request::Get { key: "k1" }])
        );
        let answered = &mut &r.answered[..];
        assert_eq!(read_wait(answered).unwrap(), WaitReply::StopWaiting);
        assert_eq!(read_bytes(answered).unwrap(), b"v1");
        assert!(answered.is_empty());
    }
}

#[test]
fn add_replies_the_new_value() {
    for backend in BACKENDS {
        for (call, delta, total) in [("add ctr 5", 5, 5), ("add ctr -2", -2, 3)] {
            let r = recorded(backend, call);
            assert_eq!(r.sent, Request::Add { key: "ctr", delta }.encode());
            assert_eq!(r.answer(read_i64), total);
        }
    }
}

#[test]
#[allow(clippy::type_complexity)]
fn compare_set_replies_the_value_afterwards() {
    for backend in BACKENDS {
        // (call, key, expected, desired, the value afterwards)
        let cases: [(&str, &str, &[u8], &[u8], &[u8]); 3] = [
            ("compare_set k1 v1 v2", "k1", b"v1", b"v2", b"v2"),
            ("compare_set k1 zz v3", "k1", b"zz", b"v3", b"v2"),
            (
                "compare_set missing (absent) new",
                "missing",
                b"",
                b"new",
                b"new",
            ),
        ];
        for (call, key, expected, desired, after) in cases {
            let r = recorded(backend, call);
            let request = Request::CompareSet {
                key,
                expected,
                desired,
            };
            assert_eq!(r.sent, request.encode(), "{backend} {call}");
            assert_eq!(r.answer(read_bytes), after);
        }
    }
}

#[test]
fn check_replies_ready_or_not() {
    for backend in BACKENDS {
        let both = recorded(backend, "check k1 nope");
        let keys = ["k1", "nope"];
        assert_eq!(both.sent, Request::Check { keys: &keys }.encode());
        assert_eq!(both.answer(read_check), CheckReply::NotReady);
        let one = recorded(backend, "check k1");
        assert_eq!(one.sent, Request::Check { keys: &keys[..1] }.encode());
        assert_eq!(one.answer(read_check), CheckReply::Ready);
    }
}

#[test]
fn wait_stops_or_is_cancelled() {
    for backend in BACKENDS {
        let set = recorded(backend, "wait k1");
        let keys = ["k1"];
        assert_eq!(set.sent, Request::Wait { keys: &keys }.encode());
        assert_eq!(set.answer(read_wait), WaitReply::StopWaiting);
        let never = recorded(backend, "wait never 1s");
        let keys = ["never"];
        assert_eq!(
            never.sent,
            encoded(&[Request::Wait { keys: &keys }, Request::CancelWait])
        );
        assert_eq!(never.answer(read_wait), WaitReply::WaitCanceled);
    }
}

#[test]
fn delete_replies_how_many_went() {
    for backend in BACKENDS {
        for (call, removed) in [("delete k1", 1), ("delete k1 again", 0)] {
            let r = recorded(backend, call);
            assert_eq!(r.sent, Request::DeleteKey { key: "k1" }.encode());
            assert_eq!(r.answer(read_i64), removed);
        }
    }
}

/// Malformed replies: a value cut short is an I/O error, an absurd
/// announced length is refused before anything is allocated, an unknown
/// CHECK or WAIT byte is malformed.
#[test]
fn bad_replies() {
    let short = [&5u64.to_le_bytes()[..], b"abc"].concat();
    match read_bytes(&mut &short[..]) {
        Err(ReadError::Io(e)) => assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof),
        other => panic!("expected an end-of-file error, got {other:?}"),
    }
    let huge = u64::MAX.to_le_bytes();
    match read_bytes(&mut &huge[..]) {
        Err(ReadError::Malformed(m)) => assert!(m.contains("18446744073709551615 bytes"), "{m}"),
        other => panic!("expected a malformed reply, got {other:?}"),
    }
    assert!(matches!(
        read_check(&mut &[2u8][..]),
        Err(ReadError::Malformed(_))
    ));
    assert!(matches!(
        read_wait(&mut &[9u8][..]),
        Err(ReadError::Malformed(_))
    ));
}

/// Keys are sent as their UTF-8 bytes after the prefix, lengths in bytes.
#[test]
fn keys_are_utf8_bytes() {
    let bytes = Request::Get { key: "ключ" }.encode();
    assert_eq!(bytes[1..9], 9u64.to_le_bytes());
    assert_eq!(&bytes[9..], "/ключ".as_bytes());
}
