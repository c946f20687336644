//! `ProcessGroup` on GPUs.
//!
//! * `gpu_*` (one GPU, world size 1): every operation in its single and
//!   list (`*_multi`) forms with values checked on the host; ordering with
//!   the caller's stream; `Work` completion, synchronisation and drop;
//!   many threads on one group; destroy, abort and re-creation; errors that
//!   hand the tensors back.
//! * `multi_gpu_*` (2+ GPUs): one process driving every local GPU, and
//!   several processes (copies of this binary, one per GPU, launched the
//!   torchrun way) running collectives and send/recv between them.
//!
//! Every test starts with `support::require_gpus(n)`: without the GPUs it
//! prints `SKIP: ...` and passes, unless `NCCL_TEST_REQUIRE_GPU=1`.

#[path = "../../nccl-core/tests/support/mod.rs"]
mod support;

use std::fmt::Debug;
use std::io::Read;
use std::net::TcpListener;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use cudarc::driver::ValidAsZeroBits;
use nccl_core::{CudaStream, Device, ReduceOp};
use nccl_group::{
    CommMode, GroupError, GroupOptions, InProcessStore, MAX_LOCAL_DEVICES, OpError, OpResult,
    ProcessGroup, StreamMode, WorkBuffers,
};
use nccl_tensor::{NcclType, Tensor};
use support::within;

/// Sizes of the value checks: one element, and just past nccl-core's
/// 4096-element split.
const SIZES: [usize; 2] = [1, 4097];

// ---------------------------------------------------------------- helpers

/// An element type the tests fill with small integers (exact in every type).
trait Elem: NcclType + ValidAsZeroBits + PartialEq + Debug {
    const NAME: &'static str;
    fn from_f64(value: f64) -> Self;
}

impl Elem for f32 {
    const NAME: &'static str = "f32";
    fn from_f64(value: f64) -> Self {
        value as f32
    }
}

impl Elem for half::f16 {
    const NAME: &'static str = "f16";
    fn from_f64(value: f64) -> Self {
        half::f16::from_f64(value)
    }
}

impl Elem for i32 {
    const NAME: &'static str = "i32";
    fn from_f64(value: f64) -> Self {
        value as i32
    }
}

fn host<T: Elem>(seed: u64, len: usize) -> Vec<T> {
    support::test_values(seed, len)
        .into_iter()
        .map(T::from_f64)
        .collect()
}

fn poison<T: Elem>(len: usize) -> Vec<T> {
    vec![T::from_f64(f64::from(support::POISON)); len]
}

fn upload<T: Elem>(stream: &Arc<CudaStream>, values: &[T]) -> Tensor<T> {
    Tensor::from_host(stream, values, &[values.len()]).expect("copy to the device")
}

fn download<T: Elem>(stream: &Arc<CudaStream>, tensor: &Tensor<T>) -> Vec<T> {
    tensor.to_vec(stream).expect("copy to the host")
}

/// Elementwise `a + b` (small integers: exact).
fn add(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(x, y)| x + y).collect()
}

fn convert<T: Elem>(values: &[f64]) -> Vec<T> {
    values.iter().copied().map(T::from_f64).collect()
}

/// Fails naming the first differing element.
#[track_caller]
fn check<T: Elem>(what: &str, got: &[T], expected: &[T]) {
    assert_eq!(got.len(), expected.len(), "{what}: number of elements");
    let wrong = got.iter().zip(expected).filter(|(g, e)| g != e).count();
    if let Some(i) = got.iter().zip(expected).position(|(g, e)| g != e) {
        panic!(
            "{what}: element {i} is {:?}, expected {:?} ({wrong} of {} elements wrong)",
            got[i],
            expected[i],
            got.len()
        );
    }
}

/// A world-size-1 group on an in-process store.
fn new_group(name: &str) -> ProcessGroup {
    new_group_in(name, GroupOptions::default())
}

/// A world-size-1 group on an in-process store, with `options`.
fn new_group_in(name: &str, options: GroupOptions) -> ProcessGroup {
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

/// The buffers of a successful operation, after the caller's stream waited.
#[track_caller]
fn done<B: WorkBuffers>(result: OpResult<B>, what: &str) -> B {
    match result {
        Ok(work) => work
            .wait()
            .unwrap_or_else(|e| panic!("{what}: wait failed: {e}")),
        Err(e) => panic!("{what}: {}", e.error),
    }
}

/// The error of an operation that must fail before enqueueing.
#[track_caller]
fn refused<B: WorkBuffers>(result: OpResult<B>, what: &str) -> OpError<B> {
    match result {
        Ok(_work) => panic!("{what}: expected an error, the operation was enqueued"),
        Err(e) => *e,
    }
}

// ------------------------------------------------ every op, world size 1

/// Every operation in its single form on `len`-element tensors of `T`.
fn every_op_single<T: Elem>(device: &Device, name: &str, options: GroupOptions) {
    let group = new_group_in(name, options);
    let stream = device.new_stream().expect("stream");
    for (case, &len) in SIZES.iter().enumerate() {
        let data = host::<T>(case as u64 + 1, len);
        let what = |op: &str| format!("{op} ({} x {len})", T::NAME);

        for op in ReduceOp::ALL {
            let w = what(&format!("all_reduce {op:?}"));
            let t = done(group.all_reduce(upload(&stream, &data), op, &stream), &w);
            check(&w, &download(&stream, &t), &data);

            let w = what(&format!("reduce {op:?} to root 0"));
            let t = done(group.reduce(upload(&stream, &data), op, 0, &stream), &w);
            check(&w, &download(&stream, &t), &data);
        }

        let w = what("broadcast from root 0");
        let t = done(group.broadcast(upload(&stream, &data), 0, &stream), &w);
        check(&w, &download(&stream, &t), &data);

        let w = what("all_gather");
        let (out, inp) = done(
            group.all_gather(
                upload(&stream, &poison(len)),
                upload(&stream, &data),
                &stream,
            ),
            &w,
        );
        check(&w, &download(&stream, &out), &data);
        check(&format!("{w} input"), &download(&stream, &inp), &data);

        let w = what("reduce_scatter");
        let (out, inp) = done(
            group.reduce_scatter(
                upload(&stream, &poison(len)),
                upload(&stream, &data),
                ReduceOp::Sum,
                &stream,
            ),
            &w,
        );
        check(&w, &download(&stream, &out), &data);
        check(&format!("{w} input"), &download(&stream, &inp), &data);

        let w = what("all_to_all");
        let (out, inp) = done(
            group.all_to_all(
                upload(&stream, &poison(len)),
                upload(&stream, &data),
                &stream,
            ),
            &w,
        );
        check(&w, &download(&stream, &out), &data);
        check(&format!("{w} input"), &download(&stream, &inp), &data);

        group
            .barrier(&stream)
            .expect("barrier")
            .wait()
            .expect("barrier wait");
    }
}

/// Every operation in its list form, with one tensor and one stream.
fn every_op_multi<T: Elem>(device: &Device, name: &str, options: GroupOptions) {
    let group = new_group_in(name, options);
    let stream = device.new_stream().expect("stream");
    let streams = std::slice::from_ref(&stream);
    for (case, &len) in SIZES.iter().enumerate() {
        let data = host::<T>(case as u64 + 11, len);
        let what = |op: &str| format!("{op}_multi ({} x {len})", T::NAME);
        let one = |values: &[T]| vec![upload(&stream, values)];
        let pair = |out: &[T], inp: &[T]| vec![(upload(&stream, out), upload(&stream, inp))];

        for op in ReduceOp::ALL {
            let w = what(&format!("all_reduce {op:?}"));
            let ts = done(group.all_reduce_multi(one(&data), op, streams), &w);
            assert_eq!(ts.len(), 1);
            check(&w, &download(&stream, &ts[0]), &data);

            let w = what(&format!("reduce {op:?}"));
            let ts = done(group.reduce_multi(one(&data), op, 0, streams), &w);
            check(&w, &download(&stream, &ts[0]), &data);
        }

        let w = what("broadcast");
        let ts = done(group.broadcast_multi(one(&data), 0, streams), &w);
        check(&w, &download(&stream, &ts[0]), &data);

        let w = what("all_gather");
        let ps = done(
            group.all_gather_multi(pair(&poison(len), &data), streams),
            &w,
        );
        assert_eq!(ps.len(), 1);
        check(&w, &download(&stream, &ps[0].0), &data);
        check(&format!("{w} input"), &download(&stream, &ps[0].1), &data);

        let w = what("reduce_scatter");
        let ps = done(
            group.reduce_scatter_multi(pair(&poison(len), &data), ReduceOp::Sum, streams),
            &w,
        );
        check(&w, &download(&stream, &ps[0].0), &data);

        let w = what("all_to_all");
        let ps = done(
            group.all_to_all_multi(pair(&poison(len), &data), streams),
            &w,
        );
        check(&w, &download(&stream, &ps[0].0), &data);
        check(&format!("{w} input"), &download(&stream, &ps[0].1), &data);
    }
}

#[test]
fn gpu_every_op_single_f32() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    every_op_single::<f32>(&devices[0], "single-f32", GroupOptions::default());
}

#[test]
fn gpu_every_op_single_f16() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    every_op_single::<half::f16>(&devices[0], "single-f16", GroupOptions::default());
}

#[test]
fn gpu_every_op_single_i32() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    every_op_single::<i32>(&devices[0], "single-i32", GroupOptions::default());
}

#[test]
fn gpu_every_op_multi_f32() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    every_op_multi::<f32>(&devices[0], "multi-f32", GroupOptions::default());
}

#[test]
fn gpu_every_op_multi_f16() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    every_op_multi::<half::f16>(&devices[0], "multi-f16", GroupOptions::default());
}

#[test]
fn gpu_single_and_multi_forms_share_one_group() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    // Alternating forms on one device use the same communicator and stay
    // in order.
    let group = new_group("mixed-forms");
    let stream = devices[0].new_stream().expect("stream");
    let streams = std::slice::from_ref(&stream);
    for i in 0..10u64 {
        let data = host::<f32>(100 + i, 257);
        let (out, _) = if i % 2 == 0 {
            done(
                group.all_gather(
                    upload(&stream, &poison(257)),
                    upload(&stream, &data),
                    &stream,
                ),
                "all_gather",
            )
        } else {
            let mut v = done(
                group.all_gather_multi(
                    vec![(upload(&stream, &poison(257)), upload(&stream, &data))],
                    streams,
                ),
                "all_gather_multi",
            );
            v.pop().unwrap()
        };
        check(&format!("iteration {i}"), &download(&stream, &out), &data);
    }
}

// --------------------------------------------------------- point to point

#[test]
fn gpu_send_recv_to_self_is_invalid_argument_and_hands_tensor_back() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    let group = new_group("self-p2p");
    let stream = devices[0].new_stream().expect("stream");
    let data = host::<f32>(5, 4097);

    for (dst, why) in [(0, "itself"), (1, "out of range"), (usize::MAX, "huge")] {
        let e = refused(
            group.send(upload(&stream, &data), dst, &stream),
            &format!("send to {why}"),
        );
        let message = e.error.to_string();
        assert!(
            matches!(
                e.error,
                GroupError::InvalidArgument {
                    argument: "dst",
                    ..
                }
            ),
            "send to {dst}: {:?}",
            e.error
        );
        assert!(message.contains("dst"), "{message}");
        assert!(message.contains(&dst.to_string()), "{message}");
        assert!(message.contains("this is rank 0"), "{message}");
        check(
            "the tensor handed back by send",
            &download(&stream, &e.buffers),
            &data,
        );
    }

    let e = refused(
        group.recv(upload(&stream, &data), 0, &stream),
        "recv from self",
    );
    assert!(
        matches!(
            e.error,
            GroupError::InvalidArgument {
                argument: "src",
                ..
            }
        ),
        "{:?}",
        e.error
    );
    assert!(e.error.to_string().contains("src"));
    check(
        "the tensor handed back by recv",
        &download(&stream, &e.buffers),
        &data,
    );

    // The list forms refuse their own rank the same way and hand every
    // tensor back.
    let streams = [stream.clone()];
    for (name, result) in [
        (
            "send_multi",
            group.send_multi(vec![upload(&stream, &data)], 0, &streams),
        ),
        (
            "recv_multi",
            group.recv_multi(vec![upload(&stream, &data)], 0, &streams),
        ),
    ] {
        let e = refused(result, name);
        assert!(
            matches!(e.error, GroupError::InvalidArgument { .. }),
            "{name}: {:?}",
            e.error
        );
        assert_eq!(e.buffers.len(), 1, "{name}");
        check(name, &download(&stream, &e.buffers[0]), &data);
    }

    // The group is unaffected.
    let t = done(
        group.all_reduce(upload(&stream, &data), ReduceOp::Sum, &stream),
        "all_reduce",
    );
    check(
        "all_reduce after the refused send",
        &download(&stream, &t),
        &data,
    );
}

// ------------------------------------------------- caller-stream ordering

/// Never zero (the output is zeroed before each op), different per iteration.
fn pattern(iteration: usize, len: usize) -> Vec<f32> {
    (0..len)
        .map(|i| ((i * 7 + iteration * 13) % 251 + 1) as f32)
        .collect()
}

/// The defaults are blocking communicators and the caller's stream; the
/// other choices of each switch get the same matrix.
#[test]
fn gpu_every_op_with_nonblocking_communicators() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    let nonblocking = || GroupOptions::default().with_comm_mode(CommMode::Nonblocking);
    every_op_single::<f32>(&devices[0], "nonblocking-single-f32", nonblocking());
    every_op_multi::<f32>(&devices[0], "nonblocking-multi-f32", nonblocking());
    every_op_single::<half::f16>(
        &devices[0],
        "nonblocking-separate-single-f16",
        nonblocking().with_stream_mode(StreamMode::Separate),
    );
}

#[test]
fn gpu_every_op_on_the_groups_nccl_stream() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    let separate = || GroupOptions::default().with_stream_mode(StreamMode::Separate);
    every_op_single::<f32>(&devices[0], "separate-single-f32", separate());
    every_op_single::<half::f16>(&devices[0], "separate-single-f16", separate());
    every_op_multi::<f32>(&devices[0], "separate-multi-f32", separate());
}

#[test]
fn gpu_caller_stream_ordering_without_device_sync() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    ordering_without_device_sync(&devices[0], &[StreamMode::Separate]);
}

#[test]
fn gpu_ordering_without_device_sync_on_the_callers_stream() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    ordering_without_device_sync(&devices[0], &[StreamMode::Caller]);
}

#[test]
fn gpu_ordering_without_device_sync_with_stream_modes_mixed_per_call() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    // One group, its operations issued alternately through a handle on
    // its NCCL stream and one on the caller's: every pair of consecutive
    // modes and every operation meets in the 50 iterations.
    ordering_without_device_sync(&devices[0], &[StreamMode::Separate, StreamMode::Caller]);
}

/// Runs the iterations below through `modes`' handles of one group in
/// turn ([`ProcessGroup::with_stream_mode`]).
fn ordering_without_device_sync(device: &Device, modes: &[StreamMode]) {
    // Everything below is queued on the caller's stream with no device or
    // stream synchronisation between steps: fresh data is copied into the
    // input (host to device, then device to device, both asynchronous),
    // the output is zeroed, the operation runs on the NCCL stream (or on
    // the caller's, with `StreamMode::Caller`), `wait` makes the caller's
    // stream wait, and the result is read back on the
    // caller's stream. Large buffers make the copies slow enough that
    // missing ordering shows as stale or zero values. (cudarc's own event
    // tracking also orders buffer uses across streams; this test checks the
    // combined result.)
    const LEN: usize = 1 << 22;
    let group = new_group_in("ordering", GroupOptions::default());
    let handles: Vec<ProcessGroup> = modes
        .iter()
        .map(|&mode| group.with_stream_mode(mode))
        .collect();
    let stream = device.new_stream().expect("stream");
    let zeros = || Tensor::<f32>::zeros(&stream, &[LEN]).expect("alloc");
    let (mut staging, mut input, mut output) = (zeros(), zeros(), zeros());
    for iteration in 0..50 {
        let group = &handles[iteration % handles.len()];
        let data = pattern(iteration, LEN);
        staging
            .copy_from_host(&stream, &data)
            .expect("host to device");
        stream
            .memcpy_dtod(staging.as_slice(), &mut input.as_slice_mut())
            .expect("device to device");
        stream
            .memset_zeros(&mut output.as_slice_mut())
            .expect("zero the output");
        let (op, (out, inp)) = match iteration % 3 {
            0 => (
                "all_gather",
                done(group.all_gather(output, input, &stream), "all_gather"),
            ),
            1 => (
                "reduce_scatter",
                done(
                    group.reduce_scatter(output, input, ReduceOp::Sum, &stream),
                    "reduce_scatter",
                ),
            ),
            _ => (
                "all_to_all",
                done(group.all_to_all(output, input, &stream), "all_to_all"),
            ),
        };
        let got = stream.clone_dtoh(out.as_slice()).expect("device to host");
        check(&format!("iteration {iteration} ({op})"), &got, &data);
        (output, input) = (out, inp);
    }
}

// ------------------------------------------------------------------- Work

#[test]
fn gpu_work_is_completed_and_synchronize() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    let group = new_group("work");
    let stream = devices[0].new_stream().expect("stream");
    const LEN: usize = 1 << 24;
    let data = pattern(1, LEN);

    let work = group
        .all_gather(
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
    check("all_gather", &download(&stream, &out), &data);

    // A zero timeout either finds the work done or reports a timeout, and
    // the work stays usable after a timeout.
    let work = group
        .all_to_all(
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
    check("all_to_all", &download(&stream, &out), &data);

    // A barrier's work too.
    let barrier = group.barrier(&stream).expect("barrier");
    barrier
        .synchronize(Duration::from_secs(1))
        .expect("barrier completes");
    assert!(barrier.is_completed());
    barrier.wait().expect("barrier wait");

    // The list form's work covers its device.
    let work = group
        .all_reduce_multi(
            vec![upload(&stream, &data)],
            ReduceOp::Max,
            std::slice::from_ref(&stream),
        )
        .expect("all_reduce_multi");
    work.synchronize(Duration::from_secs(1)).expect("completes");
    assert!(work.is_completed());
    let ts = work.wait().expect("wait");
    check("all_reduce_multi", &download(&stream, &ts[0]), &data);
}

#[test]
fn gpu_work_dropped_without_wait_releases_buffers_safely() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    let device = &devices[0];
    let group = new_group("dropped-work");
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
            .all_gather(output, input, &caller)
            .expect("all_gather");
        drop(work);
        // New allocations of the same size on the same stream must not
        // alias memory the dropped operation still writes.
        let fresh = upload(&alloc, &poison::<f32>(LEN));
        check(
            &format!("round {round}: a fresh tensor after the drop"),
            &download(&alloc, &fresh),
            &poison(LEN),
        );
    }
    // A dropped list-form work and a dropped barrier work.
    drop(
        group
            .all_reduce_multi(
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
        group.all_gather(
            upload(&caller, &poison(4097)),
            upload(&caller, &data),
            &caller,
        ),
        "all_gather after drops",
    );
    check("all_gather after drops", &download(&caller, &out), &data);
    caller.synchronize().expect("caller stream healthy");
    alloc.synchronize().expect("allocation stream healthy");
    device
        .context()
        .check_err()
        .expect("no CUDA error recorded by a drop");
}

// ---------------------------------------------------------------- threads

#[test]
fn gpu_many_threads_issue_on_one_group() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    const THREADS: u64 = 8;
    const ROUNDS: u64 = 50;
    const LEN: usize = 4097;
    let group = new_group("threads");
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
                        let data = host::<f32>(1000 * t + round, LEN);
                        input.copy_from_host(&stream, &data).unwrap();
                        let what = format!("thread {t} round {round}");
                        input = done(
                            group.all_reduce(input, ReduceOp::Sum, &stream),
                            &format!("{what}: all_reduce"),
                        );
                        // Out of place, so NCCL does move data at world size 1.
                        stream.memset_zeros(&mut output.as_slice_mut()).unwrap();
                        (output, input) = done(
                            group.all_gather(output, input, &stream),
                            &format!("{what}: all_gather"),
                        );
                        check(&what, &download(&stream, &output), &data);
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

// ------------------------------------------------------ destroy and abort

#[track_caller]
fn assert_state_error(error: &GroupError, name: &str, aborted: bool) {
    match (error, aborted) {
        (GroupError::Aborted { name: n }, true) | (GroupError::Destroyed { name: n }, false) => {
            assert_eq!(n, name);
            assert!(error.to_string().contains(name), "{error}");
        }
        _ => panic!(
            "expected {} for {name:?}, got {error:?}",
            if aborted { "Aborted" } else { "Destroyed" }
        ),
    }
}

/// Every operation fails with the group's state error and hands the
/// tensors back untouched.
fn every_call_refused(group: &ProcessGroup, stream: &Arc<CudaStream>, aborted: bool) {
    let name = group.name().to_string();
    let data = host::<f32>(77, 4097);
    let streams = std::slice::from_ref(stream);
    let one = || upload(stream, &data);
    let pair = || (upload(stream, &poison(4097)), upload(stream, &data));
    let check_one = |e: OpError<Tensor<f32>>, op: &str| {
        assert_state_error(&e.error, &name, aborted);
        check(op, &download(stream, &e.buffers), &data);
    };
    let check_pair = |e: OpError<(Tensor<f32>, Tensor<f32>)>, op: &str| {
        assert_state_error(&e.error, &name, aborted);
        check(op, &download(stream, &e.buffers.0), &poison(4097));
        check(op, &download(stream, &e.buffers.1), &data);
    };
    let check_list = |e: OpError<Vec<Tensor<f32>>>, op: &str| {
        assert_state_error(&e.error, &name, aborted);
        assert_eq!(e.buffers.len(), 1);
        check(op, &download(stream, &e.buffers[0]), &data);
    };

    check_one(
        refused(group.all_reduce(one(), ReduceOp::Sum, stream), "all_reduce"),
        "all_reduce",
    );
    check_one(
        refused(group.broadcast(one(), 0, stream), "broadcast"),
        "broadcast",
    );
    check_one(
        refused(group.reduce(one(), ReduceOp::Sum, 0, stream), "reduce"),
        "reduce",
    );
    let (o, i) = pair();
    check_pair(
        refused(group.all_gather(o, i, stream), "all_gather"),
        "all_gather",
    );
    let (o, i) = pair();
    check_pair(
        refused(
            group.reduce_scatter(o, i, ReduceOp::Sum, stream),
            "reduce_scatter",
        ),
        "reduce_scatter",
    );
    let (o, i) = pair();
    check_pair(
        refused(group.all_to_all(o, i, stream), "all_to_all"),
        "all_to_all",
    );
    check_list(
        refused(
            group.all_reduce_multi(vec![one()], ReduceOp::Sum, streams),
            "all_reduce_multi",
        ),
        "all_reduce_multi",
    );
    check_list(
        refused(
            group.broadcast_multi(vec![one()], 0, streams),
            "broadcast_multi",
        ),
        "broadcast_multi",
    );
    check_list(
        refused(
            group.reduce_multi(vec![one()], ReduceOp::Sum, 0, streams),
            "reduce_multi",
        ),
        "reduce_multi",
    );
    let e = refused(
        group.all_gather_multi(vec![pair()], streams),
        "all_gather_multi",
    );
    assert_state_error(&e.error, &name, aborted);
    check(
        "all_gather_multi",
        &download(stream, &e.buffers[0].1),
        &data,
    );
    let e = refused(
        group.reduce_scatter_multi(vec![pair()], ReduceOp::Sum, streams),
        "reduce_scatter_multi",
    );
    assert_state_error(&e.error, &name, aborted);
    let e = refused(
        group.all_to_all_multi(vec![pair()], streams),
        "all_to_all_multi",
    );
    assert_state_error(&e.error, &name, aborted);
    match group.barrier(stream) {
        Ok(_) => panic!(
            "barrier on a {} group was enqueued",
            if aborted { "aborted" } else { "destroyed" }
        ),
        Err(error) => assert_state_error(&error, &name, aborted),
    }
    // send/recv at world size 1 fail their peer check first (no other
    // process exists), so they are covered by the send-to-self test.
}

/// all_reduce + all_gather on `group`, values checked.
fn works(group: &ProcessGroup, stream: &Arc<CudaStream>, what: &str) {
    let data = host::<f32>(31, 4097);
    let t = done(
        group.all_reduce(upload(stream, &data), ReduceOp::Sum, stream),
        what,
    );
    check(what, &download(stream, &t), &data);
    let (out, _) = done(
        group.all_gather(upload(stream, &poison(4097)), upload(stream, &data), stream),
        what,
    );
    check(what, &download(stream, &out), &data);
    group.barrier(stream).expect(what).wait().expect(what);
}

#[test]
fn gpu_destroy_then_recreate_with_the_same_name_and_store() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    let stream = devices[0].new_stream().expect("stream");
    let store = Arc::new(InProcessStore::new());
    let join = || {
        ProcessGroup::new(
            "recreated",
            0,
            1,
            store.clone(),
            "in-process",
            GroupOptions::default(),
        )
        .expect("group")
    };
    let group = join();
    works(&group, &stream, "before destroy");
    group.destroy().expect("destroy");
    every_call_refused(&group, &stream, false);
    let again = group.destroy().expect_err("a second destroy fails");
    assert_state_error(&again, "recreated", false);
    group.abort().unwrap(); // a no-op now
    every_call_refused(&group, &stream, false);

    let fresh = join();
    assert!(format!("{fresh:?}").contains("generation: 1"), "{fresh:?}");
    works(&fresh, &stream, "the re-created group");
    fresh.destroy().expect("destroy the re-created group");

    // A group destroyed before it ever created a communicator.
    let unused = join();
    unused.destroy().expect("destroy an unused group");
    every_call_refused(&unused, &stream, false);
}

#[test]
fn gpu_abort_from_another_thread_then_recreate() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    let stream = devices[0].new_stream().expect("stream");
    let store = Arc::new(InProcessStore::new());
    let join = || {
        ProcessGroup::new(
            "aborted",
            0,
            1,
            store.clone(),
            "in-process",
            GroupOptions::default(),
        )
        .expect("group")
    };
    let group = join();
    works(&group, &stream, "before abort");
    let other = group.clone();
    within(
        "abort from another thread",
        Duration::from_secs(60),
        move || other.abort(),
    )
    .expect("abort");
    every_call_refused(&group, &stream, true);
    let error = group.destroy().expect_err("destroy after abort fails");
    assert_state_error(&error, "aborted", true);
    group.abort().unwrap(); // twice is fine
    every_call_refused(&group, &stream, true);

    let fresh = join();
    works(&fresh, &stream, "a new group with the aborted one's name");
    drop(group); // dropping the aborted group leaves the new one alone
    works(&fresh, &stream, "after dropping the aborted group");

    // Aborting a group that never created a communicator.
    let unused = join();
    unused.abort().unwrap();
    every_call_refused(&unused, &stream, true);
}

// ------------------------------------------------------ argument errors

#[test]
fn gpu_op_error_hands_the_tensors_back() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    let group = new_group("op-errors");
    let stream = devices[0].new_stream().expect("stream");
    let data = host::<f32>(3, 64);

    // all_gather into an output of the wrong length.
    let e = refused(
        group.all_gather(
            upload(&stream, &poison(63)),
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
    check(
        "output handed back",
        &download(&stream, &e.buffers.0),
        &poison(63),
    );
    check("input handed back", &download(&stream, &e.buffers.1), &data);

    // reduce_scatter with an output of the wrong length.
    let e = refused(
        group.reduce_scatter(
            upload(&stream, &poison(65)),
            upload(&stream, &data),
            ReduceOp::Sum,
            &stream,
        ),
        "reduce_scatter with a long output",
    );
    assert!(matches!(e.error, GroupError::Tensor(_)), "{:?}", e.error);
    check("input handed back", &download(&stream, &e.buffers.1), &data);

    // A root that is not a rank.
    let e = refused(
        group.broadcast(upload(&stream, &data), 1, &stream),
        "broadcast from root 1 of 1",
    );
    assert!(
        matches!(
            e.error,
            GroupError::Tensor(nccl_tensor::Error::RankOutOfRange { given: 1, .. })
        ),
        "{:?}",
        e.error
    );
    check(
        "broadcast tensor handed back",
        &download(&stream, &e.buffers),
        &data,
    );

    // The list form: two tensors on one device.
    let e = refused(
        group.all_reduce_multi(
            vec![upload(&stream, &data), upload(&stream, &data)],
            ReduceOp::Sum,
            &[stream.clone(), stream.clone()],
        ),
        "two tensors on one device",
    );
    assert!(
        matches!(
            e.error,
            GroupError::InvalidArgument {
                argument: "device list",
                ..
            }
        ),
        "{:?}",
        e.error
    );
    assert!(
        e.error.to_string().contains("two tensors on device 0"),
        "{}",
        e.error
    );
    assert_eq!(e.buffers.len(), 2);
    for t in &e.buffers {
        check("list tensor handed back", &download(&stream, t), &data);
    }

    // The list form: a stream count that does not match.
    let e = refused(
        group.all_reduce_multi(
            vec![upload(&stream, &data)],
            ReduceOp::Sum,
            &[stream.clone(), stream.clone()],
        ),
        "two streams for one tensor",
    );
    assert!(
        matches!(
            e.error,
            GroupError::InvalidArgument {
                argument: "streams",
                ..
            }
        ),
        "{:?}",
        e.error
    );
    let e = refused(
        group.all_reduce_multi(Vec::<Tensor<f32>>::new(), ReduceOp::Sum, &[]),
        "no tensors",
    );
    assert!(
        matches!(
            e.error,
            GroupError::InvalidArgument {
                argument: "device list",
                ..
            }
        ),
        "{:?}",
        e.error
    );

    // None of this broke the group.
    works(&group, &stream, "after the refused calls");
}

// ------------------------------------------- several GPUs in one process

fn all_devices() -> Vec<Device> {
    let mut devices = Device::all().expect("devices");
    devices.truncate(MAX_LOCAL_DEVICES);
    devices
}

#[test]
fn multi_gpu_every_op_over_all_local_gpus_in_one_process() {
    let Some(_) = support::require_gpus(2) else {
        return;
    };
    let devices = all_devices();
    let n = devices.len();
    let streams: Vec<_> = devices.iter().map(|d| d.new_stream().unwrap()).collect();
    let group = new_group("all-local-gpus");
    const LEN: usize = 4097;
    // Global rank d is devices[d] (process rank 0 x n devices + index d).
    let inputs: Vec<Vec<f64>> = (0..n)
        .map(|d| support::test_values(d as u64 + 1, LEN))
        .collect();
    let upload_all = |values: &[Vec<f64>]| -> Vec<Tensor<f32>> {
        values
            .iter()
            .zip(&streams)
            .map(|(v, s)| upload(s, &convert::<f32>(v)))
            .collect()
    };
    let sum = inputs
        .iter()
        .skip(1)
        .fold(inputs[0].clone(), |acc, v| add(&acc, v));

    let out = done(
        group.all_reduce_multi(upload_all(&inputs), ReduceOp::Sum, &streams),
        "all_reduce_multi",
    );
    for (d, t) in out.iter().enumerate() {
        check(
            &format!("all_reduce on device {d}"),
            &download(&streams[d], t),
            &convert(&sum),
        );
    }

    let root = n - 1;
    let out = done(
        group.broadcast_multi(upload_all(&inputs), root as i32, &streams),
        "broadcast_multi",
    );
    for (d, t) in out.iter().enumerate() {
        check(
            &format!("broadcast from {root} on device {d}"),
            &download(&streams[d], t),
            &convert(&inputs[root]),
        );
    }

    let out = done(
        group.reduce_multi(upload_all(&inputs), ReduceOp::Sum, 0, &streams),
        "reduce_multi",
    );
    check(
        "reduce to root 0",
        &download(&streams[0], &out[0]),
        &convert(&sum),
    );

    let gathered: Vec<f64> = inputs.concat();
    let pairs = inputs
        .iter()
        .zip(&streams)
        .map(|(v, s)| {
            (
                upload(s, &poison::<f32>(n * LEN)),
                upload(s, &convert::<f32>(v)),
            )
        })
        .collect();
    let out = done(group.all_gather_multi(pairs, &streams), "all_gather_multi");
    for (d, (o, _)) in out.iter().enumerate() {
        check(
            &format!("all_gather on device {d}"),
            &download(&streams[d], o),
            &convert(&gathered),
        );
    }

    // reduce_scatter and all_to_all: each device holds n blocks.
    let big: Vec<Vec<f64>> = (0..n)
        .map(|d| support::test_values(50 + d as u64, n * LEN))
        .collect();
    let pairs = big
        .iter()
        .zip(&streams)
        .map(|(v, s)| {
            (
                upload(s, &poison::<f32>(LEN)),
                upload(s, &convert::<f32>(v)),
            )
        })
        .collect();
    let out = done(
        group.reduce_scatter_multi(pairs, ReduceOp::Sum, &streams),
        "reduce_scatter_multi",
    );
    for (d, (o, _)) in out.iter().enumerate() {
        let block = |v: &Vec<f64>| v[d * LEN..(d + 1) * LEN].to_vec();
        let expected = big
            .iter()
            .skip(1)
            .fold(block(&big[0]), |acc, v| add(&acc, &block(v)));
        check(
            &format!("reduce_scatter block on device {d}"),
            &download(&streams[d], o),
            &convert(&expected),
        );
    }

    let pairs = big
        .iter()
        .zip(&streams)
        .map(|(v, s)| {
            (
                upload(s, &poison::<f32>(n * LEN)),
                upload(s, &convert::<f32>(v)),
            )
        })
        .collect();
    let out = done(group.all_to_all_multi(pairs, &streams), "all_to_all_multi");
    for (d, (o, _)) in out.iter().enumerate() {
        // Block j of device d's output is block d of device j's input.
        let expected: Vec<f64> = big
            .iter()
            .flat_map(|v| v[d * LEN..(d + 1) * LEN].iter().copied())
            .collect();
        check(
            &format!("all_to_all on device {d}"),
            &download(&streams[d], o),
            &convert(&expected),
        );
    }

    // The single forms on each device still work next to the list forms
    // (their communicators are separate 1-device keys).
    for (d, s) in streams.iter().enumerate() {
        let data = convert::<f32>(&inputs[d]);
        let t = done(
            group.all_reduce(upload(s, &data), ReduceOp::Sum, s),
            "all_reduce",
        );
        check(
            &format!("single all_reduce on device {d}"),
            &download(s, &t),
            &data,
        );
    }
}

#[test]
fn multi_gpu_destroy_a_multi_device_group() {
    let Some(_) = support::require_gpus(2) else {
        return;
    };
    // The communicators of one key on several local GPUs are finalized by
    // one thread; this must not deadlock.
    within(
        "destroy of a multi-device group",
        Duration::from_secs(120),
        || {
            let devices = all_devices();
            let streams: Vec<_> = devices.iter().map(|d| d.new_stream().unwrap()).collect();
            let group = new_group("destroy-multi");
            let data = host::<f32>(1, 1025);
            let tensors = streams.iter().map(|s| upload(s, &data)).collect();
            let out = done(
                group.all_reduce_multi(tensors, ReduceOp::Max, &streams),
                "all_reduce_multi",
            );
            check("all_reduce Max", &download(&streams[0], &out[0]), &data);
            for s in &streams {
                s.synchronize().unwrap();
            }
            group.destroy().expect("destroy");
            every_call_refused(&group, &streams[0], false);
        },
    );
}

/// A list-form call whose second device has a bad argument must be refused
/// as a whole, with nothing enqueued on the first device: otherwise the
/// first device's half of the collective is launched when the NCCL group
/// ends and waits forever for the second.
#[test]
fn multi_gpu_list_form_argument_error_enqueues_nothing() {
    let Some(devices) = support::require_gpus(2) else {
        return;
    };
    let streams: Vec<_> = devices.iter().map(|d| d.new_stream().unwrap()).collect();
    let group = new_group("list-error");
    const LEN: usize = 1024;
    let n = devices.len();
    let data = host::<f32>(4, LEN);
    let uploads = |values: &[f32]| -> Vec<Tensor<f32>> {
        streams.iter().map(|s| upload(s, values)).collect()
    };
    // Create the communicators with a valid call first.
    let out = done(
        group.all_reduce_multi(uploads(&data), ReduceOp::Max, &streams),
        "first all_reduce_multi",
    );
    check(
        "first all_reduce_multi",
        &download(&streams[1], &out[1]),
        &data,
    );

    // The last device's output is one element short.
    let pairs: Vec<_> = streams
        .iter()
        .enumerate()
        .map(|(d, s)| {
            let out_len = n * LEN - usize::from(d == n - 1);
            (upload(s, &poison::<f32>(out_len)), upload(s, &data))
        })
        .collect();
    let (tx, rx) = mpsc::channel();
    {
        let (group, streams) = (group.clone(), streams.clone());
        thread::spawn(move || {
            let outcome = match group.all_gather_multi(pairs, &streams) {
                Ok(_work) => Err("the call was enqueued".to_string()),
                Err(e) => Ok((format!("{:?}", e.error), e.buffers.len())),
            };
            let _ = tx.send(outcome);
        });
    }
    let (error, handed_back) = match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(outcome) => outcome.unwrap_or_else(|e| panic!("all_gather_multi: {e}")),
        Err(_) => {
            group.abort().unwrap();
            panic!(
                "all_gather_multi with a bad argument on device {} blocked for 60 s: \
                 it enqueued the other devices' halves before checking every argument",
                n - 1
            );
        }
    };
    assert!(error.contains("WrongLength"), "{error}");
    assert_eq!(handed_back, n);

    // Nothing is pending: the next collective completes.
    let work = group
        .all_reduce_multi(uploads(&data), ReduceOp::Max, &streams)
        .expect("all_reduce_multi");
    if let Err(error) = work.synchronize(Duration::from_secs(20)) {
        // Cancel the stranded collective so later tests can use the GPUs.
        group.abort().unwrap();
        panic!(
            "after a refused all_gather_multi, the next collective did not complete ({error}): \
             the refused call left part of itself enqueued (run_many issues inside the NCCL \
             group before every device's arguments are checked)"
        );
    }
    let out = work.wait().expect("wait");
    for (d, t) in out.iter().enumerate() {
        check(
            &format!("all_reduce_multi on device {d} after the refused call"),
            &download(&streams[d], t),
            &data,
        );
    }
}

#[test]
fn multi_gpu_stream_on_another_device_is_refused() {
    let Some(devices) = support::require_gpus(2) else {
        return;
    };
    let group = new_group("wrong-stream");
    let s0 = devices[0].new_stream().unwrap();
    let s1 = devices[1].new_stream().unwrap();
    let data = host::<f32>(9, 100);
    let e = refused(
        group.all_reduce(upload(&s1, &data), ReduceOp::Sum, &s0),
        "tensor on device 1, stream on device 0",
    );
    let message = e.error.to_string();
    assert!(
        matches!(
            e.error,
            GroupError::InvalidArgument {
                argument: "stream",
                ..
            }
        ),
        "{:?}",
        e.error
    );
    assert!(
        message.contains("device 1") && message.contains("device 0"),
        "{message}"
    );
    check("tensor handed back", &download(&s1, &e.buffers), &data);

    let e = refused(
        group.all_reduce_multi(
            vec![upload(&s0, &data), upload(&s1, &data)],
            ReduceOp::Sum,
            &[s1.clone(), s0.clone()],
        ),
        "streams swapped",
    );
    assert!(
        matches!(
            e.error,
            GroupError::InvalidArgument {
                argument: "stream",
                ..
            }
        ),
        "{:?}",
        e.error
    );
    assert_eq!(e.buffers.len(), 2);
}

// ------------------------------------------------ several processes

/// Set in a spawned child: which scenario it runs.
const ROLE_VAR: &str = "NCCL_GROUP_GPU_TEST_ROLE";
/// Set in a spawned child: the device ordinal it uses.
const DEVICE_VAR: &str = "NCCL_GROUP_GPU_TEST_DEVICE";
/// Set in a spawned child: destroy the group at the end.
const DESTROY_VAR: &str = "NCCL_GROUP_GPU_TEST_DESTROY";
/// The child test's name.
const CHILD: &str = "multi_gpu_process_child";
/// How long the children of one scenario may take in all.
const CHILDREN_DEADLINE: Duration = Duration::from_secs(90);
/// The children's store (and rendezvous) timeout, in seconds.
const CHILD_STORE_TIMEOUT_SECS: &str = "20";

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port on 127.0.0.1")
        .port()
}

fn drain(mut reader: impl Read + Send + 'static) -> JoinHandle<String> {
    thread::spawn(move || {
        let mut text = String::new();
        let _ = reader.read_to_string(&mut text);
        text
    })
}

/// How each child picks its GPU.
#[derive(Clone, Copy, Debug)]
enum Placement {
    /// Every child sees every GPU and uses GPU `RANK` (torchrun's
    /// `LOCAL_RANK` convention).
    GpuPerRank,
    /// Each child sees only its own GPU (`CUDA_VISIBLE_DEVICES`) as device 0.
    VisibleDevices,
    /// GPU `RANK`, and each child claims to be on a host of its own
    /// (`NCCL_HOSTID`), so NCCL connects the ranks through its network
    /// transport (sockets on loopback) as it would across nodes.
    SimulatedNodes,
}

/// Spawns `world` copies of this binary running [`CHILD`], one per GPU,
/// launched the torchrun way, and asserts that all of them pass.
fn run_children(world: usize, placement: Placement, destroy: bool) {
    let exe = std::env::current_exe().expect("the test binary's path");
    let port = free_port();
    let visible: Option<Vec<String>> = std::env::var("CUDA_VISIBLE_DEVICES")
        .ok()
        .map(|v| v.split(',').map(str::to_owned).collect());
    let mut children: Vec<(Child, JoinHandle<String>, JoinHandle<String>)> = Vec::new();
    for rank in 0..world {
        let mut command = Command::new(&exe);
        command
            .args(["--exact", CHILD, "--nocapture", "--test-threads=1"])
            .env(ROLE_VAR, "child")
            .env("RANK", rank.to_string())
            .env("WORLD_SIZE", world.to_string())
            .env("LOCAL_RANK", rank.to_string())
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", port.to_string())
            .env("NCCL_RS_STORE_TIMEOUT_SECS", CHILD_STORE_TIMEOUT_SECS)
            .env_remove("NCCL_RS_STORE")
            .env_remove("NCCL_RS_STORE_SECRET")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if destroy {
            command.env(DESTROY_VAR, "1");
        }
        match placement {
            Placement::GpuPerRank => {
                command.env(DEVICE_VAR, rank.to_string());
            }
            Placement::SimulatedNodes => {
                command
                    .env(DEVICE_VAR, rank.to_string())
                    .envs(support::simulated_node_env(rank));
            }
            Placement::VisibleDevices => {
                let gpu = visible
                    .as_ref()
                    .map_or_else(|| rank.to_string(), |v| v[rank].clone());
                command
                    .env("CUDA_VISIBLE_DEVICES", gpu)
                    .env(DEVICE_VAR, "0");
            }
        }
        let mut child = command.spawn().expect("spawn a child process");
        let out = drain(child.stdout.take().unwrap());
        let err = drain(child.stderr.take().unwrap());
        children.push((child, out, err));
    }

    // Wait for all; once one fails, give the others a short grace period
    // (they may be blocked waiting for it), then kill what is left.
    let mut deadline = Instant::now() + CHILDREN_DEADLINE;
    let mut statuses: Vec<Option<ExitStatus>> = vec![None; world];
    let mut killed = Vec::new();
    loop {
        for (rank, (child, _, _)) in children.iter_mut().enumerate() {
            if statuses[rank].is_none() {
                if let Some(status) = child.try_wait().expect("try_wait") {
                    statuses[rank] = Some(status);
                    if !status.success() {
                        deadline = deadline.min(Instant::now() + Duration::from_secs(15));
                    }
                }
            }
        }
        if statuses.iter().all(Option::is_some) {
            break;
        }
        if Instant::now() >= deadline {
            for (rank, (child, _, _)) in children.iter_mut().enumerate() {
                if statuses[rank].is_none() {
                    let _ = child.kill();
                    statuses[rank] = child.wait().ok();
                    killed.push(rank);
                }
            }
            break;
        }
        thread::sleep(Duration::from_millis(50));
    }

    let mut failures = Vec::new();
    for (rank, (_, out, err)) in children.into_iter().enumerate() {
        let (out, err) = (
            out.join().unwrap_or_default(),
            err.join().unwrap_or_default(),
        );
        println!("----- child rank {rank} ({placement:?}) stdout -----\n{out}");
        println!("----- child rank {rank} ({placement:?}) stderr -----\n{err}");
        let status = statuses[rank];
        if killed.contains(&rank) {
            failures.push(format!("rank {rank}: killed after the deadline (hung)"));
        } else if !status.is_some_and(|s| s.success()) {
            failures.push(format!("rank {rank}: exited with {status:?}"));
        } else if !out.contains(&format!("child {rank}: ops ok")) {
            failures.push(format!("rank {rank}: passed without running the scenario"));
        } else if destroy && !out.contains(&format!("child {rank}: destroyed")) {
            failures.push(format!("rank {rank}: did not report the destroy"));
        }
    }
    assert!(
        failures.is_empty(),
        "{world} processes ({placement:?}): {}",
        failures.join("; ")
    );
}

fn process_count() -> usize {
    Device::count().expect("device count").min(8)
}

/// torchrun's layout: every process sees every GPU and uses GPU `RANK`.
#[test]
fn multi_gpu_processes_gpu_per_rank() {
    let Some(_) = support::require_gpus(2) else {
        return;
    };
    run_children(process_count(), Placement::GpuPerRank, false);
}

/// Ray's layout: each process sees only its own GPU, as device 0.
#[test]
fn multi_gpu_processes_visible_devices() {
    let Some(_) = support::require_gpus(2) else {
        return;
    };
    run_children(process_count(), Placement::VisibleDevices, false);
}

/// Several nodes, simulated: one process per GPU, each with its own
/// `NCCL_HOSTID`, so the collectives cross NCCL's network transport.
#[test]
fn multi_gpu_processes_simulated_nodes() {
    let Some(_) = support::require_gpus(2) else {
        return;
    };
    run_children(process_count(), Placement::SimulatedNodes, true);
}

/// The same scenario, ending with a collective `destroy` in every process.
#[test]
fn multi_gpu_processes_destroy() {
    let Some(_) = support::require_gpus(2) else {
        return;
    };
    run_children(process_count(), Placement::VisibleDevices, true);
}

/// One process of the multi-process scenarios; only runs when spawned by
/// them (it reports SKIP otherwise).
#[test]
fn multi_gpu_process_child() {
    let Some(_) = support::require_gpus(1) else {
        return;
    };
    if std::env::var(ROLE_VAR).as_deref() != Ok("child") {
        println!("SKIP: {CHILD} runs only as a child process of multi_gpu_processes_*");
        return;
    }
    let rank = support::child_var("RANK");
    let world = support::child_var("WORLD_SIZE");
    let gpu = support::child_var(DEVICE_VAR);
    let group = ProcessGroup::from_env("test")
        .unwrap_or_else(|e| panic!("rank {rank}: ProcessGroup::from_env: {e}"));
    assert_eq!((group.rank(), group.world_size()), (rank, world));
    let device = Device::new(gpu).unwrap_or_else(|e| panic!("rank {rank}: GPU {gpu}: {e}"));
    let stream = device.new_stream().expect("stream");
    const LEN: usize = 4097;
    let values = |seed: usize| support::test_values(seed as u64, LEN);
    let mine = values(rank + 1);

    // all_reduce: the sum of every rank's values.
    let sum = (1..world).fold(values(1), |acc, r| add(&acc, &values(r + 1)));
    let t = done(
        group.all_reduce(
            upload(&stream, &convert::<f32>(&mine)),
            ReduceOp::Sum,
            &stream,
        ),
        "all_reduce",
    );
    check(
        &format!("rank {rank}: all_reduce"),
        &download(&stream, &t),
        &convert(&sum),
    );

    // broadcast from the last rank.
    let root = world - 1;
    let start = if rank == root {
        convert::<f32>(&values(1000))
    } else {
        poison(LEN)
    };
    let t = done(
        group.broadcast(upload(&stream, &start), root as i32, &stream),
        "broadcast",
    );
    check(
        &format!("rank {rank}: broadcast from {root}"),
        &download(&stream, &t),
        &convert(&values(1000)),
    );

    // all_gather, in f16: every rank's values in rank order.
    let gathered: Vec<f64> = (0..world).flat_map(|r| values(r + 1)).collect();
    let (out, _) = done(
        group.all_gather(
            upload(&stream, &poison::<half::f16>(world * LEN)),
            upload(&stream, &convert::<half::f16>(&mine)),
            &stream,
        ),
        "all_gather",
    );
    check(
        &format!("rank {rank}: all_gather"),
        &download(&stream, &out),
        &convert(&gathered),
    );

    // send/recv between processes 0 and 1, both ways, over their pair
    // communicator; the others are not involved.
    match rank {
        0 => {
            let sent = done(
                group.send(upload(&stream, &convert::<f32>(&values(200))), 1, &stream),
                "send 0 -> 1",
            );
            check(
                "rank 0: sent tensor intact",
                &download(&stream, &sent),
                &convert(&values(200)),
            );
            let got = done(
                group.recv(upload(&stream, &poison::<f32>(LEN)), 1, &stream),
                "recv 0 <- 1",
            );
            check(
                "rank 0: received from 1",
                &download(&stream, &got),
                &convert(&values(201)),
            );
        }
        1 => {
            let got = done(
                group.recv(upload(&stream, &poison::<f32>(LEN)), 0, &stream),
                "recv 1 <- 0",
            );
            check(
                "rank 1: received from 0",
                &download(&stream, &got),
                &convert(&values(200)),
            );
            done(
                group.send(upload(&stream, &convert::<f32>(&values(201))), 0, &stream),
                "send 1 -> 0",
            );
        }
        _ => {}
    }

    group
        .barrier(&stream)
        .expect("barrier")
        .wait()
        .expect("barrier wait");
    stream.synchronize().expect("synchronize");
    println!("child {rank}: ops ok");
    if std::env::var(DESTROY_VAR).as_deref() == Ok("1") {
        group
            .destroy()
            .unwrap_or_else(|e| panic!("rank {rank}: destroy: {e}"));
        every_call_refused(&group, &stream, false);
        println!("child {rank}: destroyed");
    }
}
