//! Byte-exact encodings of every request this client sends and decodings of
//! every reply it reads, each against the torch source that defines it
//! (`torch/csrc/distributed/c10d/`, torch 2.x).

use super::*;

/// A `uint64_t` length or count, little-endian, as `SendBuffer::appendValue`
/// writes it on x86-64 and aarch64.
fn len(n: u8) -> [u8; 8] {
    [n, 0, 0, 0, 0, 0, 0, 0]
}

fn concat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// `TCPStore::validate`: `SendBuffer(VALIDATE)` then
/// `appendValue<uint32_t>(validationMagicNumber)`, with
/// `validationMagicNumber = 0x3C85F7CE` and `QueryType::VALIDATE = 0`
/// (TCPStoreBackend.hpp).
#[test]
fn validate() {
    assert_eq!(Request::Validate.encode(), [0, 0xCE, 0xF7, 0x85, 0x3C]);
}

/// `TCPStore::ping`: `SendBuffer(PING)` (`QueryType::PING = 13`), then
/// `appendValue<uint32_t>(nonce)`; `pingHandler` echoes the `uint32_t`.
#[test]
fn ping_and_its_echo() {
    assert_eq!(
        Request::Ping { nonce: 0x0102_0304 }.encode(),
        [13, 0x04, 0x03, 0x02, 0x01]
    );
    assert_eq!(
        read_u32(&mut &[0x04u8, 0x03, 0x02, 0x01][..]).unwrap(),
        0x0102_0304
    );
}

/// `TCPStore::set`: `SendBuffer(SET)` (`= 1`), `appendString(key)`,
/// `appendBytes(data)`; `setHandler` answers nothing.
#[test]
fn set() {
    let bytes = Request::Set {
        key: "ab",
        value: &[7, 8, 9],
    }
    .encode();
    assert_eq!(bytes, concat(&[&[1], &len(2), b"ab", &len(3), &[7, 8, 9]]));
}

/// An empty key and an empty value are a zero length and no bytes.
#[test]
fn set_empty() {
    let bytes = Request::Set {
        key: "",
        value: &[],
    }
    .encode();
    assert_eq!(bytes, concat(&[&[1], &len(0), &len(0)]));
}

/// `TCPStore::compareSet`: `SendBuffer(COMPARE_SET)` (`= 2`),
/// `appendString(key)`, `appendBytes(expectedValue)`,
/// `appendBytes(desiredValue)`; the reply is `recvVector<uint8_t>`.
#[test]
fn compare_set_and_its_reply() {
    let bytes = Request::CompareSet {
        key: "k",
        expected: b"",
        desired: b"new",
    }
    .encode();
    assert_eq!(
        bytes,
        concat(&[&[2], &len(1), b"k", &len(0), &len(3), b"new"])
    );
    let reply = concat(&[&len(3), b"new"]);
    assert_eq!(read_bytes(&mut &reply[..]).unwrap(), b"new");
}

/// `TCPStore::doGet`: `SendBuffer(GET)` (`= 3`), `appendString(key)`; the
/// reply is `tcputil::recvVector<uint8_t>`: a `uint64_t` length, then the
/// bytes.
#[test]
fn get_and_its_reply() {
    assert_eq!(
        Request::Get { key: "uid" }.encode(),
        concat(&[&[3], &len(3), b"uid"])
    );
    let reply = concat(&[&len(4), &[0, 1, 2, 255]]);
    assert_eq!(read_bytes(&mut &reply[..]).unwrap(), [0, 1, 2, 255]);
    assert_eq!(read_bytes(&mut &len(0)[..]).unwrap(), b"");
}

/// A value cut short by the connection's end is an I/O error, and an
/// absurd announced length is refused before anything is allocated.
#[test]
fn bad_value_replies() {
    let short = concat(&[&len(5), b"abc"]);
    match read_bytes(&mut &short[..]) {
        Err(ReadError::Io(e)) => assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof),
        other => panic!("expected an end-of-file error, got {other:?}"),
    }
    let huge = u64::MAX.to_le_bytes();
    match read_bytes(&mut &huge[..]) {
        Err(ReadError::Malformed(m)) => assert!(m.contains("18446744073709551615 bytes"), "{m}"),
        other => panic!("expected a malformed reply, got {other:?}"),
    }
}

/// `TCPStore::incrementValueBy`: `SendBuffer(ADD)` (`= 4`),
/// `appendString(key)`, `appendValue<int64_t>(delta)`; the reply is
/// `recvValue<int64_t>`.
#[test]
fn add_and_its_reply() {
    assert_eq!(
        Request::Add {
            key: "n",
            delta: -2
        }
        .encode(),
        concat(&[
            &[4],
            &len(1),
            b"n",
            &[0xFE, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]
        ])
    );
    assert_eq!(read_i64(&mut &[42u8, 0, 0, 0, 0, 0, 0, 0][..]).unwrap(), 42);
    assert_eq!(
        read_i64(&mut &[0xFFu8, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F][..]).unwrap(),
        i64::MAX
    );
}

/// `TCPStore::check`: `SendBuffer(CHECK)` (`= 5`), `appendValue(keys.size())`
/// (a `size_t`), then `appendString` per key; the reply is one
/// `CheckResponseType` byte: `READY = 0`, `NOT_READY = 1`.
#[test]
fn check_and_its_reply() {
    assert_eq!(
        Request::Check { keys: &["a", "bc"] }.encode(),
        concat(&[&[5], &len(2), &len(1), b"a", &len(2), b"bc"])
    );
    assert_eq!(read_check(&mut &[0u8][..]).unwrap(), CheckReply::Ready);
    assert_eq!(read_check(&mut &[1u8][..]).unwrap(), CheckReply::NotReady);
    assert!(matches!(
        read_check(&mut &[2u8][..]),
        Err(ReadError::Malformed(_))
    ));
}

/// `TCPStore::doWait`: `SendBuffer(WAIT)` (`= 6`), `appendValue(keys.size())`,
/// `appendString` per key; then `SendBuffer(CANCEL_WAIT)` (`= 12`, no
/// arguments) on timeout. Replies are `WaitResponseType` bytes:
/// `STOP_WAITING = 0`, `WAIT_CANCELED = 1`.
#[test]
fn wait_cancel_and_their_replies() {
    assert_eq!(
        Request::Wait { keys: &["x"] }.encode(),
        concat(&[&[6], &len(1), &len(1), b"x"])
    );
    assert_eq!(Request::CancelWait.encode(), [12]);
    assert_eq!(read_wait(&mut &[0u8][..]).unwrap(), WaitReply::StopWaiting);
    assert_eq!(read_wait(&mut &[1u8][..]).unwrap(), WaitReply::WaitCanceled);
    assert!(matches!(
        read_wait(&mut &[9u8][..]),
        Err(ReadError::Malformed(_))
    ));
}

/// `TCPStore::deleteKey`: `SendBuffer(DELETE_KEY)` (`= 8`),
/// `appendString(key)`; the reply is `recvValue<int64_t>` (the legacy
/// server sends a `size_t`: the same eight bytes for 0 and 1).
#[test]
fn delete_and_its_reply() {
    assert_eq!(
        Request::DeleteKey { key: "gone" }.encode(),
        concat(&[&[8], &len(4), b"gone"])
    );
    assert_eq!(read_i64(&mut &len(1)[..]).unwrap(), 1);
    assert_eq!(read_i64(&mut &len(0)[..]).unwrap(), 0);
}

/// Keys are sent as their UTF-8 bytes, lengths in bytes, not characters.
#[test]
fn keys_are_utf8_bytes() {
    let bytes = Request::Get { key: "ключ" }.encode();
    assert_eq!(bytes[1..9], len(8));
    assert_eq!(&bytes[9..], "ключ".as_bytes());
}
