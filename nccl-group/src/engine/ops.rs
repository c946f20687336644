//! The group's operations, with torch's names. Each is one nccl-core
//! [`Op`] (the collectives as three tables of whole signatures: one local
//! GPU, one part per local GPU, a method of [`Coalesced`]), issued by
//! [`ProcessGroup::issue`] on one local device or by
//! [`MultiDevice::issue`] on one part per local device (the list
//! forms of Ray's multi-device group; a member's device `i` is NCCL rank member x devices + `i`
//! in either numbering of [`crate::ranks`], and
//! `streams[i]` is the caller's stream on part `i`'s device). The argument
//! rules are nccl-tensor's ([`nccl_tensor::rules`], checked once per
//! device by its plan step); the group adds the device list, the stream
//! count and, for sends and receives, a peer that is another process.

use std::sync::Arc;

use cudarc::driver::CudaStream;
use nccl_core::{Group, Op, ReduceOp, Status};
use nccl_tensor::{Communicator, NcclType, Tensor};

use crate::engine::batch::Coalesced;
use crate::engine::buffers::{GroupBuffers, GroupTensor};
use crate::engine::group::ProcessGroup;
use crate::engine::issue::OpInfo;
use crate::engine::key::CommKey;
use crate::engine::multi::MultiDevice;
use crate::engine::ownership::Ownership;
use crate::engine::work::{OpResult, Work};
use crate::engine::work_buffers::{Boxer, WorkBuffers, boxed};
use crate::error::{OpError, Result};
use crate::ranks::Rank;

/// One tensor per local GPU, for the list forms.
type Parts<T> = Vec<Tensor<T>>;
/// One `(output, input)` pair per local GPU, for the list forms.
type PairParts<T> = Vec<(Tensor<T>, Tensor<T>)>;

impl ProcessGroup {
    /// Runs NCCL calls of your own on the group's communicator for
    /// `device` (its collective communicator, the one all_reduce uses),
    /// with everything the group's own operations get: the two-way event
    /// sync with `stream`, the deadline and watchdog, the flight recorder
    /// (as operation `name`), and a [`Work`] that owns `buffers`.
    ///
    /// `issue` gets the communicator and the stream to enqueue on (the NCCL
    /// stream, or `stream` itself with
    /// [`StreamMode::Caller`](crate::StreamMode::Caller)); every rank must
    /// issue matching calls, as with any collective. `issue` runs inside one
    /// NCCL group, so it may make several calls; on a nonblocking communicator
    /// ([`CommMode::Nonblocking`](crate::CommMode::Nonblocking)) NCCL may
    /// answer `ncclInProgress`, and the group's end is waited for.
    ///
    /// The buffers are owned (`'static`), and the flight record names no
    /// data type and no element counts. For memory a framework owns (a
    /// `&mut CudaSlice<T>` or a `CudaViewMut<T>`), call the named
    /// operations on the borrow instead: they check it, record its counts
    /// and return a [`Work`] that holds the borrow
    /// ([`ProcessGroup`]'s "Borrowed memory").
    ///
    /// # Errors
    /// As the group's operations: an aborted or failed group, a stream on
    /// another device, a failed rendezvous, or `issue`'s error, with the
    /// buffers handed back.
    pub fn custom<B: WorkBuffers + 'static>(
        &self,
        name: &'static str,
        device: usize,
        buffers: B,
        stream: &Arc<CudaStream>,
        issue: impl FnOnce(&Communicator, &Arc<CudaStream>, &mut B) -> nccl_tensor::Result<Status>,
    ) -> std::result::Result<Work<B>, Box<OpError<B>>> {
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
        let owned = (buffers, Some(boxed::<B> as Boxer<B>));
        self.run_one(info, CommKey::Collective, device, owned, stream, grouped)
    }

    /// Synchronises every process: work queued on `stream` after the
    /// returned work's `wait()` starts once all have reached the barrier.
    ///
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
        let nothing = ((), Some(boxed::<()> as Boxer<()>));
        self.run_one(
            info,
            CommKey::Collective,
            device,
            nothing,
            stream,
            |c, s, _| c.barrier(s),
        )
        .map_err(|e| e.error)
    }

    /// Issues the operation `op` makes (or refuses `buffers` with its
    /// error: a rank nccl-core's `i32` cannot hold) on one local device.
    fn issue_made<B: GroupBuffers>(
        &self,
        op: Result<Op<'static>>,
        buffers: B,
        stream: &Arc<CudaStream>,
    ) -> OpResult<B> {
        match op {
            Ok(op) => self.issue(op, buffers, stream),
            Err(error) => Err(B::Ownership::refuse(error, buffers)),
        }
    }

    /// [`ProcessGroup::issue_made`] on one part per local device.
    pub(crate) fn issue_multi_made<B: GroupBuffers>(
        &self,
        op: Result<Op<'static>>,
        buffers: Vec<B>,
        streams: &[Arc<CudaStream>],
    ) -> OpResult<Vec<B>> {
        match op {
            Ok(op) => self.issue_multi(op, buffers, streams),
            Err(error) => Err(B::Ownership::refuse(error, buffers)),
        }
    }
}

/// The group's operations on one local GPU: each row is the whole
/// signature, after `&self` and before the caller's `stream`, then the
/// operation and the buffers it is issued on.
macro_rules! single_operations {
    (numbering $ranks:ident; $(
        $(#[$doc:meta])*
        fn $name:ident<$b:ident: $bound:ident>($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty
            $(where $wt:ty: $wb:ident)? => $op:expr, $buffers:expr;
    )*) => {
        impl ProcessGroup {$(
            $(#[$doc])*
            ///
            /// # Errors
            /// A root or peer that is not a member of the group (both
            /// numberings named); otherwise as
            /// [`ProcessGroup::issue`].
            pub fn $name<$b: $bound>(
                &self,
                $($arg: $ty,)*
                stream: &Arc<CudaStream>,
            ) -> OpResult<$ret>
            $(where $wt: $wb)?
            {
                // Rows without a root or peer leave it unused.
                #[allow(unused_variables)]
                let $ranks = self.numbering(1);
                // The closure scopes a row's `?` (a rank resolution) to its operation.
                #[allow(clippy::redundant_closure_call)]
                let op = (|| Ok($op))();
                self.issue_made(op, $buffers, stream)
            }
        )*}
    };
}

/// The group's operations on one part per local GPU (the list
/// forms of Ray's multi-device group): each row as in `single_operations!`, before the callers'
/// `streams` (one per part).
macro_rules! multi_operations {
    (numbering $ranks:ident; $(
        $(#[$doc:meta])*
        fn $name:ident<$t:ident: NcclType>($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty => $op:expr, $buffers:expr;
    )*) => {
        impl MultiDevice<'_> {$(
            $(#[$doc])*
            ///
            /// # Errors
            /// A root or peer that is not a member of the group (both
            /// numberings named); otherwise as
            /// [`MultiDevice::issue`].
            pub fn $name<$t: NcclType>(
                &self,
                $($arg: $ty,)*
                streams: &[Arc<CudaStream>],
            ) -> OpResult<$ret> {
                // Rows without a root or peer leave it unused.
                #[allow(unused_variables)]
                let $ranks = self.group.numbering(streams.len());
                // The closure scopes a row's `?` (a rank resolution) to its operation.
                #[allow(clippy::redundant_closure_call)]
                let op = (|| Ok($op))();
                self.group.issue_multi_made(op, $buffers, streams)
            }
        )*}
    };
}

/// The collectives a [`Coalesced`] batch takes: each row the whole
/// signature after `&mut self`; the method adds the operation on
/// `buffers` to the batch.
///
/// A root that is not a member of the group is refused when the batch is
/// issued.
macro_rules! coalesced_operations {
    (numbering $ranks:ident; $(
        $(#[$doc:meta])*
        fn $name:ident(buffers: B $(, $arg:ident: $ty:ty)* $(,)?) => $op:expr;
    )*) => {
        impl<B: GroupBuffers> Coalesced<'_, B> {$(
            $(#[$doc])*
            pub fn $name(&mut self, buffers: B $(, $arg: $ty)*) -> &mut Self {
                // Rows without a root or peer leave it unused.
                #[allow(unused_variables)]
                let $ranks = self.group.numbering(1);
                // The closure scopes a row's `?` (a rank resolution) to its operation.
                #[allow(clippy::redundant_closure_call)]
                let op = (|| Ok($op))();
                self.push_made(op, buffers)
            }
        )*}
    };
}

single_operations! {
    numbering ranks;

    /// Reduces `tensor` across every process, in place
    /// (`torch.distributed.all_reduce`).
    fn all_reduce<B: GroupTensor>(tensor: B, op: ReduceOp) -> B => Op::AllReduce(op.into()), tensor;

    /// Copies `tensor` from `root` to every rank, in place
    /// (`torch.distributed.broadcast`).
    ///
    /// `root` is a global rank (a `usize`, torch's `src=`) or a
    /// [`GroupRank`](crate::GroupRank) (torch's `group_src=`): the
    /// [`ranks`](crate::ranks) page.
    fn broadcast<B: GroupTensor>(tensor: B, root: impl Into<Rank>) -> B
        => Op::Broadcast { root: ranks.comm_rank("root", root)? }, tensor;

    /// Reduces `tensor` across every process into `root`, in place
    /// (`torch.distributed.reduce`).
    ///
    /// `root` is a global rank or a [`GroupRank`](crate::GroupRank), as for
    /// `broadcast`.
    fn reduce<B: GroupTensor>(tensor: B, op: ReduceOp, root: impl Into<Rank>) -> B
        => Op::Reduce { op: op.into(), root: ranks.comm_rank("root", root)? }, tensor;

    /// Gathers every rank's `input` into `output` (world x input elements),
    /// in rank order (`torch.distributed.all_gather_into_tensor`).
    ///
    /// The work holds `(output, input)`.
    fn all_gather_into_tensor<B: GroupTensor>(output: B, input: B::Input) -> (B, B::Input)
        where (B, B::Input): GroupBuffers => Op::AllGather, (output, input);

    /// Reduces `input` (world x output elements) and scatters it: each rank
    /// gets its block in `output` (`torch.distributed.reduce_scatter_tensor`).
    ///
    /// The work holds `(output, input)`.
    fn reduce_scatter_tensor<B: GroupTensor>(output: B, input: B::Input, op: ReduceOp) -> (B, B::Input)
        where (B, B::Input): GroupBuffers => Op::ReduceScatter(op.into()), (output, input);

    /// Block `j` of `input` goes to rank `j`; `output` gets the blocks in
    /// rank order (`torch.distributed.all_to_all_single` with equal
    /// splits).
    ///
    /// The work holds `(output, input)`.
    fn all_to_all_single<B: GroupTensor>(output: B, input: B::Input) -> (B, B::Input)
        where (B, B::Input): GroupBuffers => Op::AllToAll, (output, input);

    /// Gathers every rank's `input` into `output` (world x input elements)
    /// on `root` (a global rank or a [`GroupRank`](crate::GroupRank)), in
    /// rank order (`torch.distributed.gather`
    /// into one tensor); elsewhere `output` is not touched and may be
    /// empty.
    ///
    /// The work holds `(output, input)`.
    fn gather<B: GroupTensor>(output: B, input: B::Input, root: impl Into<Rank>) -> (B, B::Input)
        where (B, B::Input): GroupBuffers => Op::Gather { root: ranks.comm_rank("root", root)? }, (output, input);

    /// Scatters `input` (world x output elements) of `root` (a global rank
    /// or a [`GroupRank`](crate::GroupRank)):
    /// each rank gets its block in `output` (`torch.distributed.scatter`
    /// from one tensor); elsewhere `input` is not read and may be empty.
    ///
    /// The work holds `(output, input)`.
    fn scatter<B: GroupTensor>(output: B, input: B::Input, root: impl Into<Rank>) -> (B, B::Input)
        where (B, B::Input): GroupBuffers => Op::Scatter { root: ranks.comm_rank("root", root)? }, (output, input);

    /// Sends `tensor` to `dst` over the pair's own communicator
    /// (`torch.distributed.send`).
    ///
    /// `dst` is a global rank or a [`GroupRank`](crate::GroupRank). Checks:
    /// `dst` another member.
    fn send<B: GroupTensor>(tensor: B, dst: impl Into<Rank>) -> B
        => Op::Send { peer: ranks.member("dst", dst)? }, tensor;

    /// Receives into `tensor` from `src` over the pair's own communicator
    /// (`torch.distributed.recv`).
    ///
    /// `src` is a global rank or a [`GroupRank`](crate::GroupRank). Checks:
    /// `src` another member.
    fn recv<B: GroupTensor>(tensor: B, src: impl Into<Rank>) -> B
        => Op::Recv { peer: ranks.member("src", src)? }, tensor;
}

multi_operations! {
    numbering ranks;

    /// [`ProcessGroup::all_reduce`] over one tensor per local GPU.
    fn all_reduce<T: NcclType>(tensors: Parts<T>, op: ReduceOp) -> Parts<T>
        => Op::AllReduce(op.into()), tensors;

    /// [`ProcessGroup::broadcast`] over one tensor per local GPU.
    fn broadcast<T: NcclType>(tensors: Parts<T>, root: impl Into<Rank>) -> Parts<T>
        => Op::Broadcast { root: ranks.comm_rank("root", root)? }, tensors;

    /// [`ProcessGroup::reduce`] over one tensor per local GPU.
    fn reduce<T: NcclType>(tensors: Parts<T>, op: ReduceOp, root: impl Into<Rank>) -> Parts<T>
        => Op::Reduce { op: op.into(), root: ranks.comm_rank("root", root)? }, tensors;

    /// [`ProcessGroup::all_gather_into_tensor`] with one `(output, input)`
    /// per local GPU.
    fn all_gather_into_tensor<T: NcclType>(pairs: PairParts<T>) -> PairParts<T>
        => Op::AllGather, pairs;

    /// [`ProcessGroup::reduce_scatter_tensor`] with one `(output, input)`
    /// per local GPU.
    fn reduce_scatter_tensor<T: NcclType>(pairs: PairParts<T>, op: ReduceOp) -> PairParts<T>
        => Op::ReduceScatter(op.into()), pairs;

    /// [`ProcessGroup::all_to_all_single`] with one `(output, input)` per
    /// local GPU.
    fn all_to_all_single<T: NcclType>(pairs: PairParts<T>) -> PairParts<T>
        => Op::AllToAll, pairs;

    /// [`ProcessGroup::gather`] with one `(output, input)` per local GPU.
    fn gather<T: NcclType>(pairs: PairParts<T>, root: impl Into<Rank>) -> PairParts<T>
        => Op::Gather { root: ranks.comm_rank("root", root)? }, pairs;

    /// [`ProcessGroup::scatter`] with one `(output, input)` per local GPU.
    fn scatter<T: NcclType>(pairs: PairParts<T>, root: impl Into<Rank>) -> PairParts<T>
        => Op::Scatter { root: ranks.comm_rank("root", root)? }, pairs;

    /// [`ProcessGroup::send`] from one tensor per local GPU: local device
    /// `i` sends to member `dst`'s device `i` (both processes pass the
    /// same number of tensors), over the pair's own communicator, in one
    /// group.
    fn send<T: NcclType>(tensors: Parts<T>, dst: impl Into<Rank>) -> Parts<T>
        => Op::Send { peer: ranks.member("dst", dst)? }, tensors;

    /// [`ProcessGroup::recv`] into one tensor per local GPU: local device
    /// `i` receives from member `src`'s device `i`.
    fn recv<T: NcclType>(tensors: Parts<T>, src: impl Into<Rank>) -> Parts<T>
        => Op::Recv { peer: ranks.member("src", src)? }, tensors;
}

coalesced_operations! {
    numbering ranks;

    /// Adds [`ProcessGroup::all_reduce`] on `buffers` to the batch.
    fn all_reduce(buffers: B, op: ReduceOp) => Op::AllReduce(op.into());

    /// Adds [`ProcessGroup::broadcast`] on `buffers` to the batch.
    fn broadcast(buffers: B, root: impl Into<Rank>) => Op::Broadcast { root: ranks.comm_rank("root", root)? };

    /// Adds [`ProcessGroup::reduce`] on `buffers` to the batch.
    fn reduce(buffers: B, op: ReduceOp, root: impl Into<Rank>)
        => Op::Reduce { op: op.into(), root: ranks.comm_rank("root", root)? };

    /// Adds [`ProcessGroup::all_gather_into_tensor`] on `buffers`
    /// (`(output, input)`) to the batch.
    fn all_gather_into_tensor(buffers: B) => Op::AllGather;

    /// Adds [`ProcessGroup::reduce_scatter_tensor`] on `buffers`
    /// (`(output, input)`) to the batch.
    fn reduce_scatter_tensor(buffers: B, op: ReduceOp) => Op::ReduceScatter(op.into());

    /// Adds [`ProcessGroup::all_to_all_single`] on `buffers`
    /// (`(output, input)`) to the batch.
    fn all_to_all_single(buffers: B) => Op::AllToAll;

    /// Adds [`ProcessGroup::gather`] on `buffers` (`(output, input)`) to
    /// the batch.
    fn gather(buffers: B, root: impl Into<Rank>) => Op::Gather { root: ranks.comm_rank("root", root)? };

    /// Adds [`ProcessGroup::scatter`] on `buffers` (`(output, input)`) to
    /// the batch.
    fn scatter(buffers: B, root: impl Into<Rank>) => Op::Scatter { root: ranks.comm_rank("root", root)? };
}
