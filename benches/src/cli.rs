//! The command line of `nccl-perf`: flags modelled on nccl-tests, parsed by clap.
//!
//! The flags are [`Args`] here; `--compare` is parsed in `compare`, sizes
//! (`128M`) in `size`, and the values of the collective, `-d`, `-o` and
//! `--group-comms` arguments are in `values`.

use std::path::PathBuf;

use clap::Parser;

use crate::collective::Collective;
use crate::layer::LayerKind;
use crate::runner::Average;

mod compare;
mod size;
mod values;

use compare::{Compare, parse_compare_arg};
use size::{parse_nonzero_size_arg, parse_size_arg};
use values::{CollectiveArg, DataTypeArg, GroupComms, ReduceOpArg};

/// The `nccl-perf` flags.
///
/// Sizes accept a `K`, `M` or `G` suffix (powers of 1024, either case), as
/// nccl-tests does: `-b 8 -e 128M -f 2`.
#[derive(Clone, Debug, Parser)]
#[command(
    name = "nccl-perf",
    version,
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
                  Timing: per size and mode, warm-up, then --batches timed batches of -n back-to-back \
                  calls, each followed by one stream synchronisation; the time is the median over the \
                  batches, reduced over the ranks as -a says. With -G N the -n calls are captured once in a CUDA \
                  graph and each batch replays it N times (time = batch / (N * n)).\n\n\
                  --compare A,B runs layer A and layer B on the same buffers at each size, interleaved \
                  (A warm-up, B warm-up, then timed batches A, B, A, B, ...), prints B's table with a \
                  'ratio' column (time B / time A) at the end of each half, and writes both layers' \
                  rows to --json.\n\n\
                  Exit status (of every process): 0 on success, 1 if a run failed or #wrong was not \
                  0, 2 for a usage error or when the CUDA driver, a GPU or NCCL is missing.",
    after_help = "Examples:\n  \
                  nccl-perf -b 8 -e 128M -f 2 all_reduce\n  \
                  nccl-perf --layer tensor -b 8 -e 1G -f 4 -n 200 -w 20\n  \
                  nccl-perf --compare raw,tensor --json rows.jsonl --plot bw.svg all_reduce\n  \
                  nccl-perf --compare raw,group -b 8 -e 128M -f 2\n  \
                  nccl-perf --compare raw,core -G 100 -b 8 -e 1M sendrecv\n  \
                  torchrun --nproc-per-node 8 --no-python nccl-perf -b 8 -e 1G -f 2\n  \
                  nccl-launch -n 4 nccl-perf --layer group -b 8 -e 1M -f 4"
)]
pub struct Args {
    /// Smallest message size in bytes (suffixes K, M, G).
    #[arg(short = 'b', long = "minbytes", default_value = "8", value_parser = parse_size_arg)]
    pub min_bytes: u64,

    /// Largest message size in bytes (suffixes K, M, G).
    #[arg(short = 'e', long = "maxbytes", default_value = "128M", value_parser = parse_size_arg)]
    pub max_bytes: u64,

    /// Multiply the size by this factor from one row to the next (1: add --stepbytes instead).
    #[arg(short = 'f', long = "stepfactor", default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..))]
    pub step_factor: u64,

    /// Increment between sizes when --stepfactor is 1 (suffixes K, M, G).
    #[arg(short = 'i', long = "stepbytes", default_value = "1M", value_parser = parse_nonzero_size_arg)]
    pub step_bytes: u64,

    /// Calls per timed batch (and in each CUDA graph with -G), per size, mode and layer.
    #[arg(short = 'n', long = "iters", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    pub iters: u32,

    /// Untimed warm-up calls per size, mode and layer, before the timed batches.
    #[arg(short = 'w', long = "warmup_iters", default_value_t = 5)]
    pub warmup_iters: u32,

    /// Check results (1) or not (0): one untimed run per size and mode compared with a host computation.
    #[arg(short = 'c', long = "check", default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub check: u8,

    /// Element type.
    #[arg(short = 'd', long = "datatype", value_enum, default_value_t = DataTypeArg::FLOAT)]
    pub datatype: DataTypeArg,

    /// Reduction of all_reduce, reduce and reduce_scatter.
    #[arg(short = 'o', long = "op", value_enum, default_value_t = ReduceOpArg::Sum)]
    pub op: ReduceOpArg,

    /// Root rank of broadcast and reduce.
    #[arg(short = 'r', long = "root", default_value_t = 0, value_parser = clap::value_parser!(i32).range(0..))]
    pub root: i32,

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

    /// The layer that issues the calls: raw nccl-sys function pointers, nccl-core,
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

    /// Run two layers, A (the baseline) and B, interleaved in this process on the same
    /// buffers; print B's table with a ratio column (time B / time A) after each half's
    /// #wrong. Both layers' rows go to --json.
    #[arg(long, value_name = "A,B", value_parser = parse_compare_arg, conflicts_with = "layer")]
    pub compare: Option<Compare>,

    /// Capture the -n calls of each size, mode and layer in a CUDA graph and replay it N
    /// times per timed batch (0: no graph, call the layer directly).
    #[arg(short = 'G', long = "cudagraph", value_name = "N", default_value_t = 0)]
    pub graph: u32,

    /// Timed batches per size, mode and layer; the time is their median [default: 1, or 5
    /// with --compare].
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..))]
    pub batches: Option<u32>,

    /// Also write every row as one JSON object per line to FILE (with --compare: both
    /// layers' rows, B's with a "ratio" object).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Also draw algbw and busbw against size (log-log) for each collective, one line
    /// per layer and mode, to FILE as SVG.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
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

    /// Whether results are checked.
    pub fn check_enabled(&self) -> bool {
        self.check == 1
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
}

#[cfg(test)]
mod tests {
    use nccl_core::{DataType, ReduceOp};

    use super::*;

    #[test]
    fn defaults_match_nccl_tests() {
        let args = Args::try_parse_from(["nccl-perf"]).unwrap();
        assert_eq!(args.min_bytes, 8);
        assert_eq!(args.max_bytes, 128 << 20);
        assert_eq!(args.step_factor, 2);
        assert_eq!(args.iters, 20);
        assert_eq!(args.warmup_iters, 5);
        assert!(args.check_enabled());
        assert_eq!(args.datatype.data_type(), DataType::Float32);
        assert_eq!(args.op.reduce_op(), ReduceOp::Sum);
        assert_eq!(args.root, 0);
        assert_eq!((args.ngpus, args.threads), (None, 1));
        assert_eq!(args.average(), Average::Mean);
        assert_eq!(args.layer, LayerKind::Core);
        assert_eq!(args.collectives(), Collective::ALL.to_vec());
        assert_eq!(args.compare, None);
        assert_eq!(args.layers(), vec![LayerKind::Core]);
        assert_eq!((args.graph, args.batches()), (0, 1));
        assert_eq!((args.json.as_ref(), args.plot.as_ref()), (None, None));
    }

    #[test]
    fn graph_flag_parses() {
        let args = Args::try_parse_from(["nccl-perf", "-G", "100"]).unwrap();
        assert_eq!(args.graph, 100);
        let args = Args::try_parse_from(["nccl-perf", "--cudagraph", "3"]).unwrap();
        assert_eq!(args.graph, 3);
        let args = Args::try_parse_from(["nccl-perf", "-G", "0"]).unwrap();
        assert_eq!(args.graph, 0);
        for bad in [
            &["nccl-perf", "-G", "-1"][..],
            &["nccl-perf", "-G", "x"],
            &["nccl-perf", "-G"],
            &["nccl-perf", "-G", "4294967296"],
        ] {
            assert!(Args::try_parse_from(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn flags_parse() {
        let args = Args::try_parse_from([
            "nccl-perf",
            "-b",
            "1K",
            "-e",
            "1G",
            "-f",
            "4",
            "-n",
            "200",
            "-w",
            "20",
            "-c",
            "0",
            "-d",
            "bfloat16",
            "-o",
            "max",
            "-r",
            "1",
            "-g",
            "2",
            "--layer",
            "raw",
            "--json",
            "out.jsonl",
            "--plot",
            "bw.svg",
            "all_gather",
        ])
        .unwrap();
        assert_eq!(
            (args.min_bytes, args.max_bytes, args.step_factor),
            (1024, 1 << 30, 4)
        );
        assert_eq!((args.iters, args.warmup_iters, args.check), (200, 20, 0));
        assert_eq!(args.datatype, DataTypeArg(DataType::Bfloat16));
        assert_eq!(args.op, ReduceOpArg::Max);
        assert_eq!((args.root, args.ngpus), (1, Some(2)));
        assert_eq!(args.layer, LayerKind::Raw);
        assert_eq!(
            args.json.as_deref(),
            Some(std::path::Path::new("out.jsonl"))
        );
        assert_eq!(args.collectives(), vec![Collective::AllGather]);
        assert_eq!(args.plot.as_deref(), Some(std::path::Path::new("bw.svg")));
        let tensor = Args::try_parse_from(["nccl-perf", "--layer", "tensor"]).unwrap();
        assert_eq!(tensor.layers(), vec![LayerKind::Tensor]);
        let group = Args::try_parse_from(["nccl-perf", "--layer", "group"]).unwrap();
        assert_eq!(group.layers(), vec![LayerKind::Group]);

        let by_flag = Args::try_parse_from(["nccl-perf", "--op-name", "sendrecv"]).unwrap();
        assert_eq!(by_flag.collectives(), vec![Collective::SendRecv]);
        let dashed = Args::try_parse_from(["nccl-perf", "reduce-scatter"]).unwrap();
        assert_eq!(dashed.collectives(), vec![Collective::ReduceScatter]);
        let all = Args::try_parse_from(["nccl-perf", "all"]).unwrap();
        assert_eq!(all.collectives(), Collective::ALL.to_vec());
    }

    #[test]
    fn process_flags_parse_as_nccl_tests() {
        let args = Args::try_parse_from(["nccl-perf", "-t", "2", "-g", "4", "-a", "0"]).unwrap();
        assert_eq!((args.threads, args.ngpus), (2, Some(4)));
        assert_eq!(args.average(), Average::Rank0);
        let args =
            Args::try_parse_from(["nccl-perf", "--nthreads", "3", "--average", "3"]).unwrap();
        assert_eq!((args.threads, args.average()), (3, Average::Max));
        let args = Args::try_parse_from(["nccl-perf", "--ngpus", "1", "-a", "2"]).unwrap();
        assert_eq!((args.ngpus, args.average()), (Some(1), Average::Min));
    }

    #[test]
    fn invalid_flags_are_clap_errors() {
        for bad in [
            &["nccl-perf", "-c", "2"][..],
            &["nccl-perf", "-n", "0"],
            &["nccl-perf", "-f", "0"],
            &["nccl-perf", "-g", "0"],
            &["nccl-perf", "-t", "0"],
            &["nccl-perf", "-a", "4"],
            &["nccl-perf", "-a", "-1"],
            &["nccl-perf", "-a"],
            &["nccl-perf", "-r", "-1"],
            &["nccl-perf", "-b", "8X"],
            &["nccl-perf", "-i", "0"],
            &["nccl-perf", "-d", "float8"],
            &["nccl-perf", "-o", "xor"],
            &["nccl-perf", "--layer", "magic"],
            &["nccl-perf", "alltoallv"],
            &["nccl-perf", "--op-name", "all_reduce", "broadcast"],
        ] {
            assert!(
                Args::try_parse_from(bad).is_err(),
                "{bad:?} should be rejected"
            );
        }
    }
}
