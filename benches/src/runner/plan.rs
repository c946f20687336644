//! What every rank runs: the collectives, sizes, layers and timing of one
//! nccl-perf invocation, read from its flags.

use nccl_group::CommMode;

use crate::cli::Args;
use crate::collective::Collective;
use crate::error::BenchError;
use crate::layer::LayerKind;
use crate::method::Method;
use crate::selection::{RowSpec, Selection};
use crate::sizes::sweep;

/// What every rank runs, in the same order.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The collectives, in order.
    pub collectives: Vec<Collective>,
    /// The message sizes in bytes, in order.
    pub sizes: Vec<u64>,
    /// The element types, reductions, roots and cycles (`-d`, `-o`, `-r`, `-N`).
    pub selection: Selection,
    /// How the run measures and reports (nccl-tests' method and flags).
    pub method: Method,
    /// Iterations per timed batch (and in each CUDA graph).
    pub iters: u32,
    /// Warm-up iterations.
    pub warmup: u32,
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
}

impl Plan {
    /// The plan for `args` on `world` GPUs.
    ///
    /// # Errors
    /// [`BenchError::Usage`] for a root past the last rank or flags that
    /// cannot run together ([`Args::method`], [`Args::selection`]).
    pub fn new(args: &Args, world: usize) -> Result<Self, BenchError> {
        Ok(Self {
            collectives: args.collectives(),
            selection: args.selection(Some(world))?,
            method: args.method()?,
            sizes: sweep(
                args.min_bytes,
                args.max_bytes,
                args.step_factor,
                args.step_bytes,
            ),
            iters: args.iters,
            warmup: args.warmup_iters,
            layers: args.layers(),
            batches: args.batches(),
            graph: args.graph,
            world,
            group_comms: args.group_comms.comm_mode(),
        })
    }

    /// The rows of `collective`'s table, in order ([`Selection::rows`]).
    pub fn rows(&self, collective: Collective) -> Vec<RowSpec> {
        self.selection.rows(collective, &self.sizes, self.world)
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

    /// Table rows the run prints (over every collective), for the progress bar.
    pub fn row_count(&self) -> u64 {
        self.collectives
            .iter()
            .map(|&collective| self.rows(collective).len() as u64)
            .sum()
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
        assert_eq!(plan.rows(Collective::Reduce)[0].counts.param, 2);
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
