//! One of each nccl-core operation, for the tests that run a check over
//! all of them (nccl-core's operation descriptions, nccl-tensor's argument
//! checks).

use nccl_core::{Op, ReduceOp, Reduction};

/// One of each operation, in the order of `Op`'s variants: reductions are
/// sums, every root and peer is `rank`.
pub fn every_op(rank: usize) -> [Op<'static>; 10] {
    const SUM: Reduction<'static> = Reduction::Builtin(ReduceOp::Sum);
    [
        Op::AllReduce(SUM),
        Op::Broadcast { root: rank },
        Op::Reduce {
            op: SUM,
            root: rank,
        },
        Op::AllGather,
        Op::ReduceScatter(SUM),
        Op::AllToAll,
        Op::Gather { root: rank },
        Op::Scatter { root: rank },
        Op::Send { peer: rank },
        Op::Recv { peer: rank },
    ]
}
