//! The plan of a split, as pure functions: the rank lists checked
//! ([`Layout`]), what each rank proposes ([`Proposal`]) and what rank 0
//! decides from every rank's proposal ([`decide`]).

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::{GroupError, Result};

/// The rank lists of a split, checked against the parent's world.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    lists: Vec<Vec<usize>>,
}

impl Layout {
    /// `lists` (the argument `argument`) for a parent of `world_size`
    /// ranks.
    ///
    /// # Errors
    /// [`GroupError::InvalidArgument`] naming the first fault: no list, an
    /// empty list (no rank at all, for one list), a rank outside the parent, a rank twice in a list, or a
    /// rank in two lists.
    pub(crate) fn new(
        lists: &[&[usize]],
        world_size: usize,
        argument: &'static str,
    ) -> Result<Self> {
        let invalid = |expected: String, given: String| GroupError::InvalidArgument {
            argument,
            expected,
            given,
        };
        if lists.is_empty() {
            return Err(invalid(
                "at least one rank list".to_string(),
                "no list".to_string(),
            ));
        }
        // Which list holds each parent rank: overlaps are found in one pass.
        let mut owner: Vec<Option<usize>> = vec![None; world_size];
        for (index, list) in lists.iter().enumerate() {
            if list.is_empty() && lists.len() == 1 {
                return Err(invalid("at least one rank".to_string(), "[]".to_string()));
            }
            if list.is_empty() {
                return Err(invalid(
                    "non-empty rank lists (a rank in no list gets no sub-group)".to_string(),
                    format!("{} (list {index} is empty)", Self::text_of(lists)),
                ));
            }
            for (position, &rank) in list.iter().enumerate() {
                let Some(slot) = owner.get_mut(rank) else {
                    return Err(invalid(
                        format!("ranks of the parent group, 0..{world_size}"),
                        format!("rank {rank} in {list:?}"),
                    ));
                };
                if list[..position].contains(&rank) {
                    return Err(invalid(
                        "distinct ranks in each list".to_string(),
                        format!("rank {rank} twice in {list:?}"),
                    ));
                }
                if let Some(other) = slot.replace(index) {
                    return Err(invalid(
                        "each rank in one list at most (a rank is in one sub-group of a split)"
                            .to_string(),
                        format!("rank {rank} in both {:?} and {list:?}", lists[other]),
                    ));
                }
            }
        }
        Ok(Self {
            lists: lists.iter().map(|list| list.to_vec()).collect(),
        })
    }

    /// The list holding parent rank `rank` (its color) and `rank`'s
    /// position there (its rank in the sub-group), if any.
    pub(crate) fn place(&self, rank: usize) -> Option<(usize, usize)> {
        self.lists.iter().enumerate().find_map(|(color, list)| {
            let position = list.iter().position(|&r| r == rank)?;
            Some((color, position))
        })
    }

    /// The list of `color`.
    pub(crate) fn list(&self, color: usize) -> &[usize] {
        &self.lists[color]
    }

    /// The lists as text, the same on every rank that passed the same
    /// lists: what the ranks compare.
    pub(crate) fn text(&self) -> String {
        format!("{:?}", self.lists)
    }

    fn text_of(lists: &[&[usize]]) -> String {
        format!("{lists:?}")
    }
}

/// The parent communicator a rank can split, as it proposes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Candidate {
    /// The store key of its first one-device collective communicator.
    Key(String),
    /// It has no one-device collective communicator.
    None,
    /// Its communicators would share their resources with what is split
    /// from them (`split_share`).
    Shared,
}

/// What one rank brings to the plan: its lists and its candidate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Proposal {
    pub(crate) lists: String,
    pub(crate) candidate: Candidate,
}

/// What rank 0 decides, for every rank.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Verdict {
    /// Split the communicator of this store key.
    Split(String),
    /// Make the sub-groups' communicators lazily, for this reason.
    Lazy(String),
    /// The ranks passed different lists.
    Refused {
        /// What rank 0 passed.
        expected: String,
        /// What the first rank that differs passed.
        given: String,
    },
}

/// Why the sub-groups are made lazily when a rank's communicators would
/// share their resources.
pub(crate) const SHARED_REASON: &str = "the parent's communicators share their resources with those \
     split from them (Config::with_split_share, or NCCL_COMM_SPLIT_SHARE_RESOURCES): NCCL then gives the \
     sub-group the parent's abort flag, so a failure, abort or drop of the sub-group would stop the \
     parent's and the other sub-groups' kernels too";

/// Why the sub-groups are made lazily when a rank has no communicator to
/// split.
pub(crate) const NOTHING_TO_SPLIT: &str = "the parent has no one-device collective communicator on \
     every rank yet (split after the parent's first collective to split it)";

/// Rank 0's decision from every rank's `proposals`, in rank order (its
/// own first): the lists must be the same everywhere; a split needs every
/// rank to propose the same communicator.
pub(crate) fn decide(proposals: &[Proposal]) -> Verdict {
    let Some((first, rest)) = proposals.split_first() else {
        return Verdict::Lazy(NOTHING_TO_SPLIT.to_string());
    };
    if let Some((rank, other)) = rest
        .iter()
        .enumerate()
        .find(|(_, p)| p.lists != first.lists)
    {
        return Verdict::Refused {
            expected: format!(
                "the same rank lists on every rank of the parent (rank 0 passed {})",
                first.lists
            ),
            given: format!("rank {} passed {}", rank + 1, other.lists),
        };
    }
    if proposals.iter().any(|p| p.candidate == Candidate::Shared) {
        return Verdict::Lazy(SHARED_REASON.to_string());
    }
    match &first.candidate {
        Candidate::Key(key) if rest.iter().all(|p| p.candidate == first.candidate) => {
            Verdict::Split(key.clone())
        }
        Candidate::Key(_)
            if rest
                .iter()
                .all(|p| matches!(p.candidate, Candidate::Key(_))) =>
        {
            Verdict::Lazy(format!(
                "the ranks' first one-device collective communicators differ: {:?}",
                proposals.iter().map(|p| &p.candidate).collect::<Vec<_>>()
            ))
        }
        _ => Verdict::Lazy(NOTHING_TO_SPLIT.to_string()),
    }
}

/// `value` as the bytes the ranks exchange.
pub(crate) fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    // Strings and enums only: serialising cannot fail.
    serde_json::to_vec(value).unwrap_or_default()
}

/// A `what` (a proposal, a verdict) read back from another rank's bytes.
///
/// # Errors
/// [`GroupError::InvalidArgument`] for bytes that are not one.
pub(crate) fn decode<T: DeserializeOwned>(what: &'static str, bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|error| GroupError::InvalidArgument {
        argument: what,
        expected: "the JSON that ProcessGroup::split_group publishes".to_string(),
        given: format!("{} bytes that do not parse ({error})", bytes.len()),
    })
}

#[cfg(test)]
mod tests;
