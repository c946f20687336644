//! The bad-input rows of the group's options that `ProcessGroup::new`
//! refuses besides the recorder's capacity (in `group_rows`): the
//! collective check's interval, and an NCCL config that contradicts the
//! group's communicator mode.

use nccl_group::{Config, GroupOptions};

use super::{Row, build_with, calls};

/// The rows of this area, in the order of the Markdown table.
pub fn rows() -> Vec<Row> {
    calls(
        "group",
        "GroupBuilder::build",
        &[
            (
                "collective_checks Some(0)",
                &[
                    "collective_checks",
                    "a check every 1 to 1024 collectives",
                    "got 0",
                ],
                || build_with(GroupOptions::default().with_collective_checks(0)),
            ),
            (
                "collective_checks Some(1025)",
                &[
                    "collective_checks",
                    "a check every 1 to 1024 collectives",
                    "got 1025",
                ],
                || build_with(GroupOptions::default().with_collective_checks(1025)),
            ),
            (
                "config Config::with_blocking(false) with CommMode::Blocking",
                &[
                    "config",
                    "Config::with_blocking unset or true, as comm_mode is CommMode::Blocking",
                    "got Config::with_blocking(false)",
                ],
                || {
                    build_with(
                        GroupOptions::default().with_config(Config::new().with_blocking(false)),
                    )
                },
            ),
        ],
    )
}
