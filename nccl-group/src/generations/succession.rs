//! How a generation ends when a heal or a grow replaces it: the record
//! that later callers of either get, and the retirement of the old
//! generation (its handles refuse every call, its communicators are
//! released).

use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard, PoisonError};

use crate::engine::failing::Findings;
use crate::engine::release::Release;
use crate::engine::generation::{Record, Succession};
use crate::engine::group::{HEALED, Inner, ProcessGroup};
use crate::engine::presence::Presence;
use crate::engine::key::CommKey;
use crate::engine::local_comms::LocalComms;
use crate::engine::membership::Membership;
use crate::error::GroupError;
use crate::failure::FailureCause;
use nccl_rendezvous::Store;
use nccl_rendezvous::meet::Meeting;

impl Record {
    /// What a heal or grow gives back: the successor's handle with the
    /// caller's timeout and stream mode.
    pub(crate) fn handle_on(&self, old: &Inner) -> Result<ProcessGroup, GroupError> {
        let Some(inner) = self.group.upgrade() else {
            return Err(old.replaced(self.generation));
        };
        let (op_timeout, stream_mode) = self.handle;
        Ok(ProcessGroup {
            inner,
            op_timeout,
            stream_mode,
        })
    }
}

impl ProcessGroup {
    /// This generation's succession, locked for a heal or a grow: held
    /// throughout, so that concurrent calls make one.
    pub(crate) fn lock_succession(&self) -> MutexGuard<'_, Succession> {
        self.inner
            .succession
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Refuses to replace this generation (`action`: "healed", "grown")
    /// while a [`GroupGraph`](crate::GroupGraph) of it lives.
    ///
    /// # Errors
    /// [`GroupError::GraphsAlive`] naming how many.
    pub(crate) fn refuse_live_graphs(&self, action: &'static str) -> Result<(), GroupError> {
        match self.inner.captures.live_graphs() {
            0 => Ok(()),
            graphs => Err(GroupError::GraphsAlive {
                name: self.name().to_string(),
                action,
                graphs,
            }),
        }
    }

    /// The group of a later generation of this one, `membership`, with
    /// this handle's operation timeout and stream mode, the same options
    /// and local rank, and the same device pools (streams and events).
    ///
    /// # Errors
    /// No watchdog thread.
    pub(crate) fn successor_group(
        &self,
        membership: Membership,
    ) -> Result<ProcessGroup, GroupError> {
        let group = Self::start(
            membership,
            self.options().clone(),
            self.inner.local_rank,
            Arc::clone(&self.inner.cache.factory().pools),
            None,
        )?;
        Ok(ProcessGroup {
            op_timeout: self.op_timeout,
            stream_mode: self.stream_mode,
            ..group
        })
    }
}

/// The carry of communicators into a new generation, a heal's shrunk
/// ones or a grow's grown one: each of `made` (a key, and the communicator
/// this rank made for it, if it could) is adopted into `group` where
/// every rank of `meeting` made it, and aborted where one did not (it is
/// then made afresh when first used).
///
/// The ranks tell each other in one gather under `label`. How many were
/// adopted.
///
/// # Errors
/// The meeting's.
pub(crate) fn adopt_where_all_made(
    group: &ProcessGroup,
    meeting: &Meeting<Arc<dyn Store>>,
    label: &str,
    made: Vec<(CommKey, Option<LocalComms>)>,
) -> Result<usize, GroupError> {
    let flags: Vec<u8> = made
        .iter()
        .map(|(_, comms)| u8::from(comms.is_some()))
        .collect();
    let everyone = meeting.all_gather(label, &flags)?;
    let mut adopted = 0;
    for (index, (key, comms)) in made.into_iter().enumerate() {
        let everywhere = everyone.iter().all(|theirs| theirs.get(index) == Some(&1));
        match comms {
            Some(comms) if everywhere => {
                group.inner.cache.adopt(key, comms)?;
                adopted += 1;
            }
            Some(comms) => comms.abort(),
            None => {}
        }
    }
    Ok(adopted)
}

impl Inner {
    /// The refusal of a generation that `successor` replaced.
    pub(crate) fn replaced(&self, successor: u64) -> GroupError {
        let m = self.cache.membership();
        GroupError::Healed {
            name: m.name.clone(),
            generation: m.generation,
            successor,
        }
    }

    /// This generation, replaced by `heir`, refuses every call from now on,
    /// an operation another thread issued meanwhile fails (`cause`), its
    /// communicators' aborts begin, to end on their own threads, which
    /// `heir` waits for when it ends (an abort: a heal's revoked parents
    /// must never be destroyed, NVIDIA/nccl PR 2251, and a grow's live
    /// ones were replaced), and the flight recorder writes why (`reason`).
    pub(crate) fn retire(&self, heir: &Inner, cause: FailureCause, reason: impl FnOnce() -> String) {
        let _ = (self.successor).set(heir.cache.membership().generation);
        // The failure whose thread releases the communicators, if one came
        // before; one made below for a straggling operation has none.
        let failed = self.failure.get().cloned();
        self.state.store(HEALED, Ordering::Release);
        // The process goes on in the successor, which announced itself.
        let m = self.cache.membership();
        if let Ok(presence) = Presence::of(m) {
            presence.withdraw(m.rank);
        }
        self.stop_mismatch_check(HEALED);
        self.cache.close();
        if !self.tracker.is_empty() {
            self.check_ended();
        }
        if !self.tracker.is_empty() {
            let failure = self.new_failure(cause, self.tracker.oldest(), Vec::new());
            let _ = self.failure.set(Arc::clone(&failure));
            self.fail_pending(&failure);
        }
        // Their kernels are stopped already (the failure released them) or
        // idle (a grow's): the teardown runs off the successor's path, and
        // the successor waits for it when it drops.
        let retirement = Release::begin(&self.cache.clear(), false);
        (heir.unfinished.lock())
            .unwrap_or_else(PoisonError::into_inner)
            .inherit(failed, retirement, self.take_unfinished());
        if let Some(dir) = self.cache.factory().options.dump_dir.as_deref() {
            let dump = self.dump(reason(), Findings::default());
            let _written = self.write_dump(dir, &dump);
            crate::diagnostics::trace::event!(info, written = ?_written, "succession recorded");
        }
    }
}
