//! CUDA devices and streams, over cudarc so its users pass their own.

use std::sync::{Arc, OnceLock};

use cudarc::driver::{CudaContext, CudaStream};

use crate::error::{Error, Result};

/// The CUDA driver library's names: on Linux the driver's soname, then its
/// development link; on Windows its DLL. cudarc's dynamic loading tries
/// these among its candidates, so a driver found here is one it finds too.
#[cfg(windows)]
const DRIVER_LIBRARIES: &[&str] = &["nvcuda.dll"];
#[cfg(not(windows))]
const DRIVER_LIBRARIES: &[&str] = &["libcuda.so.1", "libcuda.so"];

/// Whether the CUDA driver library can be loaded.
///
/// Checked before any cudarc call, because cudarc's dynamic loading panics when
/// the library is missing. The check is this crate's own, so it holds whichever
/// way the application has cudarc reach the driver: with `dynamic-linking` the
/// driver is already loaded (the program could not start without it) and the
/// check finds it.
pub fn cuda_driver_available() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    *PRESENT.get_or_init(|| {
        DRIVER_LIBRARIES.iter().any(|&name| {
            // SAFETY: opening the driver library runs only its own
            // initialisers, as cudarc's loading of it does; no symbol is
            // called, and the handle is closed again when dropped here.
            unsafe { libloading::Library::new(name) }.is_ok()
        })
    })
}

fn require_driver() -> Result<()> {
    if cuda_driver_available() {
        Ok(())
    } else {
        Err(Error::NoCudaDriver)
    }
}

/// One CUDA device, by ordinal, holding its primary context (cudarc's
/// [`CudaContext`]).
///
/// Cloning is cheap and shares the context.
#[derive(Clone)]
pub struct Device {
    context: Arc<CudaContext>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Device({})", self.context.ordinal())
    }
}

impl PartialEq for Device {
    fn eq(&self, other: &Self) -> bool {
        self.context.ordinal() == other.context.ordinal()
    }
}

impl Eq for Device {}

impl Device {
    /// The device with this ordinal.
    ///
    /// # Errors
    /// [`Error::NoCudaDriver`] on a machine without a CUDA driver;
    /// [`Error::InvalidArgument`] for an ordinal past [`Device::count`];
    /// [`Error::Cuda`] if the driver refuses.
    pub fn new(ordinal: usize) -> Result<Self> {
        let count = Self::count()?;
        if ordinal >= count {
            return Err(Error::InvalidArgument {
                argument: "device ordinal",
                expected: format!("0..{count} (the visible GPUs)"),
                given: ordinal.to_string(),
            });
        }
        let context =
            CudaContext::new(ordinal).map_err(Error::cuda("creating the device context"))?;
        Ok(Self { context })
    }

    /// Every visible device, in ordinal order.
    ///
    /// # Errors
    /// As [`Device::new`].
    pub fn all() -> Result<Vec<Self>> {
        (0..Self::count()?).map(Self::new).collect()
    }

    /// Wraps a cudarc context the caller already has.
    pub fn from_context(context: Arc<CudaContext>) -> Self {
        Self { context }
    }

    /// The number of visible CUDA devices.
    ///
    /// # Errors
    /// [`Error::NoCudaDriver`] without a driver; [`Error::Cuda`] if the
    /// driver cannot initialise (no GPU, for instance).
    pub fn count() -> Result<usize> {
        require_driver()?;
        let count = CudaContext::device_count().map_err(Error::cuda("counting devices"))?;
        Ok(count.max(0) as usize)
    }

    /// The device's ordinal.
    pub fn ordinal(&self) -> usize {
        self.context.ordinal()
    }

    /// The cudarc context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.context
    }

    /// Makes this device's context current on the calling thread.
    ///
    /// # Errors
    /// [`Error::Cuda`] if the driver refuses.
    pub fn bind_to_thread(&self) -> Result<()> {
        self.context
            .bind_to_thread()
            .map_err(Error::cuda("binding the device context"))
    }

    /// The device's compute capability `(major, minor)`.
    ///
    /// # Errors
    /// [`Error::Cuda`] if the driver refuses.
    pub fn compute_capability(&self) -> Result<(i32, i32)> {
        self.context
            .compute_capability()
            .map_err(Error::cuda("reading the compute capability"))
    }

    /// The legacy default stream of this device.
    pub fn default_stream(&self) -> Arc<CudaStream> {
        self.context.default_stream()
    }

    /// A new stream that does not synchronise with the default stream.
    ///
    /// # Errors
    /// [`Error::Cuda`] if the driver refuses.
    pub fn new_stream(&self) -> Result<Arc<CudaStream>> {
        self.context
            .new_stream()
            .map_err(Error::cuda("creating a stream"))
    }
}
