//! How a generation ends when a heal or a grow replaces it: the record
//! that later callers of either get, and the retirement of the old
//! generation (its handles refuse every call, its communicators are
//! released).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::engine::failing::{Findings, abort_bounded};
use crate::engine::generation::Record;
use crate::engine::group::{HEALED, Inner, ProcessGroup};
use crate::engine::membership::Membership;
use crate::error::GroupError;
use crate::failure::FailureCause;

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

    /// This generation refuses every call from now on, an operation
    /// another thread issued meanwhile fails (`cause`), its communicators
    /// are released (by abort: a heal's revoked parents must never be
    /// destroyed, NVIDIA/nccl PR 2251, and a grow's live ones were
    /// replaced), and the flight recorder writes why (`reason`).
    pub(crate) fn retire(
        &self,
        successor: u64,
        cause: FailureCause,
        reason: impl FnOnce() -> String,
    ) {
        let _ = self.successor.set(successor);
        self.state.store(HEALED, Ordering::Release);
        self.cache.close();
        if !self.tracker.is_empty() {
            self.check_ended();
        }
        if !self.tracker.is_empty() {
            let failure = self.new_failure(cause, self.tracker.oldest(), Vec::new());
            let _ = self.failure.set(Arc::clone(&failure));
            self.fail_pending(&failure);
        }
        let _ = abort_bounded(
            self.cache.clear(),
            self.cache.factory().options.abort_timeout,
        );
        if let Some(dir) = self.cache.factory().options.dump_dir.as_deref() {
            let dump = self.dump(reason(), Findings::default());
            let _written = self.write_dump(dir, &dump);
            crate::diagnostics::trace::event!(info, written = ?_written, "succession recorded");
        }
    }
}
