//! The communicator cache: one set of communicators per [`CommKey`],
//! created exactly once per key with a unique id met through the store.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use nccl_core::UniqueId;

use crate::cache::OnceMap;
use crate::error::{GroupError, Result};
use crate::key::{CommClass, CommKey};
use crate::store::meet::{MAX_RANKS, Meeting};
use crate::store::{PrefixStore, Store, StoreError};

/// The name the creator shares a communicator's unique id under.
const UNIQUE_ID: &str = "unique-id";

/// The step every process arrives at before NCCL's init.
const INIT: &str = "init";

/// Creates the communicators of one key. The process group uses NCCL; the
/// seam lets tests use a fake without a GPU.
pub trait CommFactory: Send + Sync {
    /// What one key's communicators are, for this process.
    type Comms: Send + Sync;

    /// A fresh unique id (called on the creating rank only).
    ///
    /// # Errors
    /// NCCL's failure.
    fn unique_id(&self) -> Result<UniqueId>;

    /// This process's communicators for `key`: ranks `first_rank ..
    /// first_rank + key.devices().len()` of `world_size`, one per local
    /// device, created together.
    ///
    /// # Errors
    /// NCCL's or CUDA's failure.
    fn create(
        &self,
        key: &CommKey,
        id: UniqueId,
        world_size: usize,
        first_rank: usize,
    ) -> Result<Self::Comms>;
}

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
    /// ([`ProcessGroup::join_grown`](crate::ProcessGroup::join_grown))
    /// finds the grow's offers here by the group's name alone.
    pub root: Arc<dyn Store>,
    /// Where this generation's keys live under `root`: `/`-separated
    /// prefixes, empty for a group made by [`Membership::join`].
    pub scope: String,
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
        let joined = store.add(&format!("{name}/instances"), 1)?;
        let generation = (joined.max(1) as u64 - 1) / world_size as u64;
        crate::trace::event!(
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
            scope: String::new(),
            store,
            store_address,
            timeout,
        })
    }

    /// The membership of a later generation of this group (a heal's or a
    /// grow's), its keys under `root` at `scope`.
    ///
    /// # Errors
    /// A scope with an empty `/`-separated part.
    pub(crate) fn successor(
        &self,
        generation: u64,
        rank: usize,
        world_size: usize,
        scope: String,
    ) -> Result<Self> {
        Ok(Self {
            name: self.name.clone(),
            generation,
            rank,
            world_size,
            root: Arc::clone(&self.root),
            store: scoped_store(&self.root, &scope)?,
            scope,
            store_address: self.store_address.clone(),
            timeout: self.timeout,
        })
    }

    /// `scope` under this generation's scope, as a path from `root`.
    pub(crate) fn nested_scope(&self, scope: &str) -> String {
        if self.scope.is_empty() {
            scope.to_string()
        } else {
            format!("{}/{scope}", self.scope)
        }
    }

    /// The meeting of a key's `processes` under `store_key` (each of its
    /// `/`-separated parts a scope), as the process at `index` among them,
    /// its waits bounded by the group's timeout.
    fn meeting(
        &self,
        store_key: &str,
        index: usize,
        processes: usize,
    ) -> Result<Meeting<Arc<dyn Store>>> {
        let scoped = scoped_store(&self.store, store_key)?;
        Ok(Meeting::new(scoped, index, processes)?.with_timeout(self.timeout))
    }
}

/// Refuses `world_size` for group `name` on `store` unless it is the world
/// size of the name's first instance there, which the first rank to join
/// records. Generations are counted as `instances / world_size`: an
/// instance of another size would give its ranks different generations,
/// which never meet.
fn same_world_size(store: &dyn Store, name: &str, world_size: usize) -> Result<()> {
    let mine = world_size.to_string();
    let recorded = store.compare_set(&format!("{name}/world_size"), None, mine.as_bytes())?;
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

/// `store` under `scope`, each of its `/`-separated parts a prefix; the
/// store itself for an empty scope.
///
/// # Errors
/// An empty part of a non-empty scope.
pub(crate) fn scoped_store(store: &Arc<dyn Store>, scope: &str) -> Result<Arc<dyn Store>> {
    if scope.is_empty() {
        return Ok(Arc::clone(store));
    }
    Ok(scope
        .split('/')
        .try_fold(Arc::clone(store), |store, part| {
            PrefixStore::new(store, part).map(|scoped| Arc::new(scoped) as Arc<dyn Store>)
        })?)
}

/// Numbers the keys of each class in order of first use. A key keeps its
/// number when its creation fails and is tried again, so the retry meets
/// the other processes under the same store key.
#[derive(Default)]
struct Sequences {
    next: HashMap<CommClass, u64>,
    assigned: HashMap<CommKey, u64>,
}

impl Sequences {
    fn of(&mut self, key: &CommKey) -> u64 {
        if let Some(&sequence) = self.assigned.get(key) {
            return sequence;
        }
        let next = self.next.entry(key.class()).or_insert(0);
        let sequence = *next;
        *next += 1;
        self.assigned.insert(*key, sequence);
        sequence
    }
}

/// Communicators per key, created once, with the unique id published by
/// the creating rank (rank 0, or the lower rank of a pair) and fetched by
/// the others. Processes meet under a key's class and sequence number, not
/// its local devices (which may differ per process), so they must create
/// keys of one class in the same order: issue the group's operations in
/// the same order everywhere, as NCCL requires anyway.
pub struct CommCache<F: CommFactory> {
    membership: Membership,
    factory: F,
    comms: OnceMap<CommKey, F::Comms>,
    /// The sequence number of every key asked for, per class.
    sequences: Mutex<Sequences>,
    /// Every created key by its store key: an order all processes share.
    created: Mutex<BTreeMap<String, CommKey>>,
    /// Set by [`CommCache::close`].
    closed: AtomicBool,
}

impl<F: CommFactory> CommCache<F> {
    /// An empty cache.
    pub fn new(membership: Membership, factory: F) -> Self {
        Self {
            membership,
            factory,
            comms: OnceMap::new(),
            sequences: Mutex::new(Sequences::default()),
            created: Mutex::new(BTreeMap::new()),
            closed: AtomicBool::new(false),
        }
    }

    /// Stops creating communicators: a `get` of a key not created yet
    /// fails with [`GroupError::Closed`] from now on, including calls
    /// already waiting for another thread's creation of that key (a group
    /// that failed, was aborted or destroyed must not start a new
    /// rendezvous, nor a new NCCL init).
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    /// Where this process stands.
    pub fn membership(&self) -> &Membership {
        &self.membership
    }

    /// The factory.
    pub fn factory(&self) -> &F {
        &self.factory
    }

    /// The communicators for `key`: a map lookup once created; otherwise
    /// created here (exactly once, however many threads ask).
    ///
    /// # Errors
    /// The rendezvous timed out, or creating failed.
    #[inline]
    pub fn get(&self, key: &CommKey) -> Result<Arc<F::Comms>> {
        self.comms.get_or_create(key, |key| self.create(key))
    }

    /// The communicators for `key` if they were created; never creates
    /// them (for a caller that must not meet the other ranks now).
    pub fn created(&self, key: &CommKey) -> Option<Arc<F::Comms>> {
        self.comms.get(key)
    }

    /// Every set of communicators created so far, ordered by store key
    /// (the same order on every process).
    pub fn all(&self) -> Vec<Arc<F::Comms>> {
        let created = self.created.lock().unwrap_or_else(PoisonError::into_inner);
        created
            .values()
            .filter_map(|key| self.comms.get(key))
            .collect()
    }

    /// Every key created so far with its store key and communicators,
    /// ordered by store key (the same order on every process).
    pub fn keyed(&self) -> Vec<(String, CommKey, Arc<F::Comms>)> {
        let created = self.created.lock().unwrap_or_else(PoisonError::into_inner);
        created
            .iter()
            .filter_map(|(store_key, key)| Some((store_key.clone(), *key, self.comms.get(key)?)))
            .collect()
    }

    /// Takes `comms`, made without a rendezvous (shrunk by a heal, grown
    /// by a grow), as
    /// `key`'s: numbered in its class like a created key, so processes
    /// that adopt the same keys in the same order agree on the numbers.
    pub fn adopt(&self, key: CommKey, comms: F::Comms) {
        let m = &self.membership;
        let sequence = self
            .sequences
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .of(&key);
        self.comms.insert(key, comms);
        self.created
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.store_key(&m.name, m.generation, sequence), key);
    }

    /// Forgets every communicator, returning them ordered as [`CommCache::all`]
    /// (they are dropped once no call uses them).
    pub fn clear(&self) -> Vec<Arc<F::Comms>> {
        let ordered = self.all();
        self.created
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        self.comms.clear();
        ordered
    }

    fn create(&self, key: &CommKey) -> Result<F::Comms> {
        let m = &self.membership;
        if self.closed.load(Ordering::Acquire) {
            return Err(GroupError::Closed {
                name: m.name.clone(),
            });
        }
        let crate::key::Members {
            processes,
            index,
            creator,
        } = key.members(m.rank, m.world_size);
        let sequence = self
            .sequences
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .of(key);
        let store_key = key.store_key(&m.name, m.generation, sequence);
        let _span = crate::trace::enter_span!(
            info,
            "rendezvous",
            group = %m.name,
            key = %store_key,
            store = %m.store_address,
            processes,
            index,
            creator
        );
        let devices = key.devices().len();
        let world_size = processes
            .checked_mul(devices)
            .filter(|&ranks| i32::try_from(ranks).is_ok())
            .ok_or_else(|| GroupError::InvalidArgument {
                argument: "world size",
                expected: "at most i32::MAX ranks (processes x devices per process)".to_string(),
                given: format!("{processes} processes x {devices} devices"),
            })?;
        // Below `world_size`: it does not overflow.
        let first_rank = index * devices;
        let meeting = m.meeting(&store_key, index, processes)?;
        let id = meeting
            .share_from(0, UNIQUE_ID, || {
                Ok::<_, GroupError>(self.factory.unique_id()?.as_bytes().to_vec())
            })
            .map_err(|error| match error {
                GroupError::Store(StoreError::Absent { waited, .. }) => GroupError::Rendezvous {
                    key: store_key.clone(),
                    creator,
                    store: m.store_address.clone(),
                    waited,
                },
                other => other,
            })?;
        crate::trace::event!(debug, "met the unique id");
        let id = UniqueId::try_from_slice(&id)?;
        // Each process announces itself before NCCL's init, which waits for
        // all of them: a timed-out init can then name the absent ones.
        meeting.arrive(INIT)?;
        let started = Instant::now();
        let comms = self
            .factory
            .create(key, id, world_size, first_rank)
            .map_err(|error| {
                if !is_timeout(&error) {
                    return error;
                }
                // A store that cannot tell leaves every other process in doubt.
                let absent = meeting
                    .absent(INIT)
                    .unwrap_or_else(|_| (0..processes).filter(|&i| i != index).collect());
                let missing: Vec<usize> = absent.into_iter().map(|i| key.process_rank(i)).collect();
                crate::trace::event!(warn, waited = ?started.elapsed(), missing = ?missing, "communicator creation timed out");
                GroupError::InitTimeout {
                    key: store_key.clone(),
                    waited: started.elapsed(),
                    missing,
                    source: Box::new(error),
                }
            })?;
        crate::trace::event!(info, waited = ?started.elapsed(), "communicators created");
        self.created
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(store_key, *key);
        Ok(comms)
    }
}

/// Whether creating failed because NCCL's init ran past its deadline.
fn is_timeout(error: &GroupError) -> bool {
    matches!(
        error,
        GroupError::Tensor(nccl_tensor::Error::Core(nccl_core::Error::Timeout { .. }))
    )
}
