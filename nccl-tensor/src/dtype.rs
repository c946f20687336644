//! The element types NCCL can move, mapped to their `ncclDataType_t`.

use cudarc::driver::DeviceRepr;
use nccl_core::DataType;

mod sealed {
    pub trait Sealed {}
}

/// A Rust element type with a NCCL data type of the same size and layout.
///
/// Sealed: only the types below implement it.
///
/// | Rust | NCCL |
/// |---|---|
/// | `i8`, `u8`, `i32`, `u32`, `i64`, `u64` | `ncclInt8` ... `ncclUint64` |
/// | `half::f16`, `half::bf16` | `ncclFloat16`, `ncclBfloat16` (NCCL 2.10+) |
/// | `f32`, `f64` | `ncclFloat32`, `ncclFloat64` |
/// | `float8::F8E4M3`, `float8::F8E5M2` | `ncclFloat8e4m3`, `ncclFloat8e5m2` (NCCL 2.24+; reductions need compute capability 9.0) |
///
/// # Safety
/// `DATA_TYPE.size_bytes()` equals `size_of::<Self>()` and every bit
/// pattern NCCL may write is a valid `Self`.
pub unsafe trait NcclType:
    DeviceRepr + Copy + Send + Sync + 'static + sealed::Sealed
{
    /// The matching NCCL data type.
    const DATA_TYPE: DataType;
}

macro_rules! nccl_type {
    ($($t:ty => $dtype:ident),* $(,)?) => {$(
        impl sealed::Sealed for $t {}
        // SAFETY: the sizes match (checked by a test over every type) and
        // every bit pattern is a valid value of these plain numeric types.
        unsafe impl NcclType for $t {
            const DATA_TYPE: DataType = DataType::$dtype;
        }
    )*};
}

nccl_type! {
    i8 => Int8,
    u8 => Uint8,
    i32 => Int32,
    u32 => Uint32,
    i64 => Int64,
    u64 => Uint64,
    half::f16 => Float16,
    half::bf16 => Bfloat16,
    f32 => Float32,
    f64 => Float64,
    float8::F8E4M3 => Float8E4M3,
    float8::F8E5M2 => Float8E5M2,
}
