//! The purpose of every store protocol of the group: the one name below
//! which each protocol keeps its keys, in a
//! [`Scope`](nccl_rendezvous::meet::Scope) of the group's name and
//! generation (`<group>/<generation>/<purpose>`, the membership's keys
//! below `<group>` alone).
//!
//! Each protocol is described once, in the module doc of the file named
//! next to its purpose; this module only names them, so that no two
//! protocols share a key and no file spells a key by hand.

/// How many processes joined the group's name: its generation
/// (`engine/membership.rs`, below `<group>`).
pub(crate) const INSTANCES: &str = "instances";
/// The world size of the name's first instance, which every later one
/// must have (`engine/membership.rs`, below `<group>`).
pub(crate) const WORLD_SIZE: &str = "world_size";
/// A collective communicator's creation: its unique id shared among its
/// processes (`engine/key.rs`).
pub(crate) const COMMUNICATOR: &str = "comm";
/// A send/recv pair's communicator's creation (`engine/key.rs`).
pub(crate) const PAIR: &str = "p2p";
/// The failure alarm: the first failing rank's cause, for every other
/// rank (`engine/alarm.rs`).
pub(crate) const FAILED: &str = "failed";
/// The liveness beat: each rank's beat count, and who left
/// (`engine/liveness.rs`).
pub(crate) const LIVENESS: &str = "liveness";
/// A failure's exchange of reports: each rank's progress
/// (`health/peers.rs`).
pub(crate) const PROGRESS: &str = "progress";
/// Each rank's presence while its process lives: a session key the store
/// deletes when the process exits, and the mark that it was set
/// (`engine/presence.rs`).
pub(crate) const PRESENCE: &str = "presence";
/// The collective mismatch check: each rank's fingerprints of a window
/// of collectives (`diagnostics/checks.rs`).
pub(crate) const CHECKS: &str = "checks";
/// The mismatch check: each rank's chunks of collective fingerprints
/// (`diagnostics/fingerprints.rs`).
pub(crate) const FINGERPRINTS: &str = "fingerprints";
/// The generation a heal makes: its keys, below the healed one's
/// (`generations/heal.rs`).
pub(crate) const HEALED: &str = "healed";
/// A heal's carry exchange: which communicators every survivor can
/// shrink into the new generation (`generations/heal.rs`).
pub(crate) const CARRY: &str = "carry";
/// A grow: the current ranks' plan and offer (below the generation), the
/// tickets and offers joining processes read (below the name), and the
/// new generation's meeting (below its scope) (`generations/grow.rs`,
/// `generations/grow/offer.rs`).
pub(crate) const GROW: &str = "grow";
/// The generation a grow makes: its keys, below the grown one's
/// (`generations/grow.rs`).
pub(crate) const GROWN: &str = "grown";
/// A split into sub-groups: its comparison of the lists and each
/// sub-group's keys (`generations/subgroups.rs`).
pub(crate) const SUBGROUPS: &str = "sub";
/// A split's comparison of every rank's lists, below its
/// [`SUBGROUPS`] scope (`generations/subgroups.rs`).
pub(crate) const SPLIT: &str = "split";
/// The ranks' commit votes: each vote's ballots, outcome and readers
/// (`generations/vote.rs`).
pub(crate) const VOTE: &str = "vote";
/// The exit barrier of a group's shutdown (`generations/lifecycle.rs`).
pub(crate) const SHUTDOWN: &str = "shutdown";
