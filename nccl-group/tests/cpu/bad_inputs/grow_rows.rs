//! The bad-input rows of `ProcessGroup::grow` and
//! `ProcessGroup::join_grown`: counts and groups a grow refuses before
//! anything changes, and a new process's bad arguments or missing offer.
//! Groups that never made a communicator need no GPU.

use nccl_group::Lifecycle;
use nccl_group::Recovery;
use std::sync::Arc;
use std::time::Duration;

use nccl_group::store::Store;
use nccl_group::{GroupOptions, GrowOptions, InProcessStore, ProcessGroup};

use super::{Row, calls, err, once_destroyed};

fn options() -> GroupOptions {
    GroupOptions::default().without_dump_dir()
}

/// Rank 0 of a world of 1 on a fresh in-process store.
fn group() -> ProcessGroup {
    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    ProcessGroup::builder("grow-rows")
        .rank(0)
        .world_size(1)
        .store(store)
        .options(options())
        .build()
        .expect("a group without communicators")
}

/// `grow` by `new_ranks` of a fresh group.
fn grow(new_ranks: usize) -> String {
    err(group().grow(new_ranks, &GrowOptions::new()))
}

/// `join_grown` of `name` on a fresh store, on device `local_rank`,
/// waiting 100 ms for an offer.
fn join(name: &str, local_rank: usize) -> String {
    let store: Arc<dyn Store> = Arc::new(InProcessStore::new());
    err(ProcessGroup::builder(name)
        .store(store)
        .local_rank(local_rank)
        .options(options())
        .join_grown(Duration::from_millis(100)))
}

pub(super) fn rows() -> Vec<Row> {
    [
        calls(
            "grow",
            "ProcessGroup::grow",
            &[
                (
                    "new_ranks 0",
                    &["invalid new_ranks", "expected 1..=2147483646", "got 0"],
                    || grow(0),
                ),
                (
                    "new_ranks past NCCL's C int ranks",
                    &[
                        "invalid new_ranks",
                        "at most 2147483647 ranks in all",
                        "got 18446744073709551615",
                    ],
                    || grow(usize::MAX),
                ),
                (
                    "an aborted group",
                    &[
                        "invalid process group to grow",
                        "heal a failed one first",
                        "\"grow-rows\" generation 0, which aborted",
                    ],
                    || {
                        let group = group();
                        if let Err(error) = group.abort() {
                            return format!("<abort failed: {error}>");
                        }
                        err(group.grow(1, &GrowOptions::new()))
                    },
                ),
                (
                    "a destroyed group",
                    &["process group \"grow-rows\"", "was destroyed"],
                    || once_destroyed(group(), |group| group.grow(1, &GrowOptions::new())),
                ),
            ],
        ),
        calls(
            "grow",
            "GroupBuilder::join_grown",
            &[
                (
                    "an empty group name",
                    &["invalid group name", "non-empty", "got \"\""],
                    || join("", 0),
                ),
                (
                    "device 70000",
                    &["invalid device list", "ordinals up to 65535", "got 70000"],
                    || join("grow-rows", 70_000),
                ),
                (
                    "no grow within 100 ms",
                    &[
                        "joining process group \"grow-rows\" with ticket 1",
                        "no ProcessGroup::grow offered",
                        "0 offers read",
                    ],
                    || join("grow-rows", 0),
                ),
            ],
        ),
    ]
    .concat()
}
