//! The bad-input rows of the group's options that `ProcessGroup::new`
//! refuses besides the recorder's capacity (in `group_rows`): the
//! collective check's interval, and an NCCL config that contradicts the
//! group's communicator mode.

use std::sync::Arc;

use nccl_group::{Config, GroupOptions, InProcessStore, ProcessGroup};

use super::{Row, err};

/// The rows of this area, in the order of the Markdown table.
pub fn rows() -> Vec<Row> {
    vec![
        Row {
            area: "group",
            call: "GroupBuilder::build",
            input: "collective_checks Some(0)",
            expect: &[
                "collective_checks",
                "a check every 1 to 1024 collectives",
                "got 0",
            ],
            run: || {
                err(ProcessGroup::builder("bad-inputs")
                    .rank(0)
                    .world_size(1)
                    .store(Arc::new(InProcessStore::new()))
                    .options(GroupOptions::default().with_collective_checks(0))
                    .build())
            },
        },
        Row {
            area: "group",
            call: "GroupBuilder::build",
            input: "collective_checks Some(1025)",
            expect: &[
                "collective_checks",
                "a check every 1 to 1024 collectives",
                "got 1025",
            ],
            run: || {
                err(ProcessGroup::builder("bad-inputs")
                    .rank(0)
                    .world_size(1)
                    .store(Arc::new(InProcessStore::new()))
                    .options(GroupOptions::default().with_collective_checks(1025))
                    .build())
            },
        },
        Row {
            area: "group",
            call: "GroupBuilder::build",
            input: "config Config::with_blocking(false) with CommMode::Blocking",
            expect: &[
                "config",
                "Config::with_blocking unset or true, as comm_mode is CommMode::Blocking",
                "got Config::with_blocking(false)",
            ],
            run: || {
                err(ProcessGroup::builder("bad-inputs")
                    .rank(0)
                    .world_size(1)
                    .store(Arc::new(InProcessStore::new()))
                    .options(
                        GroupOptions::default().with_config(Config::new().with_blocking(false)),
                    )
                    .build())
            },
        },
    ]
}
