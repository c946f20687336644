//! Borrowed cudarc memory in the group's operations, as far as the CPU
//! can check it: the types. A `CudaSlice` needs a CUDA context, so every
//! operation on one, and every refusal of bad input it gets (a length, a
//! device, a send to itself, a capture), is in `gpu/ranks_borrowed.rs`;
//! here, what the compiler and the types decide: the operations take
//! the borrow, their works hold it for exactly its lifetime and can be
//! sent to another thread, the out-of-place forms take a shared borrow
//! as input, a refusal is a plain `GroupError` (owned buffers' a boxed
//! `OpError` with them), so `?` takes either into a `Box<dyn Error>` or
//! an `anyhow::Error` whatever the borrow's lifetime, and a capture's
//! refusal names the reason and the way out. (That the memory cannot be
//! used while its work lives, and that a graph cannot keep a borrow, are
//! `compile_fail` doctests of `Work` and `GraphCapture::end`.)

use std::any::TypeId;
use std::sync::Arc;

use half::bf16;
use nccl_core::ReduceOp;
use nccl_core::cudarc::driver::{CudaSlice, CudaStream, CudaView, CudaViewMut};
use nccl_group::{
    Borrowed, ErrorKind, GroupBuffers, GroupError, GroupRegistered, GroupTensor, OpBuffers,
    OpError, OpResult, Owned, Ownership, P2POp, ProcessGroup, Refusal, Uncapturable, Work,
};
use nccl_tensor::{AnyTensor, Tensor};

/// A slice the way an engine lends it.
type Lent<'a> = &'a mut CudaSlice<bf16>;
/// An out-of-place pair of lent slices: the output, then the input.
type LentPair<'a> = (&'a mut CudaSlice<bf16>, &'a CudaSlice<bf16>);

/// An all_reduce of a lent slice, its result as it comes: the refusal is
/// the `GroupError` itself, and the work holds the borrow for `'a`, no
/// longer.
fn lend<'a>(
    group: &ProcessGroup,
    grads: Lent<'a>,
    stream: &Arc<CudaStream>,
) -> Result<Work<Lent<'a>>, GroupError> {
    group.all_reduce(grads, ReduceOp::Sum, stream)
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

/// [`every_operation`] with views of the slices, `?` taking each refusal
/// into a `Box<dyn Error + Send + Sync>` (what `anyhow::Error` takes):
/// the refusal holds no borrow, so nothing of `'a` escapes.
fn views_into_any_error<'a>(
    group: &ProcessGroup,
    a: CudaViewMut<'a, f32>,
    b: &'a mut CudaSlice<f32>,
    stream: &Arc<CudaStream>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let a = group.all_reduce(a, ReduceOp::Avg, stream)?.wait()?;
    group
        .all_gather_into_tensor(b.slice_mut(..), a.slice(..), stream)?
        .wait()?;
    let mut batch = group.coalesced::<CudaViewMut<'_, f32>>();
    batch.all_reduce(b.slice_mut(..1), ReduceOp::Sum);
    batch.issue(stream)?.wait()?;
    Ok(())
}

/// An owned tensor's operation, `?` taking its refusal (a boxed `OpError`
/// with the tensor) into a `Box<dyn Error + Send + Sync>`.
fn owned_into_any_error(
    group: &ProcessGroup,
    tensor: Tensor<f32>,
    stream: &Arc<CudaStream>,
) -> Result<Tensor<f32>, Box<dyn std::error::Error + Send + Sync>> {
    Ok(group.all_reduce(tensor, ReduceOp::Sum, stream)?.wait()?)
}

/// [`views_into_any_error`] for borrows of any lifetime.
type IntoAnyError = for<'a> fn(
    &ProcessGroup,
    CudaViewMut<'a, f32>,
    &'a mut CudaSlice<f32>,
    &Arc<CudaStream>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>>;

#[test]
fn refusals_of_borrowed_memory_go_into_any_error_with_question_mark() {
    // The compiler's check, as above: both functions compile, the first
    // for borrows of any lifetime.
    let _: IntoAnyError = views_into_any_error;
    let _ = owned_into_any_error;
}

#[test]
fn borrowed_memory_is_refused_with_a_plain_error_and_owned_buffers_with_theirs() {
    // Borrowed memory, its pairs and lists: a `GroupError`.
    assert!(same::<Refusal<Lent<'static>>, GroupError>());
    assert!(same::<Refusal<LentPair<'static>>, GroupError>());
    assert!(same::<Refusal<CudaViewMut<'static, f32>>, GroupError>());
    assert!(same::<
        Refusal<(CudaViewMut<'static, f32>, CudaView<'static, f32>)>,
        GroupError,
    >());
    assert!(same::<Refusal<Vec<Lent<'static>>>, GroupError>());
    // Owned buffers, their pairs and lists: a boxed `OpError` with them.
    assert!(same::<Refusal<Tensor<f32>>, Box<OpError<Tensor<f32>>>>());
    assert!(same::<
        Refusal<GroupRegistered<Tensor<bf16>>>,
        Box<OpError<GroupRegistered<Tensor<bf16>>>>,
    >());
    assert!(same::<Refusal<AnyTensor>, Box<OpError<AnyTensor>>>());
    type Pairs = Vec<(Tensor<f32>, Tensor<f32>)>;
    assert!(same::<Refusal<Pairs>, Box<OpError<Pairs>>>());
    type Lists = (Vec<Tensor<f32>>, Vec<Tensor<f32>>);
    assert!(same::<Refusal<Lists>, Box<OpError<Lists>>>());
    // Each names its ownership.
    fn ownership<B: OpBuffers>() -> TypeId
    where
        B::Ownership: 'static,
    {
        TypeId::of::<B::Ownership>()
    }
    assert_eq!(ownership::<Lent<'static>>(), TypeId::of::<Borrowed>());
    assert_eq!(
        ownership::<(Tensor<f32>, Tensor<f32>)>(),
        TypeId::of::<Owned>()
    );
}

#[test]
fn a_refusal_keeps_the_error_and_hands_back_owned_buffers_only() {
    let error = || GroupError::InvalidArgument {
        argument: "root",
        expected: "a member of the group".into(),
        given: "global rank 7".into(),
    };
    let plain: GroupError = Borrowed::refuse(error(), vec![1.0_f32; 3]);
    assert_eq!(plain.kind(), ErrorKind::InvalidArgument);
    assert_eq!(plain.to_string(), error().to_string());

    let boxed: Box<OpError<Vec<f32>>> = Owned::refuse(error(), vec![1.0_f32; 3]);
    assert_eq!(boxed.kind(), ErrorKind::InvalidArgument);
    assert_eq!(boxed.to_string(), error().to_string());
    assert_eq!(boxed.buffers, vec![1.0_f32; 3]);
    // `?`'s conversion, as a generic caller makes it.
    let converted: GroupError = boxed.into();
    assert_eq!(converted.to_string(), error().to_string());
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
