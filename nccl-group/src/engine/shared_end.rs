//! End events shared by consecutive operations on one stream: an
//! operation on the caller's stream, untimed, on one device (the default)
//! joins the open [`SharedEnd`] of its member instead of recording an event
//! of its own. The end is recorded once for the whole batch, after its last
//! operation: by the issuing thread when [`BATCH`] operations joined, and
//! on demand by whoever waits for one of them ([`SharedEnd::poll_closing`]:
//! [`Work::synchronize`](crate::Work::synchronize), [`Work::is_completed`](crate::Work::is_completed),
//! a work dropped unwaited, the watchdog's scan for an idle stream's last
//! operations).
//!
//! An event recorded after an operation completes after it (work on one
//! stream runs in order), so a batch's end is a correct end for each of
//! its operations; it may complete later than the operation's own event
//! would have, by the work queued on the stream between the two. This
//! saves a driver call (and the context bind before it) per operation.
//!
//! A stream being captured into a CUDA graph gets no record: the event
//! would be part of the capture. The end stays unrecorded until the
//! capture ends. A capture another thread began between the check and the
//! record leaves an event that CUDA refuses to query
//! (`CUDA_ERROR_CAPTURED_EVENT`): it is recorded again later.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use cudarc::driver::sys::{CUresult, CUstreamCaptureStatus};
use cudarc::driver::{CudaEvent, CudaStream, DriverError};

use crate::engine::pool::DevicePool;
use crate::health::watchdog::Progress;

/// How many operations share one end event at most: the issuing thread
/// records it when this many joined. Small beside the tracker's reaping
/// threshold, so the thread that reaps finds recorded ends.
pub(crate) const BATCH: u32 = 32;

/// The end of a batch of consecutive operations on one stream.
pub(crate) struct SharedEnd {
    pool: Arc<DevicePool>,
    stream: Arc<CudaStream>,
    state: Mutex<State>,
}

struct State {
    /// How many operations joined.
    joined: u32,
    /// No operation joins any more.
    closed: bool,
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
            state: Mutex::new(State {
                joined: 1,
                closed: false,
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
    fn join(&self) -> Result<bool, DriverError> {
        let mut state = self.state();
        if state.closed {
            return Ok(false);
        }
        state.joined += 1;
        if state.joined >= BATCH {
            self.close(&mut state)?;
        }
        Ok(true)
    }

    /// Closes the batch and records its end, unless it is recorded or the
    /// stream is being captured.
    fn close(&self, state: &mut State) -> Result<(), DriverError> {
        state.closed = true;
        if state.recorded || self.capturing()? {
            return Ok(());
        }
        let event = match state.event.take() {
            Some(event) => event,
            None => self.pool.untimed_event()?,
        };
        let recorded = event.record(&self.stream);
        state.event = Some(event);
        recorded?;
        state.recorded = true;
        Ok(())
    }

    fn capturing(&self) -> Result<bool, DriverError> {
        let status = self.stream.capture_status()?;
        Ok(status != CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
    }

    /// Polls the end without recording it: an open batch is running.
    pub(crate) fn poll(&self) -> Progress {
        Self::query(&mut self.state())
    }

    /// Polls the end, first recording it if it is not yet: for a caller
    /// that waits for one of the batch's operations.
    pub(crate) fn poll_closing(&self) -> Progress {
        let mut state = self.state();
        if !state.recorded
            && let Err(error) = self.close(&mut state)
        {
            return Progress::Broken(error);
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

    /// Calls `with` with the end event, recording it first if it is not
    /// yet; `None` while the stream is being captured (no event can be
    /// recorded for it then).
    pub(crate) fn with_event<R>(
        &self,
        with: impl FnOnce(&CudaEvent) -> R,
    ) -> Result<Option<R>, DriverError> {
        let mut state = self.state();
        self.close(&mut state)?;
        Ok(state.event.as_ref().filter(|_| state.recorded).map(with))
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
#[derive(Default)]
pub(crate) struct OpenEnd(Mutex<Batches>);

#[derive(Default)]
struct Batches {
    open: Option<Arc<SharedEnd>>,
    retired: VecDeque<Arc<SharedEnd>>,
}

/// Retired batches kept for reuse at most: more than a steady loop holds
/// (the tracker's backlog is a few batches); a batch past it is dropped
/// once its operations are.
const RETIRED: usize = 64;

impl OpenEnd {
    /// The end of an operation just enqueued on `stream`: the open batch's,
    /// if it is on `stream` and still open, else a new batch's, which
    /// becomes the open one (an earlier one on another stream is left to
    /// whoever waits for it, or the watchdog).
    ///
    /// # Errors
    /// A CUDA error recording a full batch's end.
    pub(crate) fn end_for(
        &self,
        pool: &Arc<DevicePool>,
        stream: &Arc<CudaStream>,
    ) -> Result<Arc<SharedEnd>, DriverError> {
        let mut batches = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(end) = &batches.open
            && Arc::ptr_eq(&end.stream, stream)
            && end.join()?
        {
            return Ok(Arc::clone(end));
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
}

impl OpenEnd {
    /// Records the end of the open batch if it runs on `stream`: before
    /// a capture of `stream` begins, after which none could be.
    ///
    /// # Errors
    /// A CUDA error recording it.
    pub(crate) fn close_on(&self, stream: &Arc<CudaStream>) -> Result<(), DriverError> {
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
        let state = oldest.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        // The event is kept, to be recorded again when this batch closes.
        state.joined = 1;
        state.closed = false;
        state.recorded = false;
        state.done = false;
        self.retired.pop_front()
    }
}
