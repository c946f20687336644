//! What operations accept: typed buffers (`&buffer` to read, `&mut buffer`
//! to write) and tensor cells (`&cell` for both). Both kinds go through the
//! same operation code; a cell locks itself and hands its typed tensor on.

use std::ffi::c_void;

use std::sync::Arc;

use cudarc::driver::CudaStream;

use crate::buffer::{BufferDesc, TypedBuffer, TypedBufferMut};
use crate::cell::TensorCell;

mod sealed {
    pub trait Sealed {}
}

/// A buffer an operation reads: `&B` for a [`TypedBuffer`] or `&TensorCell`.
pub trait Input: sealed::Sealed {
    /// The description checked before NCCL sees anything.
    fn desc(&self) -> BufferDesc<'_>;
    /// The cell, when this is one (to detect a cell passed twice).
    fn cell(&self) -> Option<&TensorCell>;
    /// Calls `f` with the address, valid for reads on `stream` while `f` runs.
    fn read<R>(self, stream: &Arc<CudaStream>, f: impl FnOnce(*const c_void) -> R) -> R;
}

/// A buffer an operation writes: `&mut B` for a [`TypedBufferMut`] or `&TensorCell`.
pub trait Output: sealed::Sealed {
    /// The description checked before NCCL sees anything.
    fn desc(&self) -> BufferDesc<'_>;
    /// The cell, when this is one.
    fn cell(&self) -> Option<&TensorCell>;
    /// Calls `f` with the address, valid for writes on `stream` while `f` runs.
    fn write<R>(self, stream: &Arc<CudaStream>, f: impl FnOnce(*mut c_void) -> R) -> R;
}

impl<B: TypedBuffer> sealed::Sealed for &B {}

impl<B: TypedBuffer> Input for &B {
    #[inline]
    fn desc(&self) -> BufferDesc<'_> {
        TypedBuffer::desc(*self)
    }
    #[inline]
    fn cell(&self) -> Option<&TensorCell> {
        None
    }
    #[inline]
    fn read<R>(self, stream: &Arc<CudaStream>, f: impl FnOnce(*const c_void) -> R) -> R {
        self.read_ptr(stream, f)
    }
}

impl<B: TypedBufferMut> sealed::Sealed for &mut B {}

impl<B: TypedBufferMut> Output for &mut B {
    #[inline]
    fn desc(&self) -> BufferDesc<'_> {
        TypedBuffer::desc(&**self)
    }
    #[inline]
    fn cell(&self) -> Option<&TensorCell> {
        None
    }
    #[inline]
    fn write<R>(self, stream: &Arc<CudaStream>, f: impl FnOnce(*mut c_void) -> R) -> R {
        self.write_ptr(stream, f)
    }
}

impl sealed::Sealed for &TensorCell {}

impl Input for &TensorCell {
    #[inline]
    fn desc(&self) -> BufferDesc<'_> {
        TensorCell::desc(self)
    }
    #[inline]
    fn cell(&self) -> Option<&TensorCell> {
        Some(self)
    }
    #[inline]
    fn read<R>(self, stream: &Arc<CudaStream>, f: impl FnOnce(*const c_void) -> R) -> R {
        self.read_ptr(stream, f)
    }
}

impl Output for &TensorCell {
    #[inline]
    fn desc(&self) -> BufferDesc<'_> {
        TensorCell::desc(self)
    }
    #[inline]
    fn cell(&self) -> Option<&TensorCell> {
        Some(self)
    }
    #[inline]
    fn write<R>(self, stream: &Arc<CudaStream>, f: impl FnOnce(*mut c_void) -> R) -> R {
        self.write_ptr(stream, f)
    }
}

/// A list of output buffers, one per rank (the list form of `all_gather`):
/// `&mut [B]` for typed buffers or `&[TensorCell]`.
pub trait OutputList: sealed::Sealed {
    /// The number of outputs.
    fn count(&self) -> usize;
    /// The description of output `index`.
    fn desc_at(&self, index: usize) -> Option<BufferDesc<'_>>;
    /// Output `index` when it is a cell (to detect a cell passed twice).
    fn cell_at(&self, index: usize) -> Option<&TensorCell>;
    /// Calls `f` with the address of output `index`, valid for writes on
    /// `stream` while `f` runs; `None` past the end.
    fn write_at<R>(
        &mut self,
        index: usize,
        stream: &Arc<CudaStream>,
        f: impl FnOnce(*mut c_void) -> R,
    ) -> Option<R>;
}

impl<B: TypedBufferMut> sealed::Sealed for &mut [B] {}

impl<B: TypedBufferMut> OutputList for &mut [B] {
    fn count(&self) -> usize {
        self.len()
    }
    fn desc_at(&self, index: usize) -> Option<BufferDesc<'_>> {
        self.get(index).map(TypedBuffer::desc)
    }
    fn cell_at(&self, _index: usize) -> Option<&TensorCell> {
        None
    }
    fn write_at<R>(
        &mut self,
        index: usize,
        stream: &Arc<CudaStream>,
        f: impl FnOnce(*mut c_void) -> R,
    ) -> Option<R> {
        self.get_mut(index)
            .map(|buffer| buffer.write_ptr(stream, f))
    }
}

impl sealed::Sealed for &[TensorCell] {}

impl OutputList for &[TensorCell] {
    fn count(&self) -> usize {
        self.len()
    }
    fn desc_at(&self, index: usize) -> Option<BufferDesc<'_>> {
        self.get(index).map(TensorCell::desc)
    }
    fn cell_at(&self, index: usize) -> Option<&TensorCell> {
        self.get(index)
    }
    fn write_at<R>(
        &mut self,
        index: usize,
        stream: &Arc<CudaStream>,
        f: impl FnOnce(*mut c_void) -> R,
    ) -> Option<R> {
        self.get(index).map(|cell| cell.write_ptr(stream, f))
    }
}
