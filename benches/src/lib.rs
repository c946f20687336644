//! Benchmarks and the nccl-perf command.
//!
//! `nccl-perf` measures NCCL collectives the way nccl-tests does (same
//! flags, same size, count and bandwidth definitions, same table) through a
//! chosen layer of this workspace, so layers can be compared side by side in
//! one run on the same GPU and libnccl: `--layer raw` calls the nccl-sys
//! function pointers directly, `--layer core` goes through nccl-core,
//! `--layer tensor` through nccl-tensor's safe typed API, `--layer group`
//! through nccl-group's `ProcessGroup` (whole-tensor operations only: its
//! other halves print `N/A`).
//!
//! Alone it drives every visible GPU from one process; launched (torchrun,
//! nccl-launch, `RANK` and `WORLD_SIZE` set) it runs as every process of
//! the launch, `-t` threads of `-g` GPUs each as in nccl-tests, meeting at
//! the launch's store; process 0 prints the table, with each row's time
//! reduced over the ranks as `-a` says and `#wrong` summed.
//!
//! `--compare A,B` runs two layers interleaved on the same buffers and adds
//! a `ratio` column (time B / time A) at the end of each half of B's table;
//! `-G N` captures each timed loop in a CUDA graph and replays it N times;
//! `--json FILE` writes every row of every layer; `--plot FILE.svg` draws
//! algbw and busbw against size on log axes; a progress bar goes to stderr
//! when it is a terminal, while the table on stdout stays machine-readable.
//!
//! The `host_cost` criterion bench (`cargo bench -p benches`) measures the
//! host cost of every op per layer (the group layer's for the ops it has),
//! the tensor layer's argument checks (no GPU needed), heap allocations in
//! steady state, and large-message copy bandwidth; `group_cost` measures
//! the process group's communicator-cache lookup.
//!
//! `world-cost` and `group-soak` run as every rank of a launch
//! (`nccl-launch -n N target/release/world-cost`, or alone at world size
//! 1): `world-cost` times the host cost of an 8-byte all_reduce through
//! every layer (raw, core, tensor on blocking and nonblocking
//! communicators, the group in its four modes) side by side, and
//! `benches/scripts/torch_world_cost.py` does the same for torch.distributed;
//! `group-soak` watches memory over many group all-reduces.
//!
//! Modules, one concern each, all private to the crate:
//! * `cli`: the flags (clap): nccl-tests' and nccl-perf's own, what they
//!   mean together, `--compare` and size parsing (`128M`).
//! * `method`: how a run measures and reports (nccl-tests' method flags).
//! * `selection`: the element types, reductions, roots and cycles, and
//!   the rows of each collective's table they make.
//! * `sizes`: the size sweep, per-collective counts, bandwidths.
//! * `rotation`: nccl-tests' per-iteration buffer offsets.
//! * `collective`: the collectives and what nccl-tests prints for each.
//! * `buffers`: a rank's typed send and receive buffers.
//! * `layer`: the [`Layer`] trait and one implementation per layer.
//! * `check`: inputs, poison and host reference results for `#wrong`.
//! * `timing`: timed batches, CUDA graph capture and replay, bounded
//!   waits, medians.
//! * `report`: the nccl-tests table (and its ratio column), the comment
//!   lines that describe the run, JSON rows and nccl-tests' JSON document.
//! * `plot`: the `--plot` SVG.
//! * [`tables`]: nccl-tests' tables read back and set side by side
//!   (`nccl-tests-compare`).
//! * `env`: the CUDA driver, GPU and NCCL checks done before anything else.
//! * `runner`: which ranks and GPUs a process has, the plan, the rank
//!   threads, where the processes meet (barriers, failures, results), and
//!   gathering every rank's measurements into rows on process 0.
//! * `world`: the ranks of a launch (`nccl-launch -n N`, torchrun, srun,
//!   mpirun) for the binaries that run as every rank: store, unique ids,
//!   barriers, groups.
//! * `error`: errors and exit statuses.
//!
//! What the binaries and the criterion benches use is re-exported here:
//! [`Args`] and [`main_with`] are `nccl-perf`; [`World`] is a rank's place
//! in its launch; a layer ([`RawLayer`], [`CoreLayer`], [`TensorLayer`],
//! [`GroupLayer`], named by [`LayerKind`]) binds a [`Call`] of a
//! [`Collective`] in a [`Mode`] on [`DeviceBuffers`] into a [`Launch`],
//! called with the places ([`Shift`]) of its [`Rotation`] ([`AT_START`]
//! for one call at the buffers' start);
//! [`CountingAllocator`] and [`counted`] count heap allocations; [`median`]
//! and [`per_call_us`] reduce timings; [`BenchError`] is every error.

mod buffers;
mod check;
mod cli;
mod collective;
mod env;
mod error;
mod layer;
mod method;
mod plot;
mod report;
mod rotation;
mod runner;
mod selection;
mod sizes;
pub mod tables;
mod timing;
mod world;

pub use buffers::{DeviceBuffers, Memory};
pub use cli::{Args, SizeError, parse_size};
pub use collective::{Collective, Mode};
pub use error::BenchError;
pub use layer::{
    AT_START, Call, CoreLayer, GroupLayer, Launch, Layer, LayerKind, RawLayer, Rotation, Shift,
    TensorLayer,
};
/// The allocation counter of the workspace's tests, shared with them.
pub use nccl_test_support::alloc::{CountingAllocator, counted};
pub use runner::main_with;
pub use timing::{median, per_call_us};
pub use world::World;

// The layers call the macro as `crate::with_pair!`.
use buffers::with_pair;
