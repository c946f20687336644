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

use super::wire::{
    self, DecodeError, Incoming, IncomingError, Limits, Request, RequestLimits, Response, Rules,
    Scan,
};

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

/// Feeds `data` to the server's frame assembler and to the request and
/// response decoders, and checks what they produce.
///
/// The whole input goes to both decoders, and to the request scan the
/// server checks requests with as they arrive, as one payload. Then the
/// input after its first byte is fed to the assembler the way the server
/// feeds it a connection's bytes, until it refuses a frame over
/// [`MAX_FRAME`] or the input ends; the first byte sets how many bytes
/// each read gives (1 to 16), since a peer's bytes arrive in pieces. Each
/// frame's payload goes to the decoders and the scan.
///
/// Never panics: a panic from inside is a bug the fuzzer found. Returns
/// `Err` with a description when an invariant breaks, which is a bug too: a
/// decoded request that encodes to other bytes, a decoded response that
/// does not decode the same after encoding, a scan that refuses what the
/// decoder takes or refuses a limit differently, a frame over the maximum,
/// a frame whose bytes are not the input's, or the assembler stopping for
/// a reason the input does not explain.
pub fn decode_frame(data: &[u8]) -> Result<Report, String> {
    let mut report = Report::default();
    check_payload(data, &mut report)?;
    let Some((&control, stream)) = data.split_first() else {
        return Ok(report);
    };
    let piece = usize::from(control % 16) + 1;
    let rules = Rules {
        max: MAX_FRAME,
        requests: None,
    };
    let mut incoming = Incoming::default();
    // Where the frame under way starts, and how far the input was fed.
    let (mut start, mut fed) = (0, 0);
    while fed < stream.len() {
        let declared = stream
            .get(start..start + 4)
            .map(|h| u32::from_be_bytes([h[0], h[1], h[2], h[3]]));
        let read = &stream[fed..(fed + piece).min(stream.len())];
        let (taken, whole) = match incoming.push(read, &rules) {
            Ok(progress) => progress,
            Err(IncomingError::TooLarge(len)) => {
                return if declared.map(u64::from) == Some(len) && len > MAX_FRAME as u64 {
                    Ok(report)
                } else {
                    Err(format!(
                        "frame at offset {start}: refused as {len} bytes (maximum {MAX_FRAME}), \
                         but the header declares {declared:?}"
                    ))
                };
            }
            Err(IncomingError::Refused(e)) => {
                return Err(format!(
                    "frame at offset {start}: refused ({e}) though nothing inspects it"
                ));
            }
        };
        if taken == 0 {
            return Err(format!("the assembler took nothing at offset {fed}"));
        }
        fed += taken;
        let Some(payload) = whole else {
            continue;
        };
        let expected = stream.get(start + 4..start + 4 + payload.len());
        if declared != u32::try_from(payload.len()).ok()
            || expected != Some(payload.as_slice())
            || fed != start + 4 + payload.len()
            || payload.len() > MAX_FRAME
        {
            return Err(format!(
                "frame at offset {start}: the assembler returned {} payload bytes and stopped at \
                 offset {fed}, but the header declares {declared:?}",
                payload.len()
            ));
        }
        report.frames += 1;
        check_payload(&payload, &mut report)?;
        start = fed;
    }
    // The input ended: a frame under way must be one it cut short.
    let left = stream.len() - start;
    let needed = stream.get(start..start + 4).map_or(4, |h| {
        4 + u32::from_be_bytes([h[0], h[1], h[2], h[3]]) as usize
    });
    if !incoming.is_idle() && left >= needed {
        return Err(format!(
            "the assembler holds an unfinished frame at offset {start}, though all {needed} of \
             its bytes were fed"
        ));
    }
    Ok(report)
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
        Request::SetSession {
            key: key(),
            value: b"alive".to_vec(),
            owner: [0x42; wire::OWNER_LEN],
        },
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

/// The limits the scan and the decoder check fuzzed requests against.
const SAMPLE_REQUEST_LIMITS: RequestLimits = RequestLimits {
    announced: SAMPLE_LIMITS,
    max_key_bytes: 64,
};

/// Decodes one payload both ways and checks that what decodes round-trips,
/// and that the server's scan agrees with the request decoder.
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
    check_scan(payload)?;
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

/// The scan passes every request the decoder takes, and refuses a limit
/// exactly where, and in the words, the decoder does.
fn check_scan(payload: &[u8]) -> Result<(), String> {
    let limits = &SAMPLE_REQUEST_LIMITS;
    let scanned = Scan::new(payload.len()).advance(payload, Some(limits));
    match (Request::decode_within(payload, limits), scanned) {
        (Ok(request), Err(e)) => Err(format!(
            "the scan refuses {request:?} ({e}), which decodes from {payload:02x?}"
        )),
        (Err(DecodeError::OverLimit(decoded)), scanned)
            if scanned != Err(DecodeError::OverLimit(decoded.clone())) =>
        {
            Err(format!(
                "the decoder refuses {payload:02x?} with \"{decoded}\", the scan with {scanned:?}"
            ))
        }
        _ => Ok(()),
    }
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
