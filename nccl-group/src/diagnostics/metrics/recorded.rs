//! The recording half of [`GroupMetrics`](super::GroupMetrics), through
//! the `metrics` facade: each call looks its metric up in the installed
//! recorder (a no-op recorder when none is).

use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use ::metrics::{
    Key, Label, Level, Metadata, SharedString, Unit, counter, describe_counter, describe_histogram,
    histogram, with_recorder,
};

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

/// Where the per-operation metrics are recorded from, as the macros would
/// say it.
static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

/// The keys of one operation's metrics in one group, built once: a key
/// built per call (as the macros build one from labels) costs a label
/// vector, a heap allocation and a hash each time.
#[derive(Debug)]
struct OpKeys {
    op: &'static str,
    operations: Key,
    bytes: Key,
    seconds: Key,
}

/// A group's name as a label value, shared, with the keys of the
/// operations recorded so far (a handful of names).
#[derive(Clone, Debug)]
pub(super) struct GroupLabel {
    name: SharedString,
    keys: Arc<RwLock<Vec<OpKeys>>>,
}

impl Default for GroupLabel {
    fn default() -> Self {
        Self::new("")
    }
}

impl GroupLabel {
    pub(super) fn new(group: &str) -> Self {
        Self {
            name: SharedString::from_shared(Arc::<str>::from(group)),
            keys: Arc::default(),
        }
    }

    /// `record` with the keys of `op`, built the first time.
    fn with_keys(&self, op: &'static str, record: impl FnOnce(&OpKeys)) {
        let known = self.keys.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(keys) = known.iter().find(|keys| keys.op == op) {
            return record(keys);
        }
        drop(known);
        let mut known = self.keys.write().unwrap_or_else(PoisonError::into_inner);
        // Another thread may have built them meanwhile.
        let index = known.iter().position(|keys| keys.op == op);
        let index = index.unwrap_or_else(|| {
            let key = |name: &'static str| {
                Key::from_parts(
                    name,
                    vec![Label::new("group", self.name.clone()), Label::new("op", op)],
                )
            };
            known.push(OpKeys {
                op,
                operations: key(OPERATIONS),
                bytes: key(OPERATION_BYTES),
                seconds: key(OPERATION_SECONDS),
            });
            known.len() - 1
        });
        record(&known[index]);
    }

    pub(super) fn issued(&self, op: &'static str, bytes: u64) {
        self.with_keys(op, |keys| {
            with_recorder(|recorder| {
                recorder
                    .register_counter(&keys.operations, &METADATA)
                    .increment(1);
                if bytes > 0 {
                    recorder
                        .register_counter(&keys.bytes, &METADATA)
                        .increment(bytes);
                }
            })
        });
    }

    pub(super) fn completed(&self, op: &'static str, latency: Duration) {
        self.with_keys(op, |keys| {
            with_recorder(|recorder| {
                recorder
                    .register_histogram(&keys.seconds, &METADATA)
                    .record(latency)
            })
        })
    }

    pub(super) fn failed(&self, op: &'static str) {
        counter!(OPERATION_FAILURES, "group" => self.name.clone(), "op" => op).increment(1);
    }

    pub(super) fn healed(&self, path: &HealPath, took: Duration) {
        let path = match path {
            HealPath::Shrunk { .. } => "shrunk",
            HealPath::Recreated { .. } => "recreated",
        };
        counter!(HEALS, "group" => self.name.clone(), "path" => path).increment(1);
        histogram!(HEAL_SECONDS, "group" => self.name.clone()).record(took);
    }
}
