//! The element types NCCL reduces and moves.

use std::fmt;

use nccl_sys::{Version, ncclDataType_t};

/// Every `ncclDataType_t` of the pinned header.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DataType {
    /// `ncclInt8`
    Int8,
    /// `ncclUint8`
    Uint8,
    /// `ncclInt32`
    Int32,
    /// `ncclUint32`
    Uint32,
    /// `ncclInt64`
    Int64,
    /// `ncclUint64`
    Uint64,
    /// `ncclFloat16` (IEEE half)
    Float16,
    /// `ncclFloat32`
    Float32,
    /// `ncclFloat64`
    Float64,
    /// `ncclBfloat16` (NCCL 2.10+)
    Bfloat16,
    /// `ncclFloat8e4m3` (NCCL 2.24+; reductions need compute capability 9.0)
    Float8E4M3,
    /// `ncclFloat8e5m2` (NCCL 2.24+; reductions need compute capability 9.0)
    Float8E5M2,
}

impl DataType {
    /// Every data type, in `ncclDataType_t` order.
    pub const ALL: [DataType; 12] = [
        DataType::Int8,
        DataType::Uint8,
        DataType::Int32,
        DataType::Uint32,
        DataType::Int64,
        DataType::Uint64,
        DataType::Float16,
        DataType::Float32,
        DataType::Float64,
        DataType::Bfloat16,
        DataType::Float8E4M3,
        DataType::Float8E5M2,
    ];

    /// The C value.
    pub const fn to_raw(self) -> ncclDataType_t {
        match self {
            DataType::Int8 => ncclDataType_t::ncclInt8,
            DataType::Uint8 => ncclDataType_t::ncclUint8,
            DataType::Int32 => ncclDataType_t::ncclInt32,
            DataType::Uint32 => ncclDataType_t::ncclUint32,
            DataType::Int64 => ncclDataType_t::ncclInt64,
            DataType::Uint64 => ncclDataType_t::ncclUint64,
            DataType::Float16 => ncclDataType_t::ncclFloat16,
            DataType::Float32 => ncclDataType_t::ncclFloat32,
            DataType::Float64 => ncclDataType_t::ncclFloat64,
            DataType::Bfloat16 => ncclDataType_t::ncclBfloat16,
            DataType::Float8E4M3 => ncclDataType_t::ncclFloat8e4m3,
            DataType::Float8E5M2 => ncclDataType_t::ncclFloat8e5m2,
        }
    }

    /// The data type for a C value, or `None` for one this header lacks.
    pub fn from_raw(raw: ncclDataType_t) -> Option<Self> {
        Self::ALL.into_iter().find(|dtype| dtype.to_raw() == raw)
    }

    /// Bytes per element.
    pub const fn size_bytes(self) -> usize {
        match self {
            DataType::Int8 | DataType::Uint8 | DataType::Float8E4M3 | DataType::Float8E5M2 => 1,
            DataType::Float16 | DataType::Bfloat16 => 2,
            DataType::Int32 | DataType::Uint32 | DataType::Float32 => 4,
            DataType::Int64 | DataType::Uint64 | DataType::Float64 => 8,
        }
    }

    /// The first NCCL release that knows this type.
    pub const fn min_version(self) -> Version {
        match self {
            DataType::Bfloat16 => Version::new(2, 10, 0),
            DataType::Float8E4M3 | DataType::Float8E5M2 => Version::new(2, 24, 0),
            _ => Version::new(2, 0, 0),
        }
    }

    /// Whether this is a floating-point type.
    pub const fn is_float(self) -> bool {
        matches!(
            self,
            DataType::Float16
                | DataType::Float32
                | DataType::Float64
                | DataType::Bfloat16
                | DataType::Float8E4M3
                | DataType::Float8E5M2
        )
    }

    /// Whether this is one of the 8-bit float formats, whose reductions need
    /// a GPU of compute capability 9.0 or newer.
    pub const fn is_fp8(self) -> bool {
        matches!(self, DataType::Float8E4M3 | DataType::Float8E5M2)
    }

    /// The C name (`ncclFloat32`).
    pub const fn name(self) -> &'static str {
        match self {
            DataType::Int8 => "ncclInt8",
            DataType::Uint8 => "ncclUint8",
            DataType::Int32 => "ncclInt32",
            DataType::Uint32 => "ncclUint32",
            DataType::Int64 => "ncclInt64",
            DataType::Uint64 => "ncclUint64",
            DataType::Float16 => "ncclFloat16",
            DataType::Float32 => "ncclFloat32",
            DataType::Float64 => "ncclFloat64",
            DataType::Bfloat16 => "ncclBfloat16",
            DataType::Float8E4M3 => "ncclFloat8e4m3",
            DataType::Float8E5M2 => "ncclFloat8e5m2",
        }
    }

    /// The short name nccl-tests prints (`float`, `half`, `bfloat16`, ...).
    pub const fn short_name(self) -> &'static str {
        match self {
            DataType::Int8 => "int8",
            DataType::Uint8 => "uint8",
            DataType::Int32 => "int32",
            DataType::Uint32 => "uint32",
            DataType::Int64 => "int64",
            DataType::Uint64 => "uint64",
            DataType::Float16 => "half",
            DataType::Float32 => "float",
            DataType::Float64 => "double",
            DataType::Bfloat16 => "bfloat16",
            DataType::Float8E4M3 => "f8e4m3",
            DataType::Float8E5M2 => "f8e5m2",
        }
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.short_name())
    }
}
