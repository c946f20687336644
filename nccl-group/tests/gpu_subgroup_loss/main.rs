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
#[path = "../common/survivors.rs"]
mod survivors;
use std::time::Duration;

use nccl_group::CommMode;
use nccl_launch::Placement;
use nccl_test_support::group::launched_role;

const COMMS_VAR: &str = "SUBGROUP_LOSS_COMMS";
const CHILD: &str = "gpu_subgroup_loss_child";
const LAUNCH_TIMEOUT: Duration = Duration::from_secs(180);

#[test]
fn gpu_subgroup_loss_fails_only_the_sub_groups_of_the_lost_rank() {
    survivors::on_each_comm_mode(|comms| {
        let label = format!("world 4, rank 3 killed, {comms:?}");
        let env = [(COMMS_VAR, survivors::comms_name(comms))];
        let outcome = survivors::launch(4, Placement::Auto, CHILD, &env, LAUNCH_TIMEOUT);
        // Rank 3 kills itself; every other rank must succeed.
        survivors::check(&label, &outcome, LAUNCH_TIMEOUT, "subgroup ", |rank| {
            rank == 3
        });
    });
}

/// One rank of a launch (SKIP unless launched by the test above).
#[test]
fn gpu_subgroup_loss_child() {
    let not_launched = format!("{CHILD} runs only as a rank launched by gpu_subgroup_loss");
    let comms = |value: &str| {
        Some(if value == "nonblocking" {
            CommMode::Nonblocking
        } else {
            CommMode::Blocking
        })
    };
    if let Some(comms) = launched_role(COMMS_VAR, comms, &not_launched) {
        rank::run(comms);
    }
}
