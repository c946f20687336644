//! The meeting's steps among threads over an in-process store.

use std::sync::Arc;
use std::thread;

use super::*;
use crate::InProcessStore;

fn meetings(world: usize, timeout: Duration) -> Vec<Meeting<Arc<InProcessStore>>> {
    let store = Arc::new(InProcessStore::with_timeout(timeout));
    (0..world)
        .map(|rank| Meeting::new(Arc::clone(&store), rank, world).unwrap())
        .collect()
}

#[test]
fn a_place_outside_the_world_is_refused() {
    let store = InProcessStore::new();
    for (rank, world) in [(0, 0), (3, 3), (0, MAX_RANKS + 1)] {
        let error = Meeting::new(&store, rank, world).unwrap_err();
        assert!(
            error.to_string().starts_with(&format!(
                "invalid meeting place rank {rank} of {world}: expected a rank below"
            )),
            "{error}"
        );
    }
    let meeting = Meeting::new(&store, 0, 2).unwrap();
    let error = meeting
        .share_from(2, "id", || Ok::<_, StoreError>(Vec::new()))
        .unwrap_err();
    assert!(error.to_string().contains("creator rank 2"), "{error}");
}

#[test]
fn ranks_meet_share_gather_and_leave() {
    let meetings = meetings(4, Duration::from_secs(30));
    let made = AtomicU64::new(0);
    let results: Vec<_> = thread::scope(|scope| {
        let handles: Vec<_> = meetings
            .iter()
            .map(|meeting| {
                let made = &made;
                scope.spawn(move || {
                    let id = meeting
                        .share_from(1, "id", || {
                            made.fetch_add(1, Ordering::Relaxed);
                            Ok::<_, StoreError>(b"id-of-1".to_vec())
                        })
                        .unwrap();
                    for _ in 0..3 {
                        meeting.barrier("step").unwrap();
                    }
                    let views = meeting.all_gather("view", &[meeting.rank() as u8]).unwrap();
                    meeting.leave(0).unwrap();
                    (id, views)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(made.load(Ordering::Relaxed), 1, "only the creator makes");
    for (id, views) in results {
        assert_eq!(id, b"id-of-1");
        assert_eq!(views, vec![vec![0], vec![1], vec![2], vec![3]]);
    }
}

#[test]
fn a_missing_rank_is_named_when_the_wait_ends() {
    let meetings = meetings(3, Duration::from_millis(50));
    let error = meetings[0].barrier("start").unwrap_err();
    assert!(error.is_timeout(), "{error}");
    assert!(
        error
            .to_string()
            .starts_with("ranks 1, 2 of 3 did not reach the barrier \"start\" within"),
        "{error}"
    );
    let error = meetings[2]
        .share_from(0, "id", || Ok::<_, StoreError>(Vec::new()))
        .unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("rank 0 of 3 did not reach the share \"id\" within"),
        "{error}"
    );
    meetings[1].leave(0).unwrap();
    let error = meetings[0].leave(0).unwrap_err();
    assert!(
        matches!(&error, StoreError::Absent { missing, .. } if missing == &[2]),
        "{error}"
    );
}

#[test]
fn a_published_failure_ends_every_wait_and_the_first_stands() {
    let meetings = meetings(2, Duration::from_secs(300));
    thread::scope(|scope| {
        let waiter = scope.spawn(|| meetings[0].barrier("never complete").unwrap_err());
        assert!(meetings[1].fail("-r 7 is not a rank", 2).unwrap().is_none());
        let error = waiter.join().unwrap();
        assert_eq!(error.to_string(), "rank 1 failed: -r 7 is not a rank");
        assert!(matches!(
            error,
            StoreError::PeerFailed {
                rank: 1,
                code: 2,
                ..
            }
        ));
        assert_eq!(error.kind(), crate::ErrorKind::PeerFailed);
    });
    let earlier = meetings[0].fail("then I failed", 1).unwrap().unwrap();
    assert_eq!(earlier.to_string(), "rank 1 failed: -r 7 is not a rank");
    assert!(meetings[1].failure().unwrap().is_none(), "its own failure");
    // The failed rank still leaves, so the host learns of it at the end.
    meetings[1].leave(0).unwrap();
    let error = meetings[0].leave(0).unwrap_err();
    assert!(
        matches!(error, StoreError::PeerFailed { rank: 1, .. }),
        "{error}"
    );
}

#[test]
fn scoped_meetings_do_not_meet() {
    let store = Arc::new(InProcessStore::with_timeout(Duration::from_millis(50)));
    let a = Meeting::new(Arc::clone(&store), 0, 2)
        .unwrap()
        .scoped("a")
        .unwrap();
    let b = Meeting::new(Arc::clone(&store), 1, 2)
        .unwrap()
        .scoped("b")
        .unwrap();
    assert!(a.barrier("x").unwrap_err().is_timeout());
    assert!(b.barrier("x").unwrap_err().is_timeout());
    assert!(store.try_get("a/barrier/0/0").unwrap().is_some());
    assert!(Meeting::new(&*store, 0, 1).unwrap().scoped("a/b").is_err());
}

#[test]
fn a_gather_to_one_rank_returns_every_value_there_only() {
    let meetings = meetings(3, Duration::from_secs(30));
    let results: Vec<_> = thread::scope(|scope| {
        let handles: Vec<_> = meetings
            .iter()
            .map(|meeting| scope.spawn(move || meeting.gather(2, "row", &[meeting.rank() as u8])))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(results[0].as_ref().unwrap(), &None);
    assert_eq!(results[1].as_ref().unwrap(), &None);
    assert_eq!(
        results[2].as_ref().unwrap(),
        &Some(vec![vec![0], vec![1], vec![2]])
    );
    let error = meetings[0].gather(3, "row", b"").unwrap_err();
    assert!(error.to_string().contains("root rank 3"), "{error}");
}

#[test]
fn a_gather_names_the_ranks_whose_value_did_not_come() {
    let meetings = meetings(3, Duration::from_millis(50));
    meetings[1].gather(0, "row", b"1").unwrap();
    let error = meetings[0].gather(0, "row", b"0").unwrap_err();
    assert!(
        matches!(&error, StoreError::Absent { missing, world_size: 3, .. } if missing == &[2]),
        "{error}"
    );
    assert!(
        error
            .to_string()
            .starts_with("rank 2 of 3 did not reach the gather \"row\""),
        "{error}"
    );
}

#[test]
fn arrivals_name_the_ranks_that_never_came() {
    let meetings = meetings(4, Duration::from_secs(30));
    assert_eq!(meetings[0].absent("init").unwrap(), [0, 1, 2, 3]);
    meetings[0].arrive("init").unwrap();
    meetings[2].arrive("init").unwrap();
    assert_eq!(meetings[3].absent("init").unwrap(), [1, 3]);
    assert_eq!(meetings[3].absent("another step").unwrap(), [0, 1, 2, 3]);
    for meeting in &meetings {
        meeting.arrive("init").unwrap();
    }
    assert!(meetings[1].absent("init").unwrap().is_empty());
}

#[test]
fn participants_of_several_ranks_meet_again_and_again() {
    // Two ranks of two participants each (a GPU per thread).
    let meetings = meetings(2, Duration::from_secs(30));
    let passed: Vec<usize> = thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|member| {
                let meeting = &meetings[member / 2];
                scope.spawn(move || {
                    let gpu = meeting.participant("gpus", member, 4).unwrap();
                    (0..10).filter(|_| gpu.barrier("batch").is_ok()).count()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(passed, [10; 4]);
    for (set, member, members) in [("gpus", 4, 4), ("gpus", 0, 0), ("", 0, 1), ("a/b", 0, 1)] {
        let error = meetings[0].participant(set, member, members).unwrap_err();
        assert!(
            error.to_string().starts_with("invalid participant"),
            "{error}"
        );
    }
}

#[test]
fn a_participant_that_does_not_come_is_named_and_a_failure_ends_the_wait() {
    let meetings = meetings(2, Duration::from_millis(50));
    let error = meetings[0]
        .participant("gpus", 0, 3)
        .unwrap()
        .barrier("the first batch")
        .unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("ranks 1, 2 of 3 did not reach the barrier \"the first batch\""),
        "{error}"
    );
    let meetings = self::meetings(2, Duration::from_secs(300));
    thread::scope(|scope| {
        let waiter = scope.spawn(|| {
            let gpu = meetings[0].participant("gpus", 1, 3).unwrap();
            gpu.barrier("never complete").unwrap_err()
        });
        assert!(meetings[1].fail("no GPU", 2).unwrap().is_none());
        let error = waiter.join().unwrap();
        assert!(
            matches!(
                error,
                StoreError::PeerFailed {
                    rank: 1,
                    code: 2,
                    ..
                }
            ),
            "{error}"
        );
    });
}
