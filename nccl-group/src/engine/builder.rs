//! [`GroupBuilder`]: the one way to make a [`ProcessGroup`] in code, by
//! named steps instead of positional arguments.

use std::sync::Arc;

use crate::engine::group::ProcessGroup;
use crate::error::{GroupError, Result};
use crate::options::GroupOptions;
use nccl_rendezvous::{__with_setters as with_setters, RendezvousConfig, Store};

/// The label a store gets in messages when the builder was not told its
/// address.
const UNNAMED_STORE: &str = "a store given without an address";

/// The steps that make a [`ProcessGroup`]: its place (rank and world
/// size), its store, its options, then [`build`](GroupBuilder::build)
/// (or, for a process joining a grown group,
/// [`join_grown`](GroupBuilder::join_grown)).
///
/// ```no_run
/// use std::sync::Arc;
/// use nccl_group::{GroupOptions, InProcessStore, ProcessGroup};
///
/// # fn main() -> nccl_group::Result<()> {
/// let group = ProcessGroup::builder("trainer")
///     .rank(0)
///     .world_size(1)
///     .store(Arc::new(InProcessStore::new()))
///     .options(GroupOptions::default())
///     .build()?;
/// # Ok(()) }
/// ```
///
/// A step left out is refused at `build` with
/// [`GroupError::InvalidArgument`] naming it; [`GroupBuilder::config`]
/// gives rank, world size, local rank and store in one step.
#[must_use = "a builder makes nothing until `build` or `join_grown`"]
pub struct GroupBuilder {
    pub(crate) name: String,
    rank: Option<usize>,
    world_size: Option<usize>,
    store: Option<Arc<dyn Store>>,
    store_address: Option<String>,
    pub(crate) local_rank: Option<usize>,
    pub(crate) options: GroupOptions,
    config: Option<RendezvousConfig>,
}

impl std::fmt::Debug for GroupBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupBuilder")
            .field("name", &self.name)
            .field("rank", &self.rank)
            .field("world_size", &self.world_size)
            .field("store", &self.store.as_ref().map(|_| self.store_label()))
            .field("local_rank", &self.local_rank)
            .field("options", &self.options)
            .finish()
    }
}

impl ProcessGroup {
    /// Starts making the group `name`: see [`GroupBuilder`].
    pub fn builder(name: &str) -> GroupBuilder {
        GroupBuilder {
            name: name.to_string(),
            rank: None,
            world_size: None,
            store: None,
            store_address: None,
            local_rank: None,
            options: GroupOptions::default(),
            config: None,
        }
    }
}

impl GroupBuilder {
    with_setters! {
        /// This process's rank in the group.
        rank(rank: usize) => rank = Some(rank);
        /// How many processes the group has.
        world_size(world_size: usize) => world_size = Some(world_size);
        /// The store where the processes meet.
        store(store: Arc<dyn Store>) => store = Some(store);
        /// How error messages name the store (for the TCP store: rank 0's
        /// address).
        ///
        /// Only used in messages.
        store_address(address: impl Into<String>) => store_address = Some(address.into());
        /// This process's rank on its host, the GPU it drives
        /// ([`ProcessGroup::local_rank`]); unknown unless given.
        local_rank(local_rank: usize) => local_rank = Some(local_rank);
        /// The group's options (default: [`GroupOptions::default`]).
        options(options: GroupOptions) => options = options;
    }

    /// Rank, world size, local rank and store from a launch
    /// configuration, read from the environment
    /// ([`RendezvousConfig::from_env`]) or built in code; `build` connects
    /// to its store ([`RendezvousConfig::connect`]: rank 0 hosts the TCP
    /// store) unless [`GroupBuilder::store`] gave one.
    pub fn config(mut self, config: &RendezvousConfig) -> Self {
        self.rank = Some(config.rank);
        self.world_size = Some(config.world_size);
        self.local_rank = Some(config.local_rank);
        self.config = Some(config.clone());
        self
    }

    /// Joins the group: meets the other processes in the store and starts
    /// the group's watchdog.
    ///
    /// # Errors
    /// [`GroupError::InvalidArgument`] naming `store`, `rank` or
    /// `world size` when that step was left out; a store failure;
    /// [`GroupError::InvalidArgument`] for a world size of 0 or above
    /// `i32::MAX` or other than the name's first instance's on this
    /// store, a rank outside it, or a group name that is empty or has an
    /// empty `/`-separated part; an option out of range (a
    /// `recorder_capacity` above
    /// [`MAX_RECORDER_CAPACITY`](crate::recorder::MAX_RECORDER_CAPACITY),
    /// `collective_checks` of 0 or above
    /// [`MAX_CHECK_INTERVAL`](crate::MAX_CHECK_INTERVAL)), or no watchdog
    /// thread.
    pub fn build(self) -> Result<ProcessGroup> {
        let rank = self.rank.ok_or_else(|| missing("rank", ".rank(r)"))?;
        let world_size = self
            .world_size
            .ok_or_else(|| missing("world size", ".world_size(n)"))?;
        let (store, store_address) = self.connect()?;
        ProcessGroup::join(
            &self.name,
            (rank, world_size, self.local_rank),
            store,
            store_address,
            self.options,
        )
    }

    /// The store and how messages name it: the one given, else the
    /// configuration's, connected now (rank 0 hosts a TCP store).
    pub(crate) fn connect(&self) -> Result<(Arc<dyn Store>, String)> {
        self.connect_with(RendezvousConfig::connect)
    }

    /// [`connect`](Self::connect) for a process joining a running group:
    /// a TCP store is another process's, whatever the configuration's rank.
    pub(crate) fn connect_joining(&self) -> Result<(Arc<dyn Store>, String)> {
        self.connect_with(RendezvousConfig::connect_as_client)
    }

    /// The store given, else the configuration's, connected by `connect`.
    fn connect_with(
        &self,
        connect: fn(&RendezvousConfig) -> nccl_rendezvous::Result<Box<dyn Store>>,
    ) -> Result<(Arc<dyn Store>, String)> {
        let store = match (&self.store, &self.config) {
            (Some(store), _) => Arc::clone(store),
            (None, Some(config)) => Arc::from(connect(config)?),
            (None, None) => {
                return Err(missing(
                    "store",
                    ".store(Arc<dyn Store>) or .config(&RendezvousConfig)",
                ));
            }
        };
        Ok((store, self.store_label()))
    }

    /// How messages name the store.
    fn store_label(&self) -> String {
        match (&self.store_address, &self.config) {
            (Some(address), _) => address.clone(),
            (None, Some(config)) => config.store.to_string(),
            (None, None) => UNNAMED_STORE.to_string(),
        }
    }
}

/// The refusal of a builder that was not given `argument`.
fn missing(argument: &'static str, call: &str) -> GroupError {
    GroupError::InvalidArgument {
        argument,
        expected: format!("a {argument} for the group: call {call} before building"),
        given: "none".to_string(),
    }
}
