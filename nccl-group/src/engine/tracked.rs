//! [`Tracked`]: one operation as a [`Work`](crate::Work), the watchdog
//! and the tensors it hands back see it: its end events, one per device,
//! and its outcome.

use std::sync::Arc;

use cudarc::driver::{CudaEvent, CudaStream};

use crate::engine::pool::DevicePool;
use nccl_tensor::{ProducerError, ResultCheck};

use crate::error::GroupError;
use crate::failure::Failure;
use crate::health::verify::Outcome;
use crate::health::watchdog::{Completion, Progress};

/// The end of the operation on one device.
pub(crate) struct End {
    pub(crate) pool: Arc<DevicePool>,
    pub(crate) event: CudaEvent,
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
    One(End),
    Many(Vec<End>),
}

impl Ends {
    pub(crate) fn as_slice(&self) -> &[End] {
        match self {
            Ends::One(end) => std::slice::from_ref(end),
            Ends::Many(ends) => ends,
        }
    }
}

/// What a [`Work`], the watchdog and the tensors it hands back share about
/// one operation, in one allocation (the one a steady-state operation
/// makes): its end events (given back to their pools once all are done
/// with it, so a tensor that keeps its result check keeps its end event
/// until its next producer replaces the check) and its [`Outcome`]
/// (whether its group failed before it finished, whether its end was
/// verified), which the tensors check through it ([`ResultCheck`]).
pub(crate) struct Tracked {
    pub(crate) ends: Ends,
    pub(crate) outcome: Outcome,
    /// [`GroupOptions::blocking_wait`](crate::GroupOptions::blocking_wait)
    /// when it was issued.
    pub(crate) blocking_wait: bool,
}

impl Tracked {
    pub(crate) fn new(ends: Ends, outcome: Outcome, blocking_wait: bool) -> Self {
        Self {
            ends,
            outcome,
            blocking_wait,
        }
    }

    /// The error of an operation its group failed under, if it did.
    pub(crate) fn failed(&self) -> Option<GroupError> {
        self.outcome.failed()
    }
}

impl ResultCheck for Tracked {
    fn check(&self) -> std::result::Result<(), ProducerError> {
        self.outcome.check()
    }
}

impl Completion for Tracked {
    fn poll(&self) -> Progress {
        for end in self.ends.as_slice() {
            match end.event.try_is_complete() {
                Ok(true) => {}
                Ok(false) => return Progress::Running,
                Err(error) => return Progress::Broken(error),
            }
        }
        self.outcome.saw_end();
        Progress::Done
    }

    fn lane(&self) -> Option<usize> {
        match &self.ends {
            Ends::One(end) => Some(Arc::as_ptr(&end.stream) as usize),
            Ends::Many(_) => None,
        }
    }

    fn fail(&self, failure: &Arc<Failure>) {
        self.outcome.fail(failure);
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        let ends = std::mem::replace(&mut self.ends, Ends::Many(Vec::new()));
        let give = |end: End| end.pool.give_back(end.event);
        match ends {
            Ends::One(end) => give(end),
            Ends::Many(ends) => ends.into_iter().for_each(give),
        }
    }
}
