//! A rank's send and receive buffers, typed by the run's element type.
//!
//! The buffers are nccl-tensor `Tensor<T>`s of the Rust type matching `-d`
//! (`f32` for `float`, `half::bf16` for `bfloat16`, ...), allocated once
//! per collective and type, of `-e` bytes each as nccl-tests allocates
//! them (so that the calls can rotate through them: `crate::rotation`).
//! Every layer works on the same buffers: the raw and core layers through
//! their device addresses, the tensor layer through parts of them
//! ([`Tensor::part`]), the group layer through copies. [`with_pair!`](crate::with_pair) runs code
//! generic over the element type on whichever pair a run uses; the pairs
//! and the mapping come from nccl-core's table of data types.

use std::sync::Arc;

use cudarc::driver::{CudaStream, DevicePtr, ValidAsZeroBits};
use nccl_core::DataType;
use nccl_tensor::{NcclType, Tensor};

use crate::check::Element;
use crate::error::BenchError;

/// An element type the benchmark can allocate, fill, check and hand to
/// every layer: the types of `-d`.
pub trait BenchElement: NcclType + Element + ValidAsZeroBits {}

impl<T: NcclType + Element + ValidAsZeroBits> BenchElement for T {}

/// The send and receive buffer of one rank, of one element type.
#[derive(Debug)]
pub struct Pair<T: NcclType> {
    /// The send buffer (unused in place).
    pub send: Tensor<T>,
    /// The receive buffer (in place, the send data lives here too).
    pub recv: Tensor<T>,
}

/// Defines [`TypedPair`] and its `From<Pair<T>>` impls from the table.
macro_rules! typed_pair {
    ([] $($variant:ident { raw: $raw:ident, rust: $rust:ty, $($field:ident: $value:tt),* })*) => {
        /// [`Pair`] for each element type of `-d`: one variant per
        /// [`DataType`], of the same name.
        #[derive(Debug)]
        pub enum TypedPair {
            $(
                #[doc = concat!("[`DataType::", stringify!($variant), "`] buffers.")]
                $variant(Pair<$rust>),
            )*
        }

        $(impl From<Pair<$rust>> for TypedPair {
            fn from(pair: Pair<$rust>) -> Self {
                TypedPair::$variant(pair)
            }
        })*
    };
}

nccl_core::for_each_data_type!(typed_pair);

/// The match of [`with_pair!`](crate::with_pair) (a table callback).
#[doc(hidden)]
#[macro_export]
macro_rules! __match_typed_pair {
    ([$typed:expr, $pair:ident => $body:expr] $($variant:ident { $($fields:tt)* })*) => {
        match $typed {
            $($crate::buffers::TypedPair::$variant($pair) => $body,)*
        }
    };
}

/// Runs `$body` with `$pair` bound to the typed [`Pair`] inside a
/// [`TypedPair`] (by value, `&` or `&mut`, as `$typed` is), whatever its
/// element type; `$body` is compiled once per type, so it may call generic
/// functions bounded by [`BenchElement`].
macro_rules! with_pair {
    ($typed:expr, $pair:ident => $body:expr) => {
        ::nccl_core::for_each_data_type!($crate::__match_typed_pair, $typed, $pair => $body)
    };
}
pub(crate) use with_pair;

/// A rank's two buffers, with their element type and length.
#[derive(Debug)]
pub struct DeviceBuffers {
    dtype: DataType,
    len: usize,
    pair: TypedPair,
}

fn alloc_pair<T: BenchElement>(
    stream: &Arc<CudaStream>,
    len: usize,
    memory: Memory,
) -> Result<Pair<T>, BenchError> {
    let alloc = || {
        match memory {
            Memory::Cudarc => Tensor::zeros(stream, &[len]),
            Memory::Nccl => Tensor::nccl_zeros(stream, &[len]),
        }
        .map_err(BenchError::from)
    };
    Ok(Pair {
        send: alloc()?,
        recv: alloc()?,
    })
}

/// Decodes little-endian element bytes (as [`crate::check`] encodes them).
fn decode<T: Element>(bytes: &[u8]) -> Vec<T> {
    bytes.chunks_exact(T::SIZE).map(T::read).collect()
}

/// Encodes elements as little-endian bytes.
fn encode<T: Element>(values: &[T]) -> Vec<u8> {
    let mut bytes = vec![0u8; values.len() * T::SIZE];
    for (chunk, value) in bytes.chunks_exact_mut(T::SIZE).zip(values) {
        value.write(chunk);
    }
    bytes
}

fn upload_typed<T: BenchElement>(
    pair: &mut Pair<T>,
    send: &[u8],
    recv: &[u8],
    at: usize,
    stream: &Arc<CudaStream>,
) -> Result<(), BenchError> {
    for (bytes, buffer) in [(send, &mut pair.send), (recv, &mut pair.recv)] {
        let values = decode::<T>(bytes);
        if values.is_empty() {
            continue;
        }
        let available = buffer.len();
        let end = at + values.len();
        let mut view = buffer
            .view_mut(at..end)
            .map_err(|_| too_small("check input", end, available))?;
        stream
            .memcpy_htod(&values, &mut view)
            .map_err(nccl_core::Error::cuda(
                "copying the check inputs to the GPU",
            ))?;
    }
    Ok(())
}

fn download_typed<T: BenchElement>(
    pair: &Pair<T>,
    start: usize,
    len: usize,
    stream: &Arc<CudaStream>,
) -> Result<Vec<u8>, BenchError> {
    let view = pair
        .recv
        .as_slice()
        .try_slice(start..start + len)
        .ok_or_else(|| too_small("check result", start + len, pair.recv.len()))?;
    let values = stream.clone_dtoh(&view).map_err(nccl_core::Error::cuda(
        "copying the check results from the GPU",
    ))?;
    Ok(encode(&values))
}

fn addresses_typed<T: NcclType>(pair: &Pair<T>, stream: &CudaStream) -> (u64, u64) {
    let (send, _record) = pair.send.as_slice().device_ptr(stream);
    let (recv, _record) = pair.recv.as_slice().device_ptr(stream);
    (send, recv)
}

fn too_small(what: &str, needed: usize, len: usize) -> BenchError {
    BenchError::Usage(format!(
        "internal error: the {what} needs {needed} elements but the buffer holds {len}"
    ))
}

/// Who allocates the buffers (`--alloc`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Memory {
    /// cudarc: `cuMemAllocAsync`, from the stream's memory pool.
    Cudarc,
    /// NCCL: `ncclMemAlloc`, as nccl-tests 2.19 allocates its buffers
    /// (registered with the communicator only with `-R 1`).
    Nccl,
}

impl Memory {
    /// What nccl-tests 2.19 allocates with: `ncclMemAlloc` where the loaded
    /// libnccl has it (2.19 and later), else `cudaMalloc`'s stand-in,
    /// cudarc. Without a loadable libnccl, cudarc (the run then fails at
    /// loading, with the library's own error).
    pub fn as_nccl_tests() -> Self {
        match nccl_core::version() {
            Ok(version) if version.at_least(2, 19) => Memory::Nccl,
            _ => Memory::Cudarc,
        }
    }

    /// The allocating call, as the output names it.
    pub const fn call(self) -> &'static str {
        match self {
            Memory::Cudarc => "cuMemAllocAsync (cudarc)",
            Memory::Nccl => "ncclMemAlloc",
        }
    }
}

impl DeviceBuffers {
    /// Two zeroed buffers of `len` (at least one) elements of `dtype` on
    /// `stream`'s device, allocated by cudarc.
    ///
    /// # Errors
    /// An allocation failure.
    pub fn alloc(
        dtype: DataType,
        len: usize,
        stream: &Arc<CudaStream>,
    ) -> Result<Self, BenchError> {
        Self::alloc_in(dtype, len, stream, Memory::Cudarc)
    }

    /// [`DeviceBuffers::alloc`] in `memory`'s allocations.
    ///
    /// # Errors
    /// An allocation failure.
    pub fn alloc_in(
        dtype: DataType,
        len: usize,
        stream: &Arc<CudaStream>,
        memory: Memory,
    ) -> Result<Self, BenchError> {
        let len = len.max(1);
        let pair = nccl_core::with_data_type!(
            dtype,
            T => TypedPair::from(alloc_pair::<T>(stream, len, memory)?),
            _ => {
                return Err(BenchError::Usage(format!(
                    "nccl-perf has no buffers for the element type {dtype}"
                )));
            }
        );
        Ok(Self { dtype, len, pair })
    }

    /// The element type.
    pub fn dtype(&self) -> DataType {
        self.dtype
    }

    /// Elements in each buffer.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Bytes in each buffer.
    pub fn bytes(&self) -> usize {
        self.len * self.dtype.size_bytes()
    }

    /// Whether the buffers hold no element (never: at least one is allocated).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The typed buffers.
    pub fn typed(&self) -> &TypedPair {
        &self.pair
    }

    /// The typed buffers, for writing.
    pub fn typed_mut(&mut self) -> &mut TypedPair {
        &mut self.pair
    }

    /// The device addresses of the send and receive buffers.
    pub fn addresses(&self, stream: &CudaStream) -> (u64, u64) {
        with_pair!(&self.pair, pair => addresses_typed(pair, stream))
    }

    /// Writes `send` and `recv` (encoded elements, possibly empty) to the
    /// two buffers from element `at` on (the checked call's place).
    ///
    /// # Errors
    /// More data than the buffers hold from there, or a CUDA error.
    pub fn upload(
        &mut self,
        send: &[u8],
        recv: &[u8],
        at: usize,
        stream: &Arc<CudaStream>,
    ) -> Result<(), BenchError> {
        with_pair!(&mut self.pair, pair => upload_typed(pair, send, recv, at, stream))
    }

    /// Reads `len` elements of the receive buffer from element `start`, encoded.
    ///
    /// # Errors
    /// A range past the buffer, or a CUDA error.
    pub fn download_recv(
        &self,
        start: usize,
        len: usize,
        stream: &Arc<CudaStream>,
    ) -> Result<Vec<u8>, BenchError> {
        with_pair!(&self.pair, pair => download_typed(pair, start, len, stream))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn element_bytes_round_trip() {
        let values = [1.5f32, -2.0, 3.25];
        let bytes = encode(&values);
        assert_eq!(bytes.len(), 12);
        assert_eq!(decode::<f32>(&bytes), values);
        let halves = [half::bf16::from_f32(1.0), half::bf16::from_f32(-4.0)];
        assert_eq!(decode::<half::bf16>(&encode(&halves)), halves);
        assert!(decode::<u64>(&[]).is_empty());
    }
}
