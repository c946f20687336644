//! Entry points for fuzzing the TCP store's wire decoding and its
//! handshake, behind the `fuzzing` feature. Their shapes follow the
//! fuzz targets' needs and may change in any release.
//!
//! The `store_frame` and `store_handshake` cargo-fuzz targets (`fuzz/` at
//! the workspace root, run by `cargo xtask fuzz`) and CPU tests of the
//! normal suite feed arbitrary bytes to [`decode_frame`] and
//! [`handshake()`].

mod handshake;

use std::io::{self, Read};
use std::time::Duration;

use super::wire::{self, FrameError, FrameSource, FrameTimeouts, Limits, Request, Response};

pub use handshake::{HandshakeReport, handshake, handshake_samples};

/// The largest frame the frame reader accepts in [`decode_frame`]: small, so
/// that fuzzed length headers also reach the "too large" path.
pub const MAX_FRAME: usize = 1024;

/// What [`decode_frame`] made of its input.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Report {
    /// Frames the frame reader took from the input.
    pub frames: usize,
    /// Payloads that decoded as a request.
    pub requests: usize,
    /// Payloads that decoded as a response.
    pub responses: usize,
}

/// Feeds `data` to the frame reader and to the request and response
/// decoders, and checks what they produce.
///
/// The whole input goes to both decoders as one payload. Then the input
/// after its first byte is read as a stream of frames, the way the server
/// reads a connection, until the reader stops (end of input, a frame over
/// [`MAX_FRAME`], or a frame cut short); the first byte sets how many bytes
/// each read returns (1 to 16), since a peer's bytes arrive in pieces. Each
/// frame's payload goes to both decoders.
///
/// Never panics: a panic from inside is a bug the fuzzer found. Returns
/// `Err` with a description when an invariant breaks, which is a bug too: a
/// decoded request that encodes to other bytes, a decoded response that
/// does not decode the same after encoding, a frame over the maximum, a
/// frame whose bytes are not the input's, or the reader stopping for a
/// reason the input does not explain.
pub fn decode_frame(data: &[u8]) -> Result<Report, String> {
    let mut report = Report::default();
    check_payload(data, &mut report)?;
    let Some((&control, stream)) = data.split_first() else {
        return Ok(report);
    };
    let mut source = Pieces {
        data: stream,
        pos: 0,
        piece: usize::from(control % 16) + 1,
    };
    // The server's mode: a deadline per frame (far off here).
    let timeouts = FrameTimeouts {
        first_byte: None,
        whole_frame: Duration::from_secs(3600),
    };
    loop {
        let start = source.pos;
        let left = &stream[start..];
        let declared = left
            .get(..4)
            .map(|h| u32::from_be_bytes([h[0], h[1], h[2], h[3]]));
        match wire::read_frame(&mut source, MAX_FRAME, Some(timeouts)) {
            Ok(payload) => {
                let expected = left.get(4..4 + payload.len());
                if declared != u32::try_from(payload.len()).ok()
                    || expected != Some(payload.as_slice())
                    || source.pos != start + 4 + payload.len()
                    || payload.len() > MAX_FRAME
                {
                    return Err(format!(
                        "frame at offset {start}: the reader returned {} payload bytes and \
                         stopped at offset {}, but the header declares {declared:?}",
                        payload.len(),
                        source.pos
                    ));
                }
                report.frames += 1;
                check_payload(&payload, &mut report)?;
            }
            Err(FrameError::Closed) => {
                return if left.is_empty() {
                    Ok(report)
                } else {
                    Err(format!(
                        "the reader reported a clean close at offset {start} with {} bytes left",
                        left.len()
                    ))
                };
            }
            Err(FrameError::TooLarge(len)) => {
                return if declared.map(u64::from) == Some(len) && len > MAX_FRAME as u64 {
                    Ok(report)
                } else {
                    Err(format!(
                        "frame at offset {start}: refused as {len} bytes (maximum {MAX_FRAME}), \
                         but the header declares {declared:?}"
                    ))
                };
            }
            Err(FrameError::Refused(detail)) => {
                return Err(format!(
                    "frame at offset {start}: refused ({detail}) though nothing inspects it"
                ));
            }
            Err(FrameError::Io(e)) => {
                let needed = declared.map_or(4, |len| (len as usize).saturating_add(4));
                return if e.kind() == io::ErrorKind::UnexpectedEof && left.len() < needed {
                    Ok(report)
                } else {
                    Err(format!(
                        "frame at offset {start}: read error {e} with {} bytes left and {needed} \
                         needed",
                        left.len()
                    ))
                };
            }
        }
    }
}

/// The limits the sample `HELLO`s announce, and the fuzzed server's.
const SAMPLE_LIMITS: Limits = Limits {
    max_frame: 1 << 20,
    max_key_len: 256,
    max_value_len: 4096,
    max_keys: 16,
};

/// Valid frames (length header included) of every request and response
/// kind: seeds for a fuzzer's corpus and for mutation tests.
pub fn sample_frames() -> Vec<Vec<u8>> {
    let key = || "rank0/uid".to_owned();
    let requests = [
        Request::Hello {
            nonce: [0x5a; wire::NONCE_LEN],
            authenticate: false,
        },
        Request::Hello {
            nonce: [0xa5; wire::NONCE_LEN],
            authenticate: true,
        },
        Request::Proof([0x17; wire::TAG_LEN]),
        Request::Set {
            key: key(),
            value: b"value".to_vec(),
        },
        Request::Get {
            key: key(),
            timeout: Duration::from_millis(1500),
        },
        Request::TryGet { key: key() },
        Request::CompareSet {
            key: key(),
            expected: Some(b"old".to_vec()),
            new: b"new".to_vec(),
        },
        Request::CompareSet {
            key: key(),
            expected: None,
            new: Vec::new(),
        },
        Request::Add {
            key: key(),
            delta: -3,
        },
        Request::Wait {
            keys: vec![key(), "b".to_owned()],
            timeout: Duration::from_secs(2),
        },
        Request::Delete { key: key() },
    ];
    let responses = [
        Response::Hello {
            nonce: [0x3c; wire::NONCE_LEN],
            limits: SAMPLE_LIMITS,
            proof: None,
        },
        Response::Hello {
            nonce: [0xc3; wire::NONCE_LEN],
            limits: SAMPLE_LIMITS,
            proof: Some([0x71; wire::TAG_LEN]),
        },
        Response::Ok,
        Response::Value(b"value".to_vec()),
        Response::NotFound,
        Response::Int(42),
        Response::Bool(true),
        Response::CompareSet {
            swapped: true,
            current: Some(b"new".to_vec()),
        },
        Response::CompareSet {
            swapped: false,
            current: None,
        },
        Response::Timeout {
            missing: vec![key()],
            waited: Duration::from_millis(10),
        },
        Response::NotAnInteger(b"x".to_vec()),
        Response::Overflow(i64::MAX),
        Response::Error {
            code: wire::code::PROTOCOL,
            message: "malformed request".to_owned(),
        },
    ];
    let requests = requests.iter().map(|r| r.encode().as_bytes().to_vec());
    let responses = responses.iter().map(|r| r.encode().as_bytes().to_vec());
    requests.chain(responses).collect()
}

/// Decodes one payload both ways and checks that what decodes round-trips.
fn check_payload(payload: &[u8], report: &mut Report) -> Result<(), String> {
    if let Ok(request) = Request::decode(payload) {
        let frame = request.encode();
        if frame.as_bytes().get(4..) != Some(payload) {
            return Err(format!(
                "request {request:?} decoded from {payload:02x?} encodes to {:02x?}",
                frame.as_bytes()
            ));
        }
        report.requests += 1;
    }
    if let Ok(response) = Response::decode(payload) {
        let frame = response.encode();
        let again = frame.as_bytes().get(4..).map(Response::decode);
        if again.as_ref().and_then(|r| r.as_ref().ok()) != Some(&response) {
            return Err(format!(
                "response {response:?} decoded from {payload:02x?} decodes as {again:?} after \
                 encoding"
            ));
        }
        report.responses += 1;
    }
    Ok(())
}

/// An in-memory byte stream that hands out at most `piece` bytes per read.
struct Pieces<'a> {
    data: &'a [u8],
    pos: usize,
    piece: usize,
}

impl Read for Pieces<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let rest = &self.data[self.pos..];
        let n = buf.len().min(self.piece).min(rest.len());
        buf[..n].copy_from_slice(&rest[..n]);
        self.pos += n;
        Ok(n)
    }
}

impl FrameSource for Pieces<'_> {
    fn set_read_timeout(&mut self, _timeout: Option<Duration>) -> io::Result<()> {
        Ok(())
    }
}
