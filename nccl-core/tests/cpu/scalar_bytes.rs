//! CPU tests of `scalar_bytes`, the bytes of a pre-multiplied sum's scalar
//! for each data type: exact encodings, rounding, and the values each type
//! rejects. No NCCL and no GPU needed.

use float8::{F8E4M3, F8E5M2};
use half::{bf16, f16};
use nccl_core::{DataType, Error, scalar_bytes};

/// `bytes` followed by zeros, as `scalar_bytes` returns them.
fn padded(bytes: &[u8]) -> [u8; 8] {
    let mut out = [0; 8];
    out[..bytes.len()].copy_from_slice(bytes);
    out
}

/// Asserts `scalar_bytes(dtype, scalar)` is `bytes` for each row.
#[track_caller]
fn assert_encodings(rows: &[(DataType, f64, [u8; 8])]) {
    for &(dtype, scalar, bytes) in rows {
        assert_eq!(
            scalar_bytes(dtype, scalar).unwrap(),
            bytes,
            "{dtype:?} {scalar}"
        );
    }
}

#[test]
fn scalar_bytes_of_one_half_for_float_types() {
    assert_encodings(&[
        (DataType::Float32, 0.5, padded(&0.5f32.to_ne_bytes())),
        (DataType::Float64, 0.5, 0.5f64.to_ne_bytes()),
        (
            DataType::Float16,
            0.5,
            padded(&f16::from_f32(0.5).to_ne_bytes()),
        ),
        (
            DataType::Bfloat16,
            0.5,
            padded(&bf16::from_f32(0.5).to_ne_bytes()),
        ),
        (
            DataType::Float8E4M3,
            0.5,
            padded(&[F8E4M3::from_f32(0.5).to_bits()]),
        ),
        (
            DataType::Float8E5M2,
            0.5,
            padded(&[F8E5M2::from_f32(0.5).to_bits()]),
        ),
    ]);
}

#[test]
fn scalar_bytes_of_one_half_are_the_ieee_encodings() {
    // Independent of the half/float8 crates: the bit patterns by hand.
    assert_encodings(&[
        (DataType::Float16, 0.5, padded(&0x3800u16.to_ne_bytes())),
        (DataType::Bfloat16, 0.5, padded(&0x3f00u16.to_ne_bytes())),
        (
            DataType::Float32,
            0.5,
            padded(&0x3f00_0000u32.to_ne_bytes()),
        ),
        // e4m3: bias 7, so 0.5 = 2^-1 is exponent 6: 0 0110 000.
        (DataType::Float8E4M3, 0.5, padded(&[0x30])),
        // e5m2: bias 15, so 0.5 is exponent 14: 0 01110 00.
        (DataType::Float8E5M2, 0.5, padded(&[0x38])),
    ]);
}

#[test]
fn scalar_bytes_round_to_nearest_for_float_types() {
    let value = 0.1;
    assert_encodings(&[
        (
            DataType::Float32,
            value,
            padded(&(value as f32).to_ne_bytes()),
        ),
        (
            DataType::Float16,
            value,
            padded(&f16::from_f64(value).to_ne_bytes()),
        ),
        (
            DataType::Bfloat16,
            value,
            padded(&bf16::from_f64(value).to_ne_bytes()),
        ),
        (
            DataType::Float8E4M3,
            -3.0,
            padded(&[F8E4M3::from_f64(-3.0).to_bits()]),
        ),
        (
            DataType::Float8E5M2,
            -3.0,
            padded(&[F8E5M2::from_f64(-3.0).to_bits()]),
        ),
    ]);
    assert_eq!(
        F8E4M3::from_bits(scalar_bytes(DataType::Float8E4M3, -3.0).unwrap()[0]).to_f64(),
        -3.0
    );
}

#[test]
fn scalar_bytes_of_integers_are_exact() {
    assert_encodings(&[
        (DataType::Int8, -3.0, padded(&(-3i8).to_ne_bytes())),
        (DataType::Int8, -128.0, padded(&[0x80])),
        (DataType::Int8, 127.0, padded(&[0x7f])),
        (DataType::Uint8, 255.0, padded(&[0xff])),
        (DataType::Uint8, 0.0, [0; 8]),
        (DataType::Int32, -2.0, padded(&(-2i32).to_ne_bytes())),
        (
            DataType::Int32,
            2_147_483_647.0,
            padded(&i32::MAX.to_ne_bytes()),
        ),
        (
            DataType::Uint32,
            4_000_000_000.0,
            padded(&4_000_000_000u32.to_ne_bytes()),
        ),
        (
            DataType::Int64,
            -9_007_199_254_740_992.0,
            (-(1i64 << 53)).to_ne_bytes(),
        ),
        (
            DataType::Uint64,
            (1u64 << 60) as f64,
            (1u64 << 60).to_ne_bytes(),
        ),
        (
            DataType::Int64,
            -9_223_372_036_854_775_808.0,
            i64::MIN.to_ne_bytes(),
        ),
    ]);
}

/// Asserts `scalar_bytes(dtype, scalar)` fails naming `expected` and `given`.
fn assert_scalar_rejected(dtype: DataType, scalar: f64, expected: &str, given: &str) {
    let error = scalar_bytes(dtype, scalar).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!("invalid pre-multiplied sum scalar: expected {expected}, got {given}"),
        "{dtype:?} {scalar}"
    );
    assert!(
        matches!(
            error,
            Error::InvalidArgument {
                argument: "pre-multiplied sum scalar",
                ..
            }
        ),
        "{error:?}"
    );
}

/// Asserts each `(dtype, scalar, given)` is refused as not an integer that
/// fits the type (`fits` is the Rust type's name).
fn assert_not_fitting(rows: &[(DataType, &str, f64, &str)]) {
    for &(dtype, fits, scalar, given) in rows {
        let expected = format!("an integer that fits {fits} for {dtype}");
        assert_scalar_rejected(dtype, scalar, &expected, given);
    }
}

#[test]
fn scalar_bytes_rejects_fractions_and_integers_out_of_range() {
    assert_not_fitting(&[
        // Fractions.
        (DataType::Int32, "i32", 0.5, "0.5"),
        (DataType::Int8, "i8", -1.25, "-1.25"),
        (DataType::Uint64, "u64", 2.5, "2.5"),
        // Integers out of range.
        (DataType::Uint8, "u8", 300.0, "300"),
        (DataType::Uint8, "u8", -1.0, "-1"),
        (DataType::Int8, "i8", 128.0, "128"),
        (DataType::Int8, "i8", -129.0, "-129"),
        (DataType::Int32, "i32", 2_147_483_648.0, "2147483648"),
        (DataType::Uint32, "u32", 4_294_967_296.0, "4294967296"),
        (DataType::Uint32, "u32", -1.0, "-1"),
        (DataType::Uint64, "u64", -1.0, "-1"),
    ]);
}

/// 2^63 and 2^64 do not fit `i64`/`u64`, but `scalar as i64` saturates to
/// `i64::MAX`, which rounds back to 2^63 as an f64, so the round-trip check
/// in `scalar_bytes` (nccl-core/src/reduce_op.rs, `encode!(int, ..)`) accepts
/// them and encodes `i64::MAX` / `u64::MAX` instead.
#[test]
fn scalar_bytes_rejects_the_first_value_past_64_bit_ranges() {
    assert_not_fitting(&[
        (
            DataType::Int64,
            "i64",
            9_223_372_036_854_775_808.0,
            "9223372036854776000",
        ),
        (
            DataType::Uint64,
            "u64",
            18_446_744_073_709_551_616.0,
            "18446744073709552000",
        ),
    ]);
}

#[test]
fn scalar_bytes_rejects_non_finite_values_for_every_type() {
    for dtype in DataType::ALL {
        for (scalar, given) in [
            (f64::NAN, "NaN"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
        ] {
            assert_scalar_rejected(
                dtype,
                scalar,
                &format!("a finite number for {dtype}"),
                given,
            );
        }
    }
}

#[test]
fn scalar_bytes_of_one_for_every_type() {
    for dtype in DataType::ALL {
        let bytes = scalar_bytes(dtype, 1.0).unwrap();
        let size = dtype.size_bytes();
        assert!(
            bytes[size..].iter().all(|&b| b == 0),
            "{dtype:?}: {bytes:?}"
        );
        let expected: Vec<u8> = match dtype {
            DataType::Int8 => 1i8.to_ne_bytes().to_vec(),
            DataType::Uint8 => 1u8.to_ne_bytes().to_vec(),
            DataType::Int32 => 1i32.to_ne_bytes().to_vec(),
            DataType::Uint32 => 1u32.to_ne_bytes().to_vec(),
            DataType::Int64 => 1i64.to_ne_bytes().to_vec(),
            DataType::Uint64 => 1u64.to_ne_bytes().to_vec(),
            DataType::Float16 => f16::ONE.to_ne_bytes().to_vec(),
            DataType::Float32 => 1f32.to_ne_bytes().to_vec(),
            DataType::Float64 => 1f64.to_ne_bytes().to_vec(),
            DataType::Bfloat16 => bf16::ONE.to_ne_bytes().to_vec(),
            DataType::Float8E4M3 => vec![F8E4M3::ONE.to_bits()],
            DataType::Float8E5M2 => vec![F8E5M2::ONE.to_bits()],
            other => panic!("a data type this test does not know: {other:?}"),
        };
        assert_eq!(&bytes[..size], expected.as_slice(), "{dtype:?}");
    }
}

#[test]
fn scalar_bytes_rejects_floats_past_the_range_and_fp8_saturates() {
    for (dtype, scalar, given) in [
        (DataType::Float16, 70_000.0, "70000"),
        (
            DataType::Bfloat16,
            1e39,
            "1000000000000000000000000000000000000000",
        ),
        (
            DataType::Float32,
            1e39,
            "1000000000000000000000000000000000000000",
        ),
    ] {
        assert_scalar_rejected(
            dtype,
            scalar,
            &format!("a number within the type's range for {dtype}"),
            given,
        );
    }
    assert_eq!(
        scalar_bytes(DataType::Float64, 1e300).unwrap(),
        1e300f64.to_ne_bytes()
    );
    // float8's conversion saturates to the largest finite magnitude.
    let e4m3 = scalar_bytes(DataType::Float8E4M3, 1e6).unwrap();
    assert_eq!(F8E4M3::from_bits(e4m3[0]).to_f64(), 448.0);
    let e5m2 = scalar_bytes(DataType::Float8E5M2, -1e6).unwrap();
    assert_eq!(F8E5M2::from_bits(e5m2[0]).to_f64(), -57_344.0);
}
