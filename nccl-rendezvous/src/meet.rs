//! What the ranks of a job do together over a store, besides NCCL's own
//! collectives: a barrier, a value one rank makes and every rank reads
//! (the NCCL unique id), a gather of every rank's value, a failure one
//! rank publishes for all, and leaving in an order that keeps the store's
//! host up until the others are done with it.
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
        if world_size == 0 || world_size > MAX_RANKS || rank >= world_size {
            return Err(StoreError::InvalidArgument {
                what: "meeting place",
                given: format!("rank {rank} of {world_size}"),
                expected: format!("a rank below a world size of 1 to {MAX_RANKS}"),
            });
        }
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
        let key = |rank: usize| format!("barrier/{count}/{rank}");
        self.store.set(&key(self.rank), b"")?;
        let keys: Vec<(usize, String)> = (0..self.world_size).map(|r| (r, key(r))).collect();
        self.wait_for(&format!("the barrier {}", show_key(name)), &keys, true)
    }

    /// The value rank `creator` made with `make`, under `name`: `creator`
    /// calls `make` (only it does) and publishes the bytes; every other
    /// rank waits for them. Every rank returns the same bytes.
    ///
    /// # Errors
    /// `make`'s error on `creator`; elsewhere [`StoreError::Absent`]
    /// naming `creator` when it did not publish in time,
    /// [`StoreError::PeerFailed`], or the store's error.
    pub fn share_from<E: From<StoreError>>(
        &self,
        creator: usize,
        name: &str,
        make: impl FnOnce() -> std::result::Result<Vec<u8>, E>,
    ) -> std::result::Result<Vec<u8>, E> {
        if creator >= self.world_size {
            return Err(StoreError::InvalidArgument {
                what: "creator rank",
                given: creator.to_string(),
                expected: format!("a rank below the world size {}", self.world_size),
            }
            .into());
        }
        let key = format!("share/{name}");
        if self.rank == creator {
            let value = make()?;
            self.store.set(&key, &value)?;
            return Ok(value);
        }
        self.wait_for(
            &format!("the share {}", show_key(name)),
            &[(creator, key.clone())],
            true,
        )?;
        Ok(self.store.get(&key, self.timeout)?)
    }

    /// Every rank's `value` under `name`, in rank order (this rank's
    /// own included).
    ///
    /// # Errors
    /// [`StoreError::Absent`] naming the ranks whose value did not come,
    /// [`StoreError::PeerFailed`], or the store's error.
    pub fn all_gather(&self, name: &str, value: &[u8]) -> Result<Vec<Vec<u8>>> {
        let key = |rank: usize| format!("gather/{name}/{rank}");
        self.store.set(&key(self.rank), value)?;
        let keys: Vec<(usize, String)> = (0..self.world_size).map(|r| (r, key(r))).collect();
        self.wait_for(&format!("the gather {}", show_key(name)), &keys, true)?;
        keys.iter()
            .map(|(_, key)| self.store.get(key, self.timeout))
            .collect()
    }

    /// Leaves the meeting so that `host` (the rank whose process hosts the
    /// store, rank 0 for a TCP store) leaves last: the other ranks say they
    /// leave and return; `host` waits until all of them have, so no rank
    /// loses the store in the middle of a step. A failure published before
    /// the host's wait ends is reported to the host, not lost.
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
        self.wait_for("the end (every rank leaving)", &keys, false)?;
        match self.failure()? {
            Some(failure) => Err(failure),
            None => Ok(()),
        }
    }

    /// Publishes this rank's failure (its error on one line, and the
    /// `code` it exits with) for every other rank, whose waits then end
    /// with [`StoreError::PeerFailed`]. The first failure stands: returns
    /// the one published earlier by another rank, if any (the likely
    /// cause), else `None`.
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

    /// Waits until every key of `keys` (rank, key) is set: at most the
    /// meeting's timeout, in slices between which (`watch`) it looks for a
    /// published failure.
    fn wait_for(&self, meeting: &str, keys: &[(usize, String)], watch: bool) -> Result<()> {
        let names: Vec<&str> = keys.iter().map(|(_, key)| key.as_str()).collect();
        let deadline = Deadline::after(self.timeout);
        loop {
            let Some(left) = deadline.remaining() else {
                let mut missing = Vec::new();
                for (rank, key) in keys {
                    if self.store.try_get(key)?.is_none() {
                        missing.push(*rank);
                    }
                }
                if missing.is_empty() {
                    return Ok(());
                }
                return Err(StoreError::Absent {
                    meeting: meeting.to_owned(),
                    missing,
                    world_size: self.world_size,
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
mod tests {
    use std::sync::Arc;
    use std::thread;

    use super::*;
    use crate::InProcessStore;

    fn meetings(world: usize, timeout: Duration) -> Vec<Meeting<Arc<InProcessStore>>> {
        let store = Arc::new(InProcessStore::with_timeout(timeout));
        (0..world)
            .map(|rank| Meeting::new(Arc::clone(&store), rank, world).unwrap())
            .collect()
    }

    #[test]
    fn a_place_outside_the_world_is_refused() {
        let store = InProcessStore::new();
        for (rank, world) in [(0, 0), (3, 3), (0, MAX_RANKS + 1)] {
            let error = Meeting::new(&store, rank, world).unwrap_err();
            assert!(
                error.to_string().starts_with(&format!(
                    "invalid meeting place rank {rank} of {world}: expected a rank below"
                )),
                "{error}"
            );
        }
        let meeting = Meeting::new(&store, 0, 2).unwrap();
        let error = meeting
            .share_from(2, "id", || Ok::<_, StoreError>(Vec::new()))
            .unwrap_err();
        assert!(error.to_string().contains("creator rank 2"), "{error}");
    }

    #[test]
    fn ranks_meet_share_gather_and_leave() {
        let meetings = meetings(4, Duration::from_secs(30));
        let made = AtomicU64::new(0);
        let results: Vec<_> = thread::scope(|scope| {
            let handles: Vec<_> = meetings
                .iter()
                .map(|meeting| {
                    let made = &made;
                    scope.spawn(move || {
                        let id = meeting
                            .share_from(1, "id", || {
                                made.fetch_add(1, Ordering::Relaxed);
                                Ok::<_, StoreError>(b"id-of-1".to_vec())
                            })
                            .unwrap();
                        for _ in 0..3 {
                            meeting.barrier("step").unwrap();
                        }
                        let views = meeting.all_gather("view", &[meeting.rank() as u8]).unwrap();
                        meeting.leave(0).unwrap();
                        (id, views)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(made.load(Ordering::Relaxed), 1, "only the creator makes");
        for (id, views) in results {
            assert_eq!(id, b"id-of-1");
            assert_eq!(views, vec![vec![0], vec![1], vec![2], vec![3]]);
        }
    }

    #[test]
    fn a_missing_rank_is_named_when_the_wait_ends() {
        let meetings = meetings(3, Duration::from_millis(50));
        let error = meetings[0].barrier("start").unwrap_err();
        assert!(error.is_timeout(), "{error}");
        assert!(
            error
                .to_string()
                .starts_with("ranks 1, 2 of 3 did not reach the barrier \"start\" within"),
            "{error}"
        );
        let error = meetings[2]
            .share_from(0, "id", || Ok::<_, StoreError>(Vec::new()))
            .unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("rank 0 of 3 did not reach the share \"id\" within"),
            "{error}"
        );
        meetings[1].leave(0).unwrap();
        let error = meetings[0].leave(0).unwrap_err();
        assert!(
            matches!(&error, StoreError::Absent { missing, .. } if missing == &[2]),
            "{error}"
        );
    }

    #[test]
    fn a_published_failure_ends_every_wait_and_the_first_stands() {
        let meetings = meetings(2, Duration::from_secs(300));
        thread::scope(|scope| {
            let waiter = scope.spawn(|| meetings[0].barrier("never complete").unwrap_err());
            assert!(meetings[1].fail("-r 7 is not a rank", 2).unwrap().is_none());
            let error = waiter.join().unwrap();
            assert_eq!(error.to_string(), "rank 1 failed: -r 7 is not a rank");
            assert!(matches!(
                error,
                StoreError::PeerFailed {
                    rank: 1,
                    code: 2,
                    ..
                }
            ));
            assert_eq!(error.kind(), crate::ErrorKind::PeerFailed);
        });
        let earlier = meetings[0].fail("then I failed", 1).unwrap().unwrap();
        assert_eq!(earlier.to_string(), "rank 1 failed: -r 7 is not a rank");
        assert!(meetings[1].failure().unwrap().is_none(), "its own failure");
        // The failed rank still leaves, so the host learns of it at the end.
        meetings[1].leave(0).unwrap();
        let error = meetings[0].leave(0).unwrap_err();
        assert!(
            matches!(error, StoreError::PeerFailed { rank: 1, .. }),
            "{error}"
        );
    }

    #[test]
    fn scoped_meetings_do_not_meet() {
        let store = Arc::new(InProcessStore::with_timeout(Duration::from_millis(50)));
        let a = Meeting::new(Arc::clone(&store), 0, 2)
            .unwrap()
            .scoped("a")
            .unwrap();
        let b = Meeting::new(Arc::clone(&store), 1, 2)
            .unwrap()
            .scoped("b")
            .unwrap();
        assert!(a.barrier("x").unwrap_err().is_timeout());
        assert!(b.barrier("x").unwrap_err().is_timeout());
        assert!(store.try_get("a/barrier/0/0").unwrap().is_some());
        assert!(Meeting::new(&*store, 0, 1).unwrap().scoped("a/b").is_err());
    }
}
