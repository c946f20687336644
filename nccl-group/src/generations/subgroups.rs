//! Sub-groups ([`ProcessGroup::split_group`], [`ProcessGroup::new_group`]):
//! groups of some of a group's ranks, each a full [`ProcessGroup`] (its
//! own communicators, watchdog entry, flight recorder, `Work`s and store
//! scope), split from the parent's communicator with `ncclCommSplit`
//! where every rank has one to split, and mapping their ranks to the
//! parent's and the root group's.

mod plan;

use std::sync::{Arc, PoisonError, Weak};

use crate::lineage::{SplitPath, SubGroup};
use plan::{Candidate, Layout, Proposal, Verdict, decide, decode, encode};

use crate::engine::failing::Finish;
use crate::engine::group::{Inner, LIVE, ProcessGroup};
use crate::engine::key::{CommClass, CommKey};
use crate::engine::local_comms::LocalComms;
use crate::error::{GroupError, Result};
use crate::failure::FailureCause;
use crate::protocols::{SPLIT, SUBGROUPS};
use crate::ranks::{GroupRank, Members, Numbering, Rank};
use nccl_rendezvous::Store;
use nccl_rendezvous::meet::Meeting;
use nccl_rendezvous::meet::Scope;

/// The variable with which NCCL overrides `Config::with_split_share` when the
/// parent is created (a value other than 0 or 1 counts as 0).
const SPLIT_SHARE_VARIABLE: &str = "NCCL_COMM_SPLIT_SHARE_RESOURCES";

impl Inner {
    /// The names of the sub-groups split from this group that are live
    /// here (not destroyed, failed or aborted, and not dropped).
    pub(crate) fn live_subgroups(&self) -> Vec<String> {
        let mut children = self.children.lock().unwrap_or_else(PoisonError::into_inner);
        children.groups.retain(|group| group.strong_count() > 0);
        children
            .groups
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|group| group.state.load(std::sync::atomic::Ordering::Acquire) == LIVE)
            .map(|group| group.cache.membership().name.clone())
            .collect()
    }
}

/// A communicator split from the parent's, under the cache key it takes
/// in the sub-group.
type Child = Option<(CommKey, LocalComms)>;

impl Rank {
    /// The rank of `group` this names, checked as every root and peer
    /// argument is: a global rank must be a member's, a group rank below
    /// the group's size.
    ///
    /// # Errors
    /// [`GroupError::InvalidArgument`] naming both numberings.
    pub fn in_group(self, group: &ProcessGroup) -> Result<GroupRank> {
        group.numbering(1).resolve("rank", self).map(GroupRank)
    }
}

impl ProcessGroup {
    /// This group's numberings, for an operation on `devices` NCCL ranks
    /// per member to resolve its root or peer.
    pub(crate) fn numbering(&self, devices: usize) -> Numbering<'_> {
        Numbering {
            members: match self.subgroup() {
                Some(sub) => Members::Sub(&sub.global_ranks),
                None => Members::Root(self.world_size()),
            },
            devices,
        }
    }

    /// Refuses to heal or grow (`action`, the argument `argument`) a
    /// sub-group: its ranks are its parent's, which a heal or a grow of
    /// its own would leave behind.
    pub(crate) fn refuse_subgroup(&self, argument: &'static str, action: &str) -> Result<()> {
        let Some(sub) = self.subgroup() else {
            return Ok(());
        };
        Err(GroupError::InvalidArgument {
            argument,
            expected: format!(
                "a root group ({action} the root group, then split the group it returns again)"
            ),
            given: format!("{:?}, a sub-group of {:?}", self.name(), sub.parent),
        })
    }

    /// [`split_group`](Self::split_group) of `lists` (the argument
    /// `argument`).
    fn split(&self, argument: &'static str, lists: &[&[usize]]) -> Result<Option<ProcessGroup>> {
        // Held throughout: splits of one group on one process are one at a
        // time, and a destroy waits for a split in progress.
        let mut children = self
            .inner
            .children
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let index = children.made;
        children.made += 1;
        let m = self.inner.cache.membership();
        let scope = m.protocol(SUBGROUPS)?.index(index);
        let meeting = m.meeting(&scope.clone().purpose(SPLIT)?, m.rank, m.world_size)?;
        let layout = match self
            .check_live()
            .and_then(|()| self.check_not_suspended("splitting it"))
            .and_then(|()| Layout::new(lists, m.world_size, argument))
        {
            Ok(layout) => layout,
            Err(error) => {
                // The other ranks stop waiting for this one at once.
                let _ = meeting.fail(&error.to_string(), 1);
                return Err(error);
            }
        };
        let place = layout.place(m.rank);
        let (child, path) = match self.plan(&meeting, &layout)? {
            Verdict::Refused { expected, given } => {
                return Err(GroupError::InvalidArgument {
                    argument,
                    expected,
                    given,
                });
            }
            Verdict::Lazy(reason) => {
                crate::diagnostics::trace::event!(info, group = %m.name, %reason, "split_group takes the lazy path: each sub-group makes its communicators when first used");
                (None, SplitPath::Lazy { reason })
            }
            Verdict::Split(key) => (
                self.split_communicator(&meeting, &key, place, index)?,
                SplitPath::Split,
            ),
        };
        let Some((color, rank)) = place else {
            return Ok(None);
        };
        // Each list's sub-group meets in a scope of its own.
        let group = self.subgroup_of(
            (index, color),
            m.rooted(scope.index(color as u64)),
            layout.list(color),
            rank,
            path,
        )?;
        if let Some((key, comms)) = child {
            group.inner.cache.adopt(key, comms)?;
        }
        children.groups.retain(|group| group.strong_count() > 0);
        children.groups.push(Arc::downgrade(&group.inner));
        crate::diagnostics::trace::event!(info, group = %m.name, subgroup = %group.name(), rank, path = ?group.subgroup().map(SubGroup::path), "split");
        Ok(Some(group))
    }

    /// The ranks compare their lists and candidates through rank 0, which
    /// decides for all (one gather and one answer: O(world size) store
    /// operations in all).
    fn plan(&self, meeting: &Meeting<Arc<dyn Store>>, layout: &Layout) -> Result<Verdict> {
        let mine = Proposal {
            lists: layout.text(),
            candidate: self.candidate(),
        };
        // Rank 0's gather names the rank that did not come: published,
        // the others stop waiting for the verdict at once, with that name.
        let gathered = meeting
            .gather(0, "plan", &encode(&mine))
            .inspect_err(|error| publish_root_failure(meeting, error))?;
        let verdict = meeting.share_from(0, "verdict", || {
            gathered
                .iter()
                .flatten()
                .map(|bytes| decode::<Proposal>("split proposal", bytes))
                .collect::<Result<Vec<_>>>()
                .map(|proposals| encode(&decide(&proposals)))
                .inspect_err(|error| {
                    let _ = meeting.fail(&error.to_string(), 1);
                })
        })?;
        decode("split verdict", &verdict)
    }

    /// The communicator this rank can split: its first one-device
    /// collective communicator in store-key order (the one every
    /// collective of a process with one GPU uses), unless its
    /// communicators share their resources with their splits.
    fn candidate(&self) -> Candidate {
        if self.shares_with_splits() {
            return Candidate::Shared;
        }
        self.inner
            .cache
            .keyed()
            .into_iter()
            .find(|(_, key, _)| key.class() == (CommClass::Collective { devices: 1 }))
            .map_or(Candidate::None, |(store_key, _, _)| {
                Candidate::Key(store_key)
            })
    }

    /// Whether NCCL makes this group's communicators share their resources
    /// with those split from them: `NCCL_COMM_SPLIT_SHARE_RESOURCES` when
    /// it holds an integer (NCCL lets it override the config, and counts
    /// one other than 0 or 1 as 0), else the group's `Config::with_split_share`.
    fn shares_with_splits(&self) -> bool {
        let variable = std::env::var(SPLIT_SHARE_VARIABLE).ok();
        match variable.and_then(|value| value.trim().parse::<i64>().ok()) {
            Some(value) => value == 1,
            None => self.options().config.split_share_option() == Some(true),
        }
    }

    /// Every rank splits the communicator of `store_key`, this rank into
    /// the list and position of `place` (none: `NCCL_SPLIT_NOCOLOR`); then
    /// the ranks check that every split worked before any sub-group uses
    /// one.
    ///
    /// A split that failed anywhere fails the group everywhere
    /// ([`FailureCause::Split`]).
    fn split_communicator(
        &self,
        meeting: &Meeting<Arc<dyn Store>>,
        store_key: &str,
        place: Option<(usize, usize)>,
        index: u64,
    ) -> Result<Child> {
        let m = self.inner.cache.membership();
        let found = self
            .inner
            .cache
            .keyed()
            .into_iter()
            .find(|(name, _, _)| name == store_key);
        let split = match found {
            Some((_, key, comms)) => {
                // Positions within a world already checked against i32::MAX.
                let (color, rank) =
                    place.map_or((None, 0), |(color, rank)| (Some(color as i32), rank));
                self.options()
                    .comm_config()
                    .and_then(|config| comms.split(color, rank, config, m.timeout))
                    .map(|child| child.map(|child| (key, child)))
            }
            // Its communicators were released since it proposed this one.
            None => Err(GroupError::Closed {
                name: m.name.clone(),
            }),
        };
        let child = match split {
            Ok(child) => child,
            Err(error) => {
                let text = error.to_string();
                // The others stop waiting for this rank's outcome at once.
                let _ = meeting.fail(&text, 1);
                return Err(self.fail_split(index, error.is_timeout(), text));
            }
        };
        let everywhere = meeting
            .gather(0, "split", b"")
            .inspect_err(|error| publish_root_failure(meeting, error))
            .and_then(|_| {
                meeting.share_from(0, "outcome", || {
                    Ok::<_, nccl_rendezvous::StoreError>(Vec::new())
                })
            });
        match everywhere {
            Ok(_) => Ok(child),
            Err(error) => {
                if let Some((_, comms)) = &child {
                    comms.abort();
                }
                Err(self.fail_split(index, error.is_timeout(), error.to_string()))
            }
        }
    }

    /// Fails the group after split number `index` failed (`error`, which
    /// `timed_out`) on this rank or another, and returns the failure.
    fn fail_split(&self, index: u64, timed_out: bool, error: String) -> GroupError {
        let cause = FailureCause::Split {
            index,
            timed_out,
            error,
        };
        self.inner.fail(cause, None, Finish::Here);
        match self.check_live() {
            Err(failed) => failed,
            // Not reached: `fail` leaves the group failed, or found it
            // failed, aborted or destroyed already.
            Ok(()) => GroupError::Closed {
                name: self.name().to_string(),
            },
        }
    }

    /// The sub-group of list `color` of split number `index`
    /// (`which`), of the ranks `list`, as its rank `rank`, its store keys
    /// under `scope` (from the root store), made by `path`.
    ///
    /// # Errors
    /// A scope the store refuses; no watchdog thread.
    fn subgroup_of(
        &self,
        which: (u64, usize),
        scope: Scope,
        list: &[usize],
        rank: usize,
        path: SplitPath,
    ) -> Result<ProcessGroup> {
        let (index, color) = which;
        let m = self.inner.cache.membership();
        let (root, global_ranks) = match self.subgroup() {
            Some(sub) => (sub.root.clone(), sub.global_of(list)),
            None => (m.name.clone(), list.to_vec()),
        };
        let lineage = SubGroup {
            parent: m.name.clone(),
            parent_generation: m.generation,
            index,
            color,
            parent_ranks: list.to_vec(),
            root,
            global_ranks,
            path,
        };
        let name = Scope::path(&m.name)?.purpose(&format!("sub{index}.{color}"))?;
        let membership = m.descendant(name.to_string(), 0, (rank, list.len()), scope)?;
        let group = Self::start(
            membership,
            self.options().clone(),
            self.inner.local_rank,
            Arc::clone(&self.inner.cache.factory().pools),
            Some(Arc::new(lineage)),
        )?;
        Ok(ProcessGroup {
            op_timeout: self.op_timeout,
            stream_mode: self.stream_mode,
            ..group
        })
    }
}

/// On rank 0, publishes the error of its gather (which names the ranks
/// that did not come) so that the others stop waiting for its answer.
fn publish_root_failure(meeting: &Meeting<Arc<dyn Store>>, error: &nccl_rendezvous::StoreError) {
    if meeting.rank() == 0 {
        let _ = meeting.fail(&error.to_string(), 1);
    }
}

/// A group's sub-groups and its two rank numberings: make sub-groups
/// ([`split_group`](SubGroups::split_group),
/// [`new_group`](SubGroups::new_group)), see where one sits
/// ([`subgroup`](SubGroups::subgroup)) and convert between its group ranks
/// and the root group's global ranks.
///
/// Sealed, implemented for [`ProcessGroup`] only, and in the
/// [`prelude`](crate::prelude).
pub trait SubGroups: crate::sealed::Sealed {
    /// Splits the group into sub-groups (torch's `split_group`) by one
    /// `ncclCommSplit` after the group's first collective, or else lazily:
    /// each sub-group then makes its communicators when first used.
    ///
    /// Every rank of this group calls it with the same rank lists (ranks of
    /// this group); each rank gets the sub-group of the list that holds it,
    /// ranked by its position there, or `None` when no list does. Which path
    /// was taken is [`SubGroup::path`]; the lazy one is also logged at info
    /// level (feature `tracing`) with its reason. `docs/group/sub-groups.md`
    /// has the rules and an example.
    ///
    /// * **Communicators.** Where every rank has a one-device collective
    ///   communicator (after the group's first collective on a process with
    ///   one GPU), it is split with one `ncclCommSplit` for all the lists
    ///   (`NCCL_SPLIT_NOCOLOR` for the ranks in none), bounded by
    ///   [`GroupOptions::timeout`](crate::GroupOptions::timeout), and each
    ///   sub-group starts with its part ([`SplitPath::Split`]). Otherwise,
    ///   and where the group's communicators would share their resources
    ///   with what is split from them (`Config::with_split_share`, or
    ///   `NCCL_COMM_SPLIT_SHARE_RESOURCES`: NCCL would then give the
    ///   sub-groups the parent's abort flag), each sub-group makes its own
    ///   when first used, through its store ([`SplitPath::Lazy`]). Every
    ///   other communicator of a sub-group (other devices, pairs) is made
    ///   that way too.
    /// * **A full group.** A sub-group has the options, local rank and
    ///   handle settings (operation timeout, stream mode) of this handle,
    ///   its own watchdog entry, flight recorder (under the name
    ///   `<parent>/sub<index>.<list>`: [`SubGroup::index`],
    ///   [`SubGroup::color`]), `Work`s and failure,
    ///   and its store keys under this group's, so its own communicators
    ///   meet there. Its failure names each rank's global rank too
    ///   ([`Failure::subgroup`](crate::Failure::subgroup)). It can be split
    ///   again.
    /// * **Independent.** The communicators of a sub-group share nothing
    ///   with the parent's or the other sub-groups': a failure, abort or
    ///   drop of one leaves the others as they are (an operation of theirs
    ///   that involves a lost rank fails on its own).
    /// * **Order.** Every rank makes the same calls of `split_group` and
    ///   [`new_group`](Self::new_group) on a group, in the same order, as
    ///   with collectives; the ranks compare their lists through the store
    ///   first (one gather to rank 0 and one answer), so lists that differ
    ///   are refused on every rank rather than left to NCCL.
    /// * **The end.** Destroy the sub-groups before the group: its
    ///   [`destroy`](crate::Lifecycle::destroy) refuses while one is live here
    ///   ([`GroupError::SubGroupsAlive`](crate::GroupError::SubGroupsAlive)); [`shutdown`](crate::Lifecycle::shutdown)
    ///   keeps the store's host up until every rank is done.
    ///
    /// # Errors
    /// Nothing changed unless said otherwise.
    /// - [`GroupError::InvalidArgument`] for no list, an empty list, a rank
    ///   outside the group, a rank twice in a list or in two lists (the
    ///   other ranks' calls then fail with
    ///   [`StoreError::PeerFailed`](nccl_rendezvous::StoreError::PeerFailed) naming
    ///   this rank's error), and on every rank when the ranks passed
    ///   different lists (naming rank 0's and the first that differs).
    /// - The group's own state: [`GroupError::Failed`], `Aborted`,
    ///   `Destroyed`, `Healed`.
    /// - A store error: a rank did not come in time
    ///   ([`StoreError::Absent`](nccl_rendezvous::StoreError::Absent) naming it).
    /// - [`GroupError::Failed`] when the split failed or ran past the
    ///   timeout on any rank: NCCL's split runs over the group's
    ///   communicator, which is then in an unknown state, so the group
    ///   fails ([`FailureCause::Split`]) on every rank.
    /// - [`GroupError::WatchdogStart`].
    fn split_group<R: AsRef<[usize]>>(&self, groups: &[R]) -> Result<Option<ProcessGroup>>;

    /// A sub-group of `ranks` (ranks of this group), torch's `new_group`:
    /// every rank of this group calls it with the same ranks; those in
    /// `ranks` get the sub-group, ranked by their position in `ranks`
    /// (torch sorts them: pass them sorted for torch's numbering), the
    /// others `None`.
    ///
    /// [`split_group`](Self::split_group) with one list: the same
    /// communicators, rules and errors.
    ///
    /// # Errors
    /// As [`split_group`](Self::split_group).
    fn new_group(&self, ranks: &[usize]) -> Result<Option<ProcessGroup>>;

    /// Where this group sits in the group it was split from; `None` for a
    /// root group (made by [`builder`](crate::ProcessGroup::builder), `from_env`, a heal
    /// or a grow).
    fn subgroup(&self) -> Option<&SubGroup>;

    /// The root group's rank of this group's rank `group_rank` (torch's
    /// `get_global_rank`): itself for a root group; `None` outside
    /// `0..world_size`.
    fn global_rank(&self, group_rank: usize) -> Option<usize>;

    /// This group's rank of the root group's rank `global_rank` (torch's
    /// `get_group_rank`); `None` when that rank is not in this group.
    fn group_rank(&self, global_rank: usize) -> Option<usize>;

    /// The root group's rank of each of this group's ranks, in rank order
    /// (torch's `get_process_group_ranks`); `0..world_size` for a root
    /// group.
    fn global_ranks(&self) -> Vec<usize>;

    /// The parent's rank of each of this group's ranks, in rank order;
    /// `0..world_size` for a root group (its own ranks).
    fn parent_ranks(&self) -> Vec<usize>;
}

impl SubGroups for ProcessGroup {
    fn split_group<R: AsRef<[usize]>>(&self, groups: &[R]) -> Result<Option<ProcessGroup>> {
        let lists: Vec<&[usize]> = groups.iter().map(AsRef::as_ref).collect();
        self.split("rank lists", &lists)
    }

    fn new_group(&self, ranks: &[usize]) -> Result<Option<ProcessGroup>> {
        self.split("ranks", &[ranks])
    }

    fn subgroup(&self) -> Option<&SubGroup> {
        self.inner.lineage.as_deref()
    }

    fn global_rank(&self, group_rank: usize) -> Option<usize> {
        match self.subgroup() {
            Some(sub) => sub.global_ranks.get(group_rank).copied(),
            None => (group_rank < self.world_size()).then_some(group_rank),
        }
    }

    fn group_rank(&self, global_rank: usize) -> Option<usize> {
        match self.subgroup() {
            Some(sub) => sub.global_ranks.iter().position(|&g| g == global_rank),
            None => (global_rank < self.world_size()).then_some(global_rank),
        }
    }

    fn global_ranks(&self) -> Vec<usize> {
        self.subgroup().map_or_else(
            || (0..self.world_size()).collect(),
            |sub| sub.global_ranks.clone(),
        )
    }

    fn parent_ranks(&self) -> Vec<usize> {
        self.subgroup().map_or_else(
            || (0..self.world_size()).collect(),
            |sub| sub.parent_ranks.clone(),
        )
    }
}
