//! Why a group failed, as the watchdog (or an abort) reports it.

use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use crate::diagnostics::analysis::{Divergence, Ranks};
use crate::diagnostics::ras::RasReport;
use crate::diagnostics::recorder::{OpRecord, PeerProgress};
use crate::lineage::SubGroup;
use nccl_core::ResultCode;

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
    /// restart failed workers. Nothing returns an error first, so nothing
    /// can exit before the dump is written.
    AbortProcess,
}

/// Why a group failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailureCause {
    /// An operation ran past its timeout.
    Timeout {
        /// The operation's timeout.
        timeout: Duration,
        /// How long it had run when the watchdog saw it.
        ran: Duration,
    },
    /// NCCL reported an asynchronous error on one of the group's
    /// communicators (a peer failed, a network error, an abort).
    /// `ncclRemoteError` is a lost peer ([`FailureCause::is_peer_lost`]).
    AsyncError {
        /// NCCL's error, with its sources, on one line.
        error: String,
        /// NCCL's result code (`None` when the error was not a NCCL
        /// code: a CUDA error, a library that could not be asked).
        nccl_code: Option<ResultCode>,
    },
    /// CUDA failed to report an operation's end (the device is in error).
    Cuda {
        /// CUDA's error.
        error: String,
    },
    /// The group was aborted ([`ProcessGroup::abort`](crate::ProcessGroup::abort))
    /// while operations were pending.
    Aborted,
    /// The group was dropped while operations were pending.
    Dropped,
    /// [`ProcessGroup::heal`](crate::ProcessGroup::heal) was called on
    /// the live group (another rank saw the failure first): its pending
    /// operations failed, and the survivors went on as the next
    /// generation.
    Healing,
    /// [`ProcessGroup::grow`](crate::ProcessGroup::grow) replaced the
    /// group while another thread's operation on it was pending (a grow
    /// waits for the operations issued before it; this one came during
    /// it): the old generation's communicators were released.
    Grown,
    /// Another rank's group failed first, and its failure alarm reached
    /// this rank through the store while an operation here waited (NCCL
    /// tells only the ranks connected to a lost one; the others would
    /// wait out their timeout). [`GroupError::kind`](crate::GroupError::kind)
    /// is then [`ErrorKind::PeerFailed`](crate::ErrorKind::PeerFailed).
    PeerFailed {
        /// The rank that failed first (its rank in this group).
        rank: usize,
        /// Why, as that rank's failure said it.
        cause: String,
    },
    /// NCCL accepted the operation, then something failed before its end
    /// could be tracked (waiting for a nonblocking communicator, recording
    /// its end event): it was left in flight, so the group cannot go on.
    Enqueue {
        /// The error.
        error: String,
    },
    /// Enqueueing an operation on the communicator of `device` (the NCCL
    /// call, or a custom operation's own code) had not returned after its
    /// timeout: the calling thread is stuck in it (a peer that never
    /// connects, say). The operation has no sequence number yet.
    EnqueueBlocked {
        /// The local device.
        device: usize,
        /// The operation's timeout.
        timeout: Duration,
        /// How long the call had been blocked when the watchdog saw it.
        blocked: Duration,
    },
    /// A communicator could not be created in time
    /// ([`GroupError::InitTimeout`](crate::GroupError::InitTimeout)): the
    /// ranks no longer agree on what to create next.
    Creation {
        /// The error.
        error: String,
    },
    /// `ncclCommSplit` of the group's communicator into its sub-groups
    /// ([`ProcessGroup::split_group`](crate::ProcessGroup::split_group),
    /// `new_group`) failed or ran past the group's timeout on this rank or
    /// another: NCCL's split runs over the group's communicator, which is
    /// then in an unknown state.
    Split {
        /// Which split of the group ([`SubGroup::index`](crate::SubGroup::index)).
        index: u64,
        /// Whether it ran past the timeout.
        timed_out: bool,
        /// The error, on this rank or as another rank published it.
        error: String,
    },
    /// The collective check
    /// ([`GroupOptions::collective_checks`](crate::GroupOptions::collective_checks))
    /// found that the ranks did not issue the same collectives
    /// ([`GroupError::Mismatch`](crate::GroupError::Mismatch) on the
    /// calling thread).
    Mismatch {
        /// The first collective the ranks did not issue alike.
        divergence: Divergence,
    },
    /// The collective check of collectives `first..=last` could not
    /// compare them with every rank's: the ranks `absent` had not issued
    /// them within the operation's timeout (they skipped a collective,
    /// stopped or lag), or the store failed (`error`).
    CheckIncomplete {
        /// The first collective the check covered.
        first: u64,
        /// The last, which was not enqueued.
        last: u64,
        /// The ranks whose fingerprints did not come.
        absent: Vec<usize>,
        /// How long the check waited.
        waited: Duration,
        /// The store's error, if it failed.
        error: Option<String>,
    },
}

impl FailureCause {
    /// True when something ran past its timeout: an operation
    /// ([`FailureCause::Timeout`]), an enqueue
    /// ([`FailureCause::EnqueueBlocked`]), a communicator's creation
    /// ([`FailureCause::Creation`], which only a timed-out creation causes)
    /// or split ([`FailureCause::Split`] that timed out), or the collective
    /// check's wait for other ranks ([`FailureCause::CheckIncomplete`]
    /// without a store error).
    pub fn is_timeout(&self) -> bool {
        matches!(
            self,
            FailureCause::Timeout { .. }
                | FailureCause::EnqueueBlocked { .. }
                | FailureCause::Creation { .. }
                | FailureCause::Split {
                    timed_out: true,
                    ..
                }
                | FailureCause::CheckIncomplete { error: None, .. }
        )
    }

    /// The NCCL result code behind the failure: an asynchronous error's.
    pub fn nccl_code(&self) -> Option<ResultCode> {
        match self {
            FailureCause::AsyncError { nccl_code, .. } => *nccl_code,
            _ => None,
        }
    }

    /// True when NCCL reported a lost peer: a remote rank failed or went
    /// away (`ncclRemoteError`). [`GroupError::kind`](crate::GroupError::kind)
    /// is then [`ErrorKind::PeerLost`](crate::ErrorKind::PeerLost).
    pub fn is_peer_lost(&self) -> bool {
        self.nccl_code().is_some_and(ResultCode::is_remote_error)
    }

    /// What failed when no operation did: the collective check, or a
    /// communicator.
    fn subject(&self) -> &'static str {
        match self {
            FailureCause::Mismatch { .. } | FailureCause::CheckIncomplete { .. } => {
                "the collective check"
            }
            _ => "a communicator",
        }
    }
}

impl fmt::Display for FailureCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FailureCause::Timeout { timeout, ran } => {
                write!(
                    f,
                    "did not complete within its timeout of {timeout:?} (it had run {ran:?})"
                )
            }
            FailureCause::AsyncError { error, .. } => {
                write!(f, "failed: NCCL reported an asynchronous error: {error}")
            }
            FailureCause::Cuda { error } => write!(f, "failed: CUDA error: {error}"),
            FailureCause::Aborted => write!(f, "was pending when the group was aborted"),
            FailureCause::Dropped => write!(f, "was pending when the group was dropped"),
            FailureCause::Healing => write!(f, "was pending when the group was healed"),
            FailureCause::Grown => write!(f, "was pending when the group grew"),
            FailureCause::PeerFailed { rank, cause } => write!(
                f,
                "failed: rank {rank} of the group failed first and raised the alarm through the \
                 store (its failure: {cause})"
            ),
            FailureCause::Enqueue { error } => {
                write!(f, "failed after NCCL accepted it: {error}")
            }
            FailureCause::Creation { error } => write!(f, "could not be created: {error}"),
            FailureCause::Split { index, error, .. } => write!(
                f,
                "could not be split into the group's sub-groups (split #{index}, ncclCommSplit): {error}"
            ),
            FailureCause::EnqueueBlocked {
                device,
                timeout,
                blocked,
            } => write!(
                f,
                "on device {device} was stuck enqueueing an operation for {blocked:?}, past its timeout of \
                 {timeout:?} (a peer that never connects?)"
            ),
            FailureCause::Mismatch { divergence } => write!(
                f,
                "found that the ranks did not issue the same collectives: {divergence}"
            ),
            FailureCause::CheckIncomplete {
                first,
                last,
                absent,
                waited,
                error,
            } => {
                write!(f, "of {} ", Collectives(*first, *last))?;
                if !absent.is_empty() {
                    write!(
                        f,
                        "had no fingerprints from {} after {waited:?}: they had not issued these \
                         collectives (a skipped collective, a stopped or lagging rank)",
                        Ranks(absent)
                    )?;
                }
                match error {
                    Some(error) if absent.is_empty() => {
                        write!(f, "failed: the store failed: {error}")
                    }
                    Some(error) => write!(f, "; the store failed: {error}"),
                    None => Ok(()),
                }
            }
        }
    }
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
    /// collective. `None`: they agree (a rank that issued fewer is in
    /// `lagging`), or no rank was asked.
    pub divergence: Option<Divergence>,
    /// NCCL's RAS view of the job's dead and unresponsive ranks, or why
    /// there is none. `None`: not asked: after an abort, with
    /// [`GroupOptions::ras_report`](crate::GroupOptions::ras_report) off,
    /// or when the watchdog's own thread finished the failure (under
    /// [`FailurePolicy::AbortProcess`], or when no thread could be
    /// started), which must not wait for RAS.
    pub ras: Option<RasReport>,
    /// Where the flight recorder's dump was written, or why it was not
    /// (`None`: dumps are off).
    pub dump: Option<Result<PathBuf, String>>,
}

/// A group's failure: which operation, why, and what was done about it.
/// [`GroupError::Failed`](crate::GroupError::Failed) carries it; its
/// `Display` is the full report.
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
    /// [`Work::wait`](crate::Work::wait)) read suspect values. Host reads
    /// of their tensors fail instead. The flight recorder marks them
    /// [`OpState::Suspect`](crate::OpState::Suspect).
    pub suspects: Vec<OpRecord>,
    /// Where the group sits in the group it was split from, for a
    /// sub-group ([`ProcessGroup::split_group`](crate::ProcessGroup::split_group)):
    /// the report names this rank's and the lagging ranks' global ranks.
    pub subgroup: Option<Arc<SubGroup>>,
    details: OnceLock<FailureDetails>,
    /// Signalled when the details are set.
    /// How the release of the communicators went, once it has: before
    /// the details, which wait for the other ranks too.
    released: OnceLock<AbortOutcome>,
    /// Signalled when `details` or `released` is set.
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
            released: OnceLock::new(),
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

    /// How the release of the group's communicators (revoke or abort)
    /// went, waiting for it at most `timeout`: it comes before the
    /// details, which also wait for the other ranks' reports.
    pub(crate) fn wait_released(&self, timeout: Duration) -> Option<&AbortOutcome> {
        self.wait_for(timeout, |failure| {
            (failure.released.get()).or_else(|| failure.details.get().map(|d| &d.abort))
        })
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

    /// Records how the release of the communicators went.
    pub(crate) fn set_released(&self, outcome: AbortOutcome) {
        let (lock, set) = &self.details_set;
        let _guard = lock.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = self.released.set(outcome);
        set.notify_all();
    }

    pub(crate) fn set_details(&self, details: FailureDetails) {
        let (lock, set) = &self.details_set;
        let _guard = lock.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = self.details.set(details);
        set.notify_all();
    }
}

/// `all_reduce #57 (collective #41, 1024 x float on devices [0])`.
fn describe(op: &OpRecord, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    write!(f, "{} #{} (", op.op, op.seq)?;
    if let Some(n) = op.collective_seq {
        write!(f, "collective #{n}, ")?;
    }
    match op.dtype {
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
        f.write_str(") failed: ")?;
        match &self.op {
            Some(op) => describe(op, f)?,
            None => f.write_str(self.cause.subject())?,
        }
        write!(f, " {}", self.cause)?;
        write_suspects(&self.suspects, f)?;
        let Some(details) = self.details() else {
            return write!(
                f,
                "; its communicators are being aborted. Create a new group to continue."
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
            let stuck = self.op.and_then(|op| op.collective_seq);
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
            FailureCause::Mismatch { divergence } => Some(divergence),
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
        write!(f, ". Create a new group to continue.")
    }
}

/// `collective #57`, `collectives #48-#63`.
pub(crate) struct Collectives(pub(crate) u64, pub(crate) u64);

impl fmt::Display for Collectives {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 == self.1 {
            true => write!(f, "collective #{}", self.0),
            false => write!(f, "collectives #{}-#{}", self.0, self.1),
        }
    }
}

#[cfg(test)]
mod tests;
