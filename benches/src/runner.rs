//! Running a benchmark: one thread per GPU (rank = GPU index), one
//! communicator and one non-blocking stream per rank (and, for the group
//! layer, one process of a `ProcessGroup` per rank, meeting the others in
//! one in-process store), and the main thread gathering every rank's
//! measurements into table rows.
//!
//! Per collective, each rank allocates its typed send and receive buffers
//! once (for the largest size). Then, per size and mode (out-of-place, then
//! in-place), for each layer of the run (one, or A and B of `--compare`):
//! it checks the result once (untimed, with `-c 1`); then runs each
//! layer's warm-up; with `-G N` captures each layer's `iters` calls in a
//! CUDA graph; then times `batches` batches per layer, alternating the
//! layers (A, B, A, B, ...), each batch after a barrier of every rank:
//! `iters` back-to-back launches (or `N` graph replays) followed by one
//! stream synchronisation. A layer's time is the median of its batches on
//! each rank; a row's time is the mean over the ranks, as nccl-tests
//! reports by default.

use std::collections::HashMap;
use std::io::{self, IsTerminal, Write};
use std::path::Path;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};

use cudarc::driver::CudaStream;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use nccl_core::{AbortHandle, Communicator, DataType, Device, ReduceOp, UniqueId};
use nccl_group::{CommMode, GroupOptions, InProcessStore, ProcessGroup};

use crate::buffers::DeviceBuffers;
use crate::check::{CheckData, CheckSetup, count_wrong};
use crate::cli::Args;
use crate::collective::{Collective, Mode};
use crate::env::{Environment, world_size};
use crate::error::BenchError;
use crate::layer::{
    Call, GroupLayer, Launch, Layer, LayerKind, TensorLayer, has_native_all_to_all, new_layer,
};
use crate::report::{
    Measurement, Ratio, Reporter, Row, average_busbw, c_general, table_footer, table_header,
};
use crate::sizes::{OpCounts, bandwidths, sweep};
use crate::timing::{Captured, capture, median, time_launches, time_replays};

/// What every rank runs, in the same order.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The collectives, in order.
    pub collectives: Vec<Collective>,
    /// The message sizes in bytes, in order.
    pub sizes: Vec<u64>,
    /// The element type.
    pub dtype: DataType,
    /// The reduction.
    pub op: ReduceOp,
    /// The root of broadcast and reduce.
    pub root: i32,
    /// Calls per timed batch (and in each CUDA graph).
    pub iters: u32,
    /// Warm-up iterations.
    pub warmup: u32,
    /// Whether results are checked.
    pub check: bool,
    /// The layers issuing the calls: one, or A (baseline) and B of `--compare`.
    pub layers: Vec<LayerKind>,
    /// Timed batches per size, mode and layer.
    pub batches: u32,
    /// Graph replays per batch (`-G`); 0 calls the layers directly.
    pub graph: u32,
    /// The number of ranks (GPUs).
    pub world: usize,
    /// The group layers' communicator kind (`--group-comms`).
    pub group_comms: CommMode,
    /// How sizes grow, as nccl-tests prints it (`2(factor)`, `1048576(bytes)`).
    pub step: String,
}

impl Plan {
    /// The plan for `args` on `world` GPUs.
    ///
    /// # Errors
    /// [`BenchError::Usage`] for a root past the last rank.
    pub fn new(args: &Args, world: usize) -> Result<Self, BenchError> {
        let collectives = args.collectives();
        if args.root as usize >= world && collectives.iter().any(|c| c.has_root()) {
            return Err(BenchError::Usage(format!(
                "-r {} is not a rank: with {world} GPU(s) the root must be in 0..{world}",
                args.root
            )));
        }
        Ok(Self {
            collectives,
            sizes: sweep(
                args.min_bytes,
                args.max_bytes,
                args.step_factor,
                args.step_bytes,
            ),
            dtype: args.datatype.data_type(),
            op: args.op.reduce_op(),
            root: args.root,
            iters: args.iters,
            warmup: args.warmup_iters,
            check: args.check_enabled(),
            layers: args.layers(),
            batches: args.batches(),
            graph: args.graph,
            world,
            group_comms: args.group_comms.comm_mode(),
            step: if args.step_factor > 1 {
                format!("{}(factor)", args.step_factor)
            } else {
                format!("{}(bytes)", args.step_bytes)
            },
        })
    }

    /// The counts of `collective` at every size.
    pub fn counts(&self, collective: Collective) -> Vec<OpCounts> {
        self.sizes
            .iter()
            .map(|&size| OpCounts::new(collective, size, self.dtype.size_bytes(), self.world))
            .collect()
    }

    /// `(A, B)` of `--compare`.
    pub fn compare(&self) -> Option<(LayerKind, LayerKind)> {
        match self.layers[..] {
            [a, b] => Some((a, b)),
            _ => None,
        }
    }

    /// The layer whose table is printed (B of `--compare`).
    pub fn table_layer(&self) -> LayerKind {
        self.layers.last().copied().unwrap_or(LayerKind::Core)
    }

    /// `tensor` or `tensor vs raw`: the layers as titles name them.
    pub fn layers_title(&self) -> String {
        match self.compare() {
            Some((a, b)) => format!("{} vs {}", b.name(), a.name()),
            None => self.table_layer().name().to_string(),
        }
    }

    /// Table rows the run prints (one per collective and size), for the progress bar.
    pub fn row_count(&self) -> u64 {
        (self.collectives.len() * self.sizes.len()) as u64
    }
}

/// A barrier for the rank threads that a failing rank can break, so that
/// no thread waits forever for one that has given up.
#[derive(Debug)]
pub struct RankBarrier {
    state: Mutex<BarrierState>,
    changed: Condvar,
    parties: usize,
}

#[derive(Debug, Default)]
struct BarrierState {
    arrived: usize,
    generation: u64,
    broken: bool,
}

impl RankBarrier {
    /// A barrier for `parties` threads.
    pub fn new(parties: usize) -> Self {
        Self {
            state: Mutex::new(BarrierState::default()),
            changed: Condvar::new(),
            parties: parties.max(1),
        }
    }

    /// Waits until every party has arrived.
    ///
    /// # Errors
    /// [`BenchError::Stopped`] once the barrier is broken.
    pub fn wait(&self) -> Result<(), BenchError> {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if state.broken {
            return Err(BenchError::Stopped);
        }
        state.arrived += 1;
        if state.arrived == self.parties {
            state.arrived = 0;
            state.generation += 1;
            self.changed.notify_all();
            return Ok(());
        }
        let generation = state.generation;
        while state.generation == generation && !state.broken {
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        if state.generation == generation {
            Err(BenchError::Stopped)
        } else {
            Ok(())
        }
    }

    /// Breaks the barrier: every waiting and later [`RankBarrier::wait`] fails.
    pub fn break_all(&self) {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .broken = true;
        self.changed.notify_all();
    }
}

/// A GPU as the table's preamble describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The device ordinal (= rank).
    pub ordinal: usize,
    /// The marketing name (`NVIDIA H200`).
    pub name: String,
    /// The PCI address (`0000:04:00`).
    pub pci: String,
}

impl DeviceInfo {
    fn of(device: &Device) -> Self {
        use cudarc::driver::sys::CUdevice_attribute as A;
        let context = device.context();
        let attribute = |a| context.attribute(a).unwrap_or(0);
        Self {
            ordinal: device.ordinal(),
            name: context.name().unwrap_or_else(|_| "unknown GPU".to_string()),
            pci: format!(
                "{:04x}:{:02x}:{:02x}",
                attribute(A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID),
                attribute(A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID),
                attribute(A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)
            ),
        }
    }
}

/// The name of the group layers' process groups (one per layer and run),
/// before the layer's name.
const GROUP_NAME: &str = "nccl-perf";

/// What a rank thread tells the main thread.
enum Message {
    /// The rank has its communicator (and process groups, for the group
    /// layers).
    Ready {
        rank: usize,
        device: DeviceInfo,
        abort: AbortHandle,
        groups: Vec<ProcessGroup>,
    },
    /// One mode of one row of one layer, measured on one rank; no time when
    /// the layer cannot issue that mode.
    Measured {
        key: RowKey,
        time_us: Option<f64>,
        wrong: Option<u64>,
    },
    /// The rank is done.
    Finished,
    /// The rank failed.
    Failed { rank: usize, error: BenchError },
}

/// Identifies one mode of one row of one layer: (collective index, size
/// index, mode, index of the layer in [`Plan::layers`]).
type RowKey = (usize, usize, Mode, usize);

/// One rank's result for one mode of one layer: the median time per call
/// in microseconds (`None` where the layer cannot issue the call) and the
/// wrong elements (`None` when not checked).
type Sample = (Option<f64>, Option<u64>);

/// What a finished run found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    /// Wrong elements over every row, mode, layer and rank.
    pub wrong: u64,
    /// Every row of every layer, in the order they were reported.
    pub rows: Vec<Row>,
}

fn create_file(path: &Path) -> Result<std::fs::File, BenchError> {
    std::fs::File::create(path).map_err(|source| BenchError::Io {
        what: path.display().to_string(),
        source,
    })
}

/// A progress bar of `rows` table rows on stderr, or a hidden one when
/// stderr is not a terminal (so logs and pipes get no control characters).
pub fn progress_bar(rows: u64) -> ProgressBar {
    if !io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(rows), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} rows (eta {eta}) {msg}",
    ) {
        bar.set_style(style);
    }
    bar.set_message("starting the ranks");
    bar
}

/// Runs the benchmark of `args` on `env`, writing the table to `out`.
///
/// # Errors
/// Bad flag combinations, a failing rank, or output that cannot be written.
pub fn run(args: &Args, env: &Environment, out: impl Write) -> Result<Summary, BenchError> {
    let world = world_size(args.ngpus, env.gpu_count)?;
    let plan = Arc::new(Plan::new(args, world)?);
    let json: Option<Box<dyn Write>> = match &args.json {
        Some(path) => Some(Box::new(io::BufWriter::new(create_file(path)?))),
        None => None,
    };
    if let Some(path) = &args.plot {
        // Fail now, not after the run, when the plot cannot be written.
        create_file(path)?;
    }
    let progress = progress_bar(plan.row_count());
    let mut reporter = Reporter::new(out, json).with_progress(progress.clone());
    let id = UniqueId::new()?;
    // Where the group layer's processes (the rank threads) meet.
    let store = Arc::new(InProcessStore::new());
    let barrier = Arc::new(RankBarrier::new(world));
    let (sender, receiver) = mpsc::channel();
    let mut threads = Vec::with_capacity(world);
    for rank in 0..world {
        let (plan, barrier, sender) = (Arc::clone(&plan), Arc::clone(&barrier), sender.clone());
        let store = Arc::clone(&store);
        let thread = std::thread::Builder::new()
            .name(format!("nccl-perf rank {rank}"))
            .spawn(move || rank_thread(rank, &plan, id, &store, &barrier, &sender))
            .map_err(|source| BenchError::Io {
                what: "a rank thread".to_string(),
                source,
            })?;
        threads.push(thread);
    }
    drop(sender);
    let mut gatherer = Gatherer {
        receiver,
        pending: HashMap::new(),
        aborts: Vec::new(),
        groups: Vec::new(),
        world,
        barrier,
        progress: progress.clone(),
    };
    let summary = gatherer.report(&plan, env, &mut reporter);
    progress.finish_and_clear();
    if summary.is_err() {
        // Ranks may be blocked inside NCCL: abort them all and leave the
        // threads behind (the process exits next).
        gatherer.stop_everyone();
        return summary;
    }
    for thread in threads {
        let _ = thread.join();
    }
    if let (Some(path), Ok(summary)) = (&args.plot, &summary) {
        let title = format!(
            "nccl-perf {}: {} world {} {}",
            plan.layers_title(),
            plan.dtype.short_name(),
            plan.world,
            if plan.graph > 0 {
                format!("(CUDA graph x{})", plan.graph)
            } else {
                String::new()
            }
        );
        crate::plot::write_svg(path, &summary.rows, title.trim_end())?;
    }
    summary
}

fn rank_thread(
    rank: usize,
    plan: &Plan,
    id: UniqueId,
    store: &Arc<InProcessStore>,
    barrier: &RankBarrier,
    sender: &Sender<Message>,
) {
    let message = match run_rank(rank, plan, id, store, barrier, sender) {
        Ok(()) => Message::Finished,
        Err(error) => {
            barrier.break_all();
            Message::Failed { rank, error }
        }
    };
    let _ = sender.send(message);
}

/// One rank: `id` is the bench communicator's unique id, `store` where
/// the group layer's processes (the rank threads) meet.
fn run_rank(
    rank: usize,
    plan: &Plan,
    id: UniqueId,
    store: &Arc<InProcessStore>,
    barrier: &RankBarrier,
    sender: &Sender<Message>,
) -> Result<(), BenchError> {
    let device = Device::new(rank)?;
    device.bind_to_thread()?;
    let stream = device.new_stream()?;
    let core = Communicator::new(device.clone(), plan.world as i32, id, rank as i32)?;
    let abort = core.abort_handle();
    // The tensor layer needs nccl-tensor's communicator; the raw and core
    // layers use the nccl-core communicator inside it.
    let comm = nccl_tensor::Communicator::from_core(core)?;
    let groups = plan
        .layers
        .iter()
        .filter_map(|&kind| Some((kind, kind.stream_mode()?)))
        .map(|(kind, mode)| {
            ProcessGroup::new(
                &format!("{GROUP_NAME}-{}", kind.name()),
                rank,
                plan.world,
                store.clone(),
                "in-process",
                GroupOptions::default()
                    .with_stream_mode(mode)
                    .with_comm_mode(plan.group_comms),
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    let _ = sender.send(Message::Ready {
        rank,
        device: DeviceInfo::of(&device),
        abort,
        groups: groups.clone(),
    });
    for group in &groups {
        // The group's first operation creates its communicator, with every
        // rank; a barrier now keeps that out of the timed batches and CUDA
        // graph captures, whatever -w and -c are.
        group.barrier(&stream)?.wait()?;
    }
    {
        let layers = plan
            .layers
            .iter()
            .map(|&kind| new_layer(kind, &comm, &groups, &stream))
            .collect::<Result<Vec<_>, _>>()?;
        for (index, &collective) in plan.collectives.iter().enumerate() {
            run_collective(
                rank, index, collective, plan, &layers, &stream, barrier, sender,
            )?;
        }
    }
    stream
        .synchronize()
        .map_err(BenchError::cuda("synchronizing the stream at the end"))?;
    // Collective, like the finalize below: every rank gets here.
    for group in &groups {
        group.destroy()?;
    }
    comm.core().finalize()?;
    Ok(())
}

/// Binds `call` through `layer` on `buffers`.
fn bind<'s>(
    layer: &'s dyn Layer,
    call: &Call,
    buffers: &'s mut DeviceBuffers,
) -> Result<Launch<'s>, BenchError> {
    // SAFETY: every `call` here comes from `Call::new` over `buffers`'
    // own addresses with `OpCounts` of a size no larger than the one the
    // buffers were allocated for (`buffer_elems()` elements each, which
    // covers every element either mode touches); the launcher borrows
    // `buffers`, so they outlive it, on the rank's device. Every rank binds
    // and launches the same sequence of calls.
    unsafe { layer.bind(call, buffers) }
}

#[allow(clippy::too_many_arguments)]
fn run_collective(
    rank: usize,
    index: usize,
    collective: Collective,
    plan: &Plan,
    layers: &[Box<dyn Layer + '_>],
    stream: &Arc<CudaStream>,
    barrier: &RankBarrier,
    sender: &Sender<Message>,
) -> Result<(), BenchError> {
    let all_counts = plan.counts(collective);
    let elems = all_counts
        .iter()
        .map(OpCounts::buffer_elems)
        .max()
        .unwrap_or(0);
    let mut buffers = DeviceBuffers::alloc(plan.dtype, elems, stream)?;
    let (send_base, recv_base) = buffers.addresses(stream);
    for (size_index, counts) in all_counts.iter().enumerate() {
        for mode in Mode::BOTH {
            let call = Call::new(
                collective, mode, counts, send_base, recv_base, plan.dtype, plan.op, plan.root,
                rank, plan.world,
            );
            let setup = CheckSetup {
                collective,
                mode,
                counts: *counts,
                dtype: plan.dtype,
                op: plan.op,
                root: plan.root as usize,
                rank,
                world: plan.world,
            };
            let results = measure_mode(&call, &setup, plan, layers, &mut buffers, stream, barrier)?;
            for (slot, (time_us, wrong)) in results.into_iter().enumerate() {
                let _ = sender.send(Message::Measured {
                    key: (index, size_index, mode, slot),
                    time_us,
                    wrong,
                });
            }
        }
    }
    stream
        .synchronize()
        .map_err(BenchError::cuda("synchronizing before freeing the buffers"))?;
    Ok(())
}

/// Checks, warms up, (captures) and times one call through every layer of
/// the plan: per layer, the median time per call (`None` where the layer
/// cannot issue the call) and this rank's wrong elements.
fn measure_mode(
    call: &Call,
    setup: &CheckSetup,
    plan: &Plan,
    layers: &[Box<dyn Layer + '_>],
    buffers: &mut DeviceBuffers,
    stream: &Arc<CudaStream>,
    barrier: &RankBarrier,
) -> Result<Vec<Sample>, BenchError> {
    let supported: Vec<bool> = layers
        .iter()
        .map(|layer| layer.supports(call.collective, call.mode))
        .collect();
    let active = || {
        layers
            .iter()
            .zip(&supported)
            .enumerate()
            .filter(|(_, (_, supported))| **supported)
            .map(|(slot, (layer, _))| (slot, layer.as_ref()))
    };
    let mut wrong = vec![None; layers.len()];
    if plan.check
        && let Some(data) = setup.data()
    {
        for (slot, layer) in active() {
            wrong[slot] = Some(check_once(
                layer, call, setup, &data, buffers, stream, barrier,
            )?);
        }
    }
    for (_, layer) in active() {
        let mut launch = bind(layer, call, buffers)?;
        for _ in 0..plan.warmup {
            launch()?;
        }
    }
    stream
        .synchronize()
        .map_err(BenchError::cuda("synchronizing after the warm-up"))?;
    let mut graphs: Vec<Option<Captured>> = (0..layers.len()).map(|_| None).collect();
    if plan.graph > 0 {
        for (slot, layer) in active() {
            let mut launch = bind(layer, call, buffers)?;
            let captured =
                capture(&mut launch, plan.iters, stream).map_err(|source| BenchError::Capture {
                    layer: layer.kind().name(),
                    collective: call.collective.name(),
                    iters: plan.iters,
                    source: Box::new(source),
                })?;
            // One untimed replay uploads the graph and warms it up.
            captured.replay()?;
            graphs[slot] = Some(captured);
        }
        stream
            .synchronize()
            .map_err(BenchError::cuda("synchronizing after the graph warm-up"))?;
    }
    let mut samples: Vec<Vec<f64>> = vec![Vec::with_capacity(plan.batches as usize); layers.len()];
    for _ in 0..plan.batches {
        for (slot, layer) in active() {
            let time = match &graphs[slot] {
                Some(graph) => {
                    barrier.wait()?;
                    time_replays(graph, plan.graph, plan.iters, stream)?
                }
                None => {
                    let mut launch = bind(layer, call, buffers)?;
                    barrier.wait()?;
                    time_launches(&mut launch, plan.iters, stream)?
                }
            };
            samples[slot].push(time);
        }
    }
    Ok(samples
        .iter()
        .zip(wrong)
        .map(|(times, wrong)| (median(times), wrong))
        .collect())
}

/// Fills the inputs, poisons the outputs, runs the call once through
/// `layer` and counts this rank's wrong elements.
fn check_once(
    layer: &dyn Layer,
    call: &Call,
    setup: &CheckSetup,
    data: &CheckData,
    buffers: &mut DeviceBuffers,
    stream: &Arc<CudaStream>,
    barrier: &RankBarrier,
) -> Result<u64, BenchError> {
    buffers.upload(&data.send, &data.recv, stream)?;
    stream
        .synchronize()
        .map_err(BenchError::cuda("synchronizing after the check inputs"))?;
    barrier.wait()?;
    {
        let mut launch = bind(layer, call, buffers)?;
        launch()?;
    }
    stream
        .synchronize()
        .map_err(BenchError::cuda("synchronizing after the checked run"))?;
    let Some(expected) = &data.expected else {
        return Ok(0);
    };
    if expected.is_empty() {
        return Ok(0);
    }
    let elem = setup.dtype.size_bytes();
    let got = buffers.download_recv(data.result_offset, expected.len() / elem, stream)?;
    Ok(count_wrong(setup.dtype, &got, expected))
}

/// The main thread's side: gathers measurements into rows, in plan order.
struct Gatherer {
    receiver: Receiver<Message>,
    pending: HashMap<RowKey, Vec<Sample>>,
    aborts: Vec<AbortHandle>,
    groups: Vec<ProcessGroup>,
    world: usize,
    barrier: Arc<RankBarrier>,
    progress: ProgressBar,
}

/// The rank-averaged time (`None` unless every rank has one) and summed
/// wrong count of one mode.
fn combine(values: &[Sample]) -> Sample {
    let times: Option<Vec<f64>> = values.iter().map(|(t, _)| *t).collect();
    let time = times
        .filter(|times| !times.is_empty())
        .map(|times| times.iter().sum::<f64>() / times.len() as f64);
    let wrong = values.iter().map(|(_, w)| *w).sum::<Option<u64>>();
    (time, wrong)
}

impl Gatherer {
    /// Receives one message; a failure or a vanished rank is an error.
    fn receive(&mut self) -> Result<Option<(usize, DeviceInfo)>, BenchError> {
        match self.receiver.recv() {
            Ok(Message::Ready {
                rank,
                device,
                abort,
                groups,
            }) => {
                self.aborts.push(abort);
                self.groups.extend(groups);
                Ok(Some((rank, device)))
            }
            Ok(Message::Measured {
                key,
                time_us,
                wrong,
            }) => {
                self.pending.entry(key).or_default().push((time_us, wrong));
                Ok(None)
            }
            Ok(Message::Finished) => Ok(None),
            Ok(Message::Failed { rank, error }) => Err(BenchError::Rank {
                rank,
                source: Box::new(error),
            }),
            Err(_) => Err(BenchError::Lost),
        }
    }

    /// The rank-averaged time and summed wrong count of `key`.
    fn gather(&mut self, key: RowKey) -> Result<Sample, BenchError> {
        loop {
            if self
                .pending
                .get(&key)
                .is_some_and(|values| values.len() >= self.world)
            {
                let values = self.pending.remove(&key).unwrap_or_default();
                return Ok(combine(&values));
            }
            self.receive()?;
        }
    }

    fn stop_everyone(&self) {
        self.barrier.break_all();
        for abort in &self.aborts {
            let _ = abort.abort();
        }
        for group in &self.groups {
            // The process exits next, so an abort that stalls changes nothing.
            let _ = group.abort();
        }
    }

    fn report<W: Write>(
        &mut self,
        plan: &Plan,
        env: &Environment,
        reporter: &mut Reporter<W>,
    ) -> Result<Summary, BenchError> {
        let io_error = |source| BenchError::Io {
            what: "the output".to_string(),
            source,
        };
        let mut devices: Vec<Option<DeviceInfo>> = vec![None; self.world];
        while devices.iter().any(Option::is_none) {
            if let Some((rank, device)) = self.receive()? {
                devices[rank] = Some(device);
            }
        }
        let devices: Vec<DeviceInfo> = devices.into_iter().flatten().collect();
        for line in preamble(plan, env, &devices) {
            reporter.line(&line).map_err(io_error)?;
        }
        let mut summary = Summary::default();
        let elem = plan.dtype.size_bytes();
        for (index, &collective) in plan.collectives.iter().enumerate() {
            for line in collective_header(collective, plan, env, &devices) {
                reporter.line(&line).map_err(io_error)?;
            }
            let mut table_rows = Vec::with_capacity(plan.sizes.len());
            let mut baseline_rows = Vec::new();
            let mut wrong_total = 0;
            for (size_index, counts) in plan.counts(collective).iter().enumerate() {
                let mut rows = Vec::with_capacity(plan.layers.len());
                for (slot, layer) in plan.layers.iter().enumerate() {
                    let mut measure = |mode| -> Result<Option<Measurement>, BenchError> {
                        let (time_us, wrong) = self.gather((index, size_index, mode, slot))?;
                        Ok(time_us.map(|time_us| {
                            let (algbw, busbw) =
                                bandwidths(collective, counts, elem, plan.world, time_us);
                            Measurement {
                                time_us,
                                algbw,
                                busbw,
                                wrong,
                            }
                        }))
                    };
                    let out_of_place = measure(Mode::OutOfPlace)?;
                    let in_place = measure(Mode::InPlace)?;
                    wrong_total += [out_of_place, in_place]
                        .iter()
                        .flatten()
                        .filter_map(|m| m.wrong)
                        .sum::<u64>();
                    rows.push(Row {
                        collective: collective.name(),
                        layer: layer.name(),
                        world_size: plan.world,
                        size: counts.printed_bytes(elem),
                        count: counts.param,
                        dtype: plan.dtype.short_name(),
                        redop: collective.redop_column(plan.op),
                        root: collective.root_column(plan.root),
                        out_of_place,
                        in_place,
                        ratio: None,
                        graph: plan.graph,
                    });
                }
                let mut shown = rows.pop().ok_or(BenchError::Lost)?;
                if let Some(baseline) = rows.pop() {
                    shown.ratio = Some(Ratio::between(&baseline, &shown));
                    reporter.json_row(&baseline).map_err(io_error)?;
                    summary.rows.push(baseline.clone());
                    baseline_rows.push(baseline);
                }
                reporter.row(&shown).map_err(io_error)?;
                self.progress.inc(1);
                self.progress
                    .set_message(format!("{} {} B", collective.name(), shown.size));
                summary.rows.push(shown.clone());
                table_rows.push(shown);
            }
            for line in table_footer(wrong_total, average_busbw(&table_rows)) {
                reporter.line(&line).map_err(io_error)?;
            }
            if let Some((a, b)) = plan.compare() {
                for line in compare_footer(a, b, &baseline_rows, &table_rows) {
                    reporter.line(&line).map_err(io_error)?;
                }
            }
            summary.wrong += wrong_total;
        }
        reporter.line("#").map_err(io_error)?;
        Ok(summary)
    }
}

/// The comment lines after a `--compare` table: the baseline's average bus
/// bandwidth and the median ratio of each mode over the sizes.
fn compare_footer(a: LayerKind, b: LayerKind, baseline: &[Row], shown: &[Row]) -> [String; 2] {
    let median_ratio = |mode| {
        let ratios: Vec<f64> = shown
            .iter()
            .filter_map(|row| row.ratio.and_then(|r| r.of(mode)))
            .collect();
        median(&ratios).map_or_else(|| "N/A".to_string(), |r| format!("{r:.3}"))
    };
    [
        format!(
            "# {:<20} : {} ",
            format!("Avg bus bandwidth ({})", a.name()),
            c_general(average_busbw(baseline))
        ),
        format!(
            "# {:<20} : out-of-place {} in-place {}",
            format!("Median ratio {}/{}", b.name(), a.name()),
            median_ratio(Mode::OutOfPlace),
            median_ratio(Mode::InPlace)
        ),
    ]
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_string())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

/// The comment lines before the tables: program, library, parameters, devices.
fn preamble(plan: &Plan, env: &Environment, devices: &[DeviceInfo]) -> Vec<String> {
    let (min, max) = (
        plan.sizes.first().copied().unwrap_or(0),
        plan.sizes.last().copied().unwrap_or(0),
    );
    let mut lines = vec![
        format!(
            "# nccl-perf {} (layer {}) nccl-library {} ({})",
            env!("CARGO_PKG_VERSION"),
            plan.layers_title(),
            env.library.version(),
            env.library.path()
        ),
        format!(
            "# nThread {} nGpus 1 minBytes {min} maxBytes {max} step: {} warmup iters: {} iters: {} agg iters: 1 validation: {} graph: {}",
            plan.world,
            plan.step,
            plan.warmup,
            plan.iters,
            u8::from(plan.check),
            plan.graph
        ),
    ];
    lines.extend(plan_notes(plan));
    lines.extend(["#".to_string(), "# Using devices".to_string()]);
    let (host, pid) = (hostname(), std::process::id());
    for device in devices {
        lines.push(format!(
            "#  Rank {:2} Group  0 Pid {pid:6} on {host:>10} device {:2} [{}] {}",
            device.ordinal, device.ordinal, device.pci, device.name
        ));
    }
    if plan.collectives.contains(&Collective::AllToAll) && !has_native_all_to_all(env.library) {
        lines.push(format!(
            "# note: libnccl {} has no ncclAlltoAll (NCCL 2.28+); all_to_all runs as grouped send/recv",
            env.library.version()
        ));
    }
    lines
}

/// Comment lines that say how the plan times and what its columns mean.
pub fn plan_notes(plan: &Plan) -> Vec<String> {
    let batches = format!(
        "median of {} batch(es) per size, mode and layer",
        plan.batches
    );
    let mut lines = vec![if plan.graph > 0 {
        format!(
            "# timing: {batches}; each batch replays a CUDA graph of {} captured call(s) {} times (time = batch / {})",
            plan.iters,
            plan.graph,
            u64::from(plan.iters) * u64::from(plan.graph)
        )
    } else {
        format!(
            "# timing: {batches}; each batch is {} back-to-back call(s), then one stream synchronisation",
            plan.iters
        )
    }];
    if let Some((a, b)) = plan.compare() {
        lines.push(format!(
            "# compare: layers {a} and {b} interleaved on the same buffers (warm-up {a}, {b}, then batches {a}, {b}, {a}, ...); \
             the table is {b}'s; its 'ratio' column, last in each half, is time({b}) / time({a}) at the same size and mode \
             (< 1: {b} is faster); --json has both layers' rows",
            a = a.name(),
            b = b.name()
        ));
    }
    let tensor_without_in_place: Vec<&str> = plan
        .collectives
        .iter()
        .filter(|&&c| !TensorLayer::has(c, Mode::InPlace))
        .map(|c| c.name())
        .collect();
    if plan.layers.contains(&LayerKind::Tensor) && !tensor_without_in_place.is_empty() {
        lines.push(format!(
            "# note: the tensor layer's safe API has no in-place {} (an input inside the output is refused): N/A",
            tensor_without_in_place.join(", ")
        ));
    }
    if plan.layers.iter().any(|kind| kind.stream_mode().is_some()) {
        lines.extend(group_notes(&plan.collectives, plan.group_comms));
    }
    if plan.graph > 0 {
        lines.push(
            "# note: cudarc's stream tracking is paused while capturing (each rank uses one stream)"
                .to_string(),
        );
    }
    lines
}

/// What the group layer's calls are, and which halves of `collectives` it
/// has no form for (printed `N/A`), with why.
fn group_notes(collectives: &[Collective], comms: CommMode) -> Vec<String> {
    let comms = match comms {
        CommMode::Blocking => "blocking",
        _ => "nonblocking",
    };
    let mut lines = vec![format!(
        "# note: the group layer's call is a ProcessGroup op + Work::wait on tensors of its own, \
         copied from and back to the buffers outside the timed batches; group-caller runs it on \
         the caller's stream (StreamMode::Caller), group on the group's NCCL stream; \
         {comms} communicators (--group-comms)"
    )];
    for (mode, label) in [
        (Mode::OutOfPlace, "out-of-place"),
        (Mode::InPlace, "in-place"),
    ] {
        let (mut names, mut reasons) = (Vec::new(), Vec::new());
        for &collective in collectives {
            if let Some(why) = GroupLayer::missing(collective, mode) {
                names.push(collective.name());
                if !reasons.contains(&why) {
                    reasons.push(why);
                }
            }
        }
        if !names.is_empty() {
            lines.push(format!(
                "# note: the group layer has no {label} {} ({}): N/A",
                names.join(", "),
                reasons.join("; ")
            ));
        }
    }
    lines
}

/// The comment lines naming one collective's table, then its column headers.
fn collective_header(
    collective: Collective,
    plan: &Plan,
    env: &Environment,
    devices: &[DeviceInfo],
) -> Vec<String> {
    let mut names: Vec<&str> = devices.iter().map(|d| d.name.as_str()).collect();
    names.dedup();
    let gpus = if names.len() == 1 {
        format!("{} x {}", devices.len(), names[0])
    } else {
        devices
            .iter()
            .map(|d| d.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let baseline = plan
        .compare()
        .map(|(a, _)| format!(" baseline {}", a.name()))
        .unwrap_or_default();
    let mut lines = vec![
        "#".to_string(),
        format!(
            "# Collective {} layer {}{baseline} nccl {} world {} gpus {}",
            collective.name(),
            plan.table_layer().name(),
            env.library.version(),
            plan.world,
            gpus
        ),
        "#".to_string(),
    ];
    lines.extend(table_header(plan.compare().is_some()));
    lines
}

/// The whole command: checks the machine, runs, and maps the outcome to an
/// exit status (0 ok, 1 failed or wrong results, 2 usage or missing
/// driver/GPU/NCCL). Errors are one line on stderr.
pub fn main_with(args: &Args) -> u8 {
    let outcome = crate::env::probe().and_then(|env| run(args, &env, io::stdout()));
    match outcome {
        Ok(summary) if summary.wrong == 0 => 0,
        Ok(summary) => {
            eprintln!(
                "nccl-perf: error: {} wrong element(s) found; see the #wrong columns",
                summary.wrong
            );
            1
        }
        Err(error) => {
            eprintln!("nccl-perf: error: {}", error.one_line());
            error.exit_code()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn barrier_releases_and_breaks() {
        let barrier = Arc::new(RankBarrier::new(3));
        let threads: Vec<_> = (0..3)
            .map(|_| {
                let barrier = Arc::clone(&barrier);
                std::thread::spawn(move || (0..10).all(|_| barrier.wait().is_ok()))
            })
            .collect();
        assert!(threads.into_iter().all(|t| t.join().unwrap()));

        let barrier = Arc::new(RankBarrier::new(2));
        let waiter = {
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || barrier.wait())
        };
        std::thread::sleep(std::time::Duration::from_millis(20));
        barrier.break_all();
        assert!(matches!(waiter.join().unwrap(), Err(BenchError::Stopped)));
        assert!(matches!(barrier.wait(), Err(BenchError::Stopped)));
    }

    #[test]
    fn plan_from_args() {
        let args = Args::try_parse_from(["nccl-perf", "-b", "8", "-e", "64", "-r", "1", "reduce"])
            .unwrap();
        let plan = Plan::new(&args, 2).unwrap();
        assert_eq!(plan.sizes, vec![8, 16, 32, 64]);
        assert_eq!(plan.collectives, vec![Collective::Reduce]);
        assert_eq!(plan.counts(Collective::Reduce)[0].param, 2);
        let error = Plan::new(&args, 1).unwrap_err();
        assert_eq!(error.exit_code(), 2);
        // A root past the last rank does not matter to collectives without one.
        let args = Args::try_parse_from(["nccl-perf", "-r", "5", "all_gather"]).unwrap();
        assert!(Plan::new(&args, 1).is_ok());
    }

    #[test]
    fn compare_and_graph_plans() {
        let args = Args::try_parse_from([
            "nccl-perf",
            "--compare",
            "raw,tensor",
            "-G",
            "100",
            "-n",
            "20",
            "-b",
            "8",
            "-e",
            "1K",
            "all_gather",
        ])
        .unwrap();
        let plan = Plan::new(&args, 1).unwrap();
        assert_eq!(plan.layers, vec![LayerKind::Raw, LayerKind::Tensor]);
        assert_eq!(plan.compare(), Some((LayerKind::Raw, LayerKind::Tensor)));
        assert_eq!(plan.table_layer(), LayerKind::Tensor);
        assert_eq!(plan.layers_title(), "tensor vs raw");
        assert_eq!((plan.graph, plan.batches, plan.row_count()), (100, 5, 8));
        let notes = plan_notes(&plan).join("\n");
        assert!(notes.contains("median of 5 batch(es)"), "{notes}");
        assert!(
            notes.contains("CUDA graph of 20 captured call(s) 100 times (time = batch / 2000)"),
            "{notes}"
        );
        assert!(notes.contains("time(tensor) / time(raw)"), "{notes}");
        assert!(notes.contains("no in-place all_gather"), "{notes}");
        assert!(notes.lines().all(|line| line.starts_with("# ")));

        let args = Args::try_parse_from(["nccl-perf", "--layer", "raw", "all_reduce"]).unwrap();
        let plan = Plan::new(&args, 2).unwrap();
        assert_eq!(plan.compare(), None);
        assert_eq!(plan.layers_title(), "raw");
        let notes = plan_notes(&plan);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("20 back-to-back call(s)"));
    }

    #[test]
    fn group_plans_note_the_halves_the_group_lacks() {
        let args = Args::try_parse_from(["nccl-perf", "--compare", "raw,group"]).unwrap();
        let plan = Plan::new(&args, 2).unwrap();
        assert_eq!(plan.layers, vec![LayerKind::Raw, LayerKind::Group]);
        assert_eq!(plan.layers_title(), "group vs raw");
        let notes = plan_notes(&plan).join("\n");
        assert!(notes.contains("ProcessGroup op + Work::wait"), "{notes}");
        assert!(
            notes.contains(
                "no out-of-place all_reduce, broadcast, reduce, sendrecv (its all_reduce"
            ),
            "{notes}"
        );
        assert!(
            notes
                .contains("no in-place all_gather, reduce_scatter, all_to_all, sendrecv (it takes"),
            "{notes}"
        );
        // Each reason once per line, sendrecv's included.
        assert_eq!(notes.matches("pair communicator").count(), 2, "{notes}");
        assert!(!notes.contains("tensor layer"), "{notes}");
        assert!(notes.lines().all(|line| line.starts_with("# ")));

        // Only the plan's collectives are named.
        let args = Args::try_parse_from(["nccl-perf", "--layer", "group", "all_gather"]).unwrap();
        let notes = plan_notes(&Plan::new(&args, 4).unwrap());
        assert_eq!(notes.len(), 3, "{notes:?}");
        assert!(
            notes[2].starts_with("# note: the group layer has no in-place all_gather (it takes")
        );
        assert!(notes[2].ends_with("): N/A"), "{notes:?}");

        // No group, no group notes.
        let args = Args::try_parse_from(["nccl-perf", "--layer", "tensor"]).unwrap();
        let notes = plan_notes(&Plan::new(&args, 1).unwrap()).join("\n");
        assert!(!notes.contains("group layer"), "{notes}");
    }

    #[test]
    fn no_progress_bar_without_a_terminal() {
        // Under the test harness stderr is a pipe or a file, never drawn on.
        if !io::stderr().is_terminal() {
            assert!(progress_bar(10).is_hidden());
        }
    }

    #[test]
    fn ranks_combine_into_one_time() {
        assert_eq!(
            combine(&[(Some(1.0), Some(0)), (Some(3.0), Some(2))]),
            (Some(2.0), Some(2))
        );
        assert_eq!(combine(&[(None, None), (None, None)]), (None, None));
        assert_eq!(combine(&[(Some(1.0), None)]), (Some(1.0), None));
    }

    #[test]
    fn compare_footer_lines() {
        let m = |time_us| Measurement {
            time_us,
            algbw: 1.0,
            busbw: 2.0,
            wrong: Some(0),
        };
        let row = |layer, oop, ip: Option<f64>| Row {
            collective: "all_reduce",
            layer,
            world_size: 2,
            size: 8,
            count: 2,
            dtype: "float",
            redop: "sum",
            root: -1,
            out_of_place: Some(m(oop)),
            in_place: ip.map(m),
            ratio: None,
            graph: 0,
        };
        let raw = vec![row("raw", 2.0, Some(1.0)), row("raw", 4.0, Some(1.0))];
        let mut tensor = vec![row("tensor", 3.0, None), row("tensor", 4.0, None)];
        for (b, a) in tensor.iter_mut().zip(&raw) {
            b.ratio = Some(Ratio::between(a, b));
        }
        let [avg, ratio] = compare_footer(LayerKind::Raw, LayerKind::Tensor, &raw, &tensor);
        assert_eq!(avg, "# Avg bus bandwidth (raw) : 2 ");
        assert_eq!(
            ratio,
            "# Median ratio tensor/raw : out-of-place 1.250 in-place N/A"
        );
    }
}
