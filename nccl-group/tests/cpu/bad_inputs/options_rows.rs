//! The bad-input rows of the group's options that `ProcessGroup::new`
//! refuses besides the recorder's capacity (in `group_rows`): the
//! collective check's interval, an NCCL config that contradicts the
//! group's communicator mode, and a liveness beat that cannot tell a live
//! rank from a hung one.

use std::time::Duration;

use nccl_group::{Config, GroupOptions, Liveness};

use super::{Row, build_with, calls};

/// What the liveness rows' errors say besides what was given.
const LIVENESS_EXPECTED: &str =
    "an interval and a bound above zero, the interval shorter than the bound";

/// `build` with a beat every `every` ms and a bound of `bound` ms.
fn liveness(every: u64, bound: u64) -> String {
    let beat = Liveness::beat(Duration::from_millis(every), Duration::from_millis(bound));
    build_with(GroupOptions::default().with_liveness(beat))
}

/// The liveness rows' cases from `(input, interval ms, bound ms, what the
/// error says was given)`.
macro_rules! liveness_rows {
    ($(($input:literal, $every:literal, $bound:literal, $given:literal)),* $(,)?) => {
        [$((
            $input,
            &["liveness", LIVENESS_EXPECTED, $given] as &[&str],
            (|| liveness($every, $bound)) as fn() -> String,
        )),*]
    };
}

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
    .into_iter()
    .chain(calls(
        "group",
        "GroupBuilder::build",
        &liveness_rows![
            (
                "liveness bound 0",
                250,
                0,
                "a beat every 250ms with a bound of 0ns"
            ),
            (
                "liveness beat every 0",
                0,
                1000,
                "a beat every 0ns with a bound of 1s"
            ),
            (
                "liveness beat every 1 s, bound 1 s",
                1000,
                1000,
                "a beat every 1s with a bound of 1s"
            ),
            (
                "liveness beat every 2 h, bound 3 h",
                7_200_000,
                10_800_000,
                "a beat every 7200s with a bound of 10800s"
            ),
        ],
    ))
    .collect()
}
