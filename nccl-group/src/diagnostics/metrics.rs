//! Per-group counters and latency histograms through the
//! [`metrics`](https://docs.rs/metrics) facade (feature `metrics`): the
//! group records, the application's recorder (a Prometheus exporter, a
//! StatsD client, a test's debugging recorder) decides where they go;
//! with no recorder installed they go nowhere.
//!
//! Every metric is labelled `group` (the group's name) and, for
//! operations, `op` (nccl-core's operation name: `all_reduce`,
//! `send`, `graph_replay`, ...): a bounded set, never a rank, a peer or a
//! size. With the feature, call `describe()` once after installing a
//! recorder to give them units and help texts.
//!
//! | Name | Kind | Labels | What |
//! |---|---|---|---|
//! | [`OPERATIONS`] | counter | group, op | operations issued to NCCL (each flight-recorder record; graph replays included) |
//! | [`OPERATION_BYTES`] | counter | group, op | their bytes: the larger of input and output (nccl-tests' size) |
//! | [`OPERATION_FAILURES`] | counter | group, op | issued operations that failed (in flight after an error, or pending when the group failed or was aborted) |
//! | [`OPERATION_SECONDS`] | histogram | group, op | from the issue to the moment the group saw the operation end |
//! | [`HEALS`] | counter | group, path | heals that formed a new generation (`path`: `shrunk` or `recreated`) |
//! | [`HEAL_SECONDS`] | histogram | group | how long each such heal took |
//!
//! An operation's latency is measured on the host: from the issue to the
//! moment the watchdog (or a wait that reaped it) saw its end event, so
//! it is accurate to the watchdog's polling interval, like the flight
//! recorder's `finished_us`.
//!
//! Without the feature these names are all there is: the group's hooks
//! are empty and compile to nothing.

#[cfg(feature = "metrics")]
mod recorded;

use std::time::Duration;

use crate::diagnostics::recorder::OpDescription;
use crate::lineage::HealPath;

/// An operation's size in bytes, as nccl-tests counts it: the larger of
/// its input and its output (an all_gather's output, a reduce_scatter's
/// input); 0 for one without typed buffers (a graph's replay).
#[cfg(feature = "metrics")]
fn bytes(op: &OpDescription) -> u64 {
    let elements = op.count.max(op.output_count) as u64;
    op.dtype.map_or(0, |dtype| {
        elements.saturating_mul(dtype.size_bytes() as u64)
    })
}

/// Operations issued to NCCL, one per flight-recorder record, graph
/// replays included (counter; labels `group`, `op`).
pub const OPERATIONS: &str = "nccl_group_operations_total";
/// The bytes of those operations: the larger of input and output, as
/// nccl-tests counts an operation's size (counter; labels `group`, `op`).
pub const OPERATION_BYTES: &str = "nccl_group_operation_bytes_total";
/// Issued operations that failed: in flight when an error left them to
/// NCCL, or pending when the group failed or was aborted (counter; labels
/// `group`, `op`).
pub const OPERATION_FAILURES: &str = "nccl_group_operation_failures_total";
/// Seconds from an operation's issue to the moment the group saw it end
/// (histogram; labels `group`, `op`).
pub const OPERATION_SECONDS: &str = "nccl_group_operation_seconds";
/// Heals that formed a new generation (counter; labels `group`, `path`).
pub const HEALS: &str = "nccl_group_heals_total";
/// Seconds each of those heals took (histogram; label `group`).
pub const HEAL_SECONDS: &str = "nccl_group_heal_seconds";

#[cfg(feature = "metrics")]
pub use recorded::describe;

/// The metrics of one group: its name as a label, with the feature; with
/// none, nothing.
#[derive(Clone, Debug, Default)]
pub(crate) struct GroupMetrics {
    #[cfg(feature = "metrics")]
    group: recorded::GroupLabel,
}

#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
impl GroupMetrics {
    /// The metrics of the group named `group`.
    pub(crate) fn new(group: &str) -> Self {
        Self {
            #[cfg(feature = "metrics")]
            group: recorded::GroupLabel::new(group),
        }
    }

    /// An operation `op` was issued to NCCL (recorded).
    #[inline]
    pub(crate) fn issued(&self, op: &OpDescription) {
        #[cfg(feature = "metrics")]
        self.group.issued(op.op, bytes(op));
    }

    /// An operation `op` was seen to end `latency` after its issue (reported
    /// by the flight recorder once it is unlocked, with the feature only).
    #[cfg(feature = "metrics")]
    pub(crate) fn completed(&self, op: &'static str, latency: Duration) {
        self.group.completed(op, latency);
    }

    /// An issued operation `op` failed (reported as
    /// [`GroupMetrics::completed`] is).
    #[cfg(feature = "metrics")]
    pub(crate) fn failed(&self, op: &'static str) {
        self.group.failed(op);
    }

    /// A heal formed a new generation along `path`, taking `took`.
    #[inline]
    pub(crate) fn healed(&self, path: &HealPath, took: Duration) {
        #[cfg(feature = "metrics")]
        self.group.healed(path, took);
    }
}

#[cfg(all(test, feature = "metrics"))]
mod tests;
