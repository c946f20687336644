//! Whether a group issues operations: the state behind
//! [`Lifecycle::suspend`](crate::Lifecycle::suspend) and
//! [`Lifecycle::resume`](crate::Lifecycle::resume), which every issue path
//! asks before it reaches a communicator (`comms_for`, a capture's begin, a
//! graph's replay). The procedure is in `suspending.rs`.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::error::{GroupError, Result};

/// Issuing: the group is not suspended.
const ACTIVE: u8 = 0;
/// A suspend waits for the pending operations and suspends: no new
/// operation is issued.
const SUSPENDING: u8 = 1;
/// Every communicator is suspended.
const SUSPENDED: u8 = 2;

/// Whether a group issues operations, and the turn of suspend and resume.
#[derive(Debug, Default)]
pub(crate) struct Suspension {
    state: AtomicU8,
    /// Held by a suspend or a resume for its whole length: one at a time.
    turn: Mutex<()>,
}

impl Suspension {
    /// `Ok` while the group issues; the refusal of `action` otherwise.
    #[inline]
    pub(crate) fn check(&self, name: &str, action: &'static str) -> Result<()> {
        if self.state.load(Ordering::Acquire) == ACTIVE {
            return Ok(());
        }
        Err(GroupError::Suspended {
            name: name.to_string(),
            action,
        })
    }

    /// Whether every communicator is suspended: the watchdog leaves them
    /// alone then (NCCL answers no health query on them).
    pub(crate) fn is_suspended(&self) -> bool {
        self.state.load(Ordering::Acquire) == SUSPENDED
    }

    /// The turn of one suspend or resume, held for its whole length.
    pub(crate) fn turn(&self) -> MutexGuard<'_, ()> {
        self.turn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A suspend begins: no new operation is issued from now on.
    pub(crate) fn begin(&self) {
        self.state.store(SUSPENDING, Ordering::Release);
    }

    /// Every communicator is suspended (or some are, after a failure part
    /// way: resume or abort then).
    pub(crate) fn mark_suspended(&self) {
        self.state.store(SUSPENDED, Ordering::Release);
    }

    /// A suspend that suspended nothing ends: the group issues again.
    pub(crate) fn abandon(&self) {
        let _ = self.state.compare_exchange(
            SUSPENDING,
            ACTIVE,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// Resumed: the group issues again.
    pub(crate) fn mark_active(&self) {
        self.state.store(ACTIVE, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_active_group_issues() {
        let suspension = Suspension::default();
        assert!(suspension.check("g", "issuing operations").is_ok());
        assert!(!suspension.is_suspended());
        for state in [SUSPENDING, SUSPENDED] {
            suspension.state.store(state, Ordering::Release);
            let error = suspension
                .check("g", "issuing operations")
                .expect_err("refused while suspending or suspended");
            assert_eq!(error.kind(), crate::error::ErrorKind::Suspended);
            let message = error.to_string();
            assert!(message.contains("\"g\" is suspended"), "{message}");
            assert!(message.contains("call resume on every rank before issuing operations"), "{message}");
        }
        assert!(suspension.is_suspended());
    }
}
