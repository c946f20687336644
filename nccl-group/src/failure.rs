//! Why a group failed, as the watchdog (or an abort) reports it.

use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use crate::diagnostics::analysis::Divergence;
use crate::diagnostics::ras::RasReport;
use crate::diagnostics::recorder::records::{OpRecord, PeerProgress};
use crate::lineage::SubGroup;

mod cause;

pub(crate) use cause::Collectives;
pub use cause::{FailureCause, FoundBy};

/// The longest single sleep of [`Failure::wait_details`]: it sleeps again
/// until its deadline, so a timeout of any length is waited out in these.
const LONGEST_SLEEP: Duration = Duration::from_secs(3600);

/// What to do when the watchdog fails a group.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Abort the group's communicators and return
    /// [`GroupError::Failed`](crate::GroupError::Failed) from every later
    /// call and every waiter;
    /// the process keeps running and may create a new group.
    #[default]
    ReturnErrors,
    /// Abort the group's communicators, write the flight recorder, print
    /// the failure to stderr and abort the process, for launchers that
    /// restart failed workers.
    ///
    /// Nothing returns an error first, so nothing can exit before the dump is
    /// written.
    AbortProcess,
}

/// How the abort of the group's communicators went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AbortOutcome {
    /// Every communicator was aborted, in this long.
    Aborted(Duration),
    /// The abort had not returned after this long; it was left running on
    /// its own thread so the caller is not stuck with it.
    Stalled(Duration),
}

/// What was learnt after the failure: the abort, the other ranks'
/// progress and last collectives, NCCL's RAS view and the flight
/// recorder's dump.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct FailureDetails {
    /// How the abort went.
    pub abort: AbortOutcome,
    /// Every rank's progress that was exchanged through the store.
    pub peers: Vec<PeerProgress>,
    /// Ranks that had not issued the collective this rank was stuck on, or
    /// that did not answer: the likely culprits.
    pub lagging: Vec<usize>,
    /// The first collective that the ranks which answered did not issue
    /// alike, among the last ones every one of them issued (each
    /// publishes its last 128): which rank issued what as which
    /// collective.
    ///
    /// `None`: they agree (a rank that issued fewer is in `lagging`), or no
    /// rank was asked.
    pub divergence: Option<Divergence>,
    /// NCCL's RAS view of the job's dead and unresponsive ranks, or why
    /// there is none.
    ///
    /// `None`: not asked: after an abort, with
    /// [`GroupOptions::ras_report`](crate::GroupOptions::ras_report) off, or
    /// when the watchdog's own thread finished the failure (under
    /// [`FailurePolicy::AbortProcess`], or when no thread could be started),
    /// which must not wait for RAS.
    pub ras: Option<RasReport>,
    /// Where the flight recorder's dump was written, or why it was not
    /// (`None`: dumps are off).
    pub dump: Option<Result<PathBuf, String>>,
}

/// A group's failure: which operation, why, and what was done about it.
///
/// [`GroupError::Failed`](crate::GroupError::Failed) carries it; its `Display`
/// is the full report.
#[derive(Debug)]
pub struct Failure {
    /// The group's name.
    pub group: String,
    /// The group instance's generation.
    pub generation: u64,
    /// This process's rank.
    pub rank: usize,
    /// The number of processes.
    pub world_size: usize,
    /// Why it failed.
    pub cause: FailureCause,
    /// The operation it failed on, as the flight recorder has it (`None`
    /// when no operation was involved, e.g. an asynchronous error between
    /// operations, or when the record was overwritten).
    pub op: Option<OpRecord>,
    /// The operations whose end was seen but not yet followed by a clean
    /// check of the communicators when the group failed, oldest first:
    /// they may have ended because a peer died, over partial data, so
    /// work the GPU ran on their results (a kernel queued after
    /// [`Work::wait`](crate::Work::wait)) read suspect values.
    ///
    /// Host reads of their tensors fail instead. The flight recorder marks them
    /// [`OpState::Suspect`](crate::OpState::Suspect).
    pub suspects: Vec<OpRecord>,
    /// Where the group sits in the group it was split from, for a
    /// sub-group ([`ProcessGroup::split_group`](crate::SubGroups::split_group)):
    /// the report names this rank's and the lagging ranks' global ranks.
    pub subgroup: Option<Arc<SubGroup>>,
    details: OnceLock<FailureDetails>,
    /// Set once every communicator's release has begun
    /// (`engine/release.rs`): revoked, or its abort called, whose first
    /// step sets the flags that stop its kernels.
    quiet: OnceLock<()>,
    /// The ranks' progress, once the exchange has it: before the details,
    /// which wait for the releases to end and the dump too.
    peers: OnceLock<Vec<PeerProgress>>,
    /// Signalled when `details`, `quiet` or `peers` is set.
    details_set: (Mutex<()>, Condvar),
}

impl Failure {
    pub(crate) fn new(
        group: String,
        generation: u64,
        rank: usize,
        world_size: usize,
        cause: FailureCause,
        op: Option<OpRecord>,
        suspects: Vec<OpRecord>,
    ) -> Self {
        Self {
            group,
            generation,
            rank,
            world_size,
            cause,
            op,
            suspects,
            subgroup: None,
            details: OnceLock::new(),
            quiet: OnceLock::new(),
            peers: OnceLock::new(),
            details_set: (Mutex::new(()), Condvar::new()),
        }
    }

    /// This failure of a sub-group placed by `subgroup`.
    pub(crate) fn in_subgroup(mut self, subgroup: Option<Arc<SubGroup>>) -> Self {
        self.subgroup = subgroup;
        self
    }

    /// The abort's outcome, the peers' progress, the divergence, RAS's
    /// view and the dump, once the failure has them (they follow the
    /// failure by at most the abort timeout plus a few seconds for the
    /// exchange with the other ranks and about 4 for RAS).
    pub fn details(&self) -> Option<&FailureDetails> {
        self.details.get()
    }

    /// [`Failure::details`], waiting for them at most `timeout` (e.g.
    /// before a process exits, so that the flight recorder's dump is
    /// written).
    pub fn wait_details(&self, timeout: Duration) -> Option<&FailureDetails> {
        self.wait_for(timeout, |failure| failure.details.get())
    }

    /// Whether every communicator's release has begun, or the failure
    /// gave up waiting for one (its details are set: a revoke still
    /// running leaves its communicator unshrinkable, so a heal re-creates
    /// it), waiting at most `timeout`.
    pub(crate) fn wait_quiet(&self, timeout: Duration) -> bool {
        self.wait_for(timeout, |failure| {
            (failure.quiet.get()).or_else(|| failure.details.get().map(|_| &()))
        })
        .is_some()
    }

    /// The ranks' progress as the failure's exchange gathered it, waiting
    /// for it at most `timeout`; empty when there was no exchange.
    pub(crate) fn wait_peers(&self, timeout: Duration) -> &[PeerProgress] {
        self.wait_for(timeout, |failure| {
            (failure.peers.get()).or_else(|| failure.details.get().map(|d| &d.peers))
        })
        .map_or(&[], Vec::as_slice)
    }

    /// [`wait_peers`](Self::wait_peers) without waiting.
    pub(crate) fn peers(&self) -> &[PeerProgress] {
        self.wait_peers(Duration::ZERO)
    }

    /// What `get` finds, waiting for it at most `timeout`.
    fn wait_for<'a, T>(
        &'a self,
        timeout: Duration,
        get: impl Fn(&'a Self) -> Option<&'a T>,
    ) -> Option<&'a T> {
        // A timeout past what `Instant` can hold waits as long as it takes.
        let deadline = Instant::now().checked_add(timeout);
        let (lock, set) = &self.details_set;
        let mut guard = lock.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(found) = get(self) {
                return Some(found);
            }
            let left = deadline.map_or(LONGEST_SLEEP, |deadline| {
                deadline.saturating_duration_since(Instant::now())
            });
            if left.is_zero() {
                return None;
            }
            guard = set
                .wait_timeout(guard, left.min(LONGEST_SLEEP))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Records that every communicator's release has begun.
    pub(crate) fn set_quiet(&self) {
        self.notify(|failure| {
            let _ = failure.quiet.set(());
        });
    }

    /// Records the ranks' progress the exchange gathered.
    pub(crate) fn set_peers(&self, peers: Vec<PeerProgress>) {
        self.notify(|failure| {
            let _ = failure.peers.set(peers);
        });
    }

    pub(crate) fn set_details(&self, details: FailureDetails) {
        self.notify(|failure| {
            let _ = failure.details.set(details);
        });
    }

    /// Runs `set` under the lock the waiters sleep on, then wakes them.
    fn notify(&self, set: impl FnOnce(&Self)) {
        let (lock, waiters) = &self.details_set;
        let _guard = lock.lock().unwrap_or_else(PoisonError::into_inner);
        set(self);
        waiters.notify_all();
    }
}

/// `all_reduce #57 (collective #41, 1024 x float on devices [0])`.
fn describe(op: &OpRecord, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    write!(f, "{} #{} (", op.op, op.seq)?;
    if let Some(n) = op.collective_seq {
        write!(f, "collective #{n}, ")?;
    }
    match &op.dtype {
        Some(dtype) => write!(f, "{} x {dtype}", op.count)?,
        None => write!(f, "{} elements", op.count)?,
    }
    if let Some(peer) = op.peer {
        let role = if op.collective_seq.is_some() {
            "root"
        } else {
            "peer"
        };
        write!(f, ", {role} {peer}")?;
    }
    write!(f, " on devices {:?})", op.devices)
}

/// What a failure's message tells the caller to do, last.
pub(crate) const TO_CONTINUE: &str = "To continue, heal the group on every surviving rank \
     (ProcessGroup::heal; for a sub-group, heal its root group) or create a new one.";

/// How many suspect operations a failure's message names.
const SUSPECTS_NAMED: usize = 4;

/// `; the results of 2 operations that ended since the last clean check
/// may be wrong: all_reduce #56 (...), all_reduce #57 (...)`.
fn write_suspects(suspects: &[OpRecord], f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let Some((first, rest)) = suspects.split_first() else {
        return Ok(());
    };
    write!(
        f,
        "; the results of {} operation(s) that ended since the last clean check of the communicators \
         may be wrong (work the GPU ran on them read suspect values): ",
        suspects.len()
    )?;
    describe(first, f)?;
    for op in rest.iter().take(SUSPECTS_NAMED - 1) {
        write!(f, ", ")?;
        describe(op, f)?;
    }
    if suspects.len() > SUSPECTS_NAMED {
        write!(f, " and {} more", suspects.len() - SUSPECTS_NAMED)?;
    }
    Ok(())
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "process group {:?} (rank {} of {}",
            self.group, self.rank, self.world_size
        )?;
        if let Some(sub) = &self.subgroup {
            write!(f, "; {}", sub.place(self.rank))?;
        }
        match (&self.op, self.cause.with_nothing_pending()) {
            (Some(op), _) if !self.cause.by_the_check() => {
                f.write_str(") failed: ")?;
                describe(op, f)?;
                write!(f, " {}", self.cause)?;
            }
            (None, Some(what)) => write!(f, ") {what}")?,
            (op, _) => {
                write!(f, ") failed: {} {}", self.cause.subject(), self.cause)?;
                if let Some(op) = op {
                    f.write_str("; found at ")?;
                    describe(op, f)?;
                }
            }
        }
        write_suspects(&self.suspects, f)?;
        let Some(details) = self.details() else {
            return write!(
                f,
                "; its communicators are being aborted, and the full report follows (GroupError::failure, \
                 then Failure::wait_details, gives the lagging ranks, the first collective they did not \
                 issue alike and the flight recorder's path). {TO_CONTINUE}"
            );
        };
        match details.abort {
            AbortOutcome::Aborted(took) => {
                write!(f, "; its communicators were aborted in {took:?}")?
            }
            AbortOutcome::Stalled(waited) => write!(
                f,
                "; aborting its communicators had not finished after {waited:?} and was left running"
            )?,
        }
        if !details.lagging.is_empty() {
            let stuck = self.op.as_ref().and_then(|op| op.collective_seq);
            write!(f, "; ranks {:?}", details.lagging)?;
            if let Some(sub) = &self.subgroup {
                write!(
                    f,
                    " (global ranks {:?} of {:?})",
                    sub.global_of(&details.lagging),
                    sub.root_name()
                )?;
            }
            match stuck {
                Some(n) => write!(
                    f,
                    " had not issued collective #{n} or did not answer (the likely culprits)"
                )?,
                None => write!(f, " did not answer")?,
            }
        }
        let found_by_check = match &self.cause {
            FailureCause::Mismatch { divergence, .. } => Some(divergence),
            _ => None,
        };
        if let Some(divergence) = &details.divergence
            && found_by_check != Some(divergence)
        {
            write!(
                f,
                "; the ranks' last records part at collective #{}: {divergence}",
                divergence.collective_seq
            )?;
        }
        if let Some(ras) = &details.ras {
            write!(f, "; {ras}")?;
        }
        match &details.dump {
            Some(Ok(path)) => write!(f, "; flight recorder: {}", path.display())?,
            Some(Err(error)) => write!(f, "; the flight recorder could not be written: {error}")?,
            None => {}
        }
        write!(f, ". {TO_CONTINUE}")
    }
}

#[cfg(test)]
mod tests;
