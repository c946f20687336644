//! The bad-input rows of `ProcessGroup::heal`: options it refuses before
//! anything changes, a destroyed group, and a rank the survivors' decision
//! left out. Groups that never made a communicator need no GPU.

use nccl_group::Lifecycle;
use nccl_group::Recovery;
use std::sync::Arc;
use std::time::Duration;

use nccl_group::store::Store;
use nccl_group::{GroupOptions, HealOptions, InProcessStore, ProcessGroup};

use super::{Row, err};

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
    vec![
        Row {
            area: "heal",
            call: "ProcessGroup::heal",
            input: "min_survivors 0",
            expect: &["invalid min_survivors", "expected 1..=4", "got 0"],
            run: || heal(HealOptions::new().with_min_survivors(0)),
        },
        Row {
            area: "heal",
            call: "ProcessGroup::heal",
            input: "min_survivors 5 of world size 4",
            expect: &["invalid min_survivors", "expected 1..=4", "got 5"],
            run: || heal(HealOptions::new().with_min_survivors(5)),
        },
        Row {
            area: "heal",
            call: "ProcessGroup::heal",
            input: "suspect 4 in a world of 4",
            expect: &["invalid suspects", "below the world size 4", "(rank 4)"],
            run: || heal(HealOptions::new().with_suspects(vec![4])),
        },
        Row {
            area: "heal",
            call: "ProcessGroup::heal",
            input: "rank 0 suspecting itself",
            expect: &["invalid suspects", "other than this rank (0)", "(rank 0)"],
            run: || heal(HealOptions::new().with_suspects(vec![0])),
        },
        Row {
            area: "heal",
            call: "ProcessGroup::heal",
            input: "a group under FailurePolicy::AbortProcess",
            expect: &[
                "invalid failure policy",
                "expected FailurePolicy::ReturnErrors to heal",
                "got FailurePolicy::AbortProcess",
            ],
            run: || {
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
        },
        Row {
            area: "heal",
            call: "ProcessGroup::heal",
            input: "a destroyed group",
            expect: &["process group \"heal-rows\"", "was destroyed"],
            run: || {
                let group = world(1).remove(0);
                if let Err(error) = group.destroy() {
                    return format!("<destroy failed: {error}>");
                }
                err(group.heal(&HealOptions::new()))
            },
        },
        Row {
            area: "heal",
            call: "ProcessGroup::heal",
            input: "a rank after the survivors' decision",
            expect: &[
                "rank 1 was excluded from generation 1",
                "went on as generation 1 without it",
            ],
            run: || {
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
        },
    ]
}
