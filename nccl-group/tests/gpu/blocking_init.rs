//! Creating blocking communicators (`CommMode::Blocking`) is bounded too:
//! with a rank that never comes, the init runs on a helper thread that the
//! group stops waiting for at its timeout; the error names the absent rank,
//! and the process stays healthy (a new group works while that init is
//! still stuck in NCCL). A binary of its own: the stuck init thread stays
//! behind until the process ends, and must not share a process with the
//! other suites.

use nccl_group::Lifecycle;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nccl_core::ReduceOp;
use nccl_group::{CommMode, GroupError, GroupOptions, InProcessStore, ProcessGroup};
use nccl_tensor::Tensor;
use nccl_test_support as support;
use nccl_test_support::group::faults::all_reduce_works;
use nccl_test_support::group::world_of_one;

#[test]
fn gpu_blocking_creation_with_a_rank_that_never_comes_fails_within_its_deadline() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    let stream = devices[0].new_stream().expect("stream");
    let dumps = tempfile::tempdir().expect("a temporary folder");
    let timeout = Duration::from_secs(3);
    let options = GroupOptions::default()
        .with_comm_mode(CommMode::Blocking)
        .with_dump_dir(dumps.path());
    // Rank 0 of 2; rank 1 never starts.
    let group = ProcessGroup::builder("alone-blocking")
        .rank(0)
        .world_size(2)
        .store(Arc::new(InProcessStore::new()))
        .options(options.clone().with_timeout(timeout))
        .build()
        .expect("group");
    let started = Instant::now();
    let tensor = Tensor::<f32>::zeros(&stream, &[8]).expect("tensor");
    let error = match group.all_reduce(tensor, ReduceOp::Sum, &stream) {
        Err(e) => e.error,
        Ok(_) => panic!("an all_reduce over an absent rank was enqueued"),
    };
    let took = started.elapsed();
    assert!(
        took < timeout + Duration::from_secs(2),
        "creation failed only after {took:?}"
    );
    match &error {
        GroupError::InitTimeout { missing, .. } => assert_eq!(missing, &vec![1]),
        other => panic!("expected InitTimeout, got {other}"),
    }
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
