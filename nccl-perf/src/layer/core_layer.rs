//! The core layer: nccl-core's checked [`Communicator::issue`], which
//! checks the communicator, stream, type and ranks on every call.

use cudarc::driver::CudaStream;
use nccl_core::{Communicator, Group};

use super::call::launcher;
use super::{Binding, Call, Layer, LayerKind, Shift, place_within, shifted};
use crate::buffers::DeviceBuffers;
use crate::error::BenchError;

/// Issues calls through nccl-core's `Communicator::issue` and `Group`.
pub struct CoreLayer<'a> {
    comm: &'a Communicator,
    stream: &'a CudaStream,
}

impl<'a> CoreLayer<'a> {
    /// The layer over this rank's communicator and stream.
    pub fn new(comm: &'a Communicator, stream: &'a CudaStream) -> Self {
        Self { comm, stream }
    }
}

impl Layer for CoreLayer<'_> {
    fn kind(&self) -> LayerKind {
        LayerKind::Core
    }

    fn bind<'s>(&'s self, call: &Call, buffers: &'s mut DeviceBuffers) -> Binding<'s> {
        let (comm, stream) = (self.comm, self.stream);
        let last = call.check_within(
            buffers.addresses(stream),
            (buffers.dtype(), buffers.len()),
            comm.world_size(),
        )?;
        let elem = call.dtype.size_bytes();
        let calls = call.core_calls(comm.library());
        let issue = move |part: nccl_core::Call<'static>, shift: &Shift| {
            let part = shifted(part, place_within(shift, last)? * elem);
            // SAFETY: `check_within` found the call within `buffers` (which
            // the launcher borrows) at every place up to `last`, for the
            // elements the call reads and writes on the communicator's
            // ranks, and `place_within` keeps this one there. In-place all_to_all (send ==
            // recv, as nccl-tests runs it) stays within the buffer; its
            // result is unspecified and not checked. A part of a grouped
            // call (a block of all_to_all, one half of sendrecv) lies
            // within the call's buffers, and a send to this rank is paired
            // with its receive in the group.
            let _ = unsafe { comm.issue(part, stream) }?;
            Ok::<(), BenchError>(())
        };
        let grouped = |issue_all: &mut dyn FnMut() -> Result<(), BenchError>| {
            let group = Group::start()?;
            issue_all()?;
            let _ = group.end()?;
            Ok(())
        };
        Ok(launcher(calls, issue, None, grouped))
    }
}
