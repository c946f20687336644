//! The communicator cache without a GPU: `CommCache` with a fake
//! `CommFactory` and an `InProcessStore` shared by simulated processes
//! (threads, each with its own `Membership` and cache): who creates the
//! unique id and who meets whom, in one process and across processes, for
//! collective and pair keys; and a closed cache. (`OnceMap` is in
//! `cpu/once_map.rs`, failed rendezvous in `cpu/cache_rendezvous.rs`.)
//!
//! Every scenario that could deadlock runs under a deadline, so a bug fails
//! the test instead of hanging it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use nccl_group::GroupError;
use nccl_group::testing::CommKey;
use nccl_test_support::group::cache::{
    Created, DEADLINE, FakeFactory, LONG, SHORT, Seen, devices, new_store, process, published_id,
    run_processes,
};
use nccl_test_support::within;

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
        assert_eq!(s.comms.world_size, WORLD * 2);
        assert_eq!(s.comms.first_rank, s.rank * 2);
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
    let published = published_id(&*store, "g", &key).expect("rank 0 published the id");
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
    assert!(published_id(&*store, "p2p", &pair).is_some());
    let collective = CommKey::Collective(devices(&[0, 1]));
    assert!(
        published_id(&*store, "p2p", &collective).is_none(),
        "no collective id was published"
    );
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
