//! The survivors' agreement on who is lost: after a failure, the ranks
//! of generation g that are still alive decide through the store which
//! of them go on as generation g + 1, and every one of them gets the same
//! answer.
//!
//! Each surviving rank calls [`agree_survivors`] with the generation that
//! failed, its rank and the world size in it, the ranks it suspects (none
//! is fine: NCCL's asynchronous error does not say which peer failed),
//! and [`AgreeOptions`]: a timeout, and the fewest survivors the group
//! can go on with. It returns the [`Agreement`] on generation g + 1: the
//! survivors' old ranks in order, the dense new rank of each, and who was
//! left out and why.
//!
//! # The rule
//!
//! - **Who votes.** The ranks that come. Each logs its arrival, with its
//!   suspects, under the generation's keys. A dead rank cannot vote, and
//!   no one waits for it past the deadline.
//! - **Who survives.** Exactly the ranks whose arrival the decision saw:
//!   arriving counts as alive. A rank that every other rank suspects but
//!   that arrives before the decision is kept. A suspicion is one rank's
//!   local evidence (a closed socket, an operation that timed out), which
//!   that rank's own fault can produce; a rank that reaches the store and
//!   takes part is alive as far as anyone can tell. Were a peer's word
//!   enough, one rank with a bad link could expel healthy ranks, and two
//!   ranks that suspect each other would expel both. If a kept rank's link
//!   is broken after all, the next step fails, and the next agreement
//!   (g + 1 to g + 2) leaves it out.
//! - **What a suspicion does.** It ends the wait for that rank: the
//!   decision is due as soon as every rank that no arrived rank suspects
//!   has arrived and at least `min_survivors` have. Suspected ranks that
//!   have not arrived by then are left out
//!   ([`ExclusionReason::Suspected`]). With fewer than `min_survivors`
//!   arrived, the ranks keep waiting for the suspected ones, until the
//!   deadline.
//! - **When.** Otherwise at the deadline: at the latest when the timeout
//!   of the first rank to arrive runs out (each rank counts from its own
//!   call). That rank decides with the arrivals it sees then; the ranks
//!   nobody suspected that had not come are left out
//!   ([`ExclusionReason::NotArrived`]). Give every rank the same timeout,
//!   longer than the spread of the times at which the ranks notice the
//!   failure.
//! - **One decision, final.** Whichever rank finds the decision due writes
//!   its proposal with a compare-and-set on a key that starts absent. The
//!   first write wins and is never rewritten; every rank returns what that
//!   key holds, its own proposal or another's. So two survivors cannot
//!   return different member sets, and there is no designated decider to
//!   lose: a rank that dies before its write leaves the decision to the
//!   others (their readiness or their deadline); one that dies after it
//!   has decided for everyone. A rank that dies after arriving is in the
//!   decision, and so is one that stops after arriving; the next step
//!   fails or times out with it, and the next agreement leaves it out.
//! - **Too few.** A decision with fewer than `min_survivors` survivors is
//!   committed like any other, and every rank that reads it, survivors and
//!   late ranks alike, gets [`StoreError::TooFewSurvivors`]: generation
//!   g + 1 is not formed.
//! - **A late rank** (one that was stopped, slow, or suspected and arrived
//!   after the decision) reads the committed decision, writes nothing, and
//!   gets [`StoreError::Excluded`]: excluded from generation g + 1, and
//!   why. It cannot join or disturb the survivors: the decision is never
//!   rewritten. A rank whose arrival lands between another's last read of
//!   the arrivals and its commit is left out the same way.
//! - **Deadline and store.** Every wait is bounded by the timeout; past
//!   it, a rank reads the arrivals once more and commits, each a store
//!   call bounded by the store's own timeouts. A store error ends the call
//!   with that error as soon as the store's client gives up (a dead TCP
//!   store: [`ErrorKind::Store`], after the client's connect timeout at
//!   most). A rank that gets one does not know the decision and must not
//!   go on into g + 1; calling again with the same arguments once the
//!   store answers returns the decision (each call logs one more arrival;
//!   a log longer than 64 per rank is refused as not an agreement's).
//! - **Keys.** Everything lives under `agree/{g}/` in the store given
//!   (scope it to the group with a [`PrefixStore`]), so successive
//!   agreements (g, g + 1, g + 2) never collide. The keys stay, so that a
//!   rank that comes late still reads the decision: a counter, one entry
//!   per arrival, and the decision.
//! - **Same arguments.** Every rank passes the same generation, world size
//!   and `min_survivors`; a rank whose world size or minimum differs from
//!   the committed decision's gets [`StoreError::InvalidArgument`].
//!
//! Waits look at the store in slices of [`WATCH_SLICE`]; a rank also
//! wakes as soon as as many more ranks have arrived as could make the
//! decision due. Published failures ([`Meeting::fail`]) do not end an
//! agreement's waits: the agreement is what comes after one.
//!
//! ```
//! use std::sync::Arc;
//! use std::thread;
//! use std::time::Duration;
//! use nccl_rendezvous::InProcessStore;
//! use nccl_rendezvous::meet::agree::{AgreeOptions, agree_survivors};
//!
//! // Generation 0 had 4 ranks; rank 2 died, and the others say so.
//! let store = Arc::new(InProcessStore::new());
//! let options = AgreeOptions::new(Duration::from_secs(60)).with_min_survivors(2);
//! let survivors: Vec<_> = [0, 1, 3]
//!     .map(|rank| {
//!         let (store, options) = (Arc::clone(&store), options.clone());
//!         thread::spawn(move || agree_survivors(&store, 0, rank, 4, &[2], &options))
//!     })
//!     .into_iter()
//!     .map(|rank| rank.join().unwrap())
//!     .collect::<Result<_, _>>()?;
//! for agreement in &survivors {
//!     assert_eq!(agreement.generation(), 1);
//!     assert_eq!(agreement.survivors(), [0, 1, 3]);
//!     assert_eq!(agreement.new_rank_of(3), Some(2));
//! }
//! // Rank 2 was only stopped; continued, it learns it is out.
//! let late = agree_survivors(&store, 0, 2, 4, &[], &options).unwrap_err();
//! assert!(matches!(late, nccl_rendezvous::StoreError::Excluded { rank: 2, generation: 1, .. }));
//! # Ok::<(), nccl_rendezvous::StoreError>(())
//! ```
//!
//! [`ErrorKind::Store`]: crate::ErrorKind::Store
//! [`PrefixStore`]: crate::PrefixStore
//! [`Meeting::fail`]: super::Meeting::fail

mod outcome;
pub(crate) mod reason;
mod records;

use std::collections::BTreeSet;
use std::time::Duration;

pub use outcome::{Agreement, Exclusion};
pub use reason::ExclusionReason;

use super::{WATCH_SLICE, check_place};
use crate::{Deadline, Result, Store, StoreError};
use records::{Arrival, Decision, Keys, View, unreadable};

/// How an agreement runs: its timeout, and the fewest survivors the group
/// can go on with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgreeOptions {
    timeout: Duration,
    min_survivors: usize,
}

impl AgreeOptions {
    /// An agreement whose waits end `timeout` after the call, and that
    /// takes any number of survivors (at least the caller).
    pub fn new(timeout: Duration) -> Self {
        AgreeOptions {
            timeout,
            min_survivors: 1,
        }
    }

    /// The fewest survivors the group can go on with (1 to the world size;
    /// default 1): with fewer, every rank gets
    /// [`StoreError::TooFewSurvivors`].
    pub fn with_min_survivors(mut self, min_survivors: usize) -> Self {
        self.min_survivors = min_survivors;
        self
    }

    /// The bound on the agreement's waits.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The fewest survivors the group can go on with.
    pub fn min_survivors(&self) -> usize {
        self.min_survivors
    }
}

/// Agrees, as rank `rank` of the `world_size` ranks of generation
/// `generation`, on who survives into generation `generation + 1`; see
/// [the rule](self).
///
/// `suspects` are the ranks this rank believes lost (none is fine).
///
/// # Errors
/// - [`StoreError::Excluded`]: the decision left this rank out (it came
///   after the decision). It must not take part in generation g + 1.
/// - [`StoreError::TooFewSurvivors`]: fewer than `min_survivors` came;
///   generation g + 1 is not formed.
/// - [`StoreError::InvalidArgument`] for a rank outside a world of 1 to
///   [`MAX_RANKS`](super::MAX_RANKS), a suspect outside the world, twice,
///   or this rank itself, a `min_survivors` outside 1 to the world size,
///   `generation` `u64::MAX` (no next one), arguments that differ from
///   the committed decision's, or a record in the store that an agreement
///   did not write.
/// - The store's error: the decision is then unknown to this rank.
pub fn agree_survivors<S: Store + ?Sized>(
    store: &S,
    generation: u64,
    rank: usize,
    world_size: usize,
    suspects: &[usize],
    options: &AgreeOptions,
) -> Result<Agreement> {
    check_arguments(generation, rank, world_size, suspects, options)?;
    let keys = Keys::new(generation);
    let deadline = Deadline::after(options.timeout);
    let min = options.min_survivors;
    if let Some(decision) = committed(store, &keys, generation, world_size)? {
        return adopt(decision, rank, min);
    }
    arrive(store, &keys, rank, suspects)?;
    let mut view = View::new(world_size);
    loop {
        if let Some(decision) = committed(store, &keys, generation, world_size)? {
            return adopt(decision, rank, min);
        }
        view.refresh(store, &keys)?;
        let left = deadline.remaining();
        if left.is_none() || view.ready(min) {
            let proposal = view.decide(generation, min, rank);
            return adopt(commit(store, &keys, proposal, world_size)?, rank, min);
        }
        let slice = left.map_or(Duration::ZERO, |left| left.min(WATCH_SLICE));
        match store.wait(&[&view.wake_entry(&keys, min)], slice) {
            Ok(()) => {}
            Err(error) if error.is_timeout() => {}
            Err(error) => return Err(error),
        }
    }
}

/// Refuses arguments no agreement can take, naming what was given.
fn check_arguments(
    generation: u64,
    rank: usize,
    world_size: usize,
    suspects: &[usize],
    options: &AgreeOptions,
) -> Result<()> {
    check_place("agreement place", rank, world_size)?;
    if generation == u64::MAX {
        return Err(StoreError::InvalidArgument {
            what: "generation",
            given: generation.to_string(),
            expected: format!("below {} (generation + 1 must exist)", u64::MAX),
        });
    }
    let mut seen = BTreeSet::new();
    for &suspect in suspects {
        let wrong = if suspect >= world_size {
            Some(format!("ranks below the world size {world_size}"))
        } else if suspect == rank {
            Some(format!("ranks other than this rank ({rank})"))
        } else if !seen.insert(suspect) {
            Some("each rank once".to_owned())
        } else {
            None
        };
        if let Some(expected) = wrong {
            return Err(StoreError::InvalidArgument {
                what: "suspects",
                given: format!("{} (rank {suspect})", show_ranks(suspects)),
                expected,
            });
        }
    }
    if options.min_survivors == 0 || options.min_survivors > world_size {
        return Err(StoreError::InvalidArgument {
            what: "min_survivors",
            given: options.min_survivors.to_string(),
            expected: format!("1 to the world size {world_size}"),
        });
    }
    Ok(())
}

/// `ranks` as `[1, 2]`, the first 16 only.
fn show_ranks(ranks: &[usize]) -> String {
    const SHOWN: usize = 16;
    match ranks.len() {
        0..=SHOWN => format!("{ranks:?}"),
        n => format!("{:?} and {} more", &ranks[..SHOWN], n - SHOWN),
    }
}

/// The committed decision, if there is one.
fn committed<S: Store + ?Sized>(
    store: &S,
    keys: &Keys,
    generation: u64,
    world_size: usize,
) -> Result<Option<Decision>> {
    store
        .try_get(&keys.decision)?
        .map(|bytes| Decision::decode(&keys.decision, &bytes, generation, world_size))
        .transpose()
}

/// Logs this rank's arrival: claims a slot, then writes it.
fn arrive<S: Store + ?Sized>(
    store: &S,
    keys: &Keys,
    rank: usize,
    suspects: &[usize],
) -> Result<()> {
    let slot = store.add(&keys.count, 1)?;
    let seq = u64::try_from(slot).map_err(|_| {
        unreadable(
            &keys.count,
            slot.to_string().as_bytes(),
            "a count of arrivals",
        )
    })?;
    let arrival = Arrival {
        rank,
        suspects: suspects.to_vec(),
    };
    let bytes = serde_json::to_vec(&arrival).map_err(|error| StoreError::InvalidArgument {
        what: "suspects",
        given: show_ranks(suspects),
        expected: format!("ranks that serialise ({error})"),
    })?;
    store.set(&keys.entry(seq), &bytes)
}

/// Commits `proposal` unless a decision is committed already, and returns
/// the one that stands.
fn commit<S: Store + ?Sized>(
    store: &S,
    keys: &Keys,
    proposal: Decision,
    world_size: usize,
) -> Result<Decision> {
    let bytes = serde_json::to_vec(&proposal).map_err(|error| StoreError::InvalidArgument {
        what: "agreement decision",
        given: format!("{proposal:?}"),
        expected: format!("a decision that serialises ({error})"),
    })?;
    let outcome = store.compare_set(&keys.decision, None, &bytes)?;
    if outcome.swapped {
        return Ok(proposal);
    }
    match outcome.current {
        Some(current) => {
            Decision::decode(&keys.decision, &current, proposal.generation, world_size)
        }
        None => Err(unreadable(
            &keys.decision,
            &[],
            "a decision, which compare_set found absent yet did not write: the store broke its \
             contract",
        )),
    }
}

/// What the committed `decision` means for `rank`, which asked for at
/// least `min_survivors`.
fn adopt(decision: Decision, rank: usize, min_survivors: usize) -> Result<Agreement> {
    let next = decision.generation + 1;
    if decision.min_survivors != min_survivors {
        return Err(StoreError::InvalidArgument {
            what: "min_survivors",
            given: min_survivors.to_string(),
            expected: format!(
                "{}, the minimum of the committed agreement on generation {} (every rank must \
                 pass the same)",
                decision.min_survivors, decision.generation
            ),
        });
    }
    if decision.survivors.len() < decision.min_survivors {
        return Err(StoreError::TooFewSurvivors {
            generation: next,
            survivors: decision.survivors,
            min_survivors: decision.min_survivors,
            world_size: decision.world_size,
        });
    }
    let Ok(new_rank) = decision.survivors.binary_search(&rank) else {
        return Err(StoreError::Excluded {
            rank,
            generation: next,
            reason: outcome::reason(&decision.suspected, rank),
            survivors: decision.survivors,
        });
    };
    Ok(Agreement {
        generation: next,
        previous_world_size: decision.world_size,
        previous_rank: rank,
        rank: new_rank,
        survivors: decision.survivors,
        suspected: decision.suspected,
        decided_by: decision.decided_by,
    })
}

#[cfg(test)]
mod tests;
