//! nccl-perf's CPU tests, one module per concern, each running the
//! `nccl-perf` binary where no GPU is needed: its usage errors and
//! messages without a GPU (`cli`), nccl-tests' flags and what they mean
//! together (`nccl_tests_flags`), processes of one launch that meet,
//! refuse a mismatched plan and end together (`processes`), and saved rows
//! redrawn by `--report` (`report`).

mod cli;
mod nccl_tests_flags;
mod processes;
mod report;

use std::process::{Command, Output};

/// What the `nccl-perf` binary did with `args`.
fn nccl_perf(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nccl-perf"))
        .args(args)
        .output()
        .expect("nccl-perf runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// True (after printing a note) where a CUDA driver is present.
fn skip_with_driver() -> bool {
    if nccl_core::cuda_driver_available() {
        println!("SKIP: a CUDA driver is present; this test covers machines without one");
        return true;
    }
    false
}
