//! nccl-tensor's test helpers: the element trait [`Elem`] that lets one
//! generic function cover every data type, deterministic inputs, poisoned
//! outputs, exact comparisons, communicator helpers, the operation
//! [`matrix`] of world size 1, the world-size-N helpers of [`world`] and
//! the uneven all_to_all data of [`routing`].

pub mod matrix;
pub mod routing;
pub mod world;

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use cudarc::driver::CudaStream;
use nccl_core::{Device, UniqueId};
use nccl_tensor::{
    CommAccess, Communicator, IntoAnyTensor, NcclType, Registered, Tensor, TensorCell, TypedBuffer,
};

use crate::{POISON, test_values};

/// An element type of the test matrix: conversions through `f64` (exact for
/// every value the tests use), the raw bits for exact comparisons, and the
/// per-type constants of the matrix.
pub trait Elem: NcclType + IntoAnyTensor + PartialEq + Debug {
    /// Short name for messages.
    const NAME: &'static str;
    /// Whether negative values are representable.
    const SIGNED: bool;
    /// Whether it is a floating-point type.
    const FLOAT: bool;
    /// The pre-multiplied sum scalar: 0.5 for floats, 2 for integers, so
    /// `scalar * x` is exact for every input value.
    const PREMUL: f64;
    /// A value no test writes (outputs start with it).
    const POISON: f64;
    /// Seed offset, so every type gets its own data.
    const SEED: u64;
    /// The value nearest `v` (exact for the test values).
    fn from_f64(v: f64) -> Self;
    /// The value as `f64` (exact for every type here but large 64-bit integers).
    fn to_f64(self) -> f64;
    /// The raw bits, zero-extended: equal bits mean equal values.
    fn bits(self) -> u64;
}

macro_rules! int_elem {
    ($($t:ty => $name:literal, $signed:literal, $poison:expr, $seed:literal);* $(;)?) => {$(
        impl Elem for $t {
            const NAME: &'static str = $name;
            const SIGNED: bool = $signed;
            const FLOAT: bool = false;
            const PREMUL: f64 = 2.0;
            const POISON: f64 = $poison;
            const SEED: u64 = $seed;
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn bits(self) -> u64 {
                self as u64 & (u64::MAX >> (64 - 8 * size_of::<$t>()))
            }
        }
    )*};
}

int_elem! {
    i8 => "i8", true, -99.0, 1;
    u8 => "u8", false, 165.0, 2;
    i32 => "i32", true, POISON as f64, 3;
    u32 => "u32", false, 3_735_928_559.0, 4;
    i64 => "i64", true, POISON as f64, 5;
    u64 => "u64", false, 3_735_928_559.0, 6;
}

macro_rules! float_elem {
    ($($t:ty => $name:literal, $poison:expr, $seed:literal, $from:expr, $to:expr, $to_bits:expr);* $(;)?) => {$(
        impl Elem for $t {
            const NAME: &'static str = $name;
            const SIGNED: bool = true;
            const FLOAT: bool = true;
            const PREMUL: f64 = 0.5;
            const POISON: f64 = $poison;
            const SEED: u64 = $seed;
            fn from_f64(v: f64) -> Self {
                let from: fn(f64) -> $t = $from;
                from(v)
            }
            fn to_f64(self) -> f64 {
                let to: fn($t) -> f64 = $to;
                to(self)
            }
            fn bits(self) -> u64 {
                let to_bits: fn($t) -> u64 = $to_bits;
                to_bits(self)
            }
        }
    )*};
}

// The conversions are spelled as paths (`Type::function`), which pick the
// types' inherent functions, not `Elem`'s of the same name.
float_elem! {
    f32 => "f32", POISON as f64, 9, |v| v as f32, f64::from, |v| u64::from(f32::to_bits(v));
    f64 => "f64", POISON as f64, 10, |v| v, |v| v, f64::to_bits;
    half::f16 => "f16", POISON as f64, 7,
        half::f16::from_f64, half::f16::to_f64, |v| u64::from(half::f16::to_bits(v));
    half::bf16 => "bf16", POISON as f64, 8,
        half::bf16::from_f64, half::bf16::to_f64, |v| u64::from(half::bf16::to_bits(v));
    float8::F8E4M3 => "f8e4m3", -96.0, 11,
        float8::F8E4M3::from_f64, |v| float8::F8E4M3::to_f64(&v),
        |v| u64::from(float8::F8E4M3::to_bits(&v));
    float8::F8E5M2 => "f8e5m2", -96.0, 12,
        float8::F8E5M2::from_f64, |v| float8::F8E5M2::to_f64(&v),
        |v| u64::from(float8::F8E5M2::to_bits(&v));
}

/// Longest run of fresh values; longer inputs repeat it (still deterministic,
/// without an `f64` for every element of a 64 MiB buffer).
const FRESH_VALUES: usize = 1 << 20;

/// `len` deterministic non-zero values for `T` from `seed`: the shared
/// `test_values` (small integers 1..=7 with signs; magnitudes only for
/// unsigned types), all exact in every type including fp8.
pub fn values<T: Elem>(seed: u64, len: usize) -> Vec<T> {
    let fresh: Vec<T> = test_values(seed.wrapping_mul(131) + T::SEED, len.min(FRESH_VALUES))
        .into_iter()
        .map(|v| T::from_f64(if T::SIGNED { v } else { v.abs() }))
        .collect();
    if fresh.len() == len {
        return fresh;
    }
    fresh.iter().copied().cycle().take(len).collect()
}

/// `len` copies of `T`'s poison value.
pub fn poison_values<T: Elem>(len: usize) -> Vec<T> {
    vec![T::from_f64(T::POISON); len]
}

/// Checks that `registered`'s registration covers its tensor's memory,
/// whole, and hands it back.
#[track_caller]
pub fn covering<H: CommAccess, T: Elem>(
    registered: Registered<H, Tensor<T>>,
    what: &str,
) -> Registered<H, Tensor<T>> {
    let (address, bytes) = registered.device_range();
    let (registered_address, registered_bytes) = registered.range();
    assert_eq!(
        (registered_address as u64, registered_bytes),
        (address, bytes),
        "{what}: the registration covers the tensor"
    );
    assert_eq!(bytes, registered.len() * size_of::<T>(), "{what}");
    registered
}

/// Who allocates a test tensor.
#[derive(Clone, Copy, Debug)]
pub enum Memory {
    /// cudarc (the stream-ordered pool, or `cuMemAlloc`).
    Cudarc,
    /// NCCL (`Tensor::nccl_zeros`, `ncclMemAlloc`).
    Nccl,
}

/// A 1-D tensor of `values` in `memory`'s allocation.
pub fn upload_in<T: Elem + cudarc::driver::ValidAsZeroBits>(
    stream: &Arc<CudaStream>,
    values: &[T],
    memory: Memory,
) -> Tensor<T> {
    match memory {
        Memory::Cudarc => upload(stream, values),
        Memory::Nccl => {
            let mut tensor = Tensor::nccl_zeros(stream, &[values.len()]).expect("ncclMemAlloc");
            assert!(tensor.is_nccl_memory());
            tensor
                .copy_from_host(stream, values)
                .expect("copy into NCCL memory");
            tensor
        }
    }
}

/// `factor * x` for every element, computed through `f64` and rounded back
/// to `T` (exact for the factors and values used).
pub(crate) fn scaled<T: Elem>(values: &[T], factor: f64) -> Vec<T> {
    if factor == 1.0 {
        return values.to_vec();
    }
    values
        .iter()
        .map(|&v| T::from_f64(factor * v.to_f64()))
        .collect()
}

/// A one-dimensional tensor holding `values`.
pub fn upload<T: Elem>(stream: &Arc<CudaStream>, values: &[T]) -> Tensor<T> {
    Tensor::from_host(stream, values, &[values.len()]).expect("upload")
}

/// A one-dimensional tensor of `len` poison values.
pub fn poisoned<T: Elem>(stream: &Arc<CudaStream>, len: usize) -> Tensor<T> {
    upload(stream, &poison_values::<T>(len))
}

/// A cell holding `values`.
pub fn upload_cell<T: Elem>(stream: &Arc<CudaStream>, values: &[T]) -> TensorCell {
    TensorCell::new(upload(stream, values))
}

/// A cell of `len` poison values.
pub fn poisoned_cell<T: Elem>(stream: &Arc<CudaStream>, len: usize) -> TensorCell {
    TensorCell::new(poisoned::<T>(stream, len))
}

/// The tensor's elements (synchronises the stream).
pub fn download<T: Elem>(stream: &Arc<CudaStream>, tensor: &Tensor<T>) -> Vec<T> {
    tensor.to_vec(stream).expect("download")
}

/// The cell's elements (synchronises the stream).
pub fn download_cell<T: Elem>(stream: &Arc<CudaStream>, cell: &TensorCell) -> Vec<T> {
    cell.to_vec::<T>(stream).expect("download a cell")
}

/// Asserts that `tensor`, downloaded on `stream`, holds `expected`, bit
/// for bit ([`assert_same`]).
#[track_caller]
pub fn assert_holds<T: Elem>(
    stream: &Arc<CudaStream>,
    tensor: &Tensor<T>,
    expected: &[T],
    what: &str,
) {
    assert_same(&download(stream, tensor), expected, what);
}

/// [`assert_holds`] for a cell of `T`.
#[track_caller]
pub fn assert_cell_holds<T: Elem>(
    stream: &Arc<CudaStream>,
    cell: &TensorCell,
    expected: &[T],
    what: &str,
) {
    assert_same(&download_cell::<T>(stream, cell), expected, what);
}

/// Compares bit for bit; on a mismatch reports the count and the first few
/// `(index, got, expected)`, never whole buffers.
#[track_caller]
pub fn assert_same<T: Elem>(got: &[T], expected: &[T], what: &str) {
    assert_eq!(got.len(), expected.len(), "{what}: length");
    let mut wrong = 0usize;
    let mut first = Vec::new();
    for (i, (&g, &e)) in got.iter().zip(expected).enumerate() {
        if g.bits() != e.bits() {
            wrong += 1;
            if first.len() < 5 {
                first.push((i, g.to_f64(), e.to_f64()));
            }
        }
    }
    assert!(
        wrong == 0,
        "{what}: {wrong} of {} {} elements wrong; first (index, got, expected): {first:?}",
        got.len(),
        T::NAME,
    );
}

/// The first of the GPUs `require_gpus(1)` returned.
pub fn first(devices: Vec<Device>) -> Device {
    devices
        .into_iter()
        .next()
        .expect("require_gpus(1) gives one device")
}

/// A communicator of world size 1 on `device`.
pub fn one_rank(device: &Device) -> Communicator {
    Communicator::new(device.clone(), 1, UniqueId::new().expect("unique id"), 0)
        .expect("world-size-1 communicator")
}

/// A stream on the first GPU; `None` when
/// [`require_gpus`](crate::require_gpus) finds none (the test skips).
pub fn stream_on_first_gpu() -> Option<Arc<CudaStream>> {
    let device = first(crate::require_gpus(1)?);
    Some(device.new_stream().expect("stream"))
}

/// A communicator of world size 1 on the first GPU and a stream of that
/// GPU; `None` when [`require_gpus`](crate::require_gpus) finds none (the
/// test skips).
pub fn one_rank_on_first_gpu() -> Option<(Communicator, Arc<CudaStream>)> {
    let device = first(crate::require_gpus(1)?);
    let comm = one_rank(&device);
    let stream = device.new_stream().expect("stream");
    Some((comm, stream))
}

/// Runs `body` on a communicator of world size 1 on the first GPU and a
/// stream of that GPU, both made inside [`within`](crate::within)'s hang
/// guard of `limit` (for scenarios a missing check would deadlock); does
/// nothing when [`require_gpus`](crate::require_gpus) finds no GPU (the
/// test skips).
pub fn one_rank_within(
    what: &str,
    limit: Duration,
    body: impl FnOnce(Communicator, Arc<CudaStream>) + Send + 'static,
) {
    let Some(devices) = crate::require_gpus(1) else {
        return;
    };
    let device = first(devices);
    crate::within(what, limit, move || {
        let comm = one_rank(&device);
        let stream = device.new_stream().expect("stream");
        body(comm, stream);
    });
}

/// One rank per device, each on its own thread with rank = position in
/// `devices`, all sharing one unique id; `body` gets the rank's
/// communicator (built with `nccl_tensor::Communicator::new` on that
/// thread) and a stream of its device. Results come back in rank order.
pub fn per_rank<R: Send + 'static>(
    devices: Vec<Device>,
    body: impl Fn(Communicator, Arc<CudaStream>) -> R + Send + Sync + 'static,
) -> Vec<R> {
    let id = UniqueId::new().expect("unique id");
    let world = devices.len();
    crate::per_device_thread(devices, move |rank, device| {
        let comm = Communicator::new(device.clone(), world, id, rank)
            .unwrap_or_else(|e| panic!("rank {rank}: init: {e}"));
        assert_eq!((comm.rank(), comm.world_size()), (rank, world));
        let stream = device.new_stream().expect("stream");
        body(comm, stream)
    })
}
