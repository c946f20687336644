//! The failure alarm: a failing rank tells every other rank through the
//! store, so that a rank NCCL told nothing fails within about 1.5 s and
//! joins the failure's exchange of reports.
//!
//! Why: when a rank dies, NCCL reports `ncclRemoteError` only to the
//! ranks that had a connection to it. The others wait in their next
//! collective, with no error, until their operation timeout (minutes, by
//! default). Meanwhile the ranks that saw the error exchange their
//! reports within a few seconds, and a heal takes the silent ranks for
//! lost: a healthy rank would be excluded for being blocked.
//!
//! How: the first failing rank of a generation writes
//! `<group>/<generation>/failed` ([`FAILED`]) (later ones find it written); a heal
//! called on a live group raises it too. The alarm says whether its rank
//! knew the group lost a process, and a later rank that knows marks the
//! first alarm so, once: the ranks it fails then abort their communicators
//! rather than revoke them ([`Inner::peer_died`]). A rank reads that key only while
//! one of its operations has been pending for [`LISTEN_AFTER`], every
//! [`LISTEN_EVERY`], with one read that does not wait for the key (it
//! waits for the store's answer, up to the store's I/O timeout) on a
//! thread of its own, one at a time per group: a group that is not
//! waiting never reads it (a waiting one reads twice a second: a store
//! round trip per waiting rank), the watchdog, which looks after every
//! group of the process, never waits for the store, and the thread holds
//! the group only weakly, so it keeps no dropped group alive. A rank that
//! finds the alarm fails with [`FailureCause::PeerFailed`] (or, when the
//! alarm names a rank the liveness beat found unresponsive, with
//! [`FailureCause::PeerUnresponsive`], so that its heal counts that rank
//! lost). A thread stuck inside an enqueue has no tracked operation and
//! does not listen: the enqueue's own timeout ends it.
//!
//! With the liveness beat on (`crate::engine::liveness`), the alarm is
//! also pushed: the beat's thread waits on the key in the store between
//! beats, from the group's start, and a live group fails as soon as the
//! key is set, pending operations or not ([`Inner::alarm_pushed`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::engine::failing::Finish;
use crate::engine::group::{Inner, LIVE};
use crate::engine::key::CommKey;
use crate::engine::member::Member;
use crate::engine::membership::Membership;
use crate::error::Result;
use crate::failure::{Failure, FailureCause};
use crate::health::alarm::{LISTEN_AFTER, LISTEN_EVERY};
use crate::protocols::FAILED;

/// What the alarm says: which rank failed first, and why.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Raised {
    rank: usize,
    cause: String,
    /// The rank the liveness beat found unresponsive, and how long its beat
    /// had stood still, when that failed the raising rank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    unresponsive: Option<(usize, Duration)>,
    /// Whether the raising rank knew the group lost a process
    /// ([`Inner::peer_died`]) when it raised the alarm.
    #[serde(default)]
    peer_lost: bool,
}

/// Adds the death this rank knew of to the first alarm, `first`, raised
/// without it (a heal of a live group, a timeout, before NCCL told anyone),
/// so that ranks reading it later abort rather than revoke too; once, and
/// only if the alarm is still `first` (best effort: the ranks that read it
/// before stay as they were).
fn mark_the_death(store: &dyn nccl_rendezvous::Store, key: &str, first: Vec<u8>) {
    let Ok(mut alarm) = serde_json::from_slice::<Raised>(&first) else {
        return;
    };
    if alarm.peer_lost {
        return;
    }
    alarm.peer_lost = true;
    if let Ok(marked) = serde_json::to_vec(&alarm) {
        let _ = store.compare_set(key, Some(&first), &marked);
    }
}

/// The alarm's key of `m`'s generation (`<group>/<generation>/failed`).
pub(crate) fn key(m: &Membership) -> Result<String> {
    Ok(m.generation_scope()?.key(FAILED))
}

impl Inner {
    /// Raises the alarm for `failure` on this rank, unless the alarm
    /// caused it.
    ///
    /// A store that fails leaves the others to their own detection (as before
    /// the alarm): this rank's failure goes on.
    pub(crate) fn raise_alarm(&self, failure: &Failure) {
        let m = self.cache.membership();
        let unresponsive = match failure.cause {
            FailureCause::PeerFailed { .. } => return,
            // Another rank's alarm named it: that alarm stands.
            FailureCause::PeerUnresponsive { seen_by, .. } if seen_by != m.rank => return,
            FailureCause::PeerUnresponsive {
                rank, silent_for, ..
            } => Some((rank, silent_for)),
            _ => None,
        };
        if m.world_size < 2 {
            return;
        }
        let raised = Raised {
            rank: m.rank,
            cause: failure.cause.to_string(),
            unresponsive,
            peer_lost: self.peer_died(),
        };
        let Ok(bytes) = serde_json::to_vec(&raised) else {
            return;
        };
        let Ok(key) = key(m) else {
            return;
        };
        // The first rank's alarm stays: it names where the failure began.
        let Ok(set) = m.store.compare_set(&key, None, &bytes) else {
            return;
        };
        crate::diagnostics::trace::event!(info, group = %m.name, "failure alarm raised for the other ranks");
        if raised.peer_lost
            && let Some(first) = set.current.filter(|_| !set.swapped)
        {
            mark_the_death(&*m.store, &key, first);
        }
    }

    /// Whether the group is known to have lost a process: NCCL reported a
    /// lost peer on one of this rank's collective communicators (the ones a
    /// heal could shrink), an alarm read here said so of its raising
    /// rank's, or this process is exiting ([`Inner::note_own_exit`]).
    pub(crate) fn peer_died(&self) -> bool {
        self.listener.peer_lost.load(Ordering::Acquire)
            || self.cache.keyed().iter().any(|(_, key, comms)| {
                matches!(key, CommKey::Collective(_))
                    && comms.members.iter().any(Member::saw_lost_peer)
            })
    }

    /// Reads the alarm once, for a failure that did not come from it (a
    /// heal of a live group, this rank's own detection): notes a death it
    /// reports, so that this rank aborts rather than revokes too.
    pub(crate) fn hear_of_a_death(&self) {
        if let Some(raised) = self.read_alarm() {
            self.note_a_death(&raised);
        }
    }

    /// Notes that this process is leaving the group (CUDA is shutting down
    /// under its pending operations): the group is losing a process, this
    /// one, so the alarm it raises says so and the other ranks abort rather
    /// than revoke ([`Inner::peer_died`]); a revoke waits for NCCL, whose
    /// shrink would refuse the lost process's peers anyway.
    pub(crate) fn note_own_exit(&self) {
        self.note_a_lost_process();
    }

    /// Notes the death `raised` reports, if it does, for this rank's
    /// release ([`Inner::peer_died`]).
    fn note_a_death(&self, raised: &Raised) {
        if raised.peer_lost {
            self.note_a_lost_process();
        }
    }

    /// Notes that the group lost a process, for [`Inner::peer_died`].
    fn note_a_lost_process(&self) {
        self.listener.peer_lost.store(true, Ordering::Release);
    }

    /// The watchdog's part, at each tick of a live group: starts a read of
    /// the alarm when an operation has been pending for [`LISTEN_AFTER`]
    /// at `now`, the last read is [`LISTEN_EVERY`] old and none is
    /// running.
    ///
    /// The read runs on a thread of its own.
    pub(crate) fn listen_for_alarm(self: &Arc<Self>, now: Instant) {
        let m = self.cache.membership();
        if m.world_size < 2 {
            return;
        }
        let waiting = self
            .tracker
            .oldest_enqueued()
            .is_some_and(|enqueued| now.saturating_duration_since(enqueued) >= LISTEN_AFTER);
        if !waiting {
            return;
        }
        {
            let mut last = self
                .listener
                .last
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if last.is_some_and(|last| now.saturating_duration_since(last) < LISTEN_EVERY) {
                return;
            }
            if self.listener.reading.swap(true, Ordering::AcqRel) {
                return;
            }
            *last = Some(now);
        }
        let group = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name("nccl-group-alarm".to_string())
            .spawn(move || {
                let Some(inner) = group.upgrade() else {
                    return;
                };
                // Released however the read ends (a user's store may panic).
                let _reading = ReadingFlag(&inner.listener.reading);
                let found = inner.read_alarm();
                // Only a group still held by its owner fails on the alarm:
                // a dropped one fails its pending operations itself.
                if let Some(raised) = found
                    && Arc::strong_count(&inner) > 1
                {
                    inner.fail_by_alarm(raised, Finish::Here);
                }
            });
        if spawned.is_err() {
            // No thread to spare: the next tick tries again.
            self.listener.reading.store(false, Ordering::Release);
        }
    }

    /// The liveness thread's part: the alarm key is set (its wait in the
    /// store returned); a live group still held by its owner fails on
    /// another rank's alarm at once, whatever it has pending.
    pub(crate) fn alarm_pushed(self: &Arc<Self>) {
        if let Some(raised) = self.read_alarm()
            && Arc::strong_count(self) > 1
        {
            // Its own thread: the beat goes on meanwhile.
            self.fail_by_alarm(raised, Finish::OwnThread);
        }
    }

    /// Reads the alarm once: another rank's, if it raised one.
    ///
    /// A store error reads as no alarm: the operation's own timeout still
    /// bounds the wait.
    fn read_alarm(&self) -> Option<Raised> {
        let m = self.cache.membership();
        let Ok(Some(bytes)) = key(m).and_then(|key| Ok(m.store.try_get(&key)?)) else {
            return None;
        };
        // Only this crate writes the key; what it cannot read is not an
        // alarm it raised.
        let raised = serde_json::from_slice::<Raised>(&bytes).ok()?;
        (raised.rank != m.rank).then_some(raised)
    }

    /// Fails the group, if it is still live, on another rank's alarm.
    ///
    /// On the alarm's thread of its own, the failure can finish here
    /// (`finish`).
    fn fail_by_alarm(self: &Arc<Self>, raised: Raised, finish: Finish) {
        // Before the failure, whose release reads it; also when another
        // failure came first, whose release may not have begun.
        self.note_a_death(&raised);
        if self.state.load(Ordering::Acquire) != LIVE {
            return;
        }
        crate::diagnostics::trace::event!(error, group = %self.cache.membership().name, rank = raised.rank, "another rank's failure alarm: failing the group");
        let cause = match raised.unresponsive {
            Some((rank, silent_for)) => FailureCause::PeerUnresponsive {
                rank,
                silent_for,
                seen_by: raised.rank,
            },
            None => FailureCause::PeerFailed {
                rank: raised.rank,
                cause: raised.cause,
            },
        };
        self.fail(cause, self.tracker.oldest(), finish);
    }
}

/// Clears the group's `reading` flag when the read ends, by return or by
/// panic.
struct ReadingFlag<'a>(&'a AtomicBool);

impl Drop for ReadingFlag<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

#[cfg(test)]
pub(crate) mod tests;
