//! [`RankList`]: lists of ranks as messages name them.

use std::fmt;

/// Formats a list of ranks for messages: `rank 3` or `ranks 1, 3`.
pub(crate) struct RankList<'a>(pub(crate) &'a [usize]);

impl fmt::Display for RankList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOWN: usize = 16;
        let noun = if self.0.len() == 1 { "rank" } else { "ranks" };
        write!(f, "{noun} ")?;
        for (i, rank) in self.0.iter().take(SHOWN).enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{rank}")?;
        }
        if self.0.len() > SHOWN {
            write!(f, " and {} more", self.0.len() - SHOWN)?;
        }
        Ok(())
    }
}
