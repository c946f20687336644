//! The `#wrong` count: the elements of a result that do not match the
//! expected one.

use nccl_core::DataType;

use super::element::Element;

/// Counts the elements of `got` that do not match `expected` (both encoded
/// as `dtype`); a length difference counts as that many wrong elements.
pub fn count_wrong(dtype: DataType, got: &[u8], expected: &[u8]) -> u64 {
    nccl_core::with_data_type!(dtype, T => count_wrong_typed::<T>(got, expected), _ => 0)
}

fn count_wrong_typed<T: Element>(got: &[u8], expected: &[u8]) -> u64 {
    let common = got.len().min(expected.len()) / T::SIZE;
    let missing = (got.len().max(expected.len()) / T::SIZE) - common;
    let mismatched = got
        .chunks_exact(T::SIZE)
        .zip(expected.chunks_exact(T::SIZE))
        .filter(|(g, e)| {
            // Identical bytes always match (and are the common case).
            g != e && !T::matches(T::read(g), T::read(e))
        })
        .count();
    (mismatched + missing) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::inputs::POISON;

    #[test]
    fn wrong_counts() {
        let encode = |values: &[f32]| {
            values
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<u8>>()
        };
        let expected = encode(&[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(count_wrong(DataType::Float32, &expected, &expected), 0);
        assert_eq!(
            count_wrong(
                DataType::Float32,
                &encode(&[1.0, 2.0000001, 3.0, 4.0]),
                &expected
            ),
            0
        );
        assert_eq!(
            count_wrong(
                DataType::Float32,
                &encode(&[1.0, 2.5, 3.0, f32::NAN]),
                &expected
            ),
            2
        );
        assert_eq!(count_wrong(DataType::Float32, &[POISON; 16], &expected), 4);
        assert_eq!(
            count_wrong(DataType::Float32, &encode(&[1.0, 2.0]), &expected),
            2
        );
        let ints: Vec<u8> = [5i32, 6, 7].iter().flat_map(|v| v.to_le_bytes()).collect();
        let off_by_one: Vec<u8> = [5i32, 6, 8].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(count_wrong(DataType::Int32, &off_by_one, &ints), 1);
        assert_eq!(count_wrong(DataType::Int8, &[1, 2, 3], &[1, 2, 4]), 1);
        for dtype in DataType::ALL {
            let size = dtype.size_bytes();
            assert_eq!(
                count_wrong(dtype, &vec![POISON; 8 * size], &vec![1; 8 * size]),
                8,
                "{dtype}"
            );
        }
    }
}
