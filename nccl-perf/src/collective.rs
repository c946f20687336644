//! The collectives `nccl-perf` measures: for each, the library operations
//! one call issues ([`Collective::ops`]) and what nccl-tests does and
//! prints for it ([`Collective::facts`]). A new collective is a variant, a
//! row in each of the two, and its reference result in `check`.

use std::fmt;

use nccl_core::{Op, ReduceOp, Reduction};
use nccl_tensor::{Sizes, rules};

/// One collective of nccl-tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Collective {
    /// `ncclAllReduce` (all_reduce_perf).
    AllReduce,
    /// `ncclBroadcast` (broadcast_perf).
    Broadcast,
    /// `ncclReduce` (reduce_perf).
    Reduce,
    /// `ncclAllGather` (all_gather_perf).
    AllGather,
    /// `ncclReduceScatter` (reduce_scatter_perf).
    ReduceScatter,
    /// `ncclAlltoAll`, or grouped send/recv on a libnccl older than 2.28 (alltoall_perf).
    AllToAll,
    /// `ncclSend` to the next rank and `ncclRecv` from the previous one in one group (sendrecv_perf).
    SendRecv,
    /// `ncclGather`, or grouped send/recv on a libnccl older than 2.28 (gather_perf).
    Gather,
    /// `ncclScatter`, or grouped send/recv on a libnccl older than 2.28 (scatter_perf).
    Scatter,
}

/// Out-of-place (separate send and receive buffers) or in-place (one buffer).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Separate send and receive buffers.
    OutOfPlace,
    /// One buffer, laid out as nccl-tests does.
    InPlace,
}

impl Mode {
    /// Both modes, in the order nccl-tests runs and prints them.
    pub const BOTH: [Mode; 2] = [Mode::OutOfPlace, Mode::InPlace];

    /// `out_of_place` or `in_place` (the JSON keys).
    pub const fn key(self) -> &'static str {
        match self {
            Mode::OutOfPlace => "out_of_place",
            Mode::InPlace => "in_place",
        }
    }
}

/// How nccl-tests rounds the count down for a collective whose buffers
/// hold one block per rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rounding {
    /// No rounding (the collectives of one block).
    None,
    /// A multiple of this many elements per rank (nccl-tests' `ALIGN`).
    Elements(usize),
    /// Whole chunks of this many bytes per rank.
    Bytes(usize),
}

/// nccl-tests' bus bandwidth factor on `n` ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BusFactor {
    /// 2(n-1)/n.
    AllReduce,
    /// (n-1)/n.
    Spread,
    /// 1.
    One,
}

/// What nccl-perf knows about one collective beyond its operations: one
/// row of [`Collective::facts`].
#[derive(Clone, Copy, Debug)]
pub struct Facts {
    /// The name on the command line and in the output (`all_reduce`).
    pub name: &'static str,
    /// The name with dashes (`all-reduce`), accepted on the command line too.
    pub dashed_name: &'static str,
    /// How nccl-tests rounds the count.
    pub rounding: Rounding,
    /// The bus bandwidth factor.
    pub bus: BusFactor,
    /// Whether nccl-tests checks the in-place result (not where the
    /// in-place form sends from the buffer it receives into).
    pub checks_in_place: bool,
    /// Whether nccl-tests prints the reduction in the `redop` column
    /// (the reducing collectives, and sendrecv).
    pub prints_redop: bool,
}

impl Collective {
    /// Every collective, in the order `nccl-perf all` runs them.
    pub const ALL: [Collective; 9] = [
        Collective::AllReduce,
        Collective::Broadcast,
        Collective::Reduce,
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::AllToAll,
        Collective::SendRecv,
        Collective::Gather,
        Collective::Scatter,
    ];

    /// The one table of what nccl-perf knows about each collective, with
    /// [`Collective::ops`].
    pub const fn facts(self) -> Facts {
        use BusFactor::{AllReduce, One, Spread};
        #[rustfmt::skip]
        let (name, dashed_name, rounding, bus, checks_in_place, prints_redop) = match self {
            //                          name              dashed            rounding                bus        in place  redop
            Collective::AllReduce =>     ("all_reduce",     "all-reduce",     Rounding::None,         AllReduce, true,     true),
            Collective::Broadcast =>     ("broadcast",      "broadcast",      Rounding::None,         One,       true,     false),
            Collective::Reduce =>        ("reduce",         "reduce",         Rounding::None,         One,       true,     true),
            Collective::AllGather =>     ("all_gather",     "all-gather",     Rounding::Elements(4),  Spread,    true,     false),
            Collective::ReduceScatter => ("reduce_scatter", "reduce-scatter", Rounding::Elements(4),  Spread,    true,     true),
            Collective::AllToAll =>      ("all_to_all",     "all-to-all",     Rounding::Bytes(16),    Spread,    false,    false),
            Collective::SendRecv =>      ("sendrecv",       "sendrecv",       Rounding::None,         One,       false,    true),
            Collective::Gather =>        ("gather",         "gather",         Rounding::Bytes(16),    Spread,    true,     false),
            Collective::Scatter =>       ("scatter",        "scatter",        Rounding::Bytes(16),    Spread,    true,     false),
        };
        Facts {
            name,
            dashed_name,
            rounding,
            bus,
            checks_in_place,
            prints_redop,
        }
    }

    /// The library operations one call issues (in one NCCL group when
    /// there are several), with the reduction `op`, the `root`, and the
    /// `ring` neighbours (next, previous) of sendrecv, which is a send to
    /// the next rank and a receive from the previous one.
    pub fn ops(
        self,
        op: ReduceOp,
        root: usize,
        (next, previous): (usize, usize),
    ) -> Vec<Op<'static>> {
        let op = Reduction::from(op);
        match self {
            Collective::AllReduce => vec![Op::AllReduce(op)],
            Collective::Broadcast => vec![Op::Broadcast { root }],
            Collective::Reduce => vec![Op::Reduce { op, root }],
            Collective::AllGather => vec![Op::AllGather],
            Collective::ReduceScatter => vec![Op::ReduceScatter(op)],
            Collective::AllToAll => vec![Op::AllToAll],
            Collective::SendRecv => vec![Op::Send { peer: next }, Op::Recv { peer: previous }],
            Collective::Gather => vec![Op::Gather { root }],
            Collective::Scatter => vec![Op::Scatter { root }],
        }
    }

    /// How the buffers' lengths relate, by nccl-tensor's rules for the
    /// collective's (first) operation.
    pub fn sizes(self) -> Sizes {
        self.ops(ReduceOp::Sum, 0, (0, 0))
            .first()
            .map_or(Sizes::SAME, |op| rules(op).sizes)
    }

    /// The name on the command line and in the output (`all_reduce`).
    pub const fn name(self) -> &'static str {
        self.facts().name
    }

    /// The name with dashes (`all-reduce`), accepted on the command line too.
    pub const fn dashed_name(self) -> &'static str {
        self.facts().dashed_name
    }

    /// Whether the collective reduces (uses `-o`).
    pub fn reduces(self) -> bool {
        self.ops(ReduceOp::Sum, 0, (0, 0))
            .iter()
            .any(|op| op.reduction().is_some())
    }

    /// Whether the collective has a root (uses `-r`).
    pub fn has_root(self) -> bool {
        self.ops(ReduceOp::Sum, 0, (0, 0))
            .iter()
            .any(|op| matches!(op.rank_argument(), Some(("root", _))))
    }

    /// What nccl-tests prints in the `redop` column: the reduction where
    /// `prints_redop` in [`Collective::facts`], `none` for the others.
    pub fn redop_column(self, op: nccl_core::ReduceOp) -> &'static str {
        if self.facts().prints_redop {
            op.name()
        } else {
            "none"
        }
    }

    /// What nccl-tests prints in the `root` column: the root, or -1.
    /// Roots are ranks, at most `i32::MAX` (`-r` refuses more).
    pub fn root_column(self, root: usize) -> i32 {
        match i32::try_from(root) {
            Ok(root) if self.has_root() => root,
            _ => -1,
        }
    }

    /// Whether the result of this mode can be checked (`checks_in_place` in [`Collective::facts`]);
    /// nccl-tests prints `N/A` for the others.
    pub const fn checks(self, mode: Mode) -> bool {
        matches!(mode, Mode::OutOfPlace) || self.facts().checks_in_place
    }

    /// nccl-tests' bus bandwidth factor for `world` ranks: all_reduce
    /// 2(n-1)/n; the collectives of one block per rank (n-1)/n; broadcast,
    /// reduce, sendrecv 1.
    pub fn bus_factor(self, world: usize) -> f64 {
        let n = world.max(1) as f64;
        match self.facts().bus {
            BusFactor::AllReduce => 2.0 * (n - 1.0) / n,
            BusFactor::Spread => (n - 1.0) / n,
            BusFactor::One => 1.0,
        }
    }
}

impl fmt::Display for Collective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_factors() {
        // Each collective's factor at some world sizes: (n - 1) / n for the
        // gathering ones, 1 for the rooted ones and sendrecv.
        for (collectives, factors) in [
            (
                &[Collective::AllReduce][..],
                &[(1, 0.0), (2, 1.0), (8, 1.75)][..],
            ),
            (
                &[
                    Collective::AllGather,
                    Collective::ReduceScatter,
                    Collective::AllToAll,
                ],
                &[(1, 0.0), (4, 0.75), (8, 0.875)],
            ),
            (
                &[
                    Collective::Broadcast,
                    Collective::Reduce,
                    Collective::SendRecv,
                ],
                &[(1, 1.0), (8, 1.0)],
            ),
        ] {
            for &collective in collectives {
                for &(world, factor) in factors {
                    let got = collective.bus_factor(world);
                    assert!(
                        (got - factor).abs() < 1e-12,
                        "{collective} at world size {world}: {got}, expected {factor}"
                    );
                }
            }
        }
    }

    #[test]
    fn columns_as_nccl_tests() {
        assert_eq!(Collective::AllReduce.redop_column(ReduceOp::Sum), "sum");
        assert_eq!(Collective::Reduce.redop_column(ReduceOp::Max), "max");
        assert_eq!(Collective::SendRecv.redop_column(ReduceOp::Sum), "sum");
        assert_eq!(Collective::AllGather.redop_column(ReduceOp::Sum), "none");
        assert_eq!(Collective::Broadcast.redop_column(ReduceOp::Prod), "none");
        assert_eq!(Collective::AllToAll.redop_column(ReduceOp::Sum), "none");
        assert_eq!(Collective::Broadcast.root_column(0), 0);
        assert_eq!(Collective::Reduce.root_column(3), 3);
        assert_eq!(Collective::AllReduce.root_column(3), -1);
        assert!(!Collective::AllToAll.checks(Mode::InPlace));
        assert!(!Collective::SendRecv.checks(Mode::InPlace));
        assert!(Collective::AllToAll.checks(Mode::OutOfPlace));
        assert!(Collective::AllGather.checks(Mode::InPlace));
    }
}
