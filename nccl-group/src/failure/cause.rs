//! [`FailureCause`]: why a group failed, and how a failure report names
//! the collectives it covers ([`Collectives`]).

use std::fmt;
use std::time::Duration;

use crate::diagnostics::analysis::{Divergence, Ranks};
use nccl_core::ResultCode;

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
    ///
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
    /// The group was aborted ([`ProcessGroup::abort`](crate::Lifecycle::abort))
    /// while operations were pending.
    Aborted,
    /// The group was dropped while operations were pending.
    Dropped,
    /// [`ProcessGroup::heal`](crate::Recovery::heal) was called on
    /// the live group (another rank saw the failure first): its pending
    /// operations failed, and the survivors went on as the next
    /// generation.
    Healing,
    /// [`ProcessGroup::grow`](crate::Recovery::grow) replaced the
    /// group while another thread's operation on it was pending (a grow
    /// waits for the operations issued before it; this one came during
    /// it): the old generation's communicators were released.
    Grown,
    /// Another rank's group failed first, and its failure alarm reached
    /// this rank through the store while an operation here waited (NCCL
    /// tells only the ranks connected to a lost one; the others would
    /// wait out their timeout).
    ///
    /// [`GroupError::kind`](crate::GroupError::kind) is then
    /// [`ErrorKind::PeerFailed`](crate::ErrorKind::PeerFailed).
    PeerFailed {
        /// The rank that failed first (its rank in this group).
        rank: usize,
        /// Why, as that rank's failure said it.
        cause: String,
    },
    /// A rank's liveness beat stood still for longer than the bound of
    /// [`GroupOptions::liveness`](crate::GroupOptions::liveness): that
    /// process is stopped or wedged as a whole (a busy one keeps beating).
    ///
    /// The rank that saw it (`seen_by`) raised the failure alarm naming
    /// `rank`, so every rank of the group fails with this cause, and a
    /// following [`heal`](crate::Recovery::heal) counts `rank` lost without
    /// waiting for it. [`GroupError::kind`](crate::GroupError::kind) is then
    /// [`ErrorKind::PeerLost`](crate::ErrorKind::PeerLost).
    PeerUnresponsive {
        /// The rank whose beat stood still (its rank in this group).
        rank: usize,
        /// How long the beat had stood still when it was named.
        silent_for: Duration,
        /// The rank that watched it (this rank, or another one whose alarm
        /// told this one).
        seen_by: usize,
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
    /// connects, say).
    ///
    /// The operation has no sequence number yet.
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
    /// ([`ProcessGroup::split_group`](crate::SubGroups::split_group),
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
    /// The mismatch check or the collective check found that the ranks
    /// did not issue the same collectives
    /// ([`GroupError::Mismatch`](crate::GroupError::Mismatch) on the
    /// calling thread and on host reads).
    Mismatch {
        /// The first collective the ranks did not issue alike.
        divergence: Divergence,
        /// Which check found it.
        found_by: FoundBy,
    },
    /// A check of collectives `first..=last` could not compare them with
    /// every rank's: the ranks `absent` had not issued them within the
    /// operation's timeout (they skipped a collective, stopped or lag), or
    /// the store failed (`error`).
    CheckIncomplete {
        /// The first collective the check covered.
        first: u64,
        /// The last (with the collective check, it was not enqueued).
        last: u64,
        /// The ranks whose fingerprints did not come.
        absent: Vec<usize>,
        /// How long the check waited.
        waited: Duration,
        /// The store's error, if it failed.
        error: Option<String>,
        /// Which check it was.
        found_by: FoundBy,
    },
}

/// Which check found that the ranks did not issue the same collectives
/// ([`FailureCause::Mismatch`], [`FailureCause::CheckIncomplete`],
/// [`Mismatch`](crate::Mismatch)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FoundBy {
    /// The mismatch check, after the collectives were enqueued
    /// ([`GroupOptions::mismatch_check`](crate::GroupOptions::mismatch_check)).
    MismatchCheck,
    /// The collective check, before the last collective was enqueued
    /// ([`GroupOptions::collective_checks`](crate::GroupOptions::collective_checks)).
    CollectiveCheck,
}

impl FoundBy {
    /// The check's name in messages.
    pub(crate) fn name(self) -> &'static str {
        match self {
            FoundBy::MismatchCheck => "the mismatch check",
            FoundBy::CollectiveCheck => "the collective check",
        }
    }
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

    /// The rank the liveness beat named unresponsive
    /// ([`FailureCause::PeerUnresponsive`]).
    pub fn unresponsive_rank(&self) -> Option<usize> {
        match self {
            FailureCause::PeerUnresponsive { rank, .. } => Some(*rank),
            _ => None,
        }
    }

    /// The NCCL result code behind the failure: an asynchronous error's.
    pub fn nccl_code(&self) -> Option<ResultCode> {
        match self {
            FailureCause::AsyncError { nccl_code, .. } => *nccl_code,
            _ => None,
        }
    }

    /// True when NCCL reported a lost peer: a remote rank failed or went
    /// away (`ncclRemoteError`).
    ///
    /// [`GroupError::kind`](crate::GroupError::kind) is then
    /// [`ErrorKind::PeerLost`](crate::ErrorKind::PeerLost).
    pub fn is_peer_lost(&self) -> bool {
        self.nccl_code().is_some_and(ResultCode::is_remote_error)
    }

    /// What befell the group, for a cause that needs no failed operation
    /// (an abort, a drop, a heal, a grow) when none was pending: the whole
    /// sentence, so a failure report never claims a pending communicator
    /// that was not there.
    ///
    /// `None` for any other cause.
    pub(crate) fn with_nothing_pending(&self) -> Option<&'static str> {
        match self {
            FailureCause::Aborted => Some("was aborted with no operation pending"),
            FailureCause::Dropped => Some("was dropped with no operation pending"),
            FailureCause::Healing => Some("was healed with no operation pending"),
            FailureCause::Grown => Some("grew with no operation pending"),
            _ => None,
        }
    }

    /// True when a check found the failure: its message
    /// names the check first, then the operation it was found at, if any.
    pub(crate) fn by_the_check(&self) -> bool {
        matches!(
            self,
            FailureCause::Mismatch { .. } | FailureCause::CheckIncomplete { .. }
        )
    }

    /// What failed when no operation did: a check, or a communicator.
    pub(crate) fn subject(&self) -> &'static str {
        match self {
            FailureCause::Mismatch { found_by, .. }
            | FailureCause::CheckIncomplete { found_by, .. } => found_by.name(),
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
                    "did not complete within its timeout of {timeout:?} (it had run {ran:?}): a rank \
                     did not issue it, issued it differently, or is slower than the timeout allows \
                     (GroupOptions::op_timeout)"
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
            FailureCause::PeerUnresponsive {
                rank,
                silent_for,
                seen_by,
            } => write!(
                f,
                "failed: rank {rank}'s liveness beat stood still for {silent_for:?} (as rank \
                 {seen_by} saw it): that process is stopped or wedged (GroupOptions::liveness \
                 sets the bound)"
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
            FailureCause::Mismatch { divergence, .. } => write!(
                f,
                "found that the ranks did not issue the same collectives: {divergence}"
            ),
            FailureCause::CheckIncomplete {
                first,
                last,
                absent,
                waited,
                error,
                ..
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
