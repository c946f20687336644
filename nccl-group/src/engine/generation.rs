//! What a generation of a group made: the heal or grow that replaced it
//! ([`Succession`], kept for later callers of either) and the sub-groups
//! split from it ([`Children`]). The group's state holds both; the
//! generations that make them are `crate::generations`.

use std::ops::Range;
use std::sync::Weak;
use std::time::Duration;

use nccl_rendezvous::meet::agree::Agreement;

use crate::engine::group::Inner;
use crate::lineage::{GrowPath, HealPath};
use crate::options::StreamMode;

/// What replaced a generation.
pub(crate) enum Replacement {
    /// [`ProcessGroup::heal`](crate::ProcessGroup::heal).
    Healed {
        agreement: Agreement,
        path: HealPath,
    },
    /// [`ProcessGroup::grow`](crate::ProcessGroup::grow): the ranks the
    /// new processes got.
    Grown {
        new_ranks: Range<usize>,
        path: GrowPath,
    },
}

/// A heal or a grow done, kept by the old generation for later callers.
///
/// The group is weak: the old generation must not keep the new one alive.
pub(crate) struct Record {
    pub(crate) group: Weak<Inner>,
    pub(crate) handle: (Duration, StreamMode),
    pub(crate) generation: u64,
    pub(crate) replacement: Replacement,
}

/// A generation's succession, behind one lock: concurrent heals or grows
/// of a generation are one, and a heal cannot overlap a grow.
#[derive(Default)]
pub(crate) struct Succession {
    /// The heal or grow that replaced this generation, once done.
    pub(crate) record: Option<Record>,
    /// The grows of this generation that went to the store, each of which
    /// meets the other ranks under its own number (a grow that failed
    /// because a new process never came leaves keys behind that the next
    /// attempt must not read).
    pub(crate) grow_attempts: u64,
}

/// The sub-groups split from a group.
#[derive(Default)]
pub(crate) struct Children {
    /// How many splits the group made (each numbers its sub-groups' store
    /// scope, alike on every rank).
    pub(crate) made: u64,
    /// The sub-groups this process got, weakly: a sub-group lives as long
    /// as its handles.
    pub(crate) groups: Vec<Weak<Inner>>,
}
