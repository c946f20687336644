//! The fault suite: hangs become errors within the deadline, and the
//! process stays healthy.
//!
//! * `gpu_*` (one GPU): an operation that can never complete (the NCCL
//!   stream waits on a device flag nobody sets) times out, is aborted
//!   and returns `Err` within its timeout plus a second, names itself and
//!   leaves a flight-recorder dump; a new group works afterwards. An abort
//!   from another thread releases a waiting thread; dropping a group with
//!   pending work fails that work instead of hanging it; communicator
//!   creation with a rank that never comes fails within its deadline and
//!   names the rank; the flight recorder on request.
//! * `gpu_rank_*` (one GPU or more): ranks launched with `nccl_launch` at
//!   world sizes 2 and 4, on nonblocking and blocking communicators (with
//!   fewer GPUs than ranks, simulated hosts on GPU 0 over NCCL's socket
//!   transport). A rank killed with SIGKILL in the middle of an all_reduce
//!   loop, a rank that stalls, a rank that exits cleanly: every other rank
//!   gets `GroupError::Failed` within the operation's timeout plus a second,
//!   and its failure and flight-recorder dump name the faulty rank as
//!   lagging. A rank that never starts: creation fails with `InitTimeout`
//!   naming it, within the group's timeout.

#[path = "../../nccl-core/tests/support/mod.rs"]
mod support;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use nccl_core::{CudaStream, Device, Group, ReduceOp, Status};
use nccl_group::{
    CommMode, FailureCause, FlightDump, GroupError, GroupOptions, InProcessStore, OpResult,
    OpState, ProcessGroup, Work,
};
use nccl_launch::{Ending, Launch, Outcome, Placement, WaitPolicy};
use nccl_tensor::Tensor;

/// The timeout of operations meant to hang.
const OP_TIMEOUT: Duration = Duration::from_secs(2);
/// What the issue allows past the timeout.
const SLACK: Duration = Duration::from_secs(1);

/// The tests of this file run one at a time: NCCL's abort and its init
/// may synchronise the whole device, which would wait for another test's
/// closed gate.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn options(dump_dir: &std::path::Path) -> GroupOptions {
    GroupOptions::default()
        .with_op_timeout(OP_TIMEOUT)
        .with_dump_dir(Some(dump_dir.to_path_buf()))
}

fn group(name: &str, options: GroupOptions) -> ProcessGroup {
    ProcessGroup::new(
        name,
        0,
        1,
        Arc::new(InProcessStore::new()),
        "in-process",
        options,
    )
    .unwrap_or_else(|e| panic!("creating group {name:?}: {e}"))
}

#[track_caller]
fn enqueued<B: nccl_group::WorkBuffers>(result: OpResult<B>, what: &str) -> Work<B> {
    result.unwrap_or_else(|e| panic!("{what}: {}", e.error))
}

/// A 32-bit flag in pinned, device-mapped host memory that a stream can be
/// made to wait on (`cuStreamWaitValue32`): GPU work that cannot complete
/// until the test opens the gate. Opening is a plain store to host memory,
/// with no driver call: NCCL's abort may hold the device in a synchronising
/// call waiting for the gated stream, and a driver call to open the gate
/// could wait behind it.
struct Gate {
    device: Device,
    /// The host address of the flag (an address, so the gate is `Send`).
    host: usize,
    /// Its device address.
    flag: cudarc::driver::sys::CUdeviceptr,
}

impl Gate {
    fn new(device: &Device) -> Self {
        device.bind_to_thread().expect("bind the device");
        let mut flag = 0;
        // SAFETY: a 4-byte pinned allocation mapped into the current
        // context, closed (zeroed) before any stream can wait on it; `flag`
        // receives its device address.
        let host = unsafe {
            let host = cudarc::driver::result::malloc_host(
                4,
                cudarc::driver::sys::CU_MEMHOSTALLOC_DEVICEMAP,
            )
            .expect("allocate the gate");
            std::ptr::write_volatile(host.cast::<u32>(), 0);
            let mapped = cudarc::driver::sys::cuMemHostGetDevicePointer_v2(&mut flag, host, 0);
            assert_eq!(mapped, cudarc::driver::sys::CUresult::CUDA_SUCCESS);
            host
        };
        Self {
            device: device.clone(),
            host: host as usize,
            flag,
        }
    }

    /// Enqueues on `stream` a wait until the gate opens.
    fn block(&self, stream: &CudaStream) {
        // SAFETY: `flag` is the device address of a live mapped allocation
        // (freed only on drop, after the gate is opened and the streams
        // that waited on it have drained).
        let result = unsafe {
            cudarc::driver::sys::cuStreamWaitValue32_v2(
                stream.cu_stream(),
                self.flag,
                1,
                cudarc::driver::sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32,
            )
        };
        assert_eq!(result, cudarc::driver::sys::CUresult::CUDA_SUCCESS);
    }

    /// Opens the gate: every stream waiting on it goes on. Any thread may
    /// open it, at any time.
    fn open(&self) {
        // SAFETY: `host` is the live, 4-byte aligned pinned allocation made
        // in `new`; the GPU only reads it.
        unsafe { std::ptr::write_volatile(self.host as *mut u32, 1) };
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.open();
        let _ = self.device.bind_to_thread();
        // SAFETY: the gate is open; callers drain the waiting streams
        // before dropping it (every test synchronises them first).
        unsafe {
            let _ = cudarc::driver::result::free_host(self.host as *mut std::ffi::c_void);
        }
    }
}

/// An operation on the group's NCCL stream that cannot complete while
/// `gate` is closed: the GPU waits, as it would for a peer that never
/// comes. (A recv from this rank with no matching send, the classic
/// one-GPU hang, is refused by NCCL 2.28 up front: see
/// `gpu_recv_without_send_is_refused_and_fails_the_group`.)
fn never_completes(
    group: &ProcessGroup,
    stream: &Arc<CudaStream>,
    gate: &Arc<Gate>,
) -> OpResult<Tensor<f32>> {
    let tensor = Tensor::<f32>::zeros(stream, &[1024]).expect("tensor");
    let gate = Arc::clone(gate);
    group.custom(
        "blocked_on_gate",
        0,
        tensor,
        stream,
        move |_, nccl_stream, _| {
            gate.block(nccl_stream);
            Ok(Status::Success)
        },
    )
}

/// The group still works: an all_reduce of ones over one rank.
fn all_reduce_works(group: &ProcessGroup, stream: &Arc<CudaStream>) {
    let ones = Tensor::from_host(stream, &[1.0f32; 16], &[16]).expect("upload");
    let work = enqueued(group.all_reduce(ones, ReduceOp::Sum, stream), "all_reduce");
    let t = work.wait().expect("wait");
    assert_eq!(t.to_vec(stream).expect("download"), vec![1.0f32; 16]);
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

fn read_dump(path: &std::path::Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).expect("the dump file");
    serde_json::from_str(&text).expect("the dump is JSON")
}

#[test]
fn gpu_an_operation_that_never_completes_times_out_and_the_process_stays_healthy() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    let _serial = serial();
    let stream = devices[0].new_stream().expect("stream");
    let dumps = tempfile::tempdir().expect("a temporary folder");
    let group = group("hang", options(dumps.path()));
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
    let op = failure.op.expect("the failed operation's record");
    assert_eq!(
        (op.op, op.seq, op.collective_seq),
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
    let fresh = self::group("hang", options(dumps.path()));
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
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    let _serial = serial();
    let stream = devices[0].new_stream().expect("stream");
    let dumps = tempfile::tempdir().expect("a temporary folder");
    let group = group("stuck-enqueue", options(dumps.path()));
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
        &self::group("after-stuck-enqueue", options(dumps.path())),
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
    let group = group(
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
    let group = group(
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
    let fresh = self::group("dropped", options(dumps.path()));
    all_reduce_works(&fresh, &stream);
}

#[test]
fn gpu_creation_with_a_rank_that_never_comes_fails_within_its_deadline() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    let _serial = serial();
    let stream = devices[0].new_stream().expect("stream");
    let dumps = tempfile::tempdir().expect("a temporary folder");
    let timeout = Duration::from_secs(3);
    // Rank 0 of 2; rank 1 never starts.
    let group = ProcessGroup::new(
        "alone",
        0,
        2,
        Arc::new(InProcessStore::new()),
        "in-process",
        options(dumps.path()).with_timeout(timeout),
    )
    .expect("group");
    let started = Instant::now();
    let tensor = Tensor::<f32>::zeros(&stream, &[8]).expect("tensor");
    let error = match group.all_reduce(tensor, ReduceOp::Sum, &stream) {
        Err(e) => e.error,
        Ok(_) => panic!("an all_reduce over an absent rank was enqueued"),
    };
    let took = started.elapsed();
    assert!(
        took < timeout + SLACK * 3,
        "creation failed only after {took:?}"
    );
    match &error {
        GroupError::InitTimeout { missing, .. } => assert_eq!(missing, &vec![1]),
        other => panic!("expected InitTimeout, got {other}"),
    }
    assert!(
        error.to_string().contains("ranks [1] never joined"),
        "{error}"
    );
    // Healthy afterwards.
    all_reduce_works(&self::group("after-alone", options(dumps.path())), &stream);
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
    let group = group(
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
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    let _serial = serial();
    let stream = devices[0].new_stream().expect("stream");
    let dumps = tempfile::tempdir().expect("a temporary folder");
    let group = group("lonely-recv", options(dumps.path()));
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
        &self::group("after-lonely-recv", options(dumps.path())),
        &stream,
    );
}

#[test]
fn gpu_flight_recorder_on_request() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    let _serial = serial();
    let stream = devices[0].new_stream().expect("stream");
    let dumps = tempfile::tempdir().expect("a temporary folder");
    let group = group("recorded", options(dumps.path()).with_recorder_capacity(4));
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
    let names: Vec<_> = dump.ops.iter().map(|op| (op.seq, op.op)).collect();
    assert_eq!(
        names,
        vec![
            (1, "all_reduce"),
            (2, "all_reduce"),
            (3, "broadcast"),
            (4, "barrier")
        ]
    );
    let broadcast = dump.ops[2];
    assert_eq!(broadcast.count, 33);
    assert_eq!(broadcast.peer, Some(0));
    assert_eq!(broadcast.dtype, Some(nccl_core::DataType::Float16));
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

// ------------------------------------------ FailurePolicy::AbortProcess

const ABORT_CHILD: &str = "gpu_abort_process_child";

/// With `FailurePolicy::AbortProcess` a timed-out operation ends the
/// process with SIGABRT, after the failure is printed and the flight
/// recorder written, and before any waiter sees an error.
#[test]
fn gpu_abort_process_policy_writes_the_dump_then_aborts() {
    use std::os::unix::process::ExitStatusExt;

    let Some(_) = support::require_gpus(1) else {
        return;
    };
    let _serial = serial();
    let dumps = tempfile::tempdir().expect("a temporary folder");
    let mut child = Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", ABORT_CHILD, "--nocapture", "--test-threads=1"])
        .env(ROLE_VAR, "abort-process")
        .env("NCCL_GROUP_DUMP_DIR", dumps.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the child");
    let drain = |mut pipe: Box<dyn Read + Send>| {
        thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let out = drain(Box::new(child.stdout.take().expect("stdout")));
    let err = drain(Box::new(child.stderr.take().expect("stderr")));
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("the child did not abort within 60 s");
        }
        thread::sleep(Duration::from_millis(20));
    };
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    println!("----- child stdout -----\n{out}\n----- child stderr -----\n{err}");
    assert_eq!(status.signal(), Some(6), "the child ended with {status}");
    assert!(
        err.contains("aborting the process (FailurePolicy::AbortProcess)"),
        "{err}"
    );
    assert!(err.contains("did not complete within its timeout"), "{err}");
    assert!(!out.contains("child: the wait returned"), "{out}");
    let dumped: Vec<_> = std::fs::read_dir(dumps.path())
        .expect("the dump folder")
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        dumped
            .iter()
            .any(|name| name.starts_with("abort-process-g0-rank0-pid")),
        "{dumped:?}"
    );
}

/// The child of the test above (SKIP unless spawned by it).
#[test]
fn gpu_abort_process_child() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    if std::env::var(ROLE_VAR).as_deref() != Ok("abort-process") {
        println!("SKIP: {ABORT_CHILD} runs only as a child of gpu_abort_process_policy_*");
        return;
    }
    let stream = devices[0].new_stream().expect("stream");
    let group = ProcessGroup::new(
        "abort-process",
        0,
        1,
        Arc::new(InProcessStore::new()),
        "in-process",
        GroupOptions::default()
            .with_op_timeout(Duration::from_secs(1))
            .with_abort_timeout(Duration::from_secs(1))
            .with_failure_policy(nccl_group::FailurePolicy::AbortProcess),
    )
    .expect("group");
    let gate = Arc::new(Gate::new(&devices[0]));
    let work = enqueued(never_completes(&group, &stream, &gate), "blocked op");
    let result = work.synchronize(Duration::from_secs(30));
    println!("child: the wait returned {result:?}");
}

// ------------------------------------- a rank fails (world sizes 2 and 4)

const ROLE_VAR: &str = "NCCL_GROUP_FAULT_TEST_ROLE";
/// The ranks' communicator kind (`blocking` or `nonblocking`).
const COMMS_VAR: &str = "NCCL_GROUP_FAULT_TEST_COMMS";
/// The ranks' test.
const FAULT_CHILD: &str = "gpu_rank_fault_child";
/// The iteration of the all_reduce loop at which the faulty rank fails.
const DIE_AT: usize = 20;
/// The ranks' operation timeout.
const CHILD_OP_TIMEOUT: Duration = Duration::from_secs(5);
/// The ranks' communicator-creation timeout when a rank never starts.
const CHILD_INIT_TIMEOUT: Duration = Duration::from_secs(5);
/// The ranks' communicator-creation timeout otherwise.
const CHILD_TIMEOUT: Duration = Duration::from_secs(30);
/// The bound on one launch (every rank ended past it).
const LAUNCH_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a rank waits for another's mark in the launch's folder.
const MARK_TIMEOUT: Duration = Duration::from_secs(40);
/// Elements of the loop's all_reduce.
const CHILD_LEN: usize = 1 << 16;
/// The world sizes and communicator kinds every fault runs at, in sequence.
const WORLD_SIZES: [usize; 2] = [2, 4];
const FAULT_COMM_MODES: [CommMode; 2] = [CommMode::Nonblocking, CommMode::Blocking];
/// Marks in the launch's folder.
const VICTIM_READY: &str = "victim-ready";
const KILLED_AT: &str = "killed-at";
const EXITED_AT: &str = "exited-at";

/// What happens to one rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// The last rank is killed with SIGKILL in the middle of an all_reduce
    /// loop (by the launching test).
    Killed,
    /// Rank 0 (which hosts the TCP store) stays alive but never issues the
    /// next all_reduce, until the others have failed.
    Stalls,
    /// The last rank is never started: creating the first communicator
    /// times out.
    NeverStarts,
    /// The last rank exits with status 0 (dropping its group) while the
    /// others wait in an all_reduce.
    ExitsCleanly,
}

impl Fault {
    const ALL: [Fault; 4] = [
        Fault::Killed,
        Fault::Stalls,
        Fault::NeverStarts,
        Fault::ExitsCleanly,
    ];

    fn role(self) -> &'static str {
        match self {
            Fault::Killed => "rank-killed",
            Fault::Stalls => "rank-stalls",
            Fault::NeverStarts => "rank-never-starts",
            Fault::ExitsCleanly => "rank-exits-cleanly",
        }
    }

    fn from_role(role: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|fault| fault.role() == role)
    }

    /// The rank the fault happens to.
    fn victim(self, world: usize) -> usize {
        match self {
            Fault::Stalls => 0,
            _ => world - 1,
        }
    }
}

fn comm_mode_name(mode: CommMode) -> &'static str {
    match mode {
        CommMode::Blocking => "blocking",
        _ => "nonblocking",
    }
}

/// Microseconds since the Unix epoch (the ranks share the host's clock).
fn unix_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Writes `value` to `dir/name` atomically.
fn publish(dir: &Path, name: &str, value: &str) {
    let partial = dir.join(format!("{name}.partial"));
    std::fs::write(&partial, value).expect("write a mark in the launch's folder");
    std::fs::rename(&partial, dir.join(name)).expect("publish the mark");
}

/// The contents of `dir/name` once some rank published it, or `None`
/// after `timeout`.
fn await_mark(dir: &Path, name: &str, timeout: Duration) -> Option<String> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(text) = std::fs::read_to_string(dir.join(name)) {
            return Some(text);
        }
        if Instant::now() >= deadline {
            return None;
        }
        thread::sleep(Duration::from_millis(5));
    }
}

/// The last `max` characters of `text`.
fn tail(text: &str, max: usize) -> &str {
    let start = text.len().saturating_sub(max);
    let start = (start..text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(text.len());
    &text[start..]
}

/// Runs `fault` at every world size and communicator kind, in sequence,
/// each launch bounded, and reports every combination that failed.
fn run_fault(fault: Fault) {
    let exe = std::env::current_exe().expect("the test binary");
    let started = Instant::now();
    let mut failures = Vec::new();
    for world in WORLD_SIZES {
        for mode in FAULT_COMM_MODES {
            let label = format!("{fault:?} at world size {world} on {mode:?} communicators");
            let launched = Instant::now();
            match launch_fault(&exe, fault, world, mode, &label) {
                Ok(()) => println!("{label}: ok in {:?}", launched.elapsed()),
                Err(problem) => {
                    println!("{label}: FAILED in {:?}", launched.elapsed());
                    failures.push(format!("{label}: {problem}"));
                }
            }
        }
    }
    println!("{fault:?}: every combination in {:?}", started.elapsed());
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// One launch of `world` ranks of [`FAULT_CHILD`] with `fault`.
fn launch_fault(
    exe: &Path,
    fault: Fault,
    world: usize,
    mode: CommMode,
    label: &str,
) -> Result<(), String> {
    let victim = fault.victim(world);
    let launch = Launch::new(world)
        .map_err(|e| format!("launch: {e}"))?
        .placement(Placement::Auto)
        .timeout(Some(LAUNCH_TIMEOUT))
        .keep_output(true)
        .env(ROLE_VAR, fault.role())
        .env(COMMS_VAR, comm_mode_name(mode))
        .env("NCCL_RS_STORE", "tcp")
        .env("NCCL_RS_STORE_TIMEOUT_SECS", "30");
    let args = ["--exact", FAULT_CHILD, "--nocapture", "--test-threads=1"];
    let mut job = if fault == Fault::NeverStarts {
        launch.spawn_ranks(exe, args, (0..world).filter(|&r| r != victim))
    } else {
        launch.spawn(exe, args)
    }
    .map_err(|e| format!("launch: {e}"))?;
    println!("{label}: ranks placed as {:?}", job.placement());
    if fault == Fault::Killed {
        let ready = job.dir().join(VICTIM_READY);
        let deadline = Instant::now() + LAUNCH_TIMEOUT;
        while !ready.exists() {
            if Instant::now() >= deadline || job.status(victim).is_some() {
                for rank in 0..world {
                    job.kill(rank);
                }
                let outcome = job.wait(WaitPolicy::All);
                return Err(format!(
                    "rank {victim} never reached iteration {DIE_AT} to be killed there{}",
                    outputs(&outcome)
                ));
            }
            thread::sleep(Duration::from_millis(2));
        }
        let killed_at = unix_us();
        job.kill(victim);
        publish(job.dir(), KILLED_AT, &killed_at.to_string());
        println!("{label}: killed rank {victim} with SIGKILL");
    }
    let outcome = job.wait(WaitPolicy::All);
    check_outcome(fault, world, victim, &outcome)
}

/// Every rank's output, for a failure message.
fn outputs(outcome: &Outcome) -> String {
    outcome
        .ranks
        .iter()
        .map(|r| {
            format!(
                "\n----- rank {} ({:?}) stdout (end) -----\n{}\n----- rank {} stderr (end) -----\n{}",
                r.rank,
                r.ending,
                tail(&r.stdout, 3000),
                r.rank,
                tail(&r.stderr, 3000)
            )
        })
        .collect()
}

/// What each rank must have done: the faulty one its fault, every other
/// rank failed as expected (its own checks passed) and exited with 0.
fn check_outcome(
    fault: Fault,
    world: usize,
    victim: usize,
    outcome: &Outcome,
) -> Result<(), String> {
    let mut problems = Vec::new();
    if outcome.timed_out {
        problems.push(format!(
            "the launch ran past its {LAUNCH_TIMEOUT:?} timeout (a rank hung)"
        ));
    }
    let expected_ranks = if fault == Fault::NeverStarts {
        world - 1
    } else {
        world
    };
    if outcome.ranks.len() != expected_ranks {
        problems.push(format!(
            "{} ranks were started, expected {expected_ranks}",
            outcome.ranks.len()
        ));
    }
    for r in &outcome.ranks {
        let said = |line: &str| r.stdout.contains(line);
        let problem = match (fault, r.rank == victim) {
            (Fault::NeverStarts, true) => Some("was started, but must never start".to_string()),
            (Fault::Killed, true) => (r.ending != Ending::Killed)
                .then(|| format!("ended {:?}, expected to be killed", r.ending)),
            (Fault::Stalls, true) => (!r.succeeded()
                || !said(&format!("fault child {victim}: stalled rank done")))
            .then(|| format!("ended {:?} without finishing its stall", r.ending)),
            (Fault::ExitsCleanly, true) => (!r.succeeded()
                || !said(&format!("fault child {victim}: exiting cleanly")))
            .then(|| format!("ended {:?}, expected a clean exit (status 0)", r.ending)),
            (_, false) => (!r.succeeded()
                || !said(&format!("fault child {}: failed as expected", r.rank)))
            .then(|| {
                format!(
                    "ended {:?} without failing as expected (its assertion is in its stderr)",
                    r.ending
                )
            }),
        };
        if let Some(problem) = problem {
            problems.push(format!("rank {}: {problem}", r.rank));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("{}{}", problems.join("; "), outputs(outcome)))
    }
}

/// A rank killed with SIGKILL after iteration 20 of an all_reduce loop:
/// every other rank gets `GroupError::Failed` within the operation's
/// timeout plus a second of the kill, and its failure and flight-recorder
/// dump name the dead rank as lagging. At world sizes 2 and 4, on
/// nonblocking and blocking communicators. With fewer GPUs than ranks the
/// ranks are simulated hosts on GPU 0 (NCCL's socket transport).
#[test]
fn gpu_rank_killed_mid_loop_fails_the_others_within_the_deadline() {
    let Some(_) = support::require_gpus(1) else {
        return;
    };
    let _serial = serial();
    run_fault(Fault::Killed);
}

/// A rank that stays alive but never issues the next all_reduce (rank 0,
/// which hosts the TCP store): the others fail within the operation's
/// timeout plus a second and name it as the lagging rank.
#[test]
fn gpu_rank_that_stalls_is_named_as_the_lagging_rank() {
    let Some(_) = support::require_gpus(1) else {
        return;
    };
    let _serial = serial();
    run_fault(Fault::Stalls);
}

/// A rank that never starts: creating the first communicator fails with
/// `GroupError::InitTimeout` naming it, within the group's timeout.
#[test]
fn gpu_rank_that_never_starts_fails_creation_within_the_timeout() {
    let Some(_) = support::require_gpus(1) else {
        return;
    };
    let _serial = serial();
    run_fault(Fault::NeverStarts);
}

/// A rank that exits with status 0 while the others wait in an all_reduce:
/// they get `GroupError::Failed` naming it within the deadline, not a hang.
#[test]
fn gpu_rank_that_exits_cleanly_fails_the_others_within_the_deadline() {
    let Some(_) = support::require_gpus(1) else {
        return;
    };
    let _serial = serial();
    run_fault(Fault::ExitsCleanly);
}

/// One rank of the fault scenarios above, launched by them through
/// `nccl_launch` (SKIP otherwise).
#[test]
fn gpu_rank_fault_child() {
    let Some(_) = support::require_gpus(1) else {
        return;
    };
    let Some(fault) = std::env::var(ROLE_VAR)
        .ok()
        .and_then(|role| Fault::from_role(&role))
    else {
        println!("SKIP: {FAULT_CHILD} runs only as a rank launched by gpu_rank_*");
        return;
    };
    let ranks = support::ranks();
    let (rank, world) = (ranks.rank, ranks.world);
    let mode = match std::env::var(COMMS_VAR).as_deref() {
        Ok("blocking") => CommMode::Blocking,
        _ => CommMode::Nonblocking,
    };
    let victim = fault.victim(world);
    let label = format!(
        "{fault:?} at world size {world} on {mode:?} communicators, rank {rank}{}",
        if rank == victim {
            " (the faulty rank)"
        } else {
            ""
        }
    );
    let dir = ranks
        .dir
        .clone()
        .unwrap_or_else(|| panic!("{label}: NCCL_LAUNCH_DIR is not set"));
    // Every rank but the faulty one says when it is done (also when it
    // panics), so that rank 0 keeps the TCP store up for the others'
    // failure exchange, and a stalled rank knows when to stop.
    let _reported = (rank != victim).then(|| Reported(dir.clone(), rank));
    let timeout = if fault == Fault::NeverStarts {
        CHILD_INIT_TIMEOUT
    } else {
        CHILD_TIMEOUT
    };
    let options = GroupOptions::default()
        .with_comm_mode(mode)
        .with_timeout(timeout)
        .with_op_timeout(CHILD_OP_TIMEOUT)
        .with_abort_timeout(Duration::from_secs(5))
        .with_dump_dir(Some(dir.join(format!("dumps-rank{rank}"))));
    let group = ProcessGroup::from_env_with("faults", options)
        .unwrap_or_else(|e| panic!("{label}: ProcessGroup::from_env_with: {e}"));
    let stream = ranks
        .device()
        .new_stream()
        .unwrap_or_else(|e| panic!("{label}: stream: {e}"));
    let child = Child {
        fault,
        rank,
        world,
        victim,
        label,
        dir,
    };
    if fault == Fault::NeverStarts {
        child.never_starts(&group, &stream);
    } else {
        child.loop_until_failure(group, &stream);
    }
    if rank == 0 && rank != victim {
        child.await_reports();
    }
}

/// Publishes `reported.<rank>` in the launch's folder when dropped.
struct Reported(PathBuf, usize);

impl Drop for Reported {
    fn drop(&mut self) {
        let _ = std::fs::write(self.0.join(format!("reported.{}", self.1)), b"");
    }
}

/// One rank of a fault scenario.
struct Child {
    fault: Fault,
    rank: usize,
    world: usize,
    victim: usize,
    label: String,
    dir: PathBuf,
}

impl Child {
    /// Waits until every rank but the faulty one has reported.
    fn await_reports(&self) {
        for r in (0..self.world).filter(|&r| r != self.victim && r != self.rank) {
            assert!(
                await_mark(&self.dir, &format!("reported.{r}"), MARK_TIMEOUT).is_some(),
                "{}: rank {r} did not report within {MARK_TIMEOUT:?}",
                self.label
            );
        }
    }

    /// The first all_reduce creates the communicator, which cannot form
    /// without the rank that never started: `InitTimeout` naming it, within
    /// the group's timeout; the group has failed afterwards.
    fn never_starts(&self, group: &ProcessGroup, stream: &Arc<CudaStream>) {
        let label = &self.label;
        let tensor = Tensor::<f32>::zeros(stream, &[1024]).expect("tensor");
        // The ranks that started begin together, so that none waits for
        // another's CUDA start-up within the timeout.
        publish(&self.dir, &format!("started.{}", self.rank), "");
        for r in (0..self.world).filter(|&r| r != self.victim) {
            assert!(
                await_mark(&self.dir, &format!("started.{r}"), MARK_TIMEOUT).is_some(),
                "{label}: rank {r} did not start within {MARK_TIMEOUT:?}"
            );
        }
        let started = Instant::now();
        let error = match group.all_reduce(tensor, ReduceOp::Sum, stream) {
            Err(e) => e.error,
            Ok(_) => panic!("{label}: an all_reduce over a rank that never started was enqueued"),
        };
        let took = started.elapsed();
        assert!(
            took <= CHILD_INIT_TIMEOUT + SLACK * 3,
            "{label}: creation failed only after {took:?}, its timeout is {CHILD_INIT_TIMEOUT:?}: {error}"
        );
        match &error {
            GroupError::InitTimeout { missing, .. } => assert_eq!(
                missing,
                &vec![self.victim],
                "{label}: InitTimeout names the wrong ranks: {error}"
            ),
            other => panic!(
                "{label}: expected GroupError::InitTimeout naming rank {}, got {other}",
                self.victim
            ),
        }
        let text = error.to_string();
        assert!(
            text.contains(&format!("ranks [{}] never joined", self.victim)),
            "{label}: {text}"
        );
        match group.barrier(stream).map(drop) {
            Err(GroupError::Failed(failure)) => assert!(
                matches!(failure.cause, FailureCause::Creation { .. }),
                "{label}: the group failed for another reason: {failure}"
            ),
            other => panic!("{label}: after InitTimeout a barrier gave {other:?}, expected Failed"),
        }
        println!(
            "fault child {}: failed as expected after {took:?}: {error}",
            self.rank
        );
    }

    /// All_reduces of rank-dependent values (checked) until the group
    /// fails, or the faulty rank's turn to fail comes.
    fn loop_until_failure(&self, group: ProcessGroup, stream: &Arc<CudaStream>) {
        let label = &self.label;
        let mine = vec![(self.rank + 1) as f32; CHILD_LEN];
        let sum = (self.world * (self.world + 1) / 2) as f32;
        let mut tensor = Tensor::from_host(stream, &mine, &[CHILD_LEN]).expect("upload");
        for iteration in 0..=DIE_AT + 5 {
            if self.rank == self.victim && iteration == DIE_AT {
                return self.fail(group, iteration);
            }
            tensor.copy_from_host(stream, &mine).expect("upload");
            let started = Instant::now();
            let result = match group.all_reduce(tensor, ReduceOp::Sum, stream) {
                Err(e) => Err(e.error),
                Ok(work) => work
                    .synchronize(Duration::from_secs(60))
                    .and_then(|()| work.wait()),
            };
            match result {
                Ok(t) => {
                    let got = t.to_vec(stream).expect("download");
                    if let Some(i) = got.iter().position(|&v| v != sum) {
                        panic!(
                            "{label}: iteration {iteration}: element {i} is {}, expected {sum}",
                            got[i]
                        );
                    }
                    tensor = t;
                }
                Err(error) => return self.report(&error, iteration, started),
            }
        }
        panic!(
            "{label}: every all_reduce up to iteration {} completed, although rank {} {}",
            DIE_AT + 5,
            self.victim,
            match self.fault {
                Fault::Killed => "was killed",
                Fault::Stalls => "stalled",
                _ => "exited",
            }
        );
    }

    /// The faulty rank's part, at `iteration`.
    fn fail(&self, group: ProcessGroup, iteration: usize) {
        let (rank, label) = (self.rank, &self.label);
        match self.fault {
            Fault::Killed => {
                println!("fault child {rank}: waiting to be killed at iteration {iteration}");
                publish(&self.dir, VICTIM_READY, "");
                thread::sleep(LAUNCH_TIMEOUT);
                panic!("{label}: was not killed");
            }
            Fault::Stalls => {
                println!("fault child {rank}: stalling at iteration {iteration}");
                for r in (0..self.world).filter(|&r| r != rank) {
                    assert!(
                        await_mark(&self.dir, &format!("reported.{r}"), MARK_TIMEOUT).is_some(),
                        "{label}: rank {r} did not report within {MARK_TIMEOUT:?} of the stall"
                    );
                }
                // The others aborted their communicators; so does this one.
                let _ = group.abort();
                println!("fault child {rank}: stalled rank done");
            }
            _ => {
                // Let the others enter the all_reduce first.
                thread::sleep(Duration::from_millis(500));
                println!("fault child {rank}: exiting cleanly at iteration {iteration}");
                publish(&self.dir, EXITED_AT, &unix_us().to_string());
                drop(group);
                use std::io::Write;
                let _ = std::io::stdout().flush();
                std::process::exit(0);
            }
        }
    }

    /// A surviving rank's failure: at the faulty rank's iteration, within
    /// the deadline, `GroupError::Failed`, naming the faulty rank as
    /// lagging in the failure and in the flight-recorder dump.
    fn report(&self, error: &GroupError, iteration: usize, started: Instant) {
        let label = &self.label;
        let failed_at = unix_us();
        let after = started.elapsed();
        assert_eq!(
            iteration, DIE_AT,
            "{label}: failed at iteration {iteration}, before the fault: {error}"
        );
        // How long after the fault the error came.
        let (waited, since) = match self.fault {
            Fault::Stalls => (after, "the start of the operation"),
            fault => {
                let mark = if fault == Fault::Killed {
                    KILLED_AT
                } else {
                    EXITED_AT
                };
                let text = await_mark(&self.dir, mark, Duration::from_secs(10))
                    .unwrap_or_else(|| panic!("{label}: no {mark} mark: {error}"));
                let at: u64 = text.trim().parse().expect("a time in microseconds");
                (
                    Duration::from_micros(failed_at.saturating_sub(at)),
                    if fault == Fault::Killed {
                        "the kill"
                    } else {
                        "the exit"
                    },
                )
            }
        };
        assert!(
            waited <= CHILD_OP_TIMEOUT + SLACK,
            "{label}: the error came {waited:?} after {since}, past the operation timeout \
             {CHILD_OP_TIMEOUT:?} + {SLACK:?}: {error}"
        );
        let GroupError::Failed(failure) = error else {
            panic!("{label}: expected GroupError::Failed, got {error:?}");
        };
        let details = failure
            .wait_details(Duration::from_secs(30))
            .unwrap_or_else(|| panic!("{label}: no failure details within 30 s: {failure}"));
        assert!(
            details.lagging.contains(&self.victim),
            "{label}: the failure does not name rank {} as lagging (lagging {:?}, peers {:?}): {failure}",
            self.victim,
            details.lagging,
            details.peers
        );
        let text = failure.to_string();
        assert!(
            text.contains(&format!("ranks {:?}", details.lagging)),
            "{label}: the failure's message does not name the lagging ranks: {text}"
        );
        let path = match &details.dump {
            Some(Ok(path)) => path.clone(),
            other => panic!("{label}: the flight recorder was not dumped: {other:?}"),
        };
        let dump = read_dump(&path);
        let numbers = |field: &str| -> Vec<u64> {
            dump[field]
                .as_array()
                .unwrap_or_else(|| panic!("{label}: the dump has no {field}: {dump}"))
                .iter()
                .filter_map(|v| v.as_u64().or_else(|| v["rank"].as_u64()))
                .collect()
        };
        let (lagging, peers) = (numbers("lagging"), numbers("peers"));
        assert!(
            lagging.contains(&(self.victim as u64)),
            "{label}: the dump {} does not name rank {} as lagging (lagging {lagging:?}, peers {peers:?})",
            path.display(),
            self.victim
        );
        if self.fault != Fault::Stalls {
            assert!(
                !peers.contains(&(self.victim as u64)),
                "{label}: the dump {} has progress from the dead rank {}: {peers:?}",
                path.display(),
                self.victim
            );
        }
        assert_eq!(
            dump["rank"],
            self.rank as u64,
            "{label}: {}",
            path.display()
        );
        assert_eq!(
            dump["world_size"],
            self.world as u64,
            "{label}: {}",
            path.display()
        );
        println!(
            "fault child {}: failed as expected {waited:?} after {since} (cause: {}): {failure}",
            self.rank, failure.cause
        );
    }
}
