//! A group's next generations and its parts: heal (without the lost
//! ranks), grow (with new processes), sub-groups split from it, the
//! ranks' commit vote, and its end (abort, destroy, shutdown).

pub(crate) mod grow;
pub(crate) mod heal;
pub(crate) mod lifecycle;
pub(crate) mod recovery;
pub(crate) mod subgroups;
pub(crate) mod succession;
pub(crate) mod vote;
