//! Typed device buffers: the owned [`Tensor`], cudarc's slices and views,
//! and the traits through which operations reach their memory.

use std::ffi::c_void;
use std::ops::RangeBounds;
use std::sync::Arc;

use cudarc::driver::{
    CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, DeviceSlice,
    ValidAsZeroBits,
};
use nccl_core::DataType;

use crate::dtype::NcclType;
use crate::error::{Error, Result};

/// What an operation needs to know about a buffer to check its arguments,
/// without touching the GPU. Plain data, so checks are pure functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferDesc<'a> {
    /// Element type.
    pub dtype: DataType,
    /// Number of elements (the product of the shape).
    pub len: usize,
    /// CUDA device ordinal the memory lives on.
    pub device: usize,
    /// `None` for contiguous memory; otherwise the shape and strides (in
    /// elements) of a strided tensor.
    pub strided: Option<(&'a [usize], &'a [usize])>,
}

impl<'a> BufferDesc<'a> {
    /// A contiguous buffer.
    pub const fn contiguous(dtype: DataType, len: usize, device: usize) -> Self {
        Self {
            dtype,
            len,
            device,
            strided: None,
        }
    }

    /// Whether NCCL can address the buffer as `len` consecutive elements.
    pub const fn is_contiguous(&self) -> bool {
        self.strided.is_none()
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A typed device buffer an operation can read: [`Tensor`], cudarc's
/// `CudaSlice`, `CudaView` and `CudaViewMut`. Sealed.
pub trait TypedBuffer: sealed::Sealed {
    /// The element type.
    type Elem: NcclType;

    /// The buffer's description for argument checks.
    fn desc(&self) -> BufferDesc<'_>;

    /// Calls `f` with the device address, valid for reads by work enqueued
    /// on `stream` while `f` runs. cudarc's stream tracking (if enabled)
    /// orders the access after earlier writes and records it.
    fn read_ptr<R>(&self, stream: &CudaStream, f: impl FnOnce(*const c_void) -> R) -> R;
}

/// A typed device buffer an operation can write.
pub trait TypedBufferMut: TypedBuffer {
    /// Calls `f` with the device address, valid for reads and writes by
    /// work enqueued on `stream` while `f` runs.
    fn write_ptr<R>(&mut self, stream: &CudaStream, f: impl FnOnce(*mut c_void) -> R) -> R;
}

fn slice_desc<T: NcclType>(len: usize, stream: &Arc<CudaStream>) -> BufferDesc<'static> {
    BufferDesc::contiguous(T::DATA_TYPE, len, stream.context().ordinal())
}

macro_rules! typed_buffer {
    ($($ty:ty),*) => {$(
        impl<T: NcclType> sealed::Sealed for $ty {}
        impl<T: NcclType> TypedBuffer for $ty {
            type Elem = T;
            #[inline]
            fn desc(&self) -> BufferDesc<'_> {
                slice_desc::<T>(DeviceSlice::len(self), DeviceSlice::stream(self))
            }
            #[inline]
            fn read_ptr<R>(&self, stream: &CudaStream, f: impl FnOnce(*const c_void) -> R) -> R {
                let (pointer, _record) = DevicePtr::device_ptr(self, stream);
                f(pointer as *const c_void)
            }
        }
    )*};
}

typed_buffer!(CudaSlice<T>, CudaView<'_, T>, CudaViewMut<'_, T>);

macro_rules! typed_buffer_mut {
    ($($ty:ty),*) => {$(
        impl<T: NcclType> TypedBufferMut for $ty {
            #[inline]
            fn write_ptr<R>(&mut self, stream: &CudaStream, f: impl FnOnce(*mut c_void) -> R) -> R {
                let (pointer, _record) = DevicePtrMut::device_ptr_mut(self, stream);
                f(pointer as *mut c_void)
            }
        }
    )*};
}

typed_buffer_mut!(CudaSlice<T>, CudaViewMut<'_, T>);

/// An owned, contiguous device tensor with a shape, over a cudarc
/// `CudaSlice`.
///
/// ```no_run
/// # fn main() -> nccl_tensor::Result<()> {
/// let device = nccl_core::Device::new(0)?;
/// let stream = device.new_stream()?;
/// let tensor = nccl_tensor::Tensor::from_host(&stream, &[1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
/// assert_eq!(tensor.shape(), &[2, 2]);
/// assert_eq!(tensor.to_vec(&stream)?, vec![1.0, 2.0, 3.0, 4.0]);
/// # Ok(()) }
/// ```
pub struct Tensor<T: NcclType> {
    data: CudaSlice<T>,
    shape: Vec<usize>,
}

impl<T: NcclType> std::fmt::Debug for Tensor<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tensor")
            .field("dtype", &T::DATA_TYPE)
            .field("shape", &self.shape)
            .field("device", &self.device())
            .finish()
    }
}

/// The number of elements of `shape`, or an error if `len` differs.
pub(crate) fn check_shape(shape: &[usize], len: usize) -> Result<()> {
    let expected = shape.iter().product::<usize>();
    if expected == len {
        Ok(())
    } else {
        Err(Error::ShapeMismatch {
            shape: shape.to_vec(),
            expected,
            given: len,
        })
    }
}

/// `range` as `start..end` within `0..len`.
pub(crate) fn checked_range(range: &impl RangeBounds<usize>, len: usize) -> Result<(usize, usize)> {
    use std::ops::Bound;
    let start = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.saturating_add(1),
        Bound::Excluded(&e) => e,
        Bound::Unbounded => len,
    };
    if start <= end && end <= len {
        Ok((start, end))
    } else {
        Err(Error::RangeOutOfBounds { start, end, len })
    }
}

impl<T: NcclType> Tensor<T> {
    /// Wraps an existing cudarc allocation (no copy).
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] unless `shape` has `data.len()` elements.
    pub fn from_slice(data: CudaSlice<T>, shape: &[usize]) -> Result<Self> {
        check_shape(shape, data.len())?;
        Ok(Self {
            data,
            shape: shape.to_vec(),
        })
    }

    /// Copies `values` to a new tensor on `stream`'s device.
    ///
    /// # Errors
    /// A shape that does not match `values.len()`, or a CUDA failure.
    pub fn from_host(stream: &Arc<CudaStream>, values: &[T], shape: &[usize]) -> Result<Self> {
        check_shape(shape, values.len())?;
        let data = stream
            .clone_htod(values)
            .map_err(Error::cuda("copying a tensor to the device"))?;
        Ok(Self {
            data,
            shape: shape.to_vec(),
        })
    }

    /// A zero-filled tensor on `stream`'s device.
    ///
    /// # Errors
    /// A CUDA failure (out of memory).
    pub fn zeros(stream: &Arc<CudaStream>, shape: &[usize]) -> Result<Self>
    where
        T: ValidAsZeroBits,
    {
        let len = shape.iter().product();
        let data = stream
            .alloc_zeros(len)
            .map_err(Error::cuda("allocating a tensor"))?;
        Ok(Self {
            data,
            shape: shape.to_vec(),
        })
    }

    /// Copies the tensor back to the host (synchronising `stream`).
    ///
    /// # Errors
    /// A CUDA failure.
    pub fn to_vec(&self, stream: &Arc<CudaStream>) -> Result<Vec<T>> {
        stream
            .clone_dtoh(&self.data)
            .map_err(Error::cuda("copying a tensor to the host"))
    }

    /// Overwrites the tensor with `values` (the same number of elements).
    ///
    /// # Errors
    /// [`Error::WrongLength`] or a CUDA failure.
    pub fn copy_from_host(&mut self, stream: &Arc<CudaStream>, values: &[T]) -> Result<()> {
        if values.len() != self.len() {
            return Err(Error::WrongLength {
                op: "copy_from_host",
                what: "the host data",
                expected: self.len(),
                given: values.len(),
                rule: "the tensor's number of elements",
            });
        }
        stream
            .memcpy_htod(values, &mut self.data)
            .map_err(Error::cuda("copying to a tensor"))
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.data.len() == 0
    }

    /// The device ordinal.
    pub fn device(&self) -> usize {
        self.data.context().ordinal()
    }

    /// The underlying cudarc allocation.
    pub fn as_slice(&self) -> &CudaSlice<T> {
        &self.data
    }

    /// The underlying cudarc allocation, mutably.
    pub fn as_slice_mut(&mut self) -> &mut CudaSlice<T> {
        &mut self.data
    }

    /// A borrowed view of a contiguous range of elements (flat index).
    ///
    /// # Errors
    /// [`Error::RangeOutOfBounds`] when the range reaches past the tensor.
    pub fn view(&self, range: impl RangeBounds<usize>) -> Result<CudaView<'_, T>> {
        let (start, end) = checked_range(&range, self.len())?;
        Ok(self.data.slice(start..end))
    }

    /// A mutable borrowed view of a contiguous range of elements.
    ///
    /// # Errors
    /// [`Error::RangeOutOfBounds`] when the range reaches past the tensor.
    pub fn view_mut(&mut self, range: impl RangeBounds<usize>) -> Result<CudaViewMut<'_, T>> {
        let (start, end) = checked_range(&range, self.len())?;
        Ok(self.data.slice_mut(start..end))
    }

    /// The cudarc allocation and the shape.
    pub fn into_parts(self) -> (CudaSlice<T>, Vec<usize>) {
        (self.data, self.shape)
    }
}

impl<T: NcclType> sealed::Sealed for Tensor<T> {}

impl<T: NcclType> TypedBuffer for Tensor<T> {
    type Elem = T;

    #[inline]
    fn desc(&self) -> BufferDesc<'_> {
        self.data.desc()
    }

    #[inline]
    fn read_ptr<R>(&self, stream: &CudaStream, f: impl FnOnce(*const c_void) -> R) -> R {
        self.data.read_ptr(stream, f)
    }
}

impl<T: NcclType> TypedBufferMut for Tensor<T> {
    #[inline]
    fn write_ptr<R>(&mut self, stream: &CudaStream, f: impl FnOnce(*mut c_void) -> R) -> R {
        self.data.write_ptr(stream, f)
    }
}
