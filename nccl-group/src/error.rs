//! Errors of the process group.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use nccl_core::ResultCode;

use crate::diagnostics::dumps::DumpError;
use crate::failure::{Failure, FailureCause};
use nccl_rendezvous::StoreError;

mod kind;
mod mismatch;
mod op;
mod uncapturable;

pub use kind::ErrorKind;
pub use mismatch::Mismatch;
pub use op::OpError;
pub use uncapturable::Uncapturable;

/// Everything a process-group call can fail with: one error type for
/// every call, with [`GroupError::kind`] to branch on.
///
/// An operation on borrowed memory refuses with it; on owned buffers the
/// refusal ([`OpError`], which gives them back) converts into it with `?`,
/// dropping the buffers; so does [`nccl_tensor::Error`]. `Debug` leads with the
/// message, so `fn main() -> Result<(), GroupError>` prints the sentence.
///
/// ```no_run
/// use std::sync::Arc;
/// use nccl_group::prelude::*;
/// use nccl_group::HealOptions;
///
/// /// One step: `?` takes the refusal of `all_reduce` and the failure
/// /// `wait` reports alike.
/// fn step(group: &ProcessGroup, grads: Tensor<f32>, stream: &Arc<CudaStream>) -> Result<Tensor<f32>, GroupError> {
///     group.all_reduce(grads, ReduceOp::Avg, stream)?.wait()
/// }
///
/// fn train(mut group: ProcessGroup, stream: &Arc<CudaStream>) -> Result<(), GroupError> {
///     for _ in 0..100 {
///         let grads = Tensor::from_host(stream, &[1.0f32; 1024], &[1024])?;
///         let Err(error) = step(&group, grads, stream) else { continue };
///         match error.kind() {
///             // A rank is gone (NCCL saw it go, or another rank's failure reached this
///             // one through the store), or the group failed otherwise (an operation past
///             // its timeout, a collective mismatch): `failure()` says which operation and
///             // why, and the survivors go on without a restart.
///             ErrorKind::PeerLost | ErrorKind::PeerFailed | ErrorKind::GroupFailed => {
///                 if let Some(failure) = error.failure() {
///                     eprintln!("{} failed: {}; healing", failure.group, failure.cause);
///                 }
///                 // `ErrorKind::Excluded` here: the others went on without this rank.
///                 group = group.heal(&HealOptions::new())?.into_group();
///             }
///             // A bug in this program (a shape, a device, a rank): retrying will not help.
///             ErrorKind::InvalidArgument | ErrorKind::WrongDevice | ErrorKind::RankOutOfRange => {
///                 return Err(error);
///             }
///             // Kinds may be added: always keep a wildcard arm.
///             _ => return Err(error),
///         }
///     }
///     group.destroy()
/// }
///
/// fn main() -> Result<(), GroupError> {
///     let group = ProcessGroup::from_env("trainer")?;
///     let device = match Device::new(group.local_rank().unwrap_or(0)).map_err(GroupError::from) {
///         // No CUDA driver on this machine (a missing libnccl is `Unavailable` too).
///         Err(error) if error.kind() == ErrorKind::Unavailable => {
///             eprintln!("{error}");
///             std::process::exit(2);
///         }
///         device => device?,
///     };
///     train(group, &device.new_stream()?)
/// }
/// ```
#[non_exhaustive]
#[derive(thiserror::Error)]
pub enum GroupError {
    /// The rendezvous store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A communicator operation failed (NCCL, CUDA, or an argument check).
    /// (A host read that refuses a group operation's result converts to
    /// the group's own error instead: see the `From` impl.)
    #[error(transparent)]
    Tensor(nccl_tensor::Error),
    /// Another rank did not publish a communicator's unique id in time.
    #[error(
        "timed out after {waited:?} waiting for the NCCL unique id under store key {key:?} from rank {creator} \
         (store at {store}); likely causes: rank {creator} has not reached this collective yet (slower, stuck, or \
         issuing collectives in another order), it exited, or the ranks disagree on the group name or device list"
    )]
    Rendezvous {
        /// The store key.
        key: String,
        /// The rank that creates the id (0, or the lower rank of a pair).
        creator: usize,
        /// Where the store is (rank 0's address for the TCP store).
        store: String,
        /// How long this rank waited.
        waited: Duration,
    },
    /// The group was aborted (by [`ProcessGroup::abort`](crate::Lifecycle::abort)
    /// or an error); create a new one.
    #[error("process group {name:?} was aborted; create a new group (the same name may be reused)")]
    Aborted {
        /// The group's name.
        name: String,
    },
    /// The watchdog failed the group: an operation timed out, or NCCL or
    /// CUDA reported an error.
    ///
    /// The [`Failure`] says which operation, why, which ranks lag and where the
    /// flight recorder was written.
    #[error("{0}")]
    Failed(Arc<Failure>),
    /// The collective check
    /// ([`GroupOptions::collective_checks`](crate::GroupOptions::collective_checks))
    /// found that the ranks did not issue the same collectives: the
    /// [`Mismatch`] names the rank, the collective and what each issued.
    ///
    /// The collective was not enqueued and the group failed: later calls get
    /// [`GroupError::Failed`].
    #[error("{0}")]
    Mismatch(Arc<Mismatch>),
    /// Aborting the group's communicators had not finished in time; it was
    /// left running on its own thread.
    #[error(
        "aborting process group {name:?} had not finished after {waited:?}; it was left running on its own \
         thread (the group is unusable; NCCL may be stuck in the driver): create a new group, and restart \
         the process if its GPU work stays stuck"
    )]
    AbortStalled {
        /// The group's name.
        name: String,
        /// How long the caller waited.
        waited: Duration,
    },
    /// Creating a communicator did not finish in time (NCCL's init waits
    /// for every rank to join).
    ///
    /// NCCL's error is the `source()`.
    #[error(
        "creating the communicator of store key {key:?} did not finish within {waited:?}; ranks {missing:?} never \
         joined it (they have not reached this operation, exited, or disagree on the group name or device list)"
    )]
    InitTimeout {
        /// The store key of the communicator.
        key: String,
        /// How long this rank waited.
        waited: Duration,
        /// The ranks that had not announced themselves in the store.
        missing: Vec<usize>,
        /// NCCL's (nccl-core's) error.
        source: Box<GroupError>,
    },
    /// The group stopped creating communicators (it failed, was aborted or
    /// destroyed) while this call was about to create one.
    #[error(
        "process group {name:?} no longer creates communicators (it failed, was aborted or destroyed); \
         create a new group"
    )]
    Closed {
        /// The group's name.
        name: String,
    },
    /// The group was destroyed.
    #[error("process group {name:?} was destroyed; create a new group (the same name may be reused)")]
    Destroyed {
        /// The group's name.
        name: String,
    },
    /// An argument that does not fit the group.
    #[error("invalid {argument}: expected {expected}, got {given}")]
    InvalidArgument {
        /// Which argument.
        argument: &'static str,
        /// What is accepted.
        expected: String,
        /// What was given.
        given: String,
    },
    /// A wait ran past its timeout.
    #[error(
        "{operation} did not complete within {waited:?}; this wait running out did not fail the group \
         (ProcessGroup::failure says whether anything else did)"
    )]
    Timeout {
        /// What was waited for.
        operation: &'static str,
        /// How long.
        waited: Duration,
    },
    /// An operation (or a step of a capture) that the group cannot
    /// capture in a CUDA graph; the reason says what to do instead.
    #[error("{op} in a CUDA graph capture: {reason}")]
    Capture {
        /// The operation or step.
        op: &'static str,
        /// Why not.
        reason: Uncapturable,
    },
    /// [`ProcessGroup::destroy`](crate::Lifecycle::destroy) while
    /// graphs of the group live.
    ///
    /// [`ProcessGroup::heal`](crate::Recovery::heal) and
    /// [`ProcessGroup::grow`](crate::Recovery::grow) likewise.
    #[error(
        "process group {name:?} cannot be {action} while {graphs} of its CUDA graphs live: NCCL frees a \
         communicator only once every graph that captured it is destroyed, so releasing the group's \
         communicators would wait for them; drop the GroupGraphs first"
    )]
    GraphsAlive {
        /// The group's name.
        name: String,
        /// What was refused: `"destroyed"`, `"healed"` or `"grown"`.
        action: &'static str,
        /// How many graphs live.
        graphs: usize,
    },
    /// [`ProcessGroup::destroy`](crate::Lifecycle::destroy) (or
    /// `shutdown`) while sub-groups split from the group
    /// ([`ProcessGroup::split_group`](crate::SubGroups::split_group),
    /// `new_group`) are live on this process.
    ///
    /// Nothing changed.
    #[error(
        "process group {name:?} cannot be destroyed while its sub-groups {subgroups:?} are live on this rank: \
         destroy them first on every rank (a failed, aborted or dropped sub-group does not count)"
    )]
    SubGroupsAlive {
        /// The group's name.
        name: String,
        /// The names of its live sub-groups.
        subgroups: Vec<String>,
    },
    /// The process could not start the watchdog thread that every group
    /// needs (it tracks operations' ends and timeouts); the operating
    /// system's error is the `source()`.
    #[error(
        "the process could not start the nccl-group watchdog thread, which every process group needs \
         (is the process out of threads or memory?)"
    )]
    WatchdogStart {
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The process could not start the thread of a group's mismatch check
    /// ([`GroupOptions::mismatch_check`](crate::GroupOptions::mismatch_check));
    /// the operating system's error is the `source()`.
    #[error(
        "the process could not start the thread of the group's mismatch check \
         (is the process out of threads or memory?); GroupOptions::with_mismatch_check(false) \
         makes a group without it"
    )]
    MismatchCheckStart {
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The process could not start the thread of a group's liveness beat
    /// ([`GroupOptions::liveness`](crate::GroupOptions::liveness)).
    #[error(
        "the process could not start the liveness thread of a process group \
         (is the process out of threads or memory?); \
         GroupOptions::with_liveness(Liveness::Off) makes a group without it"
    )]
    LivenessStart {
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The process could not start the thread that wakes awaited
    /// [`Work`](crate::Work)s (one per process, started by the first
    /// future that waits); the operating system's error is the `source()`.
    #[error(
        "the process could not start the nccl-group waker thread, which awaiting a Work needs \
         (is the process out of threads or memory?); Work::synchronize waits without it"
    )]
    WakerStart {
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// A handle of generation `generation` of a group that
    /// [`ProcessGroup::heal`](crate::Recovery::heal) or
    /// [`ProcessGroup::grow`](crate::Recovery::grow) replaced: its
    /// communicators were shrunk, grown or released.
    ///
    /// Use the group the heal or grow returned
    /// ([`Healed::group`](crate::Healed::group),
    /// [`Grown::group`](crate::Grown::group)).
    #[error(
        "process group {name:?} generation {generation} was replaced by generation {successor} \
         (ProcessGroup::heal or grow); use the group the heal or grow returned (its handles, Works and \
         registrations of generation {generation} are no longer usable)"
    )]
    Healed {
        /// The group's name.
        name: String,
        /// This handle's generation.
        generation: u64,
        /// The generation that replaced it.
        successor: u64,
    },
    /// The group is suspended ([`ProcessGroup::suspend`](crate::Lifecycle::suspend)):
    /// its communicators' dynamic GPU memory is released, so it issues no
    /// operation, captures, replays, registers nor is destroyed until
    /// [`resume`](crate::Lifecycle::resume).
    ///
    /// Nothing was touched.
    #[error(
        "process group {name:?} is suspended (ProcessGroup::suspend released its communicators' GPU memory): \
         call resume on every rank before {action}"
    )]
    Suspended {
        /// The group's name.
        name: String,
        /// What was refused: `"issuing operations"`, `"suspending it again"`, ...
        action: &'static str,
    },
    /// A process joining a grown group
    /// ([`GroupBuilder::join_grown`](crate::GroupBuilder::join_grown))
    /// found no grow that offered its ticket a place in time.
    #[error(
        "joining process group {name:?} with ticket {ticket}: no ProcessGroup::grow offered that ticket a place \
         within its timeout of {timeout:?} (store at {store}; {offers} offers read); the group's ranks must call grow with as \
         many new ranks as processes join, and the joining processes must use the group's name and root store"
    )]
    NotOffered {
        /// The group's name.
        name: String,
        /// This process's place in the queue of joining processes.
        ticket: i64,
        /// Where the store is.
        store: String,
        /// How many grows' offers were read, none covering the ticket.
        offers: u64,
        /// How long this process waited for a grow to cover its ticket.
        timeout: Duration,
    },
    /// A flight-recorder dump asked for was not written
    /// ([`ProcessGroup::dump_flight_recorder`](crate::Diagnostics::dump_flight_recorder)).
    #[error(transparent)]
    Dump(#[from] DumpError),
}

impl From<nccl_core::Error> for GroupError {
    fn from(error: nccl_core::Error) -> Self {
        GroupError::Tensor(nccl_tensor::Error::Core(error))
    }
}

impl GroupError {
    /// What kind of failure this is; a wrapped store or tensor error (and
    /// through it a core error) answers its own `kind()`:
    ///
    /// | Variant | Kind |
    /// |---|---|
    /// | `Store(error)`, `Tensor(error)` | `error.kind()` |
    /// | `Rendezvous`, `InitTimeout`, `Timeout`, `AbortStalled`, `NotOffered` | [`ErrorKind::Timeout`] |
    /// | `Aborted` | [`ErrorKind::Aborted`] |
    /// | `Failed` by a lost peer ([`FailureCause::is_peer_lost`](crate::FailureCause::is_peer_lost)) or an unresponsive one ([`FailureCause::PeerUnresponsive`]) | [`ErrorKind::PeerLost`] |
    /// | `Failed` by another rank's failure alarm ([`FailureCause::PeerFailed`]) | [`ErrorKind::PeerFailed`] |
    /// | `Failed`, any other cause | [`ErrorKind::GroupFailed`] ([`GroupError::is_timeout`] tells a timeout) |
    /// | `Failed` by a mismatch ([`FailureCause::Mismatch`]), `Mismatch` | [`ErrorKind::Mismatch`] |
    /// | `Closed`, `Destroyed` | [`ErrorKind::Closed`] |
    /// | `InvalidArgument`, `GraphsAlive`, `SubGroupsAlive` | [`ErrorKind::InvalidArgument`] |
    /// | `Healed` | [`ErrorKind::Healed`] |
    /// | `Suspended` | [`ErrorKind::Suspended`] |
    /// | `Capture` | [`ErrorKind::Unsupported`] |
    /// | `WatchdogStart`, `WakerStart`, `MismatchCheckStart`, `LivenessStart` | [`ErrorKind::Io`] |
    /// | `Dump` | [`ErrorKind::InvalidArgument`] for [`DumpError::NoFolder`], else [`ErrorKind::Io`] |
    pub fn kind(&self) -> ErrorKind {
        match self {
            GroupError::Store(error) => error.kind().into(),
            GroupError::Tensor(nccl_tensor::Error::ProducerFailed { error })
                if let Some(group) = error.downcast_ref::<GroupError>() =>
            {
                group.kind()
            }
            GroupError::Tensor(error) => error.kind().into(),
            GroupError::Rendezvous { .. }
            | GroupError::InitTimeout { .. }
            | GroupError::Timeout { .. }
            | GroupError::AbortStalled { .. }
            | GroupError::NotOffered { .. } => ErrorKind::Timeout,
            GroupError::Aborted { .. } => ErrorKind::Aborted,
            GroupError::Failed(failure)
                if failure.cause.is_peer_lost() || failure.cause.unresponsive_rank().is_some() =>
            {
                ErrorKind::PeerLost
            }
            GroupError::Failed(failure)
                if matches!(failure.cause, FailureCause::PeerFailed { .. }) =>
            {
                ErrorKind::PeerFailed
            }
            GroupError::Failed(failure)
                if matches!(failure.cause, FailureCause::Mismatch { .. }) =>
            {
                ErrorKind::Mismatch
            }
            GroupError::Mismatch(_) => ErrorKind::Mismatch,
            GroupError::Failed(_) => ErrorKind::GroupFailed,
            GroupError::Closed { .. } | GroupError::Destroyed { .. } => ErrorKind::Closed,
            GroupError::InvalidArgument { .. }
            | GroupError::GraphsAlive { .. }
            | GroupError::SubGroupsAlive { .. } => ErrorKind::InvalidArgument,
            GroupError::Capture { .. } => ErrorKind::Unsupported,
            GroupError::Healed { .. } => ErrorKind::Healed,
            GroupError::Suspended { .. } => ErrorKind::Suspended,
            GroupError::WatchdogStart { .. }
            | GroupError::WakerStart { .. }
            | GroupError::MismatchCheckStart { .. }
            | GroupError::LivenessStart { .. } => ErrorKind::Io,
            GroupError::Dump(DumpError::NoFolder) => ErrorKind::InvalidArgument,
            GroupError::Dump(_) => ErrorKind::Io,
        }
    }

    /// The NCCL result code behind this error at any depth: a wrapped
    /// tensor (core) error's, the one under a communicator's timed-out
    /// creation, or the asynchronous error's that failed the group
    /// ([`FailureCause::nccl_code`](crate::FailureCause::nccl_code)).
    pub fn nccl_code(&self) -> Option<ResultCode> {
        match self {
            GroupError::Tensor(error) => error.nccl_code(),
            GroupError::InitTimeout { source, .. } => source.nccl_code(),
            GroupError::Failed(failure) => failure.cause.nccl_code(),
            _ => None,
        }
    }

    /// The group's failure behind this error, when the watchdog failed
    /// the group ([`GroupError::Failed`], also when a host read of a
    /// result refused it): which operation, why
    /// ([`Failure::cause`]), which ranks lag, where the flight recorder
    /// was written.
    pub fn failure(&self) -> Option<&Arc<Failure>> {
        match self {
            GroupError::Failed(failure) => Some(failure),
            GroupError::Mismatch(mismatch) => Some(&mismatch.failure),
            GroupError::Tensor(nccl_tensor::Error::ProducerFailed { error }) => {
                error.downcast_ref::<GroupError>()?.failure()
            }
            _ => None,
        }
    }

    /// The variant's name, for `Debug`.
    fn variant(&self) -> &'static str {
        match self {
            GroupError::Store(_) => "Store",
            GroupError::Tensor(_) => "Tensor",
            GroupError::Rendezvous { .. } => "Rendezvous",
            GroupError::Aborted { .. } => "Aborted",
            GroupError::Failed(_) => "Failed",
            GroupError::AbortStalled { .. } => "AbortStalled",
            GroupError::InitTimeout { .. } => "InitTimeout",
            GroupError::Closed { .. } => "Closed",
            GroupError::Destroyed { .. } => "Destroyed",
            GroupError::InvalidArgument { .. } => "InvalidArgument",
            GroupError::Timeout { .. } => "Timeout",
            GroupError::Capture { .. } => "Capture",
            GroupError::GraphsAlive { .. } => "GraphsAlive",
            GroupError::SubGroupsAlive { .. } => "SubGroupsAlive",
            GroupError::WatchdogStart { .. } => "WatchdogStart",
            GroupError::WakerStart { .. } => "WakerStart",
            GroupError::MismatchCheckStart { .. } => "MismatchCheckStart",
            GroupError::LivenessStart { .. } => "LivenessStart",
            GroupError::Dump(_) => "Dump",
            GroupError::Mismatch(_) => "Mismatch",
            GroupError::Healed { .. } => "Healed",
            GroupError::Suspended { .. } => "Suspended",
            GroupError::NotOffered { .. } => "NotOffered",
        }
    }

    /// True for every timeout at any depth: [`ErrorKind::Timeout`], and a
    /// group that failed because an operation, an enqueue or a
    /// communicator's creation ran past its timeout
    /// ([`FailureCause::is_timeout`](crate::FailureCause::is_timeout)).
    pub fn is_timeout(&self) -> bool {
        match self {
            GroupError::Failed(failure) => failure.cause.is_timeout(),
            _ => self.kind() == ErrorKind::Timeout,
        }
    }
}

impl fmt::Debug for GroupError {
    /// `process group "trainer" was aborted; ... (nccl_group::GroupError::Aborted,
    /// kind Aborted)`: the message and its sources on one line, then the
    /// variant and the kind.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (nccl_group::GroupError::{}, kind {:?})",
            nccl_core::ErrorChain(self),
            self.variant(),
            self.kind()
        )
    }
}

impl From<nccl_tensor::IntoTypedError> for GroupError {
    /// [`nccl_tensor::Error::WrongType`]; the tensor is dropped.
    fn from(error: nccl_tensor::IntoTypedError) -> Self {
        GroupError::Tensor(error.into())
    }
}

/// Shorthand for this crate's results.
pub type Result<T, E = GroupError> = std::result::Result<T, E>;

impl From<nccl_tensor::Error> for GroupError {
    /// Wraps the error, except a host read's refusal of a result that a
    /// group's operation produced ([`nccl_tensor::Error::ProducerFailed`]
    /// from [`Tensor::to_vec`](nccl_tensor::Tensor::to_vec)), which becomes
    /// the group's own error again ([`GroupError::Failed`], ...), so that
    /// `tensor.to_vec(&stream)?` in a function returning `GroupError`
    /// matches as the failure it is.
    fn from(error: nccl_tensor::Error) -> Self {
        if let nccl_tensor::Error::ProducerFailed { error: producer } = &error
            && let Some(group) = producer.downcast_ref::<GroupError>()
            && let Some(same) = group.clone_failure()
        {
            return same;
        }
        GroupError::Tensor(error)
    }
}

impl GroupError {
    /// A copy of a failure that ends a group (`Failed`, `Aborted`,
    /// `Destroyed`), which are what a group's result check reports.
    fn clone_failure(&self) -> Option<Self> {
        Some(match self {
            GroupError::Failed(failure) => GroupError::Failed(Arc::clone(failure)),
            GroupError::Mismatch(mismatch) => GroupError::Mismatch(Arc::clone(mismatch)),
            GroupError::Aborted { name } => GroupError::Aborted { name: name.clone() },
            GroupError::Destroyed { name } => GroupError::Destroyed { name: name.clone() },
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests;
