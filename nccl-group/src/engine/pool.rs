//! Per-device resources created once: the NCCL streams and two pools of
//! events reused across operations, one of events created without timing
//! (every operation's end) and one of timed events (the start and end of
//! operations timed on the GPU, [`GroupOptions::gpu_timing`](crate::GroupOptions::gpu_timing)).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaStream};
use nccl_core::Device;

use crate::error::Result;

/// Streams and events of one device.
pub struct DevicePool {
    device: Device,
    streams: Vec<Arc<CudaStream>>,
    next: AtomicUsize,
    events: Mutex<Vec<CudaEvent>>,
    /// Empty (unallocated) until an operation is timed; then it grows to
    /// what the timed operations in flight hold and stays there.
    timed: Mutex<Vec<CudaEvent>>,
}

impl std::fmt::Debug for DevicePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevicePool")
            .field("device", &self.device.ordinal())
            .field("streams", &self.streams.len())
            .finish()
    }
}

/// How many events a pool keeps ready before any operation asks.
const PREALLOCATED_EVENTS: usize = 8;
/// Room in the pool's free list from the start: more than a steady loop
/// has in flight (the watchdog's backlog stays near its reaping threshold
/// of 256), so giving events back never grows the list, and a steady-state
/// operation never allocates.
const EVENT_SLOTS: usize = 1024;

impl DevicePool {
    /// Creates `streams` non-blocking streams on `device` (high priority if
    /// asked) and a few events.
    ///
    /// # Errors
    /// A CUDA failure.
    pub fn new(device: Device, streams: usize, high_priority: bool) -> Result<Self> {
        let context = device.context();
        device.bind_to_thread()?;
        let priority = if high_priority {
            // The greatest priority is the numerically lowest value.
            let (_least, greatest) = cudarc::driver::result::stream::get_priority_range()
                .map_err(nccl_core::Error::cuda("reading the stream priority range"))?;
            greatest
        } else {
            0
        };
        let streams = (0..streams.max(1))
            .map(|_| context.new_stream_with_priority(priority))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(nccl_core::Error::cuda("creating the NCCL streams"))?;
        let mut events = Vec::with_capacity(EVENT_SLOTS);
        for _ in 0..PREALLOCATED_EVENTS {
            events.push(
                context
                    .new_event(None)
                    .map_err(nccl_core::Error::cuda("creating events"))?,
            );
        }
        Ok(Self {
            device,
            streams,
            next: AtomicUsize::new(0),
            events: Mutex::new(events),
            timed: Mutex::new(Vec::new()),
        })
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The next stream of the pool (round robin).
    pub fn stream(&self) -> Arc<CudaStream> {
        let index = self.next.fetch_add(1, Ordering::Relaxed) % self.streams.len();
        Arc::clone(&self.streams[index])
    }

    /// Makes every stream of the pool wait, on the GPU, for what `stream`
    /// has queued so far: nothing issued on the pool afterwards runs beside
    /// it. Best effort: if CUDA cannot record an event, the stream is
    /// broken and nothing queued after it runs either.
    pub(crate) fn order_after(&self, stream: &CudaStream) {
        if let Ok(event) = self.event()
            && event.record(stream).is_ok()
        {
            for theirs in &self.streams {
                let _ = theirs.wait(&event);
            }
            self.give_back(event);
        }
    }

    /// An event from the pool (a new one when all are in use).
    ///
    /// # Errors
    /// A CUDA failure creating a new event.
    pub fn event(&self) -> Result<CudaEvent> {
        self.take(&self.events, None)
    }

    /// Returns an event whose recorded work no stream will wait on anew.
    pub fn give_back(&self, event: CudaEvent) {
        Self::put(&self.events, event);
    }

    /// A timed event from the pool (a new one when all are in use), which
    /// [`CudaEvent::elapsed_ms`] can measure from or to.
    pub(crate) fn timed_event(&self) -> Result<CudaEvent> {
        self.take(&self.timed, Some(CUevent_flags::CU_EVENT_DEFAULT))
    }

    /// Returns an event of [`DevicePool::timed_event`], as
    /// [`DevicePool::give_back`] does.
    pub(crate) fn give_back_timed(&self, event: CudaEvent) {
        Self::put(&self.timed, event);
    }

    /// An event of `list`, or a new one created with `flags` (cudarc's
    /// default, without timing, for `None`).
    fn take(&self, list: &Mutex<Vec<CudaEvent>>, flags: Option<CUevent_flags>) -> Result<CudaEvent> {
        let pooled = list.lock().unwrap_or_else(PoisonError::into_inner).pop();
        match pooled {
            Some(event) => Ok(event),
            None => self
                .device
                .context()
                .new_event(flags)
                .map_err(|error| nccl_core::Error::cuda("creating an event")(error).into()),
        }
    }

    fn put(list: &Mutex<Vec<CudaEvent>>, event: CudaEvent) {
        list.lock().unwrap_or_else(PoisonError::into_inner).push(event);
    }
}
