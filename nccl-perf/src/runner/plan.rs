//! What every rank runs: the collectives, sizes, layers and timing of one
//! nccl-perf invocation, read from its flags, and the ranks it runs on.

use nccl_group::GroupOptions;

use super::layout::Layout;
use super::protocol::RowKey;
use crate::cli::Args;
use crate::collective::{Collective, Mode};
use crate::error::BenchError;
use crate::layer::LayerKind;
use crate::method::{Average, Method};
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
    /// The number of ranks (GPUs), over every process.
    pub world: usize,
    /// Threads per process (`-t`), as the preamble prints them.
    pub threads: usize,
    /// GPUs per thread (`-g`), as the preamble prints them.
    pub gpus_per_thread: usize,
    /// How a row's time comes from the ranks' (`-a`).
    pub average: Average,
    /// The group layers' options but the stream mode
    /// ([`Args::group_options`]); their `config` is every layer's NCCL
    /// config (`-x`).
    pub group_options: GroupOptions,
}

impl Plan {
    /// The plan for `args` on the ranks of `layout`.
    ///
    /// # Errors
    /// [`BenchError::Usage`] for a root past the last rank or flags that
    /// cannot run together ([`Args::method`], [`Args::selection`]).
    pub fn new(args: &Args, layout: &Layout) -> Result<Self, BenchError> {
        let world = layout.world();
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
            threads: layout.threads,
            gpus_per_thread: layout.gpus_per_thread,
            average: args.average(),
            group_options: args.group_options(),
        })
    }

    /// The rows of `collective`'s table, in order ([`Selection::rows`]).
    pub fn rows(&self, collective: Collective) -> Vec<RowSpec> {
        self.selection.rows(collective, &self.sizes, self.world)
    }

    /// The ranks of each process (`-t` × `-g`), consecutive in rank order.
    pub fn ranks_per_process(&self) -> usize {
        self.threads * self.gpus_per_thread
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

    /// Every mode of every row of every layer, in the order the ranks
    /// measure them.
    pub fn row_keys(&self) -> Vec<RowKey> {
        let mut keys = Vec::new();
        for (collective, &kind) in self.collectives.iter().enumerate() {
            for row in 0..self.rows(kind).len() {
                for mode in Mode::BOTH {
                    keys.extend((0..self.layers.len()).map(|layer| RowKey {
                        collective,
                        row,
                        mode,
                        layer,
                    }));
                }
            }
        }
        keys
    }

    /// What every process of a run must agree on, by name: the shape of
    /// the world first (the likely mismatch: other GPU counts), then each
    /// flag, then the whole plan (whatever else it holds).
    pub fn fingerprint(&self) -> Vec<(String, String)> {
        [
            ("world size", self.world.to_string()),
            ("threads per process (-t)", self.threads.to_string()),
            ("GPUs per thread (-g)", self.gpus_per_thread.to_string()),
            ("collectives", format!("{:?}", self.collectives)),
            ("sizes (-b, -e, -f, -i)", format!("{:?}", self.sizes)),
            (
                "data types, reductions, roots, cycles (-d, -o, -r, -N)",
                format!("{:?}", self.selection),
            ),
            ("iterations (-n)", self.iters.to_string()),
            ("warm-up iterations (-w)", self.warmup.to_string()),
            (
                "method (-c, -m, -z, -y, -C, -u, rotation, ...)",
                format!("{:?}", self.method),
            ),
            ("layers (--layer, --compare)", format!("{:?}", self.layers)),
            ("batches (--batches)", self.batches.to_string()),
            ("CUDA graph replays (-G)", self.graph.to_string()),
            ("average (-a)", format!("{:?}", self.average)),
            (
                "group communicators (--group-comms)",
                format!("{:?}", self.group_options.comm_mode),
            ),
            (
                "group mismatch check (--group-mismatch-check)",
                self.group_options.mismatch_check.to_string(),
            ),
            (
                "communicator config (-x)",
                format!("{:?}", self.group_options.config),
            ),
            ("plan", format!("{self:?}")),
        ]
        .into_iter()
        .map(|(name, value)| (name.to_string(), value))
        .collect()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use clap::Parser;

    /// The arguments of `nccl-perf flags...`.
    fn args_of(flags: &[&str]) -> Args {
        Args::try_parse_from([&["nccl-perf"], flags].concat()).unwrap()
    }

    /// The plan of `nccl-perf flags...` in one process driving `world` GPUs.
    pub(crate) fn plan_of(flags: &[&str], world: usize) -> Plan {
        Plan::new(&args_of(flags), &Layout::single_process(world)).unwrap()
    }

    /// Two layers compared, each size's calls captured in a CUDA graph
    /// replayed 100 times: all_gather from 8 B to 1 KiB.
    pub(crate) const COMPARE_AND_GRAPH: &[&str] = &[
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
    ];

    #[test]
    fn plan_from_args() {
        let args = args_of(&["-b", "8", "-e", "64", "-r", "1", "reduce"]);
        let plan = Plan::new(&args, &Layout::single_process(2)).unwrap();
        assert_eq!(plan.sizes, vec![8, 16, 32, 64]);
        assert_eq!(plan.collectives, vec![Collective::Reduce]);
        assert_eq!(plan.rows(Collective::Reduce)[0].counts.param, 2);
        assert_eq!(
            (plan.threads, plan.gpus_per_thread, plan.average),
            (1, 2, Average::Mean)
        );
        assert_eq!(plan.ranks_per_process(), 2);
        let error = Plan::new(&args, &Layout::single_process(1)).unwrap_err();
        assert_eq!(error.exit_code(), 2);
        assert_eq!(
            error.to_string(),
            "-r 1 is not a rank: with 1 rank(s) the root must be in 0..1"
        );
        // A root past the last rank does not matter to collectives without one.
        let args = args_of(&["-r", "5", "all_gather"]);
        assert!(Plan::new(&args, &Layout::single_process(1)).is_ok());
    }

    #[test]
    fn compare_and_graph_plans() {
        let plan = plan_of(COMPARE_AND_GRAPH, 1);
        assert_eq!(plan.layers, vec![LayerKind::Raw, LayerKind::Tensor]);
        assert_eq!(plan.compare(), Some((LayerKind::Raw, LayerKind::Tensor)));
        assert_eq!(plan.table_layer(), LayerKind::Tensor);
        assert_eq!(plan.layers_title(), "tensor vs raw");
        assert_eq!((plan.graph, plan.batches, plan.row_count()), (100, 5, 8));

        let plan = plan_of(&["--layer", "raw", "all_reduce"], 2);
        assert_eq!(plan.compare(), None);
        assert_eq!(plan.layers_title(), "raw");
    }

    #[test]
    fn row_keys_follow_the_ranks_order() {
        let plan = plan_of(
            &["--compare", "raw,core", "-b", "8", "-e", "16", "all_reduce"],
            1,
        );
        let keys = plan.row_keys();
        // 1 collective x 2 sizes x 2 modes x 2 layers.
        assert_eq!(keys.len(), 8);
        assert_eq!(
            keys[..3],
            [
                RowKey {
                    collective: 0,
                    row: 0,
                    mode: Mode::OutOfPlace,
                    layer: 0
                },
                RowKey {
                    collective: 0,
                    row: 0,
                    mode: Mode::OutOfPlace,
                    layer: 1
                },
                RowKey {
                    collective: 0,
                    row: 0,
                    mode: Mode::InPlace,
                    layer: 0
                },
            ]
        );
        assert_eq!(
            keys[7],
            RowKey {
                collective: 0,
                row: 1,
                mode: Mode::InPlace,
                layer: 1
            }
        );
    }

    #[test]
    fn fingerprints_differ_where_the_processes_would() {
        let plan = |flags: &[&str], gpus| plan_of(flags, gpus).fingerprint();
        let base = plan(&[], 2);
        assert_eq!(base, plan(&[], 2));
        for (flags, gpus, named) in [
            (&[][..], 4, "world size"),
            (&["-n", "7"], 2, "iterations (-n)"),
            (&["-a", "2"], 2, "average (-a)"),
            (&["-x", "1"], 2, "communicator config (-x)"),
            (&["-e", "1K"], 2, "sizes (-b, -e, -f, -i)"),
        ] {
            let first_difference = base
                .iter()
                .zip(plan(flags, gpus))
                .find(|(a, b)| *a != b)
                .map(|(a, _)| a.0.clone());
            assert_eq!(
                first_difference.as_deref(),
                Some(named),
                "{flags:?} at {gpus} GPUs"
            );
        }
    }
}
