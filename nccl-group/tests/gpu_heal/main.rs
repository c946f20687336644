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
#[path = "../common/survivors.rs"]
mod survivors;
use launched::outputs;
use std::time::Duration;

use nccl_group::CommMode;
use nccl_launch::{Outcome, Placement};
use nccl_test_support as support;
use nccl_test_support::group::launched_role;

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

fn launch(world: usize, scenario: Scenario, comms: CommMode, shrink: bool) -> Outcome {
    // The process that joins a grow shares GPU 0 as a simulated host of
    // its own, which the ranks must be too for NCCL to take it for one.
    let placement = if scenario == Scenario::GrowBack {
        Placement::SimulatedHosts
    } else {
        Placement::Auto
    };
    let env = [
        (SCENARIO_VAR, scenario.name()),
        (COMMS_VAR, survivors::comms_name(comms)),
        (SHRINK_VAR, if shrink { "1" } else { "0" }),
    ];
    survivors::launch(world, placement, CHILD, &env, LAUNCH_TIMEOUT)
}

/// Every rank succeeded but those `dies` names, which must not have,
/// and each survivor's `heal ...` lines are echoed.
fn check(label: &str, outcome: &Outcome, dies: impl Fn(usize) -> bool) {
    survivors::check(label, outcome, LAUNCH_TIMEOUT, "heal ", dies);
}

/// Asserts that rank `rank` of `outcome` printed `line`; `what` names the
/// check in the failure, with every rank's output.
fn assert_said(outcome: &Outcome, rank: usize, line: &str, what: &str) {
    assert!(
        outcome.ranks[rank].stdout.contains(line),
        "{what}{}",
        outputs(outcome)
    );
}

#[test]
fn gpu_heal_loses_two_ranks_and_goes_on() {
    survivors::on_each_comm_mode(|comms| {
        for shrink in [true, false] {
            let label = format!("world 4 -> 3 -> 2, {comms:?}, shrink {shrink}");
            let outcome = launch(4, Scenario::LoseTwo, comms, shrink);
            // Rank 3 exits with status 0; rank 2 kills itself.
            check(&label, &outcome, |rank| rank == 2);
        }
    });
}

#[test]
fn gpu_heal_excludes_a_stopped_rank() {
    let Some(_) = support::require_gpus(1) else {
        return;
    };
    let outcome = launch(3, Scenario::Stopped, CommMode::Blocking, true);
    check("world 3, rank 2 stopped", &outcome, |_| false);
    assert_said(
        &outcome,
        2,
        "heal stopped rank: excluded",
        "the stopped rank's heal",
    );
}

#[test]
fn gpu_heal_grows_back() {
    survivors::on_each_comm_mode(|comms| {
        let label = format!("world 4 -> 3 -> 4, {comms:?}");
        let outcome = launch(4, Scenario::GrowBack, comms, true);
        // Rank 3 exits with status 0; rank 0 checks the new process's end.
        check(&label, &outcome, |_| false);
        let what = format!("{label}: rank 0 saw no clean end of the new process");
        assert_said(&outcome, 0, "heal grow: the new process ended: ok", &what);
    });
}

/// One rank of a launch (SKIP unless launched by the tests above).
#[test]
fn gpu_heal_child() {
    let not_launched = format!("{CHILD} runs only as a rank launched by the heal tests");
    if let Some(scenario) = launched_role(SCENARIO_VAR, Scenario::from_name, &not_launched) {
        rank::run(scenario);
    }
}
