//! [`GroupBuffers`]: the buffers one operation takes on one device, as
//! the group owns them: tensors, registered tensors and run-time typed
//! tensors, alone or as `(output, input)` pairs.

use nccl_core::DataType;
use nccl_tensor::{
    AnyTensor, BatchOperands, NcclType, Operands, Pair, Single, Tensor, TypedBuffer,
};

use super::GroupRegistered;
use crate::work::WorkBuffers;

mod sealed {
    pub trait Sealed {}
}

/// One device's buffers of an operation, as the group owns them: a tensor
/// (in place, or the one buffer of a send or receive) or an
/// `(output, input)` pair, of a [`Tensor`] of one element type or of
/// [`AnyTensor`]s, whose type is known at run time (to mix data types in
/// one [`Coalesced`](crate::Coalesced) batch). Sealed.
pub trait GroupBuffers: WorkBuffers + sealed::Sealed {
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
/// as `(output, input)` pairs of one type, their out-of-place forms): a
/// [`Tensor`], a [`GroupRegistered`] tensor or an [`AnyTensor`]. Sealed.
pub trait GroupTensor: GroupBuffers {}

/// [`GroupBuffers`] for a tensor type and for `(output, input)` pairs of it.
macro_rules! group_buffers {
    ($([$($generics:tt)*] $tensor:ty;)*) => {$(
        impl<$($generics)*> sealed::Sealed for $tensor {}
        impl<$($generics)*> sealed::Sealed for ($tensor, $tensor) {}

        impl<$($generics)*> GroupTensor for $tensor {}

        impl<$($generics)*> GroupBuffers for $tensor {
            type Operands<'a> = Single<&'a mut $tensor>;
            fn data_type(&self) -> DataType {
                self.desc().dtype
            }
            fn operands(&mut self) -> Self::Operands<'_> {
                Single(self)
            }
            fn device(&self) -> usize {
                self.desc().device
            }
            fn input_len(&self) -> usize {
                self.len()
            }
            fn output_len(&self) -> usize {
                self.len()
            }
        }

        impl<$($generics)*> GroupBuffers for ($tensor, $tensor) {
            type Operands<'a> = Pair<&'a $tensor, &'a mut $tensor>;
            fn data_type(&self) -> DataType {
                self.0.desc().dtype
            }
            fn operands(&mut self) -> Self::Operands<'_> {
                let (output, input) = self;
                Pair {
                    input: &*input,
                    output,
                }
            }
            fn device(&self) -> usize {
                self.0.desc().device
            }
            fn input_len(&self) -> usize {
                self.1.len()
            }
            fn output_len(&self) -> usize {
                self.0.len()
            }
        }
    )*};
}

group_buffers! {
    [T: NcclType] Tensor<T>;
    [T: NcclType] GroupRegistered<Tensor<T>>;
    [] AnyTensor;
}
