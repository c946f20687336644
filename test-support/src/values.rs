//! Test data and the checks of results and argument errors.

use std::fmt::Debug;

use nccl_core::Error;

/// Deterministic, never-zero test data: `len` values from `seed`, each a
/// small integer in `1..=7` times a sign, so sums and products of a few
/// ranks stay exact in every float type.
pub fn test_values(seed: u64, len: usize) -> Vec<f64> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(1);
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let magnitude = (state % 7 + 1) as f64;
            if state & 0x100 == 0 {
                magnitude
            } else {
                -magnitude
            }
        })
        .collect()
}

/// A value no test writes, to fill outputs with so unwritten elements show.
pub const POISON: f32 = -12345.0;

/// Asserts `error` is `InvalidArgument` for `argument` with `expected` and
/// `given`, and that its message names all three.
pub fn assert_invalid(error: Error, argument: &str, expected: &str, given: &str) {
    assert_eq!(
        error.to_string(),
        format!("invalid {argument}: expected {expected}, got {given}")
    );
    match error {
        Error::InvalidArgument {
            argument: a,
            expected: e,
            given: g,
        } => {
            assert_eq!((a, e.as_str(), g.as_str()), (argument, expected, given));
        }
        other => panic!("expected Error::InvalidArgument, got {other:?}"),
    }
}

/// Compares `got` with `expected` element by element; on a mismatch fails
/// naming `what`, how many elements differ and the first few
/// `(index, got, expected)`, never whole buffers.
#[track_caller]
pub fn assert_same_values<T: PartialEq + Debug>(got: &[T], expected: &[T], what: &str) {
    assert_eq!(got.len(), expected.len(), "{what}: length");
    let wrong: Vec<(usize, &T, &T)> = got
        .iter()
        .zip(expected)
        .enumerate()
        .filter(|(_, (g, e))| g != e)
        .map(|(i, (g, e))| (i, g, e))
        .collect();
    assert!(
        wrong.is_empty(),
        "{what}: {} of {} elements wrong; first (index, got, expected): {:?}",
        wrong.len(),
        got.len(),
        &wrong[..wrong.len().min(5)]
    );
}
