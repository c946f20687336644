//! Serving one connection: who is admitted without a secret, the
//! handshake (under its small frame cap and deadline), then requests,
//! each checked against the limits from its first bytes and answered
//! sealed.

use std::io::{self, Read};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use super::super::wire::{
    self, DecodeError, FrameError, FrameSink, FrameSource, FrameTimeouts, HANDSHAKE_MAX_FRAME,
    Limits, Proofs, Request, Response, Session, code,
};
use super::Shared;
use crate::memory::{OverQuota, WaitError};
use crate::{AddError, Deadline};

/// Why a handshake ended without a session.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum HandshakeFailure {
    /// The client is refused: this error frame tells it why.
    Refuse { code: u8, message: String },
    /// The client went away, stalled past the deadline, or the connection
    /// failed: nobody to answer.
    Gone,
}

fn refusal(code: u8, message: impl Into<String>) -> HandshakeFailure {
    HandshakeFailure::Refuse {
        code,
        message: message.into(),
    }
}

/// Serves one client until it disconnects, misbehaves, or the server stops.
pub(crate) fn serve_connection(shared: &Shared, mut stream: TcpStream, peer: SocketAddr) {
    let opts = &shared.options;
    let _ = stream.set_nodelay(true);
    let handshake_deadline = Deadline::after(opts.handshake_timeout.max(Duration::from_millis(1)));
    let answer_within = || {
        handshake_deadline
            .remaining()
            .unwrap_or(Duration::from_millis(1))
    };
    if let Err(message) = admit(peer, stream.local_addr(), opts) {
        let within = answer_within();
        let unauthenticated = (&mut Session::plain(), DRAIN_BEFORE_HANDSHAKE);
        return send_error(&mut stream, unauthenticated, within, code::AUTH, message);
    }
    let secret = opts.secret.as_deref();
    match server_handshake(&mut stream, secret, shared.limits, &handshake_deadline) {
        Ok(session) => serve_requests(shared, stream, session),
        Err(HandshakeFailure::Refuse { code, message }) => {
            let within = answer_within();
            let unauthenticated = (&mut Session::plain(), DRAIN_BEFORE_HANDSHAKE);
            send_error(&mut stream, unauthenticated, within, code, message);
        }
        Err(HandshakeFailure::Gone) => {}
    }
}

/// Whether a client at `peer` may start a handshake: always with a secret
/// (it must then prove it holds it) or when told to take anyone; otherwise
/// only from this host (loopback, or the address it connected to, which a
/// client on another host cannot have).
fn admit(
    peer: SocketAddr,
    local: io::Result<SocketAddr>,
    opts: &super::TcpStoreServerOptions,
) -> Result<(), String> {
    if opts.secret.is_some() || opts.allow_unauthenticated_remote {
        return Ok(());
    }
    let peer_ip = peer.ip().to_canonical();
    let same_host =
        peer_ip.is_loopback() || local.is_ok_and(|local| local.ip().to_canonical() == peer_ip);
    if same_host {
        return Ok(());
    }
    crate::trace::event!(warn, %peer, "store server: refusing a client from another host: no secret is set");
    Err(format!(
        "this server has no secret, so it accepts clients of its own host only, and this client \
         connects from {peer_ip}; set the same NCCL_RS_STORE_SECRET on every rank \
         (TcpStoreServerOptions::with_secret and TcpStoreOptions::with_secret), or, on a network \
         where everyone who can reach the port may read and write every key, set \
         NCCL_RS_STORE_ALLOW_UNAUTHENTICATED=1 where the server starts \
         (TcpStoreServerOptions::with_unauthenticated_remote)"
    ))
}

/// The server's side of the handshake (see the `wire` module docs): reads
/// the client's `HELLO`, answers with its own (with a proof when both hold
/// a secret), checks the client's proof, and confirms with a sealed `OK`.
/// Every frame is at most [`HANDSHAKE_MAX_FRAME`] bytes and all of it ends
/// by `deadline`.
pub(crate) fn server_handshake<S: FrameSource + FrameSink + ?Sized>(
    stream: &mut S,
    secret: Option<&[u8]>,
    limits: Limits,
    deadline: &Deadline,
) -> Result<Session, HandshakeFailure> {
    let client_hello = read_handshake_frame(stream, deadline)?;
    let authenticate = match Request::decode(&client_hello) {
        Ok(Request::Hello { authenticate, .. }) => authenticate,
        Ok(_) => {
            return Err(refusal(
                code::PROTOCOL,
                "the first frame must be HELLO: the handshake comes first",
            ));
        }
        Err(e @ DecodeError::Version(_)) => return Err(refusal(code::PROTOCOL, e.to_string())),
        Err(e) => return Err(refusal(code::PROTOCOL, format!("malformed HELLO: {e}"))),
    };
    if secret.is_some() && !authenticate {
        return Err(refusal(
            code::AUTH,
            "this server requires a shared secret, and the client presented none",
        ));
    }
    let nonce = wire::fresh_nonce().map_err(|e| refusal(code::PROTOCOL, e.to_string()))?;
    let unproven = Response::Hello {
        nonce,
        limits,
        proof: None,
    }
    .encode();
    let Some(secret) = secret else {
        // A client that holds a secret refuses this answer itself: a server
        // that cannot prove it holds the secret may be anyone.
        write_within(stream, &unproven, deadline)?;
        return Ok(Session::plain());
    };
    let proofs = Proofs::new(secret, &client_hello, unproven.payload());
    let hello = Response::Hello {
        nonce,
        limits,
        proof: Some(proofs.server_proof()),
    }
    .encode();
    write_within(stream, &hello, deadline)?;
    let answer = read_handshake_frame(stream, deadline)?;
    match Request::decode(&answer) {
        Ok(Request::Proof(tag)) if proofs.is_client_proof(&tag) => {}
        Ok(Request::Proof(_)) => {
            return Err(refusal(
                code::AUTH,
                "the client's proof does not match: it holds a different secret than the server",
            ));
        }
        _ => {
            return Err(refusal(
                code::PROTOCOL,
                "expected the client's PROOF after the server's HELLO",
            ));
        }
    }
    let mut session = proofs.server_session();
    write_within(stream, &session.seal(Response::Ok.encode()), deadline)?;
    Ok(session)
}

/// Reads one handshake frame: small, and by the handshake's deadline.
fn read_handshake_frame<S: FrameSource + ?Sized>(
    stream: &mut S,
    deadline: &Deadline,
) -> Result<Vec<u8>, HandshakeFailure> {
    let left = deadline.remaining().ok_or(HandshakeFailure::Gone)?;
    let timeouts = FrameTimeouts {
        first_byte: Some(left),
        whole_frame: left,
    };
    match wire::read_frame(stream, HANDSHAKE_MAX_FRAME, Some(timeouts)) {
        Ok(payload) => Ok(payload),
        Err(FrameError::TooLarge(len)) => Err(refusal(
            code::TOO_LARGE,
            format!(
                "a frame of {len} bytes before the handshake is done; until then frames are at \
                 most {HANDSHAKE_MAX_FRAME} bytes (is the client an nccl-group TcpStore of the \
                 same version?)"
            ),
        )),
        Err(FrameError::Closed | FrameError::Io(_) | FrameError::Refused(_)) => {
            Err(HandshakeFailure::Gone)
        }
    }
}

fn write_within<S: FrameSink + ?Sized>(
    stream: &mut S,
    frame: &wire::Frame,
    deadline: &Deadline,
) -> Result<(), HandshakeFailure> {
    let left = deadline.remaining().ok_or(HandshakeFailure::Gone)?;
    wire::write_frame_within(stream, frame, left).map_err(|_| HandshakeFailure::Gone)
}

/// Serves requests on an authenticated connection until it ends.
fn serve_requests(shared: &Shared, mut stream: TcpStream, mut session: Session) {
    let opts = &shared.options;
    let io_timeout = opts.io_timeout.max(Duration::from_millis(1));
    let limits = shared.limits;
    let overhead = session.overhead();
    // Between frames a connection may stay idle; a frame, once started,
    // must arrive whole within the timeout.
    let timeouts = FrameTimeouts {
        first_byte: None,
        whole_frame: io_timeout,
    };
    // A request over the limits is refused from its first bytes: a `wait`
    // for 12 M keys costs neither its 57 MiB nor the time to read them.
    let mut over_limit = |first: &[u8], len: usize| {
        let body = &first[..first.len().min(len.saturating_sub(overhead))];
        match Request::decode_within(body, &limits) {
            Err(DecodeError::OverLimit(detail)) => Err(detail),
            _ => Ok(()),
        }
    };
    loop {
        let read = wire::read_frame_inspected(
            &mut stream,
            opts.max_frame_size,
            Some(timeouts),
            &mut over_limit,
        );
        let (code, message) = match read {
            Ok(payload) => match answer(shared, &mut stream, &mut session, payload, &limits) {
                Ok(response) => {
                    let frame = session.seal(response.encode());
                    if wire::write_frame_within(&mut stream, &frame, io_timeout).is_err() {
                        return;
                    }
                    continue;
                }
                Err(refused) => refused,
            },
            Err(FrameError::Closed | FrameError::Io(_)) => return,
            Err(FrameError::TooLarge(len)) => (
                code::TOO_LARGE,
                format!(
                    "frame of {len} bytes exceeds this server's maximum frame size of {} bytes",
                    opts.max_frame_size
                ),
            ),
            Err(FrameError::Refused(detail)) => (code::LIMIT, detail),
        };
        let admitted = (&mut session, DRAIN_AFTER_HANDSHAKE);
        return send_error(&mut stream, admitted, io_timeout, code, message);
    }
}

/// Opens, decodes and runs one request; an `Err` is sent as an error frame
/// and ends the connection.
fn answer(
    shared: &Shared,
    stream: &mut TcpStream,
    session: &mut Session,
    payload: Vec<u8>,
    limits: &Limits,
) -> Result<Response, (u8, String)> {
    let body = session.open(payload).map_err(|_| {
        (
            code::AUTH,
            "a frame failed authentication (altered, replayed, reordered or injected on the way)"
                .to_owned(),
        )
    })?;
    let request = match Request::decode_within(&body, limits) {
        Ok(request) => request,
        Err(DecodeError::OverLimit(detail)) => return Err((code::LIMIT, detail)),
        Err(e) => return Err((code::PROTOCOL, format!("malformed request: {e}"))),
    };
    handle(shared, request, &|| client_alive(stream))
}

/// Whether the client of a blocked request is still connected: a peek that
/// would block means "connected, nothing to read"; end-of-stream or an error
/// means it went away (its thread can stop waiting for it).
fn client_alive(stream: &TcpStream) -> bool {
    if stream.set_nonblocking(true).is_err() {
        return true;
    }
    let mut byte = [0u8; 1];
    let alive = match stream.peek(&mut byte) {
        Ok(0) => false,
        Ok(_) => true,
        Err(e) => matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
        ),
    };
    // If blocking mode cannot be restored, the next read or write fails and
    // the connection ends: no hang either way.
    let _ = stream.set_nonblocking(false);
    alive
}

/// What the server reads and discards after refusing a peer that has not
/// finished its handshake: enough for what a real client sends before
/// reading a refusal (its HELLO), not the body of an oversized frame.
const DRAIN_BEFORE_HANDSHAKE: usize = 64 << 10;
/// The same after the handshake: a real client's oversized request.
const DRAIN_AFTER_HANDSHAKE: usize = 4 << 20;

/// Sends an error frame (sealed when the session is) and ends the
/// connection. The client may still be sending (e.g. the body of an
/// oversized frame): closing with unread data would reset the connection
/// and could destroy the error frame before the client reads it, so
/// half-close first and discard what still arrives, for a bounded time and
/// amount.
fn send_error(
    stream: &mut TcpStream,
    (session, drain_max): (&mut Session, usize),
    write_limit: Duration,
    code: u8,
    message: String,
) {
    const DRAIN_FOR: Duration = Duration::from_millis(500);
    crate::trace::event!(warn, code, %message, "store server: refusing a request and closing its connection");
    let frame = session.seal(Response::Error { code, message }.encode());
    if wire::write_frame_within(stream, &frame, write_limit).is_err() {
        return;
    }
    let _ = stream.shutdown(Shutdown::Write);
    let start = Instant::now();
    let mut drained = 0;
    let mut buf = [0u8; 8192];
    while drained < drain_max {
        let left = DRAIN_FOR.saturating_sub(start.elapsed());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            break;
        }
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => drained += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
}

/// Runs one request.
fn handle(
    shared: &Shared,
    request: Request,
    alive: &dyn Fn() -> bool,
) -> Result<Response, (u8, String)> {
    let table = &shared.table;
    let waited = |e: WaitError| match e {
        WaitError::Timeout { missing, waited } => Ok(Response::Timeout { missing, waited }),
        WaitError::Closed => Err((code::SHUTDOWN, "the server is shutting down".to_owned())),
        WaitError::Abandoned => Err((code::PROTOCOL, "the client went away".to_owned())),
    };
    let over_quota = |OverQuota(detail): OverQuota| (code::LIMIT, detail);
    Ok(match request {
        Request::Hello { .. } | Request::Proof(_) => {
            return Err((
                code::PROTOCOL,
                "HELLO or PROOF after the handshake is done".to_owned(),
            ));
        }
        Request::Set { key, value } => {
            table.set(&key, value).map_err(over_quota)?;
            Response::Ok
        }
        Request::Get { key, timeout } => match table.get_while(&key, timeout, Some(alive)) {
            Ok(v) => Response::Value(v),
            Err(e) => return waited(e),
        },
        Request::TryGet { key } => match table.try_get(&key) {
            Some(v) => Response::Value(v),
            None => Response::NotFound,
        },
        Request::CompareSet { key, expected, new } => {
            let outcome = table
                .compare_set(&key, expected.as_deref(), &new)
                .map_err(over_quota)?;
            Response::CompareSet {
                swapped: outcome.swapped,
                current: outcome.current,
            }
        }
        Request::Add { key, delta } => match table.add(&key, delta) {
            Ok(v) => Response::Int(v),
            Err(AddError::NotAnInteger(v)) => Response::NotAnInteger(v),
            Err(AddError::Overflow(v)) => Response::Overflow(v),
            Err(AddError::OverQuota(detail)) => return Err((code::LIMIT, detail)),
        },
        Request::Wait { keys, timeout } => {
            let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
            match table.wait_while(&refs, timeout, Some(alive)) {
                Ok(()) => Response::Ok,
                Err(e) => return waited(e),
            }
        }
        Request::Delete { key } => Response::Bool(table.delete(&key)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tcp::TcpStoreServerOptions;

    #[test]
    fn without_a_secret_only_this_host_is_admitted() {
        let opts = TcpStoreServerOptions::default();
        let local: SocketAddr = "10.0.0.5:29500".parse().unwrap();
        for peer in [
            "127.0.0.1:4000",
            "127.8.9.10:4000",
            "[::1]:4000",
            "[::ffff:127.0.0.1]:4000",
            "10.0.0.5:4000",
        ] {
            assert_eq!(
                admit(peer.parse().unwrap(), Ok(local), &opts),
                Ok(()),
                "{peer}"
            );
        }
        let message = admit("10.0.0.6:4000".parse().unwrap(), Ok(local), &opts).unwrap_err();
        assert!(
            message.contains("10.0.0.6")
                && message.contains("NCCL_RS_STORE_SECRET")
                && message.contains("NCCL_RS_STORE_ALLOW_UNAUTHENTICATED=1"),
            "{message}"
        );
        // A local address that cannot be read admits loopback only.
        let unknown = || Err(io::Error::other("no local address"));
        assert!(admit("10.0.0.5:4000".parse().unwrap(), unknown(), &opts).is_err());
        // With a secret (proved in the handshake) or the opt-in: anyone.
        let remote: SocketAddr = "192.0.2.1:4000".parse().unwrap();
        let with_secret = TcpStoreServerOptions::default().with_secret(b"s".to_vec());
        assert_eq!(admit(remote, unknown(), &with_secret), Ok(()));
        let opted_in = TcpStoreServerOptions::default().with_unauthenticated_remote(true);
        assert_eq!(admit(remote, unknown(), &opted_in), Ok(()));
    }
}
