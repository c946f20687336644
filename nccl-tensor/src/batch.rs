//! Several operations issued as one NCCL group: [`Batch`]. Sends and
//! receives to and from any peers (`torch.distributed.batch_isend_irecv`),
//! collectives of different buffers and data types (PyTorch's coalescing
//! manager), or both. [`plan_batch`] makes every check as a pure function:
//! each operation's own ([`Plan::new`], as if alone, but inside a group,
//! so a send to this rank itself is allowed) and the batch's (no tensor
//! cell twice, sends to this rank itself paired with receives from it).

use std::cmp::Reverse;
use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::CudaStream;
use nccl_core::{Group, Op, Reduction, Status};

use crate::buffer::BufferDesc;
use crate::cell::TensorCell;
use crate::checks::{self, CommInfo};
use crate::communicator::Communicator;
use crate::error::{Error, Result};
use crate::operand::{Form, Input, Output, Pair, ReadOnly, Single};
use crate::plan::{Layout, Plan, rules};

pub use methods::BatchMethod;

mod methods;

/// The most operations one [`Batch`] holds.
///
/// Every operation's buffers stay borrowed (a cell stays locked) by a nested
/// call until the NCCL group is enqueued, so the stack grows with the batch:
/// about 0.8 KiB per buffer in a debug build, 0.15 KiB optimised (measured on a
/// model of the nesting), so this bound keeps two buffers per operation inside
/// a 2 MiB thread stack.
pub const MAX_BATCH_OPERATIONS: usize = 512;

/// One operation of a batch, as the checks see it (no addresses).
#[derive(Clone, Copy, Debug)]
pub struct BatchEntry<'r, 'a> {
    /// The operation.
    pub op: Op<'r>,
    /// Its buffers.
    pub layout: Layout<'a>,
    /// The tensor cells among its buffers, by identity (equal numbers are
    /// the same cell).
    pub cells: [Option<usize>; 2],
}

/// Every check of a batch of `entries` on a stream on device
/// `stream_device`: not more than [`MAX_BATCH_OPERATIONS`]; each
/// operation's own checks ([`Plan::new`] inside a group; a failure is
/// [`Error::InBatch`] with its position); no tensor cell used twice
/// ([`Error::CellTwiceInBatch`]: its lock would be taken twice); sends to
/// this rank itself paired in order with receives from it, of the same
/// length and data type ([`Error::UnpairedSelfExchange`],
/// [`Error::SelfExchangeMismatch`]: NCCL would wait forever for the other
/// half).
///
/// Returns each operation's plan, in order.
///
/// # Errors
/// The first failed check.
pub fn plan_batch<'r>(
    info: &CommInfo,
    stream_device: usize,
    entries: &[BatchEntry<'r, '_>],
) -> Result<Vec<Plan<'r>>> {
    if entries.len() > MAX_BATCH_OPERATIONS {
        return Err(Error::BatchTooLong {
            given: entries.len(),
            max: MAX_BATCH_OPERATIONS,
        });
    }
    let grouped = CommInfo {
        in_group: true,
        ..*info
    };
    let plans = entries
        .iter()
        .enumerate()
        .map(|(index, entry)| {
            Plan::new(entry.op, &grouped, &entry.layout, stream_device).map_err(|error| {
                Error::InBatch {
                    index,
                    error: Box::new(error),
                }
            })
        })
        .collect::<Result<Vec<_>>>()?;
    cells_once(entries)?;
    self_exchanges_pair(info.rank, &plans)?;
    Ok(plans)
}

/// No cell in two operations, or as both buffers of one.
fn cells_once(entries: &[BatchEntry<'_, '_>]) -> Result<()> {
    let mut seen: Vec<(usize, usize)> = entries
        .iter()
        .enumerate()
        .flat_map(|(index, entry)| entry.cells.iter().flatten().map(move |&cell| (cell, index)))
        .collect();
    seen.sort_unstable();
    let Some(&[(_, first), (_, second)]) = seen.windows(2).find(|pair| pair[0].0 == pair[1].0)
    else {
        return Ok(());
    };
    if first == second {
        // Both buffers of one operation: the error it gets alone.
        let op = entries.get(first).map_or("batch", |entry| entry.op.name());
        return Err(Error::InBatch {
            index: first,
            error: Box::new(Error::AliasedCells { op }),
        });
    }
    Err(Error::CellTwiceInBatch { first, second })
}

/// The k-th send to this rank itself matches the k-th receive from it
/// (each plan already checked its own peer).
fn self_exchanges_pair(rank: usize, plans: &[Plan<'_>]) -> Result<()> {
    let to_self = |sending: bool| {
        plans
            .iter()
            .enumerate()
            .filter(move |(_, plan)| match plan.op {
                Op::Send { peer } => sending && peer == rank,
                Op::Recv { peer } => !sending && peer == rank,
                _ => false,
            })
    };
    for ((send, out), (recv, into)) in to_self(true).zip(to_self(false)) {
        if (out.count, out.dtype) != (into.count, into.dtype) {
            return Err(Error::SelfExchangeMismatch {
                send,
                recv,
                sent: out.count,
                sent_dtype: out.dtype,
                received: into.count,
                received_dtype: into.dtype,
            });
        }
    }
    let (sends, recvs) = (to_self(true).count(), to_self(false).count());
    if sends != recvs {
        return Err(Error::UnpairedSelfExchange { rank, sends, recvs });
    }
    Ok(())
}

/// One buffer of a batched operation, its access boxed so that buffers
/// of every type wait in one list.
trait Reach {
    fn desc(&self) -> BufferDesc<'_>;
    fn cell(&self) -> Option<usize>;
    /// Calls `then` with the address, valid on `stream` while it runs.
    fn reach(
        self: Box<Self>,
        stream: &Arc<CudaStream>,
        then: &mut dyn FnMut(*mut c_void) -> Result<Status>,
    ) -> Result<Status>;
}

struct Reading<I>(I);

impl<I: Input> Reach for Reading<I> {
    fn desc(&self) -> BufferDesc<'_> {
        self.0.desc()
    }
    fn cell(&self) -> Option<usize> {
        self.0.cell().map(TensorCell::lock_order)
    }
    fn reach(
        self: Box<Self>,
        stream: &Arc<CudaStream>,
        then: &mut dyn FnMut(*mut c_void) -> Result<Status>,
    ) -> Result<Status> {
        // The address is only read from: NCCL's send buffer.
        self.0.read(stream, |address| then(address.cast_mut()))
    }
}

struct Writing<O>(O);

impl<O: Output> Reach for Writing<O> {
    fn desc(&self) -> BufferDesc<'_> {
        self.0.desc()
    }
    fn cell(&self) -> Option<usize> {
        self.0.cell().map(TensorCell::lock_order)
    }
    fn reach(
        self: Box<Self>,
        stream: &Arc<CudaStream>,
        then: &mut dyn FnMut(*mut c_void) -> Result<Status>,
    ) -> Result<Status> {
        self.0.write(stream, then)
    }
}

/// The buffers of one operation of a [`Batch`], in any of the
/// [`Operands`](crate::Operands) forms: `Single(x).into()`,
/// `ReadOnly(x).into()`, `Pair { input, output }.into()`.
pub struct BatchOperands<'a> {
    form: Form,
    /// The single buffer, the read-only one, or a pair's input.
    first: Box<dyn Reach + 'a>,
    /// A pair's output.
    output: Option<Box<dyn Reach + 'a>>,
}

impl std::fmt::Debug for BatchOperands<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchOperands")
            .field("form", &self.form)
            .field("first", &self.first.desc())
            .field("output", &self.output.as_ref().map(|o| o.desc()))
            .finish()
    }
}

impl<'a, O: Output + 'a> From<Single<O>> for BatchOperands<'a> {
    fn from(Single(buffer): Single<O>) -> Self {
        Self {
            form: Form::Single,
            first: Box::new(Writing(buffer)),
            output: None,
        }
    }
}

impl<'a, I: Input + 'a> From<ReadOnly<I>> for BatchOperands<'a> {
    fn from(ReadOnly(buffer): ReadOnly<I>) -> Self {
        Self {
            form: Form::ReadOnly,
            first: Box::new(Reading(buffer)),
            output: None,
        }
    }
}

impl<'a, I: Input + 'a, O: Output + 'a> From<Pair<I, O>> for BatchOperands<'a> {
    fn from(Pair { input, output }: Pair<I, O>) -> Self {
        Self {
            form: Form::Pair,
            first: Box::new(Reading(input)),
            output: Some(Box::new(Writing(output))),
        }
    }
}

impl<'a> BatchOperands<'a> {
    fn entry<'r>(&self, op: Op<'r>) -> BatchEntry<'r, '_> {
        let layout = self.form.layout(
            rules(&op).layouts,
            self.first.desc(),
            self.output.as_ref().map(|output| output.desc()),
        );
        BatchEntry {
            op,
            layout,
            cells: [
                self.first.cell(),
                self.output.as_ref().and_then(|output| output.cell()),
            ],
        }
    }
}

/// Which of an operation's two addresses a buffer gives.
#[derive(Clone, Copy)]
enum Role {
    Send,
    Recv,
    Both,
}

/// A buffer waiting for its access, and where its address goes.
struct Waiting<'a> {
    part: usize,
    role: Role,
    reach: Box<dyn Reach + 'a>,
}

/// Each operation's (send, receive) addresses.
type Addresses = Vec<(*const c_void, *mut c_void)>;

/// Opens the accesses of `waiting` one inside the other (the last first),
/// noting each address, and calls `leaf` with every address once all are
/// open, so every buffer stays borrowed (and every cell locked) until the
/// group is enqueued.
fn nest(
    waiting: &mut Vec<Waiting<'_>>,
    addresses: &mut Addresses,
    stream: &Arc<CudaStream>,
    leaf: &mut dyn FnMut(&Addresses) -> Result<Status>,
) -> Result<Status> {
    let Some(Waiting { part, role, reach }) = waiting.pop() else {
        return leaf(addresses);
    };
    reach.reach(stream, &mut |address| {
        if let Some(slot) = addresses.get_mut(part) {
            match role {
                Role::Send => slot.0 = address.cast_const(),
                Role::Recv => slot.1 = address,
                Role::Both => *slot = (address.cast_const(), address),
            }
        }
        nest(waiting, addresses, stream, leaf)
    })
}

/// Operations issued together, in one NCCL group, on one communicator:
/// `torch.distributed.batch_isend_irecv` for sends and receives, and
/// PyTorch's coalescing manager for collectives.
///
/// Made by [`Communicator::batch`]; nothing is checked or enqueued until
/// [`Batch::enqueue`], which checks every operation and the batch
/// ([`plan_batch`]) before enqueueing any, so a bad argument leaves nothing
/// half-issued.
///
/// NCCL pairs a rank's sends to a peer, in order, with that peer's
/// receives from it: every rank lists its operations so that they pair.
/// A send to this rank itself is allowed (the batch is one group) when a
/// receive from itself of the same length and type pairs with it.
///
/// ```no_run
/// # fn ring(comm: &nccl_tensor::Communicator, stream: &std::sync::Arc<nccl_core::CudaStream>) -> nccl_tensor::Result<()> {
/// let (rank, world) = (comm.rank(), comm.world_size());
/// let outgoing = nccl_tensor::Tensor::<f32>::zeros(stream, &[1024])?;
/// let mut incoming = nccl_tensor::Tensor::<f32>::zeros(stream, &[1024])?;
/// let mut batch = comm.batch(stream);
/// batch.send(&outgoing, (rank + 1) % world);
/// batch.recv(&mut incoming, (rank + world - 1) % world);
/// let _ = batch.enqueue()?;
/// # Ok(()) }
/// ```
#[must_use = "a batch does nothing until it is enqueued"]
pub struct Batch<'a> {
    comm: &'a Communicator,
    stream: &'a Arc<CudaStream>,
    parts: Vec<(Op<'a>, BatchOperands<'a>)>,
}

impl std::fmt::Debug for Batch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("operations", &self.parts.len())
            .finish()
    }
}

impl Communicator {
    /// An empty [`Batch`] of operations to enqueue on `stream` in one
    /// NCCL group.
    pub fn batch<'a>(&'a self, stream: &'a Arc<CudaStream>) -> Batch<'a> {
        Batch {
            comm: self,
            stream,
            parts: Vec::new(),
        }
    }
}

impl<'a> Batch<'a> {
    /// Adds `op` on `operands` (checked by [`Batch::enqueue`]).
    ///
    /// The named methods ([`Batch::all_reduce`], [`Batch::send`], ...) are this
    /// with one operation each.
    pub fn push(&mut self, op: Op<'a>, operands: impl Into<BatchOperands<'a>>) -> &mut Self {
        self.parts.push((op, operands.into()));
        self
    }

    /// The number of operations.
    pub fn len(&self) -> usize {
        self.parts.len()
    }

    /// Whether the batch has no operation.
    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// Checks every operation and the batch ([`plan_batch`]), then
    /// enqueues them on the batch's stream inside one NCCL group.
    ///
    /// An empty batch, and operations with nothing to move, enqueue nothing.
    ///
    /// # Errors
    /// A failed check (nothing is enqueued), an aborted or finalized
    /// communicator, or NCCL's error.
    pub fn enqueue(self) -> Result<Status> {
        let stream = self.stream;
        self.issue(stream)
    }

    /// [`Batch::enqueue`] on `stream` instead, a stream on the same device
    /// (a process group's own NCCL stream, say).
    ///
    /// # Errors
    /// A stream on another device, or as [`Batch::enqueue`].
    pub fn enqueue_on(self, stream: &Arc<CudaStream>) -> Result<Status> {
        checks::stream(
            "batch",
            stream.context().ordinal(),
            self.comm.device().ordinal(),
        )?;
        self.issue(stream)
    }

    fn issue(self, stream: &Arc<CudaStream>) -> Result<Status> {
        let Batch {
            comm,
            stream: planned_on,
            parts,
        } = self;
        let plans = {
            let entries: Vec<_> = parts
                .iter()
                .map(|(op, operands)| operands.entry(*op))
                .collect();
            plan_batch(&comm.info(), planned_on.context().ordinal(), &entries)?
        };
        for plan in &plans {
            if let Some(reduction @ Reduction::PreMulSum(_)) = plan.op.reduction() {
                reduction.check_usable(&comm.core, plan.dtype)?;
            }
        }
        if plans.iter().all(|plan| plan.count == 0) {
            return Ok(Status::Success);
        }
        let mut waiting: Vec<Waiting<'_>> = Vec::with_capacity(2 * parts.len());
        for (part, (_, operands)) in parts.into_iter().enumerate() {
            let BatchOperands {
                form,
                first,
                output,
            } = operands;
            let role = match form {
                Form::Single => Role::Both,
                Form::ReadOnly | Form::Pair => Role::Send,
            };
            waiting.push(Waiting {
                part,
                role,
                reach: first,
            });
            if let Some(reach) = output {
                waiting.push(Waiting {
                    part,
                    role: Role::Recv,
                    reach,
                });
            }
        }
        // Cells are locked in one global order (the last popped first), so
        // two threads locking the same cells cannot deadlock.
        waiting.sort_by_key(|waiting| Reverse(waiting.reach.cell()));
        let mut addresses: Addresses = vec![(std::ptr::null(), std::ptr::null_mut()); plans.len()];
        nest(&mut waiting, &mut addresses, stream, &mut |addresses| {
            let group = Group::start()?;
            for (plan, &(send, recv)) in plans.iter().zip(addresses) {
                if plan.count > 0 {
                    // SAFETY: `plan` was made for the buffers whose
                    // addresses these are, every one of them open on
                    // `stream` (on the communicator's device: checked by
                    // the plans or by `enqueue_on`) until the group has
                    // been enqueued; its pre-multiplied sum, if any, was
                    // checked against this communicator above.
                    let _ = unsafe { comm.enqueue_plan(plan, send, recv, stream) }?;
                }
            }
            Ok(group.end()?)
        })
    }
}
