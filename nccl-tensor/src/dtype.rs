//! The element types NCCL can move, mapped to their `ncclDataType_t`.

use cudarc::driver::DeviceRepr;
use nccl_core::DataType;

mod sealed {
    pub trait Sealed {}
}

/// A Rust element type with a NCCL data type of the same size and layout.
///
/// Sealed: implemented for the Rust type of every [`DataType`] (its
/// variants name them: `f32`, `half::bf16`, `float8::F8E4M3`, ...), from
/// the table of [`nccl_core::for_each_data_type!`].
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

macro_rules! nccl_type_impls {
    ([] $($variant:ident { raw: $raw:ident, rust: $rust:ty, $($field:ident: $value:tt),* })*) => {$(
        impl sealed::Sealed for $rust {}
        // SAFETY: the sizes match (asserted below, at compile time) and the
        // table's Rust types are plain numbers, every bit pattern of which
        // is a valid value.
        unsafe impl NcclType for $rust {
            const DATA_TYPE: DataType = DataType::$variant;
        }
        const _: () = assert!(
            size_of::<$rust>() == DataType::$variant.size_bytes(),
            concat!("the size of ", stringify!($variant), "'s Rust type differs from NCCL's"),
        );
    )*};
}

nccl_core::for_each_data_type!(nccl_type_impls);
