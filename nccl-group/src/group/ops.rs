//! The group's operations. Each is one nccl-tensor [`Op`] (the collectives
//! as one table, `collectives!`), issued by
//! [`ProcessGroup::issue`] on one local device or by
//! [`ProcessGroup::issue_multi`] on one part per local device (the spec's
//! list forms; global rank = process rank x devices + index, and
//! `streams[i]` is the caller's stream on part `i`'s device). The argument
//! rules are nccl-tensor's ([`nccl_tensor::rules`], checked once per
//! device by its plan step); the group adds the device list, the stream
//! count and, for sends and receives, a peer that is another process.

use std::sync::Arc;

use cudarc::driver::CudaStream;
use nccl_core::{Group, Op, ReduceOp, Status};
use nccl_tensor::{Communicator, NcclType, Tensor};

use super::issue::OpInfo;
use super::{Coalesced, GroupBuffers, GroupTensor, OpResult, ProcessGroup};
use crate::error::{OpError, Result};
use crate::key::CommKey;
use crate::work::{Work, WorkBuffers};

/// One tensor per local GPU, for the list forms.
type Parts<T> = Vec<Tensor<T>>;
/// One `(output, input)` pair per local GPU, for the list forms.
type PairParts<T> = Vec<(Tensor<T>, Tensor<T>)>;

impl ProcessGroup {
    /// Runs NCCL calls of your own on the group's communicator for
    /// `device` (its collective communicator, the one all_reduce uses),
    /// with everything the group's own operations get: the two-way event
    /// sync with `stream`, the deadline and watchdog, the flight recorder
    /// (as operation `name`), and a [`Work`] that owns `buffers`. `issue`
    /// gets the communicator and the stream to enqueue on (the NCCL
    /// stream, or `stream` itself with
    /// [`StreamMode::Caller`](super::StreamMode::Caller)); every rank must
    /// issue matching calls, as with any collective. `issue` runs inside
    /// one NCCL group, so it may make several calls; on a nonblocking
    /// communicator ([`CommMode::Nonblocking`](super::CommMode::Nonblocking))
    /// NCCL may answer `ncclInProgress`, and the group's end is waited for.
    ///
    /// # Errors
    /// As the group's operations: an aborted or failed group, a stream on
    /// another device, a failed rendezvous, or `issue`'s error, with the
    /// buffers handed back.
    pub fn custom<B: WorkBuffers>(
        &self,
        name: &'static str,
        device: usize,
        buffers: B,
        stream: &Arc<CudaStream>,
        issue: impl FnOnce(&Communicator, &Arc<CudaStream>, &mut B) -> nccl_tensor::Result<Status>,
    ) -> OpResult<B> {
        let grouped = |comm: &Communicator, nccl_stream: &Arc<CudaStream>, buffers: &mut B| {
            let group = Group::start()?;
            let issued = issue(comm, nccl_stream, buffers);
            let ended = group.end();
            let (issued, ended) = (issued?, ended?);
            Ok(
                if issued == Status::InProgress || ended == Status::InProgress {
                    Status::InProgress
                } else {
                    Status::Success
                },
            )
        };
        let info = OpInfo::untyped(name);
        self.run_one(info, CommKey::Collective, device, buffers, stream, grouped)
    }

    /// Sends `tensor` to process `dst` over the pair's own communicator.
    ///
    /// # Errors
    /// `dst` is this process or out of range; otherwise as
    /// [`ProcessGroup::issue`].
    pub fn send<T: NcclType>(
        &self,
        tensor: Tensor<T>,
        dst: usize,
        stream: &Arc<CudaStream>,
    ) -> OpResult<Tensor<T>> {
        self.with_peer(dst, "dst", tensor, |peer, t| {
            self.issue(Op::Send { peer }, t, stream)
        })
    }

    /// Receives into `tensor` from process `src`.
    ///
    /// # Errors
    /// As [`ProcessGroup::send`].
    pub fn recv<T: NcclType>(
        &self,
        tensor: Tensor<T>,
        src: usize,
        stream: &Arc<CudaStream>,
    ) -> OpResult<Tensor<T>> {
        self.with_peer(src, "src", tensor, |peer, t| {
            self.issue(Op::Recv { peer }, t, stream)
        })
    }

    /// [`ProcessGroup::send`] from one tensor per local GPU: local device
    /// `i` sends to process `dst`'s device `i` (both processes pass the same
    /// number of tensors), over the pair's own communicator, in one group.
    ///
    /// # Errors
    /// As [`ProcessGroup::send`].
    pub fn send_multi<T: NcclType>(
        &self,
        tensors: Parts<T>,
        dst: usize,
        streams: &[Arc<CudaStream>],
    ) -> OpResult<Parts<T>> {
        self.with_peer(dst, "dst", tensors, |peer, t| {
            self.issue_multi(Op::Send { peer }, t, streams)
        })
    }

    /// [`ProcessGroup::recv`] into one tensor per local GPU: local device
    /// `i` receives from process `src`'s device `i`.
    ///
    /// # Errors
    /// As [`ProcessGroup::send`].
    pub fn recv_multi<T: NcclType>(
        &self,
        tensors: Parts<T>,
        src: usize,
        streams: &[Arc<CudaStream>],
    ) -> OpResult<Parts<T>> {
        self.with_peer(src, "src", tensors, |peer, t| {
            self.issue_multi(Op::Recv { peer }, t, streams)
        })
    }

    /// Synchronises every process: work queued on `stream` after the
    /// returned work's `wait()` starts once all have reached the barrier.
    /// Never captured in a CUDA graph
    /// ([`Uncapturable::Barrier`](crate::Uncapturable::Barrier)).
    ///
    /// # Errors
    /// As [`ProcessGroup::issue`].
    pub fn barrier(&self, stream: &Arc<CudaStream>) -> Result<Work<()>> {
        let device = stream.context().ordinal();
        let info = OpInfo {
            capturable: false,
            ..OpInfo::untyped("barrier")
        };
        self.run_one(info, CommKey::Collective, device, (), stream, |c, s, _| {
            c.barrier(s)
        })
        .map_err(|e| e.error)
    }

    /// Runs `run` with process rank `rank` as nccl-core's `i32`; a rank
    /// past `i32::MAX` is refused here, as out of range, with the buffers.
    fn with_peer<B: WorkBuffers>(
        &self,
        rank: usize,
        what: &'static str,
        buffers: B,
        run: impl FnOnce(i32, B) -> OpResult<B>,
    ) -> OpResult<B> {
        match i32::try_from(rank) {
            Ok(peer) => run(peer, buffers),
            Err(_) => Err(Box::new(OpError {
                error: self.peer_out_of_range(what, rank),
                buffers,
            })),
        }
    }
}

/// The group's collectives, each one [`Op`] in a single form (one local
/// GPU, through [`ProcessGroup::issue`]), a list form (one part per
/// local GPU, through [`ProcessGroup::issue_multi`]) and a method of
/// [`Coalesced`] (added to a batch). `tensor` entries take one tensor (in
/// place); `pair` entries an output and an input.
macro_rules! collectives {
    (@single tensor $(#[$doc:meta])* $name:ident ($($arg:ident: $ty:ty),*) => $op:expr) => {
        $(#[$doc])*
        ///
        /// # Errors
        /// As [`ProcessGroup::issue`].
        pub fn $name<B: GroupTensor>(
            &self,
            tensor: B,
            $($arg: $ty,)*
            stream: &Arc<CudaStream>,
        ) -> OpResult<B> {
            self.issue($op, tensor, stream)
        }
    };
    (@single pair $(#[$doc:meta])* $name:ident ($($arg:ident: $ty:ty),*) => $op:expr) => {
        $(#[$doc])*
        /// The work holds `(output, input)`.
        ///
        /// # Errors
        /// As [`ProcessGroup::issue`].
        pub fn $name<B: GroupTensor>(
            &self,
            output: B,
            input: B,
            $($arg: $ty,)*
            stream: &Arc<CudaStream>,
        ) -> OpResult<(B, B)>
        where
            (B, B): GroupBuffers,
        {
            self.issue($op, (output, input), stream)
        }
    };
    (@multi tensor $single:ident $name:ident ($($arg:ident: $ty:ty),*) => $op:expr) => {
        #[doc = concat!("[`ProcessGroup::", stringify!($single), "`] over one tensor per local GPU.")]
        ///
        /// # Errors
        /// As [`ProcessGroup::issue_multi`].
        pub fn $name<T: NcclType>(
            &self,
            tensors: Parts<T>,
            $($arg: $ty,)*
            streams: &[Arc<CudaStream>],
        ) -> OpResult<Parts<T>> {
            self.issue_multi($op, tensors, streams)
        }
    };
    (@multi pair $single:ident $name:ident ($($arg:ident: $ty:ty),*) => $op:expr) => {
        #[doc = concat!("[`ProcessGroup::", stringify!($single), "`] with one `(output, input)` per local GPU.")]
        ///
        /// # Errors
        /// As [`ProcessGroup::issue_multi`].
        pub fn $name<T: NcclType>(
            &self,
            pairs: PairParts<T>,
            $($arg: $ty,)*
            streams: &[Arc<CudaStream>],
        ) -> OpResult<PairParts<T>> {
            self.issue_multi($op, pairs, streams)
        }
    };
    (@coalesced $single:ident ($($arg:ident: $ty:ty),*) => $op:expr) => {
        #[doc = concat!("Adds [`ProcessGroup::", stringify!($single), "`] on `buffers` to the batch.")]
        pub fn $single(&mut self, buffers: B, $($arg: $ty),*) -> &mut Self {
            self.push($op, buffers)
        }
    };
    ($(
        $(#[$doc:meta])*
        $form:ident fn $single:ident / $multi:ident ($($arg:ident: $ty:ty),* $(,)?) => $op:expr;
    )*) => {
        impl ProcessGroup {$(
            collectives!(@single $form $(#[$doc])* $single ($($arg: $ty),*) => $op);
            collectives!(@multi $form $single $multi ($($arg: $ty),*) => $op);
        )*}
        impl<B: GroupBuffers> Coalesced<'_, B> {$(
            collectives!(@coalesced $single ($($arg: $ty),*) => $op);
        )*}
    };
}

collectives! {
    /// Reduces `tensor` across every process, in place
    /// (`torch.distributed.all_reduce`).
    tensor fn all_reduce / all_reduce_multi (op: ReduceOp) => Op::AllReduce(op.into());

    /// Copies `tensor` from global rank `root` to every rank, in place.
    tensor fn broadcast / broadcast_multi (root: i32) => Op::Broadcast { root };

    /// Reduces `tensor` across every process into global rank `root`, in place.
    tensor fn reduce / reduce_multi (op: ReduceOp, root: i32) => Op::Reduce { op: op.into(), root };

    /// Gathers every rank's `input` into `output` (world x input elements),
    /// in rank order (`all_gather_into_tensor`).
    pair fn all_gather / all_gather_multi () => Op::AllGather;

    /// Reduces `input` (world x output elements) and scatters it: each rank
    /// gets its block in `output` (`reduce_scatter_tensor`).
    pair fn reduce_scatter / reduce_scatter_multi (op: ReduceOp) => Op::ReduceScatter(op.into());

    /// Block `j` of `input` goes to rank `j`; `output` gets the blocks in
    /// rank order (`all_to_all_single`).
    pair fn all_to_all / all_to_all_multi () => Op::AllToAll;

    /// Gathers every rank's `input` into `output` (world x input elements)
    /// on global rank `root`, in rank order (`torch.distributed.gather`);
    /// elsewhere `output` is not touched and may be empty.
    pair fn gather / gather_multi (root: i32) => Op::Gather { root };

    /// Scatters `input` (world x output elements) of global rank `root`:
    /// each rank gets its block in `output` (`torch.distributed.scatter`);
    /// elsewhere `input` is not read and may be empty.
    pair fn scatter / scatter_multi (root: i32) => Op::Scatter { root };
}
