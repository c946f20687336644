//! The group's side of its two checks that the ranks issue the same
//! collectives: the collective check before an operation is enqueued
//! ([`GroupOptions::collective_checks`](crate::GroupOptions::collective_checks),
//! [`crate::diagnostics::checks`]) and the mismatch check's thread and
//! verdicts ([`GroupOptions::mismatch_check`](crate::GroupOptions::mismatch_check),
//! [`crate::diagnostics::fingerprints`]): which operations are fingerprinted, the
//! deadline of the waits, and how a failed check fails the group.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::diagnostics::analysis::Issued;
use crate::diagnostics::checks::{Checked, Stop};
use crate::diagnostics::analysis::Divergence;
use crate::diagnostics::fingerprints::spawn;
use crate::engine::failing::Finish;
use crate::engine::group::{FAILED, Inner, ProcessGroup};
use crate::engine::issue::OpInfo;
use crate::engine::key::CommKey;
use crate::error::{ErrorKind, Mismatch};
use crate::error::{GroupError, Result};
use crate::failure::{FailureCause, FoundBy};
use crate::protocols::FINGERPRINTS;

/// The longest a clean end of the group waits for the mismatch check to
/// verify what was issued: the other ranks publish within milliseconds of
/// issuing, so only a rank that never issued them makes it wait this long.
const SETTLE_BOUND: Duration = Duration::from_secs(10);

/// The longest wait of a check: an operation timeout past what `Instant`
/// can hold waits this long (about ten years).
const LONGEST_WAIT: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// Whether `info` on the communicators of `key` takes a collective
/// sequence number: every rank issues it, on the group's collective
/// communicators (not a pair's), and it is not sends and receives alone.
pub(crate) fn is_collective(info: &OpInfo, key: &CommKey) -> bool {
    matches!(key, CommKey::Collective(_)) && !info.point_to_point
}

impl ProcessGroup {
    /// Checks the operation `info` on `key` before it is enqueued, when
    /// the check is on and it is a collective: the guard to keep once the
    /// flight recorder numbered it (`None`: nothing to keep).
    ///
    /// # Errors
    /// [`GroupError::Mismatch`] (the group failed), the group's failure
    /// when the other ranks' fingerprints did not come in time, or the
    /// error of a group that stopped meanwhile.
    pub(crate) fn check_collective(
        &self,
        info: &OpInfo,
        key: &CommKey,
    ) -> Result<Option<Checked<'_>>> {
        let Some(checker) = &self.inner.checks else {
            return Ok(None);
        };
        if !is_collective(info, key) {
            return Ok(None);
        }
        let fingerprint = Issued::described(
            0,
            info.op,
            info.dtype,
            info.count,
            info.peer,
            info.reduction,
        );
        let stop = match checker.check(fingerprint, self.deadline(), &|| self.check_live()) {
            Ok(checked) => return Ok(Some(checked)),
            Err(stop) => stop,
        };
        Err(self.inner.stopped(stop, FoundBy::CollectiveCheck))
    }

    /// The deadline of a check's wait begun now: the operation timeout on.
    fn deadline(&self) -> Instant {
        deadline_after(self.op_timeout)
    }
}

/// `timeout` from now, or [`LONGEST_WAIT`] where `Instant` cannot hold it.
fn deadline_after(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout)
        .unwrap_or_else(|| now + LONGEST_WAIT)
}

impl Inner {
    /// The group's error for a check that stopped, failing the group
    /// first (a no-op when it failed already): [`GroupError::Mismatch`]
    /// for a mismatch, the group's failure when the other ranks'
    /// fingerprints did not come, the error of a group that stopped
    /// meanwhile.
    fn stopped(self: &Arc<Self>, stop: Stop<GroupError>, found_by: FoundBy) -> GroupError {
        let (cause, mismatch) = match stop {
            Stop::Closed(error) => return error,
            Stop::Mismatch {
                divergence,
                first,
                last,
            } => {
                crate::diagnostics::trace::event!(error, group = %self.cache.membership().name, %divergence, "a mismatch check found a mismatch");
                let cause = FailureCause::Mismatch {
                    divergence: (*divergence).clone(),
                    found_by,
                };
                (cause, Some((*divergence, (first, last))))
            }
            Stop::Incomplete {
                first,
                last,
                absent,
                waited,
                error,
            } => {
                let cause = FailureCause::CheckIncomplete {
                    first,
                    last,
                    absent,
                    waited,
                    error,
                    found_by,
                };
                (cause, None)
            }
        };
        self.fail(cause, None, Finish::Here);
        // This failure, or whatever ended the group first.
        let failure = match self.check_live() {
            Err(GroupError::Failed(failure)) => failure,
            Err(other) => return other,
            Ok(()) => {
                return GroupError::Closed {
                    name: self.cache.membership().name.clone(),
                };
            }
        };
        match mismatch {
            Some((divergence, checked)) => GroupError::Mismatch(Arc::new(Mismatch {
                divergence,
                checked,
                found_by,
                failure,
            })),
            None => GroupError::Failed(failure),
        }
    }

    /// Starts the mismatch check's thread, when the check is on: a
    /// divergence it finds fails the group.
    ///
    /// # Errors
    /// [`GroupError::MismatchCheckStart`]: the thread could not be started.
    pub(crate) fn start_mismatch_check(self: &Arc<Self>) -> Result<()> {
        let Some(fingerprints) = &self.fingerprints else {
            return Ok(());
        };
        let membership = self.cache.membership();
        let scope = membership.protocol(FINGERPRINTS)?;
        let group = Arc::downgrade(self);
        let on_verdict = Box::new(move |divergence: Box<Divergence>| {
            if let Some(inner) = group.upgrade() {
                let stop = Stop::Mismatch {
                    first: divergence.collective_seq,
                    last: divergence.collective_seq,
                    divergence,
                };
                let _ = inner.stopped(stop, FoundBy::MismatchCheck);
            }
        });
        spawn(
            Arc::clone(fingerprints),
            Arc::clone(&membership.store),
            scope,
            on_verdict,
        )
        .map_err(|source| GroupError::MismatchCheckStart { source })
    }

    /// The mismatch check once the group left its live state for `to`:
    /// after a failure it only answers reads ([`Inner::mismatch_instead`]),
    /// until the group is dropped or healed; otherwise its thread ends.
    pub(crate) fn stop_mismatch_check(&self, to: u8) {
        if let Some(fingerprints) = &self.fingerprints {
            match to {
                FAILED => fingerprints.group_failed(),
                _ => fingerprints.close(),
            }
        }
    }

    /// [`GroupChecks::verdict`]: the mismatch check's verdict on
    /// collective `seq`, waiting at most the operation timeout.
    pub(crate) fn mismatch_verdict(self: &Arc<Self>, seq: u64) -> Result<()> {
        let Some(fingerprints) = &self.fingerprints else {
            return Ok(());
        };
        let deadline = deadline_after(self.options().op_timeout);
        fingerprints
            .await_verdict(seq, deadline, &|| self.check_live())
            .map_err(|stop| match stop {
                Stop::Closed(error) => self.mismatch_instead(seq, error),
                stop => self.stopped(stop, FoundBy::MismatchCheck),
            })
    }

    /// [`GroupChecks::mismatch_instead`]: `error`, the failure a read of
    /// collective `seq` got, or the mismatch that caused it if the check
    /// finds one soon after the failure ([`failure_verdict`](crate::diagnostics::fingerprints::Fingerprints::failure_verdict)).
    pub(crate) fn mismatch_instead(&self, seq: u64, error: GroupError) -> GroupError {
        let (Some(fingerprints), Some(failure)) = (&self.fingerprints, error.failure()) else {
            return error;
        };
        if error.kind() == ErrorKind::Mismatch {
            return error;
        }
        match fingerprints.failure_verdict(seq) {
            Some(Stop::Mismatch {
                divergence,
                first,
                last,
            }) => GroupError::Mismatch(Arc::new(Mismatch {
                divergence: *divergence,
                checked: (first, last),
                found_by: FoundBy::MismatchCheck,
                failure: Arc::clone(failure),
            })),
            _ => error,
        }
    }

    /// Before the group ends cleanly (`destroy`): waits, at most
    /// [`SETTLE_BOUND`] or the operation timeout, until the mismatch check
    /// has verified every collective issued, so that their results stay
    /// readable after the group is gone; a mismatch found meanwhile fails
    /// the group.
    pub(crate) fn settle_mismatch_check(self: &Arc<Self>) {
        if let Some(fingerprints) = &self.fingerprints {
            let deadline = deadline_after(self.options().op_timeout.min(SETTLE_BOUND));
            if let Err(stop @ Stop::Mismatch { .. }) =
                fingerprints.settle(deadline, &|| self.check_live())
            {
                let _ = self.stopped(stop, FoundBy::MismatchCheck);
            }
        }
    }
}
