//! The `#wrong` column: deterministic inputs, poisoned outputs, and a host
//! computation of what every rank must receive.
//!
//! Each rank fills its buffers with values that depend only on (rank,
//! element index), so any rank can compute every other rank's input, and
//! so the expected result, without talking to them. The values are small
//! positive integers, exact in every type (bfloat16 included) but the 8-bit
//! floats, which round some of them (the expected result starts from the
//! rounded inputs), and, for products, powers of two that stay small;
//! integer types are compared exactly, floating-point types with a relative
//! tolerance fit for the type (reduction order and `avg`'s pre-scaling may
//! round differently, and the 8-bit floats round every partial sum).
//!
//! Outputs that must be written are poisoned first (every byte `0xFF`: NaN
//! for floating-point types, -1 or the maximum for integers, none of them a
//! value the inputs can produce with a handful of ranks).

use nccl_core::{DataType, ReduceOp};

use crate::collective::{Collective, Mode};
use crate::sizes::OpCounts;

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
            if (index % 4 + rank % 4) % 4 == 0 {
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

/// An element type the check knows how to build, reduce and compare.
pub trait Element: Copy + PartialEq + std::fmt::Debug {
    /// Bytes per element.
    const SIZE: usize;
    /// Relative tolerance of a comparison (0 for integers: exact).
    const TOLERANCE: f64;
    /// The value nearest to `value`.
    fn from_f64(value: f64) -> Self;
    /// The value as a double.
    fn to_f64(self) -> f64;
    /// Writes the element's little-endian bytes into `out[..SIZE]`.
    fn write(self, out: &mut [u8]);
    /// Reads an element from `bytes[..SIZE]`.
    fn read(bytes: &[u8]) -> Self;
    /// The reduction of the ranks' inputs as NCCL computes it for this
    /// type: integers wrap and `avg` divides the sum by the world size,
    /// truncating; floats are reduced exactly (in f64) and rounded once.
    fn reduce(values: impl Iterator<Item = f64>, op: ReduceOp, world: usize) -> Self;
    /// Whether `got` is an acceptable result where `want` is expected.
    fn matches(got: Self, want: Self) -> bool;
}

/// [`Element`] for an integer type: exact, wrapping as the GPU does.
macro_rules! integer_element {
    ($t:ty) => {
        impl Element for $t {
            const SIZE: usize = size_of::<$t>();
            const TOLERANCE: f64 = 0.0;
            fn from_f64(value: f64) -> Self {
                value as $t
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn write(self, out: &mut [u8]) {
                out[..Self::SIZE].copy_from_slice(&self.to_le_bytes());
            }
            fn read(bytes: &[u8]) -> Self {
                let mut raw = [0u8; size_of::<$t>()];
                raw.copy_from_slice(&bytes[..Self::SIZE]);
                <$t>::from_le_bytes(raw)
            }
            fn reduce(mut values: impl Iterator<Item = f64>, op: ReduceOp, world: usize) -> Self {
                let first = values.next().map_or(0 as $t, Self::from_f64);
                let folded = values.map(Self::from_f64).fold(first, |acc, x| match op {
                    ReduceOp::Sum | ReduceOp::Avg => acc.wrapping_add(x),
                    ReduceOp::Prod => acc.wrapping_mul(x),
                    ReduceOp::Max => acc.max(x),
                    ReduceOp::Min => acc.min(x),
                });
                match op {
                    ReduceOp::Avg => folded
                        .checked_div(<$t>::try_from(world).unwrap_or(<$t>::MAX))
                        .unwrap_or(folded),
                    _ => folded,
                }
            }
            fn matches(got: Self, want: Self) -> bool {
                got == want
            }
        }
    };
}

/// The integer rows of the table get [`integer_element!`]; the float
/// formats have their host reference below.
macro_rules! integer_elements {
    ([] $($variant:ident { raw: $raw:ident, rust: $rust:ty, kind: $kind:ident, $($field:ident: $value:tt),* })*) => {
        $(integer_elements!(@$kind $rust);)*
    };
    (@int $rust:ty) => {
        integer_element!($rust);
    };
    (@float $rust:ty) => {};
    (@fp8 $rust:ty) => {};
}

nccl_core::for_each_data_type!(integer_elements);

fn float_reduce(values: impl Iterator<Item = f64>, op: ReduceOp, world: usize) -> f64 {
    let mut values = values.peekable();
    if values.peek().is_none() {
        return 0.0;
    }
    match op {
        ReduceOp::Sum => values.sum(),
        ReduceOp::Avg => values.sum::<f64>() / world.max(1) as f64,
        ReduceOp::Prod => values.product(),
        ReduceOp::Max => values.fold(f64::NEG_INFINITY, f64::max),
        ReduceOp::Min => values.fold(f64::INFINITY, f64::min),
    }
}

fn float_matches(got: f64, want: f64, tolerance: f64) -> bool {
    if got.is_nan() || want.is_nan() {
        return false;
    }
    (got - want).abs() <= tolerance * want.abs().max(1.0)
}

/// [`Element`] for a float type, stored as its `$bits` bit pattern: the
/// host reference of a number format.
macro_rules! float_element {
    ($t:ty, $bits:ty, $tolerance:expr, $from:expr, $to:expr) => {
        impl Element for $t {
            const SIZE: usize = size_of::<$t>();
            const TOLERANCE: f64 = $tolerance;
            fn from_f64(value: f64) -> Self {
                $from(value)
            }
            fn to_f64(self) -> f64 {
                $to(self)
            }
            fn write(self, out: &mut [u8]) {
                out[..Self::SIZE].copy_from_slice(&self.to_bits().to_le_bytes());
            }
            fn read(bytes: &[u8]) -> Self {
                let mut raw = [0u8; size_of::<$t>()];
                raw.copy_from_slice(&bytes[..Self::SIZE]);
                <$t>::from_bits(<$bits>::from_le_bytes(raw))
            }
            fn reduce(values: impl Iterator<Item = f64>, op: ReduceOp, world: usize) -> Self {
                // The GPU reduces the inputs as this type holds them.
                let held = values.map(|value| Self::from_f64(value).to_f64());
                Self::from_f64(float_reduce(held, op, world))
            }
            fn matches(got: Self, want: Self) -> bool {
                float_matches(got.to_f64(), want.to_f64(), Self::TOLERANCE)
            }
        }
    };
}

float_element!(f32, u32, 1e-5, |v: f64| v as f32, |x: f32| x as f64);
float_element!(f64, u64, 1e-12, |v: f64| v, |x: f64| x);
float_element!(half::f16, u16, 1e-2, half::f16::from_f64, half::f16::to_f64);
float_element!(
    half::bf16,
    u16,
    5e-2,
    half::bf16::from_f64,
    half::bf16::to_f64
);
// The 8-bit floats round every partial sum: over up to 8 ranks, the inputs
// here summed in any order of rounded pairwise additions (any ring or tree)
// are off by at most 0.2 (e4m3) and 0.4 (e5m2) relative. (Paths, not method calls, pick float8's inherent `to_f64`
// over `Element::to_f64`.)
float_element!(float8::F8E4M3, u8, 0.25, float8::F8E4M3::from_f64, |x| {
    float8::F8E4M3::to_f64(&x)
});
float_element!(float8::F8E5M2, u8, 0.5, float8::F8E5M2::from_f64, |x| {
    float8::F8E5M2::to_f64(&x)
});

/// One period of a value pattern, encoded: element `i` is `value(i)`.
fn encode_period<T: Element>(period: usize, value: impl Fn(usize) -> f64) -> Vec<u8> {
    let mut bytes = vec![0u8; period * T::SIZE];
    for (index, chunk) in bytes.chunks_exact_mut(T::SIZE).enumerate() {
        T::from_f64(value(index)).write(chunk);
    }
    bytes
}

/// Elements `start..start + len` of the endless repetition of `period`
/// (an encoded pattern of `elem_size`-byte elements).
fn tile(period: &[u8], elem_size: usize, start: usize, len: usize) -> Vec<u8> {
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

/// What one rank writes before the checked run and what it must read after.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckData {
    /// The send buffer's contents from its start (empty in-place).
    pub send: Vec<u8>,
    /// The receive buffer's contents from its start: inputs in-place, and
    /// poison where the result will be written.
    pub recv: Vec<u8>,
    /// Where the result starts in the receive buffer, in elements.
    pub result_offset: usize,
    /// The expected result, or `None` when this rank receives nothing to
    /// check (reduce on a rank other than the root).
    pub expected: Option<Vec<u8>>,
}

/// Everything a rank needs to know to build its check data.
#[derive(Clone, Copy, Debug)]
pub struct CheckSetup {
    /// The collective.
    pub collective: Collective,
    /// Out-of-place or in-place.
    pub mode: Mode,
    /// Its element counts at this size.
    pub counts: OpCounts,
    /// The element type.
    pub dtype: DataType,
    /// The reduction (reducing collectives only).
    pub op: ReduceOp,
    /// The root (broadcast and reduce only).
    pub root: usize,
    /// This rank.
    pub rank: usize,
    /// The number of ranks.
    pub world: usize,
}

impl CheckSetup {
    /// The check data of this rank, or `None` when this collective and mode
    /// are not checked (in-place all_to_all and sendrecv) or the type is
    /// not covered.
    pub fn data(&self) -> Option<CheckData> {
        if !self.collective.checks(self.mode) {
            return None;
        }
        nccl_core::with_data_type!(self.dtype, T => Some(self.data_typed::<T>()), _ => None)
    }

    fn data_typed<T: Element>(&self) -> CheckData {
        let Self {
            collective,
            mode,
            counts,
            op,
            root,
            rank,
            world,
            ..
        } = *self;
        let size = T::SIZE;
        let pc = counts.param;
        let poison = |elems: usize| vec![POISON; elems * size];
        let reduction = |r: usize, start: usize, len: usize| {
            tile(
                &encode_period::<T>(REDUCTION_PERIOD, |i| reduction_input(op, r, i)),
                size,
                start,
                len,
            )
        };
        let movement = |r: usize, start: usize, len: usize| {
            tile(
                &encode_period::<T>(MOVEMENT_PERIOD, |i| movement_input(r, i)),
                size,
                start,
                len,
            )
        };
        let reduced = |start: usize, len: usize| {
            let period = encode_period::<T>(REDUCTION_PERIOD, |i| {
                T::reduce((0..world).map(|r| reduction_input(op, r, i)), op, world).to_f64()
            });
            tile(&period, size, start, len)
        };
        let in_place = mode == Mode::InPlace;
        let (send, recv, result_offset, expected) = match collective {
            Collective::AllReduce | Collective::Reduce => {
                let input = reduction(rank, 0, pc);
                let expected =
                    (collective == Collective::AllReduce || rank == root).then(|| reduced(0, pc));
                if in_place {
                    (Vec::new(), input, 0, expected)
                } else {
                    (input, poison(pc), 0, expected)
                }
            }
            Collective::Broadcast => {
                let input = movement(rank, 0, pc);
                let expected = Some(movement(root, 0, pc));
                match (in_place, rank == root) {
                    (false, _) => (input, poison(pc), 0, expected),
                    (true, true) => (Vec::new(), input, 0, expected),
                    (true, false) => (Vec::new(), poison(pc), 0, expected),
                }
            }
            Collective::AllGather => {
                let expected: Vec<u8> = (0..world).flat_map(|r| movement(r, 0, pc)).collect();
                let input = movement(rank, 0, pc);
                let mut recv = poison(world * pc);
                if in_place {
                    recv[rank * pc * size..(rank + 1) * pc * size].copy_from_slice(&input);
                    (Vec::new(), recv, 0, Some(expected))
                } else {
                    (input, recv, 0, Some(expected))
                }
            }
            Collective::ReduceScatter => {
                let input = reduction(rank, 0, world * pc);
                let expected = Some(reduced(rank * pc, pc));
                if in_place {
                    (Vec::new(), input, rank * pc, expected)
                } else {
                    (input, poison(pc), 0, expected)
                }
            }
            Collective::AllToAll => {
                let expected: Vec<u8> = (0..world)
                    .flat_map(|r| movement(r, rank * pc, pc))
                    .collect();
                (
                    movement(rank, 0, world * pc),
                    poison(world * pc),
                    0,
                    Some(expected),
                )
            }
            Collective::Gather => {
                let expected: Vec<u8> = (0..world).flat_map(|r| movement(r, 0, pc)).collect();
                let input = movement(rank, 0, pc);
                let mut recv = poison(world * pc);
                let expected = (rank == root).then_some(expected);
                if in_place {
                    recv[rank * pc * size..(rank + 1) * pc * size].copy_from_slice(&input);
                    (Vec::new(), recv, 0, expected)
                } else {
                    (input, recv, 0, expected)
                }
            }
            Collective::Scatter => {
                let input = movement(rank, 0, world * pc);
                let expected = Some(movement(root, rank * pc, pc));
                if in_place {
                    (Vec::new(), input, rank * pc, expected)
                } else {
                    (input, poison(pc), 0, expected)
                }
            }
            Collective::SendRecv => {
                let from = (rank + world - 1) % world;
                (
                    movement(rank, 0, pc),
                    poison(pc),
                    0,
                    Some(movement(from, 0, pc)),
                )
            }
        };
        CheckData {
            send,
            recv,
            result_offset,
            expected,
        }
    }
}

#[cfg(test)]
mod tests {
    use float8::{F8E4M3, F8E5M2};

    use super::*;
    use nccl_tensor::Extent;

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
    fn host_reductions() {
        let v = [3.0, 5.0, 2.0, 7.0];
        assert_eq!(i32::reduce(v.into_iter(), ReduceOp::Sum, 4), 17);
        assert_eq!(i32::reduce(v.into_iter(), ReduceOp::Prod, 4), 210);
        assert_eq!(i32::reduce(v.into_iter(), ReduceOp::Max, 4), 7);
        assert_eq!(i32::reduce(v.into_iter(), ReduceOp::Min, 4), 2);
        assert_eq!(i32::reduce(v.into_iter(), ReduceOp::Avg, 4), 4); // 17 / 4, truncated
        assert_eq!(u8::reduce(v.into_iter(), ReduceOp::Avg, 4), 4);
        assert_eq!(f32::reduce(v.into_iter(), ReduceOp::Avg, 4), 4.25);
        assert_eq!(f64::reduce(v.into_iter(), ReduceOp::Prod, 4), 210.0);
        assert_eq!(
            half::f16::reduce(v.into_iter(), ReduceOp::Sum, 4),
            half::f16::from_f64(17.0)
        );
        assert_eq!(
            half::bf16::reduce(v.into_iter(), ReduceOp::Min, 4),
            half::bf16::from_f64(2.0)
        );
        // Integers wrap as the GPU does.
        assert_eq!(
            i8::reduce([100.0, 100.0].into_iter(), ReduceOp::Sum, 2),
            -56
        );
        assert_eq!(u8::reduce([16.0, 32.0].into_iter(), ReduceOp::Prod, 2), 0);
        // One rank: the input itself.
        assert_eq!(u64::reduce([9.0].into_iter(), ReduceOp::Avg, 1), 9);
        // The 8-bit floats reduce their inputs as they hold them: e5m2
        // holds 9 as 8 and 11 as 12.
        let e5m2 = |v: f64| F8E5M2::from_f64(v);
        assert_eq!(e5m2(9.0).to_f64(), 8.0);
        assert_eq!(
            F8E5M2::reduce([9.0, 11.0].into_iter(), ReduceOp::Sum, 2),
            e5m2(20.0)
        );
        assert_eq!(
            F8E5M2::reduce([9.0, 11.0].into_iter(), ReduceOp::Max, 2),
            e5m2(12.0)
        );
        assert_eq!(
            F8E4M3::reduce(v.into_iter(), ReduceOp::Sum, 4).to_f64(),
            16.0 // 17 rounds to 16 (3 mantissa bits)
        );
    }

    #[test]
    fn reductions_of_the_inputs_are_exact_in_every_type() {
        // With up to 8 ranks, sums, products, max and min of the inputs are
        // small integers, so every type but the 8-bit floats holds them
        // exactly.
        for op in [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min] {
            for world in 1..=8 {
                for i in 0..REDUCTION_PERIOD {
                    let inputs = || (0..world).map(|r| reduction_input(op, r, i));
                    let exact = float_reduce(inputs(), op, world);
                    assert!(exact <= 127.0, "{op:?} {world} {i}: {exact}");
                    assert_eq!(i8::reduce(inputs(), op, world) as f64, exact);
                    assert_eq!(half::bf16::reduce(inputs(), op, world).to_f64(), exact);
                }
            }
        }
    }

    #[test]
    fn comparison_tolerance() {
        assert!(f32::matches(1.0, 1.0));
        assert!(f32::matches(1000.0, 1000.0 + 0.005));
        assert!(!f32::matches(1000.0, 1000.1));
        assert!(!f32::matches(f32::NAN, f32::NAN));
        assert!(!f32::matches(f32::NAN, 1.0));
        assert!(f64::matches(3.0, 3.0 + 1e-13));
        assert!(!f64::matches(3.0, 3.0 + 1e-9));
        assert!(half::f16::matches(
            half::f16::from_f64(2.75),
            half::f16::from_f64(2.7578125)
        ));
        assert!(!half::f16::matches(
            half::f16::from_f64(2.75),
            half::f16::from_f64(3.0)
        ));
        assert!(half::bf16::matches(
            half::bf16::from_f64(4.25),
            half::bf16::from_f64(4.3)
        ));
        assert!(!half::bf16::matches(
            half::bf16::from_f64(4.0),
            half::bf16::from_f64(5.0)
        ));
        assert!(!i32::matches(4, 5));
        assert!(u64::matches(7, 7));
        let e4m3 = F8E4M3::from_f64;
        assert!(F8E4M3::matches(e4m3(72.0), e4m3(80.0)));
        assert!(!F8E4M3::matches(e4m3(56.0), e4m3(80.0)));
        assert!(!F8E4M3::matches(F8E4M3::from_bits(POISON), e4m3(1.0)));
        let e5m2 = F8E5M2::from_f64;
        assert!(F8E5M2::matches(e5m2(48.0), e5m2(80.0)));
        assert!(!F8E5M2::matches(e5m2(32.0), e5m2(80.0)));
        assert!(!F8E5M2::matches(F8E5M2::from_bits(POISON), e5m2(1.0)));
    }

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

    #[test]
    fn tiling() {
        let period = [1u8, 2, 3];
        assert_eq!(tile(&period, 1, 0, 7), vec![1, 2, 3, 1, 2, 3, 1]);
        assert_eq!(tile(&period, 1, 2, 4), vec![3, 1, 2, 3]);
        assert_eq!(tile(&period, 1, 5, 0), Vec::<u8>::new());
        let pairs = [1u8, 1, 2, 2];
        assert_eq!(tile(&pairs, 2, 1, 3), vec![2, 2, 1, 1, 2, 2]);
    }

    /// Runs `collective` on the host over every rank's check data, writing
    /// each rank's receive image as NCCL would.
    fn simulate<T: Element>(setups: &[CheckSetup], data: &mut [CheckData]) {
        let s = setups[0];
        let (world, pc, size) = (s.world, s.counts.param, T::SIZE);
        let decode = |bytes: &[u8]| {
            bytes
                .chunks_exact(size)
                .map(|c| T::read(c).to_f64())
                .collect::<Vec<f64>>()
        };
        // Each rank's input, as NCCL reads it.
        let inputs: Vec<Vec<f64>> = setups
            .iter()
            .zip(data.iter())
            .map(|(setup, d)| {
                let (send_offset, _) = setup.counts.pointer_offsets(setup.mode, setup.rank);
                let buffer = if setup.mode == Mode::InPlace {
                    &d.recv
                } else {
                    &d.send
                };
                let len = match s.collective.sizes().input {
                    Extent::World => world * pc,
                    Extent::Block => pc,
                };
                decode(&buffer[send_offset * size..(send_offset + len) * size])
            })
            .collect();
        let write = |out: &mut Vec<u8>, offset: usize, values: &[T]| {
            for (k, value) in values.iter().enumerate() {
                value.write(&mut out[(offset + k) * size..]);
            }
        };
        for (rank, d) in data.iter_mut().enumerate() {
            let (_, recv_offset) = setups[rank].counts.pointer_offsets(s.mode, rank);
            let reduce_at = |i: usize| T::reduce(inputs.iter().map(|input| input[i]), s.op, world);
            let result: Vec<T> = match s.collective {
                Collective::AllReduce => (0..pc).map(reduce_at).collect(),
                Collective::Reduce if rank == s.root => (0..pc).map(reduce_at).collect(),
                Collective::Reduce => continue,
                Collective::Broadcast => inputs[s.root].iter().map(|&v| T::from_f64(v)).collect(),
                Collective::AllGather => inputs.iter().flatten().map(|&v| T::from_f64(v)).collect(),
                Collective::ReduceScatter => (rank * pc..(rank + 1) * pc).map(reduce_at).collect(),
                Collective::AllToAll => (0..world)
                    .flat_map(|j| inputs[j][rank * pc..(rank + 1) * pc].to_vec())
                    .map(T::from_f64)
                    .collect(),
                Collective::Gather if rank == s.root => {
                    inputs.iter().flatten().map(|&v| T::from_f64(v)).collect()
                }
                Collective::Gather => continue,
                Collective::Scatter => inputs[s.root][rank * pc..(rank + 1) * pc]
                    .iter()
                    .map(|&v| T::from_f64(v))
                    .collect(),
                Collective::SendRecv => inputs[(rank + world - 1) % world]
                    .iter()
                    .map(|&v| T::from_f64(v))
                    .collect(),
            };
            write(&mut d.recv, recv_offset, &result);
        }
    }

    fn run_simulation(
        collective: Collective,
        mode: Mode,
        dtype: DataType,
        op: ReduceOp,
        world: usize,
        root: usize,
    ) {
        let counts = OpCounts::new(collective, 4096, dtype.size_bytes(), world);
        let setups: Vec<CheckSetup> = (0..world)
            .map(|rank| CheckSetup {
                collective,
                mode,
                counts,
                dtype,
                op,
                root,
                rank,
                world,
            })
            .collect();
        let mut data: Vec<CheckData> = setups
            .iter()
            .map(|s| s.data().expect("checkable"))
            .collect();
        // Before the run, every rank that must receive something sees it as wrong
        // (all but in-place all_reduce/reduce/reduce_scatter, whose input is already
        // the answer on one rank).
        nccl_core::with_data_type!(dtype, T => simulate::<T>(&setups, &mut data), _ => panic!("{dtype} is not in the table"));
        for (rank, d) in data.iter().enumerate() {
            if let Some(expected) = &d.expected {
                let size = dtype.size_bytes();
                let got = &d.recv[d.result_offset * size..d.result_offset * size + expected.len()];
                assert_eq!(
                    count_wrong(dtype, got, expected),
                    0,
                    "{collective} {mode:?} {dtype} {op} world {world} rank {rank}"
                );
                if !expected.is_empty() {
                    let mut corrupted = got.to_vec();
                    corrupted[..size].fill(POISON);
                    assert_eq!(count_wrong(dtype, &corrupted, expected), 1);
                }
            } else {
                let rooted = matches!(collective, Collective::Reduce | Collective::Gather);
                assert!(rooted && rank != root, "{collective} rank {rank}");
            }
        }
    }

    #[test]
    fn layouts_check_out_on_a_simulated_run() {
        for collective in Collective::ALL {
            for mode in Mode::BOTH {
                if !collective.checks(mode) {
                    let counts = OpCounts::new(collective, 64, 4, 2);
                    let setup = CheckSetup {
                        collective,
                        mode,
                        counts,
                        dtype: DataType::Float32,
                        op: ReduceOp::Sum,
                        root: 0,
                        rank: 0,
                        world: 2,
                    };
                    assert_eq!(setup.data(), None);
                    continue;
                }
                for world in [1, 2, 3, 8] {
                    for dtype in DataType::ALL {
                        let ops: &[ReduceOp] = if collective.reduces() {
                            &ReduceOp::ALL
                        } else {
                            &[ReduceOp::Sum]
                        };
                        for &op in ops {
                            let root = if collective.has_root() { world - 1 } else { 0 };
                            run_simulation(collective, mode, dtype, op, world, root);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn outputs_are_poisoned_before_the_run() {
        let counts = OpCounts::new(Collective::AllGather, 256, 4, 4);
        let setup = CheckSetup {
            collective: Collective::AllGather,
            mode: Mode::InPlace,
            counts,
            dtype: DataType::Float32,
            op: ReduceOp::Sum,
            root: 0,
            rank: 2,
            world: 4,
        };
        let data = setup.data().unwrap();
        let expected = data.expected.as_ref().unwrap();
        // Only this rank's own block is right before the run.
        assert_eq!(
            count_wrong(DataType::Float32, &data.recv, expected),
            (3 * counts.param) as u64
        );
        assert!(data.send.is_empty());
        let out_of_place = CheckSetup {
            mode: Mode::OutOfPlace,
            ..setup
        }
        .data()
        .unwrap();
        assert_eq!(out_of_place.send.len(), counts.param * 4);
        assert!(out_of_place.recv.iter().all(|&b| b == POISON));
    }
}
