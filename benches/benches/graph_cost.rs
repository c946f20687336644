//! What a replayed CUDA graph of all_reduces costs per operation, through
//! the process group against the tensor layer, at world size 1 on one GPU
//! (the issue's target: the group's replay within 0.05 us per operation of
//! the tensor layer's):
//!
//! * `graph_replay/tensor/N`: nccl-tensor's out-of-place all_reduce of 2
//!   `f32` (8 bytes: the cost of the replay, not bandwidth), N of them
//!   captured with cudarc on one stream, the graph launched once per
//!   iteration (`cuGraphLaunch`).
//! * `graph_replay/group/N`: the same N all_reduces issued through a
//!   `ProcessGroup` inside `begin_capture`, and `GroupGraph::replay` per
//!   iteration, which adds the group's liveness check, a capture check
//!   and the watchdog's end event and record per replay (not per
//!   operation).
//!
//! Each sample ends with a stream synchronisation, so the time is the
//! GPU's as well as the host's: the replays are queued back to back.
//! Criterion reports per replay (throughput: operations per second);
//! after it, fixed rounds of both print the median per operation and the
//! difference against the target. Needs a GPU (`SKIP:` without).

use nccl_group::Lifecycle;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaGraph, CudaStream};
use nccl_core::{Device, Op, ReduceOp, UniqueId};
use nccl_group::{GroupGraph, GroupOptions, ProcessGroup};
use nccl_tensor::{Communicator, Tensor};
use nccl_test_support::group::world_of_one;

/// Elements of each all_reduce.
const ELEMENTS: usize = 2;
/// Operations per graph.
const OPERATIONS: [usize; 2] = [1, 20];
/// The group's replay may cost this much more per operation than the
/// tensor layer's (microseconds).
const TARGET_US: f64 = 0.05;
/// Rounds of the fixed comparison, and replays per round.
const ROUNDS: usize = 15;
const REPLAYS: u64 = 500;

/// `(output, input)` pairs, one per all_reduce.
type Pairs = Vec<(Tensor<f32>, Tensor<f32>)>;

fn pairs(n: usize, stream: &Arc<CudaStream>) -> Pairs {
    let tensor = || Tensor::from_host(stream, &[1.0f32; ELEMENTS], &[ELEMENTS]).expect("tensor");
    (0..n).map(|_| (tensor(), tensor())).collect()
}

/// Something whose replays are timed.
trait Replay {
    fn replay(&self);
}

impl Replay for CudaGraph {
    fn replay(&self) {
        self.launch().expect("cuGraphLaunch");
    }
}

impl Replay for GroupGraph<Pairs> {
    fn replay(&self) {
        GroupGraph::replay(self).expect("GroupGraph::replay");
    }
}

/// `n` all_reduces of nccl-tensor captured on `stream` (after a warm-up
/// that leaves the tensors settled on it), with the tensors they use.
fn tensor_graph(comm: &Communicator, n: usize, stream: &Arc<CudaStream>) -> (CudaGraph, Pairs) {
    let mut pairs = pairs(n, stream);
    let issue = |pairs: &mut Pairs| {
        for (output, input) in pairs.iter_mut() {
            let _ = comm
                .all_reduce_into(&*input, output, ReduceOp::Sum, stream)
                .expect("all_reduce_into");
        }
    };
    issue(&mut pairs);
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .expect("begin the capture");
    issue(&mut pairs);
    let graph = stream
        .end_capture(CUgraphInstantiate_flags(0))
        .expect("end the capture")
        .expect("an out-of-place all_reduce captures a copy at world size 1");
    (graph, pairs)
}

/// The same `n` all_reduces through `group`, captured by `begin_capture`.
fn group_graph(group: &ProcessGroup, n: usize, stream: &Arc<CudaStream>) -> GroupGraph<Pairs> {
    let issue = |group: &ProcessGroup, pairs: Pairs| -> Pairs {
        pairs
            .into_iter()
            .map(|pair| {
                group
                    .issue(Op::AllReduce(ReduceOp::Sum.into()), pair, stream)
                    .unwrap_or_else(|e| panic!("all_reduce: {}", e.error))
                    .wait()
                    .expect("Work::wait")
            })
            .collect()
    };
    let pairs = issue(group, pairs(n, stream));
    let capture = group.begin_capture(stream).expect("begin the capture");
    let pairs = issue(capture.group(), pairs);
    capture
        .end(pairs)
        .unwrap_or_else(|e| panic!("end the capture: {}", e.error))
}

/// The time of `replays` replays of `graph`, until the stream is done.
fn time_replays(graph: &impl Replay, replays: u64, stream: &CudaStream) -> Duration {
    let start = Instant::now();
    for _ in 0..replays {
        graph.replay();
    }
    stream.synchronize().expect("synchronize");
    start.elapsed()
}

/// Median microseconds per operation over fixed rounds of `graph`.
fn per_operation(graph: &impl Replay, n: usize, stream: &CudaStream) -> f64 {
    let times: Vec<f64> = (0..ROUNDS)
        .map(|_| {
            let took = time_replays(graph, REPLAYS, stream);
            nccl_perf::per_call_us(took.as_secs_f64(), REPLAYS * n as u64)
        })
        .collect();
    nccl_perf::median(&times).unwrap_or(f64::NAN)
}

fn main() {
    if !(nccl_core::cuda_driver_available() && Device::count().unwrap_or(0) > 0) {
        println!("SKIP: graph_replay needs 1 GPU(s), found 0");
        return;
    }
    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .configure_from_args();
    let device = Device::new(0).expect("device 0");
    let stream = device.new_stream().expect("stream");
    let comm = Communicator::new(device.clone(), 1, UniqueId::new().expect("id"), 0)
        .expect("a communicator of one");
    let group = world_of_one("graph-cost", GroupOptions::default().without_dump_dir());
    let mut summary = Vec::new();
    for n in OPERATIONS {
        let (tensor, tensor_pairs) = tensor_graph(&comm, n, &stream);
        let grouped = group_graph(&group, n, &stream);
        let mut bench = criterion.benchmark_group("graph_replay");
        bench.throughput(Throughput::Elements(n as u64));
        bench.bench_function(format!("tensor/{n}"), |b| {
            b.iter_custom(|iters| time_replays(&tensor, iters, &stream))
        });
        bench.bench_function(format!("group/{n}"), |b| {
            b.iter_custom(|iters| time_replays(&grouped, iters, &stream))
        });
        bench.finish();
        let tensor_us = per_operation(&tensor, n, &stream);
        let group_us = per_operation(&grouped, n, &stream);
        summary.push((n, tensor_us, group_us));
        drop(grouped.into_buffers().expect("the group is live"));
        drop((tensor, tensor_pairs));
    }
    criterion.final_summary();
    for (n, tensor_us, group_us) in summary {
        let over = group_us - tensor_us;
        println!(
            "graph_replay/{n}: tensor {tensor_us:.3} us, group {group_us:.3} us per operation \
             (median of {ROUNDS} rounds of {REPLAYS} replays); group - tensor = {over:+.3} us, \
             target <= {TARGET_US} us: {}",
            if over <= TARGET_US { "met" } else { "missed" }
        );
    }
    group.destroy().expect("destroy the group");
}
