//! [`Mismatch`]: what the mismatch check (`crate::diagnostics::fingerprints`)
//! or the collective check (`crate::diagnostics::checks`) found when the
//! ranks did not issue the same collectives.

use std::fmt;
use std::sync::Arc;

use crate::diagnostics::analysis::Divergence;
use crate::failure::{Collectives, Failure, FoundBy, TO_CONTINUE};

/// What a check found: the ranks did not issue the same collectives.
///
/// [`GroupError::Mismatch`](crate::GroupError::Mismatch) carries it to the
/// rank whose check found it, and to the host reads of the collectives it
/// covers; the group failed
/// ([`FailureCause::Mismatch`](crate::FailureCause::Mismatch)), so every later
/// call and pending operation gets the failure.
#[derive(Debug)]
#[non_exhaustive]
pub struct Mismatch {
    /// The first collective the ranks did not issue alike: which ranks
    /// issued what.
    pub divergence: Divergence,
    /// The first and last collective the failed check covered, in this
    /// rank's numbering.
    ///
    /// With the collective check, the last was not enqueued, on this rank nor
    /// on any other (every rank checks before it enqueues it); with a check
    /// every `K > 1` collectives, the others were. With the mismatch check,
    /// the first is the divergent collective and the last the one whose
    /// result was read: every one of them was enqueued, and none is a
    /// result.
    pub checked: (u64, u64),
    /// Which check found it.
    pub found_by: FoundBy,
    /// The group's failure.
    pub failure: Arc<Failure>,
}

/// `process group "trainer" (rank 0 of 4): the collective check of
/// collective #57 found that the ranks did not issue the same
/// collectives: rank 3 issued ...; collective #57 was not enqueued, and
/// the group failed. To continue, heal the group ...`
impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let failure = &self.failure;
        write!(
            f,
            "process group {:?} (rank {} of {}): ",
            failure.group, failure.rank, failure.world_size
        )?;
        match self.found_by {
            FoundBy::CollectiveCheck => write!(
                f,
                "the collective check of {} found that the ranks did not issue the same \
                 collectives: {}; collective #{} was not enqueued, and the group failed.",
                Collectives(self.checked.0, self.checked.1),
                self.divergence,
                self.checked.1
            )?,
            FoundBy::MismatchCheck => write!(
                f,
                "the mismatch check found that the ranks did not issue the same collectives: {}; \
                 the group failed, and no collective from #{} on is a result (this read was of \
                 collective #{}).",
                self.divergence, self.checked.0, self.checked.1
            )?,
        }
        write!(f, " {TO_CONTINUE}")
    }
}
