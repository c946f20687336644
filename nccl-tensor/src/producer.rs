//! [`ResultCheck`]: what a tensor's asynchronous producer (a process
//! group's operation, say) leaves on it, so that a host read can refuse a
//! result that may be wrong instead of returning it as a success.
//!
//! An operation whose peer died can end early, its kernels stopped by an
//! abort, leaving partial data in its output; the stream then moves on
//! as if it had finished. Nothing on the stream can tell. The producer
//! can: it knows whether its communicators reported an error by the time
//! the operation was seen to end. [`Tensor::to_vec`](crate::Tensor::to_vec)
//! runs the check after the copy has reached the host and returns
//! [`Error::ProducerFailed`](crate::Error::ProducerFailed) when it fails.
//!
//! What is checked and what is not: a host read of the tensor
//! ([`Tensor::to_vec`](crate::Tensor::to_vec), and
//! [`TensorCell::to_vec`](crate::TensorCell::to_vec) on a cell made from
//! it). Work that the GPU runs on the tensor afterwards (a kernel, a copy
//! through cudarc's slices) cannot be checked before it reads; the
//! producer reports such results as suspect when it learns of a failure.

use std::sync::Arc;

/// The error a [`ResultCheck`] reports: the producer's own error, shared,
/// so a caller that knows the producer can downcast it.
pub type ProducerError = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// A check that the contents a tensor's last producer wrote are its
/// result: `Ok` once the producer knows its operation ended cleanly,
/// `Err` when the operation may have run with a failed peer or was cut
/// short. Called after a host read has synchronized with the operation;
/// it must not block for long (it may query the producer's state).
pub trait ResultCheck: Send + Sync {
    /// Whether the producing operation's result can be trusted.
    ///
    /// # Errors
    /// The producer's failure, when the result may be wrong.
    fn check(&self) -> Result<(), ProducerError>;
}

/// Memory that carries its producer's [`ResultCheck`]: [`Tensor`](crate::Tensor),
/// [`AnyTensor`](crate::AnyTensor), and a [`Registered`](crate::Registered)
/// buffer of either.
pub trait HoldsResult {
    /// Leaves `check` as the check of the operation that last wrote the
    /// memory, replacing any earlier one ([`Tensor::set_producer`](crate::Tensor::set_producer)).
    fn set_producer(&mut self, check: Arc<dyn ResultCheck>);
}

impl<T: crate::NcclType> HoldsResult for crate::Tensor<T> {
    fn set_producer(&mut self, check: Arc<dyn ResultCheck>) {
        crate::Tensor::set_producer(self, check);
    }
}

impl HoldsResult for crate::AnyTensor {
    fn set_producer(&mut self, check: Arc<dyn ResultCheck>) {
        crate::AnyTensor::set_producer(self, check);
    }
}
