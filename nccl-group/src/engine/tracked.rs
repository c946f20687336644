//! [`Tracked`]: one operation as a [`Work`](crate::Work), the watchdog
//! and the tensors it hands back see it: its end events, one per device
//! (or the one it shares with the operations beside it on the caller's
//! stream), and its outcome.

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use cudarc::driver::{CudaEvent, CudaStream};

use crate::engine::pool::DevicePool;
use crate::engine::shared_end::SharedEnd;
use nccl_tensor::{ProducerError, ResultCheck};

use crate::error::GroupError;
use crate::failure::Failure;
use crate::health::verify::{Outcome, OutcomeScope};
use crate::health::watchdog::{Completion, Progress};

/// The end of the operation on one device.
pub(crate) struct End {
    pub(crate) pool: Arc<DevicePool>,
    pub(crate) event: CudaEvent,
    /// With GPU timing, the timed event recorded just before the operation
    /// was enqueued (`event` is then a timed one too); `None` otherwise.
    pub(crate) start: Option<CudaEvent>,
    /// The stream the event is recorded on: kept alive with the end, so
    /// that its address is a lane no other stream has meanwhile
    /// ([`Completion::lane`]).
    pub(crate) stream: Arc<CudaStream>,
    /// The caller's stream, where it is not the stream the operation ran
    /// on: [`Work::wait`] makes it wait for the end.
    pub(crate) caller: Option<Arc<CudaStream>>,
}

/// One end event per device; a single device needs no allocation.
pub(crate) enum Ends {
    /// An untimed operation on one device, on the caller's stream: the end
    /// it shares with the operations beside it there.
    Shared(Arc<SharedEnd>),
    One(End),
    Many(Vec<End>),
    /// None any more: the operation finished and its ends went back
    /// ([`Completion::release`]), its allocation kept for a later one.
    Released,
}

impl Ends {
    /// The ends of the operation's own events (none for a shared end).
    pub(crate) fn as_slice(&self) -> &[End] {
        match self {
            Ends::Shared(_) | Ends::Released => &[],
            Ends::One(end) => std::slice::from_ref(end),
            Ends::Many(ends) => ends,
        }
    }

    fn poll(&self) -> Progress {
        if let Ends::Shared(end) = self {
            return end.poll();
        }
        for end in self.as_slice() {
            match end.event.try_is_complete() {
                Ok(true) => {}
                Ok(false) => return Progress::Running,
                Err(error) => return Progress::Broken(error),
            }
        }
        Progress::Done
    }

    /// How long the finished operation ran on the GPU: the longest of its
    /// devices, from each one's start event to its end; `None` unless every
    /// device was timed and measured (a shared end is untimed, a released
    /// one gone).
    fn gpu_time(&self) -> Option<Duration> {
        if let Ends::Shared(_) | Ends::Released = self {
            return None;
        }
        self.as_slice()
            .iter()
            .map(|end| {
                let millis = end.start.as_ref()?.elapsed_ms(&end.event).ok()?;
                Duration::try_from_secs_f64(f64::from(millis) / 1e3).ok()
            })
            .try_fold(Duration::ZERO, |longest, time| Some(longest.max(time?)))
    }
}

/// What a [`Work`], the watchdog and the tensors it hands back share about
/// one operation, in one allocation (none where the tracker lends it a
/// finished operation's: see [`Tracked::shared`]): its end events (given
/// back to their pools once all are done with it, so a tensor that keeps
/// its result check keeps its end event until its next producer replaces
/// the check) and its [`Outcome`]
/// (whether its group failed before it finished, whether its end was
/// verified), which the tensors check through it ([`ResultCheck`]).
pub(crate) struct Tracked {
    pub(crate) ends: Ends,
    pub(crate) outcome: Outcome,
    /// [`GroupOptions::blocking_wait`](crate::GroupOptions::blocking_wait)
    /// when it was issued.
    pub(crate) blocking_wait: bool,
}

// The tracker's bound on the spares it keeps (its `MAX_SPARES`) is stated
// in bytes from this size.
const _: () = assert!(
    std::mem::size_of::<Tracked>() == 120,
    "a Tracked is 120 bytes (136 with its Arc's counts)"
);

impl Tracked {
    /// The operation of `ends`, its outcome in `scope` (`collective` as in
    /// [`Outcome::new`]), in an `Arc`: in `spare`, a finished operation's
    /// released allocation, where the tracker kept one
    /// ([`Tracker::push_with`]).
    ///
    /// [`Tracker::push_with`]: crate::health::watchdog::Tracker::push_with
    pub(crate) fn shared(
        ends: Ends,
        scope: &Arc<OutcomeScope>,
        collective: Option<u64>,
        blocking_wait: bool,
        spare: Option<Arc<Self>>,
    ) -> Arc<Self> {
        if let Some(mut spare) = spare
            && let Some(slot) = Arc::get_mut(&mut spare)
        {
            // Field by field, every one named (a field added later does
            // not compile here until it is set): the released operation
            // has no ends left to give back, so they are overwritten, not
            // dropped, and its outcome is renewed in place.
            let Self {
                ends: slot_ends,
                outcome: slot_outcome,
                blocking_wait: slot_blocking_wait,
            } = slot;
            *slot_ends = ends;
            slot_outcome.renew(scope, collective);
            *slot_blocking_wait = blocking_wait;
            return spare;
        }
        Arc::new(Self {
            ends,
            outcome: Outcome::new(Arc::clone(scope), collective),
            blocking_wait,
        })
    }

    /// Gives the operation's end events back to their pools (a shared end
    /// is given back by the last operation that shares it).
    fn give_back_ends(&mut self) {
        let ends = std::mem::replace(&mut self.ends, Ends::Released);
        let give = |end: End| match end.start {
            Some(start) => {
                end.pool.give_back_timed(start);
                end.pool.give_back_timed(end.event);
            }
            None => end.pool.give_back(end.event),
        };
        match ends {
            Ends::Shared(_) | Ends::Released => {}
            Ends::One(end) => give(end),
            Ends::Many(ends) => ends.into_iter().for_each(give),
        }
    }

    /// The error of an operation its group failed under, if it did.
    pub(crate) fn failed(&self) -> Option<GroupError> {
        self.outcome.failed()
    }

    /// Notes an end seen by a poll that found the operation done.
    fn seen(&self, progress: Progress) -> Progress {
        if progress == Progress::Done {
            self.outcome.saw_end();
        }
        progress
    }

    /// [`Tracked::failed`] as a waiter reports it ([`Outcome::failed_error`]).
    pub(crate) fn failed_error(&self) -> Option<GroupError> {
        self.outcome.failed_error()
    }
}

impl ResultCheck for Tracked {
    fn check(&self) -> std::result::Result<(), ProducerError> {
        self.outcome.check()
    }
}

impl Completion for Tracked {
    fn poll(&self) -> Progress {
        self.seen(self.ends.poll())
    }

    fn poll_closing(&self) -> Progress {
        match &self.ends {
            Ends::Shared(end) => self.seen(end.poll_closing()),
            _ => self.poll(),
        }
    }

    fn lane(&self) -> Option<usize> {
        match &self.ends {
            Ends::Shared(end) => Some(Arc::as_ptr(end.stream()) as usize),
            Ends::One(end) => Some(Arc::as_ptr(&end.stream) as usize),
            Ends::Many(_) | Ends::Released => None,
        }
    }

    fn fail(&self, failure: &Arc<Failure>) {
        self.outcome.fail(failure);
    }

    fn gpu_time(&self) -> Option<Duration> {
        self.ends.gpu_time()
    }

    fn release(&mut self) {
        self.give_back_ends();
    }

    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.give_back_ends();
    }
}
