//! Typed device buffers, dtype mapping and the tensor-based NCCL
//! communicator: every collective on typed buffers and tensor cells.
//!
//! * [`NcclType`] maps Rust element types to NCCL data types (sealed).
//! * [`Tensor`] is an owned device tensor with a shape over cudarc memory
//!   ([`Tensor::part`] and [`Tensor::part_mut`] pass a range of it);
//!   cudarc's `CudaSlice`, `CudaView` and `CudaViewMut` work too, so a
//!   framework passes its own memory without copying.
//! * Stream ordering is cudarc's: an operation on a buffer waits for the
//!   buffer's last accesses on other streams, and later accesses wait for
//!   it. On cudarc's own types that is an event wait and record per buffer
//!   and call (docs/measurements has its cost); a [`Tensor`] defers them while it
//!   stays on one stream, so repeated operations cost what NCCL's call
//!   costs (the crate's `TrackedSlice`, in `tracked.rs`, has the rules).
//! * [`TensorCell`] holds a tensor whose type is known at run time, shared
//!   between threads, with shape, strides and device.
//! * [`Communicator`] runs every operation (collectives, point-to-point, batches) on either kind, and
//!   checks every argument first ([`checks`] holds the checks as pure
//!   functions).
//! * [`Communicator::register`] registers a buffer with the communicator
//!   ([`Registered`], `ncclCommRegister`) for as long as both live;
//!   [`Tensor::nccl_zeros`] allocates a tensor in NCCL's memory
//!   (`ncclMemAlloc`), the memory every transport can register.
//! * A [`Batch`] issues several operations in one NCCL group: sends and
//!   receives to and from any peers (`batch_isend_irecv`), collectives of
//!   different buffers and types (coalescing), checked together first
//!   ([`plan_batch`]). [`Communicator::all_to_all_single_split`] and the
//!   list form [`Communicator::all_to_all`] move blocks of any sizes.
//!
//!
//! The crate re-exports [`nccl_core`] (and through it `cudarc`), [`half`]
//! and [`float8`], and its [`prelude`] has what most programs name
//! (`bf16`, `f16` and cudarc's slices among them), so nccl-tensor is the
//! one dependency a program needs:
//!
//! ```no_run
//! # fn main() -> nccl_tensor::Result<()> {
//! use nccl_tensor::prelude::*;
//!
//! let device = Device::new(0)?;
//! let comm = Communicator::new(device.clone(), 1, UniqueId::new()?, 0)?;
//! let stream = device.new_stream()?;
//! let mut grads = Tensor::from_host(&stream, &[0.5f32; 1024], &[32, 32])?;
//! let _ = comm.all_reduce(&mut grads, ReduceOp::Avg, &stream)?;
//! let host = grads.to_vec(&stream)?;
//! # Ok(()) }
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]
// Examples compile without warnings: one that calls a deprecated item fails its doctest.
#![doc(test(attr(deny(warnings), allow(unused))))]

mod batch;
mod buckets;
mod buffer;
mod cell;
pub mod checks;
mod communicator;
mod dtype;
mod error;
mod exchange;
mod operand;
mod plan;
mod planned;
pub mod producer;
mod registered;
mod shared;
mod tracked;

pub use batch::{Batch, BatchEntry, BatchMethod, BatchOperands, MAX_BATCH_OPERATIONS, plan_batch};
pub use buckets::{MAX_BUCKETS, with_buckets};
pub use buffer::{BufferDesc, Tensor, TensorPart, TensorPartMut, TypedBuffer, TypedBufferMut};
pub use cell::{
    AnyTensor, IntoAnyTensor, IntoTypedError, TensorCell, contiguous_strides, is_contiguous,
};
pub use communicator::{AllToAllMethod, Communicator};
pub use dtype::NcclType;
pub use error::{Error, Result};
pub use exchange::exchange_calls;
/// The fp8 element types ([`float8::F8E4M3`], [`float8::F8E5M2`]), as
/// this crate's [`NcclType`] impls name them: use these, not a
/// `float8` of another version.
pub use float8;
/// The 16-bit element types ([`half::f16`], [`half::bf16`]), as this
/// crate's [`NcclType`] impls name them: use these, not a `half` of
/// another version.
pub use half;
pub use nccl_core;
pub use nccl_core::{ErrorKind, Op};
pub use operand::{Form, Input, Operands, Output, OutputList, Pair, ReadOnly, Single};
pub use plan::{Extent, Layout, Layouts, Plan, Rules, Sizes, rules};
pub use planned::Planned;
pub use producer::{HoldsResult, ProducerError, ResultCheck};
pub use registered::{CommAccess, Registered};
pub use shared::{SharedComm, SharedCommGuard};
pub use tracked::Access;

/// What most programs name: `use nccl_tensor::prelude::*;`: the tensor
/// types, the 16-bit element types, and cudarc's slices (the memory a
/// framework owns, which every operation takes too).
///
/// The errors stay out (nccl-core's and this crate's are both `Error`); name
/// them by path.
pub mod prelude {
    pub use crate::{AnyTensor, Communicator, NcclType, Tensor, TensorCell};
    pub use half::{bf16, f16};
    pub use nccl_core::cudarc::driver::{CudaSlice, CudaView, CudaViewMut};
    pub use nccl_core::{CudaStream, DataType, Device, ReduceOp, UniqueId};
}
