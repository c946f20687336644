//! The [`Store`] conformance suite: the behaviour every rendezvous store
//! must show, for this crate's own stores and for any out-of-tree one (feature
//! `conformance`).
//!
//! ```no_run
//! # use nccl_rendezvous::InProcessStore;
//! // In an integration test of a crate with its own `Store`:
//! nccl_rendezvous::conformance::conformance(&InProcessStore::new());
//! ```

use std::fmt::{Debug, Display};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::Duration;

use crate::{CompareSet, PrefixStore, Store, StoreError};

/// The timeout of the checks that expect one, and of reads that must not
/// wait.
const SHORT: Duration = Duration::from_millis(150);

/// How long a check waits for what must come (another thread's write, a
/// timeout that must fire): a hang guard, which only a deadlock or a lost
/// wake-up outlasts, even on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(60);

/// Proves that `store`, which must be empty, behaves as the [`Store`]
/// trait documents (torch `c10d::Store` semantics), panicking with the
/// broken property otherwise:
///
/// * `set` then `get` returns the value, a second `set` replaces it, and
///   `get_default` reads it too;
/// * `try_get` never waits; `delete` reports whether the key was set and
///   removes it;
/// * `add` counts from 0 and stores decimal text; a value that is not an
///   integer gives [`StoreError::NotAnInteger`] naming the key, an overflow
///   [`StoreError::Overflow`] and changes nothing; 4 threads adding at once
///   lose no increment;
/// * `compare_set` follows every case of its documentation, its `swapped`
///   flag included (also when another caller already stored the same
///   value), and of 4 threads electing a leader with the same value at once
///   exactly one swaps;
/// * `get` of a missing key fails with [`StoreError::Timeout`] naming the
///   key and reporting a wait of at least the timeout;
/// * `wait` on no keys returns at once, on set keys at once, and on missing
///   ones times out naming exactly the missing keys; a `set` from another
///   thread releases a `wait` and a `get`;
/// * values are byte strings (every byte value, and empty), keys may hold
///   any characters (`/`, `..`, spaces, Cyrillic, a newline, a NUL);
/// * [`PrefixStore`]s with different prefixes never see each other's keys
///   (nor their counters or waits), map to `prefix/key` in `store`, name
///   the full key in errors, and nest.
///
/// Fast: well under a second for an in-memory store (the timeouts it
/// expects are 150 ms). No check measures time: a timeout that never fires
/// fails its check after a minute (the call is then released by a `set` of
/// what it waits for), and a store that is merely slow passes.
pub fn conformance(store: &dyn Store) {
    conformance_except(store, &[]);
}

/// A part of [`conformance`], named for a store that documents one it
/// cannot meet (e.g. torch's c10d store, whose compare-and-set cannot say
/// whether this caller swapped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Section {
    /// `set`, `get`, overwrite, `get_default`.
    SetGet,
    /// `try_get` and `delete`.
    TryGetDelete,
    /// `add`: counting, decimal text, refusals, racing threads.
    Add,
    /// Every case of `compare_set`, its `swapped` flag, racing electors.
    CompareSet,
    /// A timed-out `get` names its key.
    GetTimeout,
    /// `wait` on no, set, missing and later-set keys.
    Wait,
    /// A `get` released by another thread's `set`.
    GetReleased,
    /// Binary and empty values, odd keys.
    Values,
    /// `PrefixStore` scoping.
    Prefixes,
}

/// The checks of one section.
type Check = fn(&dyn Store);

/// Every section of [`conformance`], in the order it runs them.
const SECTIONS: [(Section, Check); 9] = [
    (Section::SetGet, set_get_overwrite),
    (Section::TryGetDelete, try_get_and_delete),
    (Section::Add, add_counts),
    (Section::CompareSet, compare_set_semantics),
    (Section::GetTimeout, get_times_out_naming_key),
    (Section::Wait, wait_semantics),
    (Section::GetReleased, get_waits_for_concurrent_set),
    (Section::Values, binary_and_empty_values),
    (Section::Prefixes, prefix_scoping),
];

/// [`conformance`] without the sections in `skip`: for a store that
/// documents why it cannot meet them (and tests what it does instead).
pub fn conformance_except(store: &dyn Store, skip: &[Section]) {
    for (section, check) in SECTIONS {
        if !skip.contains(&section) {
            check(store);
        }
    }
}

/// The value of a call that must succeed.
#[track_caller]
fn ok<T, E: Display>(result: Result<T, E>, what: &str) -> T {
    result.unwrap_or_else(|e| panic!("store conformance: {what} failed: {e}"))
}

/// The error of a call that must fail.
#[track_caller]
fn fails<T: Debug>(result: Result<T, StoreError>, what: &str) -> StoreError {
    match result {
        Ok(value) => panic!("store conformance: {what} must fail, it returned {value:?}"),
        Err(error) => error,
    }
}

/// The error of `op`, which must time out.
///
/// Should its timeout never fire, `release` (a `set` of what `op` waits for)
/// runs after [`PATIENCE`]: `op` then returns a value and the check fails
/// instead of hanging.
fn times_out<T: Debug>(
    what: &str,
    op: impl FnOnce() -> Result<T, StoreError>,
    release: impl FnOnce() + Send,
) -> StoreError {
    let (returned, guard) = mpsc::channel::<()>();
    thread::scope(|s| {
        s.spawn(move || {
            if guard.recv_timeout(PATIENCE) == Err(RecvTimeoutError::Timeout) {
                release();
            }
        });
        let result = op();
        drop(returned);
        fails(result, what)
    })
}

fn set_get_overwrite(store: &dyn Store) {
    ok(store.set("a", b"1"), "set a");
    assert_eq!(ok(store.get("a", SHORT), "get a"), b"1");
    ok(store.set("a", b"two"), "set a again");
    assert_eq!(
        ok(store.get("a", SHORT), "get a"),
        b"two",
        "a second set replaces the value"
    );
    assert_eq!(ok(store.get_default("a"), "get_default a"), b"two");
}

fn try_get_and_delete(store: &dyn Store) {
    assert_eq!(ok(store.try_get("td"), "try_get td"), None);
    ok(store.set("td", b"x"), "set td");
    assert_eq!(
        ok(store.try_get("td"), "try_get td").as_deref(),
        Some(&b"x"[..])
    );
    assert!(ok(store.delete("td"), "delete td"), "delete of a set key");
    assert!(
        !ok(store.delete("td"), "delete td again"),
        "delete of a deleted key"
    );
    assert_eq!(ok(store.try_get("td"), "try_get td after delete"), None);
}

fn add_counts(store: &dyn Store) {
    assert_eq!(ok(store.add("cnt", 1), "add"), 1, "an absent counter is 0");
    assert_eq!(ok(store.add("cnt", 41), "add"), 42);
    assert_eq!(ok(store.add("cnt", -50), "add"), -8);
    assert_eq!(
        ok(store.get("cnt", SHORT), "get a counter"),
        b"-8",
        "counters are decimal text"
    );
    assert_eq!(ok(store.add("cnt", 0), "add 0"), -8);

    ok(store.set("txt", b"hello"), "set txt");
    let err = fails(store.add("txt", 1), "add to a text value");
    assert!(matches!(err, StoreError::NotAnInteger { .. }), "{err:?}");
    assert!(err.to_string().contains("\"txt\""), "{err}");

    ok(store.set("big", i64::MAX.to_string().as_bytes()), "set big");
    let err = fails(store.add("big", 1), "add past i64::MAX");
    assert!(matches!(err, StoreError::Overflow { .. }), "{err:?}");
    assert_eq!(
        ok(store.get("big", SHORT), "get big"),
        i64::MAX.to_string().as_bytes(),
        "a refused add changes nothing"
    );

    thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..25 {
                    ok(store.add("racy", 1), "a racing add");
                }
            });
        }
    });
    assert_eq!(
        ok(store.add("racy", 0), "add 0"),
        100,
        "4 threads adding 25 times each at once"
    );
}

fn compare_set_semantics(store: &dyn Store) {
    let cs = |key: &str, expected: Option<&[u8]>, new: &[u8]| {
        ok(store.compare_set(key, expected, new), "compare_set")
    };
    let swapped_to = |value: &[u8]| CompareSet {
        swapped: true,
        current: Some(value.to_vec()),
    };
    let kept = |value: Option<&[u8]>| CompareSet {
        swapped: false,
        current: value.map(<[u8]>::to_vec),
    };
    assert_eq!(
        cs("cs", None, b"v1"),
        swapped_to(b"v1"),
        "absent, expected absent: swaps"
    );
    assert_eq!(ok(store.get("cs", SHORT), "get cs"), b"v1");
    assert_eq!(
        cs("cs", None, b"zz"),
        kept(Some(b"v1")),
        "present, expected absent: no change, returns the value"
    );
    assert_eq!(
        cs("cs", Some(b"v1"), b"v2"),
        swapped_to(b"v2"),
        "present, expected matches: swaps"
    );
    assert_eq!(
        cs("cs", Some(b"v1"), b"v3"),
        kept(Some(b"v2")),
        "present, expected differs: no change, returns the value"
    );
    assert_eq!(
        cs("cs", Some(b"v1"), b"v2"),
        kept(Some(b"v2")),
        "present, another caller already stored `new`: not swapped"
    );
    assert_eq!(ok(store.get("cs", SHORT), "get cs"), b"v2");
    assert_eq!(
        cs("cs", Some(b"v2"), b"v2"),
        swapped_to(b"v2"),
        "present, expected matches and equals new: swaps"
    );
    assert_eq!(
        cs("cs-absent", Some(b"e"), b"n"),
        kept(None),
        "absent, expected a value: no change, reports the key absent"
    );
    assert_eq!(
        cs("cs-absent", Some(b"n"), b"n"),
        kept(None),
        "absent, expected the new value: still no swap"
    );
    assert_eq!(
        ok(store.try_get("cs-absent"), "try_get cs-absent"),
        None,
        "absent, expected a value: the key stays absent"
    );
    ok(store.set("cs-empty", b""), "set cs-empty");
    assert_eq!(
        cs("cs-empty", None, b"x"),
        kept(Some(b"")),
        "an empty value is present, not absent"
    );
    assert_eq!(
        cs("cs-empty", Some(b""), b"x"),
        swapped_to(b"x"),
        "an empty value matches an empty expected value"
    );

    // Every elector offers the same value, so only the flag can tell the
    // winner from the others.
    let outcomes: Vec<CompareSet> = thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| s.spawn(|| cs("leader", None, b"elected")))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("an elector thread"))
            .collect()
    });
    let winners = outcomes.iter().filter(|o| o.swapped).count();
    assert_eq!(winners, 1, "exactly one of 4 racing electors swaps");
    for outcome in &outcomes {
        assert_eq!(
            outcome.current.as_deref(),
            Some(&b"elected"[..]),
            "every racing elector sees the elected value"
        );
    }
}

fn get_times_out_naming_key(store: &dyn Store) {
    let err = times_out(
        "get of a missing key",
        || store.get("missing/key", SHORT),
        || ok(store.set("missing/key", b"released"), "release a stuck get"),
    );
    match &err {
        StoreError::Timeout { keys, waited, .. } => {
            assert_eq!(keys, &["missing/key".to_string()]);
            assert!(*waited >= SHORT, "reports waiting {waited:?}");
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(err.to_string().contains("\"missing/key\""), "{err}");
}

fn wait_semantics(store: &dyn Store) {
    ok(store.wait(&[], SHORT), "wait on no keys");
    ok(store.set("w1", b""), "set w1");
    ok(store.set("w2", b""), "set w2");
    ok(store.wait(&["w1", "w2"], SHORT), "wait on set keys");
    let err = times_out(
        "wait on missing keys",
        || store.wait(&["w1", "w3", "w4"], SHORT),
        || {
            ok(store.set("w3", b""), "release a stuck wait");
            ok(store.set("w4", b""), "release a stuck wait");
        },
    );
    match &err {
        StoreError::Timeout { keys, .. } => {
            assert_eq!(
                keys,
                &["w3".to_string(), "w4".to_string()],
                "the timeout names exactly the missing keys"
            );
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    thread::scope(|s| {
        s.spawn(|| {
            thread::sleep(Duration::from_millis(50));
            ok(store.set("w5", b"late"), "set w5 from another thread");
        });
        ok(
            store.wait(&["w1", "w5"], PATIENCE),
            "a wait released by another thread's set",
        );
    });
}

fn get_waits_for_concurrent_set(store: &dyn Store) {
    thread::scope(|s| {
        let getter = s.spawn(|| store.get("later", PATIENCE));
        thread::sleep(Duration::from_millis(50));
        ok(store.set("later", b"arrived"), "set later");
        let got = ok(
            getter.join().expect("the getter thread"),
            "a get released by another thread's set",
        );
        assert_eq!(got, b"arrived");
    });
}

fn binary_and_empty_values(store: &dyn Store) {
    let bin: Vec<u8> = (0..=255u8).collect();
    ok(store.set("bin", &bin), "set every byte value");
    assert_eq!(ok(store.get("bin", SHORT), "get bin"), bin);
    ok(store.set("empty", b""), "set an empty value");
    assert_eq!(ok(store.get("empty", SHORT), "get empty"), b"");
    let odd = "../we ird/ключ\n\0";
    ok(store.set(odd, b"ok"), "set an odd key");
    assert_eq!(ok(store.get(odd, SHORT), "get an odd key"), b"ok");
    assert!(ok(store.delete(odd), "delete an odd key"));
}

fn prefix_scoping(store: &dyn Store) {
    let a = ok(PrefixStore::new(store, "groupA"), "PrefixStore groupA");
    let b = ok(PrefixStore::new(store, "groupB"), "PrefixStore groupB");
    ok(a.set("uid", b"A"), "set groupA/uid");
    ok(b.set("uid", b"B"), "set groupB/uid");
    assert_eq!(ok(a.get("uid", SHORT), "get groupA/uid"), b"A");
    assert_eq!(ok(b.get("uid", SHORT), "get groupB/uid"), b"B");
    assert_eq!(ok(a.add("n", 1), "add groupA/n"), 1);
    assert_eq!(
        ok(b.try_get("n"), "try_get groupB/n"),
        None,
        "a counter of one prefix is not seen by another"
    );
    assert_eq!(
        ok(store.get("groupA/uid", SHORT), "get groupA/uid unscoped"),
        b"A",
        "a prefixed key is prefix/key in the store"
    );
    assert!(ok(a.delete("uid"), "delete groupA/uid"));
    assert_eq!(
        ok(b.get("uid", SHORT), "get groupB/uid"),
        b"B",
        "a delete under one prefix leaves another's key"
    );
    let err = times_out(
        "get of a key of another prefix",
        || b.get("only-in-a", SHORT),
        || ok(b.set("only-in-a", b""), "release a stuck get"),
    );
    assert!(err.to_string().contains("\"groupB/only-in-a\""), "{err}");
    ok(a.set("w", b""), "set groupA/w");
    let err = times_out(
        "wait on a key of another prefix",
        || b.wait(&["w"], SHORT),
        || ok(b.set("w", b""), "release a stuck wait"),
    );
    assert!(
        err.is_timeout(),
        "a wait under one prefix is not released by another's key: {err:?}"
    );
    ok(a.wait(&["w"], SHORT), "wait on groupA/w");
    let nested = ok(PrefixStore::new(&a, "sub"), "nested PrefixStore");
    ok(nested.set("k", b"n"), "set groupA/sub/k");
    assert_eq!(
        ok(
            store.get("groupA/sub/k", SHORT),
            "get groupA/sub/k unscoped"
        ),
        b"n",
        "nested prefixes join with /"
    );
}
