//! The bad-input rows of `ProcessGroup::heal`: options it refuses before
//! anything changes, a destroyed group, and a rank the survivors' decision
//! left out. Groups that never made a communicator need no GPU.

use nccl_group::Lifecycle;
use nccl_group::Recovery;
use std::sync::Arc;
use std::time::Duration;

use nccl_group::store::Store;
use nccl_group::{GroupOptions, HealOptions, InProcessStore, ProcessGroup};

use super::{Row, calls, err, once_destroyed};

/// Ranks `0..world` of a group on a fresh in-process store.
fn world(world: usize) -> Vec<ProcessGroup> {
    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    (0..world)
        .map(|rank| {
            let options = GroupOptions::default().without_dump_dir();
            ProcessGroup::builder("heal-rows")
                .rank(rank)
                .world_size(world)
                .store(Arc::clone(&store))
                .options(options)
                .build()
                .expect("a group without communicators")
        })
        .collect()
}

/// `heal` of rank 0 of a world of 4 with `options`.
fn heal(options: HealOptions) -> String {
    err(world(4)[0].heal(&options))
}

pub(super) fn rows() -> Vec<Row> {
    [calls(
        "heal",
        "ProcessGroup::heal",
        &[
            (
                "min_survivors 0",
                &["invalid min_survivors", "expected 1..=4", "got 0"],
                || heal(HealOptions::new().with_min_survivors(0)),
            ),
            (
                "min_survivors 5 of world size 4",
                &["invalid min_survivors", "expected 1..=4", "got 5"],
                || heal(HealOptions::new().with_min_survivors(5)),
            ),
            (
                "suspect 4 in a world of 4",
                &["invalid suspects", "below the world size 4", "(rank 4)"],
                || heal(HealOptions::new().with_suspects(vec![4])),
            ),
            (
                "rank 0 suspecting itself",
                &["invalid suspects", "other than this rank (0)", "(rank 0)"],
                || heal(HealOptions::new().with_suspects(vec![0])),
            ),
            (
                "a group under FailurePolicy::AbortProcess",
                &[
                    "invalid failure policy",
                    "expected FailurePolicy::ReturnErrors to heal",
                    "got FailurePolicy::AbortProcess",
                ],
                || {
                    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
                    let options = GroupOptions::default()
                        .without_dump_dir()
                        .with_failure_policy(nccl_group::FailurePolicy::AbortProcess);
                    match ProcessGroup::builder("heal-rows")
                        .rank(0)
                        .world_size(2)
                        .store(store)
                        .options(options)
                        .build()
                    {
                        Ok(group) => err(group.heal(&HealOptions::new())),
                        Err(error) => format!("<the group: {error}>"),
                    }
                },
            ),
            (
                "a destroyed group",
                &["process group \"heal-rows\"", "was destroyed"],
                || once_destroyed(world(1).remove(0), |group| group.heal(&HealOptions::new())),
            ),
            (
                "a rank after the survivors' decision",
                &[
                    "rank 1 was excluded from generation 1",
                    "went on as generation 1 without it",
                ],
                || {
                    let groups = world(2);
                    for group in &groups {
                        let _ = group.abort();
                    }
                    let options = HealOptions::new()
                        .with_suspects(vec![1])
                        .with_timeout(Duration::from_secs(60));
                    if let Err(error) = groups[0].heal(&options) {
                        return format!("<rank 0's heal failed: {error}>");
                    }
                    err(groups[1].heal(&HealOptions::new()))
                },
            ),
        ],
    )]
    .into_iter()
    .flatten()
    .collect()
}
