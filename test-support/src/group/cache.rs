//! The communicator cache without a GPU: a fake [`CommFactory`] and
//! simulated processes (threads, each with its own `Membership` and
//! cache) sharing an `InProcessStore`.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use nccl_core::UniqueId;
use nccl_group::testing::{CommCache, CommFactory, CommKey, DeviceList, Membership};
use nccl_group::{GroupError, InProcessStore, Result, Store};

use crate::within;

/// The hang guard of scenarios that finish in milliseconds when correct:
/// only a deadlock or a lost wake-up outlasts it, however loaded the
/// machine (it is longer than [`LONG`], so a rank that waits in vain
/// fails with its own error first).
pub const DEADLINE: Duration = Duration::from_secs(120);
/// The rendezvous timeout of scenarios where a rank waits in vain.
pub const SHORT: Duration = Duration::from_millis(200);
/// The rendezvous timeout of scenarios where every rank shows up: a hang
/// guard too, never a performance claim.
pub const LONG: Duration = Duration::from_secs(60);

/// What the fake factory was asked to create, returned as the "communicators".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Created {
    /// The key it was made for.
    pub key: CommKey,
    /// The unique id it was made with.
    pub id: UniqueId,
    /// Its world size.
    pub world_size: usize,
    /// The rank of its first device.
    pub first_rank: usize,
}

/// A distinct, recognisable id per number.
fn fake_id(n: u64) -> UniqueId {
    let mut bytes = [0u8; UniqueId::BYTES];
    bytes[..8].copy_from_slice(&n.to_le_bytes());
    bytes[UniqueId::BYTES - 1] = 0x5a;
    UniqueId::from_bytes(bytes)
}

/// A `CommFactory` that needs no GPU: ids from a counter shared by every
/// simulated process (so an id made by the wrong rank shows), and
/// `create` recording its arguments.
pub struct FakeFactory {
    ids: Arc<AtomicU64>,
    unique_id_calls: AtomicUsize,
    creates: Mutex<Vec<Created>>,
    delay: Duration,
    fail_next_create: AtomicBool,
    time_out_create: AtomicBool,
}

impl FakeFactory {
    /// A factory drawing ids from `ids` (shared by the simulated processes).
    pub fn new(ids: &Arc<AtomicU64>) -> Self {
        Self {
            ids: Arc::clone(ids),
            unique_id_calls: AtomicUsize::new(0),
            creates: Mutex::new(Vec::new()),
            delay: Duration::ZERO,
            fail_next_create: AtomicBool::new(false),
            time_out_create: AtomicBool::new(false),
        }
    }

    /// Every `create` takes `delay`, as NCCL's init waits for its peers.
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// How many unique ids it made.
    pub fn unique_ids(&self) -> usize {
        self.unique_id_calls.load(Ordering::SeqCst)
    }

    /// Every `create` call so far.
    pub fn creates(&self) -> Vec<Created> {
        self.creates.lock().unwrap().clone()
    }

    /// The next `create` fails (with `GroupError::InvalidArgument`).
    pub fn fail_next_create(&self) {
        self.fail_next_create.store(true, Ordering::SeqCst);
    }

    /// Every later `create` times out, as NCCL's init past its deadline.
    pub fn time_out_creates(&self) {
        self.time_out_create.store(true, Ordering::SeqCst);
    }
}

impl CommFactory for FakeFactory {
    type Comms = Created;

    fn unique_id(&self) -> Result<UniqueId> {
        self.unique_id_calls.fetch_add(1, Ordering::SeqCst);
        Ok(fake_id(self.ids.fetch_add(1, Ordering::SeqCst)))
    }

    fn create(
        &self,
        key: &CommKey,
        id: UniqueId,
        world_size: usize,
        first_rank: usize,
    ) -> Result<Created> {
        let created = Created {
            key: *key,
            id,
            world_size,
            first_rank,
        };
        self.creates.lock().unwrap().push(created.clone());
        thread::sleep(self.delay);
        if self.time_out_create.load(Ordering::SeqCst) {
            // What a nonblocking NCCL init reports past its deadline.
            return Err(nccl_core::Error::Timeout {
                operation: "ncclCommInitRankConfig",
                waited: SHORT,
            }
            .into());
        }
        if self.fail_next_create.swap(false, Ordering::SeqCst) {
            return Err(GroupError::InvalidArgument {
                argument: "fake",
                expected: "no failure".into(),
                given: "an injected failure".into(),
            });
        }
        Ok(created)
    }
}

/// A valid device list of `ordinals`.
pub fn devices(ordinals: &[usize]) -> DeviceList {
    DeviceList::new(ordinals.iter().copied()).expect("a valid device list")
}

/// One simulated process: joins `name` as `rank` of `world` in `store`.
pub fn process(
    store: &Arc<dyn Store>,
    name: &str,
    rank: usize,
    world: usize,
    timeout: Duration,
    factory: FakeFactory,
) -> CommCache<FakeFactory> {
    let membership = Membership::join(
        name,
        rank,
        world,
        Arc::clone(store),
        "in-process".into(),
        timeout,
    )
    .unwrap_or_else(|e| panic!("rank {rank} joins {name:?}: {e}"));
    CommCache::new(membership, factory)
}

/// A fresh in-process store.
pub fn new_store() -> Arc<dyn Store> {
    Arc::new(InProcessStore::new())
}

/// The unique id published for `key` of the first generation of `group`
/// (the first key of its class) on `store`, if any.
pub fn published_id(store: &dyn Store, group: &str, key: &CommKey) -> Option<Vec<u8>> {
    let scope = key.store_key(group, 0, 0).expect("a valid key");
    store
        .try_get(&format!("{scope}/share/unique-id"))
        .expect("an in-process store answers")
}

/// What one simulated process saw.
pub struct Seen {
    /// Its rank.
    pub rank: usize,
    /// What its cache returned.
    pub comms: Created,
    /// Its membership's generation.
    pub generation: u64,
    /// How many unique ids its factory made.
    pub unique_ids: usize,
    /// How many communicators its factory created.
    pub creates: usize,
}

/// Runs `world` simulated processes of group `name`, each asking for
/// `key_of(rank)` once (ranks for which it is `None` only join).
pub fn run_processes(
    store: &Arc<dyn Store>,
    name: &'static str,
    world: usize,
    ids: &Arc<AtomicU64>,
    key_of: fn(usize) -> Option<CommKey>,
) -> Vec<Option<Seen>> {
    let (store, ids) = (Arc::clone(store), Arc::clone(ids));
    within(
        &format!("{world} processes of {name:?}"),
        DEADLINE,
        move || {
            let handles: Vec<_> = (0..world)
                .map(|rank| {
                    let (store, ids) = (Arc::clone(&store), Arc::clone(&ids));
                    thread::spawn(move || {
                        let cache =
                            process(&store, name, rank, world, LONG, FakeFactory::new(&ids));
                        let key = key_of(rank)?;
                        let comms = cache
                            .get(&key)
                            .unwrap_or_else(|e| panic!("rank {rank}: {e}"));
                        // A second lookup is served from the cache.
                        let again = cache.get(&key).unwrap();
                        assert!(Arc::ptr_eq(&comms, &again));
                        Some(Seen {
                            rank,
                            comms: (*comms).clone(),
                            generation: cache.membership().generation,
                            unique_ids: cache.factory().unique_ids(),
                            creates: cache.factory().creates().len(),
                        })
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        },
    )
}
