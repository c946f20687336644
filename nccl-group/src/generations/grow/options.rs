//! What [`ProcessGroup::grow`] is asked ([`GrowOptions`]) and what it
//! gives back ([`Grown`]).

use std::ops::Range;
use std::time::Duration;

use nccl_rendezvous::__with_setters as with_setters;

use crate::engine::group::ProcessGroup;
use crate::lineage::GrowPath;

/// How [`ProcessGroup::grow`](crate::Recovery::grow) runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrowOptions {
    pub(crate) timeout: Duration,
    pub(crate) grow: bool,
}

impl Default for GrowOptions {
    /// A 60 s timeout, growing the communicator where NCCL can.
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(60),
            grow: true,
        }
    }
}

impl GrowOptions {
    /// The defaults ([`GrowOptions::default`]).
    pub fn new() -> Self {
        Self::default()
    }

    with_setters! {
        /// The bound on every wait of the grow: for the operations issued
        /// before it to end, for the other ranks and the new processes at the
        /// store, and on `ncclCommGrow` (give every rank the same).
        with_timeout(timeout: Duration) => timeout = timeout;
        /// Whether to grow the group's communicator with `ncclCommGrow`
        /// (`true`, the default; NCCL 2.29.2 or later, else the grow is
        /// refused with [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported))
        /// or make every communicator afresh under the new generation
        /// (`false`: the fallback that works with any NCCL).
        with_grow(grow: bool) => grow = grow;
    }

    /// The timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}

/// What [`ProcessGroup::grow`](crate::Recovery::grow) returns: the group of the next generation,
/// the ranks the new processes got, and how it was made.
#[derive(Clone, Debug)]
pub struct Grown {
    pub(crate) group: ProcessGroup,
    pub(crate) new_ranks: Range<usize>,
    pub(crate) path: GrowPath,
}

impl Grown {
    /// The group of the new generation: this process keeps its rank, the
    /// world size is the old one plus the new processes.
    pub fn group(&self) -> &ProcessGroup {
        &self.group
    }

    /// The group, by value.
    pub fn into_group(self) -> ProcessGroup {
        self.group
    }

    /// The ranks of the new processes (the old world size up to the new
    /// one), in the order they took their tickets.
    pub fn new_ranks(&self) -> Range<usize> {
        self.new_ranks.clone()
    }

    /// Grown or re-created.
    pub fn path(&self) -> &GrowPath {
        &self.path
    }
}
