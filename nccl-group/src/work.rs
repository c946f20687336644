//! [`Work`]: the handle of an enqueued operation, which owns the
//! operation's buffers until the GPU is done with them.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use cudarc::driver::{CudaEvent, CudaStream, DriverError};
use nccl_tensor::{AnyTensor, NcclType, Tensor};

use crate::error::{GroupError, Result};
use crate::failure::Failure;
use crate::pool::DevicePool;
use crate::watchdog::{Completion, Progress};

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

impl WorkBuffers for AnyTensor {
    fn order_after(&self, event: &CudaEvent) -> std::result::Result<(), DriverError> {
        self.stream().wait(event)
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
    /// The stream the event is recorded on: kept alive with the end, so
    /// that its address is a lane no other stream has meanwhile
    /// ([`Completion::lane`]).
    pub(crate) stream: Arc<CudaStream>,
    /// The caller's stream, where it is not the stream the operation ran
    /// on: [`Work::wait`] makes it wait for the end.
    pub(crate) caller: Option<Arc<CudaStream>>,
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
}

/// What a [`Work`] and the watchdog share about one operation: its end
/// events (given back to their pools once both are done with them) and,
/// if its group failed before it finished, why.
pub(crate) struct Tracked {
    ends: Ends,
    failure: OnceLock<Arc<Failure>>,
}

impl Tracked {
    pub(crate) fn new(ends: Ends) -> Self {
        Self {
            ends,
            failure: OnceLock::new(),
        }
    }

    /// The error of an operation its group failed under, if it did.
    fn failed(&self) -> Option<GroupError> {
        self.failure
            .get()
            .map(|failure| GroupError::Failed(Arc::clone(failure)))
    }
}

impl Completion for Tracked {
    fn poll(&self) -> Progress {
        for end in self.ends.as_slice() {
            match end.event.try_is_complete() {
                Ok(true) => {}
                Ok(false) => return Progress::Running,
                Err(error) => return Progress::Broken(error),
            }
        }
        Progress::Done
    }

    fn lane(&self) -> Option<usize> {
        match &self.ends {
            Ends::One(end) => Some(Arc::as_ptr(&end.stream) as usize),
            Ends::Many(_) => None,
        }
    }

    fn fail(&self, failure: &Arc<Failure>) {
        let _ = self.failure.set(Arc::clone(failure));
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        let ends = std::mem::replace(&mut self.ends, Ends::Many(Vec::new()));
        let give = |end: End| end.pool.give_back(end.event);
        match ends {
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
    op: Arc<Tracked>,
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
    pub(crate) fn new(buffers: B, op: Arc<Tracked>) -> Self {
        Self {
            buffers: Some(buffers),
            op,
        }
    }

    fn ends(&self) -> &[End] {
        self.op.ends.as_slice()
    }

    /// Whether the operation has finished on every device, or failed
    /// with its group ([`Work::synchronize`] then says why).
    pub fn is_completed(&self) -> bool {
        self.op.failure.get().is_some() || self.op.poll() == Progress::Done
    }

    /// Blocks the CPU until the operation has finished, at most `timeout`.
    ///
    /// # Errors
    /// [`GroupError::Failed`] as soon as the group fails (the watchdog saw
    /// this or another operation time out, or an asynchronous error);
    /// [`GroupError::Timeout`] past `timeout` (the work keeps running; the
    /// `Work` and its buffers stay valid); or a CUDA error the operation
    /// raised.
    pub fn synchronize(&self, timeout: Duration) -> Result<()> {
        let start = Instant::now();
        loop {
            if let Some(error) = self.op.failed() {
                return Err(error);
            }
            match self.op.poll() {
                Progress::Done => return self.op.failed().map_or(Ok(()), Err),
                Progress::Broken(source) => {
                    return Err(GroupError::Cuda {
                        during: "waiting for the operation",
                        source,
                    });
                }
                Progress::Running => {}
            }
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

    /// Makes the caller's stream wait for the operation (the CPU does not
    /// wait) and returns the buffers. Work queued on that stream afterwards
    /// sees the results.
    ///
    /// # Errors
    /// [`GroupError::Failed`] if the group already failed under this
    /// operation (its results are not valid), or a CUDA failure; the
    /// buffers are then released as on drop.
    pub fn wait(mut self) -> Result<B> {
        if let Some(error) = self.op.failed() {
            return Err(error);
        }
        for end in self.ends() {
            if let Some(caller) = &end.caller {
                caller
                    .wait(&end.event)
                    .map_err(GroupError::cuda("making the caller's stream wait"))?;
            }
        }
        // `buffers` is only taken here or in drop.
        self.buffers
            .take()
            .ok_or_else(|| GroupError::InvalidArgument {
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
    }
}
