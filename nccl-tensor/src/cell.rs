//! [`TensorCell`]: a tensor whose element type is known at run time,
//! shared between threads (a framework's tensor handle).

use std::ffi::c_void;
use std::sync::{Arc, PoisonError, RwLock};

use cudarc::driver::CudaStream;
use nccl_core::DataType;

use crate::buffer::{BufferDesc, Tensor, TypedBuffer, TypedBufferMut};
use crate::dtype::NcclType;
use crate::error::{Error, Result};
use crate::tracked::Access;

/// Defines [`AnyTensor`] and the [`IntoAnyTensor`] impls from the table.
macro_rules! any_tensor {
    ([] $($variant:ident { raw: $raw:ident, rust: $rust:ty, $($field:ident: $value:tt),* })*) => {
        /// A typed tensor of any [`NcclType`]: the storage of a
        /// [`TensorCell`].
        ///
        /// One variant per [`DataType`], of the same name.
        #[non_exhaustive]
        #[derive(Debug)]
        pub enum AnyTensor {
            $(
                #[doc = concat!("[`DataType::", stringify!($variant), "`] elements.")]
                $variant(Tensor<$rust>),
            )*
        }

        $(impl IntoAnyTensor for $rust {
            fn into_any(tensor: Tensor<Self>) -> AnyTensor {
                AnyTensor::$variant(tensor)
            }
            fn from_any(any: AnyTensor) -> std::result::Result<Tensor<Self>, AnyTensor> {
                match any {
                    AnyTensor::$variant(tensor) => Ok(tensor),
                    other => Err(other),
                }
            }
            fn from_any_ref(any: &AnyTensor) -> Option<&Tensor<Self>> {
                match any {
                    AnyTensor::$variant(tensor) => Some(tensor),
                    _ => None,
                }
            }
            fn from_any_mut(any: &mut AnyTensor) -> Option<&mut Tensor<Self>> {
                match any {
                    AnyTensor::$variant(tensor) => Some(tensor),
                    _ => None,
                }
            }
        })*
    };
}

nccl_core::for_each_data_type!(any_tensor);

/// The match of [`with_typed!`] (a table callback).
macro_rules! match_any_tensor {
    ([$any:expr, $t:ident => $body:expr] $($variant:ident { $($fields:tt)* })*) => {
        match $any {
            $(AnyTensor::$variant($t) => $body,)*
        }
    };
}

/// Runs `$body` with `$t` bound to the typed tensor inside an [`AnyTensor`].
macro_rules! with_typed {
    ($any:expr, $t:ident => $body:expr) => {
        nccl_core::for_each_data_type!(match_any_tensor, $any, $t => $body)
    };
}

/// Conversions between a typed [`Tensor`] and [`AnyTensor`].
pub trait IntoAnyTensor: NcclType {
    /// Wraps a typed tensor.
    fn into_any(tensor: Tensor<Self>) -> AnyTensor;
    /// The typed tensor, if `any` holds this type.
    fn from_any(any: AnyTensor) -> std::result::Result<Tensor<Self>, AnyTensor>;
    /// A reference to the typed tensor, if `any` holds this type.
    fn from_any_ref(any: &AnyTensor) -> Option<&Tensor<Self>>;
    /// A mutable reference to the typed tensor, if `any` holds this type.
    fn from_any_mut(any: &mut AnyTensor) -> Option<&mut Tensor<Self>>;
}

impl AnyTensor {
    /// The element type.
    pub fn dtype(&self) -> DataType {
        with_typed!(self, t => t.desc().dtype)
    }

    /// The number of elements of the storage.
    pub fn len(&self) -> usize {
        with_typed!(self, t => t.len())
    }

    /// Whether the storage is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The device ordinal.
    pub fn device(&self) -> usize {
        with_typed!(self, t => t.device())
    }

    /// The storage's shape.
    pub fn shape(&self) -> &[usize] {
        with_typed!(self, t => t.shape())
    }
}

impl AnyTensor {
    /// The description operations check.
    pub fn desc(&self) -> BufferDesc<'_> {
        with_typed!(self, t => t.desc())
    }

    /// The stream the storage belongs to: cudarc frees it there, so
    /// whoever must delay the free makes this stream wait.
    pub fn stream(&self) -> &Arc<CudaStream> {
        with_typed!(self, t => t.stream())
    }

    /// [`Tensor::set_producer`] on the typed tensor inside.
    pub fn set_producer(&mut self, check: Arc<dyn crate::ResultCheck>) {
        with_typed!(self, t => t.set_producer(check))
    }

    /// [`TypedBuffer::is_settled_on`] of the typed tensor inside.
    pub fn is_settled_on(&self, stream: &Arc<CudaStream>, access: Access) -> bool {
        with_typed!(self, t => t.is_settled_on(stream, access))
    }

    /// Calls `f` with the device address for reads on `stream`.
    pub(crate) fn read_ptr<R>(
        &self,
        stream: &Arc<CudaStream>,
        f: impl FnOnce(*const c_void) -> R,
    ) -> R {
        with_typed!(self, t => t.read_ptr(stream, f))
    }

    /// Calls `f` with the device address for writes on `stream`.
    pub(crate) fn write_ptr<R>(
        &mut self,
        stream: &Arc<CudaStream>,
        f: impl FnOnce(*mut c_void) -> R,
    ) -> R {
        with_typed!(self, t => t.write_ptr(stream, f))
    }
}

impl<T: IntoAnyTensor> From<Tensor<T>> for AnyTensor {
    fn from(tensor: Tensor<T>) -> Self {
        T::into_any(tensor)
    }
}

impl<T: IntoAnyTensor> TryFrom<AnyTensor> for Tensor<T> {
    /// The tensor as it was, with the type asked for, when it holds
    /// another type.
    type Error = IntoTypedError;

    /// [`AnyTensor::into_typed`].
    fn try_from(any: AnyTensor) -> std::result::Result<Self, IntoTypedError> {
        any.into_typed()
    }
}

impl AnyTensor {
    /// The typed tensor inside, when it holds `T`:
    /// `let grads: Tensor<f32> = any.into_typed()?;`.
    ///
    /// # Errors
    /// [`IntoTypedError`], naming the type held and the type asked for,
    /// when it holds another type; the error gives the tensor back
    /// ([`IntoTypedError::into_tensor`]). `?` turns it into
    /// [`Error::WrongType`] (or a process group's error), dropping the
    /// tensor.
    pub fn into_typed<T: IntoAnyTensor>(self) -> std::result::Result<Tensor<T>, IntoTypedError> {
        T::from_any(self).map_err(|tensor| IntoTypedError {
            tensor: Box::new(tensor),
            requested: T::DATA_TYPE,
        })
    }
}

/// An [`AnyTensor`] that holds another element type than the one asked
/// for ([`AnyTensor::into_typed`], `Tensor::<T>::try_from(any)`), with the
/// tensor given back.
///
/// It converts into [`Error::WrongType`], so `?` works in a function returning
/// this crate's [`Result`].
#[derive(thiserror::Error)]
#[error("the tensor holds {}, not {requested}", tensor.dtype())]
pub struct IntoTypedError {
    /// Boxed: failures are rare, and the success path stays small.
    tensor: Box<AnyTensor>,
    requested: DataType,
}

impl IntoTypedError {
    /// The data type the tensor holds.
    pub fn held(&self) -> DataType {
        self.tensor.dtype()
    }

    /// The data type asked for.
    pub fn requested(&self) -> DataType {
        self.requested
    }

    /// The tensor, as it was.
    pub fn into_tensor(self) -> AnyTensor {
        *self.tensor
    }
}

/// The message first, so `unwrap` and `main`'s error print the sentence.
impl std::fmt::Debug for IntoTypedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self} (nccl_tensor::IntoTypedError)")
    }
}

impl From<IntoTypedError> for Error {
    /// [`Error::WrongType`]; the tensor is dropped.
    fn from(error: IntoTypedError) -> Self {
        Error::WrongType {
            actual: error.held(),
            requested: error.requested,
        }
    }
}

struct CellInner {
    dtype: DataType,
    shape: Vec<usize>,
    strides: Vec<usize>,
    contiguous: bool,
    len: usize,
    device: usize,
    storage: RwLock<AnyTensor>,
}

/// A device tensor whose element type is known at run time, shared between
/// threads (cloning shares it), with its shape, strides, device and
/// contiguity.
///
/// Operations lock it for reading (inputs) or writing (outputs) while they
/// enqueue work.
///
/// ```no_run
/// # fn main() -> nccl_tensor::Result<()> {
/// use nccl_tensor::{Tensor, TensorCell};
/// let device = nccl_core::Device::new(0)?;
/// let stream = device.new_stream()?;
/// let cell = TensorCell::new(Tensor::from_host(&stream, &[1.0f32, 2.0], &[2])?);
/// assert_eq!(cell.dtype(), nccl_core::DataType::Float32);
/// let back: Tensor<f32> = cell.into_tensor().map_err(|_| "shared").unwrap();
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct TensorCell {
    inner: Arc<CellInner>,
}

impl std::fmt::Debug for TensorCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorCell")
            .field("dtype", &self.inner.dtype)
            .field("shape", &self.inner.shape)
            .field("strides", &self.inner.strides)
            .field("device", &self.inner.device)
            .finish()
    }
}

/// Row-major strides (in elements) of `shape`.
pub fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    strides
}

/// Whether `strides` address `shape` as one dense row-major block
/// (dimensions of extent 1 may have any stride; an empty shape addresses
/// nothing and counts as contiguous).
///
/// Shape and strides of different lengths are not.
pub fn is_contiguous(shape: &[usize], strides: &[usize]) -> bool {
    if shape.len() != strides.len() {
        return false;
    }
    if shape.contains(&0) {
        return true; // no element is addressed
    }
    let expected = contiguous_strides(shape);
    shape
        .iter()
        .zip(strides.iter().zip(&expected))
        .all(|(&extent, (&s, &e))| extent == 1 || s == e)
}

impl TensorCell {
    /// A cell holding a contiguous typed tensor.
    pub fn new<T: IntoAnyTensor>(tensor: Tensor<T>) -> Self {
        let shape = tensor.shape().to_vec();
        let strides = contiguous_strides(&shape);
        Self::build(T::into_any(tensor), shape, strides)
    }

    /// A cell over `tensor`'s storage seen with `shape` and `strides` (in
    /// elements, from the first element), like a framework's strided view.
    ///
    /// Operations refuse a cell that is not contiguous.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] if `shape` and `strides` differ in rank,
    /// [`Error::StridesOutOfBounds`] if they reach past the storage.
    pub fn strided<T: IntoAnyTensor>(
        tensor: Tensor<T>,
        shape: &[usize],
        strides: &[usize],
    ) -> Result<Self> {
        if shape.len() != strides.len() {
            return Err(Error::ShapeMismatch {
                shape: shape.to_vec(),
                expected: shape.len(),
                given: strides.len(),
            });
        }
        let needed = if shape.contains(&0) {
            0
        } else {
            1 + shape
                .iter()
                .zip(strides)
                .map(|(&extent, &stride)| (extent - 1) * stride)
                .sum::<usize>()
        };
        if needed > tensor.len() {
            return Err(Error::StridesOutOfBounds {
                shape: shape.to_vec(),
                strides: strides.to_vec(),
                needed,
                storage: tensor.len(),
            });
        }
        Ok(Self::build(
            T::into_any(tensor),
            shape.to_vec(),
            strides.to_vec(),
        ))
    }

    fn build(storage: AnyTensor, shape: Vec<usize>, strides: Vec<usize>) -> Self {
        let contiguous = is_contiguous(&shape, &strides);
        Self {
            inner: Arc::new(CellInner {
                dtype: storage.dtype(),
                len: shape.iter().product(),
                device: storage.device(),
                contiguous,
                shape,
                strides,
                storage: RwLock::new(storage),
            }),
        }
    }

    /// The element type.
    pub fn dtype(&self) -> DataType {
        self.inner.dtype
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.inner.shape
    }

    /// The strides, in elements.
    pub fn strides(&self) -> &[usize] {
        &self.inner.strides
    }

    /// The number of elements (the product of the shape).
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// Whether the cell has no elements.
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// The device ordinal.
    pub fn device(&self) -> usize {
        self.inner.device
    }

    /// Whether the elements are one dense row-major block.
    pub fn is_contiguous(&self) -> bool {
        self.inner.contiguous
    }

    /// The description operations check.
    pub fn desc(&self) -> BufferDesc<'_> {
        BufferDesc {
            dtype: self.inner.dtype,
            len: self.inner.len,
            device: self.inner.device,
            strided: (!self.inner.contiguous)
                .then_some((&self.inner.shape[..], &self.inner.strides[..])),
        }
    }

    /// A stable number for locking cells in a consistent order.
    pub(crate) fn lock_order(&self) -> usize {
        Arc::as_ptr(&self.inner) as usize
    }

    /// Whether `self` and `other` share storage.
    pub fn same_cell(&self, other: &TensorCell) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Runs `f` on the typed tensor (read-locked).
    ///
    /// # Errors
    /// [`Error::WrongType`] if the cell holds another type.
    pub fn with_tensor<T: IntoAnyTensor, R>(&self, f: impl FnOnce(&Tensor<T>) -> R) -> Result<R> {
        let storage = self
            .inner
            .storage
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        T::from_any_ref(&storage)
            .map(f)
            .ok_or(self.wrong_type::<T>())
    }

    /// Runs `f` on the typed tensor (write-locked).
    ///
    /// # Errors
    /// [`Error::WrongType`] if the cell holds another type.
    pub fn with_tensor_mut<T: IntoAnyTensor, R>(
        &self,
        f: impl FnOnce(&mut Tensor<T>) -> R,
    ) -> Result<R> {
        let mut storage = self
            .inner
            .storage
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        T::from_any_mut(&mut storage)
            .map(f)
            .ok_or(self.wrong_type::<T>())
    }

    /// Copies the storage to the host (synchronising `stream`): for a
    /// strided cell, the whole storage it views.
    ///
    /// # Errors
    /// [`Error::WrongType`], a CUDA failure, or [`Error::ProducerFailed`]
    /// when the operation that produced the contents failed (its message
    /// carries the producer's failure), as [`Tensor::to_vec`].
    pub fn to_vec<T: IntoAnyTensor>(&self, stream: &Arc<CudaStream>) -> Result<Vec<T>> {
        self.with_tensor(|tensor: &Tensor<T>| tensor.to_vec(stream))?
    }

    /// The typed tensor back, if this is the last reference and the type
    /// matches; otherwise the cell itself.
    pub fn into_tensor<T: IntoAnyTensor>(self) -> std::result::Result<Tensor<T>, Self> {
        if self.inner.dtype != T::DATA_TYPE {
            return Err(self);
        }
        let inner = Arc::try_unwrap(self.inner).map_err(|inner| Self { inner })?;
        let CellInner {
            shape,
            strides,
            storage,
            ..
        } = inner;
        let storage = storage.into_inner().unwrap_or_else(PoisonError::into_inner);
        T::from_any(storage).map_err(|storage| Self::build(storage, shape, strides))
    }

    fn wrong_type<T: NcclType>(&self) -> Error {
        Error::WrongType {
            actual: self.inner.dtype,
            requested: T::DATA_TYPE,
        }
    }

    /// Calls `f` with the device address for reads on `stream`.
    pub(crate) fn read_ptr<R>(
        &self,
        stream: &Arc<CudaStream>,
        f: impl FnOnce(*const c_void) -> R,
    ) -> R {
        let storage = self
            .inner
            .storage
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        storage.read_ptr(stream, f)
    }

    /// Calls `f` with the device address for writes on `stream`.
    pub(crate) fn write_ptr<R>(
        &self,
        stream: &Arc<CudaStream>,
        f: impl FnOnce(*mut c_void) -> R,
    ) -> R {
        let mut storage = self
            .inner
            .storage
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        storage.write_ptr(stream, f)
    }
}

impl<T: IntoAnyTensor> From<Tensor<T>> for TensorCell {
    fn from(tensor: Tensor<T>) -> Self {
        Self::new(tensor)
    }
}
