//! The raw layer: nccl-sys function pointers called directly, with the
//! communicator and stream handles taken once. This is the baseline the
//! other layers are compared against.

use std::ffi::CStr;
use std::marker::PhantomData;

use cudarc::driver::CudaStream;
use nccl_core::{Communicator, ResultCode};
use nccl_sys::{NcclLibrary, cudaStream_t, ncclComm_t, ncclResult_t};

use super::{Call, Launch, Layer, LayerKind, Shift, shifted};
use crate::buffers::DeviceBuffers;
use crate::error::BenchError;

/// Issues calls through `nccl_sys::library()?.functions()`, bypassing
/// nccl-core's wrappers.
pub struct RawLayer<'a> {
    lib: &'static NcclLibrary,
    comm: ncclComm_t,
    stream: cudaStream_t,
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

impl Layer for RawLayer<'_> {
    fn kind(&self) -> LayerKind {
        LayerKind::Raw
    }

    unsafe fn bind<'s>(
        &'s self,
        call: &Call,
        _buffers: &'s mut DeviceBuffers,
    ) -> Result<Launch<'s>, BenchError> {
        let (lib, comm, stream) = (self.lib, self.comm, self.stream);
        let functions = *lib.functions();
        let elem = call.dtype.size_bytes();
        // A function the loaded libnccl lacks fails the first launch (the
        // runner's warm-up), naming it.
        let calls = call.core_calls(lib);
        let (start, end) = (functions.ncclGroupStart()?, functions.ncclGroupEnd()?);
        let issue = move |part: nccl_core::Call<'static>, shift: &Shift| {
            let part = shifted(part, shift.elems * elem);
            // SAFETY: `bind`'s contract covers the buffers at every place
            // of the rotation, for the elements the call reads and writes;
            // `comm` and `stream` are live for the layer's lifetime.
            // In-place all_to_all (send == recv, as nccl-tests runs it)
            // stays within the buffer; its result is unspecified and not
            // checked. A part of a grouped call (a block of all_to_all,
            // one half of sendrecv) lies within the call's buffers, and a
            // send to this rank is paired with its receive in the group.
            let result = unsafe { part.issue_raw(&functions, comm, stream) }?;
            check(lib, part.op.function(), result)
        };
        let grouped = move |issue_all: &mut dyn FnMut() -> Result<(), BenchError>| {
            // SAFETY: ncclGroupStart takes no arguments.
            check(lib, "ncclGroupStart", unsafe { start() })?;
            let issued = issue_all();
            // SAFETY: ncclGroupEnd takes no arguments.
            let ended = check(lib, "ncclGroupEnd", unsafe { end() });
            issued.and(ended)
        };
        Ok(match calls.as_slice() {
            &[single] => Box::new(move |shifts: &[Shift]| match shifts {
                [shift] => issue(single, shift),
                _ => grouped(&mut || shifts.iter().try_for_each(|shift| issue(single, shift))),
            }),
            _ => Box::new(move |shifts: &[Shift]| {
                grouped(&mut || {
                    shifts
                        .iter()
                        .try_for_each(|shift| calls.iter().try_for_each(|&part| issue(part, shift)))
                })
            }),
        })
    }
}
