//! What the parts of a process-group operation cost, through the group's
//! public API (its inner parts, the cache and the flight recorder, are
//! measured as part of the whole, in `host_cost`; the recorder alone
//! through its `testing` module):
//!
//! * `group_parts/*`: the primitives a group operation is built of, each
//!   alone: `instant_now` (a timestamp: an operation takes two, its
//!   enqueue time and its completion's), `arc_alloc` (the record an
//!   operation shares with the watchdog), `recorder_record_finish` (the
//!   flight recorder's part of an operation: its record when issued and
//!   its finish when seen to end, a lock each, on a full ring of the
//!   default capacity, through `nccl_group::testing`), `cache_lookup` (the
//!   communicator cache's lookup of a one-device key, once per operation),
//!   and on a GPU the driver calls
//!   through cudarc: `event_record` and `stream_wait_event` (two of each
//!   per operation on the group's own stream, one record on the caller's),
//!   `event_query` (the watchdog's poll: when the pending operations end
//!   on one stream, about ten per 256 operations reaped; one per operation
//!   otherwise), `capture_status` (whether the caller's stream is being
//!   captured into a CUDA graph, asked once per operation). Without a GPU the driver calls are skipped (`SKIP:`).
//! * `group_handoff/all_gather_out_of_place_64MiB/*`: what the separate
//!   stream's event handoff costs on the GPU, per operation, outside the
//!   group: nccl-tensor's 64 MiB out-of-place all_gather at world size 1
//!   (a device copy) back to back on one stream (`one-stream`), on a
//!   second stream that waits for the first through an event
//!   (`events-one-way`), and with the first stream also waiting for the
//!   second after each (`events-both-ways`, what `StreamMode::Separate`
//!   and `Work::wait` enqueue), on a normal and on a high-priority second
//!   stream. Each sample ends with a synchronisation, so the time is the
//!   GPU's.
//!
//! * `group_coalescing/{separate,coalesced}/N`: what N all_reduces of 2
//!   `f32` (8 bytes: the host's cost, not bandwidth) cost the host through
//!   the group, per batch of N: N operations and N `Work::wait`s
//!   (`separate`), against one `ProcessGroup::coalesced` batch, one NCCL
//!   group and one `Work::wait` (`coalesced`), as PyTorch's coalescing
//!   manager issues a DDP bucket. Host time only: the stream is
//!   synchronised every few batches outside the timed part. On its own the
//!   bench is a world of one (criterion's statistics); as every rank of
//!   `nccl-launch -n 2 benches-group_cost --bench` (or any world size) it
//!   runs this comparison alone, with fixed counts (criterion's adaptive
//!   counts would differ between ranks, and collectives must not): rounds
//!   of every variant after a barrier, rank 0 printing the median and min
//!   over rounds and the ratio of the medians. Needs a GPU (`SKIP:`
//!   without).
//!
//! * `group_checks/{off,1,16,64}`: what the collective check
//!   (`GroupOptions::collective_checks`, every K collectives) costs the
//!   host per all_reduce of 2 `f32` plus its `Work::wait`, against the
//!   same group without it. Each K is a group of its own. At world size 1
//!   there is nothing to compare and the check is off whatever K (the
//!   variants measure that it costs nothing); as every rank of
//!   `nccl-launch -n N benches-group_cost --bench` the rounds of every
//!   variant run after a barrier, [`CHECKED_OPS`] all_reduces each, and
//!   rank 0 prints the median and min per all_reduce and the difference
//!   to off. Needs a GPU (`SKIP:` without).
//!
//! The group's whole per-operation host cost (`ProcessGroup` op +
//! `Work::wait`, against raw NCCL and the other layers in the same run) is
//! the `group` entry of the `host_cost` bench.

use nccl_group::Lifecycle;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::Criterion;
use cudarc::driver::CudaStream;
use nccl_core::{DataType, ReduceOp, UniqueId};
use nccl_group::recorder::{FlightRecorder, OpDescription};
use nccl_group::testing::{CommKey, DeviceList, OnceMap, record_and_finish};
use nccl_group::{DEFAULT_OP_TIMEOUT, GroupOptions, ProcessGroup, RendezvousConfig, Store, Work};
use nccl_tensor::Tensor;
use nccl_test_support::group::world_of_one;

/// The record an operation shares with the watchdog, in size.
struct SharedRecord {
    _ends: [u64; 6],
}

fn group_parts(criterion: &mut Criterion) {
    criterion.bench_function("group_parts/instant_now", |b| b.iter(Instant::now));
    criterion.bench_function("group_parts/arc_alloc", |b| {
        b.iter(|| black_box(Arc::new(SharedRecord { _ends: [0; 6] })))
    });
    let recorder = FlightRecorder::new(GroupOptions::default().recorder_capacity);
    let description = OpDescription {
        op: "all_reduce",
        dtype: Some(DataType::Float32),
        count: 2,
        output_count: 2,
        reduction: Some("sum"),
        peer: None,
        timeout: DEFAULT_OP_TIMEOUT,
        devices: DeviceList::one(0).expect("device 0"),
        collective: true,
    };
    let at = Instant::now();
    criterion.bench_function("group_parts/recorder_record_finish", |b| {
        b.iter(|| record_and_finish(&recorder, black_box(&description), at))
    });
    let cache: OnceMap<CommKey, u64> = OnceMap::new();
    let key = CommKey::Collective(DeviceList::one(0).expect("device 0"));
    cache
        .get_or_create(&key, |_| Ok::<_, ()>(0))
        .expect("created");
    criterion.bench_function("group_parts/cache_lookup", |b| {
        b.iter(|| cache.get(black_box(&key)))
    });
    if !has_gpu() {
        println!("SKIP: group_parts driver calls need 1 GPU(s), found 0");
        return;
    }
    let device = nccl_core::Device::new(0).expect("device 0");
    let stream = device.new_stream().expect("stream");
    let other = device.new_stream().expect("second stream");
    let event = device
        .context()
        .new_event(None)
        .expect("event without timing");
    criterion.bench_function("group_parts/event_record", |b| {
        b.iter(|| event.record(&stream).expect("record"))
    });
    criterion.bench_function("group_parts/stream_wait_event", |b| {
        b.iter(|| other.wait(&event).expect("wait"))
    });
    criterion.bench_function("group_parts/event_query", |b| {
        b.iter(|| black_box(event.try_is_complete().expect("query")))
    });
    criterion.bench_function("group_parts/capture_status", |b| {
        b.iter(|| black_box(nccl_core::capture_status(&stream).expect("capture status")))
    });
    stream.synchronize().expect("synchronize");
    other.synchronize().expect("synchronize");
    group_handoff(criterion, &device);
}

/// How an operation reaches its stream in `group_handoff`.
#[derive(Clone, Copy)]
enum Handoff {
    /// On the caller's stream.
    None,
    /// On the second stream, after an event from the caller's.
    OneWay,
    /// As `OneWay`, and the caller's stream then waits for the second.
    BothWays,
}

fn group_handoff(criterion: &mut Criterion, device: &nccl_core::Device) {
    const BYTES: usize = 64 << 20;
    let comm = nccl_tensor::Communicator::new(device.clone(), 1, UniqueId::new().expect("id"), 0)
        .expect("communicator of one rank");
    let caller = device.new_stream().expect("stream");
    let second = device.new_stream().expect("second stream");
    let (_least, greatest) =
        cudarc::driver::result::stream::get_priority_range().expect("stream priorities");
    let high = device
        .context()
        .new_stream_with_priority(greatest)
        .expect("high-priority stream");
    let start = device.context().new_event(None).expect("event");
    let end = device.context().new_event(None).expect("event");
    let elements = BYTES / std::mem::size_of::<f32>();
    let input = nccl_tensor::Tensor::<f32>::zeros(&caller, &[elements]).expect("input");
    let mut output = nccl_tensor::Tensor::<f32>::zeros(&caller, &[elements]).expect("output");
    caller.synchronize().expect("synchronize");
    let mut group = criterion.benchmark_group("group_handoff/all_gather_out_of_place_64MiB");
    group.sample_size(10);
    let variants = [
        ("one-stream", Handoff::None, &caller),
        ("events-one-way", Handoff::OneWay, &second),
        ("events-both-ways", Handoff::BothWays, &second),
        ("events-both-ways-high-priority", Handoff::BothWays, &high),
    ];
    for (name, handoff, stream) in variants {
        let mut issue = || {
            if !matches!(handoff, Handoff::None) {
                start.record(&caller).expect("record");
                stream.wait(&start).expect("wait");
            }
            let _ = comm
                .all_gather_into_tensor(&mut output, &input, stream)
                .expect("all_gather");
            if matches!(handoff, Handoff::BothWays) {
                end.record(stream).expect("record");
                caller.wait(&end).expect("wait");
            }
        };
        group.bench_function(name, |bencher| {
            bencher.iter_custom(|iters| {
                let began = Instant::now();
                for _ in 0..iters {
                    issue();
                }
                caller.synchronize().expect("synchronize");
                stream.synchronize().expect("synchronize");
                began.elapsed()
            })
        });
    }
    group.finish();
}

/// The batch sizes of `group_coalescing`.
const BATCH_SIZES: [usize; 3] = [4, 16, 64];
/// Elements of each all_reduce of `group_coalescing`.
const ELEMENTS: usize = 2;
/// Batches between two stream synchronisations (not timed), so the
/// launch queue never fills.
const CHUNK: u64 = 8;
/// At world size N: batches before the rounds, rounds, and batches per
/// variant and round.
const WARMUP: u64 = 16;
const ROUNDS: usize = 7;
const BATCHES: u64 = 40;

/// How a batch of all_reduces is issued.
#[derive(Clone, Copy, Debug)]
enum Issue {
    /// One operation and one `Work::wait` per tensor.
    Separate,
    /// One `coalesced` batch: one NCCL group, one `Work::wait`.
    Coalesced,
}

impl Issue {
    const BOTH: [Issue; 2] = [Issue::Separate, Issue::Coalesced];

    fn name(self) -> &'static str {
        match self {
            Issue::Separate => "separate",
            Issue::Coalesced => "coalesced",
        }
    }

    /// All-reduces every tensor (sum) and waits for it on `stream`.
    fn run(
        self,
        group: &ProcessGroup,
        tensors: Vec<Tensor<f32>>,
        stream: &Arc<CudaStream>,
    ) -> Vec<Tensor<f32>> {
        match self {
            Issue::Separate => {
                let works: Vec<Work<Tensor<f32>>> = tensors
                    .into_iter()
                    .map(|tensor| {
                        group
                            .all_reduce(tensor, ReduceOp::Sum, stream)
                            .unwrap_or_else(|e| panic!("all_reduce: {}", e.error))
                    })
                    .collect();
                works
                    .into_iter()
                    .map(|work| work.wait().expect("Work::wait"))
                    .collect()
            }
            Issue::Coalesced => {
                let mut batch = group.coalesced();
                for tensor in tensors {
                    batch.all_reduce(tensor, ReduceOp::Sum);
                }
                batch
                    .issue(stream)
                    .unwrap_or_else(|e| panic!("coalesced all_reduces: {}", e.error))
                    .wait()
                    .expect("Work::wait")
            }
        }
    }
}

/// The host time of `batches` batches, synchronising the stream every
/// [`CHUNK`] batches outside the timed part.
fn time_batches(
    group: &ProcessGroup,
    issue: Issue,
    tensors: &mut Vec<Tensor<f32>>,
    batches: u64,
    stream: &Arc<CudaStream>,
) -> Duration {
    timed_in_chunks(batches, stream, || {
        *tensors = issue.run(group, std::mem::take(tensors), stream);
    })
}

/// Waits until every rank of `group` has reached this point and `stream`
/// is idle, so that no rank's timing starts while another's work runs.
fn all_meet(group: &ProcessGroup, stream: &Arc<CudaStream>) {
    group
        .barrier(stream)
        .expect("barrier")
        .wait()
        .expect("barrier wait");
    stream.synchronize().expect("synchronize");
}

/// The host time of `calls` calls of `call`, synchronising `stream` every
/// [`CHUNK`] calls outside the timed part.
fn timed_in_chunks(calls: u64, stream: &Arc<CudaStream>, mut call: impl FnMut()) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = calls;
    while left > 0 {
        let chunk = left.min(CHUNK);
        let start = Instant::now();
        for _ in 0..chunk {
            call();
        }
        total += start.elapsed();
        stream.synchronize().expect("synchronize");
        left -= chunk;
    }
    total
}

/// Every rank of a launch (`RANK`, `WORLD_SIZE`, ...): its place and the
/// launch's store, connected once (rank 0 hosts it) and shared by every
/// group of the bench.
struct Launched {
    config: RendezvousConfig,
    store: Arc<dyn Store>,
}

impl Launched {
    fn connect() -> Self {
        let config = RendezvousConfig::from_env().expect("the launch's variables");
        let store = Arc::from(config.connect().expect("the launch's store"));
        Self { config, store }
    }
}

/// This process's group `name` with `options` and a stream: as every
/// rank of `launched`, or a world of one on an in-process store.
fn bench_group(
    name: &str,
    options: GroupOptions,
    launched: Option<&Launched>,
) -> (ProcessGroup, Arc<CudaStream>) {
    let (group, device) = match launched {
        Some(Launched { config, store }) => {
            let device = nccl_core::Device::new(config.local_rank).expect("this rank's GPU");
            let options = options.with_timeout(config.timeout);
            let group = ProcessGroup::builder(name)
                .rank(config.rank)
                .world_size(config.world_size)
                .store(Arc::clone(store))
                .store_address(config.store.to_string())
                .options(options)
                .build()
                .expect("join the launch's group");
            (group, device)
        }
        None => (
            world_of_one(name, options),
            nccl_core::Device::new(0).expect("device 0"),
        ),
    };
    let stream = device.new_stream().expect("stream");
    (group, stream)
}

/// `n` tensors of [`ELEMENTS`] ones.
fn tensors(n: usize, stream: &Arc<CudaStream>) -> Vec<Tensor<f32>> {
    (0..n)
        .map(|_| Tensor::from_host(stream, &[1.0; ELEMENTS], &[ELEMENTS]).expect("tensor"))
        .collect()
}

/// `group_coalescing` at world size 1, through criterion.
fn coalescing(criterion: &mut Criterion) {
    let options = GroupOptions::default().without_dump_dir();
    let (group, stream) = bench_group("group-cost", options, None);
    let mut bench = criterion.benchmark_group("group_coalescing");
    for n in BATCH_SIZES {
        for issue in Issue::BOTH {
            let mut kept = tensors(n, &stream);
            // The first operation creates the communicator.
            kept = issue.run(&group, kept, &stream);
            bench.bench_function(format!("{}/{n}", issue.name()), |bencher| {
                bencher.iter_custom(|iters| time_batches(&group, issue, &mut kept, iters, &stream))
            });
        }
    }
    bench.finish();
    group.destroy().expect("destroy the group");
}

/// `group_coalescing` as every rank of a launch: fixed counts, rounds of
/// every variant after a barrier; rank 0 prints.
fn coalescing_launched(launched: &Launched) {
    let options = GroupOptions::default().without_dump_dir();
    let (group, stream) = bench_group("group-cost", options, Some(launched));
    let (rank, world) = (group.rank(), group.world_size());
    for n in BATCH_SIZES {
        let mut kept = tensors(n, &stream);
        let mut medians = Vec::new();
        for issue in Issue::BOTH {
            let _ = time_batches(&group, issue, &mut kept, WARMUP, &stream);
        }
        let mut rounds: Vec<Vec<f64>> = vec![Vec::new(); Issue::BOTH.len()];
        for _ in 0..ROUNDS {
            for (issue, times) in Issue::BOTH.into_iter().zip(&mut rounds) {
                all_meet(&group, &stream);
                let took = time_batches(&group, issue, &mut kept, BATCHES, &stream);
                times.push(nccl_perf::per_call_us(took.as_secs_f64(), BATCHES));
            }
        }
        for (issue, times) in Issue::BOTH.into_iter().zip(&rounds) {
            let median = nccl_perf::median(times).unwrap_or(f64::NAN);
            let min = times.iter().copied().fold(f64::INFINITY, f64::min);
            medians.push(median);
            if rank == 0 {
                println!(
                    "group_coalescing/{}/{n} (world size {world}): median {median:.2} us per batch \
                     ({:.3} us per all_reduce), min {min:.2} us, over {ROUNDS} rounds of {BATCHES} batches",
                    issue.name(),
                    median / n as f64,
                );
            }
        }
        if rank == 0
            && let [separate, coalesced] = medians[..]
        {
            println!(
                "group_coalescing/{n} (world size {world}): coalesced / separate = {:.3}",
                coalesced / separate
            );
        }
    }
    all_meet(&group, &stream);
    group.destroy().expect("destroy the group");
}

/// The check intervals of `group_checks` (`None`: off).
const CHECK_INTERVALS: [Option<u32>; 4] = [None, Some(1), Some(16), Some(64)];
/// All_reduces per variant and round of `group_checks` at world size N:
/// whole windows of every K.
const CHECKED_OPS: u64 = 256;

fn check_name(every: Option<u32>) -> String {
    every.map_or_else(|| "off".to_string(), |every| every.to_string())
}

/// The host time of `ops` all_reduces of `tensor` (sum), each waited for,
/// synchronising the stream every [`CHUNK`] outside the timed part.
fn time_all_reduces(
    group: &ProcessGroup,
    tensor: &mut Option<Tensor<f32>>,
    ops: u64,
    stream: &Arc<CudaStream>,
) -> Duration {
    timed_in_chunks(ops, stream, || {
        let input = tensor.take().expect("the tensor is back after each wait");
        let work = group
            .all_reduce(input, ReduceOp::Sum, stream)
            .unwrap_or_else(|e| panic!("all_reduce: {}", e.error));
        *tensor = Some(work.wait().expect("Work::wait"));
    })
}

/// The group of `group_checks` with the check every `every` collectives.
fn checks_group(
    every: Option<u32>,
    launched: Option<&Launched>,
) -> (ProcessGroup, Arc<CudaStream>) {
    let mut options = GroupOptions::default().without_dump_dir();
    options.collective_checks = every;
    bench_group(
        &format!("group-checks-{}", check_name(every)),
        options,
        launched,
    )
}

/// `group_checks` at world size 1, through criterion.
fn checks(criterion: &mut Criterion) {
    let mut bench = criterion.benchmark_group("group_checks");
    for every in CHECK_INTERVALS {
        let (group, stream) = checks_group(every, None);
        let mut tensor = tensors(1, &stream).pop();
        // The first operation creates the communicator.
        let _ = time_all_reduces(&group, &mut tensor, 1, &stream);
        bench.bench_function(check_name(every), |bencher| {
            bencher.iter_custom(|iters| time_all_reduces(&group, &mut tensor, iters, &stream))
        });
        group.destroy().expect("destroy the group");
    }
    bench.finish();
}

/// `group_checks` as every rank of a launch: fixed counts, rounds of
/// every variant after a barrier; rank 0 prints.
fn checks_launched(launched: &Launched) {
    let mut variants: Vec<_> = CHECK_INTERVALS
        .into_iter()
        .map(|every| {
            let (group, stream) = checks_group(every, Some(launched));
            let tensor = tensors(1, &stream).pop();
            (every, group, stream, tensor)
        })
        .collect();
    let mut rounds: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    for (_, group, stream, tensor) in &mut variants {
        let _ = time_all_reduces(group, tensor, WARMUP * CHUNK, stream);
    }
    for _ in 0..ROUNDS {
        for ((_, group, stream, tensor), times) in variants.iter_mut().zip(&mut rounds) {
            all_meet(group, stream);
            let took = time_all_reduces(group, tensor, CHECKED_OPS, stream);
            times.push(nccl_perf::per_call_us(took.as_secs_f64(), CHECKED_OPS));
        }
    }
    let (rank, world) = (variants[0].1.rank(), variants[0].1.world_size());
    let median_off = nccl_perf::median(&rounds[0]).unwrap_or(f64::NAN);
    for ((every, _, _, _), times) in variants.iter().zip(&rounds) {
        let median = nccl_perf::median(times).unwrap_or(f64::NAN);
        let min = times.iter().copied().fold(f64::INFINITY, f64::min);
        if rank == 0 {
            println!(
                "group_checks/{} (world size {world}): median {median:.2} us per all_reduce \
                 ({:+.2} us over off), min {min:.2} us, over {ROUNDS} rounds of {CHECKED_OPS}",
                check_name(*every),
                median - median_off,
            );
        }
    }
    for (_, group, stream, _) in &variants {
        all_meet(group, stream);
        group.destroy().expect("destroy the group");
    }
}

/// Whether a GPU is there for the benches that need one.
fn has_gpu() -> bool {
    nccl_core::cuda_driver_available() && nccl_core::Device::count().unwrap_or(0) > 0
}

fn main() {
    let launched = std::env::var("WORLD_SIZE").is_ok_and(|world| world != "1");
    if launched {
        if !has_gpu() {
            println!("SKIP: group_coalescing and group_checks need 1 GPU(s), found 0");
            return;
        }
        // As criterion reads it: the first argument that is not a flag
        // picks the benchmarks whose names contain it.
        let filter = std::env::args().skip(1).find(|arg| !arg.starts_with('-'));
        let wanted = |name: &str| filter.as_deref().is_none_or(|f| name.contains(f));
        let launched = Launched::connect();
        if wanted("group_coalescing") {
            coalescing_launched(&launched);
        }
        if wanted("group_checks") {
            checks_launched(&launched);
        }
        return;
    }
    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .configure_from_args();
    group_parts(&mut criterion);
    if has_gpu() {
        coalescing(&mut criterion);
        checks(&mut criterion);
    } else {
        println!("SKIP: group_coalescing and group_checks need 1 GPU(s), found 0");
    }
    criterion.final_summary();
}
