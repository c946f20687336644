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
use crate::producer::Meta;
use crate::tracked::{Access, TrackedSlice};

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

pub(crate) mod sealed {
    pub trait Sealed {}
}

/// A typed device buffer an operation can read: [`Tensor`], cudarc's
/// `CudaSlice`, `CudaView` and `CudaViewMut`.
///
/// Sealed.
pub trait TypedBuffer: sealed::Sealed {
    /// The element type.
    type Elem: NcclType;

    /// The buffer's description for argument checks.
    fn desc(&self) -> BufferDesc<'_>;

    /// Calls `f` with the device address, valid for reads by work enqueued
    /// on `stream` while `f` runs. cudarc's stream tracking (if enabled)
    /// orders the access after earlier writes and records it (a
    /// [`Tensor`] defers the record while it stays on one stream).
    fn read_ptr<R>(&self, stream: &Arc<CudaStream>, f: impl FnOnce(*const c_void) -> R) -> R;

    /// Whether an access of this kind from `stream` calls no driver
    /// function (no event wait, no event record): cudarc is not tracking
    /// the memory, or (for a [`Tensor`] and its parts) its last accesses
    /// were made on `stream` and nothing has looked at it since.
    ///
    /// What a stream being captured in a CUDA graph needs: it cannot wait for
    /// an event recorded outside the capture. An operation on the tensor on
    /// `stream` before the capture settles it. cudarc's own slices and views
    /// are settled only when cudarc is not tracking.
    fn is_settled_on(&self, stream: &Arc<CudaStream>, access: Access) -> bool;

    /// The device address of the first element and the length in bytes,
    /// without an access (nothing waits, nothing is recorded): for
    /// registering the memory with a communicator.
    fn device_range(&self) -> (u64, usize);
}

/// A typed device buffer an operation can write.
pub trait TypedBufferMut: TypedBuffer {
    /// Calls `f` with the device address, valid for reads and writes by
    /// work enqueued on `stream` while `f` runs.
    fn write_ptr<R>(&mut self, stream: &Arc<CudaStream>, f: impl FnOnce(*mut c_void) -> R) -> R;
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
            fn read_ptr<R>(&self, stream: &Arc<CudaStream>, f: impl FnOnce(*const c_void) -> R) -> R {
                let (pointer, _record) = DevicePtr::device_ptr(self, stream);
                f(pointer as *const c_void)
            }
            fn is_settled_on(&self, stream: &Arc<CudaStream>, _access: Access) -> bool {
                !stream.context().is_managing_stream_synchronization()
            }
            fn device_range(&self) -> (u64, usize) {
                let (pointer, record) = DevicePtr::device_ptr(self, DeviceSlice::stream(self));
                // No work uses the address: the access needs no record.
                std::mem::forget(record);
                (pointer, DeviceSlice::num_bytes(self))
            }
        }
    )*};
}

typed_buffer!(CudaSlice<T>, CudaView<'_, T>, CudaViewMut<'_, T>);

macro_rules! typed_buffer_mut {
    ($($ty:ty),*) => {$(
        impl<T: NcclType> TypedBufferMut for $ty {
            #[inline]
            fn write_ptr<R>(&mut self, stream: &Arc<CudaStream>, f: impl FnOnce(*mut c_void) -> R) -> R {
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
/// Operations on a tensor skip cudarc's per-access event wait and record
/// while the tensor stays on one stream, and make them (into cudarc's own
/// events) before anything else can see the memory: an operation on
/// another stream, [`as_slice`](Self::as_slice) and the other borrows,
/// [`into_parts`](Self::into_parts) and drop. Code that uses the memory
/// through cudarc is ordered exactly as with cudarc alone; an operation
/// costs what NCCL's call costs (`TrackedSlice`, in `tracked.rs`, has
/// the rules).
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
    data: TrackedSlice<T>,
    /// Boxed: a tensor stays small enough to be passed back by value in
    /// errors.
    pub(crate) meta: Box<Meta>,
}

impl<T: NcclType> std::fmt::Debug for Tensor<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tensor")
            .field("dtype", &T::DATA_TYPE)
            .field("shape", &self.meta.shape)
            .field("device", &self.device())
            .finish()
    }
}

/// The number of elements of `shape`, or an error if it overflows `usize`.
pub(crate) fn element_count(shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .try_fold(1usize, |count, &extent| count.checked_mul(extent))
        .ok_or_else(|| Error::ShapeOverflow {
            shape: shape.to_vec(),
        })
}

/// Checks that `shape` has `len` elements.
pub(crate) fn check_shape(shape: &[usize], len: usize) -> Result<()> {
    let expected = element_count(shape)?;
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
            data: TrackedSlice::new(data),
            meta: Meta::new(shape),
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
            .map_err(nccl_core::Error::cuda("copying a tensor to the device"))?;
        Ok(Self {
            data: TrackedSlice::new(data),
            meta: Meta::new(shape),
        })
    }

    /// A zero-filled tensor on `stream`'s device.
    ///
    /// # Errors
    /// [`Error::ShapeOverflow`] for a shape of more than `usize::MAX`
    /// elements, or a CUDA failure (out of memory).
    pub fn zeros(stream: &Arc<CudaStream>, shape: &[usize]) -> Result<Self>
    where
        T: ValidAsZeroBits,
    {
        let len = element_count(shape)?;
        let data = stream
            .alloc_zeros(len)
            .map_err(nccl_core::Error::cuda("allocating a tensor"))?;
        Ok(Self {
            data: TrackedSlice::new(data),
            meta: Meta::new(shape),
        })
    }

    /// A zero-filled tensor on `stream`'s device, in memory that NCCL
    /// allocates (`ncclMemAlloc`, NCCL 2.19+; see
    /// [`NcclMemory`](nccl_core::NcclMemory)): the memory to register with
    /// a communicator ([`Communicator::register`](crate::Communicator::register))
    /// for NVLink SHARP and zero-copy transfers, as PyTorch's
    /// `ncclMemAlloc`-backed memory pool provides.
    ///
    /// It works everywhere a tensor does, with cudarc's stream tracking.
    ///
    /// Freeing is not stream-ordered: dropping the tensor waits, on the
    /// host, for the device to finish its queued work, then frees the
    /// memory (`ncclMemFree`), as `cudaFree` would; keep such tensors for
    /// long. [`into_parts`](Self::into_parts) refuses them (cudarc would
    /// free the memory with the wrong call).
    ///
    /// # Errors
    /// An empty or overflowing shape, no libnccl or one older than 2.19,
    /// or NCCL's or CUDA's failure (out of memory).
    pub fn nccl_zeros(stream: &Arc<CudaStream>, shape: &[usize]) -> Result<Self>
    where
        T: ValidAsZeroBits,
    {
        let len = element_count(shape)?;
        let bytes =
            len.checked_mul(std::mem::size_of::<T>())
                .ok_or_else(|| Error::ShapeOverflow {
                    shape: shape.to_vec(),
                })?;
        let device = nccl_core::Device::from_context(Arc::clone(stream.context()));
        let memory = nccl_core::NcclMemory::new(&device, bytes)?;
        let mut data = TrackedSlice::in_nccl_memory(memory, len, stream)?;
        stream
            .memset_zeros(&mut data.slice_mut())
            .map_err(nccl_core::Error::cuda("zeroing a tensor in NCCL memory"))?;
        Ok(Self {
            data,
            meta: Meta::new(shape),
        })
    }

    /// Whether the tensor's memory is NCCL's ([`Tensor::nccl_zeros`]).
    pub fn is_nccl_memory(&self) -> bool {
        self.data.is_nccl_memory()
    }

    /// Copies the tensor back to the host (synchronising `stream`), then
    /// runs the check its last asynchronous producer left on it, if any
    /// ([`Tensor::set_producer`]).
    ///
    /// # Errors
    /// A CUDA failure, or [`Error::ProducerFailed`]: the operation that
    /// wrote the contents (a process group's, say) may have run with a
    /// failed peer, so the values read are not its result.
    pub fn to_vec(&self, stream: &Arc<CudaStream>) -> Result<Vec<T>> {
        let values = stream
            .clone_dtoh(self.data.slice())
            .map_err(nccl_core::Error::cuda("copying a tensor to the host"))?;
        self.check_producer()?;
        Ok(values)
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
            .memcpy_htod(values, &mut self.data.slice_mut())
            .map_err(nccl_core::Error::cuda("copying to a tensor"))?;
        // Every element was overwritten: no earlier producer's result is left.
        self.meta.producer = None;
        Ok(())
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.meta.shape
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

    /// The stream the storage belongs to: cudarc frees it there, so
    /// whoever must delay the free makes this stream wait. Unlike
    /// [`as_slice`](Self::as_slice), it records nothing.
    pub fn stream(&self) -> &Arc<CudaStream> {
        self.data.stream()
    }

    /// The underlying cudarc allocation, for cudarc's API on any stream
    /// (a write deferred by an operation is recorded first).
    pub fn as_slice(&self) -> &CudaSlice<T> {
        self.data.slice()
    }

    /// A mutable cudarc view of the whole allocation (every access
    /// deferred by an operation is recorded first).
    ///
    /// A view, not `&mut CudaSlice`: the allocation itself cannot be replaced
    /// under the tensor.
    pub fn as_slice_mut(&mut self) -> CudaViewMut<'_, T> {
        self.data.slice_mut()
    }

    /// A borrowed cudarc view of a contiguous range of elements (flat
    /// index), as [`as_slice`](Self::as_slice).
    ///
    /// To pass part of a tensor to an operation, [`part`](Self::part) keeps the
    /// deferral.
    ///
    /// # Errors
    /// [`Error::RangeOutOfBounds`] when the range reaches past the tensor.
    pub fn view(&self, range: impl RangeBounds<usize>) -> Result<CudaView<'_, T>> {
        let (start, end) = checked_range(&range, self.len())?;
        Ok(self.data.slice().slice(start..end))
    }

    /// A mutable borrowed cudarc view of a contiguous range of elements,
    /// as [`as_slice_mut`](Self::as_slice_mut); see also
    /// [`part_mut`](Self::part_mut).
    ///
    /// # Errors
    /// [`Error::RangeOutOfBounds`] when the range reaches past the tensor.
    pub fn view_mut(&mut self, range: impl RangeBounds<usize>) -> Result<CudaViewMut<'_, T>> {
        let len = self.len();
        let (start, end) = checked_range(&range, len)?;
        self.data
            .range_mut(start..end)
            .ok_or(Error::RangeOutOfBounds { start, end, len })
    }

    /// A contiguous range of elements (flat index) that operations read,
    /// with the tensor's deferred stream tracking (a bucket of a flat
    /// gradient buffer, say).
    ///
    /// # Errors
    /// [`Error::RangeOutOfBounds`] when the range reaches past the tensor.
    pub fn part(&self, range: impl RangeBounds<usize>) -> Result<TensorPart<'_, T>> {
        let (start, end) = checked_range(&range, self.len())?;
        Ok(TensorPart {
            tensor: self,
            start,
            len: end - start,
        })
    }

    /// A contiguous range of elements that operations write (and read),
    /// with the tensor's deferred stream tracking.
    ///
    /// # Errors
    /// [`Error::RangeOutOfBounds`] when the range reaches past the tensor.
    pub fn part_mut(&mut self, range: impl RangeBounds<usize>) -> Result<TensorPartMut<'_, T>> {
        let (start, end) = checked_range(&range, self.len())?;
        Ok(TensorPartMut {
            tensor: self,
            start,
            len: end - start,
        })
    }

    /// The cudarc allocation (every deferred access recorded) and the
    /// shape; `Err(self)` for a tensor in NCCL's memory
    /// ([`Tensor::nccl_zeros`]), which cudarc must not free.
    pub fn into_parts(self) -> std::result::Result<(CudaSlice<T>, Vec<usize>), Self> {
        let Self { data, meta } = self;
        match data.into_inner() {
            Ok(slice) => Ok((slice, meta.shape.into_vec())),
            Err(data) => Err(Self { data, meta }),
        }
    }

    fn desc_of(&self, len: usize) -> BufferDesc<'static> {
        BufferDesc::contiguous(T::DATA_TYPE, len, self.device())
    }

    /// [`TypedBuffer::read_ptr`] from element `start` on.
    #[inline]
    fn read_at<R>(
        &self,
        start: usize,
        stream: &Arc<CudaStream>,
        f: impl FnOnce(*const c_void) -> R,
    ) -> R {
        self.data
            .read(stream, |base| f(offset::<T>(base, start) as *const c_void))
    }
}

/// The address `start` elements past `base`.
fn offset<T>(base: u64, start: usize) -> u64 {
    base + (start * std::mem::size_of::<T>()) as u64
}

impl<T: NcclType> sealed::Sealed for Tensor<T> {}

impl<T: NcclType> TypedBuffer for Tensor<T> {
    type Elem = T;

    #[inline]
    fn desc(&self) -> BufferDesc<'_> {
        self.desc_of(self.len())
    }

    #[inline]
    fn read_ptr<R>(&self, stream: &Arc<CudaStream>, f: impl FnOnce(*const c_void) -> R) -> R {
        self.read_at(0, stream, f)
    }

    fn is_settled_on(&self, stream: &Arc<CudaStream>, access: Access) -> bool {
        self.data.is_settled_on(stream, access)
    }

    fn device_range(&self) -> (u64, usize) {
        (self.data.address(), self.len() * std::mem::size_of::<T>())
    }
}

impl<T: NcclType> TypedBufferMut for Tensor<T> {
    #[inline]
    fn write_ptr<R>(&mut self, stream: &Arc<CudaStream>, f: impl FnOnce(*mut c_void) -> R) -> R {
        self.data.write(stream, |address| f(address as *mut c_void))
    }
}

/// Part of a [`Tensor`] that operations read ([`Tensor::part`]).
#[derive(Clone, Copy)]
pub struct TensorPart<'a, T: NcclType> {
    tensor: &'a Tensor<T>,
    start: usize,
    len: usize,
}

/// Part of a [`Tensor`] that operations write ([`Tensor::part_mut`]).
pub struct TensorPartMut<'a, T: NcclType> {
    tensor: &'a mut Tensor<T>,
    start: usize,
    len: usize,
}

impl<T: NcclType> std::fmt::Debug for TensorPart<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorPart")
            .field("tensor", self.tensor)
            .field("range", &(self.start..self.start + self.len))
            .finish()
    }
}

impl<T: NcclType> std::fmt::Debug for TensorPartMut<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorPartMut")
            .field("tensor", &*self.tensor)
            .field("range", &(self.start..self.start + self.len))
            .finish()
    }
}

impl<T: NcclType> sealed::Sealed for TensorPart<'_, T> {}
impl<T: NcclType> sealed::Sealed for TensorPartMut<'_, T> {}

macro_rules! part_buffer {
    ($($part:ident),*) => {$(
        impl<T: NcclType> TypedBuffer for $part<'_, T> {
            type Elem = T;

            #[inline]
            fn desc(&self) -> BufferDesc<'_> {
                self.tensor.desc_of(self.len)
            }

            #[inline]
            fn read_ptr<R>(&self, stream: &Arc<CudaStream>, f: impl FnOnce(*const c_void) -> R) -> R {
                self.tensor.read_at(self.start, stream, f)
            }

            fn is_settled_on(&self, stream: &Arc<CudaStream>, access: Access) -> bool {
                self.tensor.data.is_settled_on(stream, access)
            }

            fn device_range(&self) -> (u64, usize) {
                let size = std::mem::size_of::<T>();
                (offset::<T>(self.tensor.data.address(), self.start), self.len * size)
            }
        }
    )*};
}

part_buffer!(TensorPart, TensorPartMut);

impl<T: NcclType> TypedBufferMut for TensorPartMut<'_, T> {
    #[inline]
    fn write_ptr<R>(&mut self, stream: &Arc<CudaStream>, f: impl FnOnce(*mut c_void) -> R) -> R {
        let start = self.start;
        self.tensor
            .data
            .write(stream, |base| f(offset::<T>(base, start) as *mut c_void))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_count_their_elements_without_overflow() {
        assert_eq!(element_count(&[]).expect("scalar"), 1);
        assert_eq!(element_count(&[2, 3, 4]).expect("small"), 24);
        let error = element_count(&[usize::MAX, 2]).expect_err("overflow");
        assert!(matches!(error, Error::ShapeOverflow { .. }), "{error}");
        assert!(error.to_string().contains("overflows usize"), "{error}");
        let error = check_shape(&[2, 3], 5).expect_err("mismatch");
        assert!(
            error
                .to_string()
                .contains("holds 6 elements, but the data has 5"),
            "{error}"
        );
    }
}
