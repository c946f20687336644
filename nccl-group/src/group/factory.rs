//! The real communicators of a key: [`NcclFactory`] creates them, with a
//! deadline, and [`LocalComms`] holds one [`Member`] per local device.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use cudarc::driver::CudaStream;
use nccl_core::{AbortHandle, Capability, Device, ShrinkMode, UniqueId};
use nccl_tensor::{Communicator, SharedComm, SharedCommGuard};

use super::{CommMode, GroupOptions};
use crate::cache::OnceMap;
use crate::comms::CommFactory;
use crate::error::Result;
use crate::key::CommKey;
use crate::pool::DevicePool;
use crate::watchdog::{Bounded, run_bounded};

/// One local device's communicator of a key, with its NCCL stream.
pub struct Member {
    /// Shared with the buffers registered with it ([`GroupRegistered`](super::GroupRegistered)).
    pub(super) comm: Arc<SharedComm>,
    pub(super) abort: AbortHandle,
    pub(super) pool: Arc<DevicePool>,
    pub(super) stream: Arc<CudaStream>,
    /// The enqueue in progress on this communicator, for the watchdog.
    enqueue: EnqueueWatch,
}

/// The operation being enqueued on a member (by the thread holding its
/// lock): when it started, in nanoseconds after [`epoch`] plus one (0:
/// none), and its timeout in nanoseconds.
struct EnqueueWatch {
    started: AtomicU64,
    timeout: AtomicU64,
}

impl Default for EnqueueWatch {
    fn default() -> Self {
        // Fixes the epoch before any enqueue on this member can start, so
        // no start is clamped to it.
        let _ = epoch();
        Self {
            started: AtomicU64::new(0),
            timeout: AtomicU64::new(0),
        }
    }
}

/// The instant enqueue times count from.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

impl EnqueueWatch {
    /// Notes an enqueue started at `started` with `timeout`, until the
    /// guard drops.
    fn start(&self, started: Instant, timeout: Duration) -> Enqueueing<'_> {
        self.timeout.store(nanos(timeout), Ordering::Relaxed);
        let since = nanos(started.saturating_duration_since(epoch()));
        self.started
            .store(since.saturating_add(1), Ordering::Release);
        Enqueueing(self)
    }

    /// How long the enqueue in progress has been blocked at `now`, and its
    /// timeout, if it has run past that timeout.
    fn overdue(&self, now: Instant) -> Option<(Duration, Duration)> {
        let started = self.started.load(Ordering::Acquire);
        if started == 0 {
            return None;
        }
        let timeout = Duration::from_nanos(self.timeout.load(Ordering::Relaxed));
        let since = epoch() + Duration::from_nanos(started - 1);
        let blocked = now.saturating_duration_since(since);
        (blocked >= timeout).then_some((blocked, timeout))
    }
}

/// Marks a member's enqueue as in progress until dropped.
pub(super) struct Enqueueing<'a>(&'a EnqueueWatch);

impl Drop for Enqueueing<'_> {
    fn drop(&mut self) {
        self.0.started.store(0, Ordering::Release);
    }
}

/// An enqueue the watchdog found stuck past its timeout.
pub(super) struct BlockedEnqueue {
    pub(super) device: usize,
    pub(super) timeout: Duration,
    pub(super) blocked: Duration,
}

impl Member {
    /// The member of `core`, on `pool`'s device with NCCL stream `stream`.
    ///
    /// # Errors
    /// nccl-tensor's wrapping of the communicator.
    fn new(
        core: nccl_core::Communicator,
        pool: Arc<DevicePool>,
        stream: Arc<CudaStream>,
    ) -> Result<Self> {
        let abort = core.abort_handle();
        Ok(Member {
            comm: Arc::new(SharedComm::new(Communicator::from_core(core)?)),
            abort,
            pool,
            stream,
            enqueue: EnqueueWatch::default(),
        })
    }

    /// The communicator, locked (NCCL calls on one communicator must not overlap).
    pub(super) fn lock(&self) -> SharedCommGuard<'_> {
        self.comm.lock()
    }

    /// Revokes the communicator if NCCL can and no thread is in a NCCL
    /// call on it; whether it is revoked now.
    fn try_revoke(&self) -> bool {
        let Some(comm) = self.comm.try_lock() else {
            return false;
        };
        let core = comm.core();
        core.capabilities().has(Capability::Revoke) && core.revoke().is_ok()
    }

    /// Notes that the lock holder started enqueueing at `started`, with
    /// `timeout`, until the guard drops: an enqueue that blocks past it
    /// (NCCL waiting for a peer that never connects, a custom operation
    /// stuck in its own code) fails the group from the watchdog, whose
    /// abort releases a blocked NCCL call.
    pub(super) fn enqueueing(&self, started: Instant, timeout: Duration) -> Enqueueing<'_> {
        self.enqueue.start(started, timeout)
    }
}

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
    pub(super) members: Vec<Member>,
}

impl LocalComms {
    /// Aborts every communicator (a no-op for those already aborted).
    pub(super) fn abort(&self) {
        for member in &self.members {
            // An abort error leaves the communicator unusable anyway.
            let _ = member.abort.abort();
        }
    }

    /// Stops every communicator for good: revoked when `revoke` asks, the
    /// loaded NCCL can ([`Capability::Revoke`]) and no thread is inside a
    /// NCCL call on it (its lock is free: a revoke must not overlap
    /// another call, where an abort may); aborted otherwise, and after a
    /// failed revoke.
    pub(super) fn release(&self, revoke: bool) {
        for member in &self.members {
            if revoke && member.try_revoke() {
                continue;
            }
            let _ = member.abort.abort();
        }
    }

    /// Why a heal cannot shrink these communicators, or `None` when it
    /// can: one device, revoked by the failure (not aborted), on a NCCL
    /// with `ncclCommShrink`, and no asynchronous error left on it. NCCL's
    /// shrink starts with `ncclCommEnsureReady`, which refuses a
    /// communicator with one, and a revoke clears the communicator's own
    /// error but not its proxy's: a peer's closed socket
    /// (`ncclRemoteError`) stays, so a shrink after a rank's death fails
    /// in NCCL 2.28.9 and 2.30.7, where one after a timeout (a stopped
    /// rank) works.
    pub(super) fn unshrinkable(&self) -> Option<String> {
        let [member] = self.members.as_slice() else {
            return Some(format!("it spans {} devices", self.members.len()));
        };
        let Some(comm) = member.comm.try_lock() else {
            return Some("a thread is inside a NCCL call on it".to_string());
        };
        let core = comm.core();
        if !core.is_revoked() {
            return Some(
                "the failure aborted it instead of revoking it (a thread was in a NCCL call on \
                 it, GroupOptions::revoke_on_failure is off, or NCCL has no ncclCommRevoke)"
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
    /// nonblocking one is polled). The new communicator keeps the
    /// parent's device pool and NCCL stream; the parent stays revoked,
    /// for its owner to drop (which aborts it).
    pub(super) fn shrink(&self, exclude: &[usize], timeout: Duration) -> Result<LocalComms> {
        let exclude = exclude.to_vec();
        self.child("ncclCommShrink", timeout, move |parent| {
            parent.shrink(&exclude, ShrinkMode::Default, None)
        })
    }

    /// `ncclCommGetUniqueId` of the one communicator: the id of its next
    /// [`grow`](Self::grow), made by the grow's root.
    pub(super) fn grow_unique_id(&self) -> Result<UniqueId> {
        let member = self.only("communicators to grow")?;
        Ok(member.lock().core().grow_unique_id()?)
    }

    /// `ncclCommGrow` of the one communicator (a one-device set) to
    /// `world_size` ranks, this rank keeping its own; the grow's root
    /// passes the id of its [`grow_unique_id`](Self::grow_unique_id), the
    /// others `None`. Bounded by `timeout` as [`shrink`](Self::shrink),
    /// and like it the new communicator keeps the parent's device pool and
    /// NCCL stream; the parent stays live, for its owner to release.
    pub(super) fn grow(
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
    /// [`derive`](Self::derive). The child keeps the parent's device pool
    /// and NCCL stream.
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
    /// `config`. Collective over every rank of the parent; bounded by
    /// `timeout` as [`derive`](Self::derive). The child keeps the parent's
    /// device pool and takes the pool's next NCCL stream, as a
    /// communicator created afresh would.
    pub(super) fn split(
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
    pub(super) fn blocked_enqueue(&self, now: Instant) -> Option<BlockedEnqueue> {
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
    pub(super) fn health(&self) -> CommHealth {
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
    pub(super) fn finalize(&self) -> Result<()> {
        let guards: Vec<_> = self.members.iter().map(Member::lock).collect();
        let cores: Vec<&nccl_core::Communicator> = guards.iter().map(|c| c.core()).collect();
        Ok(nccl_core::Communicator::finalize_together(&cores)?)
    }
}

/// Creates real NCCL communicators, with one [`DevicePool`] per device.
pub struct NcclFactory {
    /// Shared with the generations a heal makes of the group.
    pub(super) pools: Arc<OnceMap<usize, DevicePool>>,
    pub(super) options: GroupOptions,
}

impl NcclFactory {
    /// The streams and events of device `ordinal`, made on first use.
    fn pool(&self, ordinal: usize) -> Result<Arc<DevicePool>> {
        self.pools.get_or_create(&ordinal, |&ordinal| {
            DevicePool::new(
                Device::new(ordinal)?,
                self.options.streams_per_device,
                self.options.high_priority,
            )
        })
    }
}

impl super::ProcessGroup {
    /// The group's streams and events of device `ordinal`.
    pub(super) fn device_pool(&self, ordinal: usize) -> Result<Arc<DevicePool>> {
        self.inner.cache.factory().pool(ordinal)
    }
}

impl CommFactory for NcclFactory {
    type Comms = LocalComms;

    fn unique_id(&self) -> Result<UniqueId> {
        Ok(UniqueId::new()?)
    }

    /// Communicators of the group's [`CommMode`], created within the
    /// group's timeout either way (a rank that never joins cannot hang
    /// this one): a nonblocking init is polled, a blocking one runs on a
    /// helper thread that is waited for at most that long.
    fn create(
        &self,
        key: &CommKey,
        id: UniqueId,
        world_size: usize,
        first_rank: usize,
    ) -> Result<LocalComms> {
        let pools = key
            .devices()
            .iter()
            .map(|ordinal| self.pool(ordinal))
            .collect::<Result<Vec<_>>>()?;
        let devices: Vec<Device> = pools.iter().map(|pool| pool.device().clone()).collect();
        let config = self.options.comm_config()?;
        let comms = self.bounded("ncclCommInitRankConfig", move || {
            nccl_core::Communicator::init_local_ranks(&devices, world_size, id, first_rank, &config)
        })?;
        let members = comms
            .into_iter()
            .zip(pools)
            .map(|(core, pool)| Member::new(core, Arc::clone(&pool), pool.stream()))
            .collect::<Result<Vec<_>>>()?;
        Ok(LocalComms { members })
    }
}

impl NcclFactory {
    /// `call` (NCCL's `operation`, making communicators) within the
    /// group's timeout either way: a nonblocking one is polled, a
    /// blocking one runs on a helper thread that is waited for at most
    /// that long.
    fn bounded<T: Send + 'static>(
        &self,
        operation: &'static str,
        call: impl FnOnce() -> nccl_core::Result<T> + Send + 'static,
    ) -> Result<T> {
        if self.options.comm_mode == CommMode::Nonblocking {
            return Ok(call()?);
        }
        let started = Instant::now();
        match run_bounded("nccl-group-init", self.options.timeout, call) {
            Bounded::Returned(made) => Ok(made?),
            Bounded::Stalled => Err(nccl_core::Error::Timeout {
                operation,
                waited: started.elapsed(),
            }
            .into()),
        }
    }

    /// A new process's communicator of a grow (`ncclCommGrow` without a
    /// parent): rank `rank` of `world_size` on device `ordinal`, with the
    /// grow root's id, within the group's timeout.
    pub(super) fn join_grow(
        &self,
        ordinal: usize,
        world_size: usize,
        id: UniqueId,
        rank: usize,
    ) -> Result<LocalComms> {
        let pool = self.pool(ordinal)?;
        let device = pool.device().clone();
        let config = self.options.comm_config()?;
        let core = self.bounded("ncclCommGrow", move || {
            nccl_core::Communicator::join_grow(device, world_size, &id, rank, &config)
        })?;
        let stream = pool.stream();
        Ok(LocalComms {
            members: vec![Member::new(core, pool, stream)?],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_enqueue_is_overdue_only_past_its_timeout_and_until_it_ends() {
        let watch = EnqueueWatch::default();
        let t0 = Instant::now();
        assert_eq!(watch.overdue(t0 + Duration::from_secs(60)), None);
        let enqueueing = watch.start(t0, Duration::from_secs(2));
        assert_eq!(watch.overdue(t0 + Duration::from_millis(1999)), None);
        let (blocked, timeout) = watch
            .overdue(t0 + Duration::from_millis(2500))
            .expect("overdue");
        assert_eq!(timeout, Duration::from_secs(2));
        // Nanosecond bookkeeping: within a microsecond of the truth.
        assert!(
            blocked.abs_diff(Duration::from_millis(2500)) < Duration::from_micros(1),
            "{blocked:?}"
        );
        drop(enqueueing);
        assert_eq!(watch.overdue(t0 + Duration::from_secs(60)), None);
        // A later enqueue starts its own clock.
        let t1 = t0 + Duration::from_secs(10);
        let _again = watch.start(t1, Duration::from_secs(1));
        assert_eq!(watch.overdue(t1 + Duration::from_millis(500)), None);
        assert!(watch.overdue(t1 + Duration::from_secs(1)).is_some());
    }
}
