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
//!
//! The inputs and the poison are in `inputs`, the [`Element`] trait and its
//! per-type host reference in `element`, each rank's check data and expected
//! result in `data`, and the counting of wrong elements in `wrong`.

mod data;
mod element;
mod inputs;
mod wrong;

pub use data::{CheckData, CheckSetup};
pub use element::Element;
pub use wrong::count_wrong;
