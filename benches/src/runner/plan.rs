//! What every rank runs: the collectives, sizes, layers and timing of one
//! nccl-perf invocation, read from its flags.

use nccl_core::{DataType, ReduceOp};
use nccl_group::CommMode;

use crate::cli::Args;
use crate::collective::Collective;
use crate::error::BenchError;
use crate::layer::LayerKind;
use crate::sizes::{OpCounts, sweep};

/// What every rank runs, in the same order.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The collectives, in order.
    pub collectives: Vec<Collective>,
    /// The message sizes in bytes, in order.
    pub sizes: Vec<u64>,
    /// The element type.
    pub dtype: DataType,
    /// The reduction.
    pub op: ReduceOp,
    /// The root of broadcast and reduce.
    pub root: i32,
    /// Calls per timed batch (and in each CUDA graph).
    pub iters: u32,
    /// Warm-up iterations.
    pub warmup: u32,
    /// Whether results are checked.
    pub check: bool,
    /// The layers issuing the calls: one, or A (baseline) and B of `--compare`.
    pub layers: Vec<LayerKind>,
    /// Timed batches per size, mode and layer.
    pub batches: u32,
    /// Graph replays per batch (`-G`); 0 calls the layers directly.
    pub graph: u32,
    /// The number of ranks (GPUs).
    pub world: usize,
    /// The group layers' communicator kind (`--group-comms`).
    pub group_comms: CommMode,
    /// How sizes grow, as nccl-tests prints it (`2(factor)`, `1048576(bytes)`).
    pub step: String,
}

impl Plan {
    /// The plan for `args` on `world` GPUs.
    ///
    /// # Errors
    /// [`BenchError::Usage`] for a root past the last rank.
    pub fn new(args: &Args, world: usize) -> Result<Self, BenchError> {
        let collectives = args.collectives();
        if args.root as usize >= world && collectives.iter().any(|c| c.has_root()) {
            return Err(BenchError::Usage(format!(
                "-r {} is not a rank: with {world} GPU(s) the root must be in 0..{world}",
                args.root
            )));
        }
        Ok(Self {
            collectives,
            sizes: sweep(
                args.min_bytes,
                args.max_bytes,
                args.step_factor,
                args.step_bytes,
            ),
            dtype: args.datatype.data_type(),
            op: args.op.reduce_op(),
            root: args.root,
            iters: args.iters,
            warmup: args.warmup_iters,
            check: args.check_enabled(),
            layers: args.layers(),
            batches: args.batches(),
            graph: args.graph,
            world,
            group_comms: args.group_comms.comm_mode(),
            step: if args.step_factor > 1 {
                format!("{}(factor)", args.step_factor)
            } else {
                format!("{}(bytes)", args.step_bytes)
            },
        })
    }

    /// The counts of `collective` at every size.
    pub fn counts(&self, collective: Collective) -> Vec<OpCounts> {
        self.sizes
            .iter()
            .map(|&size| OpCounts::new(collective, size, self.dtype.size_bytes(), self.world))
            .collect()
    }

    /// `(A, B)` of `--compare`.
    pub fn compare(&self) -> Option<(LayerKind, LayerKind)> {
        match self.layers[..] {
            [a, b] => Some((a, b)),
            _ => None,
        }
    }

    /// The layer whose table is printed (B of `--compare`).
    pub fn table_layer(&self) -> LayerKind {
        self.layers.last().copied().unwrap_or(LayerKind::Core)
    }

    /// `tensor` or `tensor vs raw`: the layers as titles name them.
    pub fn layers_title(&self) -> String {
        match self.compare() {
            Some((a, b)) => format!("{} vs {}", b.name(), a.name()),
            None => self.table_layer().name().to_string(),
        }
    }

    /// Table rows the run prints (one per collective and size), for the progress bar.
    pub fn row_count(&self) -> u64 {
        (self.collectives.len() * self.sizes.len()) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn plan_from_args() {
        let args = Args::try_parse_from(["nccl-perf", "-b", "8", "-e", "64", "-r", "1", "reduce"])
            .unwrap();
        let plan = Plan::new(&args, 2).unwrap();
        assert_eq!(plan.sizes, vec![8, 16, 32, 64]);
        assert_eq!(plan.collectives, vec![Collective::Reduce]);
        assert_eq!(plan.counts(Collective::Reduce)[0].param, 2);
        let error = Plan::new(&args, 1).unwrap_err();
        assert_eq!(error.exit_code(), 2);
        // A root past the last rank does not matter to collectives without one.
        let args = Args::try_parse_from(["nccl-perf", "-r", "5", "all_gather"]).unwrap();
        assert!(Plan::new(&args, 1).is_ok());
    }

    #[test]
    fn compare_and_graph_plans() {
        let args = Args::try_parse_from([
            "nccl-perf",
            "--compare",
            "raw,tensor",
            "-G",
            "100",
            "-n",
            "20",
            "-b",
            "8",
            "-e",
            "1K",
            "all_gather",
        ])
        .unwrap();
        let plan = Plan::new(&args, 1).unwrap();
        assert_eq!(plan.layers, vec![LayerKind::Raw, LayerKind::Tensor]);
        assert_eq!(plan.compare(), Some((LayerKind::Raw, LayerKind::Tensor)));
        assert_eq!(plan.table_layer(), LayerKind::Tensor);
        assert_eq!(plan.layers_title(), "tensor vs raw");
        assert_eq!((plan.graph, plan.batches, plan.row_count()), (100, 5, 8));

        let args = Args::try_parse_from(["nccl-perf", "--layer", "raw", "all_reduce"]).unwrap();
        let plan = Plan::new(&args, 2).unwrap();
        assert_eq!(plan.compare(), None);
        assert_eq!(plan.layers_title(), "raw");
    }
}
