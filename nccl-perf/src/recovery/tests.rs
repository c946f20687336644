//! `--inject`'s flags: what goes together, and the plan they make.

use std::time::Duration;

use clap::Parser;
use nccl_group::StreamMode;

use super::{Outputs, Plan};
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
    assert_eq!(plan.count, 1024);
    assert_eq!(plan.options.stream_mode, StreamMode::Caller);
    // The configured timeout, as --op-timeout-ms gave it: a value, not a time taken.
    assert_eq!(plan.options.op_timeout, Duration::from_secs(60));
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

#[test]
fn rank_0_opens_its_output_files_before_the_run_and_refuses_one_it_cannot_write() {
    let dir = std::env::temp_dir().join(format!("nccl-perf-outputs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch folder");
    let (file, json) = (dir.join("one.json"), dir.join("runs.jsonl"));
    std::fs::write(&json, "{\"earlier\":1}\n").expect("an earlier line");
    let flags = |j: &std::path::Path| {
        let mut flags: Vec<String> = GROUP_ALL_REDUCE.iter().map(|s| s.to_string()).collect();
        flags.extend(["--inject", "exit@1:5", "-J"].map(String::from));
        flags.push(j.display().to_string());
        flags.push("--json".to_string());
        flags.push(json.display().to_string());
        flags
    };
    let parsed = |j: &std::path::Path| {
        let flags = flags(j);
        args(&flags.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let outputs = Outputs::open(&parsed(&file), 0).expect("both open");
    assert!(outputs.file.is_some() && outputs.json.is_some());
    assert_eq!(
        std::fs::read_to_string(&json).expect("kept"),
        "{\"earlier\":1}\n",
        "--json appends: the earlier line stays"
    );
    let others = Outputs::open(&parsed(&file), 2).expect("nothing to open");
    assert!(others.file.is_none() && others.json.is_none());
    let unwritable = dir.join("no-such-folder").join("one.json");
    let Err(error) = Outputs::open(&parsed(&unwritable), 0) else {
        panic!("a file in a missing folder opened");
    };
    assert!(
        error.to_string().contains("no-such-folder"),
        "the error names the file: {error}"
    );
    std::fs::remove_dir_all(&dir).expect("cleaned up");
}
