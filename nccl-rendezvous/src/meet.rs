//! What the ranks of a job do together over a store, besides NCCL's own
//! collectives: a barrier, a value one rank makes and every rank reads
//! (the NCCL unique id), a gather of every rank's value (to every rank,
//! or to one), arrivals that name the ranks that never came to a step
//! waited for elsewhere (NCCL's init), barriers of other participants
//! (several threads per rank), a failure one rank publishes for all, and
//! leaving in an order that keeps the store's host up until the others
//! are done with it; and, after a failure, the survivors' agreement on
//! who is lost ([`agree`]).
//!
//! Every wait is bounded by the meeting's timeout and, when it runs out,
//! fails with [`StoreError::Absent`] naming the ranks that did not come. A
//! wait also stops, with [`StoreError::PeerFailed`], as soon as another
//! rank publishes its failure ([`Meeting::fail`]): it waits in slices of
//! [`WATCH_SLICE`] and looks between them. So one rank's failure ends every
//! other rank's wait within a slice, whatever they were waiting for.
//!
//! ```
//! use std::sync::Arc;
//! use std::thread;
//! use nccl_rendezvous::{InProcessStore, meet::Meeting};
//!
//! let store = Arc::new(InProcessStore::new());
//! let ranks: Vec<_> = (0..3)
//!     .map(|rank| {
//!         let store = Arc::clone(&store);
//!         thread::spawn(move || {
//!             let meeting = Meeting::new(store, rank, 3)?.scoped("job-1")?;
//!             // Rank 0 makes the id once; every rank reads the same bytes.
//!             let id = meeting.share_from(0, "id", || Ok(b"unique-id".to_vec()))?;
//!             meeting.barrier("start")?;
//!             let views = meeting.all_gather("view", format!("{rank}").as_bytes())?;
//!             meeting.leave(0)?;
//!             Ok::<_, nccl_rendezvous::StoreError>((id, views))
//!         })
//!     })
//!     .collect();
//! for rank in ranks {
//!     let (id, views) = rank.join().unwrap()?;
//!     assert_eq!(id, b"unique-id");
//!     assert_eq!(views, [b"0".to_vec(), b"1".to_vec(), b"2".to_vec()]);
//! }
//! # Ok::<(), nccl_rendezvous::StoreError>(())
//! ```

pub mod agree;
mod scope;

pub use scope::Scope;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::show_key;
use crate::{Deadline, PrefixStore, Result, Store, StoreError};

/// How long one wait on the store lasts before a meeting looks for a
/// published failure.
pub const WATCH_SLICE: Duration = Duration::from_millis(200);

/// The most ranks a meeting takes: NCCL's ranks are C `int`s.
pub const MAX_RANKS: usize = i32::MAX as usize;

/// A failure as published for the other ranks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Published {
    rank: usize,
    message: String,
    code: i32,
}

/// One rank's place in a meeting of `world_size` ranks over a store.
///
/// A `Meeting` is cheap; make one per job (scoped with
/// [`Meeting::scoped`] when several share a store) and use its steps in
/// the same order on every rank. Each barrier, share and gather is named
/// by the caller; a name used twice on purpose (a barrier in a loop) is
/// numbered by the meeting, so the n-th barrier of every rank meets the
/// n-th of the others.
#[derive(Debug)]
pub struct Meeting<S> {
    store: S,
    rank: usize,
    world_size: usize,
    timeout: Duration,
    barriers: AtomicU64,
}

impl<S: Store> Meeting<S> {
    /// Rank `rank` of `world_size` over `store`; waits last at most the
    /// store's default timeout ([`Meeting::with_timeout`] to change it).
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] unless `rank < world_size <=`
    /// [`MAX_RANKS`].
    pub fn new(store: S, rank: usize, world_size: usize) -> Result<Self> {
        check_place("meeting place", rank, world_size)?;
        let timeout = store.default_timeout();
        Ok(Meeting {
            store,
            rank,
            world_size,
            timeout,
            barriers: AtomicU64::new(0),
        })
    }

    /// This meeting with every key under `scope/` (a job's namespace, a
    /// group's name).
    ///
    /// # Errors
    /// As [`PrefixStore::new`]: an empty scope or one with `/`.
    pub fn scoped(self, scope: &str) -> Result<Meeting<PrefixStore<S>>> {
        Ok(Meeting {
            store: PrefixStore::new(self.store, scope)?,
            rank: self.rank,
            world_size: self.world_size,
            timeout: self.timeout,
            barriers: self.barriers,
        })
    }

    /// This meeting with every wait bounded by `timeout`.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks.
    pub fn world_size(&self) -> usize {
        self.world_size
    }

    /// The bound on every wait.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The store the meeting's keys live in.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// Returns once every rank has come to the barrier `name` (the n-th
    /// call of every rank meets the n-th of the others, whatever names
    /// they pass).
    ///
    /// # Errors
    /// [`StoreError::Absent`] naming the ranks that did not come,
    /// [`StoreError::PeerFailed`] when one published its failure, or the
    /// store's error.
    pub fn barrier(&self, name: &str) -> Result<()> {
        let count = self.barriers.fetch_add(1, Ordering::Relaxed);
        self.barrier_of(
            &format!("barrier/{count}"),
            name,
            self.rank,
            self.world_size,
        )
    }

    /// The barrier under the key `base`, as `member` of `members`.
    fn barrier_of(&self, base: &str, name: &str, member: usize, members: usize) -> Result<()> {
        let key = |member: usize| format!("{base}/{member}");
        self.store.set(&key(member), b"")?;
        let keys: Vec<(usize, String)> = (0..members).map(|m| (m, key(m))).collect();
        let meeting = format!("the barrier {}", show_key(name));
        self.wait_for(&meeting, &keys, members, true)
    }

    /// The value rank `creator` made with `make`, under `name`: `creator`
    /// calls `make` (only it does) and publishes the bytes; every other
    /// rank waits for them.
    ///
    /// Every rank returns the same bytes.
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] for a `creator` outside the world;
    /// `make`'s error on `creator`; elsewhere [`StoreError::Absent`]
    /// naming `creator` when it did not publish in time,
    /// [`StoreError::PeerFailed`], or the store's error.
    pub fn share_from<E: From<StoreError>>(
        &self,
        creator: usize,
        name: &str,
        make: impl FnOnce() -> std::result::Result<Vec<u8>, E>,
    ) -> std::result::Result<Vec<u8>, E> {
        self.check_rank("creator rank", creator)?;
        let key = format!("share/{name}");
        if self.rank == creator {
            let value = make()?;
            self.store.set(&key, &value)?;
            return Ok(value);
        }
        let meeting = format!("the share {}", show_key(name));
        self.wait_for(&meeting, &[(creator, key.clone())], self.world_size, true)?;
        Ok(self.store.get(&key, self.timeout)?)
    }

    /// Every rank's `value` under `name`, in rank order (this rank's
    /// own included).
    ///
    /// # Errors
    /// [`StoreError::Absent`] naming the ranks whose value did not come,
    /// [`StoreError::PeerFailed`], or the store's error.
    pub fn all_gather(&self, name: &str, value: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.gather_at(name, value, true)
    }

    /// Every rank's `value` under `name`, for `root` alone: each rank
    /// publishes its value and goes on; `root` waits for them all and
    /// returns them in rank order (its own included); the others return
    /// `None`.
    ///
    /// For values only one rank reads (rows of results), this saves the other
    /// ranks the reads and the wait of [`all_gather`].
    ///
    /// [`all_gather`]: Meeting::all_gather
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] for a `root` outside the world; on
    /// `root`, [`StoreError::Absent`] naming the ranks whose value did not
    /// come or [`StoreError::PeerFailed`]; anywhere, the store's error.
    pub fn gather(&self, root: usize, name: &str, value: &[u8]) -> Result<Option<Vec<Vec<u8>>>> {
        self.check_rank("root rank", root)?;
        self.gather_at(name, value, self.rank == root)
            .map(|values| (self.rank == root).then_some(values))
    }

    /// Publishes this rank's `value` under `name`, and (`collect`) waits
    /// for every rank's and returns them in rank order.
    fn gather_at(&self, name: &str, value: &[u8], collect: bool) -> Result<Vec<Vec<u8>>> {
        let key = |rank: usize| format!("gather/{name}/{rank}");
        self.store.set(&key(self.rank), value)?;
        if !collect {
            return Ok(Vec::new());
        }
        let keys: Vec<(usize, String)> = (0..self.world_size).map(|r| (r, key(r))).collect();
        let meeting = format!("the gather {}", show_key(name));
        self.wait_for(&meeting, &keys, self.world_size, true)?;
        keys.iter()
            .map(|(_, key)| self.store.get(key, self.timeout))
            .collect()
    }

    /// Says this rank has come to `name`, without waiting for the others:
    /// for a step that waits for every rank by other means (NCCL's
    /// communicator creation), after which [`Meeting::absent`] names the
    /// ranks that never came.
    ///
    /// # Errors
    /// The store's error.
    pub fn arrive(&self, name: &str) -> Result<()> {
        self.store.set(&arrival(name, self.rank), b"")
    }

    /// The ranks that have not [arrived](Meeting::arrive) at `name` yet,
    /// in order (none: every rank came).
    ///
    /// Waits for nothing.
    ///
    /// # Errors
    /// The store's error.
    pub fn absent(&self, name: &str) -> Result<Vec<usize>> {
        let keys: Vec<(usize, String)> = (0..self.world_size)
            .map(|rank| (rank, arrival(name, rank)))
            .collect();
        self.missing(&keys)
    }

    /// This rank's place as `member` of `members` participants of the set
    /// `set`, who hold barriers of their own: several per rank (one per
    /// GPU a rank drives, each a thread), or a subset of the ranks.
    ///
    /// Their waits end, as every wait here, when another rank publishes its
    /// failure.
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] unless `member < members <=`
    /// [`MAX_RANKS`] and `set` is a non-empty name without `/`.
    pub fn participant(
        &self,
        set: &str,
        member: usize,
        members: usize,
    ) -> Result<Participant<'_, S>> {
        check_place("participant place", member, members)?;
        if set.is_empty() || set.contains('/') {
            return Err(StoreError::InvalidArgument {
                what: "participant set",
                given: show_key(set),
                expected: "a non-empty name without '/'".into(),
            });
        }
        Ok(Participant {
            meeting: self,
            base: format!("participants/{set}"),
            member,
            members,
            barriers: AtomicU64::new(0),
        })
    }

    /// Leaves the meeting so that `host` (the rank whose process hosts the
    /// store, rank 0 for a TCP store) leaves last: the other ranks say they
    /// leave and return; `host` waits until all of them have, so no rank
    /// loses the store in the middle of a step.
    ///
    /// A failure published before the host's wait ends is reported to the host,
    /// not lost.
    ///
    /// # Errors
    /// On `host`: [`StoreError::Absent`] naming the ranks that did not
    /// leave in time, [`StoreError::PeerFailed`] for a published failure;
    /// anywhere, the store's error.
    pub fn leave(&self, host: usize) -> Result<()> {
        let key = |rank: usize| format!("left/{rank}");
        if self.rank != host {
            return self.store.set(&key(self.rank), b"");
        }
        let keys: Vec<(usize, String)> = (0..self.world_size)
            .filter(|&rank| rank != host)
            .map(|rank| (rank, key(rank)))
            .collect();
        self.wait_for(
            "the end (every rank leaving)",
            &keys,
            self.world_size,
            false,
        )?;
        match self.failure()? {
            Some(failure) => Err(failure),
            None => Ok(()),
        }
    }

    /// Publishes this rank's failure (its error on one line, and the
    /// `code` it exits with) for every other rank, whose waits then end
    /// with [`StoreError::PeerFailed`].
    ///
    /// The first failure stands: returns the one published earlier by another
    /// rank, if any (the likely cause), else `None`.
    ///
    /// # Errors
    /// The store's error.
    pub fn fail(&self, message: &str, code: i32) -> Result<Option<StoreError>> {
        let failure = Published {
            rank: self.rank,
            message: message.to_owned(),
            code,
        };
        let bytes = serde_json::to_vec(&failure).map_err(|error| StoreError::InvalidArgument {
            what: "failure message",
            given: show_key(message),
            expected: format!("a message that serialises ({error})"),
        })?;
        let outcome = self.store.compare_set(FAILED, None, &bytes)?;
        Ok(match outcome.current {
            Some(current) if !outcome.swapped => {
                let standing = decode_failure(&current);
                (standing.rank != self.rank).then(|| peer_failed(standing))
            }
            _ => None,
        })
    }

    /// The failure another rank published, if any (`None` for none, or
    /// for this rank's own).
    ///
    /// # Errors
    /// The store's error.
    pub fn failure(&self) -> Result<Option<StoreError>> {
        Ok(self
            .store
            .try_get(FAILED)?
            .map(|bytes| decode_failure(&bytes))
            .filter(|failure| failure.rank != self.rank)
            .map(peer_failed))
    }

    /// Refuses a rank (`what`) outside the world.
    fn check_rank(&self, what: &'static str, rank: usize) -> Result<()> {
        if rank < self.world_size {
            return Ok(());
        }
        Err(StoreError::InvalidArgument {
            what,
            given: rank.to_string(),
            expected: format!("a rank below the world size {}", self.world_size),
        })
    }

    /// The ranks of `keys` (rank, key) whose key is not set, in order.
    fn missing(&self, keys: &[(usize, String)]) -> Result<Vec<usize>> {
        let mut missing = Vec::new();
        for (rank, key) in keys {
            if self.store.try_get(key)?.is_none() {
                missing.push(*rank);
            }
        }
        Ok(missing)
    }

    /// Waits until every key of `keys` (rank, key) of a meeting of
    /// `world_size` is set: at most the meeting's timeout, in slices
    /// between which (`watch`) it looks for a published failure.
    fn wait_for(
        &self,
        meeting: &str,
        keys: &[(usize, String)],
        world_size: usize,
        watch: bool,
    ) -> Result<()> {
        let names: Vec<&str> = keys.iter().map(|(_, key)| key.as_str()).collect();
        let deadline = Deadline::after(self.timeout);
        loop {
            let Some(left) = deadline.remaining() else {
                let missing = self.missing(keys)?;
                if missing.is_empty() {
                    return Ok(());
                }
                return Err(StoreError::Absent {
                    meeting: meeting.to_owned(),
                    missing,
                    world_size,
                    waited: deadline.elapsed(),
                });
            };
            let slice = if watch { left.min(WATCH_SLICE) } else { left };
            match self.store.wait(&names, slice) {
                Ok(()) => return Ok(()),
                Err(error) if error.is_timeout() => {}
                Err(error) => return Err(error),
            }
            if watch && let Some(failure) = self.failure()? {
                return Err(failure);
            }
        }
    }
}

/// One of a set of participants of a [`Meeting`] that hold barriers of
/// their own ([`Meeting::participant`]).
#[derive(Debug)]
pub struct Participant<'a, S> {
    meeting: &'a Meeting<S>,
    base: String,
    member: usize,
    members: usize,
    barriers: AtomicU64,
}

impl<S: Store> Participant<'_, S> {
    /// Returns once every participant of the set has come to the barrier
    /// `name` (numbered per participant, as [`Meeting::barrier`]).
    ///
    /// # Errors
    /// [`StoreError::Absent`] naming the participants (by number) that
    /// did not come, [`StoreError::PeerFailed`] when another rank of the
    /// meeting published its failure, or the store's error.
    pub fn barrier(&self, name: &str) -> Result<()> {
        let count = self.barriers.fetch_add(1, Ordering::Relaxed);
        let base = format!("{}/barrier/{count}", self.base);
        self.meeting
            .barrier_of(&base, name, self.member, self.members)
    }
}

/// Refuses a place (`what`) other than a rank below a world of 1 to
/// [`MAX_RANKS`].
fn check_place(what: &'static str, rank: usize, world_size: usize) -> Result<()> {
    if world_size == 0 || world_size > MAX_RANKS || rank >= world_size {
        return Err(StoreError::InvalidArgument {
            what,
            given: format!("rank {rank} of {world_size}"),
            expected: format!("a rank below a world size of 1 to {MAX_RANKS}"),
        });
    }
    Ok(())
}

/// The key of `rank`'s arrival at `name`.
fn arrival(name: &str, rank: usize) -> String {
    format!("arrived/{name}/{rank}")
}

/// The key a failure is published under.
const FAILED: &str = "failed";

/// The failure in `bytes`, or one that says it could not be read.
fn decode_failure(bytes: &[u8]) -> Published {
    serde_json::from_slice(bytes).unwrap_or_else(|error| Published {
        rank: usize::MAX,
        message: format!("its failure record cannot be read ({error})"),
        code: 1,
    })
}

fn peer_failed(failure: Published) -> StoreError {
    StoreError::PeerFailed {
        rank: failure.rank,
        message: failure.message,
        code: failure.code,
    }
}

#[cfg(test)]
mod tests;
