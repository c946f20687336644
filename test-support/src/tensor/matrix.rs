//! Every operation of the tensor communicator at world size 1, for one element type, on
//! typed buffers (`Tensor`, `CudaSlice`, `CudaView`, `CudaViewMut`) and on
//! `TensorCell`s, checked against the host: with one rank, sum, prod, max,
//! min and avg of one value are that value, a pre-multiplied sum is
//! `scalar * value`, and every data movement copies the input.
//!
//! Outputs start poisoned, so an element NCCL did not write shows up; after
//! an out-of-place operation the input must be unchanged.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};
use nccl_core::{Group, ReduceOp, Reduction, Status};
use nccl_tensor::{AllToAllMethod, Communicator, Error, Result, Tensor, TensorCell};

use super::{
    Elem, assert_cell_holds, assert_holds, assert_same, poison_values, poisoned, poisoned_cell,
    scaled, upload, upload_cell, values,
};

/// Panics unless `result` is `Ok(Status::Success)` (the communicators here
/// are blocking).
#[track_caller]
pub fn ok(result: Result<Status>, what: &str) {
    match result {
        Ok(Status::Success) => {}
        Ok(Status::InProgress) => panic!("{what}: InProgress from a blocking communicator"),
        Err(error) => panic!("{what}: {error}"),
    }
}

fn what<T: Elem>(len: usize, op: &str) -> String {
    format!("{} x{len}: {op}", T::NAME)
}

/// Whether the loaded NCCL knows `T`; if not, checks that an operation says
/// so and prints a note.
fn dtype_usable<T: Elem>(comm: &Communicator, stream: &Arc<CudaStream>) -> bool {
    let info = comm.info();
    if T::DATA_TYPE.min_version() <= info.nccl_version {
        return true;
    }
    let mut tensor = upload(stream, &values::<T>(0, 4));
    let refused = comm.broadcast(&mut tensor, 0, stream);
    assert!(
        matches!(refused, Err(Error::UnsupportedDataType { .. })),
        "{}: {refused:?}",
        T::NAME
    );
    println!(
        "NOTE: {} needs NCCL {}, the loaded one is {}: checked only that it is refused",
        T::NAME,
        T::DATA_TYPE.min_version(),
        info.nccl_version
    );
    false
}

/// Whether this GPU reduces `T` (fp8 reductions need compute capability
/// 9.0); if not, checks that a reduction says so and prints a note.
fn reductions_usable<T: Elem>(comm: &Communicator, stream: &Arc<CudaStream>) -> bool {
    let capability = comm.info().compute_capability;
    if !T::DATA_TYPE.is_fp8() || capability >= (9, 0) {
        return true;
    }
    let mut tensor = upload(stream, &values::<T>(0, 4));
    let refused = comm.all_reduce(&mut tensor, ReduceOp::Sum, stream);
    assert!(
        matches!(refused, Err(Error::UnsupportedReduction { .. })),
        "{}: {refused:?}",
        T::NAME
    );
    println!(
        "NOTE: {} reductions need compute capability 9.0, this GPU is {capability:?}: checked only that they are refused",
        T::NAME
    );
    false
}

/// Whether NCCL implements `reduction` on `T`: every built-in reduction and
/// pre-multiplied sums on every type, except avg and pre-multiplied sums on
/// the 8-bit floats (NCCL 2.28.3 on an H200 answers `ncclInvalidArgument`
/// to both; sum, prod, max and min work). `gpu_fp8_scaling_reductions_are_refused_as_unsupported`
/// checks how the communicator refuses those.
pub fn nccl_reduces<T: Elem>(reduction: Reduction<'_>) -> bool {
    let scaling = matches!(
        reduction,
        Reduction::Builtin(ReduceOp::Avg) | Reduction::PreMulSum(_)
    );
    !(T::DATA_TYPE.is_fp8() && scaling)
}

/// Runs an in-place operation on a `Tensor` of `input` and on a cell of
/// `input`, and checks both end up as `expected`.
fn in_place<T: Elem>(
    stream: &Arc<CudaStream>,
    input: &[T],
    expected: &[T],
    what: &str,
    typed: impl FnOnce(&mut Tensor<T>) -> Result<Status>,
    cell: impl FnOnce(&TensorCell) -> Result<Status>,
) {
    let mut tensor = upload(stream, input);
    let label = format!("{what} (in place, typed)");
    ok(typed(&mut tensor), &label);
    assert_holds(stream, &tensor, expected, &label);

    let tensor_cell = upload_cell(stream, input);
    let label = format!("{what} (in place, TensorCell)");
    ok(cell(&tensor_cell), &label);
    assert_cell_holds(stream, &tensor_cell, expected, &label);
}

/// Runs an out-of-place operation from `input` into a poisoned output of
/// `out_len` elements, typed and with cells, and checks the output is
/// `expected` and the input unchanged.
fn out_of_place<T: Elem>(
    stream: &Arc<CudaStream>,
    input: &[T],
    out_len: usize,
    expected: &[T],
    what: &str,
    typed: impl FnOnce(&Tensor<T>, &mut Tensor<T>) -> Result<Status>,
    cell: impl FnOnce(&TensorCell, &TensorCell) -> Result<Status>,
) {
    let source = upload(stream, input);
    let mut target = poisoned::<T>(stream, out_len);
    let label = format!("{what} (typed)");
    ok(typed(&source, &mut target), &label);
    assert_holds(stream, &target, expected, &label);
    assert_holds(
        stream,
        &source,
        input,
        &format!("{label}: the input afterwards"),
    );

    let source = upload_cell(stream, input);
    let target = poisoned_cell::<T>(stream, out_len);
    let label = format!("{what} (TensorCell)");
    ok(cell(&source, &target), &label);
    assert_cell_holds(stream, &target, expected, &label);
    assert_cell_holds(
        stream,
        &source,
        input,
        &format!("{label}: the input afterwards"),
    );
}

/// Every operation of the tensor communicator on `T` at each of `sizes` (elements; 0 is
/// the empty case), on typed buffers and cells. The communicator must have
/// one rank; its all-to-all method is left at `Auto`.
pub fn every_op<T: Elem>(comm: &mut Communicator, stream: &Arc<CudaStream>, sizes: &[usize]) {
    assert_eq!(comm.world_size(), 1, "the matrix is written for one rank");
    if !dtype_usable::<T>(comm, stream) {
        return;
    }
    for &len in sizes {
        if len == 0 {
            empty::<T>(comm, stream);
            continue;
        }
        let input = values::<T>(len as u64, len);
        data_movement(comm, stream, &input);
        all_to_all(comm, stream, &input);
        reductions(comm, stream, &input);
    }
}

/// broadcast, broadcast_into, the three list forms of all_gather,
/// all_gather_into_tensor, send + recv to itself in one group, barrier.
pub fn data_movement<T: Elem>(comm: &Communicator, stream: &Arc<CudaStream>, input: &[T]) {
    let len = input.len();
    in_place(
        stream,
        input,
        input,
        &what::<T>(len, "broadcast root 0 (CudaSlice)"),
        |t| comm.broadcast(&mut t.as_slice_mut(), 0, stream),
        |c| comm.broadcast(c, 0, stream),
    );
    out_of_place(
        stream,
        input,
        len,
        input,
        &what::<T>(len, "broadcast_into root 0 (CudaView -> CudaViewMut)"),
        |i, o| {
            comm.broadcast_into(
                &i.view(..).expect("view"),
                &mut o.view_mut(..).expect("view"),
                0,
                stream,
            )
        },
        |i, o| comm.broadcast_into(i, o, 0, stream),
    );
    out_of_place(
        stream,
        input,
        len,
        input,
        &what::<T>(len, "all_gather_into_tensor"),
        |i, o| comm.all_gather_into_tensor(o, i, stream),
        |i, o| comm.all_gather_into_tensor(o, i, stream),
    );
    out_of_place(
        stream,
        input,
        len,
        input,
        &what::<T>(len, "send + recv to itself in one Group"),
        |i, o| send_recv_self(comm, i, o, stream),
        |i, o| send_recv_self(comm, i, o, stream),
    );
    assert_eq!(nccl_core::group_depth(), 0, "the groups were closed");
    all_gather_lists(comm, stream, input);
    for round in 0..2 {
        ok(
            comm.barrier(stream),
            &what::<T>(len, &format!("barrier {round}")),
        );
    }
    stream
        .synchronize()
        .expect("synchronize after the barriers");
}

/// A send to this rank and the matching receive, in one group.
fn send_recv_self<I, O>(
    comm: &Communicator,
    input: I,
    output: O,
    stream: &Arc<CudaStream>,
) -> Result<Status>
where
    I: nccl_tensor::Input,
    O: nccl_tensor::Output,
{
    let group = Group::start()?;
    assert_eq!(nccl_core::group_depth(), 1);
    let me = comm.rank();
    let _ = comm.send(input, me, stream)?;
    let _ = comm.recv(output, me, stream)?;
    Ok(group.end()?)
}

/// all_gather into `&mut [CudaSlice]`, `&mut [Tensor]`, `&mut [CudaViewMut]`
/// and `&[TensorCell]`, from typed and cell inputs.
fn all_gather_lists<T: Elem>(comm: &Communicator, stream: &Arc<CudaStream>, input: &[T]) {
    let len = input.len();
    let source = upload(stream, input);
    let source_cell = upload_cell(stream, input);

    let label = what::<T>(len, "all_gather into [CudaSlice]");
    let mut slices: Vec<CudaSlice<T>> =
        vec![stream.clone_htod(&poison_values::<T>(len)).expect("upload")];
    ok(comm.all_gather(&mut slices[..], &source, stream), &label);
    assert_same(
        &stream.clone_dtoh(&slices[0]).expect("download"),
        input,
        &label,
    );

    let label = what::<T>(len, "all_gather into [Tensor]");
    let mut tensors = [poisoned::<T>(stream, len)];
    ok(comm.all_gather(&mut tensors[..], &source, stream), &label);
    assert_holds(stream, &tensors[0], input, &label);

    let label = what::<T>(len, "all_gather into [CudaViewMut] from a CudaView");
    let mut whole = poisoned::<T>(stream, len);
    {
        let mut views = [whole.view_mut(..).expect("view")];
        let source_view = source.view(..).expect("view");
        ok(
            comm.all_gather(&mut views[..], &source_view, stream),
            &label,
        );
    }
    assert_holds(stream, &whole, input, &label);

    let label = what::<T>(len, "all_gather into [TensorCell] from a TensorCell");
    let cells = [poisoned_cell::<T>(stream, len)];
    ok(comm.all_gather(&cells[..], &source_cell, stream), &label);
    assert_cell_holds(stream, &cells[0], input, &label);

    let label = what::<T>(len, "all_gather into [TensorCell] from a Tensor");
    let cells = [poisoned_cell::<T>(stream, len)];
    ok(comm.all_gather(&cells[..], &source, stream), &label);
    assert_cell_holds(stream, &cells[0], input, &label);

    let label = what::<T>(len, "all_gather: the inputs afterwards");
    assert_holds(stream, &source, input, &label);
    assert_cell_holds(stream, &source_cell, input, &label);
}

/// all_to_all_single with `ncclAlltoAll` (`Auto`, where the library has
/// it) and with grouped send/recv; leaves the method at `Auto`.
fn all_to_all<T: Elem>(comm: &mut Communicator, stream: &Arc<CudaStream>, input: &[T]) {
    let len = input.len();
    for method in [AllToAllMethod::Auto, AllToAllMethod::SendRecv] {
        comm.set_all_to_all_method(method);
        let comm = &*comm;
        out_of_place(
            stream,
            input,
            len,
            input,
            &what::<T>(len, &format!("all_to_all_single ({method:?})")),
            |i, o| comm.all_to_all_single(o, i, stream),
            |i, o| comm.all_to_all_single(o, i, stream),
        );
    }
    comm.set_all_to_all_method(AllToAllMethod::Auto);
}

/// Every reduction NCCL has for `T` (the five built-in ones and a
/// pre-multiplied sum by `T::PREMUL`, less those [`nccl_reduces`] excludes) through all_reduce (in place),
/// all_reduce_into, reduce (in place), reduce_into and
/// reduce_scatter_tensor.
pub fn reductions<T: Elem>(comm: &Communicator, stream: &Arc<CudaStream>, input: &[T]) {
    if !reductions_usable::<T>(comm, stream) {
        return;
    }
    let len = input.len();
    let pre_mul_sum = comm
        .pre_mul_sum::<T>(T::PREMUL)
        .unwrap_or_else(|e| panic!("{}: pre_mul_sum({}): {e}", T::NAME, T::PREMUL));
    let mut ops: Vec<(String, Reduction<'_>, f64)> = ReduceOp::ALL
        .iter()
        .map(|&op| (op.name().to_string(), Reduction::from(op), 1.0))
        .collect();
    ops.push((
        format!("premulsum({})", T::PREMUL),
        Reduction::from(&pre_mul_sum),
        T::PREMUL,
    ));
    for (name, op, factor) in &ops {
        if !nccl_reduces::<T>(*op) {
            println!(
                "NOTE: {} {name}: not checked here, NCCL has no such reduction for this type",
                T::NAME
            );
            continue;
        }
        let (op, expected) = (*op, scaled(input, *factor));
        in_place(
            stream,
            input,
            &expected,
            &what::<T>(len, &format!("all_reduce {name}")),
            |t| comm.all_reduce(t, op, stream),
            |c| comm.all_reduce(c, op, stream),
        );
        out_of_place(
            stream,
            input,
            len,
            &expected,
            &what::<T>(len, &format!("all_reduce_into {name}")),
            |i, o| comm.all_reduce_into(i, o, op, stream),
            |i, o| comm.all_reduce_into(i, o, op, stream),
        );
        in_place(
            stream,
            input,
            &expected,
            &what::<T>(len, &format!("reduce {name} root 0")),
            |t| comm.reduce(t, op, 0, stream),
            |c| comm.reduce(c, op, 0, stream),
        );
        out_of_place(
            stream,
            input,
            len,
            &expected,
            &what::<T>(
                len,
                &format!("reduce_into {name} root 0 (CudaView -> CudaSlice)"),
            ),
            |i, o| {
                comm.reduce_into(
                    &i.view(..).expect("view"),
                    &mut o.as_slice_mut(),
                    op,
                    0,
                    stream,
                )
            },
            |i, o| comm.reduce_into(i, o, op, 0, stream),
        );
        out_of_place(
            stream,
            input,
            len,
            &expected,
            &what::<T>(len, &format!("reduce_scatter_tensor {name}")),
            |i, o| comm.reduce_scatter_tensor(o, i, op, stream),
            |i, o| comm.reduce_scatter_tensor(o, i, op, stream),
        );
    }
}

/// 64 MiB of `T`: all_reduce sum in place and out of place, typed.
pub fn large<T: Elem>(comm: &Communicator, stream: &Arc<CudaStream>) {
    if !dtype_usable::<T>(comm, stream) || !reductions_usable::<T>(comm, stream) {
        return;
    }
    let len = (64 << 20) / size_of::<T>();
    let input = values::<T>(64, len);
    let label = what::<T>(len, "all_reduce sum (in place, 64 MiB)");
    let mut tensor = upload(stream, &input);
    ok(comm.all_reduce(&mut tensor, ReduceOp::Sum, stream), &label);
    assert_holds(stream, &tensor, &input, &label);
    drop(tensor);

    let label = what::<T>(len, "all_reduce_into sum (64 MiB)");
    let source = upload(stream, &input);
    let mut target = poisoned::<T>(stream, len);
    ok(
        comm.all_reduce_into(&source, &mut target, ReduceOp::Sum, stream),
        &label,
    );
    assert_holds(stream, &target, &input, &label);
}

/// Every operation on empty buffers (zero-length views of one-element
/// tensors, and zero-element cells over one-element storage), at any world
/// size (the all_gather lists have one empty output per rank): each returns
/// `Status::Success` and touches nothing.
pub fn empty<T: Elem>(comm: &Communicator, stream: &Arc<CudaStream>) {
    let kept = [T::from_f64(3.0)];
    let poison = poison_values::<T>(1);
    let reduce = reductions_usable::<T>(comm, stream);
    let pre_mul_sum = reduce.then(|| comm.pre_mul_sum::<T>(T::PREMUL).expect("pre_mul_sum"));
    let ops: Vec<Reduction<'_>> = match &pre_mul_sum {
        Some(pre_mul_sum) => vec![
            ReduceOp::Sum.into(),
            ReduceOp::Avg.into(),
            pre_mul_sum.into(),
        ],
        None => Vec::new(),
    };
    let ops: Vec<Reduction<'_>> = ops
        .into_iter()
        .filter(|&op| nccl_reduces::<T>(op))
        .collect();
    let label = |op: &str| what::<T>(0, op);

    // Typed: zero-length views.
    let input_storage = upload(stream, &kept);
    let mut output_storage = upload(stream, &poison);
    {
        let input = input_storage.view(0..0).expect("empty view");
        let mut output = output_storage.view_mut(0..0).expect("empty view");
        for &op in &ops {
            let name = op.name();
            ok(
                comm.all_reduce(&mut output, op, stream),
                &label(&format!("all_reduce {name}")),
            );
            ok(
                comm.all_reduce_into(&input, &mut output, op, stream),
                &label(&format!("all_reduce_into {name}")),
            );
            ok(
                comm.reduce(&mut output, op, 0, stream),
                &label(&format!("reduce {name}")),
            );
            ok(
                comm.reduce_into(&input, &mut output, op, 0, stream),
                &label(&format!("reduce_into {name}")),
            );
            ok(
                comm.reduce_scatter_tensor(&mut output, &input, op, stream),
                &label(&format!("reduce_scatter_tensor {name}")),
            );
        }
        ok(comm.broadcast(&mut output, 0, stream), &label("broadcast"));
        ok(
            comm.broadcast_into(&input, &mut output, 0, stream),
            &label("broadcast_into"),
        );
        ok(
            comm.all_gather_into_tensor(&mut output, &input, stream),
            &label("all_gather_into_tensor"),
        );
        ok(
            comm.all_to_all_single(&mut output, &input, stream),
            &label("all_to_all_single"),
        );
        ok(
            send_recv_self(comm, &input, &mut output, stream),
            &label("send + recv in a group"),
        );
        let mut others: Vec<Tensor<T>> = (1..comm.world_size())
            .map(|_| upload(stream, &poison))
            .collect();
        let mut list = vec![output];
        for other in &mut others {
            list.push(other.view_mut(0..0).expect("empty view"));
        }
        ok(
            comm.all_gather(&mut list[..], &input, stream),
            &label("all_gather"),
        );
    }
    assert_holds(stream, &input_storage, &kept, &label("typed input storage"));
    assert_holds(
        stream,
        &output_storage,
        &poison,
        &label("typed output storage"),
    );

    // Cells: shape [0] over one element of storage.
    let input = TensorCell::strided(upload(stream, &kept), &[0], &[1]).expect("empty cell");
    let output = TensorCell::strided(upload(stream, &poison), &[0], &[1]).expect("empty cell");
    assert!(input.is_empty() && output.is_empty() && output.is_contiguous());
    for &op in &ops {
        let name = op.name();
        ok(
            comm.all_reduce(&output, op, stream),
            &label(&format!("cell all_reduce {name}")),
        );
        ok(
            comm.all_reduce_into(&input, &output, op, stream),
            &label(&format!("cell all_reduce_into {name}")),
        );
        ok(
            comm.reduce(&output, op, 0, stream),
            &label(&format!("cell reduce {name}")),
        );
        ok(
            comm.reduce_into(&input, &output, op, 0, stream),
            &label(&format!("cell reduce_into {name}")),
        );
        ok(
            comm.reduce_scatter_tensor(&output, &input, op, stream),
            &label(&format!("cell reduce_scatter_tensor {name}")),
        );
    }
    ok(comm.broadcast(&output, 0, stream), &label("cell broadcast"));
    ok(
        comm.broadcast_into(&input, &output, 0, stream),
        &label("cell broadcast_into"),
    );
    ok(
        comm.all_gather_into_tensor(&output, &input, stream),
        &label("cell all_gather_into_tensor"),
    );
    ok(
        comm.all_to_all_single(&output, &input, stream),
        &label("cell all_to_all_single"),
    );
    ok(
        send_recv_self(comm, &input, &output, stream),
        &label("cell send + recv in a group"),
    );
    let mut list = vec![output.clone()];
    for _ in 1..comm.world_size() {
        list.push(TensorCell::strided(upload(stream, &poison), &[0], &[1]).expect("empty cell"));
    }
    ok(
        comm.all_gather(&list[..], &input, stream),
        &label("cell all_gather"),
    );
    // `to_vec` copies the whole storage (one element) of these views.
    assert_cell_holds(stream, &input, &kept, &label("cell input storage"));
    assert_cell_holds(stream, &output, &poison, &label("cell output storage"));
}
