//! CUDA graph capture, as the layers above need to see it: whether a
//! stream is being captured ([`capture_status`]), and a thread that polls
//! events while other threads capture ([`exempt_thread_from_global_captures`]).
//!
//! A stream being captured records work into a graph instead of running
//! it, and the driver forbids what would observe the missing work: an
//! event recorded on such a stream cannot be queried, and with
//! `CU_STREAM_CAPTURE_MODE_GLOBAL` (the driver's default) no thread may
//! even query any event while the capture lasts, unless it opted out.

use std::cell::Cell;

use cudarc::driver::CudaStream;
use cudarc::driver::sys::{CUresult, CUstreamCaptureMode, CUstreamCaptureStatus};

use crate::device::cuda_driver_available;
use crate::error::{Error, Result};

/// Whether a stream is being captured into a CUDA graph.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureStatus {
    /// Work enqueued on the stream runs.
    None,
    /// Work enqueued on the stream is recorded into the graph being
    /// captured; nothing runs until the graph is launched.
    Active,
    /// A capture began on the stream and failed (an illegal call during
    /// it); it must be ended, and its graph is lost.
    Invalidated,
}

/// Whether `stream` is being captured (`cuStreamIsCapturing`): one
/// driver call, made without changing the thread's current context.
///
/// cudarc's `CudaStream::capture_status` binds the context first and
/// reports any error recorded earlier in it (by a drop, say) as its own;
/// this asks the driver alone. The legacy default stream (the null handle)
/// can never be captured, so it costs no call.
///
/// # Errors
/// [`Error::Cuda`] if the driver refuses (a destroyed context).
pub fn capture_status(stream: &CudaStream) -> Result<CaptureStatus> {
    let handle = stream.cu_stream();
    if handle.is_null() {
        return Ok(CaptureStatus::None);
    }
    // SAFETY: `handle` is the stream `stream` owns (or borrows for its
    // lifetime), alive while the borrow lasts; the call only reads its
    // capture state into the status it returns.
    let status = unsafe { cudarc::driver::result::stream::is_capturing(handle) }
        .map_err(Error::cuda("asking whether the stream is being captured"))?;
    Ok(match status {
        CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE => CaptureStatus::None,
        CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE => CaptureStatus::Active,
        _ => CaptureStatus::Invalidated,
    })
}

thread_local! {
    /// Whether this thread's capture mode was set by
    /// [`exempt_thread_from_global_captures`].
    static EXEMPT: Cell<bool> = const { Cell::new(false) };
}

/// Sets the calling thread's capture interaction mode to
/// `CU_STREAM_CAPTURE_MODE_THREAD_LOCAL` (`cuThreadExchangeStreamCaptureMode`),
/// once per thread: its event queries then no longer invalidate captures
/// that other threads began in `CU_STREAM_CAPTURE_MODE_GLOBAL` (the mode
/// that forbids "potentially unsafe" calls on every thread).
///
/// For a thread that never captures and only polls events, such as a watchdog,
/// as PyTorch's process group does for its own. Later calls on the thread
/// return at once.
///
/// # Errors
/// [`Error::NoCudaDriver`] without a driver; [`Error::Cuda`] if the
/// driver refuses (before any device was used in the process, it is not
/// initialised yet: call this once there is work to poll).
pub fn exempt_thread_from_global_captures() -> Result<()> {
    if EXEMPT.with(Cell::get) {
        return Ok(());
    }
    if !cuda_driver_available() {
        return Err(Error::NoCudaDriver);
    }
    let mut mode = CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    // SAFETY: the call writes the thread's previous mode into `mode`, a
    // valid local; it changes nothing but this thread's capture mode.
    let result = unsafe { cudarc::driver::sys::cuThreadExchangeStreamCaptureMode(&mut mode) };
    if result != CUresult::CUDA_SUCCESS {
        return Err(Error::Cuda {
            during: "setting the thread's capture mode to thread-local",
            source: cudarc::driver::DriverError(result),
        });
    }
    EXEMPT.with(|exempt| exempt.set(true));
    Ok(())
}
