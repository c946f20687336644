//! A counter built on `compare_set` alone, from 64 threads at once, loses no
//! increment on any store: each thread retries while `swapped` is false, and
//! every value 1..=N is stored by exactly one successful swap.
//!
//! When `compare_set` returned only the value stored afterwards, a thread
//! whose `new` had just been stored by another thread took that for its own
//! swap, and such a counter lost most of its increments.

use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use nccl_rendezvous::{
    FileStore, InProcessStore, Store, TcpStore, TcpStoreOptions, TcpStoreServer,
    TcpStoreServerOptions,
};

const THREADS: usize = 64;
const INCREMENTS_PER_THREAD: usize = 16;
const TOTAL: usize = THREADS * INCREMENTS_PER_THREAD;
/// Every failed attempt means another thread's swap succeeded in between,
/// so no increment can need more attempts than there are increments.
const MAX_ATTEMPTS_PER_INCREMENT: usize = TOTAL + 1;
/// The stores' timeouts, lock waits and I/O margins: a hang guard that
/// only a deadlock outlasts, however loaded the machine (64 threads on a
/// lock). The run takes well under a second on an idle machine; how long
/// is no part of what is checked.
const PATIENCE: Duration = Duration::from_secs(120);
const KEY: &str = "cas-counter";

/// Stores `value + 1` in the counter `KEY` by compare-and-set, retrying with
/// the value the failed attempt reported; returns the value it stored.
fn increment(store: &dyn Store) -> u64 {
    let mut expected: Option<Vec<u8>> = None;
    for _ in 0..MAX_ATTEMPTS_PER_INCREMENT {
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
    panic!("one increment failed {MAX_ATTEMPTS_PER_INCREMENT} times, more than any store allows");
}

/// Runs the counter from `THREADS` threads on `store`, and checks that each
/// value 1..=TOTAL was stored by exactly one swap and the counter ends at
/// TOTAL.
fn counter_loses_nothing(store: &dyn Store) {
    let barrier = Barrier::new(THREADS);
    let mut stored: Vec<u64> = thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    (0..INCREMENTS_PER_THREAD)
                        .map(|_| increment(store))
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
        TOTAL,
        "{} of {TOTAL} swaps claimed a value another swap had stored",
        TOTAL - stored.len()
    );
    assert!(
        stored.iter().copied().eq(1..=TOTAL as u64),
        "the swaps stored 1..={TOTAL}, each once"
    );
    assert_eq!(
        store.get(KEY, Duration::ZERO).expect("the final counter"),
        TOTAL.to_string().as_bytes(),
        "{THREADS} threads x {INCREMENTS_PER_THREAD} increments"
    );
}

#[test]
fn in_process_cas_counter_loses_nothing() {
    counter_loses_nothing(&InProcessStore::new());
}

#[test]
fn file_cas_counter_loses_nothing() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let store = FileStore::open(dir.path(), PATIENCE).expect("a file store");
    counter_loses_nothing(&store);
}

#[test]
fn tcp_cas_counter_loses_nothing() {
    let server = TcpStoreServer::bind("127.0.0.1:0", TcpStoreServerOptions::default())
        .expect("a server on 127.0.0.1");
    let options = TcpStoreOptions::default()
        .with_timeout(PATIENCE)
        .with_connect_timeout(PATIENCE)
        .with_io_margin(PATIENCE);
    let client = TcpStore::connect_to(server.local_addr(), options).expect("a client of it");
    counter_loses_nothing(&client);
}
