//! The communicator cache without a GPU, when a rendezvous fails: what a
//! rank that waits in vain is told (the key, who creates its id, the
//! store), how store keys are scoped by group name and generation, ranks,
//! world sizes and names out of range, factory errors and NCCL init
//! timeouts. Simulated
//! processes (threads, each with its own `Membership` and cache) share an
//! `InProcessStore`; `nccl_test_support::group::cache` has the fake
//! `CommFactory`.
//!
//! Every scenario that could deadlock runs under a deadline, so a bug fails
//! the test instead of hanging it.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::thread;
use std::time::Duration;

use nccl_group::testing::{CommCache, CommKey, Membership};
use nccl_group::{GroupError, GroupOptions, InProcessStore, ProcessGroup, Store};
use nccl_test_support::group::assert_invalid_argument;
use nccl_test_support::group::cache::{
    DEADLINE, FakeFactory, LONG, SHORT, Seen, devices, new_store, process, published_id,
    run_processes,
};
use nccl_test_support::within;

/// Asserts `error` is the rendezvous timeout for `key` from `creator`.
fn assert_rendezvous(error: &GroupError, key: &str, creator: usize, store: &str) {
    let message = error.to_string();
    let GroupError::Rendezvous {
        key: k,
        creator: c,
        store: s,
        ..
    } = error
    else {
        panic!("expected GroupError::Rendezvous, got {error:?}");
    };
    assert_eq!(k, key);
    assert_eq!(*c, creator);
    assert_eq!(s, store);
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
    let error = rank1.get(&key).unwrap_err();
    assert_rendezvous(&error, &key.store_key("late", 0, 0).unwrap(), 0, ADDRESS);
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
    assert_rendezvous(
        &error,
        &key.store_key("quiet", 0, 0).unwrap(),
        1,
        "in-process",
    );
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
        &CommKey::Collective(devices(&[0]))
            .store_key("gamma", 0, 0)
            .unwrap(),
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
    assert_rendezvous(
        &error,
        &key.store_key("again", 1, 0).unwrap(),
        0,
        "in-process",
    );
    assert_ne!(
        key.store_key("again", 0, 0).unwrap(),
        key.store_key("again", 1, 0).unwrap()
    );

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
        assert_invalid_argument(&error, "rank");
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
    cache.factory().fail_next_create();
    let key = CommKey::Collective(devices(&[0]));
    let error = cache.get(&key).unwrap_err();
    assert!(error.to_string().contains("an injected failure"), "{error}");
    assert!(cache.all().is_empty());
    let created = cache.get(&key).unwrap();
    assert_eq!(cache.all().len(), 1);
    assert_eq!(cache.factory().creates().len(), 2);
    // The retry made (and published) a fresh id.
    assert_eq!(cache.factory().unique_ids(), 2);
    let published = published_id(&*store, "flaky", &key).expect("the retry published its id");
    assert_eq!(published, created.id.as_bytes());
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
                    cache.factory().time_out_creates();
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
    cache.factory().time_out_creates();
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

/// World sizes NCCL cannot number (its ranks are C ints) are refused where
/// a process joins, by `ProcessGroup::new` as by `Membership::join`.
#[test]
fn a_world_size_above_i32_max_is_refused() {
    let store = new_store();
    for world in [i32::MAX as usize + 1, usize::MAX] {
        let joined = Membership::join(
            "huge",
            0,
            world,
            Arc::clone(&store),
            "in-process".into(),
            SHORT,
        );
        let Err(error) = joined else {
            panic!("a world of {world} was joined");
        };
        assert!(
            matches!(
                &error,
                GroupError::InvalidArgument {
                    argument: "world size",
                    given,
                    ..
                } if *given == world.to_string()
            ),
            "{error:?}"
        );
        assert!(error.to_string().contains("at most 2147483647"), "{error}");
        let made = ProcessGroup::builder("huge")
            .rank(world - 1)
            .world_size(world)
            .store(Arc::new(InProcessStore::new()))
            .options(GroupOptions::default())
            .build();
        assert!(
            matches!(
                made,
                Err(GroupError::InvalidArgument {
                    argument: "world size",
                    ..
                })
            ),
            "{made:?}"
        );
    }
    assert!(store.try_get("huge/instances").unwrap().is_none());
    // The largest world NCCL numbers is taken.
    let last = i32::MAX as usize - 1;
    let member = Membership::join("huge", last, last + 1, store, "in-process".into(), SHORT);
    assert_eq!(member.unwrap().rank, last);
}

/// A process of a world that fits may still drive too many devices for
/// NCCL's numbering: the communicator is refused before any id is made.
#[test]
fn ranks_over_every_device_beyond_i32_max_are_refused() {
    let store = new_store();
    let ids = Arc::new(AtomicU64::new(0));
    let world = 1 << 30;
    let cache = process(&store, "wide", 0, world, SHORT, FakeFactory::new(&ids));
    let error = cache
        .get(&CommKey::Collective(devices(&[0, 1, 2, 3])))
        .unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(
            error,
            GroupError::InvalidArgument {
                argument: "world size",
                ..
            }
        ),
        "{message}"
    );
    assert!(
        message.contains("1073741824 processes x 4 devices"),
        "{message}"
    );
    assert_eq!(cache.factory().unique_ids(), 0);
}

#[test]
fn a_group_name_with_an_empty_part_is_refused() {
    let store = new_store();
    for name in ["", "/", "a//b", "trailing/"] {
        let joined = Membership::join(name, 0, 1, Arc::clone(&store), "in-process".into(), SHORT);
        let Err(error) = joined else {
            panic!("the group name {name:?} was taken");
        };
        assert_invalid_argument(&error, "group name");
    }
    let ids = Arc::new(AtomicU64::new(0));
    let nested = process(&store, "job/sub", 0, 1, SHORT, FakeFactory::new(&ids));
    nested.get(&CommKey::Collective(devices(&[0]))).unwrap();
}

/// Generations count a name's instances in its first world size: an
/// instance of another size is refused where it joins, naming both sizes,
/// instead of giving its ranks generations that never meet.
#[test]
fn an_instance_of_another_world_size_is_refused() {
    let store = new_store();
    let join = |rank, world| {
        Membership::join(
            "sized",
            rank,
            world,
            Arc::clone(&store),
            "in-process".into(),
            SHORT,
        )
    };
    for rank in 0..4 {
        assert_eq!(join(rank, 4).unwrap().generation, 0);
    }
    let Err(error) = join(0, 3) else {
        panic!("a world of 3 was joined after one of 4");
    };
    assert!(
        matches!(&error, GroupError::InvalidArgument { argument: "world size", given, .. } if given == "3"),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .contains("4, the world size of group \"sized\"'s first instance"),
        "{error}"
    );
    // The refusal counted nothing: the next instance of 4 is generation 1.
    for rank in 0..4 {
        assert_eq!(join(rank, 4).unwrap().generation, 1);
    }
}
