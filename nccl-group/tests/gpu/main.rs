//! nccl-group's GPU tests, one module per concern (`ranks*` modules hold the
//! `ranks_*` tests that run.sh also runs at world sizes 2 and 4). Each test
//! starts with `require_gpus(n)`: without the GPUs it prints `SKIP: ...` and
//! passes, unless `NCCL_TEST_REQUIRE_GPU=1`. Binaries of their own:
//! `gpu_group_multi` and `gpu_group_faults_processes` start copies of
//! themselves as child processes; `gpu_heal`, `gpu_lost_rank` and
//! `gpu_subgroup_loss` launch ranks that die.

mod abort_race;
mod blocking_init;
mod config;
mod faults;
mod lifecycle;
mod one_gpu;
mod ranks;
mod ranks_batch;
mod ranks_borrowed;
mod ranks_buckets;
mod ranks_dumps;
mod ranks_gpu_times;
mod ranks_graphs;
mod ranks_mismatch;
mod ranks_ops;
mod ranks_register;
mod ranks_subgroups;
mod ranks_suspend_resume;
