//! `--inject`'s flags: what goes together, and the plan they make.

use std::time::Duration;

use clap::Parser;
use nccl_group::StreamMode;

use super::Plan;
use crate::cli::Args;
use crate::cli::{Fault, HealMode, Injection};

fn args(flags: &[&str]) -> Args {
    Args::try_parse_from([&["nccl-perf"], flags].concat()).expect("flags parse")
}

fn plan(flags: &[&str], world: usize) -> Result<Plan, String> {
    let args = args(flags);
    let injection = args.inject.expect("--inject given");
    Plan::new(&args, injection, world).map_err(|error| error.to_string())
}

const GROUP_ALL_REDUCE: [&str; 3] = ["all_reduce", "--layer", "group-caller"];

#[test]
fn inject_parses_with_heal_tell_and_op_timeout_into_a_plan() {
    let flags = [
        &GROUP_ALL_REDUCE[..],
        &[
            "--inject",
            "kill@3:57",
            "--heal",
            "recreate",
            "--tell",
            "--op-timeout-ms",
            "60000",
            "-b",
            "4K",
        ],
    ]
    .concat();
    let plan = plan(&flags, 4).expect("a plan");
    assert_eq!(
        plan.injection,
        Injection {
            fault: Fault::Kill,
            rank: 3,
            iter: 57
        }
    );
    assert_eq!(plan.heal, HealMode::Recreate);
    assert!(plan.told);
    assert_eq!(plan.group.count, 1024);
    assert_eq!(plan.group.options.stream_mode, StreamMode::Caller);
    // The configured timeout, as --op-timeout-ms gave it: a value, not a time taken.
    assert_eq!(plan.group.options.op_timeout, Duration::from_secs(60));
}

#[test]
fn the_recovery_flags_need_inject() {
    for flags in [
        &["--heal", "full"][..],
        &["--tell"],
        &["--op-timeout-ms", "10"],
    ] {
        let error = Args::try_parse_from([&["nccl-perf"], flags].concat())
            .expect_err("refused without --inject")
            .to_string();
        assert!(error.contains("--inject"), "{flags:?}: {error}");
    }
}

#[test]
fn a_plan_that_cannot_measure_a_recovery_is_refused_naming_the_flag() {
    fn with<'a>(extra: &[&'a str]) -> Vec<&'a str> {
        [&GROUP_ALL_REDUCE[..], extra].concat()
    }
    for (flags, world, expected) in [
        (
            with(&["--inject", "exit@1:5"]),
            1,
            "expected 2 or more ranks",
        ),
        (
            with(&["--inject", "exit@0:5"]),
            4,
            "expected RANK in 1..4 (rank 0 hosts the store and reports); got 0",
        ),
        (with(&["--inject", "exit@4:5"]), 4, "expected RANK in 1..4"),
        (
            vec!["broadcast", "--layer", "group", "--inject", "exit@1:5"],
            2,
            "expected the all_reduce collective",
        ),
        (
            vec!["all_reduce", "--inject", "stop@1:5"],
            2,
            "expected one group layer (--layer group or group-caller); got core",
        ),
        (
            with(&["--inject", "kill@1:5", "-d", "half"]),
            2,
            "expected -d float",
        ),
    ] {
        let error = plan(&flags, world)
            .err()
            .unwrap_or_else(|| panic!("{flags:?} refused"));
        assert!(error.contains(expected), "{flags:?}: {error}");
        assert!(error.starts_with("--inject "), "{flags:?}: {error}");
    }
}

#[test]
fn a_survivors_times_go_through_the_store_and_back_and_a_wrong_length_is_refused() {
    let phases = super::Phases {
        detect: 812.5,
        heal: 501.25,
        first: 3.0,
    };
    let back = super::Phases::from_bytes(2, &phases.to_bytes()).expect("read back");
    assert_eq!(
        (back.detect, back.heal, back.first, back.total()),
        (812.5, 501.25, 3.0, 1316.75)
    );
    let error = super::Phases::from_bytes(2, &[0; 16])
        .expect_err("16 bytes refused")
        .to_string();
    assert!(
        error.contains("rank 2 shared 16 bytes of recovery times, expected 24"),
        "{error}"
    );
}
