//! Creating blocking communicators (`CommMode::Blocking`) is bounded too:
//! with a rank that never comes, the init runs on a helper thread that the
//! group stops waiting for at its timeout; the error names the absent rank,
//! and the process stays healthy (a new group works while that init is
//! still stuck in NCCL). A binary of its own: the stuck init thread stays
//! behind until the process ends, and must not share a process with the
//! other suites.

use nccl_group::Lifecycle;
use std::time::Duration;

use nccl_group::{CommMode, GroupError, GroupOptions};
use nccl_test_support::group::faults::{all_reduce_works, without_rank_1};
use nccl_test_support::group::world_of_one;
use nccl_test_support::tensor::stream_on_first_gpu;

#[test]
fn gpu_blocking_creation_with_a_rank_that_never_comes_fails_within_its_deadline() {
    let Some(stream) = stream_on_first_gpu() else {
        return;
    };
    let dumps = tempfile::tempdir().expect("a temporary folder");
    let timeout = Duration::from_secs(3);
    let options = GroupOptions::default()
        .with_comm_mode(CommMode::Blocking)
        .with_dump_dir(dumps.path());
    let (group, error, took) = without_rank_1(
        "alone-blocking",
        options.clone().with_timeout(timeout),
        &stream,
    );
    assert!(
        took < timeout + Duration::from_secs(2),
        "creation failed only after {took:?}"
    );
    println!("the error: {error}");
    assert!(matches!(
        group.barrier(&stream).map(drop),
        Err(GroupError::Failed(_))
    ));

    // Healthy afterwards, with the stuck init still on its thread.
    let fresh = world_of_one("after-alone-blocking", options);
    all_reduce_works(&fresh, &stream);
    fresh.destroy().expect("destroy");
}
