//! Releasing a communicator's dynamic GPU memory and getting it back
//! (`ncclCommSuspend`, `ncclCommResume`), and how much GPU memory it holds
//! (`ncclCommMemStats`): NCCL 2.29.7, for instance to free memory while a
//! model's weights are swapped.

use std::ffi::c_int;
use std::fmt;
use std::sync::atomic::Ordering;

use nccl_sys::{NCCL_SUSPEND_MEM, ncclCommMemStat_t, ncclResult_t};

use super::{Communicator, LIVE, REVOKED, SUSPENDED};
use crate::capabilities::{Capabilities, Capability};
use crate::error::{Error, Result, Status};
use crate::library::check;

/// The GPU memory a communicator holds (`ncclCommMemStats`, NCCL 2.29.7).
///
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
/// ([`Communicator::suspend`]).
///
/// It holds the communicator's only borrow, so nothing is issued on it until
/// [`Suspended::resume`].
///
/// Resuming is collective (NCCL waits at a barrier of every rank), so
/// dropping this guard cannot resume without risking a hang: a guard
/// dropped without `resume` leaves the communicator suspended, every later
/// call on it but [`Communicator::resume_in_place`] fails with
/// [`Error::Suspended`], and its drop aborts it.
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
    /// [`Suspended::resume`].
    ///
    /// Collective: every rank suspends. A nonblocking communicator is polled
    /// until done, at most its timeout.
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
    /// As [`Communicator::suspend_in_place`].
    pub fn suspend(&mut self) -> Result<Suspended<'_>> {
        self.suspend_in_place()?;
        Ok(Suspended { communicator: self })
    }

    /// [`Communicator::suspend`] without the guard, for a communicator
    /// shared behind a lock (a process group's): the communicator keeps
    /// its state, so until [`Communicator::resume_in_place`] every call on
    /// it but resume, [`Communicator::mem_stats`] and abort fails with
    /// [`Error::Suspended`], and dropping it still aborts it.
    ///
    /// # Errors
    /// [`Error::Unsupported`] naming 2.29.7 on an older libnccl; a
    /// communicator that is not live ([`Error::Suspended`] when it is
    /// suspended already); NCCL's failure, or a timeout (it is then
    /// aborted).
    pub fn suspend_in_place(&self) -> Result<()> {
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
        Ok(())
    }

    /// `ncclCommResume` (NCCL 2.29.7) of a communicator suspended by
    /// [`Communicator::suspend_in_place`] (or left suspended by a dropped
    /// [`Suspended`] guard): gets its memory back and makes it usable
    /// again.
    ///
    /// Collective: every rank resumes. A nonblocking communicator is polled
    /// until done, at most its timeout.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a communicator that is not
    /// suspended (nothing is called); [`Error::Aborted`] for one aborted
    /// since; NCCL's failure, or a timeout (the communicator is then
    /// aborted); after either it stays suspended.
    pub fn resume_in_place(&self) -> Result<()> {
        match self.shared.state.load(Ordering::Acquire) {
            SUSPENDED => {}
            LIVE | REVOKED => {
                return Err(Error::InvalidArgument {
                    argument: "communicator to resume",
                    expected: "a suspended communicator (suspend_in_place first)".to_string(),
                    given: format!(
                        "a {} communicator",
                        if self.is_revoked() { "revoked" } else { "live" }
                    ),
                });
            }
            state => return Err(Self::unusable(state)),
        }
        let lib = self.shared.lib;
        let resume = lib.functions().ncclCommResume()?;
        let raw = self.raw_held()?;
        self.device.bind_to_thread()?;
        // SAFETY: `raw` is held by NCCL (suspended, as checked above; an
        // abort from another thread is the window described on `Shared`).
        let result = unsafe { resume(raw) };
        let status = check(lib, "ncclCommResume", result)?;
        if status == Status::InProgress || !self.blocking {
            self.wait_ready("ncclCommResume")?;
        }
        if self.shared.claim_from(&[SUSPENDED], LIVE) {
            crate::trace::event!(debug, rank = self.rank, "communicator resumed");
            Ok(())
        } else {
            Err(Error::Aborted)
        }
    }

    /// Whether the communicator's memory is suspended now (by
    /// [`Communicator::suspend_in_place`], or a [`Suspended`] guard).
    pub fn is_suspended(&self) -> bool {
        self.shared.state.load(Ordering::Acquire) == SUSPENDED
    }

    /// `ncclCommMemStats` (NCCL 2.29.7): the GPU memory this communicator
    /// holds.
    ///
    /// Not collective. Answers while it is suspended too
    /// ([`MemStats::suspended`]).
    ///
    /// # Errors
    /// [`Error::Unsupported`] naming 2.29.7 on an older libnccl; a
    /// communicator that NCCL no longer holds (aborted, finalized); NCCL's
    /// failure (`ncclInvalidUsage` while its memory manager is disabled).
    pub fn mem_stats(&self) -> Result<MemStats> {
        let raw = self.raw_held()?;
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
    /// and makes it usable again.
    ///
    /// Collective: every rank resumes. A nonblocking communicator is polled
    /// until done, at most its timeout.
    ///
    /// # Errors
    /// NCCL's failure, or a timeout (the communicator is then aborted);
    /// after either the communicator stays suspended ([`Error::Suspended`]
    /// for every later call) until it is dropped.
    /// ([`Communicator::resume_in_place`] is this without the guard.)
    pub fn resume(self) -> Result<()> {
        self.communicator.resume_in_place()
    }

    /// [`Communicator::mem_stats`] while suspended.
    ///
    /// # Errors
    /// As [`Communicator::mem_stats`].
    pub fn mem_stats(&self) -> Result<MemStats> {
        self.communicator.mem_stats()
    }
}
