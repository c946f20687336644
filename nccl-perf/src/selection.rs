//! What `-d`, `-o`, `-r` and `-N` select, and the rows of a collective's
//! table they make, in nccl-tests' order: per element type, per reduction
//! (the collectives that print one), per root (those that have one), the
//! sizes, `-N` times.

use nccl_core::{DataType, ReduceOp};

use crate::collective::Collective;
use crate::sizes::OpCounts;

/// The element types, reductions, roots and cycles of a run, `all`
/// expanded (see [`crate::cli::Args::selection`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection {
    /// `-d`: one type, or every type in nccl-tests' order.
    pub dtypes: Vec<DataType>,
    /// `-o`: one reduction, or every one nccl-perf has.
    pub ops: Vec<ReduceOp>,
    /// `-r`: one root, or every rank.
    pub roots: Vec<usize>,
    /// `-N`: how many times the sizes are run and printed.
    pub cycles: u32,
}

impl Default for Selection {
    /// nccl-tests' defaults: float, sum, root 0, once.
    fn default() -> Self {
        Self {
            dtypes: vec![DataType::Float32],
            ops: vec![ReduceOp::Sum],
            roots: vec![0],
            cycles: 1,
        }
    }
}

/// One row of a collective's table before it is measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowSpec {
    /// The element type.
    pub dtype: DataType,
    /// The reduction (the first of `-o` for collectives that print none).
    pub op: ReduceOp,
    /// The root (the first of `-r` for collectives that have none).
    pub root: usize,
    /// The size of the sweep, in bytes.
    pub size: u64,
    /// The element counts at that size.
    pub counts: OpCounts,
}

impl Selection {
    /// The rows of `collective`'s table over `sizes` on `world` ranks, in
    /// the order nccl-tests runs and prints them.
    pub fn rows(&self, collective: Collective, sizes: &[u64], world: usize) -> Vec<RowSpec> {
        let first = |values: &[usize]| values.first().copied().unwrap_or(0);
        let ops = if collective.facts().prints_redop {
            self.ops.clone()
        } else {
            self.ops.first().copied().into_iter().collect()
        };
        let roots = if collective.has_root() {
            self.roots.clone()
        } else {
            vec![first(&self.roots)]
        };
        let mut rows = Vec::new();
        for &dtype in &self.dtypes {
            for &op in &ops {
                for &root in &roots {
                    for _ in 0..self.cycles {
                        rows.extend(sizes.iter().map(|&size| RowSpec {
                            dtype,
                            op,
                            root,
                            size,
                            counts: OpCounts::new(collective, size, dtype.size_bytes(), world),
                        }));
                    }
                }
            }
        }
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selection(dtypes: &[DataType], ops: &[ReduceOp], roots: &[usize], cycles: u32) -> Selection {
        Selection {
            dtypes: dtypes.to_vec(),
            ops: ops.to_vec(),
            roots: roots.to_vec(),
            cycles,
        }
    }

    #[test]
    fn one_of_each_is_the_sweep() {
        let rows = Selection::default().rows(Collective::AllReduce, &[8, 16], 2);
        assert_eq!(rows.len(), 2);
        assert_eq!(
            (rows[1].dtype, rows[1].op, rows[1].size),
            (DataType::Float32, ReduceOp::Sum, 16)
        );
        assert_eq!(
            rows[1].counts,
            OpCounts::new(Collective::AllReduce, 16, 4, 2)
        );
    }

    #[test]
    fn rows_are_grouped_as_nccl_tests_prints_them() {
        use DataType::{Float32, Int8};
        use ReduceOp::{Max, Sum};
        let all = selection(&[Int8, Float32], &[Sum, Max], &[0, 1], 2);
        let sizes = [8, 16];
        // reduce: type, then op, then root, then the cycles of sizes.
        let rows = all.rows(Collective::Reduce, &sizes, 2);
        assert_eq!(rows.len(), 2 * 2 * 2 * 2 * 2);
        let key = |row: &RowSpec| (row.dtype, row.op, row.root, row.size);
        assert_eq!(key(&rows[0]), (Int8, Sum, 0, 8));
        assert_eq!(key(&rows[1]), (Int8, Sum, 0, 16));
        assert_eq!(key(&rows[2]), (Int8, Sum, 0, 8), "the second cycle");
        assert_eq!(key(&rows[4]), (Int8, Sum, 1, 8));
        assert_eq!(key(&rows[8]), (Int8, Max, 0, 8));
        assert_eq!(key(&rows[16]), (Float32, Sum, 0, 8));
        assert_eq!(rows[16].counts.param, 2, "float counts of the float rows");
        assert_eq!(rows[0].counts.param, 8, "int8 counts of the int8 rows");
        // all_reduce prints the op but has no root; broadcast the reverse;
        // all_gather neither.
        assert_eq!(
            all.rows(Collective::AllReduce, &sizes, 2).len(),
            2 * 2 * 2 * 2
        );
        let broadcast = all.rows(Collective::Broadcast, &sizes, 2);
        assert_eq!(broadcast.len(), 2 * 2 * 2 * 2);
        assert!(broadcast.iter().all(|row| row.op == Sum));
        let gather = all.rows(Collective::AllGather, &sizes, 2);
        assert_eq!(gather.len(), 2 * 2 * 2);
        assert!(gather.iter().all(|row| (row.op, row.root) == (Sum, 0)));
        // sendrecv prints the op, as nccl-tests loops over them for it.
        assert_eq!(
            all.rows(Collective::SendRecv, &sizes, 2).len(),
            2 * 2 * 2 * 2
        );
    }
}
