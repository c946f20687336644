//! `ProcessGroup` operations captured in CUDA graphs, at world size N: the
//! `ranks_*` tests that run.sh runs on their own (world size 1) and under
//! `nccl-launch -n 2` and `-n 4` (simulated hosts on one GPU).
//!
//! * A sequence of all_reduces and an all_gather, warmed up, captured
//!   through `begin_capture`, replayed several times, on blocking and on
//!   nonblocking communicators: every captured `Work` completes at once,
//!   the watchdog tracks none of them (nor fails the group) and watches
//!   each replay until it ends, and every element after the replays is
//!   what the host computes.
//! * What cannot be captured is refused with its reason, without touching
//!   the capture, which still ends into a graph that replays correctly;
//!   a capture begun with cudarc directly (as `torch.cuda.graph` does)
//!   captures the group's operations too.

use nccl_group::Diagnostics;
use nccl_group::Recovery;
use std::sync::Arc;
use std::time::Duration;

use nccl_core::cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use nccl_core::{CudaStream, ReduceOp};
use nccl_group::{
    CommMode, GroupError, OpState, ProcessGroup, StreamMode, Uncapturable, Work, WorkBuffers,
};
use nccl_tensor::Tensor;
use nccl_test_support::group::ranks::{RankContext, join, on_mode, tcp_store};
use nccl_test_support::group::{destroy, done, enqueued, refused, watchdog_drained};
use nccl_test_support::named_tests;
use nccl_test_support::tensor::world::all_values;
use nccl_test_support::tensor::{assert_same, download, poisoned, upload};

/// Elements per rank.
const LEN: usize = 1025;
/// all_reduces in the captured sequence (then one all_gather).
const ALL_REDUCES: usize = 3;
/// Replays of the graph.
const REPLAYS: usize = 4;

/// What the host expects: every rank's `a` (summed by each all_reduce).
struct Model {
    ranks: Vec<Vec<i64>>,
}

impl Model {
    fn new(seed: u64, world: usize) -> Self {
        Self {
            ranks: all_values::<i64>(seed, world, LEN),
        }
    }

    /// One all_reduce (sum) of `a`.
    fn all_reduce(&mut self) {
        let sum: Vec<i64> = (0..LEN)
            .map(|i| self.ranks.iter().map(|rank| rank[i]).sum())
            .collect();
        self.ranks.iter_mut().for_each(|rank| rank.clone_from(&sum));
    }

    /// The sequence: `ALL_REDUCES` all_reduces, then what the all_gather
    /// of `a` delivers.
    fn sequence(&mut self) -> Vec<i64> {
        (0..ALL_REDUCES).for_each(|_| self.all_reduce());
        self.ranks.concat()
    }
}

/// Checks the tensors of a [`sequence`] against the model: `a` and the
/// `gathered` values, each with what it must hold.
fn check_sequence(
    stream: &Arc<CudaStream>,
    (a, a_expected): (&Tensor<i64>, &[i64]),
    (gathered, gathered_expected): (&Tensor<i64>, &[i64]),
    what: &str,
) {
    assert_same(&download(stream, gathered), gathered_expected, what);
    assert_same(&download(stream, a), a_expected, &format!("{what} a"));
}

/// The sequence on `group`: `ALL_REDUCES` all_reduces of `a`, then the
/// all_gather of `a` into `gathered`; with whether each work was captured.
fn sequence(
    group: &ProcessGroup,
    mut a: Tensor<i64>,
    gathered: Tensor<i64>,
    stream: &Arc<CudaStream>,
    what: &str,
) -> (Tensor<i64>, Tensor<i64>, Vec<bool>) {
    let mut captured = Vec::new();
    for _ in 0..ALL_REDUCES {
        let work = enqueued(group.all_reduce(a, ReduceOp::Sum, stream), what);
        a = finish(work, &mut captured, what);
    }
    let work = enqueued(group.all_gather_into_tensor(gathered, a, stream), what);
    let (gathered, a) = finish(work, &mut captured, what);
    (a, gathered, captured)
}

/// The buffers of `work`, noting whether it was captured; a captured work
/// must be complete at once (none of its replays has run yet).
fn finish<B: WorkBuffers>(work: Work<B>, captured: &mut Vec<bool>, what: &str) -> B {
    captured.push(work.is_captured());
    if work.is_captured() {
        assert!(
            work.is_completed(),
            "{what}: a captured work completes at once"
        );
        work.synchronize(Duration::ZERO)
            .unwrap_or_else(|e| panic!("{what}: synchronize of a captured work: {e}"));
    }
    work.wait().unwrap_or_else(|e| panic!("{what}: wait: {e}"))
}

fn capture_and_replay(ctx: &RankContext, mode: CommMode) {
    let (rank, world, stream) = (ctx.rank(), ctx.world(), &ctx.stream);
    let what = format!("{}: capture ({mode:?} communicators)", ctx.label());
    let store = tcp_store(ctx);
    let group = join(ctx, &format!("graphs-{mode:?}"), &store, mode);
    let mut model = Model::new(61, world);
    let a = upload(stream, &model.ranks[rank]);
    let gathered = poisoned::<i64>(stream, LEN * world);

    // Warm-up: creates the communicator and settles the tensors on the
    // stream; checked, then once more (reading them unsettles them).
    let (a, gathered, captured) = sequence(&group, a, gathered, stream, &what);
    assert_eq!(captured, vec![false; ALL_REDUCES + 1], "{what}: warm-up");
    let expected = model.sequence();
    check_sequence(
        stream,
        (&a, &model.ranks[rank]),
        (&gathered, &expected),
        &format!("{what}: warm-up"),
    );
    let (a, gathered, _) = sequence(&group, a, gathered, stream, &what);
    model.sequence();
    ctx.stream.synchronize().expect("synchronize");
    watchdog_drained(&group, &what);

    let capture = group
        .begin_capture(stream)
        .unwrap_or_else(|e| panic!("{what}: begin: {e}"));
    assert_eq!(capture.group().stream_mode(), StreamMode::Caller);
    let (a, gathered, captured) = sequence(capture.group(), a, gathered, stream, &what);
    assert_eq!(captured, vec![true; ALL_REDUCES + 1], "{what}: captured");
    assert_eq!(capture.operations(), ALL_REDUCES + 1, "{what}");
    // Nothing captured is tracked, so nothing is polled or timed out:
    // a poll of a captured event would fail the group (and invalidate the
    // capture) within a watchdog interval.
    assert_eq!(
        group.pending_operations(),
        0,
        "{what}: captured works tracked"
    );
    std::thread::sleep(Duration::from_millis(100));
    assert!(group.failure().is_none(), "{what}: {:?}", group.failure());
    let graph = capture
        .end((a, gathered))
        .unwrap_or_else(|e| panic!("{what}: end: {}", e.error));
    assert_eq!(graph.operations(), ALL_REDUCES + 1, "{what}");
    assert!(!graph.is_empty(), "{what}: the all_gather copies at least");

    for replay in 0..REPLAYS {
        graph
            .replay()
            .unwrap_or_else(|e| panic!("{what}: replay {replay}: {e}"));
    }
    ctx.stream.synchronize().expect("synchronize");
    watchdog_drained(&group, &what);
    let replays = group
        .flight_record()
        .ops
        .iter()
        .filter(|op| op.op == "graph_replay" && op.state == OpState::Completed)
        .count();
    assert_eq!(
        replays, REPLAYS,
        "{what}: replays the flight recorder saw end"
    );
    assert!(group.failure().is_none(), "{what}: {:?}", group.failure());

    let (a, gathered) = graph
        .into_buffers()
        .unwrap_or_else(|e| panic!("{what}: into_buffers: {e}"));
    let mut expected = Vec::new();
    for _ in 0..REPLAYS {
        expected = model.sequence();
    }
    check_sequence(
        stream,
        (&a, &model.ranks[rank]),
        (&gathered, &expected),
        &format!("{what}: replayed"),
    );
    destroy(&group);
    ctx.meet(&format!("graphs-{mode:?}-done"));
}

named_tests! {
    ranks_capture_replays_blocking: on_mode(capture_and_replay, CommMode::Blocking);
    ranks_capture_replays_nonblocking: on_mode(capture_and_replay, CommMode::Nonblocking);
}

/// The reason of a refused operation, with its buffers handed back.
#[track_caller]
fn reason_of<B: nccl_group::OpBuffers<Ownership = nccl_group::Owned>>(
    result: nccl_group::OpResult<B>,
    what: &str,
) -> (Uncapturable, B) {
    let error = refused(result, what);
    match error.error {
        GroupError::Capture { reason, .. } => (reason, error.buffers),
        other => panic!("{what}: expected a capture refusal, got {other}"),
    }
}

#[test]
fn ranks_capture_refusals() {
    let Some(ctx) = RankContext::new() else {
        return;
    };
    let (rank, world, stream) = (ctx.rank(), ctx.world(), &ctx.stream);
    let what = format!("{}: capture refusals", ctx.label());
    let store = tcp_store(&ctx);
    let group = join(&ctx, "graph-refusals", &store, CommMode::Blocking);
    // Joined, but no operation yet: it has no communicator.
    let idle = join(&ctx, "graph-refusals-idle", &store, CommMode::Blocking);
    let mut model = Model::new(67, world);
    let a = upload(stream, &model.ranks[rank]);
    let a = done(group.all_reduce(a, ReduceOp::Sum, stream), &what);
    model.all_reduce();
    let fresh = upload(stream, &model.ranks[rank]);

    let capture = group
        .begin_capture(stream)
        .unwrap_or_else(|e| panic!("{what}: begin: {e}"));
    match group.begin_capture(stream) {
        Err(GroupError::Capture {
            reason: Uncapturable::AlreadyCapturing,
            ..
        }) => {}
        other => panic!("{what}: a second capture: {other:?}"),
    }
    let separate = group.with_stream_mode(StreamMode::Separate);
    let (reason, a) = reason_of(separate.all_reduce(a, ReduceOp::Sum, stream), &what);
    assert_eq!(reason, Uncapturable::SeparateStream, "{what}");
    match capture.group().barrier(stream) {
        Err(GroupError::Capture {
            reason: Uncapturable::Barrier,
            ..
        }) => {}
        other => panic!("{what}: a barrier: {other:?}"),
    }
    let (reason, parts) = reason_of(
        capture
            .group()
            .multi()
            .all_reduce(vec![a], ReduceOp::Sum, std::slice::from_ref(stream)),
        &what,
    );
    assert_eq!(reason, Uncapturable::SeveralDevices, "{what}");
    let a = parts.into_iter().next().expect("the tensor back");
    let (reason, fresh) = reason_of(
        capture.group().all_reduce(fresh, ReduceOp::Sum, stream),
        &what,
    );
    assert_eq!(reason, Uncapturable::UnsettledBuffer, "{what}");
    let idle_caller = idle.with_stream_mode(StreamMode::Caller);
    let (reason, fresh) = reason_of(idle_caller.all_reduce(fresh, ReduceOp::Sum, stream), &what);
    assert_eq!(
        reason,
        Uncapturable::NoCommunicator {
            device: ctx.device.ordinal()
        },
        "{what}"
    );
    // None of that touched the capture: what follows is captured, and the
    // graph replays it.
    let work = enqueued(capture.group().all_reduce(a, ReduceOp::Sum, stream), &what);
    assert!(work.is_captured(), "{what}");
    let a = work.wait().expect("a captured work waits at once");
    let graph = capture
        .end(a)
        .unwrap_or_else(|e| panic!("{what}: end: {}", e.error));
    assert_eq!(graph.operations(), 1, "{what}");

    // A replay on a stream being captured is refused before it launches.
    let other = group
        .begin_capture(stream)
        .expect("a capture to replay into");
    match graph.replay() {
        Err(GroupError::Capture {
            reason: Uncapturable::ReplayWhileCapturing,
            ..
        }) => {}
        other => panic!("{what}: a replay into a capture: {other:?}"),
    }
    drop(other);
    graph
        .replay()
        .unwrap_or_else(|e| panic!("{what}: replay: {e}"));
    model.all_reduce();
    let a = graph
        .into_buffers()
        .unwrap_or_else(|e| panic!("{what}: into_buffers: {e}"));
    assert_same(
        &download(stream, &a),
        &model.ranks[rank],
        &format!("{what}: replayed"),
    );

    // A capture begun outside the group (as torch.cuda.graph begins its
    // own): the group's operations on that stream are captured all the
    // same. Settle the tensor first (the download read it).
    let a = done(group.all_reduce(a, ReduceOp::Sum, stream), &what);
    model.all_reduce();
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .expect("begin an outside capture");
    let work = enqueued(group.all_reduce(a, ReduceOp::Sum, stream), &what);
    assert!(work.is_captured(), "{what}: outside capture");
    let a = work.wait().expect("a captured work waits at once");
    let outside = stream
        .end_capture(CUgraphInstantiate_flags(0))
        .expect("end the outside capture");
    for _ in 0..2 {
        if let Some(graph) = &outside {
            graph.launch().expect("launch the outside graph");
        }
        model.all_reduce();
    }
    assert_same(
        &download(stream, &a),
        &model.ranks[rank],
        &format!("{what}: outside capture"),
    );
    drop(outside);
    assert_same(
        &download(stream, &fresh),
        &model_start(67, world, rank),
        &format!("{what}: refused tensor"),
    );
    assert!(group.failure().is_none(), "{what}: {:?}", group.failure());
    destroy(&idle);
    destroy(&group);
    ctx.meet("graph-refusals-done");
}

/// Rank `rank`'s first values of the model of `seed`, after one all_reduce.
fn model_start(seed: u64, world: usize, rank: usize) -> Vec<i64> {
    let mut model = Model::new(seed, world);
    model.all_reduce();
    model.ranks.swap_remove(rank)
}
