//! A training step written the way an application writes one: every
//! function returns `anyhow::Result`, and each of nccl-group's operations
//! is followed by `?`. On memory the program lends (a `&mut CudaSlice`, a
//! `CudaViewMut` of part of it) a refusal is a plain `GroupError`, so `?`
//! needs no `'static` buffer; on owned tensors it is a boxed `OpError`
//! with the tensors, which `?` takes as well.

use std::sync::Arc;

use anyhow::Context;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use nccl_group::nccl_core::ReduceOp;
use nccl_group::nccl_tensor::Tensor;
use nccl_group::ProcessGroup;

/// Averages `grads` across the group in place, then sums its first half
/// as a view, and gathers every rank's copy: the memory stays the
/// program's, borrowed by each work until it is waited for.
fn average_lent(
    group: &ProcessGroup,
    grads: &mut CudaSlice<f32>,
    stream: &Arc<CudaStream>,
) -> anyhow::Result<CudaSlice<f32>> {
    group.all_reduce(&mut *grads, ReduceOp::Avg, stream)?.wait()?;
    let half = grads.len() / 2;
    let view = grads.slice_mut(..half);
    group.all_reduce(view, ReduceOp::Sum, stream)?.wait()?;
    let mut gathered = stream
        .alloc_zeros::<f32>(grads.len() * group.world_size())
        .context("allocating the gathered gradients")?;
    group
        .all_gather_into_tensor(&mut gathered, &*grads, stream)?
        .wait()?;
    group.broadcast(&mut gathered, 0, stream)?.wait()?;
    Ok(gathered)
}

/// Averages an owned tensor of `values`: the work owns it and hands it
/// back, as a refusal would.
fn average_owned(
    group: &ProcessGroup,
    values: &[f32],
    stream: &Arc<CudaStream>,
) -> anyhow::Result<Vec<f32>> {
    let tensor = Tensor::from_host(stream, values, &[values.len()])?;
    let averaged = group.all_reduce(tensor, ReduceOp::Avg, stream)?.wait()?;
    let output = Tensor::<f32>::zeros(stream, &[values.len() * group.world_size()])?;
    let (gathered, _input) = group
        .all_gather_into_tensor(output, averaged, stream)?
        .wait()?;
    Ok(gathered.to_vec(stream)?)
}

fn main() -> anyhow::Result<()> {
    let context = CudaContext::new(0).context("opening GPU 0")?;
    let stream = context.default_stream();
    let group = ProcessGroup::from_env("anyhow-like")?;
    let mut grads = stream.clone_htod(&[1.0_f32; 8])?;
    let gathered = average_lent(&group, &mut grads, &stream)?;
    let owned = average_owned(&group, &[2.0; 8], &stream)?;
    println!(
        "{} lent and {} owned elements gathered",
        gathered.len(),
        owned.len()
    );
    Ok(())
}
