//! What one call costs, per layer (raw nccl-sys pointers, nccl-core,
//! nccl-tensor's safe API, nccl-group's `ProcessGroup`), measured side by
//! side in one run:
//!
//! * `check_cost/<op>`: the tensor layer's argument checks alone
//!   (`nccl_tensor::Plan::new` of each operation on `BufferDesc`s, world
//!   size 8; the names are the tensor API's methods). Pure host code: it
//!   runs on machines without a GPU too.
//! * `host_cost/<op>_in_place_8B`: one call of each op (all_reduce,
//!   broadcast, reduce, all_gather, reduce_scatter, all_to_all, sendrecv =
//!   send + recv in a group) at world size 1, in place, 8 bytes (2 f32),
//!   one function per layer. In place at world size 1, NCCL enqueues no GPU
//!   work: the time is the host cost of the call. The tensor layer has no
//!   in-place all_gather, reduce_scatter or all_to_all (its safe API refuses
//!   an input inside the output), so those three also get
//!   `host_cost/<op>_out_of_place_8B` with every layer. The group layer is
//!   a `ProcessGroup` of one process over an `InProcessStore`; its call is
//!   the operation + `Work::wait` (both event syncs, the cache lookup and
//!   the communicator lock included), on tensors it owns; it has only the
//!   in-place all_reduce, broadcast and reduce and the out-of-place
//!   all_gather, reduce_scatter and all_to_all (no sendrecv), so it is in
//!   six of those groups, and its first call, in the warm-up of the
//!   allocation check, creates its communicator. `group-caller` is the
//!   same with `StreamMode::Caller`: the operation runs on the caller's
//!   stream, with no event handoff to and from the NCCL stream. The launches are
//!   timed in chunks of at most 256 with a stream synchronisation between
//!   chunks outside the measured time, so the launch queue never fills and
//!   the time stays the host's even when a call enqueues a copy.
//! * Heap allocations in steady state: after a warm-up, 1000 calls of each
//!   op and layer under a counting global allocator; the count per 1000
//!   calls is printed and must be 0 (the run fails otherwise), except the
//!   groups' one per call at most (the operation's record, shared by its
//!   `Work`, the watchdog and the tensors it hands back, which is made in a
//!   finished operation's allocation where the group kept one). Rust's heap
//!   only, and only the calling thread's: NCCL's and the driver's own
//!   `malloc`s are not seen, nor is any other thread.
//! * `host_cost_buffers/all_reduce_in_place_8B`: nccl-tensor's in-place
//!   all_reduce on a `Tensor` (`tensor`, whose stream tracking is deferred
//!   while it stays on one stream) and on a cudarc `CudaSlice`
//!   (`cudarc-slice`, where cudarc waits for the buffer's events and
//!   records its write event on every call), next to raw.
//! * `host_cost_group_loop/all_reduce_in_place_8B`: the group's in-place
//!   all_reduce + `Work::wait` in a plain loop on a tensor of its own, as
//!   a user writes it (`separate` and `caller` stream modes), next to the
//!   `GroupLayer` launcher the other rows and nccl-perf use.
//! * `host_cost_untracked/all_reduce_in_place_8B`: raw, tensor and both
//!   group layers again on a context whose cudarc stream tracking is off,
//!   to separate the layers' own cost from the event wait and record
//!   cudarc adds per buffer.
//! * `host_cost_nonblocking/{all_reduce,sendrecv}_in_place_8B`: nccl-core
//!   on a blocking and on a nonblocking communicator, each call followed
//!   by `wait_ready`, to show what a nonblocking communicator (the group
//!   layer's kind) costs per call where NCCL does not take its world-size-1
//!   shortcut.
//! * `host_cost_tracing/all_reduce_in_place_8B/<state>`: what the
//!   `tracing` feature costs, as each layer's ratio to raw in one run
//!   (`feature_cost.rs`). `<state>` is `tracing-off` in the usual build and
//!   `tracing-on-no-subscriber` in one built with `--features tracing`;
//!   the ratio lines are printed as `host_cost_tracing/...: <layer> <us>
//!   us/call, <ratio> x raw`.
//! * `host_cost_nvtx/all_reduce_in_place_8B/<state>`: the same for the
//!   `nvtx` feature (NVTX ranges with no profiler attached): `nvtx-off`, or
//!   `nvtx-on-no-profiler` built with `--features nvtx`.
//! * `host_cost_gpu_timing/all_reduce_in_place_8B`: the group on the
//!   caller's stream with `GroupOptions::gpu_timing` off (`group-caller`)
//!   and on (`group-caller-timed`), next to raw, in one run.
//! * `copy_bandwidth/all_reduce_out_of_place_256MiB`: 256 MiB out of place
//!   (a device copy at world size 1) per layer but the group (whose
//!   all_reduce is in place only), with `Throughput::Bytes`, including the
//!   final synchronisation.
//!
//! Without a GPU the GPU part prints `SKIP: needs 1 GPU(s), found 0` and
//! succeeds, unless `NCCL_TEST_REQUIRE_GPU=1` is set, when it fails instead;
//! the `check_cost` part and its allocation check run either way. Each
//! bench measures for about a second: the whole run takes about a minute
//! and a half on an H200.

mod feature_cost;
mod variants;

use nccl_group::Lifecycle;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use cudarc::driver::CudaStream;
use feature_cost::{feature_cost, gpu_timing_cost};
use nccl_core::{DataType, Device, ReduceOp, Reduction, UniqueId};
use nccl_group::{GroupOptions, InProcessStore, ProcessGroup, StreamMode};
use nccl_perf::{
    AT_START, BenchError, Call, Collective, CoreLayer, DeviceBuffers, GroupLayer, Launch, Layer,
    LayerKind, Mode, RawLayer, Rotation, TensorLayer,
};
use nccl_sys::Version;
use nccl_tensor::checks::CommInfo;
use nccl_tensor::{BufferDesc, Layout, Op, Plan};
use nccl_test_support::alloc::{CountingAllocator, counted};
use variants::{buffer_cost, group_loop_cost, nonblocking_cost, untracked_cost};

const GPUS_NEEDED: usize = 1;
/// Launches timed between two synchronisations in the host-cost benches.
const CHUNK: u64 = 256;
/// Calls counted by the allocation check.
const COUNTED_CALLS: u32 = 1000;
/// Bytes of the copy-bandwidth bench.
const COPY_BYTES: usize = 256 << 20;

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// Steady-state heap allocations that should not be there.
#[derive(Default)]
struct AllocationReport {
    lines: Vec<String>,
    violations: Vec<String>,
}

impl AllocationReport {
    fn record(&mut self, what: String, count: u64, allowed: u64) {
        let line =
            format!("allocations: {what}: {count} per {COUNTED_CALLS} calls (allowed {allowed})");
        println!("{line}");
        if count > allowed {
            self.violations.push(line.clone());
        }
        self.lines.push(line);
    }
}

fn main() {
    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(30)
        .nresamples(20_000)
        .configure_from_args();
    let mut report = AllocationReport::default();
    // The counter must see an allocation, or every 0 below means nothing.
    let (boxed, seen) = counted(|| black_box(Box::new(1u64)));
    drop(boxed);
    if seen == 0 {
        eprintln!("host_cost: the counting allocator saw no allocation of a Box");
        std::process::exit(1);
    }
    check_cost(&mut criterion, &mut report);

    let found = visible_gpus();
    let gpu_outcome = if found < GPUS_NEEDED {
        println!("SKIP: needs {GPUS_NEEDED} GPU(s), found {found}");
        if std::env::var("NCCL_TEST_REQUIRE_GPU").is_ok_and(|value| value == "1") {
            eprintln!("host_cost: NCCL_TEST_REQUIRE_GPU=1 is set, so a missing GPU is a failure");
            std::process::exit(1);
        }
        Ok(())
    } else {
        gpu_benches(&mut criterion, &mut report)
    };
    criterion.final_summary();
    if let Err(error) = gpu_outcome {
        eprintln!("host_cost: error: {}", error.one_line());
        std::process::exit(1);
    }
    println!(
        "allocation check: {} case(s), {} with steady-state heap allocations",
        report.lines.len(),
        report.violations.len()
    );
    if !report.violations.is_empty() {
        for line in &report.violations {
            eprintln!("host_cost: FAILED: {line} (steady-state ops must not allocate)");
        }
        std::process::exit(1);
    }
}

/// Heap allocations allowed per [`COUNTED_CALLS`] calls of a layer: none,
/// except the group's one per operation at most, the record its `Work`
/// shares with the watchdog (kept for a later operation, or freed, when both
/// are done with it).
fn allowed_allocations(layer: LayerKind) -> u64 {
    if layer.stream_mode().is_some() {
        COUNTED_CALLS as u64
    } else {
        0
    }
}

/// The number of visible GPUs, 0 without a CUDA driver.
fn visible_gpus() -> usize {
    if !nccl_core::cuda_driver_available() {
        return 0;
    }
    Device::count().unwrap_or(0)
}

/// One operation the tensor layer plans.
struct CheckCase<'a> {
    /// The bench's name in the `check_cost` group.
    name: &'static str,
    /// The operation.
    op: Op<'static>,
    /// The buffers it is given.
    layout: Layout<'a>,
}

impl<'a> CheckCase<'a> {
    fn new(name: &'static str, op: Op<'static>, layout: Layout<'a>) -> Self {
        Self { name, op, layout }
    }
}

/// The tensor layer's argument checks (`Plan::new` of each operation,
/// with the stream on the communicator's device), without a GPU.
fn check_cost(criterion: &mut Criterion, report: &mut AllocationReport) {
    let info = CommInfo {
        rank: 3,
        world_size: 8,
        device: 0,
        nccl_version: Version::new(2, 28, 3),
        compute_capability: (9, 0),
        in_group: false,
    };
    let one = BufferDesc::contiguous(DataType::Float32, 1024, 0);
    let all = BufferDesc::contiguous(DataType::Float32, 8 * 1024, 0);
    let sum = Reduction::Builtin(ReduceOp::Sum);
    let cases: [CheckCase<'_>; 9] = [
        CheckCase::new("all_reduce", Op::AllReduce(sum), Layout::InPlace(one)),
        CheckCase::new(
            "all_reduce_into",
            Op::AllReduce(sum),
            Layout::OutOfPlace {
                input: one,
                output: one,
            },
        ),
        CheckCase::new("broadcast", Op::Broadcast { root: 0 }, Layout::InPlace(one)),
        CheckCase::new(
            "reduce",
            Op::Reduce { op: sum, root: 0 },
            Layout::InPlace(one),
        ),
        CheckCase::new(
            "all_gather_into_tensor",
            Op::AllGather,
            Layout::OutOfPlace {
                input: one,
                output: all,
            },
        ),
        CheckCase::new(
            "reduce_scatter_tensor",
            Op::ReduceScatter(sum),
            Layout::OutOfPlace {
                input: all,
                output: one,
            },
        ),
        CheckCase::new(
            "all_to_all_single",
            Op::AllToAll,
            Layout::OutOfPlace {
                input: all,
                output: all,
            },
        ),
        CheckCase::new("send", Op::Send { peer: 4 }, Layout::Input(one)),
        CheckCase::new("recv", Op::Recv { peer: 2 }, Layout::Output(one)),
    ];
    let info = &info;
    let check = |op: Op<'static>, layout: &Layout<'_>| {
        Plan::new(
            black_box(op),
            black_box(info),
            black_box(layout),
            black_box(info.device),
        )
    };
    for CheckCase { name, op, layout } in &cases {
        if let Err(error) = check(*op, layout) {
            eprintln!("host_cost: check_cost/{name}: a valid call was refused: {error}");
            std::process::exit(1);
        }
        let ((), count) = counted(|| {
            for _ in 0..COUNTED_CALLS {
                let _ = black_box(check(*op, layout));
            }
        });
        report.record(format!("check_cost/{name}"), count, 0);
    }
    let mut group = criterion.benchmark_group("check_cost");
    for CheckCase { name, op, layout } in &cases {
        group.bench_function(*name, |bencher| bencher.iter(|| check(*op, layout)));
    }
    group.finish();
}

/// A call of `collective` at world size 1 with `count` f32 on `buffers`
/// (in place: both pointers at the receive buffer).
fn call_on(
    collective: Collective,
    mode: Mode,
    count: usize,
    buffers: &DeviceBuffers,
    stream: &CudaStream,
) -> Call {
    let (send, recv) = buffers.addresses(stream);
    Call {
        collective,
        mode,
        send: if mode == Mode::InPlace { recv } else { send },
        recv,
        count,
        dtype: DataType::Float32,
        op: ReduceOp::Sum,
        root: 0,
        rank: 0,
        world: 1,
        rotation: Rotation::fixed(0),
    }
}

/// `iters` launches timed in chunks, synchronising between chunks outside
/// the measured time; the first error is kept in `failure`.
fn host_time(
    launch: &mut Launch<'_>,
    iters: u64,
    stream: &CudaStream,
    failure: &mut Option<BenchError>,
) -> Duration {
    if failure.is_some() {
        return Duration::from_nanos(iters);
    }
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let chunk = left.min(CHUNK);
        let start = Instant::now();
        for _ in 0..chunk {
            if let Err(error) = launch(AT_START) {
                failure.get_or_insert(error);
                return total + start.elapsed();
            }
        }
        total += start.elapsed();
        if let Err(error) = stream.synchronize() {
            failure.get_or_insert(nccl_core::Error::cuda("synchronizing the stream")(error).into());
            return total;
        }
        left -= chunk;
    }
    total
}

/// Why `layer` has no `collective` in `mode`, for the notes.
fn why_not(layer: LayerKind, collective: Collective, mode: Mode) -> &'static str {
    if layer.stream_mode().is_some() {
        GroupLayer::missing(collective, mode).unwrap_or("the process group has no such operation")
    } else {
        "not expressible through the safe API (aliasing)"
    }
}

/// Heap allocations over [`COUNTED_CALLS`] launches after a warm-up,
/// synchronising outside the counted windows.
fn count_allocations(launch: &mut Launch<'_>, stream: &CudaStream) -> Result<u64, BenchError> {
    let sync = || {
        stream
            .synchronize()
            .map_err(nccl_core::Error::cuda("synchronizing the stream"))
    };
    // As many calls as are counted, in the same chunks: past the group's
    // reaping threshold (256 pending operations), so every path a steady
    // loop takes (and any lazy set-up on it) has run before counting.
    for _ in 0..COUNTED_CALLS / 250 {
        (0..250).try_for_each(|_| launch(AT_START))?;
        sync()?;
    }
    let mut count = 0;
    for _ in 0..COUNTED_CALLS / 250 {
        let (launched, allocated) = counted(|| (0..250).try_for_each(|_| launch(AT_START)));
        launched?;
        count += allocated;
        sync()?;
    }
    Ok(count)
}

fn gpu_benches(criterion: &mut Criterion, report: &mut AllocationReport) -> Result<(), BenchError> {
    let device = Device::new(0)?;
    device.bind_to_thread()?;
    let stream = device.new_stream()?;
    let comm = nccl_tensor::Communicator::new(device.clone(), 1, UniqueId::new()?, 0)?;
    let [separate, caller] = process_groups("host_cost")?;
    let raw = RawLayer::new(comm.core(), &stream)?;
    let core = CoreLayer::new(comm.core(), &stream);
    let tensor = TensorLayer::new(&comm, &stream);
    let group_layer = GroupLayer::new(&separate, &stream);
    let group_caller_layer = GroupLayer::new(&caller, &stream);
    let layers: [&dyn Layer; 5] = [&raw, &core, &tensor, &group_layer, &group_caller_layer];
    let mut failure: Option<BenchError> = None;

    let mut small = DeviceBuffers::alloc(DataType::Float32, 2, &stream)?;
    for collective in Collective::ALL {
        let modes: &[Mode] = if TensorLayer::has(collective, Mode::InPlace) {
            &[Mode::InPlace]
        } else {
            &[Mode::InPlace, Mode::OutOfPlace]
        };
        for &mode in modes {
            let call = call_on(collective, mode, 2, &small, &stream);
            let group_name = format!("host_cost/{}_{}_8B", collective.name(), mode.key());
            for layer in layers {
                let what = format!("{group_name}/{}", layer.kind().name());
                if !layer.supports(collective, mode) {
                    println!("note: {what}: {}", why_not(layer.kind(), collective, mode));
                    continue;
                }
                let mut launch = layer.bind(&call, &mut small)?;
                let count = count_allocations(&mut launch, &stream)?;
                report.record(what, count, allowed_allocations(layer.kind()));
            }
            let mut group = criterion.benchmark_group(group_name);
            for layer in layers {
                if !layer.supports(collective, mode) {
                    continue;
                }
                let mut launch = layer.bind(&call, &mut small)?;
                group.bench_function(layer.kind().name(), |bencher| {
                    bencher
                        .iter_custom(|iters| host_time(&mut launch, iters, &stream, &mut failure))
                });
            }
            group.finish();
            if let Some(error) = failure.take() {
                return Err(error);
            }
        }
    }

    let elems = COPY_BYTES / DataType::Float32.size_bytes();
    let mut big = DeviceBuffers::alloc(DataType::Float32, elems, &stream)?;
    let call = call_on(
        Collective::AllReduce,
        Mode::OutOfPlace,
        elems,
        &big,
        &stream,
    );
    let mut group = criterion.benchmark_group("copy_bandwidth/all_reduce_out_of_place_256MiB");
    group
        .throughput(Throughput::Bytes(COPY_BYTES as u64))
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for layer in layers {
        if !layer.supports(call.collective, call.mode) {
            continue;
        }
        let mut launch = layer.bind(&call, &mut big)?;
        group.bench_function(layer.kind().name(), |bencher| {
            bencher.iter_custom(|iters| {
                if failure.is_some() {
                    return Duration::from_nanos(iters);
                }
                let start = Instant::now();
                for _ in 0..iters {
                    if let Err(error) = launch(AT_START) {
                        failure.get_or_insert(error);
                        break;
                    }
                }
                if let Err(error) = stream.synchronize() {
                    failure.get_or_insert(
                        nccl_core::Error::cuda("synchronizing the stream")(error).into(),
                    );
                }
                start.elapsed()
            })
        });
    }
    group.finish();
    if let Some(error) = failure {
        return Err(error);
    }
    drop((small, big));
    stream
        .synchronize()
        .map_err(nccl_core::Error::cuda("synchronizing the stream"))?;
    feature_cost(criterion, &layers, &stream)?;
    gpu_timing_cost(criterion, &raw, &stream)?;
    separate.destroy()?;
    caller.destroy()?;
    buffer_cost(criterion, &comm, &stream)?;
    group_loop_cost(criterion, &stream)?;
    comm.core().finalize()?;
    untracked_cost(criterion)?;
    nonblocking_cost(criterion)
}

/// World-size-1 process groups named after `name`, on the group's own
/// NCCL stream and on the caller's.
fn process_groups(name: &str) -> Result<[ProcessGroup; 2], BenchError> {
    let group = |mode: StreamMode, suffix: &str| {
        ProcessGroup::builder(&format!("{name}-{suffix}"))
            .rank(0)
            .world_size(1)
            .store(Arc::new(InProcessStore::new()))
            .options(GroupOptions::default().with_stream_mode(mode))
            .build()
    };
    Ok([
        group(StreamMode::Separate, "separate")?,
        group(StreamMode::Caller, "caller")?,
    ])
}

/// Ends a section's benchmark group: its first failure, else `buffers`
/// freed and the stream drained.
fn end_section(
    group: criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    failure: Option<BenchError>,
    buffers: DeviceBuffers,
    stream: &CudaStream,
) -> Result<(), BenchError> {
    group.finish();
    if let Some(error) = failure {
        return Err(error);
    }
    drop(buffers);
    Ok(stream
        .synchronize()
        .map_err(nccl_core::Error::cuda("synchronizing the stream"))?)
}
