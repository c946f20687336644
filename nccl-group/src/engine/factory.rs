//! [`NcclFactory`]: creates the real communicators of a key, with a
//! deadline, as [`LocalComms`] of one [`Member`] per local device.

use std::sync::Arc;
use std::time::Instant;

use nccl_core::{Device, UniqueId};

use crate::engine::cache::OnceMap;
use crate::engine::comms::CommFactory;
use crate::engine::key::CommKey;
use crate::engine::local_comms::LocalComms;
use crate::engine::member::Member;
use crate::engine::pool::DevicePool;
use crate::error::Result;
use crate::health::watchdog::{Bounded, run_bounded};
use crate::options::{CommMode, GroupOptions};

/// Creates real NCCL communicators, with one [`DevicePool`] per device.
pub struct NcclFactory {
    /// Shared with the generations a heal makes of the group.
    pub(crate) pools: Arc<OnceMap<usize, DevicePool>>,
    pub(crate) options: GroupOptions,
}

impl NcclFactory {
    /// The streams and events of device `ordinal`, made on first use.
    pub(crate) fn pool(&self, ordinal: usize) -> Result<Arc<DevicePool>> {
        self.pools.get_or_create(&ordinal, |&ordinal| {
            DevicePool::new(
                Device::new(ordinal)?,
                self.options.streams_per_device,
                self.options.high_priority,
            )
        })
    }
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
        world_size: usize,
        first_rank: usize,
    ) -> Result<LocalComms> {
        let pools = key
            .devices()
            .iter()
            .map(|ordinal| self.pool(ordinal))
            .collect::<Result<Vec<_>>>()?;
        let devices: Vec<Device> = pools.iter().map(|pool| pool.device().clone()).collect();
        let config = self.options.comm_config()?;
        let comms = self.bounded("ncclCommInitRankConfig", move || {
            nccl_core::Communicator::init_local_ranks(&devices, world_size, id, first_rank, &config)
        })?;
        let members = comms
            .into_iter()
            .zip(pools)
            .map(|(core, pool)| Member::new(core, Arc::clone(&pool), pool.stream()))
            .collect::<Result<Vec<_>>>()?;
        Ok(LocalComms { members })
    }
}

impl NcclFactory {
    /// `call` (NCCL's `operation`, making communicators) within the
    /// group's timeout either way: a nonblocking one is polled, a
    /// blocking one runs on a helper thread that is waited for at most
    /// that long.
    fn bounded<T: Send + 'static>(
        &self,
        operation: &'static str,
        call: impl FnOnce() -> nccl_core::Result<T> + Send + 'static,
    ) -> Result<T> {
        if self.options.comm_mode == CommMode::Nonblocking {
            return Ok(call()?);
        }
        let started = Instant::now();
        match run_bounded("nccl-group-init", self.options.timeout, call) {
            Bounded::Returned(made) => Ok(made?),
            Bounded::Stalled => Err(nccl_core::Error::Timeout {
                operation,
                waited: started.elapsed(),
            }
            .into()),
        }
    }

    /// A new process's communicator of a grow (`ncclCommGrow` without a
    /// parent): rank `rank` of `world_size` on device `ordinal`, with the
    /// grow root's id, within the group's timeout.
    pub(crate) fn join_grow(
        &self,
        ordinal: usize,
        world_size: usize,
        id: UniqueId,
        rank: usize,
    ) -> Result<LocalComms> {
        let pool = self.pool(ordinal)?;
        let device = pool.device().clone();
        let config = self.options.comm_config()?;
        let core = self.bounded("ncclCommGrow", move || {
            nccl_core::Communicator::join_grow(device, world_size, &id, rank, &config)
        })?;
        let stream = pool.stream();
        Ok(LocalComms {
            members: vec![Member::new(core, pool, stream)?],
        })
    }
}
