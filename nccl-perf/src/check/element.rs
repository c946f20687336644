//! The [`Element`] trait: how the check builds, reduces and compares each
//! element type, one implementation per type of the data type table.

use nccl_core::ReduceOp;

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

#[cfg(test)]
mod tests {
    use float8::{F8E4M3, F8E5M2};

    use super::*;
    use crate::check::inputs::{POISON, REDUCTION_PERIOD, reduction_input};

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
        let f16 = half::f16::from_f64;
        assert!(half::f16::matches(f16(2.75), f16(2.7578125)));
        assert!(!half::f16::matches(f16(2.75), f16(3.0)));
        let bf16 = half::bf16::from_f64;
        assert!(half::bf16::matches(bf16(4.25), bf16(4.3)));
        assert!(!half::bf16::matches(bf16(4.0), bf16(5.0)));
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
}
