//! Raw bindings to NVIDIA NCCL, loaded at run time.
//!
//! * The types and constants in this crate are bindgen's output for one
//!   pinned `nccl.h` ([`PINNED_HEADER_VERSION`]), committed so that building
//!   needs no CUDA, no NCCL and no libclang. `cargo xtask bindgen`
//!   regenerates them; `cargo xtask bindgen --check` fails when they are stale.
//! * Enums (`ncclResult_t`, `ncclDataType_t`, `ncclRedOp_t`, ...) are
//!   newtypes over integers, never Rust enums: a newer libnccl may return a
//!   value this header has never seen.
//! * The library is opened at run time ([`library()`]): `NCCL_LIBRARY` (a
//!   full path) when set, otherwise `libnccl.so.2`, then `libnccl.so`. Every
//!   function is resolved on its own: one that the loaded libnccl lacks makes
//!   only that function's accessor fail, with a [`MissingSymbol`] naming the
//!   release that introduced it.
//!
//! ```no_run
//! let nccl = nccl_sys::library()?;
//! println!("libnccl {} from {}", nccl.version(), nccl.path());
//! let all_to_all = nccl.functions().ncclAlltoAll(); // Err on NCCL < 2.28
//! # Ok::<(), nccl_sys::LoadError>(())
//! ```
//!
//! This crate has no logic beyond loading; `nccl-core` builds the safe API.

#[macro_use]
mod macros;

#[allow(
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    missing_docs,
    clippy::undocumented_unsafe_blocks,
    unsafe_op_in_unsafe_fn
)]
mod bindings;
mod functions;
mod introduced;
mod loader;

pub use bindings::*;
pub use functions::{FUNCTION_NAMES, Functions};
pub use introduced::introduced_in;
pub use loader::{
    Attempt, DEFAULT_LIBRARY_NAMES, LoadError, MissingSymbol, NCCL_LIBRARY_ENV, NcclLibrary,
    Version, candidates, library, load_first,
};

/// The NCCL release whose `nccl.h` the committed bindings were generated from.
pub const PINNED_HEADER_VERSION: Version = Version::new(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
