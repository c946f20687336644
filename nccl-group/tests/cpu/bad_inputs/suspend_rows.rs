//! The bad-input rows of suspend and resume, on a group of one process
//! without communicators (whose suspend only marks it).

use nccl_group::{GroupOptions, Lifecycle, ProcessGroup};
use nccl_test_support::group::world_of_one;

use super::{Row, err};

/// A group of one process, named for the row.
fn group(name: &str) -> ProcessGroup {
    world_of_one(name, GroupOptions::default().without_dump_dir())
}

pub(super) fn rows() -> Vec<Row> {
    vec![
        Row {
            area: "suspend",
            call: "ProcessGroup::resume",
            input: "a group that is not suspended",
            expect: &[
                "expected a suspended group (ProcessGroup::suspend first)",
                "got group \"live\", which is not suspended",
            ],
            run: || err(group("live").resume()),
        },
        Row {
            area: "suspend",
            call: "ProcessGroup::suspend",
            input: "a group suspended already",
            expect: &[
                "process group \"twice\" is suspended",
                "call resume on every rank before suspending it again",
            ],
            run: || {
                let group = group("twice");
                if let Err(error) = group.suspend() {
                    return format!("<the first suspend failed: {error}>");
                }
                err(group.suspend())
            },
        },
    ]
}
