//! The metrics as a recorder receives them, through the flight recorder's
//! hooks (where the group issues, ends and fails operations) and the heal's.

use crate::diagnostics::clock;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use ::metrics::with_local_recorder;
use metrics_util::MetricKind;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use nccl_core::DataType;

use super::*;
use crate::devices::DeviceList;
use crate::diagnostics::recorder::{FlightRecorder, OpState};

/// What a snapshot holds, keyed by kind, name and sorted labels.
type Seen = HashMap<(MetricKind, String, Vec<(String, String)>), DebugValue>;

fn seen(snapshotter: &Snapshotter) -> Seen {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let mut labels: Vec<(String, String)> = key
                .key()
                .labels()
                .map(|label| (label.key().to_string(), label.value().to_string()))
                .collect();
            labels.sort();
            ((key.kind(), key.key().name().to_string(), labels), value)
        })
        .collect()
}

fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut labels: Vec<(String, String)> = pairs
        .iter()
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect();
    labels.sort();
    labels
}

fn counter(seen: &Seen, name: &str, pairs: &[(&str, &str)]) -> Option<u64> {
    match seen.get(&(MetricKind::Counter, name.to_string(), labels(pairs))) {
        Some(DebugValue::Counter(value)) => Some(*value),
        Some(other) => panic!("{name} {pairs:?} is not a counter: {other:?}"),
        None => None,
    }
}

fn histogram(seen: &Seen, name: &str, pairs: &[(&str, &str)]) -> Vec<f64> {
    match seen.get(&(MetricKind::Histogram, name.to_string(), labels(pairs))) {
        Some(DebugValue::Histogram(values)) => values.iter().map(|v| v.into_inner()).collect(),
        Some(other) => panic!("{name} {pairs:?} is not a histogram: {other:?}"),
        None => Vec::new(),
    }
}

fn description(
    op: &'static str,
    dtype: Option<DataType>,
    count: usize,
    output: usize,
) -> OpDescription {
    OpDescription {
        op,
        dtype,
        count,
        output_count: output,
        reduction: None,
        peer: None,
        timeout: Duration::from_secs(5),
        devices: DeviceList::one(0).expect("device 0"),
        collective: true,
    }
}

#[test]
fn the_recorder_hooks_count_issues_bytes_latencies_and_failures_per_group_and_op() {
    let debugging = DebuggingRecorder::new();
    let snapshotter = debugging.snapshotter();
    with_local_recorder(&debugging, || {
        let recorder = FlightRecorder::new(16).with_metrics(GroupMetrics::new("trainer"));
        let other = FlightRecorder::new(16).with_metrics(GroupMetrics::new("tp"));
        // After the recorders' epochs, so every instant counts in full.
        let t0 = Instant::now();
        let f32s = Some(DataType::Float32);
        let a = recorder
            .record(
                &description("all_reduce", f32s, 1024, 1024),
                clock::nanos(t0),
            )
            .seq;
        let b = recorder
            .record(&description("all_reduce", f32s, 256, 256), clock::nanos(t0))
            .seq;
        // An all_gather's size is its output; a replay has no typed buffers.
        let g = recorder
            .record(
                &description("all_gather", Some(DataType::Bfloat16), 8, 32),
                clock::nanos(t0),
            )
            .seq;
        let r = recorder
            .record(&description("graph_replay", None, 0, 0), clock::nanos(t0))
            .seq;
        other.record(&description("all_reduce", f32s, 1, 1), clock::nanos(t0));

        recorder.finish(
            a,
            OpState::Completed,
            t0 + Duration::from_millis(3),
            1,
            None,
        );
        recorder.finish(
            b,
            OpState::Completed,
            t0 + Duration::from_millis(5),
            1,
            None,
        );
        recorder.finish(g, OpState::Failed, t0 + Duration::from_millis(1), 0, None);
        // The group fails with the replay still pending: one more failure;
        // the ones already finished are not counted again.
        recorder.fail_pending(t0 + Duration::from_millis(9));
        assert_eq!(recorder.get(r).map(|op| op.state), Some(OpState::Failed));
    });

    let seen = seen(&snapshotter);
    let trainer = |op| [("group", "trainer"), ("op", op)];
    assert_eq!(counter(&seen, OPERATIONS, &trainer("all_reduce")), Some(2));
    assert_eq!(
        counter(&seen, OPERATION_BYTES, &trainer("all_reduce")),
        Some(4 * 1280)
    );
    assert_eq!(counter(&seen, OPERATIONS, &trainer("all_gather")), Some(1));
    assert_eq!(
        counter(&seen, OPERATION_BYTES, &trainer("all_gather")),
        Some(2 * 32)
    );
    assert_eq!(
        counter(&seen, OPERATIONS, &trainer("graph_replay")),
        Some(1)
    );
    assert_eq!(
        counter(&seen, OPERATION_BYTES, &trainer("graph_replay")),
        None
    );
    assert_eq!(
        counter(&seen, OPERATION_FAILURES, &trainer("all_gather")),
        Some(1)
    );
    assert_eq!(
        counter(&seen, OPERATION_FAILURES, &trainer("graph_replay")),
        Some(1)
    );
    assert_eq!(
        counter(&seen, OPERATION_FAILURES, &trainer("all_reduce")),
        None
    );
    let mut latencies = histogram(&seen, OPERATION_SECONDS, &trainer("all_reduce"));
    latencies.sort_by(f64::total_cmp);
    assert_eq!(latencies, vec![0.003, 0.005]);
    assert!(histogram(&seen, OPERATION_SECONDS, &trainer("all_gather")).is_empty());
    // Another group's operations carry their own label.
    assert_eq!(
        counter(&seen, OPERATIONS, &[("group", "tp"), ("op", "all_reduce")]),
        Some(1)
    );
    assert_eq!(
        counter(
            &seen,
            OPERATION_BYTES,
            &[("group", "tp"), ("op", "all_reduce")]
        ),
        Some(4)
    );
    // Labels are the group and the operation only: nothing per rank, peer or size.
    for (_, _, labels) in seen.keys() {
        for (key, _) in labels {
            assert!(["group", "op"].contains(&key.as_str()), "label {key}");
        }
    }
}

#[test]
fn heals_count_by_path_with_their_duration() {
    let debugging = DebuggingRecorder::new();
    let snapshotter = debugging.snapshotter();
    with_local_recorder(&debugging, || {
        let metrics = GroupMetrics::new("elastic");
        let shrunk = HealPath::Shrunk {
            shrunk: 1,
            dropped: 0,
        };
        metrics.healed(&shrunk, Duration::from_millis(1500));
        metrics.healed(
            &HealPath::Recreated {
                reason: "no rank was lost".to_string(),
            },
            Duration::from_millis(250),
        );
        metrics.healed(&shrunk, Duration::from_millis(500));
    });
    let seen = seen(&snapshotter);
    let path = |path| [("group", "elastic"), ("path", path)];
    assert_eq!(counter(&seen, HEALS, &path("shrunk")), Some(2));
    assert_eq!(counter(&seen, HEALS, &path("recreated")), Some(1));
    let mut took = histogram(&seen, HEAL_SECONDS, &[("group", "elastic")]);
    took.sort_by(f64::total_cmp);
    assert_eq!(took, vec![0.25, 0.5, 1.5]);
}

#[test]
fn describe_gives_every_metric_its_unit_and_help() {
    let debugging = DebuggingRecorder::new();
    let snapshotter = debugging.snapshotter();
    with_local_recorder(&debugging, || {
        describe();
        GroupMetrics::new("described").healed(
            &HealPath::Recreated {
                reason: String::new(),
            },
            Duration::ZERO,
        );
    });
    let described: Vec<_> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, unit, help, _)| (key.key().name().to_string(), unit, help.is_some()))
        .collect();
    assert!(
        described.contains(&(HEALS.to_string(), Some(::metrics::Unit::Count), true)),
        "{described:?}"
    );
    assert!(
        described.contains(&(
            HEAL_SECONDS.to_string(),
            Some(::metrics::Unit::Seconds),
            true
        )),
        "{described:?}"
    );
}
