//! Errors of `nccl-perf` (and the other bench binaries) and the exit
//! status each one gives.

/// Every way a benchmark run can fail.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Something the run needs is missing on this machine: the CUDA
    /// driver, a GPU, or the NCCL library. Exit status 2.
    #[error("{0}")]
    Environment(String),
    /// Flags that cannot run together (e.g. a root past the last rank). Exit status 2.
    #[error("{0}")]
    Usage(String),
    /// A call through nccl-core (or a raw NCCL result mapped to its error) failed.
    #[error(transparent)]
    Nccl(#[from] nccl_core::Error),
    /// A call through nccl-tensor failed (an argument check or NCCL's error).
    #[error(transparent)]
    Tensor(#[from] nccl_tensor::Error),
    /// A call of the group layer's `ProcessGroup` failed (its rendezvous,
    /// an argument check, NCCL, or an event sync), or destroying it did.
    #[error("group layer: {0}")]
    Group(#[from] nccl_group::GroupError),
    /// The store the ranks of a launch meet at failed, or the launch's
    /// variables (`RANK`, `WORLD_SIZE`, `MASTER_ADDR`, ...) are malformed
    /// (exit status 2 then: the message names the variable).
    #[error("rendezvous store: {0}")]
    Store(#[from] nccl_group::StoreError),
    /// Capturing a layer's calls in a CUDA graph (`-G`) failed.
    #[error(
        "capturing {iters} {collective} call(s) of the {layer} layer in a CUDA graph (-G) failed: {source}"
    )]
    Capture {
        /// The layer whose calls were captured.
        layer: &'static str,
        /// The collective.
        collective: &'static str,
        /// Calls in the graph.
        iters: u32,
        /// What went wrong.
        source: Box<BenchError>,
    },
    /// Drawing the `--plot` file failed.
    #[error("cannot draw the plot {path}: {message}")]
    Plot {
        /// The SVG file.
        path: String,
        /// The plotting library's error.
        message: String,
    },
    /// The loaded libnccl lacks a function the raw layer calls.
    #[error(transparent)]
    MissingFunction(#[from] nccl_sys::MissingSymbol),
    /// A CUDA driver call of the benchmark itself failed.
    #[error("CUDA error while {during}: {source}")]
    Cuda {
        /// What was being done.
        during: &'static str,
        /// The driver's error.
        source: cudarc::driver::DriverError,
    },
    /// Writing the JSON file or the table failed.
    #[error("cannot write {what}: {source}")]
    Io {
        /// The file or stream.
        what: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A rank failed; the message says which.
    #[error("rank {rank} (GPU {rank}): {source}")]
    Rank {
        /// The failing rank.
        rank: usize,
        /// What went wrong there.
        source: Box<BenchError>,
    },
    /// Every rank thread ended without reporting the rest of the run.
    #[error("the rank threads ended without reporting (a rank thread panicked?)")]
    Lost,
    /// A layer's steady-state calls allocated on the Rust heap beyond its
    /// allowance (the message names the layers and the counts).
    #[error("steady-state heap allocations: {0}")]
    Allocations(String),
    /// Another rank failed and this one was told to stop.
    #[error("stopped because another rank failed")]
    Stopped,
}

impl BenchError {
    /// The process exit status for this error: 2 for a missing driver, GPU
    /// or library and for unusable flags, 1 for a failed run.
    pub fn exit_code(&self) -> u8 {
        match self {
            BenchError::Environment(_)
            | BenchError::Usage(_)
            | BenchError::Store(nccl_group::StoreError::Config { .. }) => 2,
            BenchError::Rank { source, .. } | BenchError::Capture { source, .. } => {
                source.exit_code()
            }
            _ => 1,
        }
    }

    /// A closure that wraps a CUDA error with what was being done.
    pub fn cuda(during: &'static str) -> impl FnOnce(cudarc::driver::DriverError) -> Self {
        move |source| BenchError::Cuda { during, source }
    }

    /// The message on a single line (newlines in library messages become "; ").
    pub fn one_line(&self) -> String {
        self.to_string()
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty())
            .collect::<Vec<_>>()
            .join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_and_single_lines() {
        assert_eq!(BenchError::Environment("no GPU".into()).exit_code(), 2);
        assert_eq!(BenchError::Usage("bad root".into()).exit_code(), 2);
        assert_eq!(BenchError::Stopped.exit_code(), 1);
        let config = nccl_group::RendezvousConfig::from_vars(|name| {
            (name == "WORLD_SIZE").then(|| "two".to_string())
        })
        .unwrap_err();
        assert_eq!(BenchError::from(config).exit_code(), 2);
        let nested = BenchError::Rank {
            rank: 3,
            source: Box::new(BenchError::Nccl(nccl_core::Error::Aborted)),
        };
        assert_eq!(nested.exit_code(), 1);
        assert!(nested.to_string().starts_with("rank 3 (GPU 3): "));
        let capture = BenchError::Capture {
            layer: "tensor",
            collective: "all_reduce",
            iters: 20,
            source: Box::new(BenchError::Nccl(nccl_core::Error::Aborted)),
        };
        assert_eq!(capture.exit_code(), 1);
        assert!(
            capture.to_string().starts_with(
                "capturing 20 all_reduce call(s) of the tensor layer in a CUDA graph (-G) failed: "
            ),
            "{capture}"
        );
        assert_eq!(
            BenchError::Environment("a\nb\n\n c".into()).one_line(),
            "a; b; c"
        );
    }
}
