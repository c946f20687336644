//! `world-cost`: what one in-place all_reduce of 2 f32 (8 bytes) costs the
//! host through every layer of the workspace, side by side in one process
//! and one run, at the world size of the launch:
//!
//! | layer | one call |
//! |---|---|
//! | `raw` | nccl-sys's `ncclAllReduce` pointer on the raw handle of a blocking communicator (nccl-perf's `RawLayer`) |
//! | `raw-nonblocking` | the same on a nonblocking communicator, a call answered `ncclInProgress` followed by `ncclCommGetAsyncError` polled back to back (no sleep, no yield) until it says otherwise: NCCL's own cost of the nonblocking mode |
//! | `raw-fingerprint` | `raw` with an in-band fingerprint in the same `ncclGroupStart`/`ncclGroupEnd`: a MAX all_reduce of two `u64`s `[h, !h]` from a preallocated device buffer (what checking every collective inside NCCL costs) |
//! | `core` | nccl-core's `Communicator::all_reduce` on that communicator (`CoreLayer`) |
//! | `tensor` | nccl-tensor's `Communicator::all_reduce` on a `Tensor`, on that communicator |
//! | `tensor-event` | `tensor` with a CUDA event recorded after each call: the least any layer that tracks each operation's end adds (the group records one per 32 untimed operations on the caller's stream, one per operation on its own stream) |
//! | `tensor-capture-query` | `tensor` with the stream's capture status asked of the driver before each call, as the group asks it (an operation on a stream being captured is issued into the graph) |
//! | `tensor-nonblocking` | the same on a nonblocking communicator, waiting out `ncclInProgress` as nccl-group does (nccl-core's `wait_ready`) |
//! | `tensor-nonblocking-event` | `tensor-nonblocking` with the end event of `tensor-event`: whether recording it after a nonblocking call, which NCCL may have enqueued on a thread of its own, costs more than after a blocking one |
//! | `tensor-nonblocking-spin` | the same, waiting with nccl-core's `async_error` polled back to back: nccl-core's wait policy left out |
//! | `tensor-nonblocking-yield` | the same, yielding the CPU between polls |
//! | `group-<comm>-<stream>` | `ProcessGroup::all_reduce` + `Work::wait` (the tensor moves in and comes back), for `CommMode` `nonblocking`/`blocking` x `StreamMode` `separate`/`caller` |
//! | `group-borrowed` | `group-blocking-caller` on borrowed memory (a `&mut CudaSlice<f32>`, which the `Work` holds): what moving the 112-byte tensor in and out of the operation costs |
//! | `group-unchecked` | `group-blocking-caller` with the mismatch check off: what the check costs the issuing thread (at world size 2 or more: a group of one process has no check) |
//! | `group-small-recorder` | `group-blocking-caller` with a flight recorder of one entry (the default keeps 2048): what writing each operation's record on lines of its own costs, above all in short rounds after a wait for the GPU |
//! | `group-lean` | `group-unchecked` with no liveness beat (none at world size 1 either), no dumps and a flight recorder of one entry: what the group's own tracking costs with its background threads quiet |
//! | `group-nonblocking-unchecked`, `group-nonblocking-lean` | the same two on `group-nonblocking-caller`: at world size 2 or more, roughly how much of the nonblocking group's extra over `tensor-nonblocking` goes with the mismatch check, and with the beat, the dumps and the recorder's size |
//!
//! Run it as every rank: `nccl-launch -n 2 target/release/world-cost`.
//! Alone (no `RANK`/`WORLD_SIZE`) it is world size 1 over an in-process
//! store, where NCCL enqueues no GPU work for an in-place collective. On
//! simulated hosts (every rank on GPU 0 as a host of its own, NCCL over
//! loopback sockets) only the host cost per call means anything: GPU time
//! and bandwidth do not.
//!
//! Method: every rank issues the same calls in the same order (fixed
//! counts: adaptive timing would deadlock across ranks). `--warmup` calls
//! per layer (the groups' first calls create their communicators), then
//! `--rounds` rounds in which every layer in turn, after a barrier of all
//! ranks, makes `--iters` back-to-back calls, so drift hits every layer
//! alike. Only that host loop is timed; the stream is synchronised after
//! it (`sync_us`: that wait per call, a sign of how far the GPU ran
//! behind). Rank 0 prints, per layer, the median and min over rounds of
//! its µs per call and the ratios of the medians to `raw` and `tensor`;
//! its cost over `tensor` paired by round (`over_tensor_us`: the median
//! over rounds of the layer's µs per call less `tensor`'s in the same
//! round, where every layer runs in turn, so that a slow round of the
//! machine cancels out instead of moving one layer's median), with that
//! median's confidence interval of 95% at least from 6 rounds
//! (`over_tensor_interval_us`, the sign test's order statistics: no
//! assumption on the rounds' distribution, but that they are independent;
//! at the default 7 rounds the smallest and largest difference, 98.4%); a
//! layer on a nonblocking communicator's cost over `raw-nonblocking`
//! paired the same way
//! (`over_raw_nonblocking_us`, `over_raw_nonblocking_interval_us`), which
//! tells whether a layer is within a bound of NCCL's own nonblocking
//! mode; each round's µs per call and its heap allocations, all of its
//! calls' (`round_host_us`, `round_allocations`);
//! and the Rust heap allocations per call of the timed loops (the most of
//! any round: 0 allowed, 1 for the groups, the record an operation's
//! `Work` shares with the watchdog and the tensors it hands back, made in a
//! finished operation's allocation where the group kept one; a layer
//! over its allowance fails the run);
//! each rank's medians when ranks differ by more than 10%; and one JSON
//! line per layer (also written to `--json FILE`), with the fields of
//! `benches/scripts/torch_world_cost.py`'s.
//!
//! ```text
//! world-cost [--iters 500] [--rounds 7] [--warmup 100] [--elements 2] [--layers raw,tensor,...] [--json FILE] [--gpu-behind]
//! ```

use nccl_group::Lifecycle;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use cudarc::driver::{CudaEvent, CudaSlice, CudaStream};
use nccl_core::{CaptureStatus, Config, DataType, Device, ReduceOp, Status};
use nccl_group::{CommMode, GroupOptions, Liveness, ProcessGroup, StreamMode};
use nccl_perf::{
    AT_START, BenchError, Call, Collective, CoreLayer, DeviceBuffers, Launch, Layer, Mode,
    RawLayer, Rotation, Shift, World, median, median_interval, per_call_us,
};
use nccl_tensor::{Communicator, Tensor};
use nccl_test_support::alloc::{CountingAllocator, counted};
use nccl_test_support::group::faults::Gate;

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// What issues a layer's call.
#[derive(Clone, Copy, Debug)]
enum Issue {
    /// nccl-perf's raw layer: on a blocking communicator or not, with an
    /// in-band fingerprint or not.
    Raw {
        blocking: bool,
        fingerprint: bool,
    },
    Core,
    Tensor {
        blocking: bool,
        wait: Wait,
        extra: Extra,
    },
    Group(CommMode, StreamMode, Trim),
    /// The default group on borrowed memory.
    GroupBorrowed,
}

/// What a group layer turns off of the default options, to tell each part's
/// cost from the rest.
#[derive(Clone, Copy, Debug)]
enum Trim {
    /// The default options.
    None,
    /// The mismatch check off.
    Unchecked,
    /// A flight recorder of one entry.
    SmallRecorder,
    /// The mismatch check, the liveness beat and the dumps off, one
    /// flight-recorder entry.
    Lean,
}

impl Trim {
    fn options(self, options: GroupOptions) -> GroupOptions {
        match self {
            Trim::None => options,
            Trim::Unchecked => options.with_mismatch_check(false),
            Trim::SmallRecorder => options.with_recorder_capacity(1),
            Trim::Lean => options
                .with_mismatch_check(false)
                .with_liveness(Liveness::Off)
                .with_recorder_capacity(1)
                .without_dump_dir(),
        }
    }
}

/// What a tensor layer's call does beside the all_reduce.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Extra {
    /// Nothing.
    None,
    /// A CUDA event recorded after it.
    EndEvent,
    /// The stream's capture status asked before it.
    CaptureQuery,
}

/// How a tensor layer on a nonblocking communicator waits out
/// `ncclInProgress`: nccl-core's policy, or a plain loop over its
/// `async_error`, to tell the policy's cost from the call's.
#[derive(Clone, Copy, Debug)]
enum Wait {
    /// `Communicator::wait_ready`, as nccl-group waits.
    Library,
    /// `async_error` back to back.
    Spin,
    /// `async_error`, then `yield_now`, until done.
    Yield,
}

impl Wait {
    /// Waits until the communicator's nonblocking call is done.
    fn wait(self, comm: &nccl_core::Communicator) -> Result<(), BenchError> {
        let pause = match self {
            Wait::Library => return Ok(comm.wait_ready("all_reduce")?),
            Wait::Spin => std::hint::spin_loop,
            Wait::Yield => std::thread::yield_now,
        };
        while comm.async_error()? == Status::InProgress {
            pause();
        }
        Ok(())
    }
}

impl Issue {
    /// Heap allocations a call may make in steady state: the group's one
    /// shared operation record at most, nothing elsewhere.
    fn allowed_allocations(self) -> u64 {
        match self {
            Issue::Group(..) | Issue::GroupBorrowed => 1,
            _ => 0,
        }
    }

    /// The kind of nccl-tensor communicator the layer calls through
    /// (`Some(blocking)`); the groups make their own.
    fn communicator(self) -> Option<bool> {
        match self {
            Issue::Raw { blocking, .. } => Some(blocking),
            Issue::Core => Some(true),
            Issue::Tensor { blocking, .. } => Some(blocking),
            Issue::Group(..) | Issue::GroupBorrowed => None,
        }
    }

    /// Whether the layer calls through a nonblocking communicator, whose
    /// own cost `raw-nonblocking` measures.
    fn nonblocking(self) -> bool {
        match self {
            Issue::Group(comm_mode, ..) => comm_mode == CommMode::Nonblocking,
            other => other.communicator() == Some(false),
        }
    }
}

/// A layer: its name (on the command line and in the output) and what
/// issues its call.
#[derive(Clone, Copy, Debug)]
struct LayerSpec {
    name: &'static str,
    issue: Issue,
}

/// Every layer, in the default order (see the table in the crate docs).
const LAYERS: [LayerSpec; 21] = {
    use CommMode::{Blocking, Nonblocking};
    use StreamMode::{Caller, Separate};
    const fn layer(name: &'static str, issue: Issue) -> LayerSpec {
        LayerSpec { name, issue }
    }
    const fn raw(blocking: bool, fingerprint: bool) -> Issue {
        Issue::Raw {
            blocking,
            fingerprint,
        }
    }
    const fn group(comm: CommMode, stream: StreamMode) -> Issue {
        Issue::Group(comm, stream, Trim::None)
    }
    const fn tensor(blocking: bool, wait: Wait, extra: Extra) -> Issue {
        Issue::Tensor {
            blocking,
            wait,
            extra,
        }
    }
    [
        layer("raw", raw(true, false)),
        layer("raw-nonblocking", raw(false, false)),
        layer("raw-fingerprint", raw(true, true)),
        layer("core", Issue::Core),
        layer("tensor", tensor(true, Wait::Library, Extra::None)),
        layer("tensor-event", tensor(true, Wait::Library, Extra::EndEvent)),
        layer(
            "tensor-capture-query",
            tensor(true, Wait::Library, Extra::CaptureQuery),
        ),
        layer(
            "tensor-nonblocking",
            tensor(false, Wait::Library, Extra::None),
        ),
        layer(
            "tensor-nonblocking-event",
            tensor(false, Wait::Library, Extra::EndEvent),
        ),
        layer(
            "tensor-nonblocking-spin",
            tensor(false, Wait::Spin, Extra::None),
        ),
        layer(
            "tensor-nonblocking-yield",
            tensor(false, Wait::Yield, Extra::None),
        ),
        layer("group-nonblocking-separate", group(Nonblocking, Separate)),
        layer("group-nonblocking-caller", group(Nonblocking, Caller)),
        layer("group-blocking-separate", group(Blocking, Separate)),
        layer("group-blocking-caller", group(Blocking, Caller)),
        layer("group-borrowed", Issue::GroupBorrowed),
        layer(
            "group-unchecked",
            Issue::Group(Blocking, Caller, Trim::Unchecked),
        ),
        layer(
            "group-small-recorder",
            Issue::Group(Blocking, Caller, Trim::SmallRecorder),
        ),
        layer("group-lean", Issue::Group(Blocking, Caller, Trim::Lean)),
        layer(
            "group-nonblocking-unchecked",
            Issue::Group(Nonblocking, Caller, Trim::Unchecked),
        ),
        layer(
            "group-nonblocking-lean",
            Issue::Group(Nonblocking, Caller, Trim::Lean),
        ),
    ]
};

/// Ranks whose medians differ by more than this factor get a line each.
const RANK_SPREAD: f64 = 1.10;

fn parse_layer(name: &str) -> Result<LayerSpec, String> {
    LAYERS
        .iter()
        .find(|layer| layer.name == name)
        .copied()
        .ok_or_else(|| {
            let names: Vec<&str> = LAYERS.iter().map(|layer| layer.name).collect();
            format!("expected one of {}; got {name:?}", names.join(", "))
        })
}

/// Host cost per call of an 8-byte in-place all_reduce, per layer, at the
/// launch's world size.
#[derive(Parser, Debug)]
#[command(name = "world-cost")]
struct Args {
    /// Timed calls per layer and round.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..))]
    iters: u32,
    /// Rounds: each layer is timed once per round, the layers interleaved.
    #[arg(long, default_value_t = 7, value_parser = clap::value_parser!(u32).range(1..))]
    rounds: u32,
    /// Warm-up calls per layer before the rounds.
    #[arg(long, default_value_t = 100)]
    warmup: u32,
    /// f32 elements all-reduced (2 = 8 bytes).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    elements: u32,
    /// The layers to run, comma-separated, in this order (default: all).
    #[arg(long, value_delimiter = ',', value_parser = parse_layer)]
    layers: Vec<LayerSpec>,
    /// Also write the JSON lines to this file (on rank 0).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Holds the GPU behind each timed loop (world size 1 only): the stream
    /// waits on a closed gate (`cuStreamWaitValue32` on pinned host memory)
    /// that opens after the loop, so no operation of the loop ends while it
    /// runs, as when a training step keeps the GPU busy and the host runs
    /// ahead. The warm-up runs ungated. On `cargo xtask host-profile`'s
    /// do-nothing driver, use its `--gpu-behind-ms` instead.
    #[arg(long)]
    gpu_behind: bool,
}

impl Args {
    /// The layers to run, each once.
    fn layers(&self) -> Result<Vec<LayerSpec>, BenchError> {
        if self.layers.is_empty() {
            return Ok(LAYERS.to_vec());
        }
        for (index, layer) in self.layers.iter().enumerate() {
            if self.layers[..index].iter().any(|l| l.name == layer.name) {
                return Err(BenchError::Usage(format!(
                    "--layers: expected each layer once; got {} twice",
                    layer.name
                )));
            }
        }
        Ok(self.layers.clone())
    }
}

/// A layer ready to be bound: what its call goes through and its buffer.
enum State<'a> {
    /// The raw layers and `core`: nccl-perf's layer and the buffers its
    /// call points into.
    Layered(Box<dyn Layer + 'a>, DeviceBuffers),
    /// The tensor layers: the communicator, the tensor, how a call in
    /// progress is waited out, the event recorded after each call and
    /// whether the stream's capture status is asked before it.
    Tensor(&'a Communicator, Tensor<f32>, Wait, Option<CudaEvent>, bool),
    /// A group layer: the group and its tensor, away while an operation has it.
    Group(ProcessGroup, Option<Tensor<f32>>),
    /// The borrowed-memory layer: the group and the memory it borrows.
    GroupBorrowed(ProcessGroup, CudaSlice<f32>),
}

impl State<'_> {
    /// One in-place all_reduce per call of the returned launcher.
    fn launch<'s>(
        &'s mut self,
        world: &World,
        stream: &'s Arc<CudaStream>,
    ) -> Result<Launch<'s>, BenchError> {
        Ok(match self {
            State::Layered(layer, buffers) => {
                let (_, recv) = buffers.addresses(stream);
                let call = Call {
                    collective: Collective::AllReduce,
                    mode: Mode::InPlace,
                    send: recv,
                    recv,
                    count: buffers.len(),
                    dtype: DataType::Float32,
                    op: ReduceOp::Sum,
                    root: 0,
                    rank: world.rank,
                    world: world.size,
                    rotation: Rotation::fixed(0),
                };
                layer.bind(&call, buffers)?
            }
            State::Tensor(comm, tensor, wait, end, query) => {
                let (comm, wait, end, query) = (*comm, *wait, &*end, *query);
                Box::new(move |_: &[Shift]| {
                    if query && nccl_core::capture_status(stream)? != CaptureStatus::None {
                        return Err(BenchError::Usage(
                            "tensor-capture-query: the stream is being captured".into(),
                        ));
                    }
                    if comm.all_reduce(&mut *tensor, ReduceOp::Sum, stream)? == Status::InProgress {
                        wait.wait(comm.core())?;
                    }
                    if let Some(end) = end {
                        end.record(stream)
                            .map_err(nccl_core::Error::cuda("recording the end event"))?;
                    }
                    Ok(())
                })
            }
            State::Group(group, slot) => {
                let group: &ProcessGroup = group;
                Box::new(move |_: &[Shift]| {
                    let tensor = slot.take().ok_or_else(|| {
                        BenchError::Usage(
                            "internal error: a failed operation kept the tensor".into(),
                        )
                    })?;
                    let work = group
                        .all_reduce(tensor, ReduceOp::Sum, stream)
                        .map_err(|failed| failed.error)?;
                    *slot = Some(work.wait()?);
                    Ok(())
                })
            }
            State::GroupBorrowed(group, memory) => {
                let group: &ProcessGroup = group;
                Box::new(move |_: &[Shift]| {
                    group
                        .all_reduce(&mut *memory, ReduceOp::Sum, stream)?
                        .wait()?;
                    Ok(())
                })
            }
        })
    }
}

/// One timed loop of one layer.
#[derive(Clone, Copy, Debug)]
struct Round {
    /// µs per call of the host loop.
    host_us: f64,
    /// µs per call of the synchronisation after it.
    sync_us: f64,
    /// Heap allocations of the host loop.
    allocations: u64,
}

/// How long a timed loop may hold the GPU behind its gate (`--gpu-behind`):
/// a loop that fills the stream's launch queue waits in a driver call for
/// the GPU, which the closed gate holds, so the gate opens after this and
/// the run fails instead of hanging.
const GATE_LIMIT: std::time::Duration = std::time::Duration::from_secs(20);

/// `calls` calls of `launch`, then a synchronisation; with `behind`, the
/// device whose stream it is, the stream waits on a closed gate until the
/// calls are made (`--gpu-behind`), or [`GATE_LIMIT`] at most.
fn timed(
    launch: &mut Launch<'_>,
    calls: u32,
    stream: &CudaStream,
    behind: Option<&Device>,
) -> Result<Round, BenchError> {
    let gate = behind.map(|device| {
        let gate = Gate::new(device);
        gate.block(stream);
        gate
    });
    let (made, stopped) = std::sync::mpsc::channel::<()>();
    let (launched, allocations, host, forced) = std::thread::scope(|scope| {
        // Whether the limit opened the gate.
        let limit = gate.as_ref().map(|gate| {
            scope.spawn(move || {
                let expired = stopped.recv_timeout(GATE_LIMIT).is_err();
                if expired {
                    gate.open();
                }
                expired
            })
        });
        let start = Instant::now();
        let (launched, allocations) = counted(|| (0..calls).try_for_each(|_| launch(AT_START)));
        let host = start.elapsed();
        let _ = made.send(());
        let forced = limit.is_some_and(|limit| limit.join().unwrap_or(true));
        (launched, allocations, host, forced)
    });
    let start = Instant::now();
    // Open before anything waits for the stream, errors included, and let
    // the stream drain before an error drops the gate it waits on.
    if let Some(gate) = &gate {
        gate.open();
        if forced || launched.is_err() {
            let _ = stream.synchronize();
        }
    }
    if forced {
        return Err(BenchError::Usage(format!(
            "--gpu-behind: {calls} calls held the GPU behind its gate past {GATE_LIMIT:?} \
             (the stream's launch queue filled, or a call waits for the GPU): expected a loop \
             that enqueues less on the caller's stream; give fewer --iters or leave out the \
             layers that record an event or a wait per call (tensor-event, group-*-separate)"
        )));
    }
    launched?;
    stream
        .synchronize()
        .map_err(nccl_core::Error::cuda("synchronizing after a timed loop"))?;
    let waited = start.elapsed();
    let per_call = |time: std::time::Duration| per_call_us(time.as_secs_f64(), calls.into());
    Ok(Round {
        host_us: per_call(host),
        sync_us: per_call(waited),
        allocations,
    })
}

/// A layer's host time less another's in the same rounds, µs per call.
#[derive(Clone, Copy)]
struct Paired {
    /// The median over rounds of the differences.
    median: f64,
    /// Its confidence interval of 95 % at least ([`median_interval`]), from 6
    /// rounds.
    interval: Option<(f64, f64)>,
}

impl Paired {
    /// The differences of `rounds` less `base`, round by round; `None`
    /// without `base` rounds.
    fn of(rounds: &[Round], base: Option<&[Round]>) -> Option<Self> {
        let paired: Vec<f64> = rounds
            .iter()
            .zip(base?)
            .map(|(round, base)| round.host_us - base.host_us)
            .collect();
        Some(Self {
            median: median(&paired)?,
            interval: median_interval(&paired),
        })
    }

    /// `[+0.55,+0.70]`.
    fn bracketed((low, high): (f64, f64)) -> String {
        format!("[{low:+.2},{high:+.2}]")
    }

    /// The interval bracketed, or `-` with too few rounds for one.
    fn interval_shown(paired: Option<Self>) -> String {
        paired
            .and_then(|paired| paired.interval)
            .map_or_else(|| "-".to_string(), Self::bracketed)
    }

    /// `+0.61 [+0.55,+0.70]`, the interval left out with too few rounds.
    fn shown(paired: Option<Self>) -> String {
        let Some(Self { median, interval }) = paired else {
            return "-".to_string();
        };
        match interval {
            Some(interval) => format!("{median:+.2} {}", Self::bracketed(interval)),
            None => format!("{median:+.2}"),
        }
    }

    /// The JSON fields `{prefix}_us` and `{prefix}_interval_us`.
    fn json(
        paired: Option<Self>,
        prefix: &str,
        fields: &mut serde_json::Map<String, serde_json::Value>,
    ) {
        let median = paired.map(|paired| paired.median);
        let interval = paired
            .and_then(|paired| paired.interval)
            .map(|(low, high)| [low, high]);
        fields.insert(format!("{prefix}_us"), serde_json::json!(median));
        fields.insert(format!("{prefix}_interval_us"), serde_json::json!(interval));
    }
}

/// One layer's figures on one rank, µs per call.
struct Figures {
    median: f64,
    min: f64,
    sync: f64,
    /// The layer's host time less `tensor`'s in the same rounds; `None`
    /// without a `tensor` layer.
    over_tensor: Option<Paired>,
    /// A layer on a nonblocking communicator: its host time less
    /// `raw-nonblocking`'s in the same rounds, if that ran.
    over_raw_nonblocking: Option<Paired>,
    /// The host time of each round, in order.
    round_host: Vec<f64>,
    /// The heap allocations of each round, in order.
    round_allocations: Vec<u64>,
    /// Heap allocations per call, the most of any round.
    allocations: f64,
}

/// The rounds of the layers to pair others with.
struct Bases<'a> {
    tensor: Option<&'a [Round]>,
    raw_nonblocking: Option<&'a [Round]>,
}

impl Figures {
    /// From each round's figures of `layer`, of `calls` calls each, and
    /// those of the `bases` in the same rounds.
    fn of(layer: &LayerSpec, rounds: &[Round], bases: &Bases<'_>, calls: u32) -> Self {
        let host: Vec<f64> = rounds.iter().map(|round| round.host_us).collect();
        let sync: Vec<f64> = rounds.iter().map(|round| round.sync_us).collect();
        let raw_nonblocking = bases
            .raw_nonblocking
            .filter(|_| layer.issue.nonblocking() && layer.name != "raw-nonblocking");
        Self {
            median: median(&host).unwrap_or(f64::NAN),
            min: host.iter().copied().fold(f64::INFINITY, f64::min),
            sync: median(&sync).unwrap_or(f64::NAN),
            over_tensor: Paired::of(rounds, bases.tensor),
            over_raw_nonblocking: Paired::of(rounds, raw_nonblocking),
            round_host: host,
            round_allocations: rounds.iter().map(|round| round.allocations).collect(),
            allocations: rounds
                .iter()
                .map(|round| round.allocations)
                .max()
                .unwrap_or(0) as f64
                / f64::from(calls),
        }
    }
}

/// The nccl-tensor communicator of the kind `blocking`, over a unique id
/// rank 0 shares.
fn communicator(
    world: &World,
    device: &Device,
    blocking: bool,
) -> Result<Communicator, BenchError> {
    let name = if blocking { "blocking" } else { "nonblocking" };
    let id = world.unique_id(name)?;
    let config = Config::new().with_blocking(blocking);
    Ok(Communicator::with_config(
        device.clone(),
        world.size,
        id,
        world.rank,
        &config,
    )?)
}

fn run(args: &Args) -> Result<(), BenchError> {
    let layers = args.layers()?;
    if !nccl_core::cuda_driver_available() {
        return Err(BenchError::Environment(
            "no CUDA driver (libcuda.so.1) on this machine: world-cost needs an NVIDIA GPU".into(),
        ));
    }
    let world = World::from_env("world-cost")?;
    if args.gpu_behind && world.size > 1 {
        // Every rank's gate opens only after its loop, which a collective
        // waiting for a peer's gated GPU might never let end.
        return Err(BenchError::Usage(format!(
            "--gpu-behind: expected world size 1; got {}",
            world.size
        )));
    }
    let device = Device::new(world.local_rank)?;
    device.bind_to_thread()?;
    let stream = device.new_stream()?;
    let elements = args.elements as usize;
    // Created collectively, in the same order on every rank: each kind
    // of communicator (`true`: blocking) that a chosen layer calls through.
    let mut comms: Vec<(bool, Communicator)> = Vec::new();
    for blocking in [true, false] {
        if layers
            .iter()
            .any(|layer| layer.issue.communicator() == Some(blocking))
        {
            comms.push((blocking, communicator(&world, &device, blocking)?));
        }
    }
    let mut states = layers
        .iter()
        .map(|layer| -> Result<State<'_>, BenchError> {
            let tensor = || Tensor::zeros(&stream, &[elements]);
            let comm = || {
                comms
                    .iter()
                    .find(|(blocking, _)| Some(*blocking) == layer.issue.communicator())
                    .map(|(_, comm)| comm)
                    .ok_or_else(|| {
                        BenchError::Usage(format!(
                            "internal error: no communicator for {}",
                            layer.name
                        ))
                    })
            };
            let buffers = || DeviceBuffers::alloc(DataType::Float32, elements, &stream);
            let group = |options| world.group(&format!("world-cost-{}", layer.name), options);
            Ok(match layer.issue {
                Issue::Group(comm_mode, stream_mode, trim) => {
                    let options = trim.options(
                        GroupOptions::default()
                            .with_comm_mode(comm_mode)
                            .with_stream_mode(stream_mode),
                    );
                    State::Group(group(options)?, Some(tensor()?))
                }
                Issue::GroupBorrowed => {
                    let memory = stream
                        .alloc_zeros::<f32>(elements)
                        .map_err(nccl_core::Error::cuda("allocating the borrowed memory"))?;
                    State::GroupBorrowed(group(GroupOptions::default())?, memory)
                }
                Issue::Raw { fingerprint, .. } => {
                    let raw = RawLayer::new(comm()?.core(), &stream)?;
                    let raw = if fingerprint {
                        raw.with_fingerprint(&stream)?
                    } else {
                        raw
                    };
                    State::Layered(Box::new(raw), buffers()?)
                }
                Issue::Core => State::Layered(
                    Box::new(CoreLayer::new(comm()?.core(), &stream)),
                    buffers()?,
                ),
                Issue::Tensor { wait, extra, .. } => {
                    let end = (extra == Extra::EndEvent)
                        .then(|| stream.context().new_event(None))
                        .transpose()
                        .map_err(nccl_core::Error::cuda("creating the end event"))?;
                    let query = extra == Extra::CaptureQuery;
                    State::Tensor(comm()?, tensor()?, wait, end, query)
                }
            })
        })
        .collect::<Result<Vec<_>, _>>()?;

    let mut rounds = vec![Vec::new(); layers.len()];
    {
        let mut launches = states
            .iter_mut()
            .map(|state| state.launch(&world, &stream))
            .collect::<Result<Vec<_>, _>>()?;
        for launch in &mut launches {
            timed(launch, args.warmup, &stream, None)?;
        }
        let behind = args.gpu_behind.then_some(&device);
        for _ in 0..args.rounds {
            for (launch, times) in launches.iter_mut().zip(&mut rounds) {
                world.barrier()?;
                times.push(timed(launch, args.iters, &stream, behind)?);
            }
        }
    }
    let rounds_of = |name: &str| {
        let index = layers.iter().position(|layer| layer.name == name)?;
        Some(rounds[index].as_slice())
    };
    let bases = Bases {
        tensor: rounds_of("tensor"),
        raw_nonblocking: rounds_of("raw-nonblocking"),
    };
    let figures: Vec<Figures> = layers
        .iter()
        .zip(&rounds)
        .map(|(layer, times)| Figures::of(layer, times, &bases, args.iters))
        .collect();
    let medians: Vec<f64> = figures.iter().map(|f| f.median).collect();
    let per_rank = world.all_gather("medians", &medians)?;
    if world.rank == 0 {
        let gpu = device
            .context()
            .name()
            .unwrap_or_else(|_| "unknown GPU".into());
        let nccl = nccl_core::version()?.to_string();
        report(args, &world, &layers, &figures, &per_rank, &nccl, &gpu)?;
    }
    let over: Vec<String> = layers
        .iter()
        .zip(&figures)
        .filter(|(layer, f)| f.allocations > layer.issue.allowed_allocations() as f64)
        .map(|(layer, f)| {
            format!(
                "{} {:.3} (allowed {})",
                layer.name,
                f.allocations,
                layer.issue.allowed_allocations()
            )
        })
        .collect();
    // Collective teardown, in the same order on every rank.
    for state in &states {
        if let State::Group(group, _) | State::GroupBorrowed(group, _) = state {
            group.destroy()?;
        }
    }
    states.clear();
    for (_, comm) in &comms {
        comm.core().finalize()?;
    }
    let rank = world.rank;
    world.finish()?;
    if over.is_empty() {
        Ok(())
    } else {
        Err(BenchError::Allocations(format!(
            "rank {rank}, per call over the allowance: {}",
            over.join(", ")
        )))
    }
}

/// Rank 0's table, per-rank lines and JSON lines (to stdout, and to
/// `--json FILE`).
fn report(
    args: &Args,
    world: &World,
    layers: &[LayerSpec],
    figures: &[Figures],
    per_rank: &[Vec<f64>],
    nccl: &str,
    gpu: &str,
) -> Result<(), BenchError> {
    let median_of = |name: &str| {
        let index = layers.iter().position(|layer| layer.name == name)?;
        Some(figures[index].median)
    };
    let (raw, tensor) = (median_of("raw"), median_of("tensor"));
    let ratio = |base: Option<f64>, value: f64| base.map(|base| value / base);
    let shown = |ratio: Option<f64>| ratio.map_or_else(|| "-".to_string(), |r| format!("{r:.2}"));
    let hosts = if world.simulated_hosts {
        "simulated hosts on one GPU: only host cost per call means anything"
    } else {
        "a GPU per rank"
    };
    let behind = if args.gpu_behind {
        ", the GPU held behind each timed loop"
    } else {
        ""
    };
    let mut out = format!(
        "# world-cost: in-place all_reduce of {} x f32 ({} B), world size {} ({hosts}), NCCL {nccl}, {gpu}{behind}\n\
         # {} warm-up calls per layer, then {} rounds of {} timed calls per layer, interleaved; µs per call\n\
         # of the host loop (median and min over rounds), over tensor's in the same round (median, and its\n\
         # confidence interval, 95% at least, from 6 rounds), of the synchronisation after it (median),\n\
         # and of a layer on a nonblocking communicator over raw-nonblocking's in the same round\n\
         # (median [interval])\n\
         # {:<26} {:>10} {:>10} {:>10} {:>10} {:>8} {:>9} {:>11} {:>15} {:>23}\n",
        args.elements,
        args.elements * 4,
        world.size,
        args.warmup,
        args.rounds,
        args.iters,
        "layer",
        "median_us",
        "min_us",
        "+tensor_us",
        "sync_us",
        "x raw",
        "x tensor",
        "allocs/call",
        "+tensor 95%",
        "+raw_nb_us [95%]"
    );
    let mut json = Vec::with_capacity(layers.len());
    for (index, (layer, f)) in layers.iter().zip(figures).enumerate() {
        let (vs_raw, vs_tensor) = (ratio(raw, f.median), ratio(tensor, f.median));
        let over = f
            .over_tensor
            .map_or_else(|| "-".to_string(), |over| format!("{:+.2}", over.median));
        out += &format!(
            "  {:<26} {:>10.2} {:>10.2} {:>10} {:>10.2} {:>8} {:>9} {:>11.3} {:>15} {:>23}\n",
            layer.name,
            f.median,
            f.min,
            over,
            f.sync,
            shown(vs_raw),
            shown(vs_tensor),
            f.allocations,
            Paired::interval_shown(f.over_tensor),
            Paired::shown(f.over_raw_nonblocking)
        );
        let rank_medians: Vec<f64> = per_rank.iter().map(|medians| medians[index]).collect();
        let mut fields = serde_json::json!({
            "bench": "world-cost",
            "world_size": world.size,
            "simulated_hosts": world.simulated_hosts,
            "layer": layer.name,
            "median_us": f.median,
            "min_us": f.min,
            "sync_us": f.sync,
            "rank_medians_us": rank_medians,
            "vs_raw": vs_raw,
            "vs_tensor": vs_tensor,
            "allocations_per_call": f.allocations,
            "elements": args.elements,
            "iters": args.iters,
            "rounds": args.rounds,
            "warmup": args.warmup,
            "gpu_behind": args.gpu_behind,
            "nccl_version": nccl,
            "gpu": gpu,
            "round_host_us": f.round_host,
            "round_allocations": f.round_allocations,
        });
        if let serde_json::Value::Object(fields) = &mut fields {
            Paired::json(f.over_tensor, "over_tensor", fields);
            Paired::json(f.over_raw_nonblocking, "over_raw_nonblocking", fields);
        }
        json.push(fields.to_string());
    }
    let spread = (0..layers.len()).any(|index| {
        let values = per_rank.iter().map(|medians| medians[index]);
        let (low, high) = values.fold((f64::INFINITY, 0.0f64), |(l, h), v| (l.min(v), h.max(v)));
        high > low * RANK_SPREAD
    });
    if spread {
        out += &format!(
            "# the ranks' medians differ by more than {:.0}% (µs per call):\n",
            (RANK_SPREAD - 1.0) * 100.0
        );
        for (rank, medians) in per_rank.iter().enumerate() {
            let cells: Vec<String> = layers
                .iter()
                .zip(medians)
                .map(|(layer, median)| format!("{} {median:.2}", layer.name))
                .collect();
            out += &format!("rank {rank}: {}\n", cells.join(", "));
        }
    }
    let lines = json.join("\n") + "\n";
    out += &lines;
    let io = |what: String| move |source: std::io::Error| BenchError::Io { what, source };
    std::io::stdout()
        .lock()
        .write_all(out.as_bytes())
        .map_err(io("standard output".into()))?;
    if let Some(path) = &args.json {
        std::fs::write(path, lines).map_err(io(format!("the JSON file {}", path.display())))?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            let _ = writeln!(std::io::stderr(), "world-cost: error: {}", error.one_line());
            ExitCode::from(error.exit_code())
        }
    }
}
