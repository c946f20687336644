//! [`Ownership`]: whether an operation's refusal hands its buffers back
//! ([`Owned`]: a boxed [`OpError`] with them) or not ([`Borrowed`]: a plain
//! [`GroupError`], since the caller still owns borrowed memory), and
//! [`OpBuffers`], the buffers that name theirs.

use crate::engine::work_buffers::WorkBuffers;
use crate::error::{GroupError, OpError};

pub(crate) mod sealed {
    /// Seals [`super::Ownership`] and [`super::OpBuffers`]: the group
    /// knows every kind of buffer it takes (the tensor types name theirs
    /// in [`crate::engine::buffers`]).
    pub trait Sealed {}
}

/// What an operation's refusal (the `Err` of [`OpResult`](crate::OpResult))
/// holds, decided by its buffers' [`OpBuffers::Ownership`].
///
/// Sealed: [`Owned`] or [`Borrowed`].
pub trait Ownership: sealed::Sealed {
    /// The refusal of an operation on buffers of type `B`.
    ///
    /// Either way it is an error that `?` takes into a [`GroupError`].
    type Refusal<B>: std::error::Error + Into<GroupError>;

    /// The refusal of an operation that failed with `error` before NCCL
    /// saw `buffers`.
    fn refuse<B>(error: GroupError, buffers: B) -> Self::Refusal<B>;
}

/// Buffers the [`Work`](crate::Work) owns (tensors, registered tensors,
/// run-time typed tensors): a refusal hands them back, boxed in an
/// [`OpError`] (failures are rare, and the success path stays small).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owned {}

/// Memory borrowed from the caller (`&mut CudaSlice<T>`, `CudaViewMut<T>`
/// and their pairs): a refusal is a plain [`GroupError`], so `?` works in a
/// function returning `anyhow::Result` or `Box<dyn Error>`; the caller
/// still owns the memory, untouched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Borrowed {}

impl sealed::Sealed for Owned {}
impl sealed::Sealed for Borrowed {}

impl Ownership for Owned {
    type Refusal<B> = Box<OpError<B>>;

    fn refuse<B>(error: GroupError, buffers: B) -> Self::Refusal<B> {
        Box::new(OpError { error, buffers })
    }
}

impl Ownership for Borrowed {
    type Refusal<B> = GroupError;

    fn refuse<B>(error: GroupError, _buffers: B) -> Self::Refusal<B> {
        error
    }
}

/// Buffers an operation's result is typed by: their [`Ownership`] decides
/// what its refusal holds.
///
/// A tensor names its own; an `(output, input)` pair its output's; a list (one
/// part per local device, or a batch's) its parts'. Sealed.
pub trait OpBuffers: WorkBuffers + sealed::Sealed {
    /// [`Owned`] or [`Borrowed`].
    type Ownership: Ownership;
}

impl<Output: OpBuffers, Input: WorkBuffers> sealed::Sealed for (Output, Input) {}
impl<Output: OpBuffers, Input: WorkBuffers> OpBuffers for (Output, Input) {
    type Ownership = Output::Ownership;
}

impl<B: OpBuffers> sealed::Sealed for Vec<B> {}
impl<B: OpBuffers> OpBuffers for Vec<B> {
    type Ownership = B::Ownership;
}

/// No buffers (a barrier's work, or [`ProcessGroup::custom`]'s without
/// any): nothing borrowed, so owned.
///
/// [`ProcessGroup::custom`]: crate::ProcessGroup::custom
impl sealed::Sealed for () {}
impl OpBuffers for () {
    type Ownership = Owned;
}
