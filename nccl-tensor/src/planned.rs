//! The plan-then-enqueue path every operation takes:
//! [`Communicator::plan`] makes every check and binds the buffers and the
//! stream; [`Planned::enqueue`] issues the planned NCCL call (or, for an
//! all-to-all without `ncclAlltoAll`, grouped sends and receives).

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::CudaStream;
use nccl_core::{Call, Group, Op, Reduction, Status};

use crate::checks;
use crate::communicator::{AllToAllMethod, Communicator};
use crate::error::Result;
use crate::operand::Operands;
use crate::plan::{self, Plan};

impl Communicator {
    /// Plans `op` on `operands` with `stream`: every check of the
    /// operation ([`Plan::new`]: layout, stream, root or peer, buffers,
    /// lengths, reduction), one cell not passed as both input and output,
    /// and a pre-multiplied sum made on this communicator.
    ///
    /// Nothing is enqueued until [`Planned::enqueue`]; the operation methods
    /// below are `plan` followed by `enqueue`.
    ///
    /// # Errors
    /// The first failed check.
    #[inline]
    pub fn plan<'a, 'r, O: Operands>(
        &'a self,
        op: Op<'r>,
        operands: O,
        stream: &'a Arc<CudaStream>,
    ) -> Result<Planned<'a, 'r, O>> {
        operands.check_cells(op.name())?;
        let layout = operands.layout(plan::rules(&op).layouts);
        let plan = Plan::new(op, &self.info(), &layout, stream.context().ordinal())?;
        if let Some(reduction @ Reduction::PreMulSum(_)) = op.reduction() {
            reduction.check_usable(&self.core, plan.dtype)?;
        }
        Ok(Planned {
            comm: self,
            plan,
            operands,
            stream,
        })
    }

    /// Enqueues `plan` on the buffers at `send` and `recv`.
    ///
    /// # Safety
    /// `send` and `recv` address the buffers `plan` was made for, valid on
    /// `stream` (on this communicator's device) while the call enqueues
    /// and, through the buffers' stream tracking, until the work is done.
    /// A pre-multiplied sum in `plan.op` was made on this communicator for
    /// `plan.dtype` ([`Reduction::check_usable`]): [`Plan::new`] does not
    /// check that, and NCCL would use a reduction of another communicator
    /// (freed with it) as its own.
    pub(crate) unsafe fn enqueue_plan(
        &self,
        plan: &Plan<'_>,
        send: *const c_void,
        recv: *mut c_void,
        stream: &Arc<CudaStream>,
    ) -> Result<Status> {
        let call = Call {
            op: plan.op,
            send,
            recv,
            count: plan.count,
            dtype: plan.dtype,
        };
        if self.all_to_all == AllToAllMethod::SendRecv
            && matches!(plan.op, Op::AllToAll)
            && let Some(parts) = call.point_to_point_parts(self.core.rank(), self.core.world_size())
        {
            // SAFETY: each part lies within the planned buffers and
            // addresses a peer in range; the rest as below.
            return unsafe { self.issue_grouped(parts, stream) };
        }
        // SAFETY: `plan` made every check `issue_unchecked` leaves to its
        // caller but one: a pre-multiplied sum's communicator, which the
        // caller checked (this function's contract, as are the buffers).
        Ok(unsafe { self.core.issue_unchecked(call, stream) }?)
    }
}

impl Communicator {
    /// Issues `calls` in one NCCL group on `stream`, leaving out the empty
    /// ones (what an operation made of several sends and receives does).
    ///
    /// # Safety
    /// Each call passed the checks of a plan (peers in range, a data type
    /// the loaded NCCL knows) and its buffers are as
    /// [`Communicator::enqueue_plan`] requires; `stream` is on this
    /// communicator's device.
    pub(crate) unsafe fn issue_grouped<'r>(
        &self,
        calls: impl IntoIterator<Item = Call<'r>>,
        stream: &Arc<CudaStream>,
    ) -> Result<Status> {
        let group = Group::start()?;
        for call in calls {
            if call.count > 0 {
                // SAFETY: the caller's contract.
                let _ = unsafe { self.core.issue_unchecked(call, stream) }?;
            }
        }
        Ok(group.end()?)
    }
}

/// An operation whose arguments passed every check, bound to its buffers
/// and stream: [`Planned::enqueue`] issues it.
///
/// Made by [`Communicator::plan`].
#[derive(Debug)]
#[must_use = "a planned operation does nothing until it is enqueued"]
pub struct Planned<'a, 'r, O> {
    comm: &'a Communicator,
    plan: Plan<'r>,
    operands: O,
    stream: &'a Arc<CudaStream>,
}

impl<'r, O: Operands> Planned<'_, 'r, O> {
    /// What will be enqueued.
    pub fn plan(&self) -> &Plan<'r> {
        &self.plan
    }

    /// Enqueues the operation on the stream it was planned with.
    ///
    /// An operation with nothing to move (empty buffers) enqueues nothing.
    ///
    /// # Errors
    /// An aborted or finalized communicator, or NCCL's error.
    #[inline]
    pub fn enqueue(self) -> Result<Status> {
        let stream = self.stream;
        self.issue(stream)
    }

    /// Enqueues the operation on `stream` instead, a stream on the same
    /// device (a process group's own NCCL stream, say).
    ///
    /// # Errors
    /// A stream on another device, or as [`Planned::enqueue`].
    #[inline]
    pub fn enqueue_on(self, stream: &Arc<CudaStream>) -> Result<Status> {
        let device = self.comm.device().ordinal();
        checks::stream(self.plan.op.name(), stream.context().ordinal(), device)?;
        self.issue(stream)
    }

    #[inline]
    fn issue(self, stream: &Arc<CudaStream>) -> Result<Status> {
        let Planned {
            comm,
            plan,
            operands,
            ..
        } = self;
        if plan.count == 0 {
            return Ok(Status::Success);
        }
        operands.access(stream, |send, recv| {
            // SAFETY: `plan` was made for these operands, whose addresses
            // these are, valid on `stream` while `access` runs; the stream
            // is on the communicator's device (checked by the plan or by
            // `enqueue_on`); a pre-multiplied sum was checked against this
            // communicator when it was planned (`Communicator::plan`).
            unsafe { comm.enqueue_plan(&plan, send, recv, stream) }
        })
    }
}
