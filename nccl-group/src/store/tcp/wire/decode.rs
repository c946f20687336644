//! Decoding: parsing a frame's payload back into a request or a response,
//! every read bounds-checked, so a malformed frame is an error, never a
//! panic.

use std::time::Duration;

use super::{MAGIC, Request, Response, op, resp};

/// Reads fields from a payload; every read is bounds-checked.
struct Decoder<'a> {
    buf: &'a [u8],
}

type DecodeResult<T> = std::result::Result<T, String>;

impl<'a> Decoder<'a> {
    fn take(&mut self, n: usize, what: &str) -> DecodeResult<&'a [u8]> {
        if self.buf.len() < n {
            return Err(format!(
                "truncated frame: {what} needs {n} bytes, only {} left",
                self.buf.len()
            ));
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
            other => Err(format!("{what}: expected 0 or 1, got {other}")),
        }
    }
    fn bytes(&mut self, what: &str) -> DecodeResult<Vec<u8>> {
        let n = self.u32(what)?;
        let n = usize::try_from(n).map_err(|_| format!("{what}: length {n} too large"))?;
        Ok(self.take(n, what)?.to_vec())
    }
    fn string(&mut self, what: &str) -> DecodeResult<String> {
        String::from_utf8(self.bytes(what)?).map_err(|_| format!("{what} is not valid UTF-8"))
    }
    fn duration(&mut self, what: &str) -> DecodeResult<Duration> {
        Ok(Duration::from_millis(self.u64(what)?))
    }
    fn strings(&mut self, what: &str) -> DecodeResult<Vec<String>> {
        let n = self.u32(what)?;
        // Never trust a count for allocation: each entry takes >= 4 bytes.
        let cap = (self.buf.len() / 4).min(usize::try_from(n).unwrap_or(usize::MAX));
        let mut out = Vec::with_capacity(cap);
        for _ in 0..n {
            out.push(self.string(what)?);
        }
        Ok(out)
    }
    fn finish(self) -> DecodeResult<()> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(format!("{} unexpected trailing bytes", self.buf.len()))
        }
    }
}

fn read_opt_bytes(d: &mut Decoder<'_>, what: &str) -> DecodeResult<Option<Vec<u8>>> {
    Ok(if d.bool(what)? {
        Some(d.bytes(what)?)
    } else {
        None
    })
}

impl Request {
    /// Parses a payload (the frame without its length header).
    pub(crate) fn decode(payload: &[u8]) -> DecodeResult<Request> {
        let mut d = Decoder { buf: payload };
        let req = match d.u8("opcode")? {
            op::HELLO => {
                let magic: [u8; 4] = d.array("HELLO magic")?;
                if magic != MAGIC {
                    return Err(format!(
                        "HELLO magic is {magic:02x?}, expected {MAGIC:02x?} (\"NCRS\")"
                    ));
                }
                let version = d.u16("HELLO version")?;
                let secret = read_opt_bytes(&mut d, "HELLO secret")?;
                Request::Hello { version, secret }
            }
            op::SET => Request::Set {
                key: d.string("key")?,
                value: d.bytes("value")?,
            },
            op::GET => Request::Get {
                key: d.string("key")?,
                timeout: d.duration("timeout")?,
            },
            op::TRY_GET => Request::TryGet {
                key: d.string("key")?,
            },
            op::COMPARE_SET => Request::CompareSet {
                key: d.string("key")?,
                expected: read_opt_bytes(&mut d, "expected value")?,
                new: d.bytes("new value")?,
            },
            op::ADD => Request::Add {
                key: d.string("key")?,
                delta: d.i64("delta")?,
            },
            op::WAIT => Request::Wait {
                timeout: d.duration("timeout")?,
                keys: d.strings("keys")?,
            },
            op::DELETE => Request::Delete {
                key: d.string("key")?,
            },
            other => return Err(format!("unknown request opcode 0x{other:02x}")),
        };
        d.finish()?;
        Ok(req)
    }
}

impl Response {
    /// Parses a payload (the frame without its length header).
    pub(crate) fn decode(payload: &[u8]) -> DecodeResult<Response> {
        let mut d = Decoder { buf: payload };
        let r = match d.u8("opcode")? {
            resp::HELLO => Response::Hello {
                max_frame: d.u64("max frame size")?,
            },
            resp::OK => Response::Ok,
            resp::VALUE => Response::Value(d.bytes("value")?),
            resp::NOT_FOUND => Response::NotFound,
            resp::INT => Response::Int(d.i64("integer")?),
            resp::BOOL => Response::Bool(d.bool("boolean")?),
            resp::COMPARE_SET => {
                let swapped = d.bool("compare-set swapped flag")?;
                let current = read_opt_bytes(&mut d, "compare-set current value")?;
                if swapped && current.is_none() {
                    return Err(
                        "compare-set result says it swapped but carries no current value".into(),
                    );
                }
                Response::CompareSet { swapped, current }
            }
            resp::TIMEOUT => Response::Timeout {
                waited: d.duration("waited")?,
                missing: d.strings("missing keys")?,
            },
            resp::NOT_AN_INTEGER => Response::NotAnInteger(d.bytes("value")?),
            resp::OVERFLOW => Response::Overflow(d.i64("current value")?),
            resp::ERROR => Response::Error {
                code: d.u8("error code")?,
                message: String::from_utf8_lossy(&d.bytes("error message")?).into_owned(),
            },
            other => return Err(format!("unknown response opcode 0x{other:02x}")),
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
        assert!(Request::decode(&[op::HELLO, b'X', b'X', b'X', b'X', 0, 1, 0]).is_err());
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
}
