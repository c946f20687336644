//! [`Registered`]: a buffer registered with a communicator for as long as
//! both live, usable in every operation; [`CommAccess`]: how it reaches
//! the communicator again to deregister.

use std::ffi::c_void;
use std::mem::ManuallyDrop;
use std::sync::Arc;

use cudarc::driver::CudaStream;

use nccl_core::DetachedRegistration;

use crate::buffer::{BufferDesc, TypedBuffer, TypedBufferMut, sealed};
use crate::communicator::Communicator;
use crate::error::{Error, Result};
use crate::shared::SharedComm;
use crate::tracked::Access;

mod access_sealed {
    pub trait Sealed {}
}

/// A buffer registered with a communicator (`ncclCommRegister`, see
/// [`nccl_core::Registration`]), made by [`Communicator::register`] or
/// [`Registered::shared`].
///
/// It owns the buffer and borrows the communicator (or shares it: `H`,
/// [`CommAccess`]), so the memory cannot be freed, nor the communicator
/// destroyed, while NCCL holds the registration. Dropping it waits for the
/// device to finish the work queued with the buffer (a device synchronisation:
/// NCCL unmaps at once, not in stream order), deregisters the buffer, then
/// drops it; a deregistration NCCL refuses leaves it allocated for good. Keep
/// registered buffers for long.
///
/// Pass `&mut registered` (or `&registered` as an input) to any
/// operation: NCCL uses the registration for the operations whose buffers
/// are all registered. If any rank passes registered buffers to an
/// operation, every rank must (mixing them across the ranks of one call is
/// undefined in NCCL), as every rank must issue matching operations.
///
/// It reads as the buffer ([`Deref`](std::ops::Deref)), but hands out no
/// `&mut` to it, through which the memory could be swapped for another
/// allocation under the registration; [`into_inner`](Self::into_inner)
/// deregisters and gives the buffer back.
///
/// ```no_run
/// # fn main() -> nccl_tensor::Result<()> {
/// use nccl_tensor::prelude::*;
/// let device = Device::new(0)?;
/// let comm = Communicator::new(device.clone(), 1, UniqueId::new()?, 0)?;
/// let stream = device.new_stream()?;
/// let grads = Tensor::<f32>::nccl_zeros(&stream, &[1 << 20])?; // ncclMemAlloc
/// let mut grads = comm.register(grads)?; // ncclCommRegister
/// let _ = comm.all_reduce(&mut grads, ReduceOp::Sum, &stream)?;
/// let grads = grads.into_inner()?; // ncclCommDeregister
/// # Ok(()) }
/// ```
///
/// A registration cannot outlive its communicator:
///
/// ```compile_fail
/// # fn f(device: nccl_core::Device, stream: &std::sync::Arc<nccl_core::CudaStream>) -> nccl_tensor::Result<()> {
/// let registered = {
///     let comm = nccl_tensor::Communicator::new(device, 1, nccl_core::UniqueId::new()?, 0)?;
///     comm.register(nccl_tensor::Tensor::<f32>::zeros(stream, &[4])?)?
/// }; // error: `comm` does not live long enough
/// # Ok(()) }
/// ```
#[must_use = "the buffer is deregistered when the registration is dropped"]
pub struct Registered<H: CommAccess, B> {
    guard: Guard<H>,
    /// Dropped by `Drop` after the deregistration, or kept (leaked) when
    /// that failed: NCCL may still map the range.
    buffer: ManuallyDrop<B>,
    /// The buffer was handed back by `into_inner`.
    taken: bool,
}

/// Where a [`Registered`] buffer's communicator is, to deregister it
/// there: borrowed (`&Communicator`, made by [`Communicator::register`]),
/// or shared (`Arc<SharedComm>`, made by [`Registered::shared`], which
/// keeps the communicator alive until the buffer is deregistered;
/// nccl-group registers through it).
///
/// Sealed: the registration's soundness rests on deregistering with the
/// communicator that registered, which neither form can swap for another.
pub trait CommAccess: access_sealed::Sealed {
    /// Runs `f` on the communicator, with the exclusion NCCL calls on it
    /// need.
    ///
    /// # Errors
    /// The communicator's lock is held by this thread.
    #[doc(hidden)]
    fn with_comm<R>(&self, f: impl FnOnce(&Communicator) -> R) -> Result<R>;
}

impl access_sealed::Sealed for &Communicator {}

impl CommAccess for &Communicator {
    fn with_comm<R>(&self, f: impl FnOnce(&Communicator) -> R) -> Result<R> {
        Ok(f(self))
    }
}

impl access_sealed::Sealed for Arc<SharedComm> {}

impl CommAccess for Arc<SharedComm> {
    fn with_comm<R>(&self, f: impl FnOnce(&Communicator) -> R) -> Result<R> {
        if self.is_held_here() {
            return Err(nccl_core::Error::InvalidArgument {
                argument: "thread",
                expected: "a thread that does not hold the communicator's lock, to register or \
                           deregister a buffer"
                    .to_string(),
                given: "the thread holding it (a registered buffer made or dropped inside a \
                        call on the communicator, such as nccl-group's `custom` closure?)"
                    .to_string(),
            }
            .into());
        }
        Ok(f(&self.lock()))
    }
}

/// The registration, deregistered through `access`.
struct Guard<H: CommAccess> {
    access: H,
    /// `None` once deregistered, or once that failed.
    registration: Option<DetachedRegistration>,
    /// A deregistration failed: NCCL may still map the range.
    failed: bool,
}

impl<H: CommAccess> Guard<H> {
    /// Deregisters once, after the device has finished the work queued
    /// with the buffer (NCCL unmaps at once, not in stream order).
    fn deregister(&mut self) -> Result<()> {
        let Some(registration) = self.registration.take() else {
            return Ok(());
        };
        let result = (|| {
            let device = self.access.with_comm(|comm| comm.device().clone())?;
            device
                .context()
                .synchronize()
                .map_err(nccl_core::Error::cuda(
                    "waiting for the device before deregistering a buffer",
                ))?;
            Ok(self
                .access
                .with_comm(|comm| comm.core().deregister(registration))??)
        })();
        self.failed = result.is_err();
        result
    }
}

impl<H: CommAccess, B> Drop for Registered<H, B> {
    fn drop(&mut self) {
        // Errors cannot be reported from drop; `into_inner` reports them.
        let _ = self.guard.deregister();
        if !self.guard.failed && !self.taken {
            // SAFETY: dropped once: `self` is being dropped, `taken` says
            // `into_inner` did not move the buffer out, and nothing uses
            // the field after this.
            unsafe { ManuallyDrop::drop(&mut self.buffer) }
        }
    }
}

impl<H: CommAccess, B: std::fmt::Debug> std::fmt::Debug for Registered<H, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registered")
            .field("buffer", &*self.buffer)
            .field("registration", &self.guard.registration)
            .finish()
    }
}

/// Registers `buffer` with `comm` through `access`, which reaches the
/// same communicator.
fn register<H: CommAccess, B: TypedBufferMut>(
    access: H,
    comm: &Communicator,
    buffer: B,
) -> Result<Registered<H, B>> {
    let (given, expected) = (buffer.desc().device, comm.device().ordinal());
    if given != expected {
        return Err(Error::WrongDevice {
            op: "register",
            what: "buffer",
            expected,
            given,
        });
    }
    let (address, bytes) = buffer.device_range();
    // SAFETY: `buffer` is device memory on this communicator's device
    // (checked above), `bytes` long from `address`; it is owned by the
    // returned `Registered`, which deregisters through `access` (the same
    // communicator: `CommAccess` is sealed, and both callers pass `comm`'s
    // own access) before dropping the buffer, and hands out no `&mut`
    // through which it could be replaced, so the memory stays allocated
    // while registered.
    let registration = unsafe { comm.core().register_detached(address as *mut c_void, bytes) }?;
    Ok(Registered {
        guard: Guard {
            access,
            registration: Some(registration),
            failed: false,
        },
        buffer: ManuallyDrop::new(buffer),
        taken: false,
    })
}

impl Communicator {
    /// Registers `buffer` with this communicator (`ncclCommRegister`,
    /// NCCL 2.19+) until the returned [`Registered`] is dropped.
    ///
    /// Memory from [`Tensor::nccl_zeros`](crate::Tensor::nccl_zeros)
    /// (`ncclMemAlloc`) can be registered for every transport; cudarc's own
    /// allocations serve the transports that accept `cudaMalloc` memory (NCCL
    /// falls back to its own buffers for the others).
    ///
    /// # Errors
    /// A buffer on another device than the communicator's, an empty one,
    /// an aborted or finalized communicator, a libnccl older than 2.19, or
    /// NCCL's refusal.
    pub fn register<B: TypedBufferMut>(&self, buffer: B) -> Result<Registered<&Self, B>> {
        register(self, self, buffer)
    }
}

impl<B: TypedBufferMut> Registered<Arc<SharedComm>, B> {
    /// Registers `buffer` with the communicator behind `comm`, as
    /// [`Communicator::register`] does, for as long as the returned
    /// [`Registered`] lives: it keeps the communicator alive, and is
    /// `Send` and `Sync` when the buffer is.
    ///
    /// Registering and deregistering take `comm`'s lock, so they never overlap
    /// the calls made under it.
    ///
    /// # Errors
    /// As [`Communicator::register`], or this thread holds `comm`'s lock.
    pub fn shared(comm: &Arc<SharedComm>, buffer: B) -> Result<Self> {
        let access = Arc::clone(comm);
        access.with_comm(|locked| register(Arc::clone(comm), locked, buffer))?
    }
}

impl<H: CommAccess, B> Registered<H, B> {
    /// NCCL's handle (null when NCCL registers nothing, with
    /// `NCCL_LOCAL_REGISTER=0`).
    pub fn handle(&self) -> *mut c_void {
        self.guard
            .registration
            .as_ref()
            .map_or(std::ptr::null_mut(), DetachedRegistration::handle)
    }

    /// The registered range: its first device address and its length in
    /// bytes (the buffer's [`device_range`](TypedBuffer::device_range)).
    pub fn range(&self) -> (usize, usize) {
        self.guard
            .registration
            .as_ref()
            .map_or((0, 0), |registration| {
                (registration.address(), registration.bytes())
            })
    }

    /// Deregisters (`ncclCommDeregister`) and gives the buffer back, once
    /// the device has finished the work queued with it (a device
    /// synchronisation: NCCL unmaps at once, not in stream order).
    ///
    /// # Errors
    /// NCCL's refusal to deregister, or this thread holds a shared
    /// communicator's lock. The buffer is then kept allocated for good (a
    /// leak), as NCCL may still map it.
    pub fn into_inner(mut self) -> Result<B> {
        self.guard.deregister()?;
        self.taken = true;
        // SAFETY: `taken` keeps `Drop` from dropping the buffer again, and
        // `self` is dropped right after without using it.
        Ok(unsafe { ManuallyDrop::take(&mut self.buffer) })
    }
}

impl<H: CommAccess, B: crate::HoldsResult> crate::HoldsResult for Registered<H, B> {
    fn set_producer(&mut self, check: std::sync::Arc<dyn crate::ResultCheck>) {
        self.buffer.set_producer(check);
    }
}

impl<H: CommAccess, B> std::ops::Deref for Registered<H, B> {
    type Target = B;

    fn deref(&self) -> &B {
        &self.buffer
    }
}

impl<H: CommAccess, B: TypedBuffer> sealed::Sealed for Registered<H, B> {}

impl<H: CommAccess, B: TypedBuffer> TypedBuffer for Registered<H, B> {
    type Elem = B::Elem;

    #[inline]
    fn desc(&self) -> BufferDesc<'_> {
        self.buffer.desc()
    }

    #[inline]
    fn read_ptr<R>(&self, stream: &Arc<CudaStream>, f: impl FnOnce(*const c_void) -> R) -> R {
        self.buffer.read_ptr(stream, f)
    }

    fn is_settled_on(&self, stream: &Arc<CudaStream>, access: Access) -> bool {
        self.buffer.is_settled_on(stream, access)
    }

    fn device_range(&self) -> (u64, usize) {
        self.buffer.device_range()
    }
}

impl<H: CommAccess, B: TypedBufferMut> TypedBufferMut for Registered<H, B> {
    #[inline]
    fn write_ptr<R>(&mut self, stream: &Arc<CudaStream>, f: impl FnOnce(*mut c_void) -> R) -> R {
        self.buffer.write_ptr(stream, f)
    }
}
