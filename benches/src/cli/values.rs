//! The values of the collective, `-d`, `-o` and `--group-comms`
//! arguments, and what each stands for.

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

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::Args;

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
}
