//! nccl-tests' benchmarks through any layer of the nccl-rs crates: the
//! `nccl-perf` command, and the library under it.
//!
//! `nccl-perf` measures NCCL collectives the way nccl-tests does (same
//! flags, same size, count and bandwidth definitions, same table, same
//! `-J` JSON document, the same `#wrong` checks) through a chosen layer of
//! this workspace, so layers can be compared side by side in one run on the
//! same GPU and libnccl: `--layer raw` calls the nccl-sys function pointers
//! directly, `--layer core` goes through nccl-core, `--layer tensor`
//! through nccl-tensor's safe typed API, `--layer group` through
//! nccl-group's `ProcessGroup` (whole-tensor operations only: its other
//! halves print `N/A`).
//!
//! ```sh
//! cargo install nccl-perf
//! nccl-perf -b 8 -e 128M -f 2 all_reduce
//! ```
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
//! `--json FILE` writes every row of every layer; `--plot FILE.svg` (the
//! `plot` feature, on by default) draws algbw and busbw against size on log
//! axes; `--report FILE` redraws the tables (and `--plot`) of saved rows
//! without running anything; a progress bar goes to stderr when it is a
//! terminal, while the table on stdout stays machine-readable. `-I 1` adds
//! nccl-tests' per-iteration timing, `-M 1` its GPU memory report.
//!
//! Features: `plot` (default) draws `--plot` with plotters; without it
//! (`--no-default-features`) `--plot` is a usage error naming the feature.
//! cudarc's CUDA version (`cuda-12080` by default, ...) and linking mode
//! (`dynamic-loading` by default, ...) are passed down to nccl-group, as
//! every crate of the workspace passes them.
//!
//! The library is what the binary and the workspace's other benchmarks
//! (the `benches` package: its criterion benches, `world-cost` and
//! `group-soak`) are made of. Its modules, one concern each:
//! * `cli`: the flags (clap): nccl-tests' and nccl-perf's own, what they
//!   mean together, `--compare` and size parsing (`128M`).
//! * `method`: how a run measures and reports (nccl-tests' method flags,
//!   and `-a`'s reduction over the ranks).
//! * `selection`: the element types, reductions, roots and cycles, and
//!   the rows of each collective's table they make.
//! * `sizes`: the size sweep, per-collective counts, bandwidths.
//! * `rotation`: nccl-tests' per-iteration buffer offsets.
//! * `collective`: the collectives and what nccl-tests prints for each.
//! * `buffers`: a rank's typed send and receive buffers, from cudarc's
//!   allocator or NCCL's (`--alloc`).
//! * `layer`: the [`Layer`] trait and one implementation per layer.
//! * `check`: inputs, poison and host reference results for `#wrong`.
//! * `timing`: timed batches, CUDA graph capture and replay, bounded
//!   waits, `-I`'s events, medians.
//! * `per_iter`: `-I`'s per-iteration report from every rank's times.
//! * `memory`: `-M`'s GPU memory report.
//! * `report`: the nccl-tests table (and its ratio column), the comment
//!   lines that describe the run, JSON rows and nccl-tests' JSON document.
//! * `plot`: the `--plot` SVG (feature `plot`).
//! * `redraw`: `--report ROWS.jsonl`, the tables and plot of saved rows.
//! * `recovery`: `--inject`, a lost rank's cost to the survivors: detect,
//!   heal and first correct all_reduce.
//! * `grow_spare`: `--grow-spare`, a warm spare's grow to the first correct
//!   all_reduce of the grown group.
//! * `soak`: `--soak` with `--stall`, a slow but live rank that must never
//!   fail the group.
//! * `timed_group`: what those three share (the group, its checked
//!   all_reduce, the cross-process clock, rank 0's files).
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
//! for one call at the buffers' start); [`median`], [`median_interval`]
//! and [`per_call_us`] reduce timings; [`BenchError`] is every error.

mod buffers;
mod check;
mod cli;
mod collective;
mod env;
mod error;
mod grow_spare;
mod layer;
mod memory;
mod method;
mod per_iter;
#[cfg(feature = "plot")]
mod plot;
mod recovery;
mod redraw;
mod report;
mod rotation;
mod runner;
mod selection;
mod sizes;
mod soak;
#[cfg(test)]
mod threads;
mod timed_group;
mod timing;
mod world;

pub use buffers::{DeviceBuffers, Memory};
pub use cli::{Args, Fault, HealMode, Injection, SizeError, Stall, parse_size};
pub use collective::{Collective, Mode};
pub use error::BenchError;
pub use layer::{
    AT_START, Call, CoreLayer, GroupLayer, Launch, Layer, LayerKind, RawLayer, Rotation, Shift,
    TensorLayer,
};
pub use runner::main_with;
pub use timing::{median, median_interval, per_call_us};
pub use world::World;

// The layers call the macro as `crate::with_pair!`.
use buffers::with_pair;
