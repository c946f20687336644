//! [`Work`]: the handle of an enqueued operation, which owns the
//! operation's buffers until the GPU is done with them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{CudaEvent, CudaStream, DriverError};
use nccl_tensor::{NcclType, Tensor};

use crate::error::{GroupError, Result};
use crate::pool::DevicePool;

/// Buffers an operation holds until its work is done.
pub trait WorkBuffers: Send {
    /// Makes every stream that may free these buffers wait for `event`, so
    /// dropping them cannot free memory the operation still uses.
    ///
    /// # Errors
    /// A CUDA failure.
    fn order_after(&self, event: &CudaEvent) -> std::result::Result<(), DriverError>;
}

impl WorkBuffers for () {
    fn order_after(&self, _event: &CudaEvent) -> std::result::Result<(), DriverError> {
        Ok(())
    }
}

impl<T: NcclType> WorkBuffers for Tensor<T> {
    fn order_after(&self, event: &CudaEvent) -> std::result::Result<(), DriverError> {
        // cudarc frees a slice on the stream it was allocated on.
        self.as_slice().stream().wait(event)
    }
}

impl<A: WorkBuffers, B: WorkBuffers> WorkBuffers for (A, B) {
    fn order_after(&self, event: &CudaEvent) -> std::result::Result<(), DriverError> {
        self.0.order_after(event)?;
        self.1.order_after(event)
    }
}

impl<B: WorkBuffers> WorkBuffers for Vec<B> {
    fn order_after(&self, event: &CudaEvent) -> std::result::Result<(), DriverError> {
        self.iter()
            .try_for_each(|buffers| buffers.order_after(event))
    }
}

/// The end of the operation on one device.
pub(crate) struct End {
    pub(crate) pool: Arc<DevicePool>,
    pub(crate) event: CudaEvent,
    pub(crate) caller: Arc<CudaStream>,
}

/// One end event per device; a single device needs no allocation.
pub(crate) enum Ends {
    One(End),
    Many(Vec<End>),
}

impl Ends {
    fn as_slice(&self) -> &[End] {
        match self {
            Ends::One(end) => std::slice::from_ref(end),
            Ends::Many(ends) => ends,
        }
    }

    fn give_back(self) {
        let give = |end: End| end.pool.give_back(end.event);
        match self {
            Ends::One(end) => give(end),
            Ends::Many(ends) => ends.into_iter().for_each(give),
        }
    }
}

/// An operation enqueued on the group's NCCL streams.
///
/// It owns the buffers it was given: they cannot be read, reused or freed
/// until [`Work::wait`] hands them back, so NCCL never sees a buffer change
/// under it. [`Work::wait`] makes the caller's stream wait for the
/// operation (the CPU does not); [`Work::synchronize`] blocks the CPU, at
/// most a given time; [`Work::is_completed`] polls. Dropping a `Work`
/// without waiting orders the buffers' release after the operation, so the
/// memory is never freed early either.
///
/// A buffer passed to an operation is moved, so using it before the work
/// ends does not compile:
///
/// ```compile_fail
/// # fn f(group: &nccl_group::ProcessGroup, stream: &std::sync::Arc<nccl_core::CudaStream>) {
/// let tensor = nccl_tensor::Tensor::<f32>::zeros(stream, &[4]).unwrap();
/// let work = group.all_reduce(tensor, nccl_core::ReduceOp::Sum, stream).unwrap();
/// let values = tensor.to_vec(stream); // error: `tensor` was moved into the operation
/// # }
/// ```
///
/// ```
/// # fn f(group: &nccl_group::ProcessGroup, stream: &std::sync::Arc<nccl_core::CudaStream>) -> Result<(), Box<dyn std::error::Error>> {
/// let tensor = nccl_tensor::Tensor::<f32>::zeros(stream, &[4])?;
/// let work = group.all_reduce(tensor, nccl_core::ReduceOp::Sum, stream)?;
/// let tensor = work.wait()?; // the caller's stream now waits for the all-reduce
/// let values = tensor.to_vec(stream)?;
/// # Ok(()) }
/// ```
#[must_use = "a Work holds the operation's buffers: call wait() to get them back"]
pub struct Work<B: WorkBuffers> {
    buffers: Option<B>,
    ends: Option<Ends>,
}

impl<B: WorkBuffers> std::fmt::Debug for Work<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Work")
            .field("completed", &self.is_completed())
            .finish()
    }
}

/// How long `synchronize` spins before it starts sleeping between polls.
const SPIN: Duration = Duration::from_micros(50);
/// The sleep between polls after that.
const POLL: Duration = Duration::from_micros(20);

impl<B: WorkBuffers> Work<B> {
    pub(crate) fn new(buffers: B, ends: Ends) -> Self {
        Self {
            buffers: Some(buffers),
            ends: Some(ends),
        }
    }

    fn ends(&self) -> &[End] {
        self.ends.as_ref().map_or(&[], Ends::as_slice)
    }

    /// Whether the operation has finished on every device.
    pub fn is_completed(&self) -> bool {
        self.ends().iter().all(|end| end.event.is_complete())
    }

    /// Blocks the CPU until the operation has finished, at most `timeout`.
    ///
    /// # Errors
    /// [`GroupError::Timeout`] (the work keeps running; the `Work` and its
    /// buffers stay valid), or a CUDA error the operation raised.
    pub fn synchronize(&self, timeout: Duration) -> Result<()> {
        let start = Instant::now();
        for end in self.ends() {
            while !end
                .event
                .try_is_complete()
                .map_err(GroupError::cuda("waiting for the operation"))?
            {
                let waited = start.elapsed();
                if waited >= timeout {
                    return Err(GroupError::Timeout {
                        operation: "Work::synchronize",
                        waited,
                    });
                }
                if waited < SPIN {
                    std::hint::spin_loop();
                } else {
                    std::thread::sleep(POLL);
                }
            }
        }
        Ok(())
    }

    /// Makes the caller's stream wait for the operation (the CPU does not
    /// wait) and returns the buffers. Work queued on that stream afterwards
    /// sees the results.
    ///
    /// # Errors
    /// A CUDA failure; the buffers are then released as on drop.
    pub fn wait(mut self) -> Result<B> {
        for end in self.ends() {
            end.caller
                .wait(&end.event)
                .map_err(GroupError::cuda("making the caller's stream wait"))?;
        }
        if let Some(ends) = self.ends.take() {
            ends.give_back();
        }
        // `buffers` is only taken here or in drop.
        self.buffers.take().ok_or(GroupError::InvalidArgument {
            argument: "work",
            expected: "a work that still holds its buffers".to_string(),
            given: "one already waited on".to_string(),
        })
    }
}

impl<B: WorkBuffers> Drop for Work<B> {
    fn drop(&mut self) {
        if let Some(buffers) = self.buffers.take() {
            for end in self.ends() {
                // If this fails the stream is broken and no later work (or
                // free) on it runs either.
                let _ = buffers.order_after(&end.event);
            }
            drop(buffers);
        }
        if let Some(ends) = self.ends.take() {
            ends.give_back();
        }
    }
}
