//! Assembling frames from the bytes a non-blocking socket gives, in
//! whatever pieces they come: the length header (refused at once when it
//! declares more than the maximum), then the payload, whose request shape
//! is checked as it arrives after the handshake (`scan`). Memory follows
//! the bytes that arrived, never the length a header claims.

use super::{DecodeError, RequestLimits, Scan};

/// Why a frame was refused before it was whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum IncomingError {
    /// Its header declares this many bytes, more than the maximum.
    TooLarge(u64),
    /// A length in the request is over a limit, or its fields do not fit
    /// the frame.
    Refused(DecodeError),
}

/// What incoming frames are held to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules<'a> {
    /// The largest payload.
    pub(crate) max: usize,
    /// After the handshake: the limits a request's fields are checked
    /// against, and the bytes a seal adds after them.
    pub(crate) requests: Option<(&'a RequestLimits, usize)>,
}

/// A frame being assembled.
#[derive(Debug, Default)]
pub(crate) struct Incoming {
    header: [u8; 4],
    header_len: usize,
    /// The payload's length, once the header is whole.
    len: Option<usize>,
    payload: Vec<u8>,
    scan: Option<Scan>,
}

impl Incoming {
    /// Whether no byte has arrived since the last whole frame.
    pub(crate) fn is_idle(&self) -> bool {
        self.header_len == 0
    }

    /// The bytes allocated for the frame under way.
    pub(crate) fn held(&self) -> usize {
        self.payload.capacity()
    }

    /// The bytes it would hold after taking `n` more bytes (its buffer
    /// grows by doubling, never past the frame; a frame whose length is
    /// not known yet is taken to need all of them).
    pub(crate) fn held_after(&self, n: usize) -> usize {
        let capacity = self.payload.capacity();
        let Some(len) = self.len else {
            return capacity.max(n);
        };
        let needed = self.payload.len().saturating_add(n).min(len);
        if needed <= capacity {
            capacity
        } else {
            capacity.saturating_mul(2).max(needed).min(len)
        }
    }

    /// Takes bytes from `input` up to the end of the frame under way.
    ///
    /// Returns how many it took and, when they completed the frame, its payload
    /// (and the assembler is ready for the next frame).
    pub(crate) fn push(
        &mut self,
        input: &[u8],
        rules: &Rules<'_>,
    ) -> Result<(usize, Option<Vec<u8>>), IncomingError> {
        let mut taken = 0;
        let len = match self.len {
            Some(len) => len,
            None => {
                let n = (4 - self.header_len).min(input.len());
                self.header[self.header_len..self.header_len + n].copy_from_slice(&input[..n]);
                self.header_len += n;
                taken = n;
                if self.header_len < 4 {
                    return Ok((taken, None));
                }
                let declared = u32::from_be_bytes(self.header);
                let len = usize::try_from(declared)
                    .ok()
                    .filter(|&len| len <= rules.max)
                    .ok_or(IncomingError::TooLarge(u64::from(declared)))?;
                self.len = Some(len);
                self.scan = rules
                    .requests
                    .and_then(|(_, seal)| len.checked_sub(seal))
                    .map(Scan::new);
                len
            }
        };
        let want = (len - self.payload.len()).min(input.len() - taken);
        let needed = self.payload.len() + want;
        if needed > self.payload.capacity() {
            // Doubling, for bytes that dribble in, but never past the frame.
            let target = (self.payload.capacity() * 2).max(needed).min(len);
            self.payload.reserve_exact(target - self.payload.len());
        }
        self.payload.extend_from_slice(&input[taken..taken + want]);
        taken += want;
        if let (Some(scan), Some((limits, seal))) = (&mut self.scan, rules.requests) {
            let body = &self.payload[..self.payload.len().min(len - seal)];
            scan.advance(body, Some(limits))
                .map_err(IncomingError::Refused)?;
        }
        if self.payload.len() < len {
            return Ok((taken, None));
        }
        let payload = std::mem::take(&mut self.payload);
        *self = Incoming::default();
        Ok((taken, Some(payload)))
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Limits, Request};
    use super::*;

    const LIMITS: RequestLimits = RequestLimits {
        announced: Limits {
            max_frame: 1 << 20,
            max_key_len: 8,
            max_value_len: 1 << 16,
            max_keys: 4,
        },
        max_key_bytes: 32,
    };

    fn rules(seal: usize) -> Rules<'static> {
        Rules {
            max: 1 << 20,
            requests: Some((&LIMITS, seal)),
        }
    }

    #[test]
    fn frames_are_whole_whatever_the_pieces() {
        let frame = Request::Set {
            key: "k".into(),
            value: vec![7; 1000],
        }
        .encode();
        let mut two = frame.as_bytes().to_vec();
        two.extend_from_slice(frame.as_bytes());
        for piece in [1, 2, 5, 999, two.len()] {
            let mut incoming = Incoming::default();
            let mut frames = Vec::new();
            for chunk in two.chunks(piece) {
                let mut rest = chunk;
                while !rest.is_empty() {
                    let (taken, whole) = incoming.push(rest, &rules(0)).unwrap();
                    frames.extend(whole);
                    rest = &rest[taken..];
                }
            }
            assert_eq!(
                frames,
                vec![frame.payload().to_vec(); 2],
                "pieces of {piece}"
            );
            assert!(incoming.is_idle());
        }
    }

    #[test]
    fn memory_follows_the_bytes_that_arrived() {
        let mut incoming = Incoming::default();
        // A SET of a 65527-byte value: its first 10 bytes.
        let mut head = (10u32 + 0xfff7).to_be_bytes().to_vec();
        head.extend([0x02, 0, 0, 0, 1, b'k', 0, 0, 0xff, 0xf7]);
        let (taken, whole) = incoming.push(&head, &rules(0)).unwrap();
        assert_eq!((taken, whole), (head.len(), None));
        assert!(incoming.held() < 64, "{} bytes held", incoming.held());
    }

    #[test]
    fn oversized_headers_and_junk_after_valid_fields_are_refused_at_once() {
        let mut incoming = Incoming::default();
        assert_eq!(
            incoming.push(&(2u32 << 20).to_be_bytes(), &rules(0)),
            Err(IncomingError::TooLarge(2 << 20))
        );
        // A SET whose fields take 15 bytes, declared as 1 MiB (and sealed:
        // 40 bytes of seal after the fields).
        let mut incoming = Incoming::default();
        let mut head = (1u32 << 20).to_be_bytes().to_vec();
        head.extend([0x02, 0, 0, 0, 1, b'k', 0, 0, 0, 5]);
        assert!(matches!(
            incoming.push(&head, &rules(40)),
            Err(IncomingError::Refused(DecodeError::Malformed(_)))
        ));
        // Before the handshake nothing but the size is checked.
        let mut incoming = Incoming::default();
        let handshake = Rules {
            max: 512,
            requests: None,
        };
        let frame = [0, 0, 0, 3, 0xde, 0xad, 0x00];
        assert_eq!(
            incoming.push(&frame, &handshake),
            Ok((7, Some(vec![0xde, 0xad, 0x00])))
        );
    }
}
