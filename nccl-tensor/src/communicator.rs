//! The tensor-based communicator: every collective on typed
//! buffers or tensor cells, with every argument checked before NCCL sees it.

use std::cell::RefCell;
use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtrMut};
use nccl_core::{
    Call, Config, DataType, Device, Op, PreMulSum, ReduceOp, Reduction, Status, UniqueId,
};

use crate::buffer::BufferDesc;
use crate::checks::{self, CommInfo};
use crate::dtype::NcclType;
use crate::error::{Error, Result};
use crate::operand::{Input, Output, OutputList, Pair, ReadOnly, Single};

/// How [`Communicator::all_to_all_single`] moves data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AllToAllMethod {
    /// `ncclAlltoAll` where the loaded NCCL has it (2.28+), grouped
    /// send/recv otherwise.
    #[default]
    Auto,
    /// Always grouped send/recv (the fallback, for testing or comparison).
    SendRecv,
}

/// A NCCL communicator with a tensor-based interface: a subset of
/// `c10d::ProcessGroup` (see `torch.distributed` for each operation's
/// meaning).
///
/// ```no_run
/// use nccl_tensor::prelude::*;
///
/// /// Rank `rank` of `world_size`, on this host's GPU `gpu`. `id` is rank 0's
/// /// `UniqueId::new()`, handed to every rank by the program's own means
/// /// (`id.as_bytes()`, then `UniqueId::try_from_slice`); nccl-group's
/// /// `communicator` does that from torchrun's, srun's or mpirun's variables.
/// fn run(rank: usize, world_size: usize, gpu: usize, id: UniqueId) -> nccl_tensor::Result<()> {
///     let device = Device::new(gpu)?;
///     let comm = Communicator::new(device.clone(), world_size, id, rank)?;
///     let stream = device.new_stream()?;
///     // A tensor of this crate, reduced in place...
///     let mut grads = Tensor::from_host(&stream, &[1.0f32; 1024], &[1024])?;
///     let _ = comm.all_reduce(&mut grads, ReduceOp::Sum, &stream)?; // blocking: `Status::Success`
///     // ... or memory the program owns, cudarc's slices, borrowed for the call.
///     let cuda = nccl_tensor::nccl_core::Error::cuda;
///     let shard: CudaSlice<bf16> = stream.alloc_zeros(256).map_err(cuda("alloc"))?;
///     let mut all: CudaSlice<bf16> = stream.alloc_zeros(256 * world_size).map_err(cuda("alloc"))?;
///     let _ = comm.all_gather_into_tensor(&mut all, &shard, &stream)?; // every length checked first
///     println!("{:?}", &grads.to_vec(&stream)?[..4]); // the stream's work, then the copy
///     Ok(())
/// }
/// ```
///
/// Every operation takes the stream to enqueue on and returns
/// `Result<Status, Error>`. Buffers are typed ([`Tensor`](crate::Tensor),
/// cudarc's `CudaSlice`, `CudaView`, `CudaViewMut`: `&buffer` to read,
/// `&mut buffer` to write) or [`TensorCell`](crate::TensorCell)s
/// (`&cell`); the same code serves both. Argument errors are distinct
/// [`Error`] variants naming what was expected and what was given; an
/// empty tensor is a valid no-op.
///
/// Operations take `&self`: the communicator is `Send` but not `Sync`, so
/// the compiler still stops two threads from issuing on it at once, and a
/// [`PreMulSum`] can borrow it.
///
/// Buffer lifetimes follow cudarc: when stream tracking is on (cudarc's
/// default with several streams), each buffer records its use on the
/// operation's stream, and freeing it later waits for that use.
pub struct Communicator {
    pub(crate) core: nccl_core::Communicator,
    compute_capability: (i32, i32),
    pub(crate) all_to_all: AllToAllMethod,
    barrier_buffer: RefCell<Option<CudaSlice<f32>>>,
}

impl std::fmt::Debug for Communicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Communicator")
            .field("core", &self.core)
            .field("compute_capability", &self.compute_capability)
            .field("all_to_all", &self.all_to_all)
            .finish()
    }
}

impl Communicator {
    /// Creates this rank's communicator; every rank calls it with the same
    /// `unique_id` and `world_size` (see [`nccl_core::Communicator::new`]).
    ///
    /// # Errors
    /// Bad arguments (a rank or world size above `i32::MAX` among them), no
    /// driver or library, or NCCL's failure.
    pub fn new(
        device: Device,
        world_size: usize,
        unique_id: UniqueId,
        rank: usize,
    ) -> Result<Self> {
        Self::from_core(nccl_core::Communicator::new(
            device, world_size, unique_id, rank,
        )?)
    }

    /// Like [`Communicator::new`] with a [`Config`].
    ///
    /// # Errors
    /// As [`Communicator::new`] and [`nccl_core::Communicator::with_config`].
    pub fn with_config(
        device: Device,
        world_size: usize,
        unique_id: UniqueId,
        rank: usize,
        config: &Config,
    ) -> Result<Self> {
        Self::from_core(nccl_core::Communicator::with_config(
            device, world_size, unique_id, rank, config,
        )?)
    }

    /// One communicator per device, for one process driving several GPUs.
    ///
    /// # Errors
    /// As [`nccl_core::Communicator::init_all`].
    pub fn init_all(devices: &[Device]) -> Result<Vec<Self>> {
        nccl_core::Communicator::init_all(devices)?
            .into_iter()
            .map(Self::from_core)
            .collect()
    }

    /// Wraps a communicator of the layer below.
    ///
    /// # Errors
    /// The device's compute capability could not be read.
    pub fn from_core(core: nccl_core::Communicator) -> Result<Self> {
        let compute_capability = core.device().compute_capability()?;
        Ok(Self {
            core,
            compute_capability,
            all_to_all: AllToAllMethod::Auto,
            barrier_buffer: RefCell::new(None),
        })
    }

    /// The communicator of the layer below (for its raw API, abort handle,
    /// finalize and so on).
    pub fn core(&self) -> &nccl_core::Communicator {
        &self.core
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.core.rank()
    }

    /// The number of ranks.
    pub fn world_size(&self) -> usize {
        self.core.world_size()
    }

    /// The device.
    pub fn device(&self) -> &Device {
        self.core.device()
    }

    /// Chooses how [`Communicator::all_to_all_single`] moves data.
    pub fn set_all_to_all_method(&mut self, method: AllToAllMethod) {
        self.all_to_all = method;
    }

    /// The facts the argument checks use.
    #[inline]
    pub fn info(&self) -> CommInfo {
        CommInfo {
            rank: self.rank(),
            world_size: self.world_size(),
            device: self.core.device().ordinal(),
            nccl_version: self.core.library().version(),
            compute_capability: self.compute_capability,
            in_group: nccl_core::group_depth() > 0,
        }
    }

    /// A pre-multiplied sum `sum(scalar * x)` for `T` on this communicator.
    ///
    /// # Errors
    /// As [`nccl_core::Communicator::pre_mul_sum`].
    pub fn pre_mul_sum<T: NcclType>(&self, scalar: f64) -> Result<PreMulSum<'_>> {
        Ok(self.core.pre_mul_sum(T::DATA_TYPE, scalar)?)
    }

    /// Splits off a communicator of the same ranks.
    ///
    /// Collective.
    ///
    /// # Errors
    /// As [`nccl_core::Communicator::split_all`].
    pub fn split_all(&self, config: Option<&Config>) -> Result<Self> {
        self.derive(self.core.split_all(config)?)
    }

    /// Splits off a communicator of `ranks` only (`None` on ranks not in
    /// it; an empty list means `NCCL_SPLIT_NOCOLOR`).
    ///
    /// Collective.
    ///
    /// # Errors
    /// As [`nccl_core::Communicator::split_from`].
    pub fn split_from(&self, ranks: &[usize], config: Option<&Config>) -> Result<Option<Self>> {
        self.core
            .split_from(ranks, config)?
            .map(|core| self.derive(core))
            .transpose()
    }

    fn derive(&self, core: nccl_core::Communicator) -> Result<Self> {
        Ok(Self {
            core,
            compute_capability: self.compute_capability,
            all_to_all: self.all_to_all,
            barrier_buffer: RefCell::new(None),
        })
    }

    /// Gathers every rank's `input` into `outputs[rank]`
    /// (`torch.distributed.all_gather`).
    ///
    /// Issued as one broadcast per rank.
    ///
    /// Checks: the stream on this device, one output per rank, each of the
    /// input's type and length, all on this device and contiguous, no cell
    /// twice (among the outputs or as input and output).
    ///
    /// # Errors
    /// A failed check, or NCCL's error.
    pub fn all_gather<I: Input + Copy>(
        &self,
        mut outputs: impl OutputList,
        input: I,
        stream: &Arc<CudaStream>,
    ) -> Result<Status> {
        const OP: &str = "all_gather";
        let info = self.info();
        checks::stream(OP, stream.context().ordinal(), info.device)?;
        let input_desc = input.desc();
        let count = outputs.count();
        let descs = (0..count).filter_map(|i| outputs.desc_at(i));
        checks::all_gather_list(
            &info,
            &input_desc,
            ExactLen {
                inner: descs,
                len: count,
            },
        )?;
        // A cell twice would deadlock on its lock (input and output) or
        // have ranks overwrite each other (two outputs).
        for index in 0..count {
            if let Some(cell) = outputs.cell_at(index) {
                let earlier = (0..index)
                    .filter_map(|i| outputs.cell_at(i))
                    .any(|other| other.same_cell(cell));
                if earlier || input.cell().is_some_and(|input| input.same_cell(cell)) {
                    return Err(Error::AliasedCells { op: OP });
                }
            }
        }
        let (count, dtype) = (input_desc.len, input_desc.dtype);
        let mut status = Status::Success;
        if count == 0 {
            return Ok(status);
        }
        for (root, index) in (0..self.core.world_size()).zip(0..) {
            let op = Op::Broadcast { root };
            let written = input.read(stream, |send| {
                outputs.write_at(index, stream, |recv| {
                    let call = Call {
                        op,
                        send,
                        recv,
                        count,
                        dtype,
                    };
                    // SAFETY: the input and output `root` hold `count`
                    // elements of `dtype` on this device, and the stream
                    // and root passed the checks (above).
                    unsafe { self.core.issue_unchecked(call, stream) }
                })
            });
            if let Some(result) = written
                && result? == Status::InProgress
            {
                status = Status::InProgress;
            }
        }
        Ok(status)
    }
    /// Synchronises all ranks: an all-reduce of one cached element on
    /// `stream` (allocated by the first call).
    ///
    /// Work enqueued on `stream` after it starts once every rank has reached
    /// the barrier; synchronise the stream to block the host too.
    ///
    /// # Errors
    /// A stream on another device, an allocation failure on the first
    /// call, or NCCL's error.
    pub fn barrier(&self, stream: &Arc<CudaStream>) -> Result<Status> {
        checks::stream(
            "barrier",
            stream.context().ordinal(),
            self.device().ordinal(),
        )?;
        let mut cached = self.barrier_buffer.borrow_mut();
        let buffer = match &mut *cached {
            Some(buffer) => buffer,
            empty => empty.insert(
                stream
                    .alloc_zeros::<f32>(1)
                    .map_err(nccl_core::Error::cuda("allocating the barrier buffer"))?,
            ),
        };
        // NCCL writes the buffer (an in-place all_reduce): recorded as a
        // write, so a barrier on another stream waits for this one.
        let (pointer, _record) = buffer.device_ptr_mut(stream);
        let call = Call {
            op: Op::AllReduce(ReduceOp::Sum.into()),
            send: pointer as *const c_void,
            recv: pointer as *mut c_void,
            count: 1,
            dtype: DataType::Float32,
        };
        // SAFETY: the cached buffer holds one f32 on this device and lives
        // as long as the communicator; only barriers write it; the stream
        // is on this device (checked).
        Ok(unsafe { self.core.issue_unchecked(call, stream) }?)
    }
}

/// The operations of one [`Op`] on one set of [`Operands`](crate::Operands):
/// `fn $name($args) => $op, $operands;` defines
/// `fn $name(&self, $args, stream) -> Result<Status>`, which plans the
/// operation ([`Communicator::plan`]) and enqueues it.
macro_rules! operations {
    ($(
        $(#[$doc:meta])*
        fn $name:ident $(<$lt:lifetime>)? ($($arg:ident: $ty:ty),* $(,)?) => $op:expr, $operands:expr;
    )*) => {
        impl Communicator {$(
            $(#[$doc])*
            ///
            /// # Errors
            /// A failed check, or NCCL's error.
            pub fn $name $(<$lt>)? (&self, $($arg: $ty,)* stream: &Arc<CudaStream>) -> Result<Status> {
                self.plan($op, $operands, stream)?.enqueue()
            }
        )*}
    };
}

operations! {
    /// Reduces `tensor` across all ranks in place; every rank gets the
    /// result (`torch.distributed.all_reduce`).
    ///
    /// Checks ([`Plan::new`](crate::Plan::new)): the stream and the buffer on this device,
    /// contiguous, a data type the loaded NCCL knows, a reduction it
    /// supports for that type (fp8 reductions need compute capability 9.0).
    ///
    /// ```no_run
    /// # fn main() -> nccl_tensor::Result<()> {
    /// use nccl_core::{Device, ReduceOp, UniqueId};
    /// use nccl_tensor::{Communicator, Tensor};
    /// let device = Device::new(0)?;
    /// let comm = Communicator::new(device.clone(), 1, UniqueId::new()?, 0)?;
    /// let stream = device.new_stream()?;
    /// let mut tensor = Tensor::from_host(&stream, &[1.0f32, 2.0, 3.0], &[3])?;
    /// let _ = comm.all_reduce(&mut tensor, ReduceOp::Sum, &stream)?;
    /// assert_eq!(tensor.to_vec(&stream)?, vec![1.0, 2.0, 3.0]); // one rank
    /// # Ok(()) }
    /// ```
    fn all_reduce<'r>(tensor: impl Output, op: impl Into<Reduction<'r>>) => Op::AllReduce(op.into()), Single(tensor);

    /// Out-of-place [`Communicator::all_reduce`]: `output` gets the
    /// reduction of every rank's `input`.
    ///
    /// Checks: as `all_reduce`, plus the same data type and length for
    /// both, and not one cell twice.
    fn all_reduce_into<'r>(input: impl Input, output: impl Output, op: impl Into<Reduction<'r>>) => Op::AllReduce(op.into()), Pair { input, output };

    /// Copies `tensor` from rank `root` to every rank, in place
    /// (`torch.distributed.broadcast`).
    ///
    /// Checks: `root` in range; the buffer as in `all_reduce`.
    ///
    /// ```no_run
    /// # fn run(comm: &nccl_tensor::Communicator, stream: &std::sync::Arc<nccl_core::CudaStream>) -> nccl_tensor::Result<()> {
    /// let mut weights = nccl_tensor::Tensor::<f32>::zeros(stream, &[1024])?;
    /// let _ = comm.broadcast(&mut weights, 0, stream)?;
    /// # Ok(()) }
    /// ```
    fn broadcast(tensor: impl Output, root: usize) => Op::Broadcast { root }, Single(tensor);

    /// Out-of-place [`Communicator::broadcast`]: `output` on every rank
    /// gets `input` of `root` (`input` is read on the root only).
    ///
    /// Checks: as `broadcast`, plus the same data type and length for both.
    fn broadcast_into(input: impl Input, output: impl Output, root: usize) => Op::Broadcast { root }, Pair { input, output };

    /// Reduces `tensor` across ranks into `tensor` on rank `root`, in place
    /// (`torch.distributed.reduce`; other ranks' tensors are left as they are).
    ///
    /// Checks: `root` in range; the buffer and reduction as in `all_reduce`.
    fn reduce<'r>(tensor: impl Output, op: impl Into<Reduction<'r>>, root: usize) => Op::Reduce { op: op.into(), root }, Single(tensor);

    /// Out-of-place [`Communicator::reduce`]: `output` on `root` gets the
    /// reduction of every rank's `input`.
    ///
    /// Checks: as `reduce`, plus the same data type and length for both.
    fn reduce_into<'r>(input: impl Input, output: impl Output, op: impl Into<Reduction<'r>>, root: usize) => Op::Reduce { op: op.into(), root }, Pair { input, output };

    /// Gathers every rank's `input` into one `output` of world size x input
    /// elements, in rank order (`torch.distributed.all_gather_into_tensor`).
    ///
    /// Checks: output length = world size x input length, same data type,
    /// the buffers as in `all_reduce`.
    fn all_gather_into_tensor(output: impl Output, input: impl Input) => Op::AllGather, Pair { input, output };

    /// Reduces `input` (world size x output elements) across ranks and
    /// scatters it: rank `r` gets block `r` in `output`
    /// (`torch.distributed.reduce_scatter_tensor`).
    ///
    /// Checks: input length = world size x output length, same data type,
    /// a supported reduction.
    fn reduce_scatter_tensor<'r>(output: impl Output, input: impl Input, op: impl Into<Reduction<'r>>) => Op::ReduceScatter(op.into()), Pair { input, output };

    /// Sends `tensor` to rank `dst`, which posts the matching
    /// [`Communicator::recv`].
    ///
    /// Checks: `dst` in range and, outside a [`Group`](nccl_core::Group), not this rank
    /// (NCCL would hang); the buffer as in `all_reduce`.
    fn send(tensor: impl Input, dst: usize) => Op::Send { peer: dst }, ReadOnly(tensor);

    /// Receives into `tensor` from rank `src`.
    ///
    /// Checks: as [`Communicator::send`].
    fn recv(tensor: impl Output, src: usize) => Op::Recv { peer: src }, Single(tensor);

    /// Splits `input` into world size blocks, sends block `j` to rank `j`
    /// and concatenates the received blocks in rank order into `output`
    /// (`torch.distributed.all_to_all_single` with equal splits).
    ///
    /// `ncclAlltoAll` where the loaded NCCL has it (2.28+), grouped send/recv
    /// otherwise (or when [`AllToAllMethod::SendRecv`] is set).
    ///
    /// Checks: equal lengths, divisible by the world size, same data type.
    fn all_to_all_single(output: impl Output, input: impl Input) => Op::AllToAll, Pair { input, output };

    /// Gathers every rank's `input` into `output` on rank `root`, in rank
    /// order (`torch.distributed.gather`, with the gather list as one
    /// tensor of world size x input elements).
    ///
    /// `ncclGather` where the loaded NCCL has it (2.28+), grouped send/recv
    /// otherwise. `output` is written on the root only; elsewhere any buffer
    /// will do (an empty one).
    ///
    /// Checks: `root` in range; on the root, output length = world size x
    /// input length; the same data type; the buffers as in `all_reduce`.
    fn gather(output: impl Output, input: impl Input, root: usize) => Op::Gather { root }, Pair { input, output };

    /// Scatters `input` of rank `root` (world size x output elements):
    /// rank `r` gets block `r` in `output` (`torch.distributed.scatter`,
    /// with the scatter list as one tensor).
    ///
    /// `ncclScatter` where the loaded NCCL has it (2.28+), grouped send/recv
    /// otherwise. `input` is read on the root only; elsewhere any buffer will
    /// do (an empty one).
    ///
    /// Checks: `root` in range; on the root, input length = world size x
    /// output length; the same data type; the buffers as in `all_reduce`.
    fn scatter(output: impl Output, input: impl Input, root: usize) => Op::Scatter { root }, Pair { input, output };
}

/// An iterator with a known length, for the list checks.
struct ExactLen<I> {
    inner: I,
    len: usize,
}

impl<'a, I: Iterator<Item = BufferDesc<'a>>> Iterator for ExactLen<I> {
    type Item = BufferDesc<'a>;
    fn next(&mut self) -> Option<Self::Item> {
        let item = self.inner.next()?;
        self.len -= 1;
        Some(item)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.len, Some(self.len))
    }
}

impl<'a, I: Iterator<Item = BufferDesc<'a>>> ExactSizeIterator for ExactLen<I> {}
