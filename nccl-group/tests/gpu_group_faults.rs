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
//! * `multi_gpu_*` (2+ GPUs): one process per GPU over the TCP store, the
//!   last rank dies in the middle of a collective loop; every other rank
//!   gets `Err` within the deadline (no hang), and its failure names the
//!   dead rank; again with each process on a simulated node of its own.

#[path = "../../nccl-core/tests/support/mod.rs"]
mod support;

use std::io::Read;
use std::net::TcpListener;
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

// ------------------------------------------- a rank dies (several GPUs)

const ROLE_VAR: &str = "NCCL_GROUP_FAULT_TEST_ROLE";
const CHILD: &str = "multi_gpu_rank_killed_child";
/// The iteration at which the last rank dies.
const DIE_AT: usize = 20;
/// The children's operation timeout.
const CHILD_OP_TIMEOUT: Duration = Duration::from_secs(5);

/// Kills the last of the processes (one per GPU) in the middle of an
/// all_reduce loop; every survivor must fail within the deadline and name it.
#[test]
fn multi_gpu_rank_killed_mid_loop_fails_the_others_within_the_deadline() {
    let Some(_) = support::require_gpus(2) else {
        return;
    };
    let _serial = serial();
    kill_one_rank(false, CommMode::Nonblocking);
}

/// The same on blocking communicators: a survivor blocked inside NCCL's
/// call (not only waiting for an operation's end) is released by the
/// watchdog's enqueue deadline and abort.
#[test]
fn multi_gpu_rank_killed_with_blocking_communicators() {
    let Some(_) = support::require_gpus(2) else {
        return;
    };
    let _serial = serial();
    kill_one_rank(false, CommMode::Blocking);
}

/// The same with every process on a simulated node of its own
/// (`NCCL_HOSTID`), so the dead rank is seen through NCCL's network
/// transport, as across nodes.
#[test]
fn multi_gpu_rank_killed_on_simulated_nodes() {
    let Some(_) = support::require_gpus(2) else {
        return;
    };
    let _serial = serial();
    kill_one_rank(true, CommMode::Nonblocking);
}

/// The children's communicator kind (`blocking` or unset).
const COMMS_VAR: &str = "NCCL_GROUP_FAULT_TEST_COMMS";

fn kill_one_rank(simulated_nodes: bool, comm_mode: CommMode) {
    let world = Device::count().expect("device count").min(8);
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let dumps = tempfile::tempdir().expect("a temporary folder");
    let exe = std::env::current_exe().expect("the test binary");
    let mut children: Vec<_> = (0..world)
        .map(|rank| {
            let mut command = Command::new(&exe);
            if simulated_nodes {
                command.envs(support::simulated_node_env(rank));
            }
            if comm_mode == CommMode::Blocking {
                command.env(COMMS_VAR, "blocking");
            }
            let mut child = command
                .args(["--exact", CHILD, "--nocapture", "--test-threads=1"])
                .env(ROLE_VAR, "child")
                .env("RANK", rank.to_string())
                .env("WORLD_SIZE", world.to_string())
                .env("LOCAL_RANK", rank.to_string())
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", port.to_string())
                .env("NCCL_GROUP_DUMP_DIR", dumps.path())
                .env_remove("NCCL_RS_STORE")
                .env_remove("NCCL_RS_STORE_SECRET")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn a child");
            let mut out = child.stdout.take().expect("stdout");
            let reader = thread::spawn(move || {
                let mut text = String::new();
                let _ = out.read_to_string(&mut text);
                text
            });
            (child, reader)
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut failures = Vec::new();
    for (rank, (child, reader)) in children.iter_mut().enumerate() {
        let status = loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                break Some(status);
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                break None;
            }
            thread::sleep(Duration::from_millis(50));
        };
        let out = std::mem::replace(reader, thread::spawn(String::new))
            .join()
            .unwrap_or_default();
        println!("----- rank {rank} -----\n{out}");
        let victim = rank == world - 1;
        match status {
            None => failures.push(format!("rank {rank} hung")),
            Some(s) if victim && s.success() => failures.push(format!("rank {rank} did not die")),
            Some(s) if !victim && !s.success() => failures.push(format!("rank {rank}: {s}")),
            Some(_) if !victim && !out.contains(&format!("child {rank}: failed as expected")) => {
                failures.push(format!("rank {rank} did not report its failure"))
            }
            Some(_) => {}
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("; "));
}

/// One process of the scenario above (SKIP unless spawned by it).
#[test]
fn multi_gpu_rank_killed_child() {
    let Some(_) = support::require_gpus(1) else {
        return;
    };
    let _serial = serial();
    if std::env::var(ROLE_VAR).as_deref() != Ok("child") {
        println!("SKIP: {CHILD} runs only as a child of multi_gpu_rank_killed_mid_loop_*");
        return;
    }
    let (rank, world) = (support::child_var("RANK"), support::child_var("WORLD_SIZE"));
    let victim = world - 1;
    let comm_mode = match std::env::var(COMMS_VAR).as_deref() {
        Ok("blocking") => CommMode::Blocking,
        _ => CommMode::Nonblocking,
    };
    let group = ProcessGroup::from_env_with(
        "killed",
        GroupOptions::default()
            .with_timeout(Duration::from_secs(60))
            .with_op_timeout(CHILD_OP_TIMEOUT)
            .with_comm_mode(comm_mode),
    )
    .unwrap_or_else(|e| panic!("rank {rank}: {e}"));
    let device = Device::new(support::child_var("LOCAL_RANK")).expect("device");
    let stream = device.new_stream().expect("stream");
    let mut tensor = Tensor::<f32>::zeros(&stream, &[1 << 20]).expect("tensor");
    let mut last_ok = Instant::now();
    for iteration in 0.. {
        if rank == victim && iteration == DIE_AT {
            println!("child {rank}: dying at iteration {iteration}");
            std::process::abort();
        }
        let work = match group.all_reduce(tensor, ReduceOp::Sum, &stream) {
            Ok(work) => work,
            Err(e) => {
                report(rank, &e.error, last_ok, victim);
                return;
            }
        };
        if let Err(error) = work.synchronize(Duration::from_secs(60)) {
            report(rank, &error, last_ok, victim);
            return;
        }
        tensor = work.wait().expect("wait");
        last_ok = Instant::now();
    }
}

/// A survivor's failure: within the deadline, naming the dead rank.
fn report(rank: usize, error: &GroupError, last_ok: Instant, victim: usize) {
    let after = last_ok.elapsed();
    assert!(
        after <= CHILD_OP_TIMEOUT + Duration::from_secs(3),
        "rank {rank}: the error came {after:?} after the last good op: {error}"
    );
    let GroupError::Failed(failure) = error else {
        panic!("rank {rank}: expected GroupError::Failed, got {error}");
    };
    let details = details_of(failure);
    assert!(
        details.lagging.contains(&victim),
        "rank {rank}: the failure does not name rank {victim}: {failure}"
    );
    println!("child {rank}: failed as expected after {after:?}: {failure}");
}
