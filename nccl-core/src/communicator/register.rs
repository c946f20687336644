//! User-buffer registration (`ncclCommRegister` / `ncclCommDeregister`,
//! NCCL 2.19+): a [`DetachedRegistration`] that borrows nothing, given back
//! to its communicator's [`Communicator::deregister`], and the
//! [`Registration`] guard that borrows its communicator and deregisters on
//! drop.

use std::ffi::c_void;
use std::sync::{Arc, Weak};

use super::{Communicator, Shared};
use crate::error::{Error, Result};
use crate::library::{check_accepted, require_version};
use crate::memory::check_bytes;

/// A buffer registered with a communicator (`ncclCommRegister`): NCCL may
/// then move data in and out of it directly (zero-copy peer access over
/// NVLink and PCIe, NVLink SHARP and IB SHARP offload, network send and
/// receive from the buffer itself) instead of through its own staging
/// buffers.
///
/// Dropping it deregisters the buffer (`ncclCommDeregister`).
///
/// It borrows the communicator, so it is deregistered before the
/// communicator is destroyed, on the thread that drives it (it is not
/// `Send`, as a borrowed [`Communicator`] is not). A finalized
/// communicator still deregisters; an aborted one freed its registrations
/// itself, and the drop does nothing. Deregistering is not ordered after
/// the GPU work queued with the buffer: let that work finish first. Registering is collective for none of NCCL's transports:
/// each rank registers its own buffers when it likes, and an operation
/// uses a registration when every buffer it touches is registered, on
/// every rank that needs it; it works as well (through NCCL's buffers)
/// when they are not.
///
/// With `NCCL_LOCAL_REGISTER=0` NCCL registers nothing and the handle is
/// null; deregistering it is then a no-op.
#[must_use = "the buffer is deregistered when the registration is dropped"]
#[derive(Debug)]
pub struct Registration<'c> {
    comm: &'c Communicator,
    /// `None` once deregistered.
    registration: Option<DetachedRegistration>,
}

/// A registration (`ncclCommRegister`) that borrows nothing: it is `Send`
/// and `Sync`, for owners that keep the communicator behind a lock of
/// their own and deregister through it.
///
/// Give it back to [`Communicator::deregister`] of the communicator that made
/// it; one dropped instead stays registered until that communicator is aborted
/// or destroyed (which frees every registration). Made by the `unsafe`
/// [`Communicator::register_detached`].
#[must_use = "a detached registration lasts until it is given to Communicator::deregister"]
pub struct DetachedRegistration {
    /// Which communicator made it: compared, never upgraded (the weak
    /// reference keeps the address from being reused by another one).
    comm: Weak<Shared>,
    handle: *mut c_void,
    address: usize,
    bytes: usize,
}

// SAFETY: `handle` is NCCL's opaque token for the registration; this type
// never dereferences it, and hands it only to ncclCommDeregister, through
// `Communicator::deregister`, which runs with the communicator's own
// exclusion (`&Communicator`, which is not `Sync`).
unsafe impl Send for DetachedRegistration {}
// SAFETY: as above: `&DetachedRegistration` only reads the plain fields.
unsafe impl Sync for DetachedRegistration {}

impl std::fmt::Debug for DetachedRegistration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DetachedRegistration")
            .field("address", &format_args!("{:#x}", self.address))
            .field("bytes", &self.bytes)
            .field("handle", &self.handle)
            .finish()
    }
}

/// Refuses what NCCL would refuse less clearly: an empty range (an empty
/// buffer's address may be null: the emptiness is what to report), or a
/// null address.
pub(crate) fn check_range(address: usize, bytes: usize) -> Result<()> {
    check_bytes("a registration", bytes)?;
    if address == 0 {
        return Err(Error::InvalidArgument {
            argument: "buffer",
            expected: "the device address of memory on the communicator's device".to_string(),
            given: "a null pointer".to_string(),
        });
    }
    Ok(())
}

impl Communicator {
    /// Registers `bytes` bytes of device memory at `buffer` with this
    /// communicator (`ncclCommRegister`, NCCL 2.19+) until the returned
    /// [`Registration`] is dropped.
    ///
    /// Registering a range that an earlier live registration covers takes
    /// another reference to it (the same handle).
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
        // SAFETY: the caller's promise, kept until the registration drops,
        // which deregisters it.
        let registration = unsafe { self.register_detached(buffer, bytes) }?;
        Ok(Registration {
            comm: self,
            registration: Some(registration),
        })
    }

    /// [`register`](Self::register), as a [`DetachedRegistration`] that
    /// borrows nothing.
    ///
    /// # Safety
    /// As [`register`](Self::register), until the registration is given
    /// back to [`deregister`](Self::deregister), or this communicator is
    /// aborted or destroyed. A communicator handed over with
    /// [`into_raw`](Self::into_raw) and adopted again is another
    /// [`Communicator`], which refuses the registration: its memory must
    /// then stay allocated until that one's teardown.
    ///
    /// # Errors
    /// As [`register`](Self::register).
    pub unsafe fn register_detached(
        &self,
        buffer: *mut c_void,
        bytes: usize,
    ) -> Result<DetachedRegistration> {
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
        Ok(DetachedRegistration {
            comm: Arc::downgrade(&self.shared),
            handle,
            address: buffer as usize,
            bytes,
        })
    }

    /// Deregisters `registration` (`ncclCommDeregister`), on a live or a
    /// finalized communicator.
    ///
    /// On an aborted one there is nothing to do (it freed its registrations),
    /// and none for a null handle (`NCCL_LOCAL_REGISTER=0`, accepted from any
    /// communicator). Deregistering is not ordered after the GPU work queued
    /// with the buffer: let that work finish first.
    ///
    /// # Errors
    /// A registration made by another communicator (it is dropped, and
    /// stays registered with that one until its teardown), or NCCL's
    /// refusal.
    pub fn deregister(&self, registration: DetachedRegistration) -> Result<()> {
        if registration.handle.is_null() {
            return Ok(());
        }
        if !std::ptr::eq(registration.comm.as_ptr(), Arc::as_ptr(&self.shared)) {
            return Err(Error::InvalidArgument {
                argument: "registration",
                expected: format!(
                    "a registration made by this communicator (rank {} of {})",
                    self.rank, self.world_size
                ),
                given: format!(
                    "one of {} bytes at {:#x} made by another communicator",
                    registration.bytes, registration.address
                ),
            });
        }
        let Some(raw) = self.raw_until_teardown() else {
            return Ok(());
        };
        let lib = self.shared.lib;
        let deregister = lib.functions().ncclCommDeregister()?;
        // SAFETY: `raw` is not yet torn down (live or finalized: NCCL keeps
        // the registrations until destroy or abort) and used by this thread
        // only (`&self` of a communicator that is not `Sync`); `handle` came
        // from ncclCommRegister on it (checked above) and is released once
        // (the registration is consumed).
        let result = unsafe { deregister(raw, registration.handle) };
        check_accepted(lib, "ncclCommDeregister", result)
    }
}

impl DetachedRegistration {
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
}

impl Registration<'_> {
    /// The registration itself: NCCL's handle, the range (`None` only
    /// inside [`deregister`](Self::deregister)).
    fn detached(&self) -> Option<&DetachedRegistration> {
        self.registration.as_ref()
    }

    /// NCCL's handle (null when NCCL registers nothing, with
    /// `NCCL_LOCAL_REGISTER=0`).
    pub fn handle(&self) -> *mut c_void {
        self.detached()
            .map_or(std::ptr::null_mut(), DetachedRegistration::handle)
    }

    /// The registered range's first device address.
    pub fn address(&self) -> usize {
        self.detached().map_or(0, DetachedRegistration::address)
    }

    /// The registered range's length in bytes.
    pub fn bytes(&self) -> usize {
        self.detached().map_or(0, DetachedRegistration::bytes)
    }

    /// Deregisters now (`ncclCommDeregister`), reporting NCCL's error,
    /// which the drop cannot.
    ///
    /// On an aborted communicator there is nothing to do (it freed its
    /// registrations).
    ///
    /// # Errors
    /// NCCL's refusal.
    pub fn deregister(mut self) -> Result<()> {
        match self.registration.take() {
            Some(registration) => self.comm.deregister(registration),
            None => Ok(()),
        }
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        if let Some(registration) = self.registration.take() {
            // Errors cannot be reported from drop; `deregister` reports them.
            let _ = self.comm.deregister(registration);
        }
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
        let empty_and_null = check_range(0, 0).expect_err("an empty buffer's null address");
        assert_eq!(empty_and_null.to_string(), empty.to_string());
        assert_eq!(
            empty.to_string(),
            "invalid bytes: expected a registration of at least one byte, got 0"
        );
        assert!(check_range(0x7f00_0000_0000, 1).is_ok());
    }
}
