//! `host_cost_tracing`: what the `tracing` feature of nccl-core and
//! nccl-group costs per call, as a ratio against raw nccl-sys in one run.
//!
//! A feature is fixed when the binary is built, so each build measures its
//! own side: built as usual the feature is off and its macros expand to
//! nothing; built with `--features tracing` every call goes through the
//! compiled-in events and spans, with no subscriber installed (what a
//! program that never sets one pays). Each build times raw, core, tensor
//! and group-caller in-place 8-byte all_reduces interleaved, round after
//! round, each layer on buffers of its own, and prints the median time
//! per call and its ratio to raw, labelled with the feature's state.
//! Comparing the two builds' ratios (each against raw of its own run)
//! gives the feature's cost without comparing runs' absolute times.

use std::time::Duration;

use criterion::Criterion;
use cudarc::driver::CudaStream;
use nccl_core::DataType;
use nccl_perf::{BenchError, Collective, DeviceBuffers, Layer, Mode, median};
use std::sync::Arc;

use super::{CHUNK, call_on, host_time};

/// Rounds of the interleaved comparison; each times [`CHUNK`] calls per layer.
const ROUNDS: usize = 200;

/// Whether this build has the feature: its label in the output.
const STATE: &str = if cfg!(feature = "tracing") {
    "tracing-on-no-subscriber"
} else {
    "tracing-off"
};

/// The interleaved medians and ratios of `layers` (raw first), printed,
/// and a criterion group of the same calls named after the feature's state.
pub fn tracing_cost(
    criterion: &mut Criterion,
    layers: &[&dyn Layer],
    stream: &Arc<CudaStream>,
) -> Result<(), BenchError> {
    let layers: Vec<&dyn Layer> = layers
        .iter()
        .copied()
        .filter(|layer| layer.supports(Collective::AllReduce, Mode::InPlace))
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
        .map(|((layer, call), buffers)| layer.bind(call, buffers))
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
    for (layer, ns) in layers.iter().zip(&medians) {
        println!(
            "host_cost_tracing/all_reduce_in_place_8B/{STATE}: {:<12} {:>8.3} us/call, {:.3} x raw",
            layer.kind().name(),
            ns / 1000.0,
            ns / raw
        );
    }

    let mut group =
        criterion.benchmark_group(format!("host_cost_tracing/all_reduce_in_place_8B/{STATE}"));
    group.measurement_time(Duration::from_secs(1));
    for (layer, launch) in layers.iter().zip(&mut launches) {
        group.bench_function(layer.kind().name(), |bencher| {
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
