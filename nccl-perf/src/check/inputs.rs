//! The deterministic inputs of every rank, the poison byte, and their
//! encoding into periodic buffer images.

use nccl_core::ReduceOp;

use super::element::Element;

/// The byte every poisoned output element is filled with.
pub const POISON: u8 = 0xFF;

/// Inputs of reducing collectives repeat with this period in the element index.
pub const REDUCTION_PERIOD: usize = 44;
/// Inputs of data-moving collectives repeat with this period in the element index.
pub const MOVEMENT_PERIOD: usize = 97;

/// The input of `rank` at element `index` of a reducing collective:
/// `1..=11` for sum, max, min and avg; 1 or 2 for prod (at most one rank
/// in four contributes a 2 to each element, so products stay small).
pub fn reduction_input(op: ReduceOp, rank: usize, index: usize) -> f64 {
    match op {
        ReduceOp::Prod => {
            if (index % 4 + rank % 4).is_multiple_of(4) {
                2.0
            } else {
                1.0
            }
        }
        _ => (1 + (index % 11 * 7 + rank % 11 * 3) % 11) as f64,
    }
}

/// The input of `rank` at element `index` of a data-moving collective
/// (broadcast, all_gather, all_to_all, sendrecv): `1..=97`, different per rank.
pub fn movement_input(rank: usize, index: usize) -> f64 {
    (1 + (index % MOVEMENT_PERIOD * 7 + rank % MOVEMENT_PERIOD * 31) % MOVEMENT_PERIOD) as f64
}

/// One period of a value pattern, encoded: element `i` is `value(i)`.
pub(super) fn encode_period<T: Element>(period: usize, value: impl Fn(usize) -> f64) -> Vec<u8> {
    let mut bytes = vec![0u8; period * T::SIZE];
    for (index, chunk) in bytes.chunks_exact_mut(T::SIZE).enumerate() {
        T::from_f64(value(index)).write(chunk);
    }
    bytes
}

/// Elements `start..start + len` of the endless repetition of `period`
/// (an encoded pattern of `elem_size`-byte elements).
pub(super) fn tile(period: &[u8], elem_size: usize, start: usize, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len * elem_size);
    let period_elems = period.len() / elem_size;
    if period_elems == 0 {
        return out;
    }
    let mut phase = start % period_elems;
    let mut left = len;
    while left > 0 {
        let take = left.min(period_elems - phase);
        out.extend_from_slice(&period[phase * elem_size..(phase + take) * elem_size]);
        left -= take;
        phase = 0;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_are_nonzero_periodic_and_rank_dependent() {
        for op in ReduceOp::ALL {
            for rank in 0..8 {
                for i in 0..200 {
                    let v = reduction_input(op, rank, i);
                    assert!((1.0..=11.0).contains(&v));
                    assert_eq!(v, reduction_input(op, rank, i + REDUCTION_PERIOD));
                }
            }
        }
        for rank in 0..8 {
            for i in 0..300 {
                let v = movement_input(rank, i);
                assert!((1.0..=97.0).contains(&v));
                assert_eq!(v, movement_input(rank, i + MOVEMENT_PERIOD));
            }
        }
        assert_ne!(movement_input(0, 5), movement_input(1, 5));
        assert_ne!(
            reduction_input(ReduceOp::Sum, 0, 5),
            reduction_input(ReduceOp::Sum, 1, 5)
        );
        // Huge indices do not overflow.
        assert!(movement_input(3, usize::MAX) >= 1.0);
        assert!(reduction_input(ReduceOp::Sum, 3, usize::MAX) >= 1.0);
    }

    #[test]
    fn tiling() {
        let period = [1u8, 2, 3];
        assert_eq!(tile(&period, 1, 0, 7), vec![1, 2, 3, 1, 2, 3, 1]);
        assert_eq!(tile(&period, 1, 2, 4), vec![3, 1, 2, 3]);
        assert_eq!(tile(&period, 1, 5, 0), Vec::<u8>::new());
        let pairs = [1u8, 1, 2, 2];
        assert_eq!(tile(&pairs, 2, 1, 3), vec![2, 2, 1, 1, 2, 2]);
    }
}
