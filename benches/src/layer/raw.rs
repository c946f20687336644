//! The raw layer: nccl-sys function pointers called directly, with the
//! communicator and stream handles taken once. This is the baseline the
//! other layers are compared against.

use std::ffi::CStr;
use std::marker::PhantomData;

use cudarc::driver::CudaStream;
use nccl_core::{Communicator, Op, ResultCode};
use nccl_sys::{NcclLibrary, cudaStream_t, ncclComm_t, ncclResult_t};

use super::{Call, Launch, Layer, LayerKind, has_native_all_to_all};
use crate::buffers::DeviceBuffers;
use crate::error::BenchError;

/// Issues calls through `nccl_sys::library()?.functions()`, bypassing
/// nccl-core's wrappers.
pub struct RawLayer<'a> {
    lib: &'static NcclLibrary,
    comm: ncclComm_t,
    stream: cudaStream_t,
    native_all_to_all: bool,
    _borrows: PhantomData<(&'a Communicator, &'a CudaStream)>,
}

impl<'a> RawLayer<'a> {
    /// The raw handles of `comm` and `stream`, which must outlive the layer.
    ///
    /// # Errors
    /// The communicator was aborted or finalized.
    pub fn new(comm: &'a Communicator, stream: &'a CudaStream) -> Result<Self, BenchError> {
        let lib = comm.library();
        Ok(Self {
            lib,
            comm: comm.as_raw()?,
            stream: stream.cu_stream() as cudaStream_t,
            native_all_to_all: has_native_all_to_all(lib),
            _borrows: PhantomData,
        })
    }
}

/// Maps a raw result to `Ok` (success, or in progress on a nonblocking
/// communicator) or nccl-core's error for it.
#[inline(always)]
fn check(
    lib: &'static NcclLibrary,
    function: &'static str,
    result: ncclResult_t,
) -> Result<(), BenchError> {
    if result == ncclResult_t::ncclSuccess || result == ncclResult_t::ncclInProgress {
        Ok(())
    } else {
        Err(error(lib, function, result))
    }
}

#[cold]
#[inline(never)]
fn error(lib: &'static NcclLibrary, function: &'static str, result: ncclResult_t) -> BenchError {
    let text = |pointer: *const std::ffi::c_char| {
        if pointer.is_null() {
            return None;
        }
        // SAFETY: not NULL (checked above); NCCL returns NUL-terminated
        // strings that stay valid until the next NCCL call on this thread,
        // and this one is copied at once.
        let text = unsafe { CStr::from_ptr(pointer) };
        Some(text.to_string_lossy().into_owned())
    };
    let description = lib.functions().ncclGetErrorString().ok().and_then(|get| {
        // SAFETY: ncclGetErrorString accepts any code and returns a static string.
        text(unsafe { get(result) })
    });
    let last_error = lib.functions().ncclGetLastError().ok().and_then(|get| {
        // SAFETY: ncclGetLastError accepts NULL and returns a process-wide buffer.
        text(unsafe { get(std::ptr::null_mut()) })
    });
    nccl_core::Error::from_code(function, ResultCode(result.0), description, last_error).into()
}

/// One resolved NCCL call: the function's name and a closure calling its
/// pointer with the call's arguments.
type RawCall = (&'static str, Box<dyn Fn() -> ncclResult_t>);

impl RawLayer<'_> {
    /// Resolves `call` to its NCCL function pointer, taken once here.
    ///
    /// # Safety
    /// As [`Layer::bind`], for the returned closure.
    unsafe fn resolve(&self, call: nccl_core::Call<'static>) -> Result<RawCall, BenchError> {
        let (comm, stream, functions) = (self.comm, self.stream, self.lib.functions());
        let nccl_core::Call {
            op,
            send,
            recv,
            count,
            dtype,
        } = call;
        let dtype = dtype.to_raw();
        // The closures' SAFETY: `bind`'s contract covers the buffers, for the
        // elements the call reads and writes; `comm` and `stream` are live
        // for the layer's lifetime.
        let issue: Box<dyn Fn() -> ncclResult_t> = match op {
            Op::AllReduce(reduction) => {
                let (f, op) = (functions.ncclAllReduce()?, reduction.to_raw());
                // SAFETY: see above.
                Box::new(move || unsafe { f(send, recv, count, dtype, op, comm, stream) })
            }
            Op::Broadcast { root } => {
                let f = functions.ncclBroadcast()?;
                // SAFETY: see above.
                Box::new(move || unsafe { f(send, recv, count, dtype, root, comm, stream) })
            }
            Op::Reduce { op, root } => {
                let (f, op) = (functions.ncclReduce()?, op.to_raw());
                // SAFETY: see above.
                Box::new(move || unsafe { f(send, recv, count, dtype, op, root, comm, stream) })
            }
            Op::AllGather => {
                let f = functions.ncclAllGather()?;
                // SAFETY: see above.
                Box::new(move || unsafe { f(send, recv, count, dtype, comm, stream) })
            }
            Op::ReduceScatter(reduction) => {
                let (f, op) = (functions.ncclReduceScatter()?, reduction.to_raw());
                // SAFETY: see above.
                Box::new(move || unsafe { f(send, recv, count, dtype, op, comm, stream) })
            }
            Op::AllToAll => {
                let f = functions.ncclAlltoAll()?;
                // SAFETY: see above. In place (send == recv, as nccl-tests
                // runs it) stays within the buffer; its result is
                // unspecified and not checked.
                Box::new(move || unsafe { f(send, recv, count, dtype, comm, stream) })
            }
            Op::Send { peer } => {
                let f = functions.ncclSend()?;
                // SAFETY: see above.
                Box::new(move || unsafe { f(send, count, dtype, peer, comm, stream) })
            }
            Op::Recv { peer } => {
                let f = functions.ncclRecv()?;
                // SAFETY: see above.
                Box::new(move || unsafe { f(recv, count, dtype, peer, comm, stream) })
            }
        };
        Ok((op.function(), issue))
    }
}

impl Layer for RawLayer<'_> {
    fn kind(&self) -> LayerKind {
        LayerKind::Raw
    }

    unsafe fn bind<'s>(
        &'s self,
        call: &Call,
        _buffers: &'s mut DeviceBuffers,
    ) -> Result<Launch<'s>, BenchError> {
        let lib = self.lib;
        let mut calls = call
            .core_calls(self.native_all_to_all)
            .into_iter()
            // SAFETY: `bind`'s contract is `resolve`'s.
            .map(|part| unsafe { self.resolve(part) })
            .collect::<Result<Vec<_>, _>>()?;
        if calls.len() == 1
            && let Some((function, issue)) = calls.pop()
        {
            return Ok(Box::new(move || check(lib, function, issue())));
        }
        let functions = lib.functions();
        let (start, end) = (functions.ncclGroupStart()?, functions.ncclGroupEnd()?);
        Ok(Box::new(move || {
            // SAFETY: ncclGroupStart and ncclGroupEnd take no arguments;
            // each part lies within the call's buffers (a block of
            // all_to_all, one half of sendrecv), and a send to this rank is
            // paired with its receive in the group.
            check(lib, "ncclGroupStart", unsafe { start() })?;
            let issued = calls
                .iter()
                .try_for_each(|(function, issue)| check(lib, function, issue()));
            // SAFETY: as above.
            let ended = check(lib, "ncclGroupEnd", unsafe { end() });
            issued.and(ended)
        }))
    }
}
