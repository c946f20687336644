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
//! verified mark has passed it (read from their chunks), and its remaining
//! chunks when the group ends; the store holds the chunks not yet verified
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

use crate::diagnostics::analysis::Issued;
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
/// How long a host read waits for its verdict before it asks whether the
/// group is still live.
const LIVE_SLICE: Duration = Duration::from_millis(100);

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
        self.issued.collective_seq + self.len
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
    /// Signalled when the queue, the wanted mark, the verified mark or the
    /// verdict changes.
    changed: Condvar,
}

#[derive(Default)]
struct State {
    /// Pushed, not yet taken by the exchange thread.
    queued: Vec<Issued>,
    /// A host read waits until every collective below this is verified.
    wanted: u64,
    /// Every collective below this was issued alike by every rank.
    verified: u64,
    /// The ranks whose chunks the exchange waits for (for a waiter's
    /// error).
    lagging: Vec<usize>,
    /// Why the check stopped: a mismatch, or a store that failed.
    stopped: Option<Verdict>,
    /// The group failed: the exchange thread answers host reads only.
    failed: bool,
    /// The group ended: the exchange thread stops.
    closed: bool,
}

/// Why the check stopped, for every waiter.
#[derive(Clone, Debug)]
pub(crate) enum Verdict {
    /// The ranks did not issue collective `divergence.collective_seq` alike.
    Mismatch(Box<crate::diagnostics::analysis::Divergence>),
    /// The store failed: its error.
    StoreFailed(String),
}

impl Fingerprints {
    /// Rank `rank`'s check among `world_size` ranks.
    pub(crate) fn new(rank: usize, world_size: usize) -> Self {
        Self {
            rank,
            world_size,
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues the fingerprint of a collective NCCL accepted (its
    /// `collective_seq` the flight recorder's): no store access, no
    /// allocation once the queue has grown to the rate of collectives.
    pub(crate) fn push(&self, issued: Issued) {
        self.state().queued.push(issued);
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
    /// ranks whose chunks did not come) or when the store failed;
    /// [`Stop::Closed`] with `live`'s error.
    pub(crate) fn await_verdict<E>(
        &self,
        seq: u64,
        deadline: Instant,
        live: &dyn Fn() -> Result<(), E>,
    ) -> Result<(), Stop<E>> {
        let started = Instant::now();
        let mut state = self.state();
        if seq < state.verified {
            return Ok(());
        }
        if state.wanted <= seq {
            state.wanted = seq + 1;
            self.changed.notify_all();
        }
        loop {
            if seq < state.verified {
                return Ok(());
            }
            let incomplete = |absent: Vec<usize>, error: Option<String>| Stop::Incomplete {
                first: seq,
                last: seq,
                absent,
                waited: started.elapsed(),
                error,
            };
            match &state.stopped {
                Some(Verdict::Mismatch(divergence)) if divergence.collective_seq <= seq => {
                    return Err(Stop::Mismatch {
                        divergence: divergence.clone(),
                        first: divergence.collective_seq,
                        last: seq,
                    });
                }
                Some(Verdict::StoreFailed(error)) => {
                    return Err(incomplete(state.lagging.clone(), Some(error.clone())));
                }
                // A later collective diverged: this one is verified
                // before long, or the group ends.
                Some(Verdict::Mismatch(_)) | None => {}
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(incomplete(state.lagging.clone(), None));
            }
            drop(state);
            live().map_err(Stop::Closed)?;
            state = self.state();
            if seq < state.verified || state.stopped.is_some() {
                continue;
            }
            state = self
                .changed
                .wait_timeout(state, left.min(LIVE_SLICE))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// The group failed: from now on the exchange thread publishes and
    /// compares only when a host read waits for a verdict.
    pub(crate) fn group_failed(&self) {
        self.state().failed = true;
    }

    /// Stops the exchange thread (the group ended); waiters get their
    /// group's error through `live`.
    pub(crate) fn close(&self) {
        self.state().closed = true;
        self.changed.notify_all();
    }
}

#[cfg(test)]
mod tests;
