//! Fuzzing the handshake: arbitrary bytes as the client's frames to the
//! server's side, and as the server's frames to the client's side.

use std::io::{self, Read, Write};
use std::time::Duration;

use super::super::client::{HandshakeError, client_handshake};
use super::super::server::{Handshake, Step, oversized};
use super::super::wire::{
    self, FrameError, FrameSource, HANDSHAKE_MAX_FRAME, Limits, Request, Response, Session, code,
};
use super::{Pieces, SAMPLE_LIMITS};

/// The secret of the fuzzed sides that hold one.
const SECRET: &[u8] = b"fuzzed-secret";

/// What [`handshake`] made of its input.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct HandshakeReport {
    /// Handshakes the server side finished (only ever without a secret).
    pub server_sessions: usize,
    /// Handshakes the client side finished (only ever without a secret).
    pub client_sessions: usize,
    /// Frames either side wrote, every one checked.
    pub frames_written: usize,
    /// Error frames the server side sent.
    pub refusals: usize,
}

/// Runs both sides of the handshake against `data`: the server's side reads
/// it as a client's frames, the client's side as a server's answers.
///
/// The first byte chooses: bit 0 whether the server holds a secret, bit 1
/// whether the client does, bits 2 to 5 how many bytes each read returns
/// (1 to 16). The rest is the peer's bytes.
///
/// Never panics. Returns `Err` when an invariant breaks: a side that holds
/// the secret finishing a handshake with bytes that could not know it (the
/// nonces are fresh, so no input can hold a valid proof), a side finishing
/// without the `HELLO` it requires, a frame written that is over the cap
/// or not a valid message, or a side that holds no secret sending a sealed
/// or proving frame.
pub fn handshake(data: &[u8]) -> Result<HandshakeReport, String> {
    let mut report = HandshakeReport::default();
    let Some((&control, input)) = data.split_first() else {
        return Ok(report);
    };
    let server_secret = (control & 1 == 1).then_some(SECRET);
    let client_secret = (control & 2 == 2).then_some(SECRET);
    let piece = usize::from((control >> 2) % 16) + 1;
    let first_frame = first_frame(input);

    let mut server = Duplex::new(input, piece);
    match server_handshake(&mut server, server_secret, SAMPLE_LIMITS) {
        Ok(session) => {
            if server_secret.is_some() || session.is_sealed() {
                return Err(format!(
                    "the server side authenticated {input:02x?} without the secret"
                ));
            }
            if !matches!(
                first_frame.map(Request::decode),
                Some(Ok(Request::Hello { .. }))
            ) {
                return Err(format!(
                    "the server side finished without a HELLO: {input:02x?}"
                ));
            }
            report.server_sessions += 1;
        }
        Err(HandshakeFailure::Refuse { code, message }) => {
            if message.is_empty() || ![code::AUTH, code::PROTOCOL, code::TOO_LARGE].contains(&code)
            {
                return Err(format!(
                    "a refusal with code {code} and message {message:?}"
                ));
            }
            report.refusals += 1;
        }
        Err(HandshakeFailure::Gone) => {}
    }
    for frame in split_frames(&server.output)? {
        match Response::decode(frame) {
            Ok(Response::Hello { proof, .. }) if proof.is_some() != server_secret.is_some() => {
                return Err(
                    "the server's HELLO carries a proof exactly when it has a secret".into(),
                );
            }
            Ok(_) => report.frames_written += 1,
            // The confirmation after a proof is sealed; none can be reached.
            Err(e) => {
                return Err(format!(
                    "the server side wrote a frame that is not a response: {e}"
                ));
            }
        }
    }

    let mut client = Duplex::new(input, piece);
    match client_handshake(&mut client, client_secret) {
        Ok((session, _limits)) => {
            if client_secret.is_some() || session.is_sealed() {
                return Err(format!(
                    "the client side accepted {input:02x?} as a server holding the secret"
                ));
            }
            if !matches!(
                first_frame.map(Response::decode),
                Some(Ok(Response::Hello { proof: None, .. }))
            ) {
                return Err(format!(
                    "the client side finished without a HELLO: {input:02x?}"
                ));
            }
            report.client_sessions += 1;
        }
        Err(
            HandshakeError::Refused(_)
            | HandshakeError::Auth(_)
            | HandshakeError::Protocol(_)
            | HandshakeError::TooLarge(_)
            | HandshakeError::Closed
            | HandshakeError::Io(_),
        ) => {}
    }
    for frame in split_frames(&client.output)? {
        match Request::decode(frame) {
            Ok(Request::Hello { authenticate, .. }) if authenticate != client_secret.is_some() => {
                return Err(
                    "the client's HELLO says it authenticates exactly when it has a secret".into(),
                );
            }
            Ok(Request::Proof(_)) if client_secret.is_none() => {
                return Err("the client sent a PROOF without a secret".into());
            }
            Ok(_) => report.frames_written += 1,
            Err(e) => {
                return Err(format!(
                    "the client side wrote a frame that is not a request: {e}"
                ));
            }
        }
    }
    Ok(report)
}

/// Why the server's side of a handshake ended without a session.
#[derive(Debug, PartialEq, Eq)]
enum HandshakeFailure {
    /// The client is refused: the server would send this error frame.
    Refuse { code: u8, message: String },
    /// The client went away or the stream failed: nobody to answer.
    Gone,
}

/// The server's handshake (the state machine its gate feeds) over a
/// blocking stream: frames of at most [`HANDSHAKE_MAX_FRAME`] bytes.
fn server_handshake<S: Read + Write>(
    stream: &mut S,
    secret: Option<&[u8]>,
    limits: Limits,
) -> Result<Session, HandshakeFailure> {
    let mut handshake = Handshake::Hello;
    loop {
        let payload = match wire::read_frame(stream, HANDSHAKE_MAX_FRAME) {
            Ok(payload) => payload,
            Err(FrameError::TooLarge(len)) => {
                return Err(HandshakeFailure::Refuse {
                    code: code::TOO_LARGE,
                    message: oversized(len),
                });
            }
            Err(FrameError::Closed | FrameError::Io(_)) => return Err(HandshakeFailure::Gone),
        };
        let (frame, session) = match handshake.step(payload, secret, limits) {
            Step::Reply(frame) => (frame, None),
            Step::Done(frame, session) => (frame, Some(*session)),
            Step::Refuse(code, message) => return Err(HandshakeFailure::Refuse { code, message }),
        };
        wire::write_frame(stream, &frame).map_err(|_| HandshakeFailure::Gone)?;
        if let Some(session) = session {
            return Ok(session);
        }
    }
}

/// Seeds for a corpus: a control byte, then the frames a real peer sends
/// (valid in form; the proofs cannot match fresh nonces).
pub fn handshake_samples() -> Vec<Vec<u8>> {
    let client = |authenticate| {
        Request::Hello {
            nonce: [0x11; wire::NONCE_LEN],
            authenticate,
        }
        .encode()
    };
    let server = |proof| {
        Response::Hello {
            nonce: [0x22; wire::NONCE_LEN],
            limits: SAMPLE_LIMITS,
            proof,
        }
        .encode()
    };
    let proof = Request::Proof([0x33; wire::TAG_LEN]).encode();
    let refusal = Response::Error {
        code: code::AUTH,
        message: "refused".into(),
    }
    .encode();
    let with = |control: u8, frames: &[&wire::Frame]| {
        let mut bytes = vec![control];
        for frame in frames {
            bytes.extend_from_slice(frame.as_bytes());
        }
        bytes
    };
    vec![
        with(0, &[&client(false)]),
        with(3, &[&client(true), &proof]),
        with(0, &[&server(None)]),
        with(
            3,
            &[&server(Some([0x44; wire::TAG_LEN])), &Response::Ok.encode()],
        ),
        with(2, &[&refusal]),
        with(1, &[&client(false)]),
    ]
}

/// The payload of the first frame in `input`, if it holds a whole one.
fn first_frame(input: &[u8]) -> Option<&[u8]> {
    let header = input.get(..4)?;
    let len = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
    input.get(4..4usize.checked_add(len)?)
}

/// Splits what a side wrote into frame payloads, each within the cap.
fn split_frames(mut output: &[u8]) -> Result<Vec<&[u8]>, String> {
    let mut frames = Vec::new();
    while !output.is_empty() {
        let payload = first_frame(output).ok_or("a side wrote a partial frame")?;
        if payload.len() > HANDSHAKE_MAX_FRAME {
            return Err(format!(
                "a side wrote a {}-byte frame during the handshake",
                payload.len()
            ));
        }
        frames.push(payload);
        output = &output[4 + payload.len()..];
    }
    Ok(frames)
}

/// A peer in memory: reads come from the input in pieces, writes are kept.
struct Duplex<'a> {
    input: Pieces<'a>,
    output: Vec<u8>,
}

impl<'a> Duplex<'a> {
    fn new(data: &'a [u8], piece: usize) -> Self {
        Duplex {
            input: Pieces {
                data,
                pos: 0,
                piece,
            },
            output: Vec::new(),
        }
    }
}

impl Read for Duplex<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.input.read(buf)
    }
}

impl FrameSource for Duplex<'_> {
    fn set_read_timeout(&mut self, _timeout: Option<Duration>) -> io::Result<()> {
        Ok(())
    }
}

impl Write for Duplex<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.output.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
