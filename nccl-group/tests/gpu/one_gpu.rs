//! `ProcessGroup` on one GPU (world size 1): every operation in its single
//! and list (`*_multi`) forms with values checked on the host, on both
//! kinds of communicator and both stream modes; ordering with the caller's
//! stream. (`Work`, threads, destroy, abort and errors are in
//! `gpu/lifecycle.rs`; several GPUs and processes in
//! `gpu_group_multi.rs` (a binary of its own).)
//!
//! Every test starts with `require_gpus(n)`: without the GPUs it prints
//! `SKIP: ...` and passes, unless `NCCL_TEST_REQUIRE_GPU=1`.

use nccl_core::{Device, ReduceOp};
use nccl_group::{CommMode, GroupOptions, ProcessGroup, StreamMode};
use nccl_tensor::Tensor;
use nccl_test_support as support;
use nccl_test_support::group::{SIZES, done, pattern, world_of_one};
use nccl_test_support::tensor::{
    Elem, download, poison_values, stream_on_first_gpu, upload, values,
};
use nccl_test_support::{assert_same_values, named_tests};

/// Every operation in its single form on `len`-element tensors of `T`.
fn every_op_single<T: Elem>(device: &Device, name: &str, options: GroupOptions) {
    let group = world_of_one(name, options);
    let stream = device.new_stream().expect("stream");
    for (case, &len) in SIZES.iter().enumerate() {
        let data = values::<T>(case as u64 + 1, len);
        let what = |op: &str| format!("{op} ({} x {len})", T::NAME);
        let input = || upload(&stream, &data);
        let poisoned = || upload(&stream, &poison_values(len));
        let holds_data =
            |t: &Tensor<T>, w: &str| assert_same_values(&download(&stream, t), &data, w);
        // At world size 1 both the output and the input hold the data.
        let both_hold_data = |(out, inp): (Tensor<T>, Tensor<T>), w: &str| {
            holds_data(&out, w);
            holds_data(&inp, &format!("{w} input"));
        };

        for op in ReduceOp::ALL {
            let w = what(&format!("all_reduce {op:?}"));
            holds_data(&done(group.all_reduce(input(), op, &stream), &w), &w);

            let w = what(&format!("reduce {op:?} to root 0"));
            holds_data(&done(group.reduce(input(), op, 0, &stream), &w), &w);
        }

        let w = what("broadcast from root 0");
        holds_data(&done(group.broadcast(input(), 0, &stream), &w), &w);

        let w = what("all_gather");
        let gathered = group.all_gather_into_tensor(poisoned(), input(), &stream);
        both_hold_data(done(gathered, &w), &w);

        let w = what("reduce_scatter");
        let scattered = group.reduce_scatter_tensor(poisoned(), input(), ReduceOp::Sum, &stream);
        both_hold_data(done(scattered, &w), &w);

        let w = what("all_gather (list)");
        let (outs, inp) = done(group.all_gather(vec![poisoned()], input(), &stream), &w);
        assert_eq!(outs.len(), 1, "{w}: one output per rank");
        holds_data(&outs[0], &w);
        holds_data(&inp, &format!("{w} input"));

        // A root outside the group (here also past nccl-core's i32) is
        // refused before NCCL sees it, naming the argument and both
        // numberings, with the tensor handed back.
        let w = what("broadcast from a root past i32::MAX");
        let refused = group.broadcast(input(), 1 << 31, &stream).expect_err(&w);
        assert!(
            refused
                .to_string()
                .starts_with("invalid root: expected a GroupRank in 0..1"),
            "{w}: {refused}"
        );
        holds_data(&refused.buffers, &w);

        let w = what("all_to_all");
        let exchanged = group.all_to_all_single(poisoned(), input(), &stream);
        both_hold_data(done(exchanged, &w), &w);

        group
            .barrier(&stream)
            .expect("barrier")
            .wait()
            .expect("barrier wait");
    }
}

/// Every operation in its list form, with one tensor and one stream.
fn every_op_multi<T: Elem>(device: &Device, name: &str, options: GroupOptions) {
    let group = world_of_one(name, options);
    let stream = device.new_stream().expect("stream");
    let streams = std::slice::from_ref(&stream);
    for (case, &len) in SIZES.iter().enumerate() {
        let data = values::<T>(case as u64 + 11, len);
        let what = |op: &str| format!("{op}_multi ({} x {len})", T::NAME);
        let one = || vec![upload(&stream, &data)];
        let pair = || vec![(upload(&stream, &poison_values(len)), upload(&stream, &data))];
        let holds_data =
            |t: &Tensor<T>, w: &str| assert_same_values(&download(&stream, t), &data, w);

        for op in ReduceOp::ALL {
            let w = what(&format!("all_reduce {op:?}"));
            let ts = done(group.multi().all_reduce(one(), op, streams), &w);
            assert_eq!(ts.len(), 1);
            holds_data(&ts[0], &w);

            let w = what(&format!("reduce {op:?}"));
            holds_data(
                &done(group.multi().reduce(one(), op, 0, streams), &w)[0],
                &w,
            );
        }

        let w = what("broadcast");
        holds_data(&done(group.multi().broadcast(one(), 0, streams), &w)[0], &w);

        let w = what("all_gather");
        let ps = done(group.multi().all_gather_into_tensor(pair(), streams), &w);
        assert_eq!(ps.len(), 1);
        holds_data(&ps[0].0, &w);
        holds_data(&ps[0].1, &format!("{w} input"));

        let w = what("reduce_scatter");
        let scattered = group
            .multi()
            .reduce_scatter_tensor(pair(), ReduceOp::Sum, streams);
        holds_data(&done(scattered, &w)[0].0, &w);

        let w = what("all_to_all");
        let ps = done(group.multi().all_to_all_single(pair(), streams), &w);
        holds_data(&ps[0].0, &w);
        holds_data(&ps[0].1, &format!("{w} input"));
    }
}

/// One of the two above for one element type, a group name and options.
type EveryOp = (fn(&Device, &str, GroupOptions), &'static str, GroupOptions);

/// Each of `runs` in turn on the first GPU.
fn every_op_on_one_gpu(runs: Vec<EveryOp>) {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    for (every_op, name, options) in runs {
        every_op(&devices[0], name, options);
    }
}

/// `every_op` with the default options on the first GPU.
fn every_op_by_default(every_op: fn(&Device, &str, GroupOptions), name: &'static str) {
    every_op_on_one_gpu(vec![(every_op, name, GroupOptions::default())]);
}

named_tests! {
    gpu_every_op_single_f32: every_op_by_default(every_op_single::<f32>, "single-f32");
    gpu_every_op_single_f16: every_op_by_default(every_op_single::<half::f16>, "single-f16");
    gpu_every_op_single_i32: every_op_by_default(every_op_single::<i32>, "single-i32");
    gpu_every_op_multi_f32: every_op_by_default(every_op_multi::<f32>, "multi-f32");
    gpu_every_op_multi_f16: every_op_by_default(every_op_multi::<half::f16>, "multi-f16");
}

#[test]
fn gpu_single_and_multi_forms_share_one_group() {
    let Some(stream) = stream_on_first_gpu() else {
        return;
    };
    // Alternating forms on one device use the same communicator and stay
    // in order.
    let group = world_of_one("mixed-forms", GroupOptions::default());
    let streams = std::slice::from_ref(&stream);
    for i in 0..10u64 {
        let data = values::<f32>(100 + i, 257);
        let (out, _) = if i % 2 == 0 {
            done(
                group.all_gather_into_tensor(
                    upload(&stream, &poison_values(257)),
                    upload(&stream, &data),
                    &stream,
                ),
                "all_gather",
            )
        } else {
            let mut v = done(
                group.multi().all_gather_into_tensor(
                    vec![(upload(&stream, &poison_values(257)), upload(&stream, &data))],
                    streams,
                ),
                "all_gather_into_tensor_multi",
            );
            v.pop().unwrap()
        };
        assert_same_values(&download(&stream, &out), &data, &format!("iteration {i}"));
    }
}

/// The defaults are blocking communicators and the caller's stream; the
/// other choices of each switch get the same matrix.
#[test]
fn gpu_every_op_with_nonblocking_communicators() {
    let nonblocking = || GroupOptions::default().with_comm_mode(CommMode::Nonblocking);
    every_op_on_one_gpu(vec![
        (
            every_op_single::<f32>,
            "nonblocking-single-f32",
            nonblocking(),
        ),
        (
            every_op_multi::<f32>,
            "nonblocking-multi-f32",
            nonblocking(),
        ),
        (
            every_op_single::<half::f16>,
            "nonblocking-separate-single-f16",
            nonblocking().with_stream_mode(StreamMode::Separate),
        ),
    ]);
}

#[test]
fn gpu_every_op_on_the_groups_nccl_stream() {
    let separate = || GroupOptions::default().with_stream_mode(StreamMode::Separate);
    every_op_on_one_gpu(vec![
        (every_op_single::<f32>, "separate-single-f32", separate()),
        (
            every_op_single::<half::f16>,
            "separate-single-f16",
            separate(),
        ),
        (every_op_multi::<f32>, "separate-multi-f32", separate()),
    ]);
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
    let group = world_of_one("ordering", GroupOptions::default());
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
                done(
                    group.all_gather_into_tensor(output, input, &stream),
                    "all_gather",
                ),
            ),
            1 => (
                "reduce_scatter",
                done(
                    group.reduce_scatter_tensor(output, input, ReduceOp::Sum, &stream),
                    "reduce_scatter",
                ),
            ),
            _ => (
                "all_to_all",
                done(
                    group.all_to_all_single(output, input, &stream),
                    "all_to_all",
                ),
            ),
        };
        let got = stream.clone_dtoh(out.as_slice()).expect("device to host");
        assert_same_values(&got, &data, &format!("iteration {iteration} ({op})"));
        (output, input) = (out, inp);
    }
}
