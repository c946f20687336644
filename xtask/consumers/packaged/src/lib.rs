//! A program's use of nccl-group and nccl-tensor as the registry would
//! serve them: compiled by `cargo xtask ci` against the packaged crates,
//! never run (it needs a GPU).

use std::sync::Arc;

use nccl_group::prelude::*;
use nccl_tensor::NcclType;

/// Sums `values` across every rank of `group` on `stream` and copies the
/// sums back to the host.
pub fn sum_across<T: NcclType>(
    group: &ProcessGroup,
    stream: &Arc<CudaStream>,
    values: &[T],
) -> Result<Vec<T>, GroupError> {
    let tensor = nccl_tensor::Tensor::from_host(stream, values, &[values.len()])?;
    let work = group.all_reduce(tensor, ReduceOp::Sum, stream)?;
    Ok(work.wait()?.to_vec(stream)?)
}

/// Joins the job's group from the launcher's variables (torchrun's,
/// srun's or mpirun's) and sums `values` across it on the rank's own GPU.
pub fn sum_in_launched_job(name: &str, values: &[f32]) -> Result<Vec<f32>, GroupError> {
    let group = ProcessGroup::from_env(name)?;
    let device = Device::new(group.local_rank().unwrap_or(0))?;
    let stream = device.new_stream()?;
    let sums = sum_across(&group, &stream, values)?;
    group.destroy()?;
    Ok(sums)
}
