//! Suspending a group's communicators and resuming them, at world size N:
//! a `ranks_*` test that run.sh runs on its own (world size 1) and under
//! `nccl-launch -n 2` and `-n 4` (simulated hosts, which may share a GPU).
//!
//! The group makes its communicator (one all_reduce), captures an
//! all_reduce into a CUDA graph, and suspends: the GPU's free memory
//! (`cuMemGetInfo`) grows by at least 90 % of the dynamic bytes that
//! `ncclCommMemStats` counted for the communicators on that GPU (every
//! rank's on it: ranks on one GPU suspend together), operations and
//! replays are refused while suspended, and after the resume an
//! all_reduce and a replay of the graph captured before the suspend are
//! right in every element. The group's metrics count what ran. Where the
//! loaded NCCL has no suspend (before 2.29.7), the group's refusal names
//! the release, and the rest is skipped.

use std::sync::{Arc, OnceLock};

use metrics_util::MetricKind;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use nccl_core::cudarc::driver::result::mem_get_info;
use nccl_core::{Capabilities, Capability, CudaStream, ReduceOp};
use nccl_group::{CommMode, Diagnostics, ErrorKind, GroupError, Lifecycle, ProcessGroup, metrics};
use nccl_tensor::Tensor;
use nccl_test_support::group::ranks::{RankContext, STORE_TIMEOUT, StoreAt, join, tcp_store};
use nccl_test_support::group::{destroy, done, enqueued, watchdog_drained};
use nccl_test_support::tensor::world::all_values;
use nccl_test_support::tensor::{assert_same, download, upload};

/// Elements per rank.
const LEN: usize = 4099;
/// The group's name, which labels its metrics.
const NAME: &str = "suspend-resume";

/// The process's metrics recorder, installed once.
fn snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("no other metrics recorder in this test process");
        snapshotter
    })
}

/// What the host expects: every rank's tensor, summed by each all_reduce.
struct Model {
    ranks: Vec<Vec<i64>>,
}

impl Model {
    fn new(seed: u64, world: usize) -> Self {
        Self {
            ranks: all_values::<i64>(seed, world, LEN),
        }
    }

    fn all_reduce(&mut self) {
        let sum: Vec<i64> = (0..LEN)
            .map(|i| self.ranks.iter().map(|rank| rank[i]).sum())
            .collect();
        self.ranks.iter_mut().for_each(|rank| rank.clone_from(&sum));
    }
}

/// The GPU's free bytes now (the caller's context bound to this thread).
fn free_bytes(stream: &Arc<CudaStream>, what: &str) -> u64 {
    stream
        .context()
        .bind_to_thread()
        .unwrap_or_else(|e| panic!("{what}: binding the context: {e}"));
    let (free, _total) = mem_get_info().unwrap_or_else(|e| panic!("{what}: cuMemGetInfo: {e}"));
    free as u64
}

/// `(dynamic bytes, suspended)` of the group's communicators on `device`.
fn dynamic_bytes(group: &ProcessGroup, device: usize, what: &str) -> (u64, bool) {
    let stats = group
        .mem_stats()
        .unwrap_or_else(|e| panic!("{what}: mem_stats: {e}"));
    let on_device = stats
        .iter()
        .find(|stats| stats.device == device)
        .unwrap_or_else(|| panic!("{what}: no communicator on device {device}: {stats:?}"));
    assert_eq!(on_device.communicators, 1, "{what}: {on_device:?}");
    (on_device.dynamic_bytes(), on_device.stats.suspended)
}

/// This rank's GPU as every process names it: its UUID, in hex (device
/// ordinals depend on each process's `CUDA_VISIBLE_DEVICES`).
fn gpu_uuid(stream: &Arc<CudaStream>, what: &str) -> String {
    let uuid = stream
        .context()
        .uuid()
        .unwrap_or_else(|e| panic!("{what}: the GPU's UUID: {e}"));
    uuid.bytes
        .iter()
        .map(|&byte| format!("{:02x}", byte as u8))
        .collect()
}

/// The dynamic bytes of every rank's communicators on this rank's GPU,
/// exchanged through the store: ranks that share a GPU free it together.
fn dynamic_bytes_on_gpu(ctx: &RankContext, store: &StoreAt, mine: u64) -> u64 {
    let device = gpu_uuid(&ctx.stream, &ctx.label());
    let key = |rank: usize| format!("suspend_resume_dynamic_{rank}");
    store
        .store
        .set(&key(ctx.rank()), format!("{device} {mine}").as_bytes())
        .unwrap_or_else(|e| panic!("{}: publishing the dynamic bytes: {e}", ctx.label()));
    (0..ctx.world())
        .map(|rank| {
            let value = store
                .store
                .get(&key(rank), STORE_TIMEOUT)
                .unwrap_or_else(|e| panic!("{}: rank {rank}'s dynamic bytes: {e}", ctx.label()));
            let text = String::from_utf8(value).expect("written as text");
            let (their_device, bytes) = text.split_once(' ').expect("`device bytes`");
            let bytes: u64 = bytes.parse().expect("a byte count");
            if their_device == device { bytes } else { 0 }
        })
        .sum()
}

#[track_caller]
fn assert_refused_as_suspended(error: &GroupError, what: &str) {
    assert_eq!(error.kind(), ErrorKind::Suspended, "{what}: {error}");
    assert!(
        error.to_string().contains("call resume on every rank"),
        "{what}: {error}"
    );
}

/// One metric as the recorder holds it: kind, name, labels, value.
type Recorded = (MetricKind, String, Vec<(String, String)>, DebugValue);

/// Every metric the process recorded.
fn metrics_snapshot() -> Vec<Recorded> {
    snapshotter()
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let labels = key
                .key()
                .labels()
                .map(|label| (label.key().to_string(), label.value().to_string()))
                .collect();
            (key.kind(), key.key().name().to_string(), labels, value)
        })
        .collect()
}

/// The value of this group's metric `name` of `kind` for `op`, if recorded.
fn recorded<'a>(
    snapshot: &'a [Recorded],
    kind: MetricKind,
    name: &str,
    op: &str,
) -> Option<&'a DebugValue> {
    let group = ("group".to_string(), NAME.to_string());
    let op = ("op".to_string(), op.to_string());
    snapshot
        .iter()
        .find(|(k, key, labels, _)| {
            *k == kind && key == name && labels.contains(&group) && labels.contains(&op)
        })
        .map(|(_, _, _, value)| value)
}

/// A counter of this group's metrics for `op`, 0 when never recorded.
fn counter(snapshot: &[Recorded], name: &str, op: &str) -> u64 {
    match recorded(snapshot, MetricKind::Counter, name, op) {
        Some(DebugValue::Counter(count)) => *count,
        other => {
            assert!(other.is_none(), "{name} {op}: not a counter: {other:?}");
            0
        }
    }
}

/// How many latencies this group recorded for `op`.
fn latencies(snapshot: &[Recorded], op: &str) -> usize {
    match recorded(
        snapshot,
        MetricKind::Histogram,
        metrics::OPERATION_SECONDS,
        op,
    ) {
        Some(DebugValue::Histogram(values)) => values.len(),
        other => {
            assert!(other.is_none(), "{op}: not a histogram: {other:?}");
            0
        }
    }
}

#[test]
fn ranks_suspend_resume_frees_memory_and_replays_graphs() {
    let Some(ctx) = RankContext::new() else {
        return;
    };
    let (rank, world, stream) = (ctx.rank(), ctx.world(), &ctx.stream);
    let what = format!("{}: suspend/resume", ctx.label());
    snapshotter();
    let store = tcp_store(&ctx);
    let group = join(&ctx, NAME, &store, CommMode::Blocking);
    let mut model = Model::new(71, world);
    let mut graph_model = Model::new(73, world);

    // The communicator, made by the first all_reduce.
    let a = upload(stream, &model.ranks[rank]);
    let a = done(group.all_reduce(a, ReduceOp::Sum, stream), &what);
    model.all_reduce();
    assert_same(
        &download(stream, &a),
        &model.ranks[rank],
        &format!("{what}: first all_reduce"),
    );

    let capabilities = Capabilities::loaded().expect("NCCL loaded: the all_reduce ran");
    if !capabilities.has(Capability::SuspendResume) || !capabilities.has(Capability::MemStats) {
        let error = group.suspend().expect_err("no suspend before NCCL 2.29.7");
        assert_eq!(error.kind(), ErrorKind::Unsupported, "{what}: {error}");
        assert!(error.to_string().contains("2.29.7"), "{what}: {error}");
        let error = group
            .mem_stats()
            .expect_err("no memory statistics before NCCL 2.29.7");
        assert!(error.to_string().contains("2.29.7"), "{what}: {error}");
        println!(
            "SKIP: {what}: NCCL {} has no ncclCommSuspend/ncclCommMemStats (2.29.7); the group refused with: {error}",
            capabilities.version()
        );
        destroy(&group);
        return;
    }

    // A graph of one all_reduce, captured before the suspend: warmed up
    // twice, as ranks_graphs does (the tensor settles on the stream),
    // then captured.
    let mut g = upload(stream, &graph_model.ranks[rank]);
    for _ in 0..2 {
        g = done(group.all_reduce(g, ReduceOp::Sum, stream), &what);
        graph_model.all_reduce();
    }
    stream.synchronize().expect("synchronize");
    watchdog_drained(&group, &what);
    let capture = group
        .begin_capture(stream)
        .unwrap_or_else(|e| panic!("{what}: begin_capture: {e}"));
    let work = enqueued(capture.group().all_reduce(g, ReduceOp::Sum, stream), &what);
    assert!(work.is_captured(), "{what}");
    let g = work
        .wait()
        .unwrap_or_else(|e| panic!("{what}: captured wait: {e}"));
    let graph = capture
        .end(g)
        .unwrap_or_else(|e| panic!("{what}: end: {}", e.error));

    stream.synchronize().expect("synchronize");
    let (dynamic_before, suspended) = dynamic_bytes(&group, ctx.device.ordinal(), &what);
    assert!(!suspended, "{what}: suspended before the suspend");
    assert!(
        dynamic_before > 0,
        "{what}: ncclCommMemStats counts no dynamic bytes (is NCCL_MEM_MANAGER_DISABLE set?)"
    );
    let dynamic_on_gpu = dynamic_bytes_on_gpu(&ctx, &store, dynamic_before);
    // Every rank reads the GPU's free memory before any suspends, and
    // after all have.
    ctx.meet("suspend-resume-before");
    let free_before = free_bytes(stream, &what);
    ctx.meet("suspend-resume-read-before");
    group
        .suspend()
        .unwrap_or_else(|e| panic!("{what}: suspend: {e}"));
    ctx.meet("suspend-resume-suspended");
    let free_after = free_bytes(stream, &what);
    ctx.meet("suspend-resume-read-after");
    let (dynamic_after, suspended) = dynamic_bytes(&group, ctx.device.ordinal(), &what);
    assert!(suspended, "{what}: ncclCommMemStats says not suspended");
    let freed = free_after.saturating_sub(free_before);
    assert!(
        freed as f64 >= 0.9 * dynamic_on_gpu as f64,
        "{what}: the suspend freed {freed} bytes of the GPU, less than 90 % of the {dynamic_on_gpu} dynamic \
         bytes of the communicators on it (free {free_before} -> {free_after})"
    );

    // Refused while suspended, nothing touched.
    let b = upload(stream, &model.ranks[rank]);
    let refused = group
        .all_reduce(b, ReduceOp::Sum, stream)
        .expect_err("an all_reduce while suspended");
    assert_refused_as_suspended(&refused.error, &format!("{what}: all_reduce"));
    let b = refused.buffers;
    assert_refused_as_suspended(
        &graph.replay().expect_err("a replay while suspended"),
        &format!("{what}: replay"),
    );
    assert_refused_as_suspended(
        &group.suspend().expect_err("a second suspend"),
        &format!("{what}: suspend again"),
    );
    assert_refused_as_suspended(
        &group.destroy().expect_err("destroy while suspended"),
        &format!("{what}: destroy"),
    );

    group
        .resume()
        .unwrap_or_else(|e| panic!("{what}: resume: {e}"));
    let b = done(group.all_reduce(b, ReduceOp::Sum, stream), &what);
    model.all_reduce();
    assert_same(
        &download(stream, &b),
        &model.ranks[rank],
        &format!("{what}: all_reduce after the resume"),
    );
    graph
        .replay()
        .unwrap_or_else(|e| panic!("{what}: replay after the resume: {e}"));
    graph_model.all_reduce();
    stream.synchronize().expect("synchronize");
    watchdog_drained(&group, &what);
    let g: Tensor<i64> = graph
        .into_buffers()
        .unwrap_or_else(|e| panic!("{what}: into_buffers: {e}"));
    assert_same(
        &download(stream, &g),
        &graph_model.ranks[rank],
        &format!("{what}: the graph captured before the suspend, replayed after the resume"),
    );
    println!(
        "suspend_resume ws={world} dynamic_before={dynamic_before} dynamic_after={dynamic_after} \
         free_before={free_before} free_after={free_after} graph_ok=true freed={freed} \
         dynamic_on_gpu={dynamic_on_gpu} rank={rank}"
    );

    // Four all_reduces ran outside the capture (the first, the graph's two
    // warm-ups, the one after the resume; the captured one is the
    // graph's), and one replay; none failed.
    let all_reduces = 4;
    let snapshot = metrics_snapshot();
    assert_eq!(
        counter(&snapshot, metrics::OPERATIONS, "all_reduce"),
        all_reduces,
        "{what}: {snapshot:?}"
    );
    assert_eq!(
        counter(&snapshot, metrics::OPERATION_BYTES, "all_reduce"),
        all_reduces * (LEN * size_of::<i64>()) as u64,
        "{what}"
    );
    assert_eq!(
        counter(&snapshot, metrics::OPERATIONS, "graph_replay"),
        1,
        "{what}"
    );
    assert_eq!(
        latencies(&snapshot, "all_reduce"),
        all_reduces as usize,
        "{what}"
    );
    assert_eq!(latencies(&snapshot, "graph_replay"), 1, "{what}");
    assert_eq!(
        counter(&snapshot, metrics::OPERATION_FAILURES, "all_reduce"),
        0,
        "{what}"
    );
    destroy(&group);
    ctx.meet("suspend-resume-done");
}
