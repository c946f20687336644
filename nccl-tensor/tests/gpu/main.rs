//! nccl-tensor's GPU tests, one module per concern (`ranks*` modules hold the
//! `ranks_*` tests that run.sh also runs at world sizes 2 and 4). Each test
//! starts with `require_gpus(n)`: without the GPUs it prints `SKIP: ...` and
//! passes, unless `NCCL_TEST_REQUIRE_GPU=1`. `gpu_alloc` stays a binary of
//! its own: it sets a counting global allocator.

mod cells;
mod cells_strided;
mod errors;
mod multi;
mod ops;
mod ranks;
mod ranks_batch;
mod ranks_register;
mod ranks_split;
mod split;
mod streams;
