//! The command line of `nccl-perf`: nccl-tests' flags with nccl-tests'
//! meaning, and nccl-perf's own long flags, parsed by clap.
//!
//! The flags are [`Args`] here; the nccl-tests flags accepted without
//! effect are in `unapplied`; what they mean together is checked and read
//! out in `reading` ([`Args::method`], [`Args::selection`]); `--compare`
//! is parsed in `compare`, sizes (`128M`) in `size`, and the values of the
//! collective, `-d`, `-o`, `-r` and `--group-comms` arguments are in
//! `values`.

use std::path::PathBuf;

use clap::{ArgAction, Parser};

use nccl_core::{Config, CtaPolicy};

use crate::buffers::Memory;
use crate::collective::Collective;
use crate::layer::LayerKind;
use crate::method::Average;

mod compare;
mod inject;
mod reading;
mod size;
mod soak;
mod unapplied;
mod values;

#[cfg(test)]
mod tests;

use compare::{Compare, parse_compare_arg};
pub use inject::{Fault, HealMode, Injection};
#[cfg(not(feature = "plot"))]
pub use reading::without_plot_feature;
pub use size::{SizeError, parse_size};
use size::{parse_nonzero_size_arg, parse_size_arg};
pub use soak::Stall;
pub use unapplied::Unapplied;
pub use values::OnOff;
use values::{CollectiveArg, GroupComms, parse_root_arg};
pub use values::{DataTypeArg, ReduceOpArg, RootArg};

/// The `nccl-perf` flags.
///
/// Sizes accept a `K`, `M` or `G` suffix (powers of 1024, either case), as
/// nccl-tests does: `-b 8 -e 128M -f 2`.
#[derive(Clone, Debug, Parser)]
#[command(
    // A flag given twice takes its last value, as nccl-tests' getopt does.
    args_override_self = true,
    // The measurements that time one process group instead of the sweep:
    // one at a time.
    group = clap::ArgGroup::new("timed_group").args(["inject", "grow_spare", "soak"]),
    name = "nccl-perf",
    version,
    disable_version_flag = true,
    about = "Measures NCCL collectives in nccl-tests' table format, through a chosen layer of this workspace",
    long_about = "Measures NCCL collectives in nccl-tests' table format, through a chosen layer of this \
                  workspace (raw nccl-sys calls, nccl-core, nccl-tensor's safe API, or nccl-group's \
                  ProcessGroup). One thread per GPU, one communicator per rank, one non-blocking \
                  stream per rank (and one member of a ProcessGroup per rank and group layer).\n\n\
                  Processes: alone, one process drives every visible GPU (or -g of them). Launched \
                  (torchrun, nccl-launch, or anything that sets RANK and WORLD_SIZE), each process \
                  drives -t x -g GPUs as in nccl-tests (default 1): its ranks are process x t x g + i, \
                  its GPUs local rank x t x g + i; under nccl-launch's simulated hosts every process \
                  has one rank, on GPU 0. The processes meet at the launch's store; process 0 prints \
                  the table and writes --json and --plot, the others print only errors.\n\n\
                  The table goes to stdout and stays machine-readable (lines starting with '#' are \
                  comments; every row has the same columns); a progress bar goes to stderr when it is \
                  a terminal; errors go to stderr, as one line.\n\n\
                  Flags: every flag of nccl-tests 2.19 is accepted with nccl-tests' meaning (its single \
                  letter and its long name); one that cannot apply here is accepted and named in a \
                  '# note:' line of the output. The long-only flags are nccl-perf's own.\n\n\
                  Timing: per size and mode, warm-up, then --batches timed batches of -n iterations \
                  (each -m calls in one NCCL group) back to back, each batch followed by one stream \
                  synchronisation; the time is the median over the batches, reduced over the ranks as \
                  -a says. As in nccl-tests, each iteration's buffers start at the next offset of send \
                  and receive buffers of -e bytes, so consecutive calls do not find their data in the \
                  L2 cache (--no-rotate: every call on the same buffers). With -G N the -n iterations \
                  are captured once in a CUDA graph and each batch replays it N times (time = batch / \
                  (N * n * m)); as in nccl-tests, the first replay uploads the graph inside the \
                  first batch.\n\n\
                  --compare A,B runs layer A and layer B on the same buffers at each size, interleaved \
                  (A warm-up, B warm-up, then timed batches A, B, A, B, ...), prints B's table with a \
                  'ratio' column (time B / time A) at the end of each half, and writes both layers' \
                  rows to --json.\n\n\
                  Exit status (of every process): 0 on success, 1 if a run failed or #wrong was not \
                  0, 2 for a usage error or when the CUDA driver, a GPU or NCCL is missing.",
    after_help = "Examples:\n  \
                  nccl-perf -b 8 -e 128M -f 2 all_reduce\n  \
                  nccl-perf --layer raw -b 8 -e 1G -f 4 -n 200 -w 20 -J all_reduce.json all_reduce\n  \
                  nccl-perf -d all -o all -c 3 reduce\n  \
                  nccl-perf --compare raw,tensor --json rows.jsonl --plot bw.svg all_reduce\n  \
                  nccl-perf --report rows.jsonl --plot bw.svg\n  \
                  nccl-perf --compare raw,group -b 8 -e 128M -f 2\n  \
                  nccl-perf --compare raw,core -G 100 -b 8 -e 1M sendrecv\n  \
                  torchrun --nproc-per-node 8 --no-python nccl-perf -b 8 -e 1G -f 2\n  \
                  nccl-launch -n 4 nccl-perf --layer group -b 8 -e 1M -f 4"
)]
pub struct Args {
    /// Smallest message size in bytes (suffixes K, M, G).
    #[arg(short = 'b', allow_negative_numbers = true, long = "minbytes", default_value = "8", value_parser = parse_size_arg)]
    pub min_bytes: u64,

    /// Largest message size in bytes (suffixes K, M, G); each buffer holds this many bytes.
    #[arg(short = 'e', allow_negative_numbers = true, long = "maxbytes", default_value = "128M", value_parser = parse_size_arg)]
    pub max_bytes: u64,

    /// Increment between sizes when --stepfactor is 1 (suffixes K, M, G).
    #[arg(short = 'i', allow_negative_numbers = true, long = "stepbytes", default_value = "1M", value_parser = parse_nonzero_size_arg)]
    pub step_bytes: u64,

    /// Multiply the size by this factor from one row to the next (1: add --stepbytes instead).
    #[arg(short = 'f', allow_negative_numbers = true, long = "stepfactor", default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..))]
    pub step_factor: u64,

    /// Timed iterations per batch (and in each CUDA graph with -G), per size, mode and layer.
    #[arg(short = 'n', allow_negative_numbers = true, long = "iters", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    pub iters: u32,

    /// Calls per timed iteration, issued in one NCCL group (nccl-tests' aggregated iterations).
    #[arg(short = 'm', allow_negative_numbers = true, long = "agg_iters", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub agg_iters: u32,

    /// Untimed warm-up calls per size, mode and layer, before the timed batches.
    #[arg(
        short = 'w',
        allow_negative_numbers = true,
        long = "warmup_iters",
        default_value_t = 5
    )]
    pub warmup_iters: u32,

    /// Run and print the sizes this many times (nccl-tests' 0, forever, is refused: give a count).
    #[arg(
        short = 'N',
        allow_negative_numbers = true,
        long = "run_cycles",
        value_name = "CYCLES",
        default_value_t = 1
    )]
    pub run_cycles: u32,

    /// Check results this many times per size and mode, each an untimed call compared with a
    /// host computation (0: no check, #wrong prints N/A).
    #[arg(
        short = 'c',
        allow_negative_numbers = true,
        long = "check",
        value_name = "COUNT",
        default_value_t = 1
    )]
    pub check: u32,

    /// Reduction of all_reduce, reduce, reduce_scatter (and the redop column of sendrecv);
    /// all: every one in turn.
    #[arg(short = 'o', long = "op", value_enum, default_value_t = ReduceOpArg::Sum)]
    pub op: ReduceOpArg,

    /// Element type; all: every type in turn, in nccl-tests' order.
    #[arg(short = 'd', long = "datatype", value_enum, default_value_t = DataTypeArg::FLOAT)]
    pub datatype: DataTypeArg,

    /// Root rank of broadcast, reduce, gather and scatter; all (or -1): every rank in turn.
    #[arg(
        short = 'r',
        long = "root",
        value_name = "RANK|all",
        default_value = "0",
        allow_negative_numbers = true,
        value_parser = parse_root_arg
    )]
    pub root: RootArg,

    /// Blocking mode: 0 none; 1 wait and meet the other ranks after each iteration; 2 wait
    /// after each iteration; 3 as 1, with the meetings left out of the time.
    #[arg(short = 'z', allow_negative_numbers = true, long = "blocking", value_name = "0|1|2|3", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=3))]
    pub blocking: u8,

    /// 1: issue the calls on the NULL stream instead of a created non-blocking one.
    #[arg(short = 'y', allow_negative_numbers = true, long = "stream_null", value_name = "0|1", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub stream_null: u8,

    /// Fail a wait for the GPU that takes more than this many seconds (0: never).
    #[arg(
        short = 'T',
        allow_negative_numbers = true,
        long = "timeout",
        value_name = "SECONDS",
        default_value_t = 0
    )]
    pub timeout: u32,

    /// GPUs per thread, as nccl-tests [default: 1 in a launch; alone, every visible GPU
    /// over the -t threads].
    #[arg(short = 'g', long = "ngpus", value_parser = clap::value_parser!(u32).range(1..))]
    pub ngpus: Option<u32>,

    /// Threads per process, as nccl-tests (nccl-perf gives each of a process's -t x -g GPUs
    /// a thread of its own).
    #[arg(short = 't', long = "nthreads", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub threads: u32,

    /// The time of a row over the ranks: 0 rank 0's, 1 the average, 2 the minimum, 3 the
    /// maximum (#wrong is always the sum).
    #[arg(short = 'a', long = "average", default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=3))]
    pub average: u8,

    /// Capture the -n iterations of each size, mode and layer in a CUDA graph and replay it N
    /// times per timed batch (0: no graph, call the layer directly).
    #[arg(
        short = 'G',
        allow_negative_numbers = true,
        long = "cudagraph",
        value_name = "N",
        default_value_t = 0
    )]
    pub graph: u32,

    /// 1: report the time the host took to issue the calls (the column reads cputime).
    #[arg(short = 'C', allow_negative_numbers = true, long = "report_cputime", value_name = "0|1", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub report_cputime: u8,

    /// 1: end each row with the time it was measured (UTC).
    #[arg(short = 'S', allow_negative_numbers = true, long = "report_timestamps", value_name = "0|1", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub report_timestamps: u8,

    /// Also write nccl-tests' JSON document to FILE (written only for a name ending in .json;
    /// an existing FILE is kept and FILE.0, FILE.1, ... tried, as nccl-tests does).
    #[arg(short = 'J', long = "output_file", value_name = "FILE")]
    pub output_file: Option<PathBuf>,

    /// Misalign the send and receive buffers by this many elements.
    #[arg(
        short = 'u',
        allow_negative_numbers = true,
        long = "unalign",
        value_name = "ELEMENTS",
        default_value_t = 0
    )]
    pub unalign: u32,

    /// 1: time each iteration with CUDA events and add nccl-tests' per-iteration columns
    /// (i_min, i_max, i_p99, i_cv%) and JSON fields (times_us, p50_us, ...); off with -G.
    #[arg(short = 'I', allow_negative_numbers = true, long = "per_iter_timing", value_name = "0|1", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub per_iter_timing: u8,

    /// Leading iterations (of each batch) left out of -I's statistics (below -n).
    #[arg(
        short = 'K',
        allow_negative_numbers = true,
        long = "per_iter_skip",
        value_name = "COUNT",
        default_value_t = 0
    )]
    pub per_iter_skip: u32,

    /// 1: report the GPU memory used by the communicators' initialization, the buffers and
    /// the collectives, after the tables.
    #[arg(short = 'M', allow_negative_numbers = true, long = "memory", value_name = "0|1", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub memory: u8,

    /// nccl-tests: the communicators' CTA policy, `NCCL_CTA_POLICY_*` (0 default, 1
    /// efficiency, 2 zero), set as `Config::with_cta_policy` on every communicator nccl-perf
    /// creates, in every layer.
    #[arg(short = 'x', allow_negative_numbers = true, long = "cta_policy", value_name = "0|1|2", value_parser = clap::value_parser!(u8).range(0..=2))]
    pub cta_policy: Option<u8>,

    /// nccl-tests flags accepted without effect.
    #[command(flatten)]
    pub unapplied: Unapplied,

    /// Every call on the same buffers, instead of moving each iteration to the next offset
    /// of -e-sized buffers as nccl-tests does (nccl-tests has no such flag).
    #[arg(long)]
    pub no_rotate: bool,

    /// The collective to measure (same as the positional argument).
    #[arg(
        long = "op-name",
        value_enum,
        value_name = "COLLECTIVE",
        conflicts_with = "collective"
    )]
    pub op_name: Option<CollectiveArg>,

    /// The collective to measure [default: all].
    #[arg(value_enum, value_name = "COLLECTIVE")]
    pub collective: Option<CollectiveArg>,

    /// The layer that issues the calls: raw nccl-sys function pointers (raw-fingerprint: each
    /// operation grouped with a MAX all_reduce of two u64, an in-band fingerprint), nccl-core,
    /// nccl-tensor's safe typed API (no in-place form for an operation whose output and
    /// input differ in size: those halves print N/A), or nccl-group's ProcessGroup (an op +
    /// Work::wait per call; the forms of the tensor layer but in-place sendrecv, the rest N/A),
    /// on its own NCCL stream (group) or on the caller's (group-caller).
    #[arg(long, value_enum, default_value_t = LayerKind::Core)]
    pub layer: LayerKind,

    /// The kind of NCCL communicator the group layers' process groups create: blocking
    /// (NCCL's normal enqueue cost; the group's default) or nonblocking (every wait
    /// bounded; NCCL ends each group with other ranks on a thread of its own).
    #[arg(long, value_enum, default_value_t = GroupComms::Blocking)]
    pub group_comms: GroupComms,

    /// Whether the group layers' process groups compare every rank's collectives in the
    /// background (nccl-group's mismatch check, GroupOptions::mismatch_check; on is the
    /// group's default), to measure what the check costs.
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    pub group_mismatch_check: OnOff,

    /// Run two layers, A (the baseline) and B, interleaved in this process on the same
    /// buffers; print B's table with a ratio column (time B / time A) after each half's
    /// #wrong. Both layers' rows go to --json.
    #[arg(long, value_name = "A,B", value_parser = parse_compare_arg, conflicts_with = "layer")]
    pub compare: Option<Compare>,

    /// Timed batches per size, mode and layer; the time is their median [default: 1, or 5
    /// with --compare].
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..))]
    pub batches: Option<u32>,

    /// Also write every row as one JSON object per line to FILE (with --compare: both
    /// layers' rows, B's with a "ratio" object).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Also draw algbw and busbw against size (log-log) for each collective, one line
    /// per layer and mode, to FILE as SVG (needs the `plot` feature, on by default).
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,

    /// Run nothing: redraw the tables of the rows a run wrote with --json to ROWS (and with
    /// --plot the plot), without a GPU, a CUDA driver or NCCL. Only --plot goes with it.
    #[arg(long, value_name = "ROWS.jsonl")]
    pub report: Option<PathBuf>,

    /// Who allocates the send and receive buffers: cudarc (cuMemAllocAsync, from the
    /// stream's memory pool) or nccl (ncclMemAlloc, as nccl-tests 2.19 does; registered
    /// only with -R 1) [default: nccl where the loaded NCCL is 2.19 or later, as
    /// nccl-tests; else cudarc].
    #[arg(long, value_enum, value_name = "ALLOCATOR")]
    pub alloc: Option<Memory>,

    /// Lose a rank on purpose and time the survivors' recovery instead of the size sweep:
    /// FAULT@RANK:ITER, FAULT exit (the process exits), kill (SIGKILL) or stop (SIGSTOP, a
    /// hang), rank RANK (not 0) after ITER checked all_reduces of -b bytes through the group
    /// layer of --layer. Rank 0 prints the slowest survivor's detect, heal and first-correct
    /// times from the loss, and a JSON object (-J, --json). Run under `nccl-launch -n N
    /// --keep-going`.
    #[arg(long, value_name = "FAULT@RANK:ITER")]
    pub inject: Option<Injection>,

    /// Time a warm spare's grow instead of the size sweep: under `nccl-launch -n N`, every
    /// process but the last forms a group and runs ITER checked all_reduces of -b bytes through
    /// the group layer of --layer, while the last one, its GPU and NCCL loaded, waits to join;
    /// then the group grows by it (ncclCommGrow where NCCL has it, else fresh communicators).
    /// Rank 0 prints the slowest rank's grow and first-correct times from the start of the
    /// grow, and a JSON object (-J, --json).
    #[arg(long, value_name = "ITER")]
    pub grow_spare: Option<usize>,

    /// Run a slow-rank soak instead of the size sweep: for SECS seconds, checked all_reduces of
    /// -b bytes through the group layer of --layer, with the rank of --stall sleeping before
    /// each one, as a rank that computes for that long a step. A live group must never fail
    /// (the liveness beat runs on the group's own thread): any error or wrong result ends the
    /// run with exit status 1. Rank 0 prints every rank's steps and longest wait, and a JSON
    /// object (-J, --json). Run under `nccl-launch -n N`.
    #[arg(long, value_name = "SECS", requires = "stall", value_parser = clap::value_parser!(u64).range(1..))]
    pub soak: Option<u64>,

    /// With --soak: rank RANK sleeps MS milliseconds before each step (e.g. 3:2000).
    #[arg(long, value_name = "RANK:MS", requires = "soak")]
    pub stall: Option<Stall>,

    /// With --inject: how the survivors go on: heal and shrink the communicators where NCCL
    /// can (shrink), heal with fresh ones (recreate), or a new group of the survivors whose
    /// ranks are known in advance (full).
    #[arg(long, value_enum, default_value_t = HealMode::Shrink, requires = "inject")]
    pub heal: HealMode,

    /// With --inject: the survivors are told who is lost (HealOptions::with_suspects), as a
    /// launcher that saw the loss could.
    #[arg(long, requires = "inject")]
    pub tell: bool,

    /// With --inject, --grow-spare or --soak: the group's operation timeout in ms (what ends
    /// the survivors' wait for a stopped rank) [default: the group's].
    #[arg(long, value_name = "MS", requires = "timed_group", value_parser = clap::value_parser!(u64).range(1..))]
    pub op_timeout_ms: Option<u64>,

    /// Print the version (long form only: -V is nccl-tests' --device_cta_count).
    #[arg(long, action = ArgAction::Version)]
    version: Option<bool>,
}

impl Args {
    /// The collectives to run, in the order they are run.
    pub fn collectives(&self) -> Vec<Collective> {
        match self
            .op_name
            .or(self.collective)
            .unwrap_or(CollectiveArg::All)
        {
            CollectiveArg::All => Collective::ALL.to_vec(),
            CollectiveArg::One(collective) => vec![collective],
        }
    }

    /// The layers to run, in order: the one of `--layer`, or A then B of `--compare`.
    pub fn layers(&self) -> Vec<LayerKind> {
        match self.compare {
            Some(compare) => vec![compare.baseline, compare.subject],
            None => vec![self.layer],
        }
    }

    /// How a row's time comes from the ranks' times.
    pub fn average(&self) -> Average {
        Average::from_flag(self.average)
    }

    /// Timed batches per size, mode and layer.
    pub fn batches(&self) -> u32 {
        self.batches
            .unwrap_or(if self.compare.is_some() { 5 } else { 1 })
    }

    /// The options of the group layers' process groups (but their stream
    /// mode, which the layer picks): `--group-comms`,
    /// `--group-mismatch-check` and [`Args::config`].
    pub fn group_options(&self) -> nccl_group::GroupOptions {
        nccl_group::GroupOptions::default()
            .with_comm_mode(self.group_comms.comm_mode())
            .with_mismatch_check(self.group_mismatch_check.is_on())
            .with_config(self.config())
    }

    /// The NCCL config of every communicator the run creates, in every
    /// layer: `-x` as its CTA policy; every other option at NCCL's default.
    pub fn config(&self) -> Config {
        let config = Config::new();
        let policy = match self.cta_policy {
            None => return config,
            Some(0) => CtaPolicy::Default,
            Some(1) => CtaPolicy::Efficiency,
            // `-x` takes 0 to 2 (its value parser): this is 2.
            Some(_) => CtaPolicy::Zero,
        };
        config.with_cta_policy(policy)
    }
}

#[cfg(test)]
mod config_tests {
    use clap::Parser;

    use super::Args;

    /// The `ncclConfig_t` field each config flag sets, through the config
    /// every communicator of the run is created with.
    #[test]
    fn config_flags_map_to_the_communicators_config() {
        let cta_policy = |flags: &[&str]| {
            let args = Args::try_parse_from([&["nccl-perf"], flags].concat()).unwrap();
            args.config().to_raw().unwrap().as_raw().CTAPolicy
        };
        for (flags, raw) in [
            (&["-x", "0"][..], 0),
            (&["-x", "1"], 1),
            (&["--cta_policy", "2"], 2),
            // Unset: NCCL_CONFIG_UNDEF_INT, NCCL's default.
            (&[], i32::MIN),
        ] {
            assert_eq!(cta_policy(flags), raw, "{flags:?}");
        }
        let args = Args::try_parse_from(["nccl-perf"]).unwrap();
        assert_eq!(args.config(), nccl_core::Config::new());
    }
}
