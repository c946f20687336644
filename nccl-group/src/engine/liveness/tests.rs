//! The liveness beat: the watch's rule on an injected clock, then groups
//! without communicators on the in-process store (a stopped process is a
//! rank that beat once and no more), with long bounds and liveness checks
//! only (no wall-clock assertion).

use super::*;
use crate::ErrorKind;
use crate::engine::alarm::tests::{later, until, wait_in_collective};
use crate::engine::group::ProcessGroup;
use crate::generations::heal::tests::{heal_all, options};
use crate::generations::heal::{self, HealOptions};
use crate::generations::lifecycle::Lifecycle;
use crate::generations::recovery::Recovery;
use nccl_rendezvous::{
    FileStore, InProcessStore, TcpStore, TcpStoreOptions, TcpStoreServerOptions,
};

/// Hang guard of the waits below: only a beat or an alarm that never
/// works outlasts it (as the alarm's tests' [`until`]).
const PATIENCE: Duration = Duration::from_secs(60);

/// The watch's bound in the injected-clock tests.
const BOUND: Duration = Duration::from_secs(1);

fn beat(count: u64) -> Option<Vec<u8>> {
    Some(count.to_string().into_bytes())
}

#[test]
fn a_still_beat_is_named_once_it_stood_still_for_the_bound() {
    let start = Instant::now();
    let at = |ms: u64| start + Duration::from_millis(ms);
    let mut watch = Watch::new(BOUND, vec![1, 2]);
    assert_eq!(watch.observe(at(0), &[beat(1), beat(1)]), None);
    // Rank 2 beats on, rank 1 stands still from its first read at 0.
    let mut count = 1;
    for ms in (250..1000).step_by(250) {
        count += 1;
        assert_eq!(watch.observe(at(ms), &[beat(1), beat(count)]), None, "{ms} ms");
    }
    assert_eq!(
        watch.observe(at(1000), &[beat(1), beat(count + 1)]),
        Some((1, BOUND))
    );
    // It stays named while it stands still.
    assert_eq!(
        watch.observe(at(1250), &[beat(1), beat(count + 2)]),
        Some((1, Duration::from_millis(1250)))
    );
}

#[test]
fn a_late_watcher_a_rank_not_yet_beating_and_a_rank_that_left_are_not_named() {
    let start = Instant::now();
    let at = |ms: u64| start + Duration::from_millis(ms);
    let mut watch = Watch::new(BOUND, vec![1, 2, 3]);
    assert_eq!(watch.observe(at(0), &[beat(1), None, beat(1)]), None);
    // The watcher was descheduled for 2 s: it cannot tell, and starts the
    // clocks again.
    assert_eq!(
        watch.observe(at(2000), &[beat(1), None, Some(LEFT.to_vec())]),
        None
    );
    for ms in (2250..3000).step_by(250) {
        assert_eq!(
            watch.observe(at(ms), &[beat(1), None, Some(LEFT.to_vec())]),
            None,
            "{ms} ms"
        );
    }
    // Rank 1 still stands still a bound after the restart; rank 2 never
    // beat and rank 3 left: neither is watched.
    assert_eq!(
        watch.observe(at(3000), &[beat(1), None, Some(LEFT.to_vec())]),
        Some((1, BOUND))
    );
    // Rank 2's first beat starts its clock.
    let mut watch = Watch::new(BOUND, vec![2]);
    assert_eq!(watch.observe(at(0), &[None]), None);
    assert_eq!(watch.observe(at(500), &[beat(1)]), None);
    assert_eq!(watch.observe(at(1000), &[beat(1)]), None);
    assert_eq!(watch.observe(at(1500), &[beat(1)]), Some((2, BOUND)));
}

/// Ranks `0..world` of group `name` on `store`, with `liveness`.
fn beating(store: &Arc<dyn Store>, name: &str, world: usize, liveness: Liveness) -> Vec<ProcessGroup> {
    heal::tests::world_with(store, name, world, &options().with_liveness(liveness))
}

/// `group`'s failure, once it failed.
fn failure_of(group: &ProcessGroup) -> Arc<crate::failure::Failure> {
    let watched = group.clone();
    until("the group to fail", move || watched.failure().is_some());
    group.failure().expect("failed")
}

/// Waits until the beat at `key` has gone `spans` beats past its count
/// now (a hang guard bounds the wait, not the beat's pace).
fn beats_past(store: &Arc<dyn Store>, key: &'static str, spans: u128) {
    let first = u128::from(count(store, key));
    let store = Arc::clone(store);
    until(key, move || u128::from(count(&store, key)) >= first + spans);
}

/// A beat's count as `store` has it (0: none yet).
fn count(store: &Arc<dyn Store>, key: &str) -> u64 {
    let bytes = store.try_get(key).unwrap().unwrap_or_default();
    String::from_utf8_lossy(&bytes).parse().unwrap_or(0)
}

#[test]
fn a_stopped_rank_is_named_every_rank_learns_it_and_the_heal_leaves_it_out() {
    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    let bound = Duration::from_secs(2);
    let options = options().with_liveness(Liveness::beat(Duration::from_millis(50), bound));
    // Rank 1 beat once, then its process stopped: it never beats again,
    // nor heals.
    store.set("stopped/0/liveness/1", b"1").unwrap();
    let groups = [0, 2].map(|rank| heal::tests::rank_of(&store, "stopped", (rank, 3), &options));
    // Rank 2 waits in a collective that the polled alarm never reads
    // (enqueued an hour from now): only the pushed alarm reaches it.
    wait_in_collective(&groups[1], later());
    let named = failure_of(&groups[0]);
    match named.cause {
        FailureCause::PeerUnresponsive {
            rank: 1,
            silent_for,
            seen_by: 0,
        } => assert!(silent_for >= bound, "{silent_for:?}"),
        ref other => panic!("{other:?}"),
    }
    // RAS is not asked: the beat named the rank already.
    let details = named.wait_details(PATIENCE).expect("the failure's details");
    assert_eq!(
        details.ras.as_ref().map(ToString::to_string).as_deref(),
        Some(
            "RAS unavailable: not asked: the liveness beat named rank 1 (RAS would not have \
             missed it yet)"
        )
    );
    let told = failure_of(&groups[1]);
    assert!(
        matches!(
            told.cause,
            FailureCause::PeerUnresponsive {
                rank: 1,
                seen_by: 0,
                ..
            }
        ),
        "{:?}",
        told.cause
    );
    let error = crate::GroupError::Failed(Arc::clone(&told));
    let says = error.to_string().contains("rank 1's liveness beat stood still");
    assert_eq!((error.kind(), says), (ErrorKind::PeerLost, true), "{error}");
    assert!(
        groups[1].inner.listener.last.lock().unwrap().is_none(),
        "pushed, not polled"
    );
    // The survivors heal without being told who is lost, and without
    // waiting for rank 1.
    for healed in heal_all(&groups, &HealOptions::new()) {
        let healed = healed.expect("healed");
        assert_eq!(healed.lost(), [1]);
        assert_eq!(healed.group().world_size(), 2);
    }
}

#[test]
fn a_rank_whose_issuing_thread_is_blocked_beats_on_and_is_never_named() {
    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    let every = Duration::from_millis(20);
    let bound = Duration::from_secs(1);
    let groups = beating(&store, "busy", 2, Liveness::beat(every, bound));
    // Rank 1 waits in a collective, and its issuing thread (this one)
    // sleeps while rank 0 watches: for beats that span twice the bound.
    wait_in_collective(&groups[1], later());
    beats_past(&store, "busy/0/liveness/1", 2 * bound.as_millis() / every.as_millis());
    for group in &groups {
        assert!(group.failure().is_none(), "{:?}", group.failure());
    }
    for group in &groups {
        group.abort().expect("abort");
    }
}

/// The alarm pushed through `store`: a rank waiting in a collective fails
/// on another rank's alarm without ever polling it.
fn pushed_through(store: &Arc<dyn Store>) {
    // No rank is named within this test's patience: only the alarm fails.
    let liveness = Liveness::beat(Duration::from_millis(50), PATIENCE * 10);
    let groups = beating(store, "pushed", 2, liveness);
    wait_in_collective(&groups[1], later());
    store
        .set(
            "pushed/0/failed",
            br#"{"rank":0,"cause":"did not complete within its timeout"}"#,
        )
        .unwrap();
    let failure = failure_of(&groups[1]);
    assert!(
        matches!(&failure.cause, FailureCause::PeerFailed { rank: 0, cause } if cause.contains("timeout")),
        "{:?}",
        failure.cause
    );
    assert!(
        groups[1].inner.listener.last.lock().unwrap().is_none(),
        "pushed, not polled"
    );
    // Rank 0's own alarm (as it reads) fails nothing of its own.
    assert!(groups[0].failure().is_none());
    groups[0].abort().expect("abort");
}

#[test]
fn another_rank_s_alarm_fails_a_waiting_group_without_polling_on_every_store() {
    pushed_through(&(Arc::new(InProcessStore::new()) as Arc<dyn Store>));
    let dir = tempfile::tempdir().unwrap();
    let file = FileStore::open(dir.path(), PATIENCE).unwrap();
    pushed_through(&(Arc::new(file) as Arc<dyn Store>));
    let tcp = TcpStore::host(
        "127.0.0.1:0",
        TcpStoreServerOptions::default(),
        TcpStoreOptions::default(),
    )
    .unwrap();
    pushed_through(&(Arc::new(tcp) as Arc<dyn Store>));
}

#[test]
fn a_clean_destroy_of_every_rank_deletes_the_beats_and_a_lone_rank_beats_not() {
    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    let liveness = Liveness::beat(Duration::from_millis(10), PATIENCE * 10);
    let lone = beating(&store, "lone", 1, liveness);
    let groups = beating(&store, "clean", 3, liveness);
    let keys = ["0", "1", "2", "closed"].map(|leaf| format!("clean/0/liveness/{leaf}"));
    {
        let (store, keys) = (Arc::clone(&store), keys.clone());
        until("every rank's first beat", move || {
            keys[..3].iter().all(|key| count(&store, key) > 0)
        });
    }
    for group in &groups {
        group.destroy().expect("destroy");
    }
    let (store_after, keys_after) = (Arc::clone(&store), keys.clone());
    until("the beats to be deleted", move || {
        keys_after
            .iter()
            .all(|key| store_after.try_get(key).unwrap().is_none())
    });
    assert_eq!(store.try_get("lone/0/liveness/0").unwrap(), None);
    lone[0].destroy().expect("destroy");
}

#[test]
fn a_stopped_rank_0_is_named_by_the_ranks_that_watch_it() {
    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    let options = options().with_liveness(Liveness::beat(
        Duration::from_millis(50),
        Duration::from_secs(2),
    ));
    store.set("watcher/0/liveness/0", b"1").unwrap();
    let groups = [1, 2].map(|rank| heal::tests::rank_of(&store, "watcher", (rank, 3), &options));
    for group in &groups {
        let failure = failure_of(group);
        assert_eq!(failure.cause.unresponsive_rank(), Some(0), "{failure}");
    }
    for healed in heal_all(&groups, &HealOptions::new()) {
        let healed = healed.expect("healed");
        assert_eq!(healed.lost(), [0]);
        assert_eq!(healed.new_rank_of(1), Some(0));
    }
}

#[test]
fn a_rank_that_left_is_not_named_and_dropping_every_group_deletes_the_beats() {
    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    let every = Duration::from_millis(20);
    let bound = Duration::from_millis(500);
    let mut groups = beating(&store, "early", 2, Liveness::beat(every, bound));
    // Rank 1 destroys first; rank 0 goes on watching for twice the bound.
    groups.pop().unwrap().destroy().expect("destroy");
    {
        let store = Arc::clone(&store);
        until("rank 1 to leave", move || {
            store.try_get("early/0/liveness/1").unwrap().as_deref() == Some(LEFT)
        });
    }
    beats_past(&store, "early/0/liveness/0", 2 * bound.as_millis() / every.as_millis());
    assert!(groups[0].failure().is_none(), "{:?}", groups[0].failure());
    // Rank 0 drops its group without destroying it: it leaves too, last.
    drop(groups);
    until("the beats to be deleted", move || {
        ["0", "1", "closed"].iter().all(|leaf| {
            let key = format!("early/0/liveness/{leaf}");
            store.try_get(&key).unwrap().is_none()
        })
    });
}
