//! Handing a `ncclComm_t` over: `Communicator::into_raw` gives it back
//! with its ownership, `Communicator::from_raw` adopts it. On one GPU,
//! world size 1. Each handle is finalized and destroyed exactly once: the
//! only way from one owner to the next is `into_raw`, which consumes the
//! communicator and leaves its abort handles unable to reach the handle.

use std::time::Duration;

use nccl_core::{Communicator, Config, Error, ReduceOp, Status, library};
use nccl_test_support::raw::{
    check_all_reduce, nonblocking, one_gpu, single_rank, single_rank_with,
};

#[test]
fn gpu_into_raw_then_from_raw_hands_the_communicator_over() {
    let Some(device) = one_gpu() else { return };
    let first = single_rank(&device);
    let stale = first.abort_handle();
    let raw = first.into_raw().unwrap();
    // The first owner's handle cannot reach the communicator any more.
    stale.abort().unwrap();
    assert!(!stale.is_aborted());

    // SAFETY: `raw` came from `into_raw`, which gave up its ownership; it
    // is live, blocking, of this process's libnccl, and adopted once.
    let adopted = unsafe { Communicator::from_raw(raw, &Config::new()) }.unwrap();
    assert_eq!(
        (
            adopted.rank(),
            adopted.world_size(),
            adopted.device().ordinal()
        ),
        (0, 1, device.ordinal())
    );
    assert!(adopted.is_blocking());
    assert_eq!(adopted.as_raw().unwrap(), raw);
    assert_eq!(adopted.async_error().unwrap(), Status::Success);
    let stream = device.new_stream().unwrap();
    check_all_reduce(&adopted, &stream, ReduceOp::Sum);
    adopted.finalize().unwrap();
    drop(adopted); // destroys the handle, once
}

#[test]
fn gpu_a_nonblocking_communicator_is_adopted_ready() {
    let Some(device) = one_gpu() else { return };
    let config = nonblocking(Duration::from_secs(60));
    let comm = single_rank_with(&device, &config);
    let raw = comm.into_raw().unwrap();
    // SAFETY: as above; `config` is the one it was created with.
    let adopted = unsafe { Communicator::from_raw(raw, &config) }.unwrap();
    assert!(!adopted.is_blocking());
    let stream = device.new_stream().unwrap();
    check_all_reduce(&adopted, &stream, ReduceOp::Max);
}

#[test]
fn gpu_a_finalized_communicator_is_handed_back_for_its_new_owner_to_destroy() {
    let Some(device) = one_gpu() else { return };
    let comm = single_rank(&device);
    comm.finalize().unwrap();
    let raw = comm.into_raw().unwrap();
    let lib = library().unwrap();
    let destroy = lib.functions().ncclCommDestroy().unwrap();
    // SAFETY: `into_raw` handed the finalized handle over; this is its one
    // destroy.
    let result = unsafe { destroy(raw) };
    let status = nccl_core::check(lib, "ncclCommDestroy", result).unwrap();
    assert_eq!(status, Status::Success);
}

#[test]
fn gpu_an_aborted_communicator_hands_nothing_back() {
    let Some(device) = one_gpu() else { return };
    let comm = single_rank(&device);
    comm.abort_handle().abort().unwrap();
    assert!(matches!(comm.into_raw(), Err(Error::Aborted)));
}
