//! What the threads of a run tell each other: a rank thread's messages to
//! its process's main thread ([`Message`]), the measurement each carries
//! ([`Sample`]) and the row it belongs to ([`RowKey`]), which processes
//! also share through the store. The rank threads (`rank`), the main thread
//! (`gather`), the plan (`plan`), `-a` (`reduce`) and process 0's tables
//! (`rows`) all speak it; it names none of them.

use serde::{Deserialize, Serialize};

use crate::collective::Mode;
use crate::error::BenchError;
use crate::memory::MemoryUsage;
use crate::report::DeviceInfo;

/// Stops a rank that may be blocked inside NCCL: aborts its communicator
/// and process groups.
pub type Stop = Box<dyn Fn() + Send>;

/// What a rank thread tells its process's main thread.
pub enum Message {
    /// The rank has its communicator (and process groups, for the group
    /// layers).
    Ready {
        /// Its GPU (which names the rank).
        device: DeviceInfo,
        /// Stops it, should another rank fail.
        stop: Stop,
    },
    /// One mode of one row of every layer, measured by one rank.
    Measured {
        /// The rank.
        rank: usize,
        /// Which mode of which row of which layer.
        key: RowKey,
        /// What the rank measured.
        sample: Sample,
    },
    /// The GPU memory the rank used (`-M 1`), after its last row.
    Memory {
        /// The rank.
        rank: usize,
        /// What it used.
        usage: MemoryUsage,
    },
    /// The rank is done.
    Finished,
    /// The rank failed: a [`BenchError::Rank`], already published to
    /// every process (or the failure that stands before it).
    Failed(BenchError),
}

/// Identifies one mode of one row of one layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RowKey {
    /// The collective's index in [`Plan::collectives`](super::Plan::collectives).
    pub collective: usize,
    /// The row's index in [`Plan::rows`](super::Plan::rows) of the collective.
    pub row: usize,
    /// Out-of-place or in-place.
    pub mode: Mode,
    /// The layer's index in [`Plan::layers`](super::Plan::layers).
    pub layer: usize,
}

impl RowKey {
    /// The key's name among the processes' shared values.
    pub fn name(&self) -> String {
        let mode = match self.mode {
            Mode::OutOfPlace => "oop",
            Mode::InPlace => "ip",
        };
        format!(
            "rows/{}-{}-{mode}-{}",
            self.collective, self.row, self.layer
        )
    }
}

/// One rank's result for one mode of one layer (or, combined, every
/// rank's).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// The median time per call in microseconds; `None` where the layer
    /// cannot issue the call.
    pub time_us: Option<f64>,
    /// The wrong elements; `None` when not checked.
    pub wrong: Option<u64>,
    /// `-I 1`: each timed iteration's time per call in microseconds, the
    /// batches' iterations in order; `None` without `-I 1` or where the
    /// layer cannot issue the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iter_us: Option<Vec<f64>>,
}
