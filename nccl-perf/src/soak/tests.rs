//! `--soak`'s flags, its step count and what it refuses before any GPU
//! work.

use std::sync::Arc;

use clap::Parser;
use nccl_group::InProcessStore;

use crate::cli::{Args, Stall};
use crate::world::World;

fn args(flags: &[&str]) -> Result<Args, String> {
    Args::try_parse_from([&["nccl-perf"], flags].concat()).map_err(|error| error.to_string())
}

const SOAK: [&str; 7] = [
    "all_reduce",
    "--layer",
    "group",
    "--soak",
    "600",
    "--stall",
    "3:2000",
];

#[test]
fn soak_parses_with_its_stall_and_runs_alone() {
    let parsed = args(&SOAK).expect("parses");
    assert_eq!(parsed.soak, Some(600));
    assert_eq!(parsed.stall, Some(Stall { rank: 3, ms: 2000 }));
    let with_timeout = args(&[&SOAK[..], &["--op-timeout-ms", "60000"]].concat()).expect("parses");
    assert_eq!(with_timeout.op_timeout_ms, Some(60000));
    for (flags, names) in [
        (&["--soak", "60"][..], "--stall"),
        (&["--stall", "1:100"], "--soak"),
        (&["--soak", "0", "--stall", "1:100"], "0"),
        (
            &["--soak", "60", "--stall", "1:0"],
            "a stall of 0 ms is no stall",
        ),
    ] {
        let error = args(flags).expect_err("refused");
        assert!(error.contains(names), "{flags:?}: {error}");
    }
    for other in [&["--inject", "exit@1:5"][..], &["--grow-spare", "5"]] {
        let error = args(&[&SOAK[..], other].concat()).expect_err("one measurement at a time");
        assert!(
            error.contains("--soak") && error.contains(other[0]),
            "{other:?}: {error}"
        );
    }
}

#[test]
fn every_rank_counts_the_same_steps_from_the_flags() {
    assert_eq!(super::steps(600, Stall { rank: 3, ms: 2000 }), 300);
    assert_eq!(super::steps(10, Stall { rank: 1, ms: 3000 }), 4);
    assert_eq!(super::steps(1, Stall { rank: 1, ms: 1 }), 1000);
}

#[test]
fn a_world_of_one_a_stalled_rank_outside_it_or_no_group_layer_is_refused_before_any_gpu_work() {
    let stall = Stall { rank: 1, ms: 100 };
    let alone = World::in_store(0, 1, Arc::new(InProcessStore::new()), "in-process");
    let flags = args(&SOAK).expect("parses");
    let error = super::run(&flags, 60, stall, &alone)
        .expect_err("one process")
        .to_string();
    assert!(
        error.starts_with("--soak 60 --stall 1:100: expected 2 or more processes"),
        "{error}"
    );
    let pair = || World::in_store(0, 2, Arc::new(InProcessStore::new()), "in-process");
    let error = super::run(&flags, 60, Stall { rank: 2, ms: 100 }, &pair())
        .expect_err("rank 2 of 2")
        .to_string();
    assert!(
        error.contains("expected the stalled rank in 0..2 (the launch's ranks); got 2"),
        "{error}"
    );
    let flags = args(&["all_reduce", "--soak", "60", "--stall", "1:100"]).expect("parses");
    let error = super::run(&flags, 60, stall, &pair())
        .expect_err("no group layer")
        .to_string();
    assert!(
        error.starts_with("--soak 60 --stall 1:100: expected one group layer"),
        "{error}"
    );
}
