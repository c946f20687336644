//! [`Recovery`]: how a group goes on after a failure, by a heal without
//! the lost ranks or a grow that takes new ones.

use std::sync::Arc;

use crate::engine::group::ProcessGroup;
use crate::error::Result;
use crate::failure::Failure;
use crate::generations::grow::options::{GrowOptions, Grown};
use crate::generations::heal::options::{HealOptions, Healed};

/// How a group goes on after a failure: [`failure`](Recovery::failure)
/// says why it stopped, [`heal`](Recovery::heal) makes the next generation
/// without the lost ranks, [`grow`](Recovery::grow) one with new ranks
/// (which join with
/// [`GroupBuilder::join_grown`](crate::GroupBuilder::join_grown)).
///
/// Sealed, implemented for [`ProcessGroup`] only, and in the
/// [`prelude`](crate::prelude).
pub trait Recovery: crate::sealed::Sealed {
    /// Why the group failed or was aborted: a timeout or error the watchdog
    /// saw, an operation left in flight by an error, a communicator that
    /// could not be created in time, or [`ProcessGroup::abort`](crate::Lifecycle::abort).
    fn failure(&self) -> Option<Arc<Failure>>;

    /// Heals the group after a failure: the surviving ranks all call it,
    /// and go on together as the next generation, without the lost ranks
    /// and without a restart. (`docs/group/recovery.md`, "Healing in
    /// place", has the rules and a full example.)
    ///
    /// 1. **Stop.** A live group (another rank saw the failure first) is
    ///    failed now ([`FailureCause::Healing`](crate::FailureCause::Healing)): its pending operations
    ///    fail. The failure's release of the communicators is waited for:
    ///    revoked (NCCL 2.28.7 or later, [`GroupOptions::revoke_on_failure`](crate::GroupOptions::revoke_on_failure))
    ///    or aborted.
    /// 2. **Agree.** The ranks agree through the store on who goes on
    ///    ([`agree_survivors`](nccl_rendezvous::meet::agree::agree_survivors): arriving counts as alive; a rank neither
    ///    arrived nor suspected is waited for until the timeout). Suspects:
    ///    the ranks whose progress report the failure's exchange did not
    ///    get, and [`HealOptions::with_suspects`].
    /// 3. **Carry.** Where every survivor has a revoked one-device
    ///    collective communicator of the same key and NCCL has
    ///    `ncclCommShrink` (2.27.3), it is shrunk to the survivors
    ///    ([`HealPath::Shrunk`](crate::HealPath::Shrunk)); a shrink that fails anywhere is dropped
    ///    everywhere. NCCL refuses to shrink a communicator that still
    ///    reports an error, which a dead peer's closed socket leaves even
    ///    after a revoke: after a death the heal re-creates, after a
    ///    timeout (a stopped rank) it shrinks, unless a survivor's own
    ///    revoke (which stops its proxy and closes its sockets from NCCL
    ///    2.30) cut an operation still in flight on another survivor, which
    ///    then has that error too and re-creates with the rest (the reason
    ///    names each rank's refusal). Everything else is made afresh, through the store
    ///    under the new generation, when first used
    ///    ([`HealPath::Recreated`](crate::HealPath::Recreated)). The revoked parents are then released
    ///    by abort, never destroy (NCCL's revoke-then-destroy
    ///    use-after-free, NVIDIA/nccl PR 2251).
    /// 4. **Retire.** This generation's handles then refuse every call
    ///    with [`GroupError::Healed`](crate::GroupError::Healed) naming the new generation; its
    ///    `Work`s have failed already. With [`GroupOptions::dump_dir`](crate::GroupOptions::dump_dir)
    ///    set, the flight recorder writes the heal as an incident.
    ///
    /// Threads: concurrent calls on one generation make one heal; every
    /// caller gets the same [`Healed`] (a later call too, while the new
    /// group lives).
    ///
    /// # Errors
    /// - [`GroupError::GraphsAlive`](crate::GroupError::GraphsAlive): a [`GroupGraph`](crate::GroupGraph)
    ///   of this generation lives (drop it first; nothing changed).
    /// - [`GroupError::Destroyed`](crate::GroupError::Destroyed); [`GroupError::Healed`](crate::GroupError::Healed) when this
    ///   generation was grown ([`ProcessGroup::grow`]), or the group it was
    ///   healed into was dropped.
    /// - [`GroupError::InvalidArgument`](crate::GroupError::InvalidArgument) for a `min_survivors` of 0 or
    ///   above the world size, a suspect outside the world or this rank, or
    ///   a sub-group ([`ProcessGroup::split_group`](crate::SubGroups::split_group): heal the root group,
    ///   then split the healed group again).
    /// - [`ErrorKind::Excluded`](crate::ErrorKind::Excluded): this rank
    ///   came after the decision (it was stopped or slow); it must leave.
    /// - [`ErrorKind::TooFewSurvivors`](crate::ErrorKind::TooFewSurvivors).
    /// - A store error: the decision is unknown to this rank; calling
    ///   again once the store answers returns it.
    fn heal(&self, options: &HealOptions) -> Result<Healed>;

    /// Grows the group by `new_ranks` new processes, which call
    /// [`GroupBuilder::join_grown`](crate::GroupBuilder::join_grown): every current rank calls it, and the
    /// ranks go on together, the new ones included, as the next
    /// generation. (`docs/group/recovery.md`, "Growing back", has the
    /// protocol and an example.)
    ///
    /// 1. **Quiesce.** The operations issued on this generation are waited
    ///    for (the grow replaces its communicators; issue none during the
    ///    grow).
    /// 2. **Plan.** The ranks meet at the store and agree on the
    ///    communicator to grow: the first one-device collective
    ///    communicator in store-key order, the one every collective of a
    ///    process with one GPU uses, when every rank has it and none
    ///    passed [`GrowOptions::with_grow`]`(false)`. A new process drives
    ///    one GPU, so one communicator grows at most.
    /// 3. **Offer.** Rank 0 reserves the next `new_ranks` tickets of the
    ///    queue of joining processes, and publishes the offer under the
    ///    root store (the store the group was created with) and the
    ///    group's name: the new generation, its store scope, the old and
    ///    new world sizes, and whether a communicator grows. Every rank,
    ///    old and new, then meets at the new generation's scope, each
    ///    saying whether its NCCL can grow; a new process that does not
    ///    come in time fails the grow here, with nothing changed (retry the
    ///    grow; the late process takes a new ticket).
    /// 4. **Grow.** Only now rank 0 makes the grow's unique id
    ///    (`ncclCommGetUniqueId`: NCCL allows one unused id per
    ///    communicator, so an id made for a grow that never happens would
    ///    stop every later one) and shares it; the ranks call
    ///    `ncclCommGrow` (bounded by the timeout). A grow that fails on any
    ///    rank is dropped everywhere; a new process whose NCCL cannot grow
    ///    makes it a re-creation. Every other communicator is made afresh
    ///    through the store under the new generation when first used
    ///    ([`GrowPath`](crate::GrowPath)).
    /// 5. **Retire.** This generation's handles then refuse every call
    ///    with [`GroupError::Healed`](crate::GroupError::Healed) naming the new generation, and its
    ///    communicators are released. The current ranks keep their ranks;
    ///    the new processes get the ranks from the old world size on, in
    ///    ticket order.
    ///
    /// Threads: concurrent calls on one generation with the same
    /// `new_ranks` make one grow; every caller gets the same [`Grown`].
    ///
    /// # Errors
    /// Nothing changed unless said otherwise.
    /// - [`GroupError::InvalidArgument`](crate::GroupError::InvalidArgument) for `new_ranks` of 0 or a world
    ///   size past [`MAX_RANKS`](nccl_rendezvous::meet::MAX_RANKS), and for a group that failed or was
    ///   aborted: heal it first ([`ProcessGroup::heal`]), then grow the
    ///   group the heal returns; and for a sub-group
    ///   ([`ProcessGroup::split_group`](crate::SubGroups::split_group): grow the root group, then split
    ///   the grown group again).
    /// - [`GroupError::GraphsAlive`](crate::GroupError::GraphsAlive): a [`GroupGraph`](crate::GroupGraph)
    ///   of this generation lives.
    /// - [`GroupError::Destroyed`](crate::GroupError::Destroyed); [`GroupError::Healed`](crate::GroupError::Healed) for a
    ///   generation a heal or an earlier grow replaced.
    /// - [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported) naming
    ///   NCCL 2.29.2, when the group has a communicator to grow and the
    ///   loaded NCCL has no `ncclCommGrow`: grow with
    ///   [`GrowOptions::with_grow`]`(false)`, or re-create the group.
    /// - [`GroupError::Timeout`](crate::GroupError::Timeout): the operations issued before did not end
    ///   in time.
    /// - A store error: a rank or a new process did not come in time
    ///   ([`StoreError::Absent`](crate::StoreError::Absent) naming them),
    ///   or the store failed.
    fn grow(&self, new_ranks: usize, options: &GrowOptions) -> Result<Grown>;
}

impl Recovery for ProcessGroup {
    fn failure(&self) -> Option<Arc<Failure>> {
        self.inner.failure.get().cloned()
    }

    fn heal(&self, options: &HealOptions) -> Result<Healed> {
        self.heal_generation(options)
    }

    fn grow(&self, new_ranks: usize, options: &GrowOptions) -> Result<Grown> {
        self.grow_generation(new_ranks, options)
    }
}
