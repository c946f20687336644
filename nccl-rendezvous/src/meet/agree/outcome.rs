//! What an agreement hands back: the [`Agreement`] of the next
//! generation, and why each rank left out of it was left out.

use std::collections::BTreeMap;

use super::reason::ExclusionReason;

/// One rank left out of the next generation, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Exclusion {
    /// Its rank in the generation that failed.
    pub rank: usize,
    /// Why it was left out.
    pub reason: ExclusionReason,
}

/// The decision every survivor of generation g returns: who goes on into
/// generation g + 1, with which new rank, and who was left out and why.
///
/// New ranks are dense and keep the old order: the survivor with the
/// smallest old rank is new rank 0, and so on. Every survivor gets an
/// equal `Agreement` but for [`Agreement::rank`] and
/// [`Agreement::previous_rank`], its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Agreement {
    pub(super) generation: u64,
    pub(super) previous_world_size: usize,
    pub(super) previous_rank: usize,
    pub(super) rank: usize,
    pub(super) survivors: Vec<usize>,
    /// The suspicions of the ranks left out: old rank, the arrived ranks
    /// that suspected it.
    ///
    /// A rank left out and absent here was not suspected.
    pub(super) suspected: BTreeMap<usize, Vec<usize>>,
    pub(super) decided_by: usize,
}

impl Agreement {
    /// The new generation, g + 1.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// This rank's new rank in generation g + 1.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The new world size: the number of survivors.
    pub fn world_size(&self) -> usize {
        self.survivors.len()
    }

    /// This rank's rank in generation g.
    pub fn previous_rank(&self) -> usize {
        self.previous_rank
    }

    /// The world size of generation g.
    pub fn previous_world_size(&self) -> usize {
        self.previous_world_size
    }

    /// The survivors' old ranks in ascending order: `survivors()[new]` is
    /// the old rank of new rank `new`.
    pub fn survivors(&self) -> &[usize] {
        &self.survivors
    }

    /// The new rank of old rank `old`, or `None` when it was left out (or
    /// is outside generation g).
    pub fn new_rank_of(&self, old: usize) -> Option<usize> {
        self.survivors.binary_search(&old).ok()
    }

    /// The old rank of new rank `new`, or `None` outside generation g + 1.
    pub fn old_rank_of(&self, new: usize) -> Option<usize> {
        self.survivors.get(new).copied()
    }

    /// The ranks of generation g left out of g + 1, in order, with why.
    pub fn excluded(&self) -> impl Iterator<Item = Exclusion> + '_ {
        (0..self.previous_world_size)
            .filter(|rank| self.new_rank_of(*rank).is_none())
            .map(|rank| Exclusion {
                rank,
                reason: reason(&self.suspected, rank),
            })
    }

    /// The old rank whose proposal became the decision (for logs).
    pub fn decided_by(&self) -> usize {
        self.decided_by
    }
}

/// Why `rank`, left out, was left out, given the suspicions.
pub(super) fn reason(suspected: &BTreeMap<usize, Vec<usize>>, rank: usize) -> ExclusionReason {
    match suspected.get(&rank) {
        Some(by) => ExclusionReason::Suspected { by: by.clone() },
        None => ExclusionReason::NotArrived,
    }
}
