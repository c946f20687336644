//! What the group's optional instrumentation costs per call, as a ratio
//! against raw nccl-sys in one run: the `tracing` and `nvtx` features
//! (`host_cost_tracing`, `host_cost_nvtx`) and the `gpu_timing` option
//! (`host_cost_gpu_timing`).
//!
//! A feature is fixed when the binary is built, so each build measures its
//! own side: built as usual a feature is off and its macros expand to
//! nothing; built with `--features tracing` (or `nvtx`) every call goes
//! through the compiled-in events and spans with no subscriber installed
//! (or the NVTX ranges with no profiler attached): what a program that
//! never sets one pays. Each build times raw, core, tensor and group
//! in-place 8-byte all_reduces interleaved, round after round, each layer
//! on buffers of its own, and prints the median time per call and its
//! ratio to raw, labelled with the feature's state. Comparing the two
//! builds' ratios (each against raw of its own run) gives the feature's
//! cost without comparing runs' absolute times. GPU timing is an option,
//! so one run compares the group on the caller's stream with it off and
//! on, next to raw.

use std::sync::Arc;
use std::time::Duration;

use criterion::Criterion;
use cudarc::driver::CudaStream;
use nccl_core::DataType;
use nccl_group::{GroupOptions, InProcessStore, Lifecycle, ProcessGroup, StreamMode};
use nccl_perf::{BenchError, Collective, DeviceBuffers, GroupLayer, Layer, Mode, median};

use super::{CHUNK, call_on, host_time};

/// Rounds of the interleaved comparison; each times [`CHUNK`] calls per layer.
const ROUNDS: usize = 200;

/// The benchmark group of the comparisons.
const CALL: &str = "all_reduce_in_place_8B";

/// Whether this build has the `tracing` feature: its label in the output.
const TRACING: &str = if cfg!(feature = "tracing") {
    "tracing-on-no-subscriber"
} else {
    "tracing-off"
};

/// Whether this build has the `nvtx` feature: its label in the output.
const NVTX: &str = if cfg!(feature = "nvtx") {
    "nvtx-on-no-profiler"
} else {
    "nvtx-off"
};

/// `host_cost_tracing` and `host_cost_nvtx`: `layers` (raw first) under
/// this build's features.
pub fn feature_cost(
    criterion: &mut Criterion,
    layers: &[&dyn Layer],
    stream: &Arc<CudaStream>,
) -> Result<(), BenchError> {
    let labelled: Vec<(&str, &dyn Layer)> = layers
        .iter()
        .map(|&layer| (layer.kind().name(), layer))
        .collect();
    interleaved_cost(
        criterion,
        &format!("host_cost_tracing/{CALL}/{TRACING}"),
        &labelled,
        stream,
    )?;
    interleaved_cost(
        criterion,
        &format!("host_cost_nvtx/{CALL}/{NVTX}"),
        &labelled,
        stream,
    )
}

/// `host_cost_gpu_timing`: `raw`, and the group on the caller's stream
/// with [`GroupOptions::gpu_timing`] off (`group-caller`) and on
/// (`group-caller-timed`), world size 1.
pub fn gpu_timing_cost(
    criterion: &mut Criterion,
    raw: &dyn Layer,
    stream: &Arc<CudaStream>,
) -> Result<(), BenchError> {
    let group = |timed: bool| {
        ProcessGroup::builder(&format!("host_cost-gpu-timing-{timed}"))
            .rank(0)
            .world_size(1)
            .store(Arc::new(InProcessStore::new()))
            .options(
                GroupOptions::default()
                    .with_stream_mode(StreamMode::Caller)
                    .with_gpu_timing(timed),
            )
            .build()
    };
    let (untimed, timed) = (group(false)?, group(true)?);
    let (untimed_layer, timed_layer) = (
        GroupLayer::new(&untimed, stream),
        GroupLayer::new(&timed, stream),
    );
    interleaved_cost(
        criterion,
        &format!("host_cost_gpu_timing/{CALL}"),
        &[
            (raw.kind().name(), raw),
            ("group-caller", &untimed_layer),
            ("group-caller-timed", &timed_layer),
        ],
        stream,
    )?;
    untimed.destroy()?;
    Ok(timed.destroy()?)
}

/// The interleaved medians and ratios of the labelled `layers` (raw
/// first) that have an in-place all_reduce, printed as `<section>:
/// <label> <us> us/call, <ratio> x raw`, and a criterion group `section`
/// of the same calls.
fn interleaved_cost(
    criterion: &mut Criterion,
    section: &str,
    layers: &[(&str, &dyn Layer)],
    stream: &Arc<CudaStream>,
) -> Result<(), BenchError> {
    let layers: Vec<(&str, &dyn Layer)> = layers
        .iter()
        .copied()
        .filter(|(_, layer)| layer.supports(Collective::AllReduce, Mode::InPlace))
        .collect();
    let mut buffers = layers
        .iter()
        .map(|_| DeviceBuffers::alloc(DataType::Float32, 2, stream))
        .collect::<Result<Vec<_>, _>>()?;
    let calls: Vec<_> = buffers
        .iter()
        .map(|buffers| call_on(Collective::AllReduce, Mode::InPlace, 2, buffers, stream))
        .collect();
    let mut launches = layers
        .iter()
        .zip(&calls)
        .zip(&mut buffers)
        .map(|(((_, layer), call), buffers)| layer.bind(call, buffers))
        .collect::<Result<Vec<_>, _>>()?;
    let mut failure: Option<BenchError> = None;

    let mut per_call_ns: Vec<Vec<f64>> = vec![Vec::with_capacity(ROUNDS); launches.len()];
    for _ in 0..ROUNDS {
        for (launch, samples) in launches.iter_mut().zip(&mut per_call_ns) {
            let took = host_time(launch, CHUNK, stream, &mut failure);
            samples.push(took.as_nanos() as f64 / CHUNK as f64);
        }
    }
    if let Some(error) = failure.take() {
        return Err(error);
    }
    let medians: Vec<f64> = per_call_ns
        .iter()
        .map(|samples| median(samples).unwrap_or(f64::NAN))
        .collect();
    let raw = medians[0];
    for ((label, _), ns) in layers.iter().zip(&medians) {
        println!(
            "{section}: {label:<18} {:>8.3} us/call, {:.3} x raw",
            ns / 1000.0,
            ns / raw
        );
    }

    let mut group = criterion.benchmark_group(section);
    group.measurement_time(Duration::from_secs(1));
    for ((label, _), launch) in layers.iter().zip(&mut launches) {
        group.bench_function(*label, |bencher| {
            bencher.iter_custom(|iters| host_time(launch, iters, stream, &mut failure))
        });
    }
    group.finish();
    drop(launches);
    match failure {
        Some(error) => Err(error),
        None => Ok(stream
            .synchronize()
            .map_err(nccl_core::Error::cuda("synchronizing the stream"))?),
    }
}
