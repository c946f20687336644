//! Each NCCL operation described once: [`Op`] (what it does, its NCCL
//! function, its reduction and root or peer) and [`Call`] (with buffers,
//! count and data type), which knows the function pointer to call
//! ([`Call::issue_raw`]) and the point-to-point form of the operations
//! that have one ([`Call::point_to_point_parts`]). Every layer above
//! matches on [`Op`]; a new operation is a compile error at each place
//! that must describe it.

use std::ffi::c_void;

use nccl_sys::{Functions, cudaStream_t, ncclComm_t, ncclResult_t};

use crate::datatype::DataType;
use crate::error::Result;
use crate::ranks::to_c;
use crate::reduce_op::Reduction;

/// One NCCL operation and its scalar arguments: what a [`Call`] does.
///
/// `root` and `peer` are ranks of the communicator the call is issued on.
/// Exhaustive on purpose: the layers above match on it, so a new operation
/// is a compile error at every place that must describe it.
#[derive(Clone, Copy, Debug)]
pub enum Op<'r> {
    /// `ncclAllReduce`: every rank gets the reduction of every rank's data.
    AllReduce(Reduction<'r>),
    /// `ncclBroadcast`: every rank gets `root`'s data.
    Broadcast {
        /// The rank whose data is sent.
        root: usize,
    },
    /// `ncclReduce`: `root` gets the reduction of every rank's data.
    Reduce {
        /// The reduction.
        op: Reduction<'r>,
        /// The rank that gets the result.
        root: usize,
    },
    /// `ncclAllGather`: every rank gets every rank's data, in rank order.
    AllGather,
    /// `ncclReduceScatter`: rank `r` gets block `r` of the reduction.
    ReduceScatter(Reduction<'r>),
    /// `ncclAlltoAll` (NCCL 2.28+): block `j` of rank `i`'s data goes to
    /// block `i` of rank `j`.
    AllToAll,
    /// `ncclGather` (NCCL 2.28+): `root` gets every rank's data, in rank
    /// order.
    Gather {
        /// The rank that gets the data.
        root: usize,
    },
    /// `ncclScatter` (NCCL 2.28+): rank `r` gets block `r` of `root`'s
    /// data.
    Scatter {
        /// The rank whose data is scattered.
        root: usize,
    },
    /// `ncclSend` to `peer`, which posts the matching [`Op::Recv`].
    Send {
        /// The receiving rank.
        peer: usize,
    },
    /// `ncclRecv` from `peer`.
    Recv {
        /// The sending rank.
        peer: usize,
    },
}

impl<'r> Op<'r> {
    /// The name torch.distributed and nccl-tests use (`all_reduce`).
    pub const fn name(&self) -> &'static str {
        self.names().0
    }

    /// The NCCL function the operation calls (`ncclAllReduce`).
    pub const fn function(&self) -> &'static str {
        self.names().1
    }

    /// The operation's torch.distributed name and its NCCL function.
    const fn names(&self) -> (&'static str, &'static str) {
        match self {
            Op::AllReduce(_) => ("all_reduce", "ncclAllReduce"),
            Op::Broadcast { .. } => ("broadcast", "ncclBroadcast"),
            Op::Reduce { .. } => ("reduce", "ncclReduce"),
            Op::AllGather => ("all_gather", "ncclAllGather"),
            Op::ReduceScatter(_) => ("reduce_scatter", "ncclReduceScatter"),
            Op::AllToAll => ("all_to_all", "ncclAlltoAll"),
            Op::Gather { .. } => ("gather", "ncclGather"),
            Op::Scatter { .. } => ("scatter", "ncclScatter"),
            Op::Send { .. } => ("send", "ncclSend"),
            Op::Recv { .. } => ("recv", "ncclRecv"),
        }
    }

    /// The reduction, for the operations that reduce.
    pub const fn reduction(&self) -> Option<Reduction<'r>> {
        match *self {
            Op::AllReduce(op) | Op::Reduce { op, .. } | Op::ReduceScatter(op) => Some(op),
            _ => None,
        }
    }

    /// The root or peer, for the operations that have one, with what to
    /// call it in an error (`root`, `dst` for a send's peer, `src` for a
    /// receive's).
    pub const fn rank_argument(&self) -> Option<(&'static str, usize)> {
        match *self {
            Op::Broadcast { root }
            | Op::Reduce { root, .. }
            | Op::Gather { root }
            | Op::Scatter { root } => Some(("root", root)),
            Op::Send { peer } => Some(("dst", peer)),
            Op::Recv { peer } => Some(("src", peer)),
            _ => None,
        }
    }

    /// Whether this is a send or a receive.
    pub const fn is_point_to_point(&self) -> bool {
        matches!(self, Op::Send { .. } | Op::Recv { .. })
    }

    /// Whether the operation can be issued as grouped sends and receives
    /// ([`Call::point_to_point_parts`]).
    pub const fn has_point_to_point_form(&self) -> bool {
        matches!(self, Op::AllToAll | Op::Gather { .. } | Op::Scatter { .. })
    }
}

/// One NCCL call on this rank: the operation, its buffers, the count and
/// the data type (the communicator and stream come with the issue).
///
/// `count` is NCCL's count for the function: elements per rank's block for
/// all_gather (`send_count`), reduce_scatter (`recv_count`) and all_to_all,
/// the whole buffer otherwise. `send == recv` is in place for the
/// reductions and broadcast; all_gather is in place when `send` is this
/// rank's block of `recv`, reduce_scatter when `recv` is this rank's block
/// of `send`. A send uses `send` only and a receive `recv` only (the other
/// may be null).
#[derive(Clone, Copy, Debug)]
pub struct Call<'r> {
    /// What to do.
    pub op: Op<'r>,
    /// The data this rank contributes (device address).
    pub send: *const c_void,
    /// Where this rank's result goes (device address).
    pub recv: *mut c_void,
    /// Elements, as NCCL counts them for `op`.
    pub count: usize,
    /// The element type.
    pub dtype: DataType,
}

impl<'r> Call<'r> {
    /// Calls the NCCL function of the operation with the call's arguments,
    /// as they are: no check, no workaround, no fallback.
    ///
    /// For callers that hold the raw handles (a baseline measurement); everyone
    /// else uses [`Communicator::issue`](crate::Communicator::issue).
    ///
    /// # Safety
    /// `comm` is a live communicator and `stream` a stream on its device;
    /// the call passes [`Communicator::check_call`](crate::Communicator::check_call) on that communicator;
    /// the buffers are as [`Communicator::issue`](crate::Communicator::issue) requires.
    ///
    /// # Errors
    /// The loaded libnccl lacks the function ([`Error::MissingFunction`](crate::Error::MissingFunction));
    /// a root or peer above `i32::MAX` ([`Error::InvalidArgument`](crate::Error::InvalidArgument));
    /// NCCL's own result is returned as it is.
    #[inline]
    pub unsafe fn issue_raw(
        &self,
        functions: &Functions,
        comm: ncclComm_t,
        stream: cudaStream_t,
    ) -> Result<ncclResult_t> {
        let Call {
            op,
            send,
            recv,
            count,
            dtype,
        } = *self;
        let dtype = dtype.to_raw();
        // SAFETY (every call below): the caller's contract.
        Ok(match op {
            Op::AllReduce(reduction) => {
                let f = functions.ncclAllReduce()?;
                // SAFETY: see above.
                unsafe { f(send, recv, count, dtype, reduction.to_raw(), comm, stream) }
            }
            Op::Broadcast { root } => {
                let f = functions.ncclBroadcast()?;
                let root = to_c("root", root)?;
                // SAFETY: see above.
                unsafe { f(send, recv, count, dtype, root, comm, stream) }
            }
            Op::Reduce { op, root } => {
                let f = functions.ncclReduce()?;
                let root = to_c("root", root)?;
                // SAFETY: see above.
                unsafe { f(send, recv, count, dtype, op.to_raw(), root, comm, stream) }
            }
            Op::AllGather => {
                let f = functions.ncclAllGather()?;
                // SAFETY: see above.
                unsafe { f(send, recv, count, dtype, comm, stream) }
            }
            Op::ReduceScatter(reduction) => {
                let f = functions.ncclReduceScatter()?;
                // SAFETY: see above.
                unsafe { f(send, recv, count, dtype, reduction.to_raw(), comm, stream) }
            }
            Op::AllToAll => {
                let f = functions.ncclAlltoAll()?;
                // SAFETY: see above.
                unsafe { f(send, recv, count, dtype, comm, stream) }
            }
            Op::Gather { root } => {
                let f = functions.ncclGather()?;
                let root = to_c("root", root)?;
                // SAFETY: see above.
                unsafe { f(send, recv, count, dtype, root, comm, stream) }
            }
            Op::Scatter { root } => {
                let f = functions.ncclScatter()?;
                let root = to_c("root", root)?;
                // SAFETY: see above.
                unsafe { f(send, recv, count, dtype, root, comm, stream) }
            }
            Op::Send { peer } => {
                let f = functions.ncclSend()?;
                let peer = to_c("dst", peer)?;
                // SAFETY: see above.
                unsafe { f(send, count, dtype, peer, comm, stream) }
            }
            Op::Recv { peer } => {
                let f = functions.ncclRecv()?;
                let peer = to_c("src", peer)?;
                // SAFETY: see above.
                unsafe { f(recv, count, dtype, peer, comm, stream) }
            }
        })
    }

    /// The call as grouped sends and receives, for the operations that
    /// move blocks of `count` elements between ranks (all_to_all, gather,
    /// scatter): the form issued on a libnccl without the operation's own
    /// function, and by whoever wants to compare the two.
    ///
    /// `None` for the others. `rank` is the issuing rank and `world` the
    /// communicator's size; block `j` of a buffer of one block per rank starts
    /// `j` blocks in.
    pub fn point_to_point_parts(
        &self,
        rank: usize,
        world: usize,
    ) -> Option<impl Iterator<Item = Call<'r>> + use<'r>> {
        if !self.op.has_point_to_point_form() {
            return None;
        }
        let call = *self;
        let block = call.count * call.dtype.size_bytes();
        let at = move |index: usize| index * block;
        // Per peer: what this rank sends it and what it receives from it.
        let parts = move |peer: usize| {
            let send = |offset| Call {
                op: Op::Send { peer },
                send: call.send.wrapping_byte_add(offset),
                recv: std::ptr::null_mut(),
                ..call
            };
            let recv = |offset| Call {
                op: Op::Recv { peer },
                send: std::ptr::null(),
                recv: call.recv.wrapping_byte_add(offset),
                ..call
            };
            match call.op {
                Op::Gather { root } => [
                    (peer == root).then(|| send(0)),
                    (rank == root).then(|| recv(at(peer))),
                ],
                Op::Scatter { root } => [
                    (rank == root).then(|| send(at(peer))),
                    (peer == root).then(|| recv(0)),
                ],
                _ => [Some(send(at(peer))), Some(recv(at(peer)))],
            }
        };
        Some((0..world).flat_map(parts).flatten())
    }
}
