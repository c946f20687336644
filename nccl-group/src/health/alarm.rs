//! The failure alarm's listening side: how long an operation waits
//! before its rank reads the alarm ([`LISTEN_AFTER`]), how often
//! ([`LISTEN_EVERY`]), and a group's listening state ([`Listener`]). The
//! alarm itself, raised and read through the store, is
//! `crate::engine::alarm`.

use std::sync::Mutex;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// How long an operation must have been pending before its rank looks
/// for another rank's alarm: a healthy collective rarely waits that long,
/// so a healthy group rarely reads the store for it.
pub(crate) const LISTEN_AFTER: Duration = Duration::from_secs(1);

/// How often a waiting rank reads the alarm.
pub(crate) const LISTEN_EVERY: Duration = Duration::from_millis(500);

/// A group's listening state.
#[derive(Default)]
pub(crate) struct Listener {
    /// When the alarm was last read.
    pub(crate) last: Mutex<Option<Instant>>,
    /// Whether a read is running.
    pub(crate) reading: AtomicBool,
    /// Whether the group is known here to have lost a process: an alarm
    /// read here said its raising rank knew of one (any read that says so,
    /// also one that came too late to fail the group), or this process is
    /// exiting (`Inner::note_own_exit`).
    pub(crate) peer_lost: AtomicBool,
}
