//! Launches in which some ranks die and the others go on: the launch and
//! its check (included with `#[path]`, beside `launched.rs`, by the
//! binaries whose survivors must succeed).

use std::time::Duration;

use nccl_group::CommMode;
use nccl_launch::{Launch, Outcome, Placement, WaitPolicy};

use crate::launched::verdict;

/// `launches` on blocking then nonblocking communicators; skips without
/// a GPU.
pub fn on_each_comm_mode(launches: impl Fn(CommMode)) {
    if nccl_test_support::require_gpus(1).is_some() {
        for comms in [CommMode::Blocking, CommMode::Nonblocking] {
            launches(comms);
        }
    }
}

/// The name a rank reads back from its environment for `comms`.
pub fn comms_name(comms: CommMode) -> &'static str {
    if comms == CommMode::Nonblocking {
        "nonblocking"
    } else {
        "blocking"
    }
}

/// Launches `world` ranks of this test binary, each running only the test
/// `child`, with `env` and a TCP store, and waits for all of them (at most
/// `timeout`), keeping their output.
pub fn launch(
    world: usize,
    placement: Placement,
    child: &str,
    env: &[(&str, &str)],
    timeout: Duration,
) -> Outcome {
    let launch = env
        .iter()
        .fold(
            Launch::new(world).expect("a launch"),
            |launch, (name, value)| launch.with_env(name, value),
        )
        .with_placement(placement)
        .with_visible_gpus(nccl_core::Device::count().expect("counting GPUs"))
        .with_timeout(Some(timeout))
        .with_keep_output(true)
        .with_env("NCCL_RS_STORE", "tcp")
        .with_env("NCCL_RS_STORE_TIMEOUT_SECS", "60");
    let args = ["--exact", child, "--nocapture", "--test-threads=1"];
    let exe = std::env::current_exe().expect("the test binary");
    let job = launch.spawn(exe, args).expect("spawn the ranks");
    job.wait(WaitPolicy::All)
}

/// Asserts that the launch ended within `timeout` and that every rank
/// succeeded but those `dies` names, which must not have; echoes each
/// rank's stdout lines that start with `echo`.
pub fn check(
    label: &str,
    outcome: &Outcome,
    timeout: Duration,
    echo: &str,
    dies: impl Fn(usize) -> bool,
) {
    let mut problems = Vec::new();
    if outcome.timed_out {
        problems.push(format!("the launch ran past {timeout:?}"));
    }
    for r in &outcome.ranks {
        if r.succeeded() == dies(r.rank) {
            problems.push(format!("rank {} ended {:?}", r.rank, r.ending));
        }
        for line in r.stdout.lines().filter(|l| l.starts_with(echo)) {
            println!("{label}: rank {}: {line}", r.rank);
        }
    }
    if let Err(problems) = verdict(problems, (), outcome) {
        panic!("{label}: {problems}");
    }
}
