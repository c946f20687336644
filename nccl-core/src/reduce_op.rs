//! Reduction operators: the built-in ones and pre-multiplied sums created
//! per communicator.

use std::fmt;

use nccl_sys::{ncclRedOp_t, ncclScalarResidence_t};

use crate::communicator::Communicator;
use crate::datatype::DataType;
use crate::error::{Error, Result};
use crate::library::{check_accepted, require_version};

/// NCCL's built-in reductions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Sum.
    Sum,
    /// Product.
    Prod,
    /// Maximum.
    Max,
    /// Minimum.
    Min,
    /// Average (sum divided by the world size; NCCL 2.10+).
    Avg,
}

impl ReduceOp {
    /// Every built-in reduction.
    pub const ALL: [ReduceOp; 5] = [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::Avg,
    ];

    /// The C value.
    pub const fn to_raw(self) -> ncclRedOp_t {
        match self {
            ReduceOp::Sum => ncclRedOp_t::ncclSum,
            ReduceOp::Prod => ncclRedOp_t::ncclProd,
            ReduceOp::Max => ncclRedOp_t::ncclMax,
            ReduceOp::Min => ncclRedOp_t::ncclMin,
            ReduceOp::Avg => ncclRedOp_t::ncclAvg,
        }
    }

    /// The name nccl-tests prints (`sum`, `prod`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::Avg => "avg",
        }
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A reduction to pass to a collective: a built-in one or a pre-multiplied
/// sum of the same communicator.
#[derive(Clone, Copy, Debug)]
pub enum Reduction<'a> {
    /// A built-in reduction.
    Builtin(ReduceOp),
    /// `sum(scalar * x)`, created by [`Communicator::pre_mul_sum`].
    PreMulSum(&'a PreMulSum<'a>),
}

impl Reduction<'_> {
    /// The C value.
    pub fn to_raw(self) -> ncclRedOp_t {
        match self {
            Reduction::Builtin(op) => op.to_raw(),
            Reduction::PreMulSum(op) => op.raw,
        }
    }

    /// The data type the reduction is tied to, if any.
    pub fn data_type(self) -> Option<DataType> {
        match self {
            Reduction::Builtin(_) => None,
            Reduction::PreMulSum(op) => Some(op.dtype),
        }
    }

    /// The name nccl-tests prints.
    pub fn name(self) -> &'static str {
        match self {
            Reduction::Builtin(op) => op.name(),
            Reduction::PreMulSum(_) => "premulsum",
        }
    }

    /// Whether this reduction may be used on `communicator` with `dtype`:
    /// a pre-multiplied sum only on the communicator and type it was made for.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the mismatch.
    pub fn check_usable(self, communicator: &Communicator, dtype: DataType) -> Result<()> {
        if let Reduction::PreMulSum(op) = self {
            if !std::ptr::eq(op.communicator, communicator) {
                return Err(Error::InvalidArgument {
                    argument: "reduce op",
                    expected: "a pre-multiplied sum created on this communicator".to_string(),
                    given: "one created on another communicator".to_string(),
                });
            }
            if op.dtype != dtype {
                return Err(Error::InvalidArgument {
                    argument: "reduce op",
                    expected: format!("a pre-multiplied sum for {dtype}"),
                    given: format!("one for {}", op.dtype),
                });
            }
        }
        Ok(())
    }
}

impl From<ReduceOp> for Reduction<'_> {
    fn from(op: ReduceOp) -> Self {
        Reduction::Builtin(op)
    }
}

impl<'a> From<&'a PreMulSum<'a>> for Reduction<'a> {
    fn from(op: &'a PreMulSum<'a>) -> Self {
        Reduction::PreMulSum(op)
    }
}

/// A pre-multiplied sum (`ncclRedOpCreatePreMulSum`): each rank's input is
/// multiplied by `scalar` before summing.
///
/// It belongs to one communicator and one data type, and is destroyed when
/// dropped.
pub struct PreMulSum<'c> {
    communicator: &'c Communicator,
    raw: ncclRedOp_t,
    dtype: DataType,
    scalar: f64,
}

impl fmt::Debug for PreMulSum<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PreMulSum")
            .field("dtype", &self.dtype)
            .field("scalar", &self.scalar)
            .finish()
    }
}

impl<'c> PreMulSum<'c> {
    pub(crate) fn new(
        communicator: &'c Communicator,
        dtype: DataType,
        scalar: f64,
    ) -> Result<Self> {
        let lib = communicator.library();
        require_version(lib, 2, 11, || "a pre-multiplied sum".to_string())?;
        let mut bytes = scalar_bytes(dtype, scalar)?;
        let create = lib.functions().ncclRedOpCreatePreMulSum()?;
        let raw_comm = communicator.raw_for_call()?;
        let mut raw = ncclRedOp_t(0);
        // SAFETY: `bytes` holds one element of `dtype` and is read before the
        // call returns (host-immediate residence); `raw_comm` is live.
        let result = unsafe {
            create(
                &mut raw,
                bytes.as_mut_ptr().cast(),
                dtype.to_raw(),
                ncclScalarResidence_t::ncclScalarHostImmediate,
                raw_comm,
            )
        };
        check_accepted(lib, "ncclRedOpCreatePreMulSum", result)?;
        Ok(Self {
            communicator,
            raw,
            dtype,
            scalar,
        })
    }

    /// The data type it was created for.
    pub fn data_type(&self) -> DataType {
        self.dtype
    }

    /// The multiplier.
    pub fn scalar(&self) -> f64 {
        self.scalar
    }
}

impl Drop for PreMulSum<'_> {
    fn drop(&mut self) {
        // An aborted communicator freed its operators along with itself.
        if let Ok(raw_comm) = self.communicator.raw_for_call()
            && let Ok(destroy) = self.communicator.library().functions().ncclRedOpDestroy()
        {
            // SAFETY: `raw` was created on this live communicator and no call
            // using it is in progress (they return before we can drop it).
            // A failure cannot be reported from drop and leaks only the op.
            let _ = unsafe { destroy(self.raw, raw_comm) };
        }
    }
}

/// `from_f64` and `to_f64` for the primitive floats, which `half`'s and
/// `float8`'s types have as inherent functions: with it in scope,
/// `<T>::from_f64` and `to_f64` encode every float type of the table.
trait F64Conversions {
    fn from_f64(value: f64) -> Self;
    fn to_f64(self) -> f64;
}

impl F64Conversions for f32 {
    fn from_f64(value: f64) -> Self {
        value as f32
    }
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
}

impl F64Conversions for f64 {
    fn from_f64(value: f64) -> Self {
        value
    }
    fn to_f64(self) -> f64 {
        self
    }
}

/// `scalar` as one element of `dtype`, in the first bytes of the result.
///
/// # Errors
/// [`Error::InvalidArgument`] when an integer type cannot hold `scalar`
/// exactly, a float type's range does not include it, or it is not finite.
pub fn scalar_bytes(dtype: DataType, scalar: f64) -> Result<[u8; 8]> {
    let invalid = |expected: &str| Error::InvalidArgument {
        argument: "pre-multiplied sum scalar",
        expected: format!("{expected} for {dtype}"),
        given: scalar.to_string(),
    };
    if !scalar.is_finite() {
        return Err(invalid("a finite number"));
    }
    let mut out = [0u8; 8];
    macro_rules! encode {
        (int, $t:ty) => {{
            // `as` saturates, so check the range before converting: the
            // upper bound is exclusive because `MAX as f64` rounds up for
            // 64-bit types.
            let in_range = scalar >= <$t>::MIN as f64 && scalar < (<$t>::MAX as f64) + 1.0;
            if scalar.fract() != 0.0 || !in_range {
                return Err(invalid(concat!("an integer that fits ", stringify!($t))));
            }
            let value = scalar as $t;
            out[..size_of::<$t>()].copy_from_slice(&value.to_ne_bytes());
        }};
        (float, $t:ty) => {{
            let value = <$t>::from_f64(scalar);
            if !value.to_f64().is_finite() {
                return Err(invalid("a number within the type's range"));
            }
            let bits = value.to_bits().to_ne_bytes();
            out[..bits.len()].copy_from_slice(&bits);
        }};
        (fp8, $t:ty) => {
            encode!(float, $t)
        };
    }
    macro_rules! encode_by_type {
        (
            []
            $($variant:ident { raw: $raw:ident, rust: $rust:ty, kind: $kind:ident, $($field:ident: $value:tt),* })*
        ) => {
            match dtype {
                $(DataType::$variant => encode!($kind, $rust),)*
            }
        };
    }
    crate::for_each_data_type!(encode_by_type);
    Ok(out)
}
