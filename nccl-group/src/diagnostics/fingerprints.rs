//! The mismatch check ([`GroupOptions::mismatch_check`], on by default):
//! every rank's collectives compared with every other rank's off the
//! issuing thread, so that ranks that did not issue the same collectives
//! get an error instead of a wrong result, at the cost of a push onto a
//! queue per collective.
//!
//! Each collective's fingerprint is what [`Issued`] holds (operation, data
//! type, element count, root, reduction), numbered as the flight recorder
//! numbers collectives. The issuing thread only queues it
//! ([`Fingerprints::push`]); a thread of the group's own
//! (`fingerprints/exchange.rs`) publishes each rank's queue in chunks to
//! the rendezvous store and reads the other ranks' chunks, compares them,
//! and moves the *verified* mark: every collective below it was issued
//! alike by every rank. A host read of an operation's result waits for
//! its collective to be verified ([`Fingerprints::await_verdict`]), which
//! makes the thread publish at once and wait for the others' chunks in the
//! store (one exchange); without such a read, chunks are published every
//! [`PUBLISH_INTERVAL`] and compared every [`COMPARE_INTERVAL`], so that a
//! mismatch that hangs NCCL or reaches only the GPU still fails the group.
//!
//! Store keys, below `<group>/<generation>/fingerprints`: rank `r`'s
//! chunk `k` is `<r>/<k>`, JSON of a [`Chunk`]: runs of consecutive
//! collectives with one fingerprint (a loop of one collective is one run),
//! and the rank's verified mark. A rank deletes its chunk once every rank's
//! verified mark has passed it (read from their chunks). When the group
//! ends, each rank lists its remaining chunks under `<rank>/left` (a slower
//! rank may still read them) and counts itself in `closed`; the last to
//! count deletes every rank's. The store holds the chunks not yet verified
//! everywhere (after a mismatch, the ranks' chunks from the last
//! collective verified everywhere on, so that every rank finds it).
//!
//! The store-based check of [`GroupOptions::collective_checks`] stays
//! for explaining a hang: it compares before a collective is enqueued.
//!
//! [`GroupOptions::mismatch_check`]: crate::GroupOptions::mismatch_check
//! [`GroupOptions::collective_checks`]: crate::GroupOptions::collective_checks

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::diagnostics::analysis::{Divergence, Issued};
use crate::diagnostics::checks::Stop;

mod exchange;

pub(crate) use exchange::spawn;

/// How long queued fingerprints wait before they are published when no
/// host read asks for a verdict.
pub(crate) const PUBLISH_INTERVAL: Duration = Duration::from_millis(5);
/// How often the other ranks' chunks are read and compared when no host
/// read asks for a verdict: the longest a mismatch that only the GPU sees
/// goes unnoticed, past the other ranks' publishing.
pub(crate) const COMPARE_INTERVAL: Duration = Duration::from_millis(50);
/// How long one wait for the other ranks' chunks lasts before the
/// exchange thread looks again at its own queue.
const WAIT_SLICE: Duration = Duration::from_millis(2);
/// The room the queue starts with (and its spare, which the exchange
/// thread swaps in): more collectives than a rank issues in a publish
/// interval, so that the issuing threads do not allocate.
pub(crate) const QUEUE_CAPACITY: usize = 1024;
/// The most runs one chunk holds (about 100 bytes of JSON each).
pub(crate) const MAX_CHUNK_RUNS: usize = 1024;
/// How long the exchange thread waits before it tries a failing store
/// again.
const STORE_RETRY: Duration = Duration::from_millis(20);
/// How long a host read waits for its verdict before it asks whether the
/// group is still live.
const LIVE_SLICE: Duration = Duration::from_millis(100);
/// How long after a group failed the reads of its unverified collectives
/// wait for the check's verdict, in case a mismatch caused the failure:
/// the other ranks' fingerprints are in the store by then, or never come
/// (a lost rank).
const FAILED_VERDICT_GRACE: Duration = Duration::from_millis(100);

/// Consecutive collectives with one fingerprint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Run {
    /// The fingerprint; its `collective_seq` is the run's first collective.
    pub(crate) issued: Issued,
    /// How many collectives the run holds (at least 1).
    pub(crate) len: u64,
}

impl Run {
    /// One past the run's last collective.
    pub(crate) fn end(&self) -> u64 {
        self.issued.collective_seq.saturating_add(self.len)
    }
}

/// What a rank publishes at once: its next collectives, and how far it
/// verified.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Chunk {
    /// Every collective below this was verified by the publishing rank.
    pub(crate) verified: u64,
    /// The collectives, in order and consecutive, continuing the rank's
    /// previous chunk.
    pub(crate) runs: Vec<Run>,
}

/// Extends `last` with collective `issued` when it continues it (the
/// next collective, the same fingerprint); else `issued` as a run of its
/// own, to append.
pub(crate) fn extend(last: Option<&mut Run>, issued: Issued) -> Option<Run> {
    if let Some(last) = last
        && last.end() == issued.collective_seq
        && same_fingerprint(&last.issued, &issued)
    {
        last.len += 1;
        return None;
    }
    Some(Run { issued, len: 1 })
}

/// Whether `a` and `b` describe their collectives alike, whatever their
/// numbers.
fn same_fingerprint(a: &Issued, b: &Issued) -> bool {
    a.op == b.op
        && a.dtype == b.dtype
        && a.count == b.count
        && a.root == b.root
        && a.reduction == b.reduction
}

/// One rank's mismatch check: the queue the issuing threads push to, the
/// verified mark the exchange thread moves, and the host reads that wait
/// for it.
pub(crate) struct Fingerprints {
    rank: usize,
    world_size: usize,
    state: Mutex<State>,
    /// Signalled when the queue, the waiters, the verified mark or the
    /// verdict changes.
    changed: Condvar,
}

#[derive(Default)]
struct State {
    /// Pushed, not yet taken by the exchange thread.
    queued: Vec<Issued>,
    /// One past the highest collective pushed.
    pushed: u64,
    /// The host reads waiting for a verdict: while there is one, the
    /// exchange thread publishes and reads at once.
    waiters: usize,
    /// The highest collective a waiting read wants, plus one.
    wanted: u64,
    /// Every collective below this was issued alike by every rank.
    verified: u64,
    /// The ranks whose chunks the exchange waits for (for a waiter's
    /// error).
    lagging: Vec<usize>,
    /// The store's last error, while it fails (the thread retries).
    store_error: Option<String>,
    /// The first collective the ranks did not issue alike, once found:
    /// the check stopped.
    divergence: Option<Box<Divergence>>,
    /// Until when a read of a collective that failed with its group waits
    /// for a verdict (see [`Fingerprints::failure_verdict`]), once the
    /// group failed; the exchange thread then answers such reads only.
    failed_until: Option<Instant>,
    /// The group ended: the exchange thread stops.
    closed: bool,
}

impl Fingerprints {
    /// Rank `rank`'s check among `world_size` ranks.
    pub(crate) fn new(rank: usize, world_size: usize) -> Self {
        let state = State {
            queued: Vec::with_capacity(QUEUE_CAPACITY),
            ..State::default()
        };
        Self {
            rank,
            world_size,
            state: Mutex::new(state),
            changed: Condvar::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues the fingerprint of a collective NCCL accepted (its
    /// `collective_seq` the flight recorder's): no store access, and no
    /// allocation once the queue has grown to the rate of collectives. The
    /// first push after the exchange thread took the queue wakes it.
    pub(crate) fn push(&self, issued: Issued) {
        let mut state = self.state();
        let wake = state.queued.is_empty();
        state.pushed = state.pushed.max(issued.collective_seq + 1);
        state.queued.push(issued);
        drop(state);
        if wake {
            self.changed.notify_all();
        }
    }

    /// Whether collective `seq` was verified (issued alike everywhere).
    pub(crate) fn agreed(&self, seq: u64) -> bool {
        seq < self.state().verified
    }

    /// Waits until collective `seq` is verified, at most until `deadline`,
    /// asking `live` between waits whether to go on.
    ///
    /// # Errors
    /// [`Stop::Mismatch`] when the ranks did not issue it (or an earlier
    /// collective) alike; [`Stop::Incomplete`] past the deadline (the
    /// ranks whose chunks did not come, and the store's error if it was
    /// failing); [`Stop::Closed`] with `live`'s error.
    pub(crate) fn await_verdict<E>(
        &self,
        seq: u64,
        deadline: Instant,
        live: &dyn Fn() -> Result<(), E>,
    ) -> Result<(), Stop<E>> {
        let mut state = self.state();
        if seq < state.verified {
            return Ok(());
        }
        state.waiters += 1;
        state.wanted = state.wanted.max(seq + 1);
        self.changed.notify_all();
        let (mut state, verdict) = self.wait_for(state, seq, deadline, live);
        state.waiters -= 1;
        if state.waiters == 0 {
            state.wanted = 0;
        }
        verdict
    }

    /// [`Fingerprints::await_verdict`]'s wait, counted among the waiters.
    fn wait_for<'a, E>(
        &'a self,
        mut state: MutexGuard<'a, State>,
        seq: u64,
        deadline: Instant,
        live: &dyn Fn() -> Result<(), E>,
    ) -> (MutexGuard<'a, State>, Result<(), Stop<E>>) {
        let started = Instant::now();
        loop {
            if seq < state.verified {
                return (state, Ok(()));
            }
            if let Some(divergence) = state
                .divergence
                .as_ref()
                .filter(|divergence| divergence.collective_seq <= seq)
            {
                let mismatch = Stop::Mismatch {
                    divergence: divergence.clone(),
                    first: divergence.collective_seq,
                    last: seq,
                };
                return (state, Err(mismatch));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || state.closed {
                let incomplete = Stop::Incomplete {
                    first: seq,
                    last: seq,
                    absent: state.lagging.clone(),
                    waited: started.elapsed(),
                    error: state.store_error.clone(),
                };
                return (state, Err(incomplete));
            }
            drop(state);
            let alive = live();
            state = self.state();
            if let Err(error) = alive {
                return (state, Err(Stop::Closed(error)));
            }
            if seq < state.verified || state.divergence.is_some() {
                continue;
            }
            state = self
                .changed
                .wait_timeout(state, left.min(LIVE_SLICE))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// The divergence that failed a read of collective `seq` whose group
    /// failed, if the check finds one in time: after a divergence, the
    /// ranks that found it abort their communicators, and another rank
    /// may see that abort (a lost peer) before its own check has
    /// compared. Waits until [`FAILED_VERDICT_GRACE`] after the failure,
    /// once for all reads; not at all once the group ended.
    pub(crate) fn failure_verdict(&self, seq: u64) -> Option<Stop<()>> {
        let until = {
            let state = self.state();
            if seq < state.verified || state.closed {
                return None;
            }
            state.failed_until?
        };
        match self.await_verdict(seq, until, &|| Ok::<(), ()>(())) {
            Err(mismatch @ Stop::Mismatch { .. }) => Some(mismatch),
            _ => None,
        }
    }

    /// Waits, at most until `deadline`, until every collective pushed so
    /// far is verified (a group that ends cleanly first settles its
    /// check, so that its results stay readable).
    ///
    /// # Errors
    /// As [`Fingerprints::await_verdict`].
    pub(crate) fn settle<E>(
        &self,
        deadline: Instant,
        live: &dyn Fn() -> Result<(), E>,
    ) -> Result<(), Stop<E>> {
        let pushed = self.state().pushed;
        match pushed.checked_sub(1) {
            Some(last) => self.await_verdict(last, deadline, live),
            None => Ok(()),
        }
    }

    /// The group failed: from now on the exchange thread publishes and
    /// compares only when a read waits for a verdict.
    pub(crate) fn group_failed(&self) {
        self.state().failed_until = Some(Instant::now() + FAILED_VERDICT_GRACE);
    }

    /// Stops the exchange thread (the group ended); waiters get an
    /// incomplete verdict.
    pub(crate) fn close(&self) {
        self.state().closed = true;
        self.changed.notify_all();
    }
}

#[cfg(test)]
mod tests;
