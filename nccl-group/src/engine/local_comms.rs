//! [`LocalComms`]: the communicators of one key on this process, one
//! [`Member`] per local device, and what the group does with them: read
//! their health, abort, release, shrink, grow, split, finalize.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::CudaStream;
use nccl_core::{Capability, ShrinkMode, UniqueId};

use crate::error::Result;
use crate::health::watchdog::{Bounded, run_bounded};

use crate::engine::member::{BlockedEnqueue, Member};

/// What reading communicators' asynchronous errors found.
pub(crate) enum CommHealth {
    /// Every one was read, and none has an error.
    Clean,
    /// None has an error, but one could not be read (in use).
    Busy,
    /// One has this error.
    Error(nccl_core::Error),
}

impl CommHealth {
    /// The health of all of `comms`: the first error, else busy if any is.
    pub(crate) fn of(comms: &[Arc<LocalComms>]) -> Self {
        let mut health = CommHealth::Clean;
        for comms in comms {
            match comms.health() {
                CommHealth::Clean => {}
                CommHealth::Busy => health = CommHealth::Busy,
                error @ CommHealth::Error(_) => return error,
            }
        }
        health
    }
}

/// The communicators of one key on this process, one per local device.
pub struct LocalComms {
    pub(crate) members: Vec<Member>,
}

impl LocalComms {
    /// Aborts every communicator (a no-op for those already aborted).
    pub(crate) fn abort(&self) {
        for member in &self.members {
            // An abort error leaves the communicator unusable anyway.
            let _ = member.abort.abort();
        }
    }

    /// Queues every stream of each member's pool behind what the member's
    /// stream holds (`DevicePool::order_after`): a failed generation's
    /// kernels there stop once they see the abort flags, and the next
    /// generation, issuing on the same pools, must not run beside them.
    pub(crate) fn order_pools_after_streams(&self) {
        for member in &self.members {
            member.pool.order_after(&member.stream);
        }
    }

    /// Why a heal cannot shrink these communicators, or `None` when it
    /// can: one device, revoked by the failure (not aborted), on a NCCL
    /// with `ncclCommShrink`, and no asynchronous error left on it.
    ///
    /// NCCL's shrink starts with `ncclCommEnsureReady`, which refuses a
    /// communicator with one, and a revoke clears the communicator's own error
    /// but not its proxy's: a peer's closed socket (`ncclRemoteError`) stays,
    /// so a shrink after a rank's death fails in NCCL 2.28.9 and 2.30.7, where
    /// one after a timeout (a stopped rank) works.
    pub(crate) fn unshrinkable(&self) -> Option<String> {
        let [member] = self.members.as_slice() else {
            return Some(format!("it spans {} devices", self.members.len()));
        };
        let Some(comm) = member.comm.try_lock() else {
            return Some("a thread is inside a NCCL call on it".to_string());
        };
        let core = comm.core();
        if !core.is_revoked() {
            return Some(
                "the failure aborted it instead of revoking it (the group had lost a process, \
                 as NCCL reported on this rank's collective communicators or to the rank whose \
                 alarm came, or that rank was exiting: ncclCommShrink refuses a communicator \
                 with that error even after a revoke; a thread was in a NCCL call on it; \
                 GroupOptions::revoke_on_failure is off; or NCCL has no ncclCommRevoke)"
                    .to_string(),
            );
        }
        if !core.capabilities().has(Capability::Shrink) {
            return Some("the loaded NCCL has no ncclCommShrink".to_string());
        }
        match core.async_error() {
            Ok(nccl_core::Status::Success) => None,
            Ok(nccl_core::Status::InProgress) => {
                Some("NCCL still reports its revoke in progress".to_string())
            }
            Err(error) => Some(format!(
                "NCCL reports an error on it, which ncclCommShrink refuses (a socket closed under \
                 an operation, by a lost peer or by another survivor's revoke, survives a revoke): \
                 {}",
                nccl_core::ErrorChain(&error)
            )),
        }
    }

    /// `ncclCommShrink` of a set with no [`unshrinkable`](Self::unshrinkable)
    /// reason,
    /// leaving out the NCCL ranks `exclude`, bounded by `timeout` (a
    /// blocking shrink waits for every survivor on a helper thread; a
    /// nonblocking one is polled).
    ///
    /// The new communicator keeps the parent's device pool and NCCL stream; the
    /// parent stays revoked, for its owner to drop (which aborts it).
    pub(crate) fn shrink(&self, exclude: &[usize], timeout: Duration) -> Result<LocalComms> {
        let exclude = exclude.to_vec();
        self.child("ncclCommShrink", timeout, move |parent| {
            parent.shrink(&exclude, ShrinkMode::Default, None)
        })
    }

    /// `ncclCommGetUniqueId` of the one communicator: the id of its next
    /// [`grow`](Self::grow), made by the grow's root.
    pub(crate) fn grow_unique_id(&self) -> Result<UniqueId> {
        let member = self.only("communicators to grow")?;
        Ok(member.lock().core().grow_unique_id()?)
    }

    /// `ncclCommGrow` of the one communicator (a one-device set) to
    /// `world_size` ranks, this rank keeping its own; the grow's root
    /// passes the id of its [`grow_unique_id`](Self::grow_unique_id), the
    /// others `None`.
    ///
    /// Bounded by `timeout` as [`shrink`](Self::shrink), and like it the new
    /// communicator keeps the parent's device pool and NCCL stream; the parent
    /// stays live, for its owner to release.
    pub(crate) fn grow(
        &self,
        world_size: usize,
        id: Option<UniqueId>,
        timeout: Duration,
    ) -> Result<LocalComms> {
        self.child("ncclCommGrow", timeout, move |parent| {
            parent.grow(world_size, id.as_ref(), None)
        })
    }

    /// The one member of a one-device set (`what` names the set in the
    /// refusal of any other).
    fn only(&self, what: &'static str) -> Result<&Member> {
        match self.members.as_slice() {
            [member] => Ok(member),
            members => Err(crate::error::GroupError::InvalidArgument {
                argument: what,
                expected: "the communicators of one device".to_string(),
                given: format!("{} devices", members.len()),
            }),
        }
    }

    /// The communicator `make` (NCCL's `operation`) derives from the one
    /// communicator of a one-device set, bounded by `timeout` as
    /// [`derive`](Self::derive).
    ///
    /// The child keeps the parent's device pool and NCCL stream.
    fn child(
        &self,
        operation: &'static str,
        timeout: Duration,
        make: impl FnOnce(&nccl_core::Communicator) -> nccl_core::Result<nccl_core::Communicator>
        + Send
        + 'static,
    ) -> Result<LocalComms> {
        let (child, member) = self.derive(operation, timeout, make)?;
        LocalComms::of_child(child, member, Arc::clone(&member.stream))
    }

    /// `ncclCommSplit` of the one communicator of a one-device set: this
    /// rank joins the communicator of `color` as its rank `key`, or none
    /// (`color` of `None`, `NCCL_SPLIT_NOCOLOR`, which returns `None`), with
    /// `config`.
    ///
    /// Collective over every rank of the parent; bounded by `timeout` as
    /// [`derive`](Self::derive). The child keeps the parent's device pool and
    /// takes the pool's next NCCL stream, as a communicator created afresh
    /// would.
    pub(crate) fn split(
        &self,
        color: Option<i32>,
        key: usize,
        config: nccl_core::Config,
        timeout: Duration,
    ) -> Result<Option<LocalComms>> {
        let (child, member) = self.derive("ncclCommSplit", timeout, move |parent| {
            parent.split(color, key, Some(&config))
        })?;
        child
            .map(|child| LocalComms::of_child(child, member, member.pool.stream()))
            .transpose()
    }

    /// What `make` (NCCL's `operation`) derives from the one communicator
    /// of a one-device set, with that set's member, bounded by `timeout`:
    /// `make` runs on a helper thread with the parent locked, and a call
    /// still blocked at the bound (a blocking communicator waits for every
    /// rank) is released by aborting the parent.
    fn derive<T: Send + 'static>(
        &self,
        operation: &'static str,
        timeout: Duration,
        make: impl FnOnce(&nccl_core::Communicator) -> nccl_core::Result<T> + Send + 'static,
    ) -> Result<(T, &Member)> {
        let member = self.only("communicators to derive from")?;
        let comm = Arc::clone(&member.comm);
        let started = Instant::now();
        match run_bounded("nccl-group-derive", timeout, move || {
            make(comm.lock().core())
        }) {
            Bounded::Returned(child) => Ok((child?, member)),
            Bounded::Stalled => {
                // The abort releases the parent's blocked call.
                let _ = member.abort.abort();
                Err(nccl_core::Error::Timeout {
                    operation,
                    waited: started.elapsed(),
                }
                .into())
            }
        }
    }

    /// The set of `child`, derived from `parent`'s communicator: on its
    /// device pool, with NCCL stream `stream`.
    fn of_child(
        child: nccl_core::Communicator,
        parent: &Member,
        stream: Arc<CudaStream>,
    ) -> Result<LocalComms> {
        Ok(LocalComms {
            members: vec![Member::new(child, Arc::clone(&parent.pool), stream)?],
        })
    }

    /// An enqueue on one of these communicators that has run past its
    /// timeout at `now`, if any.
    pub(crate) fn blocked_enqueue(&self, now: Instant) -> Option<BlockedEnqueue> {
        self.members.iter().find_map(|member| {
            let (blocked, timeout) = member.enqueue.overdue(now)?;
            Some(BlockedEnqueue {
                device: member.pool.device().ordinal(),
                timeout,
                blocked,
            })
        })
    }

    /// The communicators' asynchronous errors, read without waiting for
    /// a lock: a communicator being used by an operation (locked, or in
    /// the middle of a nonblocking call) is [`CommHealth::Busy`], looked at
    /// next time (the watchdog never waits for a lock).
    pub(crate) fn health(&self) -> CommHealth {
        let mut health = CommHealth::Clean;
        for member in &self.members {
            let Some(comm) = member.comm.try_lock() else {
                health = CommHealth::Busy;
                continue;
            };
            match comm.core().async_error() {
                Ok(nccl_core::Status::Success) => {}
                Ok(_) => health = CommHealth::Busy,
                Err(error) => return CommHealth::Error(error),
            }
        }
        health
    }

    /// Finalizes every communicator together (see
    /// [`nccl_core::Communicator::finalize_together`]).
    pub(crate) fn finalize(&self) -> Result<()> {
        let guards: Vec<_> = self.members.iter().map(Member::lock).collect();
        let cores: Vec<&nccl_core::Communicator> = guards.iter().map(|c| c.core()).collect();
        Ok(nccl_core::Communicator::finalize_together(&cores)?)
    }
}
