//! `OnceMap` without a GPU, the map under the communicator cache: many
//! threads on one key, keys created in parallel, failing and panicking
//! creators.
//!
//! Every scenario that could deadlock runs under a deadline, so a bug fails
//! the test instead of hanging it.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use nccl_group::testing::OnceMap;
use nccl_test_support::group::cache::DEADLINE;
use nccl_test_support::within;

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
