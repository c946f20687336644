//! The failure alarm on groups without communicators: raised by a
//! failure that asks the other ranks, read only by a rank that waits, and
//! failing that rank with the first rank's cause. The watchdog's clock is
//! the `now` each call is given. The groups have no liveness beat, which
//! would push the alarm (`crate::engine::liveness` tests that).

use crate::generations::recovery::Recovery;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::time::{Duration, Instant};

use super::*;
use crate::ErrorKind;
use crate::engine::group::ProcessGroup;
use crate::generations::heal::tests::world_on;
use crate::engine::failing::cuda_is_shutting_down;
use crate::health::watchdog::{Completion, PendingOp, Progress};
use cudarc::driver::DriverError;
use cudarc::driver::sys::CUresult;
use nccl_rendezvous::{CompareSet, InProcessStore, Result as StoreResult, Store};
use nccl_test_support::within;

/// Hang guard of the waits below: only an alarm never read outlasts it.
const PATIENCE: Duration = Duration::from_secs(60);

/// An operation that never ends (a collective waiting for a lost rank).
struct Waiting;

impl Completion for Waiting {
    fn poll(&self) -> Progress {
        Progress::Running
    }

    fn fail(&self, _failure: &Arc<Failure>) {}

    fn into_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }
}

/// An hour from now: operations enqueued then look new to the real
/// watchdog, which ticks these groups too, so only the calls below (whose
/// `now` is injected) read the alarm.
pub(crate) fn later() -> Instant {
    Instant::now() + Duration::from_secs(3600)
}

/// Puts a never-ending operation, enqueued at `enqueued`, on `group`.
pub(crate) fn wait_in_collective(group: &ProcessGroup, enqueued: Instant) {
    group
        .inner
        .tracker
        .push_with::<_, ()>(
            |_| {
                let op = PendingOp {
                    seq: 0,
                    enqueued,
                    timeout: Duration::from_secs(600),
                    completion: Arc::new(Waiting),
                };
                Ok((op, ()))
            },
            |_, _| {},
        )
        .expect("pushed");
}


/// Ranks `0..world` of group `name` on a [`Counting`] store of their
/// own, rank `waiter` waiting in a collective since the returned instant.
fn waiting_world(
    name: &str,
    world: usize,
    waiter: usize,
) -> (Arc<Counting>, Arc<dyn Store>, Vec<ProcessGroup>, Instant) {
    let counting = Arc::new(Counting::default());
    let store: Arc<dyn Store> = Arc::clone(&counting) as _;
    let groups = world_on(&store, name, world);
    let start = later();
    wait_in_collective(&groups[waiter], start);
    (counting, store, groups, start)
}

/// The in-process store, counting the reads of the alarm; while `held`
/// is set a read of the alarm waits for it to clear, and with `panics` it
/// panics (a user's store may).
#[derive(Default)]
struct Counting {
    store: InProcessStore,
    alarm_reads: AtomicUsize,
    held: AtomicBool,
    panics: AtomicBool,
}

impl Store for Counting {
    fn set(&self, key: &str, value: &[u8]) -> StoreResult<()> {
        self.store.set(key, value)
    }
    fn get(&self, key: &str, timeout: Duration) -> StoreResult<Vec<u8>> {
        self.store.get(key, timeout)
    }
    fn try_get(&self, key: &str) -> StoreResult<Option<Vec<u8>>> {
        if key.ends_with("/failed") {
            self.alarm_reads.fetch_add(1, Ordering::SeqCst);
            while self.held.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
            assert!(!self.panics.load(Ordering::SeqCst), "a store that panics");
        }
        self.store.try_get(key)
    }
    fn compare_set(
        &self,
        key: &str,
        expected: Option<&[u8]>,
        new: &[u8],
    ) -> StoreResult<CompareSet> {
        self.store.compare_set(key, expected, new)
    }
    fn add(&self, key: &str, delta: i64) -> StoreResult<i64> {
        self.store.add(key, delta)
    }
    fn wait(&self, keys: &[&str], timeout: Duration) -> StoreResult<()> {
        self.store.wait(keys, timeout)
    }
    fn delete(&self, key: &str) -> StoreResult<bool> {
        self.store.delete(key)
    }
    fn default_timeout(&self) -> Duration {
        self.store.default_timeout()
    }
}

/// Whether `group` ever started a read of the alarm (the start is
/// recorded before the read's thread is spawned).
fn started_a_read(group: &ProcessGroup) -> bool {
    group.inner.listener.last.lock().unwrap().is_some()
}

/// Waits until `group`'s read of the alarm has ended.
fn read_ended(group: &ProcessGroup) {
    let inner = Arc::clone(&group.inner);
    until("the read to end", move || {
        !inner.listener.reading.load(Ordering::Acquire)
    });
}

/// Waits until `counting` has seen `n` reads of the alarm.
fn reads_reach(counting: &Arc<Counting>, n: usize) {
    let counting = Arc::clone(counting);
    until("the reads", move || {
        counting.alarm_reads.load(Ordering::SeqCst) >= n
    });
}

/// Waits until `holds`; fails the test after [`PATIENCE`].
pub(crate) fn until(what: &str, holds: impl Fn() -> bool + Send + 'static) {
    within(what, PATIENCE, move || {
        while !holds() {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
}

/// Waits until `store` holds `key`.
fn until_set(store: &Arc<dyn Store>, key: &'static str) {
    let store = Arc::clone(store);
    until(key, move || store.try_get(key).unwrap().is_some());
}

/// Fails `group` as the watchdog would on an operation's timeout, on a
/// thread of its own (its exchange waits for the other ranks' reports).
fn fail_by_timeout(group: &ProcessGroup) -> std::thread::JoinHandle<()> {
    let inner = Arc::clone(&group.inner);
    std::thread::spawn(move || {
        let cause = FailureCause::Timeout {
            timeout: Duration::from_secs(3),
            ran: Duration::from_secs(3),
        };
        inner.fail(cause, None, Finish::Here);
    })
}

/// The stored form of rank `rank`'s alarm for `cause`, saying whether it
/// knew of a lost process.
fn alarm_bytes(rank: usize, cause: &str, peer_lost: bool) -> Vec<u8> {
    serde_json::to_vec(&Raised {
        rank,
        cause: cause.into(),
        unresponsive: None,
        peer_lost,
    })
    .unwrap()
}

/// `group`'s failure, once the alarm its read found failed it.
fn failing_by_the_alarm(group: &ProcessGroup) -> Arc<Failure> {
    let group = group.clone();
    within("a rank failing by the alarm", PATIENCE, move || loop {
        if let Some(failure) = group.failure() {
            return failure;
        }
        std::thread::sleep(Duration::from_millis(1));
    })
}

#[test]
fn a_waiting_rank_finds_the_first_ranks_alarm_and_fails_naming_it() {
    let (counting, store, groups, start) = waiting_world("alarm", 3, 2);
    let failing = fail_by_timeout(&groups[0]);
    // Rank 0 raises the alarm before anything else it does.
    until_set(&store, "alarm/0/failed");
    let reads = || counting.alarm_reads.load(Ordering::SeqCst);
    let before = reads();
    // Waiting less than LISTEN_AFTER: no read starts.
    groups[2].inner.listen_for_alarm(start + LISTEN_AFTER / 2);
    assert!(!started_a_read(&groups[2]), "a short wait reads nothing");
    // Rank 1 waits for nothing: it never reads.
    groups[1].inner.listen_for_alarm(start + LISTEN_AFTER * 10);
    assert!(
        !started_a_read(&groups[1]),
        "a rank with nothing pending reads nothing"
    );
    groups[2].inner.listen_for_alarm(start + LISTEN_AFTER);
    let failure = failing_by_the_alarm(&groups[2]);
    assert!(
        matches!(&failure.cause, FailureCause::PeerFailed { rank: 0, cause } if cause.contains("timeout of 3s")),
        "{:?}",
        failure.cause
    );
    let error = crate::GroupError::Failed(Arc::clone(&failure));
    assert_eq!(error.kind(), ErrorKind::PeerFailed, "{error}");
    assert!(
        error
            .to_string()
            .contains("rank 0 of the group failed first and raised the alarm"),
        "{error}"
    );
    assert!(reads() > before, "rank 2 read the alarm");
    // Rank 2's failure does not overwrite rank 0's alarm.
    let alarm: Raised =
        serde_json::from_slice(&store.try_get("alarm/0/failed").unwrap().unwrap()).unwrap();
    assert_eq!(alarm.rank, 0);
    // Rank 1 fails too (its exchange reports), so rank 0's ends.
    fail_by_timeout(&groups[1]).join().unwrap();
    failing.join().unwrap();
    let details = failure.wait_details(PATIENCE).expect("rank 2's details");
    let reported: Vec<usize> = details.peers.iter().map(|p| p.rank).collect();
    assert_eq!(reported, vec![0, 1, 2], "every rank reported: none silent");
}

#[test]
fn reads_are_spaced_and_one_at_a_time() {
    let (counting, _store, groups, start) = waiting_world("spaced", 2, 1);
    let reads = || counting.alarm_reads.load(Ordering::SeqCst);
    let at = start + LISTEN_AFTER;
    // The first read is held in the store.
    counting.held.store(true, Ordering::SeqCst);
    groups[1].inner.listen_for_alarm(at);
    reads_reach(&counting, 1);
    // Within LISTEN_EVERY of it, none starts; past it, none while the
    // first still runs.
    groups[1].inner.listen_for_alarm(at + LISTEN_EVERY / 2);
    groups[1].inner.listen_for_alarm(at + LISTEN_EVERY * 3);
    assert!(groups[1].inner.listener.reading.load(Ordering::Acquire));
    assert_eq!(reads(), 1, "one read at a time");
    counting.held.store(false, Ordering::SeqCst);
    read_ended(&groups[1]);
    assert_eq!(reads(), 1);
    groups[1].inner.listen_for_alarm(at + LISTEN_EVERY * 4);
    reads_reach(&counting, 2);
    read_ended(&groups[1]);
    assert!(groups[1].failure().is_none(), "no alarm, no failure");
}

#[test]
fn a_panicking_store_or_an_own_alarm_fails_nothing_and_reading_goes_on() {
    let (counting, store, groups, start) = waiting_world("panics", 2, 1);
    counting.panics.store(true, Ordering::SeqCst);
    groups[1].inner.listen_for_alarm(start + LISTEN_AFTER);
    reads_reach(&counting, 1);
    read_ended(&groups[1]);
    counting.panics.store(false, Ordering::SeqCst);
    // This rank's own alarm (a failure of its own, seen late) is not
    // another rank's.
    let own = alarm_bytes(1, "its own", false);
    store.set("panics/0/failed", &own).unwrap();
    groups[1]
        .inner
        .listen_for_alarm(start + LISTEN_AFTER + LISTEN_EVERY);
    reads_reach(&counting, 2);
    read_ended(&groups[1]);
    assert!(groups[1].failure().is_none(), "{:?}", groups[1].failure());
}

/// A dropped group is not failed by the alarm its read found, nor kept
/// alive by the read.
#[test]
fn a_read_keeps_no_dropped_group_alive() {
    let (counting, store, mut groups, start) = waiting_world("dropped", 2, 1);
    let other = alarm_bytes(0, "did not complete", false);
    store.set("dropped/0/failed", &other).unwrap();
    counting.held.store(true, Ordering::SeqCst);
    groups[1].inner.listen_for_alarm(start + LISTEN_AFTER);
    reads_reach(&counting, 1);
    let held = Arc::downgrade(&groups[1].inner);
    drop(groups.pop());
    counting.held.store(false, Ordering::SeqCst);
    until("the dropped group to go", move || held.strong_count() == 0);
    // A failure would have published this rank's report for the others.
    assert_eq!(store.try_get("dropped/0/progress/1").unwrap(), None);
}

#[test]
fn an_alarmed_rank_and_a_lone_rank_raise_none() {
    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    let lone = world_on(&store, "lone", 1);
    lone[0].inner.fail(
        FailureCause::Timeout {
            timeout: Duration::from_secs(1),
            ran: Duration::from_secs(1),
        },
        None,
        Finish::Here,
    );
    assert_eq!(store.try_get("lone/0/failed").unwrap(), None);
    let pair = world_on(&store, "pair", 2);
    let peer = FailureCause::PeerFailed {
        rank: 0,
        cause: "did not complete".into(),
    };
    let failing = {
        let inner = Arc::clone(&pair[1].inner);
        std::thread::spawn(move || inner.fail(peer, None, Finish::Here))
    };
    // Rank 1 publishes its report after the point where it would raise.
    until_set(&store, "pair/0/progress/1");
    assert_eq!(
        store.try_get("pair/0/failed").unwrap(),
        None,
        "a failure the alarm caused raises none"
    );
    fail_by_timeout(&pair[0]).join().unwrap();
    failing.join().unwrap();
    let alarm: Raised =
        serde_json::from_slice(&store.try_get("pair/0/failed").unwrap().unwrap()).unwrap();
    assert_eq!(alarm.rank, 0);
}

/// An alarm whose raising rank knew of a lost process makes the ranks it
/// fails abort rather than revoke (the heal re-creates after a death, and a
/// revoke would only hold it up); a rank failed by its own detection still
/// hears of it before its release.
#[test]
fn an_alarm_after_a_lost_process_makes_its_ranks_abort_instead_of_revoking() {
    let (_counting, store, groups, start) = waiting_world("died", 3, 2);
    let died = alarm_bytes(0, "ncclRemoteError: remote process exited", true);
    store.set("died/0/failed", &died).unwrap();
    groups[2].inner.listen_for_alarm(start + LISTEN_AFTER);
    let failure = failing_by_the_alarm(&groups[2]);
    assert!(
        matches!(&failure.cause, FailureCause::PeerFailed { rank: 0, .. }),
        "{:?}",
        failure.cause
    );
    assert!(groups[2].inner.peer_died(), "told of the lost process");
    assert!(!groups[2].inner.revokes(&failure), "aborts, not revokes");
    // Rank 1 fails by its own timeout, the alarm already written: its
    // failure reads the alarm before its release.
    assert!(!groups[1].inner.peer_died());
    // Rank 0 reports too, so rank 1's exchange ends at once.
    let zero = fail_by_timeout(&groups[0]);
    fail_by_timeout(&groups[1]).join().unwrap();
    zero.join().unwrap();
    let own = groups[1].failure().expect("rank 1 failed");
    assert!(groups[1].inner.peer_died(), "heard of it from the alarm");
    assert!(!groups[1].inner.revokes(&own));
}

/// A timeout's alarm says no process was lost: the ranks it fails keep the
/// revoke, for the heal's shrink.
#[test]
fn a_timeouts_alarm_says_no_death_and_its_ranks_keep_the_revoke() {
    let (_counting, store, groups, start) = waiting_world("slow", 3, 2);
    let failing = fail_by_timeout(&groups[0]);
    until_set(&store, "slow/0/failed");
    let alarm: Raised =
        serde_json::from_slice(&store.try_get("slow/0/failed").unwrap().unwrap()).unwrap();
    assert!(!alarm.peer_lost, "{alarm:?}");
    groups[2].inner.listen_for_alarm(start + LISTEN_AFTER);
    let failure = failing_by_the_alarm(&groups[2]);
    assert!(!groups[2].inner.peer_died(), "a timeout is no death");
    assert!(
        groups[2].inner.revokes(&failure),
        "the revoke stays for the shrink"
    );
    fail_by_timeout(&groups[1]).join().unwrap();
    failing.join().unwrap();
    // A death's alarm read after the group failed is still noted.
    let died = alarm_bytes(1, "ncclRemoteError", true);
    store.set("slow/0/failed", &died).unwrap();
    // Held by its owner and by the reading thread, as the beat's thread holds it.
    Arc::clone(&groups[2].inner).alarm_pushed();
    assert!(groups[2].inner.peer_died(), "noted after the failure too");
}

/// A rank that knows of a death, failing after another rank's alarm said
/// none, marks that alarm: it keeps naming the first rank, and the ranks
/// that read it later abort too.
#[test]
fn a_later_rank_that_knows_of_a_death_marks_the_first_alarm() {
    let (_counting, store, groups, start) = waiting_world("marked", 3, 2);
    let first = fail_by_timeout(&groups[0]);
    until_set(&store, "marked/0/failed");
    groups[1]
        .inner
        .listener
        .peer_lost
        .store(true, Ordering::SeqCst);
    let second = fail_by_timeout(&groups[1]);
    let read = {
        let store = Arc::clone(&store);
        move || -> Raised {
            serde_json::from_slice(&store.try_get("marked/0/failed").unwrap().unwrap()).unwrap()
        }
    };
    until("the alarm marked", {
        let read = read.clone();
        move || read().peer_lost
    });
    assert_eq!(read().rank, 0, "the first rank stays named");
    groups[2].inner.listen_for_alarm(start + LISTEN_AFTER);
    let failure = failing_by_the_alarm(&groups[2]);
    assert!(!groups[2].inner.revokes(&failure), "aborts, not revokes");
    second.join().unwrap();
    first.join().unwrap();
}

/// A process exiting with operations pending (its CUDA shutting down under
/// the watchdog's polls, which then calls `note_own_exit`: the tick's
/// branch is not driven here, as formatting a driver error needs the
/// driver) raises an alarm
/// that says the group lost a process, so the ranks it fails abort rather
/// than revoke: the others, not told by NCCL, would otherwise hold the heal
/// for their revokes.
#[test]
fn an_exiting_process_raises_an_alarm_that_says_a_process_is_lost() {
    assert!(cuda_is_shutting_down(&DriverError(
        CUresult::CUDA_ERROR_DEINITIALIZED
    )));
    assert!(!cuda_is_shutting_down(&DriverError(
        CUresult::CUDA_ERROR_ILLEGAL_ADDRESS
    )));
    let (_counting, store, groups, start) = waiting_world("exiting", 3, 2);
    groups[0].inner.note_own_exit();
    let exiting = fail_by_timeout(&groups[0]);
    until_set(&store, "exiting/0/failed");
    let alarm: Raised =
        serde_json::from_slice(&store.try_get("exiting/0/failed").unwrap().unwrap()).unwrap();
    assert!(alarm.peer_lost, "{alarm:?}");
    groups[2].inner.listen_for_alarm(start + LISTEN_AFTER);
    let failure = failing_by_the_alarm(&groups[2]);
    assert!(!groups[2].inner.revokes(&failure), "aborts, not revokes");
    fail_by_timeout(&groups[1]).join().unwrap();
    exiting.join().unwrap();
}

/// An alarm written before the field existed reads as no death.
#[test]
fn an_alarm_without_the_death_field_reads_as_none() {
    let raised: Raised = serde_json::from_slice(br#"{"rank":1,"cause":"timed out"}"#).unwrap();
    assert!(!raised.peer_lost);
    assert_eq!(raised.rank, 1);
}
