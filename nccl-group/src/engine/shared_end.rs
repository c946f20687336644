//! End events shared by consecutive operations on one stream: an
//! operation on the caller's stream, untimed, on one device, whose buffers
//! are freed on that stream (the default) joins the open [`SharedEnd`] of
//! its member instead of recording an event of its own. The end is
//! recorded once for the whole batch, after its last operation: by the
//! issuing thread when [`BATCH`] operations joined or when the next one
//! runs on another stream, before `begin_capture` ([`OpenEnd::close_on`]),
//! and by whoever waits for one of them ([`SharedEnd::poll_closing`]: a
//! `Work`'s `synchronize` and `is_completed`, an awaited `Work`, the
//! watchdog's scan, the last check of a group that ends).
//!
//! An event recorded after an operation completes after it (work on one
//! stream runs in order), so a batch's end is a correct end for each of
//! its operations; it may complete later than the operation's own event
//! would have, by the work queued on the stream between the two. This
//! saves a driver call (and the context bind before it) per operation.
//! A `Work` dropped unwaited needs no end either: its buffers are freed on
//! the operation's stream, after it.
//!
//! A stream being captured into a CUDA graph gets no record: the event
//! would be part of the capture. The end stays unrecorded until the
//! capture ends. A capture another thread began between the check and the
//! record leaves an event that CUDA refuses to query
//! (`CUDA_ERROR_CAPTURED_EVENT`): it is recorded again later. A record
//! that fails for a waiter is tried again at its next poll: cudarc's
//! context bind before it may return an error an earlier call left behind.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use cudarc::driver::sys::CUresult;
use cudarc::driver::{CudaEvent, CudaStream, DriverError};
use nccl_core::CaptureStatus;

use crate::engine::pool::DevicePool;
use crate::error::Result;
use crate::health::watchdog::Progress;

/// How many operations share one end event at most: the issuing thread
/// records it when this many joined. Small beside the tracker's reaping
/// threshold, so the thread that reaps finds recorded ends.
const BATCH: u32 = 32;

/// The bit of [`SharedEnd::joined`] that closes the batch.
const CLOSED: u32 = 1 << 31;

/// The end of a batch of consecutive operations on one stream.
pub(crate) struct SharedEnd {
    pool: Arc<DevicePool>,
    stream: Arc<CudaStream>,
    /// How many operations joined, and [`CLOSED`] once none may join any
    /// more: one read-modify-write to join, where a lock takes two. A join
    /// and a close are ordered by it: an operation that joined before the
    /// close was enqueued before the end is recorded (the close acquires
    /// what the join released), and one after it does not join.
    joined: AtomicU32,
    state: Mutex<State>,
}

struct State {
    /// The batch's event (kept when the batch is reused).
    event: Option<CudaEvent>,
    /// `event` was recorded after the last operation that joined.
    recorded: bool,
    /// The event was seen complete (no need to ask CUDA again).
    done: bool,
}

impl SharedEnd {
    /// A batch on `stream` whose first operation was just enqueued.
    fn open(pool: &Arc<DevicePool>, stream: &Arc<CudaStream>) -> Self {
        Self {
            pool: Arc::clone(pool),
            stream: Arc::clone(stream),
            joined: AtomicU32::new(1),
            state: Mutex::new(State {
                event: None,
                recorded: false,
                done: false,
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The stream the batch runs on.
    pub(crate) fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Adds an operation just enqueued on the batch's stream, unless the
    /// batch is closed; records the end when it is full.
    fn join(&self) -> Result<bool> {
        let before = self.joined.fetch_add(1, Ordering::AcqRel);
        if before & CLOSED != 0 {
            return Ok(false);
        }
        if before + 1 >= BATCH {
            self.close(&mut self.state())?;
        }
        Ok(true)
    }

    /// Closes the batch and records its end, unless it is recorded or the
    /// stream is being captured.
    fn close(&self, state: &mut State) -> Result<()> {
        self.joined.fetch_or(CLOSED, Ordering::AcqRel);
        if state.recorded || nccl_core::capture_status(&self.stream)? != CaptureStatus::None {
            return Ok(());
        }
        let event = match state.event.take() {
            Some(event) => event,
            None => self.pool.event()?,
        };
        let recorded = event.record(&self.stream);
        state.event = Some(event);
        recorded.map_err(nccl_core::Error::cuda("recording a shared end event"))?;
        state.recorded = true;
        Ok(())
    }

    /// Polls the end without recording it: an open batch is running.
    pub(crate) fn poll(&self) -> Progress {
        Self::query(&mut self.state())
    }

    /// Polls the end, first recording it if it is not yet: for a caller
    /// that waits for one of the batch's operations. An end that cannot be
    /// recorded now (a capture, a failed record) is running: the next poll
    /// tries again, and a broken context shows in the queries of the
    /// recorded ends, or as the operation's timeout.
    pub(crate) fn poll_closing(&self) -> Progress {
        let mut state = self.state();
        if !state.recorded {
            let _ = self.close(&mut state);
        }
        Self::query(&mut state)
    }

    fn query(state: &mut State) -> Progress {
        if state.done {
            return Progress::Done;
        }
        let Some(event) = state.event.as_ref().filter(|_| state.recorded) else {
            return Progress::Running;
        };
        match event.try_is_complete() {
            Ok(true) => {
                state.done = true;
                Progress::Done
            }
            Ok(false) => Progress::Running,
            // Recorded into a capture another thread began just before:
            // recorded again once the capture ended.
            Err(DriverError(CUresult::CUDA_ERROR_CAPTURED_EVENT)) => {
                state.recorded = false;
                Progress::Running
            }
            Err(error) => Progress::Broken(error),
        }
    }
}

impl Drop for SharedEnd {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        if let Some(event) = state.event.take() {
            self.pool.give_back(event);
        }
    }
}

/// A member's open batch, the one its next operation on the same stream
/// joins, and the batches before it, oldest first, reused once no
/// operation holds them any more (with their events), so that a steady
/// loop allocates none.
pub(crate) struct OpenEnd(Mutex<Batches>);

struct Batches {
    open: Option<Arc<SharedEnd>>,
    retired: VecDeque<Arc<SharedEnd>>,
}

/// Retired batches kept for reuse at most: more than the operations the
/// tracker keeps pending (it reaps past 256), so that even batches of one
/// operation each are reused; a batch past it is dropped once its
/// operations are.
const RETIRED: usize = 512;

/// Batches made with the member, unused: a loop that runs ahead of the
/// GPU holds a batch per 32 operations (or per watchdog scan) until the
/// GPU catches up, and takes these before it allocates one.
const SPARE: usize = 64;

impl OpenEnd {
    /// A member's, with [`SPARE`] batches ready (on `stream` until reused).
    pub(crate) fn new(pool: &Arc<DevicePool>, stream: &Arc<CudaStream>) -> Self {
        let mut retired = VecDeque::with_capacity(RETIRED + 1);
        retired.extend((0..SPARE).map(|_| Arc::new(SharedEnd::open(pool, stream))));
        Self(Mutex::new(Batches {
            open: None,
            retired,
        }))
    }

    /// The end of an operation just enqueued on `stream`: the open batch's,
    /// if it is on `stream` and still open, else a new batch's, which
    /// becomes the open one; a batch left open on another stream is closed
    /// first (its end recorded), so that only the open batch is ever
    /// unrecorded and joinable.
    ///
    /// # Errors
    /// A CUDA error recording a batch's end.
    pub(crate) fn end_for(
        &self,
        pool: &Arc<DevicePool>,
        stream: &Arc<CudaStream>,
    ) -> Result<Arc<SharedEnd>> {
        let mut batches = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(end) = &batches.open {
            if Arc::ptr_eq(&end.stream, stream) {
                if end.join()? {
                    return Ok(Arc::clone(end));
                }
            } else {
                end.close(&mut end.state())?;
            }
        }
        let end = batches
            .reuse(stream)
            .unwrap_or_else(|| Arc::new(SharedEnd::open(pool, stream)));
        if let Some(closed) = batches.open.replace(Arc::clone(&end)) {
            batches.retired.push_back(closed);
            if batches.retired.len() > RETIRED {
                batches.retired.pop_front();
            }
        }
        Ok(end)
    }

    /// Records the end of the open batch if it runs on `stream`: before
    /// a capture of `stream` begins, after which none could be.
    ///
    /// # Errors
    /// A CUDA error recording it.
    pub(crate) fn close_on(&self, stream: &Arc<CudaStream>) -> Result<()> {
        let batches = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match &batches.open {
            Some(end) if Arc::ptr_eq(&end.stream, stream) => end.close(&mut end.state()),
            _ => Ok(()),
        }
    }
}

impl Batches {
    /// The oldest retired batch, opened again on `stream`, if no operation
    /// holds it any more.
    fn reuse(&mut self, stream: &Arc<CudaStream>) -> Option<Arc<SharedEnd>> {
        let oldest = Arc::get_mut(self.retired.front_mut()?)?;
        oldest.stream = Arc::clone(stream);
        *oldest.joined.get_mut() = 1;
        let state = oldest.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        // The event is kept, to be recorded again when this batch closes.
        state.recorded = false;
        state.done = false;
        self.retired.pop_front()
    }
}
