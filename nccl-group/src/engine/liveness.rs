//! The liveness beat ([`GroupOptions::liveness`](crate::GroupOptions::liveness)):
//! each rank of a root group beats in the store from a thread of the
//! group's own, a watching rank names a rank whose beat stands still for
//! the bound, and the same thread waits on the failure alarm between
//! beats, so that the alarm reaches a blocked rank at once (pushed, not
//! polled).
//!
//! Why: a stopped or wedged process (`SIGSTOP`, a debugger, a livelocked
//! host) tells nobody; its peers wait in their collectives until the
//! operation timeout (minutes), and a rank that NCCL told nothing learned
//! of another rank's failure only by reading the alarm after an operation
//! had been pending 1 s, then every 500 ms (`crate::engine::alarm`).
//!
//! How, per generation (keys below `<group>/<generation>/liveness`,
//! [`LIVENESS`](crate::protocols::LIVENESS)):
//!
//! - **Beat.** Every `every`, rank `r` writes its beat count (decimal) to
//!   `<r>`. The thread is the group's, never the issuing thread nor the
//!   GPU: a rank computing for seconds or waiting in a long kernel beats
//!   on. A failed group beats on (its process is alive, and a heal that
//!   follows must not count it lost) until it is healed, destroyed,
//!   aborted or dropped.
//! - **Watch.** Rank 0 reads every other rank's beat, each other rank
//!   reads rank 0's, once a beat, while the group is live: one watcher for
//!   the group, and one for the watcher (every rank watching every rank
//!   would cost `N²` reads a beat; rank 0 alone would leave its own hang
//!   unseen). A rank is watched from its first
//!   beat (the ranks join at different times) and named once the beat the
//!   watcher reads has not moved for `bound`, by the watcher's own clock
//!   (no clocks compared across hosts). A watcher whose own rounds came
//!   more than half the bound apart (it was descheduled, or the store was
//!   slow) restarts every clock instead of naming anyone, and a round the
//!   store fails is no observation: a slow watcher or store never names a
//!   live rank, at the price of naming a hung one later (and none at all
//!   while rank 0's round of reads takes more than half the bound: some
//!   5000 ranks at 100 µs a read; raise the bound there). A stopped rank
//!   is named between `bound` and `bound + 2 × every` after its last beat.
//! - **Naming.** The watcher fails its group with
//!   [`FailureCause::PeerUnresponsive`] (on a thread of its own: the beat
//!   goes on), which raises the failure alarm with the named rank in it;
//!   every rank that reads that alarm fails with the same cause, and its
//!   heal counts the rank lost without waiting for it.
//! - **Push.** Between beats, while the group is live, the thread waits
//!   on the alarm's key (`Store::wait` with the time to the next beat as
//!   its timeout: the TCP store holds the request at its server, the c10d
//!   store reads with a timeout and cancels the wait, the file store polls
//!   the file every 20 ms by default). A live group fails as soon as
//!   another rank's alarm is set, whatever it has pending; nothing is
//!   added to the issue path.
//! - **Leaving.** The thread ends within one beat of its group leaving
//!   (destroyed, healed, aborted, dropped: it holds the group only weakly,
//!   and nothing has to wake it). It then writes `left` as its beat (a
//!   watcher stops watching it: a rank that destroys before the others is
//!   not named) and counts itself in `closed`; the last of the world size
//!   to count deletes every beat and `closed`. A generation that lost a
//!   rank keeps its keys (world size of them), as the mismatch check's.
//!
//! A stopped process that hosts the TCP store stops the store too: every
//! rank's store calls then fail by the store's own I/O timeout
//! (`StoreError`), and no beat names it.
//!
//! Store load per beat interval: every rank one write, one read (rank 0:
//! one per other rank) and one wait; for a group of `N`, `N` writes,
//! `2 (N - 1)` reads and `N` waits held at the server. A group of one
//! process, a sub-group (its processes are its root group's) and
//! [`Liveness::Off`] run no thread.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use nccl_rendezvous::Store;
use nccl_rendezvous::meet::Scope;

use crate::engine::failing::Finish;
use crate::engine::group::{FAILED, Inner, LIVE};
use crate::error::{GroupError, Result};
use crate::failure::FailureCause;
use crate::options::Liveness;
use crate::protocols::LIVENESS;

/// The beat a rank writes when it leaves: no longer watched.
const LEFT: &[u8] = b"left";

impl Inner {
    /// Starts the liveness thread of this root group of more than one
    /// process, when [`GroupOptions::liveness`](crate::GroupOptions::liveness)
    /// is on.
    ///
    /// # Errors
    /// [`GroupError::LivenessStart`]: the thread could not be started.
    pub(crate) fn start_liveness(self: &Arc<Self>) -> Result<()> {
        let Liveness::Beat { every, bound } = self.options().liveness else {
            return Ok(());
        };
        let m = self.cache.membership();
        if m.world_size < 2 || self.lineage.is_some() {
            return Ok(());
        }
        let watched = match m.rank {
            0 => (1..m.world_size).collect(),
            _ => vec![0],
        };
        let beat = Beat {
            group: Arc::downgrade(self),
            state: Arc::clone(&self.state),
            store: Arc::clone(&m.store),
            scope: m.protocol(LIVENESS)?,
            alarm: crate::engine::alarm::key(m)?,
            rank: m.rank,
            world_size: m.world_size,
            every,
            count: 0,
            watch: Watch::new(bound, watched),
        };
        std::thread::Builder::new()
            .name("nccl-group-liveness".to_string())
            .spawn(move || beat.run())
            .map(drop)
            .map_err(|source| GroupError::LivenessStart { source })
    }
}

/// One rank's liveness thread.
struct Beat {
    /// The group, held only to fail it: a thread that held it every beat
    /// could be the one to drop it last, releasing NCCL and CUDA objects
    /// on a thread the process does not wait for at exit.
    group: Weak<Inner>,
    /// The group's state, read every beat.
    state: Arc<AtomicU8>,
    store: Arc<dyn Store>,
    scope: Scope,
    alarm: String,
    rank: usize,
    world_size: usize,
    every: Duration,
    /// This rank's beats so far.
    count: u64,
    watch: Watch,
}

impl Beat {
    fn run(mut self) {
        let mut next = Instant::now();
        while let Some(live) = self.group_state() {
            self.count += 1;
            let _ = self
                .store
                .set(&self.scope.key(self.rank), self.count.to_string().as_bytes());
            if live {
                self.watch_round();
            }
            let now = Instant::now();
            // A late beat is not followed by a burst of them.
            next = (next + self.every).max(now);
            let left = next.saturating_duration_since(now);
            if live {
                self.listen(left);
            }
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
        }
        self.leave();
    }

    /// `Some(live)` while the group is held and live or failed; `None`
    /// once it was dropped or left otherwise (the thread ends).
    fn group_state(&self) -> Option<bool> {
        if self.group.strong_count() == 0 {
            return None;
        }
        match self.state.load(Ordering::Acquire) {
            LIVE => Some(true),
            FAILED => Some(false),
            _ => None,
        }
    }

    /// Reads the watched ranks' beats once; fails the group on a rank
    /// whose beat stood still for the bound.
    fn watch_round(&mut self) {
        let read_at = Instant::now();
        let beats: std::result::Result<Vec<_>, _> = (self.watch.ranks.iter())
            .map(|&rank| self.store.try_get(&self.scope.key(rank)))
            .collect();
        // A store that fails tells nothing: no observation this round.
        let Ok(beats) = beats else {
            return;
        };
        let Some((rank, silent_for)) = self.watch.observe(read_at, &beats) else {
            return;
        };
        let Some(inner) = self.group.upgrade() else {
            return;
        };
        if Arc::strong_count(&inner) > 1 && inner.state.load(Ordering::Acquire) == LIVE {
            crate::diagnostics::trace::event!(error, group = %inner.cache.membership().name, rank, ?silent_for, "a rank's liveness beat stood still: failing the group");
            let cause = FailureCause::PeerUnresponsive {
                rank,
                silent_for,
                seen_by: self.rank,
            };
            inner.fail(cause, inner.tracker.oldest(), Finish::OwnThread);
        }
    }

    /// Waits at most `left` for another rank's alarm; fails the group on
    /// it.
    fn listen(&self, left: Duration) {
        if self.store.wait(&[self.alarm.as_str()], left).is_err() {
            // No alarm in time (or a store that fails: the polled alarm and
            // the operation timeout remain).
            return;
        }
        if let Some(inner) = self.group.upgrade() {
            inner.alarm_pushed();
        }
    }

    /// Marks this rank left; the last rank of the world size to leave
    /// deletes every beat.
    fn leave(&self) {
        if self.store.set(&self.scope.key(self.rank), LEFT).is_err() {
            return;
        }
        let closed = self.scope.key("closed");
        if self.store.add(&closed, 1).ok() != i64::try_from(self.world_size).ok() {
            return;
        }
        for rank in 0..self.world_size {
            let _ = self.store.delete(&self.scope.key(rank));
        }
        let _ = self.store.delete(&closed);
    }
}

/// The watching side: when each watched rank's beat last moved, by the
/// watcher's clock (the `now` each round is given).
pub(crate) struct Watch {
    bound: Duration,
    /// The ranks watched.
    ranks: Vec<usize>,
    /// Per watched rank: its last beat and when it was first read, once it
    /// beat (`None`: not yet, or it left).
    seen: Vec<Option<(Vec<u8>, Instant)>>,
    /// When the last round was read.
    last_round: Option<Instant>,
}

impl Watch {
    /// Watching `ranks`, naming one whose beat stands still for `bound`.
    pub(crate) fn new(bound: Duration, ranks: Vec<usize>) -> Self {
        let seen = vec![None; ranks.len()];
        Self {
            bound,
            ranks,
            seen,
            last_round: None,
        }
    }

    /// One round read at `now`: `beats[i]` is the beat of `ranks[i]`
    /// (`None`: not set). The first rank (in watched order) whose beat has
    /// not moved for the bound, and for how long.
    pub(crate) fn observe(
        &mut self,
        now: Instant,
        beats: &[Option<Vec<u8>>],
    ) -> Option<(usize, Duration)> {
        // A watcher that was late cannot tell a still beat from a missed
        // read: every clock starts again.
        let late = self
            .last_round
            .is_some_and(|last| now.saturating_duration_since(last) > self.bound / 2);
        self.last_round = Some(now);
        let mut named = None;
        for ((seen, beat), &rank) in self.seen.iter_mut().zip(beats).zip(&self.ranks) {
            let beat = match beat.as_deref() {
                None | Some(LEFT) => {
                    *seen = None;
                    continue;
                }
                Some(beat) => beat,
            };
            match seen {
                Some((last, moved)) if last.as_slice() == beat => {
                    if late {
                        *moved = now;
                    }
                    let silent_for = now.saturating_duration_since(*moved);
                    if silent_for >= self.bound && named.is_none() {
                        named = Some((rank, silent_for));
                    }
                }
                _ => *seen = Some((beat.to_vec(), now)),
            }
        }
        named
    }
}

#[cfg(test)]
mod tests;
