//! What an elastic trainer uses around heal and grow, without a GPU:
//! threads as the ranks of a group on an in-process store. The commit
//! vote (`Recovery::agree`): every rank gets the same verdict, a missing
//! rank makes it an error for all (the late one too), votes leave no key
//! behind, a closed group refuses to vote and a group closed during the
//! wait ends it; `Recovery::pending_joins` counts the processes waiting in
//! `join_grown` and a grow by that count takes them; `Recovery::store` is
//! the group's root store.
//!
//! Every scenario runs under a deadline, so a bug fails the test instead
//! of hanging it.

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use nccl_group::{
    ErrorKind, GroupError, GroupOptions, GrowOptions, HealOptions, InProcessStore, Lifecycle,
    ProcessGroup, Recovery, Store, StoreError,
};
use nccl_test_support::group::cache::{DEADLINE, LONG};
use nccl_test_support::group::ranks_on;
use nccl_test_support::within;

/// Group options whose waits no scenario here waits out unless it means
/// to (`timeout`).
fn options(timeout: Duration) -> GroupOptions {
    GroupOptions::default()
        .without_dump_dir()
        .with_timeout(timeout)
}

/// The ranks of group `name` of `world` ranks on `store`, whose waits
/// last at most `timeout`.
fn world_on(
    store: &Arc<dyn Store>,
    name: &str,
    world: usize,
    timeout: Duration,
) -> Vec<ProcessGroup> {
    ranks_on(store, name, world, &options(timeout))
}

/// Every group's `agree` of its verdict in `verdicts`, at once, each from
/// a thread of its own; the results in rank order.
fn vote(groups: &[ProcessGroup], verdicts: &[bool]) -> Vec<Result<bool, GroupError>> {
    let ballots: Vec<(ProcessGroup, bool)> = groups
        .iter()
        .cloned()
        .zip(verdicts.iter().copied())
        .collect();
    within("a commit vote", DEADLINE, move || {
        thread::scope(|scope| {
            let ranks: Vec<_> = ballots
                .iter()
                .map(|(group, ok)| scope.spawn(move || group.agree(*ok)))
                .collect();
            ranks
                .into_iter()
                .map(|rank| rank.join().expect("a rank's thread panicked"))
                .collect()
        })
    })
}

/// Whether any key of vote `round` of generation 0 of `name` is left
/// (the ballots of `world` ranks, the outcome, the readers).
fn vote_keys_left(store: &Arc<dyn Store>, name: &str, round: u64, world: usize) -> Vec<String> {
    let leaves = (0..world)
        .map(|rank| rank.to_string())
        .chain(["outcome".to_string(), "read".to_string()]);
    leaves
        .map(|leaf| format!("{name}/0/vote/{round}/{leaf}"))
        .filter(|key| {
            store
                .try_get(key)
                .expect("the in-process store answers")
                .is_some()
        })
        .collect()
}

#[test]
fn every_rank_gets_true_only_when_every_rank_voted_true_and_no_key_stays() {
    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    let groups = world_on(&store, "commit", 3, LONG);
    let steps: [([bool; 3], bool); 4] = [
        ([true, true, true], true),
        ([true, false, true], false),
        ([false, false, false], false),
        ([true, true, true], true),
    ];
    for (round, (verdicts, expected)) in steps.into_iter().enumerate() {
        let results = vote(&groups, &verdicts);
        for (rank, result) in results.into_iter().enumerate() {
            let agreed = result.unwrap_or_else(|e| panic!("rank {rank}, vote {round}: {e}"));
            assert_eq!(
                agreed, expected,
                "rank {rank}, vote {round} of {verdicts:?}"
            );
        }
        let left = vote_keys_left(&store, "commit", round as u64, 3);
        assert!(left.is_empty(), "vote {round} left {left:?}");
    }
}

#[test]
fn a_rank_that_does_not_vote_in_time_makes_the_vote_an_error_for_all() {
    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    let groups = world_on(&store, "commit-late", 3, Duration::from_millis(300));
    let results = vote(&groups[..2], &[true, true]);
    for (rank, result) in results.into_iter().enumerate() {
        let error = result.expect_err("rank 2 never voted");
        assert_eq!(error.kind(), ErrorKind::Timeout, "{error}");
        assert!(
            matches!(&error, GroupError::Store(StoreError::Absent { missing, world_size: 3, .. }) if missing == &[2]),
            "rank {rank}: {error}"
        );
        assert!(error.to_string().contains("commit vote 0"), "{error}");
    }
    // The late rank learns the outcome the others decided, not a verdict
    // of its own; with every rank's read, the vote's keys are gone.
    let late = vote(&groups[2..], &[true])
        .remove(0)
        .expect_err("decided without it");
    assert!(
        matches!(&late, GroupError::Store(StoreError::Absent { missing, .. }) if missing == &[2]),
        "{late}"
    );
    assert!(vote_keys_left(&store, "commit-late", 0, 3).is_empty());
    // The next vote, with everyone, is a vote like any other.
    for result in vote(&groups, &[true, true, true]) {
        assert!(result.expect("everyone voted"));
    }
}

#[test]
fn a_closed_group_refuses_to_vote() {
    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    let groups = world_on(&store, "commit-closed", 2, LONG);
    groups[0].abort().expect("abort");
    let error = groups[0].agree(true).expect_err("aborted");
    assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
    assert!(error.to_string().contains("which aborted"), "{error}");
    groups[1].destroy().expect("destroy");
    let error = groups[1].agree(true).expect_err("destroyed");
    assert!(matches!(error, GroupError::Destroyed { .. }), "{error}");
}

#[test]
fn a_group_aborted_during_the_wait_ends_its_vote() {
    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    let groups = world_on(&store, "commit-abort", 2, LONG);
    let voter = groups[0].clone();
    let error = within("a vote whose group is aborted", DEADLINE, move || {
        thread::scope(|scope| {
            let vote = scope.spawn(|| voter.agree(true));
            // Rank 1 never votes; rank 0's ballot is in before the abort.
            while store
                .try_get("commit-abort/0/vote/0/0")
                .expect("read")
                .is_none()
            {
                thread::yield_now();
            }
            voter.abort().expect("abort");
            vote.join().expect("no panic")
        })
    })
    .expect_err("aborted while waiting for rank 1");
    assert!(matches!(error, GroupError::Aborted { .. }), "{error}");
}

#[test]
fn pending_joins_counts_the_waiting_processes_and_a_grow_by_it_takes_them() {
    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    let groups = world_on(&store, "elastic", 2, LONG);
    assert_eq!(groups[0].pending_joins().expect("read"), 0);
    let joining = Arc::clone(&store);
    let grown = within("a grow by the pending joins", DEADLINE, move || {
        thread::scope(|scope| {
            let joiner = scope.spawn(move || {
                ProcessGroup::builder("elastic")
                    .store(joining)
                    .local_rank(0)
                    .options(options(LONG))
                    .join_grown(LONG)
            });
            while groups[1].pending_joins().expect("read") == 0 {
                thread::yield_now();
            }
            let pending = groups[0].pending_joins().expect("read");
            assert_eq!(pending, 1);
            let growing: Vec<_> = groups
                .iter()
                .map(|group| scope.spawn(move || group.grow(pending, &GrowOptions::new())))
                .collect();
            let mut grown: Vec<ProcessGroup> = growing
                .into_iter()
                .map(|h| h.join().expect("no panic").expect("grown").group().clone())
                .collect();
            grown.push(joiner.join().expect("no panic").expect("joined"));
            grown
        })
    });
    for (rank, group) in grown.iter().enumerate() {
        assert_eq!((group.rank(), group.world_size()), (rank, 3));
        assert_eq!(
            group.pending_joins().expect("read"),
            0,
            "every ticket granted"
        );
    }
}

#[test]
fn a_rank_a_heal_excluded_and_the_healed_generation_refuse_to_vote() {
    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    let groups = world_on(&store, "commit-heal", 3, LONG);
    let survivors = groups[..2].to_vec();
    let healed = within("a heal without rank 2", DEADLINE, move || {
        thread::scope(|scope| {
            let heals: Vec<_> = survivors
                .iter()
                .map(|group| {
                    scope.spawn(move || group.heal(&HealOptions::new().with_suspects(vec![2])))
                })
                .collect();
            heals
                .into_iter()
                .map(|h| h.join().expect("no panic").expect("healed").into_group())
                .collect::<Vec<_>>()
        })
    });
    // Rank 2 came after the decision: its group failed, and it must leave.
    let excluded = groups[2].heal(&HealOptions::new().with_suspects(vec![0]));
    let error = excluded.expect_err("decided without rank 2");
    assert_eq!(error.kind(), ErrorKind::Excluded, "{error}");
    let error = groups[2].agree(true).expect_err("excluded");
    assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
    assert!(error.to_string().contains("excluded must leave"), "{error}");
    let error = groups[0].agree(true).expect_err("replaced by the heal");
    assert_eq!(error.kind(), ErrorKind::Healed, "{error}");
    assert!(error.to_string().contains("by generation 1"), "{error}");
    // The healed generation votes among its two ranks.
    for result in vote(&healed, &[true, true]) {
        assert!(result.expect("the survivors voted"));
    }
}

#[test]
fn store_is_the_store_the_group_was_created_with() {
    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    let groups = world_on(&store, "own-protocol", 1, LONG);
    groups[0].store().set("trainer/step", b"7").expect("set");
    assert_eq!(
        store.try_get("trainer/step").expect("get"),
        Some(b"7".to_vec())
    );
}
