//! The handshake's proofs and the per-frame tags: HMAC-SHA256 under the
//! shared secret, over both sides' `HELLO`s (so over both fresh nonces).
//!
//! Every use of the secret has its own label, so no value one side
//! computes is ever accepted as another: a server's proof is not a
//! client's, a tag from the client to the server is not valid the other
//! way. Tags are compared in constant time (`Mac::verify_slice`).
//!
//! A request also carries its stamp under the tag: the client's
//! milliseconds since its end of the handshake, and how many more it waits
//! for the answer before it gives up, for the server to refuse a request
//! its client no longer waits for (held back on the way).

use std::io;
use std::time::{Duration, Instant};

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

use super::Frame;

/// The length of a nonce in `HELLO`.
pub(crate) const NONCE_LEN: usize = 32;
/// The length of a proof or a frame's tag (a whole HMAC-SHA256).
pub(crate) const TAG_LEN: usize = 32;
/// The length of a request's stamp: two big-endian `u64`s of
/// milliseconds, when it was sealed and how long after that its client
/// gives up.
pub(crate) const STAMP_LEN: usize = 16;

/// A request's stamp, as its client sealed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    /// The client's time since its end of the handshake.
    pub(crate) sent: Duration,
    /// How long after `sent` the client gives up on the answer.
    pub(crate) patience: Duration,
}

/// How much faster than the server's the client's monotonic clock may run
/// (NTP slews a clock's rate by at most 500 ppm), as a share of the
/// session's age.
const CLOCK_RATE_SLACK: u32 = 2000;

impl Stamp {
    /// Why a request with this stamp, arriving `age` after the server's
    /// end of the handshake, is not applied: its client gave up on it (or
    /// the server's `io_timeout` passed) before it arrived, or it claims a
    /// time the client's clock cannot have reached yet.
    ///
    /// The server's clock started first, so an honest stamp is never ahead of
    /// it, and the lag it shows is never less than the request's real time on
    /// the way.
    pub(crate) fn refusal(&self, age: Duration, io_timeout: Duration) -> Option<String> {
        let slack = age / CLOCK_RATE_SLACK + Duration::from_millis(1);
        if self.sent > age + slack {
            return Some(format!(
                "a request stamped {:?} after the handshake arrived {age:?} after it by this \
                 server's clock: a client's clock starts after the server's, so the stamp is \
                 forged or the clock broken; it was not applied",
                self.sent
            ));
        }
        let lag = age.saturating_sub(self.sent);
        let waited = self.patience.min(io_timeout);
        (lag > waited).then(|| {
            format!(
                "a request arrived {lag:?} after its client sent it, past the {:?} its client \
                 waits for an answer (and this server's io_timeout of {io_timeout:?}): it was \
                 held back on the way (by a relay?) or stuck in the client, whose call has \
                 failed, and was not applied",
                self.patience
            )
        })
    }
}

/// A fresh random value from one side of a handshake.
pub(crate) type Nonce = [u8; NONCE_LEN];
/// A proof or a frame's tag.
pub(crate) type Tag = [u8; TAG_LEN];

const SERVER_PROOF: &[u8] = b"nccl-rs tcp store v3: server proof";
const CLIENT_PROOF: &[u8] = b"nccl-rs tcp store v3: client proof";
const TO_SERVER_KEY: &[u8] = b"nccl-rs tcp store v3: client-to-server frames";
const TO_CLIENT_KEY: &[u8] = b"nccl-rs tcp store v3: server-to-client frames";

type HmacSha256 = Hmac<Sha256>;

/// A nonce from the operating system's random source.
pub(crate) fn fresh_nonce() -> io::Result<Nonce> {
    let mut nonce = [0u8; NONCE_LEN];
    getrandom::fill(&mut nonce).map_err(|e| {
        io::Error::other(format!(
            "the operating system gave no random bytes for a handshake nonce: {e}"
        ))
    })?;
    Ok(nonce)
}

/// An HMAC-SHA256 keyed with `key`, of any length.
///
/// The key is brought to SHA-256's block size as RFC 2104 says (hashed when
/// longer, padded with zeros), so keying is infallible rather than a `Result`
/// no caller could meet.
fn keyed(key: &[u8]) -> HmacSha256 {
    let mut block = hmac::digest::Key::<HmacSha256>::default();
    if key.len() > block.len() {
        let hashed = Sha256::digest(key);
        block[..hashed.len()].copy_from_slice(&hashed);
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    <HmacSha256 as KeyInit>::new(&block)
}

/// HMAC-SHA256 under `key` of each part, each preceded by its length, so
/// that no two different lists of parts give the same input.
fn mac_of(key: &[u8], parts: &[&[u8]]) -> HmacSha256 {
    let mut mac = keyed(key);
    for part in parts {
        mac.update(&(part.len() as u64).to_be_bytes());
        mac.update(part);
    }
    mac
}

fn tag_of(key: &[u8], parts: &[&[u8]]) -> Tag {
    mac_of(key, parts).finalize().into_bytes().into()
}

/// The proofs and session keys of one handshake, computed from the secret
/// and both `HELLO` payloads as they crossed the wire (the server's without
/// its proof: the proof cannot cover itself).
pub(crate) struct Proofs<'a> {
    secret: &'a [u8],
    client_hello: &'a [u8],
    server_hello: &'a [u8],
}

impl<'a> Proofs<'a> {
    /// The proofs of the handshake whose `HELLO` payloads are these.
    pub(crate) fn new(secret: &'a [u8], client_hello: &'a [u8], server_hello: &'a [u8]) -> Self {
        Proofs {
            secret,
            client_hello,
            server_hello,
        }
    }

    fn parts(&self, label: &'a [u8]) -> [&'a [u8]; 3] {
        [label, self.client_hello, self.server_hello]
    }

    /// What the server sends to prove it holds the secret.
    pub(crate) fn server_proof(&self) -> Tag {
        tag_of(self.secret, &self.parts(SERVER_PROOF))
    }

    /// What the client sends to prove it holds the secret.
    pub(crate) fn client_proof(&self) -> Tag {
        tag_of(self.secret, &self.parts(CLIENT_PROOF))
    }

    /// Whether `given` is the server's proof, in constant time.
    pub(crate) fn is_server_proof(&self, given: &[u8]) -> bool {
        mac_of(self.secret, &self.parts(SERVER_PROOF))
            .verify_slice(given)
            .is_ok()
    }

    /// Whether `given` is the client's proof, in constant time.
    pub(crate) fn is_client_proof(&self, given: &[u8]) -> bool {
        mac_of(self.secret, &self.parts(CLIENT_PROOF))
            .verify_slice(given)
            .is_ok()
    }

    /// The client's side of the session: it seals (and stamps) with the
    /// client-to-server key and opens with the other.
    ///
    /// Its clock starts now, when the handshake has ended for the client.
    pub(crate) fn client_session(&self) -> Session {
        Session::sealed(
            tag_of(self.secret, &self.parts(TO_SERVER_KEY)),
            tag_of(self.secret, &self.parts(TO_CLIENT_KEY)),
            Side::Client,
        )
    }

    /// The server's side of the session.
    ///
    /// Its clock starts now, before the server confirms the handshake: a
    /// client's clock starts later, so an honest stamp never lags by more than
    /// the way from one to the other.
    pub(crate) fn server_session(&self) -> Session {
        Session::sealed(
            tag_of(self.secret, &self.parts(TO_CLIENT_KEY)),
            tag_of(self.secret, &self.parts(TO_SERVER_KEY)),
            Side::Server,
        )
    }
}

/// One direction of a sealed session: a key and the next sequence number.
struct Direction {
    mac: HmacSha256,
    seq: u64,
}

impl Direction {
    fn new(key: Tag) -> Self {
        Direction {
            mac: keyed(&key),
            seq: 0,
        }
    }

    /// The tag of `payload` at the current sequence number.
    fn mac(&self, payload: &[u8]) -> HmacSha256 {
        let mut mac = self.mac.clone();
        mac.update(&self.seq.to_be_bytes());
        mac.update(payload);
        mac
    }

    fn advance(&mut self) {
        // 2^64 frames on one connection cannot happen; wrapping keeps this
        // total without a branch that could never run.
        self.seq = self.seq.wrapping_add(1);
    }
}

/// Which end of a session: the client stamps what it seals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Client,
    Server,
}

/// The state of a sealed session.
struct Sealed {
    send: Direction,
    receive: Direction,
    side: Side,
    /// When this side's end of the handshake was.
    started: Instant,
}

/// How frames are protected on one connection after its handshake: sealed
/// (a tag on every frame, each way; a stamp on every request) with a
/// secret, plain without one.
pub(crate) struct Session {
    sealed: Option<Sealed>,
}

/// An incoming payload whose tag checked out.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Opened {
    /// The message, without its seal.
    pub(crate) body: Vec<u8>,
    /// On the server's side of a sealed session: the request's stamp.
    pub(crate) stamp: Option<Stamp>,
}

/// A frame that failed its tag: altered, replayed, reordered, injected, or
/// sealed under another key.
#[derive(Debug)]
pub(crate) struct BadTag;

impl Session {
    /// A session without a secret: frames go as they are.
    pub(crate) fn plain() -> Self {
        Session { sealed: None }
    }

    fn sealed(send_key: Tag, receive_key: Tag, side: Side) -> Self {
        Session {
            sealed: Some(Sealed {
                send: Direction::new(send_key),
                receive: Direction::new(receive_key),
                side,
                started: Instant::now(),
            }),
        }
    }

    /// Whether frames carry tags.
    #[cfg(feature = "fuzzing")]
    pub(crate) fn is_sealed(&self) -> bool {
        self.sealed.is_some()
    }

    /// The bytes a seal adds to the payload of each frame that `side`
    /// sends: the tag, and a request's stamp.
    fn seal_len(&self, side: Side) -> usize {
        match &self.sealed {
            None => 0,
            Some(_) if side == Side::Client => STAMP_LEN + TAG_LEN,
            Some(_) => TAG_LEN,
        }
    }

    /// The bytes a seal adds to each frame this side sends.
    pub(crate) fn outbound_overhead(&self) -> usize {
        self.sealed.as_ref().map_or(0, |s| self.seal_len(s.side))
    }

    /// The bytes a seal adds to each frame this side receives.
    pub(crate) fn inbound_overhead(&self) -> usize {
        let other = |side| match side {
            Side::Client => Side::Server,
            Side::Server => Side::Client,
        };
        self.sealed
            .as_ref()
            .map_or(0, |s| self.seal_len(other(s.side)))
    }

    /// How long ago this side's end of the handshake was (zero for a plain
    /// session).
    pub(crate) fn age(&self) -> Duration {
        self.sealed
            .as_ref()
            .map_or(Duration::ZERO, |s| s.started.elapsed())
    }

    /// Seals an answer (or, on the client's side, a request its client
    /// gives up on at once): the tag of the payload.
    pub(crate) fn seal(&mut self, frame: Frame) -> Frame {
        self.seal_request(frame, Duration::ZERO)
    }

    /// Seals a request its client waits `patience` for, from now: the
    /// client appends its stamp (its time since the handshake and
    /// `patience`), then the tag of the payload.
    pub(crate) fn seal_request(&mut self, frame: Frame, patience: Duration) -> Frame {
        if self.sealed.is_none() {
            return frame;
        }
        let trailer = self.seal_parts(frame.payload(), &[], patience);
        frame.with_trailer(&trailer)
    }

    /// The seal of an answer whose payload is `head` then `tail` (a value
    /// sent apart, not copied): what follows them on the wire, nothing for
    /// a plain session.
    ///
    /// Its length is [`Session::outbound_overhead`].
    pub(crate) fn seal_split(&mut self, head: &[u8], tail: &[u8]) -> Vec<u8> {
        self.seal_parts(head, tail, Duration::ZERO)
    }

    fn seal_parts(&mut self, head: &[u8], tail: &[u8], patience: Duration) -> Vec<u8> {
        let sent = self.age();
        self.seal_stamped(head, tail, Stamp { sent, patience })
    }

    /// [`Session::seal_request`] with a stamp of the caller's: for tests
    /// of what the server makes of forged ones.
    #[cfg(test)]
    pub(crate) fn seal_forged(&mut self, frame: Frame, stamp: Stamp) -> Frame {
        let trailer = self.seal_stamped(frame.payload(), &[], stamp);
        frame.with_trailer(&trailer)
    }

    fn seal_stamped(&mut self, head: &[u8], tail: &[u8], stamp: Stamp) -> Vec<u8> {
        let Some(sealed) = &mut self.sealed else {
            return Vec::new();
        };
        let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let mut trailer = Vec::with_capacity(STAMP_LEN + TAG_LEN);
        if sealed.side == Side::Client {
            trailer.extend_from_slice(&millis(stamp.sent).to_be_bytes());
            trailer.extend_from_slice(&millis(stamp.patience).to_be_bytes());
        }
        let mut mac = sealed.send.mac(head);
        mac.update(tail);
        mac.update(&trailer);
        trailer.extend_from_slice(&mac.finalize().into_bytes());
        sealed.send.advance();
        trailer
    }

    /// Checks an incoming payload's tag (in constant time) and returns the
    /// message without its seal, with the request's stamp on the server's
    /// side.
    ///
    /// A payload too short for its seal fails as a wrong tag would.
    pub(crate) fn open(&mut self, mut payload: Vec<u8>) -> Result<Opened, BadTag> {
        let Some(sealed) = &mut self.sealed else {
            return Ok(Opened {
                body: payload,
                stamp: None,
            });
        };
        let Some(signed_len) = payload.len().checked_sub(TAG_LEN) else {
            return Err(BadTag);
        };
        let (signed, tag) = payload.split_at(signed_len);
        sealed
            .receive
            .mac(signed)
            .verify_slice(tag)
            .map_err(|_| BadTag)?;
        sealed.receive.advance();
        let (body_len, stamp) = match sealed.side {
            Side::Client => (signed_len, None),
            Side::Server => {
                let body_len = signed_len.checked_sub(STAMP_LEN).ok_or(BadTag)?;
                let millis = |at: usize| {
                    let mut field = [0u8; 8];
                    field.copy_from_slice(&signed[at..at + 8]);
                    Duration::from_millis(u64::from_be_bytes(field))
                };
                let stamp = Stamp {
                    sent: millis(body_len),
                    patience: millis(body_len + 8),
                };
                (body_len, Some(stamp))
            }
        };
        payload.truncate(body_len);
        Ok(Opened {
            body: payload,
            stamp,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Request, Response};
    use super::*;

    /// Both ends of one session, the server's started first (as in a
    /// handshake).
    fn pair(secret: &[u8]) -> (Session, Session) {
        let proofs = Proofs::new(secret, b"client hello", b"server hello");
        let server = proofs.server_session();
        (proofs.client_session(), server)
    }

    fn payload(frame: &Frame) -> Vec<u8> {
        frame.payload().to_vec()
    }

    #[test]
    fn sealed_frames_open_in_order_and_nothing_else_does() {
        let (mut client, mut server) = pair(b"s3cret");
        let first = client.seal(Request::TryGet { key: "a".into() }.encode());
        let second = client.seal(Request::TryGet { key: "b".into() }.encode());
        let patient = Duration::from_millis(1500);
        // Reordered: the second frame first fails.
        assert!(server.open(payload(&second)).is_err());
        let (mut client, mut server) = pair(b"s3cret");
        let first_again =
            client.seal_request(Request::TryGet { key: "a".into() }.encode(), patient);
        assert_eq!(
            payload(&first).len(),
            payload(&first_again).len(),
            "the same shape"
        );
        let opened = server.open(payload(&first_again)).unwrap();
        assert_eq!(
            Request::decode(&opened.body).unwrap(),
            Request::TryGet { key: "a".into() }
        );
        // The client's clock started after the server's: its stamp cannot
        // be ahead of the server's time since the handshake.
        let stamp = opened.stamp.expect("a request carries its stamp");
        assert!(stamp.sent <= server.age(), "{stamp:?} > {:?}", server.age());
        assert_eq!(stamp.patience, patient);
        // Replayed: the same frame again fails.
        assert!(server.open(payload(&first_again)).is_err());
        // Altered: one bit of the next frame flipped.
        let mut next = payload(&client.seal(Request::TryGet { key: "c".into() }.encode()));
        next[2] ^= 1;
        assert!(server.open(next).is_err());
        // Reflected: the client's own frame sent back to it.
        let (mut client, _) = pair(b"s3cret");
        let own = client.seal(Response::Ok.encode());
        assert!(client.open(payload(&own)).is_err());
        // Another secret, or too short to hold a tag.
        let (mut other, _) = pair(b"other");
        let (_, mut server) = pair(b"s3cret");
        assert!(
            server
                .open(payload(&other.seal(Response::Ok.encode())))
                .is_err()
        );
        assert!(server.open(vec![0; TAG_LEN - 1]).is_err());
    }

    #[test]
    fn proofs_are_bound_to_the_label_secret_and_both_hellos() {
        let proofs = Proofs::new(b"s", b"c-hello", b"s-hello");
        let server = proofs.server_proof();
        let client = proofs.client_proof();
        assert_ne!(server, client);
        assert!(proofs.is_server_proof(&server) && proofs.is_client_proof(&client));
        assert!(!proofs.is_server_proof(&client) && !proofs.is_client_proof(&server));
        for other in [
            Proofs::new(b"t", b"c-hello", b"s-hello"),
            Proofs::new(b"s", b"c-hellp", b"s-hello"),
            Proofs::new(b"s", b"c-hello", b"s-hellp"),
            // The length prefixes keep a byte from moving between parts.
            Proofs::new(b"s", b"c-hell", b"os-hello"),
        ] {
            assert!(!other.is_server_proof(&server) && !other.is_client_proof(&client));
        }
        assert!(!proofs.is_client_proof(&client[..TAG_LEN - 1]));
    }

    /// RFC 4231's test cases 2 (a short key) and 6 (a key longer than a
    /// block, which HMAC hashes first).
    #[test]
    fn keying_matches_rfc_4231() {
        let short = tag_of_raw(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(
            hex(&short),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        let long = tag_of_raw(
            &[0xaa; 131],
            b"Test Using Larger Than Block-Size Key - Hash Key First",
        );
        assert_eq!(
            hex(&long),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    fn tag_of_raw(key: &[u8], data: &[u8]) -> Tag {
        let mut mac = keyed(key);
        mac.update(data);
        mac.finalize().into_bytes().into()
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn nonces_are_fresh() {
        assert_ne!(fresh_nonce().unwrap(), fresh_nonce().unwrap());
    }
}
