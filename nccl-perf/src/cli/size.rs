//! Message sizes on the command line: bytes with an optional `K`, `M` or
//! `G` suffix (`-b 8 -e 128M`), as nccl-tests reads them.

/// Why a size could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid size {given:?}: {reason} (expected a number of bytes with an optional K, M or G suffix, e.g. 8, 64K, 128M, 1G)"
)]
pub struct SizeError {
    /// The text given.
    pub given: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// Parses a byte count with an optional `K`, `M` or `G` suffix (powers of
/// 1024, either case; a trailing `B` or `iB` is accepted too: `4KiB`).
/// A fraction is allowed when the result is whole bytes (`0.5K` = 512), as in
/// nccl-tests.
///
/// # Errors
/// [`SizeError`] for empty, negative, malformed, fractional-byte or
/// overflowing sizes.
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let error = |reason| SizeError {
        given: text.to_string(),
        reason,
    };
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(error("it is empty"));
    }
    let digits_end = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, suffix) = trimmed.split_at(digits_end);
    if number.is_empty() {
        return Err(error("it does not start with a number"));
    }
    let multiplier: u64 = match suffix.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        _ => return Err(error("unknown suffix")),
    };
    if let Ok(whole) = number.parse::<u64>() {
        return whole
            .checked_mul(multiplier)
            .ok_or_else(|| error("it is too large"));
    }
    let value: f64 = number.parse().map_err(|_| error("it is not a number"))?;
    let bytes = value * multiplier as f64;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(error("it is too large"));
    }
    if bytes.fract() != 0.0 {
        return Err(error("it is not a whole number of bytes"));
    }
    Ok(bytes as u64)
}

pub(super) fn parse_size_arg(text: &str) -> Result<u64, String> {
    parse_size(text).map_err(|error| error.to_string())
}

pub(super) fn parse_nonzero_size_arg(text: &str) -> Result<u64, String> {
    match parse_size(text) {
        Ok(0) => Err("the step must be at least 1 byte".to_string()),
        Ok(bytes) => Ok(bytes),
        Err(error) => Err(error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_with_suffixes() {
        assert_eq!(parse_size("8"), Ok(8));
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("1K"), Ok(1024));
        assert_eq!(parse_size("64k"), Ok(64 * 1024));
        assert_eq!(parse_size("128M"), Ok(128 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("8g"), Ok(8 << 30));
        assert_eq!(parse_size("4KiB"), Ok(4096));
        assert_eq!(parse_size("2MB"), Ok(2 << 20));
        assert_eq!(parse_size(" 16 "), Ok(16));
        assert_eq!(parse_size("0.5K"), Ok(512));
        assert_eq!(parse_size("1.5M"), Ok(3 << 19));
    }

    #[test]
    fn bad_sizes_are_errors() {
        for bad in [
            "",
            "K",
            "-8",
            "8T",
            "1.5",
            "abc",
            "1..2M",
            "99999999999999999999",
            "17179869184G",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?} should not parse");
        }
    }
}
