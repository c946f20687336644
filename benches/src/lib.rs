//! Benchmarks and the nccl-perf command.
//!
//! `nccl-perf` measures NCCL collectives the way nccl-tests does (same
//! flags, same size, count and bandwidth definitions, same table) through a
//! chosen layer of this workspace, so layers can be compared side by side in
//! one run on the same GPU and libnccl: `--layer raw` calls the nccl-sys
//! function pointers directly, `--layer core` goes through nccl-core.
//!
//! Modules, one concern each:
//! * [`cli`]: the flags (clap) and size parsing (`128M`).
//! * [`sizes`]: the size sweep, per-collective counts, bandwidths.
//! * [`collective`]: the collectives and what nccl-tests prints for each.
//! * [`layer`]: the [`layer::Layer`] trait and one implementation per layer.
//! * [`check`]: inputs, poison and host reference results for `#wrong`.
//! * [`report`]: the nccl-tests table and JSON rows.
//! * [`env`]: the CUDA driver, GPU and NCCL checks done before anything else.
//! * [`runner`]: rank threads, timing and gathering rows.
//! * [`error`]: errors and exit statuses.

pub mod check;
pub mod cli;
pub mod collective;
pub mod env;
pub mod error;
pub mod layer;
pub mod report;
pub mod runner;
pub mod sizes;

pub use error::BenchError;
