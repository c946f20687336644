//! `group-soak`: many small `ProcessGroup` all-reduces in a loop, with the
//! process's resident memory, the device's used memory and the watchdog's
//! backlog sampled along the way. A report, not a timed test: it prints
//! one row per sample and a verdict, and exits 1 when memory grew after
//! the warm-up by more than the allowance beyond what the same loop of raw
//! `ncclAllReduce` calls grows (NCCL 2.28.3 itself keeps about 176 bytes
//! per call; `--baseline false` judges the growth in all).
//!
//! Alone it is world size 1. Run as every rank of a launch
//! (`nccl-launch -n 2 target/release/group-soak`) it joins the launch's
//! store (rank 0 hosts it on `MASTER_PORT`): its group is a group of every
//! rank, and its raw and tensor communicators meet over unique ids rank 0
//! shares there. Every rank prints its own rows and verdict; every rank
//! exits 1 when any rank's memory grew beyond the allowance. The device
//! figure is the GPU's used memory, so on simulated hosts (every rank on
//! GPU 0) it holds every rank's growth, as the baseline's does; the ops/s
//! there (sockets, one GPU) stand for no real world of that size.
//!
//! ```text
//! group-soak [--ops 1000000] [--samples 10] [--sync-every 1000] [--warmup-samples 2] [--allow-mib 8]
//!            [--mode group|tensor-blocking|tensor-nonblocking|raw] [--baseline true|false]
//! ```

use nccl_group::Diagnostics;
use nccl_group::Lifecycle;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use cudarc::driver::CudaStream;
use nccl_core::{Device, ReduceOp};
use nccl_group::{GroupOptions, ProcessGroup};
use nccl_perf::World;
use nccl_tensor::Tensor;

/// Many small group collectives, with memory sampled.
#[derive(Parser, Debug)]
#[command(name = "group-soak")]
struct Args {
    /// All-reduces in all.
    #[arg(long, default_value_t = 1_000_000)]
    ops: u64,
    /// Samples over the run (one row each).
    #[arg(long, default_value_t = 10)]
    samples: u64,
    /// Block the CPU on the GPU every this many operations (as a training
    /// loop does once per step), so the queue stays bounded.
    #[arg(long, default_value_t = 1000)]
    sync_every: u64,
    /// Samples treated as warm-up (memory may grow while pools fill).
    #[arg(long, default_value_t = 2)]
    warmup_samples: u64,
    /// Growth allowed after the warm-up, in MiB, for host and device each.
    #[arg(long, default_value_t = 8)]
    allow_mib: u64,
    /// Elements of the all-reduced f32 tensor (2 = 8 bytes).
    #[arg(long, default_value_t = 2)]
    elements: usize,
    /// What issues the all-reduces: the process group, or (to tell the
    /// group's memory from NCCL's) nccl-tensor's communicator on a
    /// blocking or a nonblocking NCCL communicator, with no group around it.
    #[arg(long, value_enum, default_value_t = Mode::Group)]
    mode: Mode,
    /// First run the same loop through nccl-core's raw call, and judge
    /// `--mode` by its growth beyond that baseline (NCCL's own).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    baseline: bool,
}

/// What issues the all-reduces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Mode {
    /// `ProcessGroup::all_reduce` + `Work::wait` (watchdog, recorder, events).
    Group,
    /// `nccl_tensor::Communicator::all_reduce` on a blocking communicator.
    TensorBlocking,
    /// The same on a nonblocking communicator (as the group creates).
    TensorNonblocking,
    /// nccl-core's raw `all_reduce` on a blocking communicator, on a
    /// buffer outside cudarc's stream tracking: NCCL and the driver alone.
    Raw,
}

/// Issues one in-place all-reduce; blocks the CPU on it when `sync`.
enum Issuer {
    Group(ProcessGroup, Option<Tensor<f32>>),
    Tensor(nccl_tensor::Communicator, Tensor<f32>),
    /// The communicator, the buffer's device address and its elements.
    Raw(
        nccl_core::Communicator,
        cudarc::driver::sys::CUdeviceptr,
        usize,
    ),
}

impl Issuer {
    /// The issuer of `mode` for this rank of `world` (every rank creates
    /// the same issuers in the same order).
    fn new(
        mode: Mode,
        world: &World,
        device: &Device,
        stream: &Arc<CudaStream>,
        elements: usize,
    ) -> Result<Self, String> {
        let tensor = Tensor::<f32>::zeros(stream, &[elements]).map_err(|e| e.to_string())?;
        let blocking = match mode {
            Mode::Group => {
                let group = world
                    .group("soak", GroupOptions::default())
                    .map_err(|e| e.to_string())?;
                return Ok(Issuer::Group(group, Some(tensor)));
            }
            Mode::TensorBlocking | Mode::Raw => true,
            Mode::TensorNonblocking => false,
        };
        let config = nccl_core::Config::new().with_blocking(blocking);
        // One id per mode: the baseline and the judged mode never share one.
        let id = world
            .unique_id(&format!("{mode:?}"))
            .map_err(|e| e.to_string())?;
        let core = nccl_core::Communicator::with_config(
            device.clone(),
            world.size,
            id,
            world.rank,
            &config,
        )
        .map_err(|e| e.to_string())?;
        if mode == Mode::Raw {
            // A buffer of the driver's own, so cudarc records no events on it.
            let bytes = elements * std::mem::size_of::<f32>();
            // SAFETY: a plain allocation on the device's current context
            // (`with_config` bound it), zeroed before use, freed in `finish`.
            let buffer = unsafe {
                let buffer =
                    cudarc::driver::result::malloc_sync(bytes).map_err(|e| e.to_string())?;
                cudarc::driver::result::memset_d8_sync(buffer, 0, bytes)
                    .map_err(|e| e.to_string())?;
                buffer
            };
            return Ok(Issuer::Raw(core, buffer, elements));
        }
        let comm = nccl_tensor::Communicator::from_core(core).map_err(|e| e.to_string())?;
        Ok(Issuer::Tensor(comm, tensor))
    }

    fn all_reduce(&mut self, op: u64, sync: bool, stream: &Arc<CudaStream>) -> Result<(), String> {
        match self {
            Issuer::Group(group, slot) => {
                let tensor = slot
                    .take()
                    .ok_or("the tensor was lost by an earlier error")?;
                let work = group
                    .all_reduce(tensor, ReduceOp::Sum, stream)
                    .map_err(|e| format!("all_reduce #{op}: {}", e.error))?;
                if sync {
                    work.synchronize(Duration::from_secs(60))
                        .map_err(|e| format!("synchronize after #{op}: {e}"))?;
                }
                *slot = Some(work.wait().map_err(|e| format!("wait #{op}: {e}"))?);
            }
            Issuer::Raw(comm, buffer, elements) => {
                let pointer = *buffer as usize as *mut std::ffi::c_void;
                // SAFETY: `buffer` holds `elements` f32 on the communicator's
                // device and stays allocated until `finish`.
                let _ = unsafe {
                    comm.all_reduce(
                        pointer,
                        pointer,
                        *elements,
                        nccl_core::DataType::Float32,
                        ReduceOp::Sum,
                        stream,
                    )
                }
                .map_err(|e| format!("all_reduce #{op}: {e}"))?;
                if sync {
                    stream.synchronize().map_err(|e| e.to_string())?;
                }
            }
            Issuer::Tensor(comm, tensor) => {
                let status = comm
                    .all_reduce(&mut *tensor, ReduceOp::Sum, stream)
                    .map_err(|e| format!("all_reduce #{op}: {e}"))?;
                if status == nccl_core::Status::InProgress {
                    comm.core()
                        .wait_ready("all_reduce")
                        .map_err(|e| e.to_string())?;
                }
                if sync {
                    stream.synchronize().map_err(|e| e.to_string())?;
                }
            }
        }
        Ok(())
    }

    fn pending(&self) -> usize {
        match self {
            Issuer::Group(group, _) => group.pending_operations(),
            Issuer::Tensor(..) | Issuer::Raw(..) => 0,
        }
    }

    fn finish(self) -> Result<(), String> {
        match self {
            Issuer::Group(group, _) => group.destroy().map_err(|e| e.to_string()),
            Issuer::Tensor(comm, _) => comm.core().finalize().map_err(|e| e.to_string()),
            Issuer::Raw(comm, buffer, _) => {
                comm.finalize().map_err(|e| e.to_string())?;
                // SAFETY: the stream was synchronised after the last
                // all_reduce; nothing uses the buffer any more.
                unsafe { cudarc::driver::result::free_sync(buffer) }.map_err(|e| e.to_string())
            }
        }
    }
}

/// One row of the report.
struct Sample {
    ops: u64,
    seconds: f64,
    rss: u64,
    device_used: u64,
    pending: usize,
}

/// Resident set size from `/proc/self/statm` (pages; Linux pages are 4 KiB
/// on the machines this runs on).
fn resident_bytes() -> Result<u64, String> {
    let statm = std::fs::read_to_string("/proc/self/statm")
        .map_err(|e| format!("reading /proc/self/statm: {e}"))?;
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|field| field.parse().ok())
        .ok_or_else(|| format!("unexpected /proc/self/statm: {statm:?}"))?;
    Ok(pages * 4096)
}

fn device_used_bytes() -> Result<u64, String> {
    let (free, total) =
        cudarc::driver::result::mem_get_info().map_err(|e| format!("cuMemGetInfo: {e}"))?;
    Ok((total - free) as u64)
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Memory growth after the warm-up, in bytes.
#[derive(Clone, Copy, Debug, Default)]
struct Growth {
    /// Of the process's resident set.
    host_rss: u64,
    /// Of the device's used memory.
    device_used: u64,
}

/// Runs `args.ops` all-reduces through `mode`, printing a row per sample;
/// returns the growth after the warm-up samples.
fn soak(
    mode: Mode,
    args: &Args,
    world: &World,
    device: &Device,
    stream: &Arc<CudaStream>,
) -> Result<Growth, String> {
    let mut issuer = Issuer::new(mode, world, device, stream, args.elements)?;
    let per_sample = (args.ops / args.samples.max(1)).max(1);
    let started = Instant::now();
    let mut samples = Vec::new();
    println!(
        "# {}group-soak ({mode:?}): {} in-place all_reduces of {} x float, world size {}, CPU sync every {}",
        rank_prefix(world),
        args.ops,
        args.elements,
        world.size,
        args.sync_every
    );
    println!("#        ops   seconds    ops/s   rss_MiB  device_MiB  pending");
    for op in 1..=args.ops {
        issuer.all_reduce(op, op % args.sync_every == 0, stream)?;
        if op % per_sample == 0 {
            stream.synchronize().map_err(|e| e.to_string())?;
            let seconds = started.elapsed().as_secs_f64();
            let sample = Sample {
                ops: op,
                seconds,
                rss: resident_bytes()?,
                device_used: device_used_bytes()?,
                pending: issuer.pending(),
            };
            println!(
                "{:>12} {:>9.2} {:>8.0} {:>9.1} {:>11.1} {:>8}",
                sample.ops,
                sample.seconds,
                sample.ops as f64 / sample.seconds,
                mib(sample.rss),
                mib(sample.device_used),
                sample.pending
            );
            samples.push(sample);
        }
    }
    issuer.finish()?;
    let warm = samples
        .get(args.warmup_samples as usize..)
        .filter(|rest| !rest.is_empty())
        .ok_or("too few samples after the warm-up: raise --samples or --ops")?;
    let growth = |value: fn(&Sample) -> u64| {
        let first = value(&warm[0]);
        warm.iter()
            .map(value)
            .max()
            .unwrap_or(first)
            .saturating_sub(first)
    };
    let grown = Growth {
        host_rss: growth(|s| s.rss),
        device_used: growth(|s| s.device_used),
    };
    println!(
        "# {}{mode:?} after warm-up ({} samples): host RSS grew {:.2} MiB, device memory {:.2} MiB",
        rank_prefix(world),
        args.warmup_samples,
        mib(grown.host_rss),
        mib(grown.device_used)
    );
    Ok(grown)
}

/// `"rank r: "` in a world of several ranks, else nothing.
fn rank_prefix(world: &World) -> String {
    if world.size > 1 {
        format!("rank {}: ", world.rank)
    } else {
        String::new()
    }
}

/// This rank's soak and verdict, then every rank's: whether no rank grew.
fn run(args: &Args) -> Result<bool, String> {
    if !nccl_core::cuda_driver_available() {
        return Err("no CUDA driver (libcuda.so.1) on this machine: group-soak needs a GPU".into());
    }
    let world = World::from_env("group-soak").map_err(|e| e.to_string())?;
    let device = Device::new(world.local_rank).map_err(|e| e.to_string())?;
    let stream = device.new_stream().map_err(|e| e.to_string())?;
    // NCCL's own calls may grow the process (they do in 2.28.3): the same
    // loop through nccl-core's raw call first tells what is NCCL's.
    let baseline = match (args.baseline, args.mode) {
        (true, mode) if mode != Mode::Raw => Some(soak(Mode::Raw, args, &world, &device, &stream)?),
        _ => None,
    };
    let grown = soak(args.mode, args, &world, &device, &stream)?;
    let base = baseline.unwrap_or_default();
    let (extra_rss, extra_device) = (
        grown.host_rss.saturating_sub(base.host_rss),
        grown.device_used.saturating_sub(base.device_used),
    );
    let allowed = args.allow_mib * 1024 * 1024;
    let ok = extra_rss <= allowed && extra_device <= allowed;
    let against = if baseline.is_some() {
        "beyond the raw NCCL loop's own growth"
    } else {
        "in all"
    };
    println!(
        "# {}{:?} grew {:.2} MiB of host RSS and {:.2} MiB of device memory {against} (allowed {} MiB each): {}",
        rank_prefix(&world),
        args.mode,
        mib(extra_rss),
        mib(extra_device),
        args.allow_mib,
        if ok { "no growth" } else { "GROWTH" }
    );
    let verdicts = world
        .all_gather("verdict", &[f64::from(u8::from(ok))])
        .map_err(|e| e.to_string())?;
    let grown: Vec<usize> = (0..world.size)
        .filter(|&rank| verdicts[rank] != [1.0])
        .collect();
    if world.size > 1 && world.rank == 0 {
        if grown.is_empty() {
            println!("# all {} ranks: no growth", world.size);
        } else {
            println!("# of {} ranks, GROWTH on ranks {grown:?}", world.size);
        }
    }
    world.finish().map_err(|e| e.to_string())?;
    Ok(grown.is_empty())
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(error) => {
            eprintln!("group-soak: error: {error}");
            ExitCode::from(2)
        }
    }
}
