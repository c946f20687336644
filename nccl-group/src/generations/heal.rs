//! Healing a failed group in place ([`ProcessGroup::heal`]): the
//! survivors agree on who is lost, shrink the communicators the failure
//! revoked (or make fresh ones), and go on as the next generation.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use nccl_core::{Capabilities, Capability};

use crate::engine::failing::{EXCHANGE_WAIT, Finish};
use crate::engine::generation::{Record, Replacement};
use crate::engine::group::{DESTROYED, Inner, LIVE, ProcessGroup};
use crate::engine::key::{CommClass, CommKey};
use crate::engine::local_comms::LocalComms;
use crate::error::{GroupError, Result};
use crate::diagnostics::recorder::records::PeerProgress;
use crate::failure::FailureCause;
use crate::generations::succession::adopt_where_all_made;
use crate::lineage::HealPath;
use crate::protocols::{CARRY, HEALED};
use nccl_rendezvous::meet::agree::{AgreeOptions, Agreement, agree_survivors};

pub(crate) mod options;

pub(crate) use options::{HealOptions, Healed};

impl ProcessGroup {
    /// [`Recovery::heal`](crate::generations::recovery::Recovery::heal).
    pub(crate) fn heal_generation(&self, options: &HealOptions) -> Result<Healed> {
        let started = Instant::now();
        crate::diagnostics::nvtx::range!(self.name(), "heal");
        let mut succession = self.lock_succession();
        if let Some(record) = succession.record.as_ref() {
            return healed_from(&self.inner, record);
        }
        self.refuse_subgroup("process group to heal", "heal")?;
        self.refuse_live_graphs("healed")?;
        let m = self.inner.cache.membership();
        check_options(options, m.rank, m.world_size)?;
        if self.options().on_failure == crate::failure::FailurePolicy::AbortProcess {
            return Err(GroupError::InvalidArgument {
                argument: "failure policy",
                expected: "FailurePolicy::ReturnErrors to heal (a heal fails the live group \
                           first, which would abort the process)"
                    .to_string(),
                given: "FailurePolicy::AbortProcess".to_string(),
            });
        }
        let peers = self.stop_for_heal(options)?;
        // This rank may leave on an error (an excluded one must): the
        // releases end first, as a process must not exit while NCCL tears
        // a communicator down.
        let leaving = |error| {
            let _ = self.await_failure_abort();
            error
        };
        let suspects = suspects(&peers, options, self.unresponsive(), m.rank, m.world_size);
        let agree_store = (m.generation_scope())
            .and_then(|scope| Ok(scope.store(&m.store)?))
            .map_err(leaving)?;
        let agreement = agree_survivors(
            &*agree_store,
            m.generation,
            m.rank,
            m.world_size,
            &suspects,
            &AgreeOptions::new(options.timeout).with_min_survivors(options.min_survivors),
        )
        .map_err(|error| leaving(GroupError::from(error)))?;
        crate::diagnostics::trace::event!(info, group = %m.name, survivors = ?agreement.survivors(), "survivors agreed");
        let group = self.next_generation(&agreement).map_err(leaving)?;
        // Best effort once the decision is committed: a survivor that died
        // after it must not leave generation g impossible to heal (a retry
        // reads the same decision). Without a carry, everything is made
        // afresh and generation g + 1 fails on the dead member, for the
        // next heal to leave it out.
        let path = self
            .carry_communicators(&group, &agreement, options)
            .unwrap_or_else(|error| HealPath::Recreated {
                reason: format!("carrying the communicators over failed ({error})"),
            });
        crate::diagnostics::trace::event!(info, group = %m.name, generation = agreement.generation(), path = ?path, "healed");
        self.inner.recorder.metrics().healed(&path, started.elapsed());
        self.inner
            .retire(&group.inner, FailureCause::Healing, || {
                format!(
                    "healed into generation {} as rank {} of {}: survivors {:?}, lost {:?}, {path:?}",
                    agreement.generation(),
                    agreement.rank(),
                    agreement.world_size(),
                    agreement.survivors(),
                    agreement.excluded().map(|e| e.rank).collect::<Vec<_>>(),
                )
            });
        succession.record = Some(Record {
            group: Arc::downgrade(&group.inner),
            handle: (self.op_timeout, self.stream_mode),
            generation: agreement.generation(),
            replacement: Replacement::Healed {
                agreement: agreement.clone(),
                path: path.clone(),
            },
        });
        Ok(Healed {
            group,
            agreement,
            path,
        })
    }

    /// Step 1: the group failed (failing it now if it is live), and every
    /// release of its communicators begun: the ranks' progress, if the
    /// failure's exchange got it.
    ///
    /// The releases' slow part (an abort's teardown) ends on the failure's
    /// threads while the survivors agree and make the next generation;
    /// a revoke is waited for whole, for the shrink.
    fn stop_for_heal(&self, options: &HealOptions) -> Result<Vec<PeerProgress>> {
        // Told who is lost (by the caller, or by the liveness beat that
        // failed the group), the heal needs only the releases, not the
        // failure's exchange with the other ranks, which waits for a hung
        // rank's report until EXCHANGE_WAIT.
        let told = !options.suspects.is_empty() || self.unresponsive().is_some();
        match self.inner.state.load(Ordering::Acquire) {
            LIVE => self.inner.fail(
                FailureCause::Healing,
                self.inner.tracker.oldest(),
                Finish::OwnThread,
            ),
            DESTROYED => self.check_live()?,
            _ => {}
        }
        let Some(failure) = self.inner.failure.get() else {
            return Ok(Vec::new());
        };
        // The failure's thread publishes its report and asks RAS (where no
        // thread can be spawned for it, waiting for the whole answer)
        // before the releases begin: the bound covers both.
        let bound = (self.options().abort_timeout)
            .saturating_add(crate::diagnostics::ras::RasLimits::default().bound())
            .saturating_add(EXCHANGE_WAIT)
            .saturating_add(Duration::from_secs(1));
        // The next generation must not issue on the streams while this
        // one's kernels still run, nor shrink a communicator whose revoke
        // may still run.
        if !failure.wait_quiet(bound) {
            return Err(GroupError::AbortStalled {
                name: self.name().to_string(),
                waited: bound,
            });
        }
        // The aborts' flags are set, not yet seen by every kernel: the
        // group's streams wait for them on the GPU, not the heal on the host.
        for comms in self.inner.cache.all() {
            comms.order_pools_after_streams();
        }
        if told {
            return Ok(failure.peers().to_vec());
        }
        Ok(failure.wait_peers(bound).to_vec())
    }

    /// The rank the liveness beat named unresponsive, when that failed the
    /// group (here, or on the rank whose alarm told this one).
    fn unresponsive(&self) -> Option<usize> {
        (self.inner.failure.get()).and_then(|failure| failure.cause.unresponsive_rank())
    }

    /// The group of the agreed generation, with no communicator yet, its
    /// keys under this generation's scope (so no other instance of the
    /// name can meet them).
    fn next_generation(&self, agreement: &Agreement) -> Result<ProcessGroup> {
        let m = self.inner.cache.membership();
        let scope = m.rooted(m.protocol(HEALED)?);
        let membership = m.successor(
            agreement.generation(),
            (agreement.rank(), agreement.world_size()),
            scope,
        )?;
        self.successor_group(membership)
    }

    /// Step 3: shrinks into `group` what every survivor can shrink.
    fn carry_communicators(
        &self,
        group: &ProcessGroup,
        agreement: &Agreement,
        options: &HealOptions,
    ) -> Result<HealPath> {
        let m = self.inner.cache.membership();
        let lost: Vec<usize> = (0..m.world_size)
            .filter(|&old| agreement.new_rank_of(old).is_none())
            .collect();
        let created = self.inner.cache.keyed();
        let recreated = |reason: String| Ok(HealPath::Recreated { reason });
        if lost.is_empty() {
            return recreated("no rank was lost (ncclCommShrink needs one to leave out)".into());
        }
        if !options.shrink {
            return recreated("HealOptions::with_shrink(false)".into());
        }
        if let Some(reason) = no_shrink_reason() {
            return recreated(reason);
        }
        // The one-device collective communicators this rank can shrink,
        // and why not, for each it cannot.
        let mut refused = Vec::new();
        let mine: Vec<&(String, CommKey, Arc<LocalComms>)> = created
            .iter()
            .filter(|(name, key, comms)| {
                if key.class() != (CommClass::Collective { devices: 1 }) {
                    return false;
                }
                match comms.unshrinkable() {
                    None => true,
                    Some(why) => {
                        refused.push(format!("{name}: {why}"));
                        false
                    }
                }
            })
            .collect();
        let g = group.inner.cache.membership();
        let meeting = g
            .protocol(CARRY)?
            .meeting(&g.store, g.rank, g.world_size)?
            .with_timeout(options.timeout);
        // Each rank's shrinkable names, then a NUL, then why it refused the
        // others: every rank can then say why a shrink did not happen.
        let names: Vec<&str> = mine.iter().map(|(name, _, _)| name.as_str()).collect();
        let offered = format!("{}\0{}", names.join("\n"), refused.join("; "));
        let everyone: Vec<(String, String)> = meeting
            .all_gather("shrinkable", offered.as_bytes())?
            .iter()
            .map(|theirs| {
                let theirs = String::from_utf8_lossy(theirs);
                let (names, refused) = theirs.split_once('\0').unwrap_or((&theirs, ""));
                (names.to_string(), refused.to_string())
            })
            .collect();
        let common: Vec<_> = mine
            .into_iter()
            .filter(|(name, _, _)| {
                everyone
                    .iter()
                    .all(|(theirs, _)| theirs.split('\n').any(|n| n == name))
            })
            .collect();
        if common.is_empty() {
            let refusals: Vec<String> = everyone
                .iter()
                .enumerate()
                .filter(|(_, (_, refused))| !refused.is_empty())
                .map(
                    |(new_rank, (_, refused))| match agreement.survivors().get(new_rank) {
                        Some(old_rank) => format!("on rank {old_rank}, {refused}"),
                        None => format!("on new rank {new_rank}, {refused}"),
                    },
                )
                .collect();
            let why = match refusals.is_empty() {
                true => "no rank refused one, but they had none in common".to_string(),
                false => refusals.join("; "),
            };
            return recreated(format!(
                "no communicator every survivor could shrink: {why}"
            ));
        }
        let mut first_error = None;
        // One deadline for every shrink: a rank with several communicators
        // to shrink must not wait several timeouts where the others wait one.
        let deadline = Instant::now() + options.timeout;
        let shrunk: Vec<Option<LocalComms>> = common
            .iter()
            .map(|(name, _, comms)| {
                match comms.shrink(&lost, deadline.saturating_duration_since(Instant::now())) {
                    Ok(shrunk) => Some(shrunk),
                    Err(error) => {
                        crate::diagnostics::trace::event!(warn, key = %name, %error, "shrink failed");
                        first_error.get_or_insert_with(|| format!("{name}: {error}"));
                        None
                    }
                }
            })
            .collect();
        let made = common.iter().map(|(_, key, _)| *key).zip(shrunk).collect();
        let carried = adopt_where_all_made(group, &meeting, "shrunk", made)?;
        if carried == 0 {
            return recreated(format!(
                "ncclCommShrink failed on a survivor ({})",
                first_error.as_deref().unwrap_or("on another rank")
            ));
        }
        Ok(HealPath::Shrunk {
            shrunk: carried,
            dropped: created.len() - carried,
        })
    }
}

/// The [`Healed`] a finished heal recorded, for a later caller; a grow's
/// record refuses, naming the generation that replaced this one.
fn healed_from(old: &Inner, record: &Record) -> Result<Healed> {
    let Replacement::Healed { agreement, path } = &record.replacement else {
        return Err(old.replaced(record.generation));
    };
    Ok(Healed {
        group: record.handle_on(old)?,
        agreement: agreement.clone(),
        path: path.clone(),
    })
}

/// Why the loaded NCCL cannot shrink, if it cannot.
fn no_shrink_reason() -> Option<String> {
    let capabilities = match Capabilities::loaded() {
        Ok(capabilities) => capabilities,
        Err(error) => return Some(format!("no NCCL library to ask: {error}")),
    };
    [Capability::Revoke, Capability::Shrink]
        .into_iter()
        .find(|&c| !capabilities.has(c))
        .map(|missing| {
            format!(
                "the loaded NCCL {} has no {} ({} and later)",
                capabilities.version(),
                missing.name(),
                missing.introduced_in()
            )
        })
}

/// The agreement's suspects: the caller's, the rank the liveness beat
/// named (`unresponsive`), and the ranks whose report the failure's
/// exchange did not get (when it got any: `peers`).
fn suspects(
    peers: &[PeerProgress],
    options: &HealOptions,
    unresponsive: Option<usize>,
    rank: usize,
    world_size: usize,
) -> Vec<usize> {
    let mut suspects = options.suspects.clone();
    // Named itself (it was stopped, and came back): the others' agreement
    // tells it whether it is lost.
    suspects.extend(unresponsive.filter(|&named| named != rank));
    if !peers.is_empty() {
        let silent = (0..world_size).filter(|&r| r != rank && peers.iter().all(|p| p.rank != r));
        suspects.extend(silent);
    }
    suspects.sort_unstable();
    suspects.dedup();
    suspects
}

/// Refuses options no heal of this place can take.
fn check_options(options: &HealOptions, rank: usize, world_size: usize) -> Result<()> {
    if options.min_survivors == 0 || options.min_survivors > world_size {
        return Err(GroupError::InvalidArgument {
            argument: "min_survivors",
            expected: format!("1..={world_size} (the world size)"),
            given: options.min_survivors.to_string(),
        });
    }
    if let Some(&bad) = options
        .suspects
        .iter()
        .find(|&&s| s >= world_size || s == rank)
    {
        return Err(GroupError::InvalidArgument {
            argument: "suspects",
            expected: format!(
                "ranks below the world size {world_size}, other than this rank ({rank})"
            ),
            given: format!("{:?} (rank {bad})", options.suspects),
        });
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests;
