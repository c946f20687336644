//! Decoding: parsing a frame's payload back into a request or a response,
//! every read bounds-checked, so a malformed frame is an error, never a
//! panic.

use std::fmt;
use std::time::Duration;

use super::{Limit, Limits, MAGIC, Request, RequestLimits, Response, VERSION, op, resp};

/// Why a payload did not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DecodeError {
    /// Not the protocol: truncated, an unknown opcode, text that is not
    /// UTF-8, trailing bytes.
    Malformed(String),
    /// A `HELLO` of another protocol version.
    Version(u16),
    /// A length or count over the server's [`Limits`]: seen as soon as the
    /// length is read, before the bytes it announces.
    OverLimit(String),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Malformed(detail) | DecodeError::OverLimit(detail) => f.write_str(detail),
            DecodeError::Version(version) => write!(
                f,
                "protocol version {version} is not supported; this side speaks version {VERSION} \
                 (use the same nccl-rendezvous version on every rank and on the server)"
            ),
        }
    }
}

fn malformed(detail: String) -> DecodeError {
    DecodeError::Malformed(detail)
}

/// Reads fields from a payload; every read is bounds-checked, and lengths
/// are checked against the limits (when given) before their bytes.
struct Decoder<'a> {
    buf: &'a [u8],
    limits: Option<&'a RequestLimits>,
}

type DecodeResult<T> = std::result::Result<T, DecodeError>;

impl<'a> Decoder<'a> {
    fn take(&mut self, n: usize, what: &str) -> DecodeResult<&'a [u8]> {
        if self.buf.len() < n {
            return Err(malformed(format!(
                "truncated frame: {what} needs {n} bytes, only {} left",
                self.buf.len()
            )));
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }
    fn array<const N: usize>(&mut self, what: &str) -> DecodeResult<[u8; N]> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }
    fn u8(&mut self, what: &str) -> DecodeResult<u8> {
        Ok(self.array::<1>(what)?[0])
    }
    fn u16(&mut self, what: &str) -> DecodeResult<u16> {
        Ok(u16::from_be_bytes(self.array(what)?))
    }
    fn u32(&mut self, what: &str) -> DecodeResult<u32> {
        Ok(u32::from_be_bytes(self.array(what)?))
    }
    fn u64(&mut self, what: &str) -> DecodeResult<u64> {
        Ok(u64::from_be_bytes(self.array(what)?))
    }
    fn i64(&mut self, what: &str) -> DecodeResult<i64> {
        Ok(i64::from_be_bytes(self.array(what)?))
    }
    fn bool(&mut self, what: &str) -> DecodeResult<bool> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(malformed(format!("{what}: expected 0 or 1, got {other}"))),
        }
    }
    /// A length, refused when over `limit` (when the decoder has limits).
    fn length(&mut self, what: &str, limit: Option<Limit>) -> DecodeResult<usize> {
        let n = self.u32(what)?;
        if let (Some(limit), Some(limits)) = (limit, self.limits) {
            limits.check(limit, u64::from(n))?;
        }
        usize::try_from(n).map_err(|_| malformed(format!("{what}: length {n} too large")))
    }
    fn bytes(&mut self, what: &str) -> DecodeResult<Vec<u8>> {
        let n = self.length(what, None)?;
        Ok(self.take(n, what)?.to_vec())
    }
    /// A value, within the value limit.
    fn value(&mut self, what: &str) -> DecodeResult<Vec<u8>> {
        let n = self.length(what, Some(Limit::ValueLen))?;
        Ok(self.take(n, what)?.to_vec())
    }
    /// A key, within the key limit.
    fn key(&mut self, what: &str) -> DecodeResult<String> {
        let n = self.length(what, Some(Limit::KeyLen))?;
        utf8(self.take(n, what)?.to_vec(), what)
    }
    fn duration(&mut self, what: &str) -> DecodeResult<Duration> {
        Ok(Duration::from_millis(self.u64(what)?))
    }
    /// A list of keys, its count within the keys-per-request limit and
    /// their bytes within the key-bytes-per-request limit.
    fn keys(&mut self, what: &str) -> DecodeResult<Vec<String>> {
        let n = self.length(what, Some(Limit::Keys))?;
        // Never trust a count for allocation: each entry takes >= 4 bytes.
        let mut out = Vec::with_capacity((self.buf.len() / 4).min(n));
        let mut key_bytes = 0u64;
        for _ in 0..n {
            // The checks in the order the server's scan makes them.
            let len = self.length(what, Some(Limit::KeyLen))?;
            key_bytes += len as u64;
            if let Some(limits) = self.limits {
                limits.check(Limit::KeyBytes, key_bytes)?;
            }
            out.push(utf8(self.take(len, what)?.to_vec(), what)?);
        }
        Ok(out)
    }
    fn nonce(&mut self, what: &str) -> DecodeResult<super::Nonce> {
        self.array(what)
    }
    /// A protocol version, refused unless it is this one (its other fields
    /// may be laid out differently).
    fn version(&mut self, what: &str) -> DecodeResult<()> {
        match self.u16(what)? {
            VERSION => Ok(()),
            other => Err(DecodeError::Version(other)),
        }
    }
    fn finish(self) -> DecodeResult<()> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(malformed(format!(
                "{} unexpected trailing bytes",
                self.buf.len()
            )))
        }
    }
}

fn utf8(bytes: Vec<u8>, what: &str) -> DecodeResult<String> {
    String::from_utf8(bytes).map_err(|_| malformed(format!("{what} is not valid UTF-8")))
}

fn read_opt(
    d: &mut Decoder<'_>,
    what: &str,
    read: impl FnOnce(&mut Decoder<'_>) -> DecodeResult<Vec<u8>>,
) -> DecodeResult<Option<Vec<u8>>> {
    Ok(if d.bool(what)? { Some(read(d)?) } else { None })
}

impl Request {
    /// Parses a payload (the frame without its length header).
    pub(crate) fn decode(payload: &[u8]) -> DecodeResult<Request> {
        Self::decode_with(payload, None)
    }

    /// Parses a payload, refusing with [`DecodeError::OverLimit`] any key,
    /// value, key count or bytes of keys over `limits`.
    pub(crate) fn decode_within(payload: &[u8], limits: &RequestLimits) -> DecodeResult<Request> {
        Self::decode_with(payload, Some(limits))
    }

    fn decode_with(payload: &[u8], limits: Option<&RequestLimits>) -> DecodeResult<Request> {
        let mut d = Decoder {
            buf: payload,
            limits,
        };
        let req = match d.u8("opcode")? {
            op::HELLO => {
                let magic: [u8; 4] = d.array("HELLO magic")?;
                if magic != MAGIC {
                    return Err(malformed(format!(
                        "HELLO magic is {magic:02x?}, expected {MAGIC:02x?} (\"NCRS\")"
                    )));
                }
                d.version("HELLO version")?;
                Request::Hello {
                    nonce: d.nonce("HELLO nonce")?,
                    authenticate: d.bool("HELLO authenticate flag")?,
                }
            }
            op::PROOF => Request::Proof(d.array("PROOF")?),
            op::SET => Request::Set {
                key: d.key("key")?,
                value: d.value("value")?,
            },
            op::GET => Request::Get {
                key: d.key("key")?,
                timeout: d.duration("timeout")?,
            },
            op::TRY_GET => Request::TryGet { key: d.key("key")? },
            op::COMPARE_SET => Request::CompareSet {
                key: d.key("key")?,
                expected: read_opt(&mut d, "expected value", |d| d.value("expected value"))?,
                new: d.value("new value")?,
            },
            op::ADD => Request::Add {
                key: d.key("key")?,
                delta: d.i64("delta")?,
            },
            op::WAIT => Request::Wait {
                timeout: d.duration("timeout")?,
                keys: d.keys("keys")?,
            },
            op::DELETE => Request::Delete { key: d.key("key")? },
            op::SET_SESSION => Request::SetSession {
                key: d.key("key")?,
                value: d.value("value")?,
                owner: d.array("session owner")?,
            },
            other => {
                return Err(malformed(format!("unknown request opcode 0x{other:02x}")));
            }
        };
        d.finish()?;
        Ok(req)
    }
}

impl Response {
    /// Parses a payload (the frame without its length header).
    pub(crate) fn decode(payload: &[u8]) -> DecodeResult<Response> {
        let mut d = Decoder {
            buf: payload,
            limits: None,
        };
        let r = match d.u8("opcode")? {
            resp::HELLO => {
                d.version("HELLO version")?;
                let nonce = d.nonce("HELLO nonce")?;
                let limits = Limits {
                    max_frame: d.u64("max frame size")?,
                    max_key_len: d.u64("max key length")?,
                    max_value_len: d.u64("max value length")?,
                    max_keys: d.u64("max keys per request")?,
                };
                let proof = if d.bool("HELLO proof flag")? {
                    Some(d.array("HELLO proof")?)
                } else {
                    None
                };
                Response::Hello {
                    nonce,
                    limits,
                    proof,
                }
            }
            resp::OK => Response::Ok,
            resp::VALUE => Response::Value(d.bytes("value")?),
            resp::NOT_FOUND => Response::NotFound,
            resp::INT => Response::Int(d.i64("integer")?),
            resp::BOOL => Response::Bool(d.bool("boolean")?),
            resp::COMPARE_SET => {
                let swapped = d.bool("compare-set swapped flag")?;
                let current = read_opt(&mut d, "compare-set current value", |d| {
                    d.bytes("compare-set current value")
                })?;
                if swapped && current.is_none() {
                    return Err(malformed(
                        "compare-set result says it swapped but carries no current value".into(),
                    ));
                }
                Response::CompareSet { swapped, current }
            }
            resp::TIMEOUT => Response::Timeout {
                waited: d.duration("waited")?,
                missing: d.keys("missing keys")?,
            },
            resp::NOT_AN_INTEGER => Response::NotAnInteger(d.bytes("value")?),
            resp::OVERFLOW => Response::Overflow(d.i64("current value")?),
            resp::ERROR => Response::Error {
                code: d.u8("error code")?,
                message: String::from_utf8_lossy(&d.bytes("error message")?).into_owned(),
            },
            other => {
                return Err(malformed(format!("unknown response opcode 0x{other:02x}")));
            }
        };
        d.finish()?;
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_payloads_are_errors_not_panics() {
        assert!(Request::decode(&[]).is_err());
        assert!(Request::decode(&[0xee]).is_err());
        assert!(Request::decode(&[op::SET, 0, 0, 0, 9, b'k']).is_err());
        assert!(Request::decode(&[op::SET, 0xff, 0xff, 0xff, 0xff]).is_err());
        assert!(Request::decode(&[op::HELLO, b'X', b'X', b'X', b'X', 0, 3, 0]).is_err());
        // Another version is named as such, whatever follows it.
        assert_eq!(
            Request::decode(&[op::HELLO, b'N', b'C', b'R', b'S', 0, 2, 0]),
            Err(DecodeError::Version(2))
        );
        // Invalid UTF-8 key.
        assert!(Request::decode(&[op::TRY_GET, 0, 0, 0, 1, 0xff]).is_err());
        // Trailing bytes.
        assert!(Request::decode(&[op::TRY_GET, 0, 0, 0, 1, b'k', 0]).is_err());
        // A huge key count with no data behind it.
        assert!(
            Request::decode(&[op::WAIT, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff]).is_err()
        );
        // Every prefix of a valid frame is rejected cleanly.
        let f = Request::CompareSet {
            key: "key".into(),
            expected: Some(b"old".to_vec()),
            new: b"new".to_vec(),
        }
        .encode();
        let payload = &f.as_bytes()[4..];
        for n in 0..payload.len() {
            assert!(Request::decode(&payload[..n]).is_err(), "prefix {n}");
        }
        assert!(Response::decode(&[resp::BOOL, 2]).is_err());
        // A swapped flag that is not 0 or 1, a swap with no value, a missing
        // value marker, and trailing bytes.
        assert!(Response::decode(&[resp::COMPARE_SET, 2, 0]).is_err());
        assert!(Response::decode(&[resp::COMPARE_SET, 1, 0]).is_err());
        assert!(Response::decode(&[resp::COMPARE_SET, 0]).is_err());
        assert!(Response::decode(&[resp::COMPARE_SET, 0, 0, 0]).is_err());
        let f = Response::CompareSet {
            swapped: true,
            current: Some(b"new".to_vec()),
        }
        .encode();
        let payload = &f.as_bytes()[4..];
        for n in 0..payload.len() {
            assert!(Response::decode(&payload[..n]).is_err(), "prefix {n}");
        }
    }

    #[test]
    fn limits_refuse_with_a_message_that_reads_right() {
        let limits = RequestLimits {
            announced: Limits {
                max_frame: 1 << 20,
                max_key_len: 4,
                max_value_len: 8,
                max_keys: 2,
            },
            max_key_bytes: 6,
        };
        let over = |payload: &[u8]| match Request::decode_within(payload, &limits) {
            Err(DecodeError::OverLimit(message)) => message,
            other => panic!("expected a limit refusal, got {other:?}"),
        };
        // A wait naming 12 M keys: its count alone refuses it.
        let mut wait = vec![op::WAIT];
        wait.extend(0u64.to_be_bytes());
        wait.extend(12_000_000u32.to_be_bytes());
        assert_eq!(
            over(&wait),
            "a request naming 12000000 keys is over the server's max_keys_per_request of 2"
        );
        // A long key and a long value, from their lengths alone.
        assert_eq!(
            over(&[op::GET, 0xff, 0xff, 0xff, 0xf0]),
            "a key of 4294967280 bytes is over the server's max_key_len of 4"
        );
        assert_eq!(
            over(&[op::SET, 0, 0, 0, 1, b'k', 0, 0, 0, 9]),
            "a value of 9 bytes is over the server's max_value_len of 8"
        );
        // Two keys of 4 bytes each: 8 bytes of keys, over 6.
        let two = Request::Wait {
            keys: vec!["abcd".into(), "efgh".into()],
            timeout: Duration::ZERO,
        }
        .encode();
        assert_eq!(
            over(two.payload()),
            "a request naming 8 bytes of keys is over the server's max_key_bytes_per_request of 6"
        );
        // Within the limits, the whole decodes.
        let frame = Request::Set {
            key: "k".into(),
            value: b"v".to_vec(),
        }
        .encode();
        assert!(Request::decode_within(frame.payload(), &limits).is_ok());
        // Without limits the same lengths are only checked against the bytes.
        assert!(matches!(
            Request::decode(&wait),
            Err(DecodeError::Malformed(_))
        ));
    }
}
