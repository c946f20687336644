//! Suspending a group's communicators and resuming them
//! ([`Lifecycle::suspend`](crate::Lifecycle::suspend),
//! [`Lifecycle::resume`](crate::Lifecycle::resume)): NCCL 2.29.7's
//! `ncclCommSuspend` releases a communicator's dynamic GPU memory and
//! `ncclCommResume` gets it back, as an inference engine does between
//! bursts.
//!
//! The group's communicators are shared by every thread that issues, so
//! the state is the group's, not a guard's: `Suspension` says whether
//! the group issues, and every issue path asks it before it reaches a
//! communicator (`comms_for`, a capture's begin, a graph's replay). A
//! suspend refuses new operations first, waits (bounded) until every
//! operation already issued has ended and a clean check verified its end,
//! then suspends every cached communicator with each one's lock held, so
//! no enqueue overlaps; resume resumes them in the same order. Both are
//! collective, like NCCL's calls: every rank suspends and resumes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nccl_core::{Capabilities, Capability};

use crate::diagnostics::recorder::OpState;
use crate::engine::group::ProcessGroup;
use crate::engine::local_comms::{CommHealth, LocalComms};
use crate::error::{GroupError, Result};

/// How long a suspend sleeps between looks at its pending operations.
const PENDING_POLL: Duration = Duration::from_millis(1);

impl ProcessGroup {
    /// `Ok` while the group issues operations, else
    /// [`GroupError::Suspended`] for `action`.
    pub(crate) fn check_not_suspended(&self, action: &'static str) -> Result<()> {
        self.inner.suspension.check(self.name(), action)
    }

    /// [`Lifecycle::suspend`](crate::Lifecycle::suspend).
    pub(crate) fn suspend_communicators(&self) -> Result<()> {
        let suspension = &self.inner.suspension;
        let _turn = suspension.turn();
        self.check_live()?;
        self.check_not_suspended("suspending it again")?;
        let sets = self.inner.cache.all();
        if let Some(set) = sets.iter().find(|set| set.members.len() > 1) {
            return Err(GroupError::InvalidArgument {
                argument: "group to suspend",
                expected: "communicators of one device each (one GPU per process): NCCL suspends \
                           several devices of one process only together, which the group does not do"
                    .to_string(),
                given: format!("a communicator set over {} devices", set.members.len()),
            });
        }
        if let Some(set) = sets.first() {
            let library = set.members[0].lock().core().library();
            Capabilities::of(library).require(Capability::SuspendResume)?;
        }
        suspension.begin();
        let suspended = self.drain_and_suspend(&sets);
        // Nothing was suspended if the state is still `suspending`.
        suspension.abandon();
        suspended
    }

    /// Waits until no operation is pending and a clean check verified the
    /// ends, then suspends every communicator of `sets`, each locked (in
    /// store-key order, the same on every rank), and marks the group
    /// suspended before it lets go of them: the watchdog, which skips a
    /// suspended group, never reads the health of a suspended
    /// communicator (NCCL answers that with an error, which would fail
    /// the group).
    ///
    /// A failure part way leaves what it suspended suspended, and the group
    /// too: resume (on every rank) or abort.
    fn drain_and_suspend(&self, sets: &[Arc<LocalComms>]) -> Result<()> {
        let started = Instant::now();
        let bound = self.options().timeout;
        loop {
            self.check_live()?;
            if self.drained() {
                let guards: Vec<_> = sets.iter().map(|set| set.members[0].lock()).collect();
                // An operation that passed the check before the suspend
                // began may have enqueued since: it is pending now.
                if !self.has_pending_record() {
                    let suspended = guards
                        .iter()
                        .try_for_each(|guard| guard.core().suspend_in_place());
                    let any = guards.iter().any(|guard| guard.core().is_suspended());
                    if suspended.is_ok() || any {
                        self.inner.suspension.mark_suspended();
                    }
                    return Ok(suspended?);
                }
            }
            if started.elapsed() >= bound {
                return Err(GroupError::Timeout {
                    operation: "waiting for the group's pending operations to end before suspending \
                                (GroupOptions::timeout); wait for their Works, then suspend again",
                    waited: started.elapsed(),
                });
            }
            std::thread::sleep(PENDING_POLL);
        }
    }

    /// Whether every operation issued has ended and been verified: the
    /// watchdog tracks none, the flight recorder has none pending, and a
    /// clean check of every communicator passed after their ends (so a
    /// host read of their results needs no check while suspended).
    fn drained(&self) -> bool {
        self.inner.check_ended();
        self.inner.tracker.is_empty()
            && !self.has_pending_record()
            && matches!(self.inner.clean_check(), CommHealth::Clean)
    }

    /// Whether the flight recorder holds an operation still pending.
    fn has_pending_record(&self) -> bool {
        let (records, _) = self.inner.recorder.snapshot();
        records.iter().any(|record| record.state == OpState::Pending)
    }

    /// [`Lifecycle::resume`](crate::Lifecycle::resume).
    pub(crate) fn resume_communicators(&self) -> Result<()> {
        let suspension = &self.inner.suspension;
        let _turn = suspension.turn();
        self.check_live()?;
        if !suspension.is_suspended() {
            return Err(GroupError::InvalidArgument {
                argument: "group to resume",
                expected: "a suspended group (ProcessGroup::suspend first)".to_string(),
                given: format!("group {:?}, which is not suspended", self.name()),
            });
        }
        for set in self.inner.cache.all() {
            for member in &set.members {
                let comm = member.lock();
                if comm.core().is_suspended() {
                    comm.core().resume_in_place()?;
                }
            }
        }
        suspension.mark_active();
        Ok(())
    }
}
