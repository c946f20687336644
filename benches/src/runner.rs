//! Running a benchmark: one thread per GPU (rank = GPU index), one
//! communicator and one non-blocking stream per rank, and the main thread
//! gathering every rank's measurements into table rows.
//!
//! Per collective, each rank allocates its send and receive buffers once
//! (for the largest size) and takes their device addresses once. Then, per
//! size and mode (out-of-place, then in-place), it binds the call through
//! its layer, checks the result once (untimed, with `-c 1`), runs the
//! warm-up iterations, waits for every rank at a barrier, and times `iters`
//! back-to-back launches followed by one stream synchronisation. The time
//! of a row is the mean over the ranks, as nccl-tests reports by default.

use std::collections::HashMap;
use std::io::{self, Write};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use nccl_core::{AbortHandle, Communicator, DataType, Device, ReduceOp, UniqueId};

use crate::check::{CheckSetup, count_wrong};
use crate::cli::Args;
use crate::collective::{Collective, Mode};
use crate::env::{Environment, world_size};
use crate::error::BenchError;
use crate::layer::{Call, Launch, Layer, LayerKind, has_native_all_to_all, new_layer};
use crate::report::{Measurement, Reporter, Row, average_busbw, table_footer, table_header};
use crate::sizes::{OpCounts, bandwidths, sweep};

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
    /// Timed iterations.
    pub iters: u32,
    /// Warm-up iterations.
    pub warmup: u32,
    /// Whether results are checked.
    pub check: bool,
    /// The layer issuing the calls.
    pub layer: LayerKind,
    /// The number of ranks (GPUs).
    pub world: usize,
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
            layer: args.layer,
            world,
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

/// What a rank thread tells the main thread.
enum Message {
    /// The rank has its communicator.
    Ready {
        rank: usize,
        device: DeviceInfo,
        abort: AbortHandle,
    },
    /// One mode of one row, measured on one rank.
    Measured {
        key: RowKey,
        time_us: f64,
        wrong: Option<u64>,
    },
    /// The rank is done.
    Finished,
    /// The rank failed.
    Failed { rank: usize, error: BenchError },
}

/// Identifies one mode of one row: (collective index, size index, mode).
type RowKey = (usize, usize, Mode);

/// What a finished run found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Wrong elements over every row, mode and rank.
    pub wrong: u64,
}

/// Runs the benchmark of `args` on `env`, writing the table to `out`.
///
/// # Errors
/// Bad flag combinations, a failing rank, or output that cannot be written.
pub fn run(args: &Args, env: &Environment, out: impl Write) -> Result<Summary, BenchError> {
    let world = world_size(args.ngpus, env.gpu_count)?;
    let plan = Arc::new(Plan::new(args, world)?);
    let json: Option<Box<dyn Write>> = match &args.json {
        Some(path) => {
            let file = std::fs::File::create(path).map_err(|source| BenchError::Io {
                what: path.display().to_string(),
                source,
            })?;
            Some(Box::new(io::BufWriter::new(file)))
        }
        None => None,
    };
    let mut reporter = Reporter::new(out, json);
    let id = UniqueId::new()?;
    let barrier = Arc::new(RankBarrier::new(world));
    let (sender, receiver) = mpsc::channel();
    let mut threads = Vec::with_capacity(world);
    for rank in 0..world {
        let (plan, barrier, sender) = (Arc::clone(&plan), Arc::clone(&barrier), sender.clone());
        let thread = std::thread::Builder::new()
            .name(format!("nccl-perf rank {rank}"))
            .spawn(move || rank_thread(rank, &plan, id, &barrier, &sender))
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
        world,
        barrier,
    };
    let summary = gatherer.report(&plan, env, &mut reporter);
    if summary.is_err() {
        // Ranks may be blocked inside NCCL: abort them all and leave the
        // threads behind (the process exits next).
        gatherer.stop_everyone();
        return summary;
    }
    for thread in threads {
        let _ = thread.join();
    }
    summary
}

fn rank_thread(
    rank: usize,
    plan: &Plan,
    id: UniqueId,
    barrier: &RankBarrier,
    sender: &Sender<Message>,
) {
    let message = match run_rank(rank, plan, id, barrier, sender) {
        Ok(()) => Message::Finished,
        Err(error) => {
            barrier.break_all();
            Message::Failed { rank, error }
        }
    };
    let _ = sender.send(message);
}

fn run_rank(
    rank: usize,
    plan: &Plan,
    id: UniqueId,
    barrier: &RankBarrier,
    sender: &Sender<Message>,
) -> Result<(), BenchError> {
    let device = Device::new(rank)?;
    device.bind_to_thread()?;
    let stream = device.new_stream()?;
    let comm = Communicator::new(device.clone(), plan.world as i32, id, rank as i32)?;
    let _ = sender.send(Message::Ready {
        rank,
        device: DeviceInfo::of(&device),
        abort: comm.abort_handle(),
    });
    {
        let layer = new_layer(plan.layer, &comm, &stream)?;
        for (index, &collective) in plan.collectives.iter().enumerate() {
            run_collective(
                rank,
                index,
                collective,
                plan,
                layer.as_ref(),
                &stream,
                barrier,
                sender,
            )?;
        }
    }
    stream
        .synchronize()
        .map_err(BenchError::cuda("synchronizing the stream at the end"))?;
    comm.finalize()?;
    Ok(())
}

/// Allocates `bytes` (at least one) of device memory and returns it with its address.
fn allocate(stream: &Arc<CudaStream>, bytes: usize) -> Result<(CudaSlice<u8>, u64), BenchError> {
    let buffer = stream
        .alloc_zeros::<u8>(bytes.max(1))
        .map_err(BenchError::cuda("allocating a buffer"))?;
    let address = {
        let (address, _record) = buffer.device_ptr(stream);
        address
    };
    Ok((buffer, address))
}

#[allow(clippy::too_many_arguments)]
fn run_collective(
    rank: usize,
    index: usize,
    collective: Collective,
    plan: &Plan,
    layer: &dyn Layer,
    stream: &Arc<CudaStream>,
    barrier: &RankBarrier,
    sender: &Sender<Message>,
) -> Result<(), BenchError> {
    let all_counts = plan.counts(collective);
    let elem = plan.dtype.size_bytes();
    let bytes = all_counts
        .iter()
        .map(OpCounts::buffer_elems)
        .max()
        .unwrap_or(0)
        * elem;
    let (mut send, send_base) = allocate(stream, bytes)?;
    let (mut recv, recv_base) = allocate(stream, bytes)?;
    for (size_index, counts) in all_counts.iter().enumerate() {
        for mode in Mode::BOTH {
            let call = Call::new(
                collective, mode, counts, send_base, recv_base, plan.dtype, plan.op, plan.root,
                rank, plan.world,
            );
            // SAFETY: both buffers hold `bytes >= counts.buffer_elems() * elem`
            // bytes on this rank's device (the communicator's), which covers
            // every element the call touches in either mode (see `OpCounts`);
            // they outlive `launch`, which is dropped at the end of this
            // iteration. Every rank binds and launches the same sequence.
            let mut launch = unsafe { layer.bind(&call) }?;
            let wrong = if plan.check {
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
                check_once(&mut launch, &setup, &mut send, &mut recv, stream, barrier)?
            } else {
                None
            };
            let time_us = time_launches(&mut launch, plan.warmup, plan.iters, stream, barrier)?;
            let _ = sender.send(Message::Measured {
                key: (index, size_index, mode),
                time_us,
                wrong,
            });
        }
    }
    stream
        .synchronize()
        .map_err(BenchError::cuda("synchronizing before freeing the buffers"))?;
    Ok(())
}

/// Warm-up, a barrier, then `iters` launches and one synchronisation:
/// the time per launch in microseconds.
fn time_launches(
    launch: &mut Launch<'_>,
    warmup: u32,
    iters: u32,
    stream: &CudaStream,
    barrier: &RankBarrier,
) -> Result<f64, BenchError> {
    for _ in 0..warmup {
        launch()?;
    }
    stream
        .synchronize()
        .map_err(BenchError::cuda("synchronizing after the warm-up"))?;
    barrier.wait()?;
    let start = Instant::now();
    for _ in 0..iters {
        launch()?;
    }
    stream
        .synchronize()
        .map_err(BenchError::cuda("synchronizing after the timed loop"))?;
    Ok(start.elapsed().as_secs_f64() * 1.0e6 / f64::from(iters.max(1)))
}

/// Fills the inputs, poisons the outputs, runs the call once and counts
/// this rank's wrong elements; `None` when this mode is not checked.
fn check_once(
    launch: &mut Launch<'_>,
    setup: &CheckSetup,
    send: &mut CudaSlice<u8>,
    recv: &mut CudaSlice<u8>,
    stream: &Arc<CudaStream>,
    barrier: &RankBarrier,
) -> Result<Option<u64>, BenchError> {
    let Some(data) = setup.data() else {
        return Ok(None);
    };
    let upload = |what: &[u8], to: &mut CudaSlice<u8>| -> Result<(), BenchError> {
        if !what.is_empty() {
            stream
                .memcpy_htod(what, &mut to.slice_mut(0..what.len()))
                .map_err(BenchError::cuda("copying the check inputs to the GPU"))?;
        }
        Ok(())
    };
    upload(&data.send, send)?;
    upload(&data.recv, recv)?;
    stream
        .synchronize()
        .map_err(BenchError::cuda("synchronizing after the check inputs"))?;
    barrier.wait()?;
    launch()?;
    stream
        .synchronize()
        .map_err(BenchError::cuda("synchronizing after the checked run"))?;
    let Some(expected) = data.expected else {
        return Ok(Some(0));
    };
    if expected.is_empty() {
        return Ok(Some(0));
    }
    let start = data.result_offset * setup.dtype.size_bytes();
    let got = stream
        .clone_dtoh(&recv.slice(start..start + expected.len()))
        .map_err(BenchError::cuda("copying the check results from the GPU"))?;
    Ok(Some(count_wrong(setup.dtype, &got, &expected)))
}

/// The main thread's side: gathers measurements into rows, in plan order.
struct Gatherer {
    receiver: Receiver<Message>,
    pending: HashMap<RowKey, Vec<(f64, Option<u64>)>>,
    aborts: Vec<AbortHandle>,
    world: usize,
    barrier: Arc<RankBarrier>,
}

impl Gatherer {
    /// Receives one message; a failure or a vanished rank is an error.
    fn receive(&mut self) -> Result<Option<(usize, DeviceInfo)>, BenchError> {
        match self.receiver.recv() {
            Ok(Message::Ready {
                rank,
                device,
                abort,
            }) => {
                self.aborts.push(abort);
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
    fn gather(&mut self, key: RowKey) -> Result<(f64, Option<u64>), BenchError> {
        loop {
            if self
                .pending
                .get(&key)
                .is_some_and(|values| values.len() >= self.world)
            {
                let values = self.pending.remove(&key).unwrap_or_default();
                let time = values.iter().map(|(t, _)| t).sum::<f64>() / values.len().max(1) as f64;
                let wrong = values.iter().map(|(_, w)| *w).sum::<Option<u64>>();
                return Ok((time, wrong));
            }
            self.receive()?;
        }
    }

    fn stop_everyone(&self) {
        self.barrier.break_all();
        for abort in &self.aborts {
            let _ = abort.abort();
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
        for (index, &collective) in plan.collectives.iter().enumerate() {
            for line in collective_header(collective, plan, env, &devices) {
                reporter.line(&line).map_err(io_error)?;
            }
            let mut rows = Vec::with_capacity(plan.sizes.len());
            let mut wrong_total = 0;
            for (size_index, counts) in plan.counts(collective).iter().enumerate() {
                let mut measure = |mode| -> Result<Measurement, BenchError> {
                    let (time_us, wrong) = self.gather((index, size_index, mode))?;
                    let (algbw, busbw) = bandwidths(
                        collective,
                        counts,
                        plan.dtype.size_bytes(),
                        plan.world,
                        time_us,
                    );
                    Ok(Measurement {
                        time_us,
                        algbw,
                        busbw,
                        wrong,
                    })
                };
                let out_of_place = measure(Mode::OutOfPlace)?;
                let in_place = measure(Mode::InPlace)?;
                let row = Row {
                    collective: collective.name(),
                    layer: plan.layer.name(),
                    world_size: plan.world,
                    size: counts.printed_bytes(plan.dtype.size_bytes()),
                    count: counts.param,
                    dtype: plan.dtype.short_name(),
                    redop: collective.redop_column(plan.op),
                    root: collective.root_column(plan.root),
                    out_of_place,
                    in_place,
                };
                reporter.row(&row).map_err(io_error)?;
                wrong_total += out_of_place.wrong.unwrap_or(0) + in_place.wrong.unwrap_or(0);
                rows.push(row);
            }
            for line in table_footer(wrong_total, average_busbw(&rows)) {
                reporter.line(&line).map_err(io_error)?;
            }
            summary.wrong += wrong_total;
        }
        reporter.line("#").map_err(io_error)?;
        Ok(summary)
    }
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
            plan.layer.name(),
            env.library.version(),
            env.library.path()
        ),
        format!(
            "# nThread {} nGpus 1 minBytes {min} maxBytes {max} step: {} warmup iters: {} iters: {} agg iters: 1 validation: {} graph: 0",
            plan.world,
            plan.step,
            plan.warmup,
            plan.iters,
            u8::from(plan.check)
        ),
        "#".to_string(),
        "# Using devices".to_string(),
    ];
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
    let mut lines = vec![
        "#".to_string(),
        format!(
            "# Collective {} layer {} nccl {} world {} gpus {}",
            collective.name(),
            plan.layer.name(),
            env.library.version(),
            plan.world,
            gpus
        ),
        "#".to_string(),
    ];
    lines.extend(table_header());
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
}
