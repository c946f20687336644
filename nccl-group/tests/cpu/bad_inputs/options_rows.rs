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
            call: "ProcessGroup::new",
            input: "collective_checks Some(0)",
            expect: &[
                "collective_checks",
                "a check every 1 to 1024 collectives",
                "got 0",
            ],
            run: || {
                err(ProcessGroup::new(
                    "bad-inputs",
                    0,
                    1,
                    Arc::new(InProcessStore::new()),
                    "in-process",
                    GroupOptions::default().with_collective_checks(0),
                ))
            },
        },
        Row {
            area: "group",
            call: "ProcessGroup::new",
            input: "collective_checks Some(1025)",
            expect: &[
                "collective_checks",
                "a check every 1 to 1024 collectives",
                "got 1025",
            ],
            run: || {
                err(ProcessGroup::new(
                    "bad-inputs",
                    0,
                    1,
                    Arc::new(InProcessStore::new()),
                    "in-process",
                    GroupOptions::default().with_collective_checks(1025),
                ))
            },
        },
        Row {
            area: "group",
            call: "ProcessGroup::new",
            input: "config Config::with_blocking(false) with CommMode::Blocking",
            expect: &[
                "config",
                "Config::with_blocking unset or true, as comm_mode is CommMode::Blocking",
                "got Config::with_blocking(false)",
            ],
            run: || {
                err(ProcessGroup::new(
                    "bad-inputs",
                    0,
                    1,
                    Arc::new(InProcessStore::new()),
                    "in-process",
                    GroupOptions::default().with_config(Config::new().with_blocking(false)),
                ))
            },
        },
    ]
}
