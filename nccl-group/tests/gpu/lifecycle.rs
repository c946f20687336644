//! `ProcessGroup` on one GPU (world size 1), its lifecycle: `Work`
//! completion, synchronisation and drop; many threads on one group;
//! destroy, abort and re-creation; errors that hand the tensors back (a
//! send to itself, bad arguments).
//!
//! Every test starts with `require_gpus(n)`: without the GPUs it prints
//! `SKIP: ...` and passes, unless `NCCL_TEST_REQUIRE_GPU=1`.

use nccl_group::Lifecycle;
use nccl_group::{Diagnostics, Recovery};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use nccl_core::ReduceOp;
use nccl_core::cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use nccl_group::{GroupError, GroupOptions, InProcessStore};
use nccl_tensor::Tensor;
use nccl_test_support as support;
use nccl_test_support::group::{
    Closed, assert_closed_error, assert_invalid_argument, done, every_call_refused, pattern,
    refused, works, world_of_one, world_of_one_on,
};
use nccl_test_support::tensor::{download, poison_values, stream_on_first_gpu, upload, values};
use nccl_test_support::{assert_same_values, within};

#[test]
fn gpu_send_recv_to_self_is_invalid_argument_and_hands_tensor_back() {
    let Some(stream) = stream_on_first_gpu() else {
        return;
    };
    let group = world_of_one("self-p2p", GroupOptions::default());
    let data = values::<f32>(5, 4097);

    for (dst, why) in [(0, "itself"), (1, "out of range"), (usize::MAX, "huge")] {
        let e = refused(
            group.send(upload(&stream, &data), dst, &stream),
            &format!("send to {why}"),
        );
        let message = e.error.to_string();
        // Every refusal of a peer is the group's, as an invalid argument.
        assert_eq!(
            e.error.kind(),
            nccl_group::ErrorKind::InvalidArgument,
            "send to {dst}: {:?}",
            e.error
        );
        assert!(message.contains("dst"), "{message}");
        assert!(message.contains(&dst.to_string()), "{message}");
        // Itself is the pair route's refusal; a rank outside the group is
        // refused as every root and peer is, naming both numberings.
        let context = if dst == 0 {
            "this is rank 0"
        } else {
            "not a member of this group"
        };
        assert!(message.contains(context), "{message}");
        assert_same_values(
            &download(&stream, &e.buffers),
            &data,
            "the tensor handed back by send",
        );
    }

    let e = refused(
        group.recv(upload(&stream, &data), 0, &stream),
        "recv from self",
    );
    assert_invalid_argument(&e.error, "src");
    assert!(e.error.to_string().contains("src"));
    assert_same_values(
        &download(&stream, &e.buffers),
        &data,
        "the tensor handed back by recv",
    );

    // The list forms refuse their own rank the same way and hand every
    // tensor back.
    let streams = [stream.clone()];
    for (name, result) in [
        (
            "send_multi",
            group
                .multi()
                .send(vec![upload(&stream, &data)], 0, &streams),
        ),
        (
            "recv_multi",
            group
                .multi()
                .recv(vec![upload(&stream, &data)], 0, &streams),
        ),
    ] {
        let e = refused(result, name);
        assert!(
            matches!(e.error, GroupError::InvalidArgument { .. }),
            "{name}: {:?}",
            e.error
        );
        assert_eq!(e.buffers.len(), 1, "{name}");
        assert_same_values(&download(&stream, &e.buffers[0]), &data, name);
    }

    // The group is unaffected.
    let t = done(
        group.all_reduce(upload(&stream, &data), ReduceOp::Sum, &stream),
        "all_reduce",
    );
    assert_same_values(
        &download(&stream, &t),
        &data,
        "all_reduce after the refused send",
    );
}

#[test]
fn gpu_work_is_completed_and_synchronize() {
    let Some(stream) = stream_on_first_gpu() else {
        return;
    };
    let group = world_of_one("work", GroupOptions::default());
    const LEN: usize = 1 << 24;
    let data = pattern(1, LEN);

    let work = group
        .all_gather_into_tensor(
            Tensor::<f32>::zeros(&stream, &[LEN]).unwrap(),
            upload(&stream, &data),
            &stream,
        )
        .expect("all_gather");
    let _early = work.is_completed(); // either answer is fine this early
    let started = Instant::now();
    work.synchronize(Duration::from_secs(1))
        .expect("a 64 MiB copy completes within a second");
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(work.is_completed(), "complete after synchronize");
    assert!(format!("{work:?}").contains("completed: true"), "{work:?}");
    let (out, _) = work.wait().expect("wait");
    assert_same_values(&download(&stream, &out), &data, "all_gather");

    // A zero timeout either finds the work done or reports a timeout, and
    // the work stays usable after a timeout.
    let work = group
        .all_to_all_single(
            Tensor::<f32>::zeros(&stream, &[LEN]).unwrap(),
            upload(&stream, &data),
            &stream,
        )
        .expect("all_to_all");
    match work.synchronize(Duration::ZERO) {
        Ok(()) => assert!(work.is_completed()),
        Err(GroupError::Timeout { operation, waited }) => {
            assert_eq!(operation, "Work::synchronize");
            assert!(waited < Duration::from_secs(1));
        }
        Err(other) => panic!("synchronize(0): {other}"),
    }
    work.synchronize(Duration::from_secs(1))
        .expect("then completes");
    let (out, _) = work.wait().expect("wait");
    assert_same_values(&download(&stream, &out), &data, "all_to_all");

    // A barrier's work too.
    let barrier = group.barrier(&stream).expect("barrier");
    barrier
        .synchronize(Duration::from_secs(1))
        .expect("barrier completes");
    assert!(barrier.is_completed());
    barrier.wait().expect("barrier wait");

    // The list form's work covers its device.
    let work = group
        .multi()
        .all_reduce(
            vec![upload(&stream, &data)],
            ReduceOp::Max,
            std::slice::from_ref(&stream),
        )
        .expect("all_reduce_multi");
    work.synchronize(Duration::from_secs(1)).expect("completes");
    assert!(work.is_completed());
    let ts = work.wait().expect("wait");
    assert_same_values(&download(&stream, &ts[0]), &data, "all_reduce_multi");
}

#[test]
fn gpu_work_dropped_without_wait_releases_buffers_safely() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    let device = &devices[0];
    let group = world_of_one("dropped-work", GroupOptions::default());
    let caller = device.new_stream().expect("caller stream");
    // The tensors live on another stream than the caller's: dropping the
    // work frees them there, which must wait for the operation.
    let alloc = device.new_stream().expect("allocation stream");
    const LEN: usize = 1 << 22;
    let busy_src = Tensor::<f32>::zeros(&caller, &[1 << 26]).unwrap();
    let mut busy_dst = Tensor::<f32>::zeros(&caller, &[1 << 26]).unwrap();
    for round in 0..20 {
        let data = pattern(round, LEN);
        let input = upload(&alloc, &data);
        let output = Tensor::<f32>::zeros(&alloc, &[LEN]).unwrap();
        alloc.synchronize().expect("uploads done");
        // Keep the caller's stream busy so the operation is still queued
        // when its work is dropped.
        caller
            .memcpy_dtod(busy_src.as_slice(), &mut busy_dst.as_slice_mut())
            .expect("busy copy");
        let work = group
            .all_gather_into_tensor(output, input, &caller)
            .expect("all_gather");
        drop(work);
        // New allocations of the same size on the same stream must not
        // alias memory the dropped operation still writes.
        let fresh = upload(&alloc, &poison_values::<f32>(LEN));
        assert_same_values(
            &download(&alloc, &fresh),
            &poison_values(LEN),
            &format!("round {round}: a fresh tensor after the drop"),
        );
    }
    // A dropped list-form work and a dropped barrier work.
    drop(
        group
            .multi()
            .all_reduce(
                vec![upload(&caller, &pattern(0, 4097))],
                ReduceOp::Sum,
                std::slice::from_ref(&caller),
            )
            .expect("all_reduce_multi"),
    );
    drop(group.barrier(&caller).expect("barrier"));

    // Later operations are fine.
    let data = pattern(99, 4097);
    let (out, _) = done(
        group.all_gather_into_tensor(
            upload(&caller, &poison_values(4097)),
            upload(&caller, &data),
            &caller,
        ),
        "all_gather after drops",
    );
    assert_same_values(&download(&caller, &out), &data, "all_gather after drops");
    caller.synchronize().expect("caller stream healthy");
    alloc.synchronize().expect("allocation stream healthy");
    device
        .context()
        .check_err()
        .expect("no CUDA error recorded by a drop");
}

#[test]
fn gpu_many_threads_issue_on_one_group() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    const THREADS: u64 = 8;
    const ROUNDS: u64 = 50;
    const LEN: usize = 4097;
    let group = world_of_one("threads", GroupOptions::default());
    let device = &devices[0];
    thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let group = &group;
                scope.spawn(move || {
                    let stream = device.new_stream().expect("stream");
                    let mut input = Tensor::<f32>::zeros(&stream, &[LEN]).unwrap();
                    let mut output = Tensor::<f32>::zeros(&stream, &[LEN]).unwrap();
                    for round in 0..ROUNDS {
                        let data = values::<f32>(1000 * t + round, LEN);
                        input.copy_from_host(&stream, &data).unwrap();
                        let what = format!("thread {t} round {round}");
                        input = done(
                            group.all_reduce(input, ReduceOp::Sum, &stream),
                            &format!("{what}: all_reduce"),
                        );
                        // Out of place, so NCCL does move data at world size 1.
                        stream.memset_zeros(&mut output.as_slice_mut()).unwrap();
                        (output, input) = done(
                            group.all_gather_into_tensor(output, input, &stream),
                            &format!("{what}: all_gather"),
                        );
                        assert_same_values(&download(&stream, &output), &data, &what);
                        if round % 10 == 0 {
                            group.barrier(&stream).unwrap().wait().unwrap();
                        }
                    }
                })
            })
            .collect();
        for handle in handles {
            handle.join().expect("thread passed");
        }
    });
}

#[test]
fn gpu_destroy_then_recreate_with_the_same_name_and_store() {
    let Some(stream) = stream_on_first_gpu() else {
        return;
    };
    let store = Arc::new(InProcessStore::new());
    let join = || world_of_one_on("recreated", Arc::clone(&store), GroupOptions::default());
    let group = join();
    works(&group, &stream, "before destroy");
    group.destroy().expect("destroy");
    every_call_refused(&group, &stream, Closed::Destroyed);
    let again = group.destroy().expect_err("a second destroy fails");
    assert_closed_error(&again, &group, Closed::Destroyed, "a second destroy");
    group.abort().unwrap(); // a no-op now
    every_call_refused(&group, &stream, Closed::Destroyed);

    let fresh = join();
    assert!(format!("{fresh:?}").contains("generation: 1"), "{fresh:?}");
    works(&fresh, &stream, "the re-created group");
    fresh.destroy().expect("destroy the re-created group");

    // A group destroyed before it ever created a communicator.
    let unused = join();
    unused.destroy().expect("destroy an unused group");
    every_call_refused(&unused, &stream, Closed::Destroyed);
}

#[test]
fn gpu_abort_from_another_thread_then_recreate() {
    let Some(stream) = stream_on_first_gpu() else {
        return;
    };
    let store = Arc::new(InProcessStore::new());
    let join = || world_of_one_on("aborted", Arc::clone(&store), GroupOptions::default());
    let group = join();
    works(&group, &stream, "before abort");
    let other = group.clone();
    within(
        "abort from another thread",
        Duration::from_secs(60),
        move || other.abort(),
    )
    .expect("abort");
    every_call_refused(&group, &stream, Closed::Aborted);
    let error = group.destroy().expect_err("destroy after abort fails");
    assert_closed_error(&error, &group, Closed::Aborted, "destroy after abort");
    group.abort().unwrap(); // twice is fine
    every_call_refused(&group, &stream, Closed::Aborted);

    let fresh = join();
    works(&fresh, &stream, "a new group with the aborted one's name");
    drop(group); // dropping the aborted group leaves the new one alone
    works(&fresh, &stream, "after dropping the aborted group");

    // Aborting a group that never created a communicator.
    let unused = join();
    unused.abort().unwrap();
    every_call_refused(&unused, &stream, Closed::Aborted);
}

#[test]
fn gpu_op_error_hands_the_tensors_back() {
    let Some(stream) = stream_on_first_gpu() else {
        return;
    };
    let group = world_of_one("op-errors", GroupOptions::default());
    let data = values::<f32>(3, 64);

    // all_gather into an output of the wrong length.
    let e = refused(
        group.all_gather_into_tensor(
            upload(&stream, &poison_values(63)),
            upload(&stream, &data),
            &stream,
        ),
        "all_gather with a short output",
    );
    let message = e.error.to_string();
    assert!(
        matches!(
            e.error,
            GroupError::Tensor(nccl_tensor::Error::WrongLength {
                expected: 64,
                given: 63,
                ..
            })
        ),
        "{:?}",
        e.error
    );
    assert!(
        message.contains("64") && message.contains("63"),
        "{message}"
    );
    assert_same_values(
        &download(&stream, &e.buffers.0),
        &poison_values(63),
        "output handed back",
    );
    assert_same_values(&download(&stream, &e.buffers.1), &data, "input handed back");

    // reduce_scatter with an output of the wrong length.
    let e = refused(
        group.reduce_scatter_tensor(
            upload(&stream, &poison_values(65)),
            upload(&stream, &data),
            ReduceOp::Sum,
            &stream,
        ),
        "reduce_scatter with a long output",
    );
    assert!(matches!(e.error, GroupError::Tensor(_)), "{:?}", e.error);
    assert_same_values(&download(&stream, &e.buffers.1), &data, "input handed back");

    // A root that is not a rank.
    let e = refused(
        group.broadcast(upload(&stream, &data), 1, &stream),
        "broadcast from root 1 of 1",
    );
    assert_eq!(
        e.error.kind(),
        nccl_group::ErrorKind::InvalidArgument,
        "{:?}",
        e.error
    );
    assert!(
        e.error
            .to_string()
            .contains("global rank 1, not a member of this group"),
        "{:?}",
        e.error
    );
    assert_same_values(
        &download(&stream, &e.buffers),
        &data,
        "broadcast tensor handed back",
    );

    // The list form: two tensors on one device.
    let e = refused(
        group.multi().all_reduce(
            vec![upload(&stream, &data), upload(&stream, &data)],
            ReduceOp::Sum,
            &[stream.clone(), stream.clone()],
        ),
        "two tensors on one device",
    );
    assert_invalid_argument(&e.error, "device list");
    assert!(
        e.error.to_string().contains("two tensors on device 0"),
        "{}",
        e.error
    );
    assert_eq!(e.buffers.len(), 2);
    for t in &e.buffers {
        assert_same_values(&download(&stream, t), &data, "list tensor handed back");
    }

    // The list form: a stream count that does not match.
    let e = refused(
        group.multi().all_reduce(
            vec![upload(&stream, &data)],
            ReduceOp::Sum,
            &[stream.clone(), stream.clone()],
        ),
        "two streams for one tensor",
    );
    assert_invalid_argument(&e.error, "streams");
    let e = refused(
        group
            .multi()
            .all_reduce(Vec::<Tensor<f32>>::new(), ReduceOp::Sum, &[]),
        "no tensors",
    );
    assert_invalid_argument(&e.error, "device list");

    // None of this broke the group.
    works(&group, &stream, "after the refused calls");
}

/// Operations on the caller's stream (the default) share their end events,
/// one per run of consecutive operations: each still completes and is seen
/// to, whether it is waited for in any order, never polled (the last of a
/// run: the watchdog records its end), or left unrecorded when a capture of
/// its stream begins outside the group (the capture is not disturbed, and
/// the operation is seen to end after it); a capture the group begins
/// records the end first.
#[test]
fn gpu_operations_sharing_an_end_each_complete() {
    let Some(stream) = stream_on_first_gpu() else {
        return;
    };
    let group = world_of_one("shared-ends", GroupOptions::default());
    const LEN: usize = 1024;
    const RUN: usize = 100; // several batches and an open one

    let works: Vec<_> = (0..RUN)
        .map(|i| {
            group
                .all_reduce(upload(&stream, &pattern(i, LEN)), ReduceOp::Sum, &stream)
                .unwrap_or_else(|e| panic!("all_reduce {i}: {e}"))
        })
        .collect();
    // The last first: its end is recorded when it is waited for.
    for (i, work) in works.iter().enumerate().rev() {
        work.synchronize(Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("synchronize {i}: {e}"));
    }
    assert!(works.iter().all(|work| work.is_completed()), "all complete");
    for (i, work) in works.into_iter().enumerate() {
        let tensor = work.wait().expect("wait");
        assert_same_values(&download(&stream, &tensor), &pattern(i, LEN), "all_reduce");
    }

    // Operations switching streams (each closes the other stream's batch),
    // and one whose tensor is freed on another stream (an end of its own).
    let other = stream.context().new_stream().expect("a second stream");
    let switching: Vec<_> = (0..8)
        .map(|i| {
            let on = if i % 2 == 0 { &stream } else { &other };
            group
                .all_reduce(upload(on, &pattern(i, LEN)), ReduceOp::Sum, on)
                .unwrap_or_else(|e| panic!("all_reduce {i} switching streams: {e}"))
        })
        .collect();
    for (i, work) in switching.into_iter().enumerate() {
        let on = if i % 2 == 0 { &stream } else { &other };
        work.synchronize(Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("synchronize {i} switching streams: {e}"));
        let tensor = work.wait().expect("wait");
        assert_same_values(&download(on, &tensor), &pattern(i, LEN), "switching");
    }
    other.synchronize().expect("synchronize");
    drop(
        group
            .all_reduce(upload(&other, &pattern(9, LEN)), ReduceOp::Sum, &stream)
            .expect("all_reduce of another stream's tensor"),
    );

    // The last operation of a run, never polled: the watchdog records its
    // end and sees it finish.
    let tensor = done(
        group.all_reduce(upload(&stream, &pattern(7, LEN)), ReduceOp::Sum, &stream),
        "the last operation",
    );
    support::group::watchdog_drained(&group, "an idle stream's last operation");
    let record = group.flight_record();
    let last = record.ops.last().expect("a record");
    assert_eq!(last.state, nccl_group::OpState::Completed, "{last:?}");

    // An operation whose end is still unrecorded when a capture of its
    // stream begins outside the group (as torch.cuda.graph begins its
    // own): the watchdog, scanning meanwhile (every 20 ms), records none
    // into the capture.
    let work = group
        .all_reduce(tensor, ReduceOp::Sum, &stream)
        .expect("all_reduce before the outside capture");
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .expect("begin an outside capture");
    thread::sleep(Duration::from_millis(60));
    drop(
        stream
            .end_capture(CUgraphInstantiate_flags(0))
            .expect("end the outside capture, intact"),
    );
    work.synchronize(Duration::from_secs(10))
        .expect("the operation before the outside capture completes");
    let tensor = work.wait().expect("wait");
    assert_same_values(&download(&stream, &tensor), &pattern(7, LEN), "outside");

    // One before a capture the group begins: its end is recorded first.
    // (The tensor to capture is settled on the stream by an operation.)
    let settled = done(
        group.all_reduce(upload(&stream, &pattern(8, LEN)), ReduceOp::Sum, &stream),
        "settling the tensor to capture",
    );
    let work = group
        .all_reduce(tensor, ReduceOp::Sum, &stream)
        .expect("all_reduce before the capture");
    let capture = group.begin_capture(&stream).expect("begin_capture");
    let captured = capture
        .group()
        .all_reduce(settled, ReduceOp::Sum, &stream)
        .expect("captured all_reduce");
    assert!(captured.is_captured());
    let graph = capture
        .end(captured.wait().expect("a captured work waits at once"))
        .unwrap_or_else(|e| panic!("end: {}", e.error));
    work.synchronize(Duration::from_secs(10))
        .expect("the operation before the capture completes");
    let tensor = work.wait().expect("wait");
    assert_same_values(
        &download(&stream, &tensor),
        &pattern(7, LEN),
        "before the capture",
    );
    graph.replay().expect("replay");
    stream.synchronize().expect("synchronize");
    support::group::watchdog_drained(&group, "after the replay");
    assert!(group.failure().is_none(), "{:?}", group.failure());
}
