//! The group's side of the watchdog: what a tick checks, and how a group
//! fails: poison, bounded abort, the exchange of the ranks' progress and
//! last collectives, NCCL's RAS view, flight-recorder dump.

use std::sync::{Arc, PoisonError};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::diagnostics::analysis::Divergence;
use crate::diagnostics::ras::{RasLimits, RasReport};
use crate::diagnostics::recorder::records::{OpRecord, OpState, PeerProgress, lagging_ranks};
use crate::engine::group::{ABORTED, DESTROYED, FAILED, HEALED, Inner, LIVE};
use crate::engine::local_comms::CommHealth;
use crate::error::{GroupError, Result};
use crate::engine::presence::Presence;
use crate::engine::ras_beside::RasBeside;
use crate::engine::release::{Release, Unfinished, abort_bounded};
use crate::failure::{AbortOutcome, Failure, FailureCause, FailureDetails, FailurePolicy};
use crate::health::peers::{self, PeerReport};
use crate::health::verify::GroupChecks;
use crate::health::watchdog::{Verdict, Watched};
use crate::protocols::PROGRESS;

/// How long a failing rank waits, in all, for the reports of the other
/// ranks not known to have exited (`engine/presence.rs`).
pub(crate) const EXCHANGE_WAIT: Duration = Duration::from_secs(3);

/// What a failure learnt from the other ranks and from NCCL's RAS (empty
/// for an abort and for dumps on request).
#[derive(Clone, Debug, Default)]
pub(crate) struct Findings {
    pub(crate) peers: Vec<PeerProgress>,
    pub(crate) lagging: Vec<usize>,
    pub(crate) divergence: Option<Divergence>,
    pub(crate) ras: Option<RasReport>,
}

/// Where the slower part of a failure runs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Finish {
    /// On a thread of its own: the watchdog looks after every group of the
    /// process and must not wait for one.
    OwnThread,
    /// On the calling thread, which returns the failure only once the
    /// abort and the dump are done (a caller may exit on that error).
    Here,
}

/// Whether a termination asks the other ranks how far they got and what
/// they issued last, and NCCL's RAS service what it sees.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Exchange {
    /// The ranks through the store, bounded by [`EXCHANGE_WAIT`]; RAS
    /// bounded by [`RasLimits`].
    WithPeers,
    /// The ranks only: the termination runs on the watchdog's thread (no
    /// thread to spare, or a process about to abort), which looks after
    /// every group and must not wait for RAS too.
    PeersOnly,
    /// Not: an abort or a drop must not wait on other processes, and a
    /// creation timeout has no operation to ask about.
    No,
}

impl Inner {
    pub(crate) fn options(&self) -> &crate::options::GroupOptions {
        &self.cache.factory().options
    }

    /// `Ok` while the group is live, else why not.
    ///
    /// Every operation checks twice: the live case is inlined, the error
    /// made out of line.
    #[inline]
    pub(crate) fn check_live(&self) -> Result<()> {
        match self.state.load(Ordering::Acquire) {
            LIVE => Ok(()),
            state => Err(self.not_live(state)),
        }
    }

    /// Why a group in `state`, not live, refuses calls.
    #[cold]
    fn not_live(&self, state: u8) -> GroupError {
        let name = || self.cache.membership().name.clone();
        match state {
            ABORTED => GroupError::Aborted { name: name() },
            FAILED => GroupError::Failed(self.stored_failure()),
            HEALED => GroupError::Healed {
                name: name(),
                generation: self.cache.membership().generation,
                successor: self.successor.get().copied().unwrap_or_default(),
            },
            _ => GroupError::Destroyed { name: name() },
        }
    }

    /// The failure of a `FAILED` group: it is stored right after the
    /// state changes, so this waits for nanoseconds at most.
    fn stored_failure(&self) -> Arc<Failure> {
        loop {
            if let Some(failure) = self.failure.get() {
                return Arc::clone(failure);
            }
            std::thread::yield_now();
        }
    }

    /// Fails a live group (the watchdog's verdict, an operation left in
    /// flight by an error, a communicator not created in time); a no-op
    /// otherwise.
    ///
    /// Every pending operation fails at once; then the communicators are
    /// aborted (bounded), the ranks' progress exchanged and the flight recorder
    /// dumped, after which the failure's [`details`](Failure::details) are set.
    /// `finish` says where that slower part runs. With
    /// [`FailurePolicy::AbortProcess`] all of it runs here, before pending
    /// operations fail (nobody can act on an error before the dump is written),
    /// and the process aborts.
    pub(crate) fn fail(self: &Arc<Self>, cause: FailureCause, seq: Option<u64>, finish: Finish) {
        // No operation is stuck when creation or a split failed, and the
        // ranks that never joined are named already: nothing to ask the
        // others.
        // A heal asks its peers only for their progress: it does not wait
        // for RAS's view.
        let exchange = match cause {
            FailureCause::Creation { .. } | FailureCause::Split { .. } => Exchange::No,
            FailureCause::Healing => Exchange::PeersOnly,
            _ => Exchange::WithPeers,
        };
        if !self.leave_live(FAILED) {
            return;
        }
        // No clean check passes once the group is not live: the suspects
        // are final.
        let failure = self.new_failure(cause, seq, self.suspects());
        self.cache.close();
        crate::diagnostics::trace::event!(error, %failure, "the group failed: failing its pending operations, aborting its communicators");
        crate::diagnostics::nvtx::mark!(&self.cache.membership().name, "failed: {}", failure.cause);
        let _ = self.failure.set(Arc::clone(&failure));
        // What the calling thread may wait for: the watchdog's (finish on
        // a thread of its own) does not ask RAS.
        let here = match (finish, exchange) {
            (Finish::OwnThread, Exchange::WithPeers) => Exchange::PeersOnly,
            _ => exchange,
        };
        if self.options().on_failure == FailurePolicy::AbortProcess {
            self.finish_termination(&failure, here);
            eprintln!("nccl-group: aborting the process (FailurePolicy::AbortProcess): {failure}");
            std::process::abort();
        }
        self.fail_pending(&failure);
        if finish == Finish::OwnThread {
            let spawned = {
                let inner = Arc::clone(self);
                let failure = Arc::clone(&failure);
                std::thread::Builder::new()
                    .name("nccl-group-failure".to_string())
                    .spawn(move || {
                        let details = inner.terminate(&failure, exchange);
                        // It lets go of the group before the details wake a
                        // caller that may drop it and exit the process: the
                        // drop, which releases the communicators left (a
                        // revoked one is aborted then), must not race the
                        // exit here. Where the owner let go already, that
                        // release is bounded, so the details still come.
                        if Arc::strong_count(&inner) == 1 {
                            inner.abort_left();
                        }
                        drop(inner);
                        failure.set_details(details);
                    })
            };
            if spawned.is_ok() {
                return;
            }
        }
        // Here, or without a thread to spare.
        self.finish_termination(&failure, here);
    }

    pub(crate) fn new_failure(
        &self,
        cause: FailureCause,
        seq: Option<u64>,
        suspects: Vec<OpRecord>,
    ) -> Arc<Failure> {
        let m = self.cache.membership();
        let op = seq.and_then(|seq| self.recorder.get(seq));
        Arc::new(
            Failure::new(
                m.name.clone(),
                m.generation,
                m.rank,
                m.world_size,
                cause,
                op,
                suspects,
            )
            .in_subgroup(self.lineage.clone()),
        )
    }

    /// Marks the operations whose end no clean check has verified, and the
    /// collectives the mismatch check has not verified, as suspect in the
    /// flight recorder, and returns them.
    fn suspects(&self) -> Vec<OpRecord> {
        self.recorder.mark_suspect(|record, stamp| {
            let agreed = match (&self.fingerprints, record.collective_seq) {
                (Some(fingerprints), Some(n)) => fingerprints.agreed(n),
                _ => true,
            };
            agreed && self.verification.covers(stamp)
        })
    }

    /// One clean check of every communicator (`crate::health::verify`): `Clean`
    /// verifies every end seen before it.
    ///
    /// Not while the group is failing: the caller checks the state.
    pub(crate) fn clean_check(&self) -> CommHealth {
        let epoch = self.verification.begin();
        let health = CommHealth::of(&self.cache.all());
        if matches!(health, CommHealth::Clean) {
            self.verification.passed(epoch);
        }
        health
    }

    /// The last clean check, when the group ends without a failure (an
    /// abort, a drop, a destroy): the pending operations that have ended
    /// are seen first, so it verifies them (their tensors stay readable).
    pub(crate) fn check_ended(&self) {
        let ended = self.tracker.take_ended();
        let stamp = self.verification.stamp();
        let now = Instant::now();
        for (seq, gpu_time) in ended {
            self.recorder
                .finish(seq, OpState::Completed, now, stamp, gpu_time);
        }
        let _ = self.clean_check();
    }

    /// [`Inner::check_ended`], then the operations it could not verify,
    /// marked suspect (an abort, a drop).
    fn last_check(&self) -> Vec<OpRecord> {
        self.check_ended();
        self.suspects()
    }

    /// The first step after a failure or an abort: every pending operation
    /// fails with `failure`, so its waiters return at once.
    pub(crate) fn fail_pending(&self, failure: &Arc<Failure>) {
        for pending in self.tracker.drain() {
            pending.completion.fail(failure);
        }
        self.recorder.fail_pending(Instant::now());
    }

    /// The rest, once pending operations have failed: this rank's report
    /// is published for the others, RAS is asked (with a head start on the
    /// abort, `engine/ras_beside.rs`), the communicators' releases begin
    /// (the failure is then quiet), the other ranks' reports and RAS's
    /// answer are read while they run, the releases end (bounded), the
    /// flight recorder is dumped and the failure's details are set, as
    /// `exchange` asks.
    ///
    /// Returns how the abort went.
    fn finish_termination(&self, failure: &Arc<Failure>, exchange: Exchange) -> AbortOutcome {
        let details = self.terminate(failure, exchange);
        let abort = details.abort.clone();
        failure.set_details(details);
        abort
    }

    /// [`finish_termination`](Self::finish_termination) but for setting the
    /// failure's details, which it returns.
    fn terminate(&self, failure: &Arc<Failure>, exchange: Exchange) -> FailureDetails {
        let m = self.cache.membership();
        // The name was checked when the group was made: the scope exists.
        let progress = m.protocol(PROGRESS).ok();
        let asking = matches!(exchange, Exchange::WithPeers | Exchange::PeersOnly);
        if asking {
            self.raise_alarm(failure);
        }
        let mine = progress
            .filter(|_| asking && m.world_size > 1)
            .map(|scope| {
                let mine = self.report();
                peers::publish(&*m.store, &scope, &mine);
                (scope, mine)
            });
        // Asked before the release begins, answered beside it.
        let ras = match exchange {
            Exchange::WithPeers => self.ask_ras(&failure.cause),
            Exchange::PeersOnly | Exchange::No => None,
        };
        if asking && !self.peer_died() {
            self.hear_of_a_death();
        }
        let revoke = self.revokes(failure);
        let bound = self.options().abort_timeout;
        let mut release = Release::begin(&self.cache.all(), revoke);
        let quiet = release.wait_begun(bound);
        if quiet {
            failure.set_quiet();
        }
        let mut findings = Findings::default();
        if let Some((scope, mine)) = mine {
            let presence = Presence::of(m).ok();
            // The rank the liveness beat named is as good as gone: a
            // stopped process never reports.
            let unresponsive = failure.cause.unresponsive_rank();
            let gone = |rank| {
                unresponsive == Some(rank) || presence.as_ref().is_some_and(|p| p.gone(rank))
            };
            let reports = peers::gather(&*m.store, &scope, mine, m.world_size, EXCHANGE_WAIT, &gone);
            let stuck = failure.op.as_ref().and_then(|op| op.collective_seq);
            findings.peers = reports.iter().map(|r| r.progress.clone()).collect();
            failure.set_peers(findings.peers.clone());
            findings.lagging = lagging_ranks(stuck, &findings.peers, m.world_size, m.rank);
            findings.divergence = peers::divergence(&reports);
        }
        let abort = release.wait_ended(bound);
        // A slow revoke that began after all, while the reports came.
        if !quiet && release.all_begun() {
            failure.set_quiet();
        }
        findings.ras = ras.map(RasBeside::answer);
        crate::diagnostics::trace::event!(warn, group = %m.name, outcome = ?abort, revoke, "communicators released");
        let dump = self.options().dump_dir.as_deref().map(|dir| {
            let dump = self.dump(failure.to_string(), findings.clone());
            let written = self.write_dump(dir, &dump);
            crate::diagnostics::trace::event!(info, written = ?written, "flight recorder dumped");
            written
        });
        FailureDetails {
            abort,
            peers: findings.peers,
            lagging: findings.lagging,
            divergence: findings.divergence,
            ras: findings.ras,
            dump,
        }
    }

    /// Whether `failure` revokes the communicators rather than aborting
    /// them: a failure keeps what a heal can shrink, an abort keeps nothing.
    ///
    /// Not once the group is known to have lost a process
    /// ([`Inner::peer_died`]): NCCL's lost-peer error stays on the
    /// collective communicators of the ranks it told, where
    /// `ncclCommShrink` refuses them, so the heal re-creates whatever this
    /// rank keeps, and a revoke with a dead peer would only hold the heal
    /// up (it must end before the heal goes on; an abort need only begin).
    pub(crate) fn revokes(&self, failure: &Failure) -> bool {
        self.options().revoke_on_failure
            && failure.cause != FailureCause::Aborted
            && !self.peer_died()
    }

    /// This rank's progress and last collectives, for the other ranks.
    fn report(&self) -> PeerReport {
        let (last_enqueued, last_completed) = self.recorder.progress();
        let progress = PeerProgress {
            rank: self.cache.membership().rank,
            last_enqueued,
            last_completed,
        };
        PeerReport::new(progress, &self.recorder.snapshot().0)
    }

    /// NCCL's RAS view ([`crate::ras`]) asked for, or why there is none;
    /// `None` when [`GroupOptions::ras_report`](crate::GroupOptions::ras_report)
    /// is off.
    ///
    /// A failure the liveness beat found is not asked about: the beat
    /// named the rank already, and RAS would not have missed a process
    /// stopped for so short a time.
    fn ask_ras(&self, cause: &FailureCause) -> Option<RasBeside> {
        if !self.options().ras_report {
            return None;
        }
        let reason = if let Some(rank) = cause.unresponsive_rank() {
            format!(
                "not asked: the liveness beat named rank {rank} (RAS would not have missed it yet)"
            )
        } else if self.cache.all().is_empty() {
            "not asked: the group created no communicator, so NCCL's RAS may not run in this process"
                .to_string()
        } else {
            match nccl_core::version() {
                Ok(version) if version.at_least(2, 24) => {
                    return Some(RasBeside::ask(RasLimits::default()));
                }
                Ok(version) => {
                    format!("the loaded NCCL {version} has no RAS service (NCCL 2.24 and later)")
                }
                Err(_) => "no NCCL library is loaded".to_string(),
            }
        };
        Some(RasBeside::Answered(RasReport::unavailable(reason)))
    }

    /// Aborts the group from [`ProcessGroup::abort`](crate::ProcessGroup::abort):
    /// the state is already `ABORTED`.
    pub(crate) fn abort(&self) -> AbortOutcome {
        self.cache.close();
        crate::diagnostics::trace::event!(warn, group = %self.cache.membership().name, "aborting the group (ProcessGroup::abort)");
        crate::diagnostics::nvtx::mark!(&self.cache.membership().name, "abort");
        let suspects = self.last_check();
        let failure = self.new_failure(FailureCause::Aborted, self.tracker.oldest(), suspects);
        let _ = self.failure.set(Arc::clone(&failure));
        self.fail_pending(&failure);
        self.finish_termination(&failure, Exchange::No)
    }
}

/// Whether CUDA answered `error` because its driver is shutting down in
/// this process: the process is exiting with operations pending on a group
/// that was not dropped first (`std::process::exit`, or a group held past
/// `main` by another thread, a static or a leak; a group dropped fails its
/// pending operations itself).
pub(crate) fn cuda_is_shutting_down(error: &cudarc::driver::DriverError) -> bool {
    error.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_DEINITIALIZED
}

/// The cause of a failure for a communicator's asynchronous error: its
/// text, and NCCL's code kept as a code (a lost peer's `ncclRemoteError`).
fn async_error(error: &nccl_core::Error) -> FailureCause {
    FailureCause::AsyncError {
        error: nccl_core::ErrorChain(error).to_string(),
        nccl_code: error.nccl_code(),
    }
}

impl Watched for Inner {
    fn tick(self: Arc<Self>, now: Instant) {
        // A suspended communicator answers no health query: nothing is
        // pending on one, so there is nothing to watch.
        if self.state.load(Ordering::Acquire) != LIVE || self.suspension.is_suspended() {
            return;
        }
        if !self.tracker.is_empty() {
            // Polling an event while another thread captures a CUDA graph
            // in the global mode would invalidate that capture; this
            // thread opts out of it (once, and only once there is work to
            // poll, so the driver is initialised by then). Failing, it
            // polls all the same, as before graphs existed.
            let _ = nccl_core::exempt_thread_from_global_captures();
        }
        let verdict = self.tracker.scan(now, |seq, gpu_time| {
            let stamp = self.verification.stamp();
            self.recorder
                .finish(seq, OpState::Completed, now, stamp, gpu_time);
        });
        let (cause, seq) = match verdict {
            Some(Verdict::TimedOut { seq, ran, timeout }) => {
                (FailureCause::Timeout { timeout, ran }, Some(seq))
            }
            Some(Verdict::Broken { seq, error }) => {
                if cuda_is_shutting_down(&error) {
                    self.note_own_exit();
                }
                (
                    FailureCause::Cuda {
                        error: nccl_core::ErrorChain(&error).to_string(),
                    },
                    Some(seq),
                )
            }
            None => {
                let comms = self.cache.all();
                if let Some(blocked) = comms.iter().find_map(|c| c.blocked_enqueue(now)) {
                    let cause = FailureCause::EnqueueBlocked {
                        device: blocked.device,
                        timeout: blocked.timeout,
                        blocked: blocked.blocked,
                    };
                    (cause, None)
                } else if let CommHealth::Error(error) = self.clean_check() {
                    (async_error(&error), self.tracker.oldest())
                } else {
                    self.listen_for_alarm(now);
                    return;
                }
            }
        };
        crate::diagnostics::trace::event!(
            error,
            group = %self.cache.membership().name,
            seq = ?seq,
            cause = ?cause,
            "watchdog: failing the group"
        );
        self.fail(cause, seq, Finish::OwnThread);
    }

    fn serve_requests(self: Arc<Self>, now: Instant) {
        self.serve_dump_request(now);
    }
}

impl GroupChecks for Inner {
    fn check_now(self: Arc<Self>) -> Option<Result<()>> {
        if let Err(error) = self.check_live() {
            return Some(Err(error));
        }
        if self.suspension.is_suspended() {
            let name = &self.cache.membership().name;
            return Some(self.suspension.check(name, "checking a result"));
        }
        match self.clean_check() {
            CommHealth::Clean => Some(Ok(())),
            CommHealth::Busy => None,
            CommHealth::Error(error) => {
                self.fail(
                    async_error(&error),
                    self.tracker.oldest(),
                    Finish::OwnThread,
                );
                // This failure, or one that won the race to fail the group.
                Some(self.check_live())
            }
        }
    }

    fn verdict(self: Arc<Self>, seq: u64) -> Result<()> {
        self.mismatch_verdict(seq)
    }

    fn mismatch_instead(self: Arc<Self>, seq: u64, error: GroupError) -> GroupError {
        Inner::mismatch_instead(&self, seq, error)
    }
}

impl Drop for Inner {
    /// Fails what is still pending (its waiters get an error, not a hang)
    /// and aborts the communicators off this thread, bounded: dropping a
    /// group never blocks on other processes or on a stalled abort. Then
    /// waits, bounded, for the earlier generations' releases still ending.
    fn drop(&mut self) {
        self.stop_mismatch_check(DESTROYED);
        if self.state.load(Ordering::Acquire) == LIVE {
            self.cache.close();
            // Operations that have ended are verified by the last check
            // (their tensors stay readable); the others fail.
            let suspects = self.last_check();
            let failure = (!self.tracker.is_empty()).then(|| {
                let failure =
                    self.new_failure(FailureCause::Dropped, self.tracker.oldest(), suspects);
                for pending in self.tracker.drain() {
                    pending.completion.fail(&failure);
                }
                failure
            });
            let abort = self.abort_left();
            if let Some(failure) = failure {
                failure.set_details(FailureDetails {
                    abort,
                    peers: Vec::new(),
                    lagging: Vec::new(),
                    divergence: None,
                    ras: None,
                    dump: None,
                });
            }
        }
        self.await_unfinished();
    }
}

impl Inner {
    /// Aborts the communicators the cache still holds, taking them out of
    /// it, bounded by the abort timeout.
    fn abort_left(&self) -> AbortOutcome {
        abort_bounded(self.cache.clear(), self.options().abort_timeout)
    }

    /// Waits, bounded, for the earlier generations' releases this one
    /// inherited (`engine/release.rs`): before an end its caller may exit
    /// on.
    pub(crate) fn await_unfinished(&self) {
        let bound = self.options().abort_timeout.saturating_add(EXCHANGE_WAIT);
        self.take_unfinished().wait(bound);
    }

    /// The releases this generation inherited, taken out of it (to wait
    /// for, or to hand to its heir).
    pub(crate) fn take_unfinished(&self) -> Unfinished {
        std::mem::take(&mut *self.unfinished.lock().unwrap_or_else(PoisonError::into_inner))
    }
}
