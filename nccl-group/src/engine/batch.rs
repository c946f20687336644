//! Operations issued together on the group's communicator, in one NCCL
//! group with one [`Work`](crate::Work) that owns every buffer: batched
//! point-to-point ([`ProcessGroup::batch_isend_irecv`]), coalesced
//! collectives ([`Coalesced`]), all_to_all of any sizes
//! ([`ProcessGroup::all_to_all_single_split`], [`ProcessGroup::all_to_all`])
//! and the list all_gather ([`ProcessGroup::all_gather`]).
//! Each is one nccl-tensor batch or exchange ([`nccl_tensor::Batch`],
//! [`nccl_tensor::Communicator::all_to_all_single_split`]), whose checks
//! (every operation's own, then the batch's) run before anything is
//! enqueued.

use std::sync::Arc;

use cudarc::driver::CudaStream;
use nccl_core::{Op, Status};
use nccl_tensor::{Communicator, NcclType, Tensor};

use crate::engine::buffers::GroupBuffers;
use crate::engine::buffers::keep_all;
use crate::engine::group::ProcessGroup;
use crate::engine::issue::OpInfo;
use crate::engine::key::CommKey;
use crate::engine::ownership::Ownership;
use crate::engine::work::{Issued, OpResult, refusal_of};
use crate::engine::work_buffers::{Boxer, WorkBuffers, boxed};
use crate::error::GroupError;
use crate::ranks::{Numbering, Rank};

/// `(outputs, inputs)` of [`ProcessGroup::all_to_all`].
pub(crate) type Lists<T> = (Vec<Tensor<T>>, Vec<Tensor<T>>);

/// One send or receive of [`ProcessGroup::batch_isend_irecv`]
/// (`torch.distributed.P2POp`): a tensor and the member it goes to or
/// comes from, a global rank (`usize`, torch's `peer=`) or a
/// [`GroupRank`](crate::GroupRank) (torch's `group_peer=`).
#[derive(Debug)]
pub struct P2POp<B> {
    send: bool,
    peer: Rank,
    tensor: B,
}

impl<B: GroupBuffers> P2POp<B> {
    /// Sends `tensor` to `dst` (`torch.distributed.isend`).
    pub fn send(tensor: B, dst: impl Into<Rank>) -> Self {
        Self {
            send: true,
            peer: dst.into(),
            tensor,
        }
    }

    /// Receives into `tensor` from `src` (`torch.distributed.irecv`).
    pub fn recv(tensor: B, src: impl Into<Rank>) -> Self {
        Self {
            send: false,
            peer: src.into(),
            tensor,
        }
    }

    /// Whether this is a send (else a receive).
    pub fn is_send(&self) -> bool {
        self.send
    }

    /// The member it goes to or comes from, as given.
    pub fn peer(&self) -> Rank {
        self.peer
    }

    /// The operation on a group of `ranks`, with the peer as the group's
    /// NCCL rank.
    fn op(&self, ranks: &Numbering<'_>) -> crate::error::Result<Op<'static>> {
        Ok(if self.send {
            Op::Send {
                peer: ranks.comm_rank("dst", self.peer)?,
            }
        } else {
            Op::Recv {
                peer: ranks.comm_rank("src", self.peer)?,
            }
        })
    }

    /// The tensor.
    pub fn into_tensor(self) -> B {
        self.tensor
    }
}

/// Collectives (and sends and receives) collected to be issued at once by
/// [`Coalesced::issue`]: one NCCL group, one [`Work`](crate::Work) that
/// owns every buffer, as PyTorch's coalescing manager issues a DDP
/// bucket's all_reduces.
///
/// Made by [`ProcessGroup::coalesced`]; each method (`all_reduce`,
/// `all_gather`, ...) adds the group's operation of that name on `buffers` and
/// returns the batch for the next. `B` is one buffer type for the whole batch:
/// a [`Tensor`] for one element type, [`AnyTensor`](nccl_tensor::AnyTensor) to
/// mix element types, and the `(output, input)` pairs of either for the
/// operations that take two (a pair works for all_reduce, broadcast and reduce
/// too), or lent cudarc memory (`&mut CudaSlice<T>`, `CudaViewMut<T>` and their
/// pairs: [`ProcessGroup`]'s "Borrowed memory"). Mixed element types in one
/// batch take [`AnyTensor`](nccl_tensor::AnyTensor)s:
/// `group.coalesced::<AnyTensor>()`.
///
/// A DDP bucket of f32 and bf16 gradients, averaged in one NCCL group:
///
/// ```no_run
/// use std::sync::Arc;
/// use nccl_group::prelude::*;
///
/// fn average_bucket(
///     group: &ProcessGroup,
///     f32_grads: Vec<Tensor<f32>>,
///     bf16_grads: Vec<Tensor<bf16>>,
///     stream: &Arc<CudaStream>,
/// ) -> Result<(Vec<Tensor<f32>>, Vec<Tensor<bf16>>), GroupError> {
///     let split = f32_grads.len();
///     let mut bucket = group.coalesced::<AnyTensor>();
///     let f32s = f32_grads.into_iter().map(AnyTensor::from);
///     for grad in f32s.chain(bf16_grads.into_iter().map(AnyTensor::from)) {
///         bucket.all_reduce(grad, ReduceOp::Avg);
///     }
///     let mut grads = bucket.issue(stream)?.wait()?; // in the order they were added
///     let bf16_grads = grads.split_off(split).into_iter().map(AnyTensor::into_typed);
///     let f32_grads = grads.into_iter().map(AnyTensor::into_typed);
///     Ok((f32_grads.collect::<Result<_, _>>()?, bf16_grads.collect::<Result<_, _>>()?))
/// }
/// ```
#[must_use = "a coalesced batch does nothing until it is issued"]
pub struct Coalesced<'g, B> {
    pub(super) group: &'g ProcessGroup,
    ops: Vec<Op<'static>>,
    buffers: Vec<B>,
    /// The first operation that could not be made (a root or peer that
    /// is not a member), reported by [`Coalesced::issue`].
    refused: Option<GroupError>,
}

impl<B> std::fmt::Debug for Coalesced<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coalesced")
            .field("ops", &self.ops)
            .finish_non_exhaustive()
    }
}

impl<B: GroupBuffers> Coalesced<'_, B> {
    /// Adds nccl-core's `op` on `buffers`: its root or peer is a rank of
    /// this group's communicator (the group rank on one device per
    /// process), not a global rank; the named methods take either.
    pub fn push(&mut self, op: Op<'static>, buffers: B) -> &mut Self {
        self.ops.push(op);
        self.buffers.push(buffers);
        self
    }

    /// Adds the operation `op` made, or keeps its error for
    /// [`Coalesced::issue`] (the buffers stay in the batch, to be handed
    /// back).
    pub(crate) fn push_made(
        &mut self,
        op: crate::error::Result<Op<'static>>,
        buffers: B,
    ) -> &mut Self {
        match op {
            Ok(op) => self.push(op, buffers),
            Err(error) => {
                self.refused.get_or_insert(error);
                self.buffers.push(buffers);
                self
            }
        }
    }

    /// The number of operations.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether the batch has no operation.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Issues every operation, on the caller's `stream`, in one NCCL group
    /// on the group's communicator; the work holds the buffers in the
    /// order they were added.
    ///
    /// Every operation is checked before any is enqueued.
    ///
    /// # Errors
    /// A root or peer given to a method that is not a member; otherwise as
    /// [`ProcessGroup::issue`]; a check names the operation's position in
    /// the batch ([`nccl_tensor::Error::InBatch`]).
    pub fn issue(self, stream: &Arc<CudaStream>) -> OpResult<Vec<B>> {
        let Coalesced {
            group,
            ops,
            buffers,
            refused,
        } = self;
        if let Some(error) = refused {
            return Err(B::Ownership::refuse(error, buffers));
        }
        group.issue_batch("coalesced", ops, buffers, stream)
    }
}

impl ProcessGroup {
    /// An empty [`Coalesced`] batch of operations on buffers of type `B`.
    pub fn coalesced<B: GroupBuffers>(&self) -> Coalesced<'_, B> {
        Coalesced {
            group: self,
            ops: Vec::new(),
            buffers: Vec::new(),
            refused: None,
        }
    }

    /// Issues the sends and receives of `ops` to and from any processes
    /// of the group, on the caller's `stream`, in one NCCL group on the
    /// group's communicator (not the pair communicators of
    /// [`ProcessGroup::send`]), so a ring of them cannot deadlock
    /// (`torch.distributed.batch_isend_irecv`).
    ///
    /// The work holds the tensors in the order of `ops`. A process's sends to a
    /// peer pair in order with the peer's receives from it; a send to this
    /// process itself needs a receive from itself of the same length and type
    /// in the batch. Processes with nothing to exchange need not call it,
    /// except when it is the first operation of the group on this device: that
    /// one creates the group's communicator, which every process joins (as with
    /// PyTorch's first `batch_isend_irecv`).
    ///
    /// Checks, before anything is enqueued: each operation's
    /// ([`nccl_tensor::Plan::new`]: a peer in `0..world_size`, the tensor
    /// on the stream's device, contiguous, of a data type the loaded NCCL
    /// knows) and the batch's ([`nccl_tensor::plan_batch`]). The tensors
    /// are owned or mutably borrowed (lent cudarc memory), so none can be
    /// received into twice, or sent and received in one batch.
    ///
    /// # Errors
    /// As [`ProcessGroup::issue`]; a check names the operation's position
    /// in the batch ([`nccl_tensor::Error::InBatch`]).
    pub fn batch_isend_irecv<B: GroupBuffers>(
        &self,
        ops: Vec<P2POp<B>>,
        stream: &Arc<CudaStream>,
    ) -> OpResult<Vec<B>> {
        let ranks = self.numbering(1);
        let made: crate::error::Result<Vec<Op<'static>>> =
            ops.iter().map(|op| op.op(&ranks)).collect();
        let tensors = ops.into_iter().map(P2POp::into_tensor).collect();
        match made {
            Ok(ops) => self.issue_batch("batch_isend_irecv", ops, tensors, stream),
            Err(error) => Err(B::Ownership::refuse(error, tensors)),
        }
    }

    /// Issues `ops[i]` on `buffers[i]` for every `i`, in one NCCL group on
    /// the collective communicator of the caller's stream's device; the
    /// flight recorder notes it as `name`, with the elements of every
    /// input and output and the first buffer's data type, and as a collective (one
    /// that takes a sequence number every rank shares) unless it holds
    /// sends and receives only, which some ranks may not issue.
    fn issue_batch<B: GroupBuffers>(
        &self,
        name: &'static str,
        ops: Vec<Op<'static>>,
        buffers: Vec<B>,
        stream: &Arc<CudaStream>,
    ) -> OpResult<Vec<B>> {
        let info = OpInfo {
            point_to_point: ops.iter().all(Op::is_point_to_point),
            ..OpInfo::collective(
                name,
                buffers.first().map(GroupBuffers::data_type),
                buffers.iter().map(GroupBuffers::input_len).sum(),
            )
            .with_output(buffers.iter().map(GroupBuffers::output_len).sum())
        };
        let device = stream.context().ordinal();
        refusal_of(self.run_one(
            info,
            CommKey::Collective,
            device,
            (buffers, keep_all::<B>()),
            stream,
            |comm, nccl_stream, buffers| {
                let mut batch = comm.batch(stream);
                for (&op, part) in ops.iter().zip(buffers.iter_mut()) {
                    batch.push(op, part.operands());
                }
                batch.enqueue_on(nccl_stream)
            },
        ))
    }

    /// Cuts `input` into one block per process, `input_split_sizes[j]`
    /// elements for process `j`, and concatenates the blocks received into
    /// `output` in rank order, `output_split_sizes[i]` elements from
    /// process `i` (`torch.distributed.all_to_all_single` with split
    /// sizes, in elements): grouped sends and receives on the group's
    /// communicator.
    ///
    /// The work holds `(output, input)`.
    ///
    /// Checks ([`nccl_tensor::checks::all_to_all_splits`]): one split size
    /// per process in each list, adding up to its tensor's length, what
    /// this process sends itself equal to what it receives from itself,
    /// both tensors on the stream's device, of one data type.
    ///
    /// # Errors
    /// As [`ProcessGroup::issue`].
    pub fn all_to_all_single_split<T: NcclType>(
        &self,
        output: Tensor<T>,
        input: Tensor<T>,
        output_split_sizes: &[usize],
        input_split_sizes: &[usize],
        stream: &Arc<CudaStream>,
    ) -> OpResult<(Tensor<T>, Tensor<T>)> {
        let info = OpInfo::collective("all_to_all_single_split", Some(T::DATA_TYPE), input.len())
            .with_output(output.len());
        self.run_owned_collective(
            info,
            (output, input),
            stream,
            |comm, nccl_stream, (output, input)| {
                comm.all_to_all_single_split(
                    &mut *output,
                    &*input,
                    output_split_sizes,
                    input_split_sizes,
                    nccl_stream,
                )
            },
        )
    }

    /// Sends `inputs[j]` to process `j` and receives into `outputs[i]`
    /// from process `i`, each of any length (`torch.distributed.all_to_all`),
    /// in one NCCL group on the group's communicator.
    ///
    /// Process `i`'s `inputs[j]` must match process `j`'s `outputs[i]`. The
    /// work holds `(outputs, inputs)`.
    ///
    /// Checks ([`nccl_tensor::checks::all_to_all_list`], then the batch's):
    /// one input and one output per process, each on the stream's device;
    /// `inputs[rank]` and `outputs[rank]` of one length.
    ///
    /// # Errors
    /// As [`ProcessGroup::issue`].
    pub fn all_to_all<T: NcclType>(
        &self,
        outputs: Vec<Tensor<T>>,
        inputs: Vec<Tensor<T>>,
        stream: &Arc<CudaStream>,
    ) -> OpResult<Lists<T>> {
        let info = OpInfo::collective(
            "all_to_all",
            Some(T::DATA_TYPE),
            inputs.iter().map(Tensor::len).sum(),
        )
        .with_output(outputs.iter().map(Tensor::len).sum());
        self.run_owned_collective(
            info,
            (outputs, inputs),
            stream,
            |comm, nccl_stream, (outputs, inputs)| {
                comm.all_to_all(outputs.iter_mut(), inputs.iter(), nccl_stream)
            },
        )
    }

    /// Gathers every rank's `input` into `outputs[rank]`
    /// (`torch.distributed.all_gather`, the list form), in one NCCL group
    /// on the group's communicator (one broadcast per rank).
    ///
    /// The work holds `(outputs, input)`.
    ///
    /// Checks ([`nccl_tensor::checks::all_gather_list`]): one output per
    /// process, each of the input's type and length, every tensor on the
    /// stream's device.
    ///
    /// # Errors
    /// As [`ProcessGroup::issue`].
    pub fn all_gather<T: NcclType>(
        &self,
        outputs: Vec<Tensor<T>>,
        input: Tensor<T>,
        stream: &Arc<CudaStream>,
    ) -> OpResult<(Vec<Tensor<T>>, Tensor<T>)> {
        let info = OpInfo::collective("all_gather", Some(T::DATA_TYPE), input.len())
            .with_output(outputs.iter().map(Tensor::len).sum());
        self.run_owned_collective(
            info,
            (outputs, input),
            stream,
            |comm, nccl_stream, (outputs, input)| {
                comm.all_gather(outputs.as_mut_slice(), &*input, nccl_stream)
            },
        )
    }

    /// The one body of the list collectives above: `issue` on the group's
    /// communicator, on the stream's device, with owned `buffers` (kept by
    /// the work, or by the graph when the stream is capturing).
    fn run_owned_collective<B: WorkBuffers + 'static>(
        &self,
        info: OpInfo,
        buffers: B,
        stream: &Arc<CudaStream>,
        issue: impl FnOnce(&Communicator, &Arc<CudaStream>, &mut B) -> nccl_tensor::Result<Status>,
    ) -> Issued<B> {
        let device = stream.context().ordinal();
        let keep = Some(boxed as Boxer<B>);
        self.run_one(
            info,
            CommKey::Collective,
            device,
            (buffers, keep),
            stream,
            issue,
        )
    }
}
