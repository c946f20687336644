//! Releasing a communicator's dynamic GPU memory and getting it back
//! (`ncclCommSuspend`, `ncclCommResume`), and how much GPU memory it holds
//! (`ncclCommMemStats`): NCCL 2.29.7, for instance to free memory while a
//! model's weights are swapped.

use std::ffi::c_int;
use std::fmt;
use std::sync::atomic::Ordering;

use nccl_sys::{NCCL_SUSPEND_MEM, ncclComm_t, ncclCommMemStat_t, ncclResult_t};

use super::{Communicator, LIVE, SUSPENDED};
use crate::capabilities::{Capabilities, Capability};
use crate::error::{Error, Result, Status};
use crate::library::check;

/// The GPU memory a communicator holds (`ncclCommMemStats`, NCCL 2.29.7).
/// Zero throughout when NCCL's memory manager tracks nothing for it.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct MemStats {
    /// Bytes a suspend releases (`ncclStatGpuMemSuspend`).
    pub suspendable_bytes: u64,
    /// Bytes that stay allocated while suspended (`ncclStatGpuMemPersist`).
    pub persistent_bytes: u64,
    /// Every byte NCCL tracks for it (`ncclStatGpuMemTotal`).
    pub total_bytes: u64,
    /// Whether its memory is suspended now (`ncclStatGpuMemSuspended`).
    pub suspended: bool,
}

/// A [`Communicator`] whose dynamic GPU memory is released
/// ([`Communicator::suspend`]). It holds the communicator's only borrow,
/// so nothing is issued on it until [`Suspended::resume`].
///
/// Resuming is collective (NCCL waits at a barrier of every rank), so
/// dropping this guard cannot resume without risking a hang: a guard
/// dropped without `resume` leaves the communicator suspended, every later
/// call on it fails with [`Error::Suspended`], and its drop aborts it.
#[must_use = "the communicator stays suspended until `resume` is called"]
pub struct Suspended<'a> {
    communicator: &'a mut Communicator,
}

impl fmt::Debug for Suspended<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Suspended")
            .field("communicator", &self.communicator)
            .finish()
    }
}

impl Communicator {
    /// `ncclCommSuspend` with `NCCL_SUSPEND_MEM` (NCCL 2.29.7): releases
    /// the communicator's dynamic GPU memory until
    /// [`Suspended::resume`]. Collective: every rank suspends. A
    /// nonblocking communicator is polled until done, at most its timeout.
    ///
    /// NCCL refuses (`ncclInvalidUsage`) while its memory manager is
    /// disabled (`NCCL_MEM_MANAGER_DISABLE`) and for communicators that
    /// share resources (`split_share`); the communicator is then still
    /// live. After any other failure it counts as suspended: NCCL may have
    /// released part of its memory.
    ///
    /// On a process that drives several ranks of one communicator, each
    /// rank's suspend waits for the others: that needs
    /// [`Capability::GroupedSuspendResume`] (2.30.3) and one thread per
    /// rank here.
    ///
    /// # Errors
    /// [`Error::Unsupported`] naming 2.29.7 on an older libnccl; a
    /// communicator that is not live; NCCL's failure, or a timeout (it is
    /// then aborted).
    pub fn suspend(&mut self) -> Result<Suspended<'_>> {
        let lib = self.shared.lib;
        Capabilities::of(lib).require(Capability::SuspendResume)?;
        let suspend = lib.functions().ncclCommSuspend()?;
        if !self.shared.claim_from(&[LIVE], SUSPENDED) {
            return Err(Self::unusable(self.shared.state.load(Ordering::Acquire)));
        }
        self.device.bind_to_thread()?;
        // SAFETY: this call moved the state from LIVE to SUSPENDED, so the
        // handle is live (an abort from another thread is the window
        // described on `Shared`); NCCL_SUSPEND_MEM is a flag it defines.
        let result = unsafe { suspend(self.shared.raw, NCCL_SUSPEND_MEM as c_int) };
        let suspended = check(lib, "ncclCommSuspend", result).and_then(|status| {
            if status == Status::InProgress || !self.blocking {
                self.wait_ready("ncclCommSuspend")?;
            }
            Ok(())
        });
        if let Err(error) = suspended {
            let refused = [
                ncclResult_t::ncclInvalidUsage,
                ncclResult_t::ncclInvalidArgument,
            ]
            .into_iter()
            .any(|code| error.nccl_code().is_some_and(|given| given.0 == code.0));
            if refused {
                // Refused before anything was released: still live.
                let _ = self.shared.claim_from(&[SUSPENDED], LIVE);
            }
            return Err(error);
        }
        crate::trace::event!(debug, rank = self.rank, "communicator suspended");
        Ok(Suspended { communicator: self })
    }

    /// `ncclCommMemStats` (NCCL 2.29.7): the GPU memory this communicator
    /// holds. Not collective.
    ///
    /// # Errors
    /// [`Error::Unsupported`] naming 2.29.7 on an older libnccl; a
    /// communicator that is not live; NCCL's failure (`ncclInvalidUsage`
    /// while its memory manager is disabled).
    pub fn mem_stats(&self) -> Result<MemStats> {
        self.mem_stats_of(self.raw_for_management()?)
    }

    fn mem_stats_of(&self, raw: ncclComm_t) -> Result<MemStats> {
        let lib = self.shared.lib;
        Capabilities::of(lib).require(Capability::MemStats)?;
        let stats = lib.functions().ncclCommMemStats()?;
        let read = |stat: ncclCommMemStat_t| -> Result<u64> {
            let mut value = 0_u64;
            // SAFETY: `raw` is held by NCCL (live, revoked or suspended) and
            // `value` is a writable u64 for the call.
            let result = unsafe { stats(raw, stat, &mut value) };
            check(lib, "ncclCommMemStats", result).map(|_| value)
        };
        Ok(MemStats {
            suspendable_bytes: read(ncclCommMemStat_t::ncclStatGpuMemSuspend)?,
            persistent_bytes: read(ncclCommMemStat_t::ncclStatGpuMemPersist)?,
            total_bytes: read(ncclCommMemStat_t::ncclStatGpuMemTotal)?,
            suspended: read(ncclCommMemStat_t::ncclStatGpuMemSuspended)? != 0,
        })
    }
}

impl Suspended<'_> {
    /// `ncclCommResume` (NCCL 2.29.7): gets the communicator's memory back
    /// and makes it usable again. Collective: every rank resumes. A
    /// nonblocking communicator is polled until done, at most its timeout.
    ///
    /// # Errors
    /// NCCL's failure, or a timeout (the communicator is then aborted);
    /// after either the communicator stays suspended ([`Error::Suspended`]
    /// for every later call) until it is dropped.
    pub fn resume(self) -> Result<()> {
        let communicator = self.communicator;
        let lib = communicator.shared.lib;
        let resume = lib.functions().ncclCommResume()?;
        let raw = communicator.raw_held()?;
        communicator.device.bind_to_thread()?;
        // SAFETY: `raw` is held by NCCL (suspended by this guard's
        // communicator, which nothing else borrows).
        let result = unsafe { resume(raw) };
        let status = check(lib, "ncclCommResume", result)?;
        if status == Status::InProgress || !communicator.blocking {
            communicator.wait_ready("ncclCommResume")?;
        }
        if communicator.shared.claim_from(&[SUSPENDED], LIVE) {
            crate::trace::event!(debug, rank = communicator.rank, "communicator resumed");
            Ok(())
        } else {
            Err(Error::Aborted)
        }
    }

    /// [`Communicator::mem_stats`] while suspended.
    ///
    /// # Errors
    /// As [`Communicator::mem_stats`].
    pub fn mem_stats(&self) -> Result<MemStats> {
        self.communicator
            .mem_stats_of(self.communicator.raw_held()?)
    }
}
