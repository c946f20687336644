//! [`WorkBuffers`]: what an operation's [`Work`](crate::Work) may hold
//! until the GPU is done with it, owned or borrowed, and how a work keeps
//! them boxed once their type is gone (a graph's, a dropped work's).

use std::sync::Arc;

use cudarc::driver::{
    CudaEvent, CudaSlice, CudaStream, CudaView, CudaViewMut, DeviceSlice, DriverError,
};
use nccl_tensor::{Access, AnyTensor, HoldsResult, NcclType, ResultCheck, Tensor, TypedBuffer};

/// Buffers an operation holds until its work is done: owned ones, which a
/// [`Work`](crate::Work) may keep after every borrow of the caller has ended (and
/// which a CUDA graph keeps: [`GraphCapture::end`](crate::GraphCapture::end)
/// and [`ProcessGroup::custom`](crate::ProcessGroup::custom) take
/// `'static` buffers), or borrowed cudarc memory (`&mut CudaSlice<T>`,
/// `&CudaSlice<T>`, `CudaViewMut<T>`, `CudaView<T>`), which ties the work
/// to the borrow (see [`ProcessGroup`](crate::ProcessGroup)'s "Borrowed
/// memory").
pub trait WorkBuffers: Send {
    /// Makes every stream that may free these buffers wait for `event`, so
    /// dropping them cannot free memory the operation still uses.
    ///
    /// # Errors
    /// A CUDA failure.
    fn order_after(&self, event: &CudaEvent) -> std::result::Result<(), DriverError>;

    /// Whether every stream that may free these buffers is `stream` (the
    /// one [`WorkBuffers::order_after`] would make wait): an operation on
    /// `stream` then needs no end event of its own for their release.
    /// Buffers of your own answer `false` unless they say otherwise.
    fn frees_on(&self, stream: &Arc<CudaStream>) -> bool {
        let _ = stream;
        false
    }

    /// Whether an operation on `stream` that uses these buffers as
    /// `access` needs no driver call to order them
    /// ([`TypedBuffer::is_settled_on`]): what an operation captured in a
    /// CUDA graph needs.
    ///
    /// A pair is `(output, input)`: the output as `access`, the input read.
    /// Buffers of your own (for
    /// [`ProcessGroup::custom`](crate::ProcessGroup::custom)) answer `true`:
    /// ordering them in a capture is yours to do.
    fn is_settled_on(&self, stream: &Arc<CudaStream>, access: Access) -> bool {
        let _ = (stream, access);
        true
    }

    /// Leaves the operation's result check on the buffers, so that reading
    /// them on the host fails when the operation may have run with a failed
    /// peer ([`nccl_tensor::producer`]).
    ///
    /// Buffers of your own (for
    /// [`ProcessGroup::custom`](crate::ProcessGroup::custom)) carry none: check
    /// with [`Work::synchronize`](crate::Work::synchronize) before reading
    /// them.
    fn set_producer(&mut self, check: Arc<dyn ResultCheck>) {
        let _ = check;
    }
}

impl WorkBuffers for () {
    fn order_after(&self, _event: &CudaEvent) -> std::result::Result<(), DriverError> {
        Ok(())
    }

    fn frees_on(&self, _stream: &Arc<CudaStream>) -> bool {
        true
    }
}

impl<T: NcclType> WorkBuffers for Tensor<T> {
    fn order_after(&self, event: &CudaEvent) -> std::result::Result<(), DriverError> {
        // cudarc frees a slice on the stream it was allocated on.
        self.as_slice().stream().wait(event)
    }

    fn frees_on(&self, stream: &Arc<CudaStream>) -> bool {
        Arc::ptr_eq(Tensor::stream(self), stream)
    }

    fn is_settled_on(&self, stream: &Arc<CudaStream>, access: Access) -> bool {
        TypedBuffer::is_settled_on(self, stream, access)
    }

    fn set_producer(&mut self, check: Arc<dyn ResultCheck>) {
        HoldsResult::set_producer(self, check);
    }
}

impl WorkBuffers for AnyTensor {
    fn order_after(&self, event: &CudaEvent) -> std::result::Result<(), DriverError> {
        self.stream().wait(event)
    }

    fn frees_on(&self, stream: &Arc<CudaStream>) -> bool {
        Arc::ptr_eq(self.stream(), stream)
    }

    fn is_settled_on(&self, stream: &Arc<CudaStream>, access: Access) -> bool {
        AnyTensor::is_settled_on(self, stream, access)
    }

    fn set_producer(&mut self, check: Arc<dyn ResultCheck>) {
        HoldsResult::set_producer(self, check);
    }
}

/// Borrowed cudarc memory: dropping a borrow frees nothing, but the
/// caller may free the memory once the borrow ends, on the stream cudarc
/// frees it on.
///
/// The work of borrowed memory is never captured, and carries no result check:
/// see [`Work::synchronize`].
macro_rules! borrowed_work_buffers {
    ($($ty:ty),*) => {$(
        impl<T: NcclType> WorkBuffers for $ty {
            fn order_after(&self, event: &CudaEvent) -> std::result::Result<(), DriverError> {
                // cudarc frees a slice on the stream it was allocated on
                // (a view's: its slice's).
                self.stream().wait(event)
            }

            fn frees_on(&self, stream: &Arc<CudaStream>) -> bool {
                Arc::ptr_eq(self.stream(), stream)
            }
        }
    )*};
}

borrowed_work_buffers!(
    &mut CudaSlice<T>,
    &CudaSlice<T>,
    CudaViewMut<'_, T>,
    CudaView<'_, T>
);

/// Boxes owned buffers dropped unwaited in a captured work, to live as
/// long as the graph ([`boxed`]).
pub(crate) type Boxer<B> = fn(B) -> Box<dyn WorkBuffers>;

/// How a captured work keeps its buffers: `None` for borrowed buffers,
/// which are never captured.
pub(crate) type Keep<B> = Option<Boxer<B>>;

/// Boxes owned buffers for a graph's keeper (a [`Boxer`]).
pub(crate) fn boxed<B: WorkBuffers + 'static>(buffers: B) -> Box<dyn WorkBuffers> {
    Box::new(buffers)
}

impl<A: WorkBuffers, B: WorkBuffers> WorkBuffers for (A, B) {
    fn order_after(&self, event: &CudaEvent) -> std::result::Result<(), DriverError> {
        self.0.order_after(event)?;
        self.1.order_after(event)
    }

    fn frees_on(&self, stream: &Arc<CudaStream>) -> bool {
        self.0.frees_on(stream) && self.1.frees_on(stream)
    }

    fn is_settled_on(&self, stream: &Arc<CudaStream>, access: Access) -> bool {
        self.0.is_settled_on(stream, access) && self.1.is_settled_on(stream, Access::Read)
    }

    /// The output only: the operation read the input, so its contents are
    /// still those of whatever wrote it before.
    fn set_producer(&mut self, check: Arc<dyn ResultCheck>) {
        self.0.set_producer(check);
    }
}

impl<B: WorkBuffers> WorkBuffers for Vec<B> {
    fn order_after(&self, event: &CudaEvent) -> std::result::Result<(), DriverError> {
        self.iter()
            .try_for_each(|buffers| buffers.order_after(event))
    }

    fn frees_on(&self, stream: &Arc<CudaStream>) -> bool {
        self.iter().all(|buffers| buffers.frees_on(stream))
    }

    fn is_settled_on(&self, stream: &Arc<CudaStream>, access: Access) -> bool {
        self.iter()
            .all(|buffers| buffers.is_settled_on(stream, access))
    }

    fn set_producer(&mut self, check: Arc<dyn ResultCheck>) {
        if let Some((last, rest)) = self.split_last_mut() {
            rest.iter_mut()
                .for_each(|buffers| buffers.set_producer(Arc::clone(&check)));
            last.set_producer(check);
        }
    }
}
