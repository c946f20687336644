//! `nccl-perf`: NCCL collective benchmarks in nccl-tests' format, through a
//! chosen layer of this workspace. See `nccl-perf --help`.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args = nccl_perf::Args::parse_checked();
    ExitCode::from(nccl_perf::main_with(&args))
}
