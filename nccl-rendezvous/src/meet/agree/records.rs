//! What an agreement keeps in the store: its keys, the arrivals (a log
//! of numbered entries), the decision, and a rank's view of the arrivals.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::error::{show_key, show_value};
use crate::{Result, Store, StoreError, parse_counter};

/// The keys of the agreement on generation `g`'s survivors, all under
/// `agree/{g}/`.
#[derive(Debug)]
pub(super) struct Keys {
    base: String,
    /// The arrival counter: how many log slots were claimed.
    pub(super) count: String,
    /// The decision, written once by compare-and-set.
    pub(super) decision: String,
}

impl Keys {
    pub(super) fn new(generation: u64) -> Self {
        let base = format!("agree/{generation}");
        Keys {
            count: format!("{base}/arrivals"),
            decision: format!("{base}/decision"),
            base,
        }
    }

    /// The key of log slot `seq` (from 1).
    pub(super) fn entry(&self, seq: u64) -> String {
        format!("{}/arrival/{seq}", self.base)
    }
}

/// One rank's arrival, as logged.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Arrival {
    pub(super) rank: usize,
    pub(super) suspects: Vec<usize>,
}

/// The decision, as committed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Decision {
    /// The generation that failed, g.
    pub(super) generation: u64,
    pub(super) world_size: usize,
    pub(super) min_survivors: usize,
    /// The rank whose proposal this is.
    pub(super) decided_by: usize,
    /// Ascending old ranks.
    pub(super) survivors: Vec<usize>,
    /// The ranks left out that arrived ranks suspected, with those ranks.
    pub(super) suspected: BTreeMap<usize, Vec<usize>>,
}

impl Decision {
    /// The decision in `bytes`, read from `key`, checked against the
    /// agreement on `generation` among `world_size` ranks.
    pub(super) fn decode(
        key: &str,
        bytes: &[u8],
        generation: u64,
        world_size: usize,
    ) -> Result<Self> {
        let decision: Decision = serde_json::from_slice(bytes)
            .map_err(|error| unreadable(key, bytes, &format!("a decision ({error})")))?;
        let in_world = |rank: &usize| *rank < decision.world_size;
        let well_formed = decision.generation == generation
            && !decision.survivors.is_empty()
            && decision.survivors.windows(2).all(|w| w[0] < w[1])
            && decision.survivors.iter().all(in_world)
            && decision
                .survivors
                .binary_search(&decision.decided_by)
                .is_ok()
            && decision.suspected.iter().all(|(rank, by)| {
                in_world(rank)
                    && decision.survivors.binary_search(rank).is_err()
                    && by.iter().all(in_world)
            });
        if !well_formed {
            return Err(unreadable(
                key,
                bytes,
                &format!(
                    "the decision on generation {generation}: ascending survivors below its \
                     world size, the decider among them"
                ),
            ));
        }
        if decision.world_size != world_size {
            return Err(StoreError::InvalidArgument {
                what: "world size",
                given: world_size.to_string(),
                expected: format!(
                    "{}, the world size of the committed agreement on generation {generation} \
                     (every rank must pass the same)",
                    decision.world_size
                ),
            });
        }
        Ok(decision)
    }
}

/// The most calls per rank an agreement's log takes (each call logs an
/// arrival; a rank calls again only after a store error): a longer log
/// was not written by agreements, and reading it could outlast any
/// deadline.
const MAX_CALLS_PER_RANK: u64 = 64;

/// What one rank has read of the arrivals so far.
#[derive(Debug)]
pub(super) struct View {
    world_size: usize,
    /// Each arrived rank, and whom it suspects (its first entry's).
    arrived: BTreeMap<usize, Vec<usize>>,
    /// The last log slot read or found unwritten.
    read_upto: u64,
    /// Slots claimed but unwritten when last read: a rank between its
    /// claim and its write, or one that died there.
    holes: BTreeSet<u64>,
}

impl View {
    pub(super) fn new(world_size: usize) -> Self {
        View {
            world_size,
            arrived: BTreeMap::new(),
            read_upto: 0,
            holes: BTreeSet::new(),
        }
    }

    /// Reads the arrivals logged since the last refresh, and the slots
    /// that were unwritten then.
    pub(super) fn refresh<S: Store + ?Sized>(&mut self, store: &S, keys: &Keys) -> Result<()> {
        let limit = u64::try_from(self.world_size)
            .unwrap_or(u64::MAX)
            .saturating_mul(MAX_CALLS_PER_RANK);
        let count = match store.try_get(&keys.count)? {
            None => 0,
            Some(bytes) => parse_counter(&bytes)
                .and_then(|count| u64::try_from(count).ok())
                .filter(|count| *count <= limit)
                .ok_or_else(|| {
                    let expected = format!("a count of arrivals of at most {limit}");
                    unreadable(&keys.count, &bytes, &expected)
                })?,
        };
        let unread: Vec<u64> = self
            .holes
            .iter()
            .copied()
            .chain(self.read_upto.saturating_add(1)..=count)
            .collect();
        for seq in unread {
            let key = keys.entry(seq);
            match store.try_get(&key)? {
                Some(bytes) => {
                    let arrival = self.decode_arrival(&key, &bytes)?;
                    self.arrived.entry(arrival.rank).or_insert(arrival.suspects);
                    self.holes.remove(&seq);
                }
                None => {
                    self.holes.insert(seq);
                }
            }
        }
        self.read_upto = self.read_upto.max(count);
        Ok(())
    }

    /// The key to wait for while the decision is not due: the log slot of
    /// the fewest more arrivals that could make it due (each arrival logs
    /// one slot at least), so that a rank wakes once, not at every
    /// arrival.
    ///
    /// An arrival whose suspicions make it due sooner, or one written to a slot
    /// claimed earlier, is seen at the end of the wait's slice.
    pub(super) fn wake_entry(&self, keys: &Keys, min_survivors: usize) -> String {
        let arrived = self.arrived.len();
        let unsuspected = self
            .world_size
            .saturating_sub(arrived + self.suspicions().len());
        let needed = unsuspected
            .max(min_survivors.saturating_sub(arrived))
            .max(1);
        let slot = self
            .read_upto
            .saturating_add(u64::try_from(needed).unwrap_or(u64::MAX));
        keys.entry(slot)
    }

    /// The ranks that have not arrived but that arrived ranks suspect,
    /// each with the ranks that suspect it.
    fn suspicions(&self) -> BTreeMap<usize, Vec<usize>> {
        let mut suspected: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (rank, suspects) in &self.arrived {
            for suspect in suspects {
                if !self.arrived.contains_key(suspect) {
                    suspected.entry(*suspect).or_default().push(*rank);
                }
            }
        }
        suspected
    }

    /// Whether the decision is due before the deadline: every rank that
    /// nobody suspects has arrived, and at least `min_survivors` have.
    pub(super) fn ready(&self, min_survivors: usize) -> bool {
        let arrived = self.arrived.len();
        arrived >= min_survivors && arrived + self.suspicions().len() == self.world_size
    }

    /// The decision this view makes, proposed by `rank`.
    pub(super) fn decide(&self, generation: u64, min_survivors: usize, rank: usize) -> Decision {
        Decision {
            generation,
            world_size: self.world_size,
            min_survivors,
            decided_by: rank,
            survivors: self.arrived.keys().copied().collect(),
            suspected: self.suspicions(),
        }
    }

    fn decode_arrival(&self, key: &str, bytes: &[u8]) -> Result<Arrival> {
        let expected = || format!("an arrival of a rank below {}", self.world_size);
        let arrival: Arrival = serde_json::from_slice(bytes)
            .map_err(|error| unreadable(key, bytes, &format!("{} ({error})", expected())))?;
        if arrival.rank >= self.world_size || arrival.suspects.iter().any(|s| *s >= self.world_size)
        {
            return Err(unreadable(key, bytes, &expected()));
        }
        Ok(arrival)
    }
}

/// The error for a record under `key` that is not what an agreement
/// writes there (`expected`).
pub(super) fn unreadable(key: &str, bytes: &[u8], expected: &str) -> StoreError {
    StoreError::InvalidArgument {
        what: "agreement record",
        given: format!("{} = {}", show_key(key), show_value(bytes)),
        expected: format!(
            "{expected}, as agree_survivors writes it; another program or version wrote this \
             key, or the ranks disagree on the world size"
        ),
    }
}
