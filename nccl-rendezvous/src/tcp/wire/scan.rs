//! Checking a request's shape as its bytes arrive: each length field
//! against the limits as soon as it is there, and the length the fields
//! add up to against the length the frame declares. A frame over a limit,
//! or one whose fields do not fill it exactly (a valid head followed by
//! junk), is refused before the bytes it announces are read, let alone
//! buffered.
//!
//! The scan jumps over the bytes of each field without looking at them:
//! its cost is one step per field however the bytes arrive. It never
//! accepts what the decoder refuses as to lengths; the decoder still
//! checks the rest (UTF-8, flags) once the frame is whole.

use super::{DecodeError, Limit, NONCE_LEN, OWNER_LEN, RequestLimits, TAG_LEN, op};

/// One field of a request, after its opcode.
#[derive(Debug, Clone, Copy)]
enum Field {
    /// A fixed number of bytes (a timeout, a delta, a nonce).
    Fixed(usize),
    /// A `u32` length, within a limit, and that many bytes.
    Sized(Limit),
    /// A presence flag, then a value when it is 1.
    OptionalValue,
    /// A `u32` count, then that many keys.
    Keys,
}

const KEY: Field = Field::Sized(Limit::KeyLen);
const VALUE: Field = Field::Sized(Limit::ValueLen);

/// The fields of a request, by opcode (see `encode`).
fn shape(opcode: u8) -> Option<&'static [Field]> {
    Some(match opcode {
        // Magic, version, nonce, flag: refused after the handshake, but
        // refused as themselves once whole.
        op::HELLO => &[Field::Fixed(4 + 2 + NONCE_LEN + 1)],
        op::PROOF => &[Field::Fixed(TAG_LEN)],
        op::SET => &[KEY, VALUE],
        op::SET_SESSION => &[KEY, VALUE, Field::Fixed(OWNER_LEN)],
        op::GET | op::ADD => &[KEY, Field::Fixed(8)],
        op::TRY_GET | op::DELETE => &[KEY],
        op::COMPARE_SET => &[KEY, Field::OptionalValue, VALUE],
        op::WAIT => &[Field::Fixed(8), Field::Keys],
        _ => return None,
    })
}

/// How far a request body (a frame's payload without its seal) has been
/// checked.
#[derive(Debug)]
pub(crate) struct Scan {
    /// The body's length, as the frame declares it.
    len: usize,
    /// The request's fields, once its opcode is known.
    fields: Option<&'static [Field]>,
    /// The next field in `fields`.
    field: usize,
    /// Where the next length, count or flag starts in the body.
    at: usize,
    /// Inside an `OptionalValue` whose flag said present: its value next.
    value_follows: bool,
    /// Inside `Keys`: how many are still to come, and the bytes of those
    /// seen.
    keys_left: Option<u32>,
    key_bytes: u64,
}

type ScanResult = Result<(), DecodeError>;

fn malformed(detail: String) -> DecodeError {
    DecodeError::Malformed(detail)
}

impl Scan {
    /// A scan of a body of `len` bytes.
    pub(crate) fn new(len: usize) -> Self {
        Scan {
            len,
            fields: None,
            field: 0,
            at: 1,
            value_follows: false,
            keys_left: None,
            key_bytes: 0,
        }
    }

    /// Checks what the body's first bytes, `body` (all of them received so
    /// far), show beyond what earlier calls saw.
    ///
    /// With `limits`, a length or count over them is refused as
    /// [`DecodeError::OverLimit`]; fields that run past the body's length, or
    /// end before it, unknown opcodes and bad flags as
    /// [`DecodeError::Malformed`].
    pub(crate) fn advance(&mut self, body: &[u8], limits: Option<&RequestLimits>) -> ScanResult {
        let fields = match self.fields {
            Some(fields) => fields,
            None => {
                let Some(&opcode) = body.first() else {
                    return Ok(());
                };
                let fields = shape(opcode)
                    .ok_or_else(|| malformed(format!("unknown request opcode 0x{opcode:02x}")))?;
                self.fields = Some(fields);
                fields
            }
        };
        let check = |limit: Limit, given: u64| match limits {
            Some(limits) => limits.check(limit, given),
            None => Ok(()),
        };
        loop {
            if let Some(left) = self.keys_left {
                if left == 0 {
                    self.keys_left = None;
                    self.field += 1;
                    continue;
                }
                let Some(len) = self.u32_at(body) else {
                    return Ok(());
                };
                check(Limit::KeyLen, len)?;
                self.key_bytes += len;
                check(Limit::KeyBytes, self.key_bytes)?;
                self.skip(4 + len)?;
                self.keys_left = Some(left - 1);
                continue;
            }
            if self.value_follows {
                let Some(len) = self.u32_at(body) else {
                    return Ok(());
                };
                check(Limit::ValueLen, len)?;
                self.skip(4 + len)?;
                self.value_follows = false;
                self.field += 1;
                continue;
            }
            let Some(&field) = fields.get(self.field) else {
                return self.ends_with_the_body();
            };
            match field {
                Field::Fixed(n) => {
                    self.skip(n as u64)?;
                    self.field += 1;
                }
                Field::Sized(limit) => {
                    let Some(len) = self.u32_at(body) else {
                        return Ok(());
                    };
                    check(limit, len)?;
                    self.skip(4 + len)?;
                    self.field += 1;
                }
                Field::OptionalValue => {
                    let Some(&flag) = body.get(self.at) else {
                        return Ok(());
                    };
                    match flag {
                        0 => self.field += 1,
                        1 => self.value_follows = true,
                        other => {
                            return Err(malformed(format!(
                                "expected value: expected 0 or 1, got {other}"
                            )));
                        }
                    }
                    self.skip(1)?;
                }
                Field::Keys => {
                    let Some(count) = self.u32_at(body) else {
                        return Ok(());
                    };
                    check(Limit::Keys, count)?;
                    self.skip(4)?;
                    // `count` fits a u32: it came from one.
                    self.keys_left = Some(count as u32);
                }
            }
        }
    }

    /// The `u32` at `at`, once it has arrived.
    fn u32_at(&self, body: &[u8]) -> Option<u64> {
        let bytes = body.get(self.at..self.at.checked_add(4)?)?;
        Some(u64::from(u32::from_be_bytes([
            bytes[0], bytes[1], bytes[2], bytes[3],
        ])))
    }

    /// Moves past `n` bytes, refusing fields that run past the body.
    fn skip(&mut self, n: u64) -> ScanResult {
        let at = (self.at as u64).saturating_add(n);
        if at > self.len as u64 {
            return Err(malformed(format!(
                "the request's fields take at least {at} bytes, more than the {} its frame \
                 holds",
                self.len
            )));
        }
        // At most `len`, a usize.
        self.at = at as usize;
        Ok(())
    }

    /// Refuses fields that end before the body does.
    fn ends_with_the_body(&self) -> ScanResult {
        if self.at == self.len {
            return Ok(());
        }
        Err(malformed(format!(
            "the request's fields take {} bytes, but its frame holds {}",
            self.at, self.len
        )))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::{Limits, Request};
    use super::*;

    const LIMITS: RequestLimits = RequestLimits {
        announced: Limits {
            max_frame: 1 << 20,
            max_key_len: 16,
            max_value_len: 64,
            max_keys: 4,
        },
        max_key_bytes: 20,
    };

    /// Scans `body` as declared `len` bytes, fed in pieces of `piece`.
    fn scan(body: &[u8], len: usize, piece: usize) -> ScanResult {
        let mut scan = Scan::new(len);
        for end in (piece..body.len() + piece).step_by(piece) {
            scan.advance(&body[..end.min(body.len())], Some(&LIMITS))?;
        }
        Ok(())
    }

    fn requests() -> Vec<Request> {
        vec![
            Request::Set {
                key: "k".into(),
                value: vec![1; 64],
            },
            Request::Get {
                key: "key".into(),
                timeout: Duration::from_secs(1),
            },
            Request::TryGet { key: "k".into() },
            Request::CompareSet {
                key: "k".into(),
                expected: Some(b"old".to_vec()),
                new: b"new".to_vec(),
            },
            Request::CompareSet {
                key: "k".into(),
                expected: None,
                new: Vec::new(),
            },
            Request::Add {
                key: "n".into(),
                delta: 3,
            },
            Request::Wait {
                keys: vec!["a".into(), "bb".into(), String::new()],
                timeout: Duration::ZERO,
            },
            Request::Delete { key: "d".into() },
            Request::SetSession {
                key: "s".into(),
                value: b"v".to_vec(),
                owner: [3; OWNER_LEN],
            },
        ]
    }

    #[test]
    fn every_request_scans_whole_in_any_pieces() {
        for request in requests() {
            let frame = request.encode();
            let body = frame.payload();
            for piece in [1, 3, 7, body.len()] {
                assert_eq!(
                    scan(body, body.len(), piece),
                    Ok(()),
                    "{request:?} by {piece}"
                );
            }
        }
    }

    #[test]
    fn a_declared_length_the_fields_do_not_fill_is_refused_from_the_head() {
        for request in requests() {
            let frame = request.encode();
            let body = frame.payload();
            // Longer than the fields: refused once the last length is read,
            // from the whole body (the junk after it never needed).
            let message = match scan(body, body.len() + 1, 1) {
                Err(DecodeError::Malformed(message)) => message,
                other => panic!("{request:?}: {other:?}"),
            };
            assert!(
                message.contains(&format!("holds {}", body.len() + 1)),
                "{message}"
            );
            // Shorter: refused as soon as a field runs past it.
            assert!(
                matches!(
                    scan(body, body.len() - 1, 1),
                    Err(DecodeError::Malformed(_))
                ),
                "{request:?}"
            );
        }
        // A SET of a 1-byte key and a 9-byte value declared as 12 MiB: the
        // value's length field (byte 10) is all it takes.
        let head = [op::SET, 0, 0, 0, 1, b'k', 0, 0, 0, 9];
        let mut scan = Scan::new(12 << 20);
        scan.advance(&head[..9], Some(&LIMITS)).unwrap();
        let refused = scan.advance(&head, Some(&LIMITS)).unwrap_err();
        assert_eq!(
            refused,
            DecodeError::Malformed(
                "the request's fields take 19 bytes, but its frame holds 12582912".into()
            )
        );
    }

    #[test]
    fn lengths_over_the_limits_are_refused_as_they_arrive() {
        let over = |body: &[u8]| match Scan::new(1 << 20).advance(body, Some(&LIMITS)) {
            Err(DecodeError::OverLimit(message)) => message,
            other => panic!("{body:?}: {other:?}"),
        };
        assert!(over(&[op::GET, 0, 0, 0, 17]).contains("max_key_len of 16"));
        assert!(over(&[op::SET, 0, 0, 0, 0, 0, 0, 0, 65]).contains("max_value_len of 64"));
        let mut wait = vec![op::WAIT, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5];
        assert!(over(&wait).contains("max_keys_per_request of 4"));
        // Three keys of 8 bytes: the third passes the 20 bytes of keys.
        wait[12] = 3;
        for _ in 0..3 {
            wait.extend([0, 0, 0, 8]);
            wait.extend(b"12345678");
        }
        assert!(over(&wait).contains("max_key_bytes_per_request of 20"));
        // Without limits, only the shape counts.
        assert_eq!(Scan::new(30).advance(&[op::GET, 0, 0, 0, 17], None), Ok(()));
    }

    #[test]
    fn unknown_opcodes_and_bad_flags_are_malformed() {
        let mut scan = Scan::new(9);
        assert_eq!(
            scan.advance(&[0xde], None),
            Err(DecodeError::Malformed("unknown request opcode 0xde".into()))
        );
        let compare = [op::COMPARE_SET, 0, 0, 0, 1, b'k', 2];
        assert!(matches!(
            Scan::new(20).advance(&compare, None),
            Err(DecodeError::Malformed(message)) if message.contains("expected 0 or 1, got 2")
        ));
    }
}
