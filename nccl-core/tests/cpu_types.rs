//! CPU tests of `DataType`, `ReduceOp` and `scalar_bytes` (the bytes of a
//! pre-multiplied sum's scalar). No NCCL and no GPU needed.

use float8::{F8E4M3, F8E5M2};
use half::{bf16, f16};
use nccl_core::nccl_sys::{ncclDataType_t, ncclRedOp_t};
use nccl_core::{DataType, Error, ReduceOp, Version, scalar_bytes};

/// `(type, size, C value, C name, short name, float?, fp8?, min version)`.
type Row = (
    DataType,
    usize,
    u32,
    &'static str,
    &'static str,
    bool,
    bool,
    Version,
);

const V2_0: Version = Version::new(2, 0, 0);

const TABLE: [Row; 12] = [
    (DataType::Int8, 1, 0, "ncclInt8", "int8", false, false, V2_0),
    (
        DataType::Uint8,
        1,
        1,
        "ncclUint8",
        "uint8",
        false,
        false,
        V2_0,
    ),
    (
        DataType::Int32,
        4,
        2,
        "ncclInt32",
        "int32",
        false,
        false,
        V2_0,
    ),
    (
        DataType::Uint32,
        4,
        3,
        "ncclUint32",
        "uint32",
        false,
        false,
        V2_0,
    ),
    (
        DataType::Int64,
        8,
        4,
        "ncclInt64",
        "int64",
        false,
        false,
        V2_0,
    ),
    (
        DataType::Uint64,
        8,
        5,
        "ncclUint64",
        "uint64",
        false,
        false,
        V2_0,
    ),
    (
        DataType::Float16,
        2,
        6,
        "ncclFloat16",
        "half",
        true,
        false,
        V2_0,
    ),
    (
        DataType::Float32,
        4,
        7,
        "ncclFloat32",
        "float",
        true,
        false,
        V2_0,
    ),
    (
        DataType::Float64,
        8,
        8,
        "ncclFloat64",
        "double",
        true,
        false,
        V2_0,
    ),
    (
        DataType::Bfloat16,
        2,
        9,
        "ncclBfloat16",
        "bfloat16",
        true,
        false,
        Version::new(2, 10, 0),
    ),
    (
        DataType::Float8E4M3,
        1,
        10,
        "ncclFloat8e4m3",
        "f8e4m3",
        true,
        true,
        Version::new(2, 24, 0),
    ),
    (
        DataType::Float8E5M2,
        1,
        11,
        "ncclFloat8e5m2",
        "f8e5m2",
        true,
        true,
        Version::new(2, 24, 0),
    ),
];

#[test]
fn all_lists_every_type_once_in_c_order() {
    assert_eq!(DataType::ALL.len(), 12);
    for (index, (dtype, row)) in DataType::ALL.iter().zip(TABLE).enumerate() {
        assert_eq!(*dtype, row.0, "index {index}");
        assert_eq!(dtype.to_raw().0 as usize, index);
    }
}

/// One row of `for_each_data_type!`, with what the Rust type says of itself.
#[derive(Debug)]
struct MacroRow {
    dtype: DataType,
    raw: ncclDataType_t,
    raw_name: &'static str,
    rust_size: usize,
    rust_name: &'static str,
    kind: &'static str,
    bytes: usize,
    since: Version,
    short: &'static str,
    doc: &'static str,
}

macro_rules! macro_rows {
    (
        []
        $($variant:ident {
            raw: $raw:ident,
            rust: $rust:ty,
            kind: $kind:ident,
            bytes: $bytes:literal,
            since: ($major:literal, $minor:literal, $patch:literal),
            short: $short:literal,
            doc: $doc:literal
        })*
    ) => {
        [$(MacroRow {
            dtype: DataType::$variant,
            raw: ncclDataType_t::$raw,
            raw_name: stringify!($raw),
            rust_size: size_of::<$rust>(),
            rust_name: std::any::type_name::<$rust>(),
            kind: stringify!($kind),
            bytes: $bytes,
            since: Version::new($major, $minor, $patch),
            short: $short,
            doc: $doc,
        }),*]
    };
}

#[test]
fn the_table_macro_and_data_type_agree() {
    let rows = nccl_core::for_each_data_type!(macro_rows);
    assert_eq!(
        rows.iter().map(|row| row.dtype).collect::<Vec<_>>(),
        DataType::ALL.to_vec()
    );
    for row in &rows {
        let dtype = row.dtype;
        assert_eq!(row.bytes, row.rust_size, "{row:?}");
        assert_eq!(dtype.size_bytes(), row.bytes, "{row:?}");
        assert_eq!(dtype.to_raw(), row.raw, "{row:?}");
        assert_eq!(DataType::from_raw(row.raw), Some(dtype), "{row:?}");
        assert_eq!(dtype.name(), row.raw_name, "{row:?}");
        assert_eq!(dtype.short_name(), row.short, "{row:?}");
        assert_eq!(dtype.description(), row.doc, "{row:?}");
        assert_eq!(dtype.min_version(), row.since, "{row:?}");
        let (is_float, is_fp8) = match row.kind {
            "int" => (false, false),
            "float" => (true, false),
            "fp8" => (true, true),
            other => panic!("unknown kind {other} in {row:?}"),
        };
        assert_eq!(
            (dtype.is_float(), dtype.is_fp8()),
            (is_float, is_fp8),
            "{row:?}"
        );
        // The Rust type is the one of its kind: floats come from half and
        // float8 or are f32/f64, integers are primitives of the right sign.
        let rust = row.rust_name;
        assert_eq!(
            is_float,
            rust.starts_with("half::") || rust.starts_with("float8::") || rust.starts_with('f'),
            "{row:?}"
        );
        assert_eq!(is_fp8, rust.starts_with("float8::"), "{row:?}");
        let with_type = nccl_core::with_data_type!(dtype, T => std::any::type_name::<T>(), _ => "");
        assert_eq!(with_type, rust, "{row:?}");
    }
    for (index, row) in rows.iter().enumerate() {
        for other in &rows[index + 1..] {
            assert_ne!(row.raw, other.raw, "{row:?} {other:?}");
            assert_ne!(row.short, other.short, "{row:?} {other:?}");
            assert_ne!(row.rust_name, other.rust_name, "{row:?} {other:?}");
        }
    }
}

#[test]
fn size_bytes() {
    let sizes: Vec<usize> = DataType::ALL
        .iter()
        .map(|dtype| dtype.size_bytes())
        .collect();
    assert_eq!(sizes, [1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1]);
    for (dtype, size, ..) in TABLE {
        assert_eq!(dtype.size_bytes(), size, "{dtype:?}");
    }
}

#[test]
fn sizes_match_the_rust_types() {
    assert_eq!(DataType::Int8.size_bytes(), size_of::<i8>());
    assert_eq!(DataType::Uint64.size_bytes(), size_of::<u64>());
    assert_eq!(DataType::Float16.size_bytes(), size_of::<f16>());
    assert_eq!(DataType::Bfloat16.size_bytes(), size_of::<bf16>());
    assert_eq!(DataType::Float8E4M3.size_bytes(), size_of::<F8E4M3>());
    assert_eq!(DataType::Float8E5M2.size_bytes(), size_of::<F8E5M2>());
}

#[test]
fn raw_values_match_the_header_and_round_trip() {
    for (dtype, _, raw, ..) in TABLE {
        assert_eq!(dtype.to_raw(), ncclDataType_t(raw), "{dtype:?}");
        assert_eq!(DataType::from_raw(dtype.to_raw()), Some(dtype));
    }
    assert_eq!(DataType::Float32.to_raw(), ncclDataType_t::ncclFloat32);
    assert_eq!(DataType::Bfloat16.to_raw(), ncclDataType_t::ncclBfloat16);
    assert_eq!(
        DataType::Float8E5M2.to_raw(),
        ncclDataType_t::ncclFloat8e5m2
    );
    // Aliases of the header map to the same type.
    assert_eq!(
        DataType::from_raw(ncclDataType_t::ncclChar),
        Some(DataType::Int8)
    );
    assert_eq!(
        DataType::from_raw(ncclDataType_t::ncclHalf),
        Some(DataType::Float16)
    );
    assert_eq!(
        DataType::from_raw(ncclDataType_t::ncclDouble),
        Some(DataType::Float64)
    );
}

#[test]
fn unknown_raw_values_are_none() {
    for raw in [ncclDataType_t::ncclNumTypes.0, 12, 13, 255, u32::MAX] {
        assert_eq!(DataType::from_raw(ncclDataType_t(raw)), None, "{raw}");
    }
}

#[test]
fn names_float_flags_and_versions() {
    for (dtype, _, _, name, short, is_float, is_fp8, version) in TABLE {
        assert_eq!(dtype.name(), name, "{dtype:?}");
        assert_eq!(dtype.short_name(), short, "{dtype:?}");
        assert_eq!(dtype.to_string(), short, "{dtype:?}");
        assert_eq!(dtype.is_float(), is_float, "{dtype:?}");
        assert_eq!(dtype.is_fp8(), is_fp8, "{dtype:?}");
        assert_eq!(dtype.min_version(), version, "{dtype:?}");
    }
    assert_eq!(DataType::Bfloat16.min_version(), Version::new(2, 10, 0));
    assert_eq!(DataType::Float8E4M3.min_version(), Version::new(2, 24, 0));
    assert!(DataType::Float8E5M2.min_version().at_least(2, 24));
    assert!(!DataType::Float8E5M2.min_version().at_least(2, 25));
}

#[test]
fn reduce_op_raw_values_and_names() {
    let expected = [
        (ReduceOp::Sum, 0, "sum", ncclRedOp_t::ncclSum),
        (ReduceOp::Prod, 1, "prod", ncclRedOp_t::ncclProd),
        (ReduceOp::Max, 2, "max", ncclRedOp_t::ncclMax),
        (ReduceOp::Min, 3, "min", ncclRedOp_t::ncclMin),
        (ReduceOp::Avg, 4, "avg", ncclRedOp_t::ncclAvg),
    ];
    assert_eq!(
        ReduceOp::ALL.to_vec(),
        expected.iter().map(|row| row.0).collect::<Vec<_>>()
    );
    for (op, raw, name, constant) in expected {
        assert_eq!(op.to_raw(), ncclRedOp_t(raw), "{op:?}");
        assert_eq!(op.to_raw(), constant, "{op:?}");
        assert_eq!(op.name(), name);
        assert_eq!(op.to_string(), name);
    }
}

#[test]
fn builtin_reductions() {
    use nccl_core::Reduction;
    for op in ReduceOp::ALL {
        let reduction = Reduction::from(op);
        assert_eq!(reduction.to_raw(), op.to_raw());
        assert_eq!(reduction.name(), op.name());
        assert_eq!(reduction.data_type(), None);
    }
}

/// `bytes` followed by zeros, as `scalar_bytes` returns them.
fn padded(bytes: &[u8]) -> [u8; 8] {
    let mut out = [0; 8];
    out[..bytes.len()].copy_from_slice(bytes);
    out
}

#[test]
fn scalar_bytes_of_one_half_for_float_types() {
    assert_eq!(
        scalar_bytes(DataType::Float32, 0.5).unwrap(),
        padded(&0.5f32.to_ne_bytes())
    );
    assert_eq!(
        scalar_bytes(DataType::Float64, 0.5).unwrap(),
        0.5f64.to_ne_bytes()
    );
    assert_eq!(
        scalar_bytes(DataType::Float16, 0.5).unwrap(),
        padded(&f16::from_f32(0.5).to_ne_bytes())
    );
    assert_eq!(
        scalar_bytes(DataType::Bfloat16, 0.5).unwrap(),
        padded(&bf16::from_f32(0.5).to_ne_bytes())
    );
    assert_eq!(
        scalar_bytes(DataType::Float8E4M3, 0.5).unwrap(),
        padded(&[F8E4M3::from_f32(0.5).to_bits()])
    );
    assert_eq!(
        scalar_bytes(DataType::Float8E5M2, 0.5).unwrap(),
        padded(&[F8E5M2::from_f32(0.5).to_bits()])
    );
}

#[test]
fn scalar_bytes_of_one_half_are_the_ieee_encodings() {
    // Independent of the half/float8 crates: the bit patterns by hand.
    assert_eq!(
        scalar_bytes(DataType::Float16, 0.5).unwrap(),
        padded(&0x3800u16.to_ne_bytes())
    );
    assert_eq!(
        scalar_bytes(DataType::Bfloat16, 0.5).unwrap(),
        padded(&0x3f00u16.to_ne_bytes())
    );
    assert_eq!(
        scalar_bytes(DataType::Float32, 0.5).unwrap(),
        padded(&0x3f00_0000u32.to_ne_bytes())
    );
    // e4m3: bias 7, so 0.5 = 2^-1 is exponent 6: 0 0110 000.
    assert_eq!(
        scalar_bytes(DataType::Float8E4M3, 0.5).unwrap(),
        padded(&[0x30])
    );
    // e5m2: bias 15, so 0.5 is exponent 14: 0 01110 00.
    assert_eq!(
        scalar_bytes(DataType::Float8E5M2, 0.5).unwrap(),
        padded(&[0x38])
    );
}

#[test]
fn scalar_bytes_round_to_nearest_for_float_types() {
    let value = 0.1;
    assert_eq!(
        scalar_bytes(DataType::Float32, value).unwrap(),
        padded(&(value as f32).to_ne_bytes())
    );
    assert_eq!(
        scalar_bytes(DataType::Float16, value).unwrap(),
        padded(&f16::from_f64(value).to_ne_bytes())
    );
    assert_eq!(
        scalar_bytes(DataType::Bfloat16, value).unwrap(),
        padded(&bf16::from_f64(value).to_ne_bytes())
    );
    assert_eq!(
        scalar_bytes(DataType::Float8E4M3, -3.0).unwrap(),
        padded(&[F8E4M3::from_f64(-3.0).to_bits()])
    );
    assert_eq!(
        scalar_bytes(DataType::Float8E5M2, -3.0).unwrap(),
        padded(&[F8E5M2::from_f64(-3.0).to_bits()])
    );
    assert_eq!(
        F8E4M3::from_bits(scalar_bytes(DataType::Float8E4M3, -3.0).unwrap()[0]).to_f64(),
        -3.0
    );
}

#[test]
fn scalar_bytes_of_integers_are_exact() {
    assert_eq!(
        scalar_bytes(DataType::Int8, -3.0).unwrap(),
        padded(&(-3i8).to_ne_bytes())
    );
    assert_eq!(
        scalar_bytes(DataType::Int8, -128.0).unwrap(),
        padded(&[0x80])
    );
    assert_eq!(
        scalar_bytes(DataType::Int8, 127.0).unwrap(),
        padded(&[0x7f])
    );
    assert_eq!(
        scalar_bytes(DataType::Uint8, 255.0).unwrap(),
        padded(&[0xff])
    );
    assert_eq!(scalar_bytes(DataType::Uint8, 0.0).unwrap(), [0; 8]);
    assert_eq!(
        scalar_bytes(DataType::Int32, -2.0).unwrap(),
        padded(&(-2i32).to_ne_bytes())
    );
    assert_eq!(
        scalar_bytes(DataType::Int32, 2_147_483_647.0).unwrap(),
        padded(&i32::MAX.to_ne_bytes())
    );
    assert_eq!(
        scalar_bytes(DataType::Uint32, 4_000_000_000.0).unwrap(),
        padded(&4_000_000_000u32.to_ne_bytes())
    );
    assert_eq!(
        scalar_bytes(DataType::Int64, -9_007_199_254_740_992.0).unwrap(),
        (-(1i64 << 53)).to_ne_bytes()
    );
    assert_eq!(
        scalar_bytes(DataType::Uint64, (1u64 << 60) as f64).unwrap(),
        (1u64 << 60).to_ne_bytes()
    );
    assert_eq!(
        scalar_bytes(DataType::Int64, -9_223_372_036_854_775_808.0).unwrap(),
        i64::MIN.to_ne_bytes()
    );
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

#[test]
fn scalar_bytes_rejects_fractions_for_integer_types() {
    assert_scalar_rejected(
        DataType::Int32,
        0.5,
        "an integer that fits i32 for int32",
        "0.5",
    );
    assert_scalar_rejected(
        DataType::Int8,
        -1.25,
        "an integer that fits i8 for int8",
        "-1.25",
    );
    assert_scalar_rejected(
        DataType::Uint64,
        2.5,
        "an integer that fits u64 for uint64",
        "2.5",
    );
}

#[test]
fn scalar_bytes_rejects_integers_out_of_range() {
    assert_scalar_rejected(
        DataType::Uint8,
        300.0,
        "an integer that fits u8 for uint8",
        "300",
    );
    assert_scalar_rejected(
        DataType::Uint8,
        -1.0,
        "an integer that fits u8 for uint8",
        "-1",
    );
    assert_scalar_rejected(
        DataType::Int8,
        128.0,
        "an integer that fits i8 for int8",
        "128",
    );
    assert_scalar_rejected(
        DataType::Int8,
        -129.0,
        "an integer that fits i8 for int8",
        "-129",
    );
    assert_scalar_rejected(
        DataType::Int32,
        2_147_483_648.0,
        "an integer that fits i32 for int32",
        "2147483648",
    );
    assert_scalar_rejected(
        DataType::Uint32,
        4_294_967_296.0,
        "an integer that fits u32 for uint32",
        "4294967296",
    );
    assert_scalar_rejected(
        DataType::Uint32,
        -1.0,
        "an integer that fits u32 for uint32",
        "-1",
    );
    assert_scalar_rejected(
        DataType::Uint64,
        -1.0,
        "an integer that fits u64 for uint64",
        "-1",
    );
}

/// 2^63 and 2^64 do not fit `i64`/`u64`, but `scalar as i64` saturates to
/// `i64::MAX`, which rounds back to 2^63 as an f64, so the round-trip check
/// in `scalar_bytes` (nccl-core/src/reduce_op.rs, `encode!(int, ..)`) accepts
/// them and encodes `i64::MAX` / `u64::MAX` instead.
#[test]
fn scalar_bytes_rejects_the_first_value_past_64_bit_ranges() {
    assert_scalar_rejected(
        DataType::Int64,
        9_223_372_036_854_775_808.0,
        "an integer that fits i64 for int64",
        "9223372036854776000",
    );
    assert_scalar_rejected(
        DataType::Uint64,
        18_446_744_073_709_551_616.0,
        "an integer that fits u64 for uint64",
        "18446744073709552000",
    );
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
