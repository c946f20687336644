//! [`Registered`]: a buffer registered with a communicator for as long as
//! both live, usable in every operation; [`CommAccess`]: how it reaches
//! the communicator again to deregister.

use std::ffi::c_void;
use std::sync::{Arc, Mutex, PoisonError};

use cudarc::driver::CudaStream;

use nccl_core::DetachedRegistration;

use crate::buffer::{BufferDesc, TypedBuffer, TypedBufferMut, sealed};
use crate::communicator::Communicator;
use crate::error::{Error, Result};
use crate::tracked::Access;

mod access_sealed {
    pub trait Sealed {}
}

/// A buffer registered with a communicator (`ncclCommRegister`, see
/// [`nccl_core::Registration`]), made by [`Communicator::register`] or
/// [`Registered::shared`]. It owns the buffer and borrows the communicator
/// (or shares it: `H`, [`CommAccess`]), so the memory cannot be freed, nor
/// the communicator destroyed, while NCCL holds the registration; dropping
/// it deregisters the buffer, then drops the buffer. Pass `&mut registered`
/// (or `&registered` as an input) to any operation: NCCL uses the registration for the operations whose buffers
/// are all registered.
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
    // Declared first: dropped (deregistered) before the buffer is freed.
    guard: Guard<H>,
    buffer: B,
}

/// Where a [`Registered`] buffer's communicator is, to deregister it
/// there: borrowed (`&Communicator`, made by [`Communicator::register`]),
/// or shared behind a lock (`Arc<Mutex<Communicator>>`, made by
/// [`Registered::shared`], which keeps the communicator alive until the
/// buffer is deregistered; nccl-group registers through it). Sealed: the
/// registration's soundness rests on deregistering with the communicator
/// that registered.
pub trait CommAccess: access_sealed::Sealed {
    /// Runs `f` on the communicator, with the exclusion NCCL calls on it
    /// need.
    #[doc(hidden)]
    fn with_comm<R>(&self, f: impl FnOnce(&Communicator) -> R) -> R;
}

impl access_sealed::Sealed for &Communicator {}

impl CommAccess for &Communicator {
    fn with_comm<R>(&self, f: impl FnOnce(&Communicator) -> R) -> R {
        f(self)
    }
}

impl access_sealed::Sealed for Arc<Mutex<Communicator>> {}

impl CommAccess for Arc<Mutex<Communicator>> {
    fn with_comm<R>(&self, f: impl FnOnce(&Communicator) -> R) -> R {
        // A panic elsewhere while holding the lock leaves the communicator
        // as usable as NCCL left it.
        f(&self.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// The registration, deregistered through `access` when dropped.
struct Guard<H: CommAccess> {
    access: H,
    /// `None` once deregistered.
    registration: Option<DetachedRegistration>,
}

impl<H: CommAccess> Guard<H> {
    fn deregister(&mut self) -> Result<()> {
        match self.registration.take() {
            Some(registration) => Ok(self
                .access
                .with_comm(|comm| comm.core().deregister(registration))?),
            None => Ok(()),
        }
    }
}

impl<H: CommAccess> Drop for Guard<H> {
    fn drop(&mut self) {
        // Errors cannot be reported from drop; `into_inner` reports them.
        let _ = self.deregister();
    }
}

impl<H: CommAccess, B: std::fmt::Debug> std::fmt::Debug for Registered<H, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registered")
            .field("buffer", &self.buffer)
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
        },
        buffer,
    })
}

impl Communicator {
    /// Registers `buffer` with this communicator (`ncclCommRegister`,
    /// NCCL 2.19+) until the returned [`Registered`] is dropped. Memory from
    /// [`Tensor::nccl_zeros`](crate::Tensor::nccl_zeros) (`ncclMemAlloc`)
    /// can be registered for every transport; cudarc's own allocations
    /// serve the transports that accept `cudaMalloc` memory (NCCL falls
    /// back to its own buffers for the others).
    ///
    /// # Errors
    /// A buffer on another device than the communicator's, an empty one,
    /// an aborted or finalized communicator, a libnccl older than 2.19, or
    /// NCCL's refusal.
    pub fn register<B: TypedBufferMut>(&self, buffer: B) -> Result<Registered<&Self, B>> {
        register(self, self, buffer)
    }
}

impl<B: TypedBufferMut> Registered<Arc<Mutex<Communicator>>, B> {
    /// Registers `buffer` with the communicator behind `comm`, as
    /// [`Communicator::register`] does, for as long as the returned
    /// [`Registered`] lives: it keeps the communicator alive, and is
    /// `Send` and `Sync` when the buffer is. Registering and dropping lock
    /// `comm` (so they never overlap the communicator's operations issued
    /// under the same lock): do not drop one while holding that lock.
    ///
    /// # Errors
    /// As [`Communicator::register`].
    pub fn shared(comm: &Arc<Mutex<Communicator>>, buffer: B) -> Result<Self> {
        let locked = comm.lock().unwrap_or_else(PoisonError::into_inner);
        register(Arc::clone(comm), &locked, buffer)
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

    /// Deregisters (`ncclCommDeregister`) and gives the buffer back.
    ///
    /// # Errors
    /// NCCL's refusal to deregister; the buffer is dropped then (after the
    /// registration), as NCCL may still hold it.
    pub fn into_inner(self) -> Result<B> {
        let Registered { mut guard, buffer } = self;
        guard.deregister()?;
        Ok(buffer)
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
