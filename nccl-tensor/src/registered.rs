//! [`Registered`]: a buffer registered with a communicator for as long as
//! both live, usable in every operation.

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::CudaStream;

use crate::buffer::{BufferDesc, TypedBuffer, TypedBufferMut, sealed};
use crate::communicator::Communicator;
use crate::error::{Error, Result};
use crate::tracked::Access;

/// A buffer registered with a communicator (`ncclCommRegister`, see
/// [`nccl_core::Registration`]), made by [`Communicator::register`]. It
/// owns the buffer and borrows the communicator, so the memory cannot be
/// freed, nor the communicator destroyed, while NCCL holds the
/// registration; dropping it deregisters the buffer, then drops the
/// buffer. Pass `&mut registered` (or `&registered` as an input) to any
/// operation: NCCL uses the registration for the operations whose buffers
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
pub struct Registered<'c, B> {
    // Declared first: dropped (deregistered) before the buffer is freed.
    registration: nccl_core::Registration<'c>,
    buffer: B,
}

impl<B: std::fmt::Debug> std::fmt::Debug for Registered<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registered")
            .field("buffer", &self.buffer)
            .field("registration", &self.registration)
            .finish()
    }
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
    pub fn register<B: TypedBufferMut>(&self, buffer: B) -> Result<Registered<'_, B>> {
        let (given, expected) = (buffer.desc().device, self.device().ordinal());
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
        // returned `Registered`, which drops the registration before the
        // buffer and hands out no `&mut` through which it could be
        // replaced, so the memory stays allocated while registered.
        let registration = unsafe { self.core().register(address as *mut c_void, bytes) }?;
        Ok(Registered {
            registration,
            buffer,
        })
    }
}

impl<B> Registered<'_, B> {
    /// The registration (NCCL's handle, the range).
    pub fn registration(&self) -> &nccl_core::Registration<'_> {
        &self.registration
    }

    /// Deregisters (`ncclCommDeregister`) and gives the buffer back.
    ///
    /// # Errors
    /// NCCL's refusal to deregister; the buffer is dropped then (after the
    /// registration), as NCCL may still hold it.
    pub fn into_inner(self) -> Result<B> {
        let Registered {
            registration,
            buffer,
        } = self;
        registration.deregister()?;
        Ok(buffer)
    }
}

impl<B> std::ops::Deref for Registered<'_, B> {
    type Target = B;

    fn deref(&self) -> &B {
        &self.buffer
    }
}

impl<B: TypedBuffer> sealed::Sealed for Registered<'_, B> {}

impl<B: TypedBuffer> TypedBuffer for Registered<'_, B> {
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

impl<B: TypedBufferMut> TypedBufferMut for Registered<'_, B> {
    #[inline]
    fn write_ptr<R>(&mut self, stream: &Arc<CudaStream>, f: impl FnOnce(*mut c_void) -> R) -> R {
        self.buffer.write_ptr(stream, f)
    }
}
