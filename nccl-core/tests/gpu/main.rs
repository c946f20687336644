//! nccl-core's GPU tests, one module per concern. Each test starts with
//! `require_gpus(n)`: without the GPUs it prints `SKIP: ...` and passes,
//! unless `NCCL_TEST_REQUIRE_GPU=1` (the GPU bundle's run.sh sets it).

mod comm;
mod comm_manage;
mod comm_ops;
mod comm_raw;
mod comm_register;
mod config_fields;
