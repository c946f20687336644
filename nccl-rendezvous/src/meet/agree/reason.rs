//! [`ExclusionReason`]: why the survivors' agreement left a rank out.

use std::fmt;

use crate::rank_list::RankList;

/// Why a rank was left out of the next generation.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ExclusionReason {
    /// It had not arrived when the decision was made, and the arrived
    /// ranks in `by` had declared it lost, so the decision did not wait
    /// for it.
    Suspected {
        /// The arrived ranks that suspected it, in order.
        by: Vec<usize>,
    },
    /// Nobody declared it lost, and it had not arrived when the deciding
    /// rank's timeout ran out.
    NotArrived,
}

impl fmt::Display for ExclusionReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExclusionReason::Suspected { by } => write!(
                f,
                "it had not arrived when the survivors decided, and {} had declared it lost",
                RankList(by)
            ),
            ExclusionReason::NotArrived => f.write_str(
                "it had not arrived when the deciding rank's timeout ran out (nobody had \
                 declared it lost)",
            ),
        }
    }
}
