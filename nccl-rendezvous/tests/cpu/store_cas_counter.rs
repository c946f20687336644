//! A counter built on `compare_set` alone, from many threads at once (64;
//! 8 on the file store), loses no increment on any store: each thread
//! retries while `swapped` is false, and every value 1..=N is stored by
//! exactly one successful swap.
//!
//! When `compare_set` returned only the value stored afterwards, a thread
//! whose `new` had just been stored by another thread took that for its own
//! swap, and such a counter lost most of its increments.

use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use nccl_rendezvous::{FileStore, InProcessStore, Store, TcpStoreServerOptions};

use crate::server_and_patient_client;

/// The racing threads on the in-process and TCP stores.
const THREADS: usize = 64;
/// The racing threads on the file store. Its lock is taken by polling,
/// which is not fair: each swap makes every other thread try again, and
/// 64 threads on a loaded 2-core machine kept one waiting for the lock
/// past two minutes. 8 threads race as surely, with 64 times fewer
/// attempts.
const FILE_THREADS: usize = 8;
const INCREMENTS_PER_THREAD: usize = 16;
/// The stores' timeouts, lock waits and I/O margins: a hang guard that
/// only a deadlock outlasts, however loaded the machine. The run takes well
/// under a second on an idle machine; how long is no part of what is
/// checked.
const PATIENCE: Duration = Duration::from_secs(120);
const KEY: &str = "cas-counter";

/// Stores `value + 1` in the counter `KEY` by compare-and-set, retrying with
/// the value the failed attempt reported; returns the value it stored.
/// Every failed attempt means another thread's swap succeeded in between,
/// so no increment needs more attempts than the `total` increments.
fn increment(store: &dyn Store, total: usize) -> u64 {
    let max_attempts = total + 1;
    let mut expected: Option<Vec<u8>> = None;
    for _ in 0..max_attempts {
        let count: u64 = expected.as_deref().map_or(0, |value| {
            std::str::from_utf8(value)
                .ok()
                .and_then(|text| text.parse().ok())
                .unwrap_or_else(|| panic!("the counter holds {value:?}, not a decimal number"))
        });
        let next = count + 1;
        let outcome = store
            .compare_set(KEY, expected.as_deref(), next.to_string().as_bytes())
            .expect("compare_set");
        if outcome.swapped {
            assert_eq!(
                outcome.current.as_deref(),
                Some(next.to_string().as_bytes()),
                "a swap reports the new value as current"
            );
            return next;
        }
        expected = outcome.current;
    }
    panic!("one increment failed {max_attempts} times, more than any store allows");
}

/// Runs the counter from `threads` threads on `store`, and checks that each
/// value 1..=total was stored by exactly one swap and the counter ends at
/// the total.
fn counter_loses_nothing(store: &dyn Store, threads: usize) {
    let total = threads * INCREMENTS_PER_THREAD;
    let barrier = Barrier::new(threads);
    let mut stored: Vec<u64> = thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    (0..INCREMENTS_PER_THREAD)
                        .map(|_| increment(store, total))
                        .collect::<Vec<u64>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a counting thread"))
            .collect()
    });
    // Short messages: a broken store fails here with a thousand values.
    stored.sort_unstable();
    stored.dedup();
    assert_eq!(
        stored.len(),
        total,
        "{} of {total} swaps claimed a value another swap had stored",
        total - stored.len()
    );
    assert!(
        stored.iter().copied().eq(1..=total as u64),
        "the swaps stored 1..={total}, each once"
    );
    assert_eq!(
        store.get(KEY, Duration::ZERO).expect("the final counter"),
        total.to_string().as_bytes(),
        "{threads} threads x {INCREMENTS_PER_THREAD} increments"
    );
}

#[test]
fn in_process_cas_counter_loses_nothing() {
    counter_loses_nothing(&InProcessStore::new(), THREADS);
}

#[test]
fn file_cas_counter_loses_nothing() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let store = FileStore::open(dir.path(), PATIENCE).expect("a file store");
    counter_loses_nothing(&store, FILE_THREADS);
}

#[test]
fn tcp_cas_counter_loses_nothing() {
    let (_server, client) = server_and_patient_client(TcpStoreServerOptions::default(), PATIENCE);
    counter_loses_nothing(&client, THREADS);
}
