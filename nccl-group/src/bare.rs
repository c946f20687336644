//! A bare nccl-tensor [`Communicator`] from a launch configuration, for
//! programs that issue nccl-tensor's operations themselves, without a
//! process group.

use nccl_core::{Device, UniqueId};
use nccl_tensor::Communicator;

use crate::error::{GroupError, Result};
use nccl_rendezvous::RendezvousConfig;
use nccl_rendezvous::meet::Meeting;

/// The store key under which every bare communicator's keys live.
const SCOPE: &str = "communicator";

/// This process's communicator on `device`, at the place `config` gives
/// it: rank 0 makes the NCCL unique id and shares it through the store
/// `config` names (rank 0 hosts the TCP store until every rank has the
/// id), then every rank creates its communicator with it
/// ([`Communicator::new`]).
///
/// What torchrun's variables and 8 lines of store calls did by hand:
///
/// ```no_run
/// use nccl_group::prelude::*;
///
/// # fn main() -> Result<(), GroupError> {
/// let config = RendezvousConfig::from_env()?; // RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, ...
/// let device = Device::new(config.local_rank)?;
/// let comm = nccl_group::communicator(&config, &device, "tensor-parallel")?;
/// let stream = device.new_stream()?;
/// let mut grads = Tensor::from_host(&stream, &[1.0f32; 1024], &[1024])?;
/// let _ = comm.all_reduce(&mut grads, ReduceOp::Sum, &stream)?; // a blocking communicator: Success
/// # Ok(()) }
/// ```
///
/// `name` scopes the store keys of this communicator: give each
/// communicator of one run its own (a file store's keys outlive the
/// call). Every rank of the configuration calls this with the same
/// `name`. The wait for the id is bounded by `config.timeout`; NCCL's
/// own creation then waits for every rank, as [`Communicator::new`] does.
///
/// At the end of a run, every rank finalizes it
/// (`comm.core().finalize()`) before dropping it: a communicator dropped
/// unfinalized is aborted, the path meant for failures.
///
/// It lives here and not in nccl-tensor because the stores
/// (nccl-rendezvous) sit beside the tensor layer, not below it; nccl-group
/// re-exports nccl-tensor, so it is the one dependency this needs.
///
/// # Errors
/// An error of kind [`InvalidArgument`](crate::ErrorKind::InvalidArgument)
/// for a rank or world size NCCL cannot take (above `i32::MAX`, which
/// [`RendezvousConfig::new`] refuses, and [`Communicator::new`] for a
/// configuration built by hand);
/// [`GroupError::Store`] for a `name` that is empty or has `/`, a store
/// that cannot be reached, or an id that did not come in time (naming rank
/// 0; a failure rank 0 published ends the wait early); NCCL's or CUDA's
/// error from creating the id or the communicator.
pub fn communicator(
    config: &RendezvousConfig,
    device: &Device,
    name: &str,
) -> Result<Communicator> {
    let store = config.connect()?;
    let meeting = Meeting::new(store, config.rank, config.world_size)?
        .with_timeout(config.timeout)
        .scoped(SCOPE)?
        .scoped(name)?;
    let id = meeting.share_from(0, "unique-id", || {
        UniqueId::new()
            .map(|id| id.as_bytes().to_vec())
            .map_err(|error| {
                // The others stop waiting at once rather than at the timeout;
                // this rank reports its own error whether or not that worked.
                let _ = meeting.fail(&nccl_core::ErrorChain(&error).to_string(), 1);
                GroupError::from(error)
            })
    })?;
    let id = UniqueId::try_from_slice(&id)?;
    // Rank 0 hosts a TCP store: it leaves last, once every rank has the id.
    meeting.leave(0)?;
    Ok(Communicator::new(
        device.clone(),
        config.world_size,
        id,
        config.rank,
    )?)
}
