//! Borrowed cudarc memory in the group's operations, as far as the CPU
//! can check it: the types. A `CudaSlice` needs a CUDA context, so every
//! operation on one, and every refusal of bad input it gets (a length, a
//! device, a send to itself, a capture), is in `gpu/ranks_borrowed.rs`;
//! here, what the compiler and the types decide: the operations take
//! the borrow, their works hold it for exactly its lifetime and can be
//! sent to another thread, the out-of-place forms take a shared borrow
//! as input, `?` takes a refusal into a `GroupError`, and a capture's
//! refusal names the reason and the way out. (That the memory cannot be
//! used while its work lives, and that a graph cannot keep a borrow, are
//! `compile_fail` doctests of `Work` and `GraphCapture::end`.)

use std::any::TypeId;
use std::sync::Arc;

use half::bf16;
use nccl_core::ReduceOp;
use nccl_core::cudarc::driver::{CudaSlice, CudaStream, CudaView, CudaViewMut};
use nccl_group::{
    ErrorKind, GroupBuffers, GroupError, GroupTensor, OpResult, P2POp, ProcessGroup, Uncapturable,
    Work,
};
use nccl_tensor::{AnyTensor, Tensor};

/// A slice the way an engine lends it.
type Lent<'a> = &'a mut CudaSlice<bf16>;
/// An out-of-place pair of lent slices: the output, then the input.
type LentPair<'a> = (&'a mut CudaSlice<bf16>, &'a CudaSlice<bf16>);

/// An all_reduce of a lent slice, its refusal taken by `?`: the work
/// holds the borrow for `'a`, no longer.
fn lend<'a>(
    group: &ProcessGroup,
    grads: Lent<'a>,
    stream: &Arc<CudaStream>,
) -> Result<Work<Lent<'a>>, GroupError> {
    Ok(group.all_reduce(grads, ReduceOp::Sum, stream)?)
}

/// Every one-device operation on lent slices, each waited for before the
/// next borrows the memory again (compiled here, run on a GPU by
/// `gpu/ranks_borrowed.rs`).
fn every_operation(
    group: &ProcessGroup,
    a: Lent<'_>,
    b: Lent<'_>,
    stream: &Arc<CudaStream>,
) -> nccl_group::Result<()> {
    group.all_reduce(&mut *a, ReduceOp::Avg, stream)?.wait()?;
    group.broadcast(&mut *a, 0, stream)?.wait()?;
    group.reduce(&mut *a, ReduceOp::Max, 0, stream)?.wait()?;
    group.all_gather_into_tensor(&mut *b, &*a, stream)?.wait()?;
    group
        .reduce_scatter_tensor(&mut *a, &*b, ReduceOp::Sum, stream)?
        .wait()?;
    group.all_to_all_single(&mut *b, &*a, stream)?.wait()?;
    group.gather(&mut *b, &*a, 0, stream)?.wait()?;
    group.scatter(&mut *a, &*b, 0, stream)?.wait()?;
    group.send(&mut *a, 1, stream)?.wait()?;
    group.recv(&mut *a, 1, stream)?.wait()?;
    // A part of a slice, as a view.
    group
        .all_reduce(b.slice_mut(..1), ReduceOp::Sum, stream)?
        .wait()?;
    group
        .all_gather_into_tensor(b.slice_mut(..), a.slice(..), stream)?
        .wait()?;
    // Several in one NCCL group.
    let mut batch = group.coalesced::<Lent<'_>>();
    batch.all_reduce(&mut *a, ReduceOp::Sum);
    batch.all_reduce(&mut *b, ReduceOp::Sum);
    batch.issue(stream)?.wait()?;
    let ring = vec![P2POp::send(&mut *a, 0), P2POp::recv(&mut *b, 0)];
    group.batch_isend_irecv(ring, stream)?.wait()?;
    Ok(())
}

/// The `TypeId`s of two types, for an equality that shows both.
fn same<A: 'static, B: 'static>() -> bool {
    TypeId::of::<A>() == TypeId::of::<B>()
}

/// [`lend`] for a borrow of any lifetime.
type Lending = for<'a> fn(&ProcessGroup, Lent<'a>, &Arc<CudaStream>) -> LentWork<'a>;
/// What [`lend`] returns.
type LentWork<'a> = Result<Work<Lent<'a>>, GroupError>;
/// [`every_operation`] for borrows of any lifetimes.
type Operations =
    for<'a, 'b> fn(&ProcessGroup, Lent<'a>, Lent<'b>, &Arc<CudaStream>) -> nccl_group::Result<()>;

#[test]
fn every_one_device_operation_takes_lent_slices_and_views() {
    // The check is the compiler's: the functions above compile, and as
    // the higher-ranked pointers named here, a work's borrow is the
    // caller's, whatever its lifetime.
    let _: Lending = lend;
    let _: Operations = every_operation;
}

#[test]
fn out_of_place_forms_take_a_shared_borrow_next_to_a_lent_output() {
    type Input<B> = <B as GroupTensor>::Input;
    assert!(same::<Input<Lent<'static>>, &'static CudaSlice<bf16>>());
    assert!(same::<
        Input<CudaViewMut<'static, f32>>,
        CudaView<'static, f32>,
    >());
    // Owned tensors keep taking their own type.
    assert!(same::<Input<Tensor<f32>>, Tensor<f32>>());
    assert!(same::<Input<AnyTensor>, AnyTensor>());
}

#[test]
fn lent_buffers_are_group_buffers_and_their_works_can_change_threads() {
    fn group_buffers<B: GroupBuffers>() {}
    fn send<T: Send>() {}
    group_buffers::<Lent<'static>>();
    group_buffers::<LentPair<'static>>();
    group_buffers::<CudaViewMut<'static, i32>>();
    group_buffers::<(CudaViewMut<'static, i32>, CudaView<'static, i32>)>();
    send::<Work<Lent<'static>>>();
    send::<Work<LentPair<'static>>>();
    send::<Work<Vec<Lent<'static>>>>();
    send::<Work<CudaViewMut<'static, u8>>>();
    send::<OpResult<LentPair<'static>>>();
}

#[test]
fn a_capture_refuses_lent_memory_and_says_what_to_do() {
    let error = GroupError::Capture {
        op: "all_reduce",
        reason: Uncapturable::BorrowedMemory,
    };
    assert_eq!(error.kind(), ErrorKind::Unsupported);
    let text = error.to_string();
    for part in [
        "all_reduce in a CUDA graph capture",
        "borrowed",
        "after the borrow has ended",
        "capture owned tensors",
        "Tensor::from_slice",
    ] {
        assert!(text.contains(part), "{part:?} missing from: {text}");
    }
}
