//! The watchdog: one thread per process that watches every live group's
//! outstanding operations and communicators, so no failure goes unnoticed
//! and no operation hangs past its deadline.
//!
//! Each group keeps a [`Tracker`] of its pending operations (an end
//! [`Completion`] and a deadline each). Every [`INTERVAL`] the thread
//! calls [`Watched::tick`] on each registered group, which scans its
//! tracker ([`Tracker::scan`]) and its communicators' asynchronous errors,
//! and on a verdict fails the group (see `ProcessGroup`). Groups register a
//! weak reference: the watchdog never keeps a group alive.
//!
//! This module holds what the parts share: an operation's [`Progress`], its
//! [`Completion`], a [`PendingOp`] and a scan's [`Verdict`]. The parts:
//! `tracker` (a group's pending operations), `thread` (the watchdog thread
//! and its registry) and `bounded` (calls that may stall, on threads of
//! their own).

mod bounded;
mod thread;
mod tracker;

use std::any::Any;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::DriverError;

use crate::failure::Failure;

pub use bounded::{Bounded, run_bounded};
pub use thread::{Watched, watch};
pub use tracker::Tracker;

/// How often the watchdog looks at every group.
pub const INTERVAL: Duration = Duration::from_millis(20);

/// Where an operation stands on the GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Still running (or queued).
    Running,
    /// Finished on every device.
    Done,
    /// Polling it failed (a CUDA error: the context is broken).
    Broken(DriverError),
}

/// Something that can tell whether an operation has finished.
pub trait Completion: Send + Sync {
    /// Polls without blocking.
    fn poll(&self) -> Progress;

    /// Polls for a caller that waits for the operation (the watchdog's
    /// scan, a [`Work`](crate::Work)'s `synchronize` and `is_completed`):
    /// as [`Completion::poll`],
    /// first recording an end that operations share and that is not
    /// recorded yet (see `engine::shared_end`), so that an operation
    /// followed by no other is not left running for ever.
    fn poll_closing(&self) -> Progress {
        self.poll()
    }

    /// The one stream the operation's end is recorded on, as an identity
    /// that no other live stream has while the operation is pending (the
    /// completion keeps its stream alive); `None` for an operation that
    /// ends on several streams.
    ///
    /// Work on one stream finishes in order, so an operation that is done
    /// implies that every earlier one of the same lane is done too.
    fn lane(&self) -> Option<usize> {
        None
    }

    /// Marks the operation failed with its group.
    fn fail(&self, failure: &Arc<Failure>);

    /// How long a finished operation ran on the GPU, where it was timed
    /// ([`GroupOptions::gpu_timing`](crate::GroupOptions::gpu_timing));
    /// asked once [`Completion::poll`] said [`Progress::Done`].
    fn gpu_time(&self) -> Option<Duration> {
        None
    }

    /// Lets go of what the finished operation holds besides itself (its
    /// end events), when the tracker keeps its allocation for a later
    /// operation ([`Tracker::push_with`]): called only where nothing else
    /// shares it.
    fn release(&mut self) {}

    /// The operation as `Any`: how the tracker's owner takes a spare the
    /// tracker lends ([`Tracker::push_with`]) back as its own type.
    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
}

/// One outstanding operation.
pub struct PendingOp {
    /// Its flight-recorder sequence number.
    pub seq: u64,
    /// When it was enqueued.
    pub enqueued: Instant,
    /// How long it may take.
    pub timeout: Duration,
    /// Its end.
    pub completion: Arc<dyn Completion>,
}

/// What a scan concluded about the first operation that went wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Operation `seq` ran past its timeout.
    TimedOut {
        /// Its sequence number.
        seq: u64,
        /// How long it had run when the watchdog looked.
        ran: Duration,
        /// Its timeout.
        timeout: Duration,
    },
    /// Polling operation `seq` failed.
    Broken {
        /// Its sequence number.
        seq: u64,
        /// The error.
        error: DriverError,
    },
}
