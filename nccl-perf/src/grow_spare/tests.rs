//! `--grow-spare`'s flags and what it refuses before any GPU work.

use std::sync::Arc;

use clap::Parser;
use nccl_group::InProcessStore;

use crate::cli::Args;
use crate::world::World;

fn args(flags: &[&str]) -> Result<Args, String> {
    Args::try_parse_from([&["nccl-perf"], flags].concat()).map_err(|error| error.to_string())
}

#[test]
fn grow_spare_parses_its_iteration_and_excludes_inject() {
    let parsed = args(&["all_reduce", "--layer", "group", "--grow-spare", "20"]).expect("parses");
    assert_eq!(parsed.grow_spare, Some(20));
    let error = args(&["--grow-spare", "20", "--inject", "exit@1:5"]).expect_err("both refused");
    assert!(
        error.contains("--inject") && error.contains("--grow-spare"),
        "{error}"
    );
    let error = args(&["--grow-spare", "many"]).expect_err("not a number");
    assert!(error.contains("many"), "{error}");
}

#[test]
fn a_world_of_one_or_flags_that_time_no_group_are_refused_before_any_gpu_work() {
    let alone = World::in_store(0, 1, Arc::new(InProcessStore::new()), "in-process");
    let flags = args(&["all_reduce", "--layer", "group", "--grow-spare", "5"]).expect("parses");
    let error = super::run(&flags, 5, &alone)
        .expect_err("one process")
        .to_string();
    assert!(
        error.starts_with("--grow-spare 5: expected 2 or more processes"),
        "{error}"
    );
    let pair = World::in_store(0, 2, Arc::new(InProcessStore::new()), "in-process");
    let flags = args(&["all_reduce", "--grow-spare", "5"]).expect("parses");
    let error = super::run(&flags, 5, &pair)
        .expect_err("no group layer")
        .to_string();
    assert!(
        error.starts_with("--grow-spare 5: expected one group layer"),
        "{error}"
    );
}
