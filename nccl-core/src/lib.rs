//! Safe RAII NCCL communicators over cudarc devices and streams.
//!
//! * [`Communicator`] owns a `ncclComm_t`: created by rank
//!   ([`Communicator::new`]), for all local GPUs ([`Communicator::init_all`])
//!   or with a [`Config`]; split ([`Communicator::split`],
//!   [`Communicator::split_all`], [`Communicator::split_from`]); finalized;
//!   aborted from any thread through an [`AbortHandle`]. Drop never blocks
//!   on other ranks.
//! * Where the loaded libnccl has them ([`Capabilities`]): revoke and
//!   shrink ([`Communicator::revoke`], [`Communicator::shrink`]), grow
//!   ([`Communicator::grow`], [`Communicator::join_grow`]), suspend and
//!   resume ([`Communicator::suspend`], [`Suspended`]) and memory
//!   statistics ([`Communicator::mem_stats`]); with an older one they are
//!   [`Error::Unsupported`] naming the release that introduced them.
//! * [`Error`] carries NCCL's code, its description and the last-error text;
//!   a missing library, a function the loaded libnccl lacks, a missing CUDA
//!   driver and CUDA errors are errors too, never panics. [`Status`] keeps
//!   `InProgress` (nonblocking communicators) apart from errors.
//! * [`UniqueId`] travels as bytes or hex text; [`DataType`], [`ReduceOp`]
//!   and [`PreMulSum`] describe the data; [`Group`] wraps
//!   `ncclGroupStart`/`ncclGroupEnd`; [`Version`] is a NCCL release.
//! * [`for_each_data_type!`] is the one table of data types: `DataType` and
//!   the per-type lists of the other crates are generated from it, and
//!   [`with_data_type!`] runs code generic over the element type of a
//!   `DataType`.
//! * The collectives here are `unsafe fn`s on device pointers; `nccl-tensor`
//!   adds the safe, typed API.
//! * [`Registration`] registers a buffer with a communicator
//!   (`ncclCommRegister`) until dropped; [`NcclMemory`] is memory from
//!   `ncclMemAlloc`; [`capture_status`] tells whether a stream is being
//!   captured in a CUDA graph.
//!
//! ```no_run
//! use nccl_core::{Communicator, DataType, Device, ReduceOp, UniqueId};
//! # fn main() -> nccl_core::Result<()> {
//! let device = Device::new(0)?;
//! let comm = Communicator::new(device.clone(), 1, UniqueId::new()?, 0)?;
//! let stream = device.new_stream()?;
//! let mut buffer = stream.alloc_zeros::<f32>(1024).map_err(|e| nccl_core::Error::Cuda { during: "alloc", source: e })?;
//! let (pointer, _sync) = cudarc::driver::DevicePtrMut::device_ptr_mut(&mut buffer, &stream);
//! // SAFETY: `buffer` holds 1024 f32 on the communicator's device and outlives the call.
//! let _ = unsafe { comm.all_reduce(pointer as *const _, pointer as *mut _, 1024, DataType::Float32, ReduceOp::Sum, &stream)? };
//! # Ok(()) }
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]

mod capabilities;
mod capture;
mod collectives;
mod communicator;
mod config;
mod datatype;
mod device;
mod error;
mod group;
mod library;
mod memory;
mod op;
mod ranks;
mod reduce_op;
mod trace;
mod unique_id;

pub use capabilities::{Capabilities, Capability};
pub use capture::{CaptureStatus, capture_status, exempt_thread_from_global_captures};
pub use communicator::{
    AbortHandle, Communicator, DetachedRegistration, MemStats, Registration, ShrinkMode, Suspended,
};
pub use config::{
    Config, CtaPolicy, DEFAULT_TIMEOUT, GraphUsageMode, HostCftMode, NvlsHostMode, RawConfig,
};
pub use cudarc;
pub use cudarc::driver::{CudaEvent, CudaStream};
pub use datatype::DataType;
pub use device::{Device, cuda_driver_available};
pub use error::{Error, ErrorChain, ErrorKind, Result, ResultCode, Status};
pub use group::{Group, group_depth};
pub use library::{check, library, version};
pub use memory::NcclMemory;
pub use nccl_sys;
pub use nccl_sys::Version;
pub use op::{Call, Op};
pub use reduce_op::{PreMulSum, ReduceOp, Reduction, scalar_bytes};
pub use unique_id::UniqueId;
