//! User-buffer registration (`ncclCommRegister` / `ncclCommDeregister`,
//! NCCL 2.19+) as a guard that borrows its communicator.

use std::ffi::c_void;

use super::Communicator;
use crate::error::{Error, Result};
use crate::library::{check_accepted, require_version};

/// A buffer registered with a communicator (`ncclCommRegister`): NCCL may
/// then move data in and out of it directly (zero-copy peer access over
/// NVLink and PCIe, NVLink SHARP and IB SHARP offload, network send and
/// receive from the buffer itself) instead of through its own staging
/// buffers. Dropping it deregisters the buffer (`ncclCommDeregister`).
///
/// It borrows the communicator, so it is deregistered before the
/// communicator is destroyed, on the thread that drives it (it is not
/// `Send`, as a borrowed [`Communicator`] is not). After an abort or a
/// finalize the communicator frees its registrations itself, and the drop
/// does nothing. Registering is collective for none of NCCL's transports:
/// each rank registers its own buffers when it likes, and an operation
/// uses a registration when every buffer it touches is registered, on
/// every rank that needs it; it works as well (through NCCL's buffers)
/// when they are not.
///
/// With `NCCL_LOCAL_REGISTER=0` NCCL registers nothing and the handle is
/// null; deregistering it is then a no-op.
#[must_use = "the buffer is deregistered when the registration is dropped"]
pub struct Registration<'c> {
    comm: &'c Communicator,
    handle: *mut c_void,
    address: usize,
    bytes: usize,
}

impl std::fmt::Debug for Registration<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("address", &format_args!("{:#x}", self.address))
            .field("bytes", &self.bytes)
            .field("handle", &self.handle)
            .finish()
    }
}

/// Refuses what NCCL would refuse less clearly: a null address or an
/// empty range.
pub(crate) fn check_range(address: usize, bytes: usize) -> Result<()> {
    if address == 0 {
        return Err(Error::InvalidArgument {
            argument: "buffer",
            expected: "the device address of memory on the communicator's device".to_string(),
            given: "a null pointer".to_string(),
        });
    }
    if bytes == 0 {
        return Err(Error::InvalidArgument {
            argument: "bytes",
            expected: "a registration of at least one byte".to_string(),
            given: "0".to_string(),
        });
    }
    Ok(())
}

impl Communicator {
    /// Registers `bytes` bytes of device memory at `buffer` with this
    /// communicator (`ncclCommRegister`, NCCL 2.19+). Registering a range
    /// that an earlier live registration covers takes another reference
    /// to it (the same handle).
    ///
    /// # Safety
    /// `buffer..buffer + bytes` is device memory on this communicator's
    /// device, and it stays allocated (not freed, not reallocated) until
    /// the registration is dropped: NCCL maps it for its peers, and would
    /// keep using that mapping for memory allocated later at the same
    /// addresses.
    ///
    /// # Errors
    /// A null `buffer` or zero `bytes`, an aborted or finalized
    /// communicator, a libnccl older than 2.19, or NCCL's refusal.
    pub unsafe fn register(&self, buffer: *mut c_void, bytes: usize) -> Result<Registration<'_>> {
        check_range(buffer as usize, bytes)?;
        let lib = self.shared.lib;
        require_version(lib, 2, 19, || {
            "user-buffer registration (ncclCommRegister)".to_string()
        })?;
        let register = lib.functions().ncclCommRegister()?;
        let raw = self.raw_for_call()?;
        let mut handle = std::ptr::null_mut();
        // SAFETY: `raw` is live and used by this thread only (`&self` of a
        // communicator that is not `Sync`); the caller vouches for the
        // range; `handle` is a valid place for NCCL's handle.
        let result = unsafe { register(raw, buffer, bytes, &mut handle) };
        check_accepted(lib, "ncclCommRegister", result)?;
        crate::trace::event!(debug, rank = self.rank, bytes, "buffer registered");
        Ok(Registration {
            comm: self,
            handle,
            address: buffer as usize,
            bytes,
        })
    }
}

impl Registration<'_> {
    /// NCCL's handle (null when NCCL registers nothing, with
    /// `NCCL_LOCAL_REGISTER=0`).
    pub fn handle(&self) -> *mut c_void {
        self.handle
    }

    /// The registered range's first device address.
    pub fn address(&self) -> usize {
        self.address
    }

    /// The registered range's length in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Deregisters now (`ncclCommDeregister`), reporting NCCL's error,
    /// which the drop cannot. On an aborted or finalized communicator there
    /// is nothing to do (it freed its registrations).
    ///
    /// # Errors
    /// NCCL's refusal.
    pub fn deregister(mut self) -> Result<()> {
        let handle = std::mem::replace(&mut self.handle, std::ptr::null_mut());
        self.release(handle)
    }

    fn release(&self, handle: *mut c_void) -> Result<()> {
        if handle.is_null() {
            return Ok(());
        }
        let Ok(raw) = self.comm.raw_for_call() else {
            return Ok(());
        };
        let lib = self.comm.shared.lib;
        let deregister = lib.functions().ncclCommDeregister()?;
        // SAFETY: `raw` is live and used by this thread only (the borrowed
        // communicator is not `Sync`); `handle` came from ncclCommRegister
        // on it and is released once (taken out of `self` by the caller).
        let result = unsafe { deregister(raw, handle) };
        check_accepted(lib, "ncclCommDeregister", result)
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        let handle = std::mem::replace(&mut self.handle, std::ptr::null_mut());
        // Errors cannot be reported from drop; `deregister` reports them.
        let _ = self.release(handle);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn a_null_or_empty_range_is_refused_before_nccl_sees_it() {
        let null = check_range(0, 4096).expect_err("null");
        assert_eq!(null.kind(), ErrorKind::InvalidArgument);
        assert_eq!(
            null.to_string(),
            "invalid buffer: expected the device address of memory on the communicator's device, got a null pointer"
        );
        let empty = check_range(0x7f00_0000_0000, 0).expect_err("empty");
        assert_eq!(
            empty.to_string(),
            "invalid bytes: expected a registration of at least one byte, got 0"
        );
        assert!(check_range(0x7f00_0000_0000, 1).is_ok());
    }
}
