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
//! * `cli`: the flags (clap), `--compare` and size parsing (`128M`).
//! * `sizes`: the size sweep, per-collective counts, bandwidths.
//! * `collective`: the collectives and what nccl-tests prints for each.
//! * `buffers`: a rank's typed send and receive buffers.
//! * `layer`: the [`Layer`] trait and one implementation per layer.
//! * `check`: inputs, poison and host reference results for `#wrong`.
//! * `timing`: timed batches, CUDA graph capture and replay, medians.
//! * `report`: the nccl-tests table (and its ratio column), the comment
//!   lines that describe the run, and JSON rows.
//! * `plot`: the `--plot` SVG.
//! * `env`: the CUDA driver, GPU and NCCL checks done before anything else.
//! * `runner`: the plan, the rank threads and their barrier, gathering
//!   their measurements into rows.
//! * `world`: the ranks of a launch (`nccl-launch -n N`) for the
//!   binaries that run as every rank: store, unique ids, barriers.
//! * `error`: errors and exit statuses.
//!
//! What the binaries and the criterion benches use is re-exported here:
//! [`Args`] and [`main_with`] are `nccl-perf`; [`World`] is a rank's place
//! in its launch; a layer ([`RawLayer`], [`CoreLayer`], [`TensorLayer`],
//! [`GroupLayer`], named by [`LayerKind`]) binds a [`Call`] of a
//! [`Collective`] in a [`Mode`] on [`DeviceBuffers`] into a [`Launch`];
//! [`CountingAllocator`] and [`counted`] count heap allocations; [`median`]
//! and [`per_call_us`] reduce timings; [`BenchError`] is every error.

mod buffers;
mod check;
mod cli;
mod collective;
mod env;
mod error;
mod layer;
mod plot;
mod report;
mod runner;
mod sizes;
mod timing;
mod world;

pub use buffers::DeviceBuffers;
pub use cli::Args;
pub use collective::{Collective, Mode};
pub use error::BenchError;
pub use layer::{Call, CoreLayer, GroupLayer, Launch, Layer, LayerKind, RawLayer, TensorLayer};
/// The allocation counter of the workspace's tests, shared with them.
pub use nccl_test_support::alloc::{CountingAllocator, counted};
pub use runner::main_with;
pub use timing::{median, per_call_us};
pub use world::World;

// The layers call the macro as `crate::with_pair!`.
use buffers::with_pair;
