//! Timing one rank's batches: back-to-back launches and one stream
//! synchronisation, or replays of a CUDA graph that captured the launches
//! (`-G`); and the median over batches.

use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaGraph, CudaStream};

use crate::error::BenchError;
use crate::layer::Launch;

/// The median of `values` (the mean of the middle two for an even count);
/// `None` when empty. NaNs sort last.
pub fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let middle = sorted.len() / 2;
    Some(if sorted.len() % 2 == 1 {
        sorted[middle]
    } else {
        (sorted[middle - 1] + sorted[middle]) / 2.0
    })
}

/// Microseconds per call of a batch of `calls` calls that took `seconds`.
pub fn per_call_us(seconds: f64, calls: u64) -> f64 {
    seconds * 1.0e6 / calls.max(1) as f64
}

/// Calls `launch` `calls` times and synchronises `stream` once: the time
/// per call in microseconds.
///
/// # Errors
/// A failed launch or synchronisation.
pub fn time_launches(
    launch: &mut Launch<'_>,
    calls: u32,
    stream: &CudaStream,
) -> Result<f64, BenchError> {
    let start = Instant::now();
    for _ in 0..calls {
        launch()?;
    }
    stream
        .synchronize()
        .map_err(BenchError::cuda("synchronizing after the timed loop"))?;
    Ok(per_call_us(start.elapsed().as_secs_f64(), u64::from(calls)))
}

/// A CUDA graph of `calls` launches; `Empty` when they enqueued nothing
/// (in-place collectives at world size 1), which replays as nothing.
pub enum Captured {
    /// The instantiated graph.
    Graph(CudaGraph),
    /// The capture recorded no work.
    Empty,
}

impl Captured {
    /// Enqueues one replay of the captured calls.
    ///
    /// # Errors
    /// The driver's error.
    pub fn replay(&self) -> Result<(), BenchError> {
        match self {
            Captured::Graph(graph) => graph
                .launch()
                .map_err(BenchError::cuda("launching a CUDA graph")),
            Captured::Empty => Ok(()),
        }
    }
}

/// Captures `calls` launches on `stream` into a CUDA graph (thread-local
/// capture mode, so each rank thread captures on its own) and instantiates
/// it. Nothing runs on the GPU until the graph is replayed.
///
/// cudarc's stream tracking is paused during the capture: it would make the
/// stream wait on events recorded before the capture began, which CUDA
/// refuses inside a capture. Every buffer of a rank lives on that rank's one
/// stream, so the tracking has nothing to order there anyway.
///
/// # Errors
/// A launch that fails while capturing (the capture is ended and dropped
/// first), or the driver's error.
pub fn capture(
    launch: &mut Launch<'_>,
    calls: u32,
    stream: &Arc<CudaStream>,
) -> Result<Captured, BenchError> {
    let context = stream.context();
    let tracking = context.is_event_tracking();
    // SAFETY: the rank's buffers are allocated on, and used only on,
    // `stream`, so no cross-stream synchronisation is lost while tracking
    // is off; it is turned back on below before anything else runs.
    unsafe { context.disable_event_tracking() };
    let captured = capture_calls(launch, calls, stream);
    if tracking {
        // SAFETY: no buffer was created while tracking was off.
        unsafe { context.enable_event_tracking() };
    }
    captured
}

fn capture_calls(
    launch: &mut Launch<'_>,
    calls: u32,
    stream: &Arc<CudaStream>,
) -> Result<Captured, BenchError> {
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .map_err(BenchError::cuda("beginning a CUDA graph capture"))?;
    let mut launched = Ok(());
    for _ in 0..calls {
        launched = launch();
        if launched.is_err() {
            break;
        }
    }
    // Always end the capture, so that the stream is usable again.
    let ended = stream.end_capture(CUgraphInstantiate_flags(0));
    launched?;
    match ended.map_err(BenchError::cuda("ending the CUDA graph capture"))? {
        Some(graph) => Ok(Captured::Graph(graph)),
        None => Ok(Captured::Empty),
    }
}

/// Replays `graph` `replays` times and synchronises once: the time per
/// captured call (`calls` calls in the graph) in microseconds.
///
/// # Errors
/// A failed replay or synchronisation.
pub fn time_replays(
    graph: &Captured,
    replays: u32,
    calls: u32,
    stream: &CudaStream,
) -> Result<f64, BenchError> {
    let start = Instant::now();
    for _ in 0..replays {
        graph.replay()?;
    }
    stream
        .synchronize()
        .map_err(BenchError::cuda("synchronizing after the graph replays"))?;
    Ok(per_call_us(
        start.elapsed().as_secs_f64(),
        u64::from(replays) * u64::from(calls),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0]), Some(3.0));
        assert_eq!(median(&[5.0, 1.0, 3.0]), Some(3.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[1.0, 100.0, 2.0, 2.5, 1.5]), Some(2.0));
    }

    #[test]
    fn per_call_times() {
        assert_eq!(per_call_us(1.0, 1_000_000), 1.0);
        assert_eq!(per_call_us(0.002, 100 * 20), 1.0);
        assert_eq!(per_call_us(0.5, 0), 500_000.0);
    }
}
