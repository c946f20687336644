//! [`MultiDevice`]: the group's operations on one part per local GPU.

use std::sync::Arc;

use cudarc::driver::CudaStream;
use nccl_core::Op;

use crate::engine::buffers::GroupBuffers;
use crate::engine::group::ProcessGroup;
use crate::engine::work::OpResult;

/// The group's operations on one part per local GPU (the list
/// forms of Ray's multi-device group), from [`ProcessGroup::multi`]: the collectives of
/// [`ProcessGroup`] under the same names, each taking one tensor (or
/// `(output, input)` pair) per local device and one caller's stream per
/// part, issued in one NCCL group with one [`Work`](crate::Work).
#[derive(Clone, Copy, Debug)]
pub struct MultiDevice<'a> {
    pub(crate) group: &'a ProcessGroup,
}

impl ProcessGroup {
    /// The group's operations on one part per local GPU: see
    /// [`MultiDevice`].
    pub fn multi(&self) -> MultiDevice<'_> {
        MultiDevice { group: self }
    }
}

impl MultiDevice<'_> {
    /// [`ProcessGroup::issue`] on one part per local device, inside one
    /// NCCL group (the list forms; global rank = process rank x devices +
    /// index, and `callers[i]` is the caller's stream on part `i`'s
    /// device).
    ///
    /// Every device's part is planned (checked) before any is enqueued: a part
    /// left in the group would launch alone and wait forever for its peers.
    ///
    /// # Errors
    /// As [`ProcessGroup::issue`], plus a device twice or a stream count
    /// that is not one per part.
    pub fn issue<B: GroupBuffers>(
        &self,
        op: Op<'static>,
        buffers: Vec<B>,
        callers: &[Arc<CudaStream>],
    ) -> OpResult<Vec<B>> {
        self.group.issue_multi(op, buffers, callers)
    }
}
