//! The raw collectives: `unsafe fn`s on device pointers and element counts.
//! The safe, typed API is built on these by `nccl-tensor`.
//!
//! Each NCCL operation is described once, as an [`Op`]; a [`Call`] adds the
//! buffers, count and data type (both in `op.rs`). [`Communicator::issue`] checks what it can
//! without touching memory (root and peer in range, the stream on the
//! communicator's device, a data type the loaded NCCL knows, a
//! pre-multiplied sum of this communicator and type) and leaves the rest to
//! its `# Safety` contract; [`Communicator::issue_unchecked`] is for a
//! caller that made those checks itself (nccl-tensor's plan step). The
//! classic operations' methods (`all_reduce`, ...) are `issue` with one
//! `Op`, written as one table (`shorthands!`).

use std::ffi::c_void;

use cudarc::driver::CudaStream;
use nccl_sys::{Functions, cudaStream_t, ncclComm_t};

use crate::communicator::Communicator;
use crate::datatype::DataType;
use crate::error::{Error, Result, Status};
use crate::group::Group;
use crate::library::check;
use crate::op::{Call, Op};
use crate::reduce_op::{ReduceOp, Reduction};

/// See [`Communicator::reduction_pieces`].
const ONE_RANK_CHUNK: usize = 4096;

impl Communicator {
    /// What [`Communicator::issue`] checks before the call: root and peer
    /// in range, the stream on this communicator's device, a data type the
    /// loaded NCCL knows, a pre-multiplied sum of this communicator and
    /// type.
    ///
    /// # Errors
    /// The first check that fails.
    pub fn check_call(&self, call: &Call<'_>, stream: &CudaStream) -> Result<()> {
        if let Some((what, rank)) = call.op.rank_argument()
            && !(0..self.world_size()).contains(&rank)
        {
            return Err(Error::RankOutOfRange {
                what,
                given: rank,
                world_size: self.world_size(),
            });
        }
        let stream_device = stream.context().ordinal();
        if stream_device != self.device().ordinal() {
            return Err(Error::WrongDevice {
                what: "stream",
                expected: self.device().ordinal(),
                given: stream_device,
            });
        }
        let loaded = self.library().version();
        if call.dtype.min_version() > loaded {
            return Err(Error::Unsupported {
                feature: format!("data type {}", call.dtype.name()),
                needed: call.dtype.min_version(),
                loaded,
            });
        }
        match call.op.reduction() {
            Some(reduction) => reduction.check_usable(self, call.dtype),
            None => Ok(()),
        }
    }

    /// Checks `call` ([`Communicator::check_call`]) and enqueues it on
    /// `stream`.
    ///
    /// # Safety
    /// `send` and `recv` are device pointers on this communicator's device,
    /// valid until the operation completes on `stream` for the elements of
    /// `dtype` the operation reads (`send`) and writes (`recv`), as
    /// [`Call`] counts them; they are equal (in place) or do not overlap.
    /// Every rank makes the matching call. A send or receive to this rank
    /// itself hangs unless issued inside one [`Group`](crate::Group)
    /// together with its other half.
    ///
    /// # Errors
    /// A failed check, an aborted or finalized communicator, a function
    /// the loaded libnccl lacks, or NCCL's error.
    pub unsafe fn issue(&self, call: Call<'_>, stream: &CudaStream) -> Result<Status> {
        self.check_call(&call, stream)?;
        // SAFETY: checked above; the buffers are the caller's contract.
        unsafe { self.issue_unchecked(call, stream) }
    }

    /// Enqueues `call` on `stream` without [`Communicator::check_call`]'s
    /// checks, for a caller that made them (nccl-tensor plans every
    /// operation before issuing it).
    ///
    /// Whether the communicator is live is still checked. An operation whose
    /// NCCL function the loaded libnccl lacks but which has a point-to-point
    /// form ([`Call::point_to_point_parts`]: all_to_all before NCCL 2.28) is
    /// issued as that form, in one group.
    ///
    /// # Safety
    /// As [`Communicator::issue`], and `call` and `stream` pass
    /// [`Communicator::check_call`].
    ///
    /// # Errors
    /// An aborted or finalized communicator, a function the loaded libnccl
    /// lacks, or NCCL's error.
    #[inline]
    pub unsafe fn issue_unchecked(&self, call: Call<'_>, stream: &CudaStream) -> Result<Status> {
        let comm = self.raw_for_call()?;
        crate::trace::event!(
            trace,
            op = call.op.function(),
            count = call.count,
            rank = self.rank(),
            "issue"
        );
        let stream = stream.cu_stream() as cudaStream_t;
        let functions = self.library().functions();
        if call.op.has_point_to_point_form()
            && !functions.has(call.op.function())
            && let Some(parts) = call.point_to_point_parts(self.rank(), self.world_size())
        {
            let group = Group::start()?;
            for part in parts {
                // SAFETY: each part lies within the call's buffers and
                // addresses a peer in range; the rest is the caller's
                // contract.
                let _ = unsafe { self.issue_pieces(part, functions, comm, stream) }?;
            }
            return group.end();
        }
        // SAFETY: the caller's contract; the handles are live (above).
        unsafe { self.issue_pieces(call, functions, comm, stream) }
    }

    /// Issues `call`, split as [`Communicator::reduction_pieces`] says.
    ///
    /// # Safety
    /// As [`Call::issue_raw`].
    #[inline]
    unsafe fn issue_pieces(
        &self,
        call: Call<'_>,
        functions: &Functions,
        comm: ncclComm_t,
        stream: cudaStream_t,
    ) -> Result<Status> {
        let function = call.op.function();
        let (head, tail) = match call.op.reduction() {
            Some(reduction) => self.reduction_pieces(reduction, call.count),
            None => (call.count, 0),
        };
        let head_call = Call {
            count: head,
            ..call
        };
        // SAFETY: the caller's contract, for the first `head` elements.
        let result = unsafe { head_call.issue_raw(functions, comm, stream) }?;
        let status = check(self.library(), function, result)?;
        if tail == 0 {
            return Ok(status);
        }
        let offset = head * call.dtype.size_bytes();
        let tail_call = Call {
            send: call.send.wrapping_byte_add(offset),
            recv: call.recv.wrapping_byte_add(offset),
            count: tail,
            ..call
        };
        // SAFETY: the caller's contract, for the `tail` elements after them.
        let result = unsafe { tail_call.issue_raw(functions, comm, stream) }?;
        check(self.library(), function, result)
    }

    /// The element counts to issue a reduction in: `(head, tail)`, with
    /// `tail` issued as a second call right after `head`.
    ///
    /// With one rank, NCCL runs reductions that scale (pre-multiplied sums,
    /// and averages, which it turns into one) through a single-rank kernel
    /// that loses trailing elements past the last multiple of 4096 for some
    /// counts (NCCL 2.28.3 on an H200: counts 4097, 8197, 12289, 1048577 to
    /// 1048584 lost 1 to 8 elements; counts up to 4096 and multiples of
    /// 4096 were always right). Issuing that tail on its own avoids it.
    /// With one rank a reduce_scatter's block is the whole buffer, so the
    /// same split holds.
    #[inline]
    fn reduction_pieces(&self, op: Reduction<'_>, count: usize) -> (usize, usize) {
        let scaling = matches!(
            op,
            Reduction::PreMulSum(_) | Reduction::Builtin(ReduceOp::Avg)
        );
        if self.world_size() == 1 && scaling && count > ONE_RANK_CHUNK {
            let tail = count % ONE_RANK_CHUNK;
            (count - tail, tail)
        } else {
            (count, 0)
        }
    }
}

/// The classic operations as methods of their own, each [`Communicator::issue`]
/// with one [`Op`]: `$name($args) => $call` defines
/// `unsafe fn $name(&self, $args, stream) -> Result<Status>` issuing `$call`.
macro_rules! shorthands {
    ($(
        $(#[$doc:meta])*
        fn $name:ident $(<$lt:lifetime>)? ($($arg:ident: $ty:ty),* $(,)?) => $call:expr;
    )*) => {
        impl Communicator {$(
            $(#[$doc])*
            ///
            /// # Safety
            /// As [`Communicator::issue`].
            #[allow(clippy::too_many_arguments)]
            pub unsafe fn $name $(<$lt>)? (&self, $($arg: $ty,)* stream: &CudaStream) -> Result<Status> {
                // SAFETY: the caller's contract is `issue`'s.
                unsafe { self.issue($call, stream) }
            }
        )*}
    };
}

shorthands! {
    /// `ncclAllReduce`: reduces `count` elements across ranks; every rank
    /// gets the result in `recv`.
    ///
    /// `send == recv` is in place.
    fn all_reduce<'a>(
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        dtype: DataType,
        op: impl Into<Reduction<'a>>,
    ) => Call { op: Op::AllReduce(op.into()), send, recv, count, dtype };

    /// `ncclBroadcast`: copies `count` elements from `send` on rank `root`
    /// into `recv` on every rank.
    ///
    /// `send` is read on the root only.
    fn broadcast(
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        dtype: DataType,
        root: usize,
    ) => Call { op: Op::Broadcast { root }, send, recv, count, dtype };

    /// `ncclReduce`: reduces `count` elements across ranks into `recv` on
    /// rank `root` (`recv` is not touched elsewhere, and needs to be valid
    /// on the root only).
    fn reduce<'a>(
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        dtype: DataType,
        op: impl Into<Reduction<'a>>,
        root: usize,
    ) => Call { op: Op::Reduce { op: op.into(), root }, send, recv, count, dtype };

    /// `ncclAllGather`: every rank contributes `send_count` elements; `recv`
    /// receives `world_size * send_count` elements in rank order.
    fn all_gather(
        send: *const c_void,
        recv: *mut c_void,
        send_count: usize,
        dtype: DataType,
    ) => Call { op: Op::AllGather, send, recv, count: send_count, dtype };

    /// `ncclReduceScatter`: reduces `world_size * recv_count` elements
    /// across ranks; rank `r` receives block `r` (`recv_count` elements).
    fn reduce_scatter<'a>(
        send: *const c_void,
        recv: *mut c_void,
        recv_count: usize,
        dtype: DataType,
        op: impl Into<Reduction<'a>>,
    ) => Call { op: Op::ReduceScatter(op.into()), send, recv, count: recv_count, dtype };

    /// `ncclAlltoAll` (NCCL 2.28+, grouped sends and receives before):
    /// block `j` of `send` (`count` elements) goes to rank `j`, and block
    /// `i` of `recv` comes from rank `i`.
    ///
    /// The buffers do not overlap.
    fn all_to_all(
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        dtype: DataType,
    ) => Call { op: Op::AllToAll, send, recv, count, dtype };

    /// `ncclSend`: sends `count` elements to rank `peer`, which must post
    /// the matching [`Communicator::recv`].
    fn send(
        send: *const c_void,
        count: usize,
        dtype: DataType,
        peer: usize,
    ) => Call { op: Op::Send { peer }, send, recv: std::ptr::null_mut(), count, dtype };

    /// `ncclRecv`: receives `count` elements from rank `peer`.
    fn recv(
        recv: *mut c_void,
        count: usize,
        dtype: DataType,
        peer: usize,
    ) => Call { op: Op::Recv { peer }, send: std::ptr::null(), recv, count, dtype };
}
