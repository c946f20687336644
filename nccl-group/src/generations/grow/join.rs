//! The new process's side of a grow ([`GroupBuilder::join_grown`]).

use std::sync::Arc;
use std::time::Duration;

use nccl_core::{Capabilities, Capability};

use super::offer::await_place;
use super::{arrive, share_grow_id};
use crate::devices::DeviceList;
use crate::engine::builder::GroupBuilder;
use crate::engine::cache::OnceMap;
use crate::engine::group::ProcessGroup;
use crate::engine::key::CommKey;
use crate::engine::membership::{Membership, check_name};
use crate::error::{GroupError, Result};
use crate::generations::succession::adopt_where_all_made;
use crate::options::GroupOptions;
use nccl_rendezvous::RendezvousConfig;
use nccl_rendezvous::meet::Scope;

impl GroupBuilder {
    /// Joins the builder's group as a new process when its ranks
    /// [`grow`](crate::Recovery::grow) it: takes a ticket in the
    /// queue of joining processes at the builder's store (the store the
    /// group was created with; from a configuration
    /// ([`GroupBuilder::config`]), connected as a client whatever its rank
    /// ([`RendezvousConfig::connect_as_client`](crate::RendezvousConfig::connect_as_client)):
    /// a running group's store is hosted already), waits at
    /// most `timeout` for a grow to offer the ticket a place, then takes
    /// part in the grow: in the group's communicator, on device
    /// [`local_rank`](GroupBuilder::local_rank) (its rank on this host,
    /// the GPU it drives; device 0 when not given), where the grow has
    /// one.
    ///
    /// Before it takes its ticket, the process pays NCCL's one-time costs
    /// on that device: it makes a one-rank communicator there
    /// (`ncclCommInitAll`, which needs no peer and so no timeout; it leaves
    /// the device current on the calling thread) and finalizes it, so that
    /// NCCL's own setup, NVML's and the CUDA runtime's happen while it
    /// waits, not in the grow's first communicator; the device is held
    /// until the join ends. Best effort: where that fails (no GPU, no
    /// NCCL), the grow's own communicator reports why.
    ///
    /// The builder's rank and world size are not used: the offer gives them.
    /// A process launched like the group's ranks joins with
    /// [`ProcessGroup::join_grown_from_env`].
    /// Returns the group of the grown generation, this process at the rank the
    /// offer gives its ticket (the old world size plus its place among the
    /// offer's tickets). The grow's own waits and NCCL's are bounded by
    /// [`GroupOptions::timeout`](crate::GroupOptions::timeout).
    ///
    /// A process that fails here must not retry with the same ticket: a
    /// new call takes a new one, which the group's next grow covers.
    ///
    /// # Errors
    /// - [`GroupError::InvalidArgument`](crate::GroupError::InvalidArgument)
    ///   for a bad name or option, a missing store, or a device ordinal
    ///   past `u16`.
    /// - [`GroupError::NotOffered`](crate::GroupError::NotOffered): no grow
    ///   offered a place in time.
    /// - A store error: the group's ranks or another new process did not
    ///   meet in time, or the grow failed on a rank
    ///   ([`StoreError::PeerFailed`](crate::StoreError::PeerFailed)); or
    ///   no watchdog thread.
    pub fn join_grown(self, timeout: Duration) -> Result<ProcessGroup> {
        let (store, store_address) = self.connect_joining()?;
        let (name, options) = (self.name.as_str(), self.options);
        let local_rank = self.local_rank.unwrap_or(0);
        options.validate()?;
        check_name(name)?;
        let key = CommKey::Collective(DeviceList::one(local_rank)?);
        let _warm = warm_nccl(local_rank);
        let (offer, rank) = await_place(&*store, name, &store_address, timeout)?;
        crate::diagnostics::trace::event!(info, group = name, rank, offer = ?offer, "offered a place");
        let scope = Scope::path(&offer.scope)?;
        let membership = Membership {
            name: name.to_string(),
            generation: offer.generation,
            rank,
            world_size: offer.world_size,
            store: scope.store(&store)?,
            root: store,
            scope,
            store_address,
            timeout: options.timeout,
        };
        // A NCCL without the grow says so here, so the group's ranks do not
        // wait in ncclCommGrow for this process.
        let can_grow = offer.grows && Capabilities::loaded().is_ok_and(|c| c.has(Capability::Grow));
        let place = (rank, offer.world_size);
        let (meeting, everyone_can) = arrive(&membership.store, place, can_grow, options.timeout)?;
        let group = ProcessGroup::start(
            membership,
            options,
            Some(local_rank),
            Arc::new(OnceMap::new()),
            None,
        )?;
        if can_grow && everyone_can {
            let id = share_grow_id(&meeting, || {
                Err(GroupError::InvalidArgument {
                    argument: "grow root",
                    expected: "rank 0, a rank of the group before the grow".to_string(),
                    given: format!("new rank {rank}"),
                })
            })?;
            let joined = id.and_then(|id| {
                group
                    .inner
                    .cache
                    .factory()
                    .join_grow(local_rank, offer.world_size, id, rank)
                    .inspect_err(|_error| {
                        crate::diagnostics::trace::event!(warn, error = %_error, "joining ncclCommGrow failed");
                    })
                    .ok()
            });
            adopt_where_all_made(&group, &meeting, "grown", vec![(key, joined)])?;
        }
        Ok(group)
    }
}

impl ProcessGroup {
    /// Joins the group `name` as a new process when its ranks
    /// [`grow`](crate::Recovery::grow) it, from the launch variables
    /// [`ProcessGroup::from_env`] reads: the store the group's ranks meet
    /// at (`MASTER_ADDR`, `MASTER_PORT`, or `NCCL_RS_STORE`) and its
    /// namespace (the launcher's run id, or `NCCL_RS_NAMESPACE`: the same
    /// as the group's), with the default options and the store's timeout
    /// for the grow's waits. [`GroupBuilder::join_grown`] with
    /// [`RendezvousConfig::from_env`]'s configuration, waiting at most
    /// `timeout` for a grow to offer a place.
    ///
    /// The process's own numbering is not used (the offer gives its rank
    /// and world size), and never makes it host the store: a process
    /// started by hand needs no `RANK` or `WORLD_SIZE`, and one that a
    /// launcher started as rank 0 of a job of its own connects to the
    /// group's store as a client. Its device is `LOCAL_RANK` (0 when unset).
    ///
    /// # Errors
    /// A missing or malformed variable (named in the error); as
    /// [`GroupBuilder::join_grown`].
    pub fn join_grown_from_env(name: &str, timeout: Duration) -> Result<ProcessGroup> {
        let config = joining_config(|var| {
            std::env::var_os(var).map(|value| value.to_string_lossy().into_owned())
        })?;
        Self::builder(name)
            .options(GroupOptions::default().with_timeout(config.timeout))
            .config(&config)
            .join_grown(timeout)
    }
}

/// [`GroupBuilder::join_grown`]'s warm-up on device `local_rank`: the
/// device, for the caller to hold; `None` without one.
fn warm_nccl(local_rank: usize) -> Option<nccl_core::Device> {
    let device = nccl_core::Device::new(local_rank).ok()?;
    let warmed = nccl_core::Communicator::init_all(std::slice::from_ref(&device))
        .and_then(|comms| comms.iter().try_for_each(nccl_core::Communicator::finalize));
    if let Err(_error) = warmed {
        crate::diagnostics::trace::event!(warn, error = %_error, device = local_rank, "NCCL's warm-up before joining failed");
    }
    Some(device)
}

/// The launch configuration of a joining process, read through `var`:
/// without a launcher's numbering, it is rank 0 of 1 (the grow's offer
/// gives the real one).
fn joining_config(var: impl Fn(&str) -> Option<String>) -> Result<RendezvousConfig> {
    if RendezvousConfig::detect_launcher(&var).is_some() {
        return Ok(RendezvousConfig::from_vars(var)?);
    }
    Ok(RendezvousConfig::from_vars(|name| match name {
        "RANK" => Some("0".to_string()),
        "WORLD_SIZE" => Some("1".to_string()),
        _ => var(name),
    })?)
}


#[cfg(test)]
mod tests;
