//! [`ErrorKind`]: what kind of failure a process-group error is.

/// What kind of failure a process-group error is.
///
/// Every kind of nccl-core's [`ErrorKind`](nccl_core::ErrorKind) (which
/// nccl-tensor's errors answer too), and the kinds only a group and its
/// rendezvous know. `From` maps nccl-core's and nccl-rendezvous's kinds onto
/// it. Match with a wildcard arm: kinds may be added.
///
/// # What to do next, by kind
///
/// | kind | the group | what to do |
/// |---|---|---|
/// | `InvalidArgument`, `WrongDevice`, `RankOutOfRange`, `Unsupported`, `MissingFunction` | still live: the call was refused before it reached NCCL | fix the call |
/// | `Timeout` | still live after a CPU-side wait ran out (`GroupError::Timeout`: a `synchronize` bound, a store `get`; the operation may still complete); failed after a communicator's creation ran out (`GroupError::InitTimeout`) | wait again; heal only if [`Recovery::failure`](crate::Recovery::failure) is `Some` |
/// | `GroupFailed`, `PeerFailed`, `PeerLost` | failed ([`GroupError::failure`](crate::GroupError::failure) says why; `is_timeout()` when its operation timeout failed it) | heal ([`Recovery::heal`](crate::Recovery::heal)) or make a new group |
/// | `Healed` | replaced by a heal or a grow | use the group the heal or grow returned |
/// | `Excluded` | went on without this rank | leave, or join again as a new rank |
/// | `TooFewSurvivors` | no next generation was formed | make a new group |
/// | `Aborted`, `Closed` | ended by this process | make a new group |
/// | `Nccl`, `Cuda` | failed if [`Recovery::failure`](crate::Recovery::failure) is `Some`, else the call alone failed | heal if it failed |
/// | `Unavailable`, `Store`, `Config`, `Io`, `Other` | the machine, the store or the launch | fix the environment |
///
/// Whatever the kind, [`Recovery::failure`](crate::Recovery::failure)
/// answers whether the group failed: an elastic trainer heals when it is
/// `Some`, and treats `Timeout` alone as a reason to wait, not to heal.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// An argument the call cannot accept: a length, a shape, a data type
    /// that does not match, a value out of its range, a flag, a store key.
    InvalidArgument,
    /// A buffer or stream on another device than the communicator's.
    WrongDevice,
    /// A rank, root or peer outside `0..world_size`.
    RankOutOfRange,
    /// A feature, data type or reduction that the loaded NCCL or the GPU
    /// does not support, or a step a CUDA graph cannot capture.
    Unsupported,
    /// The loaded libnccl does not export a function the call needs.
    MissingFunction,
    /// This machine lacks what every call needs: the CUDA driver, a GPU,
    /// or a loadable NCCL library.
    Unavailable,
    /// NCCL returned an error code; `nccl_code()` says which.
    Nccl,
    /// A CUDA driver call failed.
    Cuda,
    /// A wait ran past its deadline: a NCCL call, a rendezvous, a
    /// communicator's creation, a store's `get` or `wait`, an abort.
    ///
    /// Not by itself a reason to heal: a group that its operation timeout
    /// failed answers [`ErrorKind::GroupFailed`] with `is_timeout()` true;
    /// only a communicator's creation that timed out fails the group under
    /// this kind ([`Recovery::failure`](crate::Recovery::failure) then says so).
    Timeout,
    /// The communicator or group was aborted; create a new one.
    Aborted,
    /// The communicator was finalized, or the group was destroyed or no
    /// longer creates communicators; create a new one.
    Closed,
    /// Another rank failed and said so: it published its failure at a
    /// meeting this rank waited at, or raised its group's failure alarm
    /// ([`FailureCause::PeerFailed`](crate::FailureCause::PeerFailed)). ([`ErrorKind::PeerLost`] is NCCL's
    /// word for a rank that went away without saying so; match both for
    /// "a rank is gone".)
    PeerFailed,
    /// A remote rank failed or went away: NCCL reported `ncclRemoteError`,
    /// from a call or as the asynchronous error that failed the group
    /// ([`FailureCause::is_peer_lost`](crate::FailureCause::is_peer_lost));
    /// `nccl_code()` keeps the code and [`GroupError::failure`](crate::GroupError::failure) the
    /// group's failure. Create a new group without it.
    PeerLost,
    /// The group's watchdog failed the group (an operation timed out, or
    /// NCCL or CUDA reported an error), or its collective check found a
    /// mismatch; `is_timeout()` says whether it was a timeout. Create a
    /// new group.
    GroupFailed,
    /// This rank was left out of the survivors' agreement on the next
    /// generation ([`ProcessGroup::heal`](crate::Recovery::heal)): it
    /// came after the decision (stopped, slow) or was suspected and
    /// absent. It must not take part in the healed group.
    Excluded,
    /// The survivors' agreement found fewer ranks than the heal's
    /// minimum: the next generation was not formed.
    TooFewSurvivors,
    /// A handle of a group that a heal or a grow replaced
    /// ([`GroupError::Healed`](crate::GroupError::Healed)): use the group the heal or grow returned.
    Healed,
    /// The group is suspended ([`ProcessGroup::suspend`](crate::Lifecycle::suspend)):
    /// call [`resume`](crate::Lifecycle::resume) on every rank, then retry.
    /// The group is still live.
    Suspended,
    /// The rendezvous store failed other than by a timeout: it could not
    /// be reached or bound, closed the connection, did not answer, refused
    /// the client, or its file or socket I/O failed.
    Store,
    /// A launch setting (`RANK`, `WORLD_SIZE`, `MASTER_ADDR`, ...) is
    /// missing or malformed.
    Config,
    /// An operating-system request outside NCCL and the store failed:
    /// starting a thread, writing a file.
    Io,
    /// Anything else; the message says what.
    Other,
}

impl From<nccl_core::ErrorKind> for ErrorKind {
    fn from(kind: nccl_core::ErrorKind) -> Self {
        use nccl_core::ErrorKind as Core;
        match kind {
            Core::InvalidArgument => ErrorKind::InvalidArgument,
            Core::WrongDevice => ErrorKind::WrongDevice,
            Core::RankOutOfRange => ErrorKind::RankOutOfRange,
            Core::Unsupported => ErrorKind::Unsupported,
            Core::MissingFunction => ErrorKind::MissingFunction,
            Core::Unavailable => ErrorKind::Unavailable,
            Core::Nccl => ErrorKind::Nccl,
            Core::PeerLost => ErrorKind::PeerLost,
            Core::Cuda => ErrorKind::Cuda,
            Core::Timeout => ErrorKind::Timeout,
            Core::Aborted => ErrorKind::Aborted,
            Core::Closed => ErrorKind::Closed,
            Core::Io => ErrorKind::Io,
            _ => ErrorKind::Other,
        }
    }
}

impl From<nccl_rendezvous::ErrorKind> for ErrorKind {
    fn from(kind: nccl_rendezvous::ErrorKind) -> Self {
        use nccl_rendezvous::ErrorKind as Rendezvous;
        match kind {
            Rendezvous::Timeout => ErrorKind::Timeout,
            Rendezvous::PeerFailed => ErrorKind::PeerFailed,
            Rendezvous::InvalidArgument => ErrorKind::InvalidArgument,
            Rendezvous::Config => ErrorKind::Config,
            Rendezvous::Store => ErrorKind::Store,
            Rendezvous::Excluded => ErrorKind::Excluded,
            Rendezvous::TooFewSurvivors => ErrorKind::TooFewSurvivors,
            _ => ErrorKind::Other,
        }
    }
}
