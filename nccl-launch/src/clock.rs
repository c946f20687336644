//! The time the supervisor reads: the deadline, the grace period after a
//! forwarded signal and the elapsed time all go by one clock, so a test
//! can show a long launch without waiting for it.

use std::fmt::Debug;
use std::time::{Duration, Instant};

/// A monotonic time source.
pub(crate) trait Clock: Debug + Send + Sync {
    /// The time since the clock's origin; never less than at an earlier
    /// call.
    fn now(&self) -> Duration;
}

/// The system's monotonic clock, from when it was made.
#[derive(Debug)]
pub(crate) struct MonotonicClock {
    origin: Instant,
}

impl MonotonicClock {
    pub(crate) fn new() -> Self {
        Self {
            origin: Instant::now(),
        }
    }
}

impl Clock for MonotonicClock {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }
}
