//! Operations on a stream that is being captured into a CUDA graph: how
//! the group issues what it captures ([`ProcessGroup::run_captured`]: no
//! end event, no watchdog, no record; what it refuses and where the
//! buffers wait are `crate::engine::captures`), and the capture the group
//! begins itself ([`ProcessGroup::begin_capture`], [`GraphCapture`]),
//! which ends in a [`GroupGraph`].

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaGraph, CudaStream};
use nccl_core::{CaptureStatus, Status};
use nccl_tensor::{Access, Communicator};

use crate::devices::DeviceList;
use crate::diagnostics::clock;
use crate::engine::captures::{Keeper, refusal, refused};
use crate::engine::graph::GroupGraph;
use crate::engine::group::ProcessGroup;
use crate::engine::handoff::check_stream;
use crate::engine::issue::OpInfo;
use crate::engine::key::CommKey;
use crate::engine::work::Issued;
use crate::engine::work::Work;
use crate::engine::work_buffers::{Boxer, WorkBuffers};
use crate::error::{GroupError, OpError, Result, Uncapturable};
use crate::options::StreamMode;

impl ProcessGroup {
    /// Whether `caller` is being captured; an invalidated capture is an
    /// error (nothing issued on it could run).
    pub(crate) fn capture_status(&self, op: &'static str, caller: &CudaStream) -> Result<bool> {
        match nccl_core::capture_status(caller)? {
            CaptureStatus::None => Ok(false),
            CaptureStatus::Active => Ok(true),
            _ => Err(refused(op, Uncapturable::Invalidated)),
        }
    }

    /// Issues one operation on one local device into the graph being
    /// captured on `caller`: refused unless it runs on `caller`, its
    /// communicator exists and its buffers need no event wait; enqueued
    /// with no end event, no watchdog entry and no flight-recorder record
    /// (the graph's replays get those); a captured [`Work`].
    pub(crate) fn run_captured<B: WorkBuffers>(
        &self,
        info: OpInfo,
        key: impl FnOnce(DeviceList) -> CommKey,
        device: usize,
        (mut buffers, keep): (B, Boxer<B>),
        caller: &Arc<CudaStream>,
        issue: impl FnOnce(&Communicator, &Arc<CudaStream>, &mut B) -> nccl_tensor::Result<Status>,
    ) -> Issued<B> {
        let keeper = self.inner.captures.keeper_for(caller);
        let attempt = (|| {
            self.check_live()?;
            check_stream(info.op, caller, device)?;
            if let Some(reason) = refusal(self.stream_mode, info.capturable) {
                return Err(refused(info.op, reason));
            }
            let key = key(DeviceList::one(device)?);
            let comms = self
                .inner
                .cache
                .created(&key)
                .ok_or_else(|| refused(info.op, Uncapturable::NoCommunicator { device }))?;
            if !buffers.is_settled_on(caller, Access::Write) {
                return Err(refused(info.op, Uncapturable::UnsettledBuffer));
            }
            let member = &comms.members[0];
            let comm = member.lock();
            let _enqueueing = member.enqueueing(clock::now(), self.op_timeout);
            let issued = || {
                let status = issue(&comm, caller, &mut buffers)?;
                if status == Status::InProgress {
                    comm.core().wait_ready_within(info.op, self.op_timeout)?;
                }
                Ok::<_, GroupError>(())
            };
            issued().inspect_err(|error| {
                // NCCL's own error (or a timeout waiting for it) may leave
                // part of the operation in the graph.
                if error.nccl_code().is_some() || error.is_timeout() {
                    keeper.failed.store(true, Ordering::Release);
                }
            })?;
            keeper.operations.fetch_add(1, Ordering::Relaxed);
            Ok(())
        })();
        match attempt {
            Ok(()) => Ok(Work::captured(buffers, keeper, keep)),
            Err(error) => Err(self.failed_op(error, buffers)),
        }
    }

    /// Begins capturing `stream` into a CUDA graph
    /// (`cuStreamBeginCapture`, in the thread-local capture mode, so other
    /// threads' CUDA calls, the watchdog's included, are not restricted).
    ///
    /// Issue the operations to capture on `stream` through
    /// [`GraphCapture::group`] (or any handle of this group in
    /// [`StreamMode::Caller`]), then [`GraphCapture::end`] with their buffers:
    /// the [`GroupGraph`] replays them.
    ///
    /// Before the capture, issue each kind of operation once outside it
    /// (a warm-up, as with any NCCL capture): that creates the
    /// communicators, which a capture cannot, and leaves each tensor ready
    /// for use on `stream` with no event wait, which a capture cannot
    /// record either. Wait for the works issued before the capture
    /// first: dropping one unwaited during the capture (or waiting for one
    /// of [`StreamMode::Separate`]) makes a stream wait for an event
    /// recorded outside the capture, which invalidates it. Every rank
    /// captures the same operations in the same order, and replays the
    /// graph as many times.
    ///
    /// ```no_run
    /// # fn f(group: &nccl_group::ProcessGroup, stream: &std::sync::Arc<nccl_core::CudaStream>,
    /// #      grads: nccl_tensor::Tensor<f32>) -> Result<(), Box<dyn std::error::Error>> {
    /// use nccl_core::ReduceOp;
    /// let grads = group.all_reduce(grads, ReduceOp::Sum, stream)?.wait()?; // warm-up
    /// let capture = group.begin_capture(stream)?;
    /// let grads = capture.group().all_reduce(grads, ReduceOp::Sum, stream)?.wait()?; // captured
    /// let graph = capture.end(grads)?;
    /// for _ in 0..100 {
    ///     graph.replay()?; // one all_reduce each, watched by the watchdog
    /// }
    /// let grads = graph.into_buffers()?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// An aborted, destroyed or failed group, a suspended one
    /// ([`GroupError::Suspended`]), a stream already being
    /// captured ([`Uncapturable::AlreadyCapturing`]), or CUDA's refusal
    /// (the legacy default stream cannot be captured).
    pub fn begin_capture(&self, stream: &Arc<CudaStream>) -> Result<GraphCapture> {
        self.check_live()?;
        self.check_not_suspended("capturing")?;
        if nccl_core::capture_status(stream)? != CaptureStatus::None {
            return Err(refused("begin_capture", Uncapturable::AlreadyCapturing));
        }
        // The operations before the capture get their end now: none can be
        // recorded on the stream while it captures.
        for comms in self.inner.cache.all() {
            for member in &comms.members {
                member.open_end.close_on(stream)?;
            }
        }
        stream
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(nccl_core::Error::cuda("beginning a CUDA graph capture"))?;
        let keeper = Arc::new(Keeper::default());
        self.inner.captures.begin(stream, Arc::clone(&keeper));
        Ok(GraphCapture {
            group: self.with_stream_mode(StreamMode::Caller),
            stream: Arc::clone(stream),
            keeper,
            open: true,
        })
    }
}

/// A CUDA graph capture the group began on a stream
/// ([`ProcessGroup::begin_capture`]); [`GraphCapture::end`] ends it into a
/// [`GroupGraph`].
///
/// Dropped unended, it ends the capture and discards the graph.
#[must_use = "the capture ends, and its graph is discarded, when this is dropped: call end()"]
pub struct GraphCapture {
    group: ProcessGroup,
    stream: Arc<CudaStream>,
    keeper: Arc<Keeper>,
    open: bool,
}

impl fmt::Debug for GraphCapture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GraphCapture")
            .field("group", &self.group.name())
            .field("operations", &self.keeper.operations())
            .finish()
    }
}

impl GraphCapture {
    /// The group, as a handle whose operations run on the caller's stream
    /// ([`StreamMode::Caller`]): the one to issue the captured operations
    /// through.
    pub fn group(&self) -> &ProcessGroup {
        &self.group
    }

    /// The stream being captured.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// How many of the group's operations were captured so far.
    pub fn operations(&self) -> usize {
        self.keeper.operations()
    }

    /// Ends the capture and instantiates its graph, which keeps `buffers`
    /// (every buffer of the captured operations that the caller holds)
    /// until it is dropped or gives them back
    /// ([`GroupGraph::into_buffers`]).
    ///
    /// A capture with nothing in it (an in-place operation at world size 1
    /// enqueues nothing) replays as nothing.
    ///
    /// # Errors
    /// With the buffers: CUDA's refusal to end or instantiate (an
    /// invalidated capture), or an operation that failed during the
    /// capture ([`Uncapturable::FailedOperation`]); the capture is over
    /// either way.
    ///
    /// The graph owns its buffers: borrowed memory, which it would use
    /// after the borrow ends, does not compile here (and an operation on
    /// it is not captured: [`Uncapturable::BorrowedMemory`]):
    ///
    /// ```compile_fail,E0597
    /// # fn f(group: &nccl_group::ProcessGroup, stream: &std::sync::Arc<nccl_core::CudaStream>) -> nccl_group::Result<()> {
    /// let graph = {
    ///     let mut grads = stream.alloc_zeros::<f32>(4).map_err(nccl_core::Error::cuda("alloc"))?;
    ///     let capture = group.begin_capture(stream)?;
    ///     capture.end(&mut grads)? // error: the graph would outlive `grads`
    /// };
    /// graph.replay()?;
    /// # Ok(()) }
    /// ```
    pub fn end<B: WorkBuffers + 'static>(
        mut self,
        buffers: B,
    ) -> Result<GroupGraph<B>, Box<OpError<B>>> {
        let ended = self.finish().and_then(|graph| {
            if self.keeper.failed.load(Ordering::Acquire) {
                Err(refused("GraphCapture::end", Uncapturable::FailedOperation))
            } else {
                Ok(graph)
            }
        });
        match ended {
            Ok(graph) => GroupGraph::new(
                self.group.clone(),
                Arc::clone(&self.stream),
                graph,
                buffers,
                Arc::clone(&self.keeper),
            ),
            Err(error) => Err(Box::new(OpError { error, buffers })),
        }
    }

    /// Ends the capture (once) and forgets its keeper in the group.
    fn finish(&mut self) -> Result<Option<CudaGraph>> {
        self.open = false;
        self.group.inner.captures.end(&self.keeper);
        Ok(self
            .stream
            .end_capture(CUgraphInstantiate_flags(0))
            .map_err(nccl_core::Error::cuda("ending the CUDA graph capture"))?)
    }
}

impl Drop for GraphCapture {
    fn drop(&mut self) {
        if self.open {
            // Nothing of it ever ran: the graph and the buffers just go.
            let _ = self.finish();
        }
    }
}
