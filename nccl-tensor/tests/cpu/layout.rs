//! CPU tests of the element-type table (`NcclType`), row-major strides and
//! contiguity (`contiguous_strides`, `is_contiguous`) and `BufferDesc`.
//! No GPU and no NCCL needed.

use std::collections::HashSet;

use nccl_core::DataType;
use nccl_tensor::{BufferDesc, NcclType, contiguous_strides, is_contiguous};

/// `T::DATA_TYPE` is `expected`, and its size is the Rust type's size (the
/// safety contract of `NcclType`). Returns the data type.
#[track_caller]
fn row<T: NcclType>(expected: DataType, size: usize) -> DataType {
    assert_eq!(T::DATA_TYPE, expected, "{}", std::any::type_name::<T>());
    assert_eq!(size_of::<T>(), size, "{}", std::any::type_name::<T>());
    assert_eq!(
        T::DATA_TYPE.size_bytes(),
        size_of::<T>(),
        "{}",
        std::any::type_name::<T>()
    );
    T::DATA_TYPE
}

/// `row` for every row of the data-type table.
macro_rules! table_rows {
    (
        []
        $($variant:ident {
            raw: $raw:ident, rust: $rust:ty, kind: $kind:ident, bytes: $bytes:literal,
            $($field:ident: $value:tt),*
        })*
    ) => {
        [$(row::<$rust>(DataType::$variant, $bytes)),*]
    };
}

#[test]
fn every_nccl_type_maps_to_its_data_type_of_the_same_size() {
    let mapped = nccl_core::for_each_data_type!(table_rows);
    // The table's Rust types cover every NCCL data type exactly once.
    let distinct: HashSet<DataType> = mapped.into_iter().collect();
    assert_eq!(distinct.len(), mapped.len());
    assert_eq!(distinct, DataType::ALL.into_iter().collect());
    // Spot checks written out by hand.
    row::<i8>(DataType::Int8, 1);
    row::<u64>(DataType::Uint64, 8);
    row::<half::f16>(DataType::Float16, 2);
    row::<half::bf16>(DataType::Bfloat16, 2);
    row::<f32>(DataType::Float32, 4);
    row::<float8::F8E4M3>(DataType::Float8E4M3, 1);
    row::<float8::F8E5M2>(DataType::Float8E5M2, 1);
}

#[test]
fn contiguous_strides_are_row_major() {
    let cases: [(&[usize], &[usize]); 9] = [
        (&[], &[]),
        (&[5], &[1]),
        (&[0], &[1]),
        (&[3, 4], &[4, 1]),
        (&[2, 3, 4], &[12, 4, 1]),
        (&[3, 1, 2], &[2, 2, 1]),
        (&[1, 1, 1], &[1, 1, 1]),
        (&[2, 3, 4, 5], &[60, 20, 5, 1]),
        // A zero extent zeroes the strides outside it (like its product).
        (&[2, 0, 3], &[0, 3, 1]),
    ];
    for (shape, strides) in cases {
        assert_eq!(contiguous_strides(shape), strides, "shape {shape:?}");
        assert!(is_contiguous(shape, strides), "shape {shape:?}");
    }
}

#[test]
fn is_contiguous_accepts_row_major_strides() {
    assert!(is_contiguous(&[2, 3, 4], &[12, 4, 1]));
    assert!(is_contiguous(&[7], &[1]));
    assert!(is_contiguous(&[4, 8], &[8, 1]));
}

#[test]
fn is_contiguous_ignores_the_stride_of_size_1_dimensions() {
    assert!(is_contiguous(&[1], &[0]));
    assert!(is_contiguous(&[1], &[42]));
    assert!(is_contiguous(&[1, 4], &[999, 1]));
    assert!(is_contiguous(&[4, 1], &[1, 7]));
    assert!(is_contiguous(&[2, 1, 3], &[3, 100, 1]));
    assert!(is_contiguous(&[1, 1, 5], &[0, 0, 1]));
    // ... but not of the others.
    assert!(!is_contiguous(&[1, 4], &[4, 2]));
}

#[test]
fn a_transposed_or_sliced_view_is_not_contiguous() {
    // The transpose of a row-major [3, 2] matrix.
    assert!(!is_contiguous(&[2, 3], &[1, 2]));
    // The transpose of a row-major [4, 8] matrix.
    assert!(!is_contiguous(&[8, 4], &[1, 8]));
    // Every other row of a [4, 3] matrix.
    assert!(!is_contiguous(&[2, 3], &[6, 1]));
    // Every other column.
    assert!(!is_contiguous(&[4, 2], &[3, 2]));
    // A stride-2 vector.
    assert!(!is_contiguous(&[5], &[2]));
    // A broadcast (stride 0) dimension of extent > 1.
    assert!(!is_contiguous(&[3, 4], &[0, 1]));
    // Column-major (Fortran) order.
    assert!(!is_contiguous(&[2, 3, 4], &[1, 2, 6]));
}

#[test]
fn empty_and_zero_dimensional_shapes() {
    // A 0-d tensor (one element) is contiguous.
    assert_eq!(contiguous_strides(&[]), Vec::<usize>::new());
    assert!(is_contiguous(&[], &[]));
    // Empty shapes with their row-major strides are contiguous.
    assert!(is_contiguous(&[0], &[1]));
    assert!(is_contiguous(&[0, 3], &[3, 1]));
    assert!(is_contiguous(&[3, 0], &[0, 1]));
}

#[test]
fn an_empty_view_is_contiguous_whatever_its_strides() {
    // An empty column slice `x[:, 0..0]` of a row-major [2, 8] tensor: no
    // elements, so nothing to address; torch calls it contiguous.
    assert!(is_contiguous(&[2, 0], &[8, 1]));
    assert!(is_contiguous(&[0, 3], &[1, 2]));
}

#[test]
fn strides_of_another_rank_are_not_contiguous() {
    assert!(!is_contiguous(&[2, 3], &[3]));
    assert!(!is_contiguous(&[2, 3], &[]));
    assert!(!is_contiguous(&[6], &[1, 1]));
}

#[test]
fn buffer_desc_contiguous_sets_every_field() {
    let desc = BufferDesc::contiguous(DataType::Float16, 7, 3);
    assert_eq!(
        desc,
        BufferDesc {
            dtype: DataType::Float16,
            len: 7,
            device: 3,
            strided: None,
        }
    );
    assert!(desc.is_contiguous());
    let empty = BufferDesc::contiguous(DataType::Float8E5M2, 0, 0);
    assert_eq!(
        (empty.dtype, empty.len, empty.device),
        (DataType::Float8E5M2, 0, 0)
    );
    assert!(empty.is_contiguous());
    // Usable in constants.
    const DESC: BufferDesc<'static> = BufferDesc::contiguous(DataType::Int8, 1, 0);
    assert!(DESC.is_contiguous());
}

#[test]
fn buffer_desc_with_strides_is_not_contiguous() {
    let (shape, strides) = ([2, 3], [1, 2]);
    let desc = BufferDesc {
        dtype: DataType::Float32,
        len: 6,
        device: 0,
        strided: Some((&shape, &strides)),
    };
    assert!(!desc.is_contiguous());
    // `is_contiguous` only says whether strides are attached: a desc is
    // given strides only when they are not row-major (`TensorCell::desc`).
    let (shape, strides) = ([2, 3], [3, 1]);
    let attached = BufferDesc {
        strided: Some((&shape, &strides)),
        ..desc
    };
    assert!(!attached.is_contiguous());
    assert_ne!(attached, BufferDesc::contiguous(DataType::Float32, 6, 0));
}
