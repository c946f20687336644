//! Argument errors with real device buffers: a send or receive to this rank
//! outside a group, roots and peers out of range, mismatched data types and
//! lengths, pre-multiplied sums of another type or communicator, and (with
//! two GPUs) buffers and streams of another device. Each error names the
//! operation and what was wrong, nothing is written, and the communicator
//! keeps working.

use nccl_test_support as support;
use std::sync::Arc;
use std::time::Duration;

use nccl_core::{CudaStream, DataType, ReduceOp, Status};
use nccl_tensor::{Communicator, Error, Result};
use nccl_test_support::tensor::matrix::{self, ok};
use nccl_test_support::tensor::{
    assert_cell_holds, assert_holds, assert_same, download, one_rank, one_rank_on_first_gpu,
    one_rank_within, poison_values, poisoned, poisoned_cell, upload, upload_cell, values,
};

/// After an error, the communicator must still run an operation correctly.
fn still_works(comm: &Communicator, stream: &Arc<CudaStream>) {
    let data = values::<f32>(99, 257);
    let source = upload(stream, &data);
    let mut target = poisoned::<f32>(stream, data.len());
    ok(
        comm.all_reduce_into(&source, &mut target, ReduceOp::Sum, stream),
        "all_reduce_into after errors",
    );
    assert_holds(stream, &target, &data, "all_reduce_into after errors");
}

/// Writes one matcher per row: `result` must be the error `Variant` whose
/// fields equal the parameters of the same names (`{ .. }`: the others
/// are not checked); a failure names the expected values.
macro_rules! refusal_matchers {
    ($($name:ident($($field:ident: $ty:ty),*) => $variant:ident $({ $rest:tt })?;)*) => {$(
        #[track_caller]
        fn $name(result: Result<Status>, $($field: $ty),*) {
            let expected = ($($field,)*);
            match result {
                Err(Error::$variant { $($field,)* $($rest)? }) => {
                    assert_eq!(($($field,)*), expected)
                }
                other => panic!(
                    concat!("{:?}: expected ", stringify!($variant), ", got {:?}"),
                    expected, other
                ),
            }
        }
    )*};
}

refusal_matchers! {
    assert_rank_error(op: &'static str, what: &'static str, given: usize, world_size: usize)
        => RankOutOfRange;
    assert_dtype_error(op: &'static str, input: DataType, output: DataType) => DtypeMismatch;
    assert_length_error(op: &'static str, what: &'static str, expected: usize, given: usize)
        => WrongLength { .. };
}

#[test]
fn gpu_send_or_recv_to_itself_outside_a_group_is_refused() {
    // NCCL would wait forever for the other half: a watchdog catches a
    // missing check instead of hanging the run.
    one_rank_within(
        "self send/recv outside a group",
        Duration::from_secs(60),
        move |comm, stream| {
            let data = values::<f32>(1, 100);
            let source = upload(&stream, &data);
            let mut target = poisoned::<f32>(&stream, 100);
            let (source_cell, target_cell) = (
                upload_cell(&stream, &data),
                poisoned_cell::<f32>(&stream, 100),
            );
            assert_eq!(nccl_core::group_depth(), 0);
            for (result, op) in [
                (comm.send(&source, 0, &stream), "send"),
                (comm.recv(&mut target, 0, &stream), "recv"),
                (comm.send(&source_cell, 0, &stream), "send"),
                (comm.recv(&target_cell, 0, &stream), "recv"),
            ] {
                match result {
                    Err(Error::SelfPeerOutsideGroup { op: o, peer: 0 }) => assert_eq!(o, op),
                    other => panic!("{op} to itself: expected SelfPeerOutsideGroup, got {other:?}"),
                }
            }
            // The message says what to do.
            let text = comm.send(&source, 0, &stream).unwrap_err().to_string();
            assert!(text.contains("Group"), "{text}");

            // Inside a group the same calls work...
            let group = nccl_core::Group::start().expect("group");
            let _ = comm.send(&source, 0, &stream).expect("send in a group");
            let _ = comm.recv(&mut target, 0, &stream).expect("recv in a group");
            ok(group.end().map_err(Error::from), "group end");
            assert_holds(&stream, &target, &data, "self send/recv in a group");
            // ... and after it ends they are refused again.
            assert!(matches!(
                comm.send(&source, 0, &stream),
                Err(Error::SelfPeerOutsideGroup { .. })
            ));
            assert_cell_holds(
                &stream,
                &target_cell,
                &poison_values::<f32>(100),
                "the refused receive's cell",
            );
            still_works(&comm, &stream);
        },
    );
}

#[test]
fn gpu_root_and_peer_out_of_range() {
    let Some((comm, stream)) = one_rank_on_first_gpu() else {
        return;
    };
    let data = values::<i32>(2, 33);
    let source = upload(&stream, &data);
    let mut target = poisoned::<i32>(&stream, 33);
    let target_cell = poisoned_cell::<i32>(&stream, 33);
    let sum = ReduceOp::Sum;

    assert_rank_error(
        comm.broadcast(&mut target, 1, &stream),
        "broadcast",
        "root",
        1,
        1,
    );
    assert_rank_error(
        comm.broadcast(&target_cell, 7, &stream),
        "broadcast",
        "root",
        7,
        1,
    );
    assert_rank_error(
        comm.broadcast_into(&source, &mut target, 2, &stream),
        "broadcast",
        "root",
        2,
        1,
    );
    assert_rank_error(
        comm.reduce(&mut target, sum, 1, &stream),
        "reduce",
        "root",
        1,
        1,
    );
    assert_rank_error(
        comm.reduce_into(&source, &target_cell, sum, i32::MAX as usize, &stream),
        "reduce",
        "root",
        i32::MAX as usize,
        1,
    );
    assert_rank_error(comm.send(&source, 1, &stream), "send", "dst", 1, 1);
    assert_rank_error(comm.recv(&mut target, 3, &stream), "recv", "src", 3, 1);
    // Past NCCL's C int: out of range like any other rank past the world.
    assert_rank_error(
        comm.broadcast(&mut target, 1 << 31, &stream),
        "broadcast",
        "root",
        1 << 31,
        1,
    );
    let mut batch = comm.batch(&stream);
    batch.recv(&mut target, 0).send(&source, 1 << 31);
    let past = batch.enqueue().expect_err("a batch's dst past i32::MAX");
    assert_eq!(past.kind(), nccl_tensor::ErrorKind::RankOutOfRange);
    assert!(
        past.to_string()
            .starts_with("operation 1 of the batch: send: dst 2147483648 is out of range"),
        "{past}"
    );
    assert_rank_error(comm.recv(&target_cell, 1, &stream), "recv", "src", 1, 1);
    // Out of range inside a group too.
    {
        let group = nccl_core::Group::start().expect("group");
        assert_rank_error(comm.send(&source, 1, &stream), "send", "dst", 1, 1);
        let _ = group.end().expect("an empty group ends fine");
    }

    let poison = poison_values::<i32>(33);
    assert_holds(&stream, &target, &poison, "after refused calls");
    assert_cell_holds(&stream, &target_cell, &poison, "after refused calls");
    still_works(&comm, &stream);
}

#[test]
fn gpu_dtype_mismatch_with_real_tensors() {
    let Some((comm, stream)) = one_rank_on_first_gpu() else {
        return;
    };
    let (f32_, f64_, bf16_, i8_) = (
        DataType::Float32,
        DataType::Float64,
        DataType::Bfloat16,
        DataType::Int8,
    );
    let len = 40;
    let source = upload(&stream, &values::<f32>(3, len));
    let mut target = poisoned::<f64>(&stream, len);
    let sum = ReduceOp::Sum;

    // Typed buffers.
    assert_dtype_error(
        comm.all_reduce_into(&source, &mut target, sum, &stream),
        "all_reduce",
        f32_,
        f64_,
    );
    assert_dtype_error(
        comm.broadcast_into(&source, &mut target, 0, &stream),
        "broadcast",
        f32_,
        f64_,
    );
    assert_dtype_error(
        comm.reduce_into(&source, &mut target, sum, 0, &stream),
        "reduce",
        f32_,
        f64_,
    );
    assert_dtype_error(
        comm.all_gather_into_tensor(&mut target, &source, &stream),
        "all_gather",
        f32_,
        f64_,
    );
    assert_dtype_error(
        comm.reduce_scatter_tensor(&mut target, &source, sum, &stream),
        "reduce_scatter",
        f32_,
        f64_,
    );
    assert_dtype_error(
        comm.all_to_all_single(&mut target, &source, &stream),
        "all_to_all",
        f32_,
        f64_,
    );
    let mut list = [poisoned::<half::bf16>(&stream, len)];
    assert_dtype_error(
        comm.all_gather(&mut list[..], &source, &stream),
        "all_gather",
        f32_,
        bf16_,
    );

    // Cells, and a typed input with a cell output.
    let source_cell = upload_cell(&stream, &values::<half::bf16>(4, len));
    let target_cell = poisoned_cell::<i8>(&stream, len);
    assert_dtype_error(
        comm.all_reduce_into(&source_cell, &target_cell, sum, &stream),
        "all_reduce",
        bf16_,
        i8_,
    );
    assert_dtype_error(
        comm.all_to_all_single(&target_cell, &source_cell, &stream),
        "all_to_all",
        bf16_,
        i8_,
    );
    assert_dtype_error(
        comm.broadcast_into(&source, &target_cell, 0, &stream),
        "broadcast",
        f32_,
        i8_,
    );
    assert_dtype_error(
        comm.all_gather(std::slice::from_ref(&target_cell), &source, &stream),
        "all_gather",
        f32_,
        i8_,
    );

    assert_holds(&stream, &target, &poison_values::<f64>(len), "f64 target");
    assert_same(
        &download(&stream, &list[0]),
        &poison_values::<half::bf16>(len),
        "bf16 target",
    );
    assert_cell_holds(
        &stream,
        &target_cell,
        &poison_values::<i8>(len),
        "i8 target",
    );
    still_works(&comm, &stream);
}

#[test]
fn gpu_wrong_lengths_with_real_tensors() {
    let Some((comm, stream)) = one_rank_on_first_gpu() else {
        return;
    };
    let five = upload(&stream, &values::<f32>(5, 5));
    let mut six = poisoned::<f32>(&stream, 6);
    let sum = ReduceOp::Sum;
    assert_length_error(
        comm.all_reduce_into(&five, &mut six, sum, &stream),
        "all_reduce",
        "output",
        5,
        6,
    );
    assert_length_error(
        comm.broadcast_into(&five, &mut six, 0, &stream),
        "broadcast",
        "output",
        5,
        6,
    );
    assert_length_error(
        comm.reduce_into(&five, &mut six, sum, 0, &stream),
        "reduce",
        "output",
        5,
        6,
    );
    assert_length_error(
        comm.all_gather_into_tensor(&mut six, &five, &stream),
        "all_gather",
        "output",
        5,
        6,
    );
    let mut five_out = poisoned::<f32>(&stream, 5);
    let six_in = upload(&stream, &values::<f32>(6, 6));
    assert_length_error(
        comm.reduce_scatter_tensor(&mut five_out, &six_in, sum, &stream),
        "reduce_scatter",
        "input",
        5,
        6,
    );
    assert_length_error(
        comm.all_to_all_single(&mut six, &five, &stream),
        "all_to_all",
        "output",
        5,
        6,
    );
    let mut two = [poisoned::<f32>(&stream, 5), poisoned::<f32>(&stream, 5)];
    assert_length_error(
        comm.all_gather(&mut two[..], &five, &stream),
        "all_gather",
        "output list",
        1,
        2,
    );
    let mut none: [nccl_tensor::Tensor<f32>; 0] = [];
    assert_length_error(
        comm.all_gather(&mut none[..], &five, &stream),
        "all_gather",
        "output list",
        1,
        0,
    );
    let mut wrong = [poisoned::<f32>(&stream, 6)];
    assert_length_error(
        comm.all_gather(&mut wrong[..], &five, &stream),
        "all_gather",
        "an output",
        5,
        6,
    );

    let poison = poison_values::<f32>(6);
    assert_holds(&stream, &six, &poison, "after refused calls");
    assert_holds(&stream, &wrong[0], &poison, "after refused calls");
    still_works(&comm, &stream);
}

#[test]
fn gpu_pre_mul_sum_of_another_type_or_communicator() {
    let Some((comm, stream)) = one_rank_on_first_gpu() else {
        return;
    };
    let other = one_rank(comm.device());
    let data = values::<f32>(7, 10);
    let mut tensor = upload(&stream, &data);

    let for_f32 = comm.pre_mul_sum::<f32>(0.5).expect("pre_mul_sum f32");
    let mut doubles = upload(&stream, &values::<f64>(8, 10));
    match comm.all_reduce(&mut doubles, &for_f32, &stream) {
        Err(Error::UnsupportedReduction {
            op: "all_reduce",
            reduction: "premulsum",
            dtype: DataType::Float64,
            ..
        }) => {}
        other => panic!("pre_mul_sum for f32 on f64: {other:?}"),
    }
    let mut halves = poisoned::<half::f16>(&stream, 10);
    let source = upload(&stream, &values::<half::f16>(9, 10));
    assert!(matches!(
        comm.reduce_scatter_tensor(&mut halves, &source, &for_f32, &stream),
        Err(Error::UnsupportedReduction { .. })
    ));

    let foreign = other
        .pre_mul_sum::<f32>(0.5)
        .expect("pre_mul_sum on the other communicator");
    match comm.all_reduce(&mut tensor, &foreign, &stream) {
        Err(Error::Core(nccl_core::Error::InvalidArgument {
            argument: "reduce op",
            ..
        })) => {}
        other => panic!("a pre-multiplied sum of another communicator: {other:?}"),
    }

    match comm.pre_mul_sum::<i32>(0.5) {
        Err(Error::Core(nccl_core::Error::InvalidArgument { .. })) => {}
        other => panic!("pre_mul_sum::<i32>(0.5): {other:?}"),
    }
    assert!(comm.pre_mul_sum::<f32>(f64::NAN).is_err());

    // Nothing was written; both communicators still work.
    assert_holds(&stream, &tensor, &data, "after refused calls");
    ok(
        comm.all_reduce(&mut tensor, &for_f32, &stream),
        "the right pre_mul_sum",
    );
    let halved: Vec<f32> = data.iter().map(|v| v * 0.5).collect();
    assert_holds(&stream, &tensor, &halved, "the right pre_mul_sum");
    drop(foreign);
    still_works(&other, &stream);
}

#[test]
fn gpu_error_messages_name_the_operation() {
    let Some((comm, stream)) = one_rank_on_first_gpu() else {
        return;
    };
    let five = upload(&stream, &values::<f32>(10, 5));
    let mut six = poisoned::<f64>(&stream, 6);
    let text = comm
        .all_reduce_into(&five, &mut six, ReduceOp::Sum, &stream)
        .unwrap_err()
        .to_string();
    println!("{text}");
    assert!(text.starts_with("all_reduce: "), "{text}");
    let text = comm
        .broadcast(&mut six, 3, &stream)
        .unwrap_err()
        .to_string();
    println!("{text}");
    assert!(
        text.starts_with("broadcast: ") && text.contains('3'),
        "{text}"
    );
}

/// A tensor or cell on device 1 given to a communicator on device 0 is
/// refused with `WrongDevice`; a stream of device 1 is refused by nccl-core.
#[test]
fn multi_gpu_wrong_device_is_refused() {
    let Some(devices) = support::require_gpus(2) else {
        return;
    };
    let comm = one_rank(&devices[0]);
    let near_stream = devices[0].new_stream().expect("stream 0");
    let far_stream = devices[1].new_stream().expect("stream 1");
    let data = values::<f32>(11, 64);
    let mut far = upload(&far_stream, &data);
    let far_cell = upload_cell(&far_stream, &data);
    let near = upload(&near_stream, &data);
    let mut near_out = poisoned::<f32>(&near_stream, 64);
    let sum = ReduceOp::Sum;

    let wrong_device = |result: Result<Status>, op: &'static str, what: &'static str| match result {
        Err(Error::WrongDevice {
            op: o,
            what: w,
            expected: 0,
            given: 1,
        }) => assert_eq!((o, w), (op, what)),
        other => panic!("{op} {what}: expected WrongDevice 0/1, got {other:?}"),
    };
    wrong_device(
        comm.all_reduce(&mut far, sum, &near_stream),
        "all_reduce",
        "tensor",
    );
    wrong_device(
        comm.all_reduce_into(&far, &mut near_out, sum, &near_stream),
        "all_reduce",
        "input",
    );
    wrong_device(
        comm.broadcast(&far_cell, 0, &near_stream),
        "broadcast",
        "tensor",
    );
    wrong_device(
        comm.all_gather(std::slice::from_ref(&far_cell), &near, &near_stream),
        "all_gather",
        "an output",
    );
    wrong_device(
        comm.all_to_all_single(&mut near_out, &far, &near_stream),
        "all_to_all",
        "input",
    );
    let group = nccl_core::Group::start().expect("group");
    wrong_device(comm.send(&far, 0, &near_stream), "send", "tensor");
    let _ = group.end().expect("an empty group");

    // Buffers on the right device but a stream of the other one.
    let mut near_inplace = upload(&near_stream, &data);
    match comm.all_reduce(&mut near_inplace, sum, &far_stream) {
        Err(Error::Core(nccl_core::Error::InvalidArgument {
            argument: "stream", ..
        })) => {}
        other => panic!("a stream of device 1: {other:?}"),
    }
    match comm.barrier(&far_stream) {
        Err(Error::Core(nccl_core::Error::InvalidArgument {
            argument: "stream", ..
        })) => {}
        other => panic!("barrier on a stream of device 1: {other:?}"),
    }
    ok(
        comm.barrier(&near_stream),
        "barrier on its own stream afterwards",
    );
    near_stream.synchronize().expect("synchronize");

    assert_holds(&far_stream, &far, &data, "the far tensor");
    assert_holds(
        &near_stream,
        &near_out,
        &poison_values::<f32>(64),
        "the near output",
    );
    still_works(&comm, &near_stream);
    matrix::data_movement(&comm, &near_stream, &data);
}
