//! [`Member`]: one local device's communicator of a key, with its NCCL
//! stream, and the enqueue in progress on it that the watchdog watches.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::CudaStream;
use nccl_core::{AbortHandle, Capability, ErrorKind};
use nccl_tensor::{Communicator, SharedComm, SharedCommGuard};

use crate::diagnostics::clock;
use crate::engine::pool::DevicePool;
use crate::engine::shared_end::OpenEnd;
use crate::error::Result;

/// One local device's communicator of a key, with its NCCL stream.
pub struct Member {
    /// Shared with the buffers registered with it ([`GroupRegistered`](crate::GroupRegistered)).
    pub(crate) comm: Arc<SharedComm>,
    pub(crate) abort: AbortHandle,
    pub(crate) pool: Arc<DevicePool>,
    pub(crate) stream: Arc<CudaStream>,
    /// The enqueue in progress on this communicator, for the watchdog.
    pub(crate) enqueue: EnqueueWatch,
    /// The end event the next operation on the caller's stream shares.
    pub(crate) open_end: OpenEnd,
}

/// The operation being enqueued on a member (by the thread holding its
/// lock): when it started, in nanoseconds after the epoch of
/// `diagnostics::clock` plus one (0: none), and its timeout in nanoseconds.
pub(crate) struct EnqueueWatch {
    started: AtomicU64,
    timeout: AtomicU64,
}

impl Default for EnqueueWatch {
    fn default() -> Self {
        // Fixes the epoch before any enqueue on this member can start, so
        // no start is clamped to it.
        clock::fix();
        Self {
            started: AtomicU64::new(0),
            timeout: AtomicU64::new(0),
        }
    }
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

impl EnqueueWatch {
    /// Notes an enqueue started at `started` (nanoseconds on
    /// `diagnostics::clock`) with `timeout`, until the guard drops.
    pub(crate) fn start(&self, started: u64, timeout: Duration) -> Enqueueing<'_> {
        self.timeout.store(nanos(timeout), Ordering::Relaxed);
        self.started
            .store(started.saturating_add(1), Ordering::Release);
        Enqueueing(self)
    }

    /// How long the enqueue in progress has been blocked at `now`, and its
    /// timeout, if it has run past that timeout.
    pub(crate) fn overdue(&self, now: Instant) -> Option<(Duration, Duration)> {
        let started = self.started.load(Ordering::Acquire);
        if started == 0 {
            return None;
        }
        let timeout = Duration::from_nanos(self.timeout.load(Ordering::Relaxed));
        let since = clock::instant(started - 1);
        let blocked = now.saturating_duration_since(since);
        (blocked >= timeout).then_some((blocked, timeout))
    }
}

/// Marks a member's enqueue as in progress until dropped.
pub(crate) struct Enqueueing<'a>(&'a EnqueueWatch);

impl Drop for Enqueueing<'_> {
    fn drop(&mut self) {
        self.0.started.store(0, Ordering::Release);
    }
}

/// An enqueue the watchdog found stuck past its timeout.
pub(crate) struct BlockedEnqueue {
    pub(crate) device: usize,
    pub(crate) timeout: Duration,
    pub(crate) blocked: Duration,
}

impl Member {
    /// The member of `core`, on `pool`'s device with NCCL stream `stream`.
    ///
    /// # Errors
    /// nccl-tensor's wrapping of the communicator.
    pub(crate) fn new(
        core: nccl_core::Communicator,
        pool: Arc<DevicePool>,
        stream: Arc<CudaStream>,
    ) -> Result<Self> {
        let abort = core.abort_handle();
        let open_end = OpenEnd::new(&pool, &stream);
        Ok(Member {
            comm: Arc::new(SharedComm::new(Communicator::from_core(core)?)),
            abort,
            pool,
            stream,
            enqueue: EnqueueWatch::default(),
            open_end,
        })
    }

    /// The communicator, locked (NCCL calls on one communicator must not overlap).
    pub(crate) fn lock(&self) -> SharedCommGuard<'_> {
        self.comm.lock()
    }

    /// Stops the communicator for good: revoked when `revoke` asks, the
    /// loaded NCCL can ([`Capability::Revoke`]) and no thread is inside a
    /// NCCL call on it (its lock is free: a revoke must not overlap
    /// another call, where an abort may); aborted otherwise, and after a
    /// failed revoke. `begun` is called once its kernels are stopped or
    /// about to be: after the revoke, or right before the abort, whose
    /// first step sets NCCL's abort flags.
    pub(crate) fn release(&self, revoke: bool, begun: &dyn Fn()) {
        let revoked = revoke && self.try_revoke();
        begun();
        if !revoked {
            // An abort error leaves the communicator unusable anyway.
            let _ = self.abort.abort();
        }
    }

    /// Revokes the communicator if NCCL can, no thread is in a NCCL call
    /// on it and no peer was lost under it; whether it is revoked now.
    fn try_revoke(&self) -> bool {
        let Some(comm) = self.comm.try_lock() else {
            return false;
        };
        let core = comm.core();
        // A lost peer's error outlives a revoke and ncclCommShrink refuses
        // it (`LocalComms::unshrinkable`): an abort, quicker to begin, does
        // as well.
        !reports_lost_peer(core)
            && core.capabilities().has(Capability::Revoke)
            && core.revoke().is_ok()
    }

    /// Whether NCCL reported a lost peer (`ncclRemoteError`) on the
    /// communicator; `false` while a thread is inside a NCCL call on it
    /// (this never waits for that call).
    pub(crate) fn saw_lost_peer(&self) -> bool {
        self.comm
            .try_lock()
            .is_some_and(|comm| reports_lost_peer(comm.core()))
    }

    /// Notes that the lock holder started enqueueing at `started`
    /// (nanoseconds on `diagnostics::clock`), with
    /// `timeout`, until the guard drops: an enqueue that blocks past it
    /// (NCCL waiting for a peer that never connects, a custom operation
    /// stuck in its own code) fails the group from the watchdog, whose
    /// abort releases a blocked NCCL call.
    pub(crate) fn enqueueing(&self, started: u64, timeout: Duration) -> Enqueueing<'_> {
        self.enqueue.start(started, timeout)
    }
}

/// Whether `core`'s asynchronous error is a lost peer.
fn reports_lost_peer(core: &nccl_core::Communicator) -> bool {
    matches!(core.async_error(), Err(e) if e.kind() == ErrorKind::PeerLost)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_enqueue_is_overdue_only_past_its_timeout_and_until_it_ends() {
        let watch = EnqueueWatch::default();
        let t0 = Instant::now();
        assert_eq!(watch.overdue(t0 + Duration::from_secs(60)), None);
        let enqueueing = watch.start(clock::nanos(t0), Duration::from_secs(2));
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
        let _again = watch.start(clock::nanos(t1), Duration::from_secs(1));
        assert_eq!(watch.overdue(t1 + Duration::from_millis(500)), None);
        assert!(watch.overdue(t1 + Duration::from_secs(1)).is_some());
    }
}
