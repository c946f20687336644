//! Device memory allocated by NCCL (`ncclMemAlloc` / `ncclMemFree`,
//! NCCL 2.19+): what NCCL can register for every transport.

use std::ffi::c_void;

use nccl_sys::NcclLibrary;

use crate::device::Device;
use crate::error::{Error, Result};
use crate::library::{check_accepted, library, require_version};

/// Device memory from `ncclMemAlloc`, freed with `ncclMemFree` when
/// dropped.
///
/// NCCL allocates it with the CUDA virtual-memory API (`cuMemCreate`,
/// rounded up to the allocation granularity, exportable to the other
/// processes and mapped for every peer GPU), which is what registering a
/// buffer for NVLink SHARP (NVLS) and for zero-copy peer access needs, as
/// PyTorch's NCCL memory pool allocates (`ncclMemAlloc` behind
/// `torch.cuda.MemPool` and `register_mem_pool`). Without the
/// virtual-memory API NCCL falls back to `cudaMalloc`.
///
/// # Stream ordering
/// `ncclMemFree` is not stream-ordered: it frees at once, like `cudaFree`.
/// So the drop first waits, on the host, for all the work queued on the
/// device (a device synchronisation, as `cudaFree` does), and only then
/// frees: no kernel still queued can touch the memory afterwards. Drop
/// these allocations outside hot loops, and not while a stream of the
/// device is being captured in a CUDA graph with the global capture mode
/// (the synchronisation would invalidate the capture; the memory is then
/// freed all the same).
pub struct NcclMemory {
    lib: &'static NcclLibrary,
    device: Device,
    address: usize,
    bytes: usize,
}

impl std::fmt::Debug for NcclMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NcclMemory")
            .field("device", &self.device.ordinal())
            .field("address", &format_args!("{:#x}", self.address))
            .field("bytes", &self.bytes)
            .finish()
    }
}

/// Refuses zero `bytes` for `what` ("an allocation", "a registration"),
/// which NCCL would refuse less clearly: `ncclMemAlloc` would hand an
/// empty allocation to `cudaMalloc` and get a null pointer back.
pub(crate) fn check_bytes(what: &str, bytes: usize) -> Result<()> {
    if bytes == 0 {
        return Err(Error::InvalidArgument {
            argument: "bytes",
            expected: format!("{what} of at least one byte"),
            given: "0".to_string(),
        });
    }
    Ok(())
}

impl NcclMemory {
    /// Allocates `bytes` bytes on `device` with `ncclMemAlloc` (its
    /// contents are undefined).
    ///
    /// # Errors
    /// Zero `bytes`, no libnccl or one older than 2.19, a device the
    /// driver refuses to bind, or NCCL's failure (out of memory).
    pub fn new(device: &Device, bytes: usize) -> Result<Self> {
        check_bytes("an allocation", bytes)?;
        let lib = library()?;
        require_version(lib, 2, 19, || {
            "NCCL memory allocation (ncclMemAlloc)".to_string()
        })?;
        let alloc = lib.functions().ncclMemAlloc()?;
        // ncclMemAlloc allocates on the calling thread's current device.
        device.bind_to_thread()?;
        let mut pointer: *mut c_void = std::ptr::null_mut();
        // SAFETY: `pointer` is a valid place for the address NCCL writes;
        // the current device is `device`.
        check_accepted(lib, "ncclMemAlloc", unsafe { alloc(&mut pointer, bytes) })?;
        if pointer.is_null() {
            return Err(Error::InvalidArgument {
                argument: "bytes",
                expected: "an allocation ncclMemAlloc could make".to_string(),
                given: format!("{bytes} (ncclMemAlloc returned a null pointer)"),
            });
        }
        crate::trace::event!(debug, device = device.ordinal(), bytes, "ncclMemAlloc");
        Ok(Self {
            lib,
            device: device.clone(),
            address: pointer as usize,
            bytes,
        })
    }

    /// The device address of the first byte.
    pub fn address(&self) -> usize {
        self.address
    }

    /// The bytes asked for (NCCL may have mapped more: its granularity).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The device the memory is on.
    pub fn device(&self) -> &Device {
        &self.device
    }
}

impl Drop for NcclMemory {
    fn drop(&mut self) {
        // Errors cannot be reported from drop: a failed synchronisation
        // means the context is broken, and freeing is all that is left.
        let _ = self.device.context().synchronize();
        if let Ok(free) = self.lib.functions().ncclMemFree() {
            // SAFETY: the address came from ncclMemAlloc and is freed once,
            // here; the device has finished every queued use of it.
            let _ = unsafe { free(self.address as *mut c_void) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_allocation_is_refused_before_nccl_sees_it() {
        let error = check_bytes("an allocation", 0).expect_err("empty");
        assert_eq!(error.kind(), crate::ErrorKind::InvalidArgument);
        assert_eq!(
            error.to_string(),
            "invalid bytes: expected an allocation of at least one byte, got 0"
        );
        assert!(check_bytes("an allocation", 1).is_ok());
    }
}
