//! User-buffer registration on one GPU, world size 1: the borrowed
//! `Registration` and the `DetachedRegistration` handed back to the
//! communicator that made it (another one refuses it), and what an
//! aborted communicator leaves to deregister (nothing).

use nccl_core::{Communicator, ErrorKind, NcclMemory, ReduceOp};
use nccl_test_support::raw::{check_all_reduce, one_gpu, single_rank};

/// Bytes of each registered allocation.
const BYTES: usize = 1 << 21;

/// A communicator of world size 1 on the first GPU and an allocation of
/// [`BYTES`] of NCCL's there; `None` without a GPU (the test skips).
fn one_rank_and_memory() -> Option<(Communicator, NcclMemory)> {
    let device = one_gpu()?;
    let comm = single_rank(&device);
    let memory = NcclMemory::new(&device, BYTES).unwrap();
    Some((comm, memory))
}

#[test]
fn gpu_a_detached_registration_goes_back_to_its_own_communicator() {
    let Some(device) = one_gpu() else { return };
    let (mine, other) = (single_rank(&device), single_rank(&device));
    let memory = NcclMemory::new(&device, BYTES).unwrap();
    // SAFETY: `memory` is NCCL's allocation of BYTES on the communicator's
    // device, and it outlives both registrations (dropped last).
    let detached = unsafe { mine.register_detached(memory.address() as *mut _, BYTES) }.unwrap();
    assert_eq!(
        (detached.address(), detached.bytes()),
        (memory.address(), BYTES)
    );

    if !detached.handle().is_null() {
        // NCCL_LOCAL_REGISTER=0 gives null handles, which any communicator
        // takes as nothing to do.
        // SAFETY: as above.
        let second = unsafe { mine.register_detached(memory.address() as *mut _, BYTES) }.unwrap();
        let error = other
            .deregister(second)
            .expect_err("another communicator's registration");
        assert_eq!(error.kind(), ErrorKind::InvalidArgument);
        let text = error.to_string();
        assert!(
            text.contains("a registration made by this communicator (rank 0 of 1)")
                && text.contains(&format!("one of {BYTES} bytes at {:#x}", memory.address())),
            "{text}"
        );
    }
    mine.deregister(detached).unwrap();
    let stream = device.new_stream().unwrap();
    check_all_reduce(&mine, &stream, ReduceOp::Sum);
    drop((mine, other, memory));
}

#[test]
fn gpu_a_borrowed_registration_deregisters_once() {
    let Some((comm, memory)) = one_rank_and_memory() else {
        return;
    };
    // SAFETY: as above; both registrations end before `memory` drops.
    let registration = unsafe { comm.register(memory.address() as *mut _, BYTES) }.unwrap();
    assert_eq!(
        (registration.address(), registration.bytes()),
        (memory.address(), BYTES)
    );
    registration.deregister().unwrap();
    // SAFETY: as above.
    let dropped = unsafe { comm.register(memory.address() as *mut _, BYTES) }.unwrap();
    drop(dropped);
    // SAFETY: an empty range is refused before NCCL sees it.
    let empty = unsafe { comm.register(memory.address() as *mut _, 0) }.expect_err("0 bytes");
    assert_eq!(empty.kind(), ErrorKind::InvalidArgument);
}

#[test]
fn gpu_an_aborted_communicator_leaves_nothing_to_deregister() {
    let Some((comm, memory)) = one_rank_and_memory() else {
        return;
    };
    // SAFETY: as above; the abort frees the registrations before `memory`
    // drops.
    let detached = unsafe { comm.register_detached(memory.address() as *mut _, BYTES) }.unwrap();
    // SAFETY: as above.
    let borrowed = unsafe { comm.register(memory.address() as *mut _, BYTES) }.unwrap();
    comm.abort_handle().abort().unwrap();
    comm.deregister(detached).unwrap();
    borrowed.deregister().unwrap();
    // SAFETY: as above.
    let refused = unsafe { comm.register_detached(memory.address() as *mut _, BYTES) }
        .expect_err("an aborted communicator");
    assert_eq!(refused.kind(), ErrorKind::Aborted);
}
