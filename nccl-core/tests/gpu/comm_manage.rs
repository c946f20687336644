//! nccl-core's wrappers of NCCL's newer communicator management on one GPU
//! (world size 1): revoke, split after a revoke, suspend and resume (with
//! the guard and in place), memory statistics, the grow id. Each takes the path the loaded libnccl allows:
//! with the capability the call works; without it, the error names the
//! release that introduced it and the communicator keeps working. Grow
//! itself and shrink need more than one rank (`nccl-group`'s heal tests).

use std::sync::Arc;
use std::time::Duration;

use nccl_core::cudarc::driver::CudaStream;
use nccl_core::{
    Capabilities, Capability, Communicator, Config, DataType, Error, ErrorKind, ReduceOp, Status,
    UniqueId,
};
use nccl_test_support::raw::{
    check_all_reduce, download, input, nonblocking, one_gpu, ptr, ptr_mut, single_rank,
    single_rank_with, upload,
};
use nccl_test_support::{POISON, assert_same_values};

/// One all_reduce of 1000 f32 on `comm`: its result, or the error.
fn all_reduce(comm: &Communicator, stream: &Arc<CudaStream>) -> Result<Vec<f32>, Error> {
    let data = input(5, 1000);
    let send = upload(stream, &data);
    let mut recv = upload(stream, &vec![POISON; 1000]);
    // SAFETY: both buffers hold 1000 f32 on the communicator's device and
    // live until the download synchronises the stream.
    let status = unsafe {
        comm.all_reduce(
            ptr(&send, stream),
            ptr_mut(&mut recv, stream),
            1000,
            DataType::Float32,
            ReduceOp::Sum,
            stream,
        )
    }?;
    if status == Status::InProgress {
        comm.wait_ready("all_reduce")?;
    }
    let result = download(stream, &recv);
    assert_same_values(&result, &data, "all_reduce of one rank");
    Ok(result)
}

/// `error` is the Unsupported of `capability` on the loaded `capabilities`.
fn assert_unsupported(error: Error, capability: Capability, capabilities: Capabilities) {
    assert_eq!(error.kind(), ErrorKind::Unsupported, "{error}");
    let message = error.to_string();
    assert!(
        message.contains(&format!("needs NCCL {}", capability.introduced_in()))
            && message.contains(&capabilities.version().to_string()),
        "{message}"
    );
}

#[test]
fn gpu_capabilities_are_those_of_the_loaded_library() {
    let Some(device) = one_gpu() else { return };
    let comm = single_rank(&device);
    let capabilities = comm.capabilities();
    assert_eq!(capabilities.version(), comm.library().version());
    println!("{capabilities}");
    for capability in Capability::ALL {
        assert_eq!(
            capabilities.has(capability),
            Capabilities::loaded().unwrap().has(capability)
        );
    }
}

fn revoke_then_check(config: &Config) {
    let Some(device) = one_gpu() else { return };
    let comm = single_rank_with(&device, config);
    let stream = device.new_stream().unwrap();
    let capabilities = comm.capabilities();
    if !capabilities.has(Capability::Revoke) {
        assert_unsupported(comm.revoke().unwrap_err(), Capability::Revoke, capabilities);
        assert!(!comm.is_revoked());
        all_reduce(&comm, &stream).expect("still live after the refused revoke");
        return;
    }
    all_reduce(&comm, &stream).unwrap();
    comm.revoke().unwrap();
    assert!(comm.is_revoked());
    assert!(matches!(all_reduce(&comm, &stream), Err(Error::Revoked)));
    assert!(matches!(comm.finalize(), Err(Error::Revoked)));
    assert!(matches!(comm.revoke(), Err(Error::Revoked)));
    assert_eq!(comm.async_error().unwrap(), Status::Success);
    // A revoked communicator is still a parent.
    let child = comm.split_all(None).unwrap();
    check_all_reduce(&child, &stream, ReduceOp::Sum);
    // Dropping the revoked parent aborts it (never destroys it).
    let abort = comm.abort_handle();
    drop(comm);
    assert!(abort.is_aborted());
    check_all_reduce(&child, &stream, ReduceOp::Max);
}

#[test]
fn gpu_revoke_stops_operations_and_keeps_a_parent() {
    revoke_then_check(&Config::new().with_blocking(true));
}

#[test]
fn gpu_revoke_of_a_nonblocking_communicator_waits_until_quiescent() {
    revoke_then_check(&nonblocking(Duration::from_secs(60)));
}

#[test]
fn gpu_into_raw_refuses_a_revoked_communicator() {
    let Some(device) = one_gpu() else { return };
    let comm = single_rank(&device);
    if !comm.capabilities().has(Capability::Revoke) {
        return;
    }
    comm.revoke().unwrap();
    assert!(matches!(comm.into_raw(), Err(Error::Revoked)));
}

#[test]
fn gpu_suspend_resume_and_memory_statistics() {
    let Some(device) = one_gpu() else { return };
    let mut comm = single_rank(&device);
    let stream = device.new_stream().unwrap();
    let capabilities = comm.capabilities();
    if !capabilities.has(Capability::MemStats) {
        assert_unsupported(
            comm.mem_stats().unwrap_err(),
            Capability::MemStats,
            capabilities,
        );
    }
    if !capabilities.has(Capability::SuspendResume) {
        assert_unsupported(
            comm.suspend().unwrap_err(),
            Capability::SuspendResume,
            capabilities,
        );
        all_reduce(&comm, &stream).expect("still live after the refused suspend");
        return;
    }
    all_reduce(&comm, &stream).unwrap();
    let before = comm.mem_stats().unwrap();
    println!("before suspend: {before:?}");
    assert!(!before.suspended);
    let suspended = comm.suspend().unwrap();
    let during = suspended.mem_stats().unwrap();
    println!("suspended: {during:?}");
    assert!(during.suspended || before.total_bytes == 0, "{during:?}");
    suspended.resume().unwrap();
    let after = comm.mem_stats().unwrap();
    assert!(!after.suspended, "{after:?}");
    all_reduce(&comm, &stream).expect("usable after resume");
}

#[test]
fn gpu_a_communicator_left_suspended_refuses_calls_and_drops() {
    let Some(device) = one_gpu() else { return };
    let mut comm = single_rank(&device);
    if !comm.capabilities().has(Capability::SuspendResume) {
        return;
    }
    drop(comm.suspend().unwrap());
    let stream = device.new_stream().unwrap();
    assert!(matches!(all_reduce(&comm, &stream), Err(Error::Suspended)));
    assert!(matches!(comm.finalize(), Err(Error::Suspended)));
    assert_eq!(Error::Suspended.kind(), ErrorKind::Closed);
    // Drop aborts it: no hang, no resume.
}

#[test]
fn gpu_suspend_in_place_refuses_twice_and_resumes_once() {
    let Some(device) = one_gpu() else { return };
    let comm = single_rank(&device);
    let stream = device.new_stream().unwrap();
    let capabilities = comm.capabilities();
    if !capabilities.has(Capability::SuspendResume) {
        assert_unsupported(
            comm.suspend_in_place().unwrap_err(),
            Capability::SuspendResume,
            capabilities,
        );
        assert!(!comm.is_suspended());
        all_reduce(&comm, &stream).expect("still live after the refused suspend");
        return;
    }
    all_reduce(&comm, &stream).unwrap();
    let error = comm.resume_in_place().unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
    assert!(
        error.to_string().contains("got a live communicator"),
        "{error}"
    );
    comm.suspend_in_place().unwrap();
    assert!(comm.is_suspended());
    assert!(matches!(comm.suspend_in_place(), Err(Error::Suspended)));
    assert!(matches!(all_reduce(&comm, &stream), Err(Error::Suspended)));
    if capabilities.has(Capability::MemStats) {
        let during = comm.mem_stats().expect("answers while suspended");
        assert!(during.suspended || during.total_bytes == 0, "{during:?}");
    }
    comm.resume_in_place().unwrap();
    assert!(!comm.is_suspended());
    all_reduce(&comm, &stream).expect("usable after resume");
    assert_eq!(
        comm.resume_in_place().unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
}

#[test]
fn gpu_grow_unique_id_or_the_release_that_has_it() {
    let Some(device) = one_gpu() else { return };
    let comm = single_rank(&device);
    let capabilities = comm.capabilities();
    match comm.grow_unique_id() {
        Ok(id) => {
            assert!(capabilities.has(Capability::Grow));
            assert_ne!(id, UniqueId::from_bytes([0; UniqueId::BYTES]));
        }
        Err(error) => {
            assert!(!capabilities.has(Capability::Grow), "{error}");
            assert_unsupported(error, Capability::Grow, capabilities);
        }
    }
    // Argument checks come before NCCL.
    let error = comm.grow(1, None, None).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
    let error = comm.shrink(&[], Default::default(), None).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
    let error = comm.shrink(&[0], Default::default(), None).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
    let error = comm.shrink(&[1], Default::default(), None).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::RankOutOfRange, "{error}");
}
