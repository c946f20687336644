//! The names the group's operations had before they took torch's (and
//! nccl-tensor's), kept for one release. Two names changed meaning and
//! could not be kept: `all_gather` and `all_to_all` are now torch's list
//! forms (their signatures differ, so old calls fail to compile rather
//! than do something else).

use std::sync::Arc;

use cudarc::driver::CudaStream;
use nccl_core::ReduceOp;
use nccl_tensor::{NcclType, Tensor};

use crate::engine::batch::Coalesced;
use crate::engine::batch::Lists;
use crate::engine::buffers::{GroupBuffers, GroupTensor};
use crate::engine::group::ProcessGroup;
use crate::engine::work::OpResult;

/// One `(output, input)` pair per local GPU.
type PairParts<T> = Vec<(Tensor<T>, Tensor<T>)>;

impl ProcessGroup {
    /// The old name of [`ProcessGroup::reduce_scatter_tensor`].
    ///
    /// # Errors
    /// As [`ProcessGroup::reduce_scatter_tensor`].
    #[deprecated(since = "0.1.0", note = "use reduce_scatter_tensor, torch's name")]
    pub fn reduce_scatter<B: GroupTensor>(
        &self,
        output: B,
        input: B::Input,
        op: ReduceOp,
        stream: &Arc<CudaStream>,
    ) -> OpResult<(B, B::Input)>
    where
        (B, B::Input): GroupBuffers,
    {
        self.reduce_scatter_tensor(output, input, op, stream)
    }

    /// The old name of [`ProcessGroup::all_gather_into_tensor_multi`].
    ///
    /// # Errors
    /// As [`ProcessGroup::all_gather_into_tensor_multi`].
    #[deprecated(since = "0.1.0", note = "use all_gather_into_tensor_multi")]
    pub fn all_gather_multi<T: NcclType>(
        &self,
        pairs: PairParts<T>,
        streams: &[Arc<CudaStream>],
    ) -> OpResult<PairParts<T>> {
        self.all_gather_into_tensor_multi(pairs, streams)
    }

    /// The old name of [`ProcessGroup::reduce_scatter_tensor_multi`].
    ///
    /// # Errors
    /// As [`ProcessGroup::reduce_scatter_tensor_multi`].
    #[deprecated(since = "0.1.0", note = "use reduce_scatter_tensor_multi")]
    pub fn reduce_scatter_multi<T: NcclType>(
        &self,
        pairs: PairParts<T>,
        op: ReduceOp,
        streams: &[Arc<CudaStream>],
    ) -> OpResult<PairParts<T>> {
        self.reduce_scatter_tensor_multi(pairs, op, streams)
    }

    /// The old name of [`ProcessGroup::all_to_all_single_multi`].
    ///
    /// # Errors
    /// As [`ProcessGroup::all_to_all_single_multi`].
    #[deprecated(since = "0.1.0", note = "use all_to_all_single_multi")]
    pub fn all_to_all_multi<T: NcclType>(
        &self,
        pairs: PairParts<T>,
        streams: &[Arc<CudaStream>],
    ) -> OpResult<PairParts<T>> {
        self.all_to_all_single_multi(pairs, streams)
    }

    /// The old name of [`ProcessGroup::all_to_all_single_split`].
    ///
    /// # Errors
    /// As [`ProcessGroup::all_to_all_single_split`].
    #[deprecated(since = "0.1.0", note = "use all_to_all_single_split")]
    pub fn all_to_all_split<T: NcclType>(
        &self,
        output: Tensor<T>,
        input: Tensor<T>,
        output_split_sizes: &[usize],
        input_split_sizes: &[usize],
        stream: &Arc<CudaStream>,
    ) -> OpResult<(Tensor<T>, Tensor<T>)> {
        self.all_to_all_single_split(output, input, output_split_sizes, input_split_sizes, stream)
    }

    /// The old name of [`ProcessGroup::all_to_all`] (the list form).
    ///
    /// # Errors
    /// As [`ProcessGroup::all_to_all`].
    #[deprecated(
        since = "0.1.0",
        note = "use all_to_all, torch's name of the list form"
    )]
    pub fn all_to_all_list<T: NcclType>(
        &self,
        outputs: Vec<Tensor<T>>,
        inputs: Vec<Tensor<T>>,
        stream: &Arc<CudaStream>,
    ) -> OpResult<Lists<T>> {
        self.all_to_all(outputs, inputs, stream)
    }
}

impl<B: GroupBuffers> Coalesced<'_, B> {
    /// The old name of [`Coalesced::all_gather_into_tensor`].
    #[deprecated(since = "0.1.0", note = "use all_gather_into_tensor, torch's name")]
    pub fn all_gather(&mut self, buffers: B) -> &mut Self {
        self.all_gather_into_tensor(buffers)
    }

    /// The old name of [`Coalesced::reduce_scatter_tensor`].
    #[deprecated(since = "0.1.0", note = "use reduce_scatter_tensor, torch's name")]
    pub fn reduce_scatter(&mut self, buffers: B, op: ReduceOp) -> &mut Self {
        self.reduce_scatter_tensor(buffers, op)
    }

    /// The old name of [`Coalesced::all_to_all_single`].
    #[deprecated(since = "0.1.0", note = "use all_to_all_single, torch's name")]
    pub fn all_to_all(&mut self, buffers: B) -> &mut Self {
        self.all_to_all_single(buffers)
    }
}
