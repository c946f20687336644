//! [`ErrorKind`]: what kind of failure a process-group error is.

nccl_core::__error_kinds! {
    /// What kind of failure a process-group error is.
    ///
    /// Every kind of nccl-core's [`ErrorKind`](nccl_core::ErrorKind) (which
    /// nccl-tensor's errors answer too), and the kinds only a group and its
    /// rendezvous know. `From` maps nccl-core's and nccl-rendezvous's kinds
    /// onto it. Match with a wildcard arm: kinds may be added.
    ///
    /// # What to do next, by kind
    ///
    /// | kind | the group | what to do |
    /// |---|---|---|
    /// | `InvalidArgument`, `WrongDevice`, `RankOutOfRange`, `Unsupported`, `MissingFunction` | still live: the call was refused before it reached NCCL | fix the call |
    /// | `Timeout` | still live after a CPU-side wait ran out (`GroupError::Timeout`: a `synchronize` bound, a store `get`; the operation may still complete); failed after a communicator's creation ran out (`GroupError::InitTimeout`) | wait again; heal only if [`Recovery::failure`](crate::Recovery::failure) is `Some` |
    /// | `Suspended` | still live, suspended | [`resume`](crate::Lifecycle::resume) on every rank, then retry |
    /// | `Mismatch` | failed: the ranks did not issue the same collectives | fix the program; heal or make a new group |
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
    /// `Some`, and treats `Timeout` alone as a reason to wait, not to heal (a
    /// group that its operation timeout failed answers `GroupFailed` with
    /// `is_timeout()` true).
    ///
    /// nccl-core's kinds say the same of a group as of a communicator, and
    /// more: [`InvalidArgument`](ErrorKind::InvalidArgument) covers a store
    /// key too; [`Unsupported`](ErrorKind::Unsupported) a step a CUDA graph
    /// cannot capture; [`Timeout`](ErrorKind::Timeout) a rendezvous and a
    /// store's `get` or `wait`; [`Aborted`](ErrorKind::Aborted) and
    /// [`Closed`](ErrorKind::Closed) the group (aborted, destroyed, or no
    /// longer creating communicators: create a new one);
    /// [`Io`](ErrorKind::Io) leaves out the store's own I/O
    /// ([`ErrorKind::Store`]). [`PeerLost`](ErrorKind::PeerLost) is also
    /// the asynchronous error that failed the group
    /// ([`FailureCause::is_peer_lost`](crate::FailureCause::is_peer_lost)),
    /// whose failure [`GroupError::failure`](crate::GroupError::failure)
    /// gives: create a new group without the lost rank.
    pub enum ErrorKind {
        /// Another rank failed and said so: it published its failure at a
        /// meeting this rank waited at, or raised its group's failure alarm
        /// ([`FailureCause::PeerFailed`](crate::FailureCause::PeerFailed)). ([`ErrorKind::PeerLost`] is NCCL's
        /// word for a rank that went away without saying so; match both for
        /// "a rank is gone".)
        PeerFailed,
        /// The group's watchdog failed the group (an operation timed out, or
        /// NCCL or CUDA reported an error); `is_timeout()` says whether it
        /// was a timeout.
        ///
        /// Create a new group.
        GroupFailed,
        /// The ranks did not issue the same collectives: the mismatch check
        /// or the collective check found it and failed the group
        /// ([`GroupError::Mismatch`](crate::GroupError::Mismatch), or a
        /// failure whose cause is [`FailureCause::Mismatch`](crate::FailureCause::Mismatch)).
        /// The divergence names the first rank that differs, the collective
        /// and both fingerprints.
        ///
        /// Fix the program so that every rank issues the same collectives,
        /// then make a new group.
        Mismatch,
        /// This rank was left out of the survivors' agreement on the next
        /// generation ([`ProcessGroup::heal`](crate::Recovery::heal)): it
        /// came after the decision (stopped, slow) or was suspected and
        /// absent.
        ///
        /// It must not take part in the healed group.
        Excluded,
        /// The survivors' agreement found fewer ranks than the heal's
        /// minimum: the next generation was not formed.
        TooFewSurvivors,
        /// A handle of a group that a heal or a grow replaced
        /// ([`GroupError::Healed`](crate::GroupError::Healed)): use the group the heal or grow returned.
        Healed,
        /// The group is suspended ([`ProcessGroup::suspend`](crate::Lifecycle::suspend)):
        /// call [`resume`](crate::Lifecycle::resume) on every rank, then retry.
        ///
        /// The group is still live.
        Suspended,
        /// The rendezvous store failed other than by a timeout: it could not
        /// be reached or bound, closed the connection, did not answer, refused
        /// the client, or its file or socket I/O failed.
        Store,
        /// A launch setting (`RANK`, `WORLD_SIZE`, `MASTER_ADDR`, ...) is
        /// missing or malformed.
        Config,
    }
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
            Rendezvous::Unsupported => ErrorKind::Unsupported,
            _ => ErrorKind::Other,
        }
    }
}
