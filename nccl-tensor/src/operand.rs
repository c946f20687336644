//! What operations accept: typed buffers (`&buffer` to read, `&mut buffer`
//! to write) and tensor cells (`&cell` for both). Both kinds go through the
//! same operation code; a cell locks itself and hands its typed tensor on.
//! An operation's buffers come as one of the [`Operands`] forms.

use std::ffi::c_void;

use std::sync::Arc;

use cudarc::driver::CudaStream;

use crate::buffer::{BufferDesc, TypedBuffer, TypedBufferMut};
use crate::cell::{AnyTensor, TensorCell};
use crate::error::{Error, Result};
use crate::plan::{Layout, Layouts};

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

impl sealed::Sealed for &AnyTensor {}

impl Input for &AnyTensor {
    #[inline]
    fn desc(&self) -> BufferDesc<'_> {
        AnyTensor::desc(self)
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

impl sealed::Sealed for &mut AnyTensor {}

impl Output for &mut AnyTensor {
    #[inline]
    fn desc(&self) -> BufferDesc<'_> {
        AnyTensor::desc(self)
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

/// Which of the three [`Operands`] forms an operation's buffers come in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Form {
    /// [`Single`].
    Single,
    /// [`ReadOnly`].
    ReadOnly,
    /// [`Pair`].
    Pair,
}

impl Form {
    /// The layout of buffers given in this form to an operation that
    /// takes `takes`: a single buffer is in place for an operation that
    /// takes either layout, and the input or output alone for one that
    /// takes only that.
    ///
    /// `output` is a pair's output (ignored otherwise).
    pub fn layout<'d>(
        self,
        takes: Layouts,
        first: BufferDesc<'d>,
        output: Option<BufferDesc<'d>>,
    ) -> Layout<'d> {
        match (self, output) {
            (Form::Pair, Some(output)) => Layout::OutOfPlace {
                input: first,
                output,
            },
            (Form::ReadOnly, _) => Layout::Input(first),
            (Form::Single, _) | (Form::Pair, None) => match takes {
                Layouts::Input => Layout::Input(first),
                Layouts::Output => Layout::Output(first),
                Layouts::Either | Layouts::OutOfPlace => Layout::InPlace(first),
            },
        }
    }
}

/// The buffers of one operation, in one of the three forms operations
/// take: [`Single`], [`ReadOnly`] or [`Pair`].
pub trait Operands: sealed::Sealed {
    /// The layout for an operation that takes `takes`: a single buffer is
    /// in place for an operation that takes either layout, and the input
    /// or output alone for one that takes only that.
    fn layout(&self, takes: Layouts) -> Layout<'_>;
    /// Refuses one cell as both input and output: its lock would deadlock.
    ///
    /// # Errors
    /// [`Error::AliasedCells`].
    fn check_cells(&self, op: &'static str) -> Result<()>;
    /// Calls `f` with the send and receive addresses, valid on `stream`
    /// while `f` runs (a single buffer's for both).
    fn access<R>(
        self,
        stream: &Arc<CudaStream>,
        f: impl FnOnce(*const c_void, *mut c_void) -> R,
    ) -> R;
}

/// One buffer, read and written: in place for the operations that reduce
/// or broadcast, the data sent for a send (recorded as a write, which
/// orders at least as much as a read), the destination of a receive.
#[derive(Debug)]
pub struct Single<O>(pub O);

/// One buffer that is only read: the data of a send.
#[derive(Debug)]
pub struct ReadOnly<I>(pub I);

/// Separate input and output (out of place).
#[derive(Debug)]
pub struct Pair<I, O> {
    /// What this rank contributes.
    pub input: I,
    /// Where this rank's result goes.
    pub output: O,
}

impl<O: Output> sealed::Sealed for Single<O> {}

impl<O: Output> Operands for Single<O> {
    #[inline]
    fn layout(&self, takes: Layouts) -> Layout<'_> {
        Form::Single.layout(takes, self.0.desc(), None)
    }
    #[inline]
    fn check_cells(&self, _op: &'static str) -> Result<()> {
        Ok(())
    }
    #[inline]
    fn access<R>(
        self,
        stream: &Arc<CudaStream>,
        f: impl FnOnce(*const c_void, *mut c_void) -> R,
    ) -> R {
        self.0.write(stream, |p| f(p, p))
    }
}

impl<I: Input> sealed::Sealed for ReadOnly<I> {}

impl<I: Input> Operands for ReadOnly<I> {
    #[inline]
    fn layout(&self, takes: Layouts) -> Layout<'_> {
        Form::ReadOnly.layout(takes, self.0.desc(), None)
    }
    #[inline]
    fn check_cells(&self, _op: &'static str) -> Result<()> {
        Ok(())
    }
    #[inline]
    fn access<R>(
        self,
        stream: &Arc<CudaStream>,
        f: impl FnOnce(*const c_void, *mut c_void) -> R,
    ) -> R {
        self.0.read(stream, |p| f(p, std::ptr::null_mut()))
    }
}

impl<I: Input, O: Output> sealed::Sealed for Pair<I, O> {}

impl<I: Input, O: Output> Operands for Pair<I, O> {
    #[inline]
    fn layout(&self, takes: Layouts) -> Layout<'_> {
        Form::Pair.layout(takes, self.input.desc(), Some(self.output.desc()))
    }
    #[inline]
    fn check_cells(&self, op: &'static str) -> Result<()> {
        match (self.input.cell(), self.output.cell()) {
            (Some(a), Some(b)) if a.same_cell(b) => Err(Error::AliasedCells { op }),
            _ => Ok(()),
        }
    }
    #[inline]
    fn access<R>(
        self,
        stream: &Arc<CudaStream>,
        f: impl FnOnce(*const c_void, *mut c_void) -> R,
    ) -> R {
        let Pair { input, output } = self;
        // Two cells are locked in address order, so two threads passing the
        // same pair in opposite roles cannot deadlock.
        let output_first = match (input.cell(), output.cell()) {
            (Some(a), Some(b)) => a.lock_order() > b.lock_order(),
            _ => false,
        };
        if output_first {
            output.write(stream, |recv| input.read(stream, |send| f(send, recv)))
        } else {
            input.read(stream, |send| output.write(stream, |recv| f(send, recv)))
        }
    }
}
