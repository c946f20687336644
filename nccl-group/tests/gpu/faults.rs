//! The fault suite on one GPU: hangs become errors within the deadline,
//! and the process stays healthy. An operation that can never complete
//! (the NCCL stream waits on a device flag nobody sets) times out, is
//! aborted and returns `Err` within its timeout plus a second, names itself
//! and leaves a flight-recorder dump; a new group works afterwards. An
//! enqueue that never returns fails the group in time; an abort from
//! another thread releases a waiting thread; dropping a group with pending
//! work fails that work instead of hanging it; communicator creation with a
//! rank that never comes fails within its deadline and names the rank; an
//! abort is bounded; the flight recorder on request. (Faults across
//! processes are in `gpu_group_faults_processes/`.)

use nccl_group::Diagnostics;
use nccl_group::Lifecycle;
use nccl_group::Recovery;
use std::sync::Arc;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use nccl_core::{Group, ReduceOp, Status};
use nccl_group::{FailureCause, FlightDump, GroupError, GroupOptions, OpState};
use nccl_tensor::Tensor;
use nccl_test_support as support;
use nccl_test_support::group::faults::{
    Gate, SLACK, all_reduce_works, never_completes, read_dump, serial, without_rank_1,
};
use nccl_test_support::group::{enqueued, world_of_one};
use nccl_test_support::tensor::stream_on_first_gpu;

/// The timeout of operations meant to hang.
const OP_TIMEOUT: Duration = Duration::from_secs(2);

fn options(dump_dir: &std::path::Path) -> GroupOptions {
    GroupOptions::default()
        .with_op_timeout(OP_TIMEOUT)
        .with_dump_dir(dump_dir)
}

/// Waits until the watchdog has written the failure's details.
fn details_of(failure: &nccl_group::Failure) -> nccl_group::FailureDetails {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(details) = failure.details() {
            return details.clone();
        }
        assert!(Instant::now() < deadline, "no failure details: {failure}");
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn gpu_an_operation_that_never_completes_times_out_and_the_process_stays_healthy() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    let _serial = serial();
    let stream = devices[0].new_stream().expect("stream");
    let dumps = tempfile::tempdir().expect("a temporary folder");
    let group = world_of_one("hang", options(dumps.path()));
    all_reduce_works(&group, &stream);

    let gate = Arc::new(Gate::new(&devices[0]));
    let started = Instant::now();
    let work = enqueued(never_completes(&group, &stream, &gate), "blocked op");
    let error = work
        .synchronize(Duration::from_secs(60))
        .expect_err("the blocked operation cannot complete");
    let took = started.elapsed();
    // What NCCL's abort does to a hung kernel: the GPU work ends.
    gate.open();
    assert!(
        took <= OP_TIMEOUT + SLACK,
        "the error came after {took:?}, past the timeout {OP_TIMEOUT:?} + {SLACK:?}"
    );
    let GroupError::Failed(failure) = &error else {
        panic!("expected GroupError::Failed, got {error}");
    };
    assert!(
        matches!(failure.cause, FailureCause::Timeout { timeout, .. } if timeout == OP_TIMEOUT),
        "{failure}"
    );
    let op = failure.op.as_ref().expect("the failed operation's record");
    assert_eq!(
        (&*op.op, op.seq, op.collective_seq),
        ("blocked_on_gate", 1, Some(1))
    );
    let text = error.to_string();
    for needle in [
        "\"hang\"",
        "rank 0 of 1",
        "blocked_on_gate #1",
        "did not complete within its timeout of 2s",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from: {text}");
    }
    println!("the failure: {text}");

    // abort() on the failed group waits for the failure's own abort of
    // the communicators; the details are there when it returns.
    group
        .abort()
        .expect("the failure's abort finished within its bound");
    let details = failure
        .details()
        .expect("details set before abort() returned");
    assert!(
        matches!(details.abort, nccl_group::AbortOutcome::Aborted(_)),
        "{details:?}"
    );
    let path = details
        .dump
        .clone()
        .expect("dumps are on")
        .expect("the dump was written");
    let dump = read_dump(&path);
    assert_eq!(dump["group"], "hang");
    assert_eq!(dump["ops"][0]["op"], "all_reduce");
    assert_eq!(dump["ops"][0]["state"], "completed");
    assert_eq!(dump["ops"][1]["op"], "blocked_on_gate");
    assert_eq!(dump["ops"][1]["state"], "failed");
    assert!(failure.to_string().contains(&path.display().to_string()));

    // The group is poisoned: every later call fails at once.
    let later = Tensor::<f32>::zeros(&stream, &[4]).expect("tensor");
    match group.all_reduce(later, ReduceOp::Sum, &stream) {
        Err(e) => assert!(matches!(e.error, GroupError::Failed(_)), "{}", e.error),
        Ok(_) => panic!("a failed group enqueued an operation"),
    }
    assert!(group.failure().is_some());

    // The process is healthy: a new group (same name) works, and once
    // the gate opens the old NCCL stream drains too.
    let fresh = world_of_one("hang", options(dumps.path()));
    all_reduce_works(&fresh, &stream);
    fresh.destroy().expect("destroy");
    drop(work);
    stream.synchronize().expect("drain");
}

/// An enqueue that never returns (a custom operation stuck in its own
/// code, as NCCL's call is when a peer never connects) fails the group
/// from the watchdog within the operation's timeout plus a second, while
/// the issuing thread is still stuck; released, that thread's operation
/// fails too (enqueued after its group failed).
#[test]
fn gpu_an_enqueue_that_blocks_fails_the_group_within_its_timeout() {
    let Some(stream) = stream_on_first_gpu() else {
        return;
    };
    let _serial = serial();
    let dumps = tempfile::tempdir().expect("a temporary folder");
    let group = world_of_one("stuck-enqueue", options(dumps.path()));
    all_reduce_works(&group, &stream);
    let (release, released) = mpsc::channel::<()>();
    let started = Instant::now();
    let issuer = {
        let group = group.clone();
        let stream = Arc::clone(&stream);
        thread::spawn(move || {
            let tensor = Tensor::<f32>::zeros(&stream, &[16]).expect("tensor");
            group
                .custom("stuck", 0, tensor, &stream, move |_, _, _| {
                    // Stuck until the test lets go (bounded, so a broken
                    // watchdog fails the test instead of hanging it).
                    let _ = released.recv_timeout(Duration::from_secs(60));
                    Ok(Status::Success)
                })
                .map_err(|e| e.error.to_string())
                .and_then(|work| work.wait().map(drop).map_err(|e| e.to_string()))
        })
    };
    let failure = loop {
        if let Some(failure) = group.failure() {
            break failure;
        }
        assert!(
            started.elapsed() < OP_TIMEOUT + SLACK,
            "no failure {:?} after the enqueue started",
            started.elapsed()
        );
        thread::sleep(Duration::from_millis(5));
    };
    let took = started.elapsed();
    assert!(
        took >= OP_TIMEOUT,
        "failed after {took:?}, before the timeout"
    );
    match &failure.cause {
        FailureCause::EnqueueBlocked {
            device, timeout, ..
        } => assert_eq!((*device, *timeout), (0, OP_TIMEOUT)),
        other => panic!("expected EnqueueBlocked, got {other:?}"),
    }
    println!("the failure: {failure}");
    let _ = release.send(());
    let result = issuer.join().expect("the issuing thread");
    let error = result.expect_err("the stuck operation's group failed under it");
    assert!(error.contains("stuck enqueueing"), "{error}");
    assert!(failure.wait_details(Duration::from_secs(20)).is_some());
    stream.synchronize().expect("drain");
    all_reduce_works(
        &world_of_one("after-stuck-enqueue", options(dumps.path())),
        &stream,
    );
}

#[test]
fn gpu_abort_from_another_thread_releases_a_waiting_thread() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    let _serial = serial();
    let stream = devices[0].new_stream().expect("stream");
    let dumps = tempfile::tempdir().expect("a temporary folder");
    let group = world_of_one(
        "abort-waiter",
        options(dumps.path()).with_op_timeout(Duration::from_secs(120)),
    );
    let gate = Arc::new(Gate::new(&devices[0]));
    let work = enqueued(never_completes(&group, &stream, &gate), "blocked op");
    let (sender, receiver) = mpsc::channel();
    let waiter_gate = Arc::clone(&gate);
    let waiter = thread::spawn(move || {
        let started = Instant::now();
        let result = work.synchronize(Duration::from_secs(120));
        // The waiter is released before the communicators are aborted;
        // ending the GPU work lets NCCL's abort finish.
        waiter_gate.open();
        let _ = sender.send((result.map_err(|e| e.to_string()), started.elapsed()));
    });
    thread::sleep(Duration::from_millis(300));
    let aborting = Instant::now();
    group.abort().expect("abort within its bound");
    let (result, _) = receiver
        .recv_timeout(Duration::from_secs(10))
        .expect("the waiter returned after the abort");
    waiter.join().expect("the waiter thread");
    let error = result.expect_err("the waited operation was aborted");
    assert!(
        error.contains("was pending when the group was aborted"),
        "{error}"
    );
    assert!(aborting.elapsed() < Duration::from_secs(10));
    assert!(matches!(
        group.barrier(&stream).map(drop),
        Err(GroupError::Aborted { .. })
    ));
    // The abort dumped the flight recorder.
    let failure = group.failure().expect("the abort's failure");
    let path = details_of(&failure)
        .dump
        .expect("dumps are on")
        .expect("the dump was written");
    assert!(path.starts_with(dumps.path()), "{}", path.display());
    let dump = read_dump(&path);
    assert_eq!(dump["ops"][0]["state"], "failed");
    stream.synchronize().expect("drain");
}

#[test]
fn gpu_dropping_a_group_with_pending_work_fails_the_work() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    let _serial = serial();
    let stream = devices[0].new_stream().expect("stream");
    let dumps = tempfile::tempdir().expect("a temporary folder");
    let abort_timeout = Duration::from_secs(2);
    let group = world_of_one(
        "dropped",
        options(dumps.path())
            .with_op_timeout(Duration::from_secs(120))
            .with_abort_timeout(abort_timeout),
    );
    let gate = Arc::new(Gate::new(&devices[0]));
    let work = enqueued(never_completes(&group, &stream, &gate), "blocked op");
    let started = Instant::now();
    // NCCL's abort may wait for the device while the gate holds it: the
    // drop returns after the abort bound all the same.
    drop(group);
    let dropping_took = started.elapsed();
    // What NCCL's abort does to a hung kernel: the GPU work ends. Before
    // any driver call: the abort left running may hold the device in a
    // synchronising call that waits for the gated stream, and a driver
    // call here could wait behind it.
    gate.open();
    let error = work
        .synchronize(Duration::from_secs(30))
        .expect_err("the group was dropped under the operation");
    assert!(
        dropping_took < abort_timeout + SLACK * 3,
        "dropping took {dropping_took:?}"
    );
    assert!(
        error
            .to_string()
            .contains("was pending when the group was dropped"),
        "{error}"
    );
    drop(work);
    // Nothing is left stuck: the stream drains and a new group works.
    stream
        .synchronize()
        .expect("the stream drains after the abort");
    let fresh = world_of_one("dropped", options(dumps.path()));
    all_reduce_works(&fresh, &stream);
}

#[test]
fn gpu_creation_with_a_rank_that_never_comes_fails_within_its_deadline() {
    let Some(stream) = stream_on_first_gpu() else {
        return;
    };
    let _serial = serial();
    let dumps = tempfile::tempdir().expect("a temporary folder");
    let timeout = Duration::from_secs(3);
    // The failed group lives on beside the healthy one below.
    let (_group, error, took) = without_rank_1(
        "alone",
        options(dumps.path()).with_timeout(timeout),
        &stream,
    );
    assert!(
        took < timeout + SLACK * 3,
        "creation failed only after {took:?}"
    );
    assert!(
        error.to_string().contains("ranks [1] never joined"),
        "{error}"
    );
    // Healthy afterwards.
    all_reduce_works(&world_of_one("after-alone", options(dumps.path())), &stream);
}

/// An abort bounded by `abort_timeout` returns within it even when NCCL's
/// abort cannot finish (here: it may wait for the device, which the gate
/// holds): `AbortStalled` if it stalled, `Ok` if NCCL did not need to wait.
#[test]
fn gpu_an_abort_is_bounded() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    let _serial = serial();
    let stream = devices[0].new_stream().expect("stream");
    let dumps = tempfile::tempdir().expect("a temporary folder");
    let bound = Duration::from_secs(1);
    let group = world_of_one(
        "stalled-abort",
        options(dumps.path())
            .with_op_timeout(Duration::from_secs(120))
            .with_abort_timeout(bound),
    );
    let gate = Arc::new(Gate::new(&devices[0]));
    let work = enqueued(never_completes(&group, &stream, &gate), "blocked op");
    let started = Instant::now();
    let outcome = group.abort();
    let took = started.elapsed();
    gate.open();
    assert!(
        took < bound + SLACK,
        "abort took {took:?}, its bound is {bound:?}"
    );
    match &outcome {
        Ok(()) => println!("NCCL's abort returned in {took:?} with the stream held"),
        Err(error @ GroupError::AbortStalled { .. }) => {
            let text = error.to_string();
            assert!(text.contains("\"stalled-abort\""), "{text}");
            assert!(text.contains("left running on its own thread"), "{text}");
            println!("the abort stalled and was bounded: {text}");
        }
        Err(other) => panic!("abort failed: {other}"),
    }
    assert!(work.synchronize(Duration::from_secs(30)).is_err());
    drop(work);
    stream.synchronize().expect("drain");
}

/// NCCL 2.28 refuses a recv from this rank with no matching send: the
/// nonblocking communicator reports `ncclInvalidUsage` after accepting the
/// group, and nccl-core aborts it. The operation was left to NCCL, so the
/// group fails (the tensor comes back, its release ordered after the NCCL
/// stream), and a new group works.
#[test]
fn gpu_recv_without_send_is_refused_and_fails_the_group() {
    let Some(stream) = stream_on_first_gpu() else {
        return;
    };
    let _serial = serial();
    let dumps = tempfile::tempdir().expect("a temporary folder");
    let group = world_of_one("lonely-recv", options(dumps.path()));
    let tensor = Tensor::<f32>::zeros(&stream, &[1024]).expect("tensor");
    let refused = group
        .custom(
            "recv_without_send",
            0,
            tensor,
            &stream,
            |comm, nccl_stream, t| {
                let nccl_group = Group::start()?;
                let _ = comm.recv(&mut *t, 0, nccl_stream)?;
                Ok(nccl_group.end()?)
            },
        )
        .expect_err("NCCL refuses a recv with no send");
    let text = refused.error.to_string();
    assert!(text.contains("ncclInvalidUsage"), "{text}");
    assert_eq!(refused.buffers.len(), 1024, "the tensor comes back");
    let deadline = Instant::now() + Duration::from_secs(5);
    while group.failure().is_none() {
        assert!(
            Instant::now() < deadline,
            "the watchdog did not fail the group"
        );
        thread::sleep(Duration::from_millis(10));
    }
    let failure = group.failure().expect("failure");
    assert!(
        matches!(failure.cause, FailureCause::Enqueue { .. }),
        "{failure}"
    );
    all_reduce_works(
        &world_of_one("after-lonely-recv", options(dumps.path())),
        &stream,
    );
}

#[test]
fn gpu_flight_recorder_on_request() {
    let Some(stream) = stream_on_first_gpu() else {
        return;
    };
    let _serial = serial();
    let dumps = tempfile::tempdir().expect("a temporary folder");
    let group = world_of_one("recorded", options(dumps.path()).with_recorder_capacity(4));
    for _ in 0..3 {
        all_reduce_works(&group, &stream);
    }
    let t = Tensor::<half::f16>::zeros(&stream, &[33]).expect("tensor");
    let work = enqueued(group.broadcast(t, 0, &stream), "broadcast");
    work.synchronize(Duration::from_secs(30))
        .expect("broadcast");
    let barrier = group.barrier(&stream).expect("barrier");
    barrier
        .synchronize(Duration::from_secs(30))
        .expect("barrier");
    drop(barrier);
    // The watchdog marks completions within a few of its intervals.
    let deadline = Instant::now() + Duration::from_secs(10);
    let dump: FlightDump = loop {
        let dump = group.flight_record();
        if dump.ops.iter().all(|op| op.state == OpState::Completed) {
            break dump;
        }
        assert!(Instant::now() < deadline, "ops never completed: {dump:?}");
        thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(dump.total_recorded, 5);
    assert_eq!(dump.reason, "on request");
    // Capacity 4: the first all_reduce was overwritten.
    let names: Vec<_> = dump.ops.iter().map(|op| (op.seq, &*op.op)).collect();
    assert_eq!(
        names,
        vec![
            (1, "all_reduce"),
            (2, "all_reduce"),
            (3, "broadcast"),
            (4, "barrier")
        ]
    );
    let broadcast = &dump.ops[2];
    assert_eq!(broadcast.count, 33);
    assert_eq!(broadcast.peer, Some(0));
    assert_eq!(
        broadcast.dtype.as_deref(),
        Some(nccl_core::DataType::Float16.short_name())
    );
    assert!(broadcast.finished_us >= Some(broadcast.enqueued_us));
    assert_eq!(
        (dump.last_enqueued, dump.last_completed),
        (Some(4), Some(4))
    );
    assert_eq!(group.pending_operations(), 0);
    let json: serde_json::Value = serde_json::from_str(&dump.to_json()).expect("JSON");
    assert_eq!(json["ops"][2]["dtype"], "half");
    group.destroy().expect("destroy");
}
