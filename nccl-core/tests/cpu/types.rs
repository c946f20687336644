//! CPU tests of `DataType` and `ReduceOp`: the data type table, sizes, raw
//! values, names and reductions. No NCCL and no GPU needed (the scalars of
//! pre-multiplied sums are in `cpu/scalar_bytes.rs`).

use float8::{F8E4M3, F8E5M2};
use half::{bf16, f16};
use nccl_core::nccl_sys::{ncclDataType_t, ncclRedOp_t};
use nccl_core::{DataType, ReduceOp, Version};

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
    torch: &'static str,
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
            torch: $torch:literal,
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
            torch: $torch,
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
        assert_eq!(dtype.torch_name(), row.torch, "{row:?}");
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
