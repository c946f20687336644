//! The RAII communicator: the handle its abort handles share, its state,
//! accessors and pre-multiplied sums. Creation is in `init`, splitting in
//! `split`, the nonblocking waits in `wait`, finalize, abort and drop in
//! `shutdown`, user-buffer registration in `register`, adopting and
//! handing back a raw handle in `raw`, revoke and shrink in `revoke`,
//! grow in `grow`, suspend, resume and memory statistics in `suspend`.

use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use nccl_sys::{NcclLibrary, ncclComm_t};

use crate::capabilities::Capabilities;
use crate::datatype::DataType;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::library::check;
use crate::reduce_op::PreMulSum;

pub use register::{DetachedRegistration, Registration};
pub use revoke::ShrinkMode;
pub use suspend::{MemStats, Suspended};

mod grow;
mod init;
mod raw;
mod register;
mod revoke;
mod shutdown;
mod split;
mod suspend;
mod wait;

const LIVE: u8 = 0;
const FINALIZED: u8 = 1;
const ABORTED: u8 = 2;
const DESTROYED: u8 = 3;
/// Handed back by `into_raw`: the caller owns the handle now.
const RELEASED: u8 = 4;
/// `ncclCommRevoke` was called: no more operations; shrink, split or
/// grow it, and release it by abort (never destroy, see `revoke`).
const REVOKED: u8 = 5;
/// `ncclCommSuspend` succeeded and no resume did since: no calls but
/// resume and memory statistics; released by abort.
const SUSPENDED: u8 = 6;

/// What the communicator and its abort handles share.
struct Shared {
    raw: ncclComm_t,
    lib: &'static NcclLibrary,
    state: AtomicU8,
}

// SAFETY: `raw` is an opaque handle that NCCL lets any thread use; the only
// call made through `Shared` from other threads is ncclCommAbort, which NCCL
// documents as the way to stop a communicator blocked in another thread.
// `state` serialises who tears the handle down: exactly one CAS out of the
// states that hold NCCL's resources (LIVE, FINALIZED, REVOKED, SUSPENDED)
// wins, so the handle is freed once, and no call that loads the state
// after that CAS uses it. What the state cannot exclude: a call
// on the owning thread that loaded LIVE in `raw_for_call` just before
// another thread's abort reaches NCCL with the handle while, or after, the
// abort tears it down. A call already inside NCCL is the case NCCL's abort
// is made for (the call returns an error); one still between the load and
// its NCCL entry point (a few instructions) races with the free, which
// NCCL's contract does not cover. Callers that abort from another thread
// while this one may issue (nccl-group's watchdog) accept that window, as
// PyTorch's watchdog does; aborting from the owning thread, or after it
// stopped issuing, has no such window.
unsafe impl Send for Shared {}
// SAFETY: as above; all mutation goes through the atomic `state`.
unsafe impl Sync for Shared {}

impl Shared {
    /// Moves a state that still holds NCCL's resources (LIVE, FINALIZED,
    /// REVOKED, SUSPENDED) to `to`; true if this call did it.
    fn claim(&self, to: u8) -> bool {
        self.claim_from(&[LIVE, FINALIZED, REVOKED, SUSPENDED], to)
    }

    /// Moves one of the states `from` to `to`; true if this call did it.
    fn claim_from(&self, from: &[u8], to: u8) -> bool {
        from.iter().any(|&from| {
            self.state
                .compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        })
    }

    fn abort(&self) -> Result<()> {
        if !self.claim(ABORTED) {
            return Ok(());
        }
        crate::trace::event!(info, "aborting a communicator (ncclCommAbort)");
        let abort = self.lib.functions().ncclCommAbort()?;
        // SAFETY: the CAS above made this the only teardown of `raw`, which
        // is live until this call frees it.
        check(self.lib, "ncclCommAbort", unsafe { abort(self.raw) }).map(|_| ())
    }
}

/// A NCCL communicator (`ncclComm_t`) for one rank on one device.
///
/// # Threads
/// NCCL does not allow two threads to issue calls on one communicator at
/// the same time, and calls on a communicator must be issued in the same
/// order on every rank. So `Communicator` is `Send` (move it to the thread
/// that drives its GPU) but not `Sync`: the compiler stops two threads from
/// sharing one. Wrap it in a `Mutex` to share it. An [`AbortHandle`] is the
/// one thing another thread may use while a call is blocked.
///
/// # Drop
/// Dropping never blocks on other ranks: a communicator that was
/// [`finalize`](Communicator::finalize)d is destroyed (`ncclCommDestroy`),
/// any other is aborted (`ncclCommAbort`), which also cancels work still
/// queued on the GPU. Finalize first for an orderly shutdown. A
/// [`revoke`](Communicator::revoke)d communicator cannot be finalized and
/// is always aborted: see there why it must never be destroyed.
pub struct Communicator {
    shared: Arc<Shared>,
    device: Device,
    rank: usize,
    world_size: usize,
    blocking: bool,
    timeout: Duration,
    _not_sync: PhantomData<Cell<()>>,
}

impl fmt::Debug for Communicator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Communicator")
            .field("rank", &self.rank)
            .field("world_size", &self.world_size)
            .field("device", &self.device.ordinal())
            .field("blocking", &self.blocking)
            .finish()
    }
}

/// Aborts a communicator from any thread (`ncclCommAbort`), for instance a
/// watchdog that sees a collective hang.
///
/// Cheap to clone. After an abort, every call on the communicator returns
/// [`Error::Aborted`].
#[derive(Clone)]
pub struct AbortHandle {
    shared: Arc<Shared>,
}

impl fmt::Debug for AbortHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AbortHandle")
            .field("aborted", &self.is_aborted())
            .finish()
    }
}

impl AbortHandle {
    /// Aborts the communicator; a no-op if it is already aborted or
    /// dropped, or was handed back by
    /// [`Communicator::into_raw`].
    ///
    /// # Errors
    /// The error ncclCommAbort returned; the communicator is unusable either way.
    pub fn abort(&self) -> Result<()> {
        self.shared.abort()
    }

    /// Whether the communicator was aborted.
    pub fn is_aborted(&self) -> bool {
        self.shared.state.load(Ordering::Acquire) == ABORTED
    }
}

impl Communicator {
    fn wrap(
        raw: ncclComm_t,
        lib: &'static NcclLibrary,
        device: Device,
        rank: usize,
        world_size: usize,
        blocking: bool,
        timeout: Duration,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                raw,
                lib,
                state: AtomicU8::new(LIVE),
            }),
            device,
            rank,
            world_size,
            blocking,
            timeout,
            _not_sync: PhantomData,
        }
    }

    /// The handle for a call, or why there is none.
    #[inline]
    pub(crate) fn raw_for_call(&self) -> Result<ncclComm_t> {
        match self.shared.state.load(Ordering::Acquire) {
            LIVE => Ok(self.shared.raw),
            state => Err(Self::unusable(state)),
        }
    }

    /// The handle for managing the communicator (split, shrink, grow, its
    /// asynchronous error), which NCCL allows after a revoke too.
    pub(crate) fn raw_for_management(&self) -> Result<ncclComm_t> {
        match self.shared.state.load(Ordering::Acquire) {
            LIVE | REVOKED => Ok(self.shared.raw),
            state => Err(Self::unusable(state)),
        }
    }

    /// The handle while NCCL holds the communicator and a call on it may
    /// still be in progress (live, revoked or suspended): for the waits of
    /// those calls, resume and memory statistics.
    pub(crate) fn raw_held(&self) -> Result<ncclComm_t> {
        match self.shared.state.load(Ordering::Acquire) {
            LIVE | REVOKED | SUSPENDED => Ok(self.shared.raw),
            state => Err(Self::unusable(state)),
        }
    }

    /// Why a communicator in `state` takes no call.
    #[cold]
    fn unusable(state: u8) -> Error {
        match state {
            FINALIZED => Error::Finalized,
            REVOKED => Error::Revoked,
            SUSPENDED => Error::Suspended,
            _ => Error::Aborted,
        }
    }

    /// The handle while NCCL still holds the communicator's resources and
    /// takes calls that release them (live or finalized), else `None`:
    /// after a revoke or a suspend, what is registered is left to the
    /// abort that releases the communicator.
    #[inline]
    pub(crate) fn raw_until_teardown(&self) -> Option<ncclComm_t> {
        matches!(self.shared.state.load(Ordering::Acquire), LIVE | FINALIZED)
            .then_some(self.shared.raw)
    }

    /// The raw `ncclComm_t`, for calls this crate does not wrap, borrowed:
    /// it stays valid while `self` lives and is not aborted, and `self`
    /// still destroys it.
    ///
    /// To hand it over, [`Communicator::into_raw`]; never pass a borrowed
    /// handle to [`Communicator::from_raw`], which would make a second owner.
    ///
    /// # Errors
    /// [`Error::Aborted`] or [`Error::Finalized`].
    pub fn as_raw(&self) -> Result<ncclComm_t> {
        self.raw_for_call()
    }

    /// The library this communicator was created with.
    pub fn library(&self) -> &'static NcclLibrary {
        self.shared.lib
    }

    /// What that library can do of revoke, shrink, grow, suspend/resume and
    /// memory statistics.
    pub fn capabilities(&self) -> Capabilities {
        Capabilities::of(self.shared.lib)
    }

    /// Whether the communicator was revoked ([`Communicator::revoke`]).
    pub fn is_revoked(&self) -> bool {
        self.shared.state.load(Ordering::Acquire) == REVOKED
    }

    /// This rank, in `0..world_size()`.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks.
    pub fn world_size(&self) -> usize {
        self.world_size
    }

    /// The device this rank runs on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Whether calls block until NCCL is done with them.
    pub fn is_blocking(&self) -> bool {
        self.blocking
    }

    /// How long a nonblocking wait on this communicator may take (its
    /// config's [`Config::wait_timeout`](crate::Config::wait_timeout)).
    pub fn wait_timeout(&self) -> Duration {
        self.timeout
    }

    /// A handle that aborts this communicator from any thread.
    pub fn abort_handle(&self) -> AbortHandle {
        AbortHandle {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Creates a pre-multiplied sum for this communicator and `dtype`
    /// (`ncclRedOpCreatePreMulSum`, NCCL 2.11+): `sum(scalar * x)` over the
    /// ranks.
    ///
    /// It is destroyed when dropped, and can only be used on this communicator
    /// and with `dtype`.
    ///
    /// # Errors
    /// A scalar that `dtype` cannot hold, an old libnccl, NCCL's failure.
    pub fn pre_mul_sum(&self, dtype: DataType, scalar: f64) -> Result<PreMulSum<'_>> {
        PreMulSum::new(self, dtype, scalar)
    }
}
