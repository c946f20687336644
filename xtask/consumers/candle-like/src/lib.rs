//! An engine's device memory, owned the way candle owns it, reduced by
//! nccl-group in place: no copy, and the engine never gives the memory
//! up. Its storage lends its slice as `&mut CudaSlice<bf16>` (or a part
//! of it as a `CudaViewMut<bf16>`), and the group's `Work` holds that
//! borrow until it is waited for, so nothing of the engine can touch the
//! memory while NCCL uses it.

use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DriverError};
use half::bf16;
use nccl_group::nccl_core::{self, ReduceOp};
use nccl_group::{GroupError, ProcessGroup};

/// The slice of one element type a storage holds (candle's
/// `CudaStorageSlice`).
pub enum StorageSlice {
    /// bf16 elements.
    BF16(CudaSlice<bf16>),
    /// f32 elements.
    F32(CudaSlice<f32>),
}

/// Device memory the engine owns (candle's `CudaStorage`), with the
/// stream its kernels run on: kernels and the process group get borrows
/// of its slice; it is freed with the storage.
pub struct Storage {
    slice: StorageSlice,
    stream: Arc<CudaStream>,
}

/// A CUDA error of `what`, as the group reports one.
fn cuda(what: &'static str) -> impl Fn(DriverError) -> GroupError {
    move |error| nccl_core::Error::cuda(what)(error).into()
}

impl Storage {
    /// `values` copied to the device on `stream`.
    ///
    /// # Errors
    /// CUDA's failure to allocate or copy.
    pub fn from_bf16(stream: &Arc<CudaStream>, values: &[bf16]) -> Result<Self, GroupError> {
        let slice = stream
            .clone_htod(values)
            .map_err(cuda("copying to the device"))?;
        Ok(Self {
            slice: StorageSlice::BF16(slice),
            stream: Arc::clone(stream),
        })
    }

    /// `len` f32 zeros on `stream`.
    ///
    /// # Errors
    /// CUDA's failure to allocate.
    pub fn zeros_f32(stream: &Arc<CudaStream>, len: usize) -> Result<Self, GroupError> {
        let slice = stream.alloc_zeros(len).map_err(cuda("allocating"))?;
        Ok(Self {
            slice: StorageSlice::F32(slice),
            stream: Arc::clone(stream),
        })
    }

    /// The stream the storage's kernels run on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The bf16 slice lent out, with the storage's stream (candle's
    /// `as_cuda_slice_mut::<bf16>()`).
    ///
    /// # Errors
    /// A storage of another element type.
    pub fn bf16_mut(&mut self) -> Result<(&mut CudaSlice<bf16>, &Arc<CudaStream>), GroupError> {
        match &mut self.slice {
            StorageSlice::BF16(slice) => Ok((slice, &self.stream)),
            StorageSlice::F32(_) => Err(GroupError::InvalidArgument {
                argument: "storage",
                expected: "a bf16 storage".to_string(),
                given: "an f32 storage".to_string(),
            }),
        }
    }

    /// The values, copied to the host on the storage's stream.
    ///
    /// # Errors
    /// A storage of another element type, or CUDA's failure to copy.
    pub fn to_host_bf16(&mut self) -> Result<Vec<bf16>, GroupError> {
        let (slice, stream) = self.bf16_mut()?;
        stream
            .clone_dtoh(&*slice)
            .map_err(cuda("copying to the host"))
    }
}

/// Averages `grads` across the group in place: the all-reduce borrows the
/// storage's slice, and its `Work` holds the borrow until `wait` (which
/// makes the storage's stream wait for the all-reduce; the CPU does not).
///
/// # Errors
/// A storage that is not bf16, or the group's error.
pub fn average_grads(group: &ProcessGroup, grads: &mut Storage) -> Result<(), GroupError> {
    let (slice, stream) = grads.bf16_mut()?;
    let work = group.all_reduce(slice, ReduceOp::Avg, stream)?;
    work.wait()?;
    Ok(())
}

/// Sums one bucket of `grads`, the elements in `bucket`, across the group,
/// in place: a part of the slice, lent as a `CudaViewMut`.
///
/// # Errors
/// A storage that is not bf16, a bucket past its end, or the group's error.
pub fn sum_bucket(
    group: &ProcessGroup,
    grads: &mut Storage,
    bucket: Range<usize>,
) -> Result<(), GroupError> {
    let (slice, stream) = grads.bf16_mut()?;
    if bucket.start > bucket.end || bucket.end > slice.len() {
        return Err(GroupError::InvalidArgument {
            argument: "bucket",
            expected: format!("a range within 0..{}", slice.len()),
            given: format!("{bucket:?}"),
        });
    }
    let work = group.all_reduce(slice.slice_mut(bucket), ReduceOp::Sum, stream)?;
    work.wait()?;
    Ok(())
}

/// This rank's shard of the sum of every rank's `grads` into `shard`
/// (`grads` holds world size x `shard` elements): a reduce-scatter of an
/// `(output, input)` pair of borrows, `&mut` for the output and shared
/// for the input, as a sharded optimizer takes its gradients.
///
/// # Errors
/// Storages that are not bf16 or of lengths that do not fit, or the
/// group's error.
pub fn reduce_scatter_grads(
    group: &ProcessGroup,
    grads: &mut Storage,
    shard: &mut Storage,
) -> Result<(), GroupError> {
    let (input, _) = grads.bf16_mut()?;
    let (output, stream) = shard.bf16_mut()?;
    let work = group.reduce_scatter_tensor(output, &*input, ReduceOp::Sum, stream)?;
    work.wait()?;
    Ok(())
}
