//! `TensorCell` on one GPU: construction and typed access, conversions back
//! to `Tensor`, identity, strided cells (refused by operations unless they
//! are contiguous), the same cell as input and output of an out-of-place
//! operation, and cells shared between threads.

#[path = "../../nccl-core/tests/support/mod.rs"]
mod support;
mod tensor_support;

use std::sync::Arc;
use std::time::Duration;

use nccl_core::{DataType, Device, ReduceOp};
use nccl_tensor::{Communicator, Error, Tensor, TensorCell};
use tensor_support::matrix::ok;
use tensor_support::{
    assert_same, download, download_cell, first, one_rank, poison_values, poisoned, poisoned_cell,
    upload, upload_cell, values,
};

fn f32s(seed: u64, len: usize) -> Vec<f32> {
    values::<f32>(seed, len)
}

#[test]
fn gpu_cell_new_and_from_describe_the_tensor() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    let device = first(devices);
    let stream = device.new_stream().expect("stream");
    let data = f32s(1, 6);

    let cell = TensorCell::new(Tensor::from_host(&stream, &data, &[2, 3]).expect("tensor"));
    assert_eq!(cell.dtype(), DataType::Float32);
    assert_eq!(cell.shape(), &[2, 3]);
    assert_eq!(cell.strides(), &[3, 1]);
    assert_eq!((cell.len(), cell.is_empty()), (6, false));
    assert_eq!(cell.device(), device.ordinal());
    assert!(cell.is_contiguous());
    let desc = cell.desc();
    assert_eq!(
        (desc.dtype, desc.len, desc.device, desc.strided),
        (DataType::Float32, 6, device.ordinal(), None)
    );
    assert_same(
        &download_cell::<f32>(&stream, &cell),
        &data,
        "TensorCell::new",
    );

    let ints = values::<i32>(2, 5);
    let from: TensorCell = upload(&stream, &ints).into();
    assert_eq!(
        (from.dtype(), from.shape(), from.len()),
        (DataType::Int32, &[5][..], 5)
    );
    assert_same(
        &download_cell::<i32>(&stream, &from),
        &ints,
        "From<Tensor<i32>>",
    );

    let halves = values::<half::bf16>(3, 7);
    let from = TensorCell::from(upload(&stream, &halves));
    assert_eq!(from.dtype(), DataType::Bfloat16);
    assert_same(
        &download_cell::<half::bf16>(&stream, &from),
        &halves,
        "From<Tensor<bf16>>",
    );

    let fp8 = values::<float8::F8E4M3>(4, 9);
    let from = TensorCell::from(upload(&stream, &fp8));
    assert_eq!(from.dtype(), DataType::Float8E4M3);
    assert_same(
        &download_cell::<float8::F8E4M3>(&stream, &from),
        &fp8,
        "From<Tensor<f8e4m3>>",
    );
    println!("{cell:?}");
}

#[test]
fn gpu_cell_with_tensor_and_with_tensor_mut() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    let device = first(devices);
    let comm = one_rank(&device);
    let stream = device.new_stream().expect("stream");
    let data = f32s(5, 6);
    let cell = TensorCell::new(Tensor::from_host(&stream, &data, &[3, 2]).expect("tensor"));

    let (len, shape) = cell
        .with_tensor(|t: &Tensor<f32>| (t.len(), t.shape().to_vec()))
        .expect("with_tensor f32");
    assert_eq!((len, shape), (6, vec![3, 2]));
    let inside = cell
        .with_tensor(|t: &Tensor<f32>| download(&stream, t))
        .expect("with_tensor f32");
    assert_same(&inside, &data, "with_tensor");

    let wrong = cell.with_tensor(|t: &Tensor<f64>| t.len());
    assert!(
        matches!(
            wrong,
            Err(Error::WrongType {
                actual: DataType::Float32,
                requested: DataType::Float64
            })
        ),
        "{wrong:?}"
    );
    let wrong = cell.with_tensor_mut(|t: &mut Tensor<i8>| t.len());
    assert!(
        matches!(
            wrong,
            Err(Error::WrongType {
                actual: DataType::Float32,
                requested: DataType::Int8
            })
        ),
        "{wrong:?}"
    );

    let replaced = f32s(6, 6);
    cell.with_tensor_mut(|t: &mut Tensor<f32>| t.copy_from_host(&stream, &replaced))
        .expect("with_tensor_mut f32")
        .expect("copy_from_host");
    assert_same(
        &download_cell::<f32>(&stream, &cell),
        &replaced,
        "after with_tensor_mut",
    );

    // The typed tensor inside a cell goes to an operation directly.
    let status = cell
        .with_tensor_mut(|t: &mut Tensor<f32>| comm.all_reduce(t, ReduceOp::Max, &stream))
        .expect("with_tensor_mut f32");
    ok(status, "all_reduce on the tensor inside with_tensor_mut");
    let status = cell
        .with_tensor(|t: &Tensor<f32>| {
            let mut out = poisoned::<f32>(&stream, 6);
            let status = comm.all_reduce_into(t, &mut out, ReduceOp::Sum, &stream);
            (status, download(&stream, &out))
        })
        .expect("with_tensor f32");
    ok(
        status.0,
        "all_reduce_into from the tensor inside with_tensor",
    );
    assert_same(&status.1, &replaced, "all_reduce_into from with_tensor");
}

#[test]
fn gpu_cell_to_vec_and_its_type_check() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    let device = first(devices);
    let stream = device.new_stream().expect("stream");
    let data = values::<u64>(7, 100);
    let cell = upload_cell(&stream, &data);
    assert_same(
        &cell.to_vec::<u64>(&stream).expect("to_vec u64"),
        &data,
        "to_vec",
    );
    let wrong = cell.to_vec::<i64>(&stream);
    assert!(
        matches!(
            wrong,
            Err(Error::WrongType {
                actual: DataType::Uint64,
                requested: DataType::Int64
            })
        ),
        "{wrong:?}"
    );
}

#[test]
fn gpu_cell_into_tensor_last_reference_shared_and_wrong_type() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    let device = first(devices);
    let stream = device.new_stream().expect("stream");
    let data = f32s(8, 12);
    let cell = TensorCell::new(Tensor::from_host(&stream, &data, &[4, 3]).expect("tensor"));

    // Shared: the cell comes back.
    let clone = cell.clone();
    let cell = cell
        .into_tensor::<f32>()
        .expect_err("a shared cell cannot give its tensor away");
    assert!(cell.same_cell(&clone));
    drop(clone);

    // Wrong type: the cell comes back, still usable.
    let cell = cell
        .into_tensor::<f64>()
        .expect_err("a cell of f32 is not a Tensor<f64>");
    assert_eq!(
        (cell.dtype(), cell.shape()),
        (DataType::Float32, &[4, 3][..])
    );
    assert_same(
        &download_cell::<f32>(&stream, &cell),
        &data,
        "after a refused into_tensor",
    );

    // Last reference and the right type: the tensor, shape and values intact.
    let tensor: Tensor<f32> = cell.into_tensor().expect("the last reference");
    assert_eq!(tensor.shape(), &[4, 3]);
    assert_same(&download(&stream, &tensor), &data, "into_tensor");

    // A strided cell gives back its whole storage.
    let strided = TensorCell::strided(tensor, &[6], &[2]).expect("strided");
    let storage: Tensor<f32> = strided.into_tensor().expect("the last reference");
    assert_eq!((storage.len(), storage.shape()), (12, &[4, 3][..]));
}

#[test]
fn gpu_cell_same_cell_is_identity_not_equality() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    let device = first(devices);
    let stream = device.new_stream().expect("stream");
    let data = f32s(9, 4);
    let a = upload_cell(&stream, &data);
    let b = upload_cell(&stream, &data);
    let a2 = a.clone();
    assert!(a.same_cell(&a));
    assert!(a.same_cell(&a2) && a2.same_cell(&a));
    assert!(!a.same_cell(&b), "equal contents, different cells");
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
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    let device = first(devices);
    let comm = one_rank(&device);
    let stream = device.new_stream().expect("stream");
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
        "all_gather_into_tensor",
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
        "reduce_scatter_tensor",
        "output",
    );
    assert_not_contiguous(
        comm.all_to_all_single(&plain, &strided, &stream),
        "all_to_all_single",
        "input",
    );
    assert_not_contiguous(comm.send(&strided, 0, &stream), "send", "tensor");
    assert_not_contiguous(comm.recv(&strided, 0, &stream), "recv", "tensor");

    // An every-other-element view is refused as well.
    let every_other =
        TensorCell::strided(upload(&stream, &f32s(11, 8)), &[4], &[2]).expect("strided");
    assert!(!every_other.is_contiguous());
    assert!(matches!(
        comm.all_reduce(&every_other, sum, &stream),
        Err(Error::NotContiguous { .. })
    ));

    // Nothing was written.
    assert_same(
        &download_cell::<f32>(&stream, &strided),
        &data,
        "the strided storage",
    );
    assert_same(
        &download_cell::<f32>(&stream, &plain),
        &data,
        "the plain cell",
    );
}

#[test]
fn gpu_cell_strided_but_contiguous_views_work() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    let device = first(devices);
    let comm = one_rank(&device);
    let stream = device.new_stream().expect("stream");
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
    assert_same(
        &download_cell::<f32>(&stream, &out),
        &data,
        "gathered from the view",
    );
}

#[test]
fn gpu_cell_strided_construction_errors() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    let device = first(devices);
    let stream = device.new_stream().expect("stream");
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
                "all_gather_into_tensor",
            );
            assert_aliased(
                comm.reduce_scatter_tensor(other, &cell, sum, &stream),
                "reduce_scatter_tensor",
            );
            assert_aliased(
                comm.all_to_all_single(other, &cell, &stream),
                "all_to_all_single",
            );
        }
        assert_same(
            &download_cell::<f32>(&stream, &cell),
            &data,
            "the aliased cell",
        );
        // The in-place forms take the one cell.
        ok(comm.all_reduce(&cell, sum, &stream), "all_reduce in place");
        assert_same(
            &download_cell::<f32>(&stream, &cell),
            &data,
            "all_reduce in place",
        );
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
            assert_same(
                &download_cell::<f32>(&stream, &cell),
                &data,
                "the aliased cell",
            );
            // A cell output with a typed input of the same data is fine.
            let source = upload(&stream, &data);
            ok(
                comm.all_gather(std::slice::from_ref(&cell), &source, &stream),
                "all_gather into the cell from a tensor",
            );
            assert_same(&download_cell::<f32>(&stream, &cell), &data, "gathered");
        },
    );
}

fn assert_send_sync<T: Send + Sync>() {}
fn assert_send<T: Send>() {}

#[test]
fn gpu_cell_shared_between_threads() {
    let Some(devices) = support::require_gpus(1) else {
        return;
    };
    assert_send_sync::<TensorCell>();
    assert_send::<Communicator>();
    let device: Device = first(devices);
    let stream = device.new_stream().expect("stream");
    let data = f32s(17, 4097);
    let cell = upload_cell(&stream, &data);

    // Several readers at once, each on its own stream.
    let readers: Vec<_> = (0..4)
        .map(|_| {
            let (cell, device) = (cell.clone(), device.clone());
            std::thread::spawn(move || {
                let stream = device.new_stream().expect("stream");
                cell.to_vec::<f32>(&stream)
                    .expect("to_vec on another thread")
            })
        })
        .collect();
    for reader in readers {
        assert_same(
            &reader.join().expect("reader"),
            &data,
            "read on another thread",
        );
    }

    // A writer on another thread; the change shows here.
    let replaced = f32s(18, 4097);
    {
        let (cell, device, replaced) = (cell.clone(), device.clone(), replaced.clone());
        std::thread::spawn(move || {
            let stream = device.new_stream().expect("stream");
            cell.with_tensor_mut(|t: &mut Tensor<f32>| t.copy_from_host(&stream, &replaced))
                .expect("typed access")
                .expect("copy");
            stream.synchronize().expect("synchronize");
        })
        .join()
        .expect("writer");
    }
    assert_same(
        &download_cell::<f32>(&stream, &cell),
        &replaced,
        "written on another thread",
    );

    // A communicator moved to another thread works on clones of cells
    // created here.
    let out = poisoned_cell::<f32>(&stream, 4097);
    {
        let (input, output, device) = (cell.clone(), out.clone(), device.clone());
        std::thread::spawn(move || {
            let comm = one_rank(&device);
            let stream = device.new_stream().expect("stream");
            ok(
                comm.all_reduce_into(&input, &output, ReduceOp::Sum, &stream),
                "all_reduce_into on another thread",
            );
            stream.synchronize().expect("synchronize");
        })
        .join()
        .expect("worker");
    }
    assert_same(
        &download_cell::<f32>(&stream, &out),
        &replaced,
        "reduced on another thread",
    );
}
