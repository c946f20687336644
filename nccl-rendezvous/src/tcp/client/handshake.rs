//! The client's side of the handshake (see the `wire` module docs): a
//! fresh nonce, the server's proof checked before the client proves
//! anything, then the session both sides seal frames with.

use std::io::{self, Write};
use std::time::Duration;

use crate::tcp::wire::{
    self, DecodeError, FrameError, FrameSource, HANDSHAKE_MAX_FRAME, Limits, Proofs, Request,
    Response, Session,
};

/// Why a handshake failed, before it is told in a [`StoreError`](crate::StoreError)
/// naming the server.
#[derive(Debug)]
pub(crate) enum HandshakeError {
    /// The server answered with this `ERROR` frame.
    Refused(Response),
    /// The two sides do not hold the same secret (or only one holds one).
    Auth(String),
    /// The peer does not speak this protocol (or this version of it).
    Protocol(String),
    /// A frame over the handshake's cap.
    TooLarge(u64),
    /// The server closed the connection.
    Closed,
    /// Writing or reading failed (a timeout included).
    Io(io::Error),
}

/// Runs the handshake on a fresh connection and returns the session and
/// the server's limits.
///
/// The stream's own read and write timeouts bound each step.
pub(crate) fn client_handshake<S: FrameSource + Write + ?Sized>(
    stream: &mut S,
    secret: Option<&[u8]>,
) -> Result<(Session, Limits), HandshakeError> {
    let nonce = wire::fresh_nonce().map_err(HandshakeError::Io)?;
    let hello = Request::Hello {
        nonce,
        authenticate: secret.is_some(),
    }
    .encode();
    let answer = send_and_read(stream, &hello)?;
    let (server_nonce, limits, proof) = match decode(&answer)? {
        Response::Hello {
            nonce,
            limits,
            proof,
        } => (nonce, limits, proof),
        refused @ Response::Error { .. } => return Err(HandshakeError::Refused(refused)),
        other => {
            return Err(HandshakeError::Protocol(format!(
                "unexpected {} answer to HELLO",
                other.name()
            )));
        }
    };
    let (secret, proof) = match (secret, proof) {
        (None, None) => return Ok((Session::plain(), limits)),
        (None, Some(_)) => {
            return Err(HandshakeError::Protocol(
                "the server sent a proof, though this client presented no secret".into(),
            ));
        }
        (Some(_), None) => {
            return Err(HandshakeError::Auth(
                "the server holds no secret, but this client does: it was started without \
                 NCCL_RS_STORE_SECRET, or it is not the server this client expects (this \
                 client refuses to talk to a server that cannot prove it holds the secret)"
                    .into(),
            ));
        }
        (Some(secret), Some(proof)) => (secret, proof),
    };
    let unproven = Response::Hello {
        nonce: server_nonce,
        limits,
        proof: None,
    }
    .encode();
    let proofs = Proofs::new(secret, hello.payload(), unproven.payload());
    if !proofs.is_server_proof(&proof) {
        return Err(HandshakeError::Auth(
            "the server's proof does not match this client's secret: the server holds a \
             different secret, or it is not the real server"
                .into(),
        ));
    }
    let confirmation = send_and_read(stream, &Request::Proof(proofs.client_proof()).encode())?;
    // A refusal comes before the session exists, so it is not sealed.
    if let Ok(refused @ Response::Error { .. }) = Response::decode(&confirmation) {
        return Err(HandshakeError::Refused(refused));
    }
    let mut session = proofs.client_session();
    let opened = session.open(confirmation).map_err(|_| {
        HandshakeError::Auth(
            "the server's confirmation failed authentication: something between this client \
             and the server altered it"
                .into(),
        )
    })?;
    match decode(&opened.body)? {
        Response::Ok => Ok((session, limits)),
        other => Err(HandshakeError::Protocol(format!(
            "unexpected {} answer to PROOF",
            other.name()
        ))),
    }
}

/// Writes a handshake frame and reads the answer.
///
/// When the write fails, the server may already have answered (a refusal) and
/// closed: that answer is the better error.
fn send_and_read<S: FrameSource + Write + ?Sized>(
    stream: &mut S,
    frame: &wire::Frame,
) -> Result<Vec<u8>, HandshakeError> {
    let written = wire::write_frame(stream, frame);
    if written.is_err() {
        // Its answer is already here, or not coming.
        let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
    }
    match (wire::read_frame(stream, HANDSHAKE_MAX_FRAME), written) {
        (Ok(payload), _) => Ok(payload),
        (Err(_), Err(write_error)) => Err(HandshakeError::Io(write_error)),
        (Err(FrameError::Closed), Ok(())) => Err(HandshakeError::Closed),
        (Err(FrameError::TooLarge(len)), Ok(())) => Err(HandshakeError::TooLarge(len)),
        (Err(FrameError::Io(e)), Ok(())) => Err(HandshakeError::Io(e)),
    }
}

fn decode(payload: &[u8]) -> Result<Response, HandshakeError> {
    Response::decode(payload).map_err(|e| match e {
        DecodeError::Version(version) => HandshakeError::Protocol(format!(
            "the server speaks protocol version {version}, this client version {}; use the \
             same nccl-rendezvous version on every rank and on the server",
            wire::VERSION
        )),
        other => HandshakeError::Protocol(format!("answer to HELLO: {other}")),
    })
}
