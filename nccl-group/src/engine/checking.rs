//! The collective check on the group's side
//! ([`GroupOptions::collective_checks`](crate::GroupOptions::collective_checks),
//! [`crate::diagnostics::checks`]): which operations are fingerprinted, the deadline
//! of the wait, and how a failed check fails the group.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::diagnostics::analysis::Issued;
use crate::diagnostics::checks::{Checked, Stop};
use crate::engine::failing::Finish;
use crate::engine::group::ProcessGroup;
use crate::engine::issue::OpInfo;
use crate::engine::key::CommKey;
use crate::error::Mismatch;
use crate::error::{GroupError, Result};
use crate::failure::FailureCause;

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
        let now = Instant::now();
        let deadline = now
            .checked_add(self.op_timeout)
            .unwrap_or_else(|| now + LONGEST_WAIT);
        let stop = match checker.check(fingerprint, deadline, &|| self.check_live()) {
            Ok(checked) => return Ok(Some(checked)),
            Err(stop) => stop,
        };
        let (cause, mismatch) = match stop {
            Stop::Closed(error) => return Err(error),
            Stop::Mismatch {
                divergence,
                first,
                last,
            } => {
                crate::diagnostics::trace::event!(error, group = %self.name(), %divergence, "the collective check found a mismatch");
                let cause = FailureCause::Mismatch {
                    divergence: (*divergence).clone(),
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
                };
                (cause, None)
            }
        };
        self.inner.fail(cause, None, Finish::Here);
        // This failure, or whatever ended the group first.
        let failure = match self.check_live() {
            Err(GroupError::Failed(failure)) => failure,
            Err(other) => return Err(other),
            Ok(()) => {
                return Err(GroupError::Closed {
                    name: self.name().to_string(),
                });
            }
        };
        Err(match mismatch {
            Some((divergence, checked)) => GroupError::Mismatch(Arc::new(Mismatch {
                divergence,
                checked,
                failure,
            })),
            None => GroupError::Failed(failure),
        })
    }
}
