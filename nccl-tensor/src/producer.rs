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
//! [`Error::ProducerFailed`] when it fails.
//!
//! What is checked and what is not: a host read of the tensor
//! ([`Tensor::to_vec`](crate::Tensor::to_vec), and
//! [`TensorCell::to_vec`](crate::TensorCell::to_vec) on a cell made from
//! it). Work that the GPU runs on the tensor afterwards (a kernel, a copy
//! through cudarc's slices) cannot be checked before it reads; the
//! producer reports such results as suspect when it learns of a failure.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::{NcclType, Tensor};

/// The error a [`ResultCheck`] reports: the producer's own error, shared,
/// so a caller that knows the producer can downcast it.
pub type ProducerError = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// A check that the contents a tensor's last producer wrote are its
/// result: `Ok` once the producer knows its operation ended cleanly,
/// `Err` when the operation may have run with a failed peer or was cut
/// short.
///
/// Called after a host read has synchronized with the operation; it must not
/// block for long (it may query the producer's state).
pub trait ResultCheck: Send + Sync {
    /// Whether the producing operation's result can be trusted.
    ///
    /// # Errors
    /// The producer's failure, when the result may be wrong.
    fn check(&self) -> Result<(), ProducerError>;
}

/// Memory that carries its producer's [`ResultCheck`]: [`Tensor`],
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

/// What a tensor holds besides its memory.
pub(crate) struct Meta {
    pub(crate) shape: Box<[usize]>,
    /// The check of the asynchronous operation that last wrote the
    /// contents, which host reads run ([`crate::producer`]).
    pub(crate) producer: Option<Arc<dyn ResultCheck>>,
}

impl Meta {
    pub(crate) fn new(shape: &[usize]) -> Box<Self> {
        Box::new(Self {
            shape: shape.into(),
            producer: None,
        })
    }
}

impl<T: NcclType> Tensor<T> {
    /// Leaves `check` on the tensor as the check of the asynchronous
    /// operation that last wrote it: host reads ([`Tensor::to_vec`]) run
    /// it and fail when it fails.
    ///
    /// For producers, such as a process group handing its operation's tensors
    /// back; it replaces any earlier one.
    pub fn set_producer(&mut self, check: Arc<dyn ResultCheck>) {
        self.meta.producer = Some(check);
    }

    /// Runs the producer's check, if the tensor has one: what
    /// [`Tensor::to_vec`] runs after its copy, for callers that read the
    /// memory another way (through [`Tensor::as_slice`], say) and want
    /// the same guarantee once they have synchronized with it.
    ///
    /// # Errors
    /// [`Error::ProducerFailed`] when the check fails.
    pub fn check_producer(&self) -> Result<()> {
        match &self.meta.producer {
            Some(check) => check
                .check()
                .map_err(|error| Error::ProducerFailed { error }),
            None => Ok(()),
        }
    }
}
