//! The commit vote ([`Recovery::agree`](crate::Recovery::agree)):
//! every rank says whether its step went well, and all learn whether
//! every rank's did (torchft's `should_commit`).
//!
//! Vote `v` of a generation meets in its own scope,
//! `<group>/<generation>/vote/<v>`, so votes never read each other's keys:
//!
//! * `<rank>`: each rank's ballot, `1` or `0`.
//! * `outcome`: the decision, set once (compare-and-set): the first rank
//!   that read every ballot stores the verdict, the first one whose wait
//!   ran out stores the ranks whose ballot had not come. Every rank
//!   returns what stands, so all return the same, a late rank too.
//! * `read`: how many ranks have read the outcome; the last of them
//!   deletes every key of the vote, so a week of steps leaves nothing in
//!   the store. (A vote a rank never came to stays until its generation's
//!   keys go: the group heals after it anyway.)

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::engine::group::ProcessGroup;
use crate::error::Result;
use crate::protocols::VOTE;
use nccl_rendezvous::meet::{Scope, WATCH_SLICE};
use nccl_rendezvous::{Store, StoreError};

/// The decision of one vote, as the store holds it (JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum Outcome {
    /// Every ballot came: whether all said yes.
    Decided(bool),
    /// The ranks whose ballot had not come when a rank's wait ran out,
    /// and how long it waited (milliseconds).
    Absent { missing: Vec<usize>, waited_ms: u64 },
}

/// The keys of one vote.
struct Ballots<'a> {
    store: &'a dyn Store,
    scope: Scope,
    world_size: usize,
}

impl ProcessGroup {
    /// [`Recovery::agree`](crate::Recovery::agree).
    pub(crate) fn vote(&self, ok: bool) -> Result<bool> {
        self.check_live_to("process group to vote in", "vote in")?;
        let m = self.inner.cache.membership();
        let round = self.inner.votes.fetch_add(1, Ordering::Relaxed);
        let ballots = Ballots {
            store: &*m.store,
            scope: m.protocol(VOTE)?.index(round),
            world_size: m.world_size,
        };
        ballots.store.set(&ballots.scope.key(m.rank), ballot(ok))?;
        let outcome = self.await_outcome(&ballots)?;
        ballots.read()?;
        match outcome {
            Outcome::Decided(verdict) => Ok(verdict),
            Outcome::Absent { missing, waited_ms } => Err(StoreError::Absent {
                meeting: format!("the commit vote {round} of generation {}", m.generation),
                missing,
                world_size: m.world_size,
                waited: Duration::from_millis(waited_ms),
            }
            .into()),
        }
    }

    /// Waits for every ballot, or for another rank's decision, at most the
    /// group's timeout; the outcome that stands.
    fn await_outcome(&self, ballots: &Ballots<'_>) -> Result<Outcome> {
        let keys: Vec<String> = (0..ballots.world_size)
            .map(|rank| ballots.scope.key(rank))
            .collect();
        let names: Vec<&str> = keys.iter().map(String::as_str).collect();
        let timeout = self.options().timeout;
        let started = Instant::now();
        loop {
            if let Some(standing) = ballots.outcome()? {
                return Ok(standing);
            }
            let left = timeout.saturating_sub(started.elapsed());
            match ballots.store.wait(&names, left.min(WATCH_SLICE)) {
                Ok(()) => {
                    let mut verdict = true;
                    for key in &keys {
                        verdict &= ballots.store.try_get(key)?.as_deref() == Some(ballot(true));
                    }
                    return ballots.decide(&Outcome::Decided(verdict));
                }
                Err(error) if error.is_timeout() && !left.is_zero() => self.check_live()?,
                Err(error) if error.is_timeout() => {
                    let mut missing = Vec::new();
                    for (rank, key) in keys.iter().enumerate() {
                        if ballots.store.try_get(key)?.is_none() {
                            missing.push(rank);
                        }
                    }
                    let waited_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                    return ballots.decide(&Outcome::Absent { missing, waited_ms });
                }
                Err(other) => return Err(other.into()),
            }
        }
    }
}

impl Ballots<'_> {
    /// The outcome stored, if a rank decided.
    fn outcome(&self) -> Result<Option<Outcome>> {
        self.store
            .try_get(&self.scope.key("outcome"))?
            .map(|bytes| decode(&bytes))
            .transpose()
    }

    /// Stores `outcome` unless another rank decided first; the one that
    /// stands.
    fn decide(&self, outcome: &Outcome) -> Result<Outcome> {
        // Two variants of integers and a list: serialising cannot fail.
        let bytes = serde_json::to_vec(outcome).unwrap_or_default();
        let stored = self
            .store
            .compare_set(&self.scope.key("outcome"), None, &bytes)?;
        match stored.current {
            Some(current) if !stored.swapped => decode(&current),
            _ => Ok(outcome.clone()),
        }
    }

    /// Counts this rank's read of the outcome; the last reader deletes
    /// the vote's keys.
    fn read(&self) -> Result<()> {
        let readers = self.store.add(&self.scope.key("read"), 1)?;
        if usize::try_from(readers).is_ok_and(|readers| readers >= self.world_size) {
            for rank in 0..self.world_size {
                self.store.delete(&self.scope.key(rank))?;
            }
            self.store.delete(&self.scope.key("outcome"))?;
            self.store.delete(&self.scope.key("read"))?;
        }
        Ok(())
    }
}

/// A rank's ballot as stored.
fn ballot(ok: bool) -> &'static [u8] {
    if ok { b"1" } else { b"0" }
}

/// An outcome read back.
fn decode(bytes: &[u8]) -> Result<Outcome> {
    serde_json::from_slice(bytes).map_err(|error| {
        crate::error::GroupError::InvalidArgument {
            argument: "commit vote outcome",
            expected: "the JSON outcome Recovery::agree stores".to_string(),
            given: format!("{} bytes that do not parse ({error})", bytes.len()),
        }
    })
}
