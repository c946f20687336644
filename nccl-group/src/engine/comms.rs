//! The communicator cache: one set of communicators per [`CommKey`],
//! created exactly once per key with a unique id met through the store.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use nccl_core::UniqueId;

use crate::engine::cache::OnceMap;
use crate::engine::key::{CommClass, CommKey};
use crate::engine::membership::Membership;
use crate::error::{GroupError, Result};
use nccl_rendezvous::StoreError;

/// The name the creator shares a communicator's unique id under.
const UNIQUE_ID: &str = "unique-id";

/// The step every process arrives at before NCCL's init.
const INIT: &str = "init";

/// Creates the communicators of one key.
///
/// The process group uses NCCL; the seam lets tests use a fake without a GPU.
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

/// Numbers the keys of each class in order of first use.
///
/// A key keeps its number when its creation fails and is tried again, so the
/// retry meets the other processes under the same store key.
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
/// the others.
///
/// Processes meet under a key's class and sequence number, not its local
/// devices (which may differ per process), so they must create keys of one
/// class in the same order: issue the group's operations in the same order
/// everywhere, as NCCL requires anyway.
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
    /// A number no other cache's communicators ever had, replaced whenever
    /// this cache forgets or replaces communicators ([`CommCache::stamp`]).
    stamp: AtomicU64,
}

/// The next [`CommCache::stamp`] of any cache of the process.
fn next_stamp() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
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
            stamp: AtomicU64::new(next_stamp()),
        }
    }

    /// A number that changes whenever the cache forgets or replaces
    /// communicators ([`CommCache::adopt`], [`CommCache::clear`]), and that no
    /// other cache of the process ever has: communicators looked up under a
    /// stamp that is still the cache's are still its own (`engine::recent`).
    pub(crate) fn stamp(&self) -> u64 {
        self.stamp.load(Ordering::Acquire)
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
    ///
    /// # Errors
    /// None in practice: the group's name was checked when it was made.
    pub fn adopt(&self, key: CommKey, comms: F::Comms) -> Result<()> {
        let m = &self.membership;
        let sequence = self
            .sequences
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .of(&key);
        self.comms.insert(key, comms);
        self.stamp.store(next_stamp(), Ordering::Release);
        self.created
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.store_key(&m.name, m.generation, sequence)?, key);
        Ok(())
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
        self.stamp.store(next_stamp(), Ordering::Release);
        ordered
    }

    fn create(&self, key: &CommKey) -> Result<F::Comms> {
        let m = &self.membership;
        if self.closed.load(Ordering::Acquire) {
            return Err(GroupError::Closed {
                name: m.name.clone(),
            });
        }
        let crate::engine::key::Members {
            processes,
            index,
            creator,
        } = key.members(m.rank, m.world_size);
        let sequence = self
            .sequences
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .of(key);
        let scope = key.scope(&m.generation_scope()?, sequence)?;
        let store_key = scope.to_string();
        crate::diagnostics::trace::enter_span!(
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
        let meeting = m.meeting(&scope, index, processes)?;
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
        crate::diagnostics::trace::event!(debug, "met the unique id");
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
                crate::diagnostics::trace::event!(warn, waited = ?started.elapsed(), missing = ?missing, "communicator creation timed out");
                GroupError::InitTimeout {
                    key: store_key.clone(),
                    waited: started.elapsed(),
                    missing,
                    source: Box::new(error),
                }
            })?;
        crate::diagnostics::trace::event!(info, waited = ?started.elapsed(), "communicators created");
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
