//! Healing in place after lost ranks ([`ProcessGroup::heal`]), on the
//! NCCL the run loads (`NCCL_LIBRARY`): with revoke and shrink (2.28.7 and
//! later) the survivors shrink the revoked communicators; without, they
//! make fresh ones. Each launch is simulated hosts on GPU 0 when there
//! are fewer GPUs than ranks.
//!
//! * `gpu_heal_loses_two_ranks_and_goes_on`: world 4; rank 3 exits
//!   between operations while each survivor has operations outstanding;
//!   the survivors heal from 8 threads at once to 3, then run 100 rounds
//!   of all_reduce, all_gather, a batched send/recv ring and a ring on
//!   pair communicators, every element checked against the members' old
//!   ranks; then (old) rank 2 is SIGKILLed with an operation in flight,
//!   and the last two heal to 2 and run 100 rounds more. On both
//!   communicator modes, shrinking and re-creating
//!   (`HealOptions::with_shrink(false)`).
//! * `gpu_heal_excludes_a_stopped_rank`: world 3; rank 2 stops itself
//!   (SIGSTOP) with an operation in flight; the others time out, heal to
//!   2 and run 20 rounds; rank 0 then continues rank 2, which must get a
//!   clear error from its operation and `Excluded` from its own heal,
//!   while the two run 20 rounds more undisturbed.
//! * `gpu_heal_grows_back`: world 4 on simulated hosts; rank 3 exits; the
//!   survivors heal to 3 and run 20 rounds; rank 0 starts one more process
//!   of this binary on the same GPU (a simulated host of its own), which
//!   joins as the survivors grow by 1 ([`ProcessGroup::grow`],
//!   [`ProcessGroup::join_grown`]); then 100 rounds at world 4, the new
//!   process's values checked as member 4's, and a destroy. With NCCL
//!   2.29.2 and later the group's communicator grows
//!   (`GrowPath::Grown`); with an older one the grow is refused with
//!   `Unsupported` naming 2.29.2 and done again with
//!   `GrowOptions::with_grow(false)` (`GrowPath::Recreated`). On both
//!   communicator modes.
//!
//! [`ProcessGroup::grow`]: nccl_group::ProcessGroup::grow
//! [`ProcessGroup::join_grown`]: nccl_group::ProcessGroup::join_grown

mod grow;
mod rank;

#[path = "../common/launched.rs"]
mod launched;
use launched::outputs;
use std::path::Path;
use std::time::Duration;

use nccl_group::CommMode;
use nccl_launch::{Launch, Outcome, Placement, WaitPolicy};
use nccl_test_support as support;

const SCENARIO_VAR: &str = "HEAL_SCENARIO";
const COMMS_VAR: &str = "HEAL_COMMS";
const SHRINK_VAR: &str = "HEAL_SHRINK";
const CHILD: &str = "gpu_heal_child";
const LAUNCH_TIMEOUT: Duration = Duration::from_secs(150);

/// What a launch does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scenario {
    LoseTwo,
    Stopped,
    GrowBack,
    /// The process rank 0 of `GrowBack` starts, which joins the grow.
    GrowJoiner,
}

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Scenario::LoseTwo => "lose-two",
            Scenario::Stopped => "stopped",
            Scenario::GrowBack => "grow-back",
            Scenario::GrowJoiner => "grow-joiner",
        }
    }

    fn from_name(name: &str) -> Option<Self> {
        [
            Scenario::LoseTwo,
            Scenario::Stopped,
            Scenario::GrowBack,
            Scenario::GrowJoiner,
        ]
        .into_iter()
        .find(|s| s.name() == name)
    }
}

fn launch(exe: &Path, world: usize, scenario: Scenario, comms: CommMode, shrink: bool) -> Outcome {
    let comms = if comms == CommMode::Nonblocking {
        "nonblocking"
    } else {
        "blocking"
    };
    // The process that joins a grow shares GPU 0 as a simulated host of
    // its own, which the ranks must be too for NCCL to take it for one.
    let placement = if scenario == Scenario::GrowBack {
        Placement::SimulatedHosts
    } else {
        Placement::Auto
    };
    let launch = Launch::new(world)
        .expect("a launch")
        .with_placement(placement)
        .with_visible_gpus(nccl_core::Device::count().expect("counting GPUs"))
        .with_timeout(Some(LAUNCH_TIMEOUT))
        .with_keep_output(true)
        .with_env(SCENARIO_VAR, scenario.name())
        .with_env(COMMS_VAR, comms)
        .with_env(SHRINK_VAR, if shrink { "1" } else { "0" })
        .with_env("NCCL_RS_STORE", "tcp")
        .with_env("NCCL_RS_STORE_TIMEOUT_SECS", "60");
    let args = ["--exact", CHILD, "--nocapture", "--test-threads=1"];
    let job = launch.spawn(exe, args).expect("spawn the ranks");
    job.wait(WaitPolicy::All)
}

/// Every rank succeeded but those `dies` names, which must not have,
/// and each survivor's `heal ...` lines are echoed.
fn check(label: &str, outcome: &Outcome, dies: impl Fn(usize) -> bool) {
    let mut problems = Vec::new();
    if outcome.timed_out {
        problems.push(format!("the launch ran past {LAUNCH_TIMEOUT:?}"));
    }
    for r in &outcome.ranks {
        if r.succeeded() == dies(r.rank) {
            problems.push(format!("rank {} ended {:?}", r.rank, r.ending));
        }
        for line in r.stdout.lines().filter(|l| l.starts_with("heal ")) {
            println!("{label}: rank {}: {line}", r.rank);
        }
    }
    assert!(
        problems.is_empty(),
        "{label}: {}{}",
        problems.join("; "),
        outputs(outcome)
    );
}

#[test]
fn gpu_heal_loses_two_ranks_and_goes_on() {
    let Some(_) = support::require_gpus(1) else {
        return;
    };
    let exe = std::env::current_exe().expect("the test binary");
    for comms in [CommMode::Blocking, CommMode::Nonblocking] {
        for shrink in [true, false] {
            let label = format!("world 4 -> 3 -> 2, {comms:?}, shrink {shrink}");
            let outcome = launch(&exe, 4, Scenario::LoseTwo, comms, shrink);
            // Rank 3 exits with status 0; rank 2 kills itself.
            check(&label, &outcome, |rank| rank == 2);
        }
    }
}

#[test]
fn gpu_heal_excludes_a_stopped_rank() {
    let Some(_) = support::require_gpus(1) else {
        return;
    };
    let exe = std::env::current_exe().expect("the test binary");
    let outcome = launch(&exe, 3, Scenario::Stopped, CommMode::Blocking, true);
    check("world 3, rank 2 stopped", &outcome, |_| false);
    let stopped = &outcome.ranks[2].stdout;
    assert!(
        stopped.contains("heal stopped rank: excluded"),
        "the stopped rank's heal{}",
        outputs(&outcome)
    );
}

#[test]
fn gpu_heal_grows_back() {
    let Some(_) = support::require_gpus(1) else {
        return;
    };
    let exe = std::env::current_exe().expect("the test binary");
    for comms in [CommMode::Blocking, CommMode::Nonblocking] {
        let label = format!("world 4 -> 3 -> 4, {comms:?}");
        let outcome = launch(&exe, 4, Scenario::GrowBack, comms, true);
        // Rank 3 exits with status 0; rank 0 checks the new process's end.
        check(&label, &outcome, |_| false);
        let grown = &outcome.ranks[0].stdout;
        assert!(
            grown.contains("heal grow: the new process ended: ok"),
            "{label}: rank 0 saw no clean end of the new process{}",
            outputs(&outcome)
        );
    }
}

/// One rank of a launch (SKIP unless launched by the tests above).
#[test]
fn gpu_heal_child() {
    let Some(_) = support::require_gpus(1) else {
        return;
    };
    let Some(scenario) = std::env::var(SCENARIO_VAR)
        .ok()
        .and_then(|s| Scenario::from_name(&s))
    else {
        println!("SKIP: {CHILD} runs only as a rank launched by the heal tests");
        return;
    };
    rank::run(scenario);
}
