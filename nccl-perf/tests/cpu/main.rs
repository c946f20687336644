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
