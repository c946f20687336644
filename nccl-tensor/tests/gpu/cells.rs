//! `TensorCell` on one GPU: construction and typed access, conversions back
//! to `Tensor`, identity, and cells shared between threads (strided and
//! aliased cells are in `gpu/cells_strided.rs`).

use std::sync::Arc;

use nccl_core::{CudaStream, DataType, Device, ReduceOp};
use nccl_tensor::{Communicator, Error, Tensor, TensorCell};
use nccl_test_support as support;
use nccl_test_support::tensor::matrix::ok;
use nccl_test_support::tensor::{
    Elem, assert_cell_holds, assert_holds, assert_same, download, first, one_rank,
    one_rank_on_first_gpu, poisoned, poisoned_cell, stream_on_first_gpu, upload, upload_cell,
    values,
};
fn f32s(seed: u64, len: usize) -> Vec<f32> {
    values::<f32>(seed, len)
}

/// A `Tensor<T>` of `len` values becomes a cell of `T`'s data type and
/// shape `[len]` that holds the same values.
fn from_tensor<T: Elem>(stream: &Arc<CudaStream>, seed: u64, len: usize) {
    let data = values::<T>(seed, len);
    let cell = TensorCell::from(upload(stream, &data));
    let what = format!("From<Tensor<{}>>", T::NAME);
    assert_eq!(
        (cell.dtype(), cell.shape(), cell.len()),
        (T::DATA_TYPE, &[len][..], len),
        "{what}"
    );
    assert_cell_holds(stream, &cell, &data, &what);
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
    assert_cell_holds(&stream, &cell, &data, "TensorCell::new");

    from_tensor::<i32>(&stream, 2, 5);
    from_tensor::<half::bf16>(&stream, 3, 7);
    from_tensor::<float8::F8E4M3>(&stream, 4, 9);
    println!("{cell:?}");
}

#[test]
fn gpu_cell_with_tensor_and_with_tensor_mut() {
    let Some((comm, stream)) = one_rank_on_first_gpu() else {
        return;
    };
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
    assert_cell_holds(&stream, &cell, &replaced, "after with_tensor_mut");

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
    let Some(stream) = stream_on_first_gpu() else {
        return;
    };
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
    let Some(stream) = stream_on_first_gpu() else {
        return;
    };
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
    assert_cell_holds(&stream, &cell, &data, "after a refused into_tensor");

    // Last reference and the right type: the tensor, shape and values intact.
    let tensor: Tensor<f32> = cell.into_tensor().expect("the last reference");
    assert_eq!(tensor.shape(), &[4, 3]);
    assert_holds(&stream, &tensor, &data, "into_tensor");

    // A strided cell gives back its whole storage.
    let strided = TensorCell::strided(tensor, &[6], &[2]).expect("strided");
    let storage: Tensor<f32> = strided.into_tensor().expect("the last reference");
    assert_eq!((storage.len(), storage.shape()), (12, &[4, 3][..]));
}

#[test]
fn gpu_cell_same_cell_is_identity_not_equality() {
    let Some(stream) = stream_on_first_gpu() else {
        return;
    };
    let data = f32s(9, 4);
    let a = upload_cell(&stream, &data);
    let b = upload_cell(&stream, &data);
    let a2 = a.clone();
    assert!(a.same_cell(&a));
    assert!(a.same_cell(&a2) && a2.same_cell(&a));
    assert!(!a.same_cell(&b), "equal contents, different cells");
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
    assert_cell_holds(&stream, &cell, &replaced, "written on another thread");

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
    assert_cell_holds(&stream, &out, &replaced, "reduced on another thread");
}

/// `AnyTensor::into_typed` (and `try_from`): the tensor when the type
/// matches; otherwise an error naming both types that gives the tensor
/// back and converts into `Error::WrongType` for `?`.
#[test]
fn gpu_any_tensor_into_typed_names_both_types_and_gives_the_tensor_back() {
    let Some(stream) = stream_on_first_gpu() else {
        return;
    };
    let data = f32s(11, 8);
    let any = nccl_tensor::AnyTensor::from(upload(&stream, &data));

    let refused = any.into_typed::<half::bf16>().expect_err("f32, not bf16");
    assert_eq!(
        (refused.held(), refused.requested()),
        (DataType::Float32, DataType::Bfloat16)
    );
    assert_eq!(refused.to_string(), "the tensor holds float, not bfloat16");
    assert!(
        format!("{refused:?}").starts_with("the tensor holds float, not bfloat16"),
        "{refused:?}"
    );
    let any = refused.into_tensor();
    let typed = Tensor::<f32>::try_from(any).expect("the type it was made with");
    assert_holds(&stream, &typed, &data, "into_typed gave it back");

    let question_mark = || -> nccl_tensor::Result<Tensor<i64>> {
        Ok(nccl_tensor::AnyTensor::from(typed).into_typed::<i64>()?)
    };
    let error = question_mark().expect_err("f32, not i64");
    assert!(
        matches!(
            error,
            Error::WrongType {
                actual: DataType::Float32,
                requested: DataType::Int64
            }
        ),
        "{error}"
    );
}
