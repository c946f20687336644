//! A sub-group whose member is killed ([`ProcessGroup::split_group`]):
//! world 4 (simulated hosts on GPU 0 when there are fewer GPUs), split
//! from the parent's communicator into TP `[[0, 1], [2, 3]]` and DP
//! `[[0, 2], [1, 3]]`; after checked rounds on both, rank 3 kills itself
//! (SIGKILL). Then each survivor's sub-group that holds rank 3 (rank 2's
//! TP, rank 1's DP) must fail, its report naming this rank's global rank
//! and rank 3 as the global rank that did not answer, while the
//! sub-groups without it (TP `[0, 1]`, DP `[0, 2]`) run 20 checked rounds
//! more, untouched. The survivors then destroy their healthy sub-groups
//! and abort the parent, which holds the lost rank. On blocking and
//! nonblocking communicators.
//!
//! [`ProcessGroup::split_group`]: nccl_group::ProcessGroup::split_group

mod rank;

#[path = "../common/launched.rs"]
mod launched;
use launched::outputs;
use std::path::Path;
use std::time::Duration;

use nccl_group::CommMode;
use nccl_launch::{Launch, Outcome, Placement, WaitPolicy};
use nccl_test_support as support;

const COMMS_VAR: &str = "SUBGROUP_LOSS_COMMS";
const CHILD: &str = "gpu_subgroup_loss_child";
const LAUNCH_TIMEOUT: Duration = Duration::from_secs(180);

fn launch(exe: &Path, comms: CommMode) -> Outcome {
    let comms = if comms == CommMode::Nonblocking {
        "nonblocking"
    } else {
        "blocking"
    };
    let launch = Launch::new(4)
        .expect("a launch")
        .with_placement(Placement::Auto)
        .with_visible_gpus(nccl_core::Device::count().expect("counting GPUs"))
        .with_timeout(Some(LAUNCH_TIMEOUT))
        .with_keep_output(true)
        .with_env(COMMS_VAR, comms)
        .with_env("NCCL_RS_STORE", "tcp")
        .with_env("NCCL_RS_STORE_TIMEOUT_SECS", "60");
    let args = ["--exact", CHILD, "--nocapture", "--test-threads=1"];
    let job = launch.spawn(exe, args).expect("spawn the ranks");
    job.wait(WaitPolicy::All)
}

#[test]
fn gpu_subgroup_loss_fails_only_the_sub_groups_of_the_lost_rank() {
    let Some(_) = support::require_gpus(1) else {
        return;
    };
    let exe = std::env::current_exe().expect("the test binary");
    for comms in [CommMode::Blocking, CommMode::Nonblocking] {
        let label = format!("world 4, rank 3 killed, {comms:?}");
        let outcome = launch(&exe, comms);
        let mut problems = Vec::new();
        if outcome.timed_out {
            problems.push(format!("the launch ran past {LAUNCH_TIMEOUT:?}"));
        }
        for r in &outcome.ranks {
            // Rank 3 kills itself; every other rank must succeed.
            if r.succeeded() == (r.rank == 3) {
                problems.push(format!("rank {} ended {:?}", r.rank, r.ending));
            }
            for line in r.stdout.lines().filter(|l| l.starts_with("subgroup ")) {
                println!("{label}: rank {}: {line}", r.rank);
            }
        }
        assert!(
            problems.is_empty(),
            "{label}: {}{}",
            problems.join("; "),
            outputs(&outcome)
        );
    }
}

/// One rank of a launch (SKIP unless launched by the test above).
#[test]
fn gpu_subgroup_loss_child() {
    let Some(_) = support::require_gpus(1) else {
        return;
    };
    let Ok(comms) = std::env::var(COMMS_VAR) else {
        println!("SKIP: {CHILD} runs only as a rank launched by gpu_subgroup_loss");
        return;
    };
    let comms = if comms == "nonblocking" {
        CommMode::Nonblocking
    } else {
        CommMode::Blocking
    };
    rank::run(comms);
}
