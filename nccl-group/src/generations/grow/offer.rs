//! The grow's store protocol between the group and the processes that
//! join it, under the root store and the group's name (all a joining
//! process knows):
//!
//! * `{name}/grow/tickets`: a counter; each joining process takes the
//!   next ticket (1, 2, ...), its place in the queue.
//! * `{name}/grow/granted`: a counter; rank 0 of a grow by `k` reserves
//!   the next `k` tickets (`end - k + 1 ..= end`).
//! * `{name}/grow/offers`: a counter numbering the grows' offers (0, 1,
//!   ...), and `{name}/grow/offer/{i}` offer `i` itself: its tickets, the
//!   new generation, its store scope, the old and new world sizes and
//!   whether a communicator grows.
//!
//! A joining process reads the offers in order until one covers its
//! ticket: its rank is the old world size plus its place among the
//! offer's tickets.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::{GroupError, Result};
use crate::protocols::GROW;
use nccl_rendezvous::Store;
use nccl_rendezvous::meet::Scope;

/// One grow's offer to the joining processes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Offer {
    /// The first ticket it covers.
    pub(crate) first_ticket: i64,
    /// How many tickets (new ranks) it covers.
    pub(crate) count: usize,
    /// The generation the grow makes.
    pub(crate) generation: u64,
    /// Where the new generation's keys live under the root store.
    pub(crate) scope: String,
    /// The world size before the grow: the first new rank.
    pub(crate) old_world_size: usize,
    /// The world size after it.
    pub(crate) world_size: usize,
    /// Whether the group's communicator grows (else every communicator is
    /// made afresh when first used).
    ///
    /// Its unique id is not part of the offer: NCCL allows one unused id per
    /// communicator, so rank 0 makes it only once every process has come.
    pub(crate) grows: bool,
}

/// What rank 0 of a grow knows before it reserves the tickets.
pub(crate) struct Draft {
    pub(crate) count: usize,
    pub(crate) generation: u64,
    pub(crate) old_world_size: usize,
    pub(crate) grows: bool,
}

/// How long a joining process waits for an offer before it looks again
/// whether a later one was numbered (the one it waits for then never
/// comes).
const OFFER_SLICE: Duration = Duration::from_millis(500);

/// The keys of group `name`'s grow offers, below `<group>/grow`.
struct Keys {
    scope: Scope,
    offers: Scope,
}

impl Keys {
    fn of(name: &str) -> Result<Self> {
        let scope = Scope::path(name)?.purpose(GROW)?;
        Ok(Keys {
            offers: scope.clone().purpose("offer")?,
            scope,
        })
    }

    /// How many tickets (places) joining processes have taken.
    fn tickets(&self) -> String {
        self.scope.key("tickets")
    }

    /// How many tickets the offers so far cover.
    fn granted(&self) -> String {
        self.scope.key("granted")
    }

    /// How many offers rank 0 numbered.
    fn offers(&self) -> String {
        self.scope.key("offers")
    }

    /// Offer number `index`.
    fn offer(&self, index: u64) -> String {
        self.offers.key(index)
    }
}

impl Offer {
    /// Rank 0's part: reserves `draft.count` tickets, numbers the offer,
    /// and publishes it with the scope `scope_of` gives its number (each
    /// offer's generation meets under a scope of its own, so a grow that
    /// failed leaves nothing the next one reads).
    ///
    /// # Errors
    /// The store's.
    pub(crate) fn publish(
        root: &dyn Store,
        name: &str,
        draft: Draft,
        scope_of: impl FnOnce(u64) -> Scope,
    ) -> Result<Self> {
        let keys = Keys::of(name)?;
        let count = i64::try_from(draft.count).unwrap_or(i64::MAX);
        let end = root.add(&keys.granted(), count)?;
        let index = u64::try_from(root.add(&keys.offers(), 1)? - 1).unwrap_or_default();
        let offer = Offer {
            first_ticket: end - count + 1,
            count: draft.count,
            generation: draft.generation,
            scope: scope_of(index).to_string(),
            old_world_size: draft.old_world_size,
            world_size: draft.old_world_size + draft.count,
            grows: draft.grows,
        };
        root.set(&keys.offer(index), &offer.encode())?;
        crate::diagnostics::trace::event!(info, group = name, index, offer = ?offer, "grow offered");
        Ok(offer)
    }

    /// The offer as the store holds it (JSON).
    pub(crate) fn encode(&self) -> Vec<u8> {
        // Strings and integers only: serialising cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// An offer read back.
    ///
    /// # Errors
    /// [`GroupError::InvalidArgument`] for bytes that are not an offer.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Self> {
        serde_json::from_slice(bytes).map_err(|error| GroupError::InvalidArgument {
            argument: "grow offer",
            expected: "the JSON offer ProcessGroup::grow publishes".to_string(),
            given: format!("{} bytes that do not parse ({error})", bytes.len()),
        })
    }

    /// The rank ticket `ticket` gets, if this offer covers it.
    fn rank_of(&self, ticket: i64) -> Option<usize> {
        let place = usize::try_from(ticket.checked_sub(self.first_ticket)?).ok()?;
        (place < self.count).then(|| self.old_world_size + place)
    }
}

/// How many joining processes of group `name` no offer covers yet: the
/// tickets taken less the tickets granted.
///
/// # Errors
/// The store's.
pub(crate) fn pending(root: &dyn Store, name: &str) -> Result<usize> {
    let keys = Keys::of(name)?;
    let taken = root.add(&keys.tickets(), 0)?;
    let granted = root.add(&keys.granted(), 0)?;
    Ok(usize::try_from(taken.saturating_sub(granted)).unwrap_or(0))
}

/// A joining process's part: takes a ticket, then reads the offers in
/// order until one covers it; the offer and this process's rank in it.
///
/// # Errors
/// [`GroupError::NotOffered`] when no offer covered the ticket within
/// `timeout`; the store's error; an offer that does not parse.
pub(crate) fn await_place(
    root: &dyn Store,
    name: &str,
    store_address: &str,
    timeout: Duration,
) -> Result<(Offer, usize)> {
    let keys = Keys::of(name)?;
    let ticket = root.add(&keys.tickets(), 1)?;
    crate::diagnostics::trace::event!(
        info,
        group = name,
        ticket,
        "waiting for a grow to offer a place"
    );
    let started = Instant::now();
    let mut index = 0;
    loop {
        let left = timeout.saturating_sub(started.elapsed());
        // An offer numbered but never written (its rank 0 died between
        // the two) must not block the joiners of later grows: once a later
        // offer is numbered, the missing one never comes, and is skipped.
        if root.try_get(&keys.offer(index))?.is_none()
            && u64::try_from(root.add(&keys.offers(), 0)?).unwrap_or(0) > index + 1
        {
            index += 1;
            continue;
        }
        let bytes = match root.get(&keys.offer(index), left.min(OFFER_SLICE)) {
            Ok(bytes) => bytes,
            Err(error) if error.is_timeout() && !left.is_zero() => continue,
            Err(error) if error.is_timeout() => {
                return Err(GroupError::NotOffered {
                    name: name.to_string(),
                    ticket,
                    store: store_address.to_string(),
                    offers: index,
                    timeout,
                });
            }
            Err(other) => return Err(other.into()),
        };
        let offer = Offer::decode(&bytes)?;
        if let Some(rank) = offer.rank_of(ticket) {
            return Ok((offer, rank));
        }
        index += 1;
    }
}
