//! The command line of `nccl-perf`: flags modelled on nccl-tests, parsed by clap.

use std::path::PathBuf;

use clap::{Parser, ValueEnum};
use nccl_core::{DataType, ReduceOp};

use crate::collective::Collective;
use crate::layer::LayerKind;

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
                  ProcessGroup). One thread per GPU (rank = GPU index), one communicator per rank, one \
                  non-blocking stream per rank (and one process of a ProcessGroup per rank and group \
                  layer). \
                  The table goes to stdout and stays machine-readable (lines starting with '#' are \
                  comments; every row has the same columns); a progress bar goes to stderr when it is \
                  a terminal; errors go to stderr, as one line.\n\n\
                  Timing: per size and mode, warm-up, then --batches timed batches of -n back-to-back \
                  calls, each followed by one stream synchronisation; the time is the median over the \
                  batches (averaged over the ranks). With -G N the -n calls are captured once in a CUDA \
                  graph and each batch replays it N times (time = batch / (N * n)).\n\n\
                  --compare A,B runs layer A and layer B on the same buffers at each size, interleaved \
                  (A warm-up, B warm-up, then timed batches A, B, A, B, ...), prints B's table with a \
                  'ratio' column (time B / time A) at the end of each half, and writes both layers' \
                  rows to --json.\n\n\
                  Exit status: 0 on success, 1 if a run failed or #wrong was not 0, 2 for a usage \
                  error or when the CUDA driver, a GPU or NCCL is missing.",
    after_help = "Examples:\n  \
                  nccl-perf -b 8 -e 128M -f 2 all_reduce\n  \
                  nccl-perf --layer tensor -b 8 -e 1G -f 4 -n 200 -w 20\n  \
                  nccl-perf --compare raw,tensor --json rows.jsonl --plot bw.svg all_reduce\n  \
                  nccl-perf --compare raw,group -b 8 -e 128M -f 2\n  \
                  nccl-perf --compare raw,core -G 100 -b 8 -e 1M sendrecv"
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

    /// Number of GPUs (ranks) to use, starting at GPU 0 [default: all visible].
    #[arg(short = 'g', long = "ngpus", value_parser = clap::value_parser!(u32).range(1..))]
    pub ngpus: Option<u32>,

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
    /// Work::wait per call; the forms of the tensor layer but sendrecv, the rest N/A),
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

/// `--group-comms`: nccl-group's `CommMode`, on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum GroupComms {
    /// `CommMode::Nonblocking`.
    Nonblocking,
    /// `CommMode::Blocking`.
    Blocking,
}

impl GroupComms {
    /// The process groups' communicator kind.
    pub const fn comm_mode(self) -> nccl_group::CommMode {
        match self {
            GroupComms::Nonblocking => nccl_group::CommMode::Nonblocking,
            GroupComms::Blocking => nccl_group::CommMode::Blocking,
        }
    }
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

    /// Timed batches per size, mode and layer.
    pub fn batches(&self) -> u32 {
        self.batches
            .unwrap_or(if self.compare.is_some() { 5 } else { 1 })
    }
}

/// `--compare A,B`: the baseline layer A and the layer B measured against it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Compare {
    /// A: the denominator of the ratio; its rows go to JSON only.
    pub baseline: LayerKind,
    /// B: the layer whose table is printed, with the ratio column.
    pub subject: LayerKind,
}

/// Why `--compare` could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CompareError {
    /// Not two names separated by one comma.
    #[error("expected two layers separated by a comma (e.g. raw,tensor), got {0:?}")]
    NotTwo(String),
    /// A name that is not a layer.
    #[error("unknown layer {given:?} (expected one of: {expected})")]
    UnknownLayer {
        /// The name given.
        given: String,
        /// The layer names.
        expected: String,
    },
    /// The same layer on both sides.
    #[error("--compare needs two different layers, got {0} twice")]
    SameLayer(&'static str),
}

/// Parses `A,B` (layer names, any case, spaces around them ignored).
///
/// # Errors
/// [`CompareError`] for anything but two different known layers.
pub fn parse_compare(text: &str) -> Result<Compare, CompareError> {
    let parts: Vec<&str> = text.split(',').map(str::trim).collect();
    let [a, b] = parts[..] else {
        return Err(CompareError::NotTwo(text.to_string()));
    };
    if a.is_empty() || b.is_empty() {
        return Err(CompareError::NotTwo(text.to_string()));
    }
    let layer = |name: &str| {
        LayerKind::from_str(name, true).map_err(|_| CompareError::UnknownLayer {
            given: name.to_string(),
            expected: LayerKind::value_variants()
                .iter()
                .map(|kind| kind.name())
                .collect::<Vec<_>>()
                .join(", "),
        })
    };
    let (baseline, subject) = (layer(a)?, layer(b)?);
    if baseline == subject {
        return Err(CompareError::SameLayer(baseline.name()));
    }
    Ok(Compare { baseline, subject })
}

fn parse_compare_arg(text: &str) -> Result<Compare, String> {
    parse_compare(text).map_err(|error| error.to_string())
}

/// A collective named on the command line, or `all`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CollectiveArg {
    /// Every collective, in [`Collective::ALL`] order.
    All,
    /// One collective.
    One(Collective),
}

/// Every collective of [`Collective::ALL`], then `all`.
const COLLECTIVE_ARGS: [CollectiveArg; Collective::ALL.len() + 1] = {
    let mut args = [CollectiveArg::All; Collective::ALL.len() + 1];
    let mut index = 0;
    while index < Collective::ALL.len() {
        args[index] = CollectiveArg::One(Collective::ALL[index]);
        index += 1;
    }
    args
};

impl ValueEnum for CollectiveArg {
    fn value_variants<'a>() -> &'a [Self] {
        &COLLECTIVE_ARGS
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(match self {
            CollectiveArg::All => clap::builder::PossibleValue::new("all"),
            CollectiveArg::One(collective) => {
                clap::builder::PossibleValue::new(collective.name()).alias(collective.dashed_name())
            }
        })
    }
}

/// An element type of `-d`: every [`DataType`], by the name nccl-tests
/// gives it (`float`, `half`, `bfloat16`, `f8e4m3`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataTypeArg(pub DataType);

impl DataTypeArg {
    /// `float`, nccl-tests' default.
    pub const FLOAT: Self = Self(DataType::Float32);

    const ALL: [Self; DataType::ALL.len()] = {
        let mut all = [Self::FLOAT; DataType::ALL.len()];
        let mut index = 0;
        while index < all.len() {
            all[index] = Self(DataType::ALL[index]);
            index += 1;
        }
        all
    };

    /// The NCCL data type.
    pub const fn data_type(self) -> DataType {
        self.0
    }
}

impl ValueEnum for DataTypeArg {
    fn value_variants<'a>() -> &'a [Self] {
        &Self::ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.0.short_name()).help(self.0.description()))
    }
}

/// The reductions nccl-tests names with `-o`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ReduceOpArg {
    /// Sum.
    Sum,
    /// Product.
    Prod,
    /// Maximum.
    Max,
    /// Minimum.
    Min,
    /// Average.
    Avg,
}

impl ReduceOpArg {
    /// The NCCL reduction.
    pub const fn reduce_op(self) -> ReduceOp {
        match self {
            ReduceOpArg::Sum => ReduceOp::Sum,
            ReduceOpArg::Prod => ReduceOp::Prod,
            ReduceOpArg::Max => ReduceOp::Max,
            ReduceOpArg::Min => ReduceOp::Min,
            ReduceOpArg::Avg => ReduceOp::Avg,
        }
    }
}

/// Why a size could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid size {given:?}: {reason} (expected a number of bytes with an optional K, M or G suffix, e.g. 8, 64K, 128M, 1G)"
)]
pub struct SizeError {
    /// The text given.
    pub given: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// Parses a byte count with an optional `K`, `M` or `G` suffix (powers of
/// 1024, either case; a trailing `B` or `iB` is accepted too: `4KiB`).
/// A fraction is allowed when the result is whole bytes (`0.5K` = 512), as in
/// nccl-tests.
///
/// # Errors
/// [`SizeError`] for empty, negative, malformed, fractional-byte or
/// overflowing sizes.
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let error = |reason| SizeError {
        given: text.to_string(),
        reason,
    };
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(error("it is empty"));
    }
    let digits_end = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, suffix) = trimmed.split_at(digits_end);
    if number.is_empty() {
        return Err(error("it does not start with a number"));
    }
    let multiplier: u64 = match suffix.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        _ => return Err(error("unknown suffix")),
    };
    if let Ok(whole) = number.parse::<u64>() {
        return whole
            .checked_mul(multiplier)
            .ok_or_else(|| error("it is too large"));
    }
    let value: f64 = number.parse().map_err(|_| error("it is not a number"))?;
    let bytes = value * multiplier as f64;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(error("it is too large"));
    }
    if bytes.fract() != 0.0 {
        return Err(error("it is not a whole number of bytes"));
    }
    Ok(bytes as u64)
}

fn parse_size_arg(text: &str) -> Result<u64, String> {
    parse_size(text).map_err(|error| error.to_string())
}

fn parse_nonzero_size_arg(text: &str) -> Result<u64, String> {
    match parse_size(text) {
        Ok(0) => Err("the step must be at least 1 byte".to_string()),
        Ok(bytes) => Ok(bytes),
        Err(error) => Err(error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_with_suffixes() {
        assert_eq!(parse_size("8"), Ok(8));
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("1K"), Ok(1024));
        assert_eq!(parse_size("64k"), Ok(64 * 1024));
        assert_eq!(parse_size("128M"), Ok(128 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("8g"), Ok(8 << 30));
        assert_eq!(parse_size("4KiB"), Ok(4096));
        assert_eq!(parse_size("2MB"), Ok(2 << 20));
        assert_eq!(parse_size(" 16 "), Ok(16));
        assert_eq!(parse_size("0.5K"), Ok(512));
        assert_eq!(parse_size("1.5M"), Ok(3 << 19));
    }

    #[test]
    fn bad_sizes_are_errors() {
        for bad in [
            "",
            "K",
            "-8",
            "8T",
            "1.5",
            "abc",
            "1..2M",
            "99999999999999999999",
            "17179869184G",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?} should not parse");
        }
    }

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
        assert_eq!(args.ngpus, None);
        assert_eq!(args.layer, LayerKind::Core);
        assert_eq!(args.collectives(), Collective::ALL.to_vec());
        assert_eq!(args.compare, None);
        assert_eq!(args.layers(), vec![LayerKind::Core]);
        assert_eq!((args.graph, args.batches()), (0, 1));
        assert_eq!((args.json.as_ref(), args.plot.as_ref()), (None, None));
    }

    #[test]
    fn compare_parses() {
        let c = parse_compare("raw,tensor").unwrap();
        assert_eq!((c.baseline, c.subject), (LayerKind::Raw, LayerKind::Tensor));
        let c = parse_compare(" Core , RAW ").unwrap();
        assert_eq!((c.baseline, c.subject), (LayerKind::Core, LayerKind::Raw));
        let c = parse_compare("raw,group").unwrap();
        assert_eq!((c.baseline, c.subject), (LayerKind::Raw, LayerKind::Group));

        let args = Args::try_parse_from(["nccl-perf", "--compare", "raw,core"]).unwrap();
        assert_eq!(args.layers(), vec![LayerKind::Raw, LayerKind::Core]);
        assert_eq!(args.batches(), 5, "--compare defaults to 5 batches");
        let args = Args::try_parse_from(["nccl-perf", "--compare", "raw,tensor", "--batches", "9"])
            .unwrap();
        assert_eq!(args.batches(), 9);
    }

    #[test]
    fn every_data_type_is_a_datatype_value_by_its_nccl_tests_name() {
        for dtype in DataType::ALL {
            let args = Args::try_parse_from(["nccl-perf", "-d", dtype.short_name()]).unwrap();
            assert_eq!(args.datatype.data_type(), dtype);
        }
        let names: Vec<String> = DataTypeArg::value_variants()
            .iter()
            .filter_map(|value| value.to_possible_value())
            .map(|value| value.get_name().to_string())
            .collect();
        assert_eq!(names.len(), DataType::ALL.len());
        assert!(names.iter().any(|name| name == "f8e5m2"), "{names:?}");
        assert!(Args::try_parse_from(["nccl-perf", "-d", "float32"]).is_err());
    }

    #[test]
    fn compare_errors() {
        assert_eq!(
            parse_compare("raw,raw"),
            Err(CompareError::SameLayer("raw"))
        );
        assert_eq!(
            parse_compare("tensor,TENSOR"),
            Err(CompareError::SameLayer("tensor"))
        );
        let unknown = parse_compare("raw,groups").unwrap_err();
        assert_eq!(
            unknown.to_string(),
            "unknown layer \"groups\" (expected one of: raw, core, tensor, group, group-caller)"
        );
        for bad in ["raw", "raw,", ",core", "raw,core,tensor", "", "raw;core"] {
            assert!(
                matches!(parse_compare(bad), Err(CompareError::NotTwo(_))),
                "{bad:?}"
            );
        }
        for bad in [
            &["nccl-perf", "--compare", "raw,raw"][..],
            &["nccl-perf", "--compare", "raw,magic"],
            &["nccl-perf", "--compare", "raw"],
            &["nccl-perf", "--compare", "raw,core", "--layer", "tensor"],
            &["nccl-perf", "--compare", "raw,core", "--batches", "0"],
        ] {
            let error = Args::try_parse_from(bad).unwrap_err();
            assert_eq!(error.exit_code(), 2, "{bad:?}");
        }
        let error = Args::try_parse_from(["nccl-perf", "--compare", "core,core"]).unwrap_err();
        assert!(
            error.to_string().contains("two different layers"),
            "{error}"
        );
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
    fn invalid_flags_are_clap_errors() {
        for bad in [
            &["nccl-perf", "-c", "2"][..],
            &["nccl-perf", "-n", "0"],
            &["nccl-perf", "-f", "0"],
            &["nccl-perf", "-g", "0"],
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
