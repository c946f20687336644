//! nccl-core's CPU tests, one module per concern: what needs no GPU (configs,
//! errors, operations, element types, unique ids, and every call without a
//! driver).

mod capabilities;
mod config;
mod config_releases;
mod errors;
mod no_gpu;
mod ops;
mod scalar_bytes;
mod types;
mod unique_id;
