//! The end of a group: [`ProcessGroup::abort`] from any thread, the
//! collective [`ProcessGroup::destroy`] and [`ProcessGroup::shutdown`];
//! and its pause: the collective [`ProcessGroup::suspend`] and
//! [`ProcessGroup::resume`] (`crate::engine::suspension`).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::engine::failing;
use crate::engine::group::{ABORTED, DESTROYED, FAILED, ProcessGroup};
use crate::engine::presence::Presence;
use crate::error::{GroupError, Result};
use crate::failure::AbortOutcome;
use crate::generations::subgroups::SubGroups;
use crate::health::watchdog::{Bounded, run_bounded};
use crate::options::CommMode;
use crate::protocols::SHUTDOWN;

impl ProcessGroup {
    /// Waits for the releases inherited from earlier generations and for
    /// a failed group's failure to end the release of its communicators
    /// (on the failure's threads), as long as that may take at most:
    /// `abort` on a group no longer live, and a heal returning an error.
    pub(crate) fn await_failure_abort(&self) -> Result<()> {
        self.inner.await_unfinished();
        if self.inner.state.load(Ordering::Acquire) != FAILED {
            return Ok(());
        }
        let Some(failure) = self.inner.failure.get() else {
            return Ok(());
        };
        let bound = (self.options().abort_timeout)
            .saturating_add(failing::EXCHANGE_WAIT)
            .saturating_add(Duration::from_secs(1));
        let started = Instant::now();
        match failure.wait_details(bound).map(|details| &details.abort) {
            Some(AbortOutcome::Aborted(_)) => Ok(()),
            Some(AbortOutcome::Stalled(waited)) => Err(GroupError::AbortStalled {
                name: self.name().to_string(),
                waited: *waited,
            }),
            None => Err(GroupError::AbortStalled {
                name: self.name().to_string(),
                waited: started.elapsed(),
            }),
        }
    }
}

/// How a group ends: [`abort`](Lifecycle::abort) it now,
/// [`destroy`](Lifecycle::destroy) it once its operations are done, or
/// [`shutdown`](Lifecycle::shutdown) with every rank, rank 0 last; and
/// how it pauses: [`suspend`](Lifecycle::suspend) releases its
/// communicators' GPU memory until [`resume`](Lifecycle::resume).
///
/// Sealed, implemented for [`ProcessGroup`] only, and in the
/// [`prelude`](crate::prelude), so `use nccl_group::prelude::*;` keeps
/// `group.destroy()` working.
pub trait Lifecycle: crate::sealed::Sealed {
    /// Aborts every communicator of the group, from any thread; calls
    /// blocked in NCCL return, and every pending [`Work`](crate::Work) fails.
    ///
    /// Afterwards every call fails with [`GroupError::Aborted`]; a new group
    /// may reuse the name. The flight recorder is dumped
    /// ([`GroupOptions::dump_dir`](crate::GroupOptions::dump_dir)). On a group
    /// that already failed, waits (bounded) until the failure's own abort of
    /// the communicators has finished; a no-op on a group already aborted or
    /// destroyed. NCCL finishes aborting a communicator only once every CUDA
    /// graph that captured it is destroyed: with a
    /// [`GroupGraph`](crate::GroupGraph) alive this reports
    /// [`GroupError::AbortStalled`], and the abort completes when the graph is
    /// dropped.
    ///
    /// # Errors
    /// [`GroupError::AbortStalled`]: NCCL's abort had not returned within
    /// [`GroupOptions::abort_timeout`](crate::GroupOptions::abort_timeout); it was left running on its own
    /// thread and the group is unusable all the same.
    fn abort(&self) -> Result<()>;

    /// Finalizes and destroys every communicator, together with the other
    /// processes (collective: all must call it).
    ///
    /// Afterwards every call fails with [`GroupError::Destroyed`]. A clean
    /// finalize waits for every operation, so the tensors of every operation
    /// stay readable afterwards; after a failed one, those of operations not
    /// yet seen to end refuse host reads (their results are not verified). Each
    /// finalize is bounded by
    /// [`GroupOptions::timeout`](crate::GroupOptions::timeout) (a blocking
    /// communicator's runs on a helper thread for that); past it the
    /// communicator is aborted.
    ///
    /// A group split into sub-groups ([`ProcessGroup::split_group`],
    /// `new_group`) is destroyed after them: NCCL finalizes each
    /// communicator on its own (no rank waits for another's destroy), so
    /// the ranks may destroy in any order and from any threads, as long as
    /// each rank destroys a group's sub-groups before the group.
    ///
    /// # Errors
    /// An aborted group, a suspended one ([`GroupError::Suspended`]:
    /// resume it first; the group stays live), graphs of the group still alive
    /// ([`GroupError::GraphsAlive`]: drop them first; the group stays
    /// live), sub-groups of it still live on this rank
    /// ([`GroupError::SubGroupsAlive`]: destroy them first; the group stays
    /// live), or a communicator failing to finalize in time (it is then
    /// aborted).
    fn destroy(&self) -> Result<()>;

    /// The end of a root group on every rank, in an order no rank can
    /// race: [`destroy`](Self::destroy) (after the group's sub-groups:
    /// refused while one is live), then every rank leaves the group's
    /// store so that rank 0, which hosts the TCP store of a group made
    /// from a launch ([`ProcessGroup::from_env`], [`GroupBuilder::config`](crate::GroupBuilder::config)), leaves
    /// last: its call returns once every rank has called `shutdown`
    /// (bounded by [`GroupOptions::timeout`](crate::GroupOptions::timeout)),
    /// so no rank still making a communicator, or reporting a failure,
    /// loses the store.
    ///
    /// Collective: every rank calls it. On an already destroyed group it only
    /// leaves; on a sub-group it is [`destroy`](Self::destroy) (the store's
    /// host is the root's rank 0, which the root's `shutdown` keeps).
    ///
    /// # Errors
    /// [`GroupError::GraphsAlive`], [`GroupError::SubGroupsAlive`] (nothing
    /// changed, nothing left); otherwise, after leaving, destroy's error
    /// (a failed or aborted group, a finalize that failed), or on rank 0
    /// [`StoreError::Absent`](crate::StoreError::Absent) naming the ranks
    /// that did not shut down in time.
    fn shutdown(&self) -> Result<()>;

    /// Releases the dynamic GPU memory of every communicator the group
    /// has made (`ncclCommSuspend`, NCCL 2.29.7), until
    /// [`resume`](Self::resume): vLLM's sleep mode, between an inference
    /// engine's bursts.
    ///
    /// Collective: every rank suspends, in the same order as its other calls on
    /// the group.
    ///
    /// New operations are refused at once; the operations already issued
    /// are waited for (bounded by
    /// [`GroupOptions::timeout`](crate::GroupOptions::timeout)) and their
    /// results verified, so their tensors stay readable. While suspended,
    /// every operation, capture, graph replay, registration, split and
    /// [`destroy`](Self::destroy) gets [`GroupError::Suspended`] without
    /// touching NCCL; [`abort`](Self::abort), dropping the group and
    /// [`mem_stats`](crate::Diagnostics::mem_stats) work. CUDA graphs
    /// captured before replay correctly after the resume. A group that has
    /// made no communicator yet has nothing to release: it is only marked
    /// suspended. Sub-groups are suspended on their own.
    ///
    /// # Errors
    /// [`GroupError::Suspended`] when it is suspended already; NCCL's
    /// [`Unsupported`](nccl_core::Error::Unsupported) naming 2.29.7 on an
    /// older libnccl (nothing changed); [`GroupError::InvalidArgument`]
    /// for a group with a communicator over several local devices
    /// ([`MultiDevice`](crate::MultiDevice)); [`GroupError::Timeout`]
    /// when the pending operations did not end in time (nothing was
    /// suspended; the group issues again); a group that is not live;
    /// NCCL's refusal (`NCCL_MEM_MANAGER_DISABLE`, communicators that
    /// share resources) or failure. After a failure part way, the
    /// communicators suspended stay so and the group stays suspended:
    /// [`resume`](Self::resume) on every rank, or abort.
    fn suspend(&self) -> Result<()>;

    /// Gives back the memory [`suspend`](Self::suspend) released
    /// (`ncclCommResume`) and lets the group issue again.
    ///
    /// Collective: every rank resumes.
    ///
    /// # Errors
    /// [`GroupError::InvalidArgument`] for a group that is not suspended;
    /// a group that is not live; NCCL's failure or a timeout (the group
    /// then stays suspended: abort it).
    fn resume(&self) -> Result<()>;
}

impl Lifecycle for ProcessGroup {
    fn abort(&self) -> Result<()> {
        if !self.inner.leave_live(ABORTED) {
            return self.await_failure_abort();
        }
        match self.inner.abort() {
            AbortOutcome::Aborted(_) => Ok(()),
            AbortOutcome::Stalled(waited) => Err(GroupError::AbortStalled {
                name: self.name().to_string(),
                waited,
            }),
        }
    }

    fn destroy(&self) -> Result<()> {
        self.check_not_suspended("destroying it")?;
        let subgroups = self.inner.live_subgroups();
        if !subgroups.is_empty() {
            return Err(GroupError::SubGroupsAlive {
                name: self.name().to_string(),
                subgroups,
            });
        }
        let graphs = self.inner.captures.live_graphs();
        if graphs > 0 {
            return Err(GroupError::GraphsAlive {
                name: self.name().to_string(),
                action: "destroyed",
                graphs,
            });
        }
        self.inner.settle_mismatch_check();
        self.inner.await_unfinished();
        if !self.inner.leave_live(DESTROYED) {
            return self.check_live();
        }
        let m = self.inner.cache.membership();
        if let Ok(presence) = Presence::of(m) {
            presence.withdraw(m.rank);
        }
        self.inner.cache.close();
        self.inner.check_ended();
        let options = self.options();
        // In store-key order, the same on every process, so blocking
        // finalizes meet their peers.
        let mut first_error = None;
        for comms in self.inner.cache.clear() {
            let finalized = match options.comm_mode {
                CommMode::Blocking => {
                    let started = Instant::now();
                    let finalizing = Arc::clone(&comms);
                    match run_bounded("nccl-group-finalize", options.timeout, move || {
                        finalizing.finalize()
                    }) {
                        Bounded::Returned(result) => result,
                        Bounded::Stalled => Err(GroupError::Timeout {
                            operation: "finalizing the group's communicators",
                            waited: started.elapsed(),
                        }),
                    }
                }
                CommMode::Nonblocking => comms.finalize(),
            };
            if let Err(error) = finalized {
                comms.abort();
                first_error.get_or_insert(error);
            }
        }
        match first_error {
            Some(error) => Err(error),
            None => {
                self.inner.verification.seal();
                Ok(())
            }
        }
    }

    fn shutdown(&self) -> Result<()> {
        let destroyed = match self.destroy() {
            Err(
                error @ (GroupError::GraphsAlive { .. }
                | GroupError::SubGroupsAlive { .. }
                | GroupError::Suspended { .. }),
            ) => {
                return Err(error);
            }
            Err(GroupError::Destroyed { .. }) => Ok(()),
            other => other,
        };
        if self.subgroup().is_some() {
            return destroyed;
        }
        let m = self.inner.cache.membership();
        let left = m
            .protocol(SHUTDOWN)
            .and_then(|scope| m.meeting(&scope, m.rank, m.world_size))
            .and_then(|meeting| Ok(meeting.leave(0)?));
        destroyed.and(left)
    }

    fn suspend(&self) -> Result<()> {
        self.suspend_communicators()
    }

    fn resume(&self) -> Result<()> {
        self.resume_communicators()
    }
}
