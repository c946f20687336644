//! The recording half of [`GroupMetrics`](super::GroupMetrics), through
//! the `metrics` facade: each call looks its metric up in the installed
//! recorder (a no-op recorder when none is).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use ::metrics::{SharedString, Unit, counter, describe_counter, describe_histogram, histogram};

use super::{
    HEAL_SECONDS, HEALS, OPERATION_BYTES, OPERATION_FAILURES, OPERATION_SECONDS, OPERATIONS,
};
use crate::lineage::HealPath;

/// Gives every metric of the group its unit and help text in the
/// installed recorder (exporters show them, as `# HELP` lines in
/// Prometheus's format).
///
/// Call it once, after installing the recorder; the metrics are recorded
/// without it too.
pub fn describe() {
    describe_counter!(
        OPERATIONS,
        Unit::Count,
        "operations issued to NCCL, graph replays included"
    );
    describe_counter!(
        OPERATION_BYTES,
        Unit::Bytes,
        "bytes of the issued operations: the larger of input and output"
    );
    describe_counter!(
        OPERATION_FAILURES,
        Unit::Count,
        "issued operations that failed: in flight after an error, or pending when the group failed or was aborted"
    );
    describe_histogram!(
        OPERATION_SECONDS,
        Unit::Seconds,
        "from an operation's issue to the moment the group saw it end (to the watchdog's polling interval)"
    );
    describe_counter!(HEALS, Unit::Count, "heals that formed a new generation");
    describe_histogram!(
        HEAL_SECONDS,
        Unit::Seconds,
        "how long each heal that formed a new generation took"
    );
}

/// A group's name as a label value, shared: each record clones a
/// reference count, not the name.
#[derive(Clone, Debug)]
pub(super) struct GroupLabel(SharedString);

impl Default for GroupLabel {
    fn default() -> Self {
        Self::new("")
    }
}

impl GroupLabel {
    pub(super) fn new(group: &str) -> Self {
        Self(SharedString::from_shared(Arc::<str>::from(group)))
    }

    pub(super) fn issued(&self, op: &'static str, bytes: u64) {
        counter!(OPERATIONS, "group" => self.0.clone(), "op" => op).increment(1);
        if bytes > 0 {
            counter!(OPERATION_BYTES, "group" => self.0.clone(), "op" => op).increment(bytes);
        }
    }

    pub(super) fn completed(&self, op: Cow<'static, str>, latency: Duration) {
        histogram!(OPERATION_SECONDS, "group" => self.0.clone(), "op" => op).record(latency);
    }

    pub(super) fn failed(&self, op: Cow<'static, str>) {
        counter!(OPERATION_FAILURES, "group" => self.0.clone(), "op" => op).increment(1);
    }

    pub(super) fn healed(&self, path: &HealPath, took: Duration) {
        let path = match path {
            HealPath::Shrunk { .. } => "shrunk",
            HealPath::Recreated { .. } => "recreated",
        };
        counter!(HEALS, "group" => self.0.clone(), "path" => path).increment(1);
        histogram!(HEAL_SECONDS, "group" => self.0.clone()).record(took);
    }
}
