//! Where a group comes from: a sub-group's place (its parent, its ranks
//! there and in the root group) and how its communicators were made, and
//! how a heal or a grow carried the communicators into the next
//! generation.

use std::fmt;

/// How a sub-group got its communicators ([`SubGroup::path`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SplitPath {
    /// `ncclCommSplit` of the parent's one-device collective communicator
    /// (the one every collective of a process with one GPU uses): the
    /// sub-group starts with it.
    ///
    /// Its other communicators (other devices, several devices, pairs) are made
    /// through its store when first used.
    Split,
    /// No split: the sub-group makes every communicator through its store
    /// when first used (an `ncclCommInitRank` among its members only).
    Lazy {
        /// Why not a split.
        reason: String,
    },
}

/// Where a sub-group made by [`ProcessGroup::split_group`] or
/// [`ProcessGroup::new_group`] sits: the group it was split from (its
/// *parent*), each of its ranks' rank there and in the *root* group (the
/// group made by [`ProcessGroup::builder`] or `from_env` at
/// the top of the chain of splits: the *global* ranks), and how its
/// communicators were made. [`ProcessGroup::subgroup`] returns it.
///
/// [`ProcessGroup::split_group`]: crate::SubGroups::split_group
/// [`ProcessGroup::new_group`]: crate::SubGroups::new_group
/// [`ProcessGroup::builder`]: crate::GroupBuilder
/// [`ProcessGroup::subgroup`]: crate::SubGroups::subgroup
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubGroup {
    pub(crate) parent: String,
    pub(crate) parent_generation: u64,
    pub(crate) index: u64,
    pub(crate) color: usize,
    pub(crate) parent_ranks: Vec<usize>,
    pub(crate) root: String,
    pub(crate) global_ranks: Vec<usize>,
    pub(crate) path: SplitPath,
}

impl SubGroup {
    /// The parent's name.
    pub fn parent_name(&self) -> &str {
        &self.parent
    }

    /// The parent's generation when it was split.
    pub fn parent_generation(&self) -> u64 {
        self.parent_generation
    }

    /// Which split of the parent made this sub-group: 0 for the first
    /// call of `split_group` or `new_group` on it, and so on (every rank
    /// numbers them alike, as every rank makes the same calls in the same
    /// order).
    pub fn index(&self) -> u64 {
        self.index
    }

    /// Which list of its split this sub-group is (its position among the
    /// lists of `split_group`; 0 for `new_group`).
    pub fn color(&self) -> usize {
        self.color
    }

    /// The parent's rank of each rank of this group, in this group's rank
    /// order (the rank list it was made from).
    pub fn parent_ranks(&self) -> &[usize] {
        &self.parent_ranks
    }

    /// The root group's name.
    pub fn root_name(&self) -> &str {
        &self.root
    }

    /// The root group's rank of each rank of this group, in this group's
    /// rank order (torch's `get_process_group_ranks`).
    pub fn global_ranks(&self) -> &[usize] {
        &self.global_ranks
    }

    /// Split from the parent's communicator, or made lazily.
    pub fn path(&self) -> &SplitPath {
        &self.path
    }

    /// The global ranks of the group ranks `ranks` (a rank outside the
    /// group stays as it is: it cannot come from the group's own reports).
    pub(crate) fn global_of(&self, ranks: &[usize]) -> Vec<usize> {
        ranks
            .iter()
            .map(|&rank| self.global_ranks.get(rank).copied().unwrap_or(rank))
            .collect()
    }

    /// `rank 3 of its parent "tp0"; global rank 5 of "world"` for group
    /// rank `rank` (the parent part only when the parent is not the root).
    pub(crate) fn place(&self, rank: usize) -> Place<'_> {
        Place { group: self, rank }
    }
}

/// Group rank `rank`'s place in the parent and the root, for messages
/// ([`SubGroup::place`]).
pub(crate) struct Place<'a> {
    group: &'a SubGroup,
    rank: usize,
}

impl fmt::Display for Place<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = self.group;
        let (Some(parent), Some(global)) =
            (g.parent_ranks.get(self.rank), g.global_ranks.get(self.rank))
        else {
            return write!(f, "not a rank of the sub-group of {:?}", g.parent);
        };
        if g.parent != g.root {
            write!(f, "rank {parent} of its parent {:?}; ", g.parent)?;
        }
        write!(f, "global rank {global} of {:?}", g.root)
    }
}

/// How a heal carried the communicators into the new generation.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HealPath {
    /// `ncclCommShrink` of the revoked communicators: `shrunk` of them
    /// carried over; the others (several devices, pairs, or a shrink that
    /// failed on a rank: `dropped`) are made afresh when first used.
    Shrunk {
        /// Communicators carried over by a shrink.
        shrunk: usize,
        /// Communicators left to be made afresh.
        dropped: usize,
    },
    /// No shrink: every communicator is made afresh under the new
    /// generation when first used, through the store.
    Recreated {
        /// Why not a shrink.
        reason: String,
    },
}

/// How a grow carried the communicators into the new generation.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum GrowPath {
    /// `ncclCommGrow` of the group's communicator: `grown` communicators
    /// carried over with the new ranks in them (one, or none when the grow
    /// failed on a rank, which drops it everywhere); the others (other
    /// devices, several devices, pairs: `dropped`) are made afresh when
    /// first used.
    Grown {
        /// Communicators carried over by a grow.
        grown: usize,
        /// Communicators left to be made afresh.
        dropped: usize,
    },
    /// No grow: every communicator is made afresh under the new
    /// generation when first used, through the store.
    Recreated {
        /// Why not a grow.
        reason: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(parent: &str, parent_ranks: Vec<usize>, global_ranks: Vec<usize>) -> SubGroup {
        SubGroup {
            parent: parent.to_string(),
            parent_generation: 0,
            index: 0,
            color: 0,
            parent_ranks,
            root: "world".to_string(),
            global_ranks,
            path: SplitPath::Split,
        }
    }

    #[test]
    fn a_place_names_the_parent_only_when_it_is_not_the_root() {
        let one_level = sub("world", vec![2, 3], vec![2, 3]);
        assert_eq!(one_level.place(1).to_string(), "global rank 3 of \"world\"");
        let nested = sub("world/sub0", vec![1, 0], vec![5, 4]);
        assert_eq!(
            nested.place(0).to_string(),
            "rank 1 of its parent \"world/sub0\"; global rank 5 of \"world\""
        );
        assert_eq!(
            nested.place(2).to_string(),
            "not a rank of the sub-group of \"world/sub0\""
        );
    }

    #[test]
    fn group_ranks_map_to_global_ones() {
        let group = sub("world", vec![1, 3], vec![1, 3]);
        assert_eq!(group.global_of(&[1, 0]), vec![3, 1]);
        // Not a rank of the group: left as it is.
        assert_eq!(group.global_of(&[7]), vec![7]);
    }
}
