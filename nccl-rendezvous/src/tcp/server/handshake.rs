//! The server's side of the handshake (see the `wire` module docs), as a
//! state machine the gate's event loop feeds one frame at a time: read the
//! client's `HELLO`, answer with the server's own (with a proof when both
//! hold a secret), check the client's `PROOF`, confirm with a sealed `OK`.
//! The fuzzers drive the same machine over a blocking stream.

use super::super::wire::{
    self, DecodeError, Frame, HANDSHAKE_MAX_FRAME, Limits, Proofs, Request, Response, Session, code,
};

/// What the server does after a handshake frame.
pub(crate) enum Step {
    /// Sends this frame and waits for the client's next one.
    Reply(Frame),
    /// Sends this frame: the handshake is done, frames now go in `Session`.
    Done(Frame, Box<Session>),
    /// Refuses the client with this code and message.
    Refuse(u8, String),
}

/// Where a handshake is.
pub(crate) enum Handshake {
    /// Waiting for the client's `HELLO`.
    Hello,
    /// Waiting for the client's `PROOF` of the secret: both `HELLO`s as
    /// they crossed the wire (the server's without its proof).
    Proof {
        client_hello: Vec<u8>,
        server_hello: Frame,
    },
}

fn refuse(code: u8, message: impl Into<String>) -> Step {
    Step::Refuse(code, message.into())
}

impl Handshake {
    /// Takes the client's next frame.
    pub(crate) fn step(&mut self, payload: Vec<u8>, secret: Option<&[u8]>, limits: Limits) -> Step {
        match std::mem::replace(self, Handshake::Hello) {
            Handshake::Hello => self.hello(payload, secret, limits),
            Handshake::Proof {
                client_hello,
                server_hello,
            } => proof(&payload, secret, &client_hello, &server_hello),
        }
    }

    fn hello(&mut self, client_hello: Vec<u8>, secret: Option<&[u8]>, limits: Limits) -> Step {
        let authenticate = match Request::decode(&client_hello) {
            Ok(Request::Hello { authenticate, .. }) => authenticate,
            Ok(_) => {
                return refuse(
                    code::PROTOCOL,
                    "the first frame must be HELLO: the handshake comes first",
                );
            }
            Err(e @ DecodeError::Version(_)) => return refuse(code::PROTOCOL, e.to_string()),
            Err(e) => return refuse(code::PROTOCOL, format!("malformed HELLO: {e}")),
        };
        if secret.is_some() && !authenticate {
            return refuse(
                code::AUTH,
                "this server requires a shared secret, and the client presented none",
            );
        }
        let nonce = match wire::fresh_nonce() {
            Ok(nonce) => nonce,
            Err(e) => return refuse(code::PROTOCOL, e.to_string()),
        };
        let unproven = Response::Hello {
            nonce,
            limits,
            proof: None,
        }
        .encode();
        let Some(secret) = secret else {
            // A client that holds a secret refuses this answer itself: a
            // server that cannot prove it holds the secret may be anyone.
            return Step::Done(unproven, Box::new(Session::plain()));
        };
        let proofs = Proofs::new(secret, &client_hello, unproven.payload());
        let hello = Response::Hello {
            nonce,
            limits,
            proof: Some(proofs.server_proof()),
        }
        .encode();
        *self = Handshake::Proof {
            client_hello,
            server_hello: unproven,
        };
        Step::Reply(hello)
    }
}

fn proof(payload: &[u8], secret: Option<&[u8]>, client_hello: &[u8], server_hello: &Frame) -> Step {
    let Some(secret) = secret else {
        return refuse(code::PROTOCOL, "expected nothing more of the handshake");
    };
    let proofs = Proofs::new(secret, client_hello, server_hello.payload());
    match Request::decode(payload) {
        Ok(Request::Proof(tag)) if proofs.is_client_proof(&tag) => {
            let mut session = proofs.server_session();
            Step::Done(session.seal(Response::Ok.encode()), Box::new(session))
        }
        Ok(Request::Proof(_)) => refuse(
            code::AUTH,
            "the client's proof does not match: it holds a different secret than the server",
        ),
        _ => refuse(
            code::PROTOCOL,
            "expected the client's PROOF after the server's HELLO",
        ),
    }
}

/// Why a handshake frame was too large, for the refusal.
pub(crate) fn oversized(len: u64) -> String {
    format!(
        "a frame of {len} bytes before the handshake is done; until then frames are at most \
         {HANDSHAKE_MAX_FRAME} bytes (is the client an nccl-rendezvous TcpStore of the same \
         version?)"
    )
}
