//! What the group tells about itself: the flight recorder, its dumps and
//! their analysis, the mismatch check and the collective check, NCCL's
//! RAS view, the trace events, the metrics and the NVTX ranges.

pub mod analysis;
#[cfg(feature = "cuda")]
pub(crate) mod checks;
#[cfg(feature = "cuda")]
pub(crate) mod clock;
pub mod dumps;
#[cfg(feature = "cuda")]
pub(crate) mod fingerprints;
#[cfg(feature = "cuda")]
pub mod metrics;
#[cfg(feature = "cuda")]
pub(crate) mod nvtx;
pub mod ras;
pub mod recorder;
#[cfg(feature = "cuda")]
pub(crate) mod trace;
