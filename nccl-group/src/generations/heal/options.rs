//! What [`ProcessGroup::heal`] is asked ([`HealOptions`]) and what it
//! gives back ([`Healed`]).

use std::time::Duration;

use nccl_rendezvous::meet::agree::Agreement;

use nccl_rendezvous::__with_setters as with_setters;

use crate::engine::group::ProcessGroup;
use crate::lineage::HealPath;

/// How [`ProcessGroup::heal`](crate::Recovery::heal) runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealOptions {
    pub(crate) timeout: Duration,
    pub(crate) min_survivors: usize,
    pub(crate) suspects: Vec<usize>,
    pub(crate) shrink: bool,
}

impl Default for HealOptions {
    /// A 60 s timeout, 1 survivor at least, no suspects of the caller's
    /// own, shrinking where NCCL can.
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(60),
            min_survivors: 1,
            suspects: Vec::new(),
            shrink: true,
        }
    }
}

impl HealOptions {
    /// The defaults ([`HealOptions::default`]).
    pub fn new() -> Self {
        Self::default()
    }

    with_setters! {
        /// The bound on the agreement (ranks neither arrived nor suspected are
        /// waited for this long: give every rank the same), on each exchange
        /// of the carrying step, and on the shrinks of this rank's
        /// communicators together (one deadline for all of them).
        with_timeout(timeout: Duration) => timeout = timeout;
        /// The fewest survivors the group goes on with
        /// ([`ErrorKind::TooFewSurvivors`](crate::ErrorKind::TooFewSurvivors)
        /// below it).
        with_min_survivors(min_survivors: usize) => min_survivors = min_survivors;
        /// Ranks this process knows to be lost (its launcher saw them exit,
        /// say), added to those the failure's exchange found silent: the
        /// agreement does not wait for them, and the heal does not wait for
        /// that exchange (which waits up to 3 s for a dead rank's report):
        /// only for the release of the failed communicators.
        with_suspects(suspects: Vec<usize>) => suspects = suspects;
        /// Whether to shrink the communicators the failure revoked (`true`,
        /// the default) or always make fresh ones under the new generation
        /// (torchft's way; the benchmark's baseline).
        with_shrink(shrink: bool) => shrink = shrink;
    }

    /// The agreement's timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}

/// What [`ProcessGroup::heal`](crate::Recovery::heal) returns: the group of the next generation,
/// and how it was made.
#[derive(Clone, Debug)]
pub struct Healed {
    pub(crate) group: ProcessGroup,
    pub(crate) agreement: Agreement,
    pub(crate) path: HealPath,
}

impl Healed {
    /// The group of the new generation: this process's new rank, the
    /// survivors' world size.
    pub fn group(&self) -> &ProcessGroup {
        &self.group
    }

    /// The group, by value.
    pub fn into_group(self) -> ProcessGroup {
        self.group
    }

    /// The survivors' agreement: the old ranks that went on, each one's
    /// new rank, and who was left out and why.
    pub fn agreement(&self) -> &Agreement {
        &self.agreement
    }

    /// The new rank of old rank `old` (`None`: it was left out).
    pub fn new_rank_of(&self, old: usize) -> Option<usize> {
        self.agreement.new_rank_of(old)
    }

    /// The old ranks left out, in order.
    pub fn lost(&self) -> Vec<usize> {
        self.agreement.excluded().map(|e| e.rank).collect()
    }

    /// Shrink or re-create.
    pub fn path(&self) -> &HealPath {
        &self.path
    }
}
