//! What the machine offers: the CUDA driver, the GPUs and the NCCL library,
//! checked in that order before anything touches CUDA (cudarc panics
//! without a driver; these checks turn that into one clear error).

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

/// The GPU count to use: `requested` (checked against what is visible) or all.
///
/// # Errors
/// [`BenchError::Usage`] when more GPUs are asked for than are visible.
pub fn world_size(requested: Option<u32>, visible: usize) -> Result<usize, BenchError> {
    match requested {
        None => Ok(visible),
        Some(n) if n as usize <= visible => Ok(n as usize),
        Some(n) => Err(BenchError::Usage(format!(
            "-g {n} asks for {n} GPU(s) but only {visible} are visible (one rank per GPU; NCCL refuses two ranks on one GPU)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn world_size_checks() {
        assert_eq!(world_size(None, 8).unwrap(), 8);
        assert_eq!(world_size(Some(2), 8).unwrap(), 2);
        assert_eq!(world_size(Some(8), 8).unwrap(), 8);
        let error = world_size(Some(2), 1).unwrap_err();
        assert_eq!(error.exit_code(), 2);
        assert!(error.to_string().contains("only 1"));
    }
}
