//! nccl-core's raw-pointer API on one rank: `f32` buffers, their device
//! pointers, a world-size-1 communicator, and an all_reduce check.

use std::ffi::c_void;
use std::sync::Arc;
use std::time::Duration;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use nccl_core::{Communicator, Config, DataType, Device, ReduceOp, UniqueId};

use crate::{POISON, assert_same_values, require_gpus, test_values};

/// The first GPU, or `None` (after SKIP) without one.
pub fn one_gpu() -> Option<Device> {
    require_gpus(1).map(|mut devices| devices.remove(0))
}

/// A device copy of `values`.
pub fn upload(stream: &Arc<CudaStream>, values: &[f32]) -> CudaSlice<f32> {
    stream.clone_htod(values).expect("upload")
}

/// A host copy of `buffer` (synchronises the stream).
pub fn download(stream: &Arc<CudaStream>, buffer: &CudaSlice<f32>) -> Vec<f32> {
    stream.clone_dtoh(buffer).expect("download")
}

/// [`test_values`] as `f32`.
pub fn input(seed: u64, len: usize) -> Vec<f32> {
    test_values(seed, len)
        .into_iter()
        .map(|v| v as f32)
        .collect()
}

/// `buffer`'s device address, to read from on `stream`.
pub fn ptr(buffer: &CudaSlice<f32>, stream: &CudaStream) -> *const c_void {
    let (pointer, _sync) = buffer.device_ptr(stream);
    pointer as *const c_void
}

/// `buffer`'s device address, to write to on `stream`.
pub fn ptr_mut(buffer: &mut CudaSlice<f32>, stream: &CudaStream) -> *mut c_void {
    let (pointer, _sync) = buffer.device_ptr_mut(stream);
    pointer as *mut c_void
}

/// A communicator of world size 1 on `device`.
pub fn single_rank(device: &Device) -> Communicator {
    Communicator::new(device.clone(), 1, UniqueId::new().expect("unique id"), 0).expect("init")
}

/// A nonblocking config whose init and waits give up after `timeout`.
pub fn nonblocking(timeout: Duration) -> Config {
    Config::new().with_blocking(false).with_timeout(timeout)
}

/// A communicator of world size 1 on `device`, made with `config`.
pub fn single_rank_with(device: &Device, config: &Config) -> Communicator {
    Communicator::with_config(
        device.clone(),
        1,
        UniqueId::new().expect("unique id"),
        0,
        config,
    )
    .expect("init with a config")
}

/// `op` over one rank at several sizes, out of place and in place: with
/// one rank, every reduction of one value is that value.
pub fn check_all_reduce(comm: &Communicator, stream: &Arc<CudaStream>, op: ReduceOp) {
    for len in [1usize, 1001, 4097, (1 << 20) + 7] {
        let data = input(len as u64, len);
        let send = upload(stream, &data);
        let mut recv = upload(stream, &vec![POISON; len]);
        // SAFETY: both buffers hold `len` f32 on the communicator's device
        // and live until the download synchronises the stream.
        let _ = unsafe {
            comm.all_reduce(
                ptr(&send, stream),
                ptr_mut(&mut recv, stream),
                len,
                DataType::Float32,
                op,
                stream,
            )
        }
        .unwrap();
        // With one rank every reduction of one value is that value.
        assert_same_values(
            &download(stream, &recv),
            &data,
            &format!("out-of-place {op} of {len}"),
        );
        let mut inplace = upload(stream, &data);
        let p = ptr_mut(&mut inplace, stream);
        // SAFETY: as above; in-place passes the same pointer twice.
        let _ = unsafe { comm.all_reduce(p, p, len, DataType::Float32, op, stream) }.unwrap();
        assert_same_values(
            &download(stream, &inplace),
            &data,
            &format!("in-place {op} of {len}"),
        );
    }
}
