//! Presence: how a failing rank knows at once that another rank's process
//! has exited, so that the failure's exchange of reports stops waiting
//! for it and a heal names it a suspect without waiting out the
//! exchange's bound.
//!
//! When a generation of a group is made, each rank sets two keys in the
//! generation's [`PRESENCE`](crate::protocols::PRESENCE) scope: first
//! `alive/<rank>`, a session key ([`Store::set_session`]: the TCP store
//! deletes it when the rank's connection closes, which the kernel does
//! when its process exits or is killed), then `joined/<rank>`, a plain
//! key. A rank is **gone** when its `joined` key is there and its `alive`
//! key is not. So:
//!
//! - a store without session keys (a file store, c10d,
//!   [`InProcessStore`](nccl_rendezvous::InProcessStore)) sets neither,
//!   and no rank is ever gone: the exchange waits out its bound, as
//!   before;
//! - a rank that has not set its keys yet is not gone;
//! - a clean destroy, and a heal or grow that replaces the generation,
//!   delete `joined` first, then `alive`: leaving is not dying;
//! - the TCP client registers its session keys again on its next request
//!   after its connection to the server broke; a live rank is taken as
//!   gone only when the exchange looks while its key is absent, and never
//!   for longer than that look.

use std::sync::Arc;

use crate::engine::membership::Membership;
use crate::error::Result;
use crate::protocols::PRESENCE;
use nccl_rendezvous::meet::Scope;
use nccl_rendezvous::{ErrorKind, Store};

/// The presence keys of one generation of a group.
pub(crate) struct Presence {
    store: Arc<dyn Store>,
    alive: Scope,
    joined: Scope,
}

impl Presence {
    /// The presence keys of `membership`'s generation.
    ///
    /// # Errors
    /// None in practice: the group's name was checked when it was made.
    pub(crate) fn of(membership: &Membership) -> Result<Self> {
        let scope = membership.protocol(PRESENCE)?;
        Ok(Self {
            store: Arc::clone(&membership.store),
            alive: scope.clone().purpose("alive")?,
            joined: scope.purpose("joined")?,
        })
    }

    /// Sets `rank`'s keys; nothing on a store without session keys.
    ///
    /// # Errors
    /// The store's: a failure, or the key held by another process (two
    /// processes that both took this rank).
    pub(crate) fn announce(&self, rank: usize) -> Result<()> {
        let pid = std::process::id().to_string();
        match self.store.set_session(&self.alive.key(rank), pid.as_bytes()) {
            Err(error) if error.kind() == ErrorKind::Unsupported => return Ok(()),
            set => set?,
        }
        Ok(self.store.set(&self.joined.key(rank), pid.as_bytes())?)
    }

    /// Deletes `rank`'s keys, `joined` first: it leaves, it did not die.
    /// A store that fails leaves them; the session key still goes with the
    /// process.
    pub(crate) fn withdraw(&self, rank: usize) {
        let _ = self.store.delete(&self.joined.key(rank));
        let _ = self.store.delete(&self.alive.key(rank));
    }

    /// Whether `rank`'s process is known to have exited: it set its keys
    /// and its session key is gone. A store that fails knows nothing.
    pub(crate) fn gone(&self, rank: usize) -> bool {
        let joined = self.store.try_get(&self.joined.key(rank));
        if !matches!(joined, Ok(Some(_))) {
            return false;
        }
        matches!(self.store.try_get(&self.alive.key(rank)), Ok(None))
    }
}

#[cfg(test)]
mod tests;
