//! nccl-tensor's CPU tests, one module per concern: every argument check
//! (through `Plan::new` and the batch's), layouts and error kinds, no GPU
//! needed. `checks_support` is their shared fixture.

mod batch_methods;
mod checks_batch;
mod checks_buffers;
mod checks_collectives;
mod checks_plan;
mod checks_point_to_point;
mod checks_reductions;
mod checks_support;
mod error_kinds;
mod layout;
