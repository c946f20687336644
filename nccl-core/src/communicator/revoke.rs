//! The steps out of a lost rank: revoking a communicator (`ncclCommRevoke`,
//! NCCL 2.28.7) and shrinking it to the ranks left (`ncclCommShrink`,
//! NCCL 2.27.3).

use std::ffi::c_int;
use std::sync::atomic::{AtomicPtr, Ordering};

use nccl_sys::{NCCL_REVOKE_DEFAULT, NCCL_SHRINK_ABORT, NCCL_SHRINK_DEFAULT, ncclComm};

use super::{Communicator, LIVE, REVOKED};
use crate::capabilities::{Capabilities, Capability};
use crate::config::Config;
use crate::error::{Error, Result, ResultCode};
use crate::library::check_accepted;
use crate::ranks::to_c;

/// What [`Communicator::shrink`] does first with the parent's operations.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ShrinkMode {
    /// `NCCL_SHRINK_DEFAULT`: nothing runs on the parent, because it is
    /// healthy or was [`revoke`](Communicator::revoke)d.
    #[default]
    Default,
    /// `NCCL_SHRINK_ABORT`: stop the parent's in-flight operations first,
    /// for a parent with a failed peer on a library without revoke.
    AbortInFlight,
}

impl ShrinkMode {
    fn flags(self) -> c_int {
        let flags = match self {
            ShrinkMode::Default => NCCL_SHRINK_DEFAULT,
            ShrinkMode::AbortInFlight => NCCL_SHRINK_ABORT,
        };
        flags as c_int
    }
}

impl Communicator {
    /// `ncclCommRevoke` (NCCL 2.28.7): stops every operation in flight on
    /// this communicator without freeing it, and returns once NCCL reports
    /// it quiescent (a nonblocking communicator is polled, at most its
    /// timeout).
    ///
    /// Not collective: each rank revokes its own communicator.
    ///
    /// Afterwards the communicator issues no operation and cannot be
    /// finalized ([`Error::Revoked`]); it can still be
    /// [`shrink`](Communicator::shrink)ed, [`split`](Communicator::split)
    /// or [`grow`](Communicator::grow)n, though not with resource sharing
    /// (`splitShare`, `shrinkShare`), which NCCL disables while revoked.
    ///
    /// # Released by abort, never destroy
    /// A revoked communicator is always released with `ncclCommAbort`, by
    /// its drop, never with `ncclCommDestroy` (NCCL's `src/init.cc`):
    /// * NCCL forbids `ncclCommFinalize` after a revoke, and destroy is the
    ///   release of a finalized communicator;
    /// * destroy stops at `ncclCommEnsureReady`'s verdict, so a
    ///   communicator with an asynchronous error (a revoke that failed, a
    ///   proxy's network error) is refused and left allocated, where abort
    ///   ignores the verdict and always releases;
    /// * a destroy that meets a revoke still in flight runs
    ///   `ncclCommEnsureReady`'s abort branch a second time on the group
    ///   job the revoke freed: a use-after-free (NVIDIA/nccl PR 2251).
    ///   This method returns only once the revoke has quiesced.
    ///
    /// What no release can avoid until NCCL has that fix: a nonblocking
    /// communicator revoked while NCCL still linked a group job to it (its
    /// last operation failed, so `ncclCommGetAsyncError` never reported
    /// success) keeps a pointer to the freed job, which the abort reads
    /// too. Blocking communicators never link one.
    ///
    /// # Errors
    /// [`Error::Unsupported`] naming 2.28.7 on an older libnccl;
    /// [`Error::Aborted`], [`Error::Finalized`], [`Error::Revoked`] or
    /// [`Error::Suspended`] when it is no longer live; NCCL's failure, or
    /// a timeout (it is then aborted). After a failed revoke the
    /// communicator counts as revoked.
    pub fn revoke(&self) -> Result<()> {
        let lib = self.shared.lib;
        Capabilities::of(lib).require(Capability::Revoke)?;
        let revoke = lib.functions().ncclCommRevoke()?;
        if !self.shared.claim_from(&[LIVE], REVOKED) {
            return Err(Self::unusable(self.shared.state.load(Ordering::Acquire)));
        }
        let raw = self.shared.raw;
        // SAFETY: this call moved the state from LIVE to REVOKED, so the
        // handle is live: only an abort frees it, and one from another
        // thread is the window described on `Shared`; the flags are
        // NCCL_REVOKE_DEFAULT, the only value NCCL accepts.
        let result = unsafe { revoke(raw, NCCL_REVOKE_DEFAULT as c_int) };
        check_accepted(lib, "ncclCommRevoke", result)?;
        crate::trace::event!(debug, rank = self.rank, "communicator revoked");
        if !self.blocking {
            self.wait_ready("ncclCommRevoke")?;
        }
        Ok(())
    }

    /// `ncclCommShrink` (NCCL 2.27.3): a new communicator of this one's
    /// ranks without `exclude`, ranked densely in the old order.
    ///
    /// Every rank that is not excluded calls it with the same list; the
    /// excluded ones (failed, say) take no part. `config` of `None` inherits
    /// this communicator's options.
    ///
    /// For a parent whose peer failed, revoke it first where the library
    /// has [`Capability::Revoke`] and shrink with [`ShrinkMode::Default`];
    /// without revoke, shrink with [`ShrinkMode::AbortInFlight`]. Either
    /// way the parent stays this rank's to drop (which aborts it).
    ///
    /// Checks: at least one excluded rank, each in `0..world_size`, none
    /// twice, and not this rank.
    ///
    /// # Errors
    /// Bad ranks; [`Error::Unsupported`] naming 2.27.3 on an older libnccl;
    /// an invalid config, or one the library is too old for; NCCL's
    /// failure, or a timeout of a nonblocking shrink.
    pub fn shrink(
        &self,
        exclude: &[usize],
        mode: ShrinkMode,
        config: Option<&Config>,
    ) -> Result<Self> {
        if exclude.is_empty() {
            return Err(Error::InvalidArgument {
                argument: "exclude",
                expected: "at least one rank to leave out (NCCL refuses none)".to_string(),
                given: "no rank".to_string(),
            });
        }
        self.check_distinct_ranks(exclude, "exclude", "excluded rank")?;
        if exclude.contains(&self.rank) {
            return Err(Error::InvalidArgument {
                argument: "exclude",
                expected: "the ranks to leave out, which do not call shrink".to_string(),
                given: format!("this rank ({}) among them", self.rank),
            });
        }
        if let Some(config) = config {
            config.validate()?;
        }
        let lib = self.shared.lib;
        Capabilities::of(lib).require(Capability::Shrink)?;
        let shrink = lib.functions().ncclCommShrink()?;
        let mut raw_config = self.raw_config(config)?;
        let config_ptr = super::split::config_ptr(&mut raw_config);
        let mut excluded = exclude
            .iter()
            .map(|&rank| to_c("exclude", rank))
            .collect::<Result<Vec<c_int>>>()?;
        let count = to_c("exclude", excluded.len())?;
        let parent = self.raw_for_management()?;
        self.device.bind_to_thread()?;
        let child = AtomicPtr::<ncclComm>::new(std::ptr::null_mut());
        // SAFETY: `parent` is live (or revoked, which NCCL allows);
        // `excluded` holds `count` ranks (NCCL sorts them in place and
        // copies them for its job); `child.as_ptr()` is a writable
        // `ncclComm_t` (an `AtomicPtr` has the pointer's layout) that
        // outlives the call and the job that may write it, which
        // `adopt_child` waits for; `config_ptr` is null or points into
        // `raw_config`; all outlive the call.
        let result = unsafe {
            shrink(
                parent,
                excluded.as_mut_ptr(),
                count,
                child.as_ptr(),
                config_ptr,
                mode.flags(),
            )
        };
        check_accepted(lib, "ncclCommShrink", result)?;
        crate::trace::event!(debug, rank = self.rank, excluded = ?exclude, "ncclCommShrink issued");
        self.adopt_child(&child, true, config, "ncclCommShrink")?
            .ok_or_else(|| no_communicator("ncclCommShrink"))
    }
}

/// NCCL reported success but wrote no communicator for a rank that must
/// have one.
pub(super) fn no_communicator(function: &'static str) -> Error {
    Error::from_code(
        function,
        ResultCode(nccl_sys::ncclResult_t::ncclInternalError.0),
        Some("returned no communicator".to_string()),
        None,
    )
}
