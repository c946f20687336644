//! The core layer: nccl-core's checked [`Communicator::issue`], which
//! checks the communicator, stream, type and ranks on every call.

use cudarc::driver::CudaStream;
use nccl_core::{Communicator, Group};

use super::{Call, Launch, Layer, LayerKind};
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

    unsafe fn bind<'s>(
        &'s self,
        call: &Call,
        _buffers: &'s mut DeviceBuffers,
    ) -> Result<Launch<'s>, BenchError> {
        let (comm, stream) = (self.comm, self.stream);
        let calls = call.core_calls(comm.library());
        Ok(match calls.as_slice() {
            &[single] => Box::new(move || {
                // SAFETY: `bind`'s contract covers the buffers, for the
                // elements the call reads and writes on the communicator's
                // device. In-place all_to_all (send == recv, as nccl-tests
                // runs it) stays within the buffer; its result is
                // unspecified and not checked.
                let _ = unsafe { comm.issue(single, stream) }?;
                Ok(())
            }),
            _ => Box::new(move || {
                let group = Group::start()?;
                for &part in &calls {
                    // SAFETY: as above; each part (a block of all_to_all,
                    // one half of sendrecv) lies within the call's buffers,
                    // and a send to this rank is paired with its receive in
                    // the group.
                    let _ = unsafe { comm.issue(part, stream) }?;
                }
                let _ = group.end()?;
                Ok(())
            }),
        })
    }
}
