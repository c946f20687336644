//! The bad-input rows of `ProcessGroup::split_group` and `new_group`:
//! rank lists a split refuses, lists that differ between ranks, the
//! destroy of a group whose sub-group lives, and a heal or grow of a
//! sub-group. Groups that never made a communicator need no GPU.

use nccl_group::Lifecycle;
use nccl_group::Recovery;
use nccl_group::SubGroups;
use std::sync::Arc;
use std::thread;

use nccl_group::store::Store;
use nccl_group::{
    GroupOptions, GroupRank, GrowOptions, HealOptions, InProcessStore, ProcessGroup, Rank,
};

use super::{Row, calls, err, once_destroyed};

/// Rank `rank` of `world` of the group "rows" on `store`.
fn rank_of(store: &Arc<dyn Store>, rank: usize, world: usize) -> ProcessGroup {
    let options = GroupOptions::default().without_dump_dir();
    ProcessGroup::builder("rows")
        .rank(rank)
        .world_size(world)
        .store(Arc::clone(store))
        .options(options)
        .build()
        .expect("a group without communicators")
}

/// Rank 0 of a world of 1 on a fresh in-process store.
fn group() -> ProcessGroup {
    rank_of(&(Arc::new(InProcessStore::new()) as Arc<dyn Store>), 0, 1)
}

/// `split_group(lists)` of a world of 1.
fn split(lists: &[&[usize]]) -> String {
    err(group().split_group(lists))
}

/// `new_group(ranks)` of a world of 1.
fn new_group(ranks: &[usize]) -> String {
    err(group().new_group(ranks))
}

/// The sub-group of the whole world of 1, with its parent.
fn sub() -> Result<(ProcessGroup, ProcessGroup), String> {
    let parent = group();
    match parent.new_group(&[0]) {
        Ok(Some(sub)) => Ok((parent, sub)),
        Ok(None) => Err("<no sub-group>".to_string()),
        Err(error) => Err(format!("<new_group failed: {error}>")),
    }
}

/// `rank` resolved in the sub-group `[1, 3]` of a world of 4 (ranks on
/// threads; only global rank 1's sub-group is asked).
fn in_dp_group(rank: Rank) -> String {
    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    let ranks: Vec<_> = (0..4)
        .map(|r| {
            let store = Arc::clone(&store);
            thread::spawn(move || {
                let group = rank_of(&store, r, 4);
                let sub = group.split_group(&[[0, 2], [1, 3]]);
                (group, sub)
            })
        })
        .collect();
    let mut answer = "<rank 1 got no sub-group>".to_string();
    for (r, handle) in ranks.into_iter().enumerate() {
        match handle.join() {
            Ok((_, Ok(Some(sub)))) if r == 1 => answer = err(rank.in_group(&sub)),
            Ok((_, Ok(_))) => {}
            Ok((_, Err(error))) => return format!("<split failed on rank {r}: {error}>"),
            Err(_) => return format!("<rank {r} panicked>"),
        }
    }
    answer
}

pub(super) fn rows() -> Vec<Row> {
    [
        calls(
            "sub-groups",
            "Rank::in_group (every root and peer)",
            &[
                (
                    "global rank 0 on the sub-group [1, 3]",
                    &[
                        "a GroupRank in 0..2 or a global rank (usize or GlobalRank) \
                            of the members [1, 3]",
                        "global rank 0, not a member of this group",
                    ],
                    || in_dp_group(Rank::Global(0)),
                ),
                (
                    "GroupRank(2) on the sub-group [1, 3]",
                    &["a GroupRank in 0..2", "group rank 2, past the group's size"],
                    || in_dp_group(GroupRank(2).into()),
                ),
            ],
        ),
        calls(
            "sub-groups",
            "ProcessGroup::split_group",
            &[
                (
                    "no list",
                    &[
                        "invalid rank lists",
                        "at least one rank list",
                        "got no list",
                    ],
                    || split(&[]),
                ),
                (
                    "an empty list",
                    &[
                        "invalid rank lists",
                        "non-empty rank lists",
                        "(list 1 is empty)",
                    ],
                    || split(&[&[0], &[]]),
                ),
                (
                    "rank 1 of world size 1",
                    &["ranks of the parent group, 0..1", "got rank 1 in [0, 1]"],
                    || split(&[&[0, 1]]),
                ),
                (
                    "a rank in two lists",
                    &[
                        "each rank in one list at most",
                        "got rank 0 in both [0] and [0]",
                    ],
                    || split(&[&[0], &[0]]),
                ),
            ],
        ),
        calls(
            "sub-groups",
            "ProcessGroup::new_group",
            &[
                (
                    "no rank",
                    &["invalid ranks", "at least one rank", "got []"],
                    || new_group(&[]),
                ),
                (
                    "a rank twice",
                    &["distinct ranks in each list", "got rank 0 twice in [0, 0]"],
                    || new_group(&[0, 0]),
                ),
            ],
        ),
        calls(
            "sub-groups",
            "ProcessGroup::split_group",
            &[(
                "ranks 0 and 1 pass different lists",
                &[
                    "the same rank lists on every rank of the parent \
                        (rank 0 passed [[0], [1]])",
                    "got rank 1 passed [[1], [0]]",
                ],
                || {
                    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
                    let groups = [rank_of(&store, 0, 2), rank_of(&store, 1, 2)];
                    let mut errors = thread::scope(|scope| {
                        let ranks: Vec<_> = groups
                            .iter()
                            .map(|g| {
                                scope.spawn(move || {
                                    let (a, b) = ([g.rank()], [1 - g.rank()]);
                                    err(g.split_group(&[&a[..], &b[..]]))
                                })
                            })
                            .collect();
                        ranks
                            .into_iter()
                            .map(|rank| rank.join().unwrap_or_else(|_| "<panicked>".to_string()))
                            .collect::<Vec<_>>()
                    });
                    // Every rank gets the same refusal; rank 0's stands for all.
                    errors.swap_remove(0)
                },
            )],
        ),
        calls(
            "sub-groups",
            "ProcessGroup::destroy",
            &[(
                "a live sub-group",
                &[
                    "process group \"rows\" cannot be destroyed",
                    "its sub-groups [\"rows/sub0.0\"] are live",
                    "destroy them first",
                ],
                || match sub() {
                    Ok((parent, _sub)) => err(parent.destroy()),
                    Err(error) => error,
                },
            )],
        ),
        calls(
            "sub-groups",
            "ProcessGroup::heal",
            &[(
                "a sub-group",
                &[
                    "invalid process group to heal",
                    "a root group (heal the root group",
                    "got \"rows/sub0.0\", a sub-group of \"rows\"",
                ],
                || match sub() {
                    Ok((_parent, sub)) => err(sub.heal(&HealOptions::new())),
                    Err(error) => error,
                },
            )],
        ),
        calls(
            "sub-groups",
            "ProcessGroup::grow",
            &[(
                "a sub-group",
                &[
                    "invalid process group to grow",
                    "a root group (grow the root group",
                    "got \"rows/sub0.0\", a sub-group of \"rows\"",
                ],
                || match sub() {
                    Ok((_parent, sub)) => err(sub.grow(1, &GrowOptions::new())),
                    Err(error) => error,
                },
            )],
        ),
        calls(
            "sub-groups",
            "ProcessGroup::new_group",
            &[(
                "a destroyed group",
                &["process group \"rows\"", "was destroyed"],
                || once_destroyed(group(), |group| group.new_group(&[0])),
            )],
        ),
    ]
    .concat()
}
