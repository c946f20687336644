//! The collectives `nccl-perf` measures and what nccl-tests prints for each.

use std::fmt;

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

impl Collective {
    /// Every collective, in the order `nccl-perf all` runs them.
    pub const ALL: [Collective; 7] = [
        Collective::AllReduce,
        Collective::Broadcast,
        Collective::Reduce,
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::AllToAll,
        Collective::SendRecv,
    ];

    /// The name on the command line and in the output (`all_reduce`).
    pub const fn name(self) -> &'static str {
        match self {
            Collective::AllReduce => "all_reduce",
            Collective::Broadcast => "broadcast",
            Collective::Reduce => "reduce",
            Collective::AllGather => "all_gather",
            Collective::ReduceScatter => "reduce_scatter",
            Collective::AllToAll => "all_to_all",
            Collective::SendRecv => "sendrecv",
        }
    }

    /// The name with dashes (`all-reduce`), accepted on the command line too.
    pub const fn dashed_name(self) -> &'static str {
        match self {
            Collective::AllReduce => "all-reduce",
            Collective::Broadcast => "broadcast",
            Collective::Reduce => "reduce",
            Collective::AllGather => "all-gather",
            Collective::ReduceScatter => "reduce-scatter",
            Collective::AllToAll => "all-to-all",
            Collective::SendRecv => "sendrecv",
        }
    }

    /// Whether the collective reduces (uses `-o`).
    pub const fn reduces(self) -> bool {
        matches!(
            self,
            Collective::AllReduce | Collective::Reduce | Collective::ReduceScatter
        )
    }

    /// Whether the collective has a root (uses `-r`).
    pub const fn has_root(self) -> bool {
        matches!(self, Collective::Broadcast | Collective::Reduce)
    }

    /// What nccl-tests prints in the `redop` column: the reduction for
    /// reducing collectives and, as nccl-tests does, for sendrecv; `none`
    /// for the others.
    pub fn redop_column(self, op: nccl_core::ReduceOp) -> &'static str {
        if self.reduces() || self == Collective::SendRecv {
            op.name()
        } else {
            "none"
        }
    }

    /// What nccl-tests prints in the `root` column: the root, or -1.
    pub fn root_column(self, root: i32) -> i32 {
        if self.has_root() { root } else { -1 }
    }

    /// Whether the result of this mode can be checked. nccl-tests does not
    /// check in-place all_to_all and sendrecv (their in-place form sends
    /// from the buffer it receives into) and prints `N/A`.
    pub const fn checks(self, mode: Mode) -> bool {
        !matches!(
            (self, mode),
            (Collective::AllToAll | Collective::SendRecv, Mode::InPlace)
        )
    }

    /// nccl-tests' bus bandwidth factor for `world` ranks: all_reduce
    /// 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n; broadcast,
    /// reduce, sendrecv 1.
    pub fn bus_factor(self, world: usize) -> f64 {
        let n = world.max(1) as f64;
        match self {
            Collective::AllReduce => 2.0 * (n - 1.0) / n,
            Collective::AllGather | Collective::ReduceScatter | Collective::AllToAll => {
                (n - 1.0) / n
            }
            Collective::Broadcast | Collective::Reduce | Collective::SendRecv => 1.0,
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
    use nccl_core::ReduceOp;

    #[test]
    fn bus_factors() {
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        assert!(close(Collective::AllReduce.bus_factor(1), 0.0));
        assert!(close(Collective::AllReduce.bus_factor(2), 1.0));
        assert!(close(Collective::AllReduce.bus_factor(8), 1.75));
        for c in [
            Collective::AllGather,
            Collective::ReduceScatter,
            Collective::AllToAll,
        ] {
            assert!(close(c.bus_factor(1), 0.0));
            assert!(close(c.bus_factor(4), 0.75));
            assert!(close(c.bus_factor(8), 0.875));
        }
        for c in [
            Collective::Broadcast,
            Collective::Reduce,
            Collective::SendRecv,
        ] {
            assert!(close(c.bus_factor(1), 1.0));
            assert!(close(c.bus_factor(8), 1.0));
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
