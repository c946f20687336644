//! [`GroupBuffers`]: the buffers one operation takes on one device: owned
//! (tensors, registered tensors and run-time typed tensors, which the
//! [`Work`](crate::Work) owns) or borrowed from the caller (cudarc's
//! `&mut CudaSlice` and `CudaViewMut`, which the work borrows), alone or
//! as `(output, input)` pairs.

use std::borrow::{Borrow, BorrowMut};

use cudarc::driver::{CudaSlice, CudaView, CudaViewMut};
use nccl_core::DataType;
use nccl_tensor::{
    AnyTensor, BatchOperands, NcclType, Operands, Pair, Single, Tensor, TypedBuffer,
};

use crate::engine::ownership::{self, Borrowed, OpBuffers, Owned};
use crate::engine::register::GroupRegistered;
use crate::engine::work_buffers::{Boxer, Keep, boxed};

mod sealed {
    use crate::engine::work_buffers::Keep;

    /// What the group does with the buffers that depends on whether they
    /// are owned: a captured work's owned buffers, dropped unwaited, are
    /// boxed to live as long as the graph (`Some`); borrowed ones (`None`)
    /// are never captured, and the caller's stream waits for their work
    /// however it ends.
    pub trait Sealed: Sized {
        /// How a captured work keeps these buffers.
        const KEEP: Keep<Self>;
        /// How a captured work keeps a batch of them.
        const KEEP_ALL: Keep<Vec<Self>>;
    }
}

/// How a captured work keeps buffers of type `B` (`None`: borrowed, never
/// captured).
pub(crate) fn keep<B: GroupBuffers>() -> Keep<B> {
    <B as sealed::Sealed>::KEEP
}

/// [`keep`] for a batch of them.
pub(crate) fn keep_all<B: GroupBuffers>() -> Keep<Vec<B>> {
    <B as sealed::Sealed>::KEEP_ALL
}

/// One device's buffers of an operation: a tensor (in place, or the one
/// buffer of a send or receive) or an `(output, input)` pair.
///
/// * Owned, which the [`Work`](crate::Work) owns and hands back: a
///   [`Tensor`] of one element type, a [`GroupRegistered`] tensor, or
///   [`AnyTensor`]s, whose type is known at run time (to mix data types
///   in one [`Coalesced`](crate::Coalesced) batch).
/// * Borrowed from the caller, memory a framework owns: `&mut
///   CudaSlice<T>` (pairs `(&mut CudaSlice<T>, &CudaSlice<T>)`) and
///   `CudaViewMut<T>` (pairs `(CudaViewMut<T>, CudaView<T>)`). The work
///   holds the borrow, so the memory cannot be touched until it is
///   waited for or dropped; see [`ProcessGroup`](crate::ProcessGroup)'s
///   "Borrowed memory" for the rules.
///
/// Sealed.
pub trait GroupBuffers: OpBuffers + sealed::Sealed {
    /// The borrowed form nccl-tensor plans.
    type Operands<'a>: Operands + Into<BatchOperands<'a>>
    where
        Self: 'a;
    /// The element type (a pair's output's: the plan refuses an input of
    /// another).
    fn data_type(&self) -> DataType;
    /// The buffers as nccl-tensor's operands.
    fn operands(&mut self) -> Self::Operands<'_>;
    /// The device they are on (a pair's output's: the plan refuses an
    /// input elsewhere).
    fn device(&self) -> usize;
    /// Elements of the input, for the flight recorder.
    fn input_len(&self) -> usize;
    /// Elements of the output (the one buffer's, in place), for the
    /// flight recorder.
    fn output_len(&self) -> usize;
}

/// One tensor, as the group's named one-device operations take it (and,
/// as `(output, input)` pairs, their out-of-place forms): a [`Tensor`], a
/// [`GroupRegistered`] tensor, an [`AnyTensor`], or borrowed cudarc
/// memory (`&mut CudaSlice<T>`, `CudaViewMut<T>`).
///
/// Sealed.
pub trait GroupTensor: GroupBuffers {
    /// The input an out-of-place form takes next to this output: the same
    /// type for an owned tensor; a shared borrow for borrowed memory
    /// (`&CudaSlice<T>` next to `&mut CudaSlice<T>`, `CudaView<T>` next
    /// to `CudaViewMut<T>`).
    type Input;
}

/// The two ways a captured work keeps buffers ([`sealed::Sealed`]).
macro_rules! keep {
    (owned) => {
        const KEEP: Keep<Self> = Some(boxed::<Self> as Boxer<Self>);
        const KEEP_ALL: Keep<Vec<Self>> = Some(boxed::<Vec<Self>> as Boxer<Vec<Self>>);
    };
    (borrowed) => {
        const KEEP: Keep<Self> = None;
        const KEEP_ALL: Keep<Vec<Self>> = None;
    };
}

/// The [`Ownership`](crate::Ownership) of owned and of borrowed buffers:
/// what their refusal holds (pairs and lists take it from the tensor
/// type, in [`crate::engine::ownership`]).
macro_rules! ownership {
    (owned) => {
        Owned
    };
    (borrowed) => {
        Borrowed
    };
}

/// [`GroupBuffers`] and [`GroupTensor`] for a tensor type and for
/// `(output, input)` pairs of it: `$tensor` (and its pairs' `$input`), as
/// owned or borrowed buffers, reaching nccl-tensor's `$buffer` (and
/// `$read`) through [`BorrowMut`] (and [`Borrow`]): itself, or what a
/// `&mut` points to.
macro_rules! group_buffers {
    ($(
        $kind:ident [$($generics:tt)*] $tensor:ty, $input:ty => $buffer:ty, $read:ty;
    )*) => {$(
        impl<$($generics)*> sealed::Sealed for $tensor {
            keep!($kind);
        }
        impl<$($generics)*> sealed::Sealed for ($tensor, $input) {
            keep!($kind);
        }

        impl<$($generics)*> GroupTensor for $tensor {
            type Input = $input;
        }

        impl<$($generics)*> ownership::sealed::Sealed for $tensor {}
        impl<$($generics)*> OpBuffers for $tensor {
            type Ownership = ownership!($kind);
        }

        impl<$($generics)*> GroupBuffers for $tensor {
            type Operands<'o> = Single<&'o mut $buffer> where Self: 'o;
            fn data_type(&self) -> DataType {
                Borrow::<$buffer>::borrow(self).desc().dtype
            }
            fn operands(&mut self) -> Self::Operands<'_> {
                Single(BorrowMut::<$buffer>::borrow_mut(self))
            }
            fn device(&self) -> usize {
                Borrow::<$buffer>::borrow(self).desc().device
            }
            fn input_len(&self) -> usize {
                Borrow::<$buffer>::borrow(self).desc().len
            }
            fn output_len(&self) -> usize {
                Borrow::<$buffer>::borrow(self).desc().len
            }
        }

        impl<$($generics)*> GroupBuffers for ($tensor, $input) {
            type Operands<'o> = Pair<&'o $read, &'o mut $buffer> where Self: 'o;
            fn data_type(&self) -> DataType {
                Borrow::<$buffer>::borrow(&self.0).desc().dtype
            }
            fn operands(&mut self) -> Self::Operands<'_> {
                let (output, input) = self;
                Pair {
                    input: Borrow::<$read>::borrow(&*input),
                    output: BorrowMut::<$buffer>::borrow_mut(output),
                }
            }
            fn device(&self) -> usize {
                Borrow::<$buffer>::borrow(&self.0).desc().device
            }
            fn input_len(&self) -> usize {
                Borrow::<$read>::borrow(&self.1).desc().len
            }
            fn output_len(&self) -> usize {
                Borrow::<$buffer>::borrow(&self.0).desc().len
            }
        }
    )*};
}

group_buffers! {
    owned [T: NcclType] Tensor<T>, Tensor<T> => Tensor<T>, Tensor<T>;
    owned [T: NcclType] GroupRegistered<Tensor<T>>, GroupRegistered<Tensor<T>>
        => GroupRegistered<Tensor<T>>, GroupRegistered<Tensor<T>>;
    owned [] AnyTensor, AnyTensor => AnyTensor, AnyTensor;
    borrowed ['a, T: NcclType] &'a mut CudaSlice<T>, &'a CudaSlice<T> => CudaSlice<T>, CudaSlice<T>;
    borrowed ['a, T: NcclType] CudaViewMut<'a, T>, CudaView<'a, T>
        => CudaViewMut<'a, T>, CudaView<'a, T>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_buffers_are_kept_with_a_graph_and_borrowed_ones_never_captured() {
        fn kept<B: GroupBuffers>() -> (bool, bool) {
            (keep::<B>().is_some(), keep_all::<B>().is_some())
        }
        assert_eq!(kept::<Tensor<f32>>(), (true, true));
        assert_eq!(kept::<(Tensor<f32>, Tensor<f32>)>(), (true, true));
        assert_eq!(
            kept::<GroupRegistered<Tensor<nccl_tensor::half::bf16>>>(),
            (true, true)
        );
        assert_eq!(kept::<AnyTensor>(), (true, true));
        assert_eq!(kept::<(AnyTensor, AnyTensor)>(), (true, true));
        assert_eq!(kept::<&mut CudaSlice<f32>>(), (false, false));
        assert_eq!(
            kept::<(
                &mut CudaSlice<nccl_tensor::half::bf16>,
                &CudaSlice<nccl_tensor::half::bf16>
            )>(),
            (false, false)
        );
        assert_eq!(kept::<CudaViewMut<'_, i32>>(), (false, false));
        assert_eq!(
            kept::<(CudaViewMut<'_, u8>, CudaView<'_, u8>)>(),
            (false, false)
        );
    }
}
