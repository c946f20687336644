//! The real communicators of a key: [`NcclFactory`] creates them, with a
//! deadline, and [`LocalComms`] holds one [`Member`] per local device.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use cudarc::driver::CudaStream;
use nccl_core::{AbortHandle, Config, Device, UniqueId};
use nccl_tensor::Communicator;

use super::{CommMode, GroupOptions};
use crate::cache::OnceMap;
use crate::comms::CommFactory;
use crate::error::Result;
use crate::key::CommKey;
use crate::pool::DevicePool;
use crate::watchdog::{Bounded, run_bounded};

/// One local device's communicator of a key, with its NCCL stream.
pub struct Member {
    pub(super) comm: Mutex<Communicator>,
    pub(super) abort: AbortHandle,
    pub(super) pool: Arc<DevicePool>,
    pub(super) stream: Arc<CudaStream>,
}

impl Member {
    /// The communicator, locked (NCCL calls on one communicator must not overlap).
    pub(super) fn lock(&self) -> MutexGuard<'_, Communicator> {
        self.comm.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The communicators of one key on this process, one per local device.
pub struct LocalComms {
    pub(super) members: Vec<Member>,
}

impl LocalComms {
    /// Aborts every communicator (a no-op for those already aborted).
    pub(super) fn abort(&self) {
        for member in &self.members {
            // An abort error leaves the communicator unusable anyway.
            let _ = member.abort.abort();
        }
    }

    /// The first asynchronous error of any communicator whose lock is free
    /// (a busy one is being used by an operation and is looked at next
    /// time: the watchdog never waits for a lock).
    pub(super) fn async_error(&self) -> Option<nccl_core::Error> {
        self.members.iter().find_map(|member| {
            let comm = member.comm.try_lock().ok()?;
            comm.core().async_error().err()
        })
    }

    /// Finalizes every communicator together (see
    /// [`nccl_core::Communicator::finalize_together`]).
    pub(super) fn finalize(&self) -> Result<()> {
        let guards: Vec<_> = self.members.iter().map(Member::lock).collect();
        let cores: Vec<&nccl_core::Communicator> = guards.iter().map(|c| c.core()).collect();
        Ok(nccl_core::Communicator::finalize_together(&cores)?)
    }
}

/// Creates real NCCL communicators, with one [`DevicePool`] per device.
pub struct NcclFactory {
    pub(super) pools: OnceMap<usize, DevicePool>,
    pub(super) options: GroupOptions,
}

impl CommFactory for NcclFactory {
    type Comms = LocalComms;

    fn unique_id(&self) -> Result<UniqueId> {
        Ok(UniqueId::new()?)
    }

    /// Communicators of the group's [`CommMode`], created within the
    /// group's timeout either way (a rank that never joins cannot hang
    /// this one): a nonblocking init is polled, a blocking one runs on a
    /// helper thread that is waited for at most that long.
    fn create(
        &self,
        key: &CommKey,
        id: UniqueId,
        world_size: i32,
        first_rank: i32,
    ) -> Result<LocalComms> {
        let pools = key
            .devices()
            .iter()
            .map(|ordinal| {
                self.pools.get_or_create(&ordinal, |&ordinal| {
                    DevicePool::new(
                        Device::new(ordinal)?,
                        self.options.streams_per_device,
                        self.options.high_priority,
                    )
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let devices: Vec<Device> = pools.iter().map(|pool| pool.device().clone()).collect();
        let timeout = self.options.timeout;
        let comms = match self.options.comm_mode {
            CommMode::Blocking => {
                let started = Instant::now();
                let init = move || {
                    let config = Config::new().blocking(true);
                    nccl_core::Communicator::init_local_ranks(
                        &devices, world_size, id, first_rank, &config,
                    )
                };
                match run_bounded("nccl-group-init", timeout, init) {
                    Bounded::Returned(comms) => comms?,
                    Bounded::Stalled => {
                        return Err(nccl_core::Error::Timeout {
                            operation: "ncclCommInitRankConfig",
                            waited: started.elapsed(),
                        }
                        .into());
                    }
                }
            }
            CommMode::Nonblocking => {
                let config = Config::new().blocking(false).timeout(timeout);
                nccl_core::Communicator::init_local_ranks(
                    &devices, world_size, id, first_rank, &config,
                )?
            }
        };
        let members = comms
            .into_iter()
            .zip(pools)
            .map(|(core, pool)| {
                let abort = core.abort_handle();
                Ok(Member {
                    comm: Mutex::new(Communicator::from_core(core)?),
                    abort,
                    stream: pool.stream(),
                    pool,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(LocalComms { members })
    }
}
