//! CPU tests of `UniqueId` as bytes and as text (and, with the `serde`
//! feature, as JSON). No NCCL and no GPU needed: ids are built from bytes.

use nccl_test_support::assert_invalid;

use nccl_core::UniqueId;

/// An id whose byte `i` is `i * 2 + 1` (every byte differs, some are > 0x7f).
fn sample_bytes() -> [u8; 128] {
    std::array::from_fn(|i| (i as u8).wrapping_mul(2).wrapping_add(1))
}

/// The hex text of [`sample_bytes`], built independently of `Display`.
fn sample_hex() -> String {
    let digits = b"0123456789abcdef";
    sample_bytes()
        .iter()
        .flat_map(|byte| {
            [
                digits[usize::from(byte >> 4)] as char,
                digits[usize::from(byte & 0xf)] as char,
            ]
        })
        .collect()
}

/// [`sample_hex`] with the digit at `position` replaced by `replacement`.
fn sample_hex_with(position: usize, replacement: char) -> String {
    let mut text = sample_hex();
    text.replace_range(position..position + 1, &replacement.to_string());
    text
}

/// `text` does not parse as an id, and the error names `given`.
#[track_caller]
fn assert_text_refused(text: &str, given: &str) {
    let error = text.parse::<UniqueId>().unwrap_err();
    assert_invalid(error, "unique id text", "256 hex digits", given);
}

#[test]
fn bytes_round_trip() {
    let bytes = sample_bytes();
    let id = UniqueId::from_bytes(bytes);
    assert_eq!(id.as_bytes(), &bytes);
    assert_eq!(UniqueId::BYTES, 128);
    assert_eq!(UniqueId::try_from_slice(&bytes).unwrap(), id);
    assert_eq!(
        UniqueId::try_from_slice(id.as_bytes()).unwrap().as_bytes(),
        &bytes
    );
}

#[test]
fn ids_with_different_bytes_differ() {
    let mut other = sample_bytes();
    other[127] ^= 1;
    assert_ne!(
        UniqueId::from_bytes(sample_bytes()),
        UniqueId::from_bytes(other)
    );
    assert_ne!(
        UniqueId::from_bytes(sample_bytes()).to_string(),
        UniqueId::from_bytes(other).to_string()
    );
}

#[test]
fn try_from_slice_rejects_wrong_lengths() {
    for len in [0usize, 1, 127, 129, 256] {
        let bytes = vec![0xab; len];
        let error = UniqueId::try_from_slice(&bytes).unwrap_err();
        assert_invalid(error, "unique id", "128 bytes", &format!("{len} bytes"));
    }
}

#[test]
fn display_is_256_lowercase_hex_digits() {
    let text = UniqueId::from_bytes(sample_bytes()).to_string();
    assert_eq!(text.len(), 256);
    assert_eq!(text, sample_hex());
    assert!(
        text.bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)),
        "{text}"
    );
    assert!(text.starts_with("01030507090b0d0f11"), "{text}");
    assert_eq!(UniqueId::from_bytes([0; 128]).to_string(), "0".repeat(256));
    assert_eq!(
        UniqueId::from_bytes([0xff; 128]).to_string(),
        "f".repeat(256)
    );
}

#[test]
fn debug_wraps_the_hex_text() {
    let id = UniqueId::from_bytes(sample_bytes());
    assert_eq!(format!("{id:?}"), format!("UniqueId({})", sample_hex()));
}

#[test]
fn text_round_trip() {
    let id = UniqueId::from_bytes(sample_bytes());
    assert_eq!(id.to_string().parse::<UniqueId>().unwrap(), id);
    assert_eq!(
        sample_hex().parse::<UniqueId>().unwrap().as_bytes(),
        &sample_bytes()
    );
}

#[test]
fn parse_accepts_upper_case_and_mixed_case() {
    let id = UniqueId::from_bytes(sample_bytes());
    assert_eq!(sample_hex().to_uppercase().parse::<UniqueId>().unwrap(), id);
    let mixed: String = sample_hex()
        .chars()
        .enumerate()
        .map(|(i, c)| {
            if i % 3 == 0 {
                c.to_ascii_uppercase()
            } else {
                c
            }
        })
        .collect();
    assert_eq!(mixed.parse::<UniqueId>().unwrap(), id);
}

#[test]
fn parse_trims_surrounding_whitespace() {
    let id = UniqueId::from_bytes(sample_bytes());
    for text in [
        format!("  {}\n", sample_hex()),
        format!("\t{}\r\n", sample_hex()),
        format!("{} ", sample_hex()),
    ] {
        assert_eq!(text.parse::<UniqueId>().unwrap(), id, "{text:?}");
    }
}

#[test]
fn parse_rejects_wrong_lengths() {
    let hex = sample_hex();
    let cases = [
        (String::new(), 0),
        ("   ".to_string(), 0),
        ("abc".to_string(), 3),
        (hex[..255].to_string(), 255),
        (format!("{hex}0"), 257),
        (format!("{hex}{hex}"), 512),
    ];
    for (text, len) in cases {
        assert_text_refused(&text, &format!("{len} characters"));
    }
}

#[test]
fn parse_rejects_whitespace_inside() {
    assert_text_refused(&sample_hex_with(100, ' '), "' ' at position 100");
}

#[test]
fn parse_names_a_bad_character_and_its_position() {
    // Even positions are the high digit of a byte, odd ones the low digit.
    for (position, bad) in [(0, 'g'), (10, 'x'), (11, 'z'), (254, 'G'), (255, '-')] {
        let text = sample_hex_with(position, bad);
        assert_text_refused(&text, &format!("{bad:?} at position {position}"));
    }
}

#[test]
fn parse_reports_the_first_bad_character() {
    let mut text = sample_hex_with(20, 'q');
    text.replace_range(7..8, "k");
    assert_text_refused(&text, "'k' at position 7");
}

#[test]
fn parse_names_a_non_ascii_character_without_panicking() {
    // 'é' is two bytes, so 254 hex digits plus 'é' is 256 bytes long; the
    // length check passes and the character check must report 'é'.
    for position in [0usize, 5, 254] {
        let mut text = "0".repeat(254);
        text.insert(position, 'é');
        assert_eq!(text.len(), 256);
        assert_text_refused(&text, &format!("'é' at position {position}"));
    }
}

#[test]
fn parse_rejects_a_sign_prefix() {
    // `u8::from_str_radix` would accept "+f"; the id parser must not.
    assert_text_refused(&sample_hex_with(0, '+'), "'+' at position 0");
}

#[cfg(feature = "serde")]
mod serde_tests {
    use super::*;

    #[test]
    fn serializes_as_the_hex_string() {
        let id = UniqueId::from_bytes(sample_bytes());
        let json = serde_json::to_string(&id).unwrap();
        assert_eq!(json, format!("\"{}\"", sample_hex()));
        assert_eq!(
            serde_json::to_value(id).unwrap(),
            serde_json::Value::String(sample_hex())
        );
    }

    #[test]
    fn json_round_trip() {
        let id = UniqueId::from_bytes(sample_bytes());
        let json = serde_json::to_string(&id).unwrap();
        assert_eq!(serde_json::from_str::<UniqueId>(&json).unwrap(), id);
        // Through an owned value and a reader too (no borrowed input).
        let value = serde_json::to_value(id).unwrap();
        assert_eq!(serde_json::from_value::<UniqueId>(value).unwrap(), id);
        assert_eq!(
            serde_json::from_reader::<_, UniqueId>(json.as_bytes()).unwrap(),
            id
        );
        // Inside a struct-like map and a list.
        let ids = vec![id, UniqueId::from_bytes([0; 128])];
        let json = serde_json::to_string(&ids).unwrap();
        assert_eq!(serde_json::from_str::<Vec<UniqueId>>(&json).unwrap(), ids);
    }

    #[test]
    fn deserializes_upper_case_and_escaped_text() {
        let id = UniqueId::from_bytes(sample_bytes());
        let upper = format!("\"{}\"", sample_hex().to_uppercase());
        assert_eq!(serde_json::from_str::<UniqueId>(&upper).unwrap(), id);
        // An escape ("\u0030" is '0', the first digit of the sample) forces
        // serde_json to hand over an owned string.
        let escaped = format!("\"\\u0030{}\"", &sample_hex()[1..]);
        assert!(sample_hex().starts_with('0'));
        assert_eq!(serde_json::from_str::<UniqueId>(&escaped).unwrap(), id);
    }

    #[test]
    fn deserialize_errors_carry_the_parse_message() {
        let error = serde_json::from_str::<UniqueId>("\"abc\"").unwrap_err();
        assert!(
            error
                .to_string()
                .contains("invalid unique id text: expected 256 hex digits, got 3 characters"),
            "{error}"
        );
        let mut bad = sample_hex();
        bad.replace_range(3..4, "g");
        let error = serde_json::from_str::<UniqueId>(&format!("\"{bad}\"")).unwrap_err();
        assert!(error.to_string().contains("'g' at position 3"), "{error}");
        let error = serde_json::from_str::<UniqueId>("42").unwrap_err();
        assert!(error.is_data(), "{error}");
    }
}
