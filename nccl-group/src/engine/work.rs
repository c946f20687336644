//! [`Work`]: the handle of an enqueued operation, which owns the
//! operation's buffers (or holds the caller's borrow of them) until the
//! GPU is done with them, or of a captured one, which hands them back at
//! once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::DriverError;

use crate::engine::captures::Keeper;
use crate::engine::ownership::{OpBuffers, Ownership};
use crate::engine::tracked::{End, Tracked};
use crate::engine::work_buffers::{Boxer, WorkBuffers};
use crate::error::{GroupError, OpError, Result};
use crate::health::watchdog::{Completion, Progress};

/// The result of an operation: its [`Work`], or its [`Refusal`]: the error
/// with the buffers for owned ones, a plain [`GroupError`] for borrowed
/// memory (see [`Ownership`]).
pub type OpResult<B> = std::result::Result<Work<B>, Refusal<B>>;

/// The refusal of an operation on buffers of type `B`: `Box<OpError<B>>`
/// ([`Owned`](crate::Owned): tensors, registered tensors, `AnyTensor`s and
/// their pairs and lists) or [`GroupError`] ([`Borrowed`](crate::Borrowed):
/// `&mut CudaSlice<T>`, `CudaViewMut<T>` and their pairs and lists).
///
/// `?` takes either into a [`GroupError`].
pub type Refusal<B> = <<B as OpBuffers>::Ownership as Ownership>::Refusal<B>;

/// What the issue path gives before the refusal takes its buffers' type:
/// the [`OpError`] always holds them ([`refusal_of`]).
pub(crate) type Issued<B> = std::result::Result<Work<B>, Box<OpError<B>>>;

/// The one place an operation's error becomes its [`Refusal`]: owned
/// buffers go back with it, borrowed ones are let go.
#[inline]
pub(crate) fn refusal_of<B: OpBuffers>(issued: Issued<B>) -> OpResult<B> {
    issued.map_err(|refused| {
        let OpError { error, buffers } = *refused;
        B::Ownership::refuse(error, buffers)
    })
}

/// An operation enqueued on the group's NCCL streams (or the caller's).
///
/// It owns the buffers it was given: they cannot be read, reused or freed
/// until [`Work::wait`] hands them back, so NCCL never sees a buffer change
/// under it. [`Work::wait`] makes the caller's stream wait for the
/// operation (the CPU does not); [`Work::synchronize`] blocks the CPU, at
/// most a given time; [`Work::is_completed`] polls. Dropping a `Work`
/// without waiting orders the buffers' release after the operation, so the
/// memory is never freed early either.
///
/// ```no_run
/// use std::sync::Arc;
/// use std::time::Duration;
/// use nccl_group::prelude::*;
///
/// fn step(group: &ProcessGroup, grads: Tensor<f32>, stream: &Arc<CudaStream>) -> Result<Tensor<f32>, GroupError> {
///     // On the group's own stream, so that work queued on `stream` meanwhile overlaps it.
///     let work = group.with_stream_mode(StreamMode::Separate).all_reduce(grads, ReduceOp::Avg, stream)?;
///     // ... queue compute that does not read `grads` on `stream` ...
///     // The CPU waits, at most 60 s, and checks that no peer failed under the operation
///     // (`is_completed()` polls instead, unchecked).
///     work.synchronize(Duration::from_secs(60))?;
///     work.wait() // `stream` waits for the all-reduce, and the tensor comes back
/// }
/// ```
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
///
/// # Captured operations
/// An operation issued on a stream that is being captured into a CUDA
/// graph (see [`ProcessGroup::begin_capture`](crate::ProcessGroup::begin_capture))
/// runs nothing now: the graph runs it at each replay. Its `Work`
/// [`is_captured`](Work::is_captured), and:
/// * it is complete at once: [`is_completed`](Work::is_completed) is true,
///   [`synchronize`](Work::synchronize) returns at once, and
///   [`wait`](Work::wait) hands the buffers back at once (the capturing
///   stream orders what follows it);
/// * the watchdog never sees it, so it never times out (a graph's replays
///   through [`GroupGraph::replay`](crate::GroupGraph::replay) are watched
///   instead, each with the operation timeout);
/// * the graph uses its buffers at every replay, so they must outlive the
///   graph: give them to [`GraphCapture::end`](crate::GraphCapture::end),
///   which keeps them with the graph. A captured work dropped without
///   `wait` keeps its buffers with the capture's graph until that graph
///   is dropped (with the group, for a capture the group did not begin).
///
/// # Borrowed memory
/// The work of an operation on borrowed cudarc memory (`&mut
/// CudaSlice<T>`, `CudaViewMut<T>` and their pairs: see
/// [`ProcessGroup`](crate::ProcessGroup)'s "Borrowed memory") holds the
/// borrow, so the memory cannot be read, written or freed until the work
/// is waited for or dropped:
///
/// ```compile_fail,E0502
/// # fn f(group: &nccl_group::ProcessGroup, stream: &std::sync::Arc<nccl_core::CudaStream>) {
/// let mut grads = stream.alloc_zeros::<f32>(4).unwrap();
/// let work = group.all_reduce(&mut grads, nccl_core::ReduceOp::Sum, stream).unwrap();
/// let values = stream.clone_dtoh(&grads); // error: `grads` is borrowed by the work
/// work.wait().unwrap();
/// # }
/// ```
///
/// ```
/// # fn f(group: &nccl_group::ProcessGroup, stream: &std::sync::Arc<nccl_core::CudaStream>) -> nccl_group::Result<()> {
/// let mut grads = stream.alloc_zeros::<f32>(4).map_err(nccl_core::Error::cuda("alloc"))?;
/// let work = group.all_reduce(&mut grads, nccl_core::ReduceOp::Sum, stream)?;
/// work.wait()?; // the caller's stream now waits for the all-reduce
/// let values = stream.clone_dtoh(&grads).map_err(nccl_core::Error::cuda("copy"))?;
/// # Ok(()) }
/// ```
///
/// Dropping such a work without waiting does on the GPU what
/// [`wait`](Work::wait) does, and orders the memory's own stream (where
/// cudarc frees it) after the operation too; the CPU does not wait. Such
/// a work is never captured ([`Uncapturable::BorrowedMemory`](crate::Uncapturable::BorrowedMemory)),
/// and its buffers come back without a result check: call
/// [`synchronize`](Work::synchronize) before reading them on the host
/// when a failed peer must not go unnoticed.
///
/// # Async completion
/// With the `async` feature a `Work` is [`IntoFuture`](std::future::IntoFuture):
/// `work.await` gives what [`wait`](Work::wait) gives, once the operation
/// is complete on the GPU and its communicators' errors were checked (as
/// [`synchronize`](Work::synchronize) checks them), without blocking a
/// thread per operation: one waker thread per process polls the ends of
/// every awaited work (see `WorkFuture`). Any executor drives it.
#[must_use = "a Work holds the operation's buffers: call wait() to get them back"]
pub struct Work<B: WorkBuffers> {
    buffers: Option<B>,
    state: State<B>,
}

/// Where the operation of a [`Work`] stands.
enum State<B> {
    /// Enqueued, its end watched.
    ///
    /// `borrowed`: the buffers borrow the caller's memory, which the caller may
    /// use as soon as the work drops, so dropping it orders the caller's stream
    /// as `wait` does.
    Tracked { op: Arc<Tracked>, borrowed: bool },
    /// Captured in a CUDA graph: owned buffers dropped unwaited are boxed
    /// by `keep` and parked in `keeper`.
    Captured { keeper: Arc<Keeper>, keep: Boxer<B> },
    /// Waited for: the buffers went back with the operation's result
    /// check, and nothing is left.
    Waited,
}

impl<B: WorkBuffers> std::fmt::Debug for Work<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Work")
            .field("captured", &self.is_captured())
            // Without recording a shared end (a side effect).
            .field("completed", &self.completed_by(Completion::poll))
            .finish()
    }
}

/// How long `synchronize` spins before it starts sleeping between polls.
const SPIN: Duration = Duration::from_micros(50);
/// The sleep between polls after that.
const POLL: Duration = Duration::from_micros(20);

impl<B: WorkBuffers> Work<B> {
    /// The work of an enqueued operation; `borrowed`: `buffers` borrow
    /// the caller's memory.
    pub(crate) fn new(buffers: B, op: Arc<Tracked>, borrowed: bool) -> Self {
        Self {
            buffers: Some(buffers),
            state: State::Tracked { op, borrowed },
        }
    }

    /// The work of an operation captured in a CUDA graph, whose owned
    /// buffers, if dropped unwaited, `keep` boxes for `keeper`.
    pub(crate) fn captured(buffers: B, keeper: Arc<Keeper>, keep: Boxer<B>) -> Self {
        Self {
            buffers: Some(buffers),
            state: State::Captured { keeper, keep },
        }
    }

    /// The tracked operation; `None` for a captured one.
    pub(crate) fn tracked(&self) -> Option<&Arc<Tracked>> {
        match &self.state {
            State::Tracked { op, .. } => Some(op),
            State::Captured { .. } | State::Waited => None,
        }
    }

    fn ends(&self) -> &[End] {
        self.tracked().map_or(&[], |op| op.ends.as_slice())
    }

    /// Makes the caller's stream wait for the end of the operation on
    /// each device where it ran on another stream.
    fn order_callers(&self) -> std::result::Result<(), DriverError> {
        for end in self.ends() {
            if let Some(caller) = &end.caller {
                caller.wait(&end.event)?;
            }
        }
        Ok(())
    }

    /// Whether the operation was captured in a CUDA graph rather than
    /// enqueued (see "Captured operations" above).
    pub fn is_captured(&self) -> bool {
        matches!(self.state, State::Captured { .. })
    }

    /// Whether the operation has finished on every device, or failed
    /// with its group ([`Work::synchronize`] then says why); a captured
    /// one is complete at once.
    ///
    /// On the caller's stream the operation shares its end event with the
    /// operations beside it (`docs/group/modes.md`, "Shared end events"):
    /// if that end is not recorded yet, this records it, so the answer
    /// turns true once the work queued on the stream before this call has
    /// ended too.
    pub fn is_completed(&self) -> bool {
        self.completed_by(Completion::poll_closing)
    }

    /// [`Work::is_completed`], the end polled with `poll`.
    fn completed_by(&self, poll: fn(&Tracked) -> Progress) -> bool {
        self.tracked()
            .is_none_or(|op| op.failed().is_some() || poll(op) == Progress::Done)
    }

    /// Blocks the CPU until the operation has finished, at most `timeout`,
    /// then checks that it produced its result: that no communicator of
    /// the group reported an error by the time it was seen to end (as
    /// PyTorch's `WorkNCCL::isCompleted` does).
    ///
    /// An end shared on the caller's stream is recorded now if it is not
    /// yet, so this also waits for the work queued there before the call
    /// (as [`Work::is_completed`] says).
    ///
    /// After `Ok`, the results are the operation's, on the GPU and on the host.
    ///
    /// # Errors
    /// [`GroupError::Failed`] as soon as the group fails (the watchdog saw
    /// this or another operation time out, or an asynchronous error), and
    /// when a communicator reports an error as the operation ends (a peer
    /// died: its results may be partial);
    /// [`GroupError::Timeout`] past `timeout` (the work keeps running; the
    /// `Work` and its buffers stay valid); or a CUDA error the operation
    /// raised. A captured operation returns at once.
    pub fn synchronize(&self, timeout: Duration) -> Result<()> {
        let State::Tracked { op, .. } = &self.state else {
            return Ok(());
        };
        let start = Instant::now();
        loop {
            if let Some(error) = op.failed_error() {
                return Err(error);
            }
            match op.poll_closing() {
                Progress::Done => return op.outcome.verify(),
                Progress::Broken(source) => {
                    return Err(nccl_core::Error::cuda("waiting for the operation")(source).into());
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
    /// wait) and returns the buffers.
    ///
    /// Work queued on that stream afterwards sees the results.
    ///
    /// The tensors come back carrying the operation's result check
    /// ([`WorkBuffers::set_producer`]): reading one on the host
    /// ([`Tensor::to_vec`](nccl_tensor::Tensor::to_vec)) fails with the group's failure when the
    /// operation may have run with a failed peer, instead of returning
    /// partial data. Work the GPU runs on them afterwards (a kernel queued
    /// on the caller's stream) cannot be checked before it reads: the
    /// group's [`Failure::suspects`](crate::Failure::suspects) names such
    /// operations, or use [`Work::synchronize`] (or
    /// [`GroupOptions::blocking_wait`](crate::GroupOptions::blocking_wait))
    /// first. Borrowed memory carries no result check (see "Borrowed
    /// memory" above).
    ///
    /// With [`GroupOptions::blocking_wait`](crate::GroupOptions::blocking_wait)
    /// the CPU waits too: as [`Work::synchronize`] without a timeout of its
    /// own (the operation's timeout bounds it), checked.
    ///
    /// # Errors
    /// [`GroupError::Failed`] if the group already failed under this
    /// operation (its results are not valid), or a CUDA failure; the
    /// buffers are then released as on drop. A captured operation hands
    /// its buffers back at once.
    pub fn wait(mut self) -> Result<B> {
        if let State::Tracked { op, .. } = &self.state {
            if let Some(error) = op.failed_error() {
                return Err(error);
            }
            if op.blocking_wait {
                self.synchronize(Duration::MAX)?;
            }
        }
        self.order_callers()
            .map_err(nccl_core::Error::cuda("making the caller's stream wait"))?;
        // `buffers` is only taken here or in drop.
        let mut buffers = self
            .buffers
            .take()
            .ok_or_else(|| GroupError::InvalidArgument {
                argument: "work",
                expected: "a work that still holds its buffers".to_string(),
                given: "one already waited on".to_string(),
            })?;
        // The operation's reference goes to the buffers' check.
        if let State::Tracked { op, .. } = std::mem::replace(&mut self.state, State::Waited) {
            buffers.set_producer(op);
        }
        Ok(buffers)
    }
}

impl<B: WorkBuffers> Drop for Work<B> {
    fn drop(&mut self) {
        let Some(buffers) = self.buffers.take() else {
            return;
        };
        match &self.state {
            State::Tracked { borrowed, .. } => {
                // If a wait fails the stream is broken and no later work
                // (or free) on it runs either.
                if *borrowed {
                    // The caller may use the memory once the borrow ends.
                    let _ = self.order_callers();
                }
                // A shared end is none of the operation's own: its buffers
                // are freed on its stream, after it (`handoff::op_end`).
                for end in self.ends() {
                    let _ = buffers.order_after(&end.event);
                }
                drop(buffers);
            }
            // The graph uses them at each replay: they live as long as it.
            State::Captured { keeper, keep } => keeper.park(keep(buffers)),
            // Waiting took the buffers (this returned above).
            State::Waited => {}
        }
    }
}
