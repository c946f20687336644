//! Ending a communicator: finalize (alone or several together), abort, and
//! the drop that destroys a finalized communicator and aborts any other.

use std::sync::atomic::Ordering;

use super::wait::wait_all_ready;
use super::{Communicator, DESTROYED, FINALIZED, LIVE};
use crate::error::Result;
use crate::group::Group;
use crate::library::{check_accepted, require_version};

impl Communicator {
    /// `ncclCommFinalize` (NCCL 2.14+): flushes outstanding work and tears
    /// down connections, together with the other ranks (collective).
    ///
    /// After it, every call fails with
    /// [`Error::Finalized`](crate::Error::Finalized), and drop destroys the
    /// communicator cleanly. A nonblocking communicator is polled until done or
    /// past its timeout.
    ///
    /// # Errors
    /// NCCL's failure, or a timeout (the communicator is then aborted).
    pub fn finalize(&self) -> Result<()> {
        self.start_finalize()?;
        if !self.blocking {
            self.wait_ready("ncclCommFinalize")?;
        }
        self.mark_finalized();
        crate::trace::event!(debug, rank = self.rank, "communicator finalized");
        Ok(())
    }

    /// Finalizes several communicators that this thread drives together,
    /// e.g. one per local GPU of the same communicator: blocking ones
    /// inside one NCCL group (one at a time, the first would wait for the
    /// others forever), nonblocking ones issued first and then polled
    /// under one deadline (the longest of their timeouts).
    ///
    /// # Errors
    /// NCCL's failure, or a timeout (the communicator that timed out is
    /// aborted; the caller decides about the others).
    pub fn finalize_together(communicators: &[&Communicator]) -> Result<()> {
        if let [communicator] = communicators {
            return communicator.finalize();
        }
        let group = Group::start()?;
        let started = communicators.iter().try_for_each(|c| c.start_finalize());
        let ended = group.end();
        started?;
        let _ = ended?;
        wait_all_ready(communicators, "ncclCommFinalize")?;
        communicators.iter().for_each(|c| c.mark_finalized());
        Ok(())
    }

    /// `ncclCommFinalize`, without waiting for a nonblocking one.
    fn start_finalize(&self) -> Result<()> {
        let lib = self.shared.lib;
        require_version(lib, 2, 14, || "ncclCommFinalize".to_string())?;
        let finalize = lib.functions().ncclCommFinalize()?;
        let raw = self.raw_for_call()?;
        // SAFETY: `raw` is live.
        check_accepted(lib, "ncclCommFinalize", unsafe { finalize(raw) })
    }

    fn mark_finalized(&self) {
        // Only a live communicator becomes finalized; an abort that raced
        // us wins and stays visible.
        let _ = self.shared.state.compare_exchange(
            LIVE,
            FINALIZED,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// Aborts this communicator now (`ncclCommAbort`).
    ///
    /// # Errors
    /// The error ncclCommAbort returned; the communicator is gone either way.
    pub fn abort(self) -> Result<()> {
        self.shared.abort()
    }
}

impl Drop for Communicator {
    fn drop(&mut self) {
        let shared = &self.shared;
        if shared.state.load(Ordering::Acquire) == FINALIZED && shared.claim(DESTROYED) {
            if let Ok(destroy) = shared.lib.functions().ncclCommDestroy() {
                crate::trace::event!(
                    debug,
                    rank = self.rank,
                    "destroying a finalized communicator"
                );
                // SAFETY: the claim made this the only teardown; the
                // communicator was finalized, so destroy does not wait on peers.
                let _ = unsafe { destroy(shared.raw) };
            }
        } else {
            // Not finalized: abort, which never waits for other ranks.
            // Errors cannot be reported from drop.
            let _ = shared.abort();
        }
    }
}
