//! `-M 1`: nccl-tests' GPU memory report. Each rank reads its GPU's free
//! memory (`cuMemGetInfo`, as nccl-tests' `cudaMemGetInfo`, so it counts
//! whatever else runs on that GPU too) around three steps, and the report
//! is the largest of each over the ranks, printed after the tables as
//! nccl-tests' `writeMemInfo` prints it:
//!
//! * Initialization: creating the rank's communicator (and the group
//!   layers' process groups, whose communicators their first barrier
//!   makes);
//! * User-Allocated: the largest set of send and receive buffers (one per
//!   collective and element type here, where nccl-tests allocates one for
//!   the run), registered with `-R 1`;
//! * Collective: what the run left allocated at its end, once its buffers
//!   were freed (the resources NCCL sets up on first use).

use std::cell::Cell;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaStream};
use serde::{Deserialize, Serialize};

use crate::error::BenchError;

/// What one rank (or, combined, every rank) used, in bytes; a step that
/// freed more than it took is negative, as in nccl-tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryUsage {
    /// Creating the communicators.
    pub init: i64,
    /// The largest set of send and receive buffers.
    pub buffers: i64,
    /// Left allocated by the collectives.
    pub collective: i64,
}

impl MemoryUsage {
    /// The largest of each step over `usages` (every rank's), as
    /// nccl-tests reduces them with `MPI_MAX`; 0 each without any.
    pub fn max(usages: &[MemoryUsage]) -> Self {
        let largest = |step: fn(&MemoryUsage) -> i64| usages.iter().map(step).max().unwrap_or(0);
        Self {
            init: largest(|usage| usage.init),
            buffers: largest(|usage| usage.buffers),
            collective: largest(|usage| usage.collective),
        }
    }

    /// nccl-tests' line: `# GPU memory usage     : Initialization 530 MB
    /// | User-Allocated 384 MB | Collective 2.00 MB | Total  916 MB`.
    pub fn line(&self) -> String {
        let total = self
            .init
            .saturating_add(self.buffers)
            .saturating_add(self.collective);
        format!(
            "# {:<20} : Initialization {} | User-Allocated {} | Collective {} | Total  {}",
            "GPU memory usage",
            mem_string(self.init),
            mem_string(self.buffers),
            mem_string(self.collective),
            mem_string(total)
        )
    }
}

/// `bytes` as nccl-tests' `getMemString` writes it: in B, KB, MB or GB
/// (powers of 1024), two decimals below 10, one below 100, else none.
pub fn mem_string(bytes: i64) -> String {
    let mut amount = bytes as f64;
    let mut unit = "B";
    for (name, scale) in [("GB", 1u64 << 30), ("MB", 1 << 20), ("KB", 1 << 10)] {
        if amount.abs() >= scale as f64 {
            amount /= scale as f64;
            unit = name;
            break;
        }
    }
    let precision = if amount.abs() < 10.0 {
        2
    } else if amount.abs() < 100.0 {
        1
    } else {
        0
    };
    format!("{amount:.precision$} {unit}")
}

/// A rank's side of `-M`: its GPU's free memory around each step.
pub struct MemoryWatch {
    context: Arc<CudaContext>,
    /// Free bytes once the communicators exist (before, until then).
    ready: i64,
    init: i64,
    buffers: Cell<i64>,
}

impl MemoryWatch {
    /// Starts watching `context`'s GPU, before the communicators exist.
    ///
    /// # Errors
    /// The driver's error reading the free memory.
    pub fn new(context: Arc<CudaContext>) -> Result<Self, BenchError> {
        let ready = free_bytes(&context)?;
        Ok(Self {
            context,
            ready,
            init: 0,
            buffers: Cell::new(0),
        })
    }

    /// The communicators now exist.
    ///
    /// # Errors
    /// As [`MemoryWatch::new`].
    pub fn initialized(&mut self) -> Result<(), BenchError> {
        let now = free_bytes(&self.context)?;
        self.init = self.ready - now;
        self.ready = now;
        Ok(())
    }

    /// Runs `allocate` (the buffers' allocation, on `stream`) and counts
    /// what it took, once `stream` has done it.
    ///
    /// # Errors
    /// `allocate`'s, or the driver's.
    pub fn allocation<T>(
        &self,
        stream: &CudaStream,
        allocate: impl FnOnce() -> Result<T, BenchError>,
    ) -> Result<T, BenchError> {
        let before = free_bytes(&self.context)?;
        let allocated = allocate()?;
        stream.synchronize().map_err(nccl_core::Error::cuda(
            "synchronizing after the buffers' allocation (-M)",
        ))?;
        let taken = before - free_bytes(&self.context)?;
        self.buffers.set(self.buffers.get().max(taken));
        Ok(allocated)
    }

    /// What the rank used, once its buffers are freed and `stream` is idle.
    ///
    /// # Errors
    /// The driver's error.
    pub fn usage(&self, stream: &CudaStream) -> Result<MemoryUsage, BenchError> {
        stream.synchronize().map_err(nccl_core::Error::cuda(
            "synchronizing before the memory report (-M)",
        ))?;
        Ok(MemoryUsage {
            init: self.init,
            buffers: self.buffers.get(),
            collective: self.ready - free_bytes(&self.context)?,
        })
    }
}

/// The free memory of `context`'s GPU, in bytes.
fn free_bytes(context: &CudaContext) -> Result<i64, BenchError> {
    let (free, _total) = context
        .mem_get_info()
        .map_err(nccl_core::Error::cuda("reading the free GPU memory (-M)"))?;
    Ok(i64::try_from(free).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_as_nccl_tests_writes_them() {
        assert_eq!(mem_string(0), "0.00 B");
        assert_eq!(mem_string(512), "512 B");
        assert_eq!(mem_string(1023), "1023 B");
        assert_eq!(mem_string(1024), "1.00 KB");
        assert_eq!(mem_string(2 << 20), "2.00 MB");
        assert_eq!(mem_string(45 << 20), "45.0 MB");
        assert_eq!(mem_string(530 << 20), "530 MB");
        assert_eq!(mem_string(3 << 30), "3.00 GB");
        assert_eq!(mem_string(1536 << 30), "1536 GB");
        assert_eq!(mem_string(-(2 << 20)), "-2.00 MB");
    }

    #[test]
    fn the_report_is_the_largest_of_each_step() {
        let usages = [
            MemoryUsage {
                init: 530 << 20,
                buffers: 256 << 20,
                collective: 2 << 20,
            },
            MemoryUsage {
                init: 520 << 20,
                buffers: 384 << 20,
                collective: -(1 << 20),
            },
        ];
        let largest = MemoryUsage::max(&usages);
        assert_eq!(
            largest,
            MemoryUsage {
                init: 530 << 20,
                buffers: 384 << 20,
                collective: 2 << 20
            }
        );
        assert_eq!(
            largest.line(),
            "# GPU memory usage     : Initialization 530 MB | User-Allocated 384 MB | Collective 2.00 MB | Total  916 MB"
        );
        assert_eq!(MemoryUsage::max(&[]), MemoryUsage::default());
    }
}
