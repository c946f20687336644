//! The GPU memory the group's communicators hold
//! ([`Diagnostics::mem_stats`](crate::Diagnostics::mem_stats)): nccl-core's
//! [`MemStats`] of every cached communicator, summed per local device.

use std::collections::BTreeMap;
use std::sync::Arc;

use nccl_core::MemStats;

use crate::engine::local_comms::LocalComms;
use crate::error::Result;

/// The GPU memory the group's communicators hold on one local device
/// (`ncclCommMemStats`, NCCL 2.29.7): the sums of their
/// [`MemStats`], the collective ones and the send/recv pairs' alike.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceMemStats {
    /// The device's ordinal.
    pub device: usize,
    /// How many of the group's communicators are on it.
    pub communicators: usize,
    /// Their bytes, summed; [`MemStats::suspended`] when every one of
    /// them is suspended.
    pub stats: MemStats,
}

impl DeviceMemStats {
    /// The bytes a suspend releases: the memory that comes and goes with
    /// [`suspend`](crate::Lifecycle::suspend) and
    /// [`resume`](crate::Lifecycle::resume).
    pub fn dynamic_bytes(&self) -> u64 {
        self.stats.suspendable_bytes
    }
}

/// The memory of every communicator of `sets`, summed per device, ordered
/// by device; none for no communicator.
///
/// # Errors
/// nccl-core's: [`nccl_core::Error::Unsupported`] naming NCCL 2.29.7 on
/// an older libnccl, a communicator NCCL no longer holds (aborted).
pub(crate) fn per_device(sets: &[Arc<LocalComms>]) -> Result<Vec<DeviceMemStats>> {
    let mut devices: BTreeMap<usize, DeviceMemStats> = BTreeMap::new();
    for member in sets.iter().flat_map(|set| &set.members) {
        let stats = member.lock().core().mem_stats()?;
        let device = member.pool.device().ordinal();
        let sum = devices.entry(device).or_insert_with(|| DeviceMemStats {
            device,
            communicators: 0,
            stats: MemStats::default(),
        });
        let all_suspended = sum.communicators == 0 || sum.stats.suspended;
        sum.communicators += 1;
        sum.stats.suspendable_bytes += stats.suspendable_bytes;
        sum.stats.persistent_bytes += stats.persistent_bytes;
        sum.stats.total_bytes += stats.total_bytes;
        sum.stats.suspended = all_suspended && stats.suspended;
    }
    Ok(devices.into_values().collect())
}
