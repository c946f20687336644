//! [`Membership`]: where this process stands in its group (name,
//! generation, rank, world size) and where the ranks meet, with the
//! checks of a group name and a world size, and the store scoped to a
//! group's keys.

use std::sync::Arc;
use std::time::Duration;

use crate::error::{GroupError, Result};
use crate::protocols::{INSTANCES, WORLD_SIZE};
use nccl_rendezvous::Store;
use nccl_rendezvous::meet::{MAX_RANKS, Meeting, Scope};

/// Where this process stands in its group, and where the ranks meet.
pub struct Membership {
    /// The group's name (scopes every store key).
    pub name: String,
    /// This group instance's number among groups of the same name, so a
    /// group re-created after an abort uses fresh keys.
    pub generation: u64,
    /// This process's rank.
    pub rank: usize,
    /// The number of processes.
    pub world_size: usize,
    /// The store the group was created with: a heal's or a grow's next
    /// generation scopes its keys from here, and a process joining a grow
    /// ([`GroupBuilder::join_grown`](crate::GroupBuilder::join_grown))
    /// finds the grow's offers here by the group's name alone.
    pub root: Arc<dyn Store>,
    /// Where this generation's keys live under `root`: the root scope
    /// for a group made by [`Membership::join`].
    pub scope: Scope,
    /// The rendezvous store: `root` under `scope`.
    pub store: Arc<dyn Store>,
    /// The store's address, for error messages.
    pub store_address: String,
    /// How long to wait for another rank's unique id.
    pub timeout: Duration,
}

impl Membership {
    /// Joins the group `name`: counts this process in the store to learn
    /// the generation (every process of an instance gets the same one).
    ///
    /// # Errors
    /// [`GroupError::InvalidArgument`] for a world size of 0 or above
    /// `i32::MAX` (NCCL's ranks are C `int`s), `rank >= world_size`, a
    /// world size other than the one the name's first instance on this
    /// store had (the generations count instances in that size), or a
    /// name that is empty or has an empty `/`-separated part (the store
    /// keys nest under each part); or a store failure.
    pub fn join(
        name: &str,
        rank: usize,
        world_size: usize,
        store: Arc<dyn Store>,
        store_address: String,
        timeout: Duration,
    ) -> Result<Self> {
        if world_size > MAX_RANKS {
            return Err(GroupError::InvalidArgument {
                argument: "world size",
                expected: format!("at most {MAX_RANKS} processes (NCCL's ranks are C ints)"),
                given: world_size.to_string(),
            });
        }
        if world_size == 0 || rank >= world_size {
            return Err(GroupError::InvalidArgument {
                argument: "rank",
                expected: format!("0..{world_size} (the world size)"),
                given: rank.to_string(),
            });
        }
        check_name(name)?;
        same_world_size(&*store, name, world_size)?;
        let joined = store.add(&Scope::path(name)?.key(INSTANCES), 1)?;
        let generation = (joined.max(1) as u64 - 1) / world_size as u64;
        crate::diagnostics::trace::event!(
            info,
            group = name,
            rank,
            world_size,
            generation,
            store = %store_address,
            "joined the group in its store"
        );
        Ok(Self {
            name: name.to_string(),
            generation,
            rank,
            world_size,
            root: Arc::clone(&store),
            scope: Scope::root(),
            store,
            store_address,
            timeout,
        })
    }

    /// The membership of a later generation of this group (a heal's or a
    /// grow's) at `place` (rank, world size), its keys under `root` at
    /// `scope`.
    ///
    /// # Errors
    /// The store's (none in practice: the scope's parts were checked).
    pub(crate) fn successor(
        &self,
        generation: u64,
        place: (usize, usize),
        scope: Scope,
    ) -> Result<Self> {
        self.descendant(self.name.clone(), generation, place, scope)
    }

    /// The membership of group `name` (a later generation, or a
    /// sub-group) made from this one, at `place` (rank, world size), its
    /// keys under `root` at `scope`.
    ///
    /// # Errors
    /// As [`Membership::successor`].
    pub(crate) fn descendant(
        &self,
        name: String,
        generation: u64,
        place: (usize, usize),
        scope: Scope,
    ) -> Result<Self> {
        let (rank, world_size) = place;
        Ok(Self {
            name,
            generation,
            rank,
            world_size,
            root: Arc::clone(&self.root),
            store: scope.store(&self.root)?,
            scope,
            store_address: self.store_address.clone(),
            timeout: self.timeout,
        })
    }

    /// The scope of this generation's keys in [`Membership::store`]
    /// (`<group>/<generation>`).
    ///
    /// # Errors
    /// None in practice: [`Membership::join`] checked the name.
    pub(crate) fn generation_scope(&self) -> Result<Scope> {
        Ok(Scope::path(&self.name)?.generation(self.generation))
    }

    /// The scope of this generation's protocol `purpose` (one of
    /// [`crate::protocols`]) in [`Membership::store`].
    ///
    /// # Errors
    /// As [`Membership::generation_scope`].
    pub(crate) fn protocol(&self, purpose: &str) -> Result<Scope> {
        Ok(self.generation_scope()?.purpose(purpose)?)
    }

    /// `scope` of [`Membership::store`] as a scope of `root`.
    pub(crate) fn rooted(&self, scope: Scope) -> Scope {
        scope.within(&self.scope)
    }

    /// The meeting of `processes` in `scope` of [`Membership::store`], as
    /// the process at `index` among them, its waits bounded by the group's
    /// timeout.
    pub(crate) fn meeting(
        &self,
        scope: &Scope,
        index: usize,
        processes: usize,
    ) -> Result<Meeting<Arc<dyn Store>>> {
        Ok(scope
            .meeting(&self.store, index, processes)?
            .with_timeout(self.timeout))
    }
}

/// Refuses `world_size` for group `name` on `store` unless it is the world
/// size of the name's first instance there, which the first rank to join
/// records.
///
/// Generations are counted as `instances / world_size`: an instance of another
/// size would give its ranks different generations, which never meet.
fn same_world_size(store: &dyn Store, name: &str, world_size: usize) -> Result<()> {
    let mine = world_size.to_string();
    let recorded = store.compare_set(&Scope::path(name)?.key(WORLD_SIZE), None, mine.as_bytes())?;
    let first = recorded.current.unwrap_or_default();
    if recorded.swapped || first == mine.as_bytes() {
        return Ok(());
    }
    Err(GroupError::InvalidArgument {
        argument: "world size",
        expected: format!(
            "{}, the world size of group {name:?}'s first instance on this store (each instance \
             of a name must have the same size: give a group of another size another name)",
            String::from_utf8_lossy(&first)
        ),
        given: mine,
    })
}

/// Refuses a group name that is empty or has an empty `/`-separated part
/// (the store keys nest under each part).
///
/// # Errors
/// [`GroupError::InvalidArgument`] naming the name.
pub(crate) fn check_name(name: &str) -> Result<()> {
    if name.split('/').any(str::is_empty) {
        return Err(GroupError::InvalidArgument {
            argument: "group name",
            expected: "a non-empty name whose '/'-separated parts are non-empty".to_string(),
            given: format!("{name:?}"),
        });
    }
    Ok(())
}
