//! `TensorCell` on one GPU, strided and aliased: strided cells are
//! refused by operations unless they are contiguous, and the same cell as
//! input and output of an out-of-place operation is refused.

use std::sync::Arc;
use std::time::Duration;

use nccl_core::ReduceOp;
use nccl_tensor::{Error, Tensor, TensorCell};
use nccl_test_support as support;
use nccl_test_support::tensor::matrix::ok;
use nccl_test_support::tensor::{
    assert_cell_holds, assert_same, download_cell, first, one_rank, one_rank_on_first_gpu,
    poison_values, poisoned, poisoned_cell, stream_on_first_gpu, upload, upload_cell, values,
};

fn f32s(seed: u64, len: usize) -> Vec<f32> {
    values::<f32>(seed, len)
}

/// A cell over a 6-element tensor seen as the transpose of a 3x2 matrix.
fn transposed(stream: &Arc<nccl_core::CudaStream>, data: &[f32]) -> TensorCell {
    TensorCell::strided(upload(stream, data), &[2, 3], &[1, 2]).expect("strided cell")
}

#[track_caller]
fn assert_not_contiguous(result: nccl_tensor::Result<nccl_core::Status>, op: &str, what: &str) {
    match result {
        Err(Error::NotContiguous {
            op: o,
            what: w,
            shape,
            strides,
        }) => {
            assert_eq!((o, w), (op, what));
            assert_eq!((shape, strides), (vec![2, 3], vec![1, 2]));
        }
        other => panic!("{op} ({what}): expected NotContiguous, got {other:?}"),
    }
}

#[test]
fn gpu_cell_strided_non_contiguous_is_refused() {
    let Some((comm, stream)) = one_rank_on_first_gpu() else {
        return;
    };
    let data = f32s(10, 6);
    let strided = transposed(&stream, &data);
    assert!(!strided.is_contiguous());
    assert_eq!(
        (strided.shape(), strided.strides(), strided.len()),
        (&[2, 3][..], &[1, 2][..], 6)
    );
    assert_eq!(strided.desc().strided, Some((&[2, 3][..], &[1, 2][..])));
    let plain = upload_cell(&stream, &data);
    let sum = ReduceOp::Sum;

    assert_not_contiguous(
        comm.all_reduce(&strided, sum, &stream),
        "all_reduce",
        "tensor",
    );
    assert_not_contiguous(
        comm.all_reduce_into(&strided, &plain, sum, &stream),
        "all_reduce",
        "input",
    );
    assert_not_contiguous(
        comm.all_reduce_into(&plain, &strided, sum, &stream),
        "all_reduce",
        "output",
    );
    assert_not_contiguous(comm.broadcast(&strided, 0, &stream), "broadcast", "tensor");
    assert_not_contiguous(
        comm.broadcast_into(&strided, &plain, 0, &stream),
        "broadcast",
        "input",
    );
    assert_not_contiguous(comm.reduce(&strided, sum, 0, &stream), "reduce", "tensor");
    assert_not_contiguous(
        comm.reduce_into(&plain, &strided, sum, 0, &stream),
        "reduce",
        "output",
    );
    assert_not_contiguous(
        comm.all_gather_into_tensor(&plain, &strided, &stream),
        "all_gather",
        "input",
    );
    assert_not_contiguous(
        comm.all_gather(std::slice::from_ref(&strided), &plain, &stream),
        "all_gather",
        "an output",
    );
    assert_not_contiguous(
        comm.all_gather(std::slice::from_ref(&plain), &strided, &stream),
        "all_gather",
        "input",
    );
    assert_not_contiguous(
        comm.reduce_scatter_tensor(&strided, &plain, sum, &stream),
        "reduce_scatter",
        "output",
    );
    assert_not_contiguous(
        comm.all_to_all_single(&plain, &strided, &stream),
        "all_to_all",
        "input",
    );
    // The peer is checked first; inside a group this rank is a valid peer,
    // so the buffer's check answers (nothing is enqueued).
    let group = nccl_core::Group::start().expect("group start");
    assert_not_contiguous(comm.send(&strided, 0, &stream), "send", "tensor");
    assert_not_contiguous(comm.recv(&strided, 0, &stream), "recv", "tensor");
    let _ = group.end().expect("an empty group ends");

    // An every-other-element view is refused as well.
    let every_other =
        TensorCell::strided(upload(&stream, &f32s(11, 8)), &[4], &[2]).expect("strided");
    assert!(!every_other.is_contiguous());
    assert!(matches!(
        comm.all_reduce(&every_other, sum, &stream),
        Err(Error::NotContiguous { .. })
    ));

    // Nothing was written.
    assert_cell_holds(&stream, &strided, &data, "the strided storage");
    assert_cell_holds(&stream, &plain, &data, "the plain cell");
}

#[test]
fn gpu_cell_strided_but_contiguous_views_work() {
    let Some((comm, stream)) = one_rank_on_first_gpu() else {
        return;
    };
    let data = f32s(12, 6);
    let poison = poison_values::<f32>(2);

    // The first 6 of 8 elements: operations use the view's length.
    let prefix = TensorCell::strided(poisoned::<f32>(&stream, 8), &[6], &[1]).expect("prefix view");
    assert!(prefix.is_contiguous());
    assert_eq!(prefix.len(), 6);
    let source = upload_cell(&stream, &data);
    ok(
        comm.all_reduce_into(&source, &prefix, ReduceOp::Sum, &stream),
        "all_reduce_into a prefix view",
    );
    let storage = download_cell::<f32>(&stream, &prefix);
    assert_same(&storage[..6], &data, "the prefix view");
    assert_same(&storage[6..], &poison, "past the prefix view");

    // A dimension of extent 1 may have any stride.
    let odd = TensorCell::strided(upload(&stream, &data), &[2, 1, 3], &[3, 99, 1]).expect("view");
    assert!(odd.is_contiguous());
    ok(
        comm.all_reduce(&odd, ReduceOp::Min, &stream),
        "all_reduce on [2,1,3]/[3,99,1]",
    );
    ok(
        comm.broadcast(&odd, 0, &stream),
        "broadcast on [2,1,3]/[3,99,1]",
    );
    let out = poisoned_cell::<f32>(&stream, 6);
    ok(
        comm.all_gather_into_tensor(&out, &odd, &stream),
        "all_gather_into_tensor from [2,1,3]/[3,99,1]",
    );
    assert_cell_holds(&stream, &out, &data, "gathered from the view");
}

#[test]
fn gpu_cell_strided_construction_errors() {
    let Some(stream) = stream_on_first_gpu() else {
        return;
    };
    let six = || upload(&stream, &f32s(13, 6));
    let rank_mismatch = TensorCell::strided(six(), &[2, 3], &[1]).unwrap_err();
    assert!(
        matches!(rank_mismatch, Error::ShapeMismatch { .. }),
        "{rank_mismatch}"
    );
    let too_far = TensorCell::strided(six(), &[2, 4], &[4, 1]).unwrap_err();
    assert!(
        matches!(
            too_far,
            Error::StridesOutOfBounds {
                needed: 8,
                storage: 6,
                ..
            }
        ),
        "{too_far}"
    );
    let too_long = TensorCell::strided(six(), &[7], &[1]).unwrap_err();
    assert!(
        matches!(
            too_long,
            Error::StridesOutOfBounds {
                needed: 7,
                storage: 6,
                ..
            }
        ),
        "{too_long}"
    );
    let shape = Tensor::from_host(&stream, &f32s(14, 6), &[4, 2]).unwrap_err();
    assert!(
        matches!(
            shape,
            Error::ShapeMismatch {
                expected: 8,
                given: 6,
                ..
            }
        ),
        "{shape}"
    );
}

#[track_caller]
fn assert_aliased(result: nccl_tensor::Result<nccl_core::Status>, op: &str) {
    match result {
        Err(Error::AliasedCells { op: o }) => assert_eq!(o, op),
        other => panic!("{op}: expected AliasedCells, got {other:?}"),
    }
}

#[test]
fn gpu_cell_as_input_and_output_of_an_out_of_place_op_is_refused() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    let device = first(devices);
    // A cell read and written at once would deadlock on its lock if the
    // check were missing: run under a watchdog.
    support::within("aliased cells", Duration::from_secs(60), move || {
        let comm = one_rank(&device);
        let stream = device.new_stream().expect("stream");
        let data = f32s(15, 64);
        let cell = upload_cell(&stream, &data);
        let same = cell.clone();
        let sum = ReduceOp::Sum;
        for other in [&cell, &same] {
            assert_aliased(
                comm.all_reduce_into(&cell, other, sum, &stream),
                "all_reduce",
            );
            assert_aliased(comm.broadcast_into(&cell, other, 0, &stream), "broadcast");
            assert_aliased(comm.reduce_into(&cell, other, sum, 0, &stream), "reduce");
            assert_aliased(
                comm.all_gather_into_tensor(other, &cell, &stream),
                "all_gather",
            );
            assert_aliased(
                comm.reduce_scatter_tensor(other, &cell, sum, &stream),
                "reduce_scatter",
            );
            assert_aliased(comm.all_to_all_single(other, &cell, &stream), "all_to_all");
        }
        assert_cell_holds(&stream, &cell, &data, "the aliased cell");
        // The in-place forms take the one cell.
        ok(comm.all_reduce(&cell, sum, &stream), "all_reduce in place");
        assert_cell_holds(&stream, &cell, &data, "all_reduce in place");
    });
}

#[test]
fn gpu_cell_all_gather_with_the_input_among_the_outputs_is_refused() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    let device = first(devices);
    // all_gather's list form holds the input cell's read lock while it
    // writes each output: with the input cell also in the list, a missing
    // alias check would deadlock, so this runs under a watchdog.
    support::within(
        "all_gather with the input in the output list",
        Duration::from_secs(30),
        move || {
            let comm = one_rank(&device);
            let stream = device.new_stream().expect("stream");
            let data = f32s(16, 64);
            let cell = upload_cell(&stream, &data);
            let same = cell.clone();
            for output in [&cell, &same] {
                assert_aliased(
                    comm.all_gather(std::slice::from_ref(output), &cell, &stream),
                    "all_gather",
                );
            }
            assert_cell_holds(&stream, &cell, &data, "the aliased cell");
            // A cell output with a typed input of the same data is fine.
            let source = upload(&stream, &data);
            ok(
                comm.all_gather(std::slice::from_ref(&cell), &source, &stream),
                "all_gather into the cell from a tensor",
            );
            assert_cell_holds(&stream, &cell, &data, "gathered");
        },
    );
}
