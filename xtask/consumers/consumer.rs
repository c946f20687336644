//! What both consumer crates compile: a program's use of nccl-core,
//! nccl-tensor and nccl-group next to its own cudarc, so `cargo check`
//! builds all three with the consumer's choice of cudarc features.

use std::sync::Arc;

use cudarc::driver::CudaStream;
use nccl_group::{GroupOptions, InProcessStore, ProcessGroup};
use nccl_tensor::Tensor;

/// All-reduces `values` in a group of one process (the values come back as
/// they went in), on the program's own cudarc stream.
pub fn sum_alone(
    stream: &Arc<CudaStream>,
    values: &[f32],
) -> Result<Vec<f32>, Box<dyn std::error::Error>> {
    let group = ProcessGroup::builder("consumer").rank(0).world_size(1).store(Arc::new(InProcessStore::new())).options(GroupOptions::default()).build()?;
    let tensor = Tensor::from_host(stream, values, &[values.len()])?;
    let work = group.all_reduce(tensor, nccl_core::ReduceOp::Sum, stream)?;
    Ok(work.wait()?.to_vec(stream)?)
}
