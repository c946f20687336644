//! The raw layer: nccl-sys function pointers called directly, with the
//! communicator and stream handles taken once. This is the baseline the
//! other layers are compared against.

use std::marker::PhantomData;

use cudarc::driver::CudaStream;
use nccl_core::Communicator;
use nccl_sys::{NcclLibrary, cudaStream_t, ncclComm_t, ncclResult_t};

use super::call::launcher;
use super::{Binding, Call, Layer, LayerKind, Shift, place_within, shifted};
use crate::buffers::DeviceBuffers;
use crate::error::BenchError;

/// Issues calls through `nccl_sys::library()?.functions()`, bypassing
/// nccl-core's wrappers.
pub struct RawLayer<'a> {
    lib: &'static NcclLibrary,
    comm: ncclComm_t,
    /// The communicator's ranks, which bound calls are checked against.
    world: usize,
    stream: cudaStream_t,
    /// The stream `stream` is the handle of, which gives the buffers'
    /// addresses.
    owner: &'a CudaStream,
    _comm: PhantomData<&'a Communicator>,
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
            world: comm.world_size(),
            stream: stream.cu_stream() as cudaStream_t,
            owner: stream,
            _comm: PhantomData,
        })
    }
}

/// `result` of `function` as nccl-core maps it: success, or in progress
/// on a nonblocking communicator, is `Ok`; any other code is nccl-core's
/// error for it, with NCCL's description and last-error text.
#[inline(always)]
fn check(
    lib: &NcclLibrary,
    function: &'static str,
    result: ncclResult_t,
) -> Result<(), BenchError> {
    nccl_core::check(lib, function, result)
        .map(drop)
        .map_err(BenchError::from)
}

impl Layer for RawLayer<'_> {
    fn kind(&self) -> LayerKind {
        LayerKind::Raw
    }

    fn bind<'s>(&'s self, call: &Call, buffers: &'s mut DeviceBuffers) -> Binding<'s> {
        let last = call.check_within(
            buffers.addresses(self.owner),
            (buffers.dtype(), buffers.len()),
            self.world,
        )?;
        let (lib, comm, stream) = (self.lib, self.comm, self.stream);
        let functions = *lib.functions();
        let elem = call.dtype.size_bytes();
        // A function the loaded libnccl lacks fails the first launch (the
        // runner's warm-up), naming it.
        let calls = call.core_calls(lib);
        let (start, end) = (functions.ncclGroupStart()?, functions.ncclGroupEnd()?);
        let issue = move |part: nccl_core::Call<'static>, shift: &Shift| {
            let part = shifted(part, place_within(shift, last)? * elem);
            // SAFETY: `check_within` found the call within `buffers` (which
            // the launcher borrows) at every place up to `last`, for the
            // elements the call reads and writes on the communicator's
            // ranks, and `place_within` keeps this one there; `comm` and
            // `stream` are live for the layer's lifetime.
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
        Ok(launcher(calls, issue, grouped))
    }
}
