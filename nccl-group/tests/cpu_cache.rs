//! The communicator cache without a GPU: `OnceMap` under many threads,
//! failing and panicking creators; `CommCache` with a fake `CommFactory`
//! and an `InProcessStore` shared by simulated processes (threads, each with
//! its own `Membership` and cache): who creates the unique id, who meets
//! whom, what a rank that waits in vain is told, and how store keys are
//! scoped by group name and generation.
//!
//! Every scenario that could deadlock runs under a deadline, so a bug fails
//! the test instead of hanging it.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

#[path = "../../nccl-core/tests/support/mod.rs"]
mod support;

use nccl_core::UniqueId;
use nccl_group::testing::{CommCache, CommFactory, CommKey, DeviceList, Membership, OnceMap};
use nccl_group::{GroupError, InProcessStore, Result, Store};
use support::within;

/// Generous bound for scenarios that finish in milliseconds when correct.
const DEADLINE: Duration = Duration::from_secs(20);
/// The rendezvous timeout of scenarios where a rank waits in vain.
const SHORT: Duration = Duration::from_millis(200);
/// The rendezvous timeout of scenarios where every rank shows up.
const LONG: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------- OnceMap

#[test]
fn once_map_32_threads_one_key_one_creation() {
    const THREADS: usize = 32;
    let (calls, values) = within("32 threads on one key", DEADLINE, || {
        let map: Arc<OnceMap<u32, String>> = Arc::new(OnceMap::new());
        let calls = Arc::new(AtomicUsize::new(0));
        let barrier = Arc::new(Barrier::new(THREADS));
        let handles: Vec<_> = (0..THREADS)
            .map(|thread| {
                let (map, calls, barrier) = (map.clone(), calls.clone(), barrier.clone());
                thread::spawn(move || {
                    barrier.wait();
                    map.get_or_create(&7, |key| {
                        calls.fetch_add(1, Ordering::SeqCst);
                        thread::sleep(Duration::from_millis(50));
                        Ok::<_, String>(format!("key {key} made by thread {thread}"))
                    })
                })
            })
            .collect();
        let values: Vec<Arc<String>> = handles
            .into_iter()
            .map(|h| h.join().expect("no panic").expect("creation succeeds"))
            .collect();
        assert_eq!(map.len(), 1);
        (calls.load(Ordering::SeqCst), values)
    });
    assert_eq!(calls, 1, "the creator ran {calls} times");
    assert_eq!(values.len(), THREADS);
    for value in &values {
        assert!(
            Arc::ptr_eq(value, &values[0]),
            "every thread gets the same Arc: {value} vs {}",
            values[0]
        );
    }
}

#[test]
fn once_map_different_keys_are_created_in_parallel() {
    // Each creator waits for the other: if creations were serialised
    // (one global lock), the first would wait forever.
    within("two keys created at once", DEADLINE, || {
        let map: Arc<OnceMap<u32, u32>> = Arc::new(OnceMap::new());
        let both = Arc::new(Barrier::new(2));
        let handles: Vec<_> = [1u32, 2]
            .into_iter()
            .map(|key| {
                let (map, both) = (map.clone(), both.clone());
                thread::spawn(move || {
                    map.get_or_create(&key, |&k| {
                        both.wait();
                        Ok::<_, ()>(k * 10)
                    })
                })
            })
            .collect();
        for (handle, key) in handles.into_iter().zip([1u32, 2]) {
            assert_eq!(*handle.join().unwrap().unwrap(), key * 10);
        }
        assert_eq!(map.len(), 2);
    });
}

#[test]
fn once_map_failed_creator_returns_error_then_next_caller_retries() {
    let map: OnceMap<String, u64> = OnceMap::new();
    let calls = AtomicUsize::new(0);
    let first = map.get_or_create("k", |_| {
        calls.fetch_add(1, Ordering::SeqCst);
        Err::<u64, _>("the first creation fails")
    });
    assert_eq!(first.unwrap_err(), "the first creation fails");
    assert!(map.get("k").is_none(), "a failure caches nothing");
    assert!(map.is_empty());

    let second = map.get_or_create("k", |key| {
        calls.fetch_add(1, Ordering::SeqCst);
        Ok::<_, &str>(key.len() as u64 + 41)
    });
    assert_eq!(*second.unwrap(), 42);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    // Created now: the creator is not called again.
    let third = map.get_or_create("k", |_| -> std::result::Result<u64, &str> {
        panic!("must not be called for a created key")
    });
    assert_eq!(*third.unwrap(), 42);
    assert_eq!(map.get("k").map(|v| *v), Some(42));
}

#[test]
fn once_map_waiter_retries_after_the_creator_fails() {
    within("a waiter behind a failing creator", DEADLINE, || {
        let map: Arc<OnceMap<u8, &'static str>> = Arc::new(OnceMap::new());
        let (started_tx, started_rx) = mpsc::channel();
        let failing = {
            let map = map.clone();
            thread::spawn(move || {
                map.get_or_create(&1, |_| {
                    started_tx.send(()).unwrap();
                    thread::sleep(Duration::from_millis(100));
                    Err("creator failed")
                })
            })
        };
        started_rx.recv().unwrap();
        // This caller waits for the failing creator, then creates itself.
        let value = map.get_or_create(&1, |_| Ok::<_, &str>("second try"));
        assert_eq!(failing.join().unwrap().unwrap_err(), "creator failed");
        assert_eq!(*value.unwrap(), "second try");
    });
}

#[test]
fn once_map_panicking_creator_does_not_strand_waiters() {
    within("waiters behind a panicking creator", DEADLINE, || {
        let map: Arc<OnceMap<u8, u32>> = Arc::new(OnceMap::new());
        let (started_tx, started_rx) = mpsc::channel();
        let panicking = {
            let map = map.clone();
            thread::spawn(move || {
                catch_unwind(AssertUnwindSafe(|| {
                    map.get_or_create(&9, |_| -> std::result::Result<u32, ()> {
                        started_tx.send(()).unwrap();
                        thread::sleep(Duration::from_millis(100));
                        panic!("creator panics (expected by this test)")
                    })
                }))
            })
        };
        started_rx.recv().unwrap();
        // Several waiters are queued behind the panicking creator.
        let waiters: Vec<_> = (0..4)
            .map(|i| {
                let map = map.clone();
                thread::spawn(move || map.get_or_create(&9, |_| Ok::<_, ()>(100 + i)))
            })
            .collect();
        assert!(
            panicking.join().unwrap().is_err(),
            "the creator's panic reaches its caller"
        );
        let values: Vec<Arc<u32>> = waiters
            .into_iter()
            .map(|w| w.join().unwrap().unwrap())
            .collect();
        for value in &values {
            assert!(Arc::ptr_eq(value, &values[0]), "one waiter created it");
            assert!((100..104).contains(&**value));
        }
        // And the map works afterwards.
        assert_eq!(map.get(&9).map(|v| *v), Some(*values[0]));
        assert_eq!(*map.get_or_create(&10, |_| Ok::<_, ()>(5)).unwrap(), 5);
    });
}

#[test]
fn once_map_values_and_clear() {
    let map: OnceMap<Vec<usize>, usize> = OnceMap::new();
    for n in 1..=3 {
        let key: Vec<usize> = (0..n).collect();
        map.get_or_create(&key[..], |k| Ok::<_, ()>(k.len()))
            .unwrap();
    }
    assert_eq!(map.len(), 3);
    let mut values: Vec<usize> = map.values().iter().map(|v| **v).collect();
    values.sort_unstable();
    assert_eq!(values, [1, 2, 3]);
    let held = map.get(&[0usize][..]).unwrap();
    let cleared = map.clear();
    assert_eq!(cleared.len(), 3);
    assert!(map.is_empty());
    assert_eq!(*held, 1, "a value a caller still holds stays alive");
    // Cleared keys are created anew.
    let again = map
        .get_or_create(&[0usize][..], |_| Ok::<_, ()>(11))
        .unwrap();
    assert_eq!(*again, 11);
}

// ------------------------------------------------------- fake factory

/// What the fake factory was asked to create, returned as the "communicators".
#[derive(Clone, Debug, PartialEq, Eq)]
struct Created {
    key: CommKey,
    id: UniqueId,
    world_size: i32,
    first_rank: i32,
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
struct FakeFactory {
    ids: Arc<AtomicU64>,
    unique_id_calls: AtomicUsize,
    creates: Mutex<Vec<Created>>,
    delay: Duration,
    fail_next_create: AtomicBool,
    time_out_create: AtomicBool,
}

impl FakeFactory {
    fn new(ids: &Arc<AtomicU64>) -> Self {
        Self {
            ids: Arc::clone(ids),
            unique_id_calls: AtomicUsize::new(0),
            creates: Mutex::new(Vec::new()),
            delay: Duration::ZERO,
            fail_next_create: AtomicBool::new(false),
            time_out_create: AtomicBool::new(false),
        }
    }

    fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    fn unique_ids(&self) -> usize {
        self.unique_id_calls.load(Ordering::SeqCst)
    }

    fn creates(&self) -> Vec<Created> {
        self.creates.lock().unwrap().clone()
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
        world_size: i32,
        first_rank: i32,
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

fn devices(ordinals: &[usize]) -> DeviceList {
    DeviceList::new(ordinals.iter().copied()).expect("a valid device list")
}

/// One simulated process: joins `name` as `rank` of `world` in `store`.
fn process(
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

fn new_store() -> Arc<dyn Store> {
    Arc::new(InProcessStore::new())
}

/// What one simulated process saw.
struct Seen {
    rank: usize,
    comms: Created,
    generation: u64,
    unique_ids: usize,
    creates: usize,
}

/// Runs `world` simulated processes of group `name`, each asking for
/// `key_of(rank)` once (ranks for which it is `None` only join).
fn run_processes(
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

// -------------------------------------------------------------- CommCache

#[test]
fn collective_key_every_process_gets_rank0_id() {
    const WORLD: usize = 4;
    let store = new_store();
    let ids = Arc::new(AtomicU64::new(1000));
    let key = CommKey::Collective(devices(&[0, 1]));
    let seen = run_processes(&store, "g", WORLD, &ids, |_| {
        Some(CommKey::Collective(devices(&[0, 1])))
    });
    let seen: Vec<Seen> = seen.into_iter().map(Option::unwrap).collect();
    let rank0_id = seen[0].comms.id;
    for s in &seen {
        assert_eq!(s.generation, 0);
        assert_eq!(s.comms.key, key);
        assert_eq!(s.comms.id, rank0_id, "rank {} got another id", s.rank);
        assert_eq!(s.comms.world_size, (WORLD * 2) as i32);
        assert_eq!(s.comms.first_rank, (s.rank * 2) as i32);
        assert_eq!(s.creates, 1, "rank {} created {} times", s.rank, s.creates);
        let expected_ids = usize::from(s.rank == 0);
        assert_eq!(
            s.unique_ids, expected_ids,
            "only rank 0 makes the id (rank {})",
            s.rank
        );
    }
    assert_eq!(ids.load(Ordering::SeqCst), 1001, "one id made in all");
    // Published under the documented key.
    let published = store
        .try_get(&key.store_key("g", 0, 0))
        .unwrap()
        .expect("rank 0 published the id");
    assert_eq!(published, rank0_id.as_bytes());
}

#[test]
fn one_process_32_threads_create_once() {
    const THREADS: usize = 32;
    let (factory_ids, creates, comms) = within("32 threads of one process", DEADLINE, || {
        let store = new_store();
        let ids = Arc::new(AtomicU64::new(0));
        let cache = Arc::new(process(
            &store,
            "one",
            0,
            1,
            LONG,
            FakeFactory::new(&ids).with_delay(Duration::from_millis(50)),
        ));
        let barrier = Arc::new(Barrier::new(THREADS));
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                let (cache, barrier) = (cache.clone(), barrier.clone());
                thread::spawn(move || {
                    barrier.wait();
                    cache.get(&CommKey::Collective(devices(&[0]))).unwrap()
                })
            })
            .collect();
        let comms: Vec<Arc<Created>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        (
            cache.factory().unique_ids(),
            cache.factory().creates(),
            comms,
        )
    });
    assert_eq!(
        creates.len(),
        1,
        "factory.create ran {} times",
        creates.len()
    );
    assert_eq!(factory_ids, 1);
    assert_eq!(creates[0].world_size, 1);
    assert_eq!(creates[0].first_rank, 0);
    for c in &comms {
        assert!(Arc::ptr_eq(c, &comms[0]));
    }
}

#[test]
fn two_processes_16_threads_each_create_once() {
    const THREADS: usize = 16;
    let per_process = within("2 processes x 16 threads", DEADLINE, || {
        let store = new_store();
        let ids = Arc::new(AtomicU64::new(0));
        let barrier = Arc::new(Barrier::new(2 * THREADS));
        let processes: Vec<_> = (0..2)
            .map(|rank| {
                Arc::new(process(
                    &store,
                    "pair-of-processes",
                    rank,
                    2,
                    LONG,
                    FakeFactory::new(&ids).with_delay(Duration::from_millis(20)),
                ))
            })
            .collect();
        let handles: Vec<_> = (0..2 * THREADS)
            .map(|i| {
                let (cache, barrier) = (processes[i % 2].clone(), barrier.clone());
                thread::spawn(move || {
                    barrier.wait();
                    cache.get(&CommKey::Collective(devices(&[3]))).unwrap()
                })
            })
            .collect();
        let comms: Vec<Arc<Created>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let id = comms[0].id;
        assert!(
            comms.iter().all(|c| c.id == id),
            "one id for both processes"
        );
        processes
            .iter()
            .map(|p| (p.factory().unique_ids(), p.factory().creates().len()))
            .collect::<Vec<_>>()
    });
    assert_eq!(per_process, [(1, 1), (0, 1)]);
}

#[test]
fn pair_keys_only_the_two_processes_meet() {
    const WORLD: usize = 4;
    let store = new_store();
    let ids = Arc::new(AtomicU64::new(0));
    // Processes 1 and 3 meet; so do 0 and 2, at the same time and
    // independently. Two local devices each.
    let seen = run_processes(&store, "p2p", WORLD, &ids, |rank| {
        let (low, high) = if rank % 2 == 1 { (1, 3) } else { (0, 2) };
        Some(CommKey::PointToPoint {
            low,
            high,
            devices: devices(&[0, 1]),
        })
    });
    let seen: Vec<Seen> = seen.into_iter().map(Option::unwrap).collect();
    for (low, high) in [(1, 3), (0, 2)] {
        let (l, h) = (&seen[low], &seen[high]);
        assert_eq!(l.comms.id, h.comms.id, "pair {low}-{high} shares one id");
        assert_eq!(
            (l.unique_ids, h.unique_ids),
            (1, 0),
            "the lower rank creates"
        );
        assert_eq!(l.comms.world_size, 4, "2 processes x 2 devices");
        assert_eq!(h.comms.world_size, 4);
        assert_eq!(l.comms.first_rank, 0);
        assert_eq!(h.comms.first_rank, 2, "devices.len() for the higher rank");
    }
    assert_ne!(seen[1].comms.id, seen[0].comms.id, "the pairs do not share");
    let pair = CommKey::PointToPoint {
        low: 1,
        high: 3,
        devices: devices(&[0, 1]),
    };
    assert!(
        store
            .try_get(&pair.store_key("p2p", 0, 0))
            .unwrap()
            .is_some()
    );
    let collective = CommKey::Collective(devices(&[0, 1]));
    assert!(
        store
            .try_get(&collective.store_key("p2p", 0, 0))
            .unwrap()
            .is_none(),
        "no collective id was published"
    );
}

/// Asserts `error` is the rendezvous timeout for `key` from `creator`.
fn assert_rendezvous(error: &GroupError, key: &str, creator: usize, store: &str) {
    let message = error.to_string();
    let GroupError::Rendezvous {
        key: k,
        creator: c,
        store: s,
        waited,
    } = error
    else {
        panic!("expected GroupError::Rendezvous, got {error:?}");
    };
    assert_eq!(k, key);
    assert_eq!(*c, creator);
    assert_eq!(s, store);
    assert!(
        *waited >= SHORT.mul_f32(0.9) && *waited < Duration::from_secs(5),
        "waited {waited:?} for a {SHORT:?} timeout"
    );
    for part in [
        key,
        &format!("rank {creator}"),
        store,
        "likely causes",
        "NCCL unique id",
    ] {
        assert!(message.contains(part), "{part:?} missing from: {message}");
    }
}

#[test]
fn rendezvous_timeout_names_key_creator_and_store_then_retry_succeeds() {
    const ADDRESS: &str = "tcp://node0:29500";
    let store = new_store();
    let ids = Arc::new(AtomicU64::new(0));
    let join = |rank| {
        let membership =
            Membership::join("late", rank, 2, Arc::clone(&store), ADDRESS.into(), SHORT).unwrap();
        CommCache::new(membership, FakeFactory::new(&ids))
    };
    let (rank0, rank1) = (join(0), join(1));
    let key = CommKey::Collective(devices(&[0]));

    // Rank 0 never reaches the collective: rank 1 gives up after SHORT.
    let started = Instant::now();
    let error = rank1.get(&key).unwrap_err();
    assert!(started.elapsed() >= SHORT.mul_f32(0.9));
    assert_rendezvous(&error, &key.store_key("late", 0, 0), 0, ADDRESS);
    assert!(rank1.factory().creates().is_empty());
    assert_eq!(rank1.factory().unique_ids(), 0);

    // Rank 0 arrives; rank 1's next call meets it (nothing was cached).
    let created = rank0.get(&key).unwrap();
    let met = rank1.get(&key).unwrap();
    assert_eq!(met.id, created.id);
    assert_eq!((created.first_rank, met.first_rank), (0, 1));
}

#[test]
fn pair_rendezvous_timeout_names_the_lower_rank() {
    let store = new_store();
    let ids = Arc::new(AtomicU64::new(0));
    let caches: Vec<_> = (0..4)
        .map(|rank| process(&store, "quiet", rank, 4, SHORT, FakeFactory::new(&ids)))
        .collect();
    let key = CommKey::PointToPoint {
        low: 1,
        high: 3,
        devices: devices(&[0]),
    };
    let error = caches[3].get(&key).unwrap_err();
    assert_rendezvous(&error, &key.store_key("quiet", 0, 0), 1, "in-process");
}

#[test]
fn groups_with_different_names_do_not_see_each_others_ids() {
    let store = new_store();
    let ids = Arc::new(AtomicU64::new(0));
    let key_of = |_| Some(CommKey::Collective(devices(&[0])));
    let alpha = run_processes(&store, "alpha", 2, &ids, key_of);
    let beta = run_processes(&store, "beta", 2, &ids, key_of);
    let (alpha, beta): (Vec<Seen>, Vec<Seen>) = (
        alpha.into_iter().map(Option::unwrap).collect(),
        beta.into_iter().map(Option::unwrap).collect(),
    );
    assert_eq!(alpha[0].comms.id, alpha[1].comms.id);
    assert_eq!(beta[0].comms.id, beta[1].comms.id);
    assert_ne!(alpha[0].comms.id, beta[0].comms.id);
    assert_eq!((alpha[0].generation, beta[0].generation), (0, 0));

    // A third group whose rank 0 never comes does not pick up alpha's or
    // beta's published ids.
    let gamma1 = process(&store, "gamma", 1, 2, SHORT, FakeFactory::new(&ids));
    let error = gamma1.get(&CommKey::Collective(devices(&[0]))).unwrap_err();
    assert_rendezvous(
        &error,
        &CommKey::Collective(devices(&[0])).store_key("gamma", 0, 0),
        0,
        "in-process",
    );
}

#[test]
fn rejoining_a_name_gives_generation_1_and_fresh_ids() {
    let store = new_store();
    let ids = Arc::new(AtomicU64::new(0));
    let key = CommKey::Collective(devices(&[0]));
    let first = run_processes(&store, "again", 2, &ids, |_| {
        Some(CommKey::Collective(devices(&[0])))
    });
    let first_id = first[0].as_ref().unwrap().comms.id;
    assert!(first.iter().all(|s| s.as_ref().unwrap().generation == 0));

    // Every process joins the same name again (after an abort, say).
    // Rank 1 comes first and must not take generation 0's id.
    let rank1 = process(&store, "again", 1, 2, SHORT, FakeFactory::new(&ids));
    assert_eq!(rank1.membership().generation, 1);
    let error = rank1.get(&key).unwrap_err();
    assert_rendezvous(&error, &key.store_key("again", 1, 0), 0, "in-process");
    assert_ne!(key.store_key("again", 0, 0), key.store_key("again", 1, 0));

    let rank0 = process(&store, "again", 0, 2, SHORT, FakeFactory::new(&ids));
    assert_eq!(rank0.membership().generation, 1);
    let created = rank0.get(&key).unwrap();
    let met = rank1.get(&key).unwrap();
    assert_eq!(created.id, met.id);
    assert_ne!(created.id, first_id, "a new generation gets a new id");
}

#[test]
fn join_with_rank_out_of_range_names_rank_and_world() {
    let store = new_store();
    for (rank, world) in [(4, 4), (5, 4), (0, 0)] {
        let error = match Membership::join(
            "bad",
            rank,
            world,
            Arc::clone(&store),
            "in-process".into(),
            SHORT,
        ) {
            Ok(m) => panic!("rank {rank} of {world} joined as {:?}", m.rank),
            Err(error) => error,
        };
        let message = error.to_string();
        assert!(
            matches!(
                error,
                GroupError::InvalidArgument {
                    argument: "rank",
                    ..
                }
            ),
            "{error:?}"
        );
        assert!(message.contains(&format!("0..{world}")), "{message}");
        assert!(message.contains(&format!("got {rank}")), "{message}");
        assert!(message.contains("world size"), "{message}");
    }
    assert!(
        store.try_get("bad/instances").unwrap().is_none(),
        "a refused join is not counted"
    );
}

#[test]
fn factory_errors_reach_the_caller_and_the_next_call_retries() {
    let store = new_store();
    let ids = Arc::new(AtomicU64::new(0));
    let cache = process(&store, "flaky", 0, 1, SHORT, FakeFactory::new(&ids));
    cache
        .factory()
        .fail_next_create
        .store(true, Ordering::SeqCst);
    let key = CommKey::Collective(devices(&[0]));
    let error = cache.get(&key).unwrap_err();
    assert!(error.to_string().contains("an injected failure"), "{error}");
    assert!(cache.all().is_empty());
    let created = cache.get(&key).unwrap();
    assert_eq!(cache.all().len(), 1);
    assert_eq!(cache.factory().creates().len(), 2);
    // The retry made (and published) a fresh id.
    assert_eq!(cache.factory().unique_ids(), 2);
    assert_eq!(
        store
            .try_get(&key.store_key("flaky", 0, 0))
            .unwrap()
            .unwrap(),
        created.id.as_bytes()
    );
    assert_eq!(cache.clear().len(), 1);
    assert!(cache.all().is_empty());
}

/// A rank that never reaches a communicator's creation makes NCCL's init
/// time out on the others; the error names who never joined.
#[test]
fn init_timeout_names_the_ranks_that_never_joined() {
    let store = new_store();
    let ids = Arc::new(AtomicU64::new(0));
    // Ranks 0 and 2 of 4 reach the collective; 1 and 3 never do.
    let caches: Vec<_> = [0, 2]
        .map(|rank| {
            // NCCL's init waits for its deadline; so does the fake.
            let factory = FakeFactory::new(&ids).with_delay(Duration::from_millis(300));
            process(&store, "absent", rank, 4, LONG, factory)
        })
        .into_iter()
        .collect();
    let key = CommKey::Collective(devices(&[0]));
    let errors = within("two ranks time out", DEADLINE, move || {
        thread::scope(|scope| {
            let handles: Vec<_> = caches
                .iter()
                .map(|cache| {
                    cache
                        .factory()
                        .time_out_create
                        .store(true, Ordering::SeqCst);
                    scope.spawn(move || cache.get(&key).map(drop))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| nccl_core::ErrorChain(&h.join().unwrap().unwrap_err()).to_string())
                .collect::<Vec<_>>()
        })
    });
    for error in errors {
        assert!(error.contains("ranks [1, 3] never joined"), "{error}");
        assert!(error.contains("\"absent/0/comm/x1/0\""), "{error}");
        assert!(error.contains("ncclCommInitRankConfig"), "{error}");
    }

    // A pair: rank 1 creates the id for (1, 3); rank 3 never comes.
    let cache = process(&store, "pair", 1, 4, LONG, FakeFactory::new(&ids));
    cache
        .factory()
        .time_out_create
        .store(true, Ordering::SeqCst);
    let pair = CommKey::PointToPoint {
        low: 1,
        high: 3,
        devices: devices(&[0]),
    };
    match cache.get(&pair).unwrap_err() {
        GroupError::InitTimeout { missing, key, .. } => {
            assert_eq!(missing, vec![3]);
            assert_eq!(key, "pair/0/p2p/1-3/x1/0");
        }
        other => panic!("expected an init timeout, got {other}"),
    }
}

/// torchrun-style launches put process `r` on GPU `LOCAL_RANK = r`, so the
/// processes of one collective pass different local device lists. They
/// must still meet (store keys name the class and sequence, not devices).
#[test]
fn processes_on_different_local_devices_meet() {
    let store = new_store();
    let ids = Arc::new(AtomicU64::new(0));
    let seen = run_processes(&store, "torchrun", 2, &ids, |rank| {
        Some(CommKey::Collective(devices(&[rank])))
    });
    let seen: Vec<Seen> = seen.into_iter().map(Option::unwrap).collect();
    assert_eq!(seen[0].comms.id, seen[1].comms.id);
}

#[test]
fn a_closed_cache_creates_nothing_but_keeps_what_it_has() {
    let store = new_store();
    let ids = Arc::new(AtomicU64::new(0));
    let cache = process(&store, "closing", 0, 1, SHORT, FakeFactory::new(&ids));
    let made = CommKey::Collective(devices(&[0]));
    let created = cache.get(&made).unwrap();
    cache.close();
    // What exists is still served (an operation racing the failure gets
    // its state error from the group, not from here).
    assert!(Arc::ptr_eq(&cache.get(&made).unwrap(), &created));
    let error = cache.get(&CommKey::Collective(devices(&[1]))).unwrap_err();
    assert!(
        matches!(&error, GroupError::Closed { name } if name == "closing"),
        "{error}"
    );
    assert!(
        error
            .to_string()
            .contains("no longer creates communicators"),
        "{error}"
    );
    assert_eq!(cache.factory().creates().len(), 1);
}
