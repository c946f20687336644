//! Which numbering a root or a peer counts in.
//!
//! A sub-group has two numberings: its own ranks (`0..world_size`, a
//! [`GroupRank`]) and the root group's ranks of its members (a
//! [`GlobalRank`], what [`ProcessGroup::global_ranks`] lists). Every
//! operation that takes a root or a peer takes [`impl Into<Rank>`](Rank),
//! so the argument says which it is:
//!
//! * a plain `usize`, or [`GlobalRank`], is a global rank: torch's `src=`
//!   and `dst=`;
//! * [`GroupRank`] is a rank of this group: torch's `group_src=` and
//!   `group_dst=`.
//!
//! On a root group the two coincide. A global rank that is not a member,
//! or a group rank past the group's size, is refused with
//! [`GroupError::InvalidArgument`] naming both numberings.
//!
//! [`ProcessGroup::global_ranks`]: crate::SubGroups::global_ranks

use std::fmt;

use crate::error::GroupError;

/// A rank of this group (torch's `group_src=`/`group_dst=`): its position
/// among the group's members.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupRank(pub usize);

/// A rank of the root group (torch's `src=`/`dst=`), the numbering every
/// sub-group of it shares; a plain `usize` root or peer means the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GlobalRank(pub usize);

/// A root or peer argument in either numbering: made from a `usize` (a
/// global rank), a [`GlobalRank`] or a [`GroupRank`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rank {
    /// A rank of the root group.
    Global(usize),
    /// A rank of the group the operation runs on.
    Group(usize),
}

impl From<usize> for Rank {
    fn from(rank: usize) -> Self {
        Rank::Global(rank)
    }
}

impl From<GlobalRank> for Rank {
    fn from(rank: GlobalRank) -> Self {
        Rank::Global(rank.0)
    }
}

impl From<GroupRank> for Rank {
    fn from(rank: GroupRank) -> Self {
        Rank::Group(rank.0)
    }
}

impl fmt::Display for Rank {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rank::Global(rank) => write!(f, "global rank {rank}"),
            Rank::Group(rank) => write!(f, "group rank {rank}"),
        }
    }
}

/// A group's two numberings, as an operation resolves its root or peer:
/// the root group's rank of each member, and the NCCL ranks each member
/// holds (one per local device in the list forms: member `m`'s device
/// `i` is NCCL rank `m x devices + i`, in both numberings).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Numbering<'a> {
    /// The members' global ranks: `0..n` for a root group of `n`, a list
    /// in group rank order for a sub-group.
    pub(crate) members: Members<'a>,
    /// NCCL ranks per member.
    pub(crate) devices: usize,
}

/// The global ranks of a group's members.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Members<'a> {
    /// A root group of this many: its ranks are the global ranks.
    Root(usize),
    /// A sub-group: the global rank of each member, in group rank order.
    Sub(&'a [usize]),
}

impl Members<'_> {
    fn len(&self) -> usize {
        match self {
            Members::Root(size) => *size,
            Members::Sub(ranks) => ranks.len(),
        }
    }

    /// The group rank of the member of global rank `global`.
    fn position(&self, global: usize) -> Option<usize> {
        match self {
            Members::Root(size) => (global < *size).then_some(global),
            Members::Sub(ranks) => ranks.iter().position(|&member| member == global),
        }
    }
}

impl fmt::Display for Members<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Members::Root(size) => write!(f, "0..{size}"),
            Members::Sub(ranks) => write!(f, "{ranks:?}"),
        }
    }
}

impl Numbering<'_> {
    /// The group's NCCL rank of `rank` (argument `argument`), checked: a
    /// global rank must be a member's, a group rank in range.
    pub(crate) fn resolve(&self, argument: &'static str, rank: Rank) -> Result<usize, GroupError> {
        let devices = self.devices.max(1);
        let resolved = match rank {
            Rank::Group(group) => (group < self.members.len() * devices).then_some(group),
            Rank::Global(global) => self
                .members
                .position(global / devices)
                .map(|member| member * devices + global % devices),
        };
        resolved.ok_or_else(|| GroupError::InvalidArgument {
            argument,
            expected: self.expected(),
            given: match rank {
                Rank::Global(_) => format!("{rank}, not a member of this group"),
                Rank::Group(_) => format!("{rank}, past the group's size"),
            },
        })
    }

    /// [`Numbering::resolve`] of anything that is a [`Rank`]: the rank on
    /// the group's communicator, as nccl-core's operations take it.
    pub(crate) fn comm_rank(
        &self,
        argument: &'static str,
        rank: impl Into<Rank>,
    ) -> Result<usize, GroupError> {
        self.resolve(argument, rank.into())
    }

    /// [`Numbering::comm_rank`] of a peer process (sends and receives go
    /// to the same device of another member, whatever the device count).
    pub(crate) fn member(
        &self,
        argument: &'static str,
        rank: impl Into<Rank>,
    ) -> Result<usize, GroupError> {
        Numbering {
            devices: 1,
            ..*self
        }
        .comm_rank(argument, rank)
    }

    /// Both numberings, for a refusal.
    fn expected(&self) -> String {
        let members = self.members.len();
        if self.devices > 1 {
            format!(
                "a GroupRank in 0..{} or a global rank of the members {} (x {} devices + index)",
                members * self.devices,
                self.members,
                self.devices
            )
        } else {
            format!(
                "a GroupRank in 0..{members} or a global rank (usize or GlobalRank) of the members {}",
                self.members
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DP: Numbering<'static> = Numbering {
        members: Members::Sub(&[1, 3]),
        devices: 1,
    };

    #[test]
    fn a_plain_usize_is_a_global_rank() {
        assert_eq!(DP.resolve("root", 1.into()).unwrap(), 0);
        assert_eq!(DP.resolve("root", 3.into()).unwrap(), 1);
        assert_eq!(DP.resolve("root", GlobalRank(3).into()).unwrap(), 1);
    }

    #[test]
    fn a_group_rank_is_a_position() {
        assert_eq!(DP.resolve("root", GroupRank(0).into()).unwrap(), 0);
        assert_eq!(DP.resolve("root", GroupRank(1).into()).unwrap(), 1);
    }

    #[test]
    fn a_non_member_or_a_rank_past_the_size_is_refused_naming_both_numberings() {
        for (rank, given) in [
            (Rank::Global(0), "global rank 0, not a member of this group"),
            (Rank::Global(2), "global rank 2, not a member of this group"),
            (Rank::Group(2), "group rank 2, past the group's size"),
        ] {
            match DP.resolve("root", rank) {
                Err(GroupError::InvalidArgument {
                    argument,
                    expected,
                    given: seen,
                }) => {
                    assert_eq!(argument, "root");
                    assert_eq!(seen, given);
                    assert!(expected.contains("GroupRank in 0..2"), "{expected}");
                    assert!(expected.contains("[1, 3]"), "{expected}");
                }
                other => panic!("{rank}: {other:?}"),
            }
        }
    }

    #[test]
    fn list_forms_number_each_members_devices() {
        let two_devices = Numbering {
            members: Members::Sub(&[1, 3]),
            devices: 2,
        };
        // Global NCCL rank 7 is process 3's second device: member 1's.
        assert_eq!(two_devices.resolve("root", 7.into()).unwrap(), 3);
        assert_eq!(two_devices.resolve("root", 2.into()).unwrap(), 0);
        assert_eq!(two_devices.resolve("root", GroupRank(3).into()).unwrap(), 3);
        assert!(two_devices.resolve("root", 4.into()).is_err());
        assert!(two_devices.resolve("root", GroupRank(4).into()).is_err());
    }

    #[test]
    fn a_root_group_numbers_alike() {
        let root = Numbering {
            members: Members::Root(4),
            devices: 1,
        };
        for rank in 0..4 {
            assert_eq!(root.resolve("root", rank.into()).unwrap(), rank);
            assert_eq!(root.resolve("root", GroupRank(rank).into()).unwrap(), rank);
        }
        assert!(root.resolve("root", 4.into()).is_err());
        assert!(root.resolve("root", GroupRank(4).into()).is_err());
    }
}
