//! Registering buffers with the group's communicators
//! (`ncclCommRegister`), for as long as the buffer lives.

use std::sync::Arc;

use cudarc::driver::{CudaEvent, CudaStream, DriverError};

use nccl_tensor::{Access, HoldsResult, NcclType, Registered, ResultCheck, SharedComm, Tensor};

use crate::devices::DeviceList;
use crate::engine::group::ProcessGroup;
use crate::engine::key::CommKey;
use crate::engine::work_buffers::WorkBuffers;
use crate::error::Result;

/// A tensor registered with a process group's communicator
/// ([`ProcessGroup::register`]): nccl-tensor's [`Registered`], sharing the
/// communicator with the group.
///
/// Pass it to the group's operations in place of the tensor
/// ([`ProcessGroup::all_reduce`] and the other one-device operations,
/// [`coalesced`](ProcessGroup::coalesced),
/// [`batch_isend_irecv`](ProcessGroup::batch_isend_irecv),
/// [`issue`](ProcessGroup::issue)); the [`Work`](crate::Work) hands it back.
///
/// Every process must pass registered buffers to an operation if any
/// does (NCCL's rule: mixing registered and unregistered buffers across
/// ranks in one call is undefined), as every process must issue matching
/// operations.
///
/// It keeps the communicator alive after the group is destroyed (a
/// finalized communicator still deregisters) or aborted (which freed the
/// registration); the communicator is freed when the last of them drops.
/// Dropping it waits for the device to finish the work queued with the
/// tensor (NCCL unmaps at once, not in stream order), deregisters under
/// the communicator's lock, then frees the tensor: dropping a `Work` that
/// holds one waits for the device. Inside a [`custom`](ProcessGroup::custom)
/// operation's closure, which holds that lock, registering is refused and
/// a registered tensor dropped there stays allocated (a leak, not a
/// deadlock).
pub type GroupRegistered<B> = Registered<Arc<SharedComm>, B>;

impl<B: WorkBuffers + HoldsResult> WorkBuffers for GroupRegistered<B> {
    fn order_after(&self, event: &CudaEvent) -> std::result::Result<(), DriverError> {
        (**self).order_after(event)
    }

    fn frees_on(&self, stream: &Arc<CudaStream>) -> bool {
        (**self).frees_on(stream)
    }

    fn is_settled_on(&self, stream: &Arc<CudaStream>, access: Access) -> bool {
        (**self).is_settled_on(stream, access)
    }

    fn set_producer(&mut self, check: Arc<dyn ResultCheck>) {
        HoldsResult::set_producer(self, check);
    }
}

impl ProcessGroup {
    /// Registers `tensor` (`ncclCommRegister`, NCCL 2.19+) with the
    /// group's collective communicator on the tensor's device: the one
    /// that collectives, [`coalesced`](Self::coalesced) batches and
    /// [`batch_isend_irecv`](Self::batch_isend_irecv) use on that device.
    ///
    /// [`send`](Self::send) and [`recv`](Self::recv) run on pair communicators,
    /// and the list forms (`*_multi`) on communicators of several devices,
    /// which do not see this registration (the operations still work, through
    /// NCCL's own buffers).
    ///
    /// NCCL uses a registration only when every buffer of an operation is
    /// registered; memory from [`Tensor::nccl_zeros`] (`ncclMemAlloc`) can
    /// be registered for every transport (where it matters:
    /// `docs/registration.md`). Registering is not collective in NCCL, but
    /// creating the communicator is: if the group has none on that device
    /// yet, every process must register (or run a collective there)
    /// together, as with a first operation.
    ///
    /// Dropping the [`GroupRegistered`] deregisters the tensor, then frees
    /// it; `into_inner` deregisters and hands it back.
    ///
    /// ```no_run
    /// use nccl_group::prelude::*;
    ///
    /// fn bucket(group: &ProcessGroup, stream: &std::sync::Arc<CudaStream>) -> Result<(), Box<dyn std::error::Error>> {
    ///     let grads = Tensor::<f32>::nccl_zeros(stream, &[1 << 20])?; // ncclMemAlloc
    ///     let grads = group.register(grads)?; // ncclCommRegister: a GroupRegistered<Tensor<f32>>
    ///     let grads = group.all_reduce(grads, ReduceOp::Avg, stream)?.wait()?;
    ///     let _grads: Tensor<f32> = grads.into_inner()?; // ncclCommDeregister
    ///     Ok(())
    /// }
    /// ```
    ///
    /// # Errors
    /// An aborted, failed or destroyed group, a failed rendezvous creating
    /// the communicator, a libnccl older than 2.19, or NCCL's refusal.
    pub fn register<T: NcclType>(&self, tensor: Tensor<T>) -> Result<GroupRegistered<Tensor<T>>> {
        self.check_live()?;
        let key = CommKey::Collective(DeviceList::one(tensor.device())?);
        let comms = self.comms_for(&key)?;
        Ok(Registered::shared(&comms.members[0].comm, tensor)?)
    }
}
