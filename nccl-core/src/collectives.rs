//! The raw collectives: `unsafe fn`s on device pointers and element counts.
//! The safe, typed API is built on these by `nccl-tensor`.
//!
//! Every function checks what it can without touching memory (the
//! communicator is live, root and peer are in range, the stream is on the
//! communicator's device, the loaded NCCL knows the data type, a
//! pre-multiplied sum belongs to this communicator and type) and leaves the
//! rest to its `# Safety` contract.

use std::ffi::c_void;

use cudarc::driver::CudaStream;
use nccl_sys::{cudaStream_t, ncclComm_t, ncclResult_t};

use crate::communicator::Communicator;
use crate::datatype::DataType;
use crate::error::{Error, Result, Status};
use crate::library::check;
use crate::reduce_op::{ReduceOp, Reduction};

/// See [`Communicator::reduction_pieces`].
const ONE_RANK_CHUNK: usize = 4096;

impl Communicator {
    /// Common checks of every collective; returns the handles for the call.
    #[inline]
    fn prepare(&self, dtype: DataType, stream: &CudaStream) -> Result<(ncclComm_t, cudaStream_t)> {
        let raw = self.raw_for_call()?;
        let stream_device = stream.context().ordinal();
        if stream_device != self.device().ordinal() {
            return Err(Error::InvalidArgument {
                argument: "stream",
                expected: format!(
                    "a stream on the communicator's device {}",
                    self.device().ordinal()
                ),
                given: format!("a stream on device {stream_device}"),
            });
        }
        if dtype.min_version() > self.library().version() {
            return Err(Error::Unsupported {
                feature: format!("data type {}", dtype.name()),
                needed: dtype.min_version(),
                loaded: self.library().version(),
            });
        }
        Ok((raw, stream.cu_stream() as cudaStream_t))
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

    /// Issues a reduction of `count` elements through `call(send, recv, n)`,
    /// split as [`Communicator::reduction_pieces`] says.
    #[inline]
    fn issue_reduction(
        &self,
        function: &'static str,
        op: Reduction<'_>,
        dtype: DataType,
        count: usize,
        (send, recv): (*const c_void, *mut c_void),
        mut call: impl FnMut(*const c_void, *mut c_void, usize) -> ncclResult_t,
    ) -> Result<Status> {
        let (head, tail) = self.reduction_pieces(op, count);
        let status = check(self.library(), function, call(send, recv, head))?;
        if tail == 0 {
            return Ok(status);
        }
        let offset = head * dtype.size_bytes();
        let tail_buffers = (
            send.wrapping_byte_add(offset),
            recv.wrapping_byte_add(offset),
        );
        check(
            self.library(),
            function,
            call(tail_buffers.0, tail_buffers.1, tail),
        )
    }

    #[inline]
    fn check_rank(&self, what: &'static str, rank: i32) -> Result<()> {
        if (0..self.world_size()).contains(&rank) {
            Ok(())
        } else {
            Err(Error::RankOutOfRange {
                what,
                given: rank.into(),
                world_size: self.world_size(),
            })
        }
    }

    /// `ncclAllReduce`: reduces `count` elements across ranks; every rank
    /// gets the result in `recv`. `send == recv` is in-place.
    ///
    /// # Safety
    /// `send` and `recv` are device pointers on this communicator's device,
    /// valid for `count` elements of `dtype` until the operation completes
    /// on `stream` (`send` for reads, `recv` for writes); they either are
    /// equal or do not overlap. Every rank makes the matching call.
    pub unsafe fn all_reduce<'a>(
        &self,
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        dtype: DataType,
        op: impl Into<Reduction<'a>>,
        stream: &CudaStream,
    ) -> Result<Status> {
        let op = op.into();
        op.check_usable(self, dtype)?;
        let (comm, stream) = self.prepare(dtype, stream)?;
        let f = self.library().functions().ncclAllReduce()?;
        let buffers = (send, recv);
        self.issue_reduction(
            "ncclAllReduce",
            op,
            dtype,
            count,
            buffers,
            |send, recv, n| {
                // SAFETY: the handles are live (checked above); the buffers and
                // every piece of them are the caller's contract.
                unsafe { f(send, recv, n, dtype.to_raw(), op.to_raw(), comm, stream) }
            },
        )
    }

    /// `ncclBroadcast`: copies `count` elements from `send` on rank `root`
    /// into `recv` on every rank. `send` is read on the root only.
    ///
    /// # Safety
    /// As [`Communicator::all_reduce`], for `count` elements.
    pub unsafe fn broadcast(
        &self,
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        dtype: DataType,
        root: i32,
        stream: &CudaStream,
    ) -> Result<Status> {
        self.check_rank("root", root)?;
        let (comm, stream) = self.prepare(dtype, stream)?;
        let f = self.library().functions().ncclBroadcast()?;
        // SAFETY: as in `all_reduce`.
        let result = unsafe { f(send, recv, count, dtype.to_raw(), root, comm, stream) };
        check(self.library(), "ncclBroadcast", result)
    }

    /// `ncclReduce`: reduces `count` elements across ranks into `recv` on
    /// rank `root` (`recv` is not touched elsewhere).
    ///
    /// # Safety
    /// As [`Communicator::all_reduce`] (`recv` needs to be valid on the root only).
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn reduce<'a>(
        &self,
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        dtype: DataType,
        op: impl Into<Reduction<'a>>,
        root: i32,
        stream: &CudaStream,
    ) -> Result<Status> {
        let op = op.into();
        op.check_usable(self, dtype)?;
        self.check_rank("root", root)?;
        let (comm, stream) = self.prepare(dtype, stream)?;
        let f = self.library().functions().ncclReduce()?;
        let buffers = (send, recv);
        self.issue_reduction("ncclReduce", op, dtype, count, buffers, |send, recv, n| {
            // SAFETY: the handles are live (checked above); the buffers and
            // every piece of them are the caller's contract.
            unsafe {
                f(
                    send,
                    recv,
                    n,
                    dtype.to_raw(),
                    op.to_raw(),
                    root,
                    comm,
                    stream,
                )
            }
        })
    }

    /// `ncclAllGather`: every rank contributes `send_count` elements; `recv`
    /// receives `world_size * send_count` elements in rank order. In place
    /// when `send == recv + rank * send_count` elements.
    ///
    /// # Safety
    /// `send` valid for `send_count` elements, `recv` for
    /// `world_size * send_count`, as in [`Communicator::all_reduce`].
    pub unsafe fn all_gather(
        &self,
        send: *const c_void,
        recv: *mut c_void,
        send_count: usize,
        dtype: DataType,
        stream: &CudaStream,
    ) -> Result<Status> {
        let (comm, stream) = self.prepare(dtype, stream)?;
        let f = self.library().functions().ncclAllGather()?;
        // SAFETY: as in `all_reduce`.
        let result = unsafe { f(send, recv, send_count, dtype.to_raw(), comm, stream) };
        check(self.library(), "ncclAllGather", result)
    }

    /// `ncclReduceScatter`: reduces `world_size * recv_count` elements
    /// across ranks; rank `r` receives block `r` (`recv_count` elements).
    /// In place when `recv == send + rank * recv_count` elements.
    ///
    /// # Safety
    /// `send` valid for `world_size * recv_count` elements, `recv` for
    /// `recv_count`, as in [`Communicator::all_reduce`].
    pub unsafe fn reduce_scatter<'a>(
        &self,
        send: *const c_void,
        recv: *mut c_void,
        recv_count: usize,
        dtype: DataType,
        op: impl Into<Reduction<'a>>,
        stream: &CudaStream,
    ) -> Result<Status> {
        let op = op.into();
        op.check_usable(self, dtype)?;
        let (comm, stream) = self.prepare(dtype, stream)?;
        let f = self.library().functions().ncclReduceScatter()?;
        let buffers = (send, recv);
        self.issue_reduction(
            "ncclReduceScatter",
            op,
            dtype,
            recv_count,
            buffers,
            |send, recv, n| {
                // SAFETY: the handles are live (checked above); the buffers and
                // every piece of them are the caller's contract.
                unsafe { f(send, recv, n, dtype.to_raw(), op.to_raw(), comm, stream) }
            },
        )
    }

    /// `ncclAlltoAll` (NCCL 2.28+): block `j` of `send` (`count` elements)
    /// goes to rank `j`, and block `i` of `recv` comes from rank `i`.
    ///
    /// # Safety
    /// `send` and `recv` valid for `world_size * count` elements and not
    /// overlapping, as in [`Communicator::all_reduce`].
    pub unsafe fn all_to_all(
        &self,
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        dtype: DataType,
        stream: &CudaStream,
    ) -> Result<Status> {
        let (comm, stream) = self.prepare(dtype, stream)?;
        let f = self.library().functions().ncclAlltoAll()?;
        // SAFETY: as in `all_reduce`.
        let result = unsafe { f(send, recv, count, dtype.to_raw(), comm, stream) };
        check(self.library(), "ncclAlltoAll", result)
    }

    /// `ncclSend`: sends `count` elements to rank `peer`, which must post
    /// the matching [`Communicator::recv`].
    ///
    /// # Safety
    /// `send` valid for `count` elements as in [`Communicator::all_reduce`].
    /// A send to this rank itself hangs unless issued inside one
    /// [`Group`](crate::Group) together with the matching receive.
    pub unsafe fn send(
        &self,
        send: *const c_void,
        count: usize,
        dtype: DataType,
        peer: i32,
        stream: &CudaStream,
    ) -> Result<Status> {
        self.check_rank("peer", peer)?;
        let (comm, stream) = self.prepare(dtype, stream)?;
        let f = self.library().functions().ncclSend()?;
        // SAFETY: as in `all_reduce`.
        let result = unsafe { f(send, count, dtype.to_raw(), peer, comm, stream) };
        check(self.library(), "ncclSend", result)
    }

    /// `ncclRecv`: receives `count` elements from rank `peer`.
    ///
    /// # Safety
    /// `recv` valid for `count` elements as in [`Communicator::all_reduce`];
    /// the same self-peer rule as [`Communicator::send`].
    pub unsafe fn recv(
        &self,
        recv: *mut c_void,
        count: usize,
        dtype: DataType,
        peer: i32,
        stream: &CudaStream,
    ) -> Result<Status> {
        self.check_rank("peer", peer)?;
        let (comm, stream) = self.prepare(dtype, stream)?;
        let f = self.library().functions().ncclRecv()?;
        // SAFETY: as in `all_reduce`.
        let result = unsafe { f(recv, count, dtype.to_raw(), peer, comm, stream) };
        check(self.library(), "ncclRecv", result)
    }
}
