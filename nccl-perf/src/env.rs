//! What the machine offers: the CUDA driver, the GPUs and the NCCL library,
//! checked in that order before anything touches CUDA (cudarc panics
//! without a driver; these checks turn that into one clear error); and the
//! host's name.

use nccl_sys::NcclLibrary;

use crate::error::BenchError;

/// A machine that can run the benchmark.
#[derive(Debug)]
pub struct Environment {
    /// The number of visible GPUs.
    pub gpu_count: usize,
    /// The loaded libnccl.
    pub library: &'static NcclLibrary,
}

/// Checks for the CUDA driver, at least one GPU and the NCCL library.
///
/// # Errors
/// [`BenchError::Environment`] naming what is missing and how to point at it.
pub fn probe() -> Result<Environment, BenchError> {
    if !nccl_core::cuda_driver_available() {
        return Err(BenchError::Environment(
            "no CUDA driver found: libcuda.so.1 could not be loaded; nccl-perf needs an NVIDIA GPU and its \
             driver (if the driver is installed, add the folder holding libcuda.so.1 to LD_LIBRARY_PATH)"
                .to_string(),
        ));
    }
    let gpu_count = nccl_core::Device::count().map_err(|error| {
        BenchError::Environment(format!(
            "cannot count the CUDA GPUs: {}",
            nccl_core::ErrorChain(&error)
        ))
    })?;
    if gpu_count == 0 {
        return Err(BenchError::Environment(format!(
            "no CUDA GPU is visible (CUDA_VISIBLE_DEVICES={}); nccl-perf needs at least one NVIDIA GPU",
            std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_else(|_| "unset".to_string())
        )));
    }
    let library =
        nccl_core::library().map_err(|error| BenchError::Environment(error.to_string()))?;
    Ok(Environment { gpu_count, library })
}

/// The host's name, as the kernel has it.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_string())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_name_is_the_kernels() {
        let kernel = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let expected = match kernel.trim() {
            "" => "localhost",
            name => name,
        };
        assert_eq!(hostname(), expected);
    }
}
