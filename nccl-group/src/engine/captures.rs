//! A group's captures into CUDA graphs: what the group refuses to
//! capture ([`refusal`], [`refused`]), where captured buffers wait for
//! their graph ([`Keeper`]), the keepers of the captures in progress
//! ([`Captures`]) and the count of graphs alive ([`LiveGraph`]).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use cudarc::driver::{CudaEvent, CudaStream};

use crate::engine::work_buffers::WorkBuffers;
use crate::error::{GroupError, Uncapturable};
use crate::options::StreamMode;

/// Why an operation issued with `mode` (`capturable`: not the barrier)
/// cannot be captured, checked before anything else.
pub(crate) fn refusal(mode: StreamMode, capturable: bool) -> Option<Uncapturable> {
    if !capturable {
        Some(Uncapturable::Barrier)
    } else if mode == StreamMode::Separate {
        Some(Uncapturable::SeparateStream)
    } else {
        None
    }
}

/// The error of `op` refused for `reason`.
pub(crate) fn refused(op: &'static str, reason: Uncapturable) -> GroupError {
    GroupError::Capture { op, reason }
}

/// Where the buffers of a capture's dropped works wait for its graph, and
/// what the capture saw.
#[derive(Default)]
pub(crate) struct Keeper {
    pub(crate) parked: Mutex<Vec<Box<dyn WorkBuffers>>>,
    pub(crate) operations: AtomicUsize,
    pub(crate) failed: AtomicBool,
}

impl Keeper {
    fn parked(&self) -> MutexGuard<'_, Vec<Box<dyn WorkBuffers>>> {
        self.parked.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps `buffers` as long as the keeper lives.
    pub(crate) fn park(&self, buffers: Box<dyn WorkBuffers>) {
        self.parked().push(buffers);
    }

    /// Makes the release of every parked buffer wait for `event`.
    pub(crate) fn order_after(&self, event: &CudaEvent) {
        for buffers in self.parked().iter() {
            // A failure means a broken stream, on which nothing runs.
            let _ = buffers.order_after(event);
        }
    }

    /// Moves every buffer parked in `other` here.
    fn take_from(&self, other: &Keeper) {
        let moved = std::mem::take(&mut *other.parked());
        self.parked().extend(moved);
    }

    /// The operations captured.
    pub(crate) fn operations(&self) -> usize {
        self.operations.load(Ordering::Relaxed)
    }
}

/// The group's captures: the keeper of each capture it began, by stream;
/// the keeper of works captured in captures it did not begin (kept until
/// the group is dropped); and how many of its graphs live.
#[derive(Default)]
pub(crate) struct Captures {
    active: Mutex<Vec<(usize, Arc<Keeper>)>>,
    orphans: Arc<Keeper>,
    live_graphs: Arc<AtomicUsize>,
}

/// A stream's identity while it lives.
fn stream_key(stream: &CudaStream) -> usize {
    stream.cu_stream() as usize
}

impl Captures {
    pub(crate) fn active(&self) -> MutexGuard<'_, Vec<(usize, Arc<Keeper>)>> {
        self.active.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The keeper of the capture on `stream`.
    pub(crate) fn keeper_for(&self, stream: &CudaStream) -> Arc<Keeper> {
        let key = stream_key(stream);
        self.active().iter().find(|(of, _)| *of == key).map_or_else(
            || Arc::clone(&self.orphans),
            |(_, keeper)| Arc::clone(keeper),
        )
    }

    pub(crate) fn begin(&self, stream: &CudaStream, keeper: Arc<Keeper>) {
        self.active().push((stream_key(stream), keeper));
    }

    pub(crate) fn end(&self, keeper: &Arc<Keeper>) {
        self.active()
            .retain(|(_, active)| !Arc::ptr_eq(active, keeper));
    }

    /// Keeps `buffers` until the group is dropped.
    pub(crate) fn adopt(&self, buffers: Box<dyn WorkBuffers>) {
        self.orphans.park(buffers);
    }

    /// Keeps what `keeper` holds until the group is dropped.
    pub(crate) fn adopt_parked(&self, keeper: &Keeper) {
        self.orphans.take_from(keeper);
    }

    /// How many of the group's graphs live.
    pub(crate) fn live_graphs(&self) -> usize {
        self.live_graphs.load(Ordering::Acquire)
    }

    /// Counts a graph until the guard drops.
    pub(crate) fn graph_alive(&self) -> LiveGraph {
        self.live_graphs.fetch_add(1, Ordering::AcqRel);
        LiveGraph(Arc::clone(&self.live_graphs))
    }
}

/// Counts one live graph of the group until dropped.
pub(crate) struct LiveGraph(Arc<AtomicUsize>);

impl Drop for LiveGraph {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn only_operations_on_the_callers_stream_are_captured_and_never_the_barrier() {
        assert_eq!(refusal(StreamMode::Caller, true), None);
        assert_eq!(
            refusal(StreamMode::Separate, true),
            Some(Uncapturable::SeparateStream)
        );
        for mode in [StreamMode::Caller, StreamMode::Separate] {
            assert_eq!(refusal(mode, false), Some(Uncapturable::Barrier));
        }
    }

    #[test]
    fn every_refusal_says_why_and_what_to_do() {
        let cases = [
            (Uncapturable::SeparateStream, "StreamMode::Caller"),
            (Uncapturable::SeveralDevices, "outside the capture"),
            (Uncapturable::Barrier, "all_reduce of a one-element tensor"),
            (
                Uncapturable::NoCommunicator { device: 3 },
                "on device 3 yet",
            ),
            (
                Uncapturable::UnsettledBuffer,
                "before beginning the capture",
            ),
            (Uncapturable::Invalidated, "capture again"),
            (Uncapturable::AlreadyCapturing, "end that capture first"),
            (Uncapturable::FailedOperation, "capture again"),
            (Uncapturable::ReplayWhileCapturing, "not being captured"),
            (Uncapturable::BorrowedMemory, "capture owned tensors"),
        ];
        for (reason, fix) in cases {
            let error = refused("all_reduce", reason.clone());
            assert_eq!(error.kind(), ErrorKind::Unsupported, "{error}");
            let text = error.to_string();
            assert!(
                text.starts_with("all_reduce in a CUDA graph capture: "),
                "{text}"
            );
            assert!(text.contains(fix), "{reason:?}: {text}");
            assert!(!error.is_timeout());
        }
    }

    /// Buffers that hold a count, to see when they are dropped.
    struct Held {
        _count: Arc<()>,
    }

    impl WorkBuffers for Held {
        fn order_after(
            &self,
            _event: &CudaEvent,
        ) -> std::result::Result<(), cudarc::driver::DriverError> {
            Ok(())
        }
    }

    #[test]
    fn parked_buffers_live_as_long_as_their_keeper() {
        let held = Arc::new(());
        let keeper = Arc::new(Keeper::default());
        keeper.park(Box::new((
            Held {
                _count: Arc::clone(&held),
            },
            (),
        )));
        assert_eq!(Arc::strong_count(&held), 2, "parked, not dropped");
        let graph = Arc::clone(&keeper);
        drop(keeper);
        assert_eq!(Arc::strong_count(&held), 2, "still kept by the graph");
        drop(graph);
        assert_eq!(Arc::strong_count(&held), 1, "released with the last keeper");
    }

    #[test]
    fn the_group_adopts_what_a_graph_cannot_release() {
        let captures = Captures::default();
        let held = Arc::new(());
        let graph = Keeper::default();
        graph.park(Box::new(Held {
            _count: Arc::clone(&held),
        }));
        captures.adopt_parked(&graph);
        captures.adopt(Box::new(Held {
            _count: Arc::clone(&held),
        }));
        drop(graph);
        assert_eq!(Arc::strong_count(&held), 3, "both kept by the group");
        drop(captures);
        assert_eq!(Arc::strong_count(&held), 1);
    }

    #[test]
    fn captures_find_their_keeper_by_stream_and_count_live_graphs() {
        let captures = Captures::default();
        assert_eq!(captures.live_graphs(), 0);
        let first = captures.graph_alive();
        let second = captures.graph_alive();
        assert_eq!(captures.live_graphs(), 2);
        drop(first);
        assert_eq!(captures.live_graphs(), 1);
        drop(second);
        assert_eq!(captures.live_graphs(), 0);
        let keeper = Arc::new(Keeper::default());
        let other = Arc::new(Keeper::default());
        captures.active().push((0xabc, Arc::clone(&keeper)));
        captures.active().push((0xdef, Arc::clone(&other)));
        captures.end(&keeper);
        let active = captures.active();
        assert_eq!(active.len(), 1);
        assert!(Arc::ptr_eq(&active[0].1, &other));
    }
}
