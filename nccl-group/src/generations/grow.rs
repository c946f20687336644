//! Growing a group with new processes ([`ProcessGroup::grow`] on the
//! group's ranks, [`GroupBuilder::join_grown`](crate::GroupBuilder::join_grown) on the new ones): the
//! world size goes back up after a heal, without a restart. Where NCCL
//! has `ncclCommGrow` (2.29.2) the group's communicator admits the new
//! ranks; otherwise every communicator is made afresh.

mod join;
pub(crate) mod offer;
pub(crate) mod options;

use std::sync::Arc;
use std::time::{Duration, Instant};

use nccl_core::{Capabilities, Capability, UniqueId};

use crate::engine::generation::{Record, Replacement};
use crate::engine::group::{Inner, ProcessGroup};
use crate::engine::key::{CommClass, CommKey};
use crate::engine::local_comms::LocalComms;
use crate::error::{GroupError, Result};
use crate::failure::FailureCause;
use crate::generations::succession::adopt_where_all_made;
use crate::lineage::GrowPath;
use crate::protocols::{GROW, GROWN};
use nccl_rendezvous::meet::Scope;
use nccl_rendezvous::meet::{MAX_RANKS, Meeting};
use nccl_rendezvous::{Store, StoreError};
use offer::{Draft, Offer};
pub(crate) use options::{GrowOptions, Grown};

/// A communicator of the cache with its store key and cache key.
type Keyed = (String, CommKey, Arc<LocalComms>);

/// How long [`ProcessGroup::grow`] looks again for the end of the
/// operations issued before it.
const QUIESCE_POLL: Duration = Duration::from_millis(1);

/// The reason of a re-creation when no rank has a communicator to grow.
const NOTHING_TO_GROW: &str = "no communicator to grow";

/// The reason of a re-creation when a new process cannot join a grow.
const NEW_CANNOT_GROW: &str = "a new process's NCCL has no ncclCommGrow (2.29.2 and later)";

/// What a rank proposes: `off` (it was asked not to grow), `none` (no
/// one-device collective communicator), or `grow:` its first one's store
/// key.
fn proposal(grow: bool, candidate: Option<&str>) -> String {
    match (grow, candidate) {
        (false, _) => "off".to_string(),
        (true, None) => "none".to_string(),
        (true, Some(key)) => format!("grow:{key}"),
    }
}

/// Why the ranks make every communicator afresh, read alike by every rank
/// from everyone's proposal; `None` when all propose the same
/// communicator to grow.
fn recreate_reason(proposals: &[Vec<u8>]) -> Option<String> {
    let proposals: Vec<String> = proposals
        .iter()
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    if proposals.iter().any(|p| p == "off") {
        return Some("GrowOptions::with_grow(false)".to_string());
    }
    if proposals.iter().any(|p| p == "none") {
        return Some(NOTHING_TO_GROW.to_string());
    }
    match proposals.split_first() {
        Some((first, rest)) if rest.iter().all(|p| p == first) => None,
        _ => Some(format!(
            "the ranks' communicators to grow differ: {proposals:?}"
        )),
    }
}

impl ProcessGroup {
    /// [`Recovery::grow`](crate::generations::recovery::Recovery::grow).
    pub(crate) fn grow_generation(&self, new_ranks: usize, options: &GrowOptions) -> Result<Grown> {
        let mut succession = self.lock_succession();
        if let Some(record) = succession.record.as_ref() {
            return grown_from(&self.inner, record, new_ranks);
        }
        // Counted before any refusal, so that every rank's n-th call meets
        // under the same attempt's keys even when one rank refused alone
        // (a graph alive there) and the others timed out.
        let attempt = succession.grow_attempts;
        succession.grow_attempts += 1;
        let m = self.inner.cache.membership();
        let world_size = grown_size(m.world_size, new_ranks)?;
        self.refuse_subgroup("process group to grow", "grow")?;
        self.check_live_to("process group to grow", "grow")?;
        self.refuse_live_graphs("grown")?;
        let created = self.inner.cache.keyed();
        let candidate = created
            .iter()
            .find(|(_, key, _)| key.class() == (CommClass::Collective { devices: 1 }))
            .filter(|_| options.grow);
        if candidate.is_some() {
            Capabilities::loaded()?.require(Capability::Grow)?;
        }
        self.quiesce(options.timeout)?;
        let (offer, plan) = self.offer(new_ranks, attempt, candidate, options)?;
        let membership = m.successor(
            offer.generation,
            (m.rank, offer.world_size),
            Scope::path(&offer.scope)?,
        )?;
        if offer.world_size != world_size {
            let error = GroupError::InvalidArgument {
                argument: "new_ranks",
                expected: format!("{} (what rank 0 grows the group by)", offer.count),
                given: new_ranks.to_string(),
            };
            // The others wait for this rank at the new generation's meeting.
            let place = (m.rank, offer.world_size);
            let _ = grow_meeting(&membership.store, place, options.timeout)?
                .fail(&error.to_string(), 1);
            return Err(error);
        }
        crate::diagnostics::trace::event!(info, group = %m.name, offer = ?offer, "growing");
        let place = (m.rank, world_size);
        let (next, everyone_can) = arrive(&membership.store, place, plan.is_ok(), options.timeout)?;
        let group = self.successor_group(membership)?;
        let path = match plan {
            Ok((_, key, comms)) if everyone_can => {
                let grown = grow_communicator(comms, &next, place, options.timeout)?;
                let grown = adopt_where_all_made(&group, &next, "grown", vec![(*key, grown)])?;
                GrowPath::Grown {
                    grown,
                    dropped: created.len() - grown,
                }
            }
            Ok(_) => GrowPath::Recreated {
                reason: NEW_CANNOT_GROW.to_string(),
            },
            Err(reason) => GrowPath::Recreated { reason },
        };
        let new = m.world_size..world_size;
        crate::diagnostics::trace::event!(info, group = %m.name, generation = offer.generation, path = ?path, "grown");
        self.inner
            .retire(&group.inner, FailureCause::Grown, || {
                format!(
                    "grew into generation {} as rank {} of {}: new ranks {new:?}, {path:?}",
                    offer.generation, m.rank, world_size
                )
            });
        succession.record = Some(Record {
            group: Arc::downgrade(&group.inner),
            handle: (self.op_timeout, self.stream_mode),
            generation: offer.generation,
            replacement: Replacement::Grown {
                new_ranks: new.clone(),
                path: path.clone(),
            },
        });
        Ok(Grown {
            group,
            new_ranks: new,
            path,
        })
    }

    /// Steps 2 and 3 among the current ranks, meeting under grow number
    /// `attempt` of this generation: the plan (the communicator every rank
    /// grows, or why none does) and rank 0's offer of `new_ranks` places.
    fn offer<'a>(
        &self,
        new_ranks: usize,
        attempt: u64,
        candidate: Option<&'a Keyed>,
        options: &GrowOptions,
    ) -> Result<(Offer, std::result::Result<&'a Keyed, String>)> {
        let m = self.inner.cache.membership();
        let meeting = m
            .protocol(GROW)?
            .index(attempt)
            .meeting(&m.store, m.rank, m.world_size)?
            .with_timeout(options.timeout);
        let mine = proposal(options.grow, candidate.map(|(name, _, _)| name.as_str()));
        let plan = match recreate_reason(&meeting.all_gather("proposal", mine.as_bytes())?) {
            Some(reason) => Err(reason),
            // Every rank proposed this rank's candidate.
            None => candidate.ok_or_else(|| NOTHING_TO_GROW.to_string()),
        };
        let offer = share_offer(&meeting, || {
            let draft = Draft {
                count: new_ranks,
                generation: m.generation + 1,
                old_world_size: m.world_size,
                grows: plan.is_ok(),
            };
            let grown = m.rooted(m.protocol(GROWN)?);
            Offer::publish(&*m.root, &m.name, draft, |index| grown.index(index))
        })?;
        Ok((offer, plan))
    }

    /// Step 1: waits until every operation issued on this generation has
    /// ended, at most `timeout`.
    fn quiesce(&self, timeout: Duration) -> Result<()> {
        let started = Instant::now();
        while !self.inner.tracker.is_empty() {
            self.check_live_to("process group to grow", "grow")?;
            self.inner.check_ended();
            if self.inner.tracker.is_empty() {
                break;
            }
            if started.elapsed() >= timeout {
                return Err(GroupError::Timeout {
                    operation: "waiting for the group's operations to end before its grow",
                    waited: started.elapsed(),
                });
            }
            std::thread::sleep(QUIESCE_POLL);
        }
        Ok(())
    }
}

/// Step 4 on a current rank, `place` (rank, world size) of the new
/// generation: rank 0 makes the grow's unique id and shares it (only now:
/// NCCL allows one unused id per communicator, and sends it to the
/// boundary ranks at once), then `ncclCommGrow` of `comms`, bounded by
/// `timeout`; `None` where it failed.
fn grow_communicator(
    comms: &LocalComms,
    meeting: &Meeting<Arc<dyn Store>>,
    place: (usize, usize),
    timeout: Duration,
) -> Result<Option<LocalComms>> {
    let (rank, world_size) = place;
    let id = share_grow_id(meeting, || comms.grow_unique_id())?;
    Ok(id.and_then(|id| {
        let root = (rank == 0).then_some(id);
        comms
            .grow(world_size, root, timeout)
            .inspect_err(|_error| {
                crate::diagnostics::trace::event!(warn, error = %_error, "ncclCommGrow failed");
            })
            .ok()
    }))
}

/// The [`Grown`] a finished grow by `new_ranks` recorded, for a later
/// caller; a heal's record, or a grow by another number, refuses, naming
/// the generation that replaced this one.
fn grown_from(old: &Inner, record: &Record, new_ranks: usize) -> Result<Grown> {
    match &record.replacement {
        Replacement::Grown {
            new_ranks: new,
            path,
        } if new.len() == new_ranks => Ok(Grown {
            group: record.handle_on(old)?,
            new_ranks: new.clone(),
            path: path.clone(),
        }),
        _ => Err(old.replaced(record.generation)),
    }
}

/// The world size after adding `new_ranks` to `world_size`.
fn grown_size(world_size: usize, new_ranks: usize) -> Result<usize> {
    match world_size.checked_add(new_ranks) {
        Some(grown) if new_ranks > 0 && grown <= MAX_RANKS => Ok(grown),
        _ => Err(GroupError::InvalidArgument {
            argument: "new_ranks",
            expected: format!(
                "1..={} (at least one new process, and at most {MAX_RANKS} ranks in all: NCCL's \
                 ranks are C ints; the world size is {world_size})",
                MAX_RANKS - world_size
            ),
            given: new_ranks.to_string(),
        }),
    }
}

/// Step 3 among the current ranks: rank 0 makes the offer with `make`
/// and shares it; a failure there is published, so the others stop
/// waiting at once.
fn share_offer(
    meeting: &Meeting<Arc<dyn Store>>,
    make: impl FnOnce() -> Result<Offer>,
) -> Result<Offer> {
    let bytes = meeting.share_from(0, "offer", || {
        make().map(|offer| offer.encode()).inspect_err(|error| {
            let _ = meeting.fail(&error.to_string(), 1);
        })
    })?;
    Offer::decode(&bytes)
}

/// The meeting of the new generation's ranks, old and new, under its
/// scope (`store`), as `place` (rank, world size).
fn grow_meeting(
    store: &Arc<dyn Store>,
    place: (usize, usize),
    timeout: Duration,
) -> Result<Meeting<Arc<dyn Store>>> {
    let (rank, world_size) = place;
    let meeting = Scope::root()
        .purpose(GROW)?
        .meeting(store, rank, world_size)?;
    Ok(meeting.with_timeout(timeout))
}

/// Every rank of the new generation, old and new, meets under its scope
/// (`store`) as `place` (rank, world size) before NCCL's grow, which
/// would otherwise wait for a process that never comes; each says whether
/// it can take part in a grow (`can_grow`).
///
/// A failure to meet is published for the others (a process that comes later
/// learns it), and so is one published first. The meeting, and whether every
/// rank can grow.
fn arrive(
    store: &Arc<dyn Store>,
    place: (usize, usize),
    can_grow: bool,
    timeout: Duration,
) -> Result<(Meeting<Arc<dyn Store>>, bool)> {
    let meeting = grow_meeting(store, place, timeout)?;
    let met = meeting
        .all_gather("arrived", &[u8::from(can_grow)])
        .and_then(|everyone| match meeting.failure()? {
            Some(failure) => Err(failure),
            None => Ok(everyone),
        });
    match met {
        Ok(everyone) => {
            let all = everyone.iter().all(|can| can.as_slice() == [1]);
            Ok((meeting, all))
        }
        Err(error) => {
            if !matches!(error, StoreError::PeerFailed { .. }) {
                let _ = meeting.fail(&error.to_string(), 1);
            }
            Err(error.into())
        }
    }
}

/// The grow's unique id, made by rank 0 with `make` and shared with every
/// rank of the new generation; `None` everywhere when rank 0 could not
/// make it.
fn share_grow_id(
    meeting: &Meeting<Arc<dyn Store>>,
    make: impl FnOnce() -> Result<UniqueId>,
) -> Result<Option<UniqueId>> {
    let bytes = meeting.share_from(0, "unique-id", || {
        Ok::<_, GroupError>(match make() {
            Ok(id) => id.as_bytes().to_vec(),
            Err(_error) => {
                crate::diagnostics::trace::event!(warn, error = %_error, "ncclCommGetUniqueId failed");
                Vec::new()
            }
        })
    })?;
    if bytes.is_empty() {
        return Ok(None);
    }
    Ok(Some(UniqueId::try_from_slice(&bytes)?))
}

#[cfg(test)]
mod tests;
