//! [`GroupGraph`]: a CUDA graph of the group's operations, replayed under
//! the watchdog, holding the buffers (and the group) it uses.

use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{CudaGraph, CudaStream};

use crate::devices::DeviceList;
use crate::diagnostics::clock;
use crate::engine::captures::{Keeper, LiveGraph, refused};
use crate::engine::group::ProcessGroup;
use crate::engine::handoff::end_event_in;
use crate::engine::issue::OpInfo;
use crate::engine::key::CommKey;
use crate::engine::pool::DevicePool;
use crate::engine::tracked::Ends;
use crate::engine::work_buffers::WorkBuffers;
use crate::error::Uncapturable;
use crate::error::{GroupError, OpError, Result};

/// A CUDA graph of the group's operations, captured on one stream
/// ([`ProcessGroup::begin_capture`], [`GraphCapture::end`](crate::GraphCapture::end)).
///
/// * [`replay`](Self::replay) launches it on that stream; each replay is
///   one operation for the watchdog (`graph_replay` in the flight
///   recorder), with this group handle's operation timeout, so a replay
///   that hangs (a rank that stopped replaying) fails the group as any
///   operation would. Every rank must replay its graph as many times.
/// * It owns the buffers the graph uses (and those of captured works
///   dropped unwaited): they cannot be freed, read or reused while the
///   graph may run; [`into_buffers`](Self::into_buffers) destroys the
///   graph and gives them back, ordered after the last replay like any
///   operation's.
/// * It holds the group, so the communicators outlive it. NCCL frees a
///   communicator only once every graph that captured it is destroyed:
///   [`ProcessGroup::destroy`](crate::Lifecycle::destroy) refuses while a graph lives, and an abort
///   (or a failure's) finishes only once the graphs are dropped (until
///   then it reports [`GroupError::AbortStalled`]). Drop the graphs first.
///   A graph dropped while its stream is being captured cannot order the
///   release of its buffers after its replays; it leaves them with the
///   group, which frees them when it is dropped.
///
/// Not `Send`: a CUDA graph is not synchronised for use from several threads.
pub struct GroupGraph<B: WorkBuffers + 'static> {
    graph: Option<CudaGraph>,
    buffers: Option<B>,
    keeper: Arc<Keeper>,
    stream: Arc<CudaStream>,
    pool: Arc<DevicePool>,
    group: ProcessGroup,
    _live: LiveGraph,
}

impl<B: WorkBuffers + 'static> std::fmt::Debug for GroupGraph<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupGraph")
            .field("group", &self.group.name())
            .field("operations", &self.operations())
            .field("empty", &self.is_empty())
            .finish()
    }
}

impl<B: WorkBuffers + 'static> GroupGraph<B> {
    /// The graph `graph` (`None`: nothing was captured) of the capture on
    /// `stream`, owning `buffers` and the captured works' `keeper`.
    pub(crate) fn new(
        group: ProcessGroup,
        stream: Arc<CudaStream>,
        graph: Option<CudaGraph>,
        buffers: B,
        keeper: Arc<Keeper>,
    ) -> std::result::Result<Self, Box<OpError<B>>> {
        let pool = match group.device_pool(stream.context().ordinal()) {
            Ok(pool) => pool,
            Err(error) => return Err(Box::new(OpError { error, buffers })),
        };
        let live = group.inner.captures.graph_alive();
        Ok(Self {
            graph,
            buffers: Some(buffers),
            keeper,
            stream,
            pool,
            group,
            _live: live,
        })
    }

    /// Launches the graph on its stream (`cuGraphLaunch`), watched by the
    /// watchdog until it ends.
    ///
    /// Nothing to launch for an empty graph.
    ///
    /// # Errors
    /// An aborted, destroyed or failed group (a graph must not run on
    /// communicators that are gone), a suspended one
    /// ([`GroupError::Suspended`]), a stream being captured
    /// ([`Uncapturable::ReplayWhileCapturing`]), or CUDA's refusal to
    /// launch. If the launch succeeded but its end could not be recorded,
    /// the group fails (the replay runs unwatched) and says so.
    pub fn replay(&self) -> Result<()> {
        self.group.check_live()?;
        self.group.check_not_suspended("replaying its graphs")?;
        if self.group.capture_status("graph_replay", &self.stream)? {
            return Err(refused("graph_replay", Uncapturable::ReplayWhileCapturing));
        }
        let Some(graph) = &self.graph else {
            return Ok(());
        };
        let info = OpInfo::untyped("graph_replay");
        let key = CommKey::Collective(DeviceList::one(self.stream.context().ordinal())?);
        let checked = self.group.check_collective(&info, &key)?;
        graph
            .launch()
            .map_err(nccl_core::Error::cuda("launching the captured CUDA graph"))?;
        let enqueued = Instant::now();
        let recorded = self.group.record(info, &key, clock::nanos(enqueued), checked);
        let seq = recorded.seq;
        let watched = self.group.track(recorded, enqueued, || {
            end_event_in(&self.pool, &self.stream, &self.stream, None).map(Ends::One)
        });
        match watched {
            Ok(_) => Ok(()),
            Err(error) => Err(self.group.failed_in_flight(error, seq, ()).error),
        }
    }

    /// Whether nothing was captured (the graph replays as nothing).
    pub fn is_empty(&self) -> bool {
        self.graph.is_none()
    }

    /// How many of the group's operations the graph holds.
    pub fn operations(&self) -> usize {
        self.keeper.operations()
    }

    /// The stream the graph replays on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Destroys the graph and gives the buffers back: work queued on the
    /// graph's stream afterwards sees every replay's results (and a
    /// [`Tensor`](nccl_tensor::Tensor) orders its use on other streams
    /// after them too, through its stream tracking).
    ///
    /// # Errors
    /// The group was aborted or failed (a replay may have stopped
    /// halfway: the results are not valid); the buffers are then released
    /// as on drop.
    pub fn into_buffers(mut self) -> Result<B> {
        self.group.check_live()?;
        self.buffers
            .take()
            .ok_or_else(|| GroupError::InvalidArgument {
                argument: "graph",
                expected: "a graph that still holds its buffers".to_string(),
                given: "one whose buffers were taken".to_string(),
            })
    }
}

impl<B: WorkBuffers + 'static> Drop for GroupGraph<B> {
    fn drop(&mut self) {
        // CUDA frees a graph still running once it is done.
        drop(self.graph.take());
        if !matches!(
            nccl_core::capture_status(&self.stream),
            Ok(nccl_core::CaptureStatus::None)
        ) {
            // An event recorded now would be captured, and no other stream
            // could wait for it: the buffers stay with the group instead.
            let orphans = &self.group.inner.captures;
            if let Some(buffers) = self.buffers.take() {
                orphans.adopt(Box::new(buffers));
            }
            orphans.adopt_parked(&self.keeper);
            return;
        }
        // Whatever is freed next waits for the last replay.
        if let Ok(event) = self.pool.event() {
            if event.record(&self.stream).is_ok() {
                if let Some(buffers) = &self.buffers {
                    let _ = buffers.order_after(&event);
                }
                self.keeper.order_after(&event);
            }
            // The waits have taken the event's state; it can be recorded again.
            self.pool.give_back(event);
        }
    }
}
