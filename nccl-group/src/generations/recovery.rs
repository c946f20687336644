//! [`Recovery`]: how a group goes on after a failure, by a heal without
//! the lost ranks or a grow that takes new ones, and what an elastic
//! trainer needs around them: the processes waiting to join, the store,
//! and the ranks' commit vote.

use std::sync::Arc;

use nccl_rendezvous::Store;

use crate::engine::group::ProcessGroup;
use crate::error::Result;
use crate::failure::Failure;
use crate::generations::grow::offer::pending;
use crate::generations::grow::options::{GrowOptions, Grown};
use crate::generations::heal::options::{HealOptions, Healed};

/// How a group goes on after a failure: [`failure`](Recovery::failure)
/// says why it stopped, [`heal`](Recovery::heal) makes the next generation
/// without the lost ranks, [`grow`](Recovery::grow) one with new ranks
/// (which join with
/// [`GroupBuilder::join_grown`](crate::GroupBuilder::join_grown)),
/// [`pending_joins`](Recovery::pending_joins) says how many processes wait
/// to join, [`agree`](Recovery::agree) is the ranks' commit vote and
/// [`store`](Recovery::store) the store they meet at
/// (`docs/group/elastic.md`).
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
    ///    fail. The failure releases the communicators, each on a thread
    ///    of its own: revoked (NCCL 2.28.7 or later, [`GroupOptions::revoke_on_failure`](crate::GroupOptions::revoke_on_failure)),
    ///    which the heal waits for, or aborted, whose start it waits for
    ///    (NCCL's first step sets the flags its kernels stop at; the
    ///    group's streams wait for those kernels on the GPU) while the
    ///    teardown ends off its path.
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
    ///    ([`HealPath::Recreated`](crate::HealPath::Recreated)). The revoked parents are then aborted
    ///    on threads of their own, never destroyed (NCCL's
    ///    revoke-then-destroy use-after-free, NVIDIA/nccl PR 2251).
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

    /// How many processes wait to join the group: those that called
    /// [`GroupBuilder::join_grown`](crate::GroupBuilder::join_grown) with
    /// its name at its store and that no grow has offered a place yet
    /// (the tickets taken less the tickets the grows so far covered).
    ///
    /// A trainer grows by this many
    /// ([`grow`](Recovery::grow)`(group.pending_joins()?, ..)`) when it is
    /// not 0. Every rank reads the store on its own, so ranks may see
    /// different counts while a process is joining: let one rank decide
    /// (rank 0, sharing its count through the [`store`](Recovery::store)
    /// or an [`agree`](Recovery::agree)), or read it at a step every rank
    /// reaches after the joiner came. A joiner whose own wait ran out
    /// ([`GroupError::NotOffered`](crate::GroupError::NotOffered)) still
    /// counts: the grow that covers its ticket fails when it does not come
    /// (nothing changes), and that ticket is then granted.
    ///
    /// # Errors
    /// - [`GroupError::InvalidArgument`](crate::GroupError::InvalidArgument)
    ///   for a sub-group (processes join the root group).
    /// - The store's error.
    fn pending_joins(&self) -> Result<usize>;

    /// The store the group was created with (its root store, the same
    /// for every generation a heal or a grow makes), for a protocol of
    /// the caller's own beside the group's: a trainer's checkpoint step, a
    /// quorum, a heartbeat.
    ///
    /// The group keeps its keys below its name (`<name>/...`): keep yours
    /// under another prefix ([`PrefixStore`](crate::store::PrefixStore), or
    /// a [`Scope`](crate::store::meet::Scope) of your own).
    fn store(&self) -> Arc<dyn Store>;

    /// The ranks' commit vote (torchft's `should_commit`): every rank
    /// calls it once per step with its own verdict `ok` (its gradients
    /// finite, its step without error), and every rank gets `true` only
    /// when every rank voted `true`, else `false`; all get the same answer.
    ///
    /// A rank whose vote does not come within the group's
    /// [`GroupOptions::timeout`](crate::GroupOptions::timeout) makes the vote
    /// an error rather than `false`: a missing rank is a failure to heal
    /// from, not a step to skip. The first rank whose wait runs out decides
    /// it for all, the late rank included: each gets
    /// [`StoreError::Absent`](crate::StoreError::Absent) naming the ranks
    /// whose vote had not come ([`ErrorKind::Timeout`](crate::ErrorKind::Timeout)).
    ///
    /// Every rank must call it the same number of times in the same order
    /// (one vote at a time per rank: votes are numbered per process). The
    /// vote's store keys are deleted once every rank has read the outcome.
    /// A heal or a grow starts the numbering again in the new generation.
    ///
    /// # Errors
    /// - [`GroupError::InvalidArgument`](crate::GroupError::InvalidArgument)
    ///   for a group that failed or was aborted (a rank a heal excluded has
    ///   such a group, and must leave): heal, then vote in the healed group.
    /// - [`GroupError::Destroyed`](crate::GroupError::Destroyed);
    ///   [`GroupError::Healed`](crate::GroupError::Healed) for a generation
    ///   a heal or a grow replaced.
    /// - The group's failure ([`GroupError::Failed`](crate::GroupError::Failed))
    ///   when it fails during the wait.
    /// - [`StoreError::Absent`](crate::StoreError::Absent) as above, or the
    ///   store's error.
    fn agree(&self, ok: bool) -> Result<bool>;
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

    fn pending_joins(&self) -> Result<usize> {
        self.refuse_subgroup("process group to join", "read the pending joins of")?;
        let m = self.inner.cache.membership();
        pending(&*m.root, &m.name)
    }

    fn store(&self) -> Arc<dyn Store> {
        Arc::clone(&self.inner.cache.membership().root)
    }

    fn agree(&self, ok: bool) -> Result<bool> {
        self.vote(ok)
    }
}
