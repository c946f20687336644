//! The collective check ([`GroupOptions::collective_checks`]): a
//! fingerprint of each collective, compared across the ranks through the
//! rendezvous store before the collective is enqueued, so that ranks that
//! do not issue the same collectives get an error instead of a hang or
//! mixed data.
//!
//! The fingerprint is what [`Issued`] holds: the operation, the data
//! type, the element count, the root and the reduction, numbered as the
//! flight recorder numbers collectives. With a check every `K`
//! collectives, collectives `wK .. (w+1)K - 1` are window `w`: the first
//! `K - 1` are enqueued as they come, and before the last is enqueued
//! every rank publishes the window's fingerprints under
//! `<group>/<generation>/checks/<w>/<rank>` and reads every other rank's,
//! waiting at most the operation's timeout. [`first_divergence`] compares
//! them. Each rank deletes its key of window `w - 1` once it has read
//! window `w` (every rank has read window `w - 1` by then), so the store
//! holds at most two windows per rank.
//!
//! [`GroupOptions::collective_checks`]: crate::GroupOptions::collective_checks

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::diagnostics::analysis::{Divergence, Issued, first_divergence};
use nccl_rendezvous::Store;
use nccl_rendezvous::meet::Scope;

/// The most collectives one check may cover
/// ([`GroupOptions::collective_checks`](crate::GroupOptions::collective_checks)):
/// each rank publishes the fingerprints of a window at once, about 100
/// bytes each.
pub const MAX_CHECK_INTERVAL: u32 = 1024;

/// How long one wait for the other ranks' fingerprints lasts before the
/// check looks whether the group is still live.
const WAIT_SLICE: Duration = Duration::from_millis(100);

/// Why a check stopped a collective.
#[derive(Debug)]
pub(crate) enum Stop<E> {
    /// The ranks did not issue the same collectives.
    Mismatch {
        divergence: Box<Divergence>,
        first: u64,
        last: u64,
    },
    /// The fingerprints of `absent` did not come by the deadline, or the
    /// store failed (`error`).
    Incomplete {
        first: u64,
        last: u64,
        absent: Vec<usize>,
        waited: Duration,
        error: Option<String>,
    },
    /// The group stopped while the check waited: its error.
    Closed(E),
}

/// One rank's collective check.
pub(crate) struct Checker {
    every: u64,
    /// `<group>/<generation>/checks`.
    scope: Scope,
    rank: usize,
    world_size: usize,
    store: Arc<dyn Store>,
    window: Mutex<Window>,
}

#[derive(Default)]
struct Window {
    /// The number of the next collective.
    next: u64,
    /// The current window's fingerprints, oldest first.
    ///
    /// A window whose exchange passed stays here until the next collective
    /// begins the next window, so that a last collective withdrawn after its
    /// check can be checked again.
    issued: Vec<Issued>,
}

/// A collective that passed its check, or awaits its window's: dropped
/// without [`Checked::keep`], it is withdrawn (it was not issued after
/// all: a local argument check refused it), so the next collective takes
/// its number and, if it closed a window, checks that window again.
pub(crate) struct Checked<'a> {
    checker: &'a Checker,
    seq: u64,
    kept: bool,
}

impl Checked<'_> {
    /// The collective was issued (the flight recorder numbered it).
    pub(crate) fn keep(mut self) {
        self.kept = true;
    }
}

impl Drop for Checked<'_> {
    fn drop(&mut self) {
        if !self.kept {
            self.checker.withdraw(self.seq);
        }
    }
}

impl Checker {
    /// Rank `rank` of `world_size`, checking every `every` collectives
    /// (at least 1) under the store keys `scope/<window>/<rank>`.
    pub(crate) fn new(
        every: u32,
        scope: Scope,
        rank: usize,
        world_size: usize,
        store: Arc<dyn Store>,
    ) -> Self {
        Self {
            every: u64::from(every.max(1)),
            scope,
            rank,
            world_size,
            store,
            window: Mutex::new(Window::default()),
        }
    }

    fn window(&self) -> MutexGuard<'_, Window> {
        self.window.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Fingerprints `issued`, the next collective (its `collective_seq`
    /// is set here); if it closes a window, first compares the window with
    /// every other rank's, waiting for them until `deadline` and asking
    /// `live` between waits whether to go on.
    ///
    /// Threads of one rank check one at a time.
    pub(crate) fn check<E>(
        &self,
        mut issued: Issued,
        deadline: Instant,
        live: &dyn Fn() -> Result<(), E>,
    ) -> Result<Checked<'_>, Stop<E>> {
        let mut window = self.window();
        let seq = window.next;
        if seq.is_multiple_of(self.every) {
            window.issued.clear();
        }
        issued.collective_seq = seq;
        window.issued.push(issued);
        window.next += 1;
        if (seq + 1).is_multiple_of(self.every) {
            self.exchange(seq / self.every, &window.issued, deadline, live)?;
        }
        Ok(Checked {
            checker: self,
            seq,
            kept: false,
        })
    }

    /// Forgets collective `seq` if it is the last one fingerprinted.
    fn withdraw(&self, seq: u64) {
        let mut window = self.window();
        if window.next == seq + 1 {
            window.next = seq;
            window.issued.pop();
        }
    }

    /// Publishes window `index` (`mine`), reads every other rank's and
    /// compares them.
    fn exchange<E>(
        &self,
        index: u64,
        mine: &[Issued],
        deadline: Instant,
        live: &dyn Fn() -> Result<(), E>,
    ) -> Result<(), Stop<E>> {
        let started = Instant::now();
        let first = mine.first().map_or(0, |issued| issued.collective_seq);
        let last = mine.last().map_or(0, |issued| issued.collective_seq);
        let key = |window: u64, rank: usize| self.scope.clone().index(window).key(rank);
        let incomplete = |absent: Vec<usize>, error: Option<String>| Stop::Incomplete {
            first,
            last,
            absent,
            waited: started.elapsed(),
            error,
        };
        let published = serde_json::to_vec(mine)
            .map_err(|error| error.to_string())
            .and_then(|value| {
                self.store
                    .set(&key(index, self.rank), &value)
                    .map_err(|error| error.to_string())
            });
        if let Err(error) = published {
            return Err(incomplete(Vec::new(), Some(error)));
        }
        let others: Vec<(usize, String)> = (0..self.world_size)
            .filter(|&rank| rank != self.rank)
            .map(|rank| (rank, key(index, rank)))
            .collect();
        let names: Vec<&str> = others.iter().map(|(_, key)| key.as_str()).collect();
        let mut error = None;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match self.store.wait(&names, left.min(WAIT_SLICE)) {
                Ok(()) => break,
                Err(timeout) if timeout.is_timeout() => live().map_err(Stop::Closed)?,
                Err(failed) => {
                    error = Some(failed.to_string());
                    break;
                }
            }
        }
        let mut by_rank = BTreeMap::from([(self.rank, mine.to_vec())]);
        let mut absent = Vec::new();
        for (rank, key) in &others {
            let theirs = match self.store.try_get(key) {
                Ok(Some(bytes)) => serde_json::from_slice::<Vec<Issued>>(&bytes)
                    .map_err(|e| format!("rank {rank}'s fingerprints did not parse: {e}")),
                Ok(None) => {
                    absent.push(*rank);
                    continue;
                }
                Err(failed) => Err(failed.to_string()),
            };
            match theirs {
                Ok(theirs) => {
                    by_rank.insert(*rank, theirs);
                }
                Err(failed) => {
                    absent.push(*rank);
                    error.get_or_insert(failed);
                }
            }
        }
        if index > 0 {
            // Every rank has read it: each published this window after it.
            let _ = self.store.delete(&key(index - 1, self.rank));
        }
        if let Some(divergence) = first_divergence(&by_rank) {
            return Err(Stop::Mismatch {
                divergence: Box::new(divergence),
                first,
                last,
            });
        }
        match absent.is_empty() {
            true => Ok(()),
            false => Err(incomplete(absent, error)),
        }
    }
}

#[cfg(test)]
mod tests;
