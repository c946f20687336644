//! The values of the collective, `-d`, `-o`, `-r`, `--group-comms` and
//! `--group-mismatch-check` arguments, and what each stands for.

use clap::ValueEnum;
use nccl_core::{DataType, ReduceOp};

use crate::collective::Collective;

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

/// A switch on the command line (`--group-mismatch-check`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OnOff {
    /// On.
    On,
    /// Off.
    Off,
}

impl OnOff {
    /// Whether it is on.
    pub const fn is_on(self) -> bool {
        matches!(self, OnOff::On)
    }
}

/// A collective named on the command line, or `all`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CollectiveArg {
    /// Every collective, in [`Collective::ALL`] order.
    All,
    /// One collective.
    One(Collective),
}

/// The values of an argument enum of `All` and `One(value)`, as a
/// constant: `One` of each value of `every` in its order, then `All`.
macro_rules! each_then_all {
    ($arg:ident, $every:expr) => {{
        let mut values = [$arg::All; $every.len() + 1];
        let mut index = 0;
        while index < $every.len() {
            values[index] = $arg::One($every[index]);
            index += 1;
        }
        values
    }};
}

/// Every collective of [`Collective::ALL`], then `all`.
const COLLECTIVE_ARGS: [CollectiveArg; Collective::ALL.len() + 1] =
    each_then_all!(CollectiveArg, Collective::ALL);

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

/// `-d`: one element type by the name nccl-tests gives it (`float`, `half`,
/// `bfloat16`, `f8e4m3`, ...), or `all`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataTypeArg {
    /// Every [`DataType`], in nccl-tests' order.
    All,
    /// One type.
    One(DataType),
}

impl DataTypeArg {
    /// `float`, nccl-tests' default.
    pub const FLOAT: Self = Self::One(DataType::Float32);

    /// Every type, then `all`.
    const VALUES: [Self; DataType::ALL.len() + 1] = each_then_all!(DataTypeArg, DataType::ALL);

    /// The types to run, in order (nccl-tests' order for `all`, which is
    /// [`DataType::ALL`]'s).
    pub fn data_types(self) -> Vec<DataType> {
        match self {
            DataTypeArg::All => DataType::ALL.to_vec(),
            DataTypeArg::One(dtype) => vec![dtype],
        }
    }
}

impl ValueEnum for DataTypeArg {
    fn value_variants<'a>() -> &'a [Self] {
        &Self::VALUES
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(match self {
            DataTypeArg::All => clap::builder::PossibleValue::new("all").help("every type in turn"),
            DataTypeArg::One(dtype) => {
                clap::builder::PossibleValue::new(dtype.short_name()).help(dtype.description())
            }
        })
    }
}

/// `-o`: the reductions nccl-tests names, or `all`.
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
    /// nccl-tests' pre-multiplied sum (ncclRedOpCreatePreMulSum): not implemented, refused.
    Mulsum,
    /// Every reduction in turn (without mulsum).
    All,
}

impl ReduceOpArg {
    /// The reductions to run, in nccl-tests' order; `None` for `mulsum`,
    /// which nccl-perf does not implement (`all` runs the others).
    pub fn reduce_ops(self) -> Option<Vec<ReduceOp>> {
        Some(match self {
            ReduceOpArg::Sum => vec![ReduceOp::Sum],
            ReduceOpArg::Prod => vec![ReduceOp::Prod],
            ReduceOpArg::Max => vec![ReduceOp::Max],
            ReduceOpArg::Min => vec![ReduceOp::Min],
            ReduceOpArg::Avg => vec![ReduceOp::Avg],
            ReduceOpArg::Mulsum => return None,
            ReduceOpArg::All => ReduceOp::ALL.to_vec(),
        })
    }
}

/// `-r`: one root rank, or every rank (`all`, or nccl-tests' `-1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RootArg {
    /// Every rank in turn.
    All,
    /// One rank.
    One(usize),
}

impl RootArg {
    /// The roots to run on `world` ranks, in order.
    pub fn roots(self, world: usize) -> Vec<usize> {
        match self {
            RootArg::All => (0..world).collect(),
            RootArg::One(root) => vec![root],
        }
    }
}

/// Parses `-r`: a rank (0, 1, ...), or `all` or `-1` for every rank.
pub(super) fn parse_root_arg(text: &str) -> Result<RootArg, String> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("all") || text == "-1" {
        return Ok(RootArg::All);
    }
    // At most i32::MAX, the most ranks NCCL counts.
    match text.parse::<i32>().map(usize::try_from) {
        Ok(Ok(root)) => Ok(RootArg::One(root)),
        _ => Err(format!(
            "expected a rank (0, 1, ...), or all (or -1) for every rank, got {text:?}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::Args;

    #[test]
    fn every_data_type_is_a_datatype_value_by_its_nccl_tests_name() {
        for dtype in DataType::ALL {
            let args = Args::try_parse_from(["nccl-perf", "-d", dtype.short_name()]).unwrap();
            assert_eq!(args.datatype, DataTypeArg::One(dtype));
            assert_eq!(args.datatype.data_types(), vec![dtype]);
        }
        let names: Vec<String> = DataTypeArg::value_variants()
            .iter()
            .filter_map(|value| value.to_possible_value())
            .map(|value| value.get_name().to_string())
            .collect();
        assert_eq!(names.len(), DataType::ALL.len() + 1);
        assert_eq!(names.last().map(String::as_str), Some("all"));
        assert!(names.iter().any(|name| name == "f8e5m2"), "{names:?}");
        assert!(Args::try_parse_from(["nccl-perf", "-d", "float32"]).is_err());
        let all = Args::try_parse_from(["nccl-perf", "-d", "all"]).unwrap();
        assert_eq!(all.datatype.data_types(), DataType::ALL.to_vec());
    }

    #[test]
    fn reductions_and_roots() {
        assert_eq!(ReduceOpArg::All.reduce_ops(), Some(ReduceOp::ALL.to_vec()));
        assert_eq!(ReduceOpArg::Min.reduce_ops(), Some(vec![ReduceOp::Min]));
        assert_eq!(ReduceOpArg::Mulsum.reduce_ops(), None);
        assert_eq!(parse_root_arg("3"), Ok(RootArg::One(3)));
        assert_eq!(parse_root_arg("all"), Ok(RootArg::All));
        assert_eq!(parse_root_arg("ALL"), Ok(RootArg::All));
        assert_eq!(parse_root_arg("-1"), Ok(RootArg::All));
        for bad in ["-2", "x", "", "1.5", "99999999999"] {
            let error = parse_root_arg(bad).unwrap_err();
            assert!(error.contains("expected a rank"), "{bad}: {error}");
        }
        assert_eq!(RootArg::All.roots(3), vec![0, 1, 2]);
        assert_eq!(RootArg::One(2).roots(3), vec![2]);
    }
}
