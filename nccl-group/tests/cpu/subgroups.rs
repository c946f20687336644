//! Sub-groups without a GPU (`ProcessGroup::split_group`, `new_group`):
//! threads as the ranks of a group on an in-process store, which never
//! made a communicator, so every sub-group is made lazily. What this
//! covers: each rank's place and rank mappings, non-members' `None`,
//! nested splits, lists that differ between ranks or that one rank
//! refuses, the numbering that keeps later splits aligned after a
//! refusal, a sub-group's failure naming global ranks while the parent
//! goes on, the destroy order, `shutdown`'s host leaving last, and the
//! lazy sub-groups of a parent whose communicators would share their
//! resources.
//!
//! Every scenario runs under a deadline, so a bug fails the test instead
//! of hanging it.

use nccl_group::Lifecycle;
use nccl_group::Recovery;
use nccl_group::SubGroups;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;

use nccl_group::{
    ErrorKind, GlobalRank, GroupError, GroupOptions, GroupRank, InProcessStore, ProcessGroup, Rank,
    SplitPath, Store, StoreError,
};
use nccl_test_support::group::cache::{DEADLINE, LONG};
use nccl_test_support::within;

/// The ranks of group `name` of `world` ranks on one fresh store.
fn world(name: &str, world: usize) -> Vec<ProcessGroup> {
    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    let options = GroupOptions::default()
        .without_dump_dir()
        .with_timeout(LONG);
    (0..world)
        .map(|rank| {
            ProcessGroup::builder(name)
                .rank(rank)
                .world_size(world)
                .store(Arc::clone(&store))
                .options(options.clone())
                .build()
                .unwrap_or_else(|e| panic!("rank {rank} joining {name:?}: {e}"))
        })
        .collect()
}

/// `f` on every rank's group at once, each on a thread of its own (the
/// ranks of a split wait for each other), under the deadline; the results
/// in rank order.
fn on_every_rank<T: Send + 'static>(
    what: &str,
    groups: &[ProcessGroup],
    f: impl Fn(&ProcessGroup) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let groups = groups.to_vec();
    within(what, DEADLINE, move || {
        let f = &f;
        thread::scope(|scope| {
            let ranks: Vec<_> = groups.iter().map(|g| scope.spawn(move || f(g))).collect();
            ranks
                .into_iter()
                .map(|rank| rank.join().expect("a rank's thread panicked"))
                .collect()
        })
    })
}

/// The sub-group a rank must have got.
fn member(result: &Result<Option<ProcessGroup>, GroupError>, rank: usize) -> ProcessGroup {
    match result {
        Ok(Some(group)) => group.clone(),
        Ok(None) => panic!("rank {rank}: no sub-group"),
        Err(error) => panic!("rank {rank}: {error}"),
    }
}

#[test]
fn split_group_places_every_rank_by_position_and_maps_its_ranks() {
    let groups = world("tpdp", 4);
    let subs = on_every_rank("split_group", &groups, |g| g.split_group(&[[0, 2], [3, 1]]));
    // (global rank, sub-group, group rank, its list)
    let expected = [
        (0, 0, 0, [0, 2]),
        (1, 1, 1, [3, 1]),
        (2, 0, 1, [0, 2]),
        (3, 1, 0, [3, 1]),
    ];
    for (rank, index, group_rank, list) in expected {
        let sub = member(&subs[rank], rank);
        assert_eq!(sub.name(), format!("tpdp/sub0.{index}"));
        assert_eq!(sub.subgroup().map(|l| l.color()), Some(index));
        assert_eq!(
            (sub.rank(), sub.world_size()),
            (group_rank, 2),
            "rank {rank}"
        );
        assert_eq!(sub.global_ranks(), list, "rank {rank}");
        assert_eq!(sub.parent_ranks(), list, "rank {rank}");
        assert_eq!(sub.global_rank(group_rank), Some(rank));
        assert_eq!(sub.group_rank(rank), Some(group_rank));
        assert_eq!(sub.global_rank(2), None);
        let lineage = sub.subgroup().expect("a sub-group knows its parent");
        assert_eq!(
            (lineage.parent_name(), lineage.root_name(), lineage.index()),
            ("tpdp", "tpdp", 0)
        );
        // No communicator on the parent: nothing to split.
        match lineage.path() {
            SplitPath::Lazy { reason } => {
                assert!(
                    reason.contains("no one-device collective communicator"),
                    "{reason}"
                )
            }
            other => panic!("rank {rank}: {other:?}"),
        }
        assert_eq!(sub.options().timeout, LONG);
    }
    // A root group maps to itself.
    assert!(groups[1].subgroup().is_none());
    assert_eq!(groups[1].global_ranks(), vec![0, 1, 2, 3]);
    assert_eq!(groups[1].global_rank(3), Some(3));
    assert_eq!(groups[1].group_rank(4), None);
}

#[test]
fn a_root_or_peer_is_a_global_rank_or_a_group_rank_and_a_non_member_is_refused() {
    let groups = world("roots", 4);
    let subs = on_every_rank("split_group", &groups, |g| g.split_group(&[[0, 2], [1, 3]]));
    let dp = member(&subs[1], 1);
    assert_eq!(dp.global_ranks(), [1, 3]);
    // torch's `src=`: a plain usize is the root group's rank.
    assert_eq!(Rank::from(1).in_group(&dp).unwrap(), GroupRank(0));
    assert_eq!(Rank::from(3).in_group(&dp).unwrap(), GroupRank(1));
    assert_eq!(
        Rank::from(GlobalRank(3)).in_group(&dp).unwrap(),
        GroupRank(1)
    );
    // torch's `group_src=`.
    assert_eq!(
        Rank::from(GroupRank(1)).in_group(&dp).unwrap(),
        GroupRank(1)
    );
    for (rank, given) in [
        (Rank::from(0), "global rank 0, not a member of this group"),
        (Rank::from(2), "global rank 2, not a member of this group"),
        (
            Rank::from(GroupRank(2)),
            "group rank 2, past the group's size",
        ),
    ] {
        let error = rank.in_group(&dp).expect_err("refused");
        assert_eq!(error.kind(), ErrorKind::InvalidArgument);
        let message = error.to_string();
        for part in ["GroupRank in 0..2", "members [1, 3]", given] {
            assert!(message.contains(part), "{rank}: {message}");
        }
    }
    // On a root group the two numberings coincide.
    for rank in 0..4 {
        assert_eq!(
            Rank::from(rank).in_group(&groups[0]).unwrap(),
            GroupRank(rank)
        );
    }
    assert!(Rank::from(4).in_group(&groups[0]).is_err());
}

#[test]
fn new_group_leaves_out_the_ranks_not_in_it_and_splits_nest() {
    let groups = world("nest", 4);
    let results = on_every_rank("new_group and a nested split", &groups, |g| {
        let Some(sub) = g.new_group(&[1, 2, 3])? else {
            return Ok::<_, GroupError>(None);
        };
        // Sub-group ranks 2 and 0: global ranks 3 and 1.
        let nested = sub.new_group(&[2, 0])?;
        Ok(Some((sub, nested)))
    });
    assert!(
        matches!(results[0], Ok(None)),
        "rank 0 is in no sub-group: {:?}",
        results[0]
            .as_ref()
            .map(|r| r.as_ref().map(|(s, _)| s.name().to_string()))
    );
    for (rank, result) in results.iter().enumerate().skip(1) {
        let (sub, nested) = result
            .as_ref()
            .unwrap_or_else(|e| panic!("rank {rank}: {e}"))
            .clone()
            .expect("a member");
        assert_eq!((sub.rank(), sub.world_size()), (rank - 1, 3));
        assert_eq!(sub.global_ranks(), vec![1, 2, 3]);
        match (rank, nested) {
            (2, None) => {}
            (2, Some(n)) => panic!("rank 2 is not in the nested group: {}", n.name()),
            (_, None) => panic!("rank {rank}: no nested group"),
            (_, Some(nested)) => {
                assert_eq!(nested.name(), "nest/sub0.0/sub0.0");
                assert_eq!(nested.global_ranks(), vec![3, 1]);
                assert_eq!(nested.parent_ranks(), vec![2, 0]);
                assert_eq!(nested.group_rank(rank), Some(usize::from(rank == 1)));
                let lineage = nested.subgroup().expect("nested");
                assert_eq!(
                    (lineage.parent_name(), lineage.root_name()),
                    ("nest/sub0.0", "nest")
                );
            }
        }
    }
}

#[test]
fn lists_that_differ_between_ranks_are_refused_on_every_rank() {
    let groups = world("differ", 4);
    let errors = on_every_rank("split_group with lists that differ", &groups, |g| {
        let lists: [[usize; 2]; 2] = if g.rank() == 3 {
            [[0, 1], [3, 2]]
        } else {
            [[0, 1], [2, 3]]
        };
        g.split_group(&lists).map(|sub| sub.is_some())
    });
    for (rank, error) in errors.into_iter().enumerate() {
        let error = error.expect_err("the lists differ");
        assert_eq!(
            error.kind(),
            ErrorKind::InvalidArgument,
            "rank {rank}: {error}"
        );
        let text = error.to_string();
        for want in [
            "invalid rank lists",
            "the same rank lists on every rank of the parent (rank 0 passed [[0, 1], [2, 3]])",
            "got rank 3 passed [[0, 1], [3, 2]]",
        ] {
            assert!(text.contains(want), "rank {rank}: {text} lacks {want:?}");
        }
    }
}

#[test]
fn a_rank_that_refuses_its_lists_stops_the_others_and_later_splits_stay_aligned() {
    let groups = world("refuse", 3);
    let results = on_every_rank("a refusal, then a good split", &groups, |g| {
        let bad = if g.rank() == 2 {
            vec![0, 5]
        } else {
            vec![0, 1]
        };
        let first = g.new_group(&bad).map(|sub| sub.is_some());
        // The next call of every rank is the same second split.
        let second = g.new_group(&[2, 0]);
        (first, second)
    });
    for (rank, (first, second)) in results.into_iter().enumerate() {
        let error = first.expect_err("rank 2 refused its ranks");
        let text = error.to_string();
        if rank == 2 {
            assert!(
                text.contains(
                    "invalid ranks: expected ranks of the parent group, 0..3, got rank 5 in [0, 5]"
                ),
                "{text}"
            );
        } else {
            // Told at once through the store, not after the timeout.
            assert!(
                matches!(
                    error,
                    GroupError::Store(StoreError::PeerFailed { rank: 2, .. })
                ),
                "rank {rank}: {error:?}"
            );
            assert!(text.contains("rank 5 in [0, 5]"), "rank {rank}: {text}");
        }
        let second = second.unwrap_or_else(|e| panic!("rank {rank}: second split: {e}"));
        assert_eq!(second.is_some(), rank != 1, "rank {rank}");
        if let Some(sub) = second {
            // The second split's number, on every rank.
            assert_eq!(sub.name(), "refuse/sub1.0");
            assert_eq!(sub.rank(), usize::from(rank == 0));
        }
    }
}

#[test]
fn a_sub_groups_failure_names_its_global_rank_and_leaves_the_parent_live() {
    let groups = world("fail", 4);
    let results = on_every_rank("a failing sub-group", &groups, |g| {
        let sub = g.new_group(&[2, 3])?;
        if let Some(sub) = &sub {
            sub.abort()?;
        }
        // The parent goes on: its next split works on every rank.
        let after = g.new_group(&[0, 1])?;
        Ok::<_, GroupError>((sub, after))
    });
    for (rank, result) in results.into_iter().enumerate() {
        let (sub, after) = result.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
        assert_eq!(after.is_some(), rank < 2, "rank {rank}");
        let parent = &groups[rank];
        if let Some(after) = after {
            // Its live sub-group holds the parent's destroy back until it
            // is destroyed.
            let refused = parent.destroy().expect_err("a live sub-group");
            assert!(
                matches!(&refused, GroupError::SubGroupsAlive { subgroups, .. } if subgroups == &["fail/sub1.0"]),
                "rank {rank}: {refused:?}"
            );
            after
                .destroy()
                .unwrap_or_else(|e| panic!("rank {rank}: {e}"));
            parent
                .destroy()
                .unwrap_or_else(|e| panic!("rank {rank}: {e}"));
            continue;
        }
        let sub = sub.expect("ranks 2 and 3 are in the first sub-group");
        let failure = sub.failure().expect("an aborted group has a failure");
        let text = failure.to_string();
        assert!(
            text.starts_with(&format!(
                "process group \"fail/sub0.0\" (rank {} of 2; global rank {rank} of \"fail\") \
                 was aborted with no operation pending",
                rank - 2
            )),
            "{text}"
        );
        let lineage = failure
            .subgroup
            .as_deref()
            .expect("the failure's sub-group");
        assert_eq!(lineage.global_ranks(), &[2, 3]);
        assert!(matches!(sub.destroy(), Err(GroupError::Aborted { .. })));
        // An aborted sub-group does not hold the parent's destroy back.
        parent
            .destroy()
            .unwrap_or_else(|e| panic!("rank {rank}: {e}"));
    }
}

#[test]
fn destroy_waits_for_the_sub_groups_and_shutdown_lets_rank_0_leave_last() {
    let groups = world("end", 3);
    let shut_down = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&shut_down);
    let results = on_every_rank("destroy order and shutdown", &groups, move |g| {
        let sub = g.split_group(&[[0, 1, 2]])?.expect("every rank is in it");
        let refused = g.shutdown().expect_err("a live sub-group");
        assert!(
            matches!(&refused, GroupError::SubGroupsAlive { subgroups, .. } if subgroups == &["end/sub0.0"]),
            "{refused:?}"
        );
        assert_eq!(refused.kind(), ErrorKind::InvalidArgument);
        // Refused before anything changed: the group is still live.
        let again = g.new_group(&[0])?;
        drop(again);
        // Several threads destroy the sub-group at once: one does, the
        // others are told it is destroyed.
        let outcomes: Vec<Result<(), GroupError>> = thread::scope(|scope| {
            let threads: Vec<_> = (0..4).map(|_| scope.spawn(|| sub.destroy())).collect();
            threads
                .into_iter()
                .map(|t| t.join().expect("destroy thread"))
                .collect()
        });
        assert_eq!(outcomes.iter().filter(|o| o.is_ok()).count(), 1);
        assert!(
            outcomes
                .iter()
                .all(|o| matches!(o, Ok(()) | Err(GroupError::Destroyed { .. })))
        );
        if g.rank() != 0 {
            seen.fetch_add(1, Ordering::SeqCst);
        }
        g.shutdown()?;
        if g.rank() == 0 {
            // Rank 0 returns only once every other rank has shut down.
            assert_eq!(seen.load(Ordering::SeqCst), 2);
        }
        Ok::<_, GroupError>(())
    });
    for (rank, result) in results.into_iter().enumerate() {
        result.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
        assert!(matches!(
            groups[rank].new_group(&[0]),
            Err(GroupError::Destroyed { .. })
        ));
    }
    assert_eq!(shut_down.load(Ordering::SeqCst), 2);
}

#[test]
fn a_parent_that_would_share_its_resources_makes_lazy_sub_groups() {
    if std::env::var_os("NCCL_COMM_SPLIT_SHARE_RESOURCES").is_some() {
        println!("SKIP: NCCL_COMM_SPLIT_SHARE_RESOURCES overrides the config under test");
        return;
    }
    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    let options = GroupOptions::default()
        .without_dump_dir()
        .with_timeout(LONG)
        .with_config(nccl_group::Config::default().with_split_share(true));
    let groups: Vec<ProcessGroup> = (0..2)
        .map(|rank| {
            ProcessGroup::builder("share")
                .rank(rank)
                .world_size(2)
                .store(Arc::clone(&store))
                .options(options.clone())
                .build()
                .expect("a group without communicators")
        })
        .collect();
    let subs = on_every_rank("split_group of a sharing parent", &groups, |g| {
        g.split_group(&[[1, 0]])
    });
    for (rank, sub) in subs.iter().enumerate() {
        let sub = member(sub, rank);
        match sub.subgroup().map(|l| l.path()) {
            Some(SplitPath::Lazy { reason }) => {
                assert!(reason.contains("the parent's abort flag"), "{reason}")
            }
            other => panic!("rank {rank}: {other:?}"),
        }
    }
}
