//! Waiting for nonblocking communicators: `ncclCommGetAsyncError`, polled
//! under a deadline, aborting the communicator past it.

use std::time::{Duration, Instant};

use nccl_sys::{ncclComm_t, ncclResult_t};

use super::Communicator;
use crate::error::{Error, Result, Status};
use crate::library::{check, check_accepted};

/// How long nonblocking waits poll `ncclCommGetAsyncError` back to back
/// without giving up the CPU: NCCL ends a nonblocking group on a thread it
/// starts for it, which at world size 2 and more takes tens of µs, and a
/// yield costs a system call per poll and may hand the core away.
const POLL_BUSY: Duration = Duration::from_micros(50);
/// How long they poll in all, yielding the CPU between polls after
/// [`POLL_BUSY`], before they start sleeping. NCCL's launch thread
/// sometimes takes a millisecond or more, and a sleep then costs far more
/// than its nominal length: the kernel's timer slack (50 µs by default)
/// is added to every one.
const POLL_SPIN: Duration = Duration::from_millis(10);
/// The first sleep between polls after that, doubling up to
/// [`POLL_INTERVAL`].
const POLL_FIRST_SLEEP: Duration = Duration::from_micros(50);
/// The longest sleep between polls of a nonblocking wait.
const POLL_INTERVAL: Duration = Duration::from_micros(500);

/// Waits for the nonblocking ones among `communicators`, under one
/// deadline: the longest of their timeouts, counted from now.
pub(super) fn wait_all_ready(
    communicators: &[impl std::borrow::Borrow<Communicator>],
    operation: &'static str,
) -> Result<()> {
    let started = Instant::now();
    communicators
        .iter()
        .map(std::borrow::Borrow::borrow)
        .filter(|c: &&Communicator| !c.blocking)
        .try_for_each(|c| c.wait_ready_since(operation, started))
}

impl Communicator {
    /// `ncclCommGetAsyncError`: `Ok(Status::Success)` when healthy,
    /// `Ok(Status::InProgress)` while a nonblocking call is still running,
    /// `Err` with the asynchronous error otherwise (a remote rank failed,
    /// a network error).
    ///
    /// Answers for a revoked communicator too: `InProgress` until the
    /// revoke has quiesced it.
    ///
    /// # Errors
    /// The asynchronous error, or [`Error::Aborted`].
    pub fn async_error(&self) -> Result<Status> {
        self.async_error_of(self.raw_for_management()?)
    }

    /// `ncclCommGetAsyncError` on `raw`, this communicator's handle while
    /// NCCL holds it (see `raw_held`).
    fn async_error_of(&self, raw: ncclComm_t) -> Result<Status> {
        let get = self.shared.lib.functions().ncclCommGetAsyncError()?;
        let mut state = ncclResult_t::ncclSuccess;
        // SAFETY: `raw` is live and `state` is writable.
        let result = unsafe { get(raw, &mut state) };
        check_accepted(self.shared.lib, "ncclCommGetAsyncError", result)?;
        check(
            self.shared.lib,
            "ncclCommGetAsyncError (asynchronous error)",
            state,
        )
    }

    /// Waits until a nonblocking call on this communicator has finished,
    /// at most the config's timeout; past it the communicator is aborted.
    ///
    /// # Errors
    /// The asynchronous error, or [`Error::Timeout`].
    pub fn wait_ready(&self, operation: &'static str) -> Result<()> {
        self.wait_ready_bounded(operation, None, self.timeout)
    }

    /// [`Communicator::wait_ready`] bounded by `timeout` (or the config's
    /// timeout, if shorter) instead, e.g. an operation's own deadline.
    ///
    /// # Errors
    /// The asynchronous error, or [`Error::Timeout`] (the communicator is
    /// then aborted).
    pub fn wait_ready_within(&self, operation: &'static str, timeout: Duration) -> Result<()> {
        self.wait_ready_bounded(operation, None, timeout.min(self.timeout))
    }

    /// [`Communicator::wait_ready`] with the timeout counted from `started`.
    fn wait_ready_since(&self, operation: &'static str, started: Instant) -> Result<()> {
        self.wait_ready_bounded(operation, Some(started), self.timeout)
    }

    /// Polls until the call is done, at most `timeout` from `started`
    /// (`None`: from the first poll that finds it in progress, so a call
    /// already done reads no clock).
    fn wait_ready_bounded(
        &self,
        operation: &'static str,
        mut started: Option<Instant>,
        timeout: Duration,
    ) -> Result<()> {
        // When the polls began: the first one that found the call in progress.
        let mut waiting: Option<Instant> = None;
        let mut pause = POLL_FIRST_SLEEP;
        loop {
            // Held rather than live: a revoke, suspend or resume is waited
            // for here too.
            let now = match self.raw_held().and_then(|raw| self.async_error_of(raw)) {
                Ok(Status::Success) => return Ok(()),
                // One clock read per poll, for the deadline and the pace.
                Ok(Status::InProgress) => Instant::now(),
                Err(error) => {
                    crate::trace::event!(warn, operation, rank = self.rank, %error, "a nonblocking communicator failed: aborting it");
                    let _ = self.shared.abort();
                    return Err(error);
                }
            };
            let waited = now.saturating_duration_since(*started.get_or_insert(now));
            if waited >= timeout {
                crate::trace::event!(
                    warn,
                    operation,
                    rank = self.rank,
                    waited = ?waited,
                    "a nonblocking communicator was not ready in time: aborting it"
                );
                let _ = self.shared.abort();
                return Err(Error::Timeout { operation, waited });
            }
            let polling = now.saturating_duration_since(*waiting.get_or_insert(now));
            if polling < POLL_BUSY {
                std::hint::spin_loop();
            } else if polling < POLL_SPIN {
                std::thread::yield_now();
            } else {
                std::thread::sleep(pause);
                pause = (pause * 2).min(POLL_INTERVAL);
            }
        }
    }
}
