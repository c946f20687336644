//! The 128-byte token that lets the ranks of one communicator find each other.

use std::fmt;
use std::str::FromStr;

use nccl_sys::{NCCL_UNIQUE_ID_BYTES, ncclUniqueId};

use crate::error::{Error, Result};
use crate::library::{check_accepted, library};

const ID_BYTES: usize = NCCL_UNIQUE_ID_BYTES as usize;

/// A NCCL unique id: rank 0 creates it and hands it to every other rank
/// (through an environment variable, a file or a store), then all of them
/// create a communicator with it.
///
/// `Display` writes 256 lowercase hex digits and `FromStr` reads them back,
/// so an id can travel as text:
///
/// ```
/// # use nccl_core::UniqueId;
/// let id = UniqueId::from_bytes([7; 128]);
/// let text = id.to_string();
/// assert_eq!(text.len(), 256);
/// assert_eq!(text.parse::<UniqueId>().unwrap(), id);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct UniqueId([u8; ID_BYTES]);

impl UniqueId {
    /// The number of bytes in an id.
    pub const BYTES: usize = ID_BYTES;

    /// Asks NCCL for a fresh id (`ncclGetUniqueId`).
    ///
    /// This picks a network interface and opens the bootstrap listener of rank
    /// 0, so call it on the process that will be rank 0.
    ///
    /// # Errors
    /// The library could not be loaded, or NCCL failed (no usable network
    /// interface, for instance).
    pub fn new() -> Result<Self> {
        let lib = library()?;
        let get_unique_id = lib.functions().ncclGetUniqueId()?;
        let mut raw = ncclUniqueId {
            internal: [0; ID_BYTES],
        };
        // SAFETY: `raw` is a valid, writable ncclUniqueId for the call.
        let result = unsafe { get_unique_id(&mut raw) };
        check_accepted(lib, "ncclGetUniqueId", result)?;
        Ok(Self::from_raw(raw))
    }

    /// An id from its bytes (as produced by [`UniqueId::as_bytes`] on rank 0).
    pub const fn from_bytes(bytes: [u8; ID_BYTES]) -> Self {
        Self(bytes)
    }

    /// An id from a byte slice.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] unless `bytes` has exactly 128 bytes.
    pub fn try_from_slice(bytes: &[u8]) -> Result<Self> {
        let array: [u8; ID_BYTES] = bytes.try_into().map_err(|_| Error::InvalidArgument {
            argument: "unique id",
            expected: format!("{ID_BYTES} bytes"),
            given: format!("{} bytes", bytes.len()),
        })?;
        Ok(Self(array))
    }

    /// The id's bytes.
    pub const fn as_bytes(&self) -> &[u8; ID_BYTES] {
        &self.0
    }

    pub(crate) fn from_raw(raw: ncclUniqueId) -> Self {
        Self(raw.internal.map(|byte| byte as u8))
    }

    pub(crate) fn to_raw(self) -> ncclUniqueId {
        ncclUniqueId {
            internal: self.0.map(|byte| byte as std::ffi::c_char),
        }
    }
}

impl fmt::Display for UniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|byte| write!(f, "{byte:02x}"))
    }
}

impl fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UniqueId({self})")
    }
}

impl FromStr for UniqueId {
    type Err = Error;

    /// Parses 256 hex digits (either case, surrounding whitespace ignored).
    fn from_str(text: &str) -> Result<Self> {
        let text = text.trim();
        let invalid = |given: String| Error::InvalidArgument {
            argument: "unique id text",
            expected: format!("{} hex digits", 2 * ID_BYTES),
            given,
        };
        if text.len() != 2 * ID_BYTES {
            return Err(invalid(format!("{} characters", text.len())));
        }
        let mut bytes = [0u8; ID_BYTES];
        for (index, pair) in text.as_bytes().chunks_exact(2).enumerate() {
            let digit = |c: u8| (c as char).to_digit(16);
            match (digit(pair[0]), digit(pair[1])) {
                (Some(high), Some(low)) => bytes[index] = (high * 16 + low) as u8,
                _ => {
                    let bad = if digit(pair[0]).is_none() {
                        2 * index
                    } else {
                        2 * index + 1
                    };
                    return Err(invalid(format!(
                        "{:?} at position {bad}",
                        text[bad..].chars().next().unwrap_or('?')
                    )));
                }
            }
        }
        Ok(Self(bytes))
    }
}

#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
impl serde::Serialize for UniqueId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
impl<'de> serde::Deserialize<'de> for UniqueId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}
